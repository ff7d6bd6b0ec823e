package tlmlx5

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// TestRefusedRTRIsNoDestination: a receiver that finds a header wrong answers with a
// ready-to-receive that carries its own size, signature and root but no destination
// (checkEager). Where those agree with the sender's (the receiver takes the tag from
// another rank: only a builder bug or a forged message gets there), the sender took it
// for a real one and wrote to address 0 with rkey 0, which breaks the link instead of
// failing the post. The answer is now marked refused, and the sender fails its post
// with ErrMismatch naming the refusal, writing nothing. Rank 1's rendezvous send (64
// KiB, past the eager limit) gets such an answer before its post.
func TestRefusedRTRIsNoDestination(t *testing.T) {
	const blk = 64 << 10
	ft := newFakeTeam(t, 2, nil)
	ft.warm(t)
	rnd := testutil.Rand(t)
	seq := ft.newSeq()
	tasks := make([]driver.Task, 2)
	dst := make([]byte, 2*blk)
	for r := range tasks {
		src := make([]byte, blk)
		testutil.Fill(rnd, src)
		spec := &driver.TaskSpec{Seq: seq, Type: collective.Gather, Root: 0, DType: collective.Uint8, Block: blk,
			Src: driver.Buf{Type: mem.Host, Slice: src, Addr: uintptr(unsafe.Pointer(&src[0])), Bytes: blk, Count: blk}}
		if r == 0 {
			spec.Dst = driver.Buf{Type: mem.Host, Slice: dst, Addr: uintptr(unsafe.Pointer(&dst[0])), Bytes: 2 * blk, Count: 2 * blk}
		}
		var err error
		tasks[r], err = ft.newTask(r, spec)
		require.NoError(t, err)
	}
	k := tasks[1].(*task)
	send := -1
	for i := range k.ops {
		if k.ops[i].kind == opSend {
			send = i
		}
	}
	require.GreaterOrEqual(t, send, 0, "rank 1 sends nothing")
	require.False(t, k.ops[send].eager, "the send must go the rendezvous way")
	m := rtr{seq: seq, post: 1, tag: k.ops[send].tag, n: blk, sig: k.sig, root: 0, refused: true}
	ft.eps[1].(*team).onSlot(0, m.encode(make([]byte, slotSize)), ft.hs[1])
	errs := ft.post(t, []driver.Task{nil, tasks[1]}, 1)
	require.ErrorIs(t, errs[1], driver.ErrMismatch)
	require.ErrorContains(t, errs[1], "rank 0 refused rank 1's message for tag")
	require.Zero(t, k.ops[send].wrsLeft, "rank 1 wrote to the refused answer")
	ft.quiesce(t, tasks)
}
