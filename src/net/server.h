/* server.h: the HTTP server core and the one `struct app` of a serving process.
 *
 * One libuv loop thread owns everything here: the listener, every connection (conn.c), the
 * signal handlers and the lifecycle state (loading -> ready -> draining). Every uv handle's
 * `data` points back to its owner, and through it to the app; there is no global state.
 *
 *   loop thread ──accept──> conn ──llhttp (parse.c)──> struct http_request (api/http.h)
 *                                                        │ app->on_request (cmd/serve.c: the router)
 *                                                        v
 *                                   handler: http_respond / http_sse_* ──> conn.c's responder
 *
 * The server knows no route: each complete request goes to the request hook, app->on_request,
 * with its responder (req->resp) filled in, and whatever the hook calls answers through it.
 *
 * Lifecycle: app_start() listens first, so /health answers 503 "loading" while the model
 * loads; app->load (the model loader hook, set before app_start) starts loading and calls
 * app_loaded() on the loop thread when it is done; with no loader the app is ready at once
 * (after --debug-ready-delay, a debugging aid). SIGTERM/SIGINT/SIGHUP starts a drain: the listener
 * closes, kept-alive connections between requests close (conn_drain_begin), requests see
 * req->draining (/health says "draining") and, when they were on their way before the drain
 * (req->before_drain), are served; responses carry "Connection: close", in-flight requests run
 * until they finish or --drain-timeout passes (then they are cancelled), and the loop runs out. A second signal cancels everything at once. SIGUSR1 and
 * SIGUSR2 are logged and ignored; SIGQUIT keeps its default action (exit with a core dump).
 *
 *   uv_loop_t loop; uv_loop_init(&loop);
 *   struct app app;
 *   app_init(&app, &cfg, &loop);
 *   app.on_request = my_dispatch; app.request_data = &router;  // e.g. router_dispatch
 *   app.on_head = my_refuse;           // optional: e.g. router_refuse, before a body is read
 *   app.health_path = "/health";       // optional: served beyond --max-connections too
 *   app.load = engine_load; app.load_data = engine;    // optional: ready when engine_load is done
 *   app_on_stop(&app, engine_stop, engine);            // optional: close the engine's handles
 *   if (app_start(&app) == 0) uv_run(&loop, UV_RUN_DEFAULT);
 *   app_close(&app);                  // after uv_run returned: frees what is left
 *   uv_loop_close(&loop);
 *   return app.exit_status;
 */
#ifndef UVLM_NET_SERVER_H
#define UVLM_NET_SERVER_H

#include "api/http.h"
#include "common/config.h"
#include "common/log.h"
#include "net/parse.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct conn;
struct app;

enum app_state { APP_LOADING, APP_READY, APP_DRAINING };
/* "loading", "ok", "draining": the words /health uses. */
const char *app_state_name(enum app_state s);

/* Request hook: a complete request, its responder filled in, to answer as api/http.h says. Loop
 * thread. cmd/serve.c sets the router (api/router.h) here. */
typedef void (*app_request_fn)(struct http_request *req, void *data);

/* Head hook (optional): the head of a request with a body is complete and none of the body has
 * been read. Refuse it now (answer it through req->resp, e.g. 401 without an API key: the
 * connection closes after the answer, the body unread) and return true; or return false without
 * answering or keeping req: the body is read and the complete request goes to app->on_request.
 * req->body is empty here. Called with app->request_data. cmd/serve.c sets router_refuse here. */
typedef bool (*app_head_fn)(struct http_request *req, void *data);

/* Model loader hook: start loading (e.g. uv_queue_work on app->loop) and call app_loaded() on
 * the loop thread when done. Return 0 if loading started, or a negative ERR_* code. */
typedef int (*app_load_fn)(struct app *app, void *data);

/* Stop hook: the app is stopping (drained, drain timeout, second signal, failed load). Close your
 * uv handles here (e.g. the scheduler's tick timer) so that the loop can end; free your state
 * after uv_run has returned, since cancel callbacks of open requests still run after the hook. */
typedef void (*app_stop_fn)(struct app *app, void *data);
#define APP_MAX_STOP_HOOKS 8

struct app_counters {
    uint64_t connections_total;     /* accepted (including rejected ones) */
    uint64_t connections_rejected;  /* over --max-connections: 503 */
    uint64_t connections_dropped;   /* no memory for them: closed at once, unanswered */
    uint64_t requests_total;        /* dispatched to a handler */
    uint64_t requests_cancelled;    /* cancel callbacks called */
    uint64_t backpressure_closes;   /* streams closed because the client read too slowly */
    uint64_t timeouts;              /* 408s */
    uint64_t bad_requests;          /* 400/413/417/431 from the parser */
    uint64_t requests_held;         /* complete, over an iteration's dispatch budget: held (conn.c) */
    int connections_open;           /* counted against --max-connections; down when one closes (its
                                     * paced cancel callback and memory may follow later) */
    int rejects_open;               /* over it, answered 503 and not closed yet (at most as many) */
    int reserve_open;               /* over it, read for one health request (conn.c's reserve) */
    int requests_inflight;          /* dispatched, not finished or cancelled */
};

/* How long each loop iteration kept the loop thread from polling again: the time from one poll's
 * return to the next poll (I/O callbacks, timers, closes), minus nothing. A /health request that
 * arrives during an iteration waits for the rest of it, so this is the loop's share of /health
 * latency; the other share, waiting for a CPU when the socket becomes readable, is not in it.
 * Measured with a uv_prepare handle, uv_metrics_idle_time and the thread's CPU clock (three clock
 * reads per iteration), only with --debug-endpoints: /debug/stats is what reads them. */
#define APP_LOOP_BUCKETS 7
extern const double app_loop_bounds_ms[APP_LOOP_BUCKETS]; /* upper bounds; the last is +inf */
/* What the loop's CPU time goes to, by the callback it is spent in (the rest, "other": timers,
 * write and close callbacks, libuv itself). Measured only with --debug-endpoints, like the rest. */
enum app_work {
    APP_WORK_ACCEPT,  /* a new connection */
    APP_WORK_READ,    /* bytes arrived: parsing, routing, the handlers (tokenizing, submitting) */
    APP_WORK_STEP,    /* a step completed: tokens to the clients, the next step built */
    APP_WORK_BUILD,   /* the tick timer: building a step (admission, prompt-cache matching) */
    APP_WORK_CLOSE,   /* a connection closed: cancel callbacks (requests cancelled), freeing */
    APP_WORK_FLUSH,   /* continuations: work held over from a previous iteration */
    APP_WORK_N
};
extern const char *const app_work_names[APP_WORK_N];
#define APP_BURST_NS 5000000u /* an iteration with more loop CPU than this is a burst */
struct app_work_stats {
    uint64_t calls, cpu_ns_sum, cpu_ns_max; /* per callback */
    uint64_t iter_ns;                       /* in the current iteration */
    uint64_t burst_ns;                      /* summed over the burst iterations */
    uint64_t burst_iters;                   /* burst iterations in which this kind took the most */
};
struct app_loop_stats {
    uint64_t iterations;
    uint64_t busy_ns_sum, cpu_ns_sum;
    uint64_t busy_ns_max, cpu_ns_max;
    uint64_t hist[APP_LOOP_BUCKETS];     /* iterations by busy (wall) time (not cumulative) */
    uint64_t cpu_hist[APP_LOOP_BUCKETS]; /* by the loop thread's CPU time in them: busy but not
                                          * on a CPU is the thread waiting for a core */
    uint64_t last_ns, last_idle_ns, last_cpu_ns; /* at the previous prepare callback */
    struct app_work_stats work[APP_WORK_N];
    uint64_t burst_iters, burst_cpu_ns;     /* iterations over APP_BURST_NS of loop CPU */
    uint64_t requests_iter, requests_iter_max; /* requests dispatched per iteration */
};

/* Account a callback's CPU time to a kind of work: t0 = app_work_begin(app); ...;
 * app_work_end(app, APP_WORK_READ, t0). Free (no clock read) without --debug-endpoints. */
uint64_t app_work_begin(const struct app *app);
void app_work_end(struct app *app, enum app_work kind, uint64_t t0);

/* Test-only fault injection for conn.c, zero (off) in a real server: while a counter is above
 * zero, the next conn.c allocation (a connection, a write buffer) or uv_write fails as if out
 * of memory / as if the socket had failed, and the counter goes down by one. Tests set it on the
 * loop thread (in a handler, or before app_start) to reach the error paths. */
struct app_faults {
    int allocs;
    int writes;
};

struct app {
    const struct config *cfg;
    struct log log;
    uv_loop_t *loop;
    app_request_fn on_request; /* set before app_start */
    app_head_fn on_head;       /* optional, set before app_start */
    void *request_data;        /* given to both */
    /* The health check's path ("/health"), or NULL: beyond --max-connections a few connections
     * (conn.c: CONN_HEALTH_RESERVE) are still read, and serve GET/HEAD of this path only, so that
     * a flood of connections does not fail the health checks. NULL: all of them get 503. */
    const char *health_path;
    struct http_parse_limits limits;
    enum app_state state;
    struct app_counters counters;
    struct app_loop_stats loop_stats;

    app_load_fn load; /* NULL: nothing to load */
    void *load_data;
    struct { app_stop_fn fn; void *data; } stop_hooks[APP_MAX_STOP_HOOKS];
    int n_stop_hooks;

    uv_tcp_t listener;
    uv_signal_t sigterm, sigint, sighup; /* drain */
    uv_signal_t sigusr1, sigusr2;        /* logged, ignored */
    uv_timer_t timer;        /* ready delay, then drain timeout */
    uv_prepare_t loop_probe; /* loop_stats */
    struct conn *conns;      /* every open connection (doubly linked) */
    /* Complete requests waiting for a later loop iteration (conn.c: CONN_DISPATCH_PER_ITERATION
     * heavy requests are dispatched per iteration), oldest first, doubly linked; dispatch_idle
     * runs while any wait (during a drain too), dispatch_pace restores the budget before every
     * poll. */
    struct conn *held_head, *held_tail;
    struct conn *cancels_head, *cancels_tail; /* closed, cancel callback not run yet (paced too) */
    int dispatch_budget, cancel_budget;
    uv_idle_t dispatch_idle;
    uv_prepare_t dispatch_pace;
    /* A connection with no memory for it must still be taken from libuv (which otherwise stops
     * watching the listener): it is accepted into `spare` and closed. While the spare closes,
     * one more such connection waits in libuv (accept_waiting) and is taken when it is free. */
    uv_tcp_t spare;
    bool spare_busy, accept_waiting;
    int signals;             /* signals received */
    bool listening, handles_open, stopping;
    int port;                /* actually bound */
    int exit_status;
    struct app_faults faults;
};

/* cfg must outlive the app. The caller sets on_request (and load, if anything loads). */
int app_init(struct app *app, const struct config *cfg, uv_loop_t *loop);

/* Listen, install the signal handlers, start loading. On error (e.g. address in use) logs it
 * and returns a negative ERR_* code; call app_close() and do not run the loop. */
int app_start(struct app *app);

/* Register a stop hook (called once, in registration order). -ERR_NOMEM when full. */
int app_on_stop(struct app *app, app_stop_fn fn, void *data);

/* The loader is done: status 0 -> ready; an error -> logged, the server stops (exit status 2 for
 * a model or setting that cannot be used, 1 for -ERR_NOMEM / -ERR_IO). */
void app_loaded(struct app *app, int status);

/* Begin the graceful drain (what SIGTERM does): stop listening, answer what was accepted, and stop
 * once no request is in flight and every connection has closed (a response is flushed and its
 * client has closed, or a connection without a request has had its moment to send one), or at
 * --drain-timeout. */
void app_drain(struct app *app);

/* After uv_run returned: close whatever is still open and run the loop until it is closed. */
void app_close(struct app *app);

/* --- used by conn.c ---------------------------------------------------------------------- */
void app_conn_closed(struct app *app);
void app_request_finished(struct app *app);

/* Start serving a freshly accepted connection (conn.c). */
void conn_accept(struct app *app);
/* Memory of one connection, bodies and queued writes aside (for the startup log). */
size_t conn_memory_bytes(const struct app *app);
/* Close every connection (open requests get their cancel callbacks). */
void conn_close_all(struct app *app);
/* A drain began (app->state is APP_DRAINING): kept-alive connections between requests are closed
 * (gracefully: their clients see the close before they send); requests held or being read now,
 * and the first request of a connection accepted but silent (DRAIN_IDLE_MS to send it), were on
 * their way before it: served (req->before_drain), not refused as draining. */
void conn_drain_begin(struct app *app);
/* dispatch_idle's callback: dispatch the next held requests. */
void conn_dispatch_held(uv_idle_t *h);
/* dispatch_pace's: a new iteration's budget of heavy requests and cancels. */
void conn_dispatch_budget_reset(struct app *app);
/* Run every held-over cancel callback now (the app is stopping). */
void conn_finish_held_cancels(struct app *app);

#endif
