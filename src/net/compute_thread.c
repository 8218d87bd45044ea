#include "net/compute_thread.h"

#include "common/err.h"

#include <errno.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

static void *thread_main(void *arg) {
    struct compute_thread *ct = arg;
    errno = 0; /* getpriority may return -1 as a level */
    int now = getpriority(PRIO_PROCESS, (id_t)gettid());
    int rc = 0;
    if (ct->nice >= COMPUTE_THREAD_IDLE) {
        if (sched_setscheduler(0, SCHED_IDLE, &(struct sched_param){0}) < 0) rc = -errno; /* 0: this thread */
    } else if ((now != -1 || !errno) && ct->nice > now && setpriority(PRIO_PROCESS, (id_t)gettid(), ct->nice) < 0) {
        rc = -errno;
    }
    pthread_mutex_lock(&ct->mu);
    ct->nice_rc = rc;
    for (;;) {
        while (!ct->fn && !ct->stop) pthread_cond_wait(&ct->cv, &ct->mu);
        if (!ct->fn) break; /* stop, nothing posted */
        void (*fn)(void *) = ct->fn;
        pthread_mutex_unlock(&ct->mu);
        fn(ct->arg);
        pthread_mutex_lock(&ct->mu);
        ct->fn = NULL; /* done: the caller waits for this */
        pthread_cond_broadcast(&ct->cv);
    }
    pthread_mutex_unlock(&ct->mu);
    return NULL;
}

int compute_thread_start(struct compute_thread *ct, int nice) {
    *ct = (struct compute_thread){.nice = nice};
    if (pthread_mutex_init(&ct->mu, NULL)) return -ERR_NOMEM;
    if (pthread_cond_init(&ct->cv, NULL)) {
        pthread_mutex_destroy(&ct->mu);
        return -ERR_NOMEM;
    }
    if (pthread_create(&ct->thread, NULL, thread_main, ct)) {
        pthread_cond_destroy(&ct->cv);
        pthread_mutex_destroy(&ct->mu);
        return -ERR_NOMEM;
    }
    return 0;
}

void compute_thread_call(struct compute_thread *ct, void (*fn)(void *arg), void *arg) {
    pthread_mutex_lock(&ct->mu);
    ASSERT(!ct->fn && !ct->stop); /* one call at a time */
    ct->fn = fn;
    ct->arg = arg;
    pthread_cond_broadcast(&ct->cv);
    while (ct->fn) pthread_cond_wait(&ct->cv, &ct->mu); /* one call at a time: fn is ours until cleared */
    pthread_mutex_unlock(&ct->mu);
}

void compute_thread_stop(struct compute_thread *ct) {
    pthread_mutex_lock(&ct->mu);
    ASSERT(!ct->fn);
    ct->stop = true;
    pthread_cond_broadcast(&ct->cv);
    pthread_mutex_unlock(&ct->mu);
    pthread_join(ct->thread, NULL);
    pthread_cond_destroy(&ct->cv);
    pthread_mutex_destroy(&ct->mu);
}
