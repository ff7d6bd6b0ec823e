package coll_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/tlmlx5"
)

// TestRegressionAheadIdlePeer: a 2-rank persistent reduce whose root's staged copy-out
// fails at post 3, after rank 1 finished post 3 and went idle, holding the root's
// ready-to-receive of post 4, sent ahead. The root used to wait for rank 1's
// acknowledgement of the abort, as for any exposed buffer, and cut it off past
// AbortGrace, breaking the team. Now the root's post fails at once with its own error
// and the team stays whole. The root closes the request at once, and the transport
// keeps the buffer that rank 1 may still write into (tlmlx5.KeptBuffers). Rank 1
// wakes and posts again, as its loop would: its data lands in the kept buffer, or the
// news fails the post first, and it answers the abort; either frees the buffer by the
// time a fresh allreduce of random data (checked on both ranks) and a barrier end.
func TestRegressionAheadIdlePeer(t *testing.T) {
	watchdog(t, 2*time.Minute)
	const grace = 300 * time.Millisecond
	w := newWorld(t, 2, coll.Config{Timeout: 30 * time.Second, AbortGrace: grace,
		Faults: []coll.Fault{{Kind: coll.FaultCopyOut, Rank: 0, N: 3}}})
	defer w.close()
	require.Zero(t, tlmlx5.KeptBuffers())
	rnd := testutil.Rand(t)
	const count = 16 << 10 // int32: over the eager maximum, under two landing pieces
	dst, err := mem.Alloc(mem.Sim, 4*count)
	require.NoError(t, err)
	defer dst.Close()
	randBytes := func(n int) [][]byte { // one per rank, drawn here: rnd is not for goroutines
		out := make([][]byte, 2)
		for r := range out {
			out[r] = make([]byte, n)
			for i := range out[r] {
				out[r][i] = byte(rnd.Uint32())
			}
		}
		return out
	}
	srcs := randBytes(4 * count)
	reqs := make([]*coll.Request, 2)
	w.mustRun(func(r *rank) error {
		src := srcs[r.r]
		a := coll.Args{Type: coll.Reduce, Root: 0, DType: coll.Int32, Op: coll.OpSum, Flags: coll.Persistent,
			Src: coll.BufferDesc{Slice: src, Count: count}}
		if r.r == 0 {
			a.Dst = coll.BufferDesc{Addr: dst.Addr(), Type: mem.Sim, Count: count}
		}
		q, err := r.team.Init(a)
		reqs[r.r] = q
		return err
	})
	defer closeReqs(reqs)
	post := func(r int) error {
		if err := reqs[r].Post(); err != nil {
			return err
		}
		return reqs[r].Wait(context.Background())
	}
	for p := 1; p <= 2; p++ {
		w.mustRun(func(r *rank) error { return post(r.r) })
	}
	// Rank 1's post 3 needs nothing of the root's post 3 (the RTR came ahead).
	require.NoError(t, post(1), "rank 1's post 3")
	start := time.Now()
	rootErr := post(0)
	took := time.Since(start)
	require.ErrorIs(t, rootErr, coll.ErrInjected, "the root's copy-out of post 3 fails")
	require.NotErrorIs(t, rootErr, coll.ErrTeamBroken)
	require.Less(t, took, grace, "the root waited for its idle peer: %v", rootErr)
	require.NoError(t, w.ranks[0].team.Broken(), "the root's team")
	require.NoError(t, reqs[0].Close())
	require.Equal(t, 1, tlmlx5.KeptBuffers(), "the root keeps the buffer that rank 1 holds the RTR of")

	if err := post(1); err != nil {
		require.ErrorIs(t, err, coll.ErrPeerFailed)
	}
	require.NoError(t, reqs[1].Close())

	in := make([][]int32, 2)
	outs := make([][]byte, 2)
	fresh := randBytes(4 * 1000)
	w.mustRun(func(r *rank) error {
		src := fresh[r.r]
		outs[r.r] = make([]byte, 4*1000)
		for i := 0; i < 1000; i++ {
			in[r.r] = append(in[r.r], int32(binary.LittleEndian.Uint32(src[4*i:])))
		}
		return runColl(context.Background(), r.team, coll.Args{Type: coll.Allreduce, DType: coll.Int32, Op: coll.OpSum,
			Src: coll.BufferDesc{Slice: src, Count: 1000}, Dst: coll.BufferDesc{Slice: outs[r.r], Count: 1000}})
	})
	for r := range outs {
		for i := 0; i < 1000; i++ {
			require.Equal(t, in[0][i]+in[1][i], int32(binary.LittleEndian.Uint32(outs[r][4*i:])), "rank %d element %d", r, i)
		}
	}
	w.mustRun(func(r *rank) error { return r.team.Barrier(context.Background()) })
	require.Zero(t, tlmlx5.KeptBuffers(), "rank 1's write or answer freed the kept buffer")
}
