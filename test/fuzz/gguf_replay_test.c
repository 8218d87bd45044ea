/* gguf_replay_test.c: the gguf fuzz target's seeds and regression inputs, replayed (replay.h). */
#define LLVMFuzzerTestOneInput gguf_fuzz_one
#include "gguf_fuzz.c"

#include "replay.h"

TEST(fuzz_gguf_replay) { CHECK(fuzz_replay(t, "gguf", gguf_fuzz_one) > 0); }
