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
