/* gemm_q8.h: the batched product of a Q8_0 weight matrix with many Q8_0 activation rows on
 * AVX-512 VNNI integer arithmetic (private to src/math; matmul.c uses it for prompts).
 *
 * Every output is computed in the order of quant.c's Q8_0 dot product (8 integer lanes per
 * block, fused into 8 float lanes with d_w * d_x, folded at the end), so it equals bit for bit
 * what the vector path gives for that token alone: with Q8_0 weights a prompt's numbers do not
 * depend on the batch it is computed in. A 512-bit register holds two outputs: one weight row
 * against a pair of tokens, whose blocks are packed side by side (x + 128, for vpdpbusd) with
 * their scales by gemm_q8_0_pack. Used for prompts and for the decode steps of 2+ sequences.
 *
 *   gemm_q8_0_pack(xq, xq_stride, n_tok, n_in, packed);              // GEMM_Q8_0_PACKED_BYTES
 *   gemm_q8_0_rows(n_in, w, w_stride, r0, r1, packed, n_tok, y, n_out);  // rows [r0, r1)
 */
#ifndef UVLM_MATH_GEMM_Q8_H
#define UVLM_MATH_GEMM_Q8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes of the packed activations of n_tok rows of n_in elements. */
#define GEMM_Q8_0_PACKED_BYTES(n_tok, n_in) ((size_t)(((n_tok) + 1) / 2) * (size_t)((n_in) / 32) * 128)

/* Whether this CPU runs it (AVX-512 F/BW/VL/VNNI). */
bool gemm_q8_0_supported(void);
/* Token pairs (2p, 2p+1) of the Q8_0 rows xq (xq_stride bytes apart) into packed; an odd last
 * token is paired with zeros. packed must be 64-byte aligned. */
void gemm_q8_0_pack(const void *xq, size_t xq_stride, int64_t n_tok, int64_t n_in, uint8_t *packed);
/* Rows [0, n_rows) of Q4_0 or Q5_0 weights (wtype; w_stride bytes apart) rewritten as Q8_0
 * rows (the same levels, offset removed, and the same scales) one after the other into out
 * (n_rows * ggml_row_size(Q8_0, n_in) bytes). quant.c dots Q4_0 and Q5_0 with Q8_0 activations
 * in Q8_0's order, so gemm_q8_0_rows on them gives exactly those weights' vector-path values. */
void gemm_q8_0_from_q45(int wtype, int64_t n_in, const void *w, size_t w_stride, int64_t n_rows, void *out);
/* y[t * n_out + o] = dot(weight row o, token t) for o in [r0, r1), t < n_tok. */
void gemm_q8_0_rows(int64_t n_in, const void *w, size_t w_stride, int64_t r0, int64_t r1, const uint8_t *packed,
                    int64_t n_tok, float *y, int64_t n_out);

#endif
