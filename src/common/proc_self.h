/* proc_self.h: this process's own resource figures, read from /proc/self (Linux), for the
 * standard Prometheus process metrics (process_cpu_seconds_total, process_resident_memory_bytes,
 * ...). A read costs a few system calls and a walk of the open file descriptors: fine for a
 * /metrics scrape, not for every step.
 *
 *   struct proc_self ps;
 *   if (proc_self_read(&ps) == 0) printf("%.2f s CPU, %lld bytes resident\n",
 *                                        ps.cpu_seconds, (long long)ps.resident_bytes);
 */
#ifndef UVLM_COMMON_PROC_SELF_H
#define UVLM_COMMON_PROC_SELF_H

#include <stddef.h>
#include <stdint.h>

struct proc_self {
    double cpu_seconds;         /* user + system CPU time of every thread so far */
    int64_t resident_bytes;     /* resident set size */
    int64_t virtual_bytes;      /* virtual memory size */
    double start_time_seconds;  /* start time, seconds since the Unix epoch */
    int64_t open_fds;           /* open file descriptors */
    int64_t max_fds;            /* their soft limit (RLIMIT_NOFILE) */
};

/* 0, or -ERR_IO when /proc cannot be read or parsed (*out is then zeroed). */
int proc_self_read(struct proc_self *out);

/* Parse the text of /proc/<pid>/stat (len bytes) into cpu_seconds, resident_bytes,
 * virtual_bytes and start_time_seconds, given the boot's time (seconds since the Unix epoch),
 * the clock ticks per second and the page size. 0 or -ERR_FORMAT. Pure: what proc_self_read
 * uses, testable. */
int proc_self_parse_stat(const char *stat, size_t len, double boot_epoch, long ticks_per_s, long page_size,
                         struct proc_self *out);

#endif
