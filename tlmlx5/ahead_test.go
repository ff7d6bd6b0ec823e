package tlmlx5

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// aheadOps counts the receives of task k that arm ahead.
func aheadOps(k *task) int {
	n := 0
	for i := range k.ops {
		if k.ops[i].armsAhead {
			n++
		}
	}
	return n
}

// TestArmAhead runs the persistent reductions whose receives into scratch arm ahead
// (rendezvous sizes below two landing pieces) for six posts of fresh data, every byte
// checked (the rings' receives wait for their earlier steps, so they do not arm
// ahead), and requires of every rank: each receive that arms ahead sent the RTR of
// every post after the first ahead (its post found it sent) and the next post's at
// every post; each one has two distinct buffers. Some rank of every case must arm
// ahead, or the case tests nothing.
func TestArmAhead(t *testing.T) {
	rnd := testutil.Rand(t)
	const posts = 6
	for _, n := range []int{2, 3, 5, 8} {
		count := eagerMaxFor(n)/4 + 1 + rnd.IntN(8000) // int32: over the eager maximum, under two pieces
		for _, cs := range []*collCase{
			plainCase(collective.Reduce, "knomial", n, 0, count, collective.Int32, collective.OpSum),
			plainCase(collective.Reduce, "knomial:2", n, n-1, count, collective.Int32, collective.OpMax),
			plainCase(collective.Allreduce, "rd", n, 0, count, collective.Int32, collective.OpSum),
			plainCase(collective.ReduceScatter, "rh", n, 0, count, collective.Int32, collective.OpSum),
		} {
			if Fits(cs.c, cs.alg, n) != nil {
				continue
			}
			t.Run(cs.String(), func(t *testing.T) {
				ft := newFakeTeam(t, n, nil)
				runs := cs.build(t, ft.newSeq())
				tasks := ft.newTasks(t, runs)
				defer func() { ft.quiesce(t, tasks) }()
				for post := uint32(1); post <= posts; post++ {
					want := cs.expect(t, runs, fill(rnd, runs))
					ft.run(t, tasks, post)
					check(t, fmt.Sprintf("post %d", post), runs, want)
				}
				armed := 0
				for r, dk := range tasks {
					k := dk.(*task)
					a := aheadOps(k)
					armed += a
					require.Equal(t, a*(posts-1), k.tookAhead, "rank %d: posts that found their RTR sent ahead", r)
					require.Equal(t, a*posts, k.armedAhead, "rank %d: RTRs sent ahead", r)
					for i := range k.ops {
						if o := &k.ops[i]; o.armsAhead {
							require.NotEqual(t, k.regionFor(o, posts), k.regionFor(o, posts+1), "rank %d op %d: one buffer for two posts", r, i)
						}
					}
				}
				require.Positive(t, armed, "no receive of any rank armed ahead: the case tests nothing")
			})
		}
	}
}

// recvOf is task k's one receive that arms ahead.
func recvOf(k *task) *op {
	for i := range k.ops {
		if k.ops[i].armsAhead {
			return &k.ops[i]
		}
	}
	panic("no receive arms ahead")
}

// newAheadPair makes a 2-rank persistent k-nomial reduce of int64 whose root's receive
// from its leaf arms ahead (rendezvous, under two landing pieces); its tasks are
// quiesced and closed at the end of t, before its team.
func newAheadPair(t *testing.T) (*fakeTeam, *collCase, []*rankRun, []driver.Task, *task) {
	t.Helper()
	cs := plainCase(collective.Reduce, "knomial", 2, 0, 6000, collective.Int64, collective.OpSum)
	ft := newFakeTeam(t, 2, nil)
	runs := cs.build(t, ft.newSeq())
	tasks := ft.newTasks(t, runs)
	t.Cleanup(func() { ft.quiesce(t, tasks) })
	return ft, cs, runs, tasks, tasks[0].(*task)
}

// TestArmAheadLandsEarly: a 2-rank persistent reduce whose leaf runs a post ahead.
// Between posts the root's buffer is exposed ahead to the leaf (the leaf holds an
// RTR), yet Writers leaves the leaf out (a failed post would keep that buffer at
// Close: quarantine.go); the leaf then posts, finishes, and its data lands in the
// root's other buffer while the root has not posted; the root's post takes it without
// waiting, with the right result, and nothing is exposed any more.
func TestArmAheadLandsEarly(t *testing.T) {
	rnd := testutil.Rand(t)
	ft, cs, runs, tasks, root := newAheadPair(t)
	require.Equal(t, 1, aheadOps(root), "the root's receive from its leaf arms ahead")
	want := cs.expect(t, runs, fill(rnd, runs))
	ft.run(t, tasks, 1)
	check(t, "post 1", runs, want)
	for post := uint32(2); post <= 5; post++ {
		require.True(t, root.exposedAhead(recvOf(root)), "post %d: the leaf holds the root's RTR of this post", post)
		require.Empty(t, root.Writers(nil), "post %d: an RTR sent ahead makes no writer", post)
		want := cs.expect(t, runs, fill(rnd, runs))
		require.NoError(t, tasks[1].Post(post))
		if !ft.pollUntil(t, pollTimeout, func() bool { done, _ := tasks[1].State(); return done }) {
			t.Fatalf("post %d: the leaf hangs: %s", post, waiting(tasks))
		}
		require.False(t, root.exposedAhead(recvOf(root)), "post %d: the leaf's data landed, so it writes nothing more", post)
		landed := root.landedAhead
		require.NoError(t, tasks[0].Post(post))
		require.Equal(t, landed+1, root.landedAhead, "post %d: the root found the leaf's data in place", post)
		ft.finish(t, tasks, post, runs, want)
	}
}

// TestArmAheadOnlyScratch: nothing arms ahead where a receive lands in the user's
// buffer (a gather's root, a bcast's leaves), in a request that is not persistent, or
// in eager sizes.
func TestArmAheadOnlyScratch(t *testing.T) {
	ft := newFakeTeam(t, 3, nil)
	big := eagerMaxFor(3) + 64
	for _, c := range []struct {
		cs         *collCase
		persistent bool
	}{
		{plainCase(collective.Gather, "linear", 3, 0, big, collective.Uint8, 0), true},
		{plainCase(collective.Bcast, "knomial", 3, 0, big, collective.Uint8, 0), true},
		{plainCase(collective.Allgather, "ring", 3, 0, big, collective.Uint8, 0), true},
		{plainCase(collective.Reduce, "knomial", 3, 0, big, collective.Uint8, collective.OpSum), false},
		{plainCase(collective.Reduce, "knomial", 3, 0, 64, collective.Uint8, collective.OpSum), true},
	} {
		runs := c.cs.build(t, ft.newSeq())
		var tasks []driver.Task
		for r := range runs {
			runs[r].spec.Persistent = c.persistent
			k, err := ft.newTask(r, &runs[r].spec)
			require.NoError(t, err)
			tasks = append(tasks, k)
			require.Zero(t, aheadOps(k.(*task)), "%v persistent=%v rank %d", c.cs, c.persistent, r)
			require.Empty(t, k.(*task).doubled, "%v persistent=%v rank %d", c.cs, c.persistent, r)
		}
		closeTasks(t, tasks)
	}
}

// TestArmAheadClosedDropsQueued: an RTR sent ahead that still waits in the send queue
// when its task closes never leaves (the scratch it names is freed with the task).
func TestArmAheadClosedDropsQueued(t *testing.T) {
	ft := newFakeTeam(t, 2, nil)
	cs := plainCase(collective.Reduce, "knomial", 2, 0, 4000, collective.Int32, collective.OpSum)
	runs := cs.build(t, ft.newSeq())
	k, err := ft.newTask(0, &runs[0].spec)
	require.NoError(t, err)
	root := k.(*task)
	pe := root.t.link(1)
	it := pe.queue.push()
	it.kind, it.k, it.post, it.ahead = itemCtl, root, 2, true
	plain := pe.queue.push()
	plain.kind, plain.k, plain.post = itemCtl, root, 1
	root.armedAhead = 1
	require.NoError(t, k.Close())
	var kept []*task
	for i := 0; i < pe.queue.size; i++ {
		kept = append(kept, pe.queue.items[(pe.queue.head+i)%len(pe.queue.items)].k)
	}
	require.True(t, slices.Contains(kept, retired), "the queued RTR sent ahead is retired")
	require.True(t, slices.Contains(kept, root), "what was not sent ahead is left as it was")
	pe.queue.clear()
}
