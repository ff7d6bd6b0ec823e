package coll_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// The keeper (a team's own polls while no call polls it) changes neither bound of the
// library's background work. Both found in review of the keeper.

// TestRegressionKeeperDrainerBounded: the drainer delivers a backlog that no call polls
// for and gives up after Timeout+AbortGrace, when the peers read nothing. Rank 1's
// barrier stalls (it reads nothing from then on) while rank 0 leaves a backlog behind
// 100 barriers it opens and closes. The keeper's first version started a drainer again
// at every period it found the team idle, so rank 0 polled at the drainer's rate for
// ever (a drainer ran in 90 of 100 samples past the bound).
func TestRegressionKeeperDrainerBounded(t *testing.T) {
	watchdog(t, time.Minute)
	const timeout, grace = 300 * time.Millisecond, 100 * time.Millisecond
	w := newWorld(t, 2, coll.Config{Timeout: timeout, AbortGrace: grace,
		Faults: []coll.Fault{{Kind: coll.FaultStall, Rank: 1, N: 1}}})
	defer w.close()
	q1, err := w.ranks[1].team.Init(coll.Args{Type: coll.Barrier})
	require.NoError(t, err)
	q0, err := w.ranks[0].team.Init(coll.Args{Type: coll.Barrier})
	require.NoError(t, err)
	require.NoError(t, q1.Post()) // stalled: rank 1 reads nothing from here on
	t0 := w.ranks[0].team
	for range 100 {
		q, err := t0.Init(coll.Args{Type: coll.Barrier})
		require.NoError(t, err)
		require.NoError(t, q.Close())
	}
	require.Positive(t, coll.Backlog(t0), "rank 0's messages wait behind rank 1's receive slots")
	time.Sleep(timeout + grace + 500*time.Millisecond)
	on := 0
	for range 100 {
		if coll.Draining(t0) {
			on++
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, q0.Close())
	_ = q1.Wait(context.Background())
	require.NoError(t, q1.Close())
	require.Zero(t, on, "a drainer ran past its bound (Timeout+AbortGrace) in %d of 100 samples", on)
}

// TestRegressionKeeperNoDeadline: Wait's ctx deadline replaces Config.Timeout for the
// post it waits for, also when the caller posted, computed past the Timeout, and only
// then waited. The keeper's first version applied the Timeout in its own polls, and
// failed the post in the background before the Wait came.
func TestRegressionKeeperNoDeadline(t *testing.T) {
	watchdog(t, time.Minute)
	w := newWorld(t, 2, coll.Config{Timeout: 300 * time.Millisecond, AbortGrace: 100 * time.Millisecond})
	defer w.close()
	errs := w.run(func(r *rank) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		q, err := r.team.Init(coll.Args{Type: coll.Barrier})
		if err != nil {
			return err
		}
		defer q.Close()
		if r.r == 1 {
			time.Sleep(500 * time.Millisecond)
		}
		if err := q.Post(); err != nil {
			return err
		}
		if r.r == 0 {
			time.Sleep(600 * time.Millisecond) // computes, then waits with its own deadline
		}
		return q.Wait(ctx)
	})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
}

// TestKeeperLooksSoonAfterTheLastCall: a rank whose calls stop (one that finished a
// collective on an assumed signature while its peers may still fail it, and wait
// AbortGrace for its answer) is polled by its keeper within half a period of its
// last call, where the keeper looked every period and polled only at the second look
// that found no call: one to two periods later. With an 8 s grace (a 2 s period) the
// ranks call barriers for 2.3 s, across the keeper's first look, then stop; the
// first background poll must come before a whole period passed (the schedule before
// session 38 polled 3.7 s after the last call here; this one at most 1 s).
func TestKeeperLooksSoonAfterTheLastCall(t *testing.T) {
	watchdog(t, time.Minute)
	const grace = 8 * time.Second
	period := grace / 4
	w := newWorld(t, 2, coll.Config{AbortGrace: grace})
	defer w.close()
	start := time.Now()
	for time.Since(start) < period+period/8+period/32 {
		w.mustRun(func(r *rank) error { return runColl(context.Background(), r.team, coll.Args{Type: coll.Barrier}) })
	}
	last := time.Now()
	before := coll.KeeperPolls(w.ranks[1].team)
	for coll.KeeperPolls(w.ranks[1].team) == before && time.Since(last) < 3*period {
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(last)
	require.Greater(t, coll.KeeperPolls(w.ranks[1].team), before, "the keeper never polled the idle team")
	require.Less(t, took, period, "the keeper's first poll after the last call")
	t.Logf("first keeper poll %v after the last call (period %v)", took.Round(time.Millisecond), period)
}
