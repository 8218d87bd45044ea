/* generate_test.c: the completion endpoints (api/generate.c) through the router, over the
 * repository's model, with a fake responder and steps run on this thread: no sockets, no loop. */
#include "test.h"
#include "api/fake.h"
#include "common/err.h"
#include "sched/model_engine.h"
#include "sched/sched.h"

#include <jansson.h>
#include <stdlib.h>

/* The reference's greedy continuation of "And God said" (../shared/README.md). */
#define PROMPT "And God said"
#define GREEDY_8 " unto him, Thou shalt not"

static const char *jstr(const json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static long long jint(const json_t *o, const char *key) { return json_integer_value(json_object_get(o, key)); }

TEST(generate_completion_returns_the_reference_text) {
    struct fake_serving fs;
    CHECK_EQ_INT(fake_serving_open(&fs, NULL), 0);
    struct fake_http f;
    fake_http_init(&f, "POST", "/completion", "{\"prompt\":\"" PROMPT "\",\"n_predict\":8,\"temperature\":0}");
    CHECK_EQ_INT(fake_serving_request(&fs, &f), 0);
    CHECK_EQ_INT(f.status, 200);
    CHECK_EQ_STR(f.content_type, "application/json");
    CHECK_EQ_INT(f.ends, 1);
    CHECK(fs.kicks >= 1); /* the submit woke the driver */
    int32_t *ids;
    size_t n_prompt;
    CHECK_EQ_INT(model_engine_tokenize(fs.srv.engine, PROMPT, sizeof PROMPT - 1, true, true, &ids, &n_prompt), 0);
    free(ids);
    json_t *body = json_loads(f.body, 0, NULL);
    CHECK(body);
    CHECK_EQ_STR(jstr(body, "content"), GREEDY_8);
    CHECK_EQ_STR(jstr(body, "stop_type"), "limit");
    CHECK_EQ_INT(jint(body, "tokens_predicted"), 8);
    CHECK_EQ_INT(jint(body, "tokens_evaluated"), (long long)n_prompt);
    CHECK_EQ_STR(jstr(body, "model"), "kjv-tiny-q8_0.gguf");
    json_decref(body);
    fake_http_free(&f);
    fake_serving_close(&fs);
}

TEST(generate_bad_requests_get_400_with_the_error_body) {
    struct fake_serving fs;
    CHECK_EQ_INT(fake_serving_open(&fs, NULL), 0);
    static const struct {
        const char *path, *body, *param; /* param NULL: none named */
    } cases[] = {
        {"/completion", "{not json", NULL},
        {"/completion", "{\"prompt\":\"" PROMPT "\",\"n_predict\":\"many\"}", "n_predict"},
        {"/completion", "{\"prompt\":[1,99999999]}", "prompt[1]"},
        {"/v1/completions", "{\"prompt\":\"" PROMPT "\",\"n\":17}", "n"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct fake_http f;
        fake_http_init(&f, "POST", cases[i].path, cases[i].body);
        fake_serving_request(&fs, &f);
        if (f.status != 400) fprintf(stderr, "  %s %s -> %d %s\n", cases[i].path, cases[i].body, f.status, f.body);
        CHECK_EQ_INT(f.status, 400);
        CHECK_EQ_INT(f.ends, 1);
        json_t *body = json_loads(f.body, 0, NULL);
        json_t *err = json_object_get(body, "error");
        CHECK_EQ_INT(jint(err, "code"), 400);
        CHECK_EQ_STR(jstr(err, "type"), "invalid_request_error");
        if (cases[i].param) CHECK_EQ_STR(jstr(err, "param"), cases[i].param);
        else CHECK(!json_is_string(json_object_get(err, "param")));
        json_decref(body);
        fake_http_free(&f);
    }
    CHECK_EQ_INT(fs.srv.metrics.requests_total, sizeof cases / sizeof *cases); /* each counted */
    fake_serving_close(&fs);
}

/* A prompt longer than the context: 400 exceed_context_size_error with both sizes. */
TEST(generate_long_prompt_exceeds_the_context) {
    struct fake_serving fs;
    const char *flags[] = {"--max-seq-tokens", "16", NULL};
    CHECK_EQ_INT(fake_serving_open(&fs, flags), 0);
    struct fake_http f;
    fake_http_init(&f, "POST", "/completion",
                   "{\"prompt\":\"And And And And And And And And And And And And And And And And And And And\"}");
    fake_serving_request(&fs, &f);
    CHECK_EQ_INT(f.status, 400);
    json_t *body = json_loads(f.body, 0, NULL);
    json_t *err = json_object_get(body, "error");
    CHECK_EQ_STR(jstr(err, "type"), "exceed_context_size_error");
    CHECK_EQ_INT(jint(err, "n_ctx"), 16); /* the context itself */
    CHECK(jint(err, "n_prompt_tokens") > 16);
    json_decref(body);
    fake_http_free(&f);
    fake_serving_close(&fs);
}

/* /completion streamed: the events' content is the non-streamed text; the last one says stop. */
TEST(generate_completion_stream_equals_the_whole_text) {
    struct fake_serving fs;
    CHECK_EQ_INT(fake_serving_open(&fs, NULL), 0);
    struct fake_http f;
    fake_http_init(&f, "POST", "/completion",
                   "{\"prompt\":\"" PROMPT "\",\"n_predict\":8,\"temperature\":0,\"stream\":true}");
    CHECK_EQ_INT(fake_serving_request(&fs, &f), 0);
    CHECK_EQ_INT(f.status, 200);
    CHECK_EQ_STR(f.content_type, "text/event-stream");
    CHECK_EQ_INT(f.ends, 1); /* http_sse_end */
    CHECK(f.n_events >= 2);
    char text[256] = "";
    for (int i = 0; i < f.n_events; i++) {
        json_t *e = json_loads(f.events[i], 0, NULL);
        CHECK(e);
        CHECK(json_is_true(json_object_get(e, "stop")) == (i == f.n_events - 1));
        strncat(text, jstr(e, "content"), sizeof text - strlen(text) - 1);
        if (i == f.n_events - 1) {
            CHECK_EQ_STR(jstr(e, "stop_type"), "limit");
            CHECK_EQ_INT(jint(e, "tokens_predicted"), 8);
        }
        json_decref(e);
    }
    CHECK_EQ_STR(text, GREEDY_8);
    fake_http_free(&f);
    fake_serving_close(&fs);
}

/* /v1/chat/completions streamed: chunks with the role first, a finish_reason last, then [DONE];
 * their deltas make the non-streamed message. */
TEST(generate_chat_stream_ends_with_done) {
    struct fake_serving fs;
    CHECK_EQ_INT(fake_serving_open(&fs, NULL), 0);
#define CHAT "\"messages\":[{\"role\":\"user\",\"content\":\"Who made the heaven?\"}],\"max_tokens\":6,\"temperature\":0"
    struct fake_http whole;
    fake_http_init(&whole, "POST", "/v1/chat/completions", "{" CHAT "}");
    CHECK_EQ_INT(fake_serving_request(&fs, &whole), 0);
    CHECK_EQ_INT(whole.status, 200);
    json_t *body = json_loads(whole.body, 0, NULL);
    json_t *choice = json_array_get(json_object_get(body, "choices"), 0);
    CHECK_EQ_STR(jstr(body, "object"), "chat.completion");
    const char *message = jstr(json_object_get(choice, "message"), "content");
    CHECK(message[0]);

    struct fake_http f;
    fake_http_init(&f, "POST", "/v1/chat/completions", "{" CHAT ",\"stream\":true}");
    CHECK_EQ_INT(fake_serving_request(&fs, &f), 0);
    CHECK_EQ_INT(f.status, 200);
    CHECK_EQ_INT(f.ends, 1);
    CHECK(f.n_events >= 3);
    CHECK_EQ_STR(f.events[f.n_events - 1], "[DONE]");
    char text[512] = "";
    const char *finish = NULL;
    for (int i = 0; i < f.n_events - 1; i++) {
        json_t *e = json_loads(f.events[i], 0, NULL);
        CHECK(e);
        CHECK_EQ_STR(jstr(e, "object"), "chat.completion.chunk");
        json_t *c = json_array_get(json_object_get(e, "choices"), 0);
        json_t *delta = json_object_get(c, "delta");
        if (i == 0) CHECK_EQ_STR(jstr(delta, "role"), "assistant");
        strncat(text, jstr(delta, "content"), sizeof text - strlen(text) - 1);
        const char *fr = json_string_value(json_object_get(c, "finish_reason"));
        CHECK(!finish); /* only the last chunk finishes */
        if (fr) finish = strcmp(fr, "length") ? "other" : "length";
        json_decref(e);
    }
    CHECK(finish != NULL);
    CHECK_EQ_STR(jstr(choice, "finish_reason"), finish);
    CHECK_EQ_STR(text, message);
    json_decref(body);
    fake_http_free(&whole);
    fake_http_free(&f);
    fake_serving_close(&fs);
#undef CHAT
}

/* A streaming client that leaves: no events after the disconnect, the cancel callback frees the
 * request, the scheduler holds nothing for it, and /metrics counts a 499. */
TEST(generate_client_gone_cancels_the_request) {
    struct fake_serving fs;
    CHECK_EQ_INT(fake_serving_open(&fs, NULL), 0);
    struct fake_http f;
    fake_http_init(&f, "POST", "/completion",
                   "{\"prompt\":\"" PROMPT "\",\"n_predict\":200,\"temperature\":0,\"stream\":true}");
    router_dispatch(&fs.router, &f.req);
    CHECK_EQ_INT(f.status, 200); /* the stream started */
    for (int i = 0; i < 3; i++) { /* a few steps: tokens flow */
        CHECK(serving_ops.build_step(&fs.srv));
        serving_ops.compute_step(&fs.srv);
        while (serving_ops.complete_step(&fs.srv, 0)) {
        }
    }
    CHECK(f.n_events >= 1);
    int sent = f.n_events;
    fake_http_disconnect(&f);              /* the abort callback: no step holds it from now on */
    CHECK_EQ_INT(fake_serving_run(&fs), 0); /* the sweep frees its cells; nothing to run */
    CHECK_EQ_INT(f.n_events, sent);
    fake_http_closed(&f);                  /* the cancel callback frees the request */
    CHECK_EQ_INT(f.cancels, 1);
    CHECK_EQ_INT(f.ends, 1);
    struct sched_stats st;
    sched_stats(fs.srv.sched, serving_now_ms(), &st);
    CHECK_EQ_INT(st.active_requests, 0);
    CHECK_EQ_INT(st.queued, 0);
    bool counted = false;
    for (int i = 0; i < fs.srv.metrics.n_status; i++) counted |= fs.srv.metrics.status[i] == 499;
    CHECK(counted);
    fake_http_free(&f);
    fake_serving_close(&fs);
}

/* While the server drains, a completion is refused with 503, unless the request was held by the
 * server before the drain began. */
TEST(generate_draining_refuses_new_work) {
    struct fake_serving fs;
    CHECK_EQ_INT(fake_serving_open(&fs, NULL), 0);
    struct fake_http f;
    fake_http_init(&f, "POST", "/completion", "{\"prompt\":\"" PROMPT "\",\"n_predict\":2}");
    f.req.draining = true;
    fake_serving_request(&fs, &f);
    CHECK_EQ_INT(f.status, 503);
    CHECK(strstr(f.body, "Server is shutting down") != NULL);
    fake_http_free(&f);
    fake_http_init(&f, "POST", "/completion", "{\"prompt\":\"" PROMPT "\",\"n_predict\":2}");
    f.req.draining = f.req.before_drain = true;
    fake_serving_request(&fs, &f);
    CHECK_EQ_INT(f.status, 200);
    fake_http_free(&f);
    fake_serving_close(&fs);
}

/* A body over srv.offload_bytes is parsed and tokenized off the loop (http_queue_work): the same
 * answers as on the loop, errors included; a client that leaves while its work is out is told in
 * the after callback, which frees the request (counted 499) and submits nothing. */
TEST(generate_large_bodies_are_prepared_off_the_loop) {
    struct fake_serving fs;
    CHECK_EQ_INT(fake_serving_open(&fs, NULL), 0);
    static const char small[] = "{\"prompt\":\"" PROMPT "\",\"n_predict\":8,\"temperature\":0}";
    struct fake_http f;
    fake_http_init(&f, "POST", "/completion", small);
    fake_serving_request(&fs, &f);
    CHECK_EQ_INT(f.works, 0); /* a small body stays on the loop */
    CHECK(f.body && strstr(f.body, "\"content\":\"" GREEDY_8 "\""));
    fake_http_free(&f);
    /* the same request padded past SERVING_OFFLOAD_BYTES */
    size_t pad = SERVING_OFFLOAD_BYTES + 100;
    char *big = malloc(pad + 128);
    CHECK(big != NULL);
    int n = snprintf(big, pad + 128, "{\"prompt\":\"" PROMPT "\",\"n_predict\":8,\"temperature\":0,\"padding\":\"");
    memset(big + n, 'x', pad);
    strcpy(big + n + pad, "\"}");
    fake_http_init(&f, "POST", "/completion", big);
    fake_serving_request(&fs, &f);
    CHECK_EQ_INT(f.works, 1);
    CHECK_EQ_INT(f.status, 200);
    CHECK_EQ_INT(f.ends, 1);
    CHECK(f.body && strstr(f.body, "\"content\":\"" GREEDY_8 "\""));
    fake_http_free(&f);
    free(big);

    fs.srv.offload_bytes = 0; /* every body from here on */
    static const struct {
        const char *path, *body;
        int status;
        const char *in_body;
    } cases[] = {
        {"/completion", small, 200, "\"content\":\"" GREEDY_8 "\""},
        {"/completion", "{\"prompt\":\"" PROMPT "\",\"n_predict\":\"many\"}", 400, "\"param\":\"n_predict\""},
        {"/completion", "{\"prompt\":[1,99999999]}", 400, "\"param\":\"prompt[1]\""},
        {"/completion", "{\"prompt\":\"\"}", 400, "\"param\":\"prompt\""},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"" PROMPT "\"}],\"max_tokens\":2}", 200,
         "\"chat.completion\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fake_http_init(&f, "POST", cases[i].path, cases[i].body);
        fake_serving_request(&fs, &f);
        if (f.status != cases[i].status) fprintf(stderr, "  %s %s -> %d %s\n", cases[i].path, cases[i].body, f.status, f.body);
        CHECK_EQ_INT(f.works, 1);
        CHECK_EQ_INT(f.status, cases[i].status);
        CHECK_EQ_INT(f.ends, 1);
        CHECK(f.body && strstr(f.body, cases[i].in_body));
        fake_http_free(&f);
    }
    /* streamed */
    fake_http_init(&f, "POST", "/completion", "{\"prompt\":\"" PROMPT "\",\"n_predict\":4,\"stream\":true}");
    fake_serving_request(&fs, &f);
    CHECK_EQ_INT(f.works, 1);
    CHECK_EQ_INT(f.status, 200);
    CHECK(f.n_events >= 1 && strstr(f.events[f.n_events - 1], "\"stop\":true"));
    CHECK_EQ_INT(f.ends, 1);
    fake_http_free(&f);

    /* the client leaves while the work is out */
    uint64_t before = fs.srv.metrics.requests_total;
    fake_http_init(&f, "POST", "/completion", small);
    router_dispatch(&fs.router, &f.req);
    CHECK_EQ_INT(f.works, 1);
    CHECK_EQ_INT(f.status, 0);
    fake_http_disconnect(&f);
    fake_http_closed(&f);               /* no cancel callback while the work is out */
    CHECK_EQ_INT(f.cancels, 0);
    CHECK_EQ_INT(fake_http_run_work(&f), 1);
    CHECK_EQ_INT(f.ends, 1);            /* the after callback heard -ERR_CANCELLED, and freed */
    CHECK_EQ_INT(f.status, 0);
    CHECK_EQ_INT(fs.srv.metrics.requests_total, before + 1);
    CHECK_EQ_INT(fake_serving_run(&fs), 0);
    struct sched_stats st;
    sched_stats(fs.srv.sched, serving_now_ms(), &st);
    CHECK_EQ_INT(st.active_requests, 0);
    CHECK_EQ_INT(st.queued, 0);
    bool counted = false;
    for (int i = 0; i < fs.srv.metrics.n_status; i++) counted |= fs.srv.metrics.status[i] == 499;
    CHECK(counted);
    fake_http_free(&f);
    fake_serving_close(&fs);
}

/* A batch of prompts with echo and logprobs (an evaluation harness's likelihood request): one
 * choice per prompt, each the prompt's text with every prompt token's logprob but the first. */
TEST(generate_batch_echo_gives_each_prompts_logprobs) {
    struct fake_serving fs;
    CHECK_EQ_INT(fake_serving_open(&fs, NULL), 0);
    struct fake_http f;
    fake_http_init(&f, "POST", "/v1/completions",
                   "{\"prompt\":[\"" PROMPT "\",\"In the beginning God\"],\"max_tokens\":0,\"echo\":true,"
                   "\"logprobs\":2,\"temperature\":0}");
    CHECK_EQ_INT(fake_serving_request(&fs, &f), 0);
    CHECK_EQ_INT(f.status, 200);
    json_t *body = json_loads(f.body, 0, NULL);
    json_t *choices = json_object_get(body, "choices");
    CHECK_EQ_INT(json_array_size(choices), 2);
    static const char *const texts[] = {PROMPT, "In the beginning God"};
    long long prompt_tokens = 0;
    for (size_t i = 0; i < 2; i++) {
        json_t *c = json_array_get(choices, i);
        CHECK_EQ_INT(jint(c, "index"), (long long)i);
        CHECK_EQ_STR(jstr(c, "text"), texts[i]);
        int32_t *ids;
        size_t n;
        CHECK_EQ_INT(model_engine_tokenize(fs.srv.engine, texts[i], strlen(texts[i]), true, true, &ids, &n), 0);
        free(ids);
        prompt_tokens += (long long)n;
        json_t *lp = json_object_get(c, "logprobs");
        json_t *lps = json_object_get(lp, "token_logprobs");
        CHECK_EQ_INT(json_array_size(lps), n);
        CHECK(json_is_null(json_array_get(lps, 0)));
        for (size_t k = 1; k < n; k++) {
            CHECK(json_real_value(json_array_get(lps, k)) <= 0);
            CHECK_EQ_INT(json_object_size(json_array_get(json_object_get(lp, "top_logprobs"), k)), 2);
        }
    }
    CHECK_EQ_INT(jint(json_object_get(body, "usage"), "prompt_tokens"), prompt_tokens);
    CHECK_EQ_INT(jint(json_object_get(body, "usage"), "completion_tokens"), 0);
    json_decref(body);
    fake_http_free(&f);
    fake_serving_close(&fs);
}

/* A grammar the engine has not compiled is compiled off the loop (http_queue_work), whatever the
 * body's size; the same grammar again is found compiled and goes on at once; a grammar that does
 * not compile is a 400 naming where; a client leaving while its grammar compiles is told then. */
TEST(generate_grammars_compile_off_the_loop) {
    struct fake_serving fs;
    CHECK_EQ_INT(fake_serving_open(&fs, NULL), 0);
    static const char body[] = "{\"prompt\":\"" PROMPT "\",\"n_predict\":8,\"grammar\":\"root ::= \\\" yes\\\" | \\\" no\\\"\"}";
    struct fake_http f;
    for (int round = 0; round < 2; round++) {
        fake_http_init(&f, "POST", "/completion", body);
        fake_serving_request(&fs, &f);
        CHECK_EQ_INT(f.works, round == 0 ? 1 : 0); /* compiled once, on the pool */
        CHECK_EQ_INT(f.status, 200);
        CHECK_EQ_INT(f.ends, 1);
        CHECK(f.body && (strstr(f.body, "\"content\":\" yes\"") || strstr(f.body, "\"content\":\" no\"")));
        fake_http_free(&f);
    }
    fake_http_init(&f, "POST", "/completion", "{\"prompt\":\"" PROMPT "\",\"grammar\":\"root ::= valu\"}");
    fake_serving_request(&fs, &f);
    CHECK_EQ_INT(f.works, 1);
    CHECK_EQ_INT(f.status, 400);
    CHECK(f.body && strstr(f.body, "\"param\":\"grammar\"") && strstr(f.body, "undefined rule 'valu'"));
    fake_http_free(&f);

    uint64_t before = fs.srv.metrics.requests_total;
    fake_http_init(&f, "POST", "/completion", "{\"prompt\":\"" PROMPT "\",\"grammar\":\"root ::= [a-z]+ \\\".\\\"\"}");
    router_dispatch(&fs.router, &f.req);
    CHECK_EQ_INT(f.works, 1);
    CHECK_EQ_INT(f.status, 0);
    fake_http_disconnect(&f);
    fake_http_closed(&f);
    CHECK_EQ_INT(fake_http_run_work(&f), 1);
    CHECK_EQ_INT(f.ends, 1); /* the after callback heard -ERR_CANCELLED, and freed */
    CHECK_EQ_INT(f.status, 0);
    CHECK_EQ_INT(fs.srv.metrics.requests_total, before + 1);
    CHECK_EQ_INT(fake_serving_run(&fs), 0);
    struct sched_stats st;
    sched_stats(fs.srv.sched, serving_now_ms(), &st);
    CHECK_EQ_INT(st.active_requests, 0);
    fake_http_free(&f);
    fake_serving_close(&fs);
}
