/* simd_avx2.h: small AVX2 helpers shared by the SIMD kernel files (private to src/math). Each
 * carries the AVX2 target attribute, so it inlines into AVX2 and AVX-512 functions alike. */
#ifndef UVLM_MATH_SIMD_AVX2_H
#define UVLM_MATH_SIMD_AVX2_H

#include <immintrin.h>
#include <stdint.h>

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

/* Q4_K/Q5_K mins: 8 int32 lanes whose sum is sum_j mins[j] * (bsums[2j] + bsums[2j+1]), mn
 * holding the 8 mins as bytes (k4_scales_mins). */
AVX2 static inline __m256i k4_mins_dot(uint64_t mn, const int16_t bsums[16]) {
    __m128i m8 = _mm_cvtsi64_si128((long long)mn);
    __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8)); /* each min twice */
    return _mm256_madd_epi16(m16, _mm256_loadu_si256((const __m256i *)bsums));
}

#endif
