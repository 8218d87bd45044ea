/* params.c: request bodies -> validated C structs (see params.h for the rules). */
#include "api/params.h"

#include <ctype.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json_schema.h"
#include "api/tool_calls.h"
#include "common/err.h"

/* ---- errors ---- */

int api_error_set(struct api_error *err, int status, const char *type, const char *param,
                  const char *fmt, ...) {
    memset(err, 0, sizeof *err);
    err->status = status;
    err->type = type;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -ERR_INVAL;
}

int api_error_exceed_context(struct api_error *err, int32_t n_prompt_tokens, int32_t n_ctx) {
    api_error_set(err, 400, "exceed_context_size_error", NULL,
                  "the request exceeds the available context size (%d prompt tokens, context %d)",
                  (int)n_prompt_tokens, (int)n_ctx);
    err->n_prompt_tokens = n_prompt_tokens;
    err->n_ctx = n_ctx;
    return -ERR_TOOBIG;
}

/* A field name built from parts ("messages[2].content[0]"), cut to what api_error.param holds. */
#define PARAM_SIZE sizeof(((struct api_error *)0)->param)
static const char *param_fmt(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *param_fmt(char *buf, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, PARAM_SIZE, fmt, ap);
    va_end(ap);
    return buf;
}

/* ---- the arena: every allocation is one chunk on a list, freed together ----
 * Chunks come from jansson's allocator (json_get_alloc_funcs), so that one hook governs all of
 * the API layer's memory: the tests make it fail to check every error path frees what it took. */

struct params_arena {
    struct params_arena *next;
    max_align_t data[];
};

static void *arena_alloc(struct params_arena **arena, size_t size) {
    json_malloc_t alloc;
    json_free_t release;
    json_get_alloc_funcs(&alloc, &release);
    if (size > SIZE_MAX - sizeof(struct params_arena)) return NULL;
    struct params_arena *c = alloc(sizeof *c + (size ? size : 1));
    if (!c) return NULL;
    c->next = *arena;
    *arena = c;
    return c->data;
}

static void arena_free(struct params_arena *arena) {
    json_malloc_t alloc;
    json_free_t release;
    json_get_alloc_funcs(&alloc, &release);
    while (arena) {
        struct params_arena *next = arena->next;
        release(arena);
        arena = next;
    }
}

static char *arena_strndup(struct params_arena **arena, const char *s, size_t len) {
    char *d = arena_alloc(arena, len + 1);
    if (!d) return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

/* ---- the parser's state and field helpers ---- */

struct parser {
    json_t *obj;                       /* the request object */
    enum api_endpoint endpoint;
    bool tools_rendered;               /* /apply-template: the prompt only (tools go into it) */
    const struct params_limits *lim;
    struct params_arena **arena;
    struct api_error *err;
};

static int bad(struct parser *ps, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(struct parser *ps, const char *param, const char *fmt, ...) {
    char msg[sizeof ps->err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return api_error_set(ps->err, 400, "invalid_request_error", param, "%s: %s", param, msg);
}

static int nomem(struct parser *ps) {
    api_error_set(ps->err, 500, "server_error", NULL, "out of memory parsing the request");
    return -ERR_NOMEM;
}

static const char *json_type_name(const json_t *v) {
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

/* The value of the first of names present and not null in ps->obj, or NULL; *which gets its name. */
static json_t *field(struct parser *ps, const char *const *names, const char **which) {
    for (; *names; names++) {
        json_t *v = json_object_get(ps->obj, *names);
        if (v && !json_is_null(v)) {
            *which = *names;
            return v;
        }
    }
    return NULL;
}
#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})

/* A JSON integer, or a real with an integral value (JavaScript clients send 40.0 as 40, but
 * other languages may not). */
static int as_integer(const json_t *v, long long *out) {
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return 0;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == floor(d) && d >= -9.0e15 && d <= 9.0e15) {
            *out = (long long)d;
            return 0;
        }
    }
    return -1;
}

static int get_int(struct parser *ps, const char *const *names, long long min, long long max,
                   int32_t *out) {
    const char *name;
    json_t *v = field(ps, names, &name);
    if (!v) return 0;
    long long x;
    if (as_integer(v, &x) < 0)
        return bad(ps, name, "expected an integer, got %s", json_type_name(v));
    if (x < min || x > max) return bad(ps, name, "must be in [%lld, %lld], got %lld", min, max, x);
    *out = (int32_t)x;
    return 0;
}

static int get_float(struct parser *ps, const char *const *names, double min, double max,
                     float *out) {
    const char *name;
    json_t *v = field(ps, names, &name);
    if (!v) return 0;
    if (!json_is_number(v)) return bad(ps, name, "expected a number, got %s", json_type_name(v));
    double x = json_number_value(v);
    if (!(x >= min && x <= max)) return bad(ps, name, "must be in [%g, %g], got %g", min, max, x);
    *out = (float)x;
    return 0;
}

static int get_bool(struct parser *ps, const char *const *names, bool *out) {
    const char *name;
    json_t *v = field(ps, names, &name);
    if (!v) return 0;
    if (!json_is_boolean(v)) return bad(ps, name, "expected a boolean, got %s", json_type_name(v));
    *out = json_is_true(v);
    return 0;
}

/* ---- prompt ---- */

static int prompt_text(struct parser *ps, struct completion_params *p, const json_t *s,
                       const char *param) {
    size_t len = json_string_length(s);
    if (len == 0) return bad(ps, param, "must not be empty");
    if (len > ps->lim->max_prompt_bytes)
        return bad(ps, param, "too long: %zu bytes, at most %zu", len, ps->lim->max_prompt_bytes);
    p->prompt_text = arena_strndup(ps->arena, json_string_value(s), len);
    if (!p->prompt_text) return nomem(ps);
    p->prompt_text_len = len;
    return 0;
}

static bool all_integers(const json_t *a) {
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
        if (!json_is_integer(v)) return false;
    return true;
}

/* An array of token ids (ids >= 0; the vocabulary bound is checked later). */
static int token_array(struct parser *ps, const json_t *a, const char *param,
                       const int32_t **out, size_t *n_out) {
    size_t n = json_array_size(a);
    if (n > ps->lim->max_prompt_tokens)
        return bad(ps, param, "too long: %zu tokens, at most %zu", n, ps->lim->max_prompt_tokens);
    int32_t *ids = arena_alloc(ps->arena, n * sizeof *ids);
    if (!ids) return nomem(ps);
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v) {
        long long id;
        if (as_integer(v, &id) < 0 || id < 0 || id > INT32_MAX) {
            char where[PARAM_SIZE];
            param_fmt(where, "%s[%zu]", param, i);
            return bad(ps, where, "expected a token id (an integer >= 0), got %s",
                       json_type_name(v));
        }
        ids[i] = (int32_t)id;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

/* One prompt of the batch: a string or an array of token ids, into p's prompt fields. */
static int batch_prompt(struct parser *ps, struct completion_params *p, const json_t *v, const char *param) {
    if (json_is_string(v)) return prompt_text(ps, p, v, param);
    if (json_is_array(v) && json_is_number(json_array_get(v, 0))) /* token ids (a bad one is named) */
        return token_array(ps, v, param, &p->prompt_tokens, &p->n_prompt_tokens);
    if (!json_is_array(v) || !all_integers(v))
        return bad(ps, param, "expected a string or an array of token ids (mixed text and token prompts "
                   "are not supported), got %s", json_type_name(v));
    if (json_array_size(v) == 0) return bad(ps, param, "must not be empty");
    return token_array(ps, v, param, &p->prompt_tokens, &p->n_prompt_tokens);
}

static int parse_prompt(struct parser *ps, struct completion_params *p) {
    const char *name;
    json_t *v = field(ps, NAMES("prompt"), &name);
    int rc = 0;
    if (!v) return bad(ps, "prompt", "required");
    if (json_is_string(v)) rc = prompt_text(ps, p, v, "prompt");
    else if (!json_is_array(v))
        return bad(ps, "prompt", "expected a string, an array of token ids or an array of prompts, got %s",
                   json_type_name(v));
    else if (json_array_size(v) == 0) return bad(ps, "prompt", "must not be empty");
    else if (all_integers(v) || json_is_number(json_array_get(v, 0))) /* token ids (a bad one is named) */
        rc = token_array(ps, v, "prompt", &p->prompt_tokens, &p->n_prompt_tokens);
    else {
        size_t n = json_array_size(v);
        if (n > ps->lim->max_prompts)
            return bad(ps, "prompt", "too many prompts: %zu, at most %zu", n, ps->lim->max_prompts);
        struct completion_prompt *all = arena_alloc(ps->arena, n * sizeof *all);
        if (!all) return nomem(ps);
        for (size_t i = 0; i < n; i++) {
            char where[PARAM_SIZE];
            if ((rc = batch_prompt(ps, p, json_array_get(v, i), param_fmt(where, "prompt[%zu]", i))) < 0) return rc;
            all[i] = (struct completion_prompt){p->prompt_text, p->prompt_text_len, p->prompt_tokens, p->n_prompt_tokens};
            p->prompt_text = NULL, p->prompt_text_len = 0, p->prompt_tokens = NULL, p->n_prompt_tokens = 0;
        }
        p->prompt_text = all[0].text, p->prompt_text_len = all[0].text_len;
        p->prompt_tokens = all[0].tokens, p->n_prompt_tokens = all[0].n_tokens;
        p->prompts = all;
        p->n_prompts = n;
        return 0;
    }
    if (rc < 0) return rc;
    struct completion_prompt *one = arena_alloc(ps->arena, sizeof *one);
    if (!one) return nomem(ps);
    *one = (struct completion_prompt){p->prompt_text, p->prompt_text_len, p->prompt_tokens, p->n_prompt_tokens};
    p->prompts = one;
    p->n_prompts = 1;
    return 0;
}

/* ---- stop ---- */

static int stop_string(struct parser *ps, const json_t *s, const char *param, const char **out) {
    if (!json_is_string(s)) return bad(ps, param, "expected a string, got %s", json_type_name(s));
    size_t len = json_string_length(s);
    if (len == 0) return bad(ps, param, "must not be empty");
    if (len > ps->lim->max_stop_bytes)
        return bad(ps, param, "too long: %zu bytes, at most %zu", len, ps->lim->max_stop_bytes);
    if (memchr(json_string_value(s), '\0', len)) return bad(ps, param, "must not contain NUL");
    *out = arena_strndup(ps->arena, json_string_value(s), len);
    return *out ? 0 : nomem(ps);
}

/* The stop strings of the field `fname` ("stop"; Anthropic's "stop_sequences"). */
static int parse_stop_field(struct parser *ps, const char *fname, struct completion_params *p) {
    const char *name;
    json_t *v = field(ps, (const char *const[]){fname, NULL}, &name);
    if (!v) return 0;
    if (!json_is_string(v) && !json_is_array(v))
        return bad(ps, fname, "expected a string or an array of strings, got %s",
                   json_type_name(v));
    size_t n = json_is_string(v) ? 1 : json_array_size(v);
    if (n > ps->lim->max_stop)
        return bad(ps, fname, "too many stop strings: %zu, at most %zu", n, ps->lim->max_stop);
    const char **stop = arena_alloc(ps->arena, n * sizeof *stop);
    if (!stop) return nomem(ps);
    if (json_is_string(v)) {
        int rc = stop_string(ps, v, fname, &stop[0]);
        if (rc < 0) return rc;
    } else {
        for (size_t i = 0; i < n; i++) {
            char where[PARAM_SIZE];
            param_fmt(where, "%s[%zu]", fname, i);
            int rc = stop_string(ps, json_array_get(v, i), where, &stop[i]);
            if (rc < 0) return rc;
        }
    }
    p->stop = stop;
    p->n_stop = n;
    return 0;
}

static int parse_stop(struct parser *ps, struct completion_params *p) { return parse_stop_field(ps, "stop", p); }

/* ---- logit_bias ---- */

/* The largest |bias|: llama.cpp's native endpoint takes any float, OpenAI's [-100, 100]. */
static double bias_limit(const struct parser *ps) { return ps->endpoint == API_COMPLETION ? FLT_MAX : 100.0; }

static int bias_value(struct parser *ps, const json_t *v, const char *param, float *out) {
    if (json_is_false(v)) {
        *out = -INFINITY;
        return 0;
    }
    if (!json_is_number(v))
        return bad(ps, param, "expected a number or false, got %s", json_type_name(v));
    double b = json_number_value(v);
    double lim = bias_limit(ps);
    if (!(b >= -lim && b <= lim)) return bad(ps, param, "must be in [%g, %g], got %g", -lim, lim, b);
    *out = (float)b;
    return 0;
}

/* "15043" -> 15043; anything but a plain decimal id in int32 range is refused. */
static int parse_id_key(const char *key, int32_t *out) {
    if (!*key || strlen(key) > 10) return -1;
    long long id = 0;
    for (const char *c = key; *c; c++) {
        if (*c < '0' || *c > '9') return -1;
        id = id * 10 + (*c - '0');
    }
    if (id > INT32_MAX) return -1;
    *out = (int32_t)id;
    return 0;
}

static int bias_cmp(const void *a, const void *b) {
    const struct logit_bias *x = a, *y = b;
    return (x->token > y->token) - (x->token < y->token);
}

/* One entry per token, in token order: a token listed twice gets the sum of its biases, which
 * must stay within the endpoint's range (a ban, false, stays a ban). Returns the entry count. */
static int merge_biases(struct parser *ps, struct logit_bias *lb, size_t n, double lim, size_t *n_out) {
    qsort(lb, n, sizeof *lb, bias_cmp);
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        double sum = 0;
        for (; j < n && lb[j].token == lb[i].token; j++) sum += lb[j].bias;
        if (!(sum >= -lim && sum <= lim) && sum != -INFINITY)
            return bad(ps, "logit_bias", "the entries for token %d add up to %g, outside [%g, %g]",
                       (int)lb[i].token, sum, -lim, lim);
        lb[m++] = (struct logit_bias){lb[i].token, (float)sum};
        i = j;
    }
    *n_out = m;
    return 0;
}

static int parse_logit_bias(struct parser *ps, struct completion_params *p) {
    const char *name;
    json_t *v = field(ps, NAMES("logit_bias"), &name);
    if (!v) return 0;
    if (!json_is_array(v) && !json_is_object(v))
        return bad(ps, "logit_bias", "expected an array of [token id, bias] or an object "
                   "{\"token id\": bias}, got %s", json_type_name(v));
    size_t n = json_is_array(v) ? json_array_size(v) : json_object_size(v);
    if (n > ps->lim->max_logit_bias)
        return bad(ps, "logit_bias", "too many entries: %zu, at most %zu", n,
                   ps->lim->max_logit_bias);
    struct logit_bias *lb = arena_alloc(ps->arena, n * sizeof *lb);
    struct logit_bias_text *lt = arena_alloc(ps->arena, n * sizeof *lt);
    if (!lb || !lt) return nomem(ps);
    char where[PARAM_SIZE];
    size_t i = 0, n_ids = 0, n_text = 0;
    int rc;
    if (json_is_array(v)) {
        json_t *pair;
        json_array_foreach(v, i, pair) {
            param_fmt(where, "logit_bias[%zu]", i);
            long long id;
            if (!json_is_array(pair) || json_array_size(pair) != 2)
                return bad(ps, where, "expected a pair [token id or text, bias]");
            json_t *key = json_array_get(pair, 0);
            if (json_is_string(key) && json_string_length(key) > 0) { /* text: its tokens */
                lt[n_text] = (struct logit_bias_text){.len = json_string_length(key)};
                if (!(lt[n_text].text = arena_strndup(ps->arena, json_string_value(key), lt[n_text].len)))
                    return nomem(ps);
                if ((rc = bias_value(ps, json_array_get(pair, 1), where, &lt[n_text++].bias)) < 0) return rc;
                continue;
            }
            if (as_integer(key, &id) < 0 || id < 0 || id > INT32_MAX)
                return bad(ps, where, "expected a token id (an integer >= 0) or a non-empty text first");
            lb[n_ids].token = (int32_t)id;
            if ((rc = bias_value(ps, json_array_get(pair, 1), where, &lb[n_ids++].bias)) < 0) return rc;
        }
    } else {
        const char *key;
        json_t *b;
        json_object_foreach(v, key, b) {
            param_fmt(where, "logit_bias.%s", key);
            if (parse_id_key(key, &lb[n_ids].token) == 0) {
                if ((rc = bias_value(ps, b, where, &lb[n_ids++].bias)) < 0) return rc;
                continue;
            }
            const char *digits = key + (key[0] == '-');
            if (!*key || (*digits && strspn(digits, "0123456789") == strlen(digits))) /* "-3", "99999999999" */
                return bad(ps, where, "keys must be token ids (decimal integers in [0, %d]) or texts", INT32_MAX);
            lt[n_text] = (struct logit_bias_text){.len = strlen(key)};
            if (!(lt[n_text].text = arena_strndup(ps->arena, key, lt[n_text].len))) return nomem(ps);
            if ((rc = bias_value(ps, b, where, &lt[n_text++].bias)) < 0) return rc;
        }
    }
    p->logit_bias = lb;
    p->logit_bias_text = n_text ? lt : NULL;
    p->n_logit_bias_text = n_text;
    return merge_biases(ps, lb, n_ids, bias_limit(ps), &p->n_logit_bias);
}

/* ---- chat messages ---- */

static const char *const chat_roles[] = {"system", "user", "assistant", "developer", "tool", NULL};

/* The field a chat_json "why" starts with ("messages[2].content[0]: only text ..."). */
static void leading_param(const char *why, char *param) {
    size_t i = 0;
    while (i + 1 < PARAM_SIZE && why[i] && (isalnum((unsigned char)why[i]) || strchr("_[].", why[i])))
        param[i] = why[i], i++;
    param[i] = '\0';
}

/* What chat_json does not check: the count, roles, required content, the total size. It
 * converts; we name the field when it refuses. */
static int parse_messages(struct parser *ps, struct completion_params *p, const json_t *a) {
    if (!a || json_is_null(a)) return bad(ps, "messages", "required");
    if (!json_is_array(a))
        return bad(ps, "messages", "expected an array of messages, got %s", json_type_name(a));
    size_t n = json_array_size(a);
    if (n == 0) return bad(ps, "messages", "must not be empty");
    if (n > ps->lim->max_messages)
        return bad(ps, "messages", "too many messages: %zu, at most %zu", n, ps->lim->max_messages);
    size_t i;
    json_t *m;
    json_array_foreach(a, i, m) {
        char where[PARAM_SIZE];
        param_fmt(where, "messages[%zu]", i);
        if (!json_is_object(m)) return bad(ps, where, "expected an object, got %s", json_type_name(m));
        json_t *role = json_object_get(m, "role");
        param_fmt(where, "messages[%zu].role", i);
        if (!json_is_string(role)) return bad(ps, where, "required: a string");
        const char *const *r = chat_roles;
        while (*r && strcmp(*r, json_string_value(role)) != 0) r++;
        if (!*r)
            return bad(ps, where, "unknown role \"%.32s\" (system, user, assistant, developer, tool)",
                       json_string_value(role));
        json_t *content = json_object_get(m, "content");
        param_fmt(where, "messages[%zu].content", i);
        if ((!content || json_is_null(content)) && strcmp(*r, "assistant") != 0)
            return bad(ps, where, "required");
    }
    char why[sizeof ps->err->message];
    int rc = chat_messages_from_json(a, &p->chat_, why, sizeof why);
    if (rc == -ERR_NOMEM) return nomem(ps);
    if (rc < 0) {
        char param[PARAM_SIZE];
        leading_param(why, param);
        return api_error_set(ps->err, 400, "invalid_request_error", param, "%s", why);
    }
    size_t total = 0;
    for (i = 0; i < n; i++) {
        total += strlen(p->chat_.msgs[i].content);
        if (total > ps->lim->max_prompt_bytes) {
            char where[PARAM_SIZE];
            return bad(ps, param_fmt(where, "messages[%zu].content", i),
                       "messages too long: over %zu bytes together", ps->lim->max_prompt_bytes);
        }
    }
    p->messages = p->chat_.msgs;
    p->n_messages = n;
    return 0;
}

/* The chat fields a template reads besides messages (chat_prompt.h's struct chat_request); the
 * JSON values are kept by reference (completion_params_free drops them). */
static int parse_chat_fields(struct parser *ps, struct completion_params *p) {
    const char *name;
    struct chat_request *c = &p->chat;
    c->add_generation_prompt = true;
    c->continue_final = -1;
    int rc;
    bool cont = false;
    if ((rc = get_bool(ps, NAMES("add_generation_prompt"), &c->add_generation_prompt)) < 0) return rc;
    if (field(ps, NAMES("continue_final_message"), &name)) {
        if ((rc = get_bool(ps, NAMES("continue_final_message"), &cont)) < 0) return rc;
        c->continue_final = cont;
    }
    json_t *kw = field(ps, NAMES("chat_template_kwargs"), &name);
    if (kw && !json_is_object(kw))
        return bad(ps, "chat_template_kwargs", "expected an object, got %s", json_type_name(kw));
    json_t *tools = field(ps, NAMES("tools"), &name);
    if (tools && !json_is_array(tools)) return bad(ps, "tools", "expected an array, got %s", json_type_name(tools));
    c->messages = json_incref(json_object_get(ps->obj, "messages"));
    c->tools = json_incref(tools);
    c->kwargs = json_incref(kw);
    if (ps->tools_rendered) return 0;
    return tool_params_parse((struct params_parser *)ps, p); /* tool_calls.h */
}

static void chat_fields_free(struct chat_request *c) {
    json_decref((json_t *)c->messages);
    json_decref((json_t *)c->tools);
    json_decref((json_t *)c->kwargs);
    memset(c, 0, sizeof *c);
}

/* ---- the completion endpoints ---- */

static int parse_logprobs(struct parser *ps, struct completion_params *p) {
    const char *name;
    int rc;
    switch (ps->endpoint) {
    case API_COMPLETION:
        rc = get_int(ps, NAMES("n_probs"), 0, ps->lim->max_n_probs, &p->n_probs);
        p->want_logprobs = p->n_probs > 0;
        return rc;
    case API_OAI_COMPLETION:
        if (field(ps, NAMES("n_probs"), &name)) { /* llama.cpp's form, answered in its shape */
            rc = get_int(ps, NAMES("n_probs"), 0, ps->lim->max_n_probs, &p->n_probs);
            p->want_logprobs = p->logprobs_content = p->n_probs > 0;
            return rc;
        }
        if (!field(ps, NAMES("logprobs"), &name)) return 0;
        p->want_logprobs = true;
        return get_int(ps, NAMES("logprobs"), 0, ps->lim->max_n_probs, &p->n_probs);
    case API_OAI_CHAT:
        if ((rc = get_bool(ps, NAMES("logprobs"), &p->want_logprobs)) < 0) return rc;
        if (!field(ps, NAMES("top_logprobs"), &name)) return 0;
        if ((rc = get_int(ps, NAMES("top_logprobs"), 0, ps->lim->max_n_probs, &p->n_probs)) < 0)
            return rc;
        if (!p->want_logprobs) return bad(ps, "top_logprobs", "requires \"logprobs\": true");
        return 0;
    default: return 0; /* the other APIs' parsers (responses.c, anthropic.c) */
    }
    return 0;
}

static int parse_seed(struct parser *ps, struct completion_params *p) {
    const char *name;
    json_t *v = field(ps, NAMES("seed"), &name);
    if (!v) return 0; /* the server's default */
    p->seed_random = true;
    long long s;
    if (as_integer(v, &s) < 0) return bad(ps, "seed", "expected an integer, got %s", json_type_name(v));
    if (s < -1 || s > (long long)UINT32_MAX)
        return bad(ps, "seed", "must be -1 (random) or in [0, %u], got %lld", UINT32_MAX, s);
    /* llama.cpp's "default seed" 0xFFFFFFFF means random too. */
    if (s == -1 || s == (long long)UINT32_MAX) return 0;
    p->seed_random = false;
    p->seed = (uint32_t)s;
    return 0;
}

/* Empty: "", [], {} (what clients send for "none"). */
static bool json_empty(const json_t *v) {
    return (json_is_string(v) && json_string_length(v) == 0) ||
           (json_is_array(v) && json_array_size(v) == 0) ||
           (json_is_object(v) && json_object_size(v) == 0);
}

/* Fields that change what the output must be and that we do not implement: refuse them rather
 * than answer something else. (Sampler tweaks we lack, like mirostat, are ignored.) */
static int refuse_unsupported(struct parser *ps, const struct completion_params *p) {
    const char *name;
    json_t *v;
    if (ps->tools_rendered) return 0; /* only the prompt is made: nothing constrains an output */
    if (ps->endpoint != API_OAI_CHAT && (v = field(ps, NAMES("tools"), &name)) && !json_empty(v))
        return bad(ps, "tools", "tools is not supported on this endpoint: use /v1/chat/completions");
    if (ps->endpoint != API_OAI_COMPLETION) return 0;
    if ((v = field(ps, NAMES("suffix"), &name)) &&
        !(json_is_string(v) && json_string_length(v) == 0))
        return bad(ps, "suffix", "suffix is not supported");
    long long best_of;
    if ((v = field(ps, NAMES("best_of"), &name)) &&
        (as_integer(v, &best_of) < 0 || best_of != p->n))
        return bad(ps, "best_of", "only best_of == n is supported");
    return 0;
}

/* The grammar text (arena) of a schema; the converter's errors name param + its location. */
static int schema_grammar(struct parser *ps, struct completion_params *p, const json_t *schema, const char *param) {
    char *gbnf = NULL, where[96], why[160], full[PARAM_SIZE];
    int rc = json_schema_to_grammar(schema, &gbnf, where, sizeof where, why, sizeof why);
    if (rc == -ERR_NOMEM) return nomem(ps);
    if (rc < 0) return bad(ps, param_fmt(full, "%s%s%s", param, where[0] ? "." : "", where), "%s", why);
    p->grammar = arena_strndup(ps->arena, gbnf, strlen(gbnf));
    free(gbnf);
    if (!p->grammar) return nomem(ps);
    p->grammar_len = strlen(p->grammar);
    snprintf(p->grammar_param, sizeof p->grammar_param, "%s", param);
    return 0;
}

/* grammar (GBNF), json_schema, response_format: at most one of them constrains the output. */
static int parse_constraint(struct parser *ps, struct completion_params *p) {
    const char *name, *which = NULL;
    json_t *grammar = field(ps, NAMES("grammar"), &name), *schema = field(ps, NAMES("json_schema"), &name);
    json_t *rf = field(ps, NAMES("response_format"), &name);
    if (grammar && json_empty(grammar)) grammar = NULL;
    if (schema && json_empty(schema)) schema = NULL;
    if (rf && json_empty(rf)) rf = NULL;
    const char *type = NULL;
    if (rf) {
        if (!json_is_object(rf)) return bad(ps, "response_format", "expected an object, got %s", json_type_name(rf));
        json_t *t = json_object_get(rf, "type");
        if (!json_is_string(t)) return bad(ps, "response_format.type", "expected \"text\", \"json_object\" or \"json_schema\"");
        type = json_string_value(t);
        if (!strcmp(type, "text")) rf = NULL;
        else if (strcmp(type, "json_object") && strcmp(type, "json_schema"))
            return bad(ps, "response_format.type", "expected \"text\", \"json_object\" or \"json_schema\", got \"%s\"", type);
    }
    int n = (grammar != NULL) + (schema != NULL) + (rf != NULL);
    if (n > 1) {
        which = grammar ? (schema ? "json_schema" : "response_format") : "response_format";
        return bad(ps, which, "only one of grammar, json_schema and response_format may constrain the output");
    }
    if (grammar) {
        if (!json_is_string(grammar)) return bad(ps, "grammar", "expected a string, got %s", json_type_name(grammar));
        p->grammar = arena_strndup(ps->arena, json_string_value(grammar), json_string_length(grammar));
        if (!p->grammar) return nomem(ps);
        p->grammar_len = json_string_length(grammar);
        snprintf(p->grammar_param, sizeof p->grammar_param, "grammar");
        return 0;
    }
    if (schema) {
        if (!json_is_object(schema) && !json_is_boolean(schema))
            return bad(ps, "json_schema", "expected a JSON Schema object, got %s", json_type_name(schema));
        return schema_grammar(ps, p, schema, "json_schema");
    }
    if (!rf) return 0;
    if (!strcmp(type, "json_object")) {
        json_t *sch = json_object_get(rf, "schema"); /* llama.cpp's extension */
        if (sch && !json_is_null(sch)) return schema_grammar(ps, p, sch, "response_format.schema");
        char *gbnf = NULL;
        if (json_schema_object_grammar(&gbnf) < 0) return nomem(ps);
        p->grammar = arena_strndup(ps->arena, gbnf, strlen(gbnf));
        free(gbnf);
        if (!p->grammar) return nomem(ps);
        p->grammar_len = strlen(p->grammar);
        snprintf(p->grammar_param, sizeof p->grammar_param, "response_format");
        return 0;
    }
    json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js)) return bad(ps, "response_format.json_schema", "expected an object with a \"schema\"");
    json_t *strict = json_object_get(js, "strict");
    if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return bad(ps, "response_format.json_schema.strict", "expected a boolean");
    json_t *sch = json_object_get(js, "schema");
    if (!sch || json_is_null(sch)) return bad(ps, "response_format.json_schema.schema", "a schema is required");
    if (!json_is_object(sch) && !json_is_boolean(sch))
        return bad(ps, "response_format.json_schema.schema", "expected a JSON Schema object, got %s", json_type_name(sch));
    /* strict or not, the output follows the schema: uvlm has only the enforcing mode */
    return schema_grammar(ps, p, sch, "response_format.json_schema.schema");
}

void completion_params_defaults(struct completion_params *p, enum api_endpoint endpoint) {
    memset(p, 0, sizeof *p);
    p->endpoint = endpoint;
    p->n_predict = -1;
    p->temperature = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->seed_random = true;
    p->cache_prompt = true;
    p->n = 1;
    p->spec_n_max = p->spec_n_min = -1;
    p->spec_p_min = -1;
}

/* return_tokens, post_sampling_probs, response_fields (native), echo (/v1/completions). */
static int parse_native_fields(struct parser *ps, struct completion_params *p) {
    int rc;
    if (ps->endpoint == API_OAI_COMPLETION) return get_bool(ps, NAMES("echo"), &p->echo);
    if (ps->endpoint != API_COMPLETION) return 0;
    if ((rc = get_bool(ps, NAMES("return_tokens"), &p->return_tokens)) < 0 ||
        (rc = get_bool(ps, NAMES("post_sampling_probs"), &p->post_sampling_probs)) < 0)
        return rc;
    const char *name;
    json_t *v = field(ps, NAMES("response_fields"), &name);
    if (!v) return 0;
    if (!json_is_array(v)) return bad(ps, "response_fields", "expected an array of strings, got %s", json_type_name(v));
    size_t n = json_array_size(v);
    if (n > ps->lim->max_response_fields)
        return bad(ps, "response_fields", "too many fields: %zu, at most %zu", n, ps->lim->max_response_fields);
    const char **fields = arena_alloc(ps->arena, (n ? n : 1) * sizeof *fields);
    if (!fields) return nomem(ps);
    for (size_t i = 0; i < n; i++) {
        json_t *f = json_array_get(v, i);
        char where[PARAM_SIZE];
        if (!json_is_string(f))
            return bad(ps, param_fmt(where, "response_fields[%zu]", i), "expected a string, got %s", json_type_name(f));
        if (!(fields[i] = arena_strndup(ps->arena, json_string_value(f), json_string_length(f)))) return nomem(ps);
    }
    p->response_fields = fields;
    p->n_response_fields = n;
    return 0;
}

void completion_params_defaults_with(struct completion_params *p, enum api_endpoint endpoint,
                                     const struct params_defaults *d) {
    completion_params_defaults(p, endpoint);
    if (!d) return;
    p->seed_random = d->seed < 0 || d->seed >= (int64_t)UINT32_MAX; /* llama.cpp's "default seed" too */
    p->seed = p->seed_random ? 0 : (uint32_t)d->seed;
    p->temperature = d->temperature;
    p->top_k = d->top_k;
    p->top_p = d->top_p;
    p->n_predict = d->n_predict;
}

static int parse_completion(struct parser *ps, struct completion_params *p) {
    bool native = ps->endpoint == API_COMPLETION;
    int rc = 0;
    completion_params_defaults_with(p, ps->endpoint, ps->lim->defaults);

    if (ps->endpoint == API_OAI_CHAT) {
        rc = parse_messages(ps, p, json_object_get(ps->obj, "messages"));
        if (rc == 0) rc = parse_chat_fields(ps, p);
    } else
        rc = parse_prompt(ps, p);
    if (rc < 0) return rc;

    const char *const *n_predict_names = ps->endpoint == API_OAI_CHAT ?
        NAMES("max_completion_tokens", "max_tokens", "n_predict") : NAMES("n_predict", "max_tokens");
    const char *const *n_names = native ? NAMES("n", "n_cmpl") : NAMES("n");
    if ((rc = get_int(ps, n_predict_names, -1, INT32_MAX, &p->n_predict)) < 0 ||
        (rc = get_float(ps, NAMES("temperature"), 0.0, 1.0e6, &p->temperature)) < 0 ||
        (rc = get_int(ps, NAMES("top_k"), 0, INT32_MAX, &p->top_k)) < 0 ||
        (rc = get_float(ps, NAMES("top_p"), 0.0, 1.0, &p->top_p)) < 0 ||
        (rc = get_float(ps, NAMES("min_p"), 0.0, 1.0, &p->min_p)) < 0 ||
        (rc = get_float(ps, NAMES("repeat_penalty"), FLT_MIN, 1.0e6, &p->repeat_penalty)) < 0 ||
        (rc = get_int(ps, NAMES("repeat_last_n"), -1, INT32_MAX, &p->repeat_last_n)) < 0 ||
        (rc = get_float(ps, NAMES("presence_penalty"), -2.0, 2.0, &p->presence_penalty)) < 0 ||
        (rc = get_float(ps, NAMES("frequency_penalty"), -2.0, 2.0, &p->frequency_penalty)) < 0 ||
        (rc = parse_seed(ps, p)) < 0 ||
        (rc = parse_stop(ps, p)) < 0 ||
        (rc = get_bool(ps, NAMES("stream"), &p->stream)) < 0 ||
        (rc = parse_logprobs(ps, p)) < 0 ||
        (rc = get_bool(ps, NAMES("cache_prompt"), &p->cache_prompt)) < 0 ||
        (rc = get_bool(ps, NAMES("ignore_eos"), &p->ignore_eos)) < 0 ||
        (rc = parse_logit_bias(ps, p)) < 0 ||
        (rc = parse_native_fields(ps, p)) < 0 ||
        (rc = get_int(ps, n_names, 1, ps->lim->max_n, &p->n)) < 0 ||
        (rc = get_int(ps, NAMES("speculative.n_max"), 0, 1 << 20, &p->spec_n_max)) < 0 ||
        (rc = get_int(ps, NAMES("speculative.n_min"), 0, 1 << 20, &p->spec_n_min)) < 0 ||
        (rc = get_float(ps, NAMES("speculative.p_min"), 0.0, 1.0, &p->spec_p_min)) < 0 ||
        (rc = refuse_unsupported(ps, p)) < 0 ||
        (rc = parse_constraint(ps, p)) < 0)
        return rc;

    const char *name;
    json_t *so = field(ps, NAMES("stream_options"), &name);
    if (so) {
        if (!json_is_object(so))
            return bad(ps, "stream_options", "expected an object, got %s", json_type_name(so));
        json_t *iu = json_object_get(so, "include_usage");
        if (iu && !json_is_null(iu) && !json_is_boolean(iu))
            return bad(ps, "stream_options.include_usage", "expected a boolean, got %s",
                       json_type_name(iu));
        p->include_usage = json_is_true(iu);
    }
    json_t *model = field(ps, NAMES("model"), &name);
    if (model) {
        if (!json_is_string(model))
            return bad(ps, "model", "expected a string, got %s", json_type_name(model));
        p->model = arena_strndup(ps->arena, json_string_value(model), json_string_length(model));
        if (!p->model) return nomem(ps);
    }
    json_t *salt = field(ps, NAMES("cache_salt"), &name);
    if (salt) {
        if (!json_is_string(salt))
            return bad(ps, "cache_salt", "expected a string, got %s", json_type_name(salt));
        if (json_string_length(salt) == 0) return bad(ps, "cache_salt", "expected a non-empty string");
        p->cache_salt_len = json_string_length(salt);
        p->cache_salt = arena_strndup(ps->arena, json_string_value(salt), p->cache_salt_len);
        if (!p->cache_salt) return nomem(ps);
    }
    return 0;
}

/* Load body as a JSON object; on success *root is a new reference. */
static int load_body(const char *body, size_t len, json_t **root, struct api_error *err) {
    json_error_t je;
    *root = json_loadb(body, len, JSON_ALLOW_NUL, &je);
    /* jansson reports running out of memory as out_of_memory or unknown at best; sometimes as
     * a syntax error near the value it failed to allocate, which then becomes a 400. */
    if (!*root && (json_error_code(&je) == json_error_out_of_memory ||
                   json_error_code(&je) == json_error_unknown)) {
        api_error_set(err, 500, "server_error", NULL, "out of memory parsing the request");
        return -ERR_NOMEM;
    }
    if (!*root)
        return api_error_set(err, 400, "invalid_request_error", NULL,
                             "invalid JSON at line %d, column %d: %s", je.line, je.column, je.text);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return api_error_set(err, 400, "invalid_request_error", NULL,
                             "the request body must be a JSON object");
    }
    return 0;
}

static int chat_template_fn(struct parser *ps, void *out);

/* Shared shape of every public parse: zero out, load, run fn; on success *arena (a field of
 * out) owns what fn allocated, on failure it is freed and out zeroed again. */
static int parse_with(void *out, size_t out_size, struct params_arena **arena, const char *body,
                      size_t len, enum api_endpoint ep,
                      const struct params_limits *lim, struct api_error *err,
                      int (*fn)(struct parser *, void *)) {
    static const struct params_limits defaults = PARAMS_LIMITS_DEFAULT;
    memset(out, 0, out_size);
    memset(err, 0, sizeof *err);
    json_t *root;
    int rc = load_body(body, len, &root, err);
    if (rc < 0) return rc;
    struct params_arena *a = NULL;
    struct parser ps = {root, ep, false, lim ? lim : &defaults, &a, err};
    ps.tools_rendered = fn == chat_template_fn;
    rc = fn(&ps, out);
    json_decref(root);
    if (rc < 0) {
        arena_free(a);
        memset(out, 0, out_size);
        return rc;
    }
    *arena = a;
    return 0;
}

/* ---- the helpers of the other APIs' parsers (params.h) ---- */

struct params_parser {
    struct parser ps;   /* first: a struct parser * is a struct params_parser * */
};
#define PS(pp) (&(pp)->ps)

const struct json_t *params_body(const struct params_parser *pp) { return pp->ps.obj; }
const struct params_limits *params_limits(const struct params_parser *pp) { return pp->ps.lim; }

int params_bad(struct params_parser *pp, const char *param, const char *fmt, ...) {
    char msg[sizeof pp->ps.err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return bad(PS(pp), param, "%s", msg);
}

int params_nomem(struct params_parser *pp) { return nomem(PS(pp)); }

int params_int(struct params_parser *pp, const char *name, long long min, long long max, int32_t *out) {
    return get_int(PS(pp), (const char *const[]){name, NULL}, min, max, out);
}

int params_float(struct params_parser *pp, const char *name, double min, double max, float *out) {
    return get_float(PS(pp), (const char *const[]){name, NULL}, min, max, out);
}

int params_bool(struct params_parser *pp, const char *name, bool *out) {
    return get_bool(PS(pp), (const char *const[]){name, NULL}, out);
}

int params_string(struct params_parser *pp, const char *name, const char **out) {
    const char *which;
    json_t *v = field(PS(pp), (const char *const[]){name, NULL}, &which);
    *out = NULL;
    if (!v) return 0;
    if (!json_is_string(v)) return bad(PS(pp), name, "expected a string, got %s", json_type_name(v));
    *out = arena_strndup(pp->ps.arena, json_string_value(v), json_string_length(v));
    return *out ? 0 : nomem(PS(pp));
}

int params_stop(struct params_parser *pp, const char *name, struct completion_params *p) {
    return parse_stop_field(PS(pp), name, p);
}

int params_messages(struct params_parser *pp, const struct json_t *messages, const char *param,
                    struct completion_params *p) {
    struct parser *ps = PS(pp);
    size_t n = json_array_size(messages);
    if (n > ps->lim->max_messages)
        return bad(ps, param, "too many messages: %zu, at most %zu", n, ps->lim->max_messages);
    char why[sizeof ps->err->message];
    int rc = chat_messages_from_json(messages, &p->chat_, why, sizeof why);
    if (rc == -ERR_NOMEM) return nomem(ps);
    if (rc < 0) return bad(ps, param, "%s", why);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        total += strlen(p->chat_.msgs[i].content);
        if (total > ps->lim->max_prompt_bytes)
            return bad(ps, param, "too long: over %zu bytes of text together", ps->lim->max_prompt_bytes);
    }
    p->messages = p->chat_.msgs;
    p->n_messages = n;
    /* the template reads them as a chat request's messages */
    p->chat.messages = json_incref((json_t *)messages);
    p->chat.add_generation_prompt = true;
    p->chat.continue_final = -1;
    return 0;
}

static int completion_fn(struct parser *ps, void *out) {
    struct completion_params *p = out;
    int rc;
    switch (ps->endpoint) {
    case API_OAI_RESPONSES:
        completion_params_defaults_with(p, ps->endpoint, ps->lim->defaults);
        rc = responses_params_fill((struct params_parser *)ps, p);
        break;
    case API_ANTHROPIC:
    case API_ANTHROPIC_COUNT:
        completion_params_defaults_with(p, ps->endpoint, ps->lim->defaults);
        rc = anthropic_params_fill((struct params_parser *)ps, p);
        break;
    default: rc = parse_completion(ps, p);
    }
    if (rc < 0) {
        chat_messages_free(&p->chat_);
        chat_fields_free(&p->chat);
    }
    return rc;
}

int completion_params_parse(struct completion_params *p, enum api_endpoint endpoint,
                            const char *body, size_t len, const struct params_limits *lim,
                            struct api_error *err) {
    return parse_with(p, sizeof *p, &p->arena_, body, len, endpoint, lim, err,
                      completion_fn);
}

static int chat_template_fn(struct parser *ps, void *out) { return completion_fn(ps, out); }

int chat_template_params_parse(struct completion_params *p, const char *body, size_t len,
                               const struct params_limits *lim, struct api_error *err) {
    return parse_with(p, sizeof *p, &p->arena_, body, len, API_OAI_CHAT, lim, err, chat_template_fn);
}

static int check_ids(const int32_t *ids, size_t n, int32_t n_vocab, const char *param,
                     struct api_error *err) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab) {
            char where[PARAM_SIZE];
            param_fmt(where, "%s[%zu]", param, i);
            return api_error_set(err, 400, "invalid_request_error", where,
                                 "%s: unknown token id %d (the vocabulary has %d tokens)", where,
                                 (int)ids[i], (int)n_vocab);
        }
    return 0;
}

int completion_params_check_tokens(const struct completion_params *p, int32_t n_vocab,
                                   struct api_error *err) {
    int rc = 0;
    if (p->n_prompts > 1)
        for (size_t i = 0; rc == 0 && i < p->n_prompts; i++) {
            char where[PARAM_SIZE];
            rc = check_ids(p->prompts[i].tokens, p->prompts[i].n_tokens, n_vocab, param_fmt(where, "prompt[%zu]", i), err);
        }
    else rc = check_ids(p->prompt_tokens, p->n_prompt_tokens, n_vocab, "prompt", err);
    for (size_t i = 0; rc == 0 && i < p->n_logit_bias; i++)
        if (p->logit_bias[i].token >= n_vocab)
            rc = api_error_set(err, 400, "invalid_request_error", "logit_bias",
                               "logit_bias: unknown token id %d (the vocabulary has %d tokens)",
                               (int)p->logit_bias[i].token, (int)n_vocab);
    return rc;
}

void completion_params_free(struct completion_params *p) {
    arena_free(p->arena_);
    chat_messages_free(&p->chat_);
    chat_fields_free(&p->chat);
    memset(p, 0, sizeof *p);
}

/* ---- /tokenize, /detokenize, /apply-template ---- */

static int tokenize_fn(struct parser *ps, void *out) {
    struct tokenize_params *p = out;
    const char *name;
    p->parse_special = true;
    json_t *c = field(ps, NAMES("content"), &name);
    if (!c) return bad(ps, "content", "required");
    if (!json_is_string(c)) return bad(ps, "content", "expected a string, got %s", json_type_name(c));
    p->content_len = json_string_length(c);
    if (p->content_len > ps->lim->max_prompt_bytes)
        return bad(ps, "content", "too long: %zu bytes, at most %zu", p->content_len,
                   ps->lim->max_prompt_bytes);
    p->content = arena_strndup(ps->arena, json_string_value(c), p->content_len);
    if (!p->content) return nomem(ps);
    int rc;
    if ((rc = get_bool(ps, NAMES("add_special"), &p->add_special)) < 0 ||
        (rc = get_bool(ps, NAMES("parse_special"), &p->parse_special)) < 0 ||
        (rc = get_bool(ps, NAMES("with_pieces"), &p->with_pieces)) < 0)
        return rc;
    return 0;
}

int tokenize_params_parse(struct tokenize_params *p, const char *body, size_t len,
                          const struct params_limits *lim, struct api_error *err) {
    return parse_with(p, sizeof *p, &p->arena_, body, len, API_COMPLETION, lim, err,
                      tokenize_fn);
}

void tokenize_params_free(struct tokenize_params *p) {
    arena_free(p->arena_);
    memset(p, 0, sizeof *p);
}

static int detokenize_fn(struct parser *ps, void *out) {
    struct detokenize_params *p = out;
    const char *name;
    json_t *t = field(ps, NAMES("tokens"), &name);
    if (!t) return bad(ps, "tokens", "required");
    if (!json_is_array(t))
        return bad(ps, "tokens", "expected an array of token ids, got %s", json_type_name(t));
    return token_array(ps, t, "tokens", &p->tokens, &p->n_tokens);
}

int detokenize_params_parse(struct detokenize_params *p, const char *body, size_t len,
                            const struct params_limits *lim, struct api_error *err) {
    return parse_with(p, sizeof *p, &p->arena_, body, len, API_COMPLETION, lim, err,
                      detokenize_fn);
}

int detokenize_params_check_tokens(const struct detokenize_params *p, int32_t n_vocab,
                                   struct api_error *err) {
    return check_ids(p->tokens, p->n_tokens, n_vocab, "tokens", err);
}

void detokenize_params_free(struct detokenize_params *p) {
    arena_free(p->arena_);
    memset(p, 0, sizeof *p);
}
