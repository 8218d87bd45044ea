/* api_replay_test.c: the api fuzz target's seeds and regression inputs, replayed (replay.h). */
#define LLVMFuzzerTestOneInput api_fuzz_one
#include "api_fuzz.c"

#include "replay.h"

TEST(fuzz_api_replay) { CHECK(fuzz_replay(t, "api", api_fuzz_one) > 0); }
