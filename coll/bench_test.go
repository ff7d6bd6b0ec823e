package coll_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// persistentRooted makes one persistent gather or scatter per rank with host slices.
func persistentRooted(tb testing.TB, w *world, typ coll.CollType, blk int) []*coll.Request {
	tb.Helper()
	n := w.n
	rnd := testutil.Rand(tb)
	reqs := make([]*coll.Request, n)
	smalls, bigs := make([][]byte, n), make([][]byte, n)
	for i := range smalls {
		smalls[i], bigs[i] = make([]byte, blk), make([]byte, n*blk)
		testutil.Fill(rnd, smalls[i])
		testutil.Fill(rnd, bigs[i])
	}
	w.mustRun(func(r *rank) error {
		small, big := smalls[r.r], bigs[r.r]
		a := coll.Args{Type: typ, Root: 0, DType: coll.Uint8, Flags: coll.Persistent, Alg: "linear"}
		if typ == coll.Gather {
			a.Src = coll.BufferDesc{Slice: small, Count: blk}
			if r.r == 0 {
				a.Dst = coll.BufferDesc{Slice: big, Count: n * blk}
			}
		} else {
			a.Dst = coll.BufferDesc{Slice: small, Count: blk}
			if r.r == 0 {
				a.Src = coll.BufferDesc{Slice: big, Count: n * blk}
			}
		}
		q, err := r.team.Init(a)
		reqs[r.r] = q
		return err
	})
	tb.Cleanup(func() {
		for _, q := range reqs {
			require.NoError(tb, q.Close())
		}
	})
	return reqs
}

// postAll runs iters posts of every rank's request, each rank in its own goroutine;
// the collective itself keeps the ranks in step.
func postAll(tb testing.TB, reqs []*coll.Request, iters int) {
	var wg sync.WaitGroup
	errs := make([]error, len(reqs))
	for i, q := range reqs {
		wg.Add(1)
		go func(i int, q *coll.Request) {
			defer wg.Done()
			for it := 0; it < iters; it++ {
				if err := q.Post(); err != nil {
					errs[i] = err
					return
				}
				if err := q.Wait(context.Background()); err != nil {
					errs[i] = err
					return
				}
			}
		}(i, q)
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(tb, err, "rank %d", i)
	}
}

// copyBaseline is what the root's side of the collective amounts to in copy(): n
// blocks of blk bytes moved into (or out of) one n×blk buffer.
func copyBaseline(n, blk, iters int, typ coll.CollType) time.Duration {
	big := make([]byte, n*blk)
	smalls := make([][]byte, n)
	for i := range smalls {
		smalls[i] = make([]byte, blk)
		smalls[i][0] = byte(i + 1)
	}
	start := time.Now()
	for it := 0; it < iters; it++ {
		for i := range smalls {
			if typ == coll.Gather {
				copy(big[i*blk:], smalls[i])
			} else {
				copy(smalls[i], big[i*blk:(i+1)*blk])
			}
		}
	}
	return time.Since(start)
}

func benchRooted(b *testing.B, typ coll.CollType) {
	const n, blk = 8, 1 << 20
	w := newWorld(b, n, coll.Config{Device: device()})
	reqs := persistentRooted(b, w, typ, blk)
	postAll(b, reqs, 3) // warm up: registrations, first posts
	b.SetBytes(n * blk)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	postAll(b, reqs, b.N)
	coll := time.Since(start)
	b.StopTimer()
	base := copyBaseline(n, blk, b.N, typ)
	b.ReportMetric(float64(coll)/float64(base), "x-copy")
	b.ReportMetric(float64(coll.Microseconds())/float64(b.N), "µs/coll")
	b.ReportMetric(float64(base.Microseconds())/float64(b.N), "µs/copy")
}

// BenchmarkGather8x1MiB: gather of 1 MiB blocks from 8 goroutine ranks on soft0, next
// to copy() of the same bytes in the same run; x-copy is the ratio of the times.
func BenchmarkGather8x1MiB(b *testing.B) { benchRooted(b, coll.Gather) }

// BenchmarkScatter8x1MiB: the same for scatter.
func BenchmarkScatter8x1MiB(b *testing.B) { benchRooted(b, coll.Scatter) }

// BenchmarkPersistentPostAllocs: a small persistent gather on 8 ranks; allocs/post is
// the allocations of one rank's Post+Wait in steady state.
func BenchmarkPersistentPostAllocs(b *testing.B) {
	const n = 8
	w := newWorld(b, n, coll.Config{Device: device()})
	reqs := persistentRooted(b, w, coll.Gather, 64)
	postAll(b, reqs, 10)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b.ResetTimer()
	postAll(b, reqs, b.N)
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(b.N*n), "allocs/post")
}

// TestPersistentPostAllocs: posting a persistent collective allocates nothing in
// steady state (a small allowance covers the benchmark goroutines and the runtime).
func TestPersistentPostAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("measures allocations")
	}
	const n, iters = 4, 300
	w := newWorld(t, n, coll.Config{})
	for _, typ := range []coll.CollType{coll.Gather, coll.Scatter} {
		reqs := persistentRooted(t, w, typ, 256)
		postAll(t, reqs, 20)
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		postAll(t, reqs, iters)
		runtime.ReadMemStats(&m1)
		per := float64(m1.Mallocs-m0.Mallocs) / float64(iters*n)
		t.Logf("%v: %.3f allocations per persistent post (Post+Wait, one rank)", typ, per)
		require.Less(t, per, 0.5, "%v: steady-state posts must not allocate", typ)
	}
}

// BenchmarkRepeatedInitAllocs: a non-persistent gather of one shape, run again and
// again on every rank: allocs/init is what one rank's collective allocates in steady
// state, coll's request and the transport together (the transport reuses the task of
// the last one: tlmlx5's task cache). "run" goes through Team.Run, as team.Gather
// does; "init" calls Init, Post, Wait and Close, and so allocates the Request it
// returns; "into" calls InitInto with one Request per rank instead of Init. "staged" gathers 256 KiB blocks into sim memory on the root, which the NIC
// cannot reach: staged through host scratch, copied out by rows as the blocks land.
func BenchmarkRepeatedInitAllocs(b *testing.B) {
	for _, c := range repeatedCases {
		b.Run(c.name, func(b *testing.B) {
			loop := repeatedGather(b, c.via, c.blk, c.staged, c.aon)
			loop(20)
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			b.ResetTimer()
			loop(b.N)
			b.StopTimer()
			runtime.ReadMemStats(&m1)
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(b.N*2), "allocs/init")
		})
	}
}

// repeatedCases are the shapes of BenchmarkRepeatedInitAllocs and TestRepeatedInitAllocs,
// with the test's bound on one rank's allocations per collective: none through Run
// or InitInto, and through Init the Request alone, staged or not (the stage, its plan
// and callbacks come from the team's kits, stagekit.go).
var repeatedCases = []struct {
	name   string
	via    string // run, init or into
	blk    int    // 0: a barrier instead of a gather
	staged bool
	aon    bool // Config.AllOrNothing: the gather ends by the completion agreement
	max    float64
}{
	{"run", "run", 1 << 10, false, false, 0.5},
	{"init", "init", 1 << 10, false, false, 1.5},
	{"into", "into", 1 << 10, false, false, 0.5},
	{"run/staged", "run", 256 << 10, true, false, 0.5},
	{"init/staged", "init", 256 << 10, true, false, 1.5},
	{"into/staged", "into", 256 << 10, true, false, 0.5},
	// Agreed requests: the agreement tree is the team's, its vote array the request's.
	// Of the two ranks only the root has a child, so one allocation per agreement
	// there measures 0.5: the bound is lower.
	{"run/barrier", "run", 0, false, false, 0.2},
	{"into/barrier", "into", 0, false, false, 0.2},
	{"run/all-or-nothing", "run", 1 << 10, false, true, 0.2},
	{"into/all-or-nothing", "into", 1 << 10, false, true, 0.2},
}

// repeatedGather is a 2-rank world and a loop of gathers of blk-byte blocks of one
// shape on it (of barriers where blk is 0); staged puts the root's destination in sim
// memory, aon sets Config.AllOrNothing.
func repeatedGather(b testing.TB, via string, blk int, staged, aon bool) func(iters int) {
	const n = 2
	w := newWorld(b, n, coll.Config{Device: device(), AllOrNothing: aon})
	bufs := make([][2][]byte, n)
	for r := range bufs {
		bufs[r] = [2][]byte{make([]byte, blk), make([]byte, n*blk)}
	}
	var simDst *mem.Buffer
	if staged {
		var err error
		simDst, err = mem.Alloc(mem.Sim, n*blk)
		require.NoError(b, err)
		b.Cleanup(func() { _ = simDst.Close() })
	}
	qs := make([]*coll.Request, n) // InitInto's, one per rank
	for r := range qs {
		qs[r] = new(coll.Request)
	}
	run := func(ctx context.Context, tm *coll.Team, a coll.Args) error {
		switch via {
		case "run":
			return tm.Run(ctx, a)
		case "into":
			return runInto(ctx, tm, qs[tm.Rank()], a)
		}
		return runColl(ctx, tm, a)
	}
	return func(iters int) {
		w.mustRun(func(r *rank) error {
			a := coll.Args{Type: coll.Gather, DType: coll.Uint8, Src: coll.BufferDesc{Slice: bufs[r.r][0], Count: blk}}
			if blk == 0 {
				a = coll.Args{Type: coll.Barrier}
			} else if r.r == 0 {
				a.Dst = coll.BufferDesc{Slice: bufs[r.r][1], Count: n * blk}
				if staged {
					a.Dst = coll.BufferDesc{Buf: simDst, Type: mem.Sim, Count: n * blk}
				}
			}
			for i := 0; i < iters; i++ {
				if err := run(context.Background(), r.team, a); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// TestRepeatedInitAllocs: a repeated non-persistent shape allocates nothing through
// Team.Run (and the wrappers) or InitInto, staged or not, and through Init only the
// returned Request (repeatedCases; a small allowance covers the test's goroutines and the
// runtime).
func TestRepeatedInitAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("measures allocations")
	}
	for _, c := range repeatedCases {
		loop := repeatedGather(t, c.via, c.blk, c.staged, c.aon)
		loop(20)
		const iters = 300
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		loop(iters)
		runtime.ReadMemStats(&m1)
		per := float64(m1.Mallocs-m0.Mallocs) / float64(iters*2)
		t.Logf("%s: %.3f allocations per collective (one rank)", c.name, per)
		require.Less(t, per, c.max, c.name)
	}
}
