/* http_fuzz.c: libFuzzer target for the HTTP request parser (src/net/parse.c over llhttp).
 * The first byte picks where reads are cut; the rest is a byte stream of pipelined requests.
 * Checks the parser's promises: limits hold, strings are NUL-terminated, every byte is consumed
 * or reported, an error carries a status and a reason, a request with a body stops at its head
 * before any body byte, trailers never join the headers, a chunked body accepted is framed
 * exactly as RFC 9112 says (a strict decoder here agrees on its bytes); and the header/query
 * lookups of src/api/http.c on every parsed request (no overrun, a decoded value fits or is
 * refused).
 * Built and run by `make fuzz FUZZ_TARGETS=http` (scripts/fuzz.mk); by hand:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE -DLLHTTP_STRICT_MODE=1 \
 *     -Isrc -I/usr/share/include/llhttp \
 *     test/fuzz/http_fuzz.c src/net/parse.c src/api/http.c src/api/errors.c src/common/err.c \
 *     /usr/share/llhttp/{api,http,llhttp}.c -ljansson -o fuzz-http
 *   ./fuzz-http -max_total_time=60 test/fuzz/corpus/http */
#include "common/err.h"
#include "api/http.h"
#include "net/parse.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* A line's end at b[*pos]: CRLF, or a lone LF (RFC 9112 2.2 lets a recipient take LF alone). */
static bool line_end(const uint8_t *b, size_t n, size_t *pos) {
    if (*pos < n && b[*pos] == '\n') return ++*pos, true;
    if (*pos + 1 < n && b[*pos] == '\r' && b[*pos + 1] == '\n') return *pos += 2, true;
    return false;
}

/* The strict reading of a chunked body (RFC 9112 7.1): hex size, extensions, line end, data, line
 * end, ..., "0", line end, trailer lines, empty line. Decodes b[0..n) into out (at most cap bytes);
 * false when the framing is anything else (above all: data not followed by a line end) or does not
 * end exactly at n. */
static bool chunked_strict(const uint8_t *b, size_t n, char *out, size_t cap, size_t *out_len) {
    size_t pos = 0;
    *out_len = 0;
    for (;;) {
        size_t size = 0, digits = 0;
        for (; pos < n && digits < 16; pos++, digits++) {
            int c = b[pos], v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (v < 0) break;
            size = size * 16 + (size_t)v;
        }
        if (!digits) return false;
        while (pos < n && b[pos] != '\r' && b[pos] != '\n') pos++; /* extensions */
        if (!line_end(b, n, &pos)) return false;
        if (size == 0) break;
        if (size > n - pos || size > cap - *out_len) return false;
        memcpy(out + *out_len, b + pos, size);
        *out_len += size;
        pos += size;
        if (!line_end(b, n, &pos)) return false;
    }
    for (;;) { /* trailer lines, then the empty line */
        size_t line = pos;
        while (pos < n && b[pos] != '\r' && b[pos] != '\n') pos++;
        bool empty = pos == line;
        if (!line_end(b, n, &pos)) return false;
        if (empty) return pos == n;
    }
}

static void check_request(const struct http_request *r, const struct http_parse_limits *limits) {
    ASSERT(r->method && r->target && r->path && r->query && r->body);
    ASSERT(strlen(r->path) <= strlen(r->target));
    ASSERT(r->body_len <= limits->max_body && r->body[r->body_len] == '\0');
    ASSERT(r->n_headers >= 0 && (size_t)r->n_headers <= limits->max_headers);
    for (int i = 0; i < r->n_headers; i++) {
        ASSERT(strlen(r->headers[i].name) + strlen(r->headers[i].value) < limits->max_header_bytes);
        ASSERT(http_header(r, r->headers[i].name) != NULL); /* the first of that name */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t cut = data[0] % 17 + 1; /* read size: 1..17 bytes */
    data++, size--;
    static const struct http_parse_limits limits = {.max_header_bytes = 512, .max_headers = 8, .max_body = 256};
    struct http_parse p;
    if (http_parse_init(&p, &limits)) return 0;
    size_t off = 0;
    size_t body_start = 0; /* where the body of the request being read begins (after its head) */
    int head_headers = -1; /* its headers when its head was complete, or -1 (no stop at the head) */
    while (off < size) {
        size_t n = size - off < cut ? size - off : cut, used;
        int rc = http_parse_feed(&p, (const char *)data + off, n, &used);
        ASSERT(used <= n);
        if (rc < 0) {
            ASSERT(p.status == 400 || p.status == 413 || p.status == 417 || p.status == 431);
            ASSERT(p.reason && *p.reason);
            break;
        }
        off += used;
        if (rc == HTTP_PARSE_HEAD) { /* a body follows: none of it is read yet */
            check_request(&p.req, &limits);
            ASSERT(p.req.body_len == 0);
            head_headers = p.req.n_headers;
            body_start = off;
            continue;
        }
        if (rc == HTTP_PARSE_DONE) {
            const struct http_request *r = &p.req;
            check_request(r, &limits);
            /* trailers never join the headers */
            ASSERT(head_headers < 0 || r->n_headers == head_headers);
            /* a chunked body is framed exactly as RFC 9112 says, and is what was decoded */
            if ((p.parser.flags & F_CHUNKED) && !p.parser.upgrade) { /* CONNECT reads no body */
                char strict[256];
                size_t strict_len;
                ASSERT(head_headers >= 0);
                ASSERT(chunked_strict(data + body_start, off - body_start, strict, sizeof strict, &strict_len));
                ASSERT(strict_len == r->body_len && !memcmp(strict, r->body, strict_len));
            }
            head_headers = -1;
            /* the query lookup the handlers use: decoded values fit or are refused, never overrun */
            static const char *const keys[] = {"n", "ms", "a", ""};
            for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
                char small[4], big[300];
                int n_small = http_query(r, keys[k], small, sizeof small);
                int n_big = http_query(r, keys[k], big, sizeof big);
                ASSERT(n_small == -ERR_NOTFOUND || n_small == -ERR_TOOBIG || (n_small >= 0 && n_small < 4));
                ASSERT(n_big == -ERR_NOTFOUND || n_big == -ERR_TOOBIG || (n_big >= 0 && n_big < 300));
                ASSERT((n_small == -ERR_NOTFOUND) == (n_big == -ERR_NOTFOUND));
                if (n_small >= 0) ASSERT(n_big == n_small && !memcmp(small, big, (size_t)n_small + 1));
            }
            bool keep = p.keep_alive;
            http_parse_next(&p);
            if (!keep) break;
        } else {
            ASSERT(used == n);
        }
    }
    http_parse_free(&p);
    return 0;
}
