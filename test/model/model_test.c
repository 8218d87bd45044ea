/* model_test.c: loading (hparams from metadata, refusals) and the forward pass's contracts over
 * the KV memory: batches mixing sequences equal separate runs, shared prefixes, save/restore,
 * errors. Uses the small trained kjv-tiny model of ../shared. */
#include "test.h"
#include "cmd/cmd.h"
#include "common/err.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "math/q8x16.h"
#include "memory/kv.h"
#include "memory/split.h"
#include "model/eval.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TEST(model_load_reads_hparams_from_metadata) {
    SHARED(path, "models/kjv-tiny-q8_0.gguf");
    struct model *m;
    char why[256];
    CHECK_EQ_INT(model_load(&m, path, NULL, why, sizeof why), 0);
    CHECK_EQ_STR(m->hp.arch_name, "llama");
    CHECK_EQ_INT(m->hp.n_embd, 192);
    CHECK_EQ_INT(m->hp.n_layer, 6);
    CHECK_EQ_INT(m->hp.n_head, 6);
    CHECK_EQ_INT(m->hp.n_head_kv, 2);
    CHECK_EQ_INT(m->hp.head_dim, 32);
    CHECK_EQ_INT(m->hp.n_ff, 512);
    CHECK_EQ_INT(m->hp.n_vocab, 32000);
    CHECK_EQ_INT(m->hp.n_ctx_train, 1024);
    CHECK(m->hp.tied_output);
    CHECK(m->hp.tf.rope_type == ROPE_NORM);
    CHECK(m->output.data == m->token_embd.data);
    model_free(m);
    SHARED(qpath, "models/qwen2-q8_0.gguf");
    CHECK_EQ_INT(model_load(&m, qpath, NULL, why, sizeof why), 0);
    CHECK(m->hp.tf.rope_type == ROPE_NEOX);
    CHECK(m->hp.tf.qkv_bias && m->layers[0].bq && m->layers[1].bv);
    CHECK(fabsf(m->hp.tf.rope[0].base - 1e6f) < 1);
    model_free(m);
    /* qwen3: heads of attention.key_length (32), not n_embd / n_head (16); q/k norms, no biases */
    SHARED(q3path, "models/qwen3-q8_0.gguf");
    CHECK_EQ_INT(model_load(&m, q3path, NULL, why, sizeof why), 0);
    CHECK_EQ_INT(m->hp.arch, MODEL_ARCH_QWEN3);
    CHECK_EQ_INT(m->hp.n_embd, 64);
    CHECK_EQ_INT(m->hp.head_dim, 32);
    CHECK_EQ_INT(m->layers[0].wq.n_out, 4 * 32);
    CHECK(m->hp.tf.rope_type == ROPE_NEOX && m->hp.tf.qk_norm && !m->hp.tf.qkv_bias);
    CHECK(m->layers[2].q_norm && m->layers[2].k_norm && !m->layers[2].bq);
    model_free(m);
    /* phi3: q, k, v and gate, up as row ranges of the fused attn_qkv and ffn_up, untied output;
     * loaded for serving, each part is rewritten into the 16-row layout on its own */
    SHARED(phipath, "models/phi3-q8_0.gguf");
    for (int serving = 0; serving < 2; serving++) {
        CHECK_EQ_INT(model_load(&m, phipath, &(struct model_options){.serving_layout = serving}, why, sizeof why), 0);
        const struct model_layer *L = &m->layers[1];
        size_t row = ggml_row_size(GGML_TYPE_Q8_0, 128);
        CHECK(m->hp.tf.fused_qkv && m->hp.tf.fused_gate_up && m->hp.tf.scale_q && !m->hp.tied_output);
        CHECK_EQ_INT(L->wq.n_out, 128);
        CHECK_EQ_INT(L->wk.n_out, 64);
        CHECK_EQ_INT(L->wv.n_out, 64);
        CHECK((const char *)L->wk.data == (const char *)L->wq.data + 128 * row);
        CHECK((const char *)L->wv.data == (const char *)L->wq.data + 192 * row);
        CHECK_EQ_INT(L->w_gate.n_out, 384);
        CHECK((const char *)L->w_up.data == (const char *)L->w_gate.data + 384 * row);
        bool x16 = serving && q8x16_supported();
        enum ggml_type want = x16 ? UVLM_TYPE_Q8_0_X16 : GGML_TYPE_Q8_0;
        CHECK(L->wq.type == want && L->wv.type == want && L->w_gate.type == want && L->w_up.type == want);
        model_free(m);
    }
}

TEST(model_load_refuses_other_architectures_by_name) {
    char path[] = "/tmp/uvlm-arch-XXXXXX"; /* mamba is supported now: a file naming another one */
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    struct gguf_writer w;
    gguf_writer_init(&w);
    gguf_writer_set_str(&w, "general.architecture", "rwkv6");
    CHECK_EQ_INT(gguf_writer_begin(&w, path), 0);
    CHECK_EQ_INT(gguf_writer_finish(&w), 0);
    struct model *m = NULL;
    char why[256] = "";
    int rc = model_load(&m, path, NULL, why, sizeof why);
    unlink(path);
    CHECK_EQ_INT(rc, -ERR_UNSUPPORTED);
    CHECK(strstr(why, "'rwkv6'") != NULL);
    SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");  /* a llama-less file: no architecture */
    CHECK(model_load(&m, vocab, NULL, why, sizeof why) < 0);
}

/* A copy of the GGUF file `src` in a temporary file (path written to out[32]) with the string
 * key/values keys[i] = strs[i] (a NULL str: the float floats[i]) set, others as they were, and
 * an extra F32 vector tensor `extra` of n_extra elements (none: NULL). 0 or -1. */
static int rewrite_model(const char *src, char *out, const char *const *keys, const char *const *strs,
                         const float *floats, int n_keys, const char *extra, uint64_t n_extra) {
    struct gguf_file f;
    char why[256];
    if (gguf_open(&f, src, why, sizeof why) < 0) return -1;
    strcpy(out, "/tmp/uvlm-rope-XXXXXX");
    int fd = mkstemp(out);
    if (fd < 0) {
        gguf_close(&f);
        return -1;
    }
    close(fd);
    struct gguf_writer w;
    gguf_writer_init(&w);
    for (uint64_t i = 0; i < f.n_kv; i++) {
        bool replaced = false;
        for (int k = 0; k < n_keys; k++) replaced = replaced || gguf_str_eq(f.kv[i].key, keys[k]);
        if (!replaced) gguf_writer_copy_kv(&w, &f.kv[i]);
    }
    for (int k = 0; k < n_keys; k++) {
        if (strs[k]) gguf_writer_set_str(&w, keys[k], strs[k]);
        else gguf_writer_set_f32(&w, keys[k], floats[k]);
    }
    char name[96];
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        const struct gguf_tensor *t = &f.tensors[i];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        gguf_writer_add_tensor(&w, name, t->type, t->ne[0], t->n_dims > 1 ? t->ne[1] : 1);
    }
    if (extra) gguf_writer_add_tensor(&w, extra, GGML_TYPE_F32, n_extra, 1);
    int rc = gguf_writer_begin(&w, out);
    for (uint64_t i = 0; rc == 0 && i < f.n_tensors; i++) gguf_writer_write(&w, f.tensors[i].data, f.tensors[i].size);
    for (uint64_t i = 0; rc == 0 && extra && i < n_extra; i++) gguf_writer_write(&w, &(float){1.0f}, sizeof(float));
    int frc = gguf_writer_finish(&w);
    gguf_close(&f);
    if (rc == 0 && frc == 0) return 0;
    unlink(out);
    return -1;
}

/* A rope scaling this pass does not compute is refused at load, by name: never run with other
 * numbers than the file's. */
TEST(model_load_refuses_rope_scalings_it_does_not_compute) {
    SHARED(src, "models/kjv-tiny-q8_0.gguf");
    static const char *const types[] = {"yarn", "longrope", "llama3", "dynamic"};
    char path[32], why[256];
    struct model *m = NULL;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        CHECK_EQ_INT(rewrite_model(src, path, (const char *const[]){"llama.rope.scaling.type"},
                                   (const char *const[]){types[i]}, NULL, 1, NULL, 0), 0);
        why[0] = 0;
        CHECK_EQ_INT(model_load(&m, path, NULL, why, sizeof why), -ERR_UNSUPPORTED);
        char want[48];
        snprintf(want, sizeof want, "rope scaling '%s'", types[i]);
        if (!strstr(why, want)) fprintf(stderr, "  why: %s\n", why);
        CHECK(strstr(why, want) != NULL);
        unlink(path);
    }
    /* Phi-3.5's long/short factors (longrope without the type key) */
    CHECK_EQ_INT(rewrite_model(src, path, NULL, NULL, NULL, 0, "rope_factors_long.weight", 16), 0);
    CHECK_EQ_INT(model_load(&m, path, NULL, why, sizeof why), -ERR_UNSUPPORTED);
    CHECK(strstr(why, "'longrope'") != NULL);
    unlink(path);
    /* a magnitude factor on cos/sin */
    CHECK_EQ_INT(rewrite_model(src, path, (const char *const[]){"llama.rope.scaling.attn_factor"},
                               (const char *const[]){NULL}, (const float[]){1.19f}, 1, NULL, 0), 0);
    CHECK_EQ_INT(model_load(&m, path, NULL, why, sizeof why), -ERR_UNSUPPORTED);
    CHECK(strstr(why, "attn_factor") != NULL);
    unlink(path);
    /* rope_freqs of the wrong size (n_rot / 2 = 16 for kjv-tiny's heads of 32) */
    CHECK_EQ_INT(rewrite_model(src, path, NULL, NULL, NULL, 0, "rope_freqs.weight", 8), 0);
    CHECK_EQ_INT(model_load(&m, path, NULL, why, sizeof why), -ERR_FORMAT);
    CHECK(strstr(why, "rope_freqs.weight") != NULL);
    unlink(path);
}

struct fixture {
    struct model *m;
    struct memory *mem;
    struct forward_ctx *fc;
    struct batch b;
};

/* kjv-tiny (Q8_0) as the server loads it (serving: math/q8x16.h's layout) or as the file has it. */
static int setup_layout(struct test_case *t, struct fixture *f, int32_t n_seq, bool serving) {
    *f = (struct fixture){0}; /* callers tear down after a failed setup too */
    const char *path = shared_path(t, "models/kjv-tiny-q8_0.gguf");
    if (!path) return -1;
    char why[256];
    if (model_load(&f->m, path, &(struct model_options){.serving_layout = serving}, why, sizeof why) < 0 || model_memory_create(f->m, 256, n_seq, &f->mem) < 0 ||
        forward_ctx_create(&f->fc, f->m, &(struct forward_config){.max_tokens = 64, .n_ctx = 256, .n_threads = 2}) < 0 ||
        batch_init(&f->b, 64) < 0)
        return -1;
    return 0;
}

static int setup(struct test_case *t, struct fixture *f, int32_t n_seq) { return setup_layout(t, f, n_seq, true); }

static void teardown(struct fixture *f) {
    batch_free(&f->b);
    forward_ctx_destroy(f->fc);
    memory_destroy(f->mem);
    model_free(f->m);
}

static int run(struct fixture *f) {
    int rc = memory_reserve(f->mem, &f->b);
    return rc < 0 ? rc : model_forward(f->m, f->fc, f->mem, &f->b);
}

static const int32_t prompt_a[] = {1, 1126, 4177, 1497, 29892, 1235, 727, 367, 3578};  /* "And God said, Let there be light" */
static const int32_t prompt_b[] = {1, 512, 278, 6763, 471, 278, 1734};
#define NA ((int32_t)(sizeof prompt_a / sizeof *prompt_a))
#define NB ((int32_t)(sizeof prompt_b / sizeof *prompt_b))

static float max_diff(const float *a, const float *b, int32_t n) {
    float d = 0;
    for (int32_t i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
    return d;
}

TEST(model_forward_mixed_sequences_equal_separate_runs) {
    struct fixture f;
    if (setup(t, &f, 2) < 0) { teardown(&f); CHECK(t->skipped); return; }
    int32_t V = f.m->hp.n_vocab;
    float *alone_a = malloc(sizeof(float) * V), *alone_b = malloc(sizeof(float) * V);
    /* Each prompt alone (last row), then both in one batch, interleaved. */
    batch_clear(&f.b);
    for (int32_t i = 0; i < NA; i++) batch_add(&f.b, prompt_a[i], i, 0, i == NA - 1);
    CHECK_EQ_INT(run(&f), 0);
    CHECK_EQ_INT(f.fc->n_outputs, 1);
    memcpy(alone_a, f.fc->logits, sizeof(float) * V);
    memory_seq_rm(f.mem, 0, 0, -1);
    batch_clear(&f.b);
    for (int32_t i = 0; i < NB; i++) batch_add(&f.b, prompt_b[i], i, 1, i == NB - 1);
    CHECK_EQ_INT(run(&f), 0);
    memcpy(alone_b, f.fc->logits, sizeof(float) * V);
    memory_seq_rm(f.mem, 1, 0, -1);
    batch_clear(&f.b);
    for (int32_t i = 0; i < NA || i < NB; i++) {
        if (i < NB) batch_add(&f.b, prompt_b[i], i, 1, i == NB - 1);
        if (i < NA) batch_add(&f.b, prompt_a[i], i, 0, i == NA - 1);
    }
    CHECK_EQ_INT(run(&f), 0);
    CHECK_EQ_INT(f.fc->n_outputs, 2);
    /* Outputs in entry order: b's last token comes before a's. Batch shape may change the
     * sgemm/vector split, so equal within float noise, not bit for bit. */
    CHECK(max_diff(f.fc->logits, alone_b, V) < 1e-3f * 10);
    CHECK(max_diff(f.fc->logits + V, alone_a, V) < 1e-3f * 10);
    /* and the two differ (the mask keeps sequences apart, it does not make them equal) */
    CHECK(max_diff(alone_a, alone_b, V) > 0.1f);
    free(alone_a);
    free(alone_b);
    teardown(&f);
}

TEST(model_forward_shared_prefix_and_save_restore_give_identical_logits) {
    struct fixture f;
    if (setup(t, &f, 3) < 0) { teardown(&f); CHECK(t->skipped); return; }
    int32_t V = f.m->hp.n_vocab;
    float *want = malloc(sizeof(float) * V);
    /* Reference: prompt_a then token 278 at the end, one sequence. */
    batch_clear(&f.b);
    for (int32_t i = 0; i < NA; i++) batch_add(&f.b, prompt_a[i], i, 0, false);
    CHECK_EQ_INT(run(&f), 0);
    batch_clear(&f.b);
    batch_add(&f.b, 278, NA, 0, true);
    CHECK_EQ_INT(run(&f), 0);
    memcpy(want, f.fc->logits, sizeof(float) * V);
    memory_seq_rm(f.mem, 0, NA, -1);   /* back to the prompt only */
    /* Sequence 1 shares the prompt's cells, sequence 0 goes away: 1 still sees them. */
    CHECK_EQ_INT(memory_seq_cp(f.mem, 0, 1, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_rm(f.mem, 0, 0, -1), 0);
    batch_clear(&f.b);
    batch_add(&f.b, 278, NA, 1, true);
    CHECK_EQ_INT(run(&f), 0);
    CHECK(max_diff(f.fc->logits, want, V) == 0);
    /* Save sequence 1 without its last token, free it, fill the pool elsewhere, restore as 2. */
    CHECK_EQ_INT(memory_seq_rm(f.mem, 1, NA, -1), 0);
    struct memory_snapshot *snap;
    CHECK_EQ_INT(memory_seq_save(f.mem, 1, &snap), 0);
    CHECK_EQ_INT(memory_seq_rm(f.mem, 1, 0, -1), 0);
    batch_clear(&f.b);
    for (int32_t i = 0; i < NB; i++) batch_add(&f.b, prompt_b[i], i, 0, false);
    CHECK_EQ_INT(run(&f), 0);
    CHECK_EQ_INT(memory_seq_restore(f.mem, 2, snap), 0);
    memory_snapshot_free(f.mem, snap);
    batch_clear(&f.b);
    batch_add(&f.b, 278, NA, 2, true);
    CHECK_EQ_INT(run(&f), 0);
    CHECK(max_diff(f.fc->logits, want, V) == 0);
    free(want);
    teardown(&f);
}

/* A server's decode step: one token of each of 5 sequences at different positions (with a
 * shared prefix) in one batch gives each the very logits of its step alone (fewer than 32 rows:
 * every matmul and the attention take paths whose numbers do not depend on the batch). */
/* in both layouts of Q8_0 */
static void decode_step_equals_solo_steps(struct test_case *t, bool serving) {
    enum { K = 5 };
    struct fixture f;
    if (setup_layout(t, &f, K, serving) < 0) { teardown(&f); CHECK(t->skipped); return; }
    int32_t V = f.m->hp.n_vocab;
    float *solo = malloc(sizeof(float) * V * K);
    int32_t len[K];
    for (int32_t s = 0; s < K; s++) { /* prompts of 3..9 tokens; sequence 4 shares 2's cells */
        len[s] = s == 4 ? len[2] : 3 + (s * 5) % 7;
        if (s == 4) {
            CHECK_EQ_INT(memory_seq_cp(f.mem, 2, 4, 0, -1), 0);
            continue;
        }
        batch_clear(&f.b);
        for (int32_t i = 0; i < len[s]; i++) batch_add(&f.b, s % 2 ? prompt_b[i % NB] : prompt_a[i], i, s, false);
        CHECK_EQ_INT(run(&f), 0);
    }
    for (int32_t s = 0; s < K; s++) {
        batch_clear(&f.b);
        batch_add(&f.b, 278 + 7 * s, len[s], s, true);
        CHECK_EQ_INT(run(&f), 0);
        memcpy(solo + (size_t)s * V, f.fc->logits, sizeof(float) * V);
        CHECK_EQ_INT(memory_seq_rm(f.mem, s, len[s], -1), 0);
    }
    batch_clear(&f.b);
    for (int32_t s = K - 1; s >= 0; s--) batch_add(&f.b, 278 + 7 * s, len[s], s, true);
    CHECK_EQ_INT(run(&f), 0);
    CHECK_EQ_INT(f.fc->n_outputs, K);
    for (int32_t s = 0; s < K; s++) {
        float d = max_diff(f.fc->logits + (size_t)(K - 1 - s) * V, solo + (size_t)s * V, V);
        if (d != 0) fprintf(stderr, "  sequence %d: max diff %g\n", s, d);
        CHECK(d == 0);
    }
    CHECK(max_diff(solo, solo + V, V) > 0.1f); /* the sequences do differ */
    free(solo);
    teardown(&f);
}

TEST(model_forward_decode_step_of_many_sequences_equals_solo_steps) { decode_step_equals_solo_steps(t, true); }
TEST(model_forward_decode_step_equals_solo_steps_gguf_layout) { decode_step_equals_solo_steps(t, false); }

/* A model loaded for serving has left the reference's order: a reference context is refused,
 * and one of the serving path gives the file's layout's logits within 1% of the largest and the
 * same greedy token (kjv is trained: its top logit stands clear). */
TEST(model_serving_layout_refuses_reference_contexts) {
    struct fixture f, g;
    if (setup(t, &f, 1) < 0 || setup_layout(t, &g, 1, false) < 0) {
        teardown(&f);
        teardown(&g);
        CHECK(t->skipped);
        return;
    }
    if (!f.m->serving_layout) { /* no AVX-512 VNNI: the loader kept the file's layout */
        teardown(&f);
        teardown(&g);
        SKIP("no AVX-512 VNNI: Q8_0 keeps the file's layout here");
    }
    struct forward_ctx *ref = NULL;
    CHECK_EQ_INT(forward_ctx_create(&ref, f.m, &(struct forward_config){.max_tokens = 8, .n_ctx = 64, .reference = true}),
                 -ERR_INVAL);
    int32_t V = f.m->hp.n_vocab, best[2] = {0, 0};
    struct fixture *fx[2] = {&f, &g};
    for (int k = 0; k < 2; k++) {
        batch_clear(&fx[k]->b);
        for (int32_t i = 0; i < NA; i++) batch_add(&fx[k]->b, prompt_a[i], i, 0, i == NA - 1);
        CHECK_EQ_INT(run(fx[k]), 0);
        for (int32_t v = 1; v < V; v++)
            if (fx[k]->fc->logits[v] > fx[k]->fc->logits[best[k]]) best[k] = v;
    }
    /* other float orders move a Q8_0 activation across a rounding step now and then: 0.1% here */
    float top = 0;
    for (int32_t v = 0; v < V; v++) top = fmaxf(top, fabsf(g.fc->logits[v]));
    CHECK(max_diff(f.fc->logits, g.fc->logits, V) < 0.01f * top);
    CHECK_EQ_INT(best[0], best[1]);
    teardown(&f);
    teardown(&g);
}

/* Q4_K in the serving layout (math/q8x16.h's Q4_K_X16) changes no number: models written by
 * mkmodel as q4_k, tied (the output is the embedding: rewritten too, the lookup reading the
 * layout) and untied, and as q4_k_m (its Q6_K output, and attn_v and ffn_down of layer 1, beside the
 * rewritten Q4_K), give bit-identical logits loaded for serving and as the file has them, over a
 * prompt and three decode steps on 2 threads. */
static void q4_k_layouts_agree(struct test_case *t, const char *type, bool tied) {
    SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
    char path[] = "/tmp/uvlm-q4k-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    char *argv[16] = {"mkmodel", "--out", path, "--vocab", (char *)vocab, "--type", (char *)type,
                      "--n-layer", "2", "--n-embd", "256", "--n-ff", "512"};
    int argc = 13;
    if (tied) argv[argc++] = "--tied";
    CHECK_EQ_INT(cmd_mkmodel(argc, argv), 0);
    struct fixture f[2] = {{0}, {0}};
    char why[256];
    int V = 0;
    float *logits[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        CHECK_EQ_INT(model_load(&f[k].m, path, &(struct model_options){.serving_layout = k == 0}, why, sizeof why), 0);
        if (!f[k].m) break;
        CHECK_EQ_INT(model_memory_create(f[k].m, 64, 1, &f[k].mem), 0);
        CHECK_EQ_INT(forward_ctx_create(&f[k].fc, f[k].m, &(struct forward_config){.max_tokens = 16, .n_ctx = 64,
                                                                                     .n_threads = 2}), 0);
        CHECK_EQ_INT(batch_init(&f[k].b, 16), 0);
        V = f[k].m->hp.n_vocab;
        logits[k] = malloc(sizeof(float) * (size_t)V * 4);
        batch_clear(&f[k].b);
        for (int32_t i = 0; i < NA; i++) batch_add(&f[k].b, prompt_a[i], i, 0, i == NA - 1);
        CHECK_EQ_INT(run(&f[k]), 0);
        memcpy(logits[k], f[k].fc->logits, sizeof(float) * (size_t)V);
        for (int32_t step = 1; step < 4; step++) {
            batch_clear(&f[k].b);
            batch_add(&f[k].b, prompt_b[step], NA + step - 1, 0, true);
            CHECK_EQ_INT(run(&f[k]), 0);
            memcpy(logits[k] + (size_t)step * V, f[k].fc->logits, sizeof(float) * (size_t)V);
        }
    }
    if (q8x16_supported()) CHECK(f[0].m && f[0].m->serving_layout); /* something was rewritten */
    if (q8x16_supported() && tied && f[0].m) CHECK(f[0].m->token_embd.type == UVLM_TYPE_Q4_K_X16);
    if (logits[0] && logits[1]) {
        CHECK(max_diff(logits[0], logits[1], V * 4) == 0);
        CHECK(max_diff(logits[0], logits[0] + V, V) > 0); /* the steps do differ */
    }
    for (int k = 0; k < 2; k++) {
        free(logits[k]);
        teardown(&f[k]);
    }
    unlink(path);
}

TEST(model_q4_k_serving_layout_changes_no_number_untied) { q4_k_layouts_agree(t, "q4_k", false); }
TEST(model_q4_k_serving_layout_changes_no_number_tied) { q4_k_layouts_agree(t, "q4_k", true); }
TEST(model_q4_k_m_serving_layout_changes_no_number) { q4_k_layouts_agree(t, "q4_k_m", false); }

/* A forward context whose n_ctx is below head_dim (kjv-tiny: 32): a decode step's direct
 * attention rounds the query through F16 scratch whose rows must hold head_dim halfs (under
 * `make check` an overflow there fails this test), with the numbers of a context of 256. */
TEST(model_forward_n_ctx_below_head_dim) {
    struct fixture f;
    if (setup(t, &f, 1) < 0) { teardown(&f); CHECK(t->skipped); return; }
    int32_t V = f.m->hp.n_vocab;
    CHECK(f.m->hp.head_dim > 16 && NA + 1 <= 16);
    struct forward_ctx *small = NULL;
    CHECK_EQ_INT(forward_ctx_create(&small, f.m, &(struct forward_config){.max_tokens = 16, .n_ctx = 16, .n_threads = 1}), 0);
    float *want = malloc(sizeof(float) * V);
    CHECK(want);
    batch_clear(&f.b);
    for (int32_t i = 0; i < NA; i++) batch_add(&f.b, prompt_a[i], i, 0, false);
    CHECK_EQ_INT(run(&f), 0);
    batch_clear(&f.b);
    batch_add(&f.b, 278, NA, 0, true);
    CHECK_EQ_INT(run(&f), 0);
    memcpy(want, f.fc->logits, sizeof(float) * V);
    CHECK_EQ_INT(memory_seq_rm(f.mem, 0, NA, -1), 0);
    CHECK_EQ_INT(memory_reserve(f.mem, &f.b), 0);
    CHECK_EQ_INT(model_forward(f.m, small, f.mem, &f.b), 0);
    CHECK(max_diff(small->logits, want, V) == 0);
    free(want);
    forward_ctx_destroy(small);
    teardown(&f);
}

/* A decode step at a long context: the attention's work items (whole group units, or score
 * blocks of cells, the softmax phase and mix ranges when there are fewer units than threads)
 * are chosen from the thread count and from every sequence of the step, and none of that may
 * change a row's numbers: the step alone on 2 threads, alone on 1 thread, beside another long
 * sequence and alone on 4 threads (this model's 2 kv heads: split items) give the same logits
 * bit for bit. */
TEST(model_forward_long_context_decode_is_split_invariant) {
    enum { LA = 600, LB = 430, CHUNK = 64 };
    struct model *m = NULL;
    struct memory *mem = NULL;
    struct forward_ctx *fc2 = NULL, *fc1 = NULL, *fc4 = NULL;
    struct batch b = {0};
    const char *path = shared_path(t, "models/kjv-tiny-q8_0.gguf");
    if (!path) return;
    char why[256];
    CHECK_EQ_INT(model_load(&m, path, NULL, why, sizeof why), 0);
    int32_t V = m->hp.n_vocab;
    float *want = malloc(sizeof(float) * V);
    bool ok = want && model_memory_create(m, 1200, 2, &mem) == 0 &&
              forward_ctx_create(&fc2, m, &(struct forward_config){.max_tokens = CHUNK, .n_ctx = 1024, .n_threads = 2}) == 0 &&
              forward_ctx_create(&fc1, m, &(struct forward_config){.max_tokens = CHUNK, .n_ctx = 1024, .n_threads = 1}) == 0 &&
              forward_ctx_create(&fc4, m, &(struct forward_config){.max_tokens = CHUNK, .n_ctx = 1024, .n_threads = 4}) == 0 &&
              batch_init(&b, CHUNK) == 0;
    if (ok)
        for (int32_t s = 0; s < 2 && ok; s++)
            for (int32_t p0 = 0; p0 < (s ? LB : LA) && ok; p0 += CHUNK) {
                batch_clear(&b);
                for (int32_t p = p0; p < p0 + CHUNK && p < (s ? LB : LA); p++)
                    batch_add(&b, (p * 31 + 7 * s + 5) % V, p, s, false);
                ok = memory_reserve(mem, &b) == 0 && model_forward(m, fc2, mem, &b) == 0;
            }
    struct forward_ctx *ctxs[4] = {fc2, fc1, fc2, fc4};
    for (int run = 0; run < 4 && ok; run++) {
        batch_clear(&b);
        if (run == 2) batch_add(&b, 1234, LB, 1, true); /* beside sequence 1's step */
        batch_add(&b, 278, LA, 0, true);
        ok = memory_reserve(mem, &b) == 0 && model_forward(m, ctxs[run], mem, &b) == 0;
        if (!ok) break;
        const float *got = ctxs[run]->logits + (run == 2 ? V : 0);
        if (run == 0) memcpy(want, got, sizeof(float) * V);
        else if (max_diff(got, want, V) != 0) {
            fprintf(stderr, "  run %d: max diff %g\n", run, max_diff(got, want, V));
            ok = false;
        }
        ok = ok && memory_seq_rm(mem, 0, LA, -1) == 0 && memory_seq_rm(mem, 1, LB, -1) == 0;
    }
    free(want);
    batch_free(&b);
    forward_ctx_destroy(fc1);
    forward_ctx_destroy(fc2);
    forward_ctx_destroy(fc4);
    memory_destroy(mem);
    model_free(m);
    CHECK(ok);
}

TEST(model_forward_checks_its_inputs) {
    struct fixture f;
    if (setup(t, &f, 1) < 0) { teardown(&f); CHECK(t->skipped); return; }
    batch_clear(&f.b);
    batch_add(&f.b, 1, 0, 0, true);
    /* not reserved: the memory has no placement for this batch */
    CHECK_EQ_INT(model_forward(f.m, f.fc, f.mem, &f.b), -ERR_STATE);
    batch_clear(&f.b);
    batch_add(&f.b, 32000, 0, 0, true);  /* outside the vocabulary */
    CHECK_EQ_INT(memory_reserve(f.mem, &f.b), 0);
    CHECK_EQ_INT(model_forward(f.m, f.fc, f.mem, &f.b), -ERR_INVAL);
    memory_seq_rm(f.mem, 0, 0, -1);
    /* a memory of another model's shape */
    struct memory *bk;
    CHECK_EQ_INT(kv_memory_create(&bk, NULL, 16, 1), 0);
    batch_clear(&f.b);
    batch_add(&f.b, 1, 0, 0, true);
    CHECK_EQ_INT(memory_reserve(bk, &f.b), 0);
    CHECK_EQ_INT(model_forward(f.m, f.fc, bk, &f.b), -ERR_STATE);
    memory_destroy(bk);
    teardown(&f);
}

/* Linear rope scaling divides the positions by its factor: kjv-tiny with factor 2 at positions
 * 0, 2, 4, ... turns q and k by exactly the angles (bit for bit: halving is exact) the file
 * without scaling gives at 0, 1, 2, ..., so the logits are identical; at 0, 1, 2, ... they are
 * not. Scaling type "none" ignores the factor. */
TEST(model_linear_rope_scaling_divides_positions) {
    SHARED(src, "models/kjv-tiny-q8_0.gguf");
    char lin[32], none[32];
    const char *const keys[] = {"llama.rope.scaling.type", "llama.rope.scaling.factor"};
    CHECK_EQ_INT(rewrite_model(src, lin, keys, (const char *const[]){"linear", NULL}, (const float[]){0, 2.0f}, 2,
                               NULL, 0), 0);
    CHECK_EQ_INT(rewrite_model(src, none, keys, (const char *const[]){"none", NULL}, (const float[]){0, 2.0f}, 2,
                               NULL, 0), 0);
    const char *paths[] = {src, lin, lin, none};
    const int32_t stride[] = {1, 2, 1, 1};
    float *logits[4] = {NULL};
    int32_t V = 0;
    char why[256];
    for (int k = 0; k < 4; k++) {
        struct fixture f = {0};
        CHECK_EQ_INT(model_load(&f.m, paths[k], NULL, why, sizeof why), 0);
        if (!f.m) break;
        CHECK(fabsf(f.m->hp.tf.rope[0].freq_scale - (k == 1 || k == 2 ? 0.5f : 1.0f)) == 0);
        CHECK_EQ_INT(model_memory_create(f.m, 64, 1, &f.mem), 0);
        CHECK_EQ_INT(forward_ctx_create(&f.fc, f.m, &(struct forward_config){.max_tokens = 16, .n_ctx = 64,
                                                                               .n_threads = 2}), 0);
        CHECK_EQ_INT(batch_init(&f.b, 16), 0);
        V = f.m->hp.n_vocab;
        logits[k] = malloc(sizeof(float) * (size_t)V);
        for (int32_t i = 0; i < NA; i++) batch_add(&f.b, prompt_a[i], i * stride[k], 0, i == NA - 1);
        CHECK_EQ_INT(run(&f), 0);
        memcpy(logits[k], f.fc->logits, sizeof(float) * (size_t)V);
        teardown(&f);
    }
    unlink(lin);
    unlink(none);
    if (!logits[3]) return;
    CHECK(max_diff(logits[0], logits[1], V) == 0);
    CHECK(max_diff(logits[0], logits[2], V) > 0.1f);
    CHECK(max_diff(logits[0], logits[3], V) == 0);
    for (int k = 0; k < 4; k++) free(logits[k]);
}

/* mkmodel writes each transformer family in its files' layout (qwen3: heads of --head-dim with
 * q/k norms; phi3: fused attn_qkv and ffn_up; gemma3: q/k norms, post norms, both layers within
 * its default pattern's sliding-window layers), and the loader reads them back as such. */
TEST(model_mkmodel_writes_each_family_as_its_files_are) {
    SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
    static const char *const archs[] = {"llama", "qwen2", "qwen3", "phi3", "gemma3"};
    for (size_t a = 0; a < sizeof archs / sizeof *archs; a++) {
        char path[] = "/tmp/uvlm-mk-XXXXXX";
        int fd = mkstemp(path);
        CHECK(fd >= 0);
        if (fd < 0) return;
        close(fd);
        char *argv[] = {"mkmodel", "--out", path, "--vocab", (char *)vocab, "--arch", (char *)archs[a], "--type",
                        "q8_0", "--n-layer", "2", "--n-embd", "128", "--n-head", "4", "--n-head-kv", "2",
                        "--head-dim", "64", "--n-ff", "256"};
        CHECK_EQ_INT(cmd_mkmodel((int)(sizeof argv / sizeof *argv), argv), 0);
        struct fixture f = {0};
        char why[256];
        CHECK_EQ_INT(model_load(&f.m, path, NULL, why, sizeof why), 0);
        unlink(path);
        if (!f.m) return;
        const struct transformer_desc *tf = &f.m->hp.tf;
        CHECK_EQ_STR(f.m->hp.arch_name, archs[a]);
        CHECK_EQ_INT(f.m->hp.head_dim, 64);
        CHECK_EQ_INT(f.m->layers[1].wq.n_out, 4 * 64);
        CHECK(tf->qkv_bias == (a == 1) && (f.m->layers[1].bq != NULL) == (a == 1));
        CHECK(tf->qk_norm == (a == 2 || a == 4) && (f.m->layers[1].q_norm != NULL) == (a == 2 || a == 4));
        CHECK((f.m->layers[1].ffn_post_norm != NULL) == (a == 4) && f.m->layers[1].window == (a == 4 ? 512 : 0));
        CHECK(tf->fused_qkv == (a == 3) && tf->fused_gate_up == (a == 3));
        CHECK_EQ_INT(model_memory_create(f.m, 32, 1, &f.mem), 0);
        CHECK_EQ_INT(forward_ctx_create(&f.fc, f.m, &(struct forward_config){.max_tokens = 16, .n_ctx = 32,
                                                                               .n_threads = 2}), 0);
        CHECK_EQ_INT(batch_init(&f.b, 16), 0);
        for (int32_t i = 0; i < NB; i++) batch_add(&f.b, prompt_b[i], i, 0, i == NB - 1);
        CHECK_EQ_INT(run(&f), 0);
        bool finite = true;
        for (int32_t v = 0; v < f.m->hp.n_vocab; v++) finite = finite && isfinite(f.fc->logits[v]);
        CHECK(finite);
        teardown(&f);
    }
}

/* mkmodel's qwen35 files carry the interleaved rope's sections as Qwen3.5's do (the reference's
 * loader requires them): each section the count of its pairs (p % 3), 11, 11, 10 of 32 pairs. */
TEST(model_mkmodel_qwen35_writes_the_rope_sections) {
    SHARED(vocab, "vocab/ggml-vocab-qwen35.gguf");
    char path[] = "/tmp/uvlm-mk-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    char *argv[] = {"mkmodel", "--out", path, "--vocab", (char *)vocab, "--arch", "qwen35", "--type", "q8_0",
                    "--n-layer", "4", "--n-embd", "128", "--n-head", "2", "--n-head-kv", "1", "--head-dim", "64",
                    "--n-rot", "64", "--n-ff", "256", "--d-state", "16", "--dt-rank", "4", "--n-group", "2"};
    CHECK_EQ_INT(cmd_mkmodel((int)(sizeof argv / sizeof *argv), argv), 0);
    struct model *m = NULL;
    char why[256];
    CHECK_EQ_INT(model_load(&m, path, NULL, why, sizeof why), 0);
    unlink(path);
    if (!m) return;
    const struct gguf_array *sec = gguf_get_arr(&m->file, "qwen35.rope.dimension_sections");
    CHECK(sec != NULL && sec->n == 4);
    static const int64_t want[4] = {11, 11, 10, 0};
    for (uint64_t i = 0; sec && i < 4 && i < sec->n; i++) CHECK_EQ_INT(gguf_arr_int(sec, i), want[i]);
    model_free(m);
}

TEST(eval_topk_sorts_and_breaks_ties_by_id) {
    float l[6] = {1, 5, 3, 5, -2, 4};
    struct eval_topk top[4];
    eval_topk(l, 6, 4, top);
    CHECK_EQ_INT(top[0].id, 1);
    CHECK_EQ_INT(top[1].id, 3);
    CHECK_EQ_INT(top[2].id, 5);
    CHECK_EQ_INT(top[3].id, 2);
}

/* Gemma 3 (sliding window of 32 on layers 0-4, full attention on layer 5) as a server runs it:
 * a long prompt keeps every position in the full-attention pool and only its window in the
 * windowed one, and one decode step of several sequences past the window (one sharing another's
 * cells) gives each the very logits of its step alone. */
TEST(model_gemma3_window_memory_and_decode_step_equal_solo) {
    enum { K = 4, W = 32 };
    SHARED(path, "models/gemma3-q8_0.gguf");
    struct fixture f = {0};
    char why[256];
    CHECK_EQ_INT(model_load(&f.m, path, &(struct model_options){.serving_layout = true}, why, sizeof why), 0);
    CHECK_EQ_INT(model_memory_create_batches(f.m, 1024, K, 64, &f.mem), 0);
    CHECK_EQ_INT(forward_ctx_create(&f.fc, f.m, &(struct forward_config){.max_tokens = 64, .n_ctx = 1024,
                                                                           .n_threads = 2}), 0);
    CHECK_EQ_INT(batch_init(&f.b, 64), 0);
    struct memory *full = split_half(f.mem, 0), *win = split_half(f.mem, 1);
    CHECK(full != NULL && win != NULL);
    struct memory_usage u;
    memory_usage(win, &u);
    CHECK_EQ_INT(u.cells_total, K * W + 64); /* a window per sequence and a batch */
    int32_t V = f.m->hp.n_vocab, len[K];
    float *solo = malloc(sizeof(float) * V * K);
    for (int32_t s = 0; s < K; s++) { /* 300, 40, 70 tokens in chunks of 64; 3 shares 2's cells */
        len[s] = s == 0 ? 300 : s == 3 ? len[2] : 40 + 30 * (s - 1);
        if (s == 3) {
            CHECK_EQ_INT(memory_seq_cp(f.mem, 2, 3, 0, -1), 0);
            continue;
        }
        for (int32_t i0 = 0; i0 < len[s]; i0 += 64) {
            batch_clear(&f.b);
            for (int32_t i = i0; i < len[s] && i < i0 + 64; i++) batch_add(&f.b, 2 + (i * 7919 + s * 104729) % 50000, i, s, false);
            CHECK_EQ_INT(run(&f), 0);
        }
    }
    for (int32_t s = 0; s < K; s++) {
        batch_clear(&f.b);
        batch_add(&f.b, 1000 + 7 * s, len[s], s, true);
        CHECK_EQ_INT(run(&f), 0);
        memcpy(solo + (size_t)s * V, f.fc->logits, sizeof(float) * V);
        if (s == 0) { /* the long prompt: every position in the full pool, a window in the other */
            CHECK_EQ_INT(memory_seq_cells(full, 0), 301);
            CHECK_EQ_INT(memory_seq_cells(win, 0), W + 1);
        }
        CHECK_EQ_INT(memory_seq_rm(f.mem, s, len[s], -1), 0); /* its last token back: the window allows it */
    }
    batch_clear(&f.b);
    for (int32_t s = K - 1; s >= 0; s--) batch_add(&f.b, 1000 + 7 * s, len[s], s, true);
    CHECK_EQ_INT(run(&f), 0);
    CHECK_EQ_INT(f.fc->n_outputs, K);
    for (int32_t s = 0; s < K; s++) {
        float d = max_diff(f.fc->logits + (size_t)(K - 1 - s) * V, solo + (size_t)s * V, V);
        if (d != 0) fprintf(stderr, "  sequence %d: max diff %g\n", s, d);
        CHECK(d == 0);
    }
    CHECK(max_diff(solo, solo + V, V) > 0.1f && max_diff(solo + 2 * (size_t)V, solo + 3 * (size_t)V, V) > 0.1f);
    for (int32_t s = 0; s < K; s++) CHECK(memory_seq_cells(win, s) <= W + 1);
    free(solo);
    teardown(&f);
}
