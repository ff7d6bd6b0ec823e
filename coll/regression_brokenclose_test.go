package coll_test

import (
	"context"
	"errors"
	"fmt"
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
