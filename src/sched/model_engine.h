/* model_engine.h: one loaded model behind the scheduler's engine_ops seam (sched.h): the weights
 * (model.h; the architecture comes from general.architecture), its tokenizer, the memory every
 * sequence shares (--kv-tokens KV cells, or one recurrent state per sequence for Mamba), the
 * forward context sized for the biggest step (--batch-tokens), and samplers (sampler/sampler.h).
 *
 * Loading reads and maps the whole file, so it runs on a worker thread at startup (the libuv
 * driver does it in uv_queue_work); everything is sized here, once, and logged by the caller
 * with model_engine_describe(). After loading, the engine is used by the scheduler only:
 * forward and sample on the worker thread of a step, the rest on the loop thread.
 *
 *   struct model_engine_config ec = {.path = "m.gguf", .kv_tokens = 4096, .batch_tokens = 512,
 *                                    .n_seq_max = 64, .n_threads = 2};
 *   struct model_engine *e;  char why[256];
 *   if (model_engine_load(&e, &ec, why, sizeof why) < 0) ... why ...
 *   sched_create(&s, &cfg, e->mem, &model_engine_ops, e);
 *   ...
 *   sched_destroy(s); model_engine_free(e);
 *
 * The sampler parameters a request hands to sched_submit (sched_request.sampler_params) are a
 * const struct sampler_params * (sampler/sampler.h) with n_probs = the request's n_probs; the
 * scheduler's seed for each choice replaces its seed.
 */
#ifndef UVLM_SCHED_MODEL_ENGINE_H
#define UVLM_SCHED_MODEL_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sched/sched.h"

struct model;
struct tokenizer;
struct forward_ctx;

struct model_engine_config {
    const char *path;       /* GGUF file */
    int64_t kv_tokens;      /* cells shared by all sequences (a recurrent model keeps one state
                             * per sequence id instead; it caps the sequence length all the same) */
    int32_t batch_tokens;   /* most tokens per step */
    int32_t n_seq_max;      /* sequence ids (live choices + prompt cache entries) */
    int32_t max_seq_tokens; /* per-sequence limit below the model's context (0: none) */
    int32_t recurrent_states; /* a recurrent model's state cells (0: one per sequence id) */
    int n_threads;          /* compute threads of the forward pass (<= 0: all cores) */
    int64_t yield_us;       /* forward_config.yield_us */
    bool allow_unknown_pretokenizer; /* tokenizer_options.allow_unknown_pretokenizer */
};

struct sampler_scratch;

struct model_engine {
    struct model *model;    /* any architecture model.h runs (llama, qwen2, mamba) */
    struct forward_ctx *fc;
    struct tokenizer *tok;
    struct memory *mem;     /* KV cells, or one recurrent state per sequence (model's choice) */
    struct sampler_scratch *sampling; /* shared by every request's sampler: steps sample one row at a time */
    int32_t n_vocab;
    int32_t n_ctx;          /* most tokens per sequence: min(model context, kv_tokens, max_seq_tokens) */
    int64_t kv_tokens;
    int32_t n_seq_max;
    char tokenizer_warning[256]; /* "" or what tokenizer_load warned about */
};

/* 0, or the loaders' errors with the reason in why. */
int model_engine_load(struct model_engine **out, const struct model_engine_config *cfg, char *why,
                      size_t why_len);
void model_engine_free(struct model_engine *e);

/* One line for the startup log: architecture, sizes, bytes of memory and buffers. */
void model_engine_describe(const struct model_engine *e, char *out, size_t cap);

/* The model's chat template text (tokenizer.chat_template), or NULL with *len 0. */
const char *model_engine_chat_template(const struct model_engine *e, size_t *len);

extern const struct sched_engine_ops model_engine_ops;

#endif
