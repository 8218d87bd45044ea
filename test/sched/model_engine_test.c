/* The engine adapter on the shared trained model, driven through the scheduler without sockets:
 * the reference's greedy text, and n choices sharing one prompt evaluation. */
#include "test.h"

#include "common/err.h"
#include "model/model.h"
#include "sched/model_engine.h"
#include "sched/sched.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>

struct collect {
    int32_t tokens[2][32];
    int32_t n[2];
    int done;
    struct sched_counts counts;
};

static bool on_token(void *owner, int32_t choice, int32_t token, const struct sched_token_probs *probs) {
    struct collect *c = owner;
    if (c->n[choice] < 32) c->tokens[choice][c->n[choice]++] = token;
    return true;
}
static void on_done(void *owner, int32_t choice, enum sched_stop reason, const struct sched_counts *counts) {
    struct collect *c = owner;
    c->done++;
    c->counts = *counts;
}
static void on_error(void *owner, int err) { ((struct collect *)owner)->done = -1; }

static const struct sched_sink sink = {on_token, on_done, on_error, NULL};

static double fake_ms;

static void run(struct sched *s) {
    struct sched_step *step;
    while (sched_build_step(s, fake_ms, &step) > 0) {
        sched_step_compute(s, step);
        fake_ms += 10;
        sched_step_complete(s, step, fake_ms);
    }
}

/* The engine of ec and a scheduler over it, as the driver sets them up; 0 or an error. */
static int open_engine(const struct model_engine_config *ec, struct model_engine **e, struct sched **s) {
    char why[256];
    int rc = model_engine_load(e, ec, why, sizeof why);
    if (rc < 0) return rc;
    struct sched_config cfg;
    sched_config_default(&cfg);
    cfg.n_ctx = (*e)->n_ctx;
    cfg.batch_tokens = ec->batch_tokens;
    rc = sched_create(s, &cfg, (*e)->mem, &model_engine_ops, *e);
    if (rc < 0) model_engine_free(*e);
    return rc;
}

TEST(model_engine_greedy_reference_text_and_shared_prompt) {
    SHARED(path, "models/kjv-tiny-q8_0.gguf");
    struct model_engine_config ec = {.path = path, .kv_tokens = 256, .batch_tokens = 64, .n_seq_max = 8, .n_threads = 1};
    struct model_engine *e;
    struct sched *s;
    CHECK_EQ_INT(open_engine(&ec, &e, &s), 0);
    CHECK_EQ_INT(e->n_ctx, 256);

    int32_t prompt[16];
    size_t n_prompt;
    CHECK_EQ_INT(tokenizer_encode(e->tok, "And God said", 12, true, false, prompt, 16, &n_prompt), 0);
    struct model_engine_sampling sp = {.temperature = 0, .repeat_penalty = 1.0f};
    struct sched_request req = {.prompt = prompt, .n_prompt = (int32_t)n_prompt, .n_predict = 8,
                                .n_choices = 2, .seed = 1, .cache_prompt = false, .sampler_params = &sp};
    struct collect c = {0};
    struct sched_req *h;
    CHECK_EQ_INT(sched_submit(s, &req, &sink, &c, fake_ms, &h), 0);
    run(s);
    CHECK_EQ_INT(c.done, 2);
    CHECK_EQ_INT(c.n[0], 8);
    char text[256];
    int64_t len = tokenizer_decode(e->tok, c.tokens[0], 8, false, false, text, sizeof text - 1);
    CHECK(len > 0);
    text[len] = '\0';
    /* the reference's greedy continuation (../shared/README.md) */
    CHECK_EQ_STR(text, "unto him, Thou shalt not");
    CHECK(!memcmp(c.tokens[0], c.tokens[1], sizeof c.tokens[0])); /* both greedy choices agree */
    struct sched_stats st;
    sched_stats(s, fake_ms, &st);
    CHECK_EQ_INT(st.prompt_tokens, (int64_t)n_prompt); /* one prompt evaluation for two choices */
    CHECK_EQ_INT(st.generated_tokens, 16);
    sched_destroy(s);
    model_engine_free(e);
}

TEST(model_engine_load_reports_a_missing_file) {
    struct model_engine_config ec = {.path = "/nonexistent.gguf", .kv_tokens = 64, .batch_tokens = 8, .n_seq_max = 2};
    struct model_engine *e = NULL;
    char why[256] = "";
    CHECK(model_engine_load(&e, &ec, why, sizeof why) < 0);
    CHECK(why[0] != '\0');
    CHECK(e == NULL);
}

TEST(model_engine_serves_mamba_with_recurrent_memory) {
    SHARED(path, "models/mamba-spm-q8_0.gguf");
    struct model_engine_config ec = {.path = path, .kv_tokens = 128, .batch_tokens = 16, .n_seq_max = 4, .n_threads = 1};
    struct model_engine *e;
    struct sched *s;
    CHECK_EQ_INT(open_engine(&ec, &e, &s), 0);
    CHECK_EQ_STR(e->mem->ops->kind, "recurrent");
    CHECK_EQ_STR(e->model->hp.arch_name, "mamba");
    CHECK_EQ_INT(e->n_ctx, 128); /* capped like a transformer's, not the trained 1 Mi */
    int32_t prompt[] = {1, 15043, 3186};
    struct model_engine_sampling sp = {.temperature = 0, .repeat_penalty = 1.0f};
    struct sched_request req = {.prompt = prompt, .n_prompt = 3, .n_predict = 6, .n_choices = 2, .seed = 1,
                                .sampler_params = &sp};
    struct collect c = {0};
    struct sched_req *h;
    CHECK_EQ_INT(sched_submit(s, &req, &sink, &c, fake_ms, &h), 0);
    run(s);
    CHECK_EQ_INT(c.done, 2);
    CHECK_EQ_INT(c.n[0], 6);
    CHECK(!memcmp(c.tokens[0], c.tokens[1], sizeof c.tokens[0])); /* two greedy choices from one state */
    sched_destroy(s);
    model_engine_free(e);
}
