package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Ranks of one process connect lazily: a rank's queue pair to a peer, with its
// receive and send slots, is made when a collective first talks to that peer, so a
// rank holds O(log n) of them for the tree and recursive-doubling algorithms, 2 for
// rings, and up to n-1 for linear and pairwise ones (chosen by default only for
// small teams) or after a failure (the abort floods every peer). Measured with this
// tool on soft0 (peak RSS of `-np N -c gather,allreduce -b 8 -e 8`, 2 cores; see
// docs/design.md for the table): about 0.5 MB per rank (context, device-memory pool,
// team, CQ) and 20-25 KB per queue pair. The estimate takes the per-rank base plus
// estLinks(n) queue pairs per rank; a run whose estimate exceeds what the machine has
// available is refused before anything is built. (The full mesh this replaced took
// 48 KB per queue pair and n(n-1) of them: -np 1024 needed about 48 GiB.)
// maxNP is the largest -np: the largest team on which every algorithm but the two
// rings (allreduce ring, reduce srg, bcast sag) runs (tlmlx5's tags). Memory refuses
// far fewer on most machines (checkLocalMemory).
const maxNP = 32767

const (
	perQPBytes    = 24 << 10
	perRankBytes  = 640 << 10
	baseBytes     = 16 << 20
	memAvailShare = 4 // refuse beyond 3/4 of MemAvailable: the data buffers come on top
)

// estLinks is the queue pairs per rank the estimate counts: a k-nomial tree's and
// recursive doubling's peers and the agreement's, with room to spare, and the
// whole team when it is small.
func estLinks(n int) int {
	lg := 0
	for 1<<lg < n {
		lg++
	}
	return min(max(n-1, 0), 4*lg+16)
}

// meminfoPath is where MemAvailable is read; tests point it elsewhere.
var meminfoPath = "/proc/meminfo"

// meshEstimate is the memory that n ranks of one process take for their contexts,
// teams and connections.
func meshEstimate(n int) uint64 {
	return baseBytes + uint64(n)*(perRankBytes+uint64(estLinks(n))*perQPBytes)
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
	return badArg("-np", "%d ranks in one process need about %s for their teams alone (%s per rank and up to %d queue pairs per rank at about %s each), more than 3/4 of the %s this machine has available (MemAvailable); use fewer ranks, or one process per rank under a launcher",
		n, human(est), human(perRankBytes), estLinks(n), human(perQPBytes), human(avail))
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
