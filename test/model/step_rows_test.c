/* A sequence's rows in one step (speculative decoding's verify rows, sched.h) get exactly the
 * logits of one-entry steps: the attention takes the direct path for up to 16 entries whatever the
 * GQA group, each row over its own cells. Checked on a GQA-8 model (TinyLlama's group), where
 * 4 entries already made 32 query rows. */
#include "test.h"

#include "cmd/cmd.h"
#include "common/err.h"
#include "memory/memory.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TEST(model_sequence_rows_in_one_step_equal_one_entry_steps) {
    enum { P = 20, R = 16 };
    SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
    char path[] = "/tmp/uvlm-rows-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    char *argv[] = {"mkmodel", "--out", path, "--vocab", (char *)vocab, "--arch", "llama", "--type", "q8_0",
                    "--n-layer", "2", "--n-embd", "512", "--n-head", "8", "--n-head-kv", "1", "--n-ff", "1024"};
    CHECK_EQ_INT(cmd_mkmodel((int)(sizeof argv / sizeof *argv), argv), 0);
    struct model *m = NULL;
    char why[256];
    int rc = model_load(&m, path, &(struct model_options){.serving_layout = true}, why, sizeof why);
    unlink(path);
    CHECK_EQ_INT(rc, 0);
    struct memory *mem = NULL;
    struct forward_ctx *fc = NULL;
    struct batch b;
    CHECK_EQ_INT(model_memory_create_batches(m, 256, 2, 32, &mem), 0);
    CHECK_EQ_INT(forward_ctx_create(&fc, m, &(struct forward_config){.max_tokens = 32, .max_outputs = 32, .n_ctx = 256,
                                                                         .n_threads = 2}), 0);
    CHECK_EQ_INT(batch_init(&b, 32), 0);
    int32_t V = m->hp.n_vocab, toks[P + R];
    for (int i = 0; i < P + R; i++) toks[i] = 100 + i * 37 % 900;
    float *one = malloc(sizeof(float) * (size_t)V * R);
    CHECK(one);
    for (int s = 0; s < 2; s++) { /* the same prompt on sequences 0 and 1 */
        batch_clear(&b);
        for (int i = 0; i < P; i++) batch_add(&b, toks[i], i, s, false);
        CHECK_EQ_INT(memory_reserve(mem, &b), 0);
        CHECK_EQ_INT(model_forward(m, fc, mem, &b), 0);
    }
    for (int j = 0; j < R; j++) { /* sequence 0: one entry per step */
        batch_clear(&b);
        batch_add(&b, toks[P + j], P + j, 0, true);
        CHECK_EQ_INT(memory_reserve(mem, &b), 0);
        CHECK_EQ_INT(model_forward(m, fc, mem, &b), 0);
        memcpy(one + (size_t)j * V, fc->logits, sizeof(float) * (size_t)V);
    }
    batch_clear(&b); /* sequence 1: all of them in one step */
    for (int j = 0; j < R; j++) batch_add(&b, toks[P + j], P + j, 1, true);
    CHECK_EQ_INT(memory_reserve(mem, &b), 0);
    CHECK_EQ_INT(model_forward(m, fc, mem, &b), 0);
    for (int j = 0; j < R; j++) {
        bool same = memcmp(one + (size_t)j * V, fc->logits + (size_t)j * V, sizeof(float) * (size_t)V) == 0;
        if (!same) fprintf(stderr, "  row %d differs\n", j);
        CHECK(same);
    }
    free(one);
    batch_free(&b);
    forward_ctx_destroy(fc);
    memory_destroy(mem);
    model_free(m);
}
