/* stream_text.c: stop strings and the safe-to-send part of growing text (see stream_text.h). */
#include "api/stream_text.h"

#include <stdlib.h>
#include <string.h>

#include "api/render.h"
#include "common/err.h"

void stream_text_init(struct stream_text *st, const char *const *stop, size_t n_stop) {
    memset(st, 0, sizeof *st);
    st->stop = stop;
    st->n_stop = n_stop;
    for (size_t i = 0; i < n_stop; i++) {
        size_t l = strlen(stop[i]);
        ASSERT(l > 0);
        if (l > st->max_stop_len) st->max_stop_len = l;
    }
}

void stream_text_free(struct stream_text *st) {
    free(st->text);
    memset(st, 0, sizeof *st);
}

static int grow(struct stream_text *st, size_t need) {
    if (need <= st->cap) return 0;
    size_t cap = st->cap ? st->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) return -ERR_NOMEM;
        cap *= 2;
    }
    char *t = realloc(st->text, cap);
    if (!t) return -ERR_NOMEM;
    st->text = t;
    st->cap = cap;
    return 0;
}

int stream_text_append(struct stream_text *st, const char *piece, size_t len) {
    if (st->stopped || len == 0) return 0;
    if (len > SIZE_MAX - st->len - 1 || grow(st, st->len + len + 1) < 0) return -ERR_NOMEM;
    /* A stop string that ends in the new bytes starts at most max_stop_len - 1 bytes before. */
    size_t from = st->len > st->max_stop_len ? st->len - st->max_stop_len + 1 : 0;
    memcpy(st->text + st->len, piece, len);
    st->len += len;
    st->text[st->len] = '\0';
    size_t cut = st->len;
    for (size_t i = 0; i < st->n_stop; i++) {
        const char *hit = memmem(st->text + from, st->len - from, st->stop[i], strlen(st->stop[i]));
        if (hit && (size_t)(hit - st->text) < cut) {
            cut = (size_t)(hit - st->text);
            st->stopping_word = st->stop[i];
        }
    }
    if (st->stopping_word) {
        st->stopped = true;
        st->len = cut;
        st->text[cut] = '\0';
    }
    return 0;
}

/* The longest tail of text[0..len) that is a proper prefix of some stop string. */
static size_t stop_prefix_tail(const struct stream_text *st) {
    size_t best = 0;
    for (size_t i = 0; i < st->n_stop; i++) {
        size_t sl = strlen(st->stop[i]);
        for (size_t k = sl - 1 < st->len ? sl - 1 : st->len; k > best; k--)
            if (memcmp(st->text + st->len - k, st->stop[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

const char *stream_text_take(struct stream_text *st, bool final, size_t *n) {
    size_t end = st->len;
    if (!final && !st->stopped) {
        end -= stop_prefix_tail(st);
        if (end < st->sent) end = st->sent;
        end = st->sent + utf8_complete_len(st->text + st->sent, end - st->sent);
    }
    if (end < st->sent) end = st->sent;   /* nothing new (the text never shrinks below sent) */
    const char *out = st->text ? st->text + st->sent : "";
    *n = end - st->sent;
    st->sent = end;
    return out;
}
