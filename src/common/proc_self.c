/* proc_self.c: see proc_self.h. */
#include "common/proc_self.h"

#include "common/err.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

int proc_self_parse_stat(const char *stat, size_t len, double boot_epoch, long ticks_per_s, long page_size,
                         struct proc_self *out) {
    /* "pid (comm) state ppid ...": comm may hold spaces and parentheses, so the fields start
     * after the last ')'; from there, field 3 (state) is the first */
    const char *end = stat + len, *p = end;
    while (p > stat && p[-1] != ')') p--;
    if (p == stat || ticks_per_s <= 0 || page_size <= 0) return -ERR_FORMAT;
    unsigned long long utime = 0, stime = 0, start = 0, vsize = 0;
    long long rss = 0;
    int field = 2;
    while (p < end && field < 24) {
        while (p < end && *p == ' ') p++;
        if (p == end) break;
        field++;
        char *num_end;
        const char *tok = p;
        while (p < end && *p != ' ') p++;
        if (field == 14 || field == 15 || field == 22 || field == 23 || field == 24) {
            char buf[32];
            size_t n = (size_t)(p - tok);
            if (n == 0 || n >= sizeof buf) return -ERR_FORMAT;
            memcpy(buf, tok, n);
            buf[n] = '\0';
            unsigned long long v = strtoull(buf, &num_end, 10);
            if (*num_end) return -ERR_FORMAT;
            if (field == 14) utime = v;
            else if (field == 15) stime = v;
            else if (field == 22) start = v;
            else if (field == 23) vsize = v;
            else rss = (long long)v;
        }
    }
    if (field < 24) return -ERR_FORMAT;
    out->cpu_seconds = (double)(utime + stime) / (double)ticks_per_s;
    out->start_time_seconds = boot_epoch + (double)start / (double)ticks_per_s;
    out->virtual_bytes = (int64_t)vsize;
    out->resident_bytes = (int64_t)rss * page_size;
    return 0;
}

/* Read a small /proc file whole; its length, or -1. */
static ssize_t read_small(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = 0;
    for (;;) {
        ssize_t k = read(fd, buf + n, cap - 1 - n);
        if (k <= 0) break;
        n += (size_t)k;
        if (n == cap - 1) break;
    }
    close(fd);
    buf[n] = '\0';
    return (ssize_t)n;
}

int proc_self_read(struct proc_self *out) {
    memset(out, 0, sizeof *out);
    char stat[1024];
    ssize_t n = read_small("/proc/self/stat", stat, sizeof stat);
    /* the process's start is counted in ticks since boot: boot's epoch time is now's less the
     * time since boot (suspends included, as in the start ticks) */
    struct timespec real, boot;
    if (n <= 0 || clock_gettime(CLOCK_REALTIME, &real) != 0 || clock_gettime(CLOCK_BOOTTIME, &boot) != 0)
        return -ERR_IO;
    double boot_epoch = (double)(real.tv_sec - boot.tv_sec) + (double)(real.tv_nsec - boot.tv_nsec) / 1e9;
    if (proc_self_parse_stat(stat, (size_t)n, boot_epoch, sysconf(_SC_CLK_TCK), sysconf(_SC_PAGESIZE), out) != 0) {
        memset(out, 0, sizeof *out);
        return -ERR_IO;
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        for (struct dirent *e; (e = readdir(d));)
            if (e->d_name[0] != '.') out->open_fds++;
        closedir(d);
        out->open_fds--; /* the directory's own descriptor */
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        out->max_fds = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > INT64_MAX ? INT64_MAX : (int64_t)rl.rlim_cur;
    return 0;
}
