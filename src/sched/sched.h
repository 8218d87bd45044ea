/* sched.h: the serving engine's scheduler core. Pure C: no libuv, no HTTP, no clock of its own.
 *
 * Many requests generate at once over one model and one memory. The scheduler decides, step by
 * step, which tokens go into the next forward pass:
 *   - every generating sequence gets one decode token per step;
 *   - sequences still reading their prompt get chunks (at most config.chunk_tokens each while
 *     others wait, except the last in the step's order, which takes what the budget has left:
 *     a long prompt read beside streaming requests fills each step as it would alone),
 *     round-robin, up to the step's token budget (config.batch_tokens); a newly admitted prompt goes first once, so a short request that
 *     arrives while a long prompt is being read gets its prompt into the very next step; a sequence
 *     that waited `starve_steps` steps goes before new ones, so nothing starves; every choice
 *     is a pure function of the arrival order and the step times reported to
 *     sched_step_complete (no clock, no randomness, ties broken by admission order);
 *   - while other sequences wait, the prompt budget shrinks so a step stays under
 *     config.max_step_ms, from a cost model learned from measured step times (step_cost.h:
 *     fixed + per token + per attended cell, so chunks shrink as a long prompt's context grows);
 *     a prompt alone gets the whole budget up to what fits in config.solo_step_ms (100 ms,
 *     never below max_step_ms; 0: no time cap, batch_tokens only). A step carrying a newcomer's
 *     prompt aims at 70% of max_step_ms (but keeps 32 rows, the probe's, as far as max_step_ms
 *     holds them: smaller steps cost several times more per token). The promises together: a
 *     request that arrives while a long prompt is read waits for the step in flight
 *     (<= solo_step_ms alone, <= max_step_ms beside others) and then for its own step
 *     (<= 0.7 max_step_ms mostly), so its first token comes after about solo_step_ms +
 *     0.7 max_step_ms at worst; a longer solo_step_ms amortizes the fixed
 *     cost per step over more tokens of the lone prompt at the price of that wait
 *     (scripts/bench.d/50-serving shows both: the time to first token during a long prefill and
 *     the prefill's time).
 *     Before any step was measured there is no cost model: a step's prompt budget is then a
 *     small probe (32 tokens), so the first step of a fresh server cannot run for seconds; a
 *     prompt alone never gets less than that probe (smaller prefill steps cost several times
 *     more per token: below 32 rows the matmuls take the per-row path, math/matmul.h);
 *   - admission is by memory, not slots: a request is admitted (queue order) when its prompt fits
 *     in the free cells after reusing the longest shared prefix (live sequences or prompt cache),
 *     on top of what admitted sequences still need for their own prompts;
 *   - when a step finds no room (sequences grew), least-recently-used prompt cache goes first,
 *     then prompt chunks shrink, then the sequence holding the most cells is preempted: its memory
 *     is saved to host (memory_seq_save, in a save-only step on the worker: copying megabytes to
 *     fresh pages must not block the loop) and freed, and it resumes later, before new requests,
 *     with its memory restored, so its output is exactly the uninterrupted one. When the memory
 *     cannot save, or config.preempt_recompute is set, its cells are dropped and its tokens
 *     recomputed as a prompt on resume (identical output up to the model's batch-shape rounding).
 *     Saving is the default: scripts/bench.d/40-sched measures a 1000-token SmolLM2-135M
 *     sequence (23 MB of K/V) at 60-250 ms to save (page faults on the fresh snapshot, on a busy
 *     VM) and ~2 ms to restore, where recomputing it is a forward pass over 1000 tokens
 *     (~270 GFLOP: seconds on 2 cores, and it would delay every other sequence's steps);
 *   - time-slicing, for a memory whose sequences never grow (memory_ops.fixed_seq_cells: a
 *     recurrent state, one cell per sequence), and for a hybrid's states (memory_usage.states_*,
 *     counted beside cells in admission: a sequence holding nothing needs one) when live
 *     sequences hold them all: memory pressure never preempts for them, so with every state taken
 *     a request would wait for whole generations to end. Instead, when the next
 *     waiter (see below) has waited config.timeslice_steps steps and lacks only a cell, the live
 *     sequence that has held its cell longest, if for timeslice_steps at least (no thrashing;
 *     ties: the earliest admitted), is preempted: its state is saved on the worker during the
 *     next step, beside the others' batch (a state is a bounded copy: no step is lost), freed
 *     when that step completes, and the waiter takes the cell. Waiters are served in order:
 *     sequences preempted for memory first (by admission), then the oldest of a time-sliced
 *     sequence (since its preemption) and the queue's head (since its submission; a head short
 *     of sequence ids lets preempted sequences pass, since only ends free ids), so n sequences
 *     on k < n cells rotate round-robin with slices of timeslice_steps, and each resumes from its
 *     saved state with exactly its uninterrupted output. A memory whose sequences grow (KV) is
 *     never time-sliced: its saves can be megabytes, and its preemption follows memory pressure;
 *   - n choices: the prompt is evaluated once on one sequence; its logits are sampled by n
 *     samplers (seeds seed, seed+1, ...) and n-1 sibling sequences share its cells (memory_seq_cp);
 *   - after a request ends its cells stay as prompt cache (request.cache_prompt) and are evicted
 *     least recently used when cells or sequence ids are needed. Cells are shared only between
 *     requests of one cache partition (request.cache_partition: the API layer's hash of the API
 *     key and cache_salt), live sequences and cache alike, so a request never learns from its
 *     tokens_cached how much of its prompt another partition's requests hold. A cached sequence
 *     serves a prefix of itself only as short as the memory can cut it (memory_seq_prefix_min: a
 *     recurrent state only whole, a sliding window's pool only where its window still holds the
 *     prefix's end), else only as a whole prefix of the new prompt: decided by the memory, not by
 *     its kind. A memory without partial removal (a recurrent state) cannot go back from a
 *     prompt's end to give its last logits again, so for an exact repeat a
 *     request with cache_prompt also keeps a copy of its state before its last prompt token: the
 *     prompt's chunks stop there, the copy (memory_seq_cp to a free id, evicting older cache,
 *     never what admitted work needs; none when that fails) becomes a cache entry when that step
 *     completes, and the last token runs with the next step's decodes. The same prompt again
 *     then reuses n_prompt - 1 tokens (tokens_cached) and runs one, with identical output;
 *     prompt_tokens counts that last token as prompt although it rides with the decodes.
 *     Such a prompt also keeps a copy of its state at the ends of its first SCHED_PROMPT_COPIES
 *     (4) chunks, each a cache entry of its own (taken only from a free id and state: they never
 *     evict), so that a prompt sharing only a prefix of it (a system prompt, earlier turns)
 *     restarts from the last copy at or before the shared length instead of from scratch, as a
 *     whole-prefix match of that entry.
 *
 *   - speculative decoding, for a request with draft_max > 0 (one choice, a memory with partial
 *     removal, an engine with sample_draft): a generating sequence's decode carries up to k draft
 *     tokens after its pending one, every row with logits, so one forward verifies them all; the
 *     rows are sampled in order with the acceptance rule (engine_ops.sample_draft), up to the first
 *     token that differs from its draft, and the token drawn there (or, all accepted, after the
 *     last draft) ends the run: 1 + accepted tokens stream from one step, and the rejected drafts'
 *     positions leave the memory when the step completes (memory_seq_rm), so the sequence then
 *     holds exactly what it would without speculation. Greedy output is identical; sampled output
 *     has the same distribution (sampler.h's sampler_sample_draft). Drafts come from the engine's
 *     draft model (engine_ops.draft, run on the worker after a step's sampling for the next step)
 *     or, with config.spec_lookup, from the sequence's own history: the continuation of the latest
 *     earlier occurrence of its last 2-4 tokens (prompt lookup). k adapts per sequence: it doubles
 *     (up to draft_max) while every draft is accepted and drops to accepted + 1 on a rejection; a
 *     draft shorter than draft_min is not used. Draft rows count in the step's token budget and
 *     in the cost model's rows, and a step's drafts all together stay within SCHED_SPEC_ROWS minus
 *     its decode rows, with none beside prompt chunks: where batching already shares each read
 *     of the weights, speculation backs off (none at SCHED_SPEC_ROWS decodes); and beside other
 *     decodes a sequence drafts only as many tokens as pay for their rows: the tokens they are
 *     expected to add (from its decaying acceptance rate) per millisecond they add to the step
 *     (the cost model's per-token and per-cell terms) must beat the step's own tokens per ms.
 *
 * Threading contract (exactly one step in flight at a time):
 *   loop thread:   sched_create, sched_submit, sched_cancel(_deferred), sched_build_step,
 *                  sched_step_complete, sched_stats, sched_slots, sched_destroy.
 *   worker thread: sched_step_compute, between sched_build_step and sched_step_complete.
 *   sched_step_compute touches only the step, the memory (the engine's forward, and
 *   memory_seq_save of a preempted sequence that is not in the batch), the samplers of the
 *   sequences in the step and their speculation state (draft size, the draft model's draft); the loop thread does not touch the memory or those samplers while a
 *   step is in flight (sched_cancel defers its freeing to sched_step_complete), so submit,
 *   cancel and stats may run concurrently with compute without locks.
 *
 * Callbacks: sink callbacks run on the loop thread, only inside sched_build_step (a request that
 * can no longer fit ends there) and sched_step_complete; never inside submit, cancel or compute.
 * A request ends with exactly one on_done per choice, or with one on_error (after which no more
 * callbacks); after that, or after sched_cancel, its handle is invalid and no callback mentions
 * its owner again. engine_ops are called from sched_submit (sampler_create), sched_step_compute
 * (forward, sample) and the loop thread (is_eog, sampler_free).
 *
 * Memory: every table (sequences, requests, step buffers, token histories of n_ctx each) is sized
 * at sched_create; building and completing steps does not allocate, except host snapshots of
 * preempted sequences. sched_submit copies the prompt.
 *
 * Usage (the server does the same across threads: api/serving.c's serving_ops, which
 * net/engine_driver.c runs with a uv_timer and uv_queue_work):
 *
 *   struct sched *s;
 *   sched_config_default(&cfg); cfg.n_ctx = 4096;
 *   sched_create(&s, &cfg, memory, &my_engine_ops, engine);
 *   sched_submit(s, &req, &my_sink, client, now_ms(), &handle); // -ERR_BUSY: queue full, -ERR_TOOBIG
 *   struct sched_step *step;
 *   while (sched_build_step(s, now_ms(), &step) > 0) {
 *       sched_step_compute(s, step);                     // on a worker thread
 *       sched_step_complete(s, step, now_ms());          // sink callbacks happen here
 *   }
 *   sched_destroy(s);
 *
 * Driving it from an event loop: one step in flight, a `running` flag. kick(): if not running
 * and sched_build_step(s, now, &step) > 0, set running and compute on a worker; when that is
 * done, on the loop: sched_step_complete(s, step, now) (or sched_step_complete_some, in parts),
 * clear running, kick(). Call kick() after every sched_submit and sched_cancel; a timer tick
 * calling kick() is only a safety net (memory is only freed by a completion or a cancel, both of
 * which kick). A step whose compute never ran (shutdown) is still completed: its requests end
 * with on_error(-ERR_CANCELLED).
 *
 * Errors for the API layer: sched_submit's -ERR_INVAL -> 400 naming the field; -ERR_TOOBIG ->
 * 400 exceed_context_size_error with n_prompt and sched_max_prompt_tokens() (or too many
 * choices for the memory's sequence ids); -ERR_BUSY -> 503 with Retry-After. on_error codes are
 * the engine's forward or the memory's errors (-> 500).
 */
#ifndef UVLM_SCHED_H
#define UVLM_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "common/batch.h"
#include "memory/memory.h"

#define SCHED_MAX_PROBS 20 /* most top alternatives per token (OpenAI's top_logprobs limit) */
/* The prompt budget of a step before any step was measured, and a lone prompt's least (above):
 * model_engine_load warms the model up with a forward of this size. */
#define SCHED_PROBE_TOKENS 32
/* A step's decode rows + draft rows within which speculation runs: the weights' serving layouts
 * interleave 16 rows (math/q8x16.h), so a step of up to 16 rows reads them about once. The
 * engine's forward must give n_seq_max + SCHED_SPEC_ROWS logits rows. */
#define SCHED_SPEC_ROWS 16

struct sched;
struct sched_req;  /* a request handle: valid from sched_submit until it ends or is cancelled */
struct sched_step; /* the one step buffer, owned by the scheduler */

struct sched_config {
    int32_t n_ctx;            /* the model's context: most tokens (prompt + generated) per sequence */
    int32_t max_seq_tokens;   /* a lower per-sequence limit than n_ctx (0: n_ctx) */
    int32_t batch_tokens;     /* token budget per step (--batch-tokens, 512) */
    int32_t chunk_tokens;     /* most prompt tokens per sequence per step while others wait, but for the step's last prompt (128) */
    double max_step_ms;       /* step time target while others wait (--max-step-ms, 100) */
    double solo_step_ms;      /* step time target of a prompt alone (--solo-step-ms, 100; 0: none) */
    int32_t max_queue;        /* requests waiting for admission, beyond: -ERR_BUSY (--max-queue, 64) */
    int32_t max_n;            /* most choices per request (--max-n, 16) */
    int32_t starve_steps;     /* a sequence not served for this many steps goes first (8) */
    double stall_timeout_ms;  /* no progress for this long while work waits: stalled (30000) */
    double stall_factor;      /* a step past factor x its expected time (+ stall_grace_ms): stalled (10) */
    double stall_grace_ms;    /* (1000) */
    bool preempt_recompute;   /* drop and recompute preempted sequences instead of saving (false) */
    int32_t timeslice_steps;  /* memory with fixed-size sequences: a waiter gets a cell after this
                               * many steps, and a sequence keeps one at least this long (16; 0: off) */
    int32_t max_outputs;      /* most logits rows a step's forward gives (the engine's; 0:
                               * batch_tokens): bounds the prompt rows of prompt_logprobs */
    bool spec_lookup;         /* prompt-lookup drafts when the engine has no draft model (false) */
};

/* Fill defaults; n_ctx must still be set. */
void sched_config_default(struct sched_config *c);

/* One sampled token, with its log-probability and the top alternatives when asked. */
struct sched_token_probs {
    int32_t token;
    float logprob;
    int32_t n_top; /* entries in top_* (<= the request's n_probs) */
    int32_t top_token[SCHED_MAX_PROBS];
    float top_logprob[SCHED_MAX_PROBS];
};

/* The seam to the model and sampler (sched/model_engine.h implements it with model_forward and
 * src/sampler; test/sched/fake.h with a bookkeeping engine). `engine` is passed back unchanged. */
struct sched_engine_ops {
    /* Run the batch (memory_reserve'd by the scheduler) and point *logits at n_outputs rows of
     * n_vocab floats, in entry order; they stay valid until the next forward. Worker thread. */
    int (*forward)(void *engine, struct memory *mem, const struct batch *b, const float **logits);
    int32_t (*n_vocab)(void *engine);
    bool (*is_eog)(void *engine, int32_t token);
    /* A sampler for one choice: `params` is the caller's sampling parameters (opaque here, only
     * read during this call), `prompt` the tokens it may use for repetition penalties. NULL on
     * failure (sched_submit then returns -ERR_NOMEM). Loop thread. */
    void *(*sampler_create)(void *engine, const void *params, uint64_t seed,
                            const int32_t *prompt, int32_t n_prompt);
    /* Pick the next token from one row of logits and remember it as generated; fill probs->
     * logprob and, when n_probs > 0, up to n_probs alternatives. Worker thread. A negative
     * ERR_* instead (e.g. -ERR_NUMERIC: the row holds NaN) fails this sequence's request alone;
     * the other sequences of the step go on. */
    int32_t (*sample)(void *engine, void *sampler, const float *logits, int32_t n_probs,
                      struct sched_token_probs *probs);
    void (*sampler_free)(void *engine, void *sampler);
    /* The model's log-probability of `token` under one row of logits (a plain log-softmax: no
     * sampler), and the n_probs most likely tokens, into probs (token = the one given). Worker
     * thread. NULL: the engine cannot, and requests with prompt_logprobs are refused. */
    void (*token_logprobs)(void *engine, const float *logits, int32_t token, int32_t n_probs,
                           struct sched_token_probs *probs);
    /* Optional (NULL: no speculation). sample with a drafted next token: the acceptance rule
     * (sampler.h's sampler_sample_draft); returns the token (== draft: accepted), remembered as
     * generated like sample's. Worker thread. */
    int32_t (*sample_draft)(void *engine, void *sampler, const float *logits, int32_t draft, int32_t n_probs,
                            struct sched_token_probs *probs);
    /* Optional (NULL: no draft model). Up to n_max tokens the draft model expects after
     * tokens[0..n) (sequence seq's whole history) into out, stopping where its confidence in its
     * next token falls below p_min; returns how many (0: none, also on any error: a draft is only
     * a guess). Worker thread, after a step's sampling. */
    int32_t (*draft)(void *engine, int32_t seq, const int32_t *tokens, int32_t n, int32_t n_max, float p_min,
                     int32_t *out);
};

/* An embedding request (sched_request.embed): its prompt is read like any prompt (chunked, fair
 * with generation) with no sampling and no token generated; the step keeps the final hidden
 * states the pooling needs (batch_add_hidden) and the scheduler pools them as they come, so the
 * memory holds nothing of them after the step. At the end the request's on_embedding gets the
 * result, then the sink's on_done (SCHED_STOP_LIMIT, n_generated 0), and the sequence's cells
 * are freed, never kept as prompt cache (nor shared with other requests' prompts). The engine's
 * hidden states come through sched_set_hidden. */
enum sched_embed {
    SCHED_EMBED_OFF,  /* generation */
    SCHED_EMBED_MEAN, /* the mean of every position's hidden state: one row */
    SCHED_EMBED_CLS,  /* the first position's: one row */
    SCHED_EMBED_LAST, /* the last position's: one row */
    SCHED_EMBED_ALL,  /* every position's: n_prompt rows */
};

enum sched_stop {
    SCHED_STOP_EOS,     /* the model produced an end-of-generation token (not passed to on_token) */
    SCHED_STOP_LIMIT,   /* n_predict tokens generated */
    SCHED_STOP_WORD,    /* the sink's on_token returned false (a stop string matched) */
    SCHED_STOP_CONTEXT, /* the sequence reached its context limit or the whole memory */
};
const char *sched_stop_str(enum sched_stop r); /* "eos", "limit", "word", "context" */

struct sched_counts {
    int32_t n_prompt;       /* prompt tokens (tokens_evaluated) */
    int32_t n_cached;       /* of which reused from shared or cached cells (tokens_cached) */
    int32_t n_generated;    /* tokens generated for this choice (tokens_predicted), EOS excluded */
    int32_t n_drafted;      /* draft tokens verified (speculative decoding) */
    int32_t n_draft_accepted; /* of which accepted */
    double prompt_ms;       /* admission to first token */
    double predicted_ms;    /* first token to the end */
};

/* The seam to the API layer: how results reach the request's owner. */
struct sched_sink {
    /* A new token of one choice; return false to stop that choice (reason SCHED_STOP_WORD).
     * probs is NULL unless the request asked for n_probs > 0. */
    bool (*on_token)(void *owner, int32_t choice, int32_t token, const struct sched_token_probs *probs);
    /* One choice ended; counts is valid during the call. */
    void (*on_done)(void *owner, int32_t choice, enum sched_stop reason, const struct sched_counts *counts);
    /* The whole request failed (-ERR_x): no more callbacks for it. */
    void (*on_error)(void *owner, int err);
    /* prompt_logprobs: probs[i] is prompt token i + 1's, given the tokens before it (n =
     * n_prompt - 1 entries, valid during the call); once, before the request's first on_token
     * or on_done. May be NULL when the request never asks. */
    void (*on_prompt_probs)(void *owner, const struct sched_token_probs *probs, int32_t n);
};

struct sched_request {
    const int32_t *prompt;   /* token ids, copied by sched_submit */
    int32_t n_prompt;        /* >= 1 */
    int32_t n_predict;       /* most tokens to generate per choice; < 0: until EOS or context */
    int32_t n_choices;       /* 1..max_n (0 counts as 1) */
    uint64_t seed;           /* choice i samples with seed + i */
    int32_t n_probs;         /* 0..SCHED_MAX_PROBS alternatives per token */
    bool cache_prompt;       /* reuse cached prefixes and leave the cells as cache at the end */
    uint64_t cache_partition;/* cells are shared only with requests of the same partition (live
                              * or cached); its n choices share as always */
    bool ignore_eos;         /* keep generating through end-of-generation tokens */
    bool prompt_logprobs;    /* every prompt token's logprob (with n_probs alternatives) for
                              * sink.on_prompt_probs: the whole prompt is computed (no cached
                              * prefix; cache_prompt is ignored) with a logits row per position,
                              * so its chunks are bounded by config.max_outputs; n_prompt >= 2 */
    const void *sampler_params; /* passed to engine_ops.sampler_create during sched_submit */
    /* speculative decoding (llama.cpp's speculative.n_max/n_min/p_min): most draft tokens per
     * step (0: none; at most SCHED_SPEC_ROWS - 1 are used), fewest worth verifying, and the draft
     * model's confidence below which it stops drafting */
    int32_t draft_max, draft_min;
    float draft_p_min;
    enum sched_embed embed;  /* not OFF: an embedding (see enum sched_embed): one choice, no
                              * sampler, n_predict, n_probs, cache_prompt and ignore_eos unused */
    /* An embedding's result, just before its on_done (loop thread, like the sink's callbacks):
     * n_rows rows of n_embd floats, valid during the call, not normalized. Not called when the
     * request ended early (on_done with SCHED_STOP_CONTEXT: its prompt could not be read whole). */
    void (*on_embedding)(void *owner, const float *rows, int32_t n_rows, int32_t n_embd);
};

/* 0, or -ERR_INVAL (bad config), -ERR_NOMEM. The scheduler uses sequence ids
 * [0, memory->n_seq_max) of `memory`, which it does not own and which must outlive it. */
int sched_create(struct sched **out, const struct sched_config *config, struct memory *memory,
                 const struct sched_engine_ops *ops, void *engine);
/* Embeddings need the engine's final hidden states: hidden(engine) points at the last forward's
 * rows of the batch's want_hidden entries (n_embd floats a row, entry order, valid until the
 * next forward; called on the worker thread right after forward). Without this call, embedding
 * requests are refused (-ERR_UNSUPPORTED). Before any submit. */
void sched_set_hidden(struct sched *s, int32_t n_embd, const float *(*hidden)(void *engine));
/* Ends nothing gracefully: live requests get no callbacks. Only with no step in flight. */
void sched_destroy(struct sched *s);

/* Queue a request (now_ms: for stall detection, work that just arrived is not stalled).
 * 0 and *handle, or: -ERR_INVAL (empty prompt, token id out of vocabulary,
 * n_choices or n_probs out of range, prompt_logprobs without the engine's token_logprobs or the
 * sink's on_prompt_probs, or with a one-token prompt, an embedding without on_embedding),
 * -ERR_UNSUPPORTED (an embedding without sched_set_hidden), -ERR_TOOBIG (prompt longer than sched_max_prompt_tokens,
 * or more choices than sequence ids), -ERR_BUSY (config.max_queue requests already wait),
 * -ERR_NOMEM. No callback is made for a failed submit. */
int sched_submit(struct sched *s, const struct sched_request *req, const struct sched_sink *sink,
                 void *owner, double now_ms, struct sched_req **handle);
/* The owner went away: no more callbacks; its sequences stop and their cells are freed now, or at
 * the end of the step in flight (within one step). The handle is invalid afterwards. */
void sched_cancel(struct sched *s, struct sched_req *handle);
/* The same, but never frees anything now, so it is cheap enough to call the moment the owner is
 * known to be gone, and from anywhere on the loop thread (also from inside this request's own sink
 * callbacks): no more callbacks, no step built from now on holds its sequences (nor is it
 * admitted, resumed or saved), and its samplers and cells are freed by the next sched_build_step
 * (or the end of the step in flight). The handle is invalid afterwards. For an owner whose
 * own teardown comes later (net paces cancel callbacks): mark at once, free in the sweep. */
void sched_cancel_deferred(struct sched *s, struct sched_req *handle);

/* The longest prompt sched_submit accepts (for the 400 message: prompt n vs this). */
int32_t sched_max_prompt_tokens(const struct sched *s);

/* Admit, evict, preempt and fill the next step. Returns > 0 with *step set when a step must run
 * (its batch's token count, or 1 for a save-only step with an empty batch), or 0 when there is
 * nothing to do (*step NULL). Asserts no step is in flight. The driver runs every step the same
 * way: compute on a worker, then complete on the loop. */
int sched_build_step(struct sched *s, double now_ms, struct sched_step **step);
/* Forward + sampling for a built step (worker thread). Errors are kept in the step; a step
 * completed without having been computed fails its requests with -ERR_CANCELLED. */
void sched_step_compute(struct sched *s, struct sched_step *step);
/* Take the step's results: append tokens, stop choices, call sinks, keep or free cells, learn the
 * step's cost from now_ms - the build's now_ms. After it a new step may be built. */
void sched_step_complete(struct sched *s, struct sched_step *step, double now_ms);
/* The same in parts, so that one step's output does not hold the loop thread for long: takes
 * the results of at most max_outputs entries that produce tokens (<= 0: all), in entry order,
 * and returns 1 while entries remain (call again, with the same step; now_ms of later calls is
 * ignored: the first call's is the step's end) or 0 once the step is complete. Between parts the
 * step is still in flight: sched_build_step must wait; submit, cancel and stats may run (a
 * request cancelled in between gets no more callbacks). The first part also learns the step's
 * cost and takes what does not call a sink (memory positions, a preemption's save); a failed
 * step's on_error callbacks all come in the first part. */
int sched_step_complete_some(struct sched *s, struct sched_step *st, double now_ms, int32_t max_outputs);

/* The step's batch (for tests and logs). */
const struct batch *sched_step_batch(const struct sched_step *step);
/* Memory sequence id of a request's choice, -1 when it has none now (queued, preempted-waiting,
 * or a choice that has not forked yet). For tests and /slots. */
int32_t sched_req_seq(const struct sched_req *handle, int32_t choice);

#define SCHED_STEP_HIST_BUCKETS 10
extern const double sched_step_hist_bounds_ms[SCHED_STEP_HIST_BUCKETS]; /* last is +inf */

/* Per-request distributions for /metrics, observed when a request has ended with every choice
 * done (not failed, not cancelled), except the time to first token (at the first token) and the
 * inter-token latency (at each token after a choice's first). Times are in seconds: now_ms
 * differences of the calls that saw the events (submit, the build that admitted, the completion
 * that took the token). */
enum sched_hist_kind {
    SCHED_HIST_TTFT,          /* submission to the first token */
    SCHED_HIST_ITL,           /* between two consecutive tokens of one choice */
    SCHED_HIST_E2E,           /* submission to the end of the last choice */
    SCHED_HIST_QUEUE,         /* submission to admission */
    SCHED_HIST_PREFILL,       /* admission to the first token */
    SCHED_HIST_DECODE,        /* first token to the end of the last choice */
    SCHED_HIST_PROMPT_TOKENS, /* prompt length, cached tokens included */
    SCHED_HIST_GEN_TOKENS,    /* tokens generated, all choices together */
    SCHED_HIST_KINDS
};
#define SCHED_HIST_MAX_BOUNDS 20
/* Per-bucket (not cumulative) counts: counts[i] observations fell in (bounds[i-1], bounds[i]],
 * counts[n_bounds] above the last bound; what api/metrics_text.h's histogram takes. */
struct sched_hist {
    uint64_t counts[SCHED_HIST_MAX_BOUNDS + 1];
    double sum;
};
/* The ascending finite bucket bounds of a kind (*n of them, <= SCHED_HIST_MAX_BOUNDS). */
const double *sched_hist_bounds(enum sched_hist_kind kind, int *n);

/* Counters and state for /health, /metrics and routing. No prompt or output text. */
struct sched_stats {
    /* now */
    int32_t queued;           /* requests waiting for admission */
    int32_t preempted;        /* sequences waiting to resume */
    int32_t active_requests;
    int32_t active_seqs;      /* sequences holding or about to hold cells (choices) */
    int32_t cached_seqs;      /* prompt-cache entries */
    int64_t cells_total, cells_used;
    int64_t cells_live;       /* of cells_used, held by a live sequence (shared ones once) */
    int64_t cells_cached;     /* held by prompt-cache entries alone: cells_used - cells_live */
    int64_t states_total, states_used; /* recurrent states (memory_usage's; 0 without) */
    int64_t states_live;      /* of states_used, held by live sequences (the rest: prompt cache) */
    double tokens_per_s;      /* generated tokens per second over the last 5 s */
    bool step_in_flight;
    double step_started_ms;   /* when the step in flight was built */
    double step_expected_ms;  /* its predicted duration */
    double last_progress_ms;  /* last completed step or admission */
    bool stalled;             /* see sched_stats below */
    /* totals since creation */
    int64_t requests_submitted, requests_rejected, requests_cancelled, requests_failed;
    int64_t choices_done[SCHED_STOP_CONTEXT + 1]; /* by stop reason */
    int64_t prompt_tokens;    /* prompt tokens run through the model (cached ones excluded) */
    int64_t cached_tokens;    /* prompt tokens reused from shared cells */
    int64_t generated_tokens;
    double prompt_ms, decode_ms; /* step time split by the step's prompt/decode token share */
    int64_t steps, preemptions, cache_evictions;
    int64_t draft_tokens, draft_accepted; /* speculative decoding: drafts verified, accepted */
    int64_t step_seqs;        /* sequences in the batch, summed over steps (/ steps: the mean) */
    struct sched_hist hist[SCHED_HIST_KINDS];
    /* step durations per bucket (not cumulative): step_hist[i] counts steps that took
     * (bounds[i-1], bounds[i]] ms; the last bucket is above the last finite bound. With
     * step_ms_sum this is what api/metrics_text.h's histogram takes (n_bounds = BUCKETS - 1). */
    uint64_t step_hist[SCHED_STEP_HIST_BUCKETS];
    double step_ms_sum;
};
/* stalled: a step has run longer than stall_factor x expected + stall_grace_ms (stall_timeout_ms
 * before any step was measured), or no step is in flight while there is work (queued, preempted
 * or active) and nothing progressed for stall_timeout_ms. Safe while a step is in flight (reads nothing the worker
 * writes). */
void sched_stats(const struct sched *s, double now_ms, struct sched_stats *out);
/* sched_stats' `stalled` alone, without the counts that walk every sequence: plain /health. */
bool sched_stalled(const struct sched *s, double now_ms);

enum sched_seq_state { SCHED_QUEUED, SCHED_PREFILL, SCHED_GENERATE, SCHED_PREEMPTED, SCHED_FORKING };
const char *sched_seq_state_str(enum sched_seq_state st); /* "queued", "prefill", ... */

/* One live sequence (or queued request) for /slots. */
struct sched_slot {
    int64_t request_id;   /* submission serial, from 1 */
    int32_t choice;
    int32_t seq;          /* memory sequence id, -1 when none */
    enum sched_seq_state state;
    int32_t n_prompt, n_generated;
    int32_t n_prompt_done;/* prompt tokens in its memory so far (cached ones included) */
    int64_t cells;        /* cells held after the last step */
    void *owner;          /* the request's sink owner (sched_submit's), for the caller's details */
};
/* Fill up to max slots (queued requests first, then sequences by id); returns how many exist. */
int32_t sched_slots(const struct sched *s, struct sched_slot *out, int32_t max);

#endif
