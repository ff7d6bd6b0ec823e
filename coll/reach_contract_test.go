package coll_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/asym"
	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/dm"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/tlmlx5"
	"github.com/ibcoll/ibcoll/verbs"
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

// TestReachContractDM holds the contract for NIC device memory, which comes from a
// context's pool (Context.AllocDM) rather than from mem.Alloc. Where the transport
// reports DM reachable, collectives over DM buffers of each rank's own context are
// planned unstaged except what reductions write (the CPU cannot address DM) and, where
// the reach does not list DM in ReduceSrc, their sources; the requests report the
// staging that the plan said, and they run and move the right data; a DM buffer of
// another context fails Init in the transport,
// which proves that an unstaged DM buffer reaches the transport itself. Asymmetric
// host/dm ranks run too (a DM scratch, where the plan picks one, comes from the pool).
// Whether DM is checked is decided from the device's queried capacity, not its name.
func TestReachContractDM(t *testing.T) {
	dev, err := verbs.Open(device())
	require.NoError(t, err)
	attr, err := dev.Query()
	require.NoError(t, dev.Close())
	require.NoError(t, err)
	const n = 3
	if attr.MaxDMSize == 0 {
		// No device memory: the pools are host memory, so the transport must not
		// claim DM, and AllocDM must say why it fails.
		c, err := coll.NewContext(coll.Config{Device: device()})
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()
		_, err = c.AllocDM(64)
		require.ErrorIs(t, err, coll.ErrNotSupported)
		t.Logf("%s has no device memory: DM user buffers not checked: %v", device(), err)
		return
	}
	// Three ranks and the probe share the device's memory: give each a share.
	capacity := min(32<<10, int(attr.MaxDMSize)/(n+1)) &^ 63
	require.GreaterOrEqual(t, capacity, 16<<10, "%s has %d bytes of device memory, too little for this test's %d pools", device(), attr.MaxDMSize, n+1)
	cfg := coll.Config{Timeout: 20 * time.Second, DMCapacity: capacity}
	ts, err := driver.Lookup("transports", []string{tlmlx5.Name})
	require.NoError(t, err)
	tc, err := ts[0].Open(driver.Config{Device: device(), DMCapacity: capacity})
	require.NoError(t, err)
	reach := tc.Reach()
	require.NoError(t, tc.Close())
	t.Logf("reach: %v %v", reach, reach.Notes)
	require.True(t, reach.NICReaches(mem.DM), "%s has %d bytes of device memory, a %d-byte pool fits", device(), attr.MaxDMSize, capacity)
	require.False(t, reach.CPUReaches(mem.DM))

	rnd := testutil.Rand(t)
	// Both ways of the transport's local copies out of DM: by the CPU, and through the
	// NIC where the device reports uncached CPU reads (soft0 with SoftDMUncached; a
	// real device reports them anyway and ignores the option).
	for _, uncached := range []bool{false, true} {
		cfg := cfg
		cfg.SoftDMUncached = uncached
		t.Run(map[bool]string{false: "as-reported", true: "soft-dm-uncached"}[uncached], func(t *testing.T) {
			tc, err := ts[0].Open(driver.Config{Device: device(), DMCapacity: capacity, SoftDMUncached: uncached})
			require.NoError(t, err)
			reach := tc.Reach()
			require.NoError(t, tc.Close())
			t.Logf("reach: %v %v", reach, reach.Notes)
			checkDMCollectives(t, rnd, n, cfg, reach)
		})
	}

	// A DM buffer of another context (rank 1's) given to rank 0's one-rank team: the
	// transport refuses it, naming the argument.
	w := newWorld(t, n, cfg)
	defer w.close()
	one := newWorld(t, 1, cfg)
	defer one.close()
	foreign, err := w.ranks[1].ctx.AllocDM(256)
	require.NoError(t, err)
	defer foreign.Close()
	own, err := one.ranks[0].ctx.AllocDM(256)
	require.NoError(t, err)
	defer own.Close()
	_, err = one.ranks[0].team.Init(coll.Args{Type: coll.Gather, DType: coll.Uint8,
		Src: coll.BufferDesc{Buf: foreign, Count: 256}, Dst: coll.BufferDesc{Buf: own, Count: 256}})
	require.ErrorIs(t, err, coll.ErrInvalid)
	require.ErrorContains(t, err, "Args.Src")
	require.ErrorContains(t, err, "another context")
}

// TestReachContractDMStaged: where the transport does not report DM (its pool found
// no device memory free: here a pool outside the team holds all of it), DM buffers
// are staged through host memory for every collective, and the data still arrives.
func TestReachContractDMStaged(t *testing.T) {
	dev, err := verbs.Open(device())
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	defer func() { require.NoError(t, pd.Close()) }()
	holder, err := dm.NewPool(dev, pd, dm.Config{Capacity: 1 << 30, NoHostFallback: true})
	if errors.Is(err, verbs.ErrNotSupported) {
		t.Logf("%s has no device memory: TestReachContractDM checks that DM is refused", device())
		return
	}
	require.NoError(t, err)
	defer func() { require.NoError(t, holder.Close()) }()

	const n = 3
	w := newWorld(t, n, coll.Config{Timeout: 20 * time.Second})
	defer w.close()
	ts, err := driver.Lookup("transports", []string{tlmlx5.Name})
	require.NoError(t, err)
	tc, err := ts[0].Open(driver.Config{Device: device()})
	require.NoError(t, err)
	reach := tc.Reach()
	require.NoError(t, tc.Close())
	require.False(t, reach.NICReaches(mem.DM), "the holder took all of %s's device memory (%d bytes): %v", device(), holder.Capacity(), reach.Notes)
	_, err = w.ranks[0].ctx.AllocDM(64)
	require.ErrorIs(t, err, coll.ErrNotSupported)

	rnd := testutil.Rand(t)
	for _, typ := range []coll.CollType{coll.Gather, coll.Scatter, coll.Allgather, coll.Allreduce} {
		s := randScenario(rnd, n, typ, "", 1+rnd.IntN(200))
		s.inPlace, s.dmFrom = false, holder
		for r := range n {
			s.srcType[r], s.dstType[r], s.how[r] = mem.DM, mem.DM, 1
		}
		plan, err := asym.Plan(asym.Args{Coll: typ, Root: s.root, Rank: s.root, Size: n, DtypeSize: s.dt.Size(),
			Src: asym.Buf{Type: mem.DM, Count: n * s.count}, Dst: asym.Buf{Type: mem.DM, Count: n * s.count}}, reach)
		require.NoError(t, err)
		require.True(t, plan.Src.Needed && plan.Dst.Needed && plan.Src.Type == mem.Host && plan.Dst.Type == mem.Host, "%v: %v", typ, plan)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = s.run(ctx, w, rnd)
		cancel()
		require.NoError(t, err, "%v over dm buffers the transport does not reach, staged", typ)
	}
}

// checkDMCollectives runs collectives over DM buffers of every rank's own context on a
// team of n ranks made with cfg, whose transport reports reach, data-checked: each
// rank's buffers all DM (planned unstaged but for what reductions write, and their
// sources where the reach does not list DM in ReduceSrc; the root's request reports
// that plan), then each buffer host or dm at random.
func checkDMCollectives(t *testing.T, rnd *rand.Rand, n int, cfg coll.Config, reach mem.Reach) {
	w := newWorld(t, n, cfg)
	defer w.close()
	for _, typ := range []coll.CollType{coll.Gather, coll.Scatter, coll.Bcast, coll.Allgather, coll.Alltoallv, coll.Allreduce, coll.Reduce} {
		s := randScenario(rnd, n, typ, "", 1+rnd.IntN(200))
		s.inPlace = false
		for r := range n {
			s.srcType[r], s.dstType[r], s.how[r] = mem.DM, mem.DM, 1
		}
		direct := !typ.IsReduction()
		plan, err := asym.Plan(asym.Args{Coll: typ, Root: s.root, Rank: s.root, Size: n, DtypeSize: s.dt.Size(),
			Src: asym.Buf{Type: mem.DM, Count: n * s.count}, Dst: asym.Buf{Type: mem.DM, Count: n * s.count}}, reach)
		if typ == coll.Alltoallv {
			v := asym.Buf{Type: mem.DM, Counts: []int{1, 1, 1}, Displs: []int{0, 1, 2}}
			plan, err = asym.Plan(asym.Args{Coll: typ, Size: n, DtypeSize: s.dt.Size(), Src: v, Dst: v}, reach)
		}
		require.NoError(t, err)
		require.Equal(t, !direct, plan.Any(), "%v with dm buffers: reach %v", typ, reach)
		require.Equal(t, !direct && !reach.ReducesFrom(mem.DM), plan.Src.Needed, "%v's dm source: reach %v", typ, reach)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = s.run(ctx, w, rnd)
		cancel()
		require.NoError(t, err, "%v over dm buffers, %s", typ, map[bool]string{true: "used directly", false: "staged"}[direct])
		got := s.staging[s.root]
		require.Equal(t, plan.Src.Needed, got.Src.Staged, "%v: the root's source staged as planned: %v", typ, got)
		if typ != coll.Alltoallv {
			require.Equal(t, plan.Dst.Needed, got.Dst.Staged, "%v: the root's destination staged as planned: %v", typ, got)
		}
	}
	// Strong asymmetry: every rank draws host or dm for each buffer.
	for _, typ := range []coll.CollType{coll.Gather, coll.Scatter, coll.Allgather, coll.Alltoall, coll.Allreduce} {
		s := randScenario(rnd, n, typ, "", 1+rnd.IntN(200))
		s.inPlace = false
		types := []mem.Type{mem.Host, mem.DM}
		for r := range n {
			s.srcType[r], s.dstType[r], s.how[r] = types[rnd.IntN(2)], types[rnd.IntN(2)], 1
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.run(ctx, w, rnd)
		cancel()
		require.NoError(t, err, "%v with src %v dst %v", typ, s.srcType, s.dstType)
	}
}
