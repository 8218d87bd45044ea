/* pretok.c: the pre-tokenizer regexes as matchers (see pretok.h). A matcher returns the length of
 * the match at pos within the word [pos, end) or 0; it may look at code points before end only. */
#include "tokenizer/pretok.h"
#include "tokenizer/unicode.h"

#include <stdbool.h>
#include <string.h>

struct span {
    const uint32_t *cp;
    const uint16_t *fl;
    size_t end;
};

typedef size_t (*matcher_fn)(const struct span *s, size_t pos);

static uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }
static bool is_rn(uint32_t c) { return c == '\r' || c == '\n'; }
static bool has(const struct span *s, size_t p, unsigned flags) { return p < s->end && (s->fl[p] & flags); }
static bool other(const struct span *s, size_t p) { /* [^\s\p{L}\p{N}] */
    return p < s->end && !(s->fl[p] & (UCP_WHITESPACE | UCP_LETTER | UCP_NUMBER));
}
static size_t run(const struct span *s, size_t p, unsigned flags) {
    while (has(s, p, flags)) p++;
    return p;
}

/* 's|'t|'re|'ve|'m|'ll|'d, case-insensitive or not. */
static size_t match_contraction(const struct span *s, size_t pos, bool fold) {
    if (s->cp[pos] != '\'' || pos + 1 >= s->end) return 0;
    uint32_t a = s->cp[pos + 1];
    if (fold) a = ascii_lower(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= s->end) return 0;
    uint32_t b = s->cp[pos + 2];
    if (fold) b = ascii_lower(b);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* \s+(?!\S)|\s+ : a whitespace run leaves its last space to the word that follows it. */
static size_t match_spaces(const struct span *s, size_t pos) {
    size_t n = run(s, pos, UCP_WHITESPACE) - pos;
    if (n > 1 && pos + n < s->end) return n - 1;
    return n;
}

static size_t match_gpt2(const struct span *s, size_t pos) {
    size_t m = match_contraction(s, pos, false);
    if (m) return m;
    size_t q = pos + (s->cp[pos] == ' ');
    if (has(s, q, UCP_LETTER)) return run(s, q, UCP_LETTER) - pos;
    if (has(s, q, UCP_NUMBER)) return run(s, q, UCP_NUMBER) - pos;
    if (other(s, q)) {
        while (other(s, q)) q++;
        return q - pos;
    }
    return match_spaces(s, pos);
}

static size_t match_llama3_like(const struct span *s, size_t pos, size_t max_digits) {
    size_t m = match_contraction(s, pos, true);
    if (m) return m;
    uint32_t c = s->cp[pos];
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (!is_rn(c) && !(s->fl[pos] & UCP_NUMBER) &&
        ((s->fl[pos] & UCP_LETTER) || has(s, pos + 1, UCP_LETTER)))
        return run(s, pos + 1, UCP_LETTER) - pos;
    /* \p{N}{1,max_digits} */
    if (s->fl[pos] & UCP_NUMBER) {
        size_t p = pos + 1;
        while (p - pos < max_digits && has(s, p, UCP_NUMBER)) p++;
        return p - pos;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t q = pos + (c == ' ');
    if (other(s, q)) {
        while (other(s, q)) q++;
        while (q < s->end && is_rn(s->cp[q])) q++;
        return q - pos;
    }
    /* \s*[\r\n]+ : up to the last \r or \n of the whitespace run */
    size_t last_rn = 0;
    for (size_t p = pos; has(s, p, UCP_WHITESPACE); p++)
        if (is_rn(s->cp[p])) last_rn = p + 1;
    if (last_rn) return last_rn - pos;
    return match_spaces(s, pos);
}

static size_t match_llama3(const struct span *s, size_t pos) { return match_llama3_like(s, pos, 3); }
static size_t match_qwen2(const struct span *s, size_t pos) { return match_llama3_like(s, pos, 1); }

/* [\p{P}\$\+<=>\^~\|]+ */
static bool default_punct(const struct span *s, size_t p) {
    if (p >= s->end) return false;
    uint32_t c = s->cp[p];
    return (s->fl[p] & UCP_PUNCT) || (c < 128 && c && strchr("$+<=>^~|", (int)c));
}
static size_t match_default_punct(const struct span *s, size_t pos) {
    size_t p = pos;
    while (default_punct(s, p)) p++;
    return p - pos;
}
static size_t match_numbers(const struct span *s, size_t pos) { return run(s, pos, UCP_NUMBER) - pos; }
static size_t match_3digits(const struct span *s, size_t pos) {
    for (size_t i = 0; i < 3; i++)
        if (pos + i >= s->end || s->cp[pos + i] < '0' || s->cp[pos + i] > '9') return 0;
    return 3;
}

/* Split every word of in_ends[0..n_in) with one matcher; unmatched stretches stay words. */
static size_t split_pass(matcher_fn match, const uint32_t *cp, const uint16_t *fl,
                         const uint32_t *in_ends, size_t n_in, uint32_t *out_ends) {
    size_t n_out = 0, start = 0;
    for (size_t w = 0; w < n_in; w++) {
        struct span s = {cp, fl, in_ends[w]};
        size_t pos = start, gap = start;
        while (pos < s.end) {
            size_t m = match(&s, pos);
            if (!m) { pos++; continue; }
            if (gap < pos) out_ends[n_out++] = (uint32_t)pos;
            pos += m;
            out_ends[n_out++] = (uint32_t)pos;
            gap = pos;
        }
        if (gap < s.end) out_ends[n_out++] = (uint32_t)s.end;
        start = s.end;
    }
    return n_out;
}

static const struct {
    const char *name;
    enum pretok kind;
} names[] = {
    {"default", PRETOK_DEFAULT}, {"gpt-2", PRETOK_GPT2}, {"gpt2", PRETOK_GPT2}, {"phi-2", PRETOK_GPT2},
    {"llama-bpe", PRETOK_LLAMA3}, {"llama3", PRETOK_LLAMA3}, {"llama-v3", PRETOK_LLAMA3},
    {"falcon3", PRETOK_LLAMA3},
    {"qwen2", PRETOK_QWEN2}, {"deepseek-r1-qwen", PRETOK_QWEN2},
};

enum pretok pretok_from_name(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strlen(names[i].name) == len && !memcmp(names[i].name, name, len)) return names[i].kind;
    return PRETOK_UNKNOWN;
}

const char *pretok_name(enum pretok k) {
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (names[i].kind == k) return names[i].name;
    return "unknown";
}

size_t pretok_split(enum pretok k, const uint32_t *cps, const uint16_t *flags, size_t n,
                    uint32_t *ends, uint32_t *scratch) {
    if (n == 0) return 0;
    static const matcher_fn default_passes[] = {match_default_punct, match_gpt2, match_numbers,
                                                match_3digits};
    matcher_fn one[1];
    const matcher_fn *passes = one;
    size_t n_passes = 1;
    switch (k) {
    case PRETOK_GPT2: one[0] = match_gpt2; break;
    case PRETOK_LLAMA3: one[0] = match_llama3; break;
    case PRETOK_QWEN2: one[0] = match_qwen2; break;
    default: passes = default_passes; n_passes = sizeof default_passes / sizeof *default_passes; break;
    }
    /* Passes alternate between the two buffers so the last one writes ends[]. */
    uint32_t *bufs[2] = {(n_passes % 2) ? scratch : ends, (n_passes % 2) ? ends : scratch};
    bufs[0][0] = (uint32_t)n;
    size_t n_words = 1;
    for (size_t i = 0; i < n_passes; i++)
        n_words = split_pass(passes[i], cps, flags, bufs[i % 2], n_words, bufs[(i + 1) % 2]);
    return n_words;
}
