/* model_engine.h: one loaded model behind the scheduler's engine_ops seam (sched.h): the weights
 * (model.h; the architecture comes from general.architecture), its tokenizer, the memory every
 * sequence shares (--kv-tokens KV cells, or one recurrent state per sequence for Mamba), the
 * forward context sized for the biggest step (--batch-tokens), samplers (sampler/sampler.h) and,
 * for speculative decoding, a draft model (sched/draft_model.h; --model-draft), loaded after the
 * served model and checked to share its vocabulary.
 * It is also what the API layer knows of the model: the tokenizer's text <-> tokens, a streaming
 * detokenizer, the sampling parameters and the model's sizes, so that src/api reaches model,
 * tokenizer and sampler only through here.
 *
 * Loading reads and maps the whole file, so it runs on a worker thread at startup (the serving
 * state does it on the engine driver's compute thread); everything is sized here, once, and
 * logged by the caller with model_engine_describe(). After loading, the engine is used by the
 * scheduler (forward and sample on the worker thread of a step, the rest on the loop thread) and
 * by the endpoints on the loop thread (the tokenizer is immutable: any thread may use it).
 *
 *   struct model_engine_config ec = {.path = "m.gguf", .kv_tokens = 4096, .batch_tokens = 512,
 *                                    .n_seq_max = 64, .n_threads = 2};
 *   struct model_engine *e;  char why[256];
 *   if (model_engine_load(&e, &ec, why, sizeof why) < 0) ... why ...
 *   sched_create(&s, &cfg, e->mem, model_engine_sched_ops(e), e);
 *   sched_set_hidden(s, e->n_embd, model_engine_hidden);   // embedding requests
 *   struct model_engine_sampling sp = {.temperature = 0.8f, .top_k = 40, .repeat_penalty = 1};
 *   struct sched_request r = {..., .n_probs = sp.n_probs, .sampler_params = &sp};
 *   sched_submit(s, &r, ...);            // the samplers copy sp: it may go after the call
 *   ...
 *   sched_destroy(s); model_engine_free(e);
 *
 * The sampler parameters a request hands to sched_submit (sched_request.sampler_params) are a
 * const struct model_engine_sampling * with n_probs = the request's n_probs; the scheduler's seed
 * for each choice is the sampler's seed.
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
    int64_t kv_bytes;       /* > 0: the cells are as many as fit in these bytes of K/V (model/footprint.h's
                             * kv figure, so of the cell types below), in place of kv_tokens */
    const char *kv_type_k, *kv_type_v; /* "f16" or "q8_0" (memory/kv.h); NULL or "": f16 */
    int32_t batch_tokens;   /* most tokens per step */
    int32_t n_seq_max;      /* sequence ids (live choices + prompt cache entries) */
    int32_t max_seq_tokens; /* per-sequence limit below the model's context (0: none) */
    int32_t recurrent_states; /* a recurrent or hybrid model's states (0: one per sequence id) */
    int n_threads;          /* compute threads of the forward pass (<= 0: all cores) */
    int64_t yield_us;       /* forward_config.yield_us */
    bool allow_unknown_pretokenizer; /* tokenizer_options.allow_unknown_pretokenizer */
    const char *draft_path; /* a draft model for speculative decoding (sched/draft_model.h), or NULL */
};

struct sampler_scratch;
struct grammar_vocab;
struct grammar_cache;

struct model_engine {
    struct model *model;    /* any architecture model.h runs */
    struct forward_ctx *fc;
    struct tokenizer *tok;
    struct memory *mem;     /* KV cells, or one recurrent state per sequence (model's choice) */
    struct sampler_scratch *sampling; /* shared by every request's sampler: steps sample one row at a time */
    int32_t n_vocab;
    int32_t n_ctx_train;    /* the model's context (its metadata) */
    int32_t n_embd;
    int64_t weight_bytes;   /* bytes of the weights read per token */
    int32_t n_ctx;          /* most tokens per sequence: min(model context, kv_tokens, max_seq_tokens) */
    int64_t kv_tokens;      /* the cells: the config's kv_tokens, or what its kv_bytes holds */
    const char *kv_type_k, *kv_type_v; /* the cells' types, "f16" or "q8_0" (static strings) */
    uint64_t kv_bytes;      /* bytes of the memory (memory_usage: K/V and bookkeeping, every pool) */
    int32_t n_seq_max;
    int32_t max_outputs;    /* logits rows per forward (sched_config.max_outputs) */
    char tokenizer_warning[256]; /* "" or what tokenizer_load warned about */
    struct grammar_vocab *gvocab;  /* the vocabulary's trie for grammars (sampler/grammar.h) */
    struct grammar_cache *grammars;/* compiled grammars by text (thread-safe) */
    uint64_t *grammar_allow;       /* one mask: steps sample one row at a time (worker thread) */
    struct draft_model *draft;     /* config.draft_path loaded, or NULL (worker thread) */
};

/* 0, or the loaders' errors with the reason in why. */
int model_engine_load(struct model_engine **out, const struct model_engine_config *cfg, char *why,
                      size_t why_len);
void model_engine_free(struct model_engine *e);

/* One line for the startup log: architecture, sizes, bytes of memory and buffers. */
void model_engine_describe(const struct model_engine *e, char *out, size_t cap);

/* The model's chat template text (tokenizer.chat_template), or NULL with *len 0. */
const char *model_engine_chat_template(const struct model_engine *e, size_t *len);

/* The text of the BOS (which 0) or EOS (which 1) token ("" with *len 0 when the vocabulary has
 * none), and whether tokenizing with add_special adds it: a chat template's bos_token/eos_token. */
const char *model_engine_special_text(const struct model_engine *e, int which, size_t *len, bool *added);

/* The scheduler's seam: forward and sampling, with speculation's acceptance rule; no draft model. */
extern const struct sched_engine_ops model_engine_ops;
/* The engine's own table: model_engine_ops, with engine_ops.draft when it has a draft model. */
const struct sched_engine_ops *model_engine_sched_ops(const struct model_engine *e);
/* The model's fill-in-the-middle markers (tokenizer.h's tokenizer_fim: GGUF keys, else found by
 * their text), -1 when the vocabulary has none; the same order as enum tokenizer_fim. */
enum model_engine_fim { MODEL_ENGINE_FIM_PRE, MODEL_ENGINE_FIM_SUF, MODEL_ENGINE_FIM_MID, MODEL_ENGINE_FIM_PAD,
                        MODEL_ENGINE_FIM_REP, MODEL_ENGINE_FIM_SEP, MODEL_ENGINE_FIM_KINDS };
int32_t model_engine_fim(const struct model_engine *e, enum model_engine_fim which);
/* The pooling of embeddings the model's metadata asks for (model.h's model_pooling_type: 0 none,
 * 1 mean, 2 cls, 3 last, 4 rank; -1 when it says nothing). */
int32_t model_engine_pooling(const struct model_engine *e);
/* The BOS id (-1: none) and whether tokenizing with add_special puts it first (*added). */
int32_t model_engine_bos(const struct model_engine *e, bool *added);

/* The final hidden states of the last forward (model.h's forward_ctx.hidden), for
 * sched_set_hidden(s, e->n_embd, model_engine_hidden): engine is the struct model_engine. */
const float *model_engine_hidden(void *engine);

/* --- sampling: what sched_request.sampler_params points to ---------------------------------- */

#define MODEL_ENGINE_MAX_BIAS 1024 /* most logit_bias entries (the sampler's SAMPLER_MAX_BIAS) */

struct model_engine_bias {
    int32_t token;
    float bias;               /* added to the logit; -INFINITY bans */
};

/* A compiled grammar (sampler/grammar.h's struct grammar) that requests share. */
struct model_engine_grammar;

#define MODEL_ENGINE_GRAMMARS 32 /* compiled grammars kept by text */

/* The compiled grammar of GBNF text[0..len), from the engine's cache (compiled on a miss): a
 * reference the caller releases. 0, or -ERR_INVAL / -ERR_TOOBIG with why = "LINE:COL: what" (or a
 * whole-grammar reason), -ERR_NOMEM. Any thread; a compile may take long (a small grammar with
 * stacked repetitions can take seconds), so the server calls it on its thread pool. */
int model_engine_grammar_get(struct model_engine *e, const char *text, size_t len, struct model_engine_grammar **out,
                             char *why, size_t why_len);
/* The compiled grammar of text[0..len) if the cache has it (a reference), never compiling: 0 or
 * -ERR_NOTFOUND. Cheap: for the loop thread, which then compiles a miss with
 * model_engine_grammar_get off the loop. */
int model_engine_grammar_find(struct model_engine *e, const char *text, size_t len, struct model_engine_grammar **out);
void model_engine_grammar_release(struct model_engine_grammar *g);

/* The grammar vocabulary of a tokenizer: text tokens by their bytes, control tokens by their text,
 * end-of-generation tokens (what model_engine_load builds; the benchmark builds it too). */
struct tokenizer;
int model_engine_grammar_vocab(const struct tokenizer *tok, struct grammar_vocab **out);

/* A request's sampling (sampler/sampler.h's chain). With a grammar, every choice keeps its own
 * matcher state (from the grammar's start, inside the choice's sampler, so preemption keeps it),
 * only tokens the grammar accepts are sampled (end of generation only once it is complete), and a
 * state that allows nothing ends the choice's request with -ERR_INVAL. */
struct model_engine_sampling {
    float temperature;        /* <= 0: greedy */
    int32_t top_k;            /* <= 0: off */
    float top_p;              /* >= 1 or <= 0: off */
    float min_p;              /* <= 0: off */
    float repeat_penalty;     /* 1 or <= 0: off */
    int32_t repeat_last_n;    /* window of the penalties; < 0: the context */
    float presence_penalty;   /* 0: off */
    float frequency_penalty;  /* 0: off */
    const struct model_engine_bias *logit_bias; /* at most MODEL_ENGINE_MAX_BIAS, ids in the vocabulary */
    int32_t n_logit_bias;
    int32_t n_probs;          /* log-probs to report (the request's n_probs) */
    bool post_sampling_probs; /* of the distribution drawn from (sampler.h: post_sampling) */
    struct model_engine_grammar *grammar; /* NULL: none; the samplers take their own references */
    const char *grammar_trigger; /* NULL: the grammar applies from the first token; else it applies
                                  * once the generated text (control tokens as their text) holds
                                  * this string (at most MODEL_ENGINE_TRIGGER_MAX bytes; static or
                                  * outliving the request), matched from the string's start on. A
                                  * text the grammar refuses there leaves the choice unconstrained. */
};
#define MODEL_ENGINE_TRIGGER_MAX 64

/* --- text and tokens (the tokenizer; any thread) ------------------------------------------- */

/* Tokenize text[0..len) (tokenizer.h's tokenizer_encode_alloc): *out is malloc'd (the caller
 * frees it; NULL when *n_out is 0). add_special: BOS/EOS as the vocabulary says; parse_special:
 * control tokens' text becomes the token. 0 or -ERR_NOMEM. */
int model_engine_tokenize(const struct model_engine *e, const char *text, size_t len, bool add_special,
                          bool parse_special, int32_t **out, size_t *n_out);
/* The bytes one token decodes to (special: control tokens' text too, else ""). Not
 * NUL-terminated, maybe part of a UTF-8 character; valid while the engine lives. */
const char *model_engine_token_piece(const struct model_engine *e, int32_t id, bool special, size_t *len);
/* Decode a whole sequence (tokenizer_decode) into *out, malloc'd and NUL-terminated (the caller
 * frees it). Returns the byte count, or -ERR_NOMEM. */
int64_t model_engine_detokenize(const struct model_engine *e, const int32_t *ids, size_t n, bool remove_special,
                                bool special, char **out);

/* Streaming detokenizer of generated text (tokenizer.h's struct detok): only whole UTF-8
 * characters come out, an incomplete one is held until the next token completes it; leading
 * spaces are kept (the text continues a prompt), control tokens give "".
 *
 *   struct model_engine_detok *d = model_engine_detok_new(e);      // NULL: out of memory
 *   size_t cap = model_engine_detok_buf_size(e);                   // room for any one call
 *   int k = model_engine_detok_push(d, token, buf, cap);           // per token: k bytes
 *   k = model_engine_detok_flush(d, buf, cap);                     // at the end: held bytes as U+FFFD
 *   model_engine_detok_free(d);
 */
struct model_engine_detok;
struct model_engine_detok *model_engine_detok_new(const struct model_engine *e);
void model_engine_detok_free(struct model_engine_detok *d);
size_t model_engine_detok_buf_size(const struct model_engine *e);
int model_engine_detok_push(struct model_engine_detok *d, int32_t token, char *out, size_t cap);
/* Control tokens give their text from now on (a tool-call syntax whose markers are control tokens). */
void model_engine_detok_set_special(struct model_engine_detok *d, bool special);
int model_engine_detok_flush(struct model_engine_detok *d, char *out, size_t cap);

#endif
