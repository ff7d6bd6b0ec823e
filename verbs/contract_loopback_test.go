package verbs_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/verbs"
)

// TestContractLoopback: a QP connected to itself moves bytes between two buffers of
// its own PD with RDMA writes, on every provider. The transport copies out of NIC
// device memory this way, where the CPU would read it with uncached loads: a write
// from a DM MR into host memory and into another DM MR, where the provider has
// device memory (queried, not assumed). A write past the end of the target MR fails
// with a remote access error and flushes what follows, as between two QPs.
func TestContractLoopback(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		r := testutil.Rand(t)
		e := newEndWith(t, p.devA, p.opts)
		require.NoError(t, e.qp.Connect(roundTrip(t, e.qp.Info())), "a QP connected to itself")
		const n = 8192
		src := newBuffer(t, e.pd, n, rw)
		dst := newBuffer(t, e.pd, n, rw)
		for _, size := range []int{1, 4, 100, 4096, n} {
			testutil.Fill(r, src.b)
			require.NoError(t, e.qp.PostSend(verbs.SendWR{ID: uint64(size), Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, size)},
				Signaled: true, RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()}))
			wc := waitOK(t, e.cq, 1)[0]
			require.Equal(t, uint64(size), wc.ID)
			testutil.Equal(t, src.b[:size], dst.b[:size], fmt.Sprintf("host to host, %d bytes", size))
		}

		attr, err := e.ctx.Query()
		require.NoError(t, err)
		if attr.MaxDMSize == 0 {
			require.False(t, p.hasDM, "the provider says it has device memory, but reports none")
			t.Logf("%s: no device memory: host to host only", p.name)
		} else {
			dmA, mrA := dmWithMR(t, e, 4096)
			closeLater(t, mrA)
			dmB, mrB := dmWithMR(t, e, 4096)
			closeLater(t, mrB)
			data := make([]byte, 4096)
			testutil.Fill(r, data)
			require.NoError(t, dmA.CopyTo(0, data))
			// DM to host, at an offset on both sides.
			require.NoError(t, e.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpRDMAWrite,
				SGE:      []verbs.SGE{{Addr: mrA.Addr() + 64, Length: 1000, LKey: mrA.LKey()}},
				Signaled: true, RemoteAddr: dst.addr(8), RKey: dst.mr.RKey()}))
			waitOK(t, e.cq, 1)
			testutil.Equal(t, data[64:1064], dst.b[8:1008], "DM to host")
			// DM to DM.
			require.NoError(t, e.qp.PostSend(verbs.SendWR{ID: 2, Op: verbs.OpRDMAWrite,
				SGE:      []verbs.SGE{{Addr: mrA.Addr(), Length: 4096, LKey: mrA.LKey()}},
				Signaled: true, RemoteAddr: mrB.Addr(), RKey: mrB.RKey()}))
			waitOK(t, e.cq, 1)
			got := make([]byte, 4096)
			require.NoError(t, dmB.CopyFrom(got, 0))
			testutil.Equal(t, data, got, "DM to DM")
		}

		// Past the end of the target: a remote access error, then the QP flushes.
		require.NoError(t, e.qp.PostSend(
			verbs.SendWR{ID: 10, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, 64)}, Signaled: true,
				RemoteAddr: dst.addr(n - 32), RKey: dst.mr.RKey()},
			verbs.SendWR{ID: 11, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, 8)}, Signaled: true,
				RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()}))
		wcs := waitWCs(t, e.cq, 2)
		require.Equal(t, verbs.WCRemAccessErr, wcs[0].Status, "past the end of the target MR")
		require.Equal(t, verbs.WCWRFlushErr, wcs[1].Status, "after the failed write")
	})
}
