/* sched_internal.h: the scheduler's state, shared by its three parts and nobody else.
 *   sched.c  requests: submit, cancel, their end; stats, slots; create and destroy
 *   cache.c  what each memory sequence id holds: room for new work, prefix sharing, prompt cache
 *   step.c   admission, then building, computing and completing steps
 *
 * State lives in two fixed tables:
 *   seqs[memory id]: FREE, LIVE (a request's choice: in memory, preempted, or waiting for its
 *     prompt's fork) or CACHE (a finished sequence whose cells serve later prompts). Each entry
 *     has a token history (prompt then generated) and n_past, the tokens the memory holds
 *     (positions [0, n_past)). A sequence's next step feeds tokens[n_past..n_tokens): more than
 *     one token is prompt (or recompute after preemption), exactly one is a decode.
 *   reqs[]: requests, FREE, QUEUED (FIFO) or ACTIVE (its choices own sequences).
 * The one step buffer records, per sequence in the batch, how many tokens it got and which
 * samplers read its logits row.
 */
#ifndef UVLM_SCHED_INTERNAL_H
#define UVLM_SCHED_INTERNAL_H

#include "sched/sched.h"
#include "sched/step_cost.h"

#define RATE_WINDOW_S 5

enum seq_kind { SEQ_FREE, SEQ_LIVE, SEQ_CACHE };

/* Copies of a recurrent state a prompt keeps as cache at its first chunk ends (sched.h), besides
 * the one before its last token: each holds a state and a sequence id, so a few; the first chunks
 * are what prompts most often share (a system prompt, the earlier turns of a chat). */
#define SCHED_PROMPT_COPIES 4

struct seq {
    enum seq_kind kind;
    struct sched_req *req;  /* LIVE */
    int32_t choice;         /* LIVE */
    int32_t *tokens;        /* [token_cap]: prompt, then generated */
    int32_t n_tokens;
    int32_t n_past;         /* tokens held in memory: positions [0, n_past) */
    bool in_memory;         /* LIVE: false while preempted or waiting for the fork */
    bool forking;           /* LIVE: a choice > 0 waiting for its prompt's first logits */
    struct memory_snapshot *snap; /* preempted with a host copy */
    int64_t last_served;    /* step number; -1 never */
    int64_t serial;         /* admission order: ties are broken by it (determinism) */
    uint64_t lru;           /* CACHE: last use */
    int64_t cells;          /* cells held, refreshed after each step */
    int64_t held_since;     /* LIVE in memory: first step it could run in since it got memory */
    int32_t checkpoint_at;  /* LIVE: > 0: when n_past reaches it, a copy becomes prompt cache */
    int32_t n_copies;       /* LIVE: copies taken at its prompt's chunk ends (SCHED_PROMPT_COPIES) */
    int64_t wait_since;     /* preempted: the step that saved it (time-slicing) */
    bool sliced;            /* preempted by time-slicing: waits its turn behind older waiters */
    uint64_t partition;     /* LIVE and CACHE: the cache partition of the request it came from */
    double t_last;          /* LIVE: when its last token was taken (inter-token latency) */
    /* speculative decoding (sched.h; spec.c): the worker writes these for the sequences of its
     * step, the loop reads them when it builds the next */
    int32_t spec_k;         /* LIVE: draft tokens to try next (adapts); 0: not yet set */
    float spec_rate;        /* LIVE: share of its drafted tokens accepted, a decaying average */
    int32_t n_draft;        /* the draft model's draft, valid while n_tokens == draft_at */
    int32_t draft_at;
    int32_t draft[SCHED_SPEC_ROWS];
    int32_t n_plan;         /* build: the drafts this step verifies (spec.c) */
    int32_t plan[SCHED_SPEC_ROWS];
    int32_t n_drafted, n_accepted; /* counts for sched_counts */
};

enum req_state { REQ_FREE, REQ_QUEUED, REQ_ACTIVE };

struct sched_req {
    struct sched *sched;
    enum req_state state;
    int64_t id;
    void *owner;
    struct sched_sink sink;
    int32_t *prompt;
    int32_t n_prompt, n_predict, n_choices, n_probs;
    bool cache_prompt, ignore_eos;
    bool prompt_logprobs;   /* request.prompt_logprobs: pprobs[i] is prompt token i + 1's */
    bool pprobs_sent;       /* sink.on_prompt_probs was called */
    struct sched_token_probs *pprobs; /* [n_prompt - 1], written by the steps' compute */
    int32_t draft_max, draft_min; /* request.draft_*; draft_max 0 when speculation cannot run */
    float draft_p_min;
    uint64_t partition;     /* request.cache_partition */
    enum sched_embed embed;
    void (*on_embedding)(void *owner, const float *rows, int32_t n_rows, int32_t n_embd);
    float *embd;            /* embeddings: [n_prompt or 1][n_embd] pooled so far (the worker adds
                             * to it during a step, sched.h's SCHED_EMBED_*) */
    int32_t n_embd;
    void **samplers;        /* [n_choices] */
    int32_t *seqs;          /* [n_choices] memory ids while ACTIVE, -1 once ended */
    int32_t n_live;         /* choices not ended */
    bool forked;            /* the prompt's logits were shared out to every choice */
    bool has_first;         /* t_first is set */
    bool cancelled;         /* release at the next sweep, no callbacks */
    int32_t n_cached;
    double t_submit, t_admit, t_first;
    int64_t n_generated;    /* tokens of the choices that ended so far */
    int64_t wait_since;     /* QUEUED: the last step built before submission (time-slicing) */
    struct sched_req *next; /* queue / free list */
};

struct step_entry {
    int32_t seq;
    int32_t n_new;          /* tokens of this sequence in the batch */
    int32_t first_sample, n_samples;
    int32_t first_hidden, n_hidden; /* an embedding's rows of the engine's hidden states */
};

/* A prompt position whose logits row gives the next prompt token's logprob (prompt_logprobs). */
struct step_prompt_row {
    int32_t row;
    struct sched_req *req;
    int32_t pos;            /* the row predicts prompt[pos + 1] into req->pprobs[pos] */
};

struct step_sample {
    int32_t row;            /* logits row */
    int32_t seq;            /* the entry's sequence */
    int32_t choice;
    void *sampler;
    int32_t n_probs;
    struct sched_token_probs out;
    /* speculation: n_draft drafts follow in the batch from entry draft_entry on (rows row + 1..);
     * the worker sets n_out, the tokens taken: out, then spec_out[row + 1 .. row + n_out) */
    int32_t n_draft, draft_entry, n_out, n_accepted;
    bool spec;              /* the request speculates: the draft model drafts after this sample */
};

/* A preemption by saving: the copy to host runs on the worker (it can take milliseconds: page
 * faults on a fresh snapshot), the loop thread only frees the cells afterwards. */
struct step_save {
    int32_t seq;
    bool sliced;            /* a time-slice preemption rather than memory pressure */
    struct memory_snapshot *snap;
    int err;
};

struct sched_step {
    struct batch batch;
    bool has_save;          /* a save-only step: empty batch */
    struct step_save save;
    struct step_entry *entries;
    int32_t n_entries;
    struct step_sample *samples;
    int32_t n_samples;
    struct step_prompt_row *prows; /* [batch capacity] */
    int32_t n_prows;
    struct sched_token_probs *spec_out; /* [batch capacity] by logits row: tokens after the first */
    int32_t *spec_hist;     /* [token_cap] worker scratch: a history for engine_ops.draft */
    int32_t draft_left;     /* worker: draft tokens the draft model may still make for the next
                             * step (what sched_spec_plan would give them room for) */
    int32_t n_prompt_tokens, n_decode_tokens;
    int32_t n_prompt_tails; /* of the decode tokens, prompts' last tokens (counted as prompt) */
    int32_t n_draft_tokens; /* of the decode tokens, drafts to verify (speculation) */
    int64_t number;
    double attn;            /* attention cells of the batch: sum of pos + 1 over its rows (step_cost.h) */
    double started_ms, expected_ms;
    int err;
    /* completion in parts (sched_step_complete_some): entries before next_entry are taken */
    bool completing;
    int32_t next_entry;
    double completed_ms;    /* the now_ms of the first part: every part takes results at it */
};

struct rate_window {
    int64_t sec[RATE_WINDOW_S + 1];
    int64_t count[RATE_WINDOW_S + 1];
};

struct sched {
    struct sched_config cfg;
    int32_t token_cap;      /* most tokens per sequence: min(n_ctx, max_seq_tokens) */
    struct memory *mem;
    const struct sched_engine_ops *ops;
    void *engine;
    int32_t n_embd;         /* sched_set_hidden's: the engine's hidden states (0, NULL: none) */
    const float *(*hidden)(void *engine);
    int32_t n_vocab;
    int32_t n_seq;          /* memory->n_seq_max */

    struct seq *seqs;
    int32_t *tokens_pool;
    struct sched_req *reqs;
    int32_t n_reqs;
    int32_t n_active_reqs;  /* reqs in REQ_ACTIVE: /health asks every few ms, reqs has n_reqs entries */
    struct sched_req *free_reqs;
    struct sched_req *queue_head, *queue_tail;

    /* step building scratch: sequence ids in service order */
    int32_t *decode_order, *prompt_order;
    int32_t n_decode, n_prompt;

    struct sched_step step;
    bool in_flight;
    int in_callbacks;       /* > 0: sched_cancel defers, like during a step */
    int32_t n_cancel_pending;

    struct step_cost cost;
    int64_t next_req_id, next_serial;
    uint64_t lru_clock;
    struct rate_window rate;
    struct memory_usage usage;
    struct sched_stats totals; /* the "totals since creation" part of the stats */
    bool *live_flags;       /* [n_seq] scratch of sched_stats: which ids are live sequences */
    double last_progress_ms;
};

/* cache.c */
/* Cells admitted sequences still need for their prompts and one more step. */
int64_t sched_cache_pending_need(const struct sched *s);
/* Mark an entry FREE (keeps its token buffer). */
void sched_cache_seq_reset(struct seq *q);
/* Drop what the id holds in memory and on the host, and free it. */
void sched_cache_seq_release(struct sched *s, int32_t id);
/* Evict the least recently used cache entry other than keep; false when there is none. With
 * for_cells, only an entry whose eviction frees cells (not one whose cells all live on in the
 * sequences sharing them); without, any entry (its sequence id is what is wanted). */
bool sched_cache_evict_lru(struct sched *s, int32_t keep, bool for_cells);
/* Free ids into ids[0..n), evicting cache entries other than keep as needed; returns how many
 * (< n when even evicting every other entry does not give n). */
int32_t sched_cache_take_free_ids(struct sched *s, int32_t *ids, int32_t n, int32_t keep);
/* States (memory_usage.states_*) admitted sequences still need: one for each that holds none. */
int64_t sched_cache_pending_states(const struct sched *s);
/* Evict cache until need cells and states states are free on top of sched_cache_pending_need and
 * sched_cache_pending_states (a memory without states: cells only); false if impossible. */
bool sched_cache_make_room(struct sched *s, int64_t need, int64_t states);
/* Longest shareable prefix of tokens[0..n) held by a live or cached id of the partition (*src). */
int32_t sched_cache_best_prefix(const struct sched *s, uint64_t partition, const int32_t *tokens, int32_t n,
                                int32_t *src);
/* Share that prefix into the empty id; returns the tokens shared. */
int32_t sched_cache_attach_prefix(struct sched *s, int32_t id, uint64_t partition, const int32_t *tokens,
                                  int32_t n);
/* A finished choice's cells become prompt cache (redundant entries dropped). */
void sched_cache_keep(struct sched *s, int32_t id);
/* A copy of what live id holds now becomes prompt cache (sched.h: prompt reuse without partial
 * removal), when a cell (and a state) and an id are free, or with evict, can be had by evicting
 * older cache; true when it was taken. */
bool sched_cache_checkpoint(struct sched *s, int32_t id, bool evict);
/* Refresh the usage and per-id cell counts that stats read while a step computes. */
void sched_cache_refresh_usage(struct sched *s);

/* spec.c: speculative decoding (sched.h) */
/* Drafts for this step's decodes (collect()'s decode_order) into each sequence's plan: k per
 * sequence within SCHED_SPEC_ROWS - decodes in all, from the draft model's draft or prompt lookup. */
void sched_spec_plan(struct sched *s);
/* The continuation of the latest earlier occurrence of the last 4, 3 or 2 tokens of
 * tokens[0..n) (the longest that occurs), up to n_max tokens into out; returns how many. */
int32_t sched_spec_lookup(const int32_t *tokens, int32_t n, int32_t n_max, int32_t *out);
/* Worker: verify one sample's drafts (rows row..row + n_draft), adapt its sequence's k, and draft
 * its next step with the draft model. logits: the forward's rows. */
void sched_spec_verify(struct sched *s, struct sched_step *st, struct step_sample *sm, const float *logits);
/* Worker, after a plain sample of a speculating sequence: the draft model's next draft. */
void sched_spec_draft(struct sched *s, struct sched_step *st, const struct step_sample *sm);

/* sched.c */
/* Return a request to the pool, freeing its samplers and its allocation. */
void sched_req_free(struct sched *s, struct sched_req *r);
/* End a request without callbacks: dequeue it or free every sequence it owns. */
void sched_req_release(struct sched *s, struct sched_req *r);
/* Release the requests cancelled while they could not be (step in flight, callbacks). */
void sched_sweep_cancelled(struct sched *s);
/* on_error(err) and end the request (with in_callbacks raised by the caller). */
void sched_req_fail(struct sched *s, struct sched_req *r, int err);
/* Add one observation to s->totals.hist[kind] (times in seconds). */
void sched_hist_observe(struct sched *s, enum sched_hist_kind kind, double value);
/* Count n generated tokens at now_ms for tokens/s. */
void sched_rate_add(struct rate_window *w, double now_ms, int64_t n);

#endif
