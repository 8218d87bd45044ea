/* A lazy grammar (model_engine_sampling.grammar_trigger) on the shared trained model, greedy: the
 * text runs free until the trigger shows, the grammar holds from the trigger's start on, and a
 * text the grammar refuses at the trigger stays free. */
#include "test.h"

#include "common/err.h"
#include "sched/model_engine.h"
#include "sched/sched.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>

struct lazy_out {
    int32_t tokens[64];
    int32_t n;
    int done;
    enum sched_stop reason;
};

static bool lazy_on_token(void *owner, int32_t choice, int32_t token, const struct sched_token_probs *probs) {
    struct lazy_out *c = owner;
    if (c->n < 64) c->tokens[c->n++] = token;
    return true;
}
static void lazy_on_done(void *owner, int32_t choice, enum sched_stop reason, const struct sched_counts *counts) {
    struct lazy_out *c = owner;
    c->done++;
    c->reason = reason;
}
static void lazy_on_error(void *owner, int err) { ((struct lazy_out *)owner)->done = -1; }

static const struct sched_sink lazy_sink = {lazy_on_token, lazy_on_done, lazy_on_error, NULL};

/* Greedy text of "And God said" under grammar gbnf (NULL: none) applied from trigger on. */
static int lazy_text(struct model_engine *e, struct sched *s, const char *gbnf, const char *trigger, char *text,
                     size_t cap, enum sched_stop *reason) {
    static double ms;
    int32_t prompt[16];
    size_t n_prompt;
    if (tokenizer_encode(e->tok, "And God said", 12, true, false, prompt, 16, &n_prompt) < 0) return -1;
    struct model_engine_grammar *g = NULL;
    char why[256];
    if (gbnf && model_engine_grammar_get(e, gbnf, strlen(gbnf), &g, why, sizeof why) < 0) return -1;
    struct model_engine_sampling sp = {.temperature = 0, .repeat_penalty = 1.0f, .grammar = g, .grammar_trigger = trigger};
    struct sched_request req = {.prompt = prompt, .n_prompt = (int32_t)n_prompt, .n_predict = 12, .n_choices = 1,
                                .seed = 1, .cache_prompt = false, .sampler_params = &sp};
    struct lazy_out c = {0};
    struct sched_req *h;
    int rc = sched_submit(s, &req, &lazy_sink, &c, ms, &h);
    if (g) model_engine_grammar_release(g); /* the samplers hold their own */
    if (rc < 0) return rc;
    struct sched_step *step;
    while (sched_build_step(s, ms, &step) > 0) {
        sched_step_compute(s, step);
        ms += 10;
        sched_step_complete(s, step, ms);
    }
    if (c.done != 1) return -1;
    int64_t len = tokenizer_decode(e->tok, c.tokens, (size_t)c.n, false, false, text, cap - 1);
    if (len < 0) return -1;
    text[len] = 0;
    *reason = c.reason;
    return 0;
}

TEST(model_engine_lazy_grammar_applies_from_its_trigger) {
    SHARED(path, "models/kjv-tiny-q8_0.gguf");
    struct model_engine_config ec = {.path = path, .kv_tokens = 256, .batch_tokens = 64, .n_seq_max = 8, .n_threads = 1};
    struct model_engine *e;
    char why[256];
    CHECK_EQ_INT(model_engine_load(&e, &ec, why, sizeof why), 0);
    struct sched_config cfg;
    sched_config_default(&cfg);
    cfg.n_ctx = e->n_ctx;
    cfg.batch_tokens = ec.batch_tokens;
    struct sched *s;
    CHECK_EQ_INT(sched_create(&s, &cfg, e->mem, &model_engine_ops, e), 0);
    char free_text[256], text[256];
    enum sched_stop reason;
    CHECK_EQ_INT(lazy_text(e, s, NULL, NULL, free_text, sizeof free_text, &reason), 0);
    CHECK(strncmp(free_text, "unto him, Thou shalt not", 24) == 0); /* the reference's greedy text */
    /* from "him" on, the grammar's words, then the end */
    CHECK_EQ_INT(lazy_text(e, s, "root ::= \"him, and she\"\n", "him", text, sizeof text, &reason), 0);
    CHECK_EQ_STR(text, "unto him, and she");
    CHECK_EQ_INT(reason, SCHED_STOP_EOS);
    /* a trigger that never shows: free */
    CHECK_EQ_INT(lazy_text(e, s, "root ::= \"x\"\n", "zebra", text, sizeof text, &reason), 0);
    CHECK_EQ_STR(text, free_text);
    /* the text at the trigger is not the grammar's: it stays free */
    CHECK_EQ_INT(lazy_text(e, s, "root ::= \"hiX\"\n", "him", text, sizeof text, &reason), 0);
    CHECK_EQ_STR(text, free_text);
    sched_destroy(s);
    model_engine_free(e);
}
