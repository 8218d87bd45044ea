/* test.h: the unit-test harness. One runner (test/runner.c) runs every TEST in every
 * test/.../NAME_test.c and prints "N passed, N failed" (failed test names above it).
 *
 *   #include "test.h"
 *   TEST(gguf_rejects_bad_magic) {
 *       CHECK(gguf_parse(...) == -ERR_FORMAT);
 *       CHECK_EQ_INT(n, 3);
 *   }
 *
 * A TEST registers itself at start-up; a failed CHECK marks the test failed, prints file:line
 * and returns from it. SKIP("reason") marks a test skipped, and the runner prints the reason:
 * a test never skips silently. Filter with: test-runner NAME_SUBSTRING...
 * shared_path("models/x.gguf") gives "../shared/models/x.gguf" (or $UVLM_SHARED/...); with
 * UVLM_NO_SKIP=1 in the environment (CI) a missing shared file fails the test instead of skipping.
 */
#ifndef UVLM_TEST_H
#define UVLM_TEST_H

#include <stdio.h>
#include <string.h>
#include <stdbool.h>
#include <stdint.h>

struct test_case {
    const char *name;
    void (*fn)(struct test_case *t);
    int failed;          /* set by CHECK */
    const char *skipped; /* set by SKIP: the reason */
    struct test_case *next;
};

void test_register(struct test_case *t);
/* Path of a file under ../shared; NULL when it does not exist: the test is then skipped with the
 * reason, or failed when $UVLM_NO_SKIP is set (as CI sets it). The returned string lives until the next call from the same test. */
const char *shared_path(struct test_case *t, const char *rel);

#define TEST(name)                                                          \
    static void test_fn_##name(struct test_case *t);                        \
    static struct test_case test_case_##name = {#name, test_fn_##name, 0, NULL, NULL}; \
    __attribute__((constructor)) static void test_reg_##name(void) {        \
        test_register(&test_case_##name);                                   \
    }                                                                       \
    static void test_fn_##name(struct test_case *t)

#define CHECK(cond) do { if (!(cond)) {                                     \
        fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
        t->failed = 1; return; } } while (0)

#define CHECK_EQ_INT(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b); \
    if (a_ != b_) {                                                         \
        fprintf(stderr, "  %s:%d: %s == %lld, expected %s == %lld\n",       \
                __FILE__, __LINE__, #a, a_, #b, b_);                        \
        t->failed = 1; return; } } while (0)

#define CHECK_EQ_STR(a, b) do { const char *a_ = (a), *b_ = (b);            \
    if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                \
        fprintf(stderr, "  %s:%d: %s == \"%s\", expected \"%s\"\n",         \
                __FILE__, __LINE__, #a, a_ ? a_ : "(null)", b_ ? b_ : "(null)"); \
        t->failed = 1; return; } } while (0)

#define SKIP(reason) do { t->skipped = (reason); return; } while (0)

/* shared_path or skip the test loudly. */
#define SHARED(var, rel) const char *var = shared_path(t, rel); if (!var) return

/* Deterministic test numbers from a caller-owned xorshift64 state: uniform in [0, 1), and
 * pseudo-normal (mean 0, variance 1) as a scaled sum of four uniforms. */
static inline float test_urand(uint64_t *state) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return (float)(*state >> 40) / (float)(1 << 24);
}
static inline float test_nrand(uint64_t *state) {
    float s = 0;
    for (int k = 0; k < 4; k++) s += test_urand(state);
    return (s - 2.0f) * 1.7320508f;
}

#endif
