package verbs_test

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/verbs"
)

// The contract suite's checks at their edges: the checks that keep a work request
// inside the memory it may touch, one case each right at the boundary, where an
// off-by-one or a missing comparison would let a request through.
// TestContractRemoteAccessErrors has the cases far from the edges.

// fenced registers the first n bytes of a 2n-byte mapping filled with seeded random
// data: the n bytes past the region are mapped, so that a write that wrongly passes
// the bounds check lands there (and shows) instead of faulting.
func fenced(t *testing.T, pd *verbs.PD, n int, access verbs.Access) (*verbs.MR, []byte) {
	t.Helper()
	m, err := unix.Mmap(-1, 0, 2*n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, unix.Munmap(m)) })
	testutil.Fill(testutil.Rand(t), m)
	mr, err := pd.RegMRAddr(uintptr(unsafe.Pointer(&m[0])), n, access)
	require.NoError(t, err)
	closeLater(t, mr)
	return mr, m
}

// requireRejected waits for the one completion of a request the responder must
// refuse: REM_ACCESS_ERR, and the requester's QP in the error state.
func requireRejected(t *testing.T, a *end, id uint64) {
	t.Helper()
	wc := waitWCs(t, a.cq, 1)[0]
	require.Equal(t, id, wc.ID)
	require.Equal(t, verbs.WCRemAccessErr, wc.Status, "requester status")
	st, err := a.qp.State()
	require.NoError(t, err)
	require.Equal(t, verbs.QPStateError, st)
}

// A remote write may end exactly at the region's last byte, and not one byte later:
// the refused one writes nothing, neither inside the region nor past it.
func TestContractRemoteBoundsToTheByte(t *testing.T) {
	const size, n = 4096, 64
	forEachProvider(t, func(t *testing.T, p provider) {
		r := testutil.Rand(t)
		for _, over := range []int{0, 1} {
			a, b := connected(t, p)
			src := newBuffer(t, a.pd, n, rw)
			testutil.Fill(r, src.b)
			mr, m := fenced(t, b.pd, size, rw)
			before := bytes.Clone(m)
			off := size - n + over // the write ends over bytes past the region
			require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, n)}, Signaled: true,
				RemoteAddr: mr.Addr() + uint64(off), RKey: mr.RKey()}))
			if over == 0 {
				waitOK(t, a.cq, 1)
				copy(before[off:], src.b)
				testutil.Equal(t, before, m, "a write that ends at the region's end")
				continue
			}
			requireRejected(t, a, 1)
			testutil.Equal(t, before, m, "a write one byte past the region's end")
		}
	})
}

// An rkey is valid only on queue pairs of its region's protection domain: a region
// of another PD of the same context is out of reach, whatever its access flags.
func TestContractRKeyOfAnotherPD(t *testing.T) {
	const n = 256
	forEachProvider(t, func(t *testing.T, p provider) {
		a, b := connected(t, p)
		pd2, err := b.ctx.AllocPD()
		require.NoError(t, err)
		closeLater(t, pd2)
		mr, m := fenced(t, pd2, n, rw)
		before := bytes.Clone(m)
		src := newBuffer(t, a.pd, n, rw)
		testutil.Fill(testutil.Rand(t), src.b)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 7, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, n)}, Signaled: true,
			RemoteAddr: mr.Addr(), RKey: mr.RKey()}))
		requireRejected(t, a, 7)
		testutil.Equal(t, before, m, "a region of another PD")
	})
}

// An RDMA read writes into the requester's own memory: its sink needs local write
// access, and a sink registered without it stays as it was.
func TestContractReadSinkNeedsLocalWrite(t *testing.T) {
	const n = 128
	forEachProvider(t, func(t *testing.T, p provider) {
		r := testutil.Rand(t)
		a, b := connected(t, p)
		remote := newBuffer(t, b.pd, n, rw)
		testutil.Fill(r, remote.b)
		sink, m := fenced(t, a.pd, n, verbs.AccessRemoteRead) // no local write
		before := bytes.Clone(m)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 3, Op: verbs.OpRDMARead, Signaled: true,
			SGE:        []verbs.SGE{{Addr: sink.Addr(), Length: n, LKey: sink.LKey()}},
			RemoteAddr: remote.addr(0), RKey: remote.mr.RKey()}))
		wc := waitWCs(t, a.cq, 1)[0]
		require.Equal(t, uint64(3), wc.ID)
		// As in TestContractLocalProtection: rxe may report LOC_QP_OP_ERR.
		require.Contains(t, []verbs.WCStatus{verbs.WCLocProtErr, verbs.WCLocQPOpErr}, wc.Status)
		if p.soft {
			require.Equal(t, verbs.WCLocProtErr, wc.Status)
		}
		testutil.Equal(t, before, m, "a read's sink without local write")
	})
}

// A send longer than the receive it consumes fails on both sides (the responder's
// receive with a length error, the requester with REM_INV_REQ_ERR), and nothing is
// written past the receive's buffer.
func TestContractSendLongerThanReceive(t *testing.T) {
	const n = 64
	forEachProvider(t, func(t *testing.T, p provider) {
		a, b := connected(t, p)
		src := newBuffer(t, a.pd, n+1, rw)
		testutil.Fill(testutil.Rand(t), src.b)
		dst, m := fenced(t, b.pd, 2*n, rw)
		past := bytes.Clone(m[n:])
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 9, SGE: []verbs.SGE{{Addr: dst.Addr(), Length: n, LKey: dst.LKey()}}}))
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 4, Op: verbs.OpSend, SGE: []verbs.SGE{src.sge(0, n+1)}, Signaled: true}))
		wc := waitWCs(t, a.cq, 1)[0]
		require.Equal(t, uint64(4), wc.ID)
		// The responder's refusal comes back as a remote error: an invalid request
		// (soft0, and mlx5 for a length error) or a remote operation error (rxe).
		require.Contains(t, []verbs.WCStatus{verbs.WCRemInvReqErr, verbs.WCRemOpErr}, wc.Status, "requester status %v", wc.Status)
		rwc := waitWCs(t, b.cq, 1)[0]
		require.Equal(t, uint64(9), rwc.ID)
		require.NotEqual(t, verbs.WCSuccess, rwc.Status, "the receive is too short")
		if p.soft {
			require.Equal(t, verbs.WCLocLenErr, rwc.Status)
		}
		testutil.Equal(t, past, m[n:], "past the receive's buffer")
	})
}

// An unsignaled request that fails still completes, with its error: a caller that
// signals only every k-th request learns of the failure from the failed one itself.
func TestContractUnsignaledFailureCompletes(t *testing.T) {
	const n = 64
	forEachProvider(t, func(t *testing.T, p provider) {
		a, b := connected(t, p)
		src := newBuffer(t, a.pd, n, rw)
		dst := newBuffer(t, b.pd, n, rw)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 5, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, n)}, Signaled: false,
			RemoteAddr: dst.addr(0), RKey: dst.mr.RKey() ^ 0x5a5a00}))
		requireRejected(t, a, 5)
	})
}
