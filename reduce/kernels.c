//go:build cgo && amd64

// The vectorized kernels: the same C loops compiled for each instruction-set level
// (baseline x86-64, AVX2, AVX-512), so that Go picks one at run time from the CPU's
// features. The compiler's vectorizer does the work; the loops keep the reference's
// order of operations (left fold, no reassociation, no contraction), so results are
// the reference's bit for bit (which NaN survives a sum or product of two aside). No loop both
// multiplies and adds, so floating-point contraction cannot change a result.

#include <cpuid.h>
#include <immintrin.h>

#include "kernels_ops.h"

#define LVL base
#define LVL_F16C 0
#define LVL_AVX512 0
#include "kernels_body.h"
#undef LVL
#undef LVL_F16C
#undef LVL_AVX512

#pragma GCC push_options
#pragma GCC target("avx2,f16c,bmi2")
#define LVL avx2
#define LVL_F16C 1
#define LVL_AVX512 0
#include "kernels_body.h"
#undef LVL
#undef LVL_F16C
#undef LVL_AVX512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c,bmi2,prefer-vector-width=512")
#define LVL avx512
#define LVL_F16C 1
#define LVL_AVX512 1
#include "kernels_body.h"
#undef LVL
#undef LVL_F16C
#undef LVL_AVX512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512fp16,avx2,f16c,bmi2,prefer-vector-width=512")
#include "kernels_x86half.h"
#pragma GCC pop_options

// The levels above avx512 replace its half-precision rows where they have a kernel.
static kern_fn *const (*const kernels[IBC_NLVL])[IBC_NOP] = {kernels_base, kernels_avx2, kernels_avx512,
                                                             kernels_avx512, kernels_avx512};
static scale_fn *const *const scalers[IBC_NLVL] = {scalers_base, scalers_avx2, scalers_avx512, scalers_avx512,
                                                   scalers_avx512};

int ibc_cpu_fp16(void) {
    unsigned a, b, c, d;
    // CPUID leaf 7, subleaf 0: EDX bit 23 is AVX512_FP16. The OS's saving of the
    // AVX-512 state is checked in Go (cpu.X86.HasAVX512F).
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    return (d >> 23) & 1;
}

int ibc_cpu_split512(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541 || d != 0x69746e65 || c != 0x444d4163) // "AuthenticAMD"
        return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    // The family is the base family plus the extended one, where the base is 0xf.
    unsigned fam = (a >> 8) & 0xf;
    if (fam == 0xf)
        fam += (a >> 20) & 0xff;
    return fam == 0x19;
}

// half256 reports whether level lvl (with IBC_HALF256 stripped) takes the avx2
// level's float16 kernel for op on k sources. Only two sources: with
// more, the fold's float32 passes over its block gain more from 512-bit vectors than
// the conversions lose (Zen 4, 64 KiB, three sources: 4.8 µs against 4.2).
static int half256(int flag, int lvl, int dt, int op, int k) {
    return flag && dt == IBC_F16 && (lvl == IBC_LVL_AVX512 || lvl == IBC_LVL_AVX512BF16) && op != IBC_MIN &&
           op != IBC_MAX && k == 2;
}

int ibc_reduce(int lvl, int dt, int op, uintptr_t d, uintptr_t s0, uintptr_t s1,
               uintptr_t s2, uintptr_t s3, uintptr_t s4, uintptr_t s5, uintptr_t s6,
               uintptr_t s7, int k, size_t n) {
    int flag = lvl & IBC_HALF256;
    lvl &= ~IBC_HALF256;
    if (lvl < 0 || lvl >= IBC_NLVL || dt <= 0 || dt >= IBC_NDT || op <= 0 || op >= IBC_NOP ||
        k < 2 || k > IBC_MAXSRC)
        return 0;
    kern_fn *f = 0;
    if (lvl >= IBC_LVL_AVX512BF16 && dt == IBC_BF16)
        f = bf16x_row[op];
    if (lvl >= IBC_LVL_AVX512FP16 && dt == IBC_F16)
        f = f16x_row[op];
    if (half256(flag, lvl, dt, op, k))
        f = kernels_avx2[dt][op];
    if (!f)
        f = kernels[lvl][dt][op];
    if (!f)
        return 0;
    const void *s[IBC_MAXSRC] = {(const void *)s0, (const void *)s1, (const void *)s2, (const void *)s3,
                                 (const void *)s4, (const void *)s5, (const void *)s6, (const void *)s7};
    f((void *)d, s, k, n);
    return 1;
}

int ibc_scale(int lvl, int dt, uintptr_t d, size_t n, double c) {
    lvl &= ~IBC_HALF256; // the scaling is bound by its division, not its conversions
    if (lvl < 0 || lvl >= IBC_NLVL || dt <= 0 || dt >= IBC_NDT)
        return 0;
    scale_fn *f = scalers[lvl][dt];
    if (!f)
        return 0;
    f((void *)d, n, c);
    return 1;
}
