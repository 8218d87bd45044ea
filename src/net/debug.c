#include "net/debug.h"
#include "common/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A timer-driven producer: the stream's events, or the late answer of /debug/delay. */
struct ticker {
    uv_timer_t timer;
    struct http_request *req; /* NULL once finished or cancelled */
    long long i, n, interval_ms, size;
    char *event;              /* {"i":..,"n":..,"pad":"..."} buffer */
};

static void ticker_free_cb(uv_handle_t *h) {
    struct ticker *t = h->data;
    free(t->event);
    free(t);
}

static void ticker_done(struct ticker *t) {
    t->req = NULL;
    uv_close((uv_handle_t *)&t->timer, ticker_free_cb);
}

static void ticker_cancel_cb(struct http_request *req, void *data) {
    ticker_done(data); /* the client left: stop producing */
}

/* A new ticker for req; NULL (and req answered with a 500) when out of memory. */
static struct ticker *ticker_new(struct http_request *req, size_t event_bytes) {
    struct app *app = req->route_data;
    struct ticker *t = calloc(1, sizeof *t);
    char *event = event_bytes ? malloc(event_bytes) : NULL;
    if (!t || (event_bytes && !event)) {
        free(t);
        free(event);
        http_respond_error(req, 500, "out of memory");
        return NULL;
    }
    t->event = event;
    uv_timer_init(app->loop, &t->timer);
    t->timer.data = t;
    t->req = req;
    return t;
}

static void stream_tick_cb(uv_timer_t *timer) {
    struct ticker *t = timer->data;
    if (!t->req) return;
    if (t->i == t->n) {
        http_sse_end(t->req);
        ticker_done(t);
        return;
    }
    int len = snprintf(t->event, 64, "{\"i\":%lld,\"n\":%lld,\"pad\":\"", t->i++, t->n);
    memset(t->event + len, 'x', (size_t)t->size);
    len += (int)t->size;
    memcpy(t->event + len, "\"}", 3);
    if (http_sse_send(t->req, t->event, (size_t)len + 2) < 0) {
        t->req = NULL; /* dead: the cancel callback will come and free us */
        return;
    }
    uv_timer_start(&t->timer, stream_tick_cb, (uint64_t)t->interval_ms, 0);
}

static void stream_handle(struct http_request *req, void *data) {
    long long size = http_query_int(req, "size", 0, 1 << 20);
    struct ticker *t = ticker_new(req, 64 + (size_t)size + 3);
    if (!t) return;
    t->n = http_query_int(req, "n", 10, 1000000);
    t->interval_ms = http_query_int(req, "interval_ms", 100, 60000);
    t->size = size;
    if (http_sse_start(req, ticker_cancel_cb, t)) { /* the client is already gone */
        ticker_done(t);
        return;
    }
    uv_timer_start(&t->timer, stream_tick_cb, (uint64_t)t->interval_ms, 0);
}

static void delay_tick_cb(uv_timer_t *timer) {
    struct ticker *t = timer->data;
    char body[64];
    snprintf(body, sizeof body, "{\"delayed_ms\":%lld}", t->interval_ms);
    http_respond_json(t->req, 200, body);
    ticker_done(t);
}

static void delay_handle(struct http_request *req, void *data) {
    struct ticker *t = ticker_new(req, 0);
    if (!t) return;
    t->interval_ms = http_query_int(req, "ms", 100, 600000);
    http_on_cancel(req, ticker_cancel_cb, t);
    uv_timer_start(&t->timer, delay_tick_cb, (uint64_t)t->interval_ms, 0);
}

static void echo_handle(struct http_request *req, void *data) {
    http_respond(req, 200, "application/octet-stream", req->body, req->body_len);
}

static void stats_handle(struct http_request *req, void *data) {
    const struct app *app = data;
    const struct app_counters *k = &app->counters;
    const struct app_loop_stats *ls = &app->loop_stats;
    char body[4096];
    int n = snprintf(body, sizeof body,
             "{\"state\":\"%s\",\"connections_total\":%llu,\"connections_rejected\":%llu,\"connections_dropped\":%llu,\"connections_open\":%d,\"rejects_open\":%d,\"reserve_open\":%d,"
             "\"requests_total\":%llu,\"requests_inflight\":%d,\"requests_cancelled\":%llu,"
             "\"backpressure_closes\":%llu,\"timeouts\":%llu,\"bad_requests\":%llu,\"requests_held\":%llu",
             app_state_name(app->state), (unsigned long long)k->connections_total,
             (unsigned long long)k->connections_rejected, (unsigned long long)k->connections_dropped, k->connections_open, k->rejects_open, k->reserve_open, (unsigned long long)k->requests_total,
             k->requests_inflight, (unsigned long long)k->requests_cancelled,
             (unsigned long long)k->backpressure_closes, (unsigned long long)k->timeouts,
             (unsigned long long)k->bad_requests, (unsigned long long)k->requests_held);
    /* the loop's iterations by busy time: "le_ms" bounds (the last is +inf) and counts */
    n += snprintf(body + n, sizeof body - (size_t)n,
                  ",\"loop\":{\"iterations\":%llu,\"busy_ms_sum\":%.3f,\"busy_ms_max\":%.3f,\"cpu_ms_sum\":%.3f,"
                  "\"cpu_ms_max\":%.3f",
                  (unsigned long long)ls->iterations, (double)ls->busy_ns_sum / 1e6, (double)ls->busy_ns_max / 1e6,
                  (double)ls->cpu_ns_sum / 1e6, (double)ls->cpu_ns_max / 1e6);
    for (int which = 0; which < 2; which++) {
        const uint64_t *hist = which ? ls->cpu_hist : ls->hist;
        n += snprintf(body + n, sizeof body - (size_t)n, ",\"%s\":[", which ? "cpu_hist" : "hist");
        for (int b = 0; b < APP_LOOP_BUCKETS; b++) {
            char le[32];
            if (b == APP_LOOP_BUCKETS - 1) snprintf(le, sizeof le, "\"inf\"");
            else snprintf(le, sizeof le, "%g", app_loop_bounds_ms[b]);
            n += snprintf(body + n, sizeof body - (size_t)n, "%s{\"le_ms\":%s,\"n\":%llu}", b ? "," : "", le,
                          (unsigned long long)hist[b]);
        }
        n += snprintf(body + n, sizeof body - (size_t)n, "]");
    }
    /* what the loop's CPU went to, by kind of callback, and in the bursts (> 5 ms of CPU) */
    n += snprintf(body + n, sizeof body - (size_t)n,
                  ",\"bursts\":%llu,\"burst_cpu_ms\":%.3f,\"requests_per_iteration_max\":%llu,\"work\":{",
                  (unsigned long long)ls->burst_iters, (double)ls->burst_cpu_ns / 1e6,
                  (unsigned long long)ls->requests_iter_max);
    for (int k = 0; k < APP_WORK_N; k++) {
        const struct app_work_stats *w = &ls->work[k];
        n += snprintf(body + n, sizeof body - (size_t)n,
                      "%s\"%s\":{\"calls\":%llu,\"cpu_ms_sum\":%.3f,\"cpu_ms_max\":%.3f,\"burst_cpu_ms\":%.3f,"
                      "\"bursts_led\":%llu}",
                      k ? "," : "", app_work_names[k], (unsigned long long)w->calls, (double)w->cpu_ns_sum / 1e6,
                      (double)w->cpu_ns_max / 1e6, (double)w->burst_ns / 1e6, (unsigned long long)w->burst_iters);
    }
    snprintf(body + n, sizeof body - (size_t)n, "}}}");
    http_respond_json(req, 200, body);
}

int debug_routes_add(struct app *app, struct router *r) {
    int rc = 0;
    rc = rc ? rc : router_add(r, "GET", "/debug/stream", stream_handle, app, 0);
    rc = rc ? rc : router_add(r, "GET", "/debug/delay", delay_handle, app, 0);
    rc = rc ? rc : router_add(r, "POST", "/debug/echo", echo_handle, app, 0);
    rc = rc ? rc : router_add(r, "GET", "/debug/stats", stats_handle, app, 0);
    return rc;
}
