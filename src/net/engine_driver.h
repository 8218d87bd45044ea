/* engine_driver.h: runs the scheduler (sched.h) on the libuv loop. The glue between the HTTP
 * server (server.h) and the serving engine; the only serving file that includes uv.h.
 *
 *   loop thread                                    uv threadpool
 *   ───────────                                    ─────────────
 *   app_start -> app->load ─────────────────────>  model_engine_load (map, size memory, buffers)
 *   load_after: sched_create, app_loaded (ready) <─┘
 *   kick (a request came or went) / tick timer
 *     sched_build_step ─────────────────────────>  sched_step_compute (forward + sampling)
 *     step_after: sched_step_complete_some    <─┘
 *       (sink callbacks stream tokens, at most STEP_OUTPUTS_PER_ITERATION sequences' per loop
 *       iteration; the rest from the `resume` idle handle after a poll), then build the next
 *       step at once
 *
 * Exactly one step is in flight; while it computes the loop thread keeps serving /health,
 * /metrics and new requests. The threadpool thread of a load or a step hands the work to the
 * compute thread (compute_thread.h) and waits for it, so it reports back at the loop's priority.
 * With --compute-nice N > 0, the compute thread runs N nice levels below the loop thread (20: under
 * the SCHED_IDLE policy), and the forward pass's own worker threads (math/pool.h), created by it
 * while loading, inherit that. The loop then preempts them as soon as a socket is ready instead of waiting out their
 * time slice; the price is that they also yield to every other process of the machine (0, the
 * default, changes nothing). The tick timer (unreferenced: it never keeps the loop alive) retries
 * building when a step could not be built (e.g. everything waits for memory) and nothing else
 * would wake the driver.
 *
 *   struct engine_driver drv;
 *   engine_driver_init(&drv, &app);     // before app_start: sets app.load, adds every route
 *   app_start(&app); uv_run(...);
 *   engine_driver_close(&drv);          // after uv_run, before app_close: closes the timer
 *   app_close(&app);                    // runs the loop: requests are cancelled
 *   engine_driver_free(&drv);           // scheduler and model
 */
#ifndef UVLM_NET_ENGINE_DRIVER_H
#define UVLM_NET_ENGINE_DRIVER_H

#include <limits.h>
#include <stdbool.h>
#include <uv.h>

#include "api/serving.h"
#include "net/compute_thread.h"
#include "net/server.h"
#include "sched/model_engine.h"

/* Served when --model is empty; looked up in the working directory, then next to the binary. */
#define ENGINE_DEFAULT_MODEL "models/kjv-tiny-q8_0.gguf"

struct engine_driver {
    struct app *app;
    struct serving srv;
    char model_path[PATH_MAX];
    /* loading (threadpool) */
    uv_work_t load_work;
    struct model_engine_config ec;
    struct model_engine *loaded;
    int load_rc;
    char load_why[256];
    int compute_nice;        /* nice level of the compute threads (the loop's + --compute-nice), or COMPUTE_THREAD_IDLE */
    struct compute_thread compute; /* runs the load and every step (started by the load) */
    bool compute_started;
    /* steps */
    uv_timer_t tick;
    uv_idle_t resume;        /* active while a completed step's output is handed out in parts */
    bool tick_open;          /* tick and resume are initialized (closed by engine_driver_close) */
    uv_work_t step_work;
    struct sched_step *step; /* in flight, or NULL */
    double step_built_ms;    /* when it was built (for the debug log line per step) */
    /* --debug-endpoints only: POST /debug/slow-step?ms=N makes the next step's compute sleep N ms
     * first (a hung engine, for the /health "stalled" test). Loop thread: slow_next_ms; it moves
     * to step_sleep_ms when a step is built, which the worker reads (queued after the write). */
    long long slow_next_ms, step_sleep_ms;
};

/* 0, or -ERR_NOMEM when the route table is full. */
int engine_driver_init(struct engine_driver *d, struct app *app);
void engine_driver_close(struct engine_driver *d);
void engine_driver_free(struct engine_driver *d);

#endif
