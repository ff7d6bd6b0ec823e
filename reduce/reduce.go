package reduce

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/ibcoll/ibcoll/collective"
)

type integer interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

type float interface{ ~float32 | ~float64 }

// chunk is how many elements go through the aligned scratch of an unaligned reduction.
const chunk = 256

// ReduceInto computes dst[i] = dst[i] op src[i] for every element. dst and src hold
// the same whole number of elements of dt. Avg sums; Finalize divides.
func Into(dst, src []byte, dt collective.DType, op collective.Op) error {
	if err := collective.CheckOp(op, dt); err != nil {
		return err
	}
	sz := dt.Size()
	if len(dst) != len(src) || len(dst)%sz != 0 {
		return invalid("Into", "dst has %d bytes, src %d: want equal multiples of %d (%v)", len(dst), len(src), sz, dt)
	}
	if len(dst) == 0 {
		return nil
	}
	switch dt {
	case collective.Int8:
		reduceInt[int8](dst, src, op)
	case collective.Int16:
		reduceInt[int16](dst, src, op)
	case collective.Int32:
		reduceInt[int32](dst, src, op)
	case collective.Int64:
		reduceInt[int64](dst, src, op)
	case collective.Uint8:
		reduceInt[uint8](dst, src, op)
	case collective.Uint16:
		reduceInt[uint16](dst, src, op)
	case collective.Uint32:
		reduceInt[uint32](dst, src, op)
	case collective.Uint64:
		reduceInt[uint64](dst, src, op)
	case collective.Float32:
		reduceFloat[float32](dst, src, op)
	case collective.Float64:
		reduceFloat[float64](dst, src, op)
	case collective.Float16, collective.BFloat16:
		reduceHalf(dst, src, op, dt)
	}
	return nil
}

// Finalize ends a reduction over n ranks: for collective.OpAvg it divides every element by n
// (integers truncate toward zero); other operators need nothing.
func Finalize(dst []byte, dt collective.DType, op collective.Op, n int) error {
	if err := collective.CheckOp(op, dt); err != nil {
		return err
	}
	if op != collective.OpAvg || n == 1 || len(dst) == 0 {
		return nil
	}
	if n < 1 || len(dst)%dt.Size() != 0 {
		return invalid("Finalize", "n is %d and dst %d bytes of %v", n, len(dst), dt)
	}
	switch dt {
	case collective.Int8:
		scaleInt[int8](dst, n)
	case collective.Int16:
		scaleInt[int16](dst, n)
	case collective.Int32:
		scaleInt[int32](dst, n)
	case collective.Int64:
		scaleInt[int64](dst, n)
	case collective.Uint8:
		scaleInt[uint8](dst, n)
	case collective.Uint16:
		scaleInt[uint16](dst, n)
	case collective.Uint32:
		scaleInt[uint32](dst, n)
	case collective.Uint64:
		scaleInt[uint64](dst, n)
	case collective.Float32:
		scaleFloat[float32](dst, n)
	case collective.Float64:
		scaleFloat[float64](dst, n)
	case collective.Float16, collective.BFloat16:
		var f [chunk]float32
		for off := 0; off < len(dst); off += 2 * chunk {
			m := min(chunk, (len(dst)-off)/2)
			halfToF32(f[:m], dst[off:], dt)
			for i := range f[:m] {
				f[i] /= float32(n)
			}
			f32ToHalf(dst[off:], f[:m], dt)
		}
	}
	return nil
}

// view returns b as a []T when b is aligned for T, else nil.
func view[T any](b []byte) []T {
	var z T
	sz := int(unsafe.Sizeof(z))
	if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(sz) != 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/sz)
}

func bytesOf[T any](s []T) []byte {
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// forChunks runs f over typed views of d and s, through aligned scratch when either is
// unaligned (checkptr, which -race enables, rejects misaligned typed pointers).
func forChunks[T any](dst, src []byte, f func(d, s []T)) {
	if d, s := view[T](dst), view[T](src); d != nil && s != nil {
		f(d, s)
		return
	}
	var z T
	sz := int(unsafe.Sizeof(z))
	var bd, bs [chunk]T
	for off := 0; off < len(dst); off += chunk * sz {
		m := min(chunk, (len(dst)-off)/sz)
		copy(bytesOf(bd[:m]), dst[off:])
		copy(bytesOf(bs[:m]), src[off:])
		f(bd[:m], bs[:m])
		copy(dst[off:], bytesOf(bd[:m]))
	}
}

func reduceInt[T integer](dst, src []byte, op collective.Op) {
	forChunks(dst, src, func(d, s []T) {
		switch op {
		case collective.OpSum, collective.OpAvg:
			for i := range d {
				d[i] += s[i]
			}
		case collective.OpProd:
			for i := range d {
				d[i] *= s[i]
			}
		case collective.OpMin:
			for i := range d {
				d[i] = min(d[i], s[i])
			}
		case collective.OpMax:
			for i := range d {
				d[i] = max(d[i], s[i])
			}
		case collective.OpBand:
			for i := range d {
				d[i] &= s[i]
			}
		case collective.OpBor:
			for i := range d {
				d[i] |= s[i]
			}
		case collective.OpBxor:
			for i := range d {
				d[i] ^= s[i]
			}
		case collective.OpLand:
			for i := range d {
				d[i] = b2i[T](d[i] != 0 && s[i] != 0)
			}
		case collective.OpLor:
			for i := range d {
				d[i] = b2i[T](d[i] != 0 || s[i] != 0)
			}
		case collective.OpLxor:
			for i := range d {
				d[i] = b2i[T]((d[i] != 0) != (s[i] != 0))
			}
		}
	})
}

func b2i[T integer | float](b bool) T {
	if b {
		return 1
	}
	return 0
}

func reduceFloat[T float](dst, src []byte, op collective.Op) {
	forChunks(dst, src, func(d, s []T) { applyFloat(d, s, op) })
}

func applyFloat[T float](d, s []T, op collective.Op) {
	switch op {
	case collective.OpSum, collective.OpAvg:
		for i := range d {
			d[i] += s[i]
		}
	case collective.OpProd:
		for i := range d {
			d[i] *= s[i]
		}
	case collective.OpMin:
		for i := range d {
			if s[i] < d[i] {
				d[i] = s[i]
			}
		}
	case collective.OpMax:
		for i := range d {
			if s[i] > d[i] {
				d[i] = s[i]
			}
		}
	case collective.OpLand:
		for i := range d {
			d[i] = b2i[T](d[i] != 0 && s[i] != 0)
		}
	case collective.OpLor:
		for i := range d {
			d[i] = b2i[T](d[i] != 0 || s[i] != 0)
		}
	case collective.OpLxor:
		for i := range d {
			d[i] = b2i[T]((d[i] != 0) != (s[i] != 0))
		}
	}
}

func reduceHalf(dst, src []byte, op collective.Op, dt collective.DType) {
	var fd, fs [chunk]float32
	for off := 0; off < len(dst); off += 2 * chunk {
		m := min(chunk, (len(dst)-off)/2)
		halfToF32(fd[:m], dst[off:], dt)
		halfToF32(fs[:m], src[off:], dt)
		applyFloat(fd[:m], fs[:m], op)
		f32ToHalf(dst[off:], fd[:m], dt)
	}
}

// scaleInt divides in 64 bits: the team size need not fit the element
// type (256 ranks as an int8 is 0, and 200 is negative).
func scaleInt[T integer](dst []byte, n int) {
	forChunks(dst, dst, func(d, _ []T) {
		for i := range d {
			if T(0)-1 < 0 {
				d[i] = T(int64(d[i]) / int64(n))
			} else {
				d[i] = T(uint64(d[i]) / uint64(n))
			}
		}
	})
}

func scaleFloat[T float](dst []byte, n int) {
	forChunks(dst, dst, func(d, _ []T) {
		for i := range d {
			d[i] /= T(n)
		}
	})
}

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
		// (bit 10); each shift lowers the exponent of 1.man × 2^e from -14.
		e := -14
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		man &= 0x3ff
		return math.Float32frombits(sign | uint32(e+127)<<23 | man<<13)
	}
	return math.Float32frombits(sign | uint32(exp-15+127)<<23 | man<<13)
}

// F32ToF16 converts float32 to binary16 bits, rounding to nearest even.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00
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

func invalid(op, format string, args ...any) error {
	return fmt.Errorf("reduce: %s: %s: %w", op, fmt.Sprintf(format, args...), collective.ErrInvalid)
}
