/* engine_driver.h: runs an engine (api/serving.h's struct serving_engine_ops: serving_ops for the
 * model and its scheduler) on the libuv loop. It owns only the loop's side: the load's and the
 * steps' work requests, the compute thread they run on, the tick timer and the idle handle that
 * hands a step's output out in parts; what a step is, the engine decides.
 *
 *   loop thread                                    uv threadpool -> compute thread
 *   ───────────                                    ───────────────────────────────
 *   app_start -> app->load ─────────────────────>  ops->load
 *   load_after: ops->start, app_loaded (ready) <───┘
 *   kick (a request came or went) / tick timer
 *     ops->build_step ──────────────────────────>  ops->compute_step
 *     step_after: ops->complete_step           <───┘
 *       (at most STEP_OUTPUTS_PER_ITERATION sequences' output per loop iteration; the rest from
 *       the `resume` idle handle after a poll), then build the next step at once
 *
 * Exactly one step is in flight; while it computes the loop thread keeps serving /health,
 * /metrics and new requests. The threadpool thread of a load or a step hands the work to the
 * compute thread (compute_thread.h) and waits for it, so it reports back at the loop's priority.
 * The model loads at the loop's priority; then, with --compute-nice N > 0, the compute thread and
 * the forward pass's own worker threads (math/pool.h), created by it while loading, go N nice
 * levels below the loop thread (20: under the SCHED_IDLE policy) for every step. The lower they
 * are, the sooner the loop gets a core when a socket is ready, and the less of one they get
 * beside every other process of the machine: 0, the default, keeps them level with the loop
 * (scripts/bench.d/50-serving shows /health while a long prompt computes, 52-neighbours a stream
 * beside CPU-bound neighbours). The tick timer (unreferenced: it never keeps the loop alive)
 * retries building when a step could not be built (e.g. everything waits for memory) and nothing
 * else would wake the driver.
 *
 *   struct engine_driver drv;
 *   engine_driver_init(&drv, &app, &serving_ops, &srv);  // before app_start: sets app.load
 *   srv.kick = engine_driver_kick; srv.driver = &drv;    // the engine wakes the driver
 *   app_start(&app); uv_run(...);
 *   engine_driver_close(&drv);          // after uv_run, before app_close: closes the timer
 *   app_close(&app);                    // runs the loop: requests are cancelled
 *   serving_free(&srv); engine_driver_free(&drv);  // the engine, then the compute thread
 */
#ifndef UVLM_NET_ENGINE_DRIVER_H
#define UVLM_NET_ENGINE_DRIVER_H

#include <stdbool.h>
#include <uv.h>

#include "api/router.h"
#include "api/serving.h"
#include "net/compute_thread.h"
#include "net/server.h"

struct engine_driver {
    struct app *app;
    const struct serving_engine_ops *ops;
    void *engine;            /* given to every op */
    /* loading (threadpool, then the compute thread) */
    uv_work_t load_work;
    int load_rc;
    int compute_nice;        /* nice level of the compute threads (the loop's + --compute-nice), or COMPUTE_THREAD_IDLE */
    struct compute_thread compute; /* runs the load and every step (started by the load) */
    bool compute_started;
    bool started;            /* ops->start succeeded: steps may be built */
    /* steps */
    uv_timer_t tick;
    uv_idle_t resume;        /* active while a completed step's output is handed out in parts */
    bool tick_open;          /* tick and resume are initialized (closed by engine_driver_close) */
    uv_work_t step_work;
    bool step_in_flight;     /* built, and not completed yet */
    /* --debug-endpoints only: POST /debug/slow-step?ms=N makes the next step's compute sleep N ms
     * first (a hung engine, for the /health "stalled" test). Loop thread: slow_next_ms; it moves
     * to step_sleep_ms when a step is built, which the worker reads (queued after the write). */
    long long slow_next_ms, step_sleep_ms;
};

/* Sets app->load: the load starts when the app starts. ops and engine must outlive the driver. */
void engine_driver_init(struct engine_driver *d, struct app *app, const struct serving_engine_ops *ops,
                        void *engine);
/* Build a step soon (driver: the struct engine_driver). Loop thread. */
void engine_driver_kick(void *driver);
/* POST /debug/slow-step (for --debug-endpoints). 0 or router_add's error. */
int engine_driver_routes_add(struct engine_driver *d, struct router *r);
void engine_driver_close(struct engine_driver *d);
/* Stops the compute thread. */
void engine_driver_free(struct engine_driver *d);

#endif
