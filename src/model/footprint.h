/* footprint.h: the memory a model would take to serve, from its GGUF metadata alone (no weight is
 * read): what the server checks before it commits any (sched/model_engine.c) and what
 * `uvlm inspect` prints (cmd/inspect.c). One estimate, so the two always agree.
 *
 *   weights  the whole file: the load reads it into memory (gguf_open_resident)
 *   kv       K and V of every full-attention layer for kv_tokens cells (of the config's cell
 *            types, F16 or Q8_0, as memory/kv.h keeps them, with the cells' bookkeeping); of the sliding-window layers (Gemma 3's local
 *            layers) for the cells their window pool has (kv_window_cells: a window per
 *            sequence, not kv_tokens); plus the recurrent layers' states (F32, memory/recurrent.h),
 *            one per sequence or recurrent_states of them; exact for the memories uvlm has
 *   buffers  the forward pass's activations, attention scratch, logits and sampling buffers for
 *            steps of batch_tokens tokens: an estimate of what the architecture allocates
 *            (test/model/footprint_test.c holds it to within a quarter of the real figure)
 *
 *   struct gguf_file f;  gguf_open(&f, "m.gguf", why, sizeof why);   // a mapping: nothing is read
 *   struct model_footprint fp;
 *   if (model_footprint(&f, &(struct footprint_config){.kv_tokens = 4096, .batch_tokens = 512,
 *                                                      .n_seq_max = 64}, &fp, why, sizeof why) < 0) ...
 *   if (model_footprint_fits(&fp, hugemem_available(), why, sizeof why) < 0) ... why names the sizes
 *   gguf_close(&f);
 */
#ifndef UVLM_MODEL_FOOTPRINT_H
#define UVLM_MODEL_FOOTPRINT_H

#include <stddef.h>
#include <stdint.h>

#include "memory/kv.h"

struct gguf_file;

/* The serving settings the memory depends on (the server's flags of the same names). */
struct footprint_config {
    int64_t kv_tokens;        /* KV cells shared by all sequences */
    int32_t batch_tokens;     /* most tokens per step */
    int32_t n_seq_max;        /* sequence ids */
    int32_t max_seq_tokens;   /* per-sequence limit below the model's context (0: none) */
    int32_t recurrent_states; /* a recurrent or hybrid model's states (0: one per sequence id) */
    int32_t extra_outputs;    /* logits rows a step may have beyond one per sequence (drafts) */
    enum kv_type type_k, type_v; /* the cells' K and V rows (F16: the zero value) */
};

/* The shape as the metadata gives it. Per-layer values (head_count_kv, feed_forward_length may
 * be arrays) are given as their largest. */
struct model_shape {
    char arch[32];
    int32_t n_layer, n_embd, n_head, n_head_kv, head_dim_k, head_dim_v, n_ff, n_vocab;
    int64_t n_ctx_train;
    int32_t n_attn_layers;      /* layers with K/V cells */
    int32_t n_recurrent_layers; /* layers with a recurrent state instead */
    int32_t sliding_window;     /* attention.sliding_window (0: none) */
    int32_t n_swa_layers;       /* attention layers with that window (model_layer_window) */
    int32_t ssm_inner, ssm_state, ssm_conv; /* the recurrent layers' widths (ssm.*), 0 without */
    uint64_t kv_cell_bytes;     /* K and V of one token over the attention layers, of the config's types */
    uint64_t kv_cell_bytes_swa; /* the part of it in the sliding-window layers */
    uint64_t state_bytes;       /* one sequence's state over the recurrent layers */
};

struct model_footprint {
    struct model_shape shape;
    int64_t n_ctx;     /* tokens a sequence may hold: min(context, kv_tokens, max_seq_tokens) */
    int64_t n_cells;   /* KV cells (0 without attention layers) */
    int64_t n_swa_cells; /* cells of the sliding-window layers' pool (0 without them) */
    int64_t n_states;  /* recurrent states (0 without recurrent layers) */
    uint64_t weights, kv, buffers, total; /* bytes */
};

/* 0, or -ERR_FORMAT with the reason in why when the metadata lacks the shape (no
 * general.architecture, block_count, embedding_length, or vocabulary). */
int model_footprint(const struct gguf_file *f, const struct footprint_config *cfg, struct model_footprint *out,
                    char *why, size_t why_len);

/* model_footprint of the file at path (mapped for its metadata, then closed): -ERR_IO and the
 * others of gguf_open as well. */
int model_footprint_of_path(const char *path, const struct footprint_config *cfg, struct model_footprint *out,
                            char *why, size_t why_len);

/* What --kv-bytes makes of --kv-tokens: into *cells the most cells (16 .. 2^24) whose kv figure,
 * with cfg's other settings (the cell types included), is at most kv_bytes; 0 when not even 16
 * cells fit. A model without attention layers gets 2^24 when its states fit. 0 or the errors of
 * model_footprint_of_path. */
int model_footprint_kv_cells(const char *path, const struct footprint_config *cfg, uint64_t kv_bytes, int64_t *cells,
                             char *why, size_t why_len);

/* 0 when fp->total fits in `available` bytes (or available < 0: unknown); otherwise -ERR_NOMEM
 * and why says how much each part needs against what the machine has, and what to lower. */
int model_footprint_fits(const struct model_footprint *fp, int64_t available, char *why, size_t why_len);

/* The sliding window of layer il of a file of architecture arch (0: the layer attends to every
 * position), the reference's rule: attention.sliding_window for the families with windowed layers
 * (gemma3), on the layers attention.sliding_window_pattern marks (an array of bools, or N: every
 * layer but each N-th, (il + 1) % N != 0), by default the family's pattern (gemma3: 6). What
 * model.c loads and what the memory estimate counts. */
int32_t model_layer_window(const struct gguf_file *f, const char *arch, int32_t il);

/* "12.0 KiB", "512.0 MiB", "3.25 GiB": for messages. Returns out. */
const char *footprint_size(uint64_t bytes, char out[24]);

#endif
