/* attn.h: the two products of one attention row read straight from F16 or Q8_0 K/V cells (no
 * F32 copy of the cache, no transposed V): the scores q·K[c] of a query row against a list of
 * cells, and the mix sum_c p[c]·V[c] of a probability row over them (Q8_0: below).
 *
 * Numbers: exactly those of matmul's vector path (MATMUL_VEC, F32 weights) on the same operands
 * converted to F32, i.e. of the F32 dot product of quant.c, whose order is (n elements):
 *   16 float lanes acc[l] = fmaf(a[i+l], b[i+l], acc[l]) over i = 0, 16, ... (whole 16s only);
 *   t[k] = acc[k] + acc[k+8] (k < 8); u[k] = t[k] + t[k+4] (k < 4); s = (u0 + u2) + (u1 + u3);
 *   then s += a[i] * b[i] (rounded product, then sum) for the remaining n % 16 elements.
 * For the scores a = K row, b = q (n = head_dim); for the mix, per output element d, a = the
 * column d of V over the cells, b = p (n = n_c). So a forward pass may compute a decode step
 * here and a prompt chunk through matmul on gathered F32 copies and get the same numbers
 * wherever matmul takes its vector path. Every SIMD level gives the scalar result bit for bit.
 *
 * Rows: cell c's K (V) row starts at k + cells[c] * k_stride (v + cells[c] * v_stride) halfs.
 * None of these allocate or use threads.
 *
 * Also here: the softmax of one attention row in the reference's numbers (attn_softmax_row,
 * between the two products), and the attention of a block of query rows (a prompt chunk's rows,
 * one block per thread) on the F16 cells in tiles (attn_rows_f16: its own numbers, one fma chain
 * per dot) or over F32 copies of the cells through two sgemm calls (attn_rows_f32).
 *
 *   attn_scores_f16(q, kv_k_row(kv, layer, 0) + h * hd, n_embd_k, cells, n_c, hd, scores);
 *   ... mask, softmax, round p to F16 ...
 *   attn_mix_f16(p, kv_v_row(kv, layer, 0) + h * hd, n_embd_v, cells, n_c, hd, out);
 */
#ifndef UVLM_MATH_ATTN_H
#define UVLM_MATH_ATTN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "math/kernels.h"

/* scores[c] = dot(K row of cells[c], q) over hd elements, c < n_c. */
void attn_scores_f16(const float *q, const uint16_t *k, size_t k_stride, const int32_t *cells, int64_t n_c,
                     int32_t hd, float *scores);
/* The scores of n_q query rows against the same cells (a GQA group's query heads over their kv
 * head): scores[r * sc_stride + c] = dot(K row of cells[c], q + r * q_stride), r < n_q, c < n_c,
 * each row exactly what attn_scores_f16 gives it; each K row is read once for all the rows. */
void attn_scores_f16_rows(const float *q, size_t q_stride, int32_t n_q, const uint16_t *k, size_t k_stride,
                          const int32_t *cells, int64_t n_c, int32_t hd, float *scores, size_t sc_stride);
/* out[d] = dot over c < n_c of (V[cells[c]][d], p[c]), d < hd. */
void attn_mix_f16(const float *p, const uint16_t *v, size_t v_stride, const int32_t *cells, int64_t n_c,
                  int32_t hd, float *out);
/* The mix of n_p probability rows over the same cells (a GQA group's rows over their kv head):
 * out[r * out_stride + d] = the mix of row p + r * p_stride, d < hd, each row exactly what
 * attn_mix_f16 gives it; each V row is read once for all the rows. */
void attn_mix_f16_rows(const float *p, size_t p_stride, int32_t n_p, const uint16_t *v, size_t v_stride,
                       const int32_t *cells, int64_t n_c, int32_t hd, float *out, size_t out_stride);

/* The softmax of one attention row, in place over row[0 .. n), as the reference (x86 AVX-512
 * build, its n_kv padded with zeros) computes it; cell c is at position cpos[c]:
 *   x[c] = cpos[c] <= pos ? row[c] * scale : -inf;  m = the largest x (-inf if all masked);
 *   e[c] = quant_expf(x[c] - m), 0 where masked;
 *   sum = the 16-element chunks of e (the last one zero-padded), each folded in float as
 *         quant_fold16 does, added in double in chunk order;
 *   row[c] = (float)(f16)(e[c] * (float)(1.0 / sum))  (rounded to F16, round-to-nearest-even,
 *         as the reference's F16 product with V sees it).
 * A row with every cell masked gets NaN everywhere (0 * inf), as the scalar definition does.
 * Every SIMD level gives the scalar result bit for bit (NaN scores excepted: no order is
 * promised for them). */
void attn_softmax_row(float *row, int64_t n, const int32_t *cpos, int32_t pos, float scale);
/* The same but the probabilities stay F32, e[c] * (float)(1.0 / sum) (the reference's flash
 * attention does not round them: what Q8_0 V cells are multiplied by). */
void attn_softmax_row_f32(float *row, int64_t n, const int32_t *cpos, int32_t pos, float scale);

/* A sliding window's mask before attn_softmax_row: row[c] = -inf for the cells too old for a
 * query at pos, cpos[c] <= pos - window (the reference's standard sliding window: a query at p
 * sees p - window < cpos <= p); window <= 0: no window, nothing changes. cpos ascending (a
 * sequence's cells sorted by position), so the masked cells are a prefix. attn_softmax_row then
 * gives them probability 0, as to the cells past pos. */
void attn_mask_window(float *row, int64_t n, const int32_t *cpos, int32_t pos, int32_t window);

/* The attention of n_rows query rows over nv cells given as F32 copies, on the calling thread
 * (a prompt chunk's rows, a block per compute thread; OpenBLAS runs single-threaded, see
 * compute_create):
 *   sc[r][c] = q[r] . k[c]   (sgemm; q: n_rows x hd, k: nv x hd, row-major)
 *   attn_mask_window(sc[r], nv, cpos, row_pos[r], window)   (cpos ascending when window > 0)
 *   attn_softmax_row(sc[r], nv, cpos, row_pos[r], scale)   (p_f16; else attn_softmax_row_f32)
 *   out[r] = sum_c sc[r][c] * v[c]   (sgemm; v: nv x hd, row-major as stored: no transpose)
 * sc is n_rows x nv scratch (rows nv apart); out is n_rows x hd. The products have sgemm's
 * rounding (that of matmul's sgemm path on the same operands, not of its vector path). */
void attn_rows_f32(const float *q, int64_t n_rows, const float *k, const float *v, int64_t nv, int32_t hd,
                   const int32_t *cpos, const int32_t *row_pos, int32_t window, float scale, bool p_f16, float *sc,
                   float *out);

/* The same second half on scores already in sc (n_rows x nv, rows nv apart): the mask, the
 * softmax and the sgemm with v (a prompt chunk whose scores come from Q8_0 cells). */
void attn_rows_softmax_mix_f32(float *sc, int64_t n_rows, const float *v, int64_t nv, int32_t hd, const int32_t *cpos,
                               const int32_t *row_pos, int32_t window, float scale, bool p_f16, float *out);

/* The attention of a block of n_rows query rows over F16 cells read as stored (a prompt chunk's
 * rows of one kv head: no F32 copy of the cells, no packing), on the calling thread:
 *   sc[r][c] = q[r] . K row of cells[c]   (one fma chain over d = 0 .. hd - 1; q F16-exact)
 *   attn_mask_window and attn_softmax_row at row_pos[r] (probabilities rounded to F16, as the
 *   product with F16 V cells takes them)
 *   out[r][d] = the fma chain over c = 0 .. nv - 1 of sc[r][c] * V[cells[c]][d]
 * q: n_rows x hd; sc: n_rows x nv scratch (rows nv apart); tile: ATTN_TILE_FLOATS(hd) floats of
 * scratch; out: n_rows x hd. hd a multiple of 16. A row's numbers depend on its own inputs only
 * (not on n_rows or the block it is in); the tiles (K: 32 cells transposed once for all the
 * rows; V: 16 cells converted once) keep every read in cache. Vectorized for AVX-512; other
 * levels run the scalar definition. */
#define ATTN_TILE_FLOATS(hd) (32 * (size_t)(hd))
void attn_rows_f16(const float *q, int64_t n_rows, const uint16_t *k, size_t k_stride, const uint16_t *v,
                   size_t v_stride, const int32_t *cells, int64_t nv, int32_t hd, const int32_t *cpos,
                   const int32_t *row_pos, int32_t window, float scale, float *sc, float *tile, float *out);

/* Q8_0 cells (memory/kv.h: blocks of 32 values along the head dimension, hd a multiple of 32).
 * Scores: the query rows quantized to Q8_0 too (qq: n_q rows qq_stride bytes apart), as the
 * reference dots Q8_0 cells; scores[r * sc_stride + c] = quant_vec_dot(GGML_TYPE_Q8_0, hd,
 * K row of cells[c], qq row r) bit for bit (k: the head's first block in cell 0's row, rows
 * k_stride bytes apart). Mix: out[r * out_stride + d] = attn_mix_f16_rows' numbers on the V
 * values as quant_to_float gives them (exact in F32), so the same F32 dot order; v as k.
 * Each K or V row is read once for all the rows. */
void attn_scores_q8_0_rows(const void *qq, size_t qq_stride, int32_t n_q, const void *k, size_t k_stride,
                           const int32_t *cells, int64_t n_c, int32_t hd, float *scores, size_t sc_stride);
void attn_mix_q8_0_rows(const float *p, size_t p_stride, int32_t n_p, const void *v, size_t v_stride,
                        const int32_t *cells, int64_t n_c, int32_t hd, float *out, size_t out_stride);

/* One query row's attention as the reference computes it on quantized cells (its CPU flash
 * attention, row by row): the cells in order, masked ones (cpos > pos, or <= pos - window when
 * window > 0) skipped; s = scale * (K row . query) (k_type GGML_TYPE_Q8_0: quant.c's Q8_0 dot
 * with qq, the query quantized to Q8_0; GGML_TYPE_F16: ggml_vec_dot_f16's order with q, F16-exact);
 * an online softmax in F32 with expf: a new maximum M scales the sum S and out by expf(Mold - M),
 * otherwise the cell weighs vs = expf(s - M); out = fma(V row, vs, out) with V as quant_to_float
 * of v_type gives it; S = fma(S, ms, vs); finally out *= 1 / S. tmp: hd floats of scratch.
 * Scalar and slow: the reference mode's (model/attention.h). */
void attn_row_reference_fa(int k_type, const float *q, const void *qq, const void *k, size_t k_stride, int v_type,
                           const void *v, size_t v_stride, const int32_t *cells, const int32_t *cpos, int64_t n_c,
                           int32_t pos, int32_t window, float scale, int32_t hd, float *tmp, float *out);

/* The same at a given SIMD level (tests compare the levels; the level must be supported). */
void attn_scores_f16_level(enum simd_level level, const float *q, const uint16_t *k, size_t k_stride,
                           const int32_t *cells, int64_t n_c, int32_t hd, float *scores);
void attn_scores_f16_rows_level(enum simd_level level, const float *q, size_t q_stride, int32_t n_q,
                                const uint16_t *k, size_t k_stride, const int32_t *cells, int64_t n_c, int32_t hd,
                                float *scores, size_t sc_stride);
void attn_mix_f16_level(enum simd_level level, const float *p, const uint16_t *v, size_t v_stride,
                        const int32_t *cells, int64_t n_c, int32_t hd, float *out);
void attn_mix_f16_rows_level(enum simd_level level, const float *p, size_t p_stride, int32_t n_p,
                             const uint16_t *v, size_t v_stride, const int32_t *cells, int64_t n_c, int32_t hd,
                             float *out, size_t out_stride);
void attn_rows_f16_level(enum simd_level level, const float *q, int64_t n_rows, const uint16_t *k, size_t k_stride,
                         const uint16_t *v, size_t v_stride, const int32_t *cells, int64_t nv, int32_t hd,
                         const int32_t *cpos, const int32_t *row_pos, int32_t window, float scale, float *sc,
                         float *tile, float *out);
void attn_softmax_row_level(enum simd_level level, float *row, int64_t n, const int32_t *cpos, int32_t pos,
                            float scale);
void attn_softmax_row_f32_level(enum simd_level level, float *row, int64_t n, const int32_t *cpos, int32_t pos,
                                float scale);
void attn_scores_q8_0_rows_level(enum simd_level level, const void *qq, size_t qq_stride, int32_t n_q, const void *k,
                                 size_t k_stride, const int32_t *cells, int64_t n_c, int32_t hd, float *scores,
                                 size_t sc_stride);
void attn_mix_q8_0_rows_level(enum simd_level level, const float *p, size_t p_stride, int32_t n_p, const void *v,
                              size_t v_stride, const int32_t *cells, int64_t n_c, int32_t hd, float *out,
                              size_t out_stride);

#endif
