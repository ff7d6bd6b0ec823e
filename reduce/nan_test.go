package reduce

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ibcoll/ibcoll/collective"
)

// TestF32ToF16NaNs holds the reference's NaN rule to fixed values, in every build (a
// build without native kernels checks nothing else of it): a float32 NaN becomes a
// quiet float16 NaN with its sign and its payload's top nine bits, so every float16
// NaN survives a round trip with its quiet bit set; infinities stay infinities.
func TestF32ToF16NaNs(t *testing.T) {
	for h := uint32(0); h < 1<<16; h++ {
		if h&0x7fff <= 0x7c00 {
			continue
		}
		if got, want := F32ToF16(F16ToF32(uint16(h))), uint16(h)|0x200; got != want {
			t.Fatalf("F32ToF16(F16ToF32(%04x)) = %04x, want %04x", h, got, want)
		}
	}
	for _, c := range []struct {
		f32  uint32
		want uint16
	}{
		{0x7fc00000, 0x7e00}, {0xffc00000, 0xfe00}, // the quiet NaNs of x86's and Arm's arithmetic
		{0x7f800001, 0x7e00}, // signalling, payload below the kept bits: quiet, payload lost
		{0x7fbfe000, 0x7fff}, // signalling, every kept bit set
		{0xff802000, 0xfe01}, // the lowest kept payload bit, negative
		{0x7fffffff, 0x7fff},
		{0x7f800000, 0x7c00}, {0xff800000, 0xfc00},
	} {
		if got := F32ToF16(math.Float32frombits(c.f32)); got != c.want {
			t.Errorf("F32ToF16(%08x) = %04x, want %04x", c.f32, got, c.want)
		}
	}
}

// nanHeavy draws a half (bfloat16 if bf) that is a NaN four times in ten (any
// payload, signalling or quiet, small payloads included), an infinity, a zero, any
// pattern, or a small integer.
func nanHeavy(rng *rand.Rand, bf bool) uint16 {
	expMask, manMask := uint16(0x7c00), uint16(0x3ff)
	if bf {
		expMask, manMask = 0x7f80, 0x7f
	}
	sign := uint16(rng.IntN(2)) << 15
	switch r := rng.IntN(10); {
	case r < 4:
		m := uint16(rng.Uint32()) & manMask
		if rng.IntN(3) == 0 {
			m = uint16(1+rng.IntN(7)) & manMask
		}
		return sign | expMask | max(m, 1)
	case r < 5:
		return sign | expMask
	case r < 6:
		return sign
	case r < 8:
		return uint16(rng.Uint32())
	}
	if bf {
		return F32ToBF16(float32(rng.IntN(9) - 4))
	}
	return F32ToF16(float32(rng.IntN(9) - 4))
}

func halfF32(h uint16, bf bool) float32 {
	if bf {
		return math.Float32frombits(uint32(h) << 16)
	}
	return F16ToF32(h)
}

// twoNaNs reports whether the reference's float32 fold of lane i meets a sum or product
// of two NaNs, where which one's payload and sign survive is not specified.
func twoNaNs(srcs [][]byte, i int, op collective.Op, bf bool) bool {
	if op != collective.OpSum && op != collective.OpProd && op != collective.OpAvg {
		return false
	}
	isNaN := func(f float32) bool { return f != f }
	x := halfF32(binary.LittleEndian.Uint16(srcs[0][2*i:]), bf)
	for _, s := range srcs[1:] {
		y := halfF32(binary.LittleEndian.Uint16(s[2*i:]), bf)
		if isNaN(x) && isNaN(y) {
			return true
		}
		if op == collective.OpProd {
			x *= y
		} else {
			x += y
		}
	}
	return false
}

// TestHalfNaNsEveryLevel runs every native level against the reference on NaN-heavy
// float16 and bfloat16 data: every operator, 2 to 8 sources, into a fresh dst and in
// place, lengths with and without a vector tail, misaligned sources; and avg's final
// scaling. Results must be the reference's bit for bit,
// NaNs included, except where two NaNs meet in a sum or product.
func TestHalfNaNsEveryLevel(t *testing.T) {
	if minNative == 0 {
		t.Skip("no native kernels in this build: the reference is all there is (TestF32ToF16NaNs checks it)")
	}
	rng := rand.New(rand.NewPCG(7, 11))
	ops := []collective.Op{collective.OpSum, collective.OpProd, collective.OpMin, collective.OpMax, collective.OpAvg,
		collective.OpLand, collective.OpLor, collective.OpLxor}
	checked := 0
	mismatch := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format, args...)
	}
	for _, dt := range []collective.DType{collective.Float16, collective.BFloat16} {
		bf := dt == collective.BFloat16
		for iter := 0; iter < 6; iter++ {
			for k := 2; k <= maxSources; k++ {
				n := []int{1, 7, 31, 33, 257, 1029, 2600, 5000}[rng.IntN(8)]
				srcs := make([][]byte, k)
				for j := range srcs {
					raw := make([]byte, 2*n+64)
					o := 2 * rng.IntN(16)
					srcs[j] = raw[o : o+2*n : o+2*n]
					for i := 0; i < n; i++ {
						binary.LittleEndian.PutUint16(srcs[j][2*i:], nanHeavy(rng, bf))
					}
				}
				for _, op := range ops {
					want := make([]byte, 2*n)
					refInto(want, srcs, dt, op)
					for _, lvl := range levels() {
						for _, inPlace := range []bool{false, true} {
							got := make([]byte, 2*n)
							in := srcs
							if inPlace {
								copy(got, srcs[0])
								in = append([][]byte{got}, srcs[1:]...)
							}
							if !native(lvl, got, in, dt, op) {
								continue
							}
							checked++
							for i := 0; i < n; i++ {
								g, w := binary.LittleEndian.Uint16(got[2*i:]), binary.LittleEndian.Uint16(want[2*i:])
								if g == w || twoNaNs(srcs, i, op, bf) && halfF32(g, bf) != halfF32(g, bf) && halfF32(w, bf) != halfF32(w, bf) {
									continue
								}
								var ins []uint16
								for _, s := range srcs {
									ins = append(ins, binary.LittleEndian.Uint16(s[2*i:]))
								}
								mismatch("level %s %v %v of %d sources (in place %v), element %d: %04x = %04x, reference %04x",
									levelNames[lvl], dt, op, k, inPlace, i, ins, g, w)
							}
						}
					}
				}
			}
		}
		// avg's final scaling on raw NaN-heavy data.
		n := 4099
		b := make([]byte, 2*n)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(b[2*i:], nanHeavy(rng, bf))
		}
		for _, c := range []int{3, 7, 8} {
			want := append([]byte(nil), b...)
			refScale(want, dt, c)
			for _, lvl := range levels() {
				got := append([]byte(nil), b...)
				if !nativeScale(lvl, got, dt, c) {
					continue
				}
				checked++
				for i := 0; i < n; i++ {
					if g, w := binary.LittleEndian.Uint16(got[2*i:]), binary.LittleEndian.Uint16(want[2*i:]); g != w {
						mismatch("level %s %v scaled by 1/%d, element %d: %04x gives %04x, reference %04x",
							levelNames[lvl], dt, c, i, binary.LittleEndian.Uint16(b[2*i:]), g, w)
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no native level has a half-precision kernel: nothing was checked")
	}
	t.Logf("%d kernel runs checked", checked)
}
