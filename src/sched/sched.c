/* sched.c: requests (submit, cancel, how they end), stats and slots, create and destroy. The
 * state is described in sched_internal.h, the steps are in step.c, the prompt cache in cache.c. */
#include "sched/sched_internal.h"

#include "common/err.h"

#include <stdlib.h>
#include <string.h>

const double sched_step_hist_bounds_ms[SCHED_STEP_HIST_BUCKETS] = {
    5, 10, 25, 50, 100, 250, 500, 1000, 2500, 1e300};

/* Bucket bounds of the per-request distributions: times from a queue slot taken at once to
 * minutes-long generations; inter-token latency around the step times (tens of ms, up to the
 * seconds a long prefill step makes the decodes beside it wait); token counts from a one-token
 * reply to the largest contexts. */
static const double time_bounds_s[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                       2.5, 5, 10, 25, 50, 100, 250, 500};
static const double itl_bounds_s[] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1,
                                      0.15, 0.2, 0.3, 0.5, 0.75, 1, 2.5, 5};
static const double token_bounds[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000,
                                      20000, 50000, 100000, 200000, 500000, 1000000};
#define N_OF(a) ((int)(sizeof(a) / sizeof *(a)))
_Static_assert(N_OF(time_bounds_s) <= SCHED_HIST_MAX_BOUNDS && N_OF(itl_bounds_s) <= SCHED_HIST_MAX_BOUNDS &&
                   N_OF(token_bounds) <= SCHED_HIST_MAX_BOUNDS,
               "a histogram with more bounds than struct sched_hist holds");

const double *sched_hist_bounds(enum sched_hist_kind kind, int *n) {
    switch (kind) {
    case SCHED_HIST_ITL: *n = N_OF(itl_bounds_s); return itl_bounds_s;
    case SCHED_HIST_PROMPT_TOKENS:
    case SCHED_HIST_GEN_TOKENS: *n = N_OF(token_bounds); return token_bounds;
    default: *n = N_OF(time_bounds_s); return time_bounds_s;
    }
}

void sched_hist_observe(struct sched *s, enum sched_hist_kind kind, double value) {
    int n;
    const double *bounds = sched_hist_bounds(kind, &n);
    if (!(value >= 0)) value = 0; /* clocks given out of order: never a negative time */
    int b = 0;
    while (b < n && value > bounds[b]) b++;
    s->totals.hist[kind].counts[b]++;
    s->totals.hist[kind].sum += value;
}

void sched_config_default(struct sched_config *c) {
    *c = (struct sched_config){
        .n_ctx = 0,
        .max_seq_tokens = 0,
        .batch_tokens = 512,
        .chunk_tokens = 128,
        .max_step_ms = 100,
        .solo_step_ms = 100,
        .max_queue = 64,
        .max_n = 16,
        .starve_steps = 8,
        .stall_timeout_ms = 30000,
        .stall_factor = 10,
        .stall_grace_ms = 1000,
        .preempt_recompute = false,
        .timeslice_steps = 16,
    };
}

const char *sched_stop_str(enum sched_stop r) {
    switch (r) {
    case SCHED_STOP_EOS: return "eos";
    case SCHED_STOP_LIMIT: return "limit";
    case SCHED_STOP_WORD: return "word";
    case SCHED_STOP_CONTEXT: return "context";
    }
    return "?";
}

const char *sched_seq_state_str(enum sched_seq_state st) {
    switch (st) {
    case SCHED_QUEUED: return "queued";
    case SCHED_PREFILL: return "prefill";
    case SCHED_GENERATE: return "generate";
    case SCHED_PREEMPTED: return "preempted";
    case SCHED_FORKING: return "forking";
    }
    return "?";
}

/* ---------------------------------------------------------------- requests */

void sched_req_free(struct sched *s, struct sched_req *r) {
    for (int32_t c = 0; c < r->n_choices; c++)
        if (r->samplers[c]) s->ops->sampler_free(s->engine, r->samplers[c]);
    free(r->samplers); /* one allocation starting with samplers holds seqs and prompt too */
    free(r->pprobs);
    free(r->embd);
    if (r->state == REQ_ACTIVE) s->n_active_reqs--;
    *r = (struct sched_req){.state = REQ_FREE, .next = s->free_reqs};
    s->free_reqs = r;
}

static void queue_remove(struct sched *s, struct sched_req *r) {
    struct sched_req **pp = &s->queue_head, *prev = NULL;
    while (*pp && *pp != r) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    ASSERT(*pp == r);
    *pp = r->next;
    if (s->queue_tail == r) s->queue_tail = prev;
    r->next = NULL;
}

/* End a request without callbacks: free every sequence it still owns. */
void sched_req_release(struct sched *s, struct sched_req *r) {
    if (r->state == REQ_QUEUED) queue_remove(s, r);
    else
        for (int32_t c = 0; c < r->n_choices; c++)
            if (r->seqs[c] >= 0) sched_cache_seq_release(s, r->seqs[c]);
    sched_req_free(s, r);
}

void sched_sweep_cancelled(struct sched *s) {
    if (s->n_cancel_pending == 0) return;
    for (int32_t i = 0; i < s->n_reqs; i++)
        if (s->reqs[i].state != REQ_FREE && s->reqs[i].cancelled) sched_req_release(s, &s->reqs[i]);
    s->n_cancel_pending = 0;
    sched_cache_refresh_usage(s);
}

/* Called with in_callbacks raised, so a cancel from on_error is deferred to the sweep. */
void sched_req_fail(struct sched *s, struct sched_req *r, int err) {
    if (r->cancelled) return;
    s->totals.requests_failed++;
    r->sink.on_error(r->owner, err);
    if (!r->cancelled) sched_req_release(s, r);
}

static bool has_work(const struct sched *s) {
    return s->queue_head || s->n_active_reqs > 0;
}

int32_t sched_max_prompt_tokens(const struct sched *s) { return s->token_cap - 1; }

void sched_set_hidden(struct sched *s, int32_t n_embd, const float *(*hidden)(void *engine)) {
    s->n_embd = n_embd;
    s->hidden = n_embd > 0 ? hidden : NULL;
}

int sched_submit(struct sched *s, const struct sched_request *in, const struct sched_sink *sink,
                 void *owner, double now_ms, struct sched_req **handle) {
    int32_t n_choices = in->n_choices == 0 ? 1 : in->n_choices;
    bool embed = in->embed != SCHED_EMBED_OFF;
    if (embed && !s->hidden) return -ERR_UNSUPPORTED;
    if (embed && (n_choices != 1 || !in->on_embedding || in->embed > SCHED_EMBED_ALL)) return -ERR_INVAL;
    if (in->n_prompt < 1 || !in->prompt || n_choices < 1 || n_choices > s->cfg.max_n ||
        in->n_probs < 0 || in->n_probs > SCHED_MAX_PROBS || in->draft_max < 0 || in->draft_min < 0)
        return -ERR_INVAL;
    if (in->prompt_logprobs && (!s->ops->token_logprobs || !sink->on_prompt_probs || in->n_prompt < 2))
        return -ERR_INVAL;
    for (int32_t i = 0; i < in->n_prompt; i++)
        if (in->prompt[i] < 0 || in->prompt[i] >= s->n_vocab) return -ERR_INVAL;
    if (n_choices > s->n_seq || in->n_prompt > sched_max_prompt_tokens(s)) return -ERR_TOOBIG;
    if (memory_cells_needed(s->mem, 0, in->n_prompt) > s->usage.cells_total) return -ERR_TOOBIG;
    int32_t queued = 0;
    for (struct sched_req *q = s->queue_head; q; q = q->next) queued += !q->cancelled;
    if (queued >= s->cfg.max_queue || !s->free_reqs) {
        s->totals.requests_rejected++;
        return -ERR_BUSY;
    }

    /* one block: prompt, samplers, seqs */
    size_t bytes = (size_t)in->n_prompt * sizeof(int32_t) + (size_t)n_choices * sizeof(void *) +
                   (size_t)n_choices * sizeof(int32_t);
    char *block = calloc(1, bytes + sizeof(void *));
    if (!block) return -ERR_NOMEM;
    void **samplers = (void **)(void *)block; /* pointers first: aligned */
    int32_t *seqs = (int32_t *)(void *)(block + (size_t)n_choices * sizeof(void *));
    int32_t *prompt = seqs + n_choices;
    memcpy(prompt, in->prompt, (size_t)in->n_prompt * sizeof *prompt);
    struct sched_token_probs *pprobs = NULL; /* bounded: n_prompt is below the context */
    if (in->prompt_logprobs && !(pprobs = calloc((size_t)in->n_prompt - 1, sizeof *pprobs))) {
        free(block);
        return -ERR_NOMEM;
    }
    float *embd = NULL;
    int32_t n_embd = 0;
    if (embed) { /* no sampler: the rows the pooling sums or keeps instead */
        n_embd = s->n_embd;
        size_t rows = in->embed == SCHED_EMBED_ALL ? (size_t)in->n_prompt : 1;
        seqs[0] = -1;
        if (!(embd = calloc(rows * (size_t)n_embd, sizeof *embd))) {
            free(pprobs);
            free(block);
            return -ERR_NOMEM;
        }
    }
    for (int32_t c = 0; c < n_choices && !embed; c++) {
        seqs[c] = -1;
        samplers[c] = s->ops->sampler_create(s->engine, in->sampler_params, in->seed + (uint64_t)c,
                                             in->prompt, in->n_prompt);
        if (!samplers[c]) {
            for (int32_t k = 0; k < c; k++) s->ops->sampler_free(s->engine, samplers[k]);
            free(block);
            free(pprobs);
            return -ERR_NOMEM;
        }
    }

    if (!has_work(s)) s->last_progress_ms = now_ms; /* idle until now: nothing was stalled */
    struct sched_req *r = s->free_reqs;
    s->free_reqs = r->next;
    *r = (struct sched_req){
        .sched = s, .state = REQ_QUEUED, .id = ++s->next_req_id, .owner = owner, .sink = *sink,
        .prompt = prompt,
        .n_prompt = in->n_prompt, .n_predict = embed ? 0 : in->n_predict, .n_choices = n_choices,
        .n_probs = embed ? 0 : in->n_probs, .cache_prompt = !embed && in->cache_prompt && !in->prompt_logprobs,
        .ignore_eos = in->ignore_eos, .prompt_logprobs = in->prompt_logprobs, .pprobs = pprobs,
        .embed = in->embed, .on_embedding = in->on_embedding, .embd = embd, .n_embd = n_embd,
        .partition = in->cache_partition, .t_submit = now_ms,
        .samplers = samplers, .seqs = seqs, .n_live = n_choices, .wait_since = s->step.number,
    };
    /* speculation needs one sequence per request (siblings share the prompt's cells), a memory
     * that can drop rejected positions, the acceptance rule and a source of drafts */
    if (n_choices == 1 && s->mem->ops->partial_removal && s->ops->sample_draft && (s->ops->draft || s->cfg.spec_lookup)) {
        r->draft_max = in->draft_max < SCHED_SPEC_ROWS - 1 ? in->draft_max : SCHED_SPEC_ROWS - 1;
        r->draft_min = in->draft_min;
        r->draft_p_min = in->draft_p_min;
    }
    if (s->queue_tail) s->queue_tail->next = r;
    else s->queue_head = r;
    s->queue_tail = r;
    s->totals.requests_submitted++;
    *handle = r;
    return 0;
}

void sched_cancel(struct sched *s, struct sched_req *r) {
    ASSERT(r->state != REQ_FREE);
    if (r->cancelled) return;
    s->totals.requests_cancelled++;
    /* A queued request owns no memory: it can go at once, even while a step computes. */
    if (r->state == REQ_QUEUED) {
        sched_req_release(s, r);
        return;
    }
    if (s->in_flight || s->in_callbacks) {
        r->cancelled = true;
        s->n_cancel_pending++;
        return;
    }
    sched_req_release(s, r);
    sched_cache_refresh_usage(s);
}

void sched_cancel_deferred(struct sched *s, struct sched_req *r) {
    ASSERT(r->state != REQ_FREE);
    if (r->cancelled) return;
    s->totals.requests_cancelled++;
    /* Queued, it stays in the queue until the sweep (taking it out is a walk of the queue, and
     * its samplers are the expensive part): admission always sweeps first, and the queue's
     * length in stats, slots and submit's max_queue check leaves it out. */
    r->cancelled = true;
    s->n_cancel_pending++;
}

/* ---------------------------------------------------------------- introspection */

void sched_rate_add(struct rate_window *w, double now_ms, int64_t n) {
    int64_t sec = (int64_t)(now_ms / 1000);
    int slot = (int)(sec % (RATE_WINDOW_S + 1));
    if (w->sec[slot] != sec) {
        w->sec[slot] = sec;
        w->count[slot] = 0;
    }
    w->count[slot] += n;
}

static double rate_per_s(const struct rate_window *w, double now_ms) {
    int64_t sec = (int64_t)(now_ms / 1000), sum = 0;
    for (int i = 0; i <= RATE_WINDOW_S; i++)
        if (w->sec[i] > sec - RATE_WINDOW_S && w->sec[i] <= sec) sum += w->count[i];
    return (double)sum / RATE_WINDOW_S;
}

const struct batch *sched_step_batch(const struct sched_step *st) { return &st->batch; }

int32_t sched_req_seq(const struct sched_req *r, int32_t choice) {
    ASSERT(choice >= 0 && choice < r->n_choices);
    if (r->state != REQ_ACTIVE || r->seqs[choice] < 0) return -1;
    const struct seq *q = &r->sched->seqs[r->seqs[choice]];
    return q->in_memory ? r->seqs[choice] : -1;
}

/* waiting: a request is queued (not cancelled) or active. */
static bool stalled(const struct sched *s, double now_ms, bool waiting) {
    /* Before the first measured step there is no expectation: a cold first prompt may take
     * seconds, and calling that a stall would get a healthy server restarted. */
    double limit_ms = s->cost.observed > 0 ? s->cfg.stall_factor * s->step.expected_ms + s->cfg.stall_grace_ms
                                           : s->cfg.stall_timeout_ms;
    bool overdue = s->in_flight && now_ms - s->step.started_ms > limit_ms;
    /* a step in flight is judged by its own expected time: a legitimately long step is progress */
    bool idle_too_long = !s->in_flight && waiting && now_ms - s->last_progress_ms > s->cfg.stall_timeout_ms;
    return overdue || idle_too_long;
}

void sched_stats(const struct sched *s, double now_ms, struct sched_stats *out) {
    *out = s->totals;
    for (const struct sched_req *q = s->queue_head; q; q = q->next) out->queued += !q->cancelled;
    out->active_requests = s->n_active_reqs;
    for (int32_t i = 0; i < s->n_seq; i++) {
        const struct seq *q = &s->seqs[i];
        if (q->kind == SEQ_CACHE) out->cached_seqs++;
        if (q->kind != SEQ_LIVE) continue;
        out->active_seqs++;
        if (!q->in_memory && !q->forking) out->preempted++;
    }
    out->cells_total = s->usage.cells_total;
    out->cells_used = s->usage.cells_used;
    /* which sequences hold which cells changes on this thread only (the worker reads it, and
     * writes K/V and states): safe while a step computes */
    for (int32_t i = 0; i < s->n_seq; i++) s->live_flags[i] = s->seqs[i].kind == SEQ_LIVE;
    out->cells_live = memory_cells_held(s->mem, s->live_flags);
    out->cells_cached = out->cells_used - out->cells_live;
    out->states_total = s->usage.states_total;
    out->states_used = s->usage.states_used;
    if (out->states_total > 0) /* every sequence holding anything holds one state (memory.h) */
        for (int32_t i = 0; i < s->n_seq; i++)
            out->states_live += s->live_flags[i] && memory_seq_pos_max(s->mem, i) >= 0;
    out->tokens_per_s = rate_per_s(&s->rate, now_ms);
    out->step_in_flight = s->in_flight;
    out->step_started_ms = s->in_flight ? s->step.started_ms : 0;
    out->step_expected_ms = s->in_flight ? s->step.expected_ms : 0;
    out->last_progress_ms = s->last_progress_ms;
    out->stalled = stalled(s, now_ms, out->queued + out->active_requests > 0);
}

bool sched_stalled(const struct sched *s, double now_ms) {
    bool queued = false;
    for (const struct sched_req *q = s->queue_head; q && !queued; q = q->next) queued = !q->cancelled;
    return stalled(s, now_ms, queued || s->n_active_reqs > 0);
}

int32_t sched_slots(const struct sched *s, struct sched_slot *out, int32_t max) {
    int32_t n = 0;
    for (const struct sched_req *r = s->queue_head; r; r = r->next) {
        if (r->cancelled) continue; /* sched_cancel_deferred: gone, freed at the next sweep */
        if (n < max)
            out[n] = (struct sched_slot){.request_id = r->id, .seq = -1, .state = SCHED_QUEUED,
                                         .n_prompt = r->n_prompt, .owner = r->owner};
        n++;
    }
    for (int32_t i = 0; i < s->n_seq; i++) {
        const struct seq *q = &s->seqs[i];
        if (q->kind != SEQ_LIVE || q->req->cancelled) continue; /* cancelled: freed at the sweep */
        if (n < max) {
            enum sched_seq_state st = q->forking ? SCHED_FORKING
                                      : !q->in_memory ? SCHED_PREEMPTED
                                      : q->n_tokens - q->n_past > 1 ? SCHED_PREFILL : SCHED_GENERATE;
            int32_t generated = q->n_tokens - q->req->n_prompt;
            out[n] = (struct sched_slot){
                .request_id = q->req->id, .choice = q->choice, .seq = q->in_memory ? i : -1,
                .state = st, .n_prompt = q->req->n_prompt,
                .n_generated = generated > 0 ? generated : 0, .cells = q->cells, .owner = q->req->owner,
                .n_prompt_done = q->n_past < q->req->n_prompt ? q->n_past : q->req->n_prompt};
        }
        n++;
    }
    return n;
}

/* ---------------------------------------------------------------- lifetime */

int sched_create(struct sched **out, const struct sched_config *cfg, struct memory *mem,
                 const struct sched_engine_ops *ops, void *engine) {
    *out = NULL;
    if (cfg->n_ctx < 2 || cfg->max_seq_tokens < 0 || cfg->batch_tokens < 1 ||
        cfg->chunk_tokens < 1 || cfg->max_queue < 1 || cfg->max_n < 1 || cfg->starve_steps < 0 ||
        cfg->timeslice_steps < 0 || !(cfg->max_step_ms > 0) || !(cfg->solo_step_ms >= 0) || mem->n_seq_max < 1)
        return -ERR_INVAL;
    struct sched *s = calloc(1, sizeof *s);
    if (!s) return -ERR_NOMEM;
    s->cfg = *cfg;
    s->token_cap = cfg->max_seq_tokens > 0 && cfg->max_seq_tokens < cfg->n_ctx ? cfg->max_seq_tokens
                                                                                : cfg->n_ctx;
    s->mem = mem;
    s->ops = ops;
    s->engine = engine;
    s->n_vocab = ops->n_vocab(engine);
    s->n_seq = mem->n_seq_max;
    s->n_reqs = cfg->max_queue + s->n_seq;
    step_cost_init(&s->cost);
    s->seqs = calloc((size_t)s->n_seq, sizeof *s->seqs);
    s->tokens_pool = calloc((size_t)s->n_seq * (size_t)s->token_cap, sizeof *s->tokens_pool);
    s->reqs = calloc((size_t)s->n_reqs, sizeof *s->reqs);
    s->decode_order = calloc((size_t)s->n_seq, sizeof *s->decode_order);
    s->prompt_order = calloc((size_t)s->n_seq, sizeof *s->prompt_order);
    s->step.entries = calloc((size_t)s->n_seq, sizeof *s->step.entries);
    s->step.samples = calloc((size_t)s->n_seq, sizeof *s->step.samples);
    s->step.prows = calloc((size_t)cfg->batch_tokens, sizeof *s->step.prows);
    s->live_flags = calloc((size_t)s->n_seq, sizeof *s->live_flags);
    s->step.spec_out = calloc((size_t)cfg->batch_tokens, sizeof *s->step.spec_out);
    s->step.spec_hist = calloc((size_t)s->token_cap + SCHED_SPEC_ROWS, sizeof *s->step.spec_hist);
    if (!s->step.spec_out || !s->step.spec_hist || !s->live_flags || !s->seqs || !s->tokens_pool || !s->reqs || !s->decode_order || !s->prompt_order ||
        !s->step.entries || !s->step.samples || !s->step.prows || batch_init(&s->step.batch, cfg->batch_tokens) != 0) {
        sched_destroy(s);
        return -ERR_NOMEM;
    }
    for (int32_t i = 0; i < s->n_seq; i++) {
        s->seqs[i].tokens = s->tokens_pool + (size_t)i * (size_t)s->token_cap;
        sched_cache_seq_reset(&s->seqs[i]);
    }
    for (int32_t i = s->n_reqs - 1; i >= 0; i--) {
        s->reqs[i].next = s->free_reqs;
        s->free_reqs = &s->reqs[i];
    }
    sched_cache_refresh_usage(s);
    *out = s;
    return 0;
}

void sched_destroy(struct sched *s) {
    if (!s) return;
    ASSERT(!s->in_flight);
    if (s->reqs)
        for (int32_t i = 0; i < s->n_reqs; i++)
            if (s->reqs[i].state != REQ_FREE) sched_req_release(s, &s->reqs[i]);
    if (s->seqs)
        for (int32_t i = 0; i < s->n_seq; i++)
            if (s->seqs[i].kind != SEQ_FREE) sched_cache_seq_release(s, i);
    batch_free(&s->step.batch);
    free(s->step.entries);
    free(s->step.samples);
    free(s->step.prows);
    free(s->step.spec_out);
    free(s->step.spec_hist);
    free(s->live_flags);
    free(s->decode_order);
    free(s->prompt_order);
    free(s->reqs);
    free(s->tokens_pool);
    free(s->seqs);
    free(s);
}
