/* log.h: leveled, timestamped log lines on one stream (stderr in the server).
 *
 * The level is chosen once at startup and lives in a `struct log` that the owner (struct app)
 * passes down by const pointer: there is no global logger. Each call writes one whole line
 * with a single fwrite, so lines from different threads do not interleave mid-line.
 *
 *   struct log lg;
 *   log_init(&lg, LOG_INFO, stderr);
 *   log_info(&lg, "listening on %s:%d", host, port);
 *   // 2026-11-22T13:30:00.123Z INFO  listening on 127.0.0.1:8080
 *
 * The access log is one INFO line per finished request, written by src/net.
 */
#ifndef UVLM_LOG_H
#define UVLM_LOG_H

#include <stdio.h>
#include <stddef.h>

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR, LOG_OFF };

struct log {
    enum log_level level; /* lines below this level are dropped */
    FILE *out;            /* not owned */
};

void log_init(struct log *lg, enum log_level level, FILE *out);

/* Level from its name ("debug", "info", "warn", "error", "off"); -1 when unknown. */
int log_level_parse(const char *name);

void log_msg(const struct log *lg, enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_debug(lg, ...) log_msg((lg), LOG_DEBUG, __VA_ARGS__)
#define log_info(lg, ...)  log_msg((lg), LOG_INFO, __VA_ARGS__)
#define log_warn(lg, ...)  log_msg((lg), LOG_WARN, __VA_ARGS__)
#define log_error(lg, ...) log_msg((lg), LOG_ERROR, __VA_ARGS__)

#endif
