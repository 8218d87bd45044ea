/* metrics_text.h: writing the Prometheus text exposition format (version 0.0.4, served as
 * "text/plain; version=0.0.4") for GET /metrics. The handler gathers numbers from the scheduler
 * and the server, then writes each metric family with one call; this module knows the syntax
 * (HELP/TYPE lines, label escaping, cumulative histogram buckets, +Inf/NaN), nothing about which
 * metrics exist.
 *
 *   struct metrics_text mt;
 *   metrics_text_init(&mt);
 *   metrics_text_counter(&mt, "uvlm_prompt_tokens_total", "Prompt tokens evaluated.", n_prompt);
 *   metrics_text_family(&mt, "uvlm_requests_total", "counter", "Requests answered, by status.");
 *   metrics_text_sample(&mt, "uvlm_requests_total", "status", "200", n_200);
 *   metrics_text_sample(&mt, "uvlm_requests_total", "status", "400", n_400);
 *   static const double step_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};
 *   struct metrics_histogram h = {step_bounds, counts, 8, sum_seconds};  // counts: 9 buckets
 *   metrics_text_histogram(&mt, "uvlm_step_seconds", "Duration of a step.", &h);
 *   if (metrics_text_failed(&mt)) -> 500; else respond with mt.buf, mt.len
 *   metrics_text_free(&mt);
 *
 * Ownership: the struct owns buf (grown with realloc, NUL-terminated). Running out of memory
 * makes every later call a no-op and metrics_text_failed() true: the caller checks once.
 * Metric and label names must match [a-zA-Z_:][a-zA-Z0-9_:]* (asserted: they are constants);
 * label values and help texts may be anything and are escaped.
 */
#ifndef UVLM_API_METRICS_TEXT_H
#define UVLM_API_METRICS_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct metrics_text {
    char *buf;     /* the exposition so far, NUL-terminated (NULL before the first write) */
    size_t len;
    size_t cap;
    bool failed;   /* out of memory: buf is incomplete */
};

void metrics_text_init(struct metrics_text *mt);
void metrics_text_free(struct metrics_text *mt);
bool metrics_text_failed(const struct metrics_text *mt);

/* "# HELP name help" and "# TYPE name type" (type: counter, gauge, histogram, summary, untyped). */
void metrics_text_family(struct metrics_text *mt, const char *name, const char *type,
                         const char *help);

/* One sample line "name{label="value"} v", or "name v" when label is NULL. Values print exactly
 * for integers up to 2^53, as %.17g otherwise, and +Inf, -Inf, NaN as Prometheus spells them. */
void metrics_text_sample(struct metrics_text *mt, const char *name, const char *label,
                         const char *label_value, double value);

/* A family with a single unlabelled sample. */
void metrics_text_counter(struct metrics_text *mt, const char *name, const char *help, double value);
void metrics_text_gauge(struct metrics_text *mt, const char *name, const char *help, double value);

/* A histogram from per-bucket (not cumulative) counts: counts[i] observations fell in
 * (bounds[i-1], bounds[i]], counts[n_bounds] above the last bound. bounds ascend. Writes the
 * cumulative name_bucket{le="..."} lines (the last le="+Inf"), name_sum and name_count. */
struct metrics_histogram {
    const double *bounds;
    const uint64_t *counts;   /* n_bounds + 1 entries */
    size_t n_bounds;
    double sum;
};
void metrics_text_histogram(struct metrics_text *mt, const char *name, const char *help,
                            const struct metrics_histogram *h);

#endif
