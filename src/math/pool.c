/* pool.c: worker threads parked on a futex, woken by bumping a generation counter.
 *
 * Joining a job is a handshake that lets late workers stay out: a worker that saw generation g
 * registers in `active`, then runs the job only if g is still current and not yet closed. The
 * caller, when its own run returns (all work items are claimed), closes g and waits until
 * `active` is 0. Both sides write then read seq_cst, so either the worker sees the close (and
 * skips) or the caller sees the worker (and waits for it); the job, on the caller's stack, is
 * never touched after pool_run returns.
 */
#include "math/pool.h"
#include "common/err.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How long an idle worker spins before it sleeps: longer than the gap between two matmuls of a
 * decode step (a norm, a rope), far shorter than the gap between steps of an idle server. */
#define SPIN_NS 200000

struct pool {
    int n_threads;
    int n_started;        /* workers running (fewer than n_threads - 1 after a failed create) */
    pthread_t *threads;

    /* The current job; written by the caller before it bumps `generation`. */
    pool_job_fn run;
    void *job;

    _Atomic uint32_t generation; /* the futex word: bumped once per job */
    _Atomic uint32_t closed;     /* the last generation whose work is all handed out */
    _Atomic int active;          /* workers inside the join handshake or the job */
    _Atomic int n_sleeping;      /* workers in (or about to enter) futex_wait */
    _Atomic bool stop;
    _Atomic bool running; /* a pool_run is in progress: catches a job that calls pool_run */
    _Atomic int64_t yield_ns;    /* pool_set_yield_ns; 0: never */
    int64_t caller_yielded_at;   /* when pool_run's caller last yielded (one caller at a time) */
};

static void futex_wait(_Atomic uint32_t *addr, uint32_t val) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* sched_yield() when this thread has run yield_ns since *yielded_at (pool_set_yield_ns). */
static void maybe_yield(const struct pool *p, int64_t *yielded_at, int64_t now) {
    int64_t every = atomic_load_explicit(&p->yield_ns, memory_order_relaxed);
    if (every <= 0) return;
    if (!now) now = now_ns();
    if (now - *yielded_at < every) return;
    sched_yield();
    *yielded_at = now;
}

/* Wait until the generation differs from `seen`; returns the new one. */
static uint32_t wait_for_job(struct pool *p, uint32_t seen, int64_t *yielded_at) {
    int64_t deadline = 0;
    for (unsigned spins = 1;; spins++) {
        uint32_t g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g != seen) return g;
        cpu_relax();
        if (spins % 256) continue;
        int64_t now = now_ns();
        maybe_yield(p, yielded_at, now);
        if (!deadline) {
            deadline = now + SPIN_NS;
        } else if (now > deadline) {
            /* Announce the sleep before re-checking: the poster bumps the generation and then
             * reads n_sleeping (both seq_cst), so either we see its bump or it sees us. */
            atomic_fetch_add(&p->n_sleeping, 1);
            if (atomic_load(&p->generation) == seen) futex_wait(&p->generation, seen);
            atomic_fetch_sub(&p->n_sleeping, 1);
            deadline = 0;
        }
    }
}

static void *worker_main(void *arg) {
    struct pool *p = arg;
    uint32_t seen = 0;
    int64_t yielded_at = 0;
    for (;;) {
        maybe_yield(p, &yielded_at, 0);
        seen = wait_for_job(p, seen, &yielded_at);
        if (atomic_load(&p->stop)) break;
        atomic_fetch_add(&p->active, 1);
        if (atomic_load(&p->generation) == seen && atomic_load(&p->closed) != seen) p->run(p->job);
        atomic_fetch_sub_explicit(&p->active, 1, memory_order_release);
    }
    return NULL;
}

static void post(struct pool *p, pool_job_fn run, void *job) {
    p->run = run;
    p->job = job;
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->n_sleeping) > 0) futex_wake_all(&p->generation);
}

int pool_create(struct pool **out, int n_threads) {
    *out = NULL;
    if (n_threads < 1) return -ERR_INVAL;
    struct pool *p = calloc(1, sizeof *p);
    if (!p) return -ERR_NOMEM;
    p->n_threads = n_threads;
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return -ERR_NOMEM;
    }
    for (int i = 0; i < n_threads - 1; i++) {
        if (pthread_create(&p->threads[i], NULL, worker_main, p) != 0) {
            pool_destroy(p);
            return -ERR_NOMEM;
        }
        p->n_started++;
    }
    *out = p;
    return 0;
}

void pool_destroy(struct pool *p) {
    if (!p) return;
    atomic_store(&p->stop, true);
    post(p, NULL, NULL);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    free(p);
}

int pool_n_threads(const struct pool *p) { return p->n_threads; }

void pool_set_yield_ns(struct pool *p, int64_t ns) { atomic_store(&p->yield_ns, ns > 0 ? ns : 0); }

void pool_run_alone(struct pool *p, pool_job_fn run, void *job) {
    maybe_yield(p, &p->caller_yielded_at, 0);
    run(job);
}

void pool_run(struct pool *p, pool_job_fn run, void *job) {
    if (p->n_started == 0) {
        pool_run_alone(p, run, job);
        return;
    }
    /* A nested pool_run would overwrite the job the workers are reading: refuse it loudly. */
    bool nested = atomic_exchange(&p->running, true);
    ASSERT(!nested);
    maybe_yield(p, &p->caller_yielded_at, 0);
    post(p, run, job);
    run(job);
    atomic_store(&p->closed, atomic_load_explicit(&p->generation, memory_order_relaxed));
    for (unsigned spins = 1; atomic_load(&p->active) > 0; spins++) {
        cpu_relax();
        if (spins % 4096 == 0) sched_yield(); /* a worker inside the job may be preempted */
    }
    atomic_store(&p->running, false);
}
