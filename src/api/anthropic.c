/* anthropic.c: POST /v1/messages bodies in, message objects, stream events and error bodies out
 * (see anthropic.h). json_pack fails as a whole when a part is NULL, so running out of memory
 * gives NULL rather than an object with fields missing. */
#include "api/anthropic.h"

#include "api/errors.h"
#include "api/tool_calls.h"
#include "common/err.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the request ---- */

/* The text of content (a string, or text blocks) as a new JSON string in *out; param names the
 * field ("messages[2].content", "system"). calls: the block type that may stand beside the text
 * (tool_use in an assistant turn, tool_result in a user turn; NULL: none), skipped here. */
static int blocks_text(struct params_parser *ps, const json_t *content, const char *param, const char *calls,
                       json_t **out) {
    if (json_is_string(content)) {
        *out = json_stringn_nocheck(json_string_value(content), json_string_length(content));
        return *out ? 0 : -ERR_NOMEM;
    }
    if (!json_is_array(content)) return params_bad(ps, param, "expected a string or an array of content blocks");
    size_t total = 0, k;
    const json_t *block;
    char where[96];
    json_array_foreach(content, k, block) {
        snprintf(where, sizeof where, "%s[%zu]", param, k);
        const char *type = json_string_value(json_object_get(block, "type"));
        if (!json_is_object(block) || !type) return params_bad(ps, where, "expected a content block with a type");
        if (calls && !strcmp(type, calls)) continue;
        if (strcmp(type, "text"))
            return params_bad(ps, where, "content blocks of type \"%.40s\" are not supported (text%s%s)", type,
                              calls ? ", " : " only", calls ? calls : "");
        const json_t *text = json_object_get(block, "text");
        if (!json_is_string(text)) return params_bad(ps, where, "text: expected a string");
        total += json_string_length(text);
    }
    char *buf = malloc(total + 1), *end = buf;
    if (!buf) return -ERR_NOMEM;
    json_array_foreach(content, k, block) {
        const json_t *text = json_object_get(block, "text");
        if (!json_is_string(text) || strcmp(json_string_value(json_object_get(block, "type")), "text")) continue;
        memcpy(end, json_string_value(text), json_string_length(text));
        end += json_string_length(text);
    }
    *out = json_stringn_nocheck(buf, total);
    free(buf);
    return *out ? 0 : -ERR_NOMEM;
}

static int append_message(json_t *msgs, const char *role, json_t *text) {
    json_t *m = json_pack("{s:s, s:o}", "role", role, "content", text);
    return m && json_array_append_new(msgs, m) == 0 ? 0 : -ERR_NOMEM;
}

/* An assistant turn's tool_use blocks {id, name, input} as chat tool_calls (arguments: input as
 * JSON text); NULL *out when there are none. */
static int tool_uses(struct params_parser *ps, const json_t *content, const char *param, json_t **out) {
    *out = NULL;
    size_t k;
    const json_t *b;
    char where[160];
    json_array_foreach(content, k, b) {
        if (strcmp(json_string_value(json_object_get(b, "type")), "tool_use")) continue;
        const json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name");
        const json_t *input = json_object_get(b, "input");
        snprintf(where, sizeof where, "%s[%zu]", param, k);
        if (!json_is_string(id) || !json_is_string(name) || !json_is_object(input)) {
            json_decref(*out);
            *out = NULL;
            return params_bad(ps, where, "a tool_use block needs id, name (strings) and input (an object)");
        }
        char *args = json_dumps(input, JSON_COMPACT);
        json_t *call = args ? json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", id, "type", "function", "function", "name",
                                        name, "arguments", args)
                            : NULL;
        free(args);
        if (!*out) *out = json_array();
        if (!call || !*out || json_array_append_new(*out, call) < 0) {
            json_decref(*out);
            *out = NULL;
            return -ERR_NOMEM;
        }
    }
    return 0;
}

/* A user turn's tool_result blocks {tool_use_id, content} as "tool" messages. */
static int tool_results(struct params_parser *ps, const json_t *content, const char *param, json_t *msgs) {
    size_t k;
    const json_t *b;
    char where[160];
    json_array_foreach(content, k, b) {
        if (strcmp(json_string_value(json_object_get(b, "type")), "tool_result")) continue;
        const json_t *id = json_object_get(b, "tool_use_id"), *c = json_object_get(b, "content");
        snprintf(where, sizeof where, "%s[%zu].tool_use_id", param, k);
        if (!json_is_string(id)) return params_bad(ps, where, "required: a string");
        json_t *text = NULL;
        snprintf(where, sizeof where, "%s[%zu].content", param, k);
        int rc = !c || json_is_null(c) ? ((text = json_string("")) ? 0 : -ERR_NOMEM)
                                       : blocks_text(ps, c, where, NULL, &text);
        if (rc < 0) return rc;
        json_t *m = json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id, "content", text);
        if (!m || json_array_append_new(msgs, m) < 0) return -ERR_NOMEM;
    }
    return 0;
}

/* One message: a user turn's tool results first, then its text (when there is text or no result);
 * an assistant turn's text with its tool_use blocks as tool_calls. */
static int one_message(struct params_parser *ps, const char *role, const json_t *content, const char *where,
                       json_t *msgs) {
    bool user = !strcmp(role, "user");
    json_t *text = NULL, *calls = NULL;
    int rc = blocks_text(ps, content, where, user ? "tool_result" : "tool_use", &text);
    if (rc < 0) return rc;
    if (!json_is_array(content)) return append_message(msgs, role, text);
    size_t before = json_array_size(msgs);
    if (user) {
        if ((rc = tool_results(ps, content, where, msgs)) < 0) {
            json_decref(text);
            return rc;
        }
        if (json_array_size(msgs) > before && json_string_length(text) == 0) {
            json_decref(text);
            return 0;
        }
        return append_message(msgs, role, text);
    }
    if ((rc = tool_uses(ps, content, where, &calls)) < 0) {
        json_decref(text);
        return rc;
    }
    json_t *m = calls ? json_pack("{s:s, s:o, s:o}", "role", role, "content", text, "tool_calls", calls)
                      : json_pack("{s:s, s:o}", "role", role, "content", text);
    return m && json_array_append_new(msgs, m) == 0 ? 0 : -ERR_NOMEM;
}

/* tools [{name, description?, input_schema?}] as chat tools in p->chat.tools, and tool_choice
 * {type: auto|any|tool|none, name, disable_parallel_tool_use} into p. */
static int parse_tools(struct params_parser *ps, struct completion_params *p) {
    static const struct tool_flat_api api = {"custom", false, "custom tools with input_schema only", "input_schema"};
    const json_t *body = params_body(ps);
    size_t n;
    int rc = tool_flat_parse(ps, p, &api, &n);
    if (rc < 0) return rc;
    p->tool_choice = n ? TOOL_CHOICE_AUTO : TOOL_CHOICE_NONE;
    p->parallel_tool_calls = true;
    p->reasoning_format = 0; /* reasoning stays in the text */
    const json_t *tc = json_object_get(body, "tool_choice");
    if (!tc || json_is_null(tc)) return 0;
    if (!json_is_object(tc)) return params_bad(ps, "tool_choice", "expected an object {\"type\": ...}");
    const json_t *dp = json_object_get(tc, "disable_parallel_tool_use");
    if (dp && !json_is_boolean(dp)) return params_bad(ps, "tool_choice.disable_parallel_tool_use", "expected a boolean");
    p->parallel_tool_calls = !json_is_true(dp);
    const char *type = json_string_value(json_object_get(tc, "type"));
    if (!type) return params_bad(ps, "tool_choice.type", "required: a string");
    if (!strcmp(type, "none")) p->tool_choice = TOOL_CHOICE_NONE;
    else if (!strcmp(type, "auto")) ;
    else if (!strcmp(type, "any")) {
        if (!n) return params_bad(ps, "tool_choice", "\"any\" needs tools");
        p->tool_choice = TOOL_CHOICE_REQUIRED;
    } else if (!strcmp(type, "tool")) {
        const char *name = json_string_value(json_object_get(tc, "name"));
        if (!name) return params_bad(ps, "tool_choice.name", "required: a string");
        if (!(p->tool_name = tool_flat_named(p, name))) return params_bad(ps, "tool_choice.name", "no tool is named \"%.64s\"", name);
        p->tool_choice = TOOL_CHOICE_NAMED;
    } else
        return params_bad(ps, "tool_choice.type", "expected \"auto\", \"any\", \"tool\" or \"none\"");
    return 0;
}

/* system, then messages, into msgs (OpenAI chat messages). */
static int conversation(struct params_parser *ps, json_t *msgs) {
    const json_t *body = params_body(ps);
    const json_t *system = json_object_get(body, "system");
    json_t *text = NULL;
    int rc;
    if (system && !json_is_null(system)) {
        if ((rc = blocks_text(ps, system, "system", NULL, &text)) < 0 || (rc = append_message(msgs, "system", text)) < 0)
            return rc;
    }
    const json_t *messages = json_object_get(body, "messages");
    if (!messages || json_is_null(messages)) return params_bad(ps, "messages", "required");
    if (!json_is_array(messages)) return params_bad(ps, "messages", "expected an array of messages");
    if (json_array_size(messages) == 0) return params_bad(ps, "messages", "must not be empty");
    size_t i;
    const json_t *m;
    char where[96];
    json_array_foreach(messages, i, m) {
        snprintf(where, sizeof where, "messages[%zu]", i);
        if (!json_is_object(m)) return params_bad(ps, where, "expected an object");
        const char *role = json_string_value(json_object_get(m, "role"));
        snprintf(where, sizeof where, "messages[%zu].role", i);
        if (!role) return params_bad(ps, where, "required: a string");
        if (strcmp(role, "user") && strcmp(role, "assistant"))
            return params_bad(ps, where, "unknown role \"%.32s\" (user, assistant; the system prompt is "
                              "\"system\")", role);
        const json_t *content = json_object_get(m, "content");
        snprintf(where, sizeof where, "messages[%zu].content", i);
        if (!content || json_is_null(content)) return params_bad(ps, where, "required");
        if ((rc = one_message(ps, role, content, where, msgs)) < 0) return rc;
    }
    return 0;
}

int anthropic_params_fill(struct params_parser *ps, struct completion_params *p) {
    const json_t *body = params_body(ps);
    int rc;
    if (p->endpoint == API_ANTHROPIC) {
        const json_t *mt = json_object_get(body, "max_tokens");
        if (!mt || json_is_null(mt)) return params_bad(ps, "max_tokens", "required");
        if ((rc = params_int(ps, "max_tokens", 1, INT32_MAX, &p->n_predict)) < 0) return rc;
    }
    if ((rc = params_stop(ps, "stop_sequences", p)) < 0 ||
        (rc = params_float(ps, "temperature", 0.0, 1.0, &p->temperature)) < 0 ||
        (rc = params_int(ps, "top_k", 0, INT32_MAX, &p->top_k)) < 0 ||
        (rc = params_float(ps, "top_p", 0.0, 1.0, &p->top_p)) < 0 ||
        (rc = params_bool(ps, "stream", &p->stream)) < 0 ||
        (rc = params_string(ps, "model", &p->model)) < 0)
        return rc;
    json_t *msgs = json_array(); /* the conversation as chat messages */
    rc = msgs ? conversation(ps, msgs) : -ERR_NOMEM;
    if (rc == 0) rc = params_messages(ps, msgs, "messages", p);
    json_decref(msgs);
    if (rc == 0) rc = parse_tools(ps, p);
    return rc == -ERR_NOMEM ? params_nomem(ps) : rc;
}

/* ---- the message ---- */

static char *dump(json_t *v) {
    char *s = v ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    return s;
}

static json_t *str_or_null(const char *s) {
    return s ? render_json_text(s, strlen(s)) : json_null();
}

static const char *stop_reason(const struct completion_result *r) {
    if (r->made_tool_calls && r->stop_type != STOP_TYPE_LIMIT) return "tool_use";
    switch (r->stop_type) {
    case STOP_TYPE_EOS: return "end_turn";
    case STOP_TYPE_WORD: return "stop_sequence";
    case STOP_TYPE_LIMIT: return "max_tokens";
    case STOP_TYPE_NONE: break;
    }
    return NULL;
}

/* A tool_use block: input is the call's arguments parsed ({} if they are not a JSON object). */
static json_t *tool_use_block(const char *id, const char *name, const char *args, size_t len) {
    json_t *input = args && len ? json_loadb(args, len, 0, NULL) : NULL;
    if (!json_is_object(input)) {
        json_decref(input);
        input = json_object();
    }
    return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", id, "name", name, "input", input);
}

/* The content blocks of a result: the text (when there is text or no call), then the calls. */
static json_t *content_of(const struct completion_result *r) {
    json_t *c = json_array();
    if (c && (r->text_len > 0 || r->n_tool_calls == 0) &&
        json_array_append_new(c, json_pack("{s:s, s:o}", "type", "text", "text",
                                           render_json_text(r->text, r->text_len))) < 0) {
        json_decref(c);
        return NULL;
    }
    for (size_t k = 0; c && k < r->n_tool_calls; k++) {
        const struct tool_call *t = &r->tool_calls[k];
        if (json_array_append_new(c, tool_use_block(t->id, t->name, t->args, t->args_len)) < 0) {
            json_decref(c);
            c = NULL;
        }
    }
    return c;
}

/* The message object; r NULL: just started (no content, no stop reason, output_tokens 0). */
static json_t *message(const struct response_meta *meta, const struct completion_result *r, int32_t n_prompt) {
    json_t *content = r ? content_of(r) : json_array();
    const char *reason = r ? stop_reason(r) : NULL;
    return json_pack("{s:o, s:s, s:s, s:o, s:o, s:o, s:o, s:{s:i, s:i}}", "id", str_or_null(meta->id), "type",
                     "message", "role", "assistant", "model", str_or_null(meta->model), "content", content,
                     "stop_reason", str_or_null(reason),
                     "stop_sequence", str_or_null(r && r->stop_type == STOP_TYPE_WORD ? r->stopping_word : NULL),
                     "usage", "input_tokens", (int)(r ? r->tokens_evaluated : n_prompt), "output_tokens",
                     (int)(r ? r->tokens_predicted : 0));
}

char *render_anthropic_message(const struct response_meta *meta, const struct completion_result *r) {
    return dump(message(meta, r, 0));
}

char *render_anthropic_count(int32_t n_tokens) {
    return dump(json_pack("{s:i}", "input_tokens", (int)n_tokens));
}

/* ---- the stream ---- */

/* One event: its data is {"type": type, ...obj} (obj consumed; NULL: out of memory). */
static int event(struct sse_event *ev, const char *type, json_t *obj) {
    json_t *o = obj ? json_pack("{s:s}", "type", type) : NULL;
    if (o && json_object_update(o, obj) < 0) {
        json_decref(o);
        o = NULL;
    }
    json_decref(obj);
    *ev = (struct sse_event){type, dump(o)};
    return 1;
}

int anthropic_stream_open(const struct response_meta *meta, int32_t n_prompt, struct sse_event *ev) {
    int n = 0;
    n += event(ev + n, "message_start", json_pack("{s:o}", "message", message(meta, NULL, n_prompt)));
    n += event(ev + n, "content_block_start",
               json_pack("{s:i, s:{s:s, s:s}}", "index", 0, "content_block", "type", "text", "text", ""));
    n += event(ev + n, "ping", json_object());
    return n;
}

int anthropic_stream_text(const char *text, size_t len, struct sse_event *ev) {
    return event(ev, "content_block_delta",
                 json_pack("{s:i, s:{s:s, s:o}}", "index", 0, "delta", "type", "text_delta", "text",
                           render_json_text(text, len)));
}

int anthropic_stream_close(const struct completion_result *r, struct sse_event *ev) {
    int n = 0;
    n += event(ev + n, "content_block_stop", json_pack("{s:i}", "index", 0));
    json_t *d = json_pack("{s:{s:o, s:o}, s:{s:i}}", "delta", "stop_reason", str_or_null(stop_reason(r)),
                          "stop_sequence",
                          str_or_null(r->stop_type == STOP_TYPE_WORD ? r->stopping_word : NULL), "usage",
                          "output_tokens", (int)r->tokens_predicted);
    n += event(ev + n, "message_delta", d);
    n += event(ev + n, "message_stop", json_object());
    return n;
}

/* The stream with tools: content blocks open as they come. */
static int block_stop(struct anthropic_stream *st, struct sse_event *ev) {
    if (!st->open) return 0;
    st->open = false;
    return event(ev, "content_block_stop", json_pack("{s:i}", "index", st->n_blocks - 1));
}

int anthropic_tools_open(const struct response_meta *meta, int32_t n_prompt, struct sse_event *ev) {
    int n = 0;
    n += event(ev + n, "message_start", json_pack("{s:o}", "message", message(meta, NULL, n_prompt)));
    n += event(ev + n, "ping", json_object());
    return n;
}

int anthropic_tools_text(struct anthropic_stream *st, const char *text, size_t len, struct sse_event *ev) {
    int n = 0;
    if (len == 0) return 0;
    if (!st->open || st->open_call) {
        n += block_stop(st, ev + n);
        n += event(ev + n, "content_block_start",
                   json_pack("{s:i, s:{s:s, s:s}}", "index", st->n_blocks, "content_block", "type", "text", "text", ""));
        st->n_blocks++;
        st->open = true;
        st->open_call = false;
    }
    n += event(ev + n, "content_block_delta",
               json_pack("{s:i, s:{s:s, s:o}}", "index", st->n_blocks - 1, "delta", "type", "text_delta", "text",
                         render_json_text(text, len)));
    return n;
}

int anthropic_tools_call(struct anthropic_stream *st, const char *id, const char *name, const char *args, size_t len,
                         struct sse_event *ev) {
    int n = 0;
    if (id) {
        n += block_stop(st, ev + n);
        n += event(ev + n, "content_block_start",
                   json_pack("{s:i, s:{s:s, s:s, s:s, s:{}}}", "index", st->n_blocks, "content_block", "type",
                             "tool_use", "id", id, "name", name ? name : "", "input"));
        st->n_blocks++;
        st->open = st->open_call = true;
    }
    if (len == 0 || !st->open_call) return n;
    n += event(ev + n, "content_block_delta",
               json_pack("{s:i, s:{s:s, s:o}}", "index", st->n_blocks - 1, "delta", "type", "input_json_delta",
                         "partial_json", render_json_text(args, len)));
    return n;
}

int anthropic_tools_close(struct anthropic_stream *st, const struct completion_result *r, struct sse_event *ev) {
    int n = 0;
    if (st->n_blocks == 0) { /* nothing came: an empty text block, as a stream without tools has */
        n += event(ev + n, "content_block_start",
                   json_pack("{s:i, s:{s:s, s:s}}", "index", 0, "content_block", "type", "text", "text", ""));
        st->n_blocks = 1;
        st->open = true;
    }
    n += block_stop(st, ev + n);
    json_t *d = json_pack("{s:{s:o, s:o}, s:{s:i}}", "delta", "stop_reason", str_or_null(stop_reason(r)),
                          "stop_sequence",
                          str_or_null(r->stop_type == STOP_TYPE_WORD ? r->stopping_word : NULL), "usage",
                          "output_tokens", (int)r->tokens_predicted);
    n += event(ev + n, "message_delta", d);
    n += event(ev + n, "message_stop", json_object());
    return n;
}

static json_t *error_object(const struct api_error *err) {
    return json_pack("{s:s, s:s}", "type", api_error_type_anthropic(err->status), "message", err->message);
}

int anthropic_stream_error(const struct api_error *err, struct sse_event *ev) {
    return event(ev, "error", json_pack("{s:o}", "error", error_object(err)));
}

char *anthropic_error_render(const struct api_error *err) {
    return dump(json_pack("{s:s, s:o}", "type", "error", "error", error_object(err)));
}
