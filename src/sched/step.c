/* step.c: admission, then building, computing and completing steps (see sched.h for the
 * policy and sched_internal.h for the state). */
#include "sched/sched_internal.h"

#include "common/err.h"

#include <string.h>

/* Prompts always get at least this many tokens per step, even when decodes alone fill the time
 * target: otherwise a crowd of generating sequences would starve every new prompt. */
#define SCHED_MIN_PROMPT_TOKENS 16
/* The share of max_step_ms a step carrying a newcomer's prompt aims at. */
#define SCHED_NEWCOMER_STEP_SHARE 0.7
/* SCHED_PROBE_TOKENS (sched.h): until a step has been measured its cost is unknown, so the first
 * prompt step of a fresh server is this small (a fraction of a second for a 1B model on 2 cores:
 * scripts/bench.d/40-forward gives the prompt tokens/s) and a request arriving during it does not
 * wait seconds; the cost line learned from it sizes the next ones. */

/* ---------------------------------------------------------------- admission */

/* Does this sequence still read prompt positions whose rows give prompt logprobs? */
static bool wants_prompt_rows(const struct seq *q) {
    return q->req->prompt_logprobs && !q->req->pprobs_sent && q->n_past < q->req->n_prompt - 1;
}

/* Admit the queue's head if its prompt fits; false when it has to wait. */
static bool admit_one(struct sched *s, struct sched_req *r, double now_ms) {
    int32_t src = -1;
    if (r->cache_prompt) sched_cache_best_prefix(s, r->partition, r->prompt, r->n_prompt, &src);
    if (sched_cache_take_free_ids(s, r->seqs, r->n_choices, src) < r->n_choices) {
        for (int32_t c = 0; c < r->n_choices; c++) r->seqs[c] = -1;
        return false;
    }
    int32_t parent = r->seqs[0];
    int32_t shared = r->cache_prompt ? sched_cache_attach_prefix(s, parent, r->partition, r->prompt, r->n_prompt) : 0;
    int64_t need = memory_cells_needed(s->mem, parent, r->n_prompt - shared);
    /* and the first cell of every sibling after the fork (what sched_cache_pending_need counts
     * for them once admitted), as far as the memory can ever hold them: on a memory too small for
     * all at once, the rest recompute their prompt when cells free (fork_choices) */
    int64_t siblings = r->n_choices - 1;
    int64_t most = s->usage.cells_total - memory_seq_cells(s->mem, parent) - need;
    need += siblings < most ? siblings : most > 0 ? most : 0;
    /* states (a hybrid's): the parent's unless the shared prefix brought one, and the siblings',
     * as far as the memory can ever hold them, likewise */
    int64_t states = memory_seq_pos_max(s->mem, parent) < 0;
    int64_t most_states = s->usage.states_total - 1;
    states += siblings < most_states ? siblings : most_states > 0 ? most_states : 0;
    if (!sched_cache_make_room(s, need, states)) {
        if (shared) memory_seq_rm(s->mem, parent, 0, -1);
        for (int32_t c = 0; c < r->n_choices; c++) r->seqs[c] = -1;
        return false;
    }
    for (int32_t c = 0; c < r->n_choices; c++) {
        struct seq *q = &s->seqs[r->seqs[c]];
        *q = (struct seq){.kind = SEQ_LIVE, .req = r, .choice = c, .tokens = q->tokens,
                          .last_served = -1, .serial = ++s->next_serial, .held_since = s->step.number + 1,
                          .partition = r->partition};
        if (c == 0) {
            memcpy(q->tokens, r->prompt, (size_t)r->n_prompt * sizeof *q->tokens);
            q->n_tokens = r->n_prompt;
            q->n_past = shared;
            q->in_memory = true;
        } else {
            q->forking = true;
        }
    }
    /* Without partial removal a state cannot go back from a prompt's end to give its last
     * logits again: a copy of the state before the last prompt token is kept as prompt cache,
     * so that the same prompt again only runs that token. */
    if (r->cache_prompt && !s->mem->ops->partial_removal && shared < r->n_prompt - 1)
        s->seqs[parent].checkpoint_at = r->n_prompt - 1;
    r->forked = r->n_choices == 1;
    r->n_cached = shared;
    r->t_admit = now_ms;
    r->state = REQ_ACTIVE;
    s->n_active_reqs++;
    s->totals.cached_tokens += shared;
    s->last_progress_ms = now_ms;
    return true;
}

/* It holds memory again (from the next step on). */
static void resumed(struct sched *s, struct seq *q) {
    q->held_since = s->step.number + 1;
    q->sliced = false;
}

/* Bring one preempted sequence back; false when it has to wait (as it was). */
static bool resume_one(struct sched *s, int32_t id) {
    struct seq *q = &s->seqs[id];
    if (q->snap) {
        /* room for the snapshot (cells it shared with others and that still live are taken back
         * without a copy; a cache eviction may free some of them, and then it needs more: until
         * that settles), then, restored (so that the memory knows what the sequence holds: a
         * recurrent state needs nothing more), for the rest of its tokens; what others still need
         * counts, not its own forking choices (they fall back to recomputing) */
        for (int64_t need = -1, now; (now = memory_restore_cells_needed(s->mem, id, q->snap)) != need;) {
            need = now;
            if (!sched_cache_make_room(s, need, 1)) return false;
        }
        if (memory_seq_restore(s->mem, id, q->snap) != 0) return false;
        if (!sched_cache_make_room(s, memory_cells_needed(s->mem, id, q->n_tokens - q->n_past), 0)) {
            int rc = memory_seq_rm(s->mem, id, 0, -1);
            ASSERT(rc == 0);
            return false;
        }
        memory_snapshot_free(s->mem, q->snap);
        q->snap = NULL;
        q->in_memory = true;
        resumed(s, q);
        return true;
    }
    q->in_memory = true; /* so that sched_cache_best_prefix skips it (n_past is 0) and sched_cache_pending_need counts it */
    /* a prompt whose rows are still wanted is computed whole; an embedding pools every position
     * it reads: neither shares anything */
    int32_t shared = q->req->embed || wants_prompt_rows(q) ? 0 : sched_cache_attach_prefix(s, id, q->partition, q->tokens, q->n_tokens);
    q->n_past = shared;
    if (sched_cache_make_room(s, 0, 0)) { /* its state, if it still needs one, is pending (in_memory) */
        resumed(s, q);
        return true;
    }
    if (shared) memory_seq_rm(s->mem, id, 0, -1);
    q->n_past = 0;
    q->in_memory = false;
    return false;
}

/* Does preempted a resume before preempted b? Memory pressure's victims first, by admission;
 * then time-sliced ones, longest waiting first. */
static bool resumes_before(const struct seq *a, const struct seq *b) {
    if (a->sliced != b->sliced) return !a->sliced;
    if (a->sliced && a->wait_since != b->wait_since) return a->wait_since < b->wait_since;
    return a->serial < b->serial;
}

static int32_t oldest_preempted(const struct sched *s) {
    int32_t best = -1;
    for (int32_t i = 0; i < s->n_seq; i++) {
        const struct seq *q = &s->seqs[i];
        if (q->kind == SEQ_LIVE && !q->in_memory && !q->forking && !q->req->cancelled &&
            (best < 0 || resumes_before(q, &s->seqs[best])))
            best = i;
    }
    return best;
}

/* The waiter admit() serves next: *id a preempted sequence or *r the queue's head (the other -1 /
 * NULL; both when nothing waits). A sequence preempted for memory goes before new requests (it
 * is older); one preempted by time-slicing waits behind requests queued before its preemption. */
static void next_waiter(const struct sched *s, int32_t *id, struct sched_req **r) {
    *id = oldest_preempted(s);
    *r = s->queue_head;
    if (*id < 0 || !*r) return;
    const struct seq *q = &s->seqs[*id];
    if (q->sliced && q->wait_since > (*r)->wait_since) *id = -1;
    else *r = NULL;
}

/* Sequence ids a request could get: free ones and prompt cache (evictable). */
static int32_t ids_available(const struct sched *s) {
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_seq; i++) n += s->seqs[i].kind != SEQ_LIVE;
    return n;
}

/* Waiters in next_waiter order; stop at the first that does not fit so that a big request is not
 * overtaken forever by small ones. One exception: a queue head short of sequence ids waits for
 * live sequences to end, so preempted ones (which hold their ids) resume past it. */
static void admit(struct sched *s, double now_ms) {
    bool head_short_of_ids = false;
    for (;;) {
        int32_t id;
        struct sched_req *r;
        if (head_short_of_ids) {
            id = oldest_preempted(s);
            r = NULL;
        } else {
            next_waiter(s, &id, &r);
        }
        if (id >= 0) {
            if (!resume_one(s, id)) return;
            continue;
        }
        if (!r) return;
        if (!admit_one(s, r, now_ms)) {
            head_short_of_ids = ids_available(s) < r->n_choices;
            if (head_short_of_ids) continue;
            return;
        }
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

/* Is id the sequence this step saves (a time-slice preemption riding along with the batch)? */
static bool saving(const struct sched *s, int32_t id) {
    return s->step.has_save && s->step.save.seq == id;
}

/* Does id hold memory it can run on in this step: live, in memory (so not forking), not
 * cancelled and not being saved? What steps are built from, and preemption's candidates. */
static bool runnable(const struct sched *s, int32_t id) {
    const struct seq *q = &s->seqs[id];
    return q->kind == SEQ_LIVE && q->in_memory && !q->req->cancelled && !saving(s, id);
}

static void collect(struct sched *s) {
    s->n_decode = s->n_prompt = 0;
    for (int32_t i = 0; i < s->n_seq; i++) {
        if (!runnable(s, i)) continue;
        const struct seq *q = &s->seqs[i];
        int32_t remaining = q->n_tokens - q->n_past;
        ASSERT(remaining >= 1);
        if (remaining == 1) insert_ordered(s, s->decode_order, s->n_decode++, i);
        else insert_ordered(s, s->prompt_order, s->n_prompt++, i);
    }
    sched_spec_plan(s);
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
            .row = row, .seq = e->seq, .choice = c, .sampler = r->samplers[c], .n_probs = r->n_probs,
            .spec = r->draft_max > 0};
    e->n_samples = st->n_samples - e->first_sample;
}

/* Does an embedding keep the hidden state of position pos of its n_tokens? */
static bool pools(enum sched_embed embed, int32_t pos, int32_t n_tokens) {
    return embed == SCHED_EMBED_MEAN || embed == SCHED_EMBED_ALL || (embed == SCHED_EMBED_CLS && pos == 0) ||
           (embed == SCHED_EMBED_LAST && pos == n_tokens - 1);
}

static void add_tokens(struct sched *s, int32_t id, int32_t n) {
    struct sched_step *st = &s->step;
    struct seq *q = &s->seqs[id];
    struct step_entry *e = &st->entries[st->n_entries++];
    *e = (struct step_entry){.seq = id, .n_new = n, .first_hidden = st->batch.n_hidden};
    if (q->req->embed != SCHED_EMBED_OFF) { /* no logits, no sample: the hidden states pooled */
        for (int32_t pos = q->n_past; pos < q->n_past + n; pos++) {
            if (pools(q->req->embed, pos, q->n_tokens)) batch_add_hidden(&st->batch, q->tokens[pos], pos, id);
            else batch_add(&st->batch, q->tokens[pos], pos, id, false);
        }
        e->n_hidden = st->batch.n_hidden - e->first_hidden;
        return;
    }
    bool rows = wants_prompt_rows(q);
    for (int32_t k = 0; k < n; k++) {
        int32_t pos = q->n_past + k;
        bool last = pos == q->n_tokens - 1;
        bool prow = rows && pos < q->req->n_prompt - 1;
        batch_add(&st->batch, q->tokens[pos], pos, id, last || prow);
        if (last) add_samples(s, e, st->batch.n_outputs - 1);
        else if (prow)
            st->prows[st->n_prows++] = (struct step_prompt_row){st->batch.n_outputs - 1, q->req, pos};
    }
}

/* Does the step carry a newcomer's prompt (admitted, never served: it goes first)? */
static bool carries_newcomer(const struct sched *s) {
    for (int32_t k = 0; k < s->n_prompt; k++)
        if (s->seqs[s->prompt_order[k]].last_served < 0) return true;
    return false;
}

/* Whether prompt i of prompt_order takes all the budget the decodes and the prompts before it
 * leave, not chunk_cap: the last one, served most recently (a long prompt being read beside
 * streaming requests), so that its steps stay as full as alone instead of paying each step's
 * fixed cost on small chunks; except in a step that carries a newcomer's prompt (served first),
 * which stays short: the newcomer's first token waits for it (scripts/bench.d/50-serving,
 * fairness). */
static bool fills_rest(const struct sched *s, int32_t i) {
    return i == s->n_prompt - 1 && !carries_newcomer(s);
}

/* A decode with d drafts after it (sched_spec_plan): every row wants logits, the first sample's
 * rows follow one another. */
static void add_spec(struct sched *s, int32_t id, int32_t d) {
    struct sched_step *st = &s->step;
    const struct seq *q = &s->seqs[id];
    struct step_entry *e = &st->entries[st->n_entries++];
    *e = (struct step_entry){.seq = id, .n_new = 1 + d};
    batch_add(&st->batch, q->tokens[q->n_past], q->n_past, id, true);
    add_samples(s, e, st->batch.n_outputs - 1);
    struct step_sample *sm = &st->samples[e->first_sample];
    sm->n_draft = d;
    sm->draft_entry = st->batch.n_tokens;
    for (int32_t j = 0; j < d; j++) batch_add(&st->batch, q->plan[j], q->n_past + 1 + j, id, true);
    st->n_draft_tokens += d;
}

/* Fill the batch: every decode (round-robin when they exceed the batch) with its drafts while
 * they fit beside the other decodes, then prompt chunks. */
static void fill(struct sched *s, int32_t prompt_cap, int32_t chunk_cap) {
    struct sched_step *st = &s->step;
    batch_clear(&st->batch);
    st->n_entries = st->n_samples = st->n_prows = 0;
    /* with more decodes than the batch holds, prompts still get a few tokens: they rotate too */
    int32_t decode_cap = st->batch.capacity;
    if (s->n_prompt > 0 && prompt_cap > 0) {
        int32_t keep = SCHED_MIN_PROMPT_TOKENS < decode_cap / 2 ? SCHED_MIN_PROMPT_TOKENS : decode_cap / 2;
        decode_cap -= keep;
    }
    st->n_prompt_tails = st->n_draft_tokens = 0;
    int32_t draft_room = decode_cap - (s->n_decode < decode_cap ? s->n_decode : decode_cap);
    for (int32_t i = 0; i < s->n_decode && st->batch.n_tokens < decode_cap; i++) {
        const struct seq *q = &s->seqs[s->decode_order[i]];
        st->n_prompt_tails += q->n_past < q->req->n_prompt;
        if (q->n_plan > 0 && q->n_plan <= draft_room) {
            draft_room -= q->n_plan;
            add_spec(s, s->decode_order[i], q->n_plan);
        } else {
            add_tokens(s, s->decode_order[i], 1);
        }
    }
    st->n_decode_tokens = st->batch.n_tokens;
    int32_t left = st->batch.capacity - st->batch.n_tokens;
    if (prompt_cap < left) left = prompt_cap;
    for (int32_t i = 0; i < s->n_prompt && left > 0; i++) {
        const struct seq *q = &s->seqs[s->prompt_order[i]];
        int32_t n = q->n_tokens - q->n_past;
        if (n > chunk_cap && !fills_rest(s, i)) n = chunk_cap;
        if (n > left) n = left;
        /* a chunk stops at the checkpoint: the copy is taken when the step completes */
        if (q->checkpoint_at > q->n_past && q->n_past + n > q->checkpoint_at) n = q->checkpoint_at - q->n_past;
        if (wants_prompt_rows(q)) { /* a row per token: within the rows the forward gives, one
                                     * kept for each prompt after it */
            int32_t max_out = s->cfg.max_outputs > 0 ? s->cfg.max_outputs : st->batch.capacity;
            int32_t room = max_out - st->batch.n_outputs - (s->n_prompt - i - 1);
            if (n > room) n = room;
            if (n < 1) continue;
        }
        add_tokens(s, s->prompt_order[i], n);
        left -= n;
    }
    st->n_prompt_tokens = st->batch.n_tokens - st->n_decode_tokens;
}

/* The live sequence holding the most cells (ties: the latest admitted); -1 when fewer than two
 * live sequences hold memory (preempting the only one is useless). */
static int32_t preempt_victim(const struct sched *s) {
    int32_t victim = -1, holders = 0;
    int64_t most = -1;
    for (int32_t i = 0; i < s->n_seq; i++) {
        if (!runnable(s, i)) continue;
        const struct seq *q = &s->seqs[i];
        holders++;
        int64_t cells = memory_seq_cells(s->mem, i);
        if (cells > most || (cells == most && q->serial > s->seqs[victim].serial)) {
            most = cells;
            victim = i;
        }
    }
    return holders < 2 ? -1 : victim;
}

/* The time-slice victim (sched.h): when the next waiter has waited timeslice_steps and lacks
 * only memory, the live sequence that has held its memory longest, if for timeslice_steps at
 * least (ties: the earliest admitted); -1 otherwise. Only for a memory whose sequences never grow
 * (memory_ops.fixed_seq_cells), or whose states (a hybrid's) live sequences all hold (the prompt
 * cache's are evicted for waiting work): elsewhere memory pressure preempts, and a save is costly. */
static int32_t timeslice_victim(const struct sched *s) {
    if (s->cfg.timeslice_steps <= 0) return -1;
    if (!s->mem->ops->fixed_seq_cells) {
        int64_t live = 0;
        for (int32_t i = 0; i < s->n_seq; i++)
            live += s->seqs[i].kind == SEQ_LIVE && s->seqs[i].in_memory && memory_seq_pos_max(s->mem, i) >= 0;
        if (s->usage.states_total == 0 || live < s->usage.states_total) return -1;
    }
    int64_t now = s->step.number, slice = s->cfg.timeslice_steps;
    int32_t wid;
    struct sched_req *r;
    next_waiter(s, &wid, &r);
    if (wid >= 0 && now - s->seqs[wid].wait_since < slice) return -1;
    if (r && (now - r->wait_since < slice || ids_available(s) < r->n_choices))
        return -1; /* a request also needs sequence ids, which no preemption gives */
    if (wid < 0 && !r) return -1;
    int32_t victim = -1;
    for (int32_t i = 0; i < s->n_seq; i++) {
        if (!runnable(s, i)) continue; /* nothing is being saved yet */
        const struct seq *q = &s->seqs[i];
        if (now - q->held_since < slice || memory_seq_cells(s->mem, i) == 0) continue;
        const struct seq *v = victim >= 0 ? &s->seqs[victim] : NULL;
        if (!v || q->held_since < v->held_since || (q->held_since == v->held_since && q->serial < v->serial))
            victim = i;
    }
    return victim;
}

/* Take a live sequence out of memory until it can resume: with its host snapshot, or (snap NULL)
 * to recompute everything on resume, sharing what it can then. sliced: a time-slice preemption. */
static void preempt(struct sched *s, int32_t id, struct memory_snapshot *snap, bool sliced) {
    struct seq *q = &s->seqs[id];
    q->snap = snap;
    q->wait_since = s->step.number;
    q->sliced = sliced;
    if (!snap) q->n_past = 0;
    if (!snap && q->req->embd) /* every position is read again: pool from scratch */
        memset(q->req->embd, 0, (q->req->embed == SCHED_EMBED_ALL ? (size_t)q->req->n_prompt : 1) *
                                    (size_t)q->req->n_embd * sizeof *q->req->embd);
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
        if (q->kind == SEQ_LIVE) sched_req_fail(s, q->req, err);
    }
    s->in_callbacks--;
}

/* Prompt tokens, in the order fill() takes them (each chunk at most chunk_cap but the rest-filling
 * one, all together at most most), that fit in target_ms beside decodes of rows rows attending
 * attn cells. */
static int32_t prompt_fit(const struct sched *s, double target_ms, int32_t chunk_cap, int32_t most, int32_t rows,
                          double attn) {
    int32_t cap = 0;
    for (int32_t i = 0; i < s->n_prompt && cap < most; i++) {
        const struct seq *q = &s->seqs[s->prompt_order[i]];
        int32_t chunk = q->n_tokens - q->n_past;
        if (chunk > chunk_cap && !fills_rest(s, i)) chunk = chunk_cap;
        if (chunk > most - cap) chunk = most - cap;
        int32_t fit = step_cost_tokens_within(&s->cost, target_ms, rows, attn, q->n_past);
        if (fit < chunk) { /* the budget ends inside this chunk (fit is at least 1: check it) */
            if (fit > 1 || step_cost_predict_ms(&s->cost, rows + 1, attn + q->n_past + 1) <= target_ms) cap += fit;
            break;
        }
        cap += chunk;
        rows += chunk;
        attn += step_cost_attn(q->n_past, chunk);
    }
    return cap;
}

/* The prompt budget of this step (sched.h): while others wait, what the learned step cost says
 * fits in max_step_ms after the decodes (in SCHED_NEWCOMER_STEP_SHARE of it in a step carrying
 * a newcomer's prompt), not below SCHED_PROBE_TOKENS rows as far as max_step_ms holds them; a
 * prompt alone gets batch_tokens, cut to what fits in solo_step_ms (when set). Before any step was measured,
 * SCHED_PROBE_TOKENS. The cost counts attention (step_cost.h): the decodes' contexts, then the
 * prompts' chunks at their positions in the order fill() takes them, so a chunk late in a long
 * prompt gets fewer tokens. */
static void budget(const struct sched *s, int32_t *prompt_cap, int32_t *chunk_cap) {
    bool others = s->n_decode + s->n_prompt > 1 || s->queue_head || oldest_preempted(s) >= 0;
    *prompt_cap = s->cfg.batch_tokens;
    *chunk_cap = s->cfg.batch_tokens;
    double target_ms = s->cfg.max_step_ms;
    if (others) {
        *chunk_cap = s->cfg.chunk_tokens;
        /* a newcomer's first token waits for the step in flight and then for its own: a shorter
         * own step keeps the sum under twice max_step_ms; one much shorter costs the others
         * more steps (scripts/bench.d/50-serving, fairness: 0.5 gave the short requests a TTFT
         * p99 of 0.15-0.19 s and the long prompt 1.18-1.24x its time alone, 0.7 0.17-0.18 s and
         * 1.08-1.15x, the full target 0.21-0.27 s) */
        if (carries_newcomer(s)) target_ms *= SCHED_NEWCOMER_STEP_SHARE;
    } else if (!(s->cfg.solo_step_ms > 0)) return; /* no time cap alone: the whole budget */
    else if (s->cfg.solo_step_ms > target_ms) target_ms = s->cfg.solo_step_ms;
    if (s->cost.observed == 0) {
        *prompt_cap = SCHED_PROBE_TOKENS < s->cfg.batch_tokens ? SCHED_PROBE_TOKENS : s->cfg.batch_tokens;
        return;
    }
    int32_t decodes = s->n_decode < s->cfg.batch_tokens ? s->n_decode : s->cfg.batch_tokens, rows = decodes;
    double attn = 0;
    for (int32_t i = 0; i < decodes; i++) { /* a decode and its drafts (their rows count too) */
        const struct seq *q = &s->seqs[s->decode_order[i]];
        attn += step_cost_attn(q->n_past, 1 + q->n_plan);
        rows += q->n_plan;
    }
    int32_t cap = prompt_fit(s, target_ms, *chunk_cap, *prompt_cap, rows, attn);
    /* at least the probe's rows, the decodes' included: smaller steps cost several times more
     * per token (below 32 rows the matmuls take the per-row path, which reads the weights once
     * per 4 tokens), and a machine that slow misses the time target with a few tokens more or
     * less. Beside others only as far as max_step_ms holds them (a newcomer's shorter step
     * grows up to it), and beside many decodes prompts still get SCHED_MIN_PROMPT_TOKENS. */
    int32_t floor = SCHED_PROBE_TOKENS - rows;
    if (others && floor > cap) {
        int32_t full = target_ms < s->cfg.max_step_ms
                           ? prompt_fit(s, s->cfg.max_step_ms, *chunk_cap, *prompt_cap, rows, attn) : cap;
        if (floor > full) floor = full;
    }
    if (others && floor < SCHED_MIN_PROMPT_TOKENS) floor = SCHED_MIN_PROMPT_TOKENS;
    cap = cap > floor ? cap : floor;
    if (cap < *prompt_cap) *prompt_cap = cap;
}

/* Sequences ended while building: their memory may let waiting ones in. */
static void readmit(struct sched *s, double now_ms) {
    sched_sweep_cancelled(s);
    admit(s, now_ms);
    collect(s);
}

/* The step saves the victim on the worker (before its forward, if it has a batch). */
static void save_in_step(struct sched *s, int32_t victim, bool sliced) {
    s->step.has_save = true;
    s->step.save = (struct step_save){.seq = victim, .sliced = sliced, .err = -ERR_CANCELLED};
}

/* Empty the batch: the step only saves. */
static void clear_batch(struct sched_step *st) {
    batch_clear(&st->batch);
    st->n_entries = st->n_samples = st->n_prompt_tokens = st->n_decode_tokens = st->n_prompt_tails = 0;
    st->n_draft_tokens = 0;
}

int sched_build_step(struct sched *s, double now_ms, struct sched_step **out) {
    ASSERT(!s->in_flight);
    *out = NULL;
    sched_sweep_cancelled(s);
    admit(s, now_ms);
    struct sched_step *st = &s->step;
    st->has_save = false;
    st->number++;
    int32_t slice_victim = timeslice_victim(s);
    /* the victim is saved in this step, beside the batch of the others; its state is freed when
     * the step completes, and the waiter takes it in the next one */
    if (slice_victim >= 0) save_in_step(s, slice_victim, true);
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
        /* No room: give up drafts first (only a guess), then cache, then prompt tokens, then the
         * biggest sequence. */
        if (st->n_draft_tokens > 0) {
            for (int32_t i = 0; i < s->n_decode; i++) s->seqs[s->decode_order[i]].n_plan = 0;
            continue;
        }
        if (sched_cache_evict_lru(s, -1, true)) continue;
        if (st->n_prompt_tokens > 1) {
            prompt_cap = st->n_prompt_tokens / 2;
            continue;
        }
        if (st->n_prompt_tokens == 1 && st->n_decode_tokens > 0) {
            prompt_cap = 0;
            continue;
        }
        if (st->has_save) { /* a time-slice save is under way: let it free its memory first */
            clear_batch(st);
            break;
        }
        int32_t victim = preempt_victim(s);
        if (victim >= 0 && s->cfg.preempt_recompute) {
            preempt(s, victim, NULL, false);
            prompt_cap = full_prompt_cap;
            collect(s);
            continue;
        }
        if (victim >= 0) { /* this step only saves the victim; the next one runs the batch */
            clear_batch(st);
            save_in_step(s, victim, false);
            break;
        }
        /* One sequence holds the whole memory and needs more: it has reached its limit. */
        int32_t id = st->entries[0].seq;
        s->in_callbacks++;
        finish_choice(s, id, SCHED_STOP_CONTEXT, now_ms);
        s->in_callbacks--;
        readmit(s, now_ms);
    }
    sched_cache_refresh_usage(s);
    if (st->batch.n_tokens == 0 && !st->has_save) {
        st->number--;
        return 0;
    }
    st->err = -ERR_CANCELLED; /* until sched_step_compute runs: a step that never ran fails */
    st->started_ms = now_ms;
    st->attn = 0;
    for (int32_t i = 0; i < st->batch.n_tokens; i++) st->attn += st->batch.pos[i] + 1;
    st->expected_ms = step_cost_predict_ms(&s->cost, st->batch.n_tokens, st->attn);
    s->in_flight = true;
    *out = st;
    return st->batch.n_tokens > 0 ? st->batch.n_tokens : 1;
}

/* ---------------------------------------------------------------- compute (worker thread) */

/* An embedding's hidden rows of this step into its request's pooled rows: summed for the mean
 * (divided at the end), kept as they are otherwise. Only this step's worker touches them. */
static void pool_hidden(struct sched *s, const struct step_entry *e, const float *hidden) {
    const struct seq *q = &s->seqs[e->seq];
    struct sched_req *r = q->req;
    size_t E = (size_t)r->n_embd;
    for (int32_t k = 0; k < e->n_hidden; k++) {
        const float *h = hidden + (size_t)(e->first_hidden + k) * E;
        if (r->embed == SCHED_EMBED_MEAN) {
            for (size_t j = 0; j < E; j++) r->embd[j] += h[j];
        } else {
            /* ALL: the row of the k-th position of this entry; CLS and LAST: the one row */
            size_t row = r->embed == SCHED_EMBED_ALL ? (size_t)(q->n_past + k) : 0;
            memcpy(r->embd + row * E, h, E * sizeof *h);
        }
    }
}

void sched_step_compute(struct sched *s, struct sched_step *st) {
    if (st->has_save) { /* the saved sequence is not in the batch: the order does not matter */
        st->save.snap = NULL;
        st->save.err = memory_seq_save(s->mem, st->save.seq, &st->save.snap);
    }
    if (st->batch.n_tokens == 0) return;
    const float *logits = NULL;
    st->err = s->ops->forward(s->engine, s->mem, &st->batch, &logits);
    if (st->err) return;
    /* the draft model drafts only what the next step can verify: its decodes are about this
     * step's samples, and beside prompt chunks (a prompt not finished in this one) it verifies none */
    st->draft_left = SCHED_SPEC_ROWS - st->n_samples;
    for (int32_t i = 0; i < st->n_entries; i++)
        if (st->entries[i].n_samples == 0) st->draft_left = 0;
    for (int32_t i = 0; i < st->n_samples; i++) {
        struct step_sample *sm = &st->samples[i];
        if (sm->n_draft > 0) {
            sched_spec_verify(s, st, sm, logits);
            continue;
        }
        const float *row = logits + (size_t)sm->row * (size_t)s->n_vocab;
        sm->out.n_top = 0;
        sm->out.token = s->ops->sample(s->engine, sm->sampler, row, sm->n_probs, &sm->out);
        sm->n_out = 1;
        if (sm->spec && sm->out.token >= 0) sched_spec_draft(s, st, sm);
    }
    /* the request's pprobs: the loop thread reads them only after the step completes */
    for (int32_t i = 0; i < st->n_prows; i++) {
        const struct step_prompt_row *pr = &st->prows[i];
        const float *row = logits + (size_t)pr->row * (size_t)s->n_vocab;
        s->ops->token_logprobs(s->engine, row, pr->req->prompt[pr->pos + 1], pr->req->n_probs, &pr->req->pprobs[pr->pos]);
    }
    const float *hidden = st->batch.n_hidden ? s->hidden(s->engine) : NULL;
    for (int32_t i = 0; hidden && i < st->n_entries; i++)
        if (st->entries[i].n_hidden) pool_hidden(s, &st->entries[i], hidden);
}

/* ---------------------------------------------------------------- completion */

/* A request ended with every choice done: its distributions (sched.h, enum sched_hist_kind). */
static void observe_end(struct sched *s, const struct sched_req *r, double now_ms) {
    double first = r->has_first ? r->t_first : now_ms;
    sched_hist_observe(s, SCHED_HIST_E2E, (now_ms - r->t_submit) / 1e3);
    sched_hist_observe(s, SCHED_HIST_QUEUE, (r->t_admit - r->t_submit) / 1e3);
    sched_hist_observe(s, SCHED_HIST_PREFILL, (first - r->t_admit) / 1e3);
    sched_hist_observe(s, SCHED_HIST_DECODE, (now_ms - first) / 1e3);
    sched_hist_observe(s, SCHED_HIST_PROMPT_TOKENS, r->n_prompt);
    sched_hist_observe(s, SCHED_HIST_GEN_TOKENS, (double)r->n_generated);
}

static void finish_choice(struct sched *s, int32_t id, enum sched_stop reason, double now_ms) {
    struct seq *q = &s->seqs[id];
    struct sched_req *r = q->req;
    int32_t choice = q->choice;
    struct sched_counts counts = {
        .n_prompt = r->n_prompt,
        .n_cached = r->n_cached,
        .n_generated = q->forking ? 0 : q->n_tokens - r->n_prompt,
        .n_drafted = q->n_drafted,
        .n_draft_accepted = q->n_accepted,
        .prompt_ms = (r->has_first ? r->t_first : now_ms) - r->t_admit,
        .predicted_ms = r->has_first ? now_ms - r->t_first : 0,
    };
    if (counts.n_generated < 0) counts.n_generated = 0; /* ended before its prompt finished */
    /* a run of accepted drafts that stops early (a stop word, the limit, EOS) leaves the rest of
     * the run's positions in memory: they go, so that the cache holds exactly the tokens */
    if (q->n_drafted > 0 && q->in_memory && memory_seq_pos_max(s->mem, id) >= q->n_past)
        memory_seq_rm(s->mem, id, q->n_past, -1);
    if (r->cache_prompt && q->in_memory && q->n_past > 0) sched_cache_keep(s, id);
    else sched_cache_seq_release(s, id);
    r->seqs[choice] = -1;
    if (r->samplers[choice]) s->ops->sampler_free(s->engine, r->samplers[choice]);
    r->samplers[choice] = NULL;
    r->n_live--;
    r->n_generated += counts.n_generated;
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
        } else {
            observe_end(s, r, now_ms);
        }
        sched_req_free(s, r);
    }
}

/* An embedding has read its whole prompt: its rows to the sink, then it ends (its cells freed). */
static void finish_embedding(struct sched *s, int32_t id, double now_ms) {
    struct seq *q = &s->seqs[id];
    struct sched_req *r = q->req;
    if (!r->has_first) {
        r->has_first = true;
        r->t_first = now_ms;
    }
    if (r->embed == SCHED_EMBED_MEAN)
        for (int32_t j = 0; j < r->n_embd; j++) r->embd[j] /= (float)r->n_prompt;
    r->on_embedding(r->owner, r->embd, r->embed == SCHED_EMBED_ALL ? r->n_prompt : 1, r->n_embd);
    if (r->cancelled) return; /* the owner cancelled from the callback: the sweep frees it */
    finish_choice(s, id, SCHED_STOP_LIMIT, now_ms);
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
        q->held_since = s->step.number + 1;
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
        sched_hist_observe(s, SCHED_HIST_TTFT, (now_ms - r->t_submit) / 1e3);
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
    if (q->n_tokens > r->n_prompt) sched_hist_observe(s, SCHED_HIST_ITL, (now_ms - q->t_last) / 1e3);
    q->t_last = now_ms;
    q->tokens[q->n_tokens++] = p->token;
    s->totals.generated_tokens++;
    sched_rate_add(&s->rate, now_ms, 1);
    bool go_on = r->sink.on_token(r->owner, q->choice, p->token, r->n_probs > 0 ? p : NULL);
    if (r->cancelled) return; /* the owner cancelled from the callback: the sweep frees it */
    int32_t generated = q->n_tokens - r->n_prompt;
    if (!go_on) finish_choice(s, id, SCHED_STOP_WORD, now_ms);
    else if (r->n_predict > 0 && generated >= r->n_predict) finish_choice(s, id, SCHED_STOP_LIMIT, now_ms);
    else if (q->n_tokens >= s->token_cap) finish_choice(s, id, SCHED_STOP_CONTEXT, now_ms);
}

/* A verified run's memory (sched.h, speculation): the pending token and the accepted drafts stay
 * (positions p .. p + n_out - 1), the rejected ones go; n_past counts the pending token now and
 * each accepted draft as its token is taken (take_spec_tokens). A memory that refuses the removal
 * fails the request. */
static void spec_positions(struct sched *s, int32_t id, const struct step_sample *sm) {
    struct seq *q = &s->seqs[id];
    int32_t p = q->n_past;
    if (sm->n_out <= sm->n_draft) {
        int rc = memory_seq_rm(s->mem, id, p + sm->n_out, -1);
        if (rc) {
            s->in_callbacks++;
            sched_req_fail(s, q->req, rc);
            s->in_callbacks--;
            return;
        }
    }
    q->n_past = p + 1;
    q->n_drafted += sm->n_draft;
    q->n_accepted += sm->n_accepted;
    s->totals.draft_tokens += sm->n_draft;
    s->totals.draft_accepted += sm->n_accepted;
}

/* The tokens of a verified run, in order, until one ends the choice. */
static void take_spec_tokens(struct sched *s, int32_t id, const struct step_sample *sm, double now_ms) {
    struct seq *q = &s->seqs[id];
    struct sched_req *r = q->req;
    for (int32_t j = 0; j < sm->n_out; j++) {
        const struct sched_token_probs *o = j == 0 ? &sm->out : &s->step.spec_out[sm->row + j];
        if (o->token < 0) { /* no token for this sequence: its request fails alone */
            sched_req_fail(s, r, o->token);
            return;
        }
        if (j > 0) q->n_past++; /* the draft taken before is in memory */
        take_token(s, id, o, now_ms);
        if (r->state == REQ_FREE || r->cancelled || r->seqs[sm->choice] != id) return;
    }
}

static void learn(struct sched *s, const struct sched_step *st, double now_ms) {
    s->last_progress_ms = now_ms;
    if (st->batch.n_tokens == 0) return; /* a save-only step says nothing about forward speed */
    double ms = now_ms - st->started_ms;
    if (ms < 0) ms = 0;
    step_cost_observe(&s->cost, st->batch.n_tokens, st->attn, ms);
    int b = 0;
    while (ms > sched_step_hist_bounds_ms[b]) b++;
    s->totals.step_hist[b]++;
    s->totals.step_ms_sum += ms;
    s->totals.steps++;
    s->totals.step_seqs += st->n_entries;
    int32_t prompt = st->n_prompt_tokens + st->n_prompt_tails;
    s->totals.prompt_ms += ms * prompt / st->batch.n_tokens;
    s->totals.decode_ms += ms * (st->batch.n_tokens - prompt) / st->batch.n_tokens;
    s->totals.prompt_tokens += prompt;
}

int sched_step_complete_some(struct sched *s, struct sched_step *st, double now_ms, int32_t max_outputs) {
    ASSERT(s->in_flight && st == &s->step);
    if (!st->completing) { /* the first part: what does not call a sink */
        st->completing = true;
        st->next_entry = 0;
        st->completed_ms = now_ms;
        learn(s, st, now_ms);
        if (st->has_save) /* a failed save falls back to recomputing */
            preempt(s, st->save.seq, st->save.err == 0 ? st->save.snap : NULL, st->save.sliced);
        if (st->err) {
            s->in_callbacks++;
            fail_batch(s, st->err);
            s->in_callbacks--;
            st->next_entry = st->n_entries;
        } else {
            /* first what the memory now holds, then the tokens (a finishing choice caches n_past) */
            for (int32_t i = 0; i < st->n_entries; i++) {
                struct seq *q = &s->seqs[st->entries[i].seq];
                const struct step_entry *e = &st->entries[i];
                if (e->n_samples == 1 && st->samples[e->first_sample].n_draft > 0)
                    spec_positions(s, st->entries[i].seq, &st->samples[e->first_sample]);
                else
                    q->n_past += st->entries[i].n_new;
                q->last_served = st->number;
                if (q->checkpoint_at > 0 && q->n_past >= q->checkpoint_at) {
                    if (q->n_past == q->checkpoint_at && q->kind == SEQ_LIVE && !q->req->cancelled)
                        sched_cache_checkpoint(s, st->entries[i].seq, true);
                    q->checkpoint_at = 0;
                } else if (q->checkpoint_at > q->n_past && q->n_copies < SCHED_PROMPT_COPIES &&
                           q->kind == SEQ_LIVE && !q->req->cancelled) {
                    /* a chunk of a prompt kept as cache ended: a copy of the state here lets a
                     * prompt sharing only this much restart from it (sched.h) */
                    q->n_copies += sched_cache_checkpoint(s, st->entries[i].seq, false);
                }
            }
        }
    }
    now_ms = st->completed_ms;
    /* the sinks, in entry order, at most max_outputs entries with tokens this time; a request
     * cancelled between two parts is skipped (in_flight still defers its freeing to the sweep) */
    s->in_callbacks++;
    for (int32_t served = 0; st->next_entry < st->n_entries;) {
        const struct step_entry *e = &st->entries[st->next_entry];
        struct seq *q = &s->seqs[e->seq];
        bool embedded = q->kind == SEQ_LIVE && q->req->embed && q->n_past == q->n_tokens;
        if ((e->n_samples == 0 && !embedded) || q->kind != SEQ_LIVE || q->req->cancelled) {
            st->next_entry++;
            continue;
        }
        if (max_outputs > 0 && served == max_outputs) break;
        st->next_entry++;
        served++;
        if (embedded) {
            finish_embedding(s, e->seq, now_ms);
            continue;
        }
        struct sched_req *r = q->req;
        if (r->prompt_logprobs && !r->pprobs_sent) { /* every prompt row has been computed */
            r->pprobs_sent = true;
            r->sink.on_prompt_probs(r->owner, r->pprobs, r->n_prompt - 1);
            if (r->cancelled) continue;
        }
        if (!r->forked && r->n_predict != 0) fork_choices(s, r);
        if (st->samples[e->first_sample].n_draft > 0) {
            take_spec_tokens(s, e->seq, &st->samples[e->first_sample], now_ms);
            continue;
        }
        for (int32_t k = 0; k < e->n_samples; k++) {
            const struct step_sample *sm = &st->samples[e->first_sample + k];
            int32_t id = r->seqs[sm->choice];
            if (id < 0 || r->cancelled) continue;
            if (sm->out.token < 0) { /* no token for this sequence: its request fails alone */
                sched_req_fail(s, r, sm->out.token);
                break;
            }
            take_token(s, id, &sm->out, now_ms);
            if (r->state == REQ_FREE) break; /* its last choice ended */
        }
    }
    s->in_callbacks--;
    if (st->next_entry < st->n_entries) return 1;
    st->completing = false;
    s->in_flight = false;
    sched_sweep_cancelled(s);
    sched_cache_refresh_usage(s);
    return 0;
}

void sched_step_complete(struct sched *s, struct sched_step *st, double now_ms) {
    while (sched_step_complete_some(s, st, now_ms, 0)) {
    }
}
