package tlmlx5

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestAbortedPostLandedLeavesWriters: a gather root aborts its post after its
// ready-to-receives went out and before its leaves posted (its deadline, say). The
// leaves then post, write their blocks and finish. Once the root has polled their
// last writes, Writers no longer lists them: they can write nothing more into its
// buffers, so coll need not wait for their acknowledgements, which a leaf that went
// idle after finishing its part never sends (it was cut off past the grace, and the
// team broke). Sizes: one write per block, and blocks written in landing pieces
// (only the last write, which is no piece, takes a leaf off the list).
func TestAbortedPostLandedLeavesWriters(t *testing.T) {
	rnd := testutil.Rand(t)
	const n = 3
	for _, count := range []int{eagerMaxFor(n) + 1 + rnd.IntN(4096), 2*pieceOf(1<<20) + rnd.IntN(4096)} {
		t.Run(fmt.Sprint(count), func(t *testing.T) {
			cs := plainCase(collective.Gather, "linear", n, 0, count, collective.Uint8, 0)
			ft := newFakeTeam(t, n, nil)
			runs := cs.build(t, ft.newSeq())
			tasks := ft.newTasks(t, runs)
			defer func() { ft.quiesce(t, tasks) }()
			fill(rnd, runs)
			root := tasks[0].(*task)
			require.NoError(t, root.Post(1))
			leaves := []int{1, 2}
			// Each leaf holds the root's RTR of post 1 before it posts.
			holdRTR := func() bool {
				for _, r := range leaves {
					k := tasks[r].(*task)
					if !slices.ContainsFunc(k.ops, func(o op) bool { return o.kind == opSend && o.haveNxt[1] == 1 }) {
						return false
					}
				}
				return true
			}
			require.True(t, ft.pollUntil(t, pollTimeout, holdRTR), "the root's RTRs reach both leaves")
			root.Abort()
			require.Equal(t, leaves, root.Writers(nil), "an abort alone takes no leaf off the list: both hold the root's RTR")
			for _, r := range leaves {
				require.NoError(t, tasks[r].Post(1))
			}
			leavesDone := func() bool {
				for _, r := range leaves {
					if done, err := tasks[r].State(); !done || err != nil {
						return false
					}
				}
				return true
			}
			require.True(t, ft.pollUntil(t, pollTimeout, leavesDone), "the leaves finish their part: %s", waiting(tasks[1:]))
			quiet := func() bool { return len(root.Writers(nil)) == 0 }
			require.True(t, ft.pollUntil(t, pollTimeout, quiet),
				"the leaves' blocks landed, yet the aborted root still lists them as writers: %v", root.Writers(nil))
			done, err := root.State()
			require.False(t, done, "an aborted post does not finish")
			require.NoError(t, err)
		})
	}
}
