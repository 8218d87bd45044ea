/* lowbit_avx2.c: AVX2 kernels of the low-bit weight types (Q2_K, Q3_K, IQ4_NL, IQ4_XS): the
 * one-row dot product and the dequantizer, each bit for bit the scalar one of lowbit.c (whose
 * header gives the reference's orders). Registered as quant_kernels_avx2_lowbit (kernels.h).
 *
 * Integer sums do not depend on the order they are added in, so the vectors only have to form
 * the same integers before each float step: signed x signed byte products go through
 * vpmaddubsw as |a| x (b with a's sign) (pairs of products stay below 2^15: |a|, |b| <= 127),
 * unsigned levels through it as they are.
 */
#include "math/kernels.h"
#include "math/blocks.h"
#include "math/simd_avx2.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* The 16 grid values of IQ4 in both 128-bit lanes. */
AVX2 static inline __m256i iq4_lut(void) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4nl_levels));
}

/* The 32 grid values of 16 nibble bytes (elements 0-15: low nibbles, 16-31: high nibbles). */
AVX2 static inline __m256i iq4_values32(const uint8_t *qs, __m256i lut) {
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0xF));
    return _mm256_shuffle_epi8(lut, nib);
}

/* 16 int16 pair sums of the signed bytes a . b (|a| <= 127, b in [-127, 127]). */
AVX2 static inline __m256i mul_pairs_s8(__m256i a, __m256i b) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

/* The 8 int32 lanes of 32 elements with scale s0 on elements 0-15 and s1 on 16-31, as int16
 * in both halves: lane k is scale * (the products of elements 4k..4k+3). */
AVX2 static inline __m256i scale_halves(short s0, short s1) {
    return _mm256_set_m128i(_mm_set1_epi16(s1), _mm_set1_epi16(s0));
}

/* ---- Q2_K ------------------------------------------------------------------------------- */

AVX2 static float dot_q2_K(int64_t n, const void *w, const void *x) {
    const block_q2_K *a = w;
    const block_q8_K *b = x;
    const __m256i m3 = _mm256_set1_epi8(3);
    float fa = 0, fm = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m128i sm = _mm_loadu_si128((const __m128i *)a[i].scales);
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), _mm_set1_epi8(0xF)));
        __m256i sum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), m3);
                __m256i y = _mm256_loadu_si256((const __m256i *)(b[i].qs + 128 * h + 32 * j));
                const int s = 8 * h + 2 * j;
                __m256i sc = scale_halves((short)(a[i].scales[s] & 0xF), (short)(a[i].scales[s + 1] & 0xF));
                sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), sc));
            }
        }
        const int A = hsum_epi32(sum);
        const int M = hsum_epi32(_mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)b[i].bsums)));
        fa = fmaf((float)A, h2f(a[i].d) * b[i].d, fa);
        fm = fmaf((float)M, h2f(a[i].dmin) * b[i].d, fm);
    }
    return fa - fm;
}

AVX2 static void to_float_q2_K(const void *src, float *y, int64_t n) {
    const block_q2_K *b = src;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
        for (int h = 0; h < 2; h++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), m3);
                float *yo = y + 128 * h + 32 * j;
                for (int half = 0; half < 2; half++) {
                    const uint8_t sc = b[i].scales[8 * h + 2 * j + half];
                    const __m256 dl = _mm256_set1_ps(d * (float)(sc & 0xF)), ml = _mm256_set1_ps(dmin * (float)(sc >> 4));
                    __m128i q16 = half ? _mm256_extracti128_si256(q, 1) : _mm256_castsi256_si128(q);
                    __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q16));
                    __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(q16, 8)));
                    _mm256_storeu_ps(yo + 16 * half, _mm256_sub_ps(_mm256_mul_ps(dl, lo), ml));
                    _mm256_storeu_ps(yo + 16 * half + 8, _mm256_sub_ps(_mm256_mul_ps(dl, hi), ml));
                }
            }
        }
    }
}

/* ---- Q3_K ------------------------------------------------------------------------------- */

/* The 16 signed scales of a Q3_K super-block (q3k_scale) as bytes. */
static inline void q3_scales(const uint8_t *s, int8_t out[16]) {
    uint64_t lo, hi;
    q3k_scale_bytes(s, &lo, &hi);
    memcpy(out, &lo, 8);
    memcpy(out + 8, &hi, 8);
    for (int j = 0; j < 16; j++) out[j] = (int8_t)(out[j] - 32);
}

/* Levels + 4 (0..7) of the 32 elements 128h + 32j + l of a Q3_K super-block. */
AVX2 static inline __m256i q3_levels(__m256i bits, __m256i hmask, int h, int j) {
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256i low = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), m3);
    __m256i high = _mm256_and_si256(_mm256_srli_epi16(hmask, 4 * h + j), one);
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
}

AVX2 static float dot_q3_K(int64_t n, const void *w, const void *x) {
    const block_q3_K *a = w;
    const block_q8_K *b = x;
    const __m256i four = _mm256_set1_epi8(4);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t sc[16];
        q3_scales(a[i].scales, sc);
        const __m256i hmask = _mm256_loadu_si256((const __m256i *)a[i].hmask);
        __m256i sum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                __m256i u = q3_levels(bits, hmask, h, j);
                __m256i y = _mm256_loadu_si256((const __m256i *)(b[i].qs + 128 * h + 32 * j));
                __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(u, y), _mm256_maddubs_epi16(four, y));
                const int s = 8 * h + 2 * j;
                sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, scale_halves(sc[s], sc[s + 1])));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(b[i].d * h2f(a[i].d)), acc);
    }
    return hsum_ps(acc);
}

AVX2 static void to_float_q3_K(const void *src, float *y, int64_t n) {
    const block_q3_K *b = src;
    const __m256i four = _mm256_set1_epi8(4);
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        int8_t sc[16];
        q3_scales(b[i].scales, sc);
        const float d = h2f(b[i].d);
        const __m256i hmask = _mm256_loadu_si256((const __m256i *)b[i].hmask);
        for (int h = 0; h < 2; h++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                __m256i q = _mm256_sub_epi8(q3_levels(bits, hmask, h, j), four);
                float *yo = y + 128 * h + 32 * j;
                for (int half = 0; half < 2; half++) {
                    const __m256 dl = _mm256_set1_ps(d * (float)sc[8 * h + 2 * j + half]);
                    __m128i q16 = half ? _mm256_extracti128_si256(q, 1) : _mm256_castsi256_si128(q);
                    _mm256_storeu_ps(yo + 16 * half, _mm256_mul_ps(dl, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q16))));
                    _mm256_storeu_ps(yo + 16 * half + 8,
                                     _mm256_mul_ps(dl, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q16, 8)))));
                }
            }
        }
    }
}

/* ---- IQ4_NL, IQ4_XS -------------------------------------------------------------------- */

/* y[0..31] = scale * v (signed bytes) */
AVX2 static inline void store_scaled32(float *y, __m256i v, float scale) {
    const __m256 s = _mm256_set1_ps(scale);
    __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    _mm256_storeu_ps(y, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
    _mm256_storeu_ps(y + 16, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
    _mm256_storeu_ps(y + 24, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
}

AVX2 static float dot_iq4_nl(int64_t n, const void *w, const void *x) {
    const block_iq4_nl *a = w;
    const block_q8_0 *b = x;
    const __m256i lut = iq4_lut(), ones = _mm256_set1_epi16(1);
    float s = 0;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        __m256i v = iq4_values32(a[i].qs, lut), y = _mm256_loadu_si256((const __m256i *)b[i].qs);
        const int sum = hsum_epi32(_mm256_madd_epi16(mul_pairs_s8(v, y), ones));
        s = fmaf((float)sum, h2f(a[i].d) * h2f(b[i].d), s);
    }
    return s;
}

AVX2 static void to_float_iq4_nl(const void *src, float *y, int64_t n) {
    const block_iq4_nl *b = src;
    const __m256i lut = iq4_lut();
    for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) store_scaled32(y, iq4_values32(b[i].qs, lut), h2f(b[i].d));
}

AVX2 static float dot_iq4_xs(int64_t n, const void *w, const void *x) {
    const block_iq4_xs *a = w;
    const block_q8_K *b = x;
    const __m256i lut = iq4_lut();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sum = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++) {
            __m256i v = iq4_values32(a[i].qs + 16 * g, lut), y = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * g));
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(mul_pairs_s8(v, y), _mm256_set1_epi16((short)iq4xs_scale(&a[i], g))));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(h2f(a[i].d) * b[i].d), acc);
    }
    return hsum_ps(acc);
}

AVX2 static void to_float_iq4_xs(const void *src, float *y, int64_t n) {
    const block_iq4_xs *b = src;
    const __m256i lut = iq4_lut();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = h2f(b[i].d);
        for (int g = 0; g < 8; g++, y += 32) store_scaled32(y, iq4_values32(b[i].qs + 16 * g, lut), d * (float)iq4xs_scale(&b[i], g));
    }
}

const struct quant_kernels quant_kernels_avx2_lowbit = {
    .vec_dot = {[GGML_TYPE_Q2_K] = dot_q2_K, [GGML_TYPE_Q3_K] = dot_q3_K, [GGML_TYPE_IQ4_NL] = dot_iq4_nl,
                [GGML_TYPE_IQ4_XS] = dot_iq4_xs},
    .to_float = {[GGML_TYPE_Q2_K] = to_float_q2_K, [GGML_TYPE_Q3_K] = to_float_q3_K,
                 [GGML_TYPE_IQ4_NL] = to_float_iq4_nl, [GGML_TYPE_IQ4_XS] = to_float_iq4_xs},
};
