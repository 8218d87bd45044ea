/* responses_test.c: POST /v1/responses: the body's forms and refusals (api/responses.c through
 * completion_params_parse), the response object and its typed stream events, and the endpoint
 * through the router over the repository's model (fake responder, no sockets). */
#include "test.h"
#include "api/fake.h"
#include "api/params.h"
#include "api/responses.h"
#include "common/err.h"

#include <jansson.h>
#include <stdlib.h>

static int parse(struct completion_params *p, const char *body, struct api_error *err) {
    return completion_params_parse(p, API_OAI_RESPONSES, body, strlen(body), NULL, err);
}

TEST(responses_parse_text_items_and_instructions) {
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, "{\"input\":\"And God said\"}", &err), 0);
    CHECK_EQ_INT(p.n_messages, 1);
    CHECK_EQ_STR(p.messages[0].role, "user");
    CHECK_EQ_STR(p.messages[0].content, "And God said");
    CHECK_EQ_INT(p.n_predict, -1); /* defaults: params.h's */
    CHECK_EQ_INT(p.top_k, 40);
    CHECK(!p.stream && p.instructions == NULL && p.model == NULL && p.n == 1);
    completion_params_free(&p);

    CHECK_EQ_INT(parse(&p,
                       "{\"model\":\"m\",\"instructions\":\"Be brief.\",\"max_output_tokens\":5,\"temperature\":0.5,"
                       "\"top_p\":0.5,\"stream\":true,\"store\":true,\"reasoning\":{},\"tools\":[],"
                       "\"text\":{\"format\":{\"type\":\"text\"}},\"input\":["
                       "{\"type\":\"message\",\"role\":\"developer\",\"content\":\"Dev.\"},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},"
                       "{\"type\":\"input_text\",\"text\":\"b\"}]},"
                       "{\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"c\",\"annotations\":[]}]}]}",
                       &err),
                 0);
    CHECK_EQ_INT(p.n_messages, 4);
    CHECK_EQ_STR(p.messages[0].role, "system"); /* the instructions first */
    CHECK_EQ_STR(p.messages[0].content, "Be brief.");
    CHECK_EQ_STR(p.messages[1].role, "developer");
    CHECK_EQ_STR(p.messages[2].content, "ab");
    CHECK_EQ_STR(p.messages[3].role, "assistant");
    CHECK_EQ_STR(p.messages[3].content, "c");
    CHECK_EQ_STR(p.instructions, "Be brief.");
    CHECK_EQ_STR(p.model, "m");
    CHECK_EQ_INT(p.n_predict, 5);
    CHECK(p.temperature == 0.5f && p.top_p == 0.5f && p.stream);
    completion_params_free(&p);
}

TEST(responses_parse_refusals_name_the_field) {
    static const struct {
        const char *body, *param, *word;
    } cases[] = {
        {"{}", "input", "required"},
        {"{\"input\":\"\"}", "input", "empty"},
        {"{\"input\":[]}", "input", "empty"},
        {"{\"input\":5}", "input", "string"},
        {"{\"input\":[{\"type\":\"function_call\",\"name\":\"f\"}]}", "input[0].call_id", "required"},
        {"{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":{}}]}",
         "input[0].arguments", "string"},
        {"{\"input\":[{\"role\":\"user\",\"content\":\"x\"},{\"type\":\"function_call_output\",\"output\":\"y\"}]}",
         "input[1].call_id", "required"},
        {"{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\"}]}", "input[0].output", "required"},
        {"{\"input\":[{\"type\":\"web_search_call\"}]}", "input[0]", "\"web_search_call\""},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\"}]}]}", "input[0].content[0]",
         "\"input_image\""},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\"}]}]}", "input[0].content[0]", "text"},
        {"{\"input\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "input[0].role", "\"tool\""},
        {"{\"input\":[{\"content\":\"x\"}]}", "input[0].role", "required"},
        {"{\"input\":[{\"role\":\"user\"}]}", "input[0].content", "required"},
        {"{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens", "[1,"},
        {"{\"input\":\"x\",\"temperature\":2.5}", "temperature", "[0, 2]"},
        {"{\"input\":\"x\",\"top_p\":-1}", "top_p", "[0, 1]"},
        {"{\"input\":\"x\",\"instructions\":7}", "instructions", "string"},
        {"{\"input\":\"x\",\"tools\":[{\"type\":\"function\"}]}", "tools[0].name", "required"},
        {"{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", "tools[0]", "\"web_search\""},
        {"{\"input\":\"x\",\"tools\":{}}", "tools", "array"},
        {"{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":3}]}",
         "tools[0].parameters", "Schema"},
        {"{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"tool_choice\":\"sometimes\"}",
         "tool_choice", "\"auto\""},
        {"{\"input\":\"x\",\"tool_choice\":\"required\"}", "tool_choice", "needs tools"},
        {"{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],"
         "\"tool_choice\":{\"type\":\"function\",\"name\":\"g\"}}", "tool_choice.name", "\"g\""},
        {"{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"parallel_tool_calls\":1}",
         "parallel_tool_calls", "bool"},
        {"{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\"}}}", "text.format", "text"},
        {"{\"input\":\"x\",\"previous_response_id\":\"resp_1\"}", "previous_response_id", "not stored"},
        {"{\"input\":\"x\",\"conversation\":\"c\"}", "conversation", "not stored"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct completion_params p;
        struct api_error err;
        CHECK_EQ_INT(parse(&p, cases[i].body, &err), -ERR_INVAL);
        CHECK_EQ_INT(err.status, 400);
        CHECK_EQ_STR(err.param, cases[i].param);
        if (!strstr(err.message, cases[i].word)) {
            fprintf(stderr, "case %zu: %s\n", i, err.message);
            CHECK(0);
        }
        CHECK(p.messages == NULL && p.arena_ == NULL); /* nothing left to free */
    }
}

TEST(responses_parse_tools_and_call_items) {
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p,
                       "{\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"d\","
                       "\"parameters\":{\"type\":\"object\"},\"strict\":true},{\"type\":\"function\",\"name\":\"f\"}],"
                       "\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},\"parallel_tool_calls\":false,\"input\":["
                       "{\"role\":\"user\",\"content\":\"Weather?\"},"
                       "{\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"get_weather\",\"arguments\":\"{}\"},"
                       "{\"type\":\"function_call\",\"call_id\":\"call_2\",\"name\":\"f\",\"arguments\":\"{}\"},"
                       "{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"21C\"},"
                       "{\"type\":\"function_call_output\",\"call_id\":\"call_2\","
                       "\"output\":[{\"type\":\"input_text\",\"text\":\"ok\"}]}]}",
                       &err),
                 0);
    CHECK_EQ_INT(p.tool_choice, TOOL_CHOICE_NAMED);
    CHECK_EQ_STR(p.tool_name, "f");
    CHECK(!p.parallel_tool_calls);
    const json_t *fn = json_object_get(json_array_get(p.chat.tools, 0), "function");
    CHECK_EQ_STR(json_string_value(json_object_get(fn, "name")), "get_weather");
    CHECK_EQ_STR(json_string_value(json_object_get(fn, "description")), "d");
    CHECK(json_is_object(json_object_get(fn, "parameters")));
    CHECK_EQ_INT(json_array_size(p.chat.messages), 4); /* user, assistant with both calls, 2 tool */
    const json_t *a = json_array_get(p.chat.messages, 1);
    CHECK_EQ_STR(json_string_value(json_object_get(a, "role")), "assistant");
    const json_t *calls = json_object_get(a, "tool_calls");
    CHECK_EQ_INT(json_array_size(calls), 2);
    CHECK_EQ_STR(json_string_value(json_object_get(json_array_get(calls, 1), "id")), "call_2");
    CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments")),
                 "{}");
    const json_t *tm = json_array_get(p.chat.messages, 3);
    CHECK_EQ_STR(json_string_value(json_object_get(tm, "role")), "tool");
    CHECK_EQ_STR(json_string_value(json_object_get(tm, "tool_call_id")), "call_2");
    CHECK_EQ_STR(json_string_value(json_object_get(tm, "content")), "ok");
    completion_params_free(&p);

    CHECK_EQ_INT(parse(&p, "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}]}", &err), 0);
    CHECK_EQ_INT(p.tool_choice, TOOL_CHOICE_AUTO);
    CHECK(p.parallel_tool_calls);
    completion_params_free(&p);
    CHECK_EQ_INT(parse(&p, "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],"
                           "\"tool_choice\":\"none\"}", &err), 0);
    CHECK_EQ_INT(p.tool_choice, TOOL_CHOICE_NONE);
    completion_params_free(&p);
}

static json_t *load(char *text) {
    json_t *j = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    return j;
}

static const char *sget(const json_t *o, const char *key) { return json_string_value(json_object_get(o, key)); }
static long long iget(const json_t *o, const char *key) { return json_integer_value(json_object_get(o, key)); }

static const struct response_meta meta = {.id = "resp_abc", .created = 1700000000, .model = "kjv", .n_choices = 1};

TEST(responses_render_object_completed_and_incomplete) {
    struct completion_params p;
    completion_params_defaults(&p, API_OAI_RESPONSES);
    p.instructions = "Be brief.";
    struct completion_result r = {.text = "In the beginning", .text_len = 16, .tokens_predicted = 4,
                                  .tokens_evaluated = 10, .tokens_cached = 3, .stop_type = STOP_TYPE_EOS};
    json_t *j = load(render_response(&meta, &p, &r));
    CHECK(j);
    CHECK_EQ_STR(sget(j, "id"), "resp_abc");
    CHECK_EQ_STR(sget(j, "object"), "response");
    CHECK_EQ_INT(iget(j, "created_at"), 1700000000);
    CHECK_EQ_STR(sget(j, "status"), "completed");
    CHECK(json_is_null(json_object_get(j, "incomplete_details")));
    CHECK(json_is_null(json_object_get(j, "max_output_tokens"))); /* none asked for */
    CHECK_EQ_STR(sget(j, "instructions"), "Be brief.");
    CHECK_EQ_STR(sget(j, "model"), "kjv");
    json_t *item = json_array_get(json_object_get(j, "output"), 0);
    CHECK_EQ_STR(sget(item, "id"), "msg_abc");
    CHECK_EQ_STR(sget(item, "type"), "message");
    CHECK_EQ_STR(sget(item, "role"), "assistant");
    CHECK_EQ_STR(sget(item, "status"), "completed");
    json_t *part = json_array_get(json_object_get(item, "content"), 0);
    CHECK_EQ_STR(sget(part, "type"), "output_text");
    CHECK_EQ_STR(sget(part, "text"), "In the beginning");
    CHECK(json_is_array(json_object_get(part, "annotations")));
    json_t *u = json_object_get(j, "usage");
    CHECK_EQ_INT(iget(u, "input_tokens"), 10);
    CHECK_EQ_INT(iget(u, "output_tokens"), 4);
    CHECK_EQ_INT(iget(u, "total_tokens"), 14);
    CHECK_EQ_INT(iget(json_object_get(u, "input_tokens_details"), "cached_tokens"), 3);
    json_decref(j);

    p.n_predict = 4;
    r.stop_type = STOP_TYPE_LIMIT;
    j = load(render_response(&meta, &p, &r));
    CHECK_EQ_STR(sget(j, "status"), "incomplete");
    CHECK_EQ_STR(sget(json_object_get(j, "incomplete_details"), "reason"), "max_output_tokens");
    CHECK_EQ_INT(iget(j, "max_output_tokens"), 4);
    CHECK_EQ_STR(sget(json_array_get(json_object_get(j, "output"), 0), "status"), "incomplete");
    json_decref(j);
}

/* The events' names, checked against each data's type and sequence_number (from *seq0). */
static int check_events(struct test_case *t, struct sse_event *ev, int n, const char *const *names, int64_t seq0) {
    int ok = 1;
    for (int i = 0; i < n; i++) {
        json_t *d = ev[i].data ? json_loads(ev[i].data, 0, NULL) : NULL;
        if (!d || strcmp(ev[i].name, names[i]) || strcmp(sget(d, "type"), names[i]) ||
            iget(d, "sequence_number") != seq0 + i) {
            fprintf(stderr, "event %d: %s %s\n", i, ev[i].name, ev[i].data ? ev[i].data : "(null)");
            ok = 0;
        }
        json_decref(d);
    }
    (void)t;
    return ok;
}

static void free_events(struct sse_event *ev, int n) {
    for (int i = 0; i < n; i++) free(ev[i].data);
}

TEST(responses_stream_events_in_order) {
    struct completion_params p;
    completion_params_defaults(&p, API_OAI_RESPONSES);
    struct sse_event ev[SSE_EVENTS_MAX];
    int64_t seq = 0;
    int n = responses_stream_open(&seq, &meta, &p, ev);
    CHECK_EQ_INT(n, 4);
    CHECK(check_events(t, ev, n, (const char *const[]){"response.created", "response.in_progress",
                                                       "response.output_item.added", "response.content_part.added"}, 0));
    json_t *created = load(ev[0].data);
    ev[0].data = NULL;
    CHECK_EQ_STR(sget(json_object_get(created, "response"), "status"), "in_progress");
    CHECK_EQ_INT(json_array_size(json_object_get(json_object_get(created, "response"), "output")), 0);
    CHECK(json_is_null(json_object_get(json_object_get(created, "response"), "usage")));
    json_decref(created);
    json_t *part = load(ev[3].data);
    ev[3].data = NULL;
    CHECK_EQ_STR(sget(part, "item_id"), "msg_abc");
    CHECK_EQ_INT(iget(part, "output_index"), 0);
    CHECK_EQ_INT(iget(part, "content_index"), 0);
    CHECK_EQ_STR(sget(json_object_get(part, "part"), "text"), "");
    json_decref(part);
    free_events(ev, n);

    n = responses_stream_text(&seq, &meta, " In", 3, ev);
    CHECK_EQ_INT(n, 1);
    CHECK(check_events(t, ev, n, (const char *const[]){"response.output_text.delta"}, 4));
    json_t *delta = load(ev[0].data);
    CHECK_EQ_STR(sget(delta, "delta"), " In");
    CHECK_EQ_STR(sget(delta, "item_id"), "msg_abc");
    json_decref(delta);

    struct completion_result r = {.text = " In", .text_len = 3, .tokens_predicted = 1, .tokens_evaluated = 5,
                                  .stop_type = STOP_TYPE_EOS};
    n = responses_stream_close(&seq, &meta, &p, &r, ev);
    CHECK_EQ_INT(n, 4);
    CHECK(check_events(t, ev, n, (const char *const[]){"response.output_text.done", "response.content_part.done",
                                                       "response.output_item.done", "response.completed"}, 5));
    json_t *done = load(ev[0].data), *final = load(ev[3].data);
    ev[0].data = ev[3].data = NULL;
    CHECK_EQ_STR(sget(done, "text"), " In");
    CHECK_EQ_STR(sget(json_object_get(final, "response"), "status"), "completed");
    CHECK_EQ_INT(iget(json_object_get(json_object_get(final, "response"), "usage"), "total_tokens"), 6);
    json_decref(done);
    json_decref(final);
    free_events(ev, n);

    r.stop_type = STOP_TYPE_LIMIT;
    n = responses_stream_close(&seq, &meta, &p, &r, ev);
    CHECK_EQ_STR(ev[3].name, "response.incomplete");
    free_events(ev, n);

    struct api_error err;
    api_error_set(&err, 500, "server_error", NULL, "generation failed");
    n = responses_stream_error(&seq, &err, ev);
    CHECK(check_events(t, ev, n, (const char *const[]){"error"}, 13));
    json_t *e = load(ev[0].data);
    CHECK_EQ_STR(sget(e, "code"), "server_error");
    CHECK_EQ_STR(sget(e, "message"), "generation failed");
    CHECK(json_is_null(json_object_get(e, "param")));
    json_decref(e);
}

TEST(responses_render_function_calls_whole_and_streamed) {
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\","
                           "\"parameters\":{\"type\":\"object\"}}],\"tool_choice\":\"required\"}", &err), 0);
    struct tool_call calls[2] = {{.id = "call_A", .name = "f", .args = "{\"a\":1}", .args_len = 7},
                                 {.id = "call_B", .name = "f", .args = "{}", .args_len = 2}};
    struct completion_result r = {.text = "", .text_len = 0, .tool_calls = calls, .n_tool_calls = 2,
                                  .stop_type = STOP_TYPE_EOS};
    json_t *j = load(render_response(&meta, &p, &r));
    CHECK(j);
    json_t *out = json_object_get(j, "output");
    CHECK_EQ_INT(json_array_size(out), 2); /* no text: the calls only */
    json_t *c = json_array_get(out, 0);
    CHECK_EQ_STR(sget(c, "type"), "function_call");
    CHECK_EQ_STR(sget(c, "id"), "fc_A");
    CHECK_EQ_STR(sget(c, "call_id"), "call_A");
    CHECK_EQ_STR(sget(c, "name"), "f");
    CHECK_EQ_STR(sget(c, "arguments"), "{\"a\":1}");
    CHECK_EQ_STR(sget(c, "status"), "completed");
    CHECK_EQ_STR(sget(json_array_get(out, 1), "call_id"), "call_B");
    CHECK_EQ_STR(sget(j, "tool_choice"), "required");
    CHECK_EQ_STR(sget(json_array_get(json_object_get(j, "tools"), 0), "name"), "f");
    CHECK(json_is_true(json_object_get(j, "parallel_tool_calls")));
    json_decref(j);
    r.text = "Hi";
    r.text_len = 2;
    j = load(render_response(&meta, &p, &r));
    out = json_object_get(j, "output");
    CHECK_EQ_INT(json_array_size(out), 3); /* text first */
    CHECK_EQ_STR(sget(json_array_get(out, 0), "type"), "message");
    json_decref(j);

    /* streamed: text, then a call in two pieces, then the next call */
    struct responses_stream st = {0};
    struct sse_event ev[SSE_EVENTS_MAX];
    int64_t seq = 0;
    int n = responses_tools_open(&seq, &meta, &p, ev);
    CHECK_EQ_INT(n, 2);
    CHECK(check_events(t, ev, n, (const char *const[]){"response.created", "response.in_progress"}, 0));
    free_events(ev, n);
    n = responses_tools_text(&seq, &st, &meta, "Hi", 2, ev);
    CHECK_EQ_INT(n, 3);
    CHECK(check_events(t, ev, n, (const char *const[]){"response.output_item.added", "response.content_part.added",
                                                       "response.output_text.delta"}, 2));
    free_events(ev, n);
    n = responses_tools_call(&seq, &st, &meta, "call_A", "f", "{\"a\"", 4, ev);
    CHECK_EQ_INT(n, 5);
    CHECK(check_events(t, ev, n, (const char *const[]){"response.output_text.done", "response.content_part.done",
                                                       "response.output_item.done", "response.output_item.added",
                                                       "response.function_call_arguments.delta"}, 5));
    json_t *added = load(ev[3].data);
    ev[3].data = NULL;
    CHECK_EQ_INT(iget(added, "output_index"), 1);
    CHECK_EQ_STR(sget(json_object_get(added, "item"), "status"), "in_progress");
    CHECK_EQ_STR(sget(json_object_get(added, "item"), "arguments"), "");
    json_decref(added);
    free_events(ev, n);
    n = responses_tools_call(&seq, &st, &meta, NULL, NULL, ":1}", 3, ev);
    CHECK_EQ_INT(n, 1);
    CHECK(check_events(t, ev, n, (const char *const[]){"response.function_call_arguments.delta"}, 10));
    json_t *d = load(ev[0].data);
    ev[0].data = NULL;
    CHECK_EQ_STR(sget(d, "item_id"), "fc_A");
    CHECK_EQ_STR(sget(d, "delta"), ":1}");
    json_decref(d);
    free_events(ev, n);
    n = responses_tools_call(&seq, &st, &meta, "call_B", "f", "{}", 2, ev);
    CHECK_EQ_INT(n, 4);
    CHECK(check_events(t, ev, n, (const char *const[]){"response.function_call_arguments.done",
                                                       "response.output_item.done", "response.output_item.added",
                                                       "response.function_call_arguments.delta"}, 11));
    d = load(ev[0].data);
    ev[0].data = NULL;
    CHECK_EQ_STR(sget(d, "arguments"), "{\"a\":1}");
    json_decref(d);
    free_events(ev, n);
    n = responses_tools_close(&seq, &st, &meta, &p, &r, ev);
    CHECK_EQ_INT(n, 3);
    CHECK(check_events(t, ev, n, (const char *const[]){"response.function_call_arguments.done",
                                                       "response.output_item.done", "response.completed"}, 15));
    json_t *final = load(ev[2].data);
    ev[2].data = NULL;
    out = json_object_get(json_object_get(final, "response"), "output");
    CHECK_EQ_INT(json_array_size(out), 3);
    CHECK_EQ_STR(sget(json_array_get(json_object_get(json_array_get(out, 0), "content"), 0), "text"), "Hi");
    CHECK_EQ_STR(sget(json_array_get(out, 1), "arguments"), "{\"a\":1}");
    CHECK_EQ_STR(sget(json_array_get(out, 2), "call_id"), "call_B");
    json_decref(final);
    free_events(ev, n);
    responses_stream_free(&st);
    completion_params_free(&p);
}

TEST(responses_render_reasoning_whole_and_streamed) {
    struct completion_params p;
    struct api_error err;
    /* a reasoning item sent back is accepted and left out of the prompt */
    CHECK_EQ_INT(parse(&p, "{\"input\":[{\"role\":\"user\",\"content\":\"q\"},{\"type\":\"reasoning\","
                           "\"id\":\"rs_1\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"t\"}]},"
                           "{\"role\":\"assistant\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"}]}",
                       &err), 0);
    CHECK_EQ_INT(p.reasoning_format, -1); /* the server's --reasoning-format decides */
    completion_params_free(&p);
    CHECK_EQ_INT(parse(&p, "{\"input\":\"x\"}", &err), 0);
    struct completion_result r = {.text = "Hi", .text_len = 2, .reasoning = "hmm", .reasoning_len = 3,
                                  .stop_type = STOP_TYPE_EOS};
    json_t *j = load(render_response(&meta, &p, &r));
    CHECK(j);
    json_t *out = json_object_get(j, "output");
    CHECK_EQ_INT(json_array_size(out), 2); /* the reasoning, then the message */
    json_t *rs = json_array_get(out, 0);
    CHECK_EQ_STR(sget(rs, "type"), "reasoning");
    CHECK_EQ_STR(sget(rs, "id"), "rs_abc");
    CHECK_EQ_INT(json_array_size(json_object_get(rs, "summary")), 0);
    CHECK_EQ_STR(sget(json_array_get(json_object_get(rs, "content"), 0), "type"), "reasoning_text");
    CHECK_EQ_STR(sget(json_array_get(json_object_get(rs, "content"), 0), "text"), "hmm");
    CHECK_EQ_STR(sget(json_array_get(out, 1), "type"), "message");
    CHECK_EQ_STR(sget(json_array_get(out, 1), "id"), "msg_abc_1");
    json_decref(j);

    /* streamed: reasoning in two pieces, then text */
    struct responses_stream st = {0};
    struct sse_event ev[SSE_EVENTS_MAX];
    int64_t seq = 0;
    int n = responses_tools_open(&seq, &meta, &p, ev);
    free_events(ev, n);
    n = responses_tools_reasoning(&seq, &st, &meta, "hm", 2, ev);
    CHECK_EQ_INT(n, 2);
    CHECK(check_events(t, ev, n, (const char *const[]){"response.output_item.added", "response.reasoning_text.delta"},
                       2));
    json_t *added = load(ev[0].data), *d = load(ev[1].data);
    ev[0].data = ev[1].data = NULL;
    CHECK_EQ_STR(sget(json_object_get(added, "item"), "type"), "reasoning");
    CHECK_EQ_STR(sget(json_object_get(added, "item"), "status"), "in_progress");
    CHECK_EQ_INT(iget(added, "output_index"), 0);
    CHECK_EQ_STR(sget(d, "item_id"), "rs_abc");
    CHECK_EQ_INT(iget(d, "output_index"), 0);
    CHECK_EQ_INT(iget(d, "content_index"), 0);
    CHECK_EQ_STR(sget(d, "delta"), "hm");
    json_decref(added);
    json_decref(d);
    free_events(ev, n);
    n = responses_tools_reasoning(&seq, &st, &meta, "m", 1, ev);
    CHECK(check_events(t, ev, n, (const char *const[]){"response.reasoning_text.delta"}, 4));
    free_events(ev, n);
    n = responses_tools_text(&seq, &st, &meta, "Hi", 2, ev);
    CHECK_EQ_INT(n, 5);
    CHECK(check_events(t, ev, n, (const char *const[]){"response.reasoning_text.done", "response.output_item.done",
                                                       "response.output_item.added", "response.content_part.added",
                                                       "response.output_text.delta"}, 5));
    json_t *rdone = load(ev[0].data), *idone = load(ev[1].data), *madded = load(ev[2].data);
    ev[0].data = ev[1].data = ev[2].data = NULL;
    CHECK_EQ_STR(sget(rdone, "text"), "hmm");
    CHECK_EQ_STR(sget(rdone, "item_id"), "rs_abc");
    CHECK_EQ_STR(sget(json_object_get(idone, "item"), "status"), "completed");
    CHECK_EQ_STR(sget(json_array_get(json_object_get(json_object_get(idone, "item"), "content"), 0), "text"), "hmm");
    CHECK_EQ_INT(iget(madded, "output_index"), 1);
    CHECK_EQ_STR(sget(json_object_get(madded, "item"), "id"), "msg_abc_1");
    json_decref(rdone);
    json_decref(idone);
    json_decref(madded);
    free_events(ev, n);
    n = responses_tools_close(&seq, &st, &meta, &p, &r, ev);
    CHECK(check_events(t, ev, n, (const char *const[]){"response.output_text.done", "response.content_part.done",
                                                       "response.output_item.done", "response.completed"}, 10));
    json_t *final = load(ev[3].data);
    ev[3].data = NULL;
    out = json_object_get(json_object_get(final, "response"), "output");
    CHECK_EQ_INT(json_array_size(out), 2);
    CHECK_EQ_STR(sget(json_array_get(out, 0), "type"), "reasoning");
    CHECK_EQ_STR(sget(json_array_get(out, 1), "type"), "message");
    json_decref(final);
    free_events(ev, n);
    responses_stream_free(&st);
    completion_params_free(&p);
}

/* --- the endpoint, over the repository's model --------------------------------------------------- */

TEST(responses_endpoint_streams_what_it_answers_whole) {
    struct fake_serving fs;
    CHECK_EQ_INT(fake_serving_open(&fs, (const char *const[]){"--alias", "kjv", NULL}), 0);
    struct fake_http f;
    fake_http_init(&f, "POST", "/v1/responses", "{\"input\":\"And God said\",\"max_output_tokens\":6,\"temperature\":0}");
    CHECK_EQ_INT(fake_serving_request(&fs, &f), 0);
    CHECK_EQ_INT(f.status, 200);
    json_t *whole = json_loads(f.body, 0, NULL);
    CHECK(whole);
    CHECK_EQ_STR(sget(whole, "model"), "kjv"); /* --alias */
    const char *text = sget(json_array_get(json_object_get(json_array_get(json_object_get(whole, "output"), 0),
                                                           "content"), 0), "text");
    CHECK(text && *text);
    fake_http_free(&f);

    fake_http_init(&f, "POST", "/v1/responses",
                   "{\"input\":\"And God said\",\"max_output_tokens\":6,\"temperature\":0,\"stream\":true}");
    CHECK_EQ_INT(fake_serving_request(&fs, &f), 0);
    CHECK_EQ_INT(f.status, 200);
    CHECK_EQ_STR(f.content_type, "text/event-stream");
    CHECK_EQ_INT(f.ends, 1);
    CHECK(f.n_events >= 10);
    char streamed[256] = "";
    for (int i = 0; i < f.n_events; i++) {
        json_t *d = json_loads(f.events[i], 0, NULL);
        CHECK(d && f.event_names[i]);
        CHECK_EQ_STR(sget(d, "type"), f.event_names[i]);
        CHECK_EQ_INT(iget(d, "sequence_number"), i);
        if (!strcmp(f.event_names[i], "response.output_text.delta"))
            strncat(streamed, sget(d, "delta"), sizeof streamed - strlen(streamed) - 1);
        json_decref(d);
    }
    CHECK_EQ_STR(f.event_names[0], "response.created");
    CHECK_EQ_STR(f.event_names[f.n_events - 1], "response.incomplete");
    CHECK_EQ_STR(streamed, text);
    json_decref(whole);
    fake_http_free(&f);

    fake_http_init(&f, "POST", "/v1/responses", "{\"input\":[{\"type\":\"function_call\"}]}");
    CHECK_EQ_INT(fake_serving_request(&fs, &f), 0);
    CHECK_EQ_INT(f.status, 400);
    CHECK(strstr(f.body, "\"param\":\"input[0].call_id\""));
    fake_http_free(&f);

    fake_http_init(&f, "GET", "/v1/models/kjv", NULL);
    CHECK_EQ_INT(fake_serving_request(&fs, &f), 0);
    CHECK_EQ_INT(f.status, 200);
    json_t *m = json_loads(f.body, 0, NULL);
    CHECK_EQ_STR(sget(m, "id"), "kjv");
    CHECK_EQ_STR(sget(m, "object"), "model");
    json_decref(m);
    fake_http_free(&f);
    fake_http_init(&f, "GET", "/v1/models/kjv-tiny-q8_0.gguf", NULL); /* the file name: not the id now */
    CHECK_EQ_INT(fake_serving_request(&fs, &f), 0);
    CHECK_EQ_INT(f.status, 404);
    CHECK(strstr(f.body, "\"type\":\"invalid_request_error\"") && strstr(f.body, "\"param\":\"model\""));
    fake_http_free(&f);
    fake_serving_close(&fs);
}

/* Out of memory anywhere in a parse or a render: -ERR_NOMEM and a 500 (or jansson's syntax error
 * while loading), NULL from a renderer, nothing leaked (the ASan build checks). */
static long alloc_budget;
static void *failing_malloc(size_t size) { return alloc_budget-- > 0 ? malloc(size) : NULL; }

TEST(responses_out_of_memory) {
    const char *body = "{\"instructions\":\"I\",\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":"
                       "[{\"type\":\"input_text\",\"text\":\"a\"}]},{\"role\":\"assistant\",\"content\":\"b\"}]}";
    struct completion_result r = {.text = "x", .text_len = 1, .stop_type = STOP_TYPE_EOS};
    json_malloc_t saved_malloc;
    json_free_t saved_free;
    json_get_alloc_funcs(&saved_malloc, &saved_free);
    int rc = -1, nomem = 0;
    for (long budget = 0; budget < 5000 && rc != 0; budget++) {
        struct completion_params p;
        struct api_error err;
        alloc_budget = budget;
        json_set_alloc_funcs(failing_malloc, free);
        rc = parse(&p, body, &err);
        json_set_alloc_funcs(saved_malloc, saved_free);
        if (rc == -ERR_INVAL) {
            CHECK(strncmp(err.message, "invalid JSON", 12) == 0);
        } else if (rc != 0) {
            CHECK_EQ_INT(rc, -ERR_NOMEM);
            CHECK_EQ_INT(err.status, 500);
            nomem++;
        } else {
            CHECK_EQ_INT(p.n_messages, 3);
        }
        if (rc != 0) CHECK(p.arena_ == NULL && p.messages == NULL);
        completion_params_free(&p);
    }
    CHECK_EQ_INT(rc, 0);
    CHECK(nomem >= 3);
    struct completion_params p;
    completion_params_defaults(&p, API_OAI_RESPONSES);
    char *json = NULL;
    for (long budget = 0; budget < 5000 && !json; budget++) {
        struct sse_event ev[SSE_EVENTS_MAX];
        int64_t seq = 0;
        alloc_budget = budget;
        json_set_alloc_funcs(failing_malloc, free);
        int n = responses_stream_close(&seq, &meta, &p, &r, ev);
        json = render_response(&meta, &p, &r);
        json_set_alloc_funcs(saved_malloc, saved_free);
        for (int i = 0; i < n; i++) {
            if (json) CHECK(ev[i].data != NULL); /* enough for the object: enough for the events */
            free(ev[i].data);
        }
    }
    CHECK(json != NULL);
    free(json);
}
