/* jinja_parse.c: Jinja template text -> syntax tree (jinja_impl.h's struct jnode).
 *
 * Whitespace follows what chat templates are written for (the reference server's settings):
 * line endings become "\n" and one trailing newline of the template is dropped; trim_blocks
 * (the first newline after a {% %} or {# #} tag goes) and lstrip_blocks (spaces and tabs
 * before a {% %} or {# #} tag that starts its line go); `-` inside a tag's delimiters strips
 * all whitespace on that side. Expressions follow Jinja2's grammar and precedence. */
#include "api/jinja_impl.h"

#include "common/err.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum tktype {
    TK_EOF,
    TK_TEXT,
    TK_VAR_OPEN,
    TK_VAR_CLOSE,
    TK_STMT_OPEN,
    TK_STMT_CLOSE,
    TK_NAME,
    TK_STR,
    TK_INT,
    TK_FLOAT,
    TK_OP,
};

struct tok {
    uint8_t type;
    char op[3];           /* TK_OP: "+", "//", ... */
    uint32_t pos;
    const char *s;        /* TK_TEXT, TK_NAME, TK_STR: NUL-terminated (arena) */
    uint32_t n;
    int64_t i;
    double f;
};

struct lexer {
    struct jinja_template *t;
    struct jarena *a;
    const char *src;
    size_t n, pos;
    struct tok *tk;
    size_t ntk, cap;
};

int jinja_line(const struct jinja_template *t, uint32_t pos) {
    int line = 1;
    for (size_t i = 0; i < pos && i < t->src_len; i++) line += t->src[i] == '\n';
    return line;
}

_Noreturn static void lex_fail(struct lexer *L, size_t pos, const char *what) {
    jfail(L->a->fail, -ERR_FORMAT, "line %d: %s", jinja_line(L->t, (uint32_t)pos), what);
}

static struct tok *push(struct lexer *L, uint8_t type, size_t pos) {
    if (L->ntk == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        struct tok *nt = ja_alloc(L->a, sizeof *nt * cap);
        if (L->ntk) memcpy(nt, L->tk, sizeof *nt * L->ntk);
        L->tk = nt;
        L->cap = cap;
    }
    struct tok *k = &L->tk[L->ntk++];
    memset(k, 0, sizeof *k);
    k->type = type;
    k->pos = (uint32_t)pos;
    return k;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
static bool is_name_start(char c) { return isalpha((unsigned char)c) || c == '_'; }
static bool is_name_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* A tag opener at i: "{{", "{%" or "{#". */
static bool tag_at(const char *s, size_t n, size_t i) {
    return i + 1 < n && s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#');
}

static void emit_text(struct lexer *L, size_t start, size_t end, bool after_block, bool strip_left,
                      bool strip_right, bool before_block) {
    const char *s = L->src;
    if (before_block) { /* lstrip_blocks: spaces from the start of the line to the tag */
        size_t k = end;
        while (k > start && (s[k - 1] == ' ' || s[k - 1] == '\t')) k--;
        if ((k > start && s[k - 1] == '\n') || k == 0) end = k;
    }
    if (after_block && start < end && s[start] == '\n') start++; /* trim_blocks */
    if (strip_left)
        while (start < end && is_ws(s[start])) start++;
    if (strip_right)
        while (end > start && is_ws(s[end - 1])) end--;
    if (end > start) {
        struct tok *k = push(L, TK_TEXT, start);
        k->s = s + start;
        k->n = (uint32_t)(end - start);
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xc0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3f)), 2;
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A quoted string at L->pos, with Python's escapes; an unknown escape keeps its backslash. */
static void lex_string(struct lexer *L) {
    const char *s = L->src;
    size_t start = L->pos;
    char q = s[L->pos++];
    size_t end = L->pos;
    while (end < L->n && s[end] != q) end += s[end] == '\\' && end + 1 < L->n ? 2 : 1;
    if (end >= L->n) lex_fail(L, start, "unterminated string");
    char *o = ja_alloc(L->a, end - L->pos + 1);
    size_t on = 0;
    for (size_t i = L->pos; i < end; i++) {
        char c = s[i];
        if (c != '\\') {
            o[on++] = c;
            continue;
        }
        char e = s[++i];
        int digits = 0;
        switch (e) {
        case 'n': o[on++] = '\n'; break;
        case 't': o[on++] = '\t'; break;
        case 'r': o[on++] = '\r'; break;
        case 'b': o[on++] = '\b'; break;
        case 'f': o[on++] = '\f'; break;
        case 'v': o[on++] = '\v'; break;
        case 'a': o[on++] = '\a'; break;
        case '0': o[on++] = '\0'; break;
        case '\\': case '\'': case '"': o[on++] = e; break;
        case '\n': break; /* line continuation */
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default: o[on++] = '\\'; o[on++] = e; break;
        }
        if (digits) {
            uint32_t cp = 0;
            int k = 0;
            for (; k < digits && i + 1 + k < end && hexval(s[i + 1 + k]) >= 0; k++)
                cp = cp * 16 + (uint32_t)hexval(s[i + 1 + k]);
            if (k < digits || cp > 0x10ffff) lex_fail(L, i, "bad escape in string");
            i += (size_t)digits;
            /* o has room: an escape of 4+ source bytes yields at most 4 bytes */
            on += put_utf8(o + on, cp);
        }
    }
    o[on] = '\0';
    struct tok *k = push(L, TK_STR, start);
    k->s = o;
    k->n = (uint32_t)on;
    L->pos = end + 1;
}

static void lex_number(struct lexer *L) {
    const char *s = L->src;
    size_t start = L->pos, i = L->pos;
    while (i < L->n && (isdigit((unsigned char)s[i]) || s[i] == '_')) i++;
    bool is_float = false;
    if (i + 1 < L->n && s[i] == '.' && isdigit((unsigned char)s[i + 1])) {
        is_float = true;
        i++;
        while (i < L->n && (isdigit((unsigned char)s[i]) || s[i] == '_')) i++;
    }
    if (i < L->n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->n && (s[j] == '+' || s[j] == '-')) j++;
        if (j < L->n && isdigit((unsigned char)s[j])) {
            is_float = true;
            i = j;
            while (i < L->n && isdigit((unsigned char)s[i])) i++;
        }
    }
    char buf[64];
    size_t bn = 0;
    for (size_t k = start; k < i && bn + 1 < sizeof buf; k++)
        if (s[k] != '_') buf[bn++] = s[k];
    buf[bn] = '\0';
    struct tok *k = push(L, TK_INT, start);
    errno = 0;
    if (!is_float) {
        long long v = strtoll(buf, NULL, 10);
        if (errno == ERANGE) is_float = true; /* past int64: a float, not a wrong integer */
        else k->i = v;
    }
    if (is_float) {
        k->type = TK_FLOAT;
        k->f = strtod(buf, NULL);
    }
    L->pos = i;
}

static const char *const ops2[] = {"**", "//", "==", "!=", "<=", ">=", NULL};
static const char ops1[] = "+-*/%~<>=.,:|()[]{}";

/* The inside of a {{ }} or {% %} tag, up to and including its close. Returns whether the
 * close had a '-' (strip the whitespace after it). */
static bool lex_tag(struct lexer *L, bool stmt, size_t open_pos) {
    const char *s = L->src;
    int depth = 0; /* open braces: "}}" inside a dict literal closes braces, not the tag */
    for (;;) {
        while (L->pos < L->n && is_ws(s[L->pos])) L->pos++;
        if (L->pos >= L->n) lex_fail(L, open_pos, stmt ? "unclosed {% tag" : "unclosed {{ tag");
        size_t p = L->pos;
        char c = s[p];
        char close = stmt ? '%' : '}';
        bool can_close = stmt || depth == 0;
        if (can_close && c == '-' && p + 2 < L->n + 0 && s[p + 1] == close && s[p + 2] == '}') {
            push(L, stmt ? TK_STMT_CLOSE : TK_VAR_CLOSE, p);
            L->pos = p + 3;
            return true;
        }
        if (can_close && c == close && p + 1 < L->n && s[p + 1] == '}') {
            push(L, stmt ? TK_STMT_CLOSE : TK_VAR_CLOSE, p);
            L->pos = p + 2;
            return false;
        }
        if (c == '\'' || c == '"') {
            lex_string(L);
        } else if (isdigit((unsigned char)c)) {
            lex_number(L);
        } else if (is_name_start(c)) {
            size_t e = p;
            while (e < L->n && is_name_char(s[e])) e++;
            struct tok *k = push(L, TK_NAME, p);
            k->s = ja_strndup(L->a, s + p, e - p);
            k->n = (uint32_t)(e - p);
            L->pos = e;
        } else {
            int len = 0;
            for (int i = 0; ops2[i]; i++)
                if (p + 1 < L->n && s[p] == ops2[i][0] && s[p + 1] == ops2[i][1]) len = 2;
            if (!len && strchr(ops1, c) && c) len = 1;
            if (!len) lex_fail(L, p, "unexpected character in tag");
            struct tok *k = push(L, TK_OP, p);
            memcpy(k->op, s + p, (size_t)len);
            if (c == '{') depth++;
            if (c == '}' && depth > 0) depth--;
            L->pos = p + (size_t)len;
        }
    }
}

/* After "{% raw %}": the text up to "{% endraw %}" as it is. */
static void lex_raw(struct lexer *L, bool strip_left) {
    const char *s = L->src;
    size_t start = L->pos;
    for (size_t i = start; i + 1 < L->n; i++) {
        if (s[i] != '{' || s[i + 1] != '%') continue;
        size_t j = i + 2;
        bool strip_right = j < L->n && s[j] == '-';
        if (strip_right) j++;
        while (j < L->n && is_ws(s[j])) j++;
        if (j + 6 > L->n || memcmp(s + j, "endraw", 6) != 0) continue;
        j += 6;
        while (j < L->n && is_ws(s[j])) j++;
        if (j < L->n && s[j] == '-') j++;
        if (j + 1 >= L->n || s[j] != '%' || s[j + 1] != '}') continue;
        emit_text(L, start, i, false, strip_left, strip_right, false);
        L->pos = j + 2;
        return;
    }
    lex_fail(L, start, "missing {% endraw %}");
}

static void lex(struct lexer *L) {
    const char *s = L->src;
    bool after_block = false, strip_left = false;
    while (L->pos < L->n) {
        size_t start = L->pos, t = start;
        while (t < L->n && !tag_at(s, L->n, t)) t++;
        bool is_block = t < L->n && (s[t + 1] == '%' || s[t + 1] == '#');
        bool strip_right = t + 2 < L->n && s[t + 2] == '-';
        emit_text(L, start, t, after_block, strip_left, strip_right, is_block);
        if (t >= L->n) break;
        L->pos = t + 2;
        if (s[t + 1] == '#') {
            size_t e = t + 2;
            while (e + 1 < L->n && !(s[e] == '#' && s[e + 1] == '}')) e++;
            if (e + 1 >= L->n) lex_fail(L, t, "unclosed comment");
            strip_left = e > t + 2 && s[e - 1] == '-';
            after_block = true;
            L->pos = e + 2;
            continue;
        }
        bool stmt = s[t + 1] == '%';
        push(L, stmt ? TK_STMT_OPEN : TK_VAR_OPEN, t);
        if (L->pos < L->n && (s[L->pos] == '-' || (stmt && s[L->pos] == '+'))) L->pos++;
        size_t first = L->ntk;
        strip_left = lex_tag(L, stmt, t);
        after_block = stmt;
        if (stmt && L->ntk == first + 2 && L->tk[first].type == TK_NAME && !strcmp(L->tk[first].s, "raw")) {
            L->ntk -= 3; /* the raw tag itself leaves nothing */
            lex_raw(L, strip_left);
            strip_left = false;
            after_block = true;
        }
    }
    push(L, TK_EOF, L->n);
}

/* --- parser -------------------------------------------------------------------------------- */

struct parser {
    struct jinja_template *t;
    struct jarena *a;
    struct tok *tk;
    size_t i;
    int depth;
};

_Noreturn static void parse_fail(struct parser *P, const char *fmt, const char *arg) {
    char what[160];
    snprintf(what, sizeof what, fmt, arg ? arg : "");
    jfail(P->a->fail, -ERR_FORMAT, "line %d: %s", jinja_line(P->t, P->tk[P->i].pos), what);
}

static struct tok *peek(struct parser *P) { return &P->tk[P->i]; }
static struct tok *peek2(struct parser *P) {
    return P->tk[P->i].type == TK_EOF ? &P->tk[P->i] : &P->tk[P->i + 1];
}
static struct tok *next(struct parser *P) {
    struct tok *k = &P->tk[P->i];
    if (k->type != TK_EOF) P->i++;
    return k;
}
static bool is_op(const struct tok *k, const char *op) { return k->type == TK_OP && !strcmp(k->op, op); }
static bool is_name(const struct tok *k, const char *name) {
    return k->type == TK_NAME && !strcmp(k->s, name);
}
static bool skip_op(struct parser *P, const char *op) {
    if (!is_op(peek(P), op)) return false;
    next(P);
    return true;
}
static bool skip_name(struct parser *P, const char *name) {
    if (!is_name(peek(P), name)) return false;
    next(P);
    return true;
}
static void expect_op(struct parser *P, const char *op) {
    if (!skip_op(P, op)) parse_fail(P, "expected '%s'", op);
}
static const char *expect_name(struct parser *P) {
    if (peek(P)->type != TK_NAME) parse_fail(P, "expected a name", NULL);
    return next(P)->s;
}
static void expect_stmt_close(struct parser *P) {
    if (peek(P)->type != TK_STMT_CLOSE) parse_fail(P, "expected the end of the tag '%%}'", NULL);
    next(P);
}

static struct jnode *node(struct parser *P, uint8_t kind, uint32_t pos) {
    struct jnode *n = ja_alloc(P->a, sizeof *n);
    n->kind = kind;
    n->pos = pos;
    return n;
}

/* A growable array of nodes (ends up in n->items). */
struct nodes {
    struct jnode **v;
    const char **kw;
    uint32_t n, cap;
};
static void nodes_push(struct parser *P, struct nodes *ns, struct jnode *x, const char *kw) {
    if (ns->n == ns->cap) {
        uint32_t cap = ns->cap ? ns->cap * 2 : 4;
        struct jnode **v = ja_alloc(P->a, sizeof *v * cap);
        const char **k = ja_alloc(P->a, sizeof *k * cap);
        if (ns->n) {
            memcpy(v, ns->v, sizeof *v * ns->n);
            memcpy(k, ns->kw, sizeof *k * ns->n);
        }
        ns->v = v;
        ns->kw = k;
        ns->cap = cap;
    }
    ns->v[ns->n] = x;
    ns->kw[ns->n] = kw;
    ns->n++;
}

static void enter(struct parser *P) {
    if (++P->depth > JINJA_MAX_PARSE_DEPTH) parse_fail(P, "template nested too deeply", NULL);
}

static struct jnode *parse_expr(struct parser *P, bool with_cond);
static struct jnode *parse_unary(struct parser *P, bool with_filter);
static struct jnode *parse_primary(struct parser *P);
static struct jnode *parse_postfix(struct parser *P, struct jnode *x);

/* "(a, b, k=v)" after the '(' was seen: into n->items with the keyword names in n->kw. */
static void parse_call_args(struct parser *P, struct jnode *n) {
    struct nodes ns = {0};
    expect_op(P, "(");
    uint32_t nkw = 0;
    while (!is_op(peek(P), ")")) {
        if (ns.n) {
            expect_op(P, ",");
            if (is_op(peek(P), ")")) break;
        }
        if (is_op(peek(P), "*") || is_op(peek(P), "**")) parse_fail(P, "*args and **kwargs are not supported", NULL);
        if (peek(P)->type == TK_NAME && is_op(peek2(P), "=")) {
            const char *kw = next(P)->s;
            next(P);
            nodes_push(P, &ns, parse_expr(P, true), kw);
            nkw++;
        } else {
            if (nkw) parse_fail(P, "a positional argument after a keyword argument", NULL);
            nodes_push(P, &ns, parse_expr(P, true), NULL);
        }
    }
    expect_op(P, ")");
    n->items = ns.v;
    n->n = ns.n;
    n->nkw = nkw;
    n->kw = nkw ? ns.kw + (ns.n - nkw) : NULL;
}

static struct jnode *parse_filter(struct parser *P, struct jnode *x) {
    struct jnode *f = node(P, JN_FILTER, peek(P)->pos);
    f->a = x;
    f->name = expect_name(P);
    while (skip_op(P, ".")) /* dotted names read as one */
        f->name = ja_strndup(P->a, f->name, strlen(f->name)), f->name = expect_name(P);
    if (is_op(peek(P), "(")) parse_call_args(P, f);
    return f;
}

static struct jnode *parse_test(struct parser *P, struct jnode *x) {
    struct jnode *t = node(P, JN_TEST, peek(P)->pos);
    t->a = x;
    if (skip_name(P, "not")) t->op = 1;
    struct tok *k = peek(P);
    if (k->type == TK_NAME) t->name = next(P)->s;
    else if (is_op(k, "==") || is_op(k, "!=") || is_op(k, "<") || is_op(k, ">") || is_op(k, "<=") || is_op(k, ">="))
        t->name = ja_strndup(P->a, next(P)->op, strlen(k->op));
    else parse_fail(P, "expected a test name after 'is'", NULL);
    k = peek(P);
    if (is_op(k, "(")) {
        parse_call_args(P, t);
    } else if ((k->type == TK_NAME && !is_name(k, "else") && !is_name(k, "or") && !is_name(k, "and") &&
                !is_name(k, "if") && !is_name(k, "is") && !is_name(k, "in") && !is_name(k, "not")) ||
               k->type == TK_STR || k->type == TK_INT || k->type == TK_FLOAT || is_op(k, "[") || is_op(k, "{")) {
        struct jnode *arg = parse_postfix(P, parse_primary(P));
        t->items = ja_alloc(P->a, sizeof *t->items);
        t->items[0] = arg;
        t->n = 1;
    }
    return t;
}

static struct jnode *parse_filter_expr(struct parser *P, struct jnode *x) {
    for (;;) {
        if (skip_op(P, "|")) x = parse_filter(P, x);
        else if (skip_name(P, "is")) x = parse_test(P, x);
        else if (is_op(peek(P), "(")) {
            struct jnode *c = node(P, JN_CALL, peek(P)->pos);
            c->a = x;
            parse_call_args(P, c);
            x = c;
        } else return x;
    }
}

static struct jnode *parse_subscript(struct parser *P, struct jnode *x, uint32_t pos) {
    struct jnode *start = NULL, *stop = NULL, *step = NULL;
    if (!is_op(peek(P), ":")) start = parse_expr(P, true);
    if (skip_op(P, ":")) {
        if (!is_op(peek(P), ":") && !is_op(peek(P), "]")) stop = parse_expr(P, true);
        if (skip_op(P, ":") && !is_op(peek(P), "]")) step = parse_expr(P, true);
        expect_op(P, "]");
        struct jnode *s = node(P, JN_SLICE, pos);
        s->a = x;
        s->b = start;
        s->c = stop;
        s->d = step;
        return s;
    }
    expect_op(P, "]");
    struct jnode *g = node(P, JN_GETITEM, pos);
    g->a = x;
    g->b = start;
    return g;
}

static struct jnode *parse_postfix(struct parser *P, struct jnode *x) {
    for (;;) {
        struct tok *k = peek(P);
        if (is_op(k, ".")) {
            next(P);
            struct tok *a = next(P);
            if (a->type == TK_NAME) {
                struct jnode *g = node(P, JN_GETATTR, k->pos);
                g->a = x;
                g->name = a->s;
                x = g;
            } else if (a->type == TK_INT) {
                struct jnode *g = node(P, JN_GETITEM, k->pos), *idx = node(P, JN_LIT, a->pos);
                idx->lit = jv_int(a->i);
                g->a = x;
                g->b = idx;
                x = g;
            } else {
                P->i--;
                parse_fail(P, "expected an attribute name after '.'", NULL);
            }
        } else if (is_op(k, "[")) {
            next(P);
            x = parse_subscript(P, x, k->pos);
        } else if (is_op(k, "(")) {
            struct jnode *c = node(P, JN_CALL, k->pos);
            c->a = x;
            parse_call_args(P, c);
            x = c;
        } else {
            return x;
        }
    }
}

/* "[a, b]" / "(a, b)" / "{k: v}" bodies. */
static struct jnode *parse_seq(struct parser *P, uint8_t kind, const char *close, uint32_t pos) {
    struct jnode *n = node(P, kind, pos);
    struct nodes ns = {0};
    while (!is_op(peek(P), close)) {
        if (ns.n) {
            expect_op(P, ",");
            if (is_op(peek(P), close)) break;
        }
        nodes_push(P, &ns, parse_expr(P, true), NULL);
        if (kind == JN_DICT) {
            expect_op(P, ":");
            nodes_push(P, &ns, parse_expr(P, true), NULL);
        }
    }
    expect_op(P, close);
    n->items = ns.v;
    n->n = ns.n;
    return n;
}

static struct jnode *parse_primary(struct parser *P) {
    enter(P);
    struct tok *k = next(P);
    struct jnode *n = NULL;
    switch (k->type) {
    case TK_NAME:
        n = node(P, JN_LIT, k->pos);
        if (!strcmp(k->s, "true") || !strcmp(k->s, "True")) n->lit = jv_bool(true);
        else if (!strcmp(k->s, "false") || !strcmp(k->s, "False")) n->lit = jv_bool(false);
        else if (!strcmp(k->s, "none") || !strcmp(k->s, "None")) n->lit = jv_none();
        else {
            n->kind = JN_NAME;
            n->name = k->s;
        }
        break;
    case TK_STR: {
        /* adjacent literals join: "a" "b" is "ab" */
        size_t len = k->n;
        size_t j = P->i;
        while (P->tk[j].type == TK_STR) len += P->tk[j++].n;
        n = node(P, JN_LIT, k->pos);
        if (j == P->i) {
            n->lit = jv_strn(k->s, k->n);
        } else {
            if (len > UINT32_MAX) parse_fail(P, "string too long", NULL);
            char *s = ja_alloc(P->a, len + 1);
            size_t o = k->n;
            memcpy(s, k->s, k->n);
            while (P->i < j) {
                struct tok *m = next(P);
                memcpy(s + o, m->s, m->n);
                o += m->n;
            }
            n->lit = jv_strn(s, (uint32_t)len);
        }
        break;
    }
    case TK_INT:
        n = node(P, JN_LIT, k->pos);
        n->lit = jv_int(k->i);
        break;
    case TK_FLOAT:
        n = node(P, JN_LIT, k->pos);
        n->lit = jv_float(k->f);
        break;
    case TK_OP:
        if (!strcmp(k->op, "(")) {
            if (skip_op(P, ")")) {
                n = node(P, JN_TUPLE, k->pos);
                break;
            }
            struct jnode *first = parse_expr(P, true);
            if (skip_op(P, ")")) {
                n = first;
                break;
            }
            struct nodes ns = {0};
            nodes_push(P, &ns, first, NULL);
            while (skip_op(P, ",")) {
                if (is_op(peek(P), ")")) break;
                nodes_push(P, &ns, parse_expr(P, true), NULL);
            }
            expect_op(P, ")");
            n = node(P, JN_TUPLE, k->pos);
            n->items = ns.v;
            n->n = ns.n;
        } else if (!strcmp(k->op, "[")) {
            n = parse_seq(P, JN_LIST, "]", k->pos);
        } else if (!strcmp(k->op, "{")) {
            n = parse_seq(P, JN_DICT, "}", k->pos);
        }
        break;
    default: break;
    }
    if (!n) {
        P->i--;
        parse_fail(P, "unexpected %s", k->type == TK_EOF ? "end of template" : k->type == TK_OP ? k->op :
                   k->type == TK_VAR_CLOSE || k->type == TK_STMT_CLOSE ? "end of tag" : "token");
    }
    P->depth--;
    return n;
}

static struct jnode *binop(struct parser *P, char op, struct jnode *a, struct jnode *b, uint32_t pos) {
    struct jnode *n = node(P, JN_BINOP, pos);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static struct jnode *parse_unary(struct parser *P, bool with_filter) {
    enter(P);
    struct tok *k = peek(P);
    struct jnode *x;
    if (is_op(k, "-") || is_op(k, "+")) {
        next(P);
        x = node(P, JN_UNARY, k->pos);
        x->op = k->op[0];
        x->a = parse_unary(P, false);
    } else {
        x = parse_primary(P);
    }
    x = parse_postfix(P, x);
    if (with_filter) x = parse_filter_expr(P, x);
    P->depth--;
    return x;
}

static struct jnode *parse_pow(struct parser *P) {
    struct jnode *x = parse_unary(P, true);
    while (is_op(peek(P), "**")) {
        uint32_t pos = next(P)->pos;
        x = binop(P, 'P', x, parse_unary(P, true), pos);
    }
    return x;
}

static struct jnode *parse_math2(struct parser *P) {
    struct jnode *x = parse_pow(P);
    for (;;) {
        struct tok *k = peek(P);
        char op = is_op(k, "*") ? '*' : is_op(k, "/") ? '/' : is_op(k, "//") ? 'F' : is_op(k, "%") ? '%' : 0;
        if (!op) return x;
        next(P);
        x = binop(P, op, x, parse_pow(P), k->pos);
    }
}

static struct jnode *parse_concat(struct parser *P) {
    struct jnode *x = parse_math2(P);
    while (is_op(peek(P), "~")) {
        uint32_t pos = next(P)->pos;
        x = binop(P, '~', x, parse_math2(P), pos);
    }
    return x;
}

static struct jnode *parse_math1(struct parser *P) {
    struct jnode *x = parse_concat(P);
    for (;;) {
        struct tok *k = peek(P);
        char op = is_op(k, "+") ? '+' : is_op(k, "-") ? '-' : 0;
        if (!op) return x;
        next(P);
        x = binop(P, op, x, parse_concat(P), k->pos);
    }
}

static struct jnode *parse_compare(struct parser *P) {
    struct jnode *x = parse_math1(P), *result = NULL;
    for (;;) {
        struct tok *k = peek(P);
        char op = is_op(k, "==") ? '=' : is_op(k, "!=") ? '!' : is_op(k, "<") ? '<' : is_op(k, "<=") ? 'L' :
                  is_op(k, ">") ? '>' : is_op(k, ">=") ? 'G' : is_name(k, "in") ? 'i' :
                  is_name(k, "not") && is_name(peek2(P), "in") ? 'n' : 0;
        if (!op) break;
        next(P);
        if (op == 'n') next(P);
        struct jnode *y = parse_math1(P);
        struct jnode *c = binop(P, op, x, y, k->pos);
        if (!result) {
            result = c;
        } else { /* a < b < c is (a < b) and (b < c) */
            struct jnode *and = node(P, JN_AND, k->pos);
            and->a = result;
            and->b = c;
            result = and;
        }
        x = y;
    }
    return result ? result : x;
}

static struct jnode *parse_not(struct parser *P) {
    struct tok *k = peek(P);
    if (is_name(k, "not")) {
        enter(P);
        next(P);
        struct jnode *n = node(P, JN_UNARY, k->pos);
        n->op = '!';
        n->a = parse_not(P);
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static struct jnode *parse_and(struct parser *P) {
    struct jnode *x = parse_not(P);
    while (is_name(peek(P), "and")) {
        struct jnode *n = node(P, JN_AND, next(P)->pos);
        n->a = x;
        n->b = parse_not(P);
        x = n;
    }
    return x;
}

static struct jnode *parse_or(struct parser *P) {
    struct jnode *x = parse_and(P);
    while (is_name(peek(P), "or")) {
        struct jnode *n = node(P, JN_OR, next(P)->pos);
        n->a = x;
        n->b = parse_and(P);
        x = n;
    }
    return x;
}

static struct jnode *parse_expr(struct parser *P, bool with_cond) {
    enter(P);
    struct jnode *x = parse_or(P);
    while (with_cond && is_name(peek(P), "if")) {
        struct jnode *c = node(P, JN_COND, next(P)->pos);
        c->a = x;
        c->b = parse_or(P);
        if (skip_name(P, "else")) c->c = parse_expr(P, true);
        x = c;
    }
    P->depth--;
    return x;
}

/* An expression, or several separated by commas (a tuple without parentheses). */
static struct jnode *parse_tuple_expr(struct parser *P) {
    struct jnode *x = parse_expr(P, true);
    if (!is_op(peek(P), ",")) return x;
    struct nodes ns = {0};
    nodes_push(P, &ns, x, NULL);
    while (skip_op(P, ",")) {
        struct tok *k = peek(P);
        if (k->type == TK_STMT_CLOSE || k->type == TK_VAR_CLOSE) break;
        nodes_push(P, &ns, parse_expr(P, true), NULL);
    }
    struct jnode *t = node(P, JN_TUPLE, x->pos);
    t->items = ns.v;
    t->n = ns.n;
    return t;
}

/* --- statements ---------------------------------------------------------------------------- */

static struct jnode *parse_body(struct parser *P, const char *const *ends);

/* Parses until "{% KEYWORD" with KEYWORD one of ends, and consumes "{% KEYWORD". Returns the
 * body; *end the keyword found. */
static struct jnode *parse_until(struct parser *P, const char *const *ends, const char **end) {
    struct jnode *body = parse_body(P, ends);
    next(P); /* {% */
    *end = next(P)->s;
    return body;
}

static bool at_end_keyword(struct parser *P, const char *const *ends) {
    if (peek(P)->type != TK_STMT_OPEN || !ends) return false;
    struct tok *k = peek2(P);
    if (k->type != TK_NAME) return false;
    for (int i = 0; ends[i]; i++)
        if (!strcmp(k->s, ends[i])) return true;
    return false;
}

/* {% for x in xs if cond %}, after "for". */
static struct jnode *parse_for(struct parser *P, uint32_t pos) {
    struct jnode *f = node(P, JN_FOR, pos);
    struct nodes targets = {0};
    bool paren = skip_op(P, "(");
    do {
        struct jnode *t = node(P, JN_NAME, peek(P)->pos);
        t->name = expect_name(P);
        nodes_push(P, &targets, t, NULL);
    } while (skip_op(P, ","));
    if (paren) expect_op(P, ")");
    f->items = targets.v;
    f->n = targets.n;
    if (!skip_name(P, "in")) parse_fail(P, "expected 'in' in for", NULL);
    f->a = parse_expr(P, false);
    if (skip_name(P, "if")) f->d = parse_expr(P, true);
    if (is_name(peek(P), "recursive")) parse_fail(P, "recursive loops are not supported", NULL);
    expect_stmt_close(P);
    static const char *const ends[] = {"else", "endfor", NULL};
    static const char *const ends2[] = {"endfor", NULL};
    const char *end;
    f->b = parse_until(P, ends, &end);
    expect_stmt_close(P);
    if (!strcmp(end, "else")) {
        f->c = parse_until(P, ends2, &end);
        expect_stmt_close(P);
    }
    return f;
}

/* {% if %} after "if" or "elif". */
static struct jnode *parse_if(struct parser *P, uint32_t pos) {
    enter(P); /* each elif nests one level deeper */
    struct jnode *n = node(P, JN_IF, pos);
    n->a = parse_expr(P, true);
    expect_stmt_close(P);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const ends2[] = {"endif", NULL};
    const char *end;
    n->b = parse_until(P, ends, &end);
    if (!strcmp(end, "elif")) {
        n->c = parse_if(P, peek(P)->pos);
    } else if (!strcmp(end, "else")) {
        expect_stmt_close(P);
        n->c = parse_until(P, ends2, &end);
        expect_stmt_close(P);
    } else {
        expect_stmt_close(P);
    }
    P->depth--;
    return n;
}

/* "| f | g(x)" of a set or filter block: a FILTER chain whose innermost operand is NULL. */
static struct jnode *parse_filter_chain(struct parser *P, bool leading_bar) {
    struct jnode *x = NULL;
    if (!leading_bar || skip_op(P, "|")) {
        do x = parse_filter(P, x);
        while (skip_op(P, "|"));
    }
    return x;
}

static struct jnode *parse_set(struct parser *P, uint32_t pos) {
    struct jnode *target;
    struct tok *k = peek(P);
    const char *name = expect_name(P);
    if (skip_op(P, ".")) {
        target = node(P, JN_GETATTR, k->pos);
        target->a = node(P, JN_NAME, k->pos);
        target->a->name = name;
        target->name = expect_name(P);
    } else if (is_op(peek(P), ",")) {
        struct nodes ns = {0};
        struct jnode *t = node(P, JN_NAME, k->pos);
        t->name = name;
        nodes_push(P, &ns, t, NULL);
        while (skip_op(P, ",")) {
            t = node(P, JN_NAME, peek(P)->pos);
            t->name = expect_name(P);
            nodes_push(P, &ns, t, NULL);
        }
        target = node(P, JN_TUPLE, k->pos);
        target->items = ns.v;
        target->n = ns.n;
    } else {
        target = node(P, JN_NAME, k->pos);
        target->name = name;
    }
    if (skip_op(P, "=")) {
        struct jnode *n = node(P, JN_SET, pos);
        n->a = target;
        n->b = parse_tuple_expr(P);
        expect_stmt_close(P);
        return n;
    }
    if (target->kind == JN_TUPLE) parse_fail(P, "a set block assigns one name", NULL);
    struct jnode *n = node(P, JN_SETBLOCK, pos);
    n->a = target;
    n->c = parse_filter_chain(P, true);
    expect_stmt_close(P);
    static const char *const ends[] = {"endset", NULL};
    const char *end;
    n->b = parse_until(P, ends, &end);
    expect_stmt_close(P);
    return n;
}

static struct jnode *parse_macro(struct parser *P, uint32_t pos) {
    struct jnode *m = node(P, JN_MACRO, pos);
    m->name = expect_name(P);
    struct nodes params = {0}, defs = {0};
    expect_op(P, "(");
    while (!is_op(peek(P), ")")) {
        if (params.n) {
            expect_op(P, ",");
            if (is_op(peek(P), ")")) break;
        }
        struct jnode *p = node(P, JN_NAME, peek(P)->pos);
        p->name = expect_name(P);
        nodes_push(P, &params, p, NULL);
        nodes_push(P, &defs, skip_op(P, "=") ? parse_expr(P, true) : NULL, NULL);
    }
    expect_op(P, ")");
    expect_stmt_close(P);
    m->items = params.v;
    m->defs = defs.v;
    m->n = params.n;
    static const char *const ends[] = {"endmacro", NULL};
    const char *end;
    m->b = parse_until(P, ends, &end);
    if (peek(P)->type == TK_NAME) next(P); /* {% endmacro name %} */
    expect_stmt_close(P);
    return m;
}

static struct jnode *parse_statement(struct parser *P) {
    uint32_t pos = next(P)->pos; /* {% */
    struct tok *k = next(P);
    if (k->type != TK_NAME) {
        P->i--;
        parse_fail(P, "expected a statement name", NULL);
    }
    const char *kw = k->s;
    const char *end;
    if (!strcmp(kw, "if")) return parse_if(P, pos);
    if (!strcmp(kw, "for")) return parse_for(P, pos);
    if (!strcmp(kw, "set")) return parse_set(P, pos);
    if (!strcmp(kw, "macro")) return parse_macro(P, pos);
    if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
        expect_stmt_close(P);
        return node(P, kw[0] == 'b' ? JN_BREAK : JN_CONTINUE, pos);
    }
    if (!strcmp(kw, "do")) {
        struct jnode *n = node(P, JN_DO, pos);
        n->a = parse_tuple_expr(P);
        expect_stmt_close(P);
        return n;
    }
    if (!strcmp(kw, "filter")) {
        struct jnode *n = node(P, JN_FILTERBLOCK, pos);
        n->c = parse_filter_chain(P, false);
        expect_stmt_close(P);
        static const char *const ends[] = {"endfilter", NULL};
        n->b = parse_until(P, ends, &end);
        expect_stmt_close(P);
        return n;
    }
    if (!strcmp(kw, "call")) {
        struct jnode *n = node(P, JN_CALLBLOCK, pos);
        if (is_op(peek(P), "(")) parse_fail(P, "call blocks with arguments are not supported", NULL);
        n->a = parse_expr(P, true);
        if (n->a->kind != JN_CALL) parse_fail(P, "expected a macro call after 'call'", NULL);
        expect_stmt_close(P);
        static const char *const ends[] = {"endcall", NULL};
        n->b = parse_until(P, ends, &end);
        expect_stmt_close(P);
        return n;
    }
    if (!strcmp(kw, "generation")) { /* marks the assistant's text for training tools: no effect */
        expect_stmt_close(P);
        static const char *const ends[] = {"endgeneration", NULL};
        struct jnode *body = parse_until(P, ends, &end);
        expect_stmt_close(P);
        return body;
    }
    P->i--;
    parse_fail(P, "unknown or unexpected statement '%s'", kw);
}

static struct jnode *parse_body(struct parser *P, const char *const *ends) {
    enter(P);
    struct jnode *body = node(P, JN_BODY, peek(P)->pos);
    struct nodes ns = {0};
    for (;;) {
        struct tok *k = peek(P);
        if (k->type == TK_EOF) {
            if (ends) parse_fail(P, "missing {%% %s %%}", ends[0] && ends[1] ? ends[1] : ends[0]);
            break;
        }
        if (k->type == TK_TEXT) {
            next(P);
            struct jnode *t = node(P, JN_TEXT, k->pos);
            t->lit = jv_strn(k->s, k->n);
            nodes_push(P, &ns, t, NULL);
        } else if (k->type == TK_VAR_OPEN) {
            next(P);
            struct jnode *o = node(P, JN_OUTPUT, k->pos);
            o->a = parse_tuple_expr(P);
            if (peek(P)->type != TK_VAR_CLOSE) parse_fail(P, "expected the end of the tag '}}'", NULL);
            next(P);
            nodes_push(P, &ns, o, NULL);
        } else if (k->type == TK_STMT_OPEN) {
            if (at_end_keyword(P, ends)) break;
            nodes_push(P, &ns, parse_statement(P), NULL);
        } else {
            parse_fail(P, "unexpected token", NULL);
        }
    }
    body->items = ns.v;
    body->n = ns.n;
    P->depth--;
    return body;
}

void jinja_parse_into(struct jinja_template *t, const char *text, size_t len) {
    struct jarena *a = &t->arena;
    /* normalize line endings; drop one trailing newline */
    char *src = ja_alloc(a, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\r') {
            src[n++] = '\n';
            if (i + 1 < len && text[i + 1] == '\n') i++;
        } else {
            src[n++] = text[i];
        }
    }
    if (n > 0 && src[n - 1] == '\n') n--;
    src[n] = '\0';
    if (n > UINT32_MAX) jfail(a->fail, -ERR_TOOBIG, "template longer than 4 GiB");
    t->src = src;
    t->src_len = n;
    struct lexer L = {.t = t, .a = a, .src = src, .n = n};
    lex(&L);
    struct parser P = {.t = t, .a = a, .tk = L.tk};
    t->root = parse_body(&P, NULL);
}
