package coll_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestRegressionAbortDrainBound: a failed post whose work the transport never finishes
// (a send to a SIGKILLed rank that rxe kept outstanding 35 s, in the VM suite) must
// not hold the abort for ever. Rank 1's task fails; rank 0's, aborted on that news,
// never quiesces until its links are cut, and rank 1 acknowledges the abort, so the
// grace cuts no one. Past the
// grace and abortDrain rank 0 cuts the task's peers off, which flushes it: the post
// fails naming what the transport was still doing, and the team is broken.
func TestRegressionAbortDrainBound(t *testing.T) {
	defer coll.SetAbortDrain(200 * time.Millisecond)()
	h := newFakeHub(t, 2, fakePolicy{}, testutil.Rand(t))
	h.setPlan(func(rank int, seq uint64, post uint32) taskPlan {
		if rank == 1 {
			return taskPlan{Polls: 1, StateErr: errFakeTask}
		}
		return taskPlan{Polls: -1, AbortPolls: -1}
	})
	cfg := fakeConfig()
	cfg.AbortGrace = coll.MinAbortGrace
	w := newFakeWorld(t, h, cfg)
	ctx := testCtx(t)
	done := make(chan []error, 1)
	go func() {
		done <- w.run(func(rank int, tm *coll.Team) error { return tm.Barrier(ctx) })
	}()
	var errs []error
	select {
	case errs = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the abort of a post whose transport work never ends hung")
	}
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
	}
	require.ErrorIs(t, errs[0], coll.ErrTeamBroken)
	require.ErrorContains(t, errs[0], "did not finish the failed post")
	require.ErrorContains(t, errs[0], "fake task #0")
	require.ErrorContains(t, errs[0], "failed on rank 1", "rank 0 names the failure")
	cuts := h.cutOffs()
	require.NotEmpty(t, cuts, "rank 0 cut its peers off")
	for _, c := range cuts {
		require.Equal(t, 0, c.by, "only the rank whose post did not drain cuts: %+v", c)
		require.Contains(t, c.why, "still outstanding")
	}
}
