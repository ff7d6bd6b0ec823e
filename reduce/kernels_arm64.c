//go:build cgo && arm64

// The kernels of arm64: kernels_body.h's loops compiled once, for AArch64's base
// instruction set, whose Advanced SIMD (NEON) every AArch64 CPU has, so there is no
// run-time choice to make. The compiler vectorizes the loops with NEON; float16
// converts with the base half-precision conversions (LVL_NEON). As on amd64 the
// loops keep the reference's order of operations, so results are the reference's
// bit for bit (which NaN survives a sum or product of two aside). float16's NaNs are
// the reference's only while FPCR's DN and AHP bits are clear, as Go leaves them.

#include <arm_neon.h>

#include "kernels_ops.h"

#define LVL neon
#define LVL_NEON 1
#include "kernels_body.h"
#undef LVL
#undef LVL_NEON

int ibc_reduce(int lvl, int dt, int op, uintptr_t d, uintptr_t s0, uintptr_t s1,
               uintptr_t s2, uintptr_t s3, uintptr_t s4, uintptr_t s5, uintptr_t s6,
               uintptr_t s7, int k, size_t n) {
    if (lvl != IBC_LVL_BASE || dt <= 0 || dt >= IBC_NDT || op <= 0 || op >= IBC_NOP || k < 2 ||
        k > IBC_MAXSRC)
        return 0;
    kern_fn *f = kernels_neon[dt][op];
    if (!f)
        return 0;
    const void *s[IBC_MAXSRC] = {(const void *)s0, (const void *)s1, (const void *)s2, (const void *)s3,
                                 (const void *)s4, (const void *)s5, (const void *)s6, (const void *)s7};
    f((void *)d, s, k, n);
    return 1;
}

int ibc_scale(int lvl, int dt, uintptr_t d, size_t n, double c) {
    if (lvl != IBC_LVL_BASE || dt <= 0 || dt >= IBC_NDT)
        return 0;
    scale_fn *f = scalers_neon[dt];
    if (!f)
        return 0;
    f((void *)d, n, c);
    return 1;
}
