/* chat_jinja.c: OpenAI messages -> the variables a chat template expects -> jinja.h (see
 * chat_jinja.h). */
#include "api/chat_jinja.h"

#include "api/jinja.h"
#include "common/err.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct chat_jinja {
    struct jinja_template *t;
    char *source;
    char *bos, *eos;
    bool strip_bos, strip_eos;
    bool system_role;       /* the template has a place for a system message */
    bool object_arguments;  /* the template wants tool-call arguments as objects */
    bool keeps_reasoning;   /* it can show earlier turns' reasoning: preserve_reasoning is on */
    bool harmony;           /* gpt-oss channels: knows "developer", reads "thinking" */
    bool content_blocks;    /* Ministral 3: system and assistant content as typed blocks */
};

static int fail(int code, char *why, size_t why_cap, const char *fmt, ...) {
    if (why && why_cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_cap, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* --- the reference's fixes to two known templates ------------------------------------------ */

/* Replaces every `from` in *s by `to` (a new malloc'd string). -ERR_NOMEM or 0. */
static int replace_all(char **s, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to), n = 0;
    for (const char *p = *s; (p = strstr(p, from)); p += fl) n++;
    if (!n) return 0;
    size_t len = strlen(*s) + n * tl - n * fl;
    char *out = malloc(len + 1), *o = out;
    if (!out) return -ERR_NOMEM;
    const char *p = *s, *hit;
    while ((hit = strstr(p, from))) {
        memcpy(o, p, (size_t)(hit - p));
        o += hit - p;
        memcpy(o, to, tl);
        o += tl;
        p = hit + fl;
    }
    strcpy(o, p);
    free(*s);
    *s = out;
    return 0;
}

/* The reference server rewrites a condition that makes the gpt-oss template and Mistral's
 * tool-calling templates raise on conversations it accepts; rendering the same text needs the
 * same rewrite. */
static int patch_known_templates(char **src) {
    int rc = 0;
    if (strstr(*src, "<|channel|>") && strstr(*src, "in message.content or"))
        rc = replace_all(src,
                         "{%- if \"<|channel|>analysis<|message|>\" in message.content or "
                         "\"<|channel|>final<|message|>\" in message.content %}",
                         "{%- if false %}");
    if (rc == 0 && strstr(*src, "[TOOL_CALLS]") && strstr(*src, "if (message['content'] is none or"))
        rc = replace_all(src,
                         "{%- if (message['content'] is none or message['content'] == '' or "
                         "message['content']|length == 0) and (message['tool_calls'] is not defined or "
                         "message['tool_calls'] is none or message['tool_calls']|length == 0) %}",
                         "{%- if false %}");
    return rc;
}

/* --- messages ------------------------------------------------------------------------------ */

/* A message's content as one string: a string as is, null or absent "", text parts joined with
 * "\n" (none before the first non-empty text). */
static int content_string(const json_t *content, size_t i, json_t **out, char *why, size_t why_cap) {
    if (!content || json_is_null(content)) {
        *out = json_string("");
        return *out ? 0 : -ERR_NOMEM;
    }
    if (json_is_string(content)) {
        *out = json_stringn(json_string_value(content), json_string_length(content));
        return *out ? 0 : -ERR_NOMEM;
    }
    if (!json_is_array(content))
        return fail(-ERR_INVAL, why, why_cap, "messages[%zu].content: expected a string or an array", i);
    size_t total = 0, k;
    json_t *part;
    json_array_foreach(content, k, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *text = json_object_get(part, "text");
        if (!type || strcmp(type, "text") != 0)
            return fail(-ERR_UNSUPPORTED, why, why_cap, "messages[%zu].content[%zu]: only text parts are supported", i, k);
        if (!json_is_string(text))
            return fail(-ERR_INVAL, why, why_cap, "messages[%zu].content[%zu].text: expected a string", i, k);
        total += json_string_length(text) + 1;
    }
    char *buf = malloc(total + 1);
    if (!buf) return -ERR_NOMEM;
    size_t n = 0;
    json_array_foreach(content, k, part) {
        json_t *text = json_object_get(part, "text");
        if (n > 0) buf[n++] = '\n';
        memcpy(buf + n, json_string_value(text), json_string_length(text));
        n += json_string_length(text);
    }
    *out = json_stringn_nocheck(buf, n);
    free(buf);
    return *out ? 0 : -ERR_NOMEM;
}

static int set_new(json_t *obj, const char *key, json_t *v) {
    return v && json_object_set_new(obj, key, v) == 0 ? 0 : -ERR_NOMEM;
}

static bool nonempty_string(const json_t *v) { return json_is_string(v) && json_string_length(v) > 0; }

/* One tool call in the order the template sees it: type, function {name, arguments}, id. */
static int norm_tool_call(const json_t *tc, size_t i, size_t k, bool object_args, json_t *out_list,
                          char *why, size_t why_cap) {
    const json_t *fn = json_object_get(tc, "function");
    const json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
    const char *type = json_string_value(json_object_get(tc, "type"));
    if (!json_is_object(tc) || (type && strcmp(type, "function") != 0) || !json_is_object(fn))
        return fail(-ERR_INVAL, why, why_cap, "messages[%zu].tool_calls[%zu]: expected a function call", i, k);
    if (!json_is_string(name))
        return fail(-ERR_INVAL, why, why_cap, "messages[%zu].tool_calls[%zu].function.name: expected a string", i, k);
    json_t *arg_value;
    if (json_is_string(args)) {
        if (object_args) {
            json_error_t jerr;
            arg_value = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, &jerr);
            if (!arg_value)
                return fail(-ERR_INVAL, why, why_cap,
                            "messages[%zu].tool_calls[%zu].function.arguments: not JSON: %s", i, k, jerr.text);
        } else {
            arg_value = json_stringn(json_string_value(args), json_string_length(args));
        }
    } else if (!args || json_is_null(args)) {
        arg_value = object_args ? json_object() : json_string("");
    } else if (object_args) {
        arg_value = json_deep_copy(args);
    } else {
        char *dump = json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
        arg_value = dump ? json_string(dump) : NULL;
        free(dump);
    }
    json_t *f = json_object(), *call = json_object();
    int rc = f && call ? 0 : -ERR_NOMEM;
    if (rc == 0) rc = set_new(f, "name", json_stringn(json_string_value(name), json_string_length(name)));
    if (rc == 0) rc = set_new(f, "arguments", arg_value), arg_value = NULL;
    if (rc == 0) rc = set_new(call, "type", json_string("function"));
    if (rc == 0) rc = set_new(call, "function", f), f = NULL;
    const json_t *id = json_object_get(tc, "id");
    if (rc == 0 && nonempty_string(id)) rc = set_new(call, "id", json_deep_copy(id));
    if (rc == 0) rc = json_array_append_new(out_list, call) == 0 ? 0 : -ERR_NOMEM, call = NULL;
    json_decref(arg_value);
    json_decref(f);
    json_decref(call);
    return rc;
}

/* One message in the order and shape the template sees (see chat_jinja.h). */
static int norm_message(const struct chat_jinja *cj, const json_t *m, size_t i, json_t **out, char *why,
                        size_t why_cap) {
    *out = NULL;
    const json_t *role = json_object_get(m, "role");
    if (!json_is_object(m)) return fail(-ERR_INVAL, why, why_cap, "messages[%zu]: expected an object", i);
    if (!json_is_string(role)) return fail(-ERR_INVAL, why, why_cap, "messages[%zu].role: expected a string", i);
    const char *r = json_string_value(role);
    if (!cj->harmony && !strcmp(r, "developer")) r = "system";
    json_t *msg = json_object(), *content = NULL;
    if (!msg) return -ERR_NOMEM;
    int rc = set_new(msg, "role", json_string(r));
    if (rc == 0) rc = content_string(json_object_get(m, "content"), i, &content, why, why_cap);
    if (rc == 0) rc = set_new(msg, "content", content);
    const json_t *reasoning = json_object_get(m, "reasoning_content"), *name = json_object_get(m, "name"),
                 *call_id = json_object_get(m, "tool_call_id"), *calls = json_object_get(m, "tool_calls");
    if (rc == 0 && nonempty_string(reasoning)) rc = set_new(msg, "reasoning_content", json_deep_copy(reasoning));
    if (rc == 0 && nonempty_string(name)) rc = set_new(msg, "name", json_deep_copy(name));
    if (rc == 0 && nonempty_string(call_id)) rc = set_new(msg, "tool_call_id", json_deep_copy(call_id));
    if (rc == 0 && calls && !json_is_null(calls)) {
        if (!json_is_array(calls)) {
            rc = fail(-ERR_INVAL, why, why_cap, "messages[%zu].tool_calls: expected an array", i);
        } else if (json_array_size(calls) > 0) {
            json_t *list = json_array();
            rc = list ? 0 : -ERR_NOMEM;
            for (size_t k = 0; rc == 0 && k < json_array_size(calls); k++)
                rc = norm_tool_call(json_array_get(calls, k), i, k, cj->object_arguments, list, why, why_cap);
            if (rc == 0) rc = set_new(msg, "tool_calls", list);
            else json_decref(list);
        }
    }
    if (rc == 0 && cj->harmony && nonempty_string(reasoning) && json_object_get(msg, "tool_calls"))
        rc = set_new(msg, "thinking", json_deep_copy(reasoning));
    if (rc == 0 && cj->content_blocks && (!strcmp(r, "system") || !strcmp(r, "assistant"))) {
        /* Ministral 3 reads these as blocks: [{type: thinking}], [{type: text}] */
        json_t *blocks = json_array();
        rc = blocks ? 0 : -ERR_NOMEM;
        if (rc == 0 && json_object_get(msg, "reasoning_content")) {
            json_t *b = json_pack("{s:s,s:O}", "type", "thinking", "thinking", json_object_get(msg, "reasoning_content"));
            rc = b && json_array_append_new(blocks, b) == 0 ? 0 : -ERR_NOMEM;
        }
        if (rc == 0) {
            json_t *b = json_pack("{s:s,s:O}", "type", "text", "text", json_object_get(msg, "content"));
            rc = b && json_array_append_new(blocks, b) == 0 ? 0 : -ERR_NOMEM;
        }
        if (rc == 0) rc = set_new(msg, "content", blocks), blocks = NULL;
        json_decref(blocks);
        json_object_del(msg, "reasoning_content");
    }
    if (rc < 0) {
        json_decref(msg);
        return rc == -ERR_NOMEM ? fail(rc, why, why_cap, "out of memory") : rc;
    }
    *out = msg;
    return 0;
}

static int norm_messages(const struct chat_jinja *cj, const json_t *messages, size_t n, json_t **out,
                         char *why, size_t why_cap) {
    json_t *list = json_array();
    if (!list) return fail(-ERR_NOMEM, why, why_cap, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *m;
        int rc = norm_message(cj, json_array_get(messages, i), i, &m, why, why_cap);
        if (rc == 0 && json_array_append_new(list, m) != 0) rc = fail(-ERR_NOMEM, why, why_cap, "out of memory");
        if (rc < 0) {
            json_decref(list);
            return rc;
        }
    }
    /* no place for a system message: it goes in front of the next message's text */
    json_t *first = json_array_get(list, 0);
    if (!cj->system_role && first && !strcmp(json_string_value(json_object_get(first, "role")), "system")) {
        json_t *second = json_array_get(list, 1);
        if (second && json_is_string(json_object_get(second, "content")) &&
            json_is_string(json_object_get(first, "content"))) {
            const json_t *a = json_object_get(first, "content"), *b = json_object_get(second, "content");
            size_t la = json_string_length(a), lb = json_string_length(b);
            char *buf = malloc(la + lb + 2);
            if (!buf) {
                json_decref(list);
                return fail(-ERR_NOMEM, why, why_cap, "out of memory");
            }
            memcpy(buf, json_string_value(a), la);
            buf[la] = '\n';
            memcpy(buf + la + 1, json_string_value(b), lb);
            json_object_set_new(second, "content", json_stringn_nocheck(buf, la + lb + 1));
            free(buf);
        }
        json_array_remove(list, 0);
    }
    *out = list;
    return 0;
}

static int norm_tools(const json_t *tools, json_t **out, char *why, size_t why_cap) {
    *out = NULL;
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) return fail(-ERR_INVAL, why, why_cap, "tools: expected an array");
    if (json_array_size(tools) == 0) return 0;
    json_t *list = json_array();
    if (!list) return fail(-ERR_NOMEM, why, why_cap, "out of memory");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(json_object_get(t, "type"));
        const json_t *fn = json_object_get(t, "function");
        const json_t *name = json_object_get(fn, "name"), *desc = json_object_get(fn, "description"),
                     *params = json_object_get(fn, "parameters");
        int rc = 0;
        if (!type || strcmp(type, "function") != 0 || !json_is_object(fn))
            rc = fail(-ERR_INVAL, why, why_cap, "tools[%zu]: expected {\"type\": \"function\", \"function\": {...}}", i);
        else if (!json_is_string(name))
            rc = fail(-ERR_INVAL, why, why_cap, "tools[%zu].function.name: expected a string", i);
        else if (desc && !json_is_null(desc) && !json_is_string(desc))
            rc = fail(-ERR_INVAL, why, why_cap, "tools[%zu].function.description: expected a string", i);
        if (rc == 0) {
            json_t *f = json_object(), *tool = json_object();
            rc = f && tool ? 0 : -ERR_NOMEM;
            if (rc == 0) rc = set_new(f, "name", json_deep_copy(name));
            if (rc == 0) rc = set_new(f, "description", json_is_string(desc) ? json_deep_copy(desc) : json_string(""));
            if (rc == 0)
                rc = set_new(f, "parameters", params && !json_is_null(params) ? json_deep_copy(params) : json_object());
            if (rc == 0) rc = set_new(tool, "type", json_string("function"));
            if (rc == 0) rc = set_new(tool, "function", f), f = NULL;
            if (rc == 0) rc = json_array_append_new(list, tool) == 0 ? 0 : -ERR_NOMEM, tool = NULL;
            json_decref(f);
            json_decref(tool);
            if (rc < 0) rc = fail(rc, why, why_cap, "out of memory");
        }
        if (rc < 0) {
            json_decref(list);
            return rc;
        }
    }
    *out = list;
    return 0;
}

/* --- rendering ----------------------------------------------------------------------------- */

/* A chat render takes some thousands of steps per conversation of hundreds of messages; a probe
 * at load a few hundred. The limits end a runaway template long before it stalls the server. */
#define RENDER_STEPS 5000000
#define PROBE_STEPS 200000

static int render_steps(const struct chat_jinja *cj, json_t *ctx, char **out, size_t *len, int64_t now,
                        uint64_t steps, char *why, size_t why_cap) {
    struct jinja_render_opts o = JINJA_RENDER_OPTS_DEFAULT;
    o.now = now;
    o.limits.max_steps = steps;
    return jinja_render(cj->t, ctx, &o, out, len, why, why_cap);
}

static int render(const struct chat_jinja *cj, json_t *ctx, char **out, size_t *len, int64_t now, char *why,
                  size_t why_cap) {
    return render_steps(cj, ctx, out, len, now, RENDER_STEPS, why, why_cap);
}

static void date_vars(json_t *ctx, int64_t now) {
    time_t t = (time_t)now;
    struct tm tm;
    localtime_r(&t, &tm);
    char buf[64];
    strftime(buf, sizeof buf, "%b %d %Y", &tm);
    json_object_set_new(ctx, "datetime", json_string(buf));
    strftime(buf, sizeof buf, "%d %b %Y", &tm);
    json_object_set_new(ctx, "date_string", json_string(buf));
}

/* The variables templates read to keep the reasoning of earlier assistant turns in the prompt
 * (each family names it its own way); set unless chat_template_kwargs says otherwise, as the
 * reference server does for a template that can keep it: the prompt of a conversation then
 * grows by appending, so the cached prefix of the previous turn stays valid. */
static void set_preserve_reasoning(json_t *ctx) {
    json_object_set_new(ctx, "preserve_reasoning", json_true());
    json_object_set_new(ctx, "preserve_thinking", json_true());
    json_object_set_new(ctx, "clear_thinking", json_false());
    json_object_set_new(ctx, "drop_thinking", json_false());
}

/* Renders a probe conversation (JSON text) with empty BOS/EOS; the output or NULL if it failed. */
static char *probe(const struct chat_jinja *cj, const char *messages_json, const char *tools_json,
                   bool preserve) {
    json_t *ctx = json_object();
    json_t *msgs = json_loads(messages_json, 0, NULL), *tools = tools_json ? json_loads(tools_json, 0, NULL) : NULL;
    char *out = NULL;
    size_t len;
    if (ctx && msgs) {
        json_object_set_new(ctx, "messages", msgs), msgs = NULL;
        if (tools) json_object_set_new(ctx, "tools", tools), tools = NULL;
        json_object_set_new(ctx, "bos_token", json_string(""));
        json_object_set_new(ctx, "eos_token", json_string(""));
        json_object_set_new(ctx, "add_generation_prompt", json_true());
        if (preserve) {
            set_preserve_reasoning(ctx);
            json_object_set_new(ctx, "enable_thinking", json_true());
        }
        if (render_steps(cj, ctx, &out, &len, (int64_t)time(NULL), PROBE_STEPS, NULL, 0) < 0) out = NULL;
    }
    json_decref(msgs);
    json_decref(tools);
    json_decref(ctx);
    return out;
}

/* What a probe conversation with one assistant tool call makes of arguments given as JSON text
 * (json: a string value or an object); NULL if the template failed on it. */
static char *render_tool_call(const struct chat_jinja *cj, const char *arguments_json) {
    char msgs[1024];
    snprintf(msgs, sizeof msgs,
             "[{\"role\": \"user\", \"content\": \"Hey\"},"
             " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\","
             " \"function\": {\"name\": \"ipython\", \"arguments\": %s}, \"id\": \"call_1___\"}]}]",
             arguments_json);
    return probe(cj, msgs, NULL, false);
}

/* The template wants arguments as objects when, given the JSON text, it does not print that
 * text (it fails, or escapes it with tojson) while given the object it prints the argument. */
static bool wants_object_arguments(const struct chat_jinja *cj) {
    static const char text[] = "{\"argument_needle\": \"print('Hello, World!')\"}";
    char *as_string = render_tool_call(cj, "\"{\\\"argument_needle\\\": \\\"print('Hello, World!')\\\"}\"");
    bool string_shown = as_string && strstr(as_string, text);
    free(as_string);
    if (string_shown) return false;
    char *as_object = render_tool_call(cj, text);
    bool object_shown = as_object && strstr(as_object, "argument_needle");
    free(as_object);
    return object_shown;
}

static void learn_caps(struct chat_jinja *cj) {
    char *out = probe(cj,
                      "[{\"role\": \"system\", \"content\": \"System message\"},"
                      " {\"role\": \"user\", \"content\": \"User message\"}]",
                      "[]", false);
    cj->system_role = out && strstr(out, "System message");
    free(out);
    cj->object_arguments = wants_object_arguments(cj);
    out = probe(cj,
                "[{\"role\": \"user\", \"content\": \"User message\"},"
                " {\"role\": \"assistant\", \"content\": \"Assistant message\","
                " \"reasoning_content\": \"Reasoning content\"},"
                " {\"role\": \"user\", \"content\": \"User message\"}]",
                "[]", true);
    cj->keeps_reasoning = out && strstr(out, "Reasoning content");
    free(out);
}

int chat_jinja_create(const char *text, size_t len, const char *bos, const char *eos, bool strip_bos,
                      bool strip_eos, struct chat_jinja **out, char *why, size_t why_cap) {
    *out = NULL;
    struct chat_jinja *cj = calloc(1, sizeof *cj);
    if (!cj) return fail(-ERR_NOMEM, why, why_cap, "out of memory");
    cj->source = malloc(len + 1);
    cj->bos = strdup(bos ? bos : "");
    cj->eos = strdup(eos ? eos : "");
    if (!cj->source || !cj->bos || !cj->eos) {
        chat_jinja_free(cj);
        return fail(-ERR_NOMEM, why, why_cap, "out of memory");
    }
    memcpy(cj->source, text, len);
    cj->source[len] = '\0';
    /* a NUL inside the text ends it, as for any C string of template text */
    if (patch_known_templates(&cj->source) < 0) {
        chat_jinja_free(cj);
        return fail(-ERR_NOMEM, why, why_cap, "out of memory");
    }
    int rc = jinja_parse(cj->source, strlen(cj->source), &cj->t, why, why_cap);
    if (rc < 0) {
        chat_jinja_free(cj);
        return rc;
    }
    cj->strip_bos = strip_bos;
    cj->strip_eos = strip_eos;
    cj->harmony = strstr(cj->source, "<|channel|>") != NULL;
    cj->content_blocks = strstr(cj->source, "[SYSTEM_PROMPT]") && strstr(cj->source, "[TOOL_CALLS]") &&
                         strstr(cj->source, "[ARGS]") && !strstr(cj->source, "[CALL_ID]");
    learn_caps(cj);
    *out = cj;
    return 0;
}

void chat_jinja_free(struct chat_jinja *cj) {
    if (!cj) return;
    jinja_free(cj->t);
    free(cj->source);
    free(cj->bos);
    free(cj->eos);
    free(cj);
}

const char *chat_jinja_source(const struct chat_jinja *cj) { return cj->source; }

int chat_jinja_apply(const struct chat_jinja *cj, const struct chat_jinja_input *in, char **prompt,
                     size_t *len, char *why, size_t why_cap) {
    *prompt = NULL;
    *len = 0;
    if (!json_is_array(in->messages)) return fail(-ERR_INVAL, why, why_cap, "messages: expected an array");
    json_t *messages = NULL, *tools = NULL, *ctx = json_object();
    int rc = ctx ? 0 : fail(-ERR_NOMEM, why, why_cap, "out of memory");
    if (rc == 0) rc = norm_messages(cj, in->messages, json_array_size(in->messages), &messages, why, why_cap);
    if (rc == 0) rc = norm_tools(in->tools, &tools, why, why_cap);
    if (rc == 0) {
        json_object_set_new(ctx, "messages", messages), messages = NULL;
        json_object_set_new(ctx, "bos_token", json_string(cj->bos));
        json_object_set_new(ctx, "eos_token", json_string(cj->eos));
        json_object_set_new(ctx, "enable_thinking", json_true());
        if (tools) json_object_set_new(ctx, "tools", tools), tools = NULL;
        date_vars(ctx, in->now);
        if (cj->keeps_reasoning) set_preserve_reasoning(ctx);
        if (json_is_object(in->kwargs)) json_object_update(ctx, (json_t *)in->kwargs);
        if (in->add_generation_prompt) json_object_set_new(ctx, "add_generation_prompt", json_true());
        rc = render(cj, ctx, prompt, len, in->now, why, why_cap);
    }
    json_decref(messages);
    json_decref(tools);
    json_decref(ctx);
    if (rc < 0) return rc;
    char *p = *prompt;
    size_t bl = strlen(cj->bos), el = strlen(cj->eos);
    if (cj->strip_bos && bl && *len >= bl && !memcmp(p, cj->bos, bl)) {
        memmove(p, p + bl, *len - bl + 1);
        *len -= bl;
    }
    if (cj->strip_eos && el && *len >= el && !memcmp(p + *len - el, cj->eos, el)) {
        *len -= el;
        p[*len] = '\0';
    }
    return 0;
}
