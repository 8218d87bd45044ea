/* gemm_q8.c: Q8_0 x Q8_0 products of many tokens on AVX-512 VNNI (gemm_q8.h).
 *
 * Register tile: 4 weight rows x 4 token pairs = 16 accumulators (fewer pairs at the end of the
 * tokens: decode steps of a few sequences have 1-3 pairs), each two outputs of 8 float
 * lanes. Per block, a weight row's 32 bytes are broadcast to both halves of a register and
 * dotted (vpdpbusd, unsigned x signed) with a packed pair of activation blocks stored as x + 128;
 * the accumulator of that dot starts at -128 * (sum of each 4 weights), so the lanes end up the
 * exact integers of quant.c's dot. Then lane_k * (d_w * d_x) is fused into the float lanes.
 * (The other way round, the weights as w + 128 against the levels as they are with each lane's
 * start value -128 * (sum of 4 levels) packed with the activations, saves a vpdpbusd and a
 * subtraction per row and block but packs 192 bytes per pair and block rather than 128, more
 * than L1 holds for a prompt's tile: no faster on decode steps, slower on prompts. On AMD Zen 5
 * vpdpbusd, vmulps and vfmadd share two ports, which bound this loop.)
 * Loops: tokens in blocks of TOKEN_PAIRS_PER_PASS pairs (their packed activations stay in L2),
 * inside them the rows four at a time (in L1) against every pair of the block.
 */
#include "math/gemm_q8.h"
#include "math/blocks.h"
#include "math/kernels.h"
#include "math/simd_avx2.h"
#include "gguf/types.h"

#include <immintrin.h>
#include <string.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

/* 16 pairs = 32 tokens: 32 x 2 KB of packed activations for a 2048-wide matrix. */
#define TOKEN_PAIRS_PER_PASS 16

bool gemm_q8_0_supported(void) { return simd_level_supported(SIMD_AVX512); }

/* Pair p, block i: 64 bytes of [token 2p | token 2p+1] levels + 128, then 16 floats
 * [d_x(2p) x 8 | d_x(2p+1) x 8]. */
AVX512 void gemm_q8_0_pack(const void *xq, size_t xq_stride, int64_t n_tok, int64_t n_in, uint8_t *packed) {
    const int64_t nb = n_in / QK8_0;
    const __m256i c80 = _mm256_set1_epi8((char)0x80);
    for (int64_t t = 0; t < n_tok; t += 2) {
        const block_q8_0 *a = (const block_q8_0 *)((const uint8_t *)xq + (size_t)t * xq_stride);
        const block_q8_0 *b = t + 1 < n_tok ? (const block_q8_0 *)((const uint8_t *)xq + (size_t)(t + 1) * xq_stride) : NULL;
        uint8_t *out = packed + (size_t)(t / 2) * (size_t)nb * 128;
        for (int64_t i = 0; i < nb; i++, out += 128) {
            __m256i xa = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)a[i].qs), c80);
            __m256i xb = b ? _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)b[i].qs), c80) : c80;
            _mm512_store_si512(out, _mm512_inserti64x4(_mm512_castsi256_si512(xa), xb, 1));
            __m256 da = _mm256_set1_ps(h2f(a[i].d)), db = _mm256_set1_ps(b ? h2f(b[i].d) : 0.0f);
            _mm512_store_ps(out + 64, _mm512_insertf32x8(_mm512_castps256_ps512(da), db, 1));
        }
    }
}

AVX512 void gemm_q8_0_from_q45(int wtype, int64_t n_in, const void *w, size_t w_stride, int64_t n_rows, void *out) {
    const int64_t nb = n_in / QK8_0;
    const __m128i lo4 = _mm_set1_epi8(0x0F);
    block_q8_0 *o = out;
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * w_stride;
        for (int64_t i = 0; i < nb; i++, o++) {
            const uint8_t *qs;
            __m256i hi, off;
            if (wtype == GGML_TYPE_Q5_0) {
                const block_q5_0 *b = (const block_q5_0 *)row + i;
                uint32_t qh;
                memcpy(&qh, b->qh, 4);
                qs = b->qs;
                o->d = b->d;
                /* bit j of qh is the fifth bit of element j */
                hi = _mm256_and_si256(_mm256_movm_epi8((__mmask32)qh), _mm256_set1_epi8(0x10));
                off = _mm256_set1_epi8(16);
            } else {
                const block_q4_0 *b = (const block_q4_0 *)row + i;
                qs = b->qs;
                o->d = b->d;
                hi = _mm256_setzero_si256();
                off = _mm256_set1_epi8(8);
            }
            /* elements 0-15 in the low nibbles, 16-31 in the high ones */
            __m128i q = _mm_loadu_si128((const __m128i *)qs);
            __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), lo4), _mm_and_si128(q, lo4));
            _mm256_storeu_si256((__m256i *)o->qs, _mm256_sub_epi8(_mm256_or_si256(nib, hi), off));
        }
    }
}

/* acc[4 * r + p] += the block products of weight row r and pair p < np, over all nb blocks. np is
 * a constant in every caller (1, 2 or 4): a step of 2-6 decode tokens does not pay for 4 pairs. */
AVX512 static inline __attribute__((always_inline)) void tile(int64_t nb, const block_q8_0 *const w[4],
                                                              const uint8_t *const pk[4], __m512 acc[16],
                                                              const uint8_t *next, const int np) {
    const __m512i c80 = _mm512_set1_epi8((char)0x80), z = _mm512_setzero_si512();
    for (int64_t i = 0; i < nb; i++) {
        /* the next four rows, one row group ahead of need: four rows walked side by side defeat
         * the hardware prefetcher (as quant_avx512.c's prefetch_next_rows; build/bench/kernels
         * --small-batch --type q8_0 --threads 1: the 576x49152 case from 2 tokens on).
         * Block i's 136 bytes of them start in one of the three lines fetched here; the line
         * holding their end, if a fourth, is the first of block i + 1's (unrolled: as a loop it
         * would be a tenth of the block's instructions). */
        const char *pf = (const char *)next + (size_t)i * 4 * sizeof(block_q8_0);
        _mm_prefetch(pf, _MM_HINT_T0);
        _mm_prefetch(pf + 64, _MM_HINT_T0);
        _mm_prefetch(pf + 128, _MM_HINT_T0);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            __m512i wb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)w[r][i].qs));
            __m512i neg = _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, c80, wb));
            __m512 dw = _mm512_set1_ps(h2f(w[r][i].d));
#pragma GCC unroll 4
            for (int p = 0; p < np; p++) {
                const uint8_t *q = pk[p] + (size_t)i * 128;
                __m512i lanes = _mm512_dpbusd_epi32(neg, _mm512_load_si512(q), wb);
                __m512 s = _mm512_mul_ps(dw, _mm512_load_ps((const float *)(q + 64)));
                acc[4 * r + p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), s, acc[4 * r + p]);
            }
        }
    }
}

AVX512 void gemm_q8_0_rows(int64_t n_in, const void *w, size_t w_stride, int64_t r0, int64_t r1,
                           const uint8_t *packed, int64_t n_tok, float *y, int64_t n_out) {
    const int64_t nb = n_in / QK8_0, n_pairs = (n_tok + 1) / 2;
    const size_t pair_bytes = (size_t)nb * 128;
    for (int64_t pb = 0; pb < n_pairs; pb += TOKEN_PAIRS_PER_PASS) {
        int64_t pe = pb + TOKEN_PAIRS_PER_PASS < n_pairs ? pb + TOKEN_PAIRS_PER_PASS : n_pairs;
        for (int64_t r = r0; r < r1; r += 4) {
            const block_q8_0 *wr[4]; /* rows past r1 repeat the last one; their sums are dropped */
            for (int k = 0; k < 4; k++)
                wr[k] = (const block_q8_0 *)((const uint8_t *)w + (size_t)(r + k < r1 ? r + k : r1 - 1) * w_stride);
            for (int64_t p = pb; p < pe; p += 4) {
                const uint8_t *pk[4];
                for (int k = 0; k < 4; k++) pk[k] = packed + (size_t)(p + k < pe ? p + k : pe - 1) * pair_bytes;
                __m512 acc[16];
                for (int k = 0; k < 16; k++) acc[k] = _mm512_setzero_ps();
                const uint8_t *next = (const uint8_t *)w + (size_t)(r + 4) * w_stride;
                if (pe - p >= 3) tile(nb, wr, pk, acc, next, 4);
                else if (pe - p == 2) tile(nb, wr, pk, acc, next, 2);
                else tile(nb, wr, pk, acc, next, 1);
                for (int rr = 0; rr < 4 && r + rr < r1; rr++)
                    for (int pp = 0; pp < 4 && p + pp < pe; pp++) {
                        int64_t t = 2 * (p + pp);
                        __m512 a = acc[4 * rr + pp];
                        y[t * n_out + r + rr] = hsum_ps(_mm512_castps512_ps256(a));
                        if (t + 1 < n_tok) y[(t + 1) * n_out + r + rr] = hsum_ps(_mm512_extractf32x8_ps(a, 1));
                    }
            }
        }
    }
}
