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

// TestSigOnData: a loop of collectives of one shape declares nothing after its first,
// and every collective still moves the right bytes. The first collective declares once
// per edge of the overlay tree and direction, by message (the data is evidence too,
// but never the declaration: TestMismatchAfterRepeats); the collectives after it, of
// the same signature, send no check message at all.
// 64 bytes go eagerly and 64 KiB by rendezvous at these team sizes on every
// provider (tlmlx5's eager maximum is 8 KiB up to 64 ranks).
func TestSigOnData(t *testing.T) {
	rnd := testutil.Rand(t)
	const iters = 5
	small, large := 64, 64<<10 // eager and rendezvous on every transport this runs on
	for _, c := range []struct {
		n, root, block int
		typ            coll.CollType
		up, down       int // check messages of the first collective
	}{
		{2, 0, small, coll.Gather, 1, 1},
		{2, 0, large, coll.Gather, 1, 1},
		{2, 0, small, coll.Scatter, 1, 1},
		{2, 1, small, coll.Gather, 1, 1},
		{8, 0, small, coll.Gather, 7, 7},
		{8, 3, small, coll.Gather, 7, 7},
		{8, 0, small, coll.Scatter, 7, 7},
		{8, 0, large, coll.Scatter, 7, 7},
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
			var up, down int
			for r, rk := range w.ranks {
				u, v := coll.SigMessages(rk.team)
				up += int(u - before[r][0])
				down += int(v - before[r][1])
			}
			require.Equal(t, c.up, up, "declarations sent up the tree, over %d collectives of one shape", iters)
			require.Equal(t, c.down, down, "declarations sent down the tree, over %d collectives of one shape", iters)
		})
	}
}

// TestSigOwed: in a team of two, a mismatched rank 1 whose first post never reaches
// the transport (it closes the request unposted, or its post fails) still makes rank
// 0 fail with ErrMismatch, not with rank 1's closing or failure: its declaration left
// at Init. (Until session 37 it rode on the first post's data and was sent after all,
// "owed", on these paths.)
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

// TestSigPairVerdictAtInit: in a team of two, rank 0's declaration leaves at its Init,
// not after rank 1's data, and only when the shape changed. So rank 1's gather (an
// eager block to rank 0) completes while rank 0 has initialized the collective but
// neither posted nor polled (before session 17 rank 1 waited for rank 0 to see its
// block and answer); a gather of the shape before sends no check message at all.
func TestSigPairVerdictAtInit(t *testing.T) {
	rnd := testutil.Rand(t)
	w := newWorld(t, 2, coll.Config{Timeout: time.Minute})
	var src [2][]byte
	var dst []byte
	args := func(r, block int) coll.Args {
		a := coll.Args{Type: coll.Gather, Root: 0, DType: coll.Uint8, Src: coll.BufferDesc{Slice: src[r], Count: block}}
		if r == 0 {
			a.Dst = coll.BufferDesc{Slice: dst, Count: 2 * block}
		}
		return a
	}
	// 64 and 32 bytes are eager on every transport this runs on. The link and rank
	// 0's eager buffers exist after a first gather.
	blocks := []int{64, 64, 32, 32, 64}
	for it, block := range blocks {
		for r := range src {
			src[r] = make([]byte, block)
			testutil.Fill(rnd, src[r])
		}
		dst = make([]byte, 2*block)
		if it == 0 {
			w.mustRun(func(rk *rank) error { return runColl(context.Background(), rk.team, args(rk.r, block)) })
			continue
		}
		changed := block != blocks[it-1]
		_, v0 := coll.SigMessages(w.ranks[0].team)
		req0, err := w.ranks[0].team.Init(args(0, block))
		require.NoError(t, err)
		t.Cleanup(func() { req0.Close() })
		_, v1 := coll.SigMessages(w.ranks[0].team)
		if changed {
			require.Equal(t, v0+1, v1, "iteration %d: a new shape: rank 0 declares at Init", it)
		} else {
			require.Equal(t, v0, v1, "iteration %d: the shape before: rank 0 sends nothing", it)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = runColl(ctx, w.ranks[1].team, args(1, block))
		cancel()
		require.NoError(t, err, "iteration %d: rank 1, with rank 0 not posted", it)

		require.NoError(t, req0.Post())
		require.NoError(t, req0.Wait(context.Background()))
		require.NoError(t, req0.Close())
		require.True(t, bytes.Equal(append(append([]byte{}, src[0]...), src[1]...), dst), "iteration %d: rank 0's data", it)
	}
}
