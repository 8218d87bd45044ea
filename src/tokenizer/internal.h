/* internal.h: the loaded tokenizer's tables, shared by tokenizer.c (load, special tokens,
 * pieces), spm.c and bpe.c (the two merge algorithms). Not part of the public API. */
#ifndef UVLM_TOKENIZER_INTERNAL_H
#define UVLM_TOKENIZER_INTERNAL_H

#include "tokenizer/tokenizer.h"
#include "tokenizer/pretok.h"
#include "tokenizer/strmap.h"

/* Token attributes (from tokenizer.ggml.token_type, plus strip rules and end-of-generation). */
enum tok_attr {
    TA_UNKNOWN = 1 << 0,
    TA_UNUSED = 1 << 1,
    TA_NORMAL = 1 << 2,
    TA_CONTROL = 1 << 3,
    TA_USER_DEFINED = 1 << 4,
    TA_BYTE = 1 << 5,
    TA_LSTRIP = 1 << 6, /* whitespace before the special token is dropped */
    TA_RSTRIP = 1 << 7, /* whitespace after the special token is dropped */
    TA_EOG = 1 << 8,
};

/* A BPE merge: the pair (left, right) of symbol ids merges with this rank into result. */
struct merge_slot {
    uint64_t key;      /* (uint64)left << 32 | right, UINT64_MAX: empty */
    int32_t rank;
    int32_t result;
};

/* Make room for element n of the malloc'd array *array (capacity *cap, doubling); false when
 * out of memory (the array is left as it was). */
bool grow_for_one(void *array, size_t n, size_t *cap, size_t elem_size);

/* A growable int32 array: the output of the encoders. */
struct ids {
    int32_t *v;
    size_t n, cap;
    bool oom;
};
void ids_push(struct ids *a, int32_t id);

struct tokenizer {
    enum tokenizer_model model;
    enum pretok pre;
    char pre_name[64];        /* tokenizer.ggml.pre as given ("" for "llama") */
    int32_t n_vocab;
    /* Vocabulary text of token i: text + text_off[i] .. text_off[i + 1]. */
    char *text;
    uint64_t *text_off;
    /* Decoded bytes of token i (see tokenizer_token_piece): piece + piece_off[i] .. [i + 1]. */
    char *piece;
    uint64_t *piece_off;
    size_t max_piece;
    float *scores;            /* SPM: n_vocab scores */
    uint16_t *attr;           /* n_vocab TA_* */
    struct strmap vocab;      /* text -> id; BPE: also merge parts not in the vocabulary (ids >= n_vocab) */
    size_t max_token_len;     /* longest vocabulary text: SPM bigrams longer cannot be tokens */
    int32_t *special;         /* ids of special tokens, longest text first */
    size_t n_special;
    bool has_plain_special;   /* a special token that is neither control nor unknown: looked for
                               * in the text even without parse_special */
    int32_t byte_token[256];  /* SPM and raw UTF-8 BPE byte fallback: <0xNN> (or the byte itself) token, -1 */
    /* BPE merges: open addressing over merge_slot, power-of-two size. */
    struct merge_slot *merges;
    size_t merges_cap;
    char *extra_text;         /* storage of merge parts not in the vocabulary */
    int32_t n_symbols;        /* ids given out in vocab: n_vocab + merge parts */
    char byte_char[256][3];   /* BPE: UTF-8 of each byte's printable character, NUL-padded */
    int32_t bos, eos, eot, eom, unk;
    int32_t fim[TOKENIZER_FIM_KINDS]; /* fill-in-the-middle markers (tokenizer_fim), -1 when none */
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
    bool force_add_bos;       /* BOS whatever add_bos_token says (Gemma 4, as the reference) */
    bool raw_utf8;            /* BPE over raw UTF-8 with spaces as U+2581 and <0xNN> byte tokens */
    bool whole_newlines;      /* a word of newlines that is a token is that token (Gemma 4) */
    bool spm_word_split;      /* SPM: no token has U+2581 after another character (spm.c) */
};

/* Append the tokens of one raw text fragment. */
void spm_encode(const struct tokenizer *tok, const char *text, size_t len, bool prefix_space,
                struct ids *out);
void bpe_encode(const struct tokenizer *tok, const char *text, size_t len, struct ids *out);

/* Build the merge table from tokenizer.ggml.merges ("left right" strings, rank = index). */
int bpe_load_merges(struct tokenizer *tok, const struct gguf_file *f, char *why, size_t why_len);
/* The GPT-2 byte <-> printable code point map. */
uint32_t bpe_byte_to_cp(unsigned char b);
int bpe_cp_to_byte(uint32_t cp); /* -1 when cp is not in the map */

#endif
