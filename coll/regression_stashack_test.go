package coll_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestRegressionUninitializedAnswers: the hour soak's late ranks, cut off with no
// fault to explain it. A rank whose program computes before it even initializes a
// collective (the soak's late rank, on a batch's first post) gets the abort of a
// peer that exposed a buffer to it: a 3-rank ring allgather whose rank 2 (receiving
// from rank 1, blocks over the eager maximum, so its ready-to-receive names its own
// buffer) runs into its deadline while rank 1 has not called Init. Rank 1's keeper
// polls and reads the abort, but a collective that is not initialized only kept it
// for Init and flooded the news over the overlay, which joins rank 1 to rank 0 alone:
// rank 2 heard nothing from rank 1, cut it off past the grace, and the team broke.
// Now the keeper's poll answers rank 2: rank 1's Init of the collective will fail its
// first post at once, before it writes anything. Every rank then fails the
// allgather without breaking the team, and an allgather of fresh random data,
// checked, runs on the same team.
func TestRegressionUninitializedAnswers(t *testing.T) {
	watchdog(t, 2*time.Minute)
	const (
		n     = 3
		late  = 1
		grace = 1200 * time.Millisecond // loose for loaded CI cores
		count = 64 << 10
	)
	w := newWorld(t, n, coll.Config{Timeout: 30 * time.Second, AbortGrace: grace})
	defer w.close()
	rnd := testutil.Rand(t)
	allgather := func(ctx context.Context, r int, src, dst []byte) error {
		return runColl(ctx, w.ranks[r].team, coll.Args{Type: coll.Allgather, DType: coll.Uint8, Alg: "ring",
			Src: coll.BufferDesc{Slice: src, Count: count}, Dst: coll.BufferDesc{Slice: dst, Count: n * count}})
	}

	errs := make([]error, n)
	took := make([]time.Duration, n)
	var gaveUp, wg sync.WaitGroup
	gaveUp.Add(n - 1)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r == late {
				gaveUp.Wait() // computes until the others gave up, and some more
				time.Sleep(grace / 2)
				errs[r] = allgather(context.Background(), r, make([]byte, count), make([]byte, n*count))
				return
			}
			defer gaveUp.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			errs[r] = allgather(ctx, r, make([]byte, count), make([]byte, n*count))
			took[r] = time.Since(start)
		}()
	}
	wg.Wait()
	for r := range n {
		if r == late {
			require.ErrorIs(t, errs[r], coll.ErrPeerFailed, "rank %d hears of the others' failure", r)
			continue
		}
		// By its deadline, or by the other one's failure that came first.
		require.True(t, errors.Is(errs[r], context.DeadlineExceeded) || errors.Is(errs[r], coll.ErrPeerFailed),
			"rank %d: %v", r, errs[r])
		require.NotErrorIs(t, errs[r], coll.ErrTeamBroken, "rank %d", r)
		require.Less(t, took[r], grace, "rank %d waited out the grace: %v", r, errs[r])
	}
	for r := range w.ranks {
		require.NoError(t, w.ranks[r].team.Broken(), "rank %d's team", r)
	}

	srcs := make([][]byte, n)
	var want []byte
	for r := range srcs {
		srcs[r] = make([]byte, count)
		for i := range srcs[r] {
			srcs[r][i] = byte(rnd.Uint32())
		}
		want = append(want, srcs[r]...)
	}
	dsts := make([][]byte, n)
	w.mustRun(func(r *rank) error {
		dsts[r.r] = make([]byte, n*count)
		return allgather(context.Background(), r.r, srcs[r.r], dsts[r.r])
	})
	for r := range dsts {
		require.True(t, bytes.Equal(want, dsts[r]), "rank %d's allgather", r)
	}
}
