//go:build cgo && amd64

package reduce

/*
#cgo CFLAGS: -O3
#include "kernels.h"
*/
import "C"

import (
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/ibcoll/ibcoll/collective"
)

// The kernel levels of kernels.c; levelGo is the reference loops alone.
const (
	levelGo     = -1
	levelBase   = C.IBC_LVL_BASE
	levelAVX2   = C.IBC_LVL_AVX2
	levelAVX512 = C.IBC_LVL_AVX512
	// The half-precision instruction sets: bfloat16's rounding conversion, float16's
	// arithmetic (see kernels_x86half.h).
	levelAVX512BF16 = C.IBC_LVL_AVX512BF16
	levelAVX512FP16 = C.IBC_LVL_AVX512FP16
)

// minNative is the size from which a cgo call pays: below it the call's fixed cost
// exceeds what the vector loop saves (see BenchmarkKernels).
const minNative = 256

// maxSources is the most sources one native call folds.
const maxSources = C.IBC_MAXSRC

var levelNames = map[int]string{levelGo: "go", levelBase: "base", levelAVX2: "avx2", levelAVX512: "avx512",
	levelAVX512BF16: "avx512bf16", levelAVX512FP16: "avx512fp16"}

// levels lists the levels this CPU runs, best last.
func levels() []int {
	out := []int{levelGo, levelBase}
	if cpu.X86.HasAVX2 && cpu.X86.HasF16C && cpu.X86.HasBMI2 {
		out = append(out, levelAVX2)
		if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL {
			out = append(out, levelAVX512)
			if cpu.X86.HasAVX512BF16 {
				out = append(out, levelAVX512BF16)
				if C.ibc_cpu_fp16() != 0 {
					out = append(out, levelAVX512FP16)
				}
			}
		}
	}
	return out
}

// level is the level the package runs: the best this CPU has.
var level = func() int { l := levels(); return l[len(l)-1] }()

// native folds srcs into dst at level lvl; false when the level has no kernel for
// dt or there are too many sources (the caller runs the reference).
func native(lvl int, dst []byte, srcs [][]byte, dt collective.DType, op collective.Op) bool {
	if lvl == levelGo || len(srcs) > maxSources {
		return false
	}
	var p [maxSources]unsafe.Pointer
	for i, s := range srcs {
		p[i] = unsafe.Pointer(unsafe.SliceData(s))
	}
	return callReduce(lvl, dt, op, uintptr(unsafe.Pointer(unsafe.SliceData(dst))), uintptr(p[0]), uintptr(p[1]),
		uintptr(p[2]), uintptr(p[3]), uintptr(p[4]), uintptr(p[5]), uintptr(p[6]), uintptr(p[7]), len(srcs), len(dst)/dt.Size())
}

// callReduce passes the buffers as integers: uintptrescapes keeps what they point to
// on the heap (unmoved) and alive until the call returns.
//
//go:uintptrescapes
func callReduce(lvl int, dt collective.DType, op collective.Op, d, s0, s1, s2, s3, s4, s5, s6, s7 uintptr, k, n int) bool {
	return C.ibc_reduce(C.int(lvl), C.int(dt), C.int(op), C.uintptr_t(d), C.uintptr_t(s0), C.uintptr_t(s1), C.uintptr_t(s2),
		C.uintptr_t(s3), C.uintptr_t(s4), C.uintptr_t(s5), C.uintptr_t(s6), C.uintptr_t(s7), C.int(k), C.size_t(n)) != 0
}

// nativeScale divides a floating-point dst by n at level lvl; false for integers.
func nativeScale(lvl int, dst []byte, dt collective.DType, n int) bool {
	if lvl == levelGo {
		return false
	}
	return callScale(lvl, dt, uintptr(unsafe.Pointer(unsafe.SliceData(dst))), len(dst)/dt.Size(), n)
}

//go:uintptrescapes
func callScale(lvl int, dt collective.DType, d uintptr, count, n int) bool {
	return C.ibc_scale(C.int(lvl), C.int(dt), C.uintptr_t(d), C.size_t(count), C.double(n)) != 0
}
