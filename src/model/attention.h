/* attention.h (private to src/model): the causal self-attention of a batch over the KV memory,
 * one layer at a time, for the transformer families' forward passes (llama.c).
 *
 * For entry i of the batch (sequence s, position p) and query head h, whose kv head is
 * h / group (group = n_head / n_head_kv query heads share one kv head: MHA, GQA, MQA):
 *   out[i][h] = sum_c P[c] * V_l[c][h / group],  P = softmax over c of scale * (q[i][h] . K_l[c][h / group])
 * over the cells c of sequence s at positions <= p (and > p - window with a sliding window), K_l
 * and V_l being layer l's rows of the cells (kv_k_row / kv_v_row: F16, or Q8_0 blocks, memory/kv.h),
 * the batch's own cells included: the caller stores their K and V before attn_layer. A window's masked cells are
 * skipped where a whole chunk of entries cannot see them and get probability 0 in the rows that
 * cannot where the chunk's first entry still does (math/attn.h's attn_mask_window), the same way
 * in every strategy, so a row's numbers stay those of the strategy it would take anyway.
 *
 * Numbers: the softmax is the reference's (math/attn.h's attn_softmax_row: probabilities rounded
 * to F16 as its F16 product with V sees them); the two products depend on the shape of the work,
 * never on the thread count or the other sequences of the step:
 *   - a sequence whose rows (entries x group) are fewer than MATMUL_BLAS_MIN_TOKENS (a decode
 *     step's) runs on math/attn.h's kernels straight from the F16 cells, with the numbers of
 *     matmul's vector path; every such sequence of a step runs in one parallel job per layer;
 *   - a longer chunk of a sequence (a prompt's) runs on F32 copies of its cells in blocks of
 *     query rows, each block two sgemm calls around its softmax (attn_rows_f32);
 *   - with `reference` every chunk takes the reference's dot orders (tinyBLAS's 16 lanes for a
 *     batch of 2+ tokens, ggml_vec_dot_f16 for one token): scalar and slow, for eval-logits and
 *     the golden tests.
 * Q8_0 cells (the pool's shape.type_k / type_v): K is dotted with the query quantized to Q8_0
 * (once per layer, as the reference quantizes it; the caller then leaves q unrounded), the same
 * integer dots in every strategy (math/attn.h's attn_scores_q8_0_rows; a prompt chunk's too);
 * with Q8_0 V the probabilities stay F32 and V's values are exact in F32. With `reference`, rows
 * over Q8_0 cells are the reference's flash attention (attn_row_reference_fa: an online softmax,
 * cell by cell), which is how the reference computes a quantized cache.
 *
 * Ownership: attn_ctx_create sizes every buffer once (max_tokens entries, sequences of at most
 * n_ctx cells); attn_plan and attn_layer never allocate. The ctx borrows the compute threads
 * (owned by the caller; they outlive the ctx). attn_plan keeps pointers to kv and b: neither may
 * change until the step's last attn_layer.
 *
 *   struct attn_params ap = {.n_head = 9, .n_head_kv = 3, .head_dim = 64, .scale = 1.0f / sqrtf(64.0f)};
 *   struct attn_ctx *a;  attn_ctx_create(&a, &ap, 512, 4096, false, compute);   // once
 *   ... memory_reserve(mem, b) placed the batch ...
 *   attn_plan(a, kv, b);                                    // once per forward pass
 *   for (l = 0; l < n_layer; l++) {
 *       ... q = rope(Wq x), rounded to F16; K, V of b's entries stored to their cells ...
 *       attn_layer(a, &ap, l, q, out);                       // out: [n_tokens][n_head * head_dim]
 *   }
 *   attn_ctx_destroy(a);
 *
 * Shapes: q and out are [b->n_tokens][n_head * head_dim], query head h in columns
 * [h * head_dim, (h + 1) * head_dim). Over F16 K cells q holds values exact in F16 (the caller
 * rounds them, as the F16 cells see the query: every strategy then multiplies the same numbers).
 */
#ifndef UVLM_MODEL_ATTENTION_H
#define UVLM_MODEL_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/batch.h"
#include "math/matmul.h"
#include "memory/kv.h"

/* One layer's attention. The head shape (n_head, n_head_kv, head_dim) and the window are the
 * ctx's, fixed at creation (attn_plan lists the cells a window leaves visible); the scale may
 * differ from layer to layer. */
struct attn_params {
    int32_t n_head;
    int32_t n_head_kv;  /* divides n_head */
    int32_t head_dim;
    float scale;        /* of the scores before the softmax: 1 / sqrt(head_dim) for llama */
    /* Sliding window (0: none): an entry at position p attends only to the cells at positions
     * p - window < pos <= p (the reference's standard sliding window; Gemma's local layers). */
    int32_t window;
};

struct attn_ctx;

/* 0, -ERR_NOMEM or -ERR_INVAL (a head shape that does not divide). `reference`: the
 * reference's dot orders (forward_config.reference). */
int attn_ctx_create(struct attn_ctx **out, const struct attn_params *p, int32_t max_tokens, int64_t n_ctx,
                    bool reference, struct compute *c);
void attn_ctx_destroy(struct attn_ctx *a);
size_t attn_ctx_bytes(const struct attn_ctx *a);

/* Once per forward pass, after memory_reserve placed b in kv (kv->n_placed == b->n_tokens, no
 * sequence of b holding more than n_ctx cells): groups b's entries by sequence and lists the
 * cells of the decode-sized sequences (they do not change between layers). */
void attn_plan(struct attn_ctx *a, const struct kv_memory *kv, const struct batch *b);

/* Layer `layer`'s attention of every entry of the planned batch: out from q (shapes above). */
void attn_layer(struct attn_ctx *a, const struct attn_params *p, int32_t layer, const float *q, float *out);

#endif
