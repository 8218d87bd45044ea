/* responses.c: POST /v1/responses bodies in, response objects and stream events out (see
 * responses.h). Built with json_pack, which fails as a whole when a part is NULL, so running out
 * of memory gives NULL rather than an object with fields missing. */
#include "api/responses.h"

#include "common/err.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the request ---- */

static const char *const message_roles[] = {"user", "assistant", "system", "developer", NULL};

static bool is_role(const char *role) {
    for (const char *const *r = message_roles; *r; r++)
        if (!strcmp(*r, role)) return true;
    return false;
}

/* The text of an input message's content (a string, or input_text/output_text parts) as a new
 * JSON string in *out. */
static int message_text(struct params_parser *ps, const json_t *content, size_t i, json_t **out) {
    char where[96];
    snprintf(where, sizeof where, "input[%zu].content", i);
    if (json_is_string(content)) {
        *out = json_stringn_nocheck(json_string_value(content), json_string_length(content));
        return *out ? 0 : -ERR_NOMEM;
    }
    if (!json_is_array(content))
        return params_bad(ps, where, "expected a string or an array of content parts");
    size_t total = 0, k;
    const json_t *part;
    json_array_foreach(content, k, part) {
        snprintf(where, sizeof where, "input[%zu].content[%zu]", i, k);
        const char *type = json_string_value(json_object_get(part, "type"));
        if (!json_is_object(part) || !type) return params_bad(ps, where, "expected a content part with a type");
        if (strcmp(type, "input_text") && strcmp(type, "output_text"))
            return params_bad(ps, where, "content parts of type \"%.40s\" are not supported (text only: "
                              "input_text, output_text)", type);
        const json_t *text = json_object_get(part, "text");
        if (!json_is_string(text)) return params_bad(ps, where, "text: expected a string");
        total += json_string_length(text);
    }
    char *buf = malloc(total + 1), *end = buf;
    if (!buf) return -ERR_NOMEM;
    json_array_foreach(content, k, part) {
        const json_t *text = json_object_get(part, "text");
        memcpy(end, json_string_value(text), json_string_length(text));
        end += json_string_length(text);
    }
    *out = json_stringn_nocheck(buf, total);
    free(buf);
    return *out ? 0 : -ERR_NOMEM;
}

/* One input item appended to msgs as {role, content} (an OpenAI chat message). */
static int input_item(struct params_parser *ps, const json_t *item, size_t i, json_t *msgs) {
    char where[96];
    snprintf(where, sizeof where, "input[%zu]", i);
    if (!json_is_object(item)) return params_bad(ps, where, "expected an input item (an object)");
    const json_t *type = json_object_get(item, "type");
    if (type && !json_is_null(type)) {
        if (!json_is_string(type)) return params_bad(ps, where, "type: expected a string");
        if (strcmp(json_string_value(type), "message"))
            return params_bad(ps, where, "input items of type \"%.40s\" are not supported (uvlm has no tools: "
                              "messages only)", json_string_value(type));
    }
    const char *role = json_string_value(json_object_get(item, "role"));
    snprintf(where, sizeof where, "input[%zu].role", i);
    if (!role) return params_bad(ps, where, "required: a string");
    if (!is_role(role))
        return params_bad(ps, where, "unknown role \"%.32s\" (user, assistant, system, developer)", role);
    const json_t *content = json_object_get(item, "content");
    if (!content || json_is_null(content)) {
        snprintf(where, sizeof where, "input[%zu].content", i);
        return params_bad(ps, where, "required");
    }
    json_t *text = NULL;
    int rc = message_text(ps, content, i, &text);
    if (rc < 0) return rc;
    json_t *m = json_pack("{s:s, s:o}", "role", role, "content", text);
    return m && json_array_append_new(msgs, m) == 0 ? 0 : -ERR_NOMEM;
}

static int parse_input(struct params_parser *ps, json_t *msgs) {
    const json_t *body = params_body(ps);
    const json_t *input = json_object_get(body, "input");
    if (!input || json_is_null(input)) return params_bad(ps, "input", "required");
    if (json_is_string(input)) {
        if (json_string_length(input) == 0) return params_bad(ps, "input", "must not be empty");
        json_t *m = json_pack("{s:s, s:s%}", "role", "user", "content", json_string_value(input),
                              json_string_length(input));
        return m && json_array_append_new(msgs, m) == 0 ? 0 : -ERR_NOMEM;
    }
    if (!json_is_array(input)) return params_bad(ps, "input", "expected a string or an array of input items");
    if (json_array_size(input) == 0) return params_bad(ps, "input", "must not be empty");
    size_t i;
    const json_t *item;
    json_array_foreach(input, i, item) {
        int rc = input_item(ps, item, i, msgs);
        if (rc < 0) return rc;
    }
    return 0;
}

/* What this server cannot honour: refused rather than answered with something else. */
static int refuse_unsupported(struct params_parser *ps) {
    const json_t *body = params_body(ps);
    const json_t *v = json_object_get(body, "tools");
    if (json_is_array(v) && json_array_size(v) > 0) return params_bad(ps, "tools", "tools are not supported");
    v = json_object_get(json_object_get(body, "text"), "format");
    if (v && !json_is_null(v)) {
        const char *type = json_string_value(json_object_get(v, "type"));
        if (!type || strcmp(type, "text"))
            return params_bad(ps, "text.format", "only {\"type\": \"text\"} is supported");
    }
    static const char *const stateful[] = {"previous_response_id", "conversation", NULL};
    for (const char *const *f = stateful; *f; f++) {
        v = json_object_get(body, *f);
        if (v && !json_is_null(v))
            return params_bad(ps, *f, "not supported: responses are not stored (send the whole conversation "
                              "as input)");
    }
    return 0;
}

int responses_params_fill(struct params_parser *ps, struct completion_params *p) {
    int rc;
    if ((rc = params_string(ps, "instructions", &p->instructions)) < 0 ||
        (rc = params_int(ps, "max_output_tokens", 1, INT32_MAX, &p->n_predict)) < 0 ||
        (rc = params_float(ps, "temperature", 0.0, 2.0, &p->temperature)) < 0 ||
        (rc = params_float(ps, "top_p", 0.0, 1.0, &p->top_p)) < 0 ||
        (rc = params_bool(ps, "stream", &p->stream)) < 0 ||
        (rc = params_string(ps, "model", &p->model)) < 0 ||
        (rc = refuse_unsupported(ps)) < 0)
        return rc;
    json_t *msgs = json_array(); /* the conversation as chat messages */
    rc = msgs ? 0 : -ERR_NOMEM;
    if (rc == 0 && p->instructions) {
        json_t *m = json_pack("{s:s, s:s}", "role", "system", "content", p->instructions);
        if (!m || json_array_append_new(msgs, m) < 0) rc = -ERR_NOMEM;
    }
    if (rc == 0) rc = parse_input(ps, msgs);
    if (rc == 0) rc = params_messages(ps, msgs, "input", p);
    json_decref(msgs);
    return rc == -ERR_NOMEM ? params_nomem(ps) : rc;
}

/* ---- the response ---- */

static char *dump(json_t *v) {
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(7)) /* floats: 7 digits */ : NULL;
    json_decref(v);
    return s;
}

/* "msg_X" for "resp_X": the output item's id. */
static void item_id(const struct response_meta *meta, char *out, size_t cap) {
    const char *id = meta->id ? meta->id : "";
    snprintf(out, cap, "msg_%s", strncmp(id, "resp_", 5) ? id : id + 5);
}

static bool incomplete(const struct completion_result *r) {
    return r && r->stop_type == STOP_TYPE_LIMIT;
}

static const char *status_of(const struct completion_result *r) {
    return !r ? "in_progress" : incomplete(r) ? "incomplete" : "completed";
}

static json_t *text_part(const char *text, size_t len) {
    return json_pack("{s:s, s:o, s:[], s:[]}", "type", "output_text", "text", render_json_text(text, len),
                     "annotations", "logprobs");
}

/* The message item: r NULL while in progress (no content yet). */
static json_t *message_item(const struct response_meta *meta, const struct completion_result *r) {
    char id[96];
    item_id(meta, id, sizeof id);
    json_t *content = r ? json_pack("[o]", text_part(r->text, r->text_len)) : json_array();
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", id, "type", "message", "status", status_of(r), "role",
                     "assistant", "content", content);
}

static json_t *usage(const struct completion_result *r) {
    if (!r) return json_null();
    json_int_t in = r->tokens_evaluated, out = r->tokens_predicted;
    return json_pack("{s:I, s:{s:I}, s:I, s:{s:i}, s:I}", "input_tokens", in, "input_tokens_details",
                     "cached_tokens", (json_int_t)r->tokens_cached, "output_tokens", out,
                     "output_tokens_details", "reasoning_tokens", 0, "total_tokens", in + out);
}

static json_t *nullable_str(const char *s) {
    return s ? render_json_text(s, strlen(s)) : json_null();
}

/* The response object; r NULL: in progress (output [], usage null). */
static json_t *response_object(const struct response_meta *meta, const struct completion_params *p,
                               const struct completion_result *r) {
    json_t *o = json_pack("{s:o, s:s, s:I, s:s, s:n, s:o, s:o, s:o, s:o}", "id", nullable_str(meta->id),
                          "object", "response", "created_at", (json_int_t)meta->created, "status", status_of(r),
                          "error", "incomplete_details",
                          incomplete(r) ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null(),
                          "instructions", nullable_str(p->instructions),
                          "max_output_tokens", p->n_predict >= 0 ? json_integer(p->n_predict) : json_null(),
                          "model", nullable_str(meta->model));
    o = render_with(o, "output", r ? json_pack("[o]", message_item(meta, r)) : json_array());
    o = render_with(o, "parallel_tool_calls", json_false());
    o = render_with(o, "previous_response_id", json_null());
    o = render_with(o, "reasoning", json_pack("{s:n, s:n}", "effort", "summary"));
    o = render_with(o, "store", json_false());
    o = render_with(o, "temperature", json_real(p->temperature));
    o = render_with(o, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
    o = render_with(o, "tool_choice", json_string("auto"));
    o = render_with(o, "tools", json_array());
    o = render_with(o, "top_p", json_real(p->top_p));
    o = render_with(o, "truncation", json_string("disabled"));
    o = render_with(o, "usage", usage(r));
    return render_with(o, "metadata", json_object());
}

char *render_response(const struct response_meta *meta, const struct completion_params *p,
                      const struct completion_result *r) {
    return dump(response_object(meta, p, r));
}

/* ---- the stream ---- */

/* One event: its data is obj (consumed) after "type" and "sequence_number". */
static int event(int64_t *seq, struct sse_event *ev, const char *type, json_t *obj) {
    json_t *o = obj ? json_pack("{s:s, s:I}", "type", type, "sequence_number", (json_int_t)(*seq)++) : NULL;
    if (o && json_object_update(o, obj) < 0) {
        json_decref(o);
        o = NULL;
    }
    json_decref(obj);
    *ev = (struct sse_event){type, dump(o)};
    return 1;
}

/* {item_id, output_index: 0, content_index: 0} */
static json_t *part_address(const struct response_meta *meta) {
    char id[96];
    item_id(meta, id, sizeof id);
    return json_pack("{s:s, s:i, s:i}", "item_id", id, "output_index", 0, "content_index", 0);
}

int responses_stream_open(int64_t *seq, const struct response_meta *meta, const struct completion_params *p,
                          struct sse_event *ev) {
    int n = 0;
    n += event(seq, ev + n, "response.created", json_pack("{s:o}", "response", response_object(meta, p, NULL)));
    n += event(seq, ev + n, "response.in_progress", json_pack("{s:o}", "response", response_object(meta, p, NULL)));
    n += event(seq, ev + n, "response.output_item.added",
               json_pack("{s:i, s:o}", "output_index", 0, "item", message_item(meta, NULL)));
    n += event(seq, ev + n, "response.content_part.added", render_with(part_address(meta), "part", text_part("", 0)));
    return n;
}

int responses_stream_text(int64_t *seq, const struct response_meta *meta, const char *text, size_t len,
                          struct sse_event *ev) {
    json_t *o = render_with(part_address(meta), "delta", render_json_text(text, len));
    return event(seq, ev, "response.output_text.delta", render_with(o, "logprobs", json_array()));
}

int responses_stream_close(int64_t *seq, const struct response_meta *meta, const struct completion_params *p,
                           const struct completion_result *r, struct sse_event *ev) {
    int n = 0;
    json_t *o = render_with(part_address(meta), "text", render_json_text(r->text, r->text_len));
    n += event(seq, ev + n, "response.output_text.done", render_with(o, "logprobs", json_array()));
    n += event(seq, ev + n, "response.content_part.done", render_with(part_address(meta), "part", text_part(r->text, r->text_len)));
    n += event(seq, ev + n, "response.output_item.done",
               json_pack("{s:i, s:o}", "output_index", 0, "item", message_item(meta, r)));
    n += event(seq, ev + n, incomplete(r) ? "response.incomplete" : "response.completed",
               json_pack("{s:o}", "response", response_object(meta, p, r)));
    return n;
}

int responses_stream_error(int64_t *seq, const struct api_error *err, struct sse_event *ev) {
    return event(seq, ev, "error",
                 json_pack("{s:s, s:s, s:o}", "code", err->type ? err->type : "server_error", "message", err->message,
                           "param", err->param[0] ? json_string(err->param) : json_null()));
}
