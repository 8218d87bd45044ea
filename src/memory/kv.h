/* kv.h: the attention implementation of memory.h — a unified pool of KV cells.
 *
 * The pool holds n_cells token cells shared by every sequence (the --kv-tokens budget). A cell
 * is either free or holds one position and a *set* of sequence ids (a bitset of n_seq_max bits):
 * sequences that share a prompt prefix share its cells (memory_seq_cp adds a sequence id to the
 * cells, it copies no K/V). Per layer, each cell stores K and V of its token as rows of n_embd_k
 * and n_embd_v elements (n_head_kv * head_dim) of the shape's cell types: F16, or Q8_0 in the
 * GGUF block layout (blocks of 32 values along the head dimension, each with one F16 scale: 34
 * bytes per 32 values, so a Q8_0 cell takes 17/32 of an F16 one). The forward pass quantizes a
 * step's K and V rows when it writes them (quant_from_float) and the attention kernels read the
 * blocks as stored (math/attn.h). A cell is freed when its last sequence leaves it.
 *
 * Attention mask, by construction: a batch entry of sequence s at position p attends to every
 * cell that holds s at a position <= p (causal within a sequence, nothing across sequences).
 * kv_cell_visible() states that rule; the forward pass applies it to the cells kv_seq_cell_list
 * gives for s, at positions <= p (model/attention.h).
 *
 * Sliding window (shape->window = W > 0: the pool of a model's sliding-window layers, whose query
 * at position p only sees positions p - W < pos <= p): a sequence keeps the cells of its last W
 * positions, pos_max - W < pos <= pos_max (the next token needs W - 1 of them; one more lets a
 * sequence give back its last token and run it again). Older cells no query of that sequence can
 * see again are released at the start of every memory_reserve (not later: the forward pass of
 * the batch just reserved still reads them), so between steps a sequence holds at most W cells
 * plus its last batch's entries, and memory_seq_save leaves them out. What the window released is
 * gone, and the memory says so: memory_seq_rm of a sequence's tail from p0 on, and memory_seq_cp
 * of a prefix [.., p1) of a longer sequence, need the cells of the W - 1 positions before p0 (p1)
 * and return -ERR_UNSUPPORTED, nothing changed, when the window released any of them (the
 * scheduler then recomputes instead of reusing the prefix). memory_cells_needed(seq, n) counts
 * the cells seq will keep more (at most W - what it holds; a batch's entries beyond that are held
 * until the next reserve). kv_window_cells gives the pool size that never runs short.
 *
 * Bookkeeping-only configuration: with shape == NULL (or shape->n_layer == 0) no K/V is stored;
 * every operation works on cells, positions and sequence sets alone. The scheduler's unit tests
 * use this without any model.
 *
 * Reserve and forward: memory_reserve(mem, b) places every entry of b in a free cell (all or
 * nothing), marks the cell with the entry's position and sequence, and remembers the placement
 * (kv_batch_cell) for the model_forward() of that same batch, which writes K/V into those cells.
 * Rules checked by reserve (-ERR_INVAL, nothing changed): sequence ids in [0, n_seq_max), and each
 * entry's position greater than every position its sequence already holds (remove with seq_rm
 * before re-evaluating positions). Full pool: -ERR_NOMEM, nothing changed.
 *
 * Preemption: memory_seq_save copies every cell of the sequence to the host; memory_seq_restore
 * puts back, without copying, the cells that still live shared with other sequences (a choice of
 * an n > 1 request shares its prompt's cells with its siblings: it shares them again after its
 * resume) and copies the rest into free cells; memory_restore_cells_needed says how many.
 *
 * Ownership: everything is allocated once by kv_memory_create (sized from the shape, see
 * memory_usage().bytes to log it) and freed by memory_destroy. Nothing allocates afterwards
 * except memory_seq_save (the snapshot, owned by the caller until memory_snapshot_free).
 * Not thread-safe: one owner calls the operations; the forward pass runs between them.
 *
 *   struct kv_shape shape = {.n_layer = 22, .n_embd_k = 256, .n_embd_v = 256};
 *   struct memory *mem;
 *   if (kv_memory_create(&mem, &shape, 4096, 8) < 0) ...;
 *   memory_reserve(mem, &batch);          // then model_forward(...) for that batch
 *   memory_seq_cp(mem, 0, 1, 0, -1);      // sequence 1 shares sequence 0's prefix
 *   memory_seq_rm(mem, 0, 0, -1);         // sequence 1 still sees the cells
 *   memory_destroy(mem);
 */
#ifndef UVLM_MEMORY_KV_H
#define UVLM_MEMORY_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "memory/memory.h"

/* The type of the K or the V rows of the cells (--kv-type, --kv-type-k, --kv-type-v). */
enum kv_type { KV_F16, KV_Q8_0 };

/* "f16", "q8_0". */
const char *kv_type_name(enum kv_type t);
/* 0 and *out, or -ERR_INVAL for a name that is not one of kv_type_name's. */
int kv_type_parse(const char *name, enum kv_type *out);
/* GGML_TYPE_F16 or GGML_TYPE_Q8_0 (gguf/types.h): what quant.h converts rows with. */
int kv_type_ggml(enum kv_type t);
/* Bytes of a row of n elements (n a multiple of 32 for Q8_0). */
size_t kv_type_row_bytes(enum kv_type t, int64_t n);

struct kv_shape {
    int32_t n_layer;   /* 0: bookkeeping only, no K/V stored */
    int32_t n_embd_k;  /* elements of K per token per layer (n_head_kv * head_dim_k) */
    int32_t n_embd_v;  /* elements of V per token per layer */
    int32_t window;    /* sliding window in positions (0: every position is kept; see above) */
    enum kv_type type_k, type_v; /* KV_F16 (the zero value) or KV_Q8_0 (n_embd a multiple of 32) */
};

/* Read-only for everyone but kv.c; exposed so the forward pass can use the inline accessors. */
struct kv_memory {
    struct memory base;         /* base.ops->kind == "kv" */
    struct kv_shape shape;
    int64_t n_cells;
    int32_t n_words;            /* uint64_t words of one cell's sequence set */
    int32_t *pos;               /* [n_cells] position, -1 when free */
    uint32_t *life;             /* [n_cells] how many times the cell was freed (snapshots' test of "the same rows") */
    uint64_t *seqs;             /* [n_cells * n_words] sequence set of each cell */
    int64_t n_used;             /* cells holding at least one sequence */
    int64_t head;               /* where the next free-cell search starts */
    int32_t *seq_pos_max;       /* [n_seq_max] largest position held, -1 when none */
    int32_t *seq_lost;          /* [n_seq_max] largest position the window released, -1 when none */
    int64_t *seq_n_cells;       /* [n_seq_max] cells held */
    int32_t *placed;            /* [n_cells] cell of each entry of the last reserved batch */
    int32_t n_placed;           /* entries of the last reserved batch */
    size_t k_row, v_row;        /* bytes of one cell's K / V row in a layer */
    uint8_t *k;                 /* [n_layer][n_cells] K rows of type_k, NULL when bookkeeping only */
    uint8_t *v;                 /* [n_layer][n_cells] V rows of type_v */
};

/* 0 or -ERR_INVAL (bad sizes, a Q8_0 row not a multiple of 32) / -ERR_NOMEM. shape may be NULL
 * (bookkeeping only). */
int kv_memory_create(struct memory **out, const struct kv_shape *shape, int64_t n_cells, int32_t n_seq_max);

/* The kv memory behind m, or NULL when m is another kind. */
struct kv_memory *kv_from_memory(struct memory *m);

/* Cell assigned to entry i of the batch last passed to memory_reserve. */
static inline int32_t kv_batch_cell(const struct kv_memory *kv, int32_t i) { return kv->placed[i]; }

static inline bool kv_cell_has_seq(const struct kv_memory *kv, int64_t cell, int32_t seq) {
    return (kv->seqs[cell * kv->n_words + seq / 64] >> (seq % 64)) & 1;
}

/* The attention mask: may an entry of seq at position pos attend to cell? */
static inline bool kv_cell_visible(const struct kv_memory *kv, int64_t cell, int32_t seq, int32_t pos) {
    return kv->pos[cell] >= 0 && kv->pos[cell] <= pos && kv_cell_has_seq(kv, cell, seq);
}

/* K / V row of a cell in a layer: n_embd_k / n_embd_v values of type_k / type_v (k_row / v_row
 * bytes; F16 rows are uint16_t, Q8_0 rows blocks of math/blocks.h's block_q8_0). */
static inline void *kv_k_row(const struct kv_memory *kv, int32_t layer, int64_t cell) {
    return kv->k + ((int64_t)layer * kv->n_cells + cell) * (int64_t)kv->k_row;
}
static inline void *kv_v_row(const struct kv_memory *kv, int32_t layer, int64_t cell) {
    return kv->v + ((int64_t)layer * kv->n_cells + cell) * (int64_t)kv->v_row;
}

/* Write to out[0..cap) the cells holding seq (ascending cell order); returns their count
 * (<= n_cells), or -ERR_TOOBIG when more than cap cells hold seq: then out[0..cap) holds the
 * first cap of them and nothing past out[cap - 1] was written (a caller that sized out from
 * seq_n_cells asserts the count it expected rather than finding the overrun later). The forward
 * pass lists each batch sequence's cells with this. */
int64_t kv_seq_cell_list(const struct kv_memory *kv, int32_t seq, int32_t *out, int64_t cap);

/* Keep only seq: every other sequence leaves every cell (like llama.cpp's seq_keep). */
void kv_seq_keep(struct kv_memory *kv, int32_t seq);

/* Cells a pool with a window of `window` positions needs beside a pool of n_cells tokens without
 * one (memory/split.h): every one of n_seq_max sequences holding a whole window, and the entries
 * of a batch of up to max_batch tokens on top; never more than n_cells (no sequence holds more
 * cells there than in the other pool). */
int64_t kv_window_cells(int64_t n_cells, int32_t n_seq_max, int32_t window, int32_t max_batch);

#endif
