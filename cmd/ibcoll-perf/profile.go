package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startProfile starts a CPU profile into path and returns what ends it: where a
// run spends its CPU (the transport's polling, the reductions, the Go scheduler's
// wake-ups) is the question behind most timings this tool prints. A profile that
// could not be written is said on stderr, since the user asked for it.
func startProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "ibcoll-perf: --cpuprofile:", err)
			return
		}
		fmt.Fprintf(os.Stderr, "ibcoll-perf: CPU profile in %s\n", path)
	}, nil
}
