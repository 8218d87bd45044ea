/* pretok.h: the pre-tokenizers of byte-level BPE vocabularies: splitting text (as code points)
 * into the words BPE merges within, the way the reference applies each model family's regex.
 *
 * Each regex is a hand-written matcher over code points and their Unicode classes (unicode.h);
 * no regex library. Semantics are those of a backtracking (ECMAScript) regex engine: at each
 * position the first alternative that matches wins; text no alternative matches stays a word
 * of its own. A pre-tokenizer is a sequence of such passes, each splitting the words of the
 * previous one.
 *
 *   enum pretok k = pretok_from_name("qwen2", 5);    // PRETOK_UNKNOWN if not known
 *   size_t n_words = pretok_split(k, cps, flags, n, ends, scratch);
 *   // word i is cps[i ? ends[i-1] : 0 .. ends[i])
 *
 * Linear time in n (every matcher consumes what it scans, except one look-ahead code point).
 */
#ifndef UVLM_TOKENIZER_PRETOK_H
#define UVLM_TOKENIZER_PRETOK_H

#include <stddef.h>
#include <stdint.h>

enum pretok {
    PRETOK_UNKNOWN = -1,
    PRETOK_DEFAULT = 0, /* several passes: punctuation runs, the GPT-2 regex, digit runs, 3 digits */
    PRETOK_GPT2,        /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    PRETOK_LLAMA3,      /* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
                           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
    PRETOK_QWEN2,       /* the Llama 3 regex with \p{N} (one digit per word) */
};

/* Name as in tokenizer.ggml.pre ("llama-bpe", "llama3", "qwen2", "gpt-2", "default", ...). */
enum pretok pretok_from_name(const char *name, size_t len);
const char *pretok_name(enum pretok k);

/* Split cps[0..n) (flags[i] = ucp_flags(cps[i])) into words: writes the end offset of each word to
 * ends[] and returns their number. ends and scratch must each have room for n entries. */
size_t pretok_split(enum pretok k, const uint32_t *cps, const uint16_t *flags, size_t n,
                    uint32_t *ends, uint32_t *scratch);

#endif
