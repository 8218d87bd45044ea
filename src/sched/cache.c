/* cache.c: what each memory sequence id holds (see sched_internal.h): making room for new work,
 * sharing prompt prefixes between live and cached sequences, and keeping finished sequences as
 * prompt cache, evicted least recently used. */
#include "sched/sched_internal.h"

#include "common/err.h"

#include <string.h>

static int64_t free_cells(const struct sched *s) {
    struct memory_usage u;
    memory_usage(s->mem, &u);
    return u.cells_total - u.cells_used;
}

/* Free states, and whether the memory has any (memory.h: a hybrid's recurrent half). */
static int64_t free_states(const struct sched *s, bool *has) {
    struct memory_usage u;
    memory_usage(s->mem, &u);
    *has = u.states_total > 0;
    return u.states_total - u.states_used;
}

/* Cells the admitted sequences still need to finish their prompts and take one more step:
 * admission and resumption leave this much free so they do not immediately force preemption. */
int64_t sched_cache_pending_need(const struct sched *s) {
    int64_t need = 0;
    for (int32_t i = 0; i < s->n_seq; i++) {
        const struct seq *q = &s->seqs[i];
        if (q->kind != SEQ_LIVE) continue;
        if (q->in_memory) need += memory_cells_needed(s->mem, i, q->n_tokens - q->n_past);
        else if (q->forking && s->seqs[q->req->seqs[0]].in_memory) need += 1; /* not while its prompt is preempted */
    }
    return need;
}

/* A sequence holding nothing needs a state before it runs (every one holding anything has one);
 * its forking siblings each get a copy of their parent's. */
int64_t sched_cache_pending_states(const struct sched *s) {
    int64_t need = 0;
    for (int32_t i = 0; i < s->n_seq; i++) {
        const struct seq *q = &s->seqs[i];
        if (q->kind != SEQ_LIVE) continue;
        if (q->in_memory) need += memory_seq_pos_max(s->mem, i) < 0;
        else if (q->forking && s->seqs[q->req->seqs[0]].in_memory) need += 1;
    }
    return need;
}

void sched_cache_seq_reset(struct seq *q) {
    int32_t *tokens = q->tokens;
    *q = (struct seq){.kind = SEQ_FREE, .tokens = tokens, .last_served = -1};
}

/* Drop whatever the sequence holds in memory and on the host, and free its id. */
void sched_cache_seq_release(struct sched *s, int32_t id) {
    struct seq *q = &s->seqs[id];
    if (q->kind == SEQ_CACHE || (q->kind == SEQ_LIVE && q->in_memory)) {
        int rc = memory_seq_rm(s->mem, id, 0, -1);
        ASSERT(rc == 0); /* removing a whole sequence always works */
    }
    if (q->snap) memory_snapshot_free(s->mem, q->snap);
    sched_cache_seq_reset(q);
}

/* Evict the least recently used cache entry other than `keep` (that frees cells, with
 * for_cells); false when there is none. Candidates are tried in LRU order (lru stamps are
 * unique), and the cell count is only asked of them, as it scans the memory. */
bool sched_cache_evict_lru(struct sched *s, int32_t keep, bool for_cells) {
    int32_t victim = -1;
    uint64_t after = 0; /* candidates with an older stamp were rejected */
    for (;;) {
        victim = -1;
        for (int32_t i = 0; i < s->n_seq; i++)
            if (i != keep && s->seqs[i].kind == SEQ_CACHE && s->seqs[i].lru >= after &&
                (victim < 0 || s->seqs[i].lru < s->seqs[victim].lru))
                victim = i;
        if (victim < 0) return false;
        if (!for_cells || memory_seq_cells_own(s->mem, victim) > 0) break;
        after = s->seqs[victim].lru + 1;
    }
    sched_cache_seq_release(s, victim);
    s->totals.cache_evictions++;
    return true;
}

/* Free ids into ids[0..n), evicting cache entries other than keep when there are too few. */
int32_t sched_cache_take_free_ids(struct sched *s, int32_t *ids, int32_t n, int32_t keep) {
    int32_t got = 0;
    for (;;) {
        got = 0;
        for (int32_t i = 0; i < s->n_seq && got < n; i++)
            if (s->seqs[i].kind == SEQ_FREE) ids[got++] = i;
        if (got == n || !sched_cache_evict_lru(s, keep, false)) return got;
    }
}

/* Are `need` cells and `states` states free on top of what admitted work still needs? *cells_short
 * says which was short when not. */
static bool has_room(const struct sched *s, int64_t need, int64_t states, bool *cells_short) {
    bool has_states;
    *cells_short = free_cells(s) < need + sched_cache_pending_need(s);
    bool states_short = free_states(s, &has_states) < states + sched_cache_pending_states(s) && has_states;
    return !*cells_short && !states_short;
}

/* Evict cache until `need` cells and `states` states are free on top of what admitted work still
 * needs. Every cache entry holds a state: when states are short, the least recently used entry
 * goes even if its cells live on in sequences sharing them. */
bool sched_cache_make_room(struct sched *s, int64_t need, int64_t states) {
    bool cells_short;
    while (!has_room(s, need, states, &cells_short))
        if (!sched_cache_evict_lru(s, -1, cells_short)) return false;
    return true;
}

static int32_t common_prefix(const int32_t *a, const int32_t *b, int32_t n) {
    int32_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* The longest prefix of tokens[0..n) that some live or cached sequence of the partition holds
 * and that can be shared: at most n-1 tokens (the last prompt token must run to give logits), and
 * no shorter than the memory can cut that source to (memory_seq_prefix_min: a recurrent state only
 * whole, a windowed pool from where its window still holds what the next token needs), else only
 * the source's whole content. Returns its length, *src its id. Another partition's sequences are
 * never looked at: what a request reuses must not tell it what others' prompts hold. */
int32_t sched_cache_best_prefix(const struct sched *s, uint64_t partition, const int32_t *tokens, int32_t n,
                                int32_t *src) {
    int32_t best = 0;
    *src = -1;
    for (int32_t i = 0; i < s->n_seq; i++) {
        const struct seq *q = &s->seqs[i];
        bool held = q->kind == SEQ_CACHE || (q->kind == SEQ_LIVE && q->in_memory && !q->req->cancelled);
        if (!held || q->n_past == 0 || q->partition != partition) continue;
        int32_t limit = q->n_past < n ? q->n_past : n;
        int32_t common = common_prefix(tokens, q->tokens, limit);
        int32_t usable = common < n - 1 ? common : n - 1;
        if (usable < memory_seq_prefix_min(s->mem, i)) usable = common == q->n_past && q->n_past < n ? q->n_past : 0;
        if (usable > best) {
            best = usable;
            *src = i;
        }
    }
    return best;
}

/* Share the longest available prefix into the empty sequence id: returns tokens shared. */
int32_t sched_cache_attach_prefix(struct sched *s, int32_t id, uint64_t partition, const int32_t *tokens,
                                  int32_t n) {
    int32_t src;
    int32_t len = sched_cache_best_prefix(s, partition, tokens, n, &src);
    if (len == 0) return 0;
    if (memory_seq_cp(s->mem, src, id, 0, len) != 0) return 0;
    if (s->seqs[src].kind == SEQ_CACHE) s->seqs[src].lru = ++s->lru_clock;
    return len;
}

/* Entries of the same partition that only repeat a prefix of the new cache entry id are dropped:
 * the same content, or a prefix the longer entry can be cut to (memory_seq_prefix_min: then it
 * serves every prompt the shorter one would; a recurrent state cannot, a windowed pool only within
 * its window); another partition's entry serves other requests and stays. */
static void drop_redundant(struct sched *s, int32_t id) {
    struct seq *q = &s->seqs[id];
    for (int32_t i = 0; i < s->n_seq; i++) {
        struct seq *o = &s->seqs[i];
        if (i == id || o->kind != SEQ_CACHE || o->partition != q->partition) continue;
        int32_t shorter = o->n_past < q->n_past ? o->n_past : q->n_past;
        if (common_prefix(o->tokens, q->tokens, shorter) != shorter) continue;
        if (o->n_past == q->n_past || (o->n_past < q->n_past && o->n_past >= memory_seq_prefix_min(s->mem, id))) {
            sched_cache_seq_release(s, i);
        } else if (o->n_past > q->n_past && q->n_past >= memory_seq_prefix_min(s->mem, i)) { /* o serves q */
            o->lru = q->lru;
            sched_cache_seq_release(s, id);
            return;
        }
    }
}

/* A finished choice's cells become prompt cache. */
void sched_cache_keep(struct sched *s, int32_t id) {
    struct seq *q = &s->seqs[id];
    if (q->snap) memory_snapshot_free(s->mem, q->snap);
    *q = (struct seq){.kind = SEQ_CACHE, .tokens = q->tokens, .n_tokens = q->n_past,
                      .n_past = q->n_past, .last_served = -1, .lru = ++s->lru_clock,
                      .cells = q->cells, .partition = q->partition};
    drop_redundant(s, id);
}

/* Copy what live id holds into a new cache entry, into a free id with room for the copy; with
 * evict, the id and the room may come from evicting older cache (never from what admitted
 * sequences still need). Otherwise no copy. */
bool sched_cache_checkpoint(struct sched *s, int32_t id, bool evict) {
    const struct seq *q = &s->seqs[id];
    int32_t dst = -1;
    bool cells_short;
    if (evict) {
        if (sched_cache_take_free_ids(s, &dst, 1, -1) < 1) return false;
    } else {
        for (int32_t i = 0; i < s->n_seq && dst < 0; i++)
            if (s->seqs[i].kind == SEQ_FREE) dst = i;
        if (dst < 0) return false;
    }
    /* the copy of a state takes one cell, or one state of a hybrid (checkpoints are taken only
     * without partial removal) */
    bool room = evict ? sched_cache_make_room(s, 1, 1) : has_room(s, 1, 1, &cells_short);
    if (!room || memory_seq_cp(s->mem, id, dst, 0, q->n_past) != 0) return false;
    struct seq *c = &s->seqs[dst];
    memcpy(c->tokens, q->tokens, (size_t)q->n_past * sizeof *c->tokens);
    *c = (struct seq){.kind = SEQ_CACHE, .tokens = c->tokens, .n_tokens = q->n_past, .n_past = q->n_past,
                      .last_served = -1, .lru = ++s->lru_clock, .partition = q->partition};
    drop_redundant(s, dst);
    return true;
}

void sched_cache_refresh_usage(struct sched *s) {
    memory_usage(s->mem, &s->usage);
    for (int32_t i = 0; i < s->n_seq; i++) {
        struct seq *q = &s->seqs[i];
        q->cells = q->kind == SEQ_FREE ? 0 : memory_seq_cells(s->mem, i);
    }
}
