/* grammar_bench.c: constrained decoding's cost. Run by scripts/bench.d/25-grammar.
 *
 *   grammar_bench --mask VOCAB.gguf [--runs N]
 *       Mask time per generated token over the vocabulary (one core, the caller's thread) for
 *       free JSON (response_format json_object) and for a 10-property nested JSON Schema: a
 *       simulated generation draws each next token at random among the allowed ones (shorter
 *       tokens favoured, so structures close) until the grammar is complete or 400 tokens, N
 *       times (default 40). The first generation meets an empty mask cache (cold): its figures
 *       are printed apart from the whole run's, and so are the second half's (the caches warm:
 *       a server answering the same schema again), and the whole run's again in this thread's CPU
 *       time (what the masks cost, without the time other processes held the core on a shared
 *       machine). GRAMMAR_BENCH_SHOW=1 prints the first two
 *       generations' text on stderr.
 *   grammar_bench --decode MODEL.gguf [--tokens N] [--threads T]
 *       End-to-end tokens/s of decoding (forward + sampling through the model engine, one
 *       sequence) with no grammar and with json_object's grammar, N tokens each (default 128).
 */
#include "api/json_schema.h"
#include "common/batch.h"
#include "common/err.h"
#include "gguf/gguf.h"
#include "sampler/grammar.h"
#include "sched/model_engine.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* This thread's CPU time: what a mask costs, without the time another process held the core. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* mean, p50, p99, max of t[0..n) in microseconds */
static void report(const char *name, const char *what, double *t, int n) {
    if (n == 0) return;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += t[i];
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    printf("mask %-12s %-10s %6d tokens  mean %8.1f us  p50 %8.1f us  p99 %8.1f us  max %9.1f us\n", name, what, n,
           sum / n * 1e6, t[n / 2] * 1e6, t[(int)((double)n * 0.99)] * 1e6, t[n - 1] * 1e6);
}

/* A 10-property object with nested objects, arrays, enums, formats, bounds and optional keys. */
static const char *schema10 =
    "{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":99999},"
    "\"name\":{\"type\":\"string\",\"maxLength\":40},"
    "\"email\":{\"type\":\"string\",\"pattern\":\"^[a-z0-9.]{1,16}@[a-z0-9]{1,12}\\\\.[a-z]{2,4}$\"},"
    "\"active\":{\"type\":\"boolean\"},"
    "\"role\":{\"enum\":[\"admin\",\"editor\",\"viewer\"]},"
    "\"score\":{\"type\":\"number\"},"
    "\"created\":{\"type\":\"string\",\"format\":\"date-time\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":16},\"maxItems\":5},"
    "\"address\":{\"type\":\"object\",\"properties\":{"
    "\"street\":{\"type\":\"string\"},\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},"
    "\"required\":[\"street\",\"city\"],\"additionalProperties\":false},"
    "\"manager\":{\"type\":[\"object\",\"null\"],\"properties\":{\"id\":{\"type\":\"integer\"},"
    "\"name\":{\"type\":\"string\"}},\"required\":[\"id\"]}},"
    "\"required\":[\"id\",\"name\",\"email\",\"active\",\"role\",\"tags\",\"address\"],\"additionalProperties\":false}";

static int mask_case(const struct tokenizer *tok, const struct grammar_vocab *v, const char *name, const char *gbnf, int runs) {
    struct grammar *g;
    char why[256];
    double t0 = now();
    if (grammar_compile(&g, v, gbnf, strlen(gbnf), why, sizeof why) < 0) {
        printf("%s: %s\n", name, why);
        return 1;
    }
    printf("compile %-12s %.2f ms, %d states\n", name, (now() - t0) * 1e3, grammar_n_states(g));
    int32_t nv = grammar_vocab_n_vocab(v);
    size_t words = grammar_mask_words(v);
    uint64_t *allow = malloc(words * sizeof *allow);
    int32_t *ids = malloc((size_t)nv * sizeof *ids);
    int cap = runs * 400;
    double *t = malloc((size_t)cap * sizeof *t), *cold = malloc(400 * sizeof *cold), *warm = malloc((size_t)cap * sizeof *warm);
    double *cpu = malloc((size_t)cap * sizeof *cpu);
    int n = 0, n_cold = 0, n_warm = 0, complete = 0;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int r = 0; r < runs; r++) {
        struct grammar_state *st;
        if (grammar_state_create(&st, g) < 0) return 1;
        for (int k = 0; k < 400; k++) {
            double ca = cpu_now(), a = now();
            int32_t count = grammar_state_mask(st, allow);
            double dt = now() - a;
            cpu[n] = cpu_now() - ca;
            t[n++] = dt;
            if (r == 0) cold[n_cold++] = dt;
            if (r >= runs / 2) warm[n_warm++] = dt;
            if (count <= 0) break;
            if (grammar_state_complete(st)) {
                complete++;
                break;
            }
            int32_t m = 0;
            for (size_t w = 0; w < words; w++)
                for (uint64_t b = allow[w]; b; b &= b - 1) ids[m++] = (int32_t)(w * 64 + (size_t)__builtin_ctzll(b));
            /* A model writes short strings: one step in six takes a token with a closing
             * character (" } ] ,) when one is allowed, the others the shorter of two random
             * allowed tokens. */
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            int32_t pick = -1;
            if (rng % 6 == 0) {
                int32_t n_close = 0;
                for (int32_t j = 0; j < m; j++) {
                    size_t len;
                    const char *piece = tokenizer_token_piece(tok, ids[j], false, &len);
                    if (len && memchr("\"}],", piece[len - 1], 4)) ids[n_close++] = ids[j];
                }
                if (n_close) m = n_close;
            }
            size_t best = 0;
            for (int j = 0; j < 2; j++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                int32_t id = ids[rng % (uint64_t)m];
                size_t len;
                tokenizer_token_piece(tok, id, false, &len);
                if (pick < 0 || len < best) pick = id, best = len;
            }
            if (getenv("GRAMMAR_BENCH_SHOW") && r < 2) {
                size_t len;
                const char *piece = tokenizer_token_piece(tok, pick, false, &len);
                fprintf(stderr, "%.*s", (int)len, piece);
            }
            if (grammar_state_accept(st, pick) < 0) {
                printf("%s: an allowed token was refused\n", name);
                return 1;
            }
        }
        grammar_state_free(st);
    }
    report(name, "cold run", cold, n_cold);
    report(name, "all runs", t, n);
    report(name, "2nd half", warm, n_warm);
    report(name, "all (cpu)", cpu, n);
    printf("mask %-12s %d of %d generations complete; the grammar keeps %.1f MiB\n", name, complete, runs,
           (double)grammar_memory(g) / (1 << 20));
    free(t);
    free(cold);
    free(warm);
    free(cpu);
    free(allow);
    free(ids);
    grammar_unref(g);
    return 0;
}

static int mask_bench(const char *path, int runs) {
    struct gguf_file f;
    struct tokenizer *tok;
    char why[256];
    if (gguf_open(&f, path, why, sizeof why) < 0 || tokenizer_load(&tok, &f, why, sizeof why) < 0) {
        printf("%s: %s\n", path, why);
        return 1;
    }
    struct grammar_vocab *v;
    double t0 = now();
    if (model_engine_grammar_vocab(tok, &v) < 0) return 1;
    printf("vocabulary %d tokens, trie of %d nodes built in %.1f ms\n", grammar_vocab_n_vocab(v), grammar_vocab_nodes(v),
           (now() - t0) * 1e3);
    char *json = NULL, *schema = NULL;
    json_t *obj = json_loads(schema10, 0, NULL);
    char err[256], param[96];
    if (json_schema_object_grammar(&json) < 0 || !obj ||
        json_schema_to_grammar(obj, &schema, param, sizeof param, err, sizeof err) < 0) {
        printf("schema: %s: %s\n", param, err);
        return 1;
    }
    json_decref(obj);
    int rc = mask_case(tok, v, "json_object", json, runs) | mask_case(tok, v, "schema10", schema, runs);
    free(json);
    free(schema);
    grammar_vocab_free(v);
    tokenizer_free(tok);
    gguf_close(&f);
    return rc;
}

static int decode_bench(const char *path, int n_tokens, int threads) {
    struct model_engine *e;
    char why[256];
    struct model_engine_config ec = {.path = path, .kv_tokens = 1024, .batch_tokens = 64, .n_seq_max = 2, .n_threads = threads};
    if (model_engine_load(&e, &ec, why, sizeof why) < 0) {
        printf("%s: %s\n", path, why);
        return 1;
    }
    char *json = NULL;
    if (json_schema_object_grammar(&json) < 0) return 1;
    struct model_engine_grammar *g;
    if (model_engine_grammar_get(e, json, strlen(json), &g, why, sizeof why) < 0) {
        printf("grammar: %s\n", why);
        return 1;
    }
    /* the machine's other load moves from second to second: runs alternate, the best of each kept */
    double tps[2] = {0, 0}, smp_us[2] = {1e9, 1e9};
    for (int run = 0; run < 6; run++) {
        int with = run % 2;
        struct model_engine_sampling sp = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                                           .repeat_penalty = 1, .grammar = with ? g : NULL};
        int32_t prompt[4] = {1, 2, 3, 4};
        void *smp = model_engine_ops.sampler_create(e, &sp, 42, prompt, 4);
        struct batch b;
        batch_init(&b, 8);
        for (int i = 0; i < 4; i++) batch_add(&b, prompt[i], i, 0, i == 3);
        const float *logits;
        memory_reserve(e->mem, &b);
        model_engine_ops.forward(e, e->mem, &b, &logits);
        int32_t tok = model_engine_ops.sample(e, smp, logits, 0, NULL);
        int32_t pos = 4, n = 0;
        double t0 = now(), t_sample = 0;
        for (; n < n_tokens && tok >= 0 && !model_engine_ops.is_eog(e, tok); n++) {
            batch_clear(&b);
            batch_add(&b, tok, pos++, 0, true);
            memory_reserve(e->mem, &b);
            if (model_engine_ops.forward(e, e->mem, &b, &logits) < 0) break;
            double ts = now();
            tok = model_engine_ops.sample(e, smp, logits, 0, NULL);
            t_sample += now() - ts;
        }
        double dt = now() - t0;
        if (n / dt > tps[with]) tps[with] = n / dt;
        if (t_sample / (n ? n : 1) * 1e6 < smp_us[with]) smp_us[with] = t_sample / (n ? n : 1) * 1e6;
        printf("decode %-12s %4d tokens in %.2f s: %.2f tokens/s (sampling %.1f us per token)\n",
               with ? "json_object" : "no grammar", n, dt, n / dt, t_sample / (n ? n : 1) * 1e6);
        memory_seq_rm(e->mem, 0, 0, -1);
        batch_free(&b);
        model_engine_ops.sampler_free(e, smp);
    }
    printf("decode best of 3: %.2f tokens/s without, %.2f with the grammar (%.1f%%); sampling %.1f us vs %.1f us per token\n",
           tps[0], tps[1], 100 * tps[1] / tps[0], smp_us[0], smp_us[1]);
    model_engine_grammar_release(g);
    free(json);
    model_engine_free(e);
    return 0;
}

int main(int argc, char **argv) {
    const char *mask = NULL, *decode = NULL;
    int runs = 40, tokens = 128, threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mask") && i + 1 < argc) mask = argv[++i];
        else if (!strcmp(argv[i], "--decode") && i + 1 < argc) decode = argv[++i];
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: grammar_bench --mask VOCAB.gguf [--runs N] | --decode MODEL.gguf [--tokens N] [--threads T]\n");
            return 2;
        }
    }
    if (mask) return mask_bench(mask, runs);
    if (decode) return decode_bench(decode, tokens, threads);
    fprintf(stderr, "grammar_bench: --mask or --decode\n");
    return 2;
}
