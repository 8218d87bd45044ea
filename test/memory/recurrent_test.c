/* Tests of the recurrent state pool (memory/recurrent.h) through the memory.h interface. */
#include "test.h"

#include "common/batch.h"
#include "common/err.h"
#include "memory/recurrent.h"

static const struct recurrent_shape small_shape = {.n_layer = 2, .d_conv = 4, .d_inner = 8, .d_state = 3};

/* Fill seq's whole state (every layer, conv and ssm) with value + a position-dependent offset. */
static void fill_state(struct recurrent_memory *r, int32_t seq, float value) {
    for (int32_t l = 0; l < r->shape.n_layer; l++) {
        float *c = recurrent_conv_state(r, seq, l), *h = recurrent_ssm_state(r, seq, l);
        for (int64_t i = 0; i < recurrent_conv_floats(&r->shape); i++) c[i] = value + (float)i;
        for (int64_t i = 0; i < recurrent_ssm_floats(&r->shape); i++) h[i] = -value - (float)i;
    }
}

static bool state_is(struct recurrent_memory *r, int32_t seq, float value) {
    for (int32_t l = 0; l < r->shape.n_layer; l++) {
        const float *c = recurrent_conv_state(r, seq, l), *h = recurrent_ssm_state(r, seq, l);
        for (int64_t i = 0; i < recurrent_conv_floats(&r->shape); i++) if (c[i] != value + (float)i) return false;
        for (int64_t i = 0; i < recurrent_ssm_floats(&r->shape); i++) if (h[i] != -value - (float)i) return false;
    }
    return true;
}

static bool state_is_zero(struct recurrent_memory *r, int32_t seq) {
    for (int32_t l = 0; l < r->shape.n_layer; l++) {
        const float *c = recurrent_conv_state(r, seq, l), *h = recurrent_ssm_state(r, seq, l);
        for (int64_t i = 0; i < recurrent_conv_floats(&r->shape); i++) if (c[i] != 0) return false;
        for (int64_t i = 0; i < recurrent_ssm_floats(&r->shape); i++) if (h[i] != 0) return false;
    }
    return true;
}

/* A batch of n tokens of seq starting at position p0. */
static void add_run(struct batch *b, int32_t seq, int32_t p0, int32_t n) {
    for (int32_t i = 0; i < n; i++) batch_add(b, 100 + i, p0 + i, seq, i == n - 1);
}

TEST(recurrent_create_rejects_bad_sizes) {
    struct memory *m = NULL;
    struct recurrent_shape bad = small_shape;
    bad.d_state = 0;
    CHECK_EQ_INT(recurrent_memory_create(&m, &small_shape, 0, 4), -ERR_INVAL);
    CHECK_EQ_INT(recurrent_memory_create(&m, &small_shape, 2, 0), -ERR_INVAL);
    CHECK_EQ_INT(recurrent_memory_create(&m, &bad, 2, 4), -ERR_INVAL);
    CHECK_EQ_INT(recurrent_memory_create(&m, NULL, 2, 4), 0); /* bookkeeping only */
    CHECK(recurrent_from_memory(m) != NULL);
    struct memory_usage u;
    memory_usage(m, &u);
    CHECK_EQ_INT(u.bytes, 0);
    memory_destroy(m);
}

TEST(recurrent_reports_its_capabilities_and_size) {
    struct memory *m;
    CHECK_EQ_INT(recurrent_memory_create(&m, &small_shape, 3, 5), 0);
    CHECK_EQ_STR(m->ops->kind, "recurrent");
    CHECK(!m->ops->partial_removal);
    CHECK(m->ops->fixed_seq_cells);
    struct memory_usage u;
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_total, 3);
    CHECK_EQ_INT(u.cells_used, 0);
    /* per cell per layer: (4-1)*8 conv + 8*3 ssm floats */
    CHECK_EQ_INT(u.bytes, 3 * 2 * (3 * 8 + 8 * 3) * sizeof(float));
    memory_destroy(m);
}

TEST(recurrent_reserve_gives_each_sequence_one_zeroed_state) {
    struct memory *m;
    struct batch b;
    CHECK_EQ_INT(recurrent_memory_create(&m, &small_shape, 2, 4), 0);
    struct recurrent_memory *r = recurrent_from_memory(m);
    CHECK_EQ_INT(batch_init(&b, 16), 0);
    CHECK_EQ_INT(memory_cells_needed(m, 1, 10), 1);
    add_run(&b, 1, 0, 5);
    add_run(&b, 3, 0, 2);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_cells_needed(m, 1, 10), 0);
    CHECK_EQ_INT(memory_seq_pos_max(m, 1), 4);
    CHECK_EQ_INT(memory_seq_pos_max(m, 3), 1);
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), -1);
    CHECK_EQ_INT(memory_seq_cells(m, 1), 1);
    CHECK_EQ_INT(memory_seq_cells(m, 0), 0);
    CHECK(state_is_zero(r, 1) && state_is_zero(r, 3));
    /* states are distinct: writing one leaves the other alone */
    fill_state(r, 1, 7);
    CHECK(state_is(r, 1, 7));
    CHECK(state_is_zero(r, 3));
    /* continuing sequences need no new cell; a freed and reused cell starts from zero again */
    batch_clear(&b);
    add_run(&b, 1, 5, 1);
    add_run(&b, 3, 2, 1);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK(state_is(r, 1, 7));
    CHECK_EQ_INT(memory_seq_rm(m, 1, 0, -1), 0);
    batch_clear(&b);
    add_run(&b, 2, 0, 3);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK(state_is_zero(r, 2));
    batch_free(&b);
    memory_destroy(m);
}

TEST(recurrent_reserve_is_all_or_nothing) {
    struct memory *m;
    struct batch b;
    CHECK_EQ_INT(recurrent_memory_create(&m, &small_shape, 2, 4), 0);
    CHECK_EQ_INT(batch_init(&b, 16), 0);
    add_run(&b, 0, 0, 2);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    /* two new sequences but one free cell */
    batch_clear(&b);
    add_run(&b, 0, 2, 1);
    add_run(&b, 1, 0, 1);
    add_run(&b, 2, 0, 1);
    CHECK_EQ_INT(memory_reserve(m, &b), -ERR_NOMEM);
    struct memory_usage u;
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 1);
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 1);
    CHECK_EQ_INT(memory_seq_pos_max(m, 1), -1);
    /* positions must continue the state: a gap, a repeat, a new sequence not at 0, a bad id */
    batch_clear(&b);
    add_run(&b, 0, 3, 1);
    CHECK_EQ_INT(memory_reserve(m, &b), -ERR_INVAL);
    batch_clear(&b);
    add_run(&b, 0, 1, 1);
    CHECK_EQ_INT(memory_reserve(m, &b), -ERR_INVAL);
    batch_clear(&b);
    add_run(&b, 1, 0, 1);
    add_run(&b, 0, 2, 1);
    batch_add(&b, 5, 3, 1, false); /* seq 1 jumps from 0 to 3 */
    CHECK_EQ_INT(memory_reserve(m, &b), -ERR_INVAL);
    batch_clear(&b);
    add_run(&b, 1, 4, 2);
    CHECK_EQ_INT(memory_reserve(m, &b), -ERR_INVAL);
    batch_clear(&b);
    add_run(&b, 4, 0, 1);
    CHECK_EQ_INT(memory_reserve(m, &b), -ERR_INVAL);
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 1);
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 1);
    CHECK_EQ_INT(memory_seq_pos_max(m, 1), -1);
    batch_free(&b);
    memory_destroy(m);
}

TEST(recurrent_seq_rm_frees_whole_refuses_partial) {
    struct memory *m;
    struct batch b;
    CHECK_EQ_INT(recurrent_memory_create(&m, &small_shape, 2, 4), 0);
    struct recurrent_memory *r = recurrent_from_memory(m);
    CHECK_EQ_INT(batch_init(&b, 16), 0);
    add_run(&b, 0, 0, 6);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    fill_state(r, 0, 3);
    /* nothing the state depends on: no-op success */
    CHECK_EQ_INT(memory_seq_rm(m, 0, 6, -1), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 9, 20), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 2, 0, -1), 0); /* holds nothing */
    /* a tail, a middle or a head of the state: impossible, reported, nothing changed */
    CHECK_EQ_INT(memory_seq_rm(m, 0, 3, -1), -ERR_UNSUPPORTED);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 2, 4), -ERR_UNSUPPORTED);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 0, 3), -ERR_UNSUPPORTED);
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 5);
    CHECK(state_is(r, 0, 3));
    CHECK_EQ_INT(memory_seq_rm(m, 9, 0, -1), -ERR_INVAL);
    /* the whole sequence, open-ended or spelled out */
    CHECK_EQ_INT(memory_seq_rm(m, 0, 0, 6), 0);
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), -1);
    CHECK_EQ_INT(memory_seq_cells(m, 0), 0);
    struct memory_usage u;
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 0);
    batch_free(&b);
    memory_destroy(m);
}

TEST(recurrent_seq_cp_forks_an_independent_copy) {
    struct memory *m;
    struct batch b;
    CHECK_EQ_INT(recurrent_memory_create(&m, &small_shape, 3, 4), 0);
    struct recurrent_memory *r = recurrent_from_memory(m);
    CHECK_EQ_INT(batch_init(&b, 16), 0);
    add_run(&b, 0, 0, 4);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    fill_state(r, 0, 11);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, 3), -ERR_UNSUPPORTED); /* a prefix of a state */
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 2, -1), -ERR_UNSUPPORTED);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 2, 0, 4), 0);
    CHECK_EQ_INT(memory_seq_pos_max(m, 1), 3);
    CHECK(state_is(r, 1, 11) && state_is(r, 2, 11));
    bool held[4] = {true, false, true, true}; /* 3 holds nothing; a copy is a cell of its own */
    CHECK_EQ_INT(memory_cells_held(m, held), 2);
    fill_state(r, 0, 20);
    CHECK(state_is(r, 1, 11));
    CHECK_EQ_INT(memory_seq_cp(m, 0, 3, 0, -1), -ERR_NOMEM); /* pool full */
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, -1), -ERR_INVAL); /* dst holds a state */
    CHECK_EQ_INT(memory_seq_cp(m, 3, 0, 0, -1), -ERR_INVAL);
    CHECK_EQ_INT(memory_seq_rm(m, 2, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_cp(m, 2, 3, 0, -1), 0); /* src holds nothing: nothing to copy */
    CHECK_EQ_INT(memory_seq_cells(m, 3), 0);
    /* the fork continues on its own */
    batch_clear(&b);
    add_run(&b, 1, 4, 2);
    add_run(&b, 0, 4, 1);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_seq_pos_max(m, 1), 5);
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 4);
    batch_free(&b);
    memory_destroy(m);
}

TEST(recurrent_save_restore_round_trip) {
    struct memory *m;
    struct batch b;
    CHECK_EQ_INT(recurrent_memory_create(&m, &small_shape, 1, 4), 0);
    struct recurrent_memory *r = recurrent_from_memory(m);
    CHECK_EQ_INT(batch_init(&b, 16), 0);
    add_run(&b, 2, 0, 7);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    fill_state(r, 2, 5);
    struct memory_snapshot *snap = NULL, *empty = NULL;
    CHECK_EQ_INT(memory_seq_save(m, 2, &snap), 0);
    CHECK_EQ_INT(memory_seq_save(m, 0, &empty), 0);
    CHECK_EQ_INT(memory_seq_restore(m, 2, snap), -ERR_INVAL); /* still holds its state */
    CHECK_EQ_INT(memory_seq_rm(m, 2, 0, -1), 0);
    /* another sequence takes the only cell: restoring must wait */
    batch_clear(&b);
    add_run(&b, 1, 0, 2);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    fill_state(r, 1, 9);
    CHECK_EQ_INT(memory_seq_restore(m, 2, snap), -ERR_NOMEM);
    CHECK_EQ_INT(memory_seq_cells(m, 2), 0);
    CHECK(state_is(r, 1, 9));
    CHECK_EQ_INT(memory_seq_rm(m, 1, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_restore(m, 2, snap), 0);
    CHECK_EQ_INT(memory_seq_pos_max(m, 2), 6);
    CHECK(state_is(r, 2, 5));
    CHECK_EQ_INT(memory_seq_restore(m, 3, empty), 0); /* an empty snapshot restores to nothing */
    CHECK_EQ_INT(memory_seq_cells(m, 3), 0);
    memory_snapshot_free(m, snap);
    memory_snapshot_free(m, empty);
    /* and the restored sequence continues where it was */
    batch_clear(&b);
    add_run(&b, 2, 7, 1);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    batch_free(&b);
    memory_destroy(m);
}

TEST(recurrent_bookkeeping_only_tracks_cells_and_positions) {
    struct memory *m;
    struct batch b;
    CHECK_EQ_INT(recurrent_memory_create(&m, NULL, 2, 8), 0);
    CHECK_EQ_INT(batch_init(&b, 8), 0);
    add_run(&b, 5, 0, 3);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_seq_cp(m, 5, 6, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_pos_max(m, 6), 2);
    batch_clear(&b);
    add_run(&b, 7, 0, 1);
    CHECK_EQ_INT(memory_reserve(m, &b), -ERR_NOMEM);
    struct memory_snapshot *s;
    CHECK_EQ_INT(memory_seq_save(m, 6, &s), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 6, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_restore(m, 7, s), 0);
    CHECK_EQ_INT(memory_seq_pos_max(m, 7), 2);
    memory_snapshot_free(m, s);
    batch_free(&b);
    memory_destroy(m);
}
