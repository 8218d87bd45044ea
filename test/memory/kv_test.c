#include "test.h"
#include "common/err.h"
#include "memory/kv.h"

#include <stdlib.h>

/* Fill b with n entries of seq starting at position p0. */
static void add_run(struct batch *b, int32_t seq, int32_t p0, int32_t n) {
    for (int32_t i = 0; i < n; i++) batch_add(b, 100 + i, p0 + i, seq, i == n - 1);
}

/* Cells a query of seq at pos may attend to. */
static int64_t n_visible(struct kv_memory *kv, int32_t seq, int32_t pos) {
    int64_t n = 0;
    for (int64_t c = 0; c < kv->n_cells; c++) n += kv_cell_visible(kv, c, seq, pos);
    return n;
}

TEST(kv_reserve_places_every_entry_in_a_distinct_cell) {
    struct memory *m;
    CHECK_EQ_INT(kv_memory_create(&m, NULL, 16, 4), 0);
    struct kv_memory *kv = kv_from_memory(m);
    CHECK(kv != NULL);
    CHECK_EQ_STR(m->ops->kind, "kv");
    CHECK(m->ops->partial_removal && !m->ops->fixed_seq_cells);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 16), 0);
    add_run(&b, 0, 0, 5);
    add_run(&b, 2, 0, 3);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(kv->n_placed, 8);
    for (int i = 0; i < 8; i++) {
        int32_t c = kv_batch_cell(kv, i);
        CHECK(c >= 0 && c < 16);
        CHECK_EQ_INT(kv->pos[c], b.pos[i]);
        CHECK(kv_cell_has_seq(kv, c, b.seq[i]));
        for (int j = 0; j < i; j++) CHECK(kv_batch_cell(kv, j) != c);
    }
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 4);
    CHECK_EQ_INT(memory_seq_pos_max(m, 2), 2);
    CHECK_EQ_INT(memory_seq_pos_max(m, 1), -1);
    CHECK_EQ_INT(memory_seq_cells(m, 0), 5);
    CHECK_EQ_INT(memory_seq_cells(m, 2), 3);
    CHECK_EQ_INT(memory_cells_needed(m, 0, 7), 7);
    struct memory_usage u;
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_total, 16);
    CHECK_EQ_INT(u.cells_used, 8);
    /* The mask: causal within a sequence, nothing across sequences. */
    CHECK_EQ_INT(n_visible(kv, 0, 0), 1);
    CHECK_EQ_INT(n_visible(kv, 0, 3), 4);
    CHECK_EQ_INT(n_visible(kv, 0, 100), 5);
    CHECK_EQ_INT(n_visible(kv, 2, 100), 3);
    CHECK_EQ_INT(n_visible(kv, 1, 100), 0);
    batch_free(&b);
    memory_destroy(m);
}

TEST(kv_reserve_fails_cleanly_when_full_or_invalid) {
    struct memory *m;
    CHECK_EQ_INT(kv_memory_create(&m, NULL, 8, 2), 0);
    struct kv_memory *kv = kv_from_memory(m);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 16), 0);
    add_run(&b, 0, 0, 6);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    batch_clear(&b);
    add_run(&b, 1, 0, 3);  /* 3 > 2 free cells */
    CHECK_EQ_INT(memory_reserve(m, &b), -ERR_NOMEM);
    struct memory_usage u;
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 6);
    CHECK_EQ_INT(memory_seq_cells(m, 1), 0);
    CHECK_EQ_INT(memory_seq_pos_max(m, 1), -1);
    CHECK_EQ_INT(kv->n_placed, 6);  /* the failed call left the last placement alone */
    /* Bad sequence id, and a position the sequence already holds: refused, nothing changed. */
    batch_clear(&b);
    add_run(&b, 2, 0, 1);
    CHECK_EQ_INT(memory_reserve(m, &b), -ERR_INVAL);
    batch_clear(&b);
    add_run(&b, 1, 0, 1);
    add_run(&b, 0, 5, 1);
    CHECK_EQ_INT(memory_reserve(m, &b), -ERR_INVAL);
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 6);
    CHECK_EQ_INT(memory_seq_cells(m, 1), 0);
    /* Exactly filling the pool works. */
    batch_clear(&b);
    add_run(&b, 1, 0, 2);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 8);
    /* After removals the freed cells are found again. */
    CHECK_EQ_INT(memory_seq_rm(m, 0, 0, -1), 0);
    batch_clear(&b);
    add_run(&b, 0, 0, 6);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    batch_free(&b);
    memory_destroy(m);
    CHECK_EQ_INT(kv_memory_create(&m, NULL, 0, 2), -ERR_INVAL);
    CHECK_EQ_INT(kv_memory_create(&m, NULL, 8, 0), -ERR_INVAL);
}

TEST(kv_seq_rm_ranges) {
    struct memory *m;
    CHECK_EQ_INT(kv_memory_create(&m, NULL, 32, 2), 0);
    struct kv_memory *kv = kv_from_memory(m);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 32), 0);
    add_run(&b, 0, 0, 10);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 7, -1), 0);  /* drop the tail */
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 6);
    CHECK_EQ_INT(memory_seq_cells(m, 0), 7);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 2, 4), 0);   /* a hole in the middle */
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 6);
    CHECK_EQ_INT(memory_seq_cells(m, 0), 5);
    CHECK_EQ_INT(n_visible(kv, 0, 3), 2);
    /* Continue after the tail removal: positions above the largest held are accepted. */
    batch_clear(&b);
    add_run(&b, 0, 7, 3);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 9);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 0, -1), 0);
    struct memory_usage u;
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 0);
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), -1);
    CHECK_EQ_INT(memory_seq_rm(m, 5, 0, -1), -ERR_INVAL);
    batch_free(&b);
    memory_destroy(m);
}

TEST(kv_shared_prefix_survives_removal_of_its_first_owner) {
    struct memory *m;
    CHECK_EQ_INT(kv_memory_create(&m, NULL, 32, 3), 0);
    struct kv_memory *kv = kv_from_memory(m);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 32), 0);
    add_run(&b, 0, 0, 8);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    /* Sequence 1 shares the first 5 positions: no new cells. */
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, 5), 0);
    struct memory_usage u;
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 8);
    CHECK_EQ_INT(memory_seq_cells(m, 1), 5);
    CHECK_EQ_INT(memory_seq_pos_max(m, 1), 4);
    CHECK_EQ_INT(n_visible(kv, 1, 100), 5);
    /* Copying onto cells dst already holds is refused. */
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, -1), -ERR_INVAL);
    /* Sequence 1 continues on its own. */
    batch_clear(&b);
    add_run(&b, 1, 5, 2);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(n_visible(kv, 1, 100), 7);
    CHECK_EQ_INT(n_visible(kv, 0, 100), 8);
    /* What removing each would free: its unshared cells. */
    CHECK_EQ_INT(memory_seq_cells_own(m, 0), 3);
    CHECK_EQ_INT(memory_seq_cells_own(m, 1), 2);
    /* What a set of sequences holds, shared cells once. */
    bool only0[3] = {true, false, false}, only1[3] = {false, true, false}, both[3] = {true, true, false};
    bool none[3] = {false, false, false};
    CHECK_EQ_INT(memory_cells_held(m, only0), 8);
    CHECK_EQ_INT(memory_cells_held(m, only1), 7);
    CHECK_EQ_INT(memory_cells_held(m, both), 10);
    CHECK_EQ_INT(memory_cells_held(m, none), 0);
    CHECK_EQ_INT(memory_seq_cells_own(m, 2), 0);
    /* Sequence 0 goes: its private cells are freed, the shared ones stay for 1. */
    CHECK_EQ_INT(memory_seq_rm(m, 0, 0, -1), 0);
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 7);
    CHECK_EQ_INT(n_visible(kv, 0, 100), 0);
    CHECK_EQ_INT(n_visible(kv, 1, 100), 7);
    CHECK_EQ_INT(n_visible(kv, 1, 4), 5);
    /* seq_keep: 2 shares 1's cells, keep 2 only. */
    CHECK_EQ_INT(memory_seq_cp(m, 1, 2, 0, -1), 0);
    kv_seq_keep(kv, 2);
    CHECK_EQ_INT(memory_seq_cells(m, 1), 0);
    CHECK_EQ_INT(memory_seq_cells(m, 2), 7);
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 7);
    int32_t list[32];
    CHECK_EQ_INT(kv_seq_cell_list(kv, 2, list, 32), 7);
    CHECK_EQ_INT(kv_seq_cell_list(kv, 2, list, 7), 7); /* exactly the room */
    /* Less room than cells: an error, and nothing written past the room (the check is the
     * callee's, before any write). */
    for (int i = 0; i < 32; i++) list[i] = -7;
    CHECK_EQ_INT(kv_seq_cell_list(kv, 2, list, 4), -ERR_TOOBIG);
    CHECK(list[3] >= 0);
    for (int i = 4; i < 32; i++) CHECK_EQ_INT(list[i], -7);
    CHECK_EQ_INT(kv_seq_cell_list(kv, 2, list, 0), -ERR_TOOBIG);
    CHECK_EQ_INT(kv_seq_cell_list(kv, 1, list, 0), 0); /* seq 1 holds nothing: no room needed */
    batch_free(&b);
    memory_destroy(m);
}

TEST(kv_many_sequences_use_several_bitset_words) {
    struct memory *m;
    CHECK_EQ_INT(kv_memory_create(&m, NULL, 8, 130), 0);
    struct kv_memory *kv = kv_from_memory(m);
    CHECK_EQ_INT(kv->n_words, 3);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 8), 0);
    add_run(&b, 129, 0, 2);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_seq_cp(m, 129, 64, 0, -1), 0);
    CHECK_EQ_INT(n_visible(kv, 64, 9), 2);
    bool held[130] = {0};
    CHECK_EQ_INT(memory_cells_held(m, held), 0);
    held[64] = true; /* a holder in the second word of the set */
    CHECK_EQ_INT(memory_cells_held(m, held), 2);
    held[64] = false, held[129] = true;
    CHECK_EQ_INT(memory_cells_held(m, held), 2);
    CHECK_EQ_INT(n_visible(kv, 0, 9), 0);
    CHECK_EQ_INT(n_visible(kv, 1, 9), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 129, 0, -1), 0);
    CHECK_EQ_INT(n_visible(kv, 64, 9), 2);
    batch_free(&b);
    memory_destroy(m);
}

/* Stand in for the forward pass: rows of the last reserved batch derived from (layer, position). */
/* Byte e of a cell's K (salt 0) or V (salt 1) row in layer l at position p: any cell type's
 * bytes, kept as they are. */
static uint8_t row_byte(int l, int32_t p, size_t e, int salt) { return (uint8_t)(97 * l + 13 * p + 7 * e + 101 * salt); }

static void write_rows(struct kv_memory *kv, const struct batch *b) {
    for (int32_t i = 0; i < b->n_tokens; i++)
        for (int l = 0; l < kv->shape.n_layer; l++) {
            int32_t c = kv_batch_cell(kv, i);
            uint8_t *k = kv_k_row(kv, l, c), *v = kv_v_row(kv, l, c);
            for (size_t e = 0; e < kv->k_row; e++) k[e] = row_byte(l, b->pos[i], e, 0);
            for (size_t e = 0; e < kv->v_row; e++) v[e] = row_byte(l, b->pos[i], e, 1);
        }
}

/* Every cell seq sees holds the rows write_rows gave its position; returns how many it sees. */
static int64_t check_rows(struct kv_memory *kv, int32_t seq, int *bad) {
    int64_t n = 0;
    for (int64_t c = 0; c < kv->n_cells; c++) {
        if (!kv_cell_visible(kv, c, seq, 1 << 20)) continue;
        n++;
        int32_t p = kv->pos[c];
        for (int l = 0; l < kv->shape.n_layer; l++) {
            const uint8_t *k = kv_k_row(kv, l, c), *v = kv_v_row(kv, l, c);
            for (size_t e = 0; e < kv->k_row; e++) *bad += k[e] != row_byte(l, p, e, 0);
            for (size_t e = 0; e < kv->v_row; e++) *bad += v[e] != row_byte(l, p, e, 1);
        }
    }
    return n;
}

/* A choice of an n > 1 request shares its prompt's cells with its siblings: preempted (saved,
 * removed) and restored, it shares them again instead of holding copies; cells that died
 * meanwhile (the sibling ended) are copied back from the snapshot. */
TEST(kv_restore_shares_again_the_cells_still_shared) {
    struct kv_shape sh = {.n_layer = 2, .n_embd_k = 4, .n_embd_v = 6};
    struct memory *m;
    CHECK_EQ_INT(kv_memory_create(&m, &sh, 32, 4), 0);
    struct kv_memory *kv = kv_from_memory(m);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 32), 0);
    add_run(&b, 0, 0, 8); /* the prompt */
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    write_rows(kv, &b);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, -1), 0); /* choice 1 shares it */
    batch_clear(&b);
    add_run(&b, 0, 8, 3);
    add_run(&b, 1, 8, 5);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    write_rows(kv, &b);
    struct memory_usage u;
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 8 + 3 + 5);

    struct memory_snapshot *snap;
    CHECK_EQ_INT(memory_seq_save(m, 1, &snap), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 1, 0, -1), 0);
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 8 + 3);
    CHECK_EQ_INT(memory_restore_cells_needed(m, 1, snap), 5); /* only its own tokens */
    CHECK_EQ_INT(memory_seq_restore(m, 1, snap), 0);
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 8 + 3 + 5);
    CHECK_EQ_INT(memory_seq_cells(m, 1), 13);
    CHECK_EQ_INT(memory_seq_cells_own(m, 1), 5);
    CHECK_EQ_INT(memory_seq_pos_max(m, 1), 12);
    int bad = 0;
    CHECK_EQ_INT(check_rows(kv, 1, &bad), 13);
    CHECK_EQ_INT(bad, 0);

    /* The sibling ends while 1 is out, and another sequence reuses its cells: all 13 are copied. */
    memory_snapshot_free(m, snap);
    CHECK_EQ_INT(memory_seq_save(m, 1, &snap), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 1, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 0, -1), 0);
    batch_clear(&b);
    add_run(&b, 2, 0, 11);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    write_rows(kv, &b); /* the same positions, and the same rows: only the cells' lives tell */
    CHECK_EQ_INT(memory_restore_cells_needed(m, 1, snap), 13);
    CHECK_EQ_INT(memory_seq_restore(m, 1, snap), 0);
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 11 + 13);
    CHECK_EQ_INT(memory_seq_cells_own(m, 1), 13);
    bad = 0;
    CHECK_EQ_INT(check_rows(kv, 1, &bad), 13);
    CHECK_EQ_INT(bad, 0);
    memory_snapshot_free(m, snap);
    batch_free(&b);
    memory_destroy(m);
}

TEST(kv_save_restore_round_trip_keeps_positions_and_rows) {
    struct kv_shape sh = {.n_layer = 2, .n_embd_k = 4, .n_embd_v = 6};
    struct memory *m;
    CHECK_EQ_INT(kv_memory_create(&m, &sh, 12, 2), 0);
    struct kv_memory *kv = kv_from_memory(m);
    struct memory_usage u;
    memory_usage(m, &u);
    CHECK(u.bytes >= 2 * 12 * (4 + 6) * sizeof(uint16_t));
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 12), 0);
    add_run(&b, 0, 0, 5);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    write_rows(kv, &b);
    struct memory_snapshot *snap;
    CHECK_EQ_INT(memory_seq_save(m, 0, &snap), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 0, -1), 0);
    /* Another sequence takes some cells meanwhile, so the restore lands elsewhere. */
    batch_clear(&b);
    add_run(&b, 1, 0, 4);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_seq_restore(m, 1, snap), -ERR_STATE);  /* 1 is not empty */
    CHECK_EQ_INT(memory_seq_restore(m, 0, snap), 0);
    CHECK_EQ_INT(memory_seq_cells(m, 0), 5);
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 4);
    int bad = 0;
    CHECK_EQ_INT(check_rows(kv, 0, &bad), 5);
    CHECK_EQ_INT(bad, 0);
    /* Restoring needs as many free cells as saved: 12 - 9 used = 3 < 5. */
    memory_snapshot_free(m, snap);
    struct memory_snapshot *snap0;
    CHECK_EQ_INT(memory_seq_save(m, 0, &snap0), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 0, -1), 0);
    batch_clear(&b);
    add_run(&b, 1, 4, 4);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    memory_usage(m, &u);
    int64_t used = u.cells_used;
    CHECK_EQ_INT(memory_seq_restore(m, 0, snap0), -ERR_NOMEM);
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, used);
    CHECK_EQ_INT(memory_seq_cells(m, 0), 0);
    memory_snapshot_free(m, snap0);
    batch_free(&b);
    memory_destroy(m);
}

/* Lowest and highest position seq holds (-1 when none). */
static void held_range(struct kv_memory *kv, int32_t seq, int32_t *lo, int32_t *hi) {
    *lo = *hi = -1;
    for (int64_t c = 0; c < kv->n_cells; c++) {
        if (kv->pos[c] < 0 || !kv_cell_has_seq(kv, c, seq)) continue;
        if (*lo < 0 || kv->pos[c] < *lo) *lo = kv->pos[c];
        if (kv->pos[c] > *hi) *hi = kv->pos[c];
    }
}

/* A window of 4: a 10-token prompt is held whole until the next reserve (its forward pass reads
 * it), which releases what no later query sees; decode steps then hold 4 cells, the last 4
 * positions, whatever the length. */
TEST(kv_window_releases_cells_no_query_sees_again) {
    struct memory *m;
    CHECK_EQ_INT(kv_memory_create(&m, &(struct kv_shape){.window = 4}, 32, 2), 0);
    struct kv_memory *kv = kv_from_memory(m);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 32), 0);
    CHECK_EQ_INT(memory_cells_needed(m, 0, 10), 4); /* what it keeps: a window */
    add_run(&b, 0, 0, 10);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_seq_cells(m, 0), 10);
    CHECK_EQ_INT(memory_cells_needed(m, 0, 3), 0);  /* it holds a whole window already */
    int32_t lo, hi;
    for (int32_t p = 10; p < 30; p++) {
        batch_clear(&b);
        add_run(&b, 0, p, 1);
        CHECK_EQ_INT(memory_reserve(m, &b), 0);
        /* before this step's token: positions p-4 .. p-1, plus the token */
        held_range(kv, 0, &lo, &hi);
        CHECK_EQ_INT(lo, p - 4);
        CHECK_EQ_INT(hi, p);
        CHECK_EQ_INT(memory_seq_cells(m, 0), 5);
        struct memory_usage u;
        memory_usage(m, &u);
        CHECK_EQ_INT(u.cells_used, 5);
        /* the token sees the 4 positions p-3 .. p */
        int64_t vis = 0;
        for (int64_t c = 0; c < kv->n_cells; c++)
            vis += kv_cell_visible(kv, c, 0, p) && kv->pos[c] > p - kv->shape.window;
        CHECK_EQ_INT(vis, 4);
    }
    /* a sequence shorter than the window keeps everything */
    batch_clear(&b);
    add_run(&b, 1, 0, 3);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    batch_clear(&b);
    add_run(&b, 1, 3, 1);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    held_range(kv, 1, &lo, &hi);
    CHECK_EQ_INT(lo, 0);
    CHECK_EQ_INT(memory_cells_needed(m, 1, 5), 0);
    CHECK_EQ_INT(memory_seq_cells(m, 1), 4);
    CHECK_EQ_INT(kv_window_cells(4096, 64, 512, 512), 4096);
    CHECK_EQ_INT(kv_window_cells(100000, 3, 512, 256), 3 * 512 + 256);
    CHECK_EQ_INT(kv_window_cells(100, 3, 0, 16), 100);
    CHECK_EQ_INT(kv_memory_create(&(struct memory *){NULL}, &(struct kv_shape){.window = -1}, 8, 1), -ERR_INVAL);
    batch_free(&b);
    memory_destroy(m);
}

/* What the window released is gone: removing a tail or copying a prefix that would need it is
 * refused, nothing changed; what it still holds goes as without a window. */
TEST(kv_window_refuses_what_it_released) {
    struct memory *m;
    CHECK_EQ_INT(kv_memory_create(&m, &(struct kv_shape){.window = 4}, 32, 3), 0);
    struct kv_memory *kv = kv_from_memory(m);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 32), 0);
    add_run(&b, 0, 0, 12);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    /* nothing released yet: any tail goes, any prefix copies (and that sequence can go on) */
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, 3), 0);
    CHECK_EQ_INT(memory_seq_cells(m, 1), 3);
    CHECK_EQ_INT(memory_seq_rm(m, 1, 0, -1), 0);
    batch_clear(&b);
    add_run(&b, 0, 12, 1); /* releases 0 .. 7 */
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_seq_cells(m, 0), 5);
    /* going on from 12 needs 9 .. 11: held; from 11 needs 8 .. 10: held; from 10 needs 7: gone */
    CHECK_EQ_INT(memory_seq_rm(m, 0, 10, -1), -ERR_UNSUPPORTED);
    CHECK_EQ_INT(memory_seq_cells(m, 0), 5);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, 10), -ERR_UNSUPPORTED);
    CHECK_EQ_INT(memory_seq_cells(m, 1), 0);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, 11), 0); /* a prefix ending within the window */
    CHECK_EQ_INT(memory_seq_cells(m, 1), 3);        /* 8, 9, 10 */
    CHECK_EQ_INT(memory_seq_pos_max(m, 1), 10);
    /* the copy lacks what its source lacked: it cannot go back further either */
    CHECK_EQ_INT(memory_seq_rm(m, 1, 10, -1), -ERR_UNSUPPORTED);
    CHECK_EQ_INT(memory_seq_rm(m, 1, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 2, 0, -1), 0); /* a whole copy always goes */
    CHECK_EQ_INT(memory_seq_cells(m, 2), 5);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 12, -1), 0);   /* give back the last token */
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 11);
    batch_clear(&b);
    add_run(&b, 0, 12, 1);                          /* and run it again */
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 8, 10), 0);    /* a hole: no query needs it back */
    CHECK_EQ_INT(memory_seq_rm(m, 0, 0, -1), 0);    /* the whole sequence always goes */
    batch_clear(&b);
    add_run(&b, 0, 0, 2);                           /* and starts afresh: nothing is missing */
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 1, -1), 0);
    (void)kv;
    batch_free(&b);
    memory_destroy(m);
}

/* A snapshot leaves out the cells the window has left behind, and what the restored sequence
 * lacks it still lacks; its rows come back. */
TEST(kv_window_save_restore) {
    struct kv_shape sh = {.n_layer = 2, .n_embd_k = 4, .n_embd_v = 6, .window = 4};
    struct memory *m;
    CHECK_EQ_INT(kv_memory_create(&m, &sh, 24, 2), 0);
    struct kv_memory *kv = kv_from_memory(m);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 24), 0);
    add_run(&b, 0, 0, 10);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    write_rows(kv, &b);
    struct memory_snapshot *snap;
    CHECK_EQ_INT(memory_seq_save(m, 0, &snap), 0);   /* 6 .. 9: what a next token needs */
    CHECK_EQ_INT(memory_seq_rm(m, 0, 0, -1), 0);
    CHECK_EQ_INT(memory_restore_cells_needed(m, 0, snap), 4);
    CHECK_EQ_INT(memory_seq_restore(m, 0, snap), 0);
    CHECK_EQ_INT(memory_seq_cells(m, 0), 4);
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 9);
    int bad = 0;
    CHECK_EQ_INT(check_rows(kv, 0, &bad), 4);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 9, -1), 0);      /* the last token: held */
    CHECK_EQ_INT(memory_seq_rm(m, 0, 8, -1), -ERR_UNSUPPORTED); /* 5 was left behind */
    memory_snapshot_free(m, snap);
    batch_free(&b);
    memory_destroy(m);
}

/* Q8_0 cells (per K and V): rows of 34 bytes per 32 values, the pool's bytes 17/32 of F16's for
 * the K/V part; saved and restored byte for byte; rows that are not whole blocks refused. */
TEST(kv_q8_0_cells_save_restore_and_size) {
    struct kv_shape f16 = {.n_layer = 2, .n_embd_k = 64, .n_embd_v = 32};
    struct kv_shape q8 = f16, mixed = f16;
    q8.type_k = q8.type_v = KV_Q8_0;
    mixed.type_v = KV_Q8_0;
    struct memory *mf, *mq, *mm;
    CHECK_EQ_INT(kv_memory_create(&mf, &f16, 16, 2), 0);
    CHECK_EQ_INT(kv_memory_create(&mq, &q8, 16, 2), 0);
    CHECK_EQ_INT(kv_memory_create(&mm, &mixed, 16, 2), 0);
    struct kv_memory *kq = kv_from_memory(mq), *km = kv_from_memory(mm);
    CHECK_EQ_INT(kq->k_row, 2 * 34);
    CHECK_EQ_INT(kq->v_row, 34);
    CHECK_EQ_INT(km->k_row, 64 * 2);
    CHECK_EQ_INT(km->v_row, 34);
    struct memory_usage uf, uq;
    memory_usage(mf, &uf);
    memory_usage(mq, &uq);
    CHECK_EQ_INT(uf.bytes - uq.bytes, 2 * 16 * ((64 + 32) * 2 - (2 + 1) * 34)); /* bookkeeping alike */
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 16), 0);
    add_run(&b, 0, 0, 6);
    CHECK_EQ_INT(memory_reserve(mq, &b), 0);
    write_rows(kq, &b);
    struct memory_snapshot *snap;
    CHECK_EQ_INT(memory_seq_save(mq, 0, &snap), 0);
    CHECK_EQ_INT(memory_seq_rm(mq, 0, 0, -1), 0);
    batch_clear(&b);
    add_run(&b, 1, 0, 5); /* takes the cells the sequence had: the restore copies elsewhere */
    CHECK_EQ_INT(memory_reserve(mq, &b), 0);
    CHECK_EQ_INT(memory_seq_restore(mq, 0, snap), 0);
    int bad = 0;
    CHECK_EQ_INT(check_rows(kq, 0, &bad), 6);
    CHECK_EQ_INT(bad, 0);
    memory_snapshot_free(mq, snap);
    batch_free(&b);
    memory_destroy(mf);
    memory_destroy(mq);
    memory_destroy(mm);
    struct memory *m = NULL;
    struct kv_shape odd = {.n_layer = 1, .n_embd_k = 48, .n_embd_v = 64, .type_k = KV_Q8_0};
    CHECK_EQ_INT(kv_memory_create(&m, &odd, 16, 2), -ERR_INVAL);
    enum kv_type ty;
    CHECK_EQ_INT(kv_type_parse("q8_0", &ty), 0);
    CHECK_EQ_INT(ty, KV_Q8_0);
    CHECK_EQ_STR(kv_type_name(ty), "q8_0");
    CHECK_EQ_INT(kv_type_parse("q4_0", &ty), -ERR_INVAL);
}
