/* sched_bench: what the scheduler costs the loop thread. sched_build_step and
 * sched_step_complete run on the libuv loop between network events, so their time is latency
 * added to every /health and every streamed token. Measured on the real KV memory in its
 * bookkeeping-only configuration with a model-free engine (compute is not timed: it runs on a
 * worker thread in the server). Built and run by scripts/bench.d/40-sched. */
#include "common/err.h"
#include "memory/kv.h"
#include "sched/sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VOCAB 256

struct engine {
    float logits[512 * VOCAB]; /* one row per output: at most one output per sequence */
};

static int forward(void *e, struct memory *m, const struct batch *b, const float **logits) {
    *logits = ((struct engine *)e)->logits;
    return 0;
}
static int32_t n_vocab(void *e) { return VOCAB; }
static bool is_eog(void *e, int32_t t) { return false; }
static void *sampler_create(void *e, const void *p, uint64_t seed, const int32_t *prompt, int32_t n) {
    uint64_t *s = malloc(sizeof *s);
    if (s) *s = seed | 1;
    return s;
}
static int32_t sample(void *e, void *sampler, const float *logits, int32_t n_probs, struct sched_token_probs *p) {
    uint64_t *s = sampler;
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (int32_t)(*s % VOCAB);
}
static void sampler_free(void *e, void *s) { free(s); }
static const struct sched_engine_ops ops = {forward, n_vocab, is_eog, sampler_create, sample, sampler_free,
                                            NULL, NULL, NULL};

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time: other processes on the machine do not count */
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static bool on_token(void *o, int32_t c, int32_t t, const struct sched_token_probs *p) { return true; }
static void on_done(void *o, int32_t c, enum sched_stop r, const struct sched_counts *k) { ++*(int *)o; }
static void on_error(void *o, int err) { ++*(int *)o; }
static const struct sched_sink sink = {on_token, on_done, on_error, NULL};

/* n_seqs requests of a 200-token prompt (the first 150 shared) generating 64 tokens each. */
static int run(int32_t n_seqs, int64_t n_cells) {
    static struct engine eng;
    struct memory *mem;
    if (kv_memory_create(&mem, NULL, n_cells, n_seqs + 16) != 0) return 1;
    struct sched_config cfg;
    sched_config_default(&cfg);
    cfg.n_ctx = 1024;
    cfg.max_queue = n_seqs;
    struct sched *s;
    if (sched_create(&s, &cfg, mem, &ops, &eng) != 0) return 1;
    int32_t prompt[200];
    int finished = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        for (int k = 0; k < 200; k++) prompt[k] = k < 150 ? k : (i * 7 + k) % VOCAB;
        struct sched_request r = {.prompt = prompt, .n_prompt = 200, .n_predict = 64, .n_choices = 1,
                                  .seed = (uint64_t)i, .cache_prompt = true};
        struct sched_req *h;
        if (sched_submit(s, &r, &sink, &finished, 0, &h) != 0) return 1;
    }
    double build_us = 0, complete_us = 0, worst_us = 0, t = 0;
    int64_t steps = 0, tokens = 0;
    struct sched_step *step;
    for (;;) {
        double t0 = now_us();
        int n = sched_build_step(s, t, &step);
        double t1 = now_us();
        if (n == 0) break;
        sched_step_compute(s, step);
        double t2 = now_us();
        sched_step_complete(s, step, t += 20);
        double t3 = now_us();
        build_us += t1 - t0;
        complete_us += t3 - t2;
        if (t1 - t0 + t3 - t2 > worst_us) worst_us = t1 - t0 + t3 - t2;
        if (getenv("SCHED_BENCH_TRACE") && t1 - t0 + t3 - t2 > 1000)
            fprintf(stderr, "  step %lld: build %.0f us complete %.0f us, %d tokens\n", (long long)steps, t1 - t0, t3 - t2, n);
        steps++;
        tokens += n;
    }
    struct sched_stats st;
    sched_stats(s, t, &st);
    printf("%4d seqs, %6lld cells: %5lld steps, %7lld tokens, preemptions %4lld | loop thread per step: "
           "build %7.1f us, complete %6.1f us, worst %7.1f us\n",
           n_seqs, (long long)n_cells, (long long)steps, (long long)tokens, (long long)st.preemptions,
           build_us / (double)steps, complete_us / (double)steps, worst_us);
    sched_destroy(s);
    memory_destroy(mem);
    return finished == n_seqs ? 0 : 1;
}

static double wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Preemption by saving: what moving a sequence's K/V to the host and back costs, with the
 * SmolLM2-135M shape (30 layers, 3 KV heads of 64). Recomputing instead runs the forward pass
 * over every token again (about 2 x 135 M flops per token). */
static int preempt_cost(int32_t n_tokens) {
    struct kv_shape shape = {.n_layer = 30, .n_embd_k = 192, .n_embd_v = 192};
    struct memory *mem;
    if (kv_memory_create(&mem, &shape, 4096, 4) != 0) return 1;
    struct batch b;
    if (batch_init(&b, n_tokens) != 0) return 1;
    for (int32_t i = 0; i < n_tokens; i++) batch_add(&b, i % VOCAB, i, 0, false);
    if (memory_reserve(mem, &b) != 0) return 1;
    struct kv_memory *kv = kv_from_memory(mem);
    for (int32_t l = 0; l < shape.n_layer; l++) /* touch the pages, as a real forward would */
        for (int32_t i = 0; i < n_tokens; i++) {
            memset(kv_k_row(kv, l, kv_batch_cell(kv, i)), 1, 192 * 2);
            memset(kv_v_row(kv, l, kv_batch_cell(kv, i)), 1, 192 * 2);
        }
    double best_save = 1e9, best_restore = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        struct memory_snapshot *snap;
        double t0 = wall_ms();
        if (memory_seq_save(mem, 0, &snap) != 0 || memory_seq_rm(mem, 0, 0, -1) != 0) return 1;
        double t1 = wall_ms();
        if (memory_seq_restore(mem, 0, snap) != 0) return 1;
        double t2 = wall_ms();
        memory_snapshot_free(mem, snap);
        if (t1 - t0 < best_save) best_save = t1 - t0;
        if (t2 - t1 < best_restore) best_restore = t2 - t1;
    }
    printf("preempt by saving %d tokens of K/V (SmolLM2-135M shape, %.1f MB): save+free %.2f ms, "
           "restore %.2f ms; recompute would be a forward over %d tokens (~%.0f GFLOP)\n",
           n_tokens, (double)n_tokens * 30 * 192 * 2 * 2 / 1e6, best_save, best_restore, n_tokens,
           2.0 * 135e6 * n_tokens / 1e9);
    batch_free(&b);
    memory_destroy(mem);
    return 0;
}

/* A virtual-time simulation of the fairness scenario: a 3000-token prompt prefills,
 * and 300 ms later a 12-word (~20-token) request arrives. Step cost model: 8 ms + 0.6 ms per
 * token (an assumption of the order of a 135M model on 2 cores; the scheduler learns whatever
 * the real one is). Prints when the short request gets its first token. */
struct sim_owner {
    double first_ms;
    double *clock;
    bool done;
};
static bool sim_token(void *o, int32_t c, int32_t t, const struct sched_token_probs *p) {
    struct sim_owner *w = o;
    if (w->first_ms < 0) w->first_ms = *w->clock;
    return true;
}
static void sim_done(void *o, int32_t c, enum sched_stop r, const struct sched_counts *k) {
    ((struct sim_owner *)o)->done = true;
}
static const struct sched_sink sim_sink = {sim_token, sim_done, on_error, NULL};

static int fairness_sim(void) {
    static struct engine eng;
    struct memory *mem;
    if (kv_memory_create(&mem, NULL, 8192, 8) != 0) return 1;
    struct sched_config cfg;
    sched_config_default(&cfg);
    cfg.n_ctx = 4096;
    struct sched *s;
    if (sched_create(&s, &cfg, mem, &ops, &eng) != 0) return 1;
    static int32_t longp[3000], shortp[20];
    for (int i = 0; i < 3000; i++) longp[i] = i % VOCAB;
    for (int i = 0; i < 20; i++) shortp[i] = (i * 31) % VOCAB;
    double clock = 0;
    struct sim_owner lo = {-1, &clock, false}, so = {-1, &clock, false};
    struct sched_request lr = {.prompt = longp, .n_prompt = 3000, .n_predict = 16, .n_choices = 1};
    struct sched_request sr = {.prompt = shortp, .n_prompt = 20, .n_predict = 16, .n_choices = 1};
    struct sched_req *h;
    if (sched_submit(s, &lr, &sim_sink, &lo, clock, &h) != 0) return 1;
    bool short_sent = false;
    int max_step_tokens_after = 0;
    double worst_step_ms = 0;
    struct sched_step *step;
    for (;;) {
        int n = sched_build_step(s, clock, &step);
        if (n == 0) break;
        sched_step_compute(s, step);
        double ms = 8 + 0.6 * n;
        if (!short_sent && clock + ms >= 300) { /* it arrives while this step computes */
            if (sched_submit(s, &sr, &sim_sink, &so, 300, &h) != 0) return 1;
            short_sent = true;
        } else if (short_sent && !so.done) { /* both running: steps should stay short */
            if (n > max_step_tokens_after) max_step_tokens_after = n;
            if (ms > worst_step_ms) worst_step_ms = ms;
        }
        clock += ms;
        sched_step_complete(s, step, clock);
    }
    printf("fairness (simulated 8 ms + 0.6 ms/token): 3000-token prompt: first token at %.0f ms; "
           "a 20-token request sent at 300 ms: first token at %.0f ms (%.0f ms after sending); "
           "steps while both ran: <= %d tokens, <= %.0f ms\n",
           lo.first_ms, so.first_ms, so.first_ms - 300, max_step_tokens_after, worst_step_ms);
    sched_destroy(s);
    memory_destroy(mem);
    return so.first_ms >= 0 && so.first_ms < lo.first_ms ? 0 : 1;
}

/* Simulated time of one request (prompt n_prompt, 64 tokens, n choices) with the same cost model. */
static double choices_sim_ms(int32_t n_choices) {
    static struct engine eng;
    struct memory *mem;
    if (kv_memory_create(&mem, NULL, 4096, 8) != 0) return -1;
    struct sched_config cfg;
    sched_config_default(&cfg);
    cfg.n_ctx = 1024;
    struct sched *s;
    if (sched_create(&s, &cfg, mem, &ops, &eng) != 0) return -1;
    int32_t prompt[260];
    for (int i = 0; i < 260; i++) prompt[i] = (i * 17) % VOCAB;
    int finished = 0;
    struct sched_request r = {.prompt = prompt, .n_prompt = 260, .n_predict = 64, .n_choices = n_choices};
    struct sched_req *h;
    if (sched_submit(s, &r, &sink, &finished, 0, &h) != 0) return -1;
    double clock = 0;
    struct sched_step *step;
    for (int n; (n = sched_build_step(s, clock, &step)) > 0;) {
        sched_step_compute(s, step);
        sched_step_complete(s, step, clock += 8 + 0.6 * n);
    }
    sched_destroy(s);
    memory_destroy(mem);
    return finished == n_choices ? clock : -1;
}

int main(void) {
    int rc = 0;
    double one = choices_sim_ms(1), four = choices_sim_ms(4);
    printf("n choices (simulated): 260-token prompt, 64 tokens: n=1 %.0f ms, n=4 %.0f ms (%.2fx)\n", one,
           four, four / one);
    rc |= one < 0 || four < 0;
    rc |= fairness_sim();
    rc |= preempt_cost(1000);
    rc |= run(1, 4096);
    rc |= run(16, 8192);
    rc |= run(64, 16384);
    rc |= run(64, 4096); /* memory for a quarter: preemption */
    return rc;
}
