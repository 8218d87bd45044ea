/* spec_bench: speculative decoding's speed against plain decoding, through the scheduler and the
 * real engine (no HTTP), greedy. Built and run by scripts/bench.d/46-speculative.
 *
 *   spec_bench MODEL [--oracle | --draft FILE | --lookup] [--k 4] [--streams 1] [--tokens 128]
 *              [--threads 2] [--prompt TEXT]
 *
 * --oracle: the drafts are the plain run's own tokens (the served model as its own draft, at no
 * cost: every draft accepted), the mechanism's ceiling; --draft: a draft model; --lookup: prompt
 * lookup.
 *
 * Runs the same requests twice, without and with speculation, and prints one line:
 *   plain_tps P spec_tps S ratio R drafted D accepted A tokens_per_step T steps N
 * tokens/s count the generated tokens of all streams from the step where every stream has its first
 * token to the last (the decode phase alone); tokens_per_step is the speculating run's generated
 * tokens per step of a stream in that phase (1 without speculation). Both runs must produce the
 * same tokens (greedy): the program fails otherwise. */
#include "common/err.h"
#include "sched/model_engine.h"
#include "sched/sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_STREAMS 16
#define MAX_TOKENS 1024

struct stream {
    int32_t tokens[MAX_TOKENS];
    int32_t n;
    bool done;
    struct sched_counts counts;
};

static bool on_token(void *o, int32_t c, int32_t t, const struct sched_token_probs *p) {
    struct stream *s = o;
    if (s->n < MAX_TOKENS) s->tokens[s->n++] = t;
    return true;
}
static void on_done(void *o, int32_t c, enum sched_stop r, const struct sched_counts *k) {
    struct stream *s = o;
    s->done = true;
    s->counts = *k;
}
static void on_error(void *o, int err) {
    fprintf(stderr, "request failed: %s\n", err_str(err));
    exit(1);
}
static const struct sched_sink sink = {.on_token = on_token, .on_done = on_done, .on_error = on_error};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

struct result {
    double tps, per_step;
    int64_t drafted, accepted, steps;
};

static struct stream streams[2][MAX_STREAMS];

/* --oracle: what the plain run generated, by the stream's last prompt token */
static struct {
    int32_t n_prompt, last[MAX_STREAMS];
    int n_streams;
} oracle;

static int32_t oracle_draft(void *engine, int32_t seq, const int32_t *tokens, int32_t n, int32_t n_max, float p_min,
                            int32_t *out) {
    for (int i = 0; i < oracle.n_streams; i++) {
        if (tokens[oracle.n_prompt - 1] != oracle.last[i]) continue;
        const struct stream *p = &streams[0][i];
        int32_t g = n - oracle.n_prompt, k = 0;
        while (k < n_max && g + k < p->n) out[k] = p->tokens[g + k], k++;
        return k;
    }
    return 0;
}

static void run(struct model_engine *e, const struct sched_engine_ops *ops, bool lookup, int32_t k, int n_streams,
                int32_t n_tokens, const int32_t *prompt, int32_t n_prompt, struct stream *out, struct result *res) {
    struct sched_config cfg;
    sched_config_default(&cfg);
    cfg.n_ctx = e->n_ctx;
    cfg.spec_lookup = lookup;
    /* prompt chunks by the token budget alone, not by step times: both runs then read the prompts
     * in the same steps (a row's numbers depend on the step's size from 32 rows on, math/matmul.h) */
    cfg.max_step_ms = cfg.solo_step_ms = 1e9;
    struct sched *s;
    if (sched_create(&s, &cfg, e->mem, ops, e) != 0) exit(1);
    struct model_engine_sampling sp = {.temperature = 0, .repeat_penalty = 1.0f};
    for (int i = 0; i < n_streams; i++) {
        memset(&out[i], 0, sizeof out[i]);
        /* each stream's prompt differs in its last token, so that no two streams are the same */
        int32_t p[4096];
        memcpy(p, prompt, (size_t)n_prompt * sizeof *p);
        if (n_streams > 1) p[n_prompt - 1] = (prompt[n_prompt - 1] + i) % e->n_vocab;
        oracle.last[i] = p[n_prompt - 1];
        struct sched_request req = {.prompt = p, .n_prompt = n_prompt, .n_predict = n_tokens, .n_choices = 1,
                                    .ignore_eos = true, .cache_prompt = false, .sampler_params = &sp,
                                    .draft_max = k, .draft_p_min = 0.0f};
        struct sched_req *h;
        if (sched_submit(s, &req, &sink, &out[i], now_s() * 1e3, &h) != 0) exit(1);
    }
    struct sched_step *st;
    double t0 = 0, t1 = 0;
    int64_t generated0 = 0, steps0 = 0;
    struct sched_stats stats;
    /* real milliseconds: the scheduler learns its step cost model from them, as in the server */
    while (sched_build_step(s, now_s() * 1e3, &st) > 0) {
        sched_step_compute(s, st);
        sched_step_complete(s, st, now_s() * 1e3);
        sched_stats(s, now_s() * 1e3, &stats);
        if (t0 == 0) {
            bool all = true;
            for (int i = 0; i < n_streams; i++) all &= out[i].n > 0;
            if (all) {
                t0 = now_s();
                generated0 = stats.generated_tokens;
                steps0 = stats.steps;
            }
        }
    }
    t1 = now_s();
    sched_stats(s, now_s() * 1e3, &stats);
    res->tps = (double)(stats.generated_tokens - generated0) / (t1 - t0);
    res->steps = stats.steps - steps0;
    res->per_step = (double)(stats.generated_tokens - generated0) / n_streams / (double)res->steps;
    res->drafted = stats.draft_tokens;
    res->accepted = stats.draft_accepted;
    sched_destroy(s);
}

int main(int argc, char **argv) {
    const char *path = NULL, *draft = NULL, *text = NULL;
    bool lookup = false, use_oracle = false;
    int32_t k = 4, n_tokens = 128;
    int n_streams = 1, threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--draft") && i + 1 < argc) draft = argv[++i];
        else if (!strcmp(argv[i], "--lookup")) lookup = true;
        else if (!strcmp(argv[i], "--oracle")) use_oracle = true;
        else if (!strcmp(argv[i], "--k") && i + 1 < argc) k = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--streams") && i + 1 < argc) n_streams = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) n_tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) text = argv[++i];
        else if (!path && argv[i][0] != '-') path = argv[i];
        else {
            fprintf(stderr, "usage: %s MODEL [--oracle | --draft FILE | --lookup] [--k 4] [--streams 1] "
                            "[--tokens 128] [--threads 2] [--prompt TEXT]\n", argv[0]);
            return 2;
        }
    }
    if (!path || n_streams < 1 || n_streams > MAX_STREAMS || n_tokens < 1 || n_tokens > MAX_TOKENS) {
        fprintf(stderr, "%s: a model, 1..%d streams, 1..%d tokens\n", argv[0], MAX_STREAMS, MAX_TOKENS);
        return 2;
    }
    struct model_engine_config ec = {.path = path, .kv_tokens = 4096, .batch_tokens = 512, .n_seq_max = 64,
                                     .n_threads = threads, .draft_path = draft};
    struct model_engine *e;
    char why[512];
    int rc = model_engine_load(&e, &ec, why, sizeof why);
    if (rc) {
        fprintf(stderr, "%s: %s\n", path, why);
        return 1;
    }
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    if (!text) text = "Once upon a time";
    if (model_engine_tokenize(e, text, strlen(text), true, false, &prompt, &n_prompt) != 0 || n_prompt < 1 ||
        n_prompt > 4096 - (size_t)n_tokens - 32) {
        fprintf(stderr, "%s: cannot tokenize the prompt\n", argv[0]);
        return 1;
    }
    struct result plain, spec;
    run(e, &model_engine_ops, false, 0, n_streams, n_tokens, prompt, (int32_t)n_prompt, streams[0], &plain);
    struct sched_engine_ops oracle_ops = model_engine_ops;
    oracle_ops.draft = oracle_draft;
    oracle.n_prompt = (int32_t)n_prompt;
    oracle.n_streams = n_streams;
    run(e, use_oracle ? &oracle_ops : model_engine_sched_ops(e), lookup, k, n_streams, n_tokens, prompt,
        (int32_t)n_prompt, streams[1], &spec);
    for (int i = 0; i < n_streams; i++)
        if (streams[0][i].n != streams[1][i].n ||
            memcmp(streams[0][i].tokens, streams[1][i].tokens, (size_t)streams[0][i].n * sizeof(int32_t)) != 0) {
            int32_t at = 0;
            while (at < streams[0][i].n && at < streams[1][i].n && streams[0][i].tokens[at] == streams[1][i].tokens[at]) at++;
            fprintf(stderr, "%s: stream %d: speculation changed the greedy output at token %d of %d\n", argv[0], i, at,
                    streams[0][i].n);
            return 1;
        }
    printf("plain_tps %.2f spec_tps %.2f ratio %.2f drafted %lld accepted %lld tokens_per_step %.2f steps %lld\n",
           plain.tps, spec.tps, spec.tps / plain.tps, (long long)spec.drafted, (long long)spec.accepted, spec.per_step,
           (long long)spec.steps);
    free(prompt);
    model_engine_free(e);
    return 0;
}
