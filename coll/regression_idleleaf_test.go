package coll_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestRegressionIdleLeafAnswers: the root of a 2-rank gather (blocks over the eager
// maximum, so the root's ready-to-receive names its own buffer) runs into its
// deadline while rank 1 has not reached the gather yet: its program computes for
// longer than AbortGrace. The root must hear from rank 1 before it returns (rank 1
// could still write into the root's buffer), and rank 1 made no call of the library
// meanwhile: the root cut it off past the grace and the team broke. Now rank 1's team
// is polled while nobody calls it (the keeper), it answers within a quarter of the
// grace, and the root's post fails with its deadline, the team whole. Rank 1 then
// fails the gather with the root's error, and a gather of fresh random data,
// checked, runs on the same team.
func TestRegressionIdleLeafAnswers(t *testing.T) {
	watchdog(t, 2*time.Minute)
	const (
		// Loose: the team's background poll answers every grace/4, and under -race on
		// two loaded cores the root noticed its 50 ms deadline at 284 ms (400 ms
		// failed 1 run in 65); a cut-off shows as a broken team, whatever the time.
		grace = 2 * time.Second
		count = 64 << 10
	)
	w := newWorld(t, 2, coll.Config{Timeout: 30 * time.Second, AbortGrace: grace})
	defer w.close()
	rnd := testutil.Rand(t)
	gather := func(ctx context.Context, r int, src []byte, dst []byte) error {
		a := coll.Args{Type: coll.Gather, DType: coll.Uint8, Src: coll.BufferDesc{Slice: src, Count: count}}
		if r == 0 {
			a.Dst = coll.BufferDesc{Slice: dst, Count: 2 * count}
		}
		return runColl(ctx, w.ranks[r].team, a)
	}
	errs, took := lateRank1(w, 50*time.Millisecond, grace/2, func(ctx context.Context) error {
		return gather(ctx, 0, make([]byte, count), make([]byte, 2*count))
	}, func() error { return gather(context.Background(), 1, make([]byte, count), nil) })
	require.ErrorIs(t, errs[0], context.DeadlineExceeded, "the root fails by its deadline")
	require.NotErrorIs(t, errs[0], coll.ErrTeamBroken)
	require.Less(t, took, grace, "the root waited out the grace: %v", errs[0])
	require.ErrorIs(t, errs[1], coll.ErrPeerFailed, "rank 1 hears of the root's failure")
	for r := range w.ranks {
		require.NoError(t, w.ranks[r].team.Broken(), "rank %d's team", r)
	}

	srcs := [][]byte{make([]byte, count), make([]byte, count)}
	for _, s := range srcs {
		for i := range s {
			s[i] = byte(rnd.Uint32())
		}
	}
	dst := make([]byte, 2*count)
	w.mustRun(func(r *rank) error { return gather(context.Background(), r.r, srcs[r.r], dst) })
	require.True(t, bytes.Equal(append(append([]byte(nil), srcs[0]...), srcs[1]...), dst), "the gathered blocks")
}
