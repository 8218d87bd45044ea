/* tokenizer.c: loading a vocabulary from GGUF metadata, splitting special tokens out of the text,
 * the encode entry points, token pieces and whole-sequence decoding (see tokenizer.h). The merge
 * algorithms are in spm.c and bpe.c, the streaming decoder in detok.c. */
#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"
#include "gguf/gguf.h"
#include "common/err.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Values of tokenizer.ggml.token_type. */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

bool grow_for_one(void *array, size_t n, size_t *cap, size_t elem_size) {
    if (n < *cap) return true;
    size_t new_cap = *cap ? *cap * 2 : 64;
    void *v = realloc(*(void **)array, new_cap * elem_size);
    if (!v) return false;
    *(void **)array = v;
    *cap = new_cap;
    return true;
}

void ids_push(struct ids *a, int32_t id) {
    if (a->oom) return;
    if (!grow_for_one(&a->v, a->n, &a->cap, sizeof *a->v)) { a->oom = true; return; }
    a->v[a->n++] = id;
}

static size_t text_len(const struct tokenizer *tok, int32_t id) { return tok->text_off[id + 1] - tok->text_off[id]; }
static const char *text_of(const struct tokenizer *tok, int32_t id) { return tok->text + tok->text_off[id]; }
static bool text_is(const struct tokenizer *tok, int32_t id, const char *s) {
    return text_len(tok, id) == strlen(s) && !memcmp(text_of(tok, id), s, text_len(tok, id));
}

/* ---- loading ---- */

static uint16_t attr_of_type(int64_t type) {
    switch (type) {
    case TT_NORMAL: return TA_NORMAL;
    case TT_UNKNOWN: return TA_UNKNOWN;
    case TT_CONTROL: return TA_CONTROL;
    case TT_USER_DEFINED: return TA_USER_DEFINED;
    case TT_UNUSED: return TA_UNUSED;
    case TT_BYTE: return TA_BYTE;
    default: return 0; /* undefined: neither rendered nor special */
    }
}

/* A special id from metadata: dflt when absent, -1 when out of range. */
static int32_t special_id(const struct tokenizer *tok, const struct gguf_file *f, const char *key, int32_t dflt) {
    int64_t id = gguf_get_int(f, key, dflt);
    return id >= 0 && id < tok->n_vocab ? (int32_t)id : -1;
}

/* The decoded bytes of token id, written to out (room for its text length; pieces never grow). */
static size_t make_piece(const struct tokenizer *tok, int32_t id, char *out) {
    const char *t = text_of(tok, id);
    size_t n = text_len(tok, id), o = 0;
    uint16_t a = tok->attr[id];
    if (a & (TA_UNKNOWN | TA_CONTROL | TA_USER_DEFINED)) {
        memcpy(out, t, n);
        return n;
    }
    if (tok->model == TOKENIZER_SPM || tok->raw_utf8) {
        if (a & TA_BYTE) {
            if (n == 6 && !memcmp(t, "<0x", 3) && isxdigit((unsigned char)t[3]) && isxdigit((unsigned char)t[4])) {
                out[0] = (char)strtol((char[]){t[3], t[4], 0}, NULL, 16);
                return 1;
            }
            memcpy(out, t, n);
            return n;
        }
        if (!(a & TA_NORMAL)) return 0;
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && !memcmp(t + i, "\xE2\x96\x81", 3)) { out[o++] = ' '; i += 3; }
            else out[o++] = t[i++];
        }
        return o;
    }
    if (!(a & TA_NORMAL)) return 0;
    /* Byte-level BPE: each character stands for one byte (unmapped characters are kept). */
    for (size_t i = 0, adv; i < n; i += adv) {
        uint32_t cp = utf8_decode(t + i, n - i, &adv);
        int b = bpe_cp_to_byte(cp);
        if (b >= 0) out[o++] = (char)b;
        else { memcpy(out + o, t + i, adv); o += adv; }
    }
    return o;
}

static int load_pieces(struct tokenizer *tok) {
    tok->piece = malloc(tok->text_off[tok->n_vocab] + 1);
    tok->piece_off = malloc((size_t)(tok->n_vocab + 1) * sizeof *tok->piece_off);
    if (!tok->piece || !tok->piece_off) return -ERR_NOMEM;
    uint64_t o = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        tok->piece_off[i] = o;
        size_t n = make_piece(tok, i, tok->piece + o);
        if (n > tok->max_piece) tok->max_piece = n;
        o += n;
    }
    tok->piece_off[tok->n_vocab] = o;
    return 0;
}

static int cmp_special(const void *a, const void *b, void *arg) {
    const struct tokenizer *tok = arg;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx = text_len(tok, x), ly = text_len(tok, y);
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Markers the reference recognises by their text (the GGUF keys often leave them out). Each is made
 * a control token if its type says otherwise, as the reference does: then its text in the input
 * is only the token with parse_special. */
static const char *const eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                        "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                        "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",
                                        "<end_of_utterance>"};
/* Fill-in-the-middle markers: prefix, suffix, middle, then pad, repository and file separator,
 * the last three also ending generation. */
#define FBAR "\xEF\xBD\x9C" /* the fullwidth bar of DeepSeek's markers */
static const char *const fim_texts[TOKENIZER_FIM_KINDS][9] = {
    {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<" FBAR "fim\xE2\x96\x81" "begin" FBAR ">", "<PRE>",
     "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"},
    {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<" FBAR "fim\xE2\x96\x81" "hole" FBAR ">", "<SUF>",
     "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"},
    {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<" FBAR "fim\xE2\x96\x81" "end" FBAR ">", "<MID>",
     "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"},
    {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"},
    {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"},
    {"<|file_sep|>"},
};
static const char *const eog_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
                                        "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
                                        "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
                                        "<turn|>", "<|tool_response>",
                                        "<" FBAR "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence" FBAR ">", "[e~["};
#undef FBAR

static int32_t find_text(const struct tokenizer *tok, const char *text) {
    return tokenizer_find_token(tok, text, strlen(text));
}

/* The first of texts[0..n) that is a token (n: up to a NULL entry), made control; -1 if none. */
static int32_t find_marker(struct tokenizer *tok, const char *const *texts, size_t n) {
    for (size_t k = 0; k < n && texts[k]; k++) {
        int32_t id = find_text(tok, texts[k]);
        if (id >= 0) {
            tok->attr[id] |= TA_CONTROL;
            return id;
        }
    }
    return -1;
}

static int load_specials(struct tokenizer *tok, const struct gguf_file *f) {
    if (tok->eot < 0) tok->eot = find_marker(tok, eot_texts, sizeof eot_texts / sizeof *eot_texts);
    if (tok->eom < 0) tok->eom = find_marker(tok, (const char *const[]){"<|eom_id|>"}, 1);
    for (size_t k = 0; k < TOKENIZER_FIM_KINDS; k++) {
        int32_t id = find_marker(tok, fim_texts[k], sizeof fim_texts[k] / sizeof *fim_texts[k]);
        if (tok->fim[k] < 0) tok->fim[k] = id; /* the metadata's id first */
        if (k >= 3 && tok->fim[k] >= 0) tok->attr[tok->fim[k]] |= TA_EOG;
    }
    for (size_t k = 0; k < sizeof eog_texts / sizeof *eog_texts; k++) {
        int32_t id = find_text(tok, eog_texts[k]);
        if (id >= 0) tok->attr[id] |= TA_EOG | TA_CONTROL;
    }
    if (tok->eos >= 0) tok->attr[tok->eos] |= TA_EOG;
    if (tok->eot >= 0) tok->attr[tok->eot] |= TA_EOG;
    if (tok->eom >= 0) tok->attr[tok->eom] |= TA_EOG;
    /* gpt-oss's <|end|> ends a message, not the generation, when <|return|> and <|call|> (or
     * <|calls|> and <|flush|>) are there; Gemma 4's </s> is text. */
    int32_t end = find_text(tok, "<|end|>"), call = find_text(tok, "<|call|>"), calls = find_text(tok, "<|calls|>");
    if (end >= 0 && (tok->attr[end] & TA_EOG) &&
        ((find_text(tok, "<|return|>") >= 0 && call >= 0) || (calls >= 0 && find_text(tok, "<|flush|>") >= 0)))
        tok->attr[end] = TA_USER_DEFINED;
    int32_t s_end = find_text(tok, "</s>");
    if (s_end >= 0 && (tok->attr[s_end] & TA_EOG) && find_text(tok, "<|tool_response>") >= 0)
        tok->attr[s_end] = TA_NORMAL;

    int32_t n = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++)
        n += (tok->attr[i] & (TA_CONTROL | TA_USER_DEFINED | TA_UNKNOWN)) && text_len(tok, i) > 0;
    tok->special = malloc((size_t)(n ? n : 1) * sizeof *tok->special);
    if (!tok->special) return -ERR_NOMEM;
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        if ((tok->attr[i] & (TA_CONTROL | TA_USER_DEFINED | TA_UNKNOWN)) && text_len(tok, i) > 0) {
            tok->special[tok->n_special++] = i;
            tok->has_plain_special |= !(tok->attr[i] & (TA_CONTROL | TA_UNKNOWN));
        }
    }
    qsort_r(tok->special, tok->n_special, sizeof *tok->special, cmp_special, tok);

    /* Phi-3 drops whitespace after its special tokens (the reference keys this on the name). */
    struct gguf_str name = gguf_get_str(f, "general.name");
    char lname[64] = "";
    for (size_t i = 0; i < name.len && i + 1 < sizeof lname; i++) {
        lname[i] = (char)tolower((unsigned char)name.ptr[i]);
        lname[i + 1] = 0;
    }
    if (strstr(lname, "phi-3") || strstr(lname, "phi3")) {
        for (size_t i = 0; i < tok->n_special; i++) tok->attr[tok->special[i]] |= TA_RSTRIP;
        for (int32_t i = 0; i < tok->n_vocab; i++) {
            if (text_is(tok, i, "</s>")) tok->attr[i] |= TA_RSTRIP;
            if (text_is(tok, i, "<unk>") || text_is(tok, i, "<s>") || text_is(tok, i, "<|endoftext|>"))
                tok->attr[i] &= (uint16_t)~TA_RSTRIP;
        }
    }
    return 0;
}

static int load_vocab(struct tokenizer *tok, const struct gguf_file *f, char *why, size_t why_len) {
    const struct gguf_array *toks = gguf_get_arr(f, "tokenizer.ggml.tokens");
    if (!toks || toks->type != GGUF_STRING || toks->n == 0) {
        snprintf(why, why_len, "tokenizer.ggml.tokens: missing, empty or not a string array");
        return -ERR_FORMAT;
    }
    if (toks->n > INT32_MAX / 2) {
        snprintf(why, why_len, "tokenizer.ggml.tokens: %llu tokens is too many", (unsigned long long)toks->n);
        return -ERR_FORMAT;
    }
    tok->n_vocab = (int32_t)toks->n;
    tok->n_symbols = tok->n_vocab;
    const struct gguf_array *scores = gguf_get_arr(f, "tokenizer.ggml.scores");
    const struct gguf_array *types = gguf_get_arr(f, "tokenizer.ggml.token_type");
    if (scores && (scores->n != toks->n || scores->type == GGUF_STRING)) {
        snprintf(why, why_len, "tokenizer.ggml.scores: %llu numbers for %llu tokens",
                 (unsigned long long)scores->n, (unsigned long long)toks->n);
        return -ERR_FORMAT;
    }
    if (types && (types->n != toks->n || types->type == GGUF_STRING || types->type == GGUF_FLOAT32 ||
                  types->type == GGUF_FLOAT64)) {
        snprintf(why, why_len, "tokenizer.ggml.token_type: %llu integers for %llu tokens",
                 (unsigned long long)types->n, (unsigned long long)toks->n);
        return -ERR_FORMAT;
    }
    size_t total = 0;
    for (uint64_t i = 0; i < toks->n; i++) total += toks->strs[i].len;
    size_t n = (size_t)tok->n_vocab;
    tok->text = malloc(total + 1);
    tok->text_off = malloc((n + 1) * sizeof *tok->text_off);
    tok->scores = malloc(n * sizeof *tok->scores);
    tok->attr = malloc(n * sizeof *tok->attr);
    if (!tok->text || !tok->text_off || !tok->scores || !tok->attr) return -ERR_NOMEM;
    int rc = strmap_init(&tok->vocab, n);
    if (rc < 0) return rc;
    uint64_t o = 0;
    for (size_t i = 0; i < n; i++) {
        struct gguf_str s = toks->strs[i];
        tok->text_off[i] = o;
        memcpy(tok->text + o, s.ptr, s.len);
        /* Later duplicates win, as in the reference's map. */
        if ((rc = strmap_put(&tok->vocab, tok->text + o, s.len, (int32_t)i)) < 0) return rc;
        o += s.len;
        if (s.len > tok->max_token_len) tok->max_token_len = s.len;
        tok->scores[i] = scores ? (float)gguf_arr_float(scores, i) : 0.0f;
        tok->attr[i] = types ? attr_of_type(gguf_arr_int(types, i)) : TA_NORMAL;
    }
    tok->text_off[n] = o;
    return 0;
}

/* The BPE settings: the pre-tokenizer named by tokenizer.ggml.pre (Gemma 4's model implies its
 * own), the default special ids, the byte-level or raw UTF-8 alphabet, and the merges. */
static int load_bpe(struct tokenizer *tok, const struct gguf_file *f, bool gemma4,
                    const struct tokenizer_options *opt, char *why, size_t why_len) {
    struct gguf_str pre = gguf_get_str(f, "tokenizer.ggml.pre");
    const struct pretok_info *pi = gemma4 ? pretok_lookup("gemma4", 6) : NULL;
    if (!pi && pre.ptr) pi = pretok_lookup(pre.ptr, pre.len);
    int n = (int)(pre.len > 64 ? 64 : pre.len);
    if (!pi && pre.ptr) {
        if (!opt || !opt->allow_unknown_pretokenizer) {
            snprintf(why, why_len,
                     "tokenizer.ggml.pre '%.*s' is not a pre-tokenizer uvlm knows: its text would be split "
                     "into other words than the model was trained on (--allow-unknown-pretokenizer splits "
                     "it as 'default' anyway)", n, pre.ptr);
            return -ERR_UNSUPPORTED;
        }
        snprintf(why, why_len, "warning: unknown pre-tokenizer '%.*s', splitting as 'default' "
                 "(--allow-unknown-pretokenizer)", n, pre.ptr);
    } else if (!pi) {
        snprintf(why, why_len, "warning: no tokenizer.ggml.pre, splitting as 'default'");
    }
    if (!pi) pi = pretok_lookup("default", 7);
    snprintf(tok->pre_name, sizeof tok->pre_name, "%.*s", pre.ptr && !gemma4 ? n : (int)strlen(pi->name),
             pre.ptr && !gemma4 ? pre.ptr : pi->name);
    tok->pre = pi->kind;
    tok->ignore_merges = pi->ignore_merges;
    tok->add_bos = pi->add_bos;
    tok->force_add_bos = pi->force_add_bos;
    tok->raw_utf8 = pi->raw_utf8;
    tok->whole_newlines = pi->whole_newlines;
    int32_t dflt = gemma4 ? -1 : 11; /* the reference's defaults */
    tok->bos = special_id(tok, f, "tokenizer.ggml.bos_token_id", pi->no_bos_id ? -1 : dflt);
    tok->eos = special_id(tok, f, "tokenizer.ggml.eos_token_id", dflt);
    tok->unk = special_id(tok, f, "tokenizer.ggml.unknown_token_id", -1);
    for (unsigned b = 0; b < 256; b++) {
        memset(tok->byte_char[b], 0, sizeof tok->byte_char[b]);
        utf8_encode(bpe_byte_to_cp((unsigned char)b), tok->byte_char[b]);
        char hex[7];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        tok->byte_token[b] = tok->raw_utf8 ? strmap_get(&tok->vocab, hex, 6) : -1;
        if (tok->byte_token[b] >= tok->n_vocab) tok->byte_token[b] = -1;
    }
    return bpe_load_merges(tok, f, why, why_len);
}

int tokenizer_load(struct tokenizer **out, const struct gguf_file *f, char *why, size_t why_len) {
    return tokenizer_load_with(out, f, NULL, why, why_len);
}

int tokenizer_load_with(struct tokenizer **out, const struct gguf_file *f, const struct tokenizer_options *opt,
                        char *why, size_t why_len) {
    *out = NULL;
    if (why_len) why[0] = 0;
    struct gguf_str model = gguf_get_str(f, "tokenizer.ggml.model");
    if (!model.ptr) {
        snprintf(why, why_len, "tokenizer.ggml.model: missing (not a model with a vocabulary?)");
        return -ERR_FORMAT;
    }
    enum tokenizer_model kind;
    bool gemma4 = gguf_str_eq(model, "gemma4"); /* BPE over raw UTF-8, spaces as U+2581 */
    if (gguf_str_eq(model, "llama")) kind = TOKENIZER_SPM;
    else if (gguf_str_eq(model, "gpt2") || gemma4) kind = TOKENIZER_BPE;
    else {
        snprintf(why, why_len, "tokenizer.ggml.model '%.*s' is not supported (llama, gpt2, gemma4 are)",
                 (int)(model.len > 64 ? 64 : model.len), model.ptr);
        return -ERR_UNSUPPORTED;
    }
    struct tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) return -ERR_NOMEM;
    tok->model = kind;
    tok->eot = tok->eom = -1;
    int rc = load_vocab(tok, f, why, why_len);
    if (rc < 0) goto fail;

    if (kind == TOKENIZER_SPM) {
        tok->pre = PRETOK_DEFAULT;
        tok->add_bos = true;
        tok->add_space_prefix = true;
        tok->bos = special_id(tok, f, "tokenizer.ggml.bos_token_id", 1);
        tok->eos = special_id(tok, f, "tokenizer.ggml.eos_token_id", 2);
        tok->unk = special_id(tok, f, "tokenizer.ggml.unknown_token_id", 0);
        tok->spm_word_split = true;
        for (int32_t i = 0; i < tok->n_vocab && tok->spm_word_split; i++) {
            const char *t = text_of(tok, i);
            size_t n = text_len(tok, i);
            for (size_t j = 1; j + 3 <= n; j++)
                if (!memcmp(t + j, "\xE2\x96\x81", 3) && !(j >= 3 && !memcmp(t + j - 3, "\xE2\x96\x81", 3)))
                    tok->spm_word_split = false;
        }
        for (unsigned b = 0; b < 256; b++) {
            char hex[7];
            snprintf(hex, sizeof hex, "<0x%02X>", b);
            int32_t id = strmap_get(&tok->vocab, hex, 6);
            tok->byte_token[b] = id >= 0 ? id : strmap_get(&tok->vocab, (char[]){(char)b}, 1);
        }
    } else if ((rc = load_bpe(tok, f, gemma4, opt, why, why_len)) < 0) {
        goto fail;
    }
    tok->eot = special_id(tok, f, "tokenizer.ggml.eot_token_id", -1);
    tok->eom = special_id(tok, f, "tokenizer.ggml.eom_token_id", -1);
    /* fill-in-the-middle markers: the fim_* keys, else the older prefix/suffix/middle ones */
    static const char *const fim_keys[TOKENIZER_FIM_KINDS][2] = {
        {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"},
        {"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"},
        {"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"},
        {"tokenizer.ggml.fim_pad_token_id", NULL},
        {"tokenizer.ggml.fim_rep_token_id", NULL},
        {"tokenizer.ggml.fim_sep_token_id", NULL},
    };
    for (int k = 0; k < TOKENIZER_FIM_KINDS; k++) {
        tok->fim[k] = special_id(tok, f, fim_keys[k][0], -1);
        if (tok->fim[k] < 0 && fim_keys[k][1]) tok->fim[k] = special_id(tok, f, fim_keys[k][1], -1);
        if (tok->fim[k] >= 0) tok->attr[tok->fim[k]] |= TA_CONTROL;
    }
    tok->add_bos = gguf_get_bool(f, "tokenizer.ggml.add_bos_token", tok->add_bos) || tok->force_add_bos;
    tok->add_eos = gguf_get_bool(f, "tokenizer.ggml.add_eos_token", false);
    tok->add_space_prefix = gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", tok->add_space_prefix);
    if (tok->add_bos && tok->bos < 0) tok->add_bos = false;
    if (tok->add_eos && tok->eos < 0) tok->add_eos = false;
    if ((rc = load_specials(tok, f)) < 0 || (rc = load_pieces(tok)) < 0) goto fail;
    *out = tok;
    return 0;
fail:
    if (rc == -ERR_NOMEM) snprintf(why, why_len, "out of memory loading the vocabulary");
    tokenizer_free(tok);
    return rc;
}

void tokenizer_free(struct tokenizer *tok) {
    if (!tok) return;
    strmap_free(&tok->vocab);
    free(tok->text);
    free(tok->text_off);
    free(tok->piece);
    free(tok->piece_off);
    free(tok->scores);
    free(tok->attr);
    free(tok->special);
    free(tok->merges);
    free(tok->extra_text);
    free(tok);
}

/* ---- special tokens in the text ---- */

/* A stretch of the input: raw text to tokenize, or a special token already found. */
struct frag {
    size_t off, len;
    int32_t token; /* -1: raw text */
};

struct frags {
    struct frag *v;
    size_t n, cap;
};

static bool frags_push(struct frags *a, struct frag f) {
    if (!grow_for_one(&a->v, a->n, &a->cap, sizeof *a->v)) return false;
    a->v[a->n++] = f;
    return true;
}

/* Split the raw fragments of *cur at every occurrence of special token id, into *next. */
static bool split_on(const struct tokenizer *tok, int32_t id, const char *text, struct frags *cur,
                     struct frags *next) {
    const char *t = text_of(tok, id);
    size_t tl = text_len(tok, id);
    uint16_t a = tok->attr[id];
    next->n = 0;
    for (size_t i = 0; i < cur->n; i++) {
        struct frag fr = cur->v[i];
        if (fr.token >= 0 || fr.len < tl) {
            if (!frags_push(next, fr)) return false;
            continue;
        }
        size_t off = fr.off, end = fr.off + fr.len;
        const char *m;
        while (off < end && (m = memmem(text + off, end - off, t, tl))) {
            size_t mo = (size_t)(m - text), left = mo - off;
            if (a & TA_LSTRIP)
                while (left && isspace((unsigned char)text[off + left - 1])) left--;
            if (left && !frags_push(next, (struct frag){off, left, -1})) return false;
            if (!frags_push(next, (struct frag){mo, tl, id})) return false;
            off = mo + tl;
            if (a & TA_RSTRIP)
                while (off < end && isspace((unsigned char)text[off])) off++;
        }
        if (off < end && !frags_push(next, (struct frag){off, end - off, -1})) return false;
    }
    return true;
}

/* Longest special tokens first, each over the whole text, as the reference does; without
 * parse_special control and unknown tokens are not looked for (user-defined ones are). */
static bool partition(const struct tokenizer *tok, const char *text, size_t len, bool parse_special,
                      struct frags *out) {
    struct frags other = {0};
    out->n = 0;
    if (!len) return true; /* no fragment at all: an empty text gets no SPM space prefix either */
    bool ok = frags_push(out, (struct frag){0, len, -1});
    if (!ok || (!parse_special && !tok->has_plain_special)) return ok;
    /* Which byte pairs occur: most special tokens can be skipped without a scan. */
    uint8_t *pairs = calloc(65536 / 8, 1);
    if (!pairs) return false;
    for (size_t i = 0; i + 1 < len; i++) {
        unsigned p = (unsigned char)text[i] << 8 | (unsigned char)text[i + 1];
        pairs[p >> 3] |= (uint8_t)(1u << (p & 7));
    }
    for (size_t k = 0; k < tok->n_special && ok; k++) {
        int32_t id = tok->special[k];
        if (!parse_special && (tok->attr[id] & (TA_CONTROL | TA_UNKNOWN))) continue;
        const char *t = text_of(tok, id);
        if (text_len(tok, id) >= 2) {
            unsigned p = (unsigned char)t[0] << 8 | (unsigned char)t[1];
            if (!(pairs[p >> 3] & (1u << (p & 7)))) continue;
        }
        ok = split_on(tok, id, text, out, &other);
        struct frags tmp = *out;
        *out = other;
        other = tmp;
    }
    free(pairs);
    free(other.v);
    return ok;
}

/* ---- encoding ---- */

static int encode(const struct tokenizer *tok, const char *text, size_t len, bool add_special,
                  bool parse_special, struct ids *out) {
    if (!text && len) return -ERR_INVAL;
    struct frags fr = {0};
    if (!partition(tok, text, len, parse_special, &fr)) {
        free(fr.v);
        return -ERR_NOMEM;
    }
    if (add_special && tok->add_bos) ids_push(out, tok->bos);
    bool prev_special = true; /* SPM: the text's start counts as after a special token */
    for (size_t i = 0; i < fr.n && !out->oom; i++) {
        if (fr.v[i].token >= 0) {
            ids_push(out, fr.v[i].token);
            prev_special = true;
        } else if (tok->model == TOKENIZER_SPM) {
            spm_encode(tok, text + fr.v[i].off, fr.v[i].len, tok->add_space_prefix && prev_special, out);
            prev_special = false;
        } else {
            bpe_encode(tok, text + fr.v[i].off, fr.v[i].len, out);
        }
    }
    if (add_special && tok->add_eos) ids_push(out, tok->eos);
    free(fr.v);
    return out->oom ? -ERR_NOMEM : 0;
}

int tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t *out, size_t n_max, size_t *n_out) {
    struct ids ids = {0};
    *n_out = 0;
    int rc = encode(tok, text, len, add_special, parse_special, &ids);
    if (rc == 0) {
        *n_out = ids.n;
        size_t k = ids.n < n_max ? ids.n : n_max;
        if (k) memcpy(out, ids.v, k * sizeof *out);
        if (ids.n > n_max) rc = -ERR_TOOBIG;
    }
    free(ids.v);
    return rc;
}

int tokenizer_encode_alloc(const struct tokenizer *tok, const char *text, size_t len,
                           bool add_special, bool parse_special, int32_t **out, size_t *n_out) {
    struct ids ids = {0};
    int rc = encode(tok, text, len, add_special, parse_special, &ids);
    if (rc < 0 || !ids.n) {
        free(ids.v);
        ids.v = NULL;
        ids.n = 0;
    }
    *out = ids.v;
    *n_out = ids.n;
    return rc;
}

/* ---- pieces and decoding ---- */

const char *tokenizer_token_piece(const struct tokenizer *tok, int32_t id, bool special, size_t *len) {
    *len = 0;
    if (id < 0 || id >= tok->n_vocab) return "";
    if (!special && (tok->attr[id] & (TA_CONTROL | TA_UNKNOWN))) return "";
    *len = tok->piece_off[id + 1] - tok->piece_off[id];
    return tok->piece + tok->piece_off[id];
}

size_t tokenizer_max_piece(const struct tokenizer *tok) { return tok->max_piece; }

const char *tokenizer_token_text(const struct tokenizer *tok, int32_t id, size_t *len) {
    if (id < 0 || id >= tok->n_vocab) { *len = 0; return ""; }
    *len = text_len(tok, id);
    return text_of(tok, id);
}

int32_t tokenizer_find_token(const struct tokenizer *tok, const char *text, size_t len) {
    int32_t id = strmap_get(&tok->vocab, text, len);
    return id < tok->n_vocab ? id : -1;
}

int64_t tokenizer_decode(const struct tokenizer *tok, const int32_t *ids, size_t n, bool remove_special,
                         bool special, char *buf, size_t buf_len) {
    bool strip = tok->add_space_prefix;
    if (remove_special && tok->add_bos && n && ids[0] == tok->bos) {
        strip = false; /* as the reference: text after a BOS keeps its first space */
        ids++;
        n--;
    }
    if (remove_special && tok->add_eos && n && ids[n - 1] == tok->eos) n--;
    size_t o = 0;
    bool fits = true;
    for (size_t i = 0; i < n; i++) {
        size_t pl;
        const char *p = tokenizer_token_piece(tok, ids[i], special, &pl);
        if (strip && pl && p[0] == ' ') { p++; pl--; }
        strip = false;
        size_t k = o < buf_len ? (pl < buf_len - o ? pl : buf_len - o) : 0;
        memcpy(buf + o, p, k);
        if (k < pl) fits = false;
        o += pl;
    }
    return fits ? (int64_t)o : -ERR_TOOBIG;
}

/* ---- properties ---- */

enum tokenizer_model tokenizer_model(const struct tokenizer *tok) { return tok->model; }
int32_t tokenizer_n_vocab(const struct tokenizer *tok) { return tok->n_vocab; }
int32_t tokenizer_bos(const struct tokenizer *tok) { return tok->bos; }
int32_t tokenizer_eos(const struct tokenizer *tok) { return tok->eos; }
int32_t tokenizer_eot(const struct tokenizer *tok) { return tok->eot; }
int32_t tokenizer_fim(const struct tokenizer *tok, enum tokenizer_fim which) {
    return (unsigned)which < TOKENIZER_FIM_KINDS ? tok->fim[which] : -1;
}
bool tokenizer_add_bos(const struct tokenizer *tok) { return tok->add_bos; }
bool tokenizer_add_eos(const struct tokenizer *tok) { return tok->add_eos; }
bool tokenizer_is_eog(const struct tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_vocab && (tok->attr[id] & TA_EOG);
}
bool tokenizer_is_control(const struct tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_vocab && (tok->attr[id] & (TA_CONTROL | TA_UNKNOWN));
}
size_t tokenizer_mem_size(const struct tokenizer *tok) {
    size_t n = (size_t)tok->n_vocab;
    return sizeof *tok + tok->text_off[n] + tok->piece_off[n] + 2 * (n + 1) * sizeof(uint64_t) +
           n * (sizeof *tok->scores + sizeof *tok->attr) + tok->vocab.cap * sizeof *tok->vocab.slots +
           tok->n_special * sizeof *tok->special + tok->merges_cap * sizeof *tok->merges +
           (size_t)(tok->n_symbols - tok->n_vocab) * 16;
}

const char *tokenizer_pre_name(const struct tokenizer *tok) { return tok->pre_name; }
