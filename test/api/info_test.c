/* info_test.c: the endpoints that generate nothing (api/info.c) through the router, over the
 * repository's model, with a fake responder: no sockets, no loop. */
#include "test.h"
#include "api/fake.h"
#include "common/err.h"
#include "sched/model_engine.h"

#include <jansson.h>
#include <stdlib.h>

static const char *jstr(const json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static long long jint(const json_t *o, const char *key) { return json_integer_value(json_object_get(o, key)); }

static int works; /* http_queue_work calls of the requests `call` made */

/* Dispatch one request and parse its JSON body (NULL when it is not JSON); *status gets the status. */
static json_t *call(struct fake_serving *fs, const char *method, const char *target, const char *body, int *status) {
    struct fake_http f;
    fake_http_init(&f, method, target, body);
    fake_serving_request(fs, &f);
    works += f.works;
    *status = f.ends == 1 ? f.status : -1; /* answered exactly once */
    json_t *v = f.body ? json_loads(f.body, JSON_DECODE_ANY, NULL) : NULL;
    fake_http_free(&f);
    return v;
}

TEST(info_models_lists_the_model) {
    struct fake_serving fs;
    CHECK_EQ_INT(fake_serving_open(&fs, NULL), 0);
    int status;
    json_t *v = call(&fs, "GET", "/v1/models", NULL, &status);
    CHECK_EQ_INT(status, 200);
    CHECK_EQ_STR(jstr(v, "object"), "list");
    json_t *data = json_object_get(v, "data");
    CHECK_EQ_INT(json_array_size(data), 1);
    json_t *m = json_array_get(data, 0);
    CHECK_EQ_STR(jstr(m, "id"), "kjv-tiny-q8_0.gguf");
    CHECK_EQ_STR(jstr(m, "object"), "model");
    json_t *meta = json_object_get(m, "meta");
    const struct model_engine *e = fs.srv.engine;
    CHECK_EQ_INT(jint(meta, "n_vocab"), e->n_vocab);
    CHECK_EQ_INT(jint(meta, "n_ctx_train"), e->n_ctx_train);
    CHECK_EQ_INT(jint(meta, "n_embd"), e->n_embd);
    CHECK(jint(meta, "size") > 0 && jint(meta, "size") == e->weight_bytes);
    json_decref(v);
    fake_serving_close(&fs);
}

/* On the loop thread (small bodies), or all of them as large ones are: off the loop. */
static void tokenize_detokenize_round_trip(struct test_case *t, size_t offload_bytes) {
    struct fake_serving fs;
    CHECK_EQ_INT(fake_serving_open(&fs, NULL), 0);
    fs.srv.offload_bytes = offload_bytes;
    works = 0;
    int status;
    json_t *v = call(&fs, "POST", "/tokenize", "{\"content\":\"And God said\",\"with_pieces\":true}", &status);
    CHECK_EQ_INT(status, 200);
    json_t *toks = json_object_get(v, "tokens");
    CHECK_EQ_INT(json_array_size(toks), 3);
    static const char *const pieces[] = {" And", " God", " said"};
    char ids[64] = "";
    for (size_t i = 0; i < 3; i++) {
        json_t *tok = json_array_get(toks, i);
        CHECK_EQ_STR(jstr(tok, "piece"), pieces[i]);
        snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%lld", i ? "," : "", jint(tok, "id"));
    }
    json_decref(v);
    char body[128];
    snprintf(body, sizeof body, "{\"tokens\":[%s]}", ids);
    v = call(&fs, "POST", "/detokenize", body, &status);
    CHECK_EQ_INT(status, 200);
    CHECK_EQ_STR(jstr(v, "content"), " And God said"); /* the pieces joined: the first keeps its space */
    json_decref(v);
    /* ids only, and the same ids as the engine's tokenizer gives */
    v = call(&fs, "POST", "/tokenize", "{\"content\":\"And God said\"}", &status);
    CHECK_EQ_INT(status, 200);
    int32_t *want;
    size_t n;
    CHECK_EQ_INT(model_engine_tokenize(fs.srv.engine, "And God said", 12, false, true, &want, &n), 0);
    CHECK_EQ_INT(json_array_size(json_object_get(v, "tokens")), n);
    for (size_t i = 0; i < n; i++) CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(v, "tokens"), i)), want[i]);
    free(want);
    json_decref(v);
    v = call(&fs, "POST", "/detokenize", "{\"tokens\":[1,99999999]}", &status); /* outside the vocabulary */
    CHECK_EQ_INT(status, 400);
    CHECK_EQ_INT(jint(json_object_get(v, "error"), "code"), 400);
    json_decref(v);
    v = call(&fs, "POST", "/tokenize", "{\"content\":7}", &status);
    CHECK_EQ_INT(status, 400);
    CHECK_EQ_STR(jstr(json_object_get(v, "error"), "param"), "content");
    json_decref(v);
    v = call(&fs, "POST", "/apply-template", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &status);
    CHECK_EQ_INT(status, 200);
    CHECK(strstr(jstr(v, "prompt"), "hi") != NULL);
    json_decref(v);
    CHECK_EQ_INT(works, offload_bytes ? 0 : 6); /* every request above */
    fake_serving_close(&fs);
}

TEST(info_tokenize_detokenize_round_trip) {
    tokenize_detokenize_round_trip(t, SERVING_OFFLOAD_BYTES);
}

TEST(info_tokenize_detokenize_round_trip_off_the_loop) {
    tokenize_detokenize_round_trip(t, 0);
}

TEST(info_health_follows_loading_ready_draining) {
    /* not started: every model endpoint says loading */
    struct fake_serving fs;
    memset(&fs, 0, sizeof fs);
    char *argv[] = {"uvlm", "--log-level", "off"};
    char msg[128];
    CHECK_EQ_INT(config_load(&fs.cfg, 3, argv, NULL, msg, sizeof msg), 0);
    log_init(&fs.log, LOG_OFF, stderr);
    serving_init(&fs.srv, &fs.cfg, &fs.log);
    router_init(&fs.router, NULL, NULL);
    CHECK_EQ_INT(serving_routes_add(&fs.router, &fs.srv), 0);
    int status;
    json_t *v = call(&fs, "GET", "/health", NULL, &status);
    CHECK_EQ_INT(status, 503);
    CHECK_EQ_STR(jstr(v, "status"), "loading");
    json_decref(v);
    v = call(&fs, "POST", "/completion", "{\"prompt\":\"x\"}", &status);
    CHECK_EQ_INT(status, 503);
    CHECK_EQ_STR(jstr(json_object_get(v, "error"), "message"), "Loading model");
    json_decref(v);
    v = call(&fs, "GET", "/v1/models", NULL, &status);
    CHECK_EQ_INT(status, 503);
    json_decref(v);
    fake_serving_close(&fs);

    /* started */
    CHECK_EQ_INT(fake_serving_open(&fs, NULL), 0);
    v = call(&fs, "GET", "/health", NULL, &status);
    CHECK_EQ_INT(status, 200);
    CHECK_EQ_STR(jstr(v, "status"), "ok");
    CHECK(!json_object_get(v, "kv_cells_total")); /* counts only when asked */
    json_decref(v);
    v = call(&fs, "GET", "/health?detail=1", NULL, &status);
    CHECK_EQ_INT(status, 200);
    CHECK_EQ_INT(jint(v, "kv_cells_total"), 512);
    CHECK_EQ_INT(jint(v, "kv_cells_free"), 512);
    CHECK_EQ_INT(jint(v, "queue"), 0);
    json_decref(v);
    struct fake_http f;
    fake_http_init(&f, "GET", "/health", NULL);
    f.req.draining = true;
    fake_serving_request(&fs, &f);
    CHECK_EQ_INT(f.status, 503);
    CHECK_EQ_STR(f.body, "{\"status\":\"draining\"}");
    fake_http_free(&f);
    fake_serving_close(&fs);
}

TEST(info_props_slots_metrics_and_template) {
    struct fake_serving fs;
    const char *flags[] = {"--max-n", "4", NULL};
    CHECK_EQ_INT(fake_serving_open(&fs, flags), 0);
    int status;
    json_t *v = call(&fs, "GET", "/props", NULL, &status);
    CHECK_EQ_INT(status, 200);
    CHECK_EQ_INT(jint(v, "kv_tokens"), 512);
    CHECK_EQ_INT(jint(v, "n_ctx"), fs.srv.engine->n_ctx);
    CHECK_EQ_INT(jint(v, "max_n"), 4);
    CHECK_EQ_STR(jstr(v, "chat_template_kind"), "chatml");
    CHECK(jint(v, "total_slots") >= 1);
    json_decref(v);
    v = call(&fs, "GET", "/slots", NULL, &status);
    CHECK_EQ_INT(status, 200);
    CHECK(json_is_array(v));
    json_decref(v);
    v = call(&fs, "POST", "/apply-template", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &status);
    CHECK_EQ_INT(status, 200);
    CHECK_EQ_STR(jstr(v, "prompt"), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    json_decref(v);
    struct fake_http f;
    fake_http_init(&f, "GET", "/metrics", NULL);
    fake_serving_request(&fs, &f);
    CHECK_EQ_INT(f.status, 200);
    CHECK_EQ_STR(f.content_type, "text/plain; version=0.0.4; charset=utf-8");
    CHECK(strstr(f.body, "\nuvlm_requests_total 3\n") != NULL); /* props, slots, apply-template */
    CHECK(strstr(f.body, "uvlm_requests_by_status_total{status=\"200\"} 3\n") != NULL);
    CHECK(strstr(f.body, "uvlm_kv_cells_capacity 512\n") != NULL);
    CHECK(strstr(f.body, "\nuvlm_kv_cells_live 0\n") != NULL);
    CHECK(strstr(f.body, "# TYPE uvlm_time_to_first_token_seconds histogram\n") != NULL);
    CHECK(strstr(f.body, "uvlm_request_generation_tokens_bucket{le=\"+Inf\"} 0\n") != NULL);
    CHECK(strstr(f.body, "uvlm_requests_finished_total{reason=\"eos\"} 0\n") != NULL);
    CHECK(strstr(f.body, "\nprocess_resident_memory_bytes ") != NULL);
    CHECK(strstr(f.body, "llamacpp:") == NULL); /* only with --metrics-names llamacpp */
    CHECK(strstr(f.body, "_total gauge") == NULL); /* no gauge named like a counter */
    fake_http_free(&f);
    fake_serving_close(&fs);

    const char *llama[] = {"--metrics-names", "llamacpp", NULL};
    CHECK_EQ_INT(fake_serving_open(&fs, llama), 0);
    fake_http_init(&f, "GET", "/metrics", NULL);
    fake_serving_request(&fs, &f);
    CHECK_EQ_INT(f.status, 200);
    CHECK(strstr(f.body, "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 0\n") != NULL);
    CHECK(strstr(f.body, "\nllamacpp:n_busy_slots_per_decode 0\n") != NULL);
    CHECK(strstr(f.body, "\nuvlm_steps_total 0\n") != NULL); /* beside uvlm's own */
    fake_http_free(&f);
    fake_serving_close(&fs);
}
