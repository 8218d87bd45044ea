/* quant_avx2.c: AVX2 + FMA + F16C kernels. Every function carries its own target attribute so
 * the build does not depend on -march; quant.c hands them out only when the CPU has these
 * extensions (simd_level_supported). The integer inner sums are the scalar kernels' exactly;
 * only the order of the float accumulation differs.
 *
 * The recurring trick: AVX2 multiplies bytes only as unsigned x signed (maddubs), so a signed x
 * signed byte product is computed as |a| x (b with a's sign), and an unsigned weight level times
 * a signed activation is used as is.
 */
#include "math/kernels.h"
#include "math/blocks.h"

#include <immintrin.h>
#include <string.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

AVX2 static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AVX2 static inline int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* 8 int32 sums of 4 adjacent products of signed bytes a and b. */
AVX2 static inline __m256i dot_s8(__m256i a, __m256i b) {
    __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* The 32 nibbles of 16 bytes as bytes: low nibbles first, then high nibbles. */
AVX2 static inline __m256i nibbles(const uint8_t *p) {
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    __m256i both = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    return _mm256_and_si256(both, _mm256_set1_epi8(0xF));
}

/* The fifth bits of a Q5_0/Q5_1 block as 0x10 in each of 32 bytes (bit j of qh -> byte j). */
AVX2 static inline __m256i q5_high_bits(const uint8_t qh_bytes[4]) {
    uint32_t qh;
    memcpy(&qh, qh_bytes, 4);
    const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000ll, 0x0101010101010101ll,
                                            0x0202020202020202ll, 0x0303030303030303ll);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
    __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

/* ---- dot products ----------------------------------------------------------------------- */

AVX2 static float dot_f32(int64_t n, const void *w, const void *x) {
    const float *a = w, *b = x;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    float s = hsum_ps(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

AVX2 static float dot_f16(int64_t n, const void *w, const void *x) {
    const uint16_t *a = w, *b = x;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            __m256 va = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i + 8 * k)));
            __m256 vb = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i + 8 * k)));
            acc[k] = _mm256_fmadd_ps(va, vb, acc[k]);
        }
    float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) s += h2f(a[i]) * h2f(b[i]);
    return s;
}

AVX2 static float dot_q8_0(int64_t n, const void *w, const void *x) {
    const block_q8_0 *a = w, *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256i qa = _mm256_loadu_si256((const __m256i *)a[i].qs);
        __m256i qb = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256 d = _mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_s8(qa, qb)), acc);
    }
    return hsum_ps(acc);
}

AVX2 static float dot_q4_0(int64_t n, const void *w, const void *x) {
    const block_q4_0 *a = w;
    const block_q8_0 *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK4_0; i++) {
        __m256i qa = _mm256_sub_epi8(nibbles(a[i].qs), _mm256_set1_epi8(8));
        __m256i qb = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256 d = _mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_s8(qa, qb)), acc);
    }
    return hsum_ps(acc);
}

AVX2 static float dot_q5_0(int64_t n, const void *w, const void *x) {
    const block_q5_0 *a = w;
    const block_q8_0 *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK5_0; i++) {
        __m256i q = _mm256_or_si256(nibbles(a[i].qs), q5_high_bits(a[i].qh));
        __m256i qa = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
        __m256i qb = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256 d = _mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_s8(qa, qb)), acc);
    }
    return hsum_ps(acc);
}

/* Q4_1/Q5_1 . Q8_1: unsigned levels times signed activations, plus min x (d*sum q8). */
AVX2 static inline __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

AVX2 static float dot_q4_1(int64_t n, const void *w, const void *x) {
    const block_q4_1 *a = w;
    const block_q8_1 *b = x;
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        __m256i qb = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256 d = _mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8s8(nibbles(a[i].qs), qb)), acc);
        mins += h2f(a[i].m) * h2f(b[i].s);
    }
    return hsum_ps(acc) + mins;
}

AVX2 static float dot_q5_1(int64_t n, const void *w, const void *x) {
    const block_q5_1 *a = w;
    const block_q8_1 *b = x;
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        __m256i q = _mm256_or_si256(nibbles(a[i].qs), q5_high_bits(a[i].qh));
        __m256i qb = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256 d = _mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8s8(q, qb)), acc);
        mins += h2f(a[i].m) * h2f(b[i].s);
    }
    return hsum_ps(acc) + mins;
}

/* The 8 scales and 8 mins of a Q4_K/Q5_K super-block as bytes (see k4_scale_min). */
static inline void k4_unpack_scales(const uint8_t *q, uint8_t sc[8], uint8_t mn[8]) {
    uint32_t u[3], s[2], m[2];
    memcpy(u, q, 12);
    const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, top2 = 0xc0c0c0c0;
    s[0] = u[0] & low6;
    m[0] = u[1] & low6;
    s[1] = (u[2] & low4) | ((u[0] & top2) >> 2);
    m[1] = ((u[2] >> 4) & low4) | ((u[1] & top2) >> 2);
    memcpy(sc, s, 8);
    memcpy(mn, m, 8);
}

/* sum_j mins[j] * (bsums[2j] + bsums[2j+1]) */
AVX2 static inline int k4_mins_dot(const uint8_t mn[8], const int16_t bsums[16]) {
    __m128i m8 = _mm_loadl_epi64((const __m128i *)mn);
    __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8)); /* each min twice */
    __m256i bs = _mm256_loadu_si256((const __m256i *)bsums);
    return hsum_epi32(_mm256_madd_epi16(m16, bs));
}

/* One Q4_K/Q5_K super-block: sum_j sc[j] * (levels . q8 over sub-block j), levels of the 64
 * elements of chunk k given by lo(k) (sub-block 2k) and hi(k) (sub-block 2k+1). */
#define K45_SUPERBLOCK(LEVELS_LO, LEVELS_HI)                                                  \
    __m256i sumi = _mm256_setzero_si256();                                                    \
    for (int k = 0; k < 4; k++) {                                                             \
        __m256i q8l = _mm256_loadu_si256((const __m256i *)(b[i].qs + 64 * k));                \
        __m256i q8h = _mm256_loadu_si256((const __m256i *)(b[i].qs + 64 * k + 32));           \
        __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(LEVELS_LO, q8l),                  \
                                       _mm256_set1_epi16(sc[2 * k]));                         \
        __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(LEVELS_HI, q8h),                  \
                                       _mm256_set1_epi16(sc[2 * k + 1]));                     \
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));                              \
    }

AVX2 static float dot_q4_K(int64_t n, const void *w, const void *x) {
    const block_q4_K *a = w;
    const block_q8_K *b = x;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], mn[8];
        k4_unpack_scales(a[i].scales, sc, mn);
        mins += h2f(a[i].dmin) * b[i].d * (float)k4_mins_dot(mn, b[i].bsums);
        __m256i q4;
        K45_SUPERBLOCK((q4 = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * k)),
                        _mm256_and_si256(q4, m4)),
                       _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4))
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i].d) * b[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc) - mins;
}

AVX2 static float dot_q5_K(int64_t n, const void *w, const void *x) {
    const block_q5_K *a = w;
    const block_q8_K *b = x;
    const __m256i m4 = _mm256_set1_epi8(0xF), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], mn[8];
        k4_unpack_scales(a[i].scales, sc, mn);
        mins += h2f(a[i].dmin) * b[i].d * (float)k4_mins_dot(mn, b[i].bsums);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)a[i].qh);
        __m256i q4;
        /* fifth bit of chunk k: bit 2k (low half) and 2k+1 (high half) of each qh byte */
#define HIGH(bitn) _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, bitn), one), 4)
        K45_SUPERBLOCK((q4 = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * k)),
                        _mm256_or_si256(_mm256_and_si256(q4, m4), HIGH(2 * k))),
                       _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4, 4), m4), HIGH(2 * k + 1)))
#undef HIGH
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i].d) * b[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc) - mins;
}

AVX2 static float dot_q6_K(int64_t n, const void *w, const void *x) {
    const block_q6_K *a = w;
    const block_q8_K *b = x;
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3);
    const __m256i off = _mm256_set1_epi8(32);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = a[i].ql + 64 * h;
            const int8_t *sc = a[i].scales + 8 * h;
            const int8_t *q8 = b[i].qs + 128 * h;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)(a[i].qh + 32 * h));
            __m256i q[4] = {
                _mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
            };
            for (int k = 0; k < 4; k++) {
                __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * k), m2), 4);
                __m256i lv = _mm256_or_si256(q[k], high); /* 0..63: the level + 32 */
                __m256i y8 = _mm256_loadu_si256((const __m256i *)(q8 + 32 * k));
                __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(lv, y8), _mm256_maddubs_epi16(off, y8));
                __m256i s16 = _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, s16));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i].d) * b[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

/* ---- dequantization --------------------------------------------------------------------- */

/* y[0..31] = d * bytes (signed) */
AVX2 static inline void store_scaled_s8(float *y, __m256i q, __m256 d) {
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    _mm256_storeu_ps(y, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
    _mm256_storeu_ps(y + 16, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
    _mm256_storeu_ps(y + 24, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
}

/* y[0..31] = d * bytes (unsigned) - m */
AVX2 static inline void store_affine_u8(float *y, __m256i q, __m256 d, __m256 m) {
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    _mm256_storeu_ps(y, _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), m));
    _mm256_storeu_ps(y + 8, _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), m));
    _mm256_storeu_ps(y + 16, _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), m));
    _mm256_storeu_ps(y + 24, _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), m));
}

AVX2 static void to_float_f16(const void *src, float *y, int64_t n) {
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    for (; i < n; i++) y[i] = h2f(h[i]);
}

AVX2 static void to_float_q8_0(const void *src, float *y, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0)
        store_scaled_s8(y, _mm256_loadu_si256((const __m256i *)b[i].qs), _mm256_set1_ps(h2f(b[i].d)));
}

AVX2 static void to_float_q4_0(const void *src, float *y, int64_t n) {
    const block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++, y += QK4_0)
        store_scaled_s8(y, _mm256_sub_epi8(nibbles(b[i].qs), _mm256_set1_epi8(8)), _mm256_set1_ps(h2f(b[i].d)));
}

AVX2 static void to_float_q5_0(const void *src, float *y, int64_t n) {
    const block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK5_0; i++, y += QK5_0) {
        __m256i q = _mm256_or_si256(nibbles(b[i].qs), q5_high_bits(b[i].qh));
        store_scaled_s8(y, _mm256_sub_epi8(q, _mm256_set1_epi8(16)), _mm256_set1_ps(h2f(b[i].d)));
    }
}

/* The _1 types store y = d*q + m: the affine store subtracts, so pass -m. */
AVX2 static void to_float_q4_1(const void *src, float *y, int64_t n) {
    const block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK4_1; i++, y += QK4_1)
        store_affine_u8(y, nibbles(b[i].qs), _mm256_set1_ps(h2f(b[i].d)), _mm256_set1_ps(-h2f(b[i].m)));
}

AVX2 static void to_float_q5_1(const void *src, float *y, int64_t n) {
    const block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK5_1; i++, y += QK5_1) {
        __m256i q = _mm256_or_si256(nibbles(b[i].qs), q5_high_bits(b[i].qh));
        store_affine_u8(y, q, _mm256_set1_ps(h2f(b[i].d)), _mm256_set1_ps(-h2f(b[i].m)));
    }
}

AVX2 static void to_float_q4_K(const void *src, float *y, int64_t n) {
    const block_q4_K *b = src;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        uint8_t sc[8], mn[8];
        k4_unpack_scales(b[i].scales, sc, mn);
        float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
        for (int k = 0; k < 4; k++) {
            __m256i q4 = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * k));
            store_affine_u8(y + 64 * k, _mm256_and_si256(q4, m4), _mm256_set1_ps(d * sc[2 * k]),
                            _mm256_set1_ps(dmin * mn[2 * k]));
            store_affine_u8(y + 64 * k + 32, _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4),
                            _mm256_set1_ps(d * sc[2 * k + 1]), _mm256_set1_ps(dmin * mn[2 * k + 1]));
        }
    }
}

AVX2 static void to_float_q5_K(const void *src, float *y, int64_t n) {
    const block_q5_K *b = src;
    const __m256i m4 = _mm256_set1_epi8(0xF), one = _mm256_set1_epi8(1);
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        uint8_t sc[8], mn[8];
        k4_unpack_scales(b[i].scales, sc, mn);
        float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)b[i].qh);
        for (int k = 0; k < 4; k++) {
            __m256i q4 = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * k));
            __m256i hl = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), one), 4);
            __m256i hh = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k + 1), one), 4);
            store_affine_u8(y + 64 * k, _mm256_or_si256(_mm256_and_si256(q4, m4), hl),
                            _mm256_set1_ps(d * sc[2 * k]), _mm256_set1_ps(dmin * mn[2 * k]));
            store_affine_u8(y + 64 * k + 32,
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4, 4), m4), hh),
                            _mm256_set1_ps(d * sc[2 * k + 1]), _mm256_set1_ps(dmin * mn[2 * k + 1]));
        }
    }
}

AVX2 static void to_float_q6_K(const void *src, float *y, int64_t n) {
    const block_q6_K *b = src;
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        float d = h2f(b[i].d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b[i].ql + 64 * h;
            const int8_t *sc = b[i].scales + 8 * h;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)(b[i].qh + 32 * h));
            __m256i q[4] = {
                _mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
            };
            for (int k = 0; k < 4; k++) {
                __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * k), m2), 4);
                __m256i lv = _mm256_sub_epi8(_mm256_or_si256(q[k], high), off);
                /* 16 elements per scale: convert each 128-bit half with its own scale */
                float *yk = y + 128 * h + 32 * k;
                __m128i lo = _mm256_castsi256_si128(lv), hi = _mm256_extracti128_si256(lv, 1);
                __m256 d0 = _mm256_set1_ps(d * sc[2 * k]), d1 = _mm256_set1_ps(d * sc[2 * k + 1]);
                _mm256_storeu_ps(yk, _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
                _mm256_storeu_ps(yk + 8, _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
                _mm256_storeu_ps(yk + 16, _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
                _mm256_storeu_ps(yk + 24, _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
            }
        }
    }
}

const struct quant_kernels quant_kernels_avx2 = {
    .vec_dot = {
        [GGML_TYPE_F32] = dot_f32, [GGML_TYPE_F16] = dot_f16, [GGML_TYPE_Q8_0] = dot_q8_0,
        [GGML_TYPE_Q4_0] = dot_q4_0, [GGML_TYPE_Q5_0] = dot_q5_0, [GGML_TYPE_Q4_1] = dot_q4_1,
        [GGML_TYPE_Q5_1] = dot_q5_1, [GGML_TYPE_Q4_K] = dot_q4_K, [GGML_TYPE_Q5_K] = dot_q5_K,
        [GGML_TYPE_Q6_K] = dot_q6_K,
    },
    .to_float = {
        [GGML_TYPE_F16] = to_float_f16, [GGML_TYPE_Q8_0] = to_float_q8_0,
        [GGML_TYPE_Q4_0] = to_float_q4_0, [GGML_TYPE_Q5_0] = to_float_q5_0,
        [GGML_TYPE_Q4_1] = to_float_q4_1, [GGML_TYPE_Q5_1] = to_float_q5_1,
        [GGML_TYPE_Q4_K] = to_float_q4_K, [GGML_TYPE_Q5_K] = to_float_q5_K,
        [GGML_TYPE_Q6_K] = to_float_q6_K,
    },
};
