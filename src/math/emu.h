/* emu.h: EXPERIMENT: scalar emulations of the reference's float orders. */
#ifndef UVLM_MATH_EMU_H
#define UVLM_MATH_EMU_H
#include <math.h>
#include <stdint.h>
#include <string.h>

/* 8 lanes: (l_k + l_{k+4}) then (r0 + r2) + (r1 + r3) (hsum_float_8, tinyBLAS hsum(__m256)). */
static inline float emu_hsum8(const float *l) {
    float r[4];
    for (int k = 0; k < 4; k++) r[k] = l[k + 4] + l[k];
    return (r[0] + r[2]) + (r[1] + r[3]);
}
/* GCC's _mm512_reduce_add_ps. */
static inline float emu_hsum16(const float *l) {
    float t3[8], t6[4];
    for (int i = 0; i < 8; i++) t3[i] = l[i + 8] + l[i];
    for (int i = 0; i < 4; i++) t6[i] = t3[i + 4] + t3[i];
    return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}
/* ggml's GGML_F32x8_REDUCE tail: lo+hi, hadd, hadd. */
static inline float emu_hadd8(const float *l) {
    float t0[4];
    for (int k = 0; k < 4; k++) t0[k] = l[k] + l[k + 4];
    return (t0[0] + t0[1]) + (t0[2] + t0[3]);
}
static inline float emu_hsum(const float *l, int kn) { return kn == 16 ? emu_hsum16(l) : emu_hsum8(l); }

/* tinyBLAS: one accumulator of kn lanes over k (zero padded), then hsum. */
static inline float emu_tinyblas(const float *a, const float *b, int64_t n, int kn) {
    float acc[16] = {0};
    for (int64_t l = 0; l < n; l++) acc[l % kn] = fmaf(a[l], b[l], acc[l % kn]);
    return emu_hsum(acc, kn);
}

/* ggml_vec_dot_f16 on x86: 4 accumulators of epr lanes over STEP = 4*epr elements of the first
 * np = npad & ~(STEP-1); reduce; leftovers [np, n) in double. */
static inline float emu_vecdot_f16(const float *a, const float *b, int64_t n, int64_t npad, int epr) {
    int step = 4 * epr;
    int64_t np = npad & ~(int64_t)(step - 1);
    float acc[4][16] = {{0}};
    for (int64_t i = 0; i < np; i += step)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < epr; k++) {
                int64_t idx = i + j * epr + k;
                if (idx < n) acc[j][k] = fmaf(a[idx], b[idx], acc[j][k]);
            }
    double sumf = 0;
    if (np > 0) {
        float x0[16];
        for (int k = 0; k < epr; k++) x0[k] = (acc[0][k] + acc[2][k]) + (acc[1][k] + acc[3][k]);
        sumf = epr == 16 ? emu_hsum16(x0) : emu_hadd8(x0);
    }
    for (int64_t i = np; i < n; i++) sumf += (double)(a[i] * b[i]);
    return (float)sumf;
}

static inline float emu_bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t emu_f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* ggml_v_expf, one lane. */
static inline float emu_expf(float x) {
    const float r = 0x1.8p23f;
    float z = fmaf(x, 0x1.715476p+0f, r);
    float n = z - r;
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    uint32_t e = emu_f_bits(z) << 23;
    float k = emu_bits_f(e + emu_f_bits(1.0f));
    float u = b * b;
    float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                   0x1.ffffecp-1f * b);
    if (!(fabsf(n) > 126)) return fmaf(j, k, k);
    uint32_t g = n <= 0 ? 0x82000000u : 0;
    float s1 = emu_bits_f(g + 0x7f000000u);
    float s2 = emu_bits_f(e - g);
    if (fabsf(n) > 192) return s1 * s1;
    return fmaf(s2, j, s2) * s1;
}
#endif
/* ggml_v_expf of an AVX-512 build (scalef form), one lane. */
static inline float emu_expf512(float x) {
    const float r = 0x1.8p23f;
    float z = fmaf(x, 0x1.715476p+0f, r);
    float n = z - r;
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    float u = b * b;
    float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                   fmaf(0x1.ffffecp-1f, b, 1.0f));
    if (fabsf(n) > 192) return n <= 0 ? 0.0f : INFINITY;
    return ldexpf(j, (int)n);
}
