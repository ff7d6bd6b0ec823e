package verbs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/verbs"
)

// BenchmarkWriteVsCopy measures soft0 RDMA write bandwidth and a plain
// copy() of the same bytes in the same run, and reports their ratio
// (write-vs-copy, 1.0 = as fast as memcpy) and allocations per post.
func BenchmarkWriteVsCopy(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20} {
		b.Run(sizeName(size), func(b *testing.B) {
			p := provider{devA: verbs.SoftDeviceName, devB: verbs.SoftDeviceName}
			a, bb := benchConnected(b, p)
			src := benchBuffer(b, a.pd, size)
			dst := benchBuffer(b, bb.pd, size)
			for i := range src.b {
				src.b[i] = byte(i*7 + 1)
			}
			const depth = 4
			bctx := context.Background()
			wr := verbs.SendWR{Op: verbs.OpRDMAWrite, Signaled: true, RemoteAddr: dst.addr(0), RKey: dst.mr.RKey(),
				SGE: []verbs.SGE{src.sge(0, size)}}
			wcs := make([]verbs.WC, depth)
			wrs := []verbs.SendWR{wr}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			var copyTime, writeTime time.Duration
			b.ResetTimer()
			start := time.Now()
			outstanding := 0
			for i := 0; i < b.N; i++ {
				for outstanding >= depth {
					n, err := a.cq.Poll(wcs)
					if err != nil || (n > 0 && wcs[0].Status != verbs.WCSuccess) {
						b.Fatalf("poll: %v %v", err, wcs[0].Status)
					}
					outstanding -= n
					if n == 0 {
						// Block, as ibcoll's progress does, leaving the core
						// to the soft device's worker.
						if err := a.cq.Wait(bctx); err != nil {
							b.Fatal(err)
						}
					}
				}
				if err := a.qp.PostSend(wrs...); err != nil {
					b.Fatal(err)
				}
				outstanding++
			}
			for outstanding > 0 {
				n, _ := a.cq.Poll(wcs)
				outstanding -= n
				if n == 0 {
					_ = a.cq.Wait(bctx)
				}
			}
			writeTime = time.Since(start)
			b.StopTimer()
			start = time.Now()
			for i := 0; i < b.N; i++ {
				copy(dst.b, src.b)
			}
			copyTime = time.Since(start)
			b.ReportMetric(float64(copyTime)/float64(writeTime), "write/copy")
			b.ReportMetric(float64(size)*float64(b.N)/copyTime.Seconds()/1e9, "copy-GB/s")
		})
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

func benchConnected(b *testing.B, p provider) (*end, *end) {
	mk := func(dev string) *end {
		e := &end{}
		var err error
		e.ctx, err = verbs.Open(dev)
		require.NoError(b, err)
		e.pd, err = e.ctx.AllocPD()
		require.NoError(b, err)
		e.cq, err = e.ctx.CreateCQ(64)
		require.NoError(b, err)
		e.qp, err = e.pd.CreateQP(verbs.QPConfig{SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: 16, MaxRecvWR: 16, MaxSGE: 2})
		require.NoError(b, err)
		b.Cleanup(func() {
			require.NoError(b, e.qp.Close())
			require.NoError(b, e.cq.Close())
			require.NoError(b, e.pd.Close())
			require.NoError(b, e.ctx.Close())
		})
		return e
	}
	x, y := mk(p.devA), mk(p.devB)
	require.NoError(b, x.qp.Connect(y.qp.Info()))
	require.NoError(b, y.qp.Connect(x.qp.Info()))
	return x, y
}
