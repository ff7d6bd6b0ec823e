package coll_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ibcoll/ibcoll/coll"
)

// BenchmarkTCPOOBWiring: a team of in-process ranks over TCPOOB (one store client each,
// as processes would have) made and wired whole by a first alltoall, every pair's link
// made through the store at once; then a second alltoall on the links. Reports the
// seconds of each phase per team. What the mailbox does per poll while links wait
// shows here: reading the clock in TCPOOB's Gone made the 64-rank first alltoall a
// quarter slower (session 36).
func BenchmarkTCPOOBWiring(b *testing.B) {
	for _, n := range []int{16, 64} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var create, first, second time.Duration
			for range b.N {
				t0 := time.Now()
				w := newWorldOOB(b, coll.Config{Timeout: 2 * time.Minute}, tcpOOBs(b, n))
				t1 := time.Now()
				run := func() {
					w.mustRun(func(r *rank) error {
						return r.team.Run(context.Background(), coll.Args{Type: coll.Alltoall, DType: coll.Uint8,
							Src: coll.BufferDesc{Slice: make([]byte, 8*n), Count: 8 * n},
							Dst: coll.BufferDesc{Slice: make([]byte, 8*n), Count: 8 * n}})
					})
				}
				run()
				t2 := time.Now()
				run()
				t3 := time.Now()
				w.close()
				create, first, second = create+t1.Sub(t0), first+t2.Sub(t1), second+t3.Sub(t2)
			}
			b.ReportMetric(create.Seconds()/float64(b.N), "s-create")
			b.ReportMetric(first.Seconds()/float64(b.N), "s-first-alltoall")
			b.ReportMetric(second.Seconds()/float64(b.N), "s-second-alltoall")
		})
	}
}
