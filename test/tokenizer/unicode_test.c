/* unicode_test.c: code point classes from the generated table, UTF-8 decoding as the reference
 * reads malformed text, strict validation for the streaming decoder. */
#include "test.h"
#include "tokenizer/unicode.h"

TEST(unicode_classes) {
    CHECK(ucp_flags('A') & UCP_LETTER);
    CHECK(ucp_flags(0x00E9) & UCP_LETTER);   /* é */
    CHECK(ucp_flags(0x6211) & UCP_LETTER);   /* 我 */
    CHECK(ucp_flags('7') & UCP_NUMBER);
    CHECK(ucp_flags(0x00BD) & UCP_NUMBER);   /* ½ (No) */
    CHECK(ucp_flags(0x0663) & UCP_NUMBER);   /* Arabic-Indic three */
    CHECK(ucp_flags('!') & UCP_PUNCT);
    CHECK(ucp_flags('$') & UCP_SYMBOL);
    CHECK(ucp_flags(0x1F601) & UCP_SYMBOL);  /* 😁 */
    CHECK(ucp_flags(0x0301) & UCP_MARK);
    CHECK(ucp_flags(' ') & UCP_WHITESPACE);
    CHECK(ucp_flags('\n') & UCP_WHITESPACE);
    CHECK(ucp_flags(0x3000) & UCP_WHITESPACE);
    CHECK(ucp_flags(0x00A0) & UCP_WHITESPACE);
    CHECK(!(ucp_flags(0x1C) & UCP_WHITESPACE)); /* Python's isspace() says yes; White_Space no */
    CHECK(!(ucp_flags(0x200B) & UCP_WHITESPACE)); /* zero-width space is Cf */
    CHECK(ucp_flags(0x0378) & UCP_UNDEFINED);
    CHECK(ucp_flags(0x110000) & UCP_UNDEFINED);
    CHECK(ucp_flags(0x10FFFF) == UCP_UNDEFINED);
    CHECK(ucp_ranges[0].start == 0 && ucp_n_ranges > 1000);
    for (unsigned i = 1; i < ucp_n_ranges; i++) CHECK(ucp_ranges[i].start > ucp_ranges[i - 1].start);
}

TEST(unicode_decode_malformed_as_replacement) {
    size_t adv;
    CHECK_EQ_INT(utf8_decode("\xC3\x84x", 3, &adv), 0xC4);
    CHECK_EQ_INT(adv, 2);
    CHECK_EQ_INT(utf8_decode("\xF0\x9F\xA6\x99", 4, &adv), 0x1F999);
    CHECK_EQ_INT(adv, 4);
    CHECK_EQ_INT(utf8_decode("\x80", 1, &adv), UCP_REPLACEMENT);  /* stray continuation */
    CHECK_EQ_INT(adv, 1);
    CHECK_EQ_INT(utf8_decode("\xE2\x96", 2, &adv), UCP_REPLACEMENT); /* truncated */
    CHECK_EQ_INT(adv, 1);
    CHECK_EQ_INT(utf8_decode("\xE2" "ab", 3, &adv), UCP_REPLACEMENT); /* bad continuation */
    CHECK_EQ_INT(adv, 1);
    CHECK_EQ_INT(utf8_decode("\xFF", 1, &adv), UCP_REPLACEMENT);
    CHECK_EQ_INT(utf8_decode("\xF7\xBF\xBF\xBF", 4, &adv), UCP_REPLACEMENT); /* > U+10FFFF */
}

TEST(unicode_encode_round_trips) {
    const uint32_t cps[] = {0, 0x7F, 0x80, 0x7FF, 0x800, 0xFFFF, 0x10000, 0x10FFFF};
    for (size_t i = 0; i < sizeof cps / sizeof *cps; i++) {
        char buf[4];
        size_t n = utf8_encode(cps[i], buf), adv;
        CHECK_EQ_INT(utf8_decode(buf, n, &adv), cps[i]);
        CHECK_EQ_INT(adv, n);
        CHECK_EQ_INT(utf8_valid_len((unsigned char *)buf, n), (long long)n);
    }
    char buf[4];
    CHECK_EQ_INT(utf8_encode(0x110000, buf), 3); /* U+FFFD */
}

TEST(unicode_strict_validation) {
    const unsigned char *u = (const unsigned char *)"\xE2\x82\xAC";
    CHECK_EQ_INT(utf8_valid_len(u, 3), 3);
    CHECK_EQ_INT(utf8_valid_len(u, 2), 0);  /* incomplete, may complete */
    CHECK_EQ_INT(utf8_valid_len(u, 1), 0);
    CHECK_EQ_INT(utf8_valid_len((const unsigned char *)"\xC0\x80", 2), -1); /* overlong */
    CHECK_EQ_INT(utf8_valid_len((const unsigned char *)"\xE0\x80\x80", 3), -1);
    CHECK_EQ_INT(utf8_valid_len((const unsigned char *)"\xED\xA0\x80", 3), -1); /* surrogate */
    CHECK_EQ_INT(utf8_valid_len((const unsigned char *)"\xF4\x90\x80\x80", 4), -1);
    CHECK_EQ_INT(utf8_valid_len((const unsigned char *)"\xE2" "a", 2), -1);
    CHECK_EQ_INT(utf8_valid_len((const unsigned char *)"\x80", 1), -1);
}
