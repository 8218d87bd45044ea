/* generate.c: ./uvlm generate --model M --prompt P [--n-predict N] [--threads T] [--temp X]
 *             [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S]
 *             [--allow-unknown-pretokenizer]
 * Feeds the prompt in batches of up to 512 tokens, then samples one token at a time, printing
 * each as soon as it completes a UTF-8 character; stops at N tokens or an end-of-generation
 * token. Then prints the prompt and generation speeds (tok/s) on stderr. */
#include "cmd/cmd.h"
#include "common/err.h"
#include "model/model.h"
#include "sampler/sampler.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { GEN_BATCH = 512 };

static void generate_usage(FILE *out) {
    fprintf(out, "usage: uvlm generate --model M --prompt P [--n-predict N (64)] [--threads T (all cores)]\n"
                 "         [--temp X (0: greedy)] [--top-k K (40)] [--top-p P (0.95)] [--min-p P (0.05)]\n"
                 "         [--repeat-penalty R (1)] [--seed S (0)] [--allow-unknown-pretokenizer]\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct gen {
    const struct model *m;
    struct forward_ctx *fc;
    struct memory *mem;
    struct batch b;
};

/* Place and run the batch; the last entry's logits are in fc->logits. */
static int step(struct gen *g) {
    int rc = memory_reserve(g->mem, &g->b);
    return rc < 0 ? rc : model_forward(g->m, g->fc, g->mem, &g->b);
}

static int run(struct gen *g, const struct tokenizer *tok, struct sampler *smp, const int32_t *ids, int32_t n,
               int32_t n_predict) {
    double t0 = now_s();
    int rc = 0;
    for (int32_t p0 = 0; p0 < n && rc == 0; p0 += GEN_BATCH) {
        batch_clear(&g->b);
        for (int32_t p = p0; p < n && p < p0 + GEN_BATCH; p++) {
            batch_add(&g->b, ids[p], p, 0, p == n - 1);
            sampler_accept(smp, ids[p]);
        }
        rc = step(g);
    }
    double t1 = now_s();
    struct detok d;
    detok_init(&d, tok, false, false);
    size_t cap = detok_buf_size(tok);
    char *buf = malloc(cap);
    int32_t n_gen = 0;
    while (rc == 0 && buf && n_gen < n_predict) {
        int32_t t = sampler_sample(smp, g->fc->logits, NULL, NULL);
        if (tokenizer_is_eog(tok, t)) break;
        sampler_accept(smp, t);
        int k = detok_push(&d, t, buf, cap);
        if (k > 0) fwrite(buf, 1, (size_t)k, stdout);
        fflush(stdout);
        n_gen++;
        batch_clear(&g->b);
        batch_add(&g->b, t, n + n_gen - 1, 0, true);
        rc = step(g);
    }
    if (buf) {
        int k = detok_flush(&d, buf, cap);
        if (k > 0) fwrite(buf, 1, (size_t)k, stdout);
    }
    putchar('\n');
    free(buf);
    double t2 = now_s();
    fprintf(stderr, "prompt: %d tokens in %.3f s (%.1f tok/s); generation: %d tokens in %.3f s (%.1f tok/s)\n", n,
            t1 - t0, n / (t1 - t0), n_gen, t2 - t1, n_gen > 0 ? n_gen / (t2 - t1) : 0.0);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL;
    int32_t n_predict = 64, n_threads = 0;
    struct sampler_params sp = {.temperature = 0, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                                .repeat_penalty = 1.0f, .repeat_last_n = 64};
    struct tokenizer_options topt = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            generate_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--allow-unknown-pretokenizer")) {
            topt.allow_unknown_pretokenizer = true;
            continue;
        }
        if (!v) {
            generate_usage(stderr);
            return 2;
        }
        if (!strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--n-predict")) n_predict = atoi(v);
        else if (!strcmp(a, "--threads")) n_threads = atoi(v);
        else if (!strcmp(a, "--temp")) sp.temperature = strtof(v, NULL);
        else if (!strcmp(a, "--top-k")) sp.top_k = atoi(v);
        else if (!strcmp(a, "--top-p")) sp.top_p = strtof(v, NULL);
        else if (!strcmp(a, "--min-p")) sp.min_p = strtof(v, NULL);
        else if (!strcmp(a, "--repeat-penalty")) sp.repeat_penalty = strtof(v, NULL);
        else if (!strcmp(a, "--seed")) sp.seed = strtoull(v, NULL, 10);
        else {
            generate_usage(stderr);
            return 2;
        }
        i++;
    }
    if (!model_path || !prompt || n_predict < 0) {
        generate_usage(stderr);
        return 2;
    }
    char why[256];
    struct model *m = NULL;
    struct tokenizer *tok = NULL;
    struct sampler *smp = NULL;
    struct gen g = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    int status = 1, rc = model_load(&m, model_path, &(struct model_options){.serving_layout = true}, why, sizeof why);
    if (rc < 0) {
        fprintf(stderr, "generate: %s: %s\n", model_path, why);
        return 1;
    }
    if ((rc = tokenizer_load_with(&tok, &m->file, &topt, why, sizeof why)) < 0) {
        fprintf(stderr, "generate: tokenizer: %s\n", why);
        goto done;
    }
    if (why[0]) fprintf(stderr, "generate: tokenizer: %s\n", why);
    if ((rc = tokenizer_encode_alloc(tok, prompt, strlen(prompt), true, false, &ids, &n)) < 0 || n == 0) {
        fprintf(stderr, "generate: cannot tokenize the prompt\n");
        goto done;
    }
    int64_t n_ctx = (int64_t)n + n_predict + 1;
    g.m = m;
    if ((rc = model_memory_create(m, n_ctx, 1, &g.mem)) < 0 ||
        (rc = forward_ctx_create(&g.fc, m, &(struct forward_config){.max_tokens = GEN_BATCH, .max_outputs = 1,
                                                                     .n_ctx = n_ctx, .n_threads = n_threads})) < 0 ||
        (rc = batch_init(&g.b, GEN_BATCH)) < 0 || (rc = sampler_create(&smp, m->hp.n_vocab, 64, NULL)) < 0 ||
        (rc = sampler_reset(smp, &sp)) < 0) {
        fprintf(stderr, "generate: %s\n", err_str(rc));
        goto done;
    }
    struct memory_usage u;
    memory_usage(g.mem, &u);
    fprintf(stderr, "generate: %s %d layers, weights %.1f MB, kv %.1f MB, forward buffers %.1f MB, %d prompt tokens\n",
            m->hp.arch_name, m->hp.n_layer, m->weight_bytes / 1e6, u.bytes / 1e6, forward_ctx_bytes(g.fc) / 1e6,
            (int)n);
    rc = run(&g, tok, smp, ids, (int32_t)n, n_predict);
    if (rc < 0) fprintf(stderr, "generate: %s\n", err_str(rc));
    else status = 0;
done:
    free(ids);
    batch_free(&g.b);
    sampler_destroy(smp);
    forward_ctx_destroy(g.fc);
    memory_destroy(g.mem);
    tokenizer_free(tok);
    model_free(m);
    return status;
}
