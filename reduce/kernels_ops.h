// The element operators and shapes that every architecture's kernel file shares
// (kernels.c on amd64, kernels_arm64.c), ahead of kernels_body.h.
#ifndef IBCOLL_REDUCE_KERNELS_OPS_H
#define IBCOLL_REDUCE_KERNELS_OPS_H

#include <stdint.h>
#include <string.h>

#include "kernels.h"

// IBC_BLOCK is the bytes of the destination a multi-source fold keeps in the first-
// level cache; IBC_HBLOCK the float32 elements of a half-precision block.
#define IBC_BLOCK 8192
#define IBC_HBLOCK 1024

typedef void kern_fn(void *d, const void *const *s, int k, size_t n);
typedef void scale_fn(void *d, size_t n, double c);
// u32u reads and writes 32-bit words at any alignment (bfloat16 pairs).
typedef uint32_t __attribute__((aligned(1), may_alias)) u32u;

// The element operators: x is the running result, y the next source. Integer sums
// and products run in an unsigned type W of at least 32 bits, so that they wrap.
// A float min or max keeps x unless y compares below (above) it: a NaN in x stays,
// a NaN in y is skipped, as the reference's comparisons do.
#define OP_SUM(T, W, x, y) ((T)((W)(x) + (W)(y)))
#define OP_PROD(T, W, x, y) ((T)((W)(x) * (W)(y)))
#define OP_MIN(T, W, x, y) ((y) < (x) ? (y) : (x))
#define OP_MAX(T, W, x, y) ((y) > (x) ? (y) : (x))
#define OP_BAND(T, W, x, y) ((T)((x) & (y)))
#define OP_BOR(T, W, x, y) ((T)((x) | (y)))
#define OP_BXOR(T, W, x, y) ((T)((x) ^ (y)))
#define OP_LAND(T, W, x, y) ((T)(((x) != 0) & ((y) != 0)))
#define OP_LOR(T, W, x, y) ((T)(((x) != 0) | ((y) != 0)))
#define OP_LXOR(T, W, x, y) ((T)(((x) != 0) ^ ((y) != 0)))
#define FOP_LAND(T, W, x, y) (((x) != 0 && (y) != 0) ? (T)1 : (T)0)
#define FOP_LOR(T, W, x, y) (((x) != 0 || (y) != 0) ? (T)1 : (T)0)
#define FOP_LXOR(T, W, x, y) ((((x) != 0) != ((y) != 0)) ? (T)1 : (T)0)

#endif
