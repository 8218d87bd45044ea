/* http.c: the pure helpers of http.h (header and query lookup). The response functions are
 * implemented by the server in src/net/conn.c. */
#include "api/http.h"
#include "common/err.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *http_header(const struct http_request *req, const char *name) {
    for (int i = 0; i < req->n_headers; i++)
        if (!strcasecmp(req->headers[i].name, name)) return req->headers[i].value;
    return NULL;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decode src[0..n) into out; returns the decoded length or -ERR_TOOBIG. */
static int url_decode(const char *src, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = src[i];
        if (c == '+') c = ' ';
        else if (c == '%' && i + 2 < n && hex_value(src[i + 1]) >= 0 && hex_value(src[i + 2]) >= 0) {
            c = (char)(hex_value(src[i + 1]) * 16 + hex_value(src[i + 2]));
            i += 2;
        }
        if (o + 1 >= cap) return -ERR_TOOBIG;
        out[o++] = c;
    }
    out[o] = '\0';
    return (int)o;
}

int http_query(const struct http_request *req, const char *key, char *out, size_t cap) {
    size_t klen = strlen(key);
    if (cap == 0) return -ERR_TOOBIG;
    for (const char *p = req->query ? req->query : ""; *p;) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        size_t name_len = eq ? (size_t)(eq - p) : len;
        if (name_len == klen && !memcmp(p, key, klen)) {
            if (!eq) { out[0] = '\0'; return 0; }
            return url_decode(eq + 1, len - name_len - 1, out, cap);
        }
        p += len + (amp ? 1 : 0);
    }
    return -ERR_NOTFOUND;
}

long long http_query_int(const struct http_request *req, const char *key, long long def, long long max) {
    char v[32];
    if (http_query(req, key, v, sizeof v) <= 0) return def;
    long long x = strtoll(v, NULL, 10);
    return x < 0 ? 0 : x > max ? max : x;
}
