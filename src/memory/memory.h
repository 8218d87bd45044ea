/* memory.h: what a model remembers of each sequence, behind one interface with three
 * implementations: attention KV cells (memory/kv.c, optionally keeping only a sliding window of
 * each sequence), recurrent state (memory/recurrent.c), and a split of a model's layers over two
 * of those (memory/split.c: Gemma 3's full-attention and sliding-window layers; a hybrid's
 * attention cells and recurrent states, e.g. Qwen3.5's).
 *
 * The serving engine only talks to this interface. Sequence ids are small integers
 * in [0, n_seq_max); a sequence "exists" in memory from the first batch placed for it until
 * seq_rm removes it. Capabilities an implementation lacks are reported, never faked:
 * a recurrent state cannot drop positions from the middle or end, so its seq_rm of a partial
 * range returns -ERR_UNSUPPORTED and the engine recomputes instead; a sliding window's pool
 * refuses the same way the removals and prefix copies that need cells its window released.
 *
 * Ownership: the memory owns its pool (sized once at creation from the config, logged).
 * A snapshot from seq_save is owned by the caller until memory_snapshot_free.
 *
 *   struct memory *mem;             // the model picks the kind: model_memory_create (model/model.h)
 *   if (kv_memory_create(&mem, &(struct kv_shape){.n_layer = 22, .n_embd_k = 256, .n_embd_v = 256},
 *                        n_cells, n_seq_max) < 0) ...;
 *   if (memory_reserve(mem, &batch) == -ERR_NOMEM) { ... preempt a sequence, retry ... }
 *   model_forward(model, fc, mem, &batch);
 *   memory_seq_rm(mem, seq, 0, -1);   // sequence finished: free its cells
 *   memory_destroy(mem);
 */
#ifndef UVLM_MEMORY_H
#define UVLM_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/batch.h"

struct memory;
struct memory_snapshot; /* host copy of one sequence's memory; implementation-defined */

struct memory_usage {
    int64_t cells_total;  /* pool size: tokens (kv) or sequence states (recurrent) */
    int64_t cells_used;   /* cells referenced by at least one sequence */
    size_t bytes;         /* bytes of the pool */
    /* Fixed-size sequence states (a recurrent memory's cells, a split's recurrent half's; 0 for
     * KV cells alone): every sequence holding anything holds exactly one, so a sequence that
     * holds nothing needs a free one before it can run (the scheduler counts them beside cells). */
    int64_t states_total, states_used;
};

struct memory_ops {
    const char *kind;       /* "kv" or "recurrent" */
    /* seq_rm of a range that is not the whole sequence works, and seq_cp of a prefix (a
     * windowed KV pool still refuses those needing cells its window released, kv.h) */
    bool partial_removal;
    /* A sequence holds the same cells whatever its length (a recurrent state: one cell, copied
     * whole by seq_cp and seq_save). Such a memory never runs out as sequences grow, so memory
     * pressure never preempts anything; the scheduler time-slices its cells instead when work
     * waits for one (sched.h), since a save is one bounded copy. */
    bool fixed_seq_cells;
    /* Make room for every entry of b (all-or-nothing): -ERR_NOMEM and nothing changed when the
     * free cells are not enough. On success the forward pass may write the batch's entries. */
    int (*reserve)(struct memory *m, const struct batch *b);
    /* Free cells needed to add n_new tokens to seq (for admission and preemption decisions). */
    int64_t (*cells_needed)(const struct memory *m, int32_t seq, int32_t n_new);
    /* Remove seq from positions [p0, p1) (p1 < 0: to the end). -ERR_UNSUPPORTED when the
     * implementation cannot remove that range. */
    int (*seq_rm)(struct memory *m, int32_t seq, int32_t p0, int32_t p1);
    /* dst shares src's memory for positions [p0, p1) (no copy for kv cells; a state copy for
     * recurrent). dst must be empty in that range (from p0 on, for a split memory).
     * -ERR_UNSUPPORTED, nothing changed, when dst could not go on from p1 with what it would
     * get (a prefix of a recurrent state; a prefix past what a window still holds). */
    int (*seq_cp)(struct memory *m, int32_t src, int32_t dst, int32_t p0, int32_t p1);
    /* Largest position held for seq, or -1 when it holds none. */
    int32_t (*seq_pos_max)(const struct memory *m, int32_t seq);
    /* Cells seq holds (shared cells count for each holder). */
    int64_t (*seq_cells)(const struct memory *m, int32_t seq);
    void (*usage)(const struct memory *m, struct memory_usage *u);
    /* Copy seq's memory to host memory (the caller then seq_rm's it to free the cells), and put it
     * back later (needs restore_cells_needed free cells: -ERR_NOMEM otherwise, nothing changed). */
    int (*seq_save)(struct memory *m, int32_t seq, struct memory_snapshot **out);
    int (*seq_restore)(struct memory *m, int32_t seq, const struct memory_snapshot *s);
    void (*snapshot_free)(struct memory_snapshot *s);
    void (*destroy)(struct memory *m);
    /* Cells seq alone holds: what removing the whole sequence would free (0 when every cell it
     * holds is shared with another sequence). */
    int64_t (*seq_cells_own)(const struct memory *m, int32_t seq);
    /* Free cells seq_restore of s into seq needs now (fewer than s holds when some of its cells
     * are still there, shared with other sequences, and are taken back as they are). */
    int64_t (*restore_cells_needed)(const struct memory *m, int32_t seq, const struct memory_snapshot *s);
    /* The shortest prefix [0, p) of seq that another sequence can share (seq_cp) and go on from,
     * as seq itself can after seq_rm(seq, p, -1): 0 when any (a KV pool), seq_pos_max + 1 when
     * only the whole (a recurrent state), from where a window still holds what position p needs
     * (a windowed KV pool, kv.h). The whole sequence always qualifies. NULL: by partial_removal. */
    int32_t (*seq_prefix_min)(const struct memory *m, int32_t seq);
    /* Cells held by at least one sequence s with seqs[s] set (seqs: n_seq_max flags), shared
     * cells counted once: e.g. the cells live sequences keep, apart from the prompt cache's. */
    int64_t (*cells_held)(const struct memory *m, const bool *seqs);
};

/* Every implementation embeds this first. */
struct memory {
    const struct memory_ops *ops;
    int32_t n_seq_max;
};

static inline int memory_reserve(struct memory *m, const struct batch *b) { return m->ops->reserve(m, b); }
static inline int64_t memory_cells_needed(const struct memory *m, int32_t seq, int32_t n) { return m->ops->cells_needed(m, seq, n); }
static inline int memory_seq_rm(struct memory *m, int32_t seq, int32_t p0, int32_t p1) { return m->ops->seq_rm(m, seq, p0, p1); }
static inline int memory_seq_cp(struct memory *m, int32_t src, int32_t dst, int32_t p0, int32_t p1) { return m->ops->seq_cp(m, src, dst, p0, p1); }
static inline int32_t memory_seq_pos_max(const struct memory *m, int32_t seq) { return m->ops->seq_pos_max(m, seq); }
static inline int64_t memory_seq_cells(const struct memory *m, int32_t seq) { return m->ops->seq_cells(m, seq); }
static inline int64_t memory_seq_cells_own(const struct memory *m, int32_t seq) { return m->ops->seq_cells_own(m, seq); }
static inline void memory_usage(const struct memory *m, struct memory_usage *u) { m->ops->usage(m, u); }
static inline int memory_seq_save(struct memory *m, int32_t seq, struct memory_snapshot **out) { return m->ops->seq_save(m, seq, out); }
static inline int memory_seq_restore(struct memory *m, int32_t seq, const struct memory_snapshot *s) { return m->ops->seq_restore(m, seq, s); }
static inline void memory_snapshot_free(struct memory *m, struct memory_snapshot *s) { m->ops->snapshot_free(s); }
static inline int64_t memory_restore_cells_needed(const struct memory *m, int32_t seq, const struct memory_snapshot *s) { return m->ops->restore_cells_needed(m, seq, s); }
static inline int64_t memory_cells_held(const struct memory *m, const bool *seqs) { return m->ops->cells_held(m, seqs); }
static inline void memory_destroy(struct memory *m) { if (m) m->ops->destroy(m); }
static inline int32_t memory_seq_prefix_min(const struct memory *m, int32_t seq) {
    if (m->ops->seq_prefix_min) return m->ops->seq_prefix_min(m, seq);
    return m->ops->partial_removal ? 0 : m->ops->seq_pos_max(m, seq) + 1;
}

#endif
