/* http_fuzz.c: libFuzzer target for the HTTP request parser (src/net/parse.c over llhttp).
 * The first byte picks where reads are cut; the rest is a byte stream of pipelined requests.
 * Checks the parser's promises: limits hold, strings are NUL-terminated, every byte is consumed
 * or reported, an error carries a status and a reason; and the header/query lookups of
 * src/api/http.c on every parsed request (no overrun, a decoded value fits or is refused).
 * Built and run by `make fuzz FUZZ_TARGETS=http` (scripts/fuzz.mk); by hand:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE -Isrc -I/usr/share/include/llhttp \
 *     test/fuzz/http_fuzz.c src/net/parse.c src/api/http.c src/api/errors.c src/common/err.c \
 *     /usr/share/llhttp/{api,http,llhttp}.c -ljansson -o fuzz-http
 *   ./fuzz-http -max_total_time=60 test/fuzz/corpus/http */
#include "common/err.h"
#include "api/http.h"
#include "net/parse.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t cut = data[0] % 17 + 1; /* read size: 1..17 bytes */
    data++, size--;
    static const struct http_parse_limits limits = {.max_header_bytes = 512, .max_headers = 8, .max_body = 256};
    struct http_parse p;
    if (http_parse_init(&p, &limits)) return 0;
    size_t off = 0;
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
        if (rc == HTTP_PARSE_DONE) {
            const struct http_request *r = &p.req;
            ASSERT(r->method && r->target && r->path && r->query && r->body);
            ASSERT(strlen(r->path) <= strlen(r->target));
            ASSERT(r->body_len <= limits.max_body && r->body[r->body_len] == '\0');
            ASSERT(r->n_headers >= 0 && (size_t)r->n_headers <= limits.max_headers);
            for (int i = 0; i < r->n_headers; i++) {
                ASSERT(strlen(r->headers[i].name) + strlen(r->headers[i].value) < limits.max_header_bytes);
                ASSERT(http_header(r, r->headers[i].name) != NULL); /* the first of that name */
            }
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
