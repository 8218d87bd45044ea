/* spm.c: SentencePiece BPE (tokenizer.ggml.model "llama"): spaces become U+2581 (and one is
 * prefixed when asked), then the text's characters are merged pairwise, always the adjacent pair
 * whose concatenation is the token with the highest score (leftmost on ties), until no pair is a
 * token; a character left that is not a token falls back to its bytes' <0xNN> tokens. The queue is
 * a heap (bigram.h): O(n log n), no rescans. */
#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"
#include "tokenizer/bigram.h"

#include <stdlib.h>
#include <string.h>

#define SPACE_ESC "\xE2\x96\x81" /* U+2581 LOWER ONE EIGHTH BLOCK */

struct sym {
    uint32_t off, n; /* bytes of the escaped text; n == 0: merged away */
    int32_t prev, next;
};

struct spm_work {
    const struct tokenizer *tok;
    const char *s;
    struct sym *syms;
    struct bigram_heap heap;
    struct ids *out;
};

/* The token whose text is s[off..off+n), or -1 (pairs longer than any token are not looked up). */
static int32_t lookup(const struct spm_work *w, uint32_t off, uint32_t n) {
    if (n > w->tok->max_token_len) return -1;
    return strmap_get(&w->tok->vocab, w->s + off, n);
}

static void add_bigram(struct spm_work *w, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const struct sym *l = &w->syms[left], *r = &w->syms[right];
    int32_t id = lookup(w, l->off, l->n + r->n);
    if (id < 0) return;
    if (!bigram_push(&w->heap, (struct bigram){w->tok->scores[id], left, right, l->n + r->n}))
        w->out->oom = true;
}

static void emit_symbol(struct spm_work *w, const struct sym *s) {
    int32_t id = lookup(w, s->off, s->n);
    if (id >= 0) {
        ids_push(w->out, id);
        return;
    }
    /* Only single characters can be left that are not tokens: fall back to their bytes. */
    for (uint32_t i = 0; i < s->n; i++) {
        int32_t b = w->tok->byte_token[(unsigned char)w->s[s->off + i]];
        if (b < 0) b = w->tok->unk;
        if (b >= 0) ids_push(w->out, b);
    }
}

/* Merge the characters of s[off..off+len) and emit the tokens. */
static void merge_chunk(struct spm_work *w, uint32_t off, uint32_t len) {
    struct sym *syms = w->syms;
    int32_t n = 0;
    /* One symbol per character (by the lead byte's announced length, as the reference reads it). */
    for (uint32_t o = off, end = off + len; o < end; n++) {
        uint32_t cl = (uint32_t)utf8_seq_len((unsigned char)w->s[o]);
        if (cl > end - o) cl = end - o;
        syms[n] = (struct sym){o, cl, n - 1, o + cl == end ? -1 : n + 1};
        o += cl;
    }
    w->heap.n = 0;
    for (int32_t i = 1; i < n; i++) add_bigram(w, i - 1, i);
    while (w->heap.n && !w->out->oom) {
        struct bigram b = bigram_pop(&w->heap);
        struct sym *l = &syms[b.left], *r = &syms[b.right];
        if (!l->n || !r->n || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) syms[r->next].prev = b.left;
        add_bigram(w, l->prev, b.left);
        add_bigram(w, b.left, l->next);
    }
    for (int32_t i = 0; i != -1; i = syms[i].next) emit_symbol(w, &syms[i]);
}

static bool is_space_esc(const char *s, size_t off, size_t len) {
    return off + 3 <= len && !memcmp(s + off, SPACE_ESC, 3);
}

void spm_encode(const struct tokenizer *tok, const char *text, size_t len, bool prefix_space,
                struct ids *out) {
    /* Escape: every ' ' becomes U+2581 (3 bytes). */
    size_t n_spaces = prefix_space;
    for (size_t i = 0; i < len; i++) n_spaces += text[i] == ' ';
    size_t elen = len + prefix_space + 2 * n_spaces;
    if (!elen) return;
    if (elen > UINT32_MAX / 2) { out->oom = true; return; }
    char *s = malloc(elen);
    struct sym *syms = malloc(elen * sizeof *syms);
    struct spm_work w = {tok, s, syms, {0}, out};
    if (!s || !syms) {
        out->oom = true;
        goto done;
    }
    size_t o = 0;
    if (prefix_space) { memcpy(s, SPACE_ESC, 3); o = 3; }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') { memcpy(s + o, SPACE_ESC, 3); o += 3; }
        else s[o++] = text[i];
    }
    /* When no token has a U+2581 after another character (true of SentencePiece vocabularies,
     * which split on whitespace), no merge crosses the start of a run of U+2581: each word merges
     * on its own, in small heaps, with the same result as one big pass. */
    size_t start = 0;
    if (tok->spm_word_split) {
        for (size_t i = 1; i < elen; i++) {
            if (is_space_esc(s, i, elen) && !(i >= 3 && is_space_esc(s, i - 3, elen)) && i > start) {
                merge_chunk(&w, (uint32_t)start, (uint32_t)(i - start));
                start = i;
            }
        }
    }
    merge_chunk(&w, (uint32_t)start, (uint32_t)(elen - start));
done:
    free(s);
    free(syms);
    free(w.heap.v);
}
