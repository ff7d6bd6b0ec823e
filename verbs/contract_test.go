package verbs_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/verbs"
)

// The contract suite: the same tests on every provider present.

var sizes = []int{1, 3, 8, 4095, 4096, 65537, 1 << 20}

func TestContractWriteRead(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		r := testutil.Rand(t)
		a, b := connected(t, p)
		const maxN = 1<<20 + 64
		src := newBuffer(t, a.pd, maxN, rw)
		dst := newBuffer(t, b.pd, maxN, rw)
		back := newBuffer(t, a.pd, maxN, rw)
		for _, n := range sizes {
			off := r.IntN(32)
			testutil.Fill(r, src.b[:n+off])
			require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: uint64(n), Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(off, n)},
				Signaled: true, RemoteAddr: dst.addr(off), RKey: dst.mr.RKey()}))
			wc := waitOK(t, a.cq, 1)[0]
			require.Equal(t, uint64(n), wc.ID)
			require.Equal(t, verbs.WCRDMAWrite, wc.Op)
			testutil.Equal(t, src.b[off:off+n], dst.b[off:off+n], fmt.Sprintf("write %d bytes", n))

			// Read it back into a third buffer, scattered over two SGEs.
			h := n / 2
			sg := []verbs.SGE{back.sge(0, h), back.sge(h+16, n-h)}
			if h == 0 {
				sg = sg[1:]
			}
			require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 7, Op: verbs.OpRDMARead, SGE: sg, Signaled: true,
				RemoteAddr: dst.addr(off), RKey: dst.mr.RKey()}))
			wc = waitOK(t, a.cq, 1)[0]
			require.Equal(t, verbs.WCRDMARead, wc.Op)
			got := append(append([]byte{}, back.b[:h]...), back.b[h+16:h+16+n-h]...)
			testutil.Equal(t, src.b[off:off+n], got, fmt.Sprintf("read %d bytes", n))
		}
	})
}

func TestContractSendRecvImm(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		r := testutil.Rand(t)
		a, b := connected(t, p)
		const maxN = 1 << 20
		src := newBuffer(t, a.pd, maxN, rw)
		dst := newBuffer(t, b.pd, maxN, rw)
		for i, n := range sizes {
			testutil.Fill(r, src.b[:n])
			imm := r.Uint32()
			require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 100 + uint64(i), SGE: []verbs.SGE{dst.sge(0, maxN)}}))
			op := verbs.OpSend
			if i%2 == 1 {
				op = verbs.OpSendWithImm
			}
			require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Op: op, SGE: []verbs.SGE{src.sge(0, n)}, Signaled: true, Imm: imm}))
			waitOK(t, a.cq, 1)
			rwc := waitOK(t, b.cq, 1)[0]
			require.Equal(t, 100+uint64(i), rwc.ID)
			require.Equal(t, verbs.WCRecv, rwc.Op)
			require.Equal(t, uint32(n), rwc.Bytes)
			require.Equal(t, op == verbs.OpSendWithImm, rwc.HasImm)
			if rwc.HasImm {
				require.Equal(t, imm, rwc.Imm, "immediate data, host byte order")
			}
			require.Equal(t, b.qp.QPN(), rwc.QPN)
			testutil.Equal(t, src.b[:n], dst.b[:n], fmt.Sprintf("send %d bytes", n))
		}

		// RDMA write with immediate consumes a receive and carries imm.
		n := 4099
		testutil.Fill(r, src.b[:n])
		imm := r.Uint32()
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 55}))
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 2, Op: verbs.OpRDMAWriteWithImm, SGE: []verbs.SGE{src.sge(0, n)},
			Signaled: true, Imm: imm, RemoteAddr: dst.addr(5), RKey: dst.mr.RKey()}))
		waitOK(t, a.cq, 1)
		rwc := waitOK(t, b.cq, 1)[0]
		require.Equal(t, verbs.WCRecvRDMAWithImm, rwc.Op)
		require.True(t, rwc.HasImm)
		require.Equal(t, imm, rwc.Imm)
		require.Equal(t, uint32(n), rwc.Bytes)
		testutil.Equal(t, src.b[:n], dst.b[5:5+n], "write with imm")

		// Inline send: the source buffer may change right after the post.
		testutil.Fill(r, src.b[:32])
		want := append([]byte{}, src.b[:32]...)
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 56, SGE: []verbs.SGE{dst.sge(0, 64)}}))
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 3, Op: verbs.OpSend, SGE: []verbs.SGE{src.sge(0, 32)}, Signaled: true, Inline: true}))
		copy(src.b[:32], make([]byte, 32))
		waitOK(t, a.cq, 1)
		waitOK(t, b.cq, 1)
		testutil.Equal(t, want, dst.b[:32], "inline send")
	})
}

func TestContractChainedUnsignaled(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		r := testutil.Rand(t)
		a, b := connected(t, p)
		const n, k = 4096, 16
		src := newBuffer(t, a.pd, n*k, rw)
		dst := newBuffer(t, b.pd, n*k, rw)
		testutil.Fill(r, src.b)
		wrs := make([]verbs.SendWR, k)
		for i := range wrs {
			wrs[i] = verbs.SendWR{ID: uint64(i), Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(i*n, n)},
				RemoteAddr: dst.addr(i * n), RKey: dst.mr.RKey(), Signaled: i == k-1}
		}
		require.NoError(t, a.qp.PostSend(wrs...))
		wc := waitOK(t, a.cq, 1)[0]
		require.Equal(t, uint64(k-1), wc.ID, "only the last request is signaled, and it completes after the others")
		testutil.Equal(t, src.b, dst.b, "chained writes")
		m, err := a.cq.Poll(make([]verbs.WC, 4))
		require.NoError(t, err)
		require.Zero(t, m, "unsignaled requests must not complete")
	})
}

func TestContractAtomics(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		r := testutil.Rand(t)
		a, b := connected(t, p)
		res := newBuffer(t, a.pd, 8, rw)
		word := newBuffer(t, b.pd, 64, rw)
		attr, err := a.ctx.Query()
		require.NoError(t, err)
		if !attr.AtomicCap {
			// A device without atomics refuses them at post, and the QP still works.
			for _, op := range []verbs.Opcode{verbs.OpAtomicFetchAdd, verbs.OpAtomicCmpSwap} {
				err := a.qp.PostSend(verbs.SendWR{ID: 1, Op: op, SGE: []verbs.SGE{res.sge(0, 8)}, Signaled: true,
					RemoteAddr: word.addr(8), RKey: word.mr.RKey()})
				require.ErrorIs(t, err, verbs.ErrNotSupported, "%v", op)
				require.ErrorContains(t, err, "AtomicCap")
			}
			require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 2, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{res.sge(0, 8)}, Signaled: true,
				RemoteAddr: word.addr(8), RKey: word.mr.RKey()}))
			waitOK(t, a.cq, 1)
			return
		}
		init := r.Uint64()
		binary.LittleEndian.PutUint64(word.b[8:], init)
		add := r.Uint64() >> 1
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpAtomicFetchAdd, SGE: []verbs.SGE{res.sge(0, 8)},
			Signaled: true, RemoteAddr: word.addr(8), RKey: word.mr.RKey(), CompareAdd: add}))
		wc := waitOK(t, a.cq, 1)[0]
		require.Equal(t, verbs.WCFetchAdd, wc.Op)
		require.Equal(t, init, binary.LittleEndian.Uint64(res.b), "fetch-add returns the old value")
		require.Equal(t, init+add, binary.LittleEndian.Uint64(word.b[8:]))

		// Compare-swap that misses, then one that hits.
		swap := r.Uint64()
		for _, cmp := range []uint64{init, init + add} {
			require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 2, Op: verbs.OpAtomicCmpSwap, SGE: []verbs.SGE{res.sge(0, 8)},
				Signaled: true, RemoteAddr: word.addr(8), RKey: word.mr.RKey(), CompareAdd: cmp, Swap: swap}))
			wc = waitOK(t, a.cq, 1)[0]
			require.Equal(t, verbs.WCCompSwap, wc.Op)
			require.Equal(t, init+add, binary.LittleEndian.Uint64(res.b))
		}
		require.Equal(t, swap, binary.LittleEndian.Uint64(word.b[8:]))

		err = a.qp.PostSend(verbs.SendWR{Op: verbs.OpAtomicFetchAdd, SGE: []verbs.SGE{res.sge(0, 8)}, RemoteAddr: word.addr(4), RKey: word.mr.RKey()})
		require.ErrorIs(t, err, verbs.ErrInvalid, "unaligned atomic")
	})
}

// remoteFailure posts one request that the responder must reject and
// checks both sides end in the error state with the right statuses.
func TestContractRemoteAccessErrors(t *testing.T) {
	cases := []struct {
		name   string
		access verbs.Access
		op     verbs.Opcode
		off    int
		badKey bool
	}{
		{"write without remote-write", verbs.AccessLocalWrite | verbs.AccessRemoteRead, verbs.OpRDMAWrite, 0, false},
		{"read without remote-read", verbs.AccessLocalWrite | verbs.AccessRemoteWrite, verbs.OpRDMARead, 0, false},
		{"atomic without remote-atomic", verbs.AccessLocalWrite | verbs.AccessRemoteWrite, verbs.OpAtomicFetchAdd, 0, false},
		{"write past the end", rw, verbs.OpRDMAWrite, 4096 - 8, false},
		{"wrong rkey", rw, verbs.OpRDMAWrite, 0, true},
	}
	forEachProvider(t, func(t *testing.T, p provider) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				a, b := connected(t, p)
				if attr, err := a.ctx.Query(); c.op == verbs.OpAtomicFetchAdd && (err != nil || !attr.AtomicCap) {
					t.Skipf("the device does no atomics (TestContractAtomics checks their refusal): %v", err)
				}
				src := newBuffer(t, a.pd, 64, rw)
				dst := newBuffer(t, b.pd, 4096, c.access)
				n := 64
				if c.op == verbs.OpAtomicFetchAdd {
					n = 8
				}
				key := dst.mr.RKey()
				if c.badKey {
					key ^= 0x5a5a00
				}
				require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 9, SGE: []verbs.SGE{dst.sge(0, 64)}}))
				require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Op: c.op, SGE: []verbs.SGE{src.sge(0, n)}, Signaled: true,
					RemoteAddr: dst.addr(c.off), RKey: key}))
				wc := waitWCs(t, a.cq, 1)[0]
				require.Equal(t, verbs.WCRemAccessErr, wc.Status, "requester status")
				var ce *verbs.CompletionError
				require.ErrorAs(t, wc.Err(), &ce)
				require.Contains(t, wc.Err().Error(), "REM_ACCESS_ERR")
				st, err := a.qp.State()
				require.NoError(t, err)
				require.Equal(t, verbs.QPStateError, st)
				// The responder moves to error too and flushes its receive.
				rwc := waitWCs(t, b.cq, 1)[0]
				require.Equal(t, verbs.WCWRFlushErr, rwc.Status)
				require.Equal(t, uint64(9), rwc.ID)
			})
		}
	})
}

func TestContractLocalProtection(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		a, b := connected(t, p)
		src := newBuffer(t, a.pd, 64, rw)
		dst := newBuffer(t, b.pd, 64, rw)
		sge := src.sge(0, 64)
		sge.LKey ^= 0x5a5a00
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{sge}, Signaled: true,
			RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()}))
		wc := waitWCs(t, a.cq, 1)[0]
		// mlx5 and soft0 report LOC_PROT_ERR; rxe reports LOC_QP_OP_ERR
		// (see the verbs package doc). Either way the QP is in error.
		require.Contains(t, []verbs.WCStatus{verbs.WCLocProtErr, verbs.WCLocQPOpErr}, wc.Status)
		if p.soft {
			require.Equal(t, verbs.WCLocProtErr, wc.Status)
		}
		st, err := a.qp.State()
		require.NoError(t, err)
		require.Equal(t, verbs.QPStateError, st)
	})
}

func TestContractErrorAndFlush(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		a, b := connected(t, p)
		src := newBuffer(t, a.pd, 4096, rw)
		dst := newBuffer(t, b.pd, 4096, rw)
		for i := 0; i < 5; i++ {
			require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(10 + i), SGE: []verbs.SGE{dst.sge(0, 64)}}))
		}
		require.NoError(t, b.qp.MoveToError())
		st, err := b.qp.State()
		require.NoError(t, err)
		require.Equal(t, verbs.QPStateError, st)
		wcs := waitWCs(t, b.cq, 5)
		for i, wc := range wcs {
			require.Equal(t, verbs.WCWRFlushErr, wc.Status)
			require.Equal(t, uint64(10+i), wc.ID, "flushed in order")
		}
		// A receive posted to a QP already in error is accepted. mlx5 and
		// soft0 flush it at once; rxe (kernel 6.1) never completes it,
		// since its post_recv does not enter the kernel (see the package doc).
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 20, SGE: []verbs.SGE{dst.sge(0, 64)}}))
		if p.soft {
			require.Equal(t, verbs.WCWRFlushErr, waitWCs(t, b.cq, 1)[0].Status)
		}

		// Sends posted to a QP in error are flushed, signaled or not.
		require.NoError(t, b.qp.PostSend(verbs.SendWR{ID: 31, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{dst.sge(0, 64)}, Signaled: true,
			RemoteAddr: src.addr(0), RKey: src.mr.RKey()},
			verbs.SendWR{ID: 32, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{dst.sge(0, 64)}, Signaled: false,
				RemoteAddr: src.addr(0), RKey: src.mr.RKey()}))
		wcs = waitWCs(t, b.cq, 2)
		for i, wc := range wcs {
			require.Equal(t, verbs.WCWRFlushErr, wc.Status)
			require.Equal(t, uint64(31+i), wc.ID)
		}
		if !p.soft {
			return
		}
		// On soft0 the peer's requests fail at once: the responder is gone.
		// (rxe retries without bound here; see the package doc.)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, 64)}, Signaled: true,
			RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()},
			verbs.SendWR{ID: 2, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, 64)}, Signaled: false,
				RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()}))
		wcs = waitWCs(t, a.cq, 2)
		require.Equal(t, verbs.WCRetryExcErr, wcs[0].Status)
		require.Equal(t, uint64(1), wcs[0].ID)
		require.Equal(t, verbs.WCWRFlushErr, wcs[1].Status, "an unsignaled request is flushed with a completion")
	})
}

func TestContractBusyOrdering(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		ctx, err := verbs.OpenWith(p.devA, p.opts)
		require.NoError(t, err)
		pd, err := ctx.AllocPD()
		require.NoError(t, err)
		cq, err := ctx.CreateCQ(8)
		require.NoError(t, err)
		buf := make([]byte, 4096)
		mr, err := pd.RegMR(buf, rw)
		require.NoError(t, err)
		qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4})
		require.NoError(t, err)

		busy := func(c interface{ Close() error }, what string) {
			t.Helper()
			err := c.Close()
			require.ErrorIs(t, err, verbs.ErrBusy, what)
			var ve *verbs.Error
			require.ErrorAs(t, err, &ve)
		}
		busy(ctx, "context with children")
		busy(pd, "PD with an MR and a QP")
		busy(cq, "CQ used by a QP")
		require.NoError(t, mr.Close())
		busy(pd, "PD with a QP")
		require.NoError(t, qp.Close())
		require.NoError(t, cq.Close())
		require.NoError(t, pd.Close())
		if p.hasDM {
			dm, err := ctx.AllocDM(4096)
			require.NoError(t, err)
			pd2, err := ctx.AllocPD()
			require.NoError(t, err)
			dmr, err := pd2.RegDMMR(dm, 0, 4096, rw)
			require.NoError(t, err)
			busy(dm, "DM with a DM MR")
			require.NoError(t, dmr.Close())
			require.NoError(t, dm.Close())
			require.NoError(t, pd2.Close())
		}
		require.NoError(t, ctx.Close())
		// Everything is idempotent, and use after close is a clean error.
		for _, c := range []interface{ Close() error }{mr, qp, cq, pd, ctx} {
			require.NoError(t, c.Close())
		}
		_, err = ctx.AllocPD()
		require.ErrorIs(t, err, verbs.ErrClosed)
		_, err = cq.Poll(make([]verbs.WC, 1))
		require.ErrorIs(t, err, verbs.ErrClosed)
		require.ErrorIs(t, qp.PostRecv(verbs.RecvWR{}), verbs.ErrClosed)
	})
}

func TestContractDM(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		ctx := p.open(t)
		attr, err := ctx.Query()
		require.NoError(t, err)
		dm, err := ctx.AllocDM(8192)
		if !p.hasDM {
			// rxe has no device memory: a clean ErrNotSupported, nothing made.
			require.ErrorIs(t, err, verbs.ErrNotSupported)
			require.Nil(t, dm)
			require.Zero(t, attr.MaxDMSize)
			require.NoError(t, dm.Close(), "nil DM closes")
			return
		}
		require.NoError(t, err)
		closeLater(t, dm)
		require.NotZero(t, attr.MaxDMSize)
		r := testutil.Rand(t)

		data := make([]byte, 4096)
		testutil.Fill(r, data)
		for _, c := range []struct {
			off, n int
		}{{1, 4}, {0, 3}, {2, 6}, {-4, 4}, {8188, 8}} {
			require.ErrorIs(t, dm.CopyTo(c.off, data[:c.n]), verbs.ErrInvalid, "CopyTo(%d, %d)", c.off, c.n)
			require.ErrorIs(t, dm.CopyFrom(data[:c.n], c.off), verbs.ErrInvalid, "CopyFrom(%d, %d)", c.off, c.n)
		}
		require.NoError(t, dm.CopyTo(4, data))
		got := make([]byte, 4096)
		require.NoError(t, dm.CopyFrom(got, 4))
		testutil.Equal(t, data, got, "DM copy round trip")

		// RDMA into a zero-based DM MR, then read it back with CopyFrom.
		a, b := connected(t, provider{devA: p.devA, devB: p.devA, opts: p.opts})
		bdm, dmr := dmWithMR(t, b, 4096)
		closeLater(t, dmr)
		require.Zero(t, dmr.Addr(), "DM MRs are zero-based")
		src := newBuffer(t, a.pd, 4096, rw)
		testutil.Fill(r, src.b)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, 1000)}, Signaled: true,
			RemoteAddr: 256, RKey: dmr.RKey()}))
		waitOK(t, a.cq, 1)
		out := make([]byte, 1000)
		require.NoError(t, bdm.CopyFrom(out, 256))
		testutil.Equal(t, src.b[:1000], out, "RDMA write into DM")
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, 64)}, Signaled: true,
			RemoteAddr: 4096 - 32, RKey: dmr.RKey()}))
		require.Equal(t, verbs.WCRemAccessErr, waitWCs(t, a.cq, 1)[0].Status, "past the end of the DM MR")
	})
}

// TestContractNoCPUCopyOfDeviceMemory: a receive buffer or inline data in a DM MR is
// refused at post (ErrInvalid naming the SGE), on every provider that has device
// memory: mlx5 would memcpy a small send into a receive buffer while polling (scatter
// to CQE) and read inline data with memcpy at post, and a DM MR's addresses are
// offsets. The same QP still takes host receives and sends; once the DM MR is closed,
// its key is no longer refused.
func TestContractNoCPUCopyOfDeviceMemory(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		if !p.hasDM {
			t.Skipf("%s reports no device memory (MaxDMSize 0): nothing of it can be posted", p.devA)
		}
		a, b := connected(t, provider{devA: p.devA, devB: p.devA, opts: p.opts})
		_, dmr := dmWithMR(t, b, 4096)
		dmSGE := verbs.SGE{Addr: 64, Length: 64, LKey: dmr.LKey()}
		host := newBuffer(t, b.pd, 4096, rw)
		err := b.qp.PostRecv(verbs.RecvWR{ID: 1, SGE: []verbs.SGE{host.sge(0, 64)}}, verbs.RecvWR{ID: 2, SGE: []verbs.SGE{host.sge(64, 64), dmSGE}})
		require.ErrorIs(t, err, verbs.ErrInvalid)
		require.ErrorContains(t, err, "wrs[1].SGE[1]")
		require.ErrorContains(t, err, "device memory")
		err = b.qp.PostSend(verbs.SendWR{ID: 3, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{dmSGE}, Inline: true, Signaled: true,
			RemoteAddr: host.mr.Addr(), RKey: host.mr.RKey()})
		require.ErrorIs(t, err, verbs.ErrInvalid)
		require.ErrorContains(t, err, "wrs[0].SGE[0]")

		// Nothing was posted: a host receive and a send into it still pair up, and
		// the DM MR remains a source of ordinary (not inline) writes.
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 4, SGE: []verbs.SGE{host.sge(0, 64)}}))
		src := newBuffer(t, a.pd, 4096, rw)
		testutil.Fill(testutil.Rand(t), src.b)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 5, Op: verbs.OpSend, SGE: []verbs.SGE{src.sge(0, 64)}, Signaled: true}))
		waitOK(t, a.cq, 1)
		wc := waitWCs(t, b.cq, 1)[0]
		require.Equal(t, verbs.WCSuccess, wc.Status)
		require.Equal(t, uint64(4), wc.ID, "the refused receives were never posted")
		testutil.Equal(t, src.b[:64], host.b[:64], "send into the host receive")
		require.NoError(t, b.qp.PostSend(verbs.SendWR{ID: 6, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{dmSGE}, Signaled: true,
			RemoteAddr: src.mr.Addr(), RKey: src.mr.RKey()}))
		waitOK(t, b.cq, 1)

		require.NoError(t, dmr.Close())
		other := newBuffer(t, b.pd, 4096, rw)
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 7, SGE: []verbs.SGE{other.sge(0, 64)}}), "host receives after the DM MR closed")
	})
}

func TestContractBadArguments(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		e := newEndWith(t, p.devA, p.opts)
		cases := []struct {
			name string
			err  error
		}{}
		add := func(name string, err error) {
			cases = append(cases, struct {
				name string
				err  error
			}{name, err})
		}
		_, err := e.pd.RegMR(nil, rw)
		add("RegMR nil", err)
		_, err = e.pd.RegMR([]byte{}, rw)
		add("RegMR empty", err)
		_, err = e.pd.RegMR(make([]byte, 8), verbs.AccessRemoteWrite)
		add("RegMR remote-write without local-write", err)
		_, err = e.pd.RegMR(make([]byte, 8), verbs.Access(1<<20))
		add("RegMR unknown access bit", err)
		_, err = e.pd.RegMRAddr(0, 8, rw)
		add("RegMRAddr addr 0", err)
		_, err = e.pd.RegMRAddr(4096, 0, rw)
		add("RegMRAddr length 0", err)
		_, err = e.pd.RegMRAddr(^uintptr(0)-8, 4096, rw)
		add("RegMRAddr range wraps", err)
		_, err = e.pd.RegDMABufMR(-1, 0, 8, 0, rw)
		add("RegDMABufMR fd -1", err)
		_, err = e.pd.RegDMABufMR(0, -1, 8, 0, rw)
		add("RegDMABufMR offset -1", err)
		_, err = e.pd.RegDMABufMR(0, 0, 0, 0, rw)
		add("RegDMABufMR length 0", err)
		_, err = e.pd.RegDMABufMR(0, 0, 8, ^uint64(0)-3, rw)
		add("RegDMABufMR iova overflow", err)
		_, err = e.ctx.CreateCQ(0)
		add("CreateCQ depth 0", err)
		_, err = e.ctx.AllocDM(0)
		add("AllocDM size 0", err)
		_, err = e.pd.CreateQP(verbs.QPConfig{RecvCQ: e.cq, MaxSendWR: 1})
		add("CreateQP nil SendCQ", err)
		_, err = e.pd.CreateQP(verbs.QPConfig{SendCQ: e.cq, RecvCQ: e.cq})
		add("CreateQP MaxSendWR 0", err)
		add("PostSend before Connect", e.qp.PostSend(verbs.SendWR{Op: verbs.OpRDMAWrite}))
		add("PostSend opcode 0", e.qp.PostSend(verbs.SendWR{}))
		add("PostSend too many SGEs", e.qp.PostSend(verbs.SendWR{Op: verbs.OpSend, SGE: make([]verbs.SGE, 5)}))
		add("Connect QPN 0", e.qp.Connect(verbs.QPInfo{}))
		var qi verbs.QPInfo
		add("UnmarshalBinary short", qi.UnmarshalBinary([]byte{1, 2, 3}))
		var nilPD *verbs.PD
		_, err = nilPD.RegMR(make([]byte, 8), rw)
		add("nil PD", err)
		for _, c := range cases {
			require.ErrorIs(t, c.err, verbs.ErrInvalid, c.name)
			t.Logf("%s: %v", c.name, c.err)
		}
		// Memory that is not mapped is refused at registration (the kernel pins the
		// pages and fails; soft0, which would crash at the first write into it, asks
		// mincore), and the PD keeps no child for it: the end still closes.
		_, err = e.pd.RegMRAddr(unmappedRange(t, 2), 2*os.Getpagesize(), rw)
		require.Error(t, err, "RegMRAddr of unmapped memory")
		t.Logf("RegMRAddr unmapped: %v", err)
		_, err = e.pd.RegMRAddr(^uintptr(0)-0x7ff, 0x100, rw) // in the top page, whose end rounds up past 0
		require.Error(t, err, "RegMRAddr in the top page")

		// A second Connect fails and leaves the first connection working.
		a, b := connected(t, p)
		err = a.qp.Connect(b.qp.Info())
		require.Error(t, err, "second Connect")
		require.True(t, errors.Is(err, verbs.ErrInvalid), "second Connect: %v", err)
		buf := newBuffer(t, a.pd, 64, rw)
		rbuf := newBuffer(t, b.pd, 64, rw)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{buf.sge(0, 64)}, Signaled: true,
			RemoteAddr: rbuf.addr(0), RKey: rbuf.mr.RKey()}))
		waitOK(t, a.cq, 1)
	})
}

// TestContractDMABufNotABuffer: a file descriptor that is no dma-buf (a pipe)
// is refused with an error, not a crash, on every provider; the PD's child
// count is dropped again, so the PD still closes; and host memory registered
// the ordinary way says so in MR.Via.
func TestContractDMABufNotABuffer(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		e := newEnd(t, p.devA)
		var fds [2]int
		require.NoError(t, unix.Pipe(fds[:]))
		defer unix.Close(fds[0])
		defer unix.Close(fds[1])
		mr, err := e.pd.RegDMABufMR(fds[0], 0, 4096, 1<<20, rw)
		if mr != nil {
			mr.Close()
		}
		require.Error(t, err, "a pipe registered as a dma-buf")
		var ve *verbs.Error
		require.ErrorAs(t, err, &ve)
		t.Logf("%s: %v", p.name, err)

		b := newBuffer(t, e.pd, 64, rw)
		require.NotEmpty(t, b.mr.Via())
		require.NotEqual(t, "ibv_reg_dmabuf_mr", b.mr.Via(), "host memory goes through ibv_reg_mr")
	})
}

// TestContractPartialPost: a provider that refuses a request in the middle of a
// chain has posted the ones before it, and PostedBefore says how many; exactly
// those complete (flushed here). The receive queue's real depth is found by filling
// one end, since a device may round MaxRecvWR up.
func TestContractPartialPost(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		probe := newEndWith(t, p.devB, p.opts)
		buf := newBuffer(t, probe.pd, 64, rw)
		recv := func(id int) verbs.RecvWR { return verbs.RecvWR{ID: uint64(id), SGE: []verbs.SGE{buf.sge(0, 64)}} }
		depth := 0
		for ; depth < 1<<14; depth++ {
			if err := probe.qp.PostRecv(recv(depth)); err != nil {
				require.ErrorIs(t, err, unix.ENOMEM, "a full receive queue")
				require.Zero(t, verbs.PostedBefore(err), "a single refused request")
				break
			}
		}
		require.Less(t, depth, 1<<14, "the receive queue never filled")
		require.GreaterOrEqual(t, depth, 64, "the queue holds what was asked for")

		e := newEndWith(t, p.devB, p.opts)
		ebuf := newBuffer(t, e.pd, 64, rw)
		for i := 0; i < depth-2; i++ {
			require.NoError(t, e.qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGE: []verbs.SGE{ebuf.sge(0, 64)}}))
		}
		chain := make([]verbs.RecvWR, 4)
		for i := range chain {
			chain[i] = verbs.RecvWR{ID: uint64(depth - 2 + i), SGE: []verbs.SGE{ebuf.sge(0, 64)}}
		}
		err := e.qp.PostRecv(chain...)
		require.ErrorIs(t, err, unix.ENOMEM)
		require.Equal(t, 2, verbs.PostedBefore(err), "wrs[:2] of the chain fit: %v", err)
		require.NoError(t, e.qp.MoveToError())
		wcs := waitWCs(t, e.cq, depth)
		for i, wc := range wcs {
			require.Equal(t, uint64(i), wc.ID, "flushed in order, the chain's refused requests not among them")
			require.Equal(t, verbs.WCWRFlushErr, wc.Status)
		}
		n, err := e.cq.Poll(make([]verbs.WC, 4))
		require.NoError(t, err)
		require.Zero(t, n, "a refused request completed")
		require.Zero(t, verbs.PostedBefore(errors.New("other")), "an error that is not a post's")
	})
}

// TestContractHintOwnerReads: memory registered with HintOwnerReads takes writes and
// sends like any other on every provider, at sizes on both sides of the size from
// which soft0 streams them, at every offset within a cache line around it; the bytes
// next to what landed stay untouched (non-temporal stores write whole lines), and the
// MR reports the access it was given. Writes with immediate too: soft0 may have the
// owner's poller copy those (TestSoftPulls), and here it finds nobody polling.
func TestContractHintOwnerReads(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		r := testutil.Rand(t)
		a, b := connected(t, p)
		const maxN = 1<<20 + 256
		access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.HintOwnerReads
		src := newBuffer(t, a.pd, maxN, rw)
		dst := newBuffer(t, b.pd, maxN, access)
		require.Equal(t, access, dst.mr.Access())
		t.Logf("hinted MR: %s", dst.mr.Via())
		for i, n := range []int{1, 100, 32<<10 - 1, 32 << 10, 32<<10 + 1, 100003, 1 << 20} {
			off := r.IntN(65)
			testutil.Fill(r, src.b)
			testutil.Fill(r, dst.b)
			want := append([]byte{}, dst.b...)
			copy(want[off:off+n], src.b[:n])
			require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: uint64(i), Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, n)},
				Signaled: true, RemoteAddr: dst.addr(off), RKey: dst.mr.RKey()}))
			waitOK(t, a.cq, 1)
			testutil.Equal(t, want, dst.b, fmt.Sprintf("write of %d bytes at offset %d", n, off))

			// The same into a posted receive.
			testutil.Fill(r, src.b)
			want = append([]byte{}, dst.b...)
			copy(want[off:off+n], src.b[:n])
			require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGE: []verbs.SGE{dst.sge(off, n)}}))
			require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: uint64(i), Op: verbs.OpSend, SGE: []verbs.SGE{src.sge(0, n)}, Signaled: true}))
			waitOK(t, a.cq, 1)
			waitOK(t, b.cq, 1)
			testutil.Equal(t, want, dst.b, fmt.Sprintf("send of %d bytes at offset %d", n, off))

			// The same by a write with immediate (soft0 may let the owner copy it:
			// here nobody polls b's CQ before a's completion, so a makes it).
			testutil.Fill(r, src.b)
			want = append([]byte{}, dst.b...)
			copy(want[off:off+n], src.b[:n])
			require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(i)}))
			require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: uint64(i), Op: verbs.OpRDMAWriteWithImm, SGE: []verbs.SGE{src.sge(0, n)},
				Signaled: true, RemoteAddr: dst.addr(off), RKey: dst.mr.RKey(), Imm: uint32(n)}))
			waitOK(t, a.cq, 1)
			wcs := waitOK(t, b.cq, 1)
			require.Equal(t, uint32(n), wcs[0].Imm)
			testutil.Equal(t, want, dst.b, fmt.Sprintf("write with immediate of %d bytes at offset %d", n, off))
		}
	})
}

// unmappedRange returns the address of pages pages that were mapped and are not any
// more: memory no registration may take.
func unmappedRange(t *testing.T, pages int) uintptr {
	b, err := unix.Mmap(-1, 0, pages*os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	addr := uintptr(unsafe.Pointer(&b[0]))
	require.NoError(t, unix.Munmap(b))
	return addr
}
