#include "sched/draft_model.h"

#include "common/batch.h"
#include "common/err.h"
#include "memory/memory.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct draft_model {
    struct model *model;
    struct forward_ctx *fc;
    struct memory *mem;
    struct tokenizer *tok;  /* its own: which tokens end a generation */
    struct batch batch;
    int32_t n_vocab, n_ctx, n_seq_max, batch_tokens;
    int32_t *held;          /* [n_seq_max][n_ctx]: the tokens the memory holds for each id */
    int32_t *n_held;        /* [n_seq_max] */
};

/* The first token whose bytes differ, as a message; 0 when the vocabularies are the same. */
static int same_vocab(const struct tokenizer *a, const struct tokenizer *b, char *why, size_t why_len) {
    int32_t n = tokenizer_n_vocab(a);
    if (tokenizer_n_vocab(b) != n) {
        snprintf(why, why_len, "the draft model's vocabulary has %d tokens, the served model's %d: a draft model "
                 "needs the same vocabulary", tokenizer_n_vocab(b), n);
        return -ERR_FORMAT;
    }
    for (int32_t i = 0; i < n; i++) {
        size_t la, lb;
        const char *pa = tokenizer_token_piece(a, i, true, &la), *pb = tokenizer_token_piece(b, i, true, &lb);
        if (la != lb || memcmp(pa, pb, la) != 0) {
            snprintf(why, why_len, "the draft model's token %d is \"%.*s\", the served model's \"%.*s\": a draft "
                     "model needs the same vocabulary", i, (int)(lb < 40 ? lb : 40), pb, (int)(la < 40 ? la : 40), pa);
            return -ERR_FORMAT;
        }
    }
    return 0;
}

int draft_model_load(struct draft_model **out, const char *path, const struct tokenizer *target,
                     const struct draft_model_config *cfg, char *why, size_t why_len) {
    *out = NULL;
    struct draft_model *d = calloc(1, sizeof *d);
    if (!d) return -ERR_NOMEM;
    int rc = model_load(&d->model, path, &(struct model_options){.serving_layout = true}, why, why_len);
    if (!rc) {
        char warn[256] = "";
        rc = tokenizer_load_with(&d->tok, &d->model->file, &(struct tokenizer_options){.allow_unknown_pretokenizer = true},
                                 warn, sizeof warn);
        if (rc) snprintf(why, why_len, "tokenizer: %s", warn);
    }
    if (!rc) rc = same_vocab(target, d->tok, why, why_len);
    if (rc) goto fail;
    d->n_vocab = d->model->hp.n_vocab;
    d->n_ctx = cfg->n_ctx;
    d->n_seq_max = cfg->n_seq_max;
    d->batch_tokens = cfg->batch_tokens;
    rc = model_memory_create_batches(d->model, cfg->n_cells, cfg->n_seq_max, cfg->batch_tokens, &d->mem);
    if (rc) {
        snprintf(why, why_len, "draft model memory of %lld cells: %s", (long long)cfg->n_cells, err_str(rc));
        goto fail;
    }
    if (!d->mem->ops->partial_removal) {
        snprintf(why, why_len, "the draft model's memory (%s) cannot drop rejected drafts: it cannot draft",
                 d->mem->ops->kind);
        rc = -ERR_FORMAT;
        goto fail;
    }
    rc = forward_ctx_create(&d->fc, d->model,
                            &(struct forward_config){.max_tokens = cfg->batch_tokens, .max_outputs = 1,
                                                     .n_ctx = cfg->n_ctx, .n_threads = cfg->n_threads,
                                                     .yield_us = cfg->yield_us});
    if (rc) {
        snprintf(why, why_len, "draft model forward buffers: %s", err_str(rc));
        goto fail;
    }
    d->held = malloc((size_t)cfg->n_seq_max * (size_t)cfg->n_ctx * sizeof *d->held);
    d->n_held = calloc((size_t)cfg->n_seq_max, sizeof *d->n_held);
    if (!d->held || !d->n_held || batch_init(&d->batch, cfg->batch_tokens) != 0) {
        snprintf(why, why_len, "draft model: out of memory");
        rc = -ERR_NOMEM;
        goto fail;
    }
    *out = d;
    return 0;
fail:
    draft_model_free(d);
    return rc;
}

void draft_model_free(struct draft_model *d) {
    if (!d) return;
    batch_free(&d->batch);
    free(d->held);
    free(d->n_held);
    forward_ctx_destroy(d->fc);
    memory_destroy(d->mem);
    tokenizer_free(d->tok);
    model_free(d->model);
    free(d);
}

size_t draft_model_bytes(const struct draft_model *d) {
    struct memory_usage u;
    memory_usage(d->mem, &u);
    return d->model->weight_bytes + u.bytes + forward_ctx_bytes(d->fc);
}

/* Forget what the memory holds for seq from position p on. */
static void forget(struct draft_model *d, int32_t seq, int32_t p) {
    if (memory_seq_rm(d->mem, seq, p, -1) != 0) {
        memory_seq_rm(d->mem, seq, 0, -1);
        p = 0;
    }
    if (p < d->n_held[seq]) d->n_held[seq] = p;
}

/* Feed tokens[0..n) at positions from n_held on (logits of the last one); on a full memory, the
 * other sequences' cells go. 0 or an error (then seq's tokens are forgotten). */
static int feed(struct draft_model *d, int32_t seq, const int32_t *tokens, int32_t n) {
    for (int32_t i = 0; i < n;) {
        int32_t m = n - i < d->batch_tokens ? n - i : d->batch_tokens;
        int32_t at = d->n_held[seq];
        batch_clear(&d->batch);
        for (int32_t j = 0; j < m; j++) batch_add(&d->batch, tokens[i + j], at + j, seq, i + j == n - 1);
        int rc = memory_reserve(d->mem, &d->batch);
        for (int32_t other = 0; rc == -ERR_NOMEM && other < d->n_seq_max; other++) {
            if (other == seq || d->n_held[other] == 0) continue;
            forget(d, other, 0);
            rc = memory_reserve(d->mem, &d->batch);
        }
        if (!rc) rc = model_forward(d->model, d->fc, d->mem, &d->batch);
        if (rc) {
            forget(d, seq, 0);
            return rc;
        }
        memcpy(d->held + (size_t)seq * (size_t)d->n_ctx + at, tokens + i, (size_t)m * sizeof *tokens);
        d->n_held[seq] = at + m;
        i += m;
    }
    return 0;
}

/* The most likely token of a logits row and its probability. */
static int32_t best(const float *logits, int32_t n_vocab, float *p) {
    int32_t b = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > logits[b]) b = i;
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - logits[b]);
    *p = sum > 0 ? (float)(1.0 / sum) : 0;
    return b;
}

int32_t draft_model_run(struct draft_model *d, int32_t seq, const int32_t *tokens, int32_t n, int32_t n_max,
                        float p_min, int32_t *out) {
    if (seq < 0 || seq >= d->n_seq_max || n < 1 || n + n_max > d->n_ctx) return 0;
    /* what it holds of this history already; the last token is fed again for its logits */
    const int32_t *held = d->held + (size_t)seq * (size_t)d->n_ctx;
    int32_t same = 0;
    while (same < d->n_held[seq] && same < n - 1 && held[same] == tokens[same]) same++;
    if (same < d->n_held[seq]) forget(d, seq, same);
    if (feed(d, seq, tokens + d->n_held[seq], n - d->n_held[seq]) != 0) return 0;
    int32_t k = 0;
    while (k < n_max) {
        float p;
        int32_t t = best(d->fc->logits, d->n_vocab, &p);
        if (p < p_min) break;
        out[k++] = t;
        if (k == n_max || tokenizer_is_eog(d->tok, t)) break;
        if (feed(d, seq, &t, 1) != 0) break;
    }
    return k;
}
