/* arch.h (private to src/model): the implementations behind model.h, reached through a struct
 * arch_impl chosen at load time from general.architecture (model.c's table). llama.c is the one
 * transformer forward pass: a transformer family is a table entry in model.c filling struct
 * transformer_desc (model.h) and, where its tensors differ, the loader; it attends through
 * attention.h. A family of another kind (mamba.c) brings its own file. */
#ifndef UVLM_MODEL_ARCH_H
#define UVLM_MODEL_ARCH_H

#include "model/model.h"

struct arch_impl {
    /* cfg arrives normalized: max_outputs in [1, max_tokens], n_ctx > 0, n_threads > 0. */
    int (*ctx_create)(struct forward_ctx **out, const struct model *m, const struct forward_config *cfg);
    void (*ctx_destroy)(struct forward_ctx *fc);
    size_t (*ctx_bytes)(const struct forward_ctx *fc);
    int (*forward)(const struct model *m, struct forward_ctx *fc, struct memory *mem, const struct batch *b);
    /* mc arrives with max_batch >= 1 */
    int (*memory_create)(const struct model *m, const struct memory_config *mc, struct memory **out);
    bool memory_counts_states; /* memory_create's n_cells are sequence states, not tokens */
    /* Families with their own tensors (mamba): hparams and weights from m->file, and their release.
     * NULL: the transformer loader of model.c. */
    int (*load)(struct model *m, char *why, size_t why_len);
    void (*unload)(struct model *m);
};

extern const struct arch_impl llama_impl;
extern const struct arch_impl mamba_impl; /* model/mamba.c */

#endif
