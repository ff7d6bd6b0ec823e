package tlmlx5

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/verbs"
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

// TestPartialChainPost: the provider refuses a send chain midway, having posted its
// front (a real device does when its send queue fills). The link breaks, and every
// task still quiesces: the front's flushed completions and the refused rest are each
// accounted for once. (Before, the whole chain was undone at the refusal and the
// front again at its flushed completions: its task's count of outstanding work
// requests went below zero, and the task never quiesced.)
func TestPartialChainPost(t *testing.T) {
	rnd := testutil.Rand(t)
	const n = 2
	ft := newMeshTeam(t, n, nil) // rank 1 is polled alone below
	ft.warm(t)
	cs := plainCase(collective.Gather, "linear", n, 0, eagerMaxFor(n)+100, collective.Uint8, 0)
	var tasks []driver.Task
	for i := 0; i < 3; i++ {
		runs := cs.build(t, 0)
		ks := ft.initAll(t, runs, ft.newSeq())
		fill(rnd, runs)
		require.NoError(t, ks[1].Post(1), "rank 1 waits for the root's ready-to-receive")
		require.NoError(t, ks[0].Post(1), "the root's ready-to-receive goes out")
		tasks = append(tasks, ks...)
	}
	soft, err := verbs.SoftControl(ft.ctx.(*context).dev)
	require.NoError(t, err)
	require.NoError(t, soft.FailNth(verbs.FaultPostSend, 2))
	rank1 := ft.eps[1].(*team)
	for i := 0; i < 100 && rank1.broken == nil; i++ {
		require.NoError(t, rank1.Poll(ft.hs[1]))
	}
	require.Error(t, rank1.broken, "the injected refusal did not fire")
	require.ErrorIs(t, rank1.broken, verbs.ErrInjected)
	require.Equal(t, 1, verbs.PostedBefore(rank1.broken), "rank 1's writes went as one chain, refused at its 2nd: %v", rank1.broken)
	for i := 0; i < 5; i++ {
		ft.poll(t) // the completions of the chain's front
	}
	for i, k := range tasks {
		require.GreaterOrEqual(t, k.(*task).outstanding, 0, "task %d: work requests accounted for twice", i)
	}
	ft.quiesce(t, tasks)
}
