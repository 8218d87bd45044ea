/* jinja.c: rendering a parsed template (see jinja.h): scopes, statements, expressions, and the
 * filters, tests, methods and global functions chat templates call. */
#include "api/jinja.h"

#include "api/jinja_impl.h"
#include "common/err.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --- render state -------------------------------------------------------------------------- */

struct jscope {
    struct jscope *parent;
    uint32_t n, cap;
    const char **names;
    struct jv *vals;
};

struct jrender {
    struct jfail fail;
    struct jarena a;
    const struct jinja_template *t;
    const struct jinja_limits *lim;
    struct jbuf *out;           /* where output goes now (a macro's or block's own buffer inside one) */
    struct jscope *root;        /* the template's globals and top-level sets */
    uint64_t steps;
    int call_depth;
    int depth;                  /* eval and exec frames on the C stack */
    int loop_ctl;               /* 1 break, 2 continue: unwinding to the innermost loop */
    struct jv block_text;       /* the text a set or filter block's filters apply to */
    struct jv pending_caller;   /* a call block's body, for the macro it calls */
    int64_t now;
};

_Noreturn __attribute__((format(printf, 3, 4)))
static void rfail(struct jrender *r, const struct jnode *n, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n) jfail(&r->fail, -ERR_INVAL, "line %d: %s", jinja_line(r->t, n->pos), msg);
    jfail(&r->fail, -ERR_INVAL, "%s", msg);
}

static void step(struct jrender *r) {
    if (++r->steps > r->lim->max_steps)
        jfail(&r->fail, -ERR_TOOBIG, "template ran more than %llu steps", (unsigned long long)r->lim->max_steps);
}

static struct jscope *scope_new(struct jrender *r, struct jscope *parent) {
    struct jscope *s = ja_alloc(&r->a, sizeof *s);
    s->parent = parent;
    return s;
}

static struct jv *scope_find_local(struct jscope *s, const char *name) {
    for (uint32_t i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) return &s->vals[i];
    return NULL;
}

static void scope_set(struct jrender *r, struct jscope *s, const char *name, struct jv v) {
    struct jv *old = scope_find_local(s, name);
    if (old) {
        *old = v;
        return;
    }
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 8;
        const char **names = ja_alloc(&r->a, sizeof *names * cap);
        struct jv *vals = ja_alloc(&r->a, sizeof *vals * cap);
        if (s->n) {
            memcpy(names, s->names, sizeof *names * s->n);
            memcpy(vals, s->vals, sizeof *vals * s->n);
        }
        s->names = names;
        s->vals = vals;
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n] = v;
    s->n++;
}

static struct jv str_lit(const char *s) { return jv_strn(s, (uint32_t)strlen(s)); }

static struct jv make_func(struct jrender *r, jbuiltin_fn fn, struct jv self, const char *name) {
    struct jfunc *f = ja_alloc(&r->a, sizeof *f);
    f->fn = fn;
    f->self = self;
    f->name = name;
    struct jv v = {0};
    v.t = JT_FUNC;
    v.u.fn = f;
    return v;
}

/* --- arguments ----------------------------------------------------------------------------- */

/* Argument `pos` (positional) or `name` (keyword), or NULL when absent. */
static const struct jv *arg(const struct jargs *a, uint32_t pos, const char *name) {
    uint32_t npos = a->n - a->nkw;
    if (pos < npos) return &a->v[pos];
    if (name)
        for (uint32_t i = 0; i < a->nkw; i++)
            if (!strcmp(a->kw[i], name)) return &a->v[npos + i];
    return NULL;
}

static bool arg_bool(const struct jargs *a, uint32_t pos, const char *name, bool def) {
    const struct jv *v = arg(a, pos, name);
    return v && v->t != JT_UNDEF ? jv_truthy(*v) : def;
}

static struct jv arg_str(struct jrender *r, const struct jargs *a, uint32_t pos, const char *name,
                         const char *what) {
    const struct jv *v = arg(a, pos, name);
    if (!v || v->t != JT_STR) rfail(r, NULL, "%s: expected a string argument", what);
    return *v;
}

static int64_t arg_int(struct jrender *r, const struct jargs *a, uint32_t pos, const char *name, int64_t def,
                       const char *what) {
    const struct jv *v = arg(a, pos, name);
    if (!v || v->t == JT_UNDEF || v->t == JT_NONE) return def;
    if (v->t == JT_INT) return v->u.i;
    if (v->t == JT_BOOL) return v->u.b;
    if (v->t == JT_FLOAT && isfinite(v->u.f) && fabs(v->u.f) < 9e18) return (int64_t)v->u.f;
    rfail(r, NULL, "%s: expected an integer argument", what);
}

/* --- helpers on values --------------------------------------------------------------------- */

static bool is_ws_char(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static struct jv substr(struct jv s, size_t from, size_t to) { return jv_strn(s.u.s + from, (uint32_t)(to - from)); }

/* The items of a value iterated as Jinja iterates it: a list's items, a dict's keys, a string's
 * characters; undefined: none. Fails for anything else. */
static struct jlist *iter_items(struct jrender *r, struct jv v, const struct jnode *at) {
    static struct jlist empty;
    switch (v.t) {
    case JT_LIST: return v.u.l;
    case JT_UNDEF:
    case JT_NONE: return &empty; /* lenient, as the reference: `none | selectattr(...)` is [] */
    case JT_DICT: {
        struct jv l = jv_list_new(&r->a, v.u.d->n);
        for (uint32_t i = 0; i < v.u.d->n; i++) jlist_push(&r->a, l.u.l, v.u.d->kv[i].k);
        return l.u.l;
    }
    case JT_STR: {
        struct jv l = jv_list_new(&r->a, v.n);
        for (size_t i = 0; i < v.n;) {
            size_t j = i + 1;
            while (j < v.n && ((unsigned char)v.u.s[j] & 0xc0) == 0x80) j++;
            jlist_push(&r->a, l.u.l, substr(v, i, j));
            i = j;
        }
        return l.u.l;
    }
    default: rfail(r, at, "%s is not iterable", jv_type_name(v));
    }
}

static struct jv list_of(struct jrender *r, struct jlist *l) {
    struct jv v = jv_list_new(&r->a, l->n);
    if (l->n) memcpy(v.u.l->v, l->v, sizeof *l->v * l->n);
    v.u.l->n = l->n;
    return v;
}

static struct jv pair(struct jrender *r, struct jv a, struct jv b) {
    struct jv t = jv_list_new(&r->a, 2);
    jlist_push(&r->a, t.u.l, a);
    jlist_push(&r->a, t.u.l, b);
    return t;
}

/* ASCII case mapping (non-ASCII bytes pass through). */
static struct jv map_case(struct jrender *r, struct jv s, int mode /* 0 lower 1 upper 2 title 3 capitalize */) {
    char *o = ja_alloc(&r->a, s.n + 1);
    bool word_start = true;
    for (uint32_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.u.s[i];
        bool alpha = isalpha(c) != 0;
        if (mode == 0) c = (unsigned char)tolower(c);
        else if (mode == 1) c = (unsigned char)toupper(c);
        else if (mode == 2) c = (unsigned char)(word_start ? toupper(c) : tolower(c));
        else c = (unsigned char)(i == 0 ? toupper(c) : tolower(c));
        if (mode == 2) word_start = !alpha && !(c >= 0x80);
        o[i] = (char)c;
    }
    return jv_strn(o, s.n);
}

static struct jv str_strip(struct jv s, const struct jv *chars, bool left, bool right) {
    size_t b = 0, e = s.n;
    bool custom = chars && chars->t == JT_STR;
    #define STRIPPABLE(c) (custom ? memchr(chars->u.s, (c), chars->n) != NULL : is_ws_char(c))
    if (left)
        while (b < e && STRIPPABLE(s.u.s[b])) b++;
    if (right)
        while (e > b && STRIPPABLE(s.u.s[e - 1])) e--;
    #undef STRIPPABLE
    return substr(s, b, e);
}

static const char *memmem_(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    return memmem(h, hn, n, nn);
}

static struct jv str_replace(struct jrender *r, struct jv s, struct jv old, struct jv new_, int64_t count) {
    struct jbuf b;
    jbuf_init(&b, &r->a, r->lim->max_output);
    if (old.n == 0) { /* Python inserts new_ before every character and at the end */
        size_t i = 0;
        int64_t done = 0;
        while (i <= s.n) {
            if (count < 0 || done < count) {
                jbuf_put(&b, new_.u.s, new_.n);
                done++;
            }
            if (i == s.n) break;
            size_t j = i + 1;
            while (j < s.n && ((unsigned char)s.u.s[j] & 0xc0) == 0x80) j++;
            jbuf_put(&b, s.u.s + i, j - i);
            i = j;
        }
        return jbuf_value(&b);
    }
    size_t i = 0;
    int64_t done = 0;
    while (i < s.n && (count < 0 || done < count)) {
        const char *hit = memmem_(s.u.s + i, s.n - i, old.u.s, old.n);
        if (!hit) break;
        size_t at = (size_t)(hit - s.u.s);
        jbuf_put(&b, s.u.s + i, at - i);
        jbuf_put(&b, new_.u.s, new_.n);
        i = at + old.n;
        done++;
    }
    jbuf_put(&b, s.u.s + i, s.n - i);
    return jbuf_value(&b);
}

/* str.split / rsplit: sep NULL splits on runs of whitespace and drops empty parts. */
static struct jv str_split(struct jrender *r, struct jv s, const struct jv *sep, int64_t maxsplit, bool from_right) {
    struct jv out = jv_list_new(&r->a, 4);
    if (!sep || sep->t == JT_NONE || sep->t == JT_UNDEF) {
        /* collect whitespace-separated words, then join the tail beyond maxsplit */
        size_t i = 0, words = 0;
        struct jv all = jv_list_new(&r->a, 4);
        while (i < s.n) {
            while (i < s.n && is_ws_char(s.u.s[i])) i++;
            if (i >= s.n) break;
            size_t b = i;
            while (i < s.n && !is_ws_char(s.u.s[i])) i++;
            jlist_push(&r->a, all.u.l, substr(s, b, i));
            words++;
        }
        if (maxsplit < 0 || (size_t)maxsplit + 1 >= words) return all;
        /* keep maxsplit splits: the rest stays one part with its inner whitespace */
        struct jlist *w = all.u.l;
        if (!from_right) {
            for (int64_t k = 0; k < maxsplit; k++) jlist_push(&r->a, out.u.l, w->v[k]);
            const char *rest = w->v[maxsplit].u.s;
            struct jv tail = str_strip(jv_strn(rest, (uint32_t)(s.u.s + s.n - rest)), NULL, false, true);
            jlist_push(&r->a, out.u.l, tail);
        } else {
            size_t keep = words - (size_t)maxsplit;
            const char *end = w->v[keep - 1].u.s + w->v[keep - 1].n;
            struct jv head = str_strip(jv_strn(s.u.s, (uint32_t)(end - s.u.s)), NULL, true, false);
            jlist_push(&r->a, out.u.l, head);
            for (size_t k = keep; k < words; k++) jlist_push(&r->a, out.u.l, w->v[k]);
        }
        return out;
    }
    if (sep->t != JT_STR) rfail(r, NULL, "split: the separator must be a string");
    if (sep->n == 0) rfail(r, NULL, "split: empty separator");
    if (!from_right || maxsplit < 0) {
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            const char *hit = (maxsplit < 0 || done < maxsplit) ? memmem_(s.u.s + i, s.n - i, sep->u.s, sep->n) : NULL;
            if (!hit) break;
            size_t at = (size_t)(hit - s.u.s);
            jlist_push(&r->a, out.u.l, substr(s, i, at));
            i = at + sep->n;
            done++;
        }
        jlist_push(&r->a, out.u.l, substr(s, i, s.n));
        return out;
    }
    /* rsplit with a limit: split from the right, then reverse */
    struct jv rev = jv_list_new(&r->a, 4);
    size_t end = s.n;
    int64_t done = 0;
    while (done < maxsplit && end >= sep->n) {
        size_t k = end - sep->n + 1;
        bool found = false;
        while (k-- > 0)
            if (memcmp(s.u.s + k, sep->u.s, sep->n) == 0 && k + sep->n <= end) {
                found = true;
                break;
            }
        if (!found) break;
        jlist_push(&r->a, rev.u.l, substr(s, k + sep->n, end));
        end = k;
        done++;
    }
    jlist_push(&r->a, rev.u.l, substr(s, 0, end));
    for (uint32_t k = rev.u.l->n; k-- > 0;) jlist_push(&r->a, out.u.l, rev.u.l->v[k]);
    return out;
}

/* --- forward declarations ------------------------------------------------------------------ */

static struct jv eval(struct jrender *r, struct jscope *s, const struct jnode *n);
static void exec(struct jrender *r, struct jscope *s, const struct jnode *n);
static struct jv call_value(struct jrender *r, struct jv f, const struct jargs *a, const struct jnode *at);
static bool apply_test(struct jrender *r, const char *name, struct jv v, const struct jargs *a, const struct jnode *at);
static struct jv apply_filter(struct jrender *r, const char *name, struct jv v, const struct jargs *a,
                              const struct jnode *at);

/* --- attribute and item access ------------------------------------------------------------- */

/* A named builtin: a method of strings, lists or dicts (bound to its object), or a global. */
struct method {
    const char *name;
    jbuiltin_fn fn;
};

static const struct method *find_method(const struct method *table, const char *name) {
    for (; table->name; table++)
        if (!strcmp(table->name, name)) return table;
    return NULL;
}

static const struct method str_methods[], list_methods[], dict_methods[];

static struct jv get_item(struct jrender *r, struct jv obj, struct jv key) {
    if (obj.t == JT_DICT) {
        struct jv *v = jdict_get(obj.u.d, key);
        return v ? *v : jv_undef();
    }
    if ((obj.t == JT_LIST || obj.t == JT_STR) && (key.t == JT_INT || key.t == JT_BOOL)) {
        int64_t i = key.t == JT_INT ? key.u.i : key.u.b;
        if (obj.t == JT_LIST) {
            if (i < 0) i += obj.u.l->n;
            return i >= 0 && i < (int64_t)obj.u.l->n ? obj.u.l->v[i] : jv_undef();
        }
        size_t cps = ju_count(obj.u.s, obj.n);
        if (i < 0) i += (int64_t)cps;
        if (i < 0 || i >= (int64_t)cps) return jv_undef();
        size_t b = ju_offset(obj.u.s, obj.n, (size_t)i), e = ju_offset(obj.u.s, obj.n, (size_t)i + 1);
        return substr(obj, b, e);
    }
    (void)r;
    return jv_undef();
}

static struct jv get_attr(struct jrender *r, struct jv obj, const char *name) {
    const struct method *m = NULL;
    if (obj.t == JT_STR) m = find_method(str_methods, name);
    else if (obj.t == JT_LIST) m = find_method(list_methods, name);
    else if (obj.t == JT_DICT && !obj.u.d->ns) m = find_method(dict_methods, name);
    if (m) return make_func(r, m->fn, obj, m->name);
    if (obj.t == JT_DICT) {
        struct jv *v = jdict_get_str(obj.u.d, name);
        return v ? *v : jv_undef();
    }
    return jv_undef();
}

/* Python slice semantics on n elements: fills the indices taken, in order. */
static size_t slice_indices(struct jrender *r, int64_t n, const struct jv *start, const struct jv *stop,
                            const struct jv *stepv, int64_t **out, const struct jnode *at) {
    int64_t st = 1;
    if (stepv && stepv->t != JT_NONE && stepv->t != JT_UNDEF) {
        if (stepv->t != JT_INT) rfail(r, at, "slice step must be an integer");
        st = stepv->u.i;
        if (st == 0) rfail(r, at, "slice step cannot be zero");
    }
    int64_t lo, hi;
    #define BOUND(v, dflt) ((v) && (v)->t != JT_NONE && (v)->t != JT_UNDEF ? \
        ((v)->t == JT_INT ? (v)->u.i : (rfail(r, at, "slice indices must be integers"), 0)) : (dflt))
    if (st > 0) {
        lo = BOUND(start, 0);
        hi = BOUND(stop, n);
        if (lo < 0) lo += n;
        if (hi < 0) hi += n;
        if (lo < 0) lo = 0;
        if (hi > n) hi = n;
    } else {
        lo = BOUND(start, n - 1);
        hi = BOUND(stop, -n - 1);
        if (lo < 0) lo += n;
        if (hi < 0) hi += n;
        if (lo >= n) lo = n - 1;
        if (hi < -1) hi = -1;
    }
    #undef BOUND
    /* counted in unsigned arithmetic: a step near INT64_MAX must not overflow */
    uint64_t ust = st > 0 ? (uint64_t)st : (uint64_t)0 - (uint64_t)st;
    size_t cnt = 0;
    if (st > 0 && hi > lo) cnt = (size_t)(((uint64_t)(hi - lo) - 1) / ust + 1);
    if (st < 0 && lo > hi) cnt = (size_t)(((uint64_t)(lo - hi) - 1) / ust + 1);
    int64_t *idx = ja_alloc(&r->a, sizeof *idx * (cnt ? cnt : 1));
    for (size_t k = 0; k < cnt; k++) idx[k] = lo + (int64_t)k * st;
    *out = idx;
    return cnt;
}

static struct jv do_slice(struct jrender *r, struct jv obj, const struct jv *a, const struct jv *b,
                          const struct jv *c, const struct jnode *at) {
    int64_t *idx;
    if (obj.t == JT_LIST) {
        size_t cnt = slice_indices(r, obj.u.l->n, a, b, c, &idx, at);
        struct jv out = jv_list_new(&r->a, (uint32_t)cnt);
        for (size_t k = 0; k < cnt; k++) jlist_push(&r->a, out.u.l, obj.u.l->v[idx[k]]);
        return out;
    }
    if (obj.t == JT_STR) {
        struct jlist *chars = iter_items(r, obj, at);
        size_t cnt = slice_indices(r, chars->n, a, b, c, &idx, at);
        struct jbuf buf;
        jbuf_init(&buf, &r->a, r->lim->max_output);
        for (size_t k = 0; k < cnt; k++) jbuf_put(&buf, chars->v[idx[k]].u.s, chars->v[idx[k]].n);
        return jbuf_value(&buf);
    }
    if (obj.t == JT_UNDEF || obj.t == JT_NONE) return jv_undef();
    rfail(r, at, "cannot slice %s", jv_type_name(obj));
}

/* --- arithmetic ---------------------------------------------------------------------------- */

static bool numeric(struct jv v) { return v.t == JT_INT || v.t == JT_FLOAT || v.t == JT_BOOL; }
static double as_f(struct jv v) { return v.t == JT_FLOAT ? v.u.f : v.t == JT_INT ? (double)v.u.i : v.u.b; }
static int64_t as_i(struct jv v) { return v.t == JT_INT ? v.u.i : v.u.b; }

static struct jv str_concat(struct jrender *r, struct jv a, struct jv b) {
    struct jbuf buf;
    jbuf_init(&buf, &r->a, r->lim->max_output);
    jbuf_put(&buf, a.u.s, a.n);
    jbuf_put(&buf, b.u.s, b.n);
    return jbuf_value(&buf);
}

static struct jv repeat(struct jrender *r, struct jv seq, int64_t times) {
    if (times < 0) times = 0;
    if (seq.t == JT_STR) {
        struct jbuf buf;
        jbuf_init(&buf, &r->a, r->lim->max_output);
        for (int64_t k = 0; k < times; k++) {
            step(r);
            jbuf_put(&buf, seq.u.s, seq.n);
        }
        return jbuf_value(&buf);
    }
    struct jv out = jv_list_new(&r->a, 0);
    for (int64_t k = 0; k < times; k++) {
        step(r);
        for (uint32_t i = 0; i < seq.u.l->n; i++) jlist_push(&r->a, out.u.l, seq.u.l->v[i]);
    }
    return out;
}

/* Python's "fmt % args" for %s %d %i %f %r %% (flags and widths kept to printf's). */
static struct jv percent_format(struct jrender *r, struct jv fmt, struct jv args, const struct jnode *at) {
    struct jlist one = {1, 1, &args};
    struct jlist *vals = args.t == JT_LIST ? args.u.l : &one;
    uint32_t next = 0;
    struct jbuf b;
    jbuf_init(&b, &r->a, r->lim->max_output);
    for (uint32_t i = 0; i < fmt.n; i++) {
        char c = fmt.u.s[i];
        if (c != '%') {
            jbuf_putc(&b, c);
            continue;
        }
        char spec[32];
        size_t sn = 0;
        spec[sn++] = '%';
        i++;
        while (i < fmt.n && sn < 20 && strchr("-+ #0123456789.", fmt.u.s[i])) spec[sn++] = fmt.u.s[i++];
        if (i >= fmt.n) rfail(r, at, "incomplete format");
        char conv = fmt.u.s[i];
        if (conv == '%') {
            jbuf_putc(&b, '%');
            continue;
        }
        if (next >= vals->n) rfail(r, at, "not enough arguments for format string");
        struct jv v = vals->v[next++];
        char tmp[128];
        if (conv == 's' || conv == 'r') {
            struct jbuf sb;
            jbuf_init(&sb, &r->a, r->lim->max_output);
            if (conv == 's') jv_write_str(&sb, v, 0);
            else jv_write_repr(&sb, v, 0);
            jbuf_put(&b, sb.p ? sb.p : "", sb.n);
        } else if (conv == 'd' || conv == 'i') {
            if (!numeric(v)) rfail(r, at, "%%d format: a number is required");
            spec[sn++] = 'l';
            spec[sn++] = 'l';
            spec[sn++] = 'd';
            spec[sn] = '\0';
            snprintf(tmp, sizeof tmp, spec, (long long)(v.t == JT_FLOAT ? (int64_t)v.u.f : as_i(v)));
            jbuf_puts(&b, tmp);
        } else if (strchr("feEgGxXo", conv)) {
            if (!numeric(v)) rfail(r, at, "%%%c format: a number is required", conv);
            spec[sn++] = conv;
            spec[sn] = '\0';
            if (strchr("xXo", conv)) {
                spec[sn - 1] = 'l';
                spec[sn++] = 'l';
                spec[sn++] = conv;
                spec[sn] = '\0';
                snprintf(tmp, sizeof tmp, spec, (long long)as_i(v));
            } else {
                snprintf(tmp, sizeof tmp, spec, as_f(v));
            }
            jbuf_puts(&b, tmp);
        } else {
            rfail(r, at, "unsupported format character '%c'", conv);
        }
    }
    return jbuf_value(&b);
}

static struct jv arith(struct jrender *r, char op, struct jv a, struct jv b, const struct jnode *at) {
    if (op == '+') {
        /* a string and anything join as text; undefined and none as "" (the reference's rule) */
        if (a.t == JT_STR || b.t == JT_STR) {
            struct jv x = a.t == JT_UNDEF || a.t == JT_NONE ? jv_strn("", 0) : jv_to_str(&r->a, a);
            struct jv y = b.t == JT_UNDEF || b.t == JT_NONE ? jv_strn("", 0) : jv_to_str(&r->a, b);
            return str_concat(r, x, y);
        }
        if (a.t == JT_LIST && b.t == JT_LIST) {
            struct jv out = list_of(r, a.u.l);
            for (uint32_t i = 0; i < b.u.l->n; i++) jlist_push(&r->a, out.u.l, b.u.l->v[i]);
            return out;
        }
    }
    if (op == '*') {
        if ((a.t == JT_STR || a.t == JT_LIST) && (b.t == JT_INT || b.t == JT_BOOL)) return repeat(r, a, as_i(b));
        if ((b.t == JT_STR || b.t == JT_LIST) && (a.t == JT_INT || a.t == JT_BOOL)) return repeat(r, b, as_i(a));
    }
    if (op == '%' && a.t == JT_STR) return percent_format(r, a, b, at);
    if (!numeric(a) || !numeric(b))
        rfail(r, at, "unsupported operand types for %s: %s and %s",
              op == 'F' ? "//" : op == 'P' ? "**" : (char[]){op, 0}, jv_type_name(a), jv_type_name(b));
    bool ints = a.t != JT_FLOAT && b.t != JT_FLOAT;
    int64_t x = ints ? as_i(a) : 0, y = ints ? as_i(b) : 0, z;
    double fx = as_f(a), fy = as_f(b);
    switch (op) {
    case '+':
        if (ints && !__builtin_add_overflow(x, y, &z)) return jv_int(z);
        return jv_float(fx + fy);
    case '-':
        if (ints && !__builtin_sub_overflow(x, y, &z)) return jv_int(z);
        return jv_float(fx - fy);
    case '*':
        if (ints && !__builtin_mul_overflow(x, y, &z)) return jv_int(z);
        return jv_float(fx * fy);
    case '/':
        if (fy == 0) rfail(r, at, "division by zero");
        return jv_float(fx / fy);
    case 'F':
    case '%':
        if (ints) {
            if (y == 0) rfail(r, at, "division by zero");
            if (x == INT64_MIN && y == -1) return op == 'F' ? jv_float(-(double)x) : jv_int(0);
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q--;
                m += y;
            }
            return op == 'F' ? jv_int(q) : jv_int(m);
        }
        if (fy == 0) rfail(r, at, "division by zero");
        if (op == 'F') return jv_float(floor(fx / fy));
        {
            double m = fmod(fx, fy);
            if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
            return jv_float(m);
        }
    case 'P':
        if (ints && y >= 0) {
            int64_t acc = 1, base = x;
            bool ovf = false;
            for (int64_t e = y; e > 0 && !ovf; e >>= 1) {
                if (e & 1) ovf |= __builtin_mul_overflow(acc, base, &acc);
                if (e > 1) ovf |= __builtin_mul_overflow(base, base, &base);
            }
            if (!ovf) return jv_int(acc);
        }
        return jv_float(pow(fx, fy));
    }
    rfail(r, at, "bad operator");
}

static bool contains(struct jrender *r, struct jv hay, struct jv needle, const struct jnode *at) {
    switch (hay.t) {
    case JT_STR:
        if (needle.t != JT_STR) rfail(r, at, "'in <string>' requires a string on the left");
        return memmem_(hay.u.s, hay.n, needle.u.s, needle.n) != NULL;
    case JT_LIST:
        for (uint32_t i = 0; i < hay.u.l->n; i++)
            if (jv_equal(&r->fail, hay.u.l->v[i], needle, 0)) return true;
        return false;
    case JT_DICT: return jdict_get(hay.u.d, needle) != NULL;
    case JT_UNDEF:
    case JT_NONE: return false;
    default: rfail(r, at, "'in' needs a string, list or dict on the right, not %s", jv_type_name(hay));
    }
}

/* --- calls --------------------------------------------------------------------------------- */

static void eval_args(struct jrender *r, struct jscope *s, const struct jnode *n, struct jargs *a) {
    a->n = n->n;
    a->nkw = n->nkw;
    a->kw = n->kw;
    a->v = ja_alloc(&r->a, sizeof *a->v * (n->n ? n->n : 1));
    for (uint32_t i = 0; i < n->n; i++) a->v[i] = eval(r, s, n->items[i]);
}

/* Renders body b in scope s into a new string (a macro's result, a block's text). */
static struct jv render_to_string(struct jrender *r, struct jscope *s, const struct jnode *b) {
    struct jbuf buf, *saved = r->out;
    jbuf_init(&buf, &r->a, r->lim->max_output);
    r->out = &buf;
    exec(r, s, b);
    r->out = saved;
    return jbuf_value(&buf);
}

static struct jv call_macro(struct jrender *r, const struct jfunc *f, const struct jargs *a, const struct jnode *at) {
    const struct jnode *m = f->macro;
    if (r->call_depth >= r->lim->max_call_depth)
        jfail(&r->fail, -ERR_TOOBIG, "line %d: macro calls nested deeper than %d", jinja_line(r->t, at->pos),
              r->lim->max_call_depth);
    struct jscope *s = scope_new(r, f->closure);
    uint32_t npos = a->n - a->nkw;
    struct jv varargs = jv_list_new(&r->a, 0), kwargs = jv_dict_new(&r->a, 0);
    for (uint32_t i = m->n; i < npos; i++) jlist_push(&r->a, varargs.u.l, a->v[i]);
    for (uint32_t k = 0; k < a->nkw; k++) {
        bool known = false;
        for (uint32_t i = 0; i < m->n; i++) known |= !strcmp(m->items[i]->name, a->kw[k]);
        if (!known) jdict_set(&r->a, kwargs.u.d, str_lit(a->kw[k]), a->v[npos + k]);
    }
    scope_set(r, s, "varargs", varargs);
    scope_set(r, s, "kwargs", kwargs);
    if (r->pending_caller.t == JT_FUNC) {
        scope_set(r, s, "caller", r->pending_caller);
        r->pending_caller = jv_undef();
    }
    for (uint32_t i = 0; i < m->n; i++) {
        const struct jv *v = arg(a, i, m->items[i]->name);
        struct jv val = v ? *v : m->defs[i] ? eval(r, s, m->defs[i]) : jv_undef();
        scope_set(r, s, m->items[i]->name, val);
    }
    r->call_depth++;
    int saved_ctl = r->loop_ctl;
    struct jv out = render_to_string(r, s, m->b);
    r->loop_ctl = saved_ctl;
    r->call_depth--;
    return out;
}

static struct jv call_value(struct jrender *r, struct jv f, const struct jargs *a, const struct jnode *at) {
    step(r);
    if (f.t != JT_FUNC) rfail(r, at, "%s is not callable", jv_type_name(f));
    if (f.u.fn->macro) return call_macro(r, f.u.fn, a, at);
    return f.u.fn->fn(r, f.u.fn->self, a);
}

/* --- expressions --------------------------------------------------------------------------- */

static const struct method global_funcs[];

static struct jv lookup(struct jrender *r, struct jscope *s, const char *name) {
    for (; s; s = s->parent) {
        struct jv *v = scope_find_local(s, name);
        if (v) return *v;
    }
    const struct method *g = find_method(global_funcs, name);
    if (g) return make_func(r, g->fn, jv_undef(), g->name);
    return jv_undef();
}

/* Nested evaluations and statements (each a few C stack frames): a tree this deep (a chain of
 * thousands of operators, of elifs, or macro calls nesting deep bodies) ends the render instead
 * of the stack. */
#define MAX_EVAL_DEPTH 3000

static struct jv eval_node(struct jrender *r, struct jscope *s, const struct jnode *n);
static void exec_node(struct jrender *r, struct jscope *s, const struct jnode *n);

static struct jv eval(struct jrender *r, struct jscope *s, const struct jnode *n) {
    if (++r->depth > MAX_EVAL_DEPTH)
        jfail(&r->fail, -ERR_TOOBIG, "line %d: template nested deeper than %d", jinja_line(r->t, n->pos), MAX_EVAL_DEPTH);
    struct jv v = eval_node(r, s, n);
    r->depth--;
    return v;
}

static void exec(struct jrender *r, struct jscope *s, const struct jnode *n) {
    if (++r->depth > MAX_EVAL_DEPTH)
        jfail(&r->fail, -ERR_TOOBIG, "line %d: template nested deeper than %d", jinja_line(r->t, n->pos), MAX_EVAL_DEPTH);
    exec_node(r, s, n);
    r->depth--;
}

static struct jv eval_node(struct jrender *r, struct jscope *s, const struct jnode *n) {
    switch (n->kind) {
    case JN_LIT: return n->lit;
    case JN_NAME: return lookup(r, s, n->name);
    case JN_GETATTR: return get_attr(r, eval(r, s, n->a), n->name);
    case JN_GETITEM: {
        struct jv obj = eval(r, s, n->a), key = eval(r, s, n->b);
        return get_item(r, obj, key);
    }
    case JN_SLICE: {
        struct jv obj = eval(r, s, n->a);
        struct jv a = n->b ? eval(r, s, n->b) : jv_none(), b = n->c ? eval(r, s, n->c) : jv_none(),
                  c = n->d ? eval(r, s, n->d) : jv_none();
        return do_slice(r, obj, &a, &b, &c, n);
    }
    case JN_CALL: {
        struct jv f = eval(r, s, n->a);
        struct jargs a;
        eval_args(r, s, n, &a);
        if (f.t != JT_FUNC) {
            const char *what = n->a->kind == JN_NAME ? n->a->name : n->a->kind == JN_GETATTR ? n->a->name : NULL;
            if (what) rfail(r, n, "'%s' is %s, not a function", what, f.t == JT_UNDEF ? "undefined" : jv_type_name(f));
        }
        return call_value(r, f, &a, n);
    }
    case JN_FILTER: {
        struct jv v = n->a ? eval(r, s, n->a) : r->block_text;
        struct jargs a;
        eval_args(r, s, n, &a);
        return apply_filter(r, n->name, v, &a, n);
    }
    case JN_TEST: {
        struct jv v = eval(r, s, n->a);
        struct jargs a;
        eval_args(r, s, n, &a);
        bool t = apply_test(r, n->name, v, &a, n);
        return jv_bool(n->op ? !t : t);
    }
    case JN_UNARY: {
        struct jv v = eval(r, s, n->a);
        if (n->op == '!') return jv_bool(!jv_truthy(v));
        if (!numeric(v)) rfail(r, n, "bad operand type for unary %c: %s", n->op, jv_type_name(v));
        if (n->op == '+') return v.t == JT_BOOL ? jv_int(v.u.b) : v;
        if (v.t == JT_FLOAT) return jv_float(-v.u.f);
        if (as_i(v) == INT64_MIN) return jv_float(-(double)INT64_MIN);
        return jv_int(-as_i(v));
    }
    case JN_AND: {
        struct jv a = eval(r, s, n->a);
        return jv_truthy(a) ? eval(r, s, n->b) : a;
    }
    case JN_OR: {
        struct jv a = eval(r, s, n->a);
        return jv_truthy(a) ? a : eval(r, s, n->b);
    }
    case JN_COND:
        if (jv_truthy(eval(r, s, n->b))) return eval(r, s, n->a);
        return n->c ? eval(r, s, n->c) : jv_undef();
    case JN_BINOP: {
        struct jv a = eval(r, s, n->a), b = eval(r, s, n->b);
        switch (n->op) {
        case '~': {
            struct jv x = jv_to_str(&r->a, a), y = jv_to_str(&r->a, b);
            return str_concat(r, x, y);
        }
        case '=': return jv_bool(jv_equal(&r->fail, a, b, 0));
        case '!': return jv_bool(!jv_equal(&r->fail, a, b, 0));
        case '<': return jv_bool(jv_compare(&r->fail, a, b) < 0);
        case 'L': return jv_bool(jv_compare(&r->fail, a, b) <= 0);
        case '>': return jv_bool(jv_compare(&r->fail, a, b) > 0);
        case 'G': return jv_bool(jv_compare(&r->fail, a, b) >= 0);
        case 'i': return jv_bool(contains(r, b, a, n));
        case 'n': return jv_bool(!contains(r, b, a, n));
        default: return arith(r, n->op, a, b, n);
        }
    }
    case JN_LIST:
    case JN_TUPLE: {
        struct jv l = jv_list_new(&r->a, n->n);
        for (uint32_t i = 0; i < n->n; i++) jlist_push(&r->a, l.u.l, eval(r, s, n->items[i]));
        return l;
    }
    case JN_DICT: {
        struct jv d = jv_dict_new(&r->a, n->n / 2);
        for (uint32_t i = 0; i + 1 < n->n; i += 2) {
            struct jv k = eval(r, s, n->items[i]);
            jdict_set(&r->a, d.u.d, k, eval(r, s, n->items[i + 1]));
        }
        return d;
    }
    default: rfail(r, n, "not an expression");
    }
}

/* --- statements ---------------------------------------------------------------------------- */

static void assign(struct jrender *r, struct jscope *s, const struct jnode *target, struct jv v) {
    if (target->kind == JN_NAME) {
        scope_set(r, s, target->name, v);
    } else if (target->kind == JN_GETATTR) {
        struct jv obj = eval(r, s, target->a);
        if (obj.t != JT_DICT) rfail(r, target, "cannot set attribute '%s' of %s", target->name, jv_type_name(obj));
        jdict_set(&r->a, obj.u.d, str_lit(target->name), v);
    } else { /* a tuple of names */
        if (v.t != JT_LIST || v.u.l->n != target->n)
            rfail(r, target, "cannot unpack %s into %u names", jv_type_name(v), target->n);
        for (uint32_t i = 0; i < target->n; i++) scope_set(r, s, target->items[i]->name, v.u.l->v[i]);
    }
}

static void set_loop_targets(struct jrender *r, struct jscope *s, const struct jnode *f, struct jv item) {
    if (f->n == 1) {
        scope_set(r, s, f->items[0]->name, item);
        return;
    }
    if (item.t != JT_LIST || item.u.l->n != f->n)
        rfail(r, f, "cannot unpack %s into %u loop variables", jv_type_name(item), f->n);
    for (uint32_t i = 0; i < f->n; i++) scope_set(r, s, f->items[i]->name, item.u.l->v[i]);
}

static void exec_for(struct jrender *r, struct jscope *s, const struct jnode *f) {
    struct jlist *src = iter_items(r, eval(r, s, f->a), f);
    struct jscope *ls = scope_new(r, s);
    /* `for x in xs if cond`: filter first, so loop.length and loop.last count what is kept */
    struct jlist *items = src;
    if (f->d) {
        struct jv kept = jv_list_new(&r->a, src->n);
        for (uint32_t i = 0; i < src->n; i++) {
            step(r);
            set_loop_targets(r, ls, f, src->v[i]);
            if (jv_truthy(eval(r, ls, f->d))) jlist_push(&r->a, kept.u.l, src->v[i]);
        }
        items = kept.u.l;
    } else if (src->n) {
        items = list_of(r, src).u.l; /* the body may change the list it walks */
    }
    uint32_t len = items->n;
    for (uint32_t i = 0; i < len; i++) {
        step(r);
        struct jscope *it = ls; /* one scope for every turn: a set in one turn is seen in the next */
        set_loop_targets(r, it, f, items->v[i]);
        struct jv loop = jv_dict_new(&r->a, 12);
        struct jdict *d = loop.u.d;
        jdict_set(&r->a, d, str_lit("index"), jv_int(i + 1));
        jdict_set(&r->a, d, str_lit("index0"), jv_int(i));
        jdict_set(&r->a, d, str_lit("revindex"), jv_int(len - i));
        jdict_set(&r->a, d, str_lit("revindex0"), jv_int(len - i - 1));
        jdict_set(&r->a, d, str_lit("first"), jv_bool(i == 0));
        jdict_set(&r->a, d, str_lit("last"), jv_bool(i + 1 == len));
        jdict_set(&r->a, d, str_lit("length"), jv_int(len));
        jdict_set(&r->a, d, str_lit("previtem"), i > 0 ? items->v[i - 1] : jv_undef());
        jdict_set(&r->a, d, str_lit("nextitem"), i + 1 < len ? items->v[i + 1] : jv_undef());
        jdict_set(&r->a, d, str_lit("depth"), jv_int(1));
        jdict_set(&r->a, d, str_lit("depth0"), jv_int(0));
        scope_set(r, it, "loop", loop);
        exec(r, it, f->b);
        if (r->loop_ctl == 1) {
            r->loop_ctl = 0;
            break;
        }
        r->loop_ctl = 0;
    }
    if (len == 0 && f->c) exec(r, s, f->c);
}

static void exec_node(struct jrender *r, struct jscope *s, const struct jnode *n) {
    step(r);
    switch (n->kind) {
    case JN_BODY:
        for (uint32_t i = 0; i < n->n && !r->loop_ctl; i++) exec(r, s, n->items[i]);
        break;
    case JN_TEXT: jbuf_put(r->out, n->lit.u.s, n->lit.n); break;
    case JN_OUTPUT: jv_write_str(r->out, eval(r, s, n->a), 0); break;
    case JN_IF:
        if (jv_truthy(eval(r, s, n->a))) exec(r, s, n->b);
        else if (n->c) exec(r, s, n->c);
        break;
    case JN_FOR: exec_for(r, s, n); break;
    case JN_SET: assign(r, s, n->a, eval(r, s, n->b)); break;
    case JN_SETBLOCK: {
        struct jv text = render_to_string(r, s, n->b);
        if (n->c) {
            struct jv saved = r->block_text;
            r->block_text = text;
            text = eval(r, s, n->c);
            r->block_text = saved;
        }
        assign(r, s, n->a, text);
        break;
    }
    case JN_FILTERBLOCK: {
        struct jv saved = r->block_text;
        r->block_text = render_to_string(r, s, n->b);
        struct jv v = eval(r, s, n->c);
        r->block_text = saved;
        jv_write_str(r->out, v, 0);
        break;
    }
    case JN_MACRO: {
        struct jfunc *f = ja_alloc(&r->a, sizeof *f);
        f->macro = n;
        f->name = n->name;
        f->closure = s;
        struct jv v = {0};
        v.t = JT_FUNC;
        v.u.fn = f;
        scope_set(r, s, n->name, v);
        break;
    }
    case JN_CALLBLOCK: {
        static const struct jnode caller_shape = {.kind = JN_MACRO, .name = "caller"};
        struct jnode *caller = ja_alloc(&r->a, sizeof *caller);
        *caller = caller_shape;
        caller->b = n->b;
        struct jfunc *cf = ja_alloc(&r->a, sizeof *cf);
        cf->macro = caller;
        cf->name = "caller";
        cf->closure = s;
        struct jv cv = {0};
        cv.t = JT_FUNC;
        cv.u.fn = cf;
        struct jv f = eval(r, s, n->a->a);
        struct jargs a;
        eval_args(r, s, n->a, &a);
        r->pending_caller = cv;
        struct jv out = call_value(r, f, &a, n);
        r->pending_caller = jv_undef();
        jv_write_str(r->out, out, 0);
        break;
    }
    case JN_BREAK: r->loop_ctl = 1; break;
    case JN_CONTINUE: r->loop_ctl = 2; break;
    case JN_DO: (void)eval(r, s, n->a); break;
    default: rfail(r, n, "not a statement");
    }
}

/* --- global functions ---------------------------------------------------------------------- */

static struct jv g_range(struct jrender *r, struct jv self, const struct jargs *a) {
    (void)self;
    uint32_t npos = a->n - a->nkw;
    int64_t start = 0, stop, st = 1;
    if (npos == 1) stop = arg_int(r, a, 0, NULL, 0, "range");
    else if (npos == 2 || npos == 3) {
        start = arg_int(r, a, 0, NULL, 0, "range");
        stop = arg_int(r, a, 1, NULL, 0, "range");
        if (npos == 3) st = arg_int(r, a, 2, NULL, 1, "range");
    } else rfail(r, NULL, "range expects 1 to 3 arguments");
    if (st == 0) rfail(r, NULL, "range step cannot be zero");
    double cnt = st > 0 ? ceil(((double)stop - (double)start) / (double)st) : ceil(((double)start - (double)stop) / (double)-st);
    if (cnt > (double)r->lim->max_steps || cnt > 1e8)
        jfail(&r->fail, -ERR_TOOBIG, "range of %.0f numbers is too long", cnt);
    struct jv out = jv_list_new(&r->a, cnt > 0 ? (uint32_t)cnt : 0);
    for (int64_t v = start; st > 0 ? v < stop : v > stop; v += st) jlist_push(&r->a, out.u.l, jv_int(v));
    return out;
}

static struct jv kwargs_dict(struct jrender *r, const struct jargs *a, bool ns, const char *what) {
    struct jv d = jv_dict_new(&r->a, a->n);
    d.u.d->ns = ns;
    uint32_t npos = a->n - a->nkw;
    for (uint32_t i = 0; i < npos; i++) {
        struct jv p = a->v[i];
        if (p.t != JT_DICT) rfail(r, NULL, "%s: positional arguments must be dicts", what);
        for (uint32_t k = 0; k < p.u.d->n; k++) jdict_set(&r->a, d.u.d, p.u.d->kv[k].k, p.u.d->kv[k].v);
    }
    for (uint32_t i = 0; i < a->nkw; i++) jdict_set(&r->a, d.u.d, str_lit(a->kw[i]), a->v[npos + i]);
    return d;
}

static struct jv g_namespace(struct jrender *r, struct jv self, const struct jargs *a) {
    (void)self;
    return kwargs_dict(r, a, true, "namespace");
}

static struct jv g_dict(struct jrender *r, struct jv self, const struct jargs *a) {
    (void)self;
    return kwargs_dict(r, a, false, "dict");
}

static struct jv g_raise(struct jrender *r, struct jv self, const struct jargs *a) {
    (void)self;
    const struct jv *m = arg(a, 0, "message");
    struct jv s = m ? jv_to_str(&r->a, *m) : str_lit("raise_exception");
    if (s.n == 0) s = str_lit("raise_exception with an empty message"); /* an error always says something */
    jfail(&r->fail, -ERR_INVAL, "%.*s", (int)(s.n > 200 ? 200 : s.n), s.u.s);
}

static struct jv g_strftime_now(struct jrender *r, struct jv self, const struct jargs *a) {
    (void)self;
    struct jv fmt = arg_str(r, a, 0, "format", "strftime_now");
    time_t now = (time_t)r->now;
    struct tm tm;
    localtime_r(&now, &tm);
    char f[256], out[512];
    if (fmt.n >= sizeof f) rfail(r, NULL, "strftime_now: format too long");
    memcpy(f, fmt.u.s, fmt.n);
    f[fmt.n] = '\0';
    size_t n = strftime(out, sizeof out, f, &tm);
    return jv_str_copy(&r->a, out, n);
}

static const struct method global_funcs[] = {
    {"range", g_range},
    {"namespace", g_namespace},
    {"dict", g_dict},
    {"raise_exception", g_raise},
    {"strftime_now", g_strftime_now},
    {NULL, NULL},
};

/* --- string methods ------------------------------------------------------------------------ */

static struct jv m_strip(struct jrender *r, struct jv self, const struct jargs *a) {
    (void)r;
    return str_strip(self, arg(a, 0, "chars"), true, true);
}
static struct jv m_lstrip(struct jrender *r, struct jv self, const struct jargs *a) {
    (void)r;
    return str_strip(self, arg(a, 0, "chars"), true, false);
}
static struct jv m_rstrip(struct jrender *r, struct jv self, const struct jargs *a) {
    (void)r;
    return str_strip(self, arg(a, 0, "chars"), false, true);
}
static struct jv m_split(struct jrender *r, struct jv self, const struct jargs *a) {
    return str_split(r, self, arg(a, 0, "sep"), arg_int(r, a, 1, "maxsplit", -1, "split"), false);
}
static struct jv m_rsplit(struct jrender *r, struct jv self, const struct jargs *a) {
    return str_split(r, self, arg(a, 0, "sep"), arg_int(r, a, 1, "maxsplit", -1, "rsplit"), true);
}
static struct jv m_splitlines(struct jrender *r, struct jv self, const struct jargs *a) {
    bool keep = arg_bool(a, 0, "keepends", false);
    struct jv out = jv_list_new(&r->a, 4);
    size_t i = 0;
    while (i < self.n) {
        size_t b = i;
        while (i < self.n && self.u.s[i] != '\n' && self.u.s[i] != '\r') i++;
        size_t e = i;
        if (i < self.n) i += (self.u.s[i] == '\r' && i + 1 < self.n && self.u.s[i + 1] == '\n') ? 2 : 1;
        jlist_push(&r->a, out.u.l, substr(self, b, keep ? i : e));
    }
    return out;
}

static bool affix_match(struct jv s, struct jv x, bool end) {
    if (x.n > s.n) return false;
    return memcmp(end ? s.u.s + s.n - x.n : s.u.s, x.u.s, x.n) == 0;
}

static struct jv affix(struct jrender *r, struct jv self, const struct jargs *a, bool end) {
    const struct jv *x = arg(a, 0, NULL);
    if (!x) rfail(r, NULL, "%s: missing argument", end ? "endswith" : "startswith");
    if (x->t == JT_STR) return jv_bool(affix_match(self, *x, end));
    if (x->t == JT_LIST) {
        for (uint32_t i = 0; i < x->u.l->n; i++)
            if (x->u.l->v[i].t == JT_STR && affix_match(self, x->u.l->v[i], end)) return jv_bool(true);
        return jv_bool(false);
    }
    rfail(r, NULL, "%s: expected a string or a tuple of strings", end ? "endswith" : "startswith");
}
static struct jv m_startswith(struct jrender *r, struct jv self, const struct jargs *a) { return affix(r, self, a, false); }
static struct jv m_endswith(struct jrender *r, struct jv self, const struct jargs *a) { return affix(r, self, a, true); }
static struct jv m_upper(struct jrender *r, struct jv self, const struct jargs *a) { (void)a; return map_case(r, self, 1); }
static struct jv m_lower(struct jrender *r, struct jv self, const struct jargs *a) { (void)a; return map_case(r, self, 0); }
static struct jv m_title(struct jrender *r, struct jv self, const struct jargs *a) { (void)a; return map_case(r, self, 2); }
static struct jv m_capitalize(struct jrender *r, struct jv self, const struct jargs *a) { (void)a; return map_case(r, self, 3); }
static struct jv m_replace(struct jrender *r, struct jv self, const struct jargs *a) {
    return str_replace(r, self, arg_str(r, a, 0, "old", "replace"), arg_str(r, a, 1, "new", "replace"),
                       arg_int(r, a, 2, "count", -1, "replace"));
}
static struct jv find_impl(struct jrender *r, struct jv self, const struct jargs *a, bool from_right) {
    struct jv x = arg_str(r, a, 0, "sub", "find");
    const char *hit = NULL;
    if (!from_right) {
        hit = memmem_(self.u.s, self.n, x.u.s, x.n);
    } else if (x.n <= self.n) {
        for (size_t k = self.n - x.n + 1; k-- > 0;)
            if (memcmp(self.u.s + k, x.u.s, x.n) == 0) {
                hit = self.u.s + k;
                break;
            }
    }
    return jv_int(hit ? (int64_t)ju_count(self.u.s, (size_t)(hit - self.u.s)) : -1);
}
static struct jv m_find(struct jrender *r, struct jv self, const struct jargs *a) { return find_impl(r, self, a, false); }
static struct jv m_rfind(struct jrender *r, struct jv self, const struct jargs *a) { return find_impl(r, self, a, true); }
static struct jv m_str_count(struct jrender *r, struct jv self, const struct jargs *a) {
    struct jv x = arg_str(r, a, 0, "sub", "count");
    if (x.n == 0) return jv_int((int64_t)ju_count(self.u.s, self.n) + 1);
    int64_t c = 0;
    for (size_t i = 0; i + x.n <= self.n;) {
        const char *hit = memmem_(self.u.s + i, self.n - i, x.u.s, x.n);
        if (!hit) break;
        c++;
        i = (size_t)(hit - self.u.s) + x.n;
    }
    return jv_int(c);
}
static struct jv m_str_join(struct jrender *r, struct jv self, const struct jargs *a) {
    const struct jv *x = arg(a, 0, NULL);
    if (!x) rfail(r, NULL, "join: missing argument");
    struct jlist *items = iter_items(r, *x, NULL);
    struct jbuf b;
    jbuf_init(&b, &r->a, r->lim->max_output);
    for (uint32_t i = 0; i < items->n; i++) {
        if (i) jbuf_put(&b, self.u.s, self.n);
        jv_write_str(&b, items->v[i], 0);
    }
    return jbuf_value(&b);
}
/* str.format: {} {0} {name}, {{ and }}; a format spec after ':' is not applied. */
static struct jv m_format(struct jrender *r, struct jv self, const struct jargs *a) {
    struct jbuf b;
    jbuf_init(&b, &r->a, r->lim->max_output);
    uint32_t auto_idx = 0, npos = a->n - a->nkw;
    for (uint32_t i = 0; i < self.n; i++) {
        char c = self.u.s[i];
        if ((c == '{' || c == '}') && i + 1 < self.n && self.u.s[i + 1] == c) {
            jbuf_putc(&b, c);
            i++;
            continue;
        }
        if (c != '{') {
            jbuf_putc(&b, c);
            continue;
        }
        uint32_t e = i + 1;
        while (e < self.n && self.u.s[e] != '}') e++;
        if (e >= self.n) rfail(r, NULL, "format: unmatched '{'");
        uint32_t fe = i + 1;
        while (fe < e && self.u.s[fe] != ':' && self.u.s[fe] != '!') fe++;
        const struct jv *v = NULL;
        if (fe == i + 1) {
            v = auto_idx < npos ? &a->v[auto_idx] : NULL;
            auto_idx++;
        } else if (isdigit((unsigned char)self.u.s[i + 1])) {
            uint64_t k = 0;
            for (uint32_t d = i + 1; d < fe && isdigit((unsigned char)self.u.s[d]) && k < UINT32_MAX; d++)
                k = k * 10 + (uint64_t)(self.u.s[d] - '0');
            v = k < npos ? &a->v[k] : NULL;
        } else {
            for (uint32_t k = 0; k < a->nkw; k++)
                if (strlen(a->kw[k]) == fe - i - 1 && !memcmp(a->kw[k], self.u.s + i + 1, fe - i - 1)) v = &a->v[npos + k];
        }
        if (!v) rfail(r, NULL, "format: missing argument for a replacement field");
        jv_write_str(&b, *v, 0);
        i = e;
    }
    return jbuf_value(&b);
}
static struct jv str_class(struct jv self, int (*pred)(int)) {
    if (self.n == 0) return jv_bool(false);
    for (uint32_t i = 0; i < self.n; i++)
        if (!pred((unsigned char)self.u.s[i])) return jv_bool(false);
    return jv_bool(true);
}
static struct jv m_isdigit(struct jrender *r, struct jv self, const struct jargs *a) { (void)r; (void)a; return str_class(self, isdigit); }
static struct jv m_isalpha(struct jrender *r, struct jv self, const struct jargs *a) { (void)r; (void)a; return str_class(self, isalpha); }
static struct jv m_isalnum(struct jrender *r, struct jv self, const struct jargs *a) { (void)r; (void)a; return str_class(self, isalnum); }
static struct jv m_isspace(struct jrender *r, struct jv self, const struct jargs *a) { (void)r; (void)a; return str_class(self, isspace); }
static struct jv cased(struct jv self, bool upper) {
    bool any = false;
    for (uint32_t i = 0; i < self.n; i++) {
        unsigned char c = (unsigned char)self.u.s[i];
        if (upper ? islower(c) : isupper(c)) return jv_bool(false);
        any |= isalpha(c) != 0;
    }
    return jv_bool(any);
}
static struct jv m_islower(struct jrender *r, struct jv self, const struct jargs *a) { (void)r; (void)a; return cased(self, false); }
static struct jv m_isupper(struct jrender *r, struct jv self, const struct jargs *a) { (void)r; (void)a; return cased(self, true); }

static const struct method str_methods[] = {
    {"strip", m_strip}, {"lstrip", m_lstrip}, {"rstrip", m_rstrip}, {"split", m_split},
    {"rsplit", m_rsplit}, {"splitlines", m_splitlines}, {"startswith", m_startswith},
    {"endswith", m_endswith}, {"upper", m_upper}, {"lower", m_lower}, {"title", m_title},
    {"capitalize", m_capitalize}, {"replace", m_replace}, {"find", m_find}, {"rfind", m_rfind},
    {"count", m_str_count}, {"join", m_str_join}, {"format", m_format}, {"isdigit", m_isdigit},
    {"isalpha", m_isalpha}, {"isalnum", m_isalnum}, {"isspace", m_isspace}, {"islower", m_islower},
    {"isupper", m_isupper}, {NULL, NULL},
};

/* --- list methods -------------------------------------------------------------------------- */

static struct jv m_append(struct jrender *r, struct jv self, const struct jargs *a) {
    const struct jv *x = arg(a, 0, NULL);
    if (!x) rfail(r, NULL, "append: missing argument");
    jlist_push(&r->a, self.u.l, *x);
    return jv_none();
}
static struct jv m_extend(struct jrender *r, struct jv self, const struct jargs *a) {
    const struct jv *x = arg(a, 0, NULL);
    if (!x) rfail(r, NULL, "extend: missing argument");
    struct jlist *items = iter_items(r, *x, NULL);
    uint32_t n = items->n; /* extending a list by itself adds its items once */
    for (uint32_t i = 0; i < n; i++) jlist_push(&r->a, self.u.l, items->v[i]);
    return jv_none();
}
static struct jv m_list_pop(struct jrender *r, struct jv self, const struct jargs *a) {
    struct jlist *l = self.u.l;
    if (l->n == 0) rfail(r, NULL, "pop from an empty list");
    int64_t i = arg_int(r, a, 0, NULL, -1, "pop");
    if (i < 0) i += l->n;
    if (i < 0 || i >= (int64_t)l->n) rfail(r, NULL, "pop index out of range");
    struct jv v = l->v[i];
    memmove(l->v + i, l->v + i + 1, sizeof *l->v * (l->n - (uint32_t)i - 1));
    l->n--;
    return v;
}
static struct jv m_insert(struct jrender *r, struct jv self, const struct jargs *a) {
    struct jlist *l = self.u.l;
    int64_t i = arg_int(r, a, 0, NULL, 0, "insert");
    const struct jv *x = arg(a, 1, NULL);
    if (!x) rfail(r, NULL, "insert: missing argument");
    if (i < 0) i += l->n;
    if (i < 0) i = 0;
    if (i > (int64_t)l->n) i = l->n;
    jlist_push(&r->a, l, *x);
    memmove(l->v + i + 1, l->v + i, sizeof *l->v * (l->n - 1 - (uint32_t)i));
    l->v[i] = *x;
    return jv_none();
}
static struct jv m_index(struct jrender *r, struct jv self, const struct jargs *a) {
    const struct jv *x = arg(a, 0, NULL);
    if (!x) rfail(r, NULL, "index: missing argument");
    for (uint32_t i = 0; i < self.u.l->n; i++)
        if (jv_equal(&r->fail, self.u.l->v[i], *x, 0)) return jv_int(i);
    rfail(r, NULL, "index: value not in list");
}
static struct jv m_list_count(struct jrender *r, struct jv self, const struct jargs *a) {
    const struct jv *x = arg(a, 0, NULL);
    if (!x) rfail(r, NULL, "count: missing argument");
    int64_t c = 0;
    for (uint32_t i = 0; i < self.u.l->n; i++) c += jv_equal(&r->fail, self.u.l->v[i], *x, 0);
    return jv_int(c);
}
static struct jv m_remove(struct jrender *r, struct jv self, const struct jargs *a) {
    const struct jv *x = arg(a, 0, NULL);
    if (!x) rfail(r, NULL, "remove: missing argument");
    struct jlist *l = self.u.l;
    for (uint32_t i = 0; i < l->n; i++)
        if (jv_equal(&r->fail, l->v[i], *x, 0)) {
            memmove(l->v + i, l->v + i + 1, sizeof *l->v * (l->n - i - 1));
            l->n--;
            return jv_none();
        }
    rfail(r, NULL, "remove: value not in list");
}
static struct jv m_reverse(struct jrender *r, struct jv self, const struct jargs *a) {
    (void)r;
    (void)a;
    struct jlist *l = self.u.l;
    for (uint32_t i = 0; i < l->n / 2; i++) {
        struct jv t = l->v[i];
        l->v[i] = l->v[l->n - 1 - i];
        l->v[l->n - 1 - i] = t;
    }
    return jv_none();
}
static struct jv m_list_copy(struct jrender *r, struct jv self, const struct jargs *a) {
    (void)a;
    return list_of(r, self.u.l);
}

static const struct method list_methods[] = {
    {"append", m_append}, {"extend", m_extend}, {"pop", m_list_pop}, {"insert", m_insert},
    {"index", m_index}, {"count", m_list_count}, {"remove", m_remove}, {"reverse", m_reverse},
    {"copy", m_list_copy}, {NULL, NULL},
};

/* --- dict methods -------------------------------------------------------------------------- */

static struct jv m_get(struct jrender *r, struct jv self, const struct jargs *a) {
    const struct jv *k = arg(a, 0, "key");
    if (!k) rfail(r, NULL, "get: missing key");
    struct jv *v = jdict_get(self.u.d, *k);
    if (v) return *v;
    const struct jv *d = arg(a, 1, "default");
    return d ? *d : jv_none();
}
static struct jv dict_items(struct jrender *r, struct jdict *d) {
    struct jv out = jv_list_new(&r->a, d->n);
    for (uint32_t i = 0; i < d->n; i++) jlist_push(&r->a, out.u.l, pair(r, d->kv[i].k, d->kv[i].v));
    return out;
}
static struct jv m_items(struct jrender *r, struct jv self, const struct jargs *a) {
    (void)a;
    return dict_items(r, self.u.d);
}
static struct jv m_keys(struct jrender *r, struct jv self, const struct jargs *a) {
    (void)a;
    struct jv out = jv_list_new(&r->a, self.u.d->n);
    for (uint32_t i = 0; i < self.u.d->n; i++) jlist_push(&r->a, out.u.l, self.u.d->kv[i].k);
    return out;
}
static struct jv m_values(struct jrender *r, struct jv self, const struct jargs *a) {
    (void)a;
    struct jv out = jv_list_new(&r->a, self.u.d->n);
    for (uint32_t i = 0; i < self.u.d->n; i++) jlist_push(&r->a, out.u.l, self.u.d->kv[i].v);
    return out;
}
static struct jv m_dict_pop(struct jrender *r, struct jv self, const struct jargs *a) {
    const struct jv *k = arg(a, 0, "key");
    if (!k) rfail(r, NULL, "pop: missing key");
    struct jv *v = jdict_get(self.u.d, *k);
    if (v) {
        struct jv out = *v;
        jdict_del(self.u.d, *k);
        return out;
    }
    const struct jv *d = arg(a, 1, "default");
    if (!d) rfail(r, NULL, "pop: key not found");
    return *d;
}
static struct jv m_update(struct jrender *r, struct jv self, const struct jargs *a) {
    struct jv add = kwargs_dict(r, a, false, "update");
    for (uint32_t i = 0; i < add.u.d->n; i++) jdict_set(&r->a, self.u.d, add.u.d->kv[i].k, add.u.d->kv[i].v);
    return jv_none();
}
static struct jv m_dict_copy(struct jrender *r, struct jv self, const struct jargs *a) {
    (void)a;
    struct jv d = jv_dict_new(&r->a, self.u.d->n);
    for (uint32_t i = 0; i < self.u.d->n; i++) jdict_set(&r->a, d.u.d, self.u.d->kv[i].k, self.u.d->kv[i].v);
    return d;
}
static struct jv m_setdefault(struct jrender *r, struct jv self, const struct jargs *a) {
    const struct jv *k = arg(a, 0, "key");
    if (!k) rfail(r, NULL, "setdefault: missing key");
    struct jv *v = jdict_get(self.u.d, *k);
    if (v) return *v;
    const struct jv *d = arg(a, 1, "default");
    jdict_set(&r->a, self.u.d, *k, d ? *d : jv_none());
    return d ? *d : jv_none();
}

static const struct method dict_methods[] = {
    {"get", m_get}, {"items", m_items}, {"keys", m_keys}, {"values", m_values}, {"pop", m_dict_pop},
    {"update", m_update}, {"copy", m_dict_copy}, {"setdefault", m_setdefault}, {NULL, NULL},
};

/* --- sorting ------------------------------------------------------------------------------- */

struct sort_ctx {
    struct jrender *r;
    bool case_sensitive;
};

static int ci_compare(struct sort_ctx *c, struct jv a, struct jv b) {
    if (!c->case_sensitive && a.t == JT_STR && b.t == JT_STR) {
        size_t n = a.n < b.n ? a.n : b.n;
        for (size_t i = 0; i < n; i++) {
            int x = tolower((unsigned char)a.u.s[i]), y = tolower((unsigned char)b.u.s[i]);
            if (x != y) return x < y ? -1 : 1;
        }
        return a.n < b.n ? -1 : a.n > b.n;
    }
    return jv_compare(&c->r->fail, a, b);
}

/* Stable merge sort of items by keys (parallel arrays), Python's sort order. */
static void merge_sort(struct sort_ctx *c, struct jv *items, struct jv *keys, size_t n, bool reverse) {
    if (n < 2) return;
    struct jv *ti = ja_alloc(&c->r->a, sizeof *ti * n), *tk = ja_alloc(&c->r->a, sizeof *tk * n);
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) {
                int cmp = ci_compare(c, keys[j], keys[i]);
                bool take_right = reverse ? cmp > 0 : cmp < 0;
                if (take_right) ti[o] = items[j], tk[o++] = keys[j++];
                else ti[o] = items[i], tk[o++] = keys[i++];
            }
            while (i < mid) ti[o] = items[i], tk[o++] = keys[i++];
            while (j < hi) ti[o] = items[j], tk[o++] = keys[j++];
        }
        memcpy(items, ti, sizeof *ti * n);
        memcpy(keys, tk, sizeof *tk * n);
    }
}

/* The value at a dotted attribute path ("a.b", "0"), as the attribute= of filters reads it. */
static struct jv attr_path(struct jrender *r, struct jv v, struct jv path) {
    if (path.t == JT_INT) return get_item(r, v, path);
    if (path.t != JT_STR) rfail(r, NULL, "attribute must be a string");
    size_t i = 0;
    while (i <= path.n) {
        size_t e = i;
        while (e < path.n && path.u.s[e] != '.') e++;
        char part[128];
        size_t len = e - i < sizeof part - 1 ? e - i : sizeof part - 1;
        memcpy(part, path.u.s + i, len);
        part[len] = '\0';
        bool digits = len > 0;
        for (size_t k = 0; k < len; k++) digits &= isdigit((unsigned char)part[k]) != 0;
        if (digits && v.t == JT_LIST) v = get_item(r, v, jv_int(atoll(part)));
        else if (v.t == JT_DICT) {
            struct jv *x = jdict_get_str(v.u.d, part);
            v = x ? *x : jv_undef();
        } else v = get_attr(r, v, part);
        i = e + 1;
    }
    return v;
}

/* --- filters ------------------------------------------------------------------------------- */

typedef struct jv (*filter_fn)(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at);

static struct jv need_str(struct jrender *r, struct jv v) { return jv_to_str(&r->a, v); }

static struct jv f_abs(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)a;
    if (v.t == JT_INT) return v.u.i == INT64_MIN ? jv_float(-(double)v.u.i) : jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    if (v.t == JT_FLOAT) return jv_float(fabs(v.u.f));
    if (v.t == JT_BOOL) return jv_int(v.u.b);
    rfail(r, at, "abs: not a number");
}
static struct jv f_attr(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)at;
    struct jv name = arg_str(r, a, 0, "name", "attr");
    char buf[128];
    size_t n = name.n < sizeof buf - 1 ? name.n : sizeof buf - 1;
    memcpy(buf, name.u.s, n);
    buf[n] = '\0';
    return get_attr(r, v, ja_strndup(&r->a, buf, n));
}
static struct jv f_capitalize(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)a; (void)at;
    return map_case(r, need_str(r, v), 3);
}
static struct jv f_default(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)at;
    const struct jv *d = arg(a, 0, "default_value");
    bool boolean = arg_bool(a, 1, "boolean", false);
    /* none counts as missing too, as in the reference (Jinja2 keeps None) */
    if (v.t == JT_UNDEF || v.t == JT_NONE || (boolean && !jv_truthy(v))) return d ? *d : jv_strn("", 0);
    return v;
}
static struct jv f_dictsort(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    if (v.t != JT_DICT) rfail(r, at, "dictsort: not a dict");
    struct sort_ctx c = {r, arg_bool(a, 0, "case_sensitive", false)};
    const struct jv *by = arg(a, 1, "by");
    bool by_value = by && by->t == JT_STR && by->n == 5 && !memcmp(by->u.s, "value", 5);
    struct jv items = dict_items(r, v.u.d);
    uint32_t n = items.u.l->n;
    struct jv *keys = ja_alloc(&r->a, sizeof *keys * (n ? n : 1));
    for (uint32_t i = 0; i < n; i++) keys[i] = items.u.l->v[i].u.l->v[by_value ? 1 : 0];
    merge_sort(&c, items.u.l->v, keys, n, arg_bool(a, 2, "reverse", false));
    return items;
}
static struct jv f_escape(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)a; (void)at;
    struct jv s = need_str(r, v);
    struct jbuf b;
    jbuf_init(&b, &r->a, r->lim->max_output);
    for (uint32_t i = 0; i < s.n; i++) {
        char c = s.u.s[i];
        if (c == '&') jbuf_puts(&b, "&amp;");
        else if (c == '<') jbuf_puts(&b, "&lt;");
        else if (c == '>') jbuf_puts(&b, "&gt;");
        else if (c == '"') jbuf_puts(&b, "&#34;");
        else if (c == '\'') jbuf_puts(&b, "&#39;");
        else jbuf_putc(&b, c);
    }
    return jbuf_value(&b);
}
static struct jv f_first(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)a;
    struct jlist *l = iter_items(r, v, at);
    return l->n ? l->v[0] : jv_undef();
}
static struct jv f_last(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)a;
    struct jlist *l = iter_items(r, v, at);
    return l->n ? l->v[l->n - 1] : jv_undef();
}
static struct jv f_float(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)at;
    const struct jv *d = arg(a, 0, "default");
    struct jv def = d ? *d : jv_float(0.0);
    if (v.t == JT_FLOAT) return v;
    if (v.t == JT_INT || v.t == JT_BOOL) return jv_float(as_f(v));
    if (v.t == JT_STR) {
        char buf[64];
        if (v.n == 0 || v.n >= sizeof buf) return def;
        memcpy(buf, v.u.s, v.n);
        buf[v.n] = '\0';
        char *end;
        double f = strtod(buf, &end);
        while (*end && is_ws_char(*end)) end++;
        return *end || end == buf ? def : jv_float(f);
    }
    (void)r;
    return def;
}
static struct jv f_int(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)at;
    const struct jv *d = arg(a, 0, "default");
    struct jv def = d ? *d : jv_int(0);
    int64_t base = arg_int(r, a, 1, "base", 10, "int");
    if (v.t == JT_INT) return v;
    if (v.t == JT_BOOL) return jv_int(v.u.b);
    if (v.t == JT_FLOAT) return isfinite(v.u.f) && fabs(v.u.f) < 9.2e18 ? jv_int((int64_t)v.u.f) : def;
    if (v.t == JT_STR) {
        char buf[64];
        size_t n = 0;
        for (uint32_t i = 0; i < v.n && n + 1 < sizeof buf; i++)
            if (v.u.s[i] != '_') buf[n++] = v.u.s[i];
        buf[n] = '\0';
        if (n == 0 || base < 2 || base > 36) return def;
        char *end;
        long long x = strtoll(buf, &end, (int)base);
        while (*end && is_ws_char(*end)) end++;
        if (!*end && end != buf) return jv_int(x);
        double f = strtod(buf, &end); /* "3.7" -> 3, as Jinja's int filter does */
        while (*end && is_ws_char(*end)) end++;
        return !*end && end != buf && isfinite(f) && fabs(f) < 9.2e18 ? jv_int((int64_t)f) : def;
    }
    return def;
}
static struct jv f_format(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    struct jv args = jv_list_new(&r->a, a->n);
    for (uint32_t i = 0; i < a->n - a->nkw; i++) jlist_push(&r->a, args.u.l, a->v[i]);
    return percent_format(r, need_str(r, v), args, at);
}
/* jv_from_json with a failure point of its own, so that the caller frees j on every path.
 * 0, or the failure's code with its message in r->fail.msg. */
static int json_to_value(struct jrender *r, const json_t *j, struct jv *out) {
    struct jfail *inner = ja_alloc(&r->a, sizeof *inner);
    r->a.fail = inner;
    if (setjmp(inner->jb)) {
        r->a.fail = &r->fail;
        snprintf(r->fail.msg, sizeof r->fail.msg, "%s", inner->msg);
        return inner->code;
    }
    *out = jv_from_json(&r->a, j, 0);
    r->a.fail = &r->fail;
    return 0;
}

static struct jv f_from_json(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)a;
    if (v.t != JT_STR) rfail(r, at, "from_json: not a string");
    json_error_t err;
    json_t *j = json_loadb(v.u.s, v.n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (!j) rfail(r, at, "from_json: %s", err.text);
    struct jv out = jv_undef();
    int code = json_to_value(r, j, &out);
    json_decref(j);
    if (code) jfail(&r->fail, code, "from_json: %s", r->fail.msg);
    return out;
}
static struct jv f_indent(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)at;
    struct jv s = need_str(r, v);
    const struct jv *w = arg(a, 0, "width");
    struct jv pad;
    if (w && w->t == JT_STR) pad = *w;
    else {
        int64_t width = arg_int(r, a, 0, "width", 4, "indent");
        if (width < 0) width = 0;
        if (width > 1024) width = 1024;
        char *p = ja_alloc(&r->a, (size_t)width + 1);
        memset(p, ' ', (size_t)width);
        pad = jv_strn(p, (uint32_t)width);
    }
    bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
    /* Jinja2: lines after the first get pad (blank lines only when blank=true); a trailing
     * newline stays as it is */
    struct jbuf b;
    jbuf_init(&b, &r->a, r->lim->max_output);
    size_t i = 0;
    bool line0 = true;
    while (i < s.n || line0) {
        size_t e = i;
        while (e < s.n && s.u.s[e] != '\n' && s.u.s[e] != '\r') e++;
        bool empty = e == i;
        if (line0 ? first : (!empty || blank)) jbuf_put(&b, pad.u.s, pad.n);
        jbuf_put(&b, s.u.s + i, e - i);
        if (e >= s.n) break;
        size_t nl = (s.u.s[e] == '\r' && e + 1 < s.n && s.u.s[e + 1] == '\n') ? 2 : 1;
        jbuf_putc(&b, '\n');
        i = e + nl;
        line0 = false;
        if (i >= s.n) break; /* a trailing newline: nothing after it to indent */
    }
    return jbuf_value(&b);
}
static struct jv f_items(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)a;
    if (v.t == JT_UNDEF) return jv_list_new(&r->a, 0);
    if (v.t != JT_DICT) rfail(r, at, "items: not a dict");
    return dict_items(r, v.u.d);
}
static struct jv f_join(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    const struct jv *sep = arg(a, 0, "d");
    const struct jv *attr = arg(a, 1, "attribute");
    struct jv d = sep && sep->t != JT_UNDEF ? need_str(r, *sep) : jv_strn("", 0);
    struct jlist *items = iter_items(r, v, at);
    struct jbuf b;
    jbuf_init(&b, &r->a, r->lim->max_output);
    for (uint32_t i = 0; i < items->n; i++) {
        if (i) jbuf_put(&b, d.u.s, d.n);
        jv_write_str(&b, attr ? attr_path(r, items->v[i], *attr) : items->v[i], 0);
    }
    return jbuf_value(&b);
}
static struct jv f_length(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)a;
    switch (v.t) {
    case JT_STR: return jv_int((int64_t)ju_count(v.u.s, v.n));
    case JT_LIST: return jv_int(v.u.l->n);
    case JT_DICT: return jv_int(v.u.d->n);
    case JT_UNDEF: return jv_int(0);
    default: rfail(r, at, "object of type %s has no length", jv_type_name(v));
    }
}
static struct jv f_list(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)a;
    return list_of(r, iter_items(r, v, at));
}
static struct jv f_lower(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)a; (void)at;
    return map_case(r, need_str(r, v), 0);
}
static struct jv f_upper(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)a; (void)at;
    return map_case(r, need_str(r, v), 1);
}
static struct jv f_title(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)a; (void)at;
    return map_case(r, need_str(r, v), 2);
}
static struct jv f_map(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    struct jlist *items = iter_items(r, v, at);
    struct jv out = jv_list_new(&r->a, items->n);
    const struct jv *attr = arg(a, a->n, "attribute");
    if (attr) {
        const struct jv *def = arg(a, a->n, "default");
        for (uint32_t i = 0; i < items->n; i++) {
            struct jv x = attr_path(r, items->v[i], *attr);
            jlist_push(&r->a, out.u.l, x.t == JT_UNDEF && def ? *def : x);
        }
        return out;
    }
    if (a->n == a->nkw || a->v[0].t != JT_STR) rfail(r, at, "map: expected a filter name or attribute=");
    struct jv name = a->v[0];
    char *fname = ja_strndup(&r->a, name.u.s, name.n);
    struct jargs rest = {a->v + 1, a->kw, a->n - 1, a->nkw};
    for (uint32_t i = 0; i < items->n; i++) jlist_push(&r->a, out.u.l, apply_filter(r, fname, items->v[i], &rest, at));
    return out;
}
static struct jv minmax(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at, bool max) {
    struct jlist *items = iter_items(r, v, at);
    if (!items->n) return jv_undef();
    struct sort_ctx c = {r, arg_bool(a, 0, "case_sensitive", false)};
    const struct jv *attr = arg(a, 1, "attribute");
    struct jv best = items->v[0], bk = attr ? attr_path(r, best, *attr) : best;
    for (uint32_t i = 1; i < items->n; i++) {
        struct jv k = attr ? attr_path(r, items->v[i], *attr) : items->v[i];
        int cmp = ci_compare(&c, k, bk);
        if (max ? cmp > 0 : cmp < 0) best = items->v[i], bk = k;
    }
    return best;
}
static struct jv f_max(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) { return minmax(r, v, a, at, true); }
static struct jv f_min(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) { return minmax(r, v, a, at, false); }

/* select / reject (a test on each item) and selectattr / rejectattr (on an attribute). */
static struct jv select_impl(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at,
                             bool by_attr, bool keep) {
    struct jlist *items = iter_items(r, v, at);
    struct jv out = jv_list_new(&r->a, items->n);
    uint32_t npos = a->n - a->nkw, k = 0;
    struct jv attr = jv_undef();
    if (by_attr) {
        if (npos < 1) rfail(r, at, "selectattr: missing attribute");
        attr = a->v[k++];
    }
    char *test = NULL;
    if (k < npos) {
        if (a->v[k].t != JT_STR) rfail(r, at, "select: the test name must be a string");
        test = ja_strndup(&r->a, a->v[k].u.s, a->v[k].n);
        k++;
    }
    struct jargs targs = {a->v + k, NULL, npos - k, 0};
    for (uint32_t i = 0; i < items->n; i++) {
        step(r);
        struct jv x = by_attr ? attr_path(r, items->v[i], attr) : items->v[i];
        bool ok = test ? apply_test(r, test, x, &targs, at) : jv_truthy(x);
        if (ok == keep) jlist_push(&r->a, out.u.l, items->v[i]);
    }
    return out;
}
static struct jv f_select(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) { return select_impl(r, v, a, at, false, true); }
static struct jv f_reject(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) { return select_impl(r, v, a, at, false, false); }
static struct jv f_selectattr(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) { return select_impl(r, v, a, at, true, true); }
static struct jv f_rejectattr(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) { return select_impl(r, v, a, at, true, false); }

static struct jv f_replace(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    const struct jv *o = arg(a, 0, "old"), *n = arg(a, 1, "new");
    if (!o || !n) rfail(r, at, "replace: expected old and new");
    struct jv old = need_str(r, *o), new_ = need_str(r, *n);
    return str_replace(r, need_str(r, v), old, new_, arg_int(r, a, 2, "count", -1, "replace"));
}
static struct jv f_reverse(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)a;
    if (v.t == JT_STR) {
        struct jlist *chars = iter_items(r, v, at);
        struct jbuf b;
        jbuf_init(&b, &r->a, r->lim->max_output);
        for (uint32_t i = chars->n; i-- > 0;) jbuf_put(&b, chars->v[i].u.s, chars->v[i].n);
        return jbuf_value(&b);
    }
    struct jv out = list_of(r, iter_items(r, v, at));
    m_reverse(r, out, NULL);
    return out;
}
static struct jv f_round(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    if (!numeric(v)) rfail(r, at, "round: not a number");
    int64_t prec = arg_int(r, a, 0, "precision", 0, "round");
    const struct jv *method = arg(a, 1, "method");
    double f = as_f(v), m = pow(10.0, (double)prec);
    if (method && method->t == JT_STR && method->n == 4 && !memcmp(method->u.s, "ceil", 4)) return jv_float(ceil(f * m) / m);
    if (method && method->t == JT_STR && method->n == 5 && !memcmp(method->u.s, "floor", 5)) return jv_float(floor(f * m) / m);
    return jv_float(nearbyint(f * m) / m); /* halves to even, as Python's round */
}
static struct jv f_safe(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)r; (void)a; (void)at;
    return v;
}
static struct jv f_sort(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    struct jv out = list_of(r, iter_items(r, v, at));
    struct sort_ctx c = {r, arg_bool(a, 1, "case_sensitive", false)};
    const struct jv *attr = arg(a, 2, "attribute");
    uint32_t n = out.u.l->n;
    struct jv *keys = ja_alloc(&r->a, sizeof *keys * (n ? n : 1));
    for (uint32_t i = 0; i < n; i++) keys[i] = attr ? attr_path(r, out.u.l->v[i], *attr) : out.u.l->v[i];
    merge_sort(&c, out.u.l->v, keys, n, arg_bool(a, 0, "reverse", false));
    return out;
}
static struct jv f_string(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)a; (void)at;
    return need_str(r, v);
}
static struct jv f_sum(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    struct jlist *items = iter_items(r, v, at);
    const struct jv *attr = arg(a, 0, "attribute");
    const struct jv *start = arg(a, 1, "start");
    struct jv acc = start ? *start : jv_int(0);
    for (uint32_t i = 0; i < items->n; i++)
        acc = arith(r, '+', acc, attr ? attr_path(r, items->v[i], *attr) : items->v[i], at);
    return acc;
}
static struct jv f_tojson(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)at;
    struct jjson_opts o = {NULL, ", ", ": ", false, false};
    const struct jv *ind = arg(a, 0, "indent");
    if (ind && ind->t != JT_NONE && ind->t != JT_UNDEF) {
        if (ind->t == JT_STR) {
            o.indent = ja_strndup(&r->a, ind->u.s, ind->n);
        } else {
            int64_t w = arg_int(r, a, 0, "indent", 0, "tojson");
            if (w < 0) w = 0;
            if (w > 64) w = 64;
            char *p = ja_alloc(&r->a, (size_t)w + 1);
            memset(p, ' ', (size_t)w);
            o.indent = p;
        }
        o.item_sep = ",";
    }
    const struct jv *seps = arg(a, a->n, "separators");
    if (seps && seps->t == JT_LIST && seps->u.l->n == 2 && seps->u.l->v[0].t == JT_STR && seps->u.l->v[1].t == JT_STR) {
        o.item_sep = ja_strndup(&r->a, seps->u.l->v[0].u.s, seps->u.l->v[0].n);
        o.key_sep = ja_strndup(&r->a, seps->u.l->v[1].u.s, seps->u.l->v[1].n);
    }
    o.ensure_ascii = arg_bool(a, a->n, "ensure_ascii", false);
    o.sort_keys = arg_bool(a, a->n, "sort_keys", false);
    struct jbuf b;
    jbuf_init(&b, &r->a, r->lim->max_output);
    jv_write_json(&b, v, &o, 0);
    return jbuf_value(&b);
}
static struct jv f_trim(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)at;
    return str_strip(need_str(r, v), arg(a, 0, "chars"), true, true);
}
static struct jv f_unique(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    struct jlist *items = iter_items(r, v, at);
    struct sort_ctx c = {r, arg_bool(a, 0, "case_sensitive", false)};
    const struct jv *attr = arg(a, 1, "attribute");
    struct jv out = jv_list_new(&r->a, items->n), seen = jv_list_new(&r->a, items->n);
    for (uint32_t i = 0; i < items->n; i++) {
        step(r);
        struct jv k = attr ? attr_path(r, items->v[i], *attr) : items->v[i];
        bool dup = false;
        for (uint32_t j = 0; j < seen.u.l->n && !dup; j++) {
            struct jv s = seen.u.l->v[j];
            dup = (!c.case_sensitive && k.t == JT_STR && s.t == JT_STR) ? ci_compare(&c, k, s) == 0
                                                                      : jv_equal(&r->fail, k, s, 0);
        }
        if (!dup) {
            jlist_push(&r->a, seen.u.l, k);
            jlist_push(&r->a, out.u.l, items->v[i]);
        }
    }
    return out;
}
static struct jv f_wordcount(struct jrender *r, struct jv v, const struct jargs *a, const struct jnode *at) {
    (void)a; (void)at;
    struct jv s = need_str(r, v);
    int64_t n = 0;
    bool in_word = false;
    for (uint32_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.u.s[i];
        bool w = isalnum(c) || c == '_' || c >= 0x80;
        if (w && !in_word) n++;
        in_word = w;
    }
    return jv_int(n);
}

static const struct {
    const char *name;
    filter_fn fn;
} filters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"capitalize", f_capitalize}, {"count", f_length},
    {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
    {"escape", f_escape}, {"first", f_first}, {"float", f_float}, {"format", f_format},
    {"from_json", f_from_json}, {"indent", f_indent}, {"int", f_int}, {"items", f_items},
    {"join", f_join}, {"last", f_last}, {"length", f_length}, {"list", f_list}, {"lower", f_lower},
    {"map", f_map}, {"max", f_max}, {"min", f_min}, {"reject", f_reject}, {"rejectattr", f_rejectattr},
    {"replace", f_replace}, {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe},
    {"select", f_select}, {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string},
    {"sum", f_sum}, {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"unique", f_unique},
    {"upper", f_upper}, {"wordcount", f_wordcount},
};

static struct jv apply_filter(struct jrender *r, const char *name, struct jv v, const struct jargs *a,
                              const struct jnode *at) {
    step(r);
    for (size_t i = 0; i < sizeof filters / sizeof *filters; i++)
        if (!strcmp(filters[i].name, name)) return filters[i].fn(r, v, a, at);
    rfail(r, at, "unknown filter '%s'", name);
}

/* --- tests --------------------------------------------------------------------------------- */

static bool apply_test(struct jrender *r, const char *name, struct jv v, const struct jargs *a, const struct jnode *at) {
    const struct jv *x = arg(a, 0, NULL);
    #define IS(s) (!strcmp(name, s))
    #define NEED_ARG() do { if (!x) rfail(r, at, "test '%s' needs an argument", name); } while (0)
    if (IS("defined")) return v.t != JT_UNDEF;
    if (IS("undefined")) return v.t == JT_UNDEF;
    if (IS("none")) return v.t == JT_NONE;
    if (IS("boolean")) return v.t == JT_BOOL;
    if (IS("true")) return v.t == JT_BOOL && v.u.b;
    if (IS("false")) return v.t == JT_BOOL && !v.u.b;
    if (IS("integer")) return v.t == JT_INT;
    if (IS("float")) return v.t == JT_FLOAT;
    if (IS("number")) return numeric(v);
    if (IS("string")) return v.t == JT_STR;
    if (IS("mapping")) return v.t == JT_DICT && !v.u.d->ns;
    if (IS("iterable") || IS("sequence")) return v.t == JT_STR || v.t == JT_LIST || v.t == JT_UNDEF;
    if (IS("callable")) return v.t == JT_FUNC;
    if (IS("escaped")) return false;
    if (IS("lower") || IS("upper")) return v.t == JT_STR && jv_truthy(cased(v, IS("upper")));
    if (IS("odd") || IS("even")) {
        if (v.t != JT_INT && v.t != JT_BOOL) rfail(r, at, "test '%s' needs an integer", name);
        return (as_i(v) & 1) == IS("odd");
    }
    if (IS("divisibleby")) {
        NEED_ARG();
        if (!numeric(v) || !numeric(*x)) rfail(r, at, "divisibleby needs numbers");
        if (as_f(*x) == 0) rfail(r, at, "divisibleby zero");
        return fmod(as_f(v), as_f(*x)) == 0;
    }
    if (IS("sameas")) {
        NEED_ARG();
        if (v.t != x->t) return false;
        if (v.t == JT_LIST) return v.u.l == x->u.l;
        if (v.t == JT_DICT) return v.u.d == x->u.d;
        return jv_equal(&r->fail, v, *x, 0);
    }
    if (IS("eq") || IS("equalto") || IS("==")) { NEED_ARG(); return jv_equal(&r->fail, v, *x, 0); }
    if (IS("ne") || IS("!=")) { NEED_ARG(); return !jv_equal(&r->fail, v, *x, 0); }
    if (IS("lt") || IS("lessthan") || IS("<")) { NEED_ARG(); return jv_compare(&r->fail, v, *x) < 0; }
    if (IS("le") || IS("<=")) { NEED_ARG(); return jv_compare(&r->fail, v, *x) <= 0; }
    if (IS("gt") || IS("greaterthan") || IS(">")) { NEED_ARG(); return jv_compare(&r->fail, v, *x) > 0; }
    if (IS("ge") || IS(">=")) { NEED_ARG(); return jv_compare(&r->fail, v, *x) >= 0; }
    if (IS("in")) { NEED_ARG(); return contains(r, *x, v, at); }
    #undef IS
    #undef NEED_ARG
    rfail(r, at, "unknown test '%s'", name);
}

/* --- public -------------------------------------------------------------------------------- */

static void copy_why(char *why, size_t cap, const char *msg) {
    if (why && cap) snprintf(why, cap, "%s", msg);
}

int jinja_parse(const char *text, size_t len, struct jinja_template **out, char *why, size_t why_cap) {
    *out = NULL;
    struct jinja_template *t = calloc(1, sizeof *t);
    struct jfail *fail = malloc(sizeof *fail);
    if (!t || !fail) {
        free(t);
        free(fail);
        copy_why(why, why_cap, "out of memory");
        return -ERR_NOMEM;
    }
    /* the tree costs some tens of bytes per byte of text ("{{1}}" repeated: about 80) */
    ja_init(&t->arena, (len + 65536) * 256, fail);
    if (setjmp(fail->jb)) {
        copy_why(why, why_cap, fail->msg);
        int code = fail->code;
        ja_free(&t->arena);
        free(t);
        free(fail);
        return code;
    }
    jinja_parse_into(t, text ? text : "", text ? len : 0);
    t->arena.fail = NULL; /* the parse is over: nothing allocates in it again */
    free(fail);
    *out = t;
    return 0;
}

void jinja_free(struct jinja_template *t) {
    if (!t) return;
    ja_free(&t->arena);
    free(t);
}

/* The render proper, with the failure point every jfail of it jumps to. 0 or the code. */
static int render_guarded(struct jrender *r, const json_t *globals, struct jbuf *buf) {
    if (setjmp(r->fail.jb)) return r->fail.code;
    r->root = scope_new(r, NULL);
    if (globals && json_is_object(globals)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)globals, k, v) {
            scope_set(r, r->root, ja_strndup(&r->a, k, strlen(k)), jv_from_json(&r->a, v, 0));
        }
    }
    jbuf_init(buf, &r->a, r->lim->max_output);
    r->out = buf;
    exec(r, scope_new(r, r->root), r->t->root);
    return 0;
}

int jinja_render(const struct jinja_template *t, const json_t *globals, const struct jinja_render_opts *opts,
                 char **out, size_t *len, char *why, size_t why_cap) {
    *out = NULL;
    *len = 0;
    static const struct jinja_render_opts defaults = JINJA_RENDER_OPTS_DEFAULT;
    const struct jinja_render_opts *o = opts ? opts : &defaults;
    struct jrender *r = calloc(1, sizeof *r);
    if (!r) {
        copy_why(why, why_cap, "out of memory");
        return -ERR_NOMEM;
    }
    r->t = t;
    r->lim = &o->limits;
    r->now = o->now;
    ja_init(&r->a, o->limits.max_memory, &r->fail);
    struct jbuf buf;
    int rc = render_guarded(r, globals, &buf);
    char *s = rc == 0 ? malloc(buf.n + 1) : NULL;
    if (rc == 0 && !s) {
        rc = -ERR_NOMEM;
        snprintf(r->fail.msg, sizeof r->fail.msg, "out of memory");
    }
    if (rc < 0) {
        copy_why(why, why_cap, r->fail.msg);
    } else {
        if (buf.n) memcpy(s, buf.p, buf.n);
        s[buf.n] = '\0';
        *out = s;
        *len = buf.n;
    }
    ja_free(&r->a);
    free(r);
    return rc;
}
