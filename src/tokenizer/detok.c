/* detok.c: streaming detokenization (see tokenizer.h): pieces go out as whole, valid UTF-8
 * characters; an incomplete one waits in d->held for the bytes the next piece brings. */
#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"
#include "common/err.h"

#include <string.h>

#define REPLACEMENT_UTF8 "\xEF\xBF\xBD"

void detok_init(struct detok *d, const struct tokenizer *tok, bool special, bool strip_space) {
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->special = special;
    d->strip_space = strip_space && tok->add_space_prefix;
}

/* Copy the valid characters of s[0..n) to out, invalid bytes as U+FFFD; an incomplete character
 * at the end goes to d->held unless final. Returns the bytes written. */
static size_t emit(struct detok *d, const unsigned char *s, size_t n, bool final, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int k = utf8_valid_len(s + i, n - i);
        if (k == 0 && !final) {
            memcpy(d->held, s + i, n - i);
            d->n_held = (uint8_t)(n - i);
            return o;
        }
        if (k <= 0) {
            memcpy(out + o, REPLACEMENT_UTF8, 3);
            o += 3;
            i += 1;
            continue;
        }
        memcpy(out + o, s + i, (size_t)k);
        o += (size_t)k;
        i += (size_t)k;
    }
    return o;
}

size_t detok_buf_size(const struct tokenizer *tok) { return 3 * (tok->max_piece + DETOK_HOLD); }

int detok_push(struct detok *d, int32_t id, char *out, size_t out_len) {
    size_t pl;
    const char *p = tokenizer_token_piece(d->tok, id, d->special, &pl);
    /* Worst case every byte becomes a 3-byte U+FFFD. */
    if (out_len < 3 * (pl + d->n_held)) return -ERR_TOOBIG;
    /* Only the very first piece loses its space (after a BOS the text keeps it, as in the
     * reference's detokenizer). */
    if (d->strip_space && pl && p[0] == ' ') { p++; pl--; }
    d->strip_space = false;
    unsigned char buf[DETOK_HOLD + 64];
    size_t n_held = d->n_held;
    d->n_held = 0;
    if (!n_held) return (int)emit(d, (const unsigned char *)p, pl, false, out);
    /* Complete the held character with the piece's first bytes, then the rest in place. */
    memcpy(buf, d->held, n_held);
    size_t take = pl < DETOK_HOLD ? pl : DETOK_HOLD;
    memcpy(buf + n_held, p, take);
    size_t n = n_held + take, i = 0, o = 0;
    /* Characters that start inside the held bytes. */
    while (i < n_held) {
        int k = utf8_valid_len(buf + i, n - i);
        if (k == 0) { /* still incomplete: the whole piece was shorter than the rest needed */
            memcpy(d->held, buf + i, n - i);
            d->n_held = (uint8_t)(n - i);
            return (int)o;
        }
        if (k < 0) {
            memcpy(out + o, REPLACEMENT_UTF8, 3);
            o += 3;
            i += 1;
        } else {
            memcpy(out + o, buf + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        }
    }
    size_t used = i - n_held; /* bytes of the piece consumed so far */
    return (int)(o + emit(d, (const unsigned char *)p + used, pl - used, false, out + o));
}

int detok_flush(struct detok *d, char *out, size_t out_len) {
    if (out_len < 3 * (size_t)d->n_held) return -ERR_TOOBIG;
    size_t n = emit(d, d->held, d->n_held, true, out);
    d->n_held = 0;
    return (int)n;
}
