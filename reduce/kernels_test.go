package reduce

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ibcoll/ibcoll/collective"
)

// Every vectorized kernel this CPU runs must give the reference's result for every
// dtype and operator, any length, any misalignment and any number of sources.

// specials are bit patterns that float kernels get wrong first: zeros of both signs,
// infinities, NaNs (quiet, signalling, negative), subnormals, the largest finite
// values and halfway cases of the half-precision roundings.
var specials = map[collective.DType][]uint64{
	collective.Float16:  {0, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe01, 0x0001, 0x83ff, 0x7bff, 0xfbff, 0x3c00, 0x0400},
	collective.BFloat16: {0, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc1, 0x0001, 0x807f, 0x7f7f, 0xff7f, 0x3f80, 0x0080},
	collective.Float32: {0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffc00123, 0x00000001, 0x807fffff,
		0x7f7fffff, 0xff7fffff, 0x3f800000, 0x33800000, 0x33000001, 0x477fefff, 0x477ff000, 0x3f808000, 0x3f818000},
	collective.Float64: {0, 1 << 63, 0x7ff0000000000000, 0xfff0000000000000, 0x7ff8000000000000, 0x7ff0000000000001,
		0xfff8000000000123, 1, 0x800fffffffffffff, 0x7fefffffffffffff, 0x3ff0000000000000},
}

// fill writes random elements of dt into b: random bits, small integers (so sums and
// products stay in range and compare exactly), and specials.
func fill(rng *rand.Rand, b []byte, dt collective.DType) {
	sz := dt.Size()
	for off := 0; off+sz <= len(b); off += sz {
		var v uint64
		switch r := rng.IntN(8); {
		case r < 4:
			v = rng.Uint64()
		case r < 6:
			v = smallValue(rng, dt)
		default:
			if sp := specials[dt]; len(sp) > 0 {
				v = sp[rng.IntN(len(sp))]
			} else {
				v = uint64(rng.IntN(3)) // 0, 1, 2: logical operators' cases
			}
		}
		for i := 0; i < sz; i++ {
			b[off+i] = byte(v >> (8 * i))
		}
	}
}

func smallValue(rng *rand.Rand, dt collective.DType) uint64 {
	x := rng.IntN(9) - 4
	switch dt {
	case collective.Float16:
		return uint64(F32ToF16(float32(x)))
	case collective.BFloat16:
		return uint64(F32ToBF16(float32(x)))
	case collective.Float32:
		return uint64(math.Float32bits(float32(x)))
	case collective.Float64:
		return math.Float64bits(float64(x))
	}
	return uint64(x)
}

// elemEqual compares element i of a and b: bits, except that any NaN equals any NaN
// (which operand's NaN survives a two-NaN operation is not specified).
func elemEqual(a, b []byte, i int, dt collective.DType) bool {
	sz := dt.Size()
	x, y := a[i*sz:(i+1)*sz], b[i*sz:(i+1)*sz]
	if string(x) == string(y) {
		return true
	}
	switch dt {
	case collective.Float16:
		isNaN := func(h uint16) bool { return h&0x7c00 == 0x7c00 && h&0x3ff != 0 }
		return isNaN(binary.LittleEndian.Uint16(x)) && isNaN(binary.LittleEndian.Uint16(y))
	case collective.BFloat16:
		isNaN := func(h uint16) bool { return h&0x7f80 == 0x7f80 && h&0x7f != 0 }
		return isNaN(binary.LittleEndian.Uint16(x)) && isNaN(binary.LittleEndian.Uint16(y))
	case collective.Float32:
		return math.IsNaN(float64(math.Float32frombits(binary.LittleEndian.Uint32(x)))) &&
			math.IsNaN(float64(math.Float32frombits(binary.LittleEndian.Uint32(y))))
	case collective.Float64:
		return math.IsNaN(math.Float64frombits(binary.LittleEndian.Uint64(x))) &&
			math.IsNaN(math.Float64frombits(binary.LittleEndian.Uint64(y)))
	}
	return false
}

// checkKernels runs one case on every level and compares with the reference. n is
// the element count, k the sources, mis the misalignment of each buffer in bytes.
func checkKernels(t *testing.T, seed uint64, dt collective.DType, op collective.Op, n, k int, mis []int, inPlace bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	sz := dt.Size()
	nb := n * sz
	// Every buffer lives in its own allocation at its own misalignment.
	bufs := make([][]byte, k+1)
	for i := range bufs {
		raw := make([]byte, nb+64)
		o := mis[i%len(mis)] % 64
		bufs[i] = raw[o : o+nb : o+nb]
		fill(rng, bufs[i], dt)
	}
	orig := make([][]byte, len(bufs))
	for i, b := range bufs {
		orig[i] = append([]byte(nil), b...)
	}
	srcsOf := func(bs [][]byte) (dst []byte, srcs [][]byte) {
		if inPlace {
			return bs[1], bs[1 : k+1]
		}
		return bs[0], bs[1 : k+1]
	}
	want := make([][]byte, len(bufs))
	for i := range orig {
		want[i] = append([]byte(nil), orig[i]...)
	}
	wd, ws := srcsOf(want)
	refInto(wd, ws, dt, op)
	for _, lvl := range levels() {
		if lvl == levelGo {
			continue
		}
		got := bufs
		for i := range got {
			copy(got[i], orig[i])
		}
		gd, gs := srcsOf(got)
		if !native(lvl, gd, gs, dt, op) {
			if lvl == level && k <= maxSources {
				// The selected level must cover every dtype and operator; a lower one
				// may lack a conversion (float16 below F16C).
				t.Errorf("level %s has no kernel for %v %v", levelNames[lvl], dt, op)
			}
			continue
		}
		for i := 0; i < n; i++ {
			if !elemEqual(gd, wd, i, dt) {
				var ins []string
				for _, s := range orig[1 : k+1] {
					ins = append(ins, fmt.Sprintf("%x", s[i*sz:(i+1)*sz]))
				}
				t.Fatalf("seed %d: level %s, %v %v, n=%d k=%d mis=%v inPlace=%v: element %d of %v = %x, reference %x",
					seed, levelNames[lvl], dt, op, n, k, mis, inPlace, i, ins, gd[i*sz:(i+1)*sz], wd[i*sz:(i+1)*sz])
			}
		}
		for i := 1; i <= k; i++ {
			if !(inPlace && i == 1) && string(got[i]) != string(orig[i]) {
				t.Fatalf("seed %d: level %s, %v %v: source %d was written", seed, levelNames[lvl], dt, op, i-1)
			}
		}
	}
}

func validOps(dt collective.DType) []collective.Op {
	var out []collective.Op
	for _, op := range collective.Ops() {
		if collective.CheckOp(op, dt) == nil {
			out = append(out, op)
		}
	}
	return out
}

// FuzzKernels: go test -fuzz FuzzKernels ./reduce. The seed corpus, which plain go
// test runs, covers every dtype and operator.
func FuzzKernels(f *testing.F) {
	dts := collective.DTypes()
	i := 0
	for _, dt := range dts {
		for _, op := range validOps(dt) {
			i++
			f.Add(uint64(i), uint8(dt), uint8(op), uint16(1000+i*7), uint8(2+i%4), uint8(i), uint8(3*i), uint8(5*i), false)
			f.Add(uint64(i)<<8, uint8(dt), uint8(op), uint16(i%37), uint8(2+i%7), uint8(i+1), uint8(0), uint8(2*i), true)
		}
	}
	f.Fuzz(func(t *testing.T, seed uint64, dti, opi uint8, n uint16, k, m0, m1, m2 uint8, inPlace bool) {
		dt := dts[int(dti)%len(dts)]
		ops := validOps(dt)
		op := ops[int(opi)%len(ops)]
		kk := 2 + int(k)%(maxSources+1) // one beyond maxSources: the reference path
		checkKernels(t, seed, dt, op, int(n)%9000, kk, []int{int(m0), int(m1), int(m2)}, inPlace)
	})
}

// A reduction allocates nothing: transports call it on every received block.
func TestIntoAllocs(t *testing.T) {
	for _, n := range []int{64, 64 << 10} {
		dst, a, c := make([]byte, n), make([]byte, n), make([]byte, n)
		srcs := [][]byte{a, c}
		allocs := testing.AllocsPerRun(20, func() {
			_ = Into(dst, a, collective.Float32, collective.OpSum)
			_ = IntoMany(dst, srcs, collective.BFloat16, collective.OpMax)
			_ = Finalize(dst, collective.Float32, collective.OpAvg, 3)
		})
		if allocs != 0 {
			t.Errorf("%d bytes: %v allocations per reduction, want 0", n, allocs)
		}
	}
}

// IntoMany through the public path (thresholds, grouping beyond one native call's
// sources, errors) against a left fold of Into; half precision, which rounds once,
// against the reference.
func TestIntoManyPublic(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, dt := range collective.DTypes() {
		for _, op := range validOps(dt) {
			for _, k := range []int{1, 2, 3, maxSources, maxSources + 1, 2*maxSources + 3} {
				n := (1 + rng.IntN(3000)) * dt.Size()
				srcs := make([][]byte, k)
				for i := range srcs {
					srcs[i] = make([]byte, n)
					fill(rng, srcs[i], dt)
				}
				got := make([]byte, n)
				if err := IntoMany(got, srcs, dt, op); err != nil {
					t.Fatal(err)
				}
				want := append([]byte(nil), srcs[0]...)
				if dt == collective.Float16 || dt == collective.BFloat16 {
					if k > 1 {
						refInto(want, srcs, dt, op)
					}
				} else {
					for _, s := range srcs[1:] {
						if err := Into(want, s, dt, op); err != nil {
							t.Fatal(err)
						}
					}
				}
				if i := firstDiff(got, want, dt); i >= 0 {
					t.Fatalf("seed %d: %v %v k=%d n=%d: element %d is %x, want %x", seed, dt, op, k, n, i,
						got[i*dt.Size():(i+1)*dt.Size()], want[i*dt.Size():(i+1)*dt.Size()])
				}
			}
		}
	}
}

func TestIntoManyErrors(t *testing.T) {
	buf := make([]byte, 64)
	a, c := make([]byte, 64), make([]byte, 64)
	for _, tc := range []struct {
		name string
		dst  []byte
		srcs [][]byte
		dt   collective.DType
		op   collective.Op
		want string
	}{
		{"no sources", buf, nil, collective.Int32, collective.OpSum, "srcs is empty"},
		{"short source", buf, [][]byte{a, c[:60]}, collective.Int32, collective.OpSum, "srcs[1] has 60 bytes"},
		{"ragged dst", buf[:63], [][]byte{a[:63]}, collective.Int32, collective.OpSum, "dst has 63 bytes"},
		{"dst is a later source", buf, [][]byte{a, buf}, collective.Int32, collective.OpSum, "srcs[1] overlaps dst"},
		{"partial overlap", buf[:32], [][]byte{buf[8:40]}, collective.Int32, collective.OpSum, "srcs[0] partly overlaps dst"},
		{"bad op", buf, [][]byte{a}, collective.Int32, collective.Op(99), "reduce: IntoMany: op is not a valid operator (99)"},
		{"bad dt", buf, [][]byte{a}, collective.DType(0), collective.OpSum, "reduce: IntoMany: dt is not a valid datatype (0)"},
		{"bitwise float", buf, [][]byte{a}, collective.Float32, collective.OpBxor, "bitwise"},
	} {
		err := IntoMany(tc.dst, tc.srcs, tc.dt, tc.op)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, collective.ErrInvalid) {
			t.Errorf("%s: got %v, want an invalid-argument error containing %q", tc.name, err, tc.want)
		}
	}
	if err := Into(buf[:32], buf[4:36], collective.Int32, collective.OpSum); err == nil || !strings.Contains(err.Error(), "partly overlaps") {
		t.Errorf("Into with overlapping buffers: got %v", err)
	}
	if err := Into(buf, buf, collective.Int32, collective.OpSum); err != nil {
		t.Errorf("Into(x, x): %v", err)
	}
	// The errors name this package's arguments, not a collective's Args.
	if err := Into(buf, a, collective.DType(0), collective.OpSum); err == nil || !strings.Contains(err.Error(), "reduce: Into: dt is not") {
		t.Errorf("Into with dt 0: got %v", err)
	}
	if err := Finalize(buf, collective.Int32, collective.Op(0), 2); err == nil || !strings.Contains(err.Error(), "reduce: Finalize: op is not") {
		t.Errorf("Finalize with op 0: got %v", err)
	}
	// An avg over no ranks is an argument error, not a division by zero.
	for _, dt := range []collective.DType{collective.Int32, collective.Float64} {
		for _, n := range []int{0, -1} {
			if err := Finalize(buf, dt, collective.OpAvg, n); err == nil || !strings.Contains(err.Error(), "reduce: Finalize: n is") || !errors.Is(err, collective.ErrInvalid) {
				t.Errorf("Finalize %v avg over %d ranks: got %v", dt, n, err)
			}
		}
	}
}

// Finalize's native division against the reference's.
func TestFinalizeKernels(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	for _, dt := range []collective.DType{collective.Float16, collective.BFloat16, collective.Float32, collective.Float64} {
		for _, lvl := range levels() {
			n := 1 + rng.IntN(5000)
			b := make([]byte, n*dt.Size())
			fill(rng, b, dt)
			want := append([]byte(nil), b...)
			refScale(want, dt, 7)
			if !nativeScale(lvl, b, dt, 7) {
				refScale(b, dt, 7)
			}
			for i := 0; i < n; i++ {
				if !elemEqual(b, want, i, dt) {
					t.Fatalf("seed %d: level %s %v: element %d is %x, want %x", seed, levelNames[lvl], dt, i, b[i*dt.Size():(i+1)*dt.Size()], want[i*dt.Size():(i+1)*dt.Size()])
				}
			}
		}
	}
}

// Pairs of half-precision values whose sum or product can round in the subnormal
// range (exponents up to 8, mantissas in steps, both signs), through every level against the reference: the AVX512_BF16
// level rounds with an instruction that reads subnormals as zero and must take its
// integer rounding for those vectors.
func TestHalfTinyPairs(t *testing.T) {
	for _, dt := range []collective.DType{collective.BFloat16, collective.Float16} {
		// Mantissas in steps (the pairs' count is that of the values squared, and the
		// race detector slows the reference), the largest included.
		manBits, step := uint16(7), uint16(3)
		if dt == collective.Float16 {
			manBits, step = 10, 23
		}
		var mans []uint16
		for m := uint16(0); m < 1<<manBits-1; m += step {
			mans = append(mans, m)
		}
		mans = append(mans, 1<<manBits-1)
		var vals []uint16
		for e := uint16(0); e <= 8; e++ {
			for _, m := range mans {
				for _, sign := range []uint16{0, 0x8000} {
					vals = append(vals, sign|e<<manBits|m)
				}
			}
		}
		n := len(vals) * len(vals)
		a, b := make([]byte, 2*n), make([]byte, 2*n)
		for i, x := range vals {
			for j, y := range vals {
				binary.LittleEndian.PutUint16(a[2*(i*len(vals)+j):], x)
				binary.LittleEndian.PutUint16(b[2*(i*len(vals)+j):], y)
			}
		}
		for _, op := range []collective.Op{collective.OpSum, collective.OpProd, collective.OpMin, collective.OpMax} {
			want := make([]byte, 2*n)
			refInto(want, [][]byte{a, b}, dt, op)
			for _, lvl := range levels() {
				got := make([]byte, 2*n)
				if !native(lvl, got, [][]byte{a, b}, dt, op) {
					continue
				}
				for i := 0; i < n; i++ {
					if !elemEqual(got, want, i, dt) {
						t.Fatalf("level %s %v %v: %04x op %04x = %04x, reference %04x", levelNames[lvl], dt, op,
							binary.LittleEndian.Uint16(a[2*i:]), binary.LittleEndian.Uint16(b[2*i:]),
							binary.LittleEndian.Uint16(got[2*i:]), binary.LittleEndian.Uint16(want[2*i:]))
					}
				}
			}
		}
	}
}

// The kernel tests compare every native level with the reference: with cgo on amd64
// and arm64 there must be one, or they would check nothing.
func TestNativeLevels(t *testing.T) {
	var names []string
	for _, l := range levels() {
		names = append(names, levelNames[l])
	}
	t.Logf("levels %v, running %s", names, levelNames[level])
	if got := Kernels(); got != names[len(names)-1] {
		t.Errorf("Kernels() = %q, want the best level this CPU runs, %q", got, names[len(names)-1])
	}
	if minNative > 0 && len(levels()) < 2 {
		t.Fatalf("cgo kernels are built but no native level runs: %v", names)
	}
}

// halfPatterns is how many float16 bit patterns there are.
const halfPatterns = 1 << 16

// everyHalf returns every float16 bit pattern in order and the values to pair each
// with: the specials and 12 random patterns.
func everyHalf(rng *rand.Rand) (x []byte, ys []uint64) {
	ys = append([]uint64(nil), specials[collective.Float16]...)
	for i := 0; i < 12; i++ {
		ys = append(ys, uint64(rng.Uint32()&0xffff))
	}
	x = make([]byte, 2*halfPatterns)
	for i := 0; i < halfPatterns; i++ {
		binary.LittleEndian.PutUint16(x[2*i:], uint16(i))
	}
	return x, ys
}

// TestF16MinMaxEveryValue runs every float16 bit pattern as the first source against
// each special and a sample of random patterns as the others, min and max, two and
// three sources, into a fresh dst and in place, on every level. The result must be the reference's bit for bit,
// NaNs included: min and max pick an operand, so the one a NaN comes from is
// determined (the running value), and the avx512 level picks without converting.
func TestF16MinMaxEveryValue(t *testing.T) {
	const n = halfPatterns
	rng := rand.New(rand.NewPCG(0xf16, 0xa11))
	x, ys := everyHalf(rng)
	y, z := make([]byte, 2*n), make([]byte, 2*n)
	fill(rng, z, collective.Float16)
	checked := 0
	for _, yv := range ys {
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(y[2*i:], uint16(yv))
		}
		for _, op := range []collective.Op{collective.OpMin, collective.OpMax} {
			for _, srcs := range [][][]byte{{x, y}, {x, y, z}} {
				want := make([]byte, 2*n)
				refInto(want, srcs, collective.Float16, op)
				for _, lvl := range levels() {
					for _, inPlace := range []bool{false, true} {
						got := make([]byte, 2*n)
						in := srcs
						if inPlace { // dst is the first source: the kernel stores only what it takes
							copy(got, x)
							in = append([][]byte{got}, srcs[1:]...)
						}
						if !native(lvl, got, in, collective.Float16, op) {
							continue
						}
						checked++
						if string(got) == string(want) {
							continue
						}
						for i := 0; i < n; i++ {
							if g, w := binary.LittleEndian.Uint16(got[2*i:]), binary.LittleEndian.Uint16(want[2*i:]); g != w {
								t.Fatalf("level %s %v of %d sources (in place %v): %04x with %04x (third %04x) = %04x, reference %04x",
									levelNames[lvl], op, len(srcs), inPlace, i, yv, binary.LittleEndian.Uint16(z[2*i:]), g, w)
							}
						}
					}
				}
			}
		}
	}
	if minNative > 0 && checked == 0 {
		t.Fatal("no native level has a float16 min or max kernel: nothing was checked")
	}
}

// TestF16NaNBits runs every float16 bit pattern as the first source against each
// special and a sample of random patterns, sum and product, two and three sources (the
// third not a NaN), on every level. Where at most one operand is a NaN the result must be
// the reference's bit for bit: a NaN source comes out quiet with its sign and payload,
// as the conversions write it, and inf-inf or 0·inf as this CPU's arithmetic makes it
// (the reference's float32 runs on the same CPU). Where two are NaNs, which one's
// payload survives is not specified, but the result must be a NaN.
func TestF16NaNBits(t *testing.T) {
	const n = halfPatterns
	rng := rand.New(rand.NewPCG(0xf16, 0x0a1))
	isNaN := func(h uint16) bool { return h&0x7fff > 0x7c00 }
	x, ys := everyHalf(rng)
	y, z := make([]byte, 2*n), make([]byte, 2*n)
	for i := 0; i < n; i++ {
		h := uint16(rng.Uint32())
		for isNaN(h) {
			h = uint16(rng.Uint32())
		}
		binary.LittleEndian.PutUint16(z[2*i:], h)
	}
	checked, nans := 0, 0
	for _, yv := range ys {
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(y[2*i:], uint16(yv))
		}
		for _, op := range []collective.Op{collective.OpSum, collective.OpProd} {
			for _, srcs := range [][][]byte{{x, y}, {x, y, z}} {
				want := make([]byte, 2*n)
				refInto(want, srcs, collective.Float16, op)
				for _, lvl := range levels() {
					got := make([]byte, 2*n)
					if !native(lvl, got, srcs, collective.Float16, op) {
						continue
					}
					checked++
					for i := 0; i < n; i++ {
						g, w := binary.LittleEndian.Uint16(got[2*i:]), binary.LittleEndian.Uint16(want[2*i:])
						if isNaN(w) {
							nans++
						}
						if g == w || isNaN(uint16(i)) && isNaN(uint16(yv)) && isNaN(g) && isNaN(w) {
							continue
						}
						t.Fatalf("level %s %v of %d sources: %04x with %04x (third %04x) = %04x, reference %04x",
							levelNames[lvl], op, len(srcs), i, yv, binary.LittleEndian.Uint16(z[2*i:]), g, w)
					}
				}
			}
		}
	}
	if minNative > 0 && checked == 0 {
		t.Fatal("no native level has a float16 sum or product kernel: nothing was checked")
	}
	if checked > 0 && nans == 0 {
		t.Fatal("no result was a NaN: the NaN rule went unchecked")
	}
}

// firstDiff is the first element of dt where got and want differ (elemEqual), -1 if none.
func firstDiff(got, want []byte, dt collective.DType) int {
	for i := 0; i < len(got)/dt.Size(); i++ {
		if !elemEqual(got, want, i, dt) {
			return i
		}
	}
	return -1
}
