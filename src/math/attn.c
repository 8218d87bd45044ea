/* attn.c: attention products on F16 cells (attn.h): a scalar version, which is the definition
 * of the numbers (the F32 dot order of quant.c), and AVX2 / AVX-512 versions that perform the
 * same operations lane for lane.
 *
 * The mix sum_c p[c]·V[c][d] is a dot product over the cells for each d. Its 16 accumulation
 * lanes (cell c goes to lane c % 16) are kept as 16 vector registers whose lanes run over d, so
 * V is read row by row as stored (no transpose) and every (d, lane) pair sees the same fmas, in
 * the same order, as the dot product of the column.
 */
#include "math/attn.h"
#include "math/quant.h"
#include "math/simd_avx2.h"
#include "common/err.h"

#include <immintrin.h>
#include <math.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

/* ---- scalar: the definition ------------------------------------------------------------- */

static void scores_scalar(const float *q, const uint16_t *k, size_t k_stride, const int32_t *cells, int64_t n_c,
                          int32_t hd, float *scores) {
    for (int64_t c = 0; c < n_c; c++) {
        const uint16_t *kr = k + (size_t)cells[c] * k_stride;
        float acc[16] = {0};
        int32_t i = 0;
        for (; i + 16 <= hd; i += 16)
            for (int l = 0; l < 16; l++) acc[l] = fmaf(fp16_to_f32(kr[i + l]), q[i + l], acc[l]);
        float s = quant_fold16(acc); /* the F32 dot order's fold, as hsum_ps(acc0 + acc1) */
        for (; i < hd; i++) s += fp16_to_f32(kr[i]) * q[i];
        scores[c] = s;
    }
}

static void mix_scalar(const float *p, const uint16_t *v, size_t v_stride, const int32_t *cells, int64_t n_c,
                       int32_t hd, float *out) {
    int64_t n16 = n_c / 16 * 16;
    for (int32_t d = 0; d < hd; d++) {
        float acc[16] = {0};
        for (int64_t c = 0; c < n16; c++)
            acc[c % 16] = fmaf(fp16_to_f32(v[(size_t)cells[c] * v_stride + d]), p[c], acc[c % 16]);
        float s = quant_fold16(acc);
        for (int64_t c = n16; c < n_c; c++) s += fp16_to_f32(v[(size_t)cells[c] * v_stride + d]) * p[c];
        out[d] = s;
    }
}

/* ---- AVX2 ------------------------------------------------------------------------------- */

AVX2 static inline __m256 h8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

AVX2 static void scores_avx2(const float *q, const uint16_t *k, size_t k_stride, const int32_t *cells, int64_t n_c,
                             int32_t hd, float *scores) {
    for (int64_t c = 0; c < n_c; c++) {
        const uint16_t *kr = k + (size_t)cells[c] * k_stride;
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        int32_t i = 0;
        for (; i + 16 <= hd; i += 16) {
            acc0 = _mm256_fmadd_ps(h8(kr + i), _mm256_loadu_ps(q + i), acc0);
            acc1 = _mm256_fmadd_ps(h8(kr + i + 8), _mm256_loadu_ps(q + i + 8), acc1);
        }
        float s = hsum_ps(_mm256_add_ps(acc0, acc1));
        for (; i < hd; i++) s += h2f(kr[i]) * q[i];
        scores[c] = s;
    }
}

/* hd a multiple of 8: lanes of a register run over 8 consecutive d. */
AVX2 static void mix_avx2(const float *p, const uint16_t *v, size_t v_stride, const int32_t *cells, int64_t n_c,
                          int32_t hd, float *out) {
    int64_t n16 = n_c / 16 * 16;
    for (int32_t d = 0; d < hd; d += 8) {
        const uint16_t *vd = v + d;
        __m256 acc[16];
        for (int l = 0; l < 16; l++) acc[l] = _mm256_setzero_ps();
        for (int64_t c = 0; c < n16; c += 16)
#pragma GCC unroll 16
            for (int l = 0; l < 16; l++)
                acc[l] = _mm256_fmadd_ps(h8(vd + (size_t)cells[c + l] * v_stride), _mm256_set1_ps(p[c + l]), acc[l]);
        __m256 t[8], u[4];
        for (int l = 0; l < 8; l++) t[l] = _mm256_add_ps(acc[l], acc[l + 8]);
        for (int l = 0; l < 4; l++) u[l] = _mm256_add_ps(t[l], t[l + 4]);
        __m256 s = _mm256_add_ps(_mm256_add_ps(u[0], u[2]), _mm256_add_ps(u[1], u[3]));
        for (int64_t c = n16; c < n_c; c++)
            s = _mm256_add_ps(s, _mm256_mul_ps(h8(vd + (size_t)cells[c] * v_stride), _mm256_set1_ps(p[c])));
        _mm256_storeu_ps(out + d, s);
    }
}

/* ---- AVX-512 ---------------------------------------------------------------------------- */

AVX512 static inline __m512 h16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

/* The F32 dot order's fold of four cells' 16-lane accumulators at once, as vector operations
 * that pair the same lanes as quant_fold16 does: (k, k+8), then (k, k+4), then (0, 2) and (1, 3), then
 * the two. Returns the four sums. */
AVX512 static inline __m128 fold16x4(__m512 a, __m512 b, __m512 c, __m512 d) {
    /* [a lo | b lo] + [a hi | b hi]: lanes 0-7 a's t, 8-15 b's t */
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)));
    /* t[0..3] + t[4..7] of each: 128-bit lane j holds cell j's u */
    __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
    __m512 v = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(1, 0, 3, 2))); /* u0+u2, u1+u3 */
    __m512 w = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1))); /* (u0+u2)+(u1+u3) */
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), w));
}

/* One zmm holds both AVX2 accumulators: lanes 0-7 are acc0's, 8-15 acc1's. Four cells at a
 * time, so their fma chains overlap and their folds share the shuffles. */
AVX512 static void scores_avx512(const float *q, const uint16_t *k, size_t k_stride, const int32_t *cells,
                                 int64_t n_c, int32_t hd, float *scores) {
    if (hd % 16) {
        scores_avx2(q, k, k_stride, cells, n_c, hd, scores);
        return;
    }
    int64_t c = 0;
    for (; c + 4 <= n_c; c += 4) {
        const uint16_t *kr[4];
        __m512 acc[4];
        for (int r = 0; r < 4; r++) {
            kr[r] = k + (size_t)cells[c + r] * k_stride;
            acc[r] = _mm512_setzero_ps();
        }
        for (int32_t i = 0; i < hd; i += 16) {
            __m512 qi = _mm512_loadu_ps(q + i);
            for (int r = 0; r < 4; r++) acc[r] = _mm512_fmadd_ps(h16(kr[r] + i), qi, acc[r]);
        }
        _mm_storeu_ps(scores + c, fold16x4(acc[0], acc[1], acc[2], acc[3]));
    }
    if (c < n_c) scores_avx2(q, k, k_stride, cells + c, n_c - c, hd, scores + c);
}

/* hd a multiple of 16. */
AVX512 static void mix_avx512(const float *p, const uint16_t *v, size_t v_stride, const int32_t *cells, int64_t n_c,
                              int32_t hd, float *out) {
    int64_t n16 = n_c / 16 * 16;
    for (int32_t d = 0; d < hd; d += 16) {
        const uint16_t *vd = v + d;
        __m512 acc[16];
        for (int l = 0; l < 16; l++) acc[l] = _mm512_setzero_ps();
        for (int64_t c = 0; c < n16; c += 16)
#pragma GCC unroll 16
            for (int l = 0; l < 16; l++)
                acc[l] = _mm512_fmadd_ps(h16(vd + (size_t)cells[c + l] * v_stride), _mm512_set1_ps(p[c + l]), acc[l]);
        __m512 t[8], u[4];
        for (int l = 0; l < 8; l++) t[l] = _mm512_add_ps(acc[l], acc[l + 8]);
        for (int l = 0; l < 4; l++) u[l] = _mm512_add_ps(t[l], t[l + 4]);
        __m512 s = _mm512_add_ps(_mm512_add_ps(u[0], u[2]), _mm512_add_ps(u[1], u[3]));
        for (int64_t c = n16; c < n_c; c++)
            s = _mm512_add_ps(s, _mm512_mul_ps(h16(vd + (size_t)cells[c] * v_stride), _mm512_set1_ps(p[c])));
        _mm512_storeu_ps(out + d, s);
    }
}

/* ---- dispatch --------------------------------------------------------------------------- */

static inline void scores_at(enum simd_level level, const float *q, const uint16_t *k, size_t k_stride,
                             const int32_t *cells, int64_t n_c, int32_t hd, float *scores) {
    if (level == SIMD_AVX512) scores_avx512(q, k, k_stride, cells, n_c, hd, scores);
    else if (level == SIMD_AVX2) scores_avx2(q, k, k_stride, cells, n_c, hd, scores);
    else scores_scalar(q, k, k_stride, cells, n_c, hd, scores);
}

static inline void mix_at(enum simd_level level, const float *p, const uint16_t *v, size_t v_stride,
                          const int32_t *cells, int64_t n_c, int32_t hd, float *out) {
    if (level == SIMD_AVX512 && hd % 16 == 0) mix_avx512(p, v, v_stride, cells, n_c, hd, out);
    else if (level >= SIMD_AVX2 && hd % 8 == 0) mix_avx2(p, v, v_stride, cells, n_c, hd, out);
    else mix_scalar(p, v, v_stride, cells, n_c, hd, out);
}

void attn_scores_f16_level(enum simd_level level, const float *q, const uint16_t *k, size_t k_stride,
                           const int32_t *cells, int64_t n_c, int32_t hd, float *scores) {
    ASSERT(simd_level_supported(level));
    scores_at(level, q, k, k_stride, cells, n_c, hd, scores);
}

void attn_mix_f16_level(enum simd_level level, const float *p, const uint16_t *v, size_t v_stride,
                        const int32_t *cells, int64_t n_c, int32_t hd, float *out) {
    ASSERT(simd_level_supported(level));
    mix_at(level, p, v, v_stride, cells, n_c, hd, out);
}

/* Resolved once before main (as quant.c's kernels): these run per attention row. */
static enum simd_level best_level;
__attribute__((constructor)) static void attn_resolve_level(void) {
    __builtin_cpu_init();
    best_level = simd_level_best();
}

void attn_scores_f16(const float *q, const uint16_t *k, size_t k_stride, const int32_t *cells, int64_t n_c,
                     int32_t hd, float *scores) {
    scores_at(best_level, q, k, k_stride, cells, n_c, hd, scores);
}

void attn_mix_f16(const float *p, const uint16_t *v, size_t v_stride, const int32_t *cells, int64_t n_c,
                  int32_t hd, float *out) {
    mix_at(best_level, p, v, v_stride, cells, n_c, hd, out);
}
