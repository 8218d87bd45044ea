/* http_replay_test.c: the http fuzz target's seeds and regression inputs, replayed (replay.h). */
#define LLVMFuzzerTestOneInput http_fuzz_one
#include "http_fuzz.c"

#include "replay.h"

TEST(fuzz_http_replay) { CHECK(fuzz_replay(t, "http", http_fuzz_one) > 0); }
