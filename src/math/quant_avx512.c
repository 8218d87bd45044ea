/* quant_avx512.c: AVX-512 (F, BW, VL, DQ, VNNI) dot products for the types a decode step spends
 * its time in. They process 64 weights per instruction where the AVX2 ones process 32, and fold
 * the int16 -> int32 widening and the accumulation into one VNNI instruction (vpdpwssd). Types
 * without an entry here use the AVX2 kernels. Selected at run time (simd_level_supported).
 * Q4_K and Q6_K live in kquant_avx512.c (looked up before this table); dot_k45_n below serves Q5_K.
 *
 * Integer inner sums are the scalar kernels' exactly.
 */
#include "math/kernels.h"
#include "math/blocks.h"
#include "math/simd_avx2.h"

#include "math/quant.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

/* Two 32-byte block payloads in one register: lanes 0-7 q0's, 8-15 q1's. */
AVX512 static inline __m512i load_pair(const int8_t *q0, const int8_t *q1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)q0)),
                              _mm256_loadu_si256((const __m256i *)q1), 1);
}

/* The scales of block i of two weight rows a and b against the activation block's d_x, spread
 * as the pair of outputs sits in a register: lanes 0-7 d_a * d_x, lanes 8-15 d_b * d_x (each the
 * float product of the two fp16 scales, as the reference). */
AVX512 static inline __m512 scale_pair(uint16_t da, uint16_t db, __m512 dx) {
    __m256i h = _mm256_mask_set1_epi16(_mm256_set1_epi16((short)da), 0xFF00, (short)db);
    return _mm512_mul_ps(_mm512_cvtph_ps(h), dx);
}

/* The multi-row kernels walk QUANT_DOT_WROWS rows side by side, which the hardware prefetcher
 * follows badly (without software prefetches a core streams them at half the speed of one row
 * at a time). The rows of a matrix are contiguous, so the groups ahead are the next bytes:
 * block step i fetches its share of the group DOTR_PF_GROUPS groups ahead. One group ahead
 * (2.4 KB of SmolLM2's Q8_0 rows) leaves too few lines in flight; four keep the stream busy and
 * more gain nothing (build/bench/kernels --small-batch --type q8_0 --threads 1). (Past a
 * matrix's end it fetches lines nobody reads: a few KB per matrix.) */
#define DOTR_PF_GROUPS 4
AVX512 static inline void prefetch_next_rows(const uint8_t *next, int64_t i, size_t block_bytes) {
    const uint8_t *p = next + (size_t)i * QUANT_DOT_WROWS * block_bytes;
    for (size_t off = 0; off < QUANT_DOT_WROWS * block_bytes + 63; off += 64) _mm_prefetch((const char *)p + off, _MM_HINT_T0);
}

/* The quantized dot products keep, per output, 8 float lanes in the reference's order (quant.c,
 * dot_x): a 512-bit register therefore holds two outputs, here two weight rows (lanes 0-7 and
 * 8-15) against one activation row, whose block is broadcast to both halves and shared by all
 * QUANT_DOT_WROWS rows. A single row uses the AVX2 kernel (the same numbers).
 *
 * Q8_0: vpdpbusd multiplies unsigned by signed bytes, so the activation goes in as x + 128
 * (x ^ 0x80) and 128 * (sum of 4 weights) comes off each lane: the same integers. */
AVX512 static void dotr_q8_0(int64_t n, const void *w, size_t w_stride, const void *x, float *out) {
    const block_q8_0 *a[QUANT_DOT_WROWS], *b = x;
    for (int r = 0; r < QUANT_DOT_WROWS; r++) a[r] = (const block_q8_0 *)((const uint8_t *)w + r * w_stride);
    const __m512i c80 = _mm512_set1_epi8((char)0x80), z = _mm512_setzero_si512();
    __m512 acc[QUANT_DOT_WROWS / 2];
    for (int p = 0; p < QUANT_DOT_WROWS / 2; p++) acc[p] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        prefetch_next_rows((const uint8_t *)w + DOTR_PF_GROUPS * QUANT_DOT_WROWS * w_stride, i, sizeof(block_q8_0));
        __m512i xu = _mm512_xor_si512(_mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b[i].qs)), c80);
        __m512 dx = _mm512_set1_ps(h2f(b[i].d));
#pragma GCC unroll 4
        for (int p = 0; p < QUANT_DOT_WROWS / 2; p++) {
            __m512i wq = load_pair(a[2 * p][i].qs, a[2 * p + 1][i].qs);
            __m512i lanes = _mm512_sub_epi32(_mm512_dpbusd_epi32(z, xu, wq), _mm512_dpbusd_epi32(z, c80, wq));
            acc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), scale_pair(a[2 * p][i].d, a[2 * p + 1][i].d, dx), acc[p]);
        }
    }
    for (int p = 0; p < QUANT_DOT_WROWS / 2; p++) {
        out[2 * p] = hsum_ps(_mm512_castps512_ps256(acc[p]));
        out[2 * p + 1] = hsum_ps(_mm512_extractf32x8_ps(acc[p], 1));
    }
}

/* Several tokens: the AVX2 kernel (same order; one weight block decoded for all four). */
AVX512 static void dot4_q8_0(int64_t n, const void *w, const void *x, size_t x_stride, float *out) {
    quant_get_vec_dot4(SIMD_AVX2, GGML_TYPE_Q8_0)(n, w, x, x_stride, out);
}

/* The 16 nibble bytes of a block of two rows (Q4_0, Q5_0), levels 0..15, as [a: lo hi | b: lo hi]. */
AVX512 static inline __m512i nibble_rows(const uint8_t *qa, const uint8_t *qb) {
    __m256i q = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)qb), _mm_loadu_si128((const __m128i *)qa));
    __m512i lohi = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
    /* 128-bit lanes are [a.lo b.lo a.hi b.hi]: reorder to [a.lo a.hi b.lo b.hi] */
    return _mm512_and_si512(_mm512_shuffle_i64x2(lohi, lohi, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0xF));
}

/* Q4_0 rows as dotr_q8_0: levels taken unsigned (0..15) times the signed activation, and the -8
 * as 8 * (sum of 4 activation bytes), computed once per block for all rows. */
AVX512 static void dotr_q4_0(int64_t n, const void *w, size_t w_stride, const void *x, float *out) {
    const block_q4_0 *a[QUANT_DOT_WROWS];
    const block_q8_0 *b = x;
    for (int r = 0; r < QUANT_DOT_WROWS; r++) a[r] = (const block_q4_0 *)((const uint8_t *)w + r * w_stride);
    const __m512i eight = _mm512_set1_epi8(8), z = _mm512_setzero_si512();
    __m512 acc[QUANT_DOT_WROWS / 2];
    for (int p = 0; p < QUANT_DOT_WROWS / 2; p++) acc[p] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK4_0; i++) {
        prefetch_next_rows((const uint8_t *)w + DOTR_PF_GROUPS * QUANT_DOT_WROWS * w_stride, i, sizeof(block_q4_0));
        __m512i xb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b[i].qs));
        __m512i off = _mm512_dpbusd_epi32(z, eight, xb);
        __m512 dx = _mm512_set1_ps(h2f(b[i].d));
#pragma GCC unroll 4
        for (int p = 0; p < QUANT_DOT_WROWS / 2; p++) {
            __m512i lanes = _mm512_sub_epi32(_mm512_dpbusd_epi32(z, nibble_rows(a[2 * p][i].qs, a[2 * p + 1][i].qs), xb), off);
            acc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), scale_pair(a[2 * p][i].d, a[2 * p + 1][i].d, dx), acc[p]);
        }
    }
    for (int p = 0; p < QUANT_DOT_WROWS / 2; p++) {
        out[2 * p] = hsum_ps(_mm512_castps512_ps256(acc[p]));
        out[2 * p + 1] = hsum_ps(_mm512_extractf32x8_ps(acc[p], 1));
    }
}

/* Q5_0 rows as dotr_q4_0: levels 0..31 (the fifth bits of both rows' qh as one 64-bit byte
 * mask) and the -16 as 16 * (sum of 4 activation bytes), computed once per block for all rows
 * and put in as the dot's starting value. A pair's nibbles are unpacked by loads that broadcast
 * each row's 16 bytes to two 128-bit lanes and one variable shift (the high nibbles' lanes by 4):
 * fewer shuffles than nibble_rows, which would be the bottleneck of this kernel. */
AVX512 static void dotr_q5_0(int64_t n, const void *w, size_t w_stride, const void *x, float *out) {
    const block_q5_0 *a[QUANT_DOT_WROWS];
    const block_q8_0 *b = x;
    for (int r = 0; r < QUANT_DOT_WROWS; r++) a[r] = (const block_q5_0 *)((const uint8_t *)w + r * w_stride);
    const __m512i sixteen = _mm512_set1_epi8(16), m4 = _mm512_set1_epi8(0xF), z = _mm512_setzero_si512();
    const __m512i shifts = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0); /* [a.lo a.hi b.lo b.hi] */
    __m512 acc[QUANT_DOT_WROWS / 2];
    for (int p = 0; p < QUANT_DOT_WROWS / 2; p++) acc[p] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK5_0; i++) {
        prefetch_next_rows((const uint8_t *)w + DOTR_PF_GROUPS * QUANT_DOT_WROWS * w_stride, i, sizeof(block_q5_0));
        __m512i xb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b[i].qs));
        __m512i neg_off = _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, sixteen, xb));
        __m512 dx = _mm512_set1_ps(h2f(b[i].d));
#pragma GCC unroll 4
        for (int p = 0; p < QUANT_DOT_WROWS / 2; p++) {
            const block_q5_0 *ba = &a[2 * p][i], *bb = &a[2 * p + 1][i];
            uint32_t ha, hb;
            memcpy(&ha, ba->qh, 4);
            memcpy(&hb, bb->qh, 4);
            __m512i q = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ba->qs)),
                                                    0xFF00, _mm_loadu_si128((const __m128i *)bb->qs));
            q = _mm512_and_si512(_mm512_srlv_epi64(q, shifts), m4);
            q = _mm512_mask_add_epi8(q, (__mmask64)ha | (__mmask64)hb << 32, q, sixteen);
            __m512i lanes = _mm512_dpbusd_epi32(neg_off, q, xb);
            acc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), scale_pair(ba->d, bb->d, dx), acc[p]);
        }
    }
    for (int p = 0; p < QUANT_DOT_WROWS / 2; p++) {
        out[2 * p] = hsum_ps(_mm512_castps512_ps256(acc[p]));
        out[2 * p + 1] = hsum_ps(_mm512_extractf32x8_ps(acc[p], 1));
    }
}

AVX512 static float dot_f16(int64_t n, const void *w, const void *x) {
    const uint16_t *a = w, *b = x;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i))),
                               _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i))), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i + 16))),
                               _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i + 16))), acc1);
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    for (; i < n; i++) s += h2f(a[i]) * h2f(b[i]);
    return s;
}

/* quant_dot_f16_tinyblas bit for bit: lane k accumulates elements k, k + 16, ... with one fused
 * multiply-add each (F16 -> F32 is exact), the tail into the lanes it would reach, the same fold. */
AVX512 float quant_dot_f16_tinyblas_avx512(int64_t n, const void *w, const void *x) {
    const uint16_t *a = w, *b = x;
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        acc = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i))),
                              _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i))), acc);
    float lanes[16];
    _mm512_storeu_ps(lanes, acc);
    for (int k = 0; i < n; i++, k++) lanes[k] = fmaf(h2f(a[i]), h2f(b[i]), lanes[k]);
    return quant_fold16(lanes);
}

/* int16 lane selectors: chunk k of 64 elements as 32 int16 pair-sums, lanes 0-15 take
 * scale 2k and lanes 16-31 scale 2k+1 (Q4_K/Q5_K: 32 elements per scale). */
AVX512 static inline __m512i k4_scale_index(int k) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(2 * k))),
                              _mm256_set1_epi16((short)(2 * k + 1)), 1);
}

/* Q4_K and Q5_K . Q8_K of one weight row with nx activation rows (x_stride bytes apart): 64
 * elements per step, [32 low nibbles | 32 high nibbles] of 32 bytes, which is element order; qh
 * (Q5_K) adds bit 2k (low half) and 2k+1 (high half) of each qh byte. The weight levels and
 * scales are decoded once for all activation rows; per row the chunks go to two accumulators so
 * consecutive vpdpwssd do not wait on each other. The nx = 1 instance is the plain dot product. */
AVX512 static inline __attribute__((always_inline)) void dot_k45_n(int64_t n, const void *w, const void *x, size_t x_stride, const int nx,
                                   const int with_qh, float *out) {
    const __m512i m4 = _mm512_set1_epi8(0xF), one = _mm512_set1_epi8(1);
    __m512 acc[QUANT_DOT_ROWS];
    __m256 acc_m[QUANT_DOT_ROWS];
    for (int t = 0; t < nx; t++) {
        acc[t] = _mm512_setzero_ps();
        acc_m[t] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        const struct k45_view v = k45_view(w, i, with_qh);
        const uint8_t *qs = v.qs;
        const uint64_t sc = v.sc, mn = v.mn;
        __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
        __m512i qh = _mm512_setzero_si512();
        if (with_qh) {
            __m256i h = _mm256_loadu_si256((const __m256i *)v.qh);
            qh = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 1), 1);
        }
        __m512i q[4], scale[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m256i q4 = _mm256_loadu_si256((const __m256i *)(qs + 32 * k));
            q[k] = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q4), _mm256_srli_epi16(q4, 4), 1), m4);
            if (with_qh)
                q[k] = _mm512_or_si512(q[k], _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 2 * k), one), 4));
            scale[k] = _mm512_permutexvar_epi16(k4_scale_index(k), sc16);
        }
        const float d = h2f(v.d), dmin = h2f(v.dmin);
        for (int t = 0; t < nx; t++) {
            const block_q8_K *b = (const block_q8_K *)((const uint8_t *)x + t * x_stride) + i;
            acc_m[t] = _mm256_fmadd_ps(_mm256_set1_ps(dmin * b->d), _mm256_cvtepi32_ps(k4_mins_dot(mn, b->bsums)),
                                       acc_m[t]);
            __m512i sumi[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m512i p16 = _mm512_maddubs_epi16(q[k], _mm512_loadu_si512(b->qs + 64 * k));
                sumi[k & 1] = _mm512_dpwssd_epi32(sumi[k & 1], p16, scale[k]);
            }
            acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d * b->d), _mm512_cvtepi32_ps(_mm512_add_epi32(sumi[0], sumi[1])),
                                     acc[t]);
        }
    }
    for (int t = 0; t < nx; t++) out[t] = _mm512_reduce_add_ps(acc[t]) - hsum_ps(acc_m[t]);
}

AVX512 static float dot_q5_K(int64_t n, const void *w, const void *x) {
    float out;
    dot_k45_n(n, w, x, 0, 1, 1, &out);
    return out;
}

AVX512 static void dot4_q5_K(int64_t n, const void *w, const void *x, size_t x_stride, float *out) {
    dot_k45_n(n, w, x, x_stride, QUANT_DOT_ROWS, 1, out);
}

const struct quant_kernels quant_kernels_avx512 = {
    .vec_dot = {
        [GGML_TYPE_F16] = dot_f16, [GGML_TYPE_Q5_K] = dot_q5_K,
    },
    .vec_dot4 = {
        [GGML_TYPE_Q8_0] = dot4_q8_0, [GGML_TYPE_Q5_K] = dot4_q5_K,
    },
    .vec_dotr = {[GGML_TYPE_Q8_0] = dotr_q8_0, [GGML_TYPE_Q4_0] = dotr_q4_0, [GGML_TYPE_Q5_0] = dotr_q5_0},
};
