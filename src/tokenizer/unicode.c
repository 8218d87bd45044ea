/* unicode.c: UTF-8 coding and code point classes (see unicode.h). */
#include "tokenizer/unicode.h"

unsigned ucp_flags(uint32_t cp) {
    if (cp > 0x10FFFF) return UCP_UNDEFINED;
    /* Binary search for the last range starting at or before cp. */
    unsigned lo = 0, hi = ucp_n_ranges;
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (ucp_ranges[mid].start <= cp) lo = mid;
        else hi = mid;
    }
    return ucp_ranges[lo].flags;
}

static bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

uint32_t utf8_decode(const char *s, size_t len, size_t *adv) {
    const unsigned char *u = (const unsigned char *)s;
    size_t n = utf8_seq_len(u[0]);
    *adv = 1;
    if (n == 1) return u[0] < 0x80 ? u[0] : UCP_REPLACEMENT;
    if (u[0] >= 0xF8 || n > len) return UCP_REPLACEMENT;
    for (size_t i = 1; i < n; i++)
        if (!is_cont(u[i])) return UCP_REPLACEMENT;
    uint32_t cp;
    if (n == 2) cp = (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
    else if (n == 3) cp = (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
    else cp = (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 |
              (uint32_t)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
    *adv = n;
    return cp > 0x10FFFF ? UCP_REPLACEMENT : cp;
}

size_t utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp > 0x10FFFF) cp = UCP_REPLACEMENT;
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

int utf8_valid_len(const unsigned char *s, size_t len) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    int n;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;      /* overlong */
        if (c == 0xED) hi = 0x9F;      /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;      /* overlong */
        if (c == 0xF4) hi = 0x8F;      /* > U+10FFFF */
    } else return -1;
    for (int i = 1; i < n; i++) {
        if ((size_t)i >= len) return 0;
        unsigned char b = s[i];
        if (i == 1 ? (b < lo || b > hi) : !is_cont(b)) return -1;
    }
    return n;
}
