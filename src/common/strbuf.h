/* strbuf.h: a growable NUL-terminated byte string for code that writes text piece by piece
 * (grammar texts, tool-call arguments).
 *
 * The caller owns the struct and s (free(b.s) when done; a zeroed struct is an empty buffer). An
 * allocation failure sets oom and makes every later append a no-op, so a writer appends freely and
 * checks oom once at the end. s is NUL-terminated after every append (NULL until the first).
 *
 *   struct strbuf b = {0};
 *   strbuf_puts(&b, "root ::= ");
 *   strbuf_printf(&b, "\"%s\"", word);
 *   if (b.oom) { free(b.s); return -ERR_NOMEM; }
 */
#ifndef UVLM_COMMON_STRBUF_H
#define UVLM_COMMON_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

struct strbuf {
    char *s;      /* owned by the caller; NULL or NUL-terminated at n */
    size_t n, cap;
    bool oom;     /* an append failed: the contents are incomplete */
};

void strbuf_put(struct strbuf *b, const char *s, size_t n);
void strbuf_puts(struct strbuf *b, const char *s);
void strbuf_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
