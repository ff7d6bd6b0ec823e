package dm_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/dm"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/verbs"
)

// end is one side of a connection.
type end struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
}

func newEnd(t *testing.T, dev string) *end {
	t.Helper()
	e := &end{}
	e.ctx, e.pd = openPD(t, dev)
	var err error
	e.cq, err = e.ctx.CreateCQ(64)
	require.NoError(t, err)
	closeLater(t, e.cq)
	e.qp, err = e.pd.CreateQP(verbs.QPConfig{SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: 16, MaxRecvWR: 16, MaxSGE: 1})
	require.NoError(t, err)
	closeLater(t, e.qp)
	return e
}

func connect(t *testing.T, a, b *end) {
	t.Helper()
	require.NoError(t, a.qp.Connect(b.qp.Info()))
	require.NoError(t, b.qp.Connect(a.qp.Info()))
}

// waitOK waits for one successful completion, blocking between polls,
// with a deadline generous enough for rxe under TCG.
func waitOK(t *testing.T, cq *verbs.CQ) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for {
		n, err := cq.Poll(wc)
		require.NoError(t, err)
		if n == 1 {
			require.NoError(t, wc[0].Err())
			return
		}
		require.NoError(t, cq.Wait(ctx))
	}
}

// testRDMA moves data between a host buffer on a and a chunk of p on b,
// in every direction the NIC can: a writes into the chunk and reads from
// it with the pool's RKey, and b writes from the chunk with its LKey.
func testRDMA(t *testing.T, a, b *end, p *dm.Pool) {
	r := testutil.Rand(t)
	const n = 5000
	buf := newHostBuffer(t, a.pd, 2*n)
	for _, off := range []int{0, 3} {
		c := alloc(t, p, n+off)
		src := buf.b[:n]
		testutil.Fill(r, src)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{
			ID: 1, Op: verbs.OpRDMAWrite, Signaled: true,
			SGE:        []verbs.SGE{{Addr: buf.mr.Addr(), Length: n, LKey: buf.mr.LKey()}},
			RemoteAddr: c.Addr() + uint64(off), RKey: c.RKey(),
		}))
		waitOK(t, a.cq)
		got := make([]byte, n)
		require.NoError(t, c.CopyFrom(got, off))
		testutil.Equal(t, src, got, "RDMA write into the chunk")

		want := make([]byte, n)
		testutil.Fill(r, want)
		require.NoError(t, c.CopyTo(off, want))
		require.NoError(t, a.qp.PostSend(verbs.SendWR{
			ID: 2, Op: verbs.OpRDMARead, Signaled: true,
			SGE:        []verbs.SGE{{Addr: buf.mr.Addr() + n, Length: n, LKey: buf.mr.LKey()}},
			RemoteAddr: c.Addr() + uint64(off), RKey: c.RKey(),
		}))
		waitOK(t, a.cq)
		testutil.Equal(t, want, buf.b[n:2*n], "RDMA read from the chunk")

		testutil.Fill(r, want)
		require.NoError(t, c.CopyTo(off, want))
		require.NoError(t, b.qp.PostSend(verbs.SendWR{
			ID: 3, Op: verbs.OpRDMAWrite, Signaled: true,
			SGE:        []verbs.SGE{{Addr: c.Addr() + uint64(off), Length: n, LKey: c.LKey()}},
			RemoteAddr: buf.mr.Addr(), RKey: buf.mr.RKey(),
		}))
		waitOK(t, b.cq)
		testutil.Equal(t, want, buf.b[:n], "RDMA write from the chunk")
	}
}

func TestRDMA(t *testing.T) {
	for _, k := range softKinds {
		t.Run(k.name, func(t *testing.T) {
			withSoftDMCapacity(t, k.dmCap)
			a, b := newEnd(t, verbs.SoftDeviceName), newEnd(t, verbs.SoftDeviceName)
			connect(t, a, b)
			p := newPool(t, b.ctx, b.pd, dm.Config{})
			require.Equal(t, k.name, p.Kind())
			testRDMA(t, a, b, p)
		})
	}
}

// TestRealDevice runs the pool on a libibverbs device: rxe in the VM,
// which has no device memory, so the host fallback carries it there, and
// mlx5 MEMIC where a NIC has it.
func TestRealDevice(t *testing.T) {
	devs := realDevices(t)
	testutil.RequireRDMA(t, len(devs) > 0, "no active libibverbs device")
	devA, devB := devs[0], devs[0]
	if len(devs) > 1 {
		devB = devs[1]
	}
	t.Logf("devices %s <-> %s", devA, devB)
	a, b := newEnd(t, devA), newEnd(t, devB)
	connect(t, a, b)
	attr, err := b.ctx.Query()
	require.NoError(t, err)
	p := newPool(t, b.ctx, b.pd, dm.Config{})
	wantKind := dm.KindDM
	if attr.MaxDMSize == 0 {
		wantKind = dm.KindHost
	}
	require.Equal(t, wantKind, p.Kind())
	t.Logf("%s: %s pool of %d bytes (device DM limit %d)", devB, p.Kind(), p.Capacity(), attr.MaxDMSize)
	t.Run("rdma", func(t *testing.T) { testRDMA(t, a, b, p) })
	t.Run("battery", func(t *testing.T) {
		battery(t, func(t *testing.T) *dm.Pool { return newPool(t, b.ctx, b.pd, dm.Config{}) })
	})
	if wantKind == dm.KindHost {
		t.Run("no fallback", func(t *testing.T) {
			p, err := dm.NewPool(b.ctx, b.pd, dm.Config{NoHostFallback: true})
			require.ErrorIs(t, err, verbs.ErrNotSupported)
			require.Nil(t, p)
		})
	}
}
