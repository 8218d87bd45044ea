#include "gguf/types.h"

/* Block geometry per the GGUF format: QK4_0 = QK8_0 = 32 elements with an fp16 scale (and min for
 * _1 types, high bits for Q5), QK_K = 256 for the K-quants. */
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
    [GGML_TYPE_BF16] = {"bf16", 1, 2},
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
