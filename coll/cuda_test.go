package coll_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

func requireCUDA(t *testing.T) {
	t.Helper()
	if !mem.CUDAAvailable() {
		if testutil.Required("cuda") {
			t.Fatal("cuda required (IBCOLL_REQUIRE) but no CUDA device is available")
		}
		t.Skip("no CUDA device")
	}
}

// TestCUDASeedCases runs the seed's literal cases, persistent with 100 re-posts and
// fresh random data each time, with soft0's GPUDirect stand-in off (CUDA staged
// through pinned host scratch) and on (CUDA registered directly): a gather whose root
// has a host src and a CUDA dst, and a scatter whose root has a CUDA src and a host
// dst. Staging must show the copies exactly when CUDA is staged.
func TestCUDASeedCases(t *testing.T) {
	requireCUDA(t)
	for _, gd := range []bool{false, true} {
		t.Run(fmt.Sprintf("gpudirect=%v", gd), func(t *testing.T) {
			rnd := testutil.Rand(t)
			const n = 4
			w := newWorld(t, n, coll.Config{Timeout: 30 * time.Second, SoftGPUDirect: gd})
			defer w.close()
			for _, c := range []struct {
				typ      coll.CollType
				src, dst mem.Type
			}{{coll.Gather, mem.Host, mem.CUDA}, {coll.Scatter, mem.CUDA, mem.Host}} {
				s := randScenario(rnd, n, c.typ, "", 1000+rnd.IntN(5000))
				s.root, s.inPlace, s.reps = 0, false, 100
				for r := range n {
					s.srcType[r], s.dstType[r], s.how[r] = mem.Host, mem.Host, 1+rnd.IntN(2)
				}
				s.srcType[0], s.dstType[0] = c.src, c.dst
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				err := s.run(ctx, w, rnd)
				cancel()
				require.NoError(t, err)
				rep := s.staging[0]
				t.Logf("%v root: src %v, dst %v; copied %d bytes over %d posts", c.typ, rep.Src, rep.Dst, rep.Copied, rep.Posts)
				require.Equal(t, 100, rep.Posts)
				if gd {
					require.Zero(t, rep.Copied, "the stand-in registers CUDA memory: nothing to stage")
				} else {
					require.Positive(t, rep.Copied)
					staged := rep.Dst
					if c.typ == coll.Scatter {
						staged = rep.Src
					}
					require.True(t, staged.Staged && staged.Pinned, "CUDA goes through pinned host scratch: %v", staged)
				}
			}
		})
	}
}

// TestCUDAStrongAsymmetry: every collective on a team whose ranks each draw src and dst
// from all four memory types, with the stand-in off and on, a few posts each.
func TestCUDAStrongAsymmetry(t *testing.T) {
	requireCUDA(t)
	types := []mem.Type{mem.Host, mem.Sim, mem.CUDA, mem.CUDAManaged}
	for _, gd := range []bool{false, true} {
		t.Run(fmt.Sprintf("gpudirect=%v", gd), func(t *testing.T) {
			rnd := testutil.Rand(t)
			const n = 5
			w := newWorld(t, n, coll.Config{Timeout: 30 * time.Second, SoftGPUDirect: gd})
			defer w.close()
			for _, typ := range coll.CollTypes() {
				s := randScenario(rnd, n, typ, "", 1+rnd.IntN(3000))
				s.reps = 1 + rnd.IntN(4)
				for r := range n {
					s.srcType[r], s.dstType[r] = types[rnd.IntN(4)], types[rnd.IntN(4)]
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := s.run(ctx, w, rnd)
				cancel()
				require.NoError(t, err, "src %v dst %v", s.srcType, s.dstType)
			}
		})
	}
}

// TestCUDAPinnedScratchKept: a pinned staging buffer larger than Config.ScratchCache is
// still kept for the next request of its shape, so that non-persistent collectives on
// CUDA memory do not pin at every Init; the data stays right and Team.Close frees it.
func TestCUDAPinnedScratchKept(t *testing.T) {
	requireCUDA(t)
	rnd := testutil.Rand(t)
	const n, cnt = 2, 1 << 20
	before := mem.Live()
	w := newWorld(t, n, coll.Config{ScratchCache: 4096})
	dst, err := mem.Alloc(mem.CUDA, n*cnt)
	require.NoError(t, err)
	defer dst.Close()
	host, err := mem.Alloc(mem.Host, n*cnt)
	require.NoError(t, err)
	defer host.Close()
	live := -1
	for it := range 5 {
		src := make([][]byte, n)
		for i := range src {
			src[i] = make([]byte, cnt)
			testutil.Fill(rnd, src[i])
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var rep coll.StagingReport
		w.mustRun(func(r *rank) error {
			a := coll.Args{Type: coll.Gather, DType: coll.Uint8, Src: coll.BufferDesc{Slice: src[r.r], Type: mem.Host, Count: cnt}}
			if r.r == 0 {
				a.Dst = coll.BufferDesc{Buf: dst, Type: mem.CUDA, Count: n * cnt}
			}
			q, err := r.team.Init(a)
			if err != nil {
				return err
			}
			defer q.Close()
			if err := q.Post(); err != nil {
				return err
			}
			err = q.Wait(ctx)
			if r.r == 0 {
				rep = q.Staging()
			}
			return err
		})
		cancel()
		require.True(t, rep.Dst.Staged && rep.Dst.Pinned, "%v", rep.Dst)
		require.NoError(t, mem.Copy(host, 0, dst, 0, n*cnt))
		for p := range n {
			testutil.Equal(t, src[p], host.Bytes()[p*cnt:(p+1)*cnt], "gather into CUDA memory")
		}
		if it == 0 {
			live = mem.Live()
		}
		require.Equal(t, live, mem.Live(), "iteration %d allocated (and pinned) a new staging buffer", it)
	}
	w.close()
	require.Equal(t, before+2, mem.Live(), "Team.Close frees the kept pinned buffer")
}
