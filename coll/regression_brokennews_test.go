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
// agreement's root, rank 0, whose refusal of that barrier came after 30 others; once
// more, at a load that let the children go 10 ms without polling while rank 0
// refused: so what is still queued when a call returns leaves from a goroutine).
func TestRegressionBrokenNewsLeaves(t *testing.T) {
	t.Run("children-waiting", func(t *testing.T) { brokenNews(t, true) })
	t.Run("children-idle", func(t *testing.T) { brokenNews(t, false) })
}

func brokenNews(t *testing.T, wait bool) {
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
	// report it done; they wait for rank 0's decision. With wait, they wait (and so
	// poll) while rank 0 refuses; else only after it returned, and nothing of rank 0's
	// polls any more.
	errs := make(chan error, n)
	for r := 1; r < n; r++ {
		require.NoError(t, reqs[r][0].Post(), "rank %d", r)
	}
	for r := 1; r < n; r++ {
		require.Eventually(t, func() bool {
			return strings.Contains(coll.DebugState(w.ranks[r].team), "sentDone=true")
		}, 10*time.Second, time.Millisecond, "rank %d reports the barrier done", r)
	}
	waitAll := func() {
		for r := 1; r < n; r++ {
			q := reqs[r][0]
			go func() { errs <- q.Wait(context.Background()) }()
		}
	}
	if wait {
		waitAll()
	}

	// Rank 0 breaks without telling anyone, and refuses every later barrier first.
	t0 := w.ranks[0].team
	coll.BreakSilently(t0, errors.New("a link failed (test)"))
	for i := refused; i >= 0; i-- {
		require.ErrorIs(t, reqs[0][i].Post(), coll.ErrTeamBroken)
	}
	if !wait {
		require.Positive(t, coll.Backlog(t0), "rank 0's refusals are queued: nobody polls the children")
		waitAll()
	}
	for r := 1; r < n; r++ {
		err := <-errs
		var pe *coll.PeerError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, 0, pe.Rank, "%v", err)
		require.Contains(t, err.Error(), "was posted on a broken team", "the refusal's news, not the missing decision")
		require.NotContains(t, err.Error(), "got no decision")
	}
	require.Eventually(t, func() bool { return coll.Backlog(t0) == 0 }, 10*time.Second, time.Millisecond,
		"rank 0's backlog leaves though rank 0 is not called")
}

// A call that queues messages and returns without waiting for them (here Request.Close
// of requests never posted, each telling the peers so) leaves them to the team's
// drainer: the peer gets the news it waits for without another call on this rank. The second
// hour soak of session 9 saw barrier children wait on a rank 0 with 23 messages queued
// and no drainer running, after calls other than a refused post had queued them.
func TestRegressionClosedNewsLeaves(t *testing.T) {
	watchdog(t, 2*time.Minute)
	const n, closed = 2, 100 // more than rank 1's receive slots (32)
	w := newWorld(t, n, coll.Config{Timeout: 3 * time.Second})
	w.mustRun(func(r *rank) error { return runColl(context.Background(), r.team, coll.Args{Type: coll.Barrier}) })

	reqs := make([][]*coll.Request, n)
	w.mustRun(func(r *rank) error {
		for range closed {
			q, err := r.team.Init(coll.Args{Type: coll.Barrier})
			if err != nil {
				return err
			}
			reqs[r.r] = append(reqs[r.r], q)
		}
		return nil
	})
	t0 := w.ranks[0].team
	for i := closed - 1; i >= 0; i-- { // the first one's news last
		require.NoError(t, reqs[0][i].Close())
	}
	require.Positive(t, coll.Backlog(t0), "rank 0's news is queued: rank 1 does not poll")
	q := reqs[1][0]
	require.NoError(t, q.Post())
	err := q.Wait(context.Background())
	var pe *coll.PeerError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 0, pe.Rank, "%v", err)
	require.Contains(t, err.Error(), "without posting it", "rank 0's news, not rank 1's deadline")
	// What rank 0 still queues now (acknowledgements of rank 1's relays) waits for
	// rank 1 to poll, which it no longer does: nobody needs it.
	for _, q := range reqs[1] {
		require.NoError(t, q.Close())
	}
}
