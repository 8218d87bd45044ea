/* deltanet.c: the gated delta-net layer (see deltanet.h for the math and the chunked form). */
#include "model/deltanet.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "math/quant.h"

/* One worker's buffers for a chunk (deltanet_ctx.slots: one per compute thread). */
struct dn_slot {
    float *kk;  /* [CH][CH] k_t . k_s (s < t) */
    float *qk;  /* [CH][CH] q_t . k_s (s <= t) */
    float *w;   /* [CH][D] S0 k_t */
    float *sq;  /* [CH][D] S0 q_t */
    float *u;   /* [CH][D] the delta rule's updates u_t */
    float *G;   /* [CH] decay summed over the chunk up to t */
};

struct deltanet_ctx {
    struct compute *c;          /* borrowed */
    struct delta_net_desc dn;
    float rms_eps;
    int32_t max_tokens;
    size_t bytes;
    float *qkv;      /* [T][C] the projection, then (in place) the conv's silu output, q/k normed */
    float *z;        /* [T][V] the output gate's projection */
    float *beta;     /* [T][H_v] projection, then sigmoid */
    float *g;        /* [T][H_v] alpha projection, then the decay g (<= 0) */
    float *o;        /* [T][V] the heads' outputs, then gated and normed */
    int32_t *order;  /* [T] the batch's entries grouped by sequence, batch order within each */
    int32_t *grp;    /* [T + 1] group k is order[grp[k] .. grp[k + 1]) */
    int32_t *grp_seq; /* [T] sequence of group k */
    int32_t *of;     /* [T] group of each entry (group_entries' scratch) */
    int32_t *fill;   /* [T] next place of each group (group_entries' scratch) */
    int32_t n_grp;
    int n_slots;
    struct dn_slot *slots;
    float *slot_mem;
    atomic_int next_slot;
};

struct recurrent_shape deltanet_state_shape(const struct delta_net_desc *d, int32_t n_layer) {
    int64_t D = d->head_dim;
    return (struct recurrent_shape){.n_layer = n_layer, .d_conv = d->d_conv, .d_inner = (int32_t)deltanet_channels(d),
                                    .d_state = 1, .ssm_floats = (int64_t)d->n_v_heads * D * D};
}

static void *alloc_count(struct deltanet_ctx *d, size_t n, size_t elt, bool *ok) {
    void *p = calloc(n ? n : 1, elt);
    if (!p) *ok = false;
    d->bytes += n * elt;
    return p;
}

int deltanet_ctx_create(struct deltanet_ctx **out, const struct model_hparams *hp, int32_t max_tokens,
                        struct compute *c) {
    const struct delta_net_desc *dn = &hp->tf.dn;
    if (dn->d_conv < 1 || dn->n_k_heads < 1 || dn->n_v_heads < 1 || dn->head_dim < 1 || max_tokens < 1)
        return -ERR_INVAL;
    struct deltanet_ctx *d = calloc(1, sizeof *d);
    if (!d) return -ERR_NOMEM;
    d->c = c;
    d->dn = *dn;
    d->rms_eps = hp->rms_eps;
    d->max_tokens = max_tokens;
    size_t T = (size_t)max_tokens, C = (size_t)deltanet_channels(dn), V = (size_t)deltanet_v_width(dn);
    size_t H = (size_t)dn->n_v_heads, D = (size_t)dn->head_dim, CH = DELTANET_CHUNK;
    bool ok = true;
    d->qkv = alloc_count(d, T * C, sizeof(float), &ok);
    d->z = alloc_count(d, T * V, sizeof(float), &ok);
    d->beta = alloc_count(d, T * H, sizeof(float), &ok);
    d->g = alloc_count(d, T * H, sizeof(float), &ok);
    d->o = alloc_count(d, T * V, sizeof(float), &ok);
    d->order = alloc_count(d, T, sizeof(int32_t), &ok);
    d->grp = alloc_count(d, T + 1, sizeof(int32_t), &ok);
    d->grp_seq = alloc_count(d, T, sizeof(int32_t), &ok);
    d->of = alloc_count(d, T, sizeof(int32_t), &ok);
    d->fill = alloc_count(d, T, sizeof(int32_t), &ok);
    d->n_slots = compute_n_threads(c);
    size_t per_slot = 2 * CH * CH + 3 * CH * D + CH;
    d->slots = alloc_count(d, (size_t)d->n_slots, sizeof *d->slots, &ok);
    d->slot_mem = alloc_count(d, (size_t)d->n_slots * per_slot, sizeof(float), &ok);
    if (!ok) {
        deltanet_ctx_destroy(d);
        return -ERR_NOMEM;
    }
    for (int i = 0; i < d->n_slots; i++) {
        float *p = d->slot_mem + (size_t)i * per_slot;
        struct dn_slot *s = &d->slots[i];
        s->kk = p, p += CH * CH;
        s->qk = p, p += CH * CH;
        s->w = p, p += CH * D;
        s->sq = p, p += CH * D;
        s->u = p, p += CH * D;
        s->G = p;
    }
    *out = d;
    return 0;
}

void deltanet_ctx_destroy(struct deltanet_ctx *d) {
    if (!d) return;
    void *bufs[] = {d->qkv, d->z, d->beta, d->g, d->o, d->order, d->grp, d->grp_seq, d->of, d->fill, d->slots, d->slot_mem};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    free(d);
}

size_t deltanet_ctx_bytes(const struct deltanet_ctx *d) { return d->bytes; }

static inline float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
static inline float softplus(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

/* The batch's entries grouped by sequence (a decode step: one group per entry; a prompt: one). */
static void group_entries(struct deltanet_ctx *d, const struct batch *b) {
    int32_t n = b->n_tokens;
    d->n_grp = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t k = d->n_grp - 1; /* the entry's group: most often the last one found */
        while (k >= 0 && d->grp_seq[k] != b->seq[i]) k--;
        if (k < 0) {
            k = d->n_grp++;
            d->grp_seq[k] = b->seq[i];
            d->fill[k] = 0;
        }
        d->fill[k]++;
        d->of[i] = k;
    }
    d->grp[0] = 0;
    for (int32_t k = 0; k < d->n_grp; k++) {
        d->grp[k + 1] = d->grp[k] + d->fill[k];
        d->fill[k] = d->grp[k];
    }
    for (int32_t i = 0; i < n; i++) d->order[d->fill[d->of[i]]++] = i;
}

struct layer_job {
    struct deltanet_ctx *d;
    const struct model_layer *L;
    struct recurrent_memory *r;
    int32_t layer;
    const struct batch *b;
};

/* x = silu(x) = x / (1 + e^-x) over n, with the vectorized expf (math/quant.h) in blocks of a
 * constant count so that the divisions vectorize too. */
enum { SILU_BLOCK = 256 };
static void silu_block(float *restrict x, const float *restrict e) {
    for (int k = 0; k < SILU_BLOCK; k++) x[k] = x[k] / (1.0f + e[k]);
}

static void silu_n(float *x, int64_t n) {
    float e[SILU_BLOCK];
    for (int64_t i0 = 0; i0 < n; i0 += SILU_BLOCK) {
        int64_t m = n - i0 < SILU_BLOCK ? n - i0 : SILU_BLOCK;
        for (int64_t k = 0; k < m; k++) e[k] = 0.0f - x[i0 + k];
        quant_expf_n(e, e, m);
        if (m == SILU_BLOCK) {
            silu_block(x + i0, e);
            continue;
        }
        for (int64_t k = 0; k < m; k++) x[i0 + k] = x[i0 + k] / (1.0f + e[k]);
    }
}

/* The causal conv over channels [c0, c1): each entry in batch order reads its sequence's conv
 * state (oldest input first), then the state slides by one input; qkv becomes silu(conv). */
static void conv_channels(void *arg, int64_t c0, int64_t c1) {
    const struct layer_job *j = arg;
    const struct deltanet_ctx *d = j->d;
    const int64_t C = deltanet_channels(&d->dn);
    const int32_t K = d->dn.d_conv, n_hist = K - 1;
    for (int32_t i = 0; i < j->b->n_tokens; i++) {
        float *st = recurrent_conv_state(j->r, j->b->seq[i], j->layer); /* [n_hist][C] */
        float *x = d->qkv + (int64_t)i * C;
        for (int64_t c = c0; c < c1; c++) {
            const float *w = j->L->conv_w + c * K;
            float sum = 0;
            for (int32_t k = 0; k < n_hist; k++) sum += st[(int64_t)k * C + c] * w[k];
            sum += x[c] * w[n_hist];
            for (int32_t k = 0; k + 1 < n_hist; k++) st[(int64_t)k * C + c] = st[(int64_t)(k + 1) * C + c];
            if (n_hist > 0) st[(int64_t)(n_hist - 1) * C + c] = x[c];
            x[c] = sum;
        }
        silu_n(x + c0, c1 - c0);
    }
}

/* x / max(|x|, eps) over n, then times scale. */
static void l2norm(float *x, int32_t n, float eps, float scale) {
    double ss = 0;
    for (int32_t i = 0; i < n; i++) ss += (double)(x[i] * x[i]);
    float f = scale / fmaxf(sqrtf((float)ss), eps);
    for (int32_t i = 0; i < n; i++) x[i] *= f;
}

/* Per entry: q and k heads l2-normed (q also scaled by 1/sqrt(D)), beta and the decay. */
static void entry_rows(void *arg, int64_t r0, int64_t r1) {
    const struct layer_job *j = arg;
    const struct deltanet_ctx *d = j->d;
    const struct delta_net_desc *dn = &d->dn;
    const int64_t C = deltanet_channels(dn);
    const int32_t D = dn->head_dim, Hk = dn->n_k_heads, Hv = dn->n_v_heads;
    const float qscale = 1.0f / sqrtf((float)D);
    for (int64_t i = r0; i < r1; i++) {
        float *x = d->qkv + i * C;
        for (int32_t h = 0; h < Hk; h++) {
            l2norm(x + (int64_t)h * D, D, d->rms_eps, qscale);
            l2norm(x + (int64_t)(Hk + h) * D, D, d->rms_eps, 1.0f);
        }
        for (int32_t h = 0; h < Hv; h++) {
            d->beta[i * Hv + h] = sigmoid(d->beta[i * Hv + h]);
            d->g[i * Hv + h] = j->L->ssm_a[h] * softplus(d->g[i * Hv + h] + j->L->dt_bias[h]);
        }
    }
}

/* The chunk's dot products and row updates 8 lanes at a time (GCC/Clang vector extensions: AVX
 * where the build targets it) when the head size is a multiple of 8, as Qwen3.5's 128 is: in
 * scalar order they are a serial chain of adds, the whole of a decode step's delta-net time
 * (scripts/bench.d/46-hybrid). Lanes are added in lane order at the end: a value depends on the
 * head size alone, never on the batch or the thread. */
typedef float v8f __attribute__((vector_size(32)));

static inline v8f v8_load(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline __attribute__((always_inline)) float dot(const float *a, const float *b, int32_t n) {
    float s = 0;
    if (n % 8 == 0) {
        v8f acc = {0};
        for (int32_t i = 0; i < n; i += 8) acc += v8_load(a + i) * v8_load(b + i);
        for (int k = 0; k < 8; k++) s += acc[k];
        return s;
    }
    for (int32_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* *ka = dot(a, k, n) and *qa = dot(a, q, n) in one pass over a: two chains, each in dot's order. */
static inline __attribute__((always_inline)) void dot2(const float *a, const float *k, const float *q, int32_t n,
                                                        float *ka, float *qa) {
    if (n % 8 != 0) {
        *ka = dot(a, k, n);
        *qa = dot(a, q, n);
        return;
    }
    v8f acc_k = {0}, acc_q = {0};
    for (int32_t i = 0; i < n; i += 8) {
        const v8f r = v8_load(a + i);
        acc_k += r * v8_load(k + i);
        acc_q += r * v8_load(q + i);
    }
    float sk = 0, sq = 0;
    for (int l = 0; l < 8; l++) sk += acc_k[l], sq += acc_q[l];
    *ka = sk;
    *qa = sq;
}

/* y = y * c + a * x over n in one pass, each element rounded as `y *= c` then axpy would round it
 * (the build does not contract a * b + c into an fma: -std=c11). */
static inline __attribute__((always_inline)) void scale_axpy(float *restrict y, float c, float a, const float *restrict x,
                                                              int32_t n) {
    if (n % 8 == 0) {
        const v8f vc = {c, c, c, c, c, c, c, c}, va = {a, a, a, a, a, a, a, a};
        for (int32_t i = 0; i < n; i += 8) {
            v8f r = v8_load(y + i) * vc + va * v8_load(x + i);
            memcpy(y + i, &r, sizeof r);
        }
        return;
    }
    for (int32_t i = 0; i < n; i++) y[i] = y[i] * c + a * x[i];
}

/* y += a * x over n. */
static inline __attribute__((always_inline)) void axpy(float *restrict y, float a, const float *restrict x, int32_t n) {
    if (n % 8 == 0) {
        v8f va = {a, a, a, a, a, a, a, a};
        for (int32_t i = 0; i < n; i += 8) {
            v8f r = v8_load(y + i) + va * v8_load(x + i);
            memcpy(y + i, &r, sizeof r);
        }
        return;
    }
    for (int32_t i = 0; i < n; i++) y[i] += a * x[i];
}

/* One chunk of n entries (idx) of one sequence for v head h: the chunked form of deltanet.h. */
static void run_chunk(const struct deltanet_ctx *d, struct dn_slot *sl, float *S, const int32_t *idx, int32_t n,
                      int32_t h) {
    const struct delta_net_desc *dn = &d->dn;
    const int64_t C = deltanet_channels(dn), V = deltanet_v_width(dn);
    const int32_t D = dn->head_dim, Hk = dn->n_k_heads, Hv = dn->n_v_heads, kh = h % Hk;
    const float *q[DELTANET_CHUNK], *k[DELTANET_CHUNK], *v[DELTANET_CHUNK];
    float acc = 0;
    for (int32_t t = 0; t < n; t++) {
        const float *x = d->qkv + (int64_t)idx[t] * C;
        q[t] = x + (int64_t)kh * D;
        k[t] = x + (int64_t)(Hk + kh) * D;
        v[t] = x + (int64_t)(2 * Hk) * D + (int64_t)h * D;
        acc += d->g[(int64_t)idx[t] * Hv + h];
        sl->G[t] = acc;
    }
    /* S0 k_t and S0 q_t: rows of S dotted with each token's k and q */
    for (int32_t t = 0; t < n; t++)
        for (int32_t jv = 0; jv < D; jv++) dot2(S + (int64_t)jv * D, k[t], q[t], D, &sl->w[t * D + jv], &sl->sq[t * D + jv]);
    for (int32_t t = 0; t < n; t++)
        for (int32_t s = 0; s <= t; s++) {
            float e = expf(sl->G[t] - sl->G[s]);
            sl->qk[t * DELTANET_CHUNK + s] = e * dot(q[t], k[s], D);
            if (s < t) sl->kk[t * DELTANET_CHUNK + s] = e * dot(k[t], k[s], D);
        }
    /* u_t by forward substitution, o_t from S0 q_t and the u_s */
    for (int32_t t = 0; t < n; t++) {
        float beta = d->beta[(int64_t)idx[t] * Hv + h], eG = expf(sl->G[t]);
        float *u = sl->u + t * D;
        for (int32_t jv = 0; jv < D; jv++) u[jv] = v[t][jv] - eG * sl->w[t * D + jv];
        for (int32_t s = 0; s < t; s++) axpy(u, -sl->kk[t * DELTANET_CHUNK + s], sl->u + s * D, D);
        for (int32_t jv = 0; jv < D; jv++) u[jv] *= beta;
        float *o = d->o + (int64_t)idx[t] * V + (int64_t)h * D;
        for (int32_t jv = 0; jv < D; jv++) o[jv] = eG * sl->sq[t * D + jv];
        for (int32_t s = 0; s <= t; s++) axpy(o, sl->qk[t * DELTANET_CHUNK + s], sl->u + s * D, D);
    }
    /* the state at the chunk's end */
    float eGn = expf(sl->G[n - 1]), f[DELTANET_CHUNK];
    for (int32_t s = 0; s < n; s++) f[s] = expf(sl->G[n - 1] - sl->G[s]);
    for (int32_t jv = 0; jv < D; jv++) {
        float *row = S + (int64_t)jv * D;
        scale_axpy(row, eGn, f[0] * sl->u[jv], k[0], D); /* n >= 1 */
        for (int32_t s = 1; s < n; s++) axpy(row, f[s] * sl->u[s * D + jv], k[s], D);
    }
}

/* A chunk of one token (every decode step) in one pass over S: each row's dots with k and q,
 * then its update while it is in cache (run_chunk reads S twice). The same operations in the same
 * order as run_chunk with n = 1, so the same numbers. */
static void step_one(const struct deltanet_ctx *d, float *S, int32_t i, int32_t h) {
    const struct delta_net_desc *dn = &d->dn;
    const int64_t C = deltanet_channels(dn), V = deltanet_v_width(dn);
    const int32_t D = dn->head_dim, Hk = dn->n_k_heads, Hv = dn->n_v_heads, kh = h % Hk;
    const float *x = d->qkv + (int64_t)i * C;
    const float *q = x + (int64_t)kh * D, *k = x + (int64_t)(Hk + kh) * D, *v = x + (int64_t)(2 * Hk) * D + (int64_t)h * D;
    float G = 0.0f + d->g[(int64_t)i * Hv + h], beta = d->beta[(int64_t)i * Hv + h];
    float eG = expf(G), e0 = expf(G - G), qk = e0 * dot(q, k, D);
    float *o = d->o + (int64_t)i * V + (int64_t)h * D;
    for (int32_t jv = 0; jv < D; jv++) {
        float *row = S + (int64_t)jv * D, w, sq;
        dot2(row, k, q, D, &w, &sq);
        float u = (v[jv] - eG * w) * beta;
        o[jv] = eG * sq + qk * u;
        scale_axpy(row, eG, e0 * u, k, D);
    }
}

/* Items [i0, i1) of (group, v head) pairs: each walks its sequence's entries chunk by chunk. */
static void delta_items(void *arg, int64_t i0, int64_t i1) {
    const struct layer_job *j = arg;
    struct deltanet_ctx *d = j->d;
    const int32_t Hv = d->dn.n_v_heads, D = d->dn.head_dim;
    int slot = atomic_fetch_add(&d->next_slot, 1);
    ASSERT(slot < d->n_slots);
    struct dn_slot *sl = &d->slots[slot];
    for (int64_t it = i0; it < i1; it++) {
        int32_t k = (int32_t)(it / Hv), h = (int32_t)(it % Hv);
        float *S = recurrent_ssm_state(j->r, d->grp_seq[k], j->layer) + (int64_t)h * D * D;
        if (d->grp[k + 1] - d->grp[k] == 1) {
            step_one(d, S, d->order[d->grp[k]], h);
            continue;
        }
        for (int32_t a = d->grp[k]; a < d->grp[k + 1]; a += DELTANET_CHUNK) {
            int32_t n = d->grp[k + 1] - a < DELTANET_CHUNK ? d->grp[k + 1] - a : DELTANET_CHUNK;
            run_chunk(d, sl, S, d->order + a, n, h);
        }
    }
}

/* o = rmsnorm(o_h) * ssm_norm * silu(z_h) per head, rows [r0, r1). */
static void gated_norm_rows(void *arg, int64_t r0, int64_t r1) {
    const struct layer_job *j = arg;
    const struct deltanet_ctx *d = j->d;
    const int64_t V = deltanet_v_width(&d->dn);
    const int32_t D = d->dn.head_dim;
    for (int64_t r = r0; r < r1; r++) {
        silu_n(d->z + r * V, V); /* the whole row at once: silu_n's blocks of a constant count */
        for (int32_t h = 0; h < d->dn.n_v_heads; h++) {
            float *o = d->o + r * V + (int64_t)h * D;
            const float *z = d->z + r * V + (int64_t)h * D;
            double ss = 0;
            for (int32_t i = 0; i < D; i++) ss += (double)(o[i] * o[i]);
            float scale = 1.0f / sqrtf((float)(ss / D) + d->rms_eps);
            for (int32_t i = 0; i < D; i++) o[i] = o[i] * scale * j->L->ssm_norm[i] * z[i];
        }
    }
}

static void mm(struct compute *c, bool reference, const struct model_weight *w, const float *x, int64_t n, float *y) {
    matmul_path(c, reference ? MATMUL_REFERENCE : MATMUL_AUTO, w->type, w->data, w->n_in, w->n_out, x, n, y);
}

void deltanet_layer(struct deltanet_ctx *d, const struct model *m, const struct model_layer *L,
                    struct recurrent_memory *r, int32_t layer, const struct batch *b, const float *xn, float *out,
                    bool reference) {
    const struct delta_net_desc *dn = &d->dn;
    const int64_t n = b->n_tokens, C = deltanet_channels(dn), V = deltanet_v_width(dn);
    ASSERT(n <= d->max_tokens);
    /* the four projections of the same input: one dispatch where the kernels can share it */
    const struct model_weight *w[4] = {&L->w_qkv, &L->w_z, &L->w_beta, &L->w_alpha};
    float *y[4] = {d->qkv, d->z, d->beta, d->g};
    if (reference) {
        for (int i = 0; i < 4; i++) mm(d->c, true, w[i], xn, n, y[i]);
    } else {
        struct matmul_out outs[4];
        enum ggml_type types[4];
        for (int i = 0; i < 4; i++) {
            outs[i] = (struct matmul_out){.w = w[i]->data, .n_out = w[i]->n_out, .y = y[i]};
            types[i] = w[i]->type;
        }
        matmul_multi_types(d->c, types, m->hp.n_embd, xn, n, 4, outs);
    }
    struct layer_job job = {.d = d, .L = L, .r = r, .layer = layer, .b = b};
    compute_parallel_for_work(d->c, C, n * dn->d_conv * 2, conv_channels, &job);
    compute_parallel_for_work(d->c, n, 4 * C, entry_rows, &job);
    group_entries(d, b);
    atomic_store(&d->next_slot, 0);
    int64_t D = dn->head_dim;
    compute_parallel_for_work(d->c, (int64_t)d->n_grp * dn->n_v_heads, 4 * D * D * (n / d->n_grp + 1), delta_items,
                              &job);
    compute_parallel_for_work(d->c, n, 4 * V, gated_norm_rows, &job);
    mm(d->c, reference, &L->ssm_out, d->o, n, out);
}
