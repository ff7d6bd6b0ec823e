package coll_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// TestScenarioOutputAhead: persistent collectives whose output is staged on every rank
// (sim memory), at sizes that go by ready-to-receive (and, for a 2-rank gather, in
// landing pieces), posted 30 times with fresh data and checked every time. The transport holds such an output in
// two buffers of its own and sends its ready-to-receives a post ahead, so peers write
// a post while the last one is copied out; the stage copies out of the post's buffer.
// A gather root (which only receives into its output) must report that it did
// (StagingReport.Dst.Alternate), or the test tests nothing.
func TestScenarioOutputAhead(t *testing.T) {
	rnd := testutil.Rand(t)
	for _, n := range []int{2, 5} {
		w := newWorld(t, n, coll.Config{Timeout: 30 * time.Second})
		for _, typ := range []coll.CollType{coll.Gather, coll.Gatherv, coll.Scatter, coll.Scatterv, coll.Bcast,
			coll.Allgather, coll.Alltoall, coll.Alltoallv} {
			// Above the eager maximum (8 KiB); the race detector makes bytes slow.
			count := 9_000 + rnd.IntN(30_000)
			if n == 2 && typ == coll.Gather {
				count = 600_000 + rnd.IntN(100_000) // at least two 256 KiB landing pieces
			}
			s := randScenario(rnd, n, typ, "", count)
			s.dt, s.op, s.inPlace, s.reps = coll.Uint8, 0, false, 30
			for r := range n {
				s.dstType[r] = mem.Sim
				if typ == coll.Bcast {
					s.srcType[r] = mem.Sim // its output
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			err := s.run(ctx, w, rnd)
			cancel()
			require.NoError(t, err, "n=%d %v", n, typ)
			alternate := 0
			for _, rep := range s.staging {
				if rep.Dst.Alternate || rep.Src.Alternate {
					alternate++
				}
			}
			t.Logf("n=%d %v: %d of %d ranks held their output in the transport's two buffers", n, typ, alternate, n)
			if typ == coll.Gather {
				require.True(t, s.staging[s.root].Dst.Alternate, "n=%d: the gather root's staged output: %v", n, s.staging[s.root].Dst)
			}
		}
		w.close()
	}
}

// TestFaultOutputAhead: a 4-rank persistent gather whose root holds its staged output
// (sim) in the transport's two buffers, a fault at post 3 (the root's copy-out,
// deadline or stall; a leaf's broken link), in both outcome modes. Posts 1 and 2
// succeed with right data; at post 3 the faulty rank fails, every rank returns within
// the bound (all-or-nothing: every rank fails), and the root had exposed its buffer of
// post 4 ahead, which its Close must keep until the leaves' late writes or the team's
// close (the leak check of TestMain sees what it did not free). A leaf whose post 3
// succeeded may post 4: unless the root's news came first and refuses it at once
// (ErrPeerFailed), it writes into that kept buffer and must not break its link. (Which
// comes first is a race; tlmlx5's TestQuarantineAhead writes into a kept buffer
// deterministically.) Unless a link broke, a barrier then succeeds on the same team.
func TestFaultOutputAhead(t *testing.T) {
	const n, blk = 4, 40_000 // rendezvous, no landing pieces
	watchdog(t, 3*time.Minute)
	rnd := testutil.Rand(t)
	for _, c := range []struct {
		name string
		f    coll.Fault
	}{
		{"copyout-root", coll.Fault{Kind: coll.FaultCopyOut, Rank: 0, N: 3}},
		{"deadline-root", coll.Fault{Kind: coll.FaultDeadline, Rank: 0, N: 3}},
		{"stall-root", coll.Fault{Kind: coll.FaultStall, Rank: 0, N: 3}},
		{"qperr-leaf", coll.Fault{Kind: coll.FaultQPErr, Rank: 2, N: 3}},
	} {
		for _, v := range []struct {
			name   string
			blocks []int // per rank; equal: a gather, else a gatherv
		}{
			{"gather", []int{blk, blk, blk, blk}},
			// An empty block (rank 1) and an eager one (rank 3) beside a rendezvous
			// one: the root still doubles its output.
			{"gatherv-mixed", []int{blk, 0, blk + 123, 3000}},
		} {
			for _, aon := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%s/all-or-nothing=%v", v.name, c.name, aon), func(t *testing.T) {
					w := newWorld(t, n, coll.Config{Timeout: 2 * time.Second, AbortGrace: 300 * time.Millisecond,
						Faults: []coll.Fault{c.f}, AllOrNothing: aon})
					src := make([][]byte, n)
					displs, total := make([]int, n), 0
					for r, b := range v.blocks {
						displs[r], total = total, total+b
					}
					dst, err := mem.Alloc(mem.Sim, total)
					require.NoError(t, err)
					defer func() { require.NoError(t, dst.Close()) }()
					reqs := make([]*coll.Request, n)
					for r := range n {
						src[r] = make([]byte, v.blocks[r])
						a := coll.Args{Type: coll.Gather, Root: 0, DType: coll.Uint8, Flags: coll.Persistent, Alg: "linear",
							Src: coll.BufferDesc{Slice: src[r], Count: v.blocks[r]}}
						if v.name != "gather" {
							a.Type = coll.Gatherv
						}
						switch {
						case r == 0 && a.Type == coll.Gather:
							a.Dst = coll.BufferDesc{Buf: dst, Count: total}
						case r == 0:
							a.Dst = coll.BufferDesc{Buf: dst, Counts: v.blocks, Displs: displs}
						}
						reqs[r], err = w.ranks[r].team.Init(a)
						require.NoError(t, err)
					}
					defer closeReqs(reqs) // a failed check must not leave the team busy for the next case
					post := func() ([]error, time.Duration) {
						for r := range n {
							testutil.Fill(rnd, src[r])
						}
						start := time.Now()
						errs := w.run(func(r *rank) error {
							// A failed Post is still waited for (coll's contract); Config.Timeout
							// bounds the Wait, and the watchdog a hang.
							perr := reqs[r.r].Post()
							if werr := reqs[r.r].Wait(context.Background()); werr != nil || perr != nil {
								return errors.Join(perr, werr)
							}
							return nil
						})
						return errs, time.Since(start)
					}
					for p := 1; p <= 2; p++ {
						errs, _ := post()
						for r, err := range errs {
							require.NoError(t, err, "post %d rank %d", p, r)
						}
						got := readMem(t, dst.Addr(), mem.Sim, total)
						for r := range n {
							require.Equal(t, src[r], got[displs[r]:displs[r]+v.blocks[r]], "post %d: rank %d's block", p, r)
						}
					}
					require.True(t, reqs[0].Staging().Dst.Alternate, "the root's output is not in the transport's two buffers: the test tests nothing")
					errs, took := post()
					require.Less(t, took, 10*time.Second, "post 3 kept a rank waiting")
					require.Error(t, errs[c.f.Rank], "the faulty rank's post 3")
					for r, err := range errs {
						if aon {
							require.Error(t, err, "all-or-nothing: rank %d", r)
						}
					}
					// A leaf that succeeded posts 4: its write lands in the root's buffer sent
					// ahead, which the root keeps after closing its failed request.
					require.NoError(t, reqs[0].Close())
					late, wrote := 0, 0
					for r := 1; r < n; r++ {
						if errs[r] == nil && c.f.Kind != coll.FaultQPErr {
							late++
							// The root's news may come first: then post 4 fails at once,
							// before writing anything (a rank whose post succeeded before
							// the news takes no later post with the failed rank).
							start := time.Now()
							perr := reqs[r].Post()
							if perr != nil {
								require.ErrorIs(t, perr, coll.ErrPeerFailed, "rank %d post 4", r)
							} else {
								wrote++
							}
							_ = reqs[r].Wait(context.Background()) // it may fail: the root is gone
							require.Less(t, time.Since(start), 10*time.Second, "rank %d post 4", r)
						}
						require.NoError(t, reqs[r].Close())
					}
					t.Logf("%d leaves succeeded at post 3; %d of them posted 4 into the closed root's buffer sent ahead before the root's news refused it", late, wrote)
					if c.f.Kind == coll.FaultCopyOut && !aon {
						// The root fails after every block landed: its leaves had finished.
						require.Positive(t, late, "no leaf wrote into the kept buffer: the case tests nothing")
					}
					if c.f.Kind == coll.FaultQPErr {
						return
					}
					w.mustRun(func(r *rank) error {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						return r.team.Barrier(ctx)
					})
				})
			}
		}
	}
}
