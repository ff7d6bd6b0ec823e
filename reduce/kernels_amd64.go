//go:build cgo && amd64

package reduce

/*
#include "kernels.h"
*/
import "C"

import "golang.org/x/sys/cpu"

// The kernel levels of kernels.c; levelGo (kernels_cgo.go) is the
// reference loops alone.
const (
	levelBase   = C.IBC_LVL_BASE
	levelAVX2   = C.IBC_LVL_AVX2
	levelAVX512 = C.IBC_LVL_AVX512
	// The half-precision instruction sets: bfloat16's rounding conversion, float16's
	// arithmetic (see kernels_x86half.h).
	levelAVX512BF16 = C.IBC_LVL_AVX512BF16
	levelAVX512FP16 = C.IBC_LVL_AVX512FP16
	// half256 added to avx512 or avx512bf16 converts float16 on 256-bit vectors (see
	// kernels.h): faster where 512-bit operations run as two halves (Zen 4: float16
	// sum at 64 KiB 0.45 of copy() against 0.41, BenchmarkKernels).
	half256 = C.IBC_HALF256
)

var levelNames = map[int]string{levelGo: "go", levelBase: "base", levelAVX2: "avx2", levelAVX512: "avx512",
	levelAVX512 | half256: "avx512-half256", levelAVX512BF16: "avx512bf16",
	levelAVX512BF16 | half256: "avx512bf16-half256", levelAVX512FP16: "avx512fp16"}

// levels lists the levels this CPU runs, best last. An AVX-512 level comes with its
// half256 variant, the one this CPU runs faster after the other.
func levels() []int {
	out := []int{levelGo, levelBase}
	split := C.ibc_cpu_split512() != 0
	both := func(l int) {
		if split {
			out = append(out, l, l|half256)
		} else {
			out = append(out, l|half256, l)
		}
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasF16C && cpu.X86.HasBMI2 {
		out = append(out, levelAVX2)
		if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL {
			both(levelAVX512)
			if cpu.X86.HasAVX512BF16 {
				both(levelAVX512BF16)
				if C.ibc_cpu_fp16() != 0 {
					out = append(out, levelAVX512FP16)
				}
			}
		}
	}
	return out
}
