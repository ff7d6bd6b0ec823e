package coll_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// TestZeroBlockLeafRunsAhead: a persistent 3-rank gatherv rooted at 0 in which rank
// 1's block is empty and rank 2's is not. Rank 2 is slow to post its second post, so
// the root waits in that post, polling, while rank 1 posts thousands of times. Rank
// 1's zero-byte sends hold the root's eager slots like any message, so it runs a
// ring's worth of posts ahead and then waits for the root; once rank 2 posts, every
// post of every rank succeeds. (Before, each went slotless and done at once, and rank
// 1 finished all its posts ahead; where the root kept more headers than its bound it
// failed rank 1 and broke the team, found by a review and reproduced at the transport
// by TestEagerZeroRunAhead.)
func TestZeroBlockLeafRunsAhead(t *testing.T) {
	const posts = 5000
	w := newWorld(t, 3, coll.Config{})
	defer w.close()
	var leafDone, ahead atomic.Int64
	errs := w.run(func(r *rank) error {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		a := coll.Args{Type: coll.Gatherv, DType: coll.Uint8, Flags: coll.Persistent,
			Src: coll.BufferDesc{Slice: []byte{byte(r.r), 1, 2, 3}, Count: []int{4, 0, 4}[r.r]}}
		if r.r == 0 {
			a.Dst = coll.BufferDesc{Slice: make([]byte, 8), Counts: []int{4, 0, 4}, Displs: []int{0, 4, 4}}
		}
		q, err := r.team.Init(a)
		if err != nil {
			return err
		}
		defer q.Close()
		for p := 1; p <= posts; p++ {
			if r.r == 2 && p == 2 {
				// Slow: until rank 1 finished or stopped moving.
				last, still := int64(-1), time.Now()
				for leafDone.Load() < posts && time.Since(still) < 300*time.Millisecond {
					if n := leafDone.Load(); n != last {
						last, still = n, time.Now()
					}
					time.Sleep(time.Millisecond)
				}
				ahead.Store(leafDone.Load())
				t.Logf("rank 1 finished %d posts before rank 2's second", ahead.Load())
			}
			if err := q.Post(); err != nil {
				return fmt.Errorf("post %d: %w", p, err)
			}
			if err := q.Wait(ctx); err != nil {
				return fmt.Errorf("wait %d: %w", p, err)
			}
			if r.r == 1 {
				leafDone.Add(1)
			}
		}
		return nil
	})
	for i, err := range errs {
		require.NoError(t, err, "rank %d", i)
	}
	require.EqualValues(t, posts, leafDone.Load())
	// Its first post, then at most a ring's worth (16 slots at 3 ranks) ahead of the
	// root's second.
	require.LessOrEqual(t, ahead.Load(), int64(1+16), "rank 1 ran ahead past its credits")
}
