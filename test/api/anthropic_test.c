/* anthropic_test.c: POST /v1/messages and /count_tokens: the body's forms and refusals
 * (api/anthropic.c through completion_params_parse), the message object, its stream events and
 * the error body, and the endpoints through the router over the repository's model. */
#include "test.h"
#include "api/anthropic.h"
#include "api/fake.h"
#include "api/params.h"
#include "common/err.h"

#include <jansson.h>
#include <stdlib.h>

static int parse(struct completion_params *p, enum api_endpoint ep, const char *body, struct api_error *err) {
    return completion_params_parse(p, ep, body, strlen(body), NULL, err);
}

TEST(anthropic_parse_system_blocks_and_settings) {
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, API_ANTHROPIC,
                       "{\"model\":\"claude\",\"max_tokens\":9,\"system\":[{\"type\":\"text\",\"text\":\"Be \"},"
                       "{\"type\":\"text\",\"text\":\"brief.\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
                       "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},"
                       "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Hail\"}]},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
                       "\"stop_sequences\":[\"\\n\\n\",\"Amen\"],\"temperature\":0.25,\"top_k\":5,\"top_p\":0.5,"
                       "\"stream\":true,\"metadata\":{\"user_id\":\"u\"},\"tools\":[]}",
                       &err),
                 0);
    CHECK_EQ_INT(p.n_messages, 4);
    CHECK_EQ_STR(p.messages[0].role, "system");
    CHECK_EQ_STR(p.messages[0].content, "Be brief.");
    CHECK_EQ_STR(p.messages[2].role, "assistant");
    CHECK_EQ_STR(p.messages[2].content, "Hail");
    CHECK_EQ_STR(p.messages[3].content, "ab");
    CHECK_EQ_INT(p.n_predict, 9);
    CHECK_EQ_INT(p.n_stop, 2);
    CHECK_EQ_STR(p.stop[1], "Amen");
    CHECK(p.temperature == 0.25f && p.top_k == 5 && p.top_p == 0.5f && p.stream);
    CHECK_EQ_STR(p.model, "claude");
    completion_params_free(&p);

    /* count_tokens: no max_tokens needed; a string system */
    CHECK_EQ_INT(parse(&p, API_ANTHROPIC_COUNT, "{\"system\":\"S\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
                       &err),
                 0);
    CHECK_EQ_INT(p.n_messages, 2);
    CHECK_EQ_STR(p.messages[0].content, "S");
    CHECK_EQ_INT(p.n_predict, -1);
    completion_params_free(&p);
}

TEST(anthropic_parse_refusals_name_the_field) {
    static const struct {
        const char *body, *word;
    } cases[] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens: required"},
        {"{\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens: must be in [1,"},
        {"{\"max_tokens\":1}", "messages: required"},
        {"{\"max_tokens\":1,\"messages\":[]}", "messages: must not be empty"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", "messages[0].role: unknown role"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\"}]}", "messages[0].content: required"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}",
         "messages[0].content[0]: content blocks of type \"image\""},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t\","
         "\"name\":\"f\",\"input\":{}}]}]}", "messages[0].content[0]: content blocks of type \"tool_use\""},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":"
         "[{\"type\":\"text\",\"text\":\"y\"},{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":3}]}]}",
         "messages[1].content[1]: a tool_use block needs"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\"}]}]}",
         "messages[0].content[0].tool_use_id: required"},
        {"{\"max_tokens\":1,\"system\":[{\"type\":\"image\"}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "system[0]"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":1.5}", "temperature"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_k\":-1}", "top_k"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop_sequences\":[\"\"]}",
         "stop_sequences[0]"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":\"\"}]}",
         "tools[0].name: required"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"bash_20250124\","
         "\"name\":\"bash\"}]}", "tools[0]: tools of type \"bash_20250124\""},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":\"f\"}],"
         "\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\"}}", "tool_choice.name: no tool is named \"g\""},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":\"any\"}}",
         "tool_choice: \"any\" needs tools"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":\"f\"}],"
         "\"tool_choice\":{\"type\":\"some\"}}", "tool_choice.type"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct completion_params p;
        struct api_error err;
        CHECK_EQ_INT(parse(&p, API_ANTHROPIC, cases[i].body, &err), -ERR_INVAL);
        CHECK_EQ_INT(err.status, 400);
        if (!strstr(err.message, cases[i].word)) {
            fprintf(stderr, "case %zu: %s\n", i, err.message);
            CHECK(0);
        }
        CHECK(p.messages == NULL && p.arena_ == NULL);
    }
}

TEST(anthropic_parse_tools_and_tool_blocks) {
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, API_ANTHROPIC,
                       "{\"max_tokens\":9,\"tools\":[{\"name\":\"get_weather\",\"description\":\"d\","
                       "\"input_schema\":{\"type\":\"object\"}}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_weather\","
                       "\"disable_parallel_tool_use\":true},\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},"
                       "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Let me see.\"},"
                       "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\","
                       "\"content\":[{\"type\":\"text\",\"text\":\"21C\"}]},{\"type\":\"text\",\"text\":\"And?\"}]}]}",
                       &err),
                 0);
    CHECK_EQ_INT(p.tool_choice, TOOL_CHOICE_NAMED);
    CHECK_EQ_STR(p.tool_name, "get_weather");
    CHECK(!p.parallel_tool_calls);
    const json_t *fn = json_object_get(json_array_get(p.chat.tools, 0), "function");
    CHECK_EQ_STR(json_string_value(json_object_get(fn, "description")), "d");
    CHECK(json_is_object(json_object_get(fn, "parameters")));
    CHECK_EQ_INT(json_array_size(p.chat.messages), 4); /* user, assistant + call, tool, user */
    const json_t *a = json_array_get(p.chat.messages, 1);
    CHECK_EQ_STR(json_string_value(json_object_get(a, "content")), "Let me see.");
    const json_t *call = json_array_get(json_object_get(a, "tool_calls"), 0);
    CHECK_EQ_STR(json_string_value(json_object_get(call, "id")), "toolu_1");
    CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")),
                 "{\"city\":\"Paris\"}");
    const json_t *tm = json_array_get(p.chat.messages, 2);
    CHECK_EQ_STR(json_string_value(json_object_get(tm, "role")), "tool");
    CHECK_EQ_STR(json_string_value(json_object_get(tm, "tool_call_id")), "toolu_1");
    CHECK_EQ_STR(json_string_value(json_object_get(tm, "content")), "21C");
    CHECK_EQ_STR(json_string_value(json_object_get(json_array_get(p.chat.messages, 3), "content")), "And?");
    completion_params_free(&p);
    CHECK_EQ_INT(parse(&p, API_ANTHROPIC, "{\"max_tokens\":9,\"tools\":[{\"name\":\"f\"}],\"tool_choice\":{\"type\":\"any\"},"
                                          "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &err), 0);
    CHECK_EQ_INT(p.tool_choice, TOOL_CHOICE_REQUIRED);
    CHECK(p.parallel_tool_calls);
    completion_params_free(&p);
}

static json_t *load(char *text) {
    json_t *j = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    return j;
}

static const char *sget(const json_t *o, const char *key) { return json_string_value(json_object_get(o, key)); }
static long long iget(const json_t *o, const char *key) { return json_integer_value(json_object_get(o, key)); }

static const struct response_meta meta = {.id = "msg_abc", .created = 1700000000, .model = "claude", .n_choices = 1};

TEST(anthropic_render_message_stop_reasons) {
    struct completion_result r = {.text = "And", .text_len = 3, .tokens_predicted = 2, .tokens_evaluated = 7,
                                  .stop_type = STOP_TYPE_EOS};
    json_t *j = load(render_anthropic_message(&meta, &r));
    CHECK(j);
    CHECK_EQ_STR(sget(j, "id"), "msg_abc");
    CHECK_EQ_STR(sget(j, "type"), "message");
    CHECK_EQ_STR(sget(j, "role"), "assistant");
    CHECK_EQ_STR(sget(j, "model"), "claude");
    json_t *block = json_array_get(json_object_get(j, "content"), 0);
    CHECK_EQ_STR(sget(block, "type"), "text");
    CHECK_EQ_STR(sget(block, "text"), "And");
    CHECK_EQ_STR(sget(j, "stop_reason"), "end_turn");
    CHECK(json_is_null(json_object_get(j, "stop_sequence")));
    CHECK_EQ_INT(iget(json_object_get(j, "usage"), "input_tokens"), 7);
    CHECK_EQ_INT(iget(json_object_get(j, "usage"), "output_tokens"), 2);
    json_decref(j);

    r.stop_type = STOP_TYPE_WORD;
    r.stopping_word = "Amen";
    j = load(render_anthropic_message(&meta, &r));
    CHECK_EQ_STR(sget(j, "stop_reason"), "stop_sequence");
    CHECK_EQ_STR(sget(j, "stop_sequence"), "Amen");
    json_decref(j);
    r.stop_type = STOP_TYPE_LIMIT;
    j = load(render_anthropic_message(&meta, &r));
    CHECK_EQ_STR(sget(j, "stop_reason"), "max_tokens");
    json_decref(j);

    j = load(render_anthropic_count(42));
    CHECK_EQ_INT(iget(j, "input_tokens"), 42);
    json_decref(j);

    struct api_error err;
    api_error_set(&err, 400, "invalid_request_error", "max_tokens", "max_tokens: required");
    char *body = anthropic_error_render(&err);
    CHECK_EQ_STR(body, "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"max_tokens: required\"}}");
    free(body);
}

static int names_are(struct sse_event *ev, int n, const char *const *names) {
    int ok = 1;
    for (int i = 0; i < n; i++) {
        json_t *d = ev[i].data ? json_loads(ev[i].data, 0, NULL) : NULL;
        if (!d || strcmp(ev[i].name, names[i]) || strcmp(sget(d, "type"), names[i])) ok = 0;
        json_decref(d);
    }
    return ok;
}

static void free_events(struct sse_event *ev, int n) {
    for (int i = 0; i < n; i++) free(ev[i].data);
}

TEST(anthropic_render_tool_use_whole_and_streamed) {
    struct tool_call calls[1] = {{.id = "call_A", .name = "f", .args = "{\"a\":1}", .args_len = 7}};
    struct completion_result r = {.text = "", .text_len = 0, .tool_calls = calls, .n_tool_calls = 1,
                                  .made_tool_calls = true, .stop_type = STOP_TYPE_EOS};
    json_t *j = load(render_anthropic_message(&meta, &r));
    CHECK(j);
    CHECK_EQ_STR(sget(j, "stop_reason"), "tool_use");
    json_t *content = json_object_get(j, "content");
    CHECK_EQ_INT(json_array_size(content), 1); /* no text: the call only */
    json_t *b = json_array_get(content, 0);
    CHECK_EQ_STR(sget(b, "type"), "tool_use");
    CHECK_EQ_STR(sget(b, "id"), "call_A");
    CHECK_EQ_STR(sget(b, "name"), "f");
    CHECK_EQ_INT(iget(json_object_get(b, "input"), "a"), 1);
    json_decref(j);
    r.stop_type = STOP_TYPE_LIMIT; /* cut off: max_tokens wins */
    j = load(render_anthropic_message(&meta, &r));
    CHECK_EQ_STR(sget(j, "stop_reason"), "max_tokens");
    json_decref(j);
    r.stop_type = STOP_TYPE_EOS;

    struct anthropic_stream st = {0};
    struct sse_event ev[SSE_EVENTS_MAX];
    int n = anthropic_tools_open(&meta, 5, ev);
    CHECK_EQ_INT(n, 2);
    CHECK(names_are(ev, n, (const char *const[]){"message_start", "ping"}));
    free_events(ev, n);
    n = anthropic_tools_text(&st, "Hi", 2, ev);
    CHECK_EQ_INT(n, 2);
    CHECK(names_are(ev, n, (const char *const[]){"content_block_start", "content_block_delta"}));
    free_events(ev, n);
    n = anthropic_tools_call(&st, "call_A", "f", "{\"a\"", 4, ev);
    CHECK_EQ_INT(n, 3);
    CHECK(names_are(ev, n, (const char *const[]){"content_block_stop", "content_block_start", "content_block_delta"}));
    json_t *start = load(ev[1].data), *delta = load(ev[2].data);
    ev[1].data = ev[2].data = NULL;
    CHECK_EQ_INT(iget(start, "index"), 1);
    CHECK_EQ_STR(sget(json_object_get(start, "content_block"), "type"), "tool_use");
    CHECK_EQ_STR(sget(json_object_get(start, "content_block"), "id"), "call_A");
    CHECK(json_is_object(json_object_get(json_object_get(start, "content_block"), "input")));
    CHECK_EQ_INT(iget(delta, "index"), 1);
    CHECK_EQ_STR(sget(json_object_get(delta, "delta"), "type"), "input_json_delta");
    CHECK_EQ_STR(sget(json_object_get(delta, "delta"), "partial_json"), "{\"a\"");
    json_decref(start);
    json_decref(delta);
    free_events(ev, n);
    n = anthropic_tools_call(&st, NULL, NULL, ":1}", 3, ev);
    CHECK_EQ_INT(n, 1);
    free_events(ev, n);
    n = anthropic_tools_close(&st, &r, ev);
    CHECK_EQ_INT(n, 3);
    CHECK(names_are(ev, n, (const char *const[]){"content_block_stop", "message_delta", "message_stop"}));
    json_t *md = load(ev[1].data);
    ev[1].data = NULL;
    CHECK_EQ_STR(sget(json_object_get(md, "delta"), "stop_reason"), "tool_use");
    json_decref(md);
    free_events(ev, n);

    struct anthropic_stream empty = {0}; /* nothing came: one empty text block */
    r.made_tool_calls = false;
    n = anthropic_tools_close(&empty, &r, ev);
    CHECK_EQ_INT(n, 4);
    CHECK(names_are(ev, n, (const char *const[]){"content_block_start", "content_block_stop", "message_delta",
                                                 "message_stop"}));
    free_events(ev, n);
}

TEST(anthropic_stream_events_in_order) {
    struct sse_event ev[SSE_EVENTS_MAX];
    int n = anthropic_stream_open(&meta, 7, ev);
    CHECK_EQ_INT(n, 3);
    CHECK(names_are(ev, n, (const char *const[]){"message_start", "content_block_start", "ping"}));
    json_t *root = load(ev[0].data), *start = json_object_get(root, "message");
    ev[0].data = NULL;
    CHECK_EQ_STR(sget(start, "id"), "msg_abc");
    CHECK_EQ_INT(json_array_size(json_object_get(start, "content")), 0);
    CHECK(json_is_null(json_object_get(start, "stop_reason")));
    CHECK_EQ_INT(iget(json_object_get(start, "usage"), "input_tokens"), 7);
    json_decref(root);
    free_events(ev, n);

    n = anthropic_stream_text(" And", 4, ev);
    CHECK(names_are(ev, n, (const char *const[]){"content_block_delta"}));
    json_t *d = load(ev[0].data);
    CHECK_EQ_INT(iget(d, "index"), 0);
    CHECK_EQ_STR(sget(json_object_get(d, "delta"), "type"), "text_delta");
    CHECK_EQ_STR(sget(json_object_get(d, "delta"), "text"), " And");
    json_decref(d);

    struct completion_result r = {.text = " And", .text_len = 4, .tokens_predicted = 3, .stop_type = STOP_TYPE_WORD,
                                  .stopping_word = "\n"};
    n = anthropic_stream_close(&r, ev);
    CHECK_EQ_INT(n, 3);
    CHECK(names_are(ev, n, (const char *const[]){"content_block_stop", "message_delta", "message_stop"}));
    json_t *md = load(ev[1].data);
    ev[1].data = NULL;
    CHECK_EQ_STR(sget(json_object_get(md, "delta"), "stop_reason"), "stop_sequence");
    CHECK_EQ_STR(sget(json_object_get(md, "delta"), "stop_sequence"), "\n");
    CHECK_EQ_INT(iget(json_object_get(md, "usage"), "output_tokens"), 3);
    json_decref(md);
    free_events(ev, n);

    struct api_error err;
    api_error_set(&err, 503, NULL, NULL, "busy");
    n = anthropic_stream_error(&err, ev);
    CHECK(names_are(ev, n, (const char *const[]){"error"}));
    CHECK_EQ_STR(ev[0].data, "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"busy\"}}");
    free_events(ev, n);
}

/* --- the endpoints, over the repository's model -------------------------------------------------- */

TEST(anthropic_endpoints_stream_count_and_errors) {
    struct fake_serving fs;
    CHECK_EQ_INT(fake_serving_open(&fs, NULL), 0);
    const char *body = "{\"max_tokens\":6,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":\"And God said\"}]";
    char whole_body[256], stream_body[256];
    snprintf(whole_body, sizeof whole_body, "%s}", body);
    snprintf(stream_body, sizeof stream_body, "%s,\"stream\":true}", body);
    struct fake_http f;
    fake_http_init(&f, "POST", "/v1/messages", whole_body);
    CHECK_EQ_INT(fake_serving_request(&fs, &f), 0);
    CHECK_EQ_INT(f.status, 200);
    json_t *whole = json_loads(f.body, 0, NULL);
    CHECK(whole);
    CHECK_EQ_STR(sget(whole, "model"), "kjv-tiny-q8_0.gguf"); /* none asked for: the served model */
    CHECK_EQ_STR(sget(whole, "stop_reason"), "max_tokens");
    const char *text = sget(json_array_get(json_object_get(whole, "content"), 0), "text");
    long long n_in = iget(json_object_get(whole, "usage"), "input_tokens");
    CHECK(text && *text && n_in > 3);
    fake_http_free(&f);

    fake_http_init(&f, "POST", "/v1/messages", stream_body);
    CHECK_EQ_INT(fake_serving_request(&fs, &f), 0);
    CHECK_EQ_STR(f.content_type, "text/event-stream");
    CHECK_EQ_INT(f.ends, 1);
    CHECK(f.n_events >= 8);
    CHECK_EQ_STR(f.event_names[0], "message_start");
    CHECK_EQ_STR(f.event_names[f.n_events - 1], "message_stop");
    char streamed[256] = "";
    for (int i = 0; i < f.n_events; i++) {
        CHECK(f.event_names[i] != NULL);
        if (strcmp(f.event_names[i], "content_block_delta")) continue;
        json_t *d = json_loads(f.events[i], 0, NULL);
        strncat(streamed, sget(json_object_get(d, "delta"), "text"), sizeof streamed - strlen(streamed) - 1);
        json_decref(d);
    }
    CHECK_EQ_STR(streamed, text);
    fake_http_free(&f);

    fake_http_init(&f, "POST", "/v1/messages/count_tokens",
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"And God said\"}]}");
    CHECK_EQ_INT(fake_serving_request(&fs, &f), 0);
    CHECK_EQ_INT(f.status, 200);
    json_t *c = json_loads(f.body, 0, NULL);
    CHECK_EQ_INT(iget(c, "input_tokens"), n_in);
    json_decref(c);
    json_decref(whole);
    fake_http_free(&f);

    fake_http_init(&f, "POST", "/v1/messages", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");
    CHECK_EQ_INT(fake_serving_request(&fs, &f), 0);
    CHECK_EQ_INT(f.status, 400);
    CHECK_EQ_STR(f.body, "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"max_tokens: required\"}}");
    fake_http_free(&f);
    fake_serving_close(&fs);
}

/* Out of memory anywhere in a parse: -ERR_NOMEM and a 500 (or jansson's syntax error while
 * loading), nothing leaked (the ASan build checks). */
static long alloc_budget;
static void *failing_malloc(size_t size) { return alloc_budget-- > 0 ? malloc(size) : NULL; }

TEST(anthropic_out_of_memory) {
    const char *body = "{\"max_tokens\":3,\"system\":[{\"type\":\"text\",\"text\":\"S\"}],\"stop_sequences\":[\"x\"],"
                       "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]}]}";
    json_malloc_t saved_malloc;
    json_free_t saved_free;
    json_get_alloc_funcs(&saved_malloc, &saved_free);
    int rc = -1, nomem = 0;
    for (long budget = 0; budget < 5000 && rc != 0; budget++) {
        struct completion_params p;
        struct api_error err;
        alloc_budget = budget;
        json_set_alloc_funcs(failing_malloc, free);
        rc = parse(&p, API_ANTHROPIC, body, &err);
        json_set_alloc_funcs(saved_malloc, saved_free);
        if (rc == -ERR_INVAL) {
            CHECK(strncmp(err.message, "invalid JSON", 12) == 0);
        } else if (rc != 0) {
            CHECK_EQ_INT(rc, -ERR_NOMEM);
            CHECK_EQ_INT(err.status, 500);
            nomem++;
        } else {
            CHECK_EQ_INT(p.n_messages, 2);
        }
        if (rc != 0) CHECK(p.arena_ == NULL && p.messages == NULL);
        completion_params_free(&p);
    }
    CHECK_EQ_INT(rc, 0);
    CHECK(nomem >= 3);
    struct completion_result r = {.text = "x", .text_len = 1, .stop_type = STOP_TYPE_EOS};
    char *json = NULL;
    for (long budget = 0; budget < 5000 && !json; budget++) {
        alloc_budget = budget;
        json_set_alloc_funcs(failing_malloc, free);
        json = render_anthropic_message(&meta, &r);
        json_set_alloc_funcs(saved_malloc, saved_free);
    }
    CHECK(json != NULL);
    free(json);
}
