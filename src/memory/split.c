/* split.c: one memory over two (see split.h). Every operation goes to both halves; the second
 * is asked first where a half may refuse (a windowed pool's removals and copies, a recurrent
 * state's), so a refusal leaves both as they were, and the first then accepts what the second
 * did (a KV pool without a window takes every range of a valid sequence). */
#include "memory/split.h"
#include "common/err.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct split_memory {
    struct memory base;
    struct memory_ops ops;   /* this split's: the capabilities depend on the halves */
    struct memory *half[2];  /* owned */
    int32_t n_layer;
    uint8_t *layer_half;     /* [n_layer] */
    int32_t *layer_index;    /* [n_layer] */
};

struct memory_snapshot {
    const struct memory_ops *ops[2]; /* to free the halves' snapshots */
    struct memory_snapshot *half[2];
};

static int split_reserve(struct memory *m, const struct batch *b);

static struct split_memory *split_of(struct memory *m) { return (struct split_memory *)m; }
static const struct split_memory *split_of_c(const struct memory *m) { return (const struct split_memory *)m; }

static int64_t free_cells(const struct memory *m) {
    struct memory_usage u;
    memory_usage(m, &u);
    return u.cells_total - u.cells_used;
}

/* The first half's count, plus what the second lacks for its own. */
static int64_t with_shortfall(const struct split_memory *sm, int64_t first, int64_t second) {
    int64_t short2 = second - free_cells(sm->half[1]);
    return first + (short2 > 0 ? short2 : 0);
}

static int split_reserve(struct memory *m, const struct batch *b) {
    struct split_memory *sm = split_of(m);
    int rc = memory_reserve(sm->half[0], b);
    if (rc < 0) return rc;
    rc = memory_reserve(sm->half[1], b);
    if (rc < 0) {
        /* the first half takes the batch back: each sequence's entries from its first on */
        for (int32_t i = 0; i < b->n_tokens; i++) {
            bool first = true;
            for (int32_t j = 0; j < i && first; j++) first = b->seq[j] != b->seq[i];
            if (!first) continue;
            int undo = memory_seq_rm(sm->half[0], b->seq[i], b->pos[i], -1);
            ASSERT(undo == 0);
        }
    }
    return rc;
}

static int64_t split_cells_needed(const struct memory *m, int32_t seq, int32_t n_new) {
    const struct split_memory *sm = split_of_c(m);
    return with_shortfall(sm, memory_cells_needed(sm->half[0], seq, n_new),
                          memory_cells_needed(sm->half[1], seq, n_new));
}

static int split_seq_rm(struct memory *m, int32_t seq, int32_t p0, int32_t p1) {
    struct split_memory *sm = split_of(m);
    int rc = memory_seq_rm(sm->half[1], seq, p0, p1);
    if (rc < 0) return rc;
    rc = memory_seq_rm(sm->half[0], seq, p0, p1);
    ASSERT(rc == 0); /* the first takes every range the second took (split.c's header) */
    return rc;
}

static int split_seq_cp(struct memory *m, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    struct split_memory *sm = split_of(m);
    if (src == dst) return 0;
    /* dst holds nothing from p0 on (so no half can refuse it for that after the other took it) */
    if (dst < 0 || dst >= m->n_seq_max || memory_seq_pos_max(sm->half[0], dst) >= (p0 > 0 ? p0 : 0))
        return -ERR_INVAL;
    int rc = memory_seq_cp(sm->half[1], src, dst, p0, p1);
    if (rc < 0) return rc;
    rc = memory_seq_cp(sm->half[0], src, dst, p0, p1);
    ASSERT(rc == 0);
    return rc;
}

static int32_t split_seq_pos_max(const struct memory *m, int32_t seq) {
    return memory_seq_pos_max(split_of_c(m)->half[0], seq);
}

static int64_t split_seq_cells(const struct memory *m, int32_t seq) {
    return memory_seq_cells(split_of_c(m)->half[0], seq);
}

static int64_t split_seq_cells_own(const struct memory *m, int32_t seq) {
    return memory_seq_cells_own(split_of_c(m)->half[0], seq);
}

static int64_t split_cells_held(const struct memory *m, const bool *seqs) {
    return memory_cells_held(split_of_c(m)->half[0], seqs);
}

static int32_t split_seq_prefix_min(const struct memory *m, int32_t seq) {
    const struct split_memory *sm = split_of_c(m);
    int32_t a = memory_seq_prefix_min(sm->half[0], seq), b = memory_seq_prefix_min(sm->half[1], seq);
    return a > b ? a : b;
}

static void split_usage(const struct memory *m, struct memory_usage *u) {
    const struct split_memory *sm = split_of_c(m);
    struct memory_usage u1;
    memory_usage(sm->half[0], u);
    memory_usage(sm->half[1], &u1);
    u->bytes += u1.bytes + (size_t)sm->n_layer * (sizeof *sm->layer_half + sizeof *sm->layer_index);
    u->states_total += u1.states_total;
    u->states_used += u1.states_used;
}

static void split_snapshot_free(struct memory_snapshot *s) {
    if (!s) return;
    for (int h = 0; h < 2; h++)
        if (s->half[h]) s->ops[h]->snapshot_free(s->half[h]);
    free(s);
}

static int split_seq_save(struct memory *m, int32_t seq, struct memory_snapshot **out) {
    struct split_memory *sm = split_of(m);
    struct memory_snapshot *s = calloc(1, sizeof *s);
    if (!s) return -ERR_NOMEM;
    int rc = 0;
    for (int h = 0; h < 2 && rc == 0; h++) {
        s->ops[h] = sm->half[h]->ops;
        rc = memory_seq_save(sm->half[h], seq, &s->half[h]);
    }
    if (rc < 0) {
        split_snapshot_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

static int split_seq_restore(struct memory *m, int32_t seq, const struct memory_snapshot *s) {
    struct split_memory *sm = split_of(m);
    int rc = memory_seq_restore(sm->half[1], seq, s->half[1]);
    if (rc < 0) return rc;
    rc = memory_seq_restore(sm->half[0], seq, s->half[0]);
    if (rc < 0) {
        int undo = memory_seq_rm(sm->half[1], seq, 0, -1); /* a whole sequence always goes */
        ASSERT(undo == 0);
    }
    return rc;
}

static int64_t split_restore_cells_needed(const struct memory *m, int32_t seq, const struct memory_snapshot *s) {
    const struct split_memory *sm = split_of_c(m);
    return with_shortfall(sm, memory_restore_cells_needed(sm->half[0], seq, s->half[0]),
                          memory_restore_cells_needed(sm->half[1], seq, s->half[1]));
}

static void split_destroy(struct memory *m) {
    struct split_memory *sm = split_of(m);
    memory_destroy(sm->half[0]);
    memory_destroy(sm->half[1]);
    free(sm->layer_half);
    free(sm->layer_index);
    free(sm);
}

static const struct memory_ops split_ops = {
    .kind = "split",
    .reserve = split_reserve,
    .cells_needed = split_cells_needed,
    .seq_rm = split_seq_rm,
    .seq_cp = split_seq_cp,
    .seq_pos_max = split_seq_pos_max,
    .seq_cells = split_seq_cells,
    .seq_cells_own = split_seq_cells_own,
    .usage = split_usage,
    .seq_save = split_seq_save,
    .seq_restore = split_seq_restore,
    .restore_cells_needed = split_restore_cells_needed,
    .seq_prefix_min = split_seq_prefix_min,
    .cells_held = split_cells_held,
    .snapshot_free = split_snapshot_free,
    .destroy = split_destroy,
};

int split_memory_create(struct memory **out, struct memory *first, struct memory *second, int32_t n_layer,
                        const uint8_t *layer_half) {
    *out = NULL;
    bool ok = first && second && first->n_seq_max == second->n_seq_max && n_layer >= 1 && layer_half &&
              first->ops->partial_removal;
    for (int32_t l = 0; ok && l < n_layer; l++) ok = layer_half[l] <= 1;
    struct split_memory *sm = ok ? calloc(1, sizeof *sm) : NULL;
    if (sm) {
        sm->layer_half = malloc((size_t)n_layer * sizeof *sm->layer_half);
        sm->layer_index = malloc((size_t)n_layer * sizeof *sm->layer_index);
    }
    if (!sm || !sm->layer_half || !sm->layer_index) {
        if (sm) {
            free(sm->layer_half);
            free(sm->layer_index);
            free(sm);
        }
        memory_destroy(first);
        memory_destroy(second);
        return ok ? -ERR_NOMEM : -ERR_INVAL;
    }
    sm->ops = split_ops;
    sm->ops.partial_removal = first->ops->partial_removal && second->ops->partial_removal;
    sm->ops.fixed_seq_cells = first->ops->fixed_seq_cells;
    sm->base = (struct memory){.ops = &sm->ops, .n_seq_max = first->n_seq_max};
    sm->half[0] = first;
    sm->half[1] = second;
    sm->n_layer = n_layer;
    int32_t count[2] = {0, 0};
    for (int32_t l = 0; l < n_layer; l++) {
        sm->layer_half[l] = layer_half[l];
        sm->layer_index[l] = count[layer_half[l]]++;
    }
    *out = &sm->base;
    return 0;
}

struct memory *split_half(struct memory *m, int h) {
    if (!m || m->ops->reserve != split_reserve || h < 0 || h > 1) return NULL;
    return split_of(m)->half[h];
}

int split_layer_half(const struct memory *m, int32_t l) {
    const struct split_memory *sm = split_of_c(m);
    ASSERT(m->ops->reserve == split_reserve && l >= 0 && l < sm->n_layer);
    return sm->layer_half[l];
}

int32_t split_layer_index(const struct memory *m, int32_t l) {
    const struct split_memory *sm = split_of_c(m);
    ASSERT(m->ops->reserve == split_reserve && l >= 0 && l < sm->n_layer);
    return sm->layer_index[l];
}
