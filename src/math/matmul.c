/* matmul.c: struct compute (a pool plus scratch) and the two matmul paths of matmul.h. */
#include "math/matmul.h"
#include "math/kernels.h"
#include "math/pool.h"
#include "math/quant.h"
#include "common/err.h"

#include <cblas.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Weight rows per sgemm tile. A tile is dequantized to F32 by the thread that then multiplies
 * it, so it stays in that core's cache; OpenBLAS repacks the activations per call, which a
 * larger tile amortizes over more rows. */
#define TILE_ROWS 256
/* Rows per work item on the quantized (matvec) path: a few hundred KB of weights, small enough
 * that the threads finish together, large enough that claiming one is free. */
#define VEC_CHUNK_ROWS 32

struct compute {
    struct pool *pool;
    int n_threads;
    int64_t max_tokens, max_n_in;
    enum simd_level level;

    void *xq;            /* quantized activations: vec_tokens rows of xq_stride bytes */
    size_t xq_stride;
    int64_t vec_tokens;  /* rows xq holds: min(max_tokens, MATMUL_BLAS_MIN_TOKENS - 1) */
    float *tiles;        /* n_threads tiles of TILE_ROWS x max_n_in floats (NULL if unused) */
    size_t scratch_bytes;

    _Atomic int64_t next_chunk; /* work claiming within one matmul */
};

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

int compute_create(struct compute **out, int n_threads, int64_t max_tokens, int64_t max_n_in) {
    *out = NULL;
    if (n_threads < 1 || max_tokens < 1 || max_n_in < 1) return -ERR_INVAL;
    struct compute *c = calloc(1, sizeof *c);
    if (!c) return -ERR_NOMEM;
    c->n_threads = n_threads;
    c->max_tokens = max_tokens;
    c->max_n_in = max_n_in;
    c->level = simd_level_best();

    /* The widest activation row is F16 (2 bytes per element); Q8_0/Q8_1/Q8_K take less. */
    c->xq_stride = round_up((size_t)max_n_in * 2, 64);
    c->vec_tokens = max_tokens < MATMUL_BLAS_MIN_TOKENS - 1 ? max_tokens : MATMUL_BLAS_MIN_TOKENS - 1;
    size_t xq_bytes = c->xq_stride * (size_t)c->vec_tokens;
    c->xq = aligned_alloc(64, xq_bytes);
    size_t tile_bytes = 0;
    if (max_tokens >= MATMUL_BLAS_MIN_TOKENS) {
        tile_bytes = round_up((size_t)n_threads * TILE_ROWS * (size_t)max_n_in * sizeof(float), 64);
        c->tiles = aligned_alloc(64, tile_bytes);
    }
    c->scratch_bytes = xq_bytes + tile_bytes;
    int rc = (!c->xq || (tile_bytes && !c->tiles)) ? -ERR_NOMEM : pool_create(&c->pool, n_threads);
    if (rc < 0) {
        compute_destroy(c);
        return rc;
    }
    /* Our threads split the work; each sgemm call runs on the thread that makes it. */
    openblas_set_num_threads(1);
    *out = c;
    return 0;
}

void compute_destroy(struct compute *c) {
    if (!c) return;
    pool_destroy(c->pool);
    free(c->xq);
    free(c->tiles);
    free(c);
}

int compute_n_threads(const struct compute *c) { return c->n_threads; }
size_t compute_scratch_bytes(const struct compute *c) { return c->scratch_bytes; }

/* ---- compute_parallel_for --------------------------------------------------------------- */

struct range_job {
    int64_t n;
    void (*fn)(void *arg, int64_t i0, int64_t i1);
    void *arg;
};

static void range_run(void *job, int ith, int nth) {
    struct range_job *j = job;
    int64_t i0 = j->n * ith / nth, i1 = j->n * (ith + 1) / nth;
    if (i0 < i1) j->fn(j->arg, i0, i1);
}

void compute_parallel_for(struct compute *c, int64_t n,
                          void (*fn)(void *arg, int64_t i0, int64_t i1), void *arg) {
    if (n <= 0) return;
    struct range_job job = {n, fn, arg};
    if (n == 1) range_run(&job, 0, 1);
    else pool_run(c->pool, range_run, &job);
}

/* ---- matmul ----------------------------------------------------------------------------- */

struct matmul_job {
    struct compute *c;
    enum ggml_type wtype, xtype;
    const uint8_t *w;
    size_t w_stride;
    int64_t n_in, n_out, n_tok;
    const float *x;
    float *y;
    const uint8_t *xq; /* activations in xtype (x itself for F32 weights) */
    size_t xq_stride;
    int64_t chunk_rows, n_chunks;
    quant_vec_dot_fn dot;
    quant_to_float_fn to_float;
};

static void quantize_rows(void *job, int ith, int nth) {
    struct matmul_job *j = job;
    for (int64_t t = j->n_tok * ith / nth; t < j->n_tok * (ith + 1) / nth; t++)
        quant_from_float(j->xtype, j->x + t * j->n_in, (uint8_t *)j->xq + t * j->xq_stride, j->n_in);
}

static void vec_rows(void *job, int ith, int nth) {
    struct matmul_job *j = job;
    for (;;) {
        int64_t chunk = atomic_fetch_add_explicit(&j->c->next_chunk, 1, memory_order_relaxed);
        if (chunk >= j->n_chunks) break;
        int64_t r0 = chunk * j->chunk_rows;
        int64_t r1 = r0 + j->chunk_rows < j->n_out ? r0 + j->chunk_rows : j->n_out;
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *wr = j->w + (size_t)r * j->w_stride;
            for (int64_t t = 0; t < j->n_tok; t++)
                j->y[t * j->n_out + r] = j->dot(j->n_in, wr, j->xq + (size_t)t * j->xq_stride);
        }
    }
}

static void sgemm_tiles(void *job, int ith, int nth) {
    struct matmul_job *j = job;
    float *tile = j->c->tiles + (size_t)ith * TILE_ROWS * (size_t)j->c->max_n_in;
    for (;;) {
        int64_t chunk = atomic_fetch_add_explicit(&j->c->next_chunk, 1, memory_order_relaxed);
        if (chunk >= j->n_chunks) break;
        int64_t r0 = chunk * j->chunk_rows;
        int64_t rows = r0 + j->chunk_rows < j->n_out ? j->chunk_rows : j->n_out - r0;
        const float *b;
        if (j->wtype == GGML_TYPE_F32) {
            b = (const float *)(j->w + (size_t)r0 * j->w_stride);
        } else {
            for (int64_t r = 0; r < rows; r++)
                j->to_float(j->w + (size_t)(r0 + r) * j->w_stride, tile + r * j->n_in, j->n_in);
            b = tile;
        }
        /* Y[:, r0:r0+rows] = X (n_tok x n_in) . B^T (B: rows x n_in) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)j->n_tok, (blasint)rows,
                    (blasint)j->n_in, 1.0f, j->x, (blasint)j->n_in, b, (blasint)j->n_in, 0.0f,
                    j->y + r0, (blasint)j->n_out);
    }
}

static int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

void matmul(struct compute *c, enum ggml_type wtype, const void *w, int64_t n_in, int64_t n_out,
            const float *x, int64_t n_tok, float *y) {
    ASSERT(quant_supported(wtype) && n_tok <= c->max_tokens && n_in <= c->max_n_in);
    size_t w_stride = ggml_row_size(wtype, (uint64_t)n_in);
    ASSERT(w_stride > 0);
    if (n_tok <= 0 || n_out <= 0) return;
    struct matmul_job j = {
        .c = c, .wtype = wtype, .xtype = quant_vec_dot_type(wtype), .w = w, .w_stride = w_stride,
        .n_in = n_in, .n_out = n_out, .n_tok = n_tok, .x = x, .y = y,
    };
    atomic_store_explicit(&c->next_chunk, 0, memory_order_relaxed);
    if (n_tok >= MATMUL_BLAS_MIN_TOKENS) {
        j.to_float = quant_get_to_float(c->level, wtype);
        /* Full tiles, but at least two per thread so a slow thread does not hold up the rest. */
        int64_t per = div_up(n_out, 2 * (int64_t)c->n_threads);
        j.chunk_rows = per < TILE_ROWS ? per : TILE_ROWS;
        j.n_chunks = div_up(n_out, j.chunk_rows);
        pool_run(c->pool, sgemm_tiles, &j);
        return;
    }
    j.dot = quant_get_vec_dot(c->level, wtype);
    if (j.xtype == GGML_TYPE_F32) {
        j.xq = (const uint8_t *)x;
        j.xq_stride = (size_t)n_in * sizeof(float);
    } else {
        j.xq = c->xq;
        j.xq_stride = c->xq_stride;
        if (n_tok * n_in >= 8192) pool_run(c->pool, quantize_rows, &j);
        else quantize_rows(&j, 0, 1);
    }
    j.chunk_rows = VEC_CHUNK_ROWS;
    j.n_chunks = div_up(n_out, j.chunk_rows);
    pool_run(c->pool, vec_rows, &j);
}
