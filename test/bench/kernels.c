/* kernels: the math layer's benchmark (scripts/bench.d/30-kernels). Prints this machine's memory
 * read bandwidth and, for a 2048 -> 5632 weight matrix of each type, the matvec throughput in GB/s
 * of weights read (1 token; enough copies of the matrix to defeat the caches, as a model's layers
 * do) and the batched throughput in GFLOPS (512 tokens through dequantize + sgemm), then the
 * batch size where sgemm overtakes the vector kernels.
 *
 *   build/bench/kernels [--threads N] [--quick]
 *   build/bench/kernels --small-batch [--threads N]
 *       [--type q8_0|q4_k|q6_k|q5_0|q2_k|q3_k|iq4_nl|iq4_xs|q8_0x16|q5_0x16|q4_kx16|q6_kx16]
 *       only the decode-step case: matmuls of 1/2/4/8/16 tokens (and 32/48/64: whole tiles of 16 on
 *       the AMX kernels where the CPU has them and they are faster, math/q8x16.h's
 *       *_AMX_MIN_TOKENS; UVLM_NO_AMX=1 for the vector kernels) on SmolLM2-135M's shapes
 *       (576x576, 576x192, 576x1536, 1536x576, 576x49152) and TinyLlama-1.1B's (2048x2048,
 *       2048x5632, 5632x2048; the 256-element types' rows fit only those and 1536), weights cycled
 *       through enough copies (about 64 MB per shape) that they come from L3 or memory as a
 *       model's layers do; prints
 *       the best wall and CPU microseconds per matmul (CPU time: robust on a busy machine with
 *       --threads 1) and int8 GMAC/s. q8_0x16 / q5_0x16 / q4_kx16 / q6_kx16: the serving layouts of
 *       math/q8x16.h (shapes whose rows are not whole blocks of the type print n/a).
 *   build/bench/kernels --vnni-peak [--threads N]
 *       the int8 peak of this CPU: vpdpbusd (512-bit) throughput on N threads, in GMAC/s
 *       ("vnni_peak G ... per_cpu_second C": C per second of one core's CPU time, robust to a
 *       busy machine), what scripts/bench.d/40-forward divides the prompt speed by.
 *   build/bench/kernels --prompt-paths
 *       the K-quant and low-bit types' prompts of 256 tokens through the vector kernels and
 *       through dequantize + sgemm (matmul_path MATMUL_VEC / MATMUL_BLAS), one thread, CPU time:
 *       where matmul.c's matmul_vec_prompts should send them.
 */
#include "common/hugemem.h"
#include "math/matmul.h"
#include "math/quant.h"
#include "math/kernels.h"
#include "math/q8x16.h"

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N_IN 2048
#define N_OUT 5632
#define STREAM_BYTES ((size_t)1 << 30) /* far beyond any L3 */
#define MATVEC_BYTES ((size_t)384 << 20)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct stream { const uint8_t *buf; size_t bytes; double sink[64]; };

__attribute__((target("avx2"))) static void stream_read(void *arg, int64_t i0, int64_t i1) {
    struct stream *s = arg;
    __m256i acc0 = _mm256_setzero_si256(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    for (int64_t i = i0; i < i1; i++) {
        const __m256i *p = (const __m256i *)(s->buf + (size_t)i * 128);
        acc0 = _mm256_xor_si256(acc0, _mm256_load_si256(p));
        acc1 = _mm256_xor_si256(acc1, _mm256_load_si256(p + 1));
        acc2 = _mm256_xor_si256(acc2, _mm256_load_si256(p + 2));
        acc3 = _mm256_xor_si256(acc3, _mm256_load_si256(p + 3));
    }
    __m256i acc = _mm256_xor_si256(_mm256_xor_si256(acc0, acc1), _mm256_xor_si256(acc2, acc3));
    s->sink[(i0 / 1024) % 64] += (double)_mm256_extract_epi64(acc, 0);
}

/* Best of several full passes over a 1 GiB buffer, all compute threads reading their share. */
static double read_bandwidth(struct compute *c) {
    struct stream s = {.bytes = STREAM_BYTES};
    uint8_t *buf = hugemem_alloc(STREAM_BYTES); /* huge pages, as the model's weights (gguf.c) */
    if (!buf) return 0;
    memset(buf, 1, STREAM_BYTES);
    s.buf = buf;
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        compute_parallel_for(c, (int64_t)(STREAM_BYTES / 128), stream_read, &s);
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    hugemem_free(buf, STREAM_BYTES);
    return STREAM_BYTES / best / 1e9;
}

static void nop_range(void *arg, int64_t i0, int64_t i1) { (void)arg; (void)i0; (void)i1; }

static float *random_floats(int64_t n, unsigned seed) {
    float *x = malloc(sizeof(float) * (size_t)n);
    srand(seed);
    for (int64_t i = 0; i < n; i++) x[i] = (float)rand() / RAND_MAX * 2 - 1;
    return x;
}

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* --prompt-paths: see the top of the file. */
static int prompt_paths(void) {
    enum { NT = 256 };
    static const enum ggml_type types[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
                                           GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS};
    struct compute *c;
    if (compute_create(&c, 1, NT, N_IN) < 0) return 1;
    float *wf = random_floats((int64_t)N_IN * N_OUT, 1), *x = random_floats((int64_t)NT * N_IN, 2);
    float *y = malloc(sizeof(float) * NT * N_OUT);
    printf("prompt paths, 1 thread, %dx%d x %d tokens: ms of CPU per matmul (best of 3), vector kernels / "
           "dequant+sgemm\n", N_IN, N_OUT, NT);
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        enum ggml_type ty = types[k];
        size_t bytes = ggml_row_size(ty, N_IN) * N_OUT;
        uint8_t *w = malloc(bytes);
        quant_from_float(ty, wf, w, (int64_t)N_IN * N_OUT);
        double best[2] = {1e9, 1e9};
        for (int rep = 0; rep < 3; rep++)
            for (int p = 0; p < 2; p++) {
                double t0 = cpu_now();
                matmul_path(c, p ? MATMUL_BLAS : MATMUL_VEC, ty, w, N_IN, N_OUT, x, NT, y);
                double dt = cpu_now() - t0;
                if (dt < best[p]) best[p] = dt;
            }
        printf("  %-6s %7.1f / %7.1f\n", ggml_type_info(ty)->name, best[0] * 1e3, best[1] * 1e3);
        free(w);
    }
    free(wf);
    free(x);
    free(y);
    compute_destroy(c);
    return 0;
}

/* --vnni-peak: this CPU's int8 peak, what the prompt kernels (q8x16.h, gemm_q8.h) work toward:
 * each thread runs VNNI_CHAINS independent chains of 512-bit vpdpbusd (64 byte products each),
 * enough to cover the instruction's latency, so only its throughput counts. */
#define VNNI_CHAINS 12
#define VNNI_ITERS 20000000
struct vnni { const int32_t *in; int64_t sink[64]; };

__attribute__((target("avx512f,avx512vnni"))) static void vnni_chains(void *arg, int64_t i0, int64_t i1) {
    struct vnni *v = arg;
    for (int64_t i = i0; i < i1; i++) {
        const __m512i a = _mm512_set1_epi32(v->in[0]), b = _mm512_set1_epi32(v->in[1]); /* unknown to the compiler */
        __m512i acc[VNNI_CHAINS];
        for (int k = 0; k < VNNI_CHAINS; k++) acc[k] = _mm512_set1_epi32(k);
        for (int64_t it = 0; it < VNNI_ITERS; it++)
#pragma GCC unroll 12
            for (int k = 0; k < VNNI_CHAINS; k++) acc[k] = _mm512_dpbusd_epi32(acc[k], a, b);
        __m512i s = acc[0];
        for (int k = 1; k < VNNI_CHAINS; k++) s = _mm512_add_epi32(s, acc[k]);
        v->sink[i % 64] += _mm512_reduce_add_epi32(s);
    }
}

static int vnni_peak(int n_threads) {
    if (!simd_level_supported(SIMD_AVX512)) {
        printf("vnni_peak n/a: no AVX-512 VNNI\n");
        return 0;
    }
    struct compute *c;
    if (compute_create(&c, n_threads, 1, 1) < 0) return 1;
    static volatile int32_t in[2] = {0x01020304, 0x05060708};
    struct vnni v = {.in = (const int32_t *)in};
    double best = 1e9, best_cpu = 1e9;
    for (int rep = 0; rep < 3; rep++) { /* one item per thread; best of three against a busy machine */
        double t0 = now(), c0 = cpu_now();
        compute_parallel_for(c, n_threads, vnni_chains, &v);
        double dt = now() - t0, dc = cpu_now() - c0;
        if (dt < best) best = dt;
        if (dc < best_cpu) best_cpu = dc;
    }
    double macs = (double)n_threads * VNNI_ITERS * VNNI_CHAINS * 64;
    /* per CPU second: what one core gives while it runs, robust to other work on the machine */
    printf("vnni_peak %.1f GMAC/s (%d threads) per_cpu_second %.1f GMAC\n", macs / best / 1e9, n_threads,
           macs / best_cpu / 1e9);
    compute_destroy(c);
    return 0;
}

/* --small-batch: see the top of the file. */
static int small_batch(int n_threads, enum ggml_type ty) {
    /* the serving layouts: quantized as their GGUF type, then each copy rewritten */
    enum ggml_type file_ty = ty == UVLM_TYPE_Q8_0_X16   ? GGML_TYPE_Q8_0
                             : ty == UVLM_TYPE_Q5_0_X16 ? GGML_TYPE_Q5_0
                             : ty == UVLM_TYPE_Q4_K_X16 ? GGML_TYPE_Q4_K
                             : ty == UVLM_TYPE_Q6_K_X16 ? GGML_TYPE_Q6_K
                                                        : ty;
    static const int shapes[][2] = {{576, 576}, {576, 192}, {576, 1536}, {1536, 576}, {576, 49152},
                                    {2048, 2048}, {2048, 5632}, {5632, 2048}};
    static const int toks[] = {1, 2, 4, 8, 16, 32, 48, 64};
    struct compute *c;
    if (compute_create(&c, n_threads, 512, 5632) < 0) return 1;
    float *x = random_floats((int64_t)64 * 5632, 2);
    float *y = malloc(sizeof(float) * 64 * 49152);
    printf("small batches, %s, %d threads: us per matmul, best wall / best CPU (all threads), GMAC/s of CPU\n",
           ty == file_ty                ? ggml_type_info(ty)->name
           : ty == UVLM_TYPE_Q8_0_X16 ? "q8_0x16"
           : ty == UVLM_TYPE_Q5_0_X16 ? "q5_0x16"
           : ty == UVLM_TYPE_Q4_K_X16 ? "q4_kx16"
                                      : "q6_kx16",
           n_threads);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int n_in = shapes[s][0], n_out = shapes[s][1];
        size_t bytes = ggml_row_size(file_ty, (uint64_t)n_in) * (size_t)n_out;
        if (bytes == 0) { /* rows of n_in do not divide into the type's blocks (Q4_K: 256) */
            printf("  %5dx%-5d  n/a: %d is not a whole number of %s blocks\n", n_in, n_out, n_in,
                   ggml_type_info(file_ty)->name);
            continue;
        }
        int copies = (int)(((size_t)64 << 20) / bytes) + 1;
        float *wf = random_floats((int64_t)n_in * n_out, 1 + (unsigned)s);
        uint8_t *w = malloc(bytes * (size_t)copies);
        if (!w || !wf || !x || !y) return 1;
        quant_from_float(file_ty, wf, w, (int64_t)n_in * n_out);
        for (int i = 1; i < copies; i++) memcpy(w + bytes * i, w, bytes);
        for (int i = 0; ty != file_ty && i < copies; i++)
            if ((ty == UVLM_TYPE_Q8_0_X16   ? q8x16_repack
                 : ty == UVLM_TYPE_Q5_0_X16 ? q5x16_repack
                 : ty == UVLM_TYPE_Q4_K_X16 ? q4kx16_repack
                                            : q6kx16_repack)(w + bytes * i, n_in, n_out) < 0)
                return 1;
        free(wf);
        printf("  %5dx%-5d", n_in, n_out);
        for (size_t k = 0; k < sizeof toks / sizeof *toks; k++) {
            int n_tok = toks[k];
            double best = 1e9, best_cpu = 1e9;
            for (int rep = 0; rep < 5; rep++) {
                double t0 = now(), c0 = cpu_now();
                for (int i = 0; i < copies; i++) matmul(c, ty, w + bytes * i, n_in, n_out, x, n_tok, y);
                double dt = (now() - t0) / copies, dc = (cpu_now() - c0) / copies;
                if (dt < best) best = dt;
                if (dc < best_cpu) best_cpu = dc;
            }
            printf("  %d: %.1f/%.1f %.0f", n_tok, best * 1e6, best_cpu * 1e6,
                   (double)n_in * n_out * n_tok / best_cpu / 1e9);
        }
        printf("\n");
        fflush(stdout);
        free(w);
    }
    free(x);
    free(y);
    compute_destroy(c);
    return 0;
}

int main(int argc, char **argv) {
    int n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int quick = 0, small = 0, paths = 0, peak = 0;
    enum ggml_type small_type = GGML_TYPE_Q8_0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--small-batch")) small = 1;
        else if (!strcmp(argv[i], "--prompt-paths")) paths = 1;
        else if (!strcmp(argv[i], "--vnni-peak")) peak = 1;
        else if (!strcmp(argv[i], "--type") && i + 1 < argc) {
            const char *t = argv[++i];
            small_type = !strcmp(t, "q4_k") ? GGML_TYPE_Q4_K : !strcmp(t, "q6_k") ? GGML_TYPE_Q6_K
                       : !strcmp(t, "q5_0") ? GGML_TYPE_Q5_0 : !strcmp(t, "q8_0x16") ? UVLM_TYPE_Q8_0_X16
                       : !strcmp(t, "q5_0x16") ? UVLM_TYPE_Q5_0_X16 : !strcmp(t, "q4_kx16") ? UVLM_TYPE_Q4_K_X16
                       : !strcmp(t, "q6_kx16") ? UVLM_TYPE_Q6_K_X16
                       : !strcmp(t, "q2_k") ? GGML_TYPE_Q2_K : !strcmp(t, "q3_k") ? GGML_TYPE_Q3_K
                       : !strcmp(t, "iq4_nl") ? GGML_TYPE_IQ4_NL : !strcmp(t, "iq4_xs") ? GGML_TYPE_IQ4_XS
                       : GGML_TYPE_Q8_0;
        }
    }
    if (peak) return vnni_peak(n_threads);
    if (small) return small_batch(n_threads, small_type);
    if (paths) return prompt_paths();
    const char *core = getenv("OPENBLAS_CORETYPE");
    double load = -1;
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf", &load) != 1) load = -1;
        fclose(la);
    }
    printf("kernels: %d threads, SIMD %s, OpenBLAS core %s, load average %.1f on %ld cores%s\n",
           n_threads, simd_level_name(simd_level_best()), core ? core : "(default)", load,
           sysconf(_SC_NPROCESSORS_ONLN), quick ? " (quick: fewer repetitions)" : "");
    struct compute *c;
    if (compute_create(&c, n_threads, 512, N_IN) < 0) return 1;
    double bw = read_bandwidth(c);
    printf("memory read bandwidth: %.1f GB/s (1 GiB streamed, best of 5)\n\n", bw);

    static const enum ggml_type types[] = {
        GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_Q5_K, GGML_TYPE_Q4_0,
        GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_IQ4_NL,
        GGML_TYPE_IQ4_XS, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_F32,
    };
    float *wf = random_floats((int64_t)N_IN * N_OUT, 1);
    float *x = random_floats((int64_t)512 * N_IN, 2);
    float *y = malloc(sizeof(float) * 512 * N_OUT);
    printf("%-6s %10s %12s %9s %12s\n", "type", "MB/matrix", "matvec GB/s", "% of bw", "pp512 GFLOPS");
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        enum ggml_type ty = types[k];
        size_t bytes = ggml_row_size(ty, N_IN) * N_OUT;
        int copies = (int)((MATVEC_BYTES + bytes - 1) / bytes);
        uint8_t *w = malloc(bytes * (size_t)copies);
        if (!w) return 1;
        quant_from_float(ty, wf, w, (int64_t)N_IN * N_OUT);
        for (int i = 1; i < copies; i++) memcpy(w + bytes * i, w, bytes);

        /* matvec: cycle through the copies so every read comes from memory */
        int passes = quick ? 2 : 6;
        double t0 = now();
        for (int p = 0; p < passes; p++)
            for (int i = 0; i < copies; i++) matmul(c, ty, w + bytes * i, N_IN, N_OUT, x, 1, y);
        double gbs = (double)bytes * copies * passes / (now() - t0) / 1e9;

        int reps = quick ? 1 : 3;
        matmul(c, ty, w, N_IN, N_OUT, x, 512, y); /* warm up */
        t0 = now();
        for (int r = 0; r < reps; r++) matmul(c, ty, w + bytes * (r % copies), N_IN, N_OUT, x, 512, y);
        double gflops = 2.0 * 512 * N_IN * N_OUT * reps / (now() - t0) / 1e9;
        printf("%-6s %10.1f %12.1f %8.0f%% %12.0f\n", ggml_type_info(ty)->name, bytes / 1e6, gbs,
               100 * gbs / bw, gflops);
        fflush(stdout);
        free(w);
    }

    /* The alternative to our tiles: one sgemm on OpenBLAS's own threads (F32, no dequantization). */
    {
        size_t bytes = sizeof(float) * N_IN * N_OUT;
        float *w = malloc(bytes);
        memcpy(w, wf, bytes);
        double best[2] = {1e9, 1e9};
        for (int r = 0; r < (quick ? 2 : 4); r++)
            for (int k = 0; k < 2; k++) {
                double t0 = now();
                matmul_path(c, k ? MATMUL_BLAS_THREADED : MATMUL_BLAS, GGML_TYPE_F32, w, N_IN, N_OUT, x, 512, y);
                double dt = now() - t0;
                if (dt < best[k]) best[k] = dt;
            }
        double flop = 2.0 * 512 * N_IN * N_OUT;
        printf("\nf32 512x%dx%d sgemm: our row tiles (1 OpenBLAS thread each) %.0f GFLOPS, "
               "one call on %d OpenBLAS threads %.0f GFLOPS\n", N_OUT, N_IN, flop / best[0] / 1e9,
               n_threads, flop / best[1] / 1e9);
        free(w);
    }

    /* Where sgemm overtakes the vector kernels (Q8_0 and Q4_K; one matrix, cache-warm). */
    printf("\nbatch size crossover (ms per 2048x5632 matmul, vector kernels / dequant+sgemm"
           "%s):\n", simd_level_supported(SIMD_AVX512) ? " / q8_0 integer GEMM" : "");
    for (size_t k = 0; k < 2; k++) {
        enum ggml_type ty = types[k];
        size_t bytes = ggml_row_size(ty, N_IN) * N_OUT;
        uint8_t *w = malloc(bytes);
        quant_from_float(ty, wf, w, (int64_t)N_IN * N_OUT);
        printf("  %-5s", ggml_type_info(ty)->name);
        for (int n_tok = 4; n_tok < MATMUL_BLAS_MIN_TOKENS * 2; n_tok *= 2) {
            double tv = -1, tb;
            int reps = quick ? 2 : 5;
            if (n_tok < MATMUL_BLAS_MIN_TOKENS) {
                double t0 = now();
                for (int r = 0; r < reps; r++) matmul_path(c, MATMUL_VEC, ty, w, N_IN, N_OUT, x, n_tok, y);
                tv = (now() - t0) / reps * 1e3;
            }
            double t0 = now();
            for (int r = 0; r < reps; r++) matmul_path(c, MATMUL_BLAS, ty, w, N_IN, N_OUT, x, n_tok, y);
            tb = (now() - t0) / reps * 1e3;
            if (tv >= 0) printf("  %d: %.2f/%.2f", n_tok, tv, tb);
            else printf("  %d: -/%.2f", n_tok, tb);
            if (ty == GGML_TYPE_Q8_0 && simd_level_supported(SIMD_AVX512)) { /* /integer GEMM */
                t0 = now();
                for (int r = 0; r < reps; r++) matmul_path(c, MATMUL_GEMM_Q8, ty, w, N_IN, N_OUT, x, n_tok, y);
                printf("/%.2f", (now() - t0) / reps * 1e3);
            }
        }
        printf("\n");
        free(w);
    }
    /* Dispatch cost: an empty compute_parallel_for, back to back (workers spinning). */
    {
        int reps = quick ? 20000 : 200000;
        double t0 = now();
        for (int r = 0; r < reps; r++) compute_parallel_for(c, n_threads, nop_range, NULL);
        printf("\ndispatch: %.2f us per empty compute_parallel_for on %d threads\n",
               (now() - t0) / reps * 1e6, n_threads);
    }
    free(wf);
    free(x);
    free(y);
    compute_destroy(c);
    return 0;
}
