/* runner.c: runs every registered TEST (see test.h); exit status 1 if any failed. */
#include "test.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Test registration happens in constructors before main: a list is the simplest home. */
static struct test_case *tests_head, **tests_tail = &tests_head;
static char shared_buf[4096];

void test_register(struct test_case *t) {
    *tests_tail = t;
    tests_tail = &t->next;
}

const char *shared_path(struct test_case *t, const char *rel) {
    const char *root = getenv("UVLM_SHARED");
    snprintf(shared_buf, sizeof shared_buf, "%s/%s", root ? root : "../shared", rel);
    if (access(shared_buf, R_OK) != 0) {
        fprintf(stderr, "  %s: missing %s\n", t->name, shared_buf);
        /* CI sets UVLM_NO_SKIP: there the golden gate must run, so missing data fails the test */
        const char *strict = getenv("UVLM_NO_SKIP");
        if (strict && *strict && strcmp(strict, "0") != 0)
            t->failed = 1;
        else
            t->skipped = "shared test data not found (../shared or $UVLM_SHARED)";
        return NULL;
    }
    return shared_buf;
}

static int selected(const char *name, int argc, char **argv) {
    if (argc < 2) return 1;
    for (int i = 1; i < argc; i++)
        if (strstr(name, argv[i])) return 1;
    return 0;
}

int main(int argc, char **argv) {
    int passed = 0, failed = 0, skipped = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* the slowest tests, printed at the end: where the suite's time goes */
    enum { N_SLOW = 8 };
    struct { const char *name; double s; } slow[N_SLOW] = {{0}};
    for (struct test_case *t = tests_head; t; t = t->next) {
        if (!selected(t->name, argc, argv)) continue;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        t->fn(t);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        int k = N_SLOW;
        while (k > 0 && (!slow[k - 1].name || slow[k - 1].s < s)) k--;
        if (k < N_SLOW) {
            memmove(&slow[k + 1], &slow[k], (size_t)(N_SLOW - 1 - k) * sizeof slow[0]);
            slow[k].name = t->name;
            slow[k].s = s;
        }
        if (t->failed) {
            failed++;
            printf("FAIL %s\n", t->name);
        } else if (t->skipped) {
            skipped++;
            printf("SKIP %s: %s\n", t->name, t->skipped);
        } else {
            passed++;
        }
    }
    printf("slowest:");
    for (int k = 0; k < N_SLOW && slow[k].name; k++) printf(" %s %.1fs", slow[k].name, slow[k].s);
    printf("\n%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
