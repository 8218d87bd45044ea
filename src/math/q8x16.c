/* q8x16.c: Q8_0, Q5_0, Q4_K and Q6_K rows interleaved by 16 and their products on AVX-512 VNNI
 * (q8x16.h). The K-quants' kernels are described at their sections below.
 *
 * Kernel: a group of 16 rows against up to TOKEN_TILE tokens at a time. Per block, the group's
 * 512 level bytes are 8 registers, loaded once for all the tile's tokens; per token, 8 vpdpbusd
 * (each 4 of the token's levels broadcast to every lane) sum the block's integer dot of all 16
 * rows, started at the token's correction so that the +128 of the stored levels cancels; then
 * one conversion, one multiply (d_w x d_x) and one fma per 16 outputs. Two dependency chains of 4
 * vpdpbusd each (integer sums: the order does not matter) keep the latency off the critical path.
 * Q5_0: the same, after its 8 registers of levels are unpacked from 4 of nibbles (an and, or a
 * shift and an and) and the 8 masks of fifth bits (a masked byte add of 16), once per block for
 * all the tile's tokens.
 */
#include "math/q8x16.h"
#include "math/blocks.h"
#include "math/kernels.h"
#include "math/simd_avx2.h"
#include "common/err.h"
#include "gguf/types.h"

#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

/* Tokens per pass over a group: 8 accumulators beside 8 weight registers. */
#define TOKEN_TILE 8
/* Blocks (512 bytes of levels each) fetched ahead of use. Q8_0's one-token tiles (a single
 * stream's decode step) leave it to the hardware prefetcher, as Q4_K's do (K4_PREFETCH_SB): for
 * Q8_0 no slower (TinyLlama-shaped Q8_0 tg64 the same within the host's noise); Q5_0's keep it
 * (not measured). */
#define PREFETCH_BLOCKS 8

bool q8x16_supported(void) { return simd_level_supported(SIMD_AVX512); }

/* acc + the products of w's 16 lanes with the 4 signed bytes at x in every lane (vpdpbusd with x
 * as an embedded broadcast). GCC 12 does not fold _mm512_set1_epi32 of a load into vpdpbusd, and
 * the separate vpbroadcastd it emits is one more instruction per product: with it, the 16-token
 * kernels run 5-11% slower (build/bench/kernels --small-batch --type q4_kx16 --threads 1). */
typedef int32_t __attribute__((may_alias)) word32;
AVX512 static inline __attribute__((always_inline)) __m512i dpbusd_bcst(__m512i acc, __m512i w, const void *x) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const word32 *)x));
    return acc;
}

static size_t row_bytes(int64_t n_in) { return (size_t)(n_in / QK8_0) * sizeof(block_q8_0); }

/* Bytes of one block's data in a group (levels; Q5_0: nibbles and fifth bits), and of its scales;
 * a group of nb blocks is nb * (data + scales) bytes, 16 GGUF rows of either type. */
#define Q8_DATA 512
#define Q5_DATA 320
#define SCALE_BYTES (Q8X16_ROWS * 2)
_Static_assert(Q8_DATA + SCALE_BYTES == Q8X16_ROWS * sizeof(block_q8_0), "q8x16 group size");
_Static_assert(Q5_DATA + SCALE_BYTES == Q8X16_ROWS * sizeof(block_q5_0), "q5x16 group size");

/* Group g's bytes (blocks of db bytes of data); its data (at a 64-byte boundary when the group
 * starts at a 32-byte one: block 0's scales first then, see q8x16.h); block i's 16 scales. */
static uint8_t *group_base(const void *w, int64_t nb, size_t db, int64_t g) {
    return (uint8_t *)w + (size_t)g * (size_t)nb * (db + SCALE_BYTES);
}
static int scales_ahead(const uint8_t *base) { return (uintptr_t)base % 64 == 32; }
static uint8_t *group_data(const void *w, int64_t nb, size_t db, int64_t g) {
    uint8_t *base = group_base(w, nb, db, g);
    return base + SCALE_BYTES * scales_ahead(base);
}
static uint16_t *group_scales(const void *w, int64_t nb, size_t db, int64_t g, int64_t i) {
    uint8_t *base = group_base(w, nb, db, g);
    return (uint16_t *)(i < scales_ahead(base) ? base : base + (size_t)nb * db + (size_t)i * SCALE_BYTES);
}

/* The layouts' interleave: 4-byte word k of row l (bytes 4k..4k+3 of src) at dst + k * 64 + l * 4,
 * for k < n_words. */
static void put_words(uint8_t *dst, int l, const uint8_t *src, int n_words) {
    for (int k = 0; k < n_words; k++) memcpy(dst + k * 64 + l * 4, src + 4 * k, 4);
}

/* Writes block i of group g into a layout at w from the group's 16 GGUF rows copied out to
 * `rows` (row l at rows + l * rb, its blocks one after the other). */
typedef void (*pack_block_fn)(void *w, int64_t nb, int64_t g, int64_t i, const uint8_t *rows, size_t rb);

/* The three repacks: each whole group of 16 GGUF rows (nb blocks of bs bytes; group g at its
 * own 16 rows' bytes) copied out, then rewritten in place block by block; the n_out % 16 rows
 * after them stay as they are. 0, or -ERR_NOMEM (a 16-row buffer). */
static int repack_groups(void *w, int64_t nb, size_t bs, int64_t n_out, pack_block_fn pack) {
    const size_t rb = (size_t)nb * bs;
    uint8_t *rows = malloc(Q8X16_ROWS * rb);
    if (!rows) return -ERR_NOMEM;
    for (int64_t g = 0; g < n_out / Q8X16_ROWS; g++) {
        memcpy(rows, (uint8_t *)w + (size_t)g * Q8X16_ROWS * rb, Q8X16_ROWS * rb);
        for (int64_t i = 0; i < nb; i++) pack(w, nb, g, i, rows, rb);
    }
    free(rows);
    return 0;
}

static void pack_q8_block(void *w, int64_t nb, int64_t g, int64_t i, const uint8_t *rows, size_t rb) {
    uint16_t *sc = group_scales(w, nb, Q8_DATA, g, i);
    uint8_t *blk = group_data(w, nb, Q8_DATA, g) + i * Q8_DATA;
    for (int l = 0; l < Q8X16_ROWS; l++) {
        const block_q8_0 *b = (const block_q8_0 *)(rows + l * rb) + i;
        sc[l] = b->d;
        put_words(blk, l, (const uint8_t *)b->qs, QK8_0 / 4); /* levels 4k..4k+3 of row l */
    }
    for (int k = 0; k < Q8_DATA; k++) blk[k] ^= 0x80; /* level + 128 */
}

int q8x16_repack(void *w, int64_t n_in, int64_t n_out) {
    return repack_groups(w, n_in / QK8_0, sizeof(block_q8_0), n_out, pack_q8_block);
}

/* Level k of block i of row l (k < 32) in a group's levels lv. */
static int level_at(const uint8_t *lv, int64_t i, int l, int k) {
    return (int)lv[i * Q8_DATA + (k / 4) * 64 + l * 4 + k % 4] - 128;
}

void q8x16_row_to_float(const void *w, int64_t n_in, int64_t n_out, int64_t r, float *out) {
    const int64_t nb = n_in / QK8_0;
    if (r >= n_out / Q8X16_ROWS * Q8X16_ROWS) { /* a tail row: GGUF Q8_0 */
        const block_q8_0 *b = (const block_q8_0 *)((const uint8_t *)w + (size_t)r * row_bytes(n_in));
        for (int64_t i = 0; i < nb; i++)
            for (int k = 0; k < QK8_0; k++) out[i * QK8_0 + k] = h2f(b[i].d) * (float)b[i].qs[k];
        return;
    }
    const int64_t g = r / Q8X16_ROWS;
    const int l = (int)(r % Q8X16_ROWS);
    const uint8_t *lv = group_data(w, nb, Q8_DATA, g);
    for (int64_t i = 0; i < nb; i++) {
        float d = h2f(group_scales(w, nb, Q8_DATA, g, i)[l]);
        for (int k = 0; k < QK8_0; k++) out[i * QK8_0 + k] = d * (float)level_at(lv, i, l, k);
    }
}

void q8x16_pack_acts(const void *xq, size_t xq_stride, int64_t n_tok, int64_t n_in, struct q8x16_act *acts) {
    const int64_t nb = n_in / QK8_0;
    for (int64_t t = 0; t < n_tok; t++) {
        const block_q8_0 *b = (const block_q8_0 *)((const uint8_t *)xq + (size_t)t * xq_stride);
        for (int64_t i = 0; i < nb; i++) {
            struct q8x16_act *a = &acts[t * nb + i];
            int32_t sum = 0;
            for (int k = 0; k < QK8_0; k++) sum += b[i].qs[k];
            memcpy(a->q4, b[i].qs, sizeof a->q4);
            a->d = h2f(b[i].d);
            a->corr = -128 * sum;
            a->corr5 = -16 * sum;
        }
    }
}

/* The integer dot of block i of row r with the token's block x, from its levels. */
static int32_t block_dot(const void *w, int64_t n_in, int64_t n_out, int64_t r, int64_t i, const struct q8x16_act *x) {
    int8_t xs[QK8_0];
    memcpy(xs, x->q4, sizeof xs);
    int32_t dot = 0;
    if (r >= n_out / Q8X16_ROWS * Q8X16_ROWS) {
        const block_q8_0 *b = (const block_q8_0 *)((const uint8_t *)w + (size_t)r * row_bytes(n_in)) + i;
        for (int k = 0; k < QK8_0; k++) dot += b->qs[k] * xs[k];
    } else {
        const uint8_t *lv = group_data(w, n_in / QK8_0, Q8_DATA, r / Q8X16_ROWS);
        for (int k = 0; k < QK8_0; k++) dot += level_at(lv, i, (int)(r % Q8X16_ROWS), k) * xs[k];
    }
    return dot;
}

static float block_scale(const void *w, int64_t n_in, int64_t n_out, int64_t r, int64_t i) {
    if (r >= n_out / Q8X16_ROWS * Q8X16_ROWS)
        return h2f(((const block_q8_0 *)((const uint8_t *)w + (size_t)r * row_bytes(n_in)))[i].d);
    return h2f(group_scales(w, n_in / QK8_0, Q8_DATA, r / Q8X16_ROWS, i)[r % Q8X16_ROWS]);
}

float q8x16_dot_ref(int64_t n_in, int64_t n_out, const void *w, int64_t r, const struct q8x16_act *x) {
    float acc = 0.0f;
    for (int64_t i = 0; i < n_in / QK8_0; i++) {
        float s = block_scale(w, n_in, n_out, r, i) * x[i].d; /* rounded to float, as the kernel's multiply */
        acc = fmaf((float)block_dot(w, n_in, n_out, r, i, &x[i]), s, acc);
    }
    return acc;
}

/* ---- Q5_0 ------------------------------------------------------------------------------- */

/* Q5_0 blocks (320 bytes of data each) fetched ahead of use (7.5 KB): about a memory latency of
 * work; fewer leave the stream waiting, more evict lines before use (build/bench/kernels
 * --small-batch --type q5_0x16 --threads 1: the 576x49152 case). */
#define Q5_PREFETCH_BLOCKS 24

static size_t row_bytes5(int64_t n_in) { return (size_t)(n_in / QK5_0) * sizeof(block_q5_0); }

/* Element k (< 32) of a GGUF Q5_0 block as the unsigned level 0..31 (the value's level + 16). */
static int gguf_level5(const block_q5_0 *b, int k) {
    uint32_t qh;
    memcpy(&qh, b->qh, sizeof qh);
    int nib = k < 16 ? b->qs[k] & 0x0F : b->qs[k - 16] >> 4;
    return nib | (int)((qh >> k) & 1) << 4;
}

static void pack_q5_block(void *w, int64_t nb, int64_t g, int64_t i, const uint8_t *rows, size_t rb) {
    uint8_t *p = group_data(w, nb, Q5_DATA, g) + i * Q5_DATA;
    uint16_t *scales = group_scales(w, nb, Q5_DATA, g, i);
    uint32_t qh[Q8X16_ROWS];
    for (int l = 0; l < Q8X16_ROWS; l++) {
        const block_q5_0 *b = (const block_q5_0 *)(rows + l * rb) + i;
        memcpy(&qh[l], b->qh, sizeof qh[l]);
        scales[l] = b->d;
        put_words(p, l, b->qs, 4);
    }
    for (int k = 0; k < 8; k++) { /* mask k: bits 4k..4k+3 of each row's qh, 4 per row */
        uint64_t mask = 0;
        for (int l = 0; l < Q8X16_ROWS; l++) mask |= (uint64_t)((qh[l] >> (4 * k)) & 0xF) << (4 * l);
        for (int byte = 0; byte < 8; byte++) p[256 + k * 8 + byte] = (uint8_t)(mask >> (8 * byte)); /* little-endian */
    }
}

int q5x16_repack(void *w, int64_t n_in, int64_t n_out) {
    return repack_groups(w, n_in / QK5_0, sizeof(block_q5_0), n_out, pack_q5_block);
}

/* Element k (< 32) of block i of row l of group g as the unsigned level 0..31. */
static int level5_at(const void *w, int64_t nb, int64_t g, int64_t i, int l, int k) {
    const uint8_t *p = group_data(w, nb, Q5_DATA, g) + i * Q5_DATA;
    const uint8_t byte = p[(k % 16 / 4) * 64 + l * 4 + k % 4];
    const int bit = l * 4 + k % 4;
    return (k < 16 ? byte & 0x0F : byte >> 4) | ((p[256 + (k / 4) * 8 + bit / 8] >> (bit % 8)) & 1) << 4;
}

/* Row r's GGUF block i (a tail row), or NULL when r is in a group. */
static const block_q5_0 *tail_block5(const void *w, int64_t n_in, int64_t n_out, int64_t r, int64_t i) {
    if (r < n_out / Q8X16_ROWS * Q8X16_ROWS) return NULL;
    return (const block_q5_0 *)((const uint8_t *)w + (size_t)r * row_bytes5(n_in)) + i;
}

/* Block i of row r: its scale and unsigned levels. */
static uint16_t block5(const void *w, int64_t n_in, int64_t n_out, int64_t r, int64_t i, int lv[QK5_0]) {
    const block_q5_0 *b = tail_block5(w, n_in, n_out, r, i);
    const int64_t nb = n_in / QK5_0;
    for (int k = 0; k < QK5_0; k++)
        lv[k] = b ? gguf_level5(b, k) : level5_at(w, nb, r / Q8X16_ROWS, i, (int)(r % Q8X16_ROWS), k);
    return b ? b->d : group_scales(w, nb, Q5_DATA, r / Q8X16_ROWS, i)[r % Q8X16_ROWS];
}

void q5x16_row_to_float(const void *w, int64_t n_in, int64_t n_out, int64_t r, float *out) {
    for (int64_t i = 0; i < n_in / QK5_0; i++) {
        int lv[QK5_0];
        const float d = h2f(block5(w, n_in, n_out, r, i, lv));
        for (int k = 0; k < QK5_0; k++) out[i * QK5_0 + k] = d * (float)(lv[k] - 16);
    }
}

float q5x16_dot_ref(int64_t n_in, int64_t n_out, const void *w, int64_t r, const struct q8x16_act *x) {
    float acc = 0.0f;
    for (int64_t i = 0; i < n_in / QK5_0; i++) {
        int lv[QK5_0];
        int8_t xs[QK8_0];
        const float s = h2f(block5(w, n_in, n_out, r, i, lv)) * x[i].d; /* rounded to float, as the kernel's */
        memcpy(xs, x[i].q4, sizeof xs);
        int32_t dot = 0;
        for (int k = 0; k < QK5_0; k++) dot += (lv[k] - 16) * xs[k];
        acc = fmaf((float)dot, s, acc);
    }
    return acc;
}

/* A 64-bit mask of fifth bits from the layout (kmovq from memory). */
AVX512 static inline __mmask64 mask_at(const uint8_t *p) {
    uint64_t m;
    memcpy(&m, p, sizeof m);
    return _cvtu64_mask64(m);
}

/* ---- the kernel (both types) ------------------------------------------------------------ */

/* Block i's 8 registers of unsigned levels (part k: 4 levels of each of the 16 rows). Q8_0:
 * loaded as they are. Q5_0: part k is (nibbles & 0x0F) | (16 where fifth-bit mask k has a bit),
 * one ternary-logic op (0xEA: a & b | c) after the masked 16s, the high nibbles shifted down
 * first for parts 4-7. */
AVX512 static inline __attribute__((always_inline)) void block_levels(const uint8_t *p, const bool q5, __m512i w[8]) {
    if (!q5) {
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) w[k] = _mm512_loadu_si512(p + 64 * k);
        return;
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        __m512i n = _mm512_loadu_si512(p + 64 * (k % 4));
        if (k >= 4) n = _mm512_srli_epi16(n, 4);
        w[k] = _mm512_ternarylogic_epi32(n, m4, _mm512_maskz_mov_epi8(mask_at(p + 256 + 8 * k), sixteen), 0xEA);
    }
}

/* Group g (16 rows from row 16g; scales of block 0 at sc0, of block i >= 1 at sc + 16 i, data
 * of block i at dat + i * db) against tokens [0, nt) of x (acts of token t at x + t * nb):
 * y[t * n_out + 16g + l]. Per block, its levels once for the tile's tokens, then per token 8
 * vpdpbusd from the token's correction (Q8_0: -128 * sum, Q5_0: -16 * sum), one conversion,
 * one multiply and one fma for 16 outputs. nt and q5 are constants in every caller, so the
 * loops unroll. */
AVX512 static inline __attribute__((always_inline)) void group_tile(int64_t nb, const uint16_t *sc0, const uint16_t *sc,
                                                                    const uint8_t *dat, const struct q8x16_act *x,
                                                                    float *y, int64_t n_out, const bool q5,
                                                                    const int nt) {
    const size_t db = q5 ? Q5_DATA : Q8_DATA;
    const int pf_blocks = q5 ? Q5_PREFETCH_BLOCKS : PREFETCH_BLOCKS;
    __m512 acc[TOKEN_TILE];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        /* the data pf_blocks ahead: near the group's end its scales and the next group's first
         * bytes (past the matrix's end, lines nobody reads: a prefetch never faults) */
        const char *pf = (const char *)(dat + (size_t)(i + pf_blocks) * db);
        if (q5 || nt > 1) {
#pragma GCC unroll 8
            for (size_t off = 0; off < db; off += 64) _mm_prefetch(pf + off, _MM_HINT_T0);
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(i ? sc + i * Q8X16_ROWS : sc0)));
        __m512i w[8];
        block_levels(dat + (size_t)i * db, q5, w);
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            const struct q8x16_act *a = x + t * nb + i;
            __m512i s0 = _mm512_set1_epi32(q5 ? a->corr5 : a->corr), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int k = 0; k < 8; k += 2) { /* two chains: integer sums, the order does not matter */
                s0 = dpbusd_bcst(s0, w[k], &a->q4[k]);
                s1 = dpbusd_bcst(s1, w[k + 1], &a->q4[k + 1]);
            }
            const __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(a->d));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), s, acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) _mm512_storeu_ps(y + t * n_out, acc[t]);
}

/* q8x16_rows / q5x16_rows. Tokens in tiles of TOKEN_TILE, each over all the groups: the groups'
 * data stays in L2 while the tile's activations stay in L1; the tail rows (GGUF) by the scalar
 * order. */
AVX512 static inline __attribute__((always_inline)) void rows(int64_t n_in, int64_t n_out, const void *w, int64_t r0,
                                                              int64_t r1, const struct q8x16_act *acts, int64_t n_tok,
                                                              float *y, const bool q5) {
    const size_t db = q5 ? Q5_DATA : Q8_DATA;
    const int64_t nb = n_in / QK8_0, full = n_out / Q8X16_ROWS * Q8X16_ROWS;
    ASSERT(r0 % Q8X16_ROWS == 0 && (r1 % Q8X16_ROWS == 0 || r1 == n_out) && r1 <= n_out);
    const int64_t g1 = (r1 < full ? r1 : full) / Q8X16_ROWS;
    for (int64_t t0 = 0; t0 < n_tok; t0 += TOKEN_TILE) {
        const int64_t nt = n_tok - t0 < TOKEN_TILE ? n_tok - t0 : TOKEN_TILE;
        const struct q8x16_act *x = acts + t0 * nb;
        for (int64_t g = r0 / Q8X16_ROWS; g < g1; g++) {
            const uint16_t *sc0 = group_scales(w, nb, db, g, 0),
                           *sc = (const uint16_t *)(group_base(w, nb, db, g) + (size_t)nb * db);
            const uint8_t *dat = group_data(w, nb, db, g);
            float *yg = y + t0 * n_out + g * Q8X16_ROWS;
            switch (nt) {
            case 1: group_tile(nb, sc0, sc, dat, x, yg, n_out, q5, 1); break;
            case 2: group_tile(nb, sc0, sc, dat, x, yg, n_out, q5, 2); break;
            case 3: group_tile(nb, sc0, sc, dat, x, yg, n_out, q5, 3); break;
            case 4: group_tile(nb, sc0, sc, dat, x, yg, n_out, q5, 4); break;
            case 5: group_tile(nb, sc0, sc, dat, x, yg, n_out, q5, 5); break;
            case 6: group_tile(nb, sc0, sc, dat, x, yg, n_out, q5, 6); break;
            case 7: group_tile(nb, sc0, sc, dat, x, yg, n_out, q5, 7); break;
            default: group_tile(nb, sc0, sc, dat, x, yg, n_out, q5, 8); break;
            }
        }
    }
    for (int64_t r = r0 > full ? r0 : full; r < r1; r++)
        for (int64_t t = 0; t < n_tok; t++)
            y[t * n_out + r] = (q5 ? q5x16_dot_ref : q8x16_dot_ref)(n_in, n_out, w, r, acts + t * nb);
}

AVX512 void q8x16_rows(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1,
                       const struct q8x16_act *acts, int64_t n_tok, float *y) {
    rows(n_in, n_out, w, r0, r1, acts, n_tok, y, false);
}

AVX512 void q5x16_rows(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1,
                       const struct q8x16_act *acts, int64_t n_tok, float *y) {
    rows(n_in, n_out, w, r0, r1, acts, n_tok, y, true);
}

/* ---- AMX ------------------------------------------------------------------------------- */

/* AMX-INT8 multiplies int8 tiles: tdpbsud adds to each int32 of a C tile (up to 16 x 16) the dot
 * of a row of A (signed bytes) with a column of B (unsigned bytes, 4 of a column side by side
 * per 64-byte row, as this file's layouts hold 4 bytes of each of 16 rows): 16 tokens x 16 rows
 * x 64 products per instruction. The prompt kernels below run whole tiles of 16 tokens on it,
 * each with the numbers of its vector kernel. */
#define AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,amx-tile,amx-int8")))
#define AMX_TOKENS 16
/* GCC's tile intrinsics paste their tile numbers' spelling: expand the names first */
#define TILE(op, ...) op(__VA_ARGS__)

bool q8x16_amx_enable(void) {
    unsigned a, b, c, d;
    if (!q8x16_supported() || !__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 24 & 1) || !(d >> 25 & 1))
        return false; /* AMX-TILE, AMX-INT8 */
    /* Linux hands out the tile registers' state (8 KB per thread) only on request: asked once
     * per process, granted to all its threads; asking again is harmless */
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
}

/* This thread's tile configuration (palette 1): tile k has rows[k] rows of colsb[k] bytes. */
AMX static void amx_configure(const int rows[8], const int colsb[8]) {
    struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } __attribute__((aligned(64))) cfg = {.palette = 1};
    for (int k = 0; k < 8; k++) {
        cfg.rows[k] = (uint8_t)rows[k];
        cfg.colsb[k] = (uint16_t)colsb[k];
    }
    /* not _tile_loadconfig: GCC 12's declares only the first 8 bytes read, and drops the stores
     * of the shapes */
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

/* ---- Q8_0 on AMX ------------------------------------------------------------------------ */

/* A block of the layout (8 parts of 64 bytes: 4 bytes of each of the 16 rows in turn) is a B tile
 * of 8 rows x 64 bytes, and one block of 16 tokens' activations an A tile of 16 x 32 bytes: one
 * tdpbssd sums a block of 16 rows against 16 tokens, in place of 128 vpdpbusd. The layout keeps
 * levels + 128 (vpdpbusd's unsigned side), so each block of groups (Q8X16_AMX_GROUP_BYTES of
 * levels) is first copied back to signed levels into the caller's scratch, once for all the
 * tiles of tokens: the tiles' sums are then the dots themselves, and the fold per block and token
 * is group_tile's without its correction: one conversion, one multiply and one fma for 16
 * outputs, so the numbers are group_tile's (adding the correction per token, on tdpbsud's sums of
 * the levels as stored, is a quarter more of the fold: the 64-token kernel then takes 210-236
 * GMAC/s against 243-265, build/bench/kernels --small-batch --type q8_0x16 --threads 1). Two tile
 * sets take alternate blocks, each block's tiles issued before the block before is folded and
 * stored after it (pp512 of the TinyLlama-shaped Q8_0 file 1-7% faster than a pair of blocks'
 * tiles, then their folds: build/bench/forward_bench MODEL --threads 2 --pp-only 2, six
 * alternating pairs). The activations come in q8x16_amx_put's tiles: a block of 16 tokens
 * is 576 bytes in one piece (from q8x16_act's 44-byte blocks, an A tile's 16 rows would be 16
 * lines apart, and every block's fold would read 16 scattered numbers). A pass's signed copy stays
 * in L2 while it meets every tile of tokens in turn, a tile's activations in L1. */
struct q8x16_amx_block {
    int8_t q[AMX_TOKENS][QK8_0];
    float d[AMX_TOKENS];
};
_Static_assert(sizeof(struct q8x16_amx_block) * 32 <= Q8X16_AMX_ACT_BYTES(AMX_TOKENS, 32 * 32), "q8x16_amx_block fits acts_amx");
#define Q8_C0 0
#define Q8_C1 1
#define Q8_A0 2
#define Q8_A1 3
#define Q8_B0 4
#define Q8_B1 5

void q8x16_amx_put(const struct q8x16_act *x, int64_t t, int64_t n_in, void *amx) {
    const int64_t nb = n_in / QK8_0;
    struct q8x16_amx_block *b = (struct q8x16_amx_block *)amx + t / AMX_TOKENS * nb;
    const int r = (int)(t % AMX_TOKENS);
    for (int64_t i = 0; i < nb; i++) {
        memcpy(b[i].q[r], x[i].q4, QK8_0);
        b[i].d[r] = x[i].d;
    }
}

/* Block i's integer dots of the 16 rows (signed levels at blk) against the 16 tokens of xb, on
 * tile set k (C0, A0, B0 or C1, A1, B1); q8_amx_store then puts them into c[t][l]. */
AMX static inline __attribute__((always_inline)) void q8_amx_block(int k, const uint8_t *blk, const struct q8x16_amx_block *xb) {
    if (k == 0) {
        TILE(_tile_loadd, Q8_A0, xb->q, QK8_0);
        TILE(_tile_loadd, Q8_B0, blk, 64);
        TILE(_tile_zero, Q8_C0);
        TILE(_tile_dpbssd, Q8_C0, Q8_A0, Q8_B0);
    } else {
        TILE(_tile_loadd, Q8_A1, xb->q, QK8_0);
        TILE(_tile_loadd, Q8_B1, blk, 64);
        TILE(_tile_zero, Q8_C1);
        TILE(_tile_dpbssd, Q8_C1, Q8_A1, Q8_B1);
    }
}
AMX static inline __attribute__((always_inline)) void q8_amx_store(int k, int32_t c[AMX_TOKENS][Q8X16_ROWS]) {
    if (k == 0) TILE(_tile_stored, Q8_C0, c, 64);
    else TILE(_tile_stored, Q8_C1, c, 64);
}

/* The 16 tokens' accumulators as named variables a0..a15: an array of them would live in memory
 * (GCC splits arrays into registers before it unrolls the loops that index them), a store and a
 * load more per token and block. */
#define AMX_EACH_TOKEN(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
/* Block xb's dots c[t][l] folded into a<t> (scales: the group's 16 for the block). */
#define Q8_AMX_FOLD(c, scales, xb)                                                                                \
    do {                                                                                                          \
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(scales)));                         \
        const int32_t(*fold_c)[Q8X16_ROWS] = (c);                                                                 \
        const struct q8x16_amx_block *fold_x = (xb);                                                              \
        AMX_EACH_TOKEN(Q8_AMX_FOLD_TOKEN)                                                                         \
    } while (0)
#define Q8_AMX_FOLD_TOKEN(t)                                                                                      \
    a##t = _mm512_fmadd_ps(                                                                                       \
        _mm512_cvtepi32_ps(_mm512_load_si512(fold_c[t])), _mm512_mul_ps(dw, _mm512_set1_ps(fold_x->d[t])), a##t);

/* Group g (data dat, scales as group_tile's) against the 16 tokens of xb (block i at xb + i) into
 * y[t * n_out + l]. */
AMX static void q8_amx_group_tile(int64_t nb, const uint16_t *sc0, const uint16_t *sc, const uint8_t *dat,
                                  const struct q8x16_amx_block *xb, float *y, int64_t n_out) {
    int32_t c0[AMX_TOKENS][Q8X16_ROWS] __attribute__((aligned(64))), c1[AMX_TOKENS][Q8X16_ROWS] __attribute__((aligned(64)));
#define Q8_AMX_ACC(t) __m512 a##t = _mm512_setzero_ps();
    AMX_EACH_TOKEN(Q8_AMX_ACC)
#undef Q8_AMX_ACC
    /* block i's tiles issued before block i - 1's fold, their stores after it */
    q8_amx_block(0, dat, xb);
    q8_amx_store(0, c0);
    for (int64_t i = 1; i < nb; i++) {
        const uint16_t *prev = i > 1 ? sc + (i - 1) * Q8X16_ROWS : sc0;
        if (i % 2) {
            q8_amx_block(1, dat + (size_t)i * Q8_DATA, xb + i);
            Q8_AMX_FOLD(c0, prev, xb + i - 1);
            q8_amx_store(1, c1);
        } else {
            q8_amx_block(0, dat + (size_t)i * Q8_DATA, xb + i);
            Q8_AMX_FOLD(c1, prev, xb + i - 1);
            q8_amx_store(0, c0);
        }
    }
    Q8_AMX_FOLD((nb - 1) % 2 ? c1 : c0, nb > 1 ? sc + (nb - 1) * Q8X16_ROWS : sc0, xb + nb - 1);
#define Q8_AMX_STORE(t) _mm512_storeu_ps(y + (t) * n_out, a##t);
    AMX_EACH_TOKEN(Q8_AMX_STORE)
#undef Q8_AMX_STORE
}

/* Groups [g0, g1)'s levels signed (level + 128 back to level) into out, group after group. */
AMX static void q8_amx_signed(int64_t nb, const void *w, int64_t g0, int64_t g1, uint8_t *out) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *lv = group_data(w, nb, Q8_DATA, g);
        for (size_t k = 0; k < (size_t)nb * Q8_DATA; k += 64, out += 64)
            _mm512_store_si512(out, _mm512_xor_si512(_mm512_loadu_si512(lv + k), bias));
    }
}

AMX void q8x16_rows_amx(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1,
                        const struct q8x16_act *acts, const void *amx, void *scratch, int64_t n_tok, float *y) {
    const int64_t nb = n_in / QK8_0, full = n_out / Q8X16_ROWS * Q8X16_ROWS;
    ASSERT(r0 % Q8X16_ROWS == 0 && (r1 % Q8X16_ROWS == 0 || r1 == n_out) && r1 <= n_out);
    ASSERT((uintptr_t)scratch % 64 == 0);
    const int64_t g1 = (r1 < full ? r1 : full) / Q8X16_ROWS, n_amx = n_tok / AMX_TOKENS * AMX_TOKENS;
    if (n_amx > 0 && r0 / Q8X16_ROWS < g1) {
        /* C0, C1: 16 x 16 int32; A0, A1: 16 tokens x 32 bytes; B0, B1: 8 x 64 bytes */
        static const int tile_rows[8] = {AMX_TOKENS, AMX_TOKENS, AMX_TOKENS, AMX_TOKENS, QK8_0 / 4, QK8_0 / 4, 0, 0},
                         tile_colsb[8] = {64, 64, QK8_0, QK8_0, 64, 64, 0, 0};
        amx_configure(tile_rows, tile_colsb);
        const size_t group_bytes = (size_t)nb * Q8_DATA;
        const int64_t gb = Q8X16_AMX_GROUP_BYTES / group_bytes > 1 ? (int64_t)(Q8X16_AMX_GROUP_BYTES / group_bytes) : 1;
        for (int64_t g0 = r0 / Q8X16_ROWS; g0 < g1; g0 += gb) {
            const int64_t g_end = g0 + gb < g1 ? g0 + gb : g1;
            q8_amx_signed(nb, w, g0, g_end, scratch);
            for (int64_t t = 0; t < n_amx; t += AMX_TOKENS)
                for (int64_t g = g0; g < g_end; g++)
                    q8_amx_group_tile(nb, group_scales(w, nb, Q8_DATA, g, 0),
                                      (const uint16_t *)(group_base(w, nb, Q8_DATA, g) + group_bytes),
                                      (const uint8_t *)scratch + (size_t)(g - g0) * group_bytes,
                                      (const struct q8x16_amx_block *)amx + t / AMX_TOKENS * nb,
                                      y + t * n_out + g * Q8X16_ROWS, n_out);
        }
        _tile_release(); /* the thread's tile state back to its initial (cheap to save) state */
    }
    if (r1 > full && n_amx > 0) /* the tail rows (GGUF) of those tokens */
        rows(n_in, n_out, w, full > r0 ? full : r0, r1, acts, n_amx, y, false);
    /* the tokens past the last whole tile: the vector kernel */
    rows(n_in, n_out, w, r0, r1, acts + n_amx * nb, n_tok - n_amx, y + n_amx * n_out, false);
}

/* ---- Q4_K and Q6_K: the loop of both kernels ------------------------------------------ */

/* The K-quants' kernels take tokens in blocks of KX16_TOKEN_BLOCK, each block group by group
 * and each group tile by tile: a group's super-blocks (9-32 KB at 1024-3584 inputs) stay in L1
 * for the block's tiles, the block's activations (16 x 292 bytes per super-block) in L2. With the
 * tiles outermost, 8 tokens read every group twice from L2: 5-8% slower (build/bench/kernels
 * --small-batch --type q4_kx16 --threads 1). */
#define KX16_TOKEN_BLOCK 16
/* Tokens per pass over a group, each holding its accumulators beside the weight registers:
 * Q4_K's one integer sum per token fits 8 (against 4: pp512 of the TinyLlama-shaped Q4_K_M file
 * 6% faster, build/bench/forward_bench --pp-only); Q6_K's eight float lanes per token, 4. */
#define K4_TILE 8
#define K6_TILE 4
/* k4_group_tile / k6_group_tile: group g against tokens [0, nt) of xq into y (see each), nt at
 * most the kernel's tile (K4_TILE, K6_TILE). */
typedef void kx16_tile_fn(int64_t nb, const void *w, int64_t g, const uint8_t *xq, size_t xq_stride, float *y,
                          int64_t n_out, const int nt);

/* Groups [g0, g1) against n_tok tokens: blocks, groups, tiles of at most `max_tile` (<= 8) tokens
 * as above. Inlined into each kernel's rows function, so that `tile` is called directly with a
 * constant tile size. */
AVX512 static inline __attribute__((always_inline)) void kx16_groups(kx16_tile_fn *tile, const int max_tile, int64_t nb,
                                                                     const void *w, int64_t g0, int64_t g1,
                                                                     const void *xq, size_t xq_stride, int64_t n_tok,
                                                                     float *y, int64_t n_out) {
    for (int64_t b0 = 0; b0 < n_tok; b0 += KX16_TOKEN_BLOCK) {
        const int64_t b1 = n_tok - b0 < KX16_TOKEN_BLOCK ? n_tok : b0 + KX16_TOKEN_BLOCK;
        for (int64_t g = g0; g < g1; g++)
            for (int64_t t0 = b0; t0 < b1; t0 += max_tile) {
                const uint8_t *x = (const uint8_t *)xq + (size_t)t0 * xq_stride;
                float *yg = y + t0 * n_out + g * Q8X16_ROWS;
                /* a case past max_tile never runs: its constant stays within the kernel's arrays */
#define KX16_TILE(n) tile(nb, w, g, x, xq_stride, yg, n_out, (n) <= max_tile ? (n) : max_tile)
                switch (b1 - t0 < max_tile ? b1 - t0 : max_tile) {
                case 1: KX16_TILE(1); break;
                case 2: KX16_TILE(2); break;
                case 3: KX16_TILE(3); break;
                case 4: KX16_TILE(4); break;
                case 5: KX16_TILE(5); break;
                case 6: KX16_TILE(6); break;
                case 7: KX16_TILE(7); break;
                default: KX16_TILE(8); break;
#undef KX16_TILE
                }
            }
    }
}

/* ---- Q4_K ------------------------------------------------------------------------------- */

/* A group's super-block i (16 rows of 256 elements, 2304 bytes: 16 GGUF super-blocks) in four
 * parts: 2048 bytes of nibbles, 32 bytes of the rows' d, 32 of their dmin, 192 of packed scales
 * (see q8x16.h). Every super-block of a tensor lies at the same offset mod 64 (2304 = 36 * 64),
 * so when they start 32 bytes past a 64-byte boundary d comes first and the nibbles' 64-byte
 * loads stay aligned. */
#define K4_NIB 2048
#define K4_SB (Q8X16_ROWS * sizeof(block_q4_K))
_Static_assert(K4_NIB + 4 * Q8X16_ROWS + K_SCALE_SIZE * Q8X16_ROWS == K4_SB, "q4kx16 super-block size");
/* Super-blocks (2304 bytes each) fetched ahead of use, into L2 (16 KB, as dotr_q4_K of kquant_avx512.c: into L1,
 * or 3 ahead, a decode step streams slower: build/bench/kernels --small-batch --type q4_kx16 --threads 2),
 * by tiles of two tokens or more. A one-token tile streams faster on the hardware prefetcher alone
 * (TinyLlama-shaped Q4_K_M, build/bench/forward_bench MODEL --threads 2 --tg-only 2 --depth 0: 7-12%
 * more tokens/s without), while 8 tokens' tiles need it (--rows 8: a step takes 59 ms without, 40
 * with). */
#define K4_PREFETCH_SB 7

struct k4_parts {
    uint8_t *nib;    /* [32 words][16 rows][4 bytes]: word k of row l = GGUF qs[4k .. 4k + 3] */
    uint16_t *d;     /* [16] */
    uint16_t *dmin;  /* [16] */
    uint8_t *planes; /* [12][16]: byte b of row l's packed scales */
};

static struct k4_parts k4_sb(const void *w, int64_t nb, int64_t g, int64_t i) {
    uint8_t *b = (uint8_t *)w + ((size_t)g * (size_t)nb + (size_t)i) * K4_SB;
    int ahead = (uintptr_t)b % 64 == 32;
    return (struct k4_parts){.nib = b + 32 * ahead, .d = (uint16_t *)(ahead ? b : b + K4_NIB),
                             .dmin = (uint16_t *)(b + K4_NIB + 32), .planes = b + K4_NIB + 64};
}

static void pack_q4k_block(void *w, int64_t nb, int64_t g, int64_t i, const uint8_t *rows, size_t rb) {
    struct k4_parts p = k4_sb(w, nb, g, i);
    for (int l = 0; l < Q8X16_ROWS; l++) {
        const block_q4_K *b = (const block_q4_K *)(rows + l * rb) + i;
        p.d[l] = b->d;
        p.dmin[l] = b->dmin;
        for (int k = 0; k < K_SCALE_SIZE; k++) p.planes[k * Q8X16_ROWS + l] = b->scales[k];
        put_words(p.nib, l, b->qs, QK_K / 8);
    }
}

int q4kx16_repack(void *w, int64_t n_in, int64_t n_out) {
    return repack_groups(w, n_in / QK_K, sizeof(block_q4_K), n_out, pack_q4k_block);
}

/* Super-block i of row r as GGUF holds it (from either layout). */
static block_q4_K k4_block(const void *w, int64_t n_in, int64_t n_out, int64_t r, int64_t i) {
    const int64_t nb = n_in / QK_K;
    if (r >= n_out / Q8X16_ROWS * Q8X16_ROWS)
        return ((const block_q4_K *)((const uint8_t *)w + (size_t)r * (size_t)nb * sizeof(block_q4_K)))[i];
    struct k4_parts p = k4_sb(w, nb, r / Q8X16_ROWS, i);
    const int l = (int)(r % Q8X16_ROWS);
    block_q4_K b = {.d = p.d[l], .dmin = p.dmin[l]};
    for (int k = 0; k < K_SCALE_SIZE; k++) b.scales[k] = p.planes[k * Q8X16_ROWS + l];
    for (int k = 0; k < QK_K / 8; k++) memcpy(b.qs + 4 * k, p.nib + k * 64 + l * 4, 4);
    return b;
}

void q4kx16_row_to_float(const void *w, int64_t n_in, int64_t n_out, int64_t r, float *out) {
    for (int64_t i = 0; i < n_in / QK_K; i++) { /* the GGUF super-block back, decoded by quant.c */
        const block_q4_K b = k4_block(w, n_in, n_out, r, i);
        quant_to_float(GGML_TYPE_Q4_K, &b, out + i * QK_K, QK_K);
    }
}

float q4kx16_dot_ref(int64_t n_in, int64_t n_out, const void *w, int64_t r, const void *xq) {
    const block_q8_K *x = xq;
    float a = 0.0f, m = 0.0f;
    for (int64_t i = 0; i < n_in / QK_K; i++) {
        const block_q4_K b = k4_block(w, n_in, n_out, r, i);
        const float d = h2f(b.d) * x[i].d, dmin = h2f(b.dmin) * x[i].d;
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, mn;
            k4_scale_min(j, b.scales, &sc, &mn);
            int32_t si = 0;
            for (int e = 0; e < 32; e++) { /* sub-block j: the low (even j) or high nibbles of 32 bytes */
                int q = b.qs[32 * (j / 2) + e];
                si += (j % 2 ? q >> 4 : q & 0xF) * x[i].qs[32 * j + e];
            }
            sumi += sc * si;
            summ += mn * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
        }
        a = fmaf((float)sumi, d, a);
        m = fmaf((float)summ, dmin, m);
    }
    return a - m;
}

/* k4_scale_min for the 16 rows at once (byte l of each vector: row l): sub-block j's scale
 * (mins = false) or min (true) from the 12 planes. The shifts are 16-bit, the masks keep each
 * byte's own bits. Computed where used, so that the 16 vectors never sit in registers together. */
AVX512 static inline __attribute__((always_inline)) __m128i k4_scale16(const uint8_t *planes, int j, bool mins) {
#define K4_PLANE(b) _mm_loadu_si128((const __m128i *)(planes + 16 * (b)))
    const __m128i c63 = _mm_set1_epi8(63), c15 = _mm_set1_epi8(15), c48 = _mm_set1_epi8(0x30);
    const int b = j % 4 + (mins ? 4 : 0);
    if (j < 4) return _mm_and_si128(K4_PLANE(b), c63);
    /* (x >> 6) << 4 = (x >> 2) & 0x30 */
    const __m128i lo = mins ? _mm_srli_epi16(K4_PLANE(j + 4), 4) : K4_PLANE(j + 4);
    return _mm_or_si128(_mm_and_si128(lo, c15), _mm_and_si128(_mm_srli_epi16(K4_PLANE(b), 2), c48));
#undef K4_PLANE
}

/* Group g (16 rows from row 16g) against tokens [0, nt) of the Q8_K rows xq (xq_stride bytes
 * apart): y[t * n_out + l]. Per sub-block j of a super-block: its nibbles (8 registers: 16 rows x
 * 32 levels) once for the tile's tokens, 8 vpdpbusd per token into the exact integer dot of each
 * row, times the row's scale, into one sum per token; then per token the mins' integer sum (4
 * vpdpwssd) and the two fmas of dot_q4_K's order (quant.c). */
AVX512 static inline __attribute__((always_inline)) void k4_group_tile(int64_t nb, const void *w, int64_t g,
                                                                       const uint8_t *xq, size_t xq_stride,
                                                                       float *y, int64_t n_out, const int nt) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m4hi = _mm512_set1_epi8((char)0xF0);
    __m512 a[K4_TILE], m[K4_TILE];
    for (int t = 0; t < nt; t++) a[t] = m[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const struct k4_parts p = k4_sb(w, nb, g, i);
        /* K4_PREFETCH_SB super-blocks ahead into L2 (past the matrix's end near its last group:
         * lines nobody reads; a prefetch never faults) */
        const char *pf = (const char *)p.nib + K4_PREFETCH_SB * K4_SB;
        if (nt > 1) {
#pragma GCC unroll 36
            for (size_t off = 0; off < K4_SB; off += 64) _mm_prefetch(pf + off, _MM_HINT_T1);
        }
        /* 16 times each row's integer dot: the odd sub-blocks sit on the high nibbles in place
         * (16 times their value, no shift per load), the even ones take 16 times their scale;
         * divided back exactly once per super-block. |16 * dot| <= 16 * 8 * 63 * 32 * 15 * 128
         * < 2^31. */
        __m512i sum[K4_TILE];
        for (int t = 0; t < nt; t++) sum[t] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            __m512i wv[8];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                wv[k] = _mm512_and_si512(_mm512_loadu_si512(p.nib + (size_t)(8 * (j / 2) + k) * 64), j % 2 ? m4hi : m4);
            const __m512i scj = _mm512_slli_epi32(_mm512_cvtepu8_epi32(k4_scale16(p.planes, j, false)), j % 2 ? 0 : 4);
#pragma GCC unroll 8
            for (int t = 0; t < nt; t++) {
                const int8_t *xs = ((const block_q8_K *)(xq + (size_t)t * xq_stride))[i].qs + 32 * j;
                __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int k = 0; k < 8; k += 2) { /* exact integer sums: the order does not matter */
                    s0 = dpbusd_bcst(s0, wv[k], xs + 4 * k);
                    s1 = dpbusd_bcst(s1, wv[k + 1], xs + 4 * k + 4);
                }
                sum[t] = _mm512_add_epi32(sum[t], _mm512_mullo_epi32(_mm512_add_epi32(s0, s1), scj));
            }
        }
        /* the mins of sub-blocks 2q and 2q + 1 as the int16 pair of each row's lane, for vpdpwssd
         * (the sub-blocks' sums of 32 levels fit int16) */
        __m512i mn2[4];
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++)
            mn2[q] = _mm512_or_si512(_mm512_cvtepu8_epi32(k4_scale16(p.planes, 2 * q, true)),
                                     _mm512_slli_epi32(_mm512_cvtepu8_epi32(k4_scale16(p.planes, 2 * q + 1, true)), 16));
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p.d));
        const __m512 dmw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p.dmin));
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            const block_q8_K *x = (const block_q8_K *)(xq + (size_t)t * xq_stride) + i;
            __m512i summ = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) {
                const int32_t b0 = x->bsums[4 * q] + x->bsums[4 * q + 1], b1 = x->bsums[4 * q + 2] + x->bsums[4 * q + 3];
                summ = _mm512_dpwssd_epi32(summ, mn2[q], _mm512_set1_epi32((int32_t)((uint32_t)(uint16_t)b0 | (uint32_t)b1 << 16)));
            }
            const __m512 xd = _mm512_set1_ps(x->d);
            a[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srai_epi32(sum[t], 4)), _mm512_mul_ps(dw, xd), a[t]);
            m[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ), _mm512_mul_ps(dmw, xd), m[t]);
        }
    }
    for (int t = 0; t < nt; t++) _mm512_storeu_ps(y + t * n_out, _mm512_sub_ps(a[t], m[t]));
}

AVX512 void q4kx16_rows(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const void *xq,
                        size_t xq_stride, int64_t n_tok, float *y) {
    const int64_t nb = n_in / QK_K, full = n_out / Q8X16_ROWS * Q8X16_ROWS;
    ASSERT(r0 % Q8X16_ROWS == 0 && (r1 % Q8X16_ROWS == 0 || r1 == n_out) && r1 <= n_out);
    const int64_t g1 = (r1 < full ? r1 : full) / Q8X16_ROWS;
    kx16_groups(k4_group_tile, K4_TILE, nb, w, r0 / Q8X16_ROWS, g1, xq, xq_stride, n_tok, y, n_out);
    for (int64_t r = r0 > full ? r0 : full; r < r1; r++)
        for (int64_t t = 0; t < n_tok; t++)
            y[t * n_out + r] = q4kx16_dot_ref(n_in, n_out, w, r, (const uint8_t *)xq + (size_t)t * xq_stride);
}

/* What a K-quant AMX kernel leaves to its vector kernel `rows` (q4kx16_rows, q6kx16_rows): the
 * tail rows (GGUF) of the n_amx tokens it took, and the tokens past them. */
typedef void kx16_vec_rows(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const void *xq,
                           size_t xq_stride, int64_t n_tok, float *y);
static void kx16_amx_rest(kx16_vec_rows *rows, int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1,
                          const void *xq, size_t xq_stride, int64_t n_amx, int64_t n_tok, float *y) {
    const int64_t full = n_out / Q8X16_ROWS * Q8X16_ROWS;
    if (r1 > full && n_amx > 0) rows(n_in, n_out, w, full > r0 ? full : r0, r1, xq, xq_stride, n_amx, y);
    if (n_tok > n_amx)
        rows(n_in, n_out, w, r0, r1, (const uint8_t *)xq + (size_t)n_amx * xq_stride, xq_stride, n_tok - n_amx,
             y + n_amx * n_out);
}

/* The K-quant AMX kernels' activations in amx, per tile of 16 tokens and super-block
 * ([tile][super-block]): Q6_K's (q6kx16_amx_put) and Q4_K's (q4kx16_amx_put) side by side, so
 * that the matrices of one matmul in either type (a Q4_K_M file's attn_q and attn_v) read one
 * quantization; both kernels' A tiles in one piece each, and the numbers their folds take per
 * token without reading the Q8_K rows (a prompt's rows, thousands of bytes apart, miss the
 * caches). */
struct kx16_amx_act {
    float d[AMX_TOKENS];             /* the tokens' Q8_K scales (both) */
    int8_t lanes[8][AMX_TOKENS][32]; /* Q6_K: lane k of each token (bytes 4k..4k+3 of its 8 words of 32) */
    int8_t qs[4][AMX_TOKENS][64];    /* Q4_K: chunk c of each token's 256 levels */
    int32_t mins[AMX_TOKENS][4];     /* Q4_K: sub-blocks 2q and 2q + 1's sums of levels as an int16 pair */
};
_Static_assert(sizeof(struct kx16_amx_act) * 32 <= Q8X16_AMX_ACT_BYTES(16, 32 * QK_K), "the K-quants' tiles fit acts_amx");

static struct kx16_amx_act *kx16_amx_act(const void *amx, int64_t nb, int64_t tile, int64_t i) {
    return (struct kx16_amx_act *)amx + tile * nb + i;
}

/* Both K-quant kernels split each weight's value in two parts of a byte (lo and hi) and take two
 * tiles of 16 tokens at a time against a group's B tiles: */
#define T_LO0 0 /* C: the first tile's lo products' sums, 16 tokens x 16 rows of int32 */
#define T_HI0 1 /* C: its hi products' */
#define T_LO1 2 /* C: the second tile's lo */
#define T_HI1 3 /* C: its hi */
#define T_A0 4  /* A: the first tile's 16 tokens x their activations (Q4_K: 64 of a chunk; Q6_K: 32 of a lane) */
#define T_A1 5  /* A: the second tile's */
#define T_BL 6  /* B: the 16 rows' lo parts (Q4_K: 16 x 64 bytes; Q6_K: 8 x 64) */
#define T_BH 7  /* B: their hi parts */

/* ---- Q4_K on AMX ----------------------------------------------------------------------- */

/* A tile sums 64 elements, two sub-blocks, under one number per column, while a Q4_K row's
 * integer sum over a super-block is sum_j sc_j * dot_j (sub-block j's 6-bit scale times its 32
 * levels' dot). So each scale is split in two 3-bit parts, sc = 8 * hi + lo, and the levels are
 * multiplied by them before the tiles (level * part <= 15 * 7, a byte): two C tiles sum the lo
 * and the hi products over the whole super-block, 4 tdpbsud each, and sumi = 8 * hi + lo exactly.
 * The mins' integer (sum_j min_j * the sub-block's sum of levels) stays on the vector units, 4
 * vpdpwssd per token from the pairs of sums q4kx16_amx_put made once per token. Then the vector
 * kernel's two fmas per super-block, so the numbers are dot_q4_K's. A group's super-block, so
 * prepared (8 KB: struct k4_amx_b), serves up to K4_AMX_TILES tiles of 16 tokens, two at a time
 * (their four C tiles beside one A tile each and the two B tiles they share: 8 tile loads, 16
 * tdpbsud and 4 stores per super-block and pair). The fold of a pair runs after the next pair's
 * tile instructions are issued (see k4_amx_group). */
#define K4_AMX_TILES 8

void q4kx16_amx_put(const void *xq, int64_t t, int64_t n_in, void *amx) {
    const int64_t nb = n_in / QK_K;
    const block_q8_K *x = xq;
    const int tt = (int)(t % AMX_TOKENS);
    for (int64_t i = 0; i < nb; i++) {
        struct kx16_amx_act *a = kx16_amx_act(amx, nb, t / AMX_TOKENS, i);
        for (int c = 0; c < 4; c++) memcpy(a->qs[c][tt], x[i].qs + 64 * c, 64);
        for (int q = 0; q < 4; q++) { /* as k4_group_tile's words for vpdpwssd */
            const int32_t s0 = x[i].bsums[4 * q] + x[i].bsums[4 * q + 1], s1 = x[i].bsums[4 * q + 2] + x[i].bsums[4 * q + 3];
            a->mins[tt][q] = (int32_t)((uint32_t)(uint16_t)s0 | (uint32_t)s1 << 16);
        }
        a->d[tt] = x[i].d;
    }
}

/* A group's super-block for the tiles: b[c][p] the B tiles of 64-element chunk c (sub-blocks 2c,
 * 2c + 1), row kk (< 8: word 8c + kk's low nibbles, sub-block 2c; >= 8: word 8c + kk - 8's high
 * nibbles, sub-block 2c + 1), p = 0, 1 the levels times the lo and hi scale parts. */
struct k4_amx_b {
    uint8_t b[4][2][16][64];
};
/* The super-block's numbers for the fold: the rows' scales and mins' pairs. */
struct k4_amx_scales {
    __m512 dw, dmw; /* the rows' d, dmin */
    __m512i mn2[4]; /* the mins of sub-blocks 2q and 2q + 1 as the int16 pair of each row's lane */
};

AMX static void k4_amx_build(const struct k4_parts *p, struct k4_amx_b *out, struct k4_amx_scales *sc) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), c7 = _mm512_set1_epi32(7);
    for (int c = 0; c < 4; c++) {
        __m512i part[2][2]; /* [sub-block 2c + h][lo, hi]: each row's part in both 16-bit halves */
        for (int h = 0; h < 2; h++) {
            const __m512i sc = _mm512_cvtepu8_epi32(k4_scale16(p->planes, 2 * c + h, false));
            const __m512i lo = _mm512_and_si512(sc, c7), hi = _mm512_srli_epi32(sc, 3);
            part[h][0] = _mm512_or_si512(lo, _mm512_slli_epi32(lo, 16));
            part[h][1] = _mm512_or_si512(hi, _mm512_slli_epi32(hi, 16));
        }
#pragma GCC unroll 8
        for (int kk = 0; kk < 8; kk++) {
            const __m512i v = _mm512_loadu_si512(p->nib + (size_t)(8 * c + kk) * 64);
            const __m512i lv[2] = {_mm512_and_si512(v, m4), _mm512_and_si512(_mm512_srli_epi16(v, 4), m4)};
            /* a 16-bit multiply scales both bytes of a pair: byte * part <= 105, no carry */
            for (int h = 0; h < 2; h++)
                for (int q = 0; q < 2; q++)
                    _mm512_store_si512(out->b[c][q][kk + 8 * h], _mm512_mullo_epi16(lv[h], part[h][q]));
        }
    }
    sc->dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p->d));
    sc->dmw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p->dmin));
    for (int q = 0; q < 4; q++)
        sc->mn2[q] = _mm512_or_si512(_mm512_cvtepu8_epi32(k4_scale16(p->planes, 2 * q, true)),
                                     _mm512_slli_epi32(_mm512_cvtepu8_epi32(k4_scale16(p->planes, 2 * q + 1, true)), 16));
}

/* n (1 or 2) tiles of tokens, x[k] tile k's super-block, against the prepared b: the lo and hi
 * sums into sums[k][0], sums[k][1] (each [t][l]). */
AMX static inline __attribute__((always_inline)) void k4_amx_tiles(const struct k4_amx_b *b,
                                                                   const struct kx16_amx_act *const x[2], const int n,
                                                                   int32_t sums[2][2][AMX_TOKENS][Q8X16_ROWS]) {
    TILE(_tile_zero, T_LO0);
    TILE(_tile_zero, T_HI0);
    if (n > 1) {
        TILE(_tile_zero, T_LO1);
        TILE(_tile_zero, T_HI1);
    }
    for (int c = 0; c < 4; c++) {
        TILE(_tile_loadd, T_BL, b->b[c][0], 64);
        TILE(_tile_loadd, T_BH, b->b[c][1], 64);
        TILE(_tile_loadd, T_A0, x[0]->qs[c], 64);
        TILE(_tile_dpbsud, T_LO0, T_A0, T_BL);
        TILE(_tile_dpbsud, T_HI0, T_A0, T_BH);
        if (n > 1) {
            TILE(_tile_loadd, T_A1, x[1]->qs[c], 64);
            TILE(_tile_dpbsud, T_LO1, T_A1, T_BL);
            TILE(_tile_dpbsud, T_HI1, T_A1, T_BH);
        }
    }
    TILE(_tile_stored, T_LO0, sums[0][0], 64);
    TILE(_tile_stored, T_HI0, sums[0][1], 64);
    if (n > 1) {
        TILE(_tile_stored, T_LO1, sums[1][0], 64);
        TILE(_tile_stored, T_HI1, sums[1][1], 64);
    }
}

/* One tile's sums s (lo, hi) of super-block i (its numbers in sc; the tokens' in x) into its 16
 * tokens' a, m: k4_group_tile's fmas. */
AMX static inline __attribute__((always_inline)) void k4_amx_fold(const struct k4_amx_scales *sc,
                                                                  const struct kx16_amx_act *x,
                                                                  const int32_t s[2][AMX_TOKENS][Q8X16_ROWS], int64_t i,
                                                                  __m512 a[AMX_TOKENS], __m512 m[AMX_TOKENS]) {
    const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int t = 0; t < AMX_TOKENS; t++) {
        const __m512i sumi = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(s[1][t]), 3), _mm512_load_si512(s[0][t]));
        __m512i summ = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) summ = _mm512_dpwssd_epi32(summ, sc->mn2[q], _mm512_set1_epi32(x->mins[t][q]));
        const __m512 xd = _mm512_set1_ps(x->d[t]);
        a[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(sc->dw, xd), i ? a[t] : zero);
        m[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ), _mm512_mul_ps(sc->dmw, xd), i ? m[t] : zero);
    }
}

/* Group g against the tokens of n_tiles tiles of 16 (their activations from tile t0 of amx) into
 * y[t * n_out + l]. Super-block by super-block, pair by pair; each pair's fold runs after the next
 * pair's tile instructions are issued (its sums and its super-block's numbers in the other of two
 * buffers): the 64-token kernel 276-314 GMAC/s against 229-247 folding each pair at once
 * (build/bench/kernels --small-batch --type q4_kx16 --threads 1, three alternating pairs), pp512 of
 * the TinyLlama-shaped Q4_K_M file 0-3% faster (build/bench/forward_bench MODEL --threads 2
 * --pp-only 2). The B tiles have one buffer: the a and m accumulators, the sums and the B tiles
 * together fill L1, and a second 8 KB of B tiles made pp512 3.6% slower (420.3 against 435.5 t/s,
 * the mean of six alternating pairs). */
AMX static void k4_amx_group(int64_t nb, const void *w, int64_t g, const void *amx, int64_t t0, int n_tiles,
                             float *y, int64_t n_out) {
    struct k4_amx_b b __attribute__((aligned(64)));
    struct k4_amx_scales sc[2]; /* [super-block % 2] */
    int32_t sums[2][2][2][AMX_TOKENS][Q8X16_ROWS] __attribute__((aligned(64))); /* [pair % 2][tile][lo, hi] */
    /* as k4_group_tile's a, m; from 0.0 at i = 0 rather than cleared first (16 KB per group) */
    __m512 a[K4_AMX_TILES][AMX_TOKENS], m[K4_AMX_TILES][AMX_TOKENS];
    const int last = (n_tiles - 1) / 2 * 2; /* the last pair's first tile */
    int buf = 0;
    /* pair k (its n tiles) of super-block i, its sums in sums[pb], into a, m */
#define K4_AMX_FOLD(i, k, n, pb)                                                                                 \
    for (int h = 0; h < (n); h++)                                                                                \
        k4_amx_fold(&sc[(i) % 2], kx16_amx_act(amx, nb, t0 + (k) + h, (i)), sums[pb][h], (i), a[(k) + h], m[(k) + h]);
    for (int64_t i = 0; i < nb; i++) {
        const struct k4_parts p = k4_sb(w, nb, g, i);
        k4_amx_build(&p, &b, &sc[i % 2]);
        for (int k = 0; k < n_tiles; k += 2, buf ^= 1) {
            const int n = k < last ? 2 : n_tiles - last;
            const struct kx16_amx_act *x[2] = {kx16_amx_act(amx, nb, t0 + k, i), kx16_amx_act(amx, nb, t0 + k + n - 1, i)};
            if (n == 2) k4_amx_tiles(&b, x, 2, sums[buf]);
            else k4_amx_tiles(&b, x, 1, sums[buf]);
            if (k > 0) {
                K4_AMX_FOLD(i, k - 2, 2, buf ^ 1)
            } else if (i > 0) {
                K4_AMX_FOLD(i - 1, last, n_tiles - last, buf ^ 1)
            }
        }
    }
    K4_AMX_FOLD(nb - 1, last, n_tiles - last, buf ^ 1)
#undef K4_AMX_FOLD
    for (int k = 0; k < n_tiles; k++)
        for (int t = 0; t < AMX_TOKENS; t++)
            _mm512_storeu_ps(y + (size_t)(k * AMX_TOKENS + t) * (size_t)n_out, _mm512_sub_ps(a[k][t], m[k][t]));
}

AMX void q4kx16_rows_amx(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const void *xq,
                         size_t xq_stride, const void *amx, void *scratch, int64_t n_tok, float *y) {
    (void)scratch;
    const int64_t nb = n_in / QK_K, full = n_out / Q8X16_ROWS * Q8X16_ROWS;
    ASSERT(r0 % Q8X16_ROWS == 0 && (r1 % Q8X16_ROWS == 0 || r1 == n_out) && r1 <= n_out);
    const int64_t g1 = (r1 < full ? r1 : full) / Q8X16_ROWS, n_amx = n_tok / AMX_TOKENS * AMX_TOKENS;
    if (n_amx > 0 && r0 / Q8X16_ROWS < g1) {
        /* every tile 16 rows of 64 bytes: C 16 tokens x 16 int32, A 16 tokens x 64 activations,
         * B 16 x (16 rows x 4 levels) */
        static const int tile_rows[8] = {AMX_TOKENS, AMX_TOKENS, AMX_TOKENS, AMX_TOKENS, AMX_TOKENS, AMX_TOKENS, AMX_TOKENS, AMX_TOKENS},
                         tile_colsb[8] = {64, 64, 64, 64, 64, 64, 64, 64};
        amx_configure(tile_rows, tile_colsb);
        for (int64_t t0 = 0; t0 < n_amx; t0 += K4_AMX_TILES * AMX_TOKENS) {
            const int n_tiles = (int)((n_amx - t0) / AMX_TOKENS < K4_AMX_TILES ? (n_amx - t0) / AMX_TOKENS : K4_AMX_TILES);
            for (int64_t g = r0 / Q8X16_ROWS; g < g1; g++)
                k4_amx_group(nb, w, g, amx, t0 / AMX_TOKENS, n_tiles, y + t0 * n_out + g * Q8X16_ROWS, n_out);
        }
        _tile_release(); /* the thread's tile state back to its initial (cheap to save) state */
    }
    kx16_amx_rest(q4kx16_rows, n_in, n_out, w, r0, r1, xq, xq_stride, n_amx, n_tok, y);
}

/* ---- Q6_K ------------------------------------------------------------------------------- */

/* A group's super-block i (16 rows of 256 elements, 3360 bytes: 16 GGUF super-blocks) in four
 * parts (see q8x16.h): 2048 bytes of ql, 1024 of qh, 256 of scales, 32 of d. 3360 is 52.5 * 64,
 * so consecutive super-blocks alternate between a 64-byte boundary and 32 bytes past one; in the
 * second case d comes first and the other parts' 64-byte loads stay aligned. */
#define K6_QL 2048
#define K6_QH 1024
#define K6_SC 256
#define K6_SB (Q8X16_ROWS * sizeof(block_q6_K))
_Static_assert(K6_QL + K6_QH + K6_SC + 2 * Q8X16_ROWS == K6_SB, "q6kx16 super-block size");
/* Super-blocks (3360 bytes each) fetched ahead of use, into L2 (16 KB, as dotr_q6_K of
 * kquant_avx512.c), K6_PREFETCH_LINES lines in each of the 8 lane passes: all 53 lines at the
 * super-block's start, one token of 2048 x 5632 takes 475-615 us instead of 285-338; into L1
 * (T0), about twice as long (build/bench/kernels --small-batch --type q6_kx16 --threads 1). */
#define K6_PREFETCH_SB 5
#define K6_PREFETCH_LINES 7
_Static_assert(8 * K6_PREFETCH_LINES * 64 >= K6_SB, "the 8 lane passes prefetch a whole super-block");

/* Where GGUF's ql word o (bytes 4o..4o+3, o = 16h + 8b + k) and qh word o (o = 8h + k) of a row
 * go: in the order the kernel's lane k reads them (k6_group_tile), so it streams its super-block
 * front to back. */
static int k6_ql_at(int o) { return 4 * (o % 8) + 2 * (o / 16) + (o / 8) % 2; }
static int k6_qh_at(int o) { return 2 * (o % 8) + o / 8; }

struct k6_parts {
    uint8_t *ql;  /* [32 words][16 rows][4 bytes]: word k6_ql_at(o) of row l = GGUF ql[4o .. 4o + 3] */
    uint8_t *qh;  /* [16 words][16 rows][4 bytes]: the same for qh (k6_qh_at) */
    int8_t *sc;   /* [16][16]: scale s of row l at s * 16 + l */
    uint16_t *d;  /* [16] */
};

static struct k6_parts k6_sb(const void *w, int64_t nb, int64_t g, int64_t i) {
    uint8_t *b = (uint8_t *)w + ((size_t)g * (size_t)nb + (size_t)i) * K6_SB;
    int ahead = (uintptr_t)b % 64 == 32;
    uint8_t *q = b + 32 * ahead;
    return (struct k6_parts){.ql = q, .qh = q + K6_QL, .sc = (int8_t *)(q + K6_QL + K6_QH),
                             .d = (uint16_t *)(ahead ? b : q + K6_QL + K6_QH + K6_SC)};
}

static void pack_q6k_block(void *w, int64_t nb, int64_t g, int64_t i, const uint8_t *rows, size_t rb) {
    struct k6_parts p = k6_sb(w, nb, g, i);
    for (int l = 0; l < Q8X16_ROWS; l++) {
        const block_q6_K *b = (const block_q6_K *)(rows + l * rb) + i;
        p.d[l] = b->d;
        for (int s = 0; s < QK_K / 16; s++) p.sc[s * Q8X16_ROWS + l] = b->scales[s];
        for (int o = 0; o < QK_K / 8; o++) memcpy(p.ql + k6_ql_at(o) * 64 + l * 4, b->ql + 4 * o, 4);
        for (int o = 0; o < QK_K / 16; o++) memcpy(p.qh + k6_qh_at(o) * 64 + l * 4, b->qh + 4 * o, 4);
    }
}

int q6kx16_repack(void *w, int64_t n_in, int64_t n_out) {
    return repack_groups(w, n_in / QK_K, sizeof(block_q6_K), n_out, pack_q6k_block);
}

/* Super-block i of row r as GGUF holds it (from either layout). */
static block_q6_K k6_block(const void *w, int64_t n_in, int64_t n_out, int64_t r, int64_t i) {
    const int64_t nb = n_in / QK_K;
    if (r >= n_out / Q8X16_ROWS * Q8X16_ROWS)
        return ((const block_q6_K *)((const uint8_t *)w + (size_t)r * (size_t)nb * sizeof(block_q6_K)))[i];
    struct k6_parts p = k6_sb(w, nb, r / Q8X16_ROWS, i);
    const int l = (int)(r % Q8X16_ROWS);
    block_q6_K b = {.d = p.d[l]};
    for (int s = 0; s < QK_K / 16; s++) b.scales[s] = p.sc[s * Q8X16_ROWS + l];
    for (int o = 0; o < QK_K / 8; o++) memcpy(b.ql + 4 * o, p.ql + k6_ql_at(o) * 64 + l * 4, 4);
    for (int o = 0; o < QK_K / 16; o++) memcpy(b.qh + 4 * o, p.qh + k6_qh_at(o) * 64 + l * 4, 4);
    return b;
}

float q6kx16_dot_ref(int64_t n_in, int64_t n_out, const void *w, int64_t r, const void *xq) {
    /* the row back in GGUF's layout, dotted by quant.c's scalar kernel: its order by construction */
    const int64_t nb = n_in / QK_K;
    block_q6_K *row = malloc((size_t)nb * sizeof *row);
    ASSERT(row);
    for (int64_t i = 0; i < nb; i++) row[i] = k6_block(w, n_in, n_out, r, i);
    float v = quant_get_vec_dot(SIMD_SCALAR, GGML_TYPE_Q6_K)(n_in, row, xq);
    free(row);
    return v;
}

/* Lane k's levels (unsigned, q + 32) of super-block p's 16 rows: lv[j] holds word 8j + k
 * (elements 32j + 4k .. +3), 4 bytes of each row. In half h = j / 4, with jj = j % 4, the word is
 * the low (jj < 2) or high nibbles of ql word 16h + 8(jj % 2) + k and bits 2jj, 2jj + 1 of qh
 * word 8h + k. */
AVX512 static inline __attribute__((always_inline)) void k6_levels(const struct k6_parts *p, int k, __m512i lv[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i a = _mm512_loadu_si512(p->ql + (size_t)k6_ql_at(16 * h + k) * 64);
        const __m512i b = _mm512_loadu_si512(p->ql + (size_t)k6_ql_at(16 * h + 8 + k) * 64);
        const __m512i hb = _mm512_loadu_si512(p->qh + (size_t)k6_qh_at(8 * h + k) * 64);
        /* (a & 0x0F) | (hi & 0x30): ternary 0xEC = (A & C) | B, B already masked */
        lv[4 * h + 0] = _mm512_ternarylogic_epi32(a, _mm512_and_si512(_mm512_slli_epi16(hb, 4), m30), m4, 0xEC);
        lv[4 * h + 1] = _mm512_ternarylogic_epi32(b, _mm512_and_si512(_mm512_slli_epi16(hb, 2), m30), m4, 0xEC);
        lv[4 * h + 2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(a, 4), _mm512_and_si512(hb, m30), m4, 0xEC);
        lv[4 * h + 3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(b, 4),
                                                  _mm512_and_si512(_mm512_srli_epi16(hb, 2), m30), m4, 0xEC);
    }
}

/* Group g (16 rows from row 16g) against tokens [0, nt) of the Q8_K rows xq (xq_stride bytes
 * apart): y[t * n_out + l], in dot_q6_K's order (quant.c): per row 8 float lanes, lane k the
 * integer sum over groups j of scale[2j + k/4] * (levels . activations of the 4-element word
 * 8j + k), lane_k = fma(d_w * d_x, (float)sum, lane_k) super-block after super-block, then
 * fold8. Here vector k holds lane k of the 16 rows. Per super-block and lane: the 8 words'
 * levels of the 16 rows (unsigned, q + 32, from ql's nibbles and qh's 2-bit fields) decoded once
 * for the tile's tokens; per token, each word's vpdpbusd starts at -32 * (the sum of its 4
 * activations), so its lanes end as the products of the signed levels (|.| <= 4 * 32 * 128, an
 * int16); two words' products (8j + k and 8j + 8 + k) go as the int16 pair of each lane into one
 * vpdpwssd with the rows' two scales (half the vpdpwssd of one per word: the 16-token kernel
 * 5-10% faster, build/bench/kernels --small-batch --type q6_kx16 --threads 1). */
AVX512 static inline __attribute__((always_inline)) void k6_group_tile(int64_t nb, const void *w, int64_t g,
                                                                       const uint8_t *xq, size_t xq_stride,
                                                                       float *y, int64_t n_out, const int nt) {
    const __m512i c32 = _mm512_set1_epi8(32);
    __m512 acc[K6_TILE][8];
    for (int t = 0; t < nt; t++)
        for (int k = 0; k < 8; k++) acc[t][k] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const struct k6_parts p = k6_sb(w, nb, g, i);
        /* K6_PREFETCH_SB super-blocks ahead, a part in each lane pass below (past the matrix's
         * end near its last group: lines nobody reads; a prefetch never faults) */
        const char *pf = (const char *)p.ql + K6_PREFETCH_SB * K6_SB;
        /* scales s and s + 2 of the 16 rows as the int16 pair [scale s, scale s + 2] of each
         * int32 lane: scp[s] for s = 4q + h, h < 2 (the scales of words 8j + k and 8j + 8 + k,
         * j = 2q, in lane pass k with k / 4 = h) */
        __m512i scp[QK_K / 32];
#define K6_SCALE16(s) _mm512_cvtepu16_epi32(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p.sc + 16 * (s)))))
#pragma GCC unroll 8
        for (int q = 0; q < QK_K / 32; q++) {
            const int s0 = 4 * (q / 2) + q % 2;
            scp[q] = _mm512_or_si512(K6_SCALE16(s0), _mm512_slli_epi32(K6_SCALE16(s0 + 2), 16));
        }
#undef K6_SCALE16
        /* per token: -32 * (the sum of each word's 4 activations), and d_w * d_x of the 16 rows */
        int32_t neg[K6_TILE][QK_K / 4];
        __m512 dwx[K6_TILE];
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p.d));
        for (int t = 0; t < nt; t++) {
            const block_q8_K *x = (const block_q8_K *)(xq + (size_t)t * xq_stride) + i;
#pragma GCC unroll 4
            for (int m = 0; m < 4; m++) {
                const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c32, _mm512_loadu_si512(x->qs + 64 * m));
                _mm512_storeu_si512(neg[t] + 16 * m, _mm512_sub_epi32(_mm512_setzero_si512(), s));
            }
            dwx[t] = _mm512_mul_ps(dw, _mm512_set1_ps(x->d));
        }
#pragma GCC unroll 1
        for (int k = 0; k < 8; k++) {
#pragma GCC unroll 7
            for (int q = 0; q < K6_PREFETCH_LINES; q++) _mm_prefetch(pf + (size_t)(K6_PREFETCH_LINES * k + q) * 64, _MM_HINT_T1);
            __m512i lv[8];
            k6_levels(&p, k, lv);
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                const int8_t *xs = ((const block_q8_K *)(xq + (size_t)t * xq_stride))[i].qs;
                __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int j = 0; j < 8; j += 2) { /* exact integer sums: the order does not matter */
                    const __m512i p0 = dpbusd_bcst(_mm512_set1_epi32(neg[t][8 * j + k]), lv[j], xs + 4 * (8 * j + k));
                    const __m512i p1 = dpbusd_bcst(_mm512_set1_epi32(neg[t][8 * j + 8 + k]), lv[j + 1], xs + 4 * (8 * j + 8 + k));
                    /* both products fit int16: one int16 pair per lane, one vpdpwssd */
                    const __m512i pp = _mm512_mask_blend_epi16(0xAAAAAAAA, p0, _mm512_slli_epi32(p1, 16));
                    if (j & 2) s1 = _mm512_dpwssd_epi32(s1, pp, scp[2 * (j / 2) + k / 4]);
                    else s0 = _mm512_dpwssd_epi32(s0, pp, scp[2 * (j / 2) + k / 4]);
                }
                acc[t][k] = _mm512_fmadd_ps(dwx[t], _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), acc[t][k]);
            }
        }
    }
    for (int t = 0; t < nt; t++) { /* fold8: (l0 + l4) + (l2 + l6), (l1 + l5) + (l3 + l7) */
        __m512 s[4];
        for (int k = 0; k < 4; k++) s[k] = _mm512_add_ps(acc[t][k], acc[t][k + 4]);
        _mm512_storeu_ps(y + t * n_out, _mm512_add_ps(_mm512_add_ps(s[0], s[2]), _mm512_add_ps(s[1], s[3])));
    }
}

AVX512 void q6kx16_rows(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const void *xq,
                        size_t xq_stride, int64_t n_tok, float *y) {
    const int64_t nb = n_in / QK_K, full = n_out / Q8X16_ROWS * Q8X16_ROWS;
    ASSERT(r0 % Q8X16_ROWS == 0 && (r1 % Q8X16_ROWS == 0 || r1 == n_out) && r1 <= n_out);
    const int64_t g1 = (r1 < full ? r1 : full) / Q8X16_ROWS;
    kx16_groups(k6_group_tile, K6_TILE, nb, w, r0 / Q8X16_ROWS, g1, xq, xq_stride, n_tok, y, n_out);
    /* the tail rows are GGUF rows: the type's own kernel, whose numbers are dot_q6_K's */
    const size_t rb = (size_t)nb * sizeof(block_q6_K);
    quant_vec_dot_fn dot = quant_get_vec_dot(simd_level_best(), GGML_TYPE_Q6_K);
    for (int64_t r = r0 > full ? r0 : full; r < r1; r++)
        for (int64_t t = 0; t < n_tok; t++)
            y[t * n_out + r] = dot(n_in, (const uint8_t *)w + (size_t)r * rb, (const uint8_t *)xq + (size_t)t * xq_stride);
}

/* ---- Q6_K on AMX ----------------------------------------------------------------------- */

/* dot_q6_K keeps 8 float lanes per row, lane k the integer sum of words 8j + k (j < 8) under
 * their 16-element sub-blocks' signed scales, so a super-block's dots leave the tiles lane by
 * lane: per lane, a tile sums its 32 elements for 16 tokens x 16 rows. Each weight is taken as
 * v = scale * (q - 32), |v| <= 4096, split as v = 128 h + l (l in [-64, 63], h in [-32, 32]):
 * two C tiles (tdpbssd, signed x signed) sum the l and the h products, and the lane's integer is
 * 128 h + l exactly. Then the vector kernel's fma per lane and its fold8, so the numbers are
 * dot_q6_K's. A group's super-blocks are made into B tiles once (8 KB each, in the caller's
 * scratch) for all the tiles of tokens, taken two tiles at a time, which share each lane's B
 * tiles; the activations come from q6kx16_amx_put, each lane's 32 bytes of a token in one piece.
 * The tiles bound it: per super-block and tile of tokens, 16 tdpbssd and 16 tile stores (Q4_K's
 * kernel: 8 and 2), about 1.5x the vector kernel at 256 tokens (build/bench/kernels
 * --small-batch --type q6_kx16 --threads 1: 64 tokens, 1.2x). */
#define K6_AMX_B 8192   /* a super-block's B tiles: [lane][l, h][word j][16 rows x 4 bytes] */

void q6kx16_amx_put(const void *xq, int64_t t, int64_t n_in, void *amx) {
    const int64_t nb = n_in / QK_K;
    const block_q8_K *x = xq;
    const int tt = (int)(t % AMX_TOKENS);
    for (int64_t i = 0; i < nb; i++) {
        struct kx16_amx_act *a = kx16_amx_act(amx, nb, t / AMX_TOKENS, i);
        for (int k = 0; k < 8; k++)
            for (int j = 0; j < 8; j++) memcpy(a->lanes[k][tt] + 4 * j, x[i].qs + 32 * j + 4 * k, 4);
        a->d[tt] = x[i].d;
    }
}

/* Super-block p of a group as B tiles into out (K6_AMX_B bytes, 64-byte aligned). */
AMX static void k6_amx_build(const struct k6_parts *p, uint8_t *out) {
    const __m512i c32 = _mm512_set1_epi8(32), c64 = _mm512_set1_epi16(64), m127 = _mm512_set1_epi16(127),
                  bytes4 = _mm512_set1_epi32(0x01010101);
    __m512i sc[QK_K / 16][2]; /* scale s of each row in the 4 int16 of its word: rows 0-7, 8-15 */
    for (int s = 0; s < QK_K / 16; s++) {
        const __m512i b4 = _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p->sc + 16 * s))), bytes4);
        sc[s][0] = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(b4));
        sc[s][1] = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(b4, 1));
    }
    for (int k = 0; k < 8; k++) {
        __m512i lv[8];
        k6_levels(p, k, lv);
        for (int j = 0; j < 8; j++) {
            const __m512i q = _mm512_sub_epi8(lv[j], c32);
            __m256i l[2], h[2];
            for (int half = 0; half < 2; half++) {
                const __m512i v = _mm512_mullo_epi16(
                    _mm512_cvtepi8_epi16(half ? _mm512_extracti64x4_epi64(q, 1) : _mm512_castsi512_si256(q)),
                    sc[2 * j + k / 4][half]);
                const __m512i lo = _mm512_sub_epi16(_mm512_and_si512(_mm512_add_epi16(v, c64), m127), c64);
                l[half] = _mm512_cvtepi16_epi8(lo);
                h[half] = _mm512_cvtepi16_epi8(_mm512_srai_epi16(_mm512_sub_epi16(v, lo), 7));
            }
            _mm512_store_si512(out + (size_t)(2 * k) * 512 + 64 * j, _mm512_inserti64x4(_mm512_castsi256_si512(l[0]), l[1], 1));
            _mm512_store_si512(out + (size_t)(2 * k + 1) * 512 + 64 * j, _mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1));
        }
    }
}

/* Lane k's sums s (l, h) of super-block i (dwx: its d_w * d_x per token) into the 16 tokens'
 * acc[t][k]: k6_group_tile's fma. */
AMX static inline __attribute__((always_inline)) void k6_amx_fold(const int32_t s[2][AMX_TOKENS][Q8X16_ROWS],
                                                                  const __m512 dwx[AMX_TOKENS], int k, int64_t i,
                                                                  __m512 acc[AMX_TOKENS][8]) {
#pragma GCC unroll 4
    for (int t = 0; t < AMX_TOKENS; t++) {
        const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(s[1][t]), 7), _mm512_load_si512(s[0][t]));
        acc[t][k] = _mm512_fmadd_ps(dwx[t], _mm512_cvtepi32_ps(sum), i ? acc[t][k] : _mm512_setzero_ps());
    }
}

/* Group g (its super-blocks as B tiles at b) against n (1 or 2) tiles of 16 tokens (their
 * activations from tile t0 of amx) into y[t * n_out + l]. Lane by lane, the two tiles sharing
 * the lane's B tiles; each lane's fold runs after the next lane's tile instructions are issued
 * (its sums in the other of two buffers), before their stores. */
AMX static inline __attribute__((always_inline)) void k6_amx_group_tiles(int64_t nb, const void *w, int64_t g,
                                                                         const uint8_t *b, const void *amx, int64_t t0,
                                                                         const int n, float *y, int64_t n_out) {
    __m512 acc[2][AMX_TOKENS][8] __attribute__((aligned(64)));
    int32_t sums[2][2][2][AMX_TOKENS][Q8X16_ROWS] __attribute__((aligned(64))); /* [lane % 2][tile][l, h] */
    __m512 dwx[2][2][AMX_TOKENS]; /* [super-block % 2][tile][token]: d_w * d_x */
    const struct kx16_amx_act *x[2];
    for (int64_t i = 0; i < nb; i++) {
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)k6_sb(w, nb, g, i).d));
        for (int h = 0; h < n; h++) {
            x[h] = kx16_amx_act(amx, nb, t0 + h, i);
            for (int t = 0; t < AMX_TOKENS; t++) dwx[i % 2][h][t] = _mm512_mul_ps(dw, _mm512_set1_ps(x[h]->d[t]));
        }
        const uint8_t *bi = b + (size_t)i * K6_AMX_B;
        for (int k = 0; k < 8; k++) {
            TILE(_tile_zero, T_LO0);
            TILE(_tile_zero, T_HI0);
            TILE(_tile_loadd, T_BL, bi + (size_t)(2 * k) * 512, 64);
            TILE(_tile_loadd, T_BH, bi + (size_t)(2 * k + 1) * 512, 64);
            TILE(_tile_loadd, T_A0, x[0]->lanes[k], 32);
            TILE(_tile_dpbssd, T_LO0, T_A0, T_BL);
            TILE(_tile_dpbssd, T_HI0, T_A0, T_BH);
            if (n > 1) {
                TILE(_tile_zero, T_LO1);
                TILE(_tile_zero, T_HI1);
                TILE(_tile_loadd, T_A1, x[1]->lanes[k], 32);
                TILE(_tile_dpbssd, T_LO1, T_A1, T_BL);
                TILE(_tile_dpbssd, T_HI1, T_A1, T_BH);
            }
            if (k > 0 || i > 0) { /* the lane before: k - 1 of this super-block, or 7 of the last */
                const int64_t pi = k > 0 ? i : i - 1;
                for (int h = 0; h < n; h++) k6_amx_fold(sums[(k + 1) % 2][h], dwx[pi % 2][h], (k + 7) % 8, pi, acc[h]);
            }
            TILE(_tile_stored, T_LO0, sums[k % 2][0][0], 64);
            TILE(_tile_stored, T_HI0, sums[k % 2][0][1], 64);
            if (n > 1) {
                TILE(_tile_stored, T_LO1, sums[k % 2][1][0], 64);
                TILE(_tile_stored, T_HI1, sums[k % 2][1][1], 64);
            }
        }
    }
    for (int h = 0; h < n; h++) {
        k6_amx_fold(sums[1][h], dwx[(nb - 1) % 2][h], 7, nb - 1, acc[h]);
        for (int t = 0; t < AMX_TOKENS; t++) { /* k6_group_tile's fold8 */
            __m512 f[4];
            for (int k = 0; k < 4; k++) f[k] = _mm512_add_ps(acc[h][t][k], acc[h][t][k + 4]);
            _mm512_storeu_ps(y + (size_t)(h * AMX_TOKENS + t) * (size_t)n_out,
                             _mm512_add_ps(_mm512_add_ps(f[0], f[2]), _mm512_add_ps(f[1], f[3])));
        }
    }
}

AMX void q6kx16_rows_amx(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const void *xq,
                         size_t xq_stride, const void *amx, void *scratch, int64_t n_tok, float *y) {
    const int64_t nb = n_in / QK_K, full = n_out / Q8X16_ROWS * Q8X16_ROWS;
    ASSERT(r0 % Q8X16_ROWS == 0 && (r1 % Q8X16_ROWS == 0 || r1 == n_out) && r1 <= n_out);
    ASSERT((uintptr_t)scratch % 64 == 0 && (size_t)nb * K6_AMX_B <= Q8X16_AMX_SCRATCH_BYTES(n_in));
    const int64_t g1 = (r1 < full ? r1 : full) / Q8X16_ROWS, n_tiles = n_tok / AMX_TOKENS;
    if (n_tiles > 0 && r0 / Q8X16_ROWS < g1) {
        /* C: 16 x 16 int32; A: 16 tokens x 32 bytes; B: 8 x 64 bytes */
        static const int tile_rows[8] = {AMX_TOKENS, AMX_TOKENS, AMX_TOKENS, AMX_TOKENS, AMX_TOKENS, AMX_TOKENS, 8, 8},
                         tile_colsb[8] = {64, 64, 64, 64, 32, 32, 64, 64};
        amx_configure(tile_rows, tile_colsb);
        for (int64_t g = r0 / Q8X16_ROWS; g < g1; g++) {
            for (int64_t i = 0; i < nb; i++) {
                const struct k6_parts p = k6_sb(w, nb, g, i);
                k6_amx_build(&p, (uint8_t *)scratch + (size_t)i * K6_AMX_B);
            }
            float *yg = y + g * Q8X16_ROWS;
            int64_t k = 0;
            for (; k + 1 < n_tiles; k += 2)
                k6_amx_group_tiles(nb, w, g, scratch, amx, k, 2, yg + k * AMX_TOKENS * n_out, n_out);
            if (k < n_tiles) k6_amx_group_tiles(nb, w, g, scratch, amx, k, 1, yg + k * AMX_TOKENS * n_out, n_out);
        }
        _tile_release(); /* the thread's tile state back to its initial (cheap to save) state */
    }
    kx16_amx_rest(q6kx16_rows, n_in, n_out, w, r0, r1, xq, xq_stride, n_tiles * AMX_TOKENS, n_tok, y);
}
