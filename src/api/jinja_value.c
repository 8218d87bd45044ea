/* jinja_value.c: the Jinja engine's arena and values: building, comparing, printing as Python
 * prints them, JSON out (json.dumps) and in (from jansson). See jinja_impl.h. */
#include "api/jinja_impl.h"

#include "common/err.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jfail(struct jfail *f, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
    f->code = code;
    longjmp(f->jb, 1);
}

/* --- arena --------------------------------------------------------------------------------- */

struct jblock {
    struct jblock *next;
    size_t size;
    _Alignas(16) char data[];
};

#define JA_BLOCK 65536

void ja_init(struct jarena *a, size_t cap, struct jfail *fail) {
    memset(a, 0, sizeof *a);
    a->cap = cap;
    a->fail = fail;
}

void ja_free(struct jarena *a) {
    for (struct jblock *b = a->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    a->blocks = NULL;
    a->cur = NULL;
    a->left = 0;
    a->total = 0;
}

static struct jblock *ja_block(struct jarena *a, size_t size) {
    if (size > a->cap || a->total > a->cap - size)
        jfail(a->fail, -ERR_TOOBIG, "template needs more than %zu MiB of memory", a->cap >> 20);
    struct jblock *b = malloc(sizeof *b + size);
    if (!b) jfail(a->fail, -ERR_NOMEM, "out of memory");
    b->size = size;
    a->total += size;
    return b;
}

void *ja_alloc(struct jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (n > a->left) {
        if (n > JA_BLOCK / 4) {
            /* big: a block of its own, behind the current one so its free space stays usable */
            struct jblock *b = ja_block(a, n);
            if (a->blocks) {
                b->next = a->blocks->next;
                a->blocks->next = b;
            } else {
                b->next = NULL;
                a->blocks = b;
            }
            memset(b->data, 0, n);
            return b->data;
        }
        struct jblock *b = ja_block(a, JA_BLOCK);
        b->next = a->blocks;
        a->blocks = b;
        a->cur = b->data;
        a->left = JA_BLOCK;
    }
    void *p = a->cur;
    a->cur += n;
    a->left -= n;
    memset(p, 0, n);
    return p;
}

char *ja_strndup(struct jarena *a, const char *s, size_t n) {
    char *d = ja_alloc(a, n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* --- values -------------------------------------------------------------------------------- */

struct jv jv_str_copy(struct jarena *a, const char *s, size_t n) {
    if (n > UINT32_MAX) jfail(a->fail, -ERR_TOOBIG, "string longer than 4 GiB");
    return jv_strn(ja_strndup(a, s, n), (uint32_t)n);
}

struct jv jv_list_new(struct jarena *a, uint32_t cap) {
    struct jv v = {0};
    v.t = JT_LIST;
    v.u.l = ja_alloc(a, sizeof *v.u.l);
    if (cap) {
        v.u.l->v = ja_alloc(a, sizeof *v.u.l->v * cap);
        v.u.l->cap = cap;
    }
    return v;
}

struct jv jv_dict_new(struct jarena *a, uint32_t cap) {
    struct jv v = {0};
    v.t = JT_DICT;
    v.u.d = ja_alloc(a, sizeof *v.u.d);
    if (cap) {
        v.u.d->kv = ja_alloc(a, sizeof *v.u.d->kv * cap);
        v.u.d->cap = cap;
    }
    return v;
}

void jlist_push(struct jarena *a, struct jlist *l, struct jv v) {
    if (l->n == l->cap) {
        if (l->cap >= UINT32_MAX / 2) jfail(a->fail, -ERR_TOOBIG, "list too long");
        uint32_t cap = l->cap ? l->cap * 2 : 4;
        struct jv *nv = ja_alloc(a, sizeof *nv * cap);
        if (l->n) memcpy(nv, l->v, sizeof *nv * l->n);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

static bool key_eq(struct jv a, struct jv b) {
    if (a.t == JT_STR && b.t == JT_STR) return a.n == b.n && memcmp(a.u.s, b.u.s, a.n) == 0;
    if (a.t == JT_STR || b.t == JT_STR) return false;
    if ((a.t == JT_INT || a.t == JT_BOOL) && (b.t == JT_INT || b.t == JT_BOOL))
        return (a.t == JT_INT ? a.u.i : a.u.b) == (b.t == JT_INT ? b.u.i : b.u.b);
    if (a.t == JT_FLOAT || b.t == JT_FLOAT) {
        double x = a.t == JT_FLOAT ? a.u.f : a.t == JT_INT ? (double)a.u.i : a.t == JT_BOOL ? a.u.b : NAN;
        double y = b.t == JT_FLOAT ? b.u.f : b.t == JT_INT ? (double)b.u.i : b.t == JT_BOOL ? b.u.b : NAN;
        return x == y;
    }
    return a.t == b.t && (a.t == JT_NONE || a.t == JT_UNDEF);
}

struct jv *jdict_get(const struct jdict *d, struct jv key) {
    for (uint32_t i = 0; i < d->n; i++)
        if (key_eq(d->kv[i].k, key)) return &d->kv[i].v;
    return NULL;
}

struct jv *jdict_get_str(const struct jdict *d, const char *key) {
    return jdict_get(d, jv_strn(key, (uint32_t)strlen(key)));
}

void jdict_set(struct jarena *a, struct jdict *d, struct jv key, struct jv v) {
    struct jv *old = jdict_get(d, key);
    if (old) {
        *old = v;
        return;
    }
    if (d->n == d->cap) {
        if (d->cap >= UINT32_MAX / 2) jfail(a->fail, -ERR_TOOBIG, "dict too big");
        uint32_t cap = d->cap ? d->cap * 2 : 4;
        struct jkv *nkv = ja_alloc(a, sizeof *nkv * cap);
        if (d->n) memcpy(nkv, d->kv, sizeof *nkv * d->n);
        d->kv = nkv;
        d->cap = cap;
    }
    d->kv[d->n].k = key;
    d->kv[d->n].v = v;
    d->n++;
}

bool jdict_del(struct jdict *d, struct jv key) {
    for (uint32_t i = 0; i < d->n; i++)
        if (key_eq(d->kv[i].k, key)) {
            memmove(d->kv + i, d->kv + i + 1, sizeof *d->kv * (d->n - i - 1));
            d->n--;
            return true;
        }
    return false;
}

bool jv_truthy(struct jv v) {
    switch (v.t) {
    case JT_BOOL: return v.u.b;
    case JT_INT: return v.u.i != 0;
    case JT_FLOAT: return v.u.f != 0.0;
    case JT_STR: return v.n > 0;
    case JT_LIST: return v.u.l->n > 0;
    case JT_DICT: return v.u.d->ns || v.u.d->n > 0;
    case JT_FUNC: return true;
    default: return false;
    }
}

const char *jv_type_name(struct jv v) {
    static const char *const names[] = {"undefined", "none", "boolean", "integer", "float",
                                        "string", "list", "dict", "function"};
    if (v.t == JT_DICT && v.u.d->ns) return "namespace";
    return v.t < sizeof names / sizeof *names ? names[v.t] : "?";
}

static bool is_num(struct jv v) { return v.t == JT_INT || v.t == JT_FLOAT || v.t == JT_BOOL; }
static double num_f(struct jv v) {
    return v.t == JT_FLOAT ? v.u.f : v.t == JT_INT ? (double)v.u.i : (double)v.u.b;
}

bool jv_equal(struct jfail *f, struct jv a, struct jv b, int depth) {
    if (depth > JV_MAX_DEPTH) jfail(f, -ERR_TOOBIG, "values nested too deeply to compare");
    if (is_num(a) && is_num(b)) {
        if (a.t != JT_FLOAT && b.t != JT_FLOAT)
            return (a.t == JT_INT ? a.u.i : a.u.b) == (b.t == JT_INT ? b.u.i : b.u.b);
        return num_f(a) == num_f(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JT_UNDEF:
    case JT_NONE: return true;
    case JT_STR: return a.n == b.n && memcmp(a.u.s, b.u.s, a.n) == 0;
    case JT_LIST:
        if (a.u.l->n != b.u.l->n) return false;
        for (uint32_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal(f, a.u.l->v[i], b.u.l->v[i], depth + 1)) return false;
        return true;
    case JT_DICT:
        if (a.u.d == b.u.d) return true;
        if (a.u.d->ns || b.u.d->ns || a.u.d->n != b.u.d->n) return false;
        for (uint32_t i = 0; i < a.u.d->n; i++) {
            struct jv *o = jdict_get(b.u.d, a.u.d->kv[i].k);
            if (!o || !jv_equal(f, a.u.d->kv[i].v, *o, depth + 1)) return false;
        }
        return true;
    case JT_FUNC: return a.u.fn == b.u.fn;
    default: return false;
    }
}

int jv_compare(struct jfail *f, struct jv a, struct jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.t != JT_FLOAT && b.t != JT_FLOAT) {
            int64_t x = a.t == JT_INT ? a.u.i : a.u.b, y = b.t == JT_INT ? b.u.i : b.u.b;
            return x < y ? -1 : x > y;
        }
        double x = num_f(a), y = num_f(b);
        return x < y ? -1 : x > y;
    }
    if (a.t == JT_STR && b.t == JT_STR) {
        size_t n = a.n < b.n ? a.n : b.n;
        int c = memcmp(a.u.s, b.u.s, n);
        if (c) return c < 0 ? -1 : 1;
        return a.n < b.n ? -1 : a.n > b.n;
    }
    if (a.t == JT_LIST && b.t == JT_LIST) {
        uint32_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (uint32_t i = 0; i < n; i++) {
            int c = jv_compare(f, a.u.l->v[i], b.u.l->v[i]);
            if (c) return c;
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    jfail(f, -ERR_INVAL, "cannot order %s and %s", jv_type_name(a), jv_type_name(b));
}

/* --- text buffers -------------------------------------------------------------------------- */

void jbuf_init(struct jbuf *b, struct jarena *a, size_t max) {
    b->p = NULL;
    b->n = b->cap = 0;
    b->max = max;
    b->a = a;
}

void jbuf_put(struct jbuf *b, const char *s, size_t n) {
    if (n == 0) return;
    if (n > b->max || b->n > b->max - n)
        jfail(b->a->fail, -ERR_TOOBIG, "template output longer than %zu bytes", b->max);
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n) cap *= 2;
        char *p = ja_alloc(b->a, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

void jbuf_puts(struct jbuf *b, const char *s) { jbuf_put(b, s, strlen(s)); }

struct jv jbuf_value(struct jbuf *b) {
    if (b->n > UINT32_MAX) jfail(b->a->fail, -ERR_TOOBIG, "string longer than 4 GiB");
    return jv_strn(b->p ? b->p : "", (uint32_t)b->n);
}

/* --- printing ------------------------------------------------------------------------------ */

/* Python's repr(float): the shortest digits that read back the same, in fixed notation for
 * exponents -5..15 (with ".0" when whole) and scientific otherwise ("1e-05", "1e+16"). */
void jv_write_float(struct jbuf *b, double f) {
    if (isnan(f)) return jbuf_puts(b, "nan");
    if (isinf(f)) return jbuf_puts(b, f < 0 ? "-inf" : "inf");
    if (f == 0) return jbuf_puts(b, signbit(f) ? "-0.0" : "0.0");
    char e[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    /* e is "-d.ddde+XX": split into sign, digits and exponent */
    const char *p = e;
    bool neg = *p == '-';
    if (neg) p++;
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int exp = atoi(p + 1);
    char out[64];
    int o = 0;
    if (neg) out[o++] = '-';
    if (exp < -4 || exp >= 16) {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        o += snprintf(out + o, sizeof out - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -exp - 1; i++) out[o++] = '0';
        for (int i = 0; i < nd; i++) out[o++] = digits[i];
    } else {
        for (int i = 0; i <= exp; i++) out[o++] = i < nd ? digits[i] : '0';
        out[o++] = '.';
        if (nd > exp + 1)
            for (int i = exp + 1; i < nd; i++) out[o++] = digits[i];
        else
            out[o++] = '0';
    }
    jbuf_put(b, out, (size_t)o);
}

static void write_str_repr(struct jbuf *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jbuf_putc(b, q);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == (unsigned char)q || c == '\\') {
            jbuf_putc(b, '\\');
            jbuf_putc(b, (char)c);
        } else if (c == '\n') jbuf_puts(b, "\\n");
        else if (c == '\r') jbuf_puts(b, "\\r");
        else if (c == '\t') jbuf_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f) {
            char x[8];
            snprintf(x, sizeof x, "\\x%02x", c);
            jbuf_puts(b, x);
        } else jbuf_putc(b, (char)c);
    }
    jbuf_putc(b, q);
}

static void write_value(struct jbuf *b, struct jv v, int depth, bool repr) {
    if (depth > JV_MAX_DEPTH) jfail(b->a->fail, -ERR_TOOBIG, "values nested too deeply to print");
    char num[32];
    switch (v.t) {
    case JT_UNDEF: break;
    case JT_NONE: jbuf_puts(b, "None"); break;
    case JT_BOOL: jbuf_puts(b, v.u.b ? "True" : "False"); break;
    case JT_INT:
        snprintf(num, sizeof num, "%lld", (long long)v.u.i);
        jbuf_puts(b, num);
        break;
    case JT_FLOAT: jv_write_float(b, v.u.f); break;
    case JT_STR:
        if (repr) write_str_repr(b, v.u.s, v.n);
        else jbuf_put(b, v.u.s, v.n);
        break;
    case JT_LIST:
        jbuf_putc(b, '[');
        for (uint32_t i = 0; i < v.u.l->n; i++) {
            if (i) jbuf_puts(b, ", ");
            write_value(b, v.u.l->v[i], depth + 1, true);
        }
        jbuf_putc(b, ']');
        break;
    case JT_DICT:
        if (v.u.d->ns) jbuf_puts(b, "<Namespace ");
        jbuf_putc(b, '{');
        for (uint32_t i = 0; i < v.u.d->n; i++) {
            if (i) jbuf_puts(b, ", ");
            write_value(b, v.u.d->kv[i].k, depth + 1, true);
            jbuf_puts(b, ": ");
            write_value(b, v.u.d->kv[i].v, depth + 1, true);
        }
        jbuf_putc(b, '}');
        if (v.u.d->ns) jbuf_putc(b, '>');
        break;
    case JT_FUNC:
        jbuf_puts(b, "<function ");
        jbuf_puts(b, v.u.fn->name ? v.u.fn->name : "?");
        jbuf_putc(b, '>');
        break;
    }
}

void jv_write_str(struct jbuf *b, struct jv v, int depth) { write_value(b, v, depth, false); }
void jv_write_repr(struct jbuf *b, struct jv v, int depth) { write_value(b, v, depth, true); }

struct jv jv_to_str(struct jarena *a, struct jv v) {
    if (v.t == JT_STR) return v;
    if (v.t == JT_UNDEF) return jv_strn("", 0);
    struct jbuf b;
    jbuf_init(&b, a, UINT32_MAX);
    jv_write_str(&b, v, 0);
    return jbuf_value(&b);
}

/* --- JSON out ------------------------------------------------------------------------------ */

/* The code point at s (n bytes left) and its length; invalid bytes read as themselves. */
static uint32_t utf8_next(const unsigned char *s, size_t n, size_t *len) {
    unsigned c = s[0];
    int need = c >= 0xf0 && c < 0xf8 ? 3 : c >= 0xe0 ? 2 : c >= 0xc0 ? 1 : 0;
    if (c < 0x80 || need == 0 || (size_t)need + 1 > n) {
        *len = 1;
        return c;
    }
    uint32_t cp = c & (0x3f >> need);
    for (int i = 1; i <= need; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *len = 1;
            return c;
        }
        cp = cp << 6 | (s[i] & 0x3f);
    }
    *len = (size_t)need + 1;
    return cp;
}

static void write_json_string(struct jbuf *b, const char *s, size_t n, bool ensure_ascii) {
    static const char hex[] = "0123456789abcdef";
    jbuf_putc(b, '"');
    size_t run = 0; /* bytes copied as they are, flushed in one put */
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[16];
        size_t len = 1;
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            esc = u;
        } else if (c >= 0x80 && ensure_ascii) {
            uint32_t cp = utf8_next((const unsigned char *)s + i, n - i, &len);
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000, hi = 0xd800 | (v >> 10), lo = 0xdc00 | (v & 0x3ff);
                snprintf(u, sizeof u, "\\u%c%c%c%c\\u%c%c%c%c", hex[hi >> 12], hex[hi >> 8 & 15],
                         hex[hi >> 4 & 15], hex[hi & 15], hex[lo >> 12], hex[lo >> 8 & 15],
                         hex[lo >> 4 & 15], hex[lo & 15]);
            } else {
                snprintf(u, sizeof u, "\\u%04x", cp);
            }
            esc = u;
        }
        if (esc) {
            jbuf_put(b, s + i - run, run);
            run = 0;
            jbuf_puts(b, esc);
            i += len;
        } else {
            run++;
            i++;
        }
    }
    jbuf_put(b, s + n - run, run);
    jbuf_putc(b, '"');
}

static void json_newline(struct jbuf *b, const struct jjson_opts *o, int level) {
    jbuf_putc(b, '\n');
    for (int i = 0; i < level; i++) jbuf_puts(b, o->indent);
}

static int sort_cmp_fail_free(const void *x, const void *y) {
    const struct jkv *a = x, *b = y;
    if (a->k.t == JT_STR && b->k.t == JT_STR) {
        size_t n = a->k.n < b->k.n ? a->k.n : b->k.n;
        int c = memcmp(a->k.u.s, b->k.u.s, n);
        return c ? c : (a->k.n > b->k.n) - (a->k.n < b->k.n);
    }
    return (a->k.t > b->k.t) - (a->k.t < b->k.t);
}

void jv_write_json(struct jbuf *b, struct jv v, const struct jjson_opts *o, int depth) {
    if (depth > JV_MAX_DEPTH) jfail(b->a->fail, -ERR_TOOBIG, "values nested too deeply for tojson");
    char num[32];
    switch (v.t) {
    case JT_UNDEF:
    case JT_NONE: jbuf_puts(b, "null"); break;
    case JT_BOOL: jbuf_puts(b, v.u.b ? "true" : "false"); break;
    case JT_INT:
        snprintf(num, sizeof num, "%lld", (long long)v.u.i);
        jbuf_puts(b, num);
        break;
    case JT_FLOAT:
        if (isnan(v.u.f)) jbuf_puts(b, "NaN");
        else if (isinf(v.u.f)) jbuf_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else jv_write_float(b, v.u.f);
        break;
    case JT_STR: write_json_string(b, v.u.s, v.n, o->ensure_ascii); break;
    case JT_LIST:
        if (v.u.l->n == 0) {
            jbuf_puts(b, "[]");
            break;
        }
        jbuf_putc(b, '[');
        for (uint32_t i = 0; i < v.u.l->n; i++) {
            if (i) jbuf_puts(b, o->item_sep);
            if (o->indent) json_newline(b, o, depth + 1);
            jv_write_json(b, v.u.l->v[i], o, depth + 1);
        }
        if (o->indent) json_newline(b, o, depth);
        jbuf_putc(b, ']');
        break;
    case JT_DICT: {
        if (v.u.d->n == 0) {
            jbuf_puts(b, "{}");
            break;
        }
        const struct jkv *kv = v.u.d->kv;
        if (o->sort_keys) {
            struct jkv *sorted = ja_alloc(b->a, sizeof *sorted * v.u.d->n);
            memcpy(sorted, kv, sizeof *sorted * v.u.d->n);
            qsort(sorted, v.u.d->n, sizeof *sorted, sort_cmp_fail_free);
            kv = sorted;
        }
        jbuf_putc(b, '{');
        for (uint32_t i = 0; i < v.u.d->n; i++) {
            if (i) jbuf_puts(b, o->item_sep);
            if (o->indent) json_newline(b, o, depth + 1);
            struct jv k = kv[i].k;
            if (k.t == JT_STR) {
                write_json_string(b, k.u.s, k.n, o->ensure_ascii);
            } else { /* json.dumps writes scalar keys as strings */
                jbuf_putc(b, '"');
                if (k.t == JT_NONE) jbuf_puts(b, "null");
                else if (k.t == JT_BOOL) jbuf_puts(b, k.u.b ? "true" : "false");
                else jv_write_str(b, k, depth + 1);
                jbuf_putc(b, '"');
            }
            jbuf_puts(b, o->key_sep);
            jv_write_json(b, kv[i].v, o, depth + 1);
        }
        if (o->indent) json_newline(b, o, depth);
        jbuf_putc(b, '}');
        break;
    }
    case JT_FUNC: jfail(b->a->fail, -ERR_INVAL, "a function is not JSON serializable");
    }
}

/* --- JSON in ------------------------------------------------------------------------------- */

struct jv jv_from_json(struct jarena *a, const json_t *j, int depth) {
    if (depth > 4 * JV_MAX_DEPTH) jfail(a->fail, -ERR_TOOBIG, "JSON nested too deeply");
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        struct jv d = jv_dict_new(a, (uint32_t)json_object_size(j));
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) {
            jdict_set(a, d.u.d, jv_str_copy(a, k, strlen(k)), jv_from_json(a, v, depth + 1));
        }
        return d;
    }
    case JSON_ARRAY: {
        struct jv l = jv_list_new(a, (uint32_t)json_array_size(j));
        for (size_t i = 0; i < json_array_size(j); i++)
            jlist_push(a, l.u.l, jv_from_json(a, json_array_get(j, i), depth + 1));
        return l;
    }
    case JSON_STRING: return jv_str_copy(a, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    default: return jv_none();
    }
}

/* --- UTF-8 --------------------------------------------------------------------------------- */

size_t ju_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

size_t ju_offset(const char *s, size_t n, size_t cp) {
    size_t i = 0;
    for (; i < n; i++)
        if (((unsigned char)s[i] & 0xc0) != 0x80) {
            if (cp == 0) return i;
            cp--;
        }
    return n;
}
