#include "gguf/types.h"

/* Block geometry per the GGUF format: QK4_0 = QK8_0 = 32 elements with an fp16 scale (and min for
 * _1 types, high bits for Q5), QK_K = 256 for the K-quants and most i-quants (IQ4_NL and MXFP4:
 * 32). The types without kernels are listed so that files holding them parse and are refused by
 * name. */
static const struct ggml_type_info type_infos[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = {"f32", 1, 4},
    [GGML_TYPE_F16] = {"f16", 1, 2},
    [GGML_TYPE_Q4_0] = {"q4_0", 32, 2 + 16},
    [GGML_TYPE_Q4_1] = {"q4_1", 32, 2 + 2 + 16},
    [GGML_TYPE_Q5_0] = {"q5_0", 32, 2 + 4 + 16},
    [GGML_TYPE_Q5_1] = {"q5_1", 32, 2 + 2 + 4 + 16},
    [GGML_TYPE_Q8_0] = {"q8_0", 32, 2 + 32},
    [GGML_TYPE_Q8_1] = {"q8_1", 32, 4 + 32},
    [GGML_TYPE_Q2_K] = {"q2_K", 256, 16 + 64 + 2 + 2},
    [GGML_TYPE_Q3_K] = {"q3_K", 256, 32 + 64 + 12 + 2},
    [GGML_TYPE_Q4_K] = {"q4_K", 256, 2 + 2 + 12 + 128},
    [GGML_TYPE_Q5_K] = {"q5_K", 256, 2 + 2 + 12 + 32 + 128},
    [GGML_TYPE_Q6_K] = {"q6_K", 256, 128 + 64 + 16 + 2},
    [GGML_TYPE_Q8_K] = {"q8_K", 256, 4 + 256 + 32},
    [GGML_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 2 + 64},
    [GGML_TYPE_IQ2_XS] = {"iq2_xs", 256, 2 + 64 + 8},
    [GGML_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 2 + 96},
    [GGML_TYPE_IQ1_S] = {"iq1_s", 256, 2 + 32 + 16},
    [GGML_TYPE_IQ4_NL] = {"iq4_nl", 32, 2 + 16},
    [GGML_TYPE_IQ3_S] = {"iq3_s", 256, 2 + 64 + 8 + 32 + 4},
    [GGML_TYPE_IQ2_S] = {"iq2_s", 256, 2 + 64 + 8 + 8},
    [GGML_TYPE_IQ4_XS] = {"iq4_xs", 256, 2 + 2 + 4 + 128},
    [GGML_TYPE_I8] = {"i8", 1, 1},
    [GGML_TYPE_I16] = {"i16", 1, 2},
    [GGML_TYPE_I32] = {"i32", 1, 4},
    [GGML_TYPE_I64] = {"i64", 1, 8},
    [GGML_TYPE_F64] = {"f64", 1, 8},
    [GGML_TYPE_IQ1_M] = {"iq1_m", 256, 32 + 16 + 8},
    [GGML_TYPE_BF16] = {"bf16", 1, 2},
    [GGML_TYPE_TQ1_0] = {"tq1_0", 256, 48 + 4 + 2},
    [GGML_TYPE_TQ2_0] = {"tq2_0", 256, 64 + 2},
    [GGML_TYPE_MXFP4] = {"mxfp4", 32, 1 + 16},
};

const struct ggml_type_info *ggml_type_info(uint32_t type) {
    static const struct ggml_type_info unknown = {0};
    return type < GGML_TYPE_COUNT && type_infos[type].name ? &type_infos[type] : &unknown;
}

size_t ggml_row_size(uint32_t type, uint64_t n) {
    const struct ggml_type_info *ti = ggml_type_info(type);
    if (!ti->name || n % ti->blck) return 0;
    return (size_t)(n / ti->blck) * ti->size;
}
