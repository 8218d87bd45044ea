/* sampler_replay_test.c: the sampler fuzz target's seeds and regression inputs, replayed (replay.h). */
#define LLVMFuzzerTestOneInput sampler_fuzz_one
#include "sampler_fuzz.c"

#include "replay.h"

TEST(fuzz_sampler_replay) { CHECK(fuzz_replay(t, "sampler", sampler_fuzz_one) > 0); }
