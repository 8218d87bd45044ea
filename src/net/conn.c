/* conn.c: one client connection: reading and parsing requests one at a time, handing each to the
 * request hook (app->on_request), writing responses and event streams through the responder its
 * requests carry (http.h), timeouts, backpressure. Everything runs on the loop thread.
 *
 * States:  IDLE ──first byte──> READING ──complete──> HANDLING ──respond──> IDLE (keep-alive)
 *                                                      └─sse_start─> STREAMING ──sse_end──> IDLE
 *          any ──error / Connection: close──> LINGER (response flushed within --idle-timeout,
 *          write side shut, input drained for a moment so the client sees the response, not a
 *          reset) ──> CLOSED
 *          READING ──complete, over this iteration's dispatch budget──> HELD ──next iterations──>
 *          HANDLING (the request counts as in flight from HELD on: a drain waits for it; requests
 *          held when a drain begins are still paced, and served, not refused as draining)
 * While a request is HELD/HANDLING/STREAMING the connection keeps reading (so a disconnect is seen
 * at once), buffering pipelined bytes in `in`; when `in` is full it stops reading until the
 * request is finished.
 * Output: a client that sends requests without reading the answers (pipelining) must not make the
 * server queue answers without bound. Between requests, while more than CONN_OUT_PAUSE_BYTES of
 * answers wait in user space (the socket's kernel buffers are full), the next request is not
 * parsed and reading stops, so TCP pushes back on the client; it resumes once the client has read
 * them down to half of that. A connection so paused stays IDLE: --idle-timeout closes it if its
 * client reads nothing more. Per connection that bounds the queue to the pause threshold plus
 * one answer; an event stream is bounded by --sse-queue-bytes (closed beyond it).
 */
#include "api/errors.h"
#include "common/err.h"
#include "net/server.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CONN_IN_BYTES 16384
#define CONN_EXTRA_BYTES 2048
#define LINGER_MS 2000
/* Answers waiting in user space above which a connection parses no further request (see above):
 * a few hundred small answers, and far more than the kernel's socket buffers take at once. */
#define CONN_OUT_PAUSE_BYTES (64 * 1024)

/* Most requests with model work (anything but GET, HEAD, OPTIONS: parsing a JSON body,
 * tokenizing, submitting) dispatched per loop iteration. When many arrive at once (a step's worth
 * of clients sending their next request), the rest wait complete in C_HELD, in arrival order,
 * and go in the next iterations (app->dispatch_idle), each after a poll: a /health request
 * (a GET: never held) is answered in between instead of after all of them. */
#define CONN_DISPATCH_PER_ITERATION 4
/* Likewise, most closed connections per iteration whose request's cancel callback runs (freeing
 * the request's scheduler state and sampler): when a step's worth of clients leave at once, the
 * others are finished in the next iterations. While the app stops they all go at once. */
#define CONN_CANCELS_PER_ITERATION 8
/* Once a drain begins, how long a connection accepted before it and still silent has to send its
 * request (served as if the drain had not begun, with Connection: close) before it is closed. A
 * kept-alive connection between requests is closed at once, gracefully (conn_drain_begin): a
 * client, or a proxy reusing its idle connections, sees the close before it sends and goes
 * elsewhere, instead of having its next request refused 503. A connection is never closed under a
 * request its client is sending at that moment: it is served. */
#define DRAIN_IDLE_MS 1000
/* Beyond --max-connections, this many more connections are read, each for one request: GET or
 * HEAD of app->health_path is served (then the connection closes), anything else gets 503. A
 * flood of connections that holds every place (sending slowly, or nothing) leaves health checks
 * answered. Their request head is due within RESERVE_HEAD_MS (a checker sends at once). */
#define CONN_HEALTH_RESERVE 4
#define RESERVE_HEAD_MS 1000

enum conn_state { C_IDLE, C_READING, C_HELD, C_HANDLING, C_STREAMING, C_LINGER, C_CLOSED };

struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_shutdown_t shutdown;
    struct app *app;
    struct conn *prev, *next;
    struct conn *held_prev, *held_next; /* app->held_head's list while HELD (unlinked in O(1) when
                                          * the client leaves); held_next alone: app->cancels_head's */
    enum conn_state state;
    int handles_open;       /* tcp + timer, until both close callbacks ran */
    bool reading, rejected, keep_alive, chunked, in_process;
    bool head_only;         /* a HEAD request: responses and streams send their head, no body */
    bool out_paused;        /* between requests, too many answers unread: not parsing, not reading */
    bool reserve;           /* beyond --max-connections: one /health request (CONN_HEALTH_RESERVE) */
    bool used;              /* a request has begun on it (its first head is no longer due from accept) */
    bool refused;           /* over --max-connections, answered 503: counted in rejects_open */
    bool before_drain;      /* HELD when the drain began: served as if it had not (req.before_drain) */
    bool finishing;         /* in a finishing http_* call: a close there is its -ERR_CANCELLED, no abort */
    bool eof;               /* the client finished sending (it may still read) */
    bool shut_down;         /* our write side is shut: everything queued was written */

    struct http_parse parse; /* parse.req is the struct http_request handlers see */
    char in[CONN_IN_BYTES];  /* received, not yet parsed */
    size_t in_len;

    /* the request being answered */
    http_cancel_cb cancel_cb;
    void *cancel_data;
    http_cancel_cb abort_cb; /* http_on_abort: at once when the connection dies (cancel_data) */
    char extra[CONN_EXTRA_BYTES]; /* "Name: value\r\n" headers added by http_add_header */
    size_t extra_len;
    int status;
    uint64_t start_ns, bytes_out; /* start_ns: the request's first byte (the accept before one) */
    char remote[64];
};

struct write_req {
    uv_write_t req;
    size_t len;
    char data[];
};

static const struct http_responder conn_responder;
static void conn_process(struct conn *c);
static void conn_close(struct conn *c, const char *why);
static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* malloc, unless a test armed app->faults.allocs (server.h). */
static void *conn_malloc(struct app *app, size_t n) {
    if (app->faults.allocs > 0) {
        app->faults.allocs--;
        return NULL;
    }
    return malloc(n);
}

static struct conn *conn_of(struct http_request *req) {
    return req->resp_ctx;
}

/* --- closing -------------------------------------------------------------------------------- */

/* One line per request: peer, "METHOD target", status, time since its first byte, bytes sent.
 * A request the server refused before it was complete shows as "- -" with the reason. */
static void access_log(struct conn *c, const char *reason) {
    double ms = (double)(uv_hrtime() - c->start_ns) / 1e6;
    const struct http_request *r = &c->parse.req;
    log_info(&c->app->log, "%s \"%s %s\" %d %.1fms %lluB%s%s%s", c->remote, r->method ? r->method : "-",
             r->method ? r->target : "-", c->status, ms, (unsigned long long)c->bytes_out, reason ? " (" : "",
             reason ? reason : "", reason ? ")" : "");
}

static bool request_open(const struct conn *c) {
    return c->state == C_HELD || c->state == C_HANDLING || c->state == C_STREAMING;
}

static void held_unlink(struct conn *c) {
    struct app *app = c->app;
    if (c->held_prev) c->held_prev->held_next = c->held_next;
    else app->held_head = c->held_next;
    if (c->held_next) c->held_next->held_prev = c->held_prev;
    else app->held_tail = c->held_prev;
    c->held_prev = c->held_next = NULL;
}

/* Both handles are closed: tell the request's owner (if it died unfinished) and free. */
static void conn_finish(struct conn *c) {
    struct app *app = c->app;
    if (c->cancel_cb) { /* the request died unfinished: tell its owner, exactly once */
        http_cancel_cb cb = c->cancel_cb;
        c->cancel_cb = NULL;
        app->counters.requests_cancelled++;
        cb(&c->parse.req, c->cancel_data);
    }
    http_parse_free(&c->parse);
    if (c->prev) c->prev->next = c->next;
    else app->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    if (c->refused) app->counters.rejects_open--;
    free(c);
    app_conn_closed(app);
}

static void on_handle_closed(uv_handle_t *h) {
    struct conn *c = h->data;
    if (--c->handles_open) return;
    struct app *app = c->app;
    if (c->cancel_cb && !app->stopping) { /* a cancel has work: paced like requests */
        if (app->cancels_head || app->cancel_budget == 0) {
            c->held_next = NULL;
            if (app->cancels_tail) app->cancels_tail->held_next = c;
            else app->cancels_head = c;
            app->cancels_tail = c;
            if (!uv_is_active((uv_handle_t *)&app->dispatch_idle))
                uv_idle_start(&app->dispatch_idle, conn_dispatch_held);
            return;
        }
        app->cancel_budget--;
    }
    uint64_t t0 = app_work_begin(app);
    conn_finish(c);
    app_work_end(app, APP_WORK_CLOSE, t0);
}

/* Up to max (< 0: all) closed connections whose cancel callbacks were held over; returns how many. */
static int finish_held_cancels(struct app *app, int max) {
    int n = 0;
    for (; (max < 0 || n < max) && app->cancels_head; n++) {
        struct conn *c = app->cancels_head;
        app->cancels_head = c->held_next;
        if (!app->cancels_head) app->cancels_tail = NULL;
        conn_finish(c);
    }
    return n;
}

void conn_finish_held_cancels(struct app *app) {
    finish_held_cancels(app, -1);
}

static void conn_close(struct conn *c, const char *why) {
    if (c->state == C_CLOSED) return;
    struct app *app = c->app;
    if (c->state == C_HELD) held_unlink(c);
    if (request_open(c)) {
        c->status = 499;
        access_log(c, why ? why : "closed");
        app->counters.requests_inflight--; /* the app hears of it once the handles closed */
        /* The cancel callback follows once the handles are closed, paced (on_handle_closed): its
         * owner stops the work now (e.g. no more steps for a client that is gone). */
        if (c->cancel_cb && c->abort_cb && !c->finishing) {
            http_cancel_cb cb = c->abort_cb;
            c->abort_cb = NULL;
            cb(&c->parse.req, c->cancel_data);
        }
    }
    /* A place under --max-connections (or in the reserve) is free from now on, whenever its
     * memory is. */
    if (!c->rejected) app->counters.connections_open--;
    if (c->reserve) app->counters.reserve_open--;
    c->state = C_CLOSED;
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

static void linger_timeout_cb(uv_timer_t *t) {
    conn_close(t->data, NULL);
}

static void shutdown_cb(uv_shutdown_t *req, int status) {
    struct conn *c = req->data;
    if (c->state == C_CLOSED) return;
    if (status < 0) {
        conn_close(c, "client gone");
        return;
    }
    c->shut_down = true;
    if (c->eof) conn_close(c, NULL); /* both sides done */
    else uv_timer_start(&c->timer, linger_timeout_cb, LINGER_MS, 0);
}

/* Close after what is queued has been written (uv_shutdown waits for pending writes). */
static void conn_linger(struct conn *c) {
    if (c->state == C_CLOSED || c->state == C_LINGER) return;
    c->state = C_LINGER;
    /* The shutdown waits for the queued response; a client that never reads it would hold the
     * connection (and a --max-connections place) forever: it gets --idle-timeout to take it. */
    uv_timer_start(&c->timer, linger_timeout_cb, (uint64_t)c->app->cfg->idle_timeout_ms, 0);
    if (!c->reading && !c->eof) { /* to see the EOF */
        uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
        c->reading = true;
    }
    c->shutdown.data = c;
    if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, shutdown_cb)) conn_close(c, "client gone");
}

/* --- writing -------------------------------------------------------------------------------- */

static size_t out_queued(const struct conn *c) {
    return uv_stream_get_write_queue_size((const uv_stream_t *)&c->tcp);
}

static void write_cb(uv_write_t *req, int status) {
    struct write_req *w = req->data;
    struct conn *c = w->req.handle->data;
    free(w);
    if (status < 0 && c->state != C_CLOSED) conn_close(c, "client gone"); /* EPIPE/ECONNRESET: client gone */
    if (c->out_paused && c->state == C_IDLE && out_queued(c) <= CONN_OUT_PAUSE_BYTES / 2) {
        c->out_paused = false; /* the client reads again: its next requests */
        struct app *app = c->app;
        uint64_t t0 = app_work_begin(app);
        conn_process(c);
        app_work_end(app, APP_WORK_READ, t0);
    }
}

/* Queue the concatenation of parts (pointer, length, ..., NULL). A write that cannot be queued
 * (no memory for it, or the socket failed at once) leaves the byte stream broken: the connection
 * is closed and -ERR_CANCELLED returned, so that every caller sees a dead request the same way
 * (http.h: a finishing call then means no cancel callback; any other call, that one follows). */
static int conn_write(struct conn *c, ...) {
    va_list ap;
    size_t total = 0;
    va_start(ap, c);
    for (const char *p; (p = va_arg(ap, const char *));) total += va_arg(ap, size_t);
    va_end(ap);
    struct write_req *w = conn_malloc(c->app, sizeof *w + total);
    if (!w) {
        log_warn(&c->app->log, "%s: out of memory for a %zu-byte write: connection closed", c->remote, total);
        conn_close(c, "out of memory");
        return -ERR_CANCELLED;
    }
    size_t off = 0;
    va_start(ap, c);
    for (const char *p; (p = va_arg(ap, const char *));) {
        size_t n = va_arg(ap, size_t);
        memcpy(w->data + off, p, n);
        off += n;
    }
    va_end(ap);
    w->len = total;
    w->req.data = w;
    uv_buf_t buf = uv_buf_init(w->data, (unsigned)total);
    bool fault = c->app->faults.writes > 0 && c->app->faults.writes--;
    if (fault || uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, write_cb)) {
        free(w);
        conn_close(c, "client gone");
        return -ERR_CANCELLED;
    }
    c->bytes_out += total;
    return 0;
}

/* Status line and headers; content_length < 0: an event stream (chunked, or until close).
 * Fits in CONN_EXTRA_BYTES + 512 bytes: the extra headers are bounded by their buffer and the
 * content type (a handler's constant) is cut at 200 bytes, so no snprintf below starts past cap. */
static size_t format_head(struct conn *c, char *out, size_t cap, int status, const char *content_type,
                          long long content_length) {
    char date[40];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&now, &tm));
    int n = snprintf(out, cap, "HTTP/1.1 %d %s\r\nServer: uvlm\r\nDate: %s\r\n", status, api_status_reason(status),
                     date);
    if (content_length >= 0) {
        if (status != 204)
            n += snprintf(out + n, cap - (size_t)n, "Content-Type: %.200s\r\nContent-Length: %lld\r\n", content_type,
                          content_length);
    } else {
        n += snprintf(out + n, cap - (size_t)n, "Content-Type: %.200s\r\nCache-Control: no-cache\r\n%s", content_type,
                      c->chunked ? "Transfer-Encoding: chunked\r\n" : "");
    }
    /* decided when the head goes out: a request dispatched before a drain began, answered during
     * it, says close too (and request_finished closes after it) */
    if (c->app->state == APP_DRAINING) c->keep_alive = false;
    n += snprintf(out + n, cap - (size_t)n, "Connection: %s\r\n%.*s\r\n", c->keep_alive ? "keep-alive" : "close",
                  (int)c->extra_len, c->extra);
    return (size_t)n < cap ? (size_t)n : cap - 1;
}

/* Send a complete response outside of any handler (parser errors, timeouts, rejections). */
static void conn_send_error(struct conn *c, int status, const char *message) {
    char body[512], head[CONN_EXTRA_BYTES + 512];
    size_t blen = api_error_json(body, sizeof body, status, message);
    c->keep_alive = false;
    c->status = status;
    c->extra_len = 0; /* headers a handler added are not for this response */
    if (status == 503) c->extra_len = (size_t)snprintf(c->extra, sizeof c->extra, "Retry-After: 1\r\n");
    c->bytes_out = 0;
    size_t hlen = format_head(c, head, sizeof head, status, "application/json", (long long)blen);
    conn_write(c, head, hlen, body, blen, NULL);
    access_log(c, message);
    conn_linger(c);
}

/* --- request lifecycle ---------------------------------------------------------------------- */

static void idle_timeout_cb(uv_timer_t *t) {
    conn_close(t->data, NULL); /* a keep-alive connection nobody uses: no response is owed */
}

static void read_timeout_cb(uv_timer_t *t) {
    struct conn *c = t->data;
    c->app->counters.timeouts++;
    conn_send_error(c, 408, "request not received in time");
}

static void head_timeout_cb(uv_timer_t *t) {
    struct conn *c = t->data;
    c->app->counters.timeouts++;
    conn_send_error(c, 408, "request head not received in time");
}

static uint64_t min_ms(uint64_t a, uint64_t b) {
    return a < b ? a : b;
}

/* What is left of `limit_ms` since `since_ns` (at least 1 ms: a timer of 0 would fire at once,
 * which is what a passed deadline means anyway). */
static uint64_t ms_left(uint64_t limit_ms, uint64_t since_ns) {
    uint64_t spent = (uv_hrtime() - since_ns) / 1000000u;
    return spent < limit_ms ? limit_ms - spent : 1;
}

/* How long a connection without a request stays open: --idle-timeout; a new connection no longer
 * than --header-timeout (its first request is due by then), a reserve one RESERVE_HEAD_MS; and
 * DRAIN_IDLE_MS once the drain began (also after a response that announced keep-alive before it). */
static uint64_t idle_ms(const struct conn *c) {
    const struct app *app = c->app;
    uint64_t ms = (uint64_t)app->cfg->idle_timeout_ms;
    if (!c->used) ms = min_ms(ms, (uint64_t)app->cfg->header_timeout_ms);
    if (c->reserve) ms = min_ms(ms, RESERVE_HEAD_MS);
    if (app->state == APP_DRAINING) ms = min_ms(ms, DRAIN_IDLE_MS);
    return ms;
}

static void conn_idle(struct conn *c) {
    c->state = C_IDLE;
    uv_timer_start(&c->timer, idle_timeout_cb, idle_ms(c), 0);
}

/* A request's first byte arrived: its head is due within --header-timeout (of the accept, for a
 * connection's first request; RESERVE_HEAD_MS on a reserve connection), and the whole request
 * within --read-timeout. */
static void request_started(struct conn *c) {
    const struct config *cfg = c->app->cfg;
    uint64_t head_since = c->used ? uv_hrtime() : c->start_ns; /* start_ns: the accept */
    uint64_t head_ms = c->reserve ? min_ms(RESERVE_HEAD_MS, (uint64_t)cfg->header_timeout_ms)
                                  : (uint64_t)cfg->header_timeout_ms;
    c->state = C_READING;
    c->used = true;
    c->start_ns = uv_hrtime();
    head_ms = min_ms(ms_left(head_ms, head_since), (uint64_t)cfg->read_timeout_ms);
    uv_timer_start(&c->timer, head_timeout_cb, head_ms, 0);
}

/* The head is complete and a body follows: the rest of --read-timeout for it. */
static void body_started(struct conn *c) {
    uv_timer_start(&c->timer, read_timeout_cb, ms_left((uint64_t)c->app->cfg->read_timeout_ms, c->start_ns), 0);
}

static void request_finished(struct conn *c) {
    access_log(c, NULL);
    c->app->counters.requests_inflight--;
    c->cancel_cb = NULL;
    c->abort_cb = NULL;
    uv_timer_stop(&c->timer);
    /* half-closed: nothing more comes; draining: a stream whose head said keep-alive ends here */
    bool keep = c->keep_alive && !(c->eof && c->in_len == 0) && c->app->state != APP_DRAINING;
    http_parse_next(&c->parse);
    if (!keep) {
        conn_linger(c);
    } else {
        conn_idle(c);
        if (!c->in_process) conn_process(c); /* pipelined bytes waiting, or reading was paused */
    }
    app_request_finished(c->app);
}

/* The request (complete, or only its head) goes to a hook: HANDLING, with its responder. */
static void request_begin(struct conn *c, bool counted) {
    struct app *app = c->app;
    struct http_request *req = &c->parse.req;
    c->state = C_HANDLING;
    c->keep_alive = c->parse.keep_alive && app->state != APP_DRAINING && !c->reserve;
    req->before_drain = c->before_drain;
    c->chunked = llhttp_get_http_major(&c->parse.parser) == 1 && llhttp_get_http_minor(&c->parse.parser) >= 1;
    c->head_only = !strcmp(req->method, "HEAD");
    c->cancel_cb = NULL;
    c->abort_cb = NULL;
    c->extra_len = 0;
    c->status = 0;
    c->bytes_out = 0;
    req->remote = c->remote;
    req->draining = app->state == APP_DRAINING;
    req->resp = &conn_responder;
    req->resp_ctx = c;
    app->counters.requests_total++;
    if (!counted) app->counters.requests_inflight++;
}

static void dispatch(struct conn *c) {
    struct app *app = c->app;
    request_begin(c, c->state == C_HELD); /* a held request is in flight since it was held */
    c->before_drain = false;
    uv_timer_stop(&c->timer);
    app->loop_stats.requests_iter++;
    ASSERT(app->on_request); /* set before app_start (server.h) */
    app->on_request(&c->parse.req, app->request_data);
}

/* The head of a request with a body is complete: the head hook may refuse it before any body byte
 * is read (no API key: 401, and the body costs nothing). Returns true when it was answered; the
 * connection then closes after the answer (lingering discards the body). */
static bool head_refused(struct conn *c) {
    struct app *app = c->app;
    if (!app->on_head) return false;
    request_begin(c, false);
    c->keep_alive = false; /* if answered: the unread body cannot be told from a next request */
    if (app->on_head(&c->parse.req, app->request_data)) return true;
    ASSERT(c->state == C_HANDLING && !c->cancel_cb); /* server.h: answered at once, or untouched */
    c->state = C_READING; /* not a request yet: the body comes, the read timer runs on */
    app->counters.requests_total--;
    app->counters.requests_inflight--;
    return false;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    struct conn *c = h->data;
    if (c->state == C_LINGER || c->state == C_CLOSED) c->in_len = 0; /* discarding */
    *buf = uv_buf_init(c->in + c->in_len, (unsigned)(sizeof c->in - c->in_len));
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    struct conn *c = s->data;
    if (nread == UV_EOF && (c->state == C_IDLE || c->state == C_LINGER) && !c->shut_down) {
        /* No request open: the client is done sending (a half-close) but may still be reading
         * what is queued for it. Flush, then close (shutdown_cb), instead of dropping it. */
        c->eof = true;
        uv_read_stop(s);
        c->reading = false;
        conn_linger(c);
        return;
    }
    if (nread == UV_EOF && c->state == C_HELD && !c->shut_down) {
        /* A complete request waits its turn (paced): the client is done sending but is owed its
         * answer, and those of any requests pipelined behind it (request_finished lingers after
         * the last). */
        c->eof = true;
        uv_read_stop(s);
        c->reading = false;
        return;
    }
    if (nread < 0) { /* EOF or error: the client is gone (or done, when lingering) */
        if (nread != UV_EOF && c->state != C_LINGER)
            log_debug(&c->app->log, "%s: read: %s", c->remote, uv_strerror((int)nread));
        conn_close(c, "client gone");
        return;
    }
    if (c->state == C_LINGER || c->state == C_CLOSED) return;
    c->in_len += (size_t)nread;
    struct app *app = c->app;
    uint64_t t0 = app_work_begin(app);
    conn_process(c);
    app_work_end(app, APP_WORK_READ, t0);
}

/* A request without model work: answered at once whatever the budget (/health, /metrics). */
static bool request_light(const struct http_request *r) {
    return !strcmp(r->method, "GET") || !strcmp(r->method, "HEAD") || !strcmp(r->method, "OPTIONS");
}

/* Dispatch now, or hold the complete request for a later iteration (behind those already held). */
static void dispatch_or_hold(struct conn *c) {
    struct app *app = c->app;
    if (request_light(&c->parse.req)) {
        dispatch(c);
        return;
    }
    if (!app->held_head && app->dispatch_budget > 0) {
        app->dispatch_budget--;
        dispatch(c);
        return;
    }
    c->state = C_HELD;
    uv_timer_stop(&c->timer); /* it is complete: no read timeout while it waits its turn */
    app->counters.requests_inflight++;
    app->counters.requests_held++;
    c->held_next = NULL;
    c->held_prev = app->held_tail;
    if (app->held_tail) app->held_tail->held_next = c;
    else app->held_head = c;
    app->held_tail = c;
    if (!uv_is_active((uv_handle_t *)&app->dispatch_idle)) uv_idle_start(&app->dispatch_idle, conn_dispatch_held);
}

void conn_dispatch_held(uv_idle_t *h) {
    struct app *app = h->data;
    uint64_t t0 = app_work_begin(app);
    /* the budgets the reads of the last poll left: between two polls (where /health is
     * answered) at most CONN_DISPATCH_PER_ITERATION dispatches and CONN_CANCELS_PER_ITERATION
     * cancels in all, not that many from the reads and as many again from here */
    while (app->dispatch_budget > 0 && app->held_head) {
        struct conn *c = app->held_head;
        held_unlink(c);
        app->dispatch_budget--; /* before: c's pipelined requests, processed inside, spend it too */
        dispatch(c); /* may finish at once and process c's pipelined bytes: held again at the tail */
    }
    app->cancel_budget -= finish_held_cancels(app, app->cancel_budget);
    if (!app->held_head && !app->cancels_head) uv_idle_stop(h);
    app_work_end(app, APP_WORK_FLUSH, t0);
}

void conn_drain_begin(struct app *app) {
    ASSERT(app->state == APP_DRAINING); /* idle_ms() reads it */
    for (struct conn *c = app->conns, *next; c; c = next) {
        next = c->next; /* lingering never frees c here, but stay clear of the list anyway */
        if (c->state == C_HELD || c->state == C_READING) {
            c->before_drain = true; /* in the server's hands already: served */
        } else if (c->state == C_IDLE && c->used) {
            conn_linger(c); /* kept alive between requests: closed now (pipelined bytes unread) */
        } else if (c->state == C_IDLE) {
            c->before_drain = true; /* accepted, silent: DRAIN_IDLE_MS to send its request */
            conn_idle(c);
        }
    }
}

void conn_dispatch_budget_reset(struct app *app) {
    app->dispatch_budget = CONN_DISPATCH_PER_ITERATION;
    app->cancel_budget = CONN_CANCELS_PER_ITERATION;
}

/* What a reserve connection serves: GET or HEAD of the health path. */
static bool reserve_request(const struct conn *c) {
    const struct http_request *r = &c->parse.req;
    return c->app->health_path && (!strcmp(r->method, "GET") || !strcmp(r->method, "HEAD")) &&
           !strcmp(r->path, c->app->health_path);
}

/* Between requests with too many answers unread: the next request waits (see the top). */
static bool out_pause(struct conn *c) {
    if (c->state == C_IDLE && out_queued(c) > CONN_OUT_PAUSE_BYTES) c->out_paused = true;
    return c->out_paused;
}

/* Parse what is buffered, dispatching complete requests one at a time. */
static void conn_process(struct conn *c) {
    c->in_process = true;
    while ((c->state == C_IDLE || c->state == C_READING) && c->in_len && !out_pause(c)) {
        size_t used;
        int rc = http_parse_feed(&c->parse, c->in, c->in_len, &used);
        memmove(c->in, c->in + used, c->in_len - used);
        c->in_len -= used;
        if (rc < 0) {
            c->app->counters.bad_requests++;
            conn_send_error(c, c->parse.status, c->parse.reason);
            break;
        }
        if (c->state == C_IDLE && c->parse.started) request_started(c);
        if (c->reserve && rc > 0 && !reserve_request(c)) {
            c->app->counters.connections_rejected++;
            conn_send_error(c, 503, "too many connections, try again later");
            break;
        }
        if (rc == HTTP_PARSE_HEAD) {
            if (head_refused(c)) break;
            body_started(c);
            /* "100 Continue" only to a request the server will read, and only when the client
             * waits for it (no body byte here yet) */
            if (c->parse.expect_continue && c->in_len == 0) {
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                if (conn_write(c, cont, sizeof cont - 1, NULL)) break;
            }
            continue; /* the body: what is buffered now, or the next read */
        }
        if (rc == HTTP_PARSE_DONE) dispatch_or_hold(c);
    }
    c->in_process = false;
    if (c->state == C_CLOSED || c->state == C_LINGER) return;
    /* Pause reading when the buffer is full (a pipelining client racing ahead), or while the
     * client leaves its answers unread. */
    bool want = c->in_len < sizeof c->in && !c->eof && !out_pause(c);
    if (want && !c->reading) uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
    if (!want && c->reading) uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = want;
}

/* --- accepting ------------------------------------------------------------------------------ */

static void spare_closed_cb(uv_handle_t *h) {
    struct app *app = h->data;
    app->spare_busy = false;
    if (app->accept_waiting) {
        app->accept_waiting = false;
        if (app->listening) conn_accept(app);
    }
}

/* No memory for a new connection: take it from libuv anyway and close it unanswered. A
 * connection left in libuv makes it stop watching the listener, and one moment out of memory
 * would leave the server accepting nothing ever after. */
static void drop_connection(struct app *app) {
    if (app->spare_busy) { /* a second one before the spare is closed: it waits (listener paused) */
        app->accept_waiting = true;
        return;
    }
    app->counters.connections_dropped++;
    log_warn(&app->log, "out of memory for a new connection: closed it unanswered");
    uv_tcp_init(app->loop, &app->spare);
    app->spare.data = app;
    app->spare_busy = true;
    uv_accept((uv_stream_t *)&app->listener, (uv_stream_t *)&app->spare);
    uv_close((uv_handle_t *)&app->spare, spare_closed_cb);
}

void conn_accept(struct app *app) {
    struct conn *c = conn_malloc(app, sizeof *c);
    if (!c) {
        drop_connection(app);
        return;
    }
    memset(c, 0, sizeof *c);
    c->app = app;
    uv_tcp_init(app->loop, &c->tcp);
    uv_timer_init(app->loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->handles_open = 2;
    c->start_ns = uv_hrtime();
    c->next = app->conns;
    if (app->conns) app->conns->prev = c;
    app->conns = c;
    app->counters.connections_total++;
    bool over = app->counters.connections_open >= app->cfg->max_connections; /* no parser needed */
    bool reserve = over && app->health_path && app->counters.reserve_open < CONN_HEALTH_RESERVE;
    if (uv_accept((uv_stream_t *)&app->listener, (uv_stream_t *)&c->tcp) ||
        ((!over || reserve) && http_parse_init(&c->parse, &app->limits))) {
        c->rejected = true;
        conn_close(c, NULL);
        return;
    }
    struct sockaddr_storage ss;
    int len = sizeof ss;
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (!uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len)) {
        if (ss.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        } else {
            uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        }
    }
    snprintf(c->remote, sizeof c->remote, ss.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", ip, port);
    uv_tcp_nodelay(&c->tcp, 1);
    if (reserve) { /* read for one /health request (reserve_request), outside --max-connections */
        c->reserve = c->rejected = true;
        app->counters.reserve_open++;
    } else if (over) {
        c->rejected = true;
        app->counters.connections_rejected++;
        /* A 503 holds its connection until the client has read it; under a flood of
         * connections that would hold unbounded memory: beyond as many as are served, close
         * at once, unanswered. */
        if (app->counters.rejects_open >= app->cfg->max_connections) {
            conn_close(c, NULL);
            return;
        }
        c->refused = true;
        app->counters.rejects_open++;
        log_warn(&app->log, "%s: over --max-connections %lld: 503", c->remote, app->cfg->max_connections);
        c->state = C_READING;
        conn_send_error(c, 503, "too many connections, try again later"); /* lingers, reading */
        return;
    }
    if (!reserve) app->counters.connections_open++;
    conn_idle(c);
    c->reading = true;
    uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
}

size_t conn_memory_bytes(const struct app *app) {
    return sizeof(struct conn) + app->limits.max_header_bytes + app->limits.max_headers * sizeof(struct http_header);
}

void conn_close_all(struct app *app) {
    for (struct conn *c = app->conns, *next; c; c = next) {
        next = c->next;
        conn_close(c, "server stopping");
    }
}

/* --- the responder: http.h's answering functions for a connection's request ----------------- */

/* The owner finishes a request whose connection died (before, or in the finishing call's own
 * write): it gets no cancel callback. */
static int finish_dead(struct conn *c) {
    c->cancel_cb = NULL;
    return -ERR_CANCELLED;
}

static int conn_add_header(struct http_request *req, const char *name, const char *value) {
    struct conn *c = conn_of(req);
    int n = snprintf(c->extra + c->extra_len, sizeof c->extra - c->extra_len, "%s: %s\r\n", name, value);
    if (n < 0 || (size_t)n >= sizeof c->extra - c->extra_len) return -ERR_TOOBIG;
    c->extra_len += (size_t)n;
    return 0;
}

static int conn_respond(struct http_request *req, int status, const char *content_type, const char *body, size_t len) {
    struct conn *c = conn_of(req);
    if (c->state == C_CLOSED || c->state == C_LINGER) return finish_dead(c);
    if (c->state != C_HANDLING) return -ERR_STATE;
    char head[CONN_EXTRA_BYTES + 512];
    c->status = status;
    size_t hlen = format_head(c, head, sizeof head, status, content_type ? content_type : "application/json",
                              (long long)len);
    c->finishing = true;
    int rc = c->head_only ? conn_write(c, head, hlen, NULL) : conn_write(c, head, hlen, body, len, NULL);
    c->finishing = false;
    if (rc) return finish_dead(c); /* the write closed the connection */
    request_finished(c);
    return 0;
}

static void conn_on_cancel(struct http_request *req, http_cancel_cb cb, void *data) {
    struct conn *c = conn_of(req);
    ASSERT(request_open(c) || c->state == C_CLOSED);
    c->cancel_cb = cb;
    c->cancel_data = data;
}

static void conn_on_abort(struct http_request *req, http_cancel_cb cb) {
    struct conn *c = conn_of(req);
    ASSERT(request_open(c) || c->state == C_CLOSED);
    if (c->state != C_CLOSED) c->abort_cb = cb; /* already dead: the cancel callback still comes */
}

static int sse_write(struct conn *c, const char *prefix, const char *data, size_t len) {
    if (c->state == C_CLOSED || c->state == C_LINGER) return -ERR_CANCELLED;
    if (c->state != C_STREAMING) return -ERR_STATE;
    if (c->head_only) return 0; /* HEAD: the stream's head went out, its events do not */
    size_t plen = strlen(prefix), frame = plen + len + 2;
    size_t queued = out_queued(c);
    if (queued + frame > (size_t)c->app->cfg->sse_queue_bytes) {
        c->app->counters.backpressure_closes++;
        log_warn(&c->app->log, "%s: client reads too slowly (%zu bytes waiting): stream closed", c->remote, queued);
        conn_close(c, "client reads too slowly");
        return -ERR_TOOBIG;
    }
    char size_line[24];
    int n = c->chunked ? snprintf(size_line, sizeof size_line, "%zx\r\n", frame) : 0;
    return conn_write(c, size_line, (size_t)n, prefix, plen, data, len, "\n\n", (size_t)2, "\r\n",
                      (size_t)(c->chunked ? 2 : 0), NULL);
}

static void ping_cb(uv_timer_t *t) {
    sse_write(t->data, ": ping", "", 0);
}

static int conn_sse_start(struct http_request *req, http_cancel_cb cb, void *data) {
    struct conn *c = conn_of(req);
    if (c->state == C_CLOSED || c->state == C_LINGER) return finish_dead(c);
    if (c->state != C_HANDLING) return -ERR_STATE;
    if (!c->chunked) c->keep_alive = false; /* HTTP/1.0: the stream ends when the connection does */
    char head[CONN_EXTRA_BYTES + 512];
    c->status = 200;
    size_t hlen = format_head(c, head, sizeof head, 200, "text/event-stream", -1);
    c->finishing = true; /* failing, it finishes the request */
    int rc = conn_write(c, head, hlen, NULL);
    c->finishing = false;
    if (rc) return finish_dead(c); /* the write closed the connection */
    c->state = C_STREAMING;
    c->cancel_cb = cb;
    c->cancel_data = data;
    uint64_t ping = (uint64_t)c->app->cfg->sse_ping_ms;
    uv_timer_start(&c->timer, ping_cb, ping, ping);
    return 0;
}

static int conn_sse_send(struct http_request *req, const char *event, const char *data, size_t len) {
    if (!event) return sse_write(conn_of(req), "data: ", data, len);
    char prefix[160]; /* event names are short constants ("response.output_text.delta") */
    if ((size_t)snprintf(prefix, sizeof prefix, "event: %s\ndata: ", event) >= sizeof prefix) return -ERR_INVAL;
    return sse_write(conn_of(req), prefix, data, len);
}

static int conn_sse_end(struct http_request *req) {
    struct conn *c = conn_of(req);
    if (c->state == C_CLOSED || c->state == C_LINGER) return finish_dead(c);
    if (c->state != C_STREAMING) return -ERR_STATE;
    c->finishing = true;
    int rc = c->chunked && !c->head_only ? conn_write(c, "0\r\n\r\n", (size_t)5, NULL) : 0;
    c->finishing = false;
    if (rc) return finish_dead(c); /* closed */
    request_finished(c);
    return 0;
}

static const struct http_responder conn_responder = {
    .add_header = conn_add_header,
    .respond = conn_respond,
    .on_cancel = conn_on_cancel,
    .on_abort = conn_on_abort,
    .sse_start = conn_sse_start,
    .sse_send = conn_sse_send,
    .sse_end = conn_sse_end,
};
