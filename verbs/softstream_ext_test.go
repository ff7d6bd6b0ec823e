package verbs_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/verbs"
)

// TestSoftWritesStream: soft0's writes into memory registered with HintOwnerReads go
// with non-temporal stores exactly from 32 KiB, by RDMA write and by send; writes into
// plain memory never do. Soft.Streamed counts the bytes that went that way, and each
// write's data is checked.
func TestSoftWritesStream(t *testing.T) {
	a, b := softEnd(t, verbs.Options{}), softEnd(t, verbs.Options{})
	require.NoError(t, a.qp.Connect(roundTrip(t, b.qp.Info())))
	require.NoError(t, b.qp.Connect(roundTrip(t, a.qp.Info())))
	ctl, err := verbs.SoftControl(b.ctx)
	require.NoError(t, err)
	const size = 256 << 10
	src := newBuffer(t, a.pd, size, rw)
	hinted := newBuffer(t, b.pd, size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.HintOwnerReads)
	plain := newBuffer(t, b.pd, size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	r := testutil.Rand(t)
	for i, c := range []struct {
		dst    *buffer
		n      int
		send   bool
		stream bool
	}{
		{hinted, 32<<10 - 1, false, false}, {hinted, 32 << 10, false, true}, {hinted, 100003, false, true},
		{hinted, 4096, true, false}, {hinted, 64 << 10, true, true},
		{plain, 64 << 10, false, false}, {plain, 200000, true, false},
	} {
		testutil.Fill(r, src.b)
		before, err := ctl.Streamed(c.dst.mr)
		require.NoError(t, err)
		if c.send {
			require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGE: []verbs.SGE{c.dst.sge(0, c.n)}}))
			require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: uint64(i), Op: verbs.OpSend, SGE: []verbs.SGE{src.sge(0, c.n)}, Signaled: true}))
			waitOK(t, b.cq, 1)
		} else {
			require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: uint64(i), Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, c.n)},
				Signaled: true, RemoteAddr: c.dst.addr(0), RKey: c.dst.mr.RKey()}))
		}
		waitOK(t, a.cq, 1)
		after, err := ctl.Streamed(c.dst.mr)
		require.NoError(t, err)
		want := int64(0)
		if c.stream {
			want = int64(c.n)
		}
		what := fmt.Sprintf("case %d: %d bytes, send %v", i, c.n, c.send)
		require.Equal(t, want, after-before, what)
		testutil.Equal(t, src.b[:c.n], c.dst.b[:c.n], what)
	}
	_, err = ctl.Streamed(src.mr)
	require.ErrorIs(t, err, verbs.ErrInvalid, "an MR of another context")
	_, err = ctl.Streamed(nil)
	require.ErrorIs(t, err, verbs.ErrInvalid)
}
