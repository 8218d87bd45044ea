/* Tests of math/q8x16.h (Q8_0, Q5_0, Q4_K and Q6_K rows interleaved by 16): the rewritten matrix
 * holds the same numbers, the kernels compute exactly their documented order at every token count
 * and for the tail rows, and matmul gives every token the same numbers whatever its batch (Q4_K,
 * Q6_K: the very numbers of the GGUF matrix). */
#include "test.h"
#include "common/err.h"
#include "math/blocks.h"
#include "math/kernels.h"
#include "math/matmul.h"
#include "math/q8x16.h"
#include "math/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x51ED2701F00Dull;
static float nrand(void) { return test_nrand(&rng_state); }

/* n_out rows of n_in random weights of type (Q8_0 or Q5_0) at `offset` bytes past a 64-byte
 * boundary (GGUF aligns tensors to 32 bytes: both cases occur), and the same rewritten into
 * q8x16.h's layout of the type. */
struct pair {
    uint8_t *gguf_buf, *x16_buf;
    void *gguf, *x16;
};

/* bytes (rounded up to the alignment, as aligned_alloc wants) at a 64-byte boundary; never NULL. */
static void *alloc64(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    ASSERT(p);
    return p;
}

static int make_pair_type(struct pair *p, enum ggml_type type, int64_t n_in, int64_t n_out, size_t offset) {
    size_t bytes = ggml_row_size(type, (uint64_t)n_in) * (size_t)n_out;
    float *wf = malloc(sizeof(float) * (size_t)(n_in * n_out));
    p->gguf_buf = alloc64(bytes + 64);
    p->x16_buf = alloc64(bytes + 64);
    if (!wf) return -1;
    for (int64_t i = 0; i < n_in * n_out; i++) wf[i] = nrand() * (float)(1 + i % 7);
    p->gguf = p->gguf_buf + offset;
    p->x16 = p->x16_buf + offset;
    quant_from_float(type, wf, p->gguf, n_in * n_out);
    memcpy(p->x16, p->gguf, bytes);
    free(wf);
    return type == GGML_TYPE_Q5_0   ? q5x16_repack(p->x16, n_in, n_out)
           : type == GGML_TYPE_Q4_K ? q4kx16_repack(p->x16, n_in, n_out)
           : type == GGML_TYPE_Q6_K ? q6kx16_repack(p->x16, n_in, n_out)
                                    : q8x16_repack(p->x16, n_in, n_out);
}

static int make_pair(struct pair *p, int64_t n_in, int64_t n_out, size_t offset) {
    return make_pair_type(p, GGML_TYPE_Q8_0, n_in, n_out, offset);
}

static void free_pair(struct pair *p) {
    free(p->gguf_buf);
    free(p->x16_buf);
}

/* Every row of the rewritten matrix decodes to the GGUF row's values, tail rows included. */
TEST(q8x16_repack_keeps_every_value) {
    static const int64_t shapes[][2] = {{96, 53}, {576, 48}, {64, 7}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (size_t offset = 0; offset <= 32; offset += 32) {
            int64_t n_in = shapes[s][0], n_out = shapes[s][1];
            struct pair p;
            CHECK_EQ_INT(make_pair(&p, n_in, n_out, offset), 0);
            float *a = malloc(sizeof(float) * (size_t)n_in), *b = malloc(sizeof(float) * (size_t)n_in);
            size_t row = ggml_row_size(GGML_TYPE_Q8_0, (uint64_t)n_in);
            int bad = 0;
            for (int64_t r = 0; r < n_out; r++) {
                quant_to_float(GGML_TYPE_Q8_0, (const uint8_t *)p.gguf + (size_t)r * row, a, n_in);
                q8x16_row_to_float(p.x16, n_in, n_out, r, b);
                bad += memcmp(a, b, sizeof(float) * (size_t)n_in) != 0;
            }
            free(a);
            free(b);
            free_pair(&p);
            CHECK_EQ_INT(bad, 0);
        }
}

/* The kernel of type (Q8_0, Q5_0; Q8_0 on AMX with amx) over tokens [0, n_tok) of acts. */
static void run_kernel(enum ggml_type type, bool amx, int64_t n_in, int64_t n_out, const void *w, int64_t r0,
                       int64_t r1, const struct q8x16_act *acts, int64_t n_tok, float *y) {
    if (!amx) {
        (type == GGML_TYPE_Q5_0 ? q5x16_rows : q8x16_rows)(n_in, n_out, w, r0, r1, acts, n_tok, y);
        return;
    }
    void *tiles = alloc64(Q8X16_AMX_ACT_BYTES(n_tok, n_in));
    void *scratch = alloc64(Q8X16_AMX_SCRATCH_BYTES(n_in));
    for (int64_t t = 0; t < n_tok / 16 * 16; t++) q8x16_amx_put(acts + t * (n_in / QK8_0), t, n_in, tiles);
    q8x16_rows_amx(n_in, n_out, w, r0, r1, acts, tiles, scratch, n_tok, y);
    free(scratch);
    free(tiles);
}

/* q8x16_rows / q5x16_rows (type; q8x16_rows_amx with amx) against their dot_ref bit for bit (token
 * counts of 1 to 37: whole tiles of 16 and the rest, row ranges of whole groups, the tail rows)
 * and the double-precision product to float rounding, with nothing written outside the range;
 * rows of n_in (<= 96) inputs, the weights `offset` bytes past a 64-byte boundary. Adds the
 * mismatches to *bad_exact and *bad_close. */
static int kernel_mismatches(enum ggml_type type, bool amx, int64_t n_in, size_t offset, int *bad_exact, int *bad_close) {
    enum { MAX_IN = 96, N_OUT = 53, MAX_TOK = 37 };
    ASSERT(n_in <= MAX_IN && n_in % QK8_0 == 0);
    const int64_t nb = n_in / QK8_0;
    const bool q5 = type == GGML_TYPE_Q5_0;
    struct pair p;
    if (make_pair_type(&p, type, n_in, N_OUT, offset) < 0) return -1;
    static float x[MAX_TOK * MAX_IN], y[MAX_TOK * N_OUT], wrow[MAX_IN];
    static uint8_t xq[MAX_TOK * MAX_IN * 2];
    static struct q8x16_act acts[MAX_TOK * MAX_IN / QK8_0];
    size_t xq_stride = ggml_row_size(GGML_TYPE_Q8_0, n_in);
    for (int i = 0; i < MAX_TOK * n_in; i++) x[i] = nrand() * (float)(1 + i % 5);
    for (int t = 0; t < MAX_TOK; t++) quant_from_float(GGML_TYPE_Q8_0, x + t * n_in, xq + t * xq_stride, n_in);
    q8x16_pack_acts(xq, xq_stride, MAX_TOK, n_in, acts);
    static const int64_t ranges[][2] = {{0, N_OUT}, {16, 48}, {32, 48}, {48, N_OUT}};
    static const int n_toks[] = {1, 2, 7, 8, 9, 16, 17, 32, MAX_TOK}; /* AMX: tiles of 16, and the rest */
    for (size_t ri = 0; ri < sizeof ranges / sizeof *ranges; ri++)
        for (size_t ti = 0; ti < sizeof n_toks / sizeof *n_toks; ti++) {
            int64_t r0 = ranges[ri][0], r1 = ranges[ri][1];
            int n_tok = n_toks[ti];
            for (int i = 0; i < MAX_TOK * N_OUT; i++) y[i] = NAN;
            run_kernel(type, amx, n_in, N_OUT, p.x16, r0, r1, acts, n_tok, y);
            for (int t = 0; t < n_tok; t++)
                for (int64_t r = r0; r < r1; r++) {
                    float got = y[t * N_OUT + r];
                    if (got != (q5 ? q5x16_dot_ref : q8x16_dot_ref)(n_in, N_OUT, p.x16, r, acts + t * nb)) (*bad_exact)++;
                    (q5 ? q5x16_row_to_float : q8x16_row_to_float)(p.x16, n_in, N_OUT, r, wrow);
                    double ref = 0, mag = 0;
                    for (int64_t b = 0; b < nb; b++)
                        for (int k = 0; k < QK8_0; k++) {
                            int8_t q;
                            memcpy(&q, (const int8_t *)acts[t * nb + b].q4 + k, 1);
                            double prod = (double)wrow[b * QK8_0 + k] * acts[t * nb + b].d * q;
                            ref += prod;
                            mag += fabs(prod);
                        }
                    if (fabs(got - ref) > 1e-5 * mag) (*bad_close)++;
                }
            for (int t = 0; t < MAX_TOK; t++) /* nothing written outside [r0, r1) x n_tok */
                for (int64_t r = 0; r < N_OUT; r++)
                    if ((t >= n_tok || r < r0 || r >= r1) && !isnan(y[t * N_OUT + r])) (*bad_exact)++;
        }
    free_pair(&p);
    return 0;
}

static void check_kernel(struct test_case *t, enum ggml_type type, bool amx) {
    int bad_exact = 0, bad_close = 0;
    for (int64_t n_in = QK8_0; n_in <= 3 * QK8_0; n_in += QK8_0) /* one to three blocks a row */
        for (size_t offset = 0; offset <= 32; offset += 32)
            CHECK_EQ_INT(kernel_mismatches(type, amx, n_in, offset, &bad_exact, &bad_close), 0);
    CHECK_EQ_INT(bad_exact, 0);
    CHECK_EQ_INT(bad_close, 0);
}

/* q8x16_rows equals q8x16_dot_ref bit for bit and the double product to rounding (check_kernel). */
TEST(q8x16_rows_equal_their_scalar_order) {
    if (!q8x16_supported()) SKIP("no AVX-512 VNNI: q8x16 has no kernel here");
    check_kernel(t, GGML_TYPE_Q8_0, false);
}

/* q8x16_rows_amx the same (check_kernel): whole tiles of 16 tokens on AMX, the rest on the vector
 * kernel. */
TEST(q8x16_rows_amx_equal_their_scalar_order) {
    if (!q8x16_supported() || !q8x16_amx_enable()) SKIP("no AMX-INT8: matmul takes q8x16_rows");
    check_kernel(t, GGML_TYPE_Q8_0, true);
}

/* Rows long enough that q8x16_rows_amx takes a matrix's groups in several passes (two groups of
 * 16384 inputs fill Q8X16_AMX_GROUP_BYTES): every output of 17 tokens is q8x16_dot_ref's. */
TEST(q8x16_rows_amx_passes_cover_every_group) {
    if (!q8x16_supported() || !q8x16_amx_enable()) SKIP("no AMX-INT8: matmul takes q8x16_rows");
    enum { N_IN = 16384, N_OUT = 5 * 16 + 3, N_TOK = 17 };
    _Static_assert(Q8X16_AMX_GROUP_BYTES / (N_IN * 16) == 2, "two groups per pass");
    const int64_t nb = N_IN / QK8_0;
    struct pair p;
    CHECK_EQ_INT(make_pair(&p, N_IN, N_OUT, 0), 0);
    float *x = malloc(sizeof(float) * N_TOK * N_IN), *y = malloc(sizeof(float) * N_TOK * N_OUT);
    size_t xq_stride = ggml_row_size(GGML_TYPE_Q8_0, N_IN);
    uint8_t *xq = malloc(xq_stride * N_TOK);
    struct q8x16_act *acts = malloc(sizeof *acts * N_TOK * (size_t)nb);
    CHECK(x && y && xq && acts);
    for (int i = 0; i < N_TOK * N_IN; i++) x[i] = nrand();
    for (int k = 0; k < N_TOK; k++) quant_from_float(GGML_TYPE_Q8_0, x + k * N_IN, xq + k * xq_stride, N_IN);
    q8x16_pack_acts(xq, xq_stride, N_TOK, N_IN, acts);
    run_kernel(GGML_TYPE_Q8_0, true, N_IN, N_OUT, p.x16, 0, N_OUT, acts, N_TOK, y);
    int bad = 0;
    for (int k = 0; k < N_TOK; k++)
        for (int64_t r = 0; r < N_OUT; r++) bad += y[k * N_OUT + r] != q8x16_dot_ref(N_IN, N_OUT, p.x16, r, acts + k * nb);
    CHECK_EQ_INT(bad, 0);
    free(acts);
    free(xq);
    free(y);
    free(x);
    free_pair(&p);
}


/* ---- Q5_0 ---- */

/* Every row of the rewritten Q5_0 matrix decodes to the GGUF row's values, tail rows included,
 * at both alignments; and the rewriting is a permutation of the bytes' information: the values
 * use all 32 levels, fifth bits included. */
TEST(q5x16_repack_keeps_every_value) {
    static const int64_t shapes[][2] = {{96, 53}, {576, 48}, {64, 7}, {32, 17}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (size_t offset = 0; offset <= 32; offset += 32) {
            int64_t n_in = shapes[s][0], n_out = shapes[s][1];
            struct pair p;
            CHECK_EQ_INT(make_pair_type(&p, GGML_TYPE_Q5_0, n_in, n_out, offset), 0);
            float *a = malloc(sizeof(float) * (size_t)n_in), *b = malloc(sizeof(float) * (size_t)n_in);
            size_t row = ggml_row_size(GGML_TYPE_Q5_0, (uint64_t)n_in);
            int bad = 0, high = 0;
            for (int64_t r = 0; r < n_out; r++) {
                quant_to_float(GGML_TYPE_Q5_0, (const uint8_t *)p.gguf + (size_t)r * row, a, n_in);
                q5x16_row_to_float(p.x16, n_in, n_out, r, b);
                bad += memcmp(a, b, sizeof(float) * (size_t)n_in) != 0;
                for (int64_t i = 0; i < n_in; i++) high += b[i] > 0; /* levels 17..31: fifth bit set */
            }
            free(a);
            free(b);
            free_pair(&p);
            CHECK_EQ_INT(bad, 0);
            CHECK(high > 0);
        }
}

/* q5x16_rows equals q5x16_dot_ref bit for bit and the double product to rounding (check_kernel). */
TEST(q5x16_rows_equal_their_scalar_order) {
    if (!q8x16_supported()) SKIP("no AVX-512 VNNI: q8x16 has no kernel here");
    check_kernel(t, GGML_TYPE_Q5_0, false);
}

/* matmul on a serving layout (x16: UVLM_TYPE_Q8_0_X16 or _Q5_0_X16 of the GGUF type `type`):
 * each token's outputs are the ones it gets alone, at token counts of decode steps and prompts,
 * on 1 to 3 threads; and the GGUF matrix's up to rounding (201 rows: a tail row). */
static void check_matmul_batches(struct test_case *t, enum ggml_type type, enum ggml_type x16) {
    enum { N_IN = 576, N_OUT = 201, MAX_TOK = 75 };
    struct pair p;
    CHECK_EQ_INT(make_pair_type(&p, type, N_IN, N_OUT, 32), 0);
    static float x[MAX_TOK * N_IN], y[MAX_TOK * N_OUT], alone[MAX_TOK * N_OUT], gguf[N_OUT];
    for (int i = 0; i < MAX_TOK * N_IN; i++) x[i] = nrand();
    int bad_batch = 0, bad_close = 0;
    for (int nt = 1; nt <= 3; nt++) {
        struct compute *c;
        CHECK_EQ_INT(compute_create(&c, nt, MAX_TOK, N_IN), 0);
        for (int tk = 0; tk < MAX_TOK; tk++) {
            matmul(c, x16, p.x16, N_IN, N_OUT, x + tk * N_IN, 1, alone + tk * N_OUT);
            matmul(c, type, p.gguf, N_IN, N_OUT, x + tk * N_IN, 1, gguf);
            for (int o = 0; o < N_OUT; o++)
                if (fabsf(alone[tk * N_OUT + o] - gguf[o]) > 1e-4f * (1.0f + fabsf(gguf[o]))) bad_close++;
        }
        static const int n_toks[] = {2, 5, 8, 9, 31, 32, 33, MAX_TOK};
        for (size_t ti = 0; ti < sizeof n_toks / sizeof *n_toks; ti++) {
            matmul(c, x16, p.x16, N_IN, N_OUT, x, n_toks[ti], y);
            bad_batch += memcmp(y, alone, sizeof(float) * (size_t)(n_toks[ti] * N_OUT)) != 0;
        }
        compute_destroy(c);
    }
    free_pair(&p);
    CHECK_EQ_INT(bad_batch, 0);
    CHECK_EQ_INT(bad_close, 0);
}

TEST(matmul_q8_0_x16_numbers_do_not_depend_on_the_batch) {
    if (!q8x16_supported()) SKIP("no AVX-512 VNNI: the loader keeps Q8_0 as it is");
    check_matmul_batches(t, GGML_TYPE_Q8_0, UVLM_TYPE_Q8_0_X16);
}

TEST(matmul_q5_0_x16_numbers_do_not_depend_on_the_batch) {
    if (!q8x16_supported()) SKIP("no AVX-512 VNNI: the loader keeps Q5_0 as it is");
    check_matmul_batches(t, GGML_TYPE_Q5_0, UVLM_TYPE_Q5_0_X16);
}

/* ---- Q4_K ---- */

/* Every row of a rewritten Q4_K matrix (a tied embedding's lookup) decodes to the GGUF row's
 * values, tail rows and both alignments included. */
TEST(q4kx16_row_to_float_keeps_every_value) {
    enum { N_IN = 512, N_OUT = 37 };
    static float a[N_IN], b[N_IN];
    const size_t row = ggml_row_size(GGML_TYPE_Q4_K, N_IN);
    int bad = 0, nonzero = 0;
    for (size_t offset = 0; offset <= 32; offset += 32) {
        struct pair p;
        CHECK_EQ_INT(make_pair_type(&p, GGML_TYPE_Q4_K, N_IN, N_OUT, offset), 0);
        CHECK(memcmp(p.gguf, p.x16, row * 16) != 0); /* the first group was rewritten */
        for (int64_t r = 0; r < N_OUT; r++) {
            quant_to_float(GGML_TYPE_Q4_K, (const uint8_t *)p.gguf + (size_t)r * row, a, N_IN);
            q4kx16_row_to_float(p.x16, N_IN, N_OUT, r, b);
            bad += memcmp(a, b, sizeof a) != 0;
            for (int i = 0; i < N_IN; i++) nonzero += b[i] != 0.0f;
        }
        free_pair(&p);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(nonzero > N_OUT * N_IN);
}

typedef void kx16_rows(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const void *xq,
                       size_t xq_stride, int64_t n_tok, float *y);

/* A K-quant AMX kernel as matmul runs it: the tokens' tiles put first (put), a scratch of its own. */
typedef void kx16_amx(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const void *xq,
                      size_t xq_stride, const void *amx, void *scratch, int64_t n_tok, float *y);
static void kx16_amx_alone(kx16_amx *rows, void (*put)(const void *, int64_t, int64_t, void *), int64_t n_in,
                           int64_t n_out, const void *w, int64_t r0, int64_t r1, const void *xq, size_t xq_stride,
                           int64_t n_tok, float *y) {
    void *amx = alloc64(Q8X16_AMX_ACT_BYTES(n_tok, n_in));
    void *scratch = alloc64(Q8X16_AMX_SCRATCH_BYTES(n_in));
    for (int64_t k = 0; k < n_tok / 16 * 16; k++) put((const uint8_t *)xq + k * xq_stride, k, n_in, amx);
    rows(n_in, n_out, w, r0, r1, xq, xq_stride, amx, scratch, n_tok, y);
    free(scratch);
    free(amx);
}
static void q4kx16_rows_amx_alone(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const void *xq,
                                  size_t xq_stride, int64_t n_tok, float *y) {
    kx16_amx_alone(q4kx16_rows_amx, q4kx16_amx_put, n_in, n_out, w, r0, r1, xq, xq_stride, n_tok, y);
}
static void q6kx16_rows_amx_alone(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const void *xq,
                                  size_t xq_stride, int64_t n_tok, float *y) {
    kx16_amx_alone(q6kx16_rows_amx, q6kx16_amx_put, n_in, n_out, w, r0, r1, xq, xq_stride, n_tok, y);
}

/* rows (a Q4_K kernel) against q4kx16_dot_ref bit for bit, and that against the GGUF matrix's
 * scalar dot_q4_K (quant.c): the token counts n_toks, row ranges of whole groups and the tail
 * rows, both alignments, nothing written outside the range; the scales and mins use all 6 bits. */
static void check_q4k_rows(struct test_case *t, kx16_rows *rows, const int *n_toks, size_t n_n_toks) {
    enum { N_IN = 512, N_OUT = 53, MAX_TOK = 150 };
    static float x[MAX_TOK * N_IN], y[MAX_TOK * N_OUT];
    static uint8_t xq[MAX_TOK * N_IN * 2];
    const size_t xq_stride = ggml_row_size(GGML_TYPE_Q8_K, N_IN), row = ggml_row_size(GGML_TYPE_Q4_K, N_IN);
    quant_vec_dot_fn gguf_dot = quant_get_vec_dot(SIMD_SCALAR, GGML_TYPE_Q4_K);
    for (int i = 0; i < MAX_TOK * N_IN; i++) x[i] = nrand() * (float)(1 + i % 5);
    for (int tk = 0; tk < MAX_TOK; tk++) quant_from_float(GGML_TYPE_Q8_K, x + tk * N_IN, xq + tk * xq_stride, N_IN);
    int bad_kernel = 0, bad_gguf = 0, bad_outside = 0, high_scales = 0;
    for (size_t offset = 0; offset <= 32; offset += 32) {
        struct pair p;
        CHECK_EQ_INT(make_pair_type(&p, GGML_TYPE_Q4_K, N_IN, N_OUT, offset), 0);
        for (int64_t r = 0; r < N_OUT; r++) {
            const block_q4_K *b = (const block_q4_K *)((const uint8_t *)p.gguf + (size_t)r * row);
            for (int j = 0; j < 8; j++) {
                uint8_t sc, mn;
                k4_scale_min(j, b->scales, &sc, &mn);
                high_scales += sc >= 32 || mn >= 32;
            }
            for (int tk = 0; tk < MAX_TOK; tk++)
                bad_gguf += q4kx16_dot_ref(N_IN, N_OUT, p.x16, r, xq + tk * xq_stride) !=
                            gguf_dot(N_IN, (const uint8_t *)p.gguf + (size_t)r * row, xq + tk * xq_stride);
        }
        static const int64_t ranges[][2] = {{0, N_OUT}, {16, 48}, {48, N_OUT}};
        for (size_t ri = 0; ri < sizeof ranges / sizeof *ranges; ri++)
            for (size_t ti = 0; ti < n_n_toks; ti++) {
                int64_t r0 = ranges[ri][0], r1 = ranges[ri][1];
                const int n_tok = n_toks[ti];
                CHECK(n_tok <= MAX_TOK);
                for (int i = 0; i < MAX_TOK * N_OUT; i++) y[i] = NAN;
                rows(N_IN, N_OUT, p.x16, r0, r1, xq, xq_stride, n_tok, y);
                for (int tk = 0; tk < MAX_TOK; tk++)
                    for (int64_t r = 0; r < N_OUT; r++) {
                        float got = y[tk * N_OUT + r];
                        if (tk >= n_tok || r < r0 || r >= r1) bad_outside += !isnan(got);
                        else bad_kernel += got != q4kx16_dot_ref(N_IN, N_OUT, p.x16, r, xq + tk * xq_stride);
                    }
            }
        free_pair(&p);
    }
    CHECK_EQ_INT(bad_gguf, 0);
    CHECK_EQ_INT(bad_kernel, 0);
    CHECK_EQ_INT(bad_outside, 0);
    CHECK(high_scales > 0);
}

/* q4kx16_rows: every token count from 1 to 21. */
TEST(q4kx16_rows_equal_the_gguf_numbers) {
    if (!q8x16_supported()) SKIP("no AVX-512 VNNI: q8x16 has no kernel here");
    int n_toks[21];
    for (int k = 0; k < 21; k++) n_toks[k] = k + 1;
    check_q4k_rows(t, q4kx16_rows, n_toks, 21);
}

/* q4kx16_rows_amx the same: one to nine tiles of 16 tokens (a pass takes up to eight), with and
 * without tokens left for the vector kernel. */
TEST(q4kx16_rows_amx_equal_the_gguf_numbers) {
    if (!q8x16_supported() || !q8x16_amx_enable()) SKIP("no AMX-INT8: matmul takes q4kx16_rows");
    static const int n_toks[] = {1, 15, 16, 17, 31, 32, 48, 63, 64, 65, 70, 128, 129, 144, 150};
    check_q4k_rows(t, q4kx16_rows_amx_alone, n_toks, sizeof n_toks / sizeof *n_toks);
}

/* matmul on Q4_K's layout gives exactly the GGUF Q4_K matrix's numbers, at decode and prompt
 * token counts (the GGUF prompt path's tiles give every token its single-token numbers too), on
 * 1 to 3 threads (201 rows: a tail row). */
TEST(matmul_q4_k_x16_equals_gguf_q4_k) {
    if (!q8x16_supported()) SKIP("no AVX-512 VNNI: the loader keeps Q4_K as it is");
    enum { N_IN = 768, N_OUT = 201, MAX_TOK = 75 };
    struct pair p;
    CHECK_EQ_INT(make_pair_type(&p, GGML_TYPE_Q4_K, N_IN, N_OUT, 32), 0);
    static float x[MAX_TOK * N_IN], y[MAX_TOK * N_OUT], want[MAX_TOK * N_OUT];
    for (int i = 0; i < MAX_TOK * N_IN; i++) x[i] = nrand();
    int bad = 0;
    for (int nt = 1; nt <= 3; nt++) {
        struct compute *c;
        CHECK_EQ_INT(compute_create(&c, nt, MAX_TOK, N_IN), 0);
        static const int n_toks[] = {1, 2, 5, 8, 9, 31, 32, 33, MAX_TOK};
        for (size_t ti = 0; ti < sizeof n_toks / sizeof *n_toks; ti++) {
            matmul(c, UVLM_TYPE_Q4_K_X16, p.x16, N_IN, N_OUT, x, n_toks[ti], y);
            matmul(c, GGML_TYPE_Q4_K, p.gguf, N_IN, N_OUT, x, n_toks[ti], want);
            bad += memcmp(y, want, sizeof(float) * (size_t)(n_toks[ti] * N_OUT)) != 0;
        }
        compute_destroy(c);
    }
    free_pair(&p);
    CHECK_EQ_INT(bad, 0);
}

/* ---- Q6_K ---- */

/* rows (a Q6_K kernel) against the GGUF matrix's scalar dot_q6_K (quant.c) bit for bit, and
 * q6kx16_dot_ref likewise: the token counts n_toks, row ranges of whole groups and the tail
 * rows, 3 and 5 super-blocks a row (a group's super-blocks on both alignments, the group itself
 * at either), nothing written outside the range; levels of -32 and activations of -127 occur
 * (the products' int16 bound), and scales of both signs. */
static void check_q6k_rows(struct test_case *t, kx16_rows *rows, const int *n_toks, size_t n_n_toks) {
    enum { MAX_IN = 1280, N_OUT = 53, MAX_TOK = 70 };
    static float x[MAX_TOK * MAX_IN], y[MAX_TOK * N_OUT], want[MAX_TOK * N_OUT];
    static uint8_t xq[MAX_TOK * MAX_IN * 2];
    quant_vec_dot_fn gguf_dot = quant_get_vec_dot(SIMD_SCALAR, GGML_TYPE_Q6_K);
    int bad_kernel = 0, bad_ref = 0, bad_outside = 0, extreme_levels = 0, extreme_x = 0, neg_scales = 0, pos_scales = 0;
    static const int64_t n_ins[] = {768, MAX_IN};
    for (size_t ni = 0; ni < sizeof n_ins / sizeof *n_ins; ni++) {
        const int64_t n_in = n_ins[ni];
        const size_t xq_stride = ggml_row_size(GGML_TYPE_Q8_K, (uint64_t)n_in), row = ggml_row_size(GGML_TYPE_Q6_K, (uint64_t)n_in);
        for (int64_t i = 0; i < MAX_TOK * n_in; i++) x[i] = nrand() * (float)(1 + i % 5);
        for (int t = 0; t < MAX_TOK; t++) quant_from_float(GGML_TYPE_Q8_K, x + t * n_in, xq + t * xq_stride, n_in);
        for (int t = 0; t < MAX_TOK; t++) {
            const block_q8_K *b = (const block_q8_K *)(xq + t * xq_stride);
            for (int64_t i = 0; i < n_in / QK_K; i++)
                for (int e = 0; e < QK_K; e++) extreme_x += b[i].qs[e] <= -127;
        }
        for (size_t offset = 0; offset <= 32; offset += 32) {
            struct pair p;
            CHECK_EQ_INT(make_pair_type(&p, GGML_TYPE_Q6_K, n_in, N_OUT, offset), 0);
            for (int64_t r = 0; r < N_OUT; r++) {
                const block_q6_K *b = (const block_q6_K *)((const uint8_t *)p.gguf + (size_t)r * row);
                for (int64_t i = 0; i < n_in / QK_K; i++) {
                    for (int e = 0; e < 32; e++) /* level -32: element e of each half's first 32 */
                        extreme_levels += (b[i].ql[e] & 0xF) == 0 && (b[i].qh[e] & 3) == 0;
                    for (int s = 0; s < QK_K / 16; s++) neg_scales += b[i].scales[s] < 0, pos_scales += b[i].scales[s] > 0;
                }
                for (int t = 0; t < MAX_TOK; t++) {
                    want[t * N_OUT + r] = gguf_dot(n_in, (const uint8_t *)p.gguf + (size_t)r * row, xq + t * xq_stride);
                    bad_ref += q6kx16_dot_ref(n_in, N_OUT, p.x16, r, xq + t * xq_stride) != want[t * N_OUT + r];
                }
            }
            static const int64_t ranges[][2] = {{0, N_OUT}, {16, 48}, {48, N_OUT}};
            for (size_t ri = 0; ri < sizeof ranges / sizeof *ranges; ri++)
                for (size_t ti = 0; ti < n_n_toks; ti++) {
                    int64_t r0 = ranges[ri][0], r1 = ranges[ri][1];
                    const int n_tok = n_toks[ti];
                    CHECK(n_tok <= MAX_TOK);
                    for (int i = 0; i < MAX_TOK * N_OUT; i++) y[i] = NAN;
                    rows(n_in, N_OUT, p.x16, r0, r1, xq, xq_stride, n_tok, y);
                    for (int t = 0; t < MAX_TOK; t++)
                        for (int64_t r = 0; r < N_OUT; r++) {
                            float got = y[t * N_OUT + r];
                            if (t >= n_tok || r < r0 || r >= r1) bad_outside += !isnan(got);
                            else bad_kernel += got != want[t * N_OUT + r];
                        }
                }
            free_pair(&p);
        }
    }
    CHECK_EQ_INT(bad_ref, 0);
    CHECK_EQ_INT(bad_kernel, 0);
    CHECK_EQ_INT(bad_outside, 0);
    CHECK(extreme_levels > 0);
    CHECK(extreme_x > 0);
    CHECK(neg_scales > 0 && pos_scales > 0);
}

/* q6kx16_rows: every token count from 1 to 40 (whole token tiles and every remainder). */
TEST(q6kx16_rows_equal_the_gguf_numbers) {
    if (!q8x16_supported()) SKIP("no AVX-512 VNNI: q8x16 has no kernel here");
    int n_toks[40];
    for (int k = 0; k < 40; k++) n_toks[k] = k + 1;
    check_q6k_rows(t, q6kx16_rows, n_toks, 40);
}

/* q6kx16_rows_amx the same: one to four tiles of 16 tokens, with and without tokens left for the
 * vector kernel. */
TEST(q6kx16_rows_amx_equal_the_gguf_numbers) {
    if (!q8x16_supported() || !q8x16_amx_enable()) SKIP("no AMX-INT8: matmul takes q6kx16_rows");
    static const int n_toks[] = {1, 15, 16, 17, 31, 32, 48, 63, 64, 70};
    check_q6k_rows(t, q6kx16_rows_amx_alone, n_toks, sizeof n_toks / sizeof *n_toks);
}

/* matmul on Q6_K's layout gives exactly the GGUF Q6_K matrix's numbers at every token count from
 * 1 to 40 and a prompt's 75, on 1 to 3 threads (201 rows: a tail row; rows of 1 KB and shorter,
 * where the GGUF path takes its multi-row kernel, and of 22 super-blocks, where it does not). */
TEST(matmul_q6_k_x16_equals_gguf_q6_k) {
    if (!q8x16_supported()) SKIP("no AVX-512 VNNI: the loader keeps Q6_K as it is");
    enum { MAX_IN = 5632, N_OUT = 201, MAX_TOK = 75 };
    static float x[MAX_TOK * MAX_IN], y[MAX_TOK * N_OUT], want[MAX_TOK * N_OUT];
    for (int i = 0; i < MAX_TOK * MAX_IN; i++) x[i] = nrand();
    int bad = 0, runs = 0;
    static const int64_t n_ins[] = {512, MAX_IN};
    for (size_t ni = 0; ni < sizeof n_ins / sizeof *n_ins; ni++) {
        struct pair p;
        CHECK_EQ_INT(make_pair_type(&p, GGML_TYPE_Q6_K, n_ins[ni], N_OUT, 32), 0);
        for (int nt = 1; nt <= 3; nt++) {
            struct compute *c;
            CHECK_EQ_INT(compute_create(&c, nt, MAX_TOK, MAX_IN), 0);
            for (int n_tok = 1; n_tok <= MAX_TOK; n_tok = n_tok < 40 ? n_tok + 1 : MAX_TOK + (n_tok == MAX_TOK)) {
                matmul(c, UVLM_TYPE_Q6_K_X16, p.x16, n_ins[ni], N_OUT, x, n_tok, y);
                matmul(c, GGML_TYPE_Q6_K, p.gguf, n_ins[ni], N_OUT, x, n_tok, want);
                bad += memcmp(y, want, sizeof(float) * (size_t)(n_tok * N_OUT)) != 0;
                runs++;
            }
            compute_destroy(c);
        }
        free_pair(&p);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(runs, 2 * 3 * 41);
}

/* matmul_multi on a serving layout with a matrix of no rows beside one of 48 (a decode step's
 * split into groups): the empty one gets no work item, the other its matmul's numbers. */
TEST(matmul_multi_x16_with_a_matrix_of_no_rows) {
    if (!q8x16_supported()) SKIP("no AVX-512 VNNI: the loader keeps Q8_0 / Q4_K as they are");
    enum { N_IN = 256, N_OUT = 48 };
    static const enum ggml_type types[][2] = {{GGML_TYPE_Q8_0, UVLM_TYPE_Q8_0_X16}, {GGML_TYPE_Q4_K, UVLM_TYPE_Q4_K_X16},
                                              {GGML_TYPE_Q6_K, UVLM_TYPE_Q6_K_X16}};
    static float x[N_IN], y[N_OUT], want[N_OUT], none[1];
    for (int i = 0; i < N_IN; i++) x[i] = nrand();
    struct compute *c;
    CHECK_EQ_INT(compute_create(&c, 2, 4, N_IN), 0);
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        struct pair p;
        CHECK_EQ_INT(make_pair_type(&p, types[k][0], N_IN, N_OUT, 0), 0);
        struct matmul_out outs[2] = {{.w = p.x16, .n_out = 0, .y = none}, {.w = p.x16, .n_out = N_OUT, .y = y}};
        matmul_multi(c, types[k][1], N_IN, x, 1, 2, outs);
        matmul(c, types[k][1], p.x16, N_IN, N_OUT, x, 1, want);
        CHECK(memcmp(y, want, sizeof y) == 0);
        free_pair(&p);
    }
    compute_destroy(c);
}
