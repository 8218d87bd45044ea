/* http.c: the helpers of http.h: header and query lookup (pure), and the answering functions,
 * which check their arguments and call the request's responder. */
#include "api/http.h"
#include "api/errors.h"
#include "common/err.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *http_header(const struct http_request *req, const char *name) {
    for (int i = 0; i < req->n_headers; i++)
        if (!strcasecmp(req->headers[i].name, name)) return req->headers[i].value;
    return NULL;
}

const char *http_api_key(const struct http_request *req) {
    const char *auth = http_header(req, "Authorization");
    if (auth && !strncasecmp(auth, "Bearer ", 7)) {
        auth += 7;
        while (*auth == ' ') auth++;
        return auth;
    }
    return http_header(req, "X-Api-Key");
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

int http_add_header(struct http_request *req, const char *name, const char *value) {
    if (strpbrk(name, "\r\n:") || strpbrk(value, "\r\n")) return -ERR_INVAL; /* no header injection */
    return req->resp->add_header(req, name, value);
}

int http_respond(struct http_request *req, int status, const char *content_type, const char *body, size_t len) {
    return req->resp->respond(req, status, content_type, body, len);
}

int http_respond_json(struct http_request *req, int status, const char *json) {
    return http_respond(req, status, "application/json", json, strlen(json));
}

int http_respond_error(struct http_request *req, int status, const char *message) {
    char body[1024];
    size_t n = req->error_shape == HTTP_ERRORS_ANTHROPIC ? api_error_json_anthropic(body, sizeof body, status, message)
                                                         : api_error_json(body, sizeof body, status, message);
    return http_respond(req, status, "application/json", body, n);
}

void http_on_cancel(struct http_request *req, http_cancel_cb cb, void *data) {
    req->resp->on_cancel(req, cb, data);
}

void http_on_abort(struct http_request *req, http_cancel_cb cb) {
    req->resp->on_abort(req, cb);
}

int http_sse_start(struct http_request *req, http_cancel_cb cb, void *data) {
    return req->resp->sse_start(req, cb, data);
}

int http_sse_send(struct http_request *req, const char *data, size_t len) {
    return http_sse_send_event(req, NULL, data, len);
}

int http_sse_send_event(struct http_request *req, const char *event, const char *data, size_t len) {
    if (memchr(data, '\n', len)) return -ERR_INVAL; /* would end the event early */
    if (event && strpbrk(event, "\r\n")) return -ERR_INVAL;
    return req->resp->sse_send(req, event, data, len);
}

int http_sse_end(struct http_request *req) {
    return req->resp->sse_end(req);
}
