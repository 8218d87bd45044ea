/* metrics_text_test.c: the exact Prometheus text for counters, labelled samples, histograms,
 * special values and escaping. */
#include "test.h"

#include <math.h>

#include "api/metrics_text.h"

TEST(metrics_text_counter_gauge_and_labels) {
    struct metrics_text mt;
    metrics_text_init(&mt);
    metrics_text_counter(&mt, "uvlm_prompt_tokens_total", "Prompt tokens evaluated.", 1234);
    metrics_text_gauge(&mt, "uvlm_kv_cells_used", "KV cells in use.", 0);
    metrics_text_family(&mt, "uvlm_requests_total", "counter", "Requests, by status.");
    metrics_text_sample(&mt, "uvlm_requests_total", "status", "200", 7);
    metrics_text_sample(&mt, "uvlm_requests_total", "status", "400", 1);
    metrics_text_gauge(&mt, "uvlm_tokens_per_second", "Recent rate.", 12.5);
    CHECK(!metrics_text_failed(&mt));
    CHECK_EQ_STR(mt.buf,
                 "# HELP uvlm_prompt_tokens_total Prompt tokens evaluated.\n"
                 "# TYPE uvlm_prompt_tokens_total counter\n"
                 "uvlm_prompt_tokens_total 1234\n"
                 "# HELP uvlm_kv_cells_used KV cells in use.\n"
                 "# TYPE uvlm_kv_cells_used gauge\n"
                 "uvlm_kv_cells_used 0\n"
                 "# HELP uvlm_requests_total Requests, by status.\n"
                 "# TYPE uvlm_requests_total counter\n"
                 "uvlm_requests_total{status=\"200\"} 7\n"
                 "uvlm_requests_total{status=\"400\"} 1\n"
                 "# HELP uvlm_tokens_per_second Recent rate.\n"
                 "# TYPE uvlm_tokens_per_second gauge\n"
                 "uvlm_tokens_per_second 12.5\n");
    CHECK_EQ_INT(mt.len, strlen(mt.buf));
    metrics_text_free(&mt);
    CHECK(mt.buf == NULL);
}

TEST(metrics_text_histogram_is_cumulative) {
    static const double bounds[] = {0.01, 0.1, 1};
    static const uint64_t counts[] = {2, 0, 3, 1};   /* per bucket; the last is above 1 s */
    struct metrics_histogram h = {bounds, counts, 3, 4.75};
    struct metrics_text mt;
    metrics_text_init(&mt);
    metrics_text_histogram(&mt, "uvlm_step_seconds", "Step duration.", &h);
    CHECK_EQ_STR(mt.buf,
                 "# HELP uvlm_step_seconds Step duration.\n"
                 "# TYPE uvlm_step_seconds histogram\n"
                 "uvlm_step_seconds_bucket{le=\"0.01\"} 2\n"
                 "uvlm_step_seconds_bucket{le=\"0.1\"} 2\n"
                 "uvlm_step_seconds_bucket{le=\"1\"} 5\n"
                 "uvlm_step_seconds_bucket{le=\"+Inf\"} 6\n"
                 "uvlm_step_seconds_sum 4.75\n"
                 "uvlm_step_seconds_count 6\n");
    metrics_text_free(&mt);
}

TEST(metrics_text_special_values_and_escaping) {
    struct metrics_text mt;
    metrics_text_init(&mt);
    metrics_text_sample(&mt, "a", NULL, NULL, INFINITY);
    metrics_text_sample(&mt, "b", NULL, NULL, -INFINITY);
    metrics_text_sample(&mt, "c", NULL, NULL, NAN);
    metrics_text_sample(&mt, "d", NULL, NULL, 0.1);
    metrics_text_sample(&mt, "e", NULL, NULL, 1e300);
    metrics_text_sample(&mt, "f", NULL, NULL, -3);
    metrics_text_sample(&mt, "g", "model", "a\"b\\c\nd", 1);
    metrics_text_family(&mt, "h", "gauge", "line1\nline2 \\ \"q\"");
    CHECK_EQ_STR(mt.buf,
                 "a +Inf\n"
                 "b -Inf\n"
                 "c NaN\n"
                 "d 0.1\n"
                 "e 1e+300\n"
                 "f -3\n"
                 "g{model=\"a\\\"b\\\\c\\nd\"} 1\n"
                 "# HELP h line1\\nline2 \\\\ \"q\"\n"
                 "# TYPE h gauge\n");
    metrics_text_free(&mt);
}

TEST(metrics_text_grows_past_first_buffer) {
    struct metrics_text mt;
    metrics_text_init(&mt);
    for (int i = 0; i < 2000; i++) metrics_text_sample(&mt, "uvlm_x", "i", "some_label_value", i);
    CHECK(!metrics_text_failed(&mt));
    CHECK(mt.len > 50000);
    CHECK_EQ_INT(mt.len, strlen(mt.buf));
    CHECK(strstr(mt.buf, "uvlm_x{i=\"some_label_value\"} 1999\n") != NULL);
    metrics_text_free(&mt);
}
