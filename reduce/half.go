package reduce

import (
	"math"

	"github.com/ibcoll/ibcoll/collective"
)

func halfToF32(out []float32, b []byte, dt collective.DType) {
	for i := range out {
		h := uint16(b[2*i]) | uint16(b[2*i+1])<<8
		if dt == collective.BFloat16 {
			out[i] = math.Float32frombits(uint32(h) << 16)
		} else {
			out[i] = F16ToF32(h)
		}
	}
}

func f32ToHalf(b []byte, in []float32, dt collective.DType) {
	for i, f := range in {
		var h uint16
		if dt == collective.BFloat16 {
			h = F32ToBF16(f)
		} else {
			h = F32ToF16(f)
		}
		b[2*i], b[2*i+1] = byte(h), byte(h>>8)
	}
}

// F16ToF32 converts IEEE 754 binary16 bits to float32 (exactly).
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := int(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0:
		// Subnormal: man × 2^-24. Shift the leading one up to the implicit bit
		// (bit 10); each shift lowers the exponent from 1-15 by one.
		e := 1 - 15
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		man &= 0x3ff
		return math.Float32frombits(sign | uint32(e+127)<<23 | man<<13)
	}
	return math.Float32frombits(sign | uint32(exp-15+127)<<23 | man<<13)
}

// F32ToF16 converts float32 to binary16 bits, rounding to nearest even; a NaN keeps
// its sign and the top bits of its payload, and is made quiet.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			// A NaN keeps its sign and its payload's top bits, and is made quiet, as
			// F16C's VCVTPS2PH and AArch64's FCVTN write it.
			return sign | 0x7e00 | uint16(man>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := man >> shift
		rem := man & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, up to infinity: correct
	}
	return sign | uint16(r)
}

// F32ToBF16 converts float32 to bfloat16 bits, rounding to nearest even.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7f800000 == 0x7f800000 && b&0x7fffff != 0 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
