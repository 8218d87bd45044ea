/* footprint_test.c: the memory estimate from metadata against what loading the model really
 * allocates (the memory exactly; the buffers within a quarter), the shapes it reads (per-layer
 * arrays, recurrent layers, sliding window), and the refusal naming the sizes. */
#include "test.h"
#include "common/err.h"
#include "common/hugemem.h"
#include "gguf/gguf.h"
#include "model/footprint.h"
#include "model/model.h"
#include "../tokenizer/tok_fixtures.h"

#include <stdlib.h>
#include <string.h>

/* What the server would allocate for this model (sched/model_engine.c's sizing), against the
 * estimate: weights (the file), memory, forward buffers + the sampler's scratch (16 bytes a token). */
static void check_model(struct test_case *t, const char *rel, int64_t kv_tokens, int32_t batch) {
    SHARED(path, rel);
    const int32_t n_seq = 64;
    struct model_footprint fp;
    char why[256];
    CHECK_EQ_INT(model_footprint_of_path(path, &(struct footprint_config){.kv_tokens = kv_tokens,
                                                                          .batch_tokens = batch, .n_seq_max = n_seq},
                                         &fp, why, sizeof why), 0);
    struct model *m;
    CHECK_EQ_INT(model_load(&m, path, &(struct model_options){.serving_layout = true}, why, sizeof why), 0);
    CHECK_EQ_INT(fp.weights, m->file.size);
    CHECK_EQ_INT(fp.shape.n_vocab, m->hp.n_vocab);
    CHECK_EQ_INT(fp.shape.n_layer, m->hp.n_layer);
    int64_t n_ctx = m->hp.n_ctx_train < kv_tokens ? m->hp.n_ctx_train : kv_tokens;
    CHECK_EQ_INT(fp.n_ctx, n_ctx);
    struct memory *mem;
    int64_t cells = model_memory_counts_states(m) ? n_seq : kv_tokens;
    CHECK_EQ_INT(model_memory_create_batches(m, cells, n_seq, batch, &mem), 0);
    struct memory_usage u;
    memory_usage(mem, &u);
    CHECK_EQ_INT(fp.kv, u.bytes); /* K/V (or the states) and their bookkeeping, exactly */
    struct forward_ctx *fc;
    int32_t outputs = n_seq < batch ? n_seq : batch;
    CHECK_EQ_INT(forward_ctx_create(&fc, m, &(struct forward_config){.max_tokens = batch, .max_outputs = outputs,
                                                                     .n_ctx = n_ctx}), 0);
    double real = (double)forward_ctx_bytes(fc) + 16.0 * m->hp.n_vocab, est = (double)fp.buffers;
    if (est < 0.75 * real || est > 1.25 * real)
        fprintf(stderr, "  %s at %d tokens: buffers estimated %.0f, allocated %.0f\n", rel, batch, est, real);
    CHECK(est >= 0.75 * real && est <= 1.25 * real);
    CHECK_EQ_INT(fp.total, fp.weights + fp.kv + fp.buffers);
    forward_ctx_destroy(fc);
    memory_destroy(mem);
    model_free(m);
}

TEST(footprint_matches_what_loading_allocates) {
    check_model(t, "models/kjv-tiny-q8_0.gguf", 4096, 512);
    check_model(t, "models/kjv-tiny-q8_0.gguf", 256, 16);
    check_model(t, "models/llama-spm-q8_0.gguf", 2048, 512);
    check_model(t, "models/llama3-bpe-q8_0.gguf", 8192, 256);
    check_model(t, "models/qwen2-q8_0.gguf", 4096, 512);
    check_model(t, "models/mamba-spm-q8_0.gguf", 4096, 512);
    check_model(t, "models/gemma3-q8_0.gguf", 4096, 512); /* its windowed layers' pool: 64 x 32 + 512 cells */
    check_model(t, "models/gemma3-q8_0.gguf", 1000, 64);
    check_model(t, "models/qwen35-q8_0.gguf", 4096, 512); /* KV cells and a state per sequence id */
    check_model(t, "models/qwen35-q8_0.gguf", 1000, 64);
}

/* --max-seqs-recurrent gives a hybrid's states a budget of their own, as a recurrent model's: the
 * estimate and the memory the server creates agree on it, and the cells stay as they were. */
TEST(footprint_counts_a_hybrids_own_state_budget) {
    SHARED(path, "models/qwen35-q8_0.gguf");
    struct model_footprint fp, all;
    char why[256];
    struct footprint_config cfg = {.kv_tokens = 1000, .batch_tokens = 64, .n_seq_max = 64, .recurrent_states = 3};
    CHECK_EQ_INT(model_footprint_of_path(path, &cfg, &fp, why, sizeof why), 0);
    CHECK_EQ_INT(fp.n_states, 3);
    CHECK_EQ_INT(fp.n_cells, 1000);
    cfg.recurrent_states = 0;
    CHECK_EQ_INT(model_footprint_of_path(path, &cfg, &all, why, sizeof why), 0);
    CHECK_EQ_INT(all.n_states, 64);
    CHECK_EQ_INT(all.kv - fp.kv, 61 * fp.shape.state_bytes);
    struct model *m;
    CHECK_EQ_INT(model_load(&m, path, &(struct model_options){.serving_layout = true}, why, sizeof why), 0);
    struct memory *mem;
    CHECK_EQ_INT(model_memory_create_with(m, &(struct memory_config){.n_cells = 1000, .n_seq_max = 64,
                                                                     .max_batch = 64, .n_states = 3}, &mem), 0);
    struct memory_usage u;
    memory_usage(mem, &u);
    CHECK_EQ_INT(u.states_total, 3);
    CHECK_EQ_INT(u.cells_total, 1000);
    CHECK_EQ_INT(fp.kv, u.bytes);
    memory_destroy(mem);
    model_free(m);
}

TEST(footprint_reads_the_shapes_of_other_families) {
    struct model_footprint fp;
    char why[256];
    struct footprint_config cfg = {.kv_tokens = 1000, .batch_tokens = 64, .n_seq_max = 8};
    SHARED(qwen35, "models/qwen35-q8_0.gguf"); /* three gated delta net layers, one attention */
    CHECK_EQ_INT(model_footprint_of_path(qwen35, &cfg, &fp, why, sizeof why), 0);
    CHECK_EQ_INT(fp.shape.n_attn_layers, 1);
    CHECK_EQ_INT(fp.shape.n_recurrent_layers, 3);
    CHECK_EQ_INT(fp.shape.kv_cell_bytes, 2 * 2 * (32 + 32)); /* F16 K and V of 2 kv heads of 32 */
    /* conv keeps 3 inputs of 64 + 2 x 2 x 16 channels, the state 64 x 16, in F32, per layer */
    CHECK_EQ_INT(fp.shape.state_bytes, 3 * 4 * (3 * 128 + 64 * 16));
    CHECK_EQ_INT(fp.n_cells, 1000);
    CHECK_EQ_INT(fp.n_states, 8);
    SHARED(gemma3, "models/gemma3-q8_0.gguf");
    CHECK_EQ_INT(model_footprint_of_path(gemma3, &cfg, &fp, why, sizeof why), 0);
    CHECK_EQ_INT(fp.shape.sliding_window, 32);
    CHECK_EQ_INT(fp.shape.head_dim_k, 32); /* attention.key_length, not n_embd / n_head (16) */

    /* per-layer arrays: kv heads [2, 4], feed-forward [100, 300] */
    struct gbuf b;
    gb_begin(&b);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_u32(&b, "llama.block_count", 2);
    gb_kv_u32(&b, "llama.embedding_length", 64);
    gb_kv_u32(&b, "llama.context_length", 512);
    gb_kv_u32(&b, "llama.attention.head_count", 8);
    gb_kv_u32(&b, "llama.attention.key_length", 8);
    gb_kv_i32s(&b, "llama.attention.head_count_kv", (const int32_t[]){2, 4}, 2);
    gb_kv_i32s(&b, "llama.feed_forward_length", (const int32_t[]){100, 300}, 2);
    gb_kv_strs(&b, "tokenizer.ggml.tokens", (const char *const[]){"a", "b", "c"}, 3);
    gb_finish(&b);
    struct gguf_file f;
    CHECK_EQ_INT(gguf_parse(&f, b.data, b.len, why, sizeof why), 0);
    CHECK_EQ_INT(model_footprint(&f, &cfg, &fp, why, sizeof why), 0);
    CHECK_EQ_INT(fp.shape.n_head_kv, 4);
    CHECK_EQ_INT(fp.shape.n_ff, 300);
    CHECK_EQ_INT(fp.shape.n_vocab, 3);
    CHECK_EQ_INT(fp.shape.kv_cell_bytes, 2 * 2 * 16 + 2 * 4 * 16);
    CHECK_EQ_INT(fp.n_ctx, 512);
    gguf_close(&f);
    free(b.data);

    gb_begin(&b); /* no shape: refused with the reason */
    gb_kv_str(&b, "general.architecture", "llama");
    gb_finish(&b);
    CHECK_EQ_INT(gguf_parse(&f, b.data, b.len, why, sizeof why), 0);
    CHECK_EQ_INT(model_footprint(&f, &cfg, &fp, why, sizeof why), -ERR_FORMAT);
    CHECK(strstr(why, "block_count"));
    gguf_close(&f);
    free(b.data);
}

TEST(footprint_refusal_names_the_sizes) {
    struct model_footprint fp = {.n_cells = 4096, .weights = 3ull << 30, .kv = 1ull << 30, .buffers = 100 << 20};
    fp.total = fp.weights + fp.kv + fp.buffers;
    char why[512];
    CHECK_EQ_INT(model_footprint_fits(&fp, -1, why, sizeof why), 0);  /* unknown: no refusal */
    CHECK_EQ_INT(model_footprint_fits(&fp, (int64_t)fp.total, why, sizeof why), 0);
    CHECK_EQ_INT(model_footprint_fits(&fp, (int64_t)fp.total - 1, why, sizeof why), -ERR_NOMEM);
    CHECK(strstr(why, "needs 4.10 GiB (weights 3.00 GiB + KV 1.00 GiB for 4096 cells + buffers 100.0 MiB)"));
    CHECK(strstr(why, "a smaller model"));
    fp.kv = 8ull << 30;
    fp.total = fp.weights + fp.kv + fp.buffers;
    CHECK_EQ_INT(model_footprint_fits(&fp, 1 << 30, why, sizeof why), -ERR_NOMEM);
    CHECK(strstr(why, "more than the 1.00 GiB the machine has available: lower --kv-tokens"));
    char s[24];
    CHECK_EQ_STR(footprint_size(1536, s), "1.5 KiB");
    CHECK_EQ_STR(footprint_size(3 << 20, s), "3.0 MiB");
}

TEST(footprint_available_memory_can_be_set) {
    setenv("UVLM_MEMORY_AVAILABLE", "3G", 1);
    CHECK_EQ_INT(hugemem_available(), 3ll << 30);
    setenv("UVLM_MEMORY_AVAILABLE", "12345", 1);
    CHECK_EQ_INT(hugemem_available(), 12345);
    setenv("UVLM_MEMORY_AVAILABLE", "lots", 1); /* not a size: the machine's figure */
    int64_t machine = hugemem_available();
    unsetenv("UVLM_MEMORY_AVAILABLE");
    CHECK_EQ_INT(machine, hugemem_available());
}

/* Which layers have a sliding window (model_layer_window, what model.c loads and the estimate
 * counts): gemma3's default pattern (every 6th layer full), a pattern key as a number (0: all
 * windowed, 1: none) or as per-layer bools; no window key, or another family: none. */
static int32_t windows_of(const char *arch, int64_t window, int pattern_kind, int32_t pattern, int32_t out[8]) {
    struct gbuf b;
    char key[96];
    gb_begin(&b);
    gb_kv_str(&b, "general.architecture", arch);
    snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
    if (window >= 0) gb_kv_u32(&b, key, (uint32_t)window);
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
    if (pattern_kind == 1) gb_kv_u32(&b, key, (uint32_t)pattern);
    if (pattern_kind == 2) { /* bools: layers 1, 2 and 6 windowed */
        gb_key(&b, key, GGUF_ARRAY);
        gb_u32(&b, GGUF_BOOL);
        gb_u64(&b, 8);
        gb_put(&b, (const uint8_t[]){0, 1, 1, 0, 0, 0, 1, 0}, 8);
    }
    gb_finish(&b);
    struct gguf_file f;
    char why[128];
    int rc = gguf_parse(&f, b.data, b.len, why, sizeof why);
    int32_t n = 0;
    for (int32_t il = 0; rc == 0 && il < 8; il++) n += (out[il] = model_layer_window(&f, arch, il)) > 0;
    if (rc == 0) gguf_close(&f);
    free(b.data);
    return rc < 0 ? -1 : n;
}

TEST(footprint_sliding_window_layers_follow_the_metadata) {
    int32_t w[8];
    CHECK_EQ_INT(windows_of("gemma3", 512, 0, 0, w), 7); /* all but 5 */
    CHECK(w[0] == 512 && w[4] == 512 && w[5] == 0 && w[6] == 512 && w[7] == 512);
    CHECK_EQ_INT(windows_of("gemma3", 64, 1, 3, w), 6); /* il % 3 < 2: all but 2 and 5 */
    CHECK(w[1] == 64 && w[2] == 0 && w[5] == 0 && w[7] == 64);
    CHECK_EQ_INT(windows_of("gemma3", 64, 1, 0, w), 8);
    CHECK_EQ_INT(windows_of("gemma3", 64, 1, 1, w), 0);
    CHECK_EQ_INT(windows_of("gemma3", 64, 2, 0, w), 3);
    CHECK(w[0] == 0 && w[1] == 64 && w[2] == 64 && w[6] == 64);
    CHECK_EQ_INT(windows_of("gemma3", -1, 0, 0, w), 0); /* no window key */
    CHECK_EQ_INT(windows_of("llama", 4096, 0, 0, w), 0); /* Mistral's key on a llama: ignored */
}
