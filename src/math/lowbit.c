/* lowbit.c: the low-bit weight types Q2_K, Q3_K, IQ4_NL and IQ4_XS in scalar code: quantization
 * (for `mkmodel`), dequantization, and the dot products with quantized activations in the
 * reference's orders (Q8_K activations for Q2_K, Q3_K and IQ4_XS, Q8_0 for IQ4_NL). This is the
 * scalar table of these types (quant_kernels_scalar_lowbit, kernels.h); every SIMD kernel of them
 * (lowbit_avx2.c, lowbit_avx512.c) gives these functions' floats bit for bit.
 *
 * The reference's orders (its CPU backend on an AVX-512 machine: Q2_K and IQ4_NL matrices
 * repacked into 8-row interleaved blocks, Q3_K and IQ4_XS on its AVX2 vec_dot):
 *   Q2_K: per super-block the integers A = sum_j sc_j * (q . q8 over sub-block j) and
 *     M = sum_j m_j * bsums_j, two float chains a = fma((float)A, d_w * d_x, a) and
 *     m = fma((float)M, dmin_w * d_x, m), the result a - m (its repacked GEMV). Tokens in whole
 *     groups of four (its repacked GEMM) step the chains once per 128 elements instead:
 *     quant_dot_q2_K_gemm.
 *   Q3_K, IQ4_XS: 8 float lanes; lane k of a super-block is the integer sum over its 32-element
 *     groups g of scale(g, k) * (q . q8 over elements 32g + 4k .. +3), scale(g, k) the scale of
 *     the element's sub-block; lane_k = fma((float)sum_k, d, lane_k) super-block after
 *     super-block (d = d_x * d_w for Q3_K, d_w * d_x for IQ4_XS: the same float), then fold8.
 *   IQ4_NL: one float chain, s = fma((float)(q . q8 over the block), d_w * d_x, s), block after
 *     block (its repacked GEMV and GEMM alike).
 * Dequantization is the reference's to the bit: each element one product of the sub-block's
 * float scale (d times the integer scale) and its level, minus the sub-block's float min, with no
 * fused multiply-add.
 *
 * The quantizers are this engine's own (not the reference's search): per sub-block a
 * least-squares choice among a few candidate scales, the scales then quantized against the
 * super-block's, and the levels chosen again with the stored scales.
 */
#include "math/blocks.h"
#include "math/kernels.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define H2F(h) fp16_to_f32(h)
#define F2H(f) f32_to_fp16(f)

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }
static inline int clampi(int v, int lo, int hi) { return imax(lo, imin(hi, v)); }

/* Round to nearest, ties to even (|f| < 2^22). */
static inline int nearest(float f) { return (int)nearbyintf(f); }

/* hsum_ps of simd_avx2.h: s_k = acc_k + acc_{k+4}, then (s0 + s2) + (s1 + s3). */
static inline float fold8(const float acc[8]) {
    float s[4];
    for (int k = 0; k < 4; k++) s[k] = acc[k] + acc[k + 4];
    return (s[0] + s[2]) + (s[1] + s[3]);
}

/* ---- levels in element order ------------------------------------------------------------- */

static void q2_K_levels(const block_q2_K *b, int8_t *L) {
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) L[128 * h + 32 * j + l] = (int8_t)((b->qs[32 * h + l] >> (2 * j)) & 3);
}

static void q3_K_levels(const block_q3_K *b, int8_t *L) {
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                int low = (b->qs[32 * h + l] >> (2 * j)) & 3, high = (b->hmask[l] >> (4 * h + j)) & 1;
                L[128 * h + 32 * j + l] = (int8_t)(low - (high ? 0 : 4));
            }
}

/* The 32 grid values of a block of 16 nibble bytes (IQ4_NL, one IQ4_XS sub-block). */
static void iq4_values(const uint8_t *qs, int8_t *v) {
    for (int l = 0; l < 16; l++) {
        v[l] = iq4nl_levels[qs[l] & 0xF];
        v[l + 16] = iq4nl_levels[qs[l] >> 4];
    }
}

/* ---- dequantization ------------------------------------------------------------------------ */

static void to_float_q2_K(const void *src, float *y, int64_t n) {
    const block_q2_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        int8_t L[QK_K];
        q2_K_levels(&b[i], L);
        float d = H2F(b[i].d), dmin = H2F(b[i].dmin);
        for (int j = 0; j < 16; j++) {
            float dl = d * (float)(b[i].scales[j] & 0xF), ml = dmin * (float)(b[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++) y[16 * j + l] = dl * (float)L[16 * j + l] - ml;
        }
    }
}

static void to_float_q3_K(const void *src, float *y, int64_t n) {
    const block_q3_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        int8_t L[QK_K];
        q3_K_levels(&b[i], L);
        float d = H2F(b[i].d);
        for (int j = 0; j < 16; j++) {
            float dl = d * (float)q3k_scale(b[i].scales, j);
            for (int l = 0; l < 16; l++) y[16 * j + l] = dl * (float)L[16 * j + l];
        }
    }
}

static void to_float_iq4_nl(const void *src, float *y, int64_t n) {
    const block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) {
        int8_t v[32];
        iq4_values(b[i].qs, v);
        float d = H2F(b[i].d);
        for (int l = 0; l < 32; l++) y[l] = d * (float)v[l];
    }
}

static void to_float_iq4_xs(const void *src, float *y, int64_t n) {
    const block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        float d = H2F(b[i].d);
        for (int j = 0; j < 8; j++, y += 32) {
            int8_t v[32];
            iq4_values(b[i].qs + 16 * j, v);
            float dl = d * (float)iq4xs_scale(&b[i], j);
            for (int l = 0; l < 32; l++) y[l] = dl * (float)v[l];
        }
    }
}

/* ---- dot products -------------------------------------------------------------------------- */

/* Q2_K . Q8_K (see the top of the file); grouped: the chains step per 128 elements. */
static float dot_q2_K_order(int64_t n, const void *w, const void *x, bool grouped) {
    const block_q2_K *a = w;
    const block_q8_K *b = x;
    float fa = 0, fm = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t L[QK_K];
        q2_K_levels(&a[i], L);
        const float d = H2F(a[i].d) * b[i].d, dmin = H2F(a[i].dmin) * b[i].d;
        int A = 0, M = 0;
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int l = 16 * j; l < 16 * j + 16; l++) s += L[l] * b[i].qs[l];
            A += (a[i].scales[j] & 0xF) * s;
            M += (a[i].scales[j] >> 4) * b[i].bsums[j];
            if (grouped && j % 8 == 7) {
                fa = fmaf((float)A, d, fa);
                fm = fmaf((float)M, dmin, fm);
                A = M = 0;
            }
        }
        if (!grouped) {
            fa = fmaf((float)A, d, fa);
            fm = fmaf((float)M, dmin, fm);
        }
    }
    return fa - fm;
}

static float dot_q2_K(int64_t n, const void *w, const void *x) { return dot_q2_K_order(n, w, x, false); }
float quant_dot_q2_K_gemm(int64_t n, const void *w, const void *x) { return dot_q2_K_order(n, w, x, true); }

/* Q3_K . Q8_K: 8 lanes (see the top of the file). */
static float dot_q3_K(int64_t n, const void *w, const void *x) {
    const block_q3_K *a = w;
    const block_q8_K *b = x;
    float lanes[8] = {0};
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t L[QK_K];
        int sc[16];
        q3_K_levels(&a[i], L);
        for (int j = 0; j < 16; j++) sc[j] = q3k_scale(a[i].scales, j);
        const float d = b[i].d * H2F(a[i].d);
        for (int k = 0; k < 8; k++) {
            int sum = 0;
            for (int g = 0; g < 8; g++) {
                int s = 0;
                for (int e = 32 * g + 4 * k; e < 32 * g + 4 * k + 4; e++) s += L[e] * b[i].qs[e];
                sum += sc[2 * g + k / 4] * s;
            }
            lanes[k] = fmaf((float)sum, d, lanes[k]);
        }
    }
    return fold8(lanes);
}

/* IQ4_XS . Q8_K: 8 lanes, one scale per 32-element group. */
static float dot_iq4_xs(int64_t n, const void *w, const void *x) {
    const block_iq4_xs *a = w;
    const block_q8_K *b = x;
    float lanes[8] = {0};
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t v[QK_K];
        int sc[8];
        for (int g = 0; g < 8; g++) {
            iq4_values(a[i].qs + 16 * g, v + 32 * g);
            sc[g] = iq4xs_scale(&a[i], g);
        }
        const float d = H2F(a[i].d) * b[i].d;
        for (int k = 0; k < 8; k++) {
            int sum = 0;
            for (int g = 0; g < 8; g++) {
                int s = 0;
                for (int e = 32 * g + 4 * k; e < 32 * g + 4 * k + 4; e++) s += v[e] * b[i].qs[e];
                sum += sc[g] * s;
            }
            lanes[k] = fmaf((float)sum, d, lanes[k]);
        }
    }
    return fold8(lanes);
}

/* IQ4_NL . Q8_0: one chain over the blocks. */
static float dot_iq4_nl(int64_t n, const void *w, const void *x) {
    const block_iq4_nl *a = w;
    const block_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        int8_t v[32];
        iq4_values(a[i].qs, v);
        int sum = 0;
        for (int l = 0; l < 32; l++) sum += v[l] * b[i].qs[l];
        s = fmaf((float)sum, H2F(a[i].d) * H2F(b[i].d), s);
    }
    return s;
}

/* ---- quantization -------------------------------------------------------------------------- */

/* The affine fit of n values to levels 0..nmax, x ~ s * q - m with s >= 0, m >= 0 (the formats
 * store a non-negative subtracted min): from the [min(x, 0), max(x)] range, a few rounds of
 * assigning levels and refitting s and m by least squares, keeping the best. */
static void fit_affine(const float *x, int n, int nmax, float *s_out, float *m_out) {
    float mn = 0, mx = -FLT_MAX;
    for (int i = 0; i < n; i++) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
    }
    float s = (mx - mn) / (float)nmax, m = -mn;
    float best_s = s, best_m = m, best_err = FLT_MAX;
    for (int round = 0; round < 6 && s > 0; round++) {
        double sq = 0, sx = 0, sqq = 0, sqx = 0, err = 0;
        int q[QK_K];
        for (int i = 0; i < n; i++) {
            q[i] = clampi(nearest((x[i] + m) / s), 0, nmax);
            float e = s * (float)q[i] - m - x[i];
            err += (double)e * e;
            sq += q[i];
            sx += x[i];
            sqq += (double)q[i] * q[i];
            sqx += (double)q[i] * x[i];
        }
        if (err < best_err) {
            best_err = (float)err;
            best_s = s;
            best_m = m;
        }
        /* refit x ~ s q + c by least squares, c = -m <= 0 */
        double det = n * sqq - sq * sq;
        if (det <= 0) break;
        double ns = (n * sqx - sq * sx) / det, c = (sx - ns * sq) / n;
        if (c > 0) { /* a positive offset is not representable: fit through the origin */
            c = 0;
            ns = sqq > 0 ? sqx / sqq : 0;
        }
        if (ns <= 0) break;
        s = (float)ns;
        m = (float)-c;
    }
    *s_out = best_s;
    *m_out = best_m;
}

/* The index of the grid value nearest to r (grid increasing, count a power of two): a binary
 * search over the midpoints. */
static inline int grid_index(float r, const int8_t *grid, int count) {
    int k = 0;
    for (int step = count / 2; step > 0; step /= 2)
        if (r > 0.5f * (float)(grid[k + step - 1] + grid[k + step])) k += step;
    return k;
}

/* The symmetric fit of n values to the levels grid[0..count) (increasing) times a signed scale:
 * candidate scales that put the largest-magnitude value on either end of the grid (a few nearby
 * ones too), each refit by least squares on its levels; returns the best scale. */
static float fit_grid(const float *x, int n, const int8_t *grid, int count) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax == 0) return 0;
    float best = 0, best_err = FLT_MAX;
    for (int end = 0; end < 2; end++)
        for (int t = -4; t <= 4; t++) {
            float target = (float)(end ? grid[count - 1] : grid[0]) + 0.1f * (float)t * (float)(grid[1] - grid[0]);
            if (target == 0) continue;
            float s = max / target;
            for (int pass = 0; pass < 2; pass++) {
                double sxq = 0, sqq = 0, err = 0;
                for (int i = 0; i < n; i++) {
                    /* the nearest grid value to x / s (grid increasing) */
                    int k = grid_index(x[i] / s, grid, count);
                    sxq += (double)x[i] * grid[k];
                    sqq += (double)grid[k] * grid[k];
                    float e = s * (float)grid[k] - x[i];
                    err += (double)e * e;
                }
                if (err < best_err) {
                    best_err = (float)err;
                    best = s;
                }
                if (sqq <= 0 || sxq == 0) break;
                s = (float)(sxq / sqq);
            }
        }
    return best;
}

static const int8_t q3_grid[8] = {-4, -3, -2, -1, 0, 1, 2, 3};

/* Squared error of n values x at step dl on the grid (increasing); q receives the indices. */
static float grid_error(const float *x, int n, float dl, const int8_t *grid, int count, int *q) {
    float err = 0;
    for (int i = 0; i < n; i++) {
        q[i] = dl != 0 ? grid_index(x[i] / dl, grid, count) : grid_index(0, grid, count);
        float e = dl * (float)grid[q[i]] - x[i];
        err += e * e;
    }
    return err;
}

/* The integer sub-block scale in [lo, hi] (times the super-block scale d) giving the least error
 * on the grid among the rounded ratio s / d and its neighbours (a sub-block far smaller than the
 * super-block's largest would otherwise round to 0 and lose its signs); q: its indices. */
static int best_grid_scale(const float *x, int n, float s, float d, int lo, int hi, const int8_t *grid, int count, int *q) {
    int r = d != 0 ? clampi(nearest(s / d), lo, hi) : 0, best = r;
    float best_err = FLT_MAX;
    int tmp[QK_K];
    for (int c = r - 2; c <= r + 2; c++) {
        if (c < lo || c > hi || (d == 0 && c != 0)) continue;
        float err = grid_error(x, n, d * (float)c, grid, count, tmp);
        if (err < best_err) {
            best_err = err;
            best = c;
            memcpy(q, tmp, sizeof(int) * (size_t)n);
        }
    }
    return best;
}

/* Sub-block scales s[0..count) against a super-block scale (fp16 in *dh) that maps the
 * largest-magnitude one to -32: the others get integers in [-32, 31]. */
static float scale6_base(const float *s, int count, uint16_t *dh) {
    float amax = 0, max = 0;
    for (int j = 0; j < count; j++)
        if (fabsf(s[j]) > amax) {
            amax = fabsf(s[j]);
            max = s[j];
        }
    *dh = F2H(amax ? max / -32 : 0);
    return H2F(*dh);
}

static void from_float_q2_K(const float *x, void *dst, int64_t n) {
    block_q2_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float s[16], m[16], max_s = 0, max_m = 0;
        for (int j = 0; j < 16; j++) {
            fit_affine(x + 16 * j, 16, 3, &s[j], &m[j]);
            if (s[j] > max_s) max_s = s[j];
            if (m[j] > max_m) max_m = m[j];
        }
        y[i].d = F2H(max_s / 15);
        y[i].dmin = F2H(max_m / 15);
        float d = H2F(y[i].d), dmin = H2F(y[i].dmin);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int j = 0; j < 16; j++) {
            const float *xs = x + 16 * j;
            int r = d > 0 ? clampi(nearest(s[j] / d), 0, 15) : 0, rm = dmin > 0 ? clampi(nearest(m[j] / dmin), 0, 15) : 0;
            int ls = r, lm = rm, best_q[16];
            float best_err = FLT_MAX;
            /* the rounded scale and min and their neighbours, each with its best levels */
            for (int c = imax(0, r - 2); c <= imin(15, r + 2); c++)
                for (int cm = imax(0, rm - 1); cm <= imin(15, rm + 1); cm++) {
                    float dl = d * (float)c, ml = dmin * (float)cm, err = 0;
                    int q[16];
                    for (int l = 0; l < 16; l++) {
                        q[l] = dl > 0 ? clampi(nearest((xs[l] + ml) / dl), 0, 3) : 0;
                        float e = dl * (float)q[l] - ml - xs[l];
                        err += e * e;
                    }
                    if (err < best_err) {
                        best_err = err;
                        ls = c;
                        lm = cm;
                        memcpy(best_q, q, sizeof q);
                    }
                }
            y[i].scales[j] = (uint8_t)(ls | lm << 4);
            for (int l = 0; l < 16; l++) {
                int e = 16 * j + l;
                y[i].qs[32 * (e / 128) + e % 32] |= (uint8_t)(best_q[l] << (2 * ((e % 128) / 32)));
            }
        }
    }
}

static void from_float_q3_K(const float *x, void *dst, int64_t n) {
    block_q3_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float s[16];
        for (int j = 0; j < 16; j++) s[j] = fit_grid(x + 16 * j, 16, q3_grid, 8);
        float d = scale6_base(s, 16, &y[i].d);
        memset(y[i].scales, 0, sizeof y[i].scales);
        memset(y[i].qs, 0, sizeof y[i].qs);
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        for (int j = 0; j < 16; j++) {
            int q[16];
            int ls = best_grid_scale(x + 16 * j, 16, s[j], d, -32, 31, q3_grid, 8, q);
            int u = ls + 32; /* 6 bits */
            y[i].scales[j % 8] |= (uint8_t)((u & 0xF) << (4 * (j / 8)));
            y[i].scales[8 + j % 4] |= (uint8_t)((u >> 4) << (2 * (j / 4)));
            for (int l = 0; l < 16; l++) {
                int e = 16 * j + l, v = q[l]; /* level + 4, 0..7 */
                int h = e / 128, g = (e % 128) / 32, c = e % 32;
                y[i].qs[32 * h + c] |= (uint8_t)((v & 3) << (2 * g));
                if (v >= 4) y[i].hmask[c] |= (uint8_t)(1 << (4 * h + g));
            }
        }
    }
}

/* The 32 nibbles of an IQ4 block (or sub-block) from its grid indices. */
static void iq4_pack(const int *q, uint8_t *qs) {
    for (int l = 0; l < 16; l++) qs[l] = (uint8_t)(q[l] | q[l + 16] << 4);
}

static void from_float_iq4_nl(const float *x, void *dst, int64_t n) {
    block_iq4_nl *y = dst;
    for (int64_t i = 0; i < n / QK4_NL; i++, x += QK4_NL) {
        int q[32];
        y[i].d = F2H(fit_grid(x, 32, iq4nl_levels, 16));
        grid_error(x, 32, H2F(y[i].d), iq4nl_levels, 16, q);
        iq4_pack(q, y[i].qs);
    }
}

static void from_float_iq4_xs(const float *x, void *dst, int64_t n) {
    block_iq4_xs *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float s[8];
        for (int j = 0; j < 8; j++) s[j] = fit_grid(x + 32 * j, 32, iq4nl_levels, 16);
        float d = scale6_base(s, 8, &y[i].d);
        y[i].scales_h = 0;
        memset(y[i].scales_l, 0, sizeof y[i].scales_l);
        for (int j = 0; j < 8; j++) {
            int q[32];
            int u = best_grid_scale(x + 32 * j, 32, s[j], d, -32, 31, iq4nl_levels, 16, q) + 32;
            y[i].scales_l[j / 2] |= (uint8_t)((u & 0xF) << (4 * (j % 2)));
            y[i].scales_h |= (uint16_t)((u >> 4) << (2 * j));
            iq4_pack(q, y[i].qs + 16 * j);
        }
    }
}

const struct quant_kernels quant_kernels_scalar_lowbit = {
    .vec_dot = {[GGML_TYPE_Q2_K] = dot_q2_K, [GGML_TYPE_Q3_K] = dot_q3_K, [GGML_TYPE_IQ4_NL] = dot_iq4_nl,
                [GGML_TYPE_IQ4_XS] = dot_iq4_xs},
    .to_float = {[GGML_TYPE_Q2_K] = to_float_q2_K, [GGML_TYPE_Q3_K] = to_float_q3_K,
                 [GGML_TYPE_IQ4_NL] = to_float_iq4_nl, [GGML_TYPE_IQ4_XS] = to_float_iq4_xs},
    .from_float = {[GGML_TYPE_Q2_K] = from_float_q2_K, [GGML_TYPE_Q3_K] = from_float_q3_K,
                   [GGML_TYPE_IQ4_NL] = from_float_iq4_nl, [GGML_TYPE_IQ4_XS] = from_float_iq4_xs},
};
