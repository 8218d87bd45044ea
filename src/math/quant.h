/* quant.h: the weight types of gguf/types.h as numbers: convert rows to and from F32, and dot
 * products of a weight row with an activation row, as the reference implementation does them.
 *
 * Matching the reference means quantizing the activations too: a weight row of type W is dotted
 * with an activation row converted to quant_vec_dot_type(W) (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for
 * Q4_1/Q5_1, Q8_K for the K-quants, F16 for F16, BF16 for BF16, F32 for F32).
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
 * Q4_K, Q5_K, Q6_K, and the activation types Q8_1, Q8_K). */
bool quant_supported(enum ggml_type t);
enum ggml_type quant_vec_dot_type(enum ggml_type w);

/* Row conversions. quant_from_float quantizes with the reference algorithm (round-to-nearest,
 * the reference's scale choice), used for activations and by `mkmodel` for weights. */
void quant_from_float(enum ggml_type t, const float *x, void *dst, int64_t n);
void quant_to_float(enum ggml_type t, const void *src, float *y, int64_t n);

/* Dot product of a weight row (type w) with an activation row already in quant_vec_dot_type(w). */
float quant_vec_dot(enum ggml_type w, int64_t n, const void *w_row, const void *x_row);

/* fp16 / bf16 scalar conversions (IEEE half, round-to-nearest-even). */
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

#endif
