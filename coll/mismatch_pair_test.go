package coll_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ibcoll/ibcoll/coll"
)

// TestSigPairMismatch: in a team of two (the overlay tree's root and one leaf), a
// difference of roots or counts fails the collective on both ranks, as a mismatch
// naming both sides, whichever rank initializes first and in both modes; the team
// works afterwards. (TestRootMismatch runs four ranks.)
func TestSigPairMismatch(t *testing.T) { bothModes(t, testSigPairMismatch) }

func testSigPairMismatch(t *testing.T, aon bool) {
	const n, count = 2, 16
	w := newWorld(t, n, coll.Config{Timeout: mismatchTimeout, AllOrNothing: aon})
	// each runs one disagreeing collective with rank late starting it, and checks that
	// both ranks fail with the mismatch and the team works afterwards.
	each := func(name string, args func(r int) coll.Args, contains ...string) {
		for _, late := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/rank %d late", name, late), func(t *testing.T) {
				errs := w.run(func(r *rank) error {
					if r.r == late {
						time.Sleep(20 * time.Millisecond)
					}
					return r.team.Run(context.Background(), args(r.r))
				})
				requireMismatch(t, errs, contains...)
				w.mustRun(func(r *rank) error { return r.team.Barrier(context.Background()) })
			})
		}
	}
	for _, typ := range []coll.CollType{coll.Bcast, coll.Gather, coll.Scatter, coll.Reduce} {
		each(fmt.Sprintf("%v/roots", typ), func(r int) coll.Args { return rootedArgs(typ, r, r, n, count) }, "root 0", "root 1", "root mismatch")
	}
	each("allreduce/counts", func(r int) coll.Args { return argsFor(coll.Allreduce, r, n, count+r) })
	// A v-collective's counts are each rank's own, so the signatures agree and only
	// the transport sees the sizes differ, on the data: rank 1's eager block must not
	// let it succeed before rank 0 checked it (rank 0 expects 10 elements from rank
	// 1, which sends 12; or none, or 12 where none is expected).
	for _, c := range []struct {
		name   string
		counts []int
		send   int
	}{{"larger", []int{8, 10}, 12}, {"none expected", []int{8, 0}, 12}, {"none sent", []int{8, 10}, 0}} {
		each("gatherv/counts/"+c.name, func(r int) coll.Args {
			a := coll.Args{Type: coll.Gatherv, Root: 0, DType: coll.Int32}
			if r == 0 {
				a.Src = coll.BufferDesc{Slice: make([]byte, 4*c.counts[0]), Count: c.counts[0]}
				a.Dst = coll.BufferDesc{Slice: make([]byte, 4*(c.counts[0]+c.counts[1])), Counts: c.counts, Displs: []int{0, c.counts[0]}}
			} else {
				a.Src = coll.BufferDesc{Slice: make([]byte, 4*max(c.send, 1)), Count: c.send}
			}
			return a
		}, "rank 1", "rank 0")
	}
}
