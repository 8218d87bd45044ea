#include "test.h"
#include "gguf/types.h"

TEST(ggml_row_size_matches_block_layouts) {
    CHECK_EQ_INT(ggml_row_size(GGML_TYPE_Q8_0, 64), 68);
    CHECK_EQ_INT(ggml_row_size(GGML_TYPE_Q4_K, 256), 144);
    CHECK_EQ_INT(ggml_row_size(GGML_TYPE_Q6_K, 512), 420);
    CHECK_EQ_INT(ggml_row_size(GGML_TYPE_F16, 3), 6);
    CHECK_EQ_INT(ggml_row_size(GGML_TYPE_Q4_0, 33), 0);  /* not a whole block */
    CHECK_EQ_INT(ggml_row_size(17, 32), 0);               /* unknown type */
    CHECK(ggml_type_info(99)->name == NULL);
}
