/* draft_model.h: a small model that drafts tokens for speculative decoding (sched.h): given a
 * sequence's history it proposes the next few tokens greedily, and the served model verifies them
 * in one step (engine_ops.draft).
 *
 * It has its own weights, forward context (the same number of compute threads as the served
 * model's, used only while the step's worker runs it, before or after the served model's forward)
 * and its own KV memory (n_cells cells for sequence ids [0, n_seq_max), the served memory's ids),
 * sized once at load. Per sequence id it remembers which tokens its memory holds, so a call only
 * feeds what changed since the last one (normally the accepted tokens of one step); a new history
 * on the same id (the id was reused) drops the part that differs. When its memory is full it drops
 * other sequences' cells (a draft is a guess: nothing is lost but speed).
 *
 * Its vocabulary must be the served model's (the same count and every token the same bytes):
 * draft_model_load refuses another with a message naming the first difference.
 *
 *   struct draft_model *d;  char why[256];
 *   if (draft_model_load(&d, "draft.gguf", target_tok, &cfg, why, sizeof why) < 0) ... why ...;
 *   int32_t out[8];
 *   int32_t n = draft_model_run(d, seq, history, n_history, 8, 0.75f, out);   // worker thread
 *   draft_model_free(d);
 */
#ifndef UVLM_SCHED_DRAFT_MODEL_H
#define UVLM_SCHED_DRAFT_MODEL_H

#include <stddef.h>
#include <stdint.h>

struct tokenizer;
struct draft_model;

struct draft_model_config {
    int64_t n_cells;      /* KV cells for all sequences together */
    int32_t n_seq_max;    /* sequence ids */
    int32_t n_ctx;        /* longest history + draft */
    int32_t batch_tokens; /* most history tokens fed per forward */
    int n_threads;        /* compute threads (<= 0: all cores) */
    int64_t yield_us;     /* forward_config.yield_us */
};

/* 0, or the loaders' errors with why; -ERR_FORMAT when the vocabulary differs from target's or
 * the model's memory cannot drop a sequence's tail (a recurrent model cannot draft). */
int draft_model_load(struct draft_model **out, const char *path, const struct tokenizer *target,
                     const struct draft_model_config *cfg, char *why, size_t why_len);
void draft_model_free(struct draft_model *d);

/* Up to n_max greedy tokens after tokens[0..n) (the history of sequence seq) into out, stopping
 * before a token whose probability is below p_min and after an end-of-generation token. Returns
 * how many (0 on any error: none). */
int32_t draft_model_run(struct draft_model *d, int32_t seq, const int32_t *tokens, int32_t n, int32_t n_max,
                        float p_min, int32_t *out);

/* Bytes of its weights, memory and buffers (for the startup log). */
size_t draft_model_bytes(const struct draft_model *d);

#endif
