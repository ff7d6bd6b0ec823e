package coll_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// A broken rank whose posts are all refused sends the news of each refusal, and never
// polls again: what does not fit its send queue must still leave, or the ranks that
// reported a barrier done to it wait for a decision that sits in its queue. The hour
// soak found it (n=7: ranks 5 and 6 waited their whole 60 s deadline on the
// agreement's root, rank 0, whose refusal of that barrier came after 30 others).
func TestRegressionBrokenNewsLeaves(t *testing.T) {
	watchdog(t, 2*time.Minute)
	const n, refused = 3, 100 // more refusals than a peer has receive slots (32)
	w := newWorld(t, n, coll.Config{Timeout: 3 * time.Second})
	// Links up first: the refusals go over them.
	w.mustRun(func(r *rank) error { return runColl(context.Background(), r.team, coll.Args{Type: coll.Barrier}) })

	reqs := make([][]*coll.Request, n)
	w.mustRun(func(r *rank) error {
		for range refused + 1 {
			q, err := r.team.Init(coll.Args{Type: coll.Barrier})
			if err != nil {
				return err
			}
			reqs[r.r] = append(reqs[r.r], q)
		}
		return nil
	})
	defer func() {
		for _, qs := range reqs {
			for _, q := range qs {
				_ = q.Close()
			}
		}
	}()
	// Ranks 1 and 2, the agreement's children of rank 0, post the first barrier and
	// report it done; they wait for rank 0's decision.
	errs := make(chan error, n)
	for r := 1; r < n; r++ {
		q := reqs[r][0]
		require.NoError(t, q.Post(), "rank %d", r)
		go func() { errs <- q.Wait(context.Background()) }()
	}
	for r := 1; r < n; r++ {
		require.Eventually(t, func() bool {
			return strings.Contains(coll.DebugState(w.ranks[r].team), "sentDone=true")
		}, 10*time.Second, time.Millisecond, "rank %d reports the barrier done", r)
	}

	// Rank 0 breaks without telling anyone, and refuses every later barrier first.
	t0 := w.ranks[0].team
	coll.BreakSilently(t0, errors.New("a link failed (test)"))
	for i := refused; i >= 0; i-- {
		require.ErrorIs(t, reqs[0][i].Post(), coll.ErrTeamBroken)
	}
	require.Zero(t, coll.Backlog(t0), "rank 0's refusals left its send queues")

	for r := 1; r < n; r++ {
		err := <-errs
		var pe *coll.PeerError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, 0, pe.Rank, "%v", err)
		require.Contains(t, err.Error(), "was posted on a broken team", "the refusal's news, not the missing decision")
		require.NotContains(t, err.Error(), "got no decision")
	}
}
