/* metrics_text.c: Prometheus text exposition (see metrics_text.h). */
#include "api/metrics_text.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

void metrics_text_init(struct metrics_text *mt) {
    memset(mt, 0, sizeof *mt);
}

void metrics_text_free(struct metrics_text *mt) {
    free(mt->buf);
    memset(mt, 0, sizeof *mt);
}

bool metrics_text_failed(const struct metrics_text *mt) {
    return mt->failed;
}

/* Room for n more bytes and the NUL. */
static bool reserve(struct metrics_text *mt, size_t n) {
    if (mt->failed) return false;
    if (mt->len + n + 1 <= mt->cap) return true;
    size_t cap = mt->cap ? mt->cap : 1024;
    while (cap < mt->len + n + 1) {
        if (cap > SIZE_MAX / 2) goto fail;
        cap *= 2;
    }
    char *buf = realloc(mt->buf, cap);
    if (!buf) goto fail;
    mt->buf = buf;
    mt->cap = cap;
    return true;
fail:
    mt->failed = true;
    return false;
}

static void put(struct metrics_text *mt, const char *s, size_t n) {
    if (!reserve(mt, n)) return;
    memcpy(mt->buf + mt->len, s, n);
    mt->len += n;
    mt->buf[mt->len] = '\0';
}

static void puts_(struct metrics_text *mt, const char *s) {
    put(mt, s, strlen(s));
}

static void printf_(struct metrics_text *mt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void printf_(struct metrics_text *mt, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    ASSERT(n >= 0 && (size_t)n < sizeof tmp);   /* only used for numbers */
    put(mt, tmp, (size_t)n);
}

/* Escape for a HELP text (backslash, newline) or also for a label value (and the quote). */
static void put_escaped(struct metrics_text *mt, const char *s, bool label_value) {
    for (; *s; s++) {
        if (*s == '\\') puts_(mt, "\\\\");
        else if (*s == '\n') puts_(mt, "\\n");
        else if (*s == '"' && label_value) puts_(mt, "\\\"");
        else put(mt, s, 1);
    }
}

static void assert_name(const char *name) {
    ASSERT(name && *name && !(*name >= '0' && *name <= '9'));
    for (const char *c = name; *c; c++)
        ASSERT((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
               *c == '_' || *c == ':');
}

/* The shortest of %.15g..%.17g that reads back as v: 0.1 prints "0.1", not 0.10000000000000001. */
static void format_double(char *buf, size_t size, double v) {
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

static void put_value(struct metrics_text *mt, double v) {
    char num[32];
    if (isnan(v)) puts_(mt, "NaN");
    else if (isinf(v)) puts_(mt, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) <= 9007199254740992.0) printf_(mt, "%.0f", v);
    else format_double(num, sizeof num, v), puts_(mt, num);
}

void metrics_text_family(struct metrics_text *mt, const char *name, const char *type,
                         const char *help) {
    assert_name(name);
    puts_(mt, "# HELP ");
    puts_(mt, name);
    puts_(mt, " ");
    put_escaped(mt, help ? help : "", false);
    puts_(mt, "\n# TYPE ");
    puts_(mt, name);
    puts_(mt, " ");
    puts_(mt, type);
    puts_(mt, "\n");
}

void metrics_text_sample(struct metrics_text *mt, const char *name, const char *label,
                         const char *label_value, double value) {
    assert_name(name);
    puts_(mt, name);
    if (label) {
        assert_name(label);
        puts_(mt, "{");
        puts_(mt, label);
        puts_(mt, "=\"");
        put_escaped(mt, label_value ? label_value : "", true);
        puts_(mt, "\"}");
    }
    puts_(mt, " ");
    put_value(mt, value);
    puts_(mt, "\n");
}

void metrics_text_counter(struct metrics_text *mt, const char *name, const char *help, double value) {
    metrics_text_family(mt, name, "counter", help);
    metrics_text_sample(mt, name, NULL, NULL, value);
}

void metrics_text_gauge(struct metrics_text *mt, const char *name, const char *help, double value) {
    metrics_text_family(mt, name, "gauge", help);
    metrics_text_sample(mt, name, NULL, NULL, value);
}

void metrics_text_histogram(struct metrics_text *mt, const char *name, const char *help,
                            const struct metrics_histogram *h) {
    char suffixed[128];
    ASSERT(strlen(name) + sizeof "_bucket" <= sizeof suffixed);
    metrics_text_family(mt, name, "histogram", help);
    snprintf(suffixed, sizeof suffixed, "%s_bucket", name);
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= h->n_bounds; i++) {
        ASSERT(i == 0 || i == h->n_bounds || h->bounds[i] > h->bounds[i - 1]);
        cumulative += h->counts[i];
        char le[32];
        if (i < h->n_bounds) format_double(le, sizeof le, h->bounds[i]);
        else snprintf(le, sizeof le, "+Inf");
        metrics_text_sample(mt, suffixed, "le", le, (double)cumulative);
    }
    snprintf(suffixed, sizeof suffixed, "%s_sum", name);
    metrics_text_sample(mt, suffixed, NULL, NULL, h->sum);
    snprintf(suffixed, sizeof suffixed, "%s_count", name);
    metrics_text_sample(mt, suffixed, NULL, NULL, (double)cumulative);
}
