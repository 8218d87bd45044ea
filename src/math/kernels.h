/* kernels.h: the per-instruction-set kernel tables behind quant.h (private to src/math and its
 * tests). Each table holds, per weight type, the row dot product and the row dequantizer; a wider
 * instruction set falls back to the scalar kernel where it has none of its own.
 * The scalar table is the reference every SIMD table is tested against.
 *
 *   quant_vec_dot_fn dot = quant_get_vec_dot(simd_level_best(), GGML_TYPE_Q4_K);
 *   float y = dot(n, w_row, xq_row);
 */
#ifndef UVLM_MATH_KERNELS_H
#define UVLM_MATH_KERNELS_H

#include "math/quant.h"

typedef float (*quant_vec_dot_fn)(int64_t n, const void *w, const void *x);
typedef void (*quant_to_float_fn)(const void *src, float *y, int64_t n);
typedef void (*quant_from_float_fn)(const float *x, void *dst, int64_t n);
/* One weight row against QUANT_DOT_ROWS activation rows x_stride bytes apart, the weights decoded
 * once: out[t] = the vec_dot of row t, bit for bit (the batched decode of several sequences). */
#define QUANT_DOT_ROWS 4
typedef void (*quant_vec_dot4_fn)(int64_t n, const void *w, const void *x, size_t x_stride, float *out);
/* QUANT_DOT_WROWS weight rows (w_stride bytes apart) against one activation row, sharing its
 * loads: out[r] = the vec_dot of weight row r, bit for bit (the matvec of a decode step). */
#define QUANT_DOT_WROWS 4
typedef void (*quant_vec_dotr_fn)(int64_t n, const void *w, size_t w_stride, const void *x, float *out);

/* A table of kernels for one instruction set; a NULL entry means "use the next narrower
 * level's" (down to the scalar table, which is complete). */
struct quant_kernels {
    quant_vec_dot_fn vec_dot[GGML_TYPE_COUNT];
    quant_to_float_fn to_float[GGML_TYPE_COUNT];
    /* SIMD levels only accelerate the activation types, bit for bit the scalar result. */
    quant_from_float_fn from_float[GGML_TYPE_COUNT];
    /* Only where decoding the weights is a large share of the work; no scalar fallback (NULL:
     * call vec_dot per activation row). Never inherited from a narrower level. */
    quant_vec_dot4_fn vec_dot4[GGML_TYPE_COUNT];
    /* Likewise only where it pays; NULL: vec_dot per weight row. Never inherited. */
    quant_vec_dotr_fn vec_dotr[GGML_TYPE_COUNT];
};

enum simd_level { SIMD_SCALAR, SIMD_AVX2, SIMD_AVX512, SIMD_LEVEL_COUNT };

/* "scalar", "avx2", "avx512". */
const char *simd_level_name(enum simd_level level);
/* Whether this CPU runs the level's kernels. */
bool simd_level_supported(enum simd_level level);
/* The widest level this CPU runs. */
enum simd_level simd_level_best(void);

/* The kernel of a level for weight type t (the scalar one where the level has none of its
 * own); NULL when t has no such kernel. The level must be supported. */
quant_vec_dot_fn quant_get_vec_dot(enum simd_level level, enum ggml_type t);
quant_to_float_fn quant_get_to_float(enum simd_level level, enum ggml_type t);
quant_from_float_fn quant_get_from_float(enum simd_level level, enum ggml_type t);
/* The level's own 4-row kernel for t, or NULL. */
quant_vec_dot4_fn quant_get_vec_dot4(enum simd_level level, enum ggml_type t);
/* The level's own multi-row kernel for t, or NULL. */
quant_vec_dotr_fn quant_get_vec_dotr(enum simd_level level, enum ggml_type t);

/* Scalar kernels of the reference's batched paths, where they differ from its vec_dot (the
 * table's kernels): the repacked Q4_K GEMM (activation rows in groups of four: the scale of
 * each 64-element step applied in float) and tinyBLAS's F16 . F16 (16 float lanes). Same
 * arguments as quant_vec_dot_fn. */
float quant_dot_q4_0_reference(int64_t n, const void *w, const void *x);
float quant_dot_q4_K_gemm(int64_t n, const void *w, const void *x);
/* The same for Q2_K's repacked GEMM (lowbit.c: its chains step per 128 elements). */
float quant_dot_q2_K_gemm(int64_t n, const void *w, const void *x);
float quant_dot_f16_tinyblas(int64_t n, const void *w, const void *x);
/* The same numbers with AVX-512 (simd_level_supported(SIMD_AVX512) only). */
float quant_dot_f16_tinyblas_avx512(int64_t n, const void *w, const void *x);

/* AVX-512 VNNI only (simd_level_supported(SIMD_AVX512)): y[t * n_out + o] = the dot of Q4_K
 * weight row o (rows w_stride bytes apart) with Q8_K token t (xq_stride bytes apart), for o in
 * [r0, r1) and t < n_tok (kquant_avx512.c: rows four at a time against four tokens, tokens in
 * blocks that stay in L2). Bit for bit the scalar vec_dot; with grouped, the reference's batched
 * order instead, as MATMUL_REFERENCE has it: quant_dot_q4_K_gemm for tokens below
 * n_tok - n_tok % 4, the scalar vec_dot for the rest. matmul.c runs it on Q4_K batches. */
void kquant_gemm_q4_K_rows(int64_t n_in, const void *w, size_t w_stride, int64_t r0, int64_t r1, const void *xq,
                           size_t xq_stride, int64_t n_tok, float *y, int64_t n_out, bool grouped);

/* The vector exp of attn_softmax_row (attn.c) at a level, over an array: y[i] = quant_expf(x[i])
 * bit for bit (tests check it on values whose softmax output would round to 0). */
void attn_expf_n_level(enum simd_level level, const float *x, float *y, int64_t n);

/* The tables (quant.c, quant_avx2.c, quant_avx512.c). quant_kernels_avx512_k (kquant_avx512.c)
 * holds the AVX-512 Q4_K and Q6_K kernels, every one equal to the scalar kernel bit for bit; the
 * AVX-512 level looks there before quant_kernels_avx512. */
extern const struct quant_kernels quant_kernels_scalar;
/* The scalar kernels of the low-bit types Q2_K, Q3_K, IQ4_NL, IQ4_XS (lowbit.c), looked up after
 * quant_kernels_scalar. */
extern const struct quant_kernels quant_kernels_scalar_lowbit;
extern const struct quant_kernels quant_kernels_avx2;
/* The AVX2 and AVX-512 kernels of the low-bit types (lowbit_avx2.c, lowbit_avx512.c), each the
 * scalar kernel's float bit for bit; looked up after the level's other tables. */
extern const struct quant_kernels quant_kernels_avx2_lowbit;
extern const struct quant_kernels quant_kernels_avx512_lowbit;
extern const struct quant_kernels quant_kernels_avx512;
extern const struct quant_kernels quant_kernels_avx512_k;

#endif
