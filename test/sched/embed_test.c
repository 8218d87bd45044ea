/* Embedding requests through the scheduler on the shared models (the trained llama, and mamba):
 * mean, first (cls), last and every position's final hidden state, read in chunks beside a
 * generation, equal the hidden states a plain single-sequence forward gives, and those are the
 * model's output norm (the logits are the output matrix times them); the memory holds nothing of
 * them afterwards. */
#include "test.h"

#include "common/err.h"
#include "math/q8x16.h"
#include "math/quant.h"
#include "model/model.h"
#include "sched/model_engine.h"
#include "sched/sched.h"

#include <math.h>
#include <stdlib.h>

#define N_MAX 64

struct embd_out {
    float *rows;
    int32_t n_rows, n_embd;
    int done, embedded;
    enum sched_stop reason;
};

struct gen_out {
    int32_t n;
    int done;
};

static bool gen_token(void *owner, int32_t choice, int32_t token, const struct sched_token_probs *probs) {
    ((struct gen_out *)owner)->n++;
    return true;
}
static void gen_done(void *owner, int32_t choice, enum sched_stop reason, const struct sched_counts *counts) {
    ((struct gen_out *)owner)->done++;
}
static void any_error(void *owner, int err) { ((struct gen_out *)owner)->done = -1; }
static const struct sched_sink gen_sink = {gen_token, gen_done, any_error, NULL};

static bool embd_token(void *owner, int32_t choice, int32_t token, const struct sched_token_probs *probs) {
    ((struct embd_out *)owner)->done = -2; /* an embedding never generates */
    return false;
}
static void embd_done(void *owner, int32_t choice, enum sched_stop reason, const struct sched_counts *counts) {
    struct embd_out *o = owner;
    o->done++;
    o->reason = reason;
}
static void embd_error(void *owner, int err) { ((struct embd_out *)owner)->done = -1; }
static void embd_rows(void *owner, const float *rows, int32_t n_rows, int32_t n_embd) {
    struct embd_out *o = owner;
    o->embedded++;
    o->rows = malloc((size_t)n_rows * (size_t)n_embd * sizeof *rows);
    if (o->rows) memcpy(o->rows, rows, (size_t)n_rows * (size_t)n_embd * sizeof *rows);
    o->n_rows = n_rows;
    o->n_embd = n_embd;
}
static const struct sched_sink embd_sink = {embd_token, embd_done, embd_error, NULL};

/* max |a - b| <= tol * (max |b| + 1) over n floats */
static bool close_to(const float *a, const float *b, int64_t n, float tol) {
    float most = 0, diff = 0;
    for (int64_t i = 0; i < n; i++) {
        most = fabsf(b[i]) > most ? fabsf(b[i]) : most;
        diff = fabsf(a[i] - b[i]) > diff ? fabsf(a[i] - b[i]) : diff;
    }
    return diff <= tol * (most + 1);
}

/* Row r of the (tied) output matrix as floats. */
static void output_row(const struct model_weight *w, int64_t r, float *out) {
    if (w->type == UVLM_TYPE_Q8_0_X16) q8x16_row_to_float(w->data, w->n_in, w->n_out, r, out);
    else if (w->type == UVLM_TYPE_Q5_0_X16) q5x16_row_to_float(w->data, w->n_in, w->n_out, r, out);
    else quant_to_float(w->type, (const char *)w->data + (size_t)r * ggml_row_size(w->type, (uint64_t)w->n_in), out, w->n_in);
}

TEST(embeddings_pool_the_final_hidden_states_beside_generation) {
    SHARED(path, "models/kjv-tiny-q8_0.gguf");
    /* batches under 32 rows: every row's numbers are the same whatever else the batch holds
     * (math/matmul.h's per-row path), so the chunked, shared steps match a token-by-token run */
    struct model_engine_config ec = {.path = path, .kv_tokens = 256, .batch_tokens = 16, .n_seq_max = 8, .n_threads = 1};
    struct model_engine *e;
    char why[256];
    CHECK_EQ_INT(model_engine_load(&e, &ec, why, sizeof why), 0);
    struct sched_config cfg;
    sched_config_default(&cfg);
    cfg.n_ctx = e->n_ctx;
    cfg.batch_tokens = 16;
    cfg.chunk_tokens = 8;
    struct sched *s;
    CHECK_EQ_INT(sched_create(&s, &cfg, e->mem, &model_engine_ops, e), 0);
    sched_set_hidden(s, e->n_embd, model_engine_hidden);

    const char *text = "And God said, Let there be light: and there was light. And God saw the light, that it "
                       "was good: and God divided the light from the darkness.";
    int32_t *tok;
    size_t n;
    CHECK_EQ_INT(model_engine_tokenize(e, text, strlen(text), true, false, &tok, &n), 0);
    CHECK(n > 24 && n <= N_MAX);

    struct model_engine_sampling sp = {.temperature = 0, .repeat_penalty = 1.0f};
    struct sched_request gen = {.prompt = tok, .n_prompt = 5, .n_predict = 12, .n_choices = 1, .sampler_params = &sp};
    struct gen_out g = {0};
    struct sched_req *h;
    double now = 0;
    CHECK_EQ_INT(sched_submit(s, &gen, &gen_sink, &g, now, &h), 0);
    static const enum sched_embed kinds[4] = {SCHED_EMBED_MEAN, SCHED_EMBED_CLS, SCHED_EMBED_LAST, SCHED_EMBED_ALL};
    struct embd_out out[4] = {{0}};
    for (int k = 0; k < 4; k++) {
        struct sched_request r = {.prompt = tok, .n_prompt = (int32_t)n, .n_choices = 1, .embed = kinds[k],
                                  .on_embedding = embd_rows};
        CHECK_EQ_INT(sched_submit(s, &r, &embd_sink, &out[k], now, &h), 0);
    }
    /* an embedding needs a callback for its rows */
    struct sched_request r0 = {.prompt = tok, .n_prompt = (int32_t)n, .n_choices = 1, .embed = SCHED_EMBED_MEAN};
    CHECK_EQ_INT(sched_submit(s, &r0, &embd_sink, &g, now, &h), -ERR_INVAL);
    struct sched_step *step;
    int steps = 0;
    while (sched_build_step(s, now, &step) > 0) {
        CHECK(sched_step_batch(step)->n_tokens <= 16);
        sched_step_compute(s, step);
        now += 10;
        sched_step_complete(s, step, now);
        steps++;
    }
    CHECK(steps >= 4); /* chunked: 4 inputs of n tokens and a generation in 16-token steps */
    CHECK_EQ_INT(g.done, 1);
    CHECK_EQ_INT(g.n, 12);
    for (int k = 0; k < 4; k++) {
        CHECK_EQ_INT(out[k].done, 1);
        CHECK_EQ_INT(out[k].embedded, 1);
        CHECK_EQ_INT(out[k].reason, SCHED_STOP_LIMIT);
        CHECK(out[k].rows != NULL);
        CHECK_EQ_INT(out[k].n_embd, e->n_embd);
        CHECK_EQ_INT(out[k].n_rows, kinds[k] == SCHED_EMBED_ALL ? (int32_t)n : 1);
    }
    struct sched_stats st;
    sched_stats(s, now, &st);
    CHECK_EQ_INT(st.cells_used, 0); /* nothing kept: no prompt cache of an embedding */
    CHECK_EQ_INT(st.cached_seqs, 0);

    /* the same tokens alone, one position per forward, on sequence 0 of the emptied memory */
    int64_t E = e->n_embd;
    float *H = malloc((size_t)(n * E) * sizeof *H), *mean = calloc((size_t)E, sizeof *mean);
    float *row = malloc((size_t)E * sizeof *row);
    CHECK(H && mean && row);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 1), 0);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        batch_clear(&b);
        batch_add_hidden(&b, tok[i], (int32_t)i, 0);
        rc = memory_reserve(e->mem, &b);
        if (rc == 0) rc = model_forward(e->model, e->fc, e->mem, &b);
        if (rc == 0 && e->fc->n_hidden != 1) rc = -ERR_STATE;
        if (rc == 0) memcpy(H + i * E, e->fc->hidden, (size_t)E * sizeof *H);
    }
    CHECK_EQ_INT(rc, 0);
    /* the hidden state is what the output matrix turns into logits: the last position again,
     * for its logits this time */
    memory_seq_rm(e->mem, 0, (int32_t)n - 1, -1);
    batch_clear(&b);
    batch_add(&b, tok[n - 1], (int32_t)n - 1, 0, true);
    CHECK_EQ_INT(memory_reserve(e->mem, &b), 0);
    CHECK_EQ_INT(model_forward(e->model, e->fc, e->mem, &b), 0);
    CHECK_EQ_INT(e->fc->n_hidden, 0);
    float lmax = 0, ldiff = 0;
    for (int32_t v = 0; v < e->n_vocab; v += 7) {
        output_row(&e->model->output, v, row);
        double dot = 0;
        for (int64_t j = 0; j < E; j++) dot += (double)row[j] * H[(n - 1) * E + j];
        float logit = e->fc->logits[v];
        lmax = fabsf(logit) > lmax ? fabsf(logit) : lmax;
        ldiff = fabsf(logit - (float)dot) > ldiff ? fabsf(logit - (float)dot) : ldiff;
    }
    CHECK(lmax > 0 && ldiff <= 0.02f * lmax); /* the logits' matmul quantizes the activations */
    memory_seq_rm(e->mem, 0, 0, -1);
    batch_free(&b);

    for (size_t i = 0; i < n; i++)
        for (int64_t j = 0; j < E; j++) mean[j] += H[i * E + j] / (float)n;
    CHECK(close_to(out[0].rows, mean, E, 1e-4f));
    CHECK(close_to(out[1].rows, H, E, 1e-4f));
    CHECK(close_to(out[2].rows, H + (n - 1) * E, E, 1e-4f));
    CHECK(close_to(out[3].rows, H, (int64_t)n * E, 1e-4f));
    /* and they differ from each other: the test would see a wrong pooling */
    CHECK(!close_to(out[1].rows, out[2].rows, E, 1e-2f));
    CHECK(!close_to(out[0].rows, out[2].rows, E, 1e-2f));

    for (int k = 0; k < 4; k++) free(out[k].rows);
    free(H);
    free(mean);
    free(row);
    free(tok);
    sched_destroy(s);
    model_engine_free(e);
}

TEST(embeddings_wait_for_memory_and_refused_without_hidden_states) {
    SHARED(path, "models/kjv-tiny-q8_0.gguf");
    /* a memory of 48 cells: three inputs of over 24 tokens are read one or two at a time (waiting
     * for memory, or preempted and read again), and each gives the same vector */
    struct model_engine_config ec = {.path = path, .kv_tokens = 48, .batch_tokens = 16, .n_seq_max = 4, .n_threads = 1};
    struct model_engine *e;
    char why[256];
    CHECK_EQ_INT(model_engine_load(&e, &ec, why, sizeof why), 0);
    struct sched_config cfg;
    sched_config_default(&cfg);
    cfg.n_ctx = e->n_ctx;
    cfg.batch_tokens = 16;
    cfg.chunk_tokens = 8;
    cfg.preempt_recompute = true;
    struct sched *s;
    CHECK_EQ_INT(sched_create(&s, &cfg, e->mem, &model_engine_ops, e), 0);
    sched_set_hidden(s, e->n_embd, model_engine_hidden);
    const char *text = "And God said, Let there be light: and there was light. And God saw the light, that it was good";
    int32_t *tok;
    size_t n;
    CHECK_EQ_INT(model_engine_tokenize(e, text, strlen(text), true, false, &tok, &n), 0);
    CHECK(n > 24 && n <= 48);
    struct embd_out out[3] = {{0}};
    struct sched_req *h;
    double now = 0;
    for (int k = 0; k < 3; k++) {
        struct sched_request r = {.prompt = tok, .n_prompt = (int32_t)n, .n_choices = 1, .embed = SCHED_EMBED_MEAN,
                                  .on_embedding = embd_rows};
        CHECK_EQ_INT(sched_submit(s, &r, &embd_sink, &out[k], now, &h), 0);
    }
    struct sched_step *step;
    while (sched_build_step(s, now, &step) > 0) {
        sched_step_compute(s, step);
        now += 10;
        sched_step_complete(s, step, now);
    }
    for (int k = 0; k < 3; k++) {
        CHECK_EQ_INT(out[k].done, 1);
        CHECK(out[k].rows != NULL);
    }
    /* the same input, the same vector, whatever happened to each on the way */
    CHECK(close_to(out[1].rows, out[0].rows, e->n_embd, 1e-4f));
    CHECK(close_to(out[2].rows, out[0].rows, e->n_embd, 1e-4f));
    for (int k = 0; k < 3; k++) free(out[k].rows);
    sched_destroy(s);

    /* a scheduler not given the engine's hidden states refuses embeddings */
    CHECK_EQ_INT(sched_create(&s, &cfg, e->mem, &model_engine_ops, e), 0);
    struct embd_out o = {0};
    struct sched_request r = {.prompt = tok, .n_prompt = (int32_t)n, .n_choices = 1, .embed = SCHED_EMBED_LAST,
                              .on_embedding = embd_rows};
    CHECK_EQ_INT(sched_submit(s, &r, &embd_sink, &o, now, &h), -ERR_UNSUPPORTED);
    sched_destroy(s);
    free(tok);
    model_engine_free(e);
}

TEST(embeddings_of_a_recurrent_model) {
    SHARED(path, "models/mamba-spm-q8_0.gguf");
    /* a state per sequence instead of KV cells: the same pools, each position's hidden state
     * compared with a token-by-token run on a fresh state */
    struct model_engine_config ec = {.path = path, .kv_tokens = 256, .batch_tokens = 16, .n_seq_max = 4, .n_threads = 1};
    struct model_engine *e;
    char why[256];
    CHECK_EQ_INT(model_engine_load(&e, &ec, why, sizeof why), 0);
    struct sched_config cfg;
    sched_config_default(&cfg);
    cfg.n_ctx = e->n_ctx;
    cfg.batch_tokens = 16;
    cfg.chunk_tokens = 8;
    struct sched *s;
    CHECK_EQ_INT(sched_create(&s, &cfg, e->mem, &model_engine_ops, e), 0);
    sched_set_hidden(s, e->n_embd, model_engine_hidden);
    const char *text = "And God said, Let there be light: and there was light.";
    int32_t *tok;
    size_t n;
    CHECK_EQ_INT(model_engine_tokenize(e, text, strlen(text), true, false, &tok, &n), 0);
    CHECK(n > 8 && n <= N_MAX);
    static const enum sched_embed kinds[2] = {SCHED_EMBED_MEAN, SCHED_EMBED_ALL};
    struct embd_out out[2] = {{0}};
    struct sched_req *h;
    double now = 0;
    for (int k = 0; k < 2; k++) {
        struct sched_request r = {.prompt = tok, .n_prompt = (int32_t)n, .n_choices = 1, .embed = kinds[k],
                                  .on_embedding = embd_rows};
        CHECK_EQ_INT(sched_submit(s, &r, &embd_sink, &out[k], now, &h), 0);
    }
    struct sched_step *step;
    while (sched_build_step(s, now, &step) > 0) {
        sched_step_compute(s, step);
        now += 10;
        sched_step_complete(s, step, now);
    }
    for (int k = 0; k < 2; k++) {
        CHECK_EQ_INT(out[k].done, 1);
        CHECK(out[k].rows != NULL);
    }
    struct sched_stats st;
    sched_stats(s, now, &st);
    CHECK_EQ_INT(st.cached_seqs, 0);

    int64_t E = e->n_embd;
    float *H = malloc((size_t)(n * E) * sizeof *H), *mean = calloc((size_t)E, sizeof *mean);
    CHECK(H && mean);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 1), 0);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        batch_clear(&b);
        batch_add_hidden(&b, tok[i], (int32_t)i, 0);
        rc = memory_reserve(e->mem, &b);
        if (rc == 0) rc = model_forward(e->model, e->fc, e->mem, &b);
        if (rc == 0 && e->fc->n_hidden != 1) rc = -ERR_STATE;
        if (rc == 0) memcpy(H + i * E, e->fc->hidden, (size_t)E * sizeof *H);
    }
    memory_seq_rm(e->mem, 0, 0, -1);
    batch_free(&b);
    CHECK_EQ_INT(rc, 0);
    for (size_t i = 0; i < n; i++)
        for (int64_t j = 0; j < E; j++) mean[j] += H[i * E + j] / (float)n;
    CHECK(close_to(out[0].rows, mean, E, 1e-4f));
    CHECK(close_to(out[1].rows, H, (int64_t)n * E, 1e-4f));
    for (int k = 0; k < 2; k++) free(out[k].rows);
    free(H);
    free(mean);
    free(tok);
    sched_destroy(s);
    model_engine_free(e);
}
