package coll_test

import (
	"math"
	"testing"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/reduce"
)

// Half-precision encodings for the plain-Go reference of the data checks, written
// from the formats' definitions with float64 arithmetic (not the library's bit
// manipulation in package reduce), so that the reference is independent of the
// code it checks. NaN is not encoded: the data generators make none.

// halfBits encodes v, rounding to nearest even, in a binary format with expBits
// exponent bits and manBits mantissa bits (binary16: 5, 10; bfloat16: 8, 7).
func halfBits(v float64, expBits, manBits int) uint16 {
	var sign uint16
	if math.Signbit(v) {
		sign = 1 << (expBits + manBits)
		v = -v
	}
	bias := 1<<(expBits-1) - 1
	maxExp := 1<<expBits - 1
	switch {
	case v == 0:
		return sign
	case math.IsInf(v, 0):
		return sign | uint16(maxExp)<<manBits
	}
	minNormal := math.Ldexp(1, 1-bias)
	if v < minNormal {
		// Subnormal: a multiple of the smallest step; rounding up to 1<<manBits
		// gives the smallest normal's encoding, which is right.
		m := math.RoundToEven(v / math.Ldexp(1, 1-bias-manBits))
		return sign | uint16(m)
	}
	frac, e := math.Frexp(v) // v = frac * 2^e, frac in [0.5, 1)
	m := math.RoundToEven((2*frac - 1) * float64(int(1)<<manBits))
	exp := e - 1 + bias
	if m == float64(int(1)<<manBits) {
		m, exp = 0, exp+1
	}
	if exp >= maxExp {
		return sign | uint16(maxExp)<<manBits // infinity
	}
	return sign | uint16(exp)<<manBits | uint16(m)
}

// halfValue decodes bits of the same format.
func halfValue(b uint16, expBits, manBits int) float64 {
	bias := 1<<(expBits-1) - 1
	maxExp := 1<<expBits - 1
	exp := int(b>>manBits) & maxExp
	man := float64(int(b) & (1<<manBits - 1))
	var v float64
	switch exp {
	case 0:
		v = math.Ldexp(man, 1-bias-manBits)
	case maxExp:
		v = math.Inf(1)
		if man != 0 {
			v = math.NaN()
		}
	default:
		v = math.Ldexp(1+man/float64(int(1)<<manBits), exp-bias)
	}
	if b>>(expBits+manBits)&1 == 1 {
		v = -v
	}
	return v
}

func f16Bits(v float64) uint16   { return halfBits(v, 5, 10) }
func f16Value(b uint16) float64  { return halfValue(b, 5, 10) }
func bf16Bits(v float64) uint16  { return halfBits(v, 8, 7) }
func bf16Value(b uint16) float64 { return halfValue(b, 8, 7) }

// TestHalfReference holds the reference's encodings to the library's conversions on
// every binary16 and bfloat16 value and on random float32 values (ties included):
// where they differ, one of them is wrong, and the data checks would blame the other.
func TestHalfReference(t *testing.T) {
	for b := 0; b < 1<<16; b++ {
		h := uint16(b)
		if v := f16Value(h); !math.IsNaN(v) {
			if lib := float64(reduce.F16ToF32(h)); lib != v {
				t.Fatalf("binary16 %#04x: reference %v, reduce %v", h, v, lib)
			}
			if got := f16Bits(v); got != h {
				t.Fatalf("binary16 %#04x decodes to %v, which encodes to %#04x", h, v, got)
			}
		}
		if v := bf16Value(h); !math.IsNaN(v) {
			if lib := float64(math.Float32frombits(uint32(h) << 16)); lib != v {
				t.Fatalf("bfloat16 %#04x: reference %v, bits say %v", h, v, lib)
			}
			if got := bf16Bits(v); got != h {
				t.Fatalf("bfloat16 %#04x decodes to %v, which encodes to %#04x", h, v, got)
			}
		}
	}
	rnd := testutil.Rand(t)
	for i := 0; i < 200000; i++ {
		f := float32(math.Ldexp(rnd.Float64()*2-1, rnd.IntN(40)-26))
		if i%4 == 0 { // a tie of binary16: half-way between two neighbours
			f = float32(float64(rnd.IntN(2048)+1) + 0.5)
		}
		if want, got := reduce.F32ToF16(f), f16Bits(float64(f)); want != got {
			t.Fatalf("binary16 of %v: reference %#04x, reduce %#04x", f, got, want)
		}
		if want, got := reduce.F32ToBF16(f), bf16Bits(float64(f)); want != got {
			t.Fatalf("bfloat16 of %v: reference %#04x, reduce %#04x", f, got, want)
		}
	}
}
