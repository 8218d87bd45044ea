/* Speculative decoding in the scheduler (sched.h): drafts verified in one step give exactly the
 * tokens plain decoding gives, the memory keeps only what was accepted, and speculation backs off
 * when many sequences generate. The fake engine (fake.h) makes each token a hash of what the
 * memory holds, so a rejected draft left in memory, or a position fed twice, changes the text. */
#include "sched/sched.h"

#include "common/err.h"
#include "sched/fake.h"
#include "sched/sched_internal.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

#define VOCAB 64
#define MAX_REQS 20

struct run {
    struct recorder rec[MAX_REQS];
    struct sched_stats stats;
    int64_t forwards, holes, draft_calls, verified;
    int32_t max_step_tokens;    /* largest batch once every request generates */
    int64_t cells_after;        /* cells used once everything ended */
    int steps;
};

struct setup {
    const struct sched_engine_ops *ops;
    bool lookup;
    int32_t draft_max, draft_min;
    int32_t wrong_every;
    bool partial_removal;      /* false: a memory that cannot drop a tail (a recurrent state's) */
    bool cache_prompt;
    int stop_after;            /* > 0: every request's sink stops after that many tokens */
    bool per_token_clock;      /* a step takes 1 ms per batch token (else 1 ms whatever its size) */
};

/* n requests of prompts[i] (n_prompt tokens), n_predict each, submitted together. */
static int run(const struct setup *su, int32_t prompts[][64], int32_t n_prompt, int n, int32_t n_predict, struct run *out) {
    memset(out, 0, sizeof *out);
    int clock = 0;
    struct sched_config c;
    sched_config_default(&c);
    c.n_ctx = 256;
    c.batch_tokens = 64;
    c.chunk_tokens = 16;
    c.spec_lookup = su->lookup;
    int32_t n_seq = 24;
    struct memory *mem = su->partial_removal ? fake_kv_create(2048, n_seq) : fake_memory_create(2048, n_seq, false);
    struct fake_engine e;
    fake_engine_init(&e, mem, VOCAB, n_seq + SCHED_SPEC_ROWS);
    e.draft_wrong_every = su->wrong_every;
    struct sched *s;
    if (sched_create(&s, &c, mem, su->ops, &e) != 0) return -1;
    double now = 1000;
    for (int i = 0; i < n; i++) {
        out->rec[i].clock = &clock;
        out->rec[i].stop_after = su->stop_after;
        struct sched_request q = {.prompt = prompts[i], .n_prompt = n_prompt, .n_predict = n_predict, .n_choices = 1,
                                  .cache_prompt = su->cache_prompt, .ignore_eos = true,
                                  .draft_max = su->draft_max, .draft_min = su->draft_min, .draft_p_min = 0.5f};
        struct sched_req *h;
        if (sched_submit(s, &q, &recorder_sink, &out->rec[i], now, &h) != 0) return -1;
    }
    struct sched_step *st;
    while (out->steps < 10000 && sched_build_step(s, now, &st) > 0) {
        const struct batch *b = sched_step_batch(st);
        bool all_generating = true;
        for (int i = 0; i < n; i++) all_generating &= out->rec[i].n_tokens[0] > 0 && !out->rec[i].done[0];
        if (all_generating && b->n_tokens > out->max_step_tokens) out->max_step_tokens = b->n_tokens;
        sched_step_compute(s, st);
        now += su->per_token_clock ? b->n_tokens : 1;
        sched_step_complete(s, st, now);
        out->steps++;
    }
    sched_stats(s, now, &out->stats);
    out->cells_after = out->stats.cells_used;
    out->forwards = e.forwards;
    out->holes = e.holes;
    out->draft_calls = e.draft_calls;
    out->verified = e.drafts_verified;
    int64_t live = e.samplers_live;
    sched_destroy(s);
    fake_engine_free(&e);
    memory_destroy(mem);
    return live == 0 ? 0 : -1;
}

static bool same_tokens(const struct run *a, const struct run *b, int n) {
    for (int i = 0; i < n; i++) {
        const struct recorder *x = &a->rec[i], *y = &b->rec[i];
        if (x->n_tokens[0] != y->n_tokens[0] || x->done[0] != y->done[0] ||
            memcmp(x->tokens[0], y->tokens[0], (size_t)x->n_tokens[0] * sizeof(int32_t)) != 0) {
            fprintf(stderr, "  request %d: %d tokens vs %d\n", i, x->n_tokens[0], y->n_tokens[0]);
            return false;
        }
    }
    return true;
}

static int32_t prompts[MAX_REQS][64];

static void make_prompts(int n, int32_t len) {
    for (int i = 0; i < n; i++) fake_prompt(prompts[i], len, 100 + (uint32_t)i, VOCAB);
}

TEST(spec_lookup_finds_the_latest_continuation_of_the_longest_suffix) {
    int32_t out[8];
    int32_t a[] = {1, 2, 3, 4, 5, 9, 9, 2, 3, 4};
    CHECK_EQ_INT(sched_spec_lookup(a, 10, 3, out), 3); /* "2 3 4" at 1: then 5 9 9 */
    CHECK(out[0] == 5 && out[1] == 9 && out[2] == 9);
    int32_t b[] = {7, 8, 1, 7, 8, 2, 5, 7, 8};
    CHECK_EQ_INT(sched_spec_lookup(b, 9, 8, out), 4); /* "7 8": the latest earlier one, at 3 */
    CHECK(out[0] == 2 && out[1] == 5 && out[2] == 7 && out[3] == 8);
    int32_t c[] = {1, 2, 3, 4, 5};
    CHECK_EQ_INT(sched_spec_lookup(c, 5, 4, out), 0);
    CHECK_EQ_INT(sched_spec_lookup(b, 9, 0, out), 0);
}

/* A draft model right at most positions: the same tokens as plain decoding, in fewer steps, and
 * the memory ends holding exactly the tokens (the cached sequence: prompt + generated - 1). */
TEST(spec_draft_model_output_is_identical_to_plain_decoding) {
    make_prompts(3, 20);
    static struct run plain, spec;
    struct setup su = {.ops = &fake_engine_ops, .partial_removal = true, .cache_prompt = true};
    CHECK_EQ_INT(run(&su, prompts, 20, 3, 40, &plain), 0);
    su = (struct setup){.ops = &fake_engine_draft_ops, .draft_max = 4, .wrong_every = 7, .partial_removal = true,
                        .cache_prompt = true};
    CHECK_EQ_INT(run(&su, prompts, 20, 3, 40, &spec), 0);
    CHECK(same_tokens(&plain, &spec, 3));
    CHECK_EQ_INT(plain.holes, 0);
    CHECK_EQ_INT(spec.holes, 0);
    CHECK(spec.stats.draft_tokens > 0);
    CHECK(spec.stats.draft_accepted > 0 && spec.stats.draft_accepted < spec.stats.draft_tokens);
    CHECK(spec.steps < plain.steps * 2 / 3);
    CHECK_EQ_INT(spec.cells_after, plain.cells_after);
    CHECK_EQ_INT(spec.cells_after, 3 * (20 + 40 - 1));
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(spec.rec[i].counts[0].n_generated, 40);
        CHECK(spec.rec[i].counts[0].n_drafted > 0);
        CHECK(spec.rec[i].counts[0].n_draft_accepted <= spec.rec[i].counts[0].n_drafted);
    }
}

/* A stop in the middle of an accepted run (the sink says stop, n_predict not a multiple of the
 * run): the same tokens, and the run's later positions leave the memory. */
TEST(spec_stop_inside_an_accepted_run_trims_the_memory) {
    make_prompts(2, 12);
    static struct run plain, spec;
    for (int stop = 3; stop <= 11; stop += 4) {
        struct setup su = {.ops = &fake_engine_ops, .partial_removal = true, .cache_prompt = true, .stop_after = stop};
        CHECK_EQ_INT(run(&su, prompts, 12, 1, 30, &plain), 0);
        su.ops = &fake_engine_draft_ops;
        su.draft_max = 8;
        CHECK_EQ_INT(run(&su, prompts, 12, 1, 30, &spec), 0);
        CHECK(same_tokens(&plain, &spec, 1));
        CHECK_EQ_INT(spec.rec[0].n_tokens[0], stop);
        CHECK(spec.stats.draft_accepted > 0);
        CHECK_EQ_INT(spec.cells_after, 12 + stop - 1);
        CHECK_EQ_INT(spec.holes, 0);
    }
    /* n_predict 13 with runs of up to 9 tokens: never one token more */
    struct setup su = {.ops = &fake_engine_draft_ops, .draft_max = 8, .partial_removal = true, .cache_prompt = true};
    CHECK_EQ_INT(run(&su, prompts, 12, 1, 13, &spec), 0);
    CHECK_EQ_INT(spec.rec[0].n_tokens[0], 13);
    CHECK(spec.stats.draft_accepted > 0);
}

/* Prompt lookup: the fake model's text (a hash of the whole history) never follows a draft, but
 * over 150 tokens of a 64-token vocabulary its last two tokens often occurred before: drafts are
 * verified and rejected, and the output is still the plain one. */
TEST(spec_prompt_lookup_output_is_identical_to_plain_decoding) {
    make_prompts(2, 12);
    for (int i = 0; i < 2; i++) memcpy(prompts[i] + 12, prompts[i], 12 * sizeof(int32_t)); /* the passage twice */
    static struct run plain, spec;
    struct setup su = {.ops = &fake_engine_ops, .partial_removal = true};
    CHECK_EQ_INT(run(&su, prompts, 24, 1, 150, &plain), 0);
    su = (struct setup){.ops = &fake_engine_lookup_ops, .lookup = true, .draft_max = 6, .partial_removal = true};
    CHECK_EQ_INT(run(&su, prompts, 24, 1, 150, &spec), 0);
    CHECK(same_tokens(&plain, &spec, 1));
    CHECK(spec.stats.draft_tokens > 0);
    CHECK(spec.verified > 0 && spec.verified <= spec.stats.draft_tokens);
    CHECK_EQ_INT(spec.holes, 0);
    CHECK_EQ_INT(spec.draft_calls, 0);
    CHECK_EQ_INT(spec.cells_after, 0); /* cache_prompt false: everything freed */
    /* without the flag, no drafts */
    su.lookup = false;
    CHECK_EQ_INT(run(&su, prompts, 24, 1, 150, &spec), 0);
    CHECK_EQ_INT(spec.stats.draft_tokens, 0);
    CHECK(same_tokens(&plain, &spec, 1));
}

/* Draft rows stay within SCHED_SPEC_ROWS beside the decodes: 4 streams speculate, 16 do not
 * (until some of them end). */
TEST(spec_backs_off_when_many_sequences_generate) {
    make_prompts(16, 8);
    static struct run plain, spec;
    struct setup su = {.ops = &fake_engine_draft_ops, .draft_max = 15, .partial_removal = true};
    CHECK_EQ_INT(run(&su, prompts, 8, 4, 40, &spec), 0);
    CHECK(spec.stats.draft_tokens > 0);
    CHECK(spec.max_step_tokens <= SCHED_SPEC_ROWS);
    CHECK(spec.max_step_tokens > 4);
    CHECK_EQ_INT(run(&su, prompts, 8, 16, 40, &spec), 0);
    CHECK_EQ_INT(spec.max_step_tokens, 16); /* while all 16 generate: their decodes alone */
    su.ops = &fake_engine_ops;
    CHECK_EQ_INT(run(&su, prompts, 8, 16, 40, &plain), 0);
    CHECK(same_tokens(&plain, &spec, 16));
}

/* No speculation where it cannot run: a memory that cannot drop a tail; draft_max 0; a draft
 * shorter than draft_min is not verified. */
TEST(spec_is_off_where_it_cannot_or_should_not_run) {
    make_prompts(2, 10);
    static struct run r;
    struct setup su = {.ops = &fake_engine_draft_ops, .draft_max = 4, .partial_removal = false};
    CHECK_EQ_INT(run(&su, prompts, 10, 2, 20, &r), 0);
    CHECK_EQ_INT(r.stats.draft_tokens, 0);
    CHECK_EQ_INT(r.draft_calls, 0);
    su = (struct setup){.ops = &fake_engine_draft_ops, .draft_max = 0, .partial_removal = true};
    CHECK_EQ_INT(run(&su, prompts, 10, 2, 20, &r), 0);
    CHECK_EQ_INT(r.stats.draft_tokens, 0);
    su.draft_max = 4;
    su.draft_min = 5;
    CHECK_EQ_INT(run(&su, prompts, 10, 2, 20, &r), 0);
    CHECK_EQ_INT(r.stats.draft_tokens, 0);
    /* every draft wrong: k falls to draft_min (2), the drafts of 2 go on being tried */
    su = (struct setup){.ops = &fake_engine_draft_ops, .draft_max = 4, .draft_min = 2, .wrong_every = 1,
                        .partial_removal = true};
    CHECK_EQ_INT(run(&su, prompts, 10, 2, 20, &r), 0);
    CHECK_EQ_INT(r.stats.draft_accepted, 0);
    CHECK(r.stats.draft_tokens > 2 * 4);
    CHECK_EQ_INT(r.stats.draft_tokens % 2, 0);
    CHECK_EQ_INT(r.stats.generated_tokens, 2 * 20);
}

/* With other decodes in the step, drafts must pay for their rows (the learned step cost): where
 * a step costs per token and drafts are never accepted, speculation stays off; where a step costs
 * the same whatever its size (a read of the weights), it goes on. */
TEST(spec_drafts_beside_other_decodes_must_pay_for_their_rows) {
    make_prompts(8, 8);
    static struct run r;
    struct setup su = {.ops = &fake_engine_draft_ops, .draft_max = 4, .wrong_every = 1, .partial_removal = true,
                       .per_token_clock = true};
    CHECK_EQ_INT(run(&su, prompts, 8, 8, 30, &r), 0);
    CHECK(r.stats.draft_tokens <= 8);
    su.per_token_clock = false;
    CHECK_EQ_INT(run(&su, prompts, 8, 8, 30, &r), 0);
    CHECK(r.stats.draft_tokens > 8 * 4);
}
