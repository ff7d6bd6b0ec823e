package coll_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// A rank that closes its team while the others run a collective it will
// never join makes them fail at once, naming it, instead of at their
// deadline.
func TestRegressionTeamClosedEarly(t *testing.T) {
	w := newWorld(t, 3, coll.Config{Timeout: 20 * time.Second})
	start := time.Now()
	errs := w.run(func(r *rank) error {
		if r.r == 2 {
			return r.team.Close()
		}
		a := coll.Args{Type: coll.Gather, Root: 2, DType: coll.Uint8, Src: coll.BufferDesc{Slice: make([]byte, 8), Count: 8}}
		return runColl(context.Background(), r.team, a)
	})
	took := time.Since(start)
	t.Logf("%v in %v", errs, took)
	require.NoError(t, errs[2])
	for _, r := range []int{0, 1} {
		var pe *coll.PeerError
		require.True(t, errors.As(errs[r], &pe), "rank %d: %v", r, errs[r])
		require.Equal(t, 2, pe.Rank)
	}
	require.Less(t, took, 5*time.Second)
	// A later Init on the remaining ranks fails at once too.
	errs = w.run(func(r *rank) error {
		if r.r == 2 {
			return nil
		}
		return r.team.Barrier(context.Background())
	})
	for _, r := range []int{0, 1} {
		require.ErrorIs(t, errs[r], coll.ErrPeerFailed, "rank %d", r)
	}
	// Normal teardown: every rank closes after the last collective.
	w2 := newWorld(t, 4, coll.Config{Timeout: 20 * time.Second})
	for i := 0; i < 20; i++ {
		w2.mustRun(func(r *rank) error { return r.team.Barrier(context.Background()) })
	}
	w2.close()
}
