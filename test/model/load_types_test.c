/* load_types_test.c: the weight types at load. A model holding a tensor of a GGUF type this
 * engine has no kernels for is refused, the message naming the tensor and the type (the llama
 * and mamba loaders); models of the low-bit types (Q2_K, Q3_K, IQ4_NL, IQ4_XS, written by
 * mkmodel) load and run. */
#include "test.h"
#include "cmd/cmd.h"
#include "common/err.h"
#include "gguf/gguf.h"
#include "model/eval.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* mkmodel into a fresh temporary file (path: a "/tmp/uvlm-...-XXXXXX" buffer); `tied`: one
 * 32000-row matrix for the embedding and the output, half the quantizing of two. */
static int make_model(char *path, const char *vocab, const char *arch, const char *type, bool tied) {
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    close(fd);
    char *argv[] = {"mkmodel", "--out", path, "--vocab", (char *)vocab, "--arch", (char *)arch, "--type", (char *)type,
                    "--n-layer", "1", "--n-embd", "256", "--n-ff", "512", "--tied"};
    return cmd_mkmodel((int)(sizeof argv / sizeof *argv) - !tied, argv);
}

/* The type of tensor `name` in the GGUF file at path rewritten in place (its tensor-info record:
 * name, n_dims, the dimensions, then the type); the new type's rows must not take more bytes. */
static int set_tensor_type(const char *path, const char *name, uint32_t type) {
    struct gguf_file f;
    char why[256];
    if (gguf_open(&f, path, why, sizeof why) < 0) return -1;
    const struct gguf_tensor *t = gguf_find_tensor(&f, name);
    long off = t ? (long)((const uint8_t *)t->name.ptr - f.base) + (long)t->name.len + 4 + 8 * (long)t->n_dims : -1;
    gguf_close(&f);
    if (off < 0) return -1;
    FILE *fp = fopen(path, "r+b");
    if (!fp) return -1;
    int ok = fseek(fp, off, SEEK_SET) == 0 && fwrite(&type, 4, 1, fp) == 1;
    return fclose(fp) == 0 && ok ? 0 : -1;
}

TEST(model_load_refuses_unsupported_types_naming_tensor_and_type) {
    SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
    static const struct { const char *arch, *tensor; } cases[] = {
        {"llama", "blk.0.attn_q.weight"},
        {"mamba", "blk.0.ssm_in.weight"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char path[] = "/tmp/uvlm-types-XXXXXX";
        CHECK_EQ_INT(make_model(path, vocab, cases[k].arch, "q8_0", false), 0);
        /* IQ2_XXS: a GGUF type (its rows smaller than Q8_0's) without kernels here */
        int rc = set_tensor_type(path, cases[k].tensor, GGML_TYPE_IQ2_XXS);
        struct model *m = NULL;
        char why[256] = "";
        if (rc == 0) rc = model_load(&m, path, NULL, why, sizeof why);
        unlink(path);
        if (rc != -ERR_UNSUPPORTED) fprintf(stderr, "  %s: load gave %d (%s)\n", cases[k].arch, rc, why);
        CHECK_EQ_INT(rc, -ERR_UNSUPPORTED);
        CHECK(m == NULL);
        CHECK(strstr(why, cases[k].tensor) != NULL);
        CHECK(strstr(why, "iq2_xxs") != NULL);
    }
}

static void ignore_row(void *arg, int32_t index, const float *logits) { (void)arg, (void)index, (void)logits; }

TEST(model_load_runs_the_low_bit_types) {
    SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
    static const char *const types[] = {"q2_k", "q3_k", "iq4_nl", "iq4_xs"};
    static const enum ggml_type want[] = {GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS};
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        char path[] = "/tmp/uvlm-types-XXXXXX";
        CHECK_EQ_INT(make_model(path, vocab, "llama", types[k], true), 0);
        struct model *m = NULL;
        char why[256] = "";
        int rc = model_load(&m, path, NULL, why, sizeof why);
        unlink(path);
        if (rc < 0) fprintf(stderr, "  %s: %s\n", types[k], why);
        CHECK_EQ_INT(rc, 0);
        CHECK(m->layers[0].wq.type == want[k] && m->layers[0].w_down.type == want[k]);
        struct memory *mem = NULL;
        struct forward_ctx *fc = NULL;
        static const int32_t prompt[] = {1, 450, 4996, 17354, 1701, 29916};
        int32_t next = -1;
        rc = model_memory_create(m, 64, 1, &mem);
        if (rc == 0) rc = forward_ctx_create(&fc, m, &(struct forward_config){.max_tokens = 16, .n_ctx = 64, .n_threads = 2});
        if (rc == 0) rc = eval_run(m, fc, mem, prompt, 6, 6, 1, &next, ignore_row, NULL);
        bool finite = rc == 0;
        for (int32_t v = 0; finite && v < m->hp.n_vocab; v++) finite = isfinite(fc->logits[v]);
        forward_ctx_destroy(fc);
        memory_destroy(mem);
        model_free(m);
        CHECK_EQ_INT(rc, 0);
        CHECK(finite && next >= 0);
    }
}
