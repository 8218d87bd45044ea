/* bpe.c: BPE with merge ranks: text -> code points -> words (pretok.h) -> each byte of a word as
 * its GPT-2 printable character ("gpt2"; raw UTF-8 with spaces as U+2581 for "gemma4") -> merges
 * by rank, lowest first.
 *
 * Symbols carry the id of their text in tok->vocab (real tokens, or merge parts that are not
 * tokens, with ids >= n_vocab), so a merge is one lookup of the id pair. The queue is a binary
 * heap: O(n log n) per word however long, with no rescans. */
#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"
#include "tokenizer/bigram.h"
#include "gguf/gguf.h"
#include "common/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's map: printable Latin-1 bytes stand for themselves, the other 68 bytes (controls,
 * space, DEL, NBSP, soft hyphen) take code points 256.. in byte order. */
static bool byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t bpe_byte_to_cp(unsigned char b) {
    if (byte_is_printable(b)) return b;
    uint32_t n = 0;
    for (unsigned i = 0; i < b; i++) n += !byte_is_printable(i);
    return 256 + n;
}

int bpe_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable(cp) ? (int)cp : -1;
    uint32_t n = 256;
    for (unsigned b = 0; b < 256; b++)
        if (!byte_is_printable(b) && n++ == cp) return (int)b;
    return -1;
}

/* ---- merge table ---- */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static struct merge_slot *merge_find(const struct tokenizer *tok, uint64_t key) {
    size_t mask = tok->merges_cap - 1;
    for (size_t i = mix64(key) & mask;; i = (i + 1) & mask)
        if (tok->merges[i].key == key || tok->merges[i].key == UINT64_MAX) return &tok->merges[i];
}

static int32_t symbol_id(struct tokenizer *tok, const char *s, size_t len, char **extra) {
    int32_t id = strmap_get(&tok->vocab, s, len);
    if (id >= 0) return id;
    /* A merge part that is not a token: give it an id past the vocabulary. */
    memcpy(*extra, s, len);
    id = strmap_put_new(&tok->vocab, *extra, len, tok->n_symbols);
    if (id < 0) return id;
    tok->n_symbols++;
    *extra += len;
    return id;
}

int bpe_load_merges(struct tokenizer *tok, const struct gguf_file *f, char *why, size_t why_len) {
    const struct gguf_array *a = gguf_get_arr(f, "tokenizer.ggml.merges");
    static const struct gguf_array none = {.type = GGUF_STRING};
    if (!a && tok->pre == PRETOK_KIMI_K2 && !gguf_find_kv(f, "tokenizer.ggml.merges"))
        a = &none; /* Kimi K2's vocabulary has no merges: its words are looked up whole */
    if (!a || a->type != GGUF_STRING) {
        snprintf(why, why_len, "tokenizer.ggml.merges: missing or not a string array");
        return -ERR_FORMAT;
    }
    if (a->n > INT32_MAX) {
        snprintf(why, why_len, "tokenizer.ggml.merges: too many merges");
        return -ERR_FORMAT;
    }
    size_t total = 0;
    for (uint64_t i = 0; i < a->n; i++) total += a->strs[i].len;
    size_t cap = 16;
    while (cap * 7 < a->n * 10 + 16) cap *= 2;
    tok->merges = malloc(cap * sizeof *tok->merges);
    tok->extra_text = malloc(2 * total + 1);
    if (!tok->merges || !tok->extra_text) return -ERR_NOMEM;
    memset(tok->merges, 0xFF, cap * sizeof *tok->merges);
    tok->merges_cap = cap;
    char *extra = tok->extra_text;
    char *joined = malloc(total + 1);
    if (!joined) return -ERR_NOMEM;
    for (uint64_t i = 0; i < a->n; i++) {
        struct gguf_str m = a->strs[i];
        /* "left right": the separator is the first space after the first byte. */
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp) continue;
        size_t nl = (size_t)(sp - m.ptr), nr = m.len - nl - 1;
        if (!nr) continue;
        memcpy(joined, m.ptr, nl);
        memcpy(joined + nl, sp + 1, nr);
        int32_t l = symbol_id(tok, joined, nl, &extra);
        int32_t r = symbol_id(tok, joined + nl, nr, &extra);
        int32_t res = symbol_id(tok, joined, nl + nr, &extra);
        if (l < 0 || r < 0 || res < 0) { free(joined); return -ERR_NOMEM; }
        uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
        struct merge_slot *s = merge_find(tok, key);
        if (s->key == UINT64_MAX) /* the first rank of a pair wins */
            *s = (struct merge_slot){key, (int32_t)i, res};
    }
    free(joined);
    return 0;
}

/* ---- encoding ---- */

struct sym {
    uint32_t off, n; /* bytes of the encoded word; n == 0: merged away */
    int32_t prev, next, id;
};

struct bpe_work {
    const struct tokenizer *tok;
    char *enc;        /* the current word, byte-encoded */
    struct sym *syms;
    struct bigram_heap heap;
    struct ids *out;
};

static void add_bigram(struct bpe_work *w, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const struct sym *l = &w->syms[left], *r = &w->syms[right];
    if (l->id < 0 || r->id < 0) return;
    const struct merge_slot *m = merge_find(w->tok, (uint64_t)(uint32_t)l->id << 32 | (uint32_t)r->id);
    if (m->key == UINT64_MAX) return;
    if (!bigram_push(&w->heap, (struct bigram){-(double)m->rank, left, right, l->n + r->n})) w->out->oom = true;
}

static void emit_symbol(struct bpe_work *w, const struct sym *s) {
    const struct tokenizer *tok = w->tok;
    if (s->id >= 0 && s->id < tok->n_vocab) {
        ids_push(w->out, s->id);
        return;
    }
    /* Not a token: each byte that is a token on its own (raw UTF-8: its <0xNN> token); the
     * reference drops the others. */
    for (uint32_t i = 0; i < s->n; i++) {
        int32_t id = tok->raw_utf8 ? tok->byte_token[(unsigned char)w->enc[s->off + i]]
                                   : strmap_get(&tok->vocab, w->enc + s->off + i, 1);
        if (id >= 0 && id < tok->n_vocab) ids_push(w->out, id);
    }
}

static bool all_newlines(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (s[i] != '\n') return false;
    return true;
}

static void merge_word(struct bpe_work *w, size_t len) {
    const struct tokenizer *tok = w->tok;
    if (tok->ignore_merges || (tok->whole_newlines && all_newlines(w->enc, len))) {
        int32_t id = strmap_get(&tok->vocab, w->enc, len);
        if (id >= 0 && id < tok->n_vocab) {
            ids_push(w->out, id);
            return;
        }
    }
    int32_t n = 0;
    for (size_t off = 0; off < len; n++) {
        size_t cl = utf8_seq_len((unsigned char)w->enc[off]);
        if (cl > len - off) cl = len - off;
        w->syms[n] = (struct sym){(uint32_t)off, (uint32_t)cl, n - 1, off + cl == len ? -1 : n + 1,
                                  strmap_get(&tok->vocab, w->enc + off, cl)};
        off += cl;
    }
    w->heap.n = 0;
    for (int32_t i = 1; i < n; i++) add_bigram(w, i - 1, i);
    while (w->heap.n) {
        struct bigram b = bigram_pop(&w->heap);
        struct sym *l = &w->syms[b.left], *r = &w->syms[b.right];
        /* Stale when either side has changed since the pair was queued. */
        if (!l->n || !r->n || l->n + r->n != b.size) continue;
        const struct merge_slot *m = merge_find(tok, (uint64_t)(uint32_t)l->id << 32 | (uint32_t)r->id);
        l->id = m->result;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) w->syms[r->next].prev = b.left;
        add_bigram(w, l->prev, b.left);
        add_bigram(w, b.left, l->next);
    }
    for (int32_t i = 0; i != -1; i = w->syms[i].next) emit_symbol(w, &w->syms[i]);
}

void bpe_encode(const struct tokenizer *tok, const char *text, size_t len, struct ids *out) {
    if (!len) return;
    /* Code points (malformed bytes read as U+FFFD), their classes, then words. */
    uint32_t *cps = malloc(len * sizeof *cps);
    uint16_t *fl = malloc(len * sizeof *fl);
    uint32_t *ends = malloc(len * sizeof *ends), *scratch = malloc(len * sizeof *scratch);
    struct bpe_work w = {tok, NULL, NULL, {0}, out};
    size_t n = 0;
    if (!cps || !fl || !ends || !scratch) goto oom;
    for (size_t off = 0, adv; off < len; off += adv) {
        cps[n] = utf8_decode(text + off, len - off, &adv);
        if (tok->raw_utf8 && cps[n] == ' ') cps[n] = 0x2581;
        fl[n] = (uint16_t)ucp_flags(cps[n]);
        n++;
    }
    size_t n_words = pretok_split(tok->pre, cps, fl, n, ends, scratch);
    size_t longest = 0;
    for (size_t i = 0, start = 0; i < n_words; start = ends[i++])
        if (ends[i] - start > longest) longest = ends[i] - start;
    /* A code point is up to 4 bytes, each byte (byte-level) one printable character of up to 2
     * bytes and one symbol; raw UTF-8 keeps the code point's bytes as one symbol. */
    size_t per_cp = tok->raw_utf8 ? 1 : 4;
    w.enc = malloc(longest * (tok->raw_utf8 ? 4 : 8) + 1);
    w.syms = malloc((longest * per_cp + 1) * sizeof *w.syms);
    if (!w.enc || !w.syms) goto oom;
    for (size_t i = 0, start = 0; i < n_words && !out->oom; start = ends[i++]) {
        size_t elen = 0;
        for (size_t c = start; c < ends[i]; c++) {
            char u[4];
            size_t ul = utf8_encode(cps[c], u);
            if (tok->raw_utf8) {
                memcpy(w.enc + elen, u, ul);
                elen += ul;
                continue;
            }
            for (size_t k = 0; k < ul; k++) {
                const char *e = tok->byte_char[(unsigned char)u[k]];
                w.enc[elen++] = e[0];
                if (e[1]) w.enc[elen++] = e[1];
            }
        }
        merge_word(&w, elen);
    }
    goto done;
oom:
    out->oom = true;
done:
    free(cps);
    free(fl);
    free(ends);
    free(scratch);
    free(w.enc);
    free(w.syms);
    free(w.heap.v);
}
