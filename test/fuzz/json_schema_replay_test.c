/* json_schema_replay_test.c: the json_schema fuzz target's seeds and regression inputs, replayed (replay.h). */
#define LLVMFuzzerTestOneInput json_schema_fuzz_one
#include "json_schema_fuzz.c"

#include "replay.h"

TEST(fuzz_json_schema_replay) { CHECK(fuzz_replay(t, "json_schema", json_schema_fuzz_one) > 0); }
