/* kquant_avx512.c: AVX-512 VNNI kernels of the Q4_K_M weight types, Q4_K and Q6_K (against Q8_K
 * activations): the one-row dot, the 4-token dot4 (one weight row decoded once for four tokens),
 * the multi-row dotr of decode steps (QUANT_DOT_WROWS weight rows against one token, the rows
 * 16 KB ahead prefetched into L2), and for Q4_K batches kquant_gemm_q4_K_rows (tiles of 4 rows x 4
 * tokens, tokens in blocks that stay in L2). The kernels are registered as
 * quant_kernels_avx512_k (kernels.h), looked up before quant_kernels_avx512 (which has none for
 * these two types).
 *
 * Every kernel here returns bit for bit the scalar kernel of quant.c, i.e. the reference's
 * orders:
 *   Q4_K: per super-block the integers A = sum_j sc_j * (q . q8 over sub-block j) and
 *     M = sum_j m_j * (bsums of sub-block j), then a = fma((float)A, d_w * d_x, a) and
 *     m = fma((float)M, dmin_w * d_x, m) in one float chain each; the result a - m.
 *   Q6_K: 8 lanes, lane k the integer sum over groups g of sc[2g + k/4] * (q . q8 over elements
 *     32g + 4k .. +3) (levels q - 32), lane_k = fma(d_w * d_x, (float)lane, lane_k) super-block
 *     after super-block, then hsum_ps.
 * Integer sums do not depend on the order they are added in, so the SIMD code only has to form
 * the same integers before each float step. Four weight rows (or four tokens) share the
 * horizontal reduction of a Q4_K super-block: its A and M of four rows end up side by side in
 * one vector of 8 float lanes [A_0 M_0 A_1 M_1 ...], and one fma steps all eight chains.
 */
#include "math/kernels.h"
#include "math/blocks.h"
#include "math/simd_avx2.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

/* ---- Q4_K ------------------------------------------------------------------------------- */

/* The first 4 bytes of a Q4_K block: its fp16 d and dmin. */
static inline uint32_t k4_d_dmin(const block_q4_K *b) {
    uint32_t u;
    memcpy(&u, b, 4);
    return u;
}

/* A Q4_K super-block decoded: levels of elements 64k..64k+63 (k < 4) as bytes, in element
 * order ([32 low nibbles | 32 high nibbles] of qs[32k..32k+31]), the int16 scale of each pair of
 * products (lanes 0-15 sub-block 2k, 16-31 sub-block 2k+1) and the 8 mins as bytes. */
struct k4_dec {
    __m512i q[4], scale[4];
    uint64_t mn;
};

AVX512 INLINE void k4_decode(const block_q4_K *b, struct k4_dec *o) {
    uint64_t sc;
    k4_scales_mins(b->scales, &sc, &o->mn);
    const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
    const __m512i m4 = _mm512_set1_epi8(0xF);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 32 * k)));
        o->q[k] = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4), m4);
        const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(2 * k))),
                                               _mm256_set1_epi16((short)(2 * k + 1)), 1);
        o->scale[k] = _mm512_permutexvar_epi16(idx, sc16);
    }
}

/* 16 int32 lanes summing to A (the scaled integer dot of the super-block) of levels q and
 * activation block x. */
AVX512 INLINE __m512i k4_sums(const struct k4_dec *w, const block_q8_K *x) {
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m512i p16 = _mm512_maddubs_epi16(w->q[k], _mm512_loadu_si512(x->qs + 64 * k));
        if (k & 1) s1 = _mm512_dpwssd_epi32(s1, p16, w->scale[k]);
        else s0 = _mm512_dpwssd_epi32(s0, p16, w->scale[k]);
    }
    return _mm512_add_epi32(s0, s1);
}

/* The 8 activation sums of 32 elements (bsums[2j] + bsums[2j+1]) as int16 (|.| <= 4064). */
AVX512 INLINE __m128i k4_xsums(const block_q8_K *x) {
    __m256i s = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x->bsums), _mm256_set1_epi16(1));
    return _mm256_cvtepi32_epi16(s);
}

/* Four units u (rows or tokens): a[u] the 16 lanes of A_u, mm 16 int32 lanes whose 128-bit lane
 * u sums to M_u. Returns [A_0 M_0 A_1 M_1 A_2 M_2 A_3 M_3] as floats (exact integers). */
AVX512 INLINE __m256 k4_reduce4(const __m512i a[4], __m512i mm) {
    /* 128-bit lanes: [a0.0+a0.2, a0.1+a0.3, a1.0+a1.2, a1.1+a1.3], likewise a2/a3 */
    __m512i a01 = _mm512_add_epi32(_mm512_shuffle_i64x2(a[0], a[1], 0x44), _mm512_shuffle_i64x2(a[0], a[1], 0xEE));
    __m512i a23 = _mm512_add_epi32(_mm512_shuffle_i64x2(a[2], a[3], 0x44), _mm512_shuffle_i64x2(a[2], a[3], 0xEE));
    /* 128-bit lane u: four partial sums of A_u */
    __m512i a4 = _mm512_add_epi32(_mm512_shuffle_i64x2(a01, a23, 0x88), _mm512_shuffle_i64x2(a01, a23, 0xDD));
    /* per 128-bit lane [A A M M] */
    __m512i t = _mm512_add_epi32(_mm512_unpacklo_epi64(a4, mm), _mm512_unpackhi_epi64(a4, mm));
    t = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_CDAB));
    const __m512i pick = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm256_cvtepi32_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi32(pick, t)));
}

/* out[u] = a_u - m_u from the 8 chains [a_0 m_0 a_1 m_1 ...]. */
AVX512 INLINE void k4_finish4(__m256 acc, float *out) {
    float l[8];
    _mm256_storeu_ps(l, acc);
    for (int u = 0; u < 4; u++) out[u] = l[2 * u] - l[2 * u + 1];
}

AVX512 static float dot_q4_K(int64_t n, const void *w, const void *x) {
    const block_q4_K *a = w;
    const block_q8_K *b = x;
    float fa = 0, fm = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        struct k4_dec dec;
        k4_decode(&a[i], &dec);
        int A = _mm512_reduce_add_epi32(k4_sums(&dec, &b[i]));
        int M = hsum_epi32(k4_mins_dot(dec.mn, b[i].bsums));
        fa = fmaf((float)A, h2f(a[i].d) * b[i].d, fa);
        fm = fmaf((float)M, h2f(a[i].dmin) * b[i].d, fm);
    }
    return fa - fm;
}

/* One weight row, four tokens (x_stride bytes apart): the row decoded once per super-block. */
AVX512 static void dot4_q4_K(int64_t n, const void *w, const void *x, size_t x_stride, float *out) {
    const block_q4_K *a = w;
    const block_q8_K *b[QUANT_DOT_ROWS];
    for (int t = 0; t < QUANT_DOT_ROWS; t++) b[t] = (const block_q8_K *)((const uint8_t *)x + t * x_stride);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        struct k4_dec dec;
        k4_decode(&a[i], &dec);
        __m512i s[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) s[t] = k4_sums(&dec, &b[t][i]);
        __m512i xs = _mm512_castsi128_si512(k4_xsums(&b[0][i]));
        xs = _mm512_inserti32x4(xs, k4_xsums(&b[1][i]), 1);
        xs = _mm512_inserti32x4(xs, k4_xsums(&b[2][i]), 2);
        xs = _mm512_inserti32x4(xs, k4_xsums(&b[3][i]), 3);
        __m512i mm = _mm512_madd_epi16(_mm512_cvtepu8_epi16(_mm256_set1_epi64x((long long)dec.mn)), xs);
        __m256 dd = _mm256_cvtph_ps(_mm_set1_epi32((int)k4_d_dmin(&a[i])));
        __m256 dx = _mm256_setr_ps(b[0][i].d, b[0][i].d, b[1][i].d, b[1][i].d, b[2][i].d, b[2][i].d, b[3][i].d, b[3][i].d);
        acc = _mm256_fmadd_ps(k4_reduce4(s, mm), _mm256_mul_ps(dd, dx), acc);
    }
    k4_finish4(acc, out);
}

/* The multi-row kernels walk QUANT_DOT_WROWS rows side by side, which the hardware prefetcher
 * follows badly (see quant_avx512.c). Rows of a matrix are contiguous, so a group of
 * QUANT_DOT_WROWS rows is one run of QUANT_DOT_WROWS * row bytes: super-block step i of a group
 * fetches the i-th share of a later group (`ahead`, from dotr_ahead), one line per 64 bytes of
 * the share (a share that starts mid-line leaves its last line to the next step), into L2
 * (prefetcht1): into L1 a prefetch holds one of the core's few L1 miss buffers until its line
 * arrives, and the stream is slower. Distances from 12 to 32 KB stream alike, shorter ones and
 * one prefetch per 128 bytes slower (build/bench/kernels --small-batch --type q4_k --threads 2:
 * the 2048- and 5632-wide cases). */
AVX512 INLINE void prefetch_rows(const uint8_t *ahead, int64_t i, size_t block_bytes) {
    const uint8_t *p = ahead + (size_t)i * QUANT_DOT_WROWS * block_bytes;
#pragma GCC unroll 16
    for (size_t off = 0; off < QUANT_DOT_WROWS * block_bytes; off += 64) _mm_prefetch((const char *)p + off, _MM_HINT_T1);
}

/* How far ahead the multi-row kernels prefetch: at least DOTR_PREFETCH_BYTES, in whole groups
 * (one group, 4.5 KB of 2048-wide Q4_K rows, is too close to hide the memory's latency). */
#define DOTR_PREFETCH_BYTES 16384
static inline const uint8_t *dotr_ahead(const void *w, size_t w_stride) {
    const size_t group = QUANT_DOT_WROWS * w_stride;
    return (const uint8_t *)w + (DOTR_PREFETCH_BYTES + group - 1) / group * group;
}

/* The scales and mins of four Q4_K super-blocks at once. v: 128-bit lane r the first 16 bytes of
 * block r (d and dmin, then the 12 scale bytes u0 u1 u2 as dwords 1-3). Returns, per 128-bit
 * lane, the bytes [sc0..sc7 mn0..mn7] (k4_scales_mins for four blocks in six instructions):
 * sc0-3 = u0 & 63, sc4-7 = (u2 & 15) | ((u0 >> 2) & 0x30), mn0-3 = u1 & 63,
 * mn4-7 = ((u2 >> 4) & 15) | ((u1 >> 2) & 0x30), per byte. */
AVX512 INLINE __m512i k4_scales_mins4(__m512i v) {
    const __m512i lo_mask = _mm512_set4_epi32(0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f);
    const __m512i hi_mask = _mm512_set4_epi32(0x30303030, 0, 0x30303030, 0);
    __m512i x = _mm512_shuffle_epi32(v, _MM_SHUFFLE(3, 2, 3, 1)); /* [u0 u2 u1 u2] */
    __m512i y = _mm512_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 1, 1)); /* [u0 u0 u1 u1] */
    x = _mm512_mask_srli_epi32(x, 0x8888, x, 4);
    return _mm512_ternarylogic_epi32(_mm512_srli_epi32(y, 2), hi_mask, _mm512_and_si512(x, lo_mask), 0xEA); /* (a & b) | c */
}

/* QUANT_DOT_WROWS (4) weight rows w_stride bytes apart, one token. Fewer instructions per
 * super-block than k4_decode + k4_sums per row (which keeps a core well below the memory's
 * speed): the four rows' scales and mins decoded together
 * (k4_scales_mins4); the levels of 64 bytes of qs unpacked at once (the activations rearranged
 * to match, once for the four rows); vpdpbusd for the products, which fit int16 in groups of
 * four, so vpackssdw pairs two such vectors and one vpdpwssd applies both their scales. Only
 * AVX-512 F/BW/VL/DQ/VNNI (the level's features; no VBMI). */
AVX512 static void dotr_q4_K(int64_t n, const void *w, size_t w_stride, const void *x, float *out) {
    _Static_assert(QUANT_DOT_WROWS == 4, "dotr_q4_K reduces four rows at a time");
    const block_q4_K *a[4];
    const block_q8_K *b = x;
    for (int r = 0; r < 4; r++) a[r] = (const block_q4_K *)((const uint8_t *)w + r * w_stride);
    const uint8_t *ahead = dotr_ahead(w, w_stride);
    const __m512i m4 = _mm512_set1_epi8(0xF);
    /* vpshufb controls of the scales of packs(P0, P1) and packs(P2, P3) (see below), from a row's
     * [sc0..sc7 mn0..mn7] in every 128-bit lane: in lane h, int16 lanes 0-3 scale e, 4-7 scale
     * e + 1, e = 0 for h < 2, else 2 (+4 for P2, P3), high bytes zeroed */
    const __m512i pick_sc01 = _mm512_set_epi64(0x8003800380038003LL, 0x8002800280028002LL, 0x8003800380038003LL, 0x8002800280028002LL,
                                               0x8001800180018001LL, 0x8000800080008000LL, 0x8001800180018001LL, 0x8000800080008000LL);
    const __m512i pick_sc23 = _mm512_add_epi16(pick_sc01, _mm512_set1_epi16(4));
    const __m512i pick_d = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_rows(ahead, i, sizeof(block_q4_K));
        __m512i head = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)&a[0][i]));
        head = _mm512_inserti32x4(head, _mm_loadu_si128((const __m128i *)&a[1][i]), 1);
        head = _mm512_inserti32x4(head, _mm_loadu_si128((const __m128i *)&a[2][i]), 2);
        head = _mm512_inserti32x4(head, _mm_loadu_si128((const __m128i *)&a[3][i]), 3);
        const __m512i scmn = k4_scales_mins4(head);
        /* The activations in the order of the nibbles of 64 bytes of qs: low nibbles of qs[0..63]
         * are elements 0-31 and 64-95, high nibbles 32-63 and 96-127 (likewise +128). */
        __m512i xr[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const int8_t *xs = b[i].qs + 128 * (k / 2) + 32 * (k % 2);
            xr[k] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)xs)),
                                       _mm256_loadu_si256((const __m256i *)(xs + 64)), 1);
        }
        /* row r's 128-bit lane of scmn, four times (immediates: -O1 builds do not fold r * 0x55) */
        const __m512i sc_row[4] = {_mm512_shuffle_i32x4(scmn, scmn, 0x00), _mm512_shuffle_i32x4(scmn, scmn, 0x55),
                                   _mm512_shuffle_i32x4(scmn, scmn, 0xAA), _mm512_shuffle_i32x4(scmn, scmn, 0xFF)};
        __m512i s[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const __m512i sc = sc_row[r];
            const __m512i l0 = _mm512_loadu_si512(a[r][i].qs), l1 = _mm512_loadu_si512(a[r][i].qs + 64);
            /* P_k: int32 lanes of 4 products each, lanes 0-7 one sub-block, 8-15 another:
             * P0 sub-blocks 0 | 2, P1 1 | 3, P2 4 | 6, P3 5 | 7 (|P| <= 4 * 15 * 128: int16) */
            const __m512i z = _mm512_setzero_si512();
            __m512i p0 = _mm512_dpbusd_epi32(z, _mm512_and_si512(l0, m4), xr[0]);
            __m512i p1 = _mm512_dpbusd_epi32(z, _mm512_and_si512(_mm512_srli_epi16(l0, 4), m4), xr[1]);
            __m512i p2 = _mm512_dpbusd_epi32(z, _mm512_and_si512(l1, m4), xr[2]);
            __m512i p3 = _mm512_dpbusd_epi32(z, _mm512_and_si512(_mm512_srli_epi16(l1, 4), m4), xr[3]);
            /* packs: 128-bit lane h = [4 lanes of P0 | 4 of P1]: sub-blocks 0, 1 (h < 2) or 2, 3 */
            __m512i t = _mm512_dpwssd_epi32(z, _mm512_packs_epi32(p0, p1), _mm512_shuffle_epi8(sc, pick_sc01));
            s[r] = _mm512_dpwssd_epi32(t, _mm512_packs_epi32(p2, p3), _mm512_shuffle_epi8(sc, pick_sc23));
        }
        const __m512i m16 = _mm512_unpackhi_epi8(scmn, _mm512_setzero_si512()); /* lane r: row r's mins as int16 */
        __m512i mm = _mm512_madd_epi16(m16, _mm512_broadcast_i32x4(k4_xsums(&b[i])));
        __m256 dd = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi32(pick_d, head)));
        acc = _mm256_fmadd_ps(k4_reduce4(s, mm), _mm256_mul_ps(dd, _mm256_set1_ps(b[i].d)), acc);
    }
    k4_finish4(acc, out);
}

/* Tokens per pass of kquant_gemm_q4_K_rows: their activations (292 bytes per 256 inputs) stay in
 * L2 while every row of the range passes over them. */
#define GEMM_TOKEN_BLOCK 32

/* The 16 int32 vectors v[u] (u = 4t + r) reduced: lane 4r + t of the result is the sum of v[4t + r]. */
AVX512 INLINE __m512i reduce16(const __m512i v[16]) {
    __m512i l1[8], l2[4];
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) /* 128-bit lanes [a.0+a.2, a.1+a.3, b.0+b.2, b.1+b.3] */
        l1[p] = _mm512_add_epi32(_mm512_shuffle_i64x2(v[2 * p], v[2 * p + 1], 0x44),
                                 _mm512_shuffle_i64x2(v[2 * p], v[2 * p + 1], 0xEE));
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) /* 128-bit lane i: the partials of unit 4q + i */
        l2[q] = _mm512_add_epi32(_mm512_shuffle_i64x2(l1[2 * q], l1[2 * q + 1], 0x88),
                                 _mm512_shuffle_i64x2(l1[2 * q], l1[2 * q + 1], 0xDD));
    /* per 128-bit lane i: [a0+a2, b0+b2, a1+a3, b1+b3] of units a = i, b = 4 + i (c, d: 8 + i, 12 + i) */
    __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(l2[0], l2[1]), _mm512_unpackhi_epi32(l2[0], l2[1]));
    __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(l2[2], l2[3]), _mm512_unpackhi_epi32(l2[2], l2[3]));
    /* lane 4i + j: unit 4j + i */
    return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
}

/* Four partial vectors p[t] whose 128-bit lane r holds four partials of unit (r, t): lane 4r + t
 * of the result is their sum (the last two steps of reduce16). */
AVX512 INLINE __m512i reduce4x4(const __m512i p[4]) {
    __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(p[0], p[1]), _mm512_unpackhi_epi32(p[0], p[1]));
    __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2], p[3]), _mm512_unpackhi_epi32(p[2], p[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
}

/* Four weight rows a[r] against four tokens b[t]: out[r][t] (y + t * n_out + r). Per 64-element
 * chunk the rows' levels and scales are decoded once for all four tokens and the tokens'
 * activations loaded once for all four rows; the 16 chains of A (and of M) step with one fma.
 * grouped = 0: the scalar dot of quant.c bit for bit (one step per super-block);
 * grouped = 1: quant_dot_q4_K_gemm bit for bit (the reference's GEMM: a step per chunk). */
AVX512 INLINE void gemm_tile_q4_K(int64_t nb, const block_q4_K *const a[4], const block_q8_K *const b[4], float *y,
                                  int64_t n_out, const int grouped) {
    const __m512i m4 = _mm512_set1_epi8(0xF);
    const __m512i pick_d = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
    const __m512i pick_m = _mm512_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3, 5, 5, 5, 5, 7, 7, 7, 7);
    /* grouped: lane 4r + t picks int32 pair k of row r's mins (lane 4r + k) and of token t's sums (4t + k) */
    const __m512i pick_mn = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
    const __m512i pick_xs = _mm512_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12);
    __m512 acc_a = _mm512_setzero_ps(), acc_m = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m512i sc16[4];
        uint64_t mn[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            uint64_t sc;
            k4_scales_mins(a[r][i].scales, &sc, &mn[r]);
            sc16[r] = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
        }
        /* the mins of the four rows (128-bit lane r, as int16) */
        const __m512i m16 = _mm512_cvtepu8_epi16(_mm256_setr_epi64x((long long)mn[0], (long long)mn[1], (long long)mn[2], (long long)mn[3]));
        __m128i xs[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) xs[t] = k4_xsums(&b[t][i]);
        __m256 dd = _mm256_cvtph_ps(_mm_setr_epi32((int)k4_d_dmin(&a[0][i]), (int)k4_d_dmin(&a[1][i]),
                                                   (int)k4_d_dmin(&a[2][i]), (int)k4_d_dmin(&a[3][i])));
        __m512 dx = _mm512_broadcast_f32x4(_mm_setr_ps(b[0][i].d, b[1][i].d, b[2][i].d, b[3][i].d));
        const __m512 dwx = _mm512_mul_ps(_mm512_permutexvar_ps(pick_d, _mm512_castps256_ps512(dd)), dx);
        const __m512 dmx = _mm512_mul_ps(_mm512_permutexvar_ps(pick_m, _mm512_castps256_ps512(dd)), dx);
        __m512i xs4 = _mm512_castsi128_si512(xs[0]); /* 128-bit lane t: token t's sums */
        xs4 = _mm512_inserti32x4(xs4, xs[1], 1);
        xs4 = _mm512_inserti32x4(xs4, xs[2], 2);
        xs4 = _mm512_inserti32x4(xs4, xs[3], 3);
        __m512i acc[16];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            if (k == 0 || grouped)
                for (int u = 0; u < 16; u++) acc[u] = _mm512_setzero_si512();
            __m512i x[4];
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) x[t] = _mm512_loadu_si512(b[t][i].qs + 64 * k);
            const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(2 * k))),
                                                   _mm256_set1_epi16((short)(2 * k + 1)), 1);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(a[r][i].qs + 32 * k)));
                __m512i q = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4), m4);
                __m512i scale = _mm512_permutexvar_epi16(idx, sc16[r]);
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++)
                    acc[4 * t + r] = _mm512_dpwssd_epi32(acc[4 * t + r], _mm512_maddubs_epi16(q, x[t]), scale);
            }
            if (grouped) { /* A and M of sub-blocks 2k, 2k + 1 */
                const __m512i kk = _mm512_set1_epi32(k);
                __m512i mk = _mm512_permutexvar_epi32(_mm512_add_epi32(pick_mn, kk), m16);
                __m512i sk = _mm512_permutexvar_epi32(_mm512_add_epi32(pick_xs, kk), xs4);
                acc_a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce16(acc)), dwx, acc_a);
                acc_m = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(mk, sk)), dmx, acc_m);
            }
        }
        if (!grouped) {
            __m512i pm[4];
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) pm[t] = _mm512_madd_epi16(m16, _mm512_broadcast_i32x4(xs[t]));
            acc_a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce16(acc)), dwx, acc_a);
            acc_m = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce4x4(pm)), dmx, acc_m);
        }
    }
    float o[16];
    _mm512_storeu_ps(o, _mm512_sub_ps(acc_a, acc_m));
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < 4; t++) y[t * n_out + r] = o[4 * r + t];
}

AVX512 INLINE void gemm_rows_q4_K(int64_t n_in, const void *w, size_t w_stride, int64_t r0, int64_t r1, const void *xq,
                                  size_t xq_stride, int64_t n_tok, float *y, int64_t n_out, const int grouped) {
    const int64_t nb = n_in / QK_K;
    /* grouped: tokens [0, n_grouped) in whole groups of four take the GEMM order, the rest the GEMV one */
    const int64_t n_grouped = grouped ? n_tok - n_tok % 4 : 0;
    for (int64_t t0 = 0; t0 < n_tok; t0 += GEMM_TOKEN_BLOCK) {
        const int64_t t1 = t0 + GEMM_TOKEN_BLOCK < n_tok ? t0 + GEMM_TOKEN_BLOCK : n_tok;
        for (int64_t r = r0; r < r1; r += 4) {
            const int64_t nr = r1 - r < 4 ? r1 - r : 4;
            const block_q4_K *a[4];
            for (int k = 0; k < 4; k++) a[k] = (const block_q4_K *)((const uint8_t *)w + (size_t)(r + (k < nr ? k : 0)) * w_stride);
            int64_t t = t0;
            if (nr == 4)
                for (; t + 4 <= t1; t += 4) {
                    const block_q8_K *b[4];
                    for (int k = 0; k < 4; k++) b[k] = (const block_q8_K *)((const uint8_t *)xq + (size_t)(t + k) * xq_stride);
                    gemm_tile_q4_K(nb, a, b, y + t * n_out + r, n_out, grouped);
                }
            for (; t < t1; t++) { /* the last tokens of a block, or rows past a multiple of four */
                const void *xt = (const uint8_t *)xq + (size_t)t * xq_stride;
                if (nr == 4 && t >= n_grouped) {
                    float out[4];
                    dotr_q4_K(n_in, a[0], w_stride, xt, out);
                    for (int k = 0; k < 4; k++) y[t * n_out + r + k] = out[k];
                    continue;
                }
                for (int k = 0; k < nr; k++)
                    y[t * n_out + r + k] = t < n_grouped ? quant_dot_q4_K_gemm(n_in, a[k], xt) : dot_q4_K(n_in, a[k], xt);
            }
        }
    }
}

AVX512 void kquant_gemm_q4_K_rows(int64_t n_in, const void *w, size_t w_stride, int64_t r0, int64_t r1, const void *xq,
                                  size_t xq_stride, int64_t n_tok, float *y, int64_t n_out, bool grouped) {
    if (grouped) gemm_rows_q4_K(n_in, w, w_stride, r0, r1, xq, xq_stride, n_tok, y, n_out, 1);
    else gemm_rows_q4_K(n_in, w, w_stride, r0, r1, xq, xq_stride, n_tok, y, n_out, 0);
}

/* ---- Q6_K ------------------------------------------------------------------------------- */

/* A Q6_K super-block decoded: unsigned levels (q + 32, 0..63) of elements 64m..64m+63 and the
 * int16 scale of each pair of products (8 pairs, 16 elements, per scale: scales 4m..4m+3). */
struct q6_dec {
    __m512i q[4], scale[4];
};

/* The levels only (o->q; o->scale untouched). */
AVX512 INLINE void q6_decode_levels(const block_q6_K *b, struct q6_dec *o) {
    const __m512i m4 = _mm512_set1_epi8(0xF), m2 = _mm512_set1_epi8(3);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m512i l = _mm512_loadu_si512(b->ql + 64 * h);
        __m256i hb = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        /* elements 0-63 of the half: low nibbles of ql + qh bits 0-1 | 2-3;
         * elements 64-127: high nibbles + qh bits 4-5 | 6-7 */
        __m512i hz = _mm512_inserti64x4(_mm512_castsi256_si512(hb), _mm256_srli_epi16(hb, 2), 1);
        o->q[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_slli_epi16(_mm512_and_si512(hz, m2), 4));
        o->q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                          _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hz, 4), m2), 4));
    }
}

AVX512 INLINE void q6_decode(const block_q6_K *b, struct q6_dec *o) {
    q6_decode_levels(b, o);
    const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales)));
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        const __m512i idx = _mm512_set_epi16(4 * m + 3, 4 * m + 3, 4 * m + 3, 4 * m + 3, 4 * m + 3, 4 * m + 3, 4 * m + 3, 4 * m + 3,
                                             4 * m + 2, 4 * m + 2, 4 * m + 2, 4 * m + 2, 4 * m + 2, 4 * m + 2, 4 * m + 2, 4 * m + 2,
                                             4 * m + 1, 4 * m + 1, 4 * m + 1, 4 * m + 1, 4 * m + 1, 4 * m + 1, 4 * m + 1, 4 * m + 1,
                                             4 * m, 4 * m, 4 * m, 4 * m, 4 * m, 4 * m, 4 * m, 4 * m);
        o->scale[m] = _mm512_permutexvar_epi16(idx, sc16);
    }
}

/* An activation block as Q6_K's products need it: its 4 chunks and 32 * (pair sums) of each
 * (the "- 32" of the levels, subtracted in int16 as the reference does: |.| <= 16128 + 8192). */
struct q6_x {
    __m512i x[4], off[4];
};

AVX512 INLINE void q6_xload(const block_q8_K *b, struct q6_x *o) {
    const __m512i c32 = _mm512_set1_epi8(32);
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        o->x[m] = _mm512_loadu_si512(b->qs + 64 * m);
        o->off[m] = _mm512_maddubs_epi16(c32, o->x[m]);
    }
}

/* 16 int32 lanes; lane L (and L + 8) belongs to the reference's lane L % 8. */
AVX512 INLINE __m512i q6_sums(const struct q6_dec *w, const struct q6_x *x) {
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        __m512i p16 = _mm512_sub_epi16(_mm512_maddubs_epi16(w->q[m], x->x[m]), x->off[m]);
        if (m & 1) s1 = _mm512_dpwssd_epi32(s1, p16, w->scale[m]);
        else s0 = _mm512_dpwssd_epi32(s0, p16, w->scale[m]);
    }
    return _mm512_add_epi32(s0, s1);
}

/* Two units' 16 lanes folded to the reference's 8 each: [lanes of a | lanes of b] as floats. */
AVX512 INLINE __m512 q6_fold_pair(__m512i a, __m512i b) {
    return _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_shuffle_i64x2(a, b, 0x44), _mm512_shuffle_i64x2(a, b, 0xEE)));
}

/* [d_a * dx_a x 8 | d_b * dx_b x 8] */
AVX512 INLINE __m512 q6_scale_pair(float da, float db) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(da)), _mm256_set1_ps(db), 1);
}

AVX512 INLINE void q6_finish_pair(__m512 acc, float *out) {
    out[0] = hsum_ps(_mm512_castps512_ps256(acc));
    out[1] = hsum_ps(_mm512_extractf32x8_ps(acc, 1));
}

AVX512 static float dot_q6_K(int64_t n, const void *w, const void *x) {
    const block_q6_K *a = w;
    const block_q8_K *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        struct q6_dec dec;
        struct q6_x xs;
        q6_decode(&a[i], &dec);
        q6_xload(&b[i], &xs);
        __m512i s = q6_sums(&dec, &xs);
        __m256i l8 = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(b[i].d * h2f(a[i].d)), _mm256_cvtepi32_ps(l8), acc);
    }
    return hsum_ps(acc);
}

AVX512 static void dot4_q6_K(int64_t n, const void *w, const void *x, size_t x_stride, float *out) {
    const block_q6_K *a = w;
    const block_q8_K *b[QUANT_DOT_ROWS];
    for (int t = 0; t < QUANT_DOT_ROWS; t++) b[t] = (const block_q8_K *)((const uint8_t *)x + t * x_stride);
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t i = 0; i < n / QK_K; i++) {
        struct q6_dec dec;
        q6_decode(&a[i], &dec);
        const float dw = h2f(a[i].d);
        __m512i s[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            struct q6_x xs;
            q6_xload(&b[t][i], &xs);
            s[t] = q6_sums(&dec, &xs);
        }
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++)
            acc[p] = _mm512_fmadd_ps(q6_scale_pair(b[2 * p][i].d * dw, b[2 * p + 1][i].d * dw), q6_fold_pair(s[2 * p], s[2 * p + 1]),
                                     acc[p]);
    }
    q6_finish_pair(acc[0], out);
    q6_finish_pair(acc[1], out + 2);
}

/* Four Q6_K rows, one token. The products go through vpdpbusd on the unsigned levels (q + 32,
 * 0..63): started from -32 * (the sum of each four activations), computed once per super-block
 * for the four rows, each int32 lane ends as the four products of the levels q - 32 (|.| <=
 * 4 * 32 * 128, an int16), which vpdpwssd multiplies by its scale (int32 lanes [scale, 0]: the
 * lane's high int16 is its sign, times 0). Lane L of chunk m holds elements 64m + 4L..+3, the
 * reference's lane L % 8 of group 2m + L / 8 (scale 4m + L / 4): the same integers as q6_sums. */
AVX512 static void dotr_q6_K(int64_t n, const void *w, size_t w_stride, const void *x, float *out) {
    _Static_assert(QUANT_DOT_WROWS == 4, "dotr_q6_K pairs four rows");
    const block_q6_K *a[4];
    const block_q8_K *b = x;
    for (int r = 0; r < 4; r++) a[r] = (const block_q6_K *)((const uint8_t *)w + r * w_stride);
    const uint8_t *ahead = dotr_ahead(w, w_stride);
    const __m512i c32 = _mm512_set1_epi8(32);
    /* vpermw: int16 lane 2L of chunk m = scale 4m + L / 4, lane 2L + 1 zeroed (mask) */
    __m512i pick_sc[4];
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        const long long e = 4 * m;
        pick_sc[m] = _mm512_set_epi64((e + 3) * 0x0000000100000001LL, (e + 3) * 0x0000000100000001LL, (e + 2) * 0x0000000100000001LL,
                                      (e + 2) * 0x0000000100000001LL, (e + 1) * 0x0000000100000001LL, (e + 1) * 0x0000000100000001LL,
                                      e * 0x0000000100000001LL, e * 0x0000000100000001LL);
    }
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_rows(ahead, i, sizeof(block_q6_K));
        __m512i xv[4], neg[4];
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) {
            xv[m] = _mm512_loadu_si512(b[i].qs + 64 * m);
            neg[m] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), c32, xv[m]));
        }
        __m512i s[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            struct q6_dec dec;
            q6_decode_levels(&a[r][i], &dec);
            const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a[r][i].scales)));
            __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int m = 0; m < 4; m++) {
                const __m512i p = _mm512_dpbusd_epi32(neg[m], dec.q[m], xv[m]);
                const __m512i sc = _mm512_maskz_permutexvar_epi16(0x55555555u, pick_sc[m], sc16);
                if (m & 1) s1 = _mm512_dpwssd_epi32(s1, p, sc);
                else s0 = _mm512_dpwssd_epi32(s0, p, sc);
            }
            s[r] = _mm512_add_epi32(s0, s1);
        }
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++)
            acc[p] = _mm512_fmadd_ps(q6_scale_pair(b[i].d * h2f(a[2 * p][i].d), b[i].d * h2f(a[2 * p + 1][i].d)),
                                     q6_fold_pair(s[2 * p], s[2 * p + 1]), acc[p]);
    }
    q6_finish_pair(acc[0], out);
    q6_finish_pair(acc[1], out + 2);
}

const struct quant_kernels quant_kernels_avx512_k = {
    .vec_dot = {[GGML_TYPE_Q4_K] = dot_q4_K, [GGML_TYPE_Q6_K] = dot_q6_K},
    .vec_dot4 = {[GGML_TYPE_Q4_K] = dot4_q4_K, [GGML_TYPE_Q6_K] = dot4_q6_K},
    .vec_dotr = {[GGML_TYPE_Q4_K] = dotr_q4_K, [GGML_TYPE_Q6_K] = dotr_q6_K},
};
