/* The embeddings request and response shapes (api/embeddings.h): input forms, the refusals,
 * normalization, base64 and the two response shapes. */
#include "test.h"

#include "api/embeddings.h"
#include "common/err.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>

static int parse(struct embd_request *r, bool native, const char *body, struct api_error *err) {
    return embd_request_parse(r, native, body, strlen(body), err);
}

TEST(embeddings_request_input_forms) {
    struct embd_request r;
    struct api_error err;
    CHECK_EQ_INT(parse(&r, false, "{\"input\":\"hello\",\"model\":\"m1\"}", &err), 0);
    CHECK_EQ_INT(r.n_inputs, 1);
    CHECK(r.inputs[0].text && r.inputs[0].text_len == 5 && !memcmp(r.inputs[0].text, "hello", 5));
    CHECK_EQ_STR(r.model, "m1");
    CHECK(!r.base64 && r.normalize == 2);
    embd_request_free(&r);

    CHECK_EQ_INT(parse(&r, false, "{\"input\":[\"a\",\"bc\"],\"encoding_format\":\"base64\"}", &err), 0);
    CHECK_EQ_INT(r.n_inputs, 2);
    CHECK(r.base64);
    CHECK(r.inputs[1].text_len == 2 && !memcmp(r.inputs[1].text, "bc", 2));
    embd_request_free(&r);

    /* token ids: one array is one input; an array of arrays is several, mixed with strings */
    CHECK_EQ_INT(parse(&r, false, "{\"input\":[1,2,3]}", &err), 0);
    CHECK_EQ_INT(r.n_inputs, 1);
    CHECK(!r.inputs[0].text && r.inputs[0].n_ids == 3 && r.inputs[0].ids[2] == 3);
    embd_request_free(&r);
    CHECK_EQ_INT(parse(&r, false, "{\"input\":[[5,6],\"x\",[7]],\"embd_normalize\":-1}", &err), 0);
    CHECK_EQ_INT(r.n_inputs, 3);
    CHECK(r.inputs[0].n_ids == 2 && r.inputs[0].ids[1] == 6 && r.inputs[1].text && r.inputs[2].ids[0] == 7);
    CHECK_EQ_INT(r.normalize, -1);
    embd_request_free(&r);

    /* /embedding takes `content` too; /v1/embeddings does not */
    CHECK_EQ_INT(parse(&r, true, "{\"content\":\"hi\"}", &err), 0);
    CHECK_EQ_INT(r.n_inputs, 1);
    embd_request_free(&r);
    CHECK_EQ_INT(parse(&r, false, "{\"content\":\"hi\"}", &err), -ERR_INVAL);
    CHECK_EQ_STR(err.param, "input");
    embd_request_free(&r);

    const char *bad[] = {"[1]", "{\"input\":\"\"}", "{\"input\":[]}", "{\"input\":[[]]}", "{\"input\":3}",
                         "{\"input\":[\"a\",{}]}", "{\"input\":\"a\",\"encoding_format\":\"int8\"}",
                         "{\"input\":[-1]}", "{\"input\":\"a\",\"embd_normalize\":\"x\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_EQ_INT(parse(&r, false, bad[i], &err), -ERR_INVAL);
        CHECK_EQ_INT(err.status, 400);
        embd_request_free(&r);
    }
}

TEST(embeddings_normalize_and_pooling_names) {
    float v[4] = {3, -4, 0, 0};
    embd_normalize(v, 4, 2);
    CHECK(fabsf(v[0] - 0.6f) < 1e-6f && fabsf(v[1] + 0.8f) < 1e-6f);
    float w[2] = {1, -3};
    embd_normalize(w, 2, 1); /* taxicab */
    CHECK(fabsf(w[0] - 0.25f) < 1e-6f && fabsf(w[1] + 0.75f) < 1e-6f);
    float m[2] = {0.5f, -2};
    embd_normalize(m, 2, 0); /* the largest magnitude to 32760 */
    CHECK(fabsf(m[1] + 32760.0f) < 1e-2f && fabsf(m[0] - 8190.0f) < 1e-2f);
    float z[3] = {0, 0, 0};
    embd_normalize(z, 3, 2);
    CHECK(z[0] == 0 && z[2] == 0);
    float keep[2] = {5, 7};
    embd_normalize(keep, 2, -1);
    CHECK(keep[0] == 5 && keep[1] == 7);

    CHECK_EQ_INT(embd_pooling_of("mean", -1), EMBD_POOL_MEAN);
    CHECK_EQ_INT(embd_pooling_of("last", 1), EMBD_POOL_LAST);
    CHECK_EQ_INT(embd_pooling_of("model", 2), EMBD_POOL_CLS);
    CHECK_EQ_INT(embd_pooling_of("model", -1), EMBD_POOL_NONE); /* llama.cpp's default */
    CHECK_EQ_INT(embd_pooling_of("model", 4), EMBD_POOL_NONE);  /* rank: no classifier head here */
    CHECK_EQ_INT(embd_pooling_of("max", -1), -1);
}

TEST(embeddings_render_openai_and_llamacpp_shapes) {
    struct embd_request r;
    struct api_error err;
    CHECK_EQ_INT(parse(&r, false, "{\"input\":[\"a\",\"b\"]}", &err), 0);
    const float v0[2] = {1.0f, -0.5f}, v1[2] = {0.25f, 2.0f};
    struct embd_result res[2] = {{v0, 1, 2, 3}, {v1, 1, 2, 4}};
    char *json = embd_render_oai(&r, "kjv", res);
    CHECK(json);
    json_t *root = json_loads(json, 0, NULL);
    free(json);
    CHECK(root);
    json_t *data = json_object_get(root, "data");
    bool ok = !strcmp(json_string_value(json_object_get(root, "object")), "list") &&
              !strcmp(json_string_value(json_object_get(root, "model")), "kjv") && json_array_size(data) == 2 &&
              json_integer_value(json_object_get(json_object_get(root, "usage"), "prompt_tokens")) == 7 &&
              json_integer_value(json_object_get(json_object_get(root, "usage"), "total_tokens")) == 7;
    json_t *d1 = json_array_get(data, 1);
    ok = ok && !strcmp(json_string_value(json_object_get(d1, "object")), "embedding") &&
         json_integer_value(json_object_get(d1, "index")) == 1 &&
         json_real_value(json_array_get(json_object_get(d1, "embedding"), 1)) == 2.0;
    json_decref(root);
    CHECK(ok);

    /* base64: float32 little endian: 1.0f is 00 00 80 3f, -0.5f 00 00 00 bf */
    r.base64 = true;
    json = embd_render_oai(&r, "kjv", res);
    CHECK(json);
    root = json_loads(json, 0, NULL);
    free(json);
    const char *b64 = json_string_value(json_object_get(json_array_get(json_object_get(root, "data"), 0), "embedding"));
    ok = b64 && !strcmp(b64, "AACAPwAAAL8=");
    json_decref(root);
    CHECK(ok);

    /* llama.cpp's: [{index, embedding: [rows]}], several rows without pooling */
    const float rows[4] = {1, 2, 3, 4};
    struct embd_result native[2] = {{rows, 2, 2, 2}, {v1, 1, 2, 4}};
    json = embd_render_native(&r, native);
    CHECK(json);
    root = json_loads(json, 0, NULL);
    free(json);
    json_t *e0 = json_object_get(json_array_get(root, 0), "embedding");
    ok = json_is_array(root) && json_array_size(root) == 2 && json_array_size(e0) == 2 &&
         json_real_value(json_array_get(json_array_get(e0, 1), 0)) == 3.0 &&
         json_integer_value(json_object_get(json_array_get(root, 1), "index")) == 1 &&
         json_array_size(json_object_get(json_array_get(root, 1), "embedding")) == 1;
    json_decref(root);
    embd_request_free(&r);
    CHECK(ok);
}
