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
#include "math/blocks.h"
#include "math/kernels.h"
#include "math/quant.h"
#include "math/simd_avx2.h"
#include "common/err.h"

#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

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

/* Element d of a Q8_0 row: its level times its block's scale (exact in F32). */
static inline float q8_at(const uint8_t *row, int32_t d) {
    const block_q8_0 *b = (const block_q8_0 *)row + d / QK8_0;
    return fp16_to_f32(b->d) * (float)b->qs[d % QK8_0];
}

/* mix_scalar on Q8_0 rows (v: the head's first block in cell 0's row, v_stride bytes apart). */
static void mix_q8_scalar(const float *p, const uint8_t *v, size_t v_stride, const int32_t *cells, int64_t n_c,
                          int32_t hd, float *out) {
    int64_t n16 = n_c / 16 * 16;
    for (int32_t d = 0; d < hd; d++) {
        float acc[16] = {0};
        for (int64_t c = 0; c < n16; c++) acc[c % 16] = fmaf(q8_at(v + (size_t)cells[c] * v_stride, d), p[c], acc[c % 16]);
        float s = quant_fold16(acc);
        for (int64_t c = n16; c < n_c; c++) s += q8_at(v + (size_t)cells[c] * v_stride, d) * p[c];
        out[d] = s;
    }
}

/* The softmax's definition (today's reference numbers, see attn.h). */
static void softmax_scalar(float *row, int64_t n, const int32_t *cpos, int32_t pos, float scale, bool f16) {
    float mx = -INFINITY;
    for (int64_t c = 0; c < n; c++) {
        row[c] = cpos[c] <= pos ? row[c] * scale : -INFINITY;
        if (row[c] > mx) mx = row[c];
    }
    /* masked cells stay -inf, whose quant_expf is 0 (also when mx is -inf) */
    for (int64_t c = 0; c < n; c++) row[c] = row[c] == -INFINITY ? -INFINITY : row[c] - mx;
    quant_expf_n(row, row, n);
    double sum = 0;
    for (int64_t c0 = 0; c0 < n; c0 += 16) {
        float v[16];
        for (int64_t l = 0; l < 16; l++) v[l] = c0 + l < n ? row[c0 + l] : 0.0f;
        sum += (double)quant_fold16(v);
    }
    float inv = (float)(1.0 / sum);
    for (int64_t c = 0; c < n; c++) row[c] = f16 ? fp16_to_f32(f32_to_fp16(row[c] * inv)) : row[c] * inv;
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

/* quant_expf of 8 lanes, bit for bit: the same operations; lanes whose power of two is not a
 * normal float (rare: results below 2^-125, overflow, NaN) are redone by quant_expf, except
 * x - ln2 * n far below (n < -192, also -inf: masked cells), which is 0 there too. */
AVX2 static inline __m256 expf8(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r), r);
    __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    __m256 u = _mm256_mul_ps(b, b);
    __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    __m256 in = _mm256_and_ps(_mm256_cmp_ps(n, _mm256_set1_ps(-125.0f), _CMP_GE_OQ),
                              _mm256_cmp_ps(n, _mm256_set1_ps(127.0f), _CMP_LE_OQ));
    __m256i e = _mm256_cvttps_epi32(_mm256_and_ps(n, in)); /* 0 outside */
    __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
    __m256 y = _mm256_and_ps(_mm256_mul_ps(j, p2), in); /* 0 outside */
    __m256 zero = _mm256_cmp_ps(n, _mm256_set1_ps(-192.0f), _CMP_LT_OQ);
    int odd = ~_mm256_movemask_ps(_mm256_or_ps(in, zero)) & 0xff;
    if (odd) {
        float xs[8], ys[8];
        _mm256_storeu_ps(xs, x);
        _mm256_storeu_ps(ys, y);
        for (int l = 0; l < 8; l++)
            if (odd >> l & 1) ys[l] = quant_expf(xs[l]);
        y = _mm256_loadu_ps(ys);
    }
    return y;
}

AVX2 static void expf_n_avx2(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, expf8(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = quant_expf(x[i]);
}

/* Lanes [0, m) of 8 set (m may be <= 0 or >= 8). */
AVX2 static inline __m256i live8(int64_t m) {
    int32_t k = m < 0 ? 0 : m > 8 ? 8 : (int32_t)m;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

AVX2 static void softmax_avx2(float *row, int64_t n, const int32_t *cpos, int32_t pos, float scale, bool f16) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY), vscale = _mm256_set1_ps(scale);
    const __m256i vpos = _mm256_set1_epi32(pos);
    __m256 vmx = ninf;
    for (int64_t c = 0; c < n; c += 8) {
        __m256i live = live8(n - c);
        __m256 x = _mm256_maskload_ps(row + c, live);
        __m256i cp = _mm256_maskload_epi32(cpos + c, live);
        /* visible: live and cpos <= pos */
        __m256 vis = _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_cmpgt_epi32(cp, vpos), live));
        __m256 y = _mm256_blendv_ps(ninf, _mm256_mul_ps(x, vscale), vis);
        _mm256_maskstore_ps(row + c, live, y);
        vmx = _mm256_max_ps(y, vmx); /* y > vmx ? y : vmx, as the scalar compare (NaN never taken) */
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmx), _mm256_extractf128_ps(vmx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    /* which of +0 / -0 is the max does not matter: x - m then differs only in a zero's sign */
    const __m256 vm = _mm256_set1_ps(_mm_cvtss_f32(m4));
    double sum = 0;
    for (int64_t c = 0; c < n; c += 16) {
        __m256 e[2];
        for (int h = 0; h < 2; h++) {
            __m256i live = live8(n - c - 8 * h);
            __m256 x = _mm256_maskload_ps(row + c + 8 * h, live);
            __m256 d = _mm256_blendv_ps(_mm256_sub_ps(x, vm), ninf, _mm256_cmp_ps(x, ninf, _CMP_EQ_OQ));
            e[h] = _mm256_and_ps(expf8(d), _mm256_castsi256_ps(live)); /* zero padding */
            _mm256_maskstore_ps(row + c + 8 * h, live, e[h]);
        }
        sum += (double)hsum_ps(_mm256_add_ps(e[0], e[1])); /* quant_fold16 */
    }
    const __m256 vinv = _mm256_set1_ps((float)(1.0 / sum));
    int64_t c = 0;
    if (!f16) {
        for (; c < n; c++) row[c] *= _mm256_cvtss_f32(vinv);
        return;
    }
    for (; c + 8 <= n; c += 8)
        _mm256_storeu_ps(row + c, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(row + c), vinv),
                                                                   _MM_FROUND_TO_NEAREST_INT)));
    for (; c < n; c++) row[c] = h2f(_cvtss_sh(row[c] * _mm256_cvtss_f32(vinv), _MM_FROUND_TO_NEAREST_INT));
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

/* One zmm holds both AVX2 accumulators: lanes 0-7 are acc0's, 8-15 acc1's. R query rows
 * (R <= 4, a compile-time constant once inlined) against four cells: each K vector is loaded
 * once for the R rows, the R x 4 fma chains overlap, and every (row, cell) pair sees the very
 * fmas scores_avx2 does. Written out so that the accumulators stay in registers (as a loop over
 * an array of them, gcc -O2 keeps them on the stack: a store-forward chain per fma). */
#define SC_FMA(a, kv, qi) a = _mm512_fmadd_ps(kv, qi, a)
#define SC_ROW(a0, a1, a2, a3, qrow)                                                                 \
    do {                                                                                             \
        __m512 qi = _mm512_loadu_ps((qrow) + i);                                                     \
        SC_FMA(a0, k0, qi);                                                                          \
        SC_FMA(a1, k1, qi);                                                                          \
        SC_FMA(a2, k2, qi);                                                                          \
        SC_FMA(a3, k3, qi);                                                                          \
    } while (0)
AVX512 static inline __attribute__((always_inline)) void scores4x4(const float *q, size_t q_stride, int R,
                                                                   const uint16_t *kr0, const uint16_t *kr1,
                                                                   const uint16_t *kr2, const uint16_t *kr3,
                                                                   int32_t hd, float *out, size_t out_stride) {
    const __m512 z = _mm512_setzero_ps();
    __m512 a00 = z, a01 = z, a02 = z, a03 = z, a10 = z, a11 = z, a12 = z, a13 = z;
    __m512 a20 = z, a21 = z, a22 = z, a23 = z, a30 = z, a31 = z, a32 = z, a33 = z;
    for (int32_t i = 0; i < hd; i += 16) {
        __m512 k0 = h16(kr0 + i), k1 = h16(kr1 + i), k2 = h16(kr2 + i), k3 = h16(kr3 + i);
        SC_ROW(a00, a01, a02, a03, q);
        if (R > 1) SC_ROW(a10, a11, a12, a13, q + q_stride);
        if (R > 2) SC_ROW(a20, a21, a22, a23, q + 2 * q_stride);
        if (R > 3) SC_ROW(a30, a31, a32, a33, q + 3 * q_stride);
    }
    _mm_storeu_ps(out, fold16x4(a00, a01, a02, a03));
    if (R > 1) _mm_storeu_ps(out + out_stride, fold16x4(a10, a11, a12, a13));
    if (R > 2) _mm_storeu_ps(out + 2 * out_stride, fold16x4(a20, a21, a22, a23));
    if (R > 3) _mm_storeu_ps(out + 3 * out_stride, fold16x4(a30, a31, a32, a33));
}
#undef SC_ROW
#undef SC_FMA

enum { SC_PREFETCH = 64 }; /* cells ahead: about a memory latency of work */

/* n_q rows of scores (see attn_scores_f16_rows), hd a multiple of 16; cells in blocks of four,
 * the rows four at a time inside a block (the block's K rows stay in L1 for the next four). */
AVX512 static void scores_rows_avx512(const float *q, size_t q_stride, int32_t n_q, const uint16_t *k,
                                      size_t k_stride, const int32_t *cells, int64_t n_c, int32_t hd, float *scores,
                                      size_t sc_stride) {
    /* the first SC_PREFETCH cells, which the loop's prefetches do not cover (a block of a
     * longer list starts cold too) */
    for (int64_t c = 0; c < n_c && c < SC_PREFETCH; c++) {
        const char *p = (const char *)(k + (size_t)cells[c] * k_stride);
        for (int32_t b = 0; b < hd * 2; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
    }
    int64_t c = 0;
    for (; c + 4 <= n_c; c += 4) {
        /* The K rows come from memory (a layer's cells are evicted by the weights streamed since
         * its last step) and are strided: ask for them SC_PREFETCH cells ahead. */
        if (c + SC_PREFETCH + 4 <= n_c)
            for (int r = 0; r < 4; r++) {
                const char *p = (const char *)(k + (size_t)cells[c + SC_PREFETCH + r] * k_stride);
                for (int32_t b = 0; b < hd * 2; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
            }
        const uint16_t *kr0 = k + (size_t)cells[c] * k_stride, *kr1 = k + (size_t)cells[c + 1] * k_stride;
        const uint16_t *kr2 = k + (size_t)cells[c + 2] * k_stride, *kr3 = k + (size_t)cells[c + 3] * k_stride;
        for (int32_t r = 0; r < n_q; r += 4) {
            const float *qr = q + (size_t)r * q_stride;
            float *out = scores + (size_t)r * sc_stride + c;
            switch (n_q - r) {
            case 1: scores4x4(qr, q_stride, 1, kr0, kr1, kr2, kr3, hd, out, sc_stride); break;
            case 2: scores4x4(qr, q_stride, 2, kr0, kr1, kr2, kr3, hd, out, sc_stride); break;
            case 3: scores4x4(qr, q_stride, 3, kr0, kr1, kr2, kr3, hd, out, sc_stride); break;
            default: scores4x4(qr, q_stride, 4, kr0, kr1, kr2, kr3, hd, out, sc_stride); break;
            }
        }
    }
    if (c < n_c)
        for (int32_t r = 0; r < n_q; r++)
            scores_avx2(q + (size_t)r * q_stride, k, k_stride, cells + c, n_c - c, hd,
                        scores + (size_t)r * sc_stride + c);
}

AVX512 static void scores_avx512(const float *q, const uint16_t *k, size_t k_stride, const int32_t *cells,
                                 int64_t n_c, int32_t hd, float *scores) {
    if (hd % 16) scores_avx2(q, k, k_stride, cells, n_c, hd, scores);
    else scores_rows_avx512(q, 0, 1, k, k_stride, cells, n_c, hd, scores, 0);
}

enum { MIX_PREFETCH = 32 };

/* hd a multiple of 16. */
AVX512 static void mix_avx512(const float *p, const uint16_t *v, size_t v_stride, const int32_t *cells, int64_t n_c,
                              int32_t hd, float *out) {
    int64_t n16 = n_c / 16 * 16;
    for (int32_t d = 0; d < hd; d += 16) {
        const uint16_t *vd = v + d;
        __m512 acc[16];
        for (int l = 0; l < 16; l++) acc[l] = _mm512_setzero_ps();
        /* V rows come from memory, strided, as K's in scores_rows_avx512: ask for the line of
         * these 16 elements MIX_PREFETCH cells ahead (once per line: 32 halfs) */
        int pf = (d & 31) == 0;
        for (int64_t c = 0; c < n16; c += 16) {
            if (pf && c + MIX_PREFETCH + 16 <= n_c)
                for (int l = 0; l < 16; l++)
                    _mm_prefetch((const char *)(vd + (size_t)cells[c + MIX_PREFETCH + l] * v_stride), _MM_HINT_T0);
#pragma GCC unroll 16
            for (int l = 0; l < 16; l++)
                acc[l] = _mm512_fmadd_ps(h16(vd + (size_t)cells[c + l] * v_stride), _mm512_set1_ps(p[c + l]), acc[l]);
        }
        __m512 t[8], u[4];
        for (int l = 0; l < 8; l++) t[l] = _mm512_add_ps(acc[l], acc[l + 8]);
        for (int l = 0; l < 4; l++) u[l] = _mm512_add_ps(t[l], t[l + 4]);
        __m512 s = _mm512_add_ps(_mm512_add_ps(u[0], u[2]), _mm512_add_ps(u[1], u[3]));
        for (int64_t c = n16; c < n_c; c++)
            s = _mm512_add_ps(s, _mm512_mul_ps(h16(vd + (size_t)cells[c] * v_stride), _mm512_set1_ps(p[c])));
        _mm512_storeu_ps(out + d, s);
    }
}

/* The mix of several probability rows over the same cells (attn_mix_f16_rows), hd a multiple
 * of 16. Each (row, 16 output elements) has the 16 accumulators of mix_avx512, lane l summing
 * cells l, l + 16, ... in order; a lane's chain does not depend on the other lanes', so the
 * lanes are computed one after the other: for lane l the cells l, l + 16, ... each have their V
 * row loaded and converted once for R rows x D blocks of 16 elements (R * D accumulators in
 * registers), then the 16 lanes are folded exactly as mix_avx512 folds them. So every V row of
 * the cells is read once for the whole group (mix_avx512 reads it once per row and 16-element
 * block) and every output has mix_avx512's very operations. */
enum { MIX_ROWS_PREFETCH = 4 }; /* lane steps (of 16 cells) ahead */

/* 16 values of a V row from element e on (e a multiple of 16): F16 (q8 0), or Q8_0 levels times
 * their block's scale (q8 1), a product exact in F32 (an 8-bit level, an 11-bit scale), so the
 * mix of Q8_0 cells is the F32 dot of their values as quant_to_float gives them. */
AVX512 static inline __m512 v16(const uint8_t *row, int32_t e, int q8) {
    if (!q8) return h16((const uint16_t *)row + e);
    const uint8_t *blk = row + (size_t)(e >> 5) * 34;
    uint16_t d;
    memcpy(&d, blk, sizeof d);
    __m512 x = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2 + (e & 31)))));
    return _mm512_mul_ps(x, _mm512_set1_ps(h2f(d)));
}

/* Byte offset of element e in a row (for prefetches). */
static inline size_t v_off(int32_t e, int q8) { return q8 ? (size_t)(e >> 5) * 34 : (size_t)e * 2; }

AVX512 static inline __attribute__((always_inline)) void mix_rows_tile(const float *p, size_t p_stride, int R, int D,
                                                                       const uint8_t *v, int32_t e0, int q8,
                                                                       size_t v_stride, const int32_t *cells,
                                                                       int64_t n_c, float *out, size_t out_stride) {
    int64_t n16 = n_c / 16 * 16;
    size_t off = v_off(e0, q8);
    __m512 lanes[4][4][16]; /* [row][block][lane]: each lane's sum */
    for (int l = 0; l < 16; l++) {
        __m512 acc[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int b = 0; b < D; b++) acc[r][b] = _mm512_setzero_ps();
        for (int64_t c = l; c < n16; c += 16) {
            /* the V rows come from memory: ask for the next lane's cell now (a lane's walk
             * ahead of its use), and in the first lane also for its own cells ahead */
            if (c + 1 < n16) {
                const char *pf = (const char *)(v + (size_t)cells[c + 1] * v_stride + off);
                _mm_prefetch(pf, _MM_HINT_T0);
                if (D > 2) _mm_prefetch(pf + 64, _MM_HINT_T0);
            }
            if (l == 0 && c + 16 * MIX_ROWS_PREFETCH < n16) {
                const char *pf = (const char *)(v + (size_t)cells[c + 16 * MIX_ROWS_PREFETCH] * v_stride + off);
                _mm_prefetch(pf, _MM_HINT_T0);
                if (D > 2) _mm_prefetch(pf + 64, _MM_HINT_T0);
            }
            const uint8_t *vr = v + (size_t)cells[c] * v_stride;
            __m512 x[4];
#pragma GCC unroll 4
            for (int b = 0; b < D; b++) x[b] = v16(vr, e0 + 16 * b, q8);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m512 pr = _mm512_set1_ps(p[(size_t)r * p_stride + (size_t)c]);
#pragma GCC unroll 4
                for (int b = 0; b < D; b++) acc[r][b] = _mm512_fmadd_ps(x[b], pr, acc[r][b]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int b = 0; b < D; b++) lanes[r][b][l] = acc[r][b];
    }
    for (int r = 0; r < R; r++)
        for (int b = 0; b < D; b++) {
            __m512 *a = lanes[r][b], t[8], u[4];
            for (int l = 0; l < 8; l++) t[l] = _mm512_add_ps(a[l], a[l + 8]);
            for (int l = 0; l < 4; l++) u[l] = _mm512_add_ps(t[l], t[l + 4]);
            __m512 s = _mm512_add_ps(_mm512_add_ps(u[0], u[2]), _mm512_add_ps(u[1], u[3]));
            for (int64_t c = n16; c < n_c; c++)
                s = _mm512_add_ps(s, _mm512_mul_ps(v16(v + (size_t)cells[c] * v_stride, e0 + 16 * b, q8),
                                                   _mm512_set1_ps(p[(size_t)r * p_stride + (size_t)c])));
            _mm512_storeu_ps(out + (size_t)r * out_stride + 16 * b, s);
        }
}

#define MIX_TILE(R, D) mix_rows_tile(p + (size_t)r * p_stride, p_stride, R, D, v, 16 * b, q8, v_stride, cells, n_c, \
                                     out + (size_t)r * out_stride + 16 * b, out_stride)
/* v: the head's first element in cell 0's row, v_stride bytes between cells' rows. */
AVX512 static inline __attribute__((always_inline)) void mix_rows_any(const float *p, size_t p_stride, int32_t n_p,
                                                                      const uint8_t *v, int q8, size_t v_stride,
                                                                      const int32_t *cells, int64_t n_c, int32_t hd,
                                                                      float *out, size_t out_stride) {
    int32_t nb = hd / 16;
    for (int32_t b = 0; b < nb; b += 4) {
        int D = nb - b < 4 ? nb - b : 4;
        int rmax = D >= 3 ? 3 : 4; /* R * D accumulators + D converted rows within the 32 registers */
        for (int32_t r = 0; r < n_p; r += rmax) {
            int R = n_p - r < rmax ? n_p - r : rmax;
            switch (D * 8 + R) {
            case 8 + 1: MIX_TILE(1, 1); break;
            case 8 + 2: MIX_TILE(2, 1); break;
            case 8 + 3: MIX_TILE(3, 1); break;
            case 8 + 4: MIX_TILE(4, 1); break;
            case 16 + 1: MIX_TILE(1, 2); break;
            case 16 + 2: MIX_TILE(2, 2); break;
            case 16 + 3: MIX_TILE(3, 2); break;
            case 16 + 4: MIX_TILE(4, 2); break;
            case 24 + 1: MIX_TILE(1, 3); break;
            case 24 + 2: MIX_TILE(2, 3); break;
            case 24 + 3: MIX_TILE(3, 3); break;
            case 32 + 1: MIX_TILE(1, 4); break;
            case 32 + 2: MIX_TILE(2, 4); break;
            case 32 + 3: MIX_TILE(3, 4); break;
            default: ASSERT(!"mix_rows_avx512: tile");
            }
        }
    }
}
#undef MIX_TILE

AVX512 static void mix_rows_avx512(const float *p, size_t p_stride, int32_t n_p, const uint16_t *v, size_t v_stride,
                                   const int32_t *cells, int64_t n_c, int32_t hd, float *out, size_t out_stride) {
    mix_rows_any(p, p_stride, n_p, (const uint8_t *)v, 0, v_stride * 2, cells, n_c, hd, out, out_stride);
}

AVX512 static void mix_rows_q8_avx512(const float *p, size_t p_stride, int32_t n_p, const void *v, size_t v_stride,
                                      const int32_t *cells, int64_t n_c, int32_t hd, float *out, size_t out_stride) {
    mix_rows_any(p, p_stride, n_p, v, 1, v_stride, cells, n_c, hd, out, out_stride);
}

/* ---- Q8_0 scores (AVX-512 VNNI) ---- */

#define AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

enum { SCQ8_ROWS = 8, SCQ8_MAX_BLOCKS = 16 }; /* rows per pass; blocks of a head (hd <= 512) */

/* n_q rows of Q8_0 scores, each exactly quant.c's Q8_0 dot (dot_x): per block 8 integer lanes
 * (lane k: elements 4k..4k+3), acc_k = fma(lane_k, d_k * d_q, acc_k) over the blocks, then the
 * 8-lane fold (hsum_ps). A 512-bit register holds two cells (lanes 0-7 and 8-15) against one
 * query row, as quant_avx512.c's dotr_q8_0 holds two weight rows; vpdpbusd takes the query as
 * unsigned (q + 128, precomputed once per row) and 128 * (sum of 4 K levels) comes off each lane,
 * computed once per cell pair for all the rows. */
AVX512VNNI static void scores_q8_rows_avx512(const void *qq, size_t qq_stride, int32_t n_q, const void *k,
                                            size_t k_stride, const int32_t *cells, int64_t n_c, int32_t hd,
                                            float *scores, size_t sc_stride) {
    int32_t nb = hd / QK8_0;
    if (nb > SCQ8_MAX_BLOCKS) {
        quant_vec_dot_fn dot = quant_get_vec_dot(SIMD_AVX2, GGML_TYPE_Q8_0);
        for (int64_t c = 0; c < n_c; c++)
            for (int32_t r = 0; r < n_q; r++)
                scores[(size_t)r * sc_stride + (size_t)c] =
                    dot(hd, (const uint8_t *)k + (size_t)cells[c] * k_stride, (const uint8_t *)qq + (size_t)r * qq_stride);
        return;
    }
    const __m512i c80 = _mm512_set1_epi8((char)0x80), z = _mm512_setzero_si512();
    __m512i xu[SCQ8_ROWS][SCQ8_MAX_BLOCKS];
    float dq[SCQ8_ROWS][SCQ8_MAX_BLOCKS];
    for (int32_t r0 = 0; r0 < n_q; r0 += SCQ8_ROWS) {
        int R = n_q - r0 < SCQ8_ROWS ? n_q - r0 : SCQ8_ROWS;
        for (int r = 0; r < R; r++) {
            const block_q8_0 *qb = (const block_q8_0 *)((const uint8_t *)qq + (size_t)(r0 + r) * qq_stride);
            for (int32_t i = 0; i < nb; i++) {
                xu[r][i] = _mm512_xor_si512(_mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qb[i].qs)), c80);
                dq[r][i] = h2f(qb[i].d);
            }
        }
        int64_t c = 0;
        for (; c + 2 <= n_c; c += 2) {
            const block_q8_0 *ka = (const block_q8_0 *)((const uint8_t *)k + (size_t)cells[c] * k_stride);
            const block_q8_0 *kb = (const block_q8_0 *)((const uint8_t *)k + (size_t)cells[c + 1] * k_stride);
            if (c + 2 * SCQ8_ROWS + 1 < n_c) { /* strided rows from memory: ask ahead */
                _mm_prefetch((const char *)k + (size_t)cells[c + 2 * SCQ8_ROWS] * k_stride, _MM_HINT_T0);
                _mm_prefetch((const char *)k + (size_t)cells[c + 2 * SCQ8_ROWS + 1] * k_stride, _MM_HINT_T0);
            }
            __m512 acc[SCQ8_ROWS];
            for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
            for (int32_t i = 0; i < nb; i++) {
                __m512i kw = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)ka[i].qs)),
                                                _mm256_loadu_si256((const __m256i *)kb[i].qs), 1);
                __m512i corr = _mm512_dpbusd_epi32(z, c80, kw);
                __m512 dk = _mm512_insertf32x8(_mm512_set1_ps(h2f(ka[i].d)), _mm256_set1_ps(h2f(kb[i].d)), 1);
                for (int r = 0; r < R; r++) {
                    __m512i lanes = _mm512_sub_epi32(_mm512_dpbusd_epi32(z, xu[r][i], kw), corr);
                    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), _mm512_mul_ps(dk, _mm512_set1_ps(dq[r][i])), acc[r]);
                }
            }
            for (int r = 0; r < R; r++) {
                float *o = scores + (size_t)(r0 + r) * sc_stride + (size_t)c;
                o[0] = hsum_ps(_mm512_castps512_ps256(acc[r]));
                o[1] = hsum_ps(_mm512_extractf32x8_ps(acc[r], 1));
            }
        }
        if (c < n_c) {
            quant_vec_dot_fn dot = quant_get_vec_dot(SIMD_AVX2, GGML_TYPE_Q8_0);
            for (int r = 0; r < R; r++)
                scores[(size_t)(r0 + r) * sc_stride + (size_t)c] =
                    dot(hd, (const uint8_t *)k + (size_t)cells[c] * k_stride,
                        (const uint8_t *)qq + (size_t)(r0 + r) * qq_stride);
        }
    }
}

/* quant_expf of 16 lanes, bit for bit: its j * 2^n is scalef's (exact while normal; ldexpf's
 * correctly rounded result below), and lanes with |n| > 192 (or NaN) take its special values. */
AVX512 static inline __m512 expf16(__m512 x) {
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r), r);
    __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    __m512 u = _mm512_mul_ps(b, b);
    __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    __m512 y = _mm512_scalef_ps(j, n);
    __mmask16 ok = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_LE_OQ);
    __mmask16 neg = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
    /* !(|n| <= 192): n <= 0 ? 0 : inf (NaN n: inf) */
    y = _mm512_mask_mov_ps(y, (__mmask16)(~ok & ~neg), _mm512_set1_ps(INFINITY));
    return _mm512_mask_mov_ps(y, (__mmask16)(~ok & neg), _mm512_setzero_ps());
}

AVX512 static void expf_n_avx512(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, expf16(_mm512_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = quant_expf(x[i]);
}

AVX512 static inline __mmask16 live16(int64_t m) {
    return m >= 16 ? (__mmask16)0xffff : m <= 0 ? (__mmask16)0 : (__mmask16)((1u << m) - 1);
}

/* x - m of 16 cells (c0 on, lanes from n on zero) and their exps, stored. */
AVX512 static inline __m512 softmax_exp16(float *row, int64_t c0, int64_t n, __m512 vm) {
    __mmask16 live = live16(n - c0);
    __m512 x = _mm512_maskz_loadu_ps(live, row + c0);
    __mmask16 fin = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
    __m512 e = _mm512_maskz_mov_ps(live, expf16(_mm512_mask_sub_ps(_mm512_set1_ps(-INFINITY), fin, x, vm)));
    _mm512_mask_storeu_ps(row + c0, live, e);
    return e;
}

AVX512 static void softmax_avx512(float *row, int64_t n, const int32_t *cpos, int32_t pos, float scale, bool f16) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY), vscale = _mm512_set1_ps(scale);
    const __m512i vpos = _mm512_set1_epi32(pos);
    __m512 vmx = ninf;
    for (int64_t c = 0; c < n; c += 16) {
        __mmask16 live = live16(n - c);
        __m512 x = _mm512_maskz_loadu_ps(live, row + c);
        __mmask16 vis = _mm512_mask_cmple_epi32_mask(live, _mm512_maskz_loadu_epi32(live, cpos + c), vpos);
        __m512 y = _mm512_mask_mul_ps(ninf, vis, x, vscale);
        _mm512_mask_storeu_ps(row + c, live, y);
        vmx = _mm512_max_ps(y, vmx); /* y > vmx ? y : vmx, as the scalar compare (NaN never taken) */
    }
    /* which of +0 / -0 is the max does not matter: x - m then differs only in a zero's sign */
    const __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmx));
    /* Four chunks at a time (their folds share shuffles); the double sum is one chain in chunk
     * order, chunks past n adding 0. */
    double sum = 0;
    for (int64_t c = 0; c < n; c += 64) {
        __m512 e0 = softmax_exp16(row, c, n, vm), e1 = softmax_exp16(row, c + 16, n, vm);
        __m512 e2 = softmax_exp16(row, c + 32, n, vm), e3 = softmax_exp16(row, c + 48, n, vm);
        __m256d f = _mm256_cvtps_pd(fold16x4(e0, e1, e2, e3)); /* quant_fold16 of each chunk */
        __m128d lo = _mm256_castpd256_pd128(f), hi = _mm256_extractf128_pd(f, 1);
        sum += _mm_cvtsd_f64(lo);
        sum += _mm_cvtsd_f64(_mm_unpackhi_pd(lo, lo));
        sum += _mm_cvtsd_f64(hi);
        sum += _mm_cvtsd_f64(_mm_unpackhi_pd(hi, hi));
    }
    const __m512 vinv = _mm512_set1_ps((float)(1.0 / sum));
    int64_t c = 0;
    for (; c + 16 <= n; c += 16) {
        __m512 p = _mm512_mul_ps(_mm512_loadu_ps(row + c), vinv);
        _mm512_storeu_ps(row + c, f16 ? _mm512_cvtph_ps(_mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT)) : p);
    }
    if (c < n) {
        __mmask16 live = live16(n - c);
        __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(live, row + c), vinv);
        _mm512_mask_storeu_ps(row + c, live, f16 ? _mm512_cvtph_ps(_mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT)) : p);
    }
}

/* ---- dispatch --------------------------------------------------------------------------- */

static inline void scores_at(enum simd_level level, const float *q, const uint16_t *k, size_t k_stride,
                             const int32_t *cells, int64_t n_c, int32_t hd, float *scores) {
    if (level == SIMD_AVX512) scores_avx512(q, k, k_stride, cells, n_c, hd, scores);
    else if (level == SIMD_AVX2) scores_avx2(q, k, k_stride, cells, n_c, hd, scores);
    else scores_scalar(q, k, k_stride, cells, n_c, hd, scores);
}

static inline void scores_rows_at(enum simd_level level, const float *q, size_t q_stride, int32_t n_q,
                                  const uint16_t *k, size_t k_stride, const int32_t *cells, int64_t n_c, int32_t hd,
                                  float *scores, size_t sc_stride) {
    if (level == SIMD_AVX512 && hd % 16 == 0) {
        scores_rows_avx512(q, q_stride, n_q, k, k_stride, cells, n_c, hd, scores, sc_stride);
        return;
    }
    for (int32_t r = 0; r < n_q; r++)
        scores_at(level, q + (size_t)r * q_stride, k, k_stride, cells, n_c, hd, scores + (size_t)r * sc_stride);
}

static inline void mix_at(enum simd_level level, const float *p, const uint16_t *v, size_t v_stride,
                          const int32_t *cells, int64_t n_c, int32_t hd, float *out) {
    if (level == SIMD_AVX512 && hd % 16 == 0) mix_avx512(p, v, v_stride, cells, n_c, hd, out);
    else if (level >= SIMD_AVX2 && hd % 8 == 0) mix_avx2(p, v, v_stride, cells, n_c, hd, out);
    else mix_scalar(p, v, v_stride, cells, n_c, hd, out);
}

static inline void mix_rows_at(enum simd_level level, const float *p, size_t p_stride, int32_t n_p,
                               const uint16_t *v, size_t v_stride, const int32_t *cells, int64_t n_c, int32_t hd,
                               float *out, size_t out_stride) {
    if (level == SIMD_AVX512 && hd % 16 == 0) {
        mix_rows_avx512(p, p_stride, n_p, v, v_stride, cells, n_c, hd, out, out_stride);
        return;
    }
    for (int32_t r = 0; r < n_p; r++)
        mix_at(level, p + (size_t)r * p_stride, v, v_stride, cells, n_c, hd, out + (size_t)r * out_stride);
}

static inline void softmax_at(enum simd_level level, float *row, int64_t n, const int32_t *cpos, int32_t pos,
                              float scale, bool f16) {
    if (level == SIMD_AVX512) softmax_avx512(row, n, cpos, pos, scale, f16);
    else if (level == SIMD_AVX2) softmax_avx2(row, n, cpos, pos, scale, f16);
    else softmax_scalar(row, n, cpos, pos, scale, f16);
}

/* Q8_0 scores: quant.c's Q8_0 dot (the level's kernel; every level gives the scalar's bits). */
static void scores_q8_rows_at(enum simd_level level, const void *qq, size_t qq_stride, int32_t n_q, const void *k,
                              size_t k_stride, const int32_t *cells, int64_t n_c, int32_t hd, float *scores,
                              size_t sc_stride) {
    if (level == SIMD_AVX512) {
        scores_q8_rows_avx512(qq, qq_stride, n_q, k, k_stride, cells, n_c, hd, scores, sc_stride);
        return;
    }
    quant_vec_dot_fn dot = quant_get_vec_dot(level == SIMD_AVX512 ? SIMD_AVX2 : level, GGML_TYPE_Q8_0);
    for (int64_t c = 0; c < n_c; c++) {
        const uint8_t *kr = (const uint8_t *)k + (size_t)cells[c] * k_stride;
        for (int32_t r = 0; r < n_q; r++)
            scores[(size_t)r * sc_stride + (size_t)c] = dot(hd, kr, (const uint8_t *)qq + (size_t)r * qq_stride);
    }
}

static void mix_q8_rows_at(enum simd_level level, const float *p, size_t p_stride, int32_t n_p, const void *v,
                           size_t v_stride, const int32_t *cells, int64_t n_c, int32_t hd, float *out,
                           size_t out_stride) {
    if (level == SIMD_AVX512 && hd % 16 == 0) {
        mix_rows_q8_avx512(p, p_stride, n_p, v, v_stride, cells, n_c, hd, out, out_stride);
        return;
    }
    for (int32_t r = 0; r < n_p; r++)
        mix_q8_scalar(p + (size_t)r * p_stride, v, v_stride, cells, n_c, hd, out + (size_t)r * out_stride);
}

void attn_scores_q8_0_rows_level(enum simd_level level, const void *qq, size_t qq_stride, int32_t n_q, const void *k,
                                 size_t k_stride, const int32_t *cells, int64_t n_c, int32_t hd, float *scores,
                                 size_t sc_stride) {
    ASSERT(simd_level_supported(level) && hd % QK8_0 == 0);
    scores_q8_rows_at(level, qq, qq_stride, n_q, k, k_stride, cells, n_c, hd, scores, sc_stride);
}

void attn_mix_q8_0_rows_level(enum simd_level level, const float *p, size_t p_stride, int32_t n_p, const void *v,
                              size_t v_stride, const int32_t *cells, int64_t n_c, int32_t hd, float *out,
                              size_t out_stride) {
    ASSERT(simd_level_supported(level) && hd % QK8_0 == 0);
    mix_q8_rows_at(level, p, p_stride, n_p, v, v_stride, cells, n_c, hd, out, out_stride);
}

void attn_mix_f16_rows_level(enum simd_level level, const float *p, size_t p_stride, int32_t n_p,
                             const uint16_t *v, size_t v_stride, const int32_t *cells, int64_t n_c, int32_t hd,
                             float *out, size_t out_stride) {
    ASSERT(simd_level_supported(level));
    mix_rows_at(level, p, p_stride, n_p, v, v_stride, cells, n_c, hd, out, out_stride);
}

void attn_softmax_row_level(enum simd_level level, float *row, int64_t n, const int32_t *cpos, int32_t pos,
                            float scale) {
    ASSERT(simd_level_supported(level));
    softmax_at(level, row, n, cpos, pos, scale, true);
}

void attn_scores_f16_level(enum simd_level level, const float *q, const uint16_t *k, size_t k_stride,
                           const int32_t *cells, int64_t n_c, int32_t hd, float *scores) {
    ASSERT(simd_level_supported(level));
    scores_at(level, q, k, k_stride, cells, n_c, hd, scores);
}

void attn_scores_f16_rows_level(enum simd_level level, const float *q, size_t q_stride, int32_t n_q,
                                const uint16_t *k, size_t k_stride, const int32_t *cells, int64_t n_c, int32_t hd,
                                float *scores, size_t sc_stride) {
    ASSERT(simd_level_supported(level));
    scores_rows_at(level, q, q_stride, n_q, k, k_stride, cells, n_c, hd, scores, sc_stride);
}

void attn_mix_f16_level(enum simd_level level, const float *p, const uint16_t *v, size_t v_stride,
                        const int32_t *cells, int64_t n_c, int32_t hd, float *out) {
    ASSERT(simd_level_supported(level));
    mix_at(level, p, v, v_stride, cells, n_c, hd, out);
}

/* ---- F32 row blocks through sgemm ---------------------------------------------------------- */

/* Each row's mask and softmax (rows nv apart), the probabilities rounded to F16 when p_f16. */
static void rows_softmax(float *sc, int64_t n_rows, int64_t nv, const int32_t *cpos, const int32_t *row_pos,
                         int32_t window, float scale, bool p_f16) {
    for (int64_t r = 0; r < n_rows; r++) {
        attn_mask_window(sc + r * nv, nv, cpos, row_pos[r], window);
        if (p_f16) attn_softmax_row(sc + r * nv, nv, cpos, row_pos[r], scale);
        else attn_softmax_row_f32(sc + r * nv, nv, cpos, row_pos[r], scale);
    }
}

void attn_rows_f32(const float *q, int64_t n_rows, const float *k, const float *v, int64_t nv, int32_t hd,
                   const int32_t *cpos, const int32_t *row_pos, int32_t window, float scale, bool p_f16, float *sc,
                   float *out) {
    if (n_rows <= 0 || nv <= 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)n_rows, (blasint)nv, (blasint)hd, 1.0f, q,
                (blasint)hd, k, (blasint)hd, 0.0f, sc, (blasint)nv);
    attn_rows_softmax_mix_f32(sc, n_rows, v, nv, hd, cpos, row_pos, window, scale, p_f16, out);
}

void attn_rows_softmax_mix_f32(float *sc, int64_t n_rows, const float *v, int64_t nv, int32_t hd, const int32_t *cpos,
                               const int32_t *row_pos, int32_t window, float scale, bool p_f16, float *out) {
    if (n_rows <= 0 || nv <= 0) return;
    rows_softmax(sc, n_rows, nv, cpos, row_pos, window, scale, p_f16);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)n_rows, (blasint)hd, (blasint)nv, 1.0f, sc,
                (blasint)nv, v, (blasint)hd, 0.0f, out, (blasint)hd);
}

/* ---- a block of prompt rows on the F16 cells (attn_rows_f16) ---------------------------- */

/* The definition: one fma chain per score (over d) and per output element (over the cells). */
static void rows_f16_scalar(const float *q, int64_t n_rows, const uint16_t *k, size_t k_stride, const int32_t *cells,
                            int64_t nv, int32_t hd, float *sc) {
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t c = 0; c < nv; c++) {
            const uint16_t *kr = k + (size_t)cells[c] * k_stride;
            float acc = 0;
            for (int32_t d = 0; d < hd; d++) acc = fmaf(q[r * hd + d], fp16_to_f32(kr[d]), acc);
            sc[r * nv + c] = acc;
        }
}

static void rows_f16_mix_scalar(const float *sc, int64_t n_rows, const uint16_t *v, size_t v_stride,
                                const int32_t *cells, int64_t nv, int32_t hd, float *out) {
    for (int64_t r = 0; r < n_rows; r++)
        for (int32_t d = 0; d < hd; d++) {
            float acc = 0;
            for (int64_t c = 0; c < nv; c++)
                acc = fmaf(sc[r * nv + c], fp16_to_f32(v[(size_t)cells[c] * v_stride + d]), acc);
            out[r * hd + d] = acc;
        }
}

/* Cells per tile; the scores' tiles taken two at a time; rows per register tile. */
enum { RF_CELLS = 16, RF_SC_CELLS = 2 * RF_CELLS, RF_SC_ROWS = 6, RF_MIX_ROWS = 4 };

/* Scores of rows [0, R) against two tiles of 16 cells given transposed (kt[d * 32 + l]: element
 * d of cell l of the pair): two accumulators per row, their lanes the cells, so that each query
 * element is loaded once for 32 cells (a prompt read in steps of 64 tokens, on this path:
 * build/bench/forward_bench MODEL --prefill 1536 --step 64, the SmolLM2-shaped Q8_0 model of
 * scripts/bench.d/40-forward, 1314-1329 ms against 1336-1347 with one tile of 16 cells and 8
 * rows, three alternating pairs). */
AVX512 static inline __attribute__((always_inline)) void rf_scores_tile(const float *q, int32_t hd, const float *kt,
                                                                        const int R, float *sc, int64_t nv,
                                                                        __mmask16 live0, __mmask16 live1) {
    __m512 acc0[RF_SC_ROWS], acc1[RF_SC_ROWS];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
    for (int32_t d = 0; d < hd; d++) {
        const __m512 k0 = _mm512_loadu_ps(kt + d * RF_SC_CELLS), k1 = _mm512_loadu_ps(kt + d * RF_SC_CELLS + RF_CELLS);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512 qd = _mm512_set1_ps(q[r * hd + d]);
            __asm__("" : "+v"(qd)); /* one broadcast for both fmas, not one embedded in each */
            acc0[r] = _mm512_fmadd_ps(qd, k0, acc0[r]);
            acc1[r] = _mm512_fmadd_ps(qd, k1, acc1[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        _mm512_mask_storeu_ps(sc + r * nv, live0, acc0[r]);
        _mm512_mask_storeu_ps(sc + r * nv + RF_CELLS, live1, acc1[r]);
    }
}

/* out rows [0, R) x elements [d0, d0 + 16 J) += the tile's m cells (vb[l * hd + d]) weighed by
 * each row's probabilities (p + r * nv), cell after cell. */
AVX512 static inline __attribute__((always_inline)) void rf_mix_tile(const float *p, int64_t nv, const float *vb,
                                                                     int32_t hd, int32_t d0, const int R, const int J,
                                                                     int m, float *out) {
    __m512 acc[RF_MIX_ROWS][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int j = 0; j < J; j++) acc[r][j] = _mm512_loadu_ps(out + r * hd + d0 + 16 * j);
    for (int l = 0; l < m; l++) {
        __m512 vv[4];
#pragma GCC unroll 4
        for (int j = 0; j < J; j++) {
            vv[j] = _mm512_loadu_ps(vb + l * hd + d0 + 16 * j);
            __asm__("" : "+v"(vv[j])); /* in a register for the R rows, not reloaded by each fma */
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 pr = _mm512_set1_ps(p[r * nv + l]);
#pragma GCC unroll 4
            for (int j = 0; j < J; j++) acc[r][j] = _mm512_fmadd_ps(pr, vv[j], acc[r][j]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int j = 0; j < J; j++) _mm512_storeu_ps(out + r * hd + d0 + 16 * j, acc[r][j]);
}

/* o[e] = element e of r[0 .. 16) (a 16 x 16 transpose in four rounds of shuffles). */
AVX512 static inline __attribute__((always_inline)) void transpose16(const __m512 r[16], __m512 o[16]) {
    __m512 t[16], u[16], v[16];
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) { /* lane k: r_i[4k], r_i+1[4k], r_i[4k + 1], ... */
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) { /* u[i + e], lane k: rows i .. i + 3, element 4k + e */
        u[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
#pragma GCC unroll 4
    for (int e = 0; e < 4; e++) { /* v[e], v[e + 4]: rows 0 .. 7 (v[e + 8], v[e + 12]: 8 .. 15) */
        v[e] = _mm512_shuffle_f32x4(u[e], u[e + 4], 0x88);
        v[e + 4] = _mm512_shuffle_f32x4(u[e], u[e + 4], 0xDD);
        v[e + 8] = _mm512_shuffle_f32x4(u[e + 8], u[e + 12], 0x88);
        v[e + 12] = _mm512_shuffle_f32x4(u[e + 8], u[e + 12], 0xDD);
    }
#pragma GCC unroll 8
    for (int e = 0; e < 8; e++) {
        o[e] = _mm512_shuffle_f32x4(v[e], v[e + 8], 0x88);
        o[e + 8] = _mm512_shuffle_f32x4(v[e], v[e + 8], 0xDD);
    }
}

AVX512 static void rows_f16_avx512(const float *q, int64_t n_rows, const uint16_t *k, size_t k_stride,
                                   const int32_t *cells, int64_t nv, int32_t hd, float *sc, float *tile) {
    for (int64_t c0 = 0; c0 < nv; c0 += RF_SC_CELLS) {
        const int m = nv - c0 < RF_SC_CELLS ? (int)(nv - c0) : RF_SC_CELLS;
        /* the pair transposed: element d of cell l at d * 32 + l (cells past m: zeros) */
        for (int h = 0; h < RF_SC_CELLS; h += RF_CELLS)
            for (int32_t d = 0; d < hd; d += 16) {
                __m512 r[16], o[16];
                for (int l = 0; l < RF_CELLS; l++) {
                    const uint16_t *kr = h + l < m ? k + (size_t)cells[c0 + h + l] * k_stride + d : NULL;
                    r[l] = kr ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)kr)) : _mm512_setzero_ps();
                }
                transpose16(r, o);
#pragma GCC unroll 16
                for (int e = 0; e < 16; e++) _mm512_storeu_ps(tile + (d + e) * RF_SC_CELLS + h, o[e]);
            }
        const __mmask16 live0 = (__mmask16)(m >= RF_CELLS ? 0xFFFF : (1u << m) - 1);
        const __mmask16 live1 = (__mmask16)(m >= RF_SC_CELLS ? 0xFFFF : m > RF_CELLS ? (1u << (m - RF_CELLS)) - 1 : 0);
        for (int64_t r0 = 0; r0 < n_rows; r0 += RF_SC_ROWS) {
            const float *qr = q + r0 * hd;
            float *sr = sc + r0 * nv + c0;
            switch (n_rows - r0 < RF_SC_ROWS ? n_rows - r0 : RF_SC_ROWS) {
#define RF_SC(R) rf_scores_tile(qr, hd, tile, R, sr, nv, live0, live1); break
            case 1: RF_SC(1); case 2: RF_SC(2); case 3: RF_SC(3); case 4: RF_SC(4); case 5: RF_SC(5); default: RF_SC(6);
#undef RF_SC
            }
        }
    }
}

AVX512 static void rows_f16_mix_avx512(const float *sc, int64_t n_rows, const uint16_t *v, size_t v_stride,
                                       const int32_t *cells, int64_t nv, int32_t hd, float *tile, float *out) {
    memset(out, 0, (size_t)n_rows * (size_t)hd * sizeof *out);
    for (int64_t c0 = 0; c0 < nv; c0 += RF_CELLS) {
        const int m = nv - c0 < RF_CELLS ? (int)(nv - c0) : RF_CELLS;
        for (int l = 0; l < m; l++) { /* the tile's V rows in F32, as stored */
            const uint16_t *vr = v + (size_t)cells[c0 + l] * v_stride;
            for (int32_t d = 0; d < hd; d += 16)
                _mm512_storeu_ps(tile + l * hd + d, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + d))));
        }
        for (int64_t r0 = 0; r0 < n_rows; r0 += RF_MIX_ROWS) {
            const int R = n_rows - r0 < RF_MIX_ROWS ? (int)(n_rows - r0) : RF_MIX_ROWS;
            const float *pr = sc + r0 * nv + c0;
            float *orow = out + r0 * hd;
            for (int32_t d0 = 0; d0 < hd; d0 += 64) {
                const int J = hd - d0 < 64 ? (hd - d0) / 16 : 4;
#define RF_MIX(RR, JJ) rf_mix_tile(pr, nv, tile, hd, d0, RR, JJ, m, orow)
#define RF_MIX_R(JJ)                                                                                                   \
    switch (R) {                                                                                                       \
    case 1: RF_MIX(1, JJ); break;                                                                                      \
    case 2: RF_MIX(2, JJ); break;                                                                                      \
    case 3: RF_MIX(3, JJ); break;                                                                                      \
    default: RF_MIX(4, JJ);                                                                                            \
    }
                switch (J) {
                case 1: RF_MIX_R(1); break;
                case 2: RF_MIX_R(2); break;
                case 3: RF_MIX_R(3); break;
                default: RF_MIX_R(4);
                }
#undef RF_MIX_R
#undef RF_MIX
            }
        }
    }
}

void attn_rows_f16_level(enum simd_level level, const float *q, int64_t n_rows, const uint16_t *k, size_t k_stride,
                         const uint16_t *v, size_t v_stride, const int32_t *cells, int64_t nv, int32_t hd,
                         const int32_t *cpos, const int32_t *row_pos, int32_t window, float scale, float *sc,
                         float *tile, float *out) {
    ASSERT(hd % 16 == 0);
    if (n_rows <= 0) return;
    if (nv <= 0) {
        memset(out, 0, (size_t)n_rows * (size_t)hd * sizeof *out);
        return;
    }
    if (level == SIMD_AVX512) rows_f16_avx512(q, n_rows, k, k_stride, cells, nv, hd, sc, tile);
    else rows_f16_scalar(q, n_rows, k, k_stride, cells, nv, hd, sc);
    rows_softmax(sc, n_rows, nv, cpos, row_pos, window, scale, true); /* bits the same at every level */
    if (level == SIMD_AVX512) rows_f16_mix_avx512(sc, n_rows, v, v_stride, cells, nv, hd, tile, out);
    else rows_f16_mix_scalar(sc, n_rows, v, v_stride, cells, nv, hd, out);
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

void attn_scores_f16_rows(const float *q, size_t q_stride, int32_t n_q, const uint16_t *k, size_t k_stride,
                          const int32_t *cells, int64_t n_c, int32_t hd, float *scores, size_t sc_stride) {
    scores_rows_at(best_level, q, q_stride, n_q, k, k_stride, cells, n_c, hd, scores, sc_stride);
}

void attn_mix_f16(const float *p, const uint16_t *v, size_t v_stride, const int32_t *cells, int64_t n_c,
                  int32_t hd, float *out) {
    mix_at(best_level, p, v, v_stride, cells, n_c, hd, out);
}

void attn_mix_f16_rows(const float *p, size_t p_stride, int32_t n_p, const uint16_t *v, size_t v_stride,
                       const int32_t *cells, int64_t n_c, int32_t hd, float *out, size_t out_stride) {
    mix_rows_at(best_level, p, p_stride, n_p, v, v_stride, cells, n_c, hd, out, out_stride);
}

void attn_rows_f16(const float *q, int64_t n_rows, const uint16_t *k, size_t k_stride, const uint16_t *v,
                   size_t v_stride, const int32_t *cells, int64_t nv, int32_t hd, const int32_t *cpos,
                   const int32_t *row_pos, int32_t window, float scale, float *sc, float *tile, float *out) {
    attn_rows_f16_level(best_level, q, n_rows, k, k_stride, v, v_stride, cells, nv, hd, cpos, row_pos, window, scale,
                        sc, tile, out);
}

void attn_scores_q8_0_rows(const void *qq, size_t qq_stride, int32_t n_q, const void *k, size_t k_stride,
                           const int32_t *cells, int64_t n_c, int32_t hd, float *scores, size_t sc_stride) {
    scores_q8_rows_at(best_level, qq, qq_stride, n_q, k, k_stride, cells, n_c, hd, scores, sc_stride);
}

void attn_mix_q8_0_rows(const float *p, size_t p_stride, int32_t n_p, const void *v, size_t v_stride,
                        const int32_t *cells, int64_t n_c, int32_t hd, float *out, size_t out_stride) {
    mix_q8_rows_at(best_level, p, p_stride, n_p, v, v_stride, cells, n_c, hd, out, out_stride);
}

void attn_softmax_row(float *row, int64_t n, const int32_t *cpos, int32_t pos, float scale) {
    softmax_at(best_level, row, n, cpos, pos, scale, true);
}

void attn_softmax_row_f32(float *row, int64_t n, const int32_t *cpos, int32_t pos, float scale) {
    softmax_at(best_level, row, n, cpos, pos, scale, false);
}

void attn_softmax_row_f32_level(enum simd_level level, float *row, int64_t n, const int32_t *cpos, int32_t pos,
                                float scale) {
    ASSERT(simd_level_supported(level));
    softmax_at(level, row, n, cpos, pos, scale, false);
}

void attn_mask_window(float *row, int64_t n, const int32_t *cpos, int32_t pos, int32_t window) {
    if (window <= 0) return;
    for (int64_t c = 0; c < n && cpos[c] <= pos - window; c++) row[c] = -INFINITY;
}

void attn_expf_n_level(enum simd_level level, const float *x, float *y, int64_t n) {
    ASSERT(simd_level_supported(level));
    if (level == SIMD_AVX512) expf_n_avx512(x, y, n);
    else if (level == SIMD_AVX2) expf_n_avx2(x, y, n);
    else
        for (int64_t i = 0; i < n; i++) y[i] = quant_expf(x[i]);
}

/* ---- the reference's attention of one row on quantized cells ---- */

void attn_row_reference_fa(int k_type, const float *q, const void *qq, const void *k, size_t k_stride, int v_type,
                           const void *v, size_t v_stride, const int32_t *cells, const int32_t *cpos, int64_t n_c,
                           int32_t pos, int32_t window, float scale, int32_t hd, float *tmp, float *out) {
    float *row = tmp, S = 0.0f, M = -INFINITY;
    quant_vec_dot_fn dot_q8 = quant_get_vec_dot(SIMD_SCALAR, GGML_TYPE_Q8_0);
    for (int32_t d = 0; d < hd; d++) out[d] = 0.0f;
    for (int64_t c = 0; c < n_c; c++) {
        if (cpos[c] > pos || (window > 0 && cpos[c] <= pos - window)) continue; /* masked: skipped */
        const uint8_t *kr = (const uint8_t *)k + (size_t)cells[c] * k_stride;
        float s;
        if (k_type == GGML_TYPE_Q8_0) {
            s = dot_q8(hd, kr, qq);
        } else {
            quant_to_float(GGML_TYPE_F16, kr, row, hd);
            s = quant_dot_f32_vec_f16(hd, hd, q, row);
        }
        s = s * scale;
        float Mold = M, ms = 1.0f, vs = 1.0f;
        if (s > M) {
            M = s;
            ms = expf(Mold - M);
            for (int32_t d = 0; d < hd; d++) out[d] *= ms;
        } else {
            vs = expf(s - M);
        }
        quant_to_float(v_type, (const uint8_t *)v + (size_t)cells[c] * v_stride, row, hd);
        for (int32_t d = 0; d < hd; d++) out[d] = fmaf(row[d], vs, out[d]);
        S = fmaf(S, ms, vs);
    }
    float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int32_t d = 0; d < hd; d++) out[d] *= inv;
}
