/* matmul.c: struct compute (a pool plus scratch) and the two matmul paths of matmul.h. */
#include "math/matmul.h"
#include "math/gemm_q8.h"
#include "math/kernels.h"
#include "math/pool.h"
#include "math/q8x16.h"
#include "math/quant.h"
#include "common/err.h"

#include <cblas.h>
#include <stdatomic.h>
#include <stdlib.h>

/* sgemm tiles: each thread dequantizes a tile of weight rows to F32 and multiplies it. Every
 * sgemm call repacks all the activations (512 x 2048 floats = 4 MB), so a tile should hold many
 * rows (scripts/bench.d/30-kernels prints the pp512 GFLOPS of each type). The tile buffer of a
 * thread is TILE_BYTES (fewer rows for long rows), its rows at most TILE_MAX_ROWS and at least
 * TILE_MIN_ROWS. */
#define TILE_BYTES ((size_t)8 << 20)
#define TILE_MAX_ROWS 512
#define TILE_MIN_ROWS 64
/* Rows per work item on the quantized (matvec) path: a few hundred KB of weights, small enough
 * that the threads finish together, large enough that claiming one is free. */
#define VEC_CHUNK_ROWS 32
/* Rows per work item of a decode step on q8x16.h's layouts: claiming an item is a locked
 * instruction, which waits for the loads in flight (the prefetches of the item before), so
 * fewer, larger items stream faster (build/bench/forward_bench bench-models/smollm2-135m-q4_k_m.gguf
 * --rows 1 --threads 2 prints the step time). */
#define X16_CHUNK_ROWS 128
/* Tokens per pass over a chunk of rows with the 4-token kernels (a multiple of QUANT_DOT_ROWS):
 * 32 tokens of Q8_K activations are 200 KB for 5632 inputs. */
#define VEC_TOKEN_BLOCK 32
/* Q6_K rows longer than this take the one-row kernel, not the multi-row one (see vec_kernels). */
#define VEC_Q6_K_DOTR_MAX_STRIDE 1024
/* Rows per work item of the Q8_0 integer GEMM (gemm_q8.h): with 32 tokens' packed activations
 * (64 KB per 1024 inputs) they stay in L2 together. */
#define GEMM_CHUNK_ROWS 64
/* Q4_0 / Q5_0 batches of at least this many tokens (and fewer than MATMUL_BLAS_MIN_TOKENS) take
 * the Q8_0 GEMM, their rows rewritten as Q8_0 chunk by chunk (gemm_q8_0_from_q45; the same
 * numbers): the rewriting costs about what 4 tokens of the GEMM do, so from a few more tokens
 * on the GEMM wins (build/bench/kernels --small-batch --type q5_0 --threads 1). */
#define GEMM_Q45_MIN_TOKENS 6
/* Token pairs per work item when quantizing and packing activations for it. */
#define PACK_CHUNK_PAIRS 16
/* Activations of at most this many elements (n_tok x n_in) are quantized and packed for the
 * GEMM by the calling thread alone: 16 tokens of 2048 take a few microseconds, about what a
 * dispatch to the pool and its barrier cost. */
#define PACK_SERIAL_MAX_ELEMS (16 * 2048)

struct compute {
    struct pool *pool;
    int n_threads;
    int64_t max_tokens, max_n_in;
    enum simd_level level;

    void *xq;            /* quantized activations: max_tokens rows of xq_stride bytes */
    size_t xq_stride;
    float *xr;           /* sgemm path: activations rounded through xq, max_tokens x max_n_in
                          * (NULL if max_tokens is small) */
    float *tiles;        /* n_threads tiles of tile_floats floats (NULL if max_tokens is small) */
    uint8_t *packed;     /* Q8_0 GEMM: packed activations (NULL if max_tokens is small or no AVX-512) */
    struct q8x16_act *acts16; /* Q8_0_X16 / Q5_0_X16 weights: activations as q8x16.h's blocks (NULL without AVX-512) */
    void *acts_amx;      /* with compute_amx(): the activations in the AMX kernels' tiles (q8x16.h's *_amx_put; NULL otherwise) */
    uint8_t *amx_scratch; /* with acts_amx: n_threads scratches of amx_scratch_bytes for the AMX kernels */
    size_t amx_scratch_bytes;
    size_t tile_floats;
    size_t scratch_bytes;
};

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
static int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Work items of a matrix of n_out rows as whole units of `unit` rows (the GEMM's 4-row tiles,
 * the x16 layouts' 16-row groups): about `rows` rows each, a multiple of the thread count so
 * that the parts start even, at most one per unit (none for no rows). */
static int64_t even_chunks(int64_t n_out, int64_t unit, int64_t rows, int n_threads) {
    int64_t n = div_up(div_up(n_out, rows), n_threads) * n_threads, units = div_up(n_out, unit);
    return n < units ? n : units;
}

/* Rows [r0, r1) of item k of such a split into n items: the units shared out as evenly as n allows. */
static void even_chunk_rows(int64_t n_out, int64_t unit, int64_t n, int64_t k, int64_t *r0, int64_t *r1) {
    int64_t units = div_up(n_out, unit);
    *r0 = unit * (units * k / n);
    *r1 = unit * (units * (k + 1) / n) < n_out ? unit * (units * (k + 1) / n) : n_out;
}

/* The serving layouts of q8x16.h: their kernel (NULL for the GGUF types). */
typedef void (*x16_rows_fn)(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1,
                            const struct q8x16_act *acts, int64_t n_tok, float *y);
static x16_rows_fn x16_kernel(enum ggml_type t) {
    return t == UVLM_TYPE_Q8_0_X16 ? q8x16_rows : t == UVLM_TYPE_Q5_0_X16 ? q5x16_rows : NULL;
}
/* The K-quant layouts of q8x16.h: their vector kernel on the Q8_K activations as they are, and
 * their AMX kernel, which also reads the activations' tiles (NULL otherwise). */
typedef void (*kx16_rows_fn)(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const void *xq,
                             size_t xq_stride, int64_t n_tok, float *y);
typedef void (*kx16_amx_fn)(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const void *xq,
                            size_t xq_stride, const void *amx, void *scratch, int64_t n_tok, float *y);
static kx16_rows_fn kx16_kernel(enum ggml_type t) {
    return t == UVLM_TYPE_Q4_K_X16 ? q4kx16_rows : t == UVLM_TYPE_Q6_K_X16 ? q6kx16_rows : NULL;
}
static kx16_amx_fn kx16_amx_kernel(enum ggml_type t) {
    return t == UVLM_TYPE_Q4_K_X16 ? q4kx16_rows_amx : t == UVLM_TYPE_Q6_K_X16 ? q6kx16_rows_amx : NULL;
}
static int64_t kx16_amx_min_tokens(enum ggml_type t) {
    return t == UVLM_TYPE_Q4_K_X16 ? Q4KX16_AMX_MIN_TOKENS : Q6KX16_AMX_MIN_TOKENS;
}
/* Any of q8x16.h's layouts. */
static bool is_kx16(enum ggml_type t) { return t == UVLM_TYPE_Q4_K_X16 || t == UVLM_TYPE_Q6_K_X16; }
static bool is_x16(enum ggml_type t) { return x16_kernel(t) || is_kx16(t); }
static enum ggml_type x16_xtype(enum ggml_type t) { return is_kx16(t) ? GGML_TYPE_Q8_K : GGML_TYPE_Q8_0; }

/* Weight types the Q8_0 GEMM runs after rewriting their rows as Q8_0. */
static bool gemm_q45(enum ggml_type t) { return t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q5_0; }

bool compute_amx(void) { return !getenv("UVLM_NO_AMX") && q8x16_amx_enable(); /* UVLM_NO_AMX: the vector kernels only */ }

size_t compute_amx_bytes(int n_threads, int64_t max_tokens, int64_t max_n_in) {
    return max_tokens >= 16 ? round_up(Q8X16_AMX_ACT_BYTES(max_tokens, max_n_in), 64) +
                                  (size_t)n_threads * round_up(Q8X16_AMX_SCRATCH_BYTES(max_n_in), 64)
                            : 0;
}

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
    size_t xq_bytes = c->xq_stride * (size_t)max_tokens;
    c->xq = aligned_alloc(64, xq_bytes);
    size_t tile_bytes = 0, xr_bytes = 0;
    if (max_tokens >= MATMUL_BLAS_MIN_TOKENS) {
        xr_bytes = round_up((size_t)max_tokens * (size_t)max_n_in * sizeof(float), 64);
        c->xr = aligned_alloc(64, xr_bytes);
        size_t rows = TILE_BYTES / sizeof(float) / (size_t)max_n_in;
        rows = rows < TILE_MIN_ROWS ? TILE_MIN_ROWS : rows > TILE_MAX_ROWS ? TILE_MAX_ROWS : rows;
        c->tile_floats = round_up(rows * (size_t)max_n_in, 16);
        tile_bytes = (size_t)n_threads * c->tile_floats * sizeof(float);
        c->tiles = aligned_alloc(64, tile_bytes);
    }
    size_t packed_bytes = 0;
    if (max_tokens >= MATMUL_BLAS_MIN_TOKENS && gemm_q8_0_supported()) {
        packed_bytes = round_up(GEMM_Q8_0_PACKED_BYTES(max_tokens, max_n_in), 64);
        c->packed = aligned_alloc(64, packed_bytes);
    }
    size_t acts16_bytes = 0, amx_bytes = 0, amx_scratch_bytes = 0;
    if (q8x16_supported()) {
        acts16_bytes = round_up(Q8X16_ACT_BYTES(max_tokens, max_n_in), 64);
        c->acts16 = aligned_alloc(64, acts16_bytes);
        if (compute_amx() && max_tokens >= 16) {
            amx_bytes = round_up(Q8X16_AMX_ACT_BYTES(max_tokens, max_n_in), 64);
            c->acts_amx = aligned_alloc(64, amx_bytes);
            c->amx_scratch_bytes = round_up(Q8X16_AMX_SCRATCH_BYTES(max_n_in), 64);
            amx_scratch_bytes = (size_t)n_threads * c->amx_scratch_bytes;
            c->amx_scratch = aligned_alloc(64, amx_scratch_bytes);
            ASSERT(amx_bytes + amx_scratch_bytes == compute_amx_bytes(n_threads, max_tokens, max_n_in));
        }
    }
    c->scratch_bytes = xq_bytes + tile_bytes + xr_bytes + packed_bytes + acts16_bytes + amx_bytes + amx_scratch_bytes;
    int rc = (!c->xq || (tile_bytes && (!c->tiles || !c->xr)) || (packed_bytes && !c->packed) ||
              (acts16_bytes && !c->acts16) || (amx_bytes && (!c->acts_amx || !c->amx_scratch)))
                 ? -ERR_NOMEM : pool_create(&c->pool, n_threads);
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
    free(c->xr);
    free(c->tiles);
    free(c->packed);
    free(c->acts16);
    free(c->acts_amx);
    free(c->amx_scratch);
    free(c);
}

int compute_n_threads(const struct compute *c) { return c->n_threads; }
size_t compute_scratch_bytes(const struct compute *c) { return c->scratch_bytes; }

/* ---- compute_parallel_for --------------------------------------------------------------- */

struct range_job {
    int64_t n;
    int n_ranges;
    _Atomic int next; /* the next range to hand out */
    void (*fn)(void *arg, int64_t i0, int64_t i1);
    void *arg;
};

static void range_run(void *job) {
    struct range_job *j = job;
    for (int r; (r = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_ranges;) {
        int64_t i0 = j->n * r / j->n_ranges, i1 = j->n * (r + 1) / j->n_ranges;
        if (i0 < i1) j->fn(j->arg, i0, i1);
    }
}

void compute_set_yield_us(struct compute *c, int64_t us) { pool_set_yield_ns(c->pool, us * 1000); }

void compute_parallel_for(struct compute *c, int64_t n,
                          void (*fn)(void *arg, int64_t i0, int64_t i1), void *arg) {
    if (n <= 0) return;
    struct range_job job = {.n = n, .n_ranges = n < c->n_threads ? (int)n : c->n_threads, .fn = fn, .arg = arg};
    (job.n_ranges == 1 ? pool_run_alone : pool_run)(c->pool, range_run, &job);
}

void compute_parallel_for_work(struct compute *c, int64_t n, int64_t work,
                               void (*fn)(void *arg, int64_t i0, int64_t i1), void *arg) {
    if (n * work < COMPUTE_SHARE_WORK) fn(arg, 0, n);
    else compute_parallel_for(c, n, fn, arg);
}

/* ---- matmul ----------------------------------------------------------------------------- */

/* The vector path splits the rows into one contiguous part per thread (MAX_PARTS at most), each
 * handed out in chunks by a counter of its own line: a thread streams through its own region
 * first (the hardware prefetcher follows one stream; small chunks of two threads interleaved
 * across the matrix stream slower), then helps with the chunks left in the others. */
#define MAX_PARTS 16
struct part_counter {
    _Alignas(64) _Atomic int64_t next; /* the part's next chunk (absolute index) */
    int64_t end;                       /* its end */
};

/* One matrix of a matmul_multi (or of a plain matmul: one of them). */
struct mat_desc {
    const uint8_t *w;
    int64_t n_out;
    float *y;
    int64_t chunk0;     /* its first chunk in the job's chunk numbering */
    int64_t chunk_rows; /* vector path: rows per chunk, or 0: its chunks split its 16-row groups evenly */
    /* vector path: this matrix's row bytes and kernels (vec_kernels; matrices of different
     * types can share a job when their activations are of one type) */
    size_t w_stride;
    quant_vec_dot_fn dot;
    quant_vec_dot4_fn dot4;
    quant_vec_dotr_fn dotr;
    x16_rows_fn x16; /* Q8_0_X16 / Q5_0_X16: q8x16.h's kernel on c->acts16 instead of the kernels above */
    bool x16_amx;    /* Q8_0_X16: q8x16_rows_amx on c->acts16 and c->acts_amx instead */
    kx16_rows_fn kx16; /* Q4_K_X16 / Q6_K_X16: q8x16.h's kernel on the job's xq instead */
    kx16_amx_fn kx16_amx; /* with AMX, from its kernel's threshold: that kernel on the job's xq and c->acts_amx instead */
};

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
    _Atomic int tile_slot; /* tile buffers (sgemm path) or AMX scratches (vector path) handed out so far */
    _Atomic int64_t next; /* the next work item (token row or chunk of weight rows) to hand out */
    quant_vec_dot_fn dot;
    quant_vec_dot4_fn dot4; /* NULL when the type has no 4-token kernel */
    quant_vec_dotr_fn dotr; /* NULL when the type has no multi-row kernel or dot4 takes the tokens */
    quant_vec_dot_fn dot_grouped; /* MATMUL_REFERENCE: the dot of tokens in whole groups of four, or NULL */
    quant_to_float_fn to_float;
    bool x16_acts; /* quantize_rows also writes c->acts16 (a matrix of the job is in a q8x16.h layout) */
    bool amx_acts; /* and c->acts_amx (a Q8_0_X16 matrix takes q8x16_rows_amx) */
    bool k4_amx_acts, k6_amx_acts; /* quantize_rows writes c->acts_amx for q4kx16_rows_amx, q6kx16_rows_amx */
    /* vector path: the matrices sharing the job (same n_in and activation type, each with its
     * own kernels: mat_desc), their rows numbered one after the other in chunks that never
     * straddle two, and the parts */
    int n_mats;
    struct mat_desc mats[MATMUL_MULTI_MAX];
    int n_parts;
    _Atomic int part_slot; /* parts handed out to joining threads */
    struct part_counter parts[MAX_PARTS];
};

static void quantize_rows(void *job) {
    struct matmul_job *j = job;
    for (int64_t t; (t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_tok;) {
        uint8_t *xq = (uint8_t *)j->xq + t * j->xq_stride;
        quant_from_float(j->xtype, j->x + t * j->n_in, xq, j->n_in);
        if (j->x16_acts) {
            struct q8x16_act *acts = j->c->acts16 + t * (j->n_in / 32);
            q8x16_pack_acts(xq, j->xq_stride, 1, j->n_in, acts);
            if (j->amx_acts && t < j->n_tok / 16 * 16) q8x16_amx_put(acts, t, j->n_in, j->c->acts_amx);
        }
        if (j->k4_amx_acts && t < j->n_tok / 16 * 16) q4kx16_amx_put(xq, t, j->n_in, j->c->acts_amx);
        if (j->k6_amx_acts && t < j->n_tok / 16 * 16) q6kx16_amx_put(xq, t, j->n_in, j->c->acts_amx);
    }
}

/* xr rows = the xq rows back in F32: the activations exactly as the vector path sees them. */
static void round_rows(void *job) {
    struct matmul_job *j = job;
    quant_to_float_fn to_float = quant_get_to_float(j->c->level, j->xtype);
    for (int64_t t; (t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_tok;)
        to_float(j->xq + t * j->xq_stride, j->c->xr + t * j->n_in, j->n_in);
}

/* Activations to xtype in xq (all n_tok rows), on the pool when there is enough work. */
static void quantize_all(struct matmul_job *j) {
    j->xq = j->c->xq;
    j->xq_stride = j->c->xq_stride;
    if (j->n_tok * j->n_in >= 8192) pool_run(j->c->pool, quantize_rows, j);
    else quantize_rows(j);
    atomic_store_explicit(&j->next, 0, memory_order_relaxed);
}

/* Rows [r0, r1) of one matrix m (weights w, outputs y, n_out rows) on the vector kernels
 * (amx_scratch: the calling thread's, for the AMX kernels). */
static void vec_chunk(const struct matmul_job *j, const struct mat_desc *d, int64_t r0, int64_t r1, void *amx_scratch) {
    if (d->x16_amx) {
        q8x16_rows_amx(j->n_in, d->n_out, d->w, r0, r1, j->c->acts16, j->c->acts_amx, amx_scratch, j->n_tok, d->y);
        return;
    }
    if (d->x16) {
        d->x16(j->n_in, d->n_out, d->w, r0, r1, j->c->acts16, j->n_tok, d->y);
        return;
    }
    if (d->kx16_amx) {
        d->kx16_amx(j->n_in, d->n_out, d->w, r0, r1, j->xq, j->xq_stride, j->c->acts_amx, amx_scratch, j->n_tok, d->y);
        return;
    }
    if (d->kx16) {
        d->kx16(j->n_in, d->n_out, d->w, r0, r1, j->xq, j->xq_stride, j->n_tok, d->y);
        return;
    }
    const uint8_t *w = d->w;
    float *y = d->y;
    const int64_t n_out = d->n_out;
    const size_t w_stride = d->w_stride;
    /* With the 4-token kernel, tokens in blocks: the chunk's rows and a block's activations stay
     * in L2 together (a prompt's whole activations would be re-read from L3 per row). */
    const int64_t tb = d->dot4 ? VEC_TOKEN_BLOCK : j->n_tok;
    for (int64_t t0 = 0; t0 < j->n_tok; t0 += tb) {
        const int64_t t1 = t0 + tb < j->n_tok ? t0 + tb : j->n_tok;
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *wr = w + (size_t)r * w_stride;
            if (d->dotr && r + QUANT_DOT_WROWS <= r1) {
                /* few tokens: several weight rows per pass share each activation load */
                for (int64_t t = t0; t < t1; t++) {
                    float out[QUANT_DOT_WROWS];
                    d->dotr(j->n_in, wr, w_stride, j->xq + (size_t)t * j->xq_stride, out);
                    for (int k = 0; k < QUANT_DOT_WROWS; k++) y[t * n_out + r + k] = out[k];
                }
                r += QUANT_DOT_WROWS - 1;
                continue;
            }
            int64_t t = t0;
            if (d->dot4) /* decode the weight row once for four tokens */
                for (; t + QUANT_DOT_ROWS <= t1; t += QUANT_DOT_ROWS) {
                    float out[QUANT_DOT_ROWS];
                    d->dot4(j->n_in, wr, j->xq + (size_t)t * j->xq_stride, j->xq_stride, out);
                    for (int k = 0; k < QUANT_DOT_ROWS; k++) y[(t + k) * n_out + r] = out[k];
                }
            if (j->dot_grouped) /* no dot4 here: one block of all tokens */
                for (; t < t1 - t1 % 4; t++)
                    y[t * n_out + r] = j->dot_grouped(j->n_in, wr, j->xq + (size_t)t * j->xq_stride);
            for (; t < t1; t++) y[t * n_out + r] = d->dot(j->n_in, wr, j->xq + (size_t)t * j->xq_stride);
        }
    }
}

/* The matrix holding work item `chunk` (mats[m] holds items [its chunk0, the next one's)), the
 * item's index *k in it and the matrix's item count *n. */
static int chunk_mat(const struct matmul_job *j, int64_t chunk, int64_t *k, int64_t *n) {
    int m = 0;
    while (m + 1 < j->n_mats && chunk >= j->mats[m + 1].chunk0) m++;
    *k = chunk - j->mats[m].chunk0;
    *n = (m + 1 < j->n_mats ? j->mats[m + 1].chunk0 : j->n_chunks) - j->mats[m].chunk0;
    return m;
}

static void vec_run_chunk(const struct matmul_job *j, int64_t chunk, void *amx_scratch) {
    int64_t k, n, r0, r1;
    const struct mat_desc *d = &j->mats[chunk_mat(j, chunk, &k, &n)];
    if (d->chunk_rows) {
        r0 = k * d->chunk_rows;
        r1 = r0 + d->chunk_rows < d->n_out ? r0 + d->chunk_rows : d->n_out;
    } else {
        even_chunk_rows(d->n_out, Q8X16_ROWS, n, k, &r0, &r1);
    }
    vec_chunk(j, d, r0, r1, amx_scratch);
}

static void vec_rows(void *job) {
    struct matmul_job *j = job;
    /* Each joining thread takes a part of its own (if any is left), then sweeps all parts for
     * chunks nobody has claimed yet, starting with its own. */
    int first = atomic_fetch_add_explicit(&j->part_slot, 1, memory_order_relaxed);
    if (first >= j->n_parts) first = 0;
    void *amx_scratch = NULL; /* this thread's, when a matrix takes an AMX kernel */
    if (j->amx_acts || j->k4_amx_acts || j->k6_amx_acts) {
        int slot = atomic_fetch_add_explicit(&j->tile_slot, 1, memory_order_relaxed);
        ASSERT(slot < j->c->n_threads);
        amx_scratch = j->c->amx_scratch + (size_t)slot * j->c->amx_scratch_bytes;
    }
    for (int k = 0; k < j->n_parts; k++) {
        struct part_counter *pc = &j->parts[(first + k) % j->n_parts];
        for (int64_t chunk; (chunk = atomic_fetch_add_explicit(&pc->next, 1, memory_order_relaxed)) < pc->end;)
            vec_run_chunk(j, chunk, amx_scratch);
    }
}

/* Tokens [t0, t1) (t0 even) quantized to Q8_0 in xq and packed for the GEMM. */
static void quantize_pack(const struct matmul_job *j, int64_t t0, int64_t t1) {
    uint8_t *xq = (uint8_t *)j->c->xq;
    for (int64_t t = t0; t < t1; t++)
        quant_from_float(GGML_TYPE_Q8_0, j->x + t * j->n_in, xq + (size_t)t * j->c->xq_stride, j->n_in);
    gemm_q8_0_pack(xq + (size_t)t0 * j->c->xq_stride, j->c->xq_stride, t1 - t0, j->n_in,
                   j->c->packed + GEMM_Q8_0_PACKED_BYTES(t0, j->n_in));
}

static void pack_pairs(void *job) {
    struct matmul_job *j = job;
    int64_t n_pairs = (j->n_tok + 1) / 2;
    for (int64_t k; (k = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) * PACK_CHUNK_PAIRS < n_pairs;) {
        int64_t t0 = 2 * k * PACK_CHUNK_PAIRS, t1 = t0 + 2 * PACK_CHUNK_PAIRS < j->n_tok ? t0 + 2 * PACK_CHUNK_PAIRS : j->n_tok;
        quantize_pack(j, t0, t1);
    }
}

/* The GEMM's work items: chunk k of matrix m covers rows [r0, r1), a run of whole 4-row tiles
 * (the matrix's tiles split as evenly as its chunk count allows). */
static void gemm_chunk_rows(const struct matmul_job *j, int64_t chunk, int *m_out, int64_t *r0, int64_t *r1) {
    int64_t k, n;
    *m_out = chunk_mat(j, chunk, &k, &n);
    even_chunk_rows(j->mats[*m_out].n_out, 4, n, k, r0, r1);
}

/* The integer GEMMs' row chunks (Q8_0: gemm_q8.h on the packed activations; AVX-512 Q4_K with
 * 4+ tokens: the 4 x 4 tiles of kquant_gemm_q4_K_rows, every output exactly the vector path's,
 * MATMUL_REFERENCE's grouped order with dot_grouped). As vec_rows: a contiguous part of the
 * chunks per thread first (one memory stream each, faster than chunks handed out in turn), then
 * the chunks left in the others. */
static void tile_rows(void *job) {
    struct matmul_job *j = job;
    float *scratch = NULL; /* this thread's tile buffer (Q4_0 / Q5_0 rows as Q8_0) */
    int first = atomic_fetch_add_explicit(&j->part_slot, 1, memory_order_relaxed);
    if (first >= j->n_parts) first = 0;
    for (int k = 0; k < j->n_parts; k++) {
        struct part_counter *pc = &j->parts[(first + k) % j->n_parts];
        for (int64_t chunk; (chunk = atomic_fetch_add_explicit(&pc->next, 1, memory_order_relaxed)) < pc->end;) {
            int m;
            int64_t r0, r1;
            gemm_chunk_rows(j, chunk, &m, &r0, &r1);
            const struct mat_desc *d = &j->mats[m];
            if (r0 >= r1) continue;
            if (j->wtype == GGML_TYPE_Q8_0) {
                gemm_q8_0_rows(j->n_in, d->w, j->w_stride, r0, r1, j->c->packed, j->n_tok, d->y, d->n_out);
            } else if (j->wtype != GGML_TYPE_Q4_K) { /* Q4_0, Q5_0: the chunk as Q8_0 first */
                if (!scratch) {
                    int slot = atomic_fetch_add_explicit(&j->tile_slot, 1, memory_order_relaxed);
                    ASSERT(slot < j->c->n_threads);
                    scratch = j->c->tiles + (size_t)slot * j->c->tile_floats;
                }
                gemm_q8_0_from_q45(j->wtype, j->n_in, d->w + (size_t)r0 * j->w_stride, j->w_stride, r1 - r0, scratch);
                gemm_q8_0_rows(j->n_in, scratch, ggml_row_size(GGML_TYPE_Q8_0, (uint64_t)j->n_in), 0, r1 - r0,
                               j->c->packed, j->n_tok, d->y + r0, d->n_out);
            } else {
                kquant_gemm_q4_K_rows(j->n_in, d->w, j->w_stride, r0, r1, j->xq, j->xq_stride, j->n_tok, d->y,
                                      d->n_out, j->dot_grouped != NULL);
            }
        }
    }
}

/* The parts of chunks [0, n_chunks): one contiguous run per thread (MAX_PARTS at most). */
static void set_parts(struct compute *c, struct matmul_job *j) {
    int parts = c->n_threads < MAX_PARTS ? c->n_threads : MAX_PARTS;
    if (parts > j->n_chunks) parts = (int)j->n_chunks;
    j->n_parts = parts;
    for (int p = 0; p < parts; p++) {
        atomic_store_explicit(&j->parts[p].next, j->n_chunks * p / parts, memory_order_relaxed);
        j->parts[p].end = j->n_chunks * (p + 1) / parts;
    }
}

static void sgemm_tiles(void *job) {
    struct matmul_job *j = job;
    /* Each thread that joins takes a tile buffer of its own. */
    int slot = atomic_fetch_add_explicit(&j->tile_slot, 1, memory_order_relaxed);
    ASSERT(slot < j->c->n_threads);
    float *tile = j->c->tiles + (size_t)slot * j->c->tile_floats;
    for (;;) {
        int64_t chunk = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
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

/* Whether prompts (n_tok >= MATMUL_BLAS_MIN_TOKENS) of wtype take the vector path instead of
 * dequantize + sgemm: AVX-512 Q4_K and Q6_K, whose integer kernels give every token its
 * single-token numbers (the reference's GEMV orders) at any batch size. Q4_K's 4 x 4 tiles
 * (kquant_gemm_q4_K_rows) are also faster than sgemm (scripts/bench.d/30-kernels: pp512
 * GFLOPS). Q6_K's 4-token kernel is slower than sgemm, but Q6_K is a small share of a Q4_K_M
 * model (attn_v, half of ffn_down, the output), and its single-token numbers keep the serving
 * path's logits within the golden tests' bar with a margin (build/test-runner
 * golden_llama_spm_q4_k_m_serving prints the worst error). Q2_K, Q3_K and IQ4_XS on their
 * 4-token kernels (lowbit_avx512.c) are as fast as sgemm or faster and give the reference's
 * numbers; IQ4_NL's is slower than sgemm and stays there (`build/bench/kernels --prompt-paths`
 * prints both paths per type). */
static bool matmul_vec_prompts(enum simd_level level, enum ggml_type wtype) {
    return level == SIMD_AVX512 && (wtype == GGML_TYPE_Q4_K || wtype == GGML_TYPE_Q6_K || wtype == GGML_TYPE_Q2_K ||
                                    wtype == GGML_TYPE_Q3_K || wtype == GGML_TYPE_IQ4_XS);
}

/* Run tile_rows over the matrices j->mats[0, n_mats) (same n_in, one input, activations ready):
 * one dispatch for all (a decode step's Q/K/V and gate/up: fewer barriers), in contiguous parts
 * per thread. Each matrix is cut into a multiple of the thread count of chunks of whole 4-row
 * tiles, at most GEMM_CHUNK_ROWS rows each (576 rows in 9 chunks of 64 would give one of 2
 * threads a chunk more). */
static void tiles_dispatch(struct compute *c, struct matmul_job *j) {
    j->n_chunks = 0;
    for (int m = 0; m < j->n_mats; m++) {
        j->mats[m].chunk0 = j->n_chunks;
        j->n_chunks += even_chunks(j->mats[m].n_out, 4, GEMM_CHUNK_ROWS, c->n_threads);
    }
    set_parts(c, j);
    (j->n_parts <= 1 ? pool_run_alone : pool_run)(c->pool, tile_rows, j);
}

/* The Q8_0 GEMM (Q4_0 / Q5_0 weights: rewritten as Q8_0 chunk by chunk): the activations
 * quantized and packed once (by this thread alone when they are few), then tiles_dispatch. */
static void gemm_q8_dispatch(struct compute *c, struct matmul_job *j) {
    ASSERT(c->packed && (j->wtype == GGML_TYPE_Q8_0 || (c->tiles && gemm_q45(j->wtype))));
    if (j->n_tok * j->n_in <= PACK_SERIAL_MAX_ELEMS || c->n_threads == 1) {
        quantize_pack(j, 0, j->n_tok);
    } else {
        pool_run(c->pool, pack_pairs, j);
        atomic_store_explicit(&j->next, 0, memory_order_relaxed);
    }
    tiles_dispatch(c, j);
}

/* The path matmul takes for MATMUL_AUTO (matmul_multi asks it too, so the two cannot drift). */
static enum matmul_path auto_path(const struct compute *c, enum ggml_type wtype, int64_t n_tok) {
    if (wtype == GGML_TYPE_Q8_0 && c->packed && n_tok >= MATMUL_GEMM_Q8_MIN_TOKENS) return MATMUL_GEMM_Q8;
    if (gemm_q45(wtype) && c->packed && c->tiles && n_tok >= GEMM_Q45_MIN_TOKENS && n_tok < MATMUL_BLAS_MIN_TOKENS)
        return MATMUL_GEMM_Q8;
    return n_tok < MATMUL_BLAS_MIN_TOKENS || matmul_vec_prompts(c->level, wtype) ? MATMUL_VEC : MATMUL_BLAS;
}

/* Whether the vector path runs Q4_K on the 4 x 4 tiles of kquant_gemm_q4_K_rows (same numbers). */
static bool q4_K_tiles(const struct compute *c, enum ggml_type wtype, int64_t n_tok) {
    return wtype == GGML_TYPE_Q4_K && c->level == SIMD_AVX512 && n_tok >= QUANT_DOT_ROWS;
}

/* The vector path's kernels for the job's type and token count (MATMUL_VEC or MATMUL_REFERENCE). */
static void vec_kernels(struct matmul_job *j, enum matmul_path path) {
    enum ggml_type wtype = j->wtype;
    if (path == MATMUL_REFERENCE) {
        j->dot = quant_get_vec_dot(SIMD_SCALAR, wtype);
        if (wtype == GGML_TYPE_F16 && j->n_tok >= 2)
            j->dot = j->c->level == SIMD_AVX512 ? quant_dot_f16_tinyblas_avx512 : quant_dot_f16_tinyblas;
        if (wtype == GGML_TYPE_Q4_0) j->dot = quant_dot_q4_0_reference;
        if (wtype == GGML_TYPE_Q4_K) j->dot_grouped = quant_dot_q4_K_gemm;
        if (wtype == GGML_TYPE_Q2_K) j->dot_grouped = quant_dot_q2_K_gemm;
        /* AVX-512's Q4_K and Q6_K kernels give the scalar ones' numbers (kquant_avx512.c), and
         * the Q4_K GEMM (matmul_path) the grouped order too: the reference's numbers at SIMD speed. */
        if (j->c->level == SIMD_AVX512 && (wtype == GGML_TYPE_Q4_K || wtype == GGML_TYPE_Q6_K)) {
            j->dot = quant_get_vec_dot(j->c->level, wtype);
            if (wtype == GGML_TYPE_Q6_K) j->dot4 = quant_get_vec_dot4(j->c->level, wtype);
            j->dotr = j->n_tok < QUANT_DOT_ROWS ? quant_get_vec_dotr(j->c->level, wtype) : NULL;
        }
        /* So do the low-bit types' kernels at every level (lowbit.c); Q2_K's grouped tokens
         * take dot_grouped, not its 4-token kernel (the single-token order). */
        if (wtype == GGML_TYPE_Q2_K || wtype == GGML_TYPE_Q3_K || wtype == GGML_TYPE_IQ4_NL || wtype == GGML_TYPE_IQ4_XS) {
            j->dot = quant_get_vec_dot(j->c->level, wtype);
            j->dot4 = wtype == GGML_TYPE_Q2_K ? NULL : quant_get_vec_dot4(j->c->level, wtype);
            j->dotr = j->n_tok < QUANT_DOT_ROWS ? quant_get_vec_dotr(j->c->level, wtype) : NULL;
        }
        return;
    }
    j->dot = quant_get_vec_dot(j->c->level, wtype);
    j->dot4 = quant_get_vec_dot4(j->c->level, wtype);
    j->dotr = quant_get_vec_dotr(j->c->level, wtype);
    /* Q8_0 rows of any length take the multi-row kernel: with four row groups fetched ahead
     * (quant_avx512.c) long rows stream grouped at least as fast as one at a time
     * (build/bench/forward_bench bench-models/tinyllama-1.1b-q8_0.gguf --rows 1 --threads 1).
     * Q4_0/Q5_0's one-row kernels compute at half of memory speed: always grouped. */
    /* Q6_K: rows longer than 1 KB stream faster one at a time; Q4_K's four rows stream faster
     * than its one-row kernel (build/bench/kernels --small-batch --type q6_k / q4_k --threads 1). */
    if (wtype == GGML_TYPE_Q6_K && j->w_stride > VEC_Q6_K_DOTR_MAX_STRIDE) j->dotr = NULL;
    /* enough tokens for the 4-token kernel: it decodes each weight row once for four */
    if (j->dot4 && j->n_tok >= QUANT_DOT_ROWS) j->dotr = NULL;
}

/* Run the vector path's chunks [0, n_chunks) of j (chunk_rows, mats set) on the pool: one
 * contiguous part per thread (see struct part_counter). */
static void vec_dispatch(struct compute *c, struct matmul_job *j) {
    set_parts(c, j);
    (j->n_parts <= 1 ? pool_run_alone : pool_run)(c->pool, vec_rows, j);
}

/* The vector path's shared dispatch of the matrices mats[0, n_mats), mats[m] of types[m] (one
 * n_in; one activation type, j->xtype, set by the caller with c, n_in, n_tok and x): x quantized
 * once, each matrix on the kernels matmul would give it (vec_kernels per type; the x16 types:
 * q8x16.h's), one dispatch in contiguous parts per thread. Prompts in those layouts (the only
 * matrices shared from MATMUL_BLAS_MIN_TOKENS tokens on) take GEMM_CHUNK_ROWS rows per chunk:
 * each chunk reads all the activations, as the Q8_0 GEMM's do; their decode steps a multiple of
 * the thread count of chunks of about X16_CHUNK_ROWS rows, whole 16-row groups each (576 rows
 * in 5 chunks of 128 would leave one of 2 threads waiting for the other's third chunk). */
static void vec_shared(struct compute *c, struct matmul_job *j, const enum ggml_type *types, int n_mats,
                       const struct matmul_out *mats) {
    ASSERT(n_mats >= 1 && n_mats <= MATMUL_MULTI_MAX && j->n_tok <= c->max_tokens && j->n_in <= c->max_n_in);
    bool all_x16 = true;
    for (int m = 0; m < n_mats; m++) all_x16 = all_x16 && is_x16(types[m]);
    j->chunk_rows = j->n_tok >= MATMUL_BLAS_MIN_TOKENS ? GEMM_CHUNK_ROWS : VEC_CHUNK_ROWS;
    j->n_mats = n_mats;
    j->n_chunks = 0;
    for (int m = 0; m < n_mats; m++) {
        struct mat_desc *d = &j->mats[m];
        *d = (struct mat_desc){.w = mats[m].w, .n_out = mats[m].n_out, .y = mats[m].y, .chunk0 = j->n_chunks,
                               .chunk_rows = j->chunk_rows};
        int64_t n_chunks = div_up(d->n_out, d->chunk_rows);
        if (all_x16 && j->n_tok < MATMUL_BLAS_MIN_TOKENS) { /* a decode step: even_chunks of groups */
            d->chunk_rows = 0;
            n_chunks = even_chunks(d->n_out, Q8X16_ROWS, X16_CHUNK_ROWS, c->n_threads);
        }
        if ((d->x16 = x16_kernel(types[m]))) {
            ASSERT(c->acts16 && j->xtype == GGML_TYPE_Q8_0);
            j->x16_acts = true;
            d->x16_amx = types[m] == UVLM_TYPE_Q8_0_X16 && c->acts_amx && j->n_tok >= Q8X16_AMX_MIN_TOKENS;
            j->amx_acts = j->amx_acts || d->x16_amx;
        } else if ((d->kx16 = kx16_kernel(types[m]))) {
            ASSERT(j->xtype == GGML_TYPE_Q8_K);
            if (c->acts_amx && j->n_tok >= kx16_amx_min_tokens(types[m])) {
                d->kx16_amx = kx16_amx_kernel(types[m]);
                j->k4_amx_acts = j->k4_amx_acts || types[m] == UVLM_TYPE_Q4_K_X16;
                j->k6_amx_acts = j->k6_amx_acts || types[m] == UVLM_TYPE_Q6_K_X16;
            }
        } else {
            ASSERT(quant_supported(types[m]) && quant_vec_dot_type(types[m]) == j->xtype);
            struct matmul_job k = {.c = c, .wtype = types[m], .n_tok = j->n_tok,
                                   .w_stride = ggml_row_size(types[m], (uint64_t)j->n_in)};
            ASSERT(k.w_stride > 0);
            vec_kernels(&k, MATMUL_VEC);
            d->w_stride = k.w_stride;
            d->dot = k.dot;
            d->dot4 = k.dot4;
            d->dotr = k.dotr;
        }
        j->n_chunks += n_chunks;
    }
    quantize_all(j);
    vec_dispatch(c, j);
}

void matmul(struct compute *c, enum ggml_type wtype, const void *w, int64_t n_in, int64_t n_out,
            const float *x, int64_t n_tok, float *y) {
    matmul_path(c, MATMUL_AUTO, wtype, w, n_in, n_out, x, n_tok, y);
}

void matmul_path(struct compute *c, enum matmul_path path, enum ggml_type wtype, const void *w,
                 int64_t n_in, int64_t n_out, const float *x, int64_t n_tok, float *y) {
    if (is_x16(wtype)) { /* one path at every token count */
        ASSERT(path == MATMUL_AUTO || path == MATMUL_VEC);
        if (n_out > 0) matmul_multi(c, wtype, n_in, x, n_tok, 1, &(struct matmul_out){.w = w, .n_out = n_out, .y = y});
        return;
    }
    ASSERT(quant_supported(wtype) && n_tok <= c->max_tokens && n_in <= c->max_n_in);
    size_t w_stride = ggml_row_size(wtype, (uint64_t)n_in);
    ASSERT(w_stride > 0);
    if (n_tok <= 0 || n_out <= 0) return;
    struct matmul_job j = {
        .c = c, .wtype = wtype, .xtype = quant_vec_dot_type(wtype), .w = w, .w_stride = w_stride,
        .n_in = n_in, .n_out = n_out, .n_tok = n_tok, .x = x, .y = y,
    };
    /* The reference's Q8_0 order is the one every Q8_0 kernel here computes (quant.c): where the
     * integer GEMM exists the fast paths give its numbers at every batch size. */
    if (path == MATMUL_REFERENCE && wtype == GGML_TYPE_Q8_0 && c->packed)
        path = n_tok >= MATMUL_GEMM_Q8_MIN_TOKENS ? MATMUL_GEMM_Q8 : MATMUL_VEC;
    if (path == MATMUL_AUTO) path = auto_path(c, wtype, n_tok);
    if (path == MATMUL_GEMM_Q8) {
        /* integers on VNNI, each output exactly its vector-path value */
        j.n_mats = 1;
        j.mats[0] = (struct mat_desc){.w = w, .n_out = n_out, .y = y};
        gemm_q8_dispatch(c, &j);
        return;
    }
    if (path == MATMUL_BLAS_THREADED) {
        ASSERT(wtype == GGML_TYPE_F32);
        openblas_set_num_threads(c->n_threads);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)n_tok, (blasint)n_out,
                    (blasint)n_in, 1.0f, x, (blasint)n_in, w, (blasint)n_in, 0.0f, y, (blasint)n_out);
        openblas_set_num_threads(1);
        return;
    }
    if (path == MATMUL_BLAS) {
        ASSERT(c->tiles);
        if (j.xtype != GGML_TYPE_F32) {
            /* The reference dots quantized weights with activations in xtype at every batch size:
             * multiply the activations rounded through xtype, so both paths give its numbers. */
            quantize_all(&j);
            pool_run(c->pool, round_rows, &j);
            atomic_store_explicit(&j.next, 0, memory_order_relaxed);
            j.x = c->xr;
        }
        j.to_float = quant_get_to_float(c->level, wtype);
        /* Tiles as full as fit, at least two per thread so a slow thread does not hold up the
         * rest, and as many as a multiple of the thread count, all of about the same size: 11
         * tiles of 512 rows on 2 threads (5632 rows) would leave one thread a whole tile behind. */
        int64_t fit = (int64_t)c->tile_floats / n_in;
        if (fit > TILE_MAX_ROWS) fit = TILE_MAX_ROWS;
        int64_t rounds = div_up(n_out, (int64_t)c->n_threads * fit); /* tiles per thread */
        if (rounds < 2) rounds = 2;
        j.chunk_rows = div_up(n_out, rounds * c->n_threads);
        j.chunk_rows = div_up(j.chunk_rows, 32) * 32 < fit ? div_up(j.chunk_rows, 32) * 32 : j.chunk_rows;
        j.n_chunks = div_up(n_out, j.chunk_rows);
        pool_run(c->pool, sgemm_tiles, &j);
        return;
    }
    vec_kernels(&j, path);
    if (j.xtype == GGML_TYPE_F32) {
        j.xq = (const uint8_t *)x;
        j.xq_stride = (size_t)n_in * sizeof(float);
    } else {
        quantize_all(&j);
    }
    j.n_mats = 1;
    j.mats[0] = (struct mat_desc){.w = w, .n_out = n_out, .y = y, .chunk0 = 0, .chunk_rows = VEC_CHUNK_ROWS,
                                  .w_stride = j.w_stride, .dot = j.dot, .dot4 = j.dot4, .dotr = j.dotr};
    if (q4_K_tiles(c, wtype, n_tok)) {
        /* vec_rows' numbers (MATMUL_REFERENCE: with its grouped order), weights and activations
         * shared by 4 x 4 tiles */
        tiles_dispatch(c, &j);
        return;
    }
    j.chunk_rows = VEC_CHUNK_ROWS;
    j.n_chunks = div_up(n_out, j.chunk_rows);
    vec_dispatch(c, &j);
}

void matmul_multi(struct compute *c, enum ggml_type wtype, int64_t n_in, const float *x, int64_t n_tok, int n_mats,
                  const struct matmul_out *mats) {
    ASSERT(n_mats >= 1 && n_mats <= MATMUL_MULTI_MAX);
    if (n_tok <= 0) return;
    enum ggml_type types[MATMUL_MULTI_MAX];
    for (int m = 0; m < n_mats; m++) types[m] = wtype;
    if (is_x16(wtype)) {
        struct matmul_job j = {.c = c, .wtype = wtype, .xtype = x16_xtype(wtype), .n_in = n_in, .n_tok = n_tok, .x = x};
        vec_shared(c, &j, types, n_mats, mats);
        return;
    }
    enum ggml_type xtype = quant_vec_dot_type(wtype);
    /* The shared dispatches are the vector path with quantized activations, the Q4_K tiles and
     * the Q8_0 GEMM; elsewhere (or where matmul would take another path) one matmul per matrix,
     * which gives the same numbers. */
    enum matmul_path path = auto_path(c, wtype, n_tok);
    bool tiles = path == MATMUL_VEC && q4_K_tiles(c, wtype, n_tok);
    bool vec = n_tok < MATMUL_BLAS_MIN_TOKENS && xtype != GGML_TYPE_F32 && path == MATMUL_VEC;
    if ((!vec && !tiles && path != MATMUL_GEMM_Q8) || n_mats == 1) {
        for (int m = 0; m < n_mats; m++) matmul(c, wtype, mats[m].w, n_in, mats[m].n_out, x, n_tok, mats[m].y);
        return;
    }
    ASSERT(quant_supported(wtype) && n_tok <= c->max_tokens && n_in <= c->max_n_in);
    size_t w_stride = ggml_row_size(wtype, (uint64_t)n_in);
    struct matmul_job j = {
        .c = c, .wtype = wtype, .xtype = xtype, .w_stride = w_stride, .n_in = n_in, .n_tok = n_tok, .x = x,
    };
    if (path == MATMUL_GEMM_Q8 || tiles) {
        j.n_mats = n_mats;
        for (int m = 0; m < n_mats; m++) j.mats[m] = (struct mat_desc){.w = mats[m].w, .n_out = mats[m].n_out, .y = mats[m].y};
        if (tiles) {
            quantize_all(&j);
            tiles_dispatch(c, &j);
        } else {
            gemm_q8_dispatch(c, &j);
        }
        return;
    }
    vec_shared(c, &j, types, n_mats, mats);
}

void matmul_multi_types(struct compute *c, const enum ggml_type *types, int64_t n_in, const float *x, int64_t n_tok,
                        int n_mats, const struct matmul_out *mats) {
    ASSERT(n_mats >= 1 && n_mats <= MATMUL_MULTI_MAX);
    if (n_tok <= 0) return;
    /* The q8x16.h layouts take one activation type at every token count (Q8_0, then its blocks
     * made from them; Q4_K_X16, Q6_K_X16: Q8_K): all in those layouts of one activation type
     * (SmolLM2's Q5_0_X16 Q/K beside its Q8_0_X16 V; Q4_K_X16 beside Q6_K_X16), the matrices
     * share one dispatch for prompts too. */
    bool same = true, all_x16 = true, shared = n_tok < MATMUL_BLAS_MIN_TOKENS;
    enum ggml_type xtype = is_x16(types[0]) ? x16_xtype(types[0]) : quant_vec_dot_type(types[0]);
    for (int m = 0; m < n_mats; m++) {
        bool x16 = is_x16(types[m]);
        same = same && types[m] == types[0];
        all_x16 = all_x16 && x16 && x16_xtype(types[m]) == xtype;
        shared = shared && xtype != GGML_TYPE_F32 &&
                 (x16 ? x16_xtype(types[m]) == xtype
                      : quant_vec_dot_type(types[m]) == xtype && auto_path(c, types[m], n_tok) == MATMUL_VEC &&
                            !q4_K_tiles(c, types[m], n_tok));
    }
    shared = shared || all_x16;
    if (same) {
        matmul_multi(c, types[0], n_in, x, n_tok, n_mats, mats);
        return;
    }
    if (!shared) {
        for (int m = 0; m < n_mats; m++) matmul(c, types[m], mats[m].w, n_in, mats[m].n_out, x, n_tok, mats[m].y);
        return;
    }
    struct matmul_job j = {.c = c, .wtype = types[0], .xtype = xtype, .n_in = n_in, .n_tok = n_tok, .x = x};
    vec_shared(c, &j, types, n_mats, mats);
}
