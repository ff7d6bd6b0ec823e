package coll_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestRepostOnBrokenTeamFails: a persistent allreduce succeeds, the team breaks (an
// injected QP error on rank 0 during a barrier), and the request is posted again: Post
// refuses with the break, and Wait and Test then report the break too. Before, they
// reported the last post's success, and a caller that checked only Wait read the old
// sums in Dst as the new post's (a review found it).
func TestRepostOnBrokenTeamFails(t *testing.T) {
	const n, cnt = 2, 8
	rnd := testutil.Rand(t)
	w := newWorld(t, n, coll.Config{Timeout: 5 * time.Second,
		Faults: []coll.Fault{{Kind: coll.FaultQPErr, Rank: 0, N: 2}}})
	srcs, dsts := make([][]byte, n), make([][]byte, n)
	for r := range srcs {
		srcs[r], dsts[r] = make([]byte, 8*cnt), make([]byte, 8*cnt)
		testutil.Fill(rnd, srcs[r])
	}
	reqs := make([]*coll.Request, n)
	w.mustRun(func(r *rank) error {
		var err error
		reqs[r.r], err = r.team.Init(coll.Args{Type: coll.Allreduce, Flags: coll.Persistent, DType: coll.Int64, Op: coll.OpSum,
			Src: coll.BufferDesc{Slice: srcs[r.r], Count: cnt}, Dst: coll.BufferDesc{Slice: dsts[r.r], Count: cnt}})
		return err
	})
	w.mustRun(func(r *rank) error {
		if err := reqs[r.r].Post(); err != nil {
			return err
		}
		return reqs[r.r].Wait(context.Background())
	})
	sum := int64(binary.LittleEndian.Uint64(srcs[0])) + int64(binary.LittleEndian.Uint64(srcs[1]))
	require.Equal(t, sum, int64(binary.LittleEndian.Uint64(dsts[0])), "post 1")
	barrier := w.run(func(r *rank) error { return r.team.Run(context.Background(), coll.Args{Type: coll.Barrier}) })
	require.Error(t, barrier[0], "the injected QP error never fired")
	for r := range srcs {
		testutil.Fill(rnd, srcs[r])
	}
	for i, err := range w.run(func(r *rank) error {
		perr := reqs[r.r].Post()
		require.ErrorIs(t, perr, coll.ErrTeamBroken, "rank %d: Post", r.r)
		done, terr := reqs[r.r].Test()
		require.True(t, done, "rank %d: Test", r.r)
		require.ErrorIs(t, terr, coll.ErrTeamBroken, "rank %d: Test", r.r)
		return reqs[r.r].Wait(context.Background())
	}) {
		require.ErrorIs(t, err, coll.ErrTeamBroken, "rank %d: Wait of a post that Post refused", i)
	}
	for _, q := range reqs {
		require.NoError(t, q.Close())
	}
}
