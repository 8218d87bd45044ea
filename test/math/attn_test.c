/* Tests of math/attn.h: the F16 attention kernels give, bit for bit, at every SIMD level, what
 * matmul's vector path gives on the same cells gathered to F32 (so a decode step computed on
 * the cells directly has the numbers of the gathered path), for head sizes with and without a
 * 16-element tail and cell counts with and without a 16-cell tail, over a scattered cell list;
 * and the Q8_0 kernels: scores equal to quant.c's Q8_0 dot, the mix to the F32 dot of the cells'
 * values, the reference's flash-attention row to the attention in double. */
#include "test.h"
#include "math/attn.h"
#include "math/matmul.h"
#include "math/quant.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static float nrand(void) { return test_nrand(&rng_state); }

enum { POOL = 300, HD_MAX = 128, STRIDE = 3 * HD_MAX };

TEST(attn_f16_kernels_equal_matmul_vector_path) {
    static uint16_t k[POOL * STRIDE], v[POOL * STRIDE];
    static float kf[POOL * HD_MAX], vt[HD_MAX * POOL], q[HD_MAX], p[POOL], want[POOL], got[POOL];
    static int32_t cells[POOL];
    for (int i = 0; i < POOL * STRIDE; i++) {
        k[i] = f32_to_fp16(nrand());
        v[i] = f32_to_fp16(nrand());
    }
    const int32_t hds[] = {64, 128, 80, 72, 24};
    const int64_t ncs[] = {1, 5, 16, 37, 100, 257};
    int levels = 0;
    for (int nt = 1; nt <= 2; nt++) {
        struct compute *c;
        CHECK_EQ_INT(compute_create(&c, nt, 8, POOL), 0);
        for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++) {
            int32_t hd = hds[hi], head = (int32_t)(hi % 3); /* a kv head at an offset in the row */
            for (size_t ci = 0; ci < sizeof ncs / sizeof *ncs; ci++) {
                int64_t n_c = ncs[ci];
                for (int64_t i = 0; i < n_c; i++) cells[i] = (int32_t)((i * 7 + 3) % POOL); /* scattered */
                for (int32_t d = 0; d < hd; d++) q[d] = fp16_to_f32(f32_to_fp16(nrand()));
                for (int64_t i = 0; i < n_c; i++) p[i] = fp16_to_f32(f32_to_fp16(nrand() * nrand()));
                const uint16_t *k0 = k + head * hd, *v0 = v + head * hd;
                for (int64_t i = 0; i < n_c; i++)
                    for (int32_t d = 0; d < hd; d++) {
                        kf[i * hd + d] = fp16_to_f32(k0[(size_t)cells[i] * STRIDE + d]);
                        vt[d * n_c + i] = fp16_to_f32(v0[(size_t)cells[i] * STRIDE + d]);
                    }
                for (int level = SIMD_SCALAR; level < SIMD_LEVEL_COUNT; level++) {
                    if (!simd_level_supported((enum simd_level)level)) continue;
                    levels++;
                    matmul_path(c, MATMUL_VEC, GGML_TYPE_F32, kf, hd, n_c, q, 1, want);
                    attn_scores_f16_level((enum simd_level)level, q, k0, STRIDE, cells, n_c, hd, got);
                    for (int64_t i = 0; i < n_c; i++)
                        if (got[i] != want[i]) {
                            fprintf(stderr, "  %s scores hd=%d n_c=%lld [%lld]: %.9g vs matmul %.9g\n",
                                    simd_level_name((enum simd_level)level), hd, (long long)n_c, (long long)i,
                                    got[i], want[i]);
                            CHECK(!"attn_scores_f16 differs from matmul");
                        }
                    matmul_path(c, MATMUL_VEC, GGML_TYPE_F32, vt, n_c, hd, p, 1, want);
                    attn_mix_f16_level((enum simd_level)level, p, v0, STRIDE, cells, n_c, hd, got);
                    for (int32_t d = 0; d < hd; d++)
                        if (got[d] != want[d]) {
                            fprintf(stderr, "  %s mix hd=%d n_c=%lld [%d]: %.9g vs matmul %.9g\n",
                                    simd_level_name((enum simd_level)level), hd, (long long)n_c, d, got[d],
                                    want[d]);
                            CHECK(!"attn_mix_f16 differs from matmul");
                        }
                }
                /* the entry points use the best level */
                attn_scores_f16(q, k0, STRIDE, cells, n_c, hd, got);
                matmul_path(c, MATMUL_VEC, GGML_TYPE_F32, kf, hd, n_c, q, 1, want);
                CHECK(!memcmp(got, want, sizeof(float) * (size_t)n_c));
            }
        }
        compute_destroy(c);
    }
    CHECK(levels > 0);
}

/* attn_scores_f16_rows (a GQA group's query rows over the same cells, each K row read once)
 * gives every row exactly the scalar attn_scores_f16 (the definition), at every level, for row
 * counts around the kernel's blocks of four, head sizes with and without a 16-element tail, cell
 * counts with and without a 4-cell tail, over a scattered cell list; and those numbers are
 * within rounding of the double-precision dot. */
TEST(attn_scores_rows_equal_one_row_scores) {
    enum { NQ_MAX = 9, SC_STRIDE = POOL + 3, Q_STRIDE = HD_MAX + 5 };
    static uint16_t k[POOL * STRIDE];
    static float q[NQ_MAX * Q_STRIDE], want[POOL], got[NQ_MAX * SC_STRIDE];
    static int32_t cells[POOL];
    for (int i = 0; i < POOL * STRIDE; i++) k[i] = f32_to_fp16(nrand());
    const int32_t hds[] = {64, 128, 80, 72, 24};
    const int64_t ncs[] = {1, 3, 4, 5, 16, 37, 100, 257, POOL};
    int checked = 0;
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++) {
        int32_t hd = hds[hi], head = (int32_t)(hi % 3);
        const uint16_t *k0 = k + head * hd;
        for (size_t ci = 0; ci < sizeof ncs / sizeof *ncs; ci++) {
            int64_t n_c = ncs[ci];
            for (int64_t i = 0; i < n_c; i++) cells[i] = (int32_t)((i * 7 + 3) % POOL);
            for (int32_t n_q = 1; n_q <= NQ_MAX; n_q++) {
                for (int i = 0; i < NQ_MAX * Q_STRIDE; i++) q[i] = fp16_to_f32(f32_to_fp16(nrand()));
                for (int level = SIMD_SCALAR; level < SIMD_LEVEL_COUNT; level++) {
                    if (!simd_level_supported((enum simd_level)level)) continue;
                    for (int i = 0; i < NQ_MAX * SC_STRIDE; i++) got[i] = -1.0f;
                    attn_scores_f16_rows_level((enum simd_level)level, q, Q_STRIDE, n_q, k0, STRIDE, cells, n_c,
                                               hd, got, SC_STRIDE);
                    for (int32_t r = 0; r < n_q; r++) {
                        attn_scores_f16_level(SIMD_SCALAR, q + r * Q_STRIDE, k0, STRIDE, cells, n_c, hd, want);
                        for (int64_t c = 0; c < n_c; c++) {
                            if (got[r * SC_STRIDE + c] != want[c]) {
                                fprintf(stderr, "  %s rows n_q=%d hd=%d n_c=%lld [%d][%lld]: %.9g vs %.9g\n",
                                        simd_level_name((enum simd_level)level), n_q, hd, (long long)n_c, r,
                                        (long long)c, got[r * SC_STRIDE + c], want[c]);
                                CHECK(!"attn_scores_f16_rows differs from attn_scores_f16");
                            }
                            double d = 0, mag = 0;
                            for (int32_t i = 0; i < hd; i++) {
                                double x = (double)fp16_to_f32(k0[(size_t)cells[c] * STRIDE + i]) * q[r * Q_STRIDE + i];
                                d += x;
                                mag += fabs(x);
                            }
                            CHECK(fabs(got[r * SC_STRIDE + c] - d) <= 1e-5 * mag + 1e-6);
                        }
                        /* nothing written past the row's n_c cells */
                        CHECK(got[r * SC_STRIDE + n_c] == -1.0f);
                    }
                    checked++;
                }
                attn_scores_f16_rows(q, Q_STRIDE, n_q, k0, STRIDE, cells, n_c, hd, got, SC_STRIDE);
                attn_scores_f16_level(SIMD_SCALAR, q + (n_q - 1) * Q_STRIDE, k0, STRIDE, cells, n_c, hd, want);
                CHECK(!memcmp(got + (n_q - 1) * SC_STRIDE, want, sizeof(float) * (size_t)n_c));
            }
        }
    }
    CHECK(checked > 0);
}

/* attn_mix_f16_rows (a GQA group's probability rows over the same cells, each V row read once)
 * gives every row exactly the scalar attn_mix_f16 (the definition), at every level, for row
 * counts around the kernel's tiles, head sizes (16-element blocks 1 to 8, and tails), cell counts
 * with and without a 16-cell tail, over a scattered cell list; within rounding of the double sum. */
TEST(attn_mix_rows_equal_one_row_mix) {
    enum { NP_MAX = 9, P_STRIDE = POOL + 3, O_STRIDE = HD_MAX + 5 };
    static uint16_t v[POOL * STRIDE];
    static float p[NP_MAX * P_STRIDE], want[HD_MAX], got[NP_MAX * O_STRIDE];
    static int32_t cells[POOL];
    for (int i = 0; i < POOL * STRIDE; i++) v[i] = f32_to_fp16(nrand());
    const int32_t hds[] = {64, 128, 16, 32, 48, 80, 72, 24};
    const int64_t ncs[] = {1, 5, 16, 17, 37, 100, 257, POOL};
    int checked = 0;
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++) {
        int32_t hd = hds[hi], head = (int32_t)(hi % 3);
        const uint16_t *v0 = v + head * hd;
        for (size_t ci = 0; ci < sizeof ncs / sizeof *ncs; ci++) {
            int64_t n_c = ncs[ci];
            for (int64_t i = 0; i < n_c; i++) cells[i] = (int32_t)((i * 7 + 3) % POOL);
            for (int32_t n_p = 1; n_p <= NP_MAX; n_p++) {
                for (int i = 0; i < NP_MAX * P_STRIDE; i++) p[i] = fp16_to_f32(f32_to_fp16(nrand() * nrand()));
                for (int level = SIMD_SCALAR; level < SIMD_LEVEL_COUNT; level++) {
                    if (!simd_level_supported((enum simd_level)level)) continue;
                    for (int i = 0; i < NP_MAX * O_STRIDE; i++) got[i] = -1.0f;
                    attn_mix_f16_rows_level((enum simd_level)level, p, P_STRIDE, n_p, v0, STRIDE, cells, n_c, hd,
                                            got, O_STRIDE);
                    for (int32_t r = 0; r < n_p; r++) {
                        attn_mix_f16_level(SIMD_SCALAR, p + r * P_STRIDE, v0, STRIDE, cells, n_c, hd, want);
                        for (int32_t d = 0; d < hd; d++) {
                            if (got[r * O_STRIDE + d] != want[d]) {
                                fprintf(stderr, "  %s mix rows n_p=%d hd=%d n_c=%lld [%d][%d]: %.9g vs %.9g\n",
                                        simd_level_name((enum simd_level)level), n_p, hd, (long long)n_c, r, d,
                                        got[r * O_STRIDE + d], want[d]);
                                CHECK(!"attn_mix_f16_rows differs from attn_mix_f16");
                            }
                            double sum = 0, mag = 0;
                            for (int64_t c = 0; c < n_c; c++) {
                                double x = (double)fp16_to_f32(v0[(size_t)cells[c] * STRIDE + d]) * p[r * P_STRIDE + c];
                                sum += x;
                                mag += fabs(x);
                            }
                            CHECK(fabs(got[r * O_STRIDE + d] - sum) <= 1e-5 * mag + 1e-6);
                        }
                        CHECK(got[r * O_STRIDE + hd] == -1.0f); /* nothing past the row's hd */
                    }
                    checked++;
                }
            }
        }
    }
    CHECK(checked > 0);
}

/* The scalar F32 dot product (the definition of the order) equals every SIMD level's exactly. */
TEST(attn_f32_dot_is_the_same_at_every_level) {
    static float a[300], b[300];
    for (int i = 0; i < 300; i++) {
        a[i] = nrand();
        b[i] = nrand() * 100;
    }
    const int64_t ns[] = {1, 15, 16, 17, 64, 100, 300};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        float s = quant_get_vec_dot(SIMD_SCALAR, GGML_TYPE_F32)(ns[i], a, b);
        for (int level = SIMD_AVX2; level < SIMD_LEVEL_COUNT; level++)
            if (simd_level_supported((enum simd_level)level))
                CHECK(quant_get_vec_dot((enum simd_level)level, GGML_TYPE_F32)(ns[i], a, b) == s);
    }
}

/* ---- the softmax row ---- */

/* The softmax row written out from its definition (the one the golden tests' figures rest on):
 * mask + scale + max, x - max, quant_expf_n, per-16 float folds added in double, multiply by
 * (float)(1 / sum), round to F16 through quant_from_float / quant_to_float. */
static void softmax_row_definition(float *row, int64_t n, const int32_t *cpos, int32_t p, float scale, uint16_t *h16) {
    float mx = -INFINITY;
    for (int64_t c = 0; c < n; c++) {
        row[c] = cpos[c] <= p ? row[c] * scale : -INFINITY;
        if (row[c] > mx) mx = row[c];
    }
    for (int64_t c = 0; c < n; c++) row[c] = row[c] == -INFINITY ? -INFINITY : row[c] - mx;
    quant_expf_n(row, row, n);
    double sum = 0;
    for (int64_t c0 = 0; c0 < n; c0 += 16) {
        float v[16] = {0};
        for (int64_t c = c0; c < n && c < c0 + 16; c++) v[c - c0] = row[c];
        sum += (double)quant_fold16(v);
    }
    float inv = (float)(1.0 / sum);
    for (int64_t c = 0; c < n; c++) row[c] *= inv;
    quant_from_float(GGML_TYPE_F16, row, h16, n);
    quant_to_float(GGML_TYPE_F16, h16, row, n);
}

static uint32_t urand(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* attn_softmax_row at every level equals the code it replaced, bit for bit (NaN rows as bits):
 * every length 1..300 (with and without a 16-element tail), random positions and masks (some
 * rows with only one cell visible, some with none), score spreads from 0.01 to 1000 (so that
 * exps underflow to subnormals and to 0). */
TEST(attn_softmax_row_equals_scalar_code_at_every_level) {
    enum { N = 300 };
    static float in[N], want[N], got[N];
    static int32_t cpos[N];
    static uint16_t h16[N];
    const float spreads[] = {0.01f, 1.0f, 10.0f, 100.0f, 1000.0f};
    int rows = 0, levels_run = 0;
    for (int64_t n = 1; n <= N; n++)
        for (int trial = 0; trial < 4; trial++) {
            float spread = spreads[urand(5)], scale = trial == 3 ? 1.0f : 0.125f;
            for (int64_t c = 0; c < n; c++) {
                in[c] = nrand() * spread;
                cpos[c] = (int32_t)urand(2 * N); /* unsorted, repeats */
            }
            int32_t pos = (int32_t)urand(2 * N);
            int kind = (int)urand(8);
            if (kind == 0) pos = -1; /* every cell masked: NaN row */
            if (kind == 1) {         /* exactly one visible */
                for (int64_t c = 0; c < n; c++) cpos[c] = pos + 1 + (int32_t)urand(10);
                cpos[urand((uint32_t)n)] = pos;
            }
            if (kind == 2) pos = 2 * N; /* nothing masked */
            if (kind == 3) in[urand((uint32_t)n)] = -0.0f;
            memcpy(want, in, sizeof(float) * (size_t)n);
            softmax_row_definition(want, n, cpos, pos, scale, h16);
            rows++;
            for (int level = SIMD_SCALAR; level < SIMD_LEVEL_COUNT; level++) {
                if (!simd_level_supported((enum simd_level)level)) continue;
                levels_run++;
                memcpy(got, in, sizeof(float) * (size_t)n);
                attn_softmax_row_level((enum simd_level)level, got, n, cpos, pos, scale);
                if (memcmp(got, want, sizeof(float) * (size_t)n)) {
                    for (int64_t c = 0; c < n; c++)
                        if (memcmp(&got[c], &want[c], sizeof(float)))
                            fprintf(stderr, "  %s n=%lld kind=%d [%lld]: %.9g vs %.9g\n",
                                    simd_level_name((enum simd_level)level), (long long)n, kind, (long long)c,
                                    got[c], want[c]);
                    CHECK(!"attn_softmax_row differs from the scalar code");
                }
            }
            /* the entry point: the best level */
            memcpy(got, in, sizeof(float) * (size_t)n);
            attn_softmax_row(got, n, cpos, pos, scale);
            CHECK(!memcmp(got, want, sizeof(float) * (size_t)n));
            /* the F32 variant (Q8_0 V cells): the same at every level, and rounded to F16 the row above */
            static float f32[N], lv[N];
            memcpy(f32, in, sizeof(float) * (size_t)n);
            attn_softmax_row_f32_level(SIMD_SCALAR, f32, n, cpos, pos, scale);
            for (int64_t c = 0; c < n; c++) {
                float r = fp16_to_f32(f32_to_fp16(f32[c]));
                CHECK(!memcmp(&r, &want[c], sizeof r) || (isnan(r) && isnan(want[c])));
            }
            for (int level = SIMD_AVX2; level < SIMD_LEVEL_COUNT; level++) {
                if (!simd_level_supported((enum simd_level)level)) continue;
                memcpy(lv, in, sizeof(float) * (size_t)n);
                attn_softmax_row_f32_level((enum simd_level)level, lv, n, cpos, pos, scale);
                CHECK(!memcmp(lv, f32, sizeof(float) * (size_t)n));
            }
        }
    CHECK(rows == 4 * N && levels_run >= rows);
}

/* The softmax's vector exp is quant_expf bit for bit over its whole range: normal results,
 * subnormal ones (n in [-192, -126]: scalef against ldexpf), 0, overflow, -inf and NaN. */
TEST(attn_softmax_exp_equals_quant_expf) {
    enum { M = 4096 };
    static float x[M], want[M], got[M];
    int levels = 0;
    for (int round = 0; round < 64; round++) {
        for (int i = 0; i < M; i++) {
            uint32_t u = (uint32_t)urand(1u << 31) * 2u + (uint32_t)urand(2);
            float f;
            memcpy(&f, &u, sizeof f); /* any bit pattern */
            x[i] = round % 2 ? f : -150.0f + 240.0f * (float)i / M + nrand() * 0.01f;
        }
        x[0] = -INFINITY, x[1] = INFINITY, x[2] = NAN, x[3] = -0.0f, x[4] = -87.3f, x[5] = -133.1f, x[6] = 88.7f;
        for (int i = 0; i < M; i++) want[i] = quant_expf(x[i]);
        for (int level = SIMD_SCALAR; level < SIMD_LEVEL_COUNT; level++) {
            if (!simd_level_supported((enum simd_level)level)) continue;
            levels++;
            attn_expf_n_level((enum simd_level)level, x, got, M);
            for (int i = 0; i < M; i++)
                if (memcmp(&got[i], &want[i], sizeof(float))) {
                    fprintf(stderr, "  %s exp(%.9g): %.9g vs quant_expf %.9g\n", simd_level_name((enum simd_level)level),
                            x[i], got[i], want[i]);
                    CHECK(!"the softmax exp differs from quant_expf");
                }
        }
    }
    CHECK(levels >= 64);
}

/* attn_rows_f32 (sgemm, softmax, sgemm) against the same attention in double: the
 * probabilities it leaves in sc within F16 rounding of the softmax of exact scores, masked
 * cells 0, and its output the P.V of those probabilities to float accuracy. */
TEST(attn_rows_f32_matches_double_attention) {
    enum { R = 96, NV = 300, HD = 80 };
    static float q[R * HD], k[NV * HD], v[NV * HD], sc[R * NV], out[R * HD], ex[NV];
    static int32_t cpos[NV], row_pos[R];
    const int64_t rows_[] = {1, 7, 32, 96}, nvs[] = {1, 17, 300};
    const int32_t hds[] = {64, 80};
    for (size_t hi = 0; hi < 2; hi++)
        for (size_t ri = 0; ri < 4; ri++)
            for (size_t ni = 0; ni < 3; ni++) {
                int32_t hd = hds[hi];
                int64_t n_rows = rows_[ri], nv = nvs[ni];
                for (int64_t i = 0; i < n_rows * hd; i++) q[i] = fp16_to_f32(f32_to_fp16(nrand()));
                for (int64_t i = 0; i < nv * hd; i++) {
                    k[i] = fp16_to_f32(f32_to_fp16(nrand()));
                    v[i] = fp16_to_f32(f32_to_fp16(nrand()));
                }
                for (int64_t c = 0; c < nv; c++) cpos[c] = (int32_t)c;
                for (int64_t r = 0; r < n_rows; r++) row_pos[r] = (int32_t)(nv - 1 - (r * 5) % nv); /* causal-like */
                float scale = 1.0f / sqrtf((float)hd);
                attn_rows_f32(q, n_rows, k, v, nv, hd, cpos, row_pos, 0, scale, true, sc, out);
                for (int64_t r = 0; r < n_rows; r++) {
                    const float *p = sc + r * nv;
                    double mx = -INFINITY, sum = 0;
                    for (int64_t c = 0; c <= row_pos[r]; c++) {
                        double d = 0;
                        for (int32_t i = 0; i < hd; i++) d += (double)q[r * hd + i] * k[c * hd + i];
                        ex[c] = (float)(d * scale);
                        if (ex[c] > mx) mx = ex[c];
                    }
                    for (int64_t c = 0; c <= row_pos[r]; c++) sum += exp(ex[c] - mx);
                    for (int64_t c = 0; c < nv; c++) {
                        double want = c <= row_pos[r] ? exp(ex[c] - mx) / sum : 0.0;
                        if (!(fabs(p[c] - want) <= 2e-3 * want + 1e-6)) {
                            fprintf(stderr, "  rows=%lld nv=%lld hd=%d p[%lld][%lld] = %.7g, want %.7g\n",
                                    (long long)n_rows, (long long)nv, hd, (long long)r, (long long)c, p[c], want);
                            CHECK(!"attn_rows_f32 probabilities off");
                        }
                    }
                    for (int32_t d = 0; d < hd; d++) {
                        double want = 0, mag = 0;
                        for (int64_t c = 0; c < nv; c++) {
                            want += (double)p[c] * v[c * hd + d];
                            mag += fabs((double)p[c] * v[c * hd + d]);
                        }
                        if (!(fabs(out[r * hd + d] - want) <= 1e-5 * mag + 1e-30)) {
                            fprintf(stderr, "  rows=%lld nv=%lld hd=%d out[%lld][%d] = %.7g, want %.7g\n",
                                    (long long)n_rows, (long long)nv, hd, (long long)r, d, out[r * hd + d], want);
                            CHECK(!"attn_rows_f32 output off");
                        }
                    }
                }
            }
}

/* attn_rows_f16 (a prompt chunk's block of rows on the F16 cells as stored): every level gives
 * the scalar definition's bits (over scattered cells, with 16-cell tails and head sizes of one to
 * eight 16s, 96 among them), each row the same bits alone as in any block, and the attention in double within
 * rounding: probabilities to 2e-3 (they are F16), outputs to 1e-5 of their magnitude. */
TEST(attn_rows_f16_equals_definition_at_every_level) {
    enum { R = 40, NV = 150, HDM = 128, KSTRIDE = 3 * HDM };
    static uint16_t kc[POOL * KSTRIDE], vc[POOL * KSTRIDE];
    static float q[R * HDM], sc[R * NV], sc2[R * NV], out[R * HDM], out2[R * HDM], tile[ATTN_TILE_FLOATS(HDM)];
    static int32_t cells[NV], cpos[NV], row_pos[R];
    for (int64_t i = 0; i < POOL * KSTRIDE; i++) {
        kc[i] = f32_to_fp16(nrand());
        vc[i] = f32_to_fp16(nrand());
    }
    const int64_t rows_[] = {1, 3, 9, 40}, nvs[] = {1, 16, 37, 150};
    const int32_t hds[] = {16, 64, 96, 128}; /* 96: four 16s and then two */
    enum simd_level best = simd_level_best();
    for (size_t hi = 0; hi < 4; hi++)
        for (size_t ri = 0; ri < 4; ri++)
            for (size_t ni = 0; ni < 4; ni++) {
                int32_t hd = hds[hi];
                int64_t n_rows = rows_[ri], nv = nvs[ni];
                const uint16_t *k = kc + hd, *v = vc + 2 * hd; /* a head at an offset in each row */
                for (int64_t c = 0; c < nv; c++) {
                    cells[c] = (int32_t)((c * 97 + 13) % POOL); /* scattered */
                    cpos[c] = (int32_t)c;
                }
                for (int64_t i = 0; i < n_rows * hd; i++) q[i] = fp16_to_f32(f32_to_fp16(nrand()));
                for (int64_t r = 0; r < n_rows; r++) row_pos[r] = (int32_t)(nv - 1 - (r * 5) % nv);
                float scale = 1.0f / sqrtf((float)hd);
                attn_rows_f16_level(SIMD_SCALAR, q, n_rows, k, KSTRIDE, v, KSTRIDE, cells, nv, hd, cpos, row_pos, 0,
                                    scale, sc, tile, out);
                attn_rows_f16_level(best, q, n_rows, k, KSTRIDE, v, KSTRIDE, cells, nv, hd, cpos, row_pos, 0, scale, sc2,
                                    tile, out2);
                CHECK(!memcmp(sc, sc2, (size_t)(n_rows * nv) * sizeof *sc));
                CHECK(!memcmp(out, out2, (size_t)(n_rows * hd) * sizeof *out));
                int64_t r1 = n_rows - 1; /* the last row alone: its bits */
                attn_rows_f16_level(best, q + r1 * hd, 1, k, KSTRIDE, v, KSTRIDE, cells, nv, hd, cpos, row_pos + r1,
                                    0, scale, sc2, tile, out2);
                CHECK(!memcmp(out + r1 * hd, out2, (size_t)hd * sizeof *out));
                for (int64_t r = 0; r < n_rows; r++) {
                    const float *p = sc + r * nv;
                    double ex[NV], mx = -INFINITY, sum = 0;
                    for (int64_t c = 0; c <= row_pos[r]; c++) {
                        const uint16_t *kr = k + (size_t)cells[c] * KSTRIDE;
                        double d = 0;
                        for (int32_t i = 0; i < hd; i++) d += (double)q[r * hd + i] * fp16_to_f32(kr[i]);
                        ex[c] = d * scale;
                        if (ex[c] > mx) mx = ex[c];
                    }
                    for (int64_t c = 0; c <= row_pos[r]; c++) sum += exp(ex[c] - mx);
                    for (int64_t c = 0; c < nv; c++) {
                        double want = c <= row_pos[r] ? exp(ex[c] - mx) / sum : 0.0;
                        CHECK(fabs(p[c] - want) <= 2e-3 * want + 1e-6);
                    }
                    for (int32_t d = 0; d < hd; d++) {
                        double want = 0, mag = 0;
                        for (int64_t c = 0; c < nv; c++) {
                            double x = (double)p[c] * fp16_to_f32(v[(size_t)cells[c] * KSTRIDE + d]);
                            want += x;
                            mag += fabs(x);
                        }
                        CHECK(fabs(out[r * hd + d] - want) <= 1e-5 * mag + 1e-30);
                    }
                }
            }
}

/* Q8_0 cells: rows of random values quantized as the forward pass writes them, a head at an
 * offset in each row (blocks of 32 along the head), cells scattered over the pool. */
enum { QPOOL = 300, QHD_MAX = 256, QROW = 3 * QHD_MAX / 32 * 34 };

static void fill_q8_rows(uint8_t *rows, int64_t n_rows, size_t row_bytes) {
    static float x[QROW];
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t n = (int64_t)row_bytes / 34 * 32;
        for (int64_t i = 0; i < n; i++) x[i] = nrand() * (1 + (float)(i % 7)); /* blocks of different scales */
        quant_from_float(GGML_TYPE_Q8_0, x, rows + (size_t)r * row_bytes, n);
    }
}

/* attn_scores_q8_0_rows gives every row exactly quant_vec_dot's Q8_0 dot of its quantized query
 * with each cell's K row, at every level, for row counts around the kernel's passes of 8, head
 * sizes of 1 to 8 blocks, odd and even cell counts, over a scattered cell list. */
TEST(attn_q8_0_scores_equal_the_q8_0_dot) {
    enum { NQ_MAX = 10, SC_STRIDE = QPOOL + 3 };
    static uint8_t k[QPOOL * QROW], qq[NQ_MAX * QROW];
    static float got[NQ_MAX * SC_STRIDE];
    static int32_t cells[QPOOL];
    fill_q8_rows(k, QPOOL, QROW);
    const int32_t hds[] = {32, 64, 96, 128, 256};
    const int64_t ncs[] = {1, 2, 3, 16, 37, 100, QPOOL};
    int checked = 0;
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++) {
        int32_t hd = hds[hi], head = (int32_t)(hi % 3);
        size_t head_bytes = (size_t)hd / 32 * 34;
        const uint8_t *k0 = k + head * head_bytes;
        for (size_t ci = 0; ci < sizeof ncs / sizeof *ncs; ci++) {
            int64_t n_c = ncs[ci];
            for (int64_t i = 0; i < n_c; i++) cells[i] = (int32_t)((i * 7 + 3) % QPOOL);
            for (int32_t n_q = 1; n_q <= NQ_MAX; n_q += 3) {
                fill_q8_rows(qq, n_q, head_bytes);
                for (int level = SIMD_SCALAR; level < SIMD_LEVEL_COUNT; level++) {
                    if (!simd_level_supported((enum simd_level)level)) continue;
                    for (int i = 0; i < NQ_MAX * SC_STRIDE; i++) got[i] = -1.0f;
                    attn_scores_q8_0_rows_level((enum simd_level)level, qq, head_bytes, n_q, k0, QROW, cells, n_c, hd,
                                                got, SC_STRIDE);
                    for (int32_t r = 0; r < n_q; r++) {
                        for (int64_t c = 0; c < n_c; c++) {
                            float want = quant_vec_dot(GGML_TYPE_Q8_0, hd, k0 + (size_t)cells[c] * QROW,
                                                       qq + (size_t)r * head_bytes);
                            if (got[r * SC_STRIDE + c] != want) {
                                fprintf(stderr, "  %s q8 scores n_q=%d hd=%d n_c=%lld [%d][%lld]: %.9g vs %.9g\n",
                                        simd_level_name((enum simd_level)level), n_q, hd, (long long)n_c, r,
                                        (long long)c, got[r * SC_STRIDE + c], want);
                                CHECK(!"attn_scores_q8_0_rows differs from the Q8_0 dot");
                            }
                        }
                        CHECK(got[r * SC_STRIDE + n_c] == -1.0f);
                    }
                    checked++;
                }
            }
        }
    }
    CHECK(checked > 0);
}

/* attn_mix_q8_0_rows is, bit for bit at every level, matmul's vector path (the F32 dot order of
 * attn_mix_f16) on the V values quantize_to_float gives, for row counts around the tiles, head
 * sizes of 1 to 8 blocks and a part of a head (the decode items' output ranges), and cell counts
 * with and without a 16-cell tail. */
TEST(attn_q8_0_mix_equals_matmul_on_the_values) {
    enum { NP_MAX = 7, P_STRIDE = QPOOL + 3, O_STRIDE = QHD_MAX + 5 };
    static uint8_t v[QPOOL * QROW];
    static float p[NP_MAX * P_STRIDE], vt[QHD_MAX * QPOOL], vrow[QHD_MAX * 3], want[QHD_MAX], got[NP_MAX * O_STRIDE];
    static int32_t cells[QPOOL];
    fill_q8_rows(v, QPOOL, QROW);
    struct compute *c;
    CHECK_EQ_INT(compute_create(&c, 1, 8, QPOOL), 0);
    const int32_t hds[] = {32, 64, 96, 128, 256};
    const int64_t ncs[] = {1, 5, 16, 17, 100, QPOOL};
    int checked = 0;
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++) {
        int32_t hd = hds[hi], head = (int32_t)(hi % 3);
        size_t head_bytes = (size_t)hd / 32 * 34;
        for (int part = 0; part < 2; part++) {
            /* part 1: the second half of the head (when it has two blocks or more) */
            int32_t d0 = part && hd >= 64 ? hd / 64 * 32 : 0, len = hd - d0;
            if (part && !d0) continue;
            const uint8_t *v0 = v + head * head_bytes + (size_t)d0 / 32 * 34;
            for (size_t ci = 0; ci < sizeof ncs / sizeof *ncs; ci++) {
                int64_t n_c = ncs[ci];
                for (int64_t i = 0; i < n_c; i++) cells[i] = (int32_t)((i * 11 + 5) % QPOOL);
                for (int64_t i = 0; i < n_c; i++) {
                    quant_to_float(GGML_TYPE_Q8_0, v + (size_t)cells[i] * QROW, vrow, 3 * QHD_MAX);
                    for (int32_t d = 0; d < len; d++) vt[d * n_c + i] = vrow[head * hd + d0 + d];
                }
                for (int32_t n_p = 1; n_p <= NP_MAX; n_p += 2) {
                    for (int i = 0; i < NP_MAX * P_STRIDE; i++) p[i] = fp16_to_f32(f32_to_fp16(nrand() * nrand()));
                    for (int level = SIMD_SCALAR; level < SIMD_LEVEL_COUNT; level++) {
                        if (!simd_level_supported((enum simd_level)level)) continue;
                        for (int i = 0; i < NP_MAX * O_STRIDE; i++) got[i] = -1.0f;
                        attn_mix_q8_0_rows_level((enum simd_level)level, p, P_STRIDE, n_p, v0, QROW, cells, n_c, len,
                                                 got, O_STRIDE);
                        for (int32_t r = 0; r < n_p; r++) {
                            matmul_path(c, MATMUL_VEC, GGML_TYPE_F32, vt, n_c, len, p + r * P_STRIDE, 1, want);
                            for (int32_t d = 0; d < len; d++)
                                if (got[r * O_STRIDE + d] != want[d]) {
                                    fprintf(stderr, "  %s q8 mix n_p=%d hd=%d d0=%d n_c=%lld [%d][%d]: %.9g vs %.9g\n",
                                            simd_level_name((enum simd_level)level), n_p, hd, d0, (long long)n_c, r,
                                            d, got[r * O_STRIDE + d], want[d]);
                                    CHECK(!"attn_mix_q8_0_rows differs from matmul on the values");
                                }
                            CHECK(got[r * O_STRIDE + len] == -1.0f);
                        }
                        checked++;
                    }
                }
            }
        }
    }
    compute_destroy(c);
    CHECK(checked > 0);
}

/* attn_row_reference_fa (the reference's online softmax) against the attention of the same
 * Q8_0 values in double: the cells it masks (past pos, before a window) take no part. */
TEST(attn_row_reference_fa_matches_double_attention) {
    enum { NC = 200 };
    static uint8_t k[NC * QROW], v[NC * QROW], qq[QROW];
    static float q[QHD_MAX], kf[3 * QHD_MAX], vf[3 * QHD_MAX], qf[QHD_MAX], tmp[QHD_MAX], out[QHD_MAX], s[NC];
    static int32_t cells[NC], cpos[NC];
    fill_q8_rows(k, NC, QROW);
    fill_q8_rows(v, NC, QROW);
    for (int64_t c = 0; c < NC; c++) {
        cells[c] = (int32_t)((c * 13 + 1) % NC);
        cpos[c] = (int32_t)c;
    }
    const int32_t hds[] = {32, 64, 128};
    const int32_t windows[] = {0, 1, 37};
    for (size_t hi = 0; hi < 3; hi++)
        for (size_t wi = 0; wi < 3; wi++) {
            int32_t hd = hds[hi], head = 1, window = windows[wi], pos = 150;
            size_t hb = (size_t)hd / 32 * 34;
            for (int32_t d = 0; d < hd; d++) q[d] = nrand();
            quant_from_float(GGML_TYPE_Q8_0, q, qq, hd);
            quant_to_float(GGML_TYPE_Q8_0, qq, qf, hd);
            float scale = 1.0f / sqrtf((float)hd);
            attn_row_reference_fa(GGML_TYPE_Q8_0, NULL, qq, k + head * hb, QROW, GGML_TYPE_Q8_0, v + head * hb, QROW,
                                  cells, cpos, NC, pos, window, scale, hd, tmp, out);
            double mx = -INFINITY, sum = 0;
            for (int64_t c = 0; c < NC; c++) {
                bool vis = cpos[c] <= pos && !(window > 0 && cpos[c] <= pos - window);
                s[c] = -INFINITY;
                if (!vis) continue;
                quant_to_float(GGML_TYPE_Q8_0, k + (size_t)cells[c] * QROW, kf, 3 * QHD_MAX);
                double d = 0;
                for (int32_t i = 0; i < hd; i++) d += (double)qf[i] * kf[head * hd + i];
                s[c] = (float)(d * scale);
                if (s[c] > mx) mx = s[c];
            }
            for (int64_t c = 0; c < NC; c++) sum += s[c] == -INFINITY ? 0 : exp(s[c] - mx);
            for (int32_t d = 0; d < hd; d++) {
                double want = 0, mag = 0;
                for (int64_t c = 0; c < NC; c++) {
                    if (s[c] == -INFINITY) continue;
                    quant_to_float(GGML_TYPE_Q8_0, v + (size_t)cells[c] * QROW, vf, 3 * QHD_MAX);
                    double x = exp(s[c] - mx) / sum * vf[head * hd + d];
                    want += x;
                    mag += fabs(x);
                }
                if (!(fabs(out[d] - want) <= 1e-4 * mag + 1e-6)) {
                    fprintf(stderr, "  hd=%d window=%d out[%d] = %.7g, want %.7g\n", hd, window, d, out[d], want);
                    CHECK(!"attn_row_reference_fa off");
                }
            }
            if (window == 1) { /* only the cell at pos: its V row exactly */
                int64_t c = pos;
                quant_to_float(GGML_TYPE_Q8_0, v + (size_t)cells[c] * QROW, vf, 3 * QHD_MAX);
                for (int32_t d = 0; d < hd; d++) CHECK(out[d] == vf[head * hd + d]);
            }
        }
}
