package coll_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// TestScratchReuse: non-persistent staged collectives of one size reuse
// the team's staging buffers instead of allocating anew, keep their data
// right, and the buffers are freed at Team.Close.
func TestScratchReuse(t *testing.T) {
	rnd := testutil.Rand(t)
	const n, cnt = 3, 4099
	before := mem.Live()
	w := newWorld(t, n, coll.Config{})
	dsts := make([]*mem.Buffer, n)
	for i := range dsts {
		b, err := mem.Alloc(mem.Sim, n*cnt)
		require.NoError(t, err)
		dsts[i] = b
	}
	defer func() {
		for _, b := range dsts {
			require.NoError(t, b.Close())
		}
	}()
	probe := make([]byte, n*cnt)
	live := -1
	for it := 0; it < 6; it++ {
		src := make([][]byte, n)
		for i := range src {
			src[i] = make([]byte, cnt)
			testutil.Fill(rnd, src[i])
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		w.mustRun(func(r *rank) error {
			return r.team.Run(ctx, coll.Args{Type: coll.Allgather, DType: coll.Uint8,
				Src: coll.BufferDesc{Slice: src[r.r], Type: mem.Host, Count: cnt},
				Dst: coll.BufferDesc{Buf: dsts[r.r], Type: mem.Sim, Count: n * cnt}})
		})
		cancel()
		for r := 0; r < n; r++ {
			host, err := mem.Alloc(mem.Host, n*cnt)
			require.NoError(t, err)
			require.NoError(t, mem.Copy(host, 0, dsts[r], 0, n*cnt))
			copy(probe, host.Bytes())
			require.NoError(t, host.Close())
			for p := 0; p < n; p++ {
				testutil.Equal(t, src[p], probe[p*cnt:(p+1)*cnt], "allgather into sim")
			}
		}
		if it == 0 {
			live = mem.Live()
		}
		require.Equal(t, live, mem.Live(), "iteration %d allocated new staging buffers", it)
	}
	require.Greater(t, live, before+n, "the sim destinations were staged through scratch")
	w.close()
	require.Equal(t, before+n, mem.Live(), "Team.Close frees the idle staging buffers")
}

// Config.ScratchCache < 0 keeps no staging buffers between requests.
func TestScratchCacheDisabled(t *testing.T) {
	const n, cnt = 2, 1000
	w := newWorld(t, n, coll.Config{ScratchCache: -1})
	// The links (and their buffers) are made at first use.
	w.mustRun(func(r *rank) error { return r.team.Barrier(context.Background()) })
	before := mem.Live() // the teams' own buffers included
	dst := make([]*mem.Buffer, n)
	for i := range dst {
		b, err := mem.Alloc(mem.Sim, n*cnt)
		require.NoError(t, err)
		dst[i] = b
		defer b.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w.mustRun(func(r *rank) error {
		return r.team.Run(ctx, coll.Args{Type: coll.Allgather, DType: coll.Uint8,
			Src: coll.BufferDesc{Slice: make([]byte, cnt), Count: cnt},
			Dst: coll.BufferDesc{Buf: dst[r.r], Type: mem.Sim, Count: n * cnt}})
	})
	require.Equal(t, before+n, mem.Live(), "staging buffers freed when their request closed")
}
