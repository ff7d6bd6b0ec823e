package coll_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// vBlocks is a v-layout buffer of counts elements of dtSize bytes, its blocks side by
// side.
func vBlocks(counts []int, dtSize int) coll.BufferDesc {
	d := coll.BufferDesc{Counts: counts, Displs: make([]int, len(counts))}
	at := 0
	for i, c := range counts {
		d.Displs[i] = at
		at += c
	}
	d.Slice = make([]byte, max(at, 1)*dtSize)
	return d
}

// TestMismatchAcrossEagerLimit: ranks that disagree on one block of a v-collective,
// the sender's above the eager limit (8 KiB on small teams) and the receiver's at or
// below it, fail with ErrMismatch on both ranks, as when both sides take the same
// path. The receiver expects an eager message and sends no ready-to-receive, while
// the sender waits for one: before, nothing crossed the wire and both waited out
// Config.Timeout (a review found it), since a v-collective's signature does not carry
// its counts. The rendezvous sender now tells its size in a header. Then the team
// still runs a collective that agrees, as persistent v-collectives that agree (the
// header goes at every post without the re-armed ready-to-receive) keep working.
func TestMismatchAcrossEagerLimit(t *testing.T) {
	const big = 3000 // int32: 12000 bytes, past the eager limit; 1 is below it
	cases := []struct {
		name string
		args func(r int) coll.Args
	}{
		{"alltoallv", func(r int) coll.Args {
			src, dst := []int{1, 1}, []int{1, 1}
			if r == 0 {
				src = []int{1, big}
			}
			return coll.Args{Type: coll.Alltoallv, DType: coll.Int32, Src: vBlocks(src, 4), Dst: vBlocks(dst, 4)}
		}},
		{"allgatherv", func(r int) coll.Args {
			counts := []int{1, 1}
			if r == 0 {
				counts = []int{big, 1}
			}
			return coll.Args{Type: coll.Allgatherv, DType: coll.Int32,
				Src: coll.BufferDesc{Slice: make([]byte, 4*counts[r]), Count: counts[r]}, Dst: vBlocks(counts, 4)}
		}},
		{"gatherv", func(r int) coll.Args {
			if r == 0 {
				return coll.Args{Type: coll.Gatherv, DType: coll.Int32,
					Src: coll.BufferDesc{Slice: make([]byte, 4), Count: 1}, Dst: vBlocks([]int{1, 1}, 4)}
			}
			return coll.Args{Type: coll.Gatherv, DType: coll.Int32, Src: coll.BufferDesc{Slice: make([]byte, 4*big), Count: big}}
		}},
		{"scatterv", func(r int) coll.Args {
			if r == 0 {
				return coll.Args{Type: coll.Scatterv, DType: coll.Int32,
					Src: vBlocks([]int{1, big}, 4), Dst: coll.BufferDesc{Slice: make([]byte, 4), Count: 1}}
			}
			return coll.Args{Type: coll.Scatterv, DType: coll.Int32, Dst: coll.BufferDesc{Slice: make([]byte, 4), Count: 1}}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A deadline well past what a mismatch takes, so that its error (a
			// timeout, not ErrMismatch) shows the old behaviour.
			w := newWorld(t, 2, coll.Config{Timeout: 20 * time.Second})
			errs := w.run(func(r *rank) error { return r.team.Run(context.Background(), tc.args(r.r)) })
			for r, err := range errs {
				require.ErrorIs(t, err, coll.ErrMismatch, "rank %d", r)
			}
			// The team goes on: a big v-collective that agrees, persistent, 5 posts.
			reqs := make([]*coll.Request, 2)
			for i, err := range w.run(func(r *rank) error {
				counts := []int{big, big + 1}
				q, err := r.team.Init(coll.Args{Type: coll.Allgatherv, DType: coll.Int32, Flags: coll.Persistent,
					Src: coll.BufferDesc{Slice: make([]byte, 4*counts[r.r]), Count: counts[r.r]}, Dst: vBlocks(counts, 4)})
				reqs[r.r] = q
				return err
			}) {
				require.NoError(t, err, "rank %d", i)
			}
			for post := 0; post < 5; post++ {
				for i, err := range w.run(func(r *rank) error {
					if err := reqs[r.r].Post(); err != nil {
						return err
					}
					return reqs[r.r].Wait(context.Background())
				}) {
					require.NoError(t, err, fmt.Sprintf("rank %d post %d", i, post))
				}
			}
			for _, q := range reqs {
				require.NoError(t, q.Close())
			}
		})
	}
}
