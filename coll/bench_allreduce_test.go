package coll_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// BenchmarkReduction2: persistent allreduce and reduce of int8 sums on 2 goroutine
// ranks over soft0, the shape of issue 14's end-to-end comparison with UCC; µs/coll
// is one post+wait of the slower rank's loop.
func BenchmarkReduction2(b *testing.B) {
	for _, typ := range []coll.CollType{coll.Allreduce, coll.Reduce} {
		for _, sz := range []int{64 << 10, 1 << 20, 16 << 20} {
			b.Run(fmt.Sprintf("%v/%d", typ, sz), func(b *testing.B) {
				const n = 2
				w := newWorld(b, n, coll.Config{Device: device()})
				rnd := testutil.Rand(b)
				reqs := make([]*coll.Request, n)
				w.mustRun(func(r *rank) error {
					src, dst := make([]byte, sz), make([]byte, sz)
					testutil.Fill(rnd, src)
					a := coll.Args{Type: typ, DType: coll.Int8, Op: coll.OpSum, Flags: coll.Persistent,
						Src: coll.BufferDesc{Slice: src, Count: sz}, Dst: coll.BufferDesc{Slice: dst, Count: sz}}
					q, err := r.team.Init(a)
					reqs[r.r] = q
					return err
				})
				b.Cleanup(func() {
					for _, q := range reqs {
						_ = q.Close()
					}
				})
				postAll(b, reqs, 5)
				b.SetBytes(int64(sz))
				b.ResetTimer()
				start := time.Now()
				postAll(b, reqs, b.N)
				b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/coll")
			})
		}
	}
}
