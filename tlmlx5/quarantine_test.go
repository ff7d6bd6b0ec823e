package tlmlx5

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// TestQuarantineAhead: the root of a 2-rank persistent reduce is aborted after post 2
// (as coll does when post 2 failed), while its leaf holds the RTR of post 3, sent
// ahead. Writers leaves the leaf out, and Close keeps that buffer allocated and
// registered, with its rkey live, until nothing can write into it:
//   - leafposts: the leaf, not having heard, posts 3 and writes; it completes, and the
//     buffer goes as the write lands;
//   - teamclose: the leaf never posts again; the team's close frees it (TestMain checks
//     that nothing leaks);
//   - answered: the leaf answers the abort (Answered), after answers that do not
//     cover the write (another collective, a later post);
//   - cutoff: the leaf's link is cut.
//
// And Close keeps nothing where nothing can come: the leaf answered before Close
// (answeredfirst), its write landed before Close (landedfirst), or the task closes
// after a success (noabort).
//
// The same holds for the buffers of a staged output that a persistent gather root
// holds itself (newOutputPair: doubleOutput).
func TestQuarantineAhead(t *testing.T) {
	pairs := map[string]func(*testing.T) (*fakeTeam, *collCase, []*rankRun, []driver.Task, *task){
		"reduce": newAheadPair, "gather-staged": newOutputPair}
	for _, pair := range []string{"reduce", "gather-staged"} {
		for _, how := range []string{"leafposts", "teamclose", "answered", "cutoff", "answeredfirst", "landedfirst", "noabort"} {
			t.Run(pair+"/"+how, func(t *testing.T) { quarantineAhead(t, how, pairs[pair]) })
		}
	}
}

func quarantineAhead(t *testing.T, how string, newPair func(*testing.T) (*fakeTeam, *collCase, []*rankRun, []driver.Task, *task)) {
	{
		{
			rnd := testutil.Rand(t)
			ft, cs, runs, tasks, root := newPair(t)
			rt := root.t
			for post := uint32(1); post <= 2; post++ {
				want := cs.expect(t, runs, fill(rnd, runs))
				ft.run(t, tasks, post)
				check(t, fmt.Sprintf("post %d", post), runs, want)
			}
			o := recvOf(root)
			require.True(t, root.exposedAhead(o), "the leaf holds the RTR of post 3")
			exposed := root.regionFor(o, 3)
			exposed.addr -= uint64(o.out.off) // the buffer's start
			live, owned := mem.Live(), 0
			for _, b := range root.bufs {
				if b.own != nil {
					owned++
				}
			}
			leafDone := func() bool { done, err := tasks[1].State(); return done || err != nil }
			leafPosts := func() {
				t.Helper()
				fill(rnd, runs)
				require.NoError(t, tasks[1].Post(3))
			}
			if how != "noabort" {
				root.Abort()
			}
			require.Empty(t, root.Writers(nil), "an RTR sent ahead makes no writer")
			switch how {
			case "answeredfirst":
				rt.Answered(1, root.seq, 2)
			case "landedfirst":
				leafPosts()
				if !ft.pollUntil(t, pollTimeout, func() bool { return leafDone() && !root.exposedAhead(o) }) {
					t.Fatalf("the leaf's write never landed: %s", waiting(tasks))
				}
			}
			kept := KeptBuffers()
			require.NoError(t, root.Close())
			tasks[0] = nil
			if how == "noabort" || how == "answeredfirst" || how == "landedfirst" {
				require.Empty(t, rt.quarantine, "nothing can write into the root's scratch: Close keeps nothing")
				require.Equal(t, kept, KeptBuffers())
				require.Equal(t, live-owned, mem.Live(), "the root's scratch is freed")
				return
			}
			q := checkKept(t, rt, kept, live-owned, exposed, aheadWrite{peer: 1, tag: o.tag, post: 3})
			releaseKept(t, ft, tasks, rt, q, how, 3, leafPosts, nil)
			if how != "teamclose" {
				require.Equal(t, kept, KeptBuffers())
				require.Equal(t, live-owned, mem.Live())
			}
		}
	}
}

// checkKept checks that rt keeps one buffer, the one the RTR named (exposed), still
// registered under its rkey, awaiting w: KeptBuffers one more than kept, and one
// buffer more than base open.
func checkKept(t *testing.T, rt *team, kept, base int, exposed region, w aheadWrite) *quarantined {
	t.Helper()
	require.Len(t, rt.quarantine, 1, "the buffer the RTR named is kept")
	require.Equal(t, kept+1, KeptBuffers())
	require.Equal(t, base+1, mem.Live(), "only that buffer of the root's scratch stays")
	q := rt.quarantine[0]
	require.Equal(t, exposed.addr, uint64(q.own.Addr()), "the kept buffer is the one the RTR named")
	require.Equal(t, exposed.rkey, q.reg.mr.RKey(), "and it stays registered")
	require.Equal(t, []aheadWrite{w}, q.writes)
	return q
}

// releaseKept lets go of kept buffer q, awaiting rank 1's write of post, the way how
// names (teamclose: nothing here, the team's close frees it), and checks that it went.
// landing, if not nil, runs before the leaf posts and checks what a landing piece
// leaves.
func releaseKept(t *testing.T, ft *fakeTeam, tasks []driver.Task, rt *team, q *quarantined, how string, post uint32, leafPosts, landing func()) {
	t.Helper()
	switch how {
	case "teamclose":
		return
	case "answered":
		rt.Answered(1, q.seq+1, post) // another collective's
		rt.Answered(1, q.seq, post+1) // a later post's failure: this one may have been written
		require.Len(t, rt.quarantine, 1, "answers that do not cover the write keep the buffer")
		rt.Answered(1, q.seq, post)
	case "cutoff":
		rt.CutOff(1, "test")
	case "leafposts":
		if landing != nil {
			landing()
		}
		leafPosts()
		leafDone := func() bool { done, err := tasks[1].State(); return done || err != nil }
		if !ft.pollUntil(t, pollTimeout, func() bool { return leafDone() && len(rt.quarantine) == 0 }) {
			t.Fatalf("leaf done %v, quarantine %d: %s", leafDone(), len(rt.quarantine), waiting(tasks))
		}
		_, err := tasks[1].State()
		require.NoError(t, err, "the leaf's late write lands in the kept buffer")
	}
	require.Empty(t, rt.quarantine, "%s frees the kept buffer", how)
	require.Nil(t, q.own)
}

// TestArmAheadUnsentCurrent: the RTR of post 3, sent ahead by post 2, is still queued
// (the send queue is full) when post 3 starts and takes it, and post 3 aborts before
// it leaves. The peer never learns of that buffer, so Writers must not name it: an
// aborting root would otherwise wait for, and cut off, a leaf that has not posted 3.
func TestArmAheadUnsentCurrent(t *testing.T) {
	rnd := testutil.Rand(t)
	ft, cs, runs, tasks, root := newAheadPair(t)
	want := cs.expect(t, runs, fill(rnd, runs))
	ft.run(t, tasks, 1)
	check(t, "post 1", runs, want)
	pe := root.t.link(1)
	require.Zero(t, pe.posted, "the root's sends of post 1 completed")
	pe.posted = sqDepth // full: what the root queues from here stays queued
	want = cs.expect(t, runs, fill(rnd, runs))
	ft.run(t, tasks, 2) // the leaf writes with the RTR of post 2, sent ahead by post 1
	check(t, "post 2", runs, want)
	o := recvOf(root)
	require.Equal(t, uint32(3), o.ahead, "post 2 queued the RTR of post 3")
	require.NoError(t, root.Post(3))
	require.Equal(t, 1, pe.queue.len()-1, "post 3 took the queued RTR of post 3 and queued post 4's behind it")
	root.Abort()
	pe.posted = 0
	root.t.flushQueued()
	require.Zero(t, pe.queue.len(), "the aborted post's RTRs are dropped unsent")
	require.Empty(t, root.Writers(nil), "the leaf never got the RTR of post 3: it writes nothing")
}

// TestQuarantineCurrent: the root of a 2-rank non-persistent reduce posts, its leaf
// holds the root's RTR into scratch (the leaf has not posted: its program computes),
// and the root aborts (its deadline, say). Writers leaves the leaf out, and Close keeps
// the scratch allocated and registered, rkey live, until nothing can write into it:
//   - leafposts: the leaf, not having heard, posts and writes (every landing piece and
//     the last write); the buffer goes as the last write lands, not before;
//   - teamclose: the leaf never posts; the team's close frees it;
//   - answered: the leaf answers the abort (Answered), after answers that do not
//     cover the write (another collective, a later post);
//   - cutoff: the leaf's link is cut.
//
// And Close keeps nothing where nothing can come (the leaf answered before Close:
// answeredfirst; the post succeeded: noabort), nor does the task cache keep a task
// whose scratch went to the quarantine. One write, and a block written in landing
// pieces.
func TestQuarantineCurrent(t *testing.T) {
	for _, count := range []int{6000, 2*pieceOf(1<<20) + 100} {
		for _, how := range []string{"leafposts", "teamclose", "answered", "cutoff", "answeredfirst", "noabort"} {
			t.Run(fmt.Sprint(count, "/", how), func(t *testing.T) {
				ft, cs, runs, tasks, root, o := newScratchPair(t, count)
				rt := root.t
				require.Zero(t, aheadOps(root), "a non-persistent receive does not arm ahead")
				require.NotNil(t, root.scratchAt(o, 1), "the leaf's vector lands in the transport's scratch")
				want := cs.expect(t, runs, fill(testutil.Rand(t), runs))
				postUntilLeafHolds(t, ft, tasks)
				exposed := o.dst
				live, owned := mem.Live(), 0
				for _, b := range root.bufs {
					if b.own != nil {
						owned++
					}
				}
				leafPosts := func() {
					t.Helper()
					require.NoError(t, tasks[1].Post(1))
				}
				if how == "noabort" {
					leafPosts()
					ft.finish(t, tasks, 1, runs, want)
					require.Empty(t, root.Writers(nil))
				} else {
					root.Abort()
					require.Empty(t, root.Writers(nil), "an RTR into scratch makes no writer")
				}
				if how == "answeredfirst" {
					rt.Answered(1, root.seq, 1)
				}
				kept, cached := KeptBuffers(), len(rt.cached)
				require.NoError(t, root.Close())
				tasks[0] = nil
				if how == "noabort" || how == "answeredfirst" {
					require.Empty(t, rt.quarantine, "nothing can write into the root's scratch: Close keeps nothing")
					require.Equal(t, kept, KeptBuffers())
					if how == "noabort" {
						require.Equal(t, cached+1, len(rt.cached), "the task cache keeps a task that succeeded")
					}
					return
				}
				require.Equal(t, cached, len(rt.cached), "a task whose scratch is kept is not kept for reuse")
				q := checkKept(t, rt, kept, live-owned, exposed, aheadWrite{peer: 1, tag: o.tag, post: 1})
				releaseKept(t, ft, tasks, rt, q, how, 1, leafPosts, func() {
					rt.onData(1, makeImm(q.seq, 1, o.tag, true))
					require.Len(t, rt.quarantine, 1, "a landing piece says more is to come")
				})
				if how != "teamclose" {
					require.Equal(t, kept, KeptBuffers())
					require.Equal(t, live-owned, mem.Live())
				}
			})
		}
	}
}

// newScratchPair makes a 2-rank non-persistent k-nomial reduce of count int64 whose
// root receives its leaf's vector into the transport's scratch (o, that receive); its
// tasks are quiesced and closed at the end of t, before its team.
func newScratchPair(t *testing.T, count int) (*fakeTeam, *collCase, []*rankRun, []driver.Task, *task, *op) {
	t.Helper()
	cs := plainCase(collective.Reduce, "knomial", 2, 0, count, collective.Int64, collective.OpSum)
	ft := newFakeTeam(t, 2, nil)
	runs := cs.build(t, ft.newSeq())
	for _, r := range runs {
		r.spec.Persistent = false
	}
	tasks := ft.newTasks(t, runs)
	t.Cleanup(func() { ft.quiesce(t, tasks) })
	root := tasks[0].(*task)
	i := slices.IndexFunc(root.ops, func(o op) bool { return o.kind == opRecv })
	require.GreaterOrEqual(t, i, 0, "the root receives")
	return ft, cs, runs, tasks, root, &root.ops[i]
}

// postUntilLeafHolds posts the root's post 1 and polls until the leaf holds its RTR,
// the leaf not having posted.
func postUntilLeafHolds(t *testing.T, ft *fakeTeam, tasks []driver.Task) {
	t.Helper()
	require.NoError(t, tasks[0].Post(1))
	leaf := tasks[1].(*task)
	holdsRTR := func() bool {
		return slices.ContainsFunc(leaf.ops, func(o op) bool { return o.kind == opSend && o.haveNxt[1] == 1 })
	}
	require.True(t, ft.pollUntil(t, pollTimeout, holdsRTR), "the root's RTR reaches the leaf")
}

// TestQuarantineRTSNotRTR: a queued message of the failed task that is no
// ready-to-receive (a rendezvous request, which issueEager queues without naming a
// receive) must not pass for one at Close. The ring slot it takes last held the RTR
// into the root's scratch; push used to keep that slot's op, and dropUnsent then
// marked the receive's RTR unsent though it had gone out, so Close freed (or cached)
// the scratch the leaf still writes into: its late write met deregistered memory
// (REM_ACCESS_ERR, both teams broken). Found in review.
func TestQuarantineRTSNotRTR(t *testing.T) {
	ft, cs, runs, tasks, root, o := newScratchPair(t, 6000)
	rt := root.t
	cs.expect(t, runs, fill(testutil.Rand(t), runs))
	postUntilLeafHolds(t, ft, tasks)
	root.Abort()
	pe := rt.link(1)
	pe.posted = sqDepth // what is queued now stays queued
	q := &pe.queue
	q.items[(q.head+q.size)%len(q.items)].op = o.idx // the slot last held this receive's RTR
	it := q.push()
	it.kind, it.k, it.post = itemCtl, root, 1 // as issueEager queues a rendezvous request
	require.NoError(t, root.Close())
	tasks[0] = nil
	pe.posted = 0
	require.Len(t, rt.quarantine, 1, "the RTR into scratch went out: its buffer is kept")
	require.NoError(t, tasks[1].Post(1))
	if !ft.pollUntil(t, pollTimeout, func() bool { return len(rt.quarantine) == 0 }) {
		t.Fatalf("the leaf's write never landed in the kept buffer: %s", waiting(tasks))
	}
	_, err := tasks[1].State()
	require.NoError(t, err, "the leaf's late write lands in the kept buffer")
	require.NoError(t, rt.Broken())
}
