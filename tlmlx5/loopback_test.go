package tlmlx5

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/dm"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// dmGather is a persistent gather of blk bytes per rank on ft, rooted at root, whose
// sources are DM of the context's pool and whose root's destination is DM (dmDst) or
// registered host memory. It returns the tasks, the sources' bytes and a reader of the
// root's output.
func dmGather(t *testing.T, ft *fakeTeam, root, blk int, dmDst bool) ([]driver.Task, [][]byte, func() []byte) {
	rnd := testutil.Rand(t)
	n := ft.n
	alloc := func(size int) *mem.Buffer {
		b, err := ft.ctx.(*context).AllocDM(size)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, b.Close()) })
		return b
	}
	dbuf := func(b *mem.Buffer, count int) driver.Buf {
		return driver.Buf{Type: mem.DM, Buf: b, Addr: b.Addr(), Bytes: count, Count: count}
	}
	in := make([][]byte, n)
	srcs := make([]*mem.Buffer, n)
	for r := range in {
		in[r] = make([]byte, blk)
		testutil.Fill(rnd, in[r])
		srcs[r] = alloc(blk)
		require.NoError(t, srcs[r].Region().CopyTo(0, in[r]))
	}
	var dst driver.Buf
	var read func() []byte
	if dmDst {
		b := alloc(n * blk)
		dst = dbuf(b, n*blk)
		read = func() []byte {
			got := make([]byte, n*blk)
			require.NoError(t, b.Region().CopyFrom(got, 0))
			return got
		}
	} else {
		h := make([]byte, n*blk)
		dst = driver.Buf{Type: mem.Host, Slice: h, Addr: uintptr(unsafe.Pointer(&h[0])), Bytes: n * blk, Count: n * blk}
		read = func() []byte { return append([]byte(nil), h...) }
	}
	seq := ft.newSeq()
	tasks := make([]driver.Task, n)
	for r := range tasks {
		spec := &driver.TaskSpec{Seq: seq, Type: collective.Gather, Root: root, DType: collective.Uint8, Block: blk, Persistent: true,
			Src: dbuf(srcs[r], blk)}
		if r == root {
			spec.Dst = dst
		}
		k, err := ft.newTask(r, spec)
		require.NoError(t, err, "rank %d", r)
		tasks[r] = k
	}
	return tasks, in, read
}

// TestLoopbackCopiesOutOfDM: a gather root whose source is DM copies its own block
// through the NIC where the device reports uncached CPU reads of its memory (one
// loopback write per post, no CPU bounce), into DM and into host memory, on teams of
// one rank (the loopback makes the team's only CQ) and of three; where it reports
// cached reads (soft0 by default) the CPU copies it. The data is checked either way.
func TestLoopbackCopiesOutOfDM(t *testing.T) {
	for _, viaNIC := range []bool{true, false} {
		for _, n := range []int{1, 3} {
			for _, dmDst := range []bool{true, false} {
				name := map[bool]string{true: "loopback", false: "cpu"}[viaNIC] + map[bool]string{true: "/dm-dst", false: "/host-dst"}[dmDst]
				t.Run(name+"/n="+string(rune('0'+n)), func(t *testing.T) {
					ft := newFakeTeamOn(t, openSoftWith(t, driver.Config{SoftDMUncached: viaNIC}), n, nil, true)
					require.Equal(t, viaNIC, ft.ctx.(*context).attr.DMUncachedReads, "what the device reports")
					if poolOf(ft).Kind() != dm.KindDM {
						t.Fatalf("soft0's pool is %s memory: the test needs device memory", poolOf(ft).Kind())
					}
					const blk, posts = 1000, 3
					root := n - 1
					tasks, in, read := dmGather(t, ft, root, blk, dmDst)
					for post := uint32(1); post <= posts; post++ {
						ft.run(t, tasks, post)
						require.Equal(t, bytes.Join(in, nil), read(), "post %d", post)
					}
					rt := ft.eps[root].(*team)
					k := tasks[root].(*task)
					if viaNIC {
						require.NotNil(t, rt.lp, "no loopback QP was made")
						require.NoError(t, rt.lp.down)
						require.Equal(t, uint64(posts), rt.lp.copies, "one loopback copy per post")
						require.Nil(t, k.bounce, "a copy went through the CPU's bounce buffer")
					} else {
						require.Nil(t, rt.lp, "a loopback QP was made with the loopback off")
						if dmDst {
							require.NotNil(t, k.bounce, "DM to DM by the CPU goes through the bounce buffer")
						}
					}
					for r := range tasks {
						if r != root {
							require.Nil(t, ft.eps[r].(*team).lp, "rank %d copies nothing out of DM", r)
						}
					}
					ft.quiesce(t, tasks)
				})
			}
		}
	}
}

// TestLoopbackFailureFailsThePost: a loopback QP that failed (moved to the error
// state under the transport, as a device would) fails the post whose copy it
// flushed, naming the local copy, and no other: the peer's part succeeds, no link
// fails, and the next post copies through the CPU, with the right data.
func TestLoopbackFailureFailsThePost(t *testing.T) {
	const n, blk, root = 2, 512, 0
	ft := newFakeTeamOn(t, openSoftWith(t, driver.Config{SoftDMUncached: true}), n, nil, true)
	if poolOf(ft).Kind() != dm.KindDM {
		t.Fatalf("soft0's pool is %s memory: the test needs device memory", poolOf(ft).Kind())
	}
	tasks, in, read := dmGather(t, ft, root, blk, true)
	ft.run(t, tasks, 1)
	require.Equal(t, bytes.Join(in, nil), read())
	rt := ft.eps[root].(*team)
	require.NotNil(t, rt.lp)
	require.NoError(t, rt.lp.qp.MoveToError())

	errs := ft.post(t, tasks, 2)
	require.Error(t, errs[root], "the root's copy was flushed")
	require.ErrorContains(t, errs[root], "local copy through the NIC")
	var ce *verbs.CompletionError
	require.ErrorAs(t, errs[root], &ce, "the flushed completion")
	require.Equal(t, verbs.WCWRFlushErr, ce.Status)
	require.NoError(t, errs[1], "the peer's part does not depend on the root's copy")
	require.Nil(t, rt.broken, "a local copy's failure breaks no link")
	require.Error(t, rt.lp.down)
	ft.quiesce(t, tasks)

	// The next collective: the CPU copies.
	tasks, in, read = dmGather(t, ft, root, blk, true)
	ft.run(t, tasks, 1)
	require.Equal(t, bytes.Join(in, nil), read(), "the CPU copies once the loopback is down")
	require.NotNil(t, tasks[root].(*task).bounce, "the copy after the failure went through the CPU")
	require.Equal(t, uint64(2), rt.lp.copies, "no copy went to the failed loopback")
	ft.quiesce(t, tasks)
}

// dmGatherRun is one dmGather: its tasks, the sources' bytes, the reader of the output.
type dmGatherRun struct {
	tasks []driver.Task
	in    [][]byte
	read  func() []byte
}

// TestLoopbackQueue: more copies at once than the loopback QP's send queue holds
// (loopDepth): the rest wait in order for room, one of them is aborted before it
// went out (dropped, never posted), and every other gather ends with the right data;
// every task quiesces, and nothing is left on the QP.
func TestLoopbackQueue(t *testing.T) {
	const blk, cnt = 64, loopDepth + 8
	ft := newFakeTeamOn(t, openSoftWith(t, driver.Config{SoftDMUncached: true}), 1, nil, true)
	gs := make([]dmGatherRun, cnt)
	for i := range gs {
		gs[i].tasks, gs[i].in, gs[i].read = dmGather(t, ft, 0, blk, i%2 == 0)
	}
	for i := range gs {
		require.NoError(t, gs[i].tasks[0].Post(1), "gather %d", i)
	}
	rt := ft.eps[0].(*team)
	require.Equal(t, loopDepth, rt.lp.posted, "the QP's send queue is full")
	require.Len(t, rt.lp.queue, cnt-loopDepth, "the rest wait for room")
	gs[cnt-1].tasks[0].Abort()
	var live []driver.Task
	for _, g := range gs[:cnt-1] {
		live = append(live, g.tasks...)
	}
	if !ft.pollUntil(t, pollTimeout, func() bool { return allSettled(live) }) {
		t.Fatalf("copies hang: %s", waiting(live))
	}
	for i, g := range gs[:cnt-1] {
		_, errs := states(g.tasks)
		require.NoError(t, errs[0], "gather %d", i)
		require.Equal(t, bytes.Join(g.in, nil), g.read(), "gather %d", i)
	}
	for _, g := range gs {
		ft.quiesce(t, g.tasks)
	}
	require.Zero(t, rt.lp.posted)
	require.Empty(t, rt.lp.queue)
	require.Equal(t, uint64(cnt-1), rt.lp.copies, "the aborted copy was never posted")
}

// TestLoopbackFailsWithCopiesQueued: the loopback QP fails (moved to the error state
// under the transport) with more copies posted at once than it holds: those it held
// fail their posts, flushed and named; those still queued never reached the NIC, and
// the CPU makes them, with the right data. No post hangs.
func TestLoopbackFailsWithCopiesQueued(t *testing.T) {
	const blk, cnt = 64, loopDepth + 8
	ft := newFakeTeamOn(t, openSoftWith(t, driver.Config{SoftDMUncached: true}), 1, nil, true)
	first, _, _ := dmGather(t, ft, 0, blk, true)
	ft.run(t, first, 1) // makes the QP
	ft.quiesce(t, first)
	rt := ft.eps[0].(*team)
	require.NoError(t, rt.lp.qp.MoveToError())
	gs := make([]dmGatherRun, cnt)
	var all []driver.Task
	for i := range gs {
		gs[i].tasks, gs[i].in, gs[i].read = dmGather(t, ft, 0, blk, true)
		all = append(all, gs[i].tasks...)
	}
	for i := range gs {
		require.NoError(t, gs[i].tasks[0].Post(1), "gather %d", i)
	}
	require.Len(t, rt.lp.queue, cnt-loopDepth)
	if !ft.pollUntil(t, pollTimeout, func() bool { return allSettled(all) }) {
		t.Fatalf("a post hangs: %s", waiting(all))
	}
	for i, g := range gs {
		_, errs := states(g.tasks)
		if i < loopDepth {
			require.ErrorContains(t, errs[0], "local copy through the NIC", "gather %d: on the QP when it failed", i)
			continue
		}
		require.NoError(t, errs[0], "gather %d: queued, so the CPU copies it", i)
		require.Equal(t, bytes.Join(g.in, nil), g.read(), "gather %d", i)
	}
	require.Error(t, rt.lp.down)
	require.Nil(t, rt.broken, "no link failed")
	for _, g := range gs {
		ft.quiesce(t, g.tasks)
	}
}

// TestLoopbackEventsTakeItDown: an error event of the loopback QP, and a fatal device
// error, take the loopback down, naming the event; the team's links stay up after
// the QP's event, and later copies go by the CPU with the right data.
func TestLoopbackEventsTakeItDown(t *testing.T) {
	for _, ev := range []verbs.AsyncEventType{verbs.EventQPFatal, verbs.EventDeviceFatal} {
		t.Run(ev.String(), func(t *testing.T) {
			const n, blk, root = 2, 256, 1
			ft := newFakeTeamOn(t, openSoftWith(t, driver.Config{SoftDMUncached: true}), n, nil, true)
			tasks, in, read := dmGather(t, ft, root, blk, true)
			ft.run(t, tasks, 1)
			rt := ft.eps[root].(*team)
			require.NotNil(t, rt.lp)
			soft, err := verbs.SoftControl(ft.ctx.(*context).dev)
			require.NoError(t, err)
			var qp *verbs.QP
			if ev == verbs.EventQPFatal {
				qp = rt.lp.qp
			}
			require.NoError(t, soft.RaiseEvent(ev, 0, qp))
			rt.checkEvents()
			require.ErrorContains(t, rt.lp.down, ev.String(), "the loopback names the event")
			if ev == verbs.EventDeviceFatal {
				ft.quiesce(t, tasks)
				return // every link failed too (TestDeviceFatalFailsLinks)
			}
			require.Nil(t, rt.broken, "the loopback's event fails no link")
			ft.run(t, tasks, 2)
			require.Equal(t, bytes.Join(in, nil), read(), "the CPU copies once the loopback is down")
			require.Equal(t, uint64(1), rt.lp.copies)
			ft.quiesce(t, tasks)
		})
	}
}
