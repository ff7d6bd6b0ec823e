package coll_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestSigOnData: in a team of two, where the transport's messages carry the signature,
// the signature check sends fewer messages of its own, and every collective still
// moves the right bytes. Per collective, summed over the ranks: rank 1, when its task
// writes eagerly to rank 0, sends no signature, and rank 0, when its task writes
// eagerly to rank 1, sends no verdict. In a team of eight nothing changes:
// each leaf sends its signature whatever its data does, so that no rank's verdict
// waits for another's post.
// 64 bytes go eagerly and 64 KiB by rendezvous at these team sizes on every
// provider (tlmlx5's eager maximum is 8 KiB up to 64 ranks).
func TestSigOnData(t *testing.T) {
	rnd := testutil.Rand(t)
	const iters = 5
	small, large := 64, 64<<10 // eager and rendezvous on every transport this runs on
	for _, c := range []struct {
		n, root, block int
		typ            coll.CollType
		up, verdicts   int // per collective
	}{
		{2, 0, small, coll.Gather, 0, 1},  // the leaf's eager block is its signature
		{2, 0, large, coll.Gather, 1, 1},  // a ready-to-receive does not stand in (its check waits for the receiver's send)
		{2, 0, small, coll.Scatter, 1, 0}, // the root's eager block is its verdict
		{2, 1, small, coll.Gather, 1, 0},  // rank 0 writes to rank 1: its verdict
		{8, 0, small, coll.Gather, 7, 7},  // every leaf writes to rank 0, and signs too
		{8, 3, small, coll.Gather, 7, 7},  // the blocks go to rank 3, not up the tree
		{8, 0, small, coll.Scatter, 7, 7}, // nothing goes up the tree
		{8, 0, large, coll.Scatter, 7, 7}, // every leaf asks rank 0 for its block, and signs too
	} {
		t.Run(fmt.Sprintf("n%d/%v/root%d/%dB", c.n, c.typ, c.root, c.block), func(t *testing.T) {
			w := newWorld(t, c.n, coll.Config{Timeout: time.Minute})
			before := make([][2]uint64, c.n)
			for r, rk := range w.ranks {
				before[r][0], before[r][1] = coll.SigMessages(rk.team)
			}
			src := make([][]byte, c.n)
			for r := range src {
				src[r] = make([]byte, c.block*c.n) // a scatter root's whole vector; a block elsewhere
			}
			for it := 0; it < iters; it++ {
				for r := range src {
					testutil.Fill(rnd, src[r])
				}
				dst := make([][]byte, c.n)
				w.mustRun(func(rk *rank) error {
					a := coll.Args{Type: c.typ, Root: c.root, DType: coll.Uint8}
					switch c.typ {
					case coll.Gather:
						a.Src = coll.BufferDesc{Slice: src[rk.r][:c.block], Count: c.block}
						if rk.r == c.root {
							dst[rk.r] = make([]byte, c.block*c.n)
							a.Dst = coll.BufferDesc{Slice: dst[rk.r], Count: c.block * c.n}
						}
					case coll.Scatter:
						dst[rk.r] = make([]byte, c.block)
						a.Dst = coll.BufferDesc{Slice: dst[rk.r], Count: c.block}
						if rk.r == c.root {
							a.Src = coll.BufferDesc{Slice: src[rk.r], Count: c.block * c.n}
						}
					}
					return runColl(context.Background(), rk.team, a)
				})
				for r := 0; r < c.n; r++ {
					var want []byte
					switch {
					case c.typ == coll.Gather && r == c.root:
						for p := 0; p < c.n; p++ {
							want = append(want, src[p][:c.block]...)
						}
					case c.typ == coll.Scatter:
						want = src[c.root][r*c.block : (r+1)*c.block]
					default:
						continue
					}
					require.True(t, bytes.Equal(want, dst[r]), "iteration %d rank %d: wrong data", it, r)
				}
			}
			var up, verdicts int
			for r, rk := range w.ranks {
				u, v := coll.SigMessages(rk.team)
				up += int(u - before[r][0])
				verdicts += int(v - before[r][1])
			}
			require.Equal(t, c.up*iters, up, "signatures sent up the tree")
			require.Equal(t, c.verdicts*iters, verdicts, "verdicts sent down the tree")
		})
	}
}

// TestSigOwed: in a team of two, rank 1's first post was to carry its signature; when
// that post never reaches the transport, the signature goes anyway, so that a
// mismatch reads as one on rank 0 (ErrMismatch), not as rank 1's closing or failure.
func TestSigOwed(t *testing.T) {
	for _, how := range []string{"closes unposted", "fails at Post"} {
		t.Run(how, func(t *testing.T) {
			cfg := coll.Config{Timeout: time.Minute}
			if how == "fails at Post" {
				cfg.Faults = []coll.Fault{{Kind: coll.FaultDeadline, Rank: 1, N: 1}}
			}
			w := newWorld(t, 2, cfg)
			errs := w.run(func(rk *rank) error {
				count := 16
				if rk.r == 1 {
					count = 32 // a mismatch
				}
				a := rootedArgs(coll.Gather, 0, rk.r, 2, count)
				req, err := rk.team.Init(a)
				if err != nil {
					return err
				}
				if rk.r == 1 && how == "closes unposted" {
					return req.Close()
				}
				perr := req.Post()
				werr := req.Wait(context.Background())
				require.NoError(t, req.Close())
				if perr != nil {
					return perr
				}
				return werr
			})
			require.ErrorIs(t, errs[0], coll.ErrMismatch, "rank 0")
			require.NotErrorIs(t, errs[0], coll.ErrTimeout, "rank 0")
		})
	}
}

// TestSigPairVerdictAtInit: in a team of two, rank 0's verdict is its own signature and
// leaves at Init, not after rank 1's data. So rank 1's gather (an eager block to rank
// 0) completes while rank 0 has initialized the collective but neither posted nor
// polled: before, rank 1 waited for rank 0 to see its block and answer.
func TestSigPairVerdictAtInit(t *testing.T) {
	rnd := testutil.Rand(t)
	const block = 64 // eager on every transport this runs on
	w := newWorld(t, 2, coll.Config{Timeout: time.Minute})
	src := [2][]byte{make([]byte, block), make([]byte, block)}
	var dst []byte
	args := func(r int) coll.Args {
		a := coll.Args{Type: coll.Gather, Root: 0, DType: coll.Uint8, Src: coll.BufferDesc{Slice: src[r], Count: block}}
		if r == 0 {
			a.Dst = coll.BufferDesc{Slice: dst, Count: 2 * block}
		}
		return a
	}
	// the link and rank 0's eager buffers exist after a first gather
	dst = make([]byte, 2*block)
	w.mustRun(func(rk *rank) error { return runColl(context.Background(), rk.team, args(rk.r)) })
	for it := 0; it < 3; it++ {
		for r := range src {
			testutil.Fill(rnd, src[r])
		}
		dst = make([]byte, 2*block)
		_, v0 := coll.SigMessages(w.ranks[0].team)
		req0, err := w.ranks[0].team.Init(args(0))
		require.NoError(t, err)
		t.Cleanup(func() { req0.Close() })
		_, v1 := coll.SigMessages(w.ranks[0].team)
		require.Equal(t, v0+1, v1, "iteration %d: rank 0 sent its verdict at Init", it)

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = runColl(ctx, w.ranks[1].team, args(1))
		cancel()
		require.NoError(t, err, "iteration %d: rank 1, with rank 0 not posted", it)

		require.NoError(t, req0.Post())
		require.NoError(t, req0.Wait(context.Background()))
		require.NoError(t, req0.Close())
		require.True(t, bytes.Equal(append(append([]byte{}, src[0]...), src[1]...), dst), "iteration %d: rank 0's data", it)
	}
}
