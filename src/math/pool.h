/* pool.h: a fixed pool of worker threads that help the calling thread with one job at a time
 * (private to src/math; matmul.h's struct compute is built on it).
 *
 * pool_run(p, run, job) calls run(job) on the calling thread and on every worker that is awake
 * to join in, and returns when all these calls have returned. A job therefore hands out its own
 * work items (an atomic counter in the job) and must be correct whoever takes which item: on a
 * busy machine a preempted worker simply misses the job instead of holding up the caller.
 * Between jobs the workers spin for a short while (a decode step posts hundreds of jobs back to
 * back; waking a sleeping thread costs tens of microseconds) and then sleep on a futex.
 *
 *   struct pool *p;
 *   if (pool_create(&p, 4) < 0) ...;
 *   pool_run(p, scale_rows, &job);    // scale_rows claims rows from job.next until none left
 *   pool_destroy(p);
 */
#ifndef UVLM_MATH_POOL_H
#define UVLM_MATH_POOL_H

#include <stdint.h>

struct pool;

typedef void (*pool_job_fn)(void *job);

/* n_threads counts the caller: n_threads - 1 workers are started.
 * 0, -ERR_INVAL (n_threads < 1) or -ERR_NOMEM (allocation or thread creation failed). */
int pool_create(struct pool **out, int n_threads);
/* Stops and joins the workers. */
void pool_destroy(struct pool *p);
int pool_n_threads(const struct pool *p);
/* Not reentrant: one pool_run at a time, never from inside a job. */
void pool_run(struct pool *p, pool_job_fn run, void *job);
/* Every thread of the pool (pool_run's caller included) offers its CPU with sched_yield() where a
 * job starts, and while it waits for one, once it has run `ns` since it last did; 0 (the default):
 * never. Why: on Linux's fair scheduler (EEVDF) a woken thread that is not yet "eligible" waits
 * behind a busy thread of a lower-priority policy (SCHED_IDLE, high nice) until the next tick
 * (4 ms at HZ 250) unless that thread reschedules itself; a yield every 100 us or so makes such
 * late wake-ups rare, for about a microsecond per yield. Call before pool_run, not during. */
void pool_set_yield_ns(struct pool *p, int64_t ns);
/* run(job) on the calling thread alone, no worker woken (a job too small to share): a job start
 * all the same, so the same yield point as pool_run's (pool_set_yield_ns). Same rules as pool_run. */
void pool_run_alone(struct pool *p, pool_job_fn run, void *job);

#endif
