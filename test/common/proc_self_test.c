/* proc_self: parsing /proc/<pid>/stat, and reading our own. */
#include "common/proc_self.h"

#include "common/err.h"
#include "test.h"

#include <stdlib.h>
#include <time.h>

TEST(proc_self_parses_stat_fields) {
    /* a command name with spaces and parentheses; utime 250, stime 50, start 1000 ticks,
     * vsize 3133440, rss 358 pages */
    const char *stat = "2654 (we (ird) name) R 2650 2650 21426 0 -1 4194304 98 0 0 0 250 50 0 0 20 0 1 0 "
                       "1000 3133440 358 18446744073709551615 94211189592064 0 0 0\n";
    struct proc_self ps = {0};
    CHECK_EQ_INT(proc_self_parse_stat(stat, strlen(stat), 1.7e9, 100, 4096, &ps), 0);
    CHECK(ps.cpu_seconds == 3.0);
    CHECK(ps.start_time_seconds == 1.7e9 + 10);
    CHECK_EQ_INT(ps.virtual_bytes, 3133440);
    CHECK_EQ_INT(ps.resident_bytes, 358 * 4096);
    const char *cut = "2654 (x) R 2650 2650 21426 0 -1 4194304 98 0 0 0 250 50";
    CHECK_EQ_INT(proc_self_parse_stat(cut, strlen(cut), 0, 100, 4096, &ps), -ERR_FORMAT);
    const char *bad = "2654 (x) R 2650 2650 21426 0 -1 4194304 98 0 0 0 25x 50 0 0 20 0 1 0 1 2 3";
    CHECK_EQ_INT(proc_self_parse_stat(bad, strlen(bad), 0, 100, 4096, &ps), -ERR_FORMAT);
    CHECK_EQ_INT(proc_self_parse_stat("no parens", 9, 0, 100, 4096, &ps), -ERR_FORMAT);
}

TEST(proc_self_reads_this_process) {
    struct proc_self a, b;
    CHECK_EQ_INT(proc_self_read(&a), 0);
    CHECK(a.resident_bytes > 1 << 20 && a.virtual_bytes >= a.resident_bytes);
    CHECK(a.open_fds >= 3 && a.max_fds >= a.open_fds);
    double now = (double)time(NULL);
    CHECK(a.start_time_seconds > now - 3600 * 24 && a.start_time_seconds <= now + 1);
    /* burn some CPU: the counter moves */
    volatile double x = 0;
    for (long i = 0; i < 60000000; i++) x += (double)i * 1e-9;
    CHECK_EQ_INT(proc_self_read(&b), 0);
    CHECK(b.cpu_seconds > a.cpu_seconds);
}
