/* batch.h: the unit of work the scheduler hands to the model (like llama.cpp's llama_batch).
 *
 * A batch is n_tokens entries from any number of sequences at any positions. Entry i says: feed
 * token[i] at position pos[i] of sequence seq[i], and if want_logits[i] keep the logits of that
 * position (the model's output has n_outputs rows, in entry order: the k-th entry with
 * want_logits gets row k).
 * An entry may instead want its final hidden state (batch_add_hidden: the last layer's output
 * after the output norm, n_embd floats, what embeddings are pooled from), in rows of their own.
 * Entries of one sequence appear in increasing position order. The arrays are owned by whoever
 * called batch_init and sized once (capacity); filling a batch never allocates.
 *
 *   struct batch b;
 *   batch_init(&b, 512);
 *   batch_clear(&b);
 *   batch_add(&b, tok, pos, seq, true);
 *   ... memory_reserve(mem, &b); model_forward(model, fc, mem, &b) ...
 *   batch_free(&b);
 */
#ifndef UVLM_BATCH_H
#define UVLM_BATCH_H

#include <stdbool.h>
#include <stdint.h>

struct batch {
    int32_t n_tokens;
    int32_t capacity;
    int32_t *token;       /* [capacity] token ids */
    int32_t *pos;         /* [capacity] position within its sequence */
    int32_t *seq;         /* [capacity] sequence id */
    bool *want_logits;    /* [capacity] keep this position's logits */
    bool *want_hidden;    /* [capacity] keep this position's final hidden state */
    int32_t n_outputs;    /* entries with want_logits (set by batch_add) */
    int32_t n_hidden;     /* entries with want_hidden (set by batch_add_hidden) */
};

int batch_init(struct batch *b, int32_t capacity); /* 0 or -ERR_NOMEM */
void batch_free(struct batch *b);
static inline void batch_clear(struct batch *b) { b->n_tokens = 0; b->n_outputs = 0; b->n_hidden = 0; }
/* Append one entry; asserts there is room. */
void batch_add(struct batch *b, int32_t token, int32_t pos, int32_t seq, bool want_logits);
/* Append one entry that wants its final hidden state (not its logits). */
void batch_add_hidden(struct batch *b, int32_t token, int32_t pos, int32_t seq);

#endif
