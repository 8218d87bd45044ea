/* Tests of math/attn.h: the F16 attention kernels give, bit for bit, at every SIMD level, what
 * matmul's vector path gives on the same cells gathered to F32 (so a decode step computed on
 * the cells directly has the numbers of the gathered path), for head sizes with and without a
 * 16-element tail and cell counts with and without a 16-cell tail, over a scattered cell list. */
#include "test.h"
#include "math/attn.h"
#include "math/matmul.h"
#include "math/quant.h"

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
