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
	for _, typ := range []coll.CollType{coll.Bcast, coll.Gather, coll.Scatter, coll.Reduce} {
		for _, late := range []int{0, 1} {
			t.Run(fmt.Sprintf("%v/roots/rank %d late", typ, late), func(t *testing.T) {
				errs := w.run(func(r *rank) error {
					if r.r == late {
						time.Sleep(20 * time.Millisecond)
					}
					return r.team.Run(context.Background(), rootedArgs(typ, r.r, r.r, n, count))
				})
				requireMismatch(t, errs, "root 0", "root 1", "root mismatch")
				w.mustRun(func(r *rank) error { return r.team.Barrier(context.Background()) })
			})
		}
	}
	for _, late := range []int{0, 1} {
		t.Run(fmt.Sprintf("allreduce/counts/rank %d late", late), func(t *testing.T) {
			errs := w.run(func(r *rank) error {
				if r.r == late {
					time.Sleep(20 * time.Millisecond)
				}
				return r.team.Run(context.Background(), argsFor(coll.Allreduce, r.r, n, count+r.r))
			})
			requireMismatch(t, errs)
			w.mustRun(func(r *rank) error { return r.team.Barrier(context.Background()) })
		})
	}
}
