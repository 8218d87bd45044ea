/* quant.h: the weight types of gguf/types.h as numbers: convert rows to and from F32, and dot
 * products of a weight row with an activation row, as the reference implementation does them.
 *
 * Matching the reference means quantizing the activations too: a weight row of type W is dotted
 * with an activation row converted to quant_vec_dot_type(W) (Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL, Q8_1
 * for Q4_1/Q5_1, Q8_K for the K-quants and IQ4_XS, F16 for F16, BF16 for BF16, F32 for F32).
 * Rows are n elements, n a multiple of the type's block size. Block layouts are exactly the GGUF
 * ones (little-endian, fp16 scales). The kernels pick AVX-512/AVX2 code at run time when the CPU has
 * it, with a scalar version of each that tests compare against. None of these allocate.
 *
 *   enum ggml_type vt = quant_vec_dot_type(w->type);
 *   quant_from_float(vt, x, xq, n);                       // xq: ggml_row_size(vt, n) bytes
 *   float y = quant_vec_dot(w->type, n, w_row, xq);       // == dot(dequant(w_row), dequant(xq))
 */
#ifndef UVLM_QUANT_H
#define UVLM_QUANT_H

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

#include "gguf/types.h"

/* True for the types this engine computes with (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, and the activation types Q8_1, Q8_K). */
bool quant_supported(enum ggml_type t);
enum ggml_type quant_vec_dot_type(enum ggml_type w);

/* Row conversions. quant_from_float quantizes with the reference algorithm (round-to-nearest,
 * the reference's scale choice), used for activations and by `mkmodel` for weights. */
void quant_from_float(enum ggml_type t, const float *x, void *dst, int64_t n);
void quant_to_float(enum ggml_type t, const void *src, float *y, int64_t n);

/* Dot product of a weight row (type w) with an activation row already in quant_vec_dot_type(w). */
float quant_vec_dot(enum ggml_type w, int64_t n, const void *w_row, const void *x_row);

/* The reference's float orders where our own kernels differ from them (matmul's
 * MATMUL_REFERENCE path and the reference attention of model/attention.c use them; they are scalar):
 * quant_dot_f32_lanes16: sum a[i]*b[i] as tinyBLAS<16> of an AVX-512 build: lane i % 16
 *   accumulates fma(a[i], b[i], lane) in order, then GCC's _mm512_reduce_add_ps order.
 * quant_dot_f32_vec_f16: as ggml_vec_dot_f16 of an AVX-512 build on a row padded with zeros
 *   to n_pad (>= n): four 16-lane accumulators over steps of 64 of the first n_pad & ~63
 *   elements, then (0+2) + (1+3), the 16-lane reduction, and the elements from there to n
 *   added in double.
 * quant_expf: ggml's vectorized expf of an AVX-512 build (within 2 ulp of expf; exp(-inf) = 0).
 *   quant_expf_n: the same over an array (y[i] = quant_expf(x[i]) bit for bit, vectorized;
 *   y may be x).
 * quant_fold16: the sum of 16 float lanes in the order that ends all of these and the F32 dot
 *   order of our SIMD kernels (math/attn.h): t[k] = l[k] + l[k+8], u[k] = t[k] + t[k+4], then
 *   (u0 + u2) + (u1 + u3) (GCC's _mm512_reduce_add_ps, hsum_ps of the two 8-lane halves' sum). */
float quant_dot_f32_lanes16(int64_t n, const float *a, const float *b);
float quant_dot_f32_vec_f16(int64_t n, int64_t n_pad, const float *a, const float *b);
float quant_expf(float x);
void quant_expf_n(const float *x, float *y, int64_t n);
float quant_fold16(const float l[16]);

/* fp16 / bf16 scalar conversions (IEEE half, round-to-nearest-even). */
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

#endif
