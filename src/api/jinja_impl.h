/* jinja_impl.h: the inside of the Jinja engine (jinja.h), shared by its three files:
 * jinja_value.c (the arena, values, printing, JSON in and out), jinja_parse.c (template text ->
 * syntax tree) and jinja.c (rendering, filters, tests, methods). Nothing outside them includes it.
 *
 * Memory: everything a parse or a render makes lives in one arena (struct jarena), freed in one
 * go when the template (parse) or the render ends. No value is reference-counted or freed alone,
 * so values may share lists and dicts freely, as Python's do.
 *
 * Errors: a template error at any depth (a bad token, raise_exception, a runaway loop, the arena's
 * cap) ends the parse or render at once through jfail(), a longjmp to the jmp_buf the public entry
 * point set. This is safe because nothing between holds a resource the arena does not own; the
 * entry point turns the jump into a negative ERR_* return with the message in `why`.
 */
#ifndef UVLM_API_JINJA_IMPL_H
#define UVLM_API_JINJA_IMPL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* --- failure ------------------------------------------------------------------------------- */

struct jfail {
    jmp_buf jb;
    int code;          /* negative ERR_* */
    char msg[256];
};

/* Records code and the message, then jumps to f->jb. */
_Noreturn void jfail(struct jfail *f, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* --- arena --------------------------------------------------------------------------------- */

struct jblock;

struct jarena {
    struct jblock *blocks;   /* every block, newest first */
    char *cur;               /* free space of the newest small block */
    size_t left;
    size_t total;            /* bytes taken from malloc so far */
    size_t cap;              /* the most total may reach: past it, jfail(-ERR_TOOBIG) */
    struct jfail *fail;
};

void ja_init(struct jarena *a, size_t cap, struct jfail *fail);
void ja_free(struct jarena *a);
/* n bytes, 16-aligned, zeroed. Never NULL: jfail on exhaustion. */
void *ja_alloc(struct jarena *a, size_t n);
char *ja_strndup(struct jarena *a, const char *s, size_t n); /* NUL-terminated copy */

/* --- values -------------------------------------------------------------------------------- */

enum jtype {
    JT_UNDEF = 0,  /* a missing name, key or attribute: prints as "", is falsy */
    JT_NONE,
    JT_BOOL,
    JT_INT,
    JT_FLOAT,
    JT_STR,        /* UTF-8 bytes, not NUL-terminated; u.s with n bytes */
    JT_LIST,       /* lists and tuples */
    JT_DICT,       /* ordered (insertion) dicts; namespaces are dicts with ns set */
    JT_FUNC,       /* a macro, a builtin, or a method bound to its object */
};

struct jlist;
struct jdict;
struct jfunc;

struct jv {
    uint8_t t;     /* enum jtype */
    uint32_t n;    /* JT_STR: byte length */
    union {
        bool b;
        int64_t i;
        double f;
        const char *s;
        struct jlist *l;
        struct jdict *d;
        struct jfunc *fn;
    } u;
};

struct jlist {
    uint32_t n, cap;
    struct jv *v;
};

struct jkv {
    struct jv k, v;
};

struct jdict {
    uint32_t n, cap;
    bool ns;       /* a namespace(): attributes may be assigned */
    struct jkv *kv;
};

struct jrender;
struct jnode;
struct jargs;
struct jscope;

typedef struct jv (*jbuiltin_fn)(struct jrender *r, struct jv self, const struct jargs *a);

struct jfunc {
    const struct jnode *macro;  /* a macro's definition, or NULL for a builtin */
    jbuiltin_fn fn;             /* a builtin (a global function or a bound method) */
    struct jv self;             /* a method's object */
    const char *name;
    struct jscope *closure;     /* a macro's defining scope: its body reads names from there */
};

/* A call's arguments: n values, of which the last nkw have names kw[0..nkw). */
struct jargs {
    struct jv *v;
    const char **kw;
    uint32_t n, nkw;
};

static inline struct jv jv_undef(void) { struct jv v = {0}; return v; }
static inline struct jv jv_none(void) { struct jv v = {0}; v.t = JT_NONE; return v; }
static inline struct jv jv_bool(bool b) { struct jv v = {0}; v.t = JT_BOOL; v.u.b = b; return v; }
static inline struct jv jv_int(int64_t i) { struct jv v = {0}; v.t = JT_INT; v.u.i = i; return v; }
static inline struct jv jv_float(double f) { struct jv v = {0}; v.t = JT_FLOAT; v.u.f = f; return v; }
static inline struct jv jv_strn(const char *s, uint32_t n) {
    struct jv v = {0};
    v.t = JT_STR;
    v.u.s = s;
    v.n = n;
    return v;
}

struct jv jv_str_copy(struct jarena *a, const char *s, size_t n); /* jfail past 4 GiB */
struct jv jv_list_new(struct jarena *a, uint32_t cap);
struct jv jv_dict_new(struct jarena *a, uint32_t cap);
void jlist_push(struct jarena *a, struct jlist *l, struct jv v);
/* The value under key, or NULL. */
struct jv *jdict_get(const struct jdict *d, struct jv key);
struct jv *jdict_get_str(const struct jdict *d, const char *key);
/* Sets key to v (replacing, or appending in order). */
void jdict_set(struct jarena *a, struct jdict *d, struct jv key, struct jv v);
/* Removes key; true if it was there. */
bool jdict_del(struct jdict *d, struct jv key);

bool jv_truthy(struct jv v);
const char *jv_type_name(struct jv v);
/* Python ==, with ints, floats and bools compared as numbers. depth bounds nesting. */
bool jv_equal(struct jfail *f, struct jv a, struct jv b, int depth);
/* Python's <, -1/0/1; jfail for values of kinds that do not order. */
int jv_compare(struct jfail *f, struct jv a, struct jv b);

/* --- text buffers -------------------------------------------------------------------------- */

struct jbuf {
    char *p;
    size_t n, cap;
    size_t max;        /* the most bytes the buffer may hold: past it, jfail(-ERR_TOOBIG) */
    struct jarena *a;
};

void jbuf_init(struct jbuf *b, struct jarena *a, size_t max);
void jbuf_put(struct jbuf *b, const char *s, size_t n);
static inline void jbuf_putc(struct jbuf *b, char c) { jbuf_put(b, &c, 1); }
void jbuf_puts(struct jbuf *b, const char *s);
struct jv jbuf_value(struct jbuf *b); /* the text as a JT_STR (shares the buffer) */

/* str(v) as Jinja prints it: "" for undefined, None/True/False, Python's repr inside lists
 * and dicts, floats as Python prints them. */
void jv_write_str(struct jbuf *b, struct jv v, int depth);
/* repr(v): strings quoted as Python quotes them. */
void jv_write_repr(struct jbuf *b, struct jv v, int depth);
struct jv jv_to_str(struct jarena *a, struct jv v); /* str(v) as a JT_STR (v itself if one) */
void jv_write_float(struct jbuf *b, double f);

struct jjson_opts {
    const char *indent;      /* NULL: one line */
    const char *item_sep;    /* ", " on one line, "," indented */
    const char *key_sep;     /* ": " */
    bool ensure_ascii;       /* non-ASCII as \uXXXX */
    bool sort_keys;
};
/* json.dumps(v) with Python's formatting. */
void jv_write_json(struct jbuf *b, struct jv v, const struct jjson_opts *o, int depth);

/* jansson's value -> jinja value (values copied into the arena). */
struct json_t;
struct jv jv_from_json(struct jarena *a, const struct json_t *j, int depth);

/* Deepest nesting of values any recursive walk follows (printing, comparing, converting). */
#define JV_MAX_DEPTH 256

/* --- UTF-8 --------------------------------------------------------------------------------- */

/* Number of code points in s[0..n). */
size_t ju_count(const char *s, size_t n);
/* Byte offset of code point index cp (clamped to n). */
size_t ju_offset(const char *s, size_t n, size_t cp);

/* --- syntax tree --------------------------------------------------------------------------- */

enum jnkind {
    /* expressions */
    JN_LIT,       /* lit */
    JN_NAME,      /* name */
    JN_GETATTR,   /* a.name */
    JN_GETITEM,   /* a[b] */
    JN_SLICE,     /* a[b:c:d], each of b c d may be NULL */
    JN_CALL,      /* a(items...) with kw names */
    JN_FILTER,    /* a | name(items...); a NULL: the text of a filter or set block */
    JN_TEST,      /* a is [not] name(items...); op 1 when negated */
    JN_UNARY,     /* op ('!' not, '-', '+') a */
    JN_BINOP,     /* a op b: + - * / F(//) % P(**) ~ i(in) n(not in) = (==) ! (!=) < L(<=) > G(>=) */
    JN_AND,
    JN_OR,
    JN_COND,      /* a if b else c (c may be NULL) */
    JN_LIST,      /* [items] */
    JN_TUPLE,     /* (items) */
    JN_DICT,      /* {items[0]: items[1], ...} */
    /* statements */
    JN_BODY,      /* items, in order */
    JN_TEXT,      /* lit: text to copy */
    JN_OUTPUT,    /* {{ a }} */
    JN_IF,        /* if a: b else c (c may be NULL; elif is an IF in c) */
    JN_FOR,       /* for items(targets) in a [if d]: b else c */
    JN_SET,       /* set a (NAME, GETATTR or TUPLE of NAMEs) = b */
    JN_SETBLOCK,  /* set a [| filters c]: body b */
    JN_FILTERBLOCK, /* filter c: body b */
    JN_MACRO,     /* macro name(items: NAMEs; defaults in defs): b */
    JN_CALLBLOCK, /* call a (a CALL whose callee gets `caller`): b */
    JN_BREAK,
    JN_CONTINUE,
    JN_DO,        /* do a: evaluate, discard */
};

struct jnode {
    uint8_t kind;        /* enum jnkind */
    char op;
    uint32_t pos;         /* byte offset in the template's (normalized) text, for messages */
    struct jnode *a, *b, *c, *d;
    struct jnode **items;
    struct jnode **defs;  /* JN_MACRO: each parameter's default or NULL */
    const char **kw;      /* JN_CALL/FILTER/TEST: names of the last nkw items */
    uint32_t n, nkw;
    const char *name;
    struct jv lit;
};

/* A parsed template: its tree and the arena that holds it. */
struct jinja_template {
    struct jarena arena;
    struct jnode *root;
    const char *src;      /* the normalized text (line endings \n, one trailing \n dropped) */
    size_t src_len;
};

/* The 1-based line of byte offset pos in t's text. */
int jinja_line(const struct jinja_template *t, uint32_t pos);

/* Parses text into t->root (allocating in t->arena); errors through t->arena.fail. */
void jinja_parse_into(struct jinja_template *t, const char *text, size_t len);

/* Most nested expressions and blocks the parser accepts (each level is a C stack frame). */
#define JINJA_MAX_PARSE_DEPTH 200

#endif
