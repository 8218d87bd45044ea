/* tokenizer_replay_test.c: the tokenizer fuzz target's seeds and regression inputs, replayed
 * (replay.h) on the shared vocabularies the target loads once and keeps. */
#define LLVMFuzzerTestOneInput tokenizer_fuzz_one
#include "tokenizer_fuzz.c"

#include "replay.h"

TEST(fuzz_tokenizer_replay) {
    for (size_t i = 0; i < N_VOCABS; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", vocab_names[i]);
        SHARED(path, rel); /* the target would abort without its vocabulary: skip loudly instead */
        (void)path;
    }
    CHECK(fuzz_replay(t, "tokenizer", tokenizer_fuzz_one) > 0);
    for (size_t i = 0; i < N_VOCABS; i++) {
        tokenizer_free(vocabs[i]);
        vocabs[i] = NULL;
    }
}
