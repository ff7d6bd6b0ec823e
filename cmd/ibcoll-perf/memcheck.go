package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/tlmlx5"
)

// Ranks of one process connect lazily: a rank's queue pair to a peer, with its
// receive and send slots, is made when a collective first talks to that peer, so a
// rank holds about 2 of them for the tree algorithms, log2(n) for recursive doubling,
// and n-1 for pairwise exchange. A task's graph has a few operations per rank for a
// tree and O(n) for a ring. Measured with this tool on soft0 (peak RSS of `-np N -c
// COLL --alg ALG -b 8 -e 8`, 2 cores; see docs/design.md): about 0.5 MB per rank
// (context, device-memory pool, team, CQ), 16-42 KB per queue pair with trees and 42-44
// KB with pairwise alltoall's full mesh at 64 and 256 ranks (its CQs, one per 32 peers,
// included), and 0.9-1.3 KB per operation (allreduce ring against rd at 256 and 512
// ranks). A queue pair is priced at the larger. The estimate takes, per rank, the
// base, the run's links (tlmlx5.Footprint of each collective at each size, summed over
// the collectives: queue pairs stay until the team closes) and its largest graph (one
// size's request is closed before the next); a run whose estimate exceeds
// what the machine has available is refused before anything is built. (The full mesh
// of the first design took 48 KB per queue pair and n(n-1) of them: -np 1024 needed
// about 48 GiB; pairwise alltoall still makes one, and is refused where it does not
// fit.)
const (
	perQPBytes    = 48 << 10
	perOpBytes    = 1536
	perRankBytes  = 640 << 10
	baseBytes     = 16 << 20
	agreeLinks    = 2 // the completion agreement's k-nomial tree, on average
	memAvailShare = 4 // refuse beyond 3/4 of MemAvailable: the estimates are not exact
)

// maxNP is the largest -np: the largest team on which every algorithm but the two
// rings (allreduce ring, reduce srg, bcast sag) runs (tlmlx5's tags). Memory refuses
// far fewer on most machines (checkLocalMemory).
const maxNP = 32767

// meminfoPath is where MemAvailable is read; tests point it elsewhere.
var meminfoPath = "/proc/meminfo"

// runEstimate is the memory that n ranks of one process take in this run for their
// contexts, teams, connections and task graphs, with the links and operations per
// rank it counted.
func (o *options) runEstimate(n int) (est uint64, links, ops float64, err error) {
	cfg, err := o.config(0)
	if err != nil {
		return 0, 0, 0, err
	}
	es := int64(o.dtype.Size())
	for _, c := range o.colls {
		alg, _ := o.algOf(c, cfg)
		sizes := o.sizes()
		if c == coll.Barrier {
			sizes = []int64{0}
		}
		most := 0.0
		for _, sz := range sizes {
			l, k, err := tlmlx5.Footprint(c, alg, n, chooseBytes(c, n, int(sz/es), o.root, o.inPlace, int(es)))
			if err != nil {
				return 0, 0, 0, fmt.Errorf("%v at %d bytes: %w", c, sz, err)
			}
			most, ops = max(most, l), max(ops, k)
		}
		links += most
	}
	links = min(links+agreeLinks, float64(max(n-1, 0)))
	perRank := float64(perRankBytes) + links*perQPBytes + ops*perOpBytes
	return baseBytes + uint64(float64(n)*perRank), links, ops, nil
}

// dataBytes is what the run's data buffers take at their largest row, summed over the
// n ranks: each rank's source and destination (none for CUDA memory: the GPU holds
// them), the host buffer its input and output go through, and with --check the input,
// the expected output and the output's canary it makes each iteration (garbage, but
// the heap holds it until the collector runs). The root's buffers are counted once and
// another rank's n-1 times. A run of 200 ranks with 98760-byte alltoall blocks and
// --check, which this did not count, grew to 24 GB and was killed for memory.
func (o *options) dataBytes(n int) uint64 {
	es := o.dtype.Size()
	var most uint64
	for _, c := range o.colls {
		if c == coll.Barrier {
			continue
		}
		for _, sz := range o.sizes() {
			count := int(sz) / es
			root := newShape(c, o.root, n, count, o.root, o.inPlace)
			other := newShape(c, (o.root+1)%n, n, count, o.root, o.inPlace)
			most = max(most, o.rankData(root, es)+uint64(n-1)*o.rankData(other, es))
		}
	}
	return most
}

// rankData is one rank's data bytes in host memory for shape s (see dataBytes).
func (o *options) rankData(s shape, es int) uint64 {
	src, dst := uint64(s.srcCount*es), uint64(s.dstCount*es)
	b := max(src, dst) // the host buffer
	if o.check {
		b += src + 2*dst
	}
	if !isCUDA(o.mem.src) {
		b += src
	}
	if !isCUDA(o.mem.dst) {
		b += dst
	}
	return b
}

func isCUDA(t mem.Type) bool { return t == mem.CUDA || t == mem.CUDAManaged }

// chooseBytes is the size tlmlx5's default choice goes by for c at count elements per
// block: a rank's block for gather and scatter, else the root's larger buffer.
func chooseBytes(c coll.CollType, n, count, root int, inPlace bool, es int) int {
	if c == coll.Gather || c == coll.Scatter {
		return count * es
	}
	s := newShape(c, root, n, count, root, inPlace)
	return max(s.srcCount, s.dstCount) * es
}

// checkLocalMemory refuses -np n when its estimate exceeds 3/4 of the machine's
// available memory. Where MemAvailable cannot be read, nothing is refused.
func checkLocalMemory(o *options, n int) error {
	f, err := os.Open(meminfoPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	avail, ok := memAvailable(f)
	if !ok {
		return nil
	}
	est, links, ops, err := o.runEstimate(n)
	if err != nil {
		return badArg("-np", "%d ranks: %v", n, err)
	}
	data := o.dataBytes(n)
	limit := avail / memAvailShare * (memAvailShare - 1)
	if est+data <= limit {
		return nil
	}
	if est > limit {
		return badArg("-np", "%d ranks in one process need about %s for their teams alone (%s per rank, %.0f queue pairs per rank at about %s each, and task graphs of %.0f operations per rank at about %s each), more than 3/4 of the %s this machine has available (MemAvailable); use fewer ranks or other collectives, or one process per rank under a launcher",
			n, human(est), human(perRankBytes), links, human(perQPBytes), ops, human(perOpBytes), human(avail))
	}
	return badArg("-np", "%d ranks in one process need about %s: %s for their teams and %s for the data buffers of the largest row (-e), more than 3/4 of the %s this machine has available (MemAvailable); use a smaller -e, fewer ranks, or one process per rank under a launcher",
		n, human(est+data), human(est), human(data), human(avail))
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
	case b >= 1<<10 && b%(1<<10) != 0 && b < 10<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	case b >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
