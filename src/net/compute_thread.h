/* compute_thread.h: one long-lived thread that runs the model work (loading, every step), for uv
 * threadpool work callbacks that wait for it; the steps run at the compute threads' priority.
 *
 * Why not compute on the threadpool thread itself: libuv (1.44, Debian 12's) reports a finished
 * work item with uv_async_send from the threadpool thread, and the loop thread, woken by that
 * very send, spins (pause x 997, then sched_yield, again) until the sender has marked the send
 * done. A sender niced below the loop (--compute-nice) and preempted inside that window is not
 * handed the CPU back by sched_yield, so the loop would spin for milliseconds with sockets waiting
 * (scripts/soak --connections 500 -- --compute-nice 10 prints where the loop's CPU time goes,
 * from /debug/stats). So the threadpool threads keep the loop's priority and only wait here; the
 * compute runs on this thread and on the forward pass's own workers (math/pool.h), which it
 * creates while loading.
 *
 * Priority: the thread starts at its creator's (the loop's) level and loads the model there, so
 * that a busy machine does not stretch the load (reading and repacking the weights, the warm-up
 * forward) the way it stretches steps. compute_thread_load then puts the thread, and every thread
 * created during the load (the forward pass's workers), at the compute priority; every later call
 * (a step) runs there. Linux lets a thread lower its own and its siblings' priority, never raise
 * it again without privileges, hence this order.
 *
 * Ownership: the caller owns the struct (it must not move while started). One call at a time
 * (the engine has one load or one step in flight); fn runs on this thread, never concurrently
 * with another fn.
 *
 *   struct compute_thread ct;
 *   if (compute_thread_start(&ct, 10) < 0) ...;   // compute priority: nice level (0..19, absolute), or COMPUTE_THREAD_IDLE
 *   compute_thread_load(&ct, load, arg);          // in a uv work callback: load(arg) at the caller's priority,
 *                                                 // then this thread and those load created go to nice 10
 *   compute_thread_call(&ct, step, arg);          // in a uv work callback: step(arg) at nice 10
 *   compute_thread_stop(&ct);                     // joins (no call in progress)
 */
#ifndef UVLM_NET_COMPUTE_THREAD_H
#define UVLM_NET_COMPUTE_THREAD_H

#include <pthread.h>
#include <stdbool.h>

struct compute_thread {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* signalled when `fn` is posted, when it is done and at stop */
    void (*fn)(void *arg);  /* posted work, until it has returned; NULL when none (under mu) */
    void *arg;
    bool stop;              /* under mu */
    bool lower_after;       /* compute_thread_load's call: lower the priorities once fn returned */
    int nice;               /* the compute priority, or COMPUTE_THREAD_IDLE */
    int nice_rc;            /* 0, or -errno of the first setpriority/sched_setscheduler that failed
                             * (read after compute_thread_load) */
    int n_lowered;          /* threads put at the compute priority: this one and the load's */
};

/* A `nice` of COMPUTE_THREAD_IDLE asks for the SCHED_IDLE policy instead of a nice level: the
 * threads run only when no other thread wants the CPU, and a CPU running only such threads counts
 * as idle when the kernel places a waking thread (the loop, a client). */
#define COMPUTE_THREAD_IDLE 20

/* Starts the thread at the caller's priority; `nice` is the compute priority compute_thread_load
 * puts it at. 0 or -ERR_NOMEM. */
int compute_thread_start(struct compute_thread *ct, int nice);
/* Runs fn(arg) on the thread at its starting priority, then puts the thread and every thread of the
 * process created while fn ran at the compute priority: the nice level when it is below theirs,
 * or the SCHED_IDLE policy (a failure, e.g. under a seccomp filter, leaves them where they are:
 * only latency depends on it; see nice_rc). Returns after both. */
void compute_thread_load(struct compute_thread *ct, void (*fn)(void *arg), void *arg);
/* Runs fn(arg) on the thread and returns after it has returned. */
void compute_thread_call(struct compute_thread *ct, void (*fn)(void *arg), void *arg);
/* Stops and joins the thread. No call may be in progress. */
void compute_thread_stop(struct compute_thread *ct);

#endif
