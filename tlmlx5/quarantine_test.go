package tlmlx5

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

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
func TestQuarantineAhead(t *testing.T) {
	for _, how := range []string{"leafposts", "teamclose", "answered", "cutoff", "answeredfirst", "landedfirst", "noabort"} {
		t.Run(how, func(t *testing.T) {
			rnd := testutil.Rand(t)
			ft, cs, runs, tasks, root := newAheadPair(t)
			rt := root.t
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
			require.Len(t, rt.quarantine, 1, "the buffer exposed ahead is kept")
			require.Equal(t, kept+1, KeptBuffers())
			require.Equal(t, live-owned+1, mem.Live(), "only that buffer of the root's scratch stays")
			q := rt.quarantine[0]
			require.Equal(t, exposed.addr, uint64(q.own.Addr()), "the kept buffer is the one the RTR named")
			require.Equal(t, exposed.rkey, q.reg.mr.RKey(), "and it stays registered")
			require.Equal(t, []aheadWrite{{peer: 1, tag: o.tag, post: 3}}, q.writes)
			switch how {
			case "teamclose":
				return
			case "answered":
				rt.Answered(1, root.seq+1, 1) // another collective's
				rt.Answered(1, root.seq, 4)   // a later post's failure: post 3 may have been written
				require.Len(t, rt.quarantine, 1, "answers that do not cover the write keep the buffer")
				rt.Answered(1, root.seq, 3)
			case "cutoff":
				rt.CutOff(1, "test")
			case "leafposts":
				leafPosts()
				if !ft.pollUntil(t, pollTimeout, func() bool { return leafDone() && len(rt.quarantine) == 0 }) {
					t.Fatalf("leaf done %v, quarantine %d: %s", leafDone(), len(rt.quarantine), waiting(tasks))
				}
				_, err := tasks[1].State()
				require.NoError(t, err, "the leaf's late write lands in the kept buffer")
			}
			require.Empty(t, rt.quarantine, "%s frees the kept buffer", how)
			require.Nil(t, q.own)
			require.Equal(t, kept, KeptBuffers())
			require.Equal(t, live-owned, mem.Live())
		})
	}
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
				rnd := testutil.Rand(t)
				cs := plainCase(collective.Reduce, "knomial", 2, 0, count, collective.Int64, collective.OpSum)
				ft := newFakeTeam(t, 2, nil)
				runs := cs.build(t, ft.newSeq())
				for _, r := range runs {
					r.spec.Persistent = false
				}
				tasks := ft.newTasks(t, runs)
				t.Cleanup(func() { ft.quiesce(t, tasks) })
				root := tasks[0].(*task)
				rt := root.t
				require.Zero(t, aheadOps(root), "a non-persistent receive does not arm ahead")
				var o *op
				for i := range root.ops {
					if root.ops[i].kind == opRecv {
						o = &root.ops[i]
					}
				}
				require.NotNil(t, o)
				require.NotNil(t, root.scratchAt(o, 1), "the leaf's vector lands in the transport's scratch")
				want := cs.expect(t, runs, fill(rnd, runs))
				require.NoError(t, root.Post(1))
				leaf := tasks[1].(*task)
				holdsRTR := func() bool {
					return slices.ContainsFunc(leaf.ops, func(o op) bool { return o.kind == opSend && o.haveNxt[1] == 1 })
				}
				require.True(t, ft.pollUntil(t, pollTimeout, holdsRTR), "the root's RTR reaches the leaf")
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
				leafDone := func() bool { done, err := tasks[1].State(); return done || err != nil }
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
				require.Len(t, rt.quarantine, 1, "the buffer the RTR named is kept")
				require.Equal(t, kept+1, KeptBuffers())
				require.Equal(t, live-owned+1, mem.Live(), "only that buffer of the root's scratch stays")
				q := rt.quarantine[0]
				require.Equal(t, exposed.addr, uint64(q.own.Addr()), "the kept buffer is the one the RTR named")
				require.Equal(t, exposed.rkey, q.reg.mr.RKey(), "and it stays registered")
				require.Equal(t, []aheadWrite{{peer: 1, tag: o.tag, post: 1}}, q.writes)
				switch how {
				case "teamclose":
					return
				case "answered":
					rt.Answered(1, root.seq+1, 1) // another collective's
					rt.Answered(1, root.seq, 2)   // a later post's failure: post 1 may have been written
					require.Len(t, rt.quarantine, 1, "answers that do not cover the write keep the buffer")
					rt.Answered(1, root.seq, 1)
				case "cutoff":
					rt.CutOff(1, "test")
				case "leafposts":
					rt.onData(1, makeImm(root.seq, 1, o.tag, true))
					require.Len(t, rt.quarantine, 1, "a landing piece says more is to come")
					leafPosts()
					if !ft.pollUntil(t, pollTimeout, func() bool { return leafDone() && len(rt.quarantine) == 0 }) {
						t.Fatalf("leaf done %v, quarantine %d: %s", leafDone(), len(rt.quarantine), waiting(tasks))
					}
					_, err := tasks[1].State()
					require.NoError(t, err, "the leaf's late write lands in the kept buffer")
				}
				require.Empty(t, rt.quarantine, "%s frees the kept buffer", how)
				require.Nil(t, q.own)
				require.Equal(t, kept, KeptBuffers())
				require.Equal(t, live-owned, mem.Live())
			})
		}
	}
}

// TestQuarantineRTSNotRTR: a queued message of the failed task that is no
// ready-to-receive (a rendezvous request, which issueEager queues without naming a
// receive) must not pass for one at Close. The ring slot it takes last held the RTR
// into the root's scratch; push used to keep that slot's op, and dropUnsent then
// marked the receive's RTR unsent though it had gone out, so Close freed (or cached)
// the scratch the leaf still writes into: its late write met deregistered memory
// (REM_ACCESS_ERR, both teams broken). Found in review.
func TestQuarantineRTSNotRTR(t *testing.T) {
	rnd := testutil.Rand(t)
	cs := plainCase(collective.Reduce, "knomial", 2, 0, 6000, collective.Int64, collective.OpSum)
	ft := newFakeTeam(t, 2, nil)
	runs := cs.build(t, ft.newSeq())
	for _, r := range runs {
		r.spec.Persistent = false
	}
	tasks := ft.newTasks(t, runs)
	t.Cleanup(func() { ft.quiesce(t, tasks) })
	root, leaf := tasks[0].(*task), tasks[1].(*task)
	rt := root.t
	var o *op
	for i := range root.ops {
		if root.ops[i].kind == opRecv {
			o = &root.ops[i]
		}
	}
	cs.expect(t, runs, fill(rnd, runs))
	require.NoError(t, root.Post(1))
	holdsRTR := func() bool {
		return slices.ContainsFunc(leaf.ops, func(o op) bool { return o.kind == opSend && o.haveNxt[1] == 1 })
	}
	require.True(t, ft.pollUntil(t, pollTimeout, holdsRTR), "the root's RTR reaches the leaf")
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
