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
// (only the last write, which is no piece, takes a leaf off the list: a piece that
// lands after the abort leaves both listed).
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
			// A landing piece says more is to come: the leaf stays on the list.
			for i := range root.ops {
				if o := &root.ops[i]; o.kind == opRecv && o.peer == 1 {
					root.t.onData(1, makeImm(root.seq, 1, o.tag, true))
				}
			}
			require.Equal(t, leaves, root.Writers(nil), "a piece of rank 1's block landed, not its last write")
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

// TestAbortedPostUnsentRTRs: in a team that connects on first use, a persistent root
// posts and aborts before its link to the leaf is up, so its ready-to-receives are
// still queued.
//   - gather: the RTR names the user's buffer, so the queued RTR counts as exposed. The
//     link comes up, the queue drops it unsent, and Writers no longer lists the leaf:
//     it never learnt of the buffer, and an aborting root must not wait for, and cut
//     off, a leaf that may never call the library again.
//   - reduce: the RTRs (for post 1, and for post 2 ahead) name the transport's scratch,
//     which Writers never lists (quarantine.go). The root closes while they are still
//     queued, and keeps nothing: they never leave, so no write can come.
func TestAbortedPostUnsentRTRs(t *testing.T) {
	for _, cs := range []*collCase{
		plainCase(collective.Gather, "linear", 2, 0, 6000, collective.Int64, 0),
		plainCase(collective.Reduce, "knomial", 2, 0, 6000, collective.Int64, collective.OpSum),
	} {
		t.Run(cs.c.String(), func(t *testing.T) {
			ft := newFakeTeamMode(t, 2, nil, true)
			runs := cs.build(t, ft.newSeq())
			for r := range runs {
				runs[r].spec.Persistent = true
			}
			tasks := ft.newTasks(t, runs)
			defer func() { ft.quiesce(t, tasks) }()
			fill(testutil.Rand(t), runs)
			root := tasks[0].(*task)
			require.NoError(t, root.Post(1))
			pe := root.t.peers[1]
			require.NotNil(t, pe)
			require.Positive(t, pe.queue.len(), "the RTRs wait for the link")
			if cs.c == collective.Reduce {
				require.Equal(t, 1, aheadOps(root), "the root's receive arms ahead")
				require.Empty(t, root.Writers(nil), "RTRs into scratch make no writer")
				root.Abort()
				kept := KeptBuffers()
				require.NoError(t, root.Close())
				tasks[0] = nil
				require.Equal(t, kept, KeptBuffers(), "RTRs that never left leave nothing to keep")
				require.Empty(t, root.t.quarantine)
				return
			}
			require.Equal(t, []int{1}, root.Writers(nil), "the queued RTR counts as exposed")
			root.Abort()
			require.True(t, ft.pollUntil(t, pollTimeout, func() bool { return pe.queue.len() == 0 }), "the queue drains")
			require.Empty(t, root.Writers(nil), "the RTR never left: the leaf can write nothing")
		})
	}
}
