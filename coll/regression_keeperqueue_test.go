package coll_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// TestRegressionKeeperDrainsQueue: the root of a 2-rank gather (a 64 KiB block from
// rank 1: its ready-to-receive names the root's buffer) posts it, then 200 small
// gathers rooted at rank 1 whose eager messages fill rank 1's receive slots and queue
// up behind them, and runs into its deadline while rank 1 computes for longer than
// AbortGrace. The root's abort queues behind those messages, and leaves only as fast
// as rank 1 re-posts receives and returns credits, which an idle rank does only when
// its team is polled. The soak found the keeper's first version polling once a
// period there: each poll let a few messages through, the abort came too late, and
// the root cut rank 1 off (root waited 500 ms of a 400 ms grace here). The keeper now
// polls again soon after a poll that took completions. The root returns its deadline
// within the grace, nobody is broken, and every small gather then succeeds on both
// ranks.
func TestRegressionKeeperDrainsQueue(t *testing.T) {
	watchdog(t, 2*time.Minute)
	const (
		grace = 1600 * time.Millisecond // loose for loaded CI cores (took up to 282 ms of 400 there)
		small = 200
	)
	w := newWorld(t, 2, coll.Config{Timeout: 30 * time.Second, AbortGrace: grace})
	defer w.close()
	w.mustRun(func(r *rank) error { return r.team.Barrier(context.Background()) }) // links up
	gather := func(r, root, block int) coll.Args {
		a := coll.Args{Type: coll.Gather, Root: root, DType: coll.Uint8, Src: coll.BufferDesc{Slice: make([]byte, block), Count: block}}
		if r == root {
			a.Dst = coll.BufferDesc{Slice: make([]byte, 2*block), Count: 2 * block}
		}
		return a
	}
	var took time.Duration
	bigErrs := make([]error, 2)
	errs := w.run(func(r *rank) (err error) {
		if r.r == 1 {
			time.Sleep(3 * grace / 2)
		}
		qs := make([]*coll.Request, 1+small)
		defer func() {
			for _, q := range qs {
				if q != nil {
					err = errors.Join(err, q.Close())
				}
			}
		}()
		for i := range qs {
			a := gather(r.r, 1, 1024)
			if i == 0 {
				a = gather(r.r, 0, 64<<10)
			}
			if qs[i], err = r.team.Init(a); err != nil {
				return err
			}
			if err := qs[i].Post(); err != nil {
				if i == 0 {
					bigErrs[r.r] = err // rank 1: the news came first
					continue
				}
				return err
			}
		}
		ctx := context.Background()
		if r.r == 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, grace/4)
			defer cancel()
			start := time.Now()
			bigErrs[0] = qs[0].Wait(ctx)
			took = time.Since(start)
		} else if bigErrs[1] == nil {
			bigErrs[1] = qs[0].Wait(ctx)
		}
		for i, q := range qs[1:] {
			if err := q.Wait(context.Background()); err != nil {
				return fmt.Errorf("small gather %d: %w", i, err)
			}
		}
		return nil
	})
	require.ErrorIs(t, bigErrs[0], context.DeadlineExceeded, "the root fails by its deadline")
	require.NotErrorIs(t, bigErrs[0], coll.ErrTeamBroken)
	require.Less(t, took, grace, "the root waited out the grace: %v", bigErrs[0])
	require.ErrorIs(t, bigErrs[1], coll.ErrPeerFailed)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		require.NoError(t, w.ranks[r].team.Broken(), "rank %d's team", r)
	}
}
