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

// TestInitInto: one Request per rank carries a loop of gathers of fresh random data,
// each initialized into it after the last one closed, then a persistent barrier; every
// gather's result is checked at the root.
func TestInitInto(t *testing.T) {
	const n, blk, rounds = 3, 257, 20
	rnd := testutil.Rand(t)
	w := newWorld(t, n, coll.Config{Timeout: 5 * time.Second})
	ctx := context.Background()
	src := make([][]byte, n)
	for r := range src {
		src[r] = make([]byte, blk)
	}
	dst := make([]byte, n*blk)
	qs := make([]*coll.Request, n)
	for r := range qs {
		qs[r] = new(coll.Request) // a zero Request is reusable from the start
	}
	for i := 0; i < rounds; i++ {
		for r := range src {
			for j := range src[r] {
				src[r][j] = byte(rnd.Uint32())
			}
		}
		root := i % n
		w.mustRun(func(r *rank) error {
			a := coll.Args{Type: coll.Gather, DType: coll.Uint8, Root: root, Src: coll.BufferDesc{Slice: src[r.r], Count: blk}}
			if r.r == root {
				a.Dst = coll.BufferDesc{Slice: dst, Count: n * blk}
			}
			return runInto(ctx, r.team, qs[r.r], a)
		})
		require.Equal(t, bytes.Join(src, nil), dst, "round %d, root %d", i, root)
	}
	// Persistent, in the same requests.
	w.mustRun(func(r *rank) error {
		q := qs[r.r]
		if err := r.team.InitInto(q, coll.Args{Type: coll.Barrier, Flags: coll.Persistent}); err != nil {
			return err
		}
		for j := 0; j < 3; j++ {
			if err := q.Post(); err != nil {
				return err
			}
			if err := q.Wait(ctx); err != nil {
				return err
			}
		}
		return q.Close()
	})
}

// TestInitIntoRefusals: a nil q, an open q and a q of another team are refused, take
// the collective's number (the peers fail it at once, ErrPeerFailed), and leave an
// open q running; a q whose InitInto failed on its Args is zero again and reusable.
func TestInitIntoRefusals(t *testing.T) {
	w := newWorld(t, 2, coll.Config{Timeout: 5 * time.Second})
	other := newWorld(t, 2, coll.Config{Timeout: 5 * time.Second})
	ctx := context.Background()
	tm := w.ranks[0].team
	peerFails := func(what string) {
		t.Helper()
		err := w.ranks[1].team.Barrier(ctx)
		require.ErrorIs(t, err, coll.ErrPeerFailed, what)
	}

	err := tm.InitInto(nil, coll.Args{Type: coll.Barrier})
	require.ErrorIs(t, err, coll.ErrInvalid)
	require.ErrorContains(t, err, "q is nil")
	peerFails("nil q")

	// A q of another team.
	foreign := new(coll.Request)
	other.mustRun(func(r *rank) error {
		q := new(coll.Request)
		if r.r == 0 {
			q = foreign
		}
		return runInto(ctx, r.team, q, coll.Args{Type: coll.Barrier})
	})
	err = tm.InitInto(foreign, coll.Args{Type: coll.Barrier})
	require.ErrorIs(t, err, coll.ErrInvalid)
	require.ErrorContains(t, err, "another team")
	peerFails("foreign q")

	// An open q: refused, and untouched: its own collective still runs.
	qs := make([]*coll.Request, 2)
	w.mustRun(func(r *rank) error {
		q, err := r.team.Init(coll.Args{Type: coll.Barrier})
		qs[r.r] = q
		return err
	})
	err = tm.InitInto(qs[0], coll.Args{Type: coll.Barrier})
	require.ErrorIs(t, err, coll.ErrBusy)
	require.ErrorContains(t, err, "Close it first")
	w.mustRun(func(r *rank) error {
		if err := qs[r.r].Post(); err != nil {
			return err
		}
		return qs[r.r].Wait(ctx)
	})
	// Rank 1 now meets the refused collective, which followed the open one.
	peerFails("open q")
	w.mustRun(func(r *rank) error { return qs[r.r].Close() })

	// Bad Args into a closed q: refused by Init's own check, and q is zero again.
	err = tm.InitInto(qs[0], coll.Args{Type: coll.Bcast, DType: coll.Uint8, Src: coll.BufferDesc{Count: 1}})
	require.ErrorIs(t, err, coll.ErrInvalid)
	peerFails("bad args")
	require.Zero(t, qs[0].Seq(), "q after a failed InitInto")
	require.Empty(t, qs[0].Alg(), "q after a failed InitInto")
	require.NoError(t, qs[0].Close(), "a zero Request closes")

	// And both the team and the refused q still work.
	w.mustRun(func(r *rank) error { return runInto(ctx, r.team, qs[r.r], coll.Args{Type: coll.Barrier}) })

	var nilTeam *coll.Team
	require.ErrorIs(t, nilTeam.InitInto(new(coll.Request), coll.Args{Type: coll.Barrier}), coll.ErrInvalid)
}

// TestInitIntoBrokenTeam: InitInto on a broken team, and on a closed one, fails and
// leaves the closed q it was given a zero Request, as any failure after q is accepted
// does (it held the closed collective before; from a review of the first version).
func TestInitIntoBrokenTeam(t *testing.T) {
	w := newWorld(t, 2, coll.Config{Timeout: 3 * time.Second, AbortGrace: time.Second,
		Faults: []coll.Fault{{Kind: coll.FaultQPErr, Rank: 0, N: 2}}})
	ctx := context.Background()
	qs := []*coll.Request{new(coll.Request), new(coll.Request)}
	w.mustRun(func(r *rank) error { return runInto(ctx, r.team, qs[r.r], coll.Args{Type: coll.Barrier}) })
	// The second barrier's queue-pair error breaks rank 0's team.
	w.run(func(r *rank) error { return runInto(ctx, r.team, qs[r.r], coll.Args{Type: coll.Barrier}) })
	tm := w.ranks[0].team
	require.Error(t, tm.Broken(), "the injected queue-pair error did not break rank 0's team")
	q := qs[0]
	require.NotZero(t, q.Seq(), "q holds the second barrier before")
	err := tm.InitInto(q, coll.Args{Type: coll.Barrier})
	require.ErrorIs(t, err, coll.ErrTeamBroken)
	require.Zero(t, q.Seq(), "q after InitInto failed on a broken team")
	require.Empty(t, q.Alg())
	require.ErrorIs(t, q.Post(), coll.ErrInvalid, "a zero Request")

	// A closed team: the other rank's q, closed, after its team closed.
	q1 := qs[1]
	require.NoError(t, q1.Close())
	require.NoError(t, w.ranks[1].team.Close())
	err = w.ranks[1].team.InitInto(q1, coll.Args{Type: coll.Barrier})
	require.ErrorIs(t, err, coll.ErrClosed)
	require.Zero(t, q1.Seq(), "q after InitInto failed on a closed team")
}
