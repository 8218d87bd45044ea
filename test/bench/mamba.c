/* mamba: the recurrent forward pass's benchmark (scripts/bench.d/45-mamba). For each shared mamba
 * model prints the prompt throughput (one 512-token batch), the decode step time with 1 and 8
 * sequences per batch, and the per-sequence state size. Needs ../shared (skips with a message).
 *
 *   build/bench/mamba [--threads N]
 */
#include "common/batch.h"
#include "common/err.h"
#include "gguf/gguf.h"
#include "math/matmul.h"
#include "memory/recurrent.h"
#include "model/mamba.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

enum { PROMPT = 512, SEQS = 8, STEPS = 32 };

static int bench_model(const char *path, int n_threads) {
    char why[256];
    struct gguf_file f;
    struct mamba_model *m = NULL;
    struct mamba_scratch *s = NULL;
    struct compute *c = NULL;
    struct memory *mem = NULL;
    struct batch b = {0};
    float *logits = NULL;
    int rc;
    if ((rc = gguf_open(&f, path, why, sizeof why)) < 0) {
        printf("  %s: skipped (%s)\n", path, why);
        return 0;
    }
    if ((rc = mamba_load(&m, &f, why, sizeof why)) < 0 || (rc = mamba_scratch_create(&s, m, PROMPT, SEQS)) < 0 ||
        (rc = compute_create(&c, n_threads, PROMPT, mamba_max_n_in(m))) < 0 ||
        (rc = mamba_memory_create(m, SEQS, SEQS, &mem)) < 0 || (rc = batch_init(&b, PROMPT)) < 0 ||
        !(logits = malloc((size_t)SEQS * (size_t)m->hp.n_vocab * sizeof(float)))) {
        printf("  %s: setup failed (%s)\n", path, rc < 0 ? err_str(rc) : "out of memory");
        rc = rc < 0 ? rc : -ERR_NOMEM;
        goto done;
    }
    /* prompt: one batch of PROMPT tokens, logits for the last */
    batch_clear(&b);
    for (int32_t p = 0; p < PROMPT; p++) batch_add(&b, 1 + p % 1000, p, 0, p == PROMPT - 1);
    double t0 = now();
    if ((rc = memory_reserve(mem, &b)) < 0 || (rc = mamba_forward(m, s, c, mem, &b, logits)) < 0) goto done;
    double t_prompt = now() - t0;
    for (int32_t k = 1; k < SEQS; k++) memory_seq_cp(mem, 0, k, 0, -1);
    /* decode: STEPS steps of 1 sequence, then of SEQS sequences */
    double t_dec[2];
    int32_t widths[2] = {1, SEQS};
    for (int w = 0; w < 2; w++) {
        t0 = now();
        for (int step = 0; step < STEPS; step++) {
            batch_clear(&b);
            for (int32_t k = 0; k < widths[w]; k++)
                batch_add(&b, 100 + step, memory_seq_pos_max(mem, k) + 1, k, true);
            if ((rc = memory_reserve(mem, &b)) < 0 || (rc = mamba_forward(m, s, c, mem, &b, logits)) < 0) goto done;
        }
        t_dec[w] = (now() - t0) / STEPS;
    }
    struct memory_usage u;
    memory_usage(mem, &u);
    printf("  %-28s prompt %7.0f tok/s   decode 1 seq %6.2f ms/step   %d seqs %6.2f ms/step (%5.0f tok/s)   state %zu KB/seq\n",
           strrchr(path, '/') ? strrchr(path, '/') + 1 : path, PROMPT / t_prompt, t_dec[0] * 1e3, SEQS,
           t_dec[1] * 1e3, SEQS / t_dec[1], u.bytes / (size_t)u.cells_total / 1024);
done:
    free(logits);
    batch_free(&b);
    memory_destroy(mem);
    if (c) compute_destroy(c);
    mamba_scratch_destroy(s);
    mamba_free(m);
    gguf_close(&f);
    return rc;
}

int main(int argc, char **argv) {
    int n_threads = 2;
    if (argc == 3 && !strcmp(argv[1], "--threads")) n_threads = atoi(argv[2]);
    const char *shared = getenv("UVLM_SHARED") ? getenv("UVLM_SHARED") : "../shared";
    static const char *models[] = {"mamba-spm-f32.gguf", "mamba-spm-q8_0.gguf"};
    printf("mamba forward, %d threads (n_embd 128, 4 layers, d_inner 256, d_state 16, vocab 32000)\n", n_threads);
    int status = 0;
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/models/%s", shared, models[i]);
        if (bench_model(path, n_threads) < 0) status = 1;
    }
    return status;
}
