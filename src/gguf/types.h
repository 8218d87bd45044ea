/* types.h: the tensor element types of the GGUF format (numbering as in the GGUF spec) and the
 * block geometry of each: a row of n elements of type T occupies (n / blck) * size bytes and n must
 * be a multiple of blck. Every type a GGUF file may hold has its name and geometry here, so a file
 * parses whatever its types; the ones this engine computes with are math/quant.h's
 * quant_supported (the model loaders refuse the others, naming the tensor and the type).
 */
#ifndef UVLM_GGUF_TYPES_H
#define UVLM_GGUF_TYPES_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_IQ2_XXS = 16,
    GGML_TYPE_IQ2_XS = 17,
    GGML_TYPE_IQ3_XXS = 18,
    GGML_TYPE_IQ1_S = 19,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_IQ3_S = 21,
    GGML_TYPE_IQ2_S = 22,
    GGML_TYPE_IQ4_XS = 23,
    GGML_TYPE_I8 = 24,
    GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26,
    GGML_TYPE_I64 = 27,
    GGML_TYPE_F64 = 28,
    GGML_TYPE_IQ1_M = 29,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_TQ1_0 = 34,
    GGML_TYPE_TQ2_0 = 35,
    GGML_TYPE_MXFP4 = 39,
    GGML_TYPE_COUNT = 40, /* upper bound of the numbering, for tables */
    /* Not GGUF types (no file holds them; ggml_type_info knows nothing of them): Q8_0 / Q5_0
     * weights the model loader has rewritten into math/q8x16.h's layouts for the serving engine.
     * matmul runs them; a row is Q8_0's / Q5_0's size on average. */
    UVLM_TYPE_Q8_0_X16 = GGML_TYPE_COUNT + 1,
    UVLM_TYPE_Q5_0_X16 = GGML_TYPE_COUNT + 2,
    UVLM_TYPE_Q4_K_X16 = GGML_TYPE_COUNT + 3, /* the same for Q4_K (rows of Q4_K's size exactly) */
    UVLM_TYPE_Q6_K_X16 = GGML_TYPE_COUNT + 4, /* and for Q6_K (rows of Q6_K's size exactly) */
};

struct ggml_type_info {
    const char *name;   /* "q4_K", ... ; NULL for an unknown type */
    uint32_t blck;      /* elements per block */
    uint32_t size;      /* bytes per block */
};

/* Geometry of a type; info->name == NULL when the number is not a type we know. */
const struct ggml_type_info *ggml_type_info(uint32_t type);
/* Bytes of a row of n elements, or 0 when n is not a multiple of the block size or the type is unknown. */
size_t ggml_row_size(uint32_t type, uint64_t n);

#endif
