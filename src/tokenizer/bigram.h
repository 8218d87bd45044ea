/* bigram.h: the priority queue of candidate merges both BPE flavours use. A bigram is a pair of
 * adjacent symbols (left, right) whose merge has priority prio: SentencePiece uses the merged
 * token's score, byte-level BPE minus the merge rank. The highest priority pops first, ties go to
 * the leftmost pair. A queued pair may go stale (a side merged elsewhere first): the caller
 * checks that the two symbols still span size bytes when it pops it.
 *
 *   struct bigram_heap h = {0};
 *   if (!bigram_push(&h, (struct bigram){score, l, r, size})) ...out of memory...;
 *   while (h.n) { struct bigram b = bigram_pop(&h); ... }
 *   free(h.v);
 */
#ifndef UVLM_TOKENIZER_BIGRAM_H
#define UVLM_TOKENIZER_BIGRAM_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

struct bigram {
    double prio;
    int32_t left, right;
    uint32_t size; /* bytes of left + right when queued */
};

struct bigram_heap {
    struct bigram *v;
    size_t n, cap;
};

/* false when growing the heap failed (nothing pushed). */
bool bigram_push(struct bigram_heap *h, struct bigram b);
/* Requires h->n > 0. */
struct bigram bigram_pop(struct bigram_heap *h);

#endif
