/* forward_bench.c: forward-pass speed of one model: pp512 (one batch of 512 prompt tokens) and
 * tg64 (64 tokens generated one at a time from an empty context, as llama-bench measures it; and
 * again after the 512 prompt tokens: tg64_d512), in tokens/s, best of `reps` runs after a
 * warm-up; or, with --bandwidth, this machine's memory read bandwidth (all threads reading a 1 GiB
 * buffer), which bounds tg: every generated token reads every weight once.
 *
 *   build/bench/forward_bench MODEL [--threads N] [--reps R]
 *   build/bench/forward_bench --bandwidth [--threads N]
 *   build/bench/forward_bench MODEL --tg-only R [--depth D]  (for profiling decode: a prompt of
 *                                                  D (512) tokens, in batches of 512, then R x 64
 *                                                  decode steps at D..D+63; prints "tg64 T
 *                                                  fastest_step_ms S", S robust to a busy machine)
 *   build/bench/forward_bench MODEL --pp-only R    (for profiling prompts: R prompts of 512; "pp512 T")
 *   build/bench/forward_bench MODEL --rows K [--reps R]  (a server's decode steps: K sequences at
 *                                                  different positions (prompts of 40 + 13 s tokens),
 *                                                  R x 64 steps of one token each, every row wanting
 *                                                  logits; prints "rows K step_ms S per_row_ms P
 *                                                  mean_step_ms M cpu_step_ms C", S the fastest step,
 *                                                  C the least process CPU time of a step: with
 *                                                  --threads 1, robust to a busy machine)
 *   build/bench/forward_bench MODEL --prefill N [--step S] [--reps R]  (a server reading a long
 *                                                  prompt: N tokens in steps of S (512), best of R;
 *                                                  prints "prefill N step S ms T cpu_ms C
 *                                                  last_step_ms L last_step_cpu_ms LC", with
 *                                                  --threads 1 the CPU times are robust to a busy
 *                                                  machine; the context is N)
 * --kv-type f16|q8_0 picks the KV cells' type (K and V; memory/kv.h), f16 by default.
 * The model is loaded as the server loads it (model_options.serving_layout); --gguf-layout keeps
 * Q8_0 and Q5_0 matrices as the file has them (the reference's order, for comparison).
 * Output (one line, for scripts/bench.d/40-forward): "pp512 T tg64 T tg64_d512 T weights_mb M
 * layer_mmac A" (A: millions of multiply-adds of a prompt token in the layers' matrices) or
 * "bandwidth G".
 */
#include "common/err.h"
#include "common/hugemem.h"
#include "math/matmul.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BW_BYTES ((size_t)1 << 30)

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Multiply-adds of a prompt token in the layers' matrices (a prompt's one row of logits aside):
 * pp512 x this over the CPU's int8 peak is the share of the peak the prompt reaches. */
static double layer_macs(const struct model *m) {
    double macs = 0;
    for (int32_t i = 0; i < m->hp.n_layer; i++) {
        const struct model_layer *L = &m->layers[i];
        const struct model_weight *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t k = 0; k < sizeof w / sizeof *w; k++) macs += (double)w[k]->n_in * (double)w[k]->n_out;
    }
    return macs;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct bw { const uint64_t *buf; uint64_t sink[64]; };

static void bw_read(void *arg, int64_t i0, int64_t i1) {
    struct bw *b = arg;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int64_t i = i0 * 4; i < i1 * 4; i += 4) {
        a0 += b->buf[i];
        a1 += b->buf[i + 1];
        a2 += b->buf[i + 2];
        a3 += b->buf[i + 3];
    }
    b->sink[(i0 >> 10) % 64] += a0 ^ a1 ^ a2 ^ a3;
}

static double bandwidth(int n_threads) {
    struct compute *c;
    /* in huge pages, as the model's weights (gguf.c): what this machine delivers to them */
    uint64_t *buf = hugemem_alloc(BW_BYTES);
    if (!buf) return 0;
    if (compute_create(&c, n_threads, 1, 1) < 0) {
        hugemem_free(buf, BW_BYTES);
        return 0;
    }
    memset(buf, 1, BW_BYTES);
    struct bw b = {.buf = buf};
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        compute_parallel_for(c, (int64_t)(BW_BYTES / 32), bw_read, &b);
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    compute_destroy(c);
    hugemem_free(buf, BW_BYTES);
    return (double)BW_BYTES / best / 1e9;
}

/* 64 decode steps of one token each at positions p0 .. p0 + 63 of sequence 0: tokens/s. */
static int gen64(const struct model *m, struct forward_ctx *fc, struct memory *mem, struct batch *b, int32_t p0,
                 double *tg) {
    int rc = 0;
    double t0 = now();
    for (int32_t i = 0; i < 64 && rc == 0; i++) {
        batch_clear(b);
        batch_add(b, (int32_t)(i * 97 % m->hp.n_vocab), p0 + i, 0, true);
        rc = memory_reserve(mem, b);
        if (rc == 0) rc = model_forward(m, fc, mem, b);
    }
    *tg = 64 / (now() - t0);
    return rc;
}

/* tg64 as llama-bench defines it (64 tokens generated from an empty context), then pp512 (one
 * batch of 512 tokens) and 64 tokens generated after it (tg64 at depth 512: each step also reads
 * 512..575 cells of KV per layer). */
static int run(const struct model *m, struct forward_ctx *fc, struct memory *mem, struct batch *b, double *pp,
               double *tg, double *tg_d512) {
    int rc = gen64(m, fc, mem, b, 0, tg);
    memory_seq_rm(mem, 0, 0, -1);
    uint64_t x = 12345;
    batch_clear(b);
    for (int32_t i = 0; i < 512; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        batch_add(b, (int32_t)((x >> 33) % (uint64_t)m->hp.n_vocab), i, 0, i == 511);
    }
    double t0 = now();
    if (rc == 0) rc = memory_reserve(mem, b);
    if (rc == 0) rc = model_forward(m, fc, mem, b);
    *pp = 512 / (now() - t0);
    if (rc == 0) rc = gen64(m, fc, mem, b, 512, tg_d512);
    memory_seq_rm(mem, 0, 0, -1);
    return rc;
}

/* K sequences' prompts (sequence s: 40 + 13 s tokens, so positions differ), then reps x 64 steps
 * of one decode token per sequence, each wanting logits (the server's decode step). */
static int run_rows(const struct model *m, struct forward_ctx *fc, struct memory *mem, struct batch *b, int k,
                    int reps, double *best_step, double *mean_step, double *cpu_step) {
    int rc = 0;
    *best_step = 1e9;
    *cpu_step = 1e9;
    int32_t len[64];
    for (int s = 0; s < k && rc == 0; s++) {
        len[s] = 40 + 13 * s;
        batch_clear(b);
        for (int32_t i = 0; i < len[s]; i++) batch_add(b, (int32_t)((i * 31 + s * 7) % m->hp.n_vocab), i, s, false);
        rc = memory_reserve(mem, b);
        if (rc == 0) rc = model_forward(m, fc, mem, b);
    }
    double t0 = now();
    for (int r = 0; r < reps && rc == 0; r++) {
        for (int32_t i = 0; i < 64 && rc == 0; i++) {
            double s0 = now(), c0 = cpu_now();
            batch_clear(b);
            for (int s = 0; s < k; s++) batch_add(b, (int32_t)((i * 97 + s) % m->hp.n_vocab), len[s] + i, s, true);
            rc = memory_reserve(mem, b);
            if (rc == 0) rc = model_forward(m, fc, mem, b);
            double ds = now() - s0, dc = cpu_now() - c0;
            if (ds < *best_step) *best_step = ds;
            if (dc < *cpu_step) *cpu_step = dc;
        }
        for (int s = 0; s < k; s++) /* a recurrent state cannot go back: it goes on */
            if (memory_seq_rm(mem, s, len[s], -1) < 0) len[s] += 64;
    }
    *mean_step = (now() - t0) / (64.0 * reps);
    return rc;
}

/* One prompt of n tokens in steps of `step` (the last token wants logits): wall and process CPU
 * time of the whole prompt and of its last step. */
static int run_prefill(const struct model *m, struct forward_ctx *fc, struct memory *mem, struct batch *b, int32_t n,
                       int32_t step, double *wall, double *cpu, double *last_wall, double *last_cpu) {
    int rc = 0;
    double t0 = now(), c0 = cpu_now();
    for (int32_t p0 = 0; p0 < n && rc == 0; p0 += step) {
        double s0 = now(), sc0 = cpu_now();
        batch_clear(b);
        for (int32_t i = p0; i < n && i < p0 + step; i++) batch_add(b, (int32_t)(i * 31 % m->hp.n_vocab), i, 0, i == n - 1);
        rc = memory_reserve(mem, b);
        if (rc == 0) rc = model_forward(m, fc, mem, b);
        *last_wall = now() - s0;
        *last_cpu = cpu_now() - sc0;
    }
    *wall = now() - t0;
    *cpu = cpu_now() - c0;
    memory_seq_rm(mem, 0, 0, -1);
    return rc;
}

/* A prompt of `depth` tokens once (none at 0), then reps times 64 decode steps at positions
 * depth .. depth + 63 (their cells removed after each round; a memory without partial removal
 * goes on at depth + 64 r instead): a profile of this is a profile of decode. */
static int run_tg_only(const struct model *m, struct forward_ctx *fc, struct memory *mem, struct batch *b,
                       int32_t depth, int reps, double *tg, double *best_step) {
    *best_step = 1e9;
    int rc = 0;
    for (int32_t p0 = 0; p0 < depth && rc == 0; p0 += 512) {
        batch_clear(b);
        for (int32_t i = p0; i < depth && i < p0 + 512; i++)
            batch_add(b, (int32_t)(i * 31 % m->hp.n_vocab), i, 0, i == depth - 1 || i == p0 + 511);
        rc = memory_reserve(mem, b);
        if (rc == 0) rc = model_forward(m, fc, mem, b);
    }
    double t0 = now();
    int32_t at = depth;
    for (int r = 0; r < reps && rc == 0; r++) {
        for (int32_t i = 0; i < 64 && rc == 0; i++) {
            double s0 = now();
            batch_clear(b);
            batch_add(b, (int32_t)(i * 97 % m->hp.n_vocab), at + i, 0, true);
            rc = memory_reserve(mem, b);
            if (rc == 0) rc = model_forward(m, fc, mem, b);
            double ds = now() - s0;
            if (ds < *best_step) *best_step = ds;
        }
        if (memory_seq_rm(mem, 0, at, -1) < 0) at += 64; /* a recurrent state cannot go back: it goes on */
    }
    *tg = 64.0 * reps / (now() - t0);
    return rc;
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int n_threads = 2, reps = 2, tg_only = 0, pp_only = 0, rows = 0, prefill = 0, step = 512, depth = 512;
    bool bw_only = false, serving_layout = true; /* --gguf-layout: Q8_0 / Q5_0 as the file has them (math/q8x16.h) */
    enum kv_type kv_type = KV_F16;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bandwidth")) bw_only = true;
        else if (!strcmp(argv[i], "--tg-only") && i + 1 < argc) tg_only = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pp-only") && i + 1 < argc) pp_only = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prefill") && i + 1 < argc) prefill = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--step") && i + 1 < argc) step = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--depth") && i + 1 < argc) depth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gguf-layout")) serving_layout = false;
        else if (!strcmp(argv[i], "--kv-type") && i + 1 < argc) {
            if (kv_type_parse(argv[++i], &kv_type) < 0) {
                fprintf(stderr, "--kv-type: f16 or q8_0\n");
                return 2;
            }
        }
        else path = argv[i];
    }
    if (bw_only) {
        printf("bandwidth %.1f\n", bandwidth(n_threads));
        return 0;
    }
    if (!path) {
        fprintf(stderr, "usage: forward_bench MODEL [--threads N] [--reps R] | --bandwidth\n");
        return 2;
    }
    char why[256];
    struct model *m;
    struct memory *mem;
    struct forward_ctx *fc;
    struct batch b;
    if (model_load(&m, path, &(struct model_options){.serving_layout = serving_layout}, why, sizeof why) < 0) {
        fprintf(stderr, "%s: %s\n", path, why);
        return 1;
    }
    if (rows < 0 || rows > 64) {
        fprintf(stderr, "--rows: 1..64\n");
        return 2;
    }
    if (prefill < 0 || prefill > m->hp.n_ctx_train || step < 1 || step > 512 || depth < 0 || depth > 65536 ||
        (depth > 512 && !tg_only)) {
        fprintf(stderr, "--prefill: 0..the model's context; --step, --depth: 1..512, 0..512 (0..65536 with --tg-only)\n");
        return 2;
    }
    int32_t n_ctx = prefill > 1024 ? prefill : 1024;
    if (depth + 64 > n_ctx) n_ctx = depth + 64;
    struct memory_config mc = {.n_cells = rows ? 8192 : n_ctx, .n_seq_max = rows ? rows : 1, .max_batch = 512,
                               .type_k = kv_type, .type_v = kv_type};
    if (model_memory_create_with(m, &mc, &mem) < 0 ||
        forward_ctx_create(&fc, m, &(struct forward_config){.max_tokens = 512, .max_outputs = rows ? rows : 1,
                                                             .n_ctx = n_ctx,
                                                             .n_threads = n_threads}) < 0 ||
        batch_init(&b, 512) < 0) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    double pp_best = 0, tg_best = 0, d512_best = 0, pp, tg, tg_d512;
    if (rows > 0) {
        double best, mean, cpu;
        int rc = run_rows(m, fc, mem, &b, rows, reps, &best, &mean, &cpu);
        if (rc < 0) fprintf(stderr, "forward failed: %s\n", err_str(rc));
        else printf("rows %d step_ms %.3f per_row_ms %.3f mean_step_ms %.3f cpu_step_ms %.3f\n", rows, best * 1e3,
                    best * 1e3 / rows, mean * 1e3, cpu * 1e3);
        return rc < 0;
    }
    if (prefill > 0) {
        double best[4] = {1e9, 1e9, 1e9, 1e9}, t[4];
        int rc = 0;
        for (int r = 0; r < reps && rc == 0; r++) {
            rc = run_prefill(m, fc, mem, &b, prefill, step, &t[0], &t[1], &t[2], &t[3]);
            for (int k = 0; k < 4; k++)
                if (t[k] < best[k]) best[k] = t[k];
        }
        if (rc < 0) fprintf(stderr, "forward failed: %s\n", err_str(rc));
        else printf("prefill %d step %d ms %.1f cpu_ms %.1f last_step_ms %.2f last_step_cpu_ms %.2f\n", prefill, step,
                    best[0] * 1e3, best[1] * 1e3, best[2] * 1e3, best[3] * 1e3);
        return rc < 0;
    }
    if (tg_only > 0) {
        double best_step;
        int rc = run_tg_only(m, fc, mem, &b, depth, tg_only, &tg, &best_step);
        if (rc < 0) fprintf(stderr, "forward failed: %s\n", err_str(rc));
        else printf("tg64 %.2f fastest_step_ms %.3f\n", tg, best_step * 1e3); /* the fastest: least disturbed */
        return rc < 0;
    }
    if (pp_only > 0) {
        int rc = 0;
        double t0 = now();
        for (int r = 0; r < pp_only && rc == 0; r++) {
            batch_clear(&b);
            for (int32_t i = 0; i < 512; i++) batch_add(&b, (int32_t)(i * 31 % m->hp.n_vocab), i, 0, i == 511);
            rc = memory_reserve(mem, &b);
            if (rc == 0) rc = model_forward(m, fc, mem, &b);
            memory_seq_rm(mem, 0, 0, -1);
        }
        if (rc < 0) fprintf(stderr, "forward failed: %s\n", err_str(rc));
        else printf("pp512 %.1f\n", 512.0 * pp_only / (now() - t0));
        return rc < 0;
    }
    int rc = run(m, fc, mem, &b, &pp, &tg, &tg_d512); /* warm-up: pages of the mapping, caches */
    for (int r = 0; r < reps && rc == 0; r++) {
        rc = run(m, fc, mem, &b, &pp, &tg, &tg_d512);
        if (pp > pp_best) pp_best = pp;
        if (tg > tg_best) tg_best = tg;
        if (tg_d512 > d512_best) d512_best = tg_d512;
    }
    if (rc < 0) {
        fprintf(stderr, "forward failed: %s\n", err_str(rc));
        return 1;
    }
    printf("pp512 %.1f tg64 %.2f tg64_d512 %.2f weights_mb %.1f layer_mmac %.1f\n", pp_best, tg_best, d512_best,
           m->weight_bytes / 1e6, layer_macs(m) / 1e6);
    batch_free(&b);
    forward_ctx_destroy(fc);
    memory_destroy(mem);
    model_free(m);
    return 0;
}
