/* server.c: the app's lifecycle: listen, load, ready, drain, stop. Connections are conn.c. */
#include "common/err.h"
#include "net/server.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

const char *app_state_name(enum app_state s) {
    switch (s) {
    case APP_LOADING: return "loading";
    case APP_READY: return "ok";
    case APP_DRAINING: return "draining";
    }
    return "unknown";
}

const double app_loop_bounds_ms[APP_LOOP_BUCKETS] = {1, 2, 5, 10, 20, 50, 1e300};
const char *const app_work_names[APP_WORK_N] = {"accept", "read", "step", "build", "close", "flush"};

int app_init(struct app *app, const struct config *cfg, uv_loop_t *loop) {
    memset(app, 0, sizeof *app);
    app->cfg = cfg;
    app->loop = loop;
    /* loop_stats' only reader is GET /debug/stats: without it the loop is not measured */
    if (cfg->debug_endpoints) uv_loop_configure(loop, UV_METRICS_IDLE_TIME); /* before uv_run */
    app->state = APP_LOADING;
    int level = log_level_parse(cfg->log_level);
    log_init(&app->log, level < 0 ? LOG_INFO : (enum log_level)level, stderr);
    app->limits = (struct http_parse_limits){
        .max_header_bytes = (size_t)cfg->max_header_bytes,
        .max_headers = (size_t)cfg->max_headers,
        .max_body = (size_t)cfg->max_body,
    };
    return 0;
}

static void close_handle(uv_handle_t *h) {
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

int app_on_stop(struct app *app, app_stop_fn fn, void *data) {
    if (app->n_stop_hooks == APP_MAX_STOP_HOOKS) return -ERR_NOMEM;
    app->stop_hooks[app->n_stop_hooks].fn = fn;
    app->stop_hooks[app->n_stop_hooks++].data = data;
    return 0;
}

/* Everything is finished (or abandoned): close our handles so that uv_run returns. */
static void app_stop(struct app *app) {
    if (app->stopping) return;
    app->stopping = true;
    conn_finish_held_cancels(app); /* their owners hear of it before the stop hooks run */
    conn_close_all(app);
    for (int i = 0; i < app->n_stop_hooks; i++) app->stop_hooks[i].fn(app, app->stop_hooks[i].data);
    if (app->listening) close_handle((uv_handle_t *)&app->listener);
    app->listening = false;
    if (app->handles_open) {
        close_handle((uv_handle_t *)&app->sigterm);
        close_handle((uv_handle_t *)&app->sigint);
        close_handle((uv_handle_t *)&app->sighup);
        close_handle((uv_handle_t *)&app->sigusr1);
        close_handle((uv_handle_t *)&app->sigusr2);
        close_handle((uv_handle_t *)&app->timer);
        close_handle((uv_handle_t *)&app->loop_probe);
        close_handle((uv_handle_t *)&app->dispatch_idle);
        close_handle((uv_handle_t *)&app->dispatch_pace);
        app->handles_open = false;
    }
}

static void maybe_finish_drain(struct app *app) {
    const struct app_counters *n = &app->counters;
    if (app->state == APP_DRAINING && n->requests_inflight == 0 &&
        n->connections_open + n->rejects_open + n->reserve_open == 0 &&
        !app->stopping) {
        log_info(&app->log, "drained: exiting");
        app_stop(app);
    }
}

void app_conn_closed(struct app *app) {
    maybe_finish_drain(app);
}

void app_request_finished(struct app *app) {
    maybe_finish_drain(app);
}

static void drain_timeout_cb(uv_timer_t *t) {
    struct app *app = t->data;
    log_warn(&app->log, "drain timeout: cancelling %d request(s), closing %d connection(s)",
             app->counters.requests_inflight,
             app->counters.connections_open + app->counters.rejects_open + app->counters.reserve_open);
    app_stop(app);
}

void app_drain(struct app *app) {
    if (app->state == APP_DRAINING) return;
    /* Requests held for a later iteration arrived before the drain: they are served, not 503'd,
     * and still paced (dispatch_idle goes on: hundreds of them in this one callback would hold
     * the loop as long as the pacing exists to avoid); they count in flight, so the drain waits. */
    app->state = APP_DRAINING;
    conn_drain_begin(app);
    log_info(&app->log, "draining: %d request(s) in flight, up to %lld ms", app->counters.requests_inflight,
             app->cfg->drain_timeout_ms);
    if (app->listening) close_handle((uv_handle_t *)&app->listener);
    app->listening = false;
    uv_timer_start(&app->timer, drain_timeout_cb, (uint64_t)app->cfg->drain_timeout_ms, 0);
    maybe_finish_drain(app);
}

static void signal_cb(uv_signal_t *h, int signum) {
    struct app *app = h->data;
    if (++app->signals == 1) {
        log_info(&app->log, "%s: draining (send again to exit at once)", strsignal(signum));
        app_drain(app);
        return;
    }
    log_warn(&app->log, "%s again: exiting at once", strsignal(signum));
    app->exit_status = 1;
    app_stop(app);
}

/* SIGUSR1/SIGUSR2 mean nothing to uvlm: their default action would end the process unannounced. */
static void ignored_signal_cb(uv_signal_t *h, int signum) {
    log_info(&((struct app *)h->data)->log, "%s: ignored", strsignal(signum));
}

void app_loaded(struct app *app, int status) {
    if (app->state != APP_LOADING) return; /* a drain started meanwhile */
    if (status < 0) {
        log_error(&app->log, "loading failed: %s", err_str(status));
        /* A model (or setting) that cannot be used is a configuration error, status 2 like a bad
         * flag; running out of memory or an I/O error is a failure of the run, status 1. */
        app->exit_status = status == -ERR_NOMEM || status == -ERR_IO ? 1 : 2;
        app_stop(app);
        return;
    }
    app->state = APP_READY;
    log_info(&app->log, "ready");
}

static void start_loading(struct app *app) {
    if (!app->load) {
        app_loaded(app, 0);
        return;
    }
    int rc = app->load(app, app->load_data);
    if (rc < 0) app_loaded(app, rc);
}

static void ready_delay_cb(uv_timer_t *t) {
    start_loading(t->data);
}

/* Runs just before the loop polls: what passed since the previous one, less the time blocked in
 * that poll, is the iteration's busy time. */
static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void loop_hist_add(uint64_t *hist, uint64_t ns) {
    int b = 0;
    while (b < APP_LOOP_BUCKETS - 1 && (double)ns > app_loop_bounds_ms[b] * 1e6) b++;
    hist[b]++;
}

uint64_t app_work_begin(const struct app *app) {
    return app->cfg->debug_endpoints ? thread_cpu_ns() : 0;
}

void app_work_end(struct app *app, enum app_work kind, uint64_t t0) {
    if (!app->cfg->debug_endpoints) return;
    struct app_work_stats *w = &app->loop_stats.work[kind];
    uint64_t ns = thread_cpu_ns() - t0;
    w->calls++;
    w->cpu_ns_sum += ns;
    w->iter_ns += ns;
    if (ns > w->cpu_ns_max) w->cpu_ns_max = ns;
}

static void loop_probe_cb(uv_prepare_t *h) {
    struct app *app = h->data;
    struct app_loop_stats *ls = &app->loop_stats;
    uint64_t now = uv_hrtime(), idle = uv_metrics_idle_time(app->loop), cpu = thread_cpu_ns();
    if (ls->last_ns) {
        uint64_t span = now - ls->last_ns, blocked = idle - ls->last_idle_ns;
        uint64_t busy = span > blocked ? span - blocked : 0, used = cpu - ls->last_cpu_ns;
        loop_hist_add(ls->hist, busy);
        loop_hist_add(ls->cpu_hist, used);
        ls->iterations++;
        ls->busy_ns_sum += busy;
        ls->cpu_ns_sum += used;
        if (busy > ls->busy_ns_max) ls->busy_ns_max = busy;
        if (used > ls->cpu_ns_max) ls->cpu_ns_max = used;
        if (used > APP_BURST_NS) { /* what this burst was made of */
            int top = 0;
            for (int k = 0; k < APP_WORK_N; k++) {
                ls->work[k].burst_ns += ls->work[k].iter_ns;
                if (ls->work[k].iter_ns > ls->work[top].iter_ns) top = k;
            }
            ls->work[top].burst_iters++;
            ls->burst_iters++;
            ls->burst_cpu_ns += used;
        }
    }
    for (int k = 0; k < APP_WORK_N; k++) ls->work[k].iter_ns = 0;
    if (ls->requests_iter > ls->requests_iter_max) ls->requests_iter_max = ls->requests_iter;
    ls->requests_iter = 0;
    ls->last_ns = now;
    ls->last_idle_ns = idle;
    ls->last_cpu_ns = cpu;
}

/* The kernel's struct sched_attr (its first version, 48 bytes); <linux/sched/types.h> clashes
 * with <sched.h>'s struct sched_param. */
struct loop_sched_attr {
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
};

/* Ask for a short time slice for the loop thread (--loop-slice-us). The fair scheduler of Linux
 * 6.12 and later (EEVDF) takes sched_runtime as the slice a SCHED_OTHER task wants, and a waking
 * task with a shorter slice preempts the running one at once: when a socket becomes readable
 * while the compute threads hold both cores, the loop runs now instead of after their slice
 * (about 3 ms, the tail of /health's latency). Unprivileged: same policy, same nice; it changes
 * only when this thread gets a core, not how much CPU it gets. RESET_ON_FORK: threads created
 * from here on (libuv's threadpool, and through it the compute threads) keep the default slice.
 * Older kernels ignore the field; a refusal (seccomp, another OS) only costs latency.
 * The default, 500 us, is short enough that a normal-priority thread which has just taken the core
 * (a kernel thread running a few ms at a time) does not delay /health by its whole slice, and long
 * enough that the loop is seldom preempted in the middle of an iteration on a loaded machine:
 * scripts/soak prints /health's latency per window under load. */
static void loop_short_slice(struct app *app) {
    if (app->cfg->loop_slice_us <= 0) return;
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, (id_t)gettid());
    if (nice == -1 && errno) nice = 0;
    struct loop_sched_attr a = {.size = sizeof a, .sched_policy = 0 /* SCHED_OTHER */,
                                .sched_flags = 1 /* SCHED_FLAG_RESET_ON_FORK */, .sched_nice = nice,
                                .sched_runtime = (uint64_t)app->cfg->loop_slice_us * 1000};
    if (syscall(SYS_sched_setattr, 0, &a, 0) != 0)
        log_warn(&app->log, "--loop-slice-us: the loop thread keeps the kernel's time slice (%s)",
                 strerror(errno));
}

static void dispatch_pace_cb(uv_prepare_t *h) {
    conn_dispatch_budget_reset(h->data);
}

static void on_connection(uv_stream_t *server, int status) {
    struct app *app = server->data;
    if (status < 0) {
        log_warn(&app->log, "accept: %s", uv_strerror(status));
        return;
    }
    uint64_t t0 = app_work_begin(app);
    conn_accept(app);
    app_work_end(app, APP_WORK_ACCEPT, t0);
}

/* An IPv4/IPv6 literal, or a host name (resolved once at start, synchronously). */
static int resolve(uv_loop_t *loop, const char *host, int port, struct sockaddr_storage *ss) {
    if (!uv_ip4_addr(host, port, (struct sockaddr_in *)ss)) return 0;
    if (!uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss)) return 0;
    uv_getaddrinfo_t req;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    if (uv_getaddrinfo(loop, &req, NULL, host, NULL, &hints)) return -ERR_NOTFOUND;
    int rc = -ERR_NOTFOUND;
    for (struct addrinfo *ai = req.addrinfo; ai && rc; ai = ai->ai_next) {
        if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
        memcpy(ss, ai->ai_addr, ai->ai_addrlen);
        if (ai->ai_family == AF_INET) ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
        else ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
        rc = 0;
    }
    uv_freeaddrinfo(req.addrinfo);
    return rc;
}

int app_start(struct app *app) {
    const struct config *cfg = app->cfg;
    struct sockaddr_storage ss;
    int rc;
    if (resolve(app->loop, cfg->host, (int)cfg->port, &ss)) {
        log_error(&app->log, "--host '%s': not an address, and no such host", cfg->host);
        return -ERR_INVAL;
    }
    loop_short_slice(app); /* before the threadpool exists: its threads keep the default */
    uv_tcp_init(app->loop, &app->listener);
    app->listener.data = app;
    app->listening = true;
    if ((rc = uv_tcp_bind(&app->listener, (struct sockaddr *)&ss, 0)) ||
        (rc = uv_listen((uv_stream_t *)&app->listener, 511, on_connection))) {
        log_error(&app->log, "cannot listen on %s port %lld: %s", cfg->host, cfg->port, uv_strerror(rc));
        return -ERR_IO;
    }
    int len = sizeof ss;
    uv_tcp_getsockname(&app->listener, (struct sockaddr *)&ss, &len);
    app->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);

    uv_signal_init(app->loop, &app->sigterm);
    uv_signal_init(app->loop, &app->sigint);
    uv_signal_init(app->loop, &app->sighup);
    uv_signal_init(app->loop, &app->sigusr1);
    uv_signal_init(app->loop, &app->sigusr2);
    uv_timer_init(app->loop, &app->timer);
    uv_prepare_init(app->loop, &app->loop_probe);
    uv_idle_init(app->loop, &app->dispatch_idle);
    uv_prepare_init(app->loop, &app->dispatch_pace);
    app->sigterm.data = app->sigint.data = app->sighup.data = app->sigusr1.data = app->sigusr2.data = app;
    app->timer.data = app->loop_probe.data = app;
    app->dispatch_idle.data = app->dispatch_pace.data = app;
    conn_dispatch_budget_reset(app);
    uv_prepare_start(&app->dispatch_pace, dispatch_pace_cb);
    uv_unref((uv_handle_t *)&app->dispatch_pace); /* never what keeps the loop running */
    if (cfg->debug_endpoints) uv_prepare_start(&app->loop_probe, loop_probe_cb); /* as above */
    uv_unref((uv_handle_t *)&app->loop_probe); /* never what keeps the loop running */
    app->handles_open = true;
    uv_signal_start(&app->sigterm, signal_cb, SIGTERM);
    uv_signal_start(&app->sigint, signal_cb, SIGINT);
    uv_signal_start(&app->sighup, signal_cb, SIGHUP); /* a closed terminal or a supervisor's hang-up */
    uv_signal_start(&app->sigusr1, ignored_signal_cb, SIGUSR1);
    uv_signal_start(&app->sigusr2, ignored_signal_cb, SIGUSR2);

    size_t per_conn = conn_memory_bytes(app);
    log_info(&app->log, "listening on %s%s%s:%d (%lld connections x %zu KiB, bodies up to %lld KiB)%s",
             ss.ss_family == AF_INET6 ? "[" : "", cfg->host, ss.ss_family == AF_INET6 ? "]" : "", app->port,
             cfg->max_connections, per_conn / 1024, cfg->max_body / 1024, cfg->api_key.n ? ", API key required" : "");
    if (cfg->debug_endpoints) log_warn(&app->log, "debug endpoints enabled (/debug/...): not for production");
    if (cfg->debug_ready_delay_ms > 0) uv_timer_start(&app->timer, ready_delay_cb, (uint64_t)cfg->debug_ready_delay_ms, 0);
    else start_loading(app);
    return 0;
}

void app_close(struct app *app) {
    app_stop(app);
    uv_run(app->loop, UV_RUN_DEFAULT); /* let the close callbacks run */
}
