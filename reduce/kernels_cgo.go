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
)

// minNative is the size from which a cgo call pays: below it the call's fixed cost
// exceeds what the vector loop saves (see BenchmarkKernels).
const minNative = 256

// maxSources is the most sources one native call folds.
const maxSources = C.IBC_MAXSRC

var levelNames = map[int]string{levelGo: "go", levelBase: "base", levelAVX2: "avx2", levelAVX512: "avx512"}

// levels lists the levels this CPU runs, best last.
func levels() []int {
	out := []int{levelGo, levelBase}
	if cpu.X86.HasAVX2 && cpu.X86.HasF16C && cpu.X86.HasBMI2 {
		out = append(out, levelAVX2)
		if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL {
			out = append(out, levelAVX512)
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
	return C.ibc_reduce(C.int(lvl), C.int(dt), C.int(op), unsafe.Pointer(unsafe.SliceData(dst)),
		p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], C.int(len(srcs)), C.size_t(len(dst)/dt.Size())) != 0
}

// nativeScale divides a floating-point dst by n at level lvl; false for integers.
func nativeScale(lvl int, dst []byte, dt collective.DType, n int) bool {
	if lvl == levelGo {
		return false
	}
	return C.ibc_scale(C.int(lvl), C.int(dt), unsafe.Pointer(unsafe.SliceData(dst)), C.size_t(len(dst)/dt.Size()), C.double(n)) != 0
}
