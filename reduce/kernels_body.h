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

// Half-precision conversions to and from float32. The float32 side is written
// through a may_alias view of its bits.
static inline void K(bf16_in)(float *f, const uint16_t *h, size_t m) {
    u32a *u = (u32a *)f;
    for (size_t i = 0; i < m; i++)
        u[i] = (uint32_t)h[i] << 16;
}

// bf16_out rounds to nearest even; a NaN keeps its top bits and is made quiet.
static inline void K(bf16_out)(uint16_t *h, const float *f, size_t m) {
    const u32a *u = (const u32a *)f;
    for (size_t i = 0; i < m; i++) {
        uint32_t b = u[i];
        uint32_t r = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
        uint32_t q = (b >> 16) | 0x40u;
        h[i] = (uint16_t)((b & 0x7fffffffu) > 0x7f800000u ? q : r);
    }
}

#if LVL_F16C
static inline void K(f16_in)(float *f, const uint16_t *h, size_t m) {
    size_t i = 0;
    for (; i + 8 <= m; i += 8)
        _mm256_storeu_ps(f + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    if (i < m) {
        uint16_t th[8] = {0};
        float tf[8];
        memcpy(th, h + i, (m - i) * 2);
        _mm256_storeu_ps(tf, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)th)));
        memcpy(f + i, tf, (m - i) * 4);
    }
}

// f16_8 converts 8 floats with round to nearest even (the immediate, not MXCSR),
// and writes every NaN as the reference does: its sign and the quiet bit alone.
static inline __m128i K(f16_8)(__m256 v) {
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7fff)), _mm_set1_epi16(0x7c00));
    __m128i q = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16((short)0x8000)), _mm_set1_epi16(0x7e00));
    return _mm_blendv_epi8(h, q, nan);
}

static inline void K(f16_out)(uint16_t *h, const float *f, size_t m) {
    size_t i = 0;
    for (; i + 8 <= m; i += 8)
        _mm_storeu_si128((__m128i *)(h + i), K(f16_8)(_mm256_loadu_ps(f + i)));
    if (i < m) {
        float tf[8] = {0};
        uint16_t th[8];
        memcpy(tf, f + i, (m - i) * 4);
        _mm_storeu_si128((__m128i *)th, K(f16_8)(_mm256_loadu_ps(tf)));
        memcpy(h + i, th, (m - i) * 2);
    }
}
#endif

// HKERN widens a block of every source to float32, folds in float32 and rounds the
// block once at the end.
#define HKERN(NAME, CVT, OP)                                                       \
    static void K(NAME)(void *dv, const void *const *s, int k, size_t n) {         \
        uint16_t *d = dv;                                                          \
        float acc[IBC_HBLOCK], t[IBC_HBLOCK];                                      \
        for (size_t o = 0; o < n; o += IBC_HBLOCK) {                               \
            size_t m = n - o < IBC_HBLOCK ? n - o : IBC_HBLOCK;                    \
            K(CVT##_in)(acc, (const uint16_t *)s[0] + o, m);                       \
            for (int j = 1; j < k; j++) {                                          \
                K(CVT##_in)(t, (const uint16_t *)s[j] + o, m);                     \
                for (size_t i = 0; i < m; i++)                                     \
                    acc[i] = OP(float, float, acc[i], t[i]);                       \
            }                                                                      \
            K(CVT##_out)(d + o, acc, m);                                           \
        }                                                                          \
    }

#define HALF_KERNELS(TN)                                                           \
    HKERN(TN##_sum, TN, OP_SUM) HKERN(TN##_prod, TN, OP_PROD)                      \
    HKERN(TN##_min, TN, OP_MIN) HKERN(TN##_max, TN, OP_MAX)                        \
    HKERN(TN##_land, TN, FOP_LAND) HKERN(TN##_lor, TN, FOP_LOR)                    \
    HKERN(TN##_lxor, TN, FOP_LXOR)

HALF_KERNELS(bf16)
#if LVL_F16C
HALF_KERNELS(f16)
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

#define HSCALE(TN)                                                                 \
    static void K(scale_##TN)(void *dv, size_t n, double c) {                      \
        uint16_t *d = dv;                                                          \
        float f[IBC_HBLOCK], cf = (float)c;                                        \
        for (size_t o = 0; o < n; o += IBC_HBLOCK) {                               \
            size_t m = n - o < IBC_HBLOCK ? n - o : IBC_HBLOCK;                    \
            K(TN##_in)(f, d + o, m);                                               \
            for (size_t i = 0; i < m; i++)                                         \
                f[i] /= cf;                                                        \
            K(TN##_out)(d + o, f, m);                                              \
        }                                                                          \
    }

HSCALE(bf16)
#if LVL_F16C
HSCALE(f16)
#define F16_ROW ROW_FLOAT(f16)
#define F16_SCALE K(scale_f16)
#else
#define F16_ROW {0}
#define F16_SCALE 0
#endif

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
