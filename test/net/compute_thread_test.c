/* compute_thread: calls run on the thread (not the caller's), one after the other, each
 * returning only after its function did; the thread puts itself at the requested nice level. */
#include "net/compute_thread.h"
#include "test.h"

#include <errno.h>
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

TEST(compute_thread_runs_calls_on_its_own_thread_at_its_nice_level) {
    errno = 0;
    int base = getpriority(PRIO_PROCESS, (id_t)gettid());
    CHECK(errno == 0);
    if (base + 3 > 19) SKIP("the runner runs at nice 17 or more: no room below it");
    struct compute_thread ct;
    CHECK_EQ_INT(compute_thread_start(&ct, base + 3), 0);
    struct probe p = {0};
    for (int i = 0; i < 5; i++) compute_thread_call(&ct, record, &p);
    CHECK_EQ_INT(p.calls, 5); /* each call returned after its function had run */
    CHECK(p.tid != gettid());
    CHECK_EQ_INT(p.nice, base + 3);
    CHECK_EQ_INT(ct.nice_rc, 0);
    CHECK_EQ_INT(getpriority(PRIO_PROCESS, (id_t)gettid()), base); /* the caller keeps its level */
    compute_thread_stop(&ct);
}

TEST(compute_thread_never_raises_its_priority_above_the_callers) {
    errno = 0;
    int base = getpriority(PRIO_PROCESS, (id_t)gettid());
    struct compute_thread ct;
    CHECK_EQ_INT(compute_thread_start(&ct, base - 1 < -20 ? -20 : base - 1), 0); /* asks for more: ignored */
    struct probe p = {0};
    compute_thread_call(&ct, record, &p);
    CHECK_EQ_INT(p.nice, base);
    compute_thread_stop(&ct);
}

TEST(compute_thread_idle_runs_calls_under_sched_idle) {
    struct compute_thread ct;
    CHECK_EQ_INT(compute_thread_start(&ct, COMPUTE_THREAD_IDLE), 0);
    struct probe p = {0};
    compute_thread_call(&ct, record, &p);
    CHECK_EQ_INT(ct.nice_rc, 0);
    CHECK_EQ_INT(p.policy, SCHED_IDLE);
    CHECK_EQ_INT(sched_getscheduler(0), SCHED_OTHER); /* the caller's stays */
    compute_thread_stop(&ct);
}
