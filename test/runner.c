/* runner.c: runs every registered TEST (see test.h); exit status 1 if any failed. */
#include "test.h"

#include <stdlib.h>
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
    for (struct test_case *t = tests_head; t; t = t->next) {
        if (!selected(t->name, argc, argv)) continue;
        t->fn(t);
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
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
