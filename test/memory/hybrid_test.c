/* Tests of a hybrid model's memory (memory/split.h over an attention KV pool and a recurrent
 * state pool, as model_memory_create builds it for qwen35) with stored rows and states: forks
 * copy the state and share the cells, save/restore (preemption) moves both with their numbers,
 * and a failure injected in either half leaves both exactly as they were (nothing leaks, the
 * numbers are unchanged). */
#include "test.h"
#include "common/err.h"
#include "memory/kv.h"
#include "memory/recurrent.h"
#include "memory/split.h"

#include <stdlib.h>
#include <string.h>

enum { N_SEQ = 4, KV_CELLS = 16, STATES = 2 };

static const struct recurrent_shape rshape = {.n_layer = 1, .d_conv = 3, .d_inner = 2, .d_state = 1, .ssm_floats = 5};

static int make(struct memory **m, int32_t n_states) {
    struct memory *kv, *rec;
    if (kv_memory_create(&kv, &(struct kv_shape){.n_layer = 1, .n_embd_k = 4, .n_embd_v = 4}, KV_CELLS, N_SEQ) < 0)
        return -1;
    if (recurrent_memory_create(&rec, &rshape, n_states, N_SEQ) < 0) {
        memory_destroy(kv);
        return -1;
    }
    return split_memory_create(m, kv, rec, 2, (const uint8_t[]){1, 0}); /* layer 0 recurrent, 1 attention */
}

static struct kv_memory *kvh(struct memory *m) { return kv_from_memory(split_half(m, 0)); }
static struct recurrent_memory *rech(struct memory *m) { return recurrent_from_memory(split_half(m, 1)); }

static int64_t used(struct memory *m, int h) {
    struct memory_usage u;
    memory_usage(h < 0 ? m : split_half(m, h), &u);
    return u.cells_used;
}

static void add_run(struct batch *b, int32_t seq, int32_t p0, int32_t n) {
    for (int32_t i = 0; i < n; i++) batch_add(b, 7 + i, p0 + i, seq, i == n - 1);
}

/* What a forward pass would have written: the batch's K rows, and each sequence's state set to
 * a pattern of (seq, tag). */
static void write_state(struct memory *m, int32_t seq, float tag) {
    float *conv = recurrent_conv_state(rech(m), seq, 0), *ssm = recurrent_ssm_state(rech(m), seq, 0);
    for (int i = 0; i < (rshape.d_conv - 1) * rshape.d_inner; i++) conv[i] = tag + (float)i;
    for (int i = 0; i < rshape.ssm_floats; i++) ssm[i] = -tag - (float)i;
}

static bool state_is(struct memory *m, int32_t seq, float tag) {
    const float *conv = recurrent_conv_state(rech(m), seq, 0), *ssm = recurrent_ssm_state(rech(m), seq, 0);
    for (int i = 0; i < (rshape.d_conv - 1) * rshape.d_inner; i++)
        if (conv[i] != tag + (float)i) return false;
    for (int i = 0; i < rshape.ssm_floats; i++)
        if (ssm[i] != -tag - (float)i) return false;
    return true;
}

static void write_rows(struct memory *m, const struct batch *b) {
    struct kv_memory *kv = kvh(m);
    for (int32_t i = 0; i < b->n_tokens; i++) {
        uint16_t *k = kv_k_row(kv, 0, kv_batch_cell(kv, i));
        for (int j = 0; j < 4; j++) k[j] = (uint16_t)(b->pos[i] * 4 + j);
    }
}

/* Every cell of seq holds the row its position was written with; returns the count. */
static int64_t rows_ok(struct memory *m, int32_t seq) {
    struct kv_memory *kv = kvh(m);
    int32_t cells[KV_CELLS];
    int64_t n = kv_seq_cell_list(kv, seq, cells, KV_CELLS);
    for (int64_t c = 0; c < n; c++)
        for (int j = 0; j < 4; j++)
            if (((const uint16_t *)kv_k_row(kv, 0, cells[c]))[j] != (uint16_t)(kv->pos[cells[c]] * 4 + j)) return -1;
    return n;
}

TEST(hybrid_memory_capabilities_and_forks) {
    struct memory *m;
    CHECK_EQ_INT(make(&m, STATES), 0);
    CHECK(!m->ops->partial_removal && !m->ops->fixed_seq_cells);
    CHECK(kvh(m) && rech(m));
    CHECK_EQ_INT(split_layer_half(m, 0), 1);
    CHECK_EQ_INT(split_layer_index(m, 1), 0);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 32), 0);
    add_run(&b, 0, 0, 5);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    write_rows(m, &b);
    write_state(m, 0, 10);
    /* a fork (n choices of one prompt): the state is copied, the cells shared */
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, -1), 0);
    CHECK(state_is(m, 1, 10));
    CHECK_EQ_INT(used(m, -1), 5);
    CHECK_EQ_INT(used(m, 1), 2);
    CHECK_EQ_INT(rows_ok(m, 1), 5);
    /* the copy is the fork's own: writing one leaves the other */
    write_state(m, 1, 20);
    CHECK(state_is(m, 0, 10));
    /* a recurrent state has no prefix: partial removal and prefix forks refused in both halves */
    CHECK_EQ_INT(memory_seq_rm(m, 0, 3, -1), -ERR_UNSUPPORTED);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 2, 0, 3), -ERR_UNSUPPORTED);
    CHECK_EQ_INT(memory_seq_cells(m, 0), 5);
    CHECK_EQ_INT(memory_seq_cells(m, 2), 0);
    CHECK_EQ_INT(memory_seq_prefix_min(m, 0), 5);
    /* both forks go on independently; removing one whole frees its state, keeps the shared cells */
    batch_clear(&b);
    add_run(&b, 0, 5, 1);
    add_run(&b, 1, 5, 1);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(used(m, -1), 7);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 0, -1), 0);
    CHECK_EQ_INT(used(m, 1), 1);
    CHECK_EQ_INT(used(m, -1), 6);
    CHECK_EQ_INT(memory_seq_pos_max(m, 1), 5);
    CHECK_EQ_INT(memory_seq_rm(m, 1, 0, -1), 0);
    CHECK_EQ_INT(used(m, -1), 0);
    CHECK_EQ_INT(used(m, 1), 0);
    batch_free(&b);
    memory_destroy(m);
}

/* A reserve that one half refuses changes neither: the recurrent half out of states, the KV
 * half out of cells, the recurrent half refusing a gap the KV half would take. */
TEST(hybrid_memory_reserve_failure_in_each_half) {
    struct memory *m;
    CHECK_EQ_INT(make(&m, STATES), 0);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 32), 0);
    add_run(&b, 0, 0, 5);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    write_rows(m, &b);
    write_state(m, 0, 10);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, -1), 0);
    /* recurrent half full (2 states): a new sequence fails, the KV half gives its cells back */
    CHECK_EQ_INT(memory_cells_needed(m, 2, 3), 3 + 1); /* and admission says so */
    batch_clear(&b);
    add_run(&b, 2, 0, 3);
    CHECK_EQ_INT(memory_reserve(m, &b), -ERR_NOMEM);
    CHECK_EQ_INT(used(m, -1), 5);
    CHECK_EQ_INT(memory_seq_pos_max(m, 2), -1);
    CHECK_EQ_INT(memory_seq_cells(split_half(m, 1), 2), 0);
    /* KV half full: 12 more tokens of sequence 1 on 11 free cells; its state stays at 4 */
    batch_clear(&b);
    add_run(&b, 1, 5, 12);
    CHECK_EQ_INT(memory_reserve(m, &b), -ERR_NOMEM);
    CHECK_EQ_INT(used(m, -1), 5);
    CHECK_EQ_INT(memory_seq_pos_max(split_half(m, 1), 1), 4);
    CHECK(state_is(m, 1, 10));
    /* the recurrent half refuses a gap (positions 7.. after 4); the KV half's cells go back */
    batch_clear(&b);
    add_run(&b, 0, 7, 2);
    CHECK_EQ_INT(memory_reserve(m, &b), -ERR_INVAL);
    CHECK_EQ_INT(used(m, -1), 5);
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 4);
    CHECK_EQ_INT(rows_ok(m, 0), 5);
    CHECK(state_is(m, 0, 10));
    /* after all that, the sequences go on as if nothing happened */
    batch_clear(&b);
    add_run(&b, 0, 5, 2);
    add_run(&b, 1, 5, 9);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(used(m, -1), 16);
    CHECK_EQ_INT(memory_seq_pos_max(split_half(m, 1), 1), 13);
    batch_free(&b);
    memory_destroy(m);
}

/* Preemption: save, remove, restore brings back the cells (shared ones shared again) and the
 * state's numbers; a restore one half cannot take leaves neither holding anything. */
TEST(hybrid_memory_save_restore_and_failures) {
    struct memory *m;
    CHECK_EQ_INT(make(&m, STATES), 0);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 32), 0);
    add_run(&b, 0, 0, 5);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    write_rows(m, &b);
    write_state(m, 0, 10);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, -1), 0);
    batch_clear(&b);
    add_run(&b, 1, 5, 3);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    write_rows(m, &b);
    write_state(m, 1, 30);
    /* sequence 1 preempted: its 3 own cells and its state freed, the 5 shared kept by 0 */
    struct memory_snapshot *s1;
    CHECK_EQ_INT(memory_seq_save(m, 1, &s1), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 1, 0, -1), 0);
    CHECK_EQ_INT(used(m, -1), 5);
    CHECK_EQ_INT(used(m, 1), 1);
    CHECK_EQ_INT(memory_restore_cells_needed(m, 1, s1), 3);
    CHECK_EQ_INT(memory_seq_restore(m, 1, s1), 0);
    CHECK_EQ_INT(used(m, -1), 8);
    CHECK_EQ_INT(rows_ok(m, 1), 8);
    CHECK(state_is(m, 1, 30));
    CHECK_EQ_INT(memory_seq_pos_max(m, 1), 7);
    CHECK_EQ_INT(memory_seq_pos_max(split_half(m, 1), 1), 7);
    /* the recurrent half full when sequence 1 comes back: the KV half is not touched */
    CHECK_EQ_INT(memory_seq_rm(m, 1, 0, -1), 0);
    batch_clear(&b);
    add_run(&b, 2, 0, 2);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_restore_cells_needed(m, 1, s1), 3 + 1);
    CHECK_EQ_INT(memory_seq_restore(m, 1, s1), -ERR_NOMEM);
    CHECK_EQ_INT(used(m, -1), 7);
    CHECK_EQ_INT(memory_seq_cells(m, 1), 0);
    CHECK_EQ_INT(memory_seq_cells(split_half(m, 1), 1), 0);
    /* the KV half full when it comes back (its shared cells gone with sequence 0, 15 of 16 cells
     * held by sequence 3): the recurrent half's restore is undone */
    CHECK_EQ_INT(memory_seq_rm(m, 2, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 0, -1), 0);
    CHECK_EQ_INT(used(m, -1), 0);
    batch_clear(&b);
    add_run(&b, 3, 0, 15);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(used(m, 1), 1);
    CHECK_EQ_INT(memory_restore_cells_needed(m, 1, s1), 8);
    CHECK_EQ_INT(memory_seq_restore(m, 1, s1), -ERR_NOMEM);
    CHECK_EQ_INT(used(m, 1), 1);
    CHECK_EQ_INT(memory_seq_cells(split_half(m, 1), 1), 0);
    CHECK_EQ_INT(used(m, -1), 15);
    /* room again: the same snapshot restores whole, its numbers intact */
    CHECK_EQ_INT(memory_seq_rm(m, 3, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_restore(m, 1, s1), 0);
    CHECK_EQ_INT(rows_ok(m, 1), 8);
    CHECK(state_is(m, 1, 30));
    memory_snapshot_free(m, s1);
    CHECK_EQ_INT(memory_seq_rm(m, 1, 0, -1), 0);
    CHECK_EQ_INT(used(m, -1), 0);
    CHECK_EQ_INT(used(m, 1), 0);
    batch_free(&b);
    memory_destroy(m);
}
