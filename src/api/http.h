/* http.h: the interface between the HTTP server (src/net) and whatever produces responses
 * (src/api handlers, and behind them the scheduler). No libuv, no llhttp here: a handler sees a
 * parsed request and answers it with the http_* functions below. They call through the request's
 * responder (struct http_responder), a table of functions that whoever parsed the request fills:
 * src/net/conn.c for a connection, a test's fake for a socket-free unit test. So api calls nothing
 * of net; net calls api through the request hook the server is given (net/server.h).
 *
 * A handler (see router.h) is called on the loop thread with a complete request. It answers in
 * one of three ways:
 *   1. at once:      http_respond_json(req, 200, "{\"ok\":true}");
 *   2. later:        http_on_cancel(req, my_cancel_cb, work); ...return; and when the work is
 *                    done (on the loop thread, e.g. in a sink callback of the scheduler, which
 *                    the engine driver runs there) call http_respond*(req, ...).
 *   3. as a stream:  http_sse_start(req, my_cancel_cb, work); then http_sse_send(req, json, n)
 *                    per event, over time; http_sse_end(req) when done.
 *
 * Ownership and lifetime (the important part):
 *   - `req` and everything it points to belong to the responder's owner (src/net). They stay
 *     valid until the request is *finished* (a respond call, or http_sse_end) or its cancel
 *     callback has returned. After either, never touch `req` again.
 *   - The cancel callback runs exactly once if, and only if, the request dies before it is
 *     finished: the client disconnected, a stream's write queue overflowed (slow reader), or
 *     the server stopped (drain timeout, second signal). It runs on the loop thread from the
 *     connection's close path, never from inside an http_* call, so it may free the owner's
 *     state freely; the request can no longer be answered (no http_* calls on it there).
 *   - Between the death of the connection and the cancel callback, http_* calls do nothing
 *     and return -ERR_CANCELLED. An owner that sees an error from http_sse_send should stop
 *     producing and either wait for its cancel callback (it will come) or finish the request
 *     with http_sse_end/http_respond: finishing a dead request returns -ERR_CANCELLED and
 *     means no cancel callback follows.
 *   - The owner hears of the end exactly once, one way or the other: a *finishing* call
 *     (http_respond*, http_sse_end, or a failing http_sse_start) returns 0 (sent) or
 *     -ERR_CANCELLED (the request is dead: the connection is closed, the answer lost): either
 *     way the request is finished, no cancel callback follows, the owner may free its state.
 *     This includes a write that fails inside the call itself (out of memory, the socket
 *     failing at once): the connection is then closed, never left open without an answer.
 *     Only -ERR_STATE (a call in the wrong state, a bug) leaves the request as it was.
 *     A write failing in http_sse_send closes the stream too; as for any other death of the
 *     connection, the send returns -ERR_CANCELLED and the cancel callback follows.
 *   - A handler that returns without finishing and without registering a cancel callback
 *     must finish the request before its next return to the loop (it cannot learn of a
 *     disconnect otherwise).
 *   - All calls are made on the loop thread. Work on other threads reports back through the
 *     loop (the engine driver's after-work callbacks in src/net).
 *
 * Example: an SSE endpoint that counts to 3 on a timer owned by the caller.
 *
 *   static void counter_cancel_cb(struct http_request *req, void *data) {
 *       struct counter *c = data;
 *       counter_stop(c);  // the client left: stop the timer, free c
 *   }
 *   static void counter_handle(struct http_request *req, void *data) {
 *       struct counter *c = counter_new(req);
 *       if (http_sse_start(req, counter_cancel_cb, c)) { counter_free(c); return; }
 *       // ... each tick:   http_sse_send(req, "{\"n\":1}", 7);
 *       // ... at the end:  http_sse_end(req); counter_free(c);
 *   }
 *
 * Strings in struct http_request are NUL-terminated. Header names keep the client's case;
 * http_header() compares case-insensitively.
 */
#ifndef UVLM_API_HTTP_H
#define UVLM_API_HTTP_H

#include <stdbool.h>
#include <stddef.h>

/* The error body an API's clients parse (api/errors.h renders both). */
enum http_error_shape {
    HTTP_ERRORS_OPENAI = 0,   /* {"error":{"code","message","type"}}: llama.cpp's and OpenAI's */
    HTTP_ERRORS_ANTHROPIC,    /* {"type":"error","error":{"type","message"}}: /v1/messages */
};

struct http_header {
    const char *name;
    const char *value;
};

struct http_request;
typedef void (*http_cancel_cb)(struct http_request *req, void *data);

/* How a request is answered: one function per http_* call below, with the same contract, filled
 * by the owner of the request (src/net/conn.c; a test's fake). The http_* functions check their
 * arguments (a newline in an event, CR/LF or ':' in a header) before calling these. */
struct http_responder {
    int (*add_header)(struct http_request *req, const char *name, const char *value);
    int (*respond)(struct http_request *req, int status, const char *content_type, const char *body, size_t len);
    void (*on_cancel)(struct http_request *req, http_cancel_cb cb, void *data);
    void (*on_abort)(struct http_request *req, http_cancel_cb cb);
    int (*sse_start)(struct http_request *req, http_cancel_cb cb, void *data);
    int (*sse_send)(struct http_request *req, const char *event, const char *data, size_t len);
    int (*sse_end)(struct http_request *req);
};

struct http_request {
    const char *method;   /* "GET", "POST", ... */
    const char *target;   /* as sent: "/v1/x?a=1" */
    const char *path;     /* target without the query: "/v1/x" */
    const char *query;    /* after '?', or "" */
    const struct http_header *headers;
    int n_headers;
    const char *body;     /* NUL-terminated for convenience; body_len excludes the NUL */
    size_t body_len;
    const char *remote;   /* peer "ip:port" */
    bool draining;        /* the server was draining (SIGTERM) when the request was dispatched */
    bool before_drain;    /* complete before the server began draining (held by its pacing until
                           * now): answer it as if the drain had not begun, not with 503 */
    void *route_data;     /* the data registered with the route (router.h) */
    unsigned char error_shape; /* enum http_error_shape: how http_respond_error shapes the body
                                * (the router sets it from the route; 0, OpenAI's, before) */
    const struct http_responder *resp; /* how to answer it (set by the request's owner) */
    void *resp_ctx;       /* the responder's own state (a connection) */
};

/* Header value by name (case-insensitive), or NULL. */
const char *http_header(const struct http_request *req, const char *name);
/* The API key a request presents: the token of "Authorization: Bearer KEY" (spaces after
 * "Bearer" skipped), else the value of X-Api-Key; NULL when it presents none. The key
 * router_authorized checks. */
const char *http_api_key(const struct http_request *req);

/* Query parameter `key` into out (percent-decoded, '+' as space, NUL-terminated). Returns its
 * length, or -ERR_NOTFOUND, or -ERR_TOOBIG if it does not fit in cap. Pure; no server needed. */
int http_query(const struct http_request *req, const char *key, char *out, size_t cap);
/* Query parameter `key` as an integer (strtoll: a non-number reads as 0) clamped to [0, max];
 * def when it is absent, empty or longer than 31 bytes. Pure. */
long long http_query_int(const struct http_request *req, const char *key, long long def, long long max);

/* --- answering, through req->resp (loop thread only) ----------------------------------------- */

/* Add a response header (for the next respond or sse_start), e.g. "Allow", "GET, POST".
 * Returns -ERR_INVAL for a name with CR, LF or ':' or a value with CR or LF (no header
 * injection), -ERR_TOOBIG when the per-request header space is used up. */
int http_add_header(struct http_request *req, const char *name, const char *value);

/* Finish the request with a complete response. content_type NULL means application/json.
 * Returns 0, -ERR_STATE, or -ERR_CANCELLED (dead, and finished: no cancel callback follows). */
int http_respond(struct http_request *req, int status, const char *content_type, const char *body,
                 size_t len);
int http_respond_json(struct http_request *req, int status, const char *json);
/* Finish with {"error":{"code":status,"message":message,"type":...}}, or the Anthropic shape when
 * req->error_shape says so (api/errors.h). */
int http_respond_error(struct http_request *req, int status, const char *message);

/* Register the cancel callback of a request answered later (way 2 above). */
void http_on_cancel(struct http_request *req, http_cancel_cb cb, void *data);

/* Optional, after the cancel callback is registered: `cb`, called with the cancel callback's data,
 * runs at once when the connection dies, before the cancel callback, which can come some loop
 * iterations later (the server paces cancel callbacks: a few per iteration). It runs only when the
 * cancel callback will follow (not for a finishing call that fails), possibly inside an http_*
 * call of the owner or inside the owner's own callbacks further up the stack: it must only stop
 * the work cheaply (mark it abandoned: no freeing, no http_* calls). E.g. no more model steps for
 * a client that is gone while its cancel callback waits its turn. */
void http_on_abort(struct http_request *req, http_cancel_cb cb);

/* Start a text/event-stream response (status 200) and register the cancel callback. The server
 * sends ": ping" comments while the stream is open (--sse-ping). Returns 0, -ERR_STATE, or
 * -ERR_CANCELLED: the request is dead and finished (no cancel callback, not even one registered
 * earlier with http_on_cancel). */
int http_sse_start(struct http_request *req, http_cancel_cb cb, void *data);
/* Send one event "data: <data>\n\n" (data must not contain a newline: -ERR_INVAL; compact JSON
 * never does). Queued for writing, never blocks. Returns 0, -ERR_CANCELLED when the client is
 * gone, or -ERR_TOOBIG when the client reads too slowly (more than --sse-queue-bytes waiting):
 * the stream is then closed and the cancel callback follows. */
int http_sse_send(struct http_request *req, const char *data, size_t len);
/* The same with an event name first: "event: <event>\ndata: <data>\n\n" (the typed events of the
 * Responses and Anthropic streams). event NULL is http_sse_send; a newline in it: -ERR_INVAL. */
int http_sse_send_event(struct http_request *req, const char *event, const char *data, size_t len);
/* Finish the stream: 0, or -ERR_CANCELLED (dead, and finished: no cancel callback follows). */
int http_sse_end(struct http_request *req);

#endif
