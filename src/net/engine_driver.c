/* engine_driver.c: the loop's side of the engine: work requests, the compute thread, the tick
 * timer and the resume idle handle (engine_driver.h). */
#include "net/engine_driver.h"

#include "common/err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define TICK_MS 50
/* Most sequences whose tokens a step's completion hands to the clients (detokenize, render, write)
 * in one loop iteration; the rest follow in the next iterations (the `resume` idle handle), each
 * after a poll, so a /health request never waits behind a whole step's output (64 sequences of
 * JSON and writes). */
#define STEP_OUTPUTS_PER_ITERATION 8

/* --- steps ----------------------------------------------------------------------------------- */

/* On the compute thread. */
static void step_compute(void *arg) {
    struct engine_driver *d = arg;
    if (d->step_sleep_ms > 0) /* --debug-endpoints' /debug/slow-step only */
        nanosleep(&(struct timespec){.tv_sec = d->step_sleep_ms / 1000,
                                     .tv_nsec = d->step_sleep_ms % 1000 * 1000000}, NULL);
    d->ops->compute_step(d->engine);
}

/* On a threadpool thread, which waits at the loop's priority (see compute_thread.h). */
static void step_work_cb(uv_work_t *w) {
    struct engine_driver *d = w->data;
    compute_thread_call(&d->compute, step_compute, d);
}

static void try_step(struct engine_driver *d);
static void resume_cb(uv_idle_t *h);

/* Hand one part of the completed step's output to the clients; the next step is built once the
 * last part is done. Between parts the loop polls (the idle handle makes that poll not wait). */
static void complete_part(struct engine_driver *d) {
    if (d->ops->complete_step(d->engine, STEP_OUTPUTS_PER_ITERATION)) {
        if (!uv_is_active((uv_handle_t *)&d->resume)) uv_idle_start(&d->resume, resume_cb);
        return;
    }
    uv_idle_stop(&d->resume);
    d->step_in_flight = false;
    try_step(d); /* the next step at once, not at the next tick */
}

static void resume_cb(uv_idle_t *h) {
    struct engine_driver *d = h->data;
    uint64_t t0 = app_work_begin(d->app);
    complete_part(d);
    app_work_end(d->app, APP_WORK_FLUSH, t0);
}

static void step_after_cb(uv_work_t *w, int status) {
    struct engine_driver *d = w->data;
    uint64_t t0 = app_work_begin(d->app);
    (void)status; /* steps are never cancelled: uv_cancel is not used on them */
    complete_part(d);
    app_work_end(d->app, APP_WORK_STEP, t0);
}

static void try_step(struct engine_driver *d) {
    if (d->step_in_flight || !d->started) return;
    if (!d->ops->build_step(d->engine)) return;
    d->step_sleep_ms = d->slow_next_ms;
    d->slow_next_ms = 0;
    d->step_in_flight = true;
    d->step_work.data = d;
    int rc = uv_queue_work(d->app->loop, &d->step_work, step_work_cb, step_after_cb);
    ASSERT(rc == 0); /* uv_queue_work fails only without a work callback */
}

static void tick_cb(uv_timer_t *t) {
    struct engine_driver *d = t->data;
    uint64_t t0 = app_work_begin(d->app);
    try_step(d);
    app_work_end(d->app, APP_WORK_BUILD, t0);
}

/* POST /debug/slow-step?ms=N (--debug-endpoints): the next step sleeps N ms before computing. */
static void slow_step_handle(struct http_request *req, void *data) {
    struct engine_driver *d = data;
    d->slow_next_ms = http_query_int(req, "ms", 0, 600000);
    char body[64];
    snprintf(body, sizeof body, "{\"slow_step_ms\":%lld}", d->slow_next_ms);
    http_respond_json(req, 200, body);
}

void engine_driver_kick(void *driver) {
    struct engine_driver *d = driver;
    if (d->tick_open) uv_timer_start(&d->tick, tick_cb, 0, TICK_MS);
}

/* --- loading ---------------------------------------------------------------------------------- */

/* On the compute thread, at the loop's priority; then it and the forward pass's threads created
 * here go to the compute priority (compute_thread_load). */
static void load_compute(void *arg) {
    struct engine_driver *d = arg;
    d->load_rc = d->ops->load(d->engine);
}

static void load_work_cb(uv_work_t *w) {
    struct engine_driver *d = w->data;
    compute_thread_load(&d->compute, load_compute, d);
}

static void load_after_cb(uv_work_t *w, int status) {
    struct engine_driver *d = w->data;
    int rc = status < 0 ? -ERR_STATE : d->load_rc;
    if (d->compute.nice_rc < 0)
        log_warn(&d->app->log, "--compute-nice: could not lower the compute threads' priority: %s",
                 strerror(-d->compute.nice_rc));
    rc = d->ops->start(d->engine, rc);
    if (rc == 0) {
        uv_timer_init(d->app->loop, &d->tick);
        uv_idle_init(d->app->loop, &d->resume);
        d->tick.data = d->resume.data = d;
        d->tick_open = true;
        d->started = true;
        uv_unref((uv_handle_t *)&d->tick); /* never what keeps the loop running */
        uv_timer_start(&d->tick, tick_cb, TICK_MS, TICK_MS);
    }
    app_loaded(d->app, rc);
}

static int driver_load(struct app *app, void *data) {
    struct engine_driver *d = data;
    int rc = compute_thread_start(&d->compute, d->compute_nice);
    if (rc < 0) return rc;
    d->compute_started = true;
    d->load_work.data = d;
    rc = uv_queue_work(app->loop, &d->load_work, load_work_cb, load_after_cb);
    return rc ? -ERR_STATE : 0;
}

/* --- lifecycle --------------------------------------------------------------------------------- */

void engine_driver_init(struct engine_driver *d, struct app *app, const struct serving_engine_ops *ops,
                        void *engine) {
    memset(d, 0, sizeof *d);
    d->app = app;
    d->ops = ops;
    d->engine = engine;
    errno = 0; /* getpriority may return -1 as a level */
    int loop_nice = getpriority(PRIO_PROCESS, (id_t)gettid());
    if (loop_nice == -1 && errno) loop_nice = 0;
    long long nice = loop_nice + app->cfg->compute_nice;
    d->compute_nice = app->cfg->compute_nice >= COMPUTE_THREAD_IDLE ? COMPUTE_THREAD_IDLE : nice > 19 ? 19 : (int)nice;
    app->load = driver_load;
    app->load_data = d;
}

int engine_driver_routes_add(struct engine_driver *d, struct router *r) {
    return router_add(r, "POST", "/debug/slow-step", slow_step_handle, d, 0);
}

void engine_driver_close(struct engine_driver *d) {
    ASSERT(!d->step_in_flight); /* a step's parts keep the loop running (resume is referenced) */
    if (d->tick_open) {
        uv_close((uv_handle_t *)&d->tick, NULL);
        uv_close((uv_handle_t *)&d->resume, NULL);
    }
    d->tick_open = false;
}

void engine_driver_free(struct engine_driver *d) {
    ASSERT(!d->step_in_flight);
    if (d->compute_started) compute_thread_stop(&d->compute);
    d->compute_started = false;
}
