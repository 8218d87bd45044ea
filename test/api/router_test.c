#include "test.h"
#include "api/errors.h"
#include "api/fake.h"
#include "api/router.h"
#include "common/err.h"

#include <stdlib.h>

static void nop_handle(struct http_request *req, void *data) {}

/* Answers with its route data's text, and remembers that it ran. */
static int handled;
static void text_handle(struct http_request *req, void *data) {
    handled++;
    if (req->route_data != data) return; /* no answer: the test sees status 0 */
    http_respond(req, 200, "text/plain", data, strlen(data));
}

TEST(router_matches_404_405_and_allow) {
    struct router r;
    router_init(&r, NULL, NULL);
    CHECK_EQ_INT(router_add(&r, "GET", "/health", nop_handle, NULL, ROUTE_PUBLIC), 0);
    CHECK_EQ_INT(router_add(&r, "POST", "/v1/chat", nop_handle, NULL, 0), 0);
    CHECK_EQ_INT(router_add(&r, "GET", "/v1/models/*", nop_handle, NULL, 0), 0);
    CHECK_EQ_INT(router_add(&r, "GET", "/health", nop_handle, NULL, 0), -ERR_INVAL);
    const struct route *route;
    CHECK_EQ_INT(router_match(&r, "GET", "/health", &route), 0);
    CHECK(route->flags & ROUTE_PUBLIC);
    CHECK_EQ_INT(router_match(&r, "GET", "/v1/models/abc", &route), 0);
    CHECK_EQ_INT(router_match(&r, "GET", "/healthz", &route), -ERR_NOTFOUND);
    CHECK_EQ_INT(router_match(&r, "GET", "/v1/chat", &route), -ERR_UNSUPPORTED);
    char allow[64];
    router_allow(&r, "/v1/chat", allow, sizeof allow);
    CHECK_EQ_STR(allow, "POST, OPTIONS");
    router_allow(&r, "/health", allow, sizeof allow);
    CHECK_EQ_STR(allow, "GET, HEAD, OPTIONS");
    CHECK_EQ_INT(router_match(&r, "HEAD", "/health", &route), 0);
    CHECK(route->flags & ROUTE_PUBLIC);
    CHECK_EQ_INT(router_match(&r, "HEAD", "/v1/chat", &route), -ERR_UNSUPPORTED);
    for (int i = 3; i < ROUTER_MAX_ROUTES; i++) {
        char *path = malloc(16);
        snprintf(path, 16, "/r%d", i);
        CHECK_EQ_INT(router_add(&r, "GET", path, nop_handle, path, 0), 0);
    }
    CHECK_EQ_INT(router_add(&r, "GET", "/full", nop_handle, NULL, 0), -ERR_NOMEM);
    for (int i = 3; i < ROUTER_MAX_ROUTES; i++) free(r.routes[i].data);
}

TEST(router_authorizes_bearer_or_x_api_key) {
    struct config_list keys = {2, {"alpha", "beta"}};
    struct router r;
    router_init(&r, &keys, NULL);
    struct http_header h[1];
    struct http_request req = {.headers = h, .n_headers = 0};
    CHECK(!router_authorized(&r, &req));
    req.n_headers = 1;
    static const struct { const char *name, *value; int ok; } cases[] = {
        {"Authorization", "Bearer alpha", 1}, {"authorization", "bearer  beta", 1}, {"X-API-KEY", "beta", 1},
        {"Authorization", "Bearer alph", 0},  {"Authorization", "Bearer alphaa", 0}, {"Authorization", "alpha", 0},
        {"X-Api-Key", "", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        h[0] = (struct http_header){cases[i].name, cases[i].value};
        CHECK_EQ_INT(router_authorized(&r, &req), cases[i].ok);
    }
    struct config_list none = {0};
    router_init(&r, &none, NULL);
    CHECK(router_authorized(&r, &req));
}

TEST(errors_map_codes_and_shape_json) {
    CHECK_EQ_INT(api_err_status(-ERR_INVAL), 400);
    CHECK_EQ_INT(api_err_status(-ERR_AUTH), 401);
    CHECK_EQ_INT(api_err_status(-ERR_NOTFOUND), 404);
    CHECK_EQ_INT(api_err_status(-ERR_TOOBIG), 413);
    CHECK_EQ_INT(api_err_status(-ERR_BUSY), 503);
    CHECK_EQ_INT(api_err_status(-ERR_NOMEM), 500);
    CHECK_EQ_STR(api_error_type(401), "authentication_error");
    CHECK_EQ_STR(api_error_type(413), "invalid_request_error");
    CHECK_EQ_STR(api_error_type(503), "unavailable_error");
    CHECK_EQ_STR(api_status_reason(431), "Request Header Fields Too Large");
    char out[128];
    size_t n = api_error_json(out, sizeof out, 400, "bad \"quote\"\n");
    CHECK_EQ_STR(out, "{\"error\":{\"code\":400,\"message\":\"bad \\\"quote\\\"\\n\",\"type\":\"invalid_request_error\"}}");
    CHECK_EQ_INT(n, strlen(out));
    char longmsg[300];
    memset(longmsg, 'm', sizeof longmsg - 1);
    longmsg[sizeof longmsg - 1] = '\0';
    n = api_error_json(out, sizeof out, 413, longmsg); /* does not fit: still valid JSON */
    CHECK_EQ_STR(out, "{\"error\":{\"code\":413,\"message\":\"Content Too Large\",\"type\":\"invalid_request_error\"}}");
}

TEST(http_query_and_header_lookup) {
    struct http_header h[] = {{"Content-Type", "text/plain"}};
    struct http_request req = {.query = "a=1&b=x%20y+z&empty=&flag&pct=%zz&last=%41", .headers = h, .n_headers = 1};
    char v[16];
    CHECK_EQ_INT(http_query(&req, "a", v, sizeof v), 1);
    CHECK_EQ_STR(v, "1");
    CHECK_EQ_INT(http_query(&req, "b", v, sizeof v), 5);
    CHECK_EQ_STR(v, "x y z");
    CHECK_EQ_INT(http_query(&req, "empty", v, sizeof v), 0);
    CHECK_EQ_INT(http_query(&req, "flag", v, sizeof v), 0);
    CHECK_EQ_INT(http_query(&req, "pct", v, sizeof v), 3);
    CHECK_EQ_STR(v, "%zz");
    CHECK_EQ_INT(http_query(&req, "last", v, sizeof v), 1);
    CHECK_EQ_STR(v, "A");
    CHECK_EQ_INT(http_query(&req, "nope", v, sizeof v), -ERR_NOTFOUND);
    CHECK_EQ_INT(http_query(&req, "b", v, 3), -ERR_TOOBIG);
    CHECK_EQ_STR(http_header(&req, "content-type"), "text/plain");
    CHECK(http_header(&req, "Accept") == NULL);
}

TEST(http_query_int_defaults_and_clamps) {
    struct http_request req = {.query = "n=42&neg=-5&big=99999&empty=&word=abc&long=12345678901234567890123456789012"};
    CHECK_EQ_INT(http_query_int(&req, "n", 7, 100), 42);
    CHECK_EQ_INT(http_query_int(&req, "neg", 7, 100), 0);
    CHECK_EQ_INT(http_query_int(&req, "big", 7, 100), 100);
    CHECK_EQ_INT(http_query_int(&req, "empty", 7, 100), 7);
    CHECK_EQ_INT(http_query_int(&req, "word", 7, 100), 0);
    CHECK_EQ_INT(http_query_int(&req, "long", 7, 100), 7);
    CHECK_EQ_INT(http_query_int(&req, "nope", 7, 100), 7);
}

/* router_dispatch through a fake responder: 401 with WWW-Authenticate before 404 and 405 (a client
 * without a key learns nothing of the routes), 405 with Allow, HEAD answered by the GET route, CORS
 * preflight and headers, and the handler with its route data. */
TEST(router_dispatch_answers_in_the_documented_order) {
    struct config_list keys = {1, {"sesame"}};
    struct config_list origins = {1, {"https://app.example"}};
    struct router r;
    router_init(&r, &keys, &origins);
    CHECK_EQ_INT(router_add(&r, "GET", "/health", text_handle, "healthy", ROUTE_PUBLIC), 0);
    CHECK_EQ_INT(router_add(&r, "POST", "/v1/x", text_handle, "x", 0), 0);
    CHECK_EQ_INT(router_add(&r, "GET", "/v1/x", text_handle, "x-get", 0), 0);
    handled = 0;
    struct fake_http f;

    static const char *const unknown[][2] = {{"GET", "/nope?a=1"}, {"DELETE", "/v1/x"}, {"DELETE", "/health"}};
    for (size_t i = 0; i < sizeof unknown / sizeof *unknown; i++) { /* no key: 401, not 404 or 405 */
        fake_http_init(&f, unknown[i][0], unknown[i][1], NULL);
        router_dispatch(&r, &f.req);
        CHECK_EQ_INT(f.status, 401);
        CHECK(fake_http_out(&f, "Allow") == NULL);
        fake_http_free(&f);
    }

    fake_http_init(&f, "GET", "/nope?a=1", NULL);
    fake_http_header(&f, "X-Api-Key", "sesame");
    router_dispatch(&r, &f.req);
    CHECK_EQ_INT(f.status, 404);
    CHECK_EQ_STR(f.body, "{\"error\":{\"code\":404,\"message\":\"File Not Found: /nope\",\"type\":\"not_found_error\"}}");
    fake_http_free(&f);

    fake_http_init(&f, "DELETE", "/v1/x", NULL);
    fake_http_header(&f, "X-Api-Key", "sesame");
    router_dispatch(&r, &f.req);
    CHECK_EQ_INT(f.status, 405);
    CHECK_EQ_STR(fake_http_out(&f, "Allow"), "POST, GET, HEAD, OPTIONS");
    CHECK(strstr(f.body, "Method DELETE not allowed on /v1/x") != NULL);
    fake_http_free(&f);

    fake_http_init(&f, "HEAD", "/v1/x", NULL); /* the GET route answers */
    fake_http_header(&f, "X-Api-Key", "sesame");
    router_dispatch(&r, &f.req);
    CHECK_EQ_INT(f.status, 200);
    CHECK_EQ_STR(f.body, "x-get");
    fake_http_free(&f);

    fake_http_init(&f, "HEAD", "/health", NULL); /* public like its GET */
    router_dispatch(&r, &f.req);
    CHECK_EQ_INT(f.status, 200);
    CHECK_EQ_STR(f.body, "healthy");
    fake_http_free(&f);

    fake_http_init(&f, "POST", "/v1/x", "{}");
    router_dispatch(&r, &f.req);
    CHECK_EQ_INT(f.status, 401);
    CHECK_EQ_STR(fake_http_out(&f, "WWW-Authenticate"), "Bearer");
    CHECK_EQ_INT(handled, 2); /* the two HEADs above */
    fake_http_free(&f);

    fake_http_init(&f, "POST", "/v1/x", "{}");
    fake_http_header(&f, "Authorization", "Bearer sesame");
    router_dispatch(&r, &f.req);
    CHECK_EQ_INT(handled, 3);
    CHECK_EQ_INT(f.status, 200);
    CHECK_EQ_STR(f.body, "x");
    CHECK(fake_http_out(&f, "Access-Control-Allow-Origin") == NULL); /* no Origin: no CORS headers */
    CHECK_EQ_INT(f.ends, 1);
    fake_http_free(&f);

    fake_http_init(&f, "GET", "/health", NULL); /* public: no key needed */
    fake_http_header(&f, "Origin", "https://app.example");
    router_dispatch(&r, &f.req);
    CHECK_EQ_INT(f.status, 200);
    CHECK_EQ_STR(f.body, "healthy");
    CHECK_EQ_STR(fake_http_out(&f, "Access-Control-Allow-Origin"), "https://app.example");
    CHECK_EQ_STR(fake_http_out(&f, "Vary"), "Origin");
    fake_http_free(&f);

    fake_http_init(&f, "OPTIONS", "/v1/x", NULL); /* a preflight: no key needed */
    fake_http_header(&f, "Origin", "https://app.example");
    fake_http_header(&f, "Access-Control-Request-Headers", "Authorization");
    router_dispatch(&r, &f.req);
    CHECK_EQ_INT(f.status, 200);
    CHECK_EQ_STR(f.body, "");
    CHECK_EQ_STR(fake_http_out(&f, "Access-Control-Allow-Methods"), "POST, GET, HEAD, OPTIONS");
    CHECK_EQ_STR(fake_http_out(&f, "Access-Control-Allow-Headers"), "Authorization");
    CHECK_EQ_STR(fake_http_out(&f, "Access-Control-Max-Age"), "86400");
    fake_http_free(&f);

    fake_http_init(&f, "OPTIONS", "/v1/x", NULL); /* an origin CORS does not allow: Allow only */
    fake_http_header(&f, "Origin", "https://evil.example");
    router_dispatch(&r, &f.req);
    CHECK_EQ_INT(f.status, 200);
    CHECK_EQ_STR(fake_http_out(&f, "Allow"), "POST, GET, HEAD, OPTIONS");
    CHECK(fake_http_out(&f, "Access-Control-Allow-Origin") == NULL);
    CHECK(fake_http_out(&f, "Access-Control-Allow-Methods") == NULL);
    CHECK_EQ_INT(handled, 4);
    fake_http_free(&f);
}

/* The Access-Control-Allow-Origin a GET with this Origin gets from a router with these CORS entries
 * (NULL: none). */
static const char *cors_answer(const struct config_list *origins, const char *origin, char *out, size_t cap) {
    struct router r;
    router_init(&r, NULL, origins);
    router_add(&r, "GET", "/health", text_handle, "healthy", ROUTE_PUBLIC);
    struct fake_http f;
    fake_http_init(&f, "GET", "/health", NULL);
    fake_http_header(&f, "Origin", origin);
    router_dispatch(&r, &f.req);
    const char *v = fake_http_out(&f, "Access-Control-Allow-Origin");
    if (v) snprintf(out, cap, "%s", v);
    fake_http_free(&f);
    return v ? out : NULL;
}

/* "localhost": http(s) pages on a loopback host, any port, echoed; nothing else. "host:*": any port
 * of that scheme and host, never a longer host name; an origin: only itself. */
TEST(router_cors_localhost_keyword_and_port_patterns) {
    char buf[128];
    const struct config_list local = {1, {"localhost"}};
    static const char *const yes[] = {"http://localhost", "http://localhost:5173", "http://127.0.0.1:8080",
                                      "http://[::1]:3000", "https://localhost:8443", "http://127.0.0.1"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        const char *got = cors_answer(&local, yes[i], buf, sizeof buf);
        CHECK(got != NULL);
        if (got) CHECK_EQ_STR(got, yes[i]);
    }
    static const char *const no[] = {"http://localhost.evil.example", "http://127.0.0.10:80", "http://evil.example",
                                     "http://localhost:", "http://localhost:80x", "http://localhost:123456",
                                     "null", "ftp://localhost", "http://127.0.0.1.nip.io:8080", "http://[::2]:80",
                                     "http://evil.example/http://localhost"};
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) CHECK(cors_answer(&local, no[i], buf, sizeof buf) == NULL);

    const struct config_list listed = {2, {"https://app.example:*", "http://exact.example"}};
    CHECK(cors_answer(&listed, "https://app.example:4000", buf, sizeof buf) != NULL);
    CHECK(cors_answer(&listed, "https://app.example", buf, sizeof buf) != NULL);
    CHECK(cors_answer(&listed, "http://app.example:4000", buf, sizeof buf) == NULL);
    CHECK(cors_answer(&listed, "https://app.example.evil:4000", buf, sizeof buf) == NULL);
    CHECK(cors_answer(&listed, "http://exact.example", buf, sizeof buf) != NULL);
    CHECK(cors_answer(&listed, "http://exact.example:81", buf, sizeof buf) == NULL);
    CHECK(cors_answer(&listed, "http://localhost:3000", buf, sizeof buf) == NULL); /* narrowed: no keyword */

    const struct config_list none = {0, {NULL}};
    CHECK(cors_answer(&none, "http://localhost:3000", buf, sizeof buf) == NULL);
    const struct config_list any = {1, {"*"}};
    const char *got = cors_answer(&any, "https://anything.example", buf, sizeof buf);
    CHECK(got != NULL);
    if (got) CHECK_EQ_STR(got, "*");
}

TEST(router_errors_take_the_shape_of_the_route_api) {
    struct config_list keys = {1, {"sesame"}};
    struct router r;
    router_init(&r, &keys, NULL);
    CHECK_EQ_INT(router_add(&r, "POST", "/v1/messages", text_handle, "m", ROUTE_ANTHROPIC), 0);
    CHECK_EQ_INT(router_add(&r, "POST", "/v1/responses", text_handle, "r", 0), 0);
    handled = 0;
    struct fake_http f;

    fake_http_init(&f, "POST", "/v1/messages", "{}");
    fake_http_header(&f, "x-api-key", "wrong");
    fake_http_header(&f, "anthropic-version", "2023-06-01");
    router_dispatch(&r, &f.req);
    CHECK_EQ_INT(f.status, 401);
    CHECK_EQ_STR(f.body, "{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"Invalid API Key\"}}");
    fake_http_free(&f);

    fake_http_init(&f, "GET", "/v1/messages", NULL); /* with the key: a 405 (without it, 401) */
    fake_http_header(&f, "x-api-key", "sesame");
    router_dispatch(&r, &f.req);
    CHECK_EQ_INT(f.status, 405);
    CHECK(strncmp(f.body, "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\"", 55) == 0);
    fake_http_free(&f);

    fake_http_init(&f, "POST", "/v1/messages", "{}"); /* an Anthropic client's key header */
    fake_http_header(&f, "x-api-key", "sesame");
    fake_http_header(&f, "anthropic-version", "2023-06-01");
    router_dispatch(&r, &f.req);
    CHECK_EQ_INT(handled, 1);
    CHECK_EQ_INT(f.req.error_shape, HTTP_ERRORS_ANTHROPIC); /* for the handler's own errors */
    fake_http_free(&f);

    fake_http_init(&f, "POST", "/v1/responses", "{}");
    router_dispatch(&r, &f.req);
    CHECK_EQ_INT(f.status, 401);
    CHECK(strncmp(f.body, "{\"error\":{\"code\":401,", 21) == 0);
    fake_http_free(&f);

    char body[256];
    api_error_json_anthropic(body, sizeof body, 503, "busy");
    CHECK_EQ_STR(body, "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"busy\"}}");
    CHECK_EQ_STR(api_error_type_anthropic(413), "request_too_large");
    CHECK_EQ_STR(api_error_type_anthropic(500), "api_error");
    CHECK_EQ_STR(api_error_type_anthropic(404), "not_found_error");
    api_error_json_anthropic(body, 40, 400, "a message far too long for the buffer it is written to");
    CHECK(strlen(body) < 40); /* cut to fit, still NUL-terminated */
}
