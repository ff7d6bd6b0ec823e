package coll_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// watchdog fails the test with every goroutine's stack if it is still running after d:
// a hang must show up as a failure with its cause, not as the test binary's timeout.
func watchdog(t *testing.T, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-time.After(d):
			buf := make([]byte, 4<<20)
			buf = buf[:runtime.Stack(buf, true)]
			panic(fmt.Sprintf("%s: hung for %v:\n%s", t.Name(), d, buf))
		}
	}()
	t.Cleanup(func() { close(done) })
}

// TestSeedHangRegression is the hang this project was born from: the root of a gather
// has asymmetric buffers (host source, sim destination), its scratch allocation is
// refused, so its Init fails, while every other rank posts and waits. Every rank must
// return an error, promptly, and the peers' errors must name the root and the cause.
func TestSeedHangRegression(t *testing.T) {
	watchdog(t, 60*time.Second)
	for _, n := range []int{2, 3, 8} {
		for _, root := range []int{0, n - 1} {
			t.Run(fmt.Sprintf("n=%d/root=%d", n, root), func(t *testing.T) {
				base := runtime.NumGoroutine()
				func() {
					w := newWorld(t, n, coll.Config{Timeout: 30 * time.Second,
						Faults: []coll.Fault{{Kind: coll.FaultAlloc, Rank: root, N: 1}}})
					const cnt = 4096
					dst, err := mem.Alloc(mem.Sim, n*cnt)
					require.NoError(t, err)
					defer dst.Close()
					start := time.Now()
					took := make([]time.Duration, n)
					errs := w.run(func(r *rank) error {
						src := make([]byte, cnt)
						a := coll.Args{Type: coll.Gather, Root: root, DType: coll.Uint8,
							Src: coll.BufferDesc{Slice: src, Count: cnt}}
						if r.r == root {
							a.Dst = coll.BufferDesc{Addr: dst.Addr(), Type: mem.Sim, Count: n * cnt}
						}
						err := runColl(context.Background(), r.team, a)
						took[r.r] = time.Since(start)
						return err
					})
					worst := time.Duration(0)
					for i, err := range errs {
						require.Error(t, err, "rank %d must fail", i)
						worst = max(worst, took[i])
						if i == root {
							require.ErrorIs(t, err, coll.ErrInjected)
							require.Contains(t, err.Error(), "alloc")
							continue
						}
						require.ErrorIs(t, err, coll.ErrPeerFailed, "rank %d", i)
						var pe *coll.PeerError
						require.ErrorAs(t, err, &pe)
						require.Equal(t, root, pe.Rank)
						require.Contains(t, pe.Cause, "alloc")
					}
					t.Logf("every rank failed within %v", worst)
					require.Less(t, worst, 5*time.Second, "errors must arrive promptly, not at a timeout")

					// The team survives a failed Init: the next collective works.
					w.mustRun(func(r *rank) error {
						return runColl(context.Background(), r.team, coll.Args{Type: coll.Barrier})
					})
					w.close()
				}()
				settleGoroutines(t, base)
			})
		}
	}
}

// faultResult is what one fault case did.
type faultResult struct {
	errs  []error
	took  []time.Duration
	worst time.Duration
	// data: per rank that succeeded, what checking its buffers found (nil: right).
	data []error
}

// runFault runs one collective with fault f on an n-rank team whose faulty rank uses
// sim memory (so that it stages, allocates, registers and copies), and reports every
// rank's outcome. The team is closed and checked for leaks after.
func runFault(t *testing.T, n int, typ coll.CollType, alg string, f coll.Fault, allOrNothing bool) faultResult {
	t.Helper()
	cfg := coll.Config{Timeout: 400 * time.Millisecond, AbortGrace: 300 * time.Millisecond, Faults: []coll.Fault{f},
		AllOrNothing: allOrNothing}
	w := newWorld(t, n, cfg)
	rnd := testutil.Rand(t)
	s := randScenario(rnd, n, typ, alg, 33)
	s.root = 0
	s.inPlace = false
	// The others use memory the transport takes directly; the faulty rank's must be
	// staged, so that it allocates, registers and copies: sim, or on a GPU machine CUDA
	// device memory half the time (soft0 refuses it without its GPUDirect stand-in).
	direct, staged := []mem.Type{mem.Host}, []mem.Type{mem.Sim}
	if mem.CUDAAvailable() {
		direct, staged = append(direct, mem.CUDAManaged), append(staged, mem.CUDA)
	}
	for r := range s.srcType {
		s.srcType[r], s.dstType[r] = direct[rnd.IntN(len(direct))], direct[rnd.IntN(len(direct))]
	}
	st := staged[rnd.IntN(len(staged))]
	s.srcType[f.Rank], s.dstType[f.Rank] = st, st
	res := faultResult{errs: make([]error, n), took: make([]time.Duration, n), data: make([]error, n)}
	rb, cleanup, err := s.prepare(w, rnd)
	defer cleanup()
	require.NoError(t, err)
	want, err := s.fill(rb, rnd, n)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res.errs = w.run(func(r *rank) error {
		q, err := r.team.Init(rb[r.r].a)
		if err != nil {
			res.took[r.r] = time.Since(start)
			return err
		}
		defer func() { require.NoError(t, q.Close()) }()
		perr := q.Post()
		werr := q.Wait(context.Background())
		res.took[r.r] = time.Since(start)
		if perr != nil && werr == nil {
			return fmt.Errorf("Post failed (%v) but Wait succeeded", perr)
		}
		return werr
	})
	for _, d := range res.took {
		res.worst = max(res.worst, d)
	}
	for r, err := range res.errs {
		if err == nil {
			res.data[r] = s.checkRank(rb, want, 0, r)
		}
	}
	cleanup()
	w.close()
	return res
}

// TestFaultMatrix: every fault kind, at the root, a leaf and an interior rank, in every
// collective, with Config.AllOrNothing on and off. Where the fault fires, the faulty
// rank fails; all-or-nothing, every other rank ends with an error too (ErrPeerFailed,
// naming the faulty rank, unless they saw the team break or timed out themselves); in
// the default mode every other rank either does so or succeeds with right data (it
// finished its part before the news came). Nothing may stay blocked, and nothing may
// leak.
func TestFaultMatrix(t *testing.T) {
	watchdog(t, 10*time.Minute)
	const n = 6
	kinds := []coll.FaultKind{coll.FaultInit, coll.FaultAlloc, coll.FaultReg, coll.FaultCopyIn, coll.FaultCopyOut,
		coll.FaultQPErr, coll.FaultStall, coll.FaultDeadline}
	positions := []struct {
		name string
		rank int
	}{{"root", 0}, {"leaf", n - 1}, {"interior", 2}}
	algs := map[coll.CollType]string{coll.Gather: "knomial:2", coll.Scatter: "knomial:2", coll.Bcast: "knomial:2",
		coll.Reduce: "knomial:2"}
	var mu sync.Mutex
	worst := map[coll.FaultKind]time.Duration{}
	fired, na := 0, 0
	base := runtime.NumGoroutine()
	survived := 0 // default mode: ranks that succeeded while the fault failed another
	for _, aon := range []bool{true, false} {
		mode := map[bool]string{true: "all-or-nothing", false: "default"}[aon]
		for _, typ := range coll.CollTypes() {
			for _, kind := range kinds {
				for _, pos := range positions {
					name := fmt.Sprintf("%s/%v/%v/%s", mode, typ, kind, pos.name)
					ok := t.Run(name, func(t *testing.T) {
						res := runFault(t, n, typ, algs[typ], coll.Fault{Kind: kind, Rank: pos.rank, N: 1}, aon)
						failed := 0
						for _, err := range res.errs {
							if err != nil {
								failed++
							}
						}
						if failed == 0 {
							// The fault never fired: the rank has no such step in this
							// collective (no staged destination to copy out, say).
							require.NotContains(t, []coll.FaultKind{coll.FaultInit, coll.FaultStall, coll.FaultDeadline, coll.FaultQPErr}, kind,
								"%v must always fire", kind)
							mu.Lock()
							na++
							mu.Unlock()
							return
						}
						require.Error(t, res.errs[pos.rank], "the faulty rank %d succeeded while its fault failed others", pos.rank)
						require.ErrorIs(t, res.errs[pos.rank], coll.ErrInjected, "the faulty rank's error says the fault made it")
						for i, err := range res.errs {
							if err == nil && !aon {
								// The default mode's contract: a rank that finished its
								// part before the news came succeeds, with right data.
								require.NoError(t, res.data[i], "rank %d succeeded", i)
								mu.Lock()
								survived++
								mu.Unlock()
								continue
							}
							require.Error(t, err, "rank %d succeeded while rank %d failed (%v)", i, pos.rank, res.errs[pos.rank])
							if i == pos.rank {
								continue
							}
							okErr := errors.Is(err, coll.ErrPeerFailed) || errors.Is(err, coll.ErrTeamBroken) ||
								(kind == coll.FaultStall && errors.Is(err, context.DeadlineExceeded))
							require.True(t, okErr, "rank %d: %v", i, err)
							if kind != coll.FaultStall && kind != coll.FaultQPErr {
								require.ErrorIs(t, err, coll.ErrPeerFailed, "rank %d", i)
								var pe *coll.PeerError
								require.ErrorAs(t, err, &pe)
								require.Equal(t, pos.rank, pe.Rank, "the error names the failing rank: %v", err)
							}
						}
						mu.Lock()
						fired++
						worst[kind] = max(worst[kind], res.worst)
						mu.Unlock()
					})
					if !ok {
						return
					}
				}
			}
		}
	}
	settleGoroutines(t, base)
	require.NoError(t, verbs.CheckLeaks())
	require.Zero(t, mem.Live())
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%v %v", k, worst[k].Round(time.Millisecond)))
	}
	t.Logf("fault matrix (both modes): %d cases fired, %d not applicable, %d ranks succeeded beside a failure (default mode); worst time for the error to reach every rank: %s",
		fired, na, survived, strings.Join(parts, ", "))
}
