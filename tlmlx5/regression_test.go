package tlmlx5

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestRepostAfterAbortStaleCompletion: a receiver aborts a post whose data already
// landed but whose completion it has not polled yet. Its task reports Quiesced (it
// has no send outstanding), so it may be posted again. The stale completion must not
// be taken for the new post's data: the immediate carries the post's low bits, and
// the receiver drops data of another post. (Before, the receive counted as done
// before the new data arrived, and the real write then failed the task.) It runs above
// the eager maximum (a write with immediate into Dst) and below it (data in the eager
// ring, whose header carries the whole post number).
func TestRepostAfterAbortStaleCompletion(t *testing.T) {
	for _, count := range []int{64, eagerMaxFor(2) + 64} {
		t.Run(fmt.Sprint(count), func(t *testing.T) { repostAfterAbortStale(t, count) })
	}
}

func repostAfterAbortStale(t *testing.T, count int) {
	rnd := testutil.Rand(t)
	// A mesh: the test polls one rank alone, which does not answer a lazy connect.
	ft := newMeshTeam(t, 2, nil)
	ft.warm(t) // the eager rings are known
	cs := plainCase(collective.Gather, "linear", 2, 1, count, collective.Uint8, 0)
	runs := cs.build(t, ft.newSeq())
	tasks := make([]driver.Task, 2)
	defer func() { ft.quiesce(t, tasks) }()
	for r := range tasks {
		k, err := ft.newTask(r, &runs[r].spec)
		require.NoError(t, err)
		tasks[r] = k
	}
	fill(rnd, runs)
	require.NoError(t, tasks[1].Post(1))
	require.NoError(t, tasks[0].Post(1))
	// Only the sender progresses: its write completes, so the data is in rank 1's
	// buffer and the completion in rank 1's CQ.
	for i := 0; i < maxPollRounds; i++ {
		if d, _ := tasks[0].State(); d {
			break
		}
		require.NoError(t, ft.eps[0].Poll(ft.hs[0]))
	}
	d, err := tasks[0].State()
	require.NoError(t, err)
	require.True(t, d, "rank 0's write completes")
	tasks[1].Abort()
	require.True(t, tasks[1].Quiesced(), "rank 1 has nothing outstanding of its own")
	want := cs.expect(t, runs, fill(rnd, runs))
	for r, err := range ft.post(t, tasks, 2) {
		require.NoError(t, err, "rank %d, post 2", r)
	}
	check(t, "post 2", runs, want)
}
