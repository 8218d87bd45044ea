/* mamba.c: Mamba-1 loading and forward pass (see mamba.h for the math and the contracts). */
#include "model/mamba.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "math/quant.h"
#include "memory/recurrent.h"
#include "model/arch.h"

/* ---- loading ---- */

static int fail(char *why, size_t why_len, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (why && why_len) vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
    return code;
}

static int64_t n_elements(const struct gguf_tensor *t) {
    return (int64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
}

/* An F32 tensor of exactly n elements (its dimensions may be split, e.g. ssm_d as 1 x d_inner). */
static int load_f32(const struct gguf_file *f, const char *name, int64_t n, const float **out,
                    char *why, size_t why_len) {
    const struct gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return fail(why, why_len, -ERR_FORMAT, "mamba: tensor %s is missing", name);
    if (t->type != GGML_TYPE_F32)
        return fail(why, why_len, -ERR_UNSUPPORTED, "mamba: tensor %s has type %u, expected f32", name, (unsigned)t->type);
    if (n_elements(t) != n)
        return fail(why, why_len, -ERR_FORMAT, "mamba: tensor %s has %lld elements, expected %lld",
                    name, (long long)n_elements(t), (long long)n);
    *out = t->data;
    return 0;
}

/* A matrix of n_out rows of n_in elements of a type the kernels compute with. */
static int load_matrix(const struct gguf_file *f, const char *name, int64_t n_in, int64_t n_out,
                       struct model_weight *out, char *why, size_t why_len) {
    const struct gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return fail(why, why_len, -ERR_FORMAT, "mamba: tensor %s is missing", name);
    if (t->ne[0] != (uint64_t)n_in || t->ne[1] != (uint64_t)n_out || t->ne[2] != 1 || t->ne[3] != 1)
        return fail(why, why_len, -ERR_FORMAT, "mamba: tensor %s is %llux%llu, expected %lldx%lld", name,
                    (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (long long)n_in, (long long)n_out);
    if (!quant_supported(t->type) || ggml_row_size(t->type, (uint64_t)n_in) == 0)
        return fail(why, why_len, -ERR_UNSUPPORTED, "mamba: tensor '%s' has unsupported type %s", name,
                    ggml_type_info(t->type)->name);
    *out = (struct model_weight){.type = t->type, .data = t->data, .n_in = n_in, .n_out = n_out};
    return 0;
}

static int load_hparams(const struct gguf_file *f, struct mamba_hparams *hp, char *why, size_t why_len) {
    struct gguf_str arch = gguf_get_str(f, "general.architecture");
    if (!gguf_str_eq(arch, "mamba")) return fail(why, why_len, -ERR_UNSUPPORTED, "mamba: not a mamba model");
    static const struct { const char *key; size_t off; } keys[] = {
        {"mamba.embedding_length", offsetof(struct mamba_hparams, n_embd)},
        {"mamba.block_count", offsetof(struct mamba_hparams, n_layer)},
        {"mamba.ssm.conv_kernel", offsetof(struct mamba_hparams, d_conv)},
        {"mamba.ssm.inner_size", offsetof(struct mamba_hparams, d_inner)},
        {"mamba.ssm.state_size", offsetof(struct mamba_hparams, d_state)},
        {"mamba.ssm.time_step_rank", offsetof(struct mamba_hparams, dt_rank)},
    };
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        int64_t v = gguf_get_int(f, keys[i].key, -1);
        if (v <= 0 || v > (1 << 20))
            return fail(why, why_len, -ERR_FORMAT, "mamba: metadata %s is missing or out of range", keys[i].key);
        *(int32_t *)((char *)hp + keys[i].off) = (int32_t)v;
    }
    hp->n_ctx_train = (int32_t)gguf_get_int(f, "mamba.context_length", 0);
    hp->rms_eps = (float)gguf_get_float(f, "mamba.attention.layer_norm_rms_epsilon", 1e-5);
    const struct gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    if (!emb) return fail(why, why_len, -ERR_FORMAT, "mamba: tensor token_embd.weight is missing");
    if (emb->ne[1] < 1 || emb->ne[1] > INT32_MAX)
        return fail(why, why_len, -ERR_FORMAT, "mamba: token_embd.weight has a bad vocabulary size");
    hp->n_vocab = (int32_t)emb->ne[1];
    hp->tied_output = gguf_find_tensor(f, "output.weight") == NULL;
    return 0;
}

static int load_layer(const struct gguf_file *f, const struct mamba_hparams *hp, int32_t il,
                      struct mamba_layer *l, char *why, size_t why_len) {
    char name[64];
    int64_t d = hp->d_inner;
    int rc;
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d.%s", (int)il, suffix), name)
    if ((rc = load_f32(f, NAME("attn_norm.weight"), hp->n_embd, &l->norm, why, why_len)) < 0 ||
        (rc = load_matrix(f, NAME("ssm_in.weight"), hp->n_embd, 2 * d, &l->in, why, why_len)) < 0 ||
        (rc = load_f32(f, NAME("ssm_conv1d.weight"), d * hp->d_conv, &l->conv_w, why, why_len)) < 0 ||
        (rc = load_f32(f, NAME("ssm_conv1d.bias"), d, &l->conv_b, why, why_len)) < 0 ||
        (rc = load_matrix(f, NAME("ssm_x.weight"), d, hp->dt_rank + 2 * hp->d_state, &l->x, why, why_len)) < 0 ||
        (rc = load_matrix(f, NAME("ssm_dt.weight"), hp->dt_rank, d, &l->dt, why, why_len)) < 0 ||
        (rc = load_f32(f, NAME("ssm_dt.bias"), d, &l->dt_b, why, why_len)) < 0 ||
        (rc = load_f32(f, NAME("ssm_a"), d * hp->d_state, &l->a, why, why_len)) < 0 ||
        (rc = load_f32(f, NAME("ssm_d"), d, &l->d, why, why_len)) < 0 ||
        (rc = load_matrix(f, NAME("ssm_out.weight"), d, hp->n_embd, &l->out, why, why_len)) < 0)
        return rc;
#undef NAME
    return 0;
}

static size_t matrix_bytes(const struct model_weight *w) {
    return ggml_row_size(w->type, (uint64_t)w->n_in) * (size_t)w->n_out;
}

/* What one token reads: every layer's matrices and vectors, and the output matrix (an embedding
 * row is negligible). */
static size_t weight_bytes(const struct mamba_model *m) {
    const struct mamba_hparams *hp = &m->hp;
    size_t vec_floats = (size_t)hp->n_embd + (size_t)hp->d_inner * (size_t)(hp->d_conv + 3 + hp->d_state);
    size_t bytes = matrix_bytes(&m->output) + (size_t)hp->n_embd * sizeof(float);
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const struct mamba_layer *l = &m->layers[il];
        bytes += matrix_bytes(&l->in) + matrix_bytes(&l->x) + matrix_bytes(&l->dt) + matrix_bytes(&l->out) +
                 vec_floats * sizeof(float);
    }
    return bytes;
}

int mamba_load(struct mamba_model **out, const struct gguf_file *f, char *why, size_t why_len) {
    struct mamba_model *m = calloc(1, sizeof *m);
    if (!m) return -ERR_NOMEM;
    int rc = load_hparams(f, &m->hp, why, why_len);
    if (rc < 0) goto fail;
    const struct mamba_hparams *hp = &m->hp;
    if ((rc = load_matrix(f, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->token_embd, why, why_len)) < 0 ||
        (rc = load_f32(f, "output_norm.weight", hp->n_embd, &m->output_norm, why, why_len)) < 0)
        goto fail;
    if (hp->tied_output) m->output = m->token_embd;
    else if ((rc = load_matrix(f, "output.weight", hp->n_embd, hp->n_vocab, &m->output, why, why_len)) < 0)
        goto fail;
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) { rc = -ERR_NOMEM; goto fail; }
    for (int32_t il = 0; il < hp->n_layer; il++)
        if ((rc = load_layer(f, hp, il, &m->layers[il], why, why_len)) < 0) goto fail;
    m->weight_bytes = weight_bytes(m);
    *out = m;
    return 0;
fail:
    mamba_free(m);
    return rc;
}

void mamba_free(struct mamba_model *m) {
    if (!m) return;
    free(m->layers);
    free(m);
}

static struct recurrent_shape state_shape(const struct mamba_model *m) {
    return (struct recurrent_shape){.n_layer = m->hp.n_layer, .d_conv = m->hp.d_conv,
                                    .d_inner = m->hp.d_inner, .d_state = m->hp.d_state};
}

int mamba_memory_create(const struct mamba_model *m, int32_t n_states, int32_t n_seq_max, struct memory **out) {
    struct recurrent_shape shape = state_shape(m);
    return recurrent_memory_create(out, &shape, n_states, n_seq_max);
}

int64_t mamba_max_n_in(const struct mamba_model *m) {
    return m->hp.n_embd > m->hp.d_inner ? m->hp.n_embd : m->hp.d_inner;
}

/* ---- scratch ---- */

struct mamba_scratch {
    int32_t max_tokens, max_outputs;
    size_t bytes;
    float *h;     /* [max_tokens][n_embd]     residual stream */
    float *u;     /* [max_tokens][n_embd]     normed layer input, then the layer's output */
    float *xz;    /* [max_tokens][2*d_inner]  ssm_in output: x then z */
    float *x;     /* [max_tokens][d_inner]    silu(conv(x)) */
    float *dbc;   /* [max_tokens][dt_rank + 2*d_state] ssm_x output: dt, B, C */
    float *dtr;   /* [max_tokens][dt_rank]    dt part of dbc, contiguous for matmul */
    float *dt;    /* [max_tokens][d_inner]    ssm_dt output (bias and softplus applied in the scan) */
    float *y;     /* [max_tokens][d_inner]    scan output, gated */
    float *o;     /* [max_outputs][n_embd]    normed rows of the entries that want logits */
};

int mamba_scratch_create(struct mamba_scratch **out, const struct mamba_model *m, int32_t max_tokens, int32_t max_outputs) {
    if (max_tokens < 1 || max_outputs < 1) return -ERR_INVAL;
    const struct mamba_hparams *hp = &m->hp;
    struct mamba_scratch *s = calloc(1, sizeof *s);
    if (!s) return -ERR_NOMEM;
    s->max_tokens = max_tokens;
    s->max_outputs = max_outputs;
    size_t t = (size_t)max_tokens;
    struct { float **p; size_t n; } bufs[] = {
        {&s->h, t * (size_t)hp->n_embd},
        {&s->u, t * (size_t)hp->n_embd},
        {&s->xz, t * 2 * (size_t)hp->d_inner},
        {&s->x, t * (size_t)hp->d_inner},
        {&s->dbc, t * (size_t)(hp->dt_rank + 2 * hp->d_state)},
        {&s->dtr, t * (size_t)hp->dt_rank},
        {&s->dt, t * (size_t)hp->d_inner},
        {&s->y, t * (size_t)hp->d_inner},
        {&s->o, (size_t)max_outputs * (size_t)hp->n_embd},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
        *bufs[i].p = malloc(bufs[i].n * sizeof(float));
        if (!*bufs[i].p) { mamba_scratch_destroy(s); return -ERR_NOMEM; }
        s->bytes += bufs[i].n * sizeof(float);
    }
    *out = s;
    return 0;
}

void mamba_scratch_destroy(struct mamba_scratch *s) {
    if (!s) return;
    free(s->h); free(s->u); free(s->xz); free(s->x); free(s->dbc);
    free(s->dtr); free(s->dt); free(s->y); free(s->o);
    free(s);
}

size_t mamba_scratch_bytes(const struct mamba_scratch *s) {
    return s->bytes;
}

/* ---- forward ---- */

static inline float silu(float v) {
    return v / (1.0f + expf(-v));
}

/* out = x / sqrt(mean(x^2) + eps) * w (sum in double, like the reference) */
static void rms_norm(const float *x, const float *w, int32_t n, float eps, float *out) {
    double ss = 0;
    for (int32_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int32_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

/* What the per-channel workers of one layer share. Channels are independent, so each worker takes
 * a channel range and walks the batch in entry order: a sequence's entries come in position order,
 * so every state sees its tokens in time order, and no two workers touch the same state floats. */
struct layer_job {
    const struct mamba_hparams *hp;
    const struct mamba_layer *l;
    int32_t il;
    struct recurrent_memory *r;
    const struct batch *b;
    struct mamba_scratch *s;
};

/* x[i][c] = silu(sum_k window[k][c] * w[c][k] + bias[c]), window = conv state rows then x_i; the
 * state then slides by one input. */
static void conv_channels(void *arg, int64_t c0, int64_t c1) {
    const struct layer_job *j = arg;
    const int32_t d = j->hp->d_inner, k_n = j->hp->d_conv, n_hist = k_n - 1;
    const float *w = j->l->conv_w, *bias = j->l->conv_b;
    for (int32_t i = 0; i < j->b->n_tokens; i++) {
        float *st = recurrent_conv_state(j->r, j->b->seq[i], j->il); /* [n_hist][d] */
        const float *xin = j->s->xz + (int64_t)i * 2 * d;
        float *xout = j->s->x + (int64_t)i * d;
        for (int64_t c = c0; c < c1; c++) {
            const float *wc = w + c * k_n;
            float sum = 0; /* window first, bias last: the reference's order */
            for (int32_t k = 0; k < n_hist; k++) sum += st[(int64_t)k * d + c] * wc[k];
            sum += xin[c] * wc[n_hist];
            sum += bias[c];
            for (int32_t k = 0; k + 1 < n_hist; k++) st[(int64_t)k * d + c] = st[(int64_t)(k + 1) * d + c];
            if (n_hist > 0) st[(int64_t)(n_hist - 1) * d + c] = xin[c];
            xout[c] = silu(sum);
        }
    }
}

/* The scan's transcendental functions 8 lanes at a time (GCC/Clang vector extensions: AVX where
 * the build targets it, else pairs of SSE registers): as scalar libm calls, expf(delta * A) and
 * the softplus's log1pf(expf(dt)) would take about half of a prompt's time (scripts/bench.d/45-mamba
 * prints the prompt's tokens/s). Lane by lane and grouped by
 * absolute index (channels in aligned groups of 8, state elements from 0), so no value depends on
 * its neighbours, the batch or how channels are split over threads. */
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

static inline v8f v8_splat(float v) { return (v8f){v, v, v, v, v, v, v, v}; }

static inline v8f v8_load(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void v8_store(float *p, v8f v) { memcpy(p, &v, sizeof v); }

static inline v8f v8_select(v8i mask, v8f a, v8f b) { /* mask ? a : b, lane-wise */
    return (v8f)(((v8i)a & mask) | ((v8i)b & ~mask));
}

/* e^x by Cephes' expf method: x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts, so n ln2 is
 * exact), e^r by its degree-7 polynomial (relative error ~1e-7, like expf), times 2^n built in
 * the exponent bits. Below -87.33 (where expf turns subnormal) 0; above 88 it saturates at e^88
 * (2^n stays finite). The scan only takes arguments <= 0. */
static inline v8f exp8(v8f x) {
    const v8f lo = v8_splat(-87.33654f), hi = v8_splat(88.0f);
    v8i under = x < lo;
    x = v8_select(x > hi, hi, v8_select(under, lo, x));
    v8f t = x * v8_splat(1.44269504088896341f) + v8_splat(0.5f);
    v8i n = __builtin_convertvector(t, v8i); /* truncates: floor by correcting where it rounded up */
    n += (v8i)(__builtin_convertvector(n, v8f) > t);
    v8f fn = __builtin_convertvector(n, v8f);
    v8f r = x - fn * v8_splat(0.693359375f) - fn * v8_splat(-2.12194440e-4f);
    v8f p = v8_splat(1.9875691500e-4f);
    p = p * r + v8_splat(1.3981999507e-3f);
    p = p * r + v8_splat(8.3334519073e-3f);
    p = p * r + v8_splat(4.1665795894e-2f);
    p = p * r + v8_splat(1.6666665459e-1f);
    p = p * r + v8_splat(5.0000001201e-1f);
    p = p * r * r + r + v8_splat(1.0f);
    return v8_select(under, v8_splat(0.0f), p * (v8f)((n + 127) << 23));
}

/* softplus(v) = log(1 + e^v) = max(v, 0) + log1p(y), y = e^-|v| in (0, 1]; v itself above 20,
 * like the scalar form. log1p(y) by Cephes' logf polynomial on f = y (1 + y <= sqrt 2), else on
 * f = (y - 1) / 2 plus ln 2: f never goes through 1 + y, so a tiny y keeps its precision. */
static inline v8f softplus8(v8f v) {
    v8f y = exp8((v8f)((v8i)v | (v8i)v8_splat(-0.0f))); /* e^-|v| */
    v8i big = y > v8_splat(0.41421356f);
    v8f f = v8_select(big, (y - v8_splat(1.0f)) * v8_splat(0.5f), y);
    v8f e = v8_select(big, v8_splat(1.0f), v8_splat(0.0f));
    v8f z = f * f;
    v8f p = v8_splat(7.0376836292e-2f);
    p = p * f + v8_splat(-1.1514610310e-1f);
    p = p * f + v8_splat(1.1676998740e-1f);
    p = p * f + v8_splat(-1.2420140846e-1f);
    p = p * f + v8_splat(1.4249322787e-1f);
    p = p * f + v8_splat(-1.6668057665e-1f);
    p = p * f + v8_splat(2.0000714765e-1f);
    p = p * f + v8_splat(-2.4999993993e-1f);
    p = p * f + v8_splat(3.3333331174e-1f);
    v8f l = f * z * p + e * v8_splat(-2.12194440e-4f) - z * v8_splat(0.5f);
    l = f + l + e * v8_splat(0.693359375f);
    v8f sp = v8_select(v > v8_splat(0.0f), v, v8_splat(0.0f)) + l;
    return v8_select(v > v8_splat(20.0f), v, sp);
}

/* The selective scan of mamba.h for channels [c0, c1), gated by silu(z). With d_state a multiple
 * of 8 (16 in Mamba-1) it runs 8 state elements at a time, the sum over them in 8 lanes added in
 * lane order at the end; otherwise element by element with libm. */
static void scan_channels(void *arg, int64_t c0, int64_t c1) {
    const struct layer_job *j = arg;
    const int32_t d = j->hp->d_inner, n = j->hp->d_state, r = j->hp->dt_rank;
    const struct mamba_layer *l = j->l;
    const bool wide = n % 8 == 0;
    for (int32_t i = 0; i < j->b->n_tokens; i++) {
        float *S = recurrent_ssm_state(j->r, j->b->seq[i], j->il); /* [d][n] */
        const float *B = j->s->dbc + (int64_t)i * (r + 2 * n) + r, *C = B + n;
        const float *x = j->s->x + (int64_t)i * d, *dt = j->s->dt + (int64_t)i * d;
        const float *z = j->s->xz + (int64_t)i * 2 * d + d;
        float *y = j->s->y + (int64_t)i * d;
        for (int64_t g = c0 & ~(int64_t)7; g < c1; g += 8) {
            float delta8[8]; /* softplus(dt + dt_b) of channels g.. */
            if (g + 8 <= d) {
                v8_store(delta8, softplus8(v8_load(dt + g) + v8_load(l->dt_b + g)));
            } else {
                for (int64_t c = g; c < d; c++) {
                    float v = dt[c] + l->dt_b[c];
                    delta8[c - g] = v <= 20.0f ? log1pf(expf(v)) : v;
                }
            }
            int64_t lo = g > c0 ? g : c0, hi = g + 8 < c1 ? g + 8 : c1;
            for (int64_t c = lo; c < hi; c++) {
                float delta = delta8[c - g], xdt = x[c] * delta, sum = 0;
                float *Sc = S + c * n;
                const float *Ac = l->a + c * n;
                if (wide) {
                    v8f acc = v8_splat(0.0f);
                    for (int32_t k = 0; k < n; k += 8) {
                        v8f sk = v8_load(Sc + k) * exp8(v8_load(Ac + k) * v8_splat(delta)) +
                                 v8_load(B + k) * v8_splat(xdt);
                        acc += sk * v8_load(C + k);
                        v8_store(Sc + k, sk);
                    }
                    for (int k = 0; k < 8; k++) sum += acc[k];
                } else {
                    for (int32_t k = 0; k < n; k++) {
                        float sk = Sc[k] * expf(delta * Ac[k]) + B[k] * xdt;
                        sum += sk * C[k];
                        Sc[k] = sk;
                    }
                }
                y[c] = (sum + l->d[c] * x[c]) * silu(z[c]);
            }
        }
    }
}

/* y = W x for n_tok rows (matmul rounds the activations as the reference does). */
static void mm(struct compute *c, const struct model_weight *w, const float *x, int64_t n_tok, float *y) {
    matmul(c, w->type, w->data, w->n_in, w->n_out, x, n_tok, y);
}

static void layer_forward(const struct mamba_model *m, int32_t il, struct compute *c, struct recurrent_memory *r,
                          const struct batch *b, struct mamba_scratch *s) {
    const struct mamba_hparams *hp = &m->hp;
    const struct mamba_layer *l = &m->layers[il];
    const int32_t T = b->n_tokens, d = hp->d_inner, n_dbc = hp->dt_rank + 2 * hp->d_state;
    for (int32_t i = 0; i < T; i++)
        rms_norm(s->h + (int64_t)i * hp->n_embd, l->norm, hp->n_embd, hp->rms_eps, s->u + (int64_t)i * hp->n_embd);
    mm(c, &l->in, s->u, T, s->xz);
    struct layer_job job = {.hp = hp, .l = l, .il = il, .r = r, .b = b, .s = s};
    compute_parallel_for(c, d, conv_channels, &job);
    mm(c, &l->x, s->x, T, s->dbc);
    for (int32_t i = 0; i < T; i++)
        memcpy(s->dtr + (int64_t)i * hp->dt_rank, s->dbc + (int64_t)i * n_dbc, (size_t)hp->dt_rank * sizeof(float));
    mm(c, &l->dt, s->dtr, T, s->dt);
    compute_parallel_for(c, d, scan_channels, &job);
    mm(c, &l->out, s->y, T, s->u);
    for (int64_t k = 0; k < (int64_t)T * hp->n_embd; k++) s->h[k] += s->u[k];
}

/* The checks of mamba.h that must pass before any state changes. */
static int check_batch(const struct mamba_model *m, const struct mamba_scratch *s, struct memory *mem,
                       const struct batch *b) {
    struct recurrent_memory *r = recurrent_from_memory(mem);
    struct recurrent_shape want = state_shape(m);
    if (!r || memcmp(&r->shape, &want, sizeof want) != 0) return -ERR_STATE;
    if (b->n_tokens <= 0) return -ERR_INVAL;
    if (b->n_tokens > s->max_tokens) return -ERR_TOOBIG;
    int32_t n_out = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        n_out += b->want_logits[i];
        int32_t seq = b->seq[i];
        if (seq < 0 || seq >= mem->n_seq_max || memory_seq_cells(mem, seq) == 0 ||
            b->pos[i] > memory_seq_pos_max(mem, seq))
            return -ERR_STATE;
        if (b->token[i] < 0 || b->token[i] >= m->hp.n_vocab) return -ERR_INVAL;
    }
    return n_out > s->max_outputs ? -ERR_TOOBIG : 0;
}

int mamba_forward(const struct mamba_model *m, struct mamba_scratch *s, struct compute *c,
                  struct memory *mem, const struct batch *b, float *logits) {
    int rc = check_batch(m, s, mem, b);
    if (rc < 0) return rc;
    const struct mamba_hparams *hp = &m->hp;
    const int32_t T = b->n_tokens;
    size_t emb_row = ggml_row_size(m->token_embd.type, (uint64_t)hp->n_embd);
    for (int32_t i = 0; i < T; i++)
        quant_to_float(m->token_embd.type, (const char *)m->token_embd.data + (size_t)b->token[i] * emb_row,
                       s->h + (int64_t)i * hp->n_embd, hp->n_embd);
    struct recurrent_memory *r = recurrent_from_memory(mem);
    for (int32_t il = 0; il < hp->n_layer; il++) layer_forward(m, il, c, r, b, s);
    int32_t n_out = 0;
    for (int32_t i = 0; i < T; i++)
        if (b->want_logits[i])
            rms_norm(s->h + (int64_t)i * hp->n_embd, m->output_norm, hp->n_embd, hp->rms_eps,
                     s->o + (int64_t)n_out++ * hp->n_embd);
    if (n_out) mm(c, &m->output, s->o, n_out, logits);
    /* hidden states: the same norm, into u (free after the layers) */
    int32_t n_hid = 0;
    for (int32_t i = 0; i < T && b->n_hidden > 0; i++)
        if (b->want_hidden[i])
            rms_norm(s->h + (int64_t)i * hp->n_embd, m->output_norm, hp->n_embd, hp->rms_eps,
                     s->u + (int64_t)n_hid++ * hp->n_embd);
    return 0;
}

const float *mamba_hidden(const struct mamba_scratch *s) { return s->u; }

/* ---- behind model.h: the arch_impl of model/arch.h ---- */

/* The forward_ctx of a mamba model: the public part first, so fc and the whole convert. */
struct mamba_forward_ctx {
    struct forward_ctx fc;        /* fc.s stays NULL: the buffers are these */
    struct compute *c;
    struct mamba_scratch *s;
    size_t bytes;
};

static struct mamba_forward_ctx *mctx_of(struct forward_ctx *fc) {
    return (struct mamba_forward_ctx *)fc;
}

static void arch_ctx_destroy(struct forward_ctx *fc) {
    if (!fc) return;
    struct mamba_forward_ctx *x = mctx_of(fc);
    if (x->c) compute_destroy(x->c);
    mamba_scratch_destroy(x->s);
    free(fc->logits);
    free(x);
}

static int arch_ctx_create(struct forward_ctx **out, const struct model *m, const struct forward_config *cfg) {
    struct mamba_forward_ctx *x = calloc(1, sizeof *x);
    if (!x) return -ERR_NOMEM;
    x->fc.cfg = *cfg;
    size_t n_logits = (size_t)cfg->max_outputs * (size_t)m->hp.n_vocab;
    x->fc.logits = malloc(n_logits * sizeof(float));
    int rc = x->fc.logits ? 0 : -ERR_NOMEM;
    if (rc == 0) rc = mamba_scratch_create(&x->s, m->mamba, cfg->max_tokens, cfg->max_outputs);
    if (rc == 0) rc = compute_create(&x->c, cfg->n_threads, cfg->max_tokens, mamba_max_n_in(m->mamba));
    if (rc < 0) {
        arch_ctx_destroy(&x->fc);
        return rc;
    }
    compute_set_yield_us(x->c, cfg->yield_us);
    x->bytes = n_logits * sizeof(float) + mamba_scratch_bytes(x->s) + compute_scratch_bytes(x->c);
    *out = &x->fc;
    return 0;
}

static size_t arch_ctx_bytes(const struct forward_ctx *fc) {
    return ((const struct mamba_forward_ctx *)fc)->bytes;
}

static int arch_forward(const struct model *m, struct forward_ctx *fc, struct memory *mem, const struct batch *b) {
    struct mamba_forward_ctx *x = mctx_of(fc);
    int rc = mamba_forward(m->mamba, x->s, x->c, mem, b, fc->logits);
    fc->n_outputs = fc->n_hidden = 0;
    for (int32_t i = 0; rc == 0 && i < b->n_tokens; i++) {
        fc->n_outputs += b->want_logits[i];
        fc->n_hidden += b->want_hidden[i];
    }
    fc->hidden = mamba_hidden(x->s);
    return rc;
}

/* A state per sequence: n_cells counts states here, and more than n_seq_max would never be used. */
static int arch_memory_create(const struct model *m, const struct memory_config *mc, struct memory **out) {
    int64_t n_cells = mc->n_cells;
    int32_t n_seq_max = mc->n_seq_max;
    int32_t n_states = n_cells < 1 ? 1 : n_cells > n_seq_max ? n_seq_max : (int32_t)n_cells;
    return mamba_memory_create(m->mamba, n_states, n_seq_max, out);
}

/* The common part of struct model from the mamba loader; weight_bytes counts what one token reads. */
static int arch_load(struct model *m, char *why, size_t why_len) {
    int rc = mamba_load(&m->mamba, &m->file, why, why_len);
    if (rc < 0) return rc;
    const struct mamba_model *mm = m->mamba;
    struct model_hparams *hp = &m->hp;
    hp->n_vocab = mm->hp.n_vocab;
    hp->n_embd = mm->hp.n_embd;
    hp->n_layer = mm->hp.n_layer;
    hp->n_ctx_train = mm->hp.n_ctx_train > 0 ? mm->hp.n_ctx_train : 2048;
    hp->rms_eps = mm->hp.rms_eps;
    hp->tied_output = mm->hp.tied_output;
    m->token_embd = mm->token_embd;
    m->output = mm->output;
    m->output_norm = mm->output_norm;
    m->weight_bytes = mm->weight_bytes;
    return 0;
}

static void arch_unload(struct model *m) {
    mamba_free(m->mamba);
    m->mamba = NULL;
}

const struct arch_impl mamba_impl = {
    .ctx_create = arch_ctx_create,
    .ctx_destroy = arch_ctx_destroy,
    .ctx_bytes = arch_ctx_bytes,
    .forward = arch_forward,
    .memory_create = arch_memory_create,
    .memory_counts_states = true,
    .load = arch_load,
    .unload = arch_unload,
};
