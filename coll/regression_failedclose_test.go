package coll_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// TestFailedCloseTellsLateLinks: a Team.Close that fails after its left message went
// out (here at deregistering a staging buffer) leaves its mailbox open, and nothing
// polls the team any more (its keeper stopped). A peer never linked to the closer
// must still not wait out its deadline: the mailbox's goroutine hands its hello to
// the transport (Team.deliver), the link is made, and the left message goes to it
// (Team.leftMsg), so its collective fails at once, naming the closer. Session 36's
// review listed the open mailbox as a known limit; this shows what it costs (nothing
// here), over LocalOOB and over TCPOOB. The Close after the failed one succeeds.
func TestFailedCloseTellsLateLinks(t *testing.T) {
	t.Run("LocalOOB", func(t *testing.T) { testFailedCloseTellsLateLinks(t, coll.LocalOOB(3)) })
	t.Run("TCPOOB", func(t *testing.T) { testFailedCloseTellsLateLinks(t, tcpOOBs(t, 3)) })
}

func testFailedCloseTellsLateLinks(t *testing.T, oobs []coll.OOB) {
	const n, blk = 3, 32
	timeout := 20 * time.Second
	w := newWorldOOB(t, coll.Config{Timeout: timeout}, oobs)
	gather := func(root, rank int) coll.Args {
		a := coll.Args{Type: coll.Gather, Root: root, DType: coll.Uint8, Src: coll.BufferDesc{Slice: make([]byte, blk), Count: blk}}
		if rank == root {
			a.Dst = coll.BufferDesc{Slice: make([]byte, n*blk), Count: n * blk}
		}
		return a
	}
	// No collective ran: no rank is linked to another (links are made on first use),
	// so rank 1's left message reaches nobody.
	closer := w.ranks[1].team
	require.NoError(t, coll.FailDeregOnce(closer))
	err := closer.Close()
	require.Error(t, err, "the injected deregistration failure did not fire")
	require.ErrorContains(t, err, "injected deregistration failure")

	// Ranks 0 and 2 run a gather rooted at rank 1, which has left: each must link to
	// rank 1 for it, through rank 1's mailbox.
	start := time.Now()
	errs := w.run(func(r *rank) error {
		if r.r == 1 {
			return nil
		}
		return runColl(context.Background(), r.team, gather(1, r.r))
	})
	took := time.Since(start)
	for _, r := range []int{0, 2} {
		require.Error(t, errs[r], "rank %d: a gather rooted at a rank that left succeeded", r)
		require.NotErrorIs(t, errs[r], coll.ErrTimeout, "rank %d waited out its deadline", r)
		var pe *coll.PeerError
		require.True(t, errors.As(errs[r], &pe), "rank %d: %v", r, errs[r])
		require.Equal(t, 1, pe.Rank, "rank %d: %v", r, errs[r])
	}
	require.Less(t, took, timeout/2, "the gather failed only near the deadline")
	require.NoError(t, closer.Close(), "the Close after the failed one")
}
