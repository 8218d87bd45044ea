/* bigram.c: binary max-heap of merge candidates (see bigram.h). */
#include "tokenizer/bigram.h"
#include "tokenizer/internal.h"

#include <stdlib.h>

static bool before(const struct bigram *a, const struct bigram *b) {
    return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

bool bigram_push(struct bigram_heap *h, struct bigram b) {
    if (!grow_for_one(&h->v, h->n, &h->cap, sizeof *h->v)) return false;
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&b, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
    return true;
}

struct bigram bigram_pop(struct bigram_heap *h) {
    struct bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && before(&h->v[c + 1], &h->v[c])) c++;
        if (!before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}
