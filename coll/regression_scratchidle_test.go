package coll_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/tlmlx5"
)

// TestRegressionScratchIdlePeer: rank 0 of a 2-rank non-persistent reduction runs into
// its deadline while rank 1 has not reached the collective yet (its program still
// computes). Rank 0's ready-to-receive went out and names the transport's scratch,
// which rank 1 would write into when it gets there. Rank 0 used to wait for rank 1's
// acknowledgement of the abort, as for any exposed buffer, cut it off past AbortGrace,
// and break the team. Now its post fails with its own deadline at once, the team stays
// whole, and the transport keeps the scratch (tlmlx5.KeptBuffers) until rank 1 comes:
// rank 1 then fails the collective with rank 0's error, and an allreduce of fresh
// random data, checked on both ranks, and a barrier run on the same team, after which
// nothing is kept. Reduce (k-nomial: the child's vector lands in scratch) and
// allreduce by recursive doubling (the partner's vector does).
func TestRegressionScratchIdlePeer(t *testing.T) {
	watchdog(t, 2*time.Minute)
	const (
		grace    = time.Second // loose for loaded CI cores (took up to 130 ms of 300 there)
		deadline = 50 * time.Millisecond
		count    = 16 << 10 // int32: over the eager maximum, under two landing pieces
	)
	for _, c := range []struct {
		typ coll.CollType
		alg string
	}{{coll.Reduce, "knomial"}, {coll.Allreduce, "rd"}} {
		t.Run(c.alg, func(t *testing.T) {
			require.Zero(t, tlmlx5.KeptBuffers())
			w := newWorld(t, 2, coll.Config{Timeout: 30 * time.Second, AbortGrace: grace})
			defer w.close()
			rnd := testutil.Rand(t)
			args := func(r int) coll.Args {
				a := coll.Args{Type: c.typ, Alg: c.alg, Root: 0, DType: coll.Int32, Op: coll.OpSum,
					Src: coll.BufferDesc{Slice: make([]byte, 4*count), Count: count}}
				if r == 0 || c.typ == coll.Allreduce {
					a.Dst = coll.BufferDesc{Slice: make([]byte, 4*count), Count: count}
				}
				return a
			}
			var keptAfter int
			errs, took := lateRank1(w, deadline, 2*grace, func(ctx context.Context) error {
				err := runColl(ctx, w.ranks[0].team, args(0))
				keptAfter = tlmlx5.KeptBuffers()
				return err
			}, func() error { return runColl(context.Background(), w.ranks[1].team, args(1)) })
			require.ErrorIs(t, errs[0], context.DeadlineExceeded, "rank 0 fails by its deadline")
			require.NotErrorIs(t, errs[0], coll.ErrTeamBroken)
			require.Less(t, took, grace, "rank 0 waited for its idle peer: %v", errs[0])
			require.Equal(t, 1, keptAfter, "rank 0 keeps the scratch that rank 1 holds the RTR of")
			require.ErrorIs(t, errs[1], coll.ErrPeerFailed, "rank 1 hears of rank 0's failure")
			for r := range w.ranks {
				require.NoError(t, w.ranks[r].team.Broken(), "rank %d's team", r)
			}

			const m = 1000
			srcs := make([][]byte, 2)
			for r := range srcs {
				srcs[r] = make([]byte, 4*m)
				for i := range srcs[r] {
					srcs[r][i] = byte(rnd.Uint32())
				}
			}
			outs := [][]byte{make([]byte, 4*m), make([]byte, 4*m)}
			w.mustRun(func(r *rank) error {
				return runColl(context.Background(), r.team, coll.Args{Type: coll.Allreduce, DType: coll.Int32, Op: coll.OpSum,
					Src: coll.BufferDesc{Slice: srcs[r.r], Count: m}, Dst: coll.BufferDesc{Slice: outs[r.r], Count: m}})
			})
			for r := range outs {
				for i := 0; i < m; i++ {
					want := int32(binary.LittleEndian.Uint32(srcs[0][4*i:])) + int32(binary.LittleEndian.Uint32(srcs[1][4*i:]))
					require.Equal(t, want, int32(binary.LittleEndian.Uint32(outs[r][4*i:])), "rank %d element %d", r, i)
				}
			}
			w.mustRun(func(r *rank) error { return r.team.Barrier(context.Background()) })
			require.Zero(t, tlmlx5.KeptBuffers(), "rank 1's answer freed the kept scratch")
		})
	}
}
