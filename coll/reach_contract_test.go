package coll_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/asym"
	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/tlmlx5"
)

// TestReachContract holds what the transport reports and what it accepts together:
// for every memory type this machine can allocate, a collective whose buffers are all
// of that type is planned unstaged exactly when the transport's reach says it handles
// the type (the NIC registers it and, for reductions, the CPU reaches it), and it runs
// and moves the right data either way. The transport refuses a type it does not handle,
// and every rank's Request.Staging shows that nothing was copied, so an unstaged run
// proves acceptance; a staged one must show the copies. It runs with soft0's GPUDirect
// stand-in off and on (a real device ignores the switch), so both answers for CUDA
// memory are exercised where a GPU is present.
func TestReachContract(t *testing.T) {
	for _, gd := range []bool{false, true} {
		t.Run(fmt.Sprintf("gpudirect=%v", gd), func(t *testing.T) { reachContract(t, gd) })
	}
}

func reachContract(t *testing.T, gpuDirect bool) {
	ts, err := driver.Lookup("transports", []string{tlmlx5.Name})
	require.NoError(t, err)
	tc, err := ts[0].Open(driver.Config{Device: device(), SoftGPUDirect: gpuDirect})
	require.NoError(t, err)
	reach := tc.Reach()
	require.NoError(t, tc.Close())
	t.Logf("reach: %v %v", reach, reach.Notes)

	rnd := testutil.Rand(t)
	const n = 3
	w := newWorld(t, n, coll.Config{Timeout: 20 * time.Second, SoftGPUDirect: gpuDirect})
	defer w.close()
	types := []mem.Type{mem.Host, mem.Sim, mem.CUDAManaged, mem.CUDA}
	ran := map[mem.Type]bool{}
	for _, mt := range types {
		if b, err := mem.Alloc(mt, 64); err != nil {
			if (mt == mem.CUDA || mt == mem.CUDAManaged) && testutil.Required("cuda") {
				t.Fatalf("cuda required (IBCOLL_REQUIRE) but allocating %v failed: %v", mt, err)
			}
			t.Logf("%v: not checked, not allocatable here (%v)", mt, err)
			continue
		} else {
			require.NoError(t, b.Close())
		}
		for _, typ := range []coll.CollType{coll.Gather, coll.Bcast, coll.Allreduce, coll.ReduceScatter, coll.Alltoallv} {
			s := randScenario(rnd, n, typ, "", 1+rnd.IntN(300))
			s.inPlace = false
			for r := range n {
				s.srcType[r], s.dstType[r], s.how[r] = mt, mt, 1+rnd.IntN(2)
			}
			direct := reach.NICReaches(mt) && (!typ.IsReduction() || reach.CPUReaches(mt))
			plan, err := asym.Plan(asym.Args{Coll: typ, Root: s.root, Rank: s.root, Size: n, DtypeSize: s.dt.Size(),
				Src: asym.Buf{Type: mt, Count: n * s.count}, Dst: asym.Buf{Type: mt, Count: n * s.count}}, reach)
			if typ == coll.Alltoallv {
				v := asym.Buf{Type: mt, Counts: []int{1, 1, 1}, Displs: []int{0, 1, 2}}
				plan, err = asym.Plan(asym.Args{Coll: typ, Size: n, DtypeSize: s.dt.Size(), Src: v, Dst: v}, reach)
			}
			require.NoError(t, err)
			require.Equal(t, !direct, plan.Any(), "%v with %v buffers: reach %v", typ, mt, reach)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err = s.run(ctx, w, rnd)
			cancel()
			how := map[bool]string{true: "used directly", false: "staged"}[direct]
			require.NoError(t, err, "%v buffers, %s", mt, how)
			var copied int64
			for r, rep := range s.staging {
				copied += rep.Copied
				if direct {
					require.False(t, rep.Src.Staged || rep.Dst.Staged, "rank %d: %v buffers of a %v: %+v", r, mt, typ, rep)
				}
			}
			if direct {
				require.Zero(t, copied, "%v: %v buffers are reachable, yet staging copied", typ, mt)
			} else {
				require.Positive(t, copied, "%v: %v buffers are not reachable, yet staging copied nothing", typ, mt)
			}
		}
		ran[mt] = true
	}
	require.True(t, ran[mem.Host] && ran[mem.Sim])
}
