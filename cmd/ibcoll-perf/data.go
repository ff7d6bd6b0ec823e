package main

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/reduce"
)

// gen makes rank r's input of iteration it: fresh, seeded data that every
// rank (and process) can recompute, so a check needs no extra traffic.
// Floats are small integers (±1 for prod), so sums are exact in any order
// and every algorithm must give the same bytes; where the team is too large for
// that (sumStride), element i is nonzero only where (i+r)%stride == 0.
func gen(seed uint64, it int, r int, elems int, dt coll.DType, op coll.Op, stride int) []byte {
	rng := rand.New(rand.NewPCG(seed^uint64(it)*0x9e3779b97f4a7c15, uint64(r)+1))
	b := make([]byte, elems*dt.Size())
	switch {
	case dt.IsInteger():
		for i := 0; i+8 <= len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
		}
		for i := len(b) &^ 7; i < len(b); i++ {
			b[i] = byte(rng.Uint32())
		}
	default:
		for i := 0; i < elems; i++ {
			v := float32(rng.IntN(9) - 4)
			if op == coll.OpProd {
				v = float32(1 - 2*rng.IntN(2))
			}
			if (i+r)%stride != 0 {
				v = 0
			}
			putFloat(b[i*dt.Size():], dt, v)
		}
	}
	return b
}

// sumStride is gen's stride for a reduction over n ranks. A half-precision sum is
// exact in any order only while every partial sum is an integer the type holds exactly
// (bfloat16 up to 256, float16 up to 2048): with values of magnitude 4 at most, that
// is 64 or 512 contributions. Past that, each element takes nonzero values from one
// rank in stride, at most that many (bfloat16 sums of 1024 ranks differed between
// orders of folding in 15 elements of 4096, and --check failed a correct run).
func sumStride(n int, dt coll.DType, op coll.Op) int {
	most := 0
	switch {
	case op != coll.OpSum && op != coll.OpAvg:
	case dt == coll.BFloat16:
		most = 256 / 4
	case dt == coll.Float16:
		most = 2048 / 4
	}
	if most == 0 || n <= most {
		return 1
	}
	return (n + most - 1) / most
}

func putFloat(b []byte, dt coll.DType, v float32) {
	switch dt {
	case coll.Float16:
		binary.LittleEndian.PutUint16(b, reduce.F32ToF16(v))
	case coll.BFloat16:
		binary.LittleEndian.PutUint16(b, reduce.F32ToBF16(v))
	case coll.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(v))
	case coll.Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(float64(v)))
	}
}

// canary fills what a collective must leave alone (v-layout gaps).
func canary(seed uint64, it int, rank int, b []byte) {
	rng := rand.New(rand.NewPCG(seed+uint64(it), 0xca0a77+uint64(rank)))
	for i := 0; i < len(b); i += 8 {
		v := rng.Uint64() | 0x0101010101010101 // no zero byte
		for k := 0; k < 8 && i+k < len(b); k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
}

// reference computes expected results; the reduced vector is the same on
// every rank of a process, so it is computed once per iteration.
type reference struct {
	seed   uint64
	dt     coll.DType
	op     coll.Op
	stride int // gen's, for the team's size
	mu     sync.Mutex
	memo   map[[3]int][]byte
}

func newReference(seed uint64, dt coll.DType, op coll.Op, n int) *reference {
	return &reference{seed: seed, dt: dt, op: op, stride: sumStride(n, dt, op), memo: map[[3]int][]byte{}}
}

func (ref *reference) input(it, r, elems int) []byte {
	return gen(ref.seed, it, r, elems, ref.dt, ref.op, ref.stride)
}

// block is what rank from sends rank to in a v-collective: its own stream,
// so that a block delivered to the wrong rank never matches by accident.
func (ref *reference) block(it, from, to, elems int) []byte {
	return gen(ref.seed, it, (from+1)<<20|to, elems, ref.dt, ref.op, ref.stride)
}

// reduced returns the reduction over n ranks of their count-element inputs.
func (ref *reference) reduced(it, n, count int) ([]byte, error) {
	key := [3]int{it, n, count}
	ref.mu.Lock()
	defer ref.mu.Unlock()
	if v, ok := ref.memo[key]; ok {
		return v, nil
	}
	if len(ref.memo) > 64 {
		clear(ref.memo)
	}
	// The reference loops, not the kernels the collectives reduce with: a kernel's
	// fault must not agree with itself. One input at a time, so that -np 1024
	// holds two vectors, not 1024.
	acc := ref.input(it, 0, count)
	for r := 1; r < n; r++ {
		if err := reduce.Reference(acc, [][]byte{acc, ref.input(it, r, count)}, ref.dt, ref.op); err != nil {
			return nil, err
		}
	}
	if err := reduce.ReferenceFinalize(acc, ref.dt, ref.op, n); err != nil {
		return nil, err
	}
	ref.memo[key] = acc
	return acc, nil
}

// inputOf is what rank s.rank puts in its input buffer (src, or dst when
// in place) at iteration it, laid out as that buffer is.
func (ref *reference) inputOf(s shape, it int) []byte {
	es := ref.dt.Size()
	me := s.rank
	switch s.c {
	case coll.Gather, coll.Allgather:
		if s.inPlace && s.inPlaceApplies() {
			b := make([]byte, s.dstCount*es)
			canary(ref.seed, it, me, b)
			copy(b[me*s.count*es:], ref.input(it, me, s.count))
			return b
		}
		return ref.input(it, me, s.count)
	case coll.Gatherv, coll.Allgatherv:
		if s.inPlace && s.inPlaceApplies() {
			b := make([]byte, s.dstCount*es)
			canary(ref.seed, it, me, b)
			copy(b[s.displs[me]*es:], ref.input(it, me, s.counts[me]))
			return b
		}
		return ref.input(it, me, s.counts[me])
	case coll.Alltoallv:
		// In place, the receive layout describes the send side too.
		counts, displs, extent := s.sendCounts, s.sendDispls, s.sendExtent
		if s.inPlace {
			counts, displs, extent = s.counts, s.displs, s.vExtent
		}
		b := make([]byte, extent*es)
		canary(ref.seed, it, me, b)
		for p := 0; p < s.n; p++ {
			copy(b[displs[p]*es:], ref.block(it, me, p, counts[p]))
		}
		return b
	case coll.ReduceScatter:
		return ref.input(it, me, s.n*s.count)
	case coll.Scatter, coll.Alltoall:
		// One stream per destination, so that each rank can check its
		// block without generating everyone's.
		b := make([]byte, 0, s.n*s.count*ref.dt.Size())
		for r := 0; r < s.n; r++ {
			b = append(b, ref.block(it, me, r, s.count)...)
		}
		return b
	case coll.Scatterv:
		b := make([]byte, s.vExtent*es)
		canary(ref.seed, it, me, b)
		for r := 0; r < s.n; r++ {
			copy(b[s.displs[r]*es:], ref.block(it, me, r, s.counts[r]))
		}
		return b
	case coll.Bcast:
		if me == s.root {
			return ref.input(it, me, s.count)
		}
		b := make([]byte, s.count*es)
		canary(ref.seed, it, me, b)
		return b
	case coll.Reduce, coll.Allreduce:
		return ref.input(it, me, s.count)
	}
	return nil
}

// expected is what rank s.rank's output buffer must hold after iteration
// it (nil: this rank has no output). Bytes the collective must not touch
// (v-layout gaps) hold the canary the runner filled the buffer with.
func (ref *reference) expected(s shape, it int) ([]byte, error) {
	es := ref.dt.Size()
	me := s.rank
	switch s.c {
	case coll.Gather, coll.Allgather:
		if s.dstCount == 0 && !(s.inPlace && s.inPlaceApplies()) {
			return nil, nil
		}
		b := make([]byte, s.n*s.count*es)
		for r := 0; r < s.n; r++ {
			copy(b[r*s.count*es:], ref.input(it, r, s.count))
		}
		return b, nil
	case coll.Gatherv, coll.Allgatherv:
		if s.c == coll.Gatherv && me != s.root {
			return nil, nil
		}
		b := make([]byte, s.vExtent*es)
		canary(ref.seed, it, me, b)
		for r := 0; r < s.n; r++ {
			copy(b[s.displs[r]*es:], ref.input(it, r, s.counts[r]))
		}
		return b, nil
	case coll.Alltoallv:
		b := make([]byte, s.vExtent*es)
		canary(ref.seed, it, me, b)
		for p := 0; p < s.n; p++ {
			copy(b[s.displs[p]*es:], ref.block(it, p, me, s.counts[p]))
		}
		return b, nil
	case coll.ReduceScatter:
		all, err := ref.reduced(it, s.n, s.n*s.count)
		if err != nil {
			return nil, err
		}
		mine := all[me*s.count*es : (me+1)*s.count*es]
		if !s.inputIsDst() {
			return mine, nil
		}
		// The other ranks' blocks of an in-place buffer keep the input.
		b := ref.input(it, me, s.n*s.count)
		copy(b[me*s.count*es:], mine)
		return b, nil
	case coll.Scatter:
		return ref.block(it, s.root, me, s.count), nil
	case coll.Scatterv:
		return ref.block(it, s.root, me, s.counts[me]), nil
	case coll.Bcast:
		return ref.input(it, s.root, s.count), nil
	case coll.Reduce:
		if me != s.root {
			return nil, nil
		}
		return ref.reduced(it, s.n, s.count)
	case coll.Allreduce:
		return ref.reduced(it, s.n, s.count)
	case coll.Alltoall:
		b := make([]byte, 0, s.n*s.count*es)
		for r := 0; r < s.n; r++ {
			b = append(b, ref.block(it, r, me, s.count)...)
		}
		return b, nil
	}
	return nil, nil
}
