package tlmlx5

import (
	"bytes"
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// TestDMPartialWordCopiesViaNIC: a gather root whose destination is DM copies its own
// block through the loopback QP where the block starts or ends inside a 4-byte word
// and the peers' blocks come by RDMA (blocks of 10001 bytes, past the eager limit;
// roots 0 and 1, so that a neighbour's block shares an edge word), on soft0's default
// cached reads too: the CPU writes DM in whole words, read and written back, which
// would write back stale the bytes that the neighbour's RDMA write may be filling at
// that moment. Word-aligned blocks (10000 bytes) go by the CPU, and so do blocks whose
// neighbours come eagerly (1001 bytes: the root's CPU copies those out of its ring,
// one after the other). Host sources, fresh data at each of 3 posts, checked.
func TestDMPartialWordCopiesViaNIC(t *testing.T) {
	for _, blk := range []int{10001, 10000, 1001} {
		for _, root := range []int{0, 1} {
			t.Run(fmt.Sprintf("blk=%d/root=%d", blk, root), func(t *testing.T) {
				const n, posts = 3, 3
				ft := newFakeTeamOn(t, openSoftWith(t, driver.Config{}), n, nil, true)
				rnd := testutil.Rand(t)
				srcs := make([][]byte, n)
				for r := range srcs {
					srcs[r] = make([]byte, blk)
				}
				b, err := ft.ctx.(*context).AllocDM(n * blk)
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, b.Close()) })
				seq := ft.newSeq()
				tasks := make([]driver.Task, n)
				for r := range tasks {
					s := srcs[r]
					spec := &driver.TaskSpec{Seq: seq, Type: collective.Gather, Root: root, DType: collective.Uint8, Block: blk, Persistent: true,
						Src: driver.Buf{Type: mem.Host, Slice: s, Addr: uintptr(unsafe.Pointer(&s[0])), Bytes: blk, Count: blk}}
					if r == root {
						spec.Dst = driver.Buf{Type: mem.DM, Buf: b, Addr: b.Addr(), Bytes: n * blk, Count: n * blk}
					}
					tasks[r], err = ft.newTask(r, spec)
					require.NoError(t, err, "rank %d", r)
				}
				for post := uint32(1); post <= posts; post++ {
					for r := range srcs {
						testutil.Fill(rnd, srcs[r])
					}
					ft.run(t, tasks, post)
					got := make([]byte, n*blk)
					require.NoError(t, b.Region().CopyFrom(got, 0))
					require.Equal(t, bytes.Join(srcs, nil), got, "post %d", post)
				}
				rt := ft.eps[root].(*team)
				if blk%4 != 0 && !rt.eager(blk) {
					require.NotNil(t, rt.lp, "no loopback QP was made")
					require.NoError(t, rt.lp.down)
					require.Equal(t, uint64(posts), rt.lp.copies, "one loopback copy per post")
				} else {
					require.Nil(t, rt.lp, "a word-aligned or eager-class block went through the loopback")
				}
				ft.quiesce(t, tasks)
			})
		}
	}
}
