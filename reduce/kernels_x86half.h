// The half-precision kernels of the AVX-512 levels that have the half-precision
// instruction sets: bfloat16 with AVX512_BF16's rounding conversion, float16 with
// AVX512_FP16's arithmetic. kernels.c includes this file once, after the avx512
// level, with both instruction sets enabled; a level calls only the kernels its CPU
// runs (the bfloat16 ones need BF16 alone). The generic loops of kernels_body.h
// spend most of their time converting: the rounding of two float32 lanes back to
// bfloat16 is about a dozen integer operations, and F16C converts 16 float16 per
// instruction each way. Here a vector holds 32 elements, the tail goes through
// masked loads and stores, and results stay the reference's bit for bit.

// ---- bfloat16 ----
// A 512-bit vector is 16 words of two elements: a word's high element is the word
// with its low half cleared, as a float32; its low element is the word shifted up.

static inline __m512 bx_hi(__m512i w) { return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000))); }
static inline __m512 bx_lo(__m512i w) { return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)); }

// bx_join packs the top halves of two vectors of float32 bits into words (hi's in
// the high half of each word).
static inline __m512i bx_join(__m512i hi, __m512i lo) {
    return _mm512_or_si512(_mm512_and_si512(hi, _mm512_set1_epi32((int)0xffff0000)), _mm512_srli_epi32(lo, 16));
}

// bx_quiet sets the quiet bit of the NaN lanes of f (the reference's F32ToBF16).
static inline __m512i bx_quiet(__m512 f) {
    __m512i b = _mm512_castps_si512(f);
    __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    return _mm512_mask_or_epi32(b, nan, b, _mm512_set1_epi32(0x400000));
}

// bx_round rounds float32 lanes to nearest even in their top 16 bits (integer
// arithmetic: exact for every input, subnormals included).
static inline __m512i bx_round(__m512 f) {
    __m512i b = _mm512_castps_si512(f);
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)),
                                 _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1)));
    __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    return _mm512_mask_or_epi32(r, nan, b, _mm512_set1_epi32(0x400000));
}

// bx_pack_round rounds two vectors of results into one of words. VCVTNE2PS2BF16
// rounds to nearest even and quiets NaNs as the reference does, in one instruction
// for 32 elements, but it reads a subnormal float32 as zero: a vector that holds one
// (rare: a sum below 2^-126) takes the integer rounding. The instruction puts lo's
// elements in words 0..15 and hi's in 16..31; the permutation interleaves them.
static inline __m512i bx_pack_round(__m512 hi, __m512 lo) {
    // KORTEST sets ZF when neither mask has a bit: one instruction for both checks.
    if (__builtin_expect(!_kortestz_mask16_u8(_mm512_fpclass_ps_mask(hi, 0x20), _mm512_fpclass_ps_mask(lo, 0x20)), 0))
        return bx_join(bx_round(hi), bx_round(lo));
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                         23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

// bx_pack_exact packs results that are bfloat16 values already (min and max pick an
// operand): only a NaN needs its quiet bit.
static inline __m512i bx_pack_exact(__m512 hi, __m512 lo) { return bx_join(bx_quiet(hi), bx_quiet(lo)); }

static inline __m512 bx_sum(__m512 x, __m512 y) { return _mm512_add_ps(x, y); }
static inline __m512 bx_prod(__m512 x, __m512 y) { return _mm512_mul_ps(x, y); }
// min_ps(y, x) is y < x ? y : x, operand for operand the reference's comparison.
static inline __m512 bx_min(__m512 x, __m512 y) { return _mm512_min_ps(y, x); }
static inline __m512 bx_max(__m512 x, __m512 y) { return _mm512_max_ps(y, x); }

// bx_fold combines the k sources' 32 elements at p (word offset i) in float32 and
// packs them: the whole fold is in registers, so the result is rounded once.
#define BX_FOLD(LOAD, VOP, PACK)                                                   \
    do {                                                                           \
        __m512i a = LOAD((const uint16_t *)s[0] + i), b = LOAD((const uint16_t *)s[1] + i); \
        __m512 hi = VOP(bx_hi(a), bx_hi(b)), lo = VOP(bx_lo(a), bx_lo(b));         \
        for (int j = 2; j < k; j++) {                                              \
            __m512i c = LOAD((const uint16_t *)s[j] + i);                          \
            hi = VOP(hi, bx_hi(c));                                                \
            lo = VOP(lo, bx_lo(c));                                                \
        }                                                                          \
        r = PACK(hi, lo);                                                          \
    } while (0)

#define BX_LOADU(p) _mm512_loadu_si512(p)
#define BX_LOADM(p) _mm512_maskz_loadu_epi16(m, p)

// BXKERN: 32 elements a step; the last partial step loads and stores under a mask
// (a masked lane is zero, and a masked load cannot fault).
#define BXKERN(NAME, VOP, PACK)                                                    \
    static void NAME(void *dv, const void *const *s, int k, size_t n) {            \
        uint16_t *d = dv;                                                          \
        size_t i = 0;                                                              \
        __m512i r;                                                                 \
        if (k == 2) {                                                              \
            const uint16_t *pa = s[0], *pb = s[1];                                 \
            for (; i + 64 <= n; i += 64) {                                         \
                __m512i a0 = _mm512_loadu_si512(pa + i), b0 = _mm512_loadu_si512(pb + i); \
                __m512i a1 = _mm512_loadu_si512(pa + i + 32), b1 = _mm512_loadu_si512(pb + i + 32); \
                __m512 h0 = VOP(bx_hi(a0), bx_hi(b0)), l0 = VOP(bx_lo(a0), bx_lo(b0)); \
                __m512 h1 = VOP(bx_hi(a1), bx_hi(b1)), l1 = VOP(bx_lo(a1), bx_lo(b1)); \
                _mm512_storeu_si512(d + i, PACK(h0, l0));                          \
                _mm512_storeu_si512(d + i + 32, PACK(h1, l1));                     \
            }                                                                      \
        }                                                                          \
        for (; i + 32 <= n; i += 32) {                                             \
            BX_FOLD(BX_LOADU, VOP, PACK);                                          \
            _mm512_storeu_si512(d + i, r);                                         \
        }                                                                          \
        if (i < n) {                                                               \
            __mmask32 m = _bzhi_u32(~0u, (unsigned)(n - i));                        \
            BX_FOLD(BX_LOADM, VOP, PACK);                                          \
            _mm512_mask_storeu_epi16(d + i, m, r);                                 \
        }                                                                          \
    }

BXKERN(bx_sum_k, bx_sum, bx_pack_round)
BXKERN(bx_prod_k, bx_prod, bx_pack_round)
BXKERN(bx_min_k, bx_min, bx_pack_exact)
BXKERN(bx_max_k, bx_max, bx_pack_exact)

// The bfloat16 row: the logical operators and avg's sum keep the avx512 level's.
static kern_fn *const bf16x_row[IBC_NOP] = {
    [IBC_SUM] = bx_sum_k, [IBC_PROD] = bx_prod_k, [IBC_MIN] = bx_min_k, [IBC_MAX] = bx_max_k,
    [IBC_AVG] = bx_sum_k,
};

// ---- float16 ----
// AVX512_FP16 adds and multiplies binary16 directly, rounding once to nearest even.
// For two operands that is the reference's result exactly: binary32 has 24 bits,
// at least 2×11+2, so rounding the exact sum or product first to binary32 and then
// to binary16 gives the same value as rounding it once to binary16 (double rounding
// is innocuous at that precision). With more sources the reference keeps every
// partial sum in float32, so sums and products of three or more sources take the
// avx512 level's float32 kernels. min and max pick an operand: exact for any k.

// hx_quiet writes a NaN as the reference does: quiet, its sign and payload kept. A sum
// or product is quiet already; min and max may pick a signalling source.
static inline __m512i hx_quiet(__m512h v) {
    __m512i h = _mm512_castph_si512(v);
    __mmask32 nan = _mm512_cmp_ph_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_mov_epi16(h, nan, _mm512_or_si512(h, _mm512_set1_epi16(0x200)));
}

static inline __m512h hx_sum(__m512h x, __m512h y) { return _mm512_add_ph(x, y); }
static inline __m512h hx_prod(__m512h x, __m512h y) { return _mm512_mul_ph(x, y); }
// min_ph(y, x) is y < x ? y : x, as min_ps.
static inline __m512h hx_min(__m512h x, __m512h y) { return _mm512_min_ph(y, x); }
static inline __m512h hx_max(__m512h x, __m512h y) { return _mm512_max_ph(y, x); }

#define HX_LOADU(p) _mm512_castsi512_ph(_mm512_loadu_si512(p))
#define HX_LOADM(p) _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(m, p))

#define HX_FOLD(LOAD, VOP)                                                         \
    do {                                                                           \
        __m512h x = VOP(LOAD((const uint16_t *)s[0] + i), LOAD((const uint16_t *)s[1] + i)); \
        for (int j = 2; j < k; j++)                                                \
            x = VOP(x, LOAD((const uint16_t *)s[j] + i));                          \
        r = hx_quiet(x);                                                           \
    } while (0)

// HXKERN: FALLBACK is the float32 kernel for k > 2 (0: exact for any k).
#define HXKERN(NAME, VOP, FALLBACK)                                                \
    static void NAME(void *dv, const void *const *s, int k, size_t n) {            \
        kern_fn *fb = FALLBACK;                                                    \
        if (fb && k > 2) {                                                         \
            fb(dv, s, k, n);                                                       \
            return;                                                                \
        }                                                                          \
        uint16_t *d = dv;                                                          \
        size_t i = 0;                                                              \
        __m512i r;                                                                 \
        for (; i + 32 <= n; i += 32) {                                             \
            HX_FOLD(HX_LOADU, VOP);                                                \
            _mm512_storeu_si512(d + i, r);                                         \
        }                                                                          \
        if (i < n) {                                                               \
            __mmask32 m = _bzhi_u32(~0u, (unsigned)(n - i));                        \
            HX_FOLD(HX_LOADM, VOP);                                                \
            _mm512_mask_storeu_epi16(d + i, m, r);                                 \
        }                                                                          \
    }

HXKERN(hx_sum_k, hx_sum, f16_sum_avx512)
HXKERN(hx_prod_k, hx_prod, f16_prod_avx512)
HXKERN(hx_min_k, hx_min, 0)
HXKERN(hx_max_k, hx_max, 0)

static kern_fn *const f16x_row[IBC_NOP] = {
    [IBC_SUM] = hx_sum_k, [IBC_PROD] = hx_prod_k, [IBC_MIN] = hx_min_k, [IBC_MAX] = hx_max_k,
    [IBC_AVG] = hx_sum_k,
};
