/* Tests of the qwen35 hybrid (gated delta-net layers and gated attention over a split memory,
 * model/deltanet.h, memory/split.h) on ../shared/models/qwen35-q8_0.gguf, on the serving path
 * (the golden tests of golden_test.c run each prompt whole and in chunks of 7, both paths):
 * every prompt at once, interleaved in chunks of different lengths, several sequences and
 * positions per batch, then all of them decoding in one batch per step, against the reference;
 * and a failure injected in each half of the memory, a fork and a preemption giving exactly the
 * numbers of an undisturbed run. */
#include "test.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/err.h"
#include "memory/kv.h"
#include "memory/recurrent.h"
#include "memory/split.h"
#include "model/model.h"

#define MAX_CASES 8

static int32_t argmax(const float *v, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

/* ../shared/README.md's bars for one row: listed logits within tol * max|ref|, the same top-1
 * where the reference's gap exceeds that. */
static bool matches_ref(const float *logits, int32_t n_vocab, json_t *topk, double tol, const char *what, int seq,
                        int pos, double *worst) {
    size_t n = json_array_size(topk);
    if (n < 2) return false;
    double maxabs = 0;
    for (size_t k = 0; k < n; k++) maxabs = fmax(maxabs, fabs(json_number_value(json_array_get(json_array_get(topk, k), 1))));
    for (size_t k = 0; k < n; k++) {
        json_t *e = json_array_get(topk, k);
        int32_t id = (int32_t)json_integer_value(json_array_get(e, 0));
        double want = json_number_value(json_array_get(e, 1));
        if (id < 0 || id >= n_vocab) return false;
        *worst = fmax(*worst, fabs(logits[id] - want) / maxabs);
        if (fabs(logits[id] - want) > tol * maxabs) {
            fprintf(stderr, "  %s seq %d pos %d: logit[%d] = %g, reference %g (bar %g)\n", what, seq, pos, id,
                    logits[id], want, tol * maxabs);
            return false;
        }
    }
    double gap = json_number_value(json_array_get(json_array_get(topk, 0), 1)) -
                 json_number_value(json_array_get(json_array_get(topk, 1), 1));
    int32_t top = (int32_t)json_integer_value(json_array_get(json_array_get(topk, 0), 0));
    if (gap > tol * maxabs && argmax(logits, n_vocab) != top) {
        fprintf(stderr, "  %s seq %d pos %d: top-1 %d, reference %d\n", what, seq, pos, argmax(logits, n_vocab), top);
        return false;
    }
    return true;
}

struct rig {
    struct model *m;
    struct forward_ctx *fc;
    struct memory *mem;
};

static int rig_open(struct test_case *t, struct rig *g, int64_t n_cells, int32_t n_seq, int32_t max_tokens) {
    *g = (struct rig){0};
    const char *path = shared_path(t, "models/qwen35-q8_0.gguf");
    if (!path) return 1;
    char why[256];
    int rc = model_load(&g->m, path, &(struct model_options){.serving_layout = true}, why, sizeof why);
    if (rc < 0) {
        fprintf(stderr, "  %s\n", why);
        return rc;
    }
    if ((rc = model_memory_create(g->m, n_cells, n_seq, &g->mem)) < 0) return rc;
    return forward_ctx_create(&g->fc, g->m, &(struct forward_config){.max_tokens = max_tokens, .n_ctx = n_cells,
                                                                       .n_threads = 2});
}

static void rig_close(struct rig *g) {
    forward_ctx_destroy(g->fc);
    memory_destroy(g->mem);
    model_free(g->m);
}

static int run(struct rig *g, const struct batch *b) {
    int rc = memory_reserve(g->mem, b);
    return rc < 0 ? rc : model_forward(g->m, g->fc, g->mem, b);
}

TEST(qwen35_loads_as_a_hybrid) {
    struct rig g;
    int rc = rig_open(t, &g, 64, 4, 32);
    if (rc > 0) return;
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(g.m->hp.arch, MODEL_ARCH_QWEN35);
    CHECK(g.m->hp.tf.attn_gate);
    CHECK_EQ_INT(g.m->hp.tf.dn.n_k_heads, 2);
    CHECK_EQ_INT(g.m->hp.tf.dn.n_v_heads, 4);
    CHECK_EQ_INT(g.m->hp.tf.dn.head_dim, 16);
    for (int32_t l = 0; l < 4; l++) {
        CHECK_EQ_INT(g.m->layers[l].recurrent, l < 3);
        CHECK_EQ_INT(split_layer_half(g.mem, l), l < 3);
    }
    CHECK(!g.mem->ops->partial_removal && !g.mem->ops->fixed_seq_cells);
    CHECK_EQ_INT(kv_from_memory(split_half(g.mem, 0))->shape.n_layer, 1);
    struct recurrent_memory *r = recurrent_from_memory(split_half(g.mem, 1));
    CHECK(r != NULL);
    CHECK_EQ_INT(r->shape.n_layer, 3);
    CHECK_EQ_INT(r->n_cells, 4);
    CHECK_EQ_INT(recurrent_ssm_floats(&r->shape), 4 * 16 * 16);
    CHECK_EQ_INT(recurrent_conv_floats(&r->shape), 3 * (2 * 2 + 4) * 16);
    CHECK(!model_memory_counts_states(g.m));
    rig_close(&g);
}

/* Chunk length of case c: different per sequence, so batches mix sequences and positions and
 * the chunk boundaries fall everywhere (the 601-token prompt crosses 512 on the way). */
static int32_t chunk_len(int c) { return 5 + 11 * c; }

TEST(qwen35_interleaved_sequences_match_reference) {
    const char *ref_path = shared_path(t, "reference/qwen35-q8_0.json");
    if (!ref_path) return;
    json_error_t jerr;
    json_t *ref = json_load_file(ref_path, 0, &jerr);
    CHECK(ref != NULL);
    json_t *cases = json_object_get(ref, "cases");
    int n_cases = (int)json_array_size(cases);
    CHECK(n_cases >= 2 && n_cases <= MAX_CASES);
    struct rig g;
    int rc = rig_open(t, &g, 4096, n_cases, 64);
    if (rc > 0) {
        json_decref(ref);
        return;
    }
    CHECK_EQ_INT(rc, 0);
    const int32_t V = g.m->hp.n_vocab;
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 64), 0);
    int32_t next[MAX_CASES] = {0};
    double worst = 0;
    bool ok = true;
    for (bool more = true; ok && more;) {
        more = false;
        batch_clear(&b);
        for (int c = 0; c < n_cases; c++) {
            json_t *toks = json_object_get(json_array_get(cases, (size_t)c), "tokens");
            int32_t n = (int32_t)json_array_size(toks), end = next[c] + chunk_len(c);
            for (; next[c] < n && next[c] < end && b.n_tokens < 64; next[c]++)
                batch_add(&b, (int32_t)json_integer_value(json_array_get(toks, (size_t)next[c])), next[c], c, true);
            more |= next[c] < n;
        }
        ok = run(&g, &b) == 0;
        for (int32_t i = 0; ok && i < b.n_tokens; i++) {
            json_t *topk = json_array_get(json_object_get(json_array_get(cases, (size_t)b.seq[i]), "prompt_topk"),
                                          (size_t)b.pos[i]);
            ok = matches_ref(g.fc->logits + (size_t)i * V, V, topk, 0.03, "prompt", b.seq[i], b.pos[i], &worst);
        }
    }
    CHECK(ok);
    /* every case decoding at once, teacher-forced with the reference's greedy tokens */
    for (int k = 0; ok && k < 32; k++) {
        batch_clear(&b);
        for (int c = 0; c < n_cases; c++) {
            json_t *kase = json_array_get(cases, (size_t)c);
            int32_t n = (int32_t)json_array_size(json_object_get(kase, "tokens"));
            batch_add(&b, (int32_t)json_integer_value(json_array_get(json_object_get(kase, "greedy"), (size_t)k)), n + k,
                      c, true);
        }
        ok = run(&g, &b) == 0;
        for (int c = 0; ok && c < n_cases; c++) {
            json_t *topk = json_array_get(json_object_get(json_array_get(cases, (size_t)c), "greedy_topk"), (size_t)k);
            ok = matches_ref(g.fc->logits + (size_t)c * V, V, topk, 0.03, "greedy", c, k, &worst);
        }
    }
    CHECK(ok);
    fprintf(stderr, "  qwen35 interleaved: worst |logit - ref| = %.4f of the row's max |logit| (bar 0.03)\n", worst);
    batch_free(&b);
    rig_close(&g);
    json_decref(ref);
}

static const int32_t prompt[] = {151643, 785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13, 576};
#define N_PROMPT ((int32_t)(sizeof prompt / sizeof *prompt))
enum { N_STEPS = 4 };

/* The prompt into seq in one batch, then N_STEPS greedy tokens; each step's logits to out. */
static int generate(struct rig *g, struct batch *b, int32_t seq, int32_t p0, float *out, int32_t *last_tok) {
    int32_t V = g->m->hp.n_vocab, tok = *last_tok;
    for (int k = 0; k < N_STEPS; k++) {
        batch_clear(b);
        batch_add(b, tok, p0 + k, seq, true);
        int rc = run(g, b);
        if (rc < 0) return rc;
        memcpy(out + (size_t)k * V, g->fc->logits, (size_t)V * sizeof(float));
        tok = argmax(g->fc->logits, V);
    }
    *last_tok = tok;
    return 0;
}

static int feed_prompt(struct rig *g, struct batch *b, int32_t seq, int32_t *next_tok) {
    batch_clear(b);
    for (int32_t i = 0; i < N_PROMPT; i++) batch_add(b, prompt[i], i, seq, i == N_PROMPT - 1);
    int rc = run(g, b);
    if (rc == 0) *next_tok = argmax(g->fc->logits, g->m->hp.n_vocab);
    return rc;
}

/* A reserve refused by the KV half (too few cells) or by the recurrent half (a position gap it
 * cannot take), a fork and a preemption (save, free, restore): the sequences then produce
 * exactly the logits of an undisturbed run. */
TEST(qwen35_failures_forks_and_preemption_keep_the_numbers) {
    struct rig g;
    int rc = rig_open(t, &g, 40, 3, 32);
    if (rc > 0) return;
    CHECK_EQ_INT(rc, 0);
    const int32_t V = g.m->hp.n_vocab;
    float *want = malloc((size_t)N_STEPS * V * sizeof(float)), *got = malloc((size_t)N_STEPS * V * sizeof(float));
    CHECK(want && got);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 32), 0);
    struct memory_usage u0, u;
    memory_usage(g.mem, &u0);
    /* the undisturbed run */
    int32_t tok0, tok = 0;
    CHECK_EQ_INT(feed_prompt(&g, &b, 0, &tok0), 0);
    tok = tok0;
    CHECK_EQ_INT(generate(&g, &b, 0, N_PROMPT, want, &tok), 0);
    CHECK_EQ_INT(memory_seq_rm(g.mem, 0, 0, -1), 0);
    memory_usage(g.mem, &u);
    CHECK_EQ_INT(u.cells_used, 0);

    /* the same prompt, then failures in each half before decoding */
    CHECK_EQ_INT(feed_prompt(&g, &b, 1, &tok), 0);
    CHECK_EQ_INT(tok, tok0);
    batch_clear(&b);
    for (int32_t i = 0; i < 30; i++) batch_add(&b, 13, N_PROMPT + i, 1, i == 29); /* 28 cells free */
    CHECK_EQ_INT(run(&g, &b), -ERR_NOMEM);
    batch_clear(&b);
    batch_add(&b, 13, N_PROMPT + 3, 1, true); /* a gap: the recurrent state refuses it */
    CHECK_EQ_INT(run(&g, &b), -ERR_INVAL);
    memory_usage(g.mem, &u);
    CHECK_EQ_INT(u.cells_used, N_PROMPT);
    CHECK_EQ_INT(memory_seq_pos_max(split_half(g.mem, 1), 1), N_PROMPT - 1);
    /* a fork: sequence 2 goes on from a copy of 1's state, sharing its cells */
    CHECK_EQ_INT(memory_seq_cp(g.mem, 1, 2, 0, -1), 0);
    memory_usage(g.mem, &u);
    CHECK_EQ_INT(u.cells_used, N_PROMPT);
    int32_t tok2 = tok;
    CHECK_EQ_INT(generate(&g, &b, 2, N_PROMPT, got, &tok2), 0);
    CHECK(memcmp(got, want, (size_t)N_STEPS * V * sizeof(float)) == 0);
    CHECK_EQ_INT(memory_seq_rm(g.mem, 2, 0, -1), 0);
    /* preempted to the host and back before decoding */
    struct memory_snapshot *snap;
    CHECK_EQ_INT(memory_seq_save(g.mem, 1, &snap), 0);
    CHECK_EQ_INT(memory_seq_rm(g.mem, 1, 0, -1), 0);
    memory_usage(g.mem, &u);
    CHECK_EQ_INT(u.cells_used, 0);
    CHECK_EQ_INT(memory_seq_restore(g.mem, 1, snap), 0);
    memory_snapshot_free(g.mem, snap);
    CHECK_EQ_INT(generate(&g, &b, 1, N_PROMPT, got, &tok), 0);
    CHECK(memcmp(got, want, (size_t)N_STEPS * V * sizeof(float)) == 0);
    CHECK_EQ_INT(memory_seq_rm(g.mem, 1, 0, -1), 0);
    memory_usage(g.mem, &u);
    CHECK_EQ_INT(u.cells_used, u0.cells_used);
    CHECK_EQ_INT(memory_seq_cells(split_half(g.mem, 1), 1), 0);
    free(want);
    free(got);
    batch_free(&b);
    rig_close(&g);
}
