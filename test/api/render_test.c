/* render_test.c: every renderer's output parsed back with jansson and checked field by field
 * (names, types, values); UTF-8 safety of every text. */
#include "test.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "api/render.h"

/* Parse a rendered body (and free it); NULL when it is not valid JSON. */
static json_t *load(char *text) {
    if (!text) return NULL;
    json_t *j = json_loads(text, JSON_ALLOW_NUL, NULL);
    free(text);
    return j;
}

static const char *sget(const json_t *o, const char *k) {
    return json_string_value(json_object_get(o, k));
}

static long long iget(const json_t *o, const char *k) {
    return json_integer_value(json_object_get(o, k));
}

static double rget(const json_t *o, const char *k) {
    return json_number_value(json_object_get(o, k));
}

static bool close_to(double a, double b) {
    return fabs(a - b) <= 1e-6 * (fabs(b) + 1);
}

static const struct response_meta meta1 = {
    .id = "cmpl-7", .created = 1700000000, .model = "kjv-tiny", .n_choices = 1,
};

static struct completion_result finished(const char *text, enum stop_type st) {
    struct completion_result r = {
        .index = 0, .text = text, .text_len = strlen(text), .tokens_predicted = 5,
        .tokens_evaluated = 12, .tokens_cached = 4, .stop_type = st,
        .timings = {.prompt_n = 8, .prompt_ms = 16.0, .predicted_n = 5, .predicted_ms = 250.0},
    };
    return r;
}

/* Three generated tokens with two alternatives each, the last one a lone byte (0xE2). */
static const struct token_logprob alts[] = {
    {100, " unto", 5, -0.25f}, {101, " to", 3, -2.0f},
    {200, " him", 4, -0.5f}, {201, " them", 5, -1.5f},
    {300, "\xE2", 1, -0.75f}, {301, "x", 1, -INFINITY},
};
static const struct token_probs probs3[] = {
    {{100, " unto", 5, -0.25f}, &alts[0], 2},
    {{200, " him", 4, -0.5f}, &alts[2], 2},
    {{300, "\xE2", 1, -0.75f}, &alts[4], 2},
};

TEST(render_native_final_fields) {
    struct completion_result r = finished(" unto him", STOP_TYPE_WORD);
    r.stopping_word = "\n";
    r.truncated = true;
    json_t *j = load(render_completion(&meta1, &r, 1));
    CHECK(json_is_object(j));
    CHECK_EQ_STR(sget(j, "content"), " unto him");
    CHECK_EQ_INT(iget(j, "index"), 0);                     /* always, as llama.cpp */
    CHECK(json_object_get(j, "generation_settings") == NULL); /* no meta->params: none of these */
    CHECK(json_object_get(j, "tokens") == NULL);
    CHECK_EQ_STR(sget(j, "model"), "kjv-tiny");
    CHECK(json_is_true(json_object_get(j, "stop")));
    CHECK(json_is_integer(json_object_get(j, "tokens_predicted")));
    CHECK_EQ_INT(iget(j, "tokens_predicted"), 5);
    CHECK_EQ_INT(iget(j, "tokens_evaluated"), 12);
    CHECK_EQ_INT(iget(j, "tokens_cached"), 4);
    CHECK_EQ_STR(sget(j, "stop_type"), "word");
    CHECK_EQ_STR(sget(j, "stopping_word"), "\n");
    CHECK(json_is_true(json_object_get(j, "truncated")));
    CHECK(json_object_get(j, "completion_probabilities") == NULL);
    json_t *tm = json_object_get(j, "timings");
    CHECK(json_is_object(tm));
    CHECK_EQ_INT(iget(tm, "prompt_n"), 8);
    CHECK(close_to(rget(tm, "prompt_ms"), 16.0));
    CHECK(close_to(rget(tm, "prompt_per_second"), 500.0));
    CHECK(close_to(rget(tm, "prompt_per_token_ms"), 2.0));
    CHECK_EQ_INT(iget(tm, "predicted_n"), 5);
    CHECK(close_to(rget(tm, "predicted_ms"), 250.0));
    CHECK(close_to(rget(tm, "predicted_per_second"), 20.0));
    CHECK(close_to(rget(tm, "predicted_per_token_ms"), 50.0));
    json_decref(j);
}

TEST(render_native_stop_types_and_zero_timings) {
    static const struct { enum stop_type st; const char *name; } cases[] = {
        {STOP_TYPE_EOS, "eos"}, {STOP_TYPE_LIMIT, "limit"}, {STOP_TYPE_WORD, "word"},
    };
    for (size_t i = 0; i < 3; i++) {
        struct completion_result r = finished("", cases[i].st);
        r.timings = (struct completion_timings){0};   /* 0 ms: rates are 0, not inf */
        json_t *j = load(render_completion(&meta1, &r, 1));
        CHECK(j != NULL);
        CHECK_EQ_STR(sget(j, "stop_type"), cases[i].name);
        CHECK_EQ_STR(sget(j, "stopping_word"), "");   /* word with no word given: "" */
        CHECK_EQ_STR(sget(j, "content"), "");
        CHECK(rget(json_object_get(j, "timings"), "prompt_per_second") == 0.0);
        json_decref(j);
    }
}

TEST(render_native_n_choices_is_array_with_index) {
    struct response_meta m = meta1;
    m.n_choices = 2;
    struct completion_result r[2] = {finished("a", STOP_TYPE_EOS), finished("b", STOP_TYPE_LIMIT)};
    r[1].index = 1;
    json_t *j = load(render_completion(&m, r, 2));
    CHECK(json_is_array(j));
    CHECK_EQ_INT(json_array_size(j), 2);
    for (int i = 0; i < 2; i++) {
        json_t *o = json_array_get(j, i);
        CHECK_EQ_INT(iget(o, "index"), i);
        CHECK_EQ_STR(sget(o, "content"), i ? "b" : "a");
        CHECK_EQ_STR(sget(o, "stop_type"), i ? "limit" : "eos");
    }
    json_decref(j);
}

TEST(render_native_stream_chunks) {
    struct completion_result r = finished(" unto", STOP_TYPE_NONE);
    json_t *j = load(render_completion_chunk(&meta1, &r));
    CHECK(j != NULL);
    CHECK_EQ_STR(sget(j, "content"), " unto");
    CHECK(json_is_false(json_object_get(j, "stop")));
    CHECK_EQ_INT(iget(j, "tokens_predicted"), 5);
    CHECK(json_object_get(j, "timings") == NULL);
    CHECK(json_object_get(j, "stop_type") == NULL);
    json_decref(j);

    struct response_meta m = meta1;
    m.n_choices = 3;
    r.index = 2;
    r.stop_type = STOP_TYPE_EOS;
    r.text = "";
    r.text_len = 0;
    j = load(render_completion_chunk(&m, &r));
    CHECK(json_is_true(json_object_get(j, "stop")));   /* the last event is the full object */
    CHECK_EQ_INT(iget(j, "index"), 2);
    CHECK_EQ_STR(sget(j, "stop_type"), "eos");
    CHECK(json_is_object(json_object_get(j, "timings")));
    json_decref(j);
}

TEST(render_native_completion_probabilities) {
    struct response_meta m = meta1;
    m.logprobs = true;
    struct completion_result r = finished(" unto him\xE2", STOP_TYPE_LIMIT);
    r.probs = probs3;
    r.n_probs = 3;
    json_t *j = load(render_completion(&m, &r, 1));
    CHECK(j != NULL);
    json_t *cp = json_object_get(j, "completion_probabilities");
    CHECK(json_is_array(cp));
    CHECK_EQ_INT(json_array_size(cp), 3);
    json_t *t0 = json_array_get(cp, 0);
    CHECK_EQ_INT(iget(t0, "id"), 100);
    CHECK_EQ_STR(sget(t0, "token"), " unto");
    CHECK(close_to(rget(t0, "logprob"), -0.25));
    json_t *bytes = json_object_get(t0, "bytes");
    CHECK_EQ_INT(json_array_size(bytes), 5);
    CHECK_EQ_INT(json_integer_value(json_array_get(bytes, 0)), ' ');
    json_t *top = json_object_get(t0, "top_logprobs");
    CHECK_EQ_INT(json_array_size(top), 2);
    CHECK_EQ_INT(iget(json_array_get(top, 1), "id"), 101);
    CHECK_EQ_STR(sget(json_array_get(top, 1), "token"), " to");
    CHECK(json_object_get(json_array_get(top, 1), "top_logprobs") == NULL);
    /* the lone byte: replacement character as text, exact byte in bytes */
    json_t *t2 = json_array_get(cp, 2);
    CHECK_EQ_STR(sget(t2, "token"), "\xEF\xBF\xBD");
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(t2, "bytes"), 0)), 0xE2);
    /* probability 0: -9999, never an invalid number */
    json_t *zero = json_array_get(json_object_get(t2, "top_logprobs"), 1);
    CHECK(close_to(rget(zero, "logprob"), -9999.0));
    CHECK_EQ_STR(sget(j, "content"), " unto him\xEF\xBF\xBD");
    json_decref(j);
}

TEST(render_oai_completion_object) {
    struct response_meta m = meta1;
    m.n_choices = 2;
    m.system_fingerprint = "uvlm-test";
    struct completion_result r[2] = {finished("In the", STOP_TYPE_LIMIT),
                                     finished("And", STOP_TYPE_WORD)};
    r[1].index = 1;
    r[1].tokens_predicted = 3;
    json_t *j = load(render_oai_completion(&m, r, 2));
    CHECK(j != NULL);
    CHECK_EQ_STR(sget(j, "id"), "cmpl-7");
    CHECK_EQ_STR(sget(j, "object"), "text_completion");
    CHECK(json_is_integer(json_object_get(j, "created")));
    CHECK_EQ_INT(iget(j, "created"), 1700000000);
    CHECK_EQ_STR(sget(j, "model"), "kjv-tiny");
    CHECK_EQ_STR(sget(j, "system_fingerprint"), "uvlm-test");
    json_t *ch = json_object_get(j, "choices");
    CHECK_EQ_INT(json_array_size(ch), 2);
    CHECK_EQ_STR(sget(json_array_get(ch, 0), "text"), "In the");
    CHECK_EQ_INT(iget(json_array_get(ch, 0), "index"), 0);
    CHECK_EQ_STR(sget(json_array_get(ch, 0), "finish_reason"), "length");
    CHECK(json_is_null(json_object_get(json_array_get(ch, 0), "logprobs")));
    CHECK_EQ_INT(iget(json_array_get(ch, 1), "index"), 1);
    CHECK_EQ_STR(sget(json_array_get(ch, 1), "finish_reason"), "stop");
    json_t *u = json_object_get(j, "usage");
    CHECK_EQ_INT(iget(u, "prompt_tokens"), 12);        /* evaluated once for both choices */
    CHECK_EQ_INT(iget(u, "completion_tokens"), 8);
    CHECK_EQ_INT(iget(u, "total_tokens"), 20);
    CHECK_EQ_INT(iget(json_object_get(u, "prompt_tokens_details"), "cached_tokens"), 4);
    json_decref(j);
}

TEST(render_oai_completion_logprobs_and_chunks) {
    struct response_meta m = meta1;
    m.logprobs = true;
    m.include_usage = true;
    struct completion_result r = finished(" unto him", STOP_TYPE_NONE);
    r.probs = probs3;
    r.n_probs = 2;
    r.text_offset = 10;
    json_t *j = load(render_oai_completion_chunk(&m, &r));
    CHECK(j != NULL);
    CHECK_EQ_STR(sget(j, "object"), "text_completion");
    CHECK(json_is_null(json_object_get(j, "usage")));  /* include_usage: null until the end */
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    CHECK(json_is_null(json_object_get(c, "finish_reason")));
    json_t *lp = json_object_get(c, "logprobs");
    CHECK_EQ_STR(json_string_value(json_array_get(json_object_get(lp, "tokens"), 1)), " him");
    CHECK(close_to(json_number_value(json_array_get(json_object_get(lp, "token_logprobs"), 0)),
                   -0.25));
    json_t *offs = json_object_get(lp, "text_offset");
    CHECK_EQ_INT(json_integer_value(json_array_get(offs, 0)), 10);
    CHECK_EQ_INT(json_integer_value(json_array_get(offs, 1)), 15);   /* 10 + len(" unto") */
    json_t *top1 = json_array_get(json_object_get(lp, "top_logprobs"), 1);
    CHECK(json_is_object(top1));
    CHECK(close_to(rget(top1, " them"), -1.5));
    CHECK(close_to(rget(top1, " him"), -0.5));
    json_decref(j);

    m.include_usage = false;
    m.logprobs = false;
    r.stop_type = STOP_TYPE_EOS;
    j = load(render_oai_completion_chunk(&m, &r));
    CHECK(json_object_get(j, "usage") == NULL);
    c = json_array_get(json_object_get(j, "choices"), 0);
    CHECK_EQ_STR(sget(c, "finish_reason"), "stop");
    json_decref(j);
}

TEST(render_oai_chat_object) {
    struct response_meta m = meta1;
    m.id = "chatcmpl-1";
    m.logprobs = true;
    struct completion_result r = finished("Hello.", STOP_TYPE_EOS);
    r.probs = probs3;
    r.n_probs = 1;
    json_t *j = load(render_oai_chat(&m, &r, 1));
    CHECK(j != NULL);
    CHECK_EQ_STR(sget(j, "id"), "chatcmpl-1");
    CHECK_EQ_STR(sget(j, "object"), "chat.completion");
    CHECK(json_object_get(j, "system_fingerprint") == NULL);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    CHECK_EQ_INT(iget(c, "index"), 0);
    CHECK_EQ_STR(sget(json_object_get(c, "message"), "role"), "assistant");
    CHECK_EQ_STR(sget(json_object_get(c, "message"), "content"), "Hello.");
    CHECK_EQ_STR(sget(c, "finish_reason"), "stop");
    json_t *content = json_object_get(json_object_get(c, "logprobs"), "content");
    CHECK_EQ_INT(json_array_size(content), 1);
    json_t *t0 = json_array_get(content, 0);
    CHECK_EQ_STR(sget(t0, "token"), " unto");
    CHECK(close_to(rget(t0, "logprob"), -0.25));
    CHECK_EQ_INT(json_array_size(json_object_get(t0, "bytes")), 5);
    json_t *top = json_object_get(t0, "top_logprobs");
    CHECK_EQ_INT(json_array_size(top), 2);
    CHECK_EQ_STR(sget(json_array_get(top, 1), "token"), " to");
    CHECK(json_object_get(json_array_get(top, 1), "id") == NULL);   /* OpenAI shape: no id */
    json_t *u = json_object_get(j, "usage");
    CHECK_EQ_INT(iget(u, "prompt_tokens"), 12);
    CHECK_EQ_INT(iget(u, "completion_tokens"), 5);
    CHECK_EQ_INT(iget(u, "total_tokens"), 17);
    json_decref(j);
}

TEST(render_oai_chat_stream_sequence) {
    struct response_meta m = meta1;
    m.id = "chatcmpl-2";
    m.include_usage = true;
    struct completion_result r = finished("", STOP_TYPE_NONE);

    json_t *j = load(render_oai_chat_chunk(&m, &r, true));          /* first: role only */
    CHECK(j != NULL);
    CHECK_EQ_STR(sget(j, "object"), "chat.completion.chunk");
    CHECK_EQ_STR(sget(j, "id"), "chatcmpl-2");
    CHECK(json_is_null(json_object_get(j, "usage")));
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *d = json_object_get(c, "delta");
    CHECK_EQ_STR(sget(d, "role"), "assistant");
    CHECK(json_is_null(json_object_get(d, "content")));
    CHECK(json_is_null(json_object_get(c, "finish_reason")));
    CHECK(json_is_null(json_object_get(c, "logprobs")));
    json_decref(j);

    r.text = "Hi";
    r.text_len = 2;
    j = load(render_oai_chat_chunk(&m, &r, false));                 /* content */
    d = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
    CHECK(json_object_get(d, "role") == NULL);
    CHECK_EQ_STR(sget(d, "content"), "Hi");
    json_decref(j);

    r.text = "";
    r.text_len = 0;
    r.stop_type = STOP_TYPE_LIMIT;
    j = load(render_oai_chat_chunk(&m, &r, false));                 /* last: finish_reason */
    c = json_array_get(json_object_get(j, "choices"), 0);
    CHECK_EQ_INT(json_object_size(json_object_get(c, "delta")), 0);
    CHECK_EQ_STR(sget(c, "finish_reason"), "length");
    json_decref(j);

    j = load(render_oai_usage_chunk(&m, &r, 1, true));              /* usage */
    CHECK_EQ_STR(sget(j, "object"), "chat.completion.chunk");
    CHECK(json_is_array(json_object_get(j, "choices")));
    CHECK_EQ_INT(json_array_size(json_object_get(j, "choices")), 0);
    CHECK_EQ_INT(iget(json_object_get(j, "usage"), "total_tokens"), 17);
    json_decref(j);

    j = load(render_oai_usage_chunk(&m, &r, 1, false));
    CHECK_EQ_STR(sget(j, "object"), "text_completion");
    json_decref(j);
}

TEST(render_tokenize_pieces) {
    const int32_t ids[] = {15043, 29871, 232};
    json_t *j = load(render_tokenize(ids, 3, NULL));
    json_t *toks = json_object_get(j, "tokens");
    CHECK_EQ_INT(json_array_size(toks), 3);
    CHECK_EQ_INT(json_integer_value(json_array_get(toks, 0)), 15043);
    CHECK_EQ_INT(json_integer_value(json_array_get(toks, 2)), 232);
    json_decref(j);

    const struct token_piece pieces[] = {{"Hello", 5}, {" \xE5\xAA\xBD", 4}, {"\xF0\x9F", 2}};
    j = load(render_tokenize(ids, 3, pieces));
    toks = json_object_get(j, "tokens");
    CHECK_EQ_INT(json_array_size(toks), 3);
    CHECK_EQ_INT(iget(json_array_get(toks, 0), "id"), 15043);
    CHECK_EQ_STR(sget(json_array_get(toks, 0), "piece"), "Hello");
    CHECK_EQ_STR(sget(json_array_get(toks, 1), "piece"), " \xE5\xAA\xBD");
    json_t *raw = json_object_get(json_array_get(toks, 2), "piece");   /* invalid alone: bytes */
    CHECK(json_is_array(raw));
    CHECK_EQ_INT(json_array_size(raw), 2);
    CHECK_EQ_INT(json_integer_value(json_array_get(raw, 0)), 0xF0);
    CHECK_EQ_INT(json_integer_value(json_array_get(raw, 1)), 0x9F);
    json_decref(j);

    j = load(render_tokenize(NULL, 0, NULL));
    CHECK(json_is_array(json_object_get(j, "tokens")));
    CHECK_EQ_INT(json_array_size(json_object_get(j, "tokens")), 0);
    json_decref(j);
}

TEST(render_detokenize_text) {
    json_t *j = load(render_detokenize("caf\xC3\xA9\0!", 6));   /* embedded NUL kept */
    CHECK(j != NULL);
    json_t *c = json_object_get(j, "content");
    CHECK_EQ_INT(json_string_length(c), 6);
    CHECK(memcmp(json_string_value(c), "caf\xC3\xA9\0!", 6) == 0);
    json_decref(j);
    j = load(render_detokenize("a\xC3", 2));                    /* cut character */
    CHECK_EQ_STR(sget(j, "content"), "a\xEF\xBF\xBD");
    json_decref(j);
}

TEST(render_models_list) {
    struct model_info mi = {.id = "kjv-tiny-q8_0", .created = 1700000001, .n_vocab = 32000,
                            .n_ctx_train = 1024, .n_embd = 192, .n_params = 8500000,
                            .size = 9800000};
    json_t *j = load(render_models(&mi));
    CHECK(j != NULL);
    CHECK_EQ_STR(sget(j, "object"), "list");
    json_t *data = json_object_get(j, "data");
    CHECK_EQ_INT(json_array_size(data), 1);
    json_t *m = json_array_get(data, 0);
    CHECK_EQ_STR(sget(m, "id"), "kjv-tiny-q8_0");
    CHECK_EQ_STR(sget(m, "object"), "model");
    CHECK_EQ_INT(iget(m, "created"), 1700000001);
    CHECK_EQ_STR(sget(m, "owned_by"), "uvlm");
    json_t *meta = json_object_get(m, "meta");
    CHECK_EQ_INT(iget(meta, "n_vocab"), 32000);
    CHECK_EQ_INT(iget(meta, "n_ctx_train"), 1024);
    CHECK_EQ_INT(iget(meta, "n_embd"), 192);
    CHECK_EQ_INT(iget(meta, "n_params"), 8500000);
    CHECK_EQ_INT(iget(meta, "size"), 9800000);
    json_decref(j);
}

TEST(render_error_bodies) {
    struct api_error err;
    api_error_set(&err, 400, "invalid_request_error", "top_p", "top_p: must be in [0, 1], got %g", 2.0);
    json_t *j = load(api_error_render(&err));
    json_t *e = json_object_get(j, "error");
    CHECK(json_is_object(e));
    CHECK_EQ_INT(iget(e, "code"), 400);
    CHECK_EQ_STR(sget(e, "type"), "invalid_request_error");
    CHECK_EQ_STR(sget(e, "param"), "top_p");
    CHECK_EQ_STR(sget(e, "message"), "top_p: must be in [0, 1], got 2");
    CHECK(json_object_get(e, "n_ctx") == NULL);
    json_decref(j);

    api_error_set(&err, 400, "invalid_request_error", NULL, "invalid JSON");
    j = load(api_error_render(&err));
    CHECK(json_is_null(json_object_get(json_object_get(j, "error"), "param")));
    json_decref(j);

    api_error_exceed_context(&err, 3000, 1024);
    j = load(api_error_render(&err));
    e = json_object_get(j, "error");
    CHECK_EQ_STR(sget(e, "type"), "exceed_context_size_error");
    CHECK_EQ_INT(iget(e, "n_prompt_tokens"), 3000);
    CHECK_EQ_INT(iget(e, "n_ctx"), 1024);
    json_decref(j);

    /* A message quoting invalid UTF-8 from the client still renders. */
    api_error_set(&err, 400, "invalid_request_error", "messages[0].role", "unknown role \"\xC3\"");
    j = load(api_error_render(&err));
    CHECK(j != NULL);
    json_decref(j);
}

TEST(render_utf8_validator) {
    struct { const char *s; size_t len; bool valid; size_t complete; } cases[] = {
        {"", 0, true, 0},
        {"abc", 3, true, 3},
        {"\xC3\xA9", 2, true, 2},
        {"\xE2\x82\xAC", 3, true, 3},                 /* € */
        {"\xF0\x9F\x98\x80", 4, true, 4},             /* 😀 */
        {"a\xF0\x9F\x98", 4, false, 1},               /* cut emoji: hold back 3 bytes */
        {"a\xE2\x82", 3, false, 1},
        {"a\xC3", 2, false, 1},
        {"\xC0\xAF", 2, false, 2},                    /* overlong: invalid, not held back */
        {"\xE0\x80\xAF", 3, false, 3},                /* overlong 3-byte */
        {"\xED\xA0\x80", 3, false, 3},                /* surrogate */
        {"\xF4\x90\x80\x80", 4, false, 4},            /* past U+10FFFF */
        {"\xF5", 1, false, 1},
        {"\x80", 1, false, 1},                        /* lone continuation */
        {"\xE2\x28\xA1", 3, false, 3},
        {"ok\xC3\xA9\xE2", 5, false, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (utf8_valid(cases[i].s, cases[i].len) != cases[i].valid ||
            utf8_complete_len(cases[i].s, cases[i].len) != cases[i].complete) {
            fprintf(stderr, "  case %zu: valid %d complete %zu\n", i,
                    utf8_valid(cases[i].s, cases[i].len),
                    utf8_complete_len(cases[i].s, cases[i].len));
            t->failed = 1;
            return;
        }
    }
}

TEST(render_replacement_per_maximal_subpart) {
    /* E2 82 is one maximal subpart (one U+FFFD); C0 and AF are two. */
    json_t *j = load(render_detokenize("\xE2\x82" "A\xC0\xAF", 5));
    CHECK_EQ_STR(sget(j, "content"), "\xEF\xBF\xBD" "A\xEF\xBF\xBD\xEF\xBF\xBD");
    json_decref(j);
}

/* Random bytes in every text field: each body must still be valid JSON (jansson refuses
 * invalid UTF-8 on load, so parsing back checks it), and valid input must come back intact. */
TEST(render_random_bytes_always_valid_json) {
    uint64_t state = 0x9E3779B97F4A7C15u;
    char buf[24];
    struct response_meta m = meta1;
    m.logprobs = true;
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = 0;
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        len = state % sizeof buf;
        for (size_t i = 0; i < len; i++) {
            state ^= state << 13, state ^= state >> 7, state ^= state << 17;
            /* bias towards UTF-8 lead/continuation bytes to hit the edge cases */
            buf[i] = (char)((state & 1) ? 0x80 + (state >> 8) % 0x78 : (state >> 8) & 0xFF);
        }
        struct token_logprob tl = {7, buf, len, -1.0f};
        struct token_probs tp = {tl, &tl, 1};
        struct completion_result r = finished("", STOP_TYPE_NONE);
        r.text = buf;
        r.text_len = len;
        r.probs = &tp;
        r.n_probs = 1;
        char *bodies[] = {
            render_completion_chunk(&m, &r), render_oai_completion_chunk(&m, &r),
            render_oai_chat_chunk(&m, &r, false), render_detokenize(buf, len),
            render_tokenize(&tl.id, 1, &(struct token_piece){buf, len}),
        };
        for (size_t b = 0; b < sizeof bodies / sizeof bodies[0]; b++) {
            json_t *j = load(bodies[b]);
            if (!j) {
                fprintf(stderr, "  iteration %d body %zu is not valid JSON\n", iter, b);
                t->failed = 1;
                return;
            }
            if (b == 3 && utf8_valid(buf, len)) {
                json_t *c = json_object_get(j, "content");
                CHECK(json_string_length(c) == len && memcmp(json_string_value(c), buf, len) == 0);
            }
            json_decref(j);
        }
    }
}

/* Out of memory anywhere while building a body: NULL, never a body with fields missing, and
 * nothing leaked (the ASan build of `make check` reports leaks). jansson's allocator is swapped
 * for one that fails after a budget of allocations, then restored. */
static long alloc_budget;
static void *failing_malloc(size_t size) {
    return alloc_budget-- > 0 ? malloc(size) : NULL;
}

/* Renderer number `which` (0..8) on inputs that exercise every branch; NULL past the last. */
static char *render_nth(int which) {
    struct response_meta m = meta1;
    m.logprobs = true;
    m.n_choices = 2;
    m.include_usage = true;
    m.system_fingerprint = "fp";
    struct completion_result r[2] = {finished("In the", STOP_TYPE_LIMIT),
                                     finished("b\xE2", STOP_TYPE_WORD)};
    r[0].probs = r[1].probs = probs3;
    r[0].n_probs = r[1].n_probs = 3;
    r[1].index = 1;
    r[1].stopping_word = "\n";
    struct api_error err;
    api_error_exceed_context(&err, 10, 5);
    struct model_info mi = {.id = "m"};
    const struct token_piece pieces[] = {{"a", 1}, {"\xF0", 1}};
    const int32_t ids[] = {1, 2};
    switch (which) {
    case 0: return render_completion(&m, r, 2);
    case 1: return render_completion_chunk(&m, &r[1]);
    case 2: return render_oai_completion(&m, r, 2);
    case 3: return render_oai_chat(&m, r, 2);
    case 4: return render_oai_chat_chunk(&m, &r[0], true);
    case 5: return render_oai_usage_chunk(&m, r, 2, false);
    case 6: return render_tokenize(ids, 2, pieces);
    case 7: return render_models(&mi);
    case 8: return api_error_render(&err);
    case 9: {
        struct completion_params d;
        completion_params_defaults(&d, API_COMPLETION);
        struct props_info pi = {.model_path = "m.gguf", .chat_template = "chatml", .defaults = &d};
        return render_props(&pi);
    }
    case 10: {
        struct slot_info sl[2] = {{.id = 1, .state = "prefill"}, {.id = 2, .state = "generating"}};
        return render_slots(sl, 2);
    }
    }
    return NULL;
}

TEST(render_out_of_memory_gives_null) {
    json_malloc_t saved_malloc;
    json_free_t saved_free;
    json_get_alloc_funcs(&saved_malloc, &saved_free);
    for (int which = 0; which < 11; which++) {
        char *ref = render_nth(which);
        CHECK(ref != NULL);
        int failures = 0;
        char *s = NULL;
        for (long budget = 0; budget < 5000 && !s; budget++) {
            alloc_budget = budget;
            json_set_alloc_funcs(failing_malloc, free);
            s = render_nth(which);
            json_set_alloc_funcs(saved_malloc, saved_free);
            failures += !s;
        }
        /* Every smaller budget failed cleanly; the first that succeeds gives the whole body. */
        int same = s && strcmp(s, ref) == 0;
        if (!same) fprintf(stderr, "  renderer %d: %s\n    vs %s\n", which, s ? s : "(null)", ref);
        free(s);
        free(ref);
        CHECK(same);
        CHECK(failures > 3);
    }
}

TEST(render_error_default_type_agrees_with_errors_h) {
    struct api_error err = {.status = 503};
    snprintf(err.message, sizeof err.message, "busy");
    json_t *j = load(api_error_render(&err));
    json_t *e = json_object_get(j, "error");
    CHECK_EQ_STR(sget(e, "type"), "unavailable_error");
    CHECK_EQ_INT(iget(e, "code"), 503);
    CHECK(json_is_null(json_object_get(e, "param")));
    json_decref(j);
}

TEST(render_props_fields) {
    struct completion_params d;
    completion_params_defaults(&d, API_COMPLETION);
    struct props_info pi = {.model_path = "models/kjv-tiny-q8_0.gguf", .model_alias = "kjv-tiny",
                            .n_ctx = 1024, .kv_tokens = 8192, .max_n = 16, .n_vocab = 32000,
                            .chat_template = "chatml", .build_info = "uvlm test", .defaults = &d,
                            .total_slots = 8, .chat_template_text = "{{ messages }}", .bos_token = "<s>",
                            .eos_token = "</s>", .batch_tokens = 512};
    json_t *j = load(render_props(&pi));
    CHECK(j != NULL);
    json_t *dgs = json_object_get(j, "default_generation_settings");
    CHECK_EQ_INT(iget(dgs, "n_ctx"), 1024);
    json_t *params = json_object_get(dgs, "params");
    CHECK_EQ_INT(iget(params, "n_predict"), -1);
    CHECK(close_to(rget(params, "temperature"), 0.8));
    CHECK_EQ_INT(iget(params, "top_k"), 40);
    CHECK(close_to(rget(params, "top_p"), 0.95));
    CHECK(close_to(rget(params, "min_p"), 0.05));
    CHECK_EQ_INT(iget(params, "repeat_last_n"), 64);
    CHECK_EQ_INT(iget(params, "seed"), 4294967295LL);
    CHECK(json_is_true(json_object_get(params, "cache_prompt")));
    CHECK(json_is_false(json_object_get(params, "stream")));
    CHECK_EQ_INT(iget(params, "n"), 1);
    CHECK_EQ_STR(sget(j, "model_path"), "models/kjv-tiny-q8_0.gguf");
    CHECK_EQ_STR(sget(j, "model_alias"), "kjv-tiny");
    CHECK_EQ_INT(iget(j, "n_ctx"), 1024);
    CHECK_EQ_INT(iget(j, "kv_tokens"), 8192);
    CHECK_EQ_INT(iget(j, "max_n"), 16);
    CHECK_EQ_INT(iget(j, "n_vocab"), 32000);
    CHECK_EQ_STR(sget(j, "chat_template"), "{{ messages }}");
    CHECK_EQ_STR(sget(j, "chat_template_kind"), "chatml");
    CHECK_EQ_INT(iget(j, "total_slots"), 8);
    CHECK_EQ_STR(sget(j, "bos_token"), "<s>");
    CHECK_EQ_STR(sget(j, "eos_token"), "</s>");
    CHECK_EQ_INT(iget(dgs, "id_task"), -1);
    CHECK(json_is_false(json_object_get(dgs, "is_processing")));
    CHECK_EQ_INT(iget(json_object_get(dgs, "next_token"), "n_remain"), -1);
    CHECK_EQ_INT(iget(params, "max_tokens"), -1);
    CHECK(json_is_array(json_object_get(params, "stop")) && json_is_array(json_object_get(params, "samplers")));
    CHECK_EQ_STR(sget(j, "build_info"), "uvlm test");
    CHECK(json_is_false(json_object_get(json_object_get(j, "modalities"), "vision")));
    json_decref(j);
}

TEST(render_slots_fields) {
    struct slot_info sl[2] = {
        {.id = 3, .id_task = 9, .index = 0, .state = "prefill", .is_processing = true,
         .n_prompt_tokens = 3000, .n_prompt_tokens_processed = 512, .n_decoded = 0,
         .n_predict = 64, .n_cells = 512, .n_ctx = 4096, .has_new_line = true},
        {.id = 4, .id_task = 10, .index = 1, .state = "queued", .n_prompt_tokens = 12,
         .n_predict = -1},
    };
    struct completion_params d;
    completion_params_defaults(&d, API_COMPLETION);
    d.n_predict = 64;
    sl[0].params = &d;
    json_t *j = load(render_slots(sl, 2));
    CHECK(json_is_array(j));
    CHECK_EQ_INT(json_array_size(j), 2);
    json_t *a = json_array_get(j, 0), *b = json_array_get(j, 1);
    CHECK_EQ_INT(iget(a, "id"), 3);
    CHECK_EQ_INT(iget(a, "id_task"), 9);
    CHECK_EQ_STR(sget(a, "state"), "prefill");
    CHECK(json_is_true(json_object_get(a, "is_processing")));
    CHECK_EQ_INT(iget(a, "n_prompt_tokens"), 3000);
    CHECK_EQ_INT(iget(a, "n_prompt_tokens_processed"), 512);
    CHECK_EQ_INT(iget(a, "n_decoded"), 0);
    CHECK_EQ_INT(iget(a, "n_predict"), 64);
    CHECK_EQ_INT(iget(a, "n_cells"), 512);
    CHECK_EQ_INT(iget(b, "index"), 1);
    CHECK_EQ_STR(sget(b, "state"), "queued");
    CHECK(json_is_false(json_object_get(b, "is_processing")));
    CHECK(json_object_get(a, "prompt") == NULL && json_object_get(a, "content") == NULL);
    /* llama.cpp's shape */
    CHECK_EQ_INT(iget(a, "n_ctx"), 4096);
    CHECK(json_is_false(json_object_get(a, "speculative")));
    CHECK_EQ_INT(iget(json_object_get(a, "params"), "n_predict"), 64);
    json_t *nt = json_object_get(a, "next_token");
    CHECK(json_is_true(json_object_get(nt, "has_next_token")) && json_is_true(json_object_get(nt, "has_new_line")));
    CHECK_EQ_INT(iget(nt, "n_remain"), 64);
    CHECK(json_object_get(b, "params") == NULL);
    CHECK_EQ_INT(iget(json_object_get(b, "next_token"), "n_remain"), -1);
    json_decref(j);

    j = load(render_slots(NULL, 0));
    CHECK(json_is_array(j) && json_array_size(j) == 0);
    json_decref(j);
}

TEST(render_native_llama_cpp_fields) {
    struct completion_params d;
    completion_params_defaults(&d, API_COMPLETION);
    d.n_predict = 5;
    d.return_tokens = true;
    struct response_meta m = meta1;
    m.params = &d;
    m.n_ctx = 256;
    struct completion_result r = finished(" unto him\n", STOP_TYPE_LIMIT);
    const int32_t ids[] = {100, 200, 13};
    r.tokens = ids;
    r.n_tokens = 3;
    r.id_slot = 2;
    r.has_new_line = true;
    r.prompt = "<s> And God said";
    r.prompt_len = strlen(r.prompt);
    r.timings.cache_n = 4;
    json_t *j = load(render_completion(&m, &r, 1));
    CHECK(j != NULL);
    CHECK_EQ_INT(iget(j, "index"), 0);
    json_t *toks = json_object_get(j, "tokens");
    CHECK(json_array_size(toks) == 3 && json_integer_value(json_array_get(toks, 2)) == 13);
    CHECK_EQ_INT(iget(j, "id_slot"), 2);
    CHECK(json_is_true(json_object_get(j, "has_new_line")));
    CHECK_EQ_STR(sget(j, "prompt"), "<s> And God said");
    json_t *gs = json_object_get(j, "generation_settings");
    CHECK_EQ_INT(iget(gs, "n_predict"), 5);
    CHECK_EQ_INT(iget(gs, "n_ctx"), 256);
    CHECK_EQ_INT(iget(json_object_get(j, "timings"), "cache_n"), 4);
    json_decref(j);

    /* a stream chunk: its ids, no settings */
    r.stop_type = STOP_TYPE_NONE;
    j = load(render_completion_chunk(&m, &r));
    CHECK(json_is_false(json_object_get(j, "stop")) && json_array_size(json_object_get(j, "tokens")) == 3);
    CHECK(json_object_get(j, "generation_settings") == NULL && json_object_get(j, "prompt") == NULL);
    CHECK_EQ_INT(iget(j, "id_slot"), 2);
    json_decref(j);

    /* response_fields: those only, a nested one named by its path, a missing one left out */
    const char *fields[] = {"content", "generation_settings/n_predict", "timings/nope", "tokens_cached"};
    d.response_fields = fields;
    d.n_response_fields = 4;
    r.stop_type = STOP_TYPE_EOS;
    j = load(render_completion(&m, &r, 1));
    CHECK_EQ_INT(json_object_size(j), 3);
    CHECK_EQ_STR(sget(j, "content"), " unto him\n");
    CHECK_EQ_INT(iget(j, "generation_settings/n_predict"), 5);
    CHECK_EQ_INT(iget(j, "tokens_cached"), 4);
    json_decref(j);
    d.n_response_fields = 0;

    /* post_sampling_probs: prob and top_probs */
    d.post_sampling_probs = true;
    m.logprobs = true;
    r.probs = probs3;
    r.n_probs = 3;
    j = load(render_completion(&m, &r, 1));
    json_t *p0 = json_array_get(json_object_get(j, "completion_probabilities"), 0);
    CHECK(close_to(rget(p0, "prob"), exp(-0.25)) && json_object_get(p0, "logprob") == NULL);
    json_t *top = json_object_get(p0, "top_probs");
    CHECK(json_array_size(top) == 2 && close_to(rget(json_array_get(top, 1), "prob"), exp(-2.0)));
    CHECK(json_object_get(p0, "top_logprobs") == NULL);
    json_decref(j);
}

TEST(render_oai_completion_echo_and_content_logprobs) {
    struct completion_params d;
    completion_params_defaults(&d, API_OAI_COMPLETION);
    struct response_meta m = meta1;
    m.params = &d;
    m.logprobs = true;
    struct completion_result r = finished("Gen unto him", STOP_TYPE_LIMIT);
    r.probs = probs3;
    r.n_probs = 2;
    static const struct token_probs prompt[] = {
        {{1, "", 0, 0}, NULL, 0}, {{7, "Gen", 3, -4.0f}, &alts[0], 2},
    };
    r.prompt_probs = prompt;
    r.n_prompt_probs = 2;
    json_t *j = load(render_oai_completion(&m, &r, 1));
    json_t *lp = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs");
    json_t *lps = json_object_get(lp, "token_logprobs"), *tops = json_object_get(lp, "top_logprobs");
    CHECK_EQ_INT(json_array_size(lps), 4);
    CHECK(json_is_null(json_array_get(lps, 0)) && json_is_null(json_array_get(tops, 0)));
    CHECK(close_to(json_real_value(json_array_get(lps, 1)), -4.0));
    CHECK(close_to(json_real_value(json_array_get(lps, 2)), -0.25));
    json_t *offs = json_object_get(lp, "text_offset");
    CHECK(json_integer_value(json_array_get(offs, 2)) == 3 && json_integer_value(json_array_get(offs, 3)) == 8);
    CHECK_EQ_STR(json_string_value(json_array_get(json_object_get(lp, "tokens"), 1)), "Gen");
    json_decref(j);

    /* asked with n_probs: llama.cpp's content shape */
    d.logprobs_content = true;
    r.n_prompt_probs = 0;
    j = load(render_oai_completion(&m, &r, 1));
    lp = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs");
    json_t *content = json_object_get(lp, "content");
    CHECK(json_array_size(content) == 2 && json_object_size(lp) == 1);
    CHECK_EQ_INT(iget(json_array_get(content, 0), "id"), 100);
    CHECK_EQ_INT(json_array_size(json_object_get(json_array_get(content, 0), "top_logprobs")), 2);
    json_decref(j);
}

TEST(render_usage_counts_each_prompt_of_a_batch) {
    struct response_meta m = meta1;
    m.n_choices = 4;
    m.n_per_prompt = 2;
    struct completion_result r[4];
    for (int i = 0; i < 4; i++) {
        r[i] = finished("x", STOP_TYPE_EOS);
        r[i].index = i;
        r[i].tokens_evaluated = i < 2 ? 10 : 7;
    }
    json_t *j = load(render_oai_completion(&m, r, 4));
    json_t *u = json_object_get(j, "usage");
    CHECK_EQ_INT(iget(u, "prompt_tokens"), 17);
    CHECK_EQ_INT(iget(u, "completion_tokens"), 20);
    json_decref(j);
}
