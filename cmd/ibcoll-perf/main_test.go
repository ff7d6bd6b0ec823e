package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/reduce"
	"github.com/ibcoll/ibcoll/verbs"
)

// capture runs the tool in-process and returns its exit status and output.
func capture(t *testing.T, args ...string) (int, string) {
	t.Helper()
	old, oldErr := os.Stdout, os.Stderr
	r, w, err := os.Pipe()
	require.NoError(t, err)
	os.Stdout, os.Stderr = w, w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	code := run(args)
	os.Stdout, os.Stderr = old, oldErr
	w.Close()
	out := <-done
	return code, string(out)
}

func TestBadArguments(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(dir+"/x.svg", 0o755))
	cases := []struct {
		args []string
		name string // the argument the message must name
	}{
		{[]string{"-c", "gathr"}, "-c"},
		{[]string{"-c", "gather,scatter,gather"}, "-c"},
		{[]string{"--plot", dir + "/same.png", "--cpuprofile", dir + "/./same.png"}, "--cpuprofile"},
		{[]string{"--trace", dir + "/t.out", "--cpuprofile", dir + "/t.out"}, "--trace"},
		{[]string{"-b", "1X"}, "-b"},
		{[]string{"-b", "4K", "-e", "1K"}, "-e"},
		{[]string{"-f", "1"}, "-f"},
		{[]string{"-d", "int3"}, "-d"},
		{[]string{"-o", "sqrt"}, "-o"},
		{[]string{"-c", "allreduce", "-d", "float32", "-o", "band"}, "-o"},
		{[]string{"-n", "0"}, "-n"},
		{[]string{"-w", "-1"}, "-w"},
		{[]string{"-m", "gpu"}, "-m"},
		{[]string{"-m", "host,sim,cuda"}, "-m"},
		{[]string{"--rank-mem", "x:host"}, "--rank-mem"},
		{[]string{"--rank-mem", "1:host;1:sim"}, "--rank-mem"},
		{[]string{"-np", "4", "--rank-mem", "9:host,sim"}, "--rank-mem"},
		{[]string{"-np", "4", "-r", "4"}, "-r"},
		{[]string{"--plot", "out.jpg"}, "--plot"},
		{[]string{"--fault", "boom@1"}, "fault"},
		{[]string{"-np", "2", "--fault", "alloc@5"}, "--fault"},
		{[]string{"--timeout", "0s"}, "--timeout"},
		{[]string{"-np", "-1"}, "-np"},
		{[]string{"-np", "32768"}, "-np"}, // past tlmlx5's tags
		{[]string{"extra"}, "arguments"},
		// Found by an audit of hostile flags (session 40): -np 0 ran 2 ranks, a
		// timeout near the largest duration overflowed the store's deadline, an
		// empty --device entry fell back to the default device, an --alg for a
		// collective not in -c was dropped, and --plot into a missing directory
		// failed after the whole sweep, with exit status 1.
		{[]string{"-np", "0"}, "-np"},
		{[]string{"--timeout", "2562047h47m"}, "--timeout"},
		{[]string{"--device", ","}, "--device"},
		{[]string{"--device", "soft0,,soft0"}, "--device"},
		{[]string{"-c", "gather", "--alg", "scatter=linear"}, "--alg"},
		{[]string{"--plot", "/nonexistent-dir/bw.svg"}, "--plot"},
		{[]string{"--plot", dir + "/x.svg"}, "is a directory"},
		// A device this host lacks was opened by every rank and failed as a
		// collective (exit status 3).
		{[]string{"-np", "2", "--device", "nosuch"}, `--device: no device "nosuch"`},
		// Sizes start at one element: no row would have run.
		{[]string{"-b", "1", "-e", "2", "-d", "int32"}, "-e: maximum size 2 is below one int32 element"},
		{[]string{"-np", "2", "--device", "soft0,nosuch"}, `--device: no device "nosuch"`},
		// A plot with nothing to draw failed after the run, with exit status 1 (a
		// failed check's), and -b 0 -e 0 left an empty file (session 41's audit).
		{[]string{"-np", "2", "-c", "barrier", "--plot", dir + "/b.svg"}, "--plot: nothing to plot"},
		{[]string{"-np", "2", "-b", "0", "-e", "0", "--plot", dir + "/z.svg"}, "--plot: nothing to plot"},
	}
	for _, c := range cases {
		code, out := capture(t, c.args...)
		require.Equal(t, exitUsage, code, "%v: %s", c.args, out)
		require.Contains(t, out, c.name, "%v: the message names the argument", c.args)
	}
	for _, f := range []string{"b.svg", "z.svg"} {
		require.NoFileExists(t, filepath.Join(dir, f))
	}
}

func TestSizes(t *testing.T) {
	for in, want := range map[string]int64{"8": 8, "4K": 4096, "1m": 1 << 20, "2G": 2 << 30, "0": 0} {
		got, err := parseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "-1", "K", "1.5M", "17G"} {
		_, err := parseSize(bad)
		require.Error(t, err, bad)
	}
	o, err := parseOptions([]string{"-b", "1K", "-e", "64K", "-f", "4"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []int64{1024, 4096, 16384, 65536}, o.sizes())
	// -b 0 is one row of empty collectives, then the sweep from one byte (it
	// looped for ever, growing, before session 40).
	o, err = parseOptions([]string{"-b", "0", "-e", "4"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []int64{0, 1, 2, 4}, o.sizes())
	o, err = parseOptions([]string{"-b", "0", "-e", "0"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []int64{0}, o.sizes())
	// From one element: rows below it were empty collectives that said they moved
	// 1 or 2 bytes.
	o, err = parseOptions([]string{"-b", "0", "-e", "16", "-d", "int32"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []int64{0, 4, 8, 16}, o.sizes())
	o, err = parseOptions([]string{"-b", "1", "-e", "16", "-d", "float64"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []int64{8, 16}, o.sizes())
	// Sizes that are not whole elements are rounded down to them: the rows said 10,
	// 30 and 90 bytes where 8, 28 and 88 moved.
	o, err = parseOptions([]string{"-b", "10", "-e", "100", "-f", "3", "-d", "float32"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []int64{8, 28, 88}, o.sizes())
}

func TestVLayout(t *testing.T) {
	counts, displs, extent := vLayout(5, 3)
	require.Equal(t, []int{2, 3, 4, 2, 3}, counts)
	// Reverse rank order with one-element gaps: unsorted displacements.
	require.Equal(t, []int{16, 12, 7, 4, 0}, displs)
	require.Equal(t, 19, extent)
}

// TestEveryCollectiveChecked sweeps every collective through the real
// tool on soft0 with --check, strong asymmetry across ranks, JSON output
// and a plot, and in-place and persistent variants.
func TestEveryCollectiveChecked(t *testing.T) {
	seed := testutil.Rand(t).Uint64()
	dir := t.TempDir()
	var all []string
	for _, c := range coll.CollTypes() {
		all = append(all, c.String())
	}
	variants := [][]string{
		{"-d", "int32", "-o", "sum"},
		{"-d", "float16", "-o", "max", "-i"},
		{"-d", "bfloat16", "-o", "prod", "-p", "-n", "5"},
		{"-d", "uint16", "-o", "bxor", "-p", "-i", "-r", "2"},
		{"-d", "float64", "-o", "avg", "-r", "4"},
	}
	for i, v := range variants {
		plotFile := filepath.Join(dir, "p.svg")
		args := append([]string{"-np", "5", "-c", strings.Join(all, ","), "-b", "8", "-e", "4K", "-f", "8", "-n", "3", "-w", "1",
			"--check", "--json", "--plot", plotFile, "--rank-mem", "0:host,sim;1:sim,host;3:sim,sim", "-m", "host",
			"-seed", fmt.Sprint(seed + uint64(i))}, v...)
		code, out := capture(t, args...)
		require.Equal(t, exitOK, code, "%v\n%s", args, out)
		var doc jsonDoc
		require.NoError(t, json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &doc), out)
		require.Equal(t, 5, doc.Ranks)
		require.Equal(t, reduce.Kernels(), doc.ReduceKernels)
		colls := map[string]bool{}
		for _, r := range doc.Rows {
			want := "ok" // a barrier has no data to compare
			if r.Collective == coll.Barrier.String() {
				want = "-"
			}
			require.Equal(t, want, r.Check, "%+v", r)
			require.Empty(t, r.Errors)
			require.True(t, r.MinUS <= r.P50US && r.P50US <= r.MaxUS, "median between min and max: %+v", r)
			require.True(t, r.RankMaxUS > 0 && r.RankMaxUS <= r.AvgUS*(1+1e-9), "slowest rank's mean at most the mean of the slowest per iteration: %+v", r)
			colls[r.Collective] = true
		}
		require.Len(t, colls, len(all), "every collective ran")
		svg, err := os.ReadFile(plotFile)
		require.NoError(t, err)
		require.Contains(t, string(svg), "<polyline")
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{7}, 7},
		{[]float64{9, 1, 5}, 5},
		{[]float64{4, 1, 3, 100}, 3.5},
		{[]float64{2, 2, 30, 2, 1}, 2},
	} {
		in := append([]float64(nil), c.in...)
		require.Equal(t, c.want, median(c.in), "%v", in)
		require.Equal(t, in, c.in, "median leaves its input as it was")
	}
}

func TestTableOutput(t *testing.T) {
	code, out := capture(t, "-np", "3", "-c", "gather,scatter", "-b", "1K", "-e", "4K", "-n", "2", "--check", "-m", "host,sim")
	require.Equal(t, exitOK, code, out)
	for _, want := range []string{"# collective gather", "# collective scatter", "memory src host, dst sim", "3 ranks", "busbw GB/s", "check"} {
		require.Contains(t, out, want)
	}
	require.Equal(t, 6, strings.Count(out, "  ok\n"), "a checked row per size and collective:\n%s", out)
	require.NotContains(t, out, "# reduction kernels", "gather and scatter reduce nothing")

	// A reduction's header names the kernels that its timings depend on.
	code, out = capture(t, "-np", "2", "-c", "allreduce", "-b", "1K", "-e", "1K", "-n", "2", "-d", "float32")
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "# reduction kernels: "+reduce.Kernels()+" ")
}

// TestFaultsEndEveryRank: every injected fault ends the run with exit 3,
// reported by every rank; only stall waits for the deadline.
func TestFaultsEndEveryRank(t *testing.T) {
	for _, c := range []struct{ coll, mem, fault string }{
		{"gather", "host,sim", "alloc@0"}, // the seed's hang
		{"gather", "host,sim", "copyout@0"},
		{"scatter", "sim,host", "copyin@0"},
		{"scatter", "host,host", "reg@2"},
		{"bcast", "host,host", "init@3"},
		{"allreduce", "host,host", "qperr@1"},
		{"reduce", "host,host", "stall@2"},
	} {
		t.Run(c.fault, func(t *testing.T) {
			start := time.Now()
			code, out := capture(t, "-np", "5", "-c", c.coll, "-b", "1K", "-e", "1K", "--check", "-m", c.mem, "--fault", c.fault, "--timeout", "3s")
			took := time.Since(start)
			require.Equal(t, exitCollective, code, out)
			require.Equal(t, 5, strings.Count(out, "#   rank "), "every rank reports the failure:\n%s", out)
			if !strings.HasPrefix(c.fault, "stall") {
				require.Less(t, took, 3*time.Second, "only a stall may take the timeout")
			}
			t.Logf("%s: exit %d after %v", c.fault, code, took.Round(time.Millisecond))
		})
	}
}

// TestCheckDetectsCorruption: --check fails the run on one flipped byte of one rank's
// output, for every collective (this test once flipped a byte of its own copy of the
// expected data and asserted only that the copy differed); and the reference draws
// different data per iteration and rank.
func TestCheckDetectsCorruption(t *testing.T) {
	ref := newReference(42, coll.Int8, coll.OpSum, 4)
	require.NotEqual(t, ref.input(1, 0, 64), ref.input(2, 0, 64))
	require.NotEqual(t, ref.input(1, 0, 64), ref.input(1, 1, 64))
	require.NotEqual(t, ref.block(1, 0, 1, 64), ref.block(1, 0, 2, 64))

	const iter = 1
	for _, c := range coll.CollTypes() {
		if c == coll.Barrier {
			continue
		}
		rank := 0 // the root (root 0) has an output in every rooted collective but bcast
		if c == coll.Bcast {
			rank = 1
		}
		t.Run(c.String(), func(t *testing.T) {
			corruptOutput = func(s shape, it int, got []byte) {
				if s.rank == rank && it == iter {
					got[1] ^= 0x40
				}
			}
			defer func() { corruptOutput = nil }()
			code, out := capture(t, "-np", "3", "-c", c.String(), "-b", "64", "-e", "64", "-d", "int32", "-n", "3", "-w", "0", "--check", "-q")
			require.Equal(t, exitCheck, code, out)
			require.Contains(t, out, fmt.Sprintf("check: rank %d iteration %d: byte offset 1", rank, iter), out)
		})
	}
}

// TestDMBuffers: dm buffers (each rank's from its own context) run data-checked, for
// every rank (-m dm) and mixed with host memory rank by rank (--rank-mem); the header
// says each rank's share of the device's memory, and whether copies out of it go
// through the NIC, as the device reports (soft0 reports uncached reads only with
// $IBCOLL_SOFT_DM_UNCACHED, so both ways run). Where the device has none, the run
// fails saying so.
func TestDMBuffers(t *testing.T) {
	dev := os.Getenv("IBCOLL_DEVICE")
	_, _, maxDM := deviceName(dev)
	for _, uncached := range []bool{false, true} {
		t.Setenv("IBCOLL_SOFT_DM_UNCACHED", map[bool]string{false: "0", true: "1"}[uncached])
		ctx, err := verbs.OpenWith(dev, verbs.Options{SoftDMUncached: uncached})
		require.NoError(t, err)
		attr, err := ctx.Query()
		require.NoError(t, errors.Join(err, ctx.Close()))
		copies := "copies out of it are the CPU's"
		if attr.DMUncachedReads {
			copies = "copies out of it go through the NIC"
		}
		for _, mems := range [][]string{{"-m", "dm"}, {"--rank-mem", "0:dm,host;1:host,dm;2:dm,dm"}} {
			args := append([]string{"-np", "3", "-c", "gather,scatter,bcast,allgather,alltoall,allreduce", "-b", "8", "-e", "1K",
				"-n", "2", "-w", "1", "--check", "-q"}, mems...)
			code, out := capture(t, args...)
			if maxDM == 0 {
				require.Equal(t, exitCollective, code, "%v: %s", args, out)
				require.Contains(t, out, "no device memory")
				continue
			}
			require.Equal(t, exitOK, code, "%v: %s", args, out)
			require.Contains(t, out, fmt.Sprintf("# dm: each rank's context takes up to %d bytes", int(maxDM)/3&^63))
			require.Contains(t, out, copies, "uncached %v", uncached)
			require.Equal(t, 6*8, strings.Count(out, " ok\n"), "every row checked: %s", out)
		}
	}
}

// TestAllocFailureEndsEveryRank: a rank that cannot allocate its buffers for a row
// (rank 0's src: 1 MiB of device memory, more than any context's share, or none on a
// device without it) tells the others before the row starts, so every rank reports
// that rank's failure instead of waiting in the row's first collective and then
// for the reports ("no report" after the exchange's deadline, before).
func TestAllocFailureEndsEveryRank(t *testing.T) {
	code, out := capture(t, "-np", "4", "-c", "gather", "-b", "1M", "-e", "1M", "-n", "2", "--rank-mem", "0:dm,host")
	require.Equal(t, exitCollective, code, out)
	require.Contains(t, out, "#   rank 0: rank 0: allocating 1048576 bytes of dm for src", out)
	for r := 1; r < 4; r++ {
		require.Contains(t, out, fmt.Sprintf("#   rank %d: rank 0 could not allocate its buffers: rank 0: allocating", r), out)
	}
	require.NotContains(t, out, "no report", out)
}

func TestByRanks(t *testing.T) {
	require.Empty(t, byRanks([]string{"", ""}))
	require.Equal(t, []string{"rank 0: a"}, byRanks([]string{"a"}))
	require.Equal(t, []string{"ranks 0-1,3,5-7: a", "ranks 2,4: b"},
		byRanks([]string{"a", "a", "b", "a", "b", "a", "a", "a", ""}))
}

func TestReportSlowClose(t *testing.T) {
	say := func(first int, took ...time.Duration) string {
		r, w, err := os.Pipe()
		require.NoError(t, err)
		old := os.Stderr
		os.Stderr = w
		reportSlowClose(first, took)
		os.Stderr = old
		require.NoError(t, w.Close())
		b, err := io.ReadAll(r)
		require.NoError(t, err)
		return string(b)
	}
	require.Empty(t, say(0, time.Millisecond, 99*time.Millisecond), "fast closes are not reported")
	require.Equal(t, "ibcoll-perf: rank 5: closing the team took 2.05 s\n", say(5, 2050*time.Millisecond))
	require.Equal(t, "ibcoll-perf: closing the team took up to 0.90 s (rank 2); 2 of 3 ranks took 100ms or more\n",
		say(0, 150*time.Millisecond, time.Millisecond, 900*time.Millisecond), "one line for all the ranks of a process")
}

// TestSync: --sync lines the ranks up before every iteration (warm-up included), where
// a run without it lines them up once per size, before the first; the header says so.
func TestSync(t *testing.T) {
	lineUps = new(atomic.Int64)
	defer func() { lineUps = nil }()
	const ranks, sizes, iters, warmup = 3, 2, 5, 1
	args := []string{"-np", "3", "-c", "gather", "-b", "1K", "-e", "2K", "-n", "5", "-w", "1"}
	code, out := capture(t, append(args, "--sync")...)
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "ranks lined up before each")
	require.EqualValues(t, ranks*sizes*(iters+warmup), lineUps.Load(), "lineUp calls with --sync")
	lineUps.Store(0)
	code, out = capture(t, args...)
	require.Equal(t, exitOK, code, out)
	require.NotContains(t, out, "ranks lined up before each")
	require.EqualValues(t, ranks*sizes, lineUps.Load(), "lineUp calls without --sync")
}

// TestBusBandwidthCharges: the bytes a row's bus bandwidth is charged are nccl-tests'
// per rank: n blocks for the block collectives, alltoall included (it was charged n²
// blocks, n times nccl-tests' figure), the vector for the others.
func TestBusBandwidthCharges(t *testing.T) {
	const block, n = 4096, 4
	for c, want := range map[coll.CollType]int64{
		coll.Gather: n * block, coll.Scatterv: n * block, coll.Allgather: n * block, coll.ReduceScatter: n * block,
		coll.Alltoall: n * block, coll.Alltoallv: n * block,
		coll.Allreduce: block, coll.Bcast: block, coll.Reduce: block, coll.Barrier: 0,
	} {
		require.Equal(t, want, moved(c, block, n), "%v", c)
	}
}

// TestRanksPerDevice: a device's share of DM is split among the ranks that use it,
// also when --device names it more than once.
func TestRanksPerDevice(t *testing.T) {
	for _, c := range []struct {
		device string
		n      int
		want   int
	}{{"", 3, 3}, {"a,b", 5, 3}, {"soft0,soft0", 4, 4}, {"a,b,a", 6, 4}, {"a, a", 2, 2}} {
		o := options{device: c.device}
		require.Equal(t, c.want, o.ranksPerDevice(c.n), "%q, %d ranks", c.device, c.n)
	}
}
