// The C side of package reduce's vectorized kernels (see kernels_cgo.go).
#ifndef IBCOLL_REDUCE_KERNELS_H
#define IBCOLL_REDUCE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

// Instruction-set levels, chosen in Go from the CPU's features. arm64 has the base
// level alone (NEON, which every AArch64 CPU has). On amd64 each level's CPU runs
// every lower level: avx512bf16 adds AVX512_BF16, avx512fp16 both AVX512_BF16
// and AVX512_FP16 (a CPU with FP16 but not BF16 runs avx512).
enum { IBC_LVL_BASE = 0, IBC_LVL_AVX2 = 1, IBC_LVL_AVX512 = 2, IBC_LVL_AVX512BF16 = 3, IBC_LVL_AVX512FP16 = 4,
       IBC_NLVL = 5 };

// IBC_HALF256, added to the avx512 or avx512bf16 level, converts float16 on 256-bit
// vectors (the avx2 level's float16 kernels) where it converts two sources: sum, prod, avg and the logical operators; min and max keep the level's
// kernels, which do not convert, and so do folds of three or more sources. On a CPU that runs a 512-bit operation as two 256-bit halves (AMD Zen
// 4) the 256-bit conversions are faster (ibc_cpu_split512).
#define IBC_HALF256 0x100

// Element types and operators, numbered as package collective numbers them.
enum { IBC_I8 = 1, IBC_I16, IBC_I32, IBC_I64, IBC_U8, IBC_U16, IBC_U32, IBC_U64,
       IBC_F16, IBC_BF16, IBC_F32, IBC_F64, IBC_NDT };
enum { IBC_SUM = 1, IBC_PROD, IBC_MIN, IBC_MAX, IBC_BAND, IBC_BOR, IBC_BXOR,
       IBC_LAND, IBC_LOR, IBC_LXOR, IBC_AVG, IBC_NOP };

// The most sources one call combines. The buffers are passed as integers: Go keeps
// them alive and unmoved through the call (see kernels_cgo.go), and integers spare
// the cgo call its per-pointer checks, which cost more than a small reduction.
#define IBC_MAXSRC 8

// ibc_reduce sets d[i] = s0[i] op s1[i] op ... for n elements of k (2..IBC_MAXSRC)
// sources, folding from the left. d may be s0; it overlaps no other source. It
// returns 0 when the level has no kernel for dt (the caller runs its reference).
int ibc_reduce(int lvl, int dt, int op, uintptr_t d, uintptr_t s0, uintptr_t s1,
               uintptr_t s2, uintptr_t s3, uintptr_t s4, uintptr_t s5, uintptr_t s6,
               uintptr_t s7, int k, size_t n);

// ibc_scale divides n floating-point elements of d by c; 0 for other types.
int ibc_scale(int lvl, int dt, uintptr_t d, size_t n, double c);

// ibc_cpu_fp16 reports CPUID's AVX512_FP16 flag (golang.org/x/sys/cpu has none).
int ibc_cpu_fp16(void);

// ibc_cpu_split512 reports a CPU that issues 512-bit operations as two 256-bit
// halves: AMD family 19h (Zen 4), the only one with AVX-512 that does.
int ibc_cpu_split512(void);

#endif
