/* jinja_replay_test.c: the jinja fuzz target's seeds and regression inputs, replayed (replay.h). */
#define LLVMFuzzerTestOneInput jinja_fuzz_one
#include "jinja_fuzz.c"

#include "replay.h"

TEST(fuzz_jinja_replay) { CHECK(fuzz_replay(t, "jinja", jinja_fuzz_one) > 0); }
