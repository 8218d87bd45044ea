/* Tests of memory/split.h: a full-attention KV pool and a windowed one as one memory (Gemma 3's
 * shape), and a KV pool with a recurrent state (a hybrid's): both halves see every operation,
 * the first is counted, and a refusal or failure in one half leaves the other as it was. */
#include "test.h"
#include "common/err.h"
#include "memory/kv.h"
#include "memory/recurrent.h"
#include "memory/split.h"

#include <stdlib.h>

enum { W = 4, N_SEQ = 4 };

static void add_run(struct batch *b, int32_t seq, int32_t p0, int32_t n) {
    for (int32_t i = 0; i < n; i++) batch_add(b, 100 + i, p0 + i, seq, i == n - 1);
}

/* Layers 0, 1, 3, 4 windowed, 2 and 5 global; the windowed pool has local_cells cells. */
static const uint8_t layer_half[6] = {1, 1, 0, 1, 1, 0};

static int make(struct memory **m, int64_t global_cells, int64_t local_cells, bool rows) {
    struct memory *g, *l;
    struct kv_shape gs = {.n_layer = rows ? 2 : 0, .n_embd_k = 4, .n_embd_v = 4};
    struct kv_shape ls = {.n_layer = rows ? 4 : 0, .n_embd_k = 4, .n_embd_v = 4, .window = W};
    if (kv_memory_create(&g, &gs, global_cells, N_SEQ) < 0) return -1;
    if (kv_memory_create(&l, &ls, local_cells, N_SEQ) < 0) {
        memory_destroy(g);
        return -1;
    }
    return split_memory_create(m, g, l, 6, layer_half);
}

static struct kv_memory *half(struct memory *m, int h) { return kv_from_memory(split_half(m, h)); }

static int64_t used(struct memory *m) {
    struct memory_usage u;
    memory_usage(m, &u);
    return u.cells_used;
}

TEST(split_layers_capabilities_and_counts) {
    struct memory *m;
    CHECK_EQ_INT(make(&m, 64, 24, true), 0);
    CHECK_EQ_STR(m->ops->kind, "split");
    CHECK(m->ops->partial_removal && !m->ops->fixed_seq_cells);
    CHECK_EQ_INT(m->n_seq_max, N_SEQ);
    const int32_t index[6] = {0, 1, 0, 2, 3, 1};
    for (int32_t l = 0; l < 6; l++) {
        CHECK_EQ_INT(split_layer_half(m, l), layer_half[l]);
        CHECK_EQ_INT(split_layer_index(m, l), index[l]);
    }
    CHECK(half(m, 0) != NULL && half(m, 1) != NULL && split_half(m, 2) == NULL);
    CHECK(split_half(split_half(m, 0), 0) == NULL); /* a kv pool is no split */
    struct memory_usage u, u0, u1;
    memory_usage(m, &u);
    memory_usage(split_half(m, 0), &u0);
    memory_usage(split_half(m, 1), &u1);
    CHECK_EQ_INT(u.cells_total, 64);
    CHECK(u.bytes >= u0.bytes + u1.bytes);
    /* a 20-token prompt: the global layers keep 20 cells, the windowed ones W after the next step */
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 32), 0);
    CHECK_EQ_INT(memory_cells_needed(m, 0, 20), 20);
    add_run(&b, 0, 0, 20);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    for (int32_t i = 0; i < 20; i++) {
        CHECK_EQ_INT(half(m, 0)->pos[kv_batch_cell(half(m, 0), i)], i);
        CHECK_EQ_INT(half(m, 1)->pos[kv_batch_cell(half(m, 1), i)], i);
    }
    batch_clear(&b);
    add_run(&b, 0, 20, 1);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_seq_cells(m, 0), 21);
    CHECK_EQ_INT(memory_seq_cells(split_half(m, 1), 0), W + 1);
    CHECK_EQ_INT(used(m), 21);
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 20);
    CHECK_EQ_INT(memory_cells_needed(m, 0, 7), 7);
    CHECK_EQ_INT(memory_seq_cells_own(m, 0), 21);
    batch_free(&b);
    memory_destroy(m);
}

/* Forks share both halves; a prefix the window released is refused by the split as a whole,
 * the global half untouched. */
TEST(split_forks_and_window_refusals) {
    struct memory *m;
    CHECK_EQ_INT(make(&m, 64, 24, false), 0);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 32), 0);
    add_run(&b, 0, 0, 12);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    batch_clear(&b);
    add_run(&b, 0, 12, 1); /* the windowed half releases 0 .. 7 */
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, -1), 0); /* n choices: whole copies, no new cells */
    CHECK_EQ_INT(used(m), 13);
    CHECK_EQ_INT(memory_seq_cells(m, 1), 13);
    CHECK_EQ_INT(memory_seq_cells(split_half(m, 1), 1), W + 1);
    CHECK_EQ_INT(memory_seq_cells_own(m, 1), 0);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 2, 0, 6), -ERR_UNSUPPORTED); /* would need 3 .. 5 */
    CHECK_EQ_INT(memory_seq_cells(m, 2), 0);
    CHECK_EQ_INT(memory_seq_cells(split_half(m, 1), 2), 0);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 2, 0, 12), 0); /* going on from 12: 9 .. 11 are held */
    CHECK_EQ_INT(memory_seq_cells(m, 2), 12);
    CHECK_EQ_INT(memory_seq_cells(split_half(m, 1), 2), 4);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 2, 0, -1), -ERR_INVAL); /* 2 is not empty there */
    CHECK_EQ_INT(memory_seq_rm(m, 0, 5, -1), -ERR_UNSUPPORTED);
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 12);
    CHECK_EQ_INT(memory_seq_cells(m, 0), 13);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 12, -1), 0); /* the last token back, in both */
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 11);
    CHECK_EQ_INT(memory_seq_pos_max(split_half(m, 1), 0), 11);
    for (int32_t s = 0; s < 3; s++) CHECK_EQ_INT(memory_seq_rm(m, s, 0, -1), 0);
    CHECK_EQ_INT(used(m), 0);
    CHECK_EQ_INT(used(split_half(m, 1)), 0);
    batch_free(&b);
    memory_destroy(m);
}

static void write_rows(struct kv_memory *kv, const struct batch *b) {
    for (int32_t i = 0; i < b->n_tokens; i++)
        for (int l = 0; l < kv->shape.n_layer; l++) {
            int32_t c = kv_batch_cell(kv, i);
            for (int e = 0; e < 4; e++) ((uint16_t *)kv_k_row(kv, l, c))[e] = ((uint16_t *)kv_v_row(kv, l, c))[e] = (uint16_t)(100 * l + b->pos[i]);
        }
}

/* Every cell seq holds has the rows write_rows gave its position; returns how many it holds. */
static int64_t check_rows(struct kv_memory *kv, int32_t seq, int *bad) {
    int64_t n = 0;
    for (int64_t c = 0; c < kv->n_cells; c++) {
        if (kv->pos[c] < 0 || !kv_cell_has_seq(kv, c, seq)) continue;
        n++;
        for (int l = 0; l < kv->shape.n_layer; l++)
            for (int e = 0; e < 4; e++)
                *bad += ((uint16_t *)kv_k_row(kv, l, c))[e] != 100 * l + kv->pos[c] || ((uint16_t *)kv_v_row(kv, l, c))[e] != 100 * l + kv->pos[c];
    }
    return n;
}

/* Preemption: a save holds both halves, a restore brings both back; one that cannot fit in
 * either half changes neither. */
TEST(split_save_restore_both_halves_or_neither) {
    struct memory *m;
    CHECK_EQ_INT(make(&m, 24, 12, true), 0);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 32), 0);
    add_run(&b, 0, 0, 10);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    write_rows(half(m, 0), &b);
    write_rows(half(m, 1), &b);
    struct memory_snapshot *snap;
    CHECK_EQ_INT(memory_seq_save(m, 0, &snap), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 0, -1), 0);
    CHECK_EQ_INT(memory_restore_cells_needed(m, 0, snap), 10);
    CHECK_EQ_INT(memory_seq_restore(m, 0, snap), 0);
    int bad = 0;
    CHECK_EQ_INT(check_rows(half(m, 0), 0, &bad), 10);
    CHECK_EQ_INT(check_rows(half(m, 1), 0, &bad), W); /* what the next token needs */
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 8, -1), -ERR_UNSUPPORTED); /* restored as it was: 5 is gone */
    CHECK_EQ_INT(memory_seq_rm(m, 0, 0, -1), 0);
    /* the global half too full for the snapshot (16 of 24 cells held), the windowed one not (8 of
     * 12): the windowed half's restore is undone */
    batch_clear(&b);
    add_run(&b, 1, 0, 12);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    batch_clear(&b);
    add_run(&b, 1, 12, 1);
    add_run(&b, 2, 0, 3);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(used(m), 16);
    CHECK_EQ_INT(used(split_half(m, 1)), 8);
    CHECK_EQ_INT(memory_seq_restore(m, 0, snap), -ERR_NOMEM);
    CHECK_EQ_INT(memory_seq_cells(m, 0), 0);
    CHECK_EQ_INT(memory_seq_cells(split_half(m, 1), 0), 0);
    CHECK_EQ_INT(used(split_half(m, 1)), 8);
    CHECK_EQ_INT(memory_seq_rm(m, 1, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 2, 0, -1), 0);
    /* the windowed half too full (its 12 cells: 9 of them held): the global half untouched */
    batch_clear(&b);
    add_run(&b, 1, 0, 9);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_restore_cells_needed(m, 0, snap), 10 + 1); /* and it says so */
    CHECK_EQ_INT(memory_seq_restore(m, 0, snap), -ERR_NOMEM);
    CHECK_EQ_INT(memory_seq_cells(m, 0), 0);
    CHECK_EQ_INT(memory_seq_cells(split_half(m, 1), 0), 0);
    CHECK_EQ_INT(used(m), 9);
    memory_snapshot_free(m, snap);
    batch_free(&b);
    memory_destroy(m);
}

/* A batch the windowed half cannot take fails as a whole: the global half gives its cells back,
 * and admission counts the shortfall. */
TEST(split_reserve_fails_in_both_or_neither) {
    struct memory *m;
    CHECK_EQ_INT(make(&m, 40, 10, false), 0);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 32), 0);
    add_run(&b, 0, 0, 6);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    batch_clear(&b);
    add_run(&b, 0, 6, 2);
    add_run(&b, 1, 0, 5); /* 7 new entries: 4 free windowed cells after the release */
    CHECK_EQ_INT(memory_reserve(m, &b), -ERR_NOMEM);
    CHECK_EQ_INT(used(m), 6);
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 5);
    CHECK_EQ_INT(memory_seq_pos_max(m, 1), -1);
    CHECK_EQ_INT(memory_seq_pos_max(split_half(m, 1), 0), 5);
    CHECK_EQ_INT(used(split_half(m, 1)), W);
    /* sequence 1's prompt would keep W windowed cells, of which 6 are free: its 5 count alone;
     * with 8 windowed cells held, 2 are free: 2 short */
    CHECK_EQ_INT(memory_cells_needed(m, 1, 5), 5);
    batch_clear(&b);
    add_run(&b, 2, 0, 4);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_cells_needed(m, 1, 5), 5 + 2);
    /* the same batch again, now that the windowed half has room: both take it */
    CHECK_EQ_INT(memory_seq_rm(m, 2, 0, -1), 0);
    batch_clear(&b);
    add_run(&b, 0, 6, 2);
    add_run(&b, 1, 0, 3);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 7);
    CHECK_EQ_INT(memory_seq_pos_max(split_half(m, 1), 1), 2);
    batch_free(&b);
    memory_destroy(m);
}

/* A hybrid's shape: attention cells and a recurrent state. Partial removal is the recurrent
 * state's (none), refused in both halves; forks and removals of whole sequences go in both. */
TEST(split_kv_with_recurrent_half) {
    struct memory *kv, *rec, *m;
    CHECK_EQ_INT(kv_memory_create(&kv, NULL, 32, N_SEQ), 0);
    CHECK_EQ_INT(recurrent_memory_create(&rec, NULL, N_SEQ, N_SEQ), 0);
    const uint8_t map[2] = {1, 0};
    CHECK_EQ_INT(split_memory_create(&m, kv, rec, 2, map), 0);
    CHECK(!m->ops->partial_removal);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 16), 0);
    add_run(&b, 0, 0, 5);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 3, -1), -ERR_UNSUPPORTED);
    CHECK_EQ_INT(memory_seq_cells(m, 0), 5);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_cells(split_half(m, 1), 1), 1);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_cells(split_half(m, 1), 0), 0);
    CHECK_EQ_INT(memory_seq_cells(m, 1), 5);
    batch_free(&b);
    memory_destroy(m);
    /* refused: halves of different sequence counts, a first half without partial removal, a
     * layer map naming a third half (the halves are destroyed either way) */
    CHECK_EQ_INT(kv_memory_create(&kv, NULL, 32, N_SEQ), 0);
    CHECK_EQ_INT(recurrent_memory_create(&rec, NULL, N_SEQ, N_SEQ + 1), 0);
    CHECK_EQ_INT(split_memory_create(&m, kv, rec, 2, map), -ERR_INVAL);
    CHECK(m == NULL);
    CHECK_EQ_INT(kv_memory_create(&kv, NULL, 32, N_SEQ), 0);
    CHECK_EQ_INT(recurrent_memory_create(&rec, NULL, N_SEQ, N_SEQ), 0);
    CHECK_EQ_INT(split_memory_create(&m, rec, kv, 2, map), -ERR_INVAL);
    CHECK_EQ_INT(kv_memory_create(&kv, NULL, 32, N_SEQ), 0);
    CHECK_EQ_INT(recurrent_memory_create(&rec, NULL, N_SEQ, N_SEQ), 0);
    CHECK_EQ_INT(split_memory_create(&m, kv, rec, 2, (const uint8_t[]){0, 2}), -ERR_INVAL);
}
