package coll_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ibcoll/ibcoll/coll"
)

// A rank that links to more than tlmlx5's cqGroup (32) peers has several CQs, and its
// transport wait derives a context from the waiter's reusable deadline context (with
// context.Background, Wait's usual context, the team uses that one). Until session 34 a
// pairwise alltoall of 40 ranks in one process panicked in that derived context's
// watcher ("context: internal error: missing cancel error"; ibcoll-perf -np 64 -c
// alltoall did, three runs of three): the team armed the ended context again before
// the watcher read its Err. TestDeadlineCtxStaysEnded has the mechanism.
func TestRegressionMultiCQWait(t *testing.T) {
	const n, blk = 40, 8
	w := newWorld(t, n, coll.Config{})
	w.mustRun(func(r *rank) error {
		src, dst := make([]byte, n*blk), make([]byte, n*blk)
		for i := range src {
			src[i] = byte(r.r*7 + i)
		}
		a := coll.Args{Type: coll.Alltoall, DType: coll.Uint8,
			Src: coll.BufferDesc{Slice: src, Count: n * blk}, Dst: coll.BufferDesc{Slice: dst, Count: n * blk}}
		for it := range 5 {
			q, err := r.team.Init(a)
			if err != nil {
				return err
			}
			if err := q.Post(); err != nil {
				return err
			}
			if err := q.Wait(context.Background()); err != nil {
				return err
			}
			if err := q.Close(); err != nil {
				return err
			}
			for p := range n {
				for i := range blk {
					if want := byte(p*7 + r.r*blk + i); dst[p*blk+i] != want {
						return fmt.Errorf("post %d: rank %d's byte %d from rank %d is %d, want %d", it, r.r, i, p, dst[p*blk+i], want)
					}
				}
			}
		}
		if l := r.team.Links(); l <= 32 {
			return fmt.Errorf("rank %d links %d peers: not past one CQ's 32, the test tests nothing", r.r, l)
		}
		return nil
	})
}
