package tlmlx5

import (
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// TestGPUDirectFlushAfterPost (GPU machine): a gather whose root's Dst is CUDA memory
// that the NIC writes directly (soft0's GPUDirect stand-in) flushes the GPUDirect
// writes once per post, after the last block and before the root's State says done,
// and the data arrive; the leaves, whose output is not GPU memory, flush nothing, nor
// does the same gather into host memory. A failed flush fails the post, naming it.
func TestGPUDirectFlushAfterPost(t *testing.T) {
	b, err := mem.Alloc(mem.CUDA, 1)
	testutil.RequireCUDA(t, err == nil, "no CUDA memory")
	require.NoError(t, b.Close())
	ctx, err := transport{}.Open(driver.Config{Device: verbs.SoftDeviceName, SoftGPUDirect: true})
	require.NoError(t, err)
	require.True(t, ctx.Reach().NICReaches(mem.CUDA), "the stand-in registers CUDA memory")
	const n, blk, posts = 2, 64 << 10, 3
	ft := newFakeTeamOn(t, ctx, n, nil, false)
	rnd := testutil.Rand(t)

	var flushes int
	var fail error
	old := flushGPUDirect
	flushGPUDirect = func() error { flushes++; return fail }
	t.Cleanup(func() { flushGPUDirect = old })

	for _, dstType := range []mem.Type{mem.CUDA, mem.Host} {
		dst, err := mem.Alloc(dstType, n*blk)
		require.NoError(t, err)
		srcs := [n][]byte{make([]byte, blk), make([]byte, blk)}
		seq := ft.newSeq()
		tasks := make([]driver.Task, n)
		for r := range n {
			spec := &driver.TaskSpec{Seq: seq, Type: collective.Gather, Root: 0, DType: collective.Uint8, Persistent: true, Block: blk, Alg: "linear",
				Src: driver.Buf{Type: mem.Host, Slice: srcs[r], Addr: uintptr(unsafe.Pointer(&srcs[r][0])), Bytes: blk, Count: blk}}
			if r == 0 {
				spec.Dst = driver.Buf{Type: dstType, Buf: dst, Addr: dst.Addr(), Bytes: n * blk, Count: n * blk}
			}
			tasks[r], err = ft.newTask(r, spec)
			require.NoError(t, err)
		}
		require.Equal(t, dstType == mem.CUDA, tasks[0].(*task).gdrFlush)
		flushes = 0
		for post := uint32(1); post <= posts; post++ {
			for r := range n {
				testutil.Fill(rnd, srcs[r])
			}
			ft.run(t, tasks, post)
			got := make([]byte, n*blk)
			require.NoError(t, mem.CopyPtr(uintptr(unsafe.Pointer(&got[0])), mem.Host, dst.Addr(), dstType, n*blk))
			for r := range n {
				testutil.Equal(t, srcs[r], got[r*blk:(r+1)*blk], fmt.Sprintf("post %d, rank %d's block", post, r))
			}
		}
		want := 0
		if dstType == mem.CUDA {
			want = posts
		}
		require.Equal(t, want, flushes, "flushes into %v", dstType)
		if dstType == mem.CUDA {
			fail = errors.New("injected flush failure")
			errs := ft.post(t, tasks, posts+1)
			require.ErrorContains(t, errs[0], "flushing the NIC's writes into GPU memory")
			require.ErrorContains(t, errs[0], "injected flush failure")
			require.NoError(t, errs[1])
			fail = nil
		}
		closeTasks(t, tasks)
		require.NoError(t, dst.Close())
	}
}

// TestGPUDirectFlushBookkeeping (any machine): a task marked for the GPUDirect flush
// flushes once per post, before its State reports the post done: a post whose flush
// fails is never reported done, and fails naming the flush. The mark is forced on a
// host gather here, so that the bookkeeping runs without a GPU.
func TestGPUDirectFlushBookkeeping(t *testing.T) {
	rnd := testutil.Rand(t)
	const n = 2
	ft := newMeshTeam(t, n, nil)
	cs := plainCase(collective.Gather, "linear", n, 0, 4096, collective.Uint8, 0)
	runs := cs.build(t, 0)
	tasks := ft.initAll(t, runs, ft.newSeq())
	root := tasks[0].(*task)
	require.False(t, root.gdrFlush, "host memory is not flushed")
	root.gdrFlush = true
	var calls []uint32 // the post each flush was made for
	var fail error
	old := flushGPUDirect
	flushGPUDirect = func() error {
		done := root.done == len(root.ops) && root.outstanding == 0
		require.True(t, done, "flushed before the post's work was done")
		calls = append(calls, root.post)
		return fail
	}
	t.Cleanup(func() { flushGPUDirect = old })
	for post := uint32(1); post <= 3; post++ {
		fill(rnd, runs)
		ft.run(t, tasks, post)
		require.Equal(t, post, calls[len(calls)-1], "post %d flushed", post)
		require.Len(t, calls, int(post), "one flush per post, however often State is asked")
		for i := 0; i < 5; i++ {
			done, err := root.State()
			require.True(t, done)
			require.NoError(t, err)
		}
		require.Len(t, calls, int(post))
	}
	fail = errors.New("injected flush failure")
	errs := ft.post(t, tasks, 4)
	require.ErrorContains(t, errs[0], "flushing the NIC's writes into GPU memory: injected flush failure")
	require.NoError(t, errs[1])
	done, err := root.State()
	require.False(t, done, "a post whose flush failed is never done")
	require.Error(t, err)
	closeTasks(t, tasks)
}
