/* q8x16.h: Q8_0, Q5_0, Q4_K and Q6_K matrices interleaved by 16 rows, the serving engine's layouts
 * for those weights on AVX-512 VNNI (private to src/math and the model loader; matmul.c runs them
 * as the weight types UVLM_TYPE_Q8_0_X16, _Q5_0_X16, _Q4_K_X16 and _Q6_K_X16 of gguf/types.h).
 * Where the CPU has AMX-INT8, the Q8_0, Q4_K and Q6_K prompt kernels (q8x16_rows_amx,
 * q4kx16_rows_amx, q6kx16_rows_amx) run whole tiles of 16 tokens on AMX tiles: a 4-byte word of
 * 16 rows is the layout a B tile takes.
 *
 * Why: in GGUF's Q8_0 a row's 32-element blocks lie one after the other, so a SIMD dot spreads one
 * block over 8 integer lanes and pays a float conversion and a multiply-add per block and token for
 * every 8 lanes. Here, 16 consecutive rows are stored side by side, 4 bytes of each in turn: lane l
 * of a 512-bit register holds 4 levels of row l, and 8 vpdpbusd sum a whole block of 16 rows against
 * one token into 16 lanes, after which one conversion, one multiply and one fma fold 16 outputs.
 * Q5_0 the same, its levels unpacked from nibbles and fifth bits into those 8 registers first.
 * Decode steps and prompts both run faster than on the GGUF layouts; forward_bench compares the
 * two on the same model (SmolLM2-135M Q4_K_M: 80% of its weight bytes are Q5_0):
 *   build/bench/forward_bench bench-models/smollm2-135m-q8_0.gguf --rows 8 [--gguf-layout]
 *   build/bench/forward_bench bench-models/smollm2-135m-q4_k_m.gguf --threads 2 [--gguf-layout]
 *
 * The numbers: each output is sum over blocks i, in order, of fma((float)dot_i, d_w,i * d_x,i, acc),
 * dot_i the exact integer dot of block i (from 0.0). Every path here (any token count, the tail rows,
 * q8x16_dot_ref / q5x16_dot_ref) computes exactly that, so a token's numbers never depend on its
 * batch; they are not the reference's order (quant.c's, 8 float lanes per block), which is why a
 * model in these layouts is for serving only (model_options.serving_layout; forward_config.reference
 * refuses it).
 *
 * Layout of a matrix of n_out rows of n_in elements (nb = n_in / 32 blocks per row), in place of the
 * GGUF bytes and of the same size: rows [0, 16 * (n_out / 16)) in groups of 16, group g at byte
 * g * 16 * row_bytes: nb blocks of data, then nb x 16 fp16 scales (block i of rows 16g..16g+15).
 * GGUF places tensors at 32-byte boundaries; where a group starts 32 bytes past a 64-byte one,
 * block 0's scales come first instead, so the data's 64-byte loads never straddle two cache lines
 * (a split load costs two L1 accesses). So the layout depends on the address (mod 64): rewritten
 * bytes must not be moved. The weights must be at least 32-byte aligned (the loader checks).
 * A block's data, for 4-byte part k (levels 4k..4k+3) of row l:
 *   Q8_0 (512 bytes): byte k * 64 + l * 4 + m = level 4k+m of row l, + 128 as an unsigned byte.
 *   Q5_0 (320 bytes): 4 x 64 bytes of nibbles, byte j * 64 + l * 4 + m = the GGUF byte qs[4j+m] of
 *       row l (low nibble: element 4j+m, part j; high nibble: element 16+4j+m, part j+4), then
 *       8 little-endian 64-bit masks, mask k's bit l * 4 + m = the fifth bit of element 4k+m of
 *       row l. The kernel's unsigned level is nibble + 16 * fifth bit (0..31), the level + 16.
 * The n_out % 16 rows after the groups stay GGUF rows at their own offsets.
 *
 *   q8x16_repack(w, n_in, n_out);                           // at load, while w is writable
 *   q8x16_pack_acts(xq, xq_stride, n_tok, n_in, acts);      // Q8_0 activations -> acts (both types)
 *   q8x16_rows(n_in, n_out, w, r0, r1, acts, n_tok, y);     // y[t][r] for r in [r0, r1), r0 % 16 == 0
 *   q5x16_repack(...); q5x16_rows(...);                     // the same for Q5_0
 */
#ifndef UVLM_MATH_Q8X16_H
#define UVLM_MATH_Q8X16_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define Q8X16_ROWS 16

/* One block of one token's Q8_0 activations: its 32 levels (4 per int, little-endian), the scale
 * as a float, and the starts of the integer dot against weights stored as level + 128 (Q8_0:
 * -128 * the sum of the levels) and as level + 16 (Q5_0: -16 * the sum). */
struct q8x16_act {
    int32_t q4[8];
    float d;
    int32_t corr;
    int32_t corr5;
};

/* Bytes of the activations of n_tok tokens of n_in elements. */
#define Q8X16_ACT_BYTES(n_tok, n_in) ((size_t)(n_tok) * (size_t)((n_in) / 32) * sizeof(struct q8x16_act)) /* 32: Q8_0 block */

/* Whether this CPU runs the kernels (AVX-512 F/BW/VL/VNNI). */
bool q8x16_supported(void);
/* Rewrites n_out GGUF Q8_0 rows of n_in elements (ggml_row_size bytes apart) into this layout, in
 * place. 0, or -ERR_NOMEM (a 16-row buffer). */
int q8x16_repack(void *w, int64_t n_in, int64_t n_out);
/* Row r of a matrix in this layout, to F32 (the embedding lookup of a tied output matrix). */
void q8x16_row_to_float(const void *w, int64_t n_in, int64_t n_out, int64_t r, float *out);
/* Tokens t < n_tok of Q8_0 rows xq (xq_stride bytes apart) as acts[t * (n_in / 32) + block]. */
void q8x16_pack_acts(const void *xq, size_t xq_stride, int64_t n_tok, int64_t n_in, struct q8x16_act *acts);
/* y[t * n_out + r] = row r . token t for r in [r0, r1), t < n_tok; r0 a multiple of 16, r1 one too
 * or n_out. */
void q8x16_rows(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const struct q8x16_act *acts,
                int64_t n_tok, float *y);
/* Whether this CPU and OS run the AMX kernels (AMX-TILE and AMX-INT8; on Linux the process asks
 * for the tile state here, once for all its threads, before any thread uses it). */
bool q8x16_amx_enable(void);
/* The fewest tokens from which each AMX kernel (q8x16_rows_amx, q4kx16_rows_amx, q6kx16_rows_amx)
 * beats its vector kernel, what matmul.c gives it from: below, a group's preparation (its levels
 * made signed, or its B tiles) serves too few tiles of tokens. One thread, GMAC/s at 16 / 32 / 48
 * tokens, AMX against vector (build/bench/kernels --small-batch --type T --threads 1, TinyLlama's
 * shapes, all three thresholds set to 16 for the measurement): Q8_0 98-106 / 146-160 / 173-185
 * against 103-123 / 132-157 / 142-160; Q4_K at 16: 130-151 against 108-116; Q6_K 41-44 / 67-70 /
 * 79-82 against 63-66 / 67-73 / 68-74. */
#define Q8X16_AMX_MIN_TOKENS 32
#define Q4KX16_AMX_MIN_TOKENS 16
#define Q6KX16_AMX_MIN_TOKENS 48
/* Bytes of n_tok tokens' activations in the AMX kernels' tiles (whole tiles of 16 tokens): per
 * 32 elements of 16 tokens, q8x16_amx_put's 576, or 1064 for the K-quants' (q6kx16_amx_put's and
 * q4kx16_amx_put's side by side, 8512 bytes per super-block). */
#define Q8X16_AMX_ACT_BYTES(n_tok, n_in) ((size_t)((n_tok) / 16) * (size_t)((n_in) / 32) * 1064)
/* Levels q8x16_rows_amx takes in one pass over the tiles of tokens, and the bytes of the scratch
 * the AMX kernels need for rows of n_in (q8x16_rows_amx: a pass's levels made signed, at least
 * one 16-row group's; q6kx16_rows_amx: a group's super-blocks as B tiles, 32 bytes a weight). */
#define Q8X16_AMX_GROUP_BYTES ((size_t)512 << 10)
#define Q8X16_AMX_SCRATCH_BYTES(n_in) \
    ((size_t)(n_in) * 32 > Q8X16_AMX_GROUP_BYTES ? (size_t)(n_in) * 32 : Q8X16_AMX_GROUP_BYTES)
/* Token t's acts (its n_in / 32 blocks, from q8x16_pack_acts) into tile t / 16 of amx. */
void q8x16_amx_put(const struct q8x16_act *x, int64_t t, int64_t n_in, void *amx);
/* q8x16_rows with whole tiles of 16 tokens on AMX (their activations in amx, tokens [0, n_tok / 16
 * * 16)), the other tokens on the vector kernel (acts); the same numbers. scratch: the calling
 * thread's own Q8X16_AMX_SCRATCH_BYTES(n_in), 64-byte aligned. Only after q8x16_amx_enable()
 * returned true. */
void q8x16_rows_amx(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const struct q8x16_act *acts,
                    const void *amx, void *scratch, int64_t n_tok, float *y);
/* Row r . token t by scalar code, in the order above (tests; the kernel's tail rows). */
float q8x16_dot_ref(int64_t n_in, int64_t n_out, const void *w, int64_t r, const struct q8x16_act *x);

/* The same five for GGUF Q5_0 rows (ggml_row_size(Q5_0) bytes apart) and the Q5_0 layout; the
 * activations are q8x16_pack_acts' (Q5_0 weights take Q8_0 activations). */
int q5x16_repack(void *w, int64_t n_in, int64_t n_out);
void q5x16_row_to_float(const void *w, int64_t n_in, int64_t n_out, int64_t r, float *out);
void q5x16_rows(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const struct q8x16_act *acts,
                int64_t n_tok, float *y);
float q5x16_dot_ref(int64_t n_in, int64_t n_out, const void *w, int64_t r, const struct q8x16_act *x);

/* Q4_K (UVLM_TYPE_Q4_K_X16): 16 rows side by side per 256-element super-block, 2304 bytes (16 GGUF
 * super-blocks) in four parts: 2048 bytes of nibbles, byte k * 64 + l * 4 + m = the GGUF byte
 * qs[4k + m] of row l (its low nibble: element 64(k/8) + 4(k%8) + m, sub-block 2(k/8); its high
 * nibble: the same + 32, sub-block 2(k/8) + 1); the rows' d (16 fp16); their dmin (16 fp16);
 * their packed scales, byte b * 16 + l = scales[b] of row l. d comes first, before the nibbles,
 * where the super-block starts 32 bytes past a 64-byte boundary (nibble loads aligned). The
 * activations are the matmul's Q8_K rows as they are. Numbers: quant.c's dot_q4_K order exactly
 * (per super-block the exact integer sums, then a = fma(sumi, d_w * d_x, a), m = fma(summ,
 * dmin_w * d_x, m); a - m), the order every Q4_K kernel of the serving path computes: rewriting
 * changes no number, only speed. As above, the layout depends on the address mod 64: rewrite in
 * place, never move the bytes. */
int q4kx16_repack(void *w, int64_t n_in, int64_t n_out);
/* Row r to F32, exactly GGUF Q4_K's values (the embedding lookup of a tied output matrix). */
void q4kx16_row_to_float(const void *w, int64_t n_in, int64_t n_out, int64_t r, float *out);
/* y[t * n_out + r] = row r . token t (Q8_K row t of xq, xq_stride bytes apart) for r in [r0, r1). */
void q4kx16_rows(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const void *xq, size_t xq_stride,
                 int64_t n_tok, float *y);
/* Token t's Q8_K row (xq: its n_in / 256 blocks) into tile t / 16 of amx for q4kx16_rows_amx:
 * its levels as A tiles, the sums of its sub-blocks' levels, its scales (beside q6kx16_amx_put's,
 * within Q8X16_AMX_ACT_BYTES). */
void q4kx16_amx_put(const void *xq, int64_t t, int64_t n_in, void *amx);
/* q4kx16_rows with whole tiles of 16 tokens on AMX (their activations also in amx, from
 * q4kx16_amx_put), the rest of the tokens on the vector kernel; the same numbers. scratch: unused
 * (q6kx16_rows_amx's signature). Only after q8x16_amx_enable() returned true. */
void q4kx16_rows_amx(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const void *xq,
                     size_t xq_stride, const void *amx, void *scratch, int64_t n_tok, float *y);
/* Row r . one token's Q8_K row by scalar code, in the order above (tests; the tail rows). */
float q4kx16_dot_ref(int64_t n_in, int64_t n_out, const void *w, int64_t r, const void *xq);

/* Q6_K (UVLM_TYPE_Q6_K_X16): 16 rows side by side per 256-element super-block, 3360 bytes (16 GGUF
 * super-blocks) in four parts: 2048 bytes of ql, byte k * 64 + l * 4 + m = the GGUF byte
 * ql[4k + m] of row l; 1024 bytes of qh, byte k * 64 + l * 4 + m = qh[4k + m] of row l; 256 bytes
 * of scales, byte s * 16 + l = scales[s] of row l; the rows' d (16 fp16). d comes first, before
 * ql, where the super-block starts 32 bytes past a 64-byte boundary (every other super-block:
 * 3360 = 52.5 * 64). Activations: the matmul's Q8_K rows as they are. Numbers: quant.c's
 * dot_q6_K order exactly (per row 8 float lanes over the super-blocks, then fold8), the order of
 * every Q6_K kernel of the serving path: rewriting changes no number, only speed. Faster than
 * the GGUF kernels from one token on (build/bench/kernels --small-batch --type q6_kx16 / q6_k
 * --threads 1). No row lookup (a tied embedding stays in GGUF's layout). The layout depends on
 * the address mod 64: rewrite in place, never move the bytes. */
int q6kx16_repack(void *w, int64_t n_in, int64_t n_out);
/* y[t * n_out + r] = row r . token t (Q8_K row t of xq, xq_stride bytes apart) for r in [r0, r1). */
void q6kx16_rows(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const void *xq, size_t xq_stride,
                 int64_t n_tok, float *y);
/* Row r . one token's Q8_K row by scalar code, in the order above (tests). */
float q6kx16_dot_ref(int64_t n_in, int64_t n_out, const void *w, int64_t r, const void *xq);
/* Token t's Q8_K row (xq: its n_in / 256 blocks) into tile t / 16 of amx for q6kx16_rows_amx (n_in
 * bytes a token, beside q4kx16_amx_put's: within Q8X16_AMX_ACT_BYTES). */
void q6kx16_amx_put(const void *xq, int64_t t, int64_t n_in, void *amx);
/* q6kx16_rows with whole tiles of 16 tokens on AMX (their activations also in amx, from
 * q6kx16_amx_put), the rest of the tokens on the vector kernel; the same numbers. scratch: the
 * calling thread's own Q8X16_AMX_SCRATCH_BYTES(n_in), 64-byte aligned. Only after
 * q8x16_amx_enable() returned true. */
void q6kx16_rows_amx(int64_t n_in, int64_t n_out, const void *w, int64_t r0, int64_t r1, const void *xq,
                     size_t xq_stride, const void *amx, void *scratch, int64_t n_tok, float *y);

#endif
