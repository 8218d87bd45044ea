/* Golden tests of the block layouts on real files: the shared llama-spm models hold the same
 * weights as F16 and as files quantized by the reference (Q8_0, Q4_0, Q4_K + Q6_K, and the
 * kquants file: Q2_K, Q3_K, IQ4_XS, IQ4_NL layers, Q5_K embeddings, Q6_K output). Decoding a
 * quantized tensor must land within that type's quantization error of the F16 one (a wrong
 * layout lands at ~100%), and our own quantizer (used by mkmodel) must come close to the
 * reference's error on the same data. */
#include "test.h"
#include "gguf/gguf.h"
#include "math/quant.h"

#include <math.h>
#include <stdlib.h>

static double rel_rms(const float *x, const float *ref, int64_t n) {
    double e = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        e += (double)(x[i] - ref[i]) * (x[i] - ref[i]);
        r += (double)ref[i] * ref[i];
    }
    return r ? sqrt(e / r) : 0;
}

/* Largest error the reference's own quantization shows on these files (measured: Q8_0 0.0054,
 * Q6_K 0.018, Q4_K 0.072, Q4_0 0.086, Q2_K 0.298, Q3_K 0.152, IQ4_XS 0.077, IQ4_NL 0.077; our
 * quantizers: Q2_K 0.264, Q3_K 0.145, IQ4_XS 0.074, IQ4_NL 0.074), with some headroom. */
static double decode_limit(enum ggml_type t) {
    switch (t) {
    case GGML_TYPE_Q8_0: return 0.008;
    case GGML_TYPE_Q6_K: return 0.025;
    case GGML_TYPE_Q4_K: return 0.09;
    case GGML_TYPE_Q4_0: return 0.10;
    case GGML_TYPE_Q2_K: return 0.32;
    case GGML_TYPE_Q3_K: return 0.17;
    case GGML_TYPE_IQ4_NL: return 0.085;
    case GGML_TYPE_IQ4_XS: return 0.085;
    default: return 0.0; /* F32 tensors are identical */
    }
}

static void compare_model(struct test_case *t, const char *quant_path, const char *f16_path, int *n_checked) {
    struct gguf_file q, f;
    char why[256];
    CHECK(gguf_open(&q, quant_path, why, sizeof why) == 0);
    if (gguf_open(&f, f16_path, why, sizeof why) != 0) {
        gguf_close(&q);
        CHECK(!"cannot open the F16 model");
    }
    int failed = 0;
    for (uint64_t i = 0; i < q.n_tensors && !failed; i++) {
        const struct gguf_tensor *tq = &q.tensors[i];
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)tq->name.len, tq->name.ptr);
        const struct gguf_tensor *tf = gguf_find_tensor(&f, name);
        int64_t n = (int64_t)(tq->ne[0] * tq->ne[1] * tq->ne[2] * tq->ne[3]);
        if (!tf || n > (1 << 20)) continue; /* the 8M-element embeddings would only add time */
        float *xq = malloc(sizeof(float) * (size_t)n), *xf = malloc(sizeof(float) * (size_t)n);
        void *mine = malloc(ggml_row_size(tq->type, (uint64_t)n));
        float *xm = malloc(sizeof(float) * (size_t)n);
        if (!xq || !xf || !mine || !xm) failed = 1;
        if (!failed) {
            quant_to_float(tq->type, tq->data, xq, n);
            quant_to_float(tf->type, tf->data, xf, n);
            double err = rel_rms(xq, xf, n);
            if (err > decode_limit(tq->type)) {
                fprintf(stderr, "  %s: %s %s decodes %.4f away from F16 (limit %.3f)\n", quant_path, name,
                        ggml_type_info(tq->type)->name, err, decode_limit(tq->type));
                failed = 1;
            }
            /* our quantizer on the same (F16) data: within 1.5x the reference's error */
            quant_from_float(tq->type, xf, mine, n);
            quant_to_float(tq->type, mine, xm, n);
            double own = rel_rms(xm, xf, n);
            if (own > 1.5 * err + 1e-6) {
                fprintf(stderr, "  %s %s: our quantization error %.4f vs reference %.4f\n", name,
                        ggml_type_info(tq->type)->name, own, err);
                failed = 1;
            }
            (*n_checked)++;
        }
        free(xq); free(xf); free(mine); free(xm);
    }
    gguf_close(&q);
    gguf_close(&f);
    CHECK(!failed);
}

TEST(quant_golden_decodes_reference_quantized_models) {
    SHARED(f16, "models/llama-spm-f16.gguf");
    char f16_path[512];
    snprintf(f16_path, sizeof f16_path, "%s", f16);
    const char *models[] = {"models/llama-spm-q8_0.gguf", "models/llama-spm-q4_0.gguf",
                            "models/llama-spm-q4_k_m.gguf", "models/llama-spm-kquants.gguf"};
    for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
        SHARED(path, models[m]);
        int n_checked = 0;
        compare_model(t, path, f16_path, &n_checked);
        if (t->failed) return;
        CHECK(n_checked >= 20); /* every layer's matrices were compared */
    }
}
