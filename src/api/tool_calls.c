/* tool_calls.c: the output parsers and call grammars of tool_calls.h. Every parser walks the
 * whole text again on each streaming feed (outputs are short next to the model's cost per
 * token); a partial walk leaves out what is not yet decided, so that each walk's result extends
 * the previous one and the stream sends the difference. */
#include "api/tool_calls.h"

#include "api/ids.h"
#include "api/json_schema.h"
#include "api/params.h"
#include "api/render.h"
#include "common/err.h"
#include "common/strbuf.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- dialects ---- */

static const char *const format_names[TOOL_FORMAT_COUNT_] = {
    "hermes", "qwen-xml", "seed-xml", "llama3", "mistral", "deepseek-r1", "deepseek-v3",
    "command-r7b", "granite", "functionary", "gpt-oss", "glm", "kimi", "firefunction", "functionary-v3.2",
};

const char *tool_format_name(enum tool_format f) { return f < TOOL_FORMAT_COUNT_ ? format_names[f] : "?"; }

bool tool_format_needs_special(enum tool_format f) {
    switch (f) {
    case TOOL_FORMAT_LLAMA3: case TOOL_FORMAT_MISTRAL: case TOOL_FORMAT_DEEPSEEK_R1: case TOOL_FORMAT_DEEPSEEK_V3:
    case TOOL_FORMAT_COMMAND_R7B: case TOOL_FORMAT_GRANITE: case TOOL_FORMAT_GPT_OSS: case TOOL_FORMAT_KIMI:
    case TOOL_FORMAT_SEED_XML:
        return true;
    default: return false;
    }
}

#define DS_CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALL_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"

const char *tool_format_trigger(enum tool_format f) {
    switch (f) {
    case TOOL_FORMAT_HERMES: case TOOL_FORMAT_QWEN_XML: case TOOL_FORMAT_GLM: return "<tool_call>";
    case TOOL_FORMAT_SEED_XML: return "<seed:tool_call>";
    case TOOL_FORMAT_LLAMA3: return "{\"name\"";
    case TOOL_FORMAT_MISTRAL: return "[TOOL_CALLS]";
    case TOOL_FORMAT_DEEPSEEK_R1: case TOOL_FORMAT_DEEPSEEK_V3: return DS_CALLS_BEGIN;
    case TOOL_FORMAT_COMMAND_R7B: return "<|START_ACTION|>";
    case TOOL_FORMAT_GRANITE: return "<|tool_call|>";
    case TOOL_FORMAT_FUNCTIONARY: return "<function=";
    case TOOL_FORMAT_GPT_OSS: return "<|channel|>commentary to=functions.";
    case TOOL_FORMAT_KIMI: return "<|tool_calls_section_begin|>";
    case TOOL_FORMAT_FIREFUNCTION: return " functools[";
    case TOOL_FORMAT_FUNCTIONARY_V32: return ">>>";
    default: return "<tool_call>";
    }
}

static bool has(const char *t, size_t len, const char *s) { return t && memmem(t, len, s, strlen(s)) != NULL; }

void tool_dialect_detect(const char *t, size_t len, enum chat_family native, struct tool_dialect *out) {
    enum tool_format f;
    if (has(t, len, "<|channel|>")) f = TOOL_FORMAT_GPT_OSS;
    else if (has(t, len, "<|tool_calls_section_begin|>")) f = TOOL_FORMAT_KIMI;
    else if (has(t, len, DS_CALL_BEGIN)) f = has(t, len, "```json") ? TOOL_FORMAT_DEEPSEEK_R1 : TOOL_FORMAT_DEEPSEEK_V3;
    else if (has(t, len, "<|START_ACTION|>")) f = TOOL_FORMAT_COMMAND_R7B;
    else if (has(t, len, "<|tool_call|>")) f = TOOL_FORMAT_GRANITE;
    else if (has(t, len, ">>>all")) f = TOOL_FORMAT_FUNCTIONARY_V32;
    else if (has(t, len, "<seed:tool_call>")) f = TOOL_FORMAT_SEED_XML;
    else if (has(t, len, "<arg_key>")) f = TOOL_FORMAT_GLM;
    else if (has(t, len, "<tool_call>") && has(t, len, "<function=")) f = TOOL_FORMAT_QWEN_XML;
    else if (has(t, len, "<tool_call>")) f = TOOL_FORMAT_HERMES;
    else if (has(t, len, "<function=")) f = TOOL_FORMAT_FUNCTIONARY;
    else if (has(t, len, "functools[")) f = TOOL_FORMAT_FIREFUNCTION;
    else if (has(t, len, "[TOOL_CALLS]")) f = TOOL_FORMAT_MISTRAL;
    else if (has(t, len, "<|python_tag|>") || (has(t, len, "<|start_header_id|>") && has(t, len, "tools")))
        f = TOOL_FORMAT_LLAMA3;
    else {
        switch (native) {
        case CHAT_LLAMA3: f = TOOL_FORMAT_LLAMA3; break;
        case CHAT_MISTRAL_V3: case CHAT_MISTRAL_V3_TEKKEN: case CHAT_MISTRAL_V7: f = TOOL_FORMAT_MISTRAL; break;
        case CHAT_DEEPSEEK3: f = TOOL_FORMAT_DEEPSEEK_R1; break;
        case CHAT_GRANITE: f = TOOL_FORMAT_GRANITE; break;
        case CHAT_COMMAND_R: f = TOOL_FORMAT_COMMAND_R7B; break;
        case CHAT_GLM4: f = TOOL_FORMAT_GLM; break;
        case CHAT_KIMI_K2: f = TOOL_FORMAT_KIMI; break;
        case CHAT_SEED_OSS: f = TOOL_FORMAT_SEED_XML; break;
        case CHAT_GPT_OSS: f = TOOL_FORMAT_GPT_OSS; break;
        default: f = TOOL_FORMAT_HERMES;
        }
    }
    out->format = f;
    out->think_open = out->think_close = NULL;
    if (f == TOOL_FORMAT_GPT_OSS) return; /* the analysis channel: the parser's own */
    if (has(t, len, "<|START_THINKING|>")) out->think_open = "<|START_THINKING|>", out->think_close = "<|END_THINKING|>";
    else if (has(t, len, "<seed:think>")) out->think_open = "<seed:think>", out->think_close = "</seed:think>";
    else if (has(t, len, "[THINK]")) out->think_open = "[THINK]", out->think_close = "[/THINK]";
    else if (has(t, len, "<think>") || (!t && native == CHAT_DEEPSEEK3))
        out->think_open = "<think>", out->think_close = "</think>";
}

/* ---- text helpers ---- */

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static size_t skip_ws(const char *t, size_t len, size_t p) {
    while (p < len && is_ws(t[p])) p++;
    return p;
}

/* s at t[p]: 1 it is there, 0 the text ends inside it, -1 something else is there. */
static int at(const char *t, size_t len, size_t p, const char *s) {
    size_t n = strlen(s);
    size_t k = len - p < n ? len - p : n;
    if (memcmp(t + p, s, k) != 0) return -1;
    return k == n ? 1 : 0;
}

/* The first of pats at or after p: its index and *where, or -1. */
static int find_first(const char *t, size_t len, size_t p, const char *const *pats, size_t *where) {
    int best = -1;
    size_t bw = len;
    for (int i = 0; pats[i]; i++) {
        const char *m = memmem(t + p, len - p, pats[i], strlen(pats[i]));
        if (m && (size_t)(m - t) < bw) bw = (size_t)(m - t), best = i;
    }
    *where = bw;
    return best;
}

/* The longest tail of t[p..len) that is the start of one of pats (held back: it may become one). */
static size_t hold_tail(const char *t, size_t len, size_t p, const char *const *pats) {
    size_t best = 0;
    for (int i = 0; pats[i]; i++) {
        size_t n = strlen(pats[i]);
        for (size_t k = n - 1 < len - p ? n - 1 : len - p; k > best; k--)
            if (memcmp(t + len - k, pats[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

/* The JSON value at t[p] (after white space): 1 with [*start, *end), 0 the text ends inside it
 * (*start set), -1 no JSON value starts there. Only the extent: the caller validates. */
static int json_extent(const char *t, size_t len, size_t p, size_t *start, size_t *end) {
    p = skip_ws(t, len, p);
    *start = p;
    if (p >= len) return 0;
    char c = t[p];
    if (c == '{' || c == '[') {
        int depth = 0;
        bool str = false, esc = false;
        for (size_t i = p; i < len; i++) {
            char ch = t[i];
            if (str) {
                if (esc) esc = false;
                else if (ch == '\\') esc = true;
                else if (ch == '"') str = false;
            } else if (ch == '"') str = true;
            else if (ch == '{' || ch == '[') depth++;
            else if (ch == '}' || ch == ']') {
                if (--depth == 0) {
                    *end = i + 1;
                    return 1;
                }
            }
        }
        return 0;
    }
    if (c == '"') {
        bool esc = false;
        for (size_t i = p + 1; i < len; i++) {
            if (esc) esc = false;
            else if (t[i] == '\\') esc = true;
            else if (t[i] == '"') {
                *end = i + 1;
                return 1;
            }
        }
        return 0;
    }
    if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n') {
        size_t i = p;
        while (i < len && (strchr("+-.eE", t[i]) || (t[i] >= '0' && t[i] <= '9') || (t[i] >= 'a' && t[i] <= 'z'))) i++;
        if (i == len) return 0;
        *end = i;
        return 1;
    }
    return -1;
}

static json_t *json_of(const char *t, size_t a, size_t b) {
    return json_loadb(t + a, b - a, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
}

/* ---- the parse in progress ---- */

struct pctx {
    const struct tool_parse_opts *o;
    const char *t;
    size_t len;
    bool partial;
    struct strbuf content, reasoning;
    struct tool_call *calls;
    size_t n, cap;
    bool oom;
};

static struct tool_call *add_call(struct pctx *c, const char *name, size_t name_len) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 4;
        struct tool_call *p = realloc(c->calls, cap * sizeof *p);
        if (!p) {
            c->oom = true;
            return NULL;
        }
        c->calls = p;
        c->cap = cap;
    }
    struct tool_call *k = &c->calls[c->n];
    memset(k, 0, sizeof *k);
    k->name = strndup(name, name_len);
    k->args = strdup("");
    if (!k->name || !k->args) {
        free(k->name);
        free(k->args);
        c->oom = true;
        return NULL;
    }
    c->n++;
    return k;
}

static void set_args(struct pctx *c, struct tool_call *k, const char *s, size_t n) {
    if (!k) return;
    char *a = strndup(s, n);
    if (!a) {
        c->oom = true;
        return;
    }
    free(k->args);
    k->args = a;
    k->args_len = n;
}

static void drop_calls(struct pctx *c, size_t keep) {
    while (c->n > keep) {
        c->n--;
        free(c->calls[c->n].name);
        free(c->calls[c->n].args);
    }
}

/* The result of parsing one block: how the walk goes on. */
enum { B_INVALID = -1, B_MORE = 0, B_DONE = 1 };

/* Object call {"name": N, "arguments"|"parameters": A, ...} at p. Partial: the call is added once
 * its name is known, with the arguments written so far. */
static int obj_call(struct pctx *c, size_t p, const char *name_key, size_t *end) {
    const char *t = c->t;
    size_t len = c->len;
    p = skip_ws(t, len, p);
    if (p >= len) return B_MORE;
    if (t[p] != '{') return B_INVALID;
    p++;
    size_t name_a = 0, name_b = 0, args_a = 0, args_b = 0;
    bool have_name = false, have_args = false, args_open = false;
    int rc = B_MORE;
    for (;;) {
        p = skip_ws(t, len, p);
        if (p >= len) break;
        if (t[p] == '}') {
            *end = p + 1;
            rc = B_DONE;
            break;
        }
        size_t ka, kb;
        int r = json_extent(t, len, p, &ka, &kb);
        if (r < 0 || t[ka] != '"') return B_INVALID;
        if (r == 0) break;
        p = skip_ws(t, len, kb);
        if (p >= len) break;
        if (t[p] != ':') return B_INVALID;
        size_t va, vb;
        r = json_extent(t, len, p + 1, &va, &vb);
        if (r < 0) return B_INVALID;
        bool is_name = kb - ka == strlen(name_key) + 2 && memcmp(t + ka + 1, name_key, kb - ka - 2) == 0;
        bool is_args = (kb - ka == 11 && memcmp(t + ka, "\"arguments\"", 11) == 0) ||
                       (kb - ka == 12 && memcmp(t + ka, "\"parameters\"", 12) == 0);
        if (r == 0) {
            if (is_args && va < len) args_a = va, args_open = true;
            break;
        }
        if (is_name) name_a = va, name_b = vb, have_name = true;
        if (is_args) args_a = va, args_b = vb, have_args = true;
        p = skip_ws(t, len, vb);
        if (p >= len) break;
        if (t[p] == ',') p++;
        else if (t[p] != '}') return B_INVALID;
    }
    if (rc == B_DONE && (!have_name || !(have_args || strcmp(name_key, "name") == 0))) return B_INVALID;
    if (!have_name) return rc == B_DONE ? B_INVALID : B_MORE;
    json_t *nv = json_of(t, name_a, name_b);
    if (!json_is_string(nv)) {
        json_decref(nv);
        return B_INVALID;
    }
    struct tool_call *k = add_call(c, json_string_value(nv), json_string_length(nv));
    json_decref(nv);
    if (have_args) {
        if (t[args_a] == '"') { /* arguments given as a JSON string */
            json_t *s = json_of(t, args_a, args_b);
            if (s && json_is_string(s)) set_args(c, k, json_string_value(s), json_string_length(s));
            json_decref(s);
        } else if (t[args_a] == '{') {
            json_t *v = json_of(t, args_a, args_b);
            if (!v) return B_INVALID;
            json_decref(v);
            set_args(c, k, t + args_a, args_b - args_a);
        } else
            return B_INVALID;
    } else if (args_open && t[args_a] == '{') {
        set_args(c, k, t + args_a, len - args_a);
    } else if (rc == B_DONE) {
        set_args(c, k, "{}", 2);
    }
    return rc;
}

/* [obj, obj, ...] at p. */
static int array_calls(struct pctx *c, size_t p, const char *name_key, size_t *end) {
    const char *t = c->t;
    size_t len = c->len;
    p = skip_ws(t, len, p);
    if (p >= len) return B_MORE;
    if (t[p] != '[') return B_INVALID;
    p++;
    for (;;) {
        p = skip_ws(t, len, p);
        if (p >= len) return B_MORE;
        if (t[p] == ']') {
            *end = p + 1;
            return B_DONE;
        }
        size_t e;
        int r = obj_call(c, p, name_key, &e);
        if (r != B_DONE) return r;
        p = skip_ws(t, len, e);
        if (p >= len) return B_MORE;
        if (t[p] == ',') p++;
        else if (t[p] != ']') return B_INVALID;
    }
}

/* The JSON object arguments at p for call k: B_DONE with *end, B_MORE (what is there so far is
 * set), B_INVALID. */
static int json_args(struct pctx *c, struct tool_call *k, size_t p, size_t *end) {
    size_t a, b;
    int r = json_extent(c->t, c->len, p, &a, &b);
    if (r < 0 || (a < c->len && c->t[a] != '{')) return B_INVALID;
    if (r == 0) {
        if (a < c->len) set_args(c, k, c->t + a, c->len - a);
        return B_MORE;
    }
    json_t *v = json_of(c->t, a, b);
    if (!v) return B_INVALID;
    json_decref(v);
    set_args(c, k, c->t + a, b - a);
    *end = b;
    return B_DONE;
}

/* A literal s at p after white space: B_DONE with *end, B_MORE, B_INVALID. At the end of a complete
 * text a missing closer is forgiven when forgive. */
static int expect(struct pctx *c, size_t p, const char *s, size_t *end, bool forgive) {
    p = skip_ws(c->t, c->len, p);
    int r = p >= c->len ? 0 : at(c->t, c->len, p, s);
    if (r == 1) {
        *end = p + strlen(s);
        return B_DONE;
    }
    if (r == 0 && !c->partial && forgive) {
        *end = c->len;
        return B_DONE;
    }
    return r == 0 ? B_MORE : B_INVALID;
}

/* Text up to stop from p: B_DONE with [p, *stop_at) and *end past stop, B_MORE, B_INVALID when
 * the text runs past max bytes without it. */
static int until(struct pctx *c, size_t p, const char *stop, size_t max, size_t *stop_at, size_t *end) {
    const char *m = memmem(c->t + p, c->len - p, stop, strlen(stop));
    if (!m) return c->len - p > max ? B_INVALID : B_MORE;
    *stop_at = (size_t)(m - c->t);
    *end = *stop_at + strlen(stop);
    return (size_t)(m - c->t) - p > max ? B_INVALID : B_DONE;
}

/* ---- XML parameters -> a JSON object ---- */

/* The value text of parameter key of tool name as JSON into b. */
static void xml_value(struct pctx *c, const char *name, const char *key, size_t key_len, const char *v, size_t n,
                      struct strbuf *b) {
    bool string = false;
    const json_t *tools = c->o->tool_defs;
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const char *fname = json_string_value(json_object_get(fn, "name"));
        if (!fname || strcmp(fname, name) != 0) continue;
        const json_t *props = json_object_get(json_object_get(fn, "parameters"), "properties");
        char kz[128];
        snprintf(kz, sizeof kz, "%.*s", (int)key_len, key);
        const json_t *ty = json_object_get(json_object_get(props, kz), "type");
        string = json_is_string(ty) && strcmp(json_string_value(ty), "string") == 0;
    }
    json_t *j = string ? NULL : json_loadb(v, n, JSON_DECODE_ANY, NULL);
    if (!j) j = json_stringn(v, n);
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    if (!s) {
        c->oom = true;
        return;
    }
    strbuf_puts(b, s);
    free(s);
}

static void xml_param(struct pctx *c, struct strbuf *args, const char *fname, const char *k, size_t kn, const char *v,
                      size_t vn) {
    /* one newline each side is the syntax's, not the value's */
    if (vn && v[0] == '\n') v++, vn--;
    if (vn && v[vn - 1] == '\n') vn--;
    strbuf_puts(args, args->n > 1 ? ", " : "");
    json_t *key = json_stringn(k, kn);
    char *ks = key ? json_dumps(key, JSON_ENCODE_ANY) : NULL;
    json_decref(key);
    if (!ks) {
        c->oom = true;
        return;
    }
    strbuf_puts(args, ks);
    free(ks);
    strbuf_puts(args, ": ");
    xml_value(c, fname, k, kn, v, vn, args);
}

/* <function=N> (<parameter=K>V</parameter>)* </function> at p. */
static int xml_function(struct pctx *c, size_t p, size_t *end) {
    size_t q, e;
    int r = expect(c, p, "<function=", &p, false);
    if (r != B_DONE) return r;
    if ((r = until(c, p, ">", 256, &q, &e)) != B_DONE) return r;
    struct tool_call *k = add_call(c, c->t + p, q - p);
    if (!k) return B_INVALID;
    struct strbuf args = {0};
    strbuf_puts(&args, "{");
    p = e;
    int rc;
    for (;;) {
        size_t s = skip_ws(c->t, c->len, p);
        if (s >= c->len) {
            rc = B_MORE;
            break;
        }
        if (at(c->t, c->len, s, "</function>") == 1) {
            strbuf_puts(&args, "}");
            *end = s + strlen("</function>");
            rc = B_DONE;
            break;
        }
        if ((r = expect(c, s, "<parameter=", &p, false)) != B_DONE) {
            rc = at(c->t, c->len, s, "</function>") == 0 ? B_MORE : r;
            break;
        }
        size_t kq;
        if ((r = until(c, p, ">", 256, &kq, &e)) != B_DONE) {
            rc = r;
            break;
        }
        size_t vq, ve;
        if ((r = until(c, e, "</parameter>", (size_t)-1, &vq, &ve)) != B_DONE) {
            rc = r;
            break;
        }
        xml_param(c, &args, k->name, c->t + p, kq - p, c->t + e, vq - e);
        p = ve;
    }
    if (rc == B_MORE && !c->partial) rc = B_INVALID;
    if (rc != B_INVALID) set_args(c, k, args.s ? args.s : "", args.n);
    if (args.oom) c->oom = true;
    free(args.s);
    return rc;
}

/* ---- the call blocks of each syntax: at p, just after the opener ---- */

/* <function=...> blocks up to close. */
static int xml_block(struct pctx *c, size_t p, const char *close, size_t *end) {
    for (;;) {
        size_t e = c->len;
        int r = xml_function(c, p, &e);
        if (r != B_DONE) return r;
        size_t s = skip_ws(c->t, c->len, e);
        if (s < c->len && at(c->t, c->len, s, "<function=") == 1) {
            p = s;
            continue;
        }
        return expect(c, e, close, end, true);
    }
}

static int block(struct pctx *c, int which, size_t p, size_t *end) {
    enum tool_format f = c->o->dialect->format;
    const char *t = c->t;
    size_t len = c->len, q, e;
    int r;
    switch (f) {
    case TOOL_FORMAT_HERMES: {
        size_t s = skip_ws(t, len, p);
        if (s < len && t[s] == '<') /* the XML form some models write inside <tool_call> */
            return at(t, len, s, "<function=") < 0 ? B_INVALID : xml_block(c, s, "</tool_call>", end);
        if ((r = obj_call(c, p, "name", &e)) != B_DONE) return r;
        return expect(c, e, "</tool_call>", end, true);
    }
    case TOOL_FORMAT_QWEN_XML:
        return xml_block(c, p, "</tool_call>", end);
    case TOOL_FORMAT_SEED_XML:
        return xml_block(c, p, "</seed:tool_call>", end);
    case TOOL_FORMAT_GLM: {
        p = skip_ws(t, len, p);
        size_t n0 = p;
        while (p < len && t[p] != '\n' && t[p] != '<') p++;
        if (p >= len) return c->partial ? B_MORE : B_INVALID;
        if (p == n0) return B_INVALID;
        struct tool_call *k = add_call(c, t + n0, p - n0);
        if (!k) return B_INVALID;
        struct strbuf args = {0};
        strbuf_puts(&args, "{");
        int rc;
        for (;;) {
            size_t s = skip_ws(t, len, p);
            if (s >= len) {
                rc = B_MORE;
                break;
            }
            if (at(t, len, s, "</tool_call>") == 1) {
                strbuf_puts(&args, "}");
                *end = s + strlen("</tool_call>");
                rc = B_DONE;
                break;
            }
            size_t kq, vq, ve;
            if ((r = expect(c, s, "<arg_key>", &p, false)) != B_DONE ||
                (r = until(c, p, "</arg_key>", 256, &kq, &e)) != B_DONE) {
                rc = at(t, len, s, "</tool_call>") == 0 ? B_MORE : r;
                break;
            }
            size_t va;
            if ((r = expect(c, e, "<arg_value>", &va, false)) != B_DONE ||
                (r = until(c, va, "</arg_value>", (size_t)-1, &vq, &ve)) != B_DONE) {
                rc = r;
                break;
            }
            xml_param(c, &args, k->name, t + p, kq - p, t + va, vq - va);
            p = ve;
        }
        if (rc == B_MORE && !c->partial) rc = B_INVALID;
        if (rc != B_INVALID) set_args(c, k, args.s ? args.s : "", args.n);
        free(args.s);
        return rc;
    }
    case TOOL_FORMAT_LLAMA3: /* after <|python_tag|>: calls separated by ';' */
        for (;;) {
            if ((r = obj_call(c, p, "name", &e)) != B_DONE) return r;
            size_t s = skip_ws(t, len, e);
            if (s < len && t[s] == ';') {
                p = s + 1;
                continue;
            }
            *end = e;
            return B_DONE;
        }
    case TOOL_FORMAT_MISTRAL: {
        size_t s = skip_ws(t, len, p);
        if (s >= len) return B_MORE;
        if (t[s] == '[') return array_calls(c, s, "name", end);
        if ((r = until(c, s, "[ARGS]", 256, &q, &e)) != B_DONE) return r;
        size_t nb = q;
        const char *ci = memmem(t + s, q - s, "[CALL_ID]", 9);
        if (ci) nb = (size_t)(ci - t);
        struct tool_call *k = add_call(c, t + s, nb - s);
        if (!k) return B_INVALID;
        return json_args(c, k, e, end);
    }
    case TOOL_FORMAT_DEEPSEEK_R1:
    case TOOL_FORMAT_DEEPSEEK_V3:
        for (;;) {
            size_t s = skip_ws(t, len, p);
            if (s >= len) return c->partial ? B_MORE : (*end = len, B_DONE);
            if (at(t, len, s, DS_CALLS_END) == 1) {
                *end = s + strlen(DS_CALLS_END);
                return B_DONE;
            }
            if (which == 0) { /* after the calls' opener, each call has its own */
                if ((r = expect(c, s, DS_CALL_BEGIN, &s, false)) != B_DONE)
                    return r == B_MORE || at(t, len, s, DS_CALLS_END) == 0 ? B_MORE : r;
            }
            which = 0;
            if ((r = until(c, s, DS_SEP, 256, &q, &e)) != B_DONE) return r;
            struct tool_call *k;
            size_t a = e;
            if (q - s == 8 && memcmp(t + s, "function", 8) == 0) {
                size_t nl;
                if ((r = until(c, e, "\n", 256, &nl, &a)) != B_DONE) return r;
                k = add_call(c, t + e, nl - e);
                size_t s2 = skip_ws(t, len, a);
                int f3 = s2 < len ? at(t, len, s2, "```json") : 0;
                if (f3 == 0 && c->partial) return B_MORE;
                if (f3 == 1) a = s2 + 7;
            } else
                k = add_call(c, t + s, q - s);
            if (!k) return B_INVALID;
            if ((r = json_args(c, k, a, &e)) != B_DONE) return r;
            size_t s3 = skip_ws(t, len, e);
            int f4 = s3 < len ? at(t, len, s3, "```") : 0;
            if (f4 == 0 && c->partial) return B_MORE;
            if (f4 == 1) e = s3 + 3;
            if ((r = expect(c, e, DS_CALL_END, &p, true)) != B_DONE) return r;
        }
    case TOOL_FORMAT_COMMAND_R7B:
        if ((r = array_calls(c, p, "tool_name", &e)) != B_DONE) return r;
        return expect(c, e, "<|END_ACTION|>", end, true);
    case TOOL_FORMAT_GRANITE:
        return array_calls(c, p, "name", end);
    case TOOL_FORMAT_FIREFUNCTION:
        return array_calls(c, p - 1, "name", end); /* the opener's '[' opens the array */
    case TOOL_FORMAT_FUNCTIONARY: {
        if ((r = until(c, p, ">", 256, &q, &e)) != B_DONE) return r;
        struct tool_call *k = add_call(c, t + p, q - p);
        if (!k) return B_INVALID;
        if ((r = json_args(c, k, e, &e)) != B_DONE) return r;
        return expect(c, e, "</function>", end, true);
    }
    case TOOL_FORMAT_KIMI:
        for (;;) {
            size_t s = skip_ws(t, len, p);
            if (s >= len) return c->partial ? B_MORE : (*end = len, B_DONE);
            if (at(t, len, s, "<|tool_calls_section_end|>") == 1) {
                *end = s + strlen("<|tool_calls_section_end|>");
                return B_DONE;
            }
            if ((r = expect(c, s, "<|tool_call_begin|>", &s, false)) != B_DONE)
                return r == B_MORE || at(t, len, s, "<|tool_calls_section_end|>") == 0 ? B_MORE : r;
            if ((r = until(c, s, "<|tool_call_argument_begin|>", 256, &q, &e)) != B_DONE) return r;
            size_t a = s, b = q;
            if (b - a > 10 && memcmp(t + a, "functions.", 10) == 0) a += 10;
            for (size_t i = b; i > a; i--)
                if (t[i - 1] == ':') {
                    b = i - 1;
                    break;
                }
            struct tool_call *k = add_call(c, t + a, b - a);
            if (!k) return B_INVALID;
            if ((r = json_args(c, k, e, &e)) != B_DONE) return r;
            if ((r = expect(c, e, "<|tool_call_end|>", &p, true)) != B_DONE) return r;
        }
    default: return B_INVALID;
    }
}

static const char *const *openers(enum tool_format f) {
    static const char *const hermes[] = {"<tool_call>", NULL};
    static const char *const seed[] = {"<seed:tool_call>", NULL};
    static const char *const llama3[] = {"<|python_tag|>", NULL};
    static const char *const mistral[] = {"[TOOL_CALLS]", NULL};
    static const char *const ds[] = {DS_CALLS_BEGIN, DS_CALL_BEGIN, NULL};
    static const char *const cr[] = {"<|START_ACTION|>", NULL};
    static const char *const granite[] = {"<|tool_call|>", NULL};
    static const char *const fn[] = {"<function=", NULL};
    static const char *const kimi[] = {"<|tool_calls_section_begin|>", NULL};
    static const char *const ff[] = {"functools[", NULL};
    switch (f) {
    case TOOL_FORMAT_SEED_XML: return seed;
    case TOOL_FORMAT_LLAMA3: return llama3;
    case TOOL_FORMAT_MISTRAL: return mistral;
    case TOOL_FORMAT_DEEPSEEK_R1: case TOOL_FORMAT_DEEPSEEK_V3: return ds;
    case TOOL_FORMAT_COMMAND_R7B: return cr;
    case TOOL_FORMAT_GRANITE: return granite;
    case TOOL_FORMAT_FUNCTIONARY: return fn;
    case TOOL_FORMAT_KIMI: return kimi;
    case TOOL_FORMAT_FIREFUNCTION: return ff;
    default: return hermes;
    }
}

/* Content with the markers a syntax wraps plain answers in removed. */
static void put_content(struct pctx *c, size_t a, size_t b) {
    if (c->o->dialect->format == TOOL_FORMAT_COMMAND_R7B) {
        static const char *const marks[] = {"<|START_RESPONSE|>", "<|END_RESPONSE|>", NULL};
        while (a < b) {
            size_t w;
            int i = find_first(c->t, b, a, marks, &w);
            if (i < 0) break;
            strbuf_put(&c->content, c->t + a, w - a);
            a = w + strlen(marks[i]);
        }
    }
    if (a < b) strbuf_put(&c->content, c->t + a, b - a);
}

/* Calls and content from p to the end. */
static void walk_calls(struct pctx *c, size_t p) {
    static const char *const no_ops[] = {NULL};
    const char *const *ops = c->o->tools ? openers(c->o->dialect->format) : no_ops;
    const char *t = c->t;
    size_t len = c->len;
    if (c->o->tools && c->o->dialect->format == TOOL_FORMAT_LLAMA3) { /* a whole-output JSON call */
        size_t s = skip_ws(t, len, p);
        if (s < len && t[s] == '{') {
            size_t keep = c->n, e;
            int r = block(c, 0, s, &e);
            if (r == B_MORE && c->partial) return;
            if (r == B_DONE) p = e;
            else drop_calls(c, keep);
        } else if (s >= len && c->partial)
            return;
    }
    while (p < len) {
        size_t w;
        int which = find_first(t, len, p, ops, &w);
        if (which < 0) {
            static const char *const marks[] = {"<|START_RESPONSE|>", "<|END_RESPONSE|>", NULL};
            size_t hold = c->partial ? hold_tail(t, len, p, ops) : 0;
            if (c->partial && c->o->dialect->format == TOOL_FORMAT_COMMAND_R7B) {
                size_t h2 = hold_tail(t, len, p, marks);
                if (h2 > hold) hold = h2;
            }
            put_content(c, p, len - hold);
            return;
        }
        put_content(c, p, w);
        size_t keep = c->n, e = len;
        int r = block(c, which, w + strlen(ops[which]), &e);
        if (r == B_MORE && !c->partial) r = B_INVALID;
        if (r == B_MORE) return; /* in progress */
        if (r == B_DONE) {
            p = e;
            continue;
        }
        drop_calls(c, keep); /* not a call: the opener is text */
        put_content(c, w, w + strlen(ops[which]));
        p = w + strlen(ops[which]);
    }
}

/* gpt-oss: <|channel|>NAME[ to=functions.F][ <|constrain|>json]<|message|>BODY(<|end|>|<|call|>|<|return|>)
 * segments, <|start|>assistant between them. */
static void walk_harmony(struct pctx *c) {
    static const char *const marks[] = {"<|channel|>", "<|start|>", NULL};
    static const char *const ends[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>", NULL};
    const char *t = c->t;
    size_t len = c->len, p = 0;
    while (p < len) {
        size_t w;
        int which = find_first(t, len, p, marks, &w);
        if (which < 0) {
            put_content(c, p, len - (c->partial ? hold_tail(t, len, p, marks) : 0));
            return;
        }
        put_content(c, p, w);
        p = w + strlen(marks[which]);
        if (which == 1) { /* <|start|>assistant */
            size_t e = p;
            while (e < len && t[e] != '<') e++;
            if (e >= len && c->partial) return;
            p = e;
            continue;
        }
        size_t hq, he;
        const char *hm = memmem(t + p, len - p, "<|message|>", 11);
        if (!hm) {
            if (!c->partial) put_content(c, w, len);
            return;
        }
        hq = (size_t)(hm - t);
        he = hq + 11;
        const char *to = memmem(t + p, hq - p, "to=functions.", 13);
        size_t be;
        int ei = find_first(t, len, he, ends, &be);
        size_t body_end = ei < 0 ? len - (c->partial ? hold_tail(t, len, he, ends) : 0) : be;
        if (to && c->o->tools) {
            size_t na = (size_t)(to - t) + 13, nb = na;
            while (nb < hq && t[nb] != ' ' && t[nb] != '<') nb++;
            struct tool_call *k = add_call(c, t + na, nb - na);
            size_t a = skip_ws(t, body_end, he), b = body_end;
            while (b > a && is_ws(t[b - 1])) b--;
            if (k && b > a) set_args(c, k, t + a, b - a);
        } else if (hq - p >= 8 && memcmp(t + p, "analysis", 8) == 0) {
            if (c->o->reasoning) strbuf_put(&c->reasoning, t + he, body_end - he);
            else put_content(c, w, body_end);
        } else
            put_content(c, he, body_end);
        if (ei < 0) return;
        p = be + (ei == 3 ? 0 : strlen(ends[ei]));
    }
}

/* functionary v3.2: the prompt ends with ">>>"; each ">>>"-separated part names its recipient on
 * its first line: "all" (text), or a function whose arguments follow as JSON. */
static void walk_recipients(struct pctx *c) {
    static const char *const sep[] = {">>>", NULL};
    const char *t = c->t;
    size_t len = c->len, p = 0;
    while (p < len) {
        size_t nl;
        const char *m = memchr(t + p, '\n', len - p);
        if (!m) { /* the recipient is still being written */
            if (!c->partial) put_content(c, p, len);
            return;
        }
        nl = (size_t)(m - t);
        size_t w, body = nl + 1;
        int next = find_first(t, len, body, sep, &w);
        size_t end = next < 0 ? len - (c->partial ? hold_tail(t, len, body, sep) : 0) : w;
        if ((nl - p == 3 && memcmp(t + p, "all", 3) == 0) || !c->o->tools) {
            put_content(c, nl - p == 3 && memcmp(t + p, "all", 3) == 0 ? body : p, end);
        } else {
            size_t keep = c->n, e;
            struct tool_call *k = add_call(c, t + p, nl - p);
            int r = k ? json_args(c, k, body, &e) : B_INVALID;
            if (r == B_MORE && c->partial) return;
            if (r != B_DONE || skip_ws(t, end, e) != end) { /* only the arguments in the part */
                drop_calls(c, keep);
                put_content(c, p, end);
            }
        }
        if (next < 0) return;
        p = w + 3;
    }
}

static void trim(struct strbuf *b, bool left, bool right) {
    if (!b->s) return;
    size_t a = 0, e = b->n;
    if (left)
        while (a < e && is_ws(b->s[a])) a++;
    if (right)
        while (e > a && is_ws(b->s[e - 1])) e--;
    memmove(b->s, b->s + a, e - a);
    b->n = e - a;
    b->s[b->n] = 0;
}

int tool_parse_text(const struct tool_parse_opts *o, const char *text, size_t len, bool partial,
                    struct tool_parse *out) {
    memset(out, 0, sizeof *out);
    struct pctx c = {.o = o, .t = text, .len = len, .partial = partial};
    const struct tool_dialect *d = o->dialect;
    size_t p = 0;
    bool had_think = false;
    if (d->format == TOOL_FORMAT_GPT_OSS) {
        walk_harmony(&c);
        had_think = c.reasoning.n > 0;
    } else if (d->format == TOOL_FORMAT_FUNCTIONARY_V32) {
        walk_recipients(&c);
    } else {
        if (d->think_open) {
            size_t rs = 0;
            bool inside = o->in_think;
            if (!inside) {
                size_t s = skip_ws(text, len, 0);
                int r = s < len ? at(text, len, s, d->think_open) : 0;
                if (r == 0 && partial) goto done; /* may still become the opening tag */
                if (r == 1) inside = true, rs = s + strlen(d->think_open);
            }
            if (inside) {
                had_think = true;
                const char *m = memmem(text + rs, len - rs, d->think_close, strlen(d->think_close));
                size_t re = m ? (size_t)(m - text) : len;
                if (!m && partial) {
                    const char *one[] = {d->think_close, NULL};
                    re = len - hold_tail(text, len, rs, one);
                }
                if (o->reasoning) strbuf_put(&c.reasoning, text + rs, re - rs);
                else strbuf_put(&c.content, text, m ? re + strlen(d->think_close) : re);
                if (!m) goto done;
                p = re + strlen(d->think_close);
            }
        }
        walk_calls(&c, p);
    }
done:
    if (c.reasoning.oom || c.content.oom || c.oom) {
        free(c.reasoning.s);
        free(c.content.s);
        drop_calls(&c, 0);
        free(c.calls);
        return -ERR_NOMEM;
    }
    trim(&c.reasoning, true, partial || true);
    if (had_think && o->reasoning) trim(&c.content, true, false);
    if (partial || c.n > 0) trim(&c.content, false, true);
    for (size_t i = 0; i < c.n; i++) api_random_id(c.calls[i].id, sizeof c.calls[i].id, "call_", 24);
    out->content = c.content.n || (!c.n && c.content.s) ? c.content.s : NULL;
    out->content_len = out->content ? c.content.n : 0;
    if (!out->content) free(c.content.s);
    if (!out->content && !c.n) out->content = strdup(""), out->content_len = 0;
    out->reasoning = had_think && o->reasoning ? (c.reasoning.s ? c.reasoning.s : strdup("")) : NULL;
    if (!out->reasoning) free(c.reasoning.s);
    out->reasoning_len = out->reasoning ? c.reasoning.n : 0;
    out->calls = c.calls;
    out->n_calls = c.n;
    return 0;
}

void tool_parse_free(struct tool_parse *r) {
    free(r->content);
    free(r->reasoning);
    for (size_t i = 0; i < r->n_calls; i++) {
        free(r->calls[i].name);
        free(r->calls[i].args);
    }
    free(r->calls);
    memset(r, 0, sizeof *r);
}

/* ---- streaming ---- */

void tool_stream_init(struct tool_stream *s, const struct tool_parse_opts *o) {
    memset(s, 0, sizeof *s);
    s->o = *o;
}

void tool_stream_free(struct tool_stream *s) {
    free(s->text);
    for (size_t i = 0; i < s->n_sent; i++) free(s->sent[i].name);
    free(s->sent);
    tool_parse_free(&s->last);
    free(s->deltas);
    memset(s, 0, sizeof *s);
}

/* What of now extends what was sent (sent bytes of it): the new tail, or nothing when the text
 * was taken back (a block that turned out not to be one). */
static const char *tail(const char *now, size_t now_len, size_t *sent, size_t *n) {
    *n = 0;
    if (!now || now_len <= *sent) return now ? now + now_len : "";
    *n = now_len - *sent;
    const char *r = now + *sent;
    *sent = now_len;
    return r;
}

int tool_stream_feed(struct tool_stream *s, const char *piece, size_t len, bool final, struct tool_delta *d) {
    memset(d, 0, sizeof *d);
    if (s->len + len + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->len + len + 1) cap *= 2;
        char *p = realloc(s->text, cap);
        if (!p) return -ERR_NOMEM;
        s->text = p;
        s->cap = cap;
    }
    memcpy(s->text + s->len, piece, len);
    s->len += len;
    s->text[s->len] = 0;
    tool_parse_free(&s->last);
    int rc = tool_parse_text(&s->o, s->text, s->len, !final, &s->last);
    if (rc < 0) return rc;
    struct tool_parse *r = &s->last;
    d->reasoning = tail(r->reasoning, r->reasoning_len, &s->reasoning_sent, &d->reasoning_len);
    d->content = tail(r->content, r->content_len, &s->content_sent, &d->content_len);
    if (d->content_len) s->content_started = true;
    if (r->n_calls > s->deltas_cap) {
        struct tool_call_delta *p = realloc(s->deltas, r->n_calls * sizeof *p);
        if (!p) return -ERR_NOMEM;
        s->deltas = p;
        s->deltas_cap = r->n_calls;
    }
    if (r->n_calls > s->sent_cap) {
        struct tool_call *p = realloc(s->sent, r->n_calls * sizeof *p);
        if (!p) return -ERR_NOMEM;
        s->sent = p;
        s->sent_cap = r->n_calls;
    }
    d->calls = s->deltas;
    for (size_t i = 0; i < r->n_calls; i++) {
        struct tool_call_delta *cd = &s->deltas[d->n_calls];
        memset(cd, 0, sizeof *cd);
        cd->index = (int)i;
        if (i >= s->n_sent) {
            struct tool_call *k = &s->sent[s->n_sent];
            memset(k, 0, sizeof *k);
            memcpy(k->id, r->calls[i].id, sizeof k->id);
            if (!(k->name = strdup(r->calls[i].name))) return -ERR_NOMEM;
            s->n_sent++;
            cd->id = k->id;
            cd->name = k->name;
        } else {
            memcpy(r->calls[i].id, s->sent[i].id, sizeof r->calls[i].id); /* the id the client has */
        }
        cd->args = tail(r->calls[i].args, r->calls[i].args_len, &s->sent[i].args_len, &cd->args_len);
        if (cd->id || cd->args_len) d->n_calls++;
    }
    return 0;
}

/* ---- grammars ---- */

/* GBNF text of tool k's parameters with every rule name prefixed "t<k>-" (root included), so
 * that several tools' rules live in one grammar. */
static int prefixed_schema(const json_t *schema, int k, struct strbuf *out, char *where, size_t where_len, char *why,
                           size_t why_len) {
    char *g;
    json_t *empty = NULL;
    if (!schema) schema = empty = json_pack("{s:s}", "type", "object");
    int rc = json_schema_to_grammar(schema, &g, where, where_len, why, why_len);
    json_decref(empty);
    if (rc < 0) return rc;
    for (const char *p = g; *p;) {
        char ch = *p;
        if (ch == '"') { /* a literal, escapes kept */
            const char *q = p + 1;
            while (*q && *q != '"') q += (*q == '\\' && q[1]) ? 2 : 1;
            if (*q) q++;
            strbuf_put(out, p, (size_t)(q - p));
            p = q;
        } else if (ch == '[') { /* a character class */
            const char *q = p + 1;
            while (*q && *q != ']') q += (*q == '\\' && q[1]) ? 2 : 1;
            if (*q) q++;
            strbuf_put(out, p, (size_t)(q - p));
            p = q;
        } else if (ch == '#') {
            const char *q = strchr(p, '\n');
            if (!q) q = p + strlen(p);
            strbuf_put(out, p, (size_t)(q - p));
            p = q;
        } else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_') {
            const char *q = p;
            while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '_' ||
                   *q == '-')
                q++;
            strbuf_printf(out, "t%d-%.*s", k, (int)(q - p), p);
            p = q;
        } else {
            strbuf_put(out, p, 1);
            p++;
        }
    }
    free(g);
    return 0;
}

static void lit(struct strbuf *b, const char *s) {
    strbuf_puts(b, "\"");
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"') strbuf_puts(b, "\\\"");
        else if (ch == '\\') strbuf_puts(b, "\\\\");
        else if (ch == '\n') strbuf_puts(b, "\\n");
        else if (ch == '\t') strbuf_puts(b, "\\t");
        else if (ch < 0x20) strbuf_printf(b, "\\x%02X", ch);
        else strbuf_put(b, (const char *)&ch, 1);
    }
    strbuf_puts(b, "\"");
}

/* The JSON text of a name (quotes included) as a GBNF literal. */
static void json_name_lit(struct strbuf *b, const char *name) {
    json_t *j = json_string(name);
    char *s = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    if (!s) {
        b->oom = true;
        return;
    }
    lit(b, s);
    free(s);
}

/* call-K ::= the syntax of one call of tool K (name, args rule t<K>-root). */
static void call_rule(struct strbuf *g, enum tool_format f, int k, const char *name, const json_t *params) {
    char args[32];
    snprintf(args, sizeof args, "t%d-root", k);
    strbuf_printf(g, "call-%d ::= ", k);
    switch (f) {
    case TOOL_FORMAT_QWEN_XML:
    case TOOL_FORMAT_SEED_XML:
    case TOOL_FORMAT_GLM: {
        const json_t *props = json_object_get(params, "properties");
        const char *key;
        const json_t *v;
        bool xml = f != TOOL_FORMAT_GLM;
        if (f == TOOL_FORMAT_GLM) {
            lit(g, name);
            strbuf_puts(g, " \"\\n\"");
        } else {
            lit(g, "<function=");
            strbuf_puts(g, " ");
            lit(g, name);
            strbuf_puts(g, " \">\\n\"");
        }
        strbuf_printf(g, " param-%d*", k);
        strbuf_puts(g, xml ? " \"</function>\\n\"\n" : "\n");
        strbuf_printf(g, "param-%d ::= ", k);
        if (xml) lit(g, "<parameter=");
        else lit(g, "<arg_key>");
        strbuf_puts(g, " (");
        int n = 0;
        json_object_foreach((json_t *)props, key, v) {
            strbuf_puts(g, n++ ? " | " : "");
            lit(g, key);
        }
        if (!n) strbuf_puts(g, "[a-zA-Z0-9_]+");
        strbuf_puts(g, ")");
        strbuf_puts(g, xml ? " \">\\n\" pval \"\\n</parameter>\\n\"\n" : " \"</arg_key>\\n<arg_value>\" pval \"</arg_value>\\n\"\n");
        return;
    }
    case TOOL_FORMAT_LLAMA3:
        strbuf_puts(g, "\"{\\\"name\\\": \" ");
        json_name_lit(g, name);
        strbuf_printf(g, " \", \\\"parameters\\\": \" %s \"}\"\n", args);
        return;
    case TOOL_FORMAT_COMMAND_R7B:
        strbuf_puts(g, "\"{\\\"tool_call_id\\\": \\\"\" [0-9]{1,3} \"\\\", \\\"tool_name\\\": \" ");
        json_name_lit(g, name);
        strbuf_printf(g, " \", \\\"parameters\\\": \" %s \"}\"\n", args);
        return;
    case TOOL_FORMAT_MISTRAL:
    case TOOL_FORMAT_GRANITE:
    case TOOL_FORMAT_FIREFUNCTION:
    case TOOL_FORMAT_HERMES:
        if (f == TOOL_FORMAT_HERMES) strbuf_puts(g, "\"<tool_call>\\n\" ");
        strbuf_puts(g, "\"{\\\"name\\\": \" ");
        json_name_lit(g, name);
        strbuf_printf(g, " \", \\\"arguments\\\": \" %s \"}\"", args);
        strbuf_puts(g, f == TOOL_FORMAT_HERMES ? " \"\\n</tool_call>\"\n" : "\n");
        return;
    case TOOL_FORMAT_DEEPSEEK_R1:
        lit(g, DS_CALL_BEGIN "function" DS_SEP);
        strbuf_puts(g, " ");
        lit(g, name);
        strbuf_printf(g, " \"\\n```json\\n\" %s \"\\n```\" ", args);
        lit(g, DS_CALL_END);
        strbuf_puts(g, "\n");
        return;
    case TOOL_FORMAT_DEEPSEEK_V3:
        lit(g, DS_CALL_BEGIN);
        strbuf_puts(g, " ");
        lit(g, name);
        strbuf_puts(g, " ");
        lit(g, DS_SEP);
        strbuf_printf(g, " %s ", args);
        lit(g, DS_CALL_END);
        strbuf_puts(g, "\n");
        return;
    case TOOL_FORMAT_FUNCTIONARY_V32:
        lit(g, name);
        strbuf_printf(g, " \"\\n\" %s\n", args);
        return;
    case TOOL_FORMAT_FUNCTIONARY:
        lit(g, "<function=");
        strbuf_puts(g, " ");
        lit(g, name);
        strbuf_printf(g, " \">\" %s \"</function>\"\n", args);
        return;
    case TOOL_FORMAT_GPT_OSS:
        lit(g, "<|channel|>commentary to=functions.");
        strbuf_puts(g, " ");
        lit(g, name);
        strbuf_printf(g, " \" <|constrain|>json<|message|>\" %s\n", args);
        return;
    case TOOL_FORMAT_KIMI:
        lit(g, "<|tool_call_begin|>functions.");
        strbuf_puts(g, " ");
        lit(g, name);
        strbuf_printf(g, " \":\" [0-9]{1,3} \"<|tool_call_argument_begin|>\" %s \"<|tool_call_end|>\"\n", args);
        return;
    default: return;
    }
}

int tool_grammar(const struct tool_dialect *d, const json_t *tools, const char *only_name, bool parallel, bool lazy,
                 bool in_think, char **out, char *where, size_t where_len, char *why, size_t why_len) {
    *out = NULL;
    enum tool_format f = d->format;
    struct strbuf g = {0}, rules = {0};
    int n = 0, rc = 0;
    strbuf_puts(&g, "call ::= ");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name || (only_name && strcmp(name, only_name) != 0)) continue;
        const json_t *params = json_object_get(fn, "parameters");
        bool xml = f == TOOL_FORMAT_QWEN_XML || f == TOOL_FORMAT_SEED_XML || f == TOOL_FORMAT_GLM;
        if (!xml && (rc = prefixed_schema(params, (int)i, &rules, where, where_len, why, why_len)) < 0) {
            if (rc == -ERR_INVAL) {
                char w[96];
                snprintf(w, sizeof w, "%s", where);
                snprintf(where, where_len, "tools[%zu].function.parameters%s%s", i, w[0] ? "." : "", w);
            }
            break;
        }
        call_rule(&rules, f, (int)i, name, params);
        strbuf_printf(&g, "%scall-%d", n++ ? " | " : "", (int)i);
    }
    if (rc == 0 && n == 0) {
        snprintf(where, where_len, "tool_choice");
        if (only_name) snprintf(why, why_len, "no tool is named \"%.64s\"", only_name);
        else snprintf(why, why_len, "no tool to call");
        rc = -ERR_INVAL;
    }
    if (rc < 0) {
        free(g.s);
        free(rules.s);
        return rc;
    }
    strbuf_puts(&g, "\npval ::= [^<]*\n");
    /* the calls in their wrapper; sep between calls when parallel */
    const char *open = "", *close = "", *sep = "\"\\n\"";
    switch (f) {
    case TOOL_FORMAT_QWEN_XML: open = "\"<tool_call>\\n\""; close = "\"</tool_call>\""; break;
    case TOOL_FORMAT_SEED_XML: open = "\"<seed:tool_call>\\n\""; close = "\"</seed:tool_call>\""; break;
    case TOOL_FORMAT_GLM: open = "\"<tool_call>\""; close = "\"</tool_call>\""; break;
    case TOOL_FORMAT_LLAMA3: sep = "\"; \""; break;
    case TOOL_FORMAT_MISTRAL: open = "\"[TOOL_CALLS][\""; close = "\"]\""; sep = "\", \""; break;
    case TOOL_FORMAT_GRANITE: open = "\"<|tool_call|>[\""; close = "\"]\""; sep = "\", \""; break;
    case TOOL_FORMAT_FIREFUNCTION: open = "\" functools[\""; close = "\"]\""; sep = "\", \""; break;
    case TOOL_FORMAT_COMMAND_R7B: open = "\"<|START_ACTION|>[\\n    \""; close = "\"\\n]<|END_ACTION|>\""; sep = "\",\\n    \""; break;
    case TOOL_FORMAT_DEEPSEEK_R1:
    case TOOL_FORMAT_DEEPSEEK_V3:
        open = "\"" DS_CALLS_BEGIN "\"";
        close = "\"" DS_CALLS_END "\"";
        break;
    case TOOL_FORMAT_KIMI: open = "\"<|tool_calls_section_begin|>\""; close = "\"<|tool_calls_section_end|>\""; sep = "\"\""; break;
    case TOOL_FORMAT_GPT_OSS: sep = "\"<|call|>\""; parallel = false; break; /* one call per message */
    case TOOL_FORMAT_FUNCTIONARY_V32: open = lazy ? "\">>>\"" : ""; sep = "\">>>\""; break; /* the prompt wrote the first */
    default: break;
    }
    bool per_call_wrap = f == TOOL_FORMAT_QWEN_XML || f == TOOL_FORMAT_SEED_XML || f == TOOL_FORMAT_GLM;
    struct strbuf root = {0};
    strbuf_puts(&root, "root ::= ");
    if (!lazy && in_think && d->think_close) {
        strbuf_puts(&root, "think-text ");
        lit(&root, d->think_close);
        strbuf_puts(&root, " [ \\n]* ");
    }
    if (per_call_wrap) {
        strbuf_printf(&root, "%s call %s", open, close);
        if (parallel) strbuf_printf(&root, " (\"\\n\" %s call %s)*", open, close);
    } else {
        strbuf_printf(&root, "%s%scall", open, *open ? " " : "");
        if (parallel) strbuf_printf(&root, " (%s call)*", sep);
        if (*close) strbuf_printf(&root, " %s", close);
    }
    strbuf_puts(&root, "\nthink-text ::= ([^<] | \"<\" [^/])*\n");
    strbuf_put(&root, g.s, g.n);
    strbuf_put(&root, rules.s ? rules.s : "", rules.n);
    free(g.s);
    free(rules.s);
    if (root.oom || g.oom || rules.oom) {
        free(root.s);
        return -ERR_NOMEM;
    }
    *out = root.s;
    return 0;
}

/* ---- the request's fields ---- */

/* A JSON value's kind, as params.c's messages say it. */
static const char *kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

int tool_params_parse(struct params_parser *pp, struct completion_params *p) {
    const json_t *body = params_body(pp);
    const json_t *tools = p->chat.tools;
    size_t n = json_array_size(tools);
    char where[96];
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(tools, i), *v;
        snprintf(where, sizeof where, "tools[%zu]", i);
        if (!json_is_object(t)) return params_bad(pp, where, "expected an object, got %s", kind(t));
        v = json_object_get(t, "type");
        if (v && !(json_is_string(v) && strcmp(json_string_value(v), "function") == 0)) {
            snprintf(where, sizeof where, "tools[%zu].type", i);
            return params_bad(pp, where, "expected \"function\"");
        }
        const json_t *fn = json_object_get(t, "function");
        snprintf(where, sizeof where, "tools[%zu].function", i);
        if (!json_is_object(fn)) return params_bad(pp, where, "required: an object with a name");
        v = json_object_get(fn, "name");
        snprintf(where, sizeof where, "tools[%zu].function.name", i);
        if (!json_is_string(v) || json_string_length(v) == 0) return params_bad(pp, where, "required: a non-empty string");
        v = json_object_get(fn, "parameters");
        snprintf(where, sizeof where, "tools[%zu].function.parameters", i);
        if (v && !json_is_null(v) && !json_is_object(v))
            return params_bad(pp, where, "expected a JSON Schema object, got %s", kind(v));
    }
    int rc;
    p->parallel_tool_calls = true;
    if ((rc = params_bool(pp, "parallel_tool_calls", &p->parallel_tool_calls)) < 0) return rc;
    const json_t *tc = json_object_get(body, "tool_choice");
    p->tool_choice = n ? TOOL_CHOICE_AUTO : TOOL_CHOICE_NONE;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (strcmp(s, "none") == 0) p->tool_choice = TOOL_CHOICE_NONE;
        else if (strcmp(s, "required") == 0) {
            if (!n) return params_bad(pp, "tool_choice", "\"required\" needs tools");
            p->tool_choice = TOOL_CHOICE_REQUIRED;
        } else if (strcmp(s, "auto") != 0)
            return params_bad(pp, "tool_choice", "expected \"auto\", \"none\", \"required\" or "
                                                 "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else if (json_is_object(tc)) {
        const json_t *ty = json_object_get(tc, "type");
        if (!json_is_string(ty) || strcmp(json_string_value(ty), "function") != 0)
            return params_bad(pp, "tool_choice.type", "expected \"function\"");
        const char *name = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
        if (!name) return params_bad(pp, "tool_choice.function.name", "required: a string");
        for (size_t i = 0; i < n && !p->tool_name; i++) {
            const json_t *v = json_object_get(json_object_get(json_array_get(tools, i), "function"), "name");
            if (strcmp(json_string_value(v), name) == 0) p->tool_name = json_string_value(v);
        }
        if (!p->tool_name) return params_bad(pp, "tool_choice.function.name", "no tool is named \"%.64s\"", name);
        p->tool_choice = TOOL_CHOICE_NAMED;
    } else if (tc && !json_is_null(tc))
        return params_bad(pp, "tool_choice", "expected a string or an object, got %s", kind(tc));
    const json_t *rf = json_object_get(body, "reasoning_format");
    p->reasoning_format = -1;
    if (json_is_string(rf)) {
        const char *s = json_string_value(rf);
        p->reasoning_format = strcmp(s, "none") != 0;
        if (strcmp(s, "none") != 0 && strcmp(s, "auto") != 0 && strcmp(s, "deepseek") != 0 && strcmp(s, "deepseek-legacy") != 0)
            return params_bad(pp, "reasoning_format", "expected \"none\" or \"auto\", got \"%.32s\"", s);
    } else if (rf && !json_is_null(rf))
        return params_bad(pp, "reasoning_format", "expected a string, got %s", kind(rf));
    if (p->tool_choice != TOOL_CHOICE_NONE) { /* one grammar per output */
        const json_t *g = json_object_get(body, "grammar"), *js = json_object_get(body, "json_schema");
        const json_t *rft = json_object_get(json_object_get(body, "response_format"), "type");
        if (json_is_string(g) && json_string_length(g)) return params_bad(pp, "grammar", "cannot be combined with tools");
        if (json_is_object(js) && json_object_size(js)) return params_bad(pp, "json_schema", "cannot be combined with tools");
        if (json_is_string(rft) && strcmp(json_string_value(rft), "text") != 0)
            return params_bad(pp, "response_format", "cannot be combined with tools (use tool_choice \"none\")");
    }
    return 0;
}

int tool_flat_parse(struct params_parser *ps, struct completion_params *p, const struct tool_flat_api *api,
                    size_t *n_tools) {
    const json_t *tools = json_object_get(params_body(ps), "tools");
    char where[96];
    if (tools && !json_is_null(tools) && !json_is_array(tools)) return params_bad(ps, "tools", "expected an array");
    json_t *chat = json_array();
    if (!chat) return -ERR_NOMEM;
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        snprintf(where, sizeof where, "tools[%zu]", i);
        const char *type = json_string_value(json_object_get(t, "type"));
        const json_t *name = json_object_get(t, "name"), *desc = json_object_get(t, "description");
        const json_t *schema = json_object_get(t, api->schema_key);
        int rc = 0;
        if (!json_is_object(t) || (api->type_required && !type))
            rc = params_bad(ps, where, api->type_required ? "expected a tool with a type" : "expected a tool (an object)");
        else if (type && strcmp(type, api->type))
            rc = params_bad(ps, where, "tools of type \"%.40s\" are not supported (%s)", type, api->types_served);
        else if (!json_is_string(name) || json_string_length(name) == 0) {
            snprintf(where, sizeof where, "tools[%zu].name", i);
            rc = params_bad(ps, where, "required: a non-empty string");
        } else if (schema && !json_is_null(schema) && !json_is_object(schema)) {
            snprintf(where, sizeof where, "tools[%zu].%s", i, api->schema_key);
            rc = params_bad(ps, where, "expected a JSON Schema object");
        }
        json_t *fn = rc < 0 ? NULL : json_pack("{s:O}", "name", name);
        if (fn && json_is_string(desc)) fn = render_with(fn, "description", json_incref((json_t *)desc));
        if (fn && json_is_object(schema)) fn = render_with(fn, "parameters", json_incref((json_t *)schema));
        json_t *ct = fn ? json_pack("{s:s, s:o}", "type", "function", "function", fn) : NULL;
        if (rc == 0 && (!ct || json_array_append_new(chat, ct) < 0)) rc = -ERR_NOMEM;
        if (rc < 0) {
            json_decref(chat);
            return rc;
        }
    }
    json_decref((json_t *)p->chat.tools);
    p->chat.tools = chat; /* owned by p (chat_fields_free) */
    *n_tools = json_array_size(tools);
    return 0;
}

const char *tool_flat_named(const struct completion_params *p, const char *name) {
    size_t i;
    const json_t *t;
    json_array_foreach(p->chat.tools, i, t) {
        const char *v = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (v && !strcmp(v, name)) return v;
    }
    return NULL;
}
