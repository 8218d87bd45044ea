#include "test.h"
#include "common/strbuf.h"

#include <stdlib.h>
#include <string.h>

TEST(strbuf_appends_stay_nul_terminated) {
    struct strbuf b = {0};
    strbuf_puts(&b, "root ::= ");
    strbuf_put(&b, "\"ab\"xyz", 4);
    strbuf_printf(&b, " | [%d-%d]", 0, 9);
    CHECK(!b.oom);
    CHECK_EQ_STR(b.s, "root ::= \"ab\" | [0-9]");
    CHECK_EQ_INT(b.n, strlen(b.s));
    strbuf_put(&b, "", 0);
    CHECK_EQ_INT(b.n, strlen("root ::= \"ab\" | [0-9]"));
    free(b.s);
}

/* A printf longer than the stack buffer is formatted again into the heap, whole. */
TEST(strbuf_printf_longer_than_its_scratch) {
    struct strbuf b = {0};
    char word[2000];
    memset(word, 'x', sizeof word - 1);
    word[sizeof word - 1] = 0;
    strbuf_puts(&b, "<");
    strbuf_printf(&b, "%s|%s", word, word);
    strbuf_puts(&b, ">");
    CHECK(!b.oom);
    CHECK_EQ_INT(b.n, 2 * (sizeof word - 1) + 3);
    CHECK(b.s[0] == '<' && b.s[sizeof word] == '|' && b.s[b.n - 1] == '>' && b.s[b.n] == 0);
    free(b.s);
}

/* After a failure every append is a no-op: the writer checks oom once at the end. */
TEST(strbuf_after_oom_appends_nothing) {
    struct strbuf b = {0};
    strbuf_puts(&b, "kept");
    b.oom = true;
    strbuf_puts(&b, "dropped");
    strbuf_printf(&b, "%d", 42);
    CHECK_EQ_STR(b.s, "kept");
    free(b.s);
}
