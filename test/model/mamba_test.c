/* Tests of the Mamba-1 forward pass (model/mamba.h): golden logits against ../shared/reference for
 * the F32 and Q8_0 models (whole prompts in one batch; the same prompts interleaved in small
 * chunks, several sequences per batch; teacher-forced greedy decoding of every case at once), and
 * the recurrent-state operations the server relies on (fork, save/restore, error paths). */
#include "test.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>

#include "common/batch.h"
#include "common/err.h"
#include "gguf/gguf.h"
#include "math/matmul.h"
#include "memory/recurrent.h"
#include "model/mamba.h"
#include "model/model.h"
#include "sched/sched.h"

#define MAX_CASES 8

/* A loaded model with everything needed to run batches of up to max_tokens entries. */
struct rig {
    struct gguf_file file;
    struct mamba_model *m;
    struct mamba_scratch *s;
    struct compute *c;
    struct memory *mem;
};

static int rig_open(struct rig *g, const char *path, int32_t max_tokens, int32_t n_states, int32_t n_seq) {
    char why[256];
    *g = (struct rig){0};
    int rc;
    if ((rc = gguf_open(&g->file, path, why, sizeof why)) < 0 ||
        (rc = mamba_load(&g->m, &g->file, why, sizeof why)) < 0) {
        fprintf(stderr, "  %s: %s\n", path, why);
        return rc;
    }
    if ((rc = mamba_scratch_create(&g->s, g->m, max_tokens, max_tokens)) < 0 ||
        (rc = compute_create(&g->c, 2, max_tokens, mamba_max_n_in(g->m))) < 0 ||
        (rc = mamba_memory_create(g->m, n_states, n_seq, &g->mem)) < 0)
        return rc;
    return 0;
}

static void rig_close(struct rig *g) {
    memory_destroy(g->mem);
    if (g->c) compute_destroy(g->c);
    mamba_scratch_destroy(g->s);
    mamba_free(g->m);
    if (g->file.base) gguf_close(&g->file);
}

/* Reserve and run b; logits rows of its want_logits entries go to out. */
static int run(struct rig *g, const struct batch *b, float *out) {
    int rc = memory_reserve(g->mem, b);
    return rc < 0 ? rc : mamba_forward(g->m, g->s, g->c, g->mem, b, out);
}

/* ---- the reference ---- */

struct ref_case {
    int32_t n_prompt;
    int32_t *tokens;      /* [n_prompt] */
    json_t *prompt_topk;  /* [n_prompt] of [[id, logit] x topk] */
    int32_t greedy[32];
    json_t *greedy_topk;  /* [32] */
};

struct ref {
    json_t *root;
    int n_cases;
    struct ref_case cases[MAX_CASES];
};

static int ref_load(struct ref *r, const char *path) {
    json_error_t err;
    *r = (struct ref){0};
    r->root = json_load_file(path, 0, &err);
    if (!r->root) { fprintf(stderr, "  %s: %s\n", path, err.text); return -1; }
    json_t *cases = json_object_get(r->root, "cases");
    r->n_cases = (int)json_array_size(cases);
    if (r->n_cases < 1 || r->n_cases > MAX_CASES) return -1;
    for (int c = 0; c < r->n_cases; c++) {
        json_t *jc = json_array_get(cases, (size_t)c);
        struct ref_case *rc = &r->cases[c];
        json_t *toks = json_object_get(jc, "tokens"), *greedy = json_object_get(jc, "greedy");
        rc->n_prompt = (int32_t)json_array_size(toks);
        rc->tokens = malloc((size_t)rc->n_prompt * sizeof *rc->tokens);
        if (!rc->tokens || json_array_size(greedy) != 32) return -1;
        for (int32_t i = 0; i < rc->n_prompt; i++) rc->tokens[i] = (int32_t)json_integer_value(json_array_get(toks, (size_t)i));
        for (int i = 0; i < 32; i++) rc->greedy[i] = (int32_t)json_integer_value(json_array_get(greedy, (size_t)i));
        rc->prompt_topk = json_object_get(jc, "prompt_topk");
        rc->greedy_topk = json_object_get(jc, "greedy_topk");
        if ((int32_t)json_array_size(rc->prompt_topk) != rc->n_prompt || json_array_size(rc->greedy_topk) != 32) return -1;
    }
    return 0;
}

static void ref_free(struct ref *r) {
    for (int c = 0; c < r->n_cases; c++) free(r->cases[c].tokens);
    json_decref(r->root);
}

static int32_t argmax(const float *v, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++) if (v[i] > v[best]) best = i;
    return best;
}

/* The bars of ../shared/README.md for one position: every listed logit within tol * max|ref|,
 * and the same top-1 where the reference's top-1/top-2 gap exceeds that. Prints what failed;
 * *worst keeps the largest |logit - ref| / max|ref| seen. */
static bool matches_ref(const float *logits, int32_t n_vocab, json_t *topk, float tol, const char *what, int pos,
                        double *worst) {
    size_t n = json_array_size(topk);
    if (n < 2) return false;
    double maxabs = 0;
    for (size_t k = 0; k < n; k++) maxabs = fmax(maxabs, fabs(json_number_value(json_array_get(json_array_get(topk, k), 1))));
    double bar = tol * maxabs;
    for (size_t k = 0; k < n; k++) {
        json_t *e = json_array_get(topk, k);
        int32_t id = (int32_t)json_integer_value(json_array_get(e, 0));
        double want = json_number_value(json_array_get(e, 1));
        if (id >= 0 && id < n_vocab && maxabs > 0) *worst = fmax(*worst, fabs(logits[id] - want) / maxabs);
        if (id < 0 || id >= n_vocab || fabs(logits[id] - want) > bar) {
            fprintf(stderr, "  %s pos %d: logit[%d] = %g, reference %g (bar %g)\n", what, pos, id,
                    id >= 0 && id < n_vocab ? logits[id] : NAN, want, bar);
            return false;
        }
    }
    double gap = json_number_value(json_array_get(json_array_get(topk, 0), 1)) -
                 json_number_value(json_array_get(json_array_get(topk, 1), 1));
    int32_t top = (int32_t)json_integer_value(json_array_get(json_array_get(topk, 0), 0));
    if (gap > bar && argmax(logits, n_vocab) != top) {
        fprintf(stderr, "  %s pos %d: top-1 %d, reference %d (gap %g)\n", what, pos, argmax(logits, n_vocab), top, gap);
        return false;
    }
    return true;
}

/* Chunk length of case c in the interleaved run: different per sequence, so batches mix
 * sequences at different positions and chunk boundaries fall everywhere. */
static int32_t chunk_len(int c) { return 3 + 2 * c; }
static bool chunk_end(const struct ref_case *rc, int c, int32_t p) {
    return (p + 1) % chunk_len(c) == 0 || p == rc->n_prompt - 1;
}

/* The whole golden check of one model (see the file comment). */
static void golden(struct test_case *t, const char *model_rel, const char *ref_rel, float tol) {
    SHARED(model_shared, model_rel);
    char model_path[512]; /* shared_path's string lives only until its next call */
    snprintf(model_path, sizeof model_path, "%s", model_shared);
    SHARED(ref_path, ref_rel);
    struct ref ref;
    CHECK(ref_load(&ref, ref_path) == 0);
    int32_t max_prompt = 0;
    for (int c = 0; c < ref.n_cases; c++)
        if (ref.cases[c].n_prompt > max_prompt) max_prompt = ref.cases[c].n_prompt;
    struct rig g;
    CHECK_EQ_INT(rig_open(&g, model_path, max_prompt, ref.n_cases, ref.n_cases), 0);
    const int32_t V = g.m->hp.n_vocab;
    CHECK_EQ_INT(V, (int32_t)json_integer_value(json_object_get(ref.root, "n_vocab")));
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, max_prompt), 0);
    float *logits = malloc((size_t)max_prompt * (size_t)V * sizeof(float));
    float *whole[MAX_CASES] = {0}; /* per case: the one-batch logits at its chunk ends */
    bool ok = logits != NULL;
    double worst = 0;

    /* 1. each prompt alone, in one batch, logits at every position */
    for (int c = 0; ok && c < ref.n_cases; c++) {
        const struct ref_case *rc = &ref.cases[c];
        batch_clear(&b);
        for (int32_t p = 0; p < rc->n_prompt; p++) batch_add(&b, rc->tokens[p], p, 0, true);
        ok = run(&g, &b, logits) == 0;
        int32_t n_ends = 0;
        for (int32_t p = 0; p < rc->n_prompt; p++) n_ends += chunk_end(rc, c, p);
        whole[c] = malloc((size_t)n_ends * (size_t)V * sizeof(float));
        ok = ok && whole[c];
        for (int32_t p = 0, e = 0; ok && p < rc->n_prompt; p++) {
            ok = matches_ref(logits + (size_t)p * V, V, json_array_get(rc->prompt_topk, (size_t)p), tol, "one batch", p, &worst);
            if (chunk_end(rc, c, p)) memcpy(whole[c] + (size_t)e++ * V, logits + (size_t)p * V, (size_t)V * sizeof(float));
        }
        ok = ok && memory_seq_rm(g.mem, 0, 0, -1) == 0;
    }
    CHECK(ok);

    /* 2. every prompt at once, sequence c in chunks of chunk_len(c), interleaved in shared batches
     * of at most 16 entries; logits at chunk ends agree with the one-batch run and the reference */
    int32_t next[MAX_CASES] = {0}, seen_ends[MAX_CASES] = {0};
    for (bool more = true; ok && more;) {
        more = false;
        batch_clear(&b);
        for (int c = 0; c < ref.n_cases; c++) {
            const struct ref_case *rc = &ref.cases[c];
            int32_t end = next[c] + chunk_len(c) - next[c] % chunk_len(c);
            for (; next[c] < rc->n_prompt && next[c] < end && b.n_tokens < 16; next[c]++)
                batch_add(&b, rc->tokens[next[c]], next[c], c, chunk_end(rc, c, next[c]));
            more |= next[c] < rc->n_prompt;
        }
        ok = run(&g, &b, logits) == 0;
        for (int32_t i = 0, row = 0; ok && i < b.n_tokens; i++) {
            if (!b.want_logits[i]) continue;
            int c = b.seq[i];
            const float *got = logits + (size_t)row++ * V, *one = whole[c] + (size_t)seen_ends[c]++ * V;
            ok = matches_ref(got, V, json_array_get(ref.cases[c].prompt_topk, (size_t)b.pos[i]), tol, "chunked", b.pos[i], &worst);
            float maxabs_one = 0;
            for (int32_t v = 0; v < V; v++) maxabs_one = fmaxf(maxabs_one, fabsf(one[v]));
            for (int32_t v = 0; ok && v < V; v++)
                if (fabsf(got[v] - one[v]) > tol * maxabs_one) {
                    fprintf(stderr, "  chunked vs one batch: seq %d pos %d logit %d: %g vs %g\n", c, b.pos[i], v, got[v], one[v]);
                    ok = false;
                }
        }
    }
    CHECK(ok);

    /* 3. greedy continuation of every case in one batch per step (teacher-forced with the
     * reference's tokens, so each step is compared with its own reference logits) */
    for (int k = 0; ok && k < 32; k++) {
        batch_clear(&b);
        for (int c = 0; c < ref.n_cases; c++) batch_add(&b, ref.cases[c].greedy[k], ref.cases[c].n_prompt + k, c, true);
        ok = run(&g, &b, logits) == 0;
        for (int c = 0; ok && c < ref.n_cases; c++)
            ok = matches_ref(logits + (size_t)c * V, V, json_array_get(ref.cases[c].greedy_topk, (size_t)k), tol, "greedy", k, &worst);
    }
    CHECK(ok);
    fprintf(stderr, "  %s: worst |logit - ref| = %.3g of the row's max |logit| (bar %g)\n", model_rel, worst, tol);

    for (int c = 0; c < ref.n_cases; c++) free(whole[c]);
    free(logits);
    batch_free(&b);
    rig_close(&g);
    ref_free(&ref);
}

TEST(mamba_golden_f32) {
    golden(t, "models/mamba-spm-f32.gguf", "reference/mamba-spm-f32.json", 0.01f);
}

TEST(mamba_golden_q8_0) {
    golden(t, "models/mamba-spm-q8_0.gguf", "reference/mamba-spm-q8_0.json", 0.03f);
}

/* ---- the operations the server builds on ---- */

static const int32_t prompt[] = {1, 450, 4996, 17354, 1701, 432, 17204, 975, 278, 17366, 11203};
#define N_PROMPT ((int32_t)(sizeof prompt / sizeof *prompt))

/* Feed tokens toks[0..n) to seq from position p0 in one batch; the last position's logits to out. */
static int feed(struct rig *g, struct batch *b, int32_t seq, int32_t p0, const int32_t *toks, int32_t n, float *out) {
    batch_clear(b);
    for (int32_t i = 0; i < n; i++) batch_add(b, toks[i], p0 + i, seq, i == n - 1);
    return run(g, b, out);
}

static bool same_row(const float *a, const float *b, int32_t n) {
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* n choices fork from one prompt evaluation, and a preempted sequence resumes exactly. Small
 * batches all take the same matmul path, so the logits must be bit-identical. */
TEST(mamba_fork_and_preemption_are_exact) {
    SHARED(path, "models/mamba-spm-q8_0.gguf");
    struct rig g;
    CHECK_EQ_INT(rig_open(&g, path, 16, 4, 5), 0);
    const int32_t V = g.m->hp.n_vocab;
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 16), 0);
    float *solo = malloc(4 * (size_t)V * sizeof(float)), *got = malloc(4 * (size_t)V * sizeof(float));
    CHECK(solo && got);
    const int32_t next[3] = {29889, 306, 13};

    /* alone: prompt then each of next[] as the first generated token, one fresh run each */
    for (int k = 0; k < 3; k++) {
        CHECK_EQ_INT(feed(&g, &b, 0, 0, prompt, N_PROMPT, got), 0);
        CHECK_EQ_INT(feed(&g, &b, 0, N_PROMPT, &next[k], 1, solo + (size_t)k * V), 0);
        CHECK_EQ_INT(memory_seq_rm(g.mem, 0, 0, -1), 0);
    }
    CHECK(!same_row(solo, solo + V, V)); /* the three continuations differ */

    /* n = 3: one prompt evaluation, forks (3 keeps the prompt's state for later), three
     * different tokens in one batch */
    CHECK_EQ_INT(feed(&g, &b, 0, 0, prompt, N_PROMPT, got), 0);
    for (int32_t s = 1; s <= 3; s++) CHECK_EQ_INT(memory_seq_cp(g.mem, 0, s, 0, -1), 0);
    batch_clear(&b);
    for (int k = 0; k < 3; k++) batch_add(&b, next[k], N_PROMPT, k, true);
    CHECK_EQ_INT(run(&g, &b, got), 0);
    for (int k = 0; k < 3; k++) CHECK(same_row(got + (size_t)k * V, solo + (size_t)k * V, V));

    /* preemption: save sequence 1, free it, let another sequence fill the pool, restore, resume;
     * sequence 2 redoes 1's path from the prompt state without interruption, for comparison */
    struct memory_snapshot *snap;
    CHECK_EQ_INT(memory_seq_save(g.mem, 1, &snap), 0);
    CHECK_EQ_INT(memory_seq_rm(g.mem, 1, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_rm(g.mem, 2, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_cp(g.mem, 3, 2, 0, -1), 0);
    CHECK_EQ_INT(feed(&g, &b, 2, N_PROMPT, &next[1], 1, got), 0);
    CHECK_EQ_INT(feed(&g, &b, 4, 0, prompt + 3, 5, got), 0); /* an intruder takes the last cell */
    CHECK_EQ_INT(memory_seq_restore(g.mem, 1, snap), -ERR_NOMEM);
    CHECK_EQ_INT(memory_seq_rm(g.mem, 4, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_restore(g.mem, 1, snap), 0);
    memory_snapshot_free(g.mem, snap);
    const int32_t more[2] = {1576, 338};
    CHECK_EQ_INT(feed(&g, &b, 1, N_PROMPT + 1, more, 2, got), 0);
    CHECK_EQ_INT(feed(&g, &b, 2, N_PROMPT + 1, more, 2, got + V), 0);
    CHECK(same_row(got, got + V, V));

    /* a finished (or disconnected) sequence frees its state */
    struct memory_usage u;
    memory_usage(g.mem, &u);
    CHECK_EQ_INT(u.cells_used, 4);
    CHECK_EQ_INT(memory_seq_rm(g.mem, 1, 0, -1), 0);
    memory_usage(g.mem, &u);
    CHECK_EQ_INT(u.cells_used, 3);
    free(solo);
    free(got);
    batch_free(&b);
    rig_close(&g);
}

/* Six users at once: sequence k's prompt joins the batch at step k while the others decode, so
 * every batch mixes prompts and decodes at different positions; each sequence's greedy tokens and
 * logits are bit-identical to its run alone (all batches stay on one matmul path). */
TEST(mamba_concurrent_sequences_match_solo_runs) {
    SHARED(path, "models/mamba-spm-q8_0.gguf");
    enum { N_SEQ = 6, N_GEN = 6 };
    struct rig g;
    CHECK_EQ_INT(rig_open(&g, path, 16, N_SEQ, N_SEQ), 0);
    const int32_t V = g.m->hp.n_vocab;
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 16), 0);
    float *last = malloc((size_t)N_SEQ * V * sizeof(float)), *out = malloc(16 * (size_t)V * sizeof(float));
    CHECK(last && out);
    int32_t solo[N_SEQ][N_GEN], together[N_SEQ][N_GEN];
    /* sequence k: prompt[k .. k + k + 1], i.e. different lengths and contents */
    for (int k = 0; k < N_SEQ; k++) {
        int32_t n = k + 1, tok;
        CHECK_EQ_INT(feed(&g, &b, 0, 0, prompt + k, n, out), 0);
        for (int j = 0; j < N_GEN; j++) {
            tok = solo[k][j] = argmax(out, V);
            CHECK_EQ_INT(feed(&g, &b, 0, n + j, &tok, 1, out), 0);
        }
        memcpy(last + (size_t)k * V, out, (size_t)V * sizeof(float));
        CHECK_EQ_INT(memory_seq_rm(g.mem, 0, 0, -1), 0);
    }
    int n_done[N_SEQ] = {0};
    for (int step = 0; step < N_SEQ + N_GEN; step++) {
        batch_clear(&b);
        for (int k = 0; k < N_SEQ; k++) {
            if (step == k) /* the prompt joins */
                for (int32_t i = 0; i <= k; i++) batch_add(&b, prompt[k + i], i, k, i == k);
            else if (step > k && n_done[k] < N_GEN)
                batch_add(&b, together[k][n_done[k]], k + 1 + n_done[k], k, true);
        }
        CHECK_EQ_INT(run(&g, &b, out), 0);
        for (int32_t i = 0, row = 0; i < b.n_tokens; i++) {
            if (!b.want_logits[i]) continue;
            int k = b.seq[i];
            const float *l = out + (size_t)row++ * V;
            if (step > k) n_done[k]++;
            if (n_done[k] < N_GEN) together[k][n_done[k]] = argmax(l, V);
            else CHECK(same_row(l, last + (size_t)k * V, V));
        }
    }
    for (int k = 0; k < N_SEQ; k++) {
        CHECK_EQ_INT(n_done[k], N_GEN);
        for (int j = 0; j < N_GEN; j++) CHECK_EQ_INT(together[k][j], solo[k][j]);
    }
    free(last);
    free(out);
    batch_free(&b);
    rig_close(&g);
}

TEST(mamba_forward_rejects_bad_batches) {
    SHARED(path, "models/mamba-spm-q8_0.gguf");
    struct rig g;
    CHECK_EQ_INT(rig_open(&g, path, 4, 2, 2), 0);
    const int32_t V = g.m->hp.n_vocab;
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 8), 0);
    float *out = malloc(8 * (size_t)V * sizeof(float));
    CHECK(out);
    CHECK_EQ_INT(mamba_forward(g.m, g.s, g.c, g.mem, &b, out), -ERR_INVAL); /* empty */
    /* not reserved: the sequence holds no state */
    batch_add(&b, 1, 0, 0, true);
    CHECK_EQ_INT(mamba_forward(g.m, g.s, g.c, g.mem, &b, out), -ERR_STATE);
    /* a token outside the vocabulary, found before any state changes */
    CHECK_EQ_INT(memory_reserve(g.mem, &b), 0);
    CHECK_EQ_INT(mamba_forward(g.m, g.s, g.c, g.mem, &b, out), 0);
    struct recurrent_memory *r = recurrent_from_memory(g.mem);
    float before = recurrent_ssm_state(r, 0, 0)[5];
    batch_clear(&b);
    batch_add(&b, V, 1, 0, true);
    CHECK_EQ_INT(memory_reserve(g.mem, &b), 0);
    CHECK_EQ_INT(mamba_forward(g.m, g.s, g.c, g.mem, &b, out), -ERR_INVAL);
    CHECK(recurrent_ssm_state(r, 0, 0)[5] == before);
    /* more entries than the scratch holds */
    batch_clear(&b);
    for (int32_t p = 0; p < 5; p++) batch_add(&b, 1, p, 1, false);
    CHECK_EQ_INT(memory_reserve(g.mem, &b), 0);
    CHECK_EQ_INT(mamba_forward(g.m, g.s, g.c, g.mem, &b, out), -ERR_TOOBIG);
    /* a memory that is not this model's state */
    struct memory *other;
    CHECK_EQ_INT(recurrent_memory_create(&other, NULL, 2, 2), 0);
    batch_clear(&b);
    batch_add(&b, 1, 0, 0, true);
    CHECK_EQ_INT(memory_reserve(other, &b), 0);
    CHECK_EQ_INT(mamba_forward(g.m, g.s, g.c, other, &b, out), -ERR_STATE);
    memory_destroy(other);
    free(out);
    batch_free(&b);
    rig_close(&g);
}

/* The loader reads the shape from the metadata and refuses what it cannot run, naming why. */
TEST(mamba_load_checks_metadata_and_tensors) {
    SHARED(path, "models/mamba-spm-q8_0.gguf");
    char why[256];
    struct gguf_file f;
    CHECK_EQ_INT(gguf_open(&f, path, why, sizeof why), 0);
    struct mamba_model *m;
    CHECK_EQ_INT(mamba_load(&m, &f, why, sizeof why), 0);
    /* the shape ../shared/README.md documents for this model */
    CHECK_EQ_INT(m->hp.n_embd, 128);
    CHECK_EQ_INT(m->hp.n_layer, 4);
    CHECK_EQ_INT(m->hp.d_inner, 256);
    CHECK_EQ_INT(m->hp.d_state, 16);
    CHECK_EQ_INT(m->hp.d_conv, 4);
    CHECK_EQ_INT(m->hp.dt_rank, 8);
    CHECK_EQ_INT(m->hp.n_vocab, 32000);
    CHECK(m->hp.tied_output);
    CHECK(m->output.data == m->token_embd.data);
    CHECK_EQ_INT(m->layers[2].dt.type, GGML_TYPE_F16);
    CHECK_EQ_INT(m->layers[2].in.type, GGML_TYPE_Q8_0);
    CHECK(m->layers[3].a[0] < 0); /* stored as -exp(A_log) */
    mamba_free(m);

    /* the same bytes with one tensor or one key renamed */
    unsigned char *buf = malloc(f.size);
    CHECK(buf);
    struct { const char *from, *to; int rc; const char *named; } cases[] = {
        {"blk.2.ssm_d", "blk.2.ssm_q", -ERR_FORMAT, "blk.2.ssm_d"},
        {"mamba.ssm.state_size", "mamba.ssm.statX_size", -ERR_FORMAT, "mamba.ssm.state_size"},
        {"general.architecture", "general.architectur_", -ERR_UNSUPPORTED, "not a mamba"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        memcpy(buf, f.base, f.size);
        size_t n = strlen(cases[k].from);
        unsigned char *at = memmem(buf, f.size, cases[k].from, n);
        CHECK(at != NULL);
        memcpy(at, cases[k].to, n);
        struct gguf_file g;
        CHECK_EQ_INT(gguf_parse(&g, buf, f.size, why, sizeof why), 0);
        why[0] = 0;
        CHECK_EQ_INT(mamba_load(&m, &g, why, sizeof why), cases[k].rc);
        CHECK(strstr(why, cases[k].named) != NULL);
        gguf_close(&g);
    }
    free(buf);
    gguf_close(&f);
}

TEST(mamba_load_refuses_a_transformer) {
    SHARED(path, "models/llama3-bpe-q8_0.gguf");
    char why[256];
    struct gguf_file f;
    CHECK_EQ_INT(gguf_open(&f, path, why, sizeof why), 0);
    struct mamba_model *m;
    CHECK_EQ_INT(mamba_load(&m, &f, why, sizeof why), -ERR_UNSUPPORTED);
    gguf_close(&f);
}

/* Append to buf (capacity checked by the caller) n bytes of p. */
static unsigned char *put(unsigned char *at, const void *p, size_t n) {
    memcpy(at, p, n);
    return at + n;
}

/* The shared model rewritten with one more tensor, output.weight = a copy of token_embd.weight:
 * the same key/values and tensors, the new one last. Returns the buffer (size in *size). */
static unsigned char *with_untied_output(const struct gguf_file *f, size_t *size) {
    const struct gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    size_t kv_end = (size_t)((const unsigned char *)f->tensors[0].name.ptr - f->base) - 8;
    size_t data_len = f->size - f->data_offset;
    size_t new_off = (data_len + f->alignment - 1) / f->alignment * f->alignment;
    size_t cap = f->size + emb->size + 4096 + f->alignment * 2;
    unsigned char *buf = calloc(1, cap), *at = buf;
    if (!buf) return NULL;
    uint64_t n_tensors = f->n_tensors + 1;
    at = put(at, f->base, 8);                                  /* magic + version */
    at = put(at, &n_tensors, 8);
    at = put(at, f->base + 16, kv_end - 16); /* n_kv and every key/value, as they were */
    for (uint64_t i = 0; i <= f->n_tensors; i++) {
        const struct gguf_tensor *t = i < f->n_tensors ? &f->tensors[i] : emb;
        const char *name = i < f->n_tensors ? t->name.ptr : "output.weight";
        uint64_t len = i < f->n_tensors ? t->name.len : strlen(name), off = i < f->n_tensors ? t->offset : new_off;
        uint32_t type = t->type;
        at = put(at, &len, 8);
        at = put(at, name, len);
        at = put(at, &t->n_dims, 4);
        at = put(at, t->ne, 8 * (size_t)t->n_dims);
        at = put(at, &type, 4);
        at = put(at, &off, 8);
    }
    size_t data_start = ((size_t)(at - buf) + f->alignment - 1) / f->alignment * f->alignment;
    memcpy(buf + data_start, f->base + f->data_offset, data_len);
    memcpy(buf + data_start + new_off, emb->data, emb->size);
    *size = data_start + new_off + emb->size;
    return buf;
}

/* A separate output matrix is used when present: with a copy of the embedding it gives exactly
 * the tied logits. */
TEST(mamba_untied_output_matches_tied_copy) {
    SHARED(path, "models/mamba-spm-q8_0.gguf");
    struct rig g;
    CHECK_EQ_INT(rig_open(&g, path, 16, 1, 1), 0);
    const int32_t V = g.m->hp.n_vocab;
    size_t size = 0;
    unsigned char *buf = with_untied_output(&g.file, &size);
    CHECK(buf);
    char why[256];
    struct gguf_file f2;
    CHECK_EQ_INT(gguf_parse(&f2, buf, size, why, sizeof why), 0);
    struct mamba_model *m2;
    CHECK_EQ_INT(mamba_load(&m2, &f2, why, sizeof why), 0);
    CHECK(!m2->hp.tied_output);
    CHECK(m2->output.data != m2->token_embd.data);
    float *a = malloc((size_t)V * sizeof(float)), *b2 = malloc((size_t)V * sizeof(float));
    CHECK(a && b2);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 16), 0);
    CHECK_EQ_INT(feed(&g, &b, 0, 0, prompt, N_PROMPT, a), 0);
    CHECK_EQ_INT(memory_seq_rm(g.mem, 0, 0, -1), 0);
    CHECK_EQ_INT(memory_reserve(g.mem, &b), 0);
    CHECK_EQ_INT(mamba_forward(m2, g.s, g.c, g.mem, &b, b2), 0);
    CHECK(same_row(a, b2, V));
    batch_free(&b);
    free(a);
    free(b2);
    mamba_free(m2);
    gguf_close(&f2);
    free(buf);
    rig_close(&g);
}

/* Through model.h: the architecture dispatch loads mamba, gives it recurrent memory, and
 * model_forward computes exactly what mamba_forward does. */
TEST(mamba_through_model_api) {
    SHARED(path, "models/mamba-spm-q8_0.gguf");
    char why[256];
    struct model *m;
    CHECK_EQ_INT(model_load(&m, path, NULL, why, sizeof why), 0);
    CHECK_EQ_INT(m->hp.arch, MODEL_ARCH_MAMBA);
    CHECK_EQ_STR(m->hp.arch_name, "mamba");
    CHECK(m->mamba != NULL);
    CHECK_EQ_INT(m->hp.n_vocab, m->mamba->hp.n_vocab);
    CHECK_EQ_INT(m->hp.n_embd, m->mamba->hp.n_embd);
    CHECK(m->hp.tied_output && m->output.data == m->token_embd.data);
    CHECK(m->weight_bytes > 0);
    struct memory *mem;
    CHECK_EQ_INT(model_memory_create(m, 4096, 3, &mem), 0); /* a token budget: one state per sequence */
    CHECK_EQ_STR(mem->ops->kind, "recurrent");
    CHECK(!mem->ops->partial_removal);
    struct memory_usage u;
    memory_usage(mem, &u);
    CHECK_EQ_INT(u.cells_total, 3);
    struct forward_ctx *fc;
    CHECK_EQ_INT(forward_ctx_create(&fc, m, &(struct forward_config){.max_tokens = 16, .n_threads = 2}), 0);
    CHECK(forward_ctx_bytes(fc) > 0);

    struct rig g;
    CHECK_EQ_INT(rig_open(&g, path, 16, 1, 1), 0);
    const int32_t V = g.m->hp.n_vocab;
    float *want = malloc((size_t)V * sizeof(float));
    CHECK(want);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 16), 0);
    CHECK_EQ_INT(feed(&g, &b, 0, 0, prompt, N_PROMPT, want), 0);
    CHECK_EQ_INT(memory_reserve(mem, &b), 0);
    CHECK_EQ_INT(model_forward(m, fc, mem, &b), 0);
    CHECK_EQ_INT(fc->n_outputs, 1);
    CHECK(same_row(fc->logits, want, V));
    free(want);
    batch_free(&b);
    rig_close(&g);
    forward_ctx_destroy(fc);
    memory_destroy(mem);
    model_free(m);
}

/* ---- several users through the serving engine's scheduler (sched.h), no HTTP ---- */

/* The engine seam over a real mamba model, greedy sampling. */
struct serve_rig {
    struct model *m;
    struct forward_ctx *fc;
    struct memory *mem;
    struct sched *s;
    double now;
};

/* What one request received: the tokens of each choice and how it ended. */
struct outcome {
    int32_t tokens[3][16];
    int32_t n[3];
    int done, errors;
    struct sched_counts counts[3];
};

static int eng_forward(void *e, struct memory *mem, const struct batch *b, const float **logits) {
    struct serve_rig *r = e;
    int rc = model_forward(r->m, r->fc, mem, b);
    *logits = r->fc->logits;
    return rc;
}
static int32_t eng_n_vocab(void *e) { return ((struct serve_rig *)e)->m->hp.n_vocab; }
static bool eng_is_eog(void *e, int32_t tok) { return false; }
static void *eng_sampler_create(void *e, const void *params, uint64_t seed, const int32_t *p, int32_t n) {
    return e; /* greedy needs no state */
}
static int32_t eng_sample(void *e, void *smp, const float *logits, int32_t n_probs, struct sched_token_probs *probs) {
    probs->token = argmax(logits, eng_n_vocab(e));
    probs->logprob = 0;
    probs->n_top = 0;
    return probs->token;
}
static void eng_sampler_free(void *e, void *smp) {}
static const struct sched_engine_ops eng_ops = {eng_forward, eng_n_vocab, eng_is_eog, eng_sampler_create,
                                                eng_sample, eng_sampler_free, NULL, NULL, NULL};

static bool on_token(void *owner, int32_t choice, int32_t token, const struct sched_token_probs *p) {
    struct outcome *o = owner;
    if (o->n[choice] < 16) o->tokens[choice][o->n[choice]++] = token;
    return true;
}
static void on_done(void *owner, int32_t choice, enum sched_stop why, const struct sched_counts *c) {
    struct outcome *o = owner;
    o->done++;
    o->counts[choice] = *c;
}
static void on_error(void *owner, int err) { ((struct outcome *)owner)->errors++; }
static const struct sched_sink sink = {on_token, on_done, on_error, NULL};

static int serve_open(struct serve_rig *r, const char *path, int32_t n_seq) {
    char why[256];
    *r = (struct serve_rig){0};
    struct sched_config cfg;
    sched_config_default(&cfg);
    cfg.n_ctx = 64;
    cfg.batch_tokens = 31; /* every step on one matmul path: results comparable bit for bit */
    cfg.chunk_tokens = 16;
    int rc;
    if ((rc = model_load(&r->m, path, NULL, why, sizeof why)) < 0 ||
        (rc = model_memory_create(r->m, 4096, n_seq, &r->mem)) < 0 ||
        (rc = forward_ctx_create(&r->fc, r->m, &(struct forward_config){.max_tokens = 32, .n_threads = 2})) < 0)
        return rc;
    return sched_create(&r->s, &cfg, r->mem, &eng_ops, r);
}

static void serve_close(struct serve_rig *r) {
    if (r->s) sched_destroy(r->s);
    forward_ctx_destroy(r->fc);
    memory_destroy(r->mem);
    model_free(r->m);
}

/* Run steps until there is nothing left to do (or max_steps). Returns the steps run. */
static int serve_run(struct serve_rig *r, int max_steps) {
    int n = 0;
    struct sched_step *step;
    while (n < max_steps && sched_build_step(r->s, r->now, &step) > 0) {
        sched_step_compute(r->s, step);
        r->now += 1;
        sched_step_complete(r->s, step, r->now);
        n++;
    }
    return n;
}

static int submit(struct serve_rig *r, const int32_t *toks, int32_t n, int32_t n_choices, bool cache,
                  struct outcome *o, struct sched_req **h) {
    struct sched_request req = {.prompt = toks, .n_prompt = n, .n_predict = 8, .n_choices = n_choices,
                                .cache_prompt = cache};
    *o = (struct outcome){0};
    return sched_submit(r->s, &req, &sink, o, r->now, h);
}

/* Six concurrent greedy requests give what each gives alone; n = 3 evaluates the prompt once and
 * gives 3 (greedy, so equal) choices; a cancelled request's state is freed. */
TEST(mamba_serving_six_users_n_choices_and_cancel) {
    SHARED(path, "models/mamba-spm-q8_0.gguf");
    enum { N_REQ = 6 };
    struct serve_rig r;
    CHECK_EQ_INT(serve_open(&r, path, 8), 0);
    struct outcome alone[N_REQ], together[N_REQ];
    struct sched_req *h;
    for (int k = 0; k < N_REQ; k++) { /* request k: k + 2 tokens of prompt from k % 4 */
        CHECK_EQ_INT(submit(&r, prompt + k % 4, k + 2, 1, false, &alone[k], &h), 0);
        serve_run(&r, 100);
        CHECK_EQ_INT(alone[k].done, 1);
        CHECK_EQ_INT(alone[k].n[0], 8);
    }
    for (int k = 0; k < N_REQ; k++) CHECK_EQ_INT(submit(&r, prompt + k % 4, k + 2, 1, false, &together[k], &h), 0);
    serve_run(&r, 100);
    for (int k = 0; k < N_REQ; k++) {
        CHECK_EQ_INT(together[k].done, 1);
        CHECK_EQ_INT(together[k].errors, 0);
        CHECK_EQ_INT(together[k].n[0], 8);
        CHECK(memcmp(together[k].tokens[0], alone[k].tokens[0], 8 * sizeof(int32_t)) == 0);
    }
    struct memory_usage u;
    memory_usage(r.mem, &u);
    CHECK_EQ_INT(u.cells_used, 0); /* no cache asked: every state freed */

    /* n = 3: the prompt runs once (prompt_tokens grows by its length), three equal greedy choices */
    struct sched_stats before, after;
    sched_stats(r.s, r.now, &before);
    struct outcome three;
    CHECK_EQ_INT(submit(&r, prompt, N_PROMPT, 3, false, &three, &h), 0);
    serve_run(&r, 100);
    sched_stats(r.s, r.now, &after);
    CHECK_EQ_INT(three.done, 3);
    CHECK_EQ_INT(after.prompt_tokens - before.prompt_tokens, N_PROMPT);
    for (int c = 0; c < 3; c++) {
        CHECK_EQ_INT(three.n[c], 8);
        CHECK(memcmp(three.tokens[c], three.tokens[0], 8 * sizeof(int32_t)) == 0);
    }

    /* a disconnect mid-generation frees its state */
    struct outcome gone;
    CHECK_EQ_INT(submit(&r, prompt, 4, 1, false, &gone, &h), 0);
    serve_run(&r, 3);
    memory_usage(r.mem, &u);
    CHECK_EQ_INT(u.cells_used, 1);
    sched_cancel(r.s, h);
    serve_run(&r, 100);
    memory_usage(r.mem, &u);
    CHECK_EQ_INT(u.cells_used, 0);
    CHECK_EQ_INT(gone.done, 0);
    serve_close(&r);
}

/* Prompt cache over whole states: a prompt extending a cached sequence continues its state; one
 * that diverges inside it cannot cut the state back and is recomputed. Both give the fresh output. */
TEST(mamba_serving_prompt_cache_reuses_whole_states_only) {
    SHARED(path, "models/mamba-spm-q8_0.gguf");
    struct serve_rig r;
    CHECK_EQ_INT(serve_open(&r, path, 4), 0);
    struct sched_req *h;
    struct outcome first, fresh, extended, diverged;
    int32_t longer[N_PROMPT + 8], other[N_PROMPT];
    /* the fresh answers, without cache */
    CHECK_EQ_INT(submit(&r, prompt, 6, 1, false, &first, &h), 0);
    serve_run(&r, 100);
    memcpy(longer, prompt, 6 * sizeof(int32_t));
    memcpy(longer + 6, first.tokens[0], 8 * sizeof(int32_t));
    CHECK_EQ_INT(submit(&r, longer, 14, 1, false, &fresh, &h), 0);
    serve_run(&r, 100);
    struct outcome fresh_other;
    memcpy(other, prompt, sizeof other);
    other[4] = 29871;
    CHECK_EQ_INT(submit(&r, other, N_PROMPT, 1, false, &fresh_other, &h), 0);
    serve_run(&r, 100);

    /* cached: the same first request leaves its state behind, and a copy of the state before
     * its last prompt token */
    struct outcome cached, again;
    CHECK_EQ_INT(submit(&r, prompt, 6, 1, true, &cached, &h), 0);
    serve_run(&r, 100);
    CHECK_EQ_INT(cached.counts[0].n_cached, 0);
    CHECK(memcmp(cached.tokens[0], first.tokens[0], 8 * sizeof(int32_t)) == 0);
    struct memory_usage u;
    memory_usage(r.mem, &u);
    CHECK_EQ_INT(u.cells_used, 2);
    /* the exact same prompt runs its last token only */
    CHECK_EQ_INT(submit(&r, prompt, 6, 1, true, &again, &h), 0);
    serve_run(&r, 100);
    CHECK_EQ_INT(again.counts[0].n_cached, 5);
    CHECK(memcmp(again.tokens[0], first.tokens[0], 8 * sizeof(int32_t)) == 0);
    CHECK_EQ_INT(submit(&r, longer, 14, 1, true, &extended, &h), 0);
    serve_run(&r, 100);
    CHECK(extended.counts[0].n_cached > 0);
    CHECK(memcmp(extended.tokens[0], fresh.tokens[0], 8 * sizeof(int32_t)) == 0);
    CHECK_EQ_INT(submit(&r, other, N_PROMPT, 1, true, &diverged, &h), 0);
    serve_run(&r, 100);
    CHECK_EQ_INT(diverged.counts[0].n_cached, 0);
    CHECK(memcmp(diverged.tokens[0], fresh_other.tokens[0], 8 * sizeof(int32_t)) == 0);
    serve_close(&r);
}
