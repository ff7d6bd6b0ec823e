package verbs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/verbs"
)

// TestContractConnectRetry: a Connect that fails at its last step (on ibv the move to
// RTS, after the QP reached RTR) leaves the QP in INIT, not connected, so that a
// retried Connect connects it, and a write then moves the bytes. Before, an ibv QP left
// in RTR refused every later Connect (the move to RTR is not allowed from RTR).
func TestContractConnectRetry(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		a, b := newEndWith(t, p.devA, p.opts), newEndWith(t, p.devB, p.opts)
		ia, ib := roundTrip(t, a.qp.Info()), roundTrip(t, b.qp.Info())
		require.NoError(t, b.qp.Connect(ia))
		verbs.FailNextConnect()
		err := a.qp.Connect(ib)
		require.ErrorIs(t, err, verbs.ErrInjected, "the injected Connect failure never fired")
		st, err := a.qp.State()
		require.NoError(t, err)
		require.Equal(t, verbs.QPStateInit, st, "after the failed Connect")
		require.NoError(t, a.qp.Connect(ib), "the retry")

		const n = 4099
		r := testutil.Rand(t)
		src := newBuffer(t, a.pd, n, rw)
		dst := newBuffer(t, b.pd, n, rw)
		testutil.Fill(r, src.b)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, n)},
			Signaled: true, RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()}))
		waitOK(t, a.cq, 1)
		testutil.Equal(t, src.b, dst.b, "a write after the retried Connect")
	})
}
