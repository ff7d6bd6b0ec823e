package coll_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestSigPairCrosses: in a team of two the root's signature goes to the leaf at Init,
// so the leaf's first post needs nothing more of the root once the root initialized
// the collective. Rank 0 initializes a gather rooted at itself and then neither posts
// nor polls; rank 1 initializes, posts and waits, and must succeed. With the verdict
// sent only after the leaf's signature came (a round trip), rank 1 would wait for a
// rank that does not poll, until its context ends. Then rank 0 posts and gets rank 1's
// fresh random block.
func TestSigPairCrosses(t *testing.T) {
	const count = 64
	w := newWorld(t, 2, coll.Config{Timeout: mismatchTimeout})
	rnd := testutil.Rand(t)
	src := [2][]byte{make([]byte, count), make([]byte, count)}
	dst := make([]byte, 2*count)
	args := func(r int) coll.Args {
		a := coll.Args{Type: coll.Gather, Root: 0, DType: coll.Uint8, Src: coll.BufferDesc{Slice: src[r], Count: count}}
		if r == 0 {
			a.Dst = coll.BufferDesc{Slice: dst, Count: 2 * count}
		}
		return a
	}
	// Links up and each rank's eager ring known to the other, so that rank 1's block
	// goes without a ready-to-receive.
	for i := 0; i < 3; i++ {
		w.mustRun(func(r *rank) error { return r.team.Run(context.Background(), args(r.r)) })
	}
	for round := 0; round < 5; round++ {
		testutil.Fill(rnd, src[0])
		testutil.Fill(rnd, src[1])
		q0, err := w.ranks[0].team.Init(args(0))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = runColl(ctx, w.ranks[1].team, args(1))
		cancel()
		require.NoError(t, err, "round %d: rank 1's gather needed rank 0 to poll after its Init", round)
		require.NoError(t, q0.Post())
		require.NoError(t, q0.Wait(context.Background()))
		require.NoError(t, q0.Close())
		require.True(t, bytes.Equal(dst[:count], src[0]) && bytes.Equal(dst[count:], src[1]), "round %d: gathered data differs", round)
	}
}

// TestSigPairMismatch: in a team of two each rank compares the other's signature, so
// a difference fails the collective on both, as a mismatch naming both sides, whichever
// rank initializes first and in both modes; the team works afterwards.
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
