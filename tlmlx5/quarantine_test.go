package tlmlx5

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// TestQuarantineAhead: the root of a 2-rank persistent reduce is aborted after post 2
// (as coll does when post 2 failed), while its leaf holds the RTR of post 3, sent
// ahead. Writers leaves the leaf out, and Close keeps that buffer allocated and
// registered, with its rkey live. Where the leaf, not having heard, posts 3 and
// writes, the leaf completes and the buffer is freed as the write lands; where it
// never posts again, the team's close frees it (TestMain checks that nothing leaks).
// A task closed after a success keeps nothing.
func TestQuarantineAhead(t *testing.T) {
	for _, c := range []struct {
		abort, leafPosts bool
	}{{true, true}, {true, false}, {false, false}} {
		t.Run(fmt.Sprintf("abort=%v/leafposts=%v", c.abort, c.leafPosts), func(t *testing.T) {
			rnd := testutil.Rand(t)
			cs := plainCase(collective.Reduce, "knomial", 2, 0, 6000, collective.Int64, collective.OpSum)
			ft := newFakeTeam(t, 2, nil)
			runs := cs.build(t, ft.newSeq())
			tasks := ft.newTasks(t, runs)
			defer func() { ft.quiesce(t, tasks) }()
			root := tasks[0].(*task)
			for post := uint32(1); post <= 2; post++ {
				want := cs.expect(t, runs, fill(rnd, runs))
				ft.run(t, tasks, post)
				check(t, fmt.Sprintf("post %d", post), runs, want)
			}
			o := recvOf(root)
			require.True(t, root.exposedAhead(o), "the leaf holds the RTR of post 3")
			exposed := root.regionFor(o, 3)
			live, owned := mem.Live(), 0
			for _, b := range root.bufs {
				if b.own != nil {
					owned++
				}
			}
			if c.abort {
				root.Abort()
			}
			require.Empty(t, root.Writers(nil), "an RTR sent ahead makes no writer")
			require.NoError(t, root.Close())
			tasks[0] = nil
			rt := root.t
			if !c.abort {
				require.Empty(t, rt.quarantine, "a task closed after a success keeps nothing")
				require.Equal(t, live-owned, mem.Live(), "the root's scratch is freed")
				return
			}
			require.Len(t, rt.quarantine, 1, "the buffer exposed ahead is kept")
			require.Equal(t, live-owned+1, mem.Live(), "only that buffer of the root's scratch stays")
			q := rt.quarantine[0]
			require.Equal(t, exposed.addr, uint64(q.own.Addr()), "the kept buffer is the one the RTR named")
			require.Equal(t, exposed.rkey, q.reg.mr.RKey(), "and it stays registered")
			require.Equal(t, []aheadWrite{{peer: 1, tag: o.tag, post: 3}}, q.writes)
			require.Equal(t, 1, rt.quarantined)
			if !c.leafPosts {
				return // the team's close frees it
			}
			fill(rnd, runs)
			require.NoError(t, tasks[1].Post(3))
			leafDone := func() bool { done, err := tasks[1].State(); return done || err != nil }
			if !ft.pollUntil(t, pollTimeout, func() bool { return leafDone() && len(rt.quarantine) == 0 }) {
				t.Fatalf("leaf done %v, quarantine %d: %s", leafDone(), len(rt.quarantine), waiting(tasks))
			}
			_, err := tasks[1].State()
			require.NoError(t, err, "the leaf's late write lands in the kept buffer")
			require.Nil(t, q.own, "the buffer is freed once the write it awaited landed")
		})
	}
}
