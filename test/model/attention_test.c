/* Tests of model/attention.h on a KV memory filled with random F16 rows, without a model:
 * attn_layer against attention written out from its definition (softmax over the cells of the
 * entry's sequence at positions <= its own, and within its sliding window when there is one, in
 * double), for every strategy (a prompt's chunks on the F16 cells as stored or on gathered F32
 * copies with sgemm, decode-sized sequences as whole units or as split items, a decode-sized chunk of a
 * sequence planned per layer, the reference's orders), with cells out of position order, a
 * layer's own scale, GQA groups; and the promise that a row's numbers depend neither on the
 * thread count nor on the other sequences of the step (nor on the strategy that follows). */
#include "test.h"
#include "common/batch.h"
#include "common/err.h"
#include "math/matmul.h"
#include "math/quant.h"
#include "memory/kv.h"
#include "model/attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N_HEAD = 6, N_HEAD_KV = 2, HD = 32, N_LAYER = 2, N_CELLS = 512, N_SEQ = 6, MAX_TOKENS = 160 };
enum { NQ = N_HEAD * HD, NKV = N_HEAD_KV * HD };

struct fixture {
    struct memory *mem;
    struct kv_memory *kv;
    struct batch b;
    uint64_t rng;
    int32_t next_pos[N_SEQ];
    float q[MAX_TOKENS * NQ];
};

/* The cell types of the fixtures a test makes (F16 unless a test sets them). */
static enum kv_type g_type_k = KV_F16, g_type_v = KV_F16;

static int fixture_init(struct fixture *f) {
    memset(f, 0, sizeof *f);
    f->rng = 0x9E3779B97F4A7C15ull;
    struct kv_shape shape = {.n_layer = N_LAYER, .n_embd_k = NKV, .n_embd_v = NKV, .type_k = g_type_k,
                             .type_v = g_type_v};
    if (kv_memory_create(&f->mem, &shape, N_CELLS, N_SEQ) < 0) return -1;
    f->kv = kv_from_memory(f->mem);
    return batch_init(&f->b, MAX_TOKENS);
}

static void fixture_free(struct fixture *f) {
    batch_free(&f->b);
    memory_destroy(f->mem);
}

static void add(struct fixture *f, int32_t seq, int32_t n) {
    for (int32_t i = 0; i < n; i++) batch_add(&f->b, 1, f->next_pos[seq]++, seq, true);
}

/* Place the batch, give its cells random K and V in every layer and its entries random queries
 * (F16-exact, as the forward pass hands them over). */
static int place(struct fixture *f) {
    int rc = memory_reserve(f->mem, &f->b);
    if (rc < 0) return rc;
    for (int32_t i = 0; i < f->b.n_tokens; i++) {
        int32_t cell = kv_batch_cell(f->kv, i);
        for (int32_t l = 0; l < N_LAYER; l++) {
            float k[NKV], v[NKV];
            for (int32_t d = 0; d < NKV; d++) {
                k[d] = test_nrand(&f->rng);
                v[d] = test_nrand(&f->rng);
            }
            /* as the forward pass writes them: quantized to the cell types */
            quant_from_float(kv_type_ggml(f->kv->shape.type_k), k, kv_k_row(f->kv, l, cell), NKV);
            quant_from_float(kv_type_ggml(f->kv->shape.type_v), v, kv_v_row(f->kv, l, cell), NKV);
        }
        for (int32_t d = 0; d < NQ; d++) f->q[i * NQ + d] = fp16_to_f32(f32_to_fp16(test_nrand(&f->rng)));
    }
    return 0;
}

/* Element d of a cell's V row in a layer, as its type stores it. */
static float v_at(const struct kv_memory *kv, int32_t layer, int64_t c, int32_t d) {
    float x[NKV];
    quant_to_float(kv_type_ggml(kv->shape.type_v), kv_v_row(kv, layer, c), x, NKV);
    return x[d];
}

/* The worst |out - definition| over every entry and head of layer `layer`: entry (s, p) attends to
 * the cells of s at positions <= p and, with a window, > p - window; Q8_0 K cells see the query
 * as the attention quantizes it (to Q8_0 blocks). */
static double worst_error(const struct fixture *f, const struct batch *b, int32_t layer, float scale, int32_t window,
                          const float *out) {
    const struct kv_memory *kv = f->kv;
    double worst = 0, p[N_CELLS];
    static float kf[N_CELLS * NKV], vf[N_CELLS * NKV]; /* the cells' values */
    for (int64_t c = 0; c < kv->n_cells; c++) {
        quant_to_float(kv_type_ggml(kv->shape.type_k), kv_k_row(kv, layer, c), kf + c * NKV, NKV);
        quant_to_float(kv_type_ggml(kv->shape.type_v), kv_v_row(kv, layer, c), vf + c * NKV, NKV);
    }
    for (int32_t i = 0; i < b->n_tokens; i++)
        for (int32_t h = 0; h < N_HEAD; h++) {
            int32_t kvh = h / (N_HEAD / N_HEAD_KV);
            float q[HD];
            memcpy(q, f->q + i * NQ + h * HD, sizeof q);
            if (kv->shape.type_k == KV_Q8_0) {
                uint8_t qq[HD / 32 * 34];
                quant_from_float(GGML_TYPE_Q8_0, q, qq, HD);
                quant_to_float(GGML_TYPE_Q8_0, qq, q, HD);
            }
            double mx = -INFINITY, sum = 0;
            for (int64_t c = 0; c < kv->n_cells; c++) {
                p[c] = -INFINITY;
                if (!kv_cell_visible(kv, c, b->seq[i], b->pos[i])) continue;
                if (window > 0 && kv->pos[c] <= b->pos[i] - window) continue;
                double s = 0;
                for (int32_t d = 0; d < HD; d++) s += (double)q[d] * kf[c * NKV + kvh * HD + d];
                p[c] = s * scale;
                if (p[c] > mx) mx = p[c];
            }
            for (int64_t c = 0; c < kv->n_cells; c++) sum += p[c] == -INFINITY ? 0 : exp(p[c] - mx);
            for (int32_t d = 0; d < HD; d++) {
                double o = 0;
                for (int64_t c = 0; c < kv->n_cells; c++)
                    if (p[c] != -INFINITY)
                        o += exp(p[c] - mx) / sum * vf[c * NKV + kvh * HD + d];
                double e = fabs(o - out[i * NQ + h * HD + d]);
                if (!(e <= worst)) worst = e; /* NaN counts as the worst */
            }
        }
    return worst;
}

/* Every layer of the step through attn, out[layer] its output; the worst error against the
 * definition. */
static double run_step(struct fixture *f, struct attn_ctx *a, const struct batch *b, float scale, int32_t window,
                       float out[N_LAYER][MAX_TOKENS * NQ]) {
    struct attn_params p = {.n_head = N_HEAD, .n_head_kv = N_HEAD_KV, .head_dim = HD, .scale = scale,
                            .window = window};
    attn_plan(a, f->kv, b);
    double worst = 0;
    for (int32_t l = 0; l < N_LAYER; l++) {
        memset(out[l], 0xff, sizeof out[l]); /* NaN: a row attn_layer leaves out shows */
        attn_layer(a, &p, l, f->q, out[l]);
        double e = worst_error(f, b, l, scale, window, out[l]);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* The steps of a server's life on 1-4 threads: a prompt beside short prompts, decode steps of
 * several sequences, a freed sequence whose cells others take (out of position order), decode
 * steps of one sequence (fewer units than threads; over 128+ cells), a chunk of 2 entries, a
 * second prompt over the cells out of order. */
static void check_strategies(struct test_case *t, bool reference, int32_t window) {
    static float out[N_LAYER][MAX_TOKENS * NQ];
    for (int nt = 1; nt <= 4; nt++) {
        struct fixture f;
        struct compute *c = NULL;
        struct attn_ctx *a = NULL;
        struct attn_params p = {.n_head = N_HEAD, .n_head_kv = N_HEAD_KV, .head_dim = HD, .scale = 0.25f,
                                .window = window};
        CHECK_EQ_INT(fixture_init(&f), 0);
        CHECK_EQ_INT(compute_create(&c, nt, MAX_TOKENS, NQ), 0);
        CHECK_EQ_INT(attn_ctx_create(&a, &p, MAX_TOKENS, N_CELLS, reference, c), 0);
        CHECK(attn_ctx_bytes(a) > 0);
        double worst = 0;
        for (int step = 0; step < 12; step++) {
            batch_clear(&f.b);
            if (step == 0) { /* 140 x 3 rows: gathered sgemm chunks; 5 x 3 and 1 x 3 rows: decode-sized */
                add(&f, 0, 140);
                add(&f, 1, 5);
                add(&f, 2, 1);
            } else if (step == 4) { /* sequence 1's cells freed and taken by 3 and 2 */
                memory_seq_rm(f.mem, 1, 0, -1);
                add(&f, 3, 3);
                add(&f, 2, 4);
            } else if (step == 8) {
                add(&f, 2, 1); /* alone: 2 units (fewer than 3 or 4 threads: split items) */
            } else if (step == 10) {
                add(&f, 0, 1); /* alone, over more cells than a score item takes: a softmax phase */
            } else if (step == 11) { /* 100 x 3 rows over cells out of position order: two chunks
                                       * on the F16 cells as stored (140 entries take the gather) */
                add(&f, 3, 100);
                add(&f, 0, 1);
            } else if (step == 9) {
                add(&f, 0, 2); /* a 2-entry decode-sized chunk beside single entries */
                add(&f, 3, 1);
                add(&f, 2, 1);
            } else {
                for (int32_t s = 0; s < 4; s++)
                    if (s != 1 || step < 4) add(&f, s, 1);
            }
            CHECK_EQ_INT(place(&f), 0);
            double e = run_step(&f, a, &f.b, p.scale, window, out);
            if (!(e <= worst)) worst = e;
        }
        /* F16 probabilities (2^-11 relative) over values of about unit size */
        if (!(worst < 2e-3)) fprintf(stderr, "  threads %d, window %d: worst error %g\n", nt, window, worst);
        CHECK(worst < 2e-3);
        attn_ctx_destroy(a);
        compute_destroy(c);
        fixture_free(&f);
    }
}

TEST(attention_equals_definition_every_strategy) { check_strategies(t, false, 0); }
TEST(attention_reference_orders_equal_definition) { check_strategies(t, true, 0); }

/* Sliding windows: of one cell (each entry sees itself alone), shorter than a decode chunk, than
 * a prompt chunk (64 entries) and than the 140-entry prompt, and longer than every sequence (the
 * causal attention). */
static const int32_t windows[] = {1, 2, 37, 100, 1000};

TEST(attention_window_equals_definition_every_strategy) {
    for (size_t w = 0; w < sizeof windows / sizeof *windows; w++) check_strategies(t, false, windows[w]);
}

TEST(attention_window_reference_orders_equal_definition) {
    for (size_t w = 0; w < sizeof windows / sizeof *windows; w++) check_strategies(t, true, windows[w]);
}

/* The window masks something: a window of one cell gives each entry its own V row (probability
 * 1 on itself), which the causal attention over several cells does not. */
TEST(attention_window_of_one_is_the_own_value) {
    static float out[N_LAYER][MAX_TOKENS * NQ];
    struct fixture f;
    struct compute *c = NULL;
    struct attn_ctx *a = NULL;
    struct attn_params p = {.n_head = N_HEAD, .n_head_kv = N_HEAD_KV, .head_dim = HD, .scale = 0.25f, .window = 1};
    CHECK_EQ_INT(fixture_init(&f), 0);
    CHECK_EQ_INT(compute_create(&c, 2, MAX_TOKENS, NQ), 0);
    CHECK_EQ_INT(attn_ctx_create(&a, &p, MAX_TOKENS, N_CELLS, false, c), 0);
    add(&f, 0, 70);
    CHECK_EQ_INT(place(&f), 0);
    run_step(&f, a, &f.b, p.scale, 1, out);
    for (int32_t i = 0; i < f.b.n_tokens; i++)
        for (int32_t h = 0; h < N_HEAD; h++)
            for (int32_t d = 0; d < HD; d++) {
                float v = v_at(f.kv, 1, kv_batch_cell(f.kv, i), h / (N_HEAD / N_HEAD_KV) * HD + d);
                CHECK(out[1][i * NQ + h * HD + d] == v);
            }
    CHECK_EQ_INT(attn_ctx_create(&(struct attn_ctx *){NULL}, &(struct attn_params){.n_head = 6, .n_head_kv = 2,
                                 .head_dim = 32, .window = -1}, 8, 64, false, c), -ERR_INVAL);
    attn_ctx_destroy(a);
    compute_destroy(c);
    fixture_free(&f);
}

/* A row's numbers, bit for bit, whatever the thread count and whatever else the step holds. */
static void check_rows_independent(struct test_case *t, int32_t window) {
    static float out[N_LAYER][MAX_TOKENS * NQ], first[N_LAYER][MAX_TOKENS * NQ], alone[N_LAYER][MAX_TOKENS * NQ];
    struct fixture f;
    CHECK_EQ_INT(fixture_init(&f), 0);
    batch_clear(&f.b);
    add(&f, 0, 150);
    add(&f, 1, 10);
    CHECK_EQ_INT(place(&f), 0);
    batch_clear(&f.b);
    for (int32_t s = 0; s < 4; s++) add(&f, s, s == 3 ? 2 : 1);
    CHECK_EQ_INT(place(&f), 0);
    struct attn_params p = {.n_head = N_HEAD, .n_head_kv = N_HEAD_KV, .head_dim = HD, .scale = 1.0f / sqrtf(HD),
                            .window = window};
    for (int nt = 1; nt <= 4; nt++) {
        struct compute *c = NULL;
        struct attn_ctx *a = NULL;
        CHECK_EQ_INT(compute_create(&c, nt, MAX_TOKENS, NQ), 0);
        CHECK_EQ_INT(attn_ctx_create(&a, &p, MAX_TOKENS, N_CELLS, false, c), 0);
        CHECK(run_step(&f, a, &f.b, p.scale, window, out) < 2e-3);
        if (nt == 1) memcpy(first, out, sizeof out);
        CHECK(memcmp(first, out, sizeof out) == 0);
        /* each sequence's entries in a step of their own: the same rows */
        for (int32_t i0 = 0, i1; i0 < f.b.n_tokens; i0 = i1) {
            for (i1 = i0; i1 < f.b.n_tokens && f.b.seq[i1] == f.b.seq[i0]; i1++) {}
            struct batch own = {.n_tokens = i1 - i0, .capacity = i1 - i0, .token = f.b.token + i0,
                                .pos = f.b.pos + i0, .seq = f.b.seq + i0, .want_logits = f.b.want_logits + i0,
                                .n_outputs = i1 - i0};
            static float q_all[MAX_TOKENS * NQ];
            memcpy(q_all, f.q, sizeof q_all);
            memcpy(f.q, q_all + i0 * NQ, sizeof(float) * NQ * (size_t)(i1 - i0));
            CHECK(run_step(&f, a, &own, p.scale, window, alone) < 2e-3);
            memcpy(f.q, q_all, sizeof q_all);
            for (int32_t l = 0; l < N_LAYER; l++)
                CHECK(memcmp(alone[l], first[l] + i0 * NQ, sizeof(float) * NQ * (size_t)(i1 - i0)) == 0);
        }
        attn_ctx_destroy(a);
        compute_destroy(c);
    }
    fixture_free(&f);
}

TEST(attention_rows_independent_of_threads_and_step) { check_rows_independent(t, 0); }
TEST(attention_window_rows_independent_of_threads_and_step) { check_rows_independent(t, 9); }

TEST(attention_ctx_refuses_bad_head_shapes) {
    struct compute *c = NULL;
    struct attn_ctx *a = (struct attn_ctx *)1;
    CHECK_EQ_INT(compute_create(&c, 1, 8, 64), 0);
    CHECK_EQ_INT(attn_ctx_create(&a, &(struct attn_params){.n_head = 6, .n_head_kv = 4, .head_dim = 32}, 8, 64,
                                 false, c),
                 -ERR_INVAL);
    CHECK(a == NULL);
    CHECK_EQ_INT(attn_ctx_create(&a, &(struct attn_params){.n_head = 6, .n_head_kv = 0, .head_dim = 32}, 8, 64,
                                 false, c),
                 -ERR_INVAL);
    compute_destroy(c);
}

/* Q8_0 cells, K and V alike or one of them (--kv-type-k / --kv-type-v): every strategy, the
 * reference's flash-attention rows included, against the definition on the cells' values, and
 * the rows of every strategy independent of threads and step. */
static void with_types(enum kv_type tk, enum kv_type tv) {
    g_type_k = tk;
    g_type_v = tv;
}

TEST(attention_q8_0_cells_equal_definition_every_strategy) {
    const enum kv_type types[3][2] = {{KV_Q8_0, KV_Q8_0}, {KV_Q8_0, KV_F16}, {KV_F16, KV_Q8_0}};
    for (int i = 0; i < 3; i++) {
        with_types(types[i][0], types[i][1]);
        check_strategies(t, false, 0);
        check_strategies(t, true, 0);
        check_strategies(t, false, 37);
        check_strategies(t, true, 37);
        check_rows_independent(t, 0);
        check_rows_independent(t, 9);
    }
    with_types(KV_F16, KV_F16);
}

/* The Q8_0 pool really holds Q8_0 rows: 34 bytes per 32 values (17/32 of F16's). */
TEST(attention_q8_0_cells_are_blocks) {
    with_types(KV_Q8_0, KV_Q8_0);
    struct fixture f;
    CHECK_EQ_INT(fixture_init(&f), 0);
    CHECK_EQ_INT(f.kv->k_row, NKV / 32 * 34);
    CHECK_EQ_INT(f.kv->v_row, NKV / 32 * 34);
    fixture_free(&f);
    with_types(KV_F16, KV_F16);
    CHECK_EQ_INT(fixture_init(&f), 0);
    CHECK_EQ_INT(f.kv->k_row, NKV * 2);
    fixture_free(&f);
}
