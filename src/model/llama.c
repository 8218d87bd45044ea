/* llama.c: the forward pass of the llama family (llama, and qwen2 = llama + q/k/v biases + NEOX
 * rope) over the unified KV memory.
 *
 * Per layer:  x += Wo · attn(rope(Wq·norm(x) + bq), rope(Wk·norm(x) + bk), Wv·norm(x) + bv)
 *             x += Wdown · (silu(Wgate·norm(x)) * Wup·norm(x))
 * then logits = Wout · norm(x) for the entries that want them.
 *
 * Matrix products go through math/matmul.h (quantized activations + SIMD dots for few tokens,
 * dequantized tiles + sgemm for many). Attention is done per (sequence, kv head) as two products
 * over that sequence's cells gathered to F32: scores = Q·Kᵀ, masked by the cells' positions and
 * softmaxed (math/attn.h's attn_softmax_row), then out = P·V. The cells are ordered by position,
 * so a chunk of entries (in increasing positions) only multiplies the prefix of cells its last
 * entry sees. K and V are read back from the F16 cells (also for the batch's own tokens), as the
 * reference does.
 *
 * The element-wise steps follow the reference's x86 (AVX-512) build: RoPE as a C++ compiler
 * contracts it (fma(x0, cos, -(x1*sin)), fma(x0, sin, x1*cos)), SiLU and the softmax with its
 * vectorized expf (quant_expf), the softmax sum per 16-lane chunk in float, chunks added in
 * double, over the row padded with zeros to a multiple of 256 cells (its n_kv).
 * With cfg.reference the attention dots also follow it (measured: the golden tests then match
 * to the printed precision): Q.K and P.V of a batch of 2+ tokens in tinyBLAS's 16-lane order
 * (quant_dot_f32_lanes16), of a single token as ggml_vec_dot_f16 (quant_dot_f32_vec_f16, P.V
 * over the padded row). Otherwise a prompt chunk runs as blocks of query rows (a kv head's, up to
 * ATT_BLOCK_ROWS) shared by the compute threads, each block two sgemm calls around its softmax
 * (attn_rows_f32, V multiplied as stored), and
 * a chunk too small for sgemm (matmul's vector path: decode steps) skips the F32 copy: its rows
 * run on math/attn.h's kernels straight from the F16 cells, with the very numbers the vector path
 * would give: every such sequence of the batch (a decode step's) has its cells listed once per
 * pass (plan_attention), and all their heads run in one parallel job per layer: a GQA group's
 * query rows read each K and V row once, each group unit (an entry's kv head) whole on one
 * thread where there are at least as many units as threads (unit_items), else split in items
 * of even size across the threads (dec_items).
 */
#include "model/arch.h"
#include "common/err.h"
#include "math/attn.h"
#include "math/matmul.h"
#include "math/q8x16.h"
#include "math/quant.h"
#include "memory/kv.h"

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Entries of one sequence per attention chunk: bounds the score buffer, keeps sgemm shapes big. */
enum { ATT_CHUNK_ENTRIES = 64 };
/* Most query rows per block of a chunk on the sgemm path (attn_rows_f32: one block per job item,
 * so a chunk of one kv head is shared by the threads). Every block packs its kv head's K and V
 * again for sgemm, so bigger blocks cost less CPU (SmolLM2 shape, 3000-token prompt, one thread:
 * 16 rows 8.3 s, 32 7.5-7.9 s, 64 7.1-7.5 s, 96 6.8-7.0 s); see split_chunk for how a chunk is
 * split. Each thread that takes part has scores for a block (ATT_BLOCK_ROWS x n_ctx floats), so
 * at most ATT_CHUNK_SLOTS threads do. */
enum { ATT_BLOCK_ROWS = 96, ATT_CHUNK_SLOTS = 8 };
/* The reference pads its attention rows (n_kv) to a multiple of this many cells. */
enum { REF_KV_PAD = 256 };
/* Fewest cells of a decode attention score item (see plan_attention). */
enum { ATT_MIN_CELL_BLOCK = 128 };
/* Below this many score multiply-adds (visible cells x query heads x head_dim, summed over the
 * planned entries) a layer's decode attention runs on the calling thread alone: the queries
 * and cells are in its cache (qk_post wrote them) and the whole of it takes less than handing
 * units to another thread costs. SmolLM2-135M (3 units of 3 heads), one sequence, tg-only A/B
 * interleaved: at positions 0..63 528/519 against 488/497 t/s alone / shared, at 64..127 even,
 * at 128..191 456/437 against 477/461 (so 64 cells of its 9 heads: 36864). */
enum { ATT_ALONE_WORK = 64 * 9 * 64 };

/* One planned decode-sized sequence: entries dent[e0 .. e0 + ne), cells acells[off .. off + nv)
 * (the cells its last entry sees; earlier entries mask the rest), its rows [row0, row0 + ne * n_head)
 * (row k = entry k / n_head, query head k % n_head), their scores dsc[sc_off + k * nv ..], its
 * score items [ia, ia + ne * n_head_kv * n_cb) (see dec_items). */
struct direct_seq {
    int32_t e0, ne;
    int64_t off, nv, row0;
    int64_t sc_off, ia, n_cb;
};

struct forward_scratch {
    struct compute *c;
    int32_t att_rows;   /* rows of one attention chunk: group * min(max_tokens, ATT_CHUNK_ENTRIES) */
    size_t bytes;
    float *x;           /* [T][n_embd] residual stream */
    float *xn;          /* [T][n_embd] normalized input of a block */
    float *q;           /* [T][n_head * head_dim] */
    float *k;           /* [T][n_head_kv * head_dim] */
    float *v;           /* [T][n_head_kv * head_dim] */
    float *att;         /* [T][n_head * head_dim] attention output, heads side by side */
    float *tmp;         /* [T][n_embd] output of a block before the residual add */
    float *gate;        /* [T][n_ff] */
    float *up;          /* [T][n_ff] */
    float *rope_cos;    /* [T][n_rot / 2] */
    float *rope_sin;    /* [T][n_rot / 2] */
    int32_t *ent;       /* [T] entries of the sequence being attended */
    uint8_t *done;      /* [T] entry already attended */
    int32_t *cells;     /* [n_ctx] cells of that sequence */
    int32_t *cpos;      /* [n_ctx] their positions */
    float *kf;          /* [n_head_kv][n_ctx][head_dim] its K, F32 */
    float *vf;          /* [n_head_kv][n_ctx][head_dim] its V, F32 */
    float *vt;          /* [head_dim][n_visible] V of one kv head, transposed, for one chunk (cfg.reference) */
    int32_t *order;     /* [n_ctx] scratch of the position sort */
    /* qg, sc, h16, og: att_rows rows for a chunk of the reference path, ATT_BLOCK_ROWS rows per
     * slot (< chunk_slots) for chunk_blocks, or one row per slot (< n_slots) for direct_rows;
     * they have qg_rows >= all three. */
    float *qg;          /* [qg_rows][head_dim] queries of one kv head's group */
    float *sc;          /* [qg_rows][n_ctx] scores, then probabilities */
    uint16_t *h16;      /* [qg_rows][head_dim] F16 staging for rounding the queries */
    float *og;          /* [qg_rows][head_dim] attention output of the chunk */
    float *xo;          /* [max_outputs][n_embd] rows that want logits */
    /* Decode-sized sequences of the step (all their entries in one direct chunk), planned once
     * per forward pass (their cells do not change between layers) and attended in one parallel
     * job per layer: a step of k decode rows used to list k sequences' cells and dispatch k
     * small jobs on every layer. */
    struct direct_seq *dseq; /* [max_tokens] */
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
    _Atomic int32_t *sc_left, *mix_left; /* [max_tokens * n_head_kv] */
    int32_t *acells;    /* [arena_n] the planned sequences' cells, sorted by position */
    int32_t *acpos;     /* [arena_n] their positions */
    int64_t arena_n;
    bool reference;     /* cfg.reference */
    int32_t n_slots;    /* direct_rows: one slot (row of qg, sc, h16) per compute thread */
    int32_t chunk_slots; /* chunk_blocks: min(n_slots, ATT_CHUNK_SLOTS) slots of ATT_BLOCK_ROWS rows */
    size_t sc_stride;   /* a row of sc: n_ctx */
};

static void *scratch_alloc(struct forward_scratch *s, size_t n, size_t elt, bool *ok) {
    void *p = calloc(n ? n : 1, elt);
    if (!p) *ok = false;
    s->bytes += n * elt;
    return p;
}

static void llama_forward_ctx_destroy(struct forward_ctx *fc) {
    if (!fc) return;
    struct forward_scratch *s = fc->s;
    if (s) {
        if (s->c) compute_destroy(s->c);
        void *bufs[] = {s->x, s->xn, s->q, s->k, s->v, s->att, s->tmp, s->gate, s->up, s->rope_cos, s->rope_sin,
                        s->ent, s->done, s->cells, s->cpos, s->kf, s->vf, s->vt, s->order, s->qg, s->sc, s->h16, s->og, s->xo,
                        s->dseq, s->dent, s->gent, s->gseq, s->gcount, s->acells, s->acpos, s->dsc,
                        (void *)s->sc_left, (void *)s->mix_left};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
        free(s);
    }
    free(fc->logits);
    free(fc);
}

static size_t llama_forward_ctx_bytes(const struct forward_ctx *fc) {
    return fc->s->bytes + compute_scratch_bytes(fc->s->c);
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static int llama_forward_ctx_create(struct forward_ctx **out, const struct model *m, const struct forward_config *cfg) {
    const struct model_hparams *hp = &m->hp;
    struct forward_config c = *cfg;
    struct forward_ctx *fc = calloc(1, sizeof *fc);
    struct forward_scratch *s = calloc(1, sizeof *s);
    if (!fc || !s) {
        free(fc);
        free(s);
        return -ERR_NOMEM;
    }
    fc->cfg = c;
    fc->s = s;
    s->reference = c.reference;
    size_t T = (size_t)c.max_tokens, E = (size_t)hp->n_embd, hd = (size_t)hp->head_dim;
    size_t nq = (size_t)hp->n_head * hd, nkv = (size_t)hp->n_head_kv * hd, ctx = (size_t)c.n_ctx;
    size_t group = (size_t)(hp->n_head / hp->n_head_kv);
    s->att_rows = (int32_t)(group * (T < ATT_CHUNK_ENTRIES ? T : ATT_CHUNK_ENTRIES));
    bool ok = true;
    s->x = scratch_alloc(s, T * E, sizeof(float), &ok);
    s->xn = scratch_alloc(s, T * E, sizeof(float), &ok);
    s->q = scratch_alloc(s, T * nq, sizeof(float), &ok);
    s->k = scratch_alloc(s, T * nkv, sizeof(float), &ok);
    s->v = scratch_alloc(s, T * nkv, sizeof(float), &ok);
    s->att = scratch_alloc(s, T * nq, sizeof(float), &ok);
    s->tmp = scratch_alloc(s, T * E, sizeof(float), &ok);
    s->gate = scratch_alloc(s, T * (size_t)hp->n_ff, sizeof(float), &ok);
    s->up = scratch_alloc(s, T * (size_t)hp->n_ff, sizeof(float), &ok);
    s->rope_cos = scratch_alloc(s, T * (size_t)(hp->n_rot / 2), sizeof(float), &ok);
    s->rope_sin = scratch_alloc(s, T * (size_t)(hp->n_rot / 2), sizeof(float), &ok);
    s->ent = scratch_alloc(s, T, sizeof(int32_t), &ok);
    s->done = scratch_alloc(s, T, sizeof(uint8_t), &ok);
    s->cells = scratch_alloc(s, ctx, sizeof(int32_t), &ok);
    s->cpos = scratch_alloc(s, ctx, sizeof(int32_t), &ok);
    s->kf = scratch_alloc(s, ctx * nkv, sizeof(float), &ok);
    s->vf = scratch_alloc(s, ctx * nkv, sizeof(float), &ok);
    s->vt = scratch_alloc(s, c.reference ? ctx * hd : 0, sizeof(float), &ok);
    s->order = scratch_alloc(s, ctx, sizeof(int32_t), &ok);
    s->dseq = scratch_alloc(s, T, sizeof *s->dseq, &ok);
    s->dent = scratch_alloc(s, T, sizeof(int32_t), &ok);
    s->gent = scratch_alloc(s, T, sizeof(int32_t), &ok);
    s->gseq = scratch_alloc(s, T, sizeof(int32_t), &ok);
    s->gcount = scratch_alloc(s, T, sizeof(int32_t), &ok);
    s->sc_left = scratch_alloc(s, T * (size_t)hp->n_head_kv, sizeof *s->sc_left, &ok);
    s->mix_left = scratch_alloc(s, T * (size_t)hp->n_head_kv, sizeof *s->mix_left, &ok);
    /* room for the cells of 8 full-context sequences, or of many shorter ones; a step whose
     * decode sequences hold more falls back to per-sequence attention for the rest */
    s->arena_n = 8 * (int64_t)ctx;
    s->acells = scratch_alloc(s, (size_t)s->arena_n, sizeof(int32_t), &ok);
    s->acpos = scratch_alloc(s, (size_t)s->arena_n, sizeof(int32_t), &ok);
    /* scores of every planned row: the arena's cells for each query head, at most 8 MB beyond
     * one full-context sequence's (sequences past it take the per-row path, same numbers) */
    s->dsc_n = (int64_t)hp->n_head * s->arena_n;
    int64_t dsc_cap = max64((int64_t)hp->n_head * (int64_t)ctx, (int64_t)1 << 21);
    if (s->dsc_n > dsc_cap) s->dsc_n = dsc_cap;
    s->dsc = scratch_alloc(s, (size_t)s->dsc_n, sizeof(float), &ok);
    s->xo = scratch_alloc(s, (size_t)c.max_outputs * E, sizeof(float), &ok);
    fc->logits = scratch_alloc(s, (size_t)c.max_outputs * (size_t)hp->n_vocab, sizeof(float), &ok);
    int rc = ok ? 0 : -ERR_NOMEM;
    if (rc == 0) {
        int64_t max_rows = max64(max64(c.max_tokens, s->att_rows), c.max_outputs);
        int64_t max_in = max64(max64(hp->n_embd, hp->n_ff), (int64_t)nq);
        rc = compute_create(&s->c, c.n_threads, max_rows, max_in);
    }
    if (rc == 0) {
        compute_set_yield_us(s->c, c.yield_us);
        s->n_slots = compute_n_threads(s->c);
        s->chunk_slots = s->n_slots < ATT_CHUNK_SLOTS ? s->n_slots : ATT_CHUNK_SLOTS;
        size_t qg_rows = (size_t)max64(max64(s->chunk_slots * (int64_t)ATT_BLOCK_ROWS, s->att_rows), s->n_slots);
        s->sc_stride = ctx;
        s->qg = scratch_alloc(s, qg_rows * hd, sizeof(float), &ok);
        s->sc = scratch_alloc(s, qg_rows * s->sc_stride, sizeof(float), &ok);
        s->h16 = scratch_alloc(s, qg_rows * hd, sizeof(uint16_t), &ok);
        s->og = scratch_alloc(s, qg_rows * hd, sizeof(float), &ok);
        if (!ok) rc = -ERR_NOMEM;
    }
    if (rc < 0) {
        llama_forward_ctx_destroy(fc);
        return rc;
    }
    *out = fc;
    return 0;
}

/* ---- small row operations, parallel over rows ---- */

/* fn over n rows of about `work` element operations each: on the compute threads when there is
 * enough to share, else inline. A decode step has a few tiny row operations per layer; waking
 * the other threads for them costs more than the work (much more on a loaded machine). */
static void rows_for(struct compute *c, int64_t n, int64_t work, void (*fn)(void *, int64_t, int64_t), void *arg) {
    if (n * work < 64 * 1024) fn(arg, 0, n);
    else compute_parallel_for(c, n, fn, arg);
}

struct rows_job {
    const struct model_hparams *hp;
    float *x;           /* rows of n floats */
    float *y;
    const float *w;
    int64_t n;
    const float *cos, *sin;
    int32_t n_heads;
    bool sequential; /* rmsnorm: the sum of squares in the reference's order (forward_config.reference) */
};

/* y = x * scale * w over NORM_BLOCK elements (a constant count: vectorized at -O2, as
 * swiglu_block; x and y may be the same row, element by element). */
enum { NORM_BLOCK = 64 };
static void norm_scale_block(const float *x, float scale, const float *restrict w, float *y) {
    float t[NORM_BLOCK];
    for (int i = 0; i < NORM_BLOCK; i++) t[i] = x[i] * scale * w[i];
    memcpy(y, t, sizeof t);
}

/* The sum of x[i] * x[i] (float products, like the reference) in double, in eight partial
 * sums (the serving path's; reference runs keep the reference's one chain): one chain of
 * dependent double adds took 0.5 us per 576-element row, as long as the rest of a SmolLM2 norm;
 * the order moves the double sum by a few ulps, far below the float scale's rounding. */
static double sum_squares(const float *x, int64_t n) {
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += (double)(x[i + k] * x[i + k]);
    for (; i < n; i++) acc[0] += (double)(x[i] * x[i]);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

static void rmsnorm_rows(void *arg, int64_t r0, int64_t r1) {
    const struct rows_job *j = arg;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->x + r * j->n;
        float *y = j->y + r * j->n;
        double sum = 0;
        if (j->sequential) /* the reference's order: one chain */
            for (int64_t i = 0; i < j->n; i++) sum += (double)(x[i] * x[i]);
        else
            sum = sum_squares(x, j->n);
        float scale = 1.0f / sqrtf((float)(sum / (double)j->n) + j->hp->rms_eps);
        int64_t i = 0;
        for (; i + NORM_BLOCK <= j->n; i += NORM_BLOCK) norm_scale_block(x + i, scale, j->w + i, y + i);
        for (; i < j->n; i++) y[i] = x[i] * scale * j->w[i];
    }
}

/* y = rmsnorm(x) * w over n_rows rows of n_embd. */
static void rmsnorm(struct forward_scratch *s, const struct model_hparams *hp, const float *x, float *y,
                    const float *w, int64_t n_rows) {
    struct rows_job j = {.hp = hp, .x = (float *)x, .y = y, .w = w, .n = hp->n_embd, .sequential = s->reference};
    rows_for(s->c, n_rows, hp->n_embd, rmsnorm_rows, &j);
}

/* Rotate the first n_rot dims of each of n_heads heads of each row (row r at the angles of
 * rope_cos/sin row r). NORM pairs (2i, 2i+1); NEOX pairs (i, i + n_rot/2). */
static void rope_rows(void *arg, int64_t r0, int64_t r1) {
    const struct rows_job *j = arg;
    const struct model_hparams *hp = j->hp;
    int32_t half = hp->n_rot / 2;
    for (int64_t r = r0; r < r1; r++) {
        const float *cs = j->cos + r * half, *sn = j->sin + r * half;
        for (int32_t h = 0; h < j->n_heads; h++) {
            float *v = j->x + r * j->n + (int64_t)h * hp->head_dim;
            for (int32_t i = 0; i < half; i++) {
                int32_t a = hp->rope_type == ROPE_NORM ? 2 * i : i;
                int32_t b = hp->rope_type == ROPE_NORM ? 2 * i + 1 : i + half;
                float x0 = v[a], x1 = v[b];
                v[a] = fmaf(x0, cs[i], -(x1 * sn[i]));
                v[b] = fmaf(x0, sn[i], x1 * cs[i]);
            }
        }
    }
}

/* After the Q/K/V products, per row: rope on Q (then rounded to F16 in place: every attention
 * path multiplies the query as the F16 cells see it, and rounding twice changes nothing) and on
 * K, K and V stored to the row's cell as F16. One pass (inline for a decode step: no wake-up of
 * the other threads for a few hundred elements). */
struct qk_post_job {
    struct rows_job q, k;
    const struct kv_memory *kv;
    const float *v;
    int32_t layer;
};

static void qk_post_rows(void *arg, int64_t r0, int64_t r1) {
    const struct qk_post_job *j = arg;
    int64_t nkv = j->k.n;
    rope_rows((void *)&j->q, r0, r1);
    rope_rows((void *)&j->k, r0, r1);
    uint16_t h[512];
    for (int64_t r = r0; r < r1; r++) {
        float *q = j->q.x + r * j->q.n;
        for (int64_t i = 0; i < j->q.n; i += 512) {
            int64_t m = j->q.n - i < 512 ? j->q.n - i : 512;
            quant_from_float(GGML_TYPE_F16, q + i, h, m);
            quant_to_float(GGML_TYPE_F16, h, q + i, m);
        }
        int32_t cell = kv_batch_cell(j->kv, (int32_t)r);
        quant_from_float(GGML_TYPE_F16, j->k.x + r * nkv, kv_k_row(j->kv, j->layer, cell), nkv);
        quant_from_float(GGML_TYPE_F16, j->v + r * nkv, kv_v_row(j->kv, j->layer, cell), nkv);
    }
}

static void qk_post(struct compute *c, const struct model_hparams *hp, const struct forward_scratch *s,
                    const struct kv_memory *kv, int32_t layer, int64_t n_rows) {
    struct qk_post_job j = {
        .q = {.hp = hp, .x = s->q, .n = (int64_t)hp->n_head * hp->head_dim, .cos = s->rope_cos, .sin = s->rope_sin,
              .n_heads = hp->n_head},
        .k = {.hp = hp, .x = s->k, .n = (int64_t)hp->n_head_kv * hp->head_dim, .cos = s->rope_cos,
              .sin = s->rope_sin, .n_heads = hp->n_head_kv},
        .kv = kv, .v = s->v, .layer = layer};
    rows_for(c, n_rows, (int64_t)(hp->n_head + hp->n_head_kv) * (hp->n_rot + 2 * hp->head_dim), qk_post_rows, &j);
}

/* Angles like the reference: theta_i = pos * base^(-2i/n_rot), by repeated multiplication. */
static void rope_tables(const struct model_hparams *hp, struct forward_scratch *s, const struct batch *b) {
    int32_t half = hp->n_rot / 2;
    float theta_scale = powf(hp->rope_base, -2.0f / (float)hp->n_rot);
    for (int32_t r = 0; r < b->n_tokens; r++) {
        float theta = (float)b->pos[r];
        for (int32_t i = 0; i < half; i++) {
            s->rope_cos[r * half + i] = cosf(theta);
            s->rope_sin[r * half + i] = sinf(theta);
            theta *= theta_scale;
        }
    }
}

/* x = x / (1 + e) * y over SWIGLU_BLOCK elements: a constant count (and no aliasing) lets the
 * compiler vectorize it at -O2 (it left the divisions scalar: 2.8 us per SmolLM2 layer). */
enum { SWIGLU_BLOCK = 256 };
static void swiglu_block(float *restrict x, const float *restrict e, const float *restrict y) {
    for (int k = 0; k < SWIGLU_BLOCK; k++) x[k] = x[k] / (1.0f + e[k]) * y[k];
}

static void swiglu_rows(void *arg, int64_t r0, int64_t r1) {
    const struct rows_job *j = arg;
    float e[SWIGLU_BLOCK];
    for (int64_t i0 = r0 * j->n; i0 < r1 * j->n; i0 += SWIGLU_BLOCK) {
        int64_t m = r1 * j->n - i0 < SWIGLU_BLOCK ? r1 * j->n - i0 : SWIGLU_BLOCK;
        for (int64_t k = 0; k < m; k++) e[k] = 0.0f - j->x[i0 + k];
        quant_expf_n(e, e, m);
        if (m == SWIGLU_BLOCK) {
            swiglu_block(j->x + i0, e, j->y + i0);
            continue;
        }
        for (int64_t k = 0; k < m; k++) j->x[i0 + k] = j->x[i0 + k] / (1.0f + e[k]) * j->y[i0 + k];
    }
}

static void add_bias(float *x, const float *bias, int64_t n, int64_t n_rows) {
    if (!bias) return;
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n; i++) x[r * n + i] += bias[i];
}

/* y = W·x (see matmul.h for the paths). */
static void mm(struct forward_scratch *s, const struct model_weight *w, const float *x, int64_t n_tok, float *y) {
    matmul_path(s->c, s->reference ? MATMUL_REFERENCE : MATMUL_AUTO, w->type, w->data, w->n_in, w->n_out, x, n_tok,
                y);
}

/* Matrices with the same input x (Q/K/V, gate/up): one shared dispatch where matmul_multi_types
 * can (same type, or types whose activations are one type: Q4_K_M's Q5_0 Q/K and Q8_0 V; it
 * gives each the numbers mm would), else one mm each. */
static void mm_multi(struct forward_scratch *s, int n, const struct model_weight *const *w, const float *x,
                     int64_t n_tok, float *const *y) {
    bool shared = !s->reference;
    for (int i = 1; i < n; i++) shared = shared && w[i]->n_in == w[0]->n_in;
    if (!shared) {
        for (int i = 0; i < n; i++) mm(s, w[i], x, n_tok, y[i]);
        return;
    }
    struct matmul_out outs[MATMUL_MULTI_MAX];
    enum ggml_type types[MATMUL_MULTI_MAX];
    ASSERT(n <= MATMUL_MULTI_MAX);
    for (int i = 0; i < n; i++) {
        outs[i] = (struct matmul_out){.w = w[i]->data, .n_out = w[i]->n_out, .y = y[i]};
        types[i] = w[i]->type;
    }
    matmul_multi_types(s->c, types, w[0]->n_in, x, n_tok, n, outs);
}

/* ---- attention ---- */

/* x = (float)(f16)x through tmp: the reference multiplies Q by the F16 K cells, and the
 * probabilities by the F16 V cells, in F16 (its matmul converts the F32 side to the F16 side's
 * type); rounding here keeps us on the same numbers. */
static void round_f16(float *x, uint16_t *tmp, int64_t n) {
    quant_from_float(GGML_TYPE_F16, x, tmp, n);
    quant_to_float(GGML_TYPE_F16, tmp, x, n);
}

struct softmax_job {
    float *sc;           /* rows of n_c scores */
    int64_t n_c;
    const int32_t *cpos; /* [n_c] */
    const int32_t *row_pos; /* position of each row's entry: row r -> row_pos[r / group] */
    int32_t group;
    float scale;
};

/* The reference's softmax (math/attn.h: exp per element, 0 where masked, summed per 16 elements
 * in float, the chunks added in double as over its zero-padded row, probabilities rounded to F16). */
static void softmax_rows(void *arg, int64_t r0, int64_t r1) {
    const struct softmax_job *j = arg;
    for (int64_t r = r0; r < r1; r++)
        attn_softmax_row(j->sc + r * j->n_c, j->n_c, j->cpos, j->row_pos[r / j->group], j->scale);
}

struct gather_job {
    const struct kv_memory *kv;
    const struct model_hparams *hp;
    struct forward_scratch *s;
    int32_t layer;
    int64_t n_c;
};

/* K and V of cells [c0, c1) to kf[h][c][d] and vf[h][c][d], F32. */
static void gather_kv(void *arg, int64_t c0, int64_t c1) {
    const struct gather_job *j = arg;
    int32_t hd = j->hp->head_dim, nh = j->hp->n_head_kv;
    for (int64_t c = c0; c < c1; c++) {
        int32_t cell = j->s->cells[c];
        const uint16_t *kr = kv_k_row(j->kv, j->layer, cell), *vr = kv_v_row(j->kv, j->layer, cell);
        for (int32_t h = 0; h < nh; h++) {
            quant_to_float(GGML_TYPE_F16, kr + (int64_t)h * hd, j->s->kf + ((int64_t)h * j->n_c + c) * hd, hd);
            quant_to_float(GGML_TYPE_F16, vr + (int64_t)h * hd, j->s->vf + ((int64_t)h * j->n_c + c) * hd, hd);
        }
    }
}

static int cmp_by_pos(const void *a, const void *b, void *arg) {
    const int32_t *pos = arg, x = pos[*(const int32_t *)a], y = pos[*(const int32_t *)b];
    return (x > y) - (x < y);
}

/* Order the sequence's cells by position (cells are usually taken in order, so usually they
 * already are): then a chunk of entries sees exactly a prefix of them. */
static void sort_cells_by_pos(struct forward_scratch *s, const struct kv_memory *kv, int32_t *cells, int32_t *cpos,
                              int64_t n_c) {
    bool sorted = true;
    for (int64_t c = 0; c < n_c; c++) {
        cpos[c] = kv->pos[cells[c]];
        if (c && cpos[c] < cpos[c - 1]) sorted = false;
    }
    if (sorted) return;
    memcpy(s->order, cells, (size_t)n_c * sizeof *s->order);
    qsort_r(s->order, (size_t)n_c, sizeof *s->order, cmp_by_pos, kv->pos);
    memcpy(cells, s->order, (size_t)n_c * sizeof *cells);
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

/* cfg.reference: the attention dots of rows [r0, r1) of a chunk in the reference's orders. */
struct ref_dots_job {
    struct forward_scratch *s;
    const float *kf;    /* this kv head's K, [nv][hd] */
    int32_t hd;
    int64_t nv, n_pad;  /* visible cells; the reference's row length */
    bool batched;       /* 2+ tokens in the batch: tinyBLAS, else ggml_vec_dot_f16 */
};

static void ref_scores(void *arg, int64_t r0, int64_t r1) {
    const struct ref_dots_job *j = arg;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = 0; c < j->nv; c++) {
            const float *q = j->s->qg + r * j->hd, *k = j->kf + c * j->hd;
            j->s->sc[r * j->nv + c] = j->batched ? quant_dot_f32_lanes16(j->hd, q, k)
                                                 : quant_dot_f32_vec_f16(j->hd, j->hd, q, k);
        }
}

static void ref_outputs(void *arg, int64_t r0, int64_t r1) {
    const struct ref_dots_job *j = arg;
    for (int64_t r = r0; r < r1; r++)
        for (int32_t d = 0; d < j->hd; d++) {
            const float *p = j->s->sc + r * j->nv, *v = j->s->vt + (int64_t)d * j->nv;
            j->s->og[r * j->hd + d] = j->batched ? quant_dot_f32_lanes16(j->nv, p, v)
                                                 : quant_dot_f32_vec_f16(j->nv, j->n_pad, p, v);
        }
}

struct direct_job {
    const struct model_hparams *hp;
    struct forward_scratch *s;
    const struct kv_memory *kv;
    const struct batch *b;
    int32_t layer;
    /* direct_rows: one chunk, entries ent[0 ..], cells[0 .. nv) at positions cpos */
    const int32_t *ent, *cells, *cpos;
    int64_t nv;         /* cells every row multiplies (the chunk's last entry sees them all) */
    _Atomic int slot;   /* scratch slots handed out */
};

/* One attention row (entry i, query head qh) over cells[0 .. nv), in slot `slot`'s scratch. */
static void direct_row(const struct direct_job *j, int slot, int32_t i, int32_t qh, const int32_t *cells,
                       const int32_t *cpos, int64_t nv) {
    const struct model_hparams *hp = j->hp;
    struct forward_scratch *s = j->s;
    int32_t hd = hp->head_dim, group = hp->n_head / hp->n_head_kv, kvh = qh / group;
    int64_t nq = (int64_t)hp->n_head * hd;
    float *q = s->qg + (size_t)slot * hd, *sc = s->sc + (size_t)slot * s->sc_stride;
    uint16_t *h16 = s->h16 + (size_t)slot * hd;
    const uint16_t *k0 = kv_k_row(j->kv, j->layer, 0), *v0 = kv_v_row(j->kv, j->layer, 0);
    size_t k_stride = (size_t)j->kv->shape.n_embd_k, v_stride = (size_t)j->kv->shape.n_embd_v;
    memcpy(q, s->q + i * nq + (int64_t)qh * hd, (size_t)hd * sizeof(float));
    round_f16(q, h16, hd);
    attn_scores_f16(q, k0 + (size_t)kvh * hd, k_stride, cells, nv, hd, sc);
    attn_softmax_row(sc, nv, cpos, j->b->pos[i], 1.0f / sqrtf((float)hd));
    attn_mix_f16(sc, v0 + (size_t)kvh * hd, v_stride, cells, nv, hd, s->att + i * nq + (int64_t)qh * hd);
}

/* Rows [r0, r1) of a direct chunk, row r = entry e0 + r / n_head, query head r % n_head: the
 * scores and the mix exactly as the matmuls of the gathered path's vector kernels compute them,
 * on the same F16-rounded query and probabilities. */
static void direct_rows(void *arg, int64_t r0, int64_t r1) {
    struct direct_job *j = arg;
    int slot = atomic_fetch_add_explicit(&j->slot, 1, memory_order_relaxed);
    ASSERT(slot < j->s->n_slots);
    int32_t n_head = j->hp->n_head;
    for (int64_t r = r0; r < r1; r++)
        direct_row(j, slot, j->ent[r / n_head], (int32_t)(r % n_head), j->cells, j->cpos, j->nv);
}

/* The planned sequences' attention, one job per layer (struct direct_job's layer, b, kv): its
 * items in three phases, handed out in order by `next`; an item waits only for the items of its
 * own group unit (an entry's kv head) in the phases before (a softmax row for the unit's score
 * items, sc_left; a mix item for the unit's rows' probabilities, mix_left), so the thread that
 * waits holds no item and whoever holds one is running it: the wait ends (a preempted holder
 * only delays it). Items are handed out phase by phase in unit order, so a unit's items of the
 * phase before were handed out long before and a thread rarely waits at all (it used to wait
 * for every item of the phase before: a thread idle at each of the two phase ends per layer).
 *   score items: (sequence, entry, kv head, block of cells): the group's query rows (F16-rounded
 *     in place by qk_post) against the block, attn_scores_f16_rows (each K row read once for
 *     the group; row by row exactly attn_scores_f16's numbers);
 *   softmax items: a row (attn_softmax_row);
 *   mix items: (sequence, entry, kv head, db_len output elements): the group's rows over those
 *     elements, attn_mix_f16_rows (each V row read once for the group; each output element is
 *     a dot of its own, so any split gives the numbers of the whole row, attn_mix_f16's).
 * So a row's numbers are direct_row's whatever the split, the thread count or the other
 * sequences of the step, and the work splits evenly however few rows there are (one decode
 * row of a 9-head model used to split 5/4 rows over 2 threads, each row reading its K and V). */
struct dec_job {
    struct direct_job dj;
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
static const struct direct_seq *dseq_of_row(const struct forward_scratch *s, int64_t r, int32_t n_head) {
    int32_t lo = 0, hi = s->n_dseq - 1;
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) / 2;
        if (s->dseq[mid].row0 <= r) lo = mid;
        else hi = mid - 1;
    }
    ASSERT(r >= s->dseq[lo].row0 && r < s->dseq[lo].row0 + (int64_t)s->dseq[lo].ne * n_head);
    return &s->dseq[lo];
}

static const struct direct_seq *dseq_of_item(const struct forward_scratch *s, int64_t it) {
    int32_t lo = 0, hi = s->n_dseq - 1;
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) / 2;
        if (s->dseq[mid].ia <= it) lo = mid;
        else hi = mid - 1;
    }
    return &s->dseq[lo];
}

static void dec_items(void *arg, int64_t i0, int64_t i1) {
    struct dec_job *j = arg;
    struct forward_scratch *s = j->dj.s;
    const struct model_hparams *hp = j->dj.hp;
    const struct kv_memory *kv = j->dj.kv;
    int32_t hd = hp->head_dim, n_head = hp->n_head, n_kv = hp->n_head_kv, group = n_head / n_kv;
    int64_t nq = (int64_t)n_head * hd;
    const uint16_t *k0 = kv_k_row(kv, j->dj.layer, 0), *v0 = kv_v_row(kv, j->dj.layer, 0);
    size_t k_stride = (size_t)kv->shape.n_embd_k, v_stride = (size_t)kv->shape.n_embd_v;
    for (int64_t it; (it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_items;) {
        if (it < j->end_a) {
            const struct direct_seq *ds = dseq_of_item(s, it);
            int64_t k = it - ds->ia, per_entry = n_kv * ds->n_cb;
            int32_t e = (int32_t)(k / per_entry), kvh = (int32_t)(k % per_entry / ds->n_cb);
            int64_t c0 = k % ds->n_cb * s->cell_block, n = ds->nv - c0 < s->cell_block ? ds->nv - c0 : s->cell_block;
            int32_t i = s->dent[ds->e0 + e];
            float *sc = s->dsc + ds->sc_off + ((int64_t)e * n_head + (int64_t)kvh * group) * ds->nv;
            attn_scores_f16_rows(s->q + i * nq + (int64_t)kvh * group * hd, (size_t)hd, group,
                                 k0 + (size_t)kvh * hd, k_stride, s->acells + ds->off + c0, n, hd, sc + c0,
                                 (size_t)ds->nv);
            int64_t u = ds->row0 / group + (int64_t)e * n_kv + kvh;
            if (j->end_b == j->end_a) { /* no softmax phase: every row is one block */
                for (int32_t g = 0; g < group; g++)
                    attn_softmax_row(sc + g * ds->nv, ds->nv, s->acpos + ds->off, j->dj.b->pos[i],
                                     1.0f / sqrtf((float)hd));
                atomic_fetch_sub_explicit(&s->mix_left[u], group, memory_order_release);
            } else {
                atomic_fetch_sub_explicit(&s->sc_left[u], 1, memory_order_release);
            }
        } else if (it < j->end_b) {
            int64_t r = it - j->end_a;
            wait_ready(&s->sc_left[r / group]);
            const struct direct_seq *ds = dseq_of_row(s, r, n_head);
            int64_t k = r - ds->row0;
            attn_softmax_row(s->dsc + ds->sc_off + k * ds->nv, ds->nv, s->acpos + ds->off,
                             j->dj.b->pos[s->dent[ds->e0 + k / n_head]], 1.0f / sqrtf((float)hd));
            atomic_fetch_sub_explicit(&s->mix_left[r / group], 1, memory_order_release);
        } else {
            wait_ready(&s->mix_left[(it - j->end_b) / s->n_db]);
            /* a group's rows are consecutive: row r = group index * group */
            int64_t r = (it - j->end_b) / s->n_db * group, d0 = (it - j->end_b) % s->n_db * s->db_len;
            const struct direct_seq *ds = dseq_of_row(s, r, n_head);
            int64_t k = r - ds->row0;
            int32_t i = s->dent[ds->e0 + k / n_head], qh = (int32_t)(k % n_head), kvh = qh / group;
            attn_mix_f16_rows(s->dsc + ds->sc_off + k * ds->nv, (size_t)ds->nv, group,
                              v0 + (size_t)kvh * hd + (size_t)d0, v_stride, s->acells + ds->off, ds->nv,
                              s->db_len, s->att + i * nq + (int64_t)qh * hd + d0, (size_t)hd);
        }
    }
}

/* Group units [u0, u1) of the planned sequences, each whole on the calling thread: its group's
 * scores over all its cells, their softmax, their mix over all head_dim elements (the same
 * kernels as dec_items' items, so the same numbers). Nothing a unit computes is read by another
 * thread (see attention for when this runs instead of dec_items). */
static void unit_items(void *arg, int64_t u0, int64_t u1) {
    const struct direct_job *j = arg;
    struct forward_scratch *s = j->s;
    const struct model_hparams *hp = j->hp;
    const struct kv_memory *kv = j->kv;
    int32_t hd = hp->head_dim, n_head = hp->n_head, n_kv = hp->n_head_kv, group = n_head / n_kv;
    int64_t nq = (int64_t)n_head * hd;
    const uint16_t *k0 = kv_k_row(kv, j->layer, 0), *v0 = kv_v_row(kv, j->layer, 0);
    size_t k_stride = (size_t)kv->shape.n_embd_k, v_stride = (size_t)kv->shape.n_embd_v;
    for (int64_t u = u0; u < u1; u++) {
        int64_t r = u * group; /* the unit's first row */
        const struct direct_seq *ds = dseq_of_row(s, r, n_head);
        int64_t k = r - ds->row0;
        int32_t i = s->dent[ds->e0 + k / n_head], kvh = (int32_t)(k % n_head) / group;
        float *sc = s->dsc + ds->sc_off + k * ds->nv;
        attn_scores_f16_rows(s->q + i * nq + (int64_t)kvh * group * hd, (size_t)hd, group, k0 + (size_t)kvh * hd,
                             k_stride, s->acells + ds->off, ds->nv, hd, sc, (size_t)ds->nv);
        for (int32_t g = 0; g < group; g++)
            attn_softmax_row(sc + g * ds->nv, ds->nv, s->acpos + ds->off, j->b->pos[i], 1.0f / sqrtf((float)hd));
        attn_mix_f16_rows(sc, (size_t)ds->nv, group, v0 + (size_t)kvh * hd, v_stride, s->acells + ds->off, ds->nv,
                          hd, s->att + i * nq + (int64_t)kvh * group * hd, (size_t)hd);
    }
}

/* A chunk of one sequence's entries (s->ent[e0 ..][0 .. ne)) on F32 copies of its cells
 * (gather_kv), rows numbered per kv head: row r = entry r / group, query head h * group + r % group. */
struct chunk_job {
    const struct model_hparams *hp;
    struct forward_scratch *s;
    const struct batch *b;
    const int32_t *ent;
    int64_t rows;       /* per kv head: ne * group */
    int64_t n_c, nv;    /* cells gathered; cells the chunk's last entry sees */
    int64_t block_rows, n_blocks; /* per kv head: n_blocks blocks of block_rows rows (the last fewer) */
    int64_t n_items;    /* n_head_kv * n_blocks */
    _Atomic int64_t next; /* items handed out */
    _Atomic int slot;   /* scratch slots handed out */
};

/* The items of a chunk, item = (kv head, block of rows), each computed whole by attn_rows_f32 in
 * this thread's slot (queries rounded to F16 as the reference's product with the F16 cells sees
 * them); every thread that joins takes items until none is left, so one the OS preempts does not
 * hold the chunk up. */
static void chunk_blocks(void *arg, int64_t i0, int64_t i1) {
    struct chunk_job *j = arg;
    struct forward_scratch *s = j->s;
    const struct model_hparams *hp = j->hp;
    int slot = atomic_fetch_add_explicit(&j->slot, 1, memory_order_relaxed);
    ASSERT(slot < s->chunk_slots);
    int32_t hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    int64_t nq = (int64_t)hp->n_head * hd;
    float *qg = s->qg + (size_t)slot * ATT_BLOCK_ROWS * hd, *og = s->og + (size_t)slot * ATT_BLOCK_ROWS * hd;
    float *sc = s->sc + (size_t)slot * ATT_BLOCK_ROWS * s->sc_stride;
    uint16_t *h16 = s->h16 + (size_t)slot * ATT_BLOCK_ROWS * hd;
    int32_t row_pos[ATT_BLOCK_ROWS];
    for (int64_t it; (it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_items;) {
        int32_t h = (int32_t)(it / j->n_blocks);
        int64_t r0 = it % j->n_blocks * j->block_rows, n = j->rows - r0 < j->block_rows ? j->rows - r0 : j->block_rows;
        for (int64_t r = 0; r < n; r++) {
            int32_t i = j->ent[(r0 + r) / group];
            int64_t qh = (int64_t)h * group + (r0 + r) % group;
            memcpy(qg + r * hd, s->q + i * nq + qh * hd, (size_t)hd * sizeof(float));
            row_pos[r] = j->b->pos[i];
        }
        round_f16(qg, h16, n * hd);
        attn_rows_f32(qg, n, s->kf + (int64_t)h * j->n_c * hd, s->vf + (int64_t)h * j->n_c * hd, j->nv, hd,
                      s->cpos, row_pos, 1.0f / sqrtf((float)hd), sc, og);
        for (int64_t r = 0; r < n; r++) {
            int32_t i = j->ent[(r0 + r) / group];
            int64_t qh = (int64_t)h * group + (r0 + r) % group;
            memcpy(s->att + i * nq + qh * hd, og + r * hd, (size_t)hd * sizeof(float));
        }
    }
}

/* Blocks of at most ATT_BLOCK_ROWS rows, of equal sizes, and (where that leaves blocks of 16 rows
 * or more) as many items as a multiple of the thread count: 3 kv heads x 192 rows on 2 threads
 * make 6 blocks of 96 rows, x 96 rows 6 blocks of 48 (3 blocks of 96 kept one thread idle for a
 * third of the chunk). */
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

/* cfg.reference: the same chunk per kv head, the dots in the reference's orders (ref_dots_job). */
static void chunk_reference(struct forward_scratch *s, const struct model_hparams *hp, const struct batch *b,
                            const int32_t *ent, int32_t ne, int64_t n_c, int64_t nv) {
    int32_t hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    int64_t nq = (int64_t)hp->n_head * hd, rows = (int64_t)ne * group;
    int32_t row_pos[ATT_CHUNK_ENTRIES];
    for (int32_t e = 0; e < ne; e++) row_pos[e] = b->pos[ent[e]];
    for (int32_t h = 0; h < hp->n_head_kv; h++) {
        for (int32_t e = 0; e < ne; e++)
            memcpy(s->qg + (int64_t)e * group * hd, s->q + ent[e] * nq + (int64_t)h * group * hd,
                   (size_t)group * hd * sizeof(float));
        /* V columns contiguous for the reference's P.V dots (a small share of its scalar dots) */
        const float *vf = s->vf + (int64_t)h * n_c * hd;
        for (int64_t c = 0; c < nv; c++)
            for (int32_t d = 0; d < hd; d++) s->vt[(int64_t)d * nv + c] = vf[c * hd + d];
        round_f16(s->qg, s->h16, rows * hd);
        struct ref_dots_job rj = {.s = s, .kf = s->kf + (int64_t)h * n_c * hd, .hd = hd, .nv = nv,
                                  .n_pad = (n_c + REF_KV_PAD - 1) / REF_KV_PAD * REF_KV_PAD,
                                  .batched = b->n_tokens >= 2};
        rows_for(s->c, rows, 2 * nv * hd, ref_scores, &rj);
        struct softmax_job sj = {.sc = s->sc, .n_c = nv, .cpos = s->cpos, .row_pos = row_pos, .group = group,
                                 .scale = 1.0f / sqrtf((float)hd)};
        rows_for(s->c, rows, 4 * nv, softmax_rows, &sj);
        rows_for(s->c, rows, 2 * nv * hd, ref_outputs, &rj);
        for (int32_t e = 0; e < ne; e++)
            memcpy(s->att + ent[e] * nq + (int64_t)h * group * hd, s->og + (int64_t)e * group * hd,
                   (size_t)group * hd * sizeof(float));
    }
}

/* Attention of the entries of one sequence (s->ent[0..n_ent)) over that sequence's cells, in
 * chunks of entries: a chunk whose rows would take matmul's sgemm path runs on F32 copies of the
 * cells (gathered once), all kv heads in one parallel job of row blocks; a smaller one (a decode
 * step) on the F16 cells directly. */
static void attend_seq(const struct model *m, struct forward_scratch *s, const struct kv_memory *kv,
                       const struct batch *b, int32_t layer, int32_t seq, int32_t n_ent) {
    const struct model_hparams *hp = &m->hp;
    int32_t group = hp->n_head / hp->n_head_kv;
    int64_t n_c = kv_seq_cell_list(kv, seq, s->cells, (int64_t)s->sc_stride); /* cells: [n_ctx] */
    ASSERT(n_c >= 0); /* check_batch: no sequence holds more than n_ctx cells */
    sort_cells_by_pos(s, kv, s->cells, s->cpos, n_c);
    int32_t chunk = s->att_rows / group;
    bool gathered = false;
    for (int32_t e0 = 0; e0 < n_ent; e0 += chunk) {
        int32_t ne = n_ent - e0 < chunk ? n_ent - e0 : chunk;
        int64_t rows = (int64_t)ne * group;
        /* Entries come in increasing positions: the chunk's last one sees the most cells. */
        int64_t nv = n_visible(s->cpos, n_c, b->pos[s->ent[e0 + ne - 1]]);
        if (rows < MATMUL_BLAS_MIN_TOKENS && !s->reference) {
            struct direct_job dj = {.hp = hp, .s = s, .kv = kv, .b = b, .layer = layer, .ent = s->ent + e0,
                                    .cells = s->cells, .cpos = s->cpos, .nv = nv};
            compute_parallel_for(s->c, (int64_t)ne * hp->n_head, direct_rows, &dj);
            continue;
        }
        if (!gathered) {
            struct gather_job gj = {.kv = kv, .hp = hp, .s = s, .layer = layer, .n_c = n_c};
            rows_for(s->c, n_c, 2 * (int64_t)hp->n_head_kv * hp->head_dim, gather_kv, &gj);
            gathered = true;
        }
        if (s->reference) {
            chunk_reference(s, hp, b, s->ent + e0, ne, n_c, nv);
            continue;
        }
        struct chunk_job cj = {.hp = hp, .s = s, .b = b, .ent = s->ent + e0, .rows = rows, .n_c = n_c, .nv = nv};
        split_chunk(&cj, hp->n_head_kv, s->chunk_slots);
        compute_parallel_for(s->c, s->chunk_slots, chunk_blocks, &cj); /* one call per slot */
    }
}

/* Once per forward pass: the entries grouped by sequence (batch order within each); a sequence
 * whose entries make one direct chunk (fewer rows than sgemm takes: decode steps) gets its
 * cells listed and sorted into the arena, while it has room; the others are attended per layer
 * by attend_seq. */
static void plan_attention(const struct model *m, struct forward_scratch *s, const struct kv_memory *kv,
                           const struct batch *b) {
    const struct model_hparams *hp = &m->hp;
    int32_t group = hp->n_head / hp->n_head_kv;
    memset(s->done, 0, (size_t)b->n_tokens);
    s->n_dseq = 0;
    s->n_gseq = 0;
    s->n_drows = 0;
    int32_t n_dent = 0, n_gent = 0;
    int64_t used = 0, sc_used = 0, cells_heads = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        if (s->done[i]) continue;
        int32_t n_ent = 0;
        for (int32_t j = i; j < b->n_tokens; j++)
            if (b->seq[j] == b->seq[i]) {
                s->ent[n_ent++] = j;
                s->done[j] = 1;
            }
        int64_t n_c = kv->seq_n_cells[b->seq[i]];
        if (!s->reference && (int64_t)n_ent * group < MATMUL_BLAS_MIN_TOKENS && n_ent <= ATT_CHUNK_ENTRIES &&
            used + n_c <= s->arena_n && sc_used + (int64_t)n_ent * hp->n_head * n_c <= s->dsc_n) {
            int32_t *cells = s->acells + used, *cpos = s->acpos + used;
            int64_t got = kv_seq_cell_list(kv, b->seq[i], cells, s->arena_n - used); /* stops at the room */
            ASSERT(got == n_c);
            sort_cells_by_pos(s, kv, cells, cpos, n_c);
            struct direct_seq *ds = &s->dseq[s->n_dseq++];
            *ds = (struct direct_seq){.e0 = n_dent, .ne = n_ent, .off = used, .row0 = s->n_drows, .sc_off = sc_used,
                                      .nv = n_visible(cpos, n_c, b->pos[s->ent[n_ent - 1]])};
            memcpy(s->dent + n_dent, s->ent, (size_t)n_ent * sizeof *s->ent);
            n_dent += n_ent;
            used += n_c;
            sc_used += (int64_t)n_ent * hp->n_head * ds->nv;
            cells_heads += (int64_t)n_ent * hp->n_head_kv * ds->nv;
            s->n_drows += (int64_t)n_ent * hp->n_head;
        } else {
            s->gseq[s->n_gseq] = b->seq[i];
            s->gcount[s->n_gseq++] = n_ent;
            memcpy(s->gent + n_gent, s->ent, (size_t)n_ent * sizeof *s->ent);
            n_gent += n_ent;
        }
    }
    /* Item sizes (any split gives the same numbers; every item costs two atomic operations on
     * shared lines): score blocks of at least ATT_MIN_CELL_BLOCK cells, about four items per
     * thread; when every row is one block, no softmax phase (the score item does its rows'); mix
     * items of a group halved (in multiples of 32 elements: the kernel's register tiles) until
     * there are two per thread. */
    int64_t n_thr = s->n_slots;
    int64_t cb = (cells_heads + 4 * n_thr - 1) / (4 * n_thr);
    cb = (cb + 15) / 16 * 16;
    s->cell_block = cb < ATT_MIN_CELL_BLOCK ? ATT_MIN_CELL_BLOCK : cb;
    s->cells_heads = cells_heads;
    s->n_ia = 0;
    s->one_block = true;
    for (int32_t d = 0; d < s->n_dseq; d++) {
        struct direct_seq *ds = &s->dseq[d];
        ds->n_cb = (ds->nv + s->cell_block - 1) / s->cell_block;
        if (ds->n_cb > 1) s->one_block = false;
        ds->ia = s->n_ia;
        s->n_ia += (int64_t)ds->ne * hp->n_head_kv * ds->n_cb;
    }
    int64_t n_groups = s->n_drows / group;
    s->db_len = hp->head_dim;
    while (n_groups * (hp->head_dim / s->db_len) < 2 * n_thr && s->db_len % 64 == 0) s->db_len /= 2;
    s->n_db = hp->head_dim / s->db_len;
}

/* Every entry's attention: the planned decode-sized sequences in one parallel job, the others
 * one sequence at a time (entries keep their batch order). */
static void attention(const struct model *m, struct forward_scratch *s, const struct kv_memory *kv,
                      const struct batch *b, int32_t layer) {
    int64_t n_units = s->n_drows / (m->hp.n_head / m->hp.n_head_kv);
    if (n_units >= s->n_slots) {
        /* Enough group units for every thread: each whole on one thread (unit_items). Split
         * into dec_items' items, a unit's scores and probabilities were written by one thread
         * and read by another (twice per layer), and on 2 threads the attention of a SmolLM2
         * decode step (3 units at 512..575 cells) took as long as on one: 0.74-0.76 ms per
         * step; as whole units (2 on one thread, 1 on the other) 0.56-0.61 ms, best step
         * 3.42-3.63 -> 3.22-3.35 ms; 8 sequences (24 units) 8.42-8.49 -> 7.97-8.22 ms. */
        struct direct_job dj = {.hp = &m->hp, .s = s, .kv = kv, .b = b, .layer = layer};
        int64_t work = s->cells_heads * (m->hp.n_head / m->hp.n_head_kv) * m->hp.head_dim;
        if (work < ATT_ALONE_WORK) unit_items(&dj, 0, n_units);
        else compute_parallel_for(s->c, n_units, unit_items, &dj);
    } else if (s->n_drows > 0) {
        /* the units' counters (rows of a unit are consecutive: unit u = row / group); stores
         * before pool_run's post, which publishes them to the threads */
        int32_t group = m->hp.n_head / m->hp.n_head_kv;
        for (int32_t d = 0; d < s->n_dseq; d++) {
            const struct direct_seq *ds = &s->dseq[d];
            for (int64_t u = ds->row0 / group; u < (ds->row0 + (int64_t)ds->ne * m->hp.n_head) / group; u++) {
                atomic_store_explicit(&s->sc_left[u], (int32_t)ds->n_cb, memory_order_relaxed);
                atomic_store_explicit(&s->mix_left[u], group, memory_order_relaxed);
            }
        }
        struct dec_job dj = {.dj = {.hp = &m->hp, .s = s, .kv = kv, .b = b, .layer = layer},
                             .end_a = s->n_ia, .end_b = s->n_ia + (s->one_block ? 0 : s->n_drows)};
        dj.n_items = dj.end_b + s->n_drows / (m->hp.n_head / m->hp.n_head_kv) * s->n_db;
        compute_parallel_for(s->c, s->n_slots, dec_items, &dj); /* one call per thread */
    }
    for (int32_t g = 0, e = 0; g < s->n_gseq; e += s->gcount[g++]) {
        memcpy(s->ent, s->gent + e, (size_t)s->gcount[g] * sizeof *s->ent);
        attend_seq(m, s, kv, b, layer, s->gseq[g], s->gcount[g]);
    }
}

/* ---- the pass ---- */

static int check_batch(const struct model *m, const struct forward_ctx *fc, const struct kv_memory *kv,
                       const struct batch *b) {
    if (b->n_tokens <= 0) return -ERR_INVAL;
    if (b->n_tokens > fc->cfg.max_tokens || b->n_outputs > fc->cfg.max_outputs) return -ERR_TOOBIG;
    if (kv->n_placed != b->n_tokens || kv->shape.n_layer != m->hp.n_layer) return -ERR_STATE;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        int32_t cell = kv_batch_cell(kv, i);
        if (kv->pos[cell] != b->pos[i] || !kv_cell_has_seq(kv, cell, b->seq[i])) return -ERR_STATE;
        if (b->token[i] < 0 || b->token[i] >= m->hp.n_vocab) return -ERR_INVAL;
        if (kv->seq_n_cells[b->seq[i]] > fc->cfg.n_ctx) return -ERR_TOOBIG;
    }
    return 0;
}

static int llama_forward(const struct model *m, struct forward_ctx *fc, struct memory *mem, const struct batch *b) {
    const struct model_hparams *hp = &m->hp;
    struct forward_scratch *s = fc->s;
    struct compute *c = s->c;
    struct kv_memory *kv = kv_from_memory(mem);
    if (!kv) return -ERR_INVAL;
    int rc = check_batch(m, fc, kv, b);
    if (rc < 0) return rc;
    int64_t n = b->n_tokens, E = hp->n_embd;
    int64_t nkv = (int64_t)hp->n_head_kv * hp->head_dim;
    size_t embd_row = ggml_row_size(m->token_embd.type, (uint64_t)E);
    for (int64_t i = 0; i < n; i++) {
        /* the tied output matrix, rewritten for serving */
        if (m->token_embd.type == UVLM_TYPE_Q8_0_X16)
            q8x16_row_to_float(m->token_embd.data, E, m->token_embd.n_out, b->token[i], s->x + i * E);
        else if (m->token_embd.type == UVLM_TYPE_Q5_0_X16)
            q5x16_row_to_float(m->token_embd.data, E, m->token_embd.n_out, b->token[i], s->x + i * E);
        else
            quant_to_float(m->token_embd.type, (const char *)m->token_embd.data + (size_t)b->token[i] * embd_row,
                           s->x + i * E, E);
    }
    rope_tables(hp, s, b);
    plan_attention(m, s, kv, b);

    for (int32_t l = 0; l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        rmsnorm(s, hp, s->x, s->xn, L->attn_norm, n);
        mm_multi(s, 3, (const struct model_weight *const[]){&L->wq, &L->wk, &L->wv}, s->xn, n,
                 (float *const[]){s->q, s->k, s->v});
        add_bias(s->q, L->bq, L->wq.n_out, n);
        add_bias(s->k, L->bk, nkv, n);
        add_bias(s->v, L->bv, nkv, n);
        qk_post(c, hp, s, kv, l, n);
        attention(m, s, kv, b, l);
        mm(s, &L->wo, s->att, n, s->tmp);
        for (int64_t i = 0; i < n * E; i++) s->x[i] += s->tmp[i];

        rmsnorm(s, hp, s->x, s->xn, L->ffn_norm, n);
        mm_multi(s, 2, (const struct model_weight *const[]){&L->w_gate, &L->w_up}, s->xn, n,
                 (float *const[]){s->gate, s->up});
        struct rows_job sj = {.x = s->gate, .y = s->up, .n = hp->n_ff};
        rows_for(c, n, 8 * (int64_t)hp->n_ff, swiglu_rows, &sj);
        mm(s, &L->w_down, s->gate, n, s->tmp);
        for (int64_t i = 0; i < n * E; i++) s->x[i] += s->tmp[i];
    }

    int32_t n_out = 0;
    for (int64_t i = 0; i < n; i++)
        if (b->want_logits[i]) memcpy(s->xo + (int64_t)n_out++ * E, s->x + i * E, (size_t)E * sizeof(float));
    fc->n_outputs = n_out;
    if (n_out > 0) {
        rmsnorm(s, hp, s->xo, s->xo, m->output_norm, n_out);
        mm(s, &m->output, s->xo, n_out, fc->logits);
    }
    return 0;
}

static int llama_memory_create(const struct model *m, int64_t n_cells, int32_t n_seq_max, struct memory **out) {
    int32_t n_embd_kv = m->hp.n_head_kv * m->hp.head_dim;
    struct kv_shape shape = {.n_layer = m->hp.n_layer, .n_embd_k = n_embd_kv, .n_embd_v = n_embd_kv};
    return kv_memory_create(out, &shape, n_cells, n_seq_max);
}

const struct arch_impl llama_impl = {
    .ctx_create = llama_forward_ctx_create,
    .ctx_destroy = llama_forward_ctx_destroy,
    .ctx_bytes = llama_forward_ctx_bytes,
    .forward = llama_forward,
    .memory_create = llama_memory_create,
};
