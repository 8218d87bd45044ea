/* The scheduler's test doubles (see fake.h), and tests that they behave like the contracts they
 * stand in for: a double that lies would make every scheduler test meaningless. */
#include "sched/fake.h"

#include "common/err.h"
#include "memory/kv.h"
#include "memory/recurrent.h"
#include "memory/split.h"
#include "test.h"

#include <stdlib.h>

/* ---------------------------------------------------------------- fake memory */

struct fake_cell {
    int32_t pos, token;
    uint64_t seqs; /* bit per sequence sharing the cell; 0: free */
};

struct fake_memory {
    struct memory base;
    bool partial;
    int64_t n_cells;
    struct fake_cell *cells;
    int fail_reserves, fail_err; /* the next reserves fail with fail_err */
};

struct memory_snapshot {
    int64_t n;
    int32_t *pos, *token;
};

static struct fake_memory *fm(struct memory *m) { return (struct fake_memory *)m; }
static const struct fake_memory *cfm(const struct memory *m) { return (const struct fake_memory *)m; }

static int64_t fm_free(const struct fake_memory *f) {
    int64_t n = 0;
    for (int64_t i = 0; i < f->n_cells; i++) n += f->cells[i].seqs == 0;
    return n;
}

static int64_t fm_find(const struct fake_memory *f, int32_t seq, int32_t pos) {
    for (int64_t i = 0; i < f->n_cells; i++)
        if ((f->cells[i].seqs >> seq & 1) && f->cells[i].pos == pos) return i;
    return -1;
}

static void fm_put(struct fake_memory *f, int32_t seq, int32_t pos, int32_t token) {
    for (int64_t i = 0; i < f->n_cells; i++)
        if (f->cells[i].seqs == 0) {
            f->cells[i] = (struct fake_cell){.pos = pos, .token = token, .seqs = 1ull << seq};
            return;
        }
    ASSERT(!"fake memory: no free cell after the check");
}

static int fm_reserve(struct memory *m, const struct batch *b) {
    struct fake_memory *f = fm(m);
    if (f->fail_reserves > 0) {
        f->fail_reserves--;
        return f->fail_err;
    }
    for (int32_t i = 0; i < b->n_tokens; i++)
        if (fm_find(f, b->seq[i], b->pos[i]) >= 0) return -ERR_INVAL; /* position written twice */
    if (fm_free(f) < b->n_tokens) return -ERR_NOMEM;
    for (int32_t i = 0; i < b->n_tokens; i++) fm_put(f, b->seq[i], b->pos[i], b->token[i]);
    return 0;
}

static int64_t fm_cells_needed(const struct memory *m, int32_t seq, int32_t n_new) { return n_new; }

static int32_t fm_pos_max(const struct memory *m, int32_t seq) {
    const struct fake_memory *f = cfm(m);
    int32_t max = -1;
    for (int64_t i = 0; i < f->n_cells; i++)
        if ((f->cells[i].seqs >> seq & 1) && f->cells[i].pos > max) max = f->cells[i].pos;
    return max;
}

static bool fm_whole(const struct memory *m, int32_t seq, int32_t p0, int32_t p1) {
    return p0 == 0 && (p1 < 0 || p1 > fm_pos_max(m, seq));
}

static int fm_seq_rm(struct memory *m, int32_t seq, int32_t p0, int32_t p1) {
    struct fake_memory *f = fm(m);
    if (!f->partial && !fm_whole(m, seq, p0, p1)) return -ERR_UNSUPPORTED;
    for (int64_t i = 0; i < f->n_cells; i++)
        if (f->cells[i].pos >= p0 && (p1 < 0 || f->cells[i].pos < p1)) f->cells[i].seqs &= ~(1ull << seq);
    return 0;
}

static int fm_seq_cp(struct memory *m, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    struct fake_memory *f = fm(m);
    if (!f->partial && !fm_whole(m, src, p0, p1)) return -ERR_UNSUPPORTED;
    for (int64_t i = 0; i < f->n_cells; i++) {
        struct fake_cell *c = &f->cells[i];
        if (!(c->seqs >> src & 1) || c->pos < p0 || (p1 >= 0 && c->pos >= p1)) continue;
        if (fm_find(f, dst, c->pos) >= 0) return -ERR_INVAL;
        c->seqs |= 1ull << dst;
    }
    return 0;
}

static int64_t fm_seq_cells(const struct memory *m, int32_t seq) {
    const struct fake_memory *f = cfm(m);
    int64_t n = 0;
    for (int64_t i = 0; i < f->n_cells; i++) n += f->cells[i].seqs >> seq & 1;
    return n;
}

static int64_t fm_seq_cells_own(const struct memory *m, int32_t seq) {
    const struct fake_memory *f = cfm(m);
    int64_t n = 0;
    for (int64_t i = 0; i < f->n_cells; i++) n += f->cells[i].seqs == 1ull << seq;
    return n;
}

static int64_t fm_cells_held(const struct memory *m, const bool *seqs) {
    const struct fake_memory *f = cfm(m);
    int64_t n = 0;
    for (int64_t i = 0; i < f->n_cells; i++) {
        bool held = false;
        for (int32_t q = 0; q < f->base.n_seq_max && !held; q++) held = seqs[q] && (f->cells[i].seqs >> q & 1);
        n += held;
    }
    return n;
}

static void fm_usage(const struct memory *m, struct memory_usage *u) {
    const struct fake_memory *f = cfm(m);
    *u = (struct memory_usage){.cells_total = f->n_cells, .cells_used = f->n_cells - fm_free(f),
                               .bytes = (size_t)f->n_cells * sizeof *f->cells};
}

static int fm_save(struct memory *m, int32_t seq, struct memory_snapshot **out) {
    struct fake_memory *f = fm(m);
    struct memory_snapshot *s = calloc(1, sizeof *s);
    int64_t n = fm_seq_cells(m, seq);
    if (!s) return -ERR_NOMEM;
    s->pos = calloc((size_t)n + 1, sizeof *s->pos);
    s->token = calloc((size_t)n + 1, sizeof *s->token);
    if (!s->pos || !s->token) {
        free(s->pos);
        free(s->token);
        free(s);
        return -ERR_NOMEM;
    }
    for (int64_t i = 0; i < f->n_cells; i++)
        if (f->cells[i].seqs >> seq & 1) {
            s->pos[s->n] = f->cells[i].pos;
            s->token[s->n++] = f->cells[i].token;
        }
    *out = s;
    return 0;
}

static int fm_restore(struct memory *m, int32_t seq, const struct memory_snapshot *s) {
    struct fake_memory *f = fm(m);
    if (fm_seq_cells(m, seq) != 0) return -ERR_INVAL;
    if (fm_free(f) < s->n) return -ERR_NOMEM;
    for (int64_t i = 0; i < s->n; i++) fm_put(f, seq, s->pos[i], s->token[i]);
    return 0;
}

static int64_t fm_restore_cells_needed(const struct memory *m, int32_t seq, const struct memory_snapshot *s) {
    (void)m, (void)seq;
    return s->n; /* this fake copies every cell back */
}

static void fm_snapshot_free(struct memory_snapshot *s) {
    free(s->pos);
    free(s->token);
    free(s);
}

static void fm_destroy(struct memory *m) {
    free(fm(m)->cells);
    free(m);
}

static const struct memory_ops fm_ops_partial = {
    "kv", true, false, fm_reserve, fm_cells_needed, fm_seq_rm, fm_seq_cp, fm_pos_max, fm_seq_cells,
    fm_usage, fm_save, fm_restore, fm_snapshot_free, fm_destroy, fm_seq_cells_own, fm_restore_cells_needed,
    NULL, fm_cells_held};
static const struct memory_ops fm_ops_whole = {
    "whole-only", false, false, fm_reserve, fm_cells_needed, fm_seq_rm, fm_seq_cp, fm_pos_max, fm_seq_cells,
    fm_usage, fm_save, fm_restore, fm_snapshot_free, fm_destroy, fm_seq_cells_own, fm_restore_cells_needed,
    NULL, fm_cells_held};

struct memory *fake_memory_create(int64_t n_cells, int32_t n_seq_max, bool partial_removal) {
    ASSERT(n_seq_max <= 64);
    struct fake_memory *f = calloc(1, sizeof *f);
    ASSERT(f);
    f->cells = calloc((size_t)n_cells, sizeof *f->cells);
    ASSERT(f->cells);
    f->n_cells = n_cells;
    f->partial = partial_removal;
    f->base.ops = partial_removal ? &fm_ops_partial : &fm_ops_whole;
    f->base.n_seq_max = n_seq_max;
    return &f->base;
}

void fake_memory_fail_reserves(struct memory *m, int n, int err) {
    fm(m)->fail_reserves = n;
    fm(m)->fail_err = err;
}

int32_t fake_memory_token(const struct memory *m, int32_t seq, int32_t pos) {
    const struct fake_memory *f = cfm(m);
    int64_t i = fm_find(f, seq, pos);
    return i < 0 ? -1 : f->cells[i].token;
}

/* ---------------------------------------------------------------- fake recurrent memory */

/* One state per sequence (a running hash of its tokens, updated by the fake forward), a pool of
 * n_states: cells_needed is 1 for a sequence without state, whatever the tokens; nothing can be
 * removed or shared but whole sequences; positions must come in order. */
#define HISTORY_SEED 1469598103934665603ull

struct fake_state {
    bool used;
    int32_t pos_max;  /* reserved up to */
    int32_t folded;   /* positions [0, folded) are in hash (the fake forward folds them) */
    uint64_t hash;
};

struct fake_recurrent {
    struct memory base;
    int32_t n_states;
    struct fake_state *seqs; /* [n_seq_max] */
};

static struct fake_recurrent *fr(const struct memory *m) { return (struct fake_recurrent *)(void *)m; }

static int32_t fr_used(const struct fake_recurrent *r) {
    int32_t n = 0;
    for (int32_t i = 0; i < r->base.n_seq_max; i++) n += r->seqs[i].used;
    return n;
}

static int fr_reserve(struct memory *m, const struct batch *b) {
    struct fake_recurrent *r = fr(m);
    int32_t next[64], fresh = 0;
    bool seen[64] = {0};
    for (int32_t i = 0; i < b->n_tokens; i++) {
        int32_t q = b->seq[i];
        if (!seen[q]) {
            seen[q] = true;
            next[q] = r->seqs[q].used ? r->seqs[q].pos_max + 1 : 0;
            fresh += !r->seqs[q].used;
        }
        if (b->pos[i] != next[q]++) return -ERR_INVAL; /* a state only moves forward */
    }
    if (fr_used(r) + fresh > r->n_states) return -ERR_NOMEM;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        struct fake_state *st = &r->seqs[b->seq[i]];
        if (!st->used) *st = (struct fake_state){.used = true, .hash = HISTORY_SEED};
        st->pos_max = b->pos[i];
    }
    return 0;
}

static int64_t fr_cells_needed(const struct memory *m, int32_t seq, int32_t n_new) {
    return n_new > 0 && !fr(m)->seqs[seq].used ? 1 : 0;
}

static int fr_seq_rm(struct memory *m, int32_t seq, int32_t p0, int32_t p1) {
    struct fake_state *st = &fr(m)->seqs[seq];
    if (!st->used || p0 > st->pos_max) return 0;
    if (p0 > 0 || (p1 >= 0 && p1 <= st->pos_max)) return -ERR_UNSUPPORTED;
    st->used = false;
    return 0;
}

static int fr_seq_cp(struct memory *m, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    struct fake_recurrent *r = fr(m);
    const struct fake_state *from = &r->seqs[src];
    if (!from->used || r->seqs[dst].used) return -ERR_INVAL;
    if (p0 > 0 || (p1 >= 0 && p1 <= from->pos_max)) return -ERR_UNSUPPORTED;
    if (fr_used(r) >= r->n_states) return -ERR_NOMEM;
    r->seqs[dst] = *from;
    return 0;
}

static int32_t fr_pos_max(const struct memory *m, int32_t seq) {
    const struct fake_state *st = &fr(m)->seqs[seq];
    return st->used ? st->pos_max : -1;
}

static int64_t fr_seq_cells(const struct memory *m, int32_t seq) { return fr(m)->seqs[seq].used; }

static int64_t fr_cells_held(const struct memory *m, const bool *seqs) {
    int64_t n = 0;
    for (int32_t q = 0; q < fr(m)->base.n_seq_max; q++) n += seqs[q] && fr(m)->seqs[q].used;
    return n;
}

static void fr_usage(const struct memory *m, struct memory_usage *u) {
    *u = (struct memory_usage){.cells_total = fr(m)->n_states, .cells_used = fr_used(fr(m)),
                               .bytes = (size_t)fr(m)->n_states * sizeof(struct fake_state)};
}

static int fr_save(struct memory *m, int32_t seq, struct memory_snapshot **out) {
    struct fake_state *copy = malloc(sizeof *copy);
    if (!copy) return -ERR_NOMEM;
    *copy = fr(m)->seqs[seq];
    *out = (struct memory_snapshot *)(void *)copy;
    return 0;
}

static int fr_restore(struct memory *m, int32_t seq, const struct memory_snapshot *s) {
    struct fake_recurrent *r = fr(m);
    if (r->seqs[seq].used) return -ERR_INVAL;
    if (fr_used(r) >= r->n_states) return -ERR_NOMEM;
    r->seqs[seq] = *(const struct fake_state *)(const void *)s;
    return 0;
}

static int64_t fr_restore_cells_needed(const struct memory *m, int32_t seq, const struct memory_snapshot *s) {
    (void)m, (void)seq, (void)s;
    return 1;
}

static void fr_snapshot_free(struct memory_snapshot *s) { free(s); }

static void fr_destroy(struct memory *m) {
    free(fr(m)->seqs);
    free(m);
}

static const struct memory_ops fr_ops = {
    "recurrent", false, true, fr_reserve, fr_cells_needed, fr_seq_rm, fr_seq_cp, fr_pos_max, fr_seq_cells,
    fr_usage, fr_save, fr_restore, fr_snapshot_free, fr_destroy, fr_seq_cells, fr_restore_cells_needed,
    NULL, fr_cells_held};

struct memory *fake_recurrent_create(int32_t n_states, int32_t n_seq_max) {
    ASSERT(n_seq_max <= 64);
    struct fake_recurrent *r = calloc(1, sizeof *r);
    ASSERT(r);
    r->seqs = calloc((size_t)n_seq_max, sizeof *r->seqs);
    ASSERT(r->seqs);
    r->n_states = n_states;
    r->base.ops = &fr_ops;
    r->base.n_seq_max = n_seq_max;
    return &r->base;
}

/* ---------------------------------------------------------------- fake engine */

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

struct memory *fake_kv_create(int64_t n_cells, int32_t n_seq_max) {
    /* one layer, one K and one V element per cell: the token id, written by the fake forward */
    struct kv_shape shape = {.n_layer = 1, .n_embd_k = 1, .n_embd_v = 1};
    struct memory *m;
    ASSERT(kv_memory_create(&m, &shape, n_cells, n_seq_max) == 0);
    return m;
}

struct memory *fake_split_create(int64_t n_cells, int32_t n_seq_max, int32_t window, int32_t max_batch) {
    struct kv_shape full = {.n_layer = 1, .n_embd_k = 1, .n_embd_v = 1}, windowed = full;
    windowed.window = window;
    struct memory *g, *l, *m;
    ASSERT(kv_memory_create(&g, &full, n_cells, n_seq_max) == 0);
    ASSERT(kv_memory_create(&l, &windowed, kv_window_cells(n_cells, n_seq_max, window, max_batch), n_seq_max) == 0);
    ASSERT(split_memory_create(&m, g, l, 2, (const uint8_t[]){1, 0}) == 0);
    return m;
}

struct memory *fake_hybrid_create(int64_t n_cells, int32_t n_states, int32_t n_seq_max) {
    struct memory *rec, *m;
    ASSERT(recurrent_memory_create(&rec, NULL, n_states, n_seq_max) == 0);
    ASSERT(split_memory_create(&m, fake_kv_create(n_cells, n_seq_max), rec, 2, (const uint8_t[]){0, 1}) == 0);
    return m;
}

/* The KV pools of mem: a KV memory's, a split's full and windowed ones, or a hybrid's KV half
 * (win NULL but for the windowed pool). */
static struct kv_memory *kv_pools(struct memory *mem, struct kv_memory **win) {
    *win = kv_from_memory(split_half(mem, 1));
    return split_half(mem, 0) ? kv_from_memory(split_half(mem, 0)) : kv_from_memory(mem);
}

/* The tokens memory holds for seq at 0..pos, -1 where none (a hole). With the real KV memory
 * the token ids were written into the cells' K rows by fe_forward, so they travel with
 * seq_cp, seq_save and seq_restore like real K/V. */
static void history(struct fake_engine *e, int32_t seq, int32_t pos, int32_t *hist) {
    for (int32_t p = 0; p <= pos; p++) hist[p] = -1;
    struct kv_memory *win, *kv = kv_pools(e->mem, &win);
    if (kv) {
        for (int64_t c = 0; c < kv->n_cells; c++)
            if (kv_cell_visible(kv, c, seq, pos)) hist[kv->pos[c]] = ((uint16_t *)kv_k_row(kv, 0, c))[0];
        if (!win) return;
        /* the window's positions, each held by the windowed pool with the same token */
        int32_t from = pos - win->shape.window + 1 > 0 ? pos - win->shape.window + 1 : 0, found = 0;
        for (int64_t c = 0; c < win->n_cells; c++)
            if (kv_cell_visible(win, c, seq, pos) && win->pos[c] >= from)
                found += ((uint16_t *)kv_k_row(win, 0, c))[0] == hist[win->pos[c]];
        e->holes += pos + 1 - from - found;
        return;
    }
    const struct fake_memory *f = cfm(e->mem);
    for (int64_t i = 0; i < f->n_cells; i++)
        if ((f->cells[i].seqs >> seq & 1) && f->cells[i].pos <= pos) hist[f->cells[i].pos] = f->cells[i].token;
}

/* hash of the tokens memory holds for seq at 0..pos; counts a hole when one is missing */
static uint64_t history_hash(struct fake_engine *e, int32_t seq, int32_t pos) {
    int32_t hist[FAKE_MAX_TOKENS];
    ASSERT(pos < FAKE_MAX_TOKENS);
    history(e, seq, pos, hist);
    uint64_t h = HISTORY_SEED; /* the same fold as the recurrent state's */
    for (int32_t p = 0; p <= pos; p++) {
        if (hist[p] < 0) e->holes++;
        h = mix(h, (uint64_t)(uint32_t)hist[p]);
    }
    return h;
}

static int fe_forward(void *engine, struct memory *mem, const struct batch *b, const float **logits) {
    struct fake_engine *e = engine;
    ASSERT(mem == e->mem);
    if (e->fail_forwards > 0) {
        e->fail_forwards--;
        return -ERR_IO;
    }
    e->forwards++;
    e->tokens_forwarded += b->n_tokens;
    ASSERT(b->n_outputs <= e->logits_rows);
    struct kv_memory *win, *kv = kv_pools(mem, &win);
    bool recurrent = mem->ops == &fr_ops;
    for (int32_t i = 0; kv && i < b->n_tokens; i++) /* "compute K/V" of the batch's cells */
        ((uint16_t *)kv_k_row(kv, 0, kv_batch_cell(kv, i)))[0] = (uint16_t)b->token[i];
    for (int32_t i = 0; win && i < b->n_tokens; i++)
        ((uint16_t *)kv_k_row(win, 0, kv_batch_cell(win, i)))[0] = (uint16_t)b->token[i];
    int32_t row = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        uint64_t h;
        if (recurrent) { /* the state is the history: fold the token in */
            struct fake_state *st = &fr(mem)->seqs[b->seq[i]];
            if (!st->used || st->folded != b->pos[i]) e->holes++;
            st->hash = h = mix(st->hash, (uint64_t)(uint32_t)b->token[i]);
            st->folded = b->pos[i] + 1;
        } else if (!kv && fake_memory_token(mem, b->seq[i], b->pos[i]) != b->token[i]) {
            e->holes++; /* not reserved */
        }
        if (!b->want_logits[i]) continue;
        if (!recurrent) h = history_hash(e, b->seq[i], b->pos[i]);
        float *out = e->logits + (size_t)row++ * (size_t)e->n_vocab;
        for (int32_t v = 0; v < e->n_vocab; v++) out[v] = 0;
        bool eos = e->eos_every > 0 && (h >> 20) % (uint64_t)e->eos_every == 0;
        out[eos ? FAKE_EOS : 2 + (int32_t)(h % (uint64_t)(e->n_vocab - 2))] = 10;
    }
    e->outputs += row;
    *logits = e->logits;
    return 0;
}

static int32_t fe_n_vocab(void *engine) { return ((struct fake_engine *)engine)->n_vocab; }
static bool fe_is_eog(void *engine, int32_t token) { return token == FAKE_EOS; }

struct fake_sampler {
    uint64_t state;
    bool random;
    int invalid_after, n_sampled;
};

static void *fe_sampler_create(void *engine, const void *params, uint64_t seed, const int32_t *prompt,
                               int32_t n_prompt) {
    struct fake_engine *e = engine;
    const struct fake_sampling *p = params;
    struct fake_sampler *sm = calloc(1, sizeof *sm);
    if (!sm) return NULL;
    sm->state = mix(seed, 12345);
    sm->random = p && p->random;
    sm->invalid_after = p ? p->invalid_after : 0;
    e->samplers_live++;
    return sm;
}

static int32_t fe_sample(void *engine, void *sampler, const float *logits, int32_t n_probs,
                         struct sched_token_probs *probs) {
    struct fake_engine *e = engine;
    struct fake_sampler *sm = sampler;
    if (sm->invalid_after > 0 && sm->n_sampled++ == sm->invalid_after) return -ERR_NUMERIC;
    int32_t best = 0;
    for (int32_t v = 1; v < e->n_vocab; v++)
        if (logits[v] > logits[best]) best = v;
    if (sm->random && best != FAKE_EOS) {
        sm->state = mix(sm->state, 77);
        best = 2 + (best - 2 + (int32_t)(sm->state % 5)) % (e->n_vocab - 2);
    }
    probs->logprob = -0.25f;
    probs->n_top = n_probs;
    for (int32_t i = 0; i < n_probs; i++) {
        probs->top_token[i] = (best + i) % e->n_vocab;
        probs->top_logprob[i] = -0.25f * (float)(i + 1);
    }
    return best;
}

static void fe_sampler_free(void *engine, void *sampler) {
    ((struct fake_engine *)engine)->samplers_live--;
    free(sampler);
}

const struct sched_engine_ops fake_engine_ops = {
    fe_forward, fe_n_vocab, fe_is_eog, fe_sampler_create, fe_sample, fe_sampler_free, NULL, NULL, NULL};

/* The fake samplers are greedy (or a seed's fixed neighbour of the greedy token): whatever the
 * draft, the token is the one fe_sample gives, which is the acceptance rule for a point mass. */
static int32_t fe_sample_draft(void *engine, void *sampler, const float *logits, int32_t draft, int32_t n_probs,
                               struct sched_token_probs *probs) {
    ((struct fake_engine *)engine)->drafts_verified++;
    return fe_sample(engine, sampler, logits, n_probs, probs);
}

/* The fake engine's own next tokens (its logits are a hash of the history), except that every
 * token at a position divisible by draft_wrong_every is off by one: a draft model right most of
 * the time. */
static int32_t fe_draft(void *engine, int32_t seq, const int32_t *tokens, int32_t n, int32_t n_max, float p_min,
                        int32_t *out) {
    struct fake_engine *e = engine;
    e->draft_calls++;
    uint64_t h = HISTORY_SEED;
    for (int32_t i = 0; i < n; i++) h = mix(h, (uint64_t)(uint32_t)tokens[i]);
    int32_t k = 0;
    for (; k < n_max; k++) {
        bool eos = e->eos_every > 0 && (h >> 20) % (uint64_t)e->eos_every == 0;
        int32_t t = eos ? FAKE_EOS : 2 + (int32_t)(h % (uint64_t)(e->n_vocab - 2));
        if (e->draft_wrong_every > 0 && (n + k) % e->draft_wrong_every == 0) t = 2 + (t - 1) % (e->n_vocab - 2);
        out[k] = t;
        h = mix(h, (uint64_t)(uint32_t)t);
    }
    return k;
}

const struct sched_engine_ops fake_engine_draft_ops = {
    fe_forward, fe_n_vocab, fe_is_eog, fe_sampler_create, fe_sample, fe_sampler_free, NULL, fe_sample_draft, fe_draft};
const struct sched_engine_ops fake_engine_lookup_ops = {
    fe_forward, fe_n_vocab, fe_is_eog, fe_sampler_create, fe_sample, fe_sampler_free, NULL, fe_sample_draft, NULL};

void fake_engine_init(struct fake_engine *e, struct memory *mem, int32_t n_vocab, int32_t max_rows) {
    *e = (struct fake_engine){.mem = mem, .n_vocab = n_vocab, .logits_rows = max_rows};
    e->logits = calloc((size_t)max_rows * (size_t)n_vocab, sizeof *e->logits);
    ASSERT(e->logits);
}

void fake_engine_free(struct fake_engine *e) { free(e->logits); }

/* ---------------------------------------------------------------- recorder and helpers */

static bool rec_token(void *owner, int32_t choice, int32_t token, const struct sched_token_probs *p) {
    struct recorder *r = owner;
    if (r->error || choice >= REC_MAX_CHOICES || r->done[choice]) {
        r->calls_after_end++;
        return false;
    }
    if (r->n_tokens[0] + r->n_tokens[choice] == 0 && !r->first_token_order)
        r->first_token_order = ++*r->clock;
    r->tokens[choice][r->n_tokens[choice]++] = token;
    return !(r->stop_after > 0 && r->n_tokens[choice] >= r->stop_after);
}

static void rec_done(void *owner, int32_t choice, enum sched_stop reason, const struct sched_counts *c) {
    struct recorder *r = owner;
    if (r->error || choice >= REC_MAX_CHOICES || r->done[choice]) {
        r->calls_after_end++;
        return;
    }
    r->done[choice] = 1 + (int)reason;
    r->counts[choice] = *c;
    r->done_order[choice] = ++*r->clock;
}

static void rec_error(void *owner, int err) {
    struct recorder *r = owner;
    if (r->error) r->calls_after_end++;
    r->error = err;
}

const struct sched_sink recorder_sink = {rec_token, rec_done, rec_error, NULL};

int fake_run(struct sched *s, double *now_ms, double ms_per_step, int max_steps) {
    int steps = 0;
    struct sched_step *step;
    while (steps < max_steps && sched_build_step(s, *now_ms, &step) > 0) {
        sched_step_compute(s, step);
        *now_ms += ms_per_step;
        sched_step_complete(s, step, *now_ms);
        steps++;
    }
    return steps;
}

void fake_prompt(int32_t *out, int32_t n, uint32_t seed, int32_t n_vocab) {
    uint64_t h = seed;
    for (int32_t i = 0; i < n; i++) {
        h = mix(h, (uint64_t)i);
        out[i] = 2 + (int32_t)(h % (uint64_t)(n_vocab - 2));
    }
}

/* ---------------------------------------------------------------- tests of the doubles */

static void put(struct memory *m, int32_t seq, int32_t pos0, int32_t n, int32_t token0) {
    struct batch b;
    ASSERT(batch_init(&b, n) == 0);
    for (int32_t i = 0; i < n; i++) batch_add(&b, token0 + i, pos0 + i, seq, i == n - 1);
    ASSERT(memory_reserve(m, &b) == 0);
    batch_free(&b);
}

TEST(sched_fake_memory_shares_saves_and_refuses) {
    struct memory *m = fake_memory_create(8, 4, true);
    struct memory_usage u;
    put(m, 0, 0, 5, 100);
    CHECK_EQ_INT(memory_seq_pos_max(m, 0), 4);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, 3), 0); /* shares, costs nothing */
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 5);
    CHECK_EQ_INT(memory_seq_cells(m, 1), 3);
    CHECK_EQ_INT(fake_memory_token(m, 1, 2), 102);
    CHECK_EQ_INT(fake_memory_token(m, 1, 3), -1);
    struct batch big;
    CHECK_EQ_INT(batch_init(&big, 4), 0);
    for (int i = 0; i < 4; i++) batch_add(&big, 7, 3 + i, 1, false);
    CHECK_EQ_INT(memory_reserve(m, &big), -ERR_NOMEM); /* 3 free cells only: nothing changes */
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 5);
    batch_free(&big);
    struct memory_snapshot *snap;
    CHECK_EQ_INT(memory_seq_save(m, 0, &snap), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 0, -1), 0);
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 3); /* seq 1 still holds the shared three */
    CHECK_EQ_INT(memory_seq_restore(m, 0, snap), 0);
    memory_snapshot_free(m, snap);
    CHECK_EQ_INT(fake_memory_token(m, 0, 4), 104);
    memory_destroy(m);

    m = fake_memory_create(8, 4, false);
    put(m, 0, 0, 4, 10);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 2, -1), -ERR_UNSUPPORTED);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, 2), -ERR_UNSUPPORTED);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, -1), 0);
    memory_destroy(m);
}

TEST(sched_fake_engine_depends_on_what_memory_holds) {
    struct memory *m = fake_memory_create(32, 4, true);
    struct fake_engine e;
    fake_engine_init(&e, m, 50, 4);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 8), 0);
    for (int i = 0; i < 4; i++) batch_add(&b, 10 + i, i, 0, i == 3);
    for (int i = 0; i < 4; i++) batch_add(&b, 10 + i + (i == 1), i, 1, i == 3); /* differs at pos 1 */
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    const float *logits;
    CHECK_EQ_INT(fake_engine_ops.forward(&e, m, &b, &logits), 0);
    int a0 = -1, a1 = -1;
    for (int v = 0; v < 50; v++) {
        if (logits[v] > 0) a0 = v;
        if (logits[50 + v] > 0) a1 = v;
    }
    CHECK(a0 >= 2 && a1 >= 2);
    CHECK(a0 != a1 || a0 == -1); /* a different history gives (here) a different token */
    CHECK_EQ_INT(e.holes, 0);
    /* drop position 1 of seq 0: the next output notices the hole */
    CHECK_EQ_INT(memory_seq_rm(m, 0, 1, 2), 0);
    batch_clear(&b);
    batch_add(&b, 20, 4, 0, true);
    CHECK_EQ_INT(memory_reserve(m, &b), 0);
    CHECK_EQ_INT(fake_engine_ops.forward(&e, m, &b, &logits), 0);
    CHECK_EQ_INT(e.holes, 1);
    batch_free(&b);
    fake_engine_free(&e);
    memory_destroy(m);
}

TEST(sched_fake_recurrent_has_states_not_cells) {
    struct memory *m = fake_recurrent_create(2, 4);
    struct memory_usage u;
    CHECK_EQ_INT(memory_cells_needed(m, 0, 50), 1); /* one state, however long the prompt */
    put(m, 0, 0, 5, 10);
    CHECK_EQ_INT(memory_cells_needed(m, 0, 50), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 0, 2, -1), -ERR_UNSUPPORTED);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, 3), -ERR_UNSUPPORTED);
    struct batch b;
    CHECK_EQ_INT(batch_init(&b, 2), 0);
    batch_add(&b, 9, 7, 0, true); /* skips positions 5 and 6 */
    CHECK_EQ_INT(memory_reserve(m, &b), -ERR_INVAL);
    batch_free(&b);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 1, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_cp(m, 0, 2, 0, -1), -ERR_NOMEM); /* two states only */
    memory_usage(m, &u);
    CHECK_EQ_INT(u.cells_used, 2);
    struct memory_snapshot *snap;
    CHECK_EQ_INT(memory_seq_save(m, 1, &snap), 0);
    CHECK_EQ_INT(memory_seq_rm(m, 1, 0, -1), 0);
    CHECK_EQ_INT(memory_seq_restore(m, 3, snap), 0);
    memory_snapshot_free(m, snap);
    CHECK_EQ_INT(memory_seq_pos_max(m, 3), 4);
    CHECK_EQ_INT(memory_seq_cells(m, 3), 1);
    memory_destroy(m);
}
