/* parse.h: incremental HTTP/1.x request parsing on top of llhttp, into a struct http_request.
 * No sockets here: bytes go in, a complete request (or an error status) comes out, so it is
 * tested by feeding requests split at every byte boundary (test/net/parse_test.c).
 *
 * Handles Content-Length and chunked bodies, pipelining (parsing stops after each complete
 * request; the rest is fed again after http_parse_next), and the limits:
 * request line + headers over max_header_bytes or more than max_headers headers -> 431, body
 * over max_body -> 413 (known from Content-Length before any body byte arrives), malformed
 * -> 400 with llhttp's reason (llhttp is built strict, deps.mk: a chunk's data not followed by
 * CRLF is a 400). A request with a body stops once more when its head is complete
 * (HTTP_PARSE_HEAD: p->req has everything but the body), before any body byte is read, so that
 * the caller can refuse it (401 without reading the body) or send "100 Continue" when
 * `expect_continue` says the client waits for it; feeding again (even zero bytes) reads the body.
 * Trailer fields after a chunked body count against max_header_bytes and are dropped: the
 * request's headers are the ones before the body.
 * An `Upgrade` offer is declined (the connection stays HTTP/1.1); a CONNECT request parses
 * with keep_alive false, since the bytes after it would be a tunnel's.
 *
 *   struct http_parse p;
 *   http_parse_init(&p, &limits);
 *   size_t used;
 *   int rc = http_parse_feed(&p, buf, n, &used);
 *   if (rc == HTTP_PARSE_HEAD)  { look at p.req's head; feed buf+used to read the body }
 *   if (rc == HTTP_PARSE_DONE)  { handle(&p.req); ... when answered: http_parse_next(&p); feed buf+used }
 *   if (rc < 0)                 { reply p.status with p.reason, close the connection }
 *   http_parse_free(&p);
 *
 * Memory: the header area (max_header_bytes) and header array are allocated once in init; the
 * body buffer grows as needed up to max_body and is released by http_parse_next.
 */
#ifndef UVLM_NET_PARSE_H
#define UVLM_NET_PARSE_H

#include "api/http.h"

#include <llhttp.h>
#include <stdbool.h>
#include <stddef.h>

struct http_parse_limits {
    size_t max_header_bytes;
    size_t max_headers;
    size_t max_body;
};

enum http_parse_result {
    HTTP_PARSE_MORE = 0, /* everything consumed, request not complete */
    HTTP_PARSE_DONE = 1, /* p->req is complete; bytes after `used` belong to the next request */
    HTTP_PARSE_HEAD = 2, /* the head of a request with a body is complete (p->req without the body);
                          * bytes after `used` are its body: feed them (or zero bytes) to go on */
    /* negative: -ERR_FORMAT / -ERR_TOOBIG with p->status and p->reason set */
};

struct http_parse {
    llhttp_t parser;
    struct http_parse_limits limits;
    struct http_request req; /* valid after HTTP_PARSE_DONE until http_parse_next */

    char *hdr;               /* "url\0name\0value\0name\0value\0..." */
    size_t hdr_len;
    struct http_header *headers;
    size_t n_headers;
    size_t url_len;
    size_t field_start;      /* offset of the header name being read */
    size_t value_start;      /* offset of the header value being read, or 0 */
    char *body;
    size_t body_len, body_cap;

    size_t trailer_len;      /* bytes of trailer fields (counted, not kept) */

    bool started;            /* the first byte of a request has arrived */
    bool headers_done;
    bool at_head;            /* stopped at HTTP_PARSE_HEAD, the body not read yet */
    bool complete;           /* stopped at HTTP_PARSE_DONE until http_parse_next */
    bool expect_continue;    /* Expect: 100-continue was sent and headers are done */
    bool keep_alive;         /* valid after DONE: the connection may carry another request */
    int status;              /* after an error: 400, 413, 417 or 431 */
    const char *reason;      /* after an error: why (static string) */
};

int http_parse_init(struct http_parse *p, const struct http_parse_limits *limits);
void http_parse_free(struct http_parse *p);

/* Feed bytes. *used is how many were consumed (less than len only after DONE or HEAD). */
int http_parse_feed(struct http_parse *p, const char *data, size_t len, size_t *used);

/* After a DONE request has been answered: forget it and get ready for the next one. */
void http_parse_next(struct http_parse *p);

/* True between requests: no byte of the next request has arrived yet. */
static inline bool http_parse_idle(const struct http_parse *p) { return !p->started; }

#endif
