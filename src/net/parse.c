#include "net/parse.h"
#include "common/err.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PARSE(parser) ((struct http_parse *)(parser)->data)

static int fail(struct http_parse *p, int status, const char *reason) {
    p->status = status;
    p->reason = reason;
    return -1; /* any nonzero user return stops llhttp with HPE_USER (or a callback error) */
}

/* Append to the header area; 431 once the request line + headers exceed the limit. */
static int hdr_append(struct http_parse *p, const char *at, size_t n) {
    if (p->hdr_len + n + 1 > p->limits.max_header_bytes)
        return fail(p, 431, "request line and headers too large");
    memcpy(p->hdr + p->hdr_len, at, n);
    p->hdr_len += n;
    return 0;
}

static int on_message_begin(llhttp_t *parser) {
    struct http_parse *p = PARSE(parser);
    p->started = true;
    return 0;
}

static int on_url(llhttp_t *parser, const char *at, size_t n) {
    return hdr_append(PARSE(parser), at, n);
}

/* The area starts "target\0path\0": the path is a copy of the target up to '?'. */
static int on_url_complete(llhttp_t *parser) {
    struct http_parse *p = PARSE(parser);
    p->url_len = p->hdr_len;
    const char *q = memchr(p->hdr, '?', p->url_len);
    size_t path_len = q ? (size_t)(q - p->hdr) : p->url_len;
    static const char nul = '\0';
    if (hdr_append(p, &nul, 1)) return -1;
    if (hdr_append(p, p->hdr, path_len)) return -1;
    return hdr_append(p, &nul, 1);
}

/* Trailer fields (after a chunked body) are counted against the header limit and dropped: nothing
 * the server decides on (the API key above all) may come from them, and handlers see only the
 * fields that came before the body. */
static int trailer_bytes(struct http_parse *p, size_t n) {
    p->trailer_len += n;
    if (p->hdr_len + p->trailer_len > p->limits.max_header_bytes)
        return fail(p, 431, "request line and headers too large");
    return 0;
}

static int on_header_field(llhttp_t *parser, const char *at, size_t n) {
    struct http_parse *p = PARSE(parser);
    if (p->headers_done) return trailer_bytes(p, n);
    if (p->field_start == 0) { /* first piece of a new header name */
        if (p->n_headers == p->limits.max_headers) return fail(p, 431, "too many headers");
        p->field_start = p->hdr_len;
    }
    return hdr_append(p, at, n);
}

static int on_header_field_complete(llhttp_t *parser) {
    struct http_parse *p = PARSE(parser);
    if (p->headers_done) return 0;
    static const char nul = '\0';
    if (hdr_append(p, &nul, 1)) return -1;
    p->value_start = p->hdr_len;
    return 0;
}

static int on_header_value(llhttp_t *parser, const char *at, size_t n) {
    struct http_parse *p = PARSE(parser);
    return p->headers_done ? trailer_bytes(p, n) : hdr_append(p, at, n);
}

static int on_header_value_complete(llhttp_t *parser) {
    struct http_parse *p = PARSE(parser);
    if (p->headers_done) return 0;
    static const char nul = '\0';
    if (hdr_append(p, &nul, 1)) return -1;
    p->headers[p->n_headers++] = (struct http_header){p->hdr + p->field_start, p->hdr + p->value_start};
    p->field_start = p->value_start = 0;
    return 0;
}

static const char *find_header(const struct http_parse *p, const char *name) {
    for (size_t i = 0; i < p->n_headers; i++)
        if (!strcasecmp(p->headers[i].name, name)) return p->headers[i].value;
    return NULL;
}

static int body_reserve(struct http_parse *p, size_t need) {
    if (need + 1 <= p->body_cap) return 0;
    size_t cap = p->body_cap ? p->body_cap * 2 : 4096;
    if (cap < need + 1) cap = need + 1;
    if (cap > p->limits.max_body + 1) cap = p->limits.max_body + 1;
    char *b = realloc(p->body, cap);
    if (!b) return fail(p, 413, "no memory for the request body");
    p->body = b;
    p->body_cap = cap;
    return 0;
}

/* p->req from what has arrived: the head, and the body so far (all of it once complete). */
static void fill_request(struct http_parse *p) {
    llhttp_t *parser = &p->parser;
    if (p->body) p->body[p->body_len] = '\0';
    const char *target = p->hdr, *path = p->hdr + p->url_len + 1;
    const char *q = strchr(target, '?');
    p->req = (struct http_request){
        .method = llhttp_method_name((llhttp_method_t)llhttp_get_method(parser)),
        .target = target,
        .path = path,
        .query = q ? q + 1 : "",
        .headers = p->headers,
        .n_headers = (int)p->n_headers,
        .body = p->body ? p->body : "",
        .body_len = p->body_len,
    };
}

static int on_headers_complete(llhttp_t *parser) {
    struct http_parse *p = PARSE(parser);
    p->headers_done = true;
    /* uvlm switches to no other protocol: an Upgrade header is an offer it declines (RFC 9110
     * 7.8), so the connection goes on as HTTP/1.1 (llhttp would stop parsing after it). Only
     * CONNECT is followed by a tunnel's bytes: it is answered, then the connection closes. */
    if (parser->method != HTTP_CONNECT) parser->upgrade = 0;
    const char *expect = find_header(p, "Expect");
    if (expect) {
        if (strcasecmp(expect, "100-continue")) return fail(p, 417, "unsupported Expect header");
        p->expect_continue = true;
    }
    if (parser->flags & F_CONTENT_LENGTH) {
        if (parser->content_length > p->limits.max_body) return fail(p, 413, "request body too large");
    }
    /* A body follows: stop here so that the caller can look at the head before any of it is read
     * (and refuse it, e.g. without an API key, before the body costs memory). */
    bool body = (parser->flags & F_CHUNKED) || ((parser->flags & F_CONTENT_LENGTH) && parser->content_length > 0);
    if (body && !parser->upgrade) { /* CONNECT's bytes after the head are a tunnel's, never read */
        fill_request(p);
        p->at_head = true;
        return HPE_PAUSED;
    }
    return 0;
}

static int on_body(llhttp_t *parser, const char *at, size_t n) {
    struct http_parse *p = PARSE(parser);
    if (p->body_len + n > p->limits.max_body) return fail(p, 413, "request body too large");
    if (body_reserve(p, p->body_len + n)) return -1;
    memcpy(p->body + p->body_len, at, n);
    p->body_len += n;
    return 0;
}

static int on_message_complete(llhttp_t *parser) {
    struct http_parse *p = PARSE(parser);
    p->keep_alive = llhttp_should_keep_alive(parser) && !parser->upgrade;
    fill_request(p);
    p->complete = true;
    return HPE_PAUSED; /* one request at a time: the caller resumes with http_parse_next */
}

static const llhttp_settings_t settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_url_complete = on_url_complete,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

static void reset_request(struct http_parse *p) {
    free(p->body);
    p->body = NULL;
    p->body_len = p->body_cap = 0;
    p->hdr_len = p->url_len = p->n_headers = p->field_start = p->value_start = 0;
    p->trailer_len = 0;
    p->started = p->headers_done = p->at_head = p->complete = p->expect_continue = p->keep_alive = false;
    memset(&p->req, 0, sizeof p->req);
}

int http_parse_init(struct http_parse *p, const struct http_parse_limits *limits) {
    memset(p, 0, sizeof *p);
    p->limits = *limits;
    p->hdr = malloc(limits->max_header_bytes);
    p->headers = malloc(limits->max_headers * sizeof *p->headers);
    if (!p->hdr || !p->headers) {
        http_parse_free(p);
        return -ERR_NOMEM;
    }
    llhttp_init(&p->parser, HTTP_REQUEST, &settings);
    p->parser.data = p;
    return 0;
}

void http_parse_free(struct http_parse *p) {
    free(p->hdr);
    free(p->headers);
    free(p->body);
    p->hdr = NULL;
    p->headers = NULL;
    p->body = NULL;
}

int http_parse_feed(struct http_parse *p, const char *data, size_t len, size_t *used) {
    ASSERT(!p->status && !p->complete);
    *used = 0;
    bool after_head = p->at_head; /* the body comes next: resume, even with no byte yet */
    if (after_head) {
        p->at_head = false;
        llhttp_resume(&p->parser);
        /* the body's first reservation, now that the caller wants it read */
        if ((p->parser.flags & F_CONTENT_LENGTH) && body_reserve(p, (size_t)p->parser.content_length))
            return -ERR_TOOBIG; /* 413, no memory for it */
    }
    if (len == 0 && !after_head) return HTTP_PARSE_MORE;
    static const char none = '\0';
    llhttp_errno_t e = llhttp_execute(&p->parser, len ? data : &none, len);
    if (e == HPE_OK) {
        *used = len;
        return HTTP_PARSE_MORE;
    }
    if (e == HPE_PAUSED && (p->at_head || p->complete)) {
        *used = (size_t)(llhttp_get_error_pos(&p->parser) - (len ? data : &none));
        return p->complete ? HTTP_PARSE_DONE : HTTP_PARSE_HEAD;
    }
    if (!p->status) {
        p->status = 400;
        p->reason = llhttp_get_error_reason(&p->parser);
        if (!p->reason || !*p->reason) p->reason = llhttp_errno_name(e);
    }
    return p->status == 400 ? -ERR_FORMAT : -ERR_TOOBIG;
}

void http_parse_next(struct http_parse *p) {
    reset_request(p);
    if (llhttp_get_errno(&p->parser) == HPE_PAUSED) llhttp_resume(&p->parser);
}
