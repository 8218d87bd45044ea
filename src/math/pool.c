/* pool.c: worker threads parked on a futex, woken by bumping a generation counter. */
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

struct worker {
    struct pool *pool;
    int ith;
    pthread_t thread;
};

struct pool {
    int n_threads;
    int n_started; /* workers actually running (for cleanup after a failed create) */
    struct worker *workers; /* n_threads - 1 */

    /* The current job; written by the caller before it bumps `generation`. */
    pool_job_fn run;
    void *job;

    _Atomic uint32_t generation; /* the futex word: bumped once per job */
    _Atomic int n_pending;       /* workers that have not finished the current job */
    _Atomic int n_sleeping;      /* workers in (or about to enter) futex_wait */
    _Atomic bool stop;
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

/* Wait until the generation differs from `seen`; returns the new one. */
static uint32_t wait_for_job(struct pool *p, uint32_t seen) {
    int64_t deadline = 0;
    for (unsigned spins = 1;; spins++) {
        uint32_t g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g != seen) return g;
        cpu_relax();
        if (spins % 256) continue;
        int64_t now = now_ns();
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
    struct worker *w = arg;
    struct pool *p = w->pool;
    uint32_t seen = 0;
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load(&p->stop)) break;
        p->run(p->job, w->ith, p->n_threads);
        atomic_fetch_sub_explicit(&p->n_pending, 1, memory_order_release);
    }
    return NULL;
}

static void post(struct pool *p, pool_job_fn run, void *job) {
    p->run = run;
    p->job = job;
    atomic_store(&p->n_pending, p->n_started);
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->n_sleeping) > 0) futex_wake_all(&p->generation);
}

static void wait_done(struct pool *p) {
    for (unsigned spins = 1; atomic_load_explicit(&p->n_pending, memory_order_acquire) > 0; spins++) {
        cpu_relax();
        if (spins % 4096 == 0) sched_yield(); /* a worker may have been preempted */
    }
}

int pool_create(struct pool **out, int n_threads) {
    *out = NULL;
    if (n_threads < 1) return -ERR_INVAL;
    struct pool *p = calloc(1, sizeof *p);
    if (!p) return -ERR_NOMEM;
    p->n_threads = n_threads;
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->workers) {
        free(p);
        return -ERR_NOMEM;
    }
    for (int i = 1; i < n_threads; i++) {
        struct worker *w = &p->workers[i - 1];
        w->pool = p;
        w->ith = i;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
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
    for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i].thread, NULL);
    free(p->workers);
    free(p);
}

int pool_n_threads(const struct pool *p) { return p->n_threads; }

void pool_run(struct pool *p, pool_job_fn run, void *job) {
    if (p->n_started == 0) {
        run(job, 0, 1);
        return;
    }
    post(p, run, job);
    run(job, 0, p->n_threads);
    wait_done(p);
}
