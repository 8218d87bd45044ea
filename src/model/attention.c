/* attention.c: the attention strategies behind attention.h.
 *
 * Attention is done per (sequence, kv head) as two products over that sequence's cells: scores
 * = Q.K^T, masked by the cells' positions and softmaxed (attn_softmax_row), then out = P.V. A
 * sequence's cells are ordered by position, so a chunk of entries (in increasing positions) only
 * multiplies the prefix of cells its last entry sees. K and V are read back from the F16 cells
 * (also for the batch's own tokens), as the reference does.
 *
 * attn_plan sorts the entries of a step by sequence, once per forward pass:
 *   - decode-sized sequences (all their entries one chunk too small for sgemm, or at most
 *     ATT_DIRECT_ENTRIES entries: a speculative step's verify rows) get their cells
 *     listed into an arena (dseq); attn_layer runs all their heads in one parallel job: a GQA
 *     group's query rows read each K and V row once, each group unit (an entry's kv head) whole
 *     on one thread where there are at least as many units as threads (unit_items), else split
 *     in items of even size across the threads (dec_items);
 *   - the other sequences (gseq) are attended one at a time by attend_seq, in chunks of even
 *     sizes of up to ATT_CHUNK_ENTRIES entries: a chunk too small for sgemm on the F16 cells
 *     (direct_rows), a bigger one as blocks of query rows (a kv head's, up to ATT_BLOCK_ROWS)
 *     shared by the compute threads (chunk_blocks): on the F16 cells as stored in tiles of 16 cells
 *     (attn_rows_f16) when the sequence has at most ATT_DIRECT_CHUNKS chunks in the step, else
 *     two sgemm calls around the softmax on F32 copies of the cells gathered once per layer
 *     (attn_rows_f32, V multiplied as stored); with `reference` per kv head in the reference's
 *     dot orders (chunk_reference).
 * A sliding window (attn_params.window) starts a chunk's cells at the first one its first entry
 * sees (cells are sorted by position: the ones no entry of the chunk sees are a prefix), and each
 * row masks the cells its own entry no longer sees (attn_mask_window) before the softmax: every
 * strategy takes the same cells for a chunk, so a row's numbers do not depend on the strategy.
 */
#include "model/attention.h"
#include "common/err.h"
#include "math/attn.h"
#include "math/quant.h"

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Most entries of one sequence per attention chunk: bounds the score buffer, keeps sgemm shapes big. */
enum { ATT_CHUNK_ENTRIES = 64 };
/* Most query rows per block of a chunk on the sgemm path (attn_rows_f32: one block per job item,
 * so a chunk of one kv head is shared by the threads). Every block packs its kv head's K and V
 * again for sgemm, so bigger blocks cost less CPU (a long prompt on one thread shows it:
 * build/bench/forward_bench bench-models/smollm2-135m-q8_0.gguf --prefill 3000 --threads 1, the
 * model made by scripts/bench.d/40-forward);
 * see split_chunk for how a chunk is split. Each thread that takes part has scores for a block
 * (ATT_BLOCK_ROWS x n_ctx floats), so at most ATT_CHUNK_SLOTS threads do. */
enum { ATT_BLOCK_ROWS = 96, ATT_CHUNK_SLOTS = 8 };
/* The reference pads its attention rows (n_kv) to a multiple of this many cells. */
enum { REF_KV_PAD = 256 };
/* A sequence with at most this many entries in a step attends on the direct path whatever its
 * GQA group (not only below MATMUL_BLAS_MIN_TOKENS query rows), so that each of its rows gets the
 * numbers of a one-entry decode step: speculative decoding verifies up to 16 rows of a sequence
 * in one step (sched.h, SCHED_SPEC_ROWS) and its greedy output must be the plain one. */
enum { ATT_DIRECT_ENTRIES = 16 };
/* Most chunks of a sequence in a step for which chunk_blocks reads F16 cells directly (direct_f16). */
enum { ATT_DIRECT_CHUNKS = 2 };
/* Fewest cells of a decode attention score item (see attn_plan). */
enum { ATT_MIN_CELL_BLOCK = 128 };
/* Below this many score multiply-adds (visible cells x query heads x head_dim, summed over the
 * planned entries) a layer's decode attention runs on the calling thread alone: the queries and
 * cells are in its cache (the caller just wrote them) and the whole of it takes less than
 * handing units to another thread costs. The value is 64 cells of SmolLM2-135M's 9 heads, where
 * sharing them breaks even on 2 threads (build/bench/forward_bench
 * bench-models/smollm2-135m-q8_0.gguf --threads 2 --tg-only 5 --depth D at D = 0, 64 and 128). */
enum { ATT_ALONE_WORK = 64 * 9 * 64 };

/* One planned decode-sized sequence: entries dent[e0 .. e0 + ne), cells acells[off .. off + nv)
 * (from the first cell its first entry sees to the last its last entry sees; each entry masks
 * the rest), its rows [row0, row0 + ne * n_head)
 * (row k = entry k / n_head, query head k % n_head), their scores dsc[sc_off + k * nv ..], its
 * score items [ia, ia + ne * n_head_kv * n_cb) (see dec_items). */
struct direct_seq {
    int32_t e0, ne;
    int64_t off, nv, row0;
    int64_t sc_off, ia, n_cb;
};

struct attn_ctx {
    struct attn_params p; /* the head shape (scale: the current layer's) */
    int32_t group;      /* n_head / n_head_kv */
    struct compute *c;  /* borrowed from the caller */
    bool reference;
    size_t bytes;
    int32_t att_rows;   /* rows of one attention chunk: group * min(max_tokens, ATT_CHUNK_ENTRIES) */
    int32_t n_slots;    /* direct_rows: one slot (row of qg, sc, h16) per compute thread */
    int32_t chunk_slots; /* chunk_blocks: min(n_slots, ATT_CHUNK_SLOTS) slots of ATT_BLOCK_ROWS rows */
    bool direct_chunks; /* chunk_blocks reads F16 cells as stored (attn_rows_f16: head_dim a multiple of 16) */
    size_t sc_stride;   /* a row of sc: n_ctx */

    /* The step (attn_plan) and the layer (attn_layer) being attended. */
    const struct kv_memory *kv;
    const struct batch *b;
    int32_t layer;
    const float *q;     /* [T][n_head * head_dim] queries, F16-exact */
    float *out;         /* [T][n_head * head_dim] attention output, heads side by side */

    int32_t *ent;       /* [T] entries of the sequence being attended */
    uint8_t *done;      /* [T] entry already grouped (attn_plan) */
    int32_t *cells;     /* [n_ctx] cells of that sequence */
    int32_t *cpos;      /* [n_ctx] their positions */
    float *kf;          /* [n_head_kv][n_ctx][head_dim] its K, F32 */
    float *vf;          /* [n_head_kv][n_ctx][head_dim] its V, F32 */
    float *vt;          /* [head_dim][n_visible] V of one kv head, transposed, for one chunk (reference) */
    int32_t *order;     /* [n_ctx] scratch of the position sort */
    /* qg, sc, h16, og: att_rows rows for a chunk of the reference path, ATT_BLOCK_ROWS rows per
     * slot (< chunk_slots) for chunk_blocks, or one row per slot (< n_slots) for direct_rows;
     * they have qg_rows >= all three. */
    float *qg;          /* [qg_rows][head_dim] queries of one kv head's group */
    float *tile;        /* [chunk_slots][ATTN_TILE_FLOATS(head_dim)] attn_rows_f16's cell tiles */
    float *sc;          /* [qg_rows][n_ctx] scores, then probabilities */
    uint16_t *h16;      /* [qg_rows][head_dim] F16 staging for rounding the queries */
    float *og;          /* [qg_rows][head_dim] attention output of the chunk */
    /* Decode-sized sequences of the step (all their entries in one direct chunk), planned once
     * per forward pass (their cells do not change between layers) and attended in one parallel
     * job per layer. */
    struct direct_seq *dseq; /* [T] */
    int32_t n_dseq;
    int64_t n_drows;    /* sum of the planned sequences' n_ent * n_head */
    int32_t *dent;      /* [T] their entries, grouped by sequence */
    int32_t *gent;      /* [T] entries of the other sequences, grouped by sequence */
    int32_t *gseq;      /* [T] (first entry index in gent, count) pairs' sequence ids, see gcount */
    int32_t *gcount;    /* [T] */
    int32_t n_gseq;
    /* Work items of the planned sequences' attention (dec_items), in three phases: n_ia score
     * items (an entry's kv head's group of query rows over a block of cell_block cells), n_drows
     * softmax items (a row; none when one_block), n_drows / group * n_db mix items (a group's rows
     * over db_len output elements). */
    float *dsc;         /* [dsc_n] their scores, then probabilities */
    int64_t dsc_n;
    int64_t n_ia, cell_block;
    int64_t cells_heads; /* sum over the planned entries of n_head_kv * visible cells: the work */
    bool one_block;     /* every planned row's cells are one score block: no softmax phase */
    int32_t n_db, db_len;
    /* Per group unit (a planned entry's kv head: its group of query rows; unit u holds rows
     * [u * group, (u + 1) * group)), reset every layer: sc_left[u] score items of the unit not yet
     * done, mix_left[u] its rows whose probabilities are not yet ready (see dec_items). */
    _Atomic int32_t *sc_left, *mix_left; /* [T * n_head_kv] */
    /* Q8_0 K cells: the step's queries quantized to Q8_0 once per layer (attn_layer), as the
     * reference dots Q8_0 cells; per entry qq_row bytes, per head qq_head (hd / 32 blocks). NULL
     * when head_dim is not a multiple of 32 (no Q8_0 cells then: model_memory_create_with). */
    uint8_t *qq;        /* [T][qq_row] */
    size_t qq_row, qq_head;
    bool k_q8, v_q8;    /* the planned pool's cell types are Q8_0 (attn_plan) */
    int32_t *acells;    /* [arena_n] the planned sequences' cells, sorted by position */
    int32_t *acpos;     /* [arena_n] their positions */
    int64_t arena_n;
};

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static void *ctx_alloc(struct attn_ctx *a, size_t n, size_t elt, bool *ok) {
    void *p = calloc(n ? n : 1, elt);
    if (!p) *ok = false;
    a->bytes += n * elt;
    return p;
}

void attn_ctx_destroy(struct attn_ctx *a) {
    if (!a) return;
    void *bufs[] = {a->ent, a->done, a->cells, a->cpos, a->kf, a->vf, a->vt, a->order, a->qg, a->tile, a->sc, a->h16,
                    a->og, a->dseq, a->dent, a->gent, a->gseq, a->gcount, a->acells, a->acpos, a->dsc, a->qq,
                    (void *)a->sc_left, (void *)a->mix_left};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    free(a);
}

size_t attn_ctx_bytes(const struct attn_ctx *a) { return a->bytes; }

int attn_ctx_create(struct attn_ctx **out, const struct attn_params *p, int32_t max_tokens, int64_t n_ctx,
                    bool reference, struct compute *c) {
    *out = NULL;
    if (p->n_head < 1 || p->n_head_kv < 1 || p->head_dim < 1 || p->n_head % p->n_head_kv || max_tokens < 1 ||
        n_ctx < 1 || p->window < 0)
        return -ERR_INVAL;
    struct attn_ctx *a = calloc(1, sizeof *a);
    if (!a) return -ERR_NOMEM;
    a->p = *p;
    a->group = p->n_head / p->n_head_kv;
    a->c = c;
    a->reference = reference;
    size_t T = (size_t)max_tokens, hd = (size_t)p->head_dim, ctx = (size_t)n_ctx;
    size_t nkv = (size_t)p->n_head_kv * hd;
    a->att_rows = (int32_t)((size_t)a->group * (T < ATT_CHUNK_ENTRIES ? T : ATT_CHUNK_ENTRIES));
    a->n_slots = compute_n_threads(c);
    a->chunk_slots = a->n_slots < ATT_CHUNK_SLOTS ? a->n_slots : ATT_CHUNK_SLOTS;
    a->sc_stride = ctx;
    bool ok = true;
    a->ent = ctx_alloc(a, T, sizeof(int32_t), &ok);
    a->done = ctx_alloc(a, T, sizeof(uint8_t), &ok);
    a->cells = ctx_alloc(a, ctx, sizeof(int32_t), &ok);
    a->cpos = ctx_alloc(a, ctx, sizeof(int32_t), &ok);
    a->kf = ctx_alloc(a, ctx * nkv, sizeof(float), &ok);
    a->vf = ctx_alloc(a, ctx * nkv, sizeof(float), &ok);
    a->vt = ctx_alloc(a, reference ? ctx * hd : 0, sizeof(float), &ok);
    a->order = ctx_alloc(a, ctx, sizeof(int32_t), &ok);
    a->dseq = ctx_alloc(a, T, sizeof *a->dseq, &ok);
    a->dent = ctx_alloc(a, T, sizeof(int32_t), &ok);
    a->gent = ctx_alloc(a, T, sizeof(int32_t), &ok);
    a->gseq = ctx_alloc(a, T, sizeof(int32_t), &ok);
    a->gcount = ctx_alloc(a, T, sizeof(int32_t), &ok);
    a->sc_left = ctx_alloc(a, T * (size_t)p->n_head_kv, sizeof *a->sc_left, &ok);
    a->mix_left = ctx_alloc(a, T * (size_t)p->n_head_kv, sizeof *a->mix_left, &ok);
    /* room for the cells of 8 full-context sequences, or of many shorter ones; a step whose
     * decode sequences hold more falls back to per-sequence attention for the rest */
    a->arena_n = 8 * (int64_t)ctx;
    a->acells = ctx_alloc(a, (size_t)a->arena_n, sizeof(int32_t), &ok);
    a->acpos = ctx_alloc(a, (size_t)a->arena_n, sizeof(int32_t), &ok);
    /* scores of every planned row: the arena's cells for each query head, at most 8 MB beyond
     * one full-context sequence's (sequences past it take the per-row path, same numbers) */
    a->dsc_n = (int64_t)p->n_head * a->arena_n;
    int64_t dsc_cap = max64((int64_t)p->n_head * (int64_t)ctx, (int64_t)1 << 21);
    if (a->dsc_n > dsc_cap) a->dsc_n = dsc_cap;
    a->dsc = ctx_alloc(a, (size_t)a->dsc_n, sizeof(float), &ok);
    size_t qg_rows = (size_t)max64(max64(a->chunk_slots * (int64_t)ATT_BLOCK_ROWS, a->att_rows), a->n_slots);
    a->qg = ctx_alloc(a, qg_rows * hd, sizeof(float), &ok);
    a->sc = ctx_alloc(a, qg_rows * a->sc_stride, sizeof(float), &ok);
    a->h16 = ctx_alloc(a, qg_rows * hd, sizeof(uint16_t), &ok);
    a->og = ctx_alloc(a, qg_rows * hd, sizeof(float), &ok);
    /* attn_rows_f16 is vectorized for AVX-512 only (elsewhere its scalar definition: the gather) */
    a->direct_chunks = !reference && p->head_dim % 16 == 0 && simd_level_best() == SIMD_AVX512;
    a->tile = ctx_alloc(a, a->direct_chunks ? (size_t)a->chunk_slots * ATTN_TILE_FLOATS(hd) : 0, sizeof(float), &ok);
    if (p->head_dim % 32 == 0) {
        a->qq_head = kv_type_row_bytes(KV_Q8_0, p->head_dim);
        a->qq_row = (size_t)p->n_head * a->qq_head;
        a->qq = ctx_alloc(a, T * a->qq_row, 1, &ok);
    }
    if (!ok) {
        attn_ctx_destroy(a);
        return -ERR_NOMEM;
    }
    *out = a;
    return 0;
}

/* ---- helpers ---- */

/* x = (float)(f16)x through tmp: the reference multiplies Q by the F16 K cells, and the
 * probabilities by the F16 V cells, in F16 (its matmul converts the F32 side to the F16 side's
 * type); rounding here keeps us on the same numbers. */
static void round_f16(float *x, uint16_t *tmp, int64_t n) {
    quant_from_float(GGML_TYPE_F16, x, tmp, n);
    quant_to_float(GGML_TYPE_F16, tmp, x, n);
}

/* Bytes from a cell row's start to kv head h's first element (F16 or Q8_0 blocks). */
static size_t head_off(enum kv_type t, int32_t h, int32_t hd) { return kv_type_row_bytes(t, (int64_t)h * hd); }

/* Kv head h's K (V) in cell 0's row of the layer being attended: cell c's at + c * k_row (v_row). */
static const uint8_t *k_head(const struct attn_ctx *a, int32_t h) {
    return (const uint8_t *)kv_k_row(a->kv, a->layer, 0) + head_off(a->kv->shape.type_k, h, a->p.head_dim);
}
static const uint8_t *v_head(const struct attn_ctx *a, int32_t h) {
    return (const uint8_t *)kv_v_row(a->kv, a->layer, 0) + head_off(a->kv->shape.type_v, h, a->p.head_dim);
}

/* Does chunk_blocks read a sequence's F16 cells as stored (attn_rows_f16) rather than gather them
 * once per layer for sgemm? When it has few chunks in the step: each block then transposes its
 * cells' K in tiles, where the gather and sgemm's packing are paid once per layer whatever the
 * chunk. build/bench/forward_bench bench-models/smollm2-135m-q8_0-ctx4k.gguf --threads 2 --prefill
 * 3072 --step S, three alternating pairs: S = 32 4169-4815 ms against 6530-6701 gathered, 128
 * 3525-4166 against 3697-4722, 512 (8 chunks a step) 3753-4196 against 3521-3732. */
static bool direct_f16(const struct attn_ctx *a, int32_t n_ent) {
    return a->direct_chunks && !a->k_q8 && !a->v_q8 && n_ent <= ATT_DIRECT_CHUNKS * ATT_CHUNK_ENTRIES;
}

/* Scores of n_q query heads qh0.. of entry i (one GQA group's or part of it, kv head kvh) over
 * cells[0 .. n) of layer a->layer into sc (rows sc_stride apart): F16 cells against the F16-exact
 * query, Q8_0 cells against the query quantized to Q8_0 (a->qq). */
static void scores_of(const struct attn_ctx *a, int32_t i, int32_t qh0, int32_t n_q, int32_t kvh, const int32_t *cells,
                      int64_t n, float *sc, size_t sc_stride) {
    const struct kv_memory *kv = a->kv;
    int32_t hd = a->p.head_dim;
    const uint8_t *k0 = k_head(a, kvh);
    if (a->k_q8) {
        attn_scores_q8_0_rows(a->qq + (size_t)i * a->qq_row + (size_t)qh0 * a->qq_head, a->qq_head, n_q, k0, kv->k_row,
                              cells, n, hd, sc, sc_stride);
        return;
    }
    int64_t nq = (int64_t)a->p.n_head * hd;
    attn_scores_f16_rows(a->q + i * nq + (int64_t)qh0 * hd, (size_t)hd, n_q, (const uint16_t *)k0,
                         (size_t)kv->shape.n_embd_k, cells, n, hd, sc, sc_stride);
}

/* The mix of n_p probability rows (p_stride apart) over cells[0 .. n) with kv head kvh's V, output
 * elements [d0, d0 + len) of the head (d0, len multiples of 32 for Q8_0 cells). */
static void mix_of(const struct attn_ctx *a, const float *p, size_t p_stride, int32_t n_p, int32_t kvh, int32_t d0,
                   int32_t len, const int32_t *cells, int64_t n, float *out, size_t out_stride) {
    const struct kv_memory *kv = a->kv;
    const uint8_t *v0 = v_head(a, kvh) + kv_type_row_bytes(kv->shape.type_v, d0);
    if (a->v_q8) attn_mix_q8_0_rows(p, p_stride, n_p, v0, kv->v_row, cells, n, len, out, out_stride);
    else attn_mix_f16_rows(p, p_stride, n_p, (const uint16_t *)v0, (size_t)kv->shape.n_embd_v, cells, n, len, out,
                           out_stride);
}

/* A row's mask and softmax: probabilities rounded to F16 for F16 V cells (as the reference's F16
 * product sees them), kept F32 for Q8_0 ones (as its flash attention keeps them). */
static void softmax_of(const struct attn_ctx *a, float *row, int64_t n, const int32_t *cpos, int32_t pos) {
    attn_mask_window(row, n, cpos, pos, a->p.window);
    if (a->v_q8) attn_softmax_row_f32(row, n, cpos, pos, a->p.scale);
    else attn_softmax_row(row, n, cpos, pos, a->p.scale);
}

struct softmax_job {
    float *sc;           /* rows of n_c scores */
    int64_t n_c;
    const int32_t *cpos; /* [n_c] */
    const int32_t *row_pos; /* position of each row's entry: row r -> row_pos[r / group] */
    int32_t group;
    int32_t window;
    float scale;
};

/* The reference's softmax (math/attn.h: exp per element, 0 where masked, summed per 16 elements
 * in float, the chunks added in double as over its zero-padded row, probabilities rounded to F16). */
static void softmax_rows(void *arg, int64_t r0, int64_t r1) {
    const struct softmax_job *j = arg;
    for (int64_t r = r0; r < r1; r++) {
        attn_mask_window(j->sc + r * j->n_c, j->n_c, j->cpos, j->row_pos[r / j->group], j->window);
        attn_softmax_row(j->sc + r * j->n_c, j->n_c, j->cpos, j->row_pos[r / j->group], j->scale);
    }
}

struct gather_job {
    struct attn_ctx *a;
    int64_t g0, n_c;    /* the cells gathered: cells[g0 .. g0 + n_c) */
};

/* K and V of cells g0 + [c0, c1) to kf[h][c][d] and vf[h][c][d], F32. */
static void gather_kv(void *arg, int64_t c0, int64_t c1) {
    const struct gather_job *j = arg;
    struct attn_ctx *a = j->a;
    int32_t hd = a->p.head_dim, nh = a->p.n_head_kv;
    for (int64_t c = c0; c < c1; c++) {
        int32_t cell = a->cells[j->g0 + c];
        const uint8_t *kr = kv_k_row(a->kv, a->layer, cell), *vr = kv_v_row(a->kv, a->layer, cell);
        enum kv_type tk = a->kv->shape.type_k, tv = a->kv->shape.type_v;
        for (int32_t h = 0; h < nh; h++) {
            /* Q8_0 K is read as stored (scores_of), never gathered; V values are exact in F32 */
            if (!a->k_q8)
                quant_to_float(GGML_TYPE_F16, kr + head_off(tk, h, hd), a->kf + ((int64_t)h * j->n_c + c) * hd, hd);
            quant_to_float(kv_type_ggml(tv), vr + head_off(tv, h, hd), a->vf + ((int64_t)h * j->n_c + c) * hd, hd);
        }
    }
}

static int cmp_by_pos(const void *x, const void *y, void *arg) {
    const int32_t *pos = arg, u = pos[*(const int32_t *)x], v = pos[*(const int32_t *)y];
    return (u > v) - (u < v);
}

/* Order the sequence's cells by position (cells are usually taken in order, so usually they
 * already are): then a chunk of entries sees exactly a prefix of them. */
static void sort_cells_by_pos(struct attn_ctx *a, int32_t *cells, int32_t *cpos, int64_t n_c) {
    const struct kv_memory *kv = a->kv;
    bool sorted = true;
    for (int64_t c = 0; c < n_c; c++) {
        cpos[c] = kv->pos[cells[c]];
        if (c && cpos[c] < cpos[c - 1]) sorted = false;
    }
    if (sorted) return;
    memcpy(a->order, cells, (size_t)n_c * sizeof *a->order);
    qsort_r(a->order, (size_t)n_c, sizeof *a->order, cmp_by_pos, kv->pos);
    memcpy(cells, a->order, (size_t)n_c * sizeof *cells);
    for (int64_t c = 0; c < n_c; c++) cpos[c] = kv->pos[cells[c]];
}

/* Cells at positions <= p: the length of the prefix of the sorted cpos. */
static int64_t n_visible(const int32_t *cpos, int64_t n_c, int32_t p) {
    int64_t lo = 0, hi = n_c;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (cpos[mid] <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Cells a window hides from an entry at position p (positions <= p - window): the length of a
 * prefix of the sorted cpos; 0 without a window. */
static int64_t n_hidden(const int32_t *cpos, int64_t n_c, int32_t p, int32_t window) {
    return window > 0 ? n_visible(cpos, n_c, p - window) : 0;
}

/* ---- a chunk of one sequence on the F16 cells (direct_rows) ---- */

struct direct_job {
    struct attn_ctx *a;
    /* one chunk: entries ent[0 ..], cells[0 .. nv) at positions cpos (from the first cell the
     * chunk's first entry sees) */
    const int32_t *ent, *cells, *cpos;
    int64_t nv;         /* cells every row multiplies (the chunk's last entry sees them all) */
    _Atomic int slot;   /* scratch slots handed out */
};

/* One attention row (entry i, query head qh) over cells[0 .. nv), in slot `slot`'s scratch. */
static void direct_row(struct attn_ctx *a, int slot, int32_t i, int32_t qh, const int32_t *cells, const int32_t *cpos,
                       int64_t nv) {
    int32_t hd = a->p.head_dim, kvh = qh / a->group;
    int64_t nq = (int64_t)a->p.n_head * hd;
    float *sc = a->sc + (size_t)slot * a->sc_stride;
    nv = n_visible(cpos, nv, a->b->pos[i]); /* its own cells only: a one-entry step's numbers */
    scores_of(a, i, qh, 1, kvh, cells, nv, sc, 0);
    softmax_of(a, sc, nv, cpos, a->b->pos[i]);
    mix_of(a, sc, 0, 1, kvh, 0, hd, cells, nv, a->out + i * nq + (int64_t)qh * hd, 0);
}

/* Rows [r0, r1) of a direct chunk, row r = entry e0 + r / n_head, query head r % n_head: the
 * scores and the mix exactly as the matmuls of the gathered path's vector kernels compute them,
 * on the same F16-rounded query and probabilities. */
static void direct_rows(void *arg, int64_t r0, int64_t r1) {
    struct direct_job *j = arg;
    int slot = atomic_fetch_add_explicit(&j->slot, 1, memory_order_relaxed);
    ASSERT(slot < j->a->n_slots);
    int32_t n_head = j->a->p.n_head;
    for (int64_t r = r0; r < r1; r++)
        direct_row(j->a, slot, j->ent[r / n_head], (int32_t)(r % n_head), j->cells, j->cpos, j->nv);
}

/* ---- the planned decode-sized sequences (dec_items, unit_items) ---- */

/* The planned sequences' attention, one job per layer: its items in three phases, handed out in
 * order by `next`; an item waits only for the items of its own group unit (an entry's kv head)
 * in the phases before (a softmax row for the unit's score items, sc_left; a mix item for the
 * unit's rows' probabilities, mix_left), so the thread that waits holds no item and whoever
 * holds one is running it: the wait ends (a preempted holder only delays it). Items are handed
 * out phase by phase in unit order, so a unit's items of the phase before were handed out long
 * before and a thread rarely waits at all (no barrier between the phases).
 *   score items: (sequence, entry, kv head, block of cells): the group's query rows (F16-exact)
 *     against the block, attn_scores_f16_rows (each K row read once for the group; row by row
 *     exactly attn_scores_f16's numbers);
 *   softmax items: a row (attn_softmax_row);
 *   mix items: (sequence, entry, kv head, db_len output elements): the group's rows over those
 *     elements, attn_mix_f16_rows (each V row read once for the group; each output element is
 *     a dot of its own, so any split gives the numbers of the whole row, attn_mix_f16's).
 * So a row's numbers are direct_row's whatever the split, the thread count or the other
 * sequences of the step, and the work splits evenly however few rows there are (a decode row
 * of a 9-head model is 3 units, each reading its K and V once). */
struct dec_job {
    struct attn_ctx *a;
    int64_t n_items, end_a, end_b; /* phase ends: score items [0, end_a), softmax [end_a, end_b) */
    _Atomic int64_t next;
};

/* Until *left is 0 (acquire: the work it counted is visible). */
static void wait_ready(_Atomic int32_t *left) {
    for (unsigned spins = 1; atomic_load_explicit(left, memory_order_acquire) > 0; spins++) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if (spins % 4096 == 0) sched_yield(); /* the holder of an item may be preempted */
    }
}

/* The planned sequence holding row r (rows numbered across them in order). */
static const struct direct_seq *dseq_of_row(const struct attn_ctx *a, int64_t r) {
    int32_t lo = 0, hi = a->n_dseq - 1;
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) / 2;
        if (a->dseq[mid].row0 <= r) lo = mid;
        else hi = mid - 1;
    }
    ASSERT(r >= a->dseq[lo].row0 && r < a->dseq[lo].row0 + (int64_t)a->dseq[lo].ne * a->p.n_head);
    return &a->dseq[lo];
}

static const struct direct_seq *dseq_of_item(const struct attn_ctx *a, int64_t it) {
    int32_t lo = 0, hi = a->n_dseq - 1;
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) / 2;
        if (a->dseq[mid].ia <= it) lo = mid;
        else hi = mid - 1;
    }
    return &a->dseq[lo];
}

static void dec_items(void *arg, int64_t i0, int64_t i1) {
    struct dec_job *j = arg;
    struct attn_ctx *a = j->a;
    int32_t hd = a->p.head_dim, n_head = a->p.n_head, n_kv = a->p.n_head_kv, group = a->group;
    int64_t nq = (int64_t)n_head * hd;
    for (int64_t it; (it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_items;) {
        if (it < j->end_a) {
            const struct direct_seq *ds = dseq_of_item(a, it);
            int64_t k = it - ds->ia, per_entry = n_kv * ds->n_cb;
            int32_t e = (int32_t)(k / per_entry), kvh = (int32_t)(k % per_entry / ds->n_cb);
            int64_t c0 = k % ds->n_cb * a->cell_block, n = ds->nv - c0 < a->cell_block ? ds->nv - c0 : a->cell_block;
            int32_t i = a->dent[ds->e0 + e];
            float *sc = a->dsc + ds->sc_off + ((int64_t)e * n_head + (int64_t)kvh * group) * ds->nv;
            scores_of(a, i, kvh * group, group, kvh, a->acells + ds->off + c0, n, sc + c0, (size_t)ds->nv);
            int64_t u = ds->row0 / group + (int64_t)e * n_kv + kvh;
            if (j->end_b == j->end_a) { /* no softmax phase: every row is one block */
                int64_t nvi = n_visible(a->acpos + ds->off, ds->nv, a->b->pos[i]); /* as unit_items */
                for (int32_t g = 0; g < group; g++) softmax_of(a, sc + g * ds->nv, nvi, a->acpos + ds->off, a->b->pos[i]);
                atomic_fetch_sub_explicit(&a->mix_left[u], group, memory_order_release);
            } else {
                atomic_fetch_sub_explicit(&a->sc_left[u], 1, memory_order_release);
            }
        } else if (it < j->end_b) {
            int64_t r = it - j->end_a;
            wait_ready(&a->sc_left[r / group]);
            const struct direct_seq *ds = dseq_of_row(a, r);
            int64_t k = r - ds->row0;
            int32_t pos = a->b->pos[a->dent[ds->e0 + k / n_head]];
            softmax_of(a, a->dsc + ds->sc_off + k * ds->nv, n_visible(a->acpos + ds->off, ds->nv, pos), a->acpos + ds->off,
                       pos);
            atomic_fetch_sub_explicit(&a->mix_left[r / group], 1, memory_order_release);
        } else {
            wait_ready(&a->mix_left[(it - j->end_b) / a->n_db]);
            /* a group's rows are consecutive: row r = group index * group */
            int64_t r = (it - j->end_b) / a->n_db * group, d0 = (it - j->end_b) % a->n_db * a->db_len;
            const struct direct_seq *ds = dseq_of_row(a, r);
            int64_t k = r - ds->row0;
            int32_t i = a->dent[ds->e0 + k / n_head], qh = (int32_t)(k % n_head), kvh = qh / group;
            mix_of(a, a->dsc + ds->sc_off + k * ds->nv, (size_t)ds->nv, group, kvh, (int32_t)d0, a->db_len,
                   a->acells + ds->off, n_visible(a->acpos + ds->off, ds->nv, a->b->pos[i]),
                   a->out + i * nq + (int64_t)qh * hd + d0, (size_t)hd);
        }
    }
}

/* Group units [u0, u1) of the planned sequences, each whole on the calling thread: its group's
 * scores over all its cells, their softmax, their mix over all head_dim elements (the same
 * kernels as dec_items' items, so the same numbers). Nothing a unit computes is read by another
 * thread (see attn_layer for when this runs instead of dec_items). */
static void unit_items(void *arg, int64_t u0, int64_t u1) {
    struct attn_ctx *a = arg;
    int32_t hd = a->p.head_dim, n_head = a->p.n_head, group = a->group;
    int64_t nq = (int64_t)n_head * hd;
    for (int64_t u = u0; u < u1; u++) {
        int64_t r = u * group; /* the unit's first row */
        const struct direct_seq *ds = dseq_of_row(a, r);
        int64_t k = r - ds->row0;
        int32_t i = a->dent[ds->e0 + k / n_head], kvh = (int32_t)(k % n_head) / group;
        float *sc = a->dsc + ds->sc_off + k * ds->nv;
        /* the entry's own cells only (an earlier entry of the sequence sees fewer): the numbers of
         * a one-entry step, whatever else of its sequence the step holds */
        int64_t nv = n_visible(a->acpos + ds->off, ds->nv, a->b->pos[i]);
        scores_of(a, i, kvh * group, group, kvh, a->acells + ds->off, nv, sc, (size_t)ds->nv);
        for (int32_t g = 0; g < group; g++) softmax_of(a, sc + g * ds->nv, nv, a->acpos + ds->off, a->b->pos[i]);
        mix_of(a, sc, (size_t)ds->nv, group, kvh, 0, hd, a->acells + ds->off, nv,
               a->out + i * nq + (int64_t)kvh * group * hd, (size_t)hd);
    }
}

/* ---- a chunk of one sequence on F32 copies of its cells (chunk_blocks, chunk_reference) ---- */

/* A chunk of one sequence's entries (ent[0 .. ne)) on F32 copies of its cells (gather_kv), rows
 * numbered per kv head: row r = entry r / group, query head h * group + r % group. */
struct chunk_job {
    struct attn_ctx *a;
    const int32_t *ent;
    int64_t rows;       /* per kv head: ne * group */
    int64_t n_g;        /* cells gathered (a kv head's block of kf / vf) */
    int64_t lo, nv;     /* the chunk's cells: gathered cells [lo, lo + nv) (from the first one its
                         * first entry sees to the last one its last entry sees) */
    const int32_t *cpos; /* [nv] their positions */
    const int32_t *cells; /* [nv] the cells themselves (Q8_0 K is read from them) */
    int64_t block_rows, n_blocks; /* per kv head: n_blocks blocks of block_rows rows (the last fewer) */
    bool direct;        /* F16 cells read as stored (direct_f16), not from kf / vf */
    int64_t n_items;    /* n_head_kv * n_blocks */
    _Atomic int64_t next; /* items handed out */
    _Atomic int slot;   /* scratch slots handed out */
};

/* The items of a chunk, item = (kv head, block of rows), each computed whole by attn_rows_f16
 * (j->direct) or attn_rows_f32 in this thread's slot (queries rounded to F16 as the reference's
 * product with the F16 cells sees them); every thread that joins takes items until none is left,
 * so one the OS preempts does not hold the chunk up. */
static void chunk_blocks(void *arg, int64_t i0, int64_t i1) {
    struct chunk_job *j = arg;
    struct attn_ctx *a = j->a;
    int slot = atomic_fetch_add_explicit(&j->slot, 1, memory_order_relaxed);
    ASSERT(slot < a->chunk_slots);
    int32_t hd = a->p.head_dim, group = a->group;
    int64_t nq = (int64_t)a->p.n_head * hd;
    float *qg = a->qg + (size_t)slot * ATT_BLOCK_ROWS * hd, *og = a->og + (size_t)slot * ATT_BLOCK_ROWS * hd;
    float *sc = a->sc + (size_t)slot * ATT_BLOCK_ROWS * a->sc_stride;
    uint16_t *h16 = a->h16 + (size_t)slot * ATT_BLOCK_ROWS * hd;
    int32_t row_pos[ATT_BLOCK_ROWS];
    for (int64_t it; (it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_items;) {
        int32_t h = (int32_t)(it / j->n_blocks);
        int64_t r0 = it % j->n_blocks * j->block_rows, n = j->rows - r0 < j->block_rows ? j->rows - r0 : j->block_rows;
        for (int64_t r = 0; r < n; r++) row_pos[r] = a->b->pos[j->ent[(r0 + r) / group]];
        int64_t k0 = ((int64_t)h * j->n_g + j->lo) * hd;
        if (a->k_q8) {
            /* Q8_0 K as stored: each entry's rows of the block in one call (the numbers of the
             * decode path), then the softmax and the sgemm with V */
            for (int64_t r = 0, m; r < n; r += m) {
                int32_t g = (int32_t)((r0 + r) % group);
                m = group - g < n - r ? group - g : n - r;
                scores_of(a, j->ent[(r0 + r) / group], h * group + g, (int32_t)m, h, j->cells, j->nv, sc + r * j->nv,
                          (size_t)j->nv);
            }
            attn_rows_softmax_mix_f32(sc, n, a->vf + k0, j->nv, hd, j->cpos, row_pos, a->p.window, a->p.scale, !a->v_q8,
                                      og);
        } else {
            for (int64_t r = 0; r < n; r++) {
                int32_t i = j->ent[(r0 + r) / group];
                int64_t qh = (int64_t)h * group + (r0 + r) % group;
                memcpy(qg + r * hd, a->q + i * nq + qh * hd, (size_t)hd * sizeof(float));
            }
            round_f16(qg, h16, n * hd);
            if (j->direct) {
                const struct kv_memory *kv = a->kv;
                attn_rows_f16(qg, n, (const uint16_t *)k_head(a, h), (size_t)kv->shape.n_embd_k,
                              (const uint16_t *)v_head(a, h), (size_t)kv->shape.n_embd_v, j->cells, j->nv, hd, j->cpos,
                              row_pos, a->p.window, a->p.scale, sc, a->tile + (size_t)slot * ATTN_TILE_FLOATS(hd), og);
            } else {
                attn_rows_f32(qg, n, a->kf + k0, a->vf + k0, j->nv, hd, j->cpos, row_pos, a->p.window, a->p.scale,
                              !a->v_q8, sc, og);
            }
        }
        for (int64_t r = 0; r < n; r++) {
            int32_t i = j->ent[(r0 + r) / group];
            int64_t qh = (int64_t)h * group + (r0 + r) % group;
            memcpy(a->out + i * nq + qh * hd, og + r * hd, (size_t)hd * sizeof(float));
        }
    }
}

/* Blocks of at most ATT_BLOCK_ROWS rows, of equal sizes, and (where that leaves blocks of 16 rows
 * or more) as many items as a multiple of the thread count: 3 kv heads x 192 rows on 2 threads
 * make 6 blocks of 96 rows, x 96 rows 6 blocks of 48 (3 blocks of 96 would keep one thread idle
 * for a third of the chunk). */
static void split_chunk(struct chunk_job *j, int32_t n_head_kv, int n_threads) {
    int64_t n_blocks = (j->rows + ATT_BLOCK_ROWS - 1) / ATT_BLOCK_ROWS;
    for (int64_t k = n_blocks; k * 16 <= j->rows && k <= 4 * n_blocks; k++)
        if (n_head_kv * k % n_threads == 0) {
            n_blocks = k;
            break;
        }
    j->block_rows = (j->rows + n_blocks - 1) / n_blocks;
    j->n_blocks = (j->rows + j->block_rows - 1) / j->block_rows;
    j->n_items = n_head_kv * j->n_blocks;
}

/* reference: the attention dots of rows [r0, r1) of a chunk in the reference's orders. */
struct ref_dots_job {
    struct attn_ctx *a;
    const float *kf;    /* this kv head's K, [nv][hd] */
    int32_t hd;
    int64_t nv, n_pad;  /* visible cells; the reference's row length */
    bool batched;       /* 2+ tokens in the batch: tinyBLAS, else ggml_vec_dot_f16 */
};

static void ref_scores(void *arg, int64_t r0, int64_t r1) {
    const struct ref_dots_job *j = arg;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = 0; c < j->nv; c++) {
            const float *q = j->a->qg + r * j->hd, *k = j->kf + c * j->hd;
            j->a->sc[r * j->nv + c] = j->batched ? quant_dot_f32_lanes16(j->hd, q, k)
                                                 : quant_dot_f32_vec_f16(j->hd, j->hd, q, k);
        }
}

static void ref_outputs(void *arg, int64_t r0, int64_t r1) {
    const struct ref_dots_job *j = arg;
    for (int64_t r = r0; r < r1; r++)
        for (int32_t d = 0; d < j->hd; d++) {
            const float *p = j->a->sc + r * j->nv, *v = j->a->vt + (int64_t)d * j->nv;
            j->a->og[r * j->hd + d] = j->batched ? quant_dot_f32_lanes16(j->nv, p, v)
                                                 : quant_dot_f32_vec_f16(j->nv, j->n_pad, p, v);
        }
}

/* reference: the same chunk per kv head, the dots in the reference's orders (ref_dots_job); its
 * cells are the gathered cells [lo, lo + nv) at positions cpos, of n_g gathered, of n_c the
 * sequence holds. */
static void chunk_reference(struct attn_ctx *a, const int32_t *ent, int32_t ne, int64_t n_c, int64_t n_g, int64_t lo,
                            int64_t nv, const int32_t *cpos) {
    int32_t hd = a->p.head_dim, group = a->group;
    int64_t nq = (int64_t)a->p.n_head * hd, rows = (int64_t)ne * group;
    int32_t row_pos[ATT_CHUNK_ENTRIES];
    for (int32_t e = 0; e < ne; e++) row_pos[e] = a->b->pos[ent[e]];
    for (int32_t h = 0; h < a->p.n_head_kv; h++) {
        for (int32_t e = 0; e < ne; e++)
            memcpy(a->qg + (int64_t)e * group * hd, a->q + ent[e] * nq + (int64_t)h * group * hd,
                   (size_t)group * hd * sizeof(float));
        /* V columns contiguous for the reference's P.V dots (a small share of its scalar dots) */
        const float *vf = a->vf + ((int64_t)h * n_g + lo) * hd;
        for (int64_t c = 0; c < nv; c++)
            for (int32_t d = 0; d < hd; d++) a->vt[(int64_t)d * nv + c] = vf[c * hd + d];
        round_f16(a->qg, a->h16, rows * hd);
        struct ref_dots_job rj = {.a = a, .kf = a->kf + ((int64_t)h * n_g + lo) * hd, .hd = hd, .nv = nv,
                                  .n_pad = (n_c + REF_KV_PAD - 1) / REF_KV_PAD * REF_KV_PAD,
                                  .batched = a->b->n_tokens >= 2};
        compute_parallel_for_work(a->c, rows, 2 * nv * hd, ref_scores, &rj);
        struct softmax_job sj = {.sc = a->sc, .n_c = nv, .cpos = cpos, .row_pos = row_pos, .group = group,
                                 .window = a->p.window, .scale = a->p.scale};
        compute_parallel_for_work(a->c, rows, 4 * nv, softmax_rows, &sj);
        compute_parallel_for_work(a->c, rows, 2 * nv * hd, ref_outputs, &rj);
        for (int32_t e = 0; e < ne; e++)
            memcpy(a->out + ent[e] * nq + (int64_t)h * group * hd, a->og + (int64_t)e * group * hd,
                   (size_t)group * hd * sizeof(float));
    }
}

/* reference with Q8_0 cells: rows [r0, r1) of a chunk (row r = entry r / n_head, query head
 * r % n_head), each as the reference's flash attention computes it (attn_row_reference_fa), in
 * this thread's slot of qg as scratch. */
struct fa_job {
    struct attn_ctx *a;
    const int32_t *ent, *cells, *cpos;
    int64_t nv;
    _Atomic int slot;
};

static void fa_rows(void *arg, int64_t r0, int64_t r1) {
    struct fa_job *j = arg;
    struct attn_ctx *a = j->a;
    int slot = atomic_fetch_add_explicit(&j->slot, 1, memory_order_relaxed);
    ASSERT(slot < a->n_slots);
    const struct kv_memory *kv = a->kv;
    int32_t hd = a->p.head_dim, n_head = a->p.n_head;
    int64_t nq = (int64_t)n_head * hd;
    enum kv_type tk = kv->shape.type_k, tv = kv->shape.type_v;
    const uint8_t *k0 = kv_k_row(kv, a->layer, 0), *v0 = kv_v_row(kv, a->layer, 0);
    for (int64_t r = r0; r < r1; r++) {
        int32_t i = j->ent[r / n_head], qh = (int32_t)(r % n_head), kvh = qh / a->group;
        attn_row_reference_fa(kv_type_ggml(tk), a->q + i * nq + (int64_t)qh * hd,
                              a->k_q8 ? a->qq + (size_t)i * a->qq_row + (size_t)qh * a->qq_head : NULL,
                              k0 + head_off(tk, kvh, hd), kv->k_row, kv_type_ggml(tv), v0 + head_off(tv, kvh, hd),
                              kv->v_row, j->cells, j->cpos, j->nv, a->b->pos[i], a->p.window, a->p.scale, hd,
                              a->qg + (size_t)slot * hd, a->out + i * nq + (int64_t)qh * hd);
    }
}

/* Attention of the entries of one sequence (a->ent[0..n_ent)) over that sequence's cells, in
 * chunks of entries: a chunk whose rows would take matmul's sgemm path runs as one parallel job
 * of row blocks of all kv heads, on the F16 cells as stored or on F32 copies (gathered once, for
 * many chunks: direct_f16); a smaller one (a decode step) on the F16 cells directly. */
static void attend_seq(struct attn_ctx *a, int32_t seq, int32_t n_ent) {
    int32_t group = a->group;
    int64_t n_c = kv_seq_cell_list(a->kv, seq, a->cells, (int64_t)a->sc_stride); /* cells: [n_ctx] */
    ASSERT(n_c >= 0); /* the forward pass's check: no sequence holds more than n_ctx cells */
    sort_cells_by_pos(a, a->cells, a->cpos, n_c);
    /* chunks of even sizes: a step's last few entries in a chunk of their own would take the
     * direct path (ATT_DIRECT_ENTRIES), slower per row than a bigger chunk's blocks (a prompt
     * read in steps of 80 tokens: build/bench/forward_bench MODEL --prefill 1536 --step 80, the
     * SmolLM2-shaped Q8_0 model of scripts/bench.d/40-forward, 1274-1278 ms against 1409-1497
     * ms with chunks of 64 and 16) */
    int32_t most = a->att_rows / group, n_chunks = (n_ent + most - 1) / most;
    int32_t chunk = (n_ent + n_chunks - 1) / n_chunks;
    bool gathered = false, direct = direct_f16(a, n_ent);
    /* Entries come in increasing positions: cells the first one does not see (a window's) no
     * entry sees, and are never gathered. */
    int64_t g0 = n_hidden(a->cpos, n_c, a->b->pos[a->ent[0]], a->p.window), n_g = n_c - g0;
    for (int32_t e0 = 0; e0 < n_ent; e0 += chunk) {
        int32_t ne = n_ent - e0 < chunk ? n_ent - e0 : chunk;
        int64_t rows = (int64_t)ne * group;
        /* The chunk's cells: from the first one its first entry sees to the last one its last
         * entry sees. */
        int64_t lo = n_hidden(a->cpos, n_c, a->b->pos[a->ent[e0]], a->p.window);
        int64_t nv = n_visible(a->cpos, n_c, a->b->pos[a->ent[e0 + ne - 1]]) - lo;
        if ((rows < MATMUL_BLAS_MIN_TOKENS || ne <= ATT_DIRECT_ENTRIES) && !a->reference) {
            struct direct_job dj = {.a = a, .ent = a->ent + e0, .cells = a->cells + lo, .cpos = a->cpos + lo, .nv = nv};
            compute_parallel_for(a->c, (int64_t)ne * a->p.n_head, direct_rows, &dj);
            continue;
        }
        if (a->reference && (a->k_q8 || a->v_q8)) {
            struct fa_job fj = {.a = a, .ent = a->ent + e0, .cells = a->cells + lo, .cpos = a->cpos + lo, .nv = nv};
            compute_parallel_for_work(a->c, (int64_t)ne * a->p.n_head, 4 * nv * a->p.head_dim, fa_rows, &fj);
            continue;
        }
        if (!gathered && !direct) {
            struct gather_job gj = {.a = a, .g0 = g0, .n_c = n_g};
            compute_parallel_for_work(a->c, n_g, 2 * (int64_t)a->p.n_head_kv * a->p.head_dim, gather_kv, &gj);
            gathered = true;
        }
        if (a->reference) {
            chunk_reference(a, a->ent + e0, ne, n_c, n_g, lo - g0, nv, a->cpos + lo);
            continue;
        }
        struct chunk_job cj = {.a = a, .ent = a->ent + e0, .rows = rows, .n_g = n_g, .lo = lo - g0, .nv = nv,
                               .cpos = a->cpos + lo, .cells = a->cells + lo, .direct = direct};
        split_chunk(&cj, a->p.n_head_kv, a->chunk_slots);
        compute_parallel_for(a->c, a->chunk_slots, chunk_blocks, &cj); /* one call per slot */
    }
}

/* ---- the interface ---- */

/* The entries grouped by sequence (batch order within each); a sequence whose entries make one
 * direct chunk (fewer rows than sgemm takes: decode steps) gets its cells listed and sorted into
 * the arena, while it has room; the others are attended per layer by attend_seq. */
void attn_plan(struct attn_ctx *a, const struct kv_memory *kv, const struct batch *b) {
    const struct attn_params *p = &a->p;
    int32_t group = a->group;
    a->kv = kv;
    a->b = b;
    a->k_q8 = kv->shape.type_k == KV_Q8_0;
    a->v_q8 = kv->shape.type_v == KV_Q8_0;
    ASSERT(!(a->k_q8 || a->v_q8) || a->qq); /* Q8_0 cells need a head size of 32s */
    memset(a->done, 0, (size_t)b->n_tokens);
    a->n_dseq = 0;
    a->n_gseq = 0;
    a->n_drows = 0;
    int32_t n_dent = 0, n_gent = 0;
    int64_t used = 0, sc_used = 0, cells_heads = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        if (a->done[i]) continue;
        int32_t n_ent = 0;
        for (int32_t j = i; j < b->n_tokens; j++)
            if (b->seq[j] == b->seq[i]) {
                a->ent[n_ent++] = j;
                a->done[j] = 1;
            }
        int64_t n_c = kv->seq_n_cells[b->seq[i]];
        if (!a->reference && ((int64_t)n_ent * group < MATMUL_BLAS_MIN_TOKENS || n_ent <= ATT_DIRECT_ENTRIES) &&
            n_ent <= ATT_CHUNK_ENTRIES &&
            used + n_c <= a->arena_n && sc_used + (int64_t)n_ent * p->n_head * n_c <= a->dsc_n) {
            int32_t *cells = a->acells + used, *cpos = a->acpos + used;
            int64_t got = kv_seq_cell_list(kv, b->seq[i], cells, a->arena_n - used); /* stops at the room */
            ASSERT(got == n_c);
            sort_cells_by_pos(a, cells, cpos, n_c);
            /* its cells: from the first one its first entry sees (as attend_seq's chunk) */
            int64_t lo = n_hidden(cpos, n_c, b->pos[a->ent[0]], p->window);
            struct direct_seq *ds = &a->dseq[a->n_dseq++];
            *ds = (struct direct_seq){.e0 = n_dent, .ne = n_ent, .off = used + lo, .row0 = a->n_drows,
                                      .sc_off = sc_used, .nv = n_visible(cpos, n_c, b->pos[a->ent[n_ent - 1]]) - lo};
            memcpy(a->dent + n_dent, a->ent, (size_t)n_ent * sizeof *a->ent);
            n_dent += n_ent;
            used += n_c;
            sc_used += (int64_t)n_ent * p->n_head * ds->nv;
            cells_heads += (int64_t)n_ent * p->n_head_kv * ds->nv;
            a->n_drows += (int64_t)n_ent * p->n_head;
        } else {
            a->gseq[a->n_gseq] = b->seq[i];
            a->gcount[a->n_gseq++] = n_ent;
            memcpy(a->gent + n_gent, a->ent, (size_t)n_ent * sizeof *a->ent);
            n_gent += n_ent;
        }
    }
    /* Item sizes (any split gives the same numbers; every item costs two atomic operations on
     * shared lines): score blocks of at least ATT_MIN_CELL_BLOCK cells, about four items per
     * thread; when every row is one block, no softmax phase (the score item does its rows'); mix
     * items of a group halved (in multiples of 32 elements: the kernel's register tiles) until
     * there are two per thread. */
    int64_t n_thr = a->n_slots;
    int64_t cb = (cells_heads + 4 * n_thr - 1) / (4 * n_thr);
    cb = (cb + 15) / 16 * 16;
    a->cell_block = cb < ATT_MIN_CELL_BLOCK ? ATT_MIN_CELL_BLOCK : cb;
    a->cells_heads = cells_heads;
    a->n_ia = 0;
    a->one_block = true;
    for (int32_t d = 0; d < a->n_dseq; d++) {
        struct direct_seq *ds = &a->dseq[d];
        ds->n_cb = (ds->nv + a->cell_block - 1) / a->cell_block;
        if (ds->n_cb > 1) a->one_block = false;
        ds->ia = a->n_ia;
        a->n_ia += (int64_t)ds->ne * p->n_head_kv * ds->n_cb;
    }
    int64_t n_groups = a->n_drows / group;
    a->db_len = p->head_dim;
    while (n_groups * (p->head_dim / a->db_len) < 2 * n_thr && a->db_len % 64 == 0) a->db_len /= 2;
    a->n_db = p->head_dim / a->db_len;
}

/* Rows [r0, r1) of the step's queries to Q8_0 (a->qq), as the reference quantizes the query
 * for Q8_0 cells (quant_from_float: its x86 rounding). */
static void quantize_queries(void *arg, int64_t r0, int64_t r1) {
    struct attn_ctx *a = arg;
    int64_t nq = (int64_t)a->p.n_head * a->p.head_dim;
    for (int64_t r = r0; r < r1; r++) quant_from_float(GGML_TYPE_Q8_0, a->q + r * nq, a->qq + (size_t)r * a->qq_row, nq);
}

/* The planned decode-sized sequences in one parallel job, the others one sequence at a time
 * (entries keep their batch order). */
void attn_layer(struct attn_ctx *a, const struct attn_params *p, int32_t layer, const float *q, float *out) {
    ASSERT(p->n_head == a->p.n_head && p->n_head_kv == a->p.n_head_kv && p->head_dim == a->p.head_dim &&
           p->window == a->p.window);
    a->p.scale = p->scale;
    a->layer = layer;
    a->q = q;
    a->out = out;
    if (a->k_q8) {
        int64_t nq = (int64_t)a->p.n_head * a->p.head_dim;
        compute_parallel_for_work(a->c, a->b->n_tokens, 2 * nq, quantize_queries, a);
    }
    int32_t group = a->group;
    int64_t n_units = a->n_drows / group;
    if (n_units >= a->n_slots) {
        /* Enough group units for every thread: each whole on one thread (unit_items), so a
         * unit's scores and probabilities stay in the cache of the thread that wrote them
         * (dec_items' items would hand them between threads twice per layer; a server's decode
         * steps show it: build/bench/forward_bench bench-models/smollm2-135m-q8_0.gguf --threads 2
         * --rows 1, and --rows 8). */
        int64_t work = a->cells_heads * group * a->p.head_dim;
        if (work < ATT_ALONE_WORK) unit_items(a, 0, n_units);
        else compute_parallel_for(a->c, n_units, unit_items, a);
    } else if (a->n_drows > 0) {
        /* the units' counters (rows of a unit are consecutive: unit u = row / group); stores
         * before pool_run's post, which publishes them to the threads */
        for (int32_t d = 0; d < a->n_dseq; d++) {
            const struct direct_seq *ds = &a->dseq[d];
            for (int64_t u = ds->row0 / group; u < (ds->row0 + (int64_t)ds->ne * a->p.n_head) / group; u++) {
                atomic_store_explicit(&a->sc_left[u], (int32_t)ds->n_cb, memory_order_relaxed);
                atomic_store_explicit(&a->mix_left[u], group, memory_order_relaxed);
            }
        }
        struct dec_job dj = {.a = a, .end_a = a->n_ia, .end_b = a->n_ia + (a->one_block ? 0 : a->n_drows)};
        dj.n_items = dj.end_b + a->n_drows / group * a->n_db;
        compute_parallel_for(a->c, a->n_slots, dec_items, &dj); /* one call per thread */
    }
    for (int32_t g = 0, e = 0; g < a->n_gseq; e += a->gcount[g++]) {
        memcpy(a->ent, a->gent + e, (size_t)a->gcount[g] * sizeof *a->ent);
        attend_seq(a, a->gseq[g], a->gcount[g]);
    }
}
