/* eval.h: the reference-comparison runs of a model (what `uvlm eval-logits` writes and the golden
 * tests check): teacher-forced top-K logits at every prompt position, then greedy generation with
 * the top-K logits after each generated token.
 *
 * One sequence (id 0) is evaluated in a memory the caller owns and that is empty for sequence 0
 * on entry (it is emptied again on return). The prompt goes in batches of `chunk` tokens (every
 * position wants logits, so chunk <= the ctx's max_outputs), then one token per batch.
 * Top-K lists are sorted by logit, largest first (ties: smaller id first).
 *
 *   static void on_row(void *arg, int32_t i, const float *logits) { ... eval_topk(logits, ...) ... }
 *   int32_t greedy[32];
 *   eval_run(m, fc, mem, tokens, n, 512, 32, greedy, on_row, &state);
 */
#ifndef UVLM_MODEL_EVAL_H
#define UVLM_MODEL_EVAL_H

#include "model/model.h"

struct eval_topk {
    int32_t id;
    float logit;
};

/* The k largest of logits[0..n) into out[0..k), sorted (k <= n). */
void eval_topk(const float *logits, int32_t n, int32_t k, struct eval_topk *out);

/* Called with each output row: index i < n_tokens is the row after prompt token i; index
 * n_tokens + j the row after feeding greedy[j]. logits: n_vocab floats, valid during the call. */
typedef void (*eval_logits_cb)(void *arg, int32_t index, const float *logits);

/* Feeds the prompt, then n_gen greedy tokens into greedy[]. Returns 0 or the first error of
 * memory_reserve / model_forward. */
int eval_run(const struct model *m, struct forward_ctx *fc, struct memory *mem, const int32_t *tokens,
             int32_t n_tokens, int32_t chunk, int32_t n_gen, int32_t *greedy, eval_logits_cb cb, void *arg);

#endif
