//go:build cgo && (amd64 || arm64)

package reduce

/*
#cgo CFLAGS: -O3
#include "kernels.h"
*/
import "C"

import (
	"unsafe"

	"github.com/ibcoll/ibcoll/collective"
)

// levelGo is the reference loops alone; the architecture's file lists the others.
const levelGo = -1

// minNative is the size from which a cgo call pays: below it the call's fixed cost
// exceeds what the vector loop saves (see BenchmarkKernels).
const minNative = 256

// maxSources is the most sources one native call folds.
const maxSources = C.IBC_MAXSRC

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
