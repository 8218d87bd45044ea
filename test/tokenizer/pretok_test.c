/* pretok_test.c: the pre-tokenizer regexes, word by word, on code points (no vocabulary). */
#include "test.h"
#include "tokenizer/pretok.h"
#include "tokenizer/unicode.h"

#include <stdlib.h>
#include <string.h>

/* Splits UTF-8 text and joins the words with '|' into out. */
static void split(enum pretok k, const char *text, char *out, size_t out_len) {
    size_t len = strlen(text), n = 0;
    uint32_t cps[512], ends[512], scratch[512];
    uint16_t fl[512];
    for (size_t off = 0, adv; off < len && n < 512; off += adv, n++) {
        cps[n] = utf8_decode(text + off, len - off, &adv);
        fl[n] = (uint16_t)ucp_flags(cps[n]);
    }
    size_t nw = pretok_split(k, cps, fl, n, ends, scratch), o = 0;
    for (size_t w = 0, c = 0; w < nw; w++) {
        if (w && o + 1 < out_len) out[o++] = '|';
        for (; c < ends[w] && o + 4 < out_len; c++) o += utf8_encode(cps[c], out + o);
    }
    out[o] = 0;
}

#define CHECK_SPLIT(kind, text, expected) do {            \
        char got_[2048];                                   \
        split(kind, text, got_, sizeof got_);              \
        CHECK_EQ_STR(got_, expected);                      \
    } while (0)

TEST(pretok_llama3) {
    CHECK_SPLIT(PRETOK_LLAMA3, "Hello world", "Hello| world");
    CHECK_SPLIT(PRETOK_LLAMA3, "I'm HE'LL they'Re", "I|'m| HE|'LL| they|'Re");
    CHECK_SPLIT(PRETOK_LLAMA3, "1234567 x", "123|456|7| x");
    CHECK_SPLIT(PRETOK_LLAMA3, "   Hello", "  | Hello");
    CHECK_SPLIT(PRETOK_LLAMA3, "a  \n\n b", "a|  \n\n| b");
    CHECK_SPLIT(PRETOK_LLAMA3, "x ...\n\ny", "x| ...\n\n|y");
    CHECK_SPLIT(PRETOK_LLAMA3, "end   ", "end|   ");
    CHECK_SPLIT(PRETOK_LLAMA3, "\xC3\x84pfel 3\xC2\xBD", "\xC3\x84pfel| |3\xC2\xBD");
    CHECK_SPLIT(PRETOK_LLAMA3, "$x", "$x");
    CHECK_SPLIT(PRETOK_LLAMA3, "", "");
    /* Unicode whitespace is \s too: ideographic space, no-break space. */
    CHECK_SPLIT(PRETOK_LLAMA3, "a\xE3\x80\x80\xE3\x80\x80" "b", "a|\xE3\x80\x80|\xE3\x80\x80" "b");
    CHECK_SPLIT(PRETOK_LLAMA3, "x\xC2\xA0", "x|\xC2\xA0");
}

TEST(pretok_qwen2_splits_every_digit) {
    CHECK_SPLIT(PRETOK_QWEN2, "1234 ab", "1|2|3|4| ab");
    CHECK_SPLIT(PRETOK_QWEN2, "we'VE", "we|'VE");
}

TEST(pretok_gpt2) {
    CHECK_SPLIT(PRETOK_GPT2, "Hello world", "Hello| world");
    CHECK_SPLIT(PRETOK_GPT2, "I'm HE'LL", "I|'m| HE|'|LL"); /* contractions are case-sensitive */
    CHECK_SPLIT(PRETOK_GPT2, "1234567 x", "1234567| x");
    CHECK_SPLIT(PRETOK_GPT2, "   Hello", "  | Hello");
    CHECK_SPLIT(PRETOK_GPT2, "a \n\n b", "a| \n\n| b");
    CHECK_SPLIT(PRETOK_GPT2, "$x", "$|x");
    CHECK_SPLIT(PRETOK_GPT2, "x !!", "x| !!");
}

TEST(pretok_default_passes) {
    CHECK_SPLIT(PRETOK_DEFAULT, "Hello, world", "Hello|,| world");
    CHECK_SPLIT(PRETOK_DEFAULT, "a 1234567", "a| |123|456|7");
}

TEST(pretok_names) {
    CHECK_EQ_INT(pretok_from_name("llama-bpe", 9), PRETOK_LLAMA3);
    CHECK_EQ_INT(pretok_from_name("qwen2", 5), PRETOK_QWEN2);
    CHECK_EQ_INT(pretok_from_name("gpt-2", 5), PRETOK_GPT2);
    CHECK_EQ_INT(pretok_from_name("default", 7), PRETOK_DEFAULT);
    CHECK_EQ_INT(pretok_from_name("qwen", 4), PRETOK_UNKNOWN);
    CHECK_EQ_STR(pretok_name(PRETOK_QWEN2), "qwen2");
}

/* Linear time: 100 K spaces then a letter, and 100 K letters, split in one go. */
TEST(pretok_long_runs) {
    size_t n = 100000;
    uint32_t *cps = malloc(n * sizeof *cps), *ends = malloc(n * sizeof *ends), *scr = malloc(n * sizeof *scr);
    uint16_t *fl = malloc(n * sizeof *fl);
    CHECK(cps && ends && scr && fl);
    for (size_t i = 0; i < n; i++) { cps[i] = ' '; fl[i] = (uint16_t)ucp_flags(' '); }
    cps[n - 1] = 'x';
    fl[n - 1] = (uint16_t)ucp_flags('x');
    CHECK_EQ_INT(pretok_split(PRETOK_LLAMA3, cps, fl, n, ends, scr), 2);
    CHECK_EQ_INT(ends[0], n - 2);
    for (size_t i = 0; i < n; i++) { cps[i] = 'a'; fl[i] = (uint16_t)ucp_flags('a'); }
    CHECK_EQ_INT(pretok_split(PRETOK_DEFAULT, cps, fl, n, ends, scr), 1);
    free(cps);
    free(ends);
    free(scr);
    free(fl);
}
