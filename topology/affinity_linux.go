package topology

import "golang.org/x/sys/unix"

// processCPUs is the calling thread's CPU affinity (the process's, unless
// someone narrowed this thread's).
func processCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var out []int
	for c := 0; c < len(set)*64 && len(out) < set.Count(); c++ {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}
