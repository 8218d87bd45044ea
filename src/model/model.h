/* model.h: a GGUF model (the transformer families llama, qwen2, qwen3, phi3 and gemma3, the
 * hybrid qwen35, and mamba) and its forward pass.
 *
 * model_load reads the file and every hyperparameter from its metadata (nothing is guessed from
 * the file name): widths, layers, heads and kv heads (GQA/MQA), RMSNorm epsilon, tied or separate
 * output matrix, and what the family's transformer computes (struct transformer_desc: rope type,
 * bases and scaling, biases, norms; mamba: its own, model/mamba.h). A model of another
 * architecture is refused with -ERR_UNSUPPORTED and its name in `why`. Weights are not copied:
 * each struct model_weight points into the file's memory (gguf_open_resident), which lives until
 * model_free.
 *
 * The forward pass turns a batch (common/batch.h) into logits. Everything it needs is sized once
 * in a struct forward_ctx (one per engine, created for a maximum batch and context), so
 * model_forward never allocates. The memory (KV cells for the transformers, recurrent states for
 * mamba, both for a hybrid: memory/split.h) comes from model_memory_create, so the caller never
 * picks the memory kind itself.
 *
 * Per call, the caller first places the batch in memory, then runs the forward pass:
 *
 *   struct model *m;  char why[256];
 *   if (model_load(&m, "model.gguf", NULL, why, sizeof why) < 0) ... print why ...;
 *   struct memory *mem;          model_memory_create(m, 4096, 4, &mem);       // cells, sequences
 *   struct forward_ctx *fc;      forward_ctx_create(&fc, m, &(struct forward_config){
 *                                    .max_tokens = 512, .n_ctx = 4096, .n_threads = 2});
 *   batch_add(&b, tok, pos, seq, true);  ...
 *   if (memory_reserve(mem, &b) == 0 && model_forward(m, fc, mem, &b) == 0)
 *       ... fc->logits + row * m->hp.n_vocab, one row per want_logits entry, in entry order ...
 *   forward_ctx_destroy(fc); memory_destroy(mem); model_free(m);
 *
 * Threads: model_forward runs on the calling thread and fans out to the ctx's compute threads
 * (math/matmul.h); it may run on any thread (e.g. a uv threadpool worker) as long as one ctx and
 * one memory are used by one forward at a time.
 */
#ifndef UVLM_MODEL_H
#define UVLM_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/batch.h"
#include "gguf/gguf.h"
#include "memory/kv.h"
#include "memory/memory.h"

struct arch_impl;

enum model_arch {
    MODEL_ARCH_LLAMA, MODEL_ARCH_QWEN2, MODEL_ARCH_QWEN3, MODEL_ARCH_PHI3, MODEL_ARCH_MAMBA, MODEL_ARCH_GEMMA3,
    MODEL_ARCH_QWEN35
};
enum rope_type { ROPE_NORM, ROPE_NEOX }; /* rotate pairs (2i, 2i+1) / pairs (i, i + n_rot/2) */
enum ffn_act { FFN_SILU, FFN_GELU_TANH }; /* the gated feed-forward's act(gate) * up */

/* One way of rotating q and k: pair i (< n_rot/2) of a head at position pos turns by
 *   theta_i = freq_scale * (pos * base^(-2i/n_rot) / factors[i])
 * (the reference's rope with frequency factors and linear scaling; dims past n_rot stay). */
struct rope_desc {
    float base;            /* rope.freq_base */
    float freq_scale;      /* 1 / rope.scaling.factor of linear scaling; 1 */
    const float *factors;  /* [n_rot/2] divisors per pair (rope_freqs.weight, Llama 3.1/3.2), or NULL */
};

enum { ROPE_DESC_MAX = 2 };

/* The gated delta-net layers of a hybrid (qwen35's ssm.* metadata; model/deltanet.h): q/k heads,
 * v heads (v head h reads q/k head h % n_k_heads), all of head_dim, and the conv's taps.
 * d_conv == 0: the model has none. */
struct delta_net_desc {
    int32_t d_conv;     /* ssm.conv_kernel */
    int32_t n_k_heads;  /* ssm.group_count */
    int32_t n_v_heads;  /* ssm.time_step_rank */
    int32_t head_dim;   /* ssm.state_size (ssm.inner_size = n_v_heads * head_dim) */
};

/* What the one transformer forward pass (model/llama.c) computes for an architecture, filled by
 * model.c from general.architecture, the metadata and the tensors the file has. The per-layer
 * parts (which rope, attention window, extra norms) are in struct model_layer. */
struct transformer_desc {
    enum rope_type rope_type;
    int32_t n_rope;                        /* distinct ropes of the layers, >= 1 */
    struct rope_desc rope[ROPE_DESC_MAX];  /* model_layer.rope indexes them */
    enum ffn_act act;
    float embd_scale;    /* embeddings multiplied by it (1: as stored) */
    float attn_scale;    /* of q . k: 1 / sqrt(head_dim) */
    bool scale_q;        /* attn_scale multiplies q (before its F16 rounding), not the scores: the
                          * reference's order for families that scale the query (phi3) */
    bool qkv_bias;       /* q/k/v biases (qwen2) */
    bool qk_norm;        /* per-head RMS norms of q and k before rope (attn_q_norm, attn_k_norm) */
    bool fused_qkv;      /* the file holds q, k, v as one attn_qkv: wq/wk/wv are its row ranges */
    bool fused_gate_up;  /* the file's ffn_up holds gate then up: w_gate/w_up are its halves */
    bool attn_gate;      /* wq gives each head's query then its gate (2 x head_dim rows per head);
                          * the attention's output is multiplied by sigmoid(gate) (qwen35) */
    struct delta_net_desc dn; /* the layers with model_layer.recurrent set */
};

struct model_hparams {
    enum model_arch arch;
    const char *arch_name;    /* general.architecture: "llama", "qwen2", "qwen3", "phi3", "gemma3", "qwen35", "mamba" */
    int32_t n_vocab;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;         /* attention.key_length (= value_length), else n_embd / n_head */
    int32_t n_rot;            /* rotated dimensions of each head (rope.dimension_count) */
    int32_t n_ff;
    int32_t n_ctx_train;      /* context_length from the metadata */
    float rms_eps;
    bool tied_output;         /* output matrix is token_embd */
    struct transformer_desc tf; /* the transformer families' computation (not mamba's) */
    const struct arch_impl *impl; /* the architecture's forward pass (model/arch.h) */
};

/* A tensor inside the file's memory. For a matrix: n_out rows of n_in elements of `type`. */
struct model_weight {
    enum ggml_type type;
    const void *data;
    int64_t n_in, n_out;
};

struct model_layer {
    int32_t rope;                           /* index into hp.tf.rope */
    int32_t window;                         /* attend to the last `window` positions; 0: all */
    const float *attn_norm;                 /* [n_embd] */
    struct model_weight wq, wk, wv, wo;     /* n_embd -> n_head*head_dim, -> n_head_kv*head_dim (x2), back */
    const float *bq, *bk, *bv;              /* biases (tf.qkv_bias), NULL otherwise */
    const float *q_norm, *k_norm;           /* [head_dim] (tf.qk_norm), NULL otherwise */
    const float *attn_post_norm;            /* [n_embd] norm of the attention's output, or NULL */
    const float *ffn_norm;                  /* [n_embd] */
    struct model_weight w_gate, w_up, w_down;
    const float *ffn_post_norm;             /* [n_embd] norm of the feed-forward's output, or NULL */
    /* A gated delta-net layer (tf.dn, model/deltanet.h) in place of the attention: its state is
     * in the recurrent half of the model's memory. Then wq..k_norm are unset, and these are: */
    bool recurrent;
    struct model_weight w_qkv;              /* n_embd -> conv channels (q, k, v) */
    struct model_weight w_z;                /* n_embd -> n_v_heads * head_dim (attn_gate) */
    struct model_weight w_beta, w_alpha;    /* n_embd -> n_v_heads */
    struct model_weight ssm_out;            /* n_v_heads * head_dim -> n_embd */
    const float *conv_w;                    /* [channels][d_conv], oldest input's tap first */
    const float *dt_bias, *ssm_a;           /* [n_v_heads] */
    const float *ssm_norm;                  /* [head_dim] */
};

struct model {
    struct gguf_file file;    /* the file in memory: tokenizer_load reads its metadata from here */
    struct model_hparams hp;
    struct model_weight token_embd;         /* n_vocab rows of n_embd */
    const float *output_norm;               /* [n_embd] */
    struct model_weight output;             /* n_vocab rows of n_embd (== token_embd when tied) */
    struct model_layer *layers;             /* [n_layer] */
    struct mamba_model *mamba;              /* MODEL_ARCH_MAMBA: its layers (model/mamba.h), else NULL */
    size_t weight_bytes;                    /* bytes of the weights read per token */
    bool serving_layout;                    /* some Q8_0 / Q5_0 / Q4_K / Q6_K matrices rewritten (model_options.serving_layout) */
};

struct model_options {
    /* Rewrite the Q8_0, Q5_0, Q4_K and Q6_K matrices of the transformer families into math/q8x16.h's
     * layouts where the CPU has its kernels (types UVLM_TYPE_Q8_0_X16, _Q5_0_X16, _Q4_K_X16, _Q6_K_X16):
     * faster at every batch size (a decode step of several sequences most of all), with every
     * token's numbers still independent of its batch, but not the reference's float order
     * (Q4_K's and Q6_K's keep it), so a forward_ctx with `reference` refuses the model.
     * For serving; eval-logits and the golden tests' reference runs load without it. */
    bool serving_layout;
};

/* Whether prompts (16 tokens and more) multiply m's rewritten matrices on AMX tiles on this CPU
 * (math/matmul.h's compute_amx; for the load log). */
bool model_prompts_on_amx(const struct model *m);

/* 0, or -ERR_IO / -ERR_FORMAT / -ERR_UNSUPPORTED (+ message in why). */
int model_load(struct model **out, const char *path, const struct model_options *opt, char *why, size_t why_len);
void model_free(struct model *m);

/* How to size a model's memory (model_memory_create_with). */
struct memory_config {
    int64_t n_cells;      /* tokens shared by all sequences (a recurrent model: sequence states) */
    int32_t n_seq_max;    /* sequence ids */
    int32_t max_batch;    /* most tokens per batch (a sliding window's pool holds one more batch) */
    int32_t n_states;     /* a hybrid's recurrent states, live and cached (0, or more than n_seq_max:
                           * one per sequence id) */
    enum kv_type type_k, type_v; /* the attention cells' K and V rows (memory/kv.h; F16 is 0) */
};

/* The memory this model needs: n_cells tokens shared by up to n_seq_max sequences; for a
 * recurrent model (mamba) min(n_cells, n_seq_max) sequence states (memory/recurrent.h). */
int model_memory_create(const struct model *m, int64_t n_cells, int32_t n_seq_max, struct memory **out);
/* The same for batches of at most max_batch tokens: a model with sliding-window layers then keeps
 * them in a pool of a window per sequence plus one such batch (memory/kv.h's kv_window_cells),
 * where model_memory_create allows for a batch of n_cells. For a server (its --batch-tokens). */
int model_memory_create_batches(const struct model *m, int64_t n_cells, int32_t n_seq_max, int32_t max_batch,
                                struct memory **out);
/* The same with every setting of mc, the cell types included (F16 cells: model_memory_create_batches).
 * -ERR_UNSUPPORTED for Q8_0 cells of a model whose head size is not a multiple of 32 (a Q8_0
 * block must not straddle two heads); a recurrent model has no cells and ignores the types. */
int model_memory_create_with(const struct model *m, const struct memory_config *mc, struct memory **out);
/* Does model_memory_create's n_cells count sequence states (a recurrent model) rather than
 * tokens? Lets a server size each kind from its own budget. */
bool model_memory_counts_states(const struct model *m);
/* The pooling of embeddings the file asks for (<arch>.pooling_type, llama.cpp's numbers: 0 none,
 * 1 mean, 2 cls, 3 last, 4 rank), -1 when it says nothing. */
int32_t model_pooling_type(const struct model *m);
/* The chat template the file carries (tokenizer.chat_template), or NULL with *len 0. Valid until
 * model_free. */
const char *model_chat_template(const struct model *m, size_t *len);

struct forward_config {
    int32_t max_tokens;   /* largest batch (entries) */
    int32_t max_outputs;  /* most want_logits entries per batch; 0: max_tokens */
    int64_t n_ctx;        /* most cells one sequence may hold (the memory's n_cells is always enough) */
    int n_threads;        /* compute threads; <= 0: all cores */
    int64_t yield_us;     /* the threads offer their CPU this often (0: never; math/matmul.h) */
    /* The reference's arithmetic throughout (the transformer families): matmuls by MATMUL_REFERENCE
     * (math/matmul.h) and the attention dots in its orders, so eval-logits reproduces its logits
     * to their printed precision. Scalar and slow (prefill several times slower): for
     * eval-logits and the golden tests, not serving. */
    bool reference;
};

struct forward_ctx {
    struct forward_config cfg;
    float *logits;        /* [max_outputs][n_vocab]: rows of the last batch's want_logits entries */
    int32_t n_outputs;    /* rows written by the last model_forward */
    const float *hidden;  /* [n_hidden][n_embd]: the final hidden states (after the output norm) of
                           * the last batch's want_hidden entries, in entry order; a scratch
                           * buffer of the forward pass, valid until the next model_forward */
    int32_t n_hidden;
    struct forward_scratch *s; /* private buffers of the architecture */
    const struct arch_impl *impl;
};

/* Sizes every buffer of the forward pass once (logged by the caller via forward_ctx_bytes).
 * -ERR_INVAL for cfg->reference on a model loaded with serving_layout. */
int forward_ctx_create(struct forward_ctx **out, const struct model *m, const struct forward_config *cfg);
void forward_ctx_destroy(struct forward_ctx *fc);
size_t forward_ctx_bytes(const struct forward_ctx *fc);

/* Compute batch b, whose entries memory_reserve(mem, b) has just placed. Returns 0;
 * -ERR_STATE when b was not the batch last reserved in mem, -ERR_TOOBIG when it exceeds the ctx
 * (max_tokens, max_outputs, or a sequence holding more than n_ctx cells), -ERR_INVAL for a token
 * id outside the vocabulary. On error the memory cells of b hold no valid K/V: seq_rm them. */
int model_forward(const struct model *m, struct forward_ctx *fc, struct memory *mem, const struct batch *b);

#endif
