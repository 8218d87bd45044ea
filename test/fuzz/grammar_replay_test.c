/* grammar_replay_test.c: the grammar fuzz target's seeds and regression inputs, replayed (replay.h). */
#define LLVMFuzzerTestOneInput grammar_fuzz_one
#include "grammar_fuzz.c"

#include "replay.h"

TEST(fuzz_grammar_replay) { CHECK(fuzz_replay(t, "grammar", grammar_fuzz_one) > 0); }
