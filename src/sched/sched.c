/* sched.c: the scheduler core (see sched.h for the contract).
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
#include "sched/sched.h"

#include "common/err.h"
#include "sched/step_cost.h"

#include <stdlib.h>
#include <string.h>

/* Prompts always get at least this many tokens per step, even when decodes alone fill the time
 * target: otherwise a crowd of generating sequences would starve every new prompt. */
#define SCHED_MIN_PROMPT_TOKENS 16
#define RATE_WINDOW_S 5

enum seq_kind { SEQ_FREE, SEQ_LIVE, SEQ_CACHE };

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
    int64_t snap_cells;
    int64_t last_served;    /* step number; -1 never */
    int64_t serial;         /* admission order: ties are broken by it (determinism) */
    uint64_t lru;           /* CACHE: last use */
    int64_t cells;          /* cells held, refreshed after each step */
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
    void **samplers;        /* [n_choices] */
    int32_t *seqs;          /* [n_choices] memory ids while ACTIVE, -1 once ended */
    int32_t n_live;         /* choices not ended */
    bool forked;            /* the prompt's logits were shared out to every choice */
    bool has_first;         /* t_first is set */
    bool cancelled;         /* release at the next sweep, no callbacks */
    int32_t n_cached;
    double t_admit, t_first;
    struct sched_req *next; /* queue / free list */
};

struct step_entry {
    int32_t seq;
    int32_t n_new;          /* tokens of this sequence in the batch */
    int32_t first_sample, n_samples;
};

struct step_sample {
    int32_t row;            /* logits row */
    int32_t seq;            /* the entry's sequence */
    int32_t choice;
    void *sampler;
    int32_t n_probs;
    struct sched_token_probs out;
};

/* A preemption by saving: the copy to host runs on the worker (it can take milliseconds: page
 * faults on a fresh snapshot), the loop thread only frees the cells afterwards. */
struct step_save {
    int32_t seq;
    int64_t cells;
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
    int32_t n_prompt_tokens, n_decode_tokens;
    int64_t number;
    double started_ms, expected_ms;
    int err;
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
    int32_t n_vocab;
    int32_t n_seq;          /* memory->n_seq_max */

    struct seq *seqs;
    int32_t *tokens_pool;
    struct sched_req *reqs;
    int32_t n_reqs;
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
    double last_progress_ms;
};

const double sched_step_hist_bounds_ms[SCHED_STEP_HIST_BUCKETS] = {
    5, 10, 25, 50, 100, 250, 500, 1000, 2500, 1e300};

void sched_config_default(struct sched_config *c) {
    *c = (struct sched_config){
        .n_ctx = 0,
        .max_seq_tokens = 0,
        .batch_tokens = 512,
        .chunk_tokens = 128,
        .max_step_ms = 100,
        .max_queue = 64,
        .max_n = 16,
        .starve_steps = 8,
        .stall_timeout_ms = 30000,
        .stall_factor = 10,
        .stall_grace_ms = 1000,
        .preempt_recompute = false,
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

/* ---------------------------------------------------------------- memory bookkeeping */

static int64_t free_cells(const struct sched *s) {
    struct memory_usage u;
    memory_usage(s->mem, &u);
    return u.cells_total - u.cells_used;
}

/* Cells the admitted sequences still need to finish their prompts and take one more step:
 * admission and resumption leave this much free so they do not immediately force preemption. */
static int64_t pending_need(const struct sched *s) {
    int64_t need = 0;
    for (int32_t i = 0; i < s->n_seq; i++) {
        const struct seq *q = &s->seqs[i];
        if (q->kind != SEQ_LIVE) continue;
        if (q->in_memory) need += memory_cells_needed(s->mem, i, q->n_tokens - q->n_past);
        else if (q->forking) need += 1;
    }
    return need;
}

static void seq_reset(struct seq *q) {
    int32_t *tokens = q->tokens;
    *q = (struct seq){.kind = SEQ_FREE, .tokens = tokens, .last_served = -1};
}

/* Drop whatever the sequence holds in memory and on the host, and free its id. */
static void seq_release(struct sched *s, int32_t id) {
    struct seq *q = &s->seqs[id];
    if (q->kind == SEQ_CACHE || (q->kind == SEQ_LIVE && q->in_memory)) {
        int rc = memory_seq_rm(s->mem, id, 0, -1);
        ASSERT(rc == 0); /* removing a whole sequence always works */
    }
    if (q->snap) memory_snapshot_free(s->mem, q->snap);
    seq_reset(q);
}

/* Evict the least recently used cache entry other than `keep`; false when there is none. */
static bool evict_lru(struct sched *s, int32_t keep) {
    int32_t victim = -1;
    for (int32_t i = 0; i < s->n_seq; i++)
        if (i != keep && s->seqs[i].kind == SEQ_CACHE &&
            (victim < 0 || s->seqs[i].lru < s->seqs[victim].lru))
            victim = i;
    if (victim < 0) return false;
    seq_release(s, victim);
    s->totals.cache_evictions++;
    return true;
}

/* Evict cache until `need` cells are free on top of what admitted work still needs. */
static bool make_room(struct sched *s, int64_t need) {
    while (free_cells(s) < need + pending_need(s))
        if (!evict_lru(s, -1)) return false;
    return true;
}

static int32_t common_prefix(const int32_t *a, const int32_t *b, int32_t n) {
    int32_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* The longest prefix of tokens[0..n) that some live or cached sequence holds and that can be
 * shared: at most n-1 tokens (the last prompt token must run to give logits), and with a memory
 * without partial removal only a source's whole content. Returns its length, *src its id. */
static int32_t best_prefix(const struct sched *s, const int32_t *tokens, int32_t n, int32_t *src) {
    int32_t best = 0;
    *src = -1;
    for (int32_t i = 0; i < s->n_seq; i++) {
        const struct seq *q = &s->seqs[i];
        bool held = q->kind == SEQ_CACHE || (q->kind == SEQ_LIVE && q->in_memory && !q->req->cancelled);
        if (!held || q->n_past == 0) continue;
        int32_t limit = q->n_past < n ? q->n_past : n;
        int32_t common = common_prefix(tokens, q->tokens, limit);
        int32_t usable;
        if (s->mem->ops->partial_removal) usable = common < n - 1 ? common : n - 1;
        else usable = common == q->n_past && q->n_past < n ? q->n_past : 0;
        if (usable > best) {
            best = usable;
            *src = i;
        }
    }
    return best;
}

/* Share the longest available prefix into the empty sequence id: returns tokens shared. */
static int32_t attach_prefix(struct sched *s, int32_t id, const int32_t *tokens, int32_t n) {
    int32_t src;
    int32_t len = best_prefix(s, tokens, n, &src);
    if (len == 0) return 0;
    if (memory_seq_cp(s->mem, src, id, 0, len) != 0) return 0;
    if (s->seqs[src].kind == SEQ_CACHE) s->seqs[src].lru = ++s->lru_clock;
    return len;
}

/* A finished choice's cells become prompt cache. Entries that only repeat a prefix of another
 * are dropped (with partial removal the longer one serves every prompt the shorter one would). */
static void keep_as_cache(struct sched *s, int32_t id) {
    struct seq *q = &s->seqs[id];
    if (q->snap) memory_snapshot_free(s->mem, q->snap);
    *q = (struct seq){.kind = SEQ_CACHE, .tokens = q->tokens, .n_tokens = q->n_past,
                      .n_past = q->n_past, .last_served = -1, .lru = ++s->lru_clock,
                      .cells = q->cells};
    bool partial = s->mem->ops->partial_removal;
    for (int32_t i = 0; i < s->n_seq; i++) {
        struct seq *o = &s->seqs[i];
        if (i == id || o->kind != SEQ_CACHE) continue;
        int32_t shorter = o->n_past < q->n_past ? o->n_past : q->n_past;
        if (common_prefix(o->tokens, q->tokens, shorter) != shorter) continue;
        if (o->n_past == q->n_past || (partial && o->n_past < q->n_past)) {
            seq_release(s, i);
        } else if (partial) { /* q is a prefix of o */
            o->lru = q->lru;
            seq_release(s, id);
            return;
        }
    }
}

static void refresh_usage(struct sched *s) {
    memory_usage(s->mem, &s->usage);
    for (int32_t i = 0; i < s->n_seq; i++) {
        struct seq *q = &s->seqs[i];
        q->cells = q->kind == SEQ_FREE ? 0 : memory_seq_cells(s->mem, i);
    }
}

/* ---------------------------------------------------------------- requests */

static void req_free(struct sched *s, struct sched_req *r) {
    for (int32_t c = 0; c < r->n_choices; c++)
        if (r->samplers[c]) s->ops->sampler_free(s->engine, r->samplers[c]);
    free(r->samplers); /* one allocation starting with samplers holds seqs and prompt too */
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
static void req_release(struct sched *s, struct sched_req *r) {
    if (r->state == REQ_QUEUED) queue_remove(s, r);
    else
        for (int32_t c = 0; c < r->n_choices; c++)
            if (r->seqs[c] >= 0) seq_release(s, r->seqs[c]);
    req_free(s, r);
}

static void sweep_cancelled(struct sched *s) {
    if (s->n_cancel_pending == 0) return;
    for (int32_t i = 0; i < s->n_reqs; i++)
        if (s->reqs[i].state != REQ_FREE && s->reqs[i].cancelled) req_release(s, &s->reqs[i]);
    s->n_cancel_pending = 0;
    refresh_usage(s);
}

/* Called with in_callbacks raised, so a cancel from on_error is deferred to the sweep. */
static void fail_request(struct sched *s, struct sched_req *r, int err) {
    if (r->cancelled) return;
    s->totals.requests_failed++;
    r->sink.on_error(r->owner, err);
    if (!r->cancelled) req_release(s, r);
}

static bool has_work(const struct sched *s) {
    if (s->queue_head) return true;
    for (int32_t i = 0; i < s->n_reqs; i++)
        if (s->reqs[i].state == REQ_ACTIVE) return true;
    return false;
}

int32_t sched_max_prompt_tokens(const struct sched *s) { return s->token_cap - 1; }

int sched_submit(struct sched *s, const struct sched_request *in, const struct sched_sink *sink,
                 void *owner, double now_ms, struct sched_req **handle) {
    int32_t n_choices = in->n_choices == 0 ? 1 : in->n_choices;
    if (in->n_prompt < 1 || !in->prompt || n_choices < 1 || n_choices > s->cfg.max_n ||
        in->n_probs < 0 || in->n_probs > SCHED_MAX_PROBS)
        return -ERR_INVAL;
    for (int32_t i = 0; i < in->n_prompt; i++)
        if (in->prompt[i] < 0 || in->prompt[i] >= s->n_vocab) return -ERR_INVAL;
    if (n_choices > s->n_seq || in->n_prompt > sched_max_prompt_tokens(s)) return -ERR_TOOBIG;
    if (memory_cells_needed(s->mem, 0, in->n_prompt) > s->usage.cells_total) return -ERR_TOOBIG;
    int32_t queued = 0;
    for (struct sched_req *q = s->queue_head; q; q = q->next) queued++;
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
    for (int32_t c = 0; c < n_choices; c++) {
        seqs[c] = -1;
        samplers[c] = s->ops->sampler_create(s->engine, in->sampler_params, in->seed + (uint64_t)c,
                                             in->prompt, in->n_prompt);
        if (!samplers[c]) {
            for (int32_t k = 0; k < c; k++) s->ops->sampler_free(s->engine, samplers[k]);
            free(block);
            return -ERR_NOMEM;
        }
    }

    if (!has_work(s)) s->last_progress_ms = now_ms; /* idle until now: nothing was stalled */
    struct sched_req *r = s->free_reqs;
    s->free_reqs = r->next;
    *r = (struct sched_req){
        .sched = s, .state = REQ_QUEUED, .id = ++s->next_req_id, .owner = owner, .sink = *sink,
        .prompt = prompt,
        .n_prompt = in->n_prompt, .n_predict = in->n_predict, .n_choices = n_choices,
        .n_probs = in->n_probs, .cache_prompt = in->cache_prompt, .ignore_eos = in->ignore_eos,
        .samplers = samplers, .seqs = seqs, .n_live = n_choices,
    };
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
        req_release(s, r);
        return;
    }
    if (s->in_flight || s->in_callbacks) {
        r->cancelled = true;
        s->n_cancel_pending++;
        return;
    }
    req_release(s, r);
    refresh_usage(s);
}

/* ---------------------------------------------------------------- admission */

static int32_t take_free_ids(struct sched *s, int32_t *ids, int32_t n, int32_t keep) {
    int32_t got = 0;
    for (;;) {
        got = 0;
        for (int32_t i = 0; i < s->n_seq && got < n; i++)
            if (s->seqs[i].kind == SEQ_FREE) ids[got++] = i;
        if (got == n || !evict_lru(s, keep)) return got;
    }
}

/* Admit the queue's head if its prompt fits; false when it has to wait. */
static bool admit_one(struct sched *s, struct sched_req *r, double now_ms) {
    int32_t src = -1;
    if (r->cache_prompt) best_prefix(s, r->prompt, r->n_prompt, &src);
    if (take_free_ids(s, r->seqs, r->n_choices, src) < r->n_choices) {
        for (int32_t c = 0; c < r->n_choices; c++) r->seqs[c] = -1;
        return false;
    }
    int32_t parent = r->seqs[0];
    int32_t shared = r->cache_prompt ? attach_prefix(s, parent, r->prompt, r->n_prompt) : 0;
    if (!make_room(s, memory_cells_needed(s->mem, parent, r->n_prompt - shared))) {
        if (shared) memory_seq_rm(s->mem, parent, 0, -1);
        for (int32_t c = 0; c < r->n_choices; c++) r->seqs[c] = -1;
        return false;
    }
    for (int32_t c = 0; c < r->n_choices; c++) {
        struct seq *q = &s->seqs[r->seqs[c]];
        *q = (struct seq){.kind = SEQ_LIVE, .req = r, .choice = c, .tokens = q->tokens,
                          .last_served = -1, .serial = ++s->next_serial};
        if (c == 0) {
            memcpy(q->tokens, r->prompt, (size_t)r->n_prompt * sizeof *q->tokens);
            q->n_tokens = r->n_prompt;
            q->n_past = shared;
            q->in_memory = true;
        } else {
            q->forking = true;
        }
    }
    r->forked = r->n_choices == 1;
    r->n_cached = shared;
    r->t_admit = now_ms;
    r->state = REQ_ACTIVE;
    s->totals.cached_tokens += shared;
    s->last_progress_ms = now_ms;
    return true;
}

/* Bring one preempted sequence back; false when it has to wait. */
static bool resume_one(struct sched *s, int32_t id) {
    struct seq *q = &s->seqs[id];
    if (q->snap) {
        if (!make_room(s, q->snap_cells + memory_cells_needed(s->mem, id, q->n_tokens - q->n_past)))
            return false;
        if (memory_seq_restore(s->mem, id, q->snap) != 0) return false;
        memory_snapshot_free(s->mem, q->snap);
        q->snap = NULL;
        q->in_memory = true;
        return true;
    }
    q->in_memory = true; /* so that best_prefix skips it (n_past is 0) and pending_need counts it */
    int32_t shared = attach_prefix(s, id, q->tokens, q->n_tokens);
    q->n_past = shared;
    if (make_room(s, 0)) return true;
    if (shared) memory_seq_rm(s->mem, id, 0, -1);
    q->n_past = 0;
    q->in_memory = false;
    return false;
}

static int32_t oldest_preempted(const struct sched *s) {
    int32_t best = -1;
    for (int32_t i = 0; i < s->n_seq; i++) {
        const struct seq *q = &s->seqs[i];
        if (q->kind == SEQ_LIVE && !q->in_memory && !q->forking && !q->req->cancelled &&
            (best < 0 || q->serial < s->seqs[best].serial))
            best = i;
    }
    return best;
}

/* Preempted sequences first (they are older), then the queue, in order; stop at the first that
 * does not fit so that a big request is not overtaken forever by small ones. */
static void admit(struct sched *s, double now_ms) {
    for (int32_t id; (id = oldest_preempted(s)) >= 0;)
        if (!resume_one(s, id)) return;
    while (s->queue_head) {
        struct sched_req *r = s->queue_head;
        if (!admit_one(s, r, now_ms)) return;
        s->queue_head = r->next;
        if (!s->queue_head) s->queue_tail = NULL;
        r->next = NULL;
    }
}

/* ---------------------------------------------------------------- step building */

/* Service order: least recently served first; a never-served sequence counts as served
 * starve_steps ago, so it goes before sequences served recently but not before one that has
 * waited longer than that. Ties: admission order. */
static int64_t service_key(const struct sched *s, const struct seq *q) {
    return q->last_served >= 0 ? q->last_served : s->step.number - s->cfg.starve_steps;
}

static void insert_ordered(const struct sched *s, int32_t *order, int32_t n, int32_t id) {
    const struct seq *q = &s->seqs[id];
    int64_t key = service_key(s, q);
    int32_t j = n;
    while (j > 0) {
        const struct seq *p = &s->seqs[order[j - 1]];
        int64_t pk = service_key(s, p);
        if (pk < key || (pk == key && p->serial < q->serial)) break;
        order[j] = order[j - 1];
        j--;
    }
    order[j] = id;
}

static void collect(struct sched *s) {
    s->n_decode = s->n_prompt = 0;
    for (int32_t i = 0; i < s->n_seq; i++) {
        const struct seq *q = &s->seqs[i];
        if (q->kind != SEQ_LIVE || !q->in_memory || q->req->cancelled) continue;
        int32_t remaining = q->n_tokens - q->n_past;
        ASSERT(remaining >= 1);
        if (remaining == 1) insert_ordered(s, s->decode_order, s->n_decode++, i);
        else insert_ordered(s, s->prompt_order, s->n_prompt++, i);
    }
}

static void add_samples(struct sched *s, struct step_entry *e, int32_t row) {
    struct sched_step *st = &s->step;
    const struct seq *q = &s->seqs[e->seq];
    struct sched_req *r = q->req;
    e->first_sample = st->n_samples;
    /* before the fork, the prompt's logits feed every choice's sampler */
    int32_t first = r->forked ? q->choice : 0, last = r->forked ? q->choice : r->n_choices - 1;
    for (int32_t c = first; c <= last; c++)
        st->samples[st->n_samples++] = (struct step_sample){
            .row = row, .seq = e->seq, .choice = c, .sampler = r->samplers[c], .n_probs = r->n_probs};
    e->n_samples = st->n_samples - e->first_sample;
}

static void add_tokens(struct sched *s, int32_t id, int32_t n) {
    struct sched_step *st = &s->step;
    struct seq *q = &s->seqs[id];
    struct step_entry *e = &st->entries[st->n_entries++];
    *e = (struct step_entry){.seq = id, .n_new = n};
    for (int32_t k = 0; k < n; k++) {
        int32_t pos = q->n_past + k;
        bool last = pos == q->n_tokens - 1;
        batch_add(&st->batch, q->tokens[pos], pos, id, last);
        if (last) add_samples(s, e, st->batch.n_outputs - 1);
    }
}

/* Fill the batch: every decode (round-robin when they exceed the batch), then prompt chunks. */
static void fill(struct sched *s, int32_t prompt_cap, int32_t chunk_cap) {
    struct sched_step *st = &s->step;
    batch_clear(&st->batch);
    st->n_entries = st->n_samples = 0;
    /* with more decodes than the batch holds, prompts still get a few tokens: they rotate too */
    int32_t decode_cap = st->batch.capacity;
    if (s->n_prompt > 0 && prompt_cap > 0) {
        int32_t keep = SCHED_MIN_PROMPT_TOKENS < decode_cap / 2 ? SCHED_MIN_PROMPT_TOKENS : decode_cap / 2;
        decode_cap -= keep;
    }
    for (int32_t i = 0; i < s->n_decode && st->batch.n_tokens < decode_cap; i++)
        add_tokens(s, s->decode_order[i], 1);
    st->n_decode_tokens = st->batch.n_tokens;
    int32_t left = st->batch.capacity - st->batch.n_tokens;
    if (prompt_cap < left) left = prompt_cap;
    for (int32_t i = 0; i < s->n_prompt && left > 0; i++) {
        const struct seq *q = &s->seqs[s->prompt_order[i]];
        int32_t n = q->n_tokens - q->n_past;
        if (n > chunk_cap) n = chunk_cap;
        if (n > left) n = left;
        add_tokens(s, s->prompt_order[i], n);
        left -= n;
    }
    st->n_prompt_tokens = st->batch.n_tokens - st->n_decode_tokens;
}

/* The live sequence holding the most cells (ties: the latest admitted); -1 when fewer than two
 * live sequences hold memory (preempting the only one is useless). */
static int32_t preempt_victim(const struct sched *s, int64_t *cells_out) {
    int32_t victim = -1, holders = 0;
    int64_t most = -1;
    for (int32_t i = 0; i < s->n_seq; i++) {
        const struct seq *q = &s->seqs[i];
        if (q->kind != SEQ_LIVE || !q->in_memory || q->req->cancelled) continue;
        holders++;
        int64_t cells = memory_seq_cells(s->mem, i);
        if (cells > most || (cells == most && q->serial > s->seqs[victim].serial)) {
            most = cells;
            victim = i;
        }
    }
    *cells_out = most;
    return holders < 2 ? -1 : victim;
}

/* Take a live sequence out of memory until it can resume: with its host snapshot, or (snap NULL)
 * to recompute everything on resume, sharing what it can then. */
static void preempt(struct sched *s, int32_t id, struct memory_snapshot *snap, int64_t cells) {
    struct seq *q = &s->seqs[id];
    q->snap = snap;
    q->snap_cells = cells;
    if (!snap) q->n_past = 0;
    int rc = memory_seq_rm(s->mem, id, 0, -1);
    ASSERT(rc == 0);
    q->in_memory = false;
    s->totals.preemptions++;
}

static void finish_choice(struct sched *s, int32_t id, enum sched_stop reason, double now_ms);

/* Every request with a sequence in the step's batch gets on_error(err) and ends. */
static void fail_batch(struct sched *s, int err) {
    struct sched_step *st = &s->step;
    s->in_callbacks++;
    for (int32_t i = 0; i < st->n_entries; i++) {
        struct seq *q = &s->seqs[st->entries[i].seq];
        if (q->kind == SEQ_LIVE) fail_request(s, q->req, err);
    }
    s->in_callbacks--;
}

/* The prompt budget of this step: everything when one sequence runs alone; while others wait,
 * what the learned step cost says fits in max_step_ms after the decodes. */
static void budget(const struct sched *s, int32_t *prompt_cap, int32_t *chunk_cap) {
    bool others = s->n_decode + s->n_prompt > 1 || s->queue_head || oldest_preempted(s) >= 0;
    *prompt_cap = s->cfg.batch_tokens;
    *chunk_cap = s->cfg.batch_tokens;
    if (!others) return;
    *chunk_cap = s->cfg.chunk_tokens;
    int32_t within = step_cost_tokens_within(&s->cost, s->cfg.max_step_ms);
    if (within < 0) return;
    int32_t decodes = s->n_decode < s->cfg.batch_tokens ? s->n_decode : s->cfg.batch_tokens;
    int32_t cap = within - decodes;
    *prompt_cap = cap > SCHED_MIN_PROMPT_TOKENS ? cap : SCHED_MIN_PROMPT_TOKENS;
}

/* Sequences ended while building: their memory may let waiting ones in. */
static void readmit(struct sched *s, double now_ms) {
    sweep_cancelled(s);
    admit(s, now_ms);
    collect(s);
}

int sched_build_step(struct sched *s, double now_ms, struct sched_step **out) {
    ASSERT(!s->in_flight);
    *out = NULL;
    sweep_cancelled(s);
    admit(s, now_ms);
    struct sched_step *st = &s->step;
    st->has_save = false;
    st->number++;
    collect(s);
    int32_t prompt_cap, chunk_cap;
    budget(s, &prompt_cap, &chunk_cap);
    int32_t full_prompt_cap = prompt_cap;
    for (;;) {
        fill(s, prompt_cap, chunk_cap);
        if (st->batch.n_tokens == 0) break;
        int rc = memory_reserve(s->mem, &st->batch);
        if (rc == 0) break;
        if (rc != -ERR_NOMEM) { /* the memory refuses the batch itself: its requests fail */
            fail_batch(s, rc);
            readmit(s, now_ms);
            continue;
        }
        /* No room: give up cache first, then prompt tokens, then the biggest sequence. */
        if (evict_lru(s, -1)) continue;
        if (st->n_prompt_tokens > 1) {
            prompt_cap = st->n_prompt_tokens / 2;
            continue;
        }
        if (st->n_prompt_tokens == 1 && st->n_decode_tokens > 0) {
            prompt_cap = 0;
            continue;
        }
        int64_t cells;
        int32_t victim = preempt_victim(s, &cells);
        if (victim >= 0 && s->cfg.preempt_recompute) {
            preempt(s, victim, NULL, 0);
            prompt_cap = full_prompt_cap;
            collect(s);
            continue;
        }
        if (victim >= 0) { /* this step only saves the victim; the next one runs the batch */
            batch_clear(&st->batch);
            st->n_entries = st->n_samples = st->n_prompt_tokens = st->n_decode_tokens = 0;
            st->has_save = true;
            st->save = (struct step_save){.seq = victim, .cells = cells, .err = -ERR_CANCELLED};
            break;
        }
        /* One sequence holds the whole memory and needs more: it has reached its limit. */
        int32_t id = st->entries[0].seq;
        s->in_callbacks++;
        finish_choice(s, id, SCHED_STOP_CONTEXT, now_ms);
        s->in_callbacks--;
        readmit(s, now_ms);
    }
    refresh_usage(s);
    if (st->batch.n_tokens == 0 && !st->has_save) {
        st->number--;
        return 0;
    }
    st->err = -ERR_CANCELLED; /* until sched_step_compute runs: a step that never ran fails */
    st->started_ms = now_ms;
    st->expected_ms = step_cost_predict_ms(&s->cost, st->batch.n_tokens);
    s->in_flight = true;
    *out = st;
    return st->has_save ? 1 : st->batch.n_tokens;
}

/* ---------------------------------------------------------------- compute (worker thread) */

void sched_step_compute(struct sched *s, struct sched_step *st) {
    if (st->has_save) {
        st->save.snap = NULL;
        st->save.err = memory_seq_save(s->mem, st->save.seq, &st->save.snap);
        return;
    }
    const float *logits = NULL;
    st->err = s->ops->forward(s->engine, s->mem, &st->batch, &logits);
    if (st->err) return;
    for (int32_t i = 0; i < st->n_samples; i++) {
        struct step_sample *sm = &st->samples[i];
        const float *row = logits + (size_t)sm->row * (size_t)s->n_vocab;
        sm->out.n_top = 0;
        sm->out.token = s->ops->sample(s->engine, sm->sampler, row, sm->n_probs, &sm->out);
    }
}

/* ---------------------------------------------------------------- completion */

static void finish_choice(struct sched *s, int32_t id, enum sched_stop reason, double now_ms) {
    struct seq *q = &s->seqs[id];
    struct sched_req *r = q->req;
    int32_t choice = q->choice;
    struct sched_counts counts = {
        .n_prompt = r->n_prompt,
        .n_cached = r->n_cached,
        .n_generated = q->forking ? 0 : q->n_tokens - r->n_prompt,
        .prompt_ms = (r->has_first ? r->t_first : now_ms) - r->t_admit,
        .predicted_ms = r->has_first ? now_ms - r->t_first : 0,
    };
    if (counts.n_generated < 0) counts.n_generated = 0; /* ended before its prompt finished */
    if (r->cache_prompt && q->in_memory && q->n_past > 0) keep_as_cache(s, id);
    else seq_release(s, id);
    r->seqs[choice] = -1;
    s->ops->sampler_free(s->engine, r->samplers[choice]);
    r->samplers[choice] = NULL;
    r->n_live--;
    s->totals.choices_done[reason]++;
    if (!r->cancelled) r->sink.on_done(r->owner, choice, reason, &counts);
    /* a prompt that ends before its fork ends its waiting siblings too */
    if (choice == 0 && !r->forked)
        for (int32_t c = 1; c < r->n_choices; c++)
            if (r->seqs[c] >= 0) finish_choice(s, r->seqs[c], reason, now_ms);
    if (r->n_live == 0) {
        if (r->cancelled) { /* cancelled from inside on_done: nothing left to release */
            r->cancelled = false;
            s->n_cancel_pending--;
        }
        req_free(s, r);
    }
}

static void rate_add(struct rate_window *w, double now_ms, int64_t n) {
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

/* Give the prompt's first logits to every choice: siblings share the parent's cells. */
static void fork_choices(struct sched *s, struct sched_req *r) {
    const struct seq *parent = &s->seqs[r->seqs[0]];
    for (int32_t c = 1; c < r->n_choices; c++) {
        struct seq *q = &s->seqs[r->seqs[c]];
        memcpy(q->tokens, parent->tokens, (size_t)parent->n_tokens * sizeof *q->tokens);
        q->n_tokens = parent->n_tokens;
        q->forking = false;
        q->in_memory = true;
        /* when the memory cannot share (no room for a state copy), the child recomputes */
        q->n_past = memory_seq_cp(s->mem, r->seqs[0], r->seqs[c], 0, parent->n_past) == 0
                        ? parent->n_past : 0;
    }
    r->forked = true;
}

/* Append a sampled token to a choice and check its stop conditions. */
static void take_token(struct sched *s, int32_t id, const struct sched_token_probs *p, double now_ms) {
    struct seq *q = &s->seqs[id];
    struct sched_req *r = q->req;
    if (!r->has_first) {
        r->has_first = true;
        r->t_first = now_ms;
    }
    if (r->n_predict == 0) {
        finish_choice(s, id, SCHED_STOP_LIMIT, now_ms);
        return;
    }
    if (!r->ignore_eos && s->ops->is_eog(s->engine, p->token)) {
        finish_choice(s, id, SCHED_STOP_EOS, now_ms);
        return;
    }
    ASSERT(q->n_tokens < s->token_cap);
    q->tokens[q->n_tokens++] = p->token;
    s->totals.generated_tokens++;
    rate_add(&s->rate, now_ms, 1);
    bool go_on = r->sink.on_token(r->owner, q->choice, p->token, r->n_probs > 0 ? p : NULL);
    if (r->cancelled) return; /* the owner cancelled from the callback: the sweep frees it */
    int32_t generated = q->n_tokens - r->n_prompt;
    if (!go_on) finish_choice(s, id, SCHED_STOP_WORD, now_ms);
    else if (r->n_predict > 0 && generated >= r->n_predict) finish_choice(s, id, SCHED_STOP_LIMIT, now_ms);
    else if (q->n_tokens >= s->token_cap) finish_choice(s, id, SCHED_STOP_CONTEXT, now_ms);
}

static void learn(struct sched *s, const struct sched_step *st, double now_ms) {
    s->last_progress_ms = now_ms;
    if (st->batch.n_tokens == 0) return; /* a save-only step says nothing about forward speed */
    double ms = now_ms - st->started_ms;
    if (ms < 0) ms = 0;
    step_cost_observe(&s->cost, st->batch.n_tokens, ms);
    int b = 0;
    while (ms > sched_step_hist_bounds_ms[b]) b++;
    s->totals.step_hist[b]++;
    s->totals.steps++;
    s->totals.prompt_ms += ms * st->n_prompt_tokens / st->batch.n_tokens;
    s->totals.decode_ms += ms * st->n_decode_tokens / st->batch.n_tokens;
    s->totals.prompt_tokens += st->n_prompt_tokens;
}

void sched_step_complete(struct sched *s, struct sched_step *st, double now_ms) {
    ASSERT(s->in_flight && st == &s->step);
    learn(s, st, now_ms);
    if (st->has_save) /* a failed save falls back to recomputing */
        preempt(s, st->save.seq, st->save.err == 0 ? st->save.snap : NULL, st->save.cells);
    s->in_callbacks++;
    if (st->err) {
        fail_batch(s, st->err);
    } else {
        /* first what the memory now holds, then the tokens (a finishing choice caches n_past) */
        for (int32_t i = 0; i < st->n_entries; i++) {
            struct seq *q = &s->seqs[st->entries[i].seq];
            q->n_past += st->entries[i].n_new;
            q->last_served = st->number;
        }
        for (int32_t i = 0; i < st->n_entries; i++) {
            const struct step_entry *e = &st->entries[i];
            struct seq *q = &s->seqs[e->seq];
            if (e->n_samples == 0 || q->kind != SEQ_LIVE || q->req->cancelled) continue;
            struct sched_req *r = q->req;
            if (!r->forked && r->n_predict != 0) fork_choices(s, r);
            for (int32_t k = 0; k < e->n_samples; k++) {
                const struct step_sample *sm = &st->samples[e->first_sample + k];
                int32_t id = r->seqs[sm->choice];
                if (id < 0 || r->cancelled) continue;
                take_token(s, id, &sm->out, now_ms);
                if (r->state == REQ_FREE) break; /* its last choice ended */
            }
        }
    }
    s->in_callbacks--;
    s->in_flight = false;
    sweep_cancelled(s);
    refresh_usage(s);
}

/* ---------------------------------------------------------------- introspection */

const struct batch *sched_step_batch(const struct sched_step *st) { return &st->batch; }

int32_t sched_req_seq(const struct sched_req *r, int32_t choice) {
    ASSERT(choice >= 0 && choice < r->n_choices);
    if (r->state != REQ_ACTIVE || r->seqs[choice] < 0) return -1;
    const struct seq *q = &r->sched->seqs[r->seqs[choice]];
    return q->in_memory ? r->seqs[choice] : -1;
}

void sched_stats(const struct sched *s, double now_ms, struct sched_stats *out) {
    *out = s->totals;
    for (const struct sched_req *q = s->queue_head; q; q = q->next) out->queued++;
    for (int32_t i = 0; i < s->n_reqs; i++) out->active_requests += s->reqs[i].state == REQ_ACTIVE;
    for (int32_t i = 0; i < s->n_seq; i++) {
        const struct seq *q = &s->seqs[i];
        if (q->kind == SEQ_CACHE) out->cached_seqs++;
        if (q->kind != SEQ_LIVE) continue;
        out->active_seqs++;
        if (!q->in_memory && !q->forking) out->preempted++;
    }
    out->cells_total = s->usage.cells_total;
    out->cells_used = s->usage.cells_used;
    out->tokens_per_s = rate_per_s(&s->rate, now_ms);
    out->step_in_flight = s->in_flight;
    out->step_started_ms = s->in_flight ? s->step.started_ms : 0;
    out->step_expected_ms = s->in_flight ? s->step.expected_ms : 0;
    out->last_progress_ms = s->last_progress_ms;
    /* Before the first measured step there is no expectation: a cold first prompt may take
     * seconds, and calling that a stall would get a healthy server restarted. */
    double limit_ms = s->cost.observed > 0 ? s->cfg.stall_factor * s->step.expected_ms + s->cfg.stall_grace_ms
                                           : s->cfg.stall_timeout_ms;
    bool overdue = s->in_flight && now_ms - s->step.started_ms > limit_ms;
    bool waiting = out->queued + out->active_requests > 0;
    /* a step in flight is judged by its own expected time: a legitimately long step is progress */
    bool idle_too_long = !s->in_flight && waiting && now_ms - s->last_progress_ms > s->cfg.stall_timeout_ms;
    out->stalled = overdue || idle_too_long;
}

int32_t sched_slots(const struct sched *s, struct sched_slot *out, int32_t max) {
    int32_t n = 0;
    for (const struct sched_req *r = s->queue_head; r; r = r->next, n++)
        if (n < max)
            out[n] = (struct sched_slot){.request_id = r->id, .seq = -1, .state = SCHED_QUEUED,
                                         .n_prompt = r->n_prompt};
    for (int32_t i = 0; i < s->n_seq; i++) {
        const struct seq *q = &s->seqs[i];
        if (q->kind != SEQ_LIVE) continue;
        if (n < max) {
            enum sched_seq_state st = q->forking ? SCHED_FORKING
                                      : !q->in_memory ? SCHED_PREEMPTED
                                      : q->n_tokens - q->n_past > 1 ? SCHED_PREFILL : SCHED_GENERATE;
            int32_t generated = q->n_tokens - q->req->n_prompt;
            out[n] = (struct sched_slot){
                .request_id = q->req->id, .choice = q->choice, .seq = q->in_memory ? i : -1,
                .state = st, .n_prompt = q->req->n_prompt,
                .n_generated = generated > 0 ? generated : 0, .cells = q->cells};
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
        !(cfg->max_step_ms > 0) || mem->n_seq_max < 1)
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
    if (!s->seqs || !s->tokens_pool || !s->reqs || !s->decode_order || !s->prompt_order ||
        !s->step.entries || !s->step.samples || batch_init(&s->step.batch, cfg->batch_tokens) != 0) {
        sched_destroy(s);
        return -ERR_NOMEM;
    }
    for (int32_t i = 0; i < s->n_seq; i++) {
        s->seqs[i].tokens = s->tokens_pool + (size_t)i * (size_t)s->token_cap;
        seq_reset(&s->seqs[i]);
    }
    for (int32_t i = s->n_reqs - 1; i >= 0; i--) {
        s->reqs[i].next = s->free_reqs;
        s->free_reqs = &s->reqs[i];
    }
    refresh_usage(s);
    *out = s;
    return 0;
}

void sched_destroy(struct sched *s) {
    if (!s) return;
    ASSERT(!s->in_flight);
    if (s->reqs)
        for (int32_t i = 0; i < s->n_reqs; i++)
            if (s->reqs[i].state != REQ_FREE) req_release(s, &s->reqs[i]);
    if (s->seqs)
        for (int32_t i = 0; i < s->n_seq; i++)
            if (s->seqs[i].kind != SEQ_FREE) seq_release(s, i);
    batch_free(&s->step.batch);
    free(s->step.entries);
    free(s->step.samples);
    free(s->decode_order);
    free(s->prompt_order);
    free(s->reqs);
    free(s->tokens_pool);
    free(s->seqs);
    free(s);
}
