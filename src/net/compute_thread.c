#include "net/compute_thread.h"

#include "common/err.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

/* The ids of the process's threads (/proc/self/task), sorted; *out is malloc'd (NULL when none
 * could be read: then nothing counts as created). */
static size_t list_tids(pid_t **out) {
    *out = NULL;
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        if (n == cap) {
            pid_t *p = realloc(*out, (cap = cap ? 2 * cap : 64) * sizeof *p);
            if (!p) break;
            *out = p;
        }
        (*out)[n++] = (pid_t)atoi(e->d_name);
    }
    closedir(d);
    for (size_t i = 1; i < n; i++) /* insertion sort: a few threads per core */
        for (size_t j = i; j > 0 && (*out)[j - 1] > (*out)[j]; j--) {
            pid_t t = (*out)[j];
            (*out)[j] = (*out)[j - 1];
            (*out)[j - 1] = t;
        }
    return n;
}

static bool has_tid(const pid_t *v, size_t n, pid_t tid) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v[mid] == tid) return true;
        if (v[mid] < tid) lo = mid + 1;
        else hi = mid;
    }
    return false;
}

/* Put thread tid at the compute priority: SCHED_IDLE, or `nice` when that is below its level.
 * 0, or -errno (a thread that has exited meanwhile counts as done). */
static int lower_thread(pid_t tid, int nice) {
    int rc = 0;
    if (nice >= COMPUTE_THREAD_IDLE) {
        if (sched_setscheduler(tid, SCHED_IDLE, &(struct sched_param){0}) < 0) rc = -errno;
    } else {
        errno = 0; /* getpriority may return -1 as a level */
        int now = getpriority(PRIO_PROCESS, (id_t)tid);
        if (now == -1 && errno) rc = -errno;
        else if (nice > now && setpriority(PRIO_PROCESS, (id_t)tid, nice) < 0) rc = -errno;
    }
    return rc == -ESRCH ? 0 : rc;
}

/* On the thread: fn at the current priority, then (lower_after) this thread and those created
 * meanwhile at the compute priority. */
static void run(struct compute_thread *ct, void (*fn)(void *), void *arg, bool lower_after) {
    pid_t *before = NULL, *after = NULL;
    size_t n_before = lower_after ? list_tids(&before) : 0;
    fn(arg);
    if (!lower_after) return;
    int rc = lower_thread(gettid(), ct->nice), n = 1;
    size_t n_after = before ? list_tids(&after) : 0;
    for (size_t i = 0; i < n_after; i++) {
        if (after[i] == gettid() || has_tid(before, n_before, after[i])) continue;
        int r = lower_thread(after[i], ct->nice);
        if (r < 0 && rc == 0) rc = r;
        n++;
    }
    free(before);
    free(after);
    ct->nice_rc = rc;
    ct->n_lowered = n;
}

static void *thread_main(void *arg) {
    struct compute_thread *ct = arg;
    pthread_mutex_lock(&ct->mu);
    for (;;) {
        while (!ct->fn && !ct->stop) pthread_cond_wait(&ct->cv, &ct->mu);
        if (!ct->fn) break; /* stop, nothing posted */
        void (*fn)(void *) = ct->fn;
        bool lower_after = ct->lower_after;
        pthread_mutex_unlock(&ct->mu);
        run(ct, fn, ct->arg, lower_after);
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

static void post(struct compute_thread *ct, void (*fn)(void *arg), void *arg, bool lower_after) {
    pthread_mutex_lock(&ct->mu);
    ASSERT(!ct->fn && !ct->stop); /* one call at a time */
    ct->fn = fn;
    ct->arg = arg;
    ct->lower_after = lower_after;
    pthread_cond_broadcast(&ct->cv);
    while (ct->fn) pthread_cond_wait(&ct->cv, &ct->mu); /* one call at a time: fn is ours until cleared */
    pthread_mutex_unlock(&ct->mu);
}

void compute_thread_load(struct compute_thread *ct, void (*fn)(void *arg), void *arg) {
    post(ct, fn, arg, true);
}

void compute_thread_call(struct compute_thread *ct, void (*fn)(void *arg), void *arg) {
    post(ct, fn, arg, false);
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
