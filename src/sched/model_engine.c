#include "sched/model_engine.h"

#include "common/err.h"
#include "model/model.h"
#include "sched/sampling.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>

int model_engine_load(struct model_engine **out, const struct model_engine_config *cfg, char *why,
                      size_t why_len) {
    struct model_engine *e = calloc(1, sizeof *e);
    if (!e) return -ERR_NOMEM;
    int rc = model_load(&e->model, cfg->path, NULL, why, why_len);
    if (!rc) rc = tokenizer_load(&e->tok, &e->model->file, e->tokenizer_warning, sizeof e->tokenizer_warning);
    if (rc && e->model && !e->tok) snprintf(why, why_len, "tokenizer: %s", e->tokenizer_warning);
    if (rc) {
        model_engine_free(e);
        return rc;
    }
    e->n_vocab = e->model->hp.n_vocab;
    if (tokenizer_n_vocab(e->tok) != e->n_vocab) {
        snprintf(why, why_len, "tokenizer has %d tokens, the model %d", tokenizer_n_vocab(e->tok), e->n_vocab);
        model_engine_free(e);
        return -ERR_FORMAT;
    }
    int64_t n_ctx = e->model->hp.n_ctx_train;
    if (cfg->kv_tokens < n_ctx) n_ctx = cfg->kv_tokens;
    if (cfg->max_seq_tokens > 0 && cfg->max_seq_tokens < n_ctx) n_ctx = cfg->max_seq_tokens;
    e->n_ctx = (int32_t)n_ctx;
    e->kv_tokens = cfg->kv_tokens;
    e->n_seq_max = cfg->n_seq_max;
    rc = model_memory_create(e->model, cfg->kv_tokens, cfg->n_seq_max, &e->mem);
    if (rc) {
        snprintf(why, why_len, "memory of %lld cells: %s", (long long)cfg->kv_tokens, err_str(rc));
        model_engine_free(e);
        return rc;
    }
    /* A step has at most one output row per sequence (its last prompt chunk or decode token). */
    int32_t max_outputs = cfg->n_seq_max < cfg->batch_tokens ? cfg->n_seq_max : cfg->batch_tokens;
    rc = forward_ctx_create(&e->fc, e->model,
                            &(struct forward_config){.max_tokens = cfg->batch_tokens,
                                                     .max_outputs = max_outputs,
                                                     .n_ctx = n_ctx,
                                                     .n_threads = cfg->n_threads});
    if (rc) {
        snprintf(why, why_len, "forward buffers for %d tokens: %s", cfg->batch_tokens, err_str(rc));
        model_engine_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

void model_engine_free(struct model_engine *e) {
    if (!e) return;
    forward_ctx_destroy(e->fc);
    memory_destroy(e->mem);
    tokenizer_free(e->tok);
    model_free(e->model);
    free(e);
}

void model_engine_describe(const struct model_engine *e, char *out, size_t cap) {
    struct memory_usage u;
    memory_usage(e->mem, &u);
    const struct model_hparams *hp = &e->model->hp;
    snprintf(out, cap,
             "%s: %d layers, n_embd %d, n_vocab %d, context %d (trained %d); weights %.1f MiB; "
             "memory %lld cells for %d sequences, %.1f MiB; forward buffers %.1f MiB",
             hp->arch_name, hp->n_layer, hp->n_embd, e->n_vocab, e->n_ctx, hp->n_ctx_train,
             (double)e->model->weight_bytes / (1 << 20), (long long)u.cells_total, e->n_seq_max,
             (double)u.bytes / (1 << 20), (double)forward_ctx_bytes(e->fc) / (1 << 20));
}

const char *model_engine_chat_template(const struct model_engine *e, size_t *len) {
    struct gguf_str s = gguf_get_str(&e->model->file, "tokenizer.chat_template");
    *len = s.ptr ? s.len : 0;
    return s.ptr;
}

/* --- engine_ops ---------------------------------------------------------------------------- */

static int engine_forward(void *engine, struct memory *mem, const struct batch *b, const float **logits) {
    struct model_engine *e = engine;
    int rc = model_forward(e->model, e->fc, mem, b);
    *logits = e->fc->logits;
    return rc;
}

static int32_t engine_n_vocab(void *engine) { return ((struct model_engine *)engine)->n_vocab; }

static bool engine_is_eog(void *engine, int32_t token) {
    return tokenizer_is_eog(((struct model_engine *)engine)->tok, token);
}

static void *engine_sampler_create(void *engine, const void *params, uint64_t seed, const int32_t *prompt,
                                   int32_t n_prompt) {
    struct model_engine *e = engine;
    struct sampling_params p = *(const struct sampling_params *)params;
    p.n_ctx = e->n_ctx;
    return sampler_new(&p, e->n_vocab, seed, prompt, n_prompt);
}

static int32_t engine_sample(void *engine, void *sampler, const float *logits, int32_t n_probs,
                             struct sched_token_probs *probs) {
    return sampler_sample(sampler, logits, n_probs, probs);
}

static void engine_sampler_free(void *engine, void *sampler) { sampler_delete(sampler); }

const struct sched_engine_ops model_engine_ops = {
    .forward = engine_forward,
    .n_vocab = engine_n_vocab,
    .is_eog = engine_is_eog,
    .sampler_create = engine_sampler_create,
    .sample = engine_sample,
    .sampler_free = engine_sampler_free,
};
