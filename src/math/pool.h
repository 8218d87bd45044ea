/* pool.h: a fixed pool of worker threads that run one job at a time together with the caller
 * (private to src/math; matmul.h's struct compute is built on it).
 *
 * pool_run(p, run, job) calls run(job, ith, nth) once for every ith in [0, nth) (nth = the
 * pool's thread count), ith 0 on the calling thread, and returns when all have returned. Between
 * jobs the workers spin for a short while (a decode step posts hundreds of jobs back to back;
 * waking a sleeping thread costs tens of microseconds) and then sleep on a futex.
 *
 *   struct pool *p;
 *   if (pool_create(&p, 4) < 0) ...;
 *   pool_run(p, scale_rows, &job);
 *   pool_destroy(p);
 */
#ifndef UVLM_MATH_POOL_H
#define UVLM_MATH_POOL_H

struct pool;

typedef void (*pool_job_fn)(void *job, int ith, int nth);

/* 0, -ERR_INVAL (n_threads < 1) or -ERR_NOMEM (allocation or thread creation failed). */
int pool_create(struct pool **out, int n_threads);
/* Stops and joins the workers. */
void pool_destroy(struct pool *p);
int pool_n_threads(const struct pool *p);
/* Not reentrant: one pool_run at a time, never from inside a job. */
void pool_run(struct pool *p, pool_job_fn run, void *job);

#endif
