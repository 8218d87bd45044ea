#include "sched/model_engine.h"

#include "common/err.h"
#include "common/hugemem.h"
#include "model/footprint.h"
#include "sched/draft_model.h"
#include "model/model.h"
#include "sampler/grammar.h"
#include "sampler/sampler.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(MODEL_ENGINE_MAX_BIAS == SAMPLER_MAX_BIAS, "the engine passes every bias to the sampler");
_Static_assert(SCHED_MAX_PROBS <= SAMPLER_MAX_PROBS, "the sampler reports every alternative asked for");

/* One small throwaway forward at load: it faults in every weight page (the file is mmap'd),
 * starts the compute threads and touches the forward buffers, so that the first request does not
 * pay for that in its first step (a cold step is several times slower than a warm one), while
 * requests arriving meanwhile wait for it. The memory is left empty. Its errors are the
 * forward's (a model that cannot run fails at load). */
static int engine_warm_up(struct model_engine *e, int32_t n) {
    struct batch b;
    int rc = batch_init(&b, n);
    if (rc) return rc;
    for (int32_t i = 0; i < n; i++) batch_add(&b, i % e->n_vocab, i, 0, i == n - 1);
    rc = memory_reserve(e->mem, &b);
    if (!rc) rc = model_forward(e->model, e->fc, e->mem, &b);
    memory_seq_rm(e->mem, 0, 0, -1);
    batch_free(&b);
    return rc;
}

/* Weights + memory + buffers against what the machine has, from the metadata, before any of it is
 * committed (the file is read whole by model_load): a load that cannot fit fails naming the sizes,
 * not in the OOM killer. A file whose metadata lacks the shape is left to model_load to refuse. */
static int check_fits(const struct model_engine_config *cfg, int64_t kv_tokens, enum kv_type tk, enum kv_type tv,
                      char *why, size_t why_len) {
    struct model_footprint fp;
    struct footprint_config fc = {.kv_tokens = kv_tokens, .batch_tokens = cfg->batch_tokens,
                                  .n_seq_max = cfg->n_seq_max, .max_seq_tokens = cfg->max_seq_tokens,
                                  .recurrent_states = cfg->recurrent_states, .extra_outputs = SCHED_SPEC_ROWS,
                                  .type_k = tk, .type_v = tv};
    if (model_footprint_of_path(cfg->path, &fc, &fp, why, why_len) < 0) {
        why[0] = 0;
        return 0;
    }
    return model_footprint_fits(&fp, hugemem_available(), why, why_len);
}

/* The cell types of the config ("" or NULL: f16), and the cells: kv_tokens, or as many as
 * kv_bytes of K/V hold (the footprint's kv figure, so that inspect and the load agree). */
static int resolve_cells(const struct model_engine_config *cfg, enum kv_type *tk, enum kv_type *tv, int64_t *cells,
                         char *why, size_t why_len) {
    *tk = *tv = KV_F16;
    const char *names[2] = {cfg->kv_type_k, cfg->kv_type_v};
    enum kv_type *types[2] = {tk, tv};
    for (int i = 0; i < 2; i++)
        if (names[i] && *names[i] && kv_type_parse(names[i], types[i]) < 0) {
            snprintf(why, why_len, "unknown KV cell type '%s' (f16 or q8_0)", names[i]);
            return -ERR_INVAL;
        }
    *cells = cfg->kv_tokens;
    if (cfg->kv_bytes <= 0) return 0;
    struct footprint_config fc = {.batch_tokens = cfg->batch_tokens, .n_seq_max = cfg->n_seq_max,
                                  .max_seq_tokens = cfg->max_seq_tokens, .recurrent_states = cfg->recurrent_states,
                                  .type_k = *tk, .type_v = *tv};
    int rc = model_footprint_kv_cells(cfg->path, &fc, (uint64_t)cfg->kv_bytes, cells, why, why_len);
    if (rc < 0) {
        *cells = cfg->kv_tokens; /* a file without the shape: model_load refuses it with its reason */
        why[0] = 0;
        return 0;
    }
    if (*cells == 0) {
        char b[24];
        snprintf(why, why_len, "--kv-bytes %s holds fewer than 16 KV cells of this model", footprint_size((uint64_t)cfg->kv_bytes, b));
        return -ERR_INVAL;
    }
    return 0;
}

int model_engine_load(struct model_engine **out, const struct model_engine_config *cfg, char *why,
                      size_t why_len) {
    enum kv_type tk, tv;
    int64_t kv_tokens;
    int rc = resolve_cells(cfg, &tk, &tv, &kv_tokens, why, why_len);
    if (rc == 0) rc = check_fits(cfg, kv_tokens, tk, tv, why, why_len);
    if (rc < 0) return rc;
    struct model_engine *e = calloc(1, sizeof *e);
    if (!e) return -ERR_NOMEM;
    rc = model_load(&e->model, cfg->path, &(struct model_options){.serving_layout = true}, why, why_len);
    if (!rc) {
        struct tokenizer_options topt = {.allow_unknown_pretokenizer = cfg->allow_unknown_pretokenizer};
        rc = tokenizer_load_with(&e->tok, &e->model->file, &topt, e->tokenizer_warning, sizeof e->tokenizer_warning);
        if (rc) snprintf(why, why_len, "tokenizer: %s", e->tokenizer_warning);
    }
    if (rc) {
        model_engine_free(e);
        return rc;
    }
    const struct model_hparams *hp = &e->model->hp;
    e->n_vocab = hp->n_vocab;
    e->n_ctx_train = hp->n_ctx_train;
    e->n_embd = hp->n_embd;
    e->weight_bytes = (int64_t)e->model->weight_bytes;
    if (tokenizer_n_vocab(e->tok) != e->n_vocab) {
        snprintf(why, why_len, "tokenizer has %d tokens, the model %d", tokenizer_n_vocab(e->tok), e->n_vocab);
        model_engine_free(e);
        return -ERR_FORMAT;
    }
    /* The scheduler keeps a token history of n_ctx per sequence: capped by the cells even for a
     * recurrent model, whose state has no length limit. */
    int64_t n_ctx = hp->n_ctx_train;
    if (kv_tokens < n_ctx) n_ctx = kv_tokens;
    if (cfg->max_seq_tokens > 0 && cfg->max_seq_tokens < n_ctx) n_ctx = cfg->max_seq_tokens;
    e->n_ctx = (int32_t)n_ctx;
    e->kv_tokens = kv_tokens;
    e->kv_type_k = kv_type_name(tk);
    e->kv_type_v = kv_type_name(tv);
    e->n_seq_max = cfg->n_seq_max;
    /* a memory counted in sequence states is sized by its own budget, not in tokens */
    int64_t n_cells = kv_tokens;
    if (model_memory_counts_states(e->model)) n_cells = cfg->recurrent_states > 0 ? cfg->recurrent_states : cfg->n_seq_max;
    struct memory_config mc = {.n_cells = n_cells, .n_seq_max = cfg->n_seq_max, .max_batch = cfg->batch_tokens,
                               .n_states = cfg->recurrent_states, .type_k = tk, .type_v = tv};
    rc = model_memory_create_with(e->model, &mc, &e->mem);
    if (rc) {
        if (rc == -ERR_UNSUPPORTED && (tk == KV_Q8_0 || tv == KV_Q8_0) && hp->head_dim % 32)
            snprintf(why, why_len, "q8_0 KV cells need a head size that is a multiple of 32 (this model's: %d)",
                     hp->head_dim);
        else if (rc == -ERR_UNSUPPORTED && (tk == KV_Q8_0 || tv == KV_Q8_0))
            snprintf(why, why_len, "q8_0 KV cells are not supported for models with sliding-window attention "
                                   "layers: use --kv-type f16");
        else
            snprintf(why, why_len, "memory of %lld cells: %s%s", (long long)n_cells, err_str(rc),
                     rc == -ERR_NOMEM ? " (more than the machine has available: lower --kv-tokens)" : "");
        model_engine_free(e);
        return rc;
    }
    struct memory_usage mu;
    memory_usage(e->mem, &mu);
    e->kv_bytes = mu.bytes;
    /* A step has at most one output row per sequence (its last prompt chunk or decode token),
     * and the rows of its drafts (sched.h: SCHED_SPEC_ROWS in all). */
    int32_t max_outputs = cfg->n_seq_max + SCHED_SPEC_ROWS < cfg->batch_tokens ? cfg->n_seq_max + SCHED_SPEC_ROWS
                                                                                 : cfg->batch_tokens;
    e->max_outputs = max_outputs;
    rc = forward_ctx_create(&e->fc, e->model,
                            &(struct forward_config){.max_tokens = cfg->batch_tokens,
                                                     .max_outputs = max_outputs,
                                                     .n_ctx = n_ctx,
                                                     .n_threads = cfg->n_threads,
                                                     .yield_us = cfg->yield_us});
    if (rc) {
        snprintf(why, why_len, "forward buffers for %d tokens: %s", cfg->batch_tokens, err_str(rc));
        model_engine_free(e);
        return rc;
    }
    rc = sampler_scratch_create(&e->sampling, e->n_vocab);
    if (rc) {
        snprintf(why, why_len, "sampling buffers: %s", err_str(rc));
        model_engine_free(e);
        return rc;
    }
    rc = model_engine_grammar_vocab(e->tok, &e->gvocab);
    if (!rc) rc = grammar_cache_create(&e->grammars, e->gvocab, MODEL_ENGINE_GRAMMARS);
    if (!rc && !(e->grammar_allow = malloc(grammar_mask_words(e->gvocab) * sizeof *e->grammar_allow))) rc = -ERR_NOMEM;
    if (rc) {
        snprintf(why, why_len, "grammar vocabulary: %s", err_str(rc));
        model_engine_free(e);
        return rc;
    }
    if (cfg->draft_path) {
        char dwhy[256] = "";
        struct draft_model_config dc = {.n_cells = cfg->kv_tokens, .n_seq_max = cfg->n_seq_max,
                                        .n_ctx = e->n_ctx + SCHED_SPEC_ROWS, .batch_tokens = cfg->batch_tokens,
                                        .n_threads = cfg->n_threads, .yield_us = cfg->yield_us};
        rc = draft_model_load(&e->draft, cfg->draft_path, e->tok, &dc, dwhy, sizeof dwhy);
        if (rc) {
            snprintf(why, why_len, "draft model %s: %s", cfg->draft_path, dwhy[0] ? dwhy : err_str(rc));
            model_engine_free(e);
            return rc;
        }
    }
    int32_t warm = cfg->batch_tokens < SCHED_PROBE_TOKENS ? cfg->batch_tokens : SCHED_PROBE_TOKENS;
    if (warm > e->n_ctx) warm = e->n_ctx;
    rc = engine_warm_up(e, warm);
    if (rc) {
        snprintf(why, why_len, "warm-up forward of %d tokens: %s", warm, err_str(rc));
        model_engine_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

void model_engine_free(struct model_engine *e) {
    if (!e) return;
    draft_model_free(e->draft);
    grammar_cache_free(e->grammars);
    grammar_vocab_free(e->gvocab);
    free(e->grammar_allow);
    forward_ctx_destroy(e->fc);
    sampler_scratch_destroy(e->sampling);
    memory_destroy(e->mem);
    tokenizer_free(e->tok);
    model_free(e->model);
    free(e);
}

void model_engine_describe(const struct model_engine *e, char *out, size_t cap) {
    struct memory_usage u;
    memory_usage(e->mem, &u);
    const struct model_hparams *hp = &e->model->hp;
    /* a hybrid's states are a budget of their own beside its cells (a recurrent memory's cells are states) */
    char states[48] = "";
    if (u.states_total > 0 && strcmp(e->mem->ops->kind, "recurrent") != 0)
        snprintf(states, sizeof states, " and %lld recurrent states", (long long)u.states_total);
    snprintf(out, cap,
             "%s: %d layers, n_embd %d, n_vocab %d, context %d (trained %d); weights %.1f MiB%s; "
             "memory (%s, K %s, V %s) %lld cells%s for %d sequences, %.1f MiB; forward buffers %.1f MiB",
             hp->arch_name, hp->n_layer, hp->n_embd, e->n_vocab, e->n_ctx, hp->n_ctx_train,
             (double)e->model->weight_bytes / (1 << 20),
             !e->model->serving_layout         ? ""
             : model_prompts_on_amx(e->model) ? " (Q8_0 / Q5_0 / Q4_K / Q6_K interleaved by 16 rows; prompts on AMX tiles)"
                                              : " (Q8_0 / Q5_0 / Q4_K / Q6_K interleaved by 16 rows)",
             e->mem->ops->kind,
             e->kv_type_k, e->kv_type_v, (long long)u.cells_total, states,
             e->n_seq_max, (double)u.bytes / (1 << 20), (double)forward_ctx_bytes(e->fc) / (1 << 20));
    size_t len = strlen(out);
    if (e->draft && len < cap)
        snprintf(out + len, cap - len, "; draft model %.1f MiB", (double)draft_model_bytes(e->draft) / (1 << 20));
}

const char *model_engine_chat_template(const struct model_engine *e, size_t *len) {
    return model_chat_template(e->model, len);
}

const char *model_engine_special_text(const struct model_engine *e, int which, size_t *len, bool *added) {
    int32_t id = which == 0 ? tokenizer_bos(e->tok) : tokenizer_eos(e->tok);
    *added = id >= 0 && (which == 0 ? tokenizer_add_bos(e->tok) : tokenizer_add_eos(e->tok));
    *len = 0;
    return id >= 0 ? tokenizer_token_piece(e->tok, id, true, len) : "";
}

int32_t model_engine_fim(const struct model_engine *e, enum model_engine_fim which) {
    return tokenizer_fim(e->tok, (enum tokenizer_fim)which);
}

const float *model_engine_hidden(void *engine) { return ((struct model_engine *)engine)->fc->hidden; }

int32_t model_engine_pooling(const struct model_engine *e) { return model_pooling_type(e->model); }

int32_t model_engine_bos(const struct model_engine *e, bool *added) {
    int32_t id = tokenizer_bos(e->tok);
    *added = id >= 0 && tokenizer_add_bos(e->tok);
    return id;
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

/* --- grammars ------------------------------------------------------------------------------- */

int model_engine_grammar_vocab(const struct tokenizer *tok, struct grammar_vocab **out) {
    int32_t n = tokenizer_n_vocab(tok);
    const char **pieces = malloc((size_t)n * sizeof *pieces);
    uint32_t *lens = malloc((size_t)n * sizeof *lens);
    uint8_t *kinds = malloc((size_t)n);
    int rc = -ERR_NOMEM;
    if (pieces && lens && kinds) {
        for (int32_t i = 0; i < n; i++) {
            bool control = tokenizer_is_control(tok, i);
            size_t len;
            pieces[i] = tokenizer_token_piece(tok, i, control, &len);
            lens[i] = (uint32_t)len;
            kinds[i] = tokenizer_is_eog(tok, i) ? GRAMMAR_TOKEN_EOG
                       : control                ? GRAMMAR_TOKEN_CONTROL
                       : len > 0                ? GRAMMAR_TOKEN_TEXT
                                                : GRAMMAR_TOKEN_NONE;
        }
        rc = grammar_vocab_create(out, n, pieces, lens, kinds);
    }
    free(pieces);
    free(lens);
    free(kinds);
    return rc;
}

int model_engine_grammar_get(struct model_engine *e, const char *text, size_t len, struct model_engine_grammar **out,
                             char *why, size_t why_len) {
    struct grammar *g;
    int rc = grammar_cache_get(e->grammars, text, len, &g, why, why_len);
    if (!rc) *out = (struct model_engine_grammar *)g;
    return rc;
}

int model_engine_grammar_find(struct model_engine *e, const char *text, size_t len, struct model_engine_grammar **out) {
    struct grammar *g;
    int rc = grammar_cache_find(e->grammars, text, len, &g);
    if (!rc) *out = (struct model_engine_grammar *)g;
    return rc;
}

void model_engine_grammar_release(struct model_engine_grammar *g) { grammar_unref((struct grammar *)g); }

/* A choice's sampler, and its grammar state when the request has a grammar. A lazy grammar
 * (grammar_trigger) waits in lazy, with the generated text's tail, until the trigger shows. */
struct engine_sampler {
    struct sampler *s;
    struct grammar_state *g;
    struct grammar *lazy;           /* a reference until triggered, then NULL */
    const char *trigger;
    size_t tail_len;
    char tail[4 * MODEL_ENGINE_TRIGGER_MAX];
};

/* A lazy choice's new token: once the trigger is in the tail, the grammar starts there. */
static void lazy_watch(struct model_engine *e, struct engine_sampler *es, int32_t tok) {
    size_t len;
    const char *piece = tokenizer_token_piece(e->tok, tok, tokenizer_is_control(e->tok, tok), &len);
    size_t keep = MODEL_ENGINE_TRIGGER_MAX;
    if (len > sizeof es->tail - keep) { /* a long piece: its end suffices, with the tail before it */
        piece += len - (sizeof es->tail - keep);
        len = sizeof es->tail - keep;
    }
    if (es->tail_len + len > sizeof es->tail) {
        size_t drop = es->tail_len + len - sizeof es->tail;
        memmove(es->tail, es->tail + drop, es->tail_len - drop);
        es->tail_len -= drop;
    }
    memcpy(es->tail + es->tail_len, piece, len);
    es->tail_len += len;
    const char *m = memmem(es->tail, es->tail_len, es->trigger, strlen(es->trigger));
    if (!m) return;
    struct grammar *g = es->lazy;
    es->lazy = NULL;
    if (grammar_state_create(&es->g, g) == 0 &&
        grammar_state_accept_bytes(es->g, m, es->tail_len - (size_t)(m - es->tail)) < 0) {
        grammar_state_free(es->g); /* the text went another way: it stays free */
        es->g = NULL;
    }
    grammar_unref(g);
}

/* One sampler per choice: the request's parameters with the choice's seed, the prompt's tail in
 * its penalty window. */
static void *engine_sampler_create(void *engine, const void *params, uint64_t seed, const int32_t *prompt,
                                   int32_t n_prompt) {
    struct model_engine *e = engine;
    const struct model_engine_sampling *rp = params;
    if (rp->n_logit_bias < 0 || rp->n_logit_bias > MODEL_ENGINE_MAX_BIAS) return NULL; /* sampler_reset's refusal */
    struct sampler_bias bias[MODEL_ENGINE_MAX_BIAS]; /* sampler_reset copies them */
    for (int32_t i = 0; i < rp->n_logit_bias; i++) bias[i] = (struct sampler_bias){rp->logit_bias[i].token, rp->logit_bias[i].bias};
    struct sampler_params p = {
        .temperature = rp->temperature,
        .top_k = rp->top_k,
        .top_p = rp->top_p,
        .min_p = rp->min_p,
        .repeat_penalty = rp->repeat_penalty,
        .repeat_last_n = rp->repeat_last_n,
        .presence_penalty = rp->presence_penalty,
        .frequency_penalty = rp->frequency_penalty,
        .logit_bias = rp->n_logit_bias ? bias : NULL,
        .n_logit_bias = rp->n_logit_bias,
        .n_probs = rp->n_probs,
        .post_sampling = rp->post_sampling_probs,
        .seed = seed,
    };
    /* the penalty window never outgrows the context (-1: the whole context) */
    int32_t window = p.repeat_last_n < 0 || p.repeat_last_n > e->n_ctx ? e->n_ctx : p.repeat_last_n;
    struct sampler *s;
    if (sampler_create(&s, e->n_vocab, window > 0 ? window : 1, e->sampling) < 0) return NULL;
    if (sampler_reset(s, &p) < 0) {
        sampler_destroy(s);
        return NULL;
    }
    for (int32_t i = n_prompt > window ? n_prompt - window : 0; i < n_prompt; i++) sampler_accept(s, prompt[i]);
    struct engine_sampler *es = calloc(1, sizeof *es);
    bool lazy = rp->grammar && rp->grammar_trigger && strlen(rp->grammar_trigger) <= MODEL_ENGINE_TRIGGER_MAX;
    if (es && lazy) {
        es->lazy = (struct grammar *)rp->grammar;
        grammar_ref(es->lazy);
        es->trigger = rp->grammar_trigger;
    }
    if (!es || (rp->grammar && !lazy && grammar_state_create(&es->g, (struct grammar *)rp->grammar) < 0)) {
        free(es);
        sampler_destroy(s);
        return NULL;
    }
    es->s = s;
    return es;
}

/* The sampled token under the choice's grammar: masked sampling, then the state advances. A state
 * that allows nothing (a dead end of the grammar) or a matcher error fails this sequence alone. */
static int32_t sample_with_grammar(struct model_engine *e, struct engine_sampler *es, const float *logits,
                                   int32_t draft, struct sampler_prob *top, int32_t *n_top) {
    int32_t n = grammar_state_mask(es->g, e->grammar_allow);
    if (n < 0) return n;
    if (n == 0) return -ERR_INVAL;
    int32_t tok = sampler_sample_draft(es->s, logits, e->grammar_allow, draft, top, n_top);
    if (!((e->grammar_allow[tok >> 6] >> (tok & 63)) & 1)) { /* rounding at the draw's end: the best allowed */
        tok = -1;
        for (int32_t i = 0; i < e->n_vocab; i++)
            if (((e->grammar_allow[i >> 6] >> (i & 63)) & 1) && (tok < 0 || logits[i] > logits[tok])) tok = i;
    }
    int rc = grammar_state_accept(es->g, tok);
    return rc < 0 ? rc : tok;
}

/* A token for one row (draft >= 0: the speculative acceptance rule, sampler.h), remembered. */
static int32_t engine_sample_draft(void *engine, void *sampler, const float *logits, int32_t draft, int32_t n_probs,
                                   struct sched_token_probs *probs) {
    struct sampler_prob top[SAMPLER_MAX_PROBS + 1];
    int32_t n_top = 0;
    struct engine_sampler *es = sampler;
    int32_t tok = es->g ? sample_with_grammar(engine, es, logits, draft, probs ? top : NULL, &n_top)
                        : sampler_sample_draft(es->s, logits, NULL, draft, probs ? top : NULL, &n_top);
    if (sampler_last_nonfinite(es->s) > 0) return -ERR_NUMERIC; /* this sequence ends, alone */
    if (tok < 0) return tok;
    if (es->lazy) lazy_watch(engine, es, tok);
    sampler_accept(es->s, tok);
    if (probs) { /* top[0..n_probs): the alternatives; the chosen token is among them or last */
        int32_t n_alt = n_top < n_probs ? n_top : n_probs;
        if (n_alt > SCHED_MAX_PROBS) n_alt = SCHED_MAX_PROBS;
        probs->token = tok;
        probs->n_top = n_alt;
        probs->logprob = 0;
        for (int32_t i = 0; i < n_top; i++)
            if (top[i].token == tok) probs->logprob = top[i].logprob;
        for (int32_t i = 0; i < n_alt; i++) {
            probs->top_token[i] = top[i].token;
            probs->top_logprob[i] = top[i].logprob;
        }
    }
    return tok;
}

/* A plain log-softmax of one row: token's logprob and the n_probs most likely (ties: the lower
 * id first, as the sampler ranks them). */
static void engine_token_logprobs(void *engine, const float *logits, int32_t token, int32_t n_probs,
                                  struct sched_token_probs *probs) {
    const struct model_engine *e = engine;
    int32_t nv = e->n_vocab, k = n_probs < SCHED_MAX_PROBS ? n_probs : SCHED_MAX_PROBS, n_top = 0;
    float mx = -INFINITY;
    for (int32_t i = 0; i < nv; i++)
        if (logits[i] > mx) mx = logits[i];
    if (!isfinite(mx)) mx = 0;
    double sum = 0;
    for (int32_t i = 0; i < nv; i++) {
        sum += exp((double)logits[i] - mx);
        if (k <= 0 || (n_top == k && !(logits[i] > logits[probs->top_token[k - 1]]))) continue;
        int32_t j = n_top < k ? n_top++ : k - 1; /* insert, dropping the last when full */
        while (j > 0 && logits[i] > logits[probs->top_token[j - 1]]) {
            probs->top_token[j] = probs->top_token[j - 1];
            j--;
        }
        probs->top_token[j] = i;
    }
    double lse = sum > 0 ? mx + log(sum) : mx;
    probs->token = token;
    probs->logprob = (float)(logits[token] - lse);
    probs->n_top = n_top;
    for (int32_t j = 0; j < n_top; j++) probs->top_logprob[j] = (float)(logits[probs->top_token[j]] - lse);
}

static int32_t engine_sample(void *engine, void *sampler, const float *logits, int32_t n_probs,
                             struct sched_token_probs *probs) {
    return engine_sample_draft(engine, sampler, logits, -1, n_probs, probs);
}

static void engine_sampler_free(void *engine, void *sampler) {
    struct engine_sampler *es = sampler;
    if (!es) return;
    grammar_state_free(es->g);
    if (es->lazy) grammar_unref(es->lazy);
    sampler_destroy(es->s);
    free(es);
}

static int32_t engine_draft(void *engine, int32_t seq, const int32_t *tokens, int32_t n, int32_t n_max, float p_min,
                            int32_t *out) {
    return draft_model_run(((struct model_engine *)engine)->draft, seq, tokens, n, n_max, p_min, out);
}

const struct sched_engine_ops model_engine_ops = {
    .forward = engine_forward,
    .n_vocab = engine_n_vocab,
    .is_eog = engine_is_eog,
    .sampler_create = engine_sampler_create,
    .sample = engine_sample,
    .sampler_free = engine_sampler_free,
    .token_logprobs = engine_token_logprobs,
    .sample_draft = engine_sample_draft,
};

static const struct sched_engine_ops engine_ops_with_draft = {
    .forward = engine_forward,
    .n_vocab = engine_n_vocab,
    .is_eog = engine_is_eog,
    .sampler_create = engine_sampler_create,
    .sample = engine_sample,
    .sampler_free = engine_sampler_free,
    .token_logprobs = engine_token_logprobs,
    .sample_draft = engine_sample_draft,
    .draft = engine_draft,
};

const struct sched_engine_ops *model_engine_sched_ops(const struct model_engine *e) {
    return e->draft ? &engine_ops_with_draft : &model_engine_ops;
}

/* --- text and tokens -------------------------------------------------------------------------- */

int model_engine_tokenize(const struct model_engine *e, const char *text, size_t len, bool add_special,
                          bool parse_special, int32_t **out, size_t *n_out) {
    return tokenizer_encode_alloc(e->tok, text, len, add_special, parse_special, out, n_out);
}

const char *model_engine_token_piece(const struct model_engine *e, int32_t id, bool special, size_t *len) {
    return tokenizer_token_piece(e->tok, id, special, len);
}

int64_t model_engine_detokenize(const struct model_engine *e, const int32_t *ids, size_t n, bool remove_special,
                                bool special, char **out) {
    size_t cap = n * (tokenizer_max_piece(e->tok) + 1) + 2; /* every piece, and the NUL */
    char *buf = malloc(cap);
    int64_t len = buf ? tokenizer_decode(e->tok, ids, n, remove_special, special, buf, cap - 1) : -ERR_NOMEM;
    if (len < 0) {
        free(buf);
        *out = NULL;
        return len;
    }
    buf[len] = '\0';
    *out = buf;
    return len;
}

struct model_engine_detok {
    struct detok d;
};

struct model_engine_detok *model_engine_detok_new(const struct model_engine *e) {
    struct model_engine_detok *d = malloc(sizeof *d);
    if (d) detok_init(&d->d, e->tok, false, false);
    return d;
}

void model_engine_detok_free(struct model_engine_detok *d) { free(d); }

size_t model_engine_detok_buf_size(const struct model_engine *e) { return detok_buf_size(e->tok); }

void model_engine_detok_set_special(struct model_engine_detok *d, bool special) { d->d.special = special; }

int model_engine_detok_push(struct model_engine_detok *d, int32_t token, char *out, size_t cap) {
    return detok_push(&d->d, token, out, cap);
}

int model_engine_detok_flush(struct model_engine_detok *d, char *out, size_t cap) {
    return detok_flush(&d->d, out, cap);
}
