/* tok_fixtures.h: helpers for the tokenizer tests: loading the shared vocabularies (once per test
 * file) and building small GGUF vocabularies in memory. Header-only (static) so each test file
 * that includes it gets its own copy. */
#ifndef UVLM_TEST_TOK_FIXTURES_H
#define UVLM_TEST_TOK_FIXTURES_H

#include "test.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "common/err.h"

#include <stdlib.h>
#include <string.h>
#include <stdint.h>

static const char *const shared_vocabs[] = {"llama-spm", "phi-3",  "gpt-2",   "llama-bpe", "qwen2",
                                            "deepseek-coder", "refact", "gemma-4", "qwen35"};
#define N_SHARED_VOCABS (sizeof shared_vocabs / sizeof *shared_vocabs)

/* The tokenizer of ../shared/vocab/ggml-vocab-NAME.gguf, loaded on first use and kept for the
 * rest of the run (test-only cache); NULL and the test skipped when the file is missing. */
static inline struct tokenizer *shared_vocab(struct test_case *t, const char *name) {
    static struct tokenizer *cache[N_SHARED_VOCABS];
    size_t i = 0;
    while (i < N_SHARED_VOCABS && strcmp(shared_vocabs[i], name)) i++;
    if (i == N_SHARED_VOCABS) return NULL;
    if (cache[i]) return cache[i];
    char rel[128];
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", name);
    const char *path = shared_path(t, rel);
    if (!path) return NULL;
    struct gguf_file f;
    char why[256];
    if (gguf_open(&f, path, why, sizeof why) < 0) {
        fprintf(stderr, "  %s: %s\n", path, why);
        return NULL;
    }
    int rc = tokenizer_load(&cache[i], &f, why, sizeof why);
    gguf_close(&f);
    if (rc < 0) fprintf(stderr, "  %s: %s\n", path, why);
    return cache[i];
}

#define VOCAB(var, name)                                               \
    struct tokenizer *var = shared_vocab(t, name);                     \
    if (!var) { if (!t->skipped) t->failed = 1; return; }

/* ---- a GGUF v3 file with metadata only, built in memory ---- */

struct gbuf {
    unsigned char *data;
    size_t len, cap;
    uint64_t n_kv;
};

static inline void gb_put(struct gbuf *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 256;
        b->data = realloc(b->data, b->cap);
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}
static inline void gb_u32(struct gbuf *b, uint32_t v) { gb_put(b, &v, 4); }
static inline void gb_u64(struct gbuf *b, uint64_t v) { gb_put(b, &v, 8); }
static inline void gb_str(struct gbuf *b, const char *s) { gb_u64(b, strlen(s)); gb_put(b, s, strlen(s)); }

/* Header with a placeholder kv count (fixed by gb_finish). */
static inline void gb_begin(struct gbuf *b) {
    memset(b, 0, sizeof *b);
    gb_put(b, "GGUF", 4);
    gb_u32(b, 3);
    gb_u64(b, 0); /* tensors */
    gb_u64(b, 0); /* kv count */
}
static inline void gb_key(struct gbuf *b, const char *key, uint32_t type) { gb_str(b, key); gb_u32(b, type); b->n_kv++; }
static inline void gb_kv_str(struct gbuf *b, const char *key, const char *v) { gb_key(b, key, GGUF_STRING); gb_str(b, v); }
static inline void gb_kv_u32(struct gbuf *b, const char *key, uint32_t v) { gb_key(b, key, GGUF_UINT32); gb_u32(b, v); }
static inline void gb_kv_bool(struct gbuf *b, const char *key, bool v) { gb_key(b, key, GGUF_BOOL); uint8_t x = v; gb_put(b, &x, 1); }
static inline void gb_kv_strs(struct gbuf *b, const char *key, const char *const *v, size_t n) {
    gb_key(b, key, GGUF_ARRAY);
    gb_u32(b, GGUF_STRING);
    gb_u64(b, n);
    for (size_t i = 0; i < n; i++) gb_str(b, v[i]);
}
static inline void gb_kv_f32s(struct gbuf *b, const char *key, const float *v, size_t n) {
    gb_key(b, key, GGUF_ARRAY);
    gb_u32(b, GGUF_FLOAT32);
    gb_u64(b, n);
    gb_put(b, v, n * 4);
}
static inline void gb_kv_i32s(struct gbuf *b, const char *key, const int32_t *v, size_t n) {
    gb_key(b, key, GGUF_ARRAY);
    gb_u32(b, GGUF_INT32);
    gb_u64(b, n);
    gb_put(b, v, n * 4);
}
static inline void gb_finish(struct gbuf *b) { memcpy(b->data + 16, &b->n_kv, 8); }

/* Parse the built file and load a tokenizer from it: the tokenizer_load code (the file is closed
 * before returning, which also checks that the tokenizer copied what it needs). */
static inline int gb_load_with(struct gbuf *b, struct tokenizer **tok, const struct tokenizer_options *opt,
                               char *why, size_t why_len) {
    gb_finish(b);
    struct gguf_file f;
    int rc = gguf_parse(&f, b->data, b->len, why, why_len);
    if (rc < 0) return rc;
    rc = tokenizer_load_with(tok, &f, opt, why, why_len);
    gguf_close(&f);
    return rc;
}
static inline int gb_load(struct gbuf *b, struct tokenizer **tok, char *why, size_t why_len) {
    return gb_load_with(b, tok, NULL, why, why_len);
}

/* Encode into a fixed array; returns the count or a negative error. */
static inline long enc(const struct tokenizer *tok, const char *s, bool add_special, bool parse_special,
                int32_t *out, size_t n_max) {
    size_t n;
    int rc = tokenizer_encode(tok, s, strlen(s), add_special, parse_special, out, n_max, &n);
    return rc < 0 ? rc : (long)n;
}

#endif
