/* lowbit_avx512.c: AVX-512 VNNI kernels of the low-bit weight types Q2_K, Q3_K, IQ4_XS (against
 * Q8_K activations) and IQ4_NL (against Q8_0): the one-row dot, the 4-token dot4 (a weight row
 * decoded once for four tokens) and the 4-row dotr of decode steps (four weight rows against one
 * token, sharing its loads; rows ahead prefetched into L2 as kquant_avx512.c does). Registered as
 * quant_kernels_avx512_lowbit (kernels.h).
 *
 * Every kernel returns bit for bit the scalar kernel of lowbit.c (whose header gives the
 * reference's orders): only the integers formed before each float step matter, and those do not
 * depend on the order of their additions. A step of the super-block loop handles 64 elements in
 * one register: Q2_K/Q3_K take the 2-bit planes j of both 128-element halves (elements 32j..+31
 * and 128 + 32j..+31), IQ4_XS two 32-element sub-blocks, IQ4_NL two blocks. Products of unsigned
 * levels (Q2_K; Q3_K as level + 4, the 4 * activation pair sums subtracted) go through vpmaddubsw
 * into int16 pairs and vpdpwssd applies each pair's scale; the signed IQ4 grid values multiply as
 * |v| x (activation with v's sign).
 */
#include "math/kernels.h"
#include "math/blocks.h"
#include "math/simd_avx2.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

/* Units of a kernel call: R weight rows times T tokens, R * T <= 4 (dot: 1 x 1, dot4: 1 x 4,
 * dotr: 4 x 1); unit u = r * T + t, out[u] its dot. */
#define MAX_UNITS 4

/* ---- shared pieces ------------------------------------------------------------------------- */

/* How far ahead dotr prefetches (kquant_avx512.c measured 16 KB into L2 for Q4_K rows): in
 * whole groups of four rows, the share of super-block i fetched at step i. */
#define DOTR_PREFETCH_BYTES 16384
AVX512 INLINE void prefetch_share(const uint8_t *ahead, int64_t i, size_t block_bytes) {
    const uint8_t *p = ahead + (size_t)i * 4 * block_bytes;
    for (size_t off = 0; off < 4 * block_bytes; off += 64) _mm_prefetch((const char *)p + off, _MM_HINT_T1);
}
static inline const uint8_t *rows_ahead(const void *w, size_t w_stride) {
    const size_t group = 4 * w_stride;
    return (const uint8_t *)w + (DOTR_PREFETCH_BYTES + group - 1) / group * group;
}

/* The 64 activations of plane j of a super-block: elements 32j..32j+31 and 128+32j..+31. */
AVX512 INLINE __m512i plane_acts(const int8_t *q8, int j) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(q8 + 32 * j))),
                              _mm256_loadu_si256((const __m256i *)(q8 + 128 + 32 * j)), 1);
}

/* vpermw selectors of plane j's scales from the 16 sub-block scales as int16: int16 lane p
 * (elements 2p, 2p+1 of the register) belongs to sub-block 2j + p/8 (p < 16) or 8 + 2j + (p-16)/8. */
AVX512 INLINE __m512i plane_scale_index(int j) {
    const short a = (short)(2 * j), b = (short)(8 + 2 * j);
    return _mm512_set_epi16(b + 1, b + 1, b + 1, b + 1, b + 1, b + 1, b + 1, b + 1, b, b, b, b, b, b, b, b,
                            a + 1, a + 1, a + 1, a + 1, a + 1, a + 1, a + 1, a + 1, a, a, a, a, a, a, a, a);
}

/* 16 int32 lanes to the reference's 8: lane L and L + 8 hold elements 4(L % 8).. of a 32-group. */
AVX512 INLINE __m256i fold_lanes(__m512i s) {
    return _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
}

/* The grid of IQ4 in magnitudes (|v|, as unsigned bytes) in every 128-bit lane; a nibble below 8
 * is a negative value. */
AVX512 INLINE __m512i iq4_abs_lut(void) {
    const __m128i v = _mm_loadu_si128((const __m128i *)iq4nl_levels);
    return _mm512_broadcast_i32x4(_mm_abs_epi8(v));
}

/* The nibbles of two 16-byte groups a, b as [lo(a) hi(a) lo(b) hi(b)] (128-bit lanes): two IQ4
 * blocks, or two IQ4_XS sub-blocks, in element order. */
AVX512 INLINE __m512i nibbles2(const uint8_t *a, const uint8_t *b) {
    const __m512i shifts = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
    __m512i v = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)a)), 0xFF00,
                                            _mm_loadu_si128((const __m128i *)b));
    return _mm512_and_si512(_mm512_srlv_epi64(v, shifts), _mm512_set1_epi8(0xF));
}

/* ---- Q2_K --------------------------------------------------------------------------------- */

/* Four units' A (16 int32 lanes each) and M (8 lanes each) summed into [A0 M0 A1 M1 A2 M2 A3 M3]. */
AVX512 INLINE __m256i reduce_am4(const __m512i a[4], const __m256i m[4]) {
    __m256i t[4];
#pragma GCC unroll 4
    for (int u = 0; u < 4; u++) t[u] = _mm256_hadd_epi32(fold_lanes(a[u]), m[u]);
    /* per 128-bit half: [A0 M0 A1 M1] partial sums of t0, t1; [A2 M2 A3 M3] of t2, t3 */
    __m256i u01 = _mm256_hadd_epi32(t[0], t[1]), u23 = _mm256_hadd_epi32(t[2], t[3]);
    return _mm256_add_epi32(_mm256_permute2x128_si256(u01, u23, 0x20), _mm256_permute2x128_si256(u01, u23, 0x31));
}

AVX512 INLINE void q2_K_n(int64_t n, const void *w, size_t w_stride, const int R, const void *x, size_t x_stride,
                          const int T, float *out) {
    const block_q2_K *a[MAX_UNITS];
    const block_q8_K *b[MAX_UNITS];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) a[r] = (const block_q2_K *)((const uint8_t *)w + r * w_stride);
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) b[t] = (const block_q8_K *)((const uint8_t *)x + t * x_stride);
    const uint8_t *ahead = R > 1 ? rows_ahead(w, w_stride) : NULL;
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0xF);
    __m256 acc8 = _mm256_setzero_ps(); /* R * T = 4: the chains [a0 m0 a1 m1 ...] */
    float fa = 0, fm = 0;              /* R * T = 1 */
    for (int64_t i = 0; i < n / QK_K; i++) {
        if (R > 1) prefetch_share(ahead, i, sizeof(block_q2_K));
        __m512i sc16[MAX_UNITS], qs[MAX_UNITS];
        __m256i mins[MAX_UNITS];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m128i sm = _mm_loadu_si128((const __m128i *)a[r][i].scales);
            sc16[r] = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sm, m4)));
            mins[r] = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), m4));
            qs[r] = _mm512_loadu_si512(a[r][i].qs);
        }
        __m512i acc[MAX_UNITS];
#pragma GCC unroll 4
        for (int u = 0; u < R * T; u++) acc[u] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m512i idx = plane_scale_index(j);
            __m512i xj[MAX_UNITS];
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) xj[t] = plane_acts(b[t][i].qs, j);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const __m512i v = _mm512_and_si512(_mm512_srli_epi16(qs[r], 2 * j), m3);
                const __m512i s = _mm512_permutexvar_epi16(idx, sc16[r]);
#pragma GCC unroll 4
                for (int t = 0; t < T; t++)
                    acc[r * T + t] = _mm512_dpwssd_epi32(acc[r * T + t], _mm512_maddubs_epi16(v, xj[t]), s);
            }
        }
        __m256i mm[MAX_UNITS];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int t = 0; t < T; t++)
                mm[r * T + t] = _mm256_madd_epi16(mins[r], _mm256_loadu_si256((const __m256i *)b[t][i].bsums));
        if (R * T == 1) {
            fa = fmaf((float)_mm512_reduce_add_epi32(acc[0]), h2f(a[0][i].d) * b[0][i].d, fa);
            fm = fmaf((float)hsum_epi32(mm[0]), h2f(a[0][i].dmin) * b[0][i].d, fm);
        } else { /* [d_w * d_x, dmin_w * d_x] of the four units: a row's d and dmin are adjacent */
            uint32_t dm[MAX_UNITS];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) memcpy(&dm[r], &a[r][i].d, 4);
            const __m128i dd = R == 1 ? _mm_set1_epi32((int)dm[0]) : _mm_setr_epi32((int)dm[0], (int)dm[1], (int)dm[2], (int)dm[3]);
            const __m256 dx = T == 1 ? _mm256_set1_ps(b[0][i].d)
                                     : _mm256_setr_ps(b[0][i].d, b[0][i].d, b[1][i].d, b[1][i].d, b[2][i].d, b[2][i].d, b[3][i].d, b[3][i].d);
            acc8 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce_am4(acc, mm)), _mm256_mul_ps(_mm256_cvtph_ps(dd), dx), acc8);
        }
    }
    if (R * T == 1) {
        out[0] = fa - fm;
        return;
    }
    float l[8];
    _mm256_storeu_ps(l, acc8);
#pragma GCC unroll 4
    for (int u = 0; u < 4; u++) out[u] = l[2 * u] - l[2 * u + 1];
}

AVX512 static float dot_q2_K(int64_t n, const void *w, const void *x) {
    float out;
    q2_K_n(n, w, 0, 1, x, 0, 1, &out);
    return out;
}
AVX512 static void dot4_q2_K(int64_t n, const void *w, const void *x, size_t x_stride, float *out) {
    q2_K_n(n, w, 0, 1, x, x_stride, 4, out);
}
AVX512 static void dotr_q2_K(int64_t n, const void *w, size_t w_stride, const void *x, float *out) {
    q2_K_n(n, w, w_stride, 4, x, 0, 1, out);
}

/* ---- Q3_K --------------------------------------------------------------------------------- */

AVX512 INLINE void q3_K_n(int64_t n, const void *w, size_t w_stride, const int R, const void *x, size_t x_stride,
                          const int T, float *out) {
    const block_q3_K *a[MAX_UNITS];
    const block_q8_K *b[MAX_UNITS];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) a[r] = (const block_q3_K *)((const uint8_t *)w + r * w_stride);
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) b[t] = (const block_q8_K *)((const uint8_t *)x + t * x_stride);
    const uint8_t *ahead = R > 1 ? rows_ahead(w, w_stride) : NULL;
    const __m512i m3 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1), four = _mm512_set1_epi8(4);
    __m256 acc8[MAX_UNITS];
#pragma GCC unroll 4
    for (int u = 0; u < R * T; u++) acc8[u] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        if (R > 1) prefetch_share(ahead, i, sizeof(block_q3_K));
        __m512i sc16[MAX_UNITS], qs[MAX_UNITS], hb[MAX_UNITS];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            uint64_t lo, hi;
            q3k_scale_bytes(a[r][i].scales, &lo, &hi);
            const __m128i s8 = _mm_sub_epi8(_mm_set_epi64x((long long)hi, (long long)lo), _mm_set1_epi8(32));
            sc16[r] = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(s8));
            qs[r] = _mm512_loadu_si512(a[r][i].qs);
            /* hmask bits 0-3 for the first half's planes, 4-7 (shifted down) for the second's */
            const __m256i h = _mm256_loadu_si256((const __m256i *)a[r][i].hmask);
            hb[r] = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 4), 1);
        }
        __m512i acc[MAX_UNITS];
#pragma GCC unroll 4
        for (int u = 0; u < R * T; u++) acc[u] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m512i idx = plane_scale_index(j);
            __m512i xj[MAX_UNITS], x4[MAX_UNITS];
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                xj[t] = plane_acts(b[t][i].qs, j);
                x4[t] = _mm512_maddubs_epi16(four, xj[t]);
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                /* level + 4 = low 2 bits | 4 * (high bit) */
                const __m512i low = _mm512_and_si512(_mm512_srli_epi16(qs[r], 2 * j), m3);
                const __m512i high = _mm512_and_si512(_mm512_srli_epi16(hb[r], j), one);
                const __m512i v = _mm512_or_si512(low, _mm512_slli_epi16(high, 2));
                const __m512i s = _mm512_permutexvar_epi16(idx, sc16[r]);
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) {
                    const __m512i p = _mm512_sub_epi16(_mm512_maddubs_epi16(v, xj[t]), x4[t]);
                    acc[r * T + t] = _mm512_dpwssd_epi32(acc[r * T + t], p, s);
                }
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const int u = r * T + t;
                acc8[u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(fold_lanes(acc[u])), _mm256_set1_ps(b[t][i].d * h2f(a[r][i].d)),
                                          acc8[u]);
            }
    }
#pragma GCC unroll 4
    for (int u = 0; u < R * T; u++) out[u] = hsum_ps(acc8[u]);
}

AVX512 static float dot_q3_K(int64_t n, const void *w, const void *x) {
    float out;
    q3_K_n(n, w, 0, 1, x, 0, 1, &out);
    return out;
}
AVX512 static void dot4_q3_K(int64_t n, const void *w, const void *x, size_t x_stride, float *out) {
    q3_K_n(n, w, 0, 1, x, x_stride, 4, out);
}
AVX512 static void dotr_q3_K(int64_t n, const void *w, size_t w_stride, const void *x, float *out) {
    q3_K_n(n, w, w_stride, 4, x, 0, 1, out);
}

/* ---- IQ4_XS ------------------------------------------------------------------------------- */

AVX512 INLINE void iq4_xs_n(int64_t n, const void *w, size_t w_stride, const int R, const void *x, size_t x_stride,
                            const int T, float *out) {
    const block_iq4_xs *a[MAX_UNITS];
    const block_q8_K *b[MAX_UNITS];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) a[r] = (const block_iq4_xs *)((const uint8_t *)w + r * w_stride);
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) b[t] = (const block_q8_K *)((const uint8_t *)x + t * x_stride);
    const uint8_t *ahead = R > 1 ? rows_ahead(w, w_stride) : NULL;
    const __m512i lut = iq4_abs_lut(), eight = _mm512_set1_epi8(8), zero = _mm512_setzero_si512(), m4 = _mm512_set1_epi8(0xF);
    __m256 acc8[MAX_UNITS];
#pragma GCC unroll 4
    for (int u = 0; u < R * T; u++) acc8[u] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        if (R > 1) prefetch_share(ahead, i, sizeof(block_iq4_xs));
        __m512i sc16[MAX_UNITS]; /* the 8 sub-block scales as int16 */
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m128i s8 = _mm_sub_epi8(_mm_cvtsi64_si128((long long)iq4xs_scale_bytes(&a[r][i])), _mm_set1_epi8(32));
            sc16[r] = _mm512_castsi128_si512(_mm_cvtepi8_epi16(s8));
        }
        __m512i acc[MAX_UNITS];
#pragma GCC unroll 4
        for (int u = 0; u < R * T; u++) acc[u] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int s = 0; s < 4; s++) { /* sub-blocks 2s, 2s + 1 */
            /* The 32 bytes of qs as [32 low nibbles | 32 high nibbles]: 128-bit lanes hold elements
             * 0-15 of sub-block 2s, 0-15 of 2s + 1, 16-31 of 2s, 16-31 of 2s + 1, the activations
             * rearranged to match (once for all rows); int16 lanes 0-7 and 16-23 take 2s's scale. */
            const __m512i idx = _mm512_mask_set1_epi16(_mm512_set1_epi16((short)(2 * s)), 0xFF00FF00u, (short)(2 * s + 1));
            __m512i xs[MAX_UNITS];
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const __m512i xv = _mm512_loadu_si512(b[t][i].qs + 64 * s);
                xs[t] = _mm512_shuffle_i64x2(xv, xv, _MM_SHUFFLE(3, 1, 2, 0));
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(a[r][i].qs + 32 * s)));
                const __m512i nib = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4), m4);
                const __m512i mag = _mm512_shuffle_epi8(lut, nib);
                const __mmask64 neg = _mm512_testn_epi8_mask(nib, eight);
                const __m512i sc = _mm512_permutexvar_epi16(idx, sc16[r]);
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) {
                    const __m512i sx = _mm512_mask_sub_epi8(xs[t], neg, zero, xs[t]);
                    acc[r * T + t] = _mm512_dpwssd_epi32(acc[r * T + t], _mm512_maddubs_epi16(mag, sx), sc);
                }
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                /* the reference's lane k: 128-bit lanes 0 + 1 (k < 4), 2 + 3 (k >= 4) */
                const int u = r * T + t;
                const __m512i lo = _mm512_shuffle_i64x2(acc[u], acc[u], _MM_SHUFFLE(0, 0, 2, 0));
                const __m512i hi = _mm512_shuffle_i64x2(acc[u], acc[u], _MM_SHUFFLE(0, 0, 3, 1));
                const __m256i l8 = _mm256_add_epi32(_mm512_castsi512_si256(lo), _mm512_castsi512_si256(hi));
                acc8[u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(l8), _mm256_set1_ps(h2f(a[r][i].d) * b[t][i].d), acc8[u]);
            }
    }
#pragma GCC unroll 4
    for (int u = 0; u < R * T; u++) out[u] = hsum_ps(acc8[u]);
}

AVX512 static float dot_iq4_xs(int64_t n, const void *w, const void *x) {
    float out;
    iq4_xs_n(n, w, 0, 1, x, 0, 1, &out);
    return out;
}
AVX512 static void dot4_iq4_xs(int64_t n, const void *w, const void *x, size_t x_stride, float *out) {
    iq4_xs_n(n, w, 0, 1, x, x_stride, 4, out);
}
AVX512 static void dotr_iq4_xs(int64_t n, const void *w, size_t w_stride, const void *x, float *out) {
    iq4_xs_n(n, w, w_stride, 4, x, 0, 1, out);
}

/* ---- IQ4_NL ------------------------------------------------------------------------------- */

/* Four units' 16 int32 lanes (lanes 0-7 block i, 8-15 block i + 1) to their block sums:
 * [b0: u0 u1 u2 u3 | b1: u0 u1 u2 u3]. */
AVX512 INLINE __m256i reduce_blocks4(const __m512i p[4]) {
    /* 128-bit lanes [u0b0 u0b1 u1b0 u1b1], [u2b0 u2b1 u3b0 u3b1], four partial sums each */
    __m512i t01 = _mm512_add_epi32(_mm512_shuffle_i32x4(p[0], p[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_i32x4(p[0], p[1], _MM_SHUFFLE(3, 1, 3, 1)));
    __m512i t23 = _mm512_add_epi32(_mm512_shuffle_i32x4(p[2], p[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_i32x4(p[2], p[3], _MM_SHUFFLE(3, 1, 3, 1)));
    __m512i v = _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
    v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_CDAB));
    /* lane 0: u0b0, 2: u2b0, 4: u0b1, 6: u2b1, 8: u1b0, 10: u3b0, 12: u1b1, 14: u3b1 */
    const __m512i pick = _mm512_setr_epi32(0, 8, 2, 10, 4, 12, 6, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castsi512_si256(_mm512_permutexvar_epi32(pick, v));
}

AVX512 INLINE void iq4_nl_n(int64_t n, const void *w, size_t w_stride, const int R, const void *x, size_t x_stride,
                            const int T, float *out) {
    const block_iq4_nl *a[MAX_UNITS];
    const block_q8_0 *b[MAX_UNITS];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) a[r] = (const block_iq4_nl *)((const uint8_t *)w + r * w_stride);
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) b[t] = (const block_q8_0 *)((const uint8_t *)x + t * x_stride);
    const uint8_t *ahead = R > 1 ? rows_ahead(w, w_stride) : NULL;
    const __m512i lut = iq4_abs_lut(), eight = _mm512_set1_epi8(8), zero = _mm512_setzero_si512();
    const int64_t nb = n / QK4_NL;
    __m128 acc4 = _mm_setzero_ps(); /* R * T = 4: one chain per unit */
    float s1 = 0;                   /* R * T = 1 */
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        if (R > 1) prefetch_share(ahead, i / 2, 2 * sizeof(block_iq4_nl));
        __m512i xs[MAX_UNITS], p[MAX_UNITS];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            xs[t] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b[t][i].qs)),
                                       _mm256_loadu_si256((const __m256i *)b[t][i + 1].qs), 1);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512i nib = nibbles2(a[r][i].qs, a[r][i + 1].qs);
            const __m512i mag = _mm512_shuffle_epi8(lut, nib);
            const __mmask64 neg = _mm512_testn_epi8_mask(nib, eight);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++)
                p[r * T + t] = _mm512_dpbusd_epi32(zero, mag, _mm512_mask_sub_epi8(xs[t], neg, zero, xs[t]));
        }
        if (R * T == 1) {
            const int s_lo = hsum_epi32(_mm512_castsi512_si256(p[0])), s_hi = hsum_epi32(_mm512_extracti64x4_epi64(p[0], 1));
            s1 = fmaf((float)s_lo, h2f(a[0][i].d) * h2f(b[0][i].d), s1);
            s1 = fmaf((float)s_hi, h2f(a[0][i + 1].d) * h2f(b[0][i + 1].d), s1);
            continue;
        }
        const __m256 sums = _mm256_cvtepi32_ps(reduce_blocks4(p));
        /* d_w * d_x of the four units, block i then block i + 1 */
        uint16_t dw[2][MAX_UNITS], dx[2][MAX_UNITS];
#pragma GCC unroll 2
        for (int k = 0; k < 2; k++)
#pragma GCC unroll 4
            for (int u = 0; u < MAX_UNITS; u++) {
                dw[k][u] = a[R == 1 ? 0 : u][i + k].d;
                dx[k][u] = b[T == 1 ? 0 : u][i + k].d;
            }
        const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dw)),
                                       _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dx)));
        acc4 = _mm_fmadd_ps(_mm256_castps256_ps128(sums), _mm256_castps256_ps128(d), acc4);
        acc4 = _mm_fmadd_ps(_mm256_extractf128_ps(sums, 1), _mm256_extractf128_ps(d, 1), acc4);
    }
    float tail[MAX_UNITS];
    if (R * T == 1) tail[0] = s1;
    else _mm_storeu_ps(tail, acc4);
    for (; i < nb; i++) /* an odd last block */
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m256i nib = _mm512_castsi512_si256(nibbles2(a[r][i].qs, a[r][i].qs));
            const __m256i mag = _mm256_shuffle_epi8(_mm512_castsi512_si256(lut), nib);
            const __mmask32 neg = _mm256_testn_epi8_mask(nib, _mm512_castsi512_si256(eight));
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const __m256i xv = _mm256_loadu_si256((const __m256i *)b[t][i].qs);
                const __m256i pv = _mm256_dpbusd_epi32(_mm256_setzero_si256(), mag,
                                                       _mm256_mask_sub_epi8(xv, neg, _mm256_setzero_si256(), xv));
                tail[r * T + t] = fmaf((float)hsum_epi32(pv), h2f(a[r][i].d) * h2f(b[t][i].d), tail[r * T + t]);
            }
        }
#pragma GCC unroll 4
    for (int u = 0; u < R * T; u++) out[u] = tail[u];
}

AVX512 static float dot_iq4_nl(int64_t n, const void *w, const void *x) {
    float out;
    iq4_nl_n(n, w, 0, 1, x, 0, 1, &out);
    return out;
}
AVX512 static void dot4_iq4_nl(int64_t n, const void *w, const void *x, size_t x_stride, float *out) {
    iq4_nl_n(n, w, 0, 1, x, x_stride, 4, out);
}
AVX512 static void dotr_iq4_nl(int64_t n, const void *w, size_t w_stride, const void *x, float *out) {
    iq4_nl_n(n, w, w_stride, 4, x, 0, 1, out);
}

const struct quant_kernels quant_kernels_avx512_lowbit = {
    .vec_dot = {[GGML_TYPE_Q2_K] = dot_q2_K, [GGML_TYPE_Q3_K] = dot_q3_K, [GGML_TYPE_IQ4_NL] = dot_iq4_nl,
                [GGML_TYPE_IQ4_XS] = dot_iq4_xs},
    .vec_dot4 = {[GGML_TYPE_Q2_K] = dot4_q2_K, [GGML_TYPE_Q3_K] = dot4_q3_K, [GGML_TYPE_IQ4_NL] = dot4_iq4_nl,
                 [GGML_TYPE_IQ4_XS] = dot4_iq4_xs},
    .vec_dotr = {[GGML_TYPE_Q2_K] = dotr_q2_K, [GGML_TYPE_Q3_K] = dotr_q3_K, [GGML_TYPE_IQ4_NL] = dotr_iq4_nl,
                 [GGML_TYPE_IQ4_XS] = dotr_iq4_xs},
};
