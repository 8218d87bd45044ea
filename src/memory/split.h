/* split.h: one memory.h memory made of two, each holding some of a model's layers — Gemma 3's
 * full-attention layers in one KV pool and its sliding-window layers in a windowed one
 * (memory/kv.h's shape.window), or a hybrid model's attention and recurrent layers.
 *
 * Both halves see every operation with the same sequence ids: memory_reserve places the batch in
 * both, seq_rm / seq_cp / save / restore apply to both, so preemption and prefix sharing work as
 * on one memory. An operation either succeeds in both halves or changes neither: the second
 * half's refusal undoes what the first did (a reserve's entries are removed again from the first:
 * the first half must support removing a sequence's tail, as kv.c does), and a save or restore
 * that fails in one half leaves nothing behind in the other.
 *
 * Counting: the first half is the one counted, the one that grows with every token (the
 * full-attention layers' cells): memory_usage's cells, memory_seq_cells, memory_seq_cells_own and
 * memory_cells_held are its own. The second is sized by its creator: to hold what the first's
 * cells imply (a window per sequence, kv_window_cells), or a budget of its own (a hybrid's
 * states, memory_usage's states_*); memory_cells_needed and
 * memory_restore_cells_needed are the first's need plus any shortfall of the second's free cells
 * against its own need, so that the scheduler waits (or evicts prompt cache) rather than admit
 * work the second half cannot take. When it runs short anyway, memory_reserve fails as a whole
 * with -ERR_NOMEM and the scheduler makes room as on a full memory. memory_usage's bytes and
 * states (a hybrid's recurrent half's) are both halves'.
 *
 * Capabilities: partial_removal when both halves have it (a windowed KV pool has it, refusing the
 * removals and prefix copies its window makes impossible: -ERR_UNSUPPORTED, nothing changed, and
 * the scheduler recomputes; memory_seq_prefix_min is the larger of the halves'); fixed_seq_cells
 * is the first half's.
 *
 * Layers: layer l of the model lives in half split_layer_half(m, l), as that half's layer
 * split_layer_index(m, l) (the layers of a half are numbered in model order).
 *
 * Ownership: split_memory_create takes both halves (memory_destroy of the split destroys them,
 * also when the creation fails) and copies the layer map. Snapshots from memory_seq_save hold
 * one snapshot of each half, freed by memory_snapshot_free.
 *
 *   struct memory *global, *local, *mem;
 *   kv_memory_create(&global, &(struct kv_shape){.n_layer = 1, ...}, 4096, 64);
 *   kv_memory_create(&local, &(struct kv_shape){.n_layer = 5, ..., .window = 512},
 *                    kv_window_cells(4096, 64, 512, 512), 64);
 *   const uint8_t half[6] = {1, 1, 1, 1, 1, 0};          // layer 5 global, 0-4 windowed
 *   if (split_memory_create(&mem, global, local, 6, half) < 0) ...;
 *   memory_reserve(mem, &batch);                          // then the forward pass reads
 *   struct kv_memory *kv = kv_from_memory(split_half(mem, split_layer_half(mem, l)));
 *   ... layer l's K/V rows: kv_k_row(kv, split_layer_index(mem, l), cell) ...
 *   memory_destroy(mem);
 */
#ifndef UVLM_MEMORY_SPLIT_H
#define UVLM_MEMORY_SPLIT_H

#include <stdint.h>

#include "memory/memory.h"

/* 0, -ERR_INVAL (halves with different n_seq_max, a layer map naming a half other than 0 or 1,
 * n_layer < 1) or -ERR_NOMEM. Either way first and second belong to the split from now on. */
int split_memory_create(struct memory **out, struct memory *first, struct memory *second, int32_t n_layer,
                        const uint8_t *layer_half);

/* Half h (0: first, 1: second) of a split memory; NULL when m is another kind. */
struct memory *split_half(struct memory *m, int h);
/* Of a split memory: the half holding model layer l (0 <= l < n_layer), and l's index among that
 * half's layers. */
int split_layer_half(const struct memory *m, int32_t l);
int32_t split_layer_index(const struct memory *m, int32_t l);

#endif
