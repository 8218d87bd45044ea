/* compute_thread: calls run on the thread (not the caller's), one after the other, each
 * returning only after its function did; the load runs at the caller's priority, then the thread
 * and the threads the load created go to the compute priority, where every later call runs. */
#include "net/compute_thread.h"
#include "test.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

struct probe {
    pid_t tid;  /* the thread fn ran on */
    int nice;   /* its nice level then */
    int policy; /* and its scheduling policy */
    int calls;
};

static void record(void *arg) {
    struct probe *p = arg;
    usleep(2000); /* the caller must wait for this, not return early */
    p->tid = gettid();
    errno = 0;
    p->nice = getpriority(PRIO_PROCESS, (id_t)p->tid);
    p->policy = sched_getscheduler(0);
    p->calls++;
}

/* A load: records, and starts a helper thread (as the forward pass's pool) that lives on until
 * told to stop, so its priority can be read afterwards. */
struct load {
    struct probe p;
    pthread_t helper;
    pid_t helper_tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
};

static void *helper_main(void *arg) {
    struct load *l = arg;
    pthread_mutex_lock(&l->mu);
    l->helper_tid = gettid();
    pthread_cond_broadcast(&l->cv);
    while (!l->stop) pthread_cond_wait(&l->cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void load_fn(void *arg) {
    struct load *l = arg;
    record(&l->p);
    pthread_create(&l->helper, NULL, helper_main, l);
    pthread_mutex_lock(&l->mu);
    while (!l->helper_tid) pthread_cond_wait(&l->cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
}

static void load_init(struct load *l) {
    *l = (struct load){0};
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
}

static void load_end(struct load *l) {
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->helper, NULL);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
}

TEST(compute_thread_loads_at_the_callers_level_then_computes_at_its_nice_level) {
    errno = 0;
    int base = getpriority(PRIO_PROCESS, (id_t)gettid());
    CHECK(errno == 0);
    if (base + 3 > 19) SKIP("the runner runs at nice 17 or more: no room below it");
    struct compute_thread ct;
    CHECK_EQ_INT(compute_thread_start(&ct, base + 3), 0);
    struct load l;
    load_init(&l);
    compute_thread_load(&ct, load_fn, &l);
    CHECK_EQ_INT(l.p.calls, 1);
    CHECK(l.p.tid != gettid());
    CHECK_EQ_INT(l.p.nice, base); /* the load: at the caller's level */
    CHECK_EQ_INT(ct.nice_rc, 0);
    CHECK_EQ_INT(ct.n_lowered, 2); /* the thread and its helper */
    errno = 0;
    CHECK_EQ_INT(getpriority(PRIO_PROCESS, (id_t)l.helper_tid), base + 3);
    struct probe p = {0};
    for (int i = 0; i < 5; i++) compute_thread_call(&ct, record, &p);
    CHECK_EQ_INT(p.calls, 5); /* each call returned after its function had run */
    CHECK_EQ_INT(p.tid, l.p.tid);
    CHECK_EQ_INT(p.nice, base + 3);
    CHECK_EQ_INT(getpriority(PRIO_PROCESS, (id_t)gettid()), base); /* the caller keeps its level */
    load_end(&l);
    compute_thread_stop(&ct);
}

TEST(compute_thread_never_raises_its_priority_above_the_callers) {
    errno = 0;
    int base = getpriority(PRIO_PROCESS, (id_t)gettid());
    struct compute_thread ct;
    CHECK_EQ_INT(compute_thread_start(&ct, base - 1 < -20 ? -20 : base - 1), 0); /* asks for more: ignored */
    struct probe p = {0};
    compute_thread_load(&ct, record, &p);
    compute_thread_call(&ct, record, &p);
    CHECK_EQ_INT(p.nice, base);
    CHECK_EQ_INT(ct.nice_rc, 0);
    compute_thread_stop(&ct);
}

TEST(compute_thread_idle_loads_normally_then_computes_under_sched_idle) {
    struct compute_thread ct;
    CHECK_EQ_INT(compute_thread_start(&ct, COMPUTE_THREAD_IDLE), 0);
    struct load l;
    load_init(&l);
    compute_thread_load(&ct, load_fn, &l);
    CHECK_EQ_INT(l.p.policy, SCHED_OTHER);
    CHECK_EQ_INT(ct.nice_rc, 0);
    CHECK_EQ_INT(sched_getscheduler(l.helper_tid), SCHED_IDLE);
    struct probe p = {0};
    compute_thread_call(&ct, record, &p);
    CHECK_EQ_INT(p.policy, SCHED_IDLE);
    CHECK_EQ_INT(sched_getscheduler(0), SCHED_OTHER); /* the caller's stays */
    load_end(&l);
    compute_thread_stop(&ct);
}
