/* Tests of the low-bit weight types Q2_K, Q3_K, IQ4_NL and IQ4_XS (math/lowbit.c and its SIMD
 * kernels): hand-made blocks of known value; the dot products against oracles written here from
 * the block layouts of math/blocks.h and the reference's orders (lowbit.c's header), bit for bit;
 * every SIMD kernel (dot, dot4, dotr) against the scalar one bit for bit, on blocks of raw random
 * bytes (every level and scale value, activations at the int8 extremes); and matmul's reference
 * path taking Q2_K's grouped order for whole groups of four tokens. */
#include "test.h"
#include "math/blocks.h"
#include "math/kernels.h"
#include "math/matmul.h"
#include "math/quant.h"

#include <math.h>
#include <stdlib.h>

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float urand(void) { return (float)(next_u32() >> 8) / (float)(1 << 24) - 0.5f; }

static const enum ggml_type lowbit_types[] = {GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS};

TEST(lowbit_decodes_handmade_blocks) {
    float y[QK_K];
    /* Q2_K: element 128h + 32j + l is bits 2j of qs[32h + l]; sub-block e / 16 */
    block_q2_K q2 = {.d = f32_to_fp16(1.0f), .dmin = f32_to_fp16(0.5f)};
    q2.scales[0] = 0x23;  /* scale 3, min 2 */
    q2.scales[1] = 0x01;  /* scale 1, min 0 */
    q2.scales[2] = 0x10;  /* scale 0, min 1 */
    q2.scales[10] = 0x05; /* scale 5, min 0 */
    q2.qs[0] = 0x0E;      /* element 0: 2, element 32: 3 */
    q2.qs[17] = 0x03;     /* element 17: 3 */
    q2.qs[32] = 0x04;     /* element 160: 1 */
    quant_to_float(GGML_TYPE_Q2_K, &q2, y, QK_K);
    CHECK(y[0] == 5.0f && y[1] == -1.0f && y[17] == 3.0f && y[32] == -0.5f && y[160] == 5.0f && y[161] == 0.0f);

    /* Q3_K: zero scale bytes are scale -32; a clear hmask bit subtracts 4 */
    block_q3_K q3 = {.d = f32_to_fp16(0.5f)};
    q3.scales[0] = 5;      /* sub-block 0: low bits 5 */
    q3.scales[8] = 2;      /* ... high bits 2: 37 - 32 = 5 */
    q3.qs[0] = 1;          /* element 0: 1 | high bit: 1 */
    q3.hmask[0] = 1;
    q3.qs[1] = 1;          /* element 1: 1 - 4 = -3 */
    quant_to_float(GGML_TYPE_Q3_K, &q3, y, QK_K);
    /* element 208 (h 1, plane 2, l 16; sub-block 13, scale -32): level 0 - 4 */
    CHECK(y[0] == 2.5f && y[1] == -7.5f && y[2] == -10.0f && y[208] == 64.0f);
    q3.hmask[16] = 1 << 6; /* element 208's high bit */
    q3.qs[48] = 3 << 4;    /* its low bits: 3 */
    q3.scales[5] = 0xA0;   /* sub-block 13's low bits: 10 */
    q3.scales[9] = 1 << 6; /* ... high bits: 1: 26 - 32 = -6 */
    quant_to_float(GGML_TYPE_Q3_K, &q3, y, QK_K);
    CHECK(y[208] == -9.0f && y[209] == 12.0f);

    /* IQ4_NL: low nibbles elements 0-15, high 16-31, through the grid */
    block_iq4_nl nl = {.d = f32_to_fp16(0.25f)};
    nl.qs[0] = 0xF0;
    nl.qs[1] = 0x08;
    quant_to_float(GGML_TYPE_IQ4_NL, &nl, y, 32);
    CHECK(y[0] == -31.75f && y[16] == 28.25f && y[1] == 0.25f && y[17] == -31.75f);

    /* IQ4_XS: sub-block 3 scale 33 - 32 = 1 (low bits: high nibble of scales_l[1], high bits:
     * bits 6-7 of scales_h); sub-block 0's zero bits: -32 */
    block_iq4_xs xs = {.d = f32_to_fp16(1.0f)};
    xs.scales_l[1] = 0x10;
    xs.scales_h = 2 << 6;
    xs.qs[48] = 0x9C; /* element 96: grid[12] = 53, element 112: grid[9] = 13 */
    quant_to_float(GGML_TYPE_IQ4_XS, &xs, y, QK_K);
    CHECK(y[96] == 53.0f && y[112] == 13.0f && y[0] == 4064.0f && y[97] == -127.0f);
}

/* ---- oracles: levels from the layouts, dots in the documented orders --------------------- */

static int q2_level(const block_q2_K *b, int e) { return (b->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

static int q3_level(const block_q3_K *b, int e) {
    int h = e / 128, j = (e % 128) / 32, l = e % 32;
    return ((b->qs[32 * h + l] >> (2 * j)) & 3) - ((b->hmask[l] >> (4 * h + j)) & 1 ? 0 : 4);
}

static int iq4_value(const uint8_t *qs, int e) { return iq4nl_levels[e < 16 ? qs[e] & 0xF : qs[e - 16] >> 4]; }

static float oracle_q2_K(int64_t n, const block_q2_K *a, const block_q8_K *b, bool grouped) {
    float fa = 0, fm = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        float d = fp16_to_f32(a[i].d) * b[i].d, dmin = fp16_to_f32(a[i].dmin) * b[i].d;
        int A[2] = {0, 0}, M[2] = {0, 0}; /* per 128-element half */
        for (int e = 0; e < QK_K; e++) A[e / 128] += (a[i].scales[e / 16] & 0xF) * q2_level(&a[i], e) * b[i].qs[e];
        for (int j = 0; j < 16; j++) M[j / 8] += (a[i].scales[j] >> 4) * b[i].bsums[j];
        if (grouped) { /* a float step per half */
            for (int h = 0; h < 2; h++) {
                fa = fmaf((float)A[h], d, fa);
                fm = fmaf((float)M[h], dmin, fm);
            }
        } else {
            fa = fmaf((float)(A[0] + A[1]), d, fa);
            fm = fmaf((float)(M[0] + M[1]), dmin, fm);
        }
    }
    return fa - fm;
}

/* 8 lanes: lane k of a super-block sums scale * product over the elements e with e % 32 in
 * 4k..4k+3; lanes folded as hsum_ps. */
static float fold8(const float l[8]) {
    float s[4];
    for (int k = 0; k < 4; k++) s[k] = l[k] + l[k + 4];
    return (s[0] + s[2]) + (s[1] + s[3]);
}

static float oracle_lanes(int64_t n, const void *w, const block_q8_K *b, enum ggml_type ty) {
    float lanes[8] = {0};
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum[8] = {0};
        float d;
        if (ty == GGML_TYPE_Q3_K) {
            const block_q3_K *a = (const block_q3_K *)w + i;
            for (int e = 0; e < QK_K; e++) sum[(e % 32) / 4] += q3k_scale(a->scales, e / 16) * q3_level(a, e) * b[i].qs[e];
            d = b[i].d * fp16_to_f32(a->d);
        } else {
            const block_iq4_xs *a = (const block_iq4_xs *)w + i;
            for (int e = 0; e < QK_K; e++)
                sum[(e % 32) / 4] += iq4xs_scale(a, e / 32) * iq4_value(a->qs + 16 * (e / 32), e % 32) * b[i].qs[e];
            d = fp16_to_f32(a->d) * b[i].d;
        }
        for (int k = 0; k < 8; k++) lanes[k] = fmaf((float)sum[k], d, lanes[k]);
    }
    return fold8(lanes);
}

static float oracle_iq4_nl(int64_t n, const block_iq4_nl *a, const block_q8_0 *b) {
    float s = 0;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        int sum = 0;
        for (int e = 0; e < 32; e++) sum += iq4_value(a[i].qs, e) * b[i].qs[e];
        s = fmaf((float)sum, fp16_to_f32(a[i].d) * fp16_to_f32(b[i].d), s);
    }
    return s;
}

static float oracle(enum ggml_type ty, int64_t n, const void *w, const void *x) {
    switch (ty) {
    case GGML_TYPE_Q2_K: return oracle_q2_K(n, w, x, false);
    case GGML_TYPE_IQ4_NL: return oracle_iq4_nl(n, w, x);
    default: return oracle_lanes(n, w, x, ty);
    }
}

enum { NMAX = 5632, ROWS = 4, XMAX = NMAX / 32 * (int)sizeof(block_q8_0) + NMAX / QK_K * (int)sizeof(block_q8_K) };

/* Activations of type vt: quantized random floats (mode 0), raw random levels in [-127, 127]
 * (mode 1), or only -127 and 127 (mode 2), with bsums to match and random positive scales. */
static void make_x(enum ggml_type vt, uint8_t *x, int64_t n, int mode) {
    if (mode == 0) {
        static float f[NMAX];
        for (int64_t i = 0; i < n; i++) f[i] = urand() * 4;
        quant_from_float(vt, f, x, n);
        return;
    }
    for (int64_t e = 0; e < n; e++) {
        int8_t v = mode == 1 ? (int8_t)(next_u32() % 255 - 127) : (next_u32() & 1) ? 127 : -127;
        if (vt == GGML_TYPE_Q8_K) ((block_q8_K *)x)[e / QK_K].qs[e % QK_K] = v;
        else ((block_q8_0 *)x)[e / 32].qs[e % 32] = v;
    }
    if (vt == GGML_TYPE_Q8_0) {
        for (int64_t i = 0; i < n / 32; i++) ((block_q8_0 *)x)[i].d = f32_to_fp16(0.001f + (float)(next_u32() % 1000) * 1e-5f);
        return;
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        block_q8_K *b = (block_q8_K *)x + i;
        b->d = 0.001f + (float)(next_u32() % 1000) * 1e-5f;
        for (int j = 0; j < QK_K / 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += b->qs[16 * j + l];
            b->bsums[j] = (int16_t)s;
        }
    }
}

/* Weight rows: quantized random floats (mode 0) or raw random bytes with finite fp16 scales. */
static void make_w(enum ggml_type ty, uint8_t *w, int64_t n, int mode) {
    if (mode == 0) {
        static float f[NMAX];
        for (int64_t i = 0; i < n; i++) f[i] = urand() * (float)(1 + i % 7);
        quant_from_float(ty, f, w, n);
        return;
    }
    size_t bytes = ggml_row_size(ty, (uint64_t)n);
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)next_u32();
    size_t bs = ggml_type_info(ty)->size;
    for (int64_t b = 0; b < n / (int64_t)ggml_type_info(ty)->blck; b++) {
        uint16_t d = f32_to_fp16(urand() * 0.01f), dmin = f32_to_fp16(urand() * 0.01f);
        uint8_t *blk = w + (size_t)b * bs;
        if (ty == GGML_TYPE_Q2_K) {
            ((block_q2_K *)blk)->d = d;
            ((block_q2_K *)blk)->dmin = dmin;
        } else if (ty == GGML_TYPE_Q3_K) {
            ((block_q3_K *)blk)->d = d;
        } else {
            memcpy(blk, &d, 2); /* IQ4_NL, IQ4_XS: d leads the block */
        }
    }
}

/* The scalar kernels are the oracles' floats; every SIMD level's dot, dot4 and dotr the scalar
 * kernel's; Q2_K's grouped order the oracle's too. */
TEST(lowbit_kernels_equal_oracles_and_scalar_bit_for_bit) {
    static uint8_t x[ROWS][XMAX];
    static uint8_t w[ROWS][NMAX / QK_K * sizeof(block_iq4_xs) + NMAX / 32 * sizeof(block_iq4_nl)];
    const int64_t k_lengths[] = {256, 512, 2048, 5632}, nl_lengths[] = {32, 96, 160, 2048, 5632};
    int compared = 0, simd_compared = 0;
    for (size_t k = 0; k < sizeof lowbit_types / sizeof *lowbit_types; k++) {
        enum ggml_type ty = lowbit_types[k], vt = quant_vec_dot_type(ty);
        bool nl = ty == GGML_TYPE_IQ4_NL;
        quant_vec_dot_fn scalar = quant_get_vec_dot(SIMD_SCALAR, ty);
        for (size_t li = 0; li < (nl ? 5u : 4u); li++)
            for (int mode = 0; mode < 3; mode++) {
                int64_t n = nl ? nl_lengths[li] : k_lengths[li];
                for (int r = 0; r < ROWS; r++) {
                    make_x(vt, x[r], n, mode);
                    make_w(ty, w[r], n, mode ? 1 : 0);
                }
                float ref[ROWS][ROWS]; /* weight row r . token tk */
                for (int r = 0; r < ROWS; r++)
                    for (int tk = 0; tk < ROWS; tk++) {
                        ref[r][tk] = scalar(n, w[r], x[tk]);
                        float o = oracle(ty, n, w[r], x[tk]);
                        if (o != ref[r][tk] || !isfinite(o))
                            fprintf(stderr, "  %s n=%lld mode %d: scalar %.9g, oracle %.9g\n", ggml_type_info(ty)->name,
                                    (long long)n, mode, ref[r][tk], o);
                        CHECK(o == ref[r][tk] && isfinite(o));
                        if (ty == GGML_TYPE_Q2_K)
                            CHECK(quant_dot_q2_K_gemm(n, w[r], x[tk]) == oracle_q2_K(n, (const void *)w[r], (const void *)x[tk], true));
                        compared++;
                    }
                for (int level = SIMD_AVX2; level < SIMD_LEVEL_COUNT; level++) {
                    if (!simd_level_supported((enum simd_level)level)) continue;
                    const char *ln = simd_level_name((enum simd_level)level);
                    quant_vec_dot_fn dot = quant_get_vec_dot((enum simd_level)level, ty);
                    quant_vec_dot4_fn dot4 = quant_get_vec_dot4((enum simd_level)level, ty);
                    quant_vec_dotr_fn dotr = quant_get_vec_dotr((enum simd_level)level, ty);
                    CHECK(dot && dot != scalar);
                    float out[ROWS];
                    for (int r = 0; r < ROWS; r++)
                        for (int tk = 0; tk < ROWS; tk++) {
                            float v = dot(n, w[r], x[tk]);
                            if (v != ref[r][tk])
                                fprintf(stderr, "  %s %s n=%lld mode %d dot: %.9g scalar %.9g\n", ln, ggml_type_info(ty)->name,
                                        (long long)n, mode, v, ref[r][tk]);
                            CHECK(v == ref[r][tk]);
                            simd_compared++;
                        }
                    for (int r = 0; r < ROWS && dot4; r++) {
                        dot4(n, w[r], x[0], sizeof x[0], out);
                        for (int tk = 0; tk < ROWS; tk++) {
                            if (out[tk] != ref[r][tk])
                                fprintf(stderr, "  %s %s n=%lld mode %d dot4 token %d: %.9g scalar %.9g\n", ln,
                                        ggml_type_info(ty)->name, (long long)n, mode, tk, out[tk], ref[r][tk]);
                            CHECK(out[tk] == ref[r][tk]);
                        }
                    }
                    for (int tk = 0; tk < ROWS && dotr; tk++) {
                        dotr(n, w[0], sizeof w[0], x[tk], out);
                        for (int r = 0; r < ROWS; r++) {
                            if (out[r] != ref[r][tk])
                                fprintf(stderr, "  %s %s n=%lld mode %d dotr row %d: %.9g scalar %.9g\n", ln,
                                        ggml_type_info(ty)->name, (long long)n, mode, r, out[r], ref[r][tk]);
                            CHECK(out[r] == ref[r][tk]);
                        }
                    }
                    if (level == SIMD_AVX512) CHECK(dot4 && dotr);
                }
            }
    }
    CHECK(compared > 100);
    if (!simd_compared) SKIP("this CPU has no SIMD level to compare with scalar");
}

/* matmul's reference path (MATMUL_REFERENCE, what the golden tests run): Q2_K tokens in whole
 * groups of four from the first take the repacked GEMM's order, the rest the GEMV's; the other
 * low-bit types the one order of their kernels, at every token count. */
TEST(lowbit_matmul_reference_path_orders) {
    enum { N_IN = 512, N_OUT = 21, MAX_TOK = 11 };
    static float wf[N_IN * N_OUT], x[MAX_TOK * N_IN], y[MAX_TOK * N_OUT];
    static uint8_t w[N_OUT * N_IN], xq[MAX_TOK][N_IN * 2];
    for (int i = 0; i < N_IN * N_OUT; i++) wf[i] = urand();
    for (int i = 0; i < MAX_TOK * N_IN; i++) x[i] = urand();
    struct compute *c;
    CHECK_EQ_INT(compute_create(&c, 2, MAX_TOK, N_IN), 0);
    for (size_t k = 0; k < sizeof lowbit_types / sizeof *lowbit_types; k++) {
        enum ggml_type ty = lowbit_types[k], vt = quant_vec_dot_type(ty);
        size_t row = ggml_row_size(ty, N_IN);
        quant_from_float(ty, wf, w, (int64_t)N_IN * N_OUT);
        for (int tk = 0; tk < MAX_TOK; tk++) quant_from_float(vt, x + tk * N_IN, xq[tk], N_IN);
        for (int n_tok = 1; n_tok <= MAX_TOK; n_tok++) {
            matmul_path(c, MATMUL_REFERENCE, ty, w, N_IN, N_OUT, x, n_tok, y);
            int grouped = ty == GGML_TYPE_Q2_K ? n_tok - n_tok % 4 : 0;
            for (int tk = 0; tk < n_tok; tk++)
                for (int o = 0; o < N_OUT; o++) {
                    const void *wr = w + row * (size_t)o;
                    float want = tk < grouped ? quant_dot_q2_K_gemm(N_IN, wr, xq[tk])
                                             : quant_get_vec_dot(SIMD_SCALAR, ty)(N_IN, wr, xq[tk]);
                    if (y[tk * N_OUT + o] != want) {
                        fprintf(stderr, "  %s n_tok %d y[%d][%d] = %.9g, expected %.9g\n", ggml_type_info(ty)->name, n_tok, tk, o,
                                y[tk * N_OUT + o], want);
                        compute_destroy(c);
                        CHECK(!"reference path differs");
                    }
                }
        }
    }
    compute_destroy(c);
}
