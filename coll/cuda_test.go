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
