// One instruction-set level's kernels. kernels.c includes this file once per level,
// with LVL naming the level and the level's target options in effect, so that the
// compiler vectorizes the same loops for each; LVL_F16C says whether the level has
// the F16C conversions.

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

#if LVL_F16C
// Half precision: VEC holds VW float32 lanes; f16_in/bf16_in widen VW halves to
// them, f16_out/bf16_out round VW lanes back to nearest even. A NaN comes out as the
// reference writes it: a float16 NaN as its sign and the quiet bit alone, a bfloat16
// NaN as its top bits made quiet.
#if LVL_AVX512
#define VEC __m512
#define VW 16
#define VLOAD _mm512_loadu_ps
#define VSTORE _mm512_storeu_ps
static inline VEC K(f16_in)(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline void K(f16_out)(uint16_t *p, VEC v) {
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    __m256i nan = _mm256_cmpgt_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16(0x7c00));
    __m256i q = _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16((short)0x8000)), _mm256_set1_epi16(0x7e00));
    _mm256_storeu_si256((__m256i *)p, _mm256_blendv_epi8(h, q, nan));
}
static inline VEC K(bf16_in)(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
static inline void K(bf16_out)(uint16_t *p, VEC v) {
    __m512i b = _mm512_castps_si512(v), hi = _mm512_srli_epi32(b, 16);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1)))), 16);
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(r));
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
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7fff)), _mm_set1_epi16(0x7c00));
    __m128i q = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16((short)0x8000)), _mm_set1_epi16(0x7e00));
    _mm_storeu_si128((__m128i *)p, _mm_blendv_epi8(h, q, nan));
}
static inline VEC K(bf16_in)(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static inline void K(bf16_out)(uint16_t *p, VEC v) {
    __m256i b = _mm256_castps_si256(v), hi = _mm256_srli_epi32(b, 16);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(b, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(hi, _mm256_set1_epi32(1)))), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    // Every lane holds 16 bits: pack them (per 128-bit half), then gather the halves.
    __m256i pk = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(pk));
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

// HKERN folds k sources of halves: with two it widens, combines and rounds in one
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

#define HALF_KERNELS(TN)                                                           \
    HKERN(TN##_sum, TN, v_sum) HKERN(TN##_prod, TN, v_prod)                        \
    HKERN(TN##_min, TN, v_min) HKERN(TN##_max, TN, v_max)                          \
    HKERN(TN##_land, TN, v_land) HKERN(TN##_lor, TN, v_lor)                        \
    HKERN(TN##_lxor, TN, v_lxor)

HALF_KERNELS(bf16)
HALF_KERNELS(f16)

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

HSCALE(bf16)
HSCALE(f16)
#undef VEC
#undef VW
#undef VLOAD
#undef VSTORE
#define HALF_ROW(TN) ROW_FLOAT(TN)
#define HALF_SCALE(TN) K(scale_##TN)
#else
#define HALF_ROW(TN) {0}
#define HALF_SCALE(TN) 0
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
    [IBC_U32] = ROW_INT(u32),   [IBC_U64] = ROW_INT(u64), [IBC_F16] = HALF_ROW(f16),
    [IBC_BF16] = HALF_ROW(bf16), [IBC_F32] = ROW_FLOAT(f32), [IBC_F64] = ROW_FLOAT(f64),
};

static scale_fn *const K(scalers)[IBC_NDT] = {
    [IBC_F16] = HALF_SCALE(f16), [IBC_BF16] = HALF_SCALE(bf16), [IBC_F32] = K(scale_f32),
    [IBC_F64] = K(scale_f64),
};

#undef HALF_ROW
#undef HALF_SCALE
