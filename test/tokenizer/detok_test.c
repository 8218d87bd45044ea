/* detok_test.c: the streaming detokenizer never emits part of a UTF-8 character. */
#include "tok_fixtures.h"
#include "tokenizer/unicode.h"

/* Push ids one by one; returns the concatenated output and checks each chunk is valid UTF-8. */
static bool stream(const struct tokenizer *tok, const int32_t *ids, size_t n, bool strip, char *out,
                   size_t *out_len, int *chunks_empty) {
    struct detok d;
    detok_init(&d, tok, false, strip);
    size_t o = 0;
    *chunks_empty = 0;
    char *buf = malloc(detok_buf_size(tok));
    for (size_t i = 0; i <= n; i++) {
        int k = i < n ? detok_push(&d, ids[i], buf, detok_buf_size(tok)) : detok_flush(&d, buf, detok_buf_size(tok));
        if (k < 0) { free(buf); return false; }
        if (k == 0) ++*chunks_empty;
        for (int j = 0; j < k;) {
            int v = utf8_valid_len((unsigned char *)buf + j, (size_t)(k - j));
            if (v <= 0) { free(buf); return false; } /* half a character, or invalid */
            j += v;
        }
        memcpy(out + o, buf, (size_t)k);
        o += (size_t)k;
    }
    *out_len = o;
    free(buf);
    return true;
}

TEST(detok_holds_back_partial_characters) {
    VOCAB(spm, "llama-spm");
    /* "🦙" has no token: byte fallback gives four <0xNN> tokens. */
    const char *s = "a \xF0\x9F\xA6\x99 b \xE6\x88\x91";
    int32_t ids[64];
    long n = enc(spm, s, false, false, ids, 64);
    CHECK(n > 6);
    char out[256];
    size_t ol;
    int empty;
    CHECK(stream(spm, ids, (size_t)n, true, out, &ol, &empty));
    CHECK_EQ_INT(ol, strlen(s));
    CHECK(!memcmp(out, s, ol));
    CHECK(empty >= 3); /* the llama's first three bytes waited */
}

TEST(detok_byte_level_bpe_round_trip) {
    const char *texts[] = {"Hello, y'all! How are you \xF0\x9F\x98\x81 ?\xE6\x88\x91\xE6\x83\xB3",
                           " \xE1\x9E\x80\xE1\x9E\xB6 \xF0\x9F\x9A\x80 (normal)"};
    for (size_t v = 2; v < N_SHARED_VOCABS; v++) {
        VOCAB(tok, shared_vocabs[v]);
        for (size_t i = 0; i < 2; i++) {
            int32_t ids[128];
            long n = enc(tok, texts[i], false, false, ids, 128);
            CHECK(n > 0);
            char out[512];
            size_t ol;
            int empty;
            CHECK(stream(tok, ids, (size_t)n, false, out, &ol, &empty));
            CHECK_EQ_INT(ol, strlen(texts[i]));
            CHECK(!memcmp(out, texts[i], ol));
        }
    }
}

TEST(detok_strip_space_only_at_text_start) {
    VOCAB(spm, "llama-spm");
    int32_t ids[8];
    CHECK_EQ_INT(enc(spm, "Hello", false, false, ids, 8), 1); /* "▁Hello" */
    char out[64];
    size_t ol;
    int empty;
    CHECK(stream(spm, ids, 1, true, out, &ol, &empty));
    CHECK(ol == 5 && !memcmp(out, "Hello", 5));
    CHECK(stream(spm, ids, 1, false, out, &ol, &empty)); /* a continuation keeps the space */
    CHECK(ol == 6 && !memcmp(out, " Hello", 6));
}

TEST(detok_invalid_and_unfinished_bytes_become_replacement) {
    VOCAB(spm, "llama-spm");
    /* <0xE2><0x82> then 'A': the held prefix can no longer complete. */
    int32_t ids[] = {3 + 0xE2, 3 + 0x82, 3 + 'A', 3 + 0xF0};
    char out[64];
    size_t ol;
    int empty;
    CHECK(stream(spm, ids, 4, false, out, &ol, &empty));
    CHECK_EQ_INT(ol, 3 + 3 + 1 + 3);
    CHECK(!memcmp(out, "\xEF\xBF\xBD\xEF\xBF\xBD" "A\xEF\xBF\xBD", ol));
    struct detok d;
    detok_init(&d, spm, false, false);
    char small[4];
    CHECK_EQ_INT(detok_push(&d, 15043, small, sizeof small), -ERR_TOOBIG);
}

TEST(detok_special_tokens_hidden_unless_asked) {
    VOCAB(qw, "qwen2");
    struct detok d;
    char buf[256];
    detok_init(&d, qw, false, false);
    CHECK_EQ_INT(detok_push(&d, 151645, buf, sizeof buf), 0);
    detok_init(&d, qw, true, false);
    CHECK_EQ_INT(detok_push(&d, 151645, buf, sizeof buf), 10);
    CHECK(!memcmp(buf, "<|im_end|>", 10));
}
