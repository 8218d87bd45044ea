#include "common/log.h"

#include <stdarg.h>
#include <string.h>
#include <time.h>

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

void log_init(struct log *lg, enum log_level level, FILE *out) {
    lg->level = level;
    lg->out = out;
}

int log_level_parse(const char *name) {
    for (int i = 0; i <= LOG_OFF; i++)
        if (!strcmp(name, level_names[i])) return i;
    return -1;
}

void log_msg(const struct log *lg, enum log_level level, const char *fmt, ...) {
    if (!lg || level < lg->level || level >= LOG_OFF || !lg->out) return;
    static const char *const tags[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ %s ", ts.tv_nsec / 1000000L,
                          tags[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    /* a message longer than the line is cut, never split over two lines */
    n = m < 0 ? n : (n + (size_t)m < sizeof line - 1 ? n + (size_t)m : sizeof line - 2);
    line[n++] = '\n';
    fwrite(line, 1, n, lg->out);
    fflush(lg->out);
}
