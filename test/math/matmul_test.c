/* Tests of math/matmul.h: both matmul paths against a plain double-precision product, for every
 * weight type and several thread counts, and compute_parallel_for's ranges. */
#include "test.h"
#include "math/kernels.h"
#include "math/matmul.h"
#include "math/q8x16.h"
#include "math/quant.h"
#include "common/err.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float nrand(void) { return test_nrand(&rng_state); }

/* matmul of a random W (type ty) with n_tok random rows vs the double product of dequantized W
 * with the activations as matmul sees them (quantized on the vector path, F32 on the sgemm one).
 * Returns 1 when they agree to float rounding. */
static int check_matmul(struct compute *c, enum ggml_type ty, int64_t n_in, int64_t n_out,
                        int64_t n_tok) {
    size_t row = ggml_row_size(ty, (uint64_t)n_in);
    uint8_t *w = malloc(row * (size_t)n_out);
    float *wf = malloc(sizeof(float) * (size_t)(n_in * n_out));
    float *x = malloc(sizeof(float) * (size_t)(n_in * n_tok));
    float *xr = malloc(sizeof(float) * (size_t)(n_in * n_tok));
    float *y = malloc(sizeof(float) * (size_t)(n_out * n_tok));
    uint8_t *xq = malloc((size_t)n_in * 4);
    int ok = w && wf && x && xr && y && xq;
    for (int64_t i = 0; ok && i < n_in * n_out; i++) wf[i] = nrand();
    for (int64_t i = 0; ok && i < n_in * n_tok; i++) x[i] = nrand();
    for (int64_t o = 0; ok && o < n_out; o++) {
        quant_from_float(ty, wf + o * n_in, w + (size_t)o * row, n_in);
        quant_to_float(ty, w + (size_t)o * row, wf + o * n_in, n_in);
    }
    enum ggml_type vt = quant_vec_dot_type(ty);
    /* Q8_1 carries d*sum(q) as fp16 (the reference's rounding): allow for it. */
    double tol = vt == GGML_TYPE_Q8_1 && n_tok < MATMUL_BLAS_MIN_TOKENS ? 1e-3 : 1e-4;
    for (int64_t t = 0; ok && t < n_tok; t++) { /* the activations as both paths see them */
        if (vt == GGML_TYPE_F32) {
            memcpy(xr + t * n_in, x + t * n_in, sizeof(float) * (size_t)n_in);
        } else {
            quant_from_float(vt, x + t * n_in, xq, n_in);
            quant_to_float(vt, xq, xr + t * n_in, n_in);
        }
    }
    if (ok) matmul(c, ty, w, n_in, n_out, x, n_tok, y);
    for (int64_t t = 0; ok && t < n_tok; t++) {
        for (int64_t o = 0; ok && o < n_out; o++) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < n_in; i++) {
                double p = (double)wf[o * n_in + i] * xr[t * n_in + i];
                ref += p;
                mag += fabs(p);
            }
            if (fabs(y[t * n_out + o] - ref) > tol * mag) {
                fprintf(stderr, "  %s n_tok=%lld y[%lld][%lld] = %g, expected %g\n",
                        ggml_type_info(ty)->name, (long long)n_tok, (long long)t, (long long)o,
                        y[t * n_out + o], ref);
                ok = 0;
            }
        }
    }
    free(w); free(wf); free(x); free(xr); free(y); free(xq);
    return ok;
}

TEST(matmul_matches_reference_for_every_type_and_path) {
    static const enum ggml_type types[] = {
        GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
        GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
        GGML_TYPE_Q6_K, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
    };
    const int64_t toks[] = {1, 3, 6, MATMUL_BLAS_MIN_TOKENS + 5}; /* 6: 4-token kernels + 2 */
    for (int nt = 1; nt <= 3; nt += 2) {
        struct compute *c;
        CHECK_EQ_INT(compute_create(&c, nt, 64, 512), 0);
        CHECK_EQ_INT(compute_n_threads(c), nt);
        for (size_t k = 0; k < sizeof types / sizeof *types; k++)
            for (size_t i = 0; i < sizeof toks / sizeof *toks; i++)
                if (!check_matmul(c, types[k], 512, 75, toks[i])) {
                    compute_destroy(c);
                    CHECK(!"matmul differs from the reference product");
                }
        compute_destroy(c);
    }
}

/* The low-bit types at every batch size from 1 to 40 (the multi-row and 4-token kernels, their
 * remainders, sgemm from MATMUL_BLAS_MIN_TOKENS on), on 1 and 2 threads. */
TEST(matmul_lowbit_types_every_batch_size) {
    static const enum ggml_type types[] = {GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS};
    for (int nt = 1; nt <= 2; nt++) {
        struct compute *c;
        CHECK_EQ_INT(compute_create(&c, nt, 40, 512), 0);
        for (size_t k = 0; k < sizeof types / sizeof *types; k++)
            for (int n_tok = 1; n_tok <= 40; n_tok++)
                if (!check_matmul(c, types[k], 512, 37, n_tok)) {
                    compute_destroy(c);
                    CHECK(!"matmul differs from the reference product");
                }
        compute_destroy(c);
    }
}

TEST(matmul_rejects_bad_create_arguments) {
    struct compute *c = (struct compute *)1;
    CHECK_EQ_INT(compute_create(&c, 0, 16, 256), -ERR_INVAL);
    CHECK(c == NULL);
    CHECK(compute_create(&c, 2, 0, 256) < 0);
    CHECK(compute_create(&c, 2, 16, 0) < 0);
}

struct cover { _Atomic int hits[1000]; _Atomic int calls; };

static void mark(void *arg, int64_t i0, int64_t i1) {
    struct cover *cv = arg;
    atomic_fetch_add(&cv->calls, 1);
    for (int64_t i = i0; i < i1; i++) atomic_fetch_add(&cv->hits[i], 1);
}

TEST(compute_parallel_for_covers_each_index_once) {
    struct compute *c;
    CHECK_EQ_INT(compute_create(&c, 3, 1, 32), 0);
    static struct cover cv;
    const int64_t ns[] = {0, 1, 2, 7, 1000};
    for (int rep = 0; rep < 200; rep++) { /* many back-to-back jobs: the dispatch fast path */
        for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
            memset(&cv, 0, sizeof cv);
            compute_parallel_for(c, ns[k], mark, &cv);
            for (int64_t i = 0; i < 1000; i++)
                if (cv.hits[i] != (i < ns[k])) {
                    compute_destroy(c);
                    CHECK(!"an index was visited other than once");
                }
            if (cv.calls > 3) {
                compute_destroy(c);
                CHECK(!"more calls than threads");
            }
        }
    }
    compute_destroy(c);
}

/* The benchmark's comparison path (one threaded OpenBLAS call) computes the same product as our
 * row tiles. */
TEST(matmul_blas_paths_agree) {
    enum { N_IN = 96, N_OUT = 70, N_TOK = 40 };
    static float w[N_IN * N_OUT], x[N_IN * N_TOK], y1[N_OUT * N_TOK], y2[N_OUT * N_TOK];
    for (int i = 0; i < N_IN * N_OUT; i++) w[i] = nrand();
    for (int i = 0; i < N_IN * N_TOK; i++) x[i] = nrand();
    struct compute *c;
    CHECK_EQ_INT(compute_create(&c, 2, N_TOK, N_IN), 0);
    matmul_path(c, MATMUL_BLAS, GGML_TYPE_F32, w, N_IN, N_OUT, x, N_TOK, y1);
    matmul_path(c, MATMUL_BLAS_THREADED, GGML_TYPE_F32, w, N_IN, N_OUT, x, N_TOK, y2);
    compute_destroy(c);
    for (int i = 0; i < N_OUT * N_TOK; i++) CHECK(fabsf(y1[i] - y2[i]) <= 1e-4f * (1 + fabsf(y1[i])));
}

/* More threads than cores, hundreds of back-to-back jobs: workers are preempted mid-job or miss
 * jobs entirely, and every result must still be the one a single thread computes; the same
 * with every thread yielding its CPU at (almost) every job (compute_set_yield_us). */
TEST(compute_oversubscribed_pool_gives_exact_results) {
    enum { N_IN = 256, N_OUT = 96, N_TOK = 3 };
    static float wf[N_IN * N_OUT], x[N_IN * N_TOK], y1[N_OUT * N_TOK], y[N_OUT * N_TOK];
    static uint8_t w[N_OUT * 34 * (N_IN / 32)];
    for (int i = 0; i < N_IN * N_OUT; i++) wf[i] = nrand();
    for (int i = 0; i < N_IN * N_TOK; i++) x[i] = nrand();
    quant_from_float(GGML_TYPE_Q8_0, wf, w, N_IN * N_OUT);
    struct compute *one, *many;
    CHECK_EQ_INT(compute_create(&one, 1, N_TOK, N_IN), 0);
    matmul(one, GGML_TYPE_Q8_0, w, N_IN, N_OUT, x, N_TOK, y1);
    compute_destroy(one);
    CHECK_EQ_INT(compute_create(&many, 8, N_TOK, N_IN), 0);
    int bad = 0;
    for (int rep = 0; rep < 600 && !bad; rep++) {
        if (rep == 300) compute_set_yield_us(many, 1);
        memset(y, 0, sizeof y);
        matmul(many, GGML_TYPE_Q8_0, w, N_IN, N_OUT, x, N_TOK, y);
        bad = memcmp(y, y1, sizeof y) != 0; /* each row is computed whole by one thread */
    }
    compute_destroy(many);
    CHECK(!bad);
}

static void nested_inner(void *arg, int64_t i0, int64_t i1) { (void)arg; (void)i0; (void)i1; }

static void nested_outer(void *arg, int64_t i0, int64_t i1) {
    compute_parallel_for(arg, 100, nested_inner, NULL); /* not allowed: must abort */
}

/* A compute_parallel_for from inside a callback would corrupt the running job: it aborts. */
TEST(compute_nested_parallel_for_aborts) {
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* the child's assertion message is expected: keep the test output clean */
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        struct compute *c;
        if (compute_create(&c, 2, 1, 32) < 0) _exit(2);
        compute_parallel_for(c, 2, nested_outer, c);
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
}

/* The vector path at any batch size below sgemm's and any thread count gives every output
 * exactly the single-row, single-token vec_dot of the quantized operands: the multi-row and
 * multi-token kernels change the speed, never the numbers. */
TEST(matmul_vector_path_equals_single_dots) {
    static const enum ggml_type types[] = {
        GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q5_0, GGML_TYPE_Q4_1, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K,
        GGML_TYPE_Q5_K, GGML_TYPE_F32, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
    };
    enum { N_IN = 512, N_OUT = 70, MAX_TOK = 9 }; /* 70 rows: groups of 4 and a remainder */
    static float wf[N_IN * N_OUT], x[MAX_TOK * N_IN], y[MAX_TOK * N_OUT];
    static uint8_t w[N_OUT * N_IN * 4], xq[MAX_TOK][N_IN * 4];
    for (int i = 0; i < N_IN * N_OUT; i++) wf[i] = nrand();
    for (int i = 0; i < MAX_TOK * N_IN; i++) x[i] = nrand();
    for (int nt = 1; nt <= 3; nt++) {
        struct compute *c;
        CHECK_EQ_INT(compute_create(&c, nt, MAX_TOK, N_IN), 0);
        for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
            enum ggml_type ty = types[k], vt = quant_vec_dot_type(ty);
            size_t row = ggml_row_size(ty, N_IN);
            quant_from_float(ty, wf, w, (int64_t)N_IN * N_OUT);
            for (int tk = 0; tk < MAX_TOK; tk++) quant_from_float(vt, x + tk * N_IN, xq[tk], N_IN);
            const int n_toks[] = {1, 2, 3, 4, 5, 8, 9};
            for (size_t ti = 0; ti < sizeof n_toks / sizeof *n_toks; ti++) {
                int n_tok = n_toks[ti];
                matmul_path(c, MATMUL_VEC, ty, w, N_IN, N_OUT, x, n_tok, y);
                for (int tk = 0; tk < n_tok; tk++)
                    for (int o = 0; o < N_OUT; o++) {
                        float want = quant_vec_dot(ty, N_IN, w + row * (size_t)o, vt == GGML_TYPE_F32 ? (const void *)(x + tk * N_IN) : xq[tk]);
                        if (y[tk * N_OUT + o] != want) {
                            fprintf(stderr, "  %s threads %d n_tok %d y[%d][%d] = %.9g, vec_dot %.9g\n",
                                    ggml_type_info(ty)->name, nt, n_tok, tk, o, y[tk * N_OUT + o], want);
                            CHECK(!"matmul's vector path differs from vec_dot");
                        }
                    }
            }
        }
        compute_destroy(c);
    }
}

/* With AVX-512 VNNI, Q8_0 batches of MATMUL_GEMM_Q8_MIN_TOKENS and more take the integer GEMM,
 * and so do Q4_0 and Q5_0 batches below MATMUL_BLAS_MIN_TOKENS (rows rewritten as Q8_0): every
 * output exactly the single-token vec_dot (odd token counts, 1-3 pairs and more (tiles of 1, 2
 * and 4 pairs), row counts not a multiple of the 4-row tile nor of a thread's chunks, token
 * counts over one pass of the tile loop; 1 to 3 threads). */
TEST(matmul_q8_0_gemm_equals_single_dots) {
    if (!simd_level_supported(SIMD_AVX512)) SKIP("no AVX-512 VNNI: Q8_0 batches take sgemm");
    enum { N_IN = 256, N_OUT = 133, MAX_TOK = 75 };
    static const enum ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q5_0, GGML_TYPE_Q4_0};
    static float wf[N_IN * N_OUT], x[MAX_TOK * N_IN], y[MAX_TOK * N_OUT];
    static uint8_t w[N_OUT * N_IN * 2], xq[MAX_TOK][N_IN * 2];
    for (int i = 0; i < N_IN * N_OUT; i++) wf[i] = nrand();
    for (int i = 0; i < MAX_TOK * N_IN; i++) x[i] = nrand() * (float)(1 + i % 3);
    for (int tk = 0; tk < MAX_TOK; tk++) quant_from_float(GGML_TYPE_Q8_0, x + tk * N_IN, xq[tk], N_IN);
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        enum ggml_type ty = types[k];
        size_t row = ggml_row_size(ty, N_IN);
        quant_from_float(ty, wf, w, (int64_t)N_IN * N_OUT);
        for (int nt = 1; nt <= 3; nt++) {
            struct compute *c;
            CHECK_EQ_INT(compute_create(&c, nt, MAX_TOK, N_IN), 0);
            const int n_toks[] = {MATMUL_GEMM_Q8_MIN_TOKENS, MATMUL_GEMM_Q8_MIN_TOKENS + 1, 4, 5, 6, 9,
                                  MATMUL_BLAS_MIN_TOKENS - 1, MATMUL_BLAS_MIN_TOKENS, MATMUL_BLAS_MIN_TOKENS + 1, 75};
            for (size_t ti = 0; ti < sizeof n_toks / sizeof *n_toks; ti++) {
                int n_tok = n_toks[ti];
                if (ty != GGML_TYPE_Q8_0 && n_tok >= MATMUL_BLAS_MIN_TOKENS) continue; /* sgemm's numbers */
                matmul(c, ty, w, N_IN, N_OUT, x, n_tok, y);
                for (int tk = 0; tk < n_tok; tk++)
                    for (int o = 0; o < N_OUT; o++) {
                        float want = quant_vec_dot(ty, N_IN, w + row * (size_t)o, xq[tk]);
                        if (y[tk * N_OUT + o] != want) {
                            fprintf(stderr, "  %s threads %d n_tok %d y[%d][%d] = %.9g, vec_dot %.9g\n",
                                    ggml_type_info(ty)->name, nt, n_tok, tk, o, y[tk * N_OUT + o], want);
                            CHECK(!"integer GEMM differs from vec_dot");
                        }
                    }
            }
            compute_destroy(c);
        }
    }
}

/* matmul_multi (uniform: one type for the three matrices) and matmul_multi_types (mixed) give
 * every matrix exactly what its own matmul call gives: on the vector path, where the matrices
 * share one dispatch (row counts that split into chunks unevenly, each matrix a different count;
 * mixed types sharing the Q8_0 activations, Q5_0, Q8_0, Q4_0: Q4_K_M's attention), and on the
 * others, or types that do not share them (Q4_K's Q8_K beside Q8_0), one matmul per matrix; the
 * serving layouts of Q8_0 and Q5_0 (math/q8x16.h) alone at every token count, together
 * (SmolLM2's Q5_0 Q/K beside its Q8_0 V, prompts included) and beside Q5_0 / Q4_0 on their Q8_0
 * activations; Q4_K's layout alone, beside Q6_K on their Q8_K activations (TinyLlama Q4_K_M's
 * Q/K/V), beside GGUF types and beside the other layouts (whose Q8_0 activations it does not
 * share); Q6_K's layout alone, beside Q4_K's (TinyLlama Q4_K_M's Q/K/V in the serving layouts),
 * beside GGUF Q6_K / Q4_K and beside Q8_0's layout; at token counts on and off the vector path,
 * on 1 to 3 threads. */
TEST(matmul_multi_equals_separate_matmuls) {
    enum { N_IN = 512, MAX_TOK = 40, N_MATS = 3 };
    static const enum ggml_type mixes[][N_MATS] = {
        {GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, GGML_TYPE_Q8_0}, {GGML_TYPE_Q4_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_0},
        {GGML_TYPE_Q4_K, GGML_TYPE_Q4_K, GGML_TYPE_Q4_K}, {GGML_TYPE_Q6_K, GGML_TYPE_Q6_K, GGML_TYPE_Q6_K},
        {GGML_TYPE_F16, GGML_TYPE_F16, GGML_TYPE_F16},    {GGML_TYPE_Q5_0, GGML_TYPE_Q5_0, GGML_TYPE_Q8_0},
        {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q5_0}, {GGML_TYPE_Q4_K, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K},
        {UVLM_TYPE_Q8_0_X16, UVLM_TYPE_Q8_0_X16, UVLM_TYPE_Q8_0_X16},
        {GGML_TYPE_Q5_0, GGML_TYPE_Q5_0, UVLM_TYPE_Q8_0_X16}, {UVLM_TYPE_Q8_0_X16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K},
        {UVLM_TYPE_Q5_0_X16, UVLM_TYPE_Q5_0_X16, UVLM_TYPE_Q5_0_X16},
        {UVLM_TYPE_Q5_0_X16, UVLM_TYPE_Q5_0_X16, UVLM_TYPE_Q8_0_X16},
        {UVLM_TYPE_Q5_0_X16, GGML_TYPE_Q8_0, GGML_TYPE_Q5_0},
        {UVLM_TYPE_Q4_K_X16, UVLM_TYPE_Q4_K_X16, UVLM_TYPE_Q4_K_X16},
        {UVLM_TYPE_Q4_K_X16, UVLM_TYPE_Q4_K_X16, GGML_TYPE_Q6_K}, {UVLM_TYPE_Q4_K_X16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K},
        {UVLM_TYPE_Q4_K_X16, UVLM_TYPE_Q8_0_X16, UVLM_TYPE_Q5_0_X16},
        {UVLM_TYPE_Q6_K_X16, UVLM_TYPE_Q6_K_X16, UVLM_TYPE_Q6_K_X16},
        {UVLM_TYPE_Q4_K_X16, UVLM_TYPE_Q4_K_X16, UVLM_TYPE_Q6_K_X16}, {UVLM_TYPE_Q6_K_X16, GGML_TYPE_Q6_K, GGML_TYPE_Q4_K},
        {UVLM_TYPE_Q6_K_X16, UVLM_TYPE_Q8_0_X16, GGML_TYPE_Q6_K}};
    static const int n_outs[N_MATS] = {70, 33, 131};
    static float wf[N_IN * 131], x[MAX_TOK * N_IN], y[N_MATS][MAX_TOK * 131], want[MAX_TOK * 131];
    static uint8_t w[N_MATS][131 * N_IN * 4];
    for (int i = 0; i < MAX_TOK * N_IN; i++) x[i] = nrand();
    for (int nt = 1; nt <= 3; nt++) {
        struct compute *c;
        CHECK_EQ_INT(compute_create(&c, nt, MAX_TOK, N_IN), 0);
        for (size_t k = 0; k < sizeof mixes / sizeof *mixes; k++) {
            const enum ggml_type *ty = mixes[k];
            bool uniform = ty[0] == ty[1] && ty[1] == ty[2], x16 = false;
            for (int m = 0; m < N_MATS; m++)
                x16 = x16 || ty[m] == UVLM_TYPE_Q8_0_X16 || ty[m] == UVLM_TYPE_Q5_0_X16 || ty[m] == UVLM_TYPE_Q4_K_X16 ||
                      ty[m] == UVLM_TYPE_Q6_K_X16;
            if (x16 && !q8x16_supported()) continue; /* the loader keeps Q8_0 / Q5_0 / Q4_K / Q6_K as they are there */
            struct matmul_out outs[N_MATS];
            for (int m = 0; m < N_MATS; m++) {
                for (int i = 0; i < N_IN * n_outs[m]; i++) wf[i] = nrand();
                if (ty[m] == UVLM_TYPE_Q8_0_X16) {
                    quant_from_float(GGML_TYPE_Q8_0, wf, w[m], (int64_t)N_IN * n_outs[m]);
                    CHECK_EQ_INT(q8x16_repack(w[m], N_IN, n_outs[m]), 0);
                } else if (ty[m] == UVLM_TYPE_Q5_0_X16) {
                    quant_from_float(GGML_TYPE_Q5_0, wf, w[m], (int64_t)N_IN * n_outs[m]);
                    CHECK_EQ_INT(q5x16_repack(w[m], N_IN, n_outs[m]), 0);
                } else if (ty[m] == UVLM_TYPE_Q4_K_X16) {
                    quant_from_float(GGML_TYPE_Q4_K, wf, w[m], (int64_t)N_IN * n_outs[m]);
                    CHECK_EQ_INT(q4kx16_repack(w[m], N_IN, n_outs[m]), 0);
                } else if (ty[m] == UVLM_TYPE_Q6_K_X16) {
                    quant_from_float(GGML_TYPE_Q6_K, wf, w[m], (int64_t)N_IN * n_outs[m]);
                    CHECK_EQ_INT(q6kx16_repack(w[m], N_IN, n_outs[m]), 0);
                } else {
                    quant_from_float(ty[m], wf, w[m], (int64_t)N_IN * n_outs[m]);
                }
                outs[m] = (struct matmul_out){.w = w[m], .n_out = n_outs[m], .y = y[m]};
            }
            const int n_toks[] = {1, 2, 3, 5, 9, MAX_TOK};
            for (size_t ti = 0; ti < sizeof n_toks / sizeof *n_toks; ti++) {
                int n_tok = n_toks[ti];
                for (int m = 0; m < N_MATS; m++)
                    for (int i = 0; i < n_tok * n_outs[m]; i++) y[m][i] = NAN;
                if (uniform) matmul_multi(c, ty[0], N_IN, x, n_tok, N_MATS, outs);
                else matmul_multi_types(c, ty, N_IN, x, n_tok, N_MATS, outs);
                for (int m = 0; m < N_MATS; m++) {
                    matmul(c, ty[m], w[m], N_IN, n_outs[m], x, n_tok, want);
                    if (memcmp(want, y[m], sizeof(float) * (size_t)(n_tok * n_outs[m]))) {
                        fprintf(stderr, "  mix %zu threads %d n_tok %d matrix %d differs\n", k, nt, n_tok, m);
                        CHECK(!"matmul_multi / matmul_multi_types differs from matmul");
                    }
                }
            }
        }
        compute_destroy(c);
    }
}
