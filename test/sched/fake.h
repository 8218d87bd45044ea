/* fake.h: test doubles for the scheduler (implemented in fake_test.c, which also tests them).
 *
 * fake memory: a bookkeeping-only KV memory implementing memory.h. Each cell remembers
 * (position, token, set of sequences sharing it); reserve writes the batch's tokens into fresh
 * cells, seq_cp shares cells, seq_save/seq_restore copy a sequence's cells to and from the host.
 * With partial_removal off it refuses partial seq_rm/seq_cp ranges like a recurrent state would.
 *
 * fake engine: the next token of a sequence is a hash of every token the *memory* says that
 * sequence holds at positions 0..pos. So a scheduler that shares the wrong prefix, forgets to
 * restore a preempted sequence or feeds a token at the wrong position produces different text,
 * and `holes` counts outputs whose history was not fully in memory. Samplers are greedy, or
 * with `random` pick a seed-dependent neighbour of the greedy token.
 *
 * recorder: a sink that stores, per owner, each choice's tokens, stop reason and counts, and
 * the global order in which choices finished.
 */
#ifndef UVLM_TEST_SCHED_FAKE_H
#define UVLM_TEST_SCHED_FAKE_H

#include "sched/sched.h"

#define FAKE_EOS 1
#define FAKE_MAX_TOKENS 512

struct memory *fake_memory_create(int64_t n_cells, int32_t n_seq_max, bool partial_removal);
/* The real KV memory (memory/kv.h) with a 1-layer, 1-wide shape: the fake engine stores each
 * token id in its cell's K row, so histories travel with cp/save/restore like real K/V. */
struct memory *fake_kv_create(int64_t n_cells, int32_t n_seq_max);
/* Gemma 3's memory (memory/split.h): a 1-layer full KV pool of n_cells and a 1-layer pool with a
 * sliding window (kv_window_cells for max_batch), the token ids in both. The fake engine hashes
 * the full pool's history and counts a hole for every position of the window (pos - window, pos]
 * the windowed pool does not hold with the same token. */
struct memory *fake_split_create(int64_t n_cells, int32_t n_seq_max, int32_t window, int32_t max_batch);
/* A hybrid's memory (memory/split.h): the real KV pool of fake_kv_create, counted, and a
 * bookkeeping-only recurrent memory (memory/recurrent.h) of n_states states. The fake engine hashes
 * the KV pool's history; the recurrent half refuses a batch that skips or repeats a position. */
struct memory *fake_hybrid_create(int64_t n_cells, int32_t n_states, int32_t n_seq_max);
/* A recurrent-like memory: one state per sequence (n_states of them), whole-sequence removal and
 * sharing only; the fake engine folds each token into the state, so a state that skipped or
 * repeated a token yields different text. */
struct memory *fake_recurrent_create(int32_t n_states, int32_t n_seq_max);
/* The next n reserves of a fake memory fail with err (to test refusals other than -ERR_NOMEM). */
void fake_memory_fail_reserves(struct memory *m, int n, int err);
/* Token held for (seq, pos) in a fake memory, -1 when none. */
int32_t fake_memory_token(const struct memory *m, int32_t seq, int32_t pos);

struct fake_engine {
    struct memory *mem;
    int32_t n_vocab;
    int32_t eos_every;       /* > 0: a history whose hash is divisible by it yields EOS */
    int fail_forwards;       /* > 0: the next forwards fail with -ERR_IO (counts down) */
    int64_t forwards, tokens_forwarded, outputs;
    int64_t holes;           /* outputs whose history was not all in memory: must stay 0 */
    int64_t samplers_live;   /* created - freed: must end at 0 */
    float *logits;           /* [batch capacity][n_vocab] */
    int32_t logits_rows;
    int32_t draft_wrong_every; /* fake_engine_draft_ops: drafts at positions divisible by it are wrong */
    int64_t draft_calls, drafts_verified;
};
struct fake_sampling {
    bool random;
    int invalid_after;       /* > 0: the sample after this many returns -ERR_NUMERIC (a NaN row) */
};

extern const struct sched_engine_ops fake_engine_ops;
/* The same with speculation: sample_draft, and a draft model (fe_draft: the engine's own next
 * tokens, wrong where draft_wrong_every says) or none (prompt lookup: config.spec_lookup). */
extern const struct sched_engine_ops fake_engine_draft_ops;
extern const struct sched_engine_ops fake_engine_lookup_ops;
void fake_engine_init(struct fake_engine *e, struct memory *mem, int32_t n_vocab, int32_t max_rows);
void fake_engine_free(struct fake_engine *e);

#define REC_MAX_CHOICES 8
struct recorder {
    int32_t tokens[REC_MAX_CHOICES][FAKE_MAX_TOKENS];
    int32_t n_tokens[REC_MAX_CHOICES];
    int done[REC_MAX_CHOICES];              /* 1 + enum sched_stop once ended */
    struct sched_counts counts[REC_MAX_CHOICES];
    int done_order[REC_MAX_CHOICES];        /* global finish order, from 1 */
    int first_token_order;                  /* global order of its first token, from 1 */
    int error;                              /* -ERR_x from on_error, 0 none */
    int stop_after;                         /* > 0: on_token says stop after this many tokens */
    int calls_after_end;                    /* callbacks after on_error: must stay 0 */
    int *clock;                             /* shared order counter */
};
extern const struct sched_sink recorder_sink;

/* Build, compute and complete steps until idle or max_steps; each step "takes" ms_per_step.
 * Returns the steps run. */
int fake_run(struct sched *s, double *now_ms, double ms_per_step, int max_steps);

/* A prompt of n tokens in [2, n_vocab) derived from seed. */
void fake_prompt(int32_t *out, int32_t n, uint32_t seed, int32_t n_vocab);

#endif
