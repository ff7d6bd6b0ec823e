package coll_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/tlmlx5"
)

func randScenario(rnd *rand.Rand, n int, typ coll.CollType, alg string, count int) *scenario {
	s := &scenario{typ: typ, alg: alg, count: count, reps: 1}
	if typ.IsRooted() {
		s.root = []int{0, n - 1, n / 2}[rnd.IntN(3)]
	}
	s.dt = coll.DTypes()[rnd.IntN(len(coll.DTypes()))]
	if typ.IsReduction() {
		ops := coll.Ops()
		for {
			s.op = ops[rnd.IntN(len(ops))]
			if coll.CheckOp(s.op, s.dt) == nil {
				break
			}
		}
	}
	s.inPlace = rnd.IntN(3) == 0
	s.srcType, s.dstType, s.how = make([]mem.Type, n), make([]mem.Type, n), make([]int, n)
	types := scenarioTypes()
	for r := 0; r < n; r++ {
		s.srcType[r] = types[rnd.IntN(len(types))]
		s.dstType[r] = types[rnd.IntN(len(types))]
		s.how[r] = rnd.IntN(3)
	}
	return s
}

// scenarioTypes are the memory types scenarios draw from: host and sim everywhere, and
// CUDA device and managed memory where this machine can allocate them.
func scenarioTypes() []mem.Type {
	if mem.CUDAAvailable() {
		return []mem.Type{mem.Host, mem.Sim, mem.CUDA, mem.CUDAManaged}
	}
	if testutil.Required("cuda") {
		panic("cuda required (IBCOLL_REQUIRE) but no CUDA device is available")
	}
	return []mem.Type{mem.Host, mem.Sim}
}

// TestScenarioQuick runs every collective and algorithm once on a small team: a few
// seconds, for quick iteration and for the rxe VM.
func TestScenarioQuick(t *testing.T) {
	rnd := testutil.Rand(t)
	for _, n := range []int{1, 2, 3, 4} {
		// Both outcome modes: odd sizes all-or-nothing, even ones the default.
		w := newWorld(t, n, coll.Config{Timeout: 20 * time.Second, AllOrNothing: n%2 == 1})
		ran := 0
		for _, typ := range coll.CollTypes() {
			for _, alg := range tlmlx5.Algorithms(typ) {
				if tlmlx5.Fits(typ, alg, n) != nil {
					continue
				}
				for _, count := range []int{0, 1, 7, 100} {
					s := randScenario(rnd, n, typ, alg, count)
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					err := s.run(ctx, w, rnd)
					cancel()
					if err != nil {
						t.Fatalf("n=%d: %v", n, err)
					}
					ran++
				}
			}
		}
		t.Logf("n=%d: %d scenarios", n, ran)
	}
}

// matrixLevel is $IBCOLL_MATRIX: 0 with -short (small teams), 1 by default, 2 for
// more counts per algorithm.
func matrixLevel() int {
	if v, err := strconv.Atoi(os.Getenv("IBCOLL_MATRIX")); err == nil {
		return v
	}
	if testing.Short() {
		return 0
	}
	return 1
}

// TestScenarioMatrix: every collective and algorithm on teams of 1, 2, 3, 8, 16 and 33
// goroutine ranks over soft0, roots first, last and middle, random datatypes and ops
// (every one over the run), counts 0, 1, odd and larger, src and dst memory types drawn
// per rank from {host, sim} (and cuda, cuda-managed on a GPU machine), in place or not, and persistent requests posted again with
// fresh data, with Config.AllOrNothing on for every other team size; then a few ≥ 1
// MiB cases and persistent requests posted 100 times. One
// team per size runs every scenario, so it also proves that a team stays usable.
func TestScenarioMatrix(t *testing.T) {
	watchdog(t, 15*time.Minute)
	rnd := testutil.Rand(t)
	level := matrixLevel()
	sizes := []int{1, 2, 3, 8, 16, 33}
	if level == 0 {
		sizes = []int{1, 2, 3, 5}
	}
	total := 0
	seenDT, seenOp := map[coll.DType]bool{}, map[coll.Op]bool{}
	for i, n := range sizes {
		// Both outcome modes, alternating over the team sizes.
		w := newWorld(t, n, coll.Config{Timeout: 60 * time.Second, AllOrNothing: i%2 == 1})
		ran := 0
		counts := []int{0, 1, 1 + 2*rnd.IntN(50), 500 + rnd.IntN(3000)}
		if level >= 2 {
			counts = append(counts, 2+rnd.IntN(20), 10000+rnd.IntN(20000))
		}
		if n >= 16 && level < 2 {
			counts = []int{0, 1 + 2*rnd.IntN(50), 300 + rnd.IntN(1000)}
		}
		for _, typ := range coll.CollTypes() {
			for _, alg := range append(tlmlx5.Algorithms(typ), "") {
				if tlmlx5.Fits(typ, alg, n) != nil {
					continue
				}
				if alg == "knomial" {
					alg = []string{"knomial", "knomial:2", "knomial:3"}[rnd.IntN(3)]
				}
				for _, count := range counts {
					s := randScenario(rnd, n, typ, alg, count)
					if rnd.IntN(6) == 0 {
						s.reps = 2 + rnd.IntN(3)
					}
					seenDT[s.dt] = true
					seenOp[s.op] = true
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					err := s.run(ctx, w, rnd)
					cancel()
					if err != nil {
						t.Fatalf("n=%d: %v", n, err)
					}
					ran++
				}
			}
		}
		if n == 8 || (level == 0 && n == 5) {
			// Large: 1 MiB per rank and block.
			for _, c := range []struct {
				typ coll.CollType
				alg string
			}{{coll.Gather, "linear"}, {coll.Scatter, "knomial:2"}, {coll.Bcast, "chain"}, {coll.Allreduce, "ring"},
				{coll.Allgather, "ring"}, {coll.Bcast, "sag"}, {coll.Reduce, "srg"}, {coll.ReduceScatter, "ring"},
				{coll.ReduceScatter, "rh"}, {coll.Allgatherv, "ring"}, {coll.Alltoallv, "pairwise"}} {
				if tlmlx5.Fits(c.typ, c.alg, n) != nil {
					continue
				}
				s := randScenario(rnd, n, c.typ, c.alg, 1<<20)
				s.dt, s.op = coll.Uint8, 0
				if c.typ.IsReduction() {
					s.dt, s.op, s.count = coll.Float32, coll.OpSum, (1<<20)/4
				}
				if err := s.run(context.Background(), w, rnd); err != nil {
					t.Fatalf("n=%d large: %v", n, err)
				}
				ran++
			}
			// Persistent, posted 100 times with fresh data each time.
			for _, typ := range []coll.CollType{coll.Gather, coll.Scatter, coll.Allreduce, coll.Bcast,
				coll.ReduceScatter, coll.Allgatherv, coll.Alltoallv} {
				s := randScenario(rnd, n, typ, "", 1+rnd.IntN(200))
				s.reps = 100
				if level == 0 {
					s.reps = 20
				}
				if err := s.run(context.Background(), w, rnd); err != nil {
					t.Fatalf("n=%d persistent: %v", n, err)
				}
				ran++
			}
		}
		w.close()
		t.Logf("n=%d: %d scenarios", n, ran)
		total += ran
	}
	t.Logf("scenario matrix: %d scenarios, %d datatypes and %d ops covered", total, len(seenDT), len(seenOp)-1)
}

// TestScenarioPipelined runs every collective and algorithm with every rank's source
// in sim memory and every staged source copied in beside the wire (the threshold
// lowered to one byte), so that a transport operation that reads its source before the
// copy-in reached it, or an algorithm that relies on a local copy having run first,
// shows as wrong data.
func TestScenarioPipelined(t *testing.T) {
	defer coll.SetPipelineMin(1)()
	rnd := testutil.Rand(t)
	for _, n := range []int{2, 3, 5, 8} {
		w := newWorld(t, n, coll.Config{Timeout: 30 * time.Second})
		ran := 0
		for _, typ := range coll.CollTypes() {
			for _, alg := range tlmlx5.Algorithms(typ) {
				if tlmlx5.Fits(typ, alg, n) != nil {
					continue
				}
				for _, count := range []int{1, 77, 5000} {
					s := randScenario(rnd, n, typ, alg, count)
					for r := range n {
						s.srcType[r] = mem.Sim
					}
					if rnd.IntN(3) == 0 {
						s.reps = 3
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					err := s.run(ctx, w, rnd)
					cancel()
					if err != nil {
						t.Fatalf("n=%d: %v", n, err)
					}
					ran++
				}
			}
		}
		t.Logf("n=%d: %d scenarios", n, ran)
	}
}

// TestScenarioPipelinedLarge: sources large enough to be copied in beside the wire in
// several chunks (2 MiB and more of sim memory, chunks of 1 MiB), so that the
// transport sends a block's first landing pieces while its later chunks are still
// being copied in, and a root copies its own block piece by piece behind them. Every
// collective that moves blocks, every algorithm, 3 ranks, data checked; the staging
// report must say that the source went beside the wire in more than one chunk.
func TestScenarioPipelinedLarge(t *testing.T) {
	rnd := testutil.Rand(t)
	const n = 3
	w := newWorld(t, n, coll.Config{Timeout: 30 * time.Second})
	ran := 0
	for _, typ := range []coll.CollType{coll.Gather, coll.Scatter, coll.Bcast, coll.Allgather, coll.Alltoall} {
		for _, alg := range tlmlx5.Algorithms(typ) {
			if tlmlx5.Fits(typ, alg, n) != nil {
				continue
			}
			s := randScenario(rnd, n, typ, alg, 1)
			s.count = (2<<20 + 4099) / s.dt.Size()
			s.inPlace = false
			for r := range n {
				s.srcType[r], s.dstType[r], s.how[r] = mem.Sim, mem.Host, 1
			}
			if rnd.IntN(2) == 0 {
				s.reps = 2
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := s.run(ctx, w, rnd)
			cancel()
			require.NoError(t, err, "%v %s", typ, alg)
			beside := false
			for _, st := range s.staging {
				beside = beside || st.Src.Beside && st.Src.Chunk < st.Src.Bytes
			}
			require.True(t, beside, "%v %s: no source was copied in beside the wire in chunks: %+v", typ, alg, s.staging)
			ran++
		}
	}
	t.Logf("%d scenarios", ran)
}
