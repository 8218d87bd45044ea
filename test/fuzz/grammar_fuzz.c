/* grammar_fuzz.c: libFuzzer target for the GBNF parser and matcher (src/sampler/grammar.c). The
 * input's first byte seeds the token choices, the rest is grammar text. Whatever the text:
 * grammar_compile compiles or refuses with a reason; a compiled grammar then generates up to 48
 * tokens over a small vocabulary (single bytes, multi-byte and partial UTF-8 pieces, a control
 * and an end-of-generation token), and at every step each allowed token is accepted by a copy of
 * the state, a refused one is refused, and the mask's count is its number of bits.
 *   make fuzz FUZZ_TARGETS=grammar
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "sampler/grammar.h"

#define FZ_EXTRA 12
static const char *const fz_extra[FZ_EXTRA] = {"ab", "\"}", "{\"", "true", "12", " ", "\xc3", "\xa9x", "\xe2\x82\xac",
                                              "<|ctl|>", "", "null,"};
static const uint8_t fz_kinds[FZ_EXTRA] = {1, 1, 1, 1, 1, 1, 1, 1, 1, GRAMMAR_TOKEN_CONTROL, GRAMMAR_TOKEN_EOG, 1};

static struct grammar_vocab *fz_vocab(void) {
    static struct grammar_vocab *v;
    if (v) return v;
    static char bytes[256];
    const char *pieces[256 + FZ_EXTRA];
    uint32_t lens[256 + FZ_EXTRA];
    uint8_t kinds[256 + FZ_EXTRA];
    for (int i = 0; i < 256; i++) bytes[i] = (char)i, pieces[i] = &bytes[i], lens[i] = 1, kinds[i] = GRAMMAR_TOKEN_TEXT;
    for (int i = 0; i < FZ_EXTRA; i++)
        pieces[256 + i] = fz_extra[i], lens[256 + i] = (uint32_t)strlen(fz_extra[i]), kinds[256 + i] = fz_kinds[i];
    if (grammar_vocab_create(&v, 256 + FZ_EXTRA, pieces, lens, kinds)) abort();
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    struct grammar_vocab *v = fz_vocab();
    uint32_t rng = data[0] * 2654435761u + 1;
    struct grammar *g;
    char why[256];
    int rc = grammar_compile(&g, v, (const char *)data + 1, size - 1, why, sizeof why);
    if (rc) {
        if (!why[0]) abort(); /* a refusal always says why */
        return 0;
    }
    int32_t n = grammar_vocab_n_vocab(v);
    size_t words = grammar_mask_words(v);
    uint64_t *m = malloc(words * sizeof *m);
    struct grammar_state *st;
    if (grammar_state_create(&st, g)) abort();
    for (int step = 0; step < 48; step++) {
        int32_t count = grammar_state_mask(st, m);
        if (count < 0) break; /* an ambiguous grammar outgrew the matcher's bounds: refused, not wrong */
        int32_t bits = 0, pick = -1, k = 0;
        rng = rng * 1103515245u + 12345u;
        int32_t want = count ? (int32_t)(rng % (uint32_t)count) : -1;
        for (int32_t t = 0; t < n; t++) {
            bool allowed = (m[t >> 6] >> (t & 63)) & 1;
            bits += allowed;
            if (allowed && k++ == want) pick = t;
            if (t % 7 != step % 7) continue; /* a sample of the vocabulary, checked one by one */
            struct grammar_state *c;
            if (grammar_state_clone(&c, st)) abort();
            int r = grammar_state_accept(c, t);
            if (allowed != (r == 0) && (r == 0 || r == -ERR_INVAL)) { /* other errors: bounds */
                fprintf(stderr, "step %d token %d: mask %d, accept %d\n", step, t, allowed, r);
                abort();
            }
            grammar_state_free(c);
        }
        if (bits != count) {
            fprintf(stderr, "step %d: count %d, %d bits\n", step, count, bits);
            abort();
        }
        if (pick < 0) break;
        rc = grammar_state_accept(st, pick);
        if (rc == -ERR_TOOBIG || rc == -ERR_NOMEM) break; /* the real stacks outgrew the bounds */
        if (rc) {
            fprintf(stderr, "step %d: allowed token %d refused (%d)\n", step, pick, rc);
            abort();
        }
        if (pick == 256 + 10) break; /* end of generation */
    }
    grammar_state_free(st);
    free(m);
    grammar_unref(g);
    return 0;
}
