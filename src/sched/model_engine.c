#include "sched/model_engine.h"

#include "common/err.h"
#include "math/matmul.h"
#include "model/mamba.h"
#include "model/model.h"
#include "sched/sampling.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* The transformer path: model_load picks the architecture and sizes its own buffers. */
static int load_transformer(struct model_engine *e, const struct model_engine_config *cfg, int32_t max_outputs,
                            char *why, size_t why_len) {
    int rc = model_load(&e->model, cfg->path, NULL, why, why_len);
    if (rc) return rc;
    const struct model_hparams *hp = &e->model->hp;
    e->file = &e->model->file;
    e->arch_name = hp->arch_name;
    e->n_vocab = hp->n_vocab;
    e->n_embd = hp->n_embd;
    e->n_layer = hp->n_layer;
    e->n_ctx_train = hp->n_ctx_train;
    e->weight_bytes = e->model->weight_bytes;
    e->n_ctx = (int32_t)(cfg->kv_tokens < hp->n_ctx_train ? cfg->kv_tokens : hp->n_ctx_train);
    if (cfg->max_seq_tokens > 0 && cfg->max_seq_tokens < e->n_ctx) e->n_ctx = cfg->max_seq_tokens;
    rc = model_memory_create(e->model, cfg->kv_tokens, cfg->n_seq_max, &e->mem);
    if (rc) {
        snprintf(why, why_len, "memory of %lld cells: %s", (long long)cfg->kv_tokens, err_str(rc));
        return rc;
    }
    rc = forward_ctx_create(&e->fc, e->model,
                            &(struct forward_config){.max_tokens = cfg->batch_tokens,
                                                     .max_outputs = max_outputs,
                                                     .n_ctx = e->n_ctx,
                                                     .n_threads = cfg->n_threads});
    if (rc) snprintf(why, why_len, "forward buffers for %d tokens: %s", cfg->batch_tokens, err_str(rc));
    return rc;
}

/* The Mamba path: memory is one state per sequence id; the state has no length limit, but a
 * sequence is bounded like a transformer's (trained context, --kv-tokens, --max-seq-tokens). */
static int load_mamba(struct model_engine *e, const struct model_engine_config *cfg, int32_t max_outputs,
                      char *why, size_t why_len) {
    int rc = mamba_load(&e->mamba, e->mamba_file, why, why_len);
    if (rc) return rc;
    const struct mamba_hparams *hp = &e->mamba->hp;
    e->file = e->mamba_file;
    e->arch_name = "mamba";
    e->n_vocab = hp->n_vocab;
    e->n_embd = hp->n_embd;
    e->n_layer = hp->n_layer;
    e->n_ctx_train = hp->n_ctx_train;
    e->weight_bytes = e->mamba_file->size;
    /* the scheduler keeps a token history of n_ctx per sequence: the same cap as for KV cells */
    e->n_ctx = (int32_t)(cfg->kv_tokens < hp->n_ctx_train ? cfg->kv_tokens : hp->n_ctx_train);
    if (cfg->max_seq_tokens > 0 && cfg->max_seq_tokens < e->n_ctx) e->n_ctx = cfg->max_seq_tokens;
    int n_threads = cfg->n_threads > 0 ? cfg->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads < 1) n_threads = 1;
    rc = mamba_memory_create(e->mamba, cfg->n_seq_max, cfg->n_seq_max, &e->mem);
    if (!rc) rc = mamba_scratch_create(&e->mamba_scratch, e->mamba, cfg->batch_tokens, max_outputs);
    if (!rc) rc = compute_create(&e->mamba_compute, n_threads, cfg->batch_tokens, mamba_max_n_in(e->mamba));
    if (!rc) {
        e->mamba_logits = malloc(sizeof *e->mamba_logits * (size_t)max_outputs * (size_t)e->n_vocab);
        if (!e->mamba_logits) rc = -ERR_NOMEM;
    }
    if (rc) snprintf(why, why_len, "mamba buffers for %d tokens, %d sequences: %s", cfg->batch_tokens,
                     cfg->n_seq_max, err_str(rc));
    return rc;
}

int model_engine_load(struct model_engine **out, const struct model_engine_config *cfg, char *why,
                      size_t why_len) {
    struct model_engine *e = calloc(1, sizeof *e);
    struct gguf_file *f = calloc(1, sizeof *f);
    if (!e || !f) {
        free(e);
        free(f);
        return -ERR_NOMEM;
    }
    /* A step has at most one output row per sequence (its last prompt chunk or decode token). */
    int32_t max_outputs = cfg->n_seq_max < cfg->batch_tokens ? cfg->n_seq_max : cfg->batch_tokens;
    int rc = gguf_open(f, cfg->path, why, why_len);
    if (!rc && gguf_str_eq(gguf_get_str(f, "general.architecture"), "mamba")) {
        e->mamba_file = f;
        rc = load_mamba(e, cfg, max_outputs, why, why_len);
    } else if (!rc) {
        gguf_close(f);
        free(f);
        rc = load_transformer(e, cfg, max_outputs, why, why_len);
    } else {
        free(f);
    }
    if (!rc) {
        rc = tokenizer_load(&e->tok, e->file, e->tokenizer_warning, sizeof e->tokenizer_warning);
        if (rc) snprintf(why, why_len, "tokenizer: %s", e->tokenizer_warning);
    }
    if (!rc && tokenizer_n_vocab(e->tok) != e->n_vocab) {
        snprintf(why, why_len, "tokenizer has %d tokens, the model %d", tokenizer_n_vocab(e->tok), e->n_vocab);
        rc = -ERR_FORMAT;
    }
    if (rc) {
        model_engine_free(e);
        return rc;
    }
    e->kv_tokens = cfg->kv_tokens;
    e->n_seq_max = cfg->n_seq_max;
    *out = e;
    return 0;
}

void model_engine_free(struct model_engine *e) {
    if (!e) return;
    forward_ctx_destroy(e->fc);
    free(e->mamba_logits);
    if (e->mamba_compute) compute_destroy(e->mamba_compute);
    mamba_scratch_destroy(e->mamba_scratch);
    memory_destroy(e->mem);
    tokenizer_free(e->tok);
    model_free(e->model);
    mamba_free(e->mamba);
    if (e->mamba_file) {
        gguf_close(e->mamba_file);
        free(e->mamba_file);
    }
    free(e);
}

void model_engine_describe(const struct model_engine *e, char *out, size_t cap) {
    struct memory_usage u;
    memory_usage(e->mem, &u);
    size_t buffers = e->fc ? forward_ctx_bytes(e->fc)
                           : mamba_scratch_bytes(e->mamba_scratch) + compute_scratch_bytes(e->mamba_compute);
    snprintf(out, cap,
             "%s: %d layers, n_embd %d, n_vocab %d, context %d (trained %d); weights %.1f MiB; "
             "memory (%s) %lld cells for %d sequences, %.1f MiB; forward buffers %.1f MiB",
             e->arch_name, e->n_layer, e->n_embd, e->n_vocab, e->n_ctx, e->n_ctx_train,
             (double)e->weight_bytes / (1 << 20), e->mem->ops->kind, (long long)u.cells_total, e->n_seq_max,
             (double)u.bytes / (1 << 20), (double)buffers / (1 << 20));
}

const char *model_engine_chat_template(const struct model_engine *e, size_t *len) {
    struct gguf_str s = gguf_get_str(e->file, "tokenizer.chat_template");
    *len = s.ptr ? s.len : 0;
    return s.ptr;
}

/* --- engine_ops ---------------------------------------------------------------------------- */

static int engine_forward(void *engine, struct memory *mem, const struct batch *b, const float **logits) {
    struct model_engine *e = engine;
    if (e->mamba) {
        *logits = e->mamba_logits;
        return mamba_forward(e->mamba, e->mamba_scratch, e->mamba_compute, mem, b, e->mamba_logits);
    }
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
