/* recurrent.h: the recurrent implementation of memory.h — one fixed-size state per sequence.
 *
 * A recurrent model (Mamba, a hybrid's gated delta-net layers) does not keep an entry per token:
 * after position p, everything it remembers of a sequence is a state of fixed size. Per sequence
 * and per layer that is
 *   conv state: (d_conv - 1) x d_inner F32, the last d_conv-1 inputs of the causal convolution,
 *               row r (0 = oldest) is the conv input at position pos_max - (d_conv-2) + r;
 *   ssm state:  d_inner x d_state F32, the selective-scan state h, row i is channel i (Mamba);
 *               or ssm_floats F32 of the model's own layout when set (a delta-net layer's
 *               n_v_heads matrices of head_v_dim x head_k_dim, model/deltanet.h).
 * The pool holds n_cells such states ("cells"; one per sequence holding a state, live or cached),
 * sized once at creation: model_memory_create gives a mamba model min(n_cells, n_seq_max) states,
 * so the server's sequence budget sizes it (the bytes are n_cells * cell bytes, see
 * memory_usage().bytes to log them). A new sequence starts from the zero state.
 *
 * What the interface reports (memory.h): ops->kind == "recurrent", ops->partial_removal == false,
 * ops->fixed_seq_cells == true (one cell per sequence, however long).
 *   reserve(b)       every sequence of b gets a cell; a sequence without one needs a free cell
 *                    (-ERR_NOMEM, nothing changed, when there are too few). Rules (-ERR_INVAL,
 *                    nothing changed): sequence ids in [0, n_seq_max); a sequence's entries are
 *                    consecutive positions continuing its state (the first is pos_max + 1, which
 *                    is 0 for a new sequence): a state cannot skip or revisit positions.
 *   cells_needed     0 when seq already has a state, else 1 (whatever n_new is).
 *   seq_rm(s,p0,p1)  the whole sequence (p0 <= 0, p1 < 0 or p1 > pos_max): frees its cell.
 *                    Nothing the state depends on (p0 > pos_max, or s holds nothing): no-op, 0.
 *                    Anything else would need a state from before p0, which is gone:
 *                    -ERR_UNSUPPORTED, nothing changed. The engine then recomputes the prompt.
 *   seq_cp(s,d,p0,p1) copies s's state into a new cell for d (n choices and shared prompts fork
 *                    this way). Only whole states copy: p0 <= 0 and (p1 < 0 or p1 > pos_max of s),
 *                    else -ERR_UNSUPPORTED. d must hold nothing (-ERR_INVAL); no free cell:
 *                    -ERR_NOMEM. s holding nothing: no-op, 0.
 *   seq_pos_max      last position processed into the state, -1 when none.
 *   seq_cells        1 when seq has a state, else 0.
 *   usage            cells_total = n_cells states, cells_used = live states.
 *   seq_save/restore a host copy of the state and its position; restore needs a free cell
 *                    (-ERR_NOMEM) and a seq that holds nothing (-ERR_INVAL), nothing changed.
 *
 * Reserve and forward: memory_reserve(mem, b) assigns the cells and advances each sequence's
 * pos_max to its last entry in b; the forward pass of that same batch then reads and updates
 * the states through recurrent_conv_state / recurrent_ssm_state.
 *
 * Bookkeeping-only configuration: shape == NULL (or shape->n_layer == 0) stores no state; every
 * operation works on cells and positions alone (the scheduler's unit tests use this).
 *
 * Ownership: everything is allocated once by recurrent_memory_create and freed by memory_destroy;
 * nothing allocates afterwards except memory_seq_save (the snapshot, owned by the caller until
 * memory_snapshot_free). Not thread-safe: one owner calls the operations; the forward pass runs
 * between them.
 *
 *   struct recurrent_shape shape = {.n_layer = 24, .d_conv = 4, .d_inner = 1536, .d_state = 16};
 *   struct memory *mem;
 *   if (recurrent_memory_create(&mem, &shape, 8, 8) < 0) ...;
 *   memory_reserve(mem, &batch);          // then mamba_forward(...) for that batch
 *   memory_seq_cp(mem, 0, 1, 0, -1);      // sequence 1 continues from sequence 0's state
 *   memory_seq_rm(mem, 0, 5, -1);         // -ERR_UNSUPPORTED if 0 went past position 4
 *   memory_seq_rm(mem, 0, 0, -1);         // frees 0's state
 *   memory_destroy(mem);
 */
#ifndef UVLM_MEMORY_RECURRENT_H
#define UVLM_MEMORY_RECURRENT_H

#include <stdbool.h>
#include <stdint.h>

#include "memory/memory.h"

struct recurrent_shape {
    int32_t n_layer;  /* 0: bookkeeping only, no state stored */
    int32_t d_conv;   /* convolution kernel width (>= 1; the state keeps d_conv - 1 inputs) */
    int32_t d_inner;  /* channels */
    int32_t d_state;  /* SSM state size per channel */
    int64_t ssm_floats; /* floats of one layer's ssm state when not d_inner * d_state; 0: that */
};

/* Read-only for everyone but recurrent.c; exposed so the forward pass can use the accessors. */
struct recurrent_memory {
    struct memory base;         /* base.ops->kind == "recurrent" */
    struct recurrent_shape shape;
    int32_t n_cells;
    int64_t cell_floats;        /* floats of one cell: n_layer * (conv + ssm) */
    int32_t *seq_cell;          /* [n_seq_max] cell of each sequence, -1 when none */
    int32_t *seq_pos_max;       /* [n_seq_max] last position in the state, -1 when none */
    int32_t *cell_seq;          /* [n_cells] sequence owning each cell, -1 when free */
    int32_t n_used;             /* cells owned by a sequence */
    int32_t *next;              /* [n_seq_max] scratch of reserve: next expected position */
    float *states;              /* [n_cells][n_layer][conv floats + ssm floats], NULL if bookkeeping */
};

/* 0 or -ERR_INVAL (bad sizes) / -ERR_NOMEM. shape may be NULL (bookkeeping only). */
int recurrent_memory_create(struct memory **out, const struct recurrent_shape *shape,
                            int32_t n_cells, int32_t n_seq_max);

/* The recurrent memory behind m, or NULL when m is another kind. */
struct recurrent_memory *recurrent_from_memory(struct memory *m);

/* Floats of one layer's conv / ssm state. */
static inline int64_t recurrent_conv_floats(const struct recurrent_shape *s) {
    return (int64_t)(s->d_conv - 1) * s->d_inner;
}
static inline int64_t recurrent_ssm_floats(const struct recurrent_shape *s) {
    return s->ssm_floats > 0 ? s->ssm_floats : (int64_t)s->d_inner * s->d_state;
}

/* The state of seq (which must hold a cell, i.e. be in the last reserved batch) in a layer:
 * conv: [d_conv-1][d_inner], ssm: [d_inner][d_state] (or ssm_floats). */
float *recurrent_conv_state(struct recurrent_memory *r, int32_t seq, int32_t layer);
float *recurrent_ssm_state(struct recurrent_memory *r, int32_t seq, int32_t layer);

#endif
