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
}
