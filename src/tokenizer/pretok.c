/* pretok.c: the pre-tokenizer regexes as matchers (see pretok.h). A matcher returns the length of
 * the match at pos within the word [pos, end) or 0; it looks at code points before end only. */
#include "tokenizer/pretok.h"
#include "tokenizer/unicode.h"

#include <string.h>

struct span {
    const uint32_t *cp;
    const uint16_t *fl;
    size_t end;
    size_t next_try;       /* set by a matcher that failed at pos: no match starts before it */
    size_t run_lo, run_hi; /* a digit run a matcher measured: [run_lo, run_hi) ends at run_hi */
};

typedef size_t (*match_fn)(struct span *s, size_t pos, const void *arg);

struct pass {
    match_fn match;
    const void *arg;
};

/* ---- classes ---- */

static uint32_t at(const struct span *s, size_t p) { return p < s->end ? s->cp[p] : UINT32_MAX; }
static bool has(const struct span *s, size_t p, unsigned flags) { return p < s->end && (s->fl[p] & flags); }
static bool is_rn(uint32_t c) { return c == '\r' || c == '\n'; }
static bool is_ws(const struct span *s, size_t p) { return has(s, p, UCP_WHITESPACE); }
static bool is_L(const struct span *s, size_t p) { return has(s, p, UCP_LETTER); }
static bool is_N(const struct span *s, size_t p) { return has(s, p, UCP_NUMBER); }
static bool is_LM(const struct span *s, size_t p) { return has(s, p, UCP_LETTER | UCP_MARK); }
static bool is_P(const struct span *s, size_t p) { return has(s, p, UCP_PUNCT); }
/* \p{S} as the reference sees it: its table of ASCII symbols has no '~' */
static bool is_S(const struct span *s, size_t p) { return has(s, p, UCP_SYMBOL) && s->cp[p] != '~'; }
static bool is_PS(const struct span *s, size_t p) { return is_P(s, p) || is_S(s, p); }
static bool is_digit(const struct span *s, size_t p) { return at(s, p) >= '0' && at(s, p) <= '9'; }
static bool is_alpha(const struct span *s, size_t p) {
    uint32_t c = at(s, p) | 0x20;
    return c >= 'a' && c <= 'z';
}
/* [^\s\p{L}\p{N}] ([^\s\p{L}\p{M}\p{N}] with no_mark) */
static bool is_other(const struct span *s, size_t p, bool no_mark) {
    unsigned excluded = UCP_WHITESPACE | UCP_LETTER | UCP_NUMBER | (no_mark ? UCP_MARK : 0);
    return p < s->end && !(s->fl[p] & excluded);
}
/* [^\r\n\p{L}\p{N}]: the optional character before a run of letters */
static bool is_lead(const struct span *s, size_t p) {
    return p < s->end && !is_rn(s->cp[p]) && !(s->fl[p] & (UCP_LETTER | UCP_NUMBER));
}

typedef bool (*class_fn)(const struct span *s, size_t p);

static size_t run(const struct span *s, size_t p, class_fn in) {
    while (in(s, p)) p++;
    return p;
}

/* End of the run of `in` containing p, measured once per run (matchers that return to the same
 * run many times would otherwise rescan it). */
static size_t run_end(struct span *s, size_t p, class_fn in) {
    if (p >= s->run_lo && p < s->run_hi) return s->run_hi;
    s->run_lo = p;
    s->run_hi = run(s, p, in);
    return s->run_hi;
}

/* Sorted, disjoint inclusive code point ranges: a character class written out in a regex. Such
 * a class never matches whitespace: the reference turns non-ASCII whitespace into \v first. */
struct cp_range {
    uint32_t lo, hi;
};
static bool in_ranges(const struct span *s, size_t p, const struct cp_range *r, size_t n) {
    if (p >= s->end || is_ws(s, p)) return false;
    uint32_t c = s->cp[p];
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < r[mid].lo) hi = mid;
        else if (c > r[mid].hi) lo = mid + 1;
        else return true;
    }
    return false;
}
#define RANGES(name, ...)                                                                      \
    static const struct cp_range name##_r[] = {__VA_ARGS__};                                   \
    static bool name(const struct span *s, size_t p) {                                         \
        return in_ranges(s, p, name##_r, sizeof name##_r / sizeof *name##_r);                  \
    }

/* DeepSeek LLM's \s?[A-Za-zµÀ-ÖØ-öø-ƺ...𞤀-𞥃]+: the cased letters of an older Unicode. */
RANGES(ds_letter, {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA},
       {0x1BC, 0x1BF}, {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377}, {0x37B, 0x37D},
       {0x37F, 0x37F}, {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1}, {0x3A3, 0x3F5},
       {0x3F7, 0x481}, {0x48A, 0x52F}, {0x531, 0x556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5},
       {0x13F8, 0x13FD}, {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77},
       {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D},
       {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D},
       {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC},
       {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC},
       {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D},
       {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134},
       {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2184},
       {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3}, {0xA640, 0xA66D},
       {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF},
       {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F},
       {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2},
       {0x118A0, 0x118DF}, {0x1E900, 0x1E943})
/* DeepSeek LLM's \s?[!-/:-~！-／：-～‘-‟　-。]+ */
RANGES(ds_punct, {0x21, 0x2F}, {0x3A, 0x7E}, {0x2018, 0x201F}, {0x3000, 0x3002}, {0xFF01, 0xFF0F},
       {0xFF1A, 0xFF5E})
/* [一-龥ࠀ-一가-퟿]+ (DeepSeek LLM and Coder) */
RANGES(ds_cjk, {0x800, 0x9FA5}, {0xAC00, 0xD7FF})
/* [一-龥぀-ゟ゠-ヿ]+ (DeepSeek V3, Youtu) */
RANGES(cjk_kana, {0x3040, 0x309F}, {0x30A0, 0x30FF}, {0x4E00, 0x9FA5})
/* AFMoE's [一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+ */
RANGES(afmoe_script, {0xE40, 0xE7F}, {0xE80, 0xEFF}, {0x1000, 0x109F}, {0x1100, 0x11FF}, {0x1780, 0x17FF},
       {0x2F00, 0x2FDF}, {0x3040, 0x309F}, {0x30A0, 0x30FF}, {0x3400, 0x4DBF}, {0x4E00, 0x9FFF},
       {0xA9E0, 0xA9FF}, {0xAA60, 0xAA7F}, {0xAC00, 0xD7AF}, {0xF900, 0xFAFF}, {0xFF65, 0xFF9F})
/* Youtu's [가-힣ㄱ-ㆎ]+ | [！…“”‘’—：；，、-〿︰-﹏]+ | [ㄅ-ㄯ]+ */
RANGES(youtu_hangul, {0x3131, 0x318E}, {0xAC00, 0xD7A3})
RANGES(youtu_punct, {0x2014, 0x2014}, {0x2018, 0x2019}, {0x201C, 0x201D}, {0x2026, 0x2026},
       {0x3001, 0x303F}, {0xFE30, 0xFE4F}, {0xFF01, 0xFF01}, {0xFF0C, 0xFF0C}, {0xFF1A, 0xFF1B})
RANGES(youtu_bopomofo, {0x3105, 0x312F})
/* \p{Han} as Kimi K2's splitter has it */
RANGES(han, {0x3400, 0x4DBF}, {0x4E00, 0x9FFF}, {0xF900, 0xFAFF}, {0x20000, 0x2A6DF}, {0x2A700, 0x2EBEF},
       {0x2F800, 0x2FA1F})

/* ---- pieces shared by the regexes ---- */

/* 's|'t|'re|'ve|'m|'ll|'d, ASCII case-folded or not. */
static size_t match_contraction(const struct span *s, size_t pos, bool fold) {
    if (at(s, pos) != '\'' || pos + 1 >= s->end) return 0;
    uint32_t a = s->cp[pos + 1];
    if (fold && a >= 'A' && a <= 'Z') a += 32;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= s->end) return 0;
    uint32_t b = s->cp[pos + 2];
    if (fold && b >= 'A' && b <= 'Z') b += 32;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* \s+(?!\S)|\s+ : a whitespace run leaves its last space to the word that follows it. */
static size_t match_spaces(const struct span *s, size_t pos) {
    size_t n = run(s, pos, is_ws) - pos;
    if (n > 1 && pos + n < s->end) return n - 1;
    return n;
}

/* \s*[\r\n]+ : up to the last \r or \n of the whitespace run; 0 when it has none. */
static size_t newlines_end(const struct span *s, size_t pos) {
    size_t last = 0;
    for (size_t p = pos; is_ws(s, p); p++)
        if (is_rn(s->cp[p])) last = p + 1;
    return last;
}

/* X+ or, with the optional character before it, P?X+ where P is `lead`. */
static size_t lead_run(const struct span *s, size_t p, class_fn lead, class_fn x) {
    if (lead(s, p) && x(s, p + 1)) return run(s, p + 1, x);
    if (x(s, p)) return run(s, p, x);
    return 0;
}

/* ---- GPT-2 ---- */

static size_t match_gpt2(struct span *s, size_t pos, const void *arg) {
    size_t m = match_contraction(s, pos, false);
    if (m) return m;
    size_t q = pos + (s->cp[pos] == ' ');
    if (is_L(s, q)) return run(s, q, is_L) - pos;
    if (is_N(s, q)) return run(s, q, is_N) - pos;
    if (is_other(s, q, false)) {
        while (is_other(s, q, false)) q++;
        return q - pos;
    }
    return match_spaces(s, pos);
}

/* ---- the Llama 3 family: one regex of word classes, in variants ---- */

enum letters {
    LET_L,        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    LET_LM,       /* [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+ */
    LET_NOT_HAN,  /* [^\r\n\p{L}\p{N}]?[\p{L}--\p{Han}]+ */
    LET_CASED,    /* [^\r\n\p{L}\p{N}]?U*W+|[^\r\n\p{L}\p{N}]?U+W*, U letters but a-z, W letters but A-Z */
    LET_CASED_LM, /* the same with marks among U and W */
    LET_SPACED,   /* [^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+ */
};
enum tail { TAIL_NONE, TAIL_RN, TAIL_RN_SLASH, TAIL_RN_SLASH_ONE }; /* after symbols: -, [\r\n]*, [\r\n/]*, [\r\n/]? */

struct words_re {
    bool han_runs;            /* [\p{Han}]+ first */
    bool contractions;        /* (?i:'s|'t|'re|'ve|'m|'ll|'d) first */
    uint8_t letters;          /* enum letters */
    bool letters_contraction; /* (?i:'s|...)? after the letters */
    uint8_t max_digits;       /* \p{N}{1,max_digits}; 0: \p{N}+ */
    bool symbols_no_mark;     /*  ?[^\s\p{L}\p{M}\p{N}]+ rather than  ?[^\s\p{L}\p{N}]+ */
    uint8_t tail;             /* enum tail */
    bool space_cascade;       /* \s{512}(?!\S)|...|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1} for \s+(?!\S)|\s+ */
};

static bool is_upper(const struct span *s, size_t p, bool lm) {
    return (lm ? is_LM(s, p) : is_L(s, p)) && !(s->cp[p] >= 'a' && s->cp[p] <= 'z');
}
static bool is_lower(const struct span *s, size_t p, bool lm) {
    return (lm ? is_LM(s, p) : is_L(s, p)) && !(s->cp[p] >= 'A' && s->cp[p] <= 'Z');
}
/* U*W+ from q, backtracking as the regex does: the longest U* after which W+ matches. */
static size_t upper_lower(const struct span *s, size_t q, bool lm) {
    size_t u = q;
    while (is_upper(s, u, lm)) u++;
    for (size_t k = u + 1; k-- > q;) {
        if (!is_lower(s, k, lm)) continue;
        while (is_lower(s, k, lm)) k++;
        return k;
    }
    return 0;
}
/* U+W* from q */
static size_t upper_then_lower(const struct span *s, size_t q, bool lm) {
    if (!is_upper(s, q, lm)) return 0;
    while (is_upper(s, q, lm)) q++;
    while (is_lower(s, q, lm)) q++;
    return q;
}
static bool is_L_not_han(const struct span *s, size_t p) { return is_L(s, p) && !han(s, p); }
/* \p{L}\p{M}*(?: \p{L}\p{M}*)* repeated, from the letter at q */
static size_t spaced_letters(const struct span *s, size_t q) {
    for (;;) {
        if (is_LM(s, q)) q++;
        else if (at(s, q) == ' ' && is_L(s, q + 1)) q += 2;
        else return q;
    }
}

/* End of the letters alternative at p, or 0. */
static size_t letters_end(const struct span *s, size_t p, enum letters kind) {
    size_t e;
    switch (kind) {
    case LET_L: return lead_run(s, p, is_lead, is_L);
    case LET_LM: return lead_run(s, p, is_lead, is_LM);
    case LET_NOT_HAN: return lead_run(s, p, is_lead, is_L_not_han);
    case LET_CASED:
    case LET_CASED_LM: {
        bool lm = kind == LET_CASED_LM, lead = is_lead(s, p);
        if (lead && (e = upper_lower(s, p + 1, lm))) return e;
        if ((e = upper_lower(s, p, lm))) return e;
        if (lead && (e = upper_then_lower(s, p + 1, lm))) return e;
        return upper_then_lower(s, p, lm);
    }
    case LET_SPACED:
        if (is_lead(s, p) && is_L(s, p + 1)) return spaced_letters(s, p + 1);
        return is_L(s, p) ? spaced_letters(s, p) : 0;
    }
    return 0;
}

/* \s{k}(?!\S) for k = 512, 256, ..., 4, then \s{1,2}(?!\S), then \s{1}: the lookahead holds when
 * the run goes on after the k spaces, or the word ends there. */
static size_t match_space_cascade(const struct span *s, size_t pos) {
    size_t n = run(s, pos, is_ws) - pos;
    bool ends_word = pos + n == s->end;
    for (size_t k = 512; k >= 4; k /= 2)
        if (n > k || (n == k && ends_word)) return k;
    return n > 2 || (n == 2 && ends_word) ? 2 : 1;
}

static size_t match_words(struct span *s, size_t pos, const void *arg) {
    const struct words_re *re = arg;
    size_t m, e;
    if (re->han_runs && han(s, pos)) return run(s, pos, han) - pos;
    if (re->contractions && (m = match_contraction(s, pos, true))) return m;
    if ((e = letters_end(s, pos, (enum letters)re->letters))) {
        if (re->letters_contraction) e += match_contraction(s, e, true);
        return e - pos;
    }
    if (is_N(s, pos)) {
        e = pos + 1;
        while (is_N(s, e) && (!re->max_digits || e - pos < re->max_digits)) e++;
        return e - pos;
    }
    size_t q = pos + (s->cp[pos] == ' ');
    if (is_other(s, q, re->symbols_no_mark)) {
        while (is_other(s, q, re->symbols_no_mark)) q++;
        if (re->tail == TAIL_RN)
            while (q < s->end && is_rn(s->cp[q])) q++;
        if (re->tail == TAIL_RN_SLASH)
            while (q < s->end && (is_rn(s->cp[q]) || s->cp[q] == '/')) q++;
        if (re->tail == TAIL_RN_SLASH_ONE && q < s->end && (is_rn(s->cp[q]) || s->cp[q] == '/')) q++;
        return q - pos;
    }
    if ((e = newlines_end(s, pos))) return e - pos;
    return re->space_cascade ? match_space_cascade(s, pos) : match_spaces(s, pos);
}

static const struct words_re re_llama3 = {.contractions = true, .letters = LET_L, .max_digits = 3, .tail = TAIL_RN};
static const struct words_re re_qwen2 = {.contractions = true, .letters = LET_L, .max_digits = 1, .tail = TAIL_RN};
static const struct words_re re_qwen35 = {.contractions = true, .letters = LET_LM, .max_digits = 1,
                                          .symbols_no_mark = true, .tail = TAIL_RN};
static const struct words_re re_seed_coder = {.contractions = true, .letters = LET_L, .max_digits = 1};
static const struct words_re re_ufakzeka = {.letters = LET_L, .max_digits = 1, .tail = TAIL_RN};
static const struct words_re re_minicpm5 = {.contractions = true, .letters = LET_L, .tail = TAIL_RN};
static const struct words_re re_jais2 = {.contractions = true, .letters = LET_L, .max_digits = 3, .tail = TAIL_RN,
                                         .space_cascade = true};
static const struct words_re re_gpt4o = {.letters = LET_CASED, .letters_contraction = true, .max_digits = 3,
                                         .tail = TAIL_RN_SLASH};
static const struct words_re re_granite_multi = {.letters = LET_CASED_LM, .letters_contraction = true,
                                                 .max_digits = 3, .tail = TAIL_RN_SLASH};
static const struct words_re re_tekken = {.letters = LET_CASED, .max_digits = 1, .tail = TAIL_RN_SLASH};
/* Tiny Aya and Youtu write GPT-4o's regex with \p{Lu}...\p{Ll}: to the reference, all letters */
static const struct words_re re_tiny_aya = {.letters = LET_LM, .letters_contraction = true, .max_digits = 3,
                                            .tail = TAIL_RN_SLASH};
static const struct words_re re_youtu = {.letters = LET_LM, .letters_contraction = true, .max_digits = 1,
                                         .tail = TAIL_RN_SLASH};
static const struct words_re re_kimi_k2 = {.han_runs = true, .letters = LET_NOT_HAN, .letters_contraction = true,
                                           .max_digits = 3, .tail = TAIL_RN};
static const struct words_re re_exaone_moe = {.contractions = true, .letters = LET_SPACED, .max_digits = 1,
                                              .tail = TAIL_RN_SLASH_ONE};

/* ---- the DeepSeek V3 family ---- */

/* [!-/:-@\[-`{-~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|
 * \s+(?!\S)|\s+ ; Spark 2.5's has  ?[\p{P}\p{S}]+|[\r\n] for the two newline alternatives. */
struct ds3_re {
    bool single_newline;
};
static bool is_ascii_symbol(uint32_t c) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
}
static bool is_ds3_lead(const struct span *s, size_t p) {
    return p < s->end && !is_rn(s->cp[p]) && !is_L(s, p) && !is_PS(s, p);
}
static size_t match_ds3(struct span *s, size_t pos, const void *arg) {
    const struct ds3_re *re = arg;
    uint32_t c = s->cp[pos];
    size_t e;
    if (is_ascii_symbol(c) && is_alpha(s, pos + 1)) return run(s, pos + 1, is_alpha) - pos;
    if ((e = lead_run(s, pos, is_ds3_lead, is_LM))) return e - pos;
    size_t q = pos + (c == ' ');
    if (is_PS(s, q)) {
        q = run(s, q, is_PS);
        if (!re->single_newline)
            while (q < s->end && is_rn(s->cp[q])) q++;
        return q - pos;
    }
    if (re->single_newline) {
        if (is_rn(c)) return 1;
    } else if ((e = newlines_end(s, pos))) {
        return e - pos;
    }
    return match_spaces(s, pos);
}
static const struct ds3_re re_ds3 = {false}, re_spark = {true};

/* ---- single-class passes ---- */

static size_t match_run(struct span *s, size_t pos, const void *arg) {
    class_fn in = (class_fn)arg;
    return run(s, pos, in) - pos;
}
static size_t match_one(struct span *s, size_t pos, const void *arg) {
    class_fn in = (class_fn)arg;
    return in(s, pos) ? 1 : 0;
}
/* \p{N}{1,3} */
static size_t match_n3(struct span *s, size_t pos, const void *arg) {
    size_t e = pos;
    while (is_N(s, e) && e - pos < 3) e++;
    return e - pos;
}
/* \s?X+ */
static size_t match_space_run(struct span *s, size_t pos, const void *arg) {
    size_t e = lead_run(s, pos, is_ws, (class_fn)arg);
    return e ? e - pos : 0;
}
/* \s+$ : whitespace that ends the word */
static size_t match_trailing_spaces(struct span *s, size_t pos, const void *arg) {
    size_t e = run(s, pos, is_ws);
    if (e == s->end) return e - pos;
    s->next_try = e; /* every start inside this run reaches the same non-space */
    return 0;
}
static bool is_rn_at(const struct span *s, size_t p) { return is_rn(at(s, p)); }
static bool is_not_lf(const struct span *s, size_t p) { return p < s->end && s->cp[p] != '\n'; }
static bool is_lf(const struct span *s, size_t p) { return at(s, p) == '\n'; }
/* [^\n]+|[\n]+ */
static size_t match_lines(struct span *s, size_t pos, const void *arg) {
    return run(s, pos, s->cp[pos] == '\n' ? is_lf : is_not_lf) - pos;
}

/* [\p{P}\$\+<=>\^~\|]+ (default) and with '`' (Falcon) */
static bool is_default_punct(const struct span *s, size_t p) {
    return is_P(s, p) || (at(s, p) < 128 && s->cp[p] && strchr("$+<=>^~|", (int)s->cp[p]));
}
static bool is_falcon_punct(const struct span *s, size_t p) { return is_default_punct(s, p) || at(s, p) == '`'; }
/* [0-9][0-9][0-9] */
static size_t match_3digits(struct span *s, size_t pos, const void *arg) {
    return is_digit(s, pos) && is_digit(s, pos + 1) && is_digit(s, pos + 2) ? 3 : 0;
}

/* Poro:  ?[^(\s|.,!?…。，、।۔،)]+ (the parentheses and the bar are in the class) */
static bool is_poro(const struct span *s, size_t p) {
    if (p >= s->end || is_ws(s, p)) return false;
    static const uint32_t stop[] = {'(', ')', '|', '.', ',', '!', '?', 0x2026, 0x3002, 0xFF0C, 0x3001, 0x964,
                                    0x6D4, 0x60C};
    for (size_t i = 0; i < sizeof stop / sizeof *stop; i++)
        if (s->cp[p] == stop[i]) return false;
    return true;
}
static bool is_space_char(const struct span *s, size_t p) { return at(s, p) == ' '; }
static size_t match_poro(struct span *s, size_t pos, const void *arg) {
    size_t e = lead_run(s, pos, is_space_char, is_poro);
    return e ? e - pos : 0;
}

/* ---- Chameleon ---- */

static bool has_text(const struct span *s, size_t p, const char *t) {
    for (; *t; t++, p++)
        if (at(s, p) != (unsigned char)*t) return false;
    return true;
}
/* <sentinel:[0-9]+> */
static size_t match_sentinel(struct span *s, size_t pos, const void *arg) {
    if (!has_text(s, pos, "<sentinel:") || !is_digit(s, pos + 10)) return 0;
    size_t e = run(s, pos + 10, is_digit);
    return at(s, e) == '>' ? e + 1 - pos : 0;
}
/* (IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z */
static size_t match_image(struct span *s, size_t pos, const void *arg) {
    if (!has_text(s, pos, "IMGIMG")) return 0;
    size_t e = pos + 6;
    while (e < pos + 10 && at(s, e) >= 'A' && at(s, e) <= 'I') e++;
    return e > pos + 6 && at(s, e) == 'Z' ? e + 1 - pos : 0;
}
/* ([\t\n]|    |  ) */
static size_t match_tab_spaces(struct span *s, size_t pos, const void *arg) {
    if (s->cp[pos] == '\t' || s->cp[pos] == '\n') return 1;
    if (has_text(s, pos, "    ")) return 4;
    return has_text(s, pos, "  ") ? 2 : 0;
}
/* [\p{P}!-/:-@\[-`{-~] */
static bool is_chameleon_punct(const struct span *s, size_t p) { return is_P(s, p) || is_ascii_symbol(at(s, p)); }

/* ---- digit groupings ---- */

/* (?=(\d{3})+(?!\d)): cuts before every ASCII digit whose run of digits to its right has a length
 * divisible by 3; the match at pos reaches the next cut (or the end). */
static size_t match_thousands(struct span *s, size_t pos, const void *arg) {
    size_t p = pos;
    while (p < s->end) {
        if (!is_digit(s, p)) {
            p++;
            continue;
        }
        size_t b = run_end(s, p, is_digit);
        /* the first cut after pos in [p, b): b - 3j, the smallest one above pos (and p) */
        size_t lo = p > pos ? p : pos + 1;
        if (lo + 3 <= b) return b - (b - lo) / 3 * 3 - pos;
        p = b;
    }
    return s->end - pos;
}

/* \d{1,3}(?=(?:\d{3})*\b): digits in threes counted from the end of their run, which must end at a
 * word boundary (\w is ASCII here); a run that does not matches nowhere. */
static bool is_word_char(const struct span *s, size_t p) { return is_alpha(s, p) || is_digit(s, p) || at(s, p) == '_'; }
static size_t match_digit_groups(struct span *s, size_t pos, const void *arg) {
    if (!is_digit(s, pos)) return 0;
    size_t b = run_end(s, pos, is_digit);
    if (is_word_char(s, b)) {
        s->next_try = b;
        return 0;
    }
    return (b - pos) % 3 ? (b - pos) % 3 : 3;
}

/* AFMoE's digits: each \p{N} run is cut into a head of (length mod 3) digits, when not 0, then
 * threes; the text before a run stays with its first group (the reference's splitter emits it so). */
static size_t match_afmoe_digits(struct span *s, size_t pos, const void *arg) {
    size_t d = pos;
    while (d < s->end && !is_N(s, d)) d++;
    if (d == s->end) return d - pos;
    size_t r = (run_end(s, d, is_N) - d) % 3;
    return d + (r ? r : 3) - pos;
}

/* ---- the pre-tokenizers ---- */

#define ONE(fn, arg) {fn, (const void *)(arg)}
static const struct pass p_gpt2[] = {ONE(match_gpt2, NULL)};
static const struct pass p_default[] = {ONE(match_run, is_default_punct), ONE(match_gpt2, NULL),
                                        ONE(match_run, is_N), ONE(match_3digits, NULL)};
static const struct pass p_llama3[] = {ONE(match_words, &re_llama3)};
static const struct pass p_qwen2[] = {ONE(match_words, &re_qwen2)};
static const struct pass p_qwen35[] = {ONE(match_words, &re_qwen35)};
static const struct pass p_seed_coder[] = {ONE(match_words, &re_seed_coder)};
static const struct pass p_ufakzeka[] = {ONE(match_words, &re_ufakzeka)};
static const struct pass p_minicpm5[] = {ONE(match_n3, NULL), ONE(match_words, &re_minicpm5)};
static const struct pass p_jais2[] = {ONE(match_words, &re_jais2)};
static const struct pass p_laguna[] = {ONE(match_lines, NULL), ONE(match_words, &re_qwen2)};
static const struct pass p_starcoder[] = {ONE(match_one, is_N), ONE(match_gpt2, NULL)};
static const struct pass p_falcon[] = {ONE(match_run, is_falcon_punct), ONE(match_gpt2, NULL),
                                       ONE(match_3digits, NULL)};
static const struct pass p_deepseek_llm[] = {ONE(match_one, is_rn_at), ONE(match_space_run, ds_letter),
                                             ONE(match_space_run, ds_punct), ONE(match_trailing_spaces, NULL),
                                             ONE(match_run, ds_cjk), ONE(match_run, is_N)};
static const struct pass p_deepseek_coder[] = {ONE(match_one, is_rn_at), ONE(match_space_run, is_L),
                                               ONE(match_space_run, is_P), ONE(match_run, ds_cjk),
                                               ONE(match_one, is_N)};
static const struct pass p_deepseek3[] = {ONE(match_n3, NULL), ONE(match_run, cjk_kana), ONE(match_ds3, &re_ds3)};
static const struct pass p_spark2_5[] = {ONE(match_n3, NULL), ONE(match_run, cjk_kana), ONE(match_ds3, &re_spark),
                                         ONE(match_one, is_N)};
static const struct pass p_afmoe[] = {ONE(match_afmoe_digits, NULL), ONE(match_run, afmoe_script),
                                      ONE(match_ds3, &re_ds3)};
static bool is_youtu_script(const struct span *s, size_t p);
static size_t match_youtu_script(struct span *s, size_t pos, const void *arg);
static const struct pass p_youtu[] = {ONE(match_youtu_script, NULL), ONE(match_words, &re_youtu)};
static const struct pass p_gpt4o[] = {ONE(match_words, &re_gpt4o)};
static const struct pass p_granite_multi[] = {ONE(match_words, &re_granite_multi)};
static const struct pass p_tekken[] = {ONE(match_words, &re_tekken)};
static const struct pass p_tiny_aya[] = {ONE(match_digit_groups, NULL), ONE(match_words, &re_tiny_aya)};
static const struct pass p_kimi_k2[] = {ONE(match_words, &re_kimi_k2)};
static const struct pass p_superbpe[] = {ONE(match_run, is_N), ONE(match_thousands, NULL)};
static const struct pass p_exaone_moe[] = {ONE(match_words, &re_exaone_moe)};
static const struct pass p_poro[] = {ONE(match_poro, NULL)};
static const struct pass p_viking[] = {ONE(match_poro, NULL), ONE(match_one, is_N)};
static const struct pass p_chameleon[] = {ONE(match_sentinel, NULL), ONE(match_image, NULL),
                                          ONE(match_tab_spaces, NULL), ONE(match_one, is_N),
                                          ONE(match_one, is_chameleon_punct), ONE(match_gpt2, NULL)};
static const struct pass p_lines[] = {ONE(match_lines, NULL)};

/* [가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+ (disjoint classes) */
static bool is_youtu_script(const struct span *s, size_t p) {
    return youtu_hangul(s, p) || youtu_punct(s, p) || youtu_bopomofo(s, p) || cjk_kana(s, p);
}
static size_t match_youtu_script(struct span *s, size_t pos, const void *arg) {
    if (!is_youtu_script(s, pos)) return 0;
    class_fn in = youtu_hangul(s, pos) ? youtu_hangul : youtu_punct(s, pos) ? youtu_punct
                  : youtu_bopomofo(s, pos) ? youtu_bopomofo : cjk_kana;
    return run(s, pos, in) - pos;
}

#define PASSES(p) {p, sizeof p / sizeof *p}
static const struct {
    const struct pass *v;
    size_t n;
} passes[PRETOK_COUNT] = {
    [PRETOK_DEFAULT] = PASSES(p_default),
    [PRETOK_GPT2] = PASSES(p_gpt2),
    [PRETOK_LLAMA3] = PASSES(p_llama3),
    [PRETOK_QWEN2] = PASSES(p_qwen2),
    [PRETOK_QWEN35] = PASSES(p_qwen35),
    [PRETOK_SEED_CODER] = PASSES(p_seed_coder),
    [PRETOK_UFAKZEKA] = PASSES(p_ufakzeka),
    [PRETOK_MINICPM5] = PASSES(p_minicpm5),
    [PRETOK_JAIS2] = PASSES(p_jais2),
    [PRETOK_LAGUNA] = PASSES(p_laguna),
    [PRETOK_STARCODER] = PASSES(p_starcoder),
    [PRETOK_FALCON] = PASSES(p_falcon),
    [PRETOK_DEEPSEEK_LLM] = PASSES(p_deepseek_llm),
    [PRETOK_DEEPSEEK_CODER] = PASSES(p_deepseek_coder),
    [PRETOK_DEEPSEEK3] = PASSES(p_deepseek3),
    [PRETOK_SPARK2_5] = PASSES(p_spark2_5),
    [PRETOK_AFMOE] = PASSES(p_afmoe),
    [PRETOK_YOUTU] = PASSES(p_youtu),
    [PRETOK_GPT4O] = PASSES(p_gpt4o),
    [PRETOK_GRANITE_MULTI] = PASSES(p_granite_multi),
    [PRETOK_TEKKEN] = PASSES(p_tekken),
    [PRETOK_TINY_AYA] = PASSES(p_tiny_aya),
    [PRETOK_KIMI_K2] = PASSES(p_kimi_k2),
    [PRETOK_SUPERBPE] = PASSES(p_superbpe),
    [PRETOK_EXAONE_MOE] = PASSES(p_exaone_moe),
    [PRETOK_PORO] = PASSES(p_poro),
    [PRETOK_VIKING] = PASSES(p_viking),
    [PRETOK_CHAMELEON] = PASSES(p_chameleon),
    [PRETOK_LINES] = PASSES(p_lines),
};

/* tokenizer.ggml.pre names, as the reference maps them (the first of a kind names it). */
#define PT(n, k, ...) {.name = n, .kind = k, __VA_ARGS__}
#define IM .ignore_merges = true
#define BOS .add_bos = true
static const struct pretok_info names[] = {
    PT("default", PRETOK_DEFAULT),
    PT("gpt-2", PRETOK_GPT2), PT("gpt2", PRETOK_GPT2), PT("phi-2", PRETOK_GPT2), PT("mpt", PRETOK_GPT2),
    PT("olmo", PRETOK_GPT2), PT("jais", PRETOK_GPT2), PT("trillion", PRETOK_GPT2), PT("granite-docling", PRETOK_GPT2),
    PT("exaone4", PRETOK_GPT2), PT("gigachat", PRETOK_GPT2), PT("a.x-4.0", PRETOK_GPT2), PT("mellum", PRETOK_GPT2),
    PT("jina-es", PRETOK_GPT2), PT("jina-de", PRETOK_GPT2), PT("jina-v2-es", PRETOK_GPT2), PT("jina-v2-de", PRETOK_GPT2),
    PT("modern-bert", PRETOK_GPT2),
    PT("llama-bpe", PRETOK_LLAMA3, IM, BOS), PT("llama3", PRETOK_LLAMA3, IM, BOS), PT("llama-v3", PRETOK_LLAMA3, IM, BOS),
    PT("falcon3", PRETOK_LLAMA3, IM, BOS), PT("falcon-h1", PRETOK_LLAMA3, IM, BOS), PT("pixtral", PRETOK_LLAMA3, IM, BOS),
    PT("midm-2.0", PRETOK_LLAMA3, IM, BOS), PT("lfm2", PRETOK_LLAMA3, IM, BOS), PT("jina-v5-nano", PRETOK_LLAMA3, IM, BOS),
    PT("dbrx", PRETOK_LLAMA3), PT("smaug-bpe", PRETOK_LLAMA3),
    PT("glm4", PRETOK_LLAMA3, .no_bos_id = true), PT("chatglm-bpe", PRETOK_LLAMA3, .no_bos_id = true),
    PT("qwen2", PRETOK_QWEN2), PT("deepseek-r1-qwen", PRETOK_QWEN2), PT("kormo", PRETOK_QWEN2), PT("f2llmv2", PRETOK_QWEN2),
    PT("megrez", PRETOK_QWEN2), PT("stablelm2", PRETOK_QWEN2), PT("hunyuan", PRETOK_QWEN2), PT("solar-open", PRETOK_QWEN2),
    PT("grok-2", PRETOK_QWEN2),
    /* '(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])...\s*[\r\n]: the same words as Qwen2's regex */
    PT("bailingmoe", PRETOK_QWEN2), PT("bailingmoe2", PRETOK_QWEN2), PT("llada-moe", PRETOK_QWEN2),
    PT("qwen35", PRETOK_QWEN35),
    PT("seed-coder", PRETOK_SEED_CODER),
    PT("ufakzeka", PRETOK_UFAKZEKA),
    PT("minicpm5", PRETOK_MINICPM5, IM),
    PT("jais-2", PRETOK_JAIS2),
    PT("laguna", PRETOK_LAGUNA),
    PT("starcoder", PRETOK_STARCODER), PT("refact", PRETOK_STARCODER), PT("command-r", PRETOK_STARCODER),
    PT("smollm", PRETOK_STARCODER), PT("codeshell", PRETOK_STARCODER), PT("exaone", PRETOK_STARCODER),
    PT("minerva-7b", PRETOK_STARCODER), PT("mellum2", PRETOK_STARCODER),
    PT("falcon", PRETOK_FALCON),
    PT("deepseek-llm", PRETOK_DEEPSEEK_LLM),
    PT("deepseek-coder", PRETOK_DEEPSEEK_CODER),
    PT("deepseek-v3", PRETOK_DEEPSEEK3), PT("hunyuan-dense", PRETOK_DEEPSEEK3), PT("joyai-llm", PRETOK_DEEPSEEK3),
    PT("hy_v4", PRETOK_DEEPSEEK3),
    PT("spark2_5", PRETOK_SPARK2_5),
    PT("afmoe", PRETOK_AFMOE),
    PT("youtu", PRETOK_YOUTU, IM),
    PT("gpt-4o", PRETOK_GPT4O), PT("llama4", PRETOK_GPT4O), PT("kanana2", PRETOK_GPT4O), PT("talkie", PRETOK_GPT4O),
    PT("minimax-m2", PRETOK_GPT4O),
    PT("granite-embed-multi-97m", PRETOK_GRANITE_MULTI, IM),
    PT("tekken", PRETOK_TEKKEN, IM, BOS),
    PT("tiny_aya", PRETOK_TINY_AYA), PT("cohere2moe", PRETOK_TINY_AYA),
    PT("kimi-k2", PRETOK_KIMI_K2),
    PT("superbpe", PRETOK_SUPERBPE),
    PT("exaone-moe", PRETOK_EXAONE_MOE),
    PT("poro-chat", PRETOK_PORO), PT("bloom", PRETOK_PORO), PT("gpt3-finnish", PRETOK_PORO),
    PT("viking", PRETOK_VIKING),
    PT("chameleon", PRETOK_CHAMELEON, .add_bos = true),
    PT("gemma4", PRETOK_LINES, .raw_utf8 = true, .force_add_bos = true, .whole_newlines = true),
    PT("granite-embed-multi-311m", PRETOK_LINES, .raw_utf8 = true, .force_add_bos = true, .whole_newlines = true),
    PT("sarvam-moe", PRETOK_LINES, .raw_utf8 = true),
};
#undef PT
#undef IM
#undef BOS

const struct pretok_info *pretok_lookup(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strlen(names[i].name) == len && !memcmp(names[i].name, name, len)) return &names[i];
    return NULL;
}

const struct pretok_info *pretok_known(size_t i) { return i < sizeof names / sizeof *names ? &names[i] : NULL; }

enum pretok pretok_from_name(const char *name, size_t len) {
    const struct pretok_info *pi = pretok_lookup(name, len);
    return pi ? pi->kind : PRETOK_UNKNOWN;
}

const char *pretok_name(enum pretok k) {
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (names[i].kind == k) return names[i].name;
    return "unknown";
}

/* Split every word of in_ends[0..n_in) with one pass; unmatched stretches stay words. */
static size_t split_pass(const struct pass *ps, const uint32_t *cp, const uint16_t *fl, const uint32_t *in_ends,
                         size_t n_in, uint32_t *out_ends) {
    size_t n_out = 0, start = 0;
    for (size_t w = 0; w < n_in; w++) {
        struct span s = {cp, fl, in_ends[w], 0, 0, 0};
        size_t pos = start, gap = start;
        while (pos < s.end) {
            size_t m = ps->match(&s, pos, ps->arg);
            if (!m) {
                pos = s.next_try > pos + 1 ? s.next_try : pos + 1;
                continue;
            }
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

size_t pretok_split(enum pretok k, const uint32_t *cps, const uint16_t *flags, size_t n, uint32_t *ends,
                    uint32_t *scratch) {
    if (n == 0) return 0;
    if (k < 0 || k >= PRETOK_COUNT) k = PRETOK_DEFAULT;
    size_t n_passes = passes[k].n;
    /* Passes alternate between the two buffers so the last one writes ends[]. */
    uint32_t *bufs[2] = {(n_passes % 2) ? scratch : ends, (n_passes % 2) ? ends : scratch};
    bufs[0][0] = (uint32_t)n;
    size_t n_words = 1;
    for (size_t i = 0; i < n_passes; i++)
        n_words = split_pass(&passes[k].v[i], cps, flags, bufs[i % 2], n_words, bufs[(i + 1) % 2]);
    return n_words;
}
