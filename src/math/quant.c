/* quant.c: scalar conversions and dot products for every supported type, the dispatch of
 * quant.h onto the widest kernel table the CPU runs, and the fp16/bf16 conversions.
 *
 * Activation quantization (Q8_0, Q8_1, Q8_K) follows the reference exactly (same scale, same
 * rounding), because the integer dot products that follow are only comparable to the reference's
 * when the integers are the same. Weight quantization (used by `mkmodel`) uses simple
 * min/max scale choices, not the reference's search; the blocks are valid and the error small.
 */
#include "math/quant.h"
#include "math/blocks.h"
#include "math/kernels.h"
#include "common/err.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- fp16 / bf16 ---------------------------------------------------------------------- */

static inline float bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

float fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) { /* zero or subnormal: man * 2^-24, exact in float */
        float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (man << 13));
    return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t f32_to_fp16(float f) {
    uint32_t x = f32_to_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00; /* NaN stays NaN */
    if (ax >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds to infinity */
    if (ax < 0x38800000u) {
        /* Below the smallest normal half: adding 0.5 (whose ulp is 2^-24, the subnormal step)
         * rounds to the nearest subnormal, ties to even, in the FPU. */
        float sum = bits_to_f32(ax) + 0.5f;
        return sign | (uint16_t)(f32_to_bits(sum) - 0x3f000000u);
    }
    uint32_t odd = (ax >> 13) & 1;
    ax += 0xc8000fffu + odd; /* rebias exponent by -112, round to nearest even */
    return sign | (uint16_t)(ax >> 13);
}

float bf16_to_f32(uint16_t h) { return bits_to_f32((uint32_t)h << 16); }

uint16_t f32_to_bf16(float f) {
    uint32_t x = f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64); /* quiet NaN */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

#define H2F(h) fp16_to_f32(h)
#define F2H(f) f32_to_fp16(f)

/* Round to nearest, ties to even, like the reference's nearest_int (|f| < 2^22). */
static inline int nearest_int(float f) {
    float v = f + 12582912.f;
    return (int)(f32_to_bits(v) & 0x007fffff) - 0x00400000;
}

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* ---- quantization: F32 -> type -------------------------------------------------------- */

/* The element of largest magnitude, with its sign. */
static float signed_absmax(const float *x, int n, float *amax_out) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++) {
        float ax = fabsf(x[j]);
        if (ax > amax) { amax = ax; max = x[j]; }
    }
    *amax_out = amax;
    return max;
}

static void min_max(const float *x, int n, float *mn, float *mx) {
    *mn = FLT_MAX; *mx = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < *mn) *mn = x[j];
        if (x[j] > *mx) *mx = x[j];
    }
}

/* Levels of a 32-element block with a symmetric scale, as the reference: the largest-magnitude
 * element maps to -half, levels 0..2*half-1 stored with +half. Returns d. */
static float symmetric_levels(const float *x, int half, int *q) {
    float amax, max = signed_absmax(x, 32, &amax);
    float d = max / (float)-half, id = d ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) q[j] = imin(2 * half - 1, (int8_t)(x[j] * id + (float)half + 0.5f));
    return d;
}

/* Levels 0..nmax of a 32-element block over its [min, max] range. Returns d; *mn the min. */
static float affine_levels(const float *x, int nmax, int *q, float *mn) {
    float mx;
    min_max(x, 32, mn, &mx);
    float d = (mx - *mn) / (float)nmax, id = d ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) q[j] = imin(nmax, (int)((x[j] - *mn) * id + 0.5f));
    return d;
}

static void pack_q4(const int *q, uint8_t qs[16]) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(q[j] | (q[j + 16] << 4));
}

/* Q5 packing: low nibbles as Q4, bit 4 of element j in bit j of the 32-bit qh. */
static void pack_q5(const int *q, uint8_t qs[16], uint8_t qh_out[4]) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
        qh |= (uint32_t)((q[j] & 0x10) >> 4) << j;
        qh |= (uint32_t)((q[j + 16] & 0x10) >> 4) << (j + 16);
    }
    memcpy(qh_out, &qh, 4);
}

static void from_float_q4_0(const float *x, void *dst, int64_t n) {
    block_q4_0 *y = dst;
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        int q[32];
        y[i].d = F2H(symmetric_levels(x, 8, q));
        pack_q4(q, y[i].qs);
    }
}

static void from_float_q5_0(const float *x, void *dst, int64_t n) {
    block_q5_0 *y = dst;
    for (int64_t i = 0; i < n / QK5_0; i++, x += QK5_0) {
        int q[32];
        y[i].d = F2H(symmetric_levels(x, 16, q));
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

static void from_float_q4_1(const float *x, void *dst, int64_t n) {
    block_q4_1 *y = dst;
    for (int64_t i = 0; i < n / QK4_1; i++, x += QK4_1) {
        int q[32];
        float mn;
        y[i].d = F2H(affine_levels(x, 15, q, &mn));
        y[i].m = F2H(mn);
        pack_q4(q, y[i].qs);
    }
}

static void from_float_q5_1(const float *x, void *dst, int64_t n) {
    block_q5_1 *y = dst;
    for (int64_t i = 0; i < n / QK5_1; i++, x += QK5_1) {
        int q[32];
        float mn;
        y[i].d = F2H(affine_levels(x, 31, q, &mn));
        y[i].m = F2H(mn);
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

static void from_float_q8_0(const float *x, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    const int64_t nb = n / QK8_0;
    for (int64_t i = 0; i < nb; i++, x += QK8_0) {
        float amax;
        signed_absmax(x, QK8_0, &amax);
        /* As the reference's x86 code: levels x * (127 / amax) rounded half to even (its portable
         * code, x * (1 / d) rounded away from zero, picks another level now and then). */
        float d = amax / 127, id = amax ? 127.f / amax : 0.0f;
        y[i].d = F2H(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)nearbyintf(x[j] * id);
    }
}

static void from_float_q8_1(const float *x, void *dst, int64_t n) {
    block_q8_1 *y = dst;
    const int64_t nb = n / QK8_1;
    for (int64_t i = 0; i < nb; i++, x += QK8_1) {
        float amax;
        signed_absmax(x, QK8_1, &amax);
        float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].d = F2H(d);
        y[i].s = F2H((float)sum * d);
    }
}

static void from_float_q8_K(const float *x, void *dst, int64_t n) {
    block_q8_K *y = dst;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float amax, max = signed_absmax(x, QK_K, &amax);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* The reference scales by -127/max (not 128) so that no value is -128. */
        float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) y[i].qs[j] = (int8_t)imin(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += y[i].qs[j * 16 + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

/* Pack the eight 6-bit scales and mins of a Q4_K/Q5_K super-block (inverse of k4_scale_min). */
static void k4_pack_scales(const int *ls, const int *lm, uint8_t *s) {
    memset(s, 0, K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] = (uint8_t)ls[j];
            s[j + 4] = (uint8_t)lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            s[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* Q4_K / Q5_K weight quantization: per 32-element sub-block an affine [min, max] range (min
 * clamped to <= 0, as the format stores a non-negative subtracted min), scale and min quantized
 * to 6 bits against the super-block's d and dmin, then each element rounded to nmax levels.
 * L receives the 256 element levels. */
static void kquant_affine(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out,
                          uint8_t *scales, uint8_t *L) {
    float sub_scale[8], sub_min[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float mn, mx;
        min_max(x + 32 * j, 32, &mn, &mx);
        if (mn > 0) mn = 0;
        sub_scale[j] = (mx - mn) / nmax;
        sub_min[j] = -mn;
        if (sub_scale[j] > max_scale) max_scale = sub_scale[j];
        if (sub_min[j] > max_min) max_min = sub_min[j];
    }
    *d_out = F2H(max_scale / 63);
    *dmin_out = F2H(max_min / 63);
    float d = H2F(*d_out), dmin = H2F(*dmin_out);
    int ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        /* Round the scale up so the sub-block's max stays representable. */
        ls[j] = d ? imin(63, (int)ceilf(sub_scale[j] / d - 1e-4f)) : 0;
        lm[j] = dmin ? imin(63, nearest_int(sub_min[j] / dmin)) : 0;
    }
    k4_pack_scales(ls, lm, scales);
    for (int j = 0; j < 8; j++) {
        float dl = d * ls[j], ml = dmin * lm[j];
        for (int l = 0; l < 32; l++) {
            int q = dl ? nearest_int((x[32 * j + l] + ml) / dl) : 0;
            L[32 * j + l] = (uint8_t)imax(0, imin(nmax, q));
        }
    }
}

static void from_float_q4_K(const float *x, void *dst, int64_t n) {
    block_q4_K *y = dst;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        uint8_t L[QK_K];
        kquant_affine(x, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        for (int j = 0; j < QK_K; j += 64)
            for (int l = 0; l < 32; l++)
                y[i].qs[j / 2 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

static void from_float_q5_K(const float *x, void *dst, int64_t n) {
    block_q5_K *y = dst;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        uint8_t L[QK_K];
        kquant_affine(x, 31, &y[i].d, &y[i].dmin, y[i].scales, L);
        memset(y[i].qh, 0, sizeof y[i].qh);
        uint8_t m1 = 1, m2 = 2;
        for (int g = 0; g < QK_K; g += 64, m1 <<= 2, m2 <<= 2) { /* groups of 64: two sub-blocks */
            for (int j = 0; j < 32; j++) {
                int l1 = L[g + j], l2 = L[g + j + 32];
                if (l1 > 15) { l1 -= 16; y[i].qh[j] |= m1; }
                if (l2 > 15) { l2 -= 16; y[i].qh[j] |= m2; }
                y[i].qs[g / 2 + j] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

/* Q6_K: per 16-element sub-block a signed scale mapping the largest-magnitude element to -32,
 * the 16 scales quantized to int8 against the super-block's d. */
static void from_float_q6_K(const float *x, void *dst, int64_t n) {
    block_q6_K *y = dst;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float sub_scale[16], max_scale = 0, max_abs_scale = 0;
        for (int j = 0; j < 16; j++) {
            float amax, max = signed_absmax(x + 16 * j, 16, &amax);
            sub_scale[j] = max / -32;
            if (fabsf(sub_scale[j]) > max_abs_scale) {
                max_abs_scale = fabsf(sub_scale[j]);
                max_scale = sub_scale[j];
            }
        }
        if (!max_abs_scale) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = F2H(1 / iscale);
        float d = H2F(y[i].d);
        uint8_t L[QK_K];
        for (int j = 0; j < 16; j++) {
            int ls = imax(-128, imin(127, nearest_int(iscale * sub_scale[j])));
            y[i].scales[j] = (int8_t)ls;
            float dl = d * ls;
            for (int l = 0; l < 16; l++) {
                int q = dl ? nearest_int(x[16 * j + l] / dl) : 0;
                L[16 * j + l] = (uint8_t)(imax(-32, imin(31, q)) + 32);
            }
        }
        for (int j = 0; j < QK_K; j += 128) {
            uint8_t *ql = y[i].ql + j / 2, *qh = y[i].qh + j / 4;
            for (int l = 0; l < 32; l++) {
                const uint8_t *q = L + j + l;
                ql[l] = (uint8_t)((q[0] & 0xF) | ((q[64] & 0xF) << 4));
                ql[l + 32] = (uint8_t)((q[32] & 0xF) | ((q[96] & 0xF) << 4));
                qh[l] = (uint8_t)((q[0] >> 4) | ((q[32] >> 4) << 2) | ((q[64] >> 4) << 4) |
                                  ((q[96] >> 4) << 6));
            }
        }
    }
}

static void from_float_f32(const float *x, void *dst, int64_t n) { memcpy(dst, x, (size_t)n * sizeof(float)); }

static void from_float_f16(const float *x, void *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = f32_to_fp16(x[i]);
}

static void from_float_bf16(const float *x, void *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = f32_to_bf16(x[i]);
}

/* ---- dequantization: type -> F32 (scalar) --------------------------------------------- */

static void to_float_f32(const void *src, float *y, int64_t n) { memcpy(y, src, (size_t)n * 4); }

static void to_float_f16(const void *src, float *y, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) y[i] = H2F(h[i]);
}

static void to_float_bf16(const void *src, float *y, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) y[i] = bf16_to_f32(h[i]);
}

/* The 32 five-bit values of a Q5 block, unsigned (0..31). */
static inline void unpack_q5(const uint8_t qs[16], const uint8_t qh_in[4], int *q) {
    uint32_t qh;
    memcpy(&qh, qh_in, 4);
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
        q[j + 16] = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
    }
}

/* The 32 levels of one Q8_0 / Q4_0 / Q5_0 block (signed, offset removed) or Q4_1 / Q5_1 block
 * (unsigned), in element order. */
static inline void block_levels(enum ggml_type t, const uint8_t *blk, int *q) {
    switch (t) {
    case GGML_TYPE_Q8_0:
        for (int j = 0; j < 32; j++) q[j] = ((const block_q8_0 *)blk)->qs[j];
        break;
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: {
        const uint8_t *qs = t == GGML_TYPE_Q4_0 ? ((const block_q4_0 *)blk)->qs : ((const block_q4_1 *)blk)->qs;
        int off = t == GGML_TYPE_Q4_0 ? 8 : 0;
        for (int j = 0; j < 16; j++) {
            q[j] = (qs[j] & 0xF) - off;
            q[j + 16] = (qs[j] >> 4) - off;
        }
        break;
    }
    case GGML_TYPE_Q5_0:
        unpack_q5(((const block_q5_0 *)blk)->qs, ((const block_q5_0 *)blk)->qh, q);
        for (int j = 0; j < 32; j++) q[j] -= 16;
        break;
    default: /* Q5_1 */
        unpack_q5(((const block_q5_1 *)blk)->qs, ((const block_q5_1 *)blk)->qh, q);
        break;
    }
}

/* Whether a 32-element type stores x = d*q + m (its block starts with d, m) or x = d*q (d). */
static inline bool has_min(enum ggml_type t) { return t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1; }

static inline void to_float_x(enum ggml_type t, const void *src, float *y, int64_t n) {
    const uint8_t *blk = src;
    const size_t size = ggml_type_info(t)->size;
    for (int64_t i = 0; i < n / 32; i++, blk += size, y += 32) {
        int q[32];
        block_levels(t, blk, q);
        const uint16_t *dm = (const uint16_t *)blk;
        float d = H2F(dm[0]);
        if (has_min(t)) {
            float m = H2F(dm[1]);
            for (int j = 0; j < 32; j++) y[j] = d * q[j] + m;
        } else {
            for (int j = 0; j < 32; j++) y[j] = d * q[j];
        }
    }
}

static void to_float_q4_0(const void *src, float *y, int64_t n) { to_float_x(GGML_TYPE_Q4_0, src, y, n); }
static void to_float_q4_1(const void *src, float *y, int64_t n) { to_float_x(GGML_TYPE_Q4_1, src, y, n); }
static void to_float_q5_0(const void *src, float *y, int64_t n) { to_float_x(GGML_TYPE_Q5_0, src, y, n); }
static void to_float_q5_1(const void *src, float *y, int64_t n) { to_float_x(GGML_TYPE_Q5_1, src, y, n); }
static void to_float_q8_0(const void *src, float *y, int64_t n) { to_float_x(GGML_TYPE_Q8_0, src, y, n); }

static void to_float_q8_1(const void *src, float *y, int64_t n) {
    const block_q8_1 *b = src;
    for (int64_t i = 0; i < n / QK8_1; i++, y += QK8_1) {
        float d = H2F(b[i].d);
        for (int j = 0; j < 32; j++) y[j] = d * b[i].qs[j];
    }
}

static void to_float_q8_K(const void *src, float *y, int64_t n) {
    const block_q8_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K)
        for (int j = 0; j < QK_K; j++) y[j] = b[i].d * b[i].qs[j];
}

/* The 256 levels of a Q4_K (qh NULL) or Q5_K super-block, in element order. */
static inline void unpack_k45(const uint8_t *qs, const uint8_t *qh, uint8_t *L) {
    for (int g = 0; g < 4; g++) { /* 4 groups of 64: low nibbles then high nibbles of 32 bytes */
        for (int l = 0; l < 32; l++) {
            int lo = qs[32 * g + l] & 0xF, hi = qs[32 * g + l] >> 4;
            if (qh) {
                lo |= ((qh[l] >> (2 * g)) & 1) << 4;
                hi |= ((qh[l] >> (2 * g + 1)) & 1) << 4;
            }
            L[64 * g + l] = (uint8_t)lo;
            L[64 * g + 32 + l] = (uint8_t)hi;
        }
    }
}

/* Super-block i of a Q4_K (q5 = 0) or Q5_K row: its levels into L; returns the block, whose
 * first 16 bytes (d, dmin, scales[12]) the two layouts share. */
static const uint8_t *k45_block(const void *row, int64_t i, int q5, uint8_t *L) {
    if (q5) {
        const block_q5_K *b = (const block_q5_K *)row + i;
        unpack_k45(b->qs, b->qh, L);
        return (const uint8_t *)b;
    }
    const block_q4_K *b = (const block_q4_K *)row + i;
    unpack_k45(b->qs, NULL, L);
    return (const uint8_t *)b;
}

static void to_float_k45(const void *src, float *y, int64_t n, int q5) {
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        uint8_t L[QK_K];
        const uint8_t *blk = k45_block(src, i, q5, L);
        const uint16_t *dd = (const uint16_t *)blk;
        float d = H2F(dd[0]), m = H2F(dd[1]);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, mn;
            k4_scale_min(j, blk + 4, &sc, &mn);
            float d1 = d * sc, m1 = m * mn;
            for (int l = 0; l < 32; l++) y[32 * j + l] = d1 * L[32 * j + l] - m1;
        }
    }
}

static void to_float_q4_K(const void *src, float *y, int64_t n) { to_float_k45(src, y, n, 0); }
static void to_float_q5_K(const void *src, float *y, int64_t n) { to_float_k45(src, y, n, 1); }

/* The 256 signed levels (-32..31) of a Q6_K super-block, in element order. */
static inline void unpack_q6_K(const block_q6_K *b, int8_t *L) {
    for (int h = 0; h < 2; h++) { /* two halves of 128 elements */
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        int8_t *q = L + 128 * h;
        for (int l = 0; l < 32; l++) {
            q[l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
            q[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            q[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            q[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

static void to_float_q6_K(const void *src, float *y, int64_t n) {
    const block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        int8_t L[QK_K];
        unpack_q6_K(&b[i], L);
        float d = H2F(b[i].d);
        for (int j = 0; j < QK_K; j++) y[j] = d * b[i].scales[j / 16] * L[j];
    }
}


/* ---- dot products (scalar): integer inner sums per block, as the reference ------------ */

/* GCC's _mm512_reduce_add_ps: halves, quarters, then (t0 + t2) + (t1 + t3). */
float quant_fold16(const float l[16]) {
    float t8[8], t4[4];
    for (int i = 0; i < 8; i++) t8[i] = l[i + 8] + l[i];
    for (int i = 0; i < 4; i++) t4[i] = t8[i + 4] + t8[i];
    return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}
/* The order of the SIMD kernels (and of math/attn.h): 16 lanes of fused multiply-adds over whole
 * 16s, folded as (lane k + lane k+8), then + 4 apart, then (0 + 2) + (1 + 3); the rest added
 * one rounded product at a time. */
static float dot_f32(int64_t n, const void *w, const void *x) {
    const float *a = w, *b = x;
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) acc[l] = fmaf(a[i + l], b[i + l], acc[l]);
    float s = quant_fold16(acc);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* The reference's ggml_vec_dot_f16 of an AVX-512 build: four accumulators of 16 lanes over
 * steps of 64 elements, accumulators (0+2) + (1+3), quant_fold16, the tail (n % 64) added in double. */
static float dot_f16(int64_t n, const void *w, const void *x) {
    const uint16_t *a = w, *b = x;
    int64_t np = n & ~(int64_t)63;
    double s = 0;
    if (np > 0) {
        float acc[4][16] = {{0}}, x0[16];
        for (int64_t i = 0; i < np; i += 64)
            for (int j = 0; j < 4; j++)
                for (int k = 0; k < 16; k++) acc[j][k] = fmaf(H2F(a[i + 16 * j + k]), H2F(b[i + 16 * j + k]), acc[j][k]);
        for (int k = 0; k < 16; k++) x0[k] = (acc[0][k] + acc[2][k]) + (acc[1][k] + acc[3][k]);
        s = quant_fold16(x0);
    }
    for (int64_t i = np; i < n; i++) s += (double)(H2F(a[i]) * H2F(b[i]));
    return (float)s;
}

static float dot_bf16(int64_t n, const void *w, const void *x) {
    const uint16_t *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(bf16_to_f32(a[i]) * bf16_to_f32(b[i]));
    return (float)s;
}

/* The fold of 8 float lanes that ends the quantized dot products (hsum_ps of simd_avx2.h):
 * s_k = acc_k + acc_{k+4}, then (s0 + s2) + (s1 + s3). */
static inline float fold8(const float acc[8]) {
    float s[4];
    for (int k = 0; k < 4; k++) s[k] = acc[k] + acc[k + 4];
    return (s[0] + s[2]) + (s[1] + s[3]);
}

/* Q8_0 / Q4_0 / Q5_0 . Q8_0, in the order of the reference's x86 (AVX2) code, which every SIMD
 * kernel here follows: per 32-element block, 8 integer lanes, lane k the sum of the products of
 * elements 4k..4k+3; acc_k = fmaf(lane_k, d_w * d_x, acc_k) in 8 float lanes carried over the
 * blocks of the row; then fold8.
 * Q4_1 / Q5_1 . Q8_1: the same lanes (unsigned levels) with d_w * d_x, plus the sum over blocks,
 * in block order, of m_w * s_x (s_x = d_x * sum(q8), stored with the block), added after the fold. */
static inline float dot_x(enum ggml_type t, int64_t n, const void *w, const void *x) {
    const uint8_t *blk = w;
    const size_t size = ggml_type_info(t)->size;
    float acc[8] = {0}, mins = 0;
    for (int64_t i = 0; i < n / 32; i++, blk += size) {
        int q[32];
        block_levels(t, blk, q);
        const uint16_t *dm = (const uint16_t *)blk;
        const int8_t *q8;
        float d;
        if (has_min(t)) {
            const block_q8_1 *b = (const block_q8_1 *)x + i;
            q8 = b->qs;
            d = H2F(dm[0]) * H2F(b->d);
            mins += H2F(dm[1]) * H2F(b->s);
        } else {
            const block_q8_0 *b = (const block_q8_0 *)x + i;
            q8 = b->qs;
            d = H2F(dm[0]) * H2F(b->d);
        }
        for (int k = 0; k < 8; k++) {
            int lane = 0;
            for (int l = 4 * k; l < 4 * k + 4; l++) lane += q[l] * q8[l];
            acc[k] = fmaf((float)lane, d, acc[k]);
        }
    }
    return fold8(acc) + mins;
}

static float dot_q4_0(int64_t n, const void *w, const void *x) { return dot_x(GGML_TYPE_Q4_0, n, w, x); }

/* Q4_0 . Q8_0 as the reference's repacked Q4_0 (8x8 interleaved GEMV/GEMM, what its CPU backend
 * uses for Q4_0 matrices on AVX2 machines): one float chain, s = fma((float)isum_block, d_w*d_x, s).
 * Only MATMUL_REFERENCE uses it: our SIMD kernels keep dot_x's 8 lanes. */
float quant_dot_q4_0_reference(int64_t n, const void *w, const void *x) {
    const block_q4_0 *blk = w;
    const block_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int q[32], sumi = 0;
        block_levels(GGML_TYPE_Q4_0, (const uint8_t *)&blk[i], q);
        for (int j = 0; j < 32; j++) sumi += q[j] * b[i].qs[j];
        s = fmaf((float)sumi, H2F(blk[i].d) * H2F(b[i].d), s);
    }
    return s;
}
static float dot_q4_1(int64_t n, const void *w, const void *x) { return dot_x(GGML_TYPE_Q4_1, n, w, x); }
static float dot_q5_0(int64_t n, const void *w, const void *x) { return dot_x(GGML_TYPE_Q5_0, n, w, x); }
static float dot_q5_1(int64_t n, const void *w, const void *x) { return dot_x(GGML_TYPE_Q5_1, n, w, x); }
static float dot_q8_0(int64_t n, const void *w, const void *x) { return dot_x(GGML_TYPE_Q8_0, n, w, x); }

/* Q4_K/Q5_K . Q8_K as the reference's repacked Q4_K GEMV: per super-block the integers
 * A = sum_j sc_j * (q . q8 over sub-block j) and M = sum_j m_j * (sum of q8 over sub-block j),
 * two float chains a = fma((float)A, d_w*d_x, a), m = fma((float)M, dmin_w*d_x, m), result a - m.
 * With gemm set, the GEMM's order (activation rows in groups of four): A and M of each 64-element
 * step (two sub-blocks) go into the chains separately. Q5_K has no reference data; it shares the
 * Q4_K form. */
static float dot_k45_order(int64_t n, const void *w, const void *x, int q5, bool gemm) {
    const block_q8_K *b = x;
    float a = 0, m = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t L[QK_K];
        const uint8_t *blk = k45_block(w, i, q5, L);
        const uint16_t *dd = (const uint16_t *)blk;
        float d = H2F(dd[0]) * b[i].d, dmin = H2F(dd[1]) * b[i].d;
        int sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, mn;
            k4_scale_min(j, blk + 4, &sc, &mn);
            int si = 0;
            for (int l = 0; l < 32; l++) si += L[32 * j + l] * b[i].qs[32 * j + l];
            sumi += sc * si;
            summ += mn * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
            if (gemm && j % 2 == 1) {
                a = fmaf((float)sumi, d, a);
                m = fmaf((float)summ, dmin, m);
                sumi = summ = 0;
            }
        }
        if (!gemm) {
            a = fmaf((float)sumi, d, a);
            m = fmaf((float)summ, dmin, m);
        }
    }
    return a - m;
}

static float dot_q4_K(int64_t n, const void *w, const void *x) { return dot_k45_order(n, w, x, 0, false); }
static float dot_q5_K(int64_t n, const void *w, const void *x) { return dot_k45_order(n, w, x, 1, false); }

float quant_dot_q4_K_gemm(int64_t n, const void *w, const void *x) { return dot_k45_order(n, w, x, 0, true); }

/* Q6_K . Q8_K as the reference's x86 vec_dot: 8 lanes, lane k of super-block i the integer
 * sum over its eight 32-element groups g of scale[2g + k/4] * (q . q8 over elements 32g+4k..+3),
 * lane_k = fma(d_x*d_w, (float)isum_k, lane_k) super-block after super-block, then hsum8. */
static float dot_q6_K(int64_t n, const void *w, const void *x) {
    const block_q6_K *a = w;
    const block_q8_K *b = x;
    float lanes[8] = {0};
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t L[QK_K];
        unpack_q6_K(&a[i], L);
        float d = b[i].d * H2F(a[i].d);
        for (int k = 0; k < 8; k++) {
            int li = 0;
            for (int g = 0; g < 8; g++) {
                int si = 0;
                for (int e = 32 * g + 4 * k; e < 32 * g + 4 * k + 4; e++) si += L[e] * b[i].qs[e];
                li += a[i].scales[2 * g + k / 4] * si;
            }
            lanes[k] = fmaf(d, (float)li, lanes[k]);
        }
    }
    return fold8(lanes);
}

/* ---- the reference's float orders for F16 and F32 rows ------------------------------------ */

float quant_dot_f32_lanes16(int64_t n, const float *a, const float *b) {
    float acc[16] = {0};
    for (int64_t l = 0; l < n; l++) acc[l % 16] = fmaf(a[l], b[l], acc[l % 16]);
    return quant_fold16(acc);
}

float quant_dot_f32_vec_f16(int64_t n, int64_t n_pad, const float *a, const float *b) {
    int64_t np = n_pad & ~(int64_t)63;
    double sum = 0;
    if (np > 0) {
        float acc[4][16] = {{0}}, x0[16];
        for (int64_t i = 0; i < np && i < n; i += 64)
            for (int j = 0; j < 4; j++)
                for (int k = 0; k < 16; k++) {
                    int64_t e = i + 16 * j + k;
                    if (e < n) acc[j][k] = fmaf(a[e], b[e], acc[j][k]);
                }
        for (int k = 0; k < 16; k++) x0[k] = (acc[0][k] + acc[2][k]) + (acc[1][k] + acc[3][k]);
        sum = quant_fold16(x0);
    }
    for (int64_t i = np; i < n; i++) sum += (double)(a[i] * b[i]);
    return (float)sum;
}

/* F16 . F16 of a batch of 2+ rows (tinyBLAS<16>): lanes16 over the converted values. */
float quant_dot_f16_tinyblas(int64_t n, const void *w, const void *x) {
    const uint16_t *a = w, *b = x;
    float acc[16] = {0};
    for (int64_t l = 0; l < n; l++) acc[l % 16] = fmaf(H2F(a[l]), H2F(b[l]), acc[l % 16]);
    return quant_fold16(acc);
}

/* ggml's vectorized expf of an AVX-512 build, one lane: n = round(x / ln 2), a degree-5
 * polynomial j with j(0) = 1 in the reduced argument b, result j * 2^n (scalef). */
float quant_expf(float x) {
    const float r = 0x1.8p23f;
    float z = fmaf(x, 0x1.715476p+0f, r);
    float n = z - r;
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    float u = b * b;
    float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                   fmaf(0x1.ffffecp-1f, b, 1.0f));
    if (!(fabsf(n) <= 192)) return n <= 0 ? 0.0f : INFINITY; /* also x = -inf (NaN n) -> 0 */
    /* j is in [0.70, 1.42]: for -125 <= n <= 127, j * 2^n is a normal float, so multiplying by
     * the power of two is exact, the very value of ldexpf, without its libm call (a call per
     * element of the softmax and SiLU would be a noticeable share of a decode step's CPU). */
    if (n >= -125 && n <= 127) {
        uint32_t bits = (uint32_t)((int)n + 127) << 23;
        float p2;
        memcpy(&p2, &bits, sizeof p2);
        return j * p2;
    }
    return ldexpf(j, (int)n);
}

/* y[i] = quant_expf(x[i]), bit for bit, 16 at a time: the same operations written so that the
 * compiler vectorizes them (fmaf -> vfmadd, the power of two from integer bits); lanes outside
 * the exact-scaling range, rare (results below 2^-125, overflow, -inf, NaN), are redone by
 * quant_expf. x and y may be the same array. */
void quant_expf_n(const float *x, float *y, int64_t n) {
    const float r = 0x1.8p23f;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        float nn[16], out[16];
        int32_t odd = 0;
        for (int k = 0; k < 16; k++) {
            float xv = x[i + k];
            float z = fmaf(xv, 0x1.715476p+0f, r);
            float e = z - r;
            float b = fmaf(-e, 0x1.7f7d1cp-20f, fmaf(-e, 0x1.62e4p-1f, xv));
            float u = b * b;
            float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, fmaf(0x1.ffffecp-1f, b, 1.0f));
            bool in = e >= -125.0f && e <= 127.0f;
            float ec = in ? e : 0.0f;
            int32_t bits = ((int32_t)ec + 127) << 23;
            float p2;
            memcpy(&p2, &bits, sizeof p2);
            out[k] = j * p2;
            nn[k] = e;
            odd |= !in;
        }
        float xs[16];
        memcpy(xs, x + i, sizeof xs);
        memcpy(y + i, out, sizeof out);
        if (odd)
            for (int k = 0; k < 16; k++)
                if (!(nn[k] >= -125.0f && nn[k] <= 127.0f)) y[i + k] = quant_expf(xs[k]);
    }
    for (; i < n; i++) y[i] = quant_expf(x[i]);
}

const struct quant_kernels quant_kernels_scalar = {
    .vec_dot = {
        [GGML_TYPE_F32] = dot_f32, [GGML_TYPE_F16] = dot_f16, [GGML_TYPE_BF16] = dot_bf16,
        [GGML_TYPE_Q4_0] = dot_q4_0, [GGML_TYPE_Q4_1] = dot_q4_1, [GGML_TYPE_Q5_0] = dot_q5_0,
        [GGML_TYPE_Q5_1] = dot_q5_1, [GGML_TYPE_Q8_0] = dot_q8_0, [GGML_TYPE_Q4_K] = dot_q4_K,
        [GGML_TYPE_Q5_K] = dot_q5_K, [GGML_TYPE_Q6_K] = dot_q6_K,
    },
    .from_float = {
        [GGML_TYPE_F32] = from_float_f32, [GGML_TYPE_F16] = from_float_f16,
        [GGML_TYPE_BF16] = from_float_bf16, [GGML_TYPE_Q4_0] = from_float_q4_0,
        [GGML_TYPE_Q4_1] = from_float_q4_1, [GGML_TYPE_Q5_0] = from_float_q5_0,
        [GGML_TYPE_Q5_1] = from_float_q5_1, [GGML_TYPE_Q8_0] = from_float_q8_0,
        [GGML_TYPE_Q8_1] = from_float_q8_1, [GGML_TYPE_Q4_K] = from_float_q4_K,
        [GGML_TYPE_Q5_K] = from_float_q5_K, [GGML_TYPE_Q6_K] = from_float_q6_K,
        [GGML_TYPE_Q8_K] = from_float_q8_K,
    },
    .to_float = {
        [GGML_TYPE_F32] = to_float_f32, [GGML_TYPE_F16] = to_float_f16,
        [GGML_TYPE_BF16] = to_float_bf16, [GGML_TYPE_Q4_0] = to_float_q4_0,
        [GGML_TYPE_Q4_1] = to_float_q4_1, [GGML_TYPE_Q5_0] = to_float_q5_0,
        [GGML_TYPE_Q5_1] = to_float_q5_1, [GGML_TYPE_Q8_0] = to_float_q8_0,
        [GGML_TYPE_Q8_1] = to_float_q8_1, [GGML_TYPE_Q4_K] = to_float_q4_K,
        [GGML_TYPE_Q5_K] = to_float_q5_K, [GGML_TYPE_Q6_K] = to_float_q6_K,
        [GGML_TYPE_Q8_K] = to_float_q8_K,
    },
};

/* ---- dispatch -------------------------------------------------------------------------- */

/* A level's tables, earlier ones first: AVX-512 has the K-quant kernels of kquant_avx512.c in a
 * table of their own (kernels.h), ahead of quant_avx512.c's. */
#define TABLES_PER_LEVEL 3
static const struct quant_kernels *const level_tables[SIMD_LEVEL_COUNT][TABLES_PER_LEVEL] = {
    [SIMD_SCALAR] = {&quant_kernels_scalar, &quant_kernels_scalar_lowbit},
    [SIMD_AVX2] = {&quant_kernels_avx2, &quant_kernels_avx2_lowbit},
    [SIMD_AVX512] = {&quant_kernels_avx512_k, &quant_kernels_avx512, &quant_kernels_avx512_lowbit},
};

/* The entry `field` of type t at exactly level l, or NULL. */
#define LEVEL_ENTRY(l, field, t, out)                                          \
    do {                                                                       \
        (out) = NULL;                                                          \
        for (int k_ = 0; k_ < TABLES_PER_LEVEL && !(out); k_++)                \
            if (level_tables[l][k_]) (out) = level_tables[l][k_]->field[t];    \
    } while (0)

const char *simd_level_name(enum simd_level level) {
    static const char *const names[SIMD_LEVEL_COUNT] = {"scalar", "avx2", "avx512"};
    return level < SIMD_LEVEL_COUNT ? names[level] : "?";
}

bool simd_level_supported(enum simd_level level) {
    switch (level) {
    case SIMD_SCALAR: return true;
    case SIMD_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    case SIMD_AVX512:
        return simd_level_supported(SIMD_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
    default: return false;
    }
}

enum simd_level simd_level_best(void) {
    for (int l = SIMD_LEVEL_COUNT - 1; l > SIMD_SCALAR; l--)
        if (simd_level_supported((enum simd_level)l)) return (enum simd_level)l;
    return SIMD_SCALAR;
}

quant_vec_dot_fn quant_get_vec_dot(enum simd_level level, enum ggml_type t) {
    if (t >= GGML_TYPE_COUNT || level >= SIMD_LEVEL_COUNT) return NULL;
    quant_vec_dot_fn f;
    for (int l = level; l >= SIMD_SCALAR; l--) /* a level's table may defer to a narrower one */ {
        LEVEL_ENTRY(l, vec_dot, t, f);
        if (f) return f;
    }
    return NULL;
}

quant_from_float_fn quant_get_from_float(enum simd_level level, enum ggml_type t) {
    if (t >= GGML_TYPE_COUNT || level >= SIMD_LEVEL_COUNT) return NULL;
    quant_from_float_fn f;
    for (int l = level; l >= SIMD_SCALAR; l--) {
        LEVEL_ENTRY(l, from_float, t, f);
        if (f) return f;
    }
    return NULL;
}

quant_vec_dot4_fn quant_get_vec_dot4(enum simd_level level, enum ggml_type t) {
    if (t >= GGML_TYPE_COUNT || level >= SIMD_LEVEL_COUNT) return NULL;
    quant_vec_dot4_fn f;
    LEVEL_ENTRY(level, vec_dot4, t, f);
    return f;
}

quant_vec_dotr_fn quant_get_vec_dotr(enum simd_level level, enum ggml_type t) {
    if (t >= GGML_TYPE_COUNT || level >= SIMD_LEVEL_COUNT) return NULL;
    quant_vec_dotr_fn f;
    LEVEL_ENTRY(level, vec_dotr, t, f);
    return f;
}

quant_to_float_fn quant_get_to_float(enum simd_level level, enum ggml_type t) {
    if (t >= GGML_TYPE_COUNT || level >= SIMD_LEVEL_COUNT) return NULL;
    quant_to_float_fn f;
    for (int l = level; l >= SIMD_SCALAR; l--) {
        LEVEL_ENTRY(l, to_float, t, f);
        if (f) return f;
    }
    return NULL;
}

bool quant_supported(enum ggml_type t) {
    switch (t) {
    case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16:
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1:
    case GGML_TYPE_Q8_0: case GGML_TYPE_Q8_1:
    case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K: case GGML_TYPE_Q8_K:
    case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_IQ4_NL: case GGML_TYPE_IQ4_XS:
        return true;
    default:
        return false;
    }
}

enum ggml_type quant_vec_dot_type(enum ggml_type w) {
    switch (w) {
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0: case GGML_TYPE_Q8_0: case GGML_TYPE_IQ4_NL: return GGML_TYPE_Q8_0;
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: return GGML_TYPE_Q8_1;
    case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K:
    case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_IQ4_XS: return GGML_TYPE_Q8_K;
    default: return w; /* F32, F16, BF16 dot with their own type */
    }
}

/* ---- the public entry points ------------------------------------------------------------ */

/* The widest level's kernel of every type, resolved once at load time (a constructor, before
 * main and before any thread exists) and only read afterwards: the entry points below are called
 * per row and even per attention head, where re-checking the CPU each time would show. */
static struct quant_kernels best;

__attribute__((constructor)) static void resolve_best_kernels(void) {
    __builtin_cpu_init();
    enum simd_level level = simd_level_best();
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        best.vec_dot[t] = quant_get_vec_dot(level, (enum ggml_type)t);
        best.to_float[t] = quant_get_to_float(level, (enum ggml_type)t);
        best.from_float[t] = quant_get_from_float(level, (enum ggml_type)t);
    }
}

void quant_from_float(enum ggml_type t, const float *x, void *dst, int64_t n) {
    ASSERT(quant_supported(t) && best.from_float[t]);
    best.from_float[t](x, dst, n);
}

void quant_to_float(enum ggml_type t, const void *src, float *y, int64_t n) {
    ASSERT(quant_supported(t) && best.to_float[t]);
    best.to_float[t](src, y, n);
}

float quant_vec_dot(enum ggml_type w, int64_t n, const void *w_row, const void *x_row) {
    ASSERT(quant_supported(w) && best.vec_dot[w]);
    return best.vec_dot[w](n, w_row, x_row);
}
