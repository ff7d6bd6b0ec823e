package coll_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// A rank whose link breaks at its post (fault qperr) and that closes its team at
// once, before its lazy links to the others were up, makes them fail that collective
// at once, not at their deadline. The hour soak found it (a barrier of 2 ranks ended
// at 30 s): the injected break moved a queue pair to error without telling the peer,
// and the close told it "I did my part of everything before collective 1", though the
// broken collective 0 was among those.
func TestRegressionBrokenThenClosed(t *testing.T) {
	watchdog(t, 5*time.Minute)
	colls := map[string]func(r *rank) coll.Args{
		"barrier": func(r *rank) coll.Args { return coll.Args{Type: coll.Barrier} },
		"gather": func(r *rank) coll.Args {
			a := coll.Args{Type: coll.Gather, Root: 0, DType: coll.Uint8, Src: coll.BufferDesc{Slice: make([]byte, 64), Count: 64}}
			if r.r == 0 {
				a.Dst = coll.BufferDesc{Slice: make([]byte, 64*r.team.Size()), Count: 64 * r.team.Size()}
			}
			return a
		},
		"allreduce": func(r *rank) coll.Args {
			return coll.Args{Type: coll.Allreduce, DType: coll.Int32, Op: coll.OpSum,
				Src: coll.BufferDesc{Slice: make([]byte, 64), Count: 16}, Dst: coll.BufferDesc{Slice: make([]byte, 64), Count: 16}}
		},
	}
	for _, n := range []int{2, 3} {
		for name, args := range colls {
			t.Run(fmt.Sprintf("n=%d/%s", n, name), func(t *testing.T) {
				bad := n - 1
				for round := 0; round < 15; round++ {
					w := newWorld(t, n, coll.Config{Timeout: 20 * time.Second,
						Faults: []coll.Fault{{Kind: coll.FaultQPErr, Rank: bad, N: 1}}})
					errs := w.run(func(r *rank) error {
						err := runColl(context.Background(), r.team, args(r))
						if r.r == bad {
							if cerr := r.team.Close(); cerr != nil {
								return errors.Join(err, cerr)
							}
						}
						return err
					})
					require.ErrorIs(t, errs[bad], coll.ErrInjected, "round %d", round)
					for i, err := range errs {
						if i == bad {
							continue
						}
						require.Error(t, err, "round %d rank %d", round, i)
						require.NotErrorIs(t, err, coll.ErrTimeout, "round %d rank %d: the news must come before the deadline", round, i)
						require.True(t, errors.Is(err, coll.ErrPeerFailed) || errors.Is(err, coll.ErrTeamBroken), "round %d rank %d: %v", round, i, err)
					}
					w.close()
				}
			})
		}
	}
}

// A rank whose Init fails (its abort queued behind lazy links still being made) and
// that closes its team at once gets its abort out, so the others fail the collective
// naming it, not at their deadline. The soak found it (an alltoall ended at 30 s on a
// rank waiting for a rank whose Init had failed): the mailbox's goroutine waited for
// the team lock, which the closing rank's drain held while it waited for the very
// answer queued behind that goroutine.
func TestRegressionInitFailedThenClosed(t *testing.T) {
	watchdog(t, 5*time.Minute)
	const n, bad, cnt = 3, 2, 93
	for round := 0; round < 20; round++ {
		w := newWorld(t, n, coll.Config{Timeout: 20 * time.Second,
			Faults: []coll.Fault{{Kind: coll.FaultInit, Rank: bad, N: 1}}})
		errs := w.run(func(r *rank) error {
			a := coll.Args{Type: coll.Alltoall, DType: coll.Uint8,
				Src: coll.BufferDesc{Slice: make([]byte, n*cnt), Count: n * cnt}, Dst: coll.BufferDesc{Slice: make([]byte, n*cnt), Count: n * cnt}}
			err := runColl(context.Background(), r.team, a)
			if r.r == bad {
				if cerr := r.team.Close(); cerr != nil {
					return errors.Join(err, cerr)
				}
			}
			return err
		})
		require.ErrorIs(t, errs[bad], coll.ErrInjected, "round %d", round)
		for i := 0; i < bad; i++ {
			require.NotErrorIs(t, errs[i], coll.ErrTimeout, "round %d rank %d: the news must come before the deadline", round, i)
			var pe *coll.PeerError
			require.ErrorAs(t, errs[i], &pe, "round %d rank %d", round, i)
			require.Equal(t, bad, pe.Rank, "round %d rank %d: %v", round, i, errs[i])
		}
		w.close()
	}
}

// A rank that refuses a post because its team broke tells the ranks below it in the
// agreement tree, which may have posted before the break reached them and reported
// done: they fail at once instead of waiting for a decision that passes only through
// it (the soak saw a barrier wait out its deadline and the Timeout after it, 60 s).
func TestRegressionRefusedOnBrokenTeam(t *testing.T) {
	watchdog(t, 3*time.Minute)
	const n, parent, child = 10, 8, 9 // radix-8 agreement tree rooted at 0: 9's parent is 8
	w := newWorld(t, n, coll.Config{Timeout: 20 * time.Second,
		Faults: []coll.Fault{{Kind: coll.FaultQPErr, Rank: parent, N: 1}}})
	childPosted := make(chan struct{})
	errB := make([]error, n)
	// Requests close only once every rank is done with its waits (as the soak's do): a
	// request closed unposted tells the peers too, which would hide the defect.
	var waited sync.WaitGroup
	waited.Add(n)
	errs := w.run(func(r *rank) error {
		var reqs []*coll.Request
		defer func() {
			waited.Done()
			waited.Wait()
			for _, q := range reqs {
				_ = q.Close()
			}
		}()
		src, dst := make([]byte, 8*n), make([]byte, 8*n)
		// A linear gather to 0: rank 8's injected break is of its link to 0, not to 9.
		ga := coll.Args{Type: coll.Gather, Root: 0, Alg: "linear", DType: coll.Uint8, Src: coll.BufferDesc{Slice: src[:8], Count: 8}}
		if r.r == 0 {
			ga.Dst = coll.BufferDesc{Slice: dst, Count: 8 * n}
		}
		a, err := r.team.Init(ga)
		if err != nil {
			return err
		}
		reqs = append(reqs, a)
		b, err := r.team.Init(coll.Args{Type: coll.Barrier})
		if err != nil {
			return err
		}
		reqs = append(reqs, b)
		switch r.r {
		case child:
			// Done with the barrier before anything broke: its vote goes up to 8.
			errB[r.r] = b.Post()
			close(childPosted)
		case parent:
			<-childPosted
		}
		aerr := errors.Join(a.Post(), a.Wait(context.Background()))
		if r.r != child {
			if perr := b.Post(); perr != nil {
				errB[r.r] = perr
				return aerr
			}
		}
		if err := b.Wait(context.Background()); errB[r.r] == nil {
			errB[r.r] = err
		}
		return aerr
	})
	require.ErrorIs(t, errs[parent], coll.ErrInjected)
	for r := range n {
		require.Error(t, errs[r], "rank %d: the allgather", r)
		require.Error(t, errB[r], "rank %d: the barrier", r)
	}
	require.NotErrorIs(t, errB[child], coll.ErrTimeout)
	// The barrier's own news (collective 1 failed on rank 8), not the team's break,
	// which reached it too but leaves a rank that reported done waiting for the
	// decision until its deadline and the Timeout after it.
	var pe *coll.PeerError
	require.ErrorAs(t, errB[child], &pe, "%v", errB[child])
	require.Equal(t, parent, pe.Rank, "%v", errB[child])
	require.Equal(t, uint64(1), pe.Seq, "%v", errB[child])
	t.Logf("child's barrier: %v", errB[child])
}

// An Init refused on a broken team takes its number and tells the peers: a peer the
// break has not reached runs the collective, reports done, and would wait for a
// decision that passes only through the refusing rank, out to its deadline and the
// Timeout after it (the soak's barrier after a break, 60 s on one rank of 9).
func TestRegressionInitOnBrokenTeam(t *testing.T) {
	watchdog(t, 2*time.Minute)
	for _, n := range []int{2, 9} {
		w := newWorld(t, n, coll.Config{Timeout: 10 * time.Second})
		coll.BreakSilently(w.ranks[0].team, errors.New("a link failed (test)"))
		errs := w.run(func(r *rank) error { return r.team.Barrier(context.Background()) })
		require.ErrorIs(t, errs[0], coll.ErrTeamBroken)
		for r := 1; r < n; r++ {
			require.NotErrorIs(t, errs[r], coll.ErrTimeout, "n=%d rank %d", n, r)
			var pe *coll.PeerError
			require.ErrorAs(t, errs[r], &pe, "n=%d rank %d: %v", n, r, errs[r])
			require.Equal(t, 0, pe.Rank, "n=%d rank %d: %v", n, r, errs[r])
			require.Equal(t, uint64(0), pe.Seq, "n=%d rank %d: %v", n, r, errs[r])
		}
		// The refused Init took number 0: the next collective is 1 everywhere.
		errs = w.run(func(r *rank) error { return r.team.Barrier(context.Background()) })
		for r := 1; r < n; r++ {
			var pe *coll.PeerError
			require.ErrorAs(t, errs[r], &pe, "n=%d rank %d: %v", n, r, errs[r])
			require.Equal(t, uint64(1), pe.Seq, "n=%d rank %d: %v", n, r, errs[r])
		}
		w.close()
	}
}
