/* golden_test.c: every transformer model of ../shared/models against ../shared/reference, with
 * the bars of ../shared/README.md: each listed logit within tol * (largest |ref logit| of that
 * position), the same top-1 wherever the reference's top-1/top-2 gap exceeds that, and greedy
 * generation diverging only after a near-tie. The prompt is fed whole (batches of 512, so the long
 * prompt crosses a batch boundary) and again 7 tokens per batch. Token ids come from the
 * reference, so this does not depend on the tokenizer. The forward pass runs in reference mode
 * (forward_config.reference), as eval-logits does. */
#include "test.h"
#include "common/err.h"
#include "model/eval.h"
#include "model/model.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>

struct golden {
    const char *label;       /* model/case/chunking, for messages */
    json_t *kase;
    int32_t n_tokens;
    const int32_t *greedy;   /* ours, filled as generation goes */
    double tol;
    int failures;            /* top-1, greedy, logits over the bar */
    int rows;                /* rows compared */
    double worst;            /* largest |ours - ref| / max|ref| seen */
};

/* Measured (worst |logit - ref| / max |ref| over both chunkings, f16 / q8_0 / q4_0 / q4_k_m /
 * llama3 / qwen2 / kjv), with the forward pass in reference mode (cfg.reference):
 * - sgemm for batches of 32+ and our own SIMD orders (the previous state): 0.13 / 3.0 / 2.2 /
 *   3.4 / 0.9 / 1.2 / 4.1%, passing only with 1.5x slack and 0.5% of rows allowed over the bar.
 * - the reference identified as llama.cpp's CPU backend built for AVX-512 (GCC), with its
 *   repacked Q4_0/Q4_K matrices: every float order emulated (math/quant.h, matmul.h
 *   MATMUL_REFERENCE, model/llama.c's header): in batches of 512 all seven models equal the
 *   reference at the printed precision (0.0000) except q4_k_m (0.8%: two rows late in the long
 *   prompt and in one greedy tail) and f16 (0.04% in batches of 7). Batches of 7 are not what
 *   the reference ran: their last rows take its single-row or GEMV orders, so q4_k_m reaches 2.5%
 *   there (still under the bar).
 * - with everything else emulated but sgemm kept for 32+ tokens: q8_0 3.0, q4_k_m 3.5, kjv 3.3%
 *   (over the bar): the bar needs integer dots at every batch size.
 * kquants (layers of Q2_K, Q3_K, IQ4_XS, IQ4_NL; Q2_K and IQ4_NL in the reference's repacked
 * orders, math/lowbit.c): 0.79%, its batches of 512 equal to the printed precision up to row 169
 * of the long prompt (Q2_K in its vec_dot order instead: 2.0%).
 * Single steps, each measured as the first position leaving the reference: the attention dots in
 * tinyBLAS's 16-lane order, the softmax and SiLU with ggml's AVX-512 expf and 16-lane chunk sums,
 * and RoPE with fused multiply-adds made the Q8_0 models exact; the repacked GEMV order made
 * q4_0 exact, the repacked GEMM order (a float step every 64 elements) q4_k_m nearly; F16 needs
 * its activations rounded to F16 and tinyBLAS's order. */

static double row_maxabs(json_t *row) {
    double mx = 0;
    for (size_t i = 0; i < json_array_size(row); i++) {
        double v = fabs(json_number_value(json_array_get(json_array_get(row, i), 1)));
        if (v > mx) mx = v;
    }
    return mx;
}

static double row_gap(json_t *row) {
    return json_number_value(json_array_get(json_array_get(row, 0), 1)) -
           json_number_value(json_array_get(json_array_get(row, 1), 1));
}

static void fail_msg(struct golden *g, int32_t index, const char *what, double a, double b) {
    if (g->failures++ < 5) fprintf(stderr, "  %s: row %d: %s (%g vs ref %g)\n", g->label, (int)index, what, a, b);
}

static void compare_row(struct golden *g, int32_t index, json_t *row, const float *logits, int32_t n_vocab) {
    double lim = g->tol * row_maxabs(row);
    g->rows++;
    for (size_t i = 0; i < json_array_size(row); i++) {
        int32_t id = (int32_t)json_integer_value(json_array_get(json_array_get(row, i), 0));
        double ref = json_number_value(json_array_get(json_array_get(row, i), 1));
        double err = fabs(logits[id] - ref);
        if (err / (lim / g->tol) > g->worst) g->worst = err / (lim / g->tol);
        if (err > lim) fail_msg(g, index, "logit over the bar", logits[id], ref);
    }
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best]) best = i;
    int32_t ref_top = (int32_t)json_integer_value(json_array_get(json_array_get(row, 0), 0));
    if (row_gap(row) > lim && best != ref_top) fail_msg(g, index, "top-1 differs", best, ref_top);
}

static int32_t g_n_vocab;

static void on_row(void *arg, int32_t index, const float *logits) {
    struct golden *g = arg;
    if (index < g->n_tokens) {
        compare_row(g, index, json_array_get(json_object_get(g->kase, "prompt_topk"), (size_t)index), logits,
                    g_n_vocab);
        return;
    }
    /* After greedy step j: comparable while our tokens so far equal the reference's. */
    int32_t j = index - g->n_tokens;
    json_t *ref_greedy = json_object_get(g->kase, "greedy");
    for (int32_t i = 0; i <= j; i++)
        if (g->greedy[i] != json_integer_value(json_array_get(ref_greedy, (size_t)i))) return;
    compare_row(g, index, json_array_get(json_object_get(g->kase, "greedy_topk"), (size_t)j), logits, g_n_vocab);
}

/* Our greedy may leave the reference's only right after a step whose top-1/top-2 gap was within
 * tolerance. */
static void check_divergence(struct golden *g, const int32_t *greedy, int32_t n_gen) {
    json_t *ref_greedy = json_object_get(g->kase, "greedy");
    for (int32_t i = 0; i < n_gen; i++) {
        if (greedy[i] == json_integer_value(json_array_get(ref_greedy, (size_t)i))) continue;
        json_t *row = i == 0 ? json_array_get(json_object_get(g->kase, "prompt_topk"), (size_t)g->n_tokens - 1)
                             : json_array_get(json_object_get(g->kase, "greedy_topk"), (size_t)i - 1);
        if (row_gap(row) > g->tol * row_maxabs(row))
            fail_msg(g, g->n_tokens + i, "greedy diverged after a clear step", greedy[i],
                     (double)json_integer_value(json_array_get(ref_greedy, (size_t)i)));
        return;
    }
}

/* The model models/NAME.gguf against reference/REF.json with KV cells of the given types. */
static void run_golden_kv(struct test_case *t, const char *name, const char *ref_name, double tol, int n_threads,
                          bool reference, enum kv_type type_k, enum kv_type type_v) {
    char rel[128];
    snprintf(rel, sizeof rel, "models/%s.gguf", name);
    SHARED(model_path, rel);
    char model_buf[4096];
    snprintf(model_buf, sizeof model_buf, "%s", model_path);
    snprintf(rel, sizeof rel, "reference/%s.json", ref_name);
    SHARED(ref_path, rel);
    json_error_t jerr;
    json_t *ref = json_load_file(ref_path, 0, &jerr);
    CHECK(ref != NULL);
    struct model *m = NULL;
    char why[256];
    /* the serving path as the server loads it: Q8_0 in math/q8x16.h's layout */
    CHECK_EQ_INT(model_load(&m, model_buf, &(struct model_options){.serving_layout = !reference}, why, sizeof why), 0);
    g_n_vocab = m->hp.n_vocab;
    CHECK_EQ_INT(json_integer_value(json_object_get(ref, "n_vocab")), m->hp.n_vocab);
    struct memory *mem = NULL;
    struct forward_ctx *fc = NULL;
    struct memory_config mc = {.n_cells = 1024, .n_seq_max = 1, .max_batch = 1024, .type_k = type_k, .type_v = type_v};
    CHECK_EQ_INT(model_memory_create_with(m, &mc, &mem), 0);
    CHECK_EQ_INT(forward_ctx_create(&fc, m, &(struct forward_config){.max_tokens = 512, .n_ctx = 1024, .n_threads = n_threads,
                                                                      .reference = reference}), 0);
    int failures = 0, rows = 0;
    double worst = 0;
    json_t *cases = json_object_get(ref, "cases");
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        json_t *kase = json_array_get(cases, ci);
        json_t *toks = json_object_get(kase, "tokens");
        int32_t n = (int32_t)json_array_size(toks);
        int32_t n_gen = (int32_t)json_array_size(json_object_get(kase, "greedy"));
        int32_t *tokens = malloc(sizeof *tokens * (size_t)n), *greedy = malloc(sizeof *greedy * (size_t)n_gen);
        for (int32_t i = 0; i < n; i++) tokens[i] = (int32_t)json_integer_value(json_array_get(toks, (size_t)i));
        /* Whole prompt (batches of 512) for every case; 7 tokens per batch for the short prompts
         * with a short greedy tail (the cost is the output rows: keep the test quick). */
        static const int32_t chunks[] = {512, 7};
        for (int ch = 0; ch < 2; ch++) {
            if (ch == 1 && n > 100) continue;
            int32_t n_gen_run = ch == 1 && n_gen > 8 ? 8 : n_gen;
            char label[160];
            snprintf(label, sizeof label, "%s case %zu chunk %d", name, ci, chunks[ch]);
            struct golden g = {.label = label, .kase = kase, .n_tokens = n, .greedy = greedy, .tol = tol};
            int rc = eval_run(m, fc, mem, tokens, n, chunks[ch], n_gen_run, greedy, on_row, &g);
            if (rc < 0) fail_msg(&g, 0, "eval_run failed", rc, 0);
            check_divergence(&g, greedy, n_gen_run);
            failures += g.failures;
            rows += g.rows;
            if (g.worst > worst) worst = g.worst;
        }
        free(tokens);
        free(greedy);
    }
    fprintf(stderr, "  %s%s%s: worst |logit - ref| = %.4f of the row's max |logit| (bar %.2f) over %d rows\n", ref_name,
            reference ? "" : " (serving path)", type_k == KV_Q8_0 || type_v == KV_Q8_0 ? " (q8_0 cells)" : "", worst, tol,
            rows);
    forward_ctx_destroy(fc);
    memory_destroy(mem);
    model_free(m);
    json_decref(ref);
    CHECK_EQ_INT(failures, 0);
    CHECK(rows > 0);
}

static void run_golden_mode(struct test_case *t, const char *name, double tol, int n_threads, bool reference) {
    run_golden_kv(t, name, name, tol, n_threads, reference, KV_F16, KV_F16);
}

static void run_golden(struct test_case *t, const char *name, double tol, int n_threads) {
    run_golden_mode(t, name, tol, n_threads, true);
}

TEST(golden_llama_spm_f16) { run_golden(t, "llama-spm-f16", 0.01, 2); }
TEST(golden_llama_spm_q8_0) { run_golden(t, "llama-spm-q8_0", 0.03, 2); }
TEST(golden_llama_spm_q4_0) { run_golden(t, "llama-spm-q4_0", 0.03, 2); }
TEST(golden_llama_spm_q4_k_m) { run_golden(t, "llama-spm-q4_k_m", 0.03, 2); }
TEST(golden_llama3_bpe_q8_0) { run_golden(t, "llama3-bpe-q8_0", 0.03, 2); }
TEST(golden_qwen2_q8_0) { run_golden(t, "qwen2-q8_0", 0.03, 2); }
TEST(golden_kjv_tiny_q8_0) { run_golden(t, "kjv-tiny-q8_0", 0.03, 2); }
TEST(golden_llama_spm_kquants) { run_golden(t, "llama-spm-kquants", 0.03, 2); }
TEST(golden_llama32_rope_q8_0) { run_golden(t, "llama32-rope-q8_0", 0.03, 2); }
TEST(golden_gemma3_q8_0) { run_golden(t, "gemma3-q8_0", 0.03, 2); }
TEST(golden_qwen3_q8_0) { run_golden(t, "qwen3-q8_0", 0.03, 2); }
TEST(golden_phi3_q8_0) { run_golden(t, "phi3-q8_0", 0.03, 2); }
TEST(golden_qwen35_q8_0) { run_golden(t, "qwen35-q8_0", 0.03, 2); }

/* The serving path (reference mode off: SIMD kernels, the Q4_K integer GEMM and the low-bit
 * types' 4-token kernels for prompts, sgemm for the other types' prompts (kquants: IQ4_NL);
 * Q8_0 rewritten into math/q8x16.h's layout, qwen2's tied output and embedding included) holds
 * the same bar. (Not kjv-tiny: past its trained 256 tokens its
 * logits amplify any change of float order; the serving path measured 2.5% in the file's layout,
 * 3.8% in q8x16's, at row 520 of the 600-token prompt.) */
TEST(golden_llama_spm_q4_k_m_serving) { run_golden_mode(t, "llama-spm-q4_k_m", 0.03, 2, false); }
TEST(golden_llama_spm_q8_0_serving) { run_golden_mode(t, "llama-spm-q8_0", 0.03, 2, false); }
TEST(golden_llama_spm_kquants_serving) { run_golden_mode(t, "llama-spm-kquants", 0.03, 2, false); }
TEST(golden_qwen2_q8_0_serving) { run_golden_mode(t, "qwen2-q8_0", 0.03, 2, false); }
TEST(golden_llama32_rope_q8_0_serving) { run_golden_mode(t, "llama32-rope-q8_0", 0.03, 2, false); }
TEST(golden_gemma3_q8_0_serving) { run_golden_mode(t, "gemma3-q8_0", 0.03, 2, false); }
TEST(golden_qwen3_q8_0_serving) { run_golden_mode(t, "qwen3-q8_0", 0.03, 2, false); }
TEST(golden_phi3_q8_0_serving) { run_golden_mode(t, "phi3-q8_0", 0.03, 2, false); }
TEST(golden_qwen35_q8_0_serving) { run_golden_mode(t, "qwen35-q8_0", 0.03, 2, false); }

/* Q8_0 KV cells (K and V, blocks of 32 along the head dimension) against the reference computed
 * with such a cache, in reference mode (its flash attention's online softmax on the Q8_0 cells,
 * model/attention.h) and on the serving path (the Q8_0 kernels of math/attn.h). For scale: the
 * F16-cache reference and this one differ by up to 5.2% (llama-spm) and 7.6% (qwen3) of a row's
 * largest logit, on 49 and 154 rows past the 3% bar, so the bar sees whether the cells are Q8_0. */
TEST(golden_llama_spm_q8_0_kvq8_0) {
    run_golden_kv(t, "llama-spm-q8_0", "llama-spm-q8_0-kvq8_0", 0.03, 2, true, KV_Q8_0, KV_Q8_0);
}
TEST(golden_qwen3_q8_0_kvq8_0) { run_golden_kv(t, "qwen3-q8_0", "qwen3-q8_0-kvq8_0", 0.03, 2, true, KV_Q8_0, KV_Q8_0); }
TEST(golden_llama_spm_q8_0_kvq8_0_serving) {
    run_golden_kv(t, "llama-spm-q8_0", "llama-spm-q8_0-kvq8_0", 0.03, 2, false, KV_Q8_0, KV_Q8_0);
}
TEST(golden_qwen3_q8_0_kvq8_0_serving) {
    run_golden_kv(t, "qwen3-q8_0", "qwen3-q8_0-kvq8_0", 0.03, 2, false, KV_Q8_0, KV_Q8_0);
}
