/* Tests of the AVX-512 K-quant kernels (math/kquant_avx512.c): every Q4_K / Q6_K kernel of the
 * level (dot, dot4, dotr) gives the scalar kernel's float bit for bit, on quantized rows and on
 * blocks of raw random bytes (every level, scale and min value, activations at the int8 extremes,
 * which is where an int16 intermediate would saturate). */
#include "test.h"
#include "math/blocks.h"
#include "math/kernels.h"
#include "math/matmul.h"
#include "math/quant.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float urand(void) { return (float)(next_u32() >> 8) / (float)(1 << 24) - 0.5f; }

enum { NMAX = 5632, NB_MAX = NMAX / QK_K, ROWS = 4 };

/* Q8_K rows: either quantized from random floats, or raw random levels in [-128, 127] (extreme:
 * only -128 and 127) with bsums to match and a random positive d. */
static void make_x(block_q8_K *x, int64_t n, int mode) {
    if (mode == 0) {
        static float f[NMAX];
        for (int64_t i = 0; i < n; i++) f[i] = urand() * 4;
        quant_from_float(GGML_TYPE_Q8_K, f, x, n);
        return;
    }
    for (int64_t b = 0; b < n / QK_K; b++) {
        x[b].d = 0.001f + (float)(next_u32() % 1000) * 1e-5f;
        for (int j = 0; j < QK_K; j++)
            x[b].qs[j] = mode == 1 ? (int8_t)(next_u32() & 0xFF) : (next_u32() & 1) ? 127 : -128;
        for (int j = 0; j < QK_K / 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += x[b].qs[16 * j + l];
            x[b].bsums[j] = (int16_t)s;
        }
    }
}

/* Weight rows of type ty: quantized (mode 0) or random bytes with finite fp16 scales. */
static void make_w(enum ggml_type ty, uint8_t *w, int64_t n, int mode) {
    if (mode == 0) {
        static float f[NMAX];
        for (int64_t i = 0; i < n; i++) f[i] = urand() * (1 + (i % 7));
        quant_from_float(ty, f, w, n);
        return;
    }
    size_t bytes = ggml_row_size(ty, (uint64_t)n);
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)next_u32();
    for (int64_t b = 0; b < n / QK_K; b++) {
        uint16_t d = f32_to_fp16(urand() * 0.01f), dmin = f32_to_fp16(urand() * 0.01f);
        if (ty == GGML_TYPE_Q4_K) {
            ((block_q4_K *)w)[b].d = d;
            ((block_q4_K *)w)[b].dmin = dmin;
        } else {
            ((block_q6_K *)w)[b].d = d;
        }
    }
}

TEST(kquant_avx512_kernels_equal_scalar_bit_for_bit) {
    if (!simd_level_supported(SIMD_AVX512)) SKIP("this CPU has no AVX-512 VNNI");
    static block_q8_K x[ROWS][NB_MAX];
    static uint8_t w[ROWS][NB_MAX * sizeof(block_q6_K)];
    const enum ggml_type types[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};
    const int64_t lengths[] = {256, 512, 2048, 5632};
    int compared = 0;
    for (size_t k = 0; k < 2; k++) {
        enum ggml_type ty = types[k];
        quant_vec_dot_fn scalar = quant_get_vec_dot(SIMD_SCALAR, ty), dot = quant_get_vec_dot(SIMD_AVX512, ty);
        quant_vec_dot4_fn dot4 = quant_get_vec_dot4(SIMD_AVX512, ty);
        quant_vec_dotr_fn dotr = quant_get_vec_dotr(SIMD_AVX512, ty);
        CHECK(dot && dot4 && dotr && dot != scalar);
        for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++)
            for (int mode = 0; mode < 3; mode++) {
                int64_t n = lengths[li];
                for (int r = 0; r < ROWS; r++) {
                    make_x(x[r], n, mode);
                    make_w(ty, w[r], n, mode ? 1 : 0);
                }
                /* ref[r][tk]: weight row r . token t by the scalar kernel */
                float ref[ROWS][ROWS], out[ROWS];
                for (int r = 0; r < ROWS; r++)
                    for (int tk = 0; tk < ROWS; tk++) {
                        ref[r][tk] = scalar(n, w[r], x[tk]);
                        CHECK(isfinite(ref[r][tk]));
                        float v = dot(n, w[r], x[tk]);
                        if (v != ref[r][tk])
                            fprintf(stderr, "  %s n=%lld mode %d dot: %.9g scalar %.9g\n", ggml_type_info(ty)->name,
                                    (long long)n, mode, v, ref[r][tk]);
                        CHECK(v == ref[r][tk]);
                        compared++;
                    }
                for (int r = 0; r < ROWS; r++) {
                    dot4(n, w[r], x[0], sizeof x[0], out);
                    for (int tk = 0; tk < ROWS; tk++) {
                        if (out[tk] != ref[r][tk])
                            fprintf(stderr, "  %s n=%lld mode %d dot4 token %d: %.9g scalar %.9g\n",
                                    ggml_type_info(ty)->name, (long long)n, mode, tk, out[tk], ref[r][tk]);
                        CHECK(out[tk] == ref[r][tk]);
                    }
                }
                for (int tk = 0; tk < ROWS; tk++) {
                    dotr(n, w[0], sizeof w[0], x[tk], out);
                    for (int r = 0; r < ROWS; r++) {
                        if (out[r] != ref[r][tk])
                            fprintf(stderr, "  %s n=%lld mode %d dotr row %d: %.9g scalar %.9g\n",
                                    ggml_type_info(ty)->name, (long long)n, mode, r, out[r], ref[r][tk]);
                        CHECK(out[r] == ref[r][tk]);
                    }
                }
            }
    }
    CHECK(compared == 2 * 4 * 3 * ROWS * ROWS);
}

/* Q4_K prompts on AVX-512 take the 4 x 4 integer tiles of kquant_gemm_q4_K_rows through matmul's
 * automatic path, at every batch size (over one token block of the tile loop, token and row
 * counts not multiples of 4, 1 to 3 threads): every output is the scalar kernel's dot bit for
 * bit, so a Q4_K token's numbers do not depend on its batch. */
TEST(kquant_q4_K_matmul_equals_scalar_dots_at_every_batch_size) {
    if (!simd_level_supported(SIMD_AVX512)) SKIP("this CPU has no AVX-512 VNNI");
    enum { N_IN = 512, N_OUT = 133, MAX_TOK = 75 };
    static float wf[N_IN * N_OUT], x[MAX_TOK * N_IN], y[MAX_TOK * N_OUT];
    static uint8_t w[N_OUT * N_IN], xq[MAX_TOK][N_IN * 2];
    for (int i = 0; i < N_IN * N_OUT; i++) wf[i] = urand() * (1 + i % 5);
    for (int i = 0; i < MAX_TOK * N_IN; i++) x[i] = urand() * 3;
    const size_t row = ggml_row_size(GGML_TYPE_Q4_K, N_IN);
    quant_from_float(GGML_TYPE_Q4_K, wf, w, (int64_t)N_IN * N_OUT);
    for (int tk = 0; tk < MAX_TOK; tk++) quant_from_float(GGML_TYPE_Q8_K, x + tk * N_IN, xq[tk], N_IN);
    quant_vec_dot_fn scalar = quant_get_vec_dot(SIMD_SCALAR, GGML_TYPE_Q4_K);
    int checked = 0;
    for (int nt = 1; nt <= 3; nt++) {
        struct compute *c;
        CHECK_EQ_INT(compute_create(&c, nt, MAX_TOK, N_IN), 0);
        const int n_toks[] = {4, 7, 33, 64, 75};
        for (size_t ti = 0; ti < sizeof n_toks / sizeof *n_toks; ti++) {
            int n_tok = n_toks[ti];
            for (int i = 0; i < n_tok * N_OUT; i++) y[i] = NAN;
            matmul(c, GGML_TYPE_Q4_K, w, N_IN, N_OUT, x, n_tok, y);
            for (int tk = 0; tk < n_tok; tk++)
                for (int o = 0; o < N_OUT; o++) {
                    float want = scalar(N_IN, w + row * (size_t)o, xq[tk]);
                    if (y[tk * N_OUT + o] != want) {
                        fprintf(stderr, "  threads %d n_tok %d y[%d][%d] = %.9g, scalar %.9g\n", nt, n_tok, tk, o,
                                y[tk * N_OUT + o], want);
                        compute_destroy(c);
                        CHECK(!"Q4_K matmul differs from the scalar dot");
                    }
                    checked++;
                }
        }
        compute_destroy(c);
    }
    CHECK_EQ_INT(checked, 3 * (4 + 7 + 33 + 64 + 75) * N_OUT);
}

/* MATMUL_REFERENCE on AVX-512 runs Q4_K and Q6_K on these kernels too (the golden tests' speed):
 * still the scalar orders exactly: Q4_K tokens in whole groups of four the reference's GEMM order
 * (quant_dot_q4_K_gemm), the rest its GEMV order (the scalar vec_dot); Q6_K the scalar vec_dot. */
TEST(kquant_reference_path_equals_scalar_orders) {
    if (!simd_level_supported(SIMD_AVX512)) SKIP("this CPU has no AVX-512 VNNI");
    enum { N_IN = 512, N_OUT = 70, MAX_TOK = 75 };
    static float wf[N_IN * N_OUT], x[MAX_TOK * N_IN], y[MAX_TOK * N_OUT];
    static uint8_t w[N_OUT * N_IN], xq[MAX_TOK][N_IN * 2];
    for (int i = 0; i < N_IN * N_OUT; i++) wf[i] = urand() * (1 + i % 3);
    for (int i = 0; i < MAX_TOK * N_IN; i++) x[i] = urand() * 3;
    for (int tk = 0; tk < MAX_TOK; tk++) quant_from_float(GGML_TYPE_Q8_K, x + tk * N_IN, xq[tk], N_IN);
    const enum ggml_type types[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};
    int grouped_seen = 0, checked = 0;
    for (int nt = 1; nt <= 2; nt++) {
        struct compute *c;
        CHECK_EQ_INT(compute_create(&c, nt, MAX_TOK, N_IN), 0);
        for (int k = 0; k < 2; k++) {
            enum ggml_type ty = types[k];
            const size_t row = ggml_row_size(ty, N_IN);
            quant_from_float(ty, wf, w, (int64_t)N_IN * N_OUT);
            quant_vec_dot_fn scalar = quant_get_vec_dot(SIMD_SCALAR, ty);
            const int n_toks[] = {1, 3, 4, 7, 33, 75};
            for (size_t ti = 0; ti < sizeof n_toks / sizeof *n_toks; ti++) {
                int n_tok = n_toks[ti];
                matmul_path(c, MATMUL_REFERENCE, ty, w, N_IN, N_OUT, x, n_tok, y);
                for (int tk = 0; tk < n_tok; tk++) {
                    bool grouped = ty == GGML_TYPE_Q4_K && tk < n_tok - n_tok % 4;
                    grouped_seen += grouped;
                    for (int o = 0; o < N_OUT; o++) {
                        const uint8_t *wr = w + row * (size_t)o;
                        float want = grouped ? quant_dot_q4_K_gemm(N_IN, wr, xq[tk]) : scalar(N_IN, wr, xq[tk]);
                        if (y[tk * N_OUT + o] != want) {
                            fprintf(stderr, "  %s threads %d n_tok %d y[%d][%d] = %.9g, scalar %.9g\n", ggml_type_info(ty)->name,
                                    nt, n_tok, tk, o, y[tk * N_OUT + o], want);
                            compute_destroy(c);
                            CHECK(!"the reference path differs from the scalar order");
                        }
                        checked++;
                    }
                }
            }
        }
        compute_destroy(c);
    }
    CHECK(grouped_seen > 0 && checked == 2 * 2 * (1 + 3 + 4 + 7 + 33 + 75) * N_OUT);
}
