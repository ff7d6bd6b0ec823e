package coll_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// TestRegressionCloseDrains (adversarial pass, item 1): two ranks start 33 barriers,
// more than a peer's 32 receive slots hold; rank 1 pauses before waiting, rank 0 waits
// for all of them and closes its team at once. Rank 0's last messages were only
// queued when its barriers succeeded; Close used to destroy the queue pairs with them
// still queued, and rank 1's last barrier failed at its deadline. Close now drains
// what it owes first, so every barrier succeeds on both ranks. Odd rounds run small
// allreduces in the default outcome mode instead (Config.AllOrNothing off): rank 0's
// verdicts of the signature check are what it owes there.
func TestRegressionCloseDrains(t *testing.T) {
	const barriers = 33
	for round := 0; round < 6; round++ {
		w := newWorld(t, 2, coll.Config{Timeout: 20 * time.Second})
		args := func(rank int) coll.Args { return coll.Args{Type: coll.Barrier} }
		if round%2 == 1 {
			args = func(rank int) coll.Args { return argsFor(coll.Allreduce, rank, 2, 4) }
		}
		errs := w.run(func(r *rank) error {
			ctx := context.Background()
			reqs := make([]*coll.Request, barriers)
			for i := range reqs {
				req, err := r.team.Init(args(r.r))
				if err != nil {
					return err
				}
				reqs[i] = req
				if err := req.Post(); err != nil {
					return err
				}
			}
			if r.r == 1 {
				time.Sleep(50 * time.Millisecond)
			}
			for i, req := range reqs {
				if err := req.Wait(ctx); err != nil {
					return err
				}
				if err := req.Close(); err != nil {
					return err
				}
				reqs[i] = nil
			}
			if r.r == 0 {
				return r.team.Close()
			}
			return nil
		})
		for r, err := range errs {
			require.NoError(t, err, "round %d rank %d", round, r)
		}
		w.close()
	}
}
