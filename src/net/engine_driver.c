#include "net/engine_driver.h"

#include "api/chat_template.h"
#include "common/err.h"
#include "sched/sched.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define TICK_MS 50
/* Most sequences whose tokens a step's completion hands to the clients (detokenize, render, write)
 * in one loop iteration; the rest follow in the next iterations (the `resume` idle handle), each
 * after a poll, so a /health request never waits behind a whole step's output (64 sequences of
 * JSON and writes: several ms under ASan). */
#define STEP_OUTPUTS_PER_ITERATION 8

/* --- steps ----------------------------------------------------------------------------------- */

/* On the compute thread. */
static void step_compute(void *arg) {
    struct engine_driver *d = arg;
    if (d->step_sleep_ms > 0) /* --debug-endpoints' /debug/slow-step only */
        nanosleep(&(struct timespec){.tv_sec = d->step_sleep_ms / 1000,
                                     .tv_nsec = d->step_sleep_ms % 1000 * 1000000}, NULL);
    sched_step_compute(d->srv.sched, d->step);
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
static void complete_part(struct engine_driver *d, double now) {
    if (sched_step_complete_some(d->srv.sched, d->step, now, STEP_OUTPUTS_PER_ITERATION)) {
        if (!uv_is_active((uv_handle_t *)&d->resume)) uv_idle_start(&d->resume, resume_cb);
        return;
    }
    uv_idle_stop(&d->resume);
    d->step = NULL;
    try_step(d); /* the next step at once, not at the next tick */
}

static void resume_cb(uv_idle_t *h) {
    struct engine_driver *d = h->data;
    uint64_t t0 = app_work_begin(d->app);
    complete_part(d, serving_now_ms());
    app_work_end(d->app, APP_WORK_FLUSH, t0);
}

static void step_after_cb(uv_work_t *w, int status) {
    struct engine_driver *d = w->data;
    uint64_t t0 = app_work_begin(d->app);
    (void)status; /* steps are never cancelled: uv_cancel is not used on them */
    double now = serving_now_ms();
    log_debug(&d->app->log, "step: %d tokens, %.1f ms", sched_step_batch(d->step)->n_tokens, now - d->step_built_ms);
    complete_part(d, now);
    app_work_end(d->app, APP_WORK_STEP, t0);
}

static void try_step(struct engine_driver *d) {
    if (d->step || !d->srv.sched) return;
    struct sched_step *step;
    double now = serving_now_ms();
    if (sched_build_step(d->srv.sched, now, &step) <= 0) return;
    d->step_built_ms = now;
    d->step_sleep_ms = d->slow_next_ms;
    d->slow_next_ms = 0;
    d->step = step;
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

static void kick(void *driver) {
    struct engine_driver *d = driver;
    if (d->tick_open) uv_timer_start(&d->tick, tick_cb, 0, TICK_MS);
}

/* --- loading ---------------------------------------------------------------------------------- */

/* ENGINE_DEFAULT_MODEL from the working directory, else next to the binary (./uvlm or
 * build-check/uvlm in the repository). */
static void default_model_path(char *out, size_t cap) {
    snprintf(out, cap, "%s", ENGINE_DEFAULT_MODEL);
    if (access(out, R_OK) == 0) return;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return;
    exe[n] = '\0';
    char *dir = dirname(exe);
    for (int up = 0; up < 2; up++) {
        snprintf(out, cap, "%s/%s%s", dir, up ? "../" : "", ENGINE_DEFAULT_MODEL);
        if (access(out, R_OK) == 0) return;
    }
    snprintf(out, cap, "%s", ENGINE_DEFAULT_MODEL); /* the error names the expected place */
}

/* On the compute thread: the forward pass's threads created here inherit its nice level. */
static void load_compute(void *arg) {
    struct engine_driver *d = arg;
    d->load_rc = model_engine_load(&d->loaded, &d->ec, d->load_why, sizeof d->load_why);
}

static void load_work_cb(uv_work_t *w) {
    struct engine_driver *d = w->data;
    compute_thread_call(&d->compute, load_compute, d);
}

static int start_engine(struct engine_driver *d) {
    const struct config *cfg = d->app->cfg;
    struct model_engine *e = d->loaded;
    struct log *lg = &d->app->log;
    char line[512];
    model_engine_describe(e, line, sizeof line);
    log_info(lg, "model %s: %s", d->model_path, line);
    if (e->tokenizer_warning[0]) log_warn(lg, "tokenizer: %s", e->tokenizer_warning);

    size_t tlen;
    const char *tmpl = model_engine_chat_template(e, &tlen);
    enum chat_family fam;
    char why[512];
    int rc = chat_family_resolve(*cfg->chat_template ? cfg->chat_template : NULL, tmpl, tlen, &fam, why, sizeof why);
    if (rc < 0) {
        log_error(lg, "--chat-template: %s", why);
        return rc;
    }
    if (why[0]) log_warn(lg, "%s", why);
    log_info(lg, "chat template: %s", chat_family_name(fam));
    d->srv.chat_family = (int)fam;

    struct sched_config sc;
    sched_config_default(&sc);
    sc.n_ctx = e->n_ctx;
    sc.max_seq_tokens = (int32_t)cfg->max_seq_tokens;
    sc.batch_tokens = (int32_t)cfg->batch_tokens;
    sc.max_step_ms = (double)cfg->max_step_ms;
    sc.solo_step_ms = (double)cfg->solo_step_ms;
    sc.max_queue = (int32_t)cfg->max_queue;
    sc.max_n = (int32_t)cfg->max_n;
    sc.stall_timeout_ms = (double)cfg->stall_timeout_ms;
    if (sc.chunk_tokens > sc.batch_tokens) sc.chunk_tokens = sc.batch_tokens;
    rc = sched_create(&d->srv.sched, &sc, e->mem, &model_engine_ops, e);
    if (rc < 0) {
        log_error(lg, "scheduler: %s", err_str(rc));
        return rc;
    }
    d->srv.engine = e;
    d->loaded = NULL;
    d->srv.created = (int64_t)time(NULL);
    char base[PATH_MAX];
    snprintf(base, sizeof base, "%s", d->model_path);
    snprintf(d->srv.model_name, sizeof d->srv.model_name, "%s", basename(base));

    uv_timer_init(d->app->loop, &d->tick);
    uv_idle_init(d->app->loop, &d->resume);
    d->tick.data = d->resume.data = d;
    d->tick_open = true;
    uv_unref((uv_handle_t *)&d->tick); /* never what keeps the loop running */
    uv_timer_start(&d->tick, tick_cb, TICK_MS, TICK_MS);
    return 0;
}

static void load_after_cb(uv_work_t *w, int status) {
    struct engine_driver *d = w->data;
    int rc = status < 0 ? -ERR_STATE : d->load_rc;
    if (d->compute.nice_rc < 0)
        log_warn(&d->app->log, "--compute-nice: could not lower the compute threads' priority: %s",
                 strerror(-d->compute.nice_rc));
    if (rc < 0) log_error(&d->app->log, "loading %s: %s", d->model_path, d->load_why[0] ? d->load_why : err_str(rc));
    else rc = start_engine(d);
    app_loaded(d->app, rc);
}

static int driver_load(struct app *app, void *data) {
    struct engine_driver *d = data;
    const struct config *cfg = app->cfg;
    int32_t n_seq_max = (int32_t)(cfg->max_n * 4 > 64 ? cfg->max_n * 4 : 64);
    d->ec = (struct model_engine_config){
        .path = d->model_path,
        .kv_tokens = cfg->kv_tokens,
        .batch_tokens = (int32_t)cfg->batch_tokens,
        .n_seq_max = n_seq_max,
        .max_seq_tokens = (int32_t)cfg->max_seq_tokens,
        .recurrent_states = (int32_t)cfg->max_seqs_recurrent,
        .n_threads = (int)cfg->threads,
        .yield_us = cfg->compute_yield_us,
        .allow_unknown_pretokenizer = cfg->allow_unknown_pretokenizer,
    };
    log_info(&app->log, "loading %s", d->model_path);
    int rc = compute_thread_start(&d->compute, d->compute_nice);
    if (rc < 0) return rc;
    d->compute_started = true;
    d->load_work.data = d;
    rc = uv_queue_work(app->loop, &d->load_work, load_work_cb, load_after_cb);
    return rc ? -ERR_STATE : 0;
}

/* --- lifecycle --------------------------------------------------------------------------------- */

int engine_driver_init(struct engine_driver *d, struct app *app) {
    memset(d, 0, sizeof *d);
    d->app = app;
    d->srv.cfg = app->cfg;
    d->srv.state = &app->state;
    d->srv.kick = kick;
    d->srv.driver = d;
    d->srv.seed_state = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 32;
    errno = 0; /* getpriority may return -1 as a level */
    int loop_nice = getpriority(PRIO_PROCESS, (id_t)gettid());
    if (loop_nice == -1 && errno) loop_nice = 0;
    long long nice = loop_nice + app->cfg->compute_nice;
    d->compute_nice = app->cfg->compute_nice >= COMPUTE_THREAD_IDLE ? COMPUTE_THREAD_IDLE : nice > 19 ? 19 : (int)nice;
    if (*app->cfg->model) snprintf(d->model_path, sizeof d->model_path, "%s", app->cfg->model);
    else default_model_path(d->model_path, sizeof d->model_path);
    d->srv.model_path = d->model_path;
    app->load = driver_load;
    app->load_data = d;
    int rc = serving_routes_add(&app->router, &d->srv);
    if (!rc && app->cfg->debug_endpoints)
        rc = router_add(&app->router, "POST", "/debug/slow-step", slow_step_handle, d, 0);
    return rc;
}

void engine_driver_close(struct engine_driver *d) {
    ASSERT(!d->step); /* a step's parts keep the loop running (resume is referenced) */
    if (d->tick_open) {
        uv_close((uv_handle_t *)&d->tick, NULL);
        uv_close((uv_handle_t *)&d->resume, NULL);
    }
    d->tick_open = false;
}

void engine_driver_free(struct engine_driver *d) {
    ASSERT(!d->step);
    if (d->srv.sched) sched_destroy(d->srv.sched);
    d->srv.sched = NULL;
    model_engine_free(d->srv.engine);
    model_engine_free(d->loaded);
    d->srv.engine = d->loaded = NULL;
    if (d->compute_started) compute_thread_stop(&d->compute);
    d->compute_started = false;
}
