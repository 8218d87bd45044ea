/* The scheduler core driven without sockets: a fake engine whose next token depends on what the
 * memory holds (fake.h), a recorder sink, and a fake clock. */
#include "sched/sched.h"

#include "common/err.h"
#include "sched/fake.h"
#include "sched/step_cost.h"
#include "memory/kv.h"
#include "test.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB 64

struct fx {
    struct memory *mem;
    struct fake_engine eng;
    struct sched *s;
    double now;
    int clock;
};

static struct sched_config base_config(void) {
    struct sched_config c;
    sched_config_default(&c);
    c.n_ctx = 256;
    c.batch_tokens = 64;
    c.chunk_tokens = 16;
    return c;
}

/* Which memory a test runs on: the real KV pool (memory/kv.c) unless it needs the fakes. */
enum mem_kind {
    MEM_WHOLE_ONLY = 0, /* fake memory without partial removal (how a recurrent state behaves) */
    MEM_KV = 1,         /* the real KV memory, token ids as its K/V (fake.h) */
    MEM_FAKE_KV = 2,    /* fake memory with partial removal */
    MEM_RECURRENT = 3,  /* fake recurrent state: `cells` is the number of states */
    MEM_SPLIT = 4,      /* a full KV pool and a windowed one (window SPLIT_WINDOW), Gemma 3's shape */
    MEM_HYBRID = 5,     /* a KV pool of `cells` and a recurrent state per sequence id, Qwen3.5's
                         * shape (fx_init_hybrid: fewer states) */
};

enum { SPLIT_WINDOW = 4 };

/* c NULL: base_config() */
static int fx_init(struct fx *f, int64_t cells, int32_t n_seq, int kind, const struct sched_config *c) {
    struct sched_config base = base_config();
    if (!c) c = &base;
    memset(f, 0, sizeof *f);
    f->mem = kind == MEM_KV          ? fake_kv_create(cells, n_seq)
             : kind == MEM_RECURRENT ? fake_recurrent_create((int32_t)cells, n_seq)
             : kind == MEM_SPLIT     ? fake_split_create(cells, n_seq, SPLIT_WINDOW, c->batch_tokens)
             : kind == MEM_HYBRID    ? fake_hybrid_create(cells, n_seq, n_seq)
                                     : fake_memory_create(cells, n_seq, kind == MEM_FAKE_KV);
    fake_engine_init(&f->eng, f->mem, VOCAB, n_seq);
    f->now = 1000;
    return sched_create(&f->s, c, f->mem, &fake_engine_ops, &f->eng);
}

/* A hybrid memory of n_cells KV cells and n_states recurrent states. */
static int fx_init_hybrid(struct fx *f, int64_t cells, int32_t n_states, int32_t n_seq, const struct sched_config *c) {
    struct sched_config base = base_config();
    if (!c) c = &base;
    memset(f, 0, sizeof *f);
    f->mem = fake_hybrid_create(cells, n_states, n_seq);
    fake_engine_init(&f->eng, f->mem, VOCAB, n_seq);
    f->now = 1000;
    return sched_create(&f->s, c, f->mem, &fake_engine_ops, &f->eng);
}

/* Also checks what every test must leave behind: no hole in a history, no sampler leaked. */
static int fx_free(struct fx *f) {
    sched_destroy(f->s);
    int bad = f->eng.holes != 0 || f->eng.samplers_live != 0;
    if (bad)
        fprintf(stderr, "  holes %lld, samplers live %lld\n", (long long)f->eng.holes,
                (long long)f->eng.samplers_live);
    fake_engine_free(&f->eng);
    memory_destroy(f->mem);
    return bad;
}

static struct sched_request request(const int32_t *prompt, int32_t n, int32_t n_predict) {
    return (struct sched_request){.prompt = prompt, .n_prompt = n, .n_predict = n_predict,
                                  .n_choices = 1, .cache_prompt = true, .ignore_eos = true};
}

/* A request for a fresh prompt of n tokens derived from seed, written to buf. */
static struct sched_request prompt_request(int32_t *buf, int32_t n, uint32_t seed, int32_t n_predict) {
    fake_prompt(buf, n, seed, VOCAB);
    return request(buf, n, n_predict);
}

static int submit(struct fx *f, struct recorder *r, const struct sched_request *req, struct sched_req **h) {
    memset(r, 0, sizeof *r);
    r->clock = &f->clock;
    struct sched_req *dummy;
    return sched_submit(f->s, req, &recorder_sink, r, f->now, h ? h : &dummy);
}

static int32_t tokens_of_seq(const struct batch *b, int32_t seq) {
    int32_t n = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) n += b->seq[i] == seq;
    return n;
}

static bool same_output(const struct recorder *a, const struct recorder *b, int choice) {
    return a->n_tokens[choice] == b->n_tokens[choice] && a->done[choice] == b->done[choice] &&
           !memcmp(a->tokens[choice], b->tokens[choice], (size_t)a->n_tokens[choice] * sizeof(int32_t));
}

/* Run one request alone on a roomy scheduler: the reference output. */
static int run_alone(const struct sched_request *req, struct recorder *out) {
    struct fx f;
    struct sched_config c = base_config();
    if (fx_init(&f, 1024, 8, MEM_KV, &c) != 0) return -1;
    if (submit(&f, out, req, NULL) != 0) return -1;
    fake_run(f.s, &f.now, 1, 1000);
    return fx_free(&f) ? -1 : 0;
}

/* Choice ch of request q (recorded in r) is what q alone with n = 1 and seed q.seed + ch gives,
 * n_tokens tokens long. */
static bool choice_matches_solo(const struct sched_request *q, const struct recorder *r, int ch, int32_t n_tokens) {
    static struct recorder alone;
    struct sched_request q1 = *q;
    q1.n_choices = 1;
    q1.seed = q->seed + (uint64_t)ch;
    return run_alone(&q1, &alone) == 0 && alone.n_tokens[0] == n_tokens && r->n_tokens[ch] == n_tokens &&
           !memcmp(alone.tokens[0], r->tokens[ch], (size_t)n_tokens * sizeof(int32_t));
}

TEST(sched_generates_until_n_predict_and_caches_the_prompt) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 256, 4, MEM_KV, NULL), 0);
    int32_t prompt[10];
    struct recorder r;
    struct sched_request req = prompt_request(prompt, 10, 1, 5);
    CHECK_EQ_INT(submit(&f, &r, &req, NULL), 0);
    CHECK_EQ_INT(fake_run(f.s, &f.now, 10, 100), 5); /* prompt + first token, then 4 decodes */
    CHECK_EQ_INT(r.n_tokens[0], 5);
    CHECK_EQ_INT(r.done[0], 1 + SCHED_STOP_LIMIT);
    CHECK_EQ_INT(r.counts[0].n_prompt, 10);
    CHECK_EQ_INT(r.counts[0].n_generated, 5);
    CHECK_EQ_INT(r.counts[0].n_cached, 0);
    CHECK(r.counts[0].prompt_ms > 0 && r.counts[0].predicted_ms > 0);
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.cells_used, 14); /* prompt + the 4 generated tokens fed back, kept as cache */
    CHECK_EQ_INT(st.cached_seqs, 1);
    CHECK_EQ_INT(st.generated_tokens, 5);
    CHECK_EQ_INT(st.prompt_tokens, 10);
    CHECK_EQ_INT(st.choices_done[SCHED_STOP_LIMIT], 1);
    CHECK_EQ_INT(st.active_requests, 0);
    CHECK_EQ_INT(f.eng.tokens_forwarded, 14);
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_rejects_bad_requests) {
    struct fx f;
    struct sched_config c = base_config();
    c.n_ctx = 64;
    c.max_n = 4;
    c.max_queue = 2;
    CHECK_EQ_INT(fx_init(&f, 48, 4, MEM_KV, &c), 0);
    int32_t prompt[80];
    fake_prompt(prompt, 80, 2, VOCAB);
    struct recorder r;
    struct sched_request req = request(prompt, 0, 5);
    CHECK_EQ_INT(submit(&f, &r, &req, NULL), -ERR_INVAL);                 /* empty */
    req = request(prompt, 64, 5);
    CHECK_EQ_INT(sched_max_prompt_tokens(f.s), 63);
    CHECK_EQ_INT(submit(&f, &r, &req, NULL), -ERR_TOOBIG);                /* context */
    req = request(prompt, 49, 5);
    CHECK_EQ_INT(submit(&f, &r, &req, NULL), -ERR_TOOBIG);                /* whole memory */
    req = request(prompt, 10, 5);
    req.n_choices = 5;
    CHECK_EQ_INT(submit(&f, &r, &req, NULL), -ERR_INVAL);                 /* max_n */
    req.n_choices = 1;
    req.n_probs = SCHED_MAX_PROBS + 1;
    CHECK_EQ_INT(submit(&f, &r, &req, NULL), -ERR_INVAL);
    req.n_probs = 0;
    int32_t bad[2] = {3, VOCAB};
    struct sched_request badreq = request(bad, 2, 5);
    CHECK_EQ_INT(submit(&f, &r, &badreq, NULL), -ERR_INVAL);              /* unknown token */
    struct recorder a, b, x;
    CHECK_EQ_INT(submit(&f, &a, &req, NULL), 0);
    CHECK_EQ_INT(submit(&f, &b, &req, NULL), 0);
    CHECK_EQ_INT(submit(&f, &x, &req, NULL), -ERR_BUSY);                  /* queue bound */
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.queued, 2);
    CHECK_EQ_INT(st.requests_rejected, 1);
    CHECK_EQ_INT(f.eng.samplers_live, 2); /* a refused request leaves nothing behind */
    fake_run(f.s, &f.now, 1, 100);
    CHECK_EQ_INT(a.done[0], 1 + SCHED_STOP_LIMIT);
    CHECK_EQ_INT(b.done[0], 1 + SCHED_STOP_LIMIT);
    CHECK_EQ_INT(x.n_tokens[0] + x.done[0], 0);
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_long_prompt_is_chunked_and_a_short_one_goes_first) {
    struct fx f;
    struct sched_config c = base_config();
    c.batch_tokens = 24; /* tight: who goes first matters */
    CHECK_EQ_INT(fx_init(&f, 1024, 8, MEM_KV, &c), 0);
    int32_t longp[200], shortp[10];
    fake_prompt(longp, 200, 3, VOCAB);
    fake_prompt(shortp, 10, 4, VOCAB);
    struct recorder rl, rs;
    struct sched_req *hl, *hs;
    struct sched_request ql = request(longp, 200, 4), qs = request(shortp, 10, 4);
    CHECK_EQ_INT(submit(&f, &rl, &ql, &hl), 0);
    struct sched_step *step;
    /* alone, the long prompt gets the whole step budget */
    CHECK_EQ_INT(sched_build_step(f.s, f.now, &step), 24);
    sched_step_compute(f.s, step);
    sched_step_complete(f.s, step, f.now += 5);
    CHECK_EQ_INT(submit(&f, &rs, &qs, &hs), 0);
    /* the very next step carries the short prompt whole, and the rest of the budget goes to the
     * long one */
    CHECK_EQ_INT(sched_build_step(f.s, f.now, &step), 24);
    const struct batch *b = sched_step_batch(step);
    CHECK_EQ_INT(tokens_of_seq(b, sched_req_seq(hs, 0)), 10);
    CHECK_EQ_INT(tokens_of_seq(b, sched_req_seq(hl, 0)), 14);
    sched_step_compute(f.s, step);
    sched_step_complete(f.s, step, f.now += 5);
    CHECK_EQ_INT(rs.n_tokens[0], 1); /* its first token, while the long prompt is still reading */
    CHECK_EQ_INT(rl.n_tokens[0], 0);
    int steps = fake_run(f.s, &f.now, 5, 1000);
    CHECK(steps >= 200 / 24);
    CHECK(rs.first_token_order < rl.first_token_order);
    CHECK(rs.done_order[0] < rl.done_order[0]);
    CHECK_EQ_INT(rl.n_tokens[0], 4);
    struct recorder alone;
    CHECK_EQ_INT(run_alone(&ql, &alone), 0);
    CHECK(same_output(&alone, &rl, 0)); /* chunking changes nothing in the output */
    CHECK_EQ_INT(fx_free(&f), 0);
}

/* Beside streaming requests a long prompt fills what the step's budget leaves after the decodes,
 * not chunk_tokens; a step carrying a newcomer's prompt (first, whole) keeps chunk_tokens for the
 * others, so the newcomer's first token does not wait for a full step; of two long prompts the
 * last in the order takes the rest, the other chunk_tokens. */
TEST(sched_a_long_prompt_fills_the_budget_beside_decodes) {
    struct fx f;
    struct sched_config c = base_config(); /* batch_tokens 64, chunk_tokens 16 */
    c.n_ctx = 1024;
    CHECK_EQ_INT(fx_init(&f, 2048, 8, MEM_KV, &c), 0);
    int32_t dp[4], lp[300], lp2[300], sp[5];
    fake_prompt(dp, 4, 11, VOCAB);
    fake_prompt(lp, 300, 12, VOCAB);
    fake_prompt(lp2, 300, 13, VOCAB);
    fake_prompt(sp, 5, 14, VOCAB);
    struct recorder rd, rl, rl2, rs;
    struct sched_req *hd, *hl, *hl2, *hs;
    struct sched_request qd = request(dp, 4, 50), ql = request(lp, 300, 1), ql2 = request(lp2, 300, 1),
                         qs = request(sp, 5, 4);
    CHECK_EQ_INT(submit(&f, &rd, &qd, &hd), 0);
    struct sched_step *step;
    CHECK_EQ_INT(sched_build_step(f.s, f.now, &step), 4); /* its prompt; it decodes from now on */
    sched_step_compute(f.s, step);
    sched_step_complete(f.s, step, f.now += 5);
    CHECK_EQ_INT(submit(&f, &rl, &ql, &hl), 0);
    CHECK_EQ_INT(sched_build_step(f.s, f.now, &step), 1 + 16); /* its first step: a newcomer's */
    sched_step_compute(f.s, step);
    sched_step_complete(f.s, step, f.now += 5);
    for (int k = 0; k < 2; k++) { /* then a decode + 63 prompt tokens, not 16 */
        CHECK_EQ_INT(sched_build_step(f.s, f.now, &step), 64);
        const struct batch *b = sched_step_batch(step);
        CHECK_EQ_INT(tokens_of_seq(b, sched_req_seq(hd, 0)), 1);
        CHECK_EQ_INT(tokens_of_seq(b, sched_req_seq(hl, 0)), 63);
        sched_step_compute(f.s, step);
        sched_step_complete(f.s, step, f.now += 5);
    }
    /* a newcomer: its whole prompt goes first, the long prompt a chunk of chunk_tokens */
    CHECK_EQ_INT(submit(&f, &rs, &qs, &hs), 0);
    CHECK_EQ_INT(sched_build_step(f.s, f.now, &step), 1 + 5 + 16);
    const struct batch *b = sched_step_batch(step);
    CHECK_EQ_INT(tokens_of_seq(b, sched_req_seq(hs, 0)), 5);
    CHECK_EQ_INT(tokens_of_seq(b, sched_req_seq(hl, 0)), 16);
    sched_step_compute(f.s, step);
    sched_step_complete(f.s, step, f.now += 5);
    CHECK_EQ_INT(rs.n_tokens[0], 1);
    /* then, beside two decodes, it fills the step again */
    CHECK_EQ_INT(sched_build_step(f.s, f.now, &step), 64);
    CHECK_EQ_INT(tokens_of_seq(sched_step_batch(step), sched_req_seq(hl, 0)), 62);
    sched_step_compute(f.s, step);
    sched_step_complete(f.s, step, f.now += 5);
    /* a second long prompt: its first step (new) keeps both at chunk_tokens; after it, the one
     * before the last keeps chunk_tokens and the last takes the rest */
    CHECK_EQ_INT(submit(&f, &rl2, &ql2, &hl2), 0);
    CHECK_EQ_INT(sched_build_step(f.s, f.now, &step), 2 + 16 + 16);
    sched_step_compute(f.s, step);
    sched_step_complete(f.s, step, f.now += 5);
    CHECK_EQ_INT(sched_build_step(f.s, f.now, &step), 64);
    b = sched_step_batch(step);
    int32_t n1 = tokens_of_seq(b, sched_req_seq(hl, 0)), n2 = tokens_of_seq(b, sched_req_seq(hl2, 0));
    CHECK_EQ_INT(n1 + n2, 62); /* two decodes */
    CHECK(n1 == 16 || n2 == 16);
    sched_step_compute(f.s, step);
    sched_step_complete(f.s, step, f.now += 5);
    fake_run(f.s, &f.now, 5, 1000);
    CHECK_EQ_INT(rl.done[0], 1 + SCHED_STOP_LIMIT);
    CHECK_EQ_INT(rl2.done[0], 1 + SCHED_STOP_LIMIT);
    CHECK_EQ_INT(rd.n_tokens[0], 50);
    CHECK_EQ_INT(fx_free(&f), 0);
}

/* Requests arriving at given steps; returns a hash of every step's batch and fills outputs. */
#define MIX_N 6
static uint64_t run_mix(int64_t cells, int kind, bool recompute, struct recorder *out, int64_t *preemptions) {
    struct fx f;
    struct sched_config c = base_config();
    c.preempt_recompute = recompute;
    if (fx_init(&f, cells, 8, kind, &c) != 0) return 0;
    static int32_t prompts[MIX_N][40];
    static const int lens[MIX_N] = {40, 12, 25, 7, 33, 18};
    static const int arrive[MIX_N] = {0, 0, 1, 3, 3, 6};
    uint64_t h = 1469598103934665603ull;
    int next = 0;
    for (int step_no = 0; step_no < 400; step_no++) {
        while (next < MIX_N && arrive[next] <= step_no) {
            fake_prompt(prompts[next], lens[next], 100 + (uint32_t)next, VOCAB);
            struct sched_request q = request(prompts[next], lens[next], 20 + next);
            if (submit(&f, &out[next], &q, NULL) != 0) return 0;
            next++;
        }
        struct sched_step *step;
        if (sched_build_step(f.s, f.now, &step) == 0) {
            if (next == MIX_N) break;
            continue;
        }
        const struct batch *b = sched_step_batch(step);
        for (int32_t i = 0; i < b->n_tokens; i++)
            h = (h ^ (uint64_t)(b->token[i] * 31 + b->pos[i] * 7 + b->seq[i])) * 1099511628211ull;
        sched_step_compute(f.s, step);
        sched_step_complete(f.s, step, f.now += 3);
    }
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    if (preemptions) *preemptions = st.preemptions;
    if (st.active_requests || st.queued) return 0;
    return fx_free(&f) ? 0 : h;
}

TEST(sched_is_deterministic_and_concurrency_does_not_change_outputs) {
    static struct recorder a[MIX_N], b[MIX_N], alone;
    uint64_t ha = run_mix(1024, MEM_KV, false, a, NULL), hb = run_mix(1024, MEM_KV, false, b, NULL);
    CHECK(ha != 0);
    CHECK(ha == hb); /* same arrival order: same steps, token for token */
    for (int i = 0; i < MIX_N; i++) {
        CHECK(same_output(&a[i], &b[i], 0));
        CHECK_EQ_INT(a[i].n_tokens[0], 20 + i);
        int32_t prompt[40];
        static const int lens[MIX_N] = {40, 12, 25, 7, 33, 18};
        fake_prompt(prompt, lens[i], 100 + (uint32_t)i, VOCAB);
        struct sched_request q = request(prompt, lens[i], 20 + i);
        CHECK_EQ_INT(run_alone(&q, &alone), 0);
        CHECK(same_output(&alone, &a[i], 0)); /* concurrent = one by one */
    }
}

TEST(sched_preemption_keeps_outputs_identical) {
    static struct recorder ref[MIX_N], got[MIX_N];
    int64_t pre = 0;
    CHECK(run_mix(1024, MEM_KV, false, ref, &pre) != 0);
    CHECK_EQ_INT(pre, 0);
    /* 96 cells for six sequences that grow to 47..65 tokens: they must take turns */
    struct { int kind; bool recompute; } modes[] = {
        {MEM_KV, false}, {MEM_KV, true}, {MEM_FAKE_KV, false}, {MEM_WHOLE_ONLY, false}, {MEM_WHOLE_ONLY, true}};
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        memset(got, 0, sizeof got);
        CHECK(run_mix(96, modes[m].kind, modes[m].recompute, got, &pre) != 0);
        CHECK(pre > 0);
        for (int i = 0; i < MIX_N; i++) {
            if (!same_output(&ref[i], &got[i], 0)) {
                fprintf(stderr, "  mode %zu request %d differs\n", m, i);
                CHECK(0);
            }
        }
    }
    /* a recurrent memory with 3 states for 6 sequences: admission waits for states */
    memset(got, 0, sizeof got);
    CHECK(run_mix(3, MEM_RECURRENT, false, got, &pre) != 0);
    for (int i = 0; i < MIX_N; i++) CHECK(same_output(&ref[i], &got[i], 0));
}

TEST(sched_admission_waits_for_memory) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 64, 4, MEM_KV, NULL), 0);
    int32_t p1[40], p2[40];
    fake_prompt(p1, 40, 5, VOCAB);
    fake_prompt(p2, 40, 6, VOCAB);
    struct recorder a, b;
    struct sched_req *ha, *hb;
    struct sched_request qa = request(p1, 40, 4), qb = request(p2, 40, 4);
    CHECK_EQ_INT(submit(&f, &a, &qa, &ha), 0);
    CHECK_EQ_INT(submit(&f, &b, &qb, &hb), 0);
    struct sched_step *step;
    CHECK(sched_build_step(f.s, f.now, &step) > 0);
    struct sched_slot slots[4];
    CHECK_EQ_INT(sched_slots(f.s, slots, 4), 2);
    CHECK_EQ_INT(slots[0].state, SCHED_QUEUED); /* b: 40 more cells do not fit beside a's 40 */
    CHECK_EQ_INT(slots[1].state, SCHED_PREFILL);
    CHECK_EQ_INT(sched_req_seq(hb, 0), -1);
    sched_step_compute(f.s, step);
    sched_step_complete(f.s, step, f.now += 1);
    fake_run(f.s, &f.now, 1, 100);
    CHECK_EQ_INT(a.done[0], 1 + SCHED_STOP_LIMIT);
    CHECK_EQ_INT(b.done[0], 1 + SCHED_STOP_LIMIT);
    CHECK(a.done_order[0] < b.first_token_order);
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.cache_evictions, 1); /* a's prompt cache made room for b */
    CHECK_EQ_INT(st.preemptions, 0);
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_shares_prefixes_with_the_prompt_cache) {
    int32_t pa[40], pb[40];
    fake_prompt(pa, 40, 7, VOCAB);
    memcpy(pb, pa, 30 * sizeof *pa);
    fake_prompt(pb + 30, 10, 8, VOCAB);
    static const int kinds[] = {MEM_KV, MEM_WHOLE_ONLY, MEM_RECURRENT};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        bool partial = kinds[k] == MEM_KV;
        struct fx f;
        CHECK_EQ_INT(fx_init(&f, kinds[k] == MEM_RECURRENT ? 4 : 256, 4, kinds[k], NULL), 0);
        struct recorder a, b, cc;
        struct sched_request qa = request(pa, 40, 3), qb = request(pb, 40, 3);
        CHECK_EQ_INT(submit(&f, &a, &qa, NULL), 0);
        fake_run(f.s, &f.now, 1, 100);
        int64_t before = f.eng.tokens_forwarded;
        CHECK_EQ_INT(submit(&f, &b, &qb, NULL), 0);
        fake_run(f.s, &f.now, 1, 100);
        /* with partial removal 30 tokens are shared; a whole-only memory cannot cut a's 42 */
        CHECK_EQ_INT(b.counts[0].n_cached, partial ? 30 : 0);
        CHECK_EQ_INT(f.eng.tokens_forwarded - before, (partial ? 10 : 40) + 2);
        struct recorder alone;
        CHECK_EQ_INT(run_alone(&qb, &alone), 0);
        CHECK(same_output(&alone, &b, 0));
        /* a conversation's next turn: a's whole history (prompt + 2 fed tokens) plus more */
        int32_t pc[50];
        memcpy(pc, pa, 40 * sizeof *pa);
        memcpy(pc + 40, a.tokens[0], 2 * sizeof *pc);
        fake_prompt(pc + 42, 8, 9, VOCAB);
        struct sched_request qc = request(pc, 50, 3);
        CHECK_EQ_INT(submit(&f, &cc, &qc, NULL), 0);
        fake_run(f.s, &f.now, 1, 100);
        CHECK_EQ_INT(cc.counts[0].n_cached, 42);
        CHECK_EQ_INT(run_alone(&qc, &alone), 0);
        CHECK(same_output(&alone, &cc, 0));
        struct sched_stats st;
        sched_stats(f.s, f.now, &st);
        CHECK_EQ_INT(st.cached_tokens, (partial ? 30 : 0) + 42);
        CHECK_EQ_INT(fx_free(&f), 0);
    }
}

/* Without partial removal a cached prompt keeps copies of its state at its first chunk ends
 * (SCHED_PROMPT_COPIES, 4): a prompt sharing only a prefix of it restarts from the last copy at or
 * before the shared length, with the output it gives alone. The copies only take free states. */
TEST(sched_a_shared_prefix_restarts_from_a_copy_at_a_chunk_end) {
    int32_t pa[100], pb[100];
    fake_prompt(pa, 100, 17, VOCAB);
    memcpy(pb, pa, 70 * sizeof *pa);
    fake_prompt(pb + 70, 30, 18, VOCAB);
    static const int kinds[] = {MEM_WHOLE_ONLY, MEM_RECURRENT, MEM_HYBRID};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        struct fx f;
        struct sched_config c = base_config();
        c.batch_tokens = 24; /* chunks of at most 24 tokens: ends at 24, 48, 72, 96 */
        CHECK_EQ_INT(fx_init(&f, kinds[k] == MEM_RECURRENT ? 8 : 512, 8, kinds[k], &c), 0);
        struct recorder a, b, alone;
        struct sched_request qa = request(pa, 100, 3), qb = request(pb, 100, 3);
        CHECK_EQ_INT(submit(&f, &a, &qa, NULL), 0);
        fake_run(f.s, &f.now, 1, 100);
        struct sched_stats st;
        sched_stats(f.s, f.now, &st);
        /* copies at 24, 48, 72 and 96, the one before the last prompt token, the end */
        CHECK_EQ_INT(st.cached_seqs, 4 + 2);
        int64_t before = f.eng.tokens_forwarded;
        CHECK_EQ_INT(submit(&f, &b, &qb, NULL), 0);
        fake_run(f.s, &f.now, 1, 100);
        CHECK_EQ_INT(b.counts[0].n_cached, 48);
        CHECK_EQ_INT(f.eng.tokens_forwarded - before, 100 - 48 + 2);
        CHECK_EQ_INT(run_alone(&qb, &alone), 0);
        CHECK(same_output(&alone, &b, 0));
        CHECK_EQ_INT(fx_free(&f), 0);
    }
    /* two states: the live sequence's and one spare, which the copy before the last prompt token
     * takes (evicting what it must); chunk-end copies never evict, and outputs stay the same */
    struct fx f;
    struct sched_config c = base_config();
    c.batch_tokens = 24;
    CHECK_EQ_INT(fx_init(&f, 2, 8, MEM_RECURRENT, &c), 0);
    struct recorder a, b, alone;
    struct sched_request qa = request(pa, 100, 3), qb = request(pb, 100, 3);
    CHECK_EQ_INT(submit(&f, &a, &qa, NULL), 0);
    fake_run(f.s, &f.now, 1, 100);
    CHECK_EQ_INT(submit(&f, &b, &qb, NULL), 0);
    fake_run(f.s, &f.now, 1, 100);
    CHECK_EQ_INT(run_alone(&qb, &alone), 0);
    CHECK(same_output(&alone, &b, 0));
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK(st.cached_seqs <= 2);
    CHECK_EQ_INT(fx_free(&f), 0);
}

/* A hybrid memory with fewer recurrent states than requests, cells to spare: admission counts the
 * states (no more sequences hold memory than there are states, the rest wait in the queue rather
 * than sit admitted without one), and the running ones take turns (time-slicing), each output the
 * request's alone. */
TEST(sched_hybrid_states_are_counted_and_time_sliced) {
    struct fx f;
    CHECK_EQ_INT(fx_init_hybrid(&f, 512, 2, 8, NULL), 0);
    static int32_t prompts[5][8];
    static struct recorder rec[5];
    struct sched_request q[5];
    for (int i = 0; i < 5; i++) {
        q[i] = prompt_request(prompts[i], 8, 90 + (uint32_t)i, 40);
        q[i].cache_prompt = false;
        CHECK_EQ_INT(submit(&f, &rec[i], &q[i], NULL), 0);
    }
    int most_held = 0, max_queued = 0;
    for (int step_no = 0; step_no < 1000; step_no++) {
        struct sched_step *step;
        if (sched_build_step(f.s, f.now, &step) == 0) break;
        sched_step_compute(f.s, step);
        sched_step_complete(f.s, step, f.now += 1);
        struct sched_stats st;
        sched_stats(f.s, f.now, &st);
        int held = st.active_seqs - st.preempted;
        most_held = held > most_held ? held : most_held;
        max_queued = st.queued > max_queued ? st.queued : max_queued;
        CHECK(st.states_used <= 2 && st.states_total == 2);
    }
    CHECK_EQ_INT(most_held, 2);
    CHECK_EQ_INT(max_queued, 3);
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK(st.preemptions > 0);
    CHECK_EQ_INT(st.active_requests + st.queued + st.preempted, 0);
    CHECK_EQ_INT(st.states_used, 0);
    for (int i = 0; i < 5; i++) {
        struct recorder alone;
        CHECK_EQ_INT(run_alone(&q[i], &alone), 0);
        CHECK(same_output(&alone, &rec[i], 0));
    }
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_cache_prompt_false_neither_reuses_nor_keeps) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 256, 4, MEM_KV, NULL), 0);
    int32_t p[20];
    struct recorder a, b;
    struct sched_request q = prompt_request(p, 20, 10, 3);
    CHECK_EQ_INT(submit(&f, &a, &q, NULL), 0);
    fake_run(f.s, &f.now, 1, 100);
    q.cache_prompt = false;
    CHECK_EQ_INT(submit(&f, &b, &q, NULL), 0);
    fake_run(f.s, &f.now, 1, 100);
    CHECK_EQ_INT(b.counts[0].n_cached, 0);
    CHECK(same_output(&a, &b, 0));
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.cached_seqs, 1); /* a's entry only */
    CHECK_EQ_INT(st.cells_used, 22);
    CHECK_EQ_INT(fx_free(&f), 0);
}

/* Requests of different cache partitions (API keys, cache_salt) never share cells: neither the
 * prompt cache nor a live sequence's; within a partition everything is shared as before, and an
 * entry of one partition never replaces another's as redundant. */
TEST(sched_cache_partitions_never_share) {
    static const int kinds[] = {MEM_KV, MEM_WHOLE_ONLY, MEM_RECURRENT};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        struct fx f;
        CHECK_EQ_INT(fx_init(&f, kinds[k] == MEM_RECURRENT ? 8 : 512, 8, kinds[k], NULL), 0);
        int32_t p[40];
        struct recorder a, b, c, again;
        struct sched_request q = prompt_request(p, 40, 31, 3);
        q.cache_partition = 1;
        CHECK_EQ_INT(submit(&f, &a, &q, NULL), 0);
        fake_run(f.s, &f.now, 1, 100);
        q.cache_partition = 2; /* the same prompt from another partition: nothing cached for it */
        CHECK_EQ_INT(submit(&f, &b, &q, NULL), 0);
        fake_run(f.s, &f.now, 1, 100);
        CHECK_EQ_INT(b.counts[0].n_cached, 0);
        CHECK(same_output(&a, &b, 0));
        q.cache_partition = 1; /* a's partition: its cache, not replaced by b's identical entry
                                * (without partial removal: the copy of a's state before its
                                * last prompt token, sched.h) */
        CHECK_EQ_INT(submit(&f, &c, &q, NULL), 0);
        fake_run(f.s, &f.now, 1, 100);
        CHECK_EQ_INT(c.counts[0].n_cached, 39);
        CHECK(same_output(&a, &c, 0));
        q.cache_partition = 2;
        CHECK_EQ_INT(submit(&f, &again, &q, NULL), 0);
        fake_run(f.s, &f.now, 1, 100);
        CHECK_EQ_INT(again.counts[0].n_cached, 39);
        CHECK_EQ_INT(fx_free(&f), 0);
    }

    /* live sharing: while d (partition 3) reads its prompt, e (partition 4) and g (partition 3)
     * arrive with the same prompt; only g shares d's cells */
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 512, 8, MEM_KV, NULL), 0);
    int32_t p[60];
    struct recorder d, e, g, alone;
    struct sched_request q = prompt_request(p, 60, 32, 3);
    q.cache_partition = 3;
    CHECK_EQ_INT(submit(&f, &d, &q, NULL), 0);
    CHECK_EQ_INT(fake_run(f.s, &f.now, 1, 1), 1);
    q.cache_partition = 4;
    CHECK_EQ_INT(submit(&f, &e, &q, NULL), 0);
    q.cache_partition = 3;
    CHECK_EQ_INT(submit(&f, &g, &q, NULL), 0);
    fake_run(f.s, &f.now, 1, 200);
    CHECK_EQ_INT(e.counts[0].n_cached, 0);
    CHECK(g.counts[0].n_cached > 0);
    CHECK_EQ_INT(run_alone(&q, &alone), 0);
    CHECK(same_output(&alone, &d, 0) && same_output(&alone, &e, 0) && same_output(&alone, &g, 0));
    CHECK_EQ_INT(fx_free(&f), 0);
}

/* The per-request distributions of /metrics, on a clock where every step takes 40 ms. */
TEST(sched_records_request_distributions) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 256, 4, MEM_KV, NULL), 0);
    int32_t p[20];
    struct recorder r;
    struct sched_request q = prompt_request(p, 20, 41, 4); /* one prompt step, then 3 decodes */
    q.n_choices = 2;
    CHECK_EQ_INT(submit(&f, &r, &q, NULL), 0);
    f.now += 5; /* admitted 5 ms after its submission */
    fake_run(f.s, &f.now, 40, 100);
    CHECK_EQ_INT(r.done[0], 1 + SCHED_STOP_LIMIT);
    CHECK_EQ_INT(r.done[1], 1 + SCHED_STOP_LIMIT);
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    int n;
    const double *tb = sched_hist_bounds(SCHED_HIST_TTFT, &n);
    CHECK(n >= 10 && n <= SCHED_HIST_MAX_BOUNDS);
    for (int i = 1; i < n; i++) CHECK(tb[i] > tb[i - 1]);
    /* which bucket a value falls in, and that the others are empty */
#define ONE_IN(kind, count, value)                                                         \
    do {                                                                                   \
        int n_;                                                                            \
        const double *b_ = sched_hist_bounds(kind, &n_);                                   \
        int at_ = 0;                                                                       \
        while (at_ < n_ && (value) > b_[at_]) at_++;                                       \
        for (int i_ = 0; i_ <= n_; i_++)                                                   \
            CHECK_EQ_INT(st.hist[kind].counts[i_], i_ == at_ ? (count) : 0);               \
        CHECK(fabs(st.hist[kind].sum - (count) * (value)) < 1e-9);                         \
    } while (0)
    ONE_IN(SCHED_HIST_TTFT, 1, 0.045);         /* 5 ms queued + the 40 ms prompt step */
    ONE_IN(SCHED_HIST_ITL, 2 * 3, 0.040);      /* 3 gaps per choice */
    ONE_IN(SCHED_HIST_E2E, 1, 0.165);
    ONE_IN(SCHED_HIST_QUEUE, 1, 0.005);
    ONE_IN(SCHED_HIST_PREFILL, 1, 0.040);
    ONE_IN(SCHED_HIST_DECODE, 1, 0.120);
    ONE_IN(SCHED_HIST_PROMPT_TOKENS, 1, 20);
    ONE_IN(SCHED_HIST_GEN_TOKENS, 1, 8);       /* both choices */
    CHECK_EQ_INT(st.choices_done[SCHED_STOP_LIMIT], 2);
    CHECK_EQ_INT(st.step_seqs, 1 + 2 * 3);     /* the prompt alone, then both choices */

    /* a request cancelled after its first token counts in the time to first token only */
    struct sched_req *h;
    q.n_choices = 1;
    q.n_predict = 50;
    CHECK_EQ_INT(submit(&f, &r, &q, &h), 0);
    fake_run(f.s, &f.now, 40, 2);
    CHECK_EQ_INT(r.n_tokens[0], 2);
    sched_cancel(f.s, h);
    fake_run(f.s, &f.now, 40, 100);
    sched_stats(f.s, f.now, &st);
    uint64_t ttft = 0, e2e = 0;
    for (int i = 0; i <= SCHED_HIST_MAX_BOUNDS; i++) {
        ttft += st.hist[SCHED_HIST_TTFT].counts[i];
        e2e += st.hist[SCHED_HIST_E2E].counts[i];
    }
    CHECK_EQ_INT(ttft, 2);
    CHECK_EQ_INT(e2e, 1);
    CHECK_EQ_INT(fx_free(&f), 0);
#undef ONE_IN
}

/* KV cells held by live sequences apart from those only the prompt cache holds; a prefix shared
 * by both counts as live. */
TEST(sched_stats_split_live_and_cached_cells) {
    static const int kinds[] = {MEM_KV, MEM_FAKE_KV, MEM_RECURRENT};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        bool recurrent = kinds[k] == MEM_RECURRENT;
        struct fx f;
        CHECK_EQ_INT(fx_init(&f, recurrent ? 8 : 256, 8, kinds[k], NULL), 0);
        int32_t pa[30], pb[30];
        struct recorder a, b;
        struct sched_request qa = prompt_request(pa, 30, 51, 2);
        CHECK_EQ_INT(submit(&f, &a, &qa, NULL), 0);
        fake_run(f.s, &f.now, 1, 100);
        struct sched_stats st;
        sched_stats(f.s, f.now, &st);
        CHECK_EQ_INT(st.cells_live, 0);
        CHECK_EQ_INT(st.cells_cached, st.cells_used);
        CHECK_EQ_INT(st.cells_cached, recurrent ? 2 : 31); /* a state (+ its checkpoint); 30 + 1 fed token */
        /* b shares a's first 20 tokens and runs: those count as live now */
        memcpy(pb, pa, 20 * sizeof *pb);
        fake_prompt(pb + 20, 10, 52, VOCAB);
        struct sched_request qb = request(pb, 30, 50);
        struct sched_req *h;
        CHECK_EQ_INT(submit(&f, &b, &qb, &h), 0);
        fake_run(f.s, &f.now, 1, 4);
        sched_stats(f.s, f.now, &st);
        CHECK_EQ_INT(st.cells_live + st.cells_cached, st.cells_used);
        if (recurrent) {
            CHECK_EQ_INT(st.cells_live, 1);
        } else {
            CHECK_EQ_INT(st.cells_live, 30 + b.n_tokens[0] - 1);
            CHECK_EQ_INT(st.cells_cached, 31 - 20);
        }
        sched_cancel(f.s, h);
        CHECK_EQ_INT(fx_free(&f), 0);
    }
}

TEST(sched_n_choices_evaluate_the_prompt_once) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 512, 8, MEM_KV, NULL), 0);
    int32_t p[50];
    fake_prompt(p, 50, 11, VOCAB);
    struct fake_sampling random = {.random = true};
    struct recorder r;
    struct sched_request q = request(p, 50, 6);
    q.n_choices = 4;
    q.seed = 42;
    q.sampler_params = &random;
    CHECK_EQ_INT(submit(&f, &r, &q, NULL), 0);
    fake_run(f.s, &f.now, 1, 100);
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.prompt_tokens, 50);                  /* once, not 4 times */
    CHECK_EQ_INT(f.eng.tokens_forwarded, 50 + 4 * 5);
    bool differ = false;
    for (int ch = 0; ch < 4; ch++) {
        CHECK_EQ_INT(r.n_tokens[ch], 6);
        CHECK_EQ_INT(r.done[ch], 1 + SCHED_STOP_LIMIT);
        differ |= memcmp(r.tokens[ch], r.tokens[0], 6 * sizeof(int32_t)) != 0;
        CHECK(choice_matches_solo(&q, &r, ch, 6)); /* what a single request with seed 42 + ch gives */
    }
    CHECK(differ); /* independent seeds: not four copies */
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_cancel_frees_cells_within_one_step) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 256, 4, MEM_KV, NULL), 0);
    int32_t pa[20], pb[20], pq[5];
    fake_prompt(pa, 20, 12, VOCAB);
    fake_prompt(pb, 20, 13, VOCAB);
    fake_prompt(pq, 5, 14, VOCAB);
    struct recorder a, b, qd;
    struct sched_req *ha, *hb, *hq;
    struct sched_request qa = request(pa, 20, 50), qb = request(pb, 20, 5);
    CHECK_EQ_INT(submit(&f, &a, &qa, &ha), 0);
    CHECK_EQ_INT(submit(&f, &b, &qb, &hb), 0);
    fake_run(f.s, &f.now, 1, 3);
    CHECK(a.n_tokens[0] > 0);
    int32_t seq_a = sched_req_seq(ha, 0);
    struct sched_step *step;
    CHECK(sched_build_step(f.s, f.now, &step) > 0);
    /* while the step is in flight: a queued request goes at once, a running one at completion */
    struct sched_request qq = request(pq, 5, 5);
    CHECK_EQ_INT(submit(&f, &qd, &qq, &hq), 0);
    sched_cancel(f.s, hq);
    sched_cancel(f.s, ha);
    int32_t a_tokens = a.n_tokens[0];
    CHECK(memory_seq_cells(f.mem, seq_a) > 0);
    sched_step_compute(f.s, step);
    sched_step_complete(f.s, step, f.now += 1);
    CHECK_EQ_INT(memory_seq_cells(f.mem, seq_a), 0); /* not even kept as cache */
    CHECK_EQ_INT(a.n_tokens[0], a_tokens);            /* no callback after the cancel */
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.requests_cancelled, 2);
    CHECK_EQ_INT(st.active_requests, 1);
    CHECK_EQ_INT(st.queued, 0);
    CHECK_EQ_INT(st.cells_used, memory_seq_cells(f.mem, sched_req_seq(hb, 0)));
    fake_run(f.s, &f.now, 1, 100);
    CHECK_EQ_INT(a.done[0] + qd.done[0] + qd.n_tokens[0], 0);
    CHECK_EQ_INT(b.done[0], 1 + SCHED_STOP_LIMIT);
    /* with no step in flight a cancel frees at once */
    CHECK_EQ_INT(submit(&f, &a, &qa, &ha), 0);
    fake_run(f.s, &f.now, 1, 2);
    seq_a = sched_req_seq(ha, 0);
    CHECK(memory_seq_cells(f.mem, seq_a) > 0);
    sched_cancel(f.s, ha);
    CHECK_EQ_INT(memory_seq_cells(f.mem, seq_a), 0);
    CHECK_EQ_INT(fx_free(&f), 0);
}

/* The owner is known to be gone before it can run its (paced, later) teardown: a deferred cancel
 * frees nothing now, but from then on no step holds the request's sequences, nothing is called
 * back, a queued one is neither admitted nor counted, and the next build frees it all. */
TEST(sched_cancel_deferred_leaves_every_later_step_and_frees_at_the_next_build) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 256, 4, MEM_KV, NULL), 0);
    int32_t pa[20], pb[20], pq[5];
    fake_prompt(pa, 20, 22, VOCAB);
    fake_prompt(pb, 20, 23, VOCAB);
    fake_prompt(pq, 5, 24, VOCAB);
    struct recorder a, b, qd;
    struct sched_req *ha, *hb, *hq;
    struct sched_request qa = request(pa, 20, 50), qb = request(pb, 20, 50), qq = request(pq, 5, 5);
    qa.cache_prompt = qb.cache_prompt = false; /* a's cells go when it does, not to the cache */
    CHECK_EQ_INT(submit(&f, &a, &qa, &ha), 0);
    CHECK_EQ_INT(submit(&f, &b, &qb, &hb), 0);
    fake_run(f.s, &f.now, 1, 3);
    int32_t seq_a = sched_req_seq(ha, 0), seq_b = sched_req_seq(hb, 0);
    CHECK(seq_a >= 0 && seq_b >= 0 && a.n_tokens[0] > 0);
    int64_t cells_a = memory_seq_cells(f.mem, seq_a);
    int32_t a_tokens = a.n_tokens[0];
    /* no step in flight: nothing is freed now (sched_cancel would free at once) */
    sched_cancel_deferred(f.s, ha);
    CHECK_EQ_INT(memory_seq_cells(f.mem, seq_a), cells_a);
    CHECK_EQ_INT(f.eng.samplers_live, 2);
    struct sched_slot slots[8];
    CHECK_EQ_INT(sched_slots(f.s, slots, 8), 1); /* gone from /slots at once */
    /* a queued request cancelled the same way is not admitted, and not counted as queued */
    CHECK_EQ_INT(submit(&f, &qd, &qq, &hq), 0);
    sched_cancel_deferred(f.s, hq);
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.queued, 0);
    CHECK_EQ_INT(st.requests_cancelled, 2);
    /* the next step holds b alone, and its build freed a's cells and samplers */
    struct sched_step *step;
    CHECK(sched_build_step(f.s, f.now, &step) > 0);
    const struct batch *bt = sched_step_batch(step);
    CHECK_EQ_INT(tokens_of_seq(bt, seq_a), 0);
    CHECK(tokens_of_seq(bt, seq_b) > 0);
    CHECK_EQ_INT(bt->n_tokens, tokens_of_seq(bt, seq_b)); /* nor the queued one */
    CHECK_EQ_INT(memory_seq_cells(f.mem, seq_a), 0);
    CHECK_EQ_INT(f.eng.samplers_live, 1);
    sched_step_compute(f.s, step);
    sched_step_complete(f.s, step, f.now += 1);
    /* during a step: the same as sched_cancel */
    CHECK(sched_build_step(f.s, f.now, &step) > 0);
    sched_cancel_deferred(f.s, hb);
    int32_t b_tokens = b.n_tokens[0];
    sched_step_compute(f.s, step);
    sched_step_complete(f.s, step, f.now += 1);
    CHECK_EQ_INT(b.n_tokens[0], b_tokens); /* no callback after it */
    CHECK_EQ_INT(memory_seq_cells(f.mem, seq_b), 0);
    fake_run(f.s, &f.now, 1, 10);
    CHECK_EQ_INT(a.n_tokens[0], a_tokens);
    CHECK_EQ_INT(a.done[0] + b.done[0] + qd.done[0] + qd.n_tokens[0], 0);
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.active_requests + st.queued, 0);
    CHECK_EQ_INT(st.cells_used, 0);
    CHECK_EQ_INT(fx_free(&f), 0);
}

/* A sink that cancels its own request from on_token: the handle stays usable until the call
 * returns, and nothing is called afterwards. */
static struct sched *cancel_sched;
static struct sched_req *cancel_handle;
static int cancel_tokens;
static bool cancel_on_token(void *owner, int32_t choice, int32_t token, const struct sched_token_probs *p) {
    if (++cancel_tokens == 3) sched_cancel(cancel_sched, cancel_handle);
    return true;
}
static void cancel_on_done(void *owner, int32_t choice, enum sched_stop reason, const struct sched_counts *c) {
    cancel_tokens += 1000;
}
static void cancel_on_error(void *owner, int err) { cancel_tokens += 1000; }

TEST(sched_cancel_from_inside_a_callback) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 256, 8, MEM_KV, NULL), 0);
    int32_t p[8];
    fake_prompt(p, 8, 15, VOCAB);
    struct sched_sink sink = {cancel_on_token, cancel_on_done, cancel_on_error, NULL};
    struct sched_request q = request(p, 8, 10);
    q.n_choices = 2;
    cancel_sched = f.s;
    cancel_tokens = 0;
    CHECK_EQ_INT(sched_submit(f.s, &q, &sink, NULL, f.now, &cancel_handle), 0);
    fake_run(f.s, &f.now, 1, 100);
    CHECK_EQ_INT(cancel_tokens, 3); /* both choices' first tokens, then one more, then silence */
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.cells_used, 0);
    CHECK_EQ_INT(st.active_requests, 0);
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_stop_word_eos_and_ignore_eos) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 1024, 8, MEM_KV, NULL), 0);
    f.eng.eos_every = 4; /* EOS after about four tokens on average */
    int32_t p[8];
    struct recorder w, e, i;
    struct sched_request q = prompt_request(p, 8, 16, 60);
    CHECK_EQ_INT(submit(&f, &w, &q, NULL), 0);
    w.stop_after = 1;
    q.ignore_eos = false;
    CHECK_EQ_INT(submit(&f, &e, &q, NULL), 0);
    q.ignore_eos = true;
    CHECK_EQ_INT(submit(&f, &i, &q, NULL), 0);
    fake_run(f.s, &f.now, 1, 200);
    CHECK_EQ_INT(w.done[0], 1 + SCHED_STOP_WORD);
    CHECK_EQ_INT(w.n_tokens[0], 1);
    CHECK_EQ_INT(e.done[0], 1 + SCHED_STOP_EOS);
    CHECK(e.n_tokens[0] < 60);
    CHECK_EQ_INT(i.done[0], 1 + SCHED_STOP_LIMIT);
    CHECK_EQ_INT(i.n_tokens[0], 60);
    bool saw_eos = false; /* ignore_eos passes the EOS tokens through */
    for (int k = 0; k < 60; k++) saw_eos |= i.tokens[0][k] == FAKE_EOS;
    CHECK(saw_eos);
    CHECK_EQ_INT(e.counts[0].n_generated, e.n_tokens[0]);
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_stops_at_the_context_limit) {
    struct fx f;
    struct sched_config c = base_config();
    c.max_seq_tokens = 20;
    CHECK_EQ_INT(fx_init(&f, 256, 4, MEM_KV, &c), 0);
    int32_t p[15];
    struct recorder r;
    struct sched_request q = prompt_request(p, 15, 17, -1);
    CHECK_EQ_INT(submit(&f, &r, &q, NULL), 0);
    fake_run(f.s, &f.now, 1, 100);
    CHECK_EQ_INT(r.done[0], 1 + SCHED_STOP_CONTEXT);
    CHECK_EQ_INT(r.n_tokens[0], 5);
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_forward_failure_fails_the_step_requests) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 256, 4, MEM_KV, NULL), 0);
    int32_t p[8];
    struct recorder a, b;
    struct sched_request q = prompt_request(p, 8, 18, 5);
    CHECK_EQ_INT(submit(&f, &a, &q, NULL), 0);
    f.eng.fail_forwards = 1;
    fake_run(f.s, &f.now, 1, 1);
    CHECK_EQ_INT(a.error, -ERR_IO);
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.cells_used, 0);
    CHECK_EQ_INT(st.requests_failed, 1);
    CHECK_EQ_INT(submit(&f, &b, &q, NULL), 0); /* the scheduler goes on */
    fake_run(f.s, &f.now, 1, 100);
    CHECK_EQ_INT(b.done[0], 1 + SCHED_STOP_LIMIT);
    CHECK_EQ_INT(a.calls_after_end, 0);
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_invalid_logits_fail_only_their_request) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 256, 4, MEM_KV, NULL), 0);
    int32_t p[8], p2[8];
    struct recorder alone, bad, good;
    struct sched_request q = prompt_request(p, 8, 21, 12);
    CHECK_EQ_INT(submit(&f, &alone, &q, NULL), 0);
    fake_run(f.s, &f.now, 1, 100);
    CHECK_EQ_INT(alone.done[0], 1 + SCHED_STOP_LIMIT);
    /* the same request beside one whose model output turns to NaN after 3 tokens */
    struct fake_sampling poison = {.invalid_after = 3};
    struct sched_request qb = prompt_request(p2, 8, 22, 12);
    qb.sampler_params = &poison;
    CHECK_EQ_INT(submit(&f, &bad, &qb, NULL), 0);
    CHECK_EQ_INT(submit(&f, &good, &q, NULL), 0);
    fake_run(f.s, &f.now, 1, 100);
    CHECK_EQ_INT(bad.error, -ERR_NUMERIC);
    CHECK_EQ_INT(bad.n_tokens[0], 3);
    CHECK_EQ_INT(bad.calls_after_end, 0);
    CHECK_EQ_INT(good.error, 0);
    CHECK_EQ_INT(good.done[0], 1 + SCHED_STOP_LIMIT);
    CHECK_EQ_INT(good.n_tokens[0], alone.n_tokens[0]);
    CHECK(memcmp(good.tokens[0], alone.tokens[0], sizeof(int32_t) * (size_t)alone.n_tokens[0]) == 0);
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.requests_failed, 1);
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_prompt_budget_follows_the_learned_step_time) {
    struct fx f;
    struct sched_config c = base_config();
    c.batch_tokens = 512;
    c.chunk_tokens = 512;
    c.max_step_ms = 100;
    CHECK_EQ_INT(fx_init(&f, 4096, 4, MEM_KV, &c), 0);
    static int32_t longp[250], other[4];
    fake_prompt(longp, 250, 19, VOCAB);
    fake_prompt(other, 4, 20, VOCAB);
    struct recorder a, b;
    struct sched_request qa = request(longp, 250, 2), qb = request(other, 4, 200);
    /* a generating sequence first, measured at 5 ms + 2 ms per token */
    CHECK_EQ_INT(submit(&f, &b, &qb, NULL), 0);
    struct sched_step *step;
    for (int i = 0; i < 3; i++) {
        int n = sched_build_step(f.s, f.now, &step);
        CHECK(n > 0);
        sched_step_compute(f.s, step);
        sched_step_complete(f.s, step, f.now += 5 + 2.0 * n);
    }
    CHECK_EQ_INT(submit(&f, &a, &qa, NULL), 0);
    int max_n = 0, steps = 0;
    while (a.n_tokens[0] == 0) {
        int n = sched_build_step(f.s, f.now, &step);
        CHECK(n > 0);
        if (n > max_n) max_n = n;
        sched_step_compute(f.s, step);
        sched_step_complete(f.s, step, f.now += 5 + 2.0 * n);
        steps++;
    }
    /* once learned, (100 - 5) / 2 = 47 tokens per step, one of them the decode */
    CHECK(max_n <= 64);      /* the first, unlearned step may be bigger, but not 250 */
    CHECK(steps >= 250 / 47);
    struct sched_step *last;
    int n = sched_build_step(f.s, f.now, &last);
    CHECK_EQ_INT(n, 2); /* two decodes */
    sched_step_compute(f.s, last);
    sched_step_complete(f.s, last, f.now += 9);
    fake_run(f.s, &f.now, 1, 400);
    CHECK_EQ_INT(fx_free(&f), 0);
}

/* Steps of a lone prompt of n_long tokens, each "taking" 5 ms + ms_per_token per token +
 * ms_per_cell per attended cell (the sum of pos + 1 over the batch); a second request arrives
 * once the first has read `arrive_after` tokens. sizes[] gets every step's token count, costs[]
 * (when not NULL) its time; returns the steps. */
static int solo_run(struct test_case *t, int32_t n_long, double ms_per_token, double ms_per_cell, double solo_ms,
                    double max_ms, int arrive_after, int *sizes, double *costs, int cap) {
    struct fx f;
    struct sched_config c = base_config();
    c.n_ctx = 1024;
    c.batch_tokens = 512;
    c.chunk_tokens = 128;
    c.max_step_ms = max_ms;
    c.solo_step_ms = solo_ms;
    if (n_long > 500 || fx_init(&f, 4096, 4, MEM_KV, &c) != 0) return -1;
    static int32_t longp[500], shortp[6];
    fake_prompt(longp, n_long, 31, VOCAB);
    fake_prompt(shortp, 6, 32, VOCAB);
    struct recorder a, b;
    struct sched_request qa = request(longp, n_long, 1), qb = request(shortp, 6, 1);
    if (submit(&f, &a, &qa, NULL) != 0) return -1;
    int steps = 0, read = 0;
    bool sent = false;
    struct sched_step *step;
    int n;
    while ((n = sched_build_step(f.s, f.now, &step)) > 0) {
        const struct batch *bt = sched_step_batch(step);
        double attn = 0;
        for (int32_t i = 0; i < bt->n_tokens; i++) attn += bt->pos[i] + 1;
        double ms = 5 + ms_per_token * n + ms_per_cell * attn;
        if (steps < cap) {
            sizes[steps] = n;
            if (costs) costs[steps] = ms;
        }
        steps++;
        sched_step_compute(f.s, step);
        sched_step_complete(f.s, step, f.now += ms);
        read += n;
        if (!sent && arrive_after >= 0 && read >= arrive_after) {
            if (submit(&f, &b, &qb, NULL) != 0) return -1;
            sent = true;
        }
    }
    if (a.done[0] != 1 + SCHED_STOP_LIMIT || (sent && b.done[0] != 1 + SCHED_STOP_LIMIT)) steps = -1;
    if (fx_free(&f)) steps = -1;
    return steps;
}

static int solo_steps(struct test_case *t, double ms_per_token, double solo_ms, double max_ms, int arrive_after,
                      int *sizes, int cap) {
    return solo_run(t, 400, ms_per_token, 0, solo_ms, max_ms, arrive_after, sizes, NULL, cap);
}

TEST(sched_a_lone_long_prompt_stays_within_solo_step_ms_as_its_context_grows) {
    /* attention dominates late in the prompt: at 400 a 40-token chunk costs 5 + 4 + 67 ms (the
     * fake engine holds 512 tokens of context: the targets are scaled down to 80 and 40 ms) */
    int sizes[128];
    double costs[128];
    int steps = solo_run(t, 500, 0.1, 4e-3, 80, 40, -1, sizes, costs, 128);
    CHECK(steps > 5 && steps <= 128);
    int total = 0, over = 0;
    for (int i = 0; i < steps; i++) {
        total += sizes[i];
        if (i >= 3) over += costs[i] > 80 * 1.02; /* the probe and two steps learn */
    }
    CHECK_EQ_INT(total, 500);
    CHECK_EQ_INT(over, 0);
    CHECK(sizes[2] > sizes[3] && sizes[3] > sizes[steps - 2]); /* chunks shrink as the context grows */
    for (int i = 3; i < steps - 1; i++) CHECK(costs[i] > 70);  /* but still fill most of the target */
    /* someone arriving late in the prompt waits for at most the step in flight, then gets a step
     * within max_step_ms although the long prompt's chunk attends 350+ cells per row */
    steps = solo_run(t, 500, 0.1, 4e-3, 80, 40, 350, sizes, costs, 128);
    CHECK(steps > 0 && steps <= 128);
    int read = 0, i = 0;
    while (read < 350) read += sizes[i++];
    CHECK(i >= 4 && costs[i - 1] <= 80 * 1.02);
    CHECK(costs[i] <= 40 * 1.02);
    CHECK(sizes[i] > 6);
}

TEST(sched_a_lone_prompt_is_capped_by_solo_step_ms) {
    int sizes[64];
    /* the first step is a probe; then steps of what fits in 200 ms: (200 - 5) / 2 = 97 tokens */
    int steps = solo_steps(t, 2, 200, 100, -1, sizes, 64);
    CHECK(steps > 0 && steps <= 64);
    CHECK_EQ_INT(sizes[0], 32);
    int total = 0, biggest = 0;
    for (int i = 0; i < steps; i++) {
        total += sizes[i];
        if (sizes[i] > biggest) biggest = sizes[i];
        CHECK(5 + 2.0 * sizes[i] <= 200); /* every step within the solo target */
    }
    CHECK_EQ_INT(total, 400);      /* the prompt (its logits give the one token of n_predict 1) */
    CHECK_EQ_INT(biggest, 97);     /* and as big as fits: more than the 47 of a shared step */
    CHECK(steps <= 1 + 400 / 90 + 2);

    /* someone arrives after 150 tokens: from then on steps stay within max_step_ms (47 tokens) */
    steps = solo_steps(t, 2, 200, 100, 150, sizes, 64);

    CHECK(steps > 0 && steps <= 64);
    int read = 0, i = 0;
    while (read < 150) read += sizes[i++];
    CHECK(i >= 2 && sizes[i - 1] > 47);  /* the solo step in flight when it arrived */
    CHECK(sizes[i] <= 47);               /* its own step: the newcomer's prompt + a chunk */
    CHECK(sizes[i] > 6);

    /* solo_step_ms 0: no time cap, a lone prompt takes the whole batch_tokens (and no probe) */
    steps = solo_steps(t, 2, 0, 100, -1, sizes, 64);
    CHECK_EQ_INT(steps, 1);
    CHECK_EQ_INT(sizes[0], 400);
    /* a solo target below max_step_ms counts as max_step_ms */
    steps = solo_steps(t, 2, 50, 100, -1, sizes, 64);
    CHECK(steps > 0 && steps <= 64);
    biggest = 0;
    for (int k = 0; k < steps; k++) biggest = sizes[k] > biggest ? sizes[k] : biggest;
    CHECK_EQ_INT(biggest, 47);
    /* a machine so slow that 200 ms hold 19 tokens: a lone prompt still gets 32 per step */
    steps = solo_steps(t, 10, 200, 100, -1, sizes, 64);
    CHECK_EQ_INT(steps, (400 + 31) / 32);
    for (int k = 0; k < steps - 1; k++) CHECK_EQ_INT(sizes[k], 32);
}

/* A step carrying a newcomer's prompt aims at 70% of max_step_ms (its first token waits for the
 * step in flight, then for this one), but keeps SCHED_PROBE_TOKENS rows as far as max_step_ms
 * holds them (smaller steps cost more per token). A lone 400-token prompt with solo_step_ms 200
 * and max_step_ms 100, steps costing 5 ms + ms_per_token per token; a 6-token request arrives
 * after 150 tokens: the tokens of its step (before: of the solo step in flight). */
static int newcomer_step(struct test_case *t, double ms_per_token, int *before) {
    int sizes[64];
    int steps = solo_steps(t, ms_per_token, 200, 100, 150, sizes, 64);
    if (steps <= 0 || steps > 64) return -1;
    int read = 0, i = 0;
    while (read < 150) read += sizes[i++];
    if (i >= steps) return -1;
    *before = sizes[i - 1];
    return sizes[i];
}

TEST(sched_a_newcomer_step_aims_at_70_percent_of_max_step_ms) {
    int before;
    /* 70 ms hold (70 - 5) / 1 = 65 tokens: the newcomer's 6 and 59 of the long prompt */
    CHECK_EQ_INT(newcomer_step(t, 1, &before), 65);
    CHECK(before > 95); /* the step in flight: a solo one, beyond max_step_ms */
    /* (70 - 5) / 2.2 = 29 tokens, below the probe's 32 rows, which fit in 100 ms */
    CHECK_EQ_INT(newcomer_step(t, 2.2, &before), SCHED_PROBE_TOKENS);
    CHECK(before > 43);
    /* (70 - 5) / 4 = 16, and 100 ms hold only (100 - 5) / 4 = 23 of the 32 rows */
    CHECK_EQ_INT(newcomer_step(t, 4, &before), 23);
}

TEST(sched_step_cost_fits_a_line) {
    double fixed, per, cell;
    struct step_cost k;
    step_cost_init(&k);
    CHECK_EQ_INT(step_cost_tokens_within(&k, 100, 0, 0, 0), -1);
    /* steps from position 0 whose time does not depend on the attention */
    for (int i = 0; i < 30; i++) {
        int n = 10 + (i % 5) * 20;
        step_cost_observe(&k, n, step_cost_attn(0, n), 5 + 2.0 * n);
    }
    step_cost_model(&k, &fixed, &per, &cell);
    CHECK(fixed > 4.9 && fixed < 5.1);
    CHECK(per > 1.99 && per < 2.01);
    CHECK(cell >= 0 && cell < 1e-9);
    CHECK_EQ_INT(step_cost_tokens_within(&k, 100, 0, 0, 0), 47);
    CHECK_EQ_INT(step_cost_tokens_within(&k, 100, 0, 0, 3000), 47); /* the position does not matter */
    CHECK_EQ_INT(step_cost_tokens_within(&k, 100, 7, 7 * 500, 0), 40); /* after 7 decodes */
    CHECK(step_cost_predict_ms(&k, 100, 5050) > 204.9 && step_cost_predict_ms(&k, 100, 5050) < 205.1);
    /* the machine gets twice as slow: the fit follows within a few dozen steps */
    for (int i = 0; i < 60; i++) {
        int n = 10 + (i % 5) * 20;
        step_cost_observe(&k, n, step_cost_attn(0, n), 10 + 4.0 * n);
    }
    step_cost_model(&k, &fixed, &per, &cell);
    CHECK(per > 3.9 && per < 4.1);
    /* one size only: cost per token */
    step_cost_init(&k);
    step_cost_observe(&k, 1, 1, 20);
    CHECK_EQ_INT(step_cost_tokens_within(&k, 100, 0, 0, 0), 5);
    CHECK(step_cost_predict_ms(&k, 3, 100) > 59.9 && step_cost_predict_ms(&k, 3, 100) < 60.1);
}

/* A synthetic machine where attention is a large share: 4 ms + 0.5 ms per token + 0.2 us per
 * attended cell, with +-3 % of deterministic noise. */
static double attn_cost(int32_t n, double attn, int i) { return (4 + 0.5 * n + 2e-4 * attn) * (1 + 0.03 * ((i * 7 % 5) - 2) / 2.0); }

TEST(sched_step_cost_learns_the_attention_term) {
    struct step_cost k;
    step_cost_init(&k);
    /* a lone 6000-token prompt in chunks of what fits in 200 ms, the first a 32-token probe */
    int32_t pos = 0, steps = 0, over = 0, first = 0, last = 0;
    while (pos < 6000) {
        int32_t n = k.observed == 0 ? 32 : step_cost_tokens_within(&k, 200, 0, 0, pos);
        CHECK(n >= 1);
        if (n > 6000 - pos) n = 6000 - pos;
        double attn = step_cost_attn(pos, n), ms = attn_cost(n, attn, steps);
        if (steps >= 3 && pos + n < 6000) { /* learned, and not the leftover */
            over += ms > 200 * 1.05;
            if (!first) first = n;
            last = n;
        }
        step_cost_observe(&k, n, attn, ms);
        pos += n;
        steps++;
    }
    CHECK_EQ_INT(over, 0);           /* every learned step within its target (and the noise) */
    CHECK(first > 2 * last);         /* chunks shrink as the context grows */
    CHECK(last > 100 && steps < 60); /* but stay as big as fit: at 5800, 4 + 0.5 n + 2e-4 n (5800 + n / 2) = 200 at n = 116 */
    /* the model predicts steps it has not seen, of sizes it has, within 5 % (the fixed 4 ms
     * drowns in the noise of 200 ms steps: far smaller steps are not predicted as well) */
    double fixed, per, cell;
    step_cost_model(&k, &fixed, &per, &cell);
    CHECK(cell > 1.5e-4 && cell < 2.5e-4);
    for (int32_t p0 = 0; p0 <= 8000; p0 += 2000) {
        double attn = step_cost_attn(p0, 150), want = 4 + 0.5 * 150 + 2e-4 * attn;
        double got = step_cost_predict_ms(&k, 150, attn);
        CHECK(got > want * 0.95 && got < want * 1.05);
    }
    /* decodes with long contexts take their share: 16 decodes at 4000 leave fewer prompt tokens */
    double decode_attn = 16 * 4001.0;
    int32_t with = step_cost_tokens_within(&k, 100, 16, decode_attn, 1000);
    int32_t without = step_cost_tokens_within(&k, 100, 0, 0, 1000);
    CHECK(with < without);
    CHECK(step_cost_predict_ms(&k, 16 + with, decode_attn + step_cost_attn(1000, with)) <= 100);
    CHECK(step_cost_predict_ms(&k, 16 + with + 1, decode_attn + step_cost_attn(1000, with + 1)) > 100);
    /* the same sizes at constant positions give no spread in attention apart from n: the fit
     * falls back and still predicts the steps it saw */
    step_cost_init(&k);
    for (int i = 0; i < 40; i++) {
        double attn = step_cost_attn(2000, 100);
        step_cost_observe(&k, 100, attn, attn_cost(100, attn, 0));
    }
    double want = attn_cost(100, step_cost_attn(2000, 100), 0);
    CHECK(fabs(step_cost_predict_ms(&k, 100, step_cost_attn(2000, 100)) - want) < 0.01 * want);
}

/* sched_stats, and sched_stalled (plain /health's cheaper question) must give the same answer. */
static void stats_checked_at(struct test_case *t, struct sched *s, double now_ms, struct sched_stats *st) {
    sched_stats(s, now_ms, st);
    CHECK_EQ_INT(sched_stalled(s, now_ms), st->stalled);
}
#define stats_checked(s, now_ms, st) stats_checked_at(t, s, now_ms, st)

TEST(sched_stall_detection) {
    struct fx f;
    struct sched_config c = base_config();
    c.stall_timeout_ms = 5000;
    c.stall_factor = 10;
    c.stall_grace_ms = 1000;
    CHECK_EQ_INT(fx_init(&f, 256, 4, MEM_KV, &c), 0);
    struct sched_stats st;
    f.now = 100000;
    stats_checked(f.s, f.now, &st);
    CHECK(!st.stalled); /* idle is not stalled, however long */
    int32_t p[8];
    struct recorder r;
    struct sched_request q = prompt_request(p, 8, 21, 50);
    CHECK_EQ_INT(submit(&f, &r, &q, NULL), 0);
    struct sched_step *step;
    CHECK(sched_build_step(f.s, f.now, &step) > 0);
    stats_checked(f.s, f.now + 4000, &st); /* a first, cold step: no expectation to be late for */
    CHECK(!st.stalled);
    CHECK(st.step_in_flight);
    stats_checked(f.s, f.now + 6000, &st);
    CHECK(st.stalled);
    sched_step_compute(f.s, step);
    sched_step_complete(f.s, step, f.now += 10);
    struct recorder r2;
    CHECK_EQ_INT(submit(&f, &r2, &q, NULL), 0);
    stats_checked(f.s, f.now + 4000, &st);
    CHECK(!st.stalled);
    stats_checked(f.s, f.now + 6000, &st); /* queued work, no progress */
    CHECK(st.stalled);
    f.now += 6000;
    fake_run(f.s, &f.now, 10, 5); /* steps of 10 ms: progress again */
    stats_checked(f.s, f.now, &st);
    CHECK(!st.stalled);
    CHECK(st.tokens_per_s > 0);
    CHECK(sched_build_step(f.s, f.now, &step) > 0);
    stats_checked(f.s, f.now + 500, &st);
    CHECK(st.step_in_flight);
    CHECK(st.step_expected_ms > 9 && st.step_expected_ms < 11);
    CHECK(!st.stalled);
    stats_checked(f.s, f.now + 1200, &st); /* > 10 x 10 ms + 1000 ms: hung */
    CHECK(st.stalled);
    sched_step_compute(f.s, step);
    sched_step_complete(f.s, step, f.now += 1200);
    stats_checked(f.s, f.now, &st);
    CHECK(!st.stalled);
    CHECK_EQ_INT(st.step_hist[SCHED_STEP_HIST_BUCKETS - 2], 1); /* the 1200 ms step: (1000, 2500] */
    uint64_t steps = 0;
    for (int i = 0; i < SCHED_STEP_HIST_BUCKETS; i++) steps += st.step_hist[i];
    CHECK_EQ_INT(steps, st.steps);
    CHECK(st.step_ms_sum >= 1200 + 10 * 5 && st.step_ms_sum < 1200 + 10 * 8);
    fake_run(f.s, &f.now, 10, 100);
    CHECK_EQ_INT(fx_free(&f), 0);

    /* steps known to take 100 ms, a stall timeout of 50 ms: a step running for 150 ms is
     * progress, not a stall (only its own expected time judges it) */
    c.stall_timeout_ms = 50;
    CHECK_EQ_INT(fx_init(&f, 256, 4, MEM_KV, &c), 0);
    struct recorder r3;
    CHECK_EQ_INT(submit(&f, &r3, &q, NULL), 0);
    fake_run(f.s, &f.now, 100, 3);
    CHECK(sched_build_step(f.s, f.now, &step) > 0);
    stats_checked(f.s, f.now + 150, &st);
    CHECK(!st.stalled);
    sched_step_compute(f.s, step);
    sched_step_complete(f.s, step, f.now += 150);
    fake_run(f.s, &f.now, 100, 100);
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_slots_describe_every_sequence) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 256, 8, MEM_KV, NULL), 0);
    int32_t p[30];
    struct recorder a, b;
    struct sched_request q = prompt_request(p, 30, 22, 5);
    q.n_choices = 2;
    CHECK_EQ_INT(submit(&f, &a, &q, NULL), 0);
    q.n_choices = 1;
    CHECK_EQ_INT(submit(&f, &b, &q, NULL), 0);
    struct sched_slot s[8];
    CHECK_EQ_INT(sched_slots(f.s, s, 8), 2);
    CHECK_EQ_INT(s[0].state, SCHED_QUEUED);
    fake_run(f.s, &f.now, 1, 1);
    CHECK_EQ_INT(sched_slots(f.s, s, 8), 3);
    CHECK_EQ_INT(s[0].state, SCHED_PREFILL);
    CHECK_EQ_INT(s[0].cells, 16);
    CHECK_EQ_INT(s[1].state, SCHED_FORKING);
    CHECK_EQ_INT(s[1].seq, -1);
    fake_run(f.s, &f.now, 1, 3);
    CHECK_EQ_INT(sched_slots(f.s, s, 8), 3);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(s[i].state, SCHED_GENERATE);
        CHECK(s[i].n_generated >= 1);
        CHECK_EQ_INT(s[i].n_prompt, 30);
    }
    CHECK_EQ_INT(sched_slots(f.s, s, 1), 3); /* counts all, fills what fits */
    CHECK_EQ_STR(sched_seq_state_str(SCHED_PREEMPTED), "preempted");
    CHECK_EQ_STR(sched_stop_str(SCHED_STOP_WORD), "word");
    fake_run(f.s, &f.now, 1, 100);
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_nothing_starves_under_a_stream_of_new_prompts) {
    struct fx f;
    struct sched_config c = base_config();
    c.batch_tokens = 16;
    c.chunk_tokens = 16;
    c.starve_steps = 4;
    CHECK_EQ_INT(fx_init(&f, 4096, 16, MEM_KV, &c), 0);
    static int32_t longp[120], shorts[40][16];
    fake_prompt(longp, 120, 23, VOCAB);
    struct recorder rl;
    static struct recorder rs[40];
    struct sched_request ql = request(longp, 120, 1);
    CHECK_EQ_INT(submit(&f, &rl, &ql, NULL), 0);
    /* every step a new 16-token prompt arrives, enough to fill each step by itself */
    int served_gap = 0, worst_gap = 0;
    for (int i = 0; i < 40 && !rl.done[0]; i++) {
        fake_prompt(shorts[i], 16, 200 + (uint32_t)i, VOCAB);
        struct sched_request q = request(shorts[i], 16, 1);
        CHECK_EQ_INT(submit(&f, &rs[i], &q, NULL), 0);
        struct sched_step *step;
        CHECK(sched_build_step(f.s, f.now, &step) > 0);
        bool served = tokens_of_seq(sched_step_batch(step), 0) > 0;
        served_gap = served ? 0 : served_gap + 1;
        if (served_gap > worst_gap) worst_gap = served_gap;
        sched_step_compute(f.s, step);
        sched_step_complete(f.s, step, f.now += 1);
    }
    CHECK(worst_gap <= 4);
    fake_run(f.s, &f.now, 1, 1000);
    CHECK_EQ_INT(rl.done[0], 1 + SCHED_STOP_LIMIT);
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_memory_refusing_a_batch_fails_its_requests) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 256, 4, MEM_FAKE_KV, NULL), 0);
    int32_t p[8];
    struct recorder a, b;
    struct sched_request q = prompt_request(p, 8, 24, 4);
    CHECK_EQ_INT(submit(&f, &a, &q, NULL), 0);
    fake_memory_fail_reserves(f.mem, 1, -ERR_INVAL);
    CHECK_EQ_INT(fake_run(f.s, &f.now, 1, 10), 0); /* nothing left to run */
    CHECK_EQ_INT(a.error, -ERR_INVAL);
    CHECK_EQ_INT(submit(&f, &b, &q, NULL), 0);
    fake_run(f.s, &f.now, 1, 10);
    CHECK_EQ_INT(b.done[0], 1 + SCHED_STOP_LIMIT);
    CHECK_EQ_INT(a.calls_after_end, 0);
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_decodes_rotate_when_they_exceed_the_batch) {
    struct fx f;
    struct sched_config c = base_config();
    c.batch_tokens = 4;
    c.chunk_tokens = 4;
    CHECK_EQ_INT(fx_init(&f, 1024, 16, MEM_KV, &c), 0);
    static int32_t p[7][6];
    static struct recorder r[7];
    for (int i = 0; i < 6; i++) {
        fake_prompt(p[i], 3, 300 + (uint32_t)i, VOCAB);
        struct sched_request q = request(p[i], 3, 30);
        CHECK_EQ_INT(submit(&f, &r[i], &q, NULL), 0);
    }
    fake_run(f.s, &f.now, 1, 8); /* all six prompts read: six decodes for a batch of four */
    for (int i = 0; i < 6; i++) CHECK(r[i].n_tokens[0] >= 1);
    fake_prompt(p[6], 6, 306, VOCAB);
    struct sched_request q = request(p[6], 6, 2);
    CHECK_EQ_INT(submit(&f, &r[6], &q, NULL), 0);
    int before[6];
    for (int i = 0; i < 6; i++) before[i] = r[i].n_tokens[0];
    fake_run(f.s, &f.now, 1, 3);
    for (int i = 0; i < 6; i++) CHECK(r[i].n_tokens[0] > before[i]); /* nobody waits > 2 steps */
    CHECK_EQ_INT(r[6].n_tokens[0], 1); /* the prompt got its 2 tokens a step: read in 3 */
    fake_run(f.s, &f.now, 1, 1000);
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(r[i].n_tokens[0], 30);
    CHECK_EQ_INT(fx_free(&f), 0);
}

/* The threading contract: compute runs on another thread while the loop thread submits,
 * cancels and reads stats and slots. (Run under ThreadSanitizer to check for races.) */
struct compute_job {
    struct sched *s;
    struct sched_step *step;
};
static void *compute_thread(void *arg) {
    struct compute_job *job = arg;
    sched_step_compute(job->s, job->step);
    return NULL;
}

TEST(sched_compute_runs_on_a_worker_while_the_loop_serves) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 1024, 16, MEM_KV, NULL), 0);
    static int32_t p[12][20];
    static struct recorder r[12];
    struct sched_req *h[12];
    int submitted = 0;
    for (int round = 0; round < 40; round++) {
        struct sched_step *step;
        int n = sched_build_step(f.s, f.now, &step);
        if (n == 0 && submitted == 12) break;
        pthread_t th;
        struct compute_job job = {f.s, step};
        if (n > 0) CHECK_EQ_INT(pthread_create(&th, NULL, compute_thread, &job), 0);
        if (submitted < 12) { /* the loop thread keeps serving while the step computes */
            fake_prompt(p[submitted], 20, 400 + (uint32_t)submitted, VOCAB);
            struct sched_request q = request(p[submitted], 20, 8);
            CHECK_EQ_INT(submit(&f, &r[submitted], &q, &h[submitted]), 0);
            if (submitted % 4 == 3) sched_cancel(f.s, h[submitted]); /* still queued */
            if (submitted == 5) sched_cancel(f.s, h[1]);             /* running: deferred */
            submitted++;
        }
        struct sched_stats st;
        struct sched_slot slots[16];
        sched_stats(f.s, f.now, &st);
        sched_slots(f.s, slots, 16);
        if (n > 0) {
            CHECK_EQ_INT(pthread_join(th, NULL), 0);
            sched_step_complete(f.s, step, f.now += 1);
        }
    }
    fake_run(f.s, &f.now, 1, 1000);
    for (int i = 0; i < 12; i++) {
        bool cancelled = i % 4 == 3 || i == 1;
        CHECK_EQ_INT(r[i].done[0], cancelled ? 0 : 1 + SCHED_STOP_LIMIT);
        if (!cancelled) CHECK_EQ_INT(r[i].n_tokens[0], 8);
    }
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_a_sequence_alone_stops_when_it_fills_the_memory) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 24, 4, MEM_KV, NULL), 0);
    int32_t p[15];
    struct recorder a, b;
    struct sched_request q = prompt_request(p, 15, 25, -1);
    CHECK_EQ_INT(submit(&f, &a, &q, NULL), 0);
    CHECK_EQ_INT(submit(&f, &b, &q, NULL), 0);
    fake_run(f.s, &f.now, 1, 200);
    /* b waits (15 + 15 > 24), a fills all 24 cells: 9 generated tokens fed back + 1 pending */
    CHECK_EQ_INT(a.done[0], 1 + SCHED_STOP_CONTEXT);
    CHECK_EQ_INT(a.n_tokens[0], 10);
    CHECK_EQ_INT(b.done[0], 1 + SCHED_STOP_CONTEXT);
    CHECK_EQ_INT(b.counts[0].n_cached, 14); /* a's cache served b's prompt */
    CHECK(same_output(&a, &b, 0));
    CHECK_EQ_INT(fx_free(&f), 0);
}

/* Random arrivals, shared prefixes, n choices, cancellations and a memory far too small, on
 * every memory kind and preemption mode: every request that was not cancelled ends with exactly
 * the output it has alone, and the scheduler never goes idle with work left. */
static uint32_t rnd(uint32_t *st) {
    *st ^= *st << 13;
    *st ^= *st >> 17;
    *st ^= *st << 5;
    return *st;
}

#define RND_REQS 16
TEST(sched_random_workloads_match_solo_runs) {
    static int32_t prompts[RND_REQS][32];
    static struct recorder rec[RND_REQS], alone;
    static struct sched_request reqs[RND_REQS];
    static const struct fake_sampling random = {.random = true};
    struct { int kind; bool recompute; int64_t cells; } modes[] = {
        {MEM_KV, false, 96}, {MEM_KV, true, 96}, {MEM_WHOLE_ONLY, false, 96},
        {MEM_RECURRENT, false, 3}, {MEM_RECURRENT, true, 4}, {MEM_SPLIT, false, 96}, {MEM_SPLIT, true, 96}};
    for (uint32_t seed = 1; seed <= 6; seed++) {
        for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
            uint32_t st = seed * 2654435761u;
            struct fx f;
            struct sched_config c = base_config();
            c.batch_tokens = 8 + (int32_t)(rnd(&st) % 40);
            c.chunk_tokens = 4 + (int32_t)(rnd(&st) % 12);
            c.preempt_recompute = modes[m].recompute;
            c.timeslice_steps = 1 + (int32_t)(rnd(&st) % 6); /* recurrent states take turns often */
            CHECK_EQ_INT(fx_init(&f, modes[m].cells, 12, modes[m].kind, &c), 0);
            struct sched_req *h[RND_REQS];
            bool cancelled[RND_REQS] = {0};
            int next = 0;
            for (int step_no = 0; step_no < 3000; step_no++) {
                if (next < RND_REQS && rnd(&st) % 3 == 0) {
                    int n = 2 + (int)(rnd(&st) % 29);
                    /* half of the prompts start like an earlier one */
                    int base = next > 0 && rnd(&st) % 2 ? (int)(rnd(&st) % (uint32_t)next) : -1;
                    fake_prompt(prompts[next], n, seed * 1000 + (uint32_t)next, VOCAB);
                    if (base >= 0) {
                        int k = (int)(rnd(&st) % (uint32_t)n);
                        if (k > reqs[base].n_prompt) k = reqs[base].n_prompt;
                        memcpy(prompts[next], prompts[base], (size_t)k * sizeof(int32_t));
                    }
                    reqs[next] = request(prompts[next], n, 1 + (int)(rnd(&st) % 30));
                    reqs[next].n_choices = 1 + (int)(rnd(&st) % 2);
                    reqs[next].seed = rnd(&st);
                    reqs[next].sampler_params = rnd(&st) % 2 ? &random : NULL;
                    reqs[next].cache_prompt = rnd(&st) % 4 != 0;
                    CHECK_EQ_INT(submit(&f, &rec[next], &reqs[next], &h[next]), 0);
                    next++;
                }
                if (next > 0 && rnd(&st) % 40 == 0) { /* the owner of a running request goes away */
                    int i = (int)(rnd(&st) % (uint32_t)next);
                    bool ended = true;
                    for (int ch = 0; ch < reqs[i].n_choices; ch++) ended &= rec[i].done[ch] != 0;
                    if (!ended && !cancelled[i]) {
                        sched_cancel(f.s, h[i]);
                        cancelled[i] = true;
                    }
                }
                struct sched_step *step;
                if (sched_build_step(f.s, f.now, &step) == 0) {
                    struct sched_stats ss;
                    sched_stats(f.s, f.now, &ss);
                    CHECK_EQ_INT(ss.queued + ss.active_requests, 0); /* idle only when done */
                    if (next == RND_REQS) break;
                    continue;
                }
                sched_step_compute(f.s, step);
                sched_step_complete(f.s, step, f.now += 1);
            }
            CHECK_EQ_INT(next, RND_REQS);
            struct sched_stats ss;
            sched_stats(f.s, f.now, &ss);
            CHECK(ss.preemptions > 0); /* memory pressure, or states taking turns */
            CHECK_EQ_INT(fx_free(&f), 0);
            for (int i = 0; i < RND_REQS; i++) {
                CHECK_EQ_INT(rec[i].error + rec[i].calls_after_end, 0);
                if (cancelled[i]) continue;
                CHECK_EQ_INT(run_alone(&reqs[i], &alone), 0);
                for (int ch = 0; ch < reqs[i].n_choices; ch++) {
                    if (!same_output(&alone, &rec[i], ch))
                        fprintf(stderr, "  seed %u mode %zu request %d choice %d differs\n", seed, m, i, ch);
                    CHECK(same_output(&alone, &rec[i], ch));
                    CHECK_EQ_INT(rec[i].done[ch], 1 + SCHED_STOP_LIMIT);
                }
            }
        }
    }
}

TEST(sched_preemption_saves_on_the_worker_in_a_save_only_step) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 40, 4, MEM_KV, NULL), 0);
    int32_t pa[10], pb[12];
    fake_prompt(pa, 10, 26, VOCAB);
    fake_prompt(pb, 12, 27, VOCAB);
    struct recorder a, b;
    struct sched_request qa = request(pa, 10, 20), qb = request(pb, 12, 20);
    CHECK_EQ_INT(submit(&f, &a, &qa, NULL), 0);
    CHECK_EQ_INT(submit(&f, &b, &qb, NULL), 0);
    int save_steps = 0;
    for (int i = 0; i < 200; i++) {
        struct sched_step *step;
        if (sched_build_step(f.s, f.now, &step) == 0) break;
        struct sched_stats before, after;
        sched_stats(f.s, f.now, &before);
        sched_step_compute(f.s, step);
        sched_step_complete(f.s, step, f.now += 1);
        sched_stats(f.s, f.now, &after);
        if (sched_step_batch(step)->n_tokens == 0) {
            save_steps++;
            /* the loop thread freed the victim's cells only after the worker copied them */
            CHECK_EQ_INT(after.preemptions, before.preemptions + 1);
            CHECK(after.cells_used < before.cells_used);
            CHECK_EQ_INT(after.preempted, 1);
        }
    }
    CHECK(save_steps > 0);
    struct recorder alone;
    CHECK_EQ_INT(run_alone(&qa, &alone), 0);
    CHECK(same_output(&alone, &a, 0));
    CHECK_EQ_INT(run_alone(&qb, &alone), 0);
    CHECK(same_output(&alone, &b, 0));
    CHECK_EQ_INT(fx_free(&f), 0);
}

/* Cells of the KV memory held by two sequences or more. */
static int64_t shared_cells(struct memory *m) {
    struct kv_memory *kv = kv_from_memory(m);
    int64_t n = 0;
    for (int64_t c = 0; c < kv->n_cells; c++) {
        int holders = 0;
        for (int32_t w = 0; w < kv->n_words; w++) holders += __builtin_popcountll(kv->seqs[c * kv->n_words + w]);
        n += holders >= 2;
    }
    return n;
}

/* A choice of an n = 2 request is preempted (saved) while its sibling and another request run;
 * when the other request ends it comes back beside its sibling sharing the prompt's cells again
 * (restored without copies, so it also needs only room for its own tokens to resume). */
TEST(sched_preempted_choice_shares_its_prompt_again_after_resuming) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 70, 4, MEM_KV, NULL), 0);
    int32_t pa[20], pb[4];
    struct recorder a, b;
    struct sched_request qa = prompt_request(pa, 20, 30, 40), qb = prompt_request(pb, 4, 31, 20);
    qa.n_choices = 2;
    qa.cache_prompt = qb.cache_prompt = false;
    CHECK_EQ_INT(submit(&f, &a, &qa, NULL), 0);
    CHECK_EQ_INT(submit(&f, &b, &qb, NULL), 0);
    int64_t preemptions = 0, shared_after_resume = -1;
    bool resumed = false;
    for (int i = 0; i < 400; i++) {
        struct sched_step *step;
        if (sched_build_step(f.s, f.now, &step) == 0) break;
        sched_step_compute(f.s, step);
        sched_step_complete(f.s, step, f.now += 1);
        struct sched_stats st;
        sched_stats(f.s, f.now, &st);
        if (st.preemptions > preemptions && st.preempted == 1) preemptions = st.preemptions;
        else if (preemptions > 0 && st.preempted == 0 && !resumed) {
            resumed = true;
            CHECK_EQ_INT(a.done[0], 0); /* beside its sibling */
            shared_after_resume = shared_cells(f.mem);
        }
    }
    CHECK(preemptions >= 1); /* growing again, they take turns until one ends */
    CHECK(resumed);
    CHECK_EQ_INT(shared_after_resume, 20);
    for (int ch = 0; ch < 2; ch++) CHECK(choice_matches_solo(&qa, &a, ch, 40));
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_a_step_completed_without_compute_fails_its_requests) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 256, 4, MEM_KV, NULL), 0);
    int32_t p[8];
    struct recorder a;
    struct sched_request q = prompt_request(p, 8, 28, 5);
    CHECK_EQ_INT(submit(&f, &a, &q, NULL), 0);
    struct sched_step *step;
    CHECK(sched_build_step(f.s, f.now, &step) > 0);
    sched_step_complete(f.s, step, f.now += 1); /* the worker never ran it (shutdown) */
    CHECK_EQ_INT(a.error, -ERR_CANCELLED);
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.cells_used, 0);
    CHECK_EQ_INT(st.active_requests, 0);
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_n_choices_on_a_recurrent_memory_short_of_states) {
    /* 2 states for 3 choices: the fork cannot copy the state for every sibling, so the rest
     * recompute their prompt when a state frees; every choice still matches its solo run */
    static const int states[] = {8, 2};
    for (int k = 0; k < 2; k++) {
        struct fx f;
        CHECK_EQ_INT(fx_init(&f, states[k], 8, MEM_RECURRENT, NULL), 0);
        int32_t p[20];
        struct fake_sampling random = {.random = true};
        struct recorder r;
        struct sched_request q = prompt_request(p, 20, 29, 6);
        q.n_choices = 3;
        q.seed = 7;
        q.sampler_params = &random;
        CHECK_EQ_INT(submit(&f, &r, &q, NULL), 0);
        fake_run(f.s, &f.now, 1, 200);
        struct sched_stats st;
        sched_stats(f.s, f.now, &st);
        if (k == 0) CHECK_EQ_INT(st.prompt_tokens, 20); /* enough states: evaluated once */
        else CHECK(st.prompt_tokens > 20);
        for (int ch = 0; ch < 3; ch++) CHECK(choice_matches_solo(&q, &r, ch, 6));
        CHECK_EQ_INT(fx_free(&f), 0);
    }
}

/* Runs 2 long requests on a memory of 2 recurrent states, then 3 short ones arrive: returns in
 * first[i] / done[i] the step of request i's first token / end (counted from the short ones'
 * arrival), and checks every output against its solo run. */
static int run_sliced(int32_t timeslice, int first[5], int done[5], int64_t *preemptions) {
    struct fx f;
    struct sched_config c = base_config();
    c.timeslice_steps = timeslice;
    if (fx_init(&f, 2, 8, MEM_RECURRENT, &c) != 0) return -1;
    static int32_t prompts[5][8];
    static struct recorder rec[5];
    struct sched_request q[5];
    for (int i = 0; i < 5; i++) {
        q[i] = prompt_request(prompts[i], i < 2 ? 6 : 8, 40 + (uint32_t)i, i < 2 ? 60 : 6);
        first[i] = done[i] = -1;
    }
    int bad = 0;
    for (int i = 0; i < 2; i++) bad |= submit(&f, &rec[i], &q[i], NULL);
    for (int step_no = -3; step_no < 400; step_no++) {
        if (step_no == 0)
            for (int i = 2; i < 5; i++) bad |= submit(&f, &rec[i], &q[i], NULL);
        struct sched_step *step;
        if (sched_build_step(f.s, f.now, &step) == 0) break;
        sched_step_compute(f.s, step);
        sched_step_complete(f.s, step, f.now += 1);
        for (int i = 0; i < 5; i++) {
            if (first[i] < 0 && rec[i].n_tokens[0] > 0) first[i] = step_no;
            if (done[i] < 0 && rec[i].done[0]) done[i] = step_no;
        }
    }
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    *preemptions = st.preemptions;
    bad |= st.active_requests + st.queued + st.preempted != 0;
    bad |= fx_free(&f);
    for (int i = 0; i < 5; i++) {
        struct recorder alone;
        bad |= run_alone(&q[i], &alone) != 0 || !same_output(&alone, &rec[i], 0);
        bad |= rec[i].done[0] != 1 + SCHED_STOP_LIMIT;
    }
    return bad ? -1 : 0;
}

TEST(sched_recurrent_states_are_time_sliced_when_requests_wait) {
    int first[5], done[5];
    int64_t pre;
    /* off: the short requests wait until a long one ends (60 tokens) */
    CHECK_EQ_INT(run_sliced(0, first, done, &pre), 0);
    CHECK_EQ_INT(pre, 0);
    for (int i = 2; i < 5; i++) CHECK(first[i] > 50);
    /* on (4 steps): a waiter gets a state within a few slices, the long ones are saved, resume
     * later and still give their solo output */
    CHECK_EQ_INT(run_sliced(4, first, done, &pre), 0);
    CHECK(pre >= 3);
    for (int i = 2; i < 5; i++) {
        CHECK(first[i] >= 0 && first[i] <= 4 * 4);
        CHECK(done[i] < done[0] && done[i] < done[1]);
    }
}

TEST(sched_a_memory_whose_sequences_grow_is_not_time_sliced) {
    /* 50 cells: a (10 + 30 tokens) grows to 39 without pressure, b's 45-token prompt waits for
     * a's end; time-slicing would preempt a, but a memory that grows is left to memory pressure
     * (a save there can be megabytes) */
    struct fx f;
    struct sched_config c = base_config();
    c.timeslice_steps = 2;
    CHECK_EQ_INT(fx_init(&f, 50, 4, MEM_WHOLE_ONLY, &c), 0);
    int32_t pa[10], pb[45];
    struct recorder a, b;
    struct sched_request qa = prompt_request(pa, 10, 50, 30), qb = prompt_request(pb, 45, 51, 3);
    CHECK_EQ_INT(submit(&f, &a, &qa, NULL), 0);
    CHECK_EQ_INT(submit(&f, &b, &qb, NULL), 0);
    fake_run(f.s, &f.now, 1, 500);
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.preemptions, 0);
    CHECK(a.done_order[0] > 0 && a.done_order[0] < b.first_token_order);
    CHECK_EQ_INT(b.done[0], 1 + SCHED_STOP_LIMIT);
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_time_slicing_rotates_fairly_and_keeps_a_minimum_slice) {
    /* 6 equal requests on 2 states: every one starts within a bounded wait, and a sequence that
     * got its state keeps it at least timeslice_steps steps (no thrashing) */
    struct fx f;
    struct sched_config c = base_config();
    c.timeslice_steps = 5;
    CHECK_EQ_INT(fx_init(&f, 2, 8, MEM_RECURRENT, &c), 0);
    static int32_t prompts[6][4];
    struct recorder rec[6];
    struct sched_req *h[6];
    struct sched_request q[6];
    for (int i = 0; i < 6; i++) {
        q[i] = prompt_request(prompts[i], 4, 60 + (uint32_t)i, 30);
        CHECK_EQ_INT(submit(&f, &rec[i], &q[i], &h[i]), 0);
    }
    int first[6] = {-1, -1, -1, -1, -1, -1}, held[6] = {0}, held_min = 1000, saves = 0;
    int32_t seq_prev[6] = {-1, -1, -1, -1, -1, -1};
    for (int step_no = 0; step_no < 1000; step_no++) {
        struct sched_step *step;
        if (sched_build_step(f.s, f.now, &step) == 0) break;
        saves += sched_step_batch(step)->n_tokens == 0;
        sched_step_compute(f.s, step);
        sched_step_complete(f.s, step, f.now += 1);
        for (int i = 0; i < 6; i++) {
            if (first[i] < 0 && rec[i].n_tokens[0] > 0) first[i] = step_no;
            int32_t seq = rec[i].done[0] ? -1 : sched_req_seq(h[i], 0);
            if (seq >= 0) held[i]++;
            else if (seq_prev[i] >= 0 && !rec[i].done[0] && held[i] < held_min) held_min = held[i];
            if (seq < 0) held[i] = 0;
            seq_prev[i] = seq;
        }
    }
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK(st.preemptions >= 4);
    CHECK_EQ_INT(saves, 0);                   /* each save rode along with a batch */
    CHECK(held_min >= 5);                     /* preempted only after a whole slice */
    for (int i = 0; i < 6; i++) {
        CHECK(first[i] >= 0 && first[i] <= 3 * 2 * 5 + 4); /* without slicing: the last at ~60 */
        struct recorder alone;
        CHECK_EQ_INT(run_alone(&q[i], &alone), 0);
        CHECK(same_output(&alone, &rec[i], 0));
    }
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_an_exact_prompt_repeat_reuses_all_but_its_last_token) {
    /* without partial removal the state before the prompt's last token is kept as cache (a
     * second entry beside the end of the request); with partial removal the end's cells serve,
     * but not a window's that generated past it: recomputed */
    struct { int kind; int64_t cells; int32_t cached; int32_t entries; } modes[] = {
        {MEM_RECURRENT, 4, 19, 2}, {MEM_WHOLE_ONLY, 256, 19, 2}, {MEM_KV, 256, 19, 1},
        {MEM_RECURRENT, 1, 0, 1}, /* one state: no room for the copy, no reuse, same output */
        {MEM_SPLIT, 256, 0, 1}};
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        struct fx f;
        CHECK_EQ_INT(fx_init(&f, modes[m].cells, 4, modes[m].kind, NULL), 0);
        int32_t p[20];
        struct recorder a, b, c;
        struct sched_request q = prompt_request(p, 20, 70, 5);
        CHECK_EQ_INT(submit(&f, &a, &q, NULL), 0);
        fake_run(f.s, &f.now, 1, 100);
        struct sched_stats st;
        sched_stats(f.s, f.now, &st);
        CHECK_EQ_INT(st.cached_seqs, modes[m].entries);
        CHECK_EQ_INT(st.prompt_tokens, 20);
        CHECK_EQ_INT(a.counts[0].n_cached, 0);
        int64_t before = f.eng.tokens_forwarded;
        CHECK_EQ_INT(submit(&f, &b, &q, NULL), 0);
        fake_run(f.s, &f.now, 1, 100);
        CHECK_EQ_INT(b.counts[0].n_cached, modes[m].cached);
        CHECK_EQ_INT(f.eng.tokens_forwarded - before, 20 - modes[m].cached + 4);
        CHECK(same_output(&a, &b, 0));
        sched_stats(f.s, f.now, &st);
        CHECK_EQ_INT(st.cached_tokens, modes[m].cached);
        CHECK_EQ_INT(st.prompt_tokens, 20 + 20 - modes[m].cached);
        q.cache_prompt = false;
        CHECK_EQ_INT(submit(&f, &c, &q, NULL), 0);
        fake_run(f.s, &f.now, 1, 100);
        CHECK_EQ_INT(c.counts[0].n_cached, 0);
        CHECK(same_output(&a, &c, 0));
        struct recorder alone;
        CHECK_EQ_INT(run_alone(&q, &alone), 0);
        CHECK(same_output(&alone, &a, 0));
        CHECK_EQ_INT(fx_free(&f), 0);
    }
}

/* With a windowed memory a cached sequence serves the prefixes its window still holds the end
 * of: its whole content, or a prefix ending where it stopped; a shorter cache entry it cannot
 * serve is kept beside it. Outputs are always those of the request alone. */
TEST(sched_windowed_memory_reuses_what_its_window_holds) {
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 256, 8, MEM_SPLIT, NULL), 0);
    int32_t p[40];
    struct recorder a, b, c, d, e, alone;
    struct sched_request qa = prompt_request(p, 20, 71, 10); /* 9 replies fed back: past the window */
    CHECK_EQ_INT(submit(&f, &a, &qa, NULL), 0);
    fake_run(f.s, &f.now, 1, 100);
    CHECK_EQ_INT(submit(&f, &b, &qa, NULL), 0); /* the same prompt: recomputed */
    fake_run(f.s, &f.now, 1, 100);
    CHECK_EQ_INT(b.counts[0].n_cached, 0);
    CHECK(same_output(&a, &b, 0));
    struct sched_request qc = qa;
    qc.n_predict = 1; /* ends where its prompt ends: kept beside the longer entry */
    CHECK_EQ_INT(submit(&f, &c, &qc, NULL), 0);
    fake_run(f.s, &f.now, 1, 100);
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.cached_seqs, 2);
    CHECK_EQ_INT(submit(&f, &d, &qa, NULL), 0); /* served by it: all but the last token */
    fake_run(f.s, &f.now, 1, 100);
    CHECK_EQ_INT(d.counts[0].n_cached, 19);
    CHECK(same_output(&a, &d, 0));
    /* the whole content of the long entry and more: reused whole */
    memcpy(p + 20, a.tokens[0], 9 * sizeof *p);
    fake_prompt(p + 29, 5, 72, VOCAB);
    struct sched_request qe = request(p, 34, 6);
    CHECK_EQ_INT(submit(&f, &e, &qe, NULL), 0);
    fake_run(f.s, &f.now, 1, 100);
    CHECK_EQ_INT(e.counts[0].n_cached, 29);
    CHECK_EQ_INT(run_alone(&qe, &alone), 0);
    CHECK(same_output(&alone, &e, 0));
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_time_slicing_n_choices_beyond_the_states_still_finish) {
    /* 2 states; a long request holds one while a 3-choice request's prompt is read in slices:
     * its prompt can be preempted before the fork, and must still come back and finish */
    struct fx f;
    struct sched_config c = base_config();
    c.timeslice_steps = 2;
    c.chunk_tokens = 4;
    CHECK_EQ_INT(fx_init(&f, 2, 8, MEM_RECURRENT, &c), 0);
    int32_t pa[6], pb[40], pc[5];
    struct recorder a, b, cc;
    struct sched_request qa = prompt_request(pa, 6, 80, 40), qb = prompt_request(pb, 40, 81, 5),
                         qc = prompt_request(pc, 5, 82, 30);
    qb.n_choices = 3;
    CHECK_EQ_INT(submit(&f, &a, &qa, NULL), 0);
    CHECK_EQ_INT(submit(&f, &b, &qb, NULL), 0);
    CHECK_EQ_INT(submit(&f, &cc, &qc, NULL), 0);
    fake_run(f.s, &f.now, 1, 2000);
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK(st.preemptions > 0);
    CHECK_EQ_INT(st.queued + st.active_requests, 0);
    for (int ch = 0; ch < 3; ch++) CHECK_EQ_INT(b.done[ch], 1 + SCHED_STOP_LIMIT);
    struct recorder alone;
    CHECK_EQ_INT(run_alone(&qa, &alone), 0);
    CHECK(same_output(&alone, &a, 0));
    CHECK_EQ_INT(run_alone(&qc, &alone), 0);
    CHECK(same_output(&alone, &cc, 0));
    for (int ch = 0; ch < 3; ch++) CHECK(choice_matches_solo(&qb, &b, ch, 5));
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_admission_reserves_the_first_cell_of_each_sibling) {
    /* 24 cells. B generates (4 prompt tokens, growing); A (17 prompt tokens, n = 4) fits on its
     * own prompt (17 + B's next cell <= 20 free) but not with its 3 siblings' first decode cells
     * (21): admitted anyway, the fork would run out of cells and preempt. A must wait for B. */
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 24, 8, MEM_FAKE_KV, NULL), 0);
    int32_t pb[4], pa[17];
    struct recorder rb, ra;
    struct sched_request qb = prompt_request(pb, 4, 41, 12), qa = prompt_request(pa, 17, 42, 2);
    qa.n_choices = 4;
    qa.cache_prompt = qb.cache_prompt = false;
    CHECK_EQ_INT(submit(&f, &rb, &qb, NULL), 0);
    fake_run(f.s, &f.now, 1, 1);
    struct sched_req *ha;
    CHECK_EQ_INT(submit(&f, &ra, &qa, &ha), 0);
    fake_run(f.s, &f.now, 1, 1);
    CHECK_EQ_INT(sched_req_seq(ha, 0), -1); /* still queued */
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.queued, 1);
    fake_run(f.s, &f.now, 1, 200);
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.preemptions, 0);
    CHECK_EQ_INT(rb.n_tokens[0], 12);
    for (int c = 0; c < 4; c++) CHECK_EQ_INT(ra.n_tokens[c], 2);
    CHECK_EQ_INT(fx_free(&f), 0);
    /* a memory that can never hold every sibling at once still admits (they recompute later):
     * 18 cells for 17 prompt tokens and 3 siblings */
    CHECK_EQ_INT(fx_init(&f, 18, 8, MEM_FAKE_KV, NULL), 0);
    CHECK_EQ_INT(submit(&f, &ra, &qa, NULL), 0);
    fake_run(f.s, &f.now, 1, 200);
    for (int c = 0; c < 4; c++) CHECK(ra.done[c] != 0);
    /* the same with 10 of its tokens cached: 10 shared cells + 7 new, still admitted */
    struct recorder rc;
    struct sched_request qc = qa;
    qc.cache_prompt = true;
    struct sched_request q10 = request(pa, 10, 1); /* leaves A's first 10 tokens as cache */
    CHECK_EQ_INT(submit(&f, &rc, &q10, NULL), 0);
    fake_run(f.s, &f.now, 1, 200);
    CHECK_EQ_INT(submit(&f, &rc, &qc, NULL), 0);
    fake_run(f.s, &f.now, 1, 200);
    for (int c = 0; c < 4; c++) CHECK(rc.done[c] != 0);
    CHECK(rc.counts[0].n_cached > 0);
    CHECK_EQ_INT(fx_free(&f), 0);
}

TEST(sched_cache_eviction_skips_entries_that_free_no_cells) {
    /* Cache entry C's cells are all shared with live L (L's prompt extends C's); D is a newer
     * entry of its own cells. When E needs cells, evicting C frees nothing: D must go, C stays. */
    struct fx f;
    CHECK_EQ_INT(fx_init(&f, 36, 8, MEM_FAKE_KV, NULL), 0);
    int32_t pl[16], pd[8], pe[12];
    fake_prompt(pl, 16, 51, VOCAB);
    fake_prompt(pd, 8, 52, VOCAB);
    fake_prompt(pe, 12, 53, VOCAB);
    struct recorder rc, rl, rd, re;
    struct sched_request qc = request(pl, 10, 1), ql = request(pl, 16, 12), qd = request(pd, 8, 1),
                         qe = request(pe, 12, 1);
    CHECK_EQ_INT(submit(&f, &rc, &qc, NULL), 0);
    fake_run(f.s, &f.now, 1, 100); /* C: 10 cells of cache */
    CHECK_EQ_INT(submit(&f, &rl, &ql, NULL), 0);
    fake_run(f.s, &f.now, 1, 1);   /* L shares C's 10 cells */
    CHECK_EQ_INT(submit(&f, &rd, &qd, NULL), 0);
    for (int i = 0; i < 6 && rd.done[0] == 0; i++) fake_run(f.s, &f.now, 1, 1);
    CHECK(rd.done[0] != 0); /* D: 8 cells of cache, newer than C */
    struct sched_stats st;
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.cached_seqs, 2);
    CHECK_EQ_INT(st.cache_evictions, 0);
    int64_t free_before = st.cells_total - st.cells_used;
    CHECK(free_before < 12 + 1); /* E does not fit without evicting */
    CHECK(free_before + 8 >= 12 + 1); /* D's cells are enough */
    CHECK_EQ_INT(submit(&f, &re, &qe, NULL), 0);
    fake_run(f.s, &f.now, 1, 1);
    sched_stats(f.s, f.now, &st);
    CHECK_EQ_INT(st.cache_evictions, 1);
    fake_run(f.s, &f.now, 1, 200);
    CHECK_EQ_INT(rl.counts[0].n_cached, 10);
    CHECK_EQ_INT(rl.n_tokens[0], 12);
    CHECK_EQ_INT(re.n_tokens[0], 1);
    CHECK_EQ_INT(fx_free(&f), 0);
}

/* The loop driver hands a step's output out in parts (engine_driver.c): the same tokens, stops and
 * counts as completing it at once; the step stays in flight between parts; and a request
 * cancelled between two parts gets no callback after the cancel. */
TEST(sched_step_completes_in_parts_like_at_once) {
    enum { N = 6 };
    struct fx a, b;
    CHECK_EQ_INT(fx_init(&a, 1024, 16, MEM_KV, NULL), 0);
    CHECK_EQ_INT(fx_init(&b, 1024, 16, MEM_KV, NULL), 0);
    int32_t prompts[N + 1][12];
    struct recorder ra[N], rb[N + 1];
    struct sched_req *victim;
    for (int i = 0; i < N; i++) {
        struct sched_request q = prompt_request(prompts[i], 4 + i, 100 + (uint32_t)i, 3 + i);
        CHECK_EQ_INT(submit(&a, &ra[i], &q, NULL), 0);
        CHECK_EQ_INT(submit(&b, &rb[i], &q, NULL), 0);
    }
    struct sched_request qv = prompt_request(prompts[N], 5, 200, 50);
    CHECK_EQ_INT(submit(&b, &rb[N], &qv, &victim), 0);
    fake_run(a.s, &a.now, 1, 1000);
    struct sched_step *step;
    int parts_max = 0, victim_tokens = -1;
    while (sched_build_step(b.s, b.now, &step) > 0) {
        sched_step_compute(b.s, step);
        b.now += 1;
        int parts = 1;
        while (sched_step_complete_some(b.s, step, b.now, 2)) {
            struct sched_stats st;
            sched_stats(b.s, b.now, &st);
            CHECK(st.step_in_flight); /* no step may be built between parts */
            if (victim_tokens < 0 && rb[N].n_tokens[0] >= 2) { /* cancel it between two parts */
                sched_cancel(b.s, victim);
                victim_tokens = rb[N].n_tokens[0];
            }
            parts++;
        }
        if (parts > parts_max) parts_max = parts;
    }
    CHECK(parts_max >= 4); /* 7 sequences with tokens, 2 per part */
    CHECK(victim_tokens >= 2);
    CHECK_EQ_INT(rb[N].n_tokens[0], victim_tokens);
    CHECK_EQ_INT(rb[N].done[0], 0);
    for (int i = 0; i < N; i++) {
        CHECK(same_output(&ra[i], &rb[i], 0));
        CHECK_EQ_INT(rb[i].done[0], 1 + SCHED_STOP_LIMIT);
        CHECK_EQ_INT(rb[i].counts[0].n_generated, 3 + i);
    }
    struct sched_stats st;
    sched_stats(b.s, b.now, &st);
    CHECK_EQ_INT(st.active_requests, 0);
    CHECK_EQ_INT(st.requests_cancelled, 1);
    CHECK_EQ_INT(fx_free(&a), 0);
    CHECK_EQ_INT(fx_free(&b), 0);
}

/* prompt_logprobs: the fake's row for a position says which token it predicts; the test's
 * token_logprobs records that with the token asked about, so every prompt position must be
 * computed once, at its own position, even when the prompt is cached. */
struct pp_owner {
    struct recorder rec; /* first: the recorder's callbacks take the owner as one */
    int32_t n;
    int calls;           /* on_prompt_probs calls */
    int tokens_before;   /* tokens recorded when it came */
    struct sched_token_probs probs[64];
};
static int64_t pp_rows;

static void pp_token_logprobs(void *engine, const float *logits, int32_t token, int32_t n_probs,
                              struct sched_token_probs *out) {
    (void)engine, (void)logits, (void)n_probs;
    pp_rows++;
    out->token = token;
    out->logprob = -(float)token;
    out->n_top = 0;
}

static void pp_on_prompt_probs(void *owner, const struct sched_token_probs *probs, int32_t n) {
    struct pp_owner *o = owner;
    o->calls++;
    o->n = n;
    o->tokens_before = o->rec.n_tokens[0];
    memcpy(o->probs, probs, sizeof *probs * (size_t)n);
}

TEST(sched_prompt_logprobs_cover_every_prompt_token_once) {
    struct fx f;
    struct sched_config c = base_config();
    c.max_outputs = 6; /* rows per step: a 40-token prompt takes several steps */
    CHECK_EQ_INT(fx_init(&f, 512, 8, MEM_KV, &c), 0);
    sched_destroy(f.s);
    struct sched_engine_ops ops = fake_engine_ops;
    ops.token_logprobs = pp_token_logprobs;
    CHECK_EQ_INT(sched_create(&f.s, &c, f.mem, &ops, &f.eng), 0);
    struct sched_sink sink = recorder_sink;
    sink.on_prompt_probs = pp_on_prompt_probs;
    int32_t prompt[40];
    fake_prompt(prompt, 40, 9, VOCAB);
    /* the same prompt first without: it is then cached, and must not be reused */
    struct recorder plain;
    struct sched_request q = request(prompt, 40, 3);
    CHECK_EQ_INT(submit(&f, &plain, &q, NULL), 0);
    fake_run(f.s, &f.now, 1, 1000);
    static struct pp_owner o[2];
    struct sched_req *h;
    for (int k = 0; k < 2; k++) {
        memset(&o[k], 0, sizeof o[k]);
        o[k].rec.clock = &f.clock;
        q = request(prompt, 40, k == 0 ? 3 : 0); /* n_predict 0: the prompt alone */
        q.prompt_logprobs = true;
        q.n_probs = 1;
        CHECK_EQ_INT(sched_submit(f.s, &q, &sink, &o[k], f.now, &h), 0);
    }
    pp_rows = 0;
    fake_run(f.s, &f.now, 1, 1000);
    CHECK_EQ_INT(pp_rows, 2 * 39);
    for (int k = 0; k < 2; k++) {
        CHECK_EQ_INT(o[k].calls, 1);
        CHECK_EQ_INT(o[k].n, 39);
        CHECK_EQ_INT(o[k].tokens_before, 0);
        for (int32_t i = 0; i < 39; i++) CHECK(o[k].probs[i].token == prompt[i + 1] && o[k].probs[i].logprob == -(float)prompt[i + 1]);
        CHECK_EQ_INT(o[k].rec.counts[0].n_cached, 0);
    }
    /* the output is the plain request's */
    CHECK(same_output(&plain, &o[0].rec, 0));
    CHECK_EQ_INT(o[1].rec.n_tokens[0], 0);
    CHECK_EQ_INT(o[1].rec.done[0], 1 + SCHED_STOP_LIMIT);
    /* refused: a one-token prompt, a sink without the callback */
    q = request(prompt, 1, 3);
    q.prompt_logprobs = true;
    CHECK_EQ_INT(sched_submit(f.s, &q, &sink, &o[0], f.now, &h), -ERR_INVAL);
    q = request(prompt, 5, 3);
    q.prompt_logprobs = true;
    CHECK_EQ_INT(sched_submit(f.s, &q, &recorder_sink, &o[0], f.now, &h), -ERR_INVAL);
    CHECK_EQ_INT(fx_free(&f), 0);
}
