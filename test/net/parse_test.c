#include "test.h"
#include "common/err.h"
#include "net/parse.h"

static const struct http_parse_limits limits = {.max_header_bytes = 1024, .max_headers = 8, .max_body = 64};

/* Feed `data` in pieces cut at `cuts` (ascending offsets), as if each piece were one read; a
 * stop at the head (HTTP_PARSE_HEAD) goes on with the rest of the piece, as the server does.
 * Returns the result of the last feed; *consumed is the total consumed. */
static int feed_pieces(struct http_parse *p, const char *data, size_t len, const size_t *cuts, int n_cuts,
                       size_t *consumed) {
    size_t start = 0;
    int rc = HTTP_PARSE_MORE;
    *consumed = 0;
    for (int k = 0; k <= n_cuts && (rc == HTTP_PARSE_MORE || rc == HTTP_PARSE_HEAD); k++) {
        size_t end = k < n_cuts ? cuts[k] : len, used;
        do {
            rc = http_parse_feed(p, data + start, end - start, &used);
            *consumed += used;
            start += used;
        } while (rc == HTTP_PARSE_HEAD);
        if (rc == HTTP_PARSE_MORE) start = end;
    }
    return rc;
}

/* Feed everything at once (through any stop at the head). */
static int feed_all(struct http_parse *p, const char *data, size_t len, size_t *consumed) {
    return feed_pieces(p, data, len, NULL, 0, consumed);
}

struct expect {
    const char *method, *target, *path, *query, *body;
    const char *header_name, *header_value;
    int n_headers;
};

static int matches(const struct http_parse *p, const struct expect *e) {
    const struct http_request *r = &p->req;
    return !strcmp(r->method, e->method) && !strcmp(r->target, e->target) && !strcmp(r->path, e->path) &&
           !strcmp(r->query, e->query) && r->body_len == strlen(e->body) && !strcmp(r->body, e->body) &&
           r->n_headers == e->n_headers && http_header(r, e->header_name) &&
           !strcmp(http_header(r, e->header_name), e->header_value);
}

static const char cl_req[] = "POST /v1/x?a=1&b=%20 HTTP/1.1\r\nHost: h\r\nX-Long-Name: some value\r\n"
                             "Content-Length: 11\r\n\r\nhello world";
static const struct expect cl_exp = {"POST", "/v1/x?a=1&b=%20", "/v1/x", "a=1&b=%20", "hello world",
                                     "x-long-name", "some value", 3};
static const char chunked_req[] = "PUT /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\nEmpty:\r\n\r\n"
                                  "5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nTrailer: t\r\n\r\n";
/* the trailer is not one of the request's headers */
static const struct expect chunked_exp = {"PUT", "/c", "/c", "", "hello world", "empty", "", 2};

TEST(parse_request_split_at_every_byte_boundary) {
    const char *reqs[] = {cl_req, chunked_req};
    const struct expect *exps[] = {&cl_exp, &chunked_exp};
    for (int r = 0; r < 2; r++) {
        size_t len = strlen(reqs[r]);
        for (size_t i = 0; i <= len; i++) {
            struct http_parse p;
            CHECK_EQ_INT(http_parse_init(&p, &limits), 0);
            size_t used;
            int rc = feed_pieces(&p, reqs[r], len, &i, 1, &used);
            int ok = rc == HTTP_PARSE_DONE && used == len && matches(&p, exps[r]) && p.keep_alive;
            http_parse_free(&p);
            if (!ok) fprintf(stderr, "  request %d split at %zu: rc %d used %zu\n", r, i, rc, used);
            CHECK(ok);
        }
    }
}

TEST(parse_request_split_into_three_everywhere) {
    size_t len = strlen(chunked_req);
    for (size_t i = 0; i <= len; i++)
        for (size_t j = i; j <= len; j++) {
            struct http_parse p;
            CHECK_EQ_INT(http_parse_init(&p, &limits), 0);
            size_t cuts[2] = {i, j}, used;
            int rc = feed_pieces(&p, chunked_req, len, cuts, 2, &used);
            int ok = rc == HTTP_PARSE_DONE && used == len && matches(&p, &chunked_exp);
            http_parse_free(&p);
            CHECK(ok);
        }
}

TEST(parse_pipelined_requests_one_at_a_time) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s%s", cl_req, "GET /second HTTP/1.1\r\nConnection: close\r\n\r\n");
    size_t len = strlen(buf), used;
    struct http_parse p;
    CHECK_EQ_INT(http_parse_init(&p, &limits), 0);
    CHECK_EQ_INT(feed_all(&p, buf, len, &used), HTTP_PARSE_DONE);
    CHECK_EQ_INT(used, strlen(cl_req));
    CHECK(matches(&p, &cl_exp));
    http_parse_next(&p);
    CHECK(http_parse_idle(&p));
    size_t used2;
    int rc = http_parse_feed(&p, buf + used, len - used, &used2);
    CHECK_EQ_INT(rc, HTTP_PARSE_DONE);
    CHECK_EQ_INT(used2, len - used);
    CHECK_EQ_STR(p.req.path, "/second");
    CHECK_EQ_INT(p.req.body_len, 0);
    CHECK_EQ_STR(p.req.body, "");
    CHECK(!p.keep_alive);
    http_parse_free(&p);
}

static int parse_error(const char *req, const char *reason_part) {
    struct http_parse p;
    size_t used;
    if (http_parse_init(&p, &limits)) return -1;
    int rc = feed_all(&p, req, strlen(req), &used);
    int status = rc < 0 ? p.status : 0;
    if (status && reason_part && !strstr(p.reason, reason_part)) {
        fprintf(stderr, "  reason '%s' lacks '%s'\n", p.reason, reason_part);
        status = -2;
    }
    http_parse_free(&p);
    return status;
}

TEST(parse_limits_and_errors_give_statuses) {
    char big[2048];
    snprintf(big, sizeof big, "GET / HTTP/1.1\r\nX: %01500d\r\n\r\n", 0);
    CHECK_EQ_INT(parse_error(big, "too large"), 431);
    CHECK_EQ_INT(parse_error("GET / HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\nF: 1\r\nG: 1\r\nH: 1\r\n"
                             "I: 1\r\n\r\n", "too many"), 431);
    CHECK_EQ_INT(parse_error("GET / HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\nF: 1\r\nG: 1\r\nH: 1\r\n"
                             "\r\n", NULL), 0);
    CHECK_EQ_INT(parse_error("POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n", "body"), 413);
    CHECK_EQ_INT(parse_error("POST / HTTP/1.1\r\nContent-Length: 64\r\n\r\n", NULL), 0);
    CHECK_EQ_INT(parse_error("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n"
                             "0123456789012345678901234567890123456789012345678901234567890123\r\n1\r\nx\r\n", "body"),
                 413);
    CHECK_EQ_INT(parse_error("POST / HTTP/1.1\r\nExpect: teapot\r\n\r\n", "Expect"), 417);
    CHECK_EQ_INT(parse_error("GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n", "Content-Length"), 400);
    CHECK_EQ_INT(parse_error("BLAH\r\n\r\n", NULL), 400);
    CHECK_EQ_INT(parse_error("GET / HTTP/1.1\r\nNoColon\r\n\r\n", NULL), 400);
}

TEST(parse_expect_continue_known_after_headers) {
    struct http_parse p;
    size_t used;
    const char *head = "POST /e HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\n";
    CHECK_EQ_INT(http_parse_init(&p, &limits), 0);
    CHECK_EQ_INT(http_parse_feed(&p, head, strlen(head) - 2, &used), HTTP_PARSE_MORE);
    CHECK(p.started && !p.expect_continue);
    CHECK_EQ_INT(http_parse_feed(&p, head + used, 2, &used), HTTP_PARSE_HEAD);
    CHECK(p.expect_continue);
    CHECK_EQ_INT(http_parse_feed(&p, "ok", 2, &used), HTTP_PARSE_DONE);
    CHECK_EQ_STR(p.req.body, "ok");
    http_parse_free(&p);
}

TEST(parse_stops_at_the_head_of_a_request_with_a_body) {
    struct http_parse p;
    size_t used;
    CHECK_EQ_INT(http_parse_init(&p, &limits), 0);
    CHECK_EQ_INT(http_parse_feed(&p, cl_req, strlen(cl_req), &used), HTTP_PARSE_HEAD);
    CHECK_EQ_INT(used, strlen(cl_req) - strlen("hello world")); /* not one body byte */
    CHECK_EQ_STR(p.req.method, "POST");
    CHECK_EQ_STR(p.req.path, "/v1/x");
    CHECK_EQ_STR(http_header(&p.req, "X-Long-Name"), "some value");
    CHECK_EQ_INT(p.req.body_len, 0);
    CHECK(p.body == NULL); /* nothing reserved for the body before the caller wants it */
    size_t used2;
    CHECK_EQ_INT(http_parse_feed(&p, cl_req + used, strlen(cl_req) - used, &used2), HTTP_PARSE_DONE);
    CHECK(matches(&p, &cl_exp));
    http_parse_free(&p);
    /* a head alone, then zero bytes: the body is still to come */
    const char *head = "POST /e HTTP/1.1\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n";
    CHECK_EQ_INT(http_parse_init(&p, &limits), 0);
    CHECK_EQ_INT(http_parse_feed(&p, head, strlen(head), &used), HTTP_PARSE_HEAD);
    CHECK_EQ_INT(used, strlen(head));
    CHECK(p.expect_continue);
    CHECK_EQ_INT(http_parse_feed(&p, "", 0, &used), HTTP_PARSE_MORE);
    CHECK_EQ_INT(http_parse_feed(&p, "2\r\nok\r\n0\r\n\r\n", 15, &used), HTTP_PARSE_DONE);
    CHECK_EQ_STR(p.req.body, "ok");
    http_parse_free(&p);
    /* without a body there is no stop at the head; nor with Content-Length: 0 */
    const char *get = "GET /g HTTP/1.1\r\n\r\nPOST /z HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
    CHECK_EQ_INT(http_parse_init(&p, &limits), 0);
    CHECK_EQ_INT(http_parse_feed(&p, get, strlen(get), &used), HTTP_PARSE_DONE);
    http_parse_next(&p);
    CHECK_EQ_INT(http_parse_feed(&p, get + used, strlen(get) - used, &used2), HTTP_PARSE_DONE);
    CHECK_EQ_STR(p.req.path, "/z");
    http_parse_free(&p);
}

/* The bytes after a chunk's data must be CRLF: a lenient parser skips any two, so that a proxy and
 * the server disagree on where the body ends (request smuggling). */
TEST(parse_chunk_data_not_followed_by_crlf_is_400) {
    CHECK_EQ_INT(parse_error("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                             "10\r\n{\"content\":\"ab\"}XY0\r\n\r\n", NULL), 400);
    CHECK_EQ_INT(parse_error("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                             "2\r\nab\n0\r\n\r\n", NULL), 400);
    CHECK_EQ_INT(parse_error("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                             "2\r\nab\r\n0\r\n\r\n", NULL), 0);
}

/* A trailer never becomes a header: an X-Api-Key or Authorization sent after the body authenticates
 * nothing, and trailers beyond max_header_bytes are refused like headers. */
TEST(parse_trailers_are_dropped_and_bounded) {
    struct http_parse p;
    size_t used;
    const char *req = "POST /t HTTP/1.1\r\nTransfer-Encoding: chunked\r\nHost: h\r\n\r\n"
                      "2\r\nab\r\n0\r\nX-Api-Key: k\r\nAuthorization: Bearer k\r\n\r\n";
    CHECK_EQ_INT(http_parse_init(&p, &limits), 0);
    CHECK_EQ_INT(feed_all(&p, req, strlen(req), &used), HTTP_PARSE_DONE);
    CHECK_EQ_INT(used, strlen(req));
    CHECK_EQ_INT(p.req.n_headers, 2);
    CHECK(http_header(&p.req, "X-Api-Key") == NULL && http_header(&p.req, "Authorization") == NULL);
    CHECK_EQ_STR(p.req.body, "ab");
    http_parse_free(&p);
    char big[2048];
    snprintf(big, sizeof big, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: %01100d\r\n\r\n", 0);
    CHECK_EQ_INT(http_parse_init(&p, &limits), 0);
    CHECK_EQ_INT(feed_all(&p, big, strlen(big), &used), -ERR_TOOBIG);
    CHECK_EQ_INT(p.status, 431);
    http_parse_free(&p);
}

TEST(parse_http10_is_not_keep_alive) {
    struct http_parse p;
    size_t used;
    const char *req = "GET /old HTTP/1.0\r\n\r\n";
    CHECK_EQ_INT(http_parse_init(&p, &limits), 0);
    CHECK_EQ_INT(http_parse_feed(&p, req, strlen(req), &used), HTTP_PARSE_DONE);
    CHECK(!p.keep_alive);
    http_parse_free(&p);
}

/* Feed a request and the pipelined GET /next after it: 1 when both parse, 0 when the second is
 * refused; *keep_alive is the first request's. */
static int parses_then_next(const char *first, bool *keep_alive) {
    char buf[512];
    snprintf(buf, sizeof buf, "%sGET /next HTTP/1.1\r\n\r\n", first);
    size_t len = strlen(buf), used, used2;
    struct http_parse p;
    if (http_parse_init(&p, &limits)) return -1;
    int ok = feed_all(&p, buf, len, &used) == HTTP_PARSE_DONE && used == strlen(first);
    *keep_alive = p.keep_alive;
    http_parse_next(&p);
    ok = ok && http_parse_feed(&p, buf + used, len - used, &used2) == HTTP_PARSE_DONE &&
         !strcmp(p.req.path, "/next");
    http_parse_free(&p);
    return ok;
}

/* An Upgrade offer (h2c from curl --http2, a websocket probe) is declined: the connection stays
 * HTTP/1.1 and carries the next request. CONNECT's following bytes would be a tunnel: close. */
TEST(parse_upgrade_offer_is_declined_and_connect_closes) {
    bool keep;
    CHECK_EQ_INT(parses_then_next("GET /u HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n", &keep), 1);
    CHECK(keep);
    CHECK_EQ_INT(parses_then_next("POST /u HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                                  "Content-Length: 3\r\n\r\nabc", &keep), 1);
    CHECK(keep);
    struct http_parse p;
    size_t used;
    const char *connect = "CONNECT host:443 HTTP/1.1\r\nHost: host:443\r\n\r\n";
    CHECK_EQ_INT(http_parse_init(&p, &limits), 0);
    CHECK_EQ_INT(http_parse_feed(&p, connect, strlen(connect), &used), HTTP_PARSE_DONE);
    CHECK_EQ_STR(p.req.method, "CONNECT");
    CHECK(!p.keep_alive);
    http_parse_free(&p);
    /* a CONNECT announcing a chunked body reads none: no stop at its head, done at once */
    const char *connect_chunked = "CONNECT host:443 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n";
    CHECK_EQ_INT(http_parse_init(&p, &limits), 0);
    CHECK_EQ_INT(http_parse_feed(&p, connect_chunked, strlen(connect_chunked), &used), HTTP_PARSE_DONE);
    CHECK_EQ_INT(p.req.body_len, 0);
    CHECK(!p.keep_alive);
    http_parse_free(&p);
}
