#include "model/eval.h"
#include "common/err.h"

static bool topk_before(struct eval_topk a, struct eval_topk b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

void eval_topk(const float *logits, int32_t n, int32_t k, struct eval_topk *out) {
    ASSERT(k > 0 && k <= n);
    int32_t have = 0;
    for (int32_t i = 0; i < n; i++) {
        struct eval_topk c = {i, logits[i]};
        if (have == k && !topk_before(c, out[k - 1])) continue;
        int32_t j = have < k ? have++ : k - 1;  /* insertion: the list stays sorted */
        while (j > 0 && topk_before(c, out[j - 1])) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = c;
    }
}

/* One forward of b (placed in mem first); on error sequence 0 is removed. */
static int run_batch(const struct model *m, struct forward_ctx *fc, struct memory *mem, const struct batch *b) {
    int rc = memory_reserve(mem, b);
    if (rc == 0) rc = model_forward(m, fc, mem, b);
    if (rc < 0) memory_seq_rm(mem, 0, 0, -1);
    return rc;
}

int eval_run(const struct model *m, struct forward_ctx *fc, struct memory *mem, const int32_t *tokens,
             int32_t n_tokens, int32_t chunk, int32_t n_gen, int32_t *greedy, eval_logits_cb cb, void *arg) {
    int32_t n_vocab = m->hp.n_vocab;
    if (n_tokens <= 0 || chunk <= 0) return -ERR_INVAL;
    struct batch b;
    int rc = batch_init(&b, chunk);
    if (rc < 0) return rc;
    struct eval_topk best = {0, 0};
    for (int32_t p0 = 0; p0 < n_tokens && rc == 0; p0 += chunk) {
        batch_clear(&b);
        for (int32_t p = p0; p < n_tokens && p < p0 + chunk; p++) batch_add(&b, tokens[p], p, 0, true);
        rc = run_batch(m, fc, mem, &b);
        for (int32_t r = 0; rc == 0 && r < b.n_tokens; r++) cb(arg, p0 + r, fc->logits + (int64_t)r * n_vocab);
        if (rc == 0) eval_topk(fc->logits + (int64_t)(b.n_tokens - 1) * n_vocab, n_vocab, 1, &best);
    }
    for (int32_t i = 0; i < n_gen && rc == 0; i++) {
        greedy[i] = best.id;
        batch_clear(&b);
        batch_add(&b, greedy[i], n_tokens + i, 0, true);
        rc = run_batch(m, fc, mem, &b);
        if (rc == 0) {
            cb(arg, n_tokens + i, fc->logits);
            eval_topk(fc->logits, n_vocab, 1, &best);
        }
    }
    memory_seq_rm(mem, 0, 0, -1);
    batch_free(&b);
    return rc;
}
