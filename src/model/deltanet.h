/* deltanet.h (private to src/model): the gated delta-net layer of the hybrid transformers
 * (qwen35: three of them per full-attention layer), over a recurrent state per sequence
 * (memory/recurrent.h, the second half of the model's split memory, memory/split.h).
 *
 * With H_k q/k heads and H_v v heads of D dims (struct delta_net_desc; v head h reads q/k head
 * h % H_k), C = 2 H_k D + H_v D conv channels, for each entry t of a sequence:
 *   (q, k, v) = silu(conv1d(W_qkv x_t))        causal depthwise conv of d_conv taps over the
 *                                               last d_conv - 1 inputs (conv state) and this one
 *   q, k      = l2norm(q), l2norm(k) per head   x / max(|x|, eps); q then times 1/sqrt(D)
 *   beta      = sigmoid(W_beta x_t)             one per v head
 *   g         = ssm_a * softplus(W_alpha x_t + dt_bias)   (ssm_a = -exp(A_log) < 0: a decay)
 *   S_h       = e^g S_h + beta (v_h - e^g S_h k) k^T       S_h: D x D, maps k to v (the delta rule)
 *   o_h       = S_h q
 *   y         = W_out (rmsnorm(o_h) * ssm_norm * silu(z_h), heads side by side),  z = W_z x_t
 * S_h is stored row j = v dim j over the k dims (D x D F32 per head, the ssm state).
 *
 * Chunked form: a sequence's entries of one batch run in chunks of up to DELTANET_CHUNK tokens,
 * each as matrix products. With G_t the decay summed over the chunk up to t, the state at the
 * chunk's start S0 and u_t = beta_t (v_t - e^g_t S_{t-1} k_t):
 *   u_t = beta_t (v_t - e^G_t S0 k_t - sum_{s<t} e^(G_t - G_s) (k_s . k_t) u_s)   (forward substitution)
 *   o_t = e^G_t S0 q_t + sum_{s<=t} e^(G_t - G_s) (k_s . q_t) u_s
 *   S   = e^G_n S0 + sum_s e^(G_n - G_s) u_s k_s^T
 * exactly the recurrence above (a one-token chunk, a decode step, is its step). Every factor
 * e^(G_t - G_s) with s <= t is <= 1. The state is carried from chunk to chunk and batch to batch.
 * Work splits over (sequence, v head) pairs; the other steps over rows or channels. A sequence's
 * numbers depend on how its tokens were chunked only through float rounding (the golden tests
 * run a prompt whole and in chunks of 7 against the same reference).
 *
 * Ownership: deltanet_ctx_create sizes every buffer once for max_tokens entries; deltanet_layer
 * never allocates. It borrows the compute (the caller's, which outlives the ctx).
 *
 *   struct deltanet_ctx *d;   deltanet_ctx_create(&d, &m->hp, 512, compute);
 *   ... memory_reserve placed the batch: every sequence of b holds a state ...
 *   deltanet_layer(d, m, &m->layers[l], rec, split_layer_index(mem, l), b, xn, out, reference);
 *   deltanet_ctx_destroy(d);
 */
#ifndef UVLM_MODEL_DELTANET_H
#define UVLM_MODEL_DELTANET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/batch.h"
#include "math/matmul.h"
#include "memory/recurrent.h"
#include "model/model.h"

enum { DELTANET_CHUNK = 64 };

struct deltanet_ctx;

/* Conv channels (q, k, v) and the v width of a layer of this shape. */
static inline int64_t deltanet_channels(const struct delta_net_desc *d) {
    return (int64_t)(2 * d->n_k_heads + d->n_v_heads) * d->head_dim;
}
static inline int64_t deltanet_v_width(const struct delta_net_desc *d) {
    return (int64_t)d->n_v_heads * d->head_dim;
}

/* The recurrent state of n_layer such layers (per sequence: conv inputs and the heads' S). */
struct recurrent_shape deltanet_state_shape(const struct delta_net_desc *d, int32_t n_layer);

/* 0, -ERR_NOMEM or -ERR_INVAL (a shape without heads). */
int deltanet_ctx_create(struct deltanet_ctx **out, const struct model_hparams *hp, int32_t max_tokens,
                        struct compute *c);
void deltanet_ctx_destroy(struct deltanet_ctx *d);
size_t deltanet_ctx_bytes(const struct deltanet_ctx *d);

/* out[t] = the layer's y for entry t of b (rows of n_embd), from xn (rows of n_embd: the
 * layer's normalized input); the states of b's sequences in layer `layer` of r advance by their
 * entries. The caller checked that every sequence of b holds a state up to its last entry (it
 * was reserved). `reference`: the matmuls by MATMUL_REFERENCE (forward_config.reference). */
void deltanet_layer(struct deltanet_ctx *d, const struct model *m, const struct model_layer *L,
                    struct recurrent_memory *r, int32_t layer, const struct batch *b, const float *xn, float *out,
                    bool reference);

#endif
