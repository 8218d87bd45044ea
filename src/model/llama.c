/* llama.c: the one transformer forward pass, over the unified KV memory, for every family
 * model.c describes (struct transformer_desc and the layers' tensors, model/model.h). A model
 * with sliding-window layers (Gemma 3's local layers) keeps them in a windowed pool of their own
 * (memory/split.h: the full-attention layers in the first half, the windowed ones in the second,
 * each attended through its own attention ctx). A hybrid (qwen35) has gated delta-net layers in
 * place of some attentions (model/deltanet.h), their recurrent states in its split's second half;
 * its attention is gated (tf.attn_gate: x += Wo · (attn(q, k, v) * sigmoid(gate))).
 *
 * Per layer, the steps in brackets where the description or the layer's tensors have them:
 *   q, k, v = Wq·norm(x) [+ bq],  Wk·norm(x) [+ bk],  Wv·norm(x) [+ bv]
 *   q, k    = rope_l([headnorm](q)), rope_l([headnorm](k))     (the layer's rope, tf.rope[L->rope])
 *   x      += [postnorm](Wo · attn(q, k, v))
 *   x      += [postnorm](Wdown · (act(Wgate·norm(x)) * Wup·norm(x)))    (act: SiLU, or GELU)
 * from x = the tokens' embeddings [* embd_scale]; then logits = Wout · norm(x) for the entries
 * that want them, and norm(x) itself for those that want their hidden state.
 *
 * Matrix products go through math/matmul.h (quantized activations + SIMD dots for few tokens,
 * dequantized tiles + sgemm for many); attention through attention.h, over the F16 K/V cells
 * into which each layer first stores the batch's own K and V.
 *
 * The element-wise steps follow the reference's x86 (AVX-512) build: RoPE as a C++ compiler
 * contracts it (fma(x0, cos, -(x1*sin)), fma(x0, sin, x1*cos)), SiLU with its vectorized expf
 * (quant_expf), GELU (tanh form) through its table of every F16 input (the reference's CPU GELU
 * rounds its input and result to F16), the attention softmax as math/attn.h's attn_softmax_row.
 * With cfg.reference the matmuls (MATMUL_REFERENCE) and the attention dots follow it too, and the
 * golden tests match its logits to the printed precision (build/test-runner golden).
 */
#include "model/arch.h"
#include "model/attention.h"
#include "model/deltanet.h"
#include "common/err.h"
#include "math/matmul.h"
#include "math/q8x16.h"
#include "math/quant.h"
#include "memory/kv.h"
#include "memory/recurrent.h"
#include "memory/split.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Everything one forward pass touches, sized once by llama_forward_ctx_create (T = max_tokens). */
struct forward_scratch {
    struct compute *c;  /* the compute threads (owned) */
    struct attn_ctx *attn; /* attention's buffers (owned; borrows c) */
    struct attn_ctx *attn_win; /* the sliding-window layers' (their window), or NULL */
    struct deltanet_ctx *dn; /* a hybrid's delta-net layers' buffers (owned; borrows c), or NULL */
    int32_t window;     /* of the sliding-window layers (one for all of them), 0: none */
    int64_t window_n_ctx; /* most cells a sequence holds in their pool: window + max_tokens */
    float *gelu;        /* [65536] tf.act == FFN_GELU_TANH: GELU of every F16 input, rounded to F16 */
    bool reference;     /* cfg.reference */
    size_t bytes;       /* of the buffers below and fc->logits (attention's: attn_ctx_bytes) */
    float *x;           /* [T][n_embd] residual stream */
    float *xn;          /* [T][n_embd] normalized input of a block */
    float *q;           /* [T][n_head * head_dim] queries, roped, F16-exact */
    float *qg;          /* [T][2 * n_head * head_dim] tf.attn_gate: each head's query then gate, or NULL */
    float *ag;          /* [T][n_head * head_dim] tf.attn_gate: the gates, or NULL */
    float *k;           /* [T][n_head_kv * head_dim] keys, roped (then stored to the cells) */
    float *v;           /* [T][n_head_kv * head_dim] values (then stored to the cells) */
    float *att;         /* [T][n_head * head_dim] attention output, heads side by side */
    float *tmp;         /* [T][n_embd] output of a block before the residual add */
    float *gate;        /* [T][n_ff] gate product, then silu(gate) * up */
    float *up;          /* [T][n_ff] */
    float *rope_cos;    /* [n_rope][T][n_rot / 2] the angles of each entry's position, per rope */
    float *rope_sin;    /* [n_rope][T][n_rot / 2] */
    int64_t rope_rows;  /* T: rows of one rope's table */
    float *xo;          /* [max_outputs][n_embd] rows that want logits */
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
        attn_ctx_destroy(s->attn);
        attn_ctx_destroy(s->attn_win);
        deltanet_ctx_destroy(s->dn);
        if (s->c) compute_destroy(s->c);
        void *bufs[] = {s->x, s->xn, s->q, s->k, s->v, s->att, s->tmp, s->gate, s->up, s->rope_cos, s->rope_sin, s->xo,
                        s->gelu, s->qg, s->ag};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
        free(s);
    }
    free(fc->logits);
    free(fc);
}

static size_t llama_forward_ctx_bytes(const struct forward_ctx *fc) {
    return fc->s->bytes + compute_scratch_bytes(fc->s->c) + attn_ctx_bytes(fc->s->attn) +
           (fc->s->attn_win ? attn_ctx_bytes(fc->s->attn_win) : 0) + (fc->s->dn ? deltanet_ctx_bytes(fc->s->dn) : 0);
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* A layer's attention: the model's heads, scores scaled by tf.attn_scale unless q was, the
 * layer's window. */
static struct attn_params layer_attn(const struct model_hparams *hp, int32_t window) {
    return (struct attn_params){.n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
                                .scale = hp->tf.scale_q ? 1.0f : hp->tf.attn_scale, .window = window};
}

/* The window of the model's sliding-window layers (0: none); -1 when they differ (one windowed
 * pool takes one window). */
static int32_t model_window(const struct model *m) {
    int32_t w = 0;
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        int32_t lw = m->layers[l].window;
        if (lw < 0 || (lw > 0 && w > 0 && lw != w)) return -1;
        if (lw > 0) w = lw;
    }
    return w;
}

/* The reference's GELU (tanh form) of x in F32, 0.5x(1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))). */
static float gelu_f32(float x) {
    return 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x)));
}

static int llama_forward_ctx_create(struct forward_ctx **out, const struct model *m, const struct forward_config *cfg) {
    const struct model_hparams *hp = &m->hp;
    int32_t window = model_window(m);
    if (window < 0) return -ERR_UNSUPPORTED; /* sliding windows of several sizes */
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
    size_t T = (size_t)c.max_tokens, E = (size_t)hp->n_embd;
    size_t nq = (size_t)hp->n_head * (size_t)hp->head_dim, nkv = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
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
    size_t n_angles = (size_t)hp->tf.n_rope * T * (size_t)(hp->n_rot / 2);
    s->rope_cos = scratch_alloc(s, n_angles, sizeof(float), &ok);
    s->rope_sin = scratch_alloc(s, n_angles, sizeof(float), &ok);
    s->rope_rows = (int64_t)T;
    s->xo = scratch_alloc(s, (size_t)c.max_outputs * E, sizeof(float), &ok);
    if (hp->tf.attn_gate) {
        s->qg = scratch_alloc(s, T * 2 * nq, sizeof(float), &ok);
        s->ag = scratch_alloc(s, T * nq, sizeof(float), &ok);
    }
    if (hp->tf.act == FFN_GELU_TANH) {
        s->gelu = scratch_alloc(s, 1 << 16, sizeof(float), &ok);
        for (uint32_t h = 0; ok && h < 1 << 16; h++)
            s->gelu[h] = fp16_to_f32(f32_to_fp16(gelu_f32(fp16_to_f32((uint16_t)h))));
    }
    s->window = window;
    fc->logits = scratch_alloc(s, (size_t)c.max_outputs * (size_t)hp->n_vocab, sizeof(float), &ok);
    int rc = ok ? 0 : -ERR_NOMEM;
    if (rc == 0) { /* matmuls of up to max_tokens rows, of inputs up to the widest matrix's */
        int64_t max_in = max64(max64(hp->n_embd, hp->n_ff), (int64_t)nq);
        if (hp->tf.dn.d_conv > 0) max_in = max64(max_in, deltanet_v_width(&hp->tf.dn));
        rc = compute_create(&s->c, c.n_threads, max64(c.max_tokens, c.max_outputs), max_in);
    }
    if (rc == 0) {
        compute_set_yield_us(s->c, c.yield_us);
        struct attn_params ap = layer_attn(hp, 0);
        rc = attn_ctx_create(&s->attn, &ap, c.max_tokens, c.n_ctx, c.reference, s->c);
    }
    if (rc == 0 && window > 0) { /* a sequence there holds its window and a batch's entries (memory/kv.h) */
        struct attn_params ap = layer_attn(hp, window);
        s->window_n_ctx = (int64_t)window + c.max_tokens < c.n_ctx ? (int64_t)window + c.max_tokens : c.n_ctx;
        rc = attn_ctx_create(&s->attn_win, &ap, c.max_tokens, s->window_n_ctx, c.reference, s->c);
    }
    if (rc == 0 && hp->tf.dn.d_conv > 0) rc = deltanet_ctx_create(&s->dn, hp, c.max_tokens, s->c);
    if (rc < 0) {
        llama_forward_ctx_destroy(fc);
        return rc;
    }
    *out = fc;
    return 0;
}

/* ---- row operations, parallel over rows (compute_parallel_for_work: inline when tiny) ---- */

struct rows_job {
    const struct model_hparams *hp;
    float *x;           /* rows of n floats */
    float *y;
    const float *w;
    const float *add;   /* rmsnorm, add_rows: rows of n added to x first (NULL: none) */
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
 * dependent double adds waits on each add's latency, as long as the rest of the norm; the order
 * moves the double sum by a few ulps, far below the float scale's rounding. */
static double sum_squares(const float *x, int64_t n) {
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += (double)(x[i + k] * x[i + k]);
    for (; i < n; i++) acc[0] += (double)(x[i] * x[i]);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* y = x / rms(x) * w over one row of n (y may be x). `sequential`: the sum of squares in the
 * reference's order, one chain (forward_config.reference). */
static void rmsnorm_row(const float *x, float *y, const float *w, int64_t n, float eps, bool sequential) {
    double sum = 0;
    if (sequential)
        for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    else
        sum = sum_squares(x, n);
    float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    int64_t i = 0;
    for (; i + NORM_BLOCK <= n; i += NORM_BLOCK) norm_scale_block(x + i, scale, w + i, y + i);
    for (; i < n; i++) y[i] = x[i] * scale * w[i];
}

/* x += add over one row of n */
static void add_row(float *restrict x, const float *restrict add, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += add[i];
}

static void add_rows_range(void *arg, int64_t r0, int64_t r1) {
    const struct rows_job *j = arg;
    for (int64_t r = r0; r < r1; r++) add_row(j->x + r * j->n, j->add + r * j->n, j->n);
}

/* x += add over n_rows rows of n_embd: a residual add (see add_rmsnorm). */
static void add_rows(struct forward_scratch *s, const struct model_hparams *hp, float *x, const float *add,
                     int64_t n_rows) {
    struct rows_job j = {.x = x, .add = add, .n = hp->n_embd};
    compute_parallel_for_work(s->c, n_rows, hp->n_embd, add_rows_range, &j);
}

static void rmsnorm_rows(void *arg, int64_t r0, int64_t r1) {
    const struct rows_job *j = arg;
    for (int64_t r = r0; r < r1; r++) {
        if (j->add) add_row(j->x + r * j->n, j->add + r * j->n, j->n);
        rmsnorm_row(j->x + r * j->n, j->y + r * j->n, j->w, j->n, j->hp->rms_eps, j->sequential);
    }
}

/* x += add (a residual add, row by row while the row is in L1; add NULL: none), then
 * y = rmsnorm(x) * w, over n_rows rows of n_embd (y may be x). */
static void add_rmsnorm(struct forward_scratch *s, const struct model_hparams *hp, float *x, const float *add, float *y,
                        const float *w, int64_t n_rows) {
    struct rows_job j = {.hp = hp, .x = x, .y = y, .w = w, .add = add, .n = hp->n_embd, .sequential = s->reference};
    compute_parallel_for_work(s->c, n_rows, hp->n_embd, rmsnorm_rows, &j);
}

/* y = rmsnorm(x) * w over n_rows rows of n_embd (y may be x). */
static void rmsnorm(struct forward_scratch *s, const struct model_hparams *hp, const float *x, float *y,
                    const float *w, int64_t n_rows) {
    add_rmsnorm(s, hp, (float *)x, NULL, y, w, n_rows);
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
                int32_t a = hp->tf.rope_type == ROPE_NORM ? 2 * i : i;
                int32_t b = hp->tf.rope_type == ROPE_NORM ? 2 * i + 1 : i + half;
                float x0 = v[a], x1 = v[b];
                v[a] = fmaf(x0, cs[i], -(x1 * sn[i]));
                v[b] = fmaf(x0, sn[i], x1 * cs[i]);
            }
        }
    }
}

/* After the Q/K/V products, per row: the per-head norms of q and k (tf.qk_norm), rope on both,
 * q scaled (tf.scale_q) and rounded to F16 in place (every attention path multiplies the query as
 * the F16 cells see it, and rounding twice changes nothing), K and V stored to the row's cell as
 * F16. One pass (inline for a decode step: no wake-up of the other threads for a few hundred
 * elements). */
struct qk_post_job {
    struct rows_job q, k;  /* .w: the head norm's weights [head_dim], or NULL */
    float q_scale;         /* 0: q keeps its scale */
    const struct kv_memory *kv;
    const float *v;
    int32_t layer;
};

static void head_norms(const struct rows_job *j, int64_t r0, int64_t r1) {
    int64_t hd = j->hp->head_dim;
    for (int64_t r = r0; r < r1; r++)
        for (int32_t h = 0; h < j->n_heads; h++) {
            float *v = j->x + r * j->n + h * hd;
            rmsnorm_row(v, v, j->w, hd, j->hp->rms_eps, j->sequential);
        }
}

static void qk_post_rows(void *arg, int64_t r0, int64_t r1) {
    const struct qk_post_job *j = arg;
    int64_t nkv = j->k.n;
    if (j->q.w) head_norms(&j->q, r0, r1);
    if (j->k.w) head_norms(&j->k, r0, r1);
    rope_rows((void *)&j->q, r0, r1);
    rope_rows((void *)&j->k, r0, r1);
    uint16_t h[512];
    for (int64_t r = r0; r < r1; r++) {
        float *q = j->q.x + r * j->q.n;
        if (j->q_scale != 0)
            for (int64_t i = 0; i < j->q.n; i++) q[i] *= j->q_scale;
        /* F16 K cells see the query in F16; Q8_0 ones quantize it themselves (model/attention.h) */
        for (int64_t i = 0; i < j->q.n && j->kv->shape.type_k == KV_F16; i += 512) {
            int64_t m = j->q.n - i < 512 ? j->q.n - i : 512;
            quant_from_float(GGML_TYPE_F16, q + i, h, m);
            quant_to_float(GGML_TYPE_F16, h, q + i, m);
        }
        int32_t cell = kv_batch_cell(j->kv, (int32_t)r);
        /* quantized as written (F16, or Q8_0 blocks as the reference's x86 code rounds them) */
        quant_from_float(kv_type_ggml(j->kv->shape.type_k), j->k.x + r * nkv, kv_k_row(j->kv, j->layer, cell), nkv);
        quant_from_float(kv_type_ggml(j->kv->shape.type_v), j->v + r * nkv, kv_v_row(j->kv, j->layer, cell), nkv);
    }
}

static void qk_post(struct compute *c, const struct model_hparams *hp, const struct forward_scratch *s,
                    const struct kv_memory *kv, const struct model_layer *L, int32_t layer, int64_t n_rows) {
    size_t table = (size_t)L->rope * (size_t)s->rope_rows * (size_t)(hp->n_rot / 2);
    const float *cs = s->rope_cos + table, *sn = s->rope_sin + table;
    struct qk_post_job j = {
        .q = {.hp = hp, .x = s->q, .n = (int64_t)hp->n_head * hp->head_dim, .cos = cs, .sin = sn,
              .n_heads = hp->n_head, .w = L->q_norm, .sequential = s->reference},
        .k = {.hp = hp, .x = s->k, .n = (int64_t)hp->n_head_kv * hp->head_dim, .cos = cs, .sin = sn,
              .n_heads = hp->n_head_kv, .w = L->k_norm, .sequential = s->reference},
        .q_scale = hp->tf.scale_q ? hp->tf.attn_scale : 0,
        .kv = kv, .v = s->v, .layer = layer};
    int64_t work = (int64_t)(hp->n_head + hp->n_head_kv) * (hp->n_rot + 2 * hp->head_dim);
    compute_parallel_for_work(c, n_rows, work, qk_post_rows, &j);
}

/* Angles like the reference: theta_i = pos * base^(-2i/n_rot) by repeated multiplication, then
 * divided by the pair's frequency factor and scaled (ggml's rope cache; both exact when 1). One
 * table per rope of the description. */
static void rope_tables(const struct model_hparams *hp, struct forward_scratch *s, const struct batch *b) {
    int32_t half = hp->n_rot / 2;
    for (int32_t k = 0; k < hp->tf.n_rope; k++) {
        const struct rope_desc *rd = &hp->tf.rope[k];
        float theta_scale = powf(rd->base, -2.0f / (float)hp->n_rot);
        float *cs = s->rope_cos + (size_t)k * (size_t)s->rope_rows * (size_t)half;
        float *sn = s->rope_sin + (size_t)k * (size_t)s->rope_rows * (size_t)half;
        for (int32_t r = 0; r < b->n_tokens; r++) {
            float theta = (float)b->pos[r];
            for (int32_t i = 0; i < half; i++) {
                float t = rd->freq_scale * (rd->factors ? theta / rd->factors[i] : theta);
                cs[r * half + i] = cosf(t);
                sn[r * half + i] = sinf(t);
                theta *= theta_scale;
            }
        }
    }
}

/* x = x / (1 + e) * y over SWIGLU_BLOCK elements: a constant count (and no aliasing) lets the
 * compiler vectorize it at -O2 (a variable count leaves the divisions scalar). */
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

/* x = gelu(x) * y as the reference's F32 GEGLU computes it: 0 from -10 down, x * y from 10 up,
 * between them the table's GELU of x rounded to F16 (rows_job.w: the table). */
static void geglu_rows(void *arg, int64_t r0, int64_t r1) {
    const struct rows_job *j = arg;
    uint16_t h[256];
    for (int64_t i0 = r0 * j->n; i0 < r1 * j->n; i0 += 256) {
        int64_t m = r1 * j->n - i0 < 256 ? r1 * j->n - i0 : 256;
        float *x = j->x + i0;
        const float *y = j->y + i0;
        quant_from_float(GGML_TYPE_F16, x, h, m);
        for (int64_t k = 0; k < m; k++)
            x[k] = x[k] <= -10.0f ? 0.0f : x[k] >= 10.0f ? x[k] * y[k] : j->w[h[k]] * y[k];
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

/* ---- the pass ---- */

/* The K/V pools of the pass: kv[0] the full-attention layers', kv[1] the sliding-window layers'
 * (NULL without them), and for each layer its pool and its index there. */
struct pools {
    struct kv_memory *kv[2];
    int32_t n_layer[2];
    struct recurrent_memory *rec; /* a hybrid's delta-net layers' states (its split's second half), or NULL */
};

/* mem as the model needs it: one KV pool, or a split of a full-attention and a windowed pool
 * (llama_memory_create's); -ERR_INVAL otherwise. */
static int get_pools(const struct model *m, const struct forward_scratch *s, struct memory *mem, struct pools *p) {
    *p = (struct pools){0};
    if (s->dn) { /* a hybrid: attention cells first, the delta-net layers' states second */
        p->kv[0] = kv_from_memory(split_half(mem, 0));
        p->rec = recurrent_from_memory(split_half(mem, 1));
        if (!p->kv[0] || !p->rec) return -ERR_INVAL;
        int32_t n_rec = 0;
        for (int32_t l = 0; l < m->hp.n_layer; l++) {
            int h = split_layer_half(mem, l);
            if (h != (int)m->layers[l].recurrent) return -ERR_INVAL;
            if (h) n_rec++;
            else p->n_layer[0]++;
        }
        struct recurrent_shape want = deltanet_state_shape(&m->hp.tf.dn, n_rec);
        return memcmp(&p->rec->shape, &want, sizeof want) == 0 ? 0 : -ERR_INVAL;
    }
    if (s->window == 0) {
        p->kv[0] = kv_from_memory(mem);
        p->n_layer[0] = m->hp.n_layer;
        return p->kv[0] ? 0 : -ERR_INVAL;
    }
    p->kv[0] = kv_from_memory(split_half(mem, 0));
    p->kv[1] = kv_from_memory(split_half(mem, 1));
    if (!p->kv[0] || !p->kv[1] || p->kv[1]->shape.window != s->window) return -ERR_INVAL;
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        int h = split_layer_half(mem, l);
        if (h != (m->layers[l].window > 0)) return -ERR_INVAL;
        p->n_layer[h]++;
    }
    return 0;
}

static int check_pool(const struct kv_memory *kv, int32_t n_layer, int64_t n_ctx, const struct batch *b) {
    if (kv->n_placed != b->n_tokens || kv->shape.n_layer != n_layer) return -ERR_STATE;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        int32_t cell = kv_batch_cell(kv, i);
        if (kv->pos[cell] != b->pos[i] || !kv_cell_has_seq(kv, cell, b->seq[i])) return -ERR_STATE;
        if (kv->seq_n_cells[b->seq[i]] > n_ctx) return -ERR_TOOBIG;
    }
    return 0;
}

static int check_batch(const struct model *m, const struct forward_ctx *fc, const struct pools *p,
                       const struct batch *b) {
    if (b->n_tokens <= 0) return -ERR_INVAL;
    if (b->n_tokens > fc->cfg.max_tokens || b->n_outputs > fc->cfg.max_outputs) return -ERR_TOOBIG;
    for (int32_t i = 0; i < b->n_tokens; i++)
        if (b->token[i] < 0 || b->token[i] >= m->hp.n_vocab) return -ERR_INVAL;
    int rc = check_pool(p->kv[0], p->n_layer[0], fc->cfg.n_ctx, b);
    if (rc == 0 && p->kv[1]) rc = check_pool(p->kv[1], p->n_layer[1], fc->s->window_n_ctx, b);
    for (int32_t i = 0; rc == 0 && p->rec && i < b->n_tokens; i++) /* every sequence's state reserved */
        if (p->rec->seq_cell[b->seq[i]] < 0 || b->pos[i] > p->rec->seq_pos_max[b->seq[i]]) rc = -ERR_STATE;
    return rc;
}

/* x[i] = token_embd row of token[i], as F32. */
static void embed(const struct model *m, const struct batch *b, float *x) {
    const struct model_weight *w = &m->token_embd;
    int64_t E = m->hp.n_embd;
    size_t row_bytes = ggml_row_size(w->type, (uint64_t)E);
    for (int64_t i = 0; i < b->n_tokens; i++) {
        /* in q8x16.h's layouts: a tied output matrix rewritten for serving */
        if (w->type == UVLM_TYPE_Q8_0_X16)
            q8x16_row_to_float(w->data, E, w->n_out, b->token[i], x + i * E);
        else if (w->type == UVLM_TYPE_Q5_0_X16)
            q5x16_row_to_float(w->data, E, w->n_out, b->token[i], x + i * E);
        else if (w->type == UVLM_TYPE_Q4_K_X16)
            q4kx16_row_to_float(w->data, E, w->n_out, b->token[i], x + i * E);
        else
            quant_to_float(w->type, (const char *)w->data + (size_t)b->token[i] * row_bytes, x + i * E, E);
    }
}

/* tf.attn_gate: wq's rows give each head's query then its gate; q and gate apart. */
static void split_query_gate(const struct model_hparams *hp, const float *qg, float *q, float *gate, int64_t n) {
    int64_t hd = hp->head_dim;
    for (int64_t r = 0; r < n * hp->n_head; r++) {
        memcpy(q + r * hd, qg + 2 * r * hd, (size_t)hd * sizeof(float));
        memcpy(gate + r * hd, qg + (2 * r + 1) * hd, (size_t)hd * sizeof(float));
    }
}

/* x *= sigmoid(gate), element by element (the gated attention's output). */
static void gate_rows(float *x, const float *gate, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] *= 1.0f / (1.0f + expf(-gate[i]));
}

static int llama_forward(const struct model *m, struct forward_ctx *fc, struct memory *mem, const struct batch *b) {
    const struct model_hparams *hp = &m->hp;
    struct forward_scratch *s = fc->s;
    struct pools pools;
    int rc = get_pools(m, s, mem, &pools);
    if (rc == 0) rc = check_batch(m, fc, &pools, b);
    if (rc < 0) return rc;
    int64_t n = b->n_tokens, E = hp->n_embd;
    int64_t nkv = (int64_t)hp->n_head_kv * hp->head_dim;
    struct attn_params ap = layer_attn(hp, 0), ap_win = layer_attn(hp, s->window);

    embed(m, b, s->x);                       /* x: [n][n_embd] */
    if (hp->tf.embd_scale != 1.0f)
        for (int64_t i = 0; i < n * E; i++) s->x[i] *= hp->tf.embd_scale;
    rope_tables(hp, s, b);                   /* the angles of each entry's position, per rope */
    attn_plan(s->attn, pools.kv[0], b);      /* which entries attend how (same for every layer) */
    if (pools.kv[1]) attn_plan(s->attn_win, pools.kv[1], b);

    for (int32_t l = 0; l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        /* the layer's pool, and its index there */
        bool win = L->window > 0;
        struct kv_memory *kv = pools.kv[win];
        int32_t kl = pools.kv[1] || pools.rec ? split_layer_index(mem, l) : l;
        /* each block's output (tmp) joins the residual stream x in the next norm */
        add_rmsnorm(s, hp, s->x, l > 0 ? s->tmp : NULL, s->xn, L->attn_norm, n);
        if (L->recurrent) { /* a hybrid's delta-net layer (deltanet.h) */
            deltanet_layer(s->dn, m, L, pools.rec, kl, b, s->xn, s->tmp, s->reference);
        } else {
            /* attention: q, k, v = W·norm(x) + bias; head norms, rope; K and V to the batch's cells */
            mm_multi(s, 3, (const struct model_weight *const[]){&L->wq, &L->wk, &L->wv}, s->xn, n,
                     (float *const[]){s->qg ? s->qg : s->q, s->k, s->v});
            if (s->qg) split_query_gate(hp, s->qg, s->q, s->ag, n);
            add_bias(s->q, L->bq, L->wq.n_out, n);
            add_bias(s->k, L->bk, nkv, n);
            add_bias(s->v, L->bv, nkv, n);
            qk_post(s->c, hp, s, kv, L, kl, n);
            attn_layer(win ? s->attn_win : s->attn, win ? &ap_win : &ap, kl, s->q, s->att);
            if (s->ag) gate_rows(s->att, s->ag, n * hp->n_head * hp->head_dim);
            mm(s, &L->wo, s->att, n, s->tmp);
            if (L->attn_post_norm) rmsnorm(s, hp, s->tmp, s->tmp, L->attn_post_norm, n);
        }

        /* feed-forward: Wdown · (act(Wgate·norm(x)) * Wup·norm(x)) */
        add_rmsnorm(s, hp, s->x, s->tmp, s->xn, L->ffn_norm, n);
        mm_multi(s, 2, (const struct model_weight *const[]){&L->w_gate, &L->w_up}, s->xn, n,
                 (float *const[]){s->gate, s->up});
        struct rows_job sj = {.x = s->gate, .y = s->up, .n = hp->n_ff, .w = s->gelu};
        compute_parallel_for_work(s->c, n, 8 * (int64_t)hp->n_ff, s->gelu ? geglu_rows : swiglu_rows, &sj);
        mm(s, &L->w_down, s->gate, n, s->tmp);
        if (L->ffn_post_norm) rmsnorm(s, hp, s->tmp, s->tmp, L->ffn_post_norm, n);
    }
    if (hp->n_layer > 0) add_rows(s, hp, s->x, s->tmp, n); /* the last block's output */

    /* logits = Wout · norm(x) of the entries that want them, in entry order */
    int32_t n_out = 0;
    for (int64_t i = 0; i < n; i++)
        if (b->want_logits[i]) memcpy(s->xo + (int64_t)n_out++ * E, s->x + i * E, (size_t)E * sizeof(float));
    fc->n_outputs = n_out;
    if (n_out > 0) {
        rmsnorm(s, hp, s->xo, s->xo, m->output_norm, n_out);
        mm(s, &m->output, s->xo, n_out, fc->logits);
    }
    /* hidden states = norm(x) of the entries that want them, into xn (free after the layers) */
    int32_t n_hid = 0;
    for (int64_t i = 0; i < n && b->n_hidden > 0; i++)
        if (b->want_hidden[i]) memcpy(s->xn + (int64_t)n_hid++ * E, s->x + i * E, (size_t)E * sizeof(float));
    if (n_hid > 0) rmsnorm(s, hp, s->xn, s->xn, m->output_norm, n_hid);
    fc->hidden = s->xn;
    fc->n_hidden = n_hid;
    return 0;
}

/* A hybrid's memory (memory/split.h): the attention layers' KV pool of n_cells, counted, and the
 * delta-net layers' states, n_states of them (0 or more than n_seq_max: one per sequence id; fewer
 * make sequences take turns on them, sched.h's time-slicing). */
static int hybrid_memory_create(const struct model *m, const struct kv_shape *shape, int64_t n_cells,
                                int32_t n_seq_max, int32_t n_states, struct memory **out) {
    uint8_t *half = malloc((size_t)m->hp.n_layer);
    if (!half) return -ERR_NOMEM;
    int32_t n_rec = 0;
    for (int32_t l = 0; l < m->hp.n_layer; l++) n_rec += half[l] = m->layers[l].recurrent;
    struct kv_shape attn = *shape;
    attn.n_layer = m->hp.n_layer - n_rec;
    struct recurrent_shape rs = deltanet_state_shape(&m->hp.tf.dn, n_rec);
    struct memory *first = NULL, *second = NULL;
    int rc = kv_memory_create(&first, &attn, n_cells, n_seq_max);
    if (n_states < 1 || n_states > n_seq_max) n_states = n_seq_max;
    if (rc == 0) rc = recurrent_memory_create(&second, &rs, n_states, n_seq_max);
    if (rc == 0) rc = split_memory_create(out, first, second, m->hp.n_layer, half);
    else memory_destroy(first);
    free(half);
    return rc;
}

/* One KV pool; with sliding-window layers a split (memory/split.h): the full-attention layers'
 * pool of n_cells, counted, and the windowed layers' pool, a window per sequence and a batch
 * (kv_window_cells). */
static int llama_memory_create(const struct model *m, const struct memory_config *mc, struct memory **out) {
    int64_t n_cells = mc->n_cells;
    int32_t n_seq_max = mc->n_seq_max, max_batch = mc->max_batch;
    int32_t n_embd_kv = m->hp.n_head_kv * m->hp.head_dim;
    int32_t window = model_window(m);
    if (window < 0) return -ERR_UNSUPPORTED;
    /* Q8_0 blocks run along the head dimension: a block must not straddle two heads */
    if ((mc->type_k == KV_Q8_0 || mc->type_v == KV_Q8_0) && m->hp.head_dim % 32) return -ERR_UNSUPPORTED;
    /* Q8_0 cells in a windowed pool do not give a sequence beside others the numbers it gets
     * alone (test_serving_kvq8.py): refused */
    if ((mc->type_k == KV_Q8_0 || mc->type_v == KV_Q8_0) && window > 0) return -ERR_UNSUPPORTED;
    struct kv_shape shape = {.n_layer = m->hp.n_layer, .n_embd_k = n_embd_kv, .n_embd_v = n_embd_kv,
                             .type_k = mc->type_k, .type_v = mc->type_v};
    if (m->hp.tf.dn.d_conv > 0) return hybrid_memory_create(m, &shape, n_cells, n_seq_max, mc->n_states, out);
    if (window == 0) return kv_memory_create(out, &shape, n_cells, n_seq_max);
    uint8_t *half = malloc((size_t)m->hp.n_layer);
    if (!half) return -ERR_NOMEM;
    int32_t n_win = 0;
    for (int32_t l = 0; l < m->hp.n_layer; l++) n_win += half[l] = m->layers[l].window > 0;
    struct kv_shape full = shape, windowed = shape;
    full.n_layer = m->hp.n_layer - n_win;
    windowed.n_layer = n_win;
    windowed.window = window;
    struct memory *first = NULL, *second = NULL;
    int rc = kv_memory_create(&first, &full, n_cells, n_seq_max);
    int64_t n_windowed = kv_window_cells(n_cells, n_seq_max, window, max_batch);
    if (rc == 0) rc = kv_memory_create(&second, &windowed, n_windowed, n_seq_max);
    if (rc == 0) rc = split_memory_create(out, first, second, m->hp.n_layer, half);
    else memory_destroy(first);
    free(half);
    return rc;
}

const struct arch_impl llama_impl = {
    .ctx_create = llama_forward_ctx_create,
    .ctx_destroy = llama_forward_ctx_destroy,
    .ctx_bytes = llama_forward_ctx_bytes,
    .forward = llama_forward,
    .memory_create = llama_memory_create,
};
