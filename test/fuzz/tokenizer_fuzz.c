/* tokenizer_fuzz.c: libFuzzer target for tokenization and detokenization on the real shared
 * vocabularies (../shared/vocab, or $UVLM_SHARED/vocab). Input byte 0 picks the vocabulary,
 * byte 1 the flags, the rest is the text. Checks, beyond the sanitizers:
 *   - every id is in the vocabulary;
 *   - the streaming detokenizer only ever emits valid UTF-8 and, fed the same ids, agrees with
 *     the whole-sequence decoder whenever that one's output is valid UTF-8;
 *   - decode(encode(x)) == x for valid UTF-8 x without special-token parsing (except Phi-3,
 *     whose user-defined </s> swallows the whitespace after it, except a literal U+2581 in
 *     SentencePiece or Gemma 4 input, which is how those vocabularies write a space, and except a
 *     byte the vocabulary has no token for: refact lacks 0xF1, and the encoder drops such bytes
 *     as the reference does). */
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const vocab_names[] = {"llama-spm", "phi-3",  "gpt-2",   "llama-bpe", "qwen2",
                                           "deepseek-coder", "refact", "gemma-4", "qwen35"};
#define N_VOCABS (sizeof vocab_names / sizeof *vocab_names)

/* Loaded once per process: fuzzing harness state, not part of uvlm. */
static struct tokenizer *vocabs[N_VOCABS];
static bool byte_token[N_VOCABS][256]; /* some token's piece is this byte alone */

static struct tokenizer *vocab(size_t i) {
    if (vocabs[i]) return vocabs[i];
    const char *root = getenv("UVLM_SHARED");
    char path[1024], why[256];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", root ? root : "../shared", vocab_names[i]);
    struct gguf_file f;
    if (gguf_open(&f, path, why, sizeof why) < 0 || tokenizer_load(&vocabs[i], &f, why, sizeof why) < 0) {
        fprintf(stderr, "tokenizer_fuzz: cannot load %s: %s\n", path, why);
        abort(); /* a fuzz run without its vocabularies must not look clean */
    }
    gguf_close(&f);
    for (int32_t id = 0; id < tokenizer_n_vocab(vocabs[i]); id++) {
        size_t n;
        const char *piece = tokenizer_token_piece(vocabs[i], id, false, &n);
        if (piece && n == 1) byte_token[i][(unsigned char)piece[0]] = true;
    }
    return vocabs[i];
}

static bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int k = utf8_valid_len((const unsigned char *)s + i, n - i);
        if (k <= 0) return false;
        i += (size_t)k;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t vi = data[0] % N_VOCABS;
    bool add_special = data[1] & 1, parse_special = data[1] & 2, special = data[1] & 4;
    const struct tokenizer *tok = vocab(vi);
    const char *text = (const char *)data + 2;
    size_t len = size - 2;

    int32_t *ids;
    size_t n;
    if (tokenizer_encode_alloc(tok, text, len, add_special, parse_special, &ids, &n) < 0) abort();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tokenizer_n_vocab(tok)) abort();

    size_t cap = 3 * (n * tokenizer_max_piece(tok) + DETOK_HOLD) + 16;
    char *whole = malloc(cap), *streamed = malloc(cap);
    if (!whole || !streamed) abort();
    int64_t wl = tokenizer_decode(tok, ids, n, false, special, whole, cap);
    if (wl < 0) abort();

    struct detok d;
    detok_init(&d, tok, special, true);
    size_t sl = 0;
    for (size_t i = 0; i <= n; i++) {
        char *o = streamed + sl;
        size_t room = cap - sl;
        int k = i < n ? detok_push(&d, ids[i], o, room) : detok_flush(&d, o, room);
        if (k < 0 || !valid_utf8(o, (size_t)k)) abort();
        sl += (size_t)k;
    }
    if (valid_utf8(whole, (size_t)wl) && (sl != (size_t)wl || memcmp(whole, streamed, sl))) abort();

    bool spm_space_sign = (vi <= 1 || vi == 7) && memmem(text, len, "\xE2\x96\x81", 3);
    bool encodable = true;
    for (size_t i = 0; i < len; i++) encodable &= byte_token[vi][(unsigned char)text[i]];
    if (!parse_special && !add_special && vi != 1 && !spm_space_sign && encodable && valid_utf8(text, len) &&
        ((size_t)wl != len || memcmp(whole, text, len))) {
        fprintf(stderr, "round trip failed on %s\n", vocab_names[vi]);
        abort();
    }
    free(whole);
    free(streamed);
    free(ids);
    return 0;
}
