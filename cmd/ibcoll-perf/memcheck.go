package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Ranks of one process connect as a full mesh: n ranks hold n(n-1) queue pairs, each
// with its queues, control slots and completion bookkeeping. Measured with this tool
// on soft0 (peak RSS of `-np N -c barrier -n 2 -w 0`, 2 cores, Go 1.26):
//
//	-np    queue pairs   peak RSS
//	  8             56     11 MB
//	 16            240     20 MB
//	 32            992     53 MB
//	 64          4,032    188 MB
//	128         16,256    771 MB
//
// that is about 45-48 KB per queue pair over a base of about 10 MB. -np 1024 needs
// about 48 GiB, and was OOM-killed after taking the machine's memory from
// everything else; so a local run whose estimate exceeds what the machine has
// available is refused before anything is built.
const (
	perQPBytes    = 48 << 10
	baseBytes     = 16 << 20
	memAvailShare = 4 // refuse beyond 3/4 of MemAvailable: the data buffers come on top
)

// meminfoPath is where MemAvailable is read; tests point it elsewhere.
var meminfoPath = "/proc/meminfo"

// meshEstimate is the memory that n ranks of one process take for their connections.
func meshEstimate(n int) uint64 {
	return baseBytes + uint64(n)*uint64(max(n-1, 0))*perQPBytes
}

// checkLocalMemory refuses -np n when its estimate exceeds 3/4 of the machine's
// available memory. Where MemAvailable cannot be read, nothing is refused.
func checkLocalMemory(n int) error {
	f, err := os.Open(meminfoPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	avail, ok := memAvailable(f)
	if !ok {
		return nil
	}
	est := meshEstimate(n)
	if est <= avail/memAvailShare*(memAvailShare-1) {
		return nil
	}
	return badArg("-np", "%d ranks in one process need about %s for their connections alone (a full mesh: %d queue pairs at about %s each), more than 3/4 of the %s this machine has available (MemAvailable); use fewer ranks, or one process per rank under a launcher",
		n, human(est), n*(n-1), human(perQPBytes), human(avail))
}

// memAvailable reads MemAvailable (in bytes) from /proc/meminfo's text.
func memAvailable(r io.Reader) (uint64, bool) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != "MemAvailable" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, false
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil || kb > 1<<50 {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

// human prints a byte count in binary units.
func human(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
