/* Tests of math/quant.h: fp16/bf16, hand-made blocks of known value, round trips, reference
 * activation quantization, and every SIMD kernel against the scalar one. */
#include "test.h"
#include "math/blocks.h"
#include "math/kernels.h"
#include "math/quant.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const enum ggml_type weight_types[] = {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
    GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
    GGML_TYPE_Q6_K, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
};
#define N_WEIGHT_TYPES (sizeof weight_types / sizeof *weight_types)

/* Deterministic pseudo-normal numbers (xorshift + sum of uniforms). */
static uint64_t rng_state = 88172645463325252ull;
static float nrand(void) { return test_nrand(&rng_state); }

TEST(quant_fp16_known_values) {
    CHECK_EQ_INT(f32_to_fp16(1.0f), 0x3c00);
    CHECK_EQ_INT(f32_to_fp16(-2.0f), 0xc000);
    CHECK_EQ_INT(f32_to_fp16(0.5f), 0x3800);
    CHECK_EQ_INT(f32_to_fp16(65504.0f), 0x7bff);
    CHECK_EQ_INT(f32_to_fp16(65520.0f), 0x7c00);          /* rounds to infinity */
    CHECK_EQ_INT(f32_to_fp16(5.9604644775390625e-8f), 1);  /* smallest subnormal */
    CHECK_EQ_INT(f32_to_fp16(1.0f + 1.0f / 2048), 0x3c00); /* tie rounds to even */
    CHECK_EQ_INT(f32_to_fp16(1.0f + 3.0f / 2048), 0x3c02); /* tie rounds to even (up) */
    CHECK(fp16_to_f32(0x3555) > 0.333f && fp16_to_f32(0x3555) < 0.3334f);
    CHECK(fp16_to_f32(0x0001) == 5.9604644775390625e-8f);
    CHECK(isinf(fp16_to_f32(0xfc00)) && fp16_to_f32(0xfc00) < 0);
    CHECK(isnan(fp16_to_f32(f32_to_fp16(NAN))));
    CHECK_EQ_INT(f32_to_bf16(1.0f), 0x3f80);
    CHECK(bf16_to_f32(0xc040) == -3.0f);
}

TEST(quant_fp16_round_trips_every_half) {
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN payloads */
        CHECK_EQ_INT(f32_to_fp16(fp16_to_f32((uint16_t)h)), h);
    }
}

TEST(quant_decodes_handmade_blocks) {
    float y[QK_K];
    block_q4_0 b40 = {.d = f32_to_fp16(0.5f)};
    b40.qs[0] = 0x9F; /* element 0: 15 - 8 = 7, element 16: 9 - 8 = 1 */
    b40.qs[3] = 0x08;
    quant_to_float(GGML_TYPE_Q4_0, &b40, y, 32);
    CHECK(y[0] == 3.5f && y[16] == 0.5f && y[3] == 0.0f && y[19] == -4.0f && y[1] == -4.0f);

    block_q4_1 b41 = {.d = f32_to_fp16(2.0f), .m = f32_to_fp16(-1.0f)};
    b41.qs[5] = 0x3A;
    quant_to_float(GGML_TYPE_Q4_1, &b41, y, 32);
    CHECK(y[5] == 19.0f && y[21] == 5.0f && y[0] == -1.0f);

    block_q5_0 b50 = {.d = f32_to_fp16(0.25f), .qh = {0x01, 0, 0, 0x80}};
    b50.qs[0] = 0xF3; /* element 0: 3 | 16 = 19, element 16: 15 */
    b50.qs[15] = 0x20; /* element 31: 2 | 16 (qh bit 31) = 18, element 15: 0 */
    quant_to_float(GGML_TYPE_Q5_0, &b50, y, 32);
    CHECK(y[0] == 0.75f && y[16] == -0.25f && y[31] == 0.5f && y[15] == -4.0f);

    block_q8_0 b80 = {.d = f32_to_fp16(0.125f)};
    b80.qs[7] = -100;
    quant_to_float(GGML_TYPE_Q8_0, &b80, y, 32);
    CHECK(y[7] == -12.5f && y[6] == 0.0f);

    /* Q4_K: sub-block 0 scale 1 min 2; sub-block 5 scale 0x25 (top bits in byte 1), min 0x13. */
    block_q4_K b4k = {.d = f32_to_fp16(1.0f), .dmin = f32_to_fp16(0.5f)};
    b4k.scales[0] = 1;
    b4k.scales[4] = 2;
    b4k.scales[9] = 0x35;            /* low nibbles: scale 5, min 3 */
    b4k.scales[1] = 2 << 6;          /* scale of sub-block 5, bits 4-5 = 2 -> 0x25 = 37 */
    b4k.scales[5] = 1 << 6;          /* min of sub-block 5, bits 4-5 = 1 -> 0x13 = 19 */
    b4k.qs[0] = 0x7;                 /* element 0 (sub-block 0): 1*7 - 0.5*2 = 6 */
    b4k.qs[64 + 3] = 0x40;           /* element 160+3 (sub-block 5, high nibbles): 37*4 - 9.5 */
    quant_to_float(GGML_TYPE_Q4_K, &b4k, y, QK_K);
    CHECK(y[0] == 6.0f && y[1] == -1.0f && y[163] == 138.5f && y[160] == -9.5f);

    /* Q6_K: element 0 = ql low nibble + qh bits 0-1; element 96 = ql[32] high + qh bits 6-7. */
    block_q6_K b6k = {.d = f32_to_fp16(0.5f)};
    for (int j = 0; j < 16; j++) b6k.scales[j] = (int8_t)(j - 8);
    b6k.ql[0] = 0x05;
    b6k.qh[0] = 0x03 | (0x02 << 6);
    b6k.ql[32] = 0x70;
    quant_to_float(GGML_TYPE_Q6_K, &b6k, y, QK_K);
    /* el 0: q = 5 | 48 = 53 - 32 = 21, scale -8: 0.5*-8*21 = -84.
     * el 96: q = 7 | 32 = 39 - 32 = 7, scale index 6: -2 -> 0.5*-2*7 = -7.
     * el 17 (scale 1 -> -7): q = 0 - 32 -> 0.5 * -7 * -32 = 112. */
    CHECK(y[0] == -84.0f && y[96] == -7.0f && y[17] == 112.0f);
}

TEST(quant_activation_quantization_follows_reference) {
    float x[QK_K];
    for (int i = 0; i < QK_K; i++) x[i] = (float)(i % 32) - 7.5f;
    block_q8_0 q8[QK_K / 32];
    quant_from_float(GGML_TYPE_Q8_0, x, q8, QK_K);
    /* amax 23.5: d = 23.5/127, element 0: round(-7.5 * 127/23.5) = round(-40.53) = -41 */
    CHECK(fabsf(fp16_to_f32(q8[0].d) - 23.5f / 127) < 1e-4f);
    CHECK_EQ_INT(q8[0].qs[0], -41);
    CHECK_EQ_INT(q8[0].qs[31], 127);
    /* Exact halves round to even, as the reference's x86 code quantizes (127 / amax, nearest-even);
     * its portable code (half away from zero) would give 3 and 1. A block max of 127 makes the scale 1. */
    float halves[32] = {127.0f, 2.5f, -3.5f, 0.5f};
    quant_from_float(GGML_TYPE_Q8_0, halves, q8, 32);
    CHECK_EQ_INT(q8[0].qs[1], 2);
    CHECK_EQ_INT(q8[0].qs[2], -4);
    CHECK_EQ_INT(q8[0].qs[3], 0);

    block_q8_1 q81[QK_K / 32];
    quant_from_float(GGML_TYPE_Q8_1, x, q81, QK_K);
    int sum = 0;
    for (int j = 0; j < 32; j++) sum += q81[0].qs[j];
    CHECK(fabsf(fp16_to_f32(q81[0].s) - sum * fp16_to_f32(q81[0].d)) < 2e-3f * fabsf(fp16_to_f32(q81[0].s)));

    /* Q8_K: the scale is -127/max with max the signed largest-magnitude element, so a positive
     * max maps to -127 and d is negative. */
    block_q8_K k;
    quant_from_float(GGML_TYPE_Q8_K, x, &k, QK_K);
    CHECK(k.d < 0 && fabsf(k.d + 23.5f / 127) < 1e-6f);
    CHECK_EQ_INT(k.qs[31], -127);
    CHECK_EQ_INT(k.qs[0], 41); /* nearest(-127/23.5 * -7.5) = nearest(40.53) */
    int bs = 0;
    for (int j = 16; j < 32; j++) bs += k.qs[j];
    CHECK_EQ_INT(k.bsums[1], bs);
    x[200] = -30.0f; /* negative max: d positive, that element -> -127 ... +127 */
    quant_from_float(GGML_TYPE_Q8_K, x, &k, QK_K);
    CHECK(k.d > 0);
    CHECK_EQ_INT(k.qs[200], -127);
    for (int i = 0; i < QK_K; i++) x[i] = 0;
    quant_from_float(GGML_TYPE_Q8_K, x, &k, QK_K);
    CHECK(k.d == 0 && k.qs[5] == 0 && k.bsums[3] == 0);
}

/* RMS round-trip error relative to the data's RMS, for Gaussian data. */
TEST(quant_round_trip_error_is_small) {
    enum { N = 4096 };
    static float x[N], y[N];
    static uint8_t buf[N * 4];
    struct { enum ggml_type t; double max_rel; } limits[] = {
        {GGML_TYPE_F32, 0}, {GGML_TYPE_F16, 1e-3}, {GGML_TYPE_BF16, 5e-3},
        {GGML_TYPE_Q8_0, 0.01}, {GGML_TYPE_Q6_K, 0.04}, {GGML_TYPE_Q5_0, 0.06},
        {GGML_TYPE_Q5_1, 0.06}, {GGML_TYPE_Q5_K, 0.06}, {GGML_TYPE_Q4_0, 0.12},
        {GGML_TYPE_Q4_1, 0.12}, {GGML_TYPE_Q4_K, 0.12}, {GGML_TYPE_Q8_1, 0.01},
        {GGML_TYPE_Q8_K, 0.01}, {GGML_TYPE_Q2_K, 0.30}, {GGML_TYPE_Q3_K, 0.17}, {GGML_TYPE_IQ4_NL, 0.09},
        {GGML_TYPE_IQ4_XS, 0.09},
    };
    for (int i = 0; i < N; i++) x[i] = nrand();
    x[100] = 9.0f; /* an outlier, as real weights have */
    for (size_t k = 0; k < sizeof limits / sizeof *limits; k++) {
        quant_from_float(limits[k].t, x, buf, N);
        quant_to_float(limits[k].t, buf, y, N);
        double err = 0, ref = 0;
        for (int i = 0; i < N; i++) {
            err += (double)(x[i] - y[i]) * (x[i] - y[i]);
            ref += (double)x[i] * x[i];
        }
        double rel = sqrt(err / ref);
        if (rel > limits[k].max_rel)
            fprintf(stderr, "  %s: relative RMS error %.4f > %.4f\n",
                    ggml_type_info(limits[k].t)->name, rel, limits[k].max_rel);
        CHECK(rel <= limits[k].max_rel);
    }
}

/* quant_vec_dot == the float dot of the dequantized rows (exact up to float rounding). */
TEST(quant_vec_dot_matches_dequantized_dot) {
    enum { N = 1024 };
    static float w[N], x[N], wd[N], xd[N];
    static uint8_t wq[N * 4], xq[N * 4];
    for (int i = 0; i < N; i++) { w[i] = nrand(); x[i] = nrand(); }
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        enum ggml_type ty = weight_types[k], vt = quant_vec_dot_type(ty);
        quant_from_float(ty, w, wq, N);
        quant_from_float(vt, x, xq, N);
        quant_to_float(ty, wq, wd, N);
        quant_to_float(vt, xq, xd, N);
        double ref = 0, mag = 0;
        for (int i = 0; i < N; i++) { ref += (double)wd[i] * xd[i]; mag += fabs((double)wd[i] * xd[i]); }
        float got = quant_vec_dot(ty, N, wq, xq);
        if (fabs(got - ref) > 1e-3 * mag + 1e-6)
            fprintf(stderr, "  %s: dot %g, dequantized %g\n", ggml_type_info(ty)->name, got, ref);
        CHECK(fabs(got - ref) <= 1e-3 * mag + 1e-6);
    }
}

/* The SIMD activation quantizers produce the scalar bytes exactly (same integers, same scales),
 * on random data, on values exactly halfway between two levels, and on zero blocks. */
TEST(quant_simd_activation_quantization_is_bit_exact) {
    enum { N = 1024 };
    static float x[N];
    static uint8_t a[N * 4], b[N * 4];
    static const enum ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q8_1, GGML_TYPE_Q8_K, GGML_TYPE_F16};
    int levels_run = 0;
    for (int level = SIMD_SCALAR + 1; level < SIMD_LEVEL_COUNT; level++) {
        if (!simd_level_supported((enum simd_level)level)) continue;
        levels_run++;
        for (int pattern = 0; pattern < 4; pattern++) {
            for (int i = 0; i < N; i++) {
                x[i] = nrand();
                /* block max 127 makes the scale exactly 1: every other value is an exact half */
                if (pattern == 1) x[i] = i % 32 == 0 ? 127.0f : (float)(i % 200 - 100) + 0.5f;
                if (pattern == 2 && i < 512) x[i] = 0;                   /* zero blocks */
                if (pattern == 3) x[i] = (i % 64 == 3 ? 1 : -1) * 127.0f / (float)(1 + i % 7);
            }
            for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
                size_t bytes = ggml_row_size(types[k], N);
                memset(a, 0x55, bytes);
                memset(b, 0xAA, bytes);
                quant_get_from_float(SIMD_SCALAR, types[k])(x, a, N);
                quant_get_from_float((enum simd_level)level, types[k])(x, b, N);
                if (memcmp(a, b, bytes))
                    fprintf(stderr, "  %s %s pattern %d differs from scalar\n",
                            simd_level_name((enum simd_level)level), ggml_type_info(types[k])->name, pattern);
                CHECK(memcmp(a, b, bytes) == 0);
            }
        }
    }
    if (!levels_run) SKIP("this CPU has no SIMD level to compare with scalar");
}

/* Every SIMD level this CPU runs gives the scalar result (to rounding) for every type, for
 * several lengths and extreme values (the full int8/nibble ranges). */
TEST(quant_simd_kernels_match_scalar) {
    enum { NMAX = 4096 };
    static float w[NMAX], x[NMAX], y[NMAX], ys[NMAX];
    static uint8_t wq[NMAX * 4], xq[NMAX * 4];
    /* block tails: 32, 96 and 160 leave remainders for kernels that take 2 or 4 blocks a step */
    const int64_t lengths[] = {256, 512, 768, 4096, 32, 96, 160};
    int levels_run = 0;
    for (int level = SIMD_SCALAR + 1; level < SIMD_LEVEL_COUNT; level++) {
        if (!simd_level_supported((enum simd_level)level)) {
            fprintf(stderr, "  (this CPU has no %s: not tested)\n", simd_level_name((enum simd_level)level));
            continue;
        }
        levels_run++;
        for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++) {
            int64_t n = lengths[li];
            for (int64_t i = 0; i < n; i++) {
                w[i] = nrand() * (li == 2 ? 1000.0f : 1.0f);
                if (li == 4 && i % 5 == 0) w[i] = -w[i] * 4; /* lopsided blocks */
                x[i] = li == 3 && i % 7 == 0 ? -50.0f : nrand();
            }
            for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
                enum ggml_type ty = weight_types[k], vt = quant_vec_dot_type(ty);
                if (n % ggml_type_info(ty)->blck || n % ggml_type_info(vt)->blck) continue;
                quant_from_float(ty, w, wq, n);
                quant_from_float(vt, x, xq, n);
                float s = quant_get_vec_dot(SIMD_SCALAR, ty)(n, wq, xq);
                float v = quant_get_vec_dot((enum simd_level)level, ty)(n, wq, xq);
                quant_get_to_float(SIMD_SCALAR, ty)(wq, ys, n);
                quant_get_to_float((enum simd_level)level, ty)(wq, y, n);
                double mag = 0;
                for (int64_t i = 0; i < n; i++) mag += fabs((double)ys[i] * x[i]);
                /* the 32-element types, F32 and the low-bit types (lowbit.c) follow one order at
                 * every level: exact */
                bool exact = ty == GGML_TYPE_F32 || ty == GGML_TYPE_Q8_0 || ty == GGML_TYPE_Q4_0 ||
                             ty == GGML_TYPE_Q5_0 || ty == GGML_TYPE_Q4_1 || ty == GGML_TYPE_Q5_1 ||
                             ty == GGML_TYPE_Q2_K || ty == GGML_TYPE_Q3_K || ty == GGML_TYPE_IQ4_NL ||
                             ty == GGML_TYPE_IQ4_XS;
                if (exact ? s != v : fabs(s - v) > 1e-5 * mag)
                    fprintf(stderr, "  %s %s n=%lld: simd %.9g scalar %.9g\n",
                            simd_level_name((enum simd_level)level), ggml_type_info(ty)->name,
                            (long long)n, v, s);
                CHECK(exact ? s == v : fabs(s - v) <= 1e-5 * mag);
                quant_vec_dotr_fn dotr = quant_get_vec_dotr((enum simd_level)level, ty);
                if (dotr) { /* QUANT_DOT_WROWS rows: the same row scaled differently each time */
                    static uint8_t wr[QUANT_DOT_WROWS][NMAX * 4];
                    static float wsc[NMAX];
                    float single[QUANT_DOT_WROWS], multi[QUANT_DOT_WROWS];
                    for (int r = 0; r < QUANT_DOT_WROWS; r++) {
                        for (int64_t i = 0; i < n; i++) wsc[i] = w[(i + 7 * r) % n] * (float)(r + 1);
                        quant_from_float(ty, wsc, wr[r], n);
                        single[r] = quant_get_vec_dot(SIMD_SCALAR, ty)(n, wr[r], xq);
                    }
                    dotr(n, wr[0], sizeof wr[0], xq, multi);
                    for (int r = 0; r < QUANT_DOT_WROWS; r++) {
                        if (multi[r] != single[r])
                            fprintf(stderr, "  %s %s n=%lld dotr row %d: %.9g scalar %.9g\n",
                                    simd_level_name((enum simd_level)level), ggml_type_info(ty)->name,
                                    (long long)n, r, multi[r], single[r]);
                        CHECK(multi[r] == single[r]);
                    }
                }
                for (int64_t i = 0; i < n; i++) /* the reference's products, unfused: exact */
                    if (memcmp(&y[i], &ys[i], sizeof y[i])) {
                        fprintf(stderr, "  %s %s to_float[%lld] = %.9g, scalar %.9g\n",
                                simd_level_name((enum simd_level)level), ggml_type_info(ty)->name,
                                (long long)i, y[i], ys[i]);
                        CHECK(!"SIMD dequantization differs from scalar");
                    }
            }
        }
    }
    if (!levels_run) SKIP("this CPU has no SIMD level to compare with scalar");
}

/* The 4-row kernels give each row exactly what the 1-row kernel of the same level gives. */
TEST(quant_simd_four_row_dots_equal_single_dots) {
    enum { N = 1024, ROWS = QUANT_DOT_ROWS };
    static float w[N], x[N];
    static uint8_t wq[N * 4], xq[ROWS][N * 2];
    int kernels_run = 0;
    for (int level = SIMD_SCALAR; level < SIMD_LEVEL_COUNT; level++) {
        if (!simd_level_supported((enum simd_level)level)) continue;
        for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
            enum ggml_type ty = weight_types[k], vt = quant_vec_dot_type(ty);
            quant_vec_dot4_fn dot4 = quant_get_vec_dot4((enum simd_level)level, ty);
            if (!dot4) continue;
            kernels_run++;
            static const int64_t lengths[] = {256, 1024, 160}; /* 160: a block tail for 4-block steps */
            for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++) {
                int64_t n = lengths[li];
                if (n % ggml_type_info(ty)->blck) continue;
                for (int i = 0; i < n; i++) w[i] = nrand();
                quant_from_float(ty, w, wq, n);
                float single[ROWS], four[ROWS];
                for (int r = 0; r < ROWS; r++) {
                    for (int i = 0; i < n; i++) x[i] = nrand() * (float)(r + 1);
                    quant_from_float(vt, x, xq[r], n);
                    single[r] = quant_get_vec_dot((enum simd_level)level, ty)(n, wq, xq[r]);
                }
                dot4(n, wq, xq[0], sizeof xq[0], four);
                for (int r = 0; r < ROWS; r++) {
                    if (four[r] != single[r])
                        fprintf(stderr, "  %s %s n=%lld row %d: %.9g vs %.9g\n", simd_level_name((enum simd_level)level),
                                ggml_type_info(ty)->name, (long long)n, r, four[r], single[r]);
                    CHECK(four[r] == single[r]);
                }
            }
        }
    }
    if (!kernels_run) SKIP("no 4-row kernel on this CPU");
}

/* Degenerate rows: all zeros decode to exact zeros (no NaN from a zero scale), a constant row
 * to that constant within the type's precision, and one large outlier does not spill into the
 * other elements' signs. */
TEST(quant_degenerate_rows) {
    enum { N = 512 };
    static float x[N], y[N];
    static uint8_t q[N * 4];
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        enum ggml_type ty = weight_types[k];
        memset(x, 0, sizeof x);
        quant_from_float(ty, x, q, N);
        quant_to_float(ty, q, y, N);
        for (int i = 0; i < N; i++) CHECK(y[i] == 0.0f);
        for (int i = 0; i < N; i++) x[i] = 0.75f;
        quant_from_float(ty, x, q, N);
        quant_to_float(ty, q, y, N);
        for (int i = 0; i < N; i++) {
            if (fabsf(y[i] - 0.75f) > 0.01f)
                fprintf(stderr, "  %s: constant 0.75 decodes to %g at %d\n", ggml_type_info(ty)->name, y[i], i);
            CHECK(fabsf(y[i] - 0.75f) <= 0.01f);
        }
        for (int i = 0; i < N; i++) x[i] = (i % 2 ? 1.0f : -1.0f) * (i == 7 ? 100.0f : 1.0f);
        quant_from_float(ty, x, q, N);
        quant_to_float(ty, q, y, N);
        CHECK(y[7] > 90.0f);
        for (int i = 32; i < N; i++) { /* outside the outlier's block every sign survives */
            if ((y[i] > 0) != (x[i] > 0))
                fprintf(stderr, "  %s: element %d of +-1 decodes to %g\n", ggml_type_info(ty)->name, i, y[i]);
            CHECK((y[i] > 0) == (x[i] > 0));
        }
    }
}

/* The AVX-512 tinyBLAS F16 dot gives the scalar one's float exactly, tails included. */
TEST(quant_f16_tinyblas_avx512_equals_scalar) {
    if (!simd_level_supported(SIMD_AVX512)) {
        t->skipped = "no AVX-512 here";
        return;
    }
    enum { N = 1040 };
    static uint16_t a[N], b[N];
    for (int i = 0; i < N; i++) a[i] = f32_to_fp16(nrand()), b[i] = f32_to_fp16(nrand() * 3.0f);
    static const int64_t lens[] = {1, 7, 15, 16, 17, 31, 33, 64, 100, 257, 1024, 1040};
    for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
        float want = quant_dot_f16_tinyblas(lens[k], a, b), got = quant_dot_f16_tinyblas_avx512(lens[k], a, b);
        if (memcmp(&want, &got, sizeof want)) fprintf(stderr, "  n %lld: scalar %a, avx512 %a\n", (long long)lens[k], want, got);
        CHECK(!memcmp(&want, &got, sizeof want));
    }
}

/* quant_expf (the reference's vectorized expf) stays within a few ulp of expf over the range
 * the softmax and SiLU use, is exact at 0, and gives 0 for -inf (masked scores). */
TEST(quant_expf_tracks_expf) {
    CHECK(quant_expf(0.0f) == 1.0f);
    CHECK(quant_expf(-INFINITY) == 0.0f);
    CHECK(quant_expf(-200.0f) == 0.0f);
    for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
        float want = expf(x), got = quant_expf(x);
        if (fabsf(got - want) > 4 * FLT_EPSILON * want) fprintf(stderr, "  x=%g: %.9g vs %.9g\n", x, got, want);
        CHECK(fabsf(got - want) <= 4 * FLT_EPSILON * want);
    }
}

/* quant_expf's result is j * 2^n of its polynomial j; it scales by an exact power of two where
 * the result is a normal float and by ldexpf elsewhere: every x from the subnormal range to the
 * overflow gives the bits of ldexpf(j, n) (the formula is repeated here as the test's oracle). */
static float expf_by_ldexpf(float x) {
    const float r = 0x1.8p23f;
    float z = fmaf(x, 0x1.715476p+0f, r);
    float n = z - r;
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    float u = b * b;
    float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                   fmaf(0x1.ffffecp-1f, b, 1.0f));
    if (!(fabsf(n) <= 192)) return n <= 0 ? 0.0f : INFINITY;
    return ldexpf(j, (int)n);
}

TEST(quant_expf_scales_as_ldexpf) {
    int n = 0;
    for (float x = -135.0f; x < 89.0f; x += 0.000731f, n++) {
        float want = expf_by_ldexpf(x), got = quant_expf(x);
        if (memcmp(&want, &got, sizeof got) != 0) {
            fprintf(stderr, "  x=%a: %a vs ldexpf %a\n", x, got, want);
            CHECK(!"quant_expf differs from ldexpf scaling");
            return;
        }
    }
    CHECK(n > 300000);
}

/* quant_expf_n is quant_expf over an array, bit for bit: normal, subnormal and overflowing
 * results, -inf, NaN, and a length that is not a multiple of the 16-lane blocks. */
TEST(quant_expf_n_equals_quant_expf) {
    enum { N = 4099 };
    static float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = -140.0f + 230.0f * (float)i / N + 0.0001f * (float)(i % 7);
    x[5] = -INFINITY;
    x[77] = NAN;
    x[300] = INFINITY;
    x[301] = -87.3f;
    x[302] = 88.7f;
    quant_expf_n(x, y, N);
    for (int i = 0; i < N; i++) {
        float want = quant_expf(x[i]);
        if (memcmp(&want, &y[i], sizeof want) != 0) {
            fprintf(stderr, "  x=%a: %a vs quant_expf %a\n", x[i], y[i], want);
            CHECK(!"quant_expf_n differs from quant_expf");
            return;
        }
    }
    CHECK(y[5] == 0.0f && y[4098] > 1e30f);
    memcpy(y, x, sizeof x); /* in place */
    quant_expf_n(y, y, N);
    for (int i = 0; i < N; i++) {
        float want = quant_expf(x[i]);
        CHECK(memcmp(&want, &y[i], sizeof want) == 0);
        if (memcmp(&want, &y[i], sizeof want) != 0) return;
    }
}
