/* responses.c: POST /v1/responses bodies in, response objects and stream events out (see
 * responses.h). Built with json_pack, which fails as a whole when a part is NULL, so running out
 * of memory gives NULL rather than an object with fields missing. */
#include "api/responses.h"

#include "api/tool_calls.h"
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

/* A function_call item {call_id, name, arguments} as a call of an assistant chat message: the
 * last message when it is an assistant turn (parallel calls share one), else a new one. */
static int call_item(struct params_parser *ps, const json_t *item, size_t i, json_t *msgs) {
    char where[96];
    static const char *const fields[] = {"call_id", "name", "arguments", NULL};
    const json_t *v[3];
    for (int k = 0; fields[k]; k++) {
        v[k] = json_object_get(item, fields[k]);
        snprintf(where, sizeof where, "input[%zu].%s", i, fields[k]);
        if (!json_is_string(v[k])) return params_bad(ps, where, "required: a string");
    }
    json_t *call = json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", v[0], "type", "function", "function", "name", v[1],
                             "arguments", v[2]);
    if (!call) return -ERR_NOMEM;
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    json_t *calls = json_object_get(last, "tool_calls");
    const char *role = json_string_value(json_object_get(last, "role"));
    if (role && !strcmp(role, "assistant")) {
        if (!calls && json_object_set_new(last, "tool_calls", calls = json_array()) < 0) calls = NULL;
        if (!calls) {
            json_decref(call);
            return -ERR_NOMEM;
        }
        return json_array_append_new(calls, call) == 0 ? 0 : -ERR_NOMEM;
    }
    json_t *m = json_pack("{s:s, s:[o]}", "role", "assistant", "tool_calls", call);
    return m && json_array_append_new(msgs, m) == 0 ? 0 : -ERR_NOMEM;
}

/* A function_call_output item {call_id, output} as a "tool" chat message. */
static int call_output_item(struct params_parser *ps, const json_t *item, size_t i, json_t *msgs) {
    char where[96];
    const json_t *id = json_object_get(item, "call_id"), *output = json_object_get(item, "output");
    snprintf(where, sizeof where, "input[%zu].call_id", i);
    if (!json_is_string(id)) return params_bad(ps, where, "required: a string");
    json_t *text = NULL;
    if (!output || json_is_null(output)) {
        snprintf(where, sizeof where, "input[%zu].output", i);
        return params_bad(ps, where, "required: a string or an array of input_text parts");
    }
    int rc = message_text(ps, output, i, &text);
    if (rc < 0) return rc;
    json_t *m = json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id, "content", text);
    return m && json_array_append_new(msgs, m) == 0 ? 0 : -ERR_NOMEM;
}

/* One input item appended to msgs as an OpenAI chat message: {role, content}, an assistant turn's
 * tool_calls, or a "tool" message with a call's output. */
static int input_item(struct params_parser *ps, const json_t *item, size_t i, json_t *msgs) {
    char where[96];
    snprintf(where, sizeof where, "input[%zu]", i);
    if (!json_is_object(item)) return params_bad(ps, where, "expected an input item (an object)");
    const json_t *type = json_object_get(item, "type");
    if (type && !json_is_null(type)) {
        if (!json_is_string(type)) return params_bad(ps, where, "type: expected a string");
        const char *t = json_string_value(type);
        if (!strcmp(t, "function_call")) return call_item(ps, item, i, msgs);
        if (!strcmp(t, "function_call_output")) return call_output_item(ps, item, i, msgs);
        if (!strcmp(t, "reasoning")) return 0; /* a past turn's reasoning: templates drop it from history */
        if (strcmp(t, "message"))
            return params_bad(ps, where, "input items of type \"%.40s\" are not supported (message, "
                              "function_call, function_call_output, reasoning)", t);
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
    const json_t *v = json_object_get(json_object_get(body, "text"), "format");
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

/* tools [{type: "function", name, description?, parameters?, strict?}] as chat tools
 * [{type: "function", function: {name, description, parameters}}] in p->chat.tools (what the
 * template and tool_calls.h read), and tool_choice and parallel_tool_calls into p. */
static int parse_tools(struct params_parser *ps, struct completion_params *p) {
    static const struct tool_flat_api api = {"function", true, "function only", "parameters"};
    const json_t *body = params_body(ps);
    size_t n;
    int rc = tool_flat_parse(ps, p, &api, &n);
    if (rc < 0) return rc;
    p->parallel_tool_calls = true;
    if ((rc = params_bool(ps, "parallel_tool_calls", &p->parallel_tool_calls)) < 0) return rc;
    p->tool_choice = n ? TOOL_CHOICE_AUTO : TOOL_CHOICE_NONE;
    p->reasoning_format = -1; /* the server's --reasoning-format: reasoning blocks become reasoning items */
    const json_t *tc = json_object_get(body, "tool_choice");
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "none")) p->tool_choice = TOOL_CHOICE_NONE;
        else if (!strcmp(s, "required")) {
            if (!n) return params_bad(ps, "tool_choice", "\"required\" needs tools");
            p->tool_choice = TOOL_CHOICE_REQUIRED;
        } else if (strcmp(s, "auto"))
            return params_bad(ps, "tool_choice", "expected \"auto\", \"none\", \"required\" or "
                              "{\"type\": \"function\", \"name\": ...}");
    } else if (json_is_object(tc)) {
        const char *type = json_string_value(json_object_get(tc, "type"));
        if (!type || strcmp(type, "function"))
            return params_bad(ps, "tool_choice.type", "expected \"function\"");
        const char *name = json_string_value(json_object_get(tc, "name"));
        if (!name) return params_bad(ps, "tool_choice.name", "required: a string");
        if (!(p->tool_name = tool_flat_named(p, name))) return params_bad(ps, "tool_choice.name", "no tool is named \"%.64s\"", name);
        p->tool_choice = TOOL_CHOICE_NAMED;
    } else if (tc && !json_is_null(tc))
        return params_bad(ps, "tool_choice", "expected a string or an object");
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
    if (rc == 0) rc = parse_tools(ps, p);
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

/* The id of the message item at output index k: item_id, with "_k" after it past the first. */
static void item_id_at(const struct response_meta *meta, int k, char *out, size_t cap) {
    item_id(meta, out, cap);
    size_t n = strlen(out);
    if (k > 0 && n < cap) snprintf(out + n, cap - n, "_%d", k);
}

/* A message item at output index k; text NULL: in progress (content []). */
static json_t *message_at(const struct response_meta *meta, int k, const char *status, const char *text,
                          size_t len) {
    char id[96];
    item_id_at(meta, k, id, sizeof id);
    json_t *content = text ? json_pack("[o]", text_part(text, len)) : json_array();
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", id, "type", "message", "status", status, "role",
                     "assistant", "content", content);
}

/* A reasoning item at output index k: its id is the message's with "rs_" for "msg_"; text NULL:
 * in progress (content []). */
static json_t *reasoning_at(const struct response_meta *meta, int k, const char *status, const char *text,
                            size_t len) {
    char id[96], rs[100];
    item_id_at(meta, k, id, sizeof id);
    snprintf(rs, sizeof rs, "rs_%s", id + 4);
    json_t *content = text ? json_pack("[{s:s, s:o}]", "type", "reasoning_text", "text", render_json_text(text, len))
                           : json_array();
    return json_pack("{s:s, s:s, s:s, s:[], s:o}", "id", rs, "type", "reasoning", "status", status, "summary",
                     "content", content);
}

/* The message item: r NULL while in progress (no content yet). */
static json_t *message_item(const struct response_meta *meta, const struct completion_result *r) {
    return message_at(meta, 0, status_of(r), r ? r->text : NULL, r ? r->text_len : 0);
}

/* A function_call item; its id is the call id with "fc_" for "call_". args NULL: "". */
static json_t *call_item_out(const char *call_id, const char *name, const char *args, size_t len,
                             const char *status) {
    char id[64];
    snprintf(id, sizeof id, "fc_%s", strncmp(call_id, "call_", 5) ? call_id : call_id + 5);
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s}", "id", id, "type", "function_call", "call_id", call_id,
                     "name", name, "arguments", render_json_text(args ? args : "", args ? len : 0), "status",
                     status);
}

/* The output items of a finished result: the reasoning (when there was some), the message (when
 * it has text, or nothing else came), then one function_call item per call. */
static json_t *output_of(const struct response_meta *meta, const struct completion_result *r) {
    json_t *out = json_array();
    bool think = r->reasoning_len > 0;
    if (out && think &&
        json_array_append_new(out, reasoning_at(meta, 0, status_of(r), r->reasoning, r->reasoning_len)) < 0) {
        json_decref(out);
        out = NULL;
    }
    if (out && (r->text_len > 0 || (r->n_tool_calls == 0 && !think)) && /* as streamed: items that have text */
        json_array_append_new(out, think ? message_at(meta, 1, status_of(r), r->text, r->text_len)
                                         : message_item(meta, r)) < 0) {
        json_decref(out);
        out = NULL;
    }
    for (size_t k = 0; out && k < r->n_tool_calls; k++) {
        const struct tool_call *c = &r->tool_calls[k];
        if (json_array_append_new(out, call_item_out(c->id, c->name, c->args, c->args_len, "completed")) < 0) {
            json_decref(out);
            out = NULL;
        }
    }
    return out;
}

/* The request's tools as Responses tools, and its tool_choice. */
static json_t *tools_echo(const struct completion_params *p) {
    json_t *out = json_array();
    size_t i;
    const json_t *t;
    json_array_foreach(p->chat.tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        json_t *o = json_pack("{s:s, s:O, s:O, s:O, s:b}", "type", "function", "name", json_object_get(fn, "name"),
                              "description", json_object_get(fn, "description") ? json_object_get(fn, "description")
                                                                                 : json_null(),
                              "parameters", json_object_get(fn, "parameters") ? json_object_get(fn, "parameters")
                                                                               : json_null(),
                              "strict", 0);
        if (!out || !o || json_array_append_new(out, o) < 0) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

static json_t *tool_choice_echo(const struct completion_params *p) {
    switch (p->tool_choice) {
    case TOOL_CHOICE_NONE: return json_string(json_array_size(p->chat.tools) ? "none" : "auto");
    case TOOL_CHOICE_AUTO: return json_string("auto");
    case TOOL_CHOICE_REQUIRED: return json_string("required");
    case TOOL_CHOICE_NAMED: return json_pack("{s:s, s:s}", "type", "function", "name", p->tool_name);
    }
    return json_string("auto");
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

/* The response object; r NULL: in progress (output [], usage null). output: its output items
 * (consumed), or NULL: made from r. */
static json_t *response_object_with(const struct response_meta *meta, const struct completion_params *p,
                                    const struct completion_result *r, json_t *output) {
    json_t *o = json_pack("{s:o, s:s, s:I, s:s, s:n, s:o, s:o, s:o, s:o}", "id", nullable_str(meta->id),
                          "object", "response", "created_at", (json_int_t)meta->created, "status", status_of(r),
                          "error", "incomplete_details",
                          incomplete(r) ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null(),
                          "instructions", nullable_str(p->instructions),
                          "max_output_tokens", p->n_predict >= 0 ? json_integer(p->n_predict) : json_null(),
                          "model", nullable_str(meta->model));
    o = render_with(o, "output", output ? output : r ? output_of(meta, r) : json_array());
    o = render_with(o, "parallel_tool_calls", json_boolean(json_array_size(p->chat.tools) && p->parallel_tool_calls));
    o = render_with(o, "previous_response_id", json_null());
    o = render_with(o, "reasoning", json_pack("{s:n, s:n}", "effort", "summary"));
    o = render_with(o, "store", json_false());
    o = render_with(o, "temperature", json_real(p->temperature));
    o = render_with(o, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
    o = render_with(o, "tool_choice", tool_choice_echo(p));
    o = render_with(o, "tools", tools_echo(p));
    o = render_with(o, "top_p", json_real(p->top_p));
    o = render_with(o, "truncation", json_string("disabled"));
    o = render_with(o, "usage", usage(r));
    return render_with(o, "metadata", json_object());
}

static json_t *response_object(const struct response_meta *meta, const struct completion_params *p,
                               const struct completion_result *r) {
    return response_object_with(meta, p, r, NULL);
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

/* ---- the stream with tools ---- */

void responses_stream_free(struct responses_stream *st) {
    free(st->buf);
    free(st->name);
    json_decref(st->items);
    memset(st, 0, sizeof *st);
}

static bool buf_add(struct responses_stream *st, const char *s, size_t len) {
    if (st->len + len + 1 > st->cap) {
        size_t cap = st->cap ? st->cap : 256;
        while (cap < st->len + len + 1) cap *= 2;
        char *b = realloc(st->buf, cap);
        if (!b) return false;
        st->buf = b;
        st->cap = cap;
    }
    memcpy(st->buf + st->len, s, len);
    st->len += len;
    st->buf[st->len] = '\0';
    return true;
}

/* {item_id, output_index, content_index: 0} of the open message. */
static json_t *part_address_at(const struct response_meta *meta, int k) {
    char id[96];
    item_id_at(meta, k, id, sizeof id);
    return json_pack("{s:s, s:i, s:i}", "item_id", id, "output_index", k, "content_index", 0);
}

/* {item_id, output_index, content_index: 0} of the open reasoning item. */
static json_t *reasoning_address(const struct response_meta *meta, int k) {
    char id[96], rs[100];
    item_id_at(meta, k, id, sizeof id);
    snprintf(rs, sizeof rs, "rs_%s", id + 4);
    return json_pack("{s:s, s:i, s:i}", "item_id", rs, "output_index", k, "content_index", 0);
}

static json_t *call_address(const struct responses_stream *st) {
    char id[64];
    snprintf(id, sizeof id, "fc_%s", strncmp(st->call_id, "call_", 5) ? st->call_id : st->call_id + 5);
    return json_pack("{s:s, s:i}", "item_id", id, "output_index", st->n_items - 1);
}

/* The events that finish the open item (at most 3) with status (the last item's is the
 * response's); the item joins st->items. */
static int finish_item(int64_t *seq, struct responses_stream *st, const struct response_meta *meta,
                       struct sse_event *ev, const char *status) {
    int n = 0, k = st->n_items - 1;
    const char *text = st->buf ? st->buf : "";
    json_t *item = NULL;
    if (st->open == RESPONSES_OPEN_MESSAGE) {
        json_t *o = render_with(part_address_at(meta, k), "text", render_json_text(text, st->len));
        n += event(seq, ev + n, "response.output_text.done", render_with(o, "logprobs", json_array()));
        n += event(seq, ev + n, "response.content_part.done",
                   render_with(part_address_at(meta, k), "part", text_part(text, st->len)));
        item = message_at(meta, k, status, text, st->len);
    } else if (st->open == RESPONSES_OPEN_REASONING) {
        n += event(seq, ev + n, "response.reasoning_text.done",
                   render_with(reasoning_address(meta, k), "text", render_json_text(text, st->len)));
        item = reasoning_at(meta, k, status, text, st->len);
    } else if (st->open == RESPONSES_OPEN_CALL) {
        n += event(seq, ev + n, "response.function_call_arguments.done",
                   render_with(call_address(st), "arguments", render_json_text(text, st->len)));
        item = call_item_out(st->call_id, st->name, text, st->len, status);
    } else
        return 0;
    if (!st->items) st->items = json_array();
    if (!item || !st->items || json_array_append(st->items, item) < 0) {
        json_decref(item);
        item = NULL;
    }
    n += event(seq, ev + n, "response.output_item.done",
               item ? json_pack("{s:i, s:o}", "output_index", k, "item", item) : NULL);
    st->open = RESPONSES_OPEN_NONE;
    st->len = 0;
    return n;
}

int responses_tools_open(int64_t *seq, const struct response_meta *meta, const struct completion_params *p,
                         struct sse_event *ev) {
    int n = 0;
    n += event(seq, ev + n, "response.created", json_pack("{s:o}", "response", response_object(meta, p, NULL)));
    n += event(seq, ev + n, "response.in_progress", json_pack("{s:o}", "response", response_object(meta, p, NULL)));
    return n;
}

int responses_tools_text(int64_t *seq, struct responses_stream *st, const struct response_meta *meta,
                         const char *text, size_t len, struct sse_event *ev) {
    int n = 0;
    if (len == 0) return 0;
    if (st->open != RESPONSES_OPEN_MESSAGE) {
        n += finish_item(seq, st, meta, ev, "completed");
        int k = st->n_items++;
        st->open = RESPONSES_OPEN_MESSAGE;
        n += event(seq, ev + n, "response.output_item.added",
                   json_pack("{s:i, s:o}", "output_index", k, "item", message_at(meta, k, "in_progress", NULL, 0)));
        n += event(seq, ev + n, "response.content_part.added",
                   render_with(part_address_at(meta, k), "part", text_part("", 0)));
    }
    json_t *o = buf_add(st, text, len) ? render_with(part_address_at(meta, st->n_items - 1), "delta",
                                                     render_json_text(text, len))
                                       : NULL;
    n += event(seq, ev + n, "response.output_text.delta", o ? render_with(o, "logprobs", json_array()) : NULL);
    return n;
}

int responses_tools_reasoning(int64_t *seq, struct responses_stream *st, const struct response_meta *meta,
                              const char *text, size_t len, struct sse_event *ev) {
    int n = 0;
    if (len == 0) return 0;
    if (st->open != RESPONSES_OPEN_REASONING) {
        n += finish_item(seq, st, meta, ev, "completed");
        int k = st->n_items++;
        st->open = RESPONSES_OPEN_REASONING;
        n += event(seq, ev + n, "response.output_item.added",
                   json_pack("{s:i, s:o}", "output_index", k, "item", reasoning_at(meta, k, "in_progress", NULL, 0)));
    }
    json_t *o = buf_add(st, text, len) ? render_with(reasoning_address(meta, st->n_items - 1), "delta",
                                                     render_json_text(text, len))
                                       : NULL;
    n += event(seq, ev + n, "response.reasoning_text.delta", o);
    return n;
}

int responses_tools_call(int64_t *seq, struct responses_stream *st, const struct response_meta *meta,
                         const char *call_id, const char *name, const char *args, size_t len, struct sse_event *ev) {
    int n = 0;
    if (call_id) { /* a new call: its item */
        n += finish_item(seq, st, meta, ev, "completed");
        free(st->name);
        st->name = strdup(name ? name : "");
        snprintf(st->call_id, sizeof st->call_id, "%s", call_id);
        int k = st->n_items++;
        st->open = RESPONSES_OPEN_CALL;
        n += event(seq, ev + n, "response.output_item.added",
                   st->name ? json_pack("{s:i, s:o}", "output_index", k, "item",
                                        call_item_out(st->call_id, st->name, NULL, 0, "in_progress"))
                            : NULL);
    }
    if (len == 0 || st->open != RESPONSES_OPEN_CALL) return n;
    json_t *o = buf_add(st, args, len) ? render_with(call_address(st), "delta", render_json_text(args, len)) : NULL;
    n += event(seq, ev + n, "response.function_call_arguments.delta", o);
    return n;
}

int responses_tools_close(int64_t *seq, struct responses_stream *st, const struct response_meta *meta,
                          const struct completion_params *p, const struct completion_result *r,
                          struct sse_event *ev) {
    int n = finish_item(seq, st, meta, ev, status_of(r));
    json_t *items = st->items ? json_incref(st->items) : json_array();
    n += event(seq, ev + n, incomplete(r) ? "response.incomplete" : "response.completed",
               json_pack("{s:o}", "response", response_object_with(meta, p, r, items)));
    return n;
}
