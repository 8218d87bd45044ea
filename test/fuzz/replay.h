/* replay.h: runs a libFuzzer target's committed inputs as a unit test, so that every seed and
 * every crash once found (test/fuzz/regress/NAME/) stays fixed in `make test` and `make check`.
 * A *_replay_test.c includes one test/fuzz/NAME_fuzz.c with LLVMFuzzerTestOneInput renamed, then
 *   TEST(fuzz_http_replay) { CHECK(fuzz_replay(t, "http", http_fuzz_one) > 0); }
 * A target reports a failed check by aborting, which the runner cannot miss. */
#ifndef UVLM_TEST_FUZZ_REPLAY_H
#define UVLM_TEST_FUZZ_REPLAY_H

#include "test.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*fuzz_one_fn)(const uint8_t *data, size_t size);

/* Feeds every file of test/fuzz/corpus/NAME and test/fuzz/regress/NAME to fn (run from the
 * repository root, as make does). Returns the number of inputs replayed, -1 if one was unreadable. */
static inline int fuzz_replay(struct test_case *t, const char *name, fuzz_one_fn fn) {
    static const char *const roots[] = {"test/fuzz/corpus", "test/fuzz/regress"};
    int replayed = 0;
    for (size_t r = 0; r < sizeof roots / sizeof *roots; r++) {
        char dir_path[512];
        snprintf(dir_path, sizeof dir_path, "%s/%s", roots[r], name);
        DIR *dir = opendir(dir_path);
        if (!dir) continue; /* no regression inputs yet: the corpus alone */
        for (struct dirent *e; (e = readdir(dir));) {
            if (e->d_name[0] == '.') continue;
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
            FILE *f = fopen(path, "rb");
            if (!f) { closedir(dir); return -1; }
            fseek(f, 0, SEEK_END);
            long n = ftell(f);
            rewind(f);
            uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
            size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
            fclose(f);
            if (!buf || got != (size_t)n) { free(buf); closedir(dir); return -1; }
            fn(buf, got);
            free(buf);
            replayed++;
        }
        closedir(dir);
    }
    (void)t;
    return replayed;
}

#endif
