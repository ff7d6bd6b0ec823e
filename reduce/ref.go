package reduce

import (
	"unsafe"

	"github.com/ibcoll/ibcoll/collective"
)

// This file is the reference: plain Go loops that define every kernel's result, run
// where no vectorized kernel applies (CGO_ENABLED=0, other architectures, buffers
// below minNative) and check the vectorized kernels in the tests.

type integer interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

type float interface{ ~float32 | ~float64 }

// chunk is how many elements go through the aligned scratch of an unaligned reduction.
const chunk = 256

// refInto sets dst = srcs[0] op srcs[1] op ..., folding from the left. dst may be
// srcs[0]; it overlaps no other source.
func refInto(dst []byte, srcs [][]byte, dt collective.DType, op collective.Op) {
	if len(srcs) == 1 {
		// A copy, as IntoMany's: a half's round trip through float32 would quiet its
		// signalling NaNs.
		if !same(dst, srcs[0]) {
			copy(dst, srcs[0])
		}
		return
	}
	if dt == collective.Float16 || dt == collective.BFloat16 {
		reduceHalf(dst, srcs, op, dt)
		return
	}
	if !same(dst, srcs[0]) {
		copy(dst, srcs[0])
	}
	for _, src := range srcs[1:] {
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
		}
	}
}

// refScale divides every element of dst by n (integers truncate toward zero).
func refScale(dst []byte, dt collective.DType, n int) {
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

// reduceHalf widens every source to float32, folds in float32 and rounds once.
func reduceHalf(dst []byte, srcs [][]byte, op collective.Op, dt collective.DType) {
	var fd, fs [chunk]float32
	for off := 0; off < len(dst); off += 2 * chunk {
		m := min(chunk, (len(dst)-off)/2)
		halfToF32(fd[:m], srcs[0][off:], dt)
		for _, src := range srcs[1:] {
			halfToF32(fs[:m], src[off:], dt)
			applyFloat(fd[:m], fs[:m], op)
		}
		f32ToHalf(dst[off:], fd[:m], dt)
	}
}

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
