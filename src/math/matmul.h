/* matmul.h: the compute context (a pool of threads plus scratch memory) and the matrix product
 * of a weight matrix of any supported type with a batch of F32 activations.
 *
 * One `struct compute` per forward context, created once at startup: it starts n_threads - 1
 * worker threads (the calling thread is the n-th) and allocates all the scratch matmul needs for
 * up to max_tokens activation rows of up to max_n_in elements; after that nothing allocates.
 * A compute is used by one thread at a time (the one running the forward pass); its calls are
 * not reentrant: matmul or compute_parallel_for from inside a compute_parallel_for callback
 * aborts (an assertion) instead of corrupting the running job.
 *
 * Between calls the workers spin briefly (so the many matmuls of one decode step dispatch in
 * well under a microsecond) and then sleep on a futex; an idle compute costs nothing. Work is
 * handed out in small items, so a worker the OS has preempted does not hold up the others; on
 * the vector path each thread first takes the items of a contiguous share of the rows (one
 * memory stream per thread, which the hardware prefetcher follows; items interleaved across the
 * matrix stream slower: scripts/bench.d/30-kernels prints the matvec GB/s), then helps with what
 * is left.
 *
 * How matmul computes (the numbers match the reference's):
 *   n_tok <  MATMUL_BLAS_MIN_TOKENS: each activation row is quantized to quant_vec_dot_type(wtype)
 *       (Q8_0, Q8_1, Q8_K; F16/BF16/F32 as is) and every weight row is dotted with it by the SIMD
 *       kernels of quant.h, rows split across the threads; for Q8_0 and the K-quants a row is
 *       decoded once per four tokens, and with fewer tokens (AVX2 and AVX-512: Q4_0, Q5_0,
 *       Q8_0 rows; AVX-512: Q4_K rows, the low-bit types' (Q2_K, Q3_K, IQ4_NL, IQ4_XS), and
 *       Q6_K rows of up to 1 KB) four weight rows share each activation load. A token's result
 *       does not depend on the batch it is in, nor on the thread count: every output is exactly
 *       its single-row vec_dot.
 *   UVLM_TYPE_Q8_0_X16 and UVLM_TYPE_Q5_0_X16 (Q8_0 / Q5_0 the model loader rewrote for serving,
 *       math/q8x16.h; AVX-512 VNNI): at every token count, q8x16_rows / q5x16_rows over the rows
 *       split as on the vector path (the activations quantized to Q8_0 once, then to q8x16's
 *       blocks): 16 outputs per 8 vpdpbusd, a token's numbers independent of its batch, in
 *       q8x16's order, not the reference's. Matrices in these layouts share one dispatch in
 *       matmul_multi_types at every token count (Q4_K_M's Q5_0 Q/K beside its Q8_0 V). Faster
 *       than the GGUF layouts at every batch size (see q8x16.h for the commands that show it).
 *   UVLM_TYPE_Q4_K_X16 and UVLM_TYPE_Q6_K_X16 (Q4_K / Q6_K rewritten the same way):
 *       q4kx16_rows / q6kx16_rows on the Q8_K activations, at every token count, exactly the
 *       numbers of GGUF Q4_K / Q6_K on every path here (dot_q4_K's, dot_q6_K's order). The two
 *       share a dispatch at every token count (one activation type), and with GGUF Q6_K on
 *       decode steps (TinyLlama Q4_K_M's Q/K/V), not with the Q8_0-activation layouts above.
 *   With AMX-INT8 (compute_amx()): UVLM_TYPE_Q8_0_X16, _Q4_K_X16 and _Q6_K_X16 take
 *       q8x16_rows_amx / q4kx16_rows_amx / q6kx16_rows_amx instead from the token counts where
 *       those are faster (q8x16.h's *_AMX_MIN_TOKENS: 32, 16, 48), whole tiles of 16 tokens on
 *       AMX tiles and the rest on the kernels above, the same numbers (the activations are also
 *       copied into the AMX kernels' tiles while they are quantized; each thread has a scratch
 *       of its own for their weight tiles).
 *   Q8_0 weights, n_tok >= MATMUL_GEMM_Q8_MIN_TOKENS, AVX-512 VNNI: the integer GEMM of
 *       gemm_q8.h, every output exactly its vector-path value. Q4_0 and Q5_0 weights from 6
 *       tokens up to MATMUL_BLAS_MIN_TOKENS likewise, their rows rewritten as Q8_0 chunk by
 *       chunk (the same levels and scales: quant.c dots them in Q8_0's order). The rows are
 *       split into one contiguous part per thread, as on the vector path.
 *   Q4_K, Q6_K, Q2_K, Q3_K and IQ4_XS weights, AVX-512 VNNI: the vector path at every batch
 *       size (kquant_avx512.c: Q4_K batches of 4+ tokens in 4 x 4 integer tiles, Q6_K on its
 *       4-token kernel; lowbit_avx512.c's 4-token kernels), every output exactly the scalar
 *       vec_dot.
 *   n_tok >= MATMUL_BLAS_MIN_TOKENS (other cases): the activations are rounded through the same type (quantized
 *       and converted back to F32, so sgemm multiplies the numbers the reference dots), then each
 *       thread dequantizes a tile of weight rows to F32 and runs a single-threaded OpenBLAS sgemm
 *       on it (OpenBLAS is set to 1 thread by compute_create, so its threads and ours never spin
 *       against each other).
 *   MATMUL_REFERENCE (matmul_path only; what `eval-logits` and the golden tests use): the
 *       reference's arithmetic at every batch size (build/test-runner golden compares the logits): the
 *       activations quantized as above and every row dotted by the scalar kernels of quant.c
 *       (the reference's x86 vec_dot / repacked GEMV orders), except that a batch of 2+ rows
 *       takes the reference's batched orders: Q4_K and Q2_K rows in groups of four (from the first)
 *       the repacked GEMM's (quant_dot_q4_K_gemm, quant_dot_q2_K_gemm), F16 the tinyBLAS one
 *       (quant_dot_f16_tinyblas). (Dequantized tiles + sgemm round differently: a logit can move
 *       by a few percent of the largest, beyond the golden tests' 3% bar.) It is scalar, so slow, except for Q8_0 where
 *       the SIMD kernels and the integer GEMM compute the reference's order exactly (used when
 *       the CPU has the GEMM), for Q4_K and Q6_K on AVX-512 VNNI (kquant_avx512.c; the
 *       Q4_K tiles compute the grouped order too), and for the low-bit types on every level's
 *       kernels (lowbit.c; Q2_K's grouped tokens scalar). Q4_0's reference order (one float chain per row, its repacked
 *       GEMV) differs from the 8-lane order of our Q4_0 SIMD kernels: quant_dot_q4_0_reference.
 *
 *   struct compute *c;
 *   if (compute_create(&c, 2, 512, 5632) < 0) ...;
 *   matmul(c, w->type, w->data, 2048, 5632, x, n_tok, y);    // y: n_tok x 5632
 *   compute_parallel_for(c, n_heads, attend_heads, &ctx);     // attend_heads(&ctx, h0, h1)
 *   compute_destroy(c);
 */
#ifndef UVLM_MATH_MATMUL_H
#define UVLM_MATH_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/types.h"

/* Batches of at least this many tokens go through sgemm. Below it the vector kernels win,
 * because dequantizing and repacking a weight tile costs as much as reading the weights several
 * times (scripts/bench.d/30-kernels prints the crossover). */
#define MATMUL_BLAS_MIN_TOKENS 32
/* Q8_0 batches of at least this many tokens take the integer GEMM where there is one (see
 * MATMUL_GEMM_Q8; its numbers are the vector path's, so only the speed depends on this): from
 * 2 tokens on it reads each weight row once for all of them and beats the vector kernels
 * (build/bench/kernels --small-batch --type q8_0 --threads 1: the cost of 1, 2, 4 tokens). */
#define MATMUL_GEMM_Q8_MIN_TOKENS 2

struct compute;

/* 0 or -ERR_INVAL (n_threads < 1, max_tokens < 1, max_n_in < 1), -ERR_NOMEM. Sets OpenBLAS
 * to one thread for the whole process (every sgemm call runs on the thread that makes it). */
int compute_create(struct compute **out, int n_threads, int64_t max_tokens, int64_t max_n_in);
void compute_destroy(struct compute *c);
int compute_n_threads(const struct compute *c);
/* Its threads offer their CPU every `us` microseconds (0: never, the default): math/pool.h's
 * pool_set_yield_ns, for compute threads under a low-priority policy beside a latency-bound one. */
void compute_set_yield_us(struct compute *c, int64_t us);
/* Bytes of scratch memory the compute allocated (for the startup log). */
size_t compute_scratch_bytes(const struct compute *c);
/* Whether compute_create gives 16 tokens and more the AMX kernels here (AMX on this CPU and OS,
 * UVLM_NO_AMX unset), and the bytes it then adds for them: their activations and a scratch per
 * thread (for memory estimates before any compute exists). */
bool compute_amx(void);
size_t compute_amx_bytes(int n_threads, int64_t max_tokens, int64_t max_n_in);

/* y[t*n_out + o] = sum_i W[o][i] * x[t*n_in + i] for t < n_tok, o < n_out.
 * W: n_out rows of n_in elements of type wtype, rows ggml_row_size(wtype, n_in) bytes apart
 * (the UVLM_TYPE_*_X16 types: the GGUF type's bytes in math/q8x16.h's layout).
 * x: n_tok x n_in F32 (row-major), y: n_tok x n_out F32 (must not overlap x).
 * n_tok <= max_tokens, n_in <= max_n_in, n_in a multiple of the type's block size. */
void matmul(struct compute *c, enum ggml_type wtype, const void *w, int64_t n_in, int64_t n_out,
            const float *x, int64_t n_tok, float *y);

/* matmul with the path forced (benchmarks and tests): MATMUL_VEC needs n_tok below
 * min(max_tokens + 1, MATMUL_BLAS_MIN_TOKENS); MATMUL_BLAS needs max_tokens >= MATMUL_BLAS_MIN_TOKENS.
 * MATMUL_BLAS_THREADED is the alternative design the benchmark compares against: one sgemm
 * call over the whole matrix on OpenBLAS's own n_threads threads (F32 weights only).
 * MATMUL_GEMM_Q8 (Q8_0 weights, AVX-512 VNNI, max_tokens >= MATMUL_BLAS_MIN_TOKENS) is what
 * MATMUL_AUTO takes for Q8_0 from MATMUL_GEMM_Q8_MIN_TOKENS tokens on where the CPU has it: an
 * integer GEMM whose every output equals the vector path's (math/gemm_q8.h), so with Q8_0
 * weights no result depends on the batch size.
 * MATMUL_REFERENCE: see the top of this header (never for the UVLM_TYPE_*_X16 types, which take
 * MATMUL_AUTO or MATMUL_VEC, both their one path). */
enum matmul_path { MATMUL_AUTO, MATMUL_VEC, MATMUL_BLAS, MATMUL_BLAS_THREADED, MATMUL_GEMM_Q8, MATMUL_REFERENCE };
void matmul_path(struct compute *c, enum matmul_path path, enum ggml_type wtype, const void *w,
                 int64_t n_in, int64_t n_out, const float *x, int64_t n_tok, float *y);

/* Several matrices with the same input: mats[m].y = W_m . x for each m, exactly as n_mats matmul
 * calls give them (same n_in and weight type for all; each y n_tok x n_out, none overlapping x).
 * On the vector path and the Q8_0 GEMM they share one quantization of x and one dispatch to the
 * threads (a decode step's Q/K/V and gate/up: fewer barriers); elsewhere it is n_mats matmul
 * calls. */
#define MATMUL_MULTI_MAX 4
struct matmul_out {
    const void *w;
    int64_t n_out;
    float *y;
};
void matmul_multi(struct compute *c, enum ggml_type wtype, int64_t n_in, const float *x, int64_t n_tok, int n_mats,
                  const struct matmul_out *mats);
/* matmul_multi for matrices of different types (mats[m] of types[m], one n_in): exactly what
 * n_mats matmul calls give. Where every type takes the vector path with the same activation
 * type (a decode step of Q4_K_M's Q5_0 attn_q/attn_k beside its Q8_0 attn_v, all on Q8_0
 * activations) they share one quantization of x and one dispatch; all of one type, it is
 * matmul_multi; all in q8x16.h's layouts, they share it at every token count; otherwise one
 * matmul per matrix. */
void matmul_multi_types(struct compute *c, const enum ggml_type *types, int64_t n_in, const float *x, int64_t n_tok,
                        int n_mats, const struct matmul_out *mats);

/* Run fn(arg, i0, i1) over [0, n) split into at most n_threads contiguous non-empty ranges,
 * each run by whichever compute thread claims it first (the caller's thread takes part; a busy
 * machine may leave it doing all of them); returns when all are done. fn must not assume which
 * thread runs it or that the ranges run in parallel. */
void compute_parallel_for(struct compute *c, int64_t n,
                          void (*fn)(void *arg, int64_t i0, int64_t i1), void *arg);

/* compute_parallel_for for n items of about `work` element operations each, when there is
 * enough to share (n * work >= COMPUTE_SHARE_WORK); else fn(arg, 0, n) on the calling thread:
 * a decode step has a few tiny row operations per layer, and waking the other threads for them
 * costs more than the work (much more on a loaded machine). */
#define COMPUTE_SHARE_WORK (64 * 1024)
void compute_parallel_for_work(struct compute *c, int64_t n, int64_t work,
                               void (*fn)(void *arg, int64_t i0, int64_t i1), void *arg);

#endif
