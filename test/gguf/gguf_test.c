/* GGUF reader tests: the shared real files, hand-built files, and truncated/corrupted copies. */
#include "test.h"
#include "gguf/gguf.h"
#include "common/err.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* A tiny GGUF builder for hand-made test files. */
struct buf {
    uint8_t data[4096];
    size_t len;
};
static void put(struct buf *b, const void *p, size_t n) { memcpy(b->data + b->len, p, n); b->len += n; }
static void put_u32(struct buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(struct buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(struct buf *b, const char *s) { put_u64(b, strlen(s)); put(b, s, strlen(s)); }

/* version 3, one u32 kv, one string-array kv, one f32 tensor of 4 elements; returns offsets of fields. */
static void build_small(struct buf *b, size_t *kv_count_at, size_t *tensor_type_at, size_t *arr_len_at) {
    b->len = 0;
    put(b, "GGUF", 4);
    put_u32(b, 3);
    put_u64(b, 1);                      /* n_tensors */
    *kv_count_at = b->len;
    put_u64(b, 3);                      /* n_kv */
    put_str(b, "test.n"); put_u32(b, GGUF_UINT32); put_u32(b, 42);
    put_str(b, "test.words"); put_u32(b, GGUF_ARRAY); put_u32(b, GGUF_STRING);
    *arr_len_at = b->len;
    put_u64(b, 2); put_str(b, "hello"); put_str(b, "w\xc3\xb6rld");
    put_str(b, "test.f"); put_u32(b, GGUF_FLOAT32); float f = 0.5f; put(b, &f, 4);
    put_str(b, "w"); put_u32(b, 2); put_u64(b, 2); put_u64(b, 2);
    *tensor_type_at = b->len;
    put_u32(b, GGML_TYPE_F32); put_u64(b, 0);
    while (b->len % 32) b->data[b->len++] = 0;
    float w[4] = {1, 2, 3, 4};
    put(b, w, sizeof w);
}

TEST(gguf_parses_hand_built_file) {
    struct buf b;
    size_t a, c, d;
    build_small(&b, &a, &c, &d);
    struct gguf_file f;
    char why[256];
    CHECK_EQ_INT(gguf_parse(&f, b.data, b.len, why, sizeof why), 0);
    CHECK_EQ_INT(f.version, 3);
    CHECK_EQ_INT(gguf_get_int(&f, "test.n", -1), 42);
    CHECK_EQ_INT(gguf_get_int(&f, "test.missing", -7), -7);
    CHECK(gguf_get_float(&f, "test.f", 0) == 0.5);
    CHECK(gguf_get_float(&f, "test.n", 0) == 42.0);
    CHECK_EQ_INT(gguf_get_int(&f, "test.f", -3), -3);   /* a float is not an int */
    const struct gguf_array *words = gguf_get_arr(&f, "test.words");
    CHECK(words && words->n == 2 && words->type == GGUF_STRING);
    CHECK(gguf_str_eq(words->strs[0], "hello"));
    CHECK(gguf_str_eq(words->strs[1], "w\xc3\xb6rld"));
    const struct gguf_tensor *w = gguf_find_tensor(&f, "w");
    CHECK(w && w->type == GGML_TYPE_F32 && w->ne[0] == 2 && w->ne[1] == 2 && w->size == 16);
    CHECK(((const float *)w->data)[3] == 4.0f);
    CHECK(gguf_find_tensor(&f, "nope") == NULL);
    gguf_close(&f);
}

TEST(gguf_rejects_every_truncation) {
    struct buf b;
    size_t a, c, d;
    build_small(&b, &a, &c, &d);
    for (size_t n = 0; n < b.len; n++) {
        struct gguf_file f;
        char why[256];
        uint8_t *copy = malloc(n ? n : 1); /* exact size so ASan sees any over-read */
        memcpy(copy, b.data, n);
        int rc = gguf_parse(&f, copy, n, why, sizeof why);
        free(copy);
        if (rc == 0) {
            fprintf(stderr, "  truncated to %zu of %zu bytes was accepted\n", n, b.len);
            CHECK(rc < 0);
        }
        CHECK(why[0] != '\0');
    }
}

static int parse_modified(struct buf *b, size_t at, uint64_t value, int width, char *why) {
    struct buf m = *b;
    memcpy(m.data + at, &value, width);
    struct gguf_file f;
    int rc = gguf_parse(&f, m.data, m.len, why, 256);
    if (rc == 0) gguf_close(&f);
    return rc;
}

TEST(gguf_rejects_corruptions_with_clear_messages) {
    struct buf b;
    size_t kv_count_at, tensor_type_at, arr_len_at;
    build_small(&b, &kv_count_at, &tensor_type_at, &arr_len_at);
    char why[256];
    CHECK_EQ_INT(parse_modified(&b, 0, 'X', 1, why), -ERR_FORMAT);
    CHECK(strstr(why, "magic"));
    CHECK_EQ_INT(parse_modified(&b, 4, 1, 4, why), -ERR_UNSUPPORTED);
    CHECK(strstr(why, "version 1"));
    CHECK_EQ_INT(parse_modified(&b, kv_count_at, UINT64_MAX, 8, why), -ERR_FORMAT);
    CHECK(strstr(why, "count"));
    CHECK_EQ_INT(parse_modified(&b, arr_len_at, (uint64_t)1 << 60, 8, why), -ERR_FORMAT);
    CHECK(strstr(why, "test.words"));
    CHECK_EQ_INT(parse_modified(&b, tensor_type_at, 77, 4, why), -ERR_UNSUPPORTED);
    CHECK(strstr(why, "unknown tensor type 77"));
    CHECK_EQ_INT(parse_modified(&b, tensor_type_at + 4, 64, 8, why), -ERR_FORMAT); /* data past the end */
    CHECK(strstr(why, "outside the file"));
    CHECK_EQ_INT(parse_modified(&b, tensor_type_at + 4, 3, 8, why), -ERR_FORMAT);  /* misaligned */
    CHECK(strstr(why, "aligned"));
    CHECK_EQ_INT(parse_modified(&b, tensor_type_at, GGML_TYPE_Q8_0, 4, why), -ERR_FORMAT); /* 2 not a block */
    CHECK(strstr(why, "blocks"));
}

TEST(gguf_reads_shared_model_metadata) {
    SHARED(path, "models/llama-spm-q8_0.gguf");
    struct gguf_file f;
    char why[512];
    int rc = gguf_open(&f, path, why, sizeof why);
    if (rc < 0) fprintf(stderr, "  %s\n", why);
    CHECK_EQ_INT(rc, 0);
    CHECK(gguf_str_eq(gguf_get_str(&f, "general.architecture"), "llama"));
    CHECK_EQ_INT(gguf_get_int(&f, "llama.embedding_length", 0), 256);
    CHECK_EQ_INT(gguf_get_int(&f, "llama.block_count", 0), 4);
    const struct gguf_array *toks = gguf_get_arr(&f, "tokenizer.ggml.tokens");
    CHECK(toks && toks->n == 32000);
    const struct gguf_tensor *emb = gguf_find_tensor(&f, "token_embd.weight");
    CHECK(emb && emb->ne[0] == 256 && emb->ne[1] == 32000);
    CHECK((const uint8_t *)emb->data + emb->size <= f.base + f.size);
    gguf_close(&f);
}

TEST(gguf_rejects_truncated_shared_file) {
    SHARED(path, "vocab/ggml-vocab-qwen2.gguf");
    struct gguf_file f;
    char why[512];
    CHECK_EQ_INT(gguf_open(&f, path, why, sizeof why), 0);
    size_t size = f.size;
    uint8_t *copy = malloc(size);
    memcpy(copy, f.base, size);
    gguf_close(&f);
    /* Cut at many points through the metadata: every cut must be refused, never over-read. */
    for (size_t n = 0; n < size; n += 1 + n / 7) {
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, copy, n);
        int rc = gguf_parse(&f, cut, n, why, sizeof why);
        free(cut);
        CHECK(rc < 0);
    }
    free(copy);
}

TEST(gguf_open_reports_missing_file) {
    struct gguf_file f;
    char why[256];
    CHECK_EQ_INT(gguf_open(&f, "/nonexistent/x.gguf", why, sizeof why), -ERR_NOTFOUND);
    CHECK(strstr(why, "/nonexistent/x.gguf"));
}

TEST(gguf_open_refuses_what_is_not_a_regular_file_without_blocking) {
    char fifo[] = "/tmp/uvlm-gguf-test-fifo-XXXXXX";
    ASSERT(mkdtemp(fifo));
    char path[64];
    snprintf(path, sizeof path, "%s/f", fifo);
    ASSERT(mkfifo(path, 0600) == 0);
    const char *paths[] = {path, fifo, "/dev/zero", "/dev/null"}; /* a FIFO with no writer blocked open() */
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        struct gguf_file f;
        char why[256];
        CHECK_EQ_INT(gguf_open(&f, paths[i], why, sizeof why), -ERR_INVAL);
        CHECK(strstr(why, "not a regular file") != NULL);
    }
    unlink(path);
    rmdir(fifo);
}

TEST(gguf_arr_int_saturates_float_elements) {
    float v[4] = {3.9f, -2.5f, 1e30f, -1e30f};
    struct gguf_array a = {.type = GGUF_FLOAT32, .n = 4, .data = v};
    CHECK_EQ_INT(gguf_arr_int(&a, 0), 3);
    CHECK_EQ_INT(gguf_arr_int(&a, 1), -2);
    CHECK(gguf_arr_int(&a, 2) == INT64_MAX);
    CHECK(gguf_arr_int(&a, 3) == INT64_MIN);
}

TEST(gguf_rejects_duplicates_fast) {
    /* 200k keys, the last one a repeat of the first: found without comparing every pair. */
    enum { N = 200000 };
    size_t cap = 64 + (size_t)N * 32;
    uint8_t *b = malloc(cap), *p = b;
    memcpy(p, "GGUF", 4); p += 4;
    uint32_t v = 3; memcpy(p, &v, 4); p += 4;
    uint64_t zero = 0, n = N; memcpy(p, &zero, 8); p += 8; memcpy(p, &n, 8); p += 8;
    for (uint32_t i = 0; i < N; i++) {
        char key[16];
        int len = snprintf(key, sizeof key, "k%u", i == N - 1 ? 0 : i);
        uint64_t l = (uint64_t)len; memcpy(p, &l, 8); p += 8; memcpy(p, key, (size_t)len); p += len;
        uint32_t t = GGUF_UINT8; memcpy(p, &t, 4); p += 4; *p++ = 1;
    }
    struct gguf_file f;
    char why[256];
    CHECK_EQ_INT(gguf_parse(&f, b, (size_t)(p - b), why, sizeof why), -ERR_FORMAT);
    free(b);
    CHECK(strstr(why, "duplicate key 'k0'"));
}
