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
#include "math/simd_avx2.h"

#include <immintrin.h>
#include <string.h>

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

/* bf16 is the top half of an f32: widen by shifting into the high 16 bits. */
AVX2 static inline __m256 bf16x8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

AVX2 static float dot_bf16(int64_t n, const void *w, const void *x) {
    const uint16_t *a = w, *b = x;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) acc[k] = _mm256_fmadd_ps(bf16x8(a + i + 8 * k), bf16x8(b + i + 8 * k), acc[k]);
    float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) s += bf16_to_f32(a[i]) * bf16_to_f32(b[i]);
    return s;
}

/* The 32 levels of one Q8_0 / Q4_0 / Q5_0 (signed, offset removed) or Q4_1 / Q5_1 (unsigned)
 * block, in element order. t is a constant in every caller, so the switch folds away. */
AVX2 static inline __m256i block_levels(enum ggml_type t, const uint8_t *blk) {
    switch (t) {
    case GGML_TYPE_Q8_0: return _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)blk)->qs);
    case GGML_TYPE_Q4_0: return _mm256_sub_epi8(nibbles(((const block_q4_0 *)blk)->qs), _mm256_set1_epi8(8));
    case GGML_TYPE_Q5_0: {
        const block_q5_0 *b = (const block_q5_0 *)blk;
        return _mm256_sub_epi8(_mm256_or_si256(nibbles(b->qs), q5_high_bits(b->qh)), _mm256_set1_epi8(16));
    }
    case GGML_TYPE_Q4_1: return nibbles(((const block_q4_1 *)blk)->qs);
    default: { /* Q5_1 */
        const block_q5_1 *b = (const block_q5_1 *)blk;
        return _mm256_or_si256(nibbles(b->qs), q5_high_bits(b->qh));
    }
    }
}

/* Q8_0 / Q4_0 / Q5_0 . Q8_0 of one weight row with nx activation rows (x_stride bytes apart):
 * sum over blocks of d_w * d_x * (levels . q8), the weight levels and their magnitudes decoded
 * once for all rows. nx is a constant in every caller; nx = 1 is the plain dot product. */
AVX2 static inline __attribute__((always_inline)) void dot_x0_n(enum ggml_type t, size_t size, int64_t n,
                                                                const void *w, const void *x, size_t x_stride,
                                                                const int nx, float *out) {
    const uint8_t *a = w;
    __m256 acc[QUANT_DOT_ROWS];
    for (int r = 0; r < nx; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++, a += size) {
        __m256i qa = block_levels(t, a), ua = _mm256_sign_epi8(qa, qa);
        float dw = h2f(*(const uint16_t *)a); /* d leads every block */
        for (int r = 0; r < nx; r++) {
            const block_q8_0 *b = (const block_q8_0 *)((const uint8_t *)x + r * x_stride) + i;
            __m256i qb = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)b->qs), qa);
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(ua, qb), _mm256_set1_epi16(1));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(b->d)), _mm256_cvtepi32_ps(p), acc[r]);
        }
    }
    for (int r = 0; r < nx; r++) out[r] = hsum_ps(acc[r]);
}

AVX2 static inline float dot_x0(enum ggml_type t, size_t size, int64_t n, const void *w, const void *x) {
    float out;
    dot_x0_n(t, size, n, w, x, 0, 1, &out);
    return out;
}

/* QUANT_DOT_WROWS weight rows (w_stride bytes apart) against one activation row: per row exactly
 * dot_x0's operations (so its numbers), the rows side by side: one row's accumulator waits on
 * its fma every block, four rows' chains overlap, and the activation block is loaded once. The
 * group DOTR_PF_GROUPS groups ahead is prefetched block step by block step, as the AVX-512
 * kernels do (rows side by side defeat the hardware prefetcher). */
#define DOTR_PF_GROUPS 4
AVX2 static inline __attribute__((always_inline)) void dotr_x0(enum ggml_type t, size_t size, int64_t n, const void *w,
                                                               size_t w_stride, const void *x, float *out) {
    const uint8_t *a = w;
    const block_q8_0 *b = x;
    __m256 acc[QUANT_DOT_WROWS];
    for (int r = 0; r < QUANT_DOT_WROWS; r++) acc[r] = _mm256_setzero_ps();
    const uint8_t *pf = a + DOTR_PF_GROUPS * QUANT_DOT_WROWS * w_stride;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        for (size_t off = 0; off < QUANT_DOT_WROWS * size + 63; off += 64)
            _mm_prefetch((const char *)pf + (size_t)i * QUANT_DOT_WROWS * size + off, _MM_HINT_T0);
        __m256i xb = _mm256_loadu_si256((const __m256i *)b[i].qs);
        float dx = h2f(b[i].d);
        /* Q4_0 / Q5_0: the unsigned levels (0..15 / 0..31) times the signed activation, and the
         * offset (8 / 16) times the activation's sums of four, once for all rows: the same
         * integer lanes as the signed levels' (activations are within -127..127). */
        const __m256i ones = _mm256_set1_epi16(1);
        __m256i off = _mm256_setzero_si256();
        if (t != GGML_TYPE_Q8_0)
            off = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(t == GGML_TYPE_Q4_0 ? 8 : 16), xb), ones);
#pragma GCC unroll 4
        for (int r = 0; r < QUANT_DOT_WROWS; r++) {
            const uint8_t *blk = a + (size_t)r * w_stride + (size_t)i * size;
            __m256i p;
            if (t == GGML_TYPE_Q8_0) {
                __m256i qa = block_levels(t, blk), ua = _mm256_sign_epi8(qa, qa);
                p = _mm256_madd_epi16(_mm256_maddubs_epi16(ua, _mm256_sign_epi8(xb, qa)), ones);
            } else {
                __m256i lu = t == GGML_TYPE_Q4_0 ? nibbles(((const block_q4_0 *)blk)->qs)
                                                 : _mm256_or_si256(nibbles(((const block_q5_0 *)blk)->qs),
                                                                   q5_high_bits(((const block_q5_0 *)blk)->qh));
                p = _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lu, xb), ones), off);
            }
            float dw = h2f(*(const uint16_t *)blk);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx), _mm256_cvtepi32_ps(p), acc[r]);
        }
    }
    for (int r = 0; r < QUANT_DOT_WROWS; r++) out[r] = hsum_ps(acc[r]);
}

AVX2 static void dotr_q8_0(int64_t n, const void *w, size_t w_stride, const void *x, float *out) {
    dotr_x0(GGML_TYPE_Q8_0, sizeof(block_q8_0), n, w, w_stride, x, out);
}
AVX2 static void dotr_q4_0(int64_t n, const void *w, size_t w_stride, const void *x, float *out) {
    dotr_x0(GGML_TYPE_Q4_0, sizeof(block_q4_0), n, w, w_stride, x, out);
}
AVX2 static void dotr_q5_0(int64_t n, const void *w, size_t w_stride, const void *x, float *out) {
    dotr_x0(GGML_TYPE_Q5_0, sizeof(block_q5_0), n, w, w_stride, x, out);
}

AVX2 static void dot4_q8_0(int64_t n, const void *w, const void *x, size_t x_stride, float *out) {
    dot_x0_n(GGML_TYPE_Q8_0, sizeof(block_q8_0), n, w, x, x_stride, QUANT_DOT_ROWS, out);
}

AVX2 static float dot_q8_0(int64_t n, const void *w, const void *x) {
    return dot_x0(GGML_TYPE_Q8_0, sizeof(block_q8_0), n, w, x);
}
AVX2 static float dot_q4_0(int64_t n, const void *w, const void *x) {
    return dot_x0(GGML_TYPE_Q4_0, sizeof(block_q4_0), n, w, x);
}
AVX2 static float dot_q5_0(int64_t n, const void *w, const void *x) {
    return dot_x0(GGML_TYPE_Q5_0, sizeof(block_q5_0), n, w, x);
}

/* Q4_1 / Q5_1 . Q8_1: unsigned levels times signed activations, plus m_w * s_x per block. Both
 * weight layouts start with d, m. */
AVX2 static inline float dot_x1(enum ggml_type t, size_t size, int64_t n, const void *w, const void *x) {
    const uint8_t *a = w;
    const block_q8_1 *b = x;
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t i = 0; i < n / QK8_1; i++, a += size) {
        const uint16_t *dm = (const uint16_t *)a;
        __m256i qb = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(block_levels(t, a), qb), _mm256_set1_epi16(1));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(dm[0]) * h2f(b[i].d)), _mm256_cvtepi32_ps(p), acc);
        mins += h2f(dm[1]) * h2f(b[i].s);
    }
    return hsum_ps(acc) + mins;
}

AVX2 static float dot_q4_1(int64_t n, const void *w, const void *x) {
    return dot_x1(GGML_TYPE_Q4_1, sizeof(block_q4_1), n, w, x);
}
AVX2 static float dot_q5_1(int64_t n, const void *w, const void *x) {
    return dot_x1(GGML_TYPE_Q5_1, sizeof(block_q5_1), n, w, x);
}

/* Q4_K and Q5_K . Q8_K: per chunk of 64 elements, the low nibbles of 32 bytes are sub-block 2k
 * and the high nibbles sub-block 2k+1; Q5_K adds bit 2k / 2k+1 of each qh byte as bit 4. */
AVX2 static inline __attribute__((always_inline)) void dot_k45_n(int64_t n, const void *w, const void *x,
                                                                 size_t x_stride, const int nx,
                                                                 const int with_qh, float *out) {
    const __m256i m4 = _mm256_set1_epi8(0xF), one = _mm256_set1_epi8(1);
    __m256 acc[QUANT_DOT_ROWS], acc_m[QUANT_DOT_ROWS];
    for (int r = 0; r < nx; r++) acc[r] = acc_m[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const struct k45_view v = k45_view(w, i, with_qh);
        const uint8_t *qs = v.qs;
        const uint64_t sc = v.sc, mn = v.mn;
        __m256i lv[8], scale[8]; /* sub-block j: levels and its scale as int16 */
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m256i q4 = _mm256_loadu_si256((const __m256i *)(qs + 32 * k));
            lv[2 * k] = _mm256_and_si256(q4, m4);
            lv[2 * k + 1] = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
            if (with_qh) {
                __m256i qh = _mm256_loadu_si256((const __m256i *)v.qh);
                lv[2 * k] = _mm256_or_si256(lv[2 * k], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), one), 4));
                lv[2 * k + 1] = _mm256_or_si256(lv[2 * k + 1],
                                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k + 1), one), 4));
            }
            scale[2 * k] = _mm256_set1_epi16((short)((sc >> (16 * k)) & 0xff));
            scale[2 * k + 1] = _mm256_set1_epi16((short)((sc >> (16 * k + 8)) & 0xff));
        }
        const float d = h2f(v.d), dmin = h2f(v.dmin);
        for (int r = 0; r < nx; r++) {
            const block_q8_K *b = (const block_q8_K *)((const uint8_t *)x + r * x_stride) + i;
            acc_m[r] = _mm256_fmadd_ps(_mm256_set1_ps(dmin * b->d), _mm256_cvtepi32_ps(k4_mins_dot(mn, b->bsums)), acc_m[r]);
            __m256i sumi[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m256i yl = _mm256_loadu_si256((const __m256i *)(b->qs + 64 * k));
                __m256i yh = _mm256_loadu_si256((const __m256i *)(b->qs + 64 * k + 32));
                __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lv[2 * k], yl), scale[2 * k]);
                __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(lv[2 * k + 1], yh), scale[2 * k + 1]);
                sumi[k & 1] = _mm256_add_epi32(sumi[k & 1], _mm256_add_epi32(pl, ph));
            }
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * b->d), _mm256_cvtepi32_ps(_mm256_add_epi32(sumi[0], sumi[1])), acc[r]);
        }
    }
    for (int r = 0; r < nx; r++) out[r] = hsum_ps(acc[r]) - hsum_ps(acc_m[r]);
}

AVX2 static inline float dot_k45(int64_t n, const void *w, const void *x, const int with_qh) {
    float out;
    dot_k45_n(n, w, x, 0, 1, with_qh, &out);
    return out;
}

AVX2 static void dot4_q4_K(int64_t n, const void *w, const void *x, size_t x_stride, float *out) {
    dot_k45_n(n, w, x, x_stride, QUANT_DOT_ROWS, 0, out);
}

AVX2 static float dot_q4_K(int64_t n, const void *w, const void *x) { return dot_k45(n, w, x, 0); }
AVX2 static float dot_q5_K(int64_t n, const void *w, const void *x) { return dot_k45(n, w, x, 1); }

/* The unsigned levels (0..63, i.e. level + 32) of half h (128 elements) of a Q6_K super-block,
 * as 4 vectors of 32 in element order: ql low nibbles (+ qh bits 0-1, 2-3), then high nibbles
 * (+ qh bits 4-5, 6-7). */
AVX2 static inline void q6_levels(const block_q6_K *b, int h, __m256i lv[4]) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3);
    __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
    __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
    __m256i hb = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
    __m256i q[4] = {
        _mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
        _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
    };
    for (int k = 0; k < 4; k++)
        lv[k] = _mm256_or_si256(q[k], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * k), m2), 4));
}

/* Levels are taken unsigned (level + 32) and the 32 * q8 subtracted per pair-sum. */
AVX2 static float dot_q6_K(int64_t n, const void *w, const void *x) {
    const block_q6_K *a = w;
    const block_q8_K *b = x;
    const __m256i off = _mm256_set1_epi8(32);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const int8_t *sc = a[i].scales + 8 * h;
            __m256i lv[4];
            q6_levels(&a[i], h, lv);
            for (int k = 0; k < 4; k++) {
                __m256i y8 = _mm256_loadu_si256((const __m256i *)(b[i].qs + 128 * h + 32 * k));
                __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(lv[k], y8), _mm256_maddubs_epi16(off, y8));
                __m256i s16 = _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, s16));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i].d) * b[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

/* The scales and mins as byte arrays (the dequantizers index them). */
static inline void k4_scale_bytes(const uint8_t *q, uint8_t sc[8], uint8_t mn[8]) {
    uint64_t s, m;
    k4_scales_mins(q, &s, &m);
    memcpy(sc, &s, 8);
    memcpy(mn, &m, 8);
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

/* y[0..31] = d * bytes (unsigned) - m, the product rounded before the subtraction as the
 * reference's dequantizers (and quant.c's) do: a fused multiply-subtract would change embedding
 * rows by an ulp now and then. */
AVX2 static inline __m256 affine8(__m256 d, __m128i q8, __m256 m) {
    return _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q8))), m);
}
AVX2 static inline void store_affine_u8(float *y, __m256i q, __m256 d, __m256 m) {
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    _mm256_storeu_ps(y, affine8(d, lo, m));
    _mm256_storeu_ps(y + 8, affine8(d, _mm_srli_si128(lo, 8), m));
    _mm256_storeu_ps(y + 16, affine8(d, hi, m));
    _mm256_storeu_ps(y + 24, affine8(d, _mm_srli_si128(hi, 8), m));
}

AVX2 static void to_float_f16(const void *src, float *y, int64_t n) {
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    for (; i < n; i++) y[i] = h2f(h[i]);
}

AVX2 static void to_float_bf16(const void *src, float *y, int64_t n) {
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, bf16x8(h + i));
    for (; i < n; i++) y[i] = bf16_to_f32(h[i]);
}

/* Dequantize a row of Q8_0 / Q4_0 / Q5_0 (x = d * level) or Q4_1 / Q5_1 (x = d * level + m). */
AVX2 static inline void to_float_x(enum ggml_type t, size_t size, const void *src, float *y, int64_t n) {
    const uint8_t *a = src;
    const int affine = t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1;
    for (int64_t i = 0; i < n / QK8_0; i++, a += size, y += QK8_0) {
        const uint16_t *dm = (const uint16_t *)a;
        if (affine) store_affine_u8(y, block_levels(t, a), _mm256_set1_ps(h2f(dm[0])), _mm256_set1_ps(-h2f(dm[1])));
        else store_scaled_s8(y, block_levels(t, a), _mm256_set1_ps(h2f(dm[0])));
    }
}

AVX2 static void to_float_q8_0(const void *src, float *y, int64_t n) {
    to_float_x(GGML_TYPE_Q8_0, sizeof(block_q8_0), src, y, n);
}
AVX2 static void to_float_q4_0(const void *src, float *y, int64_t n) {
    to_float_x(GGML_TYPE_Q4_0, sizeof(block_q4_0), src, y, n);
}
AVX2 static void to_float_q5_0(const void *src, float *y, int64_t n) {
    to_float_x(GGML_TYPE_Q5_0, sizeof(block_q5_0), src, y, n);
}
/* the affine store computes d*q - m: pass -m for the _1 types' d*q + m */
AVX2 static void to_float_q4_1(const void *src, float *y, int64_t n) {
    to_float_x(GGML_TYPE_Q4_1, sizeof(block_q4_1), src, y, n);
}
AVX2 static void to_float_q5_1(const void *src, float *y, int64_t n) {
    to_float_x(GGML_TYPE_Q5_1, sizeof(block_q5_1), src, y, n);
}

AVX2 static void to_float_q4_K(const void *src, float *y, int64_t n) {
    const block_q4_K *b = src;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        uint8_t sc[8], mn[8];
        k4_scale_bytes(b[i].scales, sc, mn);
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
        k4_scale_bytes(b[i].scales, sc, mn);
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
    const __m256i off = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        float d = h2f(b[i].d);
        for (int h = 0; h < 2; h++) {
            const int8_t *sc = b[i].scales + 8 * h;
            __m256i lv[4];
            q6_levels(&b[i], h, lv);
            for (int k = 0; k < 4; k++) {
                __m256i q = _mm256_sub_epi8(lv[k], off);
                /* 16 elements per scale: convert each 128-bit half with its own scale */
                float *yk = y + 128 * h + 32 * k;
                __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
                __m256 d0 = _mm256_set1_ps(d * sc[2 * k]), d1 = _mm256_set1_ps(d * sc[2 * k + 1]);
                _mm256_storeu_ps(yk, _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
                _mm256_storeu_ps(yk + 8, _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
                _mm256_storeu_ps(yk + 16, _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
                _mm256_storeu_ps(yk + 24, _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
            }
        }
    }
}

/* ---- activation quantization (bit for bit the scalar functions) ------------------------- */

AVX2 static inline float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

AVX2 static inline float absmax_32(const float *x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(x));
    for (int k = 8; k < 32; k += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
    return hmax_ps(m);
}

/* 32 int32 (four vectors, element order) -> 32 int8 */
AVX2 static inline __m256i pack_32(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    __m256i q = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

AVX2 static void from_float_q8_0(const float *x, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = absmax_32(x), d = amax / 127, id = amax ? 127.f / amax : 0.0f;
        y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        __m256 vid = _mm256_set1_ps(id);
        __m256i q[4]; /* half to even, like the scalar version (see quant.c) */
        for (int k = 0; k < 4; k++) q[k] = _mm256_cvtps_epi32(_mm256_round_ps(
            _mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        _mm256_storeu_si256((__m256i *)y[i].qs, pack_32(q[0], q[1], q[2], q[3]));
    }
}

AVX2 static void from_float_q8_K(const float *x, void *dst, int64_t n) {
    block_q8_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax = 0;
        for (int k = 0; k < QK_K; k += 32) {
            float m = absmax_32(x + k);
            if (m > amax) amax = m;
        }
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float max = 0; /* the first element of that magnitude, with its sign, as the scalar scan */
        const __m256 pos = _mm256_set1_ps(amax), neg = _mm256_set1_ps(-amax);
        for (int k = 0; k < QK_K; k += 8) {
            const __m256 v = _mm256_loadu_ps(x + k);
            int hit = _mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(v, pos, _CMP_EQ_OQ), _mm256_cmp_ps(v, neg, _CMP_EQ_OQ)));
            if (hit) {
                max = x[k + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        float iscale = -127.f / max;
        __m256 vs = _mm256_set1_ps(iscale);
        const __m256i lim = _mm256_set1_epi32(127);
        for (int k = 0; k < QK_K; k += 32) {
            __m256i q[4];
            for (int l = 0; l < 4; l++) /* round to nearest even (MXCSR default), as nearest_int */
                q[l] = _mm256_min_epi32(lim, _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * l), vs)));
            _mm256_storeu_si256((__m256i *)(y[i].qs + k), pack_32(q[0], q[1], q[2], q[3]));
            /* sums of 16: lanes of q[0]+q[1] and of q[2]+q[3] */
            y[i].bsums[k / 16] = (int16_t)hsum_epi32(_mm256_add_epi32(q[0], q[1]));
            y[i].bsums[k / 16 + 1] = (int16_t)hsum_epi32(_mm256_add_epi32(q[2], q[3]));
        }
        y[i].d = 1 / iscale;
    }
}

AVX2 static void from_float_f16(const float *x, void *dst, int64_t n) {
    uint16_t *h = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) h[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

const struct quant_kernels quant_kernels_avx2 = {
    .vec_dot = {
        [GGML_TYPE_F32] = dot_f32, [GGML_TYPE_F16] = dot_f16, [GGML_TYPE_BF16] = dot_bf16,
        [GGML_TYPE_Q8_0] = dot_q8_0,
        [GGML_TYPE_Q4_0] = dot_q4_0, [GGML_TYPE_Q5_0] = dot_q5_0, [GGML_TYPE_Q4_1] = dot_q4_1,
        [GGML_TYPE_Q5_1] = dot_q5_1, [GGML_TYPE_Q4_K] = dot_q4_K, [GGML_TYPE_Q5_K] = dot_q5_K,
        [GGML_TYPE_Q6_K] = dot_q6_K,
    },
    .vec_dot4 = {[GGML_TYPE_Q8_0] = dot4_q8_0, [GGML_TYPE_Q4_K] = dot4_q4_K},
    .vec_dotr = {[GGML_TYPE_Q8_0] = dotr_q8_0, [GGML_TYPE_Q4_0] = dotr_q4_0, [GGML_TYPE_Q5_0] = dotr_q5_0},
    .from_float = {
        [GGML_TYPE_Q8_0] = from_float_q8_0, [GGML_TYPE_Q8_K] = from_float_q8_K,
        [GGML_TYPE_F16] = from_float_f16,
    },
    .to_float = {
        [GGML_TYPE_F16] = to_float_f16, [GGML_TYPE_BF16] = to_float_bf16,
        [GGML_TYPE_Q8_0] = to_float_q8_0,
        [GGML_TYPE_Q4_0] = to_float_q4_0, [GGML_TYPE_Q5_0] = to_float_q5_0,
        [GGML_TYPE_Q4_1] = to_float_q4_1, [GGML_TYPE_Q5_1] = to_float_q5_1,
        [GGML_TYPE_Q4_K] = to_float_q4_K, [GGML_TYPE_Q5_K] = to_float_q5_K,
        [GGML_TYPE_Q6_K] = to_float_q6_K,
    },
};
