// One instruction-set level's kernels. kernels.c includes this file once per level,
// with LVL naming the level and the level's target options in effect, so that the
// compiler vectorizes the same loops for each; LVL_F16C says whether the level has
// the F16C conversions, LVL_NEON that it is AArch64's (its base has the half
// conversions).

#define K_(name, lvl) name##_##lvl
#define K2(name, lvl) K_(name, lvl)
#define K(name) K2(name, LVL)

// KERN folds k sources into d a block at a time: every block of d stays in the
// first-level cache while each source's block streams through it once, so memory
// sees each input read once and d written once, whatever k.
#define KERN(NAME, T, W, OP)                                                       \
    static void K(NAME)(void *dv, const void *const *s, int k, size_t n) {         \
        T *d = dv;                                                                 \
        const size_t blk = IBC_BLOCK / sizeof(T);                                  \
        for (size_t o = 0; o < n; o += blk) {                                      \
            size_t m = n - o < blk ? n - o : blk;                                  \
            T *dd = d + o;                                                         \
            const T *a = (const T *)s[0] + o, *b = (const T *)s[1] + o;            \
            _Pragma("GCC ivdep") for (size_t i = 0; i < m; i++)                    \
                dd[i] = OP(T, W, a[i], b[i]);                                      \
            for (int j = 2; j < k; j++) {                                          \
                const T *c = (const T *)s[j] + o;                                  \
                _Pragma("GCC ivdep") for (size_t i = 0; i < m; i++)                \
                    dd[i] = OP(T, W, dd[i], c[i]);                                 \
            }                                                                      \
        }                                                                          \
    }

#define INT_KERNELS(TN, T, W)                                                      \
    KERN(TN##_sum, T, W, OP_SUM) KERN(TN##_prod, T, W, OP_PROD)                    \
    KERN(TN##_min, T, W, OP_MIN) KERN(TN##_max, T, W, OP_MAX)                      \
    KERN(TN##_band, T, W, OP_BAND) KERN(TN##_bor, T, W, OP_BOR)                    \
    KERN(TN##_bxor, T, W, OP_BXOR) KERN(TN##_land, T, W, OP_LAND)                  \
    KERN(TN##_lor, T, W, OP_LOR) KERN(TN##_lxor, T, W, OP_LXOR)

#define FLOAT_KERNELS(TN, T)                                                       \
    KERN(TN##_sum, T, T, OP_SUM) KERN(TN##_prod, T, T, OP_PROD)                    \
    KERN(TN##_min, T, T, OP_MIN) KERN(TN##_max, T, T, OP_MAX)                      \
    KERN(TN##_land, T, T, FOP_LAND) KERN(TN##_lor, T, T, FOP_LOR)                  \
    KERN(TN##_lxor, T, T, FOP_LXOR)

INT_KERNELS(i8, int8_t, uint32_t)
INT_KERNELS(i16, int16_t, uint32_t)
INT_KERNELS(i32, int32_t, uint32_t)
INT_KERNELS(i64, int64_t, uint64_t)
INT_KERNELS(u8, uint8_t, uint32_t)
INT_KERNELS(u16, uint16_t, uint32_t)
INT_KERNELS(u32, uint32_t, uint32_t)
INT_KERNELS(u64, uint64_t, uint64_t)
FLOAT_KERNELS(f32, float)
FLOAT_KERNELS(f64, double)

// bfloat16 works on 32-bit words of two elements, so that no instruction moves data
// across vector lanes: a word's high element is the word with its low half cleared,
// as a float32; its low element is the word shifted up by 16. bf_round rounds a
// float32 to nearest even in its top 16 bits (a NaN keeps its top bits and is made
// quiet), as F32ToBF16 does. The last element of an odd count goes alone.
static inline float K(bf_hi)(uint32_t w) { uint32_t u = w & 0xffff0000u; float f; memcpy(&f, &u, 4); return f; }
static inline float K(bf_lo)(uint32_t w) { uint32_t u = w << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t K(bf_round)(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return (b & 0x7fffffffu) > 0x7f800000u ? b | 0x400000u : b + 0x7fffu + ((b >> 16) & 1u);
}
static inline uint32_t K(bf_pack)(float hi, float lo) {
    return (K(bf_round)(hi) & 0xffff0000u) | (K(bf_round)(lo) >> 16);
}

#define BFKERN(NAME, OP)                                                           \
    static void K(NAME)(void *dv, const void *const *s, int k, size_t n) {         \
        size_t nw = n / 2;                                                         \
        u32u *d = dv;                                                              \
        float hi[IBC_HBLOCK], lo[IBC_HBLOCK];                                      \
        for (size_t o = 0; o < nw; o += IBC_HBLOCK) {                              \
            size_t m = nw - o < IBC_HBLOCK ? nw - o : IBC_HBLOCK;                  \
            const u32u *a = (const u32u *)s[0] + o, *b = (const u32u *)s[1] + o;   \
            u32u *dd = d + o;                                                      \
            if (k == 2) {                                                          \
                _Pragma("GCC ivdep") for (size_t i = 0; i < m; i++)                \
                    dd[i] = K(bf_pack)(OP(float, float, K(bf_hi)(a[i]), K(bf_hi)(b[i])), \
                                       OP(float, float, K(bf_lo)(a[i]), K(bf_lo)(b[i]))); \
                continue;                                                          \
            }                                                                      \
            for (size_t i = 0; i < m; i++) {                                       \
                hi[i] = OP(float, float, K(bf_hi)(a[i]), K(bf_hi)(b[i]));          \
                lo[i] = OP(float, float, K(bf_lo)(a[i]), K(bf_lo)(b[i]));          \
            }                                                                      \
            for (int j = 2; j < k; j++) {                                          \
                const u32u *c = (const u32u *)s[j] + o;                            \
                for (size_t i = 0; i < m; i++) {                                   \
                    hi[i] = OP(float, float, hi[i], K(bf_hi)(c[i]));               \
                    lo[i] = OP(float, float, lo[i], K(bf_lo)(c[i]));               \
                }                                                                  \
            }                                                                      \
            _Pragma("GCC ivdep") for (size_t i = 0; i < m; i++)                    \
                dd[i] = K(bf_pack)(hi[i], lo[i]);                                  \
        }                                                                          \
        if (n % 2) {                                                               \
            uint16_t h;                                                            \
            memcpy(&h, (const uint16_t *)s[0] + n - 1, 2);                         \
            float x = K(bf_lo)(h);                                                 \
            for (int j = 1; j < k; j++) {                                          \
                memcpy(&h, (const uint16_t *)s[j] + n - 1, 2);                     \
                x = OP(float, float, x, K(bf_lo)(h));                              \
            }                                                                      \
            h = (uint16_t)(K(bf_round)(x) >> 16);                                  \
            memcpy((uint16_t *)dv + n - 1, &h, 2);                                 \
        }                                                                          \
    }

BFKERN(bf16_sum, OP_SUM)
BFKERN(bf16_prod, OP_PROD)
BFKERN(bf16_min, OP_MIN)
BFKERN(bf16_max, OP_MAX)
BFKERN(bf16_land, FOP_LAND)
BFKERN(bf16_lor, FOP_LOR)
BFKERN(bf16_lxor, FOP_LXOR)

static void K(scale_bf16)(void *dv, size_t n, double c) {
    u32u *d = dv;
    float cf = (float)c;
    _Pragma("GCC ivdep") for (size_t i = 0; i < n / 2; i++)
        d[i] = K(bf_pack)(K(bf_hi)(d[i]) / cf, K(bf_lo)(d[i]) / cf);
    if (n % 2) {
        uint16_t h;
        memcpy(&h, (uint16_t *)dv + n - 1, 2);
        h = (uint16_t)(K(bf_round)(K(bf_lo)(h) / cf) >> 16);
        memcpy((uint16_t *)dv + n - 1, &h, 2);
    }
}

#if LVL_F16C || LVL_NEON
// float16: VEC holds VW float32 lanes; f16_in widens VW halves to them, f16_out
// rounds VW lanes back to nearest even. A NaN comes out as the reference writes it
// with no more work: the conversions keep its sign and its payload's top bits and
// make it quiet.
#if LVL_NEON
// AArch64's base instruction set converts half to single and back (FCVTL, FCVTN),
// rounding by FPCR: to nearest even, subnormals kept, NaNs with their payload (DN and
// AHP clear), as Go leaves it. NEON's
// FMIN/FMAX return a NaN if either operand is one, so min and max compare and
// select, as the reference does.
#define VEC float32x4_t
#define VW 4
#define VLOAD vld1q_f32
#define VSTORE vst1q_f32
static inline VEC K(f16_in)(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
static inline void K(f16_out)(uint16_t *p, VEC v) { vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(v))); }
static inline VEC K(v_sum)(VEC x, VEC y) { return vaddq_f32(x, y); }
static inline VEC K(v_prod)(VEC x, VEC y) { return vmulq_f32(x, y); }
static inline VEC K(v_min)(VEC x, VEC y) { return vbslq_f32(vcltq_f32(y, x), y, x); }
static inline VEC K(v_max)(VEC x, VEC y) { return vbslq_f32(vcgtq_f32(y, x), y, x); }
// v_nz: x != 0, a NaN included (FCMEQ is false for it).
static inline uint32x4_t K(v_nz)(VEC x) { return vmvnq_u32(vceqzq_f32(x)); }
static inline VEC K(v_one)(uint32x4_t m) { return vreinterpretq_f32_u32(vandq_u32(m, vreinterpretq_u32_f32(vdupq_n_f32(1)))); }
static inline VEC K(v_land)(VEC x, VEC y) { return K(v_one)(vandq_u32(K(v_nz)(x), K(v_nz)(y))); }
static inline VEC K(v_lor)(VEC x, VEC y) { return K(v_one)(vorrq_u32(K(v_nz)(x), K(v_nz)(y))); }
static inline VEC K(v_lxor)(VEC x, VEC y) { return K(v_one)(veorq_u32(K(v_nz)(x), K(v_nz)(y))); }
static inline VEC K(v_div)(VEC x, float c) { return vdivq_f32(x, vdupq_n_f32(c)); }
#elif LVL_AVX512
#define VEC __m512
#define VW 16
#define VLOAD _mm512_loadu_ps
#define VSTORE _mm512_storeu_ps
static inline VEC K(f16_in)(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline void K(f16_out)(uint16_t *p, VEC v) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
static inline VEC K(v_sum)(VEC x, VEC y) { return _mm512_add_ps(x, y); }
static inline VEC K(v_prod)(VEC x, VEC y) { return _mm512_mul_ps(x, y); }
// min_ps(y, x) is y < x ? y : x, operand for operand the reference's comparison.
static inline VEC K(v_min)(VEC x, VEC y) { return _mm512_min_ps(y, x); }
static inline VEC K(v_max)(VEC x, VEC y) { return _mm512_max_ps(y, x); }
static inline __mmask16 K(v_nz)(VEC x) { return _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NEQ_UQ); }
static inline VEC K(v_land)(VEC x, VEC y) { return _mm512_maskz_mov_ps(K(v_nz)(x) & K(v_nz)(y), _mm512_set1_ps(1)); }
static inline VEC K(v_lor)(VEC x, VEC y) { return _mm512_maskz_mov_ps(K(v_nz)(x) | K(v_nz)(y), _mm512_set1_ps(1)); }
static inline VEC K(v_lxor)(VEC x, VEC y) { return _mm512_maskz_mov_ps(K(v_nz)(x) ^ K(v_nz)(y), _mm512_set1_ps(1)); }
static inline VEC K(v_div)(VEC x, float c) { return _mm512_div_ps(x, _mm512_set1_ps(c)); }
#else
#define VEC __m256
#define VW 8
#define VLOAD _mm256_loadu_ps
#define VSTORE _mm256_storeu_ps
static inline VEC K(f16_in)(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline void K(f16_out)(uint16_t *p, VEC v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
static inline VEC K(v_sum)(VEC x, VEC y) { return _mm256_add_ps(x, y); }
static inline VEC K(v_prod)(VEC x, VEC y) { return _mm256_mul_ps(x, y); }
// min_ps(y, x) is y < x ? y : x, operand for operand the reference's comparison.
static inline VEC K(v_min)(VEC x, VEC y) { return _mm256_min_ps(y, x); }
static inline VEC K(v_max)(VEC x, VEC y) { return _mm256_max_ps(y, x); }
static inline VEC K(v_nz)(VEC x) { return _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NEQ_UQ); }
static inline VEC K(v_land)(VEC x, VEC y) { return _mm256_and_ps(_mm256_and_ps(K(v_nz)(x), K(v_nz)(y)), _mm256_set1_ps(1)); }
static inline VEC K(v_lor)(VEC x, VEC y) { return _mm256_and_ps(_mm256_or_ps(K(v_nz)(x), K(v_nz)(y)), _mm256_set1_ps(1)); }
static inline VEC K(v_lxor)(VEC x, VEC y) { return _mm256_and_ps(_mm256_xor_ps(K(v_nz)(x), K(v_nz)(y)), _mm256_set1_ps(1)); }
static inline VEC K(v_div)(VEC x, float c) { return _mm256_div_ps(x, _mm256_set1_ps(c)); }
#endif

// HKERN folds k sources of float16: with two it widens, combines and rounds in one
// loop; with more it folds a block in float32 scratch and rounds the block once.
// The last partial vector goes through zero-padded copies.
#define HKERN(NAME, CVT, VOP)                                                      \
    static void K(NAME)(void *dv, const void *const *s, int k, size_t n) {         \
        uint16_t *d = dv;                                                          \
        size_t nv = n - n % VW;                                                    \
        float acc[IBC_HBLOCK];                                                     \
        for (size_t o = 0; o < nv; o += IBC_HBLOCK) {                              \
            size_t m = nv - o < IBC_HBLOCK ? nv - o : IBC_HBLOCK;                  \
            const uint16_t *a = (const uint16_t *)s[0] + o, *b = (const uint16_t *)s[1] + o; \
            uint16_t *dd = d + o;                                                  \
            if (k == 2) {                                                          \
                for (size_t i = 0; i < m; i += VW)                                 \
                    K(CVT##_out)(dd + i, K(VOP)(K(CVT##_in)(a + i), K(CVT##_in)(b + i))); \
                continue;                                                          \
            }                                                                      \
            for (size_t i = 0; i < m; i += VW)                                     \
                VSTORE(acc + i, K(VOP)(K(CVT##_in)(a + i), K(CVT##_in)(b + i)));   \
            for (int j = 2; j < k; j++) {                                          \
                const uint16_t *c = (const uint16_t *)s[j] + o;                    \
                for (size_t i = 0; i < m; i += VW)                                 \
                    VSTORE(acc + i, K(VOP)(VLOAD(acc + i), K(CVT##_in)(c + i)));   \
            }                                                                      \
            for (size_t i = 0; i < m; i += VW)                                     \
                K(CVT##_out)(dd + i, VLOAD(acc + i));                              \
        }                                                                          \
        if (nv < n) {                                                              \
            uint16_t t[VW] = {0}, r[VW];                                           \
            memcpy(t, (const uint16_t *)s[0] + nv, (n - nv) * 2);                  \
            VEC x = K(CVT##_in)(t);                                                \
            for (int j = 1; j < k; j++) {                                          \
                memcpy(t, (const uint16_t *)s[j] + nv, (n - nv) * 2);              \
                x = K(VOP)(x, K(CVT##_in)(t));                                     \
            }                                                                      \
            K(CVT##_out)(r, x);                                                    \
            memcpy(d + nv, r, (n - nv) * 2);                                       \
        }                                                                          \
    }

#if LVL_AVX512
// float16 min and max pick an operand, so they need no conversion, which is what bounds
// the kernels above (on a CPU without AVX512_FP16, VCVTPH2PS alone takes about twice
// a copy's time). h_key maps a half's bits to a 16-bit key whose unsigned order is the
// numbers' order (sign-magnitude, negatives inverted), then rotates it by bias so that
// every NaN sorts below every number (min, bias 0x3ff: numbers at 0x7fe and up) or
// above it (max, bias -0x3ff: numbers at 0xf801 and down). So a running value that is
// a NaN never gives way, and a source's NaN, which fails the bound, is never taken: the
// reference's float32 comparisons. Lanes where both operands are zeros keep the running
// value (+0 and -0 compare equal). A block whose running values held a NaN then has
// its NaNs made quiet, as the reference writes them (sign and payload kept).
static inline __m512i K(h_key)(__m512i h, short bias) {
    __m512i s = _mm512_srai_epi16(h, 15);
    // 0x1e: h ^ (s | 0x8000)
    __m512i u = _mm512_ternarylogic_epi32(h, s, _mm512_set1_epi16((short)0x8000), 0x1e);
    return _mm512_add_epi16(u, _mm512_set1_epi16(bias));
}

static void K(h_quiet)(uint16_t *d, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((d[i] & 0x7fff) > 0x7c00)
            d[i] |= 0x200;
}

#define H_MIN_NUM(nz, ky) _mm512_mask_cmpge_epu16_mask(nz, ky, _mm512_set1_epi16(0x7fe))
#define H_MIN_TAKE(num, ky, kx) _mm512_mask_cmplt_epu16_mask(num, ky, kx)
#define H_MIN_NAN(acc) _mm512_cmplt_epu16_mask(acc, _mm512_set1_epi16(0x7fe))
#define H_MAX_NUM(nz, ky) _mm512_mask_cmple_epu16_mask(nz, ky, _mm512_set1_epi16((short)0xf801))
#define H_MAX_TAKE(num, ky, kx) _mm512_mask_cmpgt_epu16_mask(num, ky, kx)
#define H_MAX_NAN(acc) _mm512_cmpgt_epu16_mask(acc, _mm512_set1_epi16((short)0xf801))

// HSEL_STEP folds 32 halves (LM masks a shorter tail) of b into a's, written to dd
// (where a is dd, only the lanes that take b's are stored); acc gathers the running
// values' keys for the NaN test.
#define HSEL_STEP(LM, BIAS, NUM, TAKE, ACCOP)                                      \
    do {                                                                           \
        __m512i x = _mm512_maskz_loadu_epi16(LM, a + i), y = _mm512_maskz_loadu_epi16(LM, b + i); \
        __m512i kx = K(h_key)(x, BIAS), ky = K(h_key)(y, BIAS);                    \
        __mmask32 nz = _mm512_test_epi16_mask(_mm512_or_si512(x, y), _mm512_set1_epi16(0x7fff)); \
        __mmask32 take = TAKE(NUM(nz, ky), ky, kx);                                \
        acc = ACCOP(acc, kx);                                                      \
        if (inplace)                                                               \
            _mm512_mask_storeu_epi16(dd + i, take & (LM), y);                      \
        else                                                                       \
            _mm512_mask_storeu_epi16(dd + i, LM, _mm512_mask_blend_epi16(take, x, y)); \
    } while (0)

#define HSEL(NAME, BIAS, NUM, TAKE, NANTEST, ACCOP, ACC0)                          \
    static void K(NAME)(void *dv, const void *const *s, int k, size_t n) {         \
        uint16_t *d = dv;                                                          \
        const size_t blk = IBC_BLOCK / 2;                                          \
        for (size_t o = 0; o < n; o += blk) {                                      \
            size_t m = n - o < blk ? n - o : blk, mv = m - m % 32;                 \
            uint16_t *dd = d + o;                                                  \
            __m512i acc = ACC0;                                                    \
            for (int j = 1; j < k; j++) {                                          \
                const uint16_t *a = j == 1 ? (const uint16_t *)s[0] + o : dd;      \
                const uint16_t *b = (const uint16_t *)s[j] + o;                    \
                const int inplace = a == dd; /* x is in place: store y where taken */ \
                size_t i = 0;                                                      \
                _Pragma("GCC unroll 4") for (; i < mv; i += 32)                    \
                    HSEL_STEP((__mmask32)~0u, BIAS, NUM, TAKE, ACCOP);             \
                if (i < m)                                                         \
                    HSEL_STEP(_bzhi_u32(~0u, (unsigned)(m - i)), BIAS, NUM, TAKE, ACCOP); \
            }                                                                      \
            if (NANTEST(acc))                                                      \
                K(h_quiet)(dd, m);                                                 \
        }                                                                          \
    }

#define HALF_MINMAX(TN)                                                            \
    HSEL(TN##_min, 0x3ff, H_MIN_NUM, H_MIN_TAKE, H_MIN_NAN, _mm512_min_epu16, _mm512_set1_epi16(-1)) \
    HSEL(TN##_max, -0x3ff, H_MAX_NUM, H_MAX_TAKE, H_MAX_NAN, _mm512_max_epu16, _mm512_setzero_si512())
#else
#define HALF_MINMAX(TN) HKERN(TN##_min, TN, v_min) HKERN(TN##_max, TN, v_max)
#endif

#define HALF_KERNELS(TN)                                                           \
    HKERN(TN##_sum, TN, v_sum) HKERN(TN##_prod, TN, v_prod)                        \
    HALF_MINMAX(TN)                                                                \
    HKERN(TN##_land, TN, v_land) HKERN(TN##_lor, TN, v_lor)                        \
    HKERN(TN##_lxor, TN, v_lxor)

HALF_KERNELS(f16)
#undef HALF_MINMAX

// HSCALE divides halves by c in float32, rounding once.
#define HSCALE(TN)                                                                 \
    static void K(scale_##TN)(void *dv, size_t n, double c) {                      \
        uint16_t *d = dv;                                                          \
        size_t nv = n - n % VW;                                                    \
        for (size_t i = 0; i < nv; i += VW)                                        \
            K(TN##_out)(d + i, K(v_div)(K(TN##_in)(d + i), (float)c));             \
        if (nv < n) {                                                              \
            uint16_t t[VW] = {0};                                                  \
            memcpy(t, d + nv, (n - nv) * 2);                                       \
            K(TN##_out)(t, K(v_div)(K(TN##_in)(t), (float)c));                     \
            memcpy(d + nv, t, (n - nv) * 2);                                       \
        }                                                                          \
    }

HSCALE(f16)
#undef VEC
#undef VW
#undef VLOAD
#undef VSTORE
#define F16_ROW ROW_FLOAT(f16)
#define F16_SCALE K(scale_f16)
#else
#define F16_ROW {0}
#define F16_SCALE 0
#endif

// Scaling ends an average: the element type's division, correctly rounded.
static void K(scale_f32)(void *dv, size_t n, double c) {
    float *d = dv, cf = (float)c;
    for (size_t i = 0; i < n; i++)
        d[i] /= cf;
}

static void K(scale_f64)(void *dv, size_t n, double c) {
    double *d = dv;
    for (size_t i = 0; i < n; i++)
        d[i] /= c;
}

#define ROW_INT(TN)                                                                \
    {0, K(TN##_sum), K(TN##_prod), K(TN##_min), K(TN##_max), K(TN##_band),         \
     K(TN##_bor), K(TN##_bxor), K(TN##_land), K(TN##_lor), K(TN##_lxor),           \
     K(TN##_sum)}
#define ROW_FLOAT(TN)                                                              \
    {0, K(TN##_sum), K(TN##_prod), K(TN##_min), K(TN##_max), 0, 0, 0,              \
     K(TN##_land), K(TN##_lor), K(TN##_lxor), K(TN##_sum)}

static kern_fn *const K(kernels)[IBC_NDT][IBC_NOP] = {
    [IBC_I8] = ROW_INT(i8),     [IBC_I16] = ROW_INT(i16), [IBC_I32] = ROW_INT(i32),
    [IBC_I64] = ROW_INT(i64),   [IBC_U8] = ROW_INT(u8),   [IBC_U16] = ROW_INT(u16),
    [IBC_U32] = ROW_INT(u32),   [IBC_U64] = ROW_INT(u64), [IBC_F16] = F16_ROW,
    [IBC_BF16] = ROW_FLOAT(bf16), [IBC_F32] = ROW_FLOAT(f32), [IBC_F64] = ROW_FLOAT(f64),
};

static scale_fn *const K(scalers)[IBC_NDT] = {
    [IBC_F16] = F16_SCALE, [IBC_BF16] = K(scale_bf16), [IBC_F32] = K(scale_f32),
    [IBC_F64] = K(scale_f64),
};

#undef F16_ROW
#undef F16_SCALE
