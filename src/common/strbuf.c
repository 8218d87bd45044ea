/* strbuf.c: see strbuf.h. */
#include "common/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void strbuf_put(struct strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void strbuf_puts(struct strbuf *b, const char *s) { strbuf_put(b, s, strlen(s)); }

void strbuf_printf(struct strbuf *b, const char *fmt, ...) {
    char tmp[512]; /* most pieces fit; a longer one is formatted twice */
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)k < sizeof tmp) {
        strbuf_put(b, tmp, (size_t)k);
        return;
    }
    char *big = malloc((size_t)k + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    strbuf_put(b, big, (size_t)k);
    free(big);
}
