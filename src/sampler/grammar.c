/* grammar.c: GBNF -> byte-level pushdown automaton -> token masks (see grammar.h).
 *
 * Three parts:
 *   1. the parser: text -> rules of syntax nodes (struct node), with line:column errors;
 *   2. the compiler: rules -> states (struct pstate). Non-recursive rules are inlined where they
 *      are used; a recursive rule becomes a CALL of its own compiled body, which ends in an END
 *      state that returns to the caller. Character classes become UTF-8 byte ranges;
 *   3. the matcher: a stack is a chain of interned nodes (state, parent) whose top is a BYTE
 *      state; a configuration is the sorted set of top nodes (+ "complete": root matched whole),
 *      interned, with a transition per byte class filled on first use. Masks walk the vocabulary
 *      trie through those transitions.
 */
#include "sampler/grammar.h"
#include "common/err.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable arrays ------------------------------------------------------------------------ */

/* Make room for need elements in *p (capacity *cap). 0 or -ERR_NOMEM. */
static int grow(void *pp, int32_t *cap, int64_t need, size_t elem) {
    void **p = pp;
    if (need <= *cap) return 0;
    if (need > INT32_MAX / 2) return -ERR_NOMEM;
    int64_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -ERR_NOMEM;
    *p = q;
    *cap = (int32_t)c;
    return 0;
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* ---- syntax --------------------------------------------------------------------------------- */

enum node_kind { ND_EMPTY, ND_BYTES, ND_CLASS, ND_REF, ND_SEQ, ND_ALT, ND_REP };

struct node {
    uint8_t kind;
    int32_t a, n;     /* BYTES: bytes[a..a+n); CLASS: ranges[2a..2a+2n); REF: rule a; SEQ/ALT: kids[a..a+n);
                       * REP: child a */
    int32_t min, max; /* REP: max -1 = unbounded */
};

struct rule {
    int32_t name_off, name_len; /* in names */
    int32_t body;               /* node, -1 until defined */
    int32_t ref_pos;            /* first reference (source offset) for "undefined rule" */
};

struct syntax {
    struct node *nodes;
    int32_t n_nodes, cap_nodes;
    int32_t *kids;
    int32_t n_kids, cap_kids;
    int32_t *tmp; /* children of the SEQ/ALT being parsed, stacked */
    int32_t n_tmp, cap_tmp;
    uint8_t *bytes;
    int32_t n_bytes, cap_bytes;
    uint32_t *ranges; /* code point pairs lo, hi */
    int32_t n_ranges, cap_ranges;
    struct rule *rules;
    int32_t n_rules, cap_rules;
    char *names;
    int32_t n_names, cap_names;
    int32_t *rule_ht; /* name hash -> rule index + 1 */
    int32_t ht_cap;
};

static void syntax_free(struct syntax *sx) {
    free(sx->nodes);
    free(sx->kids);
    free(sx->tmp);
    free(sx->bytes);
    free(sx->ranges);
    free(sx->rules);
    free(sx->names);
    free(sx->rule_ht);
}

struct parser {
    const char *src;
    size_t len, pos;
    int err;
    char *why;
    size_t why_len;
    int depth;
    struct syntax *sx;
};

static void where(const char *src, size_t pos, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < pos; i++) {
        if (src[i] == '\n') {
            (*line)++;
            *col = 1;
        } else if (((unsigned char)src[i] & 0xC0) != 0x80) {
            (*col)++;
        }
    }
}

static int fail(struct parser *ps, size_t pos, int err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(struct parser *ps, size_t pos, int err, const char *fmt, ...) {
    if (ps->err) return ps->err;
    ps->err = err;
    if (ps->why_len) {
        int line, col;
        where(ps->src, pos > ps->len ? ps->len : pos, &line, &col);
        int k = snprintf(ps->why, ps->why_len, "%d:%d: ", line, col);
        if (k < 0) k = 0;
        if ((size_t)k < ps->why_len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(ps->why + k, ps->why_len - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return err;
}

static int nomem(struct parser *ps) { return fail(ps, ps->pos, -ERR_NOMEM, "out of memory"); }

static int new_node(struct parser *ps, uint8_t kind, int32_t a, int32_t n) {
    struct syntax *sx = ps->sx;
    if (sx->n_nodes >= GRAMMAR_MAX_STATES) return fail(ps, ps->pos, -ERR_TOOBIG, "grammar too large");
    if (grow(&sx->nodes, &sx->cap_nodes, sx->n_nodes + 1, sizeof *sx->nodes)) return nomem(ps);
    sx->nodes[sx->n_nodes] = (struct node){.kind = kind, .a = a, .n = n};
    return sx->n_nodes++;
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static uint64_t name_hash(const char *s, int32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* The rule named s[0..n), created (undefined) on first mention. Index, or negative error. */
static int32_t rule_get(struct parser *ps, const char *s, int32_t n, size_t pos) {
    struct syntax *sx = ps->sx;
    if (sx->n_rules * 2 >= sx->ht_cap) {
        int32_t cap = sx->ht_cap ? sx->ht_cap * 2 : 64;
        int32_t *ht = calloc((size_t)cap, sizeof *ht);
        if (!ht) return nomem(ps);
        for (int32_t r = 0; r < sx->n_rules; r++) {
            uint64_t h = name_hash(sx->names + sx->rules[r].name_off, sx->rules[r].name_len);
            size_t i = h & (size_t)(cap - 1);
            while (ht[i]) i = (i + 1) & (size_t)(cap - 1);
            ht[i] = r + 1;
        }
        free(sx->rule_ht);
        sx->rule_ht = ht;
        sx->ht_cap = cap;
    }
    size_t i = name_hash(s, n) & (size_t)(sx->ht_cap - 1);
    for (; sx->rule_ht[i]; i = (i + 1) & (size_t)(sx->ht_cap - 1)) {
        struct rule *r = &sx->rules[sx->rule_ht[i] - 1];
        if (r->name_len == n && memcmp(sx->names + r->name_off, s, (size_t)n) == 0) return sx->rule_ht[i] - 1;
    }
    if (sx->n_rules >= 65536) return fail(ps, pos, -ERR_TOOBIG, "too many rules");
    if (grow(&sx->rules, &sx->cap_rules, sx->n_rules + 1, sizeof *sx->rules) ||
        grow(&sx->names, &sx->cap_names, (int64_t)sx->n_names + n + 1, 1))
        return nomem(ps);
    memcpy(sx->names + sx->n_names, s, (size_t)n);
    sx->names[sx->n_names + n] = 0;
    sx->rules[sx->n_rules] = (struct rule){.name_off = sx->n_names, .name_len = n, .body = -1, .ref_pos = (int32_t)pos};
    sx->n_names += n + 1;
    sx->rule_ht[i] = sx->n_rules + 1;
    return sx->n_rules++;
}

static void skip_space(struct parser *ps, bool newline_ok) {
    while (ps->pos < ps->len) {
        char c = ps->src[ps->pos];
        if (c == ' ' || c == '\t') {
            ps->pos++;
        } else if (c == '#') {
            while (ps->pos < ps->len && ps->src[ps->pos] != '\n' && ps->src[ps->pos] != '\r') ps->pos++;
        } else if ((c == '\n' || c == '\r') && newline_ok) {
            ps->pos++;
        } else {
            break;
        }
    }
}

/* One UTF-8 character of the source at ps->pos: its code point, or -1 (error set). */
static int32_t src_utf8(struct parser *ps) {
    const unsigned char *s = (const unsigned char *)ps->src + ps->pos;
    size_t left = ps->len - ps->pos;
    unsigned c = s[0];
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || (size_t)n > left) return fail(ps, ps->pos, -ERR_INVAL, "invalid UTF-8 in the grammar"), -1;
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return fail(ps, ps->pos, -ERR_INVAL, "invalid UTF-8 in the grammar"), -1;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return fail(ps, ps->pos, -ERR_INVAL, "invalid UTF-8 in the grammar"), -1;
    ps->pos += (size_t)n;
    return (int32_t)cp;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A character of a literal or class (escape or UTF-8): its code point, or -1 (error set). */
static int32_t parse_char(struct parser *ps) {
    size_t at = ps->pos;
    if (ps->src[ps->pos] != '\\') return src_utf8(ps);
    if (++ps->pos >= ps->len) return fail(ps, at, -ERR_INVAL, "unfinished escape"), -1;
    char e = ps->src[ps->pos++];
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        uint32_t cp = 0;
        for (int i = 0; i < digits; i++) {
            int h = ps->pos < ps->len ? hexval(ps->src[ps->pos]) : -1;
            if (h < 0) return fail(ps, at, -ERR_INVAL, "expected %d hex digits after \\%c", digits, e), -1;
            cp = cp << 4 | (uint32_t)h;
            ps->pos++;
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return fail(ps, at, -ERR_INVAL, "\\%c escape is not a Unicode scalar value", e), -1;
        return (int32_t)cp;
    }
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '\\': case '"': case '[': case ']': case '-': case '\'': case '/': case '^': return e;
    default: return fail(ps, at, -ERR_INVAL, "unknown escape '\\%c'", e), -1;
    }
}

static int put_utf8(struct parser *ps, uint32_t cp) {
    struct syntax *sx = ps->sx;
    if (grow(&sx->bytes, &sx->cap_bytes, (int64_t)sx->n_bytes + 4, 1)) return nomem(ps);
    uint8_t *o = sx->bytes + sx->n_bytes;
    int n;
    if (cp < 0x80) o[0] = (uint8_t)cp, n = 1;
    else if (cp < 0x800) o[0] = (uint8_t)(0xC0 | cp >> 6), o[1] = (uint8_t)(0x80 | (cp & 0x3F)), n = 2;
    else if (cp < 0x10000)
        o[0] = (uint8_t)(0xE0 | cp >> 12), o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)), o[2] = (uint8_t)(0x80 | (cp & 0x3F)), n = 3;
    else
        o[0] = (uint8_t)(0xF0 | cp >> 18), o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F)),
        o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (uint8_t)(0x80 | (cp & 0x3F)), n = 4;
    sx->n_bytes += n;
    return 0;
}

static int parse_literal(struct parser *ps) {
    size_t at = ps->pos++;
    int32_t start = ps->sx->n_bytes;
    while (ps->pos < ps->len && ps->src[ps->pos] != '"') {
        int32_t cp = parse_char(ps);
        if (cp < 0 || put_utf8(ps, (uint32_t)cp)) return ps->err;
    }
    if (ps->pos >= ps->len) return fail(ps, at, -ERR_INVAL, "unterminated string literal");
    ps->pos++;
    int32_t n = ps->sx->n_bytes - start;
    return n ? new_node(ps, ND_BYTES, start, n) : new_node(ps, ND_EMPTY, 0, 0);
}

static int cmp_u32pair(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* ranges[2*from..] (pairs) sorted and merged in place; negated over the code points. Returns the
 * new pair count. The array has room for one more pair than it holds (negation can add one). */
static int32_t normalize_ranges(uint32_t *r, int32_t n, bool negate) {
    qsort(r, (size_t)n, 2 * sizeof *r, cmp_u32pair);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (m && r[2 * i] <= r[2 * (m - 1) + 1] + 1) {
            if (r[2 * i + 1] > r[2 * (m - 1) + 1]) r[2 * (m - 1) + 1] = r[2 * i + 1];
        } else {
            r[2 * m] = r[2 * i];
            r[2 * m + 1] = r[2 * i + 1];
            m++;
        }
    }
    if (!negate) return m;
    /* complement: the gaps between merged ranges, in place from the front (each gap ends before
     * the next range starts, so writing gap k never overwrites range k's start... read first) */
    uint32_t prev = 0;
    int32_t k = 0;
    for (int32_t i = 0; i < m; i++) {
        uint32_t lo = r[2 * i], hi = r[2 * i + 1];
        if (lo > prev) {
            r[2 * k] = prev;
            r[2 * k + 1] = lo - 1;
            k++;
        }
        prev = hi + 1;
    }
    if (prev <= 0x10FFFF) {
        r[2 * k] = prev;
        r[2 * k + 1] = 0x10FFFF;
        k++;
    }
    return k;
}

static int add_range(struct parser *ps, uint32_t lo, uint32_t hi) {
    struct syntax *sx = ps->sx;
    if (grow(&sx->ranges, &sx->cap_ranges, (int64_t)sx->n_ranges * 2 + 4, sizeof *sx->ranges)) return nomem(ps);
    sx->ranges[2 * sx->n_ranges] = lo;
    sx->ranges[2 * sx->n_ranges + 1] = hi;
    sx->n_ranges++;
    return 0;
}

static int parse_class(struct parser *ps) {
    size_t at = ps->pos++;
    bool negate = ps->pos < ps->len && ps->src[ps->pos] == '^';
    if (negate) ps->pos++;
    int32_t start = ps->sx->n_ranges;
    while (ps->pos < ps->len && ps->src[ps->pos] != ']') {
        int32_t lo = parse_char(ps), hi = lo;
        if (lo < 0) return ps->err;
        if (ps->pos + 1 < ps->len && ps->src[ps->pos] == '-' && ps->src[ps->pos + 1] != ']') {
            ps->pos++;
            hi = parse_char(ps);
            if (hi < 0) return ps->err;
            if (hi < lo) return fail(ps, at, -ERR_INVAL, "character range out of order");
        }
        if (add_range(ps, (uint32_t)lo, (uint32_t)hi)) return ps->err;
    }
    if (ps->pos >= ps->len) return fail(ps, at, -ERR_INVAL, "unterminated character class");
    ps->pos++;
    if (add_range(ps, 0, 0)) return ps->err; /* room for the complement's extra pair */
    ps->sx->n_ranges--;
    int32_t n = normalize_ranges(ps->sx->ranges + 2 * start, ps->sx->n_ranges - start, negate);
    ps->sx->n_ranges = start + n;
    return new_node(ps, ND_CLASS, start, n);
}

static int parse_alts(struct parser *ps, bool nested);

static int parse_uint(struct parser *ps, int32_t *v) {
    size_t at = ps->pos;
    int64_t x = 0;
    if (ps->pos >= ps->len || ps->src[ps->pos] < '0' || ps->src[ps->pos] > '9')
        return fail(ps, at, -ERR_INVAL, "expected a number");
    while (ps->pos < ps->len && ps->src[ps->pos] >= '0' && ps->src[ps->pos] <= '9') {
        x = x * 10 + (ps->src[ps->pos++] - '0');
        if (x > GRAMMAR_MAX_REPEAT) return fail(ps, at, -ERR_INVAL, "repetition count over %d", GRAMMAR_MAX_REPEAT);
    }
    *v = (int32_t)x;
    return 0;
}

/* `?`, `*` or `+`: a repetition whose counts are min..max with min 0 or 1, max 1 or unbounded. */
static bool simple_rep(int32_t min, int32_t max) { return (min == 0 || min == 1) && (max == 1 || max == -1); }

/* Postfix operators after an item: a REP node around it (or the item itself). Stacked `?` `*`
 * `+` nest in llama.cpp's parser; they are merged here into the one repetition they amount to. */
static int parse_postfix(struct parser *ps, int item) {
    for (;;) {
        if (ps->pos >= ps->len) return item;
        char c = ps->src[ps->pos];
        int32_t min, max;
        size_t at = ps->pos;
        if (c == '*') min = 0, max = -1, ps->pos++;
        else if (c == '+') min = 1, max = -1, ps->pos++;
        else if (c == '?') min = 0, max = 1, ps->pos++;
        else if (c == '{') {
            ps->pos++;
            skip_space(ps, true);
            min = 0;
            if (ps->pos < ps->len && ps->src[ps->pos] != ',' && parse_uint(ps, &min)) return ps->err;
            skip_space(ps, true);
            max = min;
            if (ps->pos < ps->len && ps->src[ps->pos] == ',') {
                ps->pos++;
                skip_space(ps, true);
                max = -1;
                if (ps->pos < ps->len && ps->src[ps->pos] != '}' && parse_uint(ps, &max)) return ps->err;
                skip_space(ps, true);
            }
            if (ps->pos >= ps->len || ps->src[ps->pos] != '}') return fail(ps, at, -ERR_INVAL, "expected '}' closing the repetition");
            ps->pos++;
            if (max >= 0 && max < min) return fail(ps, at, -ERR_INVAL, "repetition {%d,%d}: the maximum is below the minimum", min, max);
        } else {
            return item;
        }
        struct node *in = &ps->sx->nodes[item];
        if (in->kind == ND_REP && simple_rep(in->min, in->max) && simple_rep(min, max)) {
            /* stacked `?` `*` `+` (x??, x*+, x+++): one repetition of the same language, since each
             * nesting level would compile to copies of everything inside it */
            in->max = in->max == 1 && max == 1 ? 1 : -1;
            in->min = in->min * min;
            continue;
        }
        int rep = new_node(ps, ND_REP, item, 0);
        if (rep < 0) return rep;
        ps->sx->nodes[rep].min = min;
        ps->sx->nodes[rep].max = max;
        item = rep;
    }
}

/* SEQ or ALT of the children stacked in tmp since base (a single child is returned as is). */
static int gather(struct parser *ps, int32_t base, uint8_t kind) {
    struct syntax *sx = ps->sx;
    int32_t n = sx->n_tmp - base;
    if (n == 0) return new_node(ps, ND_EMPTY, 0, 0);
    if (n == 1) return sx->tmp[--sx->n_tmp];
    if (grow(&sx->kids, &sx->cap_kids, (int64_t)sx->n_kids + n, sizeof *sx->kids)) return nomem(ps);
    memcpy(sx->kids + sx->n_kids, sx->tmp + base, (size_t)n * sizeof *sx->kids);
    sx->n_tmp = base;
    int r = new_node(ps, kind, sx->n_kids, n);
    sx->n_kids += n;
    return r;
}

static int push_tmp(struct parser *ps, int32_t v) {
    struct syntax *sx = ps->sx;
    if (grow(&sx->tmp, &sx->cap_tmp, sx->n_tmp + 1, sizeof *sx->tmp)) return nomem(ps);
    sx->tmp[sx->n_tmp++] = v;
    return 0;
}

static int parse_seq(struct parser *ps, bool nested) {
    int32_t base = ps->sx->n_tmp;
    for (;;) {
        if (ps->pos >= ps->len) break;
        char c = ps->src[ps->pos];
        size_t at = ps->pos;
        int item;
        if (c == '"') {
            item = parse_literal(ps);
        } else if (c == '[') {
            item = parse_class(ps);
        } else if (c == '.') {
            ps->pos++;
            if (add_range(ps, 0, 0x10FFFF)) return ps->err;
            item = new_node(ps, ND_CLASS, ps->sx->n_ranges - 1, 1);
        } else if (c == '(') {
            if (++ps->depth > 200) return fail(ps, at, -ERR_INVAL, "groups nested too deep");
            ps->pos++;
            skip_space(ps, true);
            item = parse_alts(ps, true);
            if (item < 0) return item;
            skip_space(ps, true);
            if (ps->pos >= ps->len || ps->src[ps->pos] != ')') return fail(ps, at, -ERR_INVAL, "unclosed '('");
            ps->pos++;
            ps->depth--;
        } else if (is_name_char(c)) {
            size_t s = ps->pos;
            while (ps->pos < ps->len && is_name_char(ps->src[ps->pos])) ps->pos++;
            int32_t r = rule_get(ps, ps->src + s, (int32_t)(ps->pos - s), s);
            if (r < 0) return r;
            item = new_node(ps, ND_REF, r, 0);
        } else if (c == '<') {
            return fail(ps, at, -ERR_INVAL, "token references (<...>) are not supported: write the token's text as a string");
        } else {
            break;
        }
        if (item < 0) return item;
        item = parse_postfix(ps, item);
        if (item < 0 || push_tmp(ps, item)) return ps->err ? ps->err : item;
        skip_space(ps, nested);
    }
    return gather(ps, base, ND_SEQ);
}

static int parse_alts(struct parser *ps, bool nested) {
    int32_t base = ps->sx->n_tmp;
    for (;;) {
        int s = parse_seq(ps, nested);
        if (s < 0 || push_tmp(ps, s)) return ps->err ? ps->err : s;
        if (ps->pos < ps->len && ps->src[ps->pos] == '|') {
            ps->pos++;
            skip_space(ps, true);
            continue;
        }
        break;
    }
    return gather(ps, base, ND_ALT);
}

static int parse_grammar(struct parser *ps) {
    skip_space(ps, true);
    while (ps->pos < ps->len) {
        size_t at = ps->pos;
        while (ps->pos < ps->len && is_name_char(ps->src[ps->pos])) ps->pos++;
        if (ps->pos == at) {
            char c = ps->src[at];
            if (c >= 0x20 && c < 0x7f) return fail(ps, at, -ERR_INVAL, "expected a rule name, got '%c'", c);
            return fail(ps, at, -ERR_INVAL, "expected a rule name");
        }
        int32_t r = rule_get(ps, ps->src + at, (int32_t)(ps->pos - at), at);
        if (r < 0) return r;
        skip_space(ps, false);
        if (ps->len - ps->pos < 3 || memcmp(ps->src + ps->pos, "::=", 3) != 0)
            return fail(ps, ps->pos, -ERR_INVAL, "expected '::=' after the rule name");
        ps->pos += 3;
        skip_space(ps, true);
        int body = parse_alts(ps, false);
        if (body < 0) return body;
        if (ps->pos < ps->len && ps->src[ps->pos] != '\n' && ps->src[ps->pos] != '\r') {
            char c = ps->src[ps->pos];
            if (c >= 0x20 && c < 0x7f) return fail(ps, ps->pos, -ERR_INVAL, "unexpected '%c'", c);
            return fail(ps, ps->pos, -ERR_INVAL, "unexpected byte 0x%02x", (unsigned char)c);
        }
        ps->sx->rules[r].body = body;
        skip_space(ps, true);
    }
    return 0;
}

/* ---- analysis: which rules are recursive, and no left recursion ----------------------------- */

static bool node_nullable(const struct syntax *sx, const uint8_t *rule_null, int32_t nd) {
    const struct node *n = &sx->nodes[nd];
    switch (n->kind) {
    case ND_EMPTY: return true;
    case ND_BYTES: return false;
    case ND_CLASS: return false;
    case ND_REF: return rule_null[n->a];
    case ND_SEQ:
        for (int32_t i = 0; i < n->n; i++)
            if (!node_nullable(sx, rule_null, sx->kids[n->a + i])) return false;
        return true;
    case ND_ALT:
        for (int32_t i = 0; i < n->n; i++)
            if (node_nullable(sx, rule_null, sx->kids[n->a + i])) return true;
        return false;
    case ND_REP: return n->min == 0 || n->max == 0 || node_nullable(sx, rule_null, n->a);
    }
    return false;
}

/* Rules referenced by node nd: all of them (left_only false) or only those reachable before a
 * byte is matched. Appended to *out (deduplication is not needed). */
static int collect_refs(const struct syntax *sx, const uint8_t *rule_null, int32_t nd, bool left_only, int32_t **out,
                        int32_t *n, int32_t *cap) {
    const struct node *x = &sx->nodes[nd];
    switch (x->kind) {
    case ND_REF:
        if (grow(out, cap, *n + 1, sizeof **out)) return -ERR_NOMEM;
        (*out)[(*n)++] = x->a;
        return 0;
    case ND_SEQ:
        for (int32_t i = 0; i < x->n; i++) {
            int32_t k = sx->kids[x->a + i];
            if (collect_refs(sx, rule_null, k, left_only, out, n, cap)) return -ERR_NOMEM;
            if (left_only && !node_nullable(sx, rule_null, k)) break;
        }
        return 0;
    case ND_ALT:
        for (int32_t i = 0; i < x->n; i++)
            if (collect_refs(sx, rule_null, sx->kids[x->a + i], left_only, out, n, cap)) return -ERR_NOMEM;
        return 0;
    case ND_REP:
        if (x->max == 0) return 0;
        return collect_refs(sx, rule_null, x->a, left_only, out, n, cap);
    default: return 0;
    }
}

/* Tarjan's strongly connected components, iteratively. edges of v: adj[off[v]..off[v+1]).
 * cyclic[v] = v lies on a cycle. 0 or -ERR_NOMEM. */
static int find_cycles(int32_t nv, const int32_t *off, const int32_t *adj, uint8_t *cyclic) {
    int32_t *index = malloc((size_t)nv * sizeof *index), *low = malloc((size_t)nv * sizeof *low);
    int32_t *stk = malloc((size_t)nv * sizeof *stk), *call = malloc((size_t)nv * sizeof *call);
    int32_t *edge = malloc((size_t)nv * sizeof *edge);
    uint8_t *on = calloc((size_t)nv, 1);
    int rc = 0;
    if (!index || !low || !stk || !call || !edge || !on) {
        rc = -ERR_NOMEM;
        goto out;
    }
    for (int32_t v = 0; v < nv; v++) index[v] = -1, cyclic[v] = 0;
    int32_t counter = 0, sp = 0;
    for (int32_t root = 0; root < nv; root++) {
        if (index[root] >= 0) continue;
        int32_t depth = 0;
        call[depth] = root;
        edge[depth] = off[root];
        index[root] = low[root] = counter++;
        stk[sp++] = root;
        on[root] = 1;
        while (depth >= 0) {
            int32_t v = call[depth];
            if (edge[depth] < off[v + 1]) {
                int32_t w = adj[edge[depth]++];
                if (w == v) cyclic[v] = 1;
                if (index[w] < 0) {
                    index[w] = low[w] = counter++;
                    stk[sp++] = w;
                    on[w] = 1;
                    depth++;
                    call[depth] = w;
                    edge[depth] = off[w];
                } else if (on[w] && index[w] < low[v]) {
                    low[v] = index[w];
                }
                continue;
            }
            if (low[v] == index[v]) {
                int32_t size = 0, first = sp;
                do {
                    first--;
                    size++;
                } while (stk[first] != v);
                for (int32_t i = first; i < sp; i++) {
                    on[stk[i]] = 0;
                    if (size > 1) cyclic[stk[i]] = 1;
                }
                sp = first;
            }
            depth--;
            if (depth >= 0 && low[v] < low[call[depth]]) low[call[depth]] = low[v];
        }
    }
out:
    free(index);
    free(low);
    free(stk);
    free(call);
    free(edge);
    free(on);
    return rc;
}

/* Graph of rule references (left-edge ones only, or all) as CSR. */
static int ref_graph(const struct syntax *sx, const uint8_t *rule_null, bool left_only, int32_t **off_out,
                     int32_t **adj_out) {
    int32_t *off = malloc(((size_t)sx->n_rules + 1) * sizeof *off), *adj = NULL, n = 0, cap = 0;
    if (!off) return -ERR_NOMEM;
    for (int32_t r = 0; r < sx->n_rules; r++) {
        off[r] = n;
        if (collect_refs(sx, rule_null, sx->rules[r].body, left_only, &adj, &n, &cap)) {
            free(off);
            free(adj);
            return -ERR_NOMEM;
        }
    }
    off[sx->n_rules] = n;
    *off_out = off;
    *adj_out = adj;
    return 0;
}

/* ---- compiled states ------------------------------------------------------------------------ */

enum pstate_kind { PS_BYTE, PS_SPLIT, PS_CALL, PS_TAIL, PS_END };

struct pstate {
    uint8_t kind;
    int32_t out;  /* BYTE: after the byte; SPLIT: first branch; CALL: the return state */
    int32_t arg;  /* BYTE: byte set; SPLIT: second branch; CALL/TAIL: rule */
};

struct byteset {
    uint64_t w[4];
};

static bool bs_has(const struct byteset *s, unsigned b) { return (s->w[b >> 6] >> (b & 63)) & 1; }
static bool bs_equal(const struct byteset *a, const struct byteset *b) {
    return a->w[0] == b->w[0] && a->w[1] == b->w[1] && a->w[2] == b->w[2] && a->w[3] == b->w[3];
}
static int bs_count(const struct byteset *s) {
    return __builtin_popcountll(s->w[0]) + __builtin_popcountll(s->w[1]) + __builtin_popcountll(s->w[2]) +
           __builtin_popcountll(s->w[3]);
}
static void bs_range(struct byteset *s, unsigned lo, unsigned hi) {
    for (unsigned b = lo; b <= hi; b++) s->w[b >> 6] |= 1ull << (b & 63);
}

struct stack_node {
    int32_t state, parent;
};

/* A kept mask: a bitset when many tokens are allowed, their ids when few (most masks allow a
 * handful of tokens: a bitset each would be n_vocab / 8 bytes). */
struct mslot {
    uint64_t *bits;
    int32_t *ids;
    int32_t count;
    int32_t owner;       /* the configuration it belongs to, -1 */
    uint64_t used;       /* budget_tick() of its last use */
};

struct mpool {
    struct mslot *s;     /* GRAMMAR_MAX_MASKS */
    int32_t n_used, next;
};

struct grammar {
    _Atomic int32_t refs;
    const struct grammar_vocab *v;
    /* compiled */
    struct pstate *st;
    int32_t n_st, cap_st;
    struct byteset *sets;
    int32_t n_sets, cap_sets;
    int32_t *rule_start; /* per rule: compiled entry for CALLs, -1 when only inlined */
    int32_t n_rules;
    int32_t root_start;
    uint8_t cls[256];    /* byte -> class */
    uint8_t rep[256];    /* class -> a byte of it */
    int32_t n_cls;
    int32_t *named;      /* control tokens the literals name */
    int32_t n_named, cap_named;
    /* counted repetitions: a state of the k-th last optional copy of X in X{m,n} (X without
     * calls) has twin[state], the same state in an X* compiled beside the copies, and
     * twin_rem[state] = k iterations left, itself included. -1: no twin. */
    int32_t *twin, *twin_rem;
    int32_t n_twin, cap_twin, cap_twin_rem;

    /* the matcher's shared caches: everything below under mu */
    pthread_mutex_t mu;
    uint32_t epoch;
    struct stack_node *nd;
    uint16_t *nd_depth;
    int32_t n_nd, cap_nd, cap_nd_depth;
    uint64_t *nd_key;    /* open addressing: key (state, parent + 1), value in nd_val */
    int32_t *nd_val;
    int32_t nd_ht_cap;
    /* configurations: tops[cf_off[c] .. + cf_len[c]), complete flag, transitions per class */
    int32_t *cf_off, *cf_len;
    uint8_t *cf_complete;/* CF_COMPLETE, CF_CTX */
    int32_t *cf_mask;    /* mask slot, -1 */
    int32_t *cf_lslot;   /* local mask slot, -1 */
    int32_t *cf_local;   /* its local configuration, -1 until known */
    int32_t *cf_twin;    /* its tops through twin[] (TWIN_UNKNOWN, TWIN_NONE), see twin_mask */
    int32_t *cf_rem;     /* the fewest iterations left among its twinned tops */
    int32_t n_cf, cap_cf, cap_cf_b, cap_cf_c, cap_cf_d, cap_cf_e, cap_cf_f, cap_cf_g, cap_cf_h, cap_cf_i;
    int32_t *tops;
    int32_t n_tops, cap_tops;
    uint64_t *cf_hash_key;
    int32_t *cf_ht;      /* config + 1, 0 empty */
    int32_t cf_ht_cap;
    int32_t *trans;      /* n_cf * n_cls: -1 unknown, -2 dead, else config */
    int32_t cap_trans;
    int32_t soft_cf;     /* flush beyond this many configurations, between calls */
    /* masks per configuration (mask_of) and local masks (compute_local), FIFO pools; the local
     * ones also keep their uncertain subtrees */
    struct mpool full, local;
    int32_t **lunc, *n_lunc, *cap_lunc;
    uint64_t *scratch;   /* words + 1: a mask being computed */
    uint8_t *walk_ctx;   /* per trie depth: the top rule could have ended on the way */
    int32_t *walk_node;  /* per trie depth: the node on the path */
    /* scratch of one transition */
    int32_t *work;       /* (state, parent) pairs */
    int32_t n_work, cap_work;
    uint64_t *vis;       /* visited keys, vis_gen stamps */
    uint32_t *vis_gen;
    uint32_t gen;
    int32_t vis_cap, n_vis;
    int32_t *out;
    int32_t n_out, cap_out;
    int32_t work_left;   /* closure steps the current call may still take (GRAMMAR_MAX_WORK at each call) */
    int32_t *walk_cf;    /* per trie depth */
    /* live states, so a flush can save and restore them */
    struct grammar_state *live;
    /* the memory budget (see the budget section): bytes of the kept masks, bytes counted in
     * budget_used, the last use; the registry of grammars, under budget_mu */
    int64_t mask_bytes, accounted;
    _Atomic uint64_t last_use;
    bool registered;
    struct grammar *reg_prev, *reg_next;
};

#define CF_UNKNOWN (-1)
#define CF_DEAD (-2)
#define CF_COMPLETE 1   /* root matched whole (a pop left the bottom) */
#define CF_CTX 2        /* a pop left a local configuration's cut stack (CTX below its tops) */
#define CTX (-2)        /* parent of a local configuration's tops: "whatever the stack holds" */
#define MAX_STACKS 4096 /* tops per configuration (an ambiguous grammar's set can explode) */
#define TWIN_UNKNOWN (-1)
#define TWIN_NONE (-3)

struct grammar_vocab {
    int32_t n_vocab;
    uint8_t *kind;
    char *text;          /* every token's bytes */
    uint32_t *off, *len;
    /* the trie of TEXT tokens in preorder */
    int32_t n_nodes;
    uint8_t *nbyte;
    uint16_t *ndepth;
    int32_t *nskip;      /* first node after the subtree */
    int32_t *ntok;       /* tokens ending here: sorted[ntok[i] .. ntok[i + 1]) */
    int32_t *ntok1;      /* the first of them, or n_vocab (a spare bit past the mask's tokens) */
    uint8_t *nmulti;     /* more than one token ends here (same bytes) */
    int32_t *sorted;
    int32_t max_depth;
    int32_t *eog;
    int32_t n_eog;
    int32_t *control;
    int32_t n_control;
    /* for twin_mask: per node the longest token of its subtree; per length r in 1..LEN_BITS the
     * bitset of TEXT tokens of at most r bytes (lenle + (r - 1) * words); the TEXT tokens longer
     * than LEN_BITS bytes, longest first */
    uint16_t *nmax;
    uint64_t *lenle;
    int32_t *longer;
    int32_t n_longer;
};

#define LEN_BITS 32 /* lengths with a kept bitset: n_vocab / 8 bytes each */

struct grammar_state {
    struct grammar *g;
    uint32_t epoch;
    int32_t cf;
    bool dead;           /* an error left it unusable */
    /* saved across a flush: [complete, n_stacks, (len, bottom .. top)*] */
    int32_t *saved;
    int32_t n_saved, cap_saved;
    struct grammar_state *prev, *next;
};

/* The process's budget for what compiled grammars keep (see grammar.h): the limit, the bytes
 * counted, the registry of grammars (budget_mu guards the registry and the eviction), the clock
 * of uses. */
static pthread_mutex_t budget_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int64_t budget_limit = GRAMMAR_BUDGET_DEFAULT;
static _Atomic int64_t budget_used;
static _Atomic uint64_t budget_clock, budget_evicted, budget_released;
static struct grammar *budget_registry;

static uint64_t budget_tick(void) { return atomic_fetch_add_explicit(&budget_clock, 1, memory_order_relaxed) + 1; }

/* Bytes a kept mask holds. */
static int64_t slot_bytes(const struct grammar_vocab *v, const struct mslot *s) {
    return (s->bits ? (int64_t)(grammar_mask_words(v) * sizeof *s->bits) : 0) + (s->ids ? (int64_t)s->count * 4 : 0);
}

/* ---- the compiler --------------------------------------------------------------------------- */

struct compiler {
    struct grammar *g;
    const struct syntax *sx;
    uint8_t *recursive; /* per rule */
    int32_t *todo;      /* rules whose body must be compiled for CALLs */
    int32_t n_todo, cap_todo;
    int32_t max_states; /* this attempt's bound */
    bool no_inline;     /* every reference a CALL (the second attempt of a grammar inlining blows up) */
    int err;
};

static int32_t new_state(struct compiler *c, uint8_t kind, int32_t out, int32_t arg) {
    struct grammar *g = c->g;
    if (g->n_st >= c->max_states) {
        c->err = -ERR_TOOBIG;
        return -1;
    }
    if (grow(&g->st, &g->cap_st, g->n_st + 1, sizeof *g->st)) {
        c->err = -ERR_NOMEM;
        return -1;
    }
    g->st[g->n_st] = (struct pstate){kind, out, arg};
    return g->n_st++;
}

static int32_t new_set(struct compiler *c, const struct byteset *s) {
    struct grammar *g = c->g;
    /* the last few sets repeat most often (literal bytes, continuation ranges) */
    for (int32_t i = g->n_sets - 1; i >= 0 && i >= g->n_sets - 8; i--)
        if (bs_equal(&g->sets[i], s)) return i;
    if (grow(&g->sets, &g->cap_sets, g->n_sets + 1, sizeof *g->sets)) {
        c->err = -ERR_NOMEM;
        return -1;
    }
    g->sets[g->n_sets] = *s;
    return g->n_sets++;
}

static int32_t byte_state(struct compiler *c, const struct byteset *s, int32_t next) {
    int32_t set = new_set(c, s);
    return set < 0 ? -1 : new_state(c, PS_BYTE, next, set);
}

struct u8seq {
    int n;
    uint8_t lo[4], hi[4];
    struct byteset first;
};

static int utf8_encode(uint32_t cp, uint8_t *o) {
    if (cp < 0x80) return o[0] = (uint8_t)cp, 1;
    if (cp < 0x800) return o[0] = (uint8_t)(0xC0 | cp >> 6), o[1] = (uint8_t)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return o[0] = (uint8_t)(0xE0 | cp >> 12), o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)),
               o[2] = (uint8_t)(0x80 | (cp & 0x3F)), 3;
    return o[0] = (uint8_t)(0xF0 | cp >> 18), o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F)),
           o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (uint8_t)(0x80 | (cp & 0x3F)), 4;
}

/* Code points [lo, hi] (no surrogates) as UTF-8 byte-range sequences: split until both ends
 * encode to the same length and differ only in whole trailing blocks of continuation bytes. */
static int utf8_split(uint32_t lo, uint32_t hi, struct u8seq **seqs, int32_t *n, int32_t *cap) {
    static const uint32_t bounds[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= bounds[i] && hi > bounds[i])
            return utf8_split(lo, bounds[i], seqs, n, cap) || utf8_split(bounds[i] + 1, hi, seqs, n, cap) ? -ERR_NOMEM : 0;
    uint8_t a[4] = {0}, b[4] = {0}; /* bytes past the length compare equal when forms are merged */
    int len = utf8_encode(lo, a);
    utf8_encode(hi, b);
    for (int i = 1; i < len; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) return utf8_split(lo, lo | m, seqs, n, cap) || utf8_split((lo | m) + 1, hi, seqs, n, cap) ? -ERR_NOMEM : 0;
            if ((hi & m) != m)
                return utf8_split(lo, (hi & ~m) - 1, seqs, n, cap) || utf8_split(hi & ~m, hi, seqs, n, cap) ? -ERR_NOMEM : 0;
        }
    }
    if (grow(seqs, cap, *n + 1, sizeof **seqs)) return -ERR_NOMEM;
    struct u8seq *s = &(*seqs)[(*n)++];
    memset(s, 0, sizeof *s);
    s->n = len;
    memcpy(s->lo, a, 4);
    memcpy(s->hi, b, 4);
    bs_range(&s->first, a[0], b[0]);
    return 0;
}

/* A class (code point pairs) followed by next: one BYTE state per byte of each UTF-8 form, the
 * forms that differ only in their first byte merged, alternatives joined by SPLITs. */
static int32_t build_class(struct compiler *c, const uint32_t *r, int32_t n, int32_t next) {
    struct u8seq *seqs = NULL;
    int32_t ns = 0, cap = 0;
    for (int32_t i = 0; i < n; i++) {
        uint32_t lo = r[2 * i], hi = r[2 * i + 1];
        /* surrogates are not characters */
        if (lo < 0xD800 && hi >= 0xD800) {
            if (utf8_split(lo, 0xD7FF, &seqs, &ns, &cap)) goto oom;
            lo = 0xE000;
        }
        if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;
        if (lo > hi) continue;
        if (utf8_split(lo, hi, &seqs, &ns, &cap)) goto oom;
    }
    /* merge forms with the same length and the same continuation ranges */
    int32_t m = 0;
    for (int32_t i = 0; i < ns; i++) {
        int32_t j = 0;
        for (; j < m; j++)
            if (seqs[j].n == seqs[i].n && !memcmp(seqs[j].lo + 1, seqs[i].lo + 1, 3) &&
                !memcmp(seqs[j].hi + 1, seqs[i].hi + 1, 3))
                break;
        if (j < m) {
            for (int w = 0; w < 4; w++) seqs[j].first.w[w] |= seqs[i].first.w[w];
        } else {
            seqs[m++] = seqs[i];
        }
    }
    int32_t start = -1;
    if (m == 0) {
        struct byteset none = {{0}};
        start = byte_state(c, &none, next); /* matches nothing */
    }
    for (int32_t i = m - 1; i >= 0 && !c->err; i--) {
        int32_t s = next;
        for (int k = seqs[i].n - 1; k >= 1 && s >= 0; k--) {
            struct byteset b = {{0}};
            bs_range(&b, seqs[i].lo[k], seqs[i].hi[k]);
            s = byte_state(c, &b, s);
        }
        if (s >= 0) s = byte_state(c, &seqs[i].first, s);
        if (s < 0) break;
        start = start < 0 ? s : new_state(c, PS_SPLIT, s, start);
    }
    free(seqs);
    return c->err ? -1 : start;
oom:
    free(seqs);
    c->err = -ERR_NOMEM;
    return -1;
}

static int32_t build(struct compiler *c, int32_t nd, int32_t next, int inline_depth);

/* twin[] and twin_rem[] cover states [0, n) (-1 for the new ones). 0 or -1 (error set). */
static int twin_cover(struct compiler *c, int32_t n) {
    struct grammar *g = c->g;
    if (grow(&g->twin, &g->cap_twin, n, sizeof *g->twin) || grow(&g->twin_rem, &g->cap_twin_rem, n, sizeof *g->twin_rem)) {
        c->err = -ERR_NOMEM;
        return -1;
    }
    for (; g->n_twin < n; g->n_twin++) g->twin[g->n_twin] = g->twin_rem[g->n_twin] = -1;
    return 0;
}

/* The optional copies of X{m,n} were built at block[i] (the i-th from the end: i + 1 iterations
 * left), each a run of the same states up to the next copy's start: when X makes no calls and
 * holds no twinned copies of its own, compile an X* beside them (unreachable from the start) and
 * point every copy's state at its twin there. A configuration inside the copies then takes its
 * short tokens' mask from its twin's (see twin_mask): one walk of the vocabulary serves all
 * n - m positions of a string's maxLength. 0 or -1 (error set). */
static int twin_copies(struct compiler *c, int32_t nd, int32_t next, const int32_t *block, int32_t n_opt, int inline_depth) {
    struct grammar *g = c->g;
    int32_t size = (n_opt > 1 ? block[1] : g->n_st) - block[0] - 1; /* the copy's states, not its SPLIT */
    if (size <= 0 || twin_cover(c, g->n_st)) return c->err ? -1 : 0;
    for (int32_t s = block[0]; s < block[0] + size; s++)
        if (g->st[s].kind != PS_BYTE && g->st[s].kind != PS_SPLIT) return 0;
        else if (g->twin[s] >= 0) return 0;
    int32_t loop = new_state(c, PS_SPLIT, -1, next);
    if (loop < 0) return -1;
    int32_t t0 = g->n_st, body = build(c, nd, loop, inline_depth);
    if (body < 0) return -1;
    g->st[loop].out = body;
    if (g->n_st - t0 != size) return 0; /* not the same shape: no twins (never seen; a guard) */
    for (int32_t i = 0; i < n_opt; i++) /* a twin stands for its copy only when their kinds match */
        for (int32_t k = 0; k < size; k++)
            if (g->st[block[i] + k].kind != g->st[t0 + k].kind) return 0;
    if (twin_cover(c, g->n_st)) return -1;
    for (int32_t i = 0; i < n_opt; i++)
        for (int32_t k = 0; k < size; k++) {
            g->twin[block[i] + k] = t0 + k;
            g->twin_rem[block[i] + k] = i + 1;
        }
    return 0;
}

/* State sequence matching node nd, then continuing at next. Returns its first state or -1. */
static int32_t build(struct compiler *c, int32_t nd, int32_t next, int inline_depth) {
    const struct syntax *sx = c->sx;
    const struct node *x = &sx->nodes[nd];
    switch (x->kind) {
    case ND_EMPTY: return next;
    case ND_BYTES:
        for (int32_t i = x->n - 1; i >= 0 && next >= 0; i--) {
            struct byteset b = {{0}};
            bs_range(&b, sx->bytes[x->a + i], sx->bytes[x->a + i]);
            next = byte_state(c, &b, next);
        }
        return next;
    case ND_CLASS: return build_class(c, sx->ranges + 2 * x->a, x->n, next);
    case ND_REF: {
        int32_t r = x->a;
        if (!c->no_inline && !c->recursive[r] && inline_depth < 64) return build(c, sx->rules[r].body, next, inline_depth + 1);
        if (c->g->rule_start[r] == -1) {
            c->g->rule_start[r] = -2; /* queued */
            if (grow(&c->todo, &c->cap_todo, c->n_todo + 1, sizeof *c->todo)) {
                c->err = -ERR_NOMEM;
                return -1;
            }
            c->todo[c->n_todo++] = r;
        }
        bool tail = c->g->st[next].kind == PS_END;
        return new_state(c, tail ? PS_TAIL : PS_CALL, next, r);
    }
    case ND_SEQ:
        for (int32_t i = x->n - 1; i >= 0 && next >= 0; i--) next = build(c, sx->kids[x->a + i], next, inline_depth);
        return next;
    case ND_ALT: {
        int32_t s = build(c, sx->kids[x->a + x->n - 1], next, inline_depth);
        for (int32_t i = x->n - 2; i >= 0 && s >= 0; i--) {
            int32_t k = build(c, sx->kids[x->a + i], next, inline_depth);
            if (k < 0) return -1;
            s = new_state(c, PS_SPLIT, k, s);
        }
        return s;
    }
    case ND_REP: {
        int32_t cur = next;
        if (x->max < 0) {
            int32_t loop = new_state(c, PS_SPLIT, -1, next);
            if (loop < 0) return -1;
            int32_t body = build(c, x->a, loop, inline_depth);
            if (body < 0) return -1;
            c->g->st[loop].out = body;
            cur = loop;
        } else if (x->max > x->min) {
            int32_t n_opt = x->max - x->min, *block = malloc((size_t)n_opt * sizeof *block);
            if (!block) {
                c->err = -ERR_NOMEM;
                return -1;
            }
            for (int32_t i = 0; i < n_opt && cur >= 0; i++) {
                block[i] = c->g->n_st;
                int32_t body = build(c, x->a, cur, inline_depth);
                cur = body < 0 ? -1 : new_state(c, PS_SPLIT, body, next);
            }
            if (cur >= 0 && n_opt >= 2 && twin_copies(c, x->a, next, block, n_opt, inline_depth) < 0) cur = -1;
            free(block);
        }
        for (int32_t i = 0; i < x->min && cur >= 0; i++) cur = build(c, x->a, cur, inline_depth);
        return cur;
    }
    }
    return -1;
}

/* Whether an equal set is in `seen` (open addressing over set indices, -1 empty, cap a power of
 * two); if not, set s goes in. */
static bool set_seen(const struct grammar *g, int32_t *seen, size_t cap, int32_t s) {
    const struct byteset *set = &g->sets[s];
    uint64_t h = (set->w[0] * 0x9E3779B97F4A7C15ull) ^ (set->w[1] * 0xC2B2AE3D27D4EB4Full) ^
                 (set->w[2] * 0x165667B19E3779F9ull) ^ (set->w[3] * 0x27D4EB2F165667C5ull);
    for (size_t i = (size_t)(h ^ h >> 29) & (cap - 1);; i = (i + 1) & (cap - 1)) {
        if (seen[i] < 0) {
            seen[i] = s;
            return false;
        }
        if (bs_equal(&g->sets[seen[i]], set)) return true;
    }
}

/* Byte classes: bytes that every set treats alike share a class (refinement, one set at a time).
 * A set equal to one already applied splits nothing: skipped (counted repetitions copy their
 * sets many times over). */
static void byte_classes(struct grammar *g) {
    uint8_t cls[256] = {0};
    int32_t n = 1;
    int16_t size[256] = {256}; /* bytes per class */
    size_t cap = 16;
    while (cap < 2 * (size_t)g->n_sets) cap <<= 1;
    int32_t *seen = malloc(cap * sizeof *seen); /* NULL: every set applied, the same classes */
    if (seen) memset(seen, 0xFF, cap * sizeof *seen);
    for (int32_t s = 0; s < g->n_sets && n < 256; s++) {
        const struct byteset *set = &g->sets[s];
        int count = bs_count(set);
        if (count == 0 || count == 256 || (seen && set_seen(g, seen, cap, s))) continue; /* splits nothing new */
        if (count == 1) { /* a literal byte (most sets): it leaves its class unless alone there */
            unsigned b = 0;
            while (!bs_has(set, b)) b++;
            if (size[cls[b]] > 1) {
                size[cls[b]]--;
                cls[b] = (uint8_t)n;
                size[n++] = 1;
            }
            continue;
        }
        int16_t map_in[256], map_out[256];
        for (int i = 0; i < 256; i++) map_in[i] = map_out[i] = -1;
        int32_t m = 0;
        for (int b = 0; b < 256; b++) {
            int16_t *map = bs_has(set, (unsigned)b) ? map_in : map_out;
            if (map[cls[b]] < 0) map[cls[b]] = (int16_t)m++;
            cls[b] = (uint8_t)map[cls[b]];
        }
        n = m;
        memset(size, 0, sizeof size);
        for (int b = 0; b < 256; b++) size[cls[b]]++;
    }
    free(seen);
    g->n_cls = n;
    memcpy(g->cls, cls, 256);
    for (int b = 255; b >= 0; b--) g->rep[cls[b]] = (uint8_t)b;
}

/* Control tokens whose text a literal of the grammar contains. */
static int find_named(struct grammar *g, const struct syntax *sx) {
    const struct grammar_vocab *v = g->v;
    for (int32_t i = 0; i < v->n_control; i++) {
        int32_t t = v->control[i];
        const char *txt = v->text + v->off[t];
        uint32_t tl = v->len[t];
        if (!tl) continue;
        for (int32_t nd = 0; nd < sx->n_nodes; nd++) {
            const struct node *x = &sx->nodes[nd];
            if (x->kind != ND_BYTES || (uint32_t)x->n < tl) continue;
            if (memmem(sx->bytes + x->a, (size_t)x->n, txt, tl)) {
                if (grow(&g->named, &g->cap_named, g->n_named + 1, sizeof *g->named)) return -ERR_NOMEM;
                g->named[g->n_named++] = t;
                break;
            }
        }
    }
    return 0;
}

/* ---- the matcher's caches ------------------------------------------------------------------ */

static void cache_reset(struct grammar *g) {
    g->n_nd = 0;
    g->n_cf = 0;
    g->n_tops = 0;
    if (g->nd_key) memset(g->nd_val, 0, (size_t)g->nd_ht_cap * sizeof *g->nd_val);
    if (g->cf_ht) memset(g->cf_ht, 0, (size_t)g->cf_ht_cap * sizeof *g->cf_ht);
    g->full.n_used = g->full.next = 0;
    g->local.n_used = g->local.next = 0;
    for (int32_t i = 0; g->full.s && i < GRAMMAR_MAX_MASKS; i++) g->full.s[i].owner = g->local.s[i].owner = -1;
    g->epoch++;
}

/* The node (state, parent), interned. Index, or -1 (out of memory). */
static int32_t intern_node(struct grammar *g, int32_t state, int32_t parent) {
    if (g->n_nd * 2 >= g->nd_ht_cap) {
        int32_t cap = g->nd_ht_cap ? g->nd_ht_cap * 2 : 1024;
        uint64_t *key = malloc((size_t)cap * sizeof *key);
        int32_t *val = calloc((size_t)cap, sizeof *val);
        if (!key || !val) {
            free(key);
            free(val);
            return -1;
        }
        for (int32_t i = 0; i < g->nd_ht_cap; i++) {
            if (!g->nd_val[i]) continue;
            size_t j = mix64(g->nd_key[i]) & (size_t)(cap - 1);
            while (val[j]) j = (j + 1) & (size_t)(cap - 1);
            key[j] = g->nd_key[i];
            val[j] = g->nd_val[i];
        }
        free(g->nd_key);
        free(g->nd_val);
        g->nd_key = key;
        g->nd_val = val;
        g->nd_ht_cap = cap;
    }
    uint64_t k = (uint64_t)(uint32_t)state << 32 | (uint32_t)(parent + 1);
    size_t j = mix64(k) & (size_t)(g->nd_ht_cap - 1);
    for (; g->nd_val[j]; j = (j + 1) & (size_t)(g->nd_ht_cap - 1))
        if (g->nd_key[j] == k) return g->nd_val[j] - 1;
    if (grow(&g->nd, &g->cap_nd, g->n_nd + 1, sizeof *g->nd) ||
        grow(&g->nd_depth, &g->cap_nd_depth, g->n_nd + 1, sizeof *g->nd_depth))
        return -1;
    g->nd[g->n_nd] = (struct stack_node){state, parent};
    g->nd_depth[g->n_nd] = (uint16_t)(parent < 0 ? 1 : g->nd_depth[parent] + 1);
    g->nd_key[j] = k;
    g->nd_val[j] = g->n_nd + 1;
    return g->n_nd++;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t cf_hash(const int32_t *tops, int32_t n, uint8_t flags) {
    uint64_t h = 0x6a09e667f3bcc909ull + flags * 0x9e3779b97f4a7c15ull;
    for (int32_t i = 0; i < n; i++) h = mix64(h ^ (uint32_t)tops[i]) + (uint64_t)i;
    return h;
}

/* The configuration of the sorted unique tops[0..n) and complete: its index, CF_DEAD, or a
 * negative error below CF_DEAD (-3: out of memory). */
#define CF_NOMEM (-3)
static int32_t intern_cf(struct grammar *g, const int32_t *tops, int32_t n, uint8_t complete) {
    if (n == 0 && !complete) return CF_DEAD;
    if (g->n_cf * 2 >= g->cf_ht_cap) {
        int32_t cap = g->cf_ht_cap ? g->cf_ht_cap * 2 : 256;
        int32_t *ht = calloc((size_t)cap, sizeof *ht);
        if (!ht) return CF_NOMEM;
        for (int32_t i = 0; i < g->cf_ht_cap; i++) {
            if (!g->cf_ht[i]) continue;
            size_t j = g->cf_hash_key[g->cf_ht[i] - 1] & (size_t)(cap - 1);
            while (ht[j]) j = (j + 1) & (size_t)(cap - 1);
            ht[j] = g->cf_ht[i];
        }
        free(g->cf_ht);
        g->cf_ht = ht;
        g->cf_ht_cap = cap;
    }
    uint64_t h = cf_hash(tops, n, complete);
    size_t j = h & (size_t)(g->cf_ht_cap - 1);
    for (; g->cf_ht[j]; j = (j + 1) & (size_t)(g->cf_ht_cap - 1)) {
        int32_t c = g->cf_ht[j] - 1;
        if (g->cf_hash_key[c] == h && g->cf_len[c] == n && g->cf_complete[c] == complete &&
            (n == 0 || !memcmp(g->tops + g->cf_off[c], tops, (size_t)n * sizeof *tops)))
            return c;
    }
    int32_t c = g->n_cf;
    if (grow(&g->cf_off, &g->cap_cf, c + 1, sizeof *g->cf_off) ||
        grow(&g->cf_len, &g->cap_cf_b, c + 1, sizeof *g->cf_len) ||
        grow(&g->cf_complete, &g->cap_cf_c, c + 1, 1) ||
        grow(&g->cf_mask, &g->cap_cf_d, c + 1, sizeof *g->cf_mask) ||
        grow(&g->cf_hash_key, &g->cap_cf_e, c + 1, sizeof *g->cf_hash_key) ||
        grow(&g->cf_lslot, &g->cap_cf_f, c + 1, sizeof *g->cf_lslot) ||
        grow(&g->cf_local, &g->cap_cf_g, c + 1, sizeof *g->cf_local) ||
        grow(&g->cf_twin, &g->cap_cf_h, c + 1, sizeof *g->cf_twin) ||
        grow(&g->cf_rem, &g->cap_cf_i, c + 1, sizeof *g->cf_rem) ||
        grow(&g->tops, &g->cap_tops, (int64_t)g->n_tops + n, sizeof *g->tops) ||
        grow(&g->trans, &g->cap_trans, (int64_t)(c + 1) * g->n_cls, sizeof *g->trans))
        return CF_NOMEM;
    g->cf_off[c] = g->n_tops;
    g->cf_len[c] = n;
    g->cf_complete[c] = complete;
    g->cf_mask[c] = -1;
    g->cf_lslot[c] = -1;
    g->cf_local[c] = -1;
    g->cf_twin[c] = TWIN_UNKNOWN;
    g->cf_rem[c] = 0;
    g->cf_hash_key[c] = h;
    if (n) memcpy(g->tops + g->n_tops, tops, (size_t)n * sizeof *tops);
    g->n_tops += n;
    for (int32_t k = 0; k < g->n_cls; k++) g->trans[(size_t)c * (size_t)g->n_cls + (size_t)k] = CF_UNKNOWN;
    g->cf_ht[j] = c + 1;
    g->n_cf++;
    return c;
}

static int work_push(struct grammar *g, int32_t state, int32_t parent) {
    if (grow(&g->work, &g->cap_work, (int64_t)g->n_work + 2, sizeof *g->work)) return -1;
    g->work[g->n_work++] = state;
    g->work[g->n_work++] = parent;
    return 0;
}

/* Marks (state, parent) visited in this closure; false if it already was. */
static int visit(struct grammar *g, int32_t state, int32_t parent) {
    if (g->n_vis * 2 >= g->vis_cap) {
        int32_t cap = g->vis_cap ? g->vis_cap * 2 : 1024;
        uint64_t *key = malloc((size_t)cap * sizeof *key);
        uint32_t *gen = calloc((size_t)cap, sizeof *gen);
        if (!key || !gen) {
            free(key);
            free(gen);
            return -1;
        }
        for (int32_t i = 0; i < g->vis_cap; i++) {
            if (g->vis_gen[i] != g->gen) continue;
            size_t j = mix64(g->vis[i]) & (size_t)(cap - 1);
            while (gen[j] == g->gen) j = (j + 1) & (size_t)(cap - 1);
            key[j] = g->vis[i];
            gen[j] = g->gen;
        }
        free(g->vis);
        free(g->vis_gen);
        g->vis = key;
        g->vis_gen = gen;
        g->vis_cap = cap;
    }
    uint64_t k = (uint64_t)(uint32_t)state << 32 | (uint32_t)(parent + 1);
    size_t j = mix64(k) & (size_t)(g->vis_cap - 1);
    for (; g->vis_gen[j] == g->gen; j = (j + 1) & (size_t)(g->vis_cap - 1))
        if (g->vis[j] == k) return 0;
    g->vis[j] = k;
    g->vis_gen[j] = g->gen;
    g->n_vis++;
    return 1;
}

/* Runs the work list to its closure: tops (BYTE states) into g->out, *complete when a pop left
 * the bottom. 0, CF_NOMEM, or -ERR_TOOBIG as a config-size overflow or when the call's work
 * budget (g->work_left) runs out. */
static int run_closure(struct grammar *g, uint8_t *complete) {
    while (g->n_work) {
        int32_t parent = g->work[--g->n_work], s = g->work[--g->n_work];
        int seen = visit(g, s, parent);
        if (seen < 0) return CF_NOMEM;
        if (!seen) continue;
        if (--g->work_left < 0) return -ERR_TOOBIG;
        const struct pstate *p = &g->st[s];
        switch (p->kind) {
        case PS_BYTE: {
            int32_t n = intern_node(g, s, parent);
            if (n < 0 || grow(&g->out, &g->cap_out, g->n_out + 1, sizeof *g->out)) return CF_NOMEM;
            g->out[g->n_out++] = n;
            if (g->n_out > MAX_STACKS * 4) return -ERR_TOOBIG;
            break;
        }
        case PS_SPLIT:
            if (work_push(g, p->arg, parent) || work_push(g, p->out, parent)) return CF_NOMEM;
            break;
        case PS_CALL: {
            if (parent >= 0 && g->nd_depth[parent] >= GRAMMAR_MAX_DEPTH) break; /* too deep: a dead end */
            int32_t ret = intern_node(g, p->out, parent);
            if (ret < 0 || work_push(g, g->rule_start[p->arg], ret)) return CF_NOMEM;
            break;
        }
        case PS_TAIL:
            if (work_push(g, g->rule_start[p->arg], parent)) return CF_NOMEM;
            break;
        case PS_END:
            if (parent == -1) *complete |= CF_COMPLETE;
            else if (parent == CTX) *complete |= CF_CTX;
            else if (work_push(g, g->nd[parent].state, g->nd[parent].parent)) return CF_NOMEM;
            break;
        }
    }
    return 0;
}

/* Intern what the closure produced. */
static int32_t finish_cf(struct grammar *g, uint8_t complete) {
    if (g->n_out > 1) qsort(g->out, (size_t)g->n_out, sizeof *g->out, cmp_i32);
    int32_t m = 0;
    for (int32_t i = 0; i < g->n_out; i++)
        if (!m || g->out[m - 1] != g->out[i]) g->out[m++] = g->out[i];
    if (m > MAX_STACKS) return -ERR_TOOBIG;
    return intern_cf(g, g->out, m, complete);
}

static void closure_begin(struct grammar *g) {
    g->n_work = g->n_out = 0;
    g->n_vis = 0;
    if (++g->gen == 0) { /* stamps wrapped: clear them */
        if (g->vis_gen) memset(g->vis_gen, 0, (size_t)g->vis_cap * sizeof *g->vis_gen);
        g->gen = 1;
    }
}

/* Configuration after class k from configuration c (memoized). CF_DEAD, >= 0, or an error
 * (CF_NOMEM, -ERR_TOOBIG). */
static int32_t step(struct grammar *g, int32_t c, int32_t k) {
    int32_t t = g->trans[(size_t)c * (size_t)g->n_cls + (size_t)k];
    if (t != CF_UNKNOWN) return t;
    closure_begin(g);
    unsigned b = g->rep[k];
    for (int32_t i = 0; i < g->cf_len[c]; i++) {
        const struct stack_node *n = &g->nd[g->tops[g->cf_off[c] + i]];
        const struct pstate *p = &g->st[n->state];
        if (bs_has(&g->sets[p->arg], b) && work_push(g, p->out, n->parent)) return CF_NOMEM;
    }
    uint8_t complete = 0;
    int rc = run_closure(g, &complete);
    if (rc) return rc;
    t = finish_cf(g, complete);
    if (t >= 0 || t == CF_DEAD) g->trans[(size_t)c * (size_t)g->n_cls + (size_t)k] = t;
    return t;
}

static int32_t start_cf(struct grammar *g) {
    closure_begin(g);
    if (work_push(g, g->root_start, -1)) return CF_NOMEM;
    uint8_t complete = 0;
    int rc = run_closure(g, &complete);
    return rc ? rc : finish_cf(g, complete);
}

static int cf_error(int32_t c) { return c == -ERR_TOOBIG ? -ERR_TOOBIG : -ERR_NOMEM; }

/* ---- live states across flushes ------------------------------------------------------------- */

static int save_state(struct grammar_state *st) {
    struct grammar *g = st->g;
    if (st->dead || st->epoch != g->epoch) return 0; /* already saved */
    int32_t c = st->cf;
    int64_t need = 2;
    for (int32_t i = 0; i < g->cf_len[c]; i++) need += 1 + g->nd_depth[g->tops[g->cf_off[c] + i]];
    if (grow(&st->saved, &st->cap_saved, need, sizeof *st->saved)) return -ERR_NOMEM;
    int32_t *o = st->saved;
    o[0] = g->cf_complete[c];
    o[1] = g->cf_len[c];
    int32_t k = 2;
    for (int32_t i = 0; i < g->cf_len[c]; i++) {
        int32_t n = g->tops[g->cf_off[c] + i], d = g->nd_depth[n];
        o[k++] = d;
        for (int32_t j = d - 1; j >= 0; j--, n = g->nd[n].parent) o[k + j] = g->nd[n].state;
        k += d;
    }
    st->n_saved = k;
    return 0;
}

/* Bring the state's configuration into the current epoch. 0 or an error (the state is dead). */
static int restore_state(struct grammar_state *st) {
    struct grammar *g = st->g;
    if (st->epoch == g->epoch) return 0;
    const int32_t *o = st->saved;
    closure_begin(g);
    int32_t k = 2;
    for (int32_t i = 0; i < o[1]; i++) {
        int32_t d = o[k++], p = -1;
        for (int32_t j = 0; j < d; j++) {
            p = intern_node(g, o[k + j], p);
            if (p < 0) return -ERR_NOMEM;
        }
        k += d;
        if (grow(&g->out, &g->cap_out, g->n_out + 1, sizeof *g->out)) return -ERR_NOMEM;
        g->out[g->n_out++] = p;
    }
    int32_t c = finish_cf(g, (uint8_t)o[0]);
    if (c < 0) return cf_error(c);
    st->cf = c;
    st->epoch = g->epoch;
    return 0;
}

/* Over the soft bound: save every live state, drop the caches. Called between operations. */
static int maybe_flush(struct grammar *g) {
    if (g->n_cf <= g->soft_cf && g->n_nd <= 4 * g->soft_cf) return 0;
    for (struct grammar_state *s = g->live; s; s = s->next)
        if (save_state(s)) return -ERR_NOMEM;
    cache_reset(g);
    return 0;
}

/* ---- the memory budget ---------------------------------------------------------------------- */

/* Bytes g holds: its program, the matcher's tables (by capacity) and the kept masks. g's lock. */
static int64_t grammar_bytes(const struct grammar *g) {
    int64_t b = (int64_t)sizeof *g + (int64_t)g->cap_st * (int64_t)sizeof *g->st + (int64_t)g->cap_sets * (int64_t)sizeof *g->sets +
                (int64_t)g->n_rules * 4 + (int64_t)g->cap_named * 4 + ((int64_t)g->cap_twin + g->cap_twin_rem) * 4;
    b += (int64_t)g->cap_nd * (int64_t)sizeof *g->nd + (int64_t)g->cap_nd_depth * 2 + (int64_t)g->nd_ht_cap * 12;
    b += ((int64_t)g->cap_cf + g->cap_cf_b + g->cap_cf_d + g->cap_cf_f + g->cap_cf_g + g->cap_cf_h + g->cap_cf_i) * 4 +
         g->cap_cf_c + (int64_t)g->cap_cf_e * 8;
    b += ((int64_t)g->cap_tops + g->cf_ht_cap + g->cap_trans + g->cap_work + g->cap_out) * 4 + (int64_t)g->vis_cap * 12;
    if (g->full.s) { /* the slot tables, uncertain lists' heads, scratch and walk buffers */
        int64_t words = (int64_t)grammar_mask_words(g->v), depth = g->v->max_depth + 2;
        b += 2 * GRAMMAR_MAX_MASKS * (int64_t)sizeof(struct mslot) + GRAMMAR_MAX_MASKS * 16 + (words + 1) * 8 + depth * 9;
    }
    return b + g->mask_bytes;
}

/* Bring budget_used up to date with g. g's lock. */
static void budget_account(struct grammar *g) {
    int64_t now = grammar_bytes(g);
    if (now != g->accounted) atomic_fetch_add(&budget_used, now - g->accounted);
    g->accounted = now;
}

/* Forget kept mask i of pool p (local: with its uncertain subtrees) and free its memory. */
static void slot_drop(struct grammar *g, struct mpool *p, int32_t *slot_of, int32_t i, bool local) {
    struct mslot *s = &p->s[i];
    if (s->owner >= 0) slot_of[s->owner] = -1;
    s->owner = -1;
    g->mask_bytes -= slot_bytes(g->v, s);
    free(s->bits);
    free(s->ids);
    s->bits = NULL;
    s->ids = NULL;
    s->count = 0;
    if (local) {
        g->mask_bytes -= (int64_t)g->cap_lunc[i] * (int64_t)sizeof **g->lunc;
        free(g->lunc[i]);
        g->lunc[i] = NULL;
        g->cap_lunc[i] = g->n_lunc[i] = 0;
    }
}

struct victim {
    uint64_t used;
    int32_t slot;
    bool local;
};

static int cmp_victim(const void *a, const void *b) {
    uint64_t x = ((const struct victim *)a)->used, y = ((const struct victim *)b)->used;
    return x < y ? -1 : x > y;
}

/* Drop g's kept masks, least recently used first, until budget_used is at most target (or g
 * keeps none). g's lock. */
static void evict_masks(struct grammar *g, int64_t target) {
    if (!g->full.s) return;
    struct victim *vs = malloc(2 * GRAMMAR_MAX_MASKS * sizeof *vs);
    if (!vs) return;
    int32_t n = 0;
    for (int32_t i = 0; i < GRAMMAR_MAX_MASKS; i++) {
        if (slot_bytes(g->v, &g->full.s[i])) vs[n++] = (struct victim){g->full.s[i].used, i, false};
        if (slot_bytes(g->v, &g->local.s[i]) || g->cap_lunc[i]) vs[n++] = (struct victim){g->local.s[i].used, i, true};
    }
    qsort(vs, (size_t)n, sizeof *vs, cmp_victim);
    for (int32_t k = 0; k < n && atomic_load(&budget_used) > target; k++) {
        if (vs[k].local) slot_drop(g, &g->local, g->cf_lslot, vs[k].slot, true);
        else slot_drop(g, &g->full, g->cf_mask, vs[k].slot, false);
        budget_account(g);
        atomic_fetch_add(&budget_evicted, 1);
    }
    free(vs);
}

/* Free the matcher's tables and every kept mask: the live states are saved first (as a flush
 * does) and come back on their next use. g's lock. */
static void release_tables(struct grammar *g) {
    for (struct grammar_state *s = g->live; s; s = s->next)
        if (save_state(s)) return;
    for (int32_t i = 0; g->full.s && i < GRAMMAR_MAX_MASKS; i++) {
        slot_drop(g, &g->full, g->cf_mask, i, false);
        slot_drop(g, &g->local, g->cf_lslot, i, true);
    }
    void *tables[] = {g->nd, g->nd_depth, g->nd_key, g->nd_val, g->cf_off, g->cf_len, g->cf_complete, g->cf_mask,
                      g->cf_lslot, g->cf_local, g->cf_twin, g->cf_rem, g->tops, g->cf_hash_key, g->cf_ht, g->trans,
                      g->work, g->vis, g->vis_gen, g->out};
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) free(tables[i]);
    g->nd = NULL, g->nd_depth = NULL, g->nd_key = NULL, g->nd_val = NULL;
    g->cf_off = g->cf_len = g->cf_mask = g->cf_lslot = g->cf_local = g->cf_twin = g->cf_rem = NULL;
    g->cf_complete = NULL, g->tops = NULL, g->cf_hash_key = NULL, g->cf_ht = NULL, g->trans = NULL;
    g->work = NULL, g->vis = NULL, g->vis_gen = NULL, g->out = NULL;
    g->cap_nd = g->cap_nd_depth = g->nd_ht_cap = 0;
    g->cap_cf = g->cap_cf_b = g->cap_cf_c = g->cap_cf_d = g->cap_cf_e = g->cap_cf_f = g->cap_cf_g = g->cap_cf_h = g->cap_cf_i = 0;
    g->cap_tops = g->cf_ht_cap = g->cap_trans = g->cap_work = g->cap_out = g->vis_cap = 0;
    g->n_work = g->n_out = g->n_vis = 0;
    cache_reset(g);
    atomic_fetch_add(&budget_released, 1);
}

static int cmp_last_use(const void *a, const void *b) {
    uint64_t x = atomic_load(&(*(struct grammar *const *)a)->last_use), y = atomic_load(&(*(struct grammar *const *)b)->last_use);
    return x < y ? -1 : x > y;
}

/* Over the budget: kept masks are dropped, the least recently used grammar's first and in it
 * the least recently used first, down to three quarters of the budget (so that one new mask
 * does not evict one old one per step); if the matchers' tables alone still pass that, they
 * are released the same way. A grammar another thread is using is passed over. g's lock. */
static void budget_enforce(struct grammar *g) {
    budget_account(g);
    int64_t limit = atomic_load(&budget_limit);
    if (atomic_load(&budget_used) <= limit) return;
    int64_t target = limit / 4 * 3;
    pthread_mutex_lock(&budget_mu);
    int32_t n = 0;
    for (struct grammar *x = budget_registry; x; x = x->reg_next) n++;
    struct grammar **by = malloc((size_t)(n ? n : 1) * sizeof *by);
    if (by) {
        n = 0;
        for (struct grammar *x = budget_registry; x; x = x->reg_next) by[n++] = x;
        qsort(by, (size_t)n, sizeof *by, cmp_last_use);
        for (int phase = 0; phase < 2; phase++)
            for (int32_t i = 0; i < n && atomic_load(&budget_used) > target; i++) {
                struct grammar *x = by[i];
                if (x != g && pthread_mutex_trylock(&x->mu)) continue;
                if (phase == 0) evict_masks(x, target);
                else release_tables(x);
                budget_account(x);
                if (x != g) pthread_mutex_unlock(&x->mu);
            }
        free(by);
    }
    pthread_mutex_unlock(&budget_mu);
}

static void budget_register(struct grammar *g) {
    pthread_mutex_lock(&budget_mu);
    g->reg_prev = NULL;
    g->reg_next = budget_registry;
    if (budget_registry) budget_registry->reg_prev = g;
    budget_registry = g;
    g->registered = true;
    pthread_mutex_unlock(&budget_mu);
}

static void budget_unregister(struct grammar *g) {
    if (!g->registered) return;
    pthread_mutex_lock(&budget_mu);
    if (g->reg_prev) g->reg_prev->reg_next = g->reg_next;
    else budget_registry = g->reg_next;
    if (g->reg_next) g->reg_next->reg_prev = g->reg_prev;
    atomic_fetch_sub(&budget_used, g->accounted);
    g->accounted = 0;
    pthread_mutex_unlock(&budget_mu);
}

void grammar_budget_set(int64_t bytes) { atomic_store(&budget_limit, bytes > 0 ? bytes : 1); }

void grammar_budget_get(struct grammar_budget_stats *out) {
    pthread_mutex_lock(&budget_mu);
    int32_t n = 0;
    for (struct grammar *x = budget_registry; x; x = x->reg_next) n++;
    pthread_mutex_unlock(&budget_mu);
    *out = (struct grammar_budget_stats){.limit = atomic_load(&budget_limit), .used = atomic_load(&budget_used),
                                         .evicted_masks = atomic_load(&budget_evicted),
                                         .released = atomic_load(&budget_released), .grammars = n};
}

/* ---- compile -------------------------------------------------------------------------------- */

static void grammar_destroy(struct grammar *g) {
    budget_unregister(g);
    free(g->st);
    free(g->sets);
    free(g->rule_start);
    free(g->named);
    free(g->nd);
    free(g->nd_depth);
    free(g->nd_key);
    free(g->nd_val);
    free(g->cf_off);
    free(g->cf_len);
    free(g->cf_complete);
    free(g->cf_mask);
    free(g->cf_lslot);
    free(g->cf_local);
    free(g->cf_twin);
    free(g->cf_rem);
    free(g->twin);
    free(g->twin_rem);
    for (int32_t i = 0; g->local.s && i < GRAMMAR_MAX_MASKS; i++) free(g->local.s[i].bits), free(g->local.s[i].ids);
    for (int32_t i = 0; g->full.s && i < GRAMMAR_MAX_MASKS; i++) free(g->full.s[i].bits), free(g->full.s[i].ids);
    free(g->local.s);
    free(g->full.s);
    free(g->scratch);
    if (g->lunc)
        for (int32_t i = 0; i < GRAMMAR_MAX_MASKS; i++) free(g->lunc[i]);
    free(g->lunc);
    free(g->n_lunc);
    free(g->cap_lunc);
    free(g->walk_ctx);
    free(g->walk_node);
    free(g->tops);
    free(g->cf_hash_key);
    free(g->cf_ht);
    free(g->trans);
    free(g->work);
    free(g->vis);
    free(g->vis_gen);
    free(g->out);
    free(g->walk_cf);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

static int analyse(struct parser *ps, uint8_t *recursive) {
    struct syntax *sx = ps->sx;
    int rc = 0;
    uint8_t *rule_null = calloc((size_t)sx->n_rules, 1), *left = malloc((size_t)sx->n_rules);
    int32_t *off = NULL, *adj = NULL;
    if (!rule_null || !left) {
        rc = nomem(ps);
        goto out;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < sx->n_rules; r++)
            if (!rule_null[r] && node_nullable(sx, rule_null, sx->rules[r].body)) rule_null[r] = 1, changed = true;
    }
    if (ref_graph(sx, rule_null, true, &off, &adj) || find_cycles(sx->n_rules, off, adj, left)) {
        rc = nomem(ps);
        goto out;
    }
    for (int32_t r = 0; r < sx->n_rules; r++)
        if (left[r]) {
            rc = fail(ps, ps->len, -ERR_INVAL, "left recursion: rule '%s' can reach itself before matching anything",
                      sx->names + sx->rules[r].name_off);
            goto out;
        }
    free(off);
    free(adj);
    off = adj = NULL;
    if (ref_graph(sx, rule_null, false, &off, &adj) || find_cycles(sx->n_rules, off, adj, recursive)) rc = nomem(ps);
out:
    free(rule_null);
    free(left);
    free(off);
    free(adj);
    return rc;
}

int grammar_compile(struct grammar **out, const struct grammar_vocab *v, const char *text, size_t len, char *why,
                    size_t why_len) {
    *out = NULL;
    if (why_len) why[0] = 0;
    struct syntax sx = {0};
    struct parser ps = {.src = text, .len = len, .why = why, .why_len = why_len, .sx = &sx};
    uint8_t *recursive = NULL;
    struct compiler c = {0};
    struct grammar *g = calloc(1, sizeof *g);
    if (!g) return -ERR_NOMEM;
    atomic_init(&g->refs, 1);
    g->v = v;
    pthread_mutex_init(&g->mu, NULL);
    int rc = parse_grammar(&ps);
    if (rc) goto out;
    int32_t root = -1;
    for (int32_t r = 0; r < sx.n_rules; r++) {
        if (sx.rules[r].body < 0) {
            rc = fail(&ps, (size_t)sx.rules[r].ref_pos, -ERR_INVAL, "undefined rule '%s'", sx.names + sx.rules[r].name_off);
            goto out;
        }
        if (!strcmp(sx.names + sx.rules[r].name_off, "root")) root = r;
    }
    if (root < 0) {
        rc = -ERR_INVAL;
        snprintf(why, why_len, "the grammar has no rule named 'root'");
        goto out;
    }
    recursive = malloc((size_t)sx.n_rules);
    if (!recursive) {
        rc = -ERR_NOMEM;
        goto out;
    }
    if ((rc = analyse(&ps, recursive))) goto out;
    g->n_rules = sx.n_rules;
    g->rule_start = malloc((size_t)sx.n_rules * sizeof *g->rule_start);
    if (!g->rule_start) {
        rc = -ERR_NOMEM;
        goto out;
    }
    recursive[root] = 1; /* root always has its own compiled body */
    /* Inlining copies a rule at each use: a grammar whose copies pass a quarter of the bound is
     * compiled again with every reference a call. */
    for (int attempt = 0; attempt < 2; attempt++) {
        free(c.todo);
        c = (struct compiler){.g = g, .sx = &sx, .recursive = recursive, .no_inline = attempt == 1,
                              .max_states = attempt == 0 ? GRAMMAR_MAX_STATES / 4 : GRAMMAR_MAX_STATES};
        g->n_st = g->n_sets = g->n_twin = 0;
        for (int32_t r = 0; r < sx.n_rules; r++) g->rule_start[r] = -1;
        g->rule_start[root] = -2;
        if (grow(&c.todo, &c.cap_todo, 1, sizeof *c.todo)) {
            rc = -ERR_NOMEM;
            goto out;
        }
        c.todo[c.n_todo++] = root;
        for (int32_t i = 0; i < c.n_todo && !c.err; i++) {
            int32_t r = c.todo[i];
            int32_t end = new_state(&c, PS_END, -1, r);
            if (end < 0) break;
            int32_t s = build(&c, sx.rules[r].body, end, 0);
            if (s >= 0) g->rule_start[r] = s;
        }
        if (c.err != -ERR_TOOBIG) break;
    }
    if (c.err) {
        rc = c.err;
        snprintf(why, why_len, c.err == -ERR_TOOBIG ? "the grammar compiles to more than %d states (lower repetition counts)"
                                                    : "out of memory compiling the grammar", GRAMMAR_MAX_STATES);
        goto out;
    }
    if (twin_cover(&c, g->n_st)) {
        rc = c.err;
        goto out;
    }
    g->root_start = g->rule_start[root];
    byte_classes(g);
    if ((rc = find_named(g, &sx))) goto out;
    g->full.s = calloc(GRAMMAR_MAX_MASKS, sizeof *g->full.s);
    g->local.s = calloc(GRAMMAR_MAX_MASKS, sizeof *g->local.s);
    g->scratch = malloc((grammar_mask_words(v) + 1) * sizeof *g->scratch);
    g->walk_cf = malloc(((size_t)v->max_depth + 2) * sizeof *g->walk_cf);
    g->walk_ctx = malloc((size_t)v->max_depth + 2);
    g->walk_node = malloc(((size_t)v->max_depth + 2) * sizeof *g->walk_node);
    g->lunc = calloc(GRAMMAR_MAX_MASKS, sizeof *g->lunc);
    g->n_lunc = calloc(GRAMMAR_MAX_MASKS, sizeof *g->n_lunc);
    g->cap_lunc = calloc(GRAMMAR_MAX_MASKS, sizeof *g->cap_lunc);
    if (!g->full.s || !g->local.s || !g->scratch || !g->walk_cf || !g->walk_ctx || !g->walk_node || !g->lunc ||
        !g->n_lunc || !g->cap_lunc) {
        rc = -ERR_NOMEM;
        goto out;
    }
    /* transitions: at most ~32 MiB of them before a flush */
    g->soft_cf = (int32_t)((8u << 20) / (uint32_t)g->n_cls);
    if (g->soft_cf > (1 << 18)) g->soft_cf = 1 << 18;
    /* the start must exist: a grammar whose root can match nothing is refused here */
    g->work_left = GRAMMAR_MAX_WORK;
    int32_t s0 = start_cf(g);
    bool any = s0 >= 0 && (g->cf_complete[s0] & CF_COMPLETE);
    for (int32_t i = 0; s0 >= 0 && !any && i < g->cf_len[s0]; i++) {
        const struct byteset *b = &g->sets[g->st[g->nd[g->tops[g->cf_off[s0] + i]].state].arg];
        any = b->w[0] | b->w[1] | b->w[2] | b->w[3];
    }
    if (s0 == CF_DEAD || (s0 >= 0 && !any)) {
        rc = -ERR_INVAL;
        snprintf(why, why_len, "the grammar matches nothing");
    } else if (s0 < 0) {
        rc = cf_error(s0);
        snprintf(why, why_len, "the grammar's start is too ambiguous");
    }
out:
    free(recursive);
    free(c.todo);
    syntax_free(&sx);
    if (rc) {
        if (rc == -ERR_NOMEM && why_len && !why[0]) snprintf(why, why_len, "out of memory compiling the grammar");
        grammar_destroy(g);
        return rc;
    }
    atomic_store(&g->last_use, budget_tick());
    budget_register(g);
    pthread_mutex_lock(&g->mu);
    budget_enforce(g);
    pthread_mutex_unlock(&g->mu);
    *out = g;
    return 0;
}

void grammar_ref(struct grammar *g) { atomic_fetch_add(&g->refs, 1); }

void grammar_unref(struct grammar *g) {
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) grammar_destroy(g);
}

int32_t grammar_n_states(const struct grammar *g) { return g->n_st; }

int64_t grammar_memory(struct grammar *g) {
    pthread_mutex_lock(&g->mu);
    int64_t b = grammar_bytes(g);
    pthread_mutex_unlock(&g->mu);
    return b;
}

/* ---- states --------------------------------------------------------------------------------- */

static void link_state(struct grammar_state *st) {
    struct grammar *g = st->g;
    st->prev = NULL;
    st->next = g->live;
    if (g->live) g->live->prev = st;
    g->live = st;
}

int grammar_state_create(struct grammar_state **out, struct grammar *g) {
    struct grammar_state *st = calloc(1, sizeof *st);
    if (!st) return -ERR_NOMEM;
    pthread_mutex_lock(&g->mu);
    g->work_left = GRAMMAR_MAX_WORK;
    int rc = maybe_flush(g);
    int32_t c = rc ? CF_NOMEM : start_cf(g);
    if (c >= 0) {
        st->g = g;
        st->cf = c;
        st->epoch = g->epoch;
        link_state(st);
    }
    pthread_mutex_unlock(&g->mu);
    if (c < 0) {
        free(st);
        return cf_error(c);
    }
    grammar_ref(g);
    *out = st;
    return 0;
}

int grammar_state_clone(struct grammar_state **out, const struct grammar_state *src) {
    struct grammar *g = src->g;
    struct grammar_state *st = calloc(1, sizeof *st);
    if (!st) return -ERR_NOMEM;
    pthread_mutex_lock(&g->mu);
    int rc = 0;
    st->g = g;
    st->cf = src->cf;
    st->epoch = src->epoch;
    st->dead = src->dead;
    if (src->n_saved) {
        if (grow(&st->saved, &st->cap_saved, src->n_saved, sizeof *st->saved)) rc = -ERR_NOMEM;
        else memcpy(st->saved, src->saved, (size_t)src->n_saved * sizeof *st->saved), st->n_saved = src->n_saved;
    }
    if (!rc) link_state(st);
    pthread_mutex_unlock(&g->mu);
    if (rc) {
        free(st->saved);
        free(st);
        return rc;
    }
    grammar_ref(g);
    *out = st;
    return 0;
}

void grammar_state_free(struct grammar_state *st) {
    if (!st) return;
    struct grammar *g = st->g;
    pthread_mutex_lock(&g->mu);
    if (st->prev) st->prev->next = st->next;
    else g->live = st->next;
    if (st->next) st->next->prev = st->prev;
    pthread_mutex_unlock(&g->mu);
    free(st->saved);
    free(st);
    grammar_unref(g);
}

/* Lock held: flush if due, bring st current. */
static int state_ready(struct grammar_state *st) {
    if (st->dead) return -ERR_INVAL;
    int rc = maybe_flush(st->g);
    if (!rc) rc = restore_state(st);
    if (rc) st->dead = true;
    return rc;
}

/* Configuration after bytes from c: >= 0, CF_DEAD, or an error. */
static int32_t walk_bytes(struct grammar *g, int32_t c, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n && c >= 0; i++) c = step(g, c, g->cls[b[i]]);
    return c;
}

static bool is_named(const struct grammar *g, int32_t tok) {
    for (int32_t i = 0; i < g->n_named; i++)
        if (g->named[i] == tok) return true;
    return false;
}

/* The local configuration of c: its top states over CTX, so that what it accepts does not
 * depend on the stacks below (which the walk below cannot see). CF_DEAD for no tops. */
static int32_t local_cf(struct grammar *g, int32_t c) {
    if (g->cf_local[c] >= 0) return g->cf_local[c];
    closure_begin(g);
    for (int32_t i = 0; i < g->cf_len[c]; i++) {
        int32_t n = intern_node(g, g->nd[g->tops[g->cf_off[c] + i]].state, CTX);
        if (n < 0 || grow(&g->out, &g->cap_out, g->n_out + 1, sizeof *g->out)) return CF_NOMEM;
        g->out[g->n_out++] = n;
    }
    int32_t l = finish_cf(g, 0);
    if (l >= 0) g->cf_local[c] = l;
    return l;
}

/* The next slot of a FIFO pool; its previous owner (a configuration) forgets it. */
static int32_t pool_take(struct mpool *p, int32_t *slot_of) {
    int32_t slot = p->next;
    if (p->n_used == GRAMMAR_MAX_MASKS) {
        if (p->s[slot].owner >= 0) slot_of[p->s[slot].owner] = -1;
    } else {
        p->n_used++;
    }
    p->next = (slot + 1) % GRAMMAR_MAX_MASKS;
    p->s[slot].owner = -1;
    return slot;
}

static int32_t slot_store_(const struct grammar_vocab *v, struct mslot *s, const uint64_t *bits, int32_t count);

/* Keep the mask in bits (count tokens) in slot s of g: as ids when that is smaller, counted in
 * g->mask_bytes. 0 or CF_NOMEM. */
static int32_t slot_store(struct grammar *g, struct mslot *s, const uint64_t *bits, int32_t count) {
    g->mask_bytes -= slot_bytes(g->v, s);
    int32_t rc = slot_store_(g->v, s, bits, count);
    g->mask_bytes += slot_bytes(g->v, s);
    s->used = budget_tick();
    return rc;
}

static int32_t slot_store_(const struct grammar_vocab *v, struct mslot *s, const uint64_t *bits, int32_t count) {
    size_t words = grammar_mask_words(v);
    free(s->ids);
    s->ids = NULL;
    s->count = count;
    if ((size_t)count * sizeof *s->ids < words * sizeof *bits / 2) {
        free(s->bits);
        s->bits = NULL;
        if (count && !(s->ids = malloc((size_t)count * sizeof *s->ids))) return CF_NOMEM;
        int32_t k = 0;
        for (size_t w = 0; w < words; w++)
            for (uint64_t b = bits[w]; b; b &= b - 1) s->ids[k++] = (int32_t)(w * 64 + (size_t)__builtin_ctzll(b));
        return 0;
    }
    if (!s->bits && !(s->bits = malloc(words * sizeof *s->bits))) return CF_NOMEM;
    memcpy(s->bits, bits, words * sizeof *bits);
    return 0;
}

/* The slot's mask as a bitset of words words. */
static void slot_expand(const struct grammar_vocab *v, const struct mslot *s, uint64_t *out) {
    size_t words = grammar_mask_words(v);
    if (s->bits) {
        memcpy(out, s->bits, words * sizeof *out);
        return;
    }
    memset(out, 0, words * sizeof *out);
    for (int32_t i = 0; i < s->count; i++) out[s->ids[i] >> 6] |= 1ull << (s->ids[i] & 63);
}

static int add_uncertain(struct grammar *g, int32_t slot, int32_t node, int32_t parent) {
    int32_t cap = g->cap_lunc[slot];
    if (grow(&g->lunc[slot], &g->cap_lunc[slot], (int64_t)g->n_lunc[slot] + 2, sizeof **g->lunc)) return CF_NOMEM;
    g->mask_bytes += (int64_t)(g->cap_lunc[slot] - cap) * (int64_t)sizeof **g->lunc;
    g->lunc[slot][g->n_lunc[slot]++] = node;
    g->lunc[slot][g->n_lunc[slot]++] = parent;
    return 0;
}

/* Marks the tokens ending at live trie nodes: one store per node, the spare bit n_vocab for
 * nodes where no token ends (branches mispredicted per node cost more than the walk). */
static inline void mark_node(const struct grammar_vocab *v, uint64_t *m, int32_t i) {
    int32_t id = v->ntok1[i];
    m[id >> 6] |= 1ull << (id & 63);
    if (v->nmulti[i])
        for (int32_t t = v->ntok[i] + 1; t < v->ntok[i + 1]; t++) m[v->sorted[t] >> 6] |= 1ull << (v->sorted[t] & 63);
}

/* Clears the spare bit and counts the tokens. */
static int32_t finish_bits(const struct grammar_vocab *v, uint64_t *m) {
    m[v->n_vocab >> 6] &= ~(1ull << (v->n_vocab & 63));
    int32_t n = 0;
    for (size_t w = 0, words = grammar_mask_words(v); w < words; w++) n += __builtin_popcountll(m[w]);
    return n;
}

/* Trie nodes [i0, i1) (a whole subtree), the path above i0 having reached configuration pc:
 * marks the tokens that end at live nodes. 0 or an error. */
static int32_t walk_trie(struct grammar *g, uint64_t *m, int32_t i0, int32_t i1, int32_t pc) {
    const struct grammar_vocab *v = g->v;
    int32_t *at = g->walk_cf;
    at[v->ndepth[i0] - 1] = pc;
    const uint8_t *nbyte = v->nbyte;
    const uint16_t *ndepth = v->ndepth;
    const int32_t *nskip = v->nskip;
    const uint8_t *cls = g->cls;
    int32_t ncls = g->n_cls, hard = 2 * g->soft_cf;
    for (int32_t i = i0; i < i1;) {
        int32_t d = ndepth[i];
        int32_t k = cls[nbyte[i]];
        int32_t nc = g->trans[(size_t)at[d - 1] * (size_t)ncls + (size_t)k];
        if (nc == CF_UNKNOWN) {
            if (g->n_cf > hard) return CF_NOMEM;
            nc = step(g, at[d - 1], k);
            if (nc < CF_DEAD) return nc;
        }
        if (nc == CF_DEAD) {
            i = nskip[i];
            continue;
        }
        at[d] = nc;
        mark_node(v, m, i);
        i++;
    }
    return 0;
}

/* The twin of configuration c into *out: its tops with each twinned state replaced by its twin
 * (same parent), cf_rem[c] the fewest iterations left among them; TWIN_NONE when no top has a
 * twin. 0 or an error. */
static int32_t twin_cf(struct grammar *g, int32_t c, int32_t *out) {
    if (g->cf_twin[c] != TWIN_UNKNOWN) {
        *out = g->cf_twin[c];
        return 0;
    }
    int32_t rem = INT32_MAX;
    for (int32_t i = 0; i < g->cf_len[c]; i++) {
        int32_t s = g->nd[g->tops[g->cf_off[c] + i]].state;
        if (s < g->n_twin && g->twin[s] >= 0 && g->twin_rem[s] < rem) rem = g->twin_rem[s];
    }
    if (rem == INT32_MAX) {
        *out = g->cf_twin[c] = TWIN_NONE;
        return 0;
    }
    closure_begin(g);
    for (int32_t i = 0; i < g->cf_len[c]; i++) {
        int32_t n = g->tops[g->cf_off[c] + i], s = g->nd[n].state;
        if (s < g->n_twin && g->twin[s] >= 0) n = intern_node(g, g->twin[s], g->nd[n].parent);
        if (n < 0 || grow(&g->out, &g->cap_out, g->n_out + 1, sizeof *g->out)) return CF_NOMEM;
        g->out[g->n_out++] = n;
    }
    int32_t t = finish_cf(g, g->cf_complete[c]);
    if (t < 0) return t;
    g->cf_twin[c] = t;
    g->cf_rem[c] = rem;
    *out = t;
    return 0;
}

/* Marks the tokens of more than r bytes that configuration c accepts: a walk of the trie that
 * skips every subtree whose tokens are all short. 0 or an error. */
static int32_t walk_long(struct grammar *g, uint64_t *m, int32_t c, int32_t r) {
    const struct grammar_vocab *v = g->v;
    int32_t *at = g->walk_cf;
    at[0] = c;
    const uint8_t *nbyte = v->nbyte, *cls = g->cls;
    const uint16_t *ndepth = v->ndepth, *nmax = v->nmax;
    const int32_t *nskip = v->nskip;
    int32_t ncls = g->n_cls, hard = 2 * g->soft_cf;
    for (int32_t i = 0; i < v->n_nodes;) {
        if (nmax[i] <= r) {
            i = nskip[i];
            continue;
        }
        int32_t d = ndepth[i];
        int32_t k = cls[nbyte[i]];
        int32_t nc = g->trans[(size_t)at[d - 1] * (size_t)ncls + (size_t)k];
        if (nc == CF_UNKNOWN) {
            if (g->n_cf > hard) return CF_NOMEM;
            nc = step(g, at[d - 1], k);
            if (nc < CF_DEAD) return nc;
        }
        if (nc == CF_DEAD) {
            i = nskip[i];
            continue;
        }
        at[d] = nc;
        if (d > r) mark_node(v, m, i);
        i++;
    }
    return 0;
}

static int32_t mask_of(struct grammar *g, int32_t c, uint64_t *out);
static int32_t add_named_eog(struct grammar *g, int32_t c, uint64_t *m);
static int32_t keep_mask(struct grammar *g, int32_t c, uint64_t *m, uint64_t *out);

/* The mask of configuration c, which has twin t inside counted repetitions with at least r
 * iterations left: a token of at most r bytes starts at most r iterations, so c accepts it
 * exactly when t does (the copies and X* differ only past the count), and those come from t's
 * mask (kept once for every position of the repetition); the longer ones from a walk of the
 * trie that skips the subtrees of short tokens. Count or an error. */
static int32_t twin_mask(struct grammar *g, int32_t c, int32_t t, uint64_t *out) {
    const struct grammar_vocab *v = g->v;
    size_t words = grammar_mask_words(v);
    int32_t r = g->cf_rem[c];
    int32_t rc = mask_of(g, t, out);
    if (rc < 0) return rc;
    uint64_t *m = g->scratch;
    if (r <= LEN_BITS) {
        const uint64_t *le = v->lenle + (size_t)(r - 1) * words;
        for (size_t w = 0; w < words; w++) m[w] = out[w] & le[w];
    } else {
        memcpy(m, out, words * sizeof *m);
        for (int32_t i = 0; i < v->n_longer && (int32_t)v->len[v->longer[i]] > r; i++)
            m[v->longer[i] >> 6] &= ~(1ull << (v->longer[i] & 63));
        for (int32_t i = 0; i < g->n_named; i++) m[g->named[i] >> 6] &= ~(1ull << (g->named[i] & 63));
        for (int32_t i = 0; i < v->n_eog; i++) m[v->eog[i] >> 6] &= ~(1ull << (v->eog[i] & 63));
    }
    m[words] = 0;
    if (r < v->max_depth && (rc = walk_long(g, m, c, r))) return rc;
    if ((rc = add_named_eog(g, c, m)) < 0) return rc;
    return keep_mask(g, c, m, out);
}

/* The local mask of local configuration l: one walk of the trie. A token is sure when the top
 * rule takes all its bytes. Where a subtree dies after the rule could have ended (CF_CTX) above
 * it, its tokens depend on the stacks below: the subtree is kept as uncertain (its node and its
 * parent's), for compute_mask to walk from a real configuration. Slot index, or an error. */
static int32_t compute_local(struct grammar *g, int32_t l) {
    const struct grammar_vocab *v = g->v;
    size_t words = grammar_mask_words(v);
    int32_t slot = pool_take(&g->local, g->cf_lslot);
    g->n_lunc[slot] = 0;
    uint64_t *m = g->scratch;
    memset(m, 0, (words + 1) * sizeof *m);
    int32_t *at = g->walk_cf, *path = g->walk_node;
    uint8_t *ctx = g->walk_ctx;
    at[0] = l;
    ctx[0] = 0;
    path[0] = -1;
    const uint8_t *nbyte = v->nbyte;
    const uint16_t *ndepth = v->ndepth;
    const int32_t *nskip = v->nskip;
    const uint8_t *cls = g->cls, *flags = g->cf_complete;
    int32_t ncls = g->n_cls, hard = 2 * g->soft_cf;
    for (int32_t i = 0; i < v->n_nodes;) {
        int32_t d = ndepth[i], pc = at[d - 1];
        int32_t k = cls[nbyte[i]];
        int32_t nc = g->trans[(size_t)pc * (size_t)ncls + (size_t)k];
        if (nc == CF_UNKNOWN) {
            if (g->n_cf > hard) return CF_NOMEM;
            nc = step(g, pc, k);
            if (nc < CF_DEAD) return nc;
            flags = g->cf_complete;
        }
        if (nc == CF_DEAD) {
            if (ctx[d - 1] && add_uncertain(g, slot, i, path[d - 1])) return CF_NOMEM;
            i = nskip[i];
            continue;
        }
        at[d] = nc;
        path[d] = i;
        ctx[d] = ctx[d - 1] | (flags[nc] & CF_CTX);
        mark_node(v, m, i);
        i++;
    }
    if (slot_store(g, &g->local.s[slot], m, finish_bits(v, m))) return CF_NOMEM;
    g->local.s[slot].owner = l;
    g->cf_lslot[l] = slot;
    return slot;
}

/* The mask of configuration c into out (words words); returns its count, or an error. The local
 * mask serves alone when nothing depends on the stacks (no uncertain subtree, no named control
 * token, not complete); otherwise a full mask adds the uncertain subtrees walked from c (after the
 * bytes above each), the named control tokens and the EOG tokens when complete, kept per
 * configuration. */
static int32_t mask_of(struct grammar *g, int32_t c, uint64_t *out) {
    const struct grammar_vocab *v = g->v;
    size_t words = grammar_mask_words(v);
    if (g->cf_mask[c] >= 0) {
        struct mslot *s = &g->full.s[g->cf_mask[c]];
        s->used = budget_tick();
        slot_expand(v, s, out);
        return s->count;
    }
    int32_t tw;
    int32_t rc = twin_cf(g, c, &tw);
    if (rc < 0) return rc;
    if (tw >= 0) return twin_mask(g, c, tw, out);
    int32_t ls = -1;
    if (g->cf_len[c] > 0) {
        int32_t l = local_cf(g, c);
        if (l < 0) return l;
        ls = g->cf_lslot[l];
        if (ls < 0) ls = compute_local(g, l);
        if (ls < 0) return ls;
        g->local.s[ls].used = budget_tick();
        if (g->n_lunc[ls] == 0 && g->n_named == 0 && !(g->cf_complete[c] & CF_COMPLETE)) {
            slot_expand(v, &g->local.s[ls], out);
            return g->local.s[ls].count;
        }
    }
    uint64_t *m = g->scratch;
    m[words] = 0;
    if (ls >= 0) {
        slot_expand(v, &g->local.s[ls], m);
        int32_t last_parent = -2, pc = CF_DEAD;
        for (int32_t i = 0; i < g->n_lunc[ls]; i += 2) {
            int32_t node = g->lunc[ls][i], parent = g->lunc[ls][i + 1];
            if (parent != last_parent) { /* the bytes above the subtree: a token that passes there */
                int32_t t = v->sorted[v->ntok[parent]];
                pc = walk_bytes(g, c, (const uint8_t *)v->text + v->off[t], v->ndepth[parent]);
                if (pc < CF_DEAD) return pc;
                last_parent = parent;
            }
            if (pc >= 0 && (rc = walk_trie(g, m, node, v->nskip[node], pc))) return rc;
        }
    } else {
        memset(m, 0, words * sizeof *m);
    }
    if ((rc = add_named_eog(g, c, m)) < 0) return rc;
    return keep_mask(g, c, m, out);
}

/* The named control tokens c accepts, and the EOG tokens when c is complete, into m. 0 or an
 * error. */
static int32_t add_named_eog(struct grammar *g, int32_t c, uint64_t *m) {
    const struct grammar_vocab *v = g->v;
    for (int32_t i = 0; i < g->n_named; i++) {
        int32_t t = g->named[i];
        int32_t nc = walk_bytes(g, c, (const uint8_t *)v->text + v->off[t], v->len[t]);
        if (nc < CF_DEAD) return nc;
        if (nc >= 0) m[t >> 6] |= 1ull << (t & 63);
    }
    if (g->cf_complete[c] & CF_COMPLETE)
        for (int32_t i = 0; i < v->n_eog; i++) m[v->eog[i] >> 6] |= 1ull << (v->eog[i] & 63);
    return 0;
}

/* Keep m (words + 1, the spare bit set or not) as configuration c's full mask and copy it to
 * out. Count or an error. */
static int32_t keep_mask(struct grammar *g, int32_t c, uint64_t *m, uint64_t *out) {
    const struct grammar_vocab *v = g->v;
    int32_t count = finish_bits(v, m);
    int32_t slot = pool_take(&g->full, g->cf_mask);
    if (slot_store(g, &g->full.s[slot], m, count)) return CF_NOMEM;
    g->full.s[slot].owner = c;
    g->cf_mask[c] = slot;
    memcpy(out, m, grammar_mask_words(v) * sizeof *out);
    return count;
}

int32_t grammar_state_mask(struct grammar_state *st, uint64_t *allow) {
    struct grammar *g = st->g;
    pthread_mutex_lock(&g->mu);
    g->work_left = GRAMMAR_MAX_WORK;
    int32_t rc = state_ready(st);
    if (!rc) {
        rc = mask_of(g, st->cf, allow);
        if (rc < 0) {
            rc = cf_error(rc);
            st->dead = true;
        }
    }
    atomic_store_explicit(&g->last_use, budget_tick(), memory_order_relaxed);
    budget_enforce(g);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

static int accept_locked(struct grammar_state *st, const uint8_t *b, size_t n) {
    struct grammar *g = st->g;
    int32_t c = walk_bytes(g, st->cf, b, n);
    if (c == CF_DEAD) return -ERR_INVAL;
    if (c < 0) {
        st->dead = true;
        return cf_error(c);
    }
    st->cf = c;
    return 0;
}

int grammar_state_accept(struct grammar_state *st, int32_t token) {
    struct grammar *g = st->g;
    const struct grammar_vocab *v = g->v;
    if (token < 0 || token >= v->n_vocab) return -ERR_INVAL;
    pthread_mutex_lock(&g->mu);
    g->work_left = GRAMMAR_MAX_WORK;
    int rc = state_ready(st);
    if (!rc) {
        switch (v->kind[token]) {
        case GRAMMAR_TOKEN_EOG: rc = g->cf_complete[st->cf] & CF_COMPLETE ? 0 : -ERR_INVAL; break;
        case GRAMMAR_TOKEN_CONTROL:
            rc = is_named(g, token) ? accept_locked(st, (const uint8_t *)v->text + v->off[token], v->len[token]) : -ERR_INVAL;
            break;
        case GRAMMAR_TOKEN_TEXT:
            rc = v->len[token] ? accept_locked(st, (const uint8_t *)v->text + v->off[token], v->len[token]) : -ERR_INVAL;
            break;
        default: rc = -ERR_INVAL;
        }
    }
    budget_enforce(g);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

int grammar_state_accept_bytes(struct grammar_state *st, const char *bytes, size_t len) {
    struct grammar *g = st->g;
    pthread_mutex_lock(&g->mu);
    g->work_left = GRAMMAR_MAX_WORK;
    int rc = state_ready(st);
    if (!rc) rc = accept_locked(st, (const uint8_t *)bytes, len);
    budget_enforce(g);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

bool grammar_state_complete(const struct grammar_state *st) {
    struct grammar *g = st->g;
    pthread_mutex_lock(&g->mu);
    bool done = false;
    if (!st->dead) {
        if (st->epoch == g->epoch) done = g->cf_complete[st->cf] & CF_COMPLETE;
        else done = st->saved[0] & CF_COMPLETE;
    }
    pthread_mutex_unlock(&g->mu);
    return done;
}

/* ---- the vocabulary ------------------------------------------------------------------------- */

static const struct grammar_vocab *sort_vocab;
static int cmp_piece(const void *a, const void *b) {
    const struct grammar_vocab *v = sort_vocab;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->text + v->off[x], v->text + v->off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static const struct grammar_vocab *sort_len_vocab;
static int cmp_len_desc(const void *a, const void *b) {
    uint32_t x = sort_len_vocab->len[*(const int32_t *)a], y = sort_len_vocab->len[*(const int32_t *)b];
    return x > y ? -1 : x < y;
}

/* nmax, lenle and longer (see struct grammar_vocab). 0 or -ERR_NOMEM. */
static int length_index(struct grammar_vocab *v, int32_t n_text) {
    static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;
    size_t words = grammar_mask_words(v);
    v->nmax = malloc(((size_t)v->n_nodes + 1) * sizeof *v->nmax);
    v->lenle = calloc((size_t)LEN_BITS * words, sizeof *v->lenle);
    v->longer = malloc(((size_t)n_text + 1) * sizeof *v->longer);
    int32_t *path = malloc(((size_t)v->max_depth + 1) * sizeof *path);
    if (!v->nmax || !v->lenle || !v->longer || !path) {
        free(path);
        return -ERR_NOMEM;
    }
    /* the deepest node of a subtree is a leaf, where a token ends */
    int32_t depth = 0;
    for (int32_t i = 0; i <= v->n_nodes; i++) {
        int32_t d = i < v->n_nodes ? v->ndepth[i] : 0;
        while (depth > 0 && v->ndepth[path[depth - 1]] >= d) {
            int32_t x = path[--depth];
            if (depth > 0 && v->nmax[x] > v->nmax[path[depth - 1]]) v->nmax[path[depth - 1]] = v->nmax[x];
        }
        if (i < v->n_nodes) {
            v->nmax[i] = (uint16_t)d;
            path[depth++] = i;
        }
    }
    free(path);
    for (int32_t i = 0; i < n_text; i++) {
        int32_t t = v->sorted[i];
        if (v->len[t] > LEN_BITS) v->longer[v->n_longer++] = t;
        else v->lenle[(size_t)(v->len[t] - 1) * words + (size_t)(t >> 6)] |= 1ull << (t & 63);
    }
    for (size_t r = 1; r < LEN_BITS; r++)
        for (size_t w = 0; w < words; w++) v->lenle[r * words + w] |= v->lenle[(r - 1) * words + w];
    pthread_mutex_lock(&sort_mu);
    sort_len_vocab = v;
    qsort(v->longer, (size_t)v->n_longer, sizeof *v->longer, cmp_len_desc);
    pthread_mutex_unlock(&sort_mu);
    return 0;
}

void grammar_vocab_free(struct grammar_vocab *v) {
    if (!v) return;
    free(v->kind);
    free(v->text);
    free(v->off);
    free(v->len);
    free(v->nbyte);
    free(v->ndepth);
    free(v->nskip);
    free(v->ntok);
    free(v->ntok1);
    free(v->nmulti);
    free(v->sorted);
    free(v->eog);
    free(v->control);
    free(v->nmax);
    free(v->lenle);
    free(v->longer);
    free(v);
}

int grammar_vocab_create(struct grammar_vocab **out, int32_t n_vocab, const char *const *pieces,
                         const uint32_t *lens, const uint8_t *kinds) {
    static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER; /* qsort has no context argument */
    if (n_vocab <= 0) return -ERR_INVAL;
    struct grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) return -ERR_NOMEM;
    v->n_vocab = n_vocab;
    size_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++) total += kinds[i] == GRAMMAR_TOKEN_TEXT || kinds[i] == GRAMMAR_TOKEN_CONTROL ? lens[i] : 0;
    v->kind = malloc((size_t)n_vocab);
    v->text = malloc(total ? total : 1);
    v->off = malloc((size_t)n_vocab * sizeof *v->off);
    v->len = malloc((size_t)n_vocab * sizeof *v->len);
    v->sorted = malloc((size_t)n_vocab * sizeof *v->sorted);
    v->eog = malloc((size_t)n_vocab * sizeof *v->eog);
    v->control = malloc((size_t)n_vocab * sizeof *v->control);
    if (!v->kind || !v->text || !v->off || !v->len || !v->sorted || !v->eog || !v->control) goto oom;
    size_t at = 0;
    int32_t n_text = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        uint8_t k = kinds[i];
        uint32_t l = k == GRAMMAR_TOKEN_TEXT || k == GRAMMAR_TOKEN_CONTROL ? lens[i] : 0;
        if (k == GRAMMAR_TOKEN_TEXT && (l == 0 || l > 65000)) k = GRAMMAR_TOKEN_NONE, l = 0;
        v->kind[i] = k;
        v->off[i] = (uint32_t)at;
        v->len[i] = l;
        if (l) memcpy(v->text + at, pieces[i], l);
        at += l;
        if (k == GRAMMAR_TOKEN_TEXT) v->sorted[n_text++] = i;
        else if (k == GRAMMAR_TOKEN_EOG) v->eog[v->n_eog++] = i;
        else if (k == GRAMMAR_TOKEN_CONTROL) v->control[v->n_control++] = i;
    }
    pthread_mutex_lock(&sort_mu);
    sort_vocab = v;
    qsort(v->sorted, (size_t)n_text, sizeof *v->sorted, cmp_piece);
    pthread_mutex_unlock(&sort_mu);
    /* nodes: at most the total bytes of the text tokens */
    size_t max_nodes = 1;
    for (int32_t i = 0; i < n_text; i++) max_nodes += v->len[v->sorted[i]];
    if (max_nodes > INT32_MAX / 2) goto oom;
    v->nbyte = malloc(max_nodes);
    v->ndepth = malloc(max_nodes * sizeof *v->ndepth);
    v->nskip = malloc(max_nodes * sizeof *v->nskip);
    v->ntok = malloc((max_nodes + 1) * sizeof *v->ntok);
    int32_t max_len = 1;
    for (int32_t i = 0; i < n_text; i++)
        if ((int32_t)v->len[v->sorted[i]] > max_len) max_len = (int32_t)v->len[v->sorted[i]];
    int32_t *path = malloc((size_t)max_len * sizeof *path);
    if (!v->nbyte || !v->ndepth || !v->nskip || !v->ntok || !path) {
        free(path);
        goto oom;
    }
    int32_t nn = 0, depth = 0;
    const char *prev = NULL;
    uint32_t prev_len = 0;
    for (int32_t i = 0; i < n_text; i++) {
        int32_t t = v->sorted[i];
        const char *p = v->text + v->off[t];
        uint32_t l = v->len[t], lcp = 0;
        while (prev && lcp < l && lcp < prev_len && p[lcp] == prev[lcp]) lcp++;
        while ((uint32_t)depth > lcp) v->nskip[path[--depth]] = nn; /* subtrees that end here */
        for (uint32_t d = lcp; d < l; d++) {
            v->nbyte[nn] = (uint8_t)p[d];
            v->ndepth[nn] = (uint16_t)(d + 1);
            v->ntok[nn] = i;
            path[depth++] = nn++;
        }
        if ((int32_t)l > v->max_depth) v->max_depth = (int32_t)l;
        prev = p;
        prev_len = l;
    }
    while (depth > 0) v->nskip[path[--depth]] = nn;
    free(path);
    v->ntok[nn] = n_text;
    v->n_nodes = nn;
    v->ntok1 = malloc(((size_t)nn + 1) * sizeof *v->ntok1);
    v->nmulti = malloc((size_t)nn + 1);
    if (!v->ntok1 || !v->nmulti) goto oom;
    for (int32_t i = 0; i < nn; i++) {
        v->ntok1[i] = v->ntok[i + 1] > v->ntok[i] ? v->sorted[v->ntok[i]] : n_vocab;
        v->nmulti[i] = v->ntok[i + 1] - v->ntok[i] > 1;
    }
    /* ntok[i] was the index of the first token sorted at or after node i's creation; the
     * tokens ending at node i are exactly those before the next node's creation */
    if (length_index(v, n_text)) goto oom;
    *out = v;
    return 0;
oom:
    grammar_vocab_free(v);
    return -ERR_NOMEM;
}

size_t grammar_mask_words(const struct grammar_vocab *v) { return ((size_t)v->n_vocab + 63) / 64; }
int32_t grammar_vocab_n_vocab(const struct grammar_vocab *v) { return v->n_vocab; }
int32_t grammar_vocab_nodes(const struct grammar_vocab *v) { return v->n_nodes; }

/* ---- the cache of compiled grammars --------------------------------------------------------- */

struct cache_entry {
    char *text;
    size_t len;
    struct grammar *g;
    uint64_t used;
};

struct grammar_cache {
    const struct grammar_vocab *v;
    pthread_mutex_t mu; /* guards e, n and clock; never held while compiling */
    struct cache_entry *e;
    int32_t n, cap;
    uint64_t clock;
};

int grammar_cache_create(struct grammar_cache **out, const struct grammar_vocab *v, int32_t cap) {
    if (cap < 1) return -ERR_INVAL;
    struct grammar_cache *c = calloc(1, sizeof *c);
    if (!c || !(c->e = calloc((size_t)cap, sizeof *c->e))) {
        free(c);
        return -ERR_NOMEM;
    }
    pthread_mutex_init(&c->mu, NULL);
    c->v = v;
    c->cap = cap;
    *out = c;
    return 0;
}

void grammar_cache_free(struct grammar_cache *c) {
    if (!c) return;
    for (int32_t i = 0; i < c->n; i++) {
        free(c->e[i].text);
        grammar_unref(c->e[i].g);
    }
    pthread_mutex_destroy(&c->mu);
    free(c->e);
    free(c);
}

/* The entry of text, a reference taken and its use noted, or NULL. c->mu held. */
static struct grammar *cache_lookup(struct grammar_cache *c, const char *text, size_t len) {
    for (int32_t i = 0; i < c->n; i++)
        if (c->e[i].len == len && !memcmp(c->e[i].text, text, len)) {
            c->e[i].used = ++c->clock;
            grammar_ref(c->e[i].g);
            return c->e[i].g;
        }
    return NULL;
}

int grammar_cache_find(struct grammar_cache *c, const char *text, size_t len, struct grammar **out) {
    pthread_mutex_lock(&c->mu);
    struct grammar *g = cache_lookup(c, text, len);
    pthread_mutex_unlock(&c->mu);
    if (!g) return -ERR_NOTFOUND;
    *out = g;
    return 0;
}

int grammar_cache_get(struct grammar_cache *c, const char *text, size_t len, struct grammar **out, char *why,
                      size_t why_len) {
    if (grammar_cache_find(c, text, len, out) == 0) return 0;
    struct grammar *g;
    int rc = grammar_compile(&g, c->v, text, len, why, why_len); /* unlocked: finds go on meanwhile */
    if (rc) return rc;
    char *copy = malloc(len ? len : 1);
    if (!copy) {
        grammar_unref(g);
        return -ERR_NOMEM;
    }
    memcpy(copy, text, len);
    pthread_mutex_lock(&c->mu);
    struct grammar *had = cache_lookup(c, text, len); /* another thread compiled it meanwhile: keep that one */
    if (had) {
        pthread_mutex_unlock(&c->mu);
        free(copy);
        grammar_unref(g);
        *out = had;
        return 0;
    }
    int32_t slot = c->n;
    if (c->n == c->cap) {
        slot = 0;
        for (int32_t i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[slot].used) slot = i;
        free(c->e[slot].text);
        grammar_unref(c->e[slot].g);
    } else {
        c->n++;
    }
    c->e[slot] = (struct cache_entry){copy, len, g, ++c->clock};
    grammar_ref(g);
    *out = g;
    /* over the memory budget: the least recently used others go (freed once no sequence uses them) */
    while (c->n > 1 && atomic_load(&budget_used) > atomic_load(&budget_limit)) {
        int32_t old = slot == 0 ? 1 : 0;
        for (int32_t i = 0; i < c->n; i++)
            if (i != slot && c->e[i].used < c->e[old].used) old = i;
        free(c->e[old].text);
        grammar_unref(c->e[old].g);
        c->e[old] = c->e[--c->n];
        if (slot == c->n) slot = old;
    }
    pthread_mutex_unlock(&c->mu);
    return 0;
}
