/* pretok_test.c: the pre-tokenizer regexes, word by word, on code points (no vocabulary). The
 * expected words are what the reference's regexes make of each string (test/e2e/test_pretok.py
 * runs them against a model of the reference's splitter over a large corpus); the strings here
 * aim at what tells each family's regex from the others. */
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
    CHECK_EQ_INT(pretok_from_name("qwen2x", 5), PRETOK_QWEN2); /* the length counts, not a NUL */
    CHECK_EQ_STR(pretok_name(PRETOK_QWEN2), "qwen2");
    /* the families' names map as the reference maps them, with its settings */
    CHECK_EQ_INT(pretok_from_name("refact", 6), PRETOK_STARCODER);
    CHECK_EQ_INT(pretok_from_name("command-r", 9), PRETOK_STARCODER);
    CHECK_EQ_INT(pretok_from_name("llama4", 6), PRETOK_GPT4O);
    CHECK_EQ_INT(pretok_from_name("pixtral", 7), PRETOK_LLAMA3);
    CHECK_EQ_INT(pretok_from_name("smaug-bpe", 9), PRETOK_LLAMA3);
    CHECK_EQ_INT(pretok_from_name("grok-2", 6), PRETOK_QWEN2);
    CHECK_EQ_INT(pretok_from_name("hunyuan-dense", 13), PRETOK_DEEPSEEK3);
    const struct pretok_info *pi = pretok_lookup("llama-bpe", 9);
    CHECK(pi && pi->ignore_merges && pi->add_bos && !pi->raw_utf8);
    pi = pretok_lookup("dbrx", 4); /* Llama 3's regex without Llama 3's merge rule */
    CHECK(pi && pi->kind == PRETOK_LLAMA3 && !pi->ignore_merges && !pi->add_bos);
    pi = pretok_lookup("gemma4", 6);
    CHECK(pi && pi->kind == PRETOK_LINES && pi->raw_utf8 && pi->force_add_bos && pi->whole_newlines);
    pi = pretok_lookup("sarvam-moe", 10);
    CHECK(pi && pi->raw_utf8 && !pi->force_add_bos && !pi->whole_newlines);
    pi = pretok_lookup("glm4", 4);
    CHECK(pi && pi->no_bos_id);
    /* every name is found by itself, every kind has a name and splits */
    bool named[PRETOK_COUNT] = {0};
    size_t i = 0;
    for (; (pi = pretok_known(i)); i++) {
        CHECK(pretok_lookup(pi->name, strlen(pi->name)) == pi);
        named[pi->kind] = true;
    }
    CHECK(i > 80);
    for (int k = 0; k < PRETOK_COUNT; k++) {
        CHECK(named[k]);
        char out[64];
        split((enum pretok)k, "Hi 12", out, sizeof out);
        CHECK(strlen(out) >= 5);
    }
}

/* One string per row, its words joined by '|'. */
static const struct {
    const char *pre, *text, *words;
} splits[] = {
    {"default", "Hello, world!! 1234567", "Hello|,| world|!!| |123|456|7"},
    {"default", "$x <=> y~z", "$|x| |<=>| y|~|z"},
    {"gpt-2", "I'm HE'LL 1234567", "I|'m| HE|'|LL| 1234567"},
    {"gpt-2", "   Hello\t\tx", "  | Hello|\t|\t|x"},
    {"llama-bpe", "I'm HE'LL they'Re", "I|'m| HE|'LL| they|'Re"},
    {"llama-bpe", "1234567 x", "123|456|7| x"},
    {"llama-bpe", "a  \n\n b", "a|  \n\n| b"},
    {"llama-bpe", "x ...\n\ny", "x| ...\n\n|y"},
    {"qwen2", "1234 ab", "1|2|3|4| ab"},
    {"qwen2", "we'VE re\xCC\x81sume\xCC\x81", "we|'VE| re|\xCC\x81sume|\xCC\x81"},
    {"qwen35", "re\xCC\x81sume\xCC\x81 x\xCC\x81!", "re\xCC\x81sume\xCC\x81| x\xCC\x81|!"},
    {"qwen35", "\xCC\x81" "a 12", "\xCC\x81" "a| |1|2"},
    {"seed-coder", "x !!\n\ny", "x| !!|\n\n|y"},
    {"seed-coder", "12 ab", "1|2| ab"},
    {"ufakzeka", "I'm ok", "I|'m| ok"},
    {"ufakzeka", "kitab'\xC4\xB1n 12", "kitab|'\xC4\xB1n| |1|2"},
    {"minicpm5", "1234567 x", "123|456|7| x"},
    {"minicpm5", "I'm 12ab", "I|'m| |12|ab"},
    {"jais-2", "a          b", "a|        | | b"},
    {"jais-2", "x     ", "x|    | "},
    {"laguna", "a b\n\nc 12", "a| b|\n\n|c| |1|2"},
    {"laguna", "x\ny", "x|\n|y"},
    {"refact", "x 123 y1", "x| |1|2|3| y|1"},
    {"refact", "I'm  ok", "I|'m| | ok"},
    {"falcon", "x `y` 1234567", "x| |`|y|`| |123|456|7"},
    {"falcon", "a+b=c", "a|+|b|=|c"},
    {"deepseek-llm", "Hello \xE4\xBD\xA0\xE5\xA5\xBD world  ", "Hello| |\xE4\xBD\xA0\xE5\xA5\xBD| world|  "},
    {"deepseek-llm", "\xC3\xA9t\xC3\xA9 \xE0\xA4\x95\xE0\xA4\xBF 12\n\nx", "\xC3\xA9|t|\xC3\xA9| |\xE0\xA4\x95\xE0\xA4\xBF| |12|\n|\n|x"},
    {"deepseek-llm", "\xEF\xBC\x81\xEF\xBC\x81 a.b", "\xEF\xBC\x81\xEF\xBC\x81| a|.|b"},
    {"deepseek-coder", "Hello \xE4\xBD\xA0\xE5\xA5\xBD 123", "Hello| |\xE4\xBD\xA0\xE5\xA5\xBD| |1|2|3"},
    {"deepseek-coder", "a.b, c!\nd", "a|.|b|,| c|!|\n|d"},
    {"deepseek-v3", "1234567 \xE4\xBD\xA0\xE5\xA5\xBD\xE3\x81\x82", "123|456|7| |\xE4\xBD\xA0\xE5\xA5\xBD\xE3\x81\x82"},
    {"deepseek-v3", ".Net ~ab \xC3\xA9t\xC3\xA9", ".Net| |~ab| \xC3\xA9t\xC3\xA9"},
    {"deepseek-v3", "a !!\n\nb", "a| !!\n\n|b"},
    {"spark2_5", "1234567 x", "1|2|3|4|5|6|7| x"},
    {"spark2_5", "a !!\n\nb", "a| !!|\n|\n|b"},
    {"youtu", "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 \xE4\xBD\xA0\xE5\xA5\xBD\xE3\x80\x82", "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4| |\xE4\xBD\xA0\xE5\xA5\xBD|\xE3\x80\x82"},
    {"youtu", "Hello WORLD I'm 12", "Hello| WORLD| I'm| |1|2"},
    {"gpt-4o", "HELLOworld helloWORLD", "HELLOworld| hello|WORLD"},
    {"gpt-4o", "\xC3\x84PFEL I'M 1234567", "\xC3\x84|PFEL| I'M| |123|456|7"},
    {"gpt-4o", "a/b\n/c", "a|/b|\n|/c"},
    {"granite-embed-multi-97m", "A\xCC\x81" "BC x\xCC\x81y", "A\xCC\x81|BC| x\xCC\x81y"},
    {"granite-embed-multi-97m", "HELLOworld", "HELLOworld"},
    {"tekken", "HELLOworld helloWORLD", "HELLOworld| hello|WORLD"},
    {"tekken", "I'm 1234", "I|'m| |1|2|3|4"},
    {"tiny_aya", "1234567 x", "1|234|567| x"},
    {"tiny_aya", "1234a 12_3", "123|4|a| |12|_|3"},
    {"tiny_aya", "HELLOworld", "HELLOworld"},
    {"superbpe", "1234567 x", "1|234|567| x"},
    {"superbpe", "12\xD9\xA3" "456", "12\xD9\xA3|456"},
    {"exaone-moe", "hello world  foo", "hello world| | foo"},
    {"exaone-moe", "a/b/\nc 12", "a|/b|/\n|c| |1|2"},
    {"poro-chat", "Hello, world! (x)|y", "Hello|,| world|! (|x|)||y"},
    {"poro-chat", "a.b \xE3\x80\x82" "c", "a|.|b| \xE3\x80\x82|c"},
    {"viking", "abc123 d", "abc|1|2|3| d"},
    {"viking", "x, y", "x|,| y"},
    {"chameleon", "<sentinel:12>IMGIMGABZx", "<|sentinel|:|1|2|>|IMGIMGABZ|x"},
    {"chameleon", "a    b  c\td", "a|    |b|  |c|\t|d"},
    {"chameleon", "x, y!", "x|,| y|!"},
    {"gemma4", "a b\n\n\nc\nd", "a b|\n\n\n|c|\n|d"},
    /* Kimi K2's splitter (a custom one in the reference): Han runs apart from other letters */
    {"kimi-k2", "Hello\xE4\xBD\xA0\xE5\xA5\xBDworld 1234567 I'm", "Hello|\xE4\xBD\xA0\xE5\xA5\xBD|world| |123|456|7| I'm"},
    {"kimi-k2", "x \xE4\xBD\xA0 $ab", "x| |\xE4\xBD\xA0| $|ab"},
    /* AFMoE's digits: a head of (length mod 3) digits, with the text before it, then threes */
    {"afmoe", "ab1234cd 12345", "ab|1|234|cd| |12|345"},
    {"afmoe", "123456 \xE4\xBD\xA0\xE5\xA5\xBD!", "123|456| |\xE4\xBD\xA0\xE5\xA5\xBD|!"},
};

TEST(pretok_each_family) {
    int bad = 0;
    for (size_t i = 0; i < sizeof splits / sizeof *splits; i++) {
        const struct pretok_info *pi = pretok_lookup(splits[i].pre, strlen(splits[i].pre));
        CHECK(pi);
        char got[2048];
        split(pi->kind, splits[i].text, got, sizeof got);
        if (strcmp(got, splits[i].words)) {
            fprintf(stderr, "  %s: \"%s\" -> \"%s\", expected \"%s\"\n", splits[i].pre, splits[i].text, got,
                    splits[i].words);
            bad++;
        }
    }
    CHECK_EQ_INT(bad, 0);
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
    /* digit runs: cut in threes from either end, or not at all, in one pass each */
    for (size_t i = 0; i < n; i++) { cps[i] = '7'; fl[i] = (uint16_t)ucp_flags('7'); }
    CHECK_EQ_INT(pretok_split(PRETOK_SUPERBPE, cps, fl, n, ends, scr), (n + 2) / 3);
    CHECK_EQ_INT(ends[0], n % 3 ? n % 3 : 3);
    CHECK_EQ_INT(pretok_split(PRETOK_TINY_AYA, cps, fl, n, ends, scr), (n + 2) / 3);
    CHECK_EQ_INT(pretok_split(PRETOK_AFMOE, cps, fl, n, ends, scr), (n + 2) / 3);
    cps[n - 1] = 'x'; /* no word boundary after the digits: Tiny Aya's first regex matches nowhere */
    fl[n - 1] = (uint16_t)ucp_flags('x');
    CHECK_EQ_INT(pretok_split(PRETOK_TINY_AYA, cps, fl, n, ends, scr), (n - 1 + 2) / 3 + 1);
    for (size_t i = 0; i < n; i++) { cps[i] = ' '; fl[i] = (uint16_t)ucp_flags(' '); }
    cps[n / 2] = 'x'; /* whitespace that does not end the word, then whitespace that does */
    fl[n / 2] = (uint16_t)ucp_flags('x');
    CHECK_EQ_INT(pretok_split(PRETOK_DEEPSEEK_LLM, cps, fl, n, ends, scr), 3);
    free(cps);
    free(ends);
    free(scr);
    free(fl);
}
