/* unicode.h: the little Unicode the tokenizers need: UTF-8 decoding/encoding and the class of a
 * code point (letter, number, punctuation, ..., and whether it is White_Space).
 *
 * The class table is generated from Python's unicodedata by scripts/gen-unicode-tables into
 * unicode_tables.c (committed). Classes are the first letter of the general category, which is
 * what the pre-tokenizer regexes use (\p{L}, \p{N}, \p{P}, \s).
 *
 *   size_t adv;
 *   uint32_t cp = utf8_decode(s, len, &adv);   // never fails: bad bytes decode as U+FFFD, adv 1
 *   if (ucp_flags(cp) & UCP_LETTER) ...
 */
#ifndef UVLM_TOKENIZER_UNICODE_H
#define UVLM_TOKENIZER_UNICODE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

enum ucp_flags {
    UCP_UNDEFINED = 1 << 0,  /* Cn: unassigned */
    UCP_LETTER = 1 << 1,     /* L* */
    UCP_NUMBER = 1 << 2,     /* N* */
    UCP_PUNCT = 1 << 3,      /* P* */
    UCP_SYMBOL = 1 << 4,     /* S* */
    UCP_MARK = 1 << 5,       /* M* */
    UCP_SEPARATOR = 1 << 6,  /* Z* */
    UCP_CONTROL = 1 << 7,    /* Cc, Cf, Cs, Co */
    UCP_WHITESPACE = 1 << 8, /* the White_Space property (regex \s) */
};

#define UCP_REPLACEMENT 0xFFFDu

struct ucp_range {
    uint32_t start;
    uint16_t flags;
};

/* Generated tables (unicode_tables.c). */
extern const struct ucp_range ucp_ranges[];
extern const unsigned ucp_n_ranges;
extern const char ucp_unicode_version[];

/* The UCP_* flags of a code point; code points above U+10FFFF are UCP_UNDEFINED. */
unsigned ucp_flags(uint32_t cp);

/* Length of the UTF-8 sequence a lead byte announces (1 for ASCII, continuation and bad bytes). */
static inline size_t utf8_seq_len(unsigned char lead) {
    static const unsigned char len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[lead >> 4];
}

/* Decode the code point at s[0..len) (len >= 1). A lead byte with missing or wrong continuation
 * bytes, a stray continuation byte or a byte 0xF8..0xFF gives U+FFFD and *adv = 1 (the way the
 * reference tokenizer reads malformed text; overlong forms are accepted as it does). */
uint32_t utf8_decode(const char *s, size_t len, size_t *adv);

/* Write cp as UTF-8 into out (4 bytes room); returns the length. cp > U+10FFFF writes U+FFFD. */
size_t utf8_encode(uint32_t cp, char *out);

/* Length of the strictly valid UTF-8 character at s[0..len): 1..4; 0 when s starts with a
 * valid but incomplete prefix of a character (more bytes may complete it); -1 when invalid
 * (overlong, surrogate, > U+10FFFF, bad continuation or stray byte). */
int utf8_valid_len(const unsigned char *s, size_t len);

#endif
