/* mamba.h: the Mamba-1 architecture ("mamba" in GGUF) and its forward pass over recurrent state.
 *
 * Per layer, for every token t of a sequence (d = d_inner, n = d_state, r = dt_rank):
 *   u        = rmsnorm(h_t) * attn_norm
 *   (x, z)   = ssm_in u                                  x, z: d
 *   x        = silu(conv1d(x) + conv_bias)               causal depthwise conv over the last
 *                                                        d_conv inputs (conv state + x_t)
 *   (dt,B,C) = ssm_x x                                   dt: r, B, C: n
 *   dt       = softplus(ssm_dt dt + dt_bias)             d (softplus(v) = v above 20)
 *   S[c][j]  = S[c][j] * exp(dt[c] * A[c][j]) + dt[c] * B[j] * x[c]     (A = ssm_a = -exp(A_log))
 *   y[c]     = sum_j S[c][j] * C[j] + D[c] * x[c],   y *= silu(z)
 *   h_{t+1}  = h_t + ssm_out y
 * then logits = output(rmsnorm(h) * output_norm), output tied to token_embd when absent.
 * The conv state and S live in a recurrent memory (memory/recurrent.h), one per sequence.
 *
 * Batches: entries of any sequences at their next positions (what memory_reserve accepted); a
 * prompt chunk runs the scan over its tokens, a decode step one token; each entry reads and writes
 * only its own sequence's state, so a batch may mix sequences at different positions. The scan and
 * the convolution are split over channels (compute_parallel_for), the projections use matmul.
 *
 * Through model.h: model_load dispatches general.architecture "mamba" here (mamba_impl in
 * model/arch.h): struct model gets the common fields (n_vocab, n_embd, n_layer, token_embd,
 * output, output_norm) and m->mamba; model_memory_create gives min(n_cells, n_seq_max) states
 * (the pool size is the server's sequence budget: a state per sequence it may hold, live or
 * cached); forward_ctx_create sizes a mamba_scratch and a compute; model_forward runs
 * mamba_forward. The functions below are that implementation's parts, usable on their own.
 *
 * Ownership: mamba_load reads the hyperparameters and points every weight into the gguf_file,
 * which the caller keeps open until mamba_free. A mamba_scratch holds every buffer of the forward
 * pass, sized once for max_tokens entries and max_outputs logit rows: mamba_forward never
 * allocates. One scratch, one compute and one memory are used by one forward at a time.
 *
 *   struct mamba_model *mm;   mamba_load(&mm, &file, why, sizeof why);
 *   struct memory *mem;       mamba_memory_create(mm, n_seqs, n_seqs, &mem);
 *   struct mamba_scratch *s;  mamba_scratch_create(&s, mm, 512, 512);
 *   struct compute *c;        compute_create(&c, 2, 512, mamba_max_n_in(mm));
 *   if (memory_reserve(mem, &b) == 0 && mamba_forward(mm, s, c, mem, &b, logits) == 0)
 *       ... logits[row * n_vocab ...], one row per want_logits entry, in entry order ...
 */
#ifndef UVLM_MODEL_MAMBA_H
#define UVLM_MODEL_MAMBA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/batch.h"
#include "gguf/gguf.h"
#include "math/matmul.h"
#include "memory/memory.h"
#include "model/model.h"

struct mamba_hparams {
    int32_t n_vocab;
    int32_t n_embd;
    int32_t n_layer;
    int32_t d_conv;      /* mamba.ssm.conv_kernel */
    int32_t d_inner;     /* mamba.ssm.inner_size */
    int32_t d_state;     /* mamba.ssm.state_size */
    int32_t dt_rank;     /* mamba.ssm.time_step_rank */
    int32_t n_ctx_train; /* mamba.context_length (informative: the state has no length limit) */
    float rms_eps;       /* mamba.attention.layer_norm_rms_epsilon */
    bool tied_output;    /* no output.weight: logits use token_embd */
};

struct mamba_layer {
    const float *norm;          /* [n_embd] attn_norm */
    struct model_weight in;     /* ssm_in:  n_embd -> 2*d_inner (x then z) */
    const float *conv_w;        /* [d_inner][d_conv] ssm_conv1d.weight, oldest input first */
    const float *conv_b;        /* [d_inner] */
    struct model_weight x;      /* ssm_x:   d_inner -> dt_rank + 2*d_state (dt, B, C) */
    struct model_weight dt;     /* ssm_dt:  dt_rank -> d_inner */
    const float *dt_b;          /* [d_inner] */
    const float *a;             /* [d_inner][d_state] ssm_a, already -exp(A_log) */
    const float *d;             /* [d_inner] ssm_d */
    struct model_weight out;    /* ssm_out: d_inner -> n_embd */
};

struct mamba_model {
    struct mamba_hparams hp;
    struct model_weight token_embd;  /* n_vocab rows of n_embd */
    const float *output_norm;        /* [n_embd] */
    struct model_weight output;      /* n_vocab rows of n_embd (== token_embd when tied) */
    struct mamba_layer *layers;      /* [n_layer], owned */
    size_t weight_bytes;             /* bytes of the weights read per token */
};

struct mamba_scratch;

/* 0, or -ERR_FORMAT / -ERR_UNSUPPORTED (missing or misshapen tensor, bad metadata, a weight type
 * the kernels lack) with a message in why, or -ERR_NOMEM. f must stay open until mamba_free. */
int mamba_load(struct mamba_model **out, const struct gguf_file *f, char *why, size_t why_len);
void mamba_free(struct mamba_model *m);

/* The recurrent memory of this model: n_states states for sequence ids [0, n_seq_max). */
int mamba_memory_create(const struct mamba_model *m, int32_t n_states, int32_t n_seq_max, struct memory **out);

/* The widest matmul input of the forward pass (for compute_create's max_n_in). */
int64_t mamba_max_n_in(const struct mamba_model *m);

/* Buffers for batches of up to max_tokens entries of which up to max_outputs want logits. */
int mamba_scratch_create(struct mamba_scratch **out, const struct mamba_model *m, int32_t max_tokens, int32_t max_outputs);
void mamba_scratch_destroy(struct mamba_scratch *s);
size_t mamba_scratch_bytes(const struct mamba_scratch *s);

/* Compute batch b, which memory_reserve(mem, b) has just accepted, writing one row of n_vocab
 * logits per want_logits entry (entry order) to logits. Returns 0; -ERR_STATE when mem is not a
 * recurrent memory of this shape or an entry's sequence holds no state up to its position (b was
 * not reserved), -ERR_TOOBIG when b exceeds the scratch, -ERR_INVAL for an empty batch or a token
 * outside the vocabulary (checked before any state changes). After another error the states of b's sequences
 * are undefined: seq_rm them.
 * The want_hidden entries' final hidden states (after the output norm) go to mamba_hidden(s),
 * n_embd floats a row in entry order, valid until the next mamba_forward. */
int mamba_forward(const struct mamba_model *m, struct mamba_scratch *s, struct compute *c,
                  struct memory *mem, const struct batch *b, float *logits);
const float *mamba_hidden(const struct mamba_scratch *s);

#endif
