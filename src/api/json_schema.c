/* json_schema.c: JSON Schema -> GBNF (see json_schema.h for what is honoured).
 *
 * Every value expression ends with `ws`, so a container writes its punctuation and whitespace
 * between the values' expressions. Objects and arrays become named rules (a $ref target too, named
 * before its body is written, which is what lets a schema refer to itself); primitives are shared
 * rules written once at the end when used.
 */
#include "api/json_schema.h"

#include "common/err.h"
#include "common/strbuf.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the shared rules ---- */

enum prim { P_WS = 1, P_CHAR = 2, P_STRING = 4, P_INTEGER = 8, P_NUMBER = 16, P_BOOLEAN = 32, P_NULL = 64,
            P_VALUE = 128, P_DATE = 256, P_TIME = 512, P_UUID = 1024, P_KCHAR = 2048 };

static const struct {
    unsigned bit, needs;
    const char *text;
} prims[] = {
    {P_WS, 0, "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"},
    {P_CHAR, 0, "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"},
    {P_KCHAR, 0, "kchar ::= [^\"\\\\\\x7F\\x00-\\x1F]\n"},
    {P_STRING, P_CHAR | P_WS, "string ::= \"\\\"\" char* \"\\\"\" ws\n"},
    {P_INTEGER, P_WS, "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) ws\n"},
    {P_NUMBER, P_WS, "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? ws\n"},
    {P_BOOLEAN, P_WS, "boolean ::= (\"true\" | \"false\") ws\n"},
    {P_NULL, P_WS, "null ::= \"null\" ws\n"},
    {P_VALUE, P_STRING | P_NUMBER | P_BOOLEAN | P_NULL | P_WS,
     "value ::= object | array | string | number | boolean | null\n"
     "object ::= \"{\" ws (string \":\" ws value (\",\" ws string \":\" ws value)*)? \"}\" ws\n"
     "array ::= \"[\" ws (value (\",\" ws value)*)? \"]\" ws\n"},
    {P_DATE, 0, "date ::= [0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])\n"},
    {P_TIME, 0, "time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
                "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"},
    {P_UUID, 0, "uuid ::= [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}\n"},
};

/* ---- the converter's state ---- */

struct conv {
    const json_t *root;
    struct strbuf rules;
    int next_id;
    json_t *refs;     /* "$ref" text -> rule name */
    char path[256];
    size_t path_len;
    char *where, *why;
    size_t where_len, why_len;
    int err;
    int depth;
    unsigned used;
};

static int fail(struct conv *c, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct conv *c, const char *key, const char *fmt, ...) {
    if (c->err) return c->err;
    c->err = -ERR_INVAL;
    if (c->where_len)
        snprintf(c->where, c->where_len, "%.*s%s%s", (int)c->path_len, c->path, key && c->path_len ? "." : "",
                 key ? key : "");
    if (c->why_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->why, c->why_len, fmt, ap);
        va_end(ap);
    }
    return c->err;
}

/* path += ".seg" (or "[i]"); returns the old length to pop back to */
static size_t path_push(struct conv *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static size_t path_push(struct conv *c, const char *fmt, ...) {
    size_t old = c->path_len;
    char seg[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(seg, sizeof seg, fmt, ap);
    va_end(ap);
    int k = snprintf(c->path + c->path_len, sizeof c->path - c->path_len, "%s%s",
                     c->path_len && seg[0] != '[' ? "." : "", seg);
    if (k > 0) c->path_len = c->path_len + (size_t)k < sizeof c->path ? c->path_len + (size_t)k : sizeof c->path - 1;
    return old;
}
static void path_pop(struct conv *c, size_t old) {
    c->path_len = old;
    c->path[old] = 0;
}

static void use(struct conv *c, unsigned bits) {
    for (bool more = true; more;) {
        more = false;
        for (size_t i = 0; i < sizeof prims / sizeof *prims; i++)
            if ((bits & prims[i].bit) && (prims[i].needs & ~bits)) bits |= prims[i].needs, more = true;
    }
    c->used |= bits;
}

/* A fresh rule name from a hint ("name-3"): letters, digits and '-'. */
static void rule_name(struct conv *c, const char *hint, char *out, size_t cap) {
    char h[24];
    size_t k = 0;
    for (const char *p = hint; *p && k < sizeof h - 1; p++) {
        char ch = (char)tolower((unsigned char)*p);
        if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')) h[k++] = ch;
        else if (k && h[k - 1] != '-') h[k++] = '-';
    }
    while (k && h[k - 1] == '-') k--;
    h[k] = 0;
    snprintf(out, cap, "%s%s%d", k ? h : "r", k ? "-" : "", ++c->next_id);
}

/* A GBNF string literal of raw bytes (UTF-8 passes through; control bytes as \xHH). */
static void gbnf_lit(struct strbuf *b, const char *s, size_t n) {
    strbuf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"') strbuf_puts(b, "\\\"");
        else if (ch == '\\') strbuf_puts(b, "\\\\");
        else if (ch == '\n') strbuf_puts(b, "\\n");
        else if (ch == '\r') strbuf_puts(b, "\\r");
        else if (ch == '\t') strbuf_puts(b, "\\t");
        else if (ch < 0x20 || ch == 0x7F) strbuf_printf(b, "\\x%02X", ch);
        else strbuf_put(b, (const char *)&ch, 1);
    }
    strbuf_puts(b, "\"");
}

/* A JSON value's compact text as a GBNF literal followed by ws. */
static int json_lit(struct conv *c, struct strbuf *e, const json_t *v, const char *key) {
    char *txt = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!txt) return fail(c, key, "this value cannot be written as JSON");
    gbnf_lit(e, txt, strlen(txt));
    free(txt);
    strbuf_puts(e, " ws");
    use(c, P_WS);
    return 0;
}

static int visit(struct conv *c, const json_t *s, struct strbuf *e);

/* ---- keywords ---- */

static const char *const annotations[] = {"title", "description", "default", "examples", "example", "$schema", "$id",
                                          "$comment", "deprecated", "readOnly", "writeOnly", "discriminator", "$defs",
                                          "definitions", NULL};
static const char *const honoured[] = {"type", "enum", "const", "properties", "required", "additionalProperties",
                                       "minProperties", "maxProperties", "items", "prefixItems", "additionalItems",
                                       "minItems", "maxItems", "minLength", "maxLength", "pattern", "format",
                                       "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf",
                                       "allOf", "$ref", "nullable", "uniqueItems", NULL};

static bool in_list(const char *k, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(k, *list)) return true;
    return false;
}

/* ---- numbers ---- */

/* Integers [lo, hi] of the same digit count n (decimal strings): alternatives of digit classes. */
static void digits_range(struct strbuf *e, const char *lo, const char *hi, int n) {
    if (n == 0) return;
    if (!strncmp(lo, hi, (size_t)n)) {
        strbuf_puts(e, " \"");
        strbuf_put(e, lo, (size_t)n);
        strbuf_puts(e, "\"");
        return;
    }
    if (lo[0] == hi[0]) {
        strbuf_printf(e, " \"%c\"", lo[0]);
        digits_range(e, lo + 1, hi + 1, n - 1);
        return;
    }
    bool lo_zeros = true, hi_nines = true;
    for (int i = 1; i < n; i++) lo_zeros &= lo[i] == '0', hi_nines &= hi[i] == '9';
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    strbuf_puts(e, " (");
    bool first = true;
    char from = lo[0], to = hi[0];
    if (!lo_zeros) {
        strbuf_printf(e, "\"%c\"", lo[0]);
        digits_range(e, lo + 1, nines, n - 1);
        from++;
        first = false;
    }
    if (!hi_nines) to--;
    if (from <= to) {
        strbuf_printf(e, "%s[%c-%c]", first ? "" : " | ", from, to);
        if (n > 1) strbuf_printf(e, " [0-9]{%d}", n - 1);
        first = false;
    }
    if (!hi_nines) {
        strbuf_printf(e, "%s\"%c\"", first ? "" : " | ", hi[0]);
        digits_range(e, zeros, hi + 1, n - 1);
    }
    strbuf_puts(e, ")");
}

#define INT_DIGITS 15
static const int64_t INT_LIMIT = 999999999999999LL; /* 15 digits */

/* Non-negative integers [lo, hi] (hi < 0: unbounded, up to 16 digits), no leading zeros, as
 * alternatives appended to e (each starting with " | " except the first when *first). */
static void nonneg_range(struct strbuf *e, int64_t lo, int64_t hi, bool *first) {
    char a[24], b[24];
    int64_t p = 1;
    for (int d = 1; d <= INT_DIGITS + 1; d++, p *= 10) {
        int64_t dlo = d == 1 ? 0 : p, dhi = p * 10 - 1; /* numbers of d digits */
        if (hi >= 0 && dlo > hi) break;
        if (dhi < lo) continue;
        if (hi < 0 && lo <= dlo && d > 1) { /* every longer number, up to 16 digits */
            strbuf_printf(e, "%s[1-9] [0-9]{%d,%d}", *first ? "" : " | ", d - 1, INT_DIGITS);
            *first = false;
            break;
        }
        int64_t x = lo > dlo ? lo : dlo, y = hi >= 0 && hi < dhi ? hi : dhi;
        snprintf(a, sizeof a, "%0*lld", d, (long long)x);
        snprintf(b, sizeof b, "%0*lld", d, (long long)y);
        strbuf_puts(e, *first ? "(" : " | (");
        digits_range(e, a, b, d);
        strbuf_puts(e, ")");
        *first = false;
        if (d == INT_DIGITS + 1) break;
    }
}

/* A bound of an integer: *out and true when present (exclusive ones moved inward). */
static int int_bound(struct conv *c, const json_t *s, bool upper, int64_t *out, bool *has) {
    const char *inc = upper ? "maximum" : "minimum", *exc = upper ? "exclusiveMaximum" : "exclusiveMinimum";
    const json_t *v = json_object_get(s, inc), *x = json_object_get(s, exc);
    *has = false;
    double best = upper ? INFINITY : -INFINITY;
    if (v) {
        if (!json_is_number(v)) return fail(c, inc, "expected a number");
        double d = json_number_value(v);
        best = upper ? floor(d) : ceil(d);
        *has = true;
    }
    if (x && json_is_boolean(x)) { /* draft 4: the bound is exclusive */
        if (json_is_true(x)) {
            if (!v) return fail(c, exc, "exclusive without %s", inc);
            double d = json_number_value(v);
            best = upper ? (d == floor(d) ? d - 1 : floor(d)) : (d == ceil(d) ? d + 1 : ceil(d));
        }
    } else if (x) {
        if (!json_is_number(x)) return fail(c, exc, "expected a number");
        double d = json_number_value(x), b = upper ? (d == floor(d) ? d - 1 : floor(d)) : (d == ceil(d) ? d + 1 : ceil(d));
        if (!*has || (upper ? b < best : b > best)) best = b;
        *has = true;
    }
    if (*has) {
        if (fabs(best) > (double)INT_LIMIT)
            return fail(c, v ? inc : exc, "integer bounds beyond %d digits are not supported", INT_DIGITS);
        *out = (int64_t)best;
    }
    return 0;
}

static int visit_integer(struct conv *c, const json_t *s, struct strbuf *e) {
    int64_t lo = 0, hi = 0;
    bool has_lo, has_hi;
    if (int_bound(c, s, false, &lo, &has_lo) || int_bound(c, s, true, &hi, &has_hi)) return c->err;
    if (json_object_get(s, "multipleOf")) return fail(c, "multipleOf", "keyword 'multipleOf' is not supported");
    if (!has_lo && !has_hi) {
        use(c, P_INTEGER);
        strbuf_puts(e, "integer");
        return 0;
    }
    if (has_lo && has_hi && lo > hi) return fail(c, "minimum", "no integer lies between the bounds");
    bool first = true;
    strbuf_puts(e, "(");
    if (!has_lo || lo < 0) { /* negatives: "-" then the magnitudes (-hi or 1) .. -lo */
        int64_t mlo = has_hi && hi < 0 ? -hi : 1, mhi = has_lo ? -lo : -1;
        strbuf_puts(e, "\"-\" (");
        bool f2 = true;
        nonneg_range(e, mlo, mhi, &f2);
        strbuf_puts(e, ")");
        first = false;
    }
    if (!has_hi || hi >= 0) {
        strbuf_puts(e, first ? "" : " | ");
        bool f2 = true;
        strbuf_puts(e, "(");
        nonneg_range(e, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1, &f2);
        strbuf_puts(e, ")");
    }
    strbuf_puts(e, ") ws");
    use(c, P_WS);
    return 0;
}

static int visit_number(struct conv *c, const json_t *s, struct strbuf *e) {
    const json_t *mn = json_object_get(s, "minimum"), *xmn = json_object_get(s, "exclusiveMinimum");
    static const char *const unsupported[] = {"maximum", "exclusiveMaximum", "multipleOf", NULL};
    for (const char *const *k = unsupported; *k; k++)
        if (json_object_get(s, *k))
            return fail(c, *k, "keyword '%s' on a number is not supported (integers take bounds)", *k);
    if (xmn && json_is_boolean(xmn)) { /* draft 4 */
        if (json_is_true(xmn)) xmn = mn, mn = NULL;
        else xmn = NULL;
    }
    if ((mn && (!json_is_number(mn) || json_number_value(mn) != 0)) || (xmn && (!json_is_number(xmn) || json_number_value(xmn) != 0)))
        return fail(c, mn ? "minimum" : "exclusiveMinimum", "a number's lower bound must be 0 (integers take any bound)");
    const char *frac = "(\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?";
    if (mn) strbuf_printf(e, "(\"0\" | [1-9] [0-9]{0,15}) %s ws", frac);
    else if (xmn) /* > 0: a mantissa with a non-zero digit */
        strbuf_printf(e, "([1-9] [0-9]{0,15} (\".\" [0-9]{1,16})? | \"0.\" [0-9]{0,15} [1-9]) ([eE] [-+]? [0-9]{1,3})? ws");
    else {
        use(c, P_NUMBER);
        strbuf_puts(e, "number");
        return 0;
    }
    use(c, P_WS);
    return 0;
}

/* ---- strings and patterns ---- */

/* A code point as GBNF escape text usable in a class or literal. */
static void cp_escape(struct strbuf *b, uint32_t cp) {
    if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) strbuf_printf(b, "%c", (char)cp);
    else if (cp < 0x100) strbuf_printf(b, "\\x%02X", cp);
    else if (cp < 0x10000) strbuf_printf(b, "\\u%04X", cp);
    else strbuf_printf(b, "\\U%08X", cp);
}

/* The JSON text of one character of a string value, as a GBNF literal. */
static void json_char_lit(struct strbuf *b, uint32_t cp) {
    switch (cp) {
    case '"': strbuf_puts(b, "\"\\\\\\\"\""); return;   /* \" */
    case '\\': strbuf_puts(b, "\"\\\\\\\\\""); return;  /* \\ */
    case '\n': strbuf_puts(b, "\"\\\\n\""); return;
    case '\r': strbuf_puts(b, "\"\\\\r\""); return;
    case '\t': strbuf_puts(b, "\"\\\\t\""); return;
    case '\b': strbuf_puts(b, "\"\\\\b\""); return;
    case '\f': strbuf_puts(b, "\"\\\\f\""); return;
    }
    if (cp < 0x20 || cp == 0x7F) {
        strbuf_printf(b, "\"\\\\u%04x\"", cp);
        return;
    }
    strbuf_puts(b, "\"");
    cp_escape(b, cp);
    strbuf_puts(b, "\"");
}

struct re {
    struct conv *c;
    const char *p, *end, *start;
    int depth;
};

static int re_fail(struct re *r, const char *what) {
    return fail(r->c, "pattern", "%s (at byte %d of the pattern)", what, (int)(r->p - r->start));
}

static int32_t re_utf8(struct re *r) {
    const unsigned char *s = (const unsigned char *)r->p;
    unsigned ch = s[0];
    int n = ch < 0x80 ? 1 : (ch & 0xE0) == 0xC0 ? 2 : (ch & 0xF0) == 0xE0 ? 3 : 4;
    if ((size_t)(r->end - r->p) < (size_t)n) return re_fail(r, "invalid UTF-8"), -1;
    uint32_t cp = n == 1 ? ch : n == 2 ? ch & 0x1F : n == 3 ? ch & 0x0F : ch & 0x07;
    for (int i = 1; i < n; i++) cp = cp << 6 | (s[i] & 0x3F);
    r->p += n;
    return (int32_t)cp;
}

/* Ranges (pairs) of a set of code points. */
#define CPSET_MAX 512
struct cpset {
    uint32_t r[2 * CPSET_MAX];
    int n;
};

/* re_class bounds what a class adds, so the set never fills (negation adds one pair) */
static void cps_add(struct cpset *s, uint32_t lo, uint32_t hi) {
    if (s->n < CPSET_MAX) s->r[2 * s->n] = lo, s->r[2 * s->n + 1] = hi, s->n++;
}

static int cmp_pair(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void cps_normalize(struct cpset *s, bool negate) {
    qsort(s->r, (size_t)s->n, 2 * sizeof *s->r, cmp_pair);
    int m = 0;
    for (int i = 0; i < s->n; i++) {
        if (m && s->r[2 * i] <= s->r[2 * m - 1] + 1) {
            if (s->r[2 * i + 1] > s->r[2 * m - 1]) s->r[2 * m - 1] = s->r[2 * i + 1];
        } else {
            s->r[2 * m] = s->r[2 * i], s->r[2 * m + 1] = s->r[2 * i + 1], m++;
        }
    }
    s->n = m;
    if (!negate) return;
    struct cpset o = {.n = 0};
    uint32_t prev = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[2 * i] > prev) cps_add(&o, prev, s->r[2 * i] - 1);
        prev = s->r[2 * i + 1] + 1;
    }
    if (prev <= 0x10FFFF) cps_add(&o, prev, 0x10FFFF);
    *s = o;
}

static bool cps_has(const struct cpset *s, uint32_t cp) {
    for (int i = 0; i < s->n; i++)
        if (cp >= s->r[2 * i] && cp <= s->r[2 * i + 1]) return true;
    return false;
}

/* The JSON text of any character of the set: plain characters as a class, and the ones JSON
 * escapes (", \, \n, \t, \r, \f; other control characters are left out) as their escapes. */
static void cps_emit(struct strbuf *e, const struct cpset *s) {
    struct strbuf cls = {0};
    int parts = 0;
    for (int i = 0; i < s->n; i++) {
        uint32_t lo = s->r[2 * i], hi = s->r[2 * i + 1];
        /* cut out 0x00-0x1F, '"', '\\', 0x7F */
        uint32_t cuts[][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}, {0xD800, 0xDFFF}};
        uint32_t a = lo;
        while (a <= hi) {
            uint32_t b = hi;
            bool skip = false;
            for (int k = 0; k < 5; k++) {
                if (a >= cuts[k][0] && a <= cuts[k][1]) {
                    a = cuts[k][1] + 1;
                    skip = true;
                    break;
                }
                if (cuts[k][0] > a && cuts[k][0] <= b) b = cuts[k][0] - 1;
            }
            if (skip) continue;
            cp_escape(&cls, a);
            if (b > a) {
                strbuf_puts(&cls, "-");
                cp_escape(&cls, b);
            }
            if (b == 0x10FFFF) break;
            a = b + 1;
        }
    }
    strbuf_puts(e, "(");
    if (cls.n) {
        strbuf_puts(e, "[");
        strbuf_puts(e, cls.s);
        strbuf_puts(e, "]");
        parts++;
    }
    free(cls.s);
    static const uint32_t escaped[] = {'"', '\\', '\n', '\t', '\r', '\f'};
    for (size_t k = 0; k < sizeof escaped / sizeof *escaped; k++)
        if (cps_has(s, escaped[k])) {
            strbuf_puts(e, parts++ ? " | " : "");
            json_char_lit(e, escaped[k]);
        }
    if (!parts) strbuf_puts(e, "[^\\x00-\\U0010FFFF]"); /* matches nothing */
    strbuf_puts(e, ")");
}

static void cps_class_escape(struct cpset *s, char k) {
    switch (k) {
    case 'd': cps_add(s, '0', '9'); break;
    case 'w': cps_add(s, '0', '9'); cps_add(s, 'a', 'z'); cps_add(s, 'A', 'Z'); cps_add(s, '_', '_'); break;
    case 's': cps_add(s, ' ', ' '); cps_add(s, '\t', '\r'); break;
    }
}

/* 4 hex digits at r->p: their value, or -1 (error set). */
static int32_t re_hex4(struct re *r) {
    int32_t v = 0;
    for (int i = 0; i < 4; i++) {
        if (r->p >= r->end || !isxdigit((unsigned char)*r->p)) return re_fail(r, "\\u needs 4 hex digits"), -1;
        char h = *r->p++;
        v = v << 4 | (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return v;
}

/* The code point of an escape's character (after the backslash), or -1 (error set). */
static int32_t re_escape_char(struct re *r) {
    char k = *r->p++;
    switch (k) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    case 'u': {
        /* a UTF-16 unit, as ECMA-262 writes characters past U+FFFF: a high surrogate followed
         * by an escaped low one is one code point; a surrogate alone is no character */
        int32_t cp = re_hex4(r);
        if (cp < 0xD800 || cp > 0xDFFF) return cp; /* -1 included */
        if (cp <= 0xDBFF && r->end - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u') {
            const char *at = r->p;
            r->p += 2;
            int32_t lo = re_hex4(r);
            if (lo >= 0xDC00 && lo <= 0xDFFF) return 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            if (lo < 0) return -1;
            r->p = at;
        }
        return re_fail(r, "a \\u escape of a UTF-16 surrogate without its pair"), -1;
    }
    }
    if (isalnum((unsigned char)k)) return re_fail(r, "this escape is not supported"), -1;
    r->p--;
    return re_utf8(r);
}

static int re_class(struct re *r, struct strbuf *e) {
    r->p++; /* [ */
    bool negate = r->p < r->end && *r->p == '^';
    if (negate) r->p++;
    struct cpset s = {.n = 0};
    bool first = true;
    while (r->p < r->end && (*r->p != ']' || first)) {
        first = false;
        if (s.n >= 200) return re_fail(r, "character class too long");
        int32_t lo;
        if (*r->p == '\\') {
            r->p++;
            if (r->p >= r->end) return re_fail(r, "unfinished escape");
            char k = *r->p;
            if (k == 'd' || k == 'w' || k == 's') {
                r->p++;
                cps_class_escape(&s, k);
                continue;
            }
            if (k == 'D' || k == 'W' || k == 'S') return re_fail(r, "negated class escapes inside [...] are not supported");
            lo = re_escape_char(r);
        } else {
            lo = re_utf8(r);
        }
        if (lo < 0) return r->c->err;
        int32_t hi = lo;
        if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
            r->p++;
            if (*r->p == '\\') {
                r->p++;
                if (r->p >= r->end) return re_fail(r, "unfinished escape");
                hi = re_escape_char(r);
            } else {
                hi = re_utf8(r);
            }
            if (hi < 0) return r->c->err;
            if (hi < lo) return re_fail(r, "character range out of order");
        }
        cps_add(&s, (uint32_t)lo, (uint32_t)hi);
    }
    if (r->p >= r->end) return re_fail(r, "unterminated character class");
    r->p++;
    cps_normalize(&s, negate);
    cps_emit(e, &s);
    return 0;
}

static int re_alt(struct re *r, struct strbuf *e);

static int re_atom(struct re *r, struct strbuf *e) {
    char ch = *r->p;
    if (ch == '(') {
        if (++r->depth > 50) return re_fail(r, "groups nested too deep");
        r->p++;
        if (r->p < r->end && *r->p == '?') {
            if (r->p + 1 < r->end && r->p[1] == ':') r->p += 2;
            else return re_fail(r, "lookarounds and named groups are not supported");
        }
        strbuf_puts(e, "(");
        if (re_alt(r, e)) return r->c->err;
        if (r->p >= r->end || *r->p != ')') return re_fail(r, "unclosed '('");
        r->p++;
        r->depth--;
        strbuf_puts(e, ")");
        return 0;
    }
    if (ch == '[') return re_class(r, e);
    if (ch == '.') {
        r->p++;
        struct cpset s = {.n = 0};
        cps_add(&s, '\n', '\n');
        cps_normalize(&s, true);
        cps_emit(e, &s);
        return 0;
    }
    if (ch == '^' || ch == '$') return re_fail(r, "anchors inside the pattern are not supported");
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{') return re_fail(r, "a quantifier with nothing to repeat");
    int32_t cp;
    if (ch == '\\') {
        r->p++;
        if (r->p >= r->end) return re_fail(r, "unfinished escape");
        char k = *r->p;
        if (k == 'd' || k == 'w' || k == 's' || k == 'D' || k == 'W' || k == 'S') {
            r->p++;
            struct cpset s = {.n = 0};
            cps_class_escape(&s, (char)tolower((unsigned char)k));
            cps_normalize(&s, isupper((unsigned char)k));
            cps_emit(e, &s);
            return 0;
        }
        if (k >= '1' && k <= '9') return re_fail(r, "backreferences are not supported");
        if (k == 'b' || k == 'B') return re_fail(r, "word boundaries are not supported");
        cp = re_escape_char(r);
    } else {
        cp = re_utf8(r);
    }
    if (cp < 0) return r->c->err;
    json_char_lit(e, (uint32_t)cp);
    return 0;
}

static int re_count(struct re *r, int *v) {
    long x = 0;
    if (r->p >= r->end || !isdigit((unsigned char)*r->p)) return re_fail(r, "expected a number in {}");
    while (r->p < r->end && isdigit((unsigned char)*r->p)) {
        x = x * 10 + (*r->p++ - '0');
        if (x > 10000) return re_fail(r, "repetition counts over 10000 are not supported");
    }
    *v = (int)x;
    return 0;
}

static int re_seq(struct re *r, struct strbuf *e) {
    bool any = false;
    while (r->p < r->end && *r->p != '|' && *r->p != ')') {
        /* a trailing $ ends the pattern (stripped by the caller), anywhere else it is refused */
        strbuf_puts(e, any ? " (" : "(");
        any = true;
        if (re_atom(r, e)) return r->c->err;
        strbuf_puts(e, ")");
        if (r->p >= r->end) break;
        char q = *r->p;
        if (q == '*' || q == '+' || q == '?') {
            r->p++;
            strbuf_printf(e, "%c", q);
        } else if (q == '{') {
            r->p++;
            int m = 0, n;
            if (re_count(r, &m)) return r->c->err;
            n = m;
            if (r->p < r->end && *r->p == ',') {
                r->p++;
                n = -1;
                if (r->p < r->end && *r->p != '}' && re_count(r, &n)) return r->c->err;
            }
            if (r->p >= r->end || *r->p != '}') return re_fail(r, "expected '}'");
            r->p++;
            if (n >= 0 && n < m) return re_fail(r, "repetition maximum below its minimum");
            if (n < 0) strbuf_printf(e, "{%d,}", m);
            else strbuf_printf(e, "{%d,%d}", m, n);
        } else {
            continue;
        }
        if (r->p < r->end && *r->p == '?') r->p++; /* lazy: the same strings */
        else if (r->p < r->end && *r->p == '+') return re_fail(r, "possessive quantifiers are not supported");
        if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '{')) return re_fail(r, "a quantifier after a quantifier");
    }
    if (!any) strbuf_puts(e, "\"\"");
    return 0;
}

static int re_alt(struct re *r, struct strbuf *e) {
    for (;;) {
        if (re_seq(r, e)) return r->c->err;
        if (r->p < r->end && *r->p == '|') {
            r->p++;
            strbuf_puts(e, " | ");
            continue;
        }
        return 0;
    }
}

static int visit_pattern(struct conv *c, const char *pat, struct strbuf *e) {
    size_t n = strlen(pat);
    bool start = n && pat[0] == '^', end = n > (size_t)start && pat[n - 1] == '$' && (n < 2 || pat[n - 2] != '\\');
    struct re r = {.c = c, .p = pat + start, .end = pat + n - end, .start = pat};
    use(c, P_CHAR | P_WS);
    strbuf_puts(e, "\"\\\"\" ");
    if (!start) strbuf_puts(e, "char* ");
    strbuf_puts(e, "(");
    if (re_alt(&r, e)) return c->err;
    if (r.p < r.end) return re_fail(&r, "unbalanced ')'");
    strbuf_puts(e, ")");
    if (!end) strbuf_puts(e, " char*");
    strbuf_puts(e, " \"\\\"\" ws");
    return 0;
}

static int get_count(struct conv *c, const json_t *s, const char *key, int64_t def, int64_t max, int64_t *out) {
    const json_t *v = json_object_get(s, key);
    *out = def;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0) return fail(c, key, "expected a non-negative integer");
    if (json_integer_value(v) > max) return fail(c, key, "values over %lld are not supported", (long long)max);
    *out = json_integer_value(v);
    return 0;
}

static int visit_string(struct conv *c, const json_t *s, struct strbuf *e) {
    const json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    int64_t mn, mx;
    if (get_count(c, s, "minLength", 0, 10000, &mn) || get_count(c, s, "maxLength", -1, 10000, &mx)) return c->err;
    bool lengths = mn > 0 || mx >= 0;
    if (mx >= 0 && mn > mx) return fail(c, "minLength", "minLength is above maxLength");
    if (fmt) {
        if (!json_is_string(fmt)) return fail(c, "format", "expected a string");
        if (pat || lengths) return fail(c, "format", "format with pattern, minLength or maxLength is not supported");
        const char *f = json_string_value(fmt);
        unsigned bits = !strcmp(f, "date") ? P_DATE : !strcmp(f, "time") ? P_TIME : !strcmp(f, "date-time") ? P_DATE | P_TIME
                        : !strcmp(f, "uuid") ? P_UUID : 0;
        if (!bits) return fail(c, "format", "format '%s' is not supported (date, time, date-time, uuid are)", f);
        use(c, bits | P_WS);
        strbuf_printf(e, "\"\\\"\" %s \"\\\"\" ws", bits == P_DATE ? "date" : bits == P_TIME ? "time" : bits == P_UUID ? "uuid" : "date \"T\" time");
        return 0;
    }
    if (pat) {
        if (!json_is_string(pat)) return fail(c, "pattern", "expected a string");
        if (lengths) return fail(c, "pattern", "pattern with minLength or maxLength is not supported");
        return visit_pattern(c, json_string_value(pat), e);
    }
    if (!lengths) {
        use(c, P_STRING);
        strbuf_puts(e, "string");
        return 0;
    }
    use(c, P_CHAR | P_WS);
    if (mx < 0) strbuf_printf(e, "\"\\\"\" char{%lld,} \"\\\"\" ws", (long long)mn);
    else strbuf_printf(e, "\"\\\"\" char{%lld,%lld} \"\\\"\" ws", (long long)mn, (long long)mx);
    return 0;
}

/* ---- objects ---- */

/* A JSON string key not equal to any of keys[0..n) (plain characters only, no escapes): a rule
 * per node of the keys' trie. Appends the rule's name. */
static int key_excluding(struct conv *c, const char *const *keys, size_t n, size_t depth, const char *prefix,
                         size_t plen, struct strbuf *e) {
    char name[64];
    rule_name(c, "key", name, sizeof name);
    strbuf_puts(e, name);
    struct strbuf r = {0};
    strbuf_printf(&r, "%s ::= ", name);
    bool is_key = false;
    struct cpset next = {.n = 0};
    /* the distinct next characters among keys with this prefix */
    uint32_t nexts[64];
    int n_next = 0;
    for (size_t i = 0; i < n; i++) {
        bool plain = true; /* keys that need escapes cannot be written by kchar anyway */
        for (const unsigned char *q = (const unsigned char *)keys[i]; *q; q++) plain &= *q >= 0x20 && *q != '"' && *q != '\\' && *q != 0x7F;
        if (!plain || strlen(keys[i]) < plen || memcmp(keys[i], prefix, plen)) continue;
        if (strlen(keys[i]) == plen) {
            is_key = true;
            continue;
        }
        struct re tmp = {.c = c, .p = keys[i] + plen, .end = keys[i] + strlen(keys[i]), .start = keys[i]};
        int32_t cp = re_utf8(&tmp);
        if (cp < 0) {
            free(r.s); /* r is this call's own rule */
            return c->err;
        }
        bool seen = false;
        for (int k = 0; k < n_next; k++) seen |= nexts[k] == (uint32_t)cp;
        if (!seen && n_next < 64) nexts[n_next++] = (uint32_t)cp, cps_add(&next, (uint32_t)cp, (uint32_t)cp);
    }
    bool first = true;
    if (!is_key) strbuf_puts(&r, "\"\\\"\""), first = false;
    /* a character no key continues with: free from here */
    cps_add(&next, 0, 0x1F);
    cps_add(&next, '"', '"');
    cps_add(&next, '\\', '\\');
    cps_add(&next, 0x7F, 0x7F);
    cps_normalize(&next, true);
    strbuf_puts(&r, first ? "" : " | ");
    first = false;
    strbuf_puts(&r, "[");
    for (int i = 0; i < next.n; i++) {
        cp_escape(&r, next.r[2 * i]);
        if (next.r[2 * i + 1] > next.r[2 * i]) {
            strbuf_puts(&r, "-");
            cp_escape(&r, next.r[2 * i + 1]);
        }
    }
    strbuf_puts(&r, "] kchar* \"\\\"\"");
    use(c, P_KCHAR);
    for (int k = 0; k < n_next && !c->err; k++) {
        char pre[512];
        if (plen + 4 >= sizeof pre) {
            fail(c, "properties", "property names too long");
            break;
        }
        memcpy(pre, prefix, plen);
        uint8_t u[4];
        uint32_t cp = nexts[k];
        int ul = cp < 0x80 ? (u[0] = (uint8_t)cp, 1)
                 : cp < 0x800 ? (u[0] = (uint8_t)(0xC0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 0x3F)), 2)
                 : cp < 0x10000 ? (u[0] = (uint8_t)(0xE0 | cp >> 12), u[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)),
                                   u[2] = (uint8_t)(0x80 | (cp & 0x3F)), 3)
                                : (u[0] = (uint8_t)(0xF0 | cp >> 18), u[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F)),
                                   u[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)), u[3] = (uint8_t)(0x80 | (cp & 0x3F)), 4);
        memcpy(pre + plen, u, (size_t)ul);
        strbuf_puts(&r, " | ");
        gbnf_lit(&r, (const char *)u, (size_t)ul);
        strbuf_puts(&r, " ");
        if (key_excluding(c, keys, n, depth + 1, pre, plen + (size_t)ul, &r)) break;
    }
    strbuf_puts(&r, "\n");
    strbuf_puts(&c->rules, r.s ? r.s : "");
    c->rules.oom |= r.oom;
    free(r.s);
    return c->err;
}

/* One "key": value pair's expression. */
static void kv_expr(struct conv *c, const char *key, const char *value_rule, struct strbuf *e) {
    json_t *k = json_string(key);
    char *txt = k ? json_dumps(k, JSON_ENCODE_ANY) : NULL;
    if (txt) gbnf_lit(e, txt, strlen(txt));
    else e->oom = true;
    free(txt);
    json_decref(k);
    strbuf_printf(e, " ws \":\" ws %s", value_rule);
    use(c, P_WS);
}

/* An expression as its own rule; its name into name. */
static void define(struct conv *c, const char *hint, const struct strbuf *body, char *name, size_t cap) {
    rule_name(c, hint, name, cap);
    strbuf_printf(&c->rules, "%s ::= ", name);
    strbuf_puts(&c->rules, body->s ? body->s : "\"\"");
    strbuf_puts(&c->rules, "\n");
    c->rules.oom |= body->oom;
}

static int visit_object(struct conv *c, const json_t *props, const json_t *required, const json_t *additional,
                        const json_t *s, struct strbuf *e) {
    size_t n = props ? json_object_size(props) : 0;
    const char **keys = calloc(n + 1, sizeof *keys);
    char (*vals)[64] = calloc(n + 1, sizeof *vals);
    bool *req = calloc(n + 1, 1);
    int rc = 0;
    if (!keys || !vals || !req) {
        rc = -ERR_NOMEM;
        goto out;
    }
    size_t i = 0, n_req = 0;
    const char *key;
    const json_t *sub;
    if (props) {
        size_t old = path_push(c, "properties");
        json_object_foreach((json_t *)props, key, sub) {
            keys[i] = key;
            size_t o2 = path_push(c, "%s", key);
            struct strbuf v = {0};
            rc = visit(c, sub, &v);
            if (!rc) define(c, key, &v, vals[i], sizeof vals[i]);
            free(v.s);
            path_pop(c, o2);
            if (rc) break;
            i++;
        }
        path_pop(c, old);
        if (rc) goto out;
    }
    if (required) {
        if (!json_is_array(required)) {
            rc = fail(c, "required", "expected an array of property names");
            goto out;
        }
        size_t k;
        const json_t *name;
        json_array_foreach(required, k, name) {
            size_t j = 0;
            while (j < n && (!json_is_string(name) || strcmp(keys[j], json_string_value(name)))) j++;
            if (j == n) {
                rc = fail(c, "required", "required property %s is not in properties",
                          json_is_string(name) ? json_string_value(name) : "(not a string)");
                goto out;
            }
            if (!req[j]) n_req++;
            req[j] = true;
        }
    }
    /* additional properties: none (false or absent), any (true or {}), or a schema */
    char extra[64] = "";
    if (additional && !json_is_false(additional)) {
        struct strbuf v = {0}, kv = {0};
        size_t old = path_push(c, "additionalProperties");
        rc = visit(c, additional, &v);
        path_pop(c, old);
        if (!rc) {
            char vname[64];
            define(c, "additional", &v, vname, sizeof vname);
            strbuf_puts(&kv, "\"\\\"\" ");
            rc = key_excluding(c, keys, n, 0, "", 0, &kv);
            if (!rc) {
                strbuf_printf(&kv, " ws \":\" ws %s", vname);
                define(c, "extra-kv", &kv, extra, sizeof extra);
            }
        }
        free(v.s);
        free(kv.s);
        if (rc) goto out;
    }
    int64_t mnp, mxp;
    if (get_count(c, s, "minProperties", 0, INT32_MAX, &mnp) || get_count(c, s, "maxProperties", -1, INT32_MAX, &mxp)) {
        rc = c->err;
        goto out;
    }
    if (mnp > (int64_t)n_req) {
        rc = fail(c, "minProperties", "minProperties above the number of required properties is not supported");
        goto out;
    }
    if (mxp >= 0 && (extra[0] || mxp < (int64_t)n)) {
        rc = fail(c, "maxProperties", "maxProperties below the number of possible properties is not supported");
        goto out;
    }
    /* tail rules from the end: T_i (something was written: each pair takes a comma) and S_i
     * (nothing yet). T_n / S_n: the additional pairs. */
    char t_next[64], s_next[64];
    {
        struct strbuf t = {0}, sb = {0};
        if (extra[0]) {
            strbuf_printf(&t, "(\",\" ws %s)*", extra);
            strbuf_printf(&sb, "(%s (\",\" ws %s)*)?", extra, extra);
        }
        define(c, "tail", &t, t_next, sizeof t_next);
        define(c, "tail", &sb, s_next, sizeof s_next);
        free(t.s);
        free(sb.s);
    }
    for (size_t j = n; j-- > 0;) {
        struct strbuf t = {0}, sb = {0}, kv = {0};
        kv_expr(c, keys[j], vals[j], &kv);
        if (req[j]) {
            strbuf_printf(&t, "\",\" ws %s %s", kv.s ? kv.s : "", t_next);
            strbuf_printf(&sb, "%s %s", kv.s ? kv.s : "", t_next);
        } else {
            strbuf_printf(&t, "\",\" ws %s %s | %s", kv.s ? kv.s : "", t_next, t_next);
            strbuf_printf(&sb, "%s %s | %s", kv.s ? kv.s : "", t_next, s_next);
        }
        define(c, keys[j], &t, t_next, sizeof t_next);
        define(c, keys[j], &sb, s_next, sizeof s_next);
        free(t.s);
        free(sb.s);
        free(kv.s);
    }
    strbuf_printf(e, "\"{\" ws %s \"}\" ws", s_next);
    use(c, P_WS);
out:
    free(keys);
    free(vals);
    free(req);
    return rc;
}

/* ---- arrays ---- */

static int visit_array(struct conv *c, const json_t *s, struct strbuf *e) {
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    const json_t *more = NULL; /* schema of the items after the prefix, NULL: none */
    if (json_is_true(json_object_get(s, "uniqueItems")))
        return fail(c, "uniqueItems", "keyword 'uniqueItems' is not supported");
    if (items && json_is_array(items)) { /* draft 7 tuple */
        if (prefix) return fail(c, "items", "items as an array beside prefixItems");
        prefix = items;
        const json_t *add = json_object_get(s, "additionalItems");
        more = add && !json_is_false(add) ? add : NULL;
    } else if (prefix) {
        if (!json_is_array(prefix)) return fail(c, "prefixItems", "expected an array of schemas");
        more = items && !json_is_false(items) ? items : NULL;
    } else {
        more = items ? (json_is_false(items) ? NULL : items) : json_true();
    }
    size_t k = prefix ? json_array_size(prefix) : 0;
    int64_t mn, mx;
    if (get_count(c, s, "minItems", 0, 10000, &mn) || get_count(c, s, "maxItems", -1, 10000, &mx)) return c->err;
    if (mx >= 0 && mn > mx) return fail(c, "minItems", "minItems is above maxItems");
    if (mx >= 0 && (size_t)mx < k) return fail(c, "maxItems", "maxItems below the number of prefixItems");
    if (!more && (size_t)mn > k) return fail(c, "minItems", "minItems above the items the schema allows");
    struct strbuf body = {0};
    int rc = 0;
    for (size_t i = 0; i < k && !rc; i++) {
        size_t old = path_push(c, "%s[%zu]", items == prefix ? "items" : "prefixItems", i);
        struct strbuf v = {0};
        rc = visit(c, json_array_get(prefix, i), &v);
        path_pop(c, old);
        if (!rc) {
            char name[64];
            define(c, "item", &v, name, sizeof name);
            strbuf_printf(&body, "%s%s", i ? " \",\" ws " : "", name);
        }
        free(v.s);
    }
    if (!rc && more) {
        size_t old = path_push(c, "%s", json_is_array(items) ? "additionalItems" : "items");
        struct strbuf v = {0};
        rc = visit(c, more, &v);
        path_pop(c, old);
        if (!rc) {
            char name[64];
            define(c, "item", &v, name, sizeof name);
            int64_t rmin = mn > (int64_t)k ? mn - (int64_t)k : 0, rmax = mx < 0 ? -1 : mx - (int64_t)k;
            if (k > 0) {
                if (rmax < 0) strbuf_printf(&body, " (\",\" ws %s){%lld,}", name, (long long)rmin);
                else if (rmax > 0) strbuf_printf(&body, " (\",\" ws %s){%lld,%lld}", name, (long long)rmin, (long long)rmax);
            } else if (rmax != 0) {
                char rep[64];
                if (rmax < 0) snprintf(rep, sizeof rep, "{%lld,}", (long long)(rmin > 0 ? rmin - 1 : 0));
                else snprintf(rep, sizeof rep, "{%lld,%lld}", (long long)(rmin > 0 ? rmin - 1 : 0), (long long)rmax - 1);
                if (rmin > 0) strbuf_printf(&body, "%s (\",\" ws %s)%s", name, name, rep);
                else strbuf_printf(&body, "(%s (\",\" ws %s)%s)?", name, name, rep);
            }
        }
        free(v.s);
    }
    if (!rc) {
        strbuf_printf(e, "\"[\" ws %s \"]\" ws", body.s ? body.s : "");
        use(c, P_WS);
    }
    free(body.s);
    return rc;
}

/* ---- $ref, allOf, types ---- */

static const json_t *resolve_ref(struct conv *c, const char *ref) {
    if (ref[0] != '#') return fail(c, "$ref", "only references inside the schema (#...) are supported"), NULL;
    const json_t *at = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/') return fail(c, "$ref", "anchors ($ref \"%s\") are not supported", ref), NULL;
    while (*p == '/') {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/' && n < sizeof tok - 1) {
            if (p[0] == '~' && p[1] == '0') tok[n++] = '~', p += 2;
            else if (p[0] == '~' && p[1] == '1') tok[n++] = '/', p += 2;
            else tok[n++] = *p++;
        }
        tok[n] = 0;
        if (json_is_object(at)) at = json_object_get(at, tok);
        else if (json_is_array(at)) at = json_array_get(at, (size_t)strtoul(tok, NULL, 10));
        else at = NULL;
        if (!at) return fail(c, "$ref", "$ref \"%s\" names nothing in the schema", ref), NULL;
    }
    return at;
}

static int visit_ref(struct conv *c, const char *ref, struct strbuf *e) {
    json_t *known = json_object_get(c->refs, ref);
    if (known) {
        strbuf_puts(e, json_string_value(known));
        return 0;
    }
    const json_t *target = resolve_ref(c, ref);
    if (!target) return c->err;
    char name[64];
    const char *slash = strrchr(ref, '/');
    rule_name(c, slash ? slash + 1 : "root", name, sizeof name);
    if (json_object_set_new(c->refs, ref, json_string(name))) return -ERR_NOMEM;
    struct strbuf v = {0};
    size_t old = path_push(c, "$ref");
    int rc = visit(c, target, &v);
    path_pop(c, old);
    if (!rc) {
        strbuf_printf(&c->rules, "%s ::= ", name);
        strbuf_puts(&c->rules, v.s ? v.s : "\"\"");
        strbuf_puts(&c->rules, "\n");
        c->rules.oom |= v.oom;
        strbuf_puts(e, name);
    }
    free(v.s);
    return rc;
}

/* allOf of object schemas: one object with every branch's properties and required. */
static int visit_all_of(struct conv *c, const json_t *s, struct strbuf *e) {
    const json_t *all = json_object_get(s, "allOf");
    if (!json_is_array(all)) return fail(c, "allOf", "expected an array of schemas");
    json_t *props = json_object(), *req = json_array();
    const json_t *additional = NULL;
    int rc = props && req ? 0 : -ERR_NOMEM;
    const json_t *parts[65];
    size_t n_parts = 0;
    parts[n_parts++] = s;
    size_t i;
    const json_t *b;
    json_array_foreach(all, i, b) {
        if (n_parts >= 65) return fail(c, "allOf", "more than 64 branches");
        for (int hops = 0; json_is_object(b) && json_object_get(b, "$ref") && hops < 16; hops++) {
            const json_t *r = json_object_get(b, "$ref");
            if (!json_is_string(r) || !(b = resolve_ref(c, json_string_value(r)))) return c->err ? c->err : fail(c, "allOf", "bad $ref");
        }
        parts[n_parts++] = b;
    }
    for (size_t k = 0; k < n_parts && !rc; k++) {
        const json_t *p = parts[k];
        const json_t *t = json_object_get(p, "type");
        if (!json_is_object(p) || (k > 0 && t && !(json_is_string(t) && !strcmp(json_string_value(t), "object")))) {
            size_t old = path_push(c, "allOf[%zu]", k - 1);
            rc = fail(c, NULL, "allOf is supported for object schemas only");
            path_pop(c, old);
            break;
        }
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)p, key, v) {
            if (k > 0 && !in_list(key, annotations) && strcmp(key, "type") && strcmp(key, "properties") &&
                strcmp(key, "required") && strcmp(key, "additionalProperties")) {
                size_t old = path_push(c, "allOf[%zu]", k - 1);
                rc = fail(c, key, "keyword '%s' inside allOf is not supported", key);
                path_pop(c, old);
                break;
            }
        }
        if (rc) break;
        json_t *pp = json_object_get(p, "properties");
        if (pp) json_object_update(props, pp);
        json_t *rq = json_object_get(p, "required");
        if (json_is_array(rq)) json_array_extend(req, rq);
        json_t *ad = json_object_get(p, "additionalProperties");
        if (ad) additional = ad;
    }
    if (!rc) {
        bool any = json_object_size(props) > 0;
        rc = visit_object(c, any ? props : NULL, json_array_size(req) ? req : NULL, additional, s, e);
    }
    json_decref(props);
    json_decref(req);
    return rc;
}

enum jtype { T_STRING = 1, T_INTEGER = 2, T_NUMBER = 4, T_BOOLEAN = 8, T_NULL = 16, T_OBJECT = 32, T_ARRAY = 64 };

static int type_bits(struct conv *c, const json_t *t, unsigned *out) {
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {{"string", T_STRING}, {"integer", T_INTEGER}, {"number", T_NUMBER}, {"boolean", T_BOOLEAN},
                 {"null", T_NULL},     {"object", T_OBJECT},   {"array", T_ARRAY}};
    const json_t *one;
    size_t i;
    *out = 0;
    if (json_is_string(t)) {
        for (size_t k = 0; k < sizeof names / sizeof *names; k++)
            if (!strcmp(json_string_value(t), names[k].name)) *out = names[k].bit;
        if (!*out) return fail(c, "type", "unknown type '%s'", json_string_value(t));
        return 0;
    }
    if (!json_is_array(t) || json_array_size(t) == 0) return fail(c, "type", "expected a type name or a list of them");
    json_array_foreach(t, i, one) {
        unsigned b;
        if (type_bits(c, one, &b)) return c->err;
        *out |= b;
    }
    return 0;
}

static int visit_type(struct conv *c, const json_t *s, unsigned t, struct strbuf *e) {
    switch (t) {
    case T_STRING: return visit_string(c, s, e);
    case T_INTEGER: return visit_integer(c, s, e);
    case T_NUMBER: return visit_number(c, s, e);
    case T_BOOLEAN: use(c, P_BOOLEAN); strbuf_puts(e, "boolean"); return 0;
    case T_NULL: use(c, P_NULL); strbuf_puts(e, "null"); return 0;
    case T_ARRAY: {
        struct strbuf v = {0};
        int rc = visit_array(c, s, &v);
        if (!rc) {
            char name[64];
            define(c, "array", &v, name, sizeof name);
            strbuf_puts(e, name);
        }
        free(v.s);
        return rc;
    }
    case T_OBJECT: {
        struct strbuf v = {0};
        const json_t *props = json_object_get(s, "properties");
        if (props && !json_is_object(props)) return fail(c, "properties", "expected an object of schemas");
        int rc = visit_object(c, props, json_object_get(s, "required"), json_object_get(s, "additionalProperties"), s, &v);
        if (!rc) {
            char name[64];
            define(c, "object", &v, name, sizeof name);
            strbuf_puts(e, name);
        }
        free(v.s);
        return rc;
    }
    }
    return -ERR_INVAL;
}

static int visit(struct conv *c, const json_t *s, struct strbuf *e) {
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        use(c, P_VALUE);
        strbuf_puts(e, "value");
        return 0;
    }
    if (json_is_false(s)) return fail(c, NULL, "the schema false matches nothing");
    if (!json_is_object(s)) return fail(c, NULL, "expected a schema (an object or a boolean)");
    if (++c->depth > 64) return fail(c, NULL, "schemas nested too deep");
    const char *key;
    json_t *v;
    int rc = 0;
    size_t n_constraints = 0;
    json_object_foreach((json_t *)s, key, v) {
        if (in_list(key, annotations)) continue;
        if (!in_list(key, honoured)) {
            rc = fail(c, key, "keyword '%s' is not supported", key);
            goto out;
        }
        n_constraints++;
    }
    const json_t *ref = json_object_get(s, "$ref"), *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
    const json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    if (ref) {
        if (n_constraints > 1) {
            rc = fail(c, "$ref", "keywords beside $ref are not supported");
            goto out;
        }
        if (!json_is_string(ref)) {
            rc = fail(c, "$ref", "expected a string");
            goto out;
        }
        rc = visit_ref(c, json_string_value(ref), e);
        goto out;
    }
    if (cst || en) {
        if (cst) {
            rc = json_lit(c, e, cst, "const");
            goto out;
        }
        if (!json_is_array(en) || json_array_size(en) == 0) {
            rc = fail(c, "enum", "expected a non-empty array");
            goto out;
        }
        size_t i;
        json_t *x;
        strbuf_puts(e, "(");
        json_array_foreach(en, i, x) {
            if (i) strbuf_puts(e, " | ");
            if ((rc = json_lit(c, e, x, "enum"))) goto out;
        }
        strbuf_puts(e, ")");
        goto out;
    }
    if (any || one) {
        const char *kw = any ? "anyOf" : "oneOf";
        const json_t *alts = any ? any : one;
        if (any && one) {
            rc = fail(c, "oneOf", "anyOf and oneOf together are not supported");
            goto out;
        }
        if (!json_is_array(alts) || json_array_size(alts) == 0) {
            rc = fail(c, kw, "expected a non-empty array of schemas");
            goto out;
        }
        /* sibling constraints would apply to every branch: only "nullable" is taken */
        json_object_foreach((json_t *)s, key, v)
            if (!in_list(key, annotations) && strcmp(key, kw) && strcmp(key, "nullable")) {
                rc = fail(c, key, "keyword '%s' beside %s is not supported", key, kw);
                goto out;
            }
        size_t i;
        json_t *x;
        strbuf_puts(e, "(");
        json_array_foreach(alts, i, x) {
            if (i) strbuf_puts(e, " | ");
            size_t old = path_push(c, "%s[%zu]", kw, i);
            rc = visit(c, x, e);
            path_pop(c, old);
            if (rc) goto out;
        }
        if (json_is_true(json_object_get(s, "nullable"))) {
            use(c, P_NULL);
            strbuf_puts(e, " | null");
        }
        strbuf_puts(e, ")");
        goto out;
    }
    if (json_object_get(s, "allOf")) {
        const json_t *t = json_object_get(s, "type");
        if (t && !(json_is_string(t) && !strcmp(json_string_value(t), "object"))) {
            rc = fail(c, "allOf", "allOf is supported for object schemas only");
            goto out;
        }
        struct strbuf o = {0};
        rc = visit_all_of(c, s, &o);
        if (!rc) {
            char name[64];
            define(c, "object", &o, name, sizeof name);
            strbuf_puts(e, name);
        }
        free(o.s);
        goto out;
    }
    unsigned types = 0;
    const json_t *t = json_object_get(s, "type");
    if (t) {
        if ((rc = type_bits(c, t, &types))) goto out;
    } else { /* the types the keywords speak of */
        static const struct {
            const char *kw;
            unsigned t;
        } infer[] = {{"properties", T_OBJECT}, {"required", T_OBJECT}, {"additionalProperties", T_OBJECT},
                     {"minProperties", T_OBJECT}, {"maxProperties", T_OBJECT}, {"items", T_ARRAY},
                     {"prefixItems", T_ARRAY}, {"minItems", T_ARRAY}, {"maxItems", T_ARRAY},
                     {"additionalItems", T_ARRAY}, {"minLength", T_STRING}, {"maxLength", T_STRING},
                     {"pattern", T_STRING}, {"format", T_STRING}, {"minimum", T_NUMBER}, {"maximum", T_NUMBER},
                     {"exclusiveMinimum", T_NUMBER}, {"exclusiveMaximum", T_NUMBER}};
        for (size_t k = 0; k < sizeof infer / sizeof *infer; k++)
            if (json_object_get(s, infer[k].kw)) types |= infer[k].t;
        if (!types) {
            use(c, P_VALUE);
            strbuf_puts(e, "value");
            goto out;
        }
    }
    if (json_is_true(json_object_get(s, "nullable"))) types |= T_NULL;
    if (types & T_NUMBER) types &= ~(unsigned)T_INTEGER; /* integers are numbers */
    int n_types = __builtin_popcount(types);
    if (n_types > 1) strbuf_puts(e, "(");
    bool first = true;
    for (unsigned bit = 1; bit <= T_ARRAY && !rc; bit <<= 1) {
        if (!(types & bit)) continue;
        if (!first) strbuf_puts(e, " | ");
        first = false;
        rc = visit_type(c, s, bit, e);
    }
    if (n_types > 1) strbuf_puts(e, ")");
out:
    c->depth--;
    return rc;
}

/* ---- entry points ---- */

static int finish(struct conv *c, const char *root_expr, char **out) {
    struct strbuf g = {0};
    strbuf_printf(&g, "root ::= %s\n", root_expr);
    strbuf_puts(&g, c->rules.s ? c->rules.s : "");
    for (size_t i = 0; i < sizeof prims / sizeof *prims; i++)
        if (c->used & prims[i].bit) strbuf_puts(&g, prims[i].text);
    if (g.oom || c->rules.oom) {
        free(g.s);
        return -ERR_NOMEM;
    }
    *out = g.s;
    return 0;
}

int json_schema_to_grammar(const json_t *schema, char **out, char *where, size_t where_len, char *why, size_t why_len) {
    *out = NULL;
    if (where_len) where[0] = 0;
    if (why_len) why[0] = 0;
    struct conv c = {.root = schema, .refs = json_object(), .where = where, .where_len = where_len, .why = why,
                     .why_len = why_len};
    if (!c.refs) return -ERR_NOMEM;
    struct strbuf e = {0};
    int rc = visit(&c, schema, &e);
    if (!rc && e.oom) rc = -ERR_NOMEM;
    if (!rc) rc = finish(&c, e.s, out);
    free(e.s);
    free(c.rules.s);
    json_decref(c.refs);
    return rc;
}

int json_schema_object_grammar(char **out) {
    struct conv c = {0};
    use(&c, P_VALUE);
    return finish(&c, "object", out);
}
