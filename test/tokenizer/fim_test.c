/* Fill-in-the-middle markers of real vocabularies found by their text (no GGUF keys name them):
 * StarCoder's <fim_prefix> family in refact's, DeepSeek Coder's fullwidth-bar markers; none in
 * Llama's. (The keys win over the text: test/api/infill_test.c.) */
#include "tok_fixtures.h"

static void check_fim(struct test_case *t, struct tokenizer *tok, const int32_t want[TOKENIZER_FIM_KINDS]) {
    for (int k = 0; k < TOKENIZER_FIM_KINDS; k++) CHECK_EQ_INT(tokenizer_fim(tok, (enum tokenizer_fim)k), want[k]);
    CHECK_EQ_INT(tokenizer_fim(tok, TOKENIZER_FIM_KINDS), -1);
}

TEST(tokenizer_fim_markers_by_text) {
    struct tokenizer *refact = shared_vocab(t, "refact");
    if (!refact) return;
    /* <fim_prefix> 1, <fim_middle> 2, <fim_suffix> 3, <fim_pad> 4, <reponame> 18, no file separator */
    check_fim(t, refact, (const int32_t[]){1, 3, 2, 4, 18, -1});
    if (t->failed) return;
    CHECK(tokenizer_is_control(refact, 1) && tokenizer_is_eog(refact, 4) && !tokenizer_is_eog(refact, 1));

    struct tokenizer *ds = shared_vocab(t, "deepseek-coder");
    if (!ds) return;
    int32_t pre = tokenizer_fim(ds, TOKENIZER_FIM_PRE);
    size_t len;
    const char *piece = pre >= 0 ? tokenizer_token_piece(ds, pre, true, &len) : NULL;
    CHECK(piece && len == strlen("<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>") &&
          !memcmp(piece, "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", len));
    CHECK(tokenizer_fim(ds, TOKENIZER_FIM_SUF) >= 0 && tokenizer_fim(ds, TOKENIZER_FIM_MID) >= 0);

    struct tokenizer *spm = shared_vocab(t, "llama-spm");
    if (!spm) return;
    check_fim(t, spm, (const int32_t[]){-1, -1, -1, -1, -1, -1});
}
