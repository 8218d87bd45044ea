/* tokenizer.h: text <-> token ids for the vocabularies GGUF files carry (tokenizer.ggml.*),
 * reproducing the reference (llama.cpp) token for token.
 *
 * Two models:
 *   - "llama": SentencePiece BPE with scores and byte fallback (<0xNN> tokens). A space is
 *     prefixed to the text (tokenizer.ggml.add_space_prefix, default on) and spaces become U+2581.
 *   - "gpt2": byte-level BPE with merge ranks; the text is first split into words by the
 *     pre-tokenizer named by tokenizer.ggml.pre (pretok.h; an unknown name fails the load unless
 *     tokenizer_options.allow_unknown_pretokenizer).
 *   - "gemma4": BPE with merge ranks over raw UTF-8 (spaces become U+2581, bytes no token covers
 *     become <0xNN> tokens), each line merged whole.
 * Control, unknown and user-defined tokens are "special": with parse_special their text in the
 * input becomes the token; without it only user-defined ones that are not control are (as the
 * reference does; end-of-turn and other markers it recognises by their text count as control).
 *
 * Ownership and threads: tokenizer_load copies everything it needs, so the gguf_file may be
 * closed afterwards. A loaded tokenizer is immutable: encode, pieces and detok may run from any
 * number of threads at once (per-call state is on the stack, in heap memory owned by the call,
 * or in the caller's struct detok).
 *
 *   struct tokenizer *tok;
 *   char why[256];
 *   if (tokenizer_load(&tok, &gguf, why, sizeof why) < 0) { ... why ... }
 *   int32_t ids[64];
 *   size_t n;
 *   int rc = tokenizer_encode(tok, "Hello", 5, true, false, ids, 64, &n);
 *   // rc == -ERR_TOOBIG: n is the count needed (or use tokenizer_encode_alloc)
 *
 *   struct detok d;                 // streaming decode: only complete UTF-8 characters come out
 *   detok_init(&d, tok, false, false);  // continuing a prompt: keep leading spaces
 *   size_t cap = detok_buf_size(tok);   // room for any one push
 *   char *buf = malloc(cap);
 *   for (...) { int k = detok_push(&d, id, buf, cap); fwrite(buf, 1, k, out); }
 *   fwrite(buf, 1, detok_flush(&d, buf, cap), out);
 *   tokenizer_free(tok);
 */
#ifndef UVLM_TOKENIZER_H
#define UVLM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

struct gguf_file;
struct tokenizer;

enum tokenizer_model { TOKENIZER_SPM = 1, TOKENIZER_BPE = 2 };

/* Build a tokenizer from a GGUF file's tokenizer.ggml.* keys. Returns 0, or -ERR_FORMAT (missing
 * or malformed keys), -ERR_UNSUPPORTED (unknown tokenizer.ggml.model, or a tokenizer.ggml.pre
 * uvlm does not know: its words would differ from the model's), -ERR_NOMEM; why gets the
 * reason. On success why holds "" or a warning (no pre-tokenizer named, ...) worth logging. */
int tokenizer_load(struct tokenizer **out, const struct gguf_file *f, char *why, size_t why_len);

struct tokenizer_options {
    /* An unknown tokenizer.ggml.pre splits as "default" (a warning in why) instead of failing the
     * load: for a model whose family uvlm does not know yet, at the risk of other tokens. */
    bool allow_unknown_pretokenizer;
};
/* tokenizer_load with options (NULL: the defaults, all false). */
int tokenizer_load_with(struct tokenizer **out, const struct gguf_file *f, const struct tokenizer_options *opt,
                        char *why, size_t why_len);
void tokenizer_free(struct tokenizer *tok);

/* Tokenize text[0..len), any bytes (malformed UTF-8: "llama" keeps the bytes through byte
 * fallback, "gpt2" reads each bad byte as U+FFFD, as the reference does). add_special: BOS/EOS as
 * the vocabulary says (tokenizer_add_bos/eos). parse_special: control tokens' text becomes the
 * token. Writes up to n_max ids to out and the full count to *n_out; returns 0, -ERR_TOOBIG when
 * the count exceeds n_max (out then holds the first n_max ids), or -ERR_NOMEM. */
int tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t *out, size_t n_max, size_t *n_out);
/* The same into a malloc'd array the caller frees: *out (NULL when *n_out is 0). */
int tokenizer_encode_alloc(const struct tokenizer *tok, const char *text, size_t len,
                           bool add_special, bool parse_special, int32_t **out, size_t *n_out);

/* The bytes token id decodes to, with the SentencePiece rules applied (U+2581 -> space, <0xNN> ->
 * the byte; byte-level BPE: its bytes). Control and unknown tokens give "" unless special, in
 * which case their text. Not NUL-terminated; may be part of a UTF-8 character. Valid until
 * tokenizer_free. *len 0 and a "" pointer for an id out of range. */
const char *tokenizer_token_piece(const struct tokenizer *tok, int32_t id, bool special, size_t *len);
/* Largest piece length in bytes over the vocabulary. */
size_t tokenizer_max_piece(const struct tokenizer *tok);
/* The token's text as stored in the vocabulary (e.g. "<|im_end|>", "▁Hello", "Ġworld"). */
const char *tokenizer_token_text(const struct tokenizer *tok, int32_t id, size_t *len);
/* The id whose vocabulary text is exactly text[0..len), or -1. */
int32_t tokenizer_find_token(const struct tokenizer *tok, const char *text, size_t len);

/* Decode a whole sequence into buf (the inverse of encode: the prefixed space of the first token
 * is removed for "llama" vocabularies; a leading BOS is skipped when remove_special). Returns the
 * byte count; -ERR_TOOBIG if it does not fit in buf_len (bytes up to buf_len are written). */
int64_t tokenizer_decode(const struct tokenizer *tok, const int32_t *ids, size_t n, bool remove_special,
                         bool special, char *buf, size_t buf_len);

enum tokenizer_model tokenizer_model(const struct tokenizer *tok);
int32_t tokenizer_n_vocab(const struct tokenizer *tok);
/* Special ids, -1 when the vocabulary has none. */
int32_t tokenizer_bos(const struct tokenizer *tok);
int32_t tokenizer_eos(const struct tokenizer *tok);
int32_t tokenizer_eot(const struct tokenizer *tok); /* end of turn (<|eot_id|>, <|im_end|>, ...) */
/* Fill-in-the-middle markers, in the order of the GGUF keys tokenizer.ggml.fim_{pre,suf,mid,pad,
 * rep,sep}_token_id (prefix, suffix and middle also under the older tokenizer.ggml.{prefix,suffix,
 * middle}_token_id); without a key, the token found by its text as the reference does
 * (<|fim_prefix|>, <fim-prefix>, <fim_prefix>, <PRE>, ...; <|repo_name|>, <|file_sep|>). */
enum tokenizer_fim { TOKENIZER_FIM_PRE, TOKENIZER_FIM_SUF, TOKENIZER_FIM_MID, TOKENIZER_FIM_PAD, TOKENIZER_FIM_REP,
                     TOKENIZER_FIM_SEP, TOKENIZER_FIM_KINDS };
int32_t tokenizer_fim(const struct tokenizer *tok, enum tokenizer_fim which); /* -1: none */
bool tokenizer_add_bos(const struct tokenizer *tok);
bool tokenizer_add_eos(const struct tokenizer *tok);
/* End of generation: EOS, EOT and the other end markers found by their text (<|im_end|>,
 * <|eot_id|>, <|end|>, <|endoftext|>, <end_of_turn>, ...). */
bool tokenizer_is_eog(const struct tokenizer *tok, int32_t id);
/* Control/unknown token (rendered as "" by default). */
bool tokenizer_is_control(const struct tokenizer *tok, int32_t id);
/* Bytes the loaded tokenizer holds (for the start-up memory log). */
size_t tokenizer_mem_size(const struct tokenizer *tok);
/* tokenizer.ggml.pre as the file names it ("llama-bpe", "qwen2", "gemma4", ...; "" for "llama"). */
const char *tokenizer_pre_name(const struct tokenizer *tok);

/* Streaming detokenizer: feed ids one at a time, get bytes that are always whole, valid UTF-8
 * characters; an incomplete character is held back (at most DETOK_HOLD bytes) until the next
 * token completes it, and invalid bytes come out as U+FFFD.
 * strip_space: the ids start at the beginning of a text (decoding a prompt), so the first piece
 * loses the space "llama" vocabularies prefix to a text. Leave it false when the ids continue a
 * text (generated tokens after a prompt): their leading spaces are real. */
#define DETOK_HOLD 4
struct detok {
    const struct tokenizer *tok;
    bool special;     /* render control tokens' text */
    bool strip_space; /* the next piece loses one leading space */
    uint8_t n_held;
    unsigned char held[DETOK_HOLD];
};
void detok_init(struct detok *d, const struct tokenizer *tok, bool special, bool strip_space);
/* Output room that always suffices for one detok_push or detok_flush: every byte of the longest
 * piece plus the held ones could become a 3-byte U+FFFD. */
size_t detok_buf_size(const struct tokenizer *tok);
/* Writes the complete characters now available to out; returns their byte count, or -ERR_TOOBIG
 * when out_len < 3 * (this piece's length + held bytes) (nothing is consumed then). */
int detok_push(struct detok *d, int32_t id, char *out, size_t out_len);
/* End of stream: the held incomplete bytes come out as U+FFFD (out_len >= 3*DETOK_HOLD). */
int detok_flush(struct detok *d, char *out, size_t out_len);

#endif
