/* recurrent.c: the per-sequence state pool behind memory.h for recurrent models (see recurrent.h). */
#include "memory/recurrent.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

static const struct memory_ops recurrent_ops;

/* A host copy of one sequence's state (recurrent.h: seq_save). */
struct memory_snapshot {
    const struct memory_ops *ops; /* &recurrent_ops: a snapshot goes back to the kind it came from */
    int32_t pos_max;
    int64_t n_floats;
    float data[];                 /* [n_floats]: the cell as stored */
};

static struct recurrent_memory *rm_of(struct memory *m) {
    ASSERT(m->ops == &recurrent_ops);
    return (struct recurrent_memory *)m;
}
static const struct recurrent_memory *crm_of(const struct memory *m) {
    ASSERT(m->ops == &recurrent_ops);
    return (const struct recurrent_memory *)m;
}

static bool seq_valid(const struct recurrent_memory *r, int32_t seq) {
    return seq >= 0 && seq < r->base.n_seq_max;
}

static float *cell_data(struct recurrent_memory *r, int32_t cell) {
    return r->states ? r->states + (int64_t)cell * r->cell_floats : NULL;
}

/* Take a free cell for seq with the given state (NULL: the zero state). The caller checked that
 * one is free. */
static void cell_take(struct recurrent_memory *r, int32_t seq, const float *init) {
    int32_t cell = 0;
    while (r->cell_seq[cell] >= 0) cell++;
    ASSERT(cell < r->n_cells);
    r->cell_seq[cell] = seq;
    r->seq_cell[seq] = cell;
    r->n_used++;
    float *d = cell_data(r, cell);
    if (d && init) memcpy(d, init, (size_t)r->cell_floats * sizeof *d);
    else if (d) memset(d, 0, (size_t)r->cell_floats * sizeof *d);
}

static void cell_release(struct recurrent_memory *r, int32_t seq) {
    int32_t cell = r->seq_cell[seq];
    if (cell < 0) return;
    r->cell_seq[cell] = -1;
    r->seq_cell[seq] = -1;
    r->seq_pos_max[seq] = -1;
    r->n_used--;
}

/* Two passes: check everything (and count the new sequences) without changing anything, then
 * apply. next[s] is the position sequence s expects next while the batch is checked. */
static int rm_reserve(struct memory *m, const struct batch *b) {
    struct recurrent_memory *r = rm_of(m);
    for (int32_t s = 0; s < r->base.n_seq_max; s++) r->next[s] = r->seq_pos_max[s] + 1;
    int32_t n_new = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        int32_t s = b->seq[i];
        if (!seq_valid(r, s) || b->pos[i] != r->next[s]) return -ERR_INVAL;
        if (b->pos[i] == 0 && r->seq_cell[s] < 0) n_new++;
        r->next[s]++;
    }
    if (n_new > r->n_cells - r->n_used) return -ERR_NOMEM;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        int32_t s = b->seq[i];
        if (r->seq_cell[s] < 0) cell_take(r, s, NULL);
        r->seq_pos_max[s] = b->pos[i];
    }
    return 0;
}

static int64_t rm_cells_needed(const struct memory *m, int32_t seq, int32_t n_new) {
    const struct recurrent_memory *r = crm_of(m);
    ASSERT(seq_valid(r, seq));
    return r->seq_cell[seq] >= 0 ? 0 : 1;
}

static int rm_seq_rm(struct memory *m, int32_t seq, int32_t p0, int32_t p1) {
    struct recurrent_memory *r = rm_of(m);
    if (!seq_valid(r, seq)) return -ERR_INVAL;
    int32_t pos_max = r->seq_pos_max[seq];
    if (r->seq_cell[seq] < 0 || p0 > pos_max || (p1 >= 0 && p1 <= p0)) return 0;
    if (p0 <= 0 && (p1 < 0 || p1 > pos_max)) {
        cell_release(r, seq);
        return 0;
    }
    return -ERR_UNSUPPORTED;
}

static int rm_seq_cp(struct memory *m, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    struct recurrent_memory *r = rm_of(m);
    if (!seq_valid(r, src) || !seq_valid(r, dst) || src == dst) return -ERR_INVAL;
    if (r->seq_cell[dst] >= 0) return -ERR_INVAL;
    if (r->seq_cell[src] < 0) return 0;
    if (p0 > 0 || (p1 >= 0 && p1 <= r->seq_pos_max[src])) return -ERR_UNSUPPORTED;
    if (r->n_used >= r->n_cells) return -ERR_NOMEM;
    cell_take(r, dst, cell_data(r, r->seq_cell[src]));
    r->seq_pos_max[dst] = r->seq_pos_max[src];
    return 0;
}

static int32_t rm_seq_pos_max(const struct memory *m, int32_t seq) {
    const struct recurrent_memory *r = crm_of(m);
    ASSERT(seq_valid(r, seq));
    return r->seq_pos_max[seq];
}

static int64_t rm_seq_cells(const struct memory *m, int32_t seq) {
    const struct recurrent_memory *r = crm_of(m);
    ASSERT(seq_valid(r, seq));
    return r->seq_cell[seq] >= 0 ? 1 : 0;
}

static int64_t rm_cells_held(const struct memory *m, const bool *seqs) {
    const struct recurrent_memory *r = crm_of(m);
    int64_t n = 0;
    for (int32_t s = 0; s < r->base.n_seq_max; s++) n += seqs[s] && r->seq_cell[s] >= 0; /* never shared */
    return n;
}

static void rm_usage(const struct memory *m, struct memory_usage *u) {
    const struct recurrent_memory *r = crm_of(m);
    u->cells_total = r->n_cells;
    u->cells_used = r->n_used;
    u->bytes = r->states ? (size_t)r->n_cells * (size_t)r->cell_floats * sizeof(float) : 0;
    u->states_total = r->n_cells;
    u->states_used = r->n_used;
}

static int rm_seq_save(struct memory *m, int32_t seq, struct memory_snapshot **out) {
    struct recurrent_memory *r = rm_of(m);
    if (!seq_valid(r, seq)) return -ERR_INVAL;
    int64_t n = r->states && r->seq_cell[seq] >= 0 ? r->cell_floats : 0;
    struct memory_snapshot *s = malloc(sizeof *s + (size_t)n * sizeof(float));
    if (!s) return -ERR_NOMEM;
    s->ops = &recurrent_ops;
    s->pos_max = r->seq_cell[seq] >= 0 ? r->seq_pos_max[seq] : -1;
    s->n_floats = n;
    if (n) memcpy(s->data, cell_data(r, r->seq_cell[seq]), (size_t)n * sizeof(float));
    *out = s;
    return 0;
}

static int rm_seq_restore(struct memory *m, int32_t seq, const struct memory_snapshot *s) {
    struct recurrent_memory *r = rm_of(m);
    ASSERT(s->ops == &recurrent_ops);
    if (!seq_valid(r, seq) || r->seq_cell[seq] >= 0) return -ERR_INVAL;
    if (s->pos_max < 0) return 0; /* the sequence held nothing */
    if (s->n_floats != (r->states ? r->cell_floats : 0)) return -ERR_INVAL;
    if (r->n_used >= r->n_cells) return -ERR_NOMEM;
    cell_take(r, seq, s->n_floats ? s->data : NULL);
    r->seq_pos_max[seq] = s->pos_max;
    return 0;
}

static int64_t rm_restore_cells_needed(const struct memory *m, int32_t seq, const struct memory_snapshot *s) {
    (void)m, (void)seq;
    return s->pos_max >= 0 ? 1 : 0; /* a state is never shared: always one copy */
}

static void rm_snapshot_free(struct memory_snapshot *s) {
    free(s);
}

static void rm_destroy(struct memory *m) {
    struct recurrent_memory *r = rm_of(m);
    free(r->seq_cell);
    free(r->seq_pos_max);
    free(r->cell_seq);
    free(r->next);
    free(r->states);
    free(r);
}

static const struct memory_ops recurrent_ops = {
    .kind = "recurrent",
    .partial_removal = false,
    .fixed_seq_cells = true,
    .reserve = rm_reserve,
    .cells_needed = rm_cells_needed,
    .seq_rm = rm_seq_rm,
    .seq_cp = rm_seq_cp,
    .seq_pos_max = rm_seq_pos_max,
    .seq_cells = rm_seq_cells,
    .seq_cells_own = rm_seq_cells, /* a state is never shared: seq_cp copies it */
    .usage = rm_usage,
    .seq_save = rm_seq_save,
    .seq_restore = rm_seq_restore,
    .restore_cells_needed = rm_restore_cells_needed,
    .snapshot_free = rm_snapshot_free,
    .destroy = rm_destroy,
    .cells_held = rm_cells_held,
};

int recurrent_memory_create(struct memory **out, const struct recurrent_shape *shape,
                            int32_t n_cells, int32_t n_seq_max) {
    if (n_cells <= 0 || n_seq_max <= 0) return -ERR_INVAL;
    bool stored = shape && shape->n_layer > 0;
    if (stored && (shape->d_conv < 1 || shape->d_inner <= 0 || shape->d_state <= 0 || shape->ssm_floats < 0))
        return -ERR_INVAL;
    struct recurrent_memory *r = calloc(1, sizeof *r);
    if (!r) return -ERR_NOMEM;
    r->base = (struct memory){.ops = &recurrent_ops, .n_seq_max = n_seq_max};
    if (stored) r->shape = *shape;
    r->n_cells = n_cells;
    r->cell_floats = stored ? (int64_t)shape->n_layer * (recurrent_conv_floats(shape) + recurrent_ssm_floats(shape)) : 0;
    r->seq_cell = malloc((size_t)n_seq_max * sizeof *r->seq_cell);
    r->seq_pos_max = malloc((size_t)n_seq_max * sizeof *r->seq_pos_max);
    r->cell_seq = malloc((size_t)n_cells * sizeof *r->cell_seq);
    r->next = malloc((size_t)n_seq_max * sizeof *r->next);
    if (stored) r->states = calloc((size_t)n_cells * (size_t)r->cell_floats, sizeof(float));
    if (!r->seq_cell || !r->seq_pos_max || !r->cell_seq || !r->next || (stored && !r->states)) {
        rm_destroy(&r->base);
        return -ERR_NOMEM;
    }
    for (int32_t s = 0; s < n_seq_max; s++) r->seq_cell[s] = r->seq_pos_max[s] = -1;
    for (int32_t c = 0; c < n_cells; c++) r->cell_seq[c] = -1;
    *out = &r->base;
    return 0;
}

struct recurrent_memory *recurrent_from_memory(struct memory *m) {
    return m && m->ops == &recurrent_ops ? (struct recurrent_memory *)m : NULL;
}

/* Cell layout: per layer, the conv state then the ssm state. */
static float *layer_state(struct recurrent_memory *r, int32_t seq, int32_t layer) {
    ASSERT(r->states && seq_valid(r, seq) && r->seq_cell[seq] >= 0);
    ASSERT(layer >= 0 && layer < r->shape.n_layer);
    int64_t per_layer = recurrent_conv_floats(&r->shape) + recurrent_ssm_floats(&r->shape);
    return cell_data(r, r->seq_cell[seq]) + (int64_t)layer * per_layer;
}

float *recurrent_conv_state(struct recurrent_memory *r, int32_t seq, int32_t layer) {
    return layer_state(r, seq, layer);
}

float *recurrent_ssm_state(struct recurrent_memory *r, int32_t seq, int32_t layer) {
    return layer_state(r, seq, layer) + recurrent_conv_floats(&r->shape);
}
