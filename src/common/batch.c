#include "common/batch.h"
#include "common/err.h"

#include <stdlib.h>

int batch_init(struct batch *b, int32_t capacity) {
    ASSERT(capacity > 0);
    *b = (struct batch){.capacity = capacity};
    b->token = calloc((size_t)capacity, sizeof *b->token);
    b->pos = calloc((size_t)capacity, sizeof *b->pos);
    b->seq = calloc((size_t)capacity, sizeof *b->seq);
    b->want_logits = calloc((size_t)capacity, sizeof *b->want_logits);
    b->want_hidden = calloc((size_t)capacity, sizeof *b->want_hidden);
    if (!b->token || !b->pos || !b->seq || !b->want_logits || !b->want_hidden) {
        batch_free(b);
        return -ERR_NOMEM;
    }
    return 0;
}

void batch_free(struct batch *b) {
    free(b->token);
    free(b->pos);
    free(b->seq);
    free(b->want_logits);
    free(b->want_hidden);
    *b = (struct batch){0};
}

void batch_add(struct batch *b, int32_t token, int32_t pos, int32_t seq, bool want_logits) {
    ASSERT(b->n_tokens < b->capacity);
    int32_t i = b->n_tokens++;
    b->token[i] = token;
    b->pos[i] = pos;
    b->seq[i] = seq;
    b->want_logits[i] = want_logits;
    b->want_hidden[i] = false;
    b->n_outputs += want_logits;
}

void batch_add_hidden(struct batch *b, int32_t token, int32_t pos, int32_t seq) {
    batch_add(b, token, pos, seq, false);
    b->want_hidden[b->n_tokens - 1] = true;
    b->n_hidden++;
}
