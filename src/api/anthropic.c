/* anthropic.c: POST /v1/messages bodies in, message objects, stream events and error bodies out
 * (see anthropic.h). json_pack fails as a whole when a part is NULL, so running out of memory
 * gives NULL rather than an object with fields missing. */
#include "api/anthropic.h"

#include "api/errors.h"
#include "common/err.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the request ---- */

/* The text of content (a string, or text blocks) as a new JSON string in *out; param names the
 * field ("messages[2].content", "system"). */
static int blocks_text(struct params_parser *ps, const json_t *content, const char *param, json_t **out) {
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
        if (strcmp(type, "text"))
            return params_bad(ps, where, "content blocks of type \"%.40s\" are not supported (text only)", type);
        const json_t *text = json_object_get(block, "text");
        if (!json_is_string(text)) return params_bad(ps, where, "text: expected a string");
        total += json_string_length(text);
    }
    char *buf = malloc(total + 1), *end = buf;
    if (!buf) return -ERR_NOMEM;
    json_array_foreach(content, k, block) {
        const json_t *text = json_object_get(block, "text");
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

/* system, then messages, into msgs (OpenAI chat messages). */
static int conversation(struct params_parser *ps, json_t *msgs) {
    const json_t *body = params_body(ps);
    const json_t *system = json_object_get(body, "system");
    json_t *text = NULL;
    int rc;
    if (system && !json_is_null(system)) {
        if ((rc = blocks_text(ps, system, "system", &text)) < 0 || (rc = append_message(msgs, "system", text)) < 0)
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
        if ((rc = blocks_text(ps, content, where, &text)) < 0 || (rc = append_message(msgs, role, text)) < 0)
            return rc;
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
    const json_t *tools = json_object_get(body, "tools");
    if (json_is_array(tools) && json_array_size(tools) > 0) return params_bad(ps, "tools", "tools are not supported");
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
    switch (r->stop_type) {
    case STOP_TYPE_EOS: return "end_turn";
    case STOP_TYPE_WORD: return "stop_sequence";
    case STOP_TYPE_LIMIT: return "max_tokens";
    case STOP_TYPE_NONE: break;
    }
    return NULL;
}

/* The message object; r NULL: just started (no content, no stop reason, output_tokens 0). */
static json_t *message(const struct response_meta *meta, const struct completion_result *r, int32_t n_prompt) {
    json_t *content = r ? json_pack("[{s:s, s:o}]", "type", "text", "text", render_json_text(r->text, r->text_len))
                        : json_array();
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

static json_t *error_object(const struct api_error *err) {
    return json_pack("{s:s, s:s}", "type", api_error_type_anthropic(err->status), "message", err->message);
}

int anthropic_stream_error(const struct api_error *err, struct sse_event *ev) {
    return event(ev, "error", json_pack("{s:o}", "error", error_object(err)));
}

char *anthropic_error_render(const struct api_error *err) {
    return dump(json_pack("{s:s, s:o}", "type", "error", "error", error_object(err)));
}
