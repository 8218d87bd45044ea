/* The /infill prompt (api/infill.h): the model's FIM tokens from GGUF keys or by their text, and
 * the prompt's exact tokens in the reference's order and budgets. */
#include "test.h"

#include "api/infill.h"
#include "common/err.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "sched/model_engine.h"

#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>

/* A copy of src (path written to out[32]) with the u32 keys[i] = vals[i] added. 0 or -1. */
static int copy_with_keys(const char *src, char *out, const char *const *keys, const uint32_t *vals, int n) {
    struct gguf_file f;
    char why[256];
    if (gguf_open(&f, src, why, sizeof why) < 0) return -1;
    strcpy(out, "/tmp/uvlm-fim-XXXXXX");
    int fd = mkstemp(out);
    if (fd < 0) {
        gguf_close(&f);
        return -1;
    }
    close(fd);
    struct gguf_writer w;
    gguf_writer_init(&w);
    for (uint64_t i = 0; i < f.n_kv; i++) gguf_writer_copy_kv(&w, &f.kv[i]);
    for (int k = 0; k < n; k++) gguf_writer_set_u32(&w, keys[k], vals[k]);
    char name[96];
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        const struct gguf_tensor *t = &f.tensors[i];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        gguf_writer_add_tensor(&w, name, t->type, t->ne[0], t->n_dims > 1 ? t->ne[1] : 1);
    }
    int rc = gguf_writer_begin(&w, out);
    for (uint64_t i = 0; rc == 0 && i < f.n_tensors; i++) gguf_writer_write(&w, f.tensors[i].data, f.tensors[i].size);
    int frc = gguf_writer_finish(&w);
    gguf_close(&f);
    if (rc == 0 && frc == 0) return 0;
    unlink(out);
    return -1;
}

static int load(const char *path, struct model_engine **e) {
    struct model_engine_config ec = {.path = path, .kv_tokens = 256, .batch_tokens = 32, .n_seq_max = 4, .n_threads = 1};
    char why[256];
    return model_engine_load(e, &ec, why, sizeof why);
}

/* Plain tokens of text appended to v at *n. */
static void put_text(const struct model_engine *e, const char *text, int32_t *v, size_t *n) {
    int32_t *ids = NULL;
    size_t k = 0;
    if (model_engine_tokenize(e, text, strlen(text), false, false, &ids, &k) == 0) {
        memcpy(v + *n, ids, k * sizeof *ids);
        *n += k;
    }
    free(ids);
}

static bool same(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && !memcmp(a, b, na * sizeof *a);
}

/* Ids the test model's keys name: prefix/suffix/middle through the older keys, the rest fim_*. */
enum { PRE = 100, SUF = 101, MID = 102, PAD = 103, REP = 104, SEP = 105 };

static const char *const fim_keys[] = {"tokenizer.ggml.prefix_token_id", "tokenizer.ggml.suffix_token_id",
                                       "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_pad_token_id",
                                       "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id"};

TEST(infill_prompt_in_the_reference_order_with_budgets) {
    SHARED(src, "models/kjv-tiny-q8_0.gguf");
    char path[32];
    CHECK_EQ_INT(copy_with_keys(src, path, fim_keys, (const uint32_t[]){PRE, SUF, MID, PAD, REP, SEP}, 6), 0);
    struct model_engine *e;
    int rc = load(path, &e);
    unlink(path);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(model_engine_fim(e, MODEL_ENGINE_FIM_PRE), PRE);
    CHECK_EQ_INT(model_engine_fim(e, MODEL_ENGINE_FIM_MID), MID);
    CHECK_EQ_INT(model_engine_fim(e, MODEL_ENGINE_FIM_SEP), SEP);
    struct api_error err;
    CHECK_EQ_INT(infill_check_model(e, &err), 0);
    bool add_bos;
    int32_t bos = model_engine_bos(e, &add_bos);
    CHECK(add_bos && bos >= 0);

    int32_t prefix[40], suffix[40], prompt[4] = {7, 8};
    for (int i = 0; i < 40; i++) {
        prefix[i] = 1000 + i;
        suffix[i] = 2000 + i;
    }
    struct infill_chunk chunk = {.filename = "a.txt", .filename_len = 5, .text = "In the beginning", .text_len = 16};
    struct infill_input in = {.prefix = prefix, .n_prefix = 40, .suffix = suffix, .n_suffix = 40, .prompt = prompt,
                              .n_prompt = 2, .extra = &chunk, .n_extra = 1};
    /* n_batch 32: the prefix keeps its last 24, the suffix its first 8 - (2 + 2) = 4; the extra
     * context gets n_ctx - n_batch - 2 * n_predict = 256 - 32 + 2: all of it */
    struct infill_config cfg = {.n_batch = 32, .n_predict = -1, .n_ctx = 256};
    int32_t want[256];
    size_t n = 0;
    want[n++] = REP;
    put_text(e, "myproject\n", want, &n);
    want[n++] = SEP;
    put_text(e, "a.txt\n", want, &n);
    put_text(e, "In the beginning", want, &n);
    want[n++] = SEP;
    put_text(e, "filename\n", want, &n);
    size_t n_extra = n;
    want[n++] = bos;
    want[n++] = PRE;
    for (int i = 16; i < 40; i++) want[n++] = prefix[i];
    want[n++] = 7;
    want[n++] = 8;
    want[n++] = SUF;
    for (int i = 0; i < 4; i++) want[n++] = suffix[i];
    want[n++] = MID;
    int32_t *got;
    size_t n_got;
    CHECK_EQ_INT(infill_assemble(e, &cfg, &in, &got, &n_got), 0);
    bool ok = same(got, n_got, want, n);
    free(got);
    CHECK(ok);

    /* SPM order: suffix part first, then the prefix part */
    cfg.spm = true;
    CHECK_EQ_INT(infill_assemble(e, &cfg, &in, &got, &n_got), 0);
    int32_t spm[256];
    size_t m = 0;
    memcpy(spm, want, (n_extra + 1) * sizeof *spm); /* extra and BOS */
    m = n_extra + 1;
    spm[m++] = SUF;
    for (int i = 0; i < 4; i++) spm[m++] = suffix[i];
    spm[m++] = PRE;
    for (int i = 16; i < 40; i++) spm[m++] = prefix[i];
    spm[m++] = 7;
    spm[m++] = 8;
    spm[m++] = MID;
    ok = same(got, n_got, spm, m);
    free(got);
    CHECK(ok);

    /* a context the batch and the prediction fill: the extra context keeps only its last 3 */
    cfg.spm = false;
    cfg.n_ctx = 32 + 2 * 10 + 3;
    cfg.n_predict = 10;
    CHECK_EQ_INT(infill_assemble(e, &cfg, &in, &got, &n_got), 0);
    ok = n_got == n - n_extra + 3 && same(got, 3, want + n_extra - 3, 3) &&
         same(got + 3, n_got - 3, want + n_extra, n - n_extra);
    free(got);
    CHECK(ok);

    /* the /completion body: the same tokens as "prompt", the other fields kept */
    const char *body = "{\"input_prefix\":\"And God\",\"input_suffix\":\" light\",\"prompt\":\" said\","
                       "\"input_extra\":[{\"text\":\"Amen\"}],\"n_predict\":3}";
    char *out;
    size_t out_len;
    cfg = (struct infill_config){.n_batch = 32, .n_predict = -1, .n_ctx = 256};
    CHECK_EQ_INT(infill_completion_body(e, &cfg, body, strlen(body), &out, &out_len, &err), 0);
    json_t *root = json_loads(out, 0, NULL);
    free(out);
    CHECK(root);
    json_t *p = json_object_get(root, "prompt");
    n = 0;
    want[n++] = REP;
    put_text(e, "myproject\n", want, &n);
    want[n++] = SEP;
    put_text(e, "tmp\n", want, &n); /* a chunk without a filename */
    put_text(e, "Amen", want, &n);
    want[n++] = SEP;
    put_text(e, "filename\n", want, &n);
    want[n++] = bos;
    want[n++] = PRE;
    put_text(e, "And God", want, &n);
    put_text(e, " said", want, &n);
    want[n++] = SUF;
    put_text(e, " light", want, &n);
    want[n++] = MID;
    ok = json_is_array(p) && json_array_size(p) == n && json_integer_value(json_object_get(root, "n_predict")) == 3 &&
         !json_object_get(root, "input_prefix") && !json_object_get(root, "input_extra");
    for (size_t i = 0; ok && i < n; i++) ok = json_integer_value(json_array_get(p, i)) == want[i];
    json_decref(root);
    CHECK(ok);

    /* what the reference refuses */
    const char *bad[] = {"{\"input_suffix\":\"x\"}", "{\"input_prefix\":\"x\"}",
                         "{\"input_prefix\":\"x\",\"input_suffix\":\"y\",\"prompt\":3}",
                         "{\"input_prefix\":\"x\",\"input_suffix\":\"y\",\"input_extra\":{}}",
                         "{\"input_prefix\":\"x\",\"input_suffix\":\"y\",\"input_extra\":[{\"filename\":\"a\"}]}"};
    const char *param[] = {"input_prefix", "input_suffix", "prompt", "input_extra", "input_extra"};
    for (int i = 0; i < 5; i++) {
        CHECK_EQ_INT(infill_completion_body(e, &cfg, bad[i], strlen(bad[i]), &out, &out_len, &err), -ERR_INVAL);
        CHECK_EQ_INT(err.status, 400);
        CHECK_EQ_STR(err.param, param[i]);
    }
    model_engine_free(e);
}

TEST(infill_refused_without_fim_tokens) {
    SHARED(kjv, "models/kjv-tiny-q8_0.gguf");
    struct model_engine *e;
    CHECK_EQ_INT(load(kjv, &e), 0);
    struct api_error err;
    CHECK_EQ_INT(infill_check_model(e, &err), -ERR_UNSUPPORTED);
    CHECK_EQ_INT(err.status, 400);
    CHECK(strstr(err.message, "prefix token is missing") && strstr(err.message, "middle token is missing"));
    char *out;
    size_t out_len;
    struct infill_config cfg = {.n_batch = 32, .n_predict = -1, .n_ctx = 256};
    CHECK_EQ_INT(infill_completion_body(e, &cfg, "{}", 2, &out, &out_len, &err), -ERR_UNSUPPORTED);
    model_engine_free(e);
}
