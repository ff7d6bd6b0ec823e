package coll_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/bootstrap"
	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// tcpOOBs returns n TCPOOB endpoints, each over its own store client (as processes
// would have), on a store served in the test.
func tcpOOBs(t testing.TB, n int) []coll.OOB {
	t.Helper()
	srv, err := bootstrap.NewServer("127.0.0.1:0", bootstrap.ServerOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	oobs := make([]coll.OOB, n)
	for r := range n {
		c, err := bootstrap.Dial(ctx, srv.Addr().String(), bootstrap.ClientOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		oobs[r], err = coll.TCPOOB(c, r, n)
		require.NoError(t, err)
	}
	return oobs
}

// TestTCPOOBClosedPeerUnlinked: over TCPOOB, a rank that closed its team before any
// peer linked to it (so that its left message reached nobody) is found gone when a
// peer's hello to it goes unread: the peer's collective fails at once naming it,
// not at its deadline or the connect bound (30 s).
func TestTCPOOBClosedPeerUnlinked(t *testing.T) {
	const n = 3
	w := newWorldOOB(t, coll.Config{Timeout: 20 * time.Second}, tcpOOBs(t, n))
	require.NoError(t, w.ranks[2].team.Close())
	start := time.Now()
	var mu sync.Mutex
	took := make([]time.Duration, n)
	errs := w.run(func(r *rank) error {
		if r.r == 2 {
			return nil
		}
		a := coll.Args{Type: coll.Gather, Root: 2, DType: coll.Uint8, Src: coll.BufferDesc{Slice: make([]byte, 8), Count: 8}}
		err := r.team.Run(context.Background(), a)
		mu.Lock()
		took[r.r] = time.Since(start)
		mu.Unlock()
		return err
	})
	t.Logf("errors %v, in %v", errs, took)
	require.NoError(t, errs[2])
	for _, i := range []int{0, 1} {
		var pe *coll.PeerError
		require.True(t, errors.As(errs[i], &pe), "rank %d: %v", i, errs[i])
		require.Equal(t, 2, pe.Rank, "rank %d", i)
		require.Less(t, took[i], 5*time.Second, fmt.Sprintf("rank %d waited for its deadline", i))
	}
}

// TestTCPOOBMailboxMark: a TCPOOB mailbox closed with its rank's bound leaves a mark
// in the store; a peer's Gone finds it in the background, nudges its listener with an
// empty delivery, and then answers a *LeftError carrying the bound, and its Send is
// refused. A mailbox closed without a bound is found closed too, without one. Empty
// messages are refused: an empty delivery is the mailbox's news.
func TestTCPOOBMailboxMark(t *testing.T) {
	const n = 3
	boxes := make([]coll.Mailbox, n)
	for r, oob := range tcpOOBs(t, n) {
		var err error
		boxes[r], err = oob.(coll.Messenger).Mailbox()
		require.NoError(t, err)
	}
	nudged := make(chan int, 16)
	boxes[0].Listen(func(from int, msg []byte) {
		if len(msg) == 0 {
			nudged <- from
		}
	})
	require.ErrorIs(t, boxes[0].Send(1, nil), coll.ErrInvalid)
	require.NoError(t, boxes[0].Gone(1), "rank 1's mailbox is open")
	require.Equal(t, 1, <-nudged, "the first nudge comes without a look")
	boxes[1].(coll.LeavingCloser).CloseLeaving(42, "rank 1 closed its team")
	boxes[2].Close("rank 2's NewTeam failed")
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range []int{1, 2} {
		for boxes[0].Gone(p) == nil {
			require.True(t, time.Now().Before(deadline), "rank %d's mark not found", p)
			select {
			case <-nudged:
			case <-time.After(3 * time.Second):
				t.Fatalf("no nudge while asking about rank %d", p)
			}
		}
	}
	err := boxes[0].Gone(1)
	var le *coll.LeftError
	require.True(t, errors.As(err, &le), "%v", err)
	require.Equal(t, 1, le.Rank)
	require.Equal(t, uint64(42), le.From)
	require.Equal(t, "rank 1 closed its team", le.Why)
	require.ErrorIs(t, boxes[0].Send(1, []byte("hello")), coll.ErrClosed)
	err = boxes[0].Gone(2)
	require.ErrorIs(t, err, coll.ErrClosed)
	require.False(t, errors.As(err, &le), "closed without a bound: %v", err)
	require.Contains(t, err.Error(), "rank 2's NewTeam failed")
	boxes[0].Close("done")
}

// TestTCPOOBNoLooksWithoutClose: while no rank closed its team, links that wait (an
// alltoall wiring every pair of 24 ranks through the store at once) look for no
// peer's mark: the looker reads only the team's count of closed mailboxes.
func TestTCPOOBNoLooksWithoutClose(t *testing.T) {
	const n = 24
	w := newWorldOOB(t, coll.Config{Timeout: 60 * time.Second}, tcpOOBs(t, n))
	before := coll.MarkLooks()
	rnd := testutil.Rand(t)
	srcs := make([][]byte, n)
	dsts := make([][]byte, n)
	for r := range n {
		srcs[r] = make([]byte, 8*n)
		testutil.Fill(rnd, srcs[r])
		dsts[r] = make([]byte, 8*n)
	}
	w.mustRun(func(r *rank) error {
		return r.team.Run(context.Background(), coll.Args{Type: coll.Alltoall, DType: coll.Uint8,
			Src: coll.BufferDesc{Slice: srcs[r.r], Count: 8 * n}, Dst: coll.BufferDesc{Slice: dsts[r.r], Count: 8 * n}})
	})
	for r := range n {
		for p := range n {
			require.Equal(t, srcs[p][8*r:8*r+8], dsts[r][8*p:8*p+8], "rank %d's block from rank %d", r, p)
		}
	}
	require.Zero(t, coll.MarkLooks()-before, "marks looked for while no rank closed")
}

// TestEmptyMessageFromOutOfRange: a mailbox's empty delivery (its news of a peer)
// naming a rank outside the team is ignored, as any message from one is. It crashed
// the transport in the first version of the nudge (an index out of range).
func TestEmptyMessageFromOutOfRange(t *testing.T) {
	oobs := coll.LocalOOB(2)
	oobs[0] = badFromOOB{oobs[0].(coll.Messenger)}
	w := newWorldOOB(t, coll.Config{Timeout: 5 * time.Second}, oobs)
	w.mustRun(func(r *rank) error { return r.team.Barrier(context.Background()) })
}

// badFromOOB's mailbox delivers an empty message from rank Size() once it listens.
type badFromOOB struct{ coll.Messenger }

func (o badFromOOB) Mailbox() (coll.Mailbox, error) {
	m, err := o.Messenger.Mailbox()
	return badFromMailbox{m, o.Size()}, err
}

type badFromMailbox struct {
	coll.Mailbox
	n int
}

func (m badFromMailbox) Listen(recv func(int, []byte)) {
	m.Mailbox.Listen(recv)
	recv(m.n, nil)
	recv(-1, nil)
}
