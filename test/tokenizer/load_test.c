/* load_test.c: tokenizers built from small hand-made GGUF vocabularies: load errors with clear
 * messages, and the SPM score order and BPE rank order on vocabularies small enough to reason
 * about by hand. */
#include "tok_fixtures.h"

#define SPACE "\xE2\x96\x81"

static int load_expect(struct gbuf *b, int rc_expected, const char *why_part, struct test_case *t) {
    struct tokenizer *tok = NULL;
    char why[256];
    int rc = gb_load(b, &tok, why, sizeof why);
    free(b->data);
    if (rc != rc_expected || !strstr(why, why_part)) {
        fprintf(stderr, "  load gave %d \"%s\", expected %d with \"%s\"\n", rc, why, rc_expected, why_part);
        tokenizer_free(tok);
        return 0;
    }
    tokenizer_free(tok);
    return 1;
}

TEST(tokenizer_load_errors_name_the_problem) {
    static const char *const toks[] = {"a", "b"};
    static const float scores[] = {0, 0, 0};
    struct gbuf b;

    gb_begin(&b);
    gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, 2);
    CHECK(load_expect(&b, -ERR_FORMAT, "tokenizer.ggml.model", t));

    gb_begin(&b);
    gb_kv_str(&b, "tokenizer.ggml.model", "bert");
    CHECK(load_expect(&b, -ERR_UNSUPPORTED, "'bert'", t));

    gb_begin(&b);
    gb_kv_str(&b, "tokenizer.ggml.model", "llama");
    CHECK(load_expect(&b, -ERR_FORMAT, "tokenizer.ggml.tokens", t));

    gb_begin(&b);
    gb_kv_str(&b, "tokenizer.ggml.model", "llama");
    gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, 2);
    gb_kv_f32s(&b, "tokenizer.ggml.scores", scores, 3);
    CHECK(load_expect(&b, -ERR_FORMAT, "tokenizer.ggml.scores", t));

    gb_begin(&b);
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, 2);
    CHECK(load_expect(&b, -ERR_FORMAT, "tokenizer.ggml.merges", t));

    /* A pre-tokenizer uvlm does not know is refused, never split some other way unasked. */
    gb_begin(&b);
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    gb_kv_str(&b, "tokenizer.ggml.pre", "no-such-pre");
    gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, 2);
    gb_kv_strs(&b, "tokenizer.ggml.merges", (const char *const[]){"a b"}, 1);
    CHECK(load_expect(&b, -ERR_UNSUPPORTED, "tokenizer.ggml.pre 'no-such-pre' is not a pre-tokenizer uvlm knows", t));
}

TEST(tokenizer_unknown_pretokenizer_only_when_allowed) {
    static const char *const toks[] = {"a", "b", "ab"};
    struct gbuf b;
    struct tokenizer *tok = NULL;
    char why[256];
    gb_begin(&b);
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    gb_kv_str(&b, "tokenizer.ggml.pre", "no-such-pre");
    gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, 3);
    gb_kv_strs(&b, "tokenizer.ggml.merges", (const char *const[]){"a b"}, 1);
    struct tokenizer_options opt = {.allow_unknown_pretokenizer = true};
    CHECK_EQ_INT(gb_load_with(&b, &tok, &opt, why, sizeof why), 0);
    free(b.data);
    CHECK(strstr(why, "warning: unknown pre-tokenizer 'no-such-pre', splitting as 'default'"));
    CHECK_EQ_STR(tokenizer_pre_name(tok), "no-such-pre");
    int32_t ids[4];
    CHECK_EQ_INT(enc(tok, "ab", false, false, ids, 4), 1);
    CHECK_EQ_INT(ids[0], 2);
    tokenizer_free(tok);

    /* Kimi K2's vocabulary has no merges: loads, words are looked up whole or as bytes */
    gb_begin(&b);
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    gb_kv_str(&b, "tokenizer.ggml.pre", "kimi-k2");
    gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, 3);
    CHECK_EQ_INT(gb_load(&b, &tok, why, sizeof why), 0);
    free(b.data);
    CHECK_EQ_INT(enc(tok, "ab", false, false, ids, 4), 2);
    tokenizer_free(tok);
}

/* Gemma 4's BPE: raw UTF-8 with spaces as U+2581, lines merged whole, a run of newlines that is
 * a token taken as it is, <0xNN> tokens for bytes no token covers, BOS whatever the key says. */
TEST(tokenizer_raw_utf8_bpe) {
    enum { N = 256 + 8 };
    const char *toks[N];
    char bytes[256][7];
    int32_t types[N];
    const char *extra[] = {"<bos>", "<eos>", SPACE, "a", SPACE "a", "\n", "\n\n\n", "b"};
    for (int i = 0; i < 8; i++) {
        toks[i] = extra[i];
        types[i] = i < 2 ? 3 : 1;
    }
    for (int i = 0; i < 256; i++) {
        snprintf(bytes[i], sizeof bytes[i], "<0x%02X>", i);
        toks[8 + i] = bytes[i];
        types[8 + i] = 6;
    }
    /* "\n \n" ranks first: the newline runs must not be merged from it */
    const char *merges[] = {"\n \n", SPACE " a", "a b"};
    struct gbuf b;
    gb_begin(&b);
    gb_kv_str(&b, "tokenizer.ggml.model", "gemma4");
    gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, N);
    gb_kv_i32s(&b, "tokenizer.ggml.token_type", types, N);
    gb_kv_strs(&b, "tokenizer.ggml.merges", merges, 3);
    gb_kv_u32(&b, "tokenizer.ggml.bos_token_id", 0);
    gb_kv_u32(&b, "tokenizer.ggml.eos_token_id", 1);
    gb_kv_bool(&b, "tokenizer.ggml.add_bos_token", false);
    struct tokenizer *tok = NULL;
    char why[256];
    CHECK_EQ_INT(gb_load(&b, &tok, why, sizeof why), 0);
    free(b.data);
    CHECK_EQ_STR(tokenizer_pre_name(tok), "gemma4");
    int32_t ids[16];
    /* BOS, "▁a" (merged), "\n\n\n" whole, then "c" as its byte */
    CHECK_EQ_INT(enc(tok, " a\n\n\nc", true, false, ids, 16), 4);
    CHECK_EQ_INT(ids[0], 0);
    CHECK_EQ_INT(ids[1], 4);
    CHECK_EQ_INT(ids[2], 6);
    CHECK_EQ_INT(ids[3], 8 + 'c');
    /* "\n\n" is no token: "\n \n" merges it into a symbol that is none, which becomes its bytes */
    CHECK_EQ_INT(enc(tok, "\n\n", false, false, ids, 16), 2);
    CHECK_EQ_INT(ids[0], 8 + '\n');
    CHECK_EQ_INT(ids[1], 8 + '\n');
    CHECK_EQ_INT(enc(tok, "\n", false, false, ids, 16), 1);
    CHECK_EQ_INT(ids[0], 5);
    CHECK_EQ_INT(enc(tok, "ab", false, false, ids, 16), 2); /* the same for "a b" */
    CHECK_EQ_INT(ids[0], 8 + 'a');
    CHECK_EQ_INT(ids[1], 8 + 'b');
    char out[32];
    CHECK_EQ_INT(enc(tok, " a \xC3\xA9", false, false, ids, 16), 4); /* "▁a", "▁", é as two bytes */
    CHECK_EQ_INT(tokenizer_decode(tok, ids, 4, false, false, out, sizeof out), 5);
    CHECK(!memcmp(out, " a \xC3\xA9", 5));
    tokenizer_free(tok);
}

/* <unk> <s> </s> <0x00>..<0xFF> then a few pieces with scores. */
static struct tokenizer *tiny_spm(struct test_case *t, bool add_space_prefix) {
    const char *extra[] = {SPACE, "a", "b", "ab", SPACE "a", SPACE "ab", "ba"};
    const float extra_scores[] = {-1, -1, -1, -2, -3, -4, -1.5f};
    enum { N_EXTRA = sizeof extra / sizeof *extra, N = 3 + 256 + N_EXTRA };
    const char *toks[N];
    char bytes[256][7];
    float scores[N];
    int32_t types[N];
    toks[0] = "<unk>"; toks[1] = "<s>"; toks[2] = "</s>";
    types[0] = 2; types[1] = 3; types[2] = 3;
    for (int i = 0; i < 256; i++) {
        snprintf(bytes[i], sizeof bytes[i], "<0x%02X>", i);
        toks[3 + i] = bytes[i];
        types[3 + i] = 6;
    }
    for (int i = 0; i < N_EXTRA; i++) {
        toks[259 + i] = extra[i];
        scores[259 + i] = extra_scores[i];
        types[259 + i] = 1;
    }
    for (int i = 0; i < 259; i++) scores[i] = 0;
    struct gbuf b;
    gb_begin(&b);
    gb_kv_str(&b, "tokenizer.ggml.model", "llama");
    gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, N);
    gb_kv_f32s(&b, "tokenizer.ggml.scores", scores, N);
    gb_kv_i32s(&b, "tokenizer.ggml.token_type", types, N);
    gb_kv_bool(&b, "tokenizer.ggml.add_space_prefix", add_space_prefix);
    gb_kv_bool(&b, "tokenizer.ggml.add_eos_token", true);
    struct tokenizer *tok = NULL;
    char why[256];
    if (gb_load(&b, &tok, why, sizeof why) < 0) fprintf(stderr, "  tiny spm: %s\n", why);
    free(b.data);
    return tok;
}

enum { SP = 259, A, B, AB, SP_A, SP_AB, BA };

TEST(tokenizer_spm_merges_by_score) {
    struct tokenizer *tok = tiny_spm(t, true);
    CHECK(tok);
    int32_t ids[16];
    /* "▁ab": "ab" (-2) before "▁a" (-3), then "▁ab". */
    CHECK_EQ_INT(enc(tok, "ab", false, false, ids, 16), 1);
    CHECK_EQ_INT(ids[0], SP_AB);
    /* "▁aba": "ba" (-1.5) first, then "▁a"; "aba" is no token. */
    CHECK_EQ_INT(enc(tok, "aba", false, false, ids, 16), 2);
    CHECK_EQ_INT(ids[0], SP_A);
    CHECK_EQ_INT(ids[1], BA);
    /* Unknown characters fall back to bytes; BOS/EOS as the metadata says. */
    CHECK_EQ_INT(enc(tok, "c\xC3\xA9", true, false, ids, 16), 6);
    CHECK_EQ_INT(ids[0], 1);
    CHECK_EQ_INT(ids[1], SP);
    CHECK_EQ_INT(ids[2], 3 + 'c');
    CHECK_EQ_INT(ids[3], 3 + 0xC3);
    CHECK_EQ_INT(ids[4], 3 + 0xA9);
    CHECK_EQ_INT(ids[5], 2);
    char out[32];
    CHECK_EQ_INT(tokenizer_decode(tok, ids, 6, true, false, out, sizeof out), 4);
    CHECK(!memcmp(out, " c\xC3\xA9", 4)); /* after a BOS the space stays, as in the reference */
    tokenizer_free(tok);

    tok = tiny_spm(t, false); /* no prefix: "ab" alone */
    CHECK(tok);
    CHECK_EQ_INT(enc(tok, "ab", false, false, ids, 16), 1);
    CHECK_EQ_INT(ids[0], AB);
    tokenizer_free(tok);
}

TEST(tokenizer_bpe_merges_by_rank) {
    /* "bc" is a merge result but not a token: it still merges on into "abc". */
    const char *toks[] = {"a", "b", "c", "ab", "abc", "\xC4\xA0", "\xC4\xA0" "a", "x y"};
    const char *merges[] = {"a b", "b c", "a bc", "\xC4\xA0 a", "nospace"};
    struct gbuf b;
    gb_begin(&b);
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    gb_kv_str(&b, "tokenizer.ggml.pre", "gpt-2");
    gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, sizeof toks / sizeof *toks);
    gb_kv_strs(&b, "tokenizer.ggml.merges", merges, sizeof merges / sizeof *merges);
    gb_kv_u32(&b, "tokenizer.ggml.bos_token_id", 99); /* out of range: no BOS */
    struct tokenizer *tok = NULL;
    char why[256];
    CHECK_EQ_INT(gb_load(&b, &tok, why, sizeof why), 0);
    free(b.data);
    int32_t ids[16];
    CHECK_EQ_INT(enc(tok, "ab", false, false, ids, 16), 1);
    CHECK_EQ_INT(ids[0], 3);
    /* "abc": "a b" (rank 0) wins over "b c" (rank 1); "ab c" is no merge. */
    CHECK_EQ_INT(enc(tok, "abc", false, false, ids, 16), 2);
    CHECK_EQ_INT(ids[0], 3);
    CHECK_EQ_INT(ids[1], 2);
    /* " a": "Ġ a" -> "Ġa"; "x" is no token and no byte token: dropped, as the reference does. */
    CHECK_EQ_INT(enc(tok, " ax", false, false, ids, 16), 1);
    CHECK_EQ_INT(ids[0], 6);
    CHECK_EQ_INT(tokenizer_bos(tok), -1);
    CHECK_EQ_INT(enc(tok, "a", true, false, ids, 16), 1);
    tokenizer_free(tok);

    /* "bc" merged first when it ranks first, then "a bc" -> "abc". */
    const char *merges2[] = {"b c", "a bc", "a b"};
    gb_begin(&b);
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, sizeof toks / sizeof *toks);
    gb_kv_strs(&b, "tokenizer.ggml.merges", merges2, 3);
    CHECK_EQ_INT(gb_load(&b, &tok, why, sizeof why), 0);
    free(b.data);
    CHECK_EQ_STR(tokenizer_pre_name(tok), "default");
    CHECK_EQ_INT(enc(tok, "abc", false, false, ids, 16), 1);
    CHECK_EQ_INT(ids[0], 4);
    CHECK_EQ_INT(enc(tok, "bc", false, false, ids, 16), 2); /* "bc" is no token: its bytes */
    CHECK_EQ_INT(ids[0], 1);
    CHECK_EQ_INT(ids[1], 2);
    tokenizer_free(tok);
}
