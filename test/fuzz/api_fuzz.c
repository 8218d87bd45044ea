/* api_fuzz.c: libFuzzer target for the API layer's request parsing and response rendering.
 * The first byte picks the body kind (native, /v1/completions, chat, tokenize, detokenize); the
 * rest is the body. Whatever the input: no crash, no leak, a parse either succeeds or names an
 * error with a 4xx/5xx status, every rendered body (the error, or a response echoing the
 * prompt text as generated text) is valid JSON, and streaming that text in pieces against the
 * request's stop strings hands out exactly the final text, with no stop string left in it.
 *
 * Build and run (needs clang and libclang-rt; add "api" to FUZZ_TARGETS in scripts/fuzz.mk with
 * src/api/params.c src/api/render.c src/api/chat_json.c src/api/chat_template.c
 * src/api/errors.c src/api/stream_text.c in its sources and -ljansson to link):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE -Isrc \
 *     test/fuzz/api_fuzz.c src/api/{params,render,chat_json,chat_template,errors,stream_text}.c \
 *     src/common/err.c -ljansson -lm -o build-fuzz/fuzz-api
 *   build-fuzz/fuzz-api -max_total_time=60 test/fuzz/corpus/api
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/params.h"
#include "api/render.h"
#include "api/stream_text.h"
#include "common/err.h"

static void check_json(char *text) {
    if (!text) return;   /* out of memory */
    json_t *j = json_loads(text, JSON_ALLOW_NUL, NULL);
    if (!j) abort();
    json_decref(j);
    free(text);
}

/* Stream text in pieces of `step` bytes: what is taken must add up to the final text. */
static void check_stream(const char *text, size_t len, size_t step,
                         const struct completion_params *p) {
    struct stream_text st;
    stream_text_init(&st, p->stop, p->n_stop);
    char *taken = malloc(len + 1);
    size_t at = 0, n;
    for (size_t i = 0; i < len && !st.stopped; i += step) {
        if (stream_text_append(&st, text + i, len - i < step ? len - i : step) < 0) abort();
        const char *s = stream_text_take(&st, false, &n);
        memcpy(taken + at, s, n);
        at += n;
    }
    const char *s = stream_text_take(&st, true, &n);
    memcpy(taken + at, s, n);
    at += n;
    if (at != st.len || (at && memcmp(taken, st.text, at) != 0) || (at && memcmp(text, taken, at) != 0))
        abort();
    for (size_t k = 0; k < p->n_stop; k++)
        if (st.len && memmem(st.text, st.len, p->stop[k], strlen(p->stop[k]))) abort();
    free(taken);
    stream_text_free(&st);
}

static void check_error(const struct api_error *err) {
    if (err->status < 400 || err->status > 599 || !err->message[0]) abort();
    check_json(api_error_render(err));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    struct api_error err;
    struct params_limits lim = PARAMS_LIMITS_DEFAULT;
    switch (data[0] % 5) {
    case 0: case 1: case 2: {
        struct completion_params p;
        enum api_endpoint ep = (enum api_endpoint)(data[0] % 5);
        if (completion_params_parse(&p, ep, body, len, &lim, &err) < 0) {
            check_error(&err);
            return 0;
        }
        if (completion_params_check_tokens(&p, 32000, &err) < 0) check_error(&err);
        struct response_meta meta = {.id = "x", .model = p.model, .n_choices = p.n,
                                     .logprobs = p.want_logprobs, .include_usage = p.include_usage};
        const char *text = p.prompt_text ? p.prompt_text : p.n_messages ? p.messages[0].content : "";
        struct token_logprob tl = {1, text, strlen(text), -1.0f};
        struct token_probs tp = {tl, &tl, 1};
        struct completion_result r = {.text = text, .text_len = strlen(text),
                                      .stop_type = (enum stop_type)(p.n % 4),
                                      .stopping_word = p.n_stop ? p.stop[0] : NULL,
                                      .probs = &tp, .n_probs = 1};
        check_json(render_completion(&meta, &r, 1));
        check_json(render_oai_completion(&meta, &r, 1));
        check_json(render_oai_chat_chunk(&meta, &r, true));
        if (p.prompt_text) check_stream(p.prompt_text, p.prompt_text_len, 1 + data[0] / 5 % 7, &p);
        completion_params_free(&p);
        return 0;
    }
    case 3: {
        struct tokenize_params p;
        if (tokenize_params_parse(&p, body, len, &lim, &err) < 0) {
            check_error(&err);
            return 0;
        }
        struct token_piece piece = {p.content, p.content_len};
        int32_t id = 0;
        check_json(render_tokenize(&id, 1, &piece));
        check_json(render_detokenize(p.content, p.content_len));
        tokenize_params_free(&p);
        return 0;
    }
    default: {
        struct detokenize_params p;
        if (detokenize_params_parse(&p, body, len, &lim, &err) < 0) {
            check_error(&err);
            return 0;
        }
        if (detokenize_params_check_tokens(&p, 32000, &err) < 0) check_error(&err);
        check_json(render_tokenize(p.tokens, p.n_tokens, NULL));
        detokenize_params_free(&p);
        return 0;
    }
    }
}
