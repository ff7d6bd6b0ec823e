package tlmlx5

import (
	gocontext "context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestPiecesWakeWaiter: a gather root whose own block is copied in pieces has more to
// do at its next Poll whatever its CQ says, so WaitEvent returns at once instead of
// sleeping; once the copy has ended, it waits again. Its leaf has not posted, so no
// completion can wake the root: a WaitEvent that slept would last its whole context.
func TestPiecesWakeWaiter(t *testing.T) {
	smallCopyPieces(t, 1<<10)
	rnd := testutil.Rand(t)
	var landed int
	ft, cs, runs, tasks := piecesGather(t, rnd, 4*copyPiece+rnd.IntN(copyPiece), func(off, n int) { landed += n })
	defer func() { ft.quiesce(t, tasks) }()
	want := cs.expect(t, runs, fill(rnd, runs))
	root := tasks[0].(*task)
	require.NoError(t, root.Post(1))
	tm := root.t
	wait := func(d time.Duration) error {
		ctx, cancel := gocontext.WithTimeout(gocontext.Background(), d)
		defer cancel()
		if err := tm.WaitEvent(ctx); err != nil {
			return err
		}
		return ctx.Err()
	}
	steps := 0
	for root.copyPieces < (cs.count*cs.dt.Size()+copyPiece-1)/copyPiece {
		require.True(t, tm.piecesPending.Load(), "a copy in pieces is under way, and WaitEvent is not told")
		require.NoError(t, wait(10*time.Second), "WaitEvent slept while the root's own block was half copied")
		require.NoError(t, ft.eps[0].Poll(ft.hs[0]))
		steps++
		require.Less(t, steps, 1000, "the copy in pieces does not end")
	}
	require.Greater(t, steps, 1, "the own block was not copied in pieces")
	require.False(t, tm.piecesPending.Load())
	require.Equal(t, cs.count*cs.dt.Size(), landed, "every piece of the own block is reported landed")
	require.ErrorIs(t, wait(20*time.Millisecond), gocontext.DeadlineExceeded,
		"with the copy done and the leaf idle, WaitEvent has nothing to return for")
	// The leaf's post completes the gather, and its data is right.
	require.NoError(t, tasks[1].Post(1))
	if !ft.pollUntil(t, pollTimeout, func() bool { return allSettled(tasks) }) {
		t.Fatalf("the gather hangs: %s", waiting(tasks))
	}
	_, errs := states(tasks)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	check(t, "gather after a copy in pieces", runs, want)
}

// TestPiecesClosedMidway: a root task aborted and closed between two pieces of its
// own block's copy leaves the team with nothing to continue, so the team's waiter
// sleeps again instead of returning at once for ever.
func TestPiecesClosedMidway(t *testing.T) {
	smallCopyPieces(t, 1<<10)
	rnd := testutil.Rand(t)
	ft, _, runs, tasks := piecesGather(t, rnd, 4*copyPiece, func(off, n int) {})
	defer func() { ft.quiesce(t, tasks) }()
	fill(rnd, runs)
	root := tasks[0].(*task)
	tm := root.t
	require.NoError(t, root.Post(1))
	require.True(t, tm.piecesPending.Load(), "the own block is not being copied in pieces")
	// The root's ready-to-receive is posted, not outstanding work of its own: Close
	// may follow Abort at once, with no Poll between them.
	root.Abort()
	require.True(t, root.Quiesced())
	require.NoError(t, root.Close())
	tasks[0] = nil
	require.False(t, tm.piecesPending.Load(), "a closed task's copy still counts as under way")
	ctx, cancel := gocontext.WithTimeout(gocontext.Background(), 20*time.Millisecond)
	defer cancel()
	err := tm.WaitEvent(ctx)
	if err == nil {
		err = ctx.Err()
	}
	require.ErrorIs(t, err, gocontext.DeadlineExceeded, "WaitEvent returned with nothing to do")
}

// smallCopyPieces makes copy pieces n bytes until the test ends.
func smallCopyPieces(t *testing.T, n int) {
	old := copyPiece
	copyPiece = n
	t.Cleanup(func() { copyPiece = old })
}

// piecesGather is a 2-rank linear gather, root 0, whose blocks are about bytes long
// (whole elements), with landed as the root's TaskSpec.Landed, so that the root's own
// block goes in pieces; its tasks are made, not posted.
func piecesGather(t *testing.T, rnd *rand.Rand, bytes int, landed func(off, n int)) (*fakeTeam, *collCase, []*rankRun, []driver.Task) {
	ft := newFakeTeam(t, 2, nil)
	cs := newCase(rnd, collective.Gather, "linear", 2, 0, 0, false)
	cs.count = bytes / cs.dt.Size()
	runs := cs.build(t, ft.newSeq())
	runs[0].spec.Landed = landed
	for _, rr := range runs {
		rr.spec.Persistent = false // one post, into the test's dst (a persistent staged output has its own: TestOutputAhead)
	}
	tasks := make([]driver.Task, 2)
	for r, rr := range runs {
		k, err := ft.newTask(r, &rr.spec)
		require.NoError(t, err)
		tasks[r] = k
	}
	return ft, cs, runs, tasks
}
