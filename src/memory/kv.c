/* kv.c: the unified KV cell pool (see kv.h). Every operation is a linear scan of the cells:
 * the pool is a few thousand cells and these run once per batch, next to a forward pass that
 * reads every cell anyway. */
#include "memory/kv.h"
#include "common/err.h"
#include "common/hugemem.h"
#include "gguf/types.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct memory_snapshot {
    int64_t n;          /* cells saved */
    int32_t lost;       /* the sequence's seq_lost */
    int32_t *pos;       /* [n] */
    int64_t *cell;      /* [n] the cell each came from, and that cell's life then: a cell that */
    uint32_t *life;     /* [n] lives on (shared with others) is taken back without a copy */
    uint8_t *k;         /* [n_layer][n] K rows (k_row bytes each) */
    uint8_t *v;         /* [n_layer][n] V rows (v_row bytes each) */
};

const char *kv_type_name(enum kv_type t) { return t == KV_Q8_0 ? "q8_0" : "f16"; }

int kv_type_parse(const char *name, enum kv_type *out) {
    if (!strcmp(name, "f16")) *out = KV_F16;
    else if (!strcmp(name, "q8_0")) *out = KV_Q8_0;
    else return -ERR_INVAL;
    return 0;
}

int kv_type_ggml(enum kv_type t) { return t == KV_Q8_0 ? GGML_TYPE_Q8_0 : GGML_TYPE_F16; }

/* 34 bytes per 32 values (block_q8_0: an F16 scale and 32 int8), 2 bytes per F16 value. */
size_t kv_type_row_bytes(enum kv_type t, int64_t n) {
    return t == KV_Q8_0 ? (size_t)(n / 32) * 34 : (size_t)n * sizeof(uint16_t);
}

static const struct memory_ops kv_ops;

/* K and V live in huge pages (common/hugemem.h). A decode step's attention reads a layer's cells
 * spread over hundreds of KB right after the weights have streamed through the TLB and caches;
 * with 4 KB pages that is a TLB miss every few cells. Zero-filled, and committed whole at
 * creation (kv_memory_create). */
static size_t kv_k_bytes(const struct kv_memory *kv) {
    return (size_t)kv->shape.n_layer * (size_t)kv->n_cells * kv->k_row;
}

static size_t kv_v_bytes(const struct kv_memory *kv) {
    return (size_t)kv->shape.n_layer * (size_t)kv->n_cells * kv->v_row;
}

static struct kv_memory *kv_of(struct memory *m) { return (struct kv_memory *)m; }
static const struct kv_memory *kv_of_c(const struct memory *m) { return (const struct kv_memory *)m; }

static bool seq_ok(const struct kv_memory *kv, int32_t seq) { return seq >= 0 && seq < kv->base.n_seq_max; }

static void cell_add_seq(struct kv_memory *kv, int64_t c, int32_t seq, int32_t pos) {
    if (kv->pos[c] < 0) {
        kv->pos[c] = pos;
        kv->n_used++;
    }
    kv->seqs[c * kv->n_words + seq / 64] |= UINT64_C(1) << (seq % 64);
    kv->seq_n_cells[seq]++;
    if (pos > kv->seq_pos_max[seq]) kv->seq_pos_max[seq] = pos;
}

static bool cell_empty(const struct kv_memory *kv, int64_t c) {
    for (int32_t w = 0; w < kv->n_words; w++)
        if (kv->seqs[c * kv->n_words + w]) return false;
    return true;
}

/* seq leaves cell c (which holds it); the cell is freed when nobody holds it any more.
 * seq_pos_max is left to the caller to recompute (it changes only for removals at the end). */
static void cell_drop_seq(struct kv_memory *kv, int64_t c, int32_t seq) {
    kv->seqs[c * kv->n_words + seq / 64] &= ~(UINT64_C(1) << (seq % 64));
    kv->seq_n_cells[seq]--;
    if (cell_empty(kv, c)) {
        kv->pos[c] = -1;
        kv->life[c]++; /* its contents die: snapshots that point here must copy */
        kv->n_used--;
        if (c < kv->head) kv->head = c;
    }
}

/* A window's stale cells: each sequence leaves the cells at positions <= its pos_max - window
 * (kv.h), remembering the largest it left. Only when some sequence holds more cells than the
 * window (otherwise there is at most a gap's worth to release, which waits). */
static void release_stale(struct kv_memory *kv) {
    int32_t w = kv->shape.window;
    if (w <= 0) return;
    bool any = false;
    for (int32_t s = 0; s < kv->base.n_seq_max && !any; s++) any = kv->seq_n_cells[s] > w;
    if (!any) return;
    for (int64_t c = 0; c < kv->n_cells; c++) {
        int32_t p = kv->pos[c];
        if (p < 0) continue;
        for (int32_t wd = 0; wd < kv->n_words; wd++)
            for (uint64_t bits = kv->seqs[c * kv->n_words + wd]; bits; bits &= bits - 1) {
                int32_t s = wd * 64 + __builtin_ctzll(bits);
                if (p > kv->seq_pos_max[s] - w) continue;
                if (p > kv->seq_lost[s]) kv->seq_lost[s] = p;
                cell_drop_seq(kv, c, s);
            }
    }
}

/* May seq go on from position p (its cells from p on gone, or never there) with what the
 * window left it? The entry at p needs positions p - window < pos < p. */
static bool window_holds(const struct kv_memory *kv, int32_t seq, int32_t p) {
    return kv->shape.window <= 0 || kv->seq_lost[seq] < 0 || kv->seq_lost[seq] <= p - kv->shape.window;
}

static void recompute_pos_max(struct kv_memory *kv, int32_t seq) {
    int32_t mx = -1;
    for (int64_t c = 0; c < kv->n_cells; c++)
        if (kv->pos[c] > mx && kv_cell_has_seq(kv, c, seq)) mx = kv->pos[c];
    kv->seq_pos_max[seq] = mx;
}

/* Next free cell at or after the head (wrapping); the caller knows one exists. */
static int64_t take_free_cell(struct kv_memory *kv) {
    for (int64_t i = 0; i < kv->n_cells; i++) {
        int64_t c = (kv->head + i) % kv->n_cells;
        if (kv->pos[c] < 0) {
            kv->head = (c + 1) % kv->n_cells;
            return c;
        }
    }
    ASSERT(!"no free cell although n_used < n_cells");
    return -1;
}

static int kv_reserve(struct memory *m, const struct batch *b) {
    struct kv_memory *kv = kv_of(m);
    release_stale(kv); /* nothing reads them any more: the last forward pass is done */
    if (b->n_tokens > kv->n_cells - kv->n_used) return -ERR_NOMEM;
    /* Validate everything before touching anything: all-or-nothing. Entries of one sequence
     * come in increasing position order (batch.h), so each must exceed the previous one of its
     * sequence, the first one the sequence's largest held position. */
    for (int32_t i = 0; i < b->n_tokens; i++) {
        int32_t s = b->seq[i];
        if (!seq_ok(kv, s) || b->pos[i] < 0) return -ERR_INVAL;
        int32_t prev = kv->seq_pos_max[s];
        for (int32_t j = i - 1; j >= 0; j--)
            if (b->seq[j] == s) {
                prev = b->pos[j];
                break;
            }
        if (b->pos[i] <= prev) return -ERR_INVAL;
    }
    for (int32_t i = 0; i < b->n_tokens; i++) {
        int64_t c = take_free_cell(kv);
        cell_add_seq(kv, c, b->seq[i], b->pos[i]);
        kv->placed[i] = (int32_t)c;
    }
    kv->n_placed = b->n_tokens;
    return 0;
}

static int64_t kv_cells_needed(const struct memory *m, int32_t seq, int32_t n_new) {
    const struct kv_memory *kv = kv_of_c(m);
    if (n_new <= 0) return 0;
    if (kv->shape.window <= 0 || !seq_ok(kv, seq)) return n_new; /* one cell per new token */
    /* a window's: what seq will keep more than it holds now (kv.h) */
    int64_t held = kv->seq_n_cells[seq] < kv->shape.window ? kv->seq_n_cells[seq] : kv->shape.window;
    int64_t keep = held + n_new < kv->shape.window ? held + n_new : kv->shape.window;
    return keep - held;
}

static int kv_seq_rm(struct memory *m, int32_t seq, int32_t p0, int32_t p1) {
    struct kv_memory *kv = kv_of(m);
    if (!seq_ok(kv, seq)) return -ERR_INVAL;
    if (p0 < 0) p0 = 0;
    bool tail = p1 < 0 || p1 > kv->seq_pos_max[seq];
    if (tail && p0 == 0) kv->seq_lost[seq] = -1; /* the whole sequence: nothing is missing any more */
    else if (tail && !window_holds(kv, seq, p0)) return -ERR_UNSUPPORTED; /* it could not go on from p0 */
    for (int64_t c = 0; c < kv->n_cells; c++) {
        int32_t p = kv->pos[c];
        if (p >= p0 && (p1 < 0 || p < p1) && kv_cell_has_seq(kv, c, seq)) cell_drop_seq(kv, c, seq);
    }
    recompute_pos_max(kv, seq);
    return 0;
}

static int kv_seq_cp(struct memory *m, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    struct kv_memory *kv = kv_of(m);
    if (!seq_ok(kv, src) || !seq_ok(kv, dst)) return -ERR_INVAL;
    if (src == dst) return 0;
    if (p0 < 0) p0 = 0;
    for (int64_t c = 0; c < kv->n_cells; c++) {
        int32_t p = kv->pos[c];
        if (p >= p0 && (p1 < 0 || p < p1) && kv_cell_has_seq(kv, c, dst)) return -ERR_INVAL;
    }
    /* dst goes on from p1 (or from where src is): the window must have left src what that needs */
    if (p1 >= 0 && p1 <= kv->seq_pos_max[src] && !window_holds(kv, src, p1)) return -ERR_UNSUPPORTED;
    if (kv->seq_lost[src] > kv->seq_lost[dst]) kv->seq_lost[dst] = kv->seq_lost[src];
    for (int64_t c = 0; c < kv->n_cells; c++) {
        int32_t p = kv->pos[c];
        if (p >= p0 && (p1 < 0 || p < p1) && kv_cell_has_seq(kv, c, src)) cell_add_seq(kv, c, dst, p);
    }
    return 0;
}

static int32_t kv_seq_pos_max(const struct memory *m, int32_t seq) {
    const struct kv_memory *kv = kv_of_c(m);
    return seq_ok(kv, seq) ? kv->seq_pos_max[seq] : -1;
}

static int64_t kv_seq_cells(const struct memory *m, int32_t seq) {
    const struct kv_memory *kv = kv_of_c(m);
    return seq_ok(kv, seq) ? kv->seq_n_cells[seq] : 0;
}

/* A scan of the cells (no per-sequence count of unshared cells is kept): for eviction choices,
 * not for every step. */
static int64_t kv_seq_cells_own(const struct memory *m, int32_t seq) {
    const struct kv_memory *kv = kv_of_c(m);
    if (!seq_ok(kv, seq) || kv->seq_n_cells[seq] == 0) return 0;
    int64_t n = 0;
    for (int64_t c = 0; c < kv->n_cells; c++) {
        if (!kv_cell_has_seq(kv, c, seq)) continue;
        const uint64_t *set = kv->seqs + c * kv->n_words;
        bool alone = true;
        for (int32_t w = 0; w < kv->n_words && alone; w++)
            alone = set[w] == (w == seq / 64 ? UINT64_C(1) << (seq % 64) : 0);
        n += alone;
    }
    return n;
}

static int32_t kv_seq_prefix_min(const struct memory *m, int32_t seq) {
    const struct kv_memory *kv = kv_of_c(m);
    if (!seq_ok(kv, seq) || kv->shape.window <= 0 || kv->seq_lost[seq] < 0) return 0;
    return kv->seq_lost[seq] + kv->shape.window; /* window_holds(seq, p) from there on */
}

/* A scan of the used cells' holder sets (for /metrics, not for every step). */
static int64_t kv_cells_held(const struct memory *m, const bool *seqs) {
    const struct kv_memory *kv = kv_of_c(m);
    int64_t n = 0;
    for (int64_t c = 0; c < kv->n_cells; c++) {
        if (kv->pos[c] < 0) continue;
        const uint64_t *set = kv->seqs + c * kv->n_words;
        bool held = false;
        for (int32_t w = 0; w < kv->n_words && !held; w++)
            for (uint64_t x = set[w]; x && !held; x &= x - 1)
                held = seqs[w * 64 + __builtin_ctzll(x)];
        n += held;
    }
    return n;
}

static size_t kv_bytes(const struct kv_shape *s, int64_t n_cells, int32_t n_words, int32_t n_seq_max) {
    size_t kvb = (size_t)s->n_layer * (size_t)n_cells *
                 (kv_type_row_bytes(s->type_k, s->n_embd_k) + kv_type_row_bytes(s->type_v, s->n_embd_v));
    return kvb + (size_t)n_cells * (3 * sizeof(int32_t) + (size_t)n_words * sizeof(uint64_t)) +
           (size_t)n_seq_max * (2 * sizeof(int32_t) + sizeof(int64_t));
}

static void kv_usage(const struct memory *m, struct memory_usage *u) {
    const struct kv_memory *kv = kv_of_c(m);
    u->cells_total = kv->n_cells;
    u->cells_used = kv->n_used;
    u->bytes = kv_bytes(&kv->shape, kv->n_cells, kv->n_words, kv->base.n_seq_max);
    u->states_total = u->states_used = 0;
}

int64_t kv_seq_cell_list(const struct kv_memory *kv, int32_t seq, int32_t *out, int64_t cap) {
    int64_t n = 0;
    for (int64_t c = 0; c < kv->n_cells; c++) {
        if (kv->pos[c] < 0 || !kv_cell_has_seq(kv, c, seq)) continue;
        if (n == cap) return -ERR_TOOBIG; /* checked before the write: out[cap] is not ours */
        out[n++] = (int32_t)c;
    }
    return n;
}

void kv_seq_keep(struct kv_memory *kv, int32_t seq) {
    for (int32_t s = 0; s < kv->base.n_seq_max; s++)
        if (s != seq && kv->seq_n_cells[s] > 0) kv_seq_rm(&kv->base, s, 0, -1);
}

int64_t kv_window_cells(int64_t n_cells, int32_t n_seq_max, int32_t window, int32_t max_batch) {
    if (window <= 0) return n_cells;
    int64_t need = (int64_t)n_seq_max * window + (max_batch > 0 ? max_batch : 0);
    return need < n_cells ? need : n_cells;
}

/* Is cell c one of seq's cells its window has left behind (released at the next reserve)? */
static bool stale(const struct kv_memory *kv, int64_t c, int32_t seq) {
    return kv->shape.window > 0 && kv->pos[c] <= kv->seq_pos_max[seq] - kv->shape.window;
}

static void snapshot_free(struct memory_snapshot *s) {
    if (!s) return;
    free(s->pos);
    free(s->cell);
    free(s->life);
    free(s->k);
    free(s->v);
    free(s);
}

static int kv_seq_save(struct memory *m, int32_t seq, struct memory_snapshot **out) {
    struct kv_memory *kv = kv_of(m);
    if (!seq_ok(kv, seq)) return -ERR_INVAL;
    const struct kv_shape *sh = &kv->shape;
    int64_t n = 0; /* its cells but those the window left behind */
    for (int64_t c = 0; c < kv->n_cells; c++) n += kv->pos[c] >= 0 && kv_cell_has_seq(kv, c, seq) && !stale(kv, c, seq);
    struct memory_snapshot *s = calloc(1, sizeof *s);
    if (!s) return -ERR_NOMEM;
    s->n = n;
    s->lost = kv->seq_lost[seq];
    s->pos = malloc((size_t)(n ? n : 1) * sizeof *s->pos);
    s->cell = malloc((size_t)(n ? n : 1) * sizeof *s->cell);
    s->life = malloc((size_t)(n ? n : 1) * sizeof *s->life);
    size_t nk = (size_t)sh->n_layer * (size_t)n * kv->k_row;
    size_t nv = (size_t)sh->n_layer * (size_t)n * kv->v_row;
    s->k = malloc(nk ? nk : 1);
    s->v = malloc(nv ? nv : 1);
    if (!s->pos || !s->cell || !s->life || !s->k || !s->v) {
        snapshot_free(s);
        return -ERR_NOMEM;
    }
    int64_t i = 0;
    for (int64_t c = 0; c < kv->n_cells; c++) {
        if (kv->pos[c] < 0 || !kv_cell_has_seq(kv, c, seq)) continue;
        if (stale(kv, c, seq)) {
            if (kv->pos[c] > s->lost) s->lost = kv->pos[c]; /* gone once restored */
            continue;
        }
        s->pos[i] = kv->pos[c];
        s->cell[i] = c;
        s->life[i] = kv->life[c];
        for (int32_t l = 0; l < sh->n_layer; l++) {
            memcpy(s->k + ((size_t)l * n + i) * kv->k_row, kv_k_row(kv, l, c), kv->k_row);
            memcpy(s->v + ((size_t)l * n + i) * kv->v_row, kv_v_row(kv, l, c), kv->v_row);
        }
        i++;
    }
    ASSERT(i == n);
    *out = s;
    return 0;
}

/* Can saved cell i be taken back as it is: the same cell, alive since the save (so the same
 * K/V: a cell's rows never change while it lives), at the same position, not yet seq's? Then
 * restoring only adds seq to it, as the sharing was before (n > 1 choices of one prompt). */
static bool snapshot_cell_lives(const struct kv_memory *kv, const struct memory_snapshot *s, int64_t i, int32_t seq) {
    int64_t c = s->cell[i];
    return c < kv->n_cells && kv->life[c] == s->life[i] && kv->pos[c] == s->pos[i] && !kv_cell_has_seq(kv, c, seq);
}

static int64_t kv_restore_cells_needed(const struct memory *m, int32_t seq, const struct memory_snapshot *s) {
    const struct kv_memory *kv = kv_of_c(m);
    int64_t fresh = 0;
    for (int64_t i = 0; i < s->n; i++) fresh += !snapshot_cell_lives(kv, s, i, seq);
    return fresh;
}

static int kv_seq_restore(struct memory *m, int32_t seq, const struct memory_snapshot *s) {
    struct kv_memory *kv = kv_of(m);
    if (!seq_ok(kv, seq)) return -ERR_INVAL;
    if (kv->seq_n_cells[seq] > 0) return -ERR_STATE;  /* restore into an empty sequence only */
    if (kv_restore_cells_needed(m, seq, s) > kv->n_cells - kv->n_used) return -ERR_NOMEM;
    const struct kv_shape *sh = &kv->shape;
    kv->seq_lost[seq] = s->lost;
    for (int64_t i = 0; i < s->n; i++) {
        if (snapshot_cell_lives(kv, s, i, seq)) {
            cell_add_seq(kv, s->cell[i], seq, s->pos[i]);
            continue;
        }
        int64_t c = take_free_cell(kv);
        cell_add_seq(kv, c, seq, s->pos[i]);
        for (int32_t l = 0; l < sh->n_layer; l++) {
            memcpy(kv_k_row(kv, l, c), s->k + ((size_t)l * s->n + i) * kv->k_row, kv->k_row);
            memcpy(kv_v_row(kv, l, c), s->v + ((size_t)l * s->n + i) * kv->v_row, kv->v_row);
        }
    }
    return 0;
}

static void kv_destroy(struct memory *m) {
    struct kv_memory *kv = kv_of(m);
    free(kv->pos);
    free(kv->life);
    free(kv->seqs);
    free(kv->seq_pos_max);
    free(kv->seq_lost);
    free(kv->seq_n_cells);
    free(kv->placed);
    hugemem_free(kv->k, kv_k_bytes(kv));
    hugemem_free(kv->v, kv_v_bytes(kv));
    free(kv);
}

static const struct memory_ops kv_ops = {
    .kind = "kv",
    .partial_removal = true,
    .fixed_seq_cells = false,
    .reserve = kv_reserve,
    .cells_needed = kv_cells_needed,
    .seq_rm = kv_seq_rm,
    .seq_cp = kv_seq_cp,
    .seq_pos_max = kv_seq_pos_max,
    .seq_cells = kv_seq_cells,
    .seq_cells_own = kv_seq_cells_own,
    .usage = kv_usage,
    .seq_save = kv_seq_save,
    .seq_restore = kv_seq_restore,
    .restore_cells_needed = kv_restore_cells_needed,
    .seq_prefix_min = kv_seq_prefix_min,
    .snapshot_free = snapshot_free,
    .destroy = kv_destroy,
    .cells_held = kv_cells_held,
};

struct kv_memory *kv_from_memory(struct memory *m) {
    return m && m->ops == &kv_ops ? (struct kv_memory *)m : NULL;
}

int kv_memory_create(struct memory **out, const struct kv_shape *shape, int64_t n_cells, int32_t n_seq_max) {
    struct kv_shape sh = shape ? *shape : (struct kv_shape){0};
    if (n_cells <= 0 || n_cells > INT32_MAX || n_seq_max <= 0 || sh.n_layer < 0 || sh.n_embd_k < 0 ||
        sh.n_embd_v < 0 || sh.window < 0 || (unsigned)sh.type_k > KV_Q8_0 || (unsigned)sh.type_v > KV_Q8_0 ||
        (sh.type_k == KV_Q8_0 && sh.n_embd_k % 32) || (sh.type_v == KV_Q8_0 && sh.n_embd_v % 32))
        return -ERR_INVAL;
    if (sh.n_layer == 0) sh.n_embd_k = sh.n_embd_v = 0; /* the window stays: bookkeeping has one too */
    struct kv_memory *kv = calloc(1, sizeof *kv);
    if (!kv) return -ERR_NOMEM;
    kv->base = (struct memory){.ops = &kv_ops, .n_seq_max = n_seq_max};
    kv->shape = sh;
    kv->k_row = kv_type_row_bytes(sh.type_k, sh.n_embd_k);
    kv->v_row = kv_type_row_bytes(sh.type_v, sh.n_embd_v);
    kv->n_cells = n_cells;
    kv->n_words = (n_seq_max + 63) / 64;
    kv->pos = malloc((size_t)n_cells * sizeof *kv->pos);
    kv->life = calloc((size_t)n_cells, sizeof *kv->life);
    kv->seqs = calloc((size_t)n_cells * (size_t)kv->n_words, sizeof *kv->seqs);
    kv->seq_pos_max = malloc((size_t)n_seq_max * sizeof *kv->seq_pos_max);
    kv->seq_lost = malloc((size_t)n_seq_max * sizeof *kv->seq_lost);
    kv->seq_n_cells = calloc((size_t)n_seq_max, sizeof *kv->seq_n_cells);
    kv->placed = calloc((size_t)n_cells, sizeof *kv->placed);
    bool ok = kv->pos && kv->life && kv->seqs && kv->seq_pos_max && kv->seq_lost && kv->seq_n_cells && kv->placed;
    if (ok && sh.n_layer > 0) {
        /* zero-filled: a cell's K/V is written before it is ever visible, but zeros keep
         * save/restore of a never-forwarded (bookkeeping-style) cell deterministic. */
        kv->k = hugemem_alloc(kv_k_bytes(kv));
        kv->v = hugemem_alloc(kv_v_bytes(kv));
        ok = kv->k && kv->v;
        /* Backed now, not when a step first writes a cell of a fresh page: cells are laid out
         * [layer][cell], so the step that first reached a page boundary would fault 2 x n_layer
         * huge pages at once (see hugemem_commit for what one costs). It also makes the memory
         * the budget promises resident from the start, as the startup log says, and a budget
         * beyond the machine's available memory an error here rather than an OOM kill later. */
        int64_t avail = ok ? hugemem_available() : -1;
        if (avail >= 0 && (uint64_t)avail < (uint64_t)kv_k_bytes(kv) + kv_v_bytes(kv)) ok = false; /* -ERR_NOMEM */
        if (ok) {
            hugemem_commit(kv->k, kv_k_bytes(kv));
            hugemem_commit(kv->v, kv_v_bytes(kv));
        }
    }
    if (!ok) {
        kv_destroy(&kv->base);
        return -ERR_NOMEM;
    }
    for (int64_t c = 0; c < n_cells; c++) kv->pos[c] = -1;
    for (int32_t s = 0; s < n_seq_max; s++) kv->seq_pos_max[s] = kv->seq_lost[s] = -1;
    *out = &kv->base;
    return 0;
}
