/* pretok.h: the pre-tokenizers of BPE vocabularies: splitting text (as code points) into the words
 * BPE merges within, the way the reference (llama.cpp) applies each model family's regexes.
 *
 * Each regex is a hand-written matcher over code points and their Unicode classes (unicode.h);
 * no regex library. Semantics are those of the reference's engine: a backtracking (ECMAScript)
 * regex at each position, the first alternative that matches wins, text no alternative matches
 * stays a word of its own. A pre-tokenizer is a sequence of such passes, each splitting the words
 * of the previous one. Where the reference's engine departs from Unicode, the matchers do too:
 *   - \p{Lu}, \p{Ll}, \p{Lt}, \p{Lm} and \p{Lo} all mean "any letter"; the case-split patterns
 *     (gpt-4o, tekken) tell upper from lower by [^a-z] / [^A-Z] only, so a non-ASCII letter is both;
 *   - \p{S} does not include '~' (the reference's table of ASCII symbols leaves it out);
 *   - explicit code point ranges never match a whitespace character (the reference rewrites
 *     non-ASCII whitespace before matching);
 *   - \d and \b are ASCII.
 *
 *   const struct pretok_info *pi = pretok_lookup("qwen2", 5);   // NULL if unknown
 *   size_t n_words = pretok_split(pi->kind, cps, flags, n, ends, scratch);
 *   // word i is cps[i ? ends[i-1] : 0 .. ends[i])
 *
 * Linear time in n: a matcher consumes what it scans, except a bounded look-ahead, or tells the
 * splitter where the next match can start.
 */
#ifndef UVLM_TOKENIZER_PRETOK_H
#define UVLM_TOKENIZER_PRETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One value per distinct sequence of regexes (several names share one: see pretok_lookup). */
enum pretok {
    PRETOK_UNKNOWN = -1,
    PRETOK_DEFAULT = 0,   /* punctuation runs, the GPT-2 regex, digit runs, 3 ASCII digits */
    PRETOK_GPT2,          /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    PRETOK_LLAMA3,        /* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
                             ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
    PRETOK_QWEN2,         /* the Llama 3 regex with \p{N} (one digit per word) */
    PRETOK_QWEN35,        /* Qwen2's with [\p{L}\p{M}]+ letters and [^\s\p{L}\p{M}\p{N}]+ symbols */
    PRETOK_SEED_CODER,    /* Qwen2's without [\r\n]* after symbols */
    PRETOK_UFAKZEKA,      /* Qwen2's without the contractions */
    PRETOK_MINICPM5,      /* \p{N}{1,3}, then the Llama 3 regex with \p{N}+ */
    PRETOK_JAIS2,         /* Llama 3's with \s{512}(?!\S)|\s{256}(?!\S)|...|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1} */
    PRETOK_LAGUNA,        /* [^\n]+|[\n]+, then Qwen2's */
    PRETOK_STARCODER,     /* \p{N}, then GPT-2's */
    PRETOK_FALCON,        /* [\p{P}\$\+<=>\^~\|`]+, GPT-2's, [0-9][0-9][0-9] */
    PRETOK_DEEPSEEK_LLM,  /* [\r\n], \s?[cased letters]+, \s?[ASCII/fullwidth punctuation]+, \s+$,
                             [CJK, Hangul]+, \p{N}+ */
    PRETOK_DEEPSEEK_CODER,/* [\r\n], \s?\p{L}+, \s?\p{P}+, [CJK, Hangul]+, \p{N} */
    PRETOK_DEEPSEEK3,     /* \p{N}{1,3}, [CJK, kana]+, [!-/:-@[-`{-~][A-Za-z]+|
                             [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|
                             \s+(?!\S)|\s+ */
    PRETOK_SPARK2_5,      /* DeepSeek-V3's with [\r\n] for \s*[\r\n]+ and no [\r\n]*, then \p{N} */
    PRETOK_AFMOE,         /* digit runs cut in threes from the left, [CJK and SE Asian blocks]+,
                             DeepSeek-V3's last regex */
    PRETOK_YOUTU,         /* [Hangul]+|[CJK punctuation]+|[Bopomofo]+|[CJK, kana]+, then GPT-4o's
                             with \p{N} */
    PRETOK_GPT4O,         /* [^\r\n\p{L}\p{N}]?[upper]*[lower]+(?i:'s|...)?|
                             [^\r\n\p{L}\p{N}]?[upper]+[lower]*(?i:'s|...)?|\p{N}{1,3}|
                              ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
    PRETOK_GRANITE_MULTI, /* GPT-4o's with marks counted as letters of either case */
    PRETOK_TEKKEN,        /* GPT-4o's without contractions, with \p{N} */
    PRETOK_TINY_AYA,      /* \d{1,3}(?=(?:\d{3})*\b), then GPT-4o's */
    PRETOK_KIMI_K2,       /* [\p{Han}]+|[^\r\n\p{L}\p{N}]?[letters but Han]+(?i:'s|...)?|\p{N}{1,3}|
                              ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
    PRETOK_SUPERBPE,      /* \p{N}+, then (?=(\d{3})+(?!\d)) (digits in threes from the right) */
    PRETOK_EXAONE_MOE,    /* Qwen2's with letter words joined by single spaces, [\r\n/]? */
    PRETOK_PORO,          /*  ?[^(\s|.,!?…。，、।۔،)]+ */
    PRETOK_VIKING,        /* Poro's, then \p{N} */
    PRETOK_CHAMELEON,     /* <sentinel:[0-9]+>, image tokens, [\t\n]|    |  , \p{N}, one punctuation
                             character, GPT-2's */
    PRETOK_LINES,         /* [^\n]+|[\n]+: SentencePiece-style BPE (Gemma 4) merges whole lines */
    PRETOK_COUNT
};

/* What a tokenizer.ggml.pre name selects, with the settings the reference ties to it. */
struct pretok_info {
    const char *name;
    enum pretok kind;
    bool ignore_merges; /* a word that is a token is that token, unmerged */
    bool add_bos;       /* default of tokenizer.ggml.add_bos_token */
    bool no_bos_id;     /* no default BOS id (tokenizer.ggml.bos_token_id gives one) */
    bool raw_utf8;      /* words are raw UTF-8 with spaces as U+2581, not GPT-2 byte characters */
    bool force_add_bos; /* BOS even when tokenizer.ggml.add_bos_token says false */
    bool whole_newlines;/* a word of newlines that is a token is that token, unmerged */
};

/* The pre-tokenizer named name[0..len) (tokenizer.ggml.pre: "llama-bpe", "qwen2", "gpt-2",
 * "deepseek-coder", "gemma4", ...), or NULL when uvlm does not know it. */
const struct pretok_info *pretok_lookup(const char *name, size_t len);
/* The i-th known name (i from 0), NULL past the last: for listings and tests. */
const struct pretok_info *pretok_known(size_t i);
/* Kind by name (PRETOK_UNKNOWN if unknown) and the first name of a kind. */
enum pretok pretok_from_name(const char *name, size_t len);
const char *pretok_name(enum pretok k);

/* Split cps[0..n) (flags[i] = ucp_flags(cps[i])) into words: writes the end offset of each word to
 * ends[] and returns their number. ends and scratch must each have room for n entries. */
size_t pretok_split(enum pretok k, const uint32_t *cps, const uint16_t *flags, size_t n,
                    uint32_t *ends, uint32_t *scratch);

#endif
