/* spec.c: speculative decoding's part of the scheduler (sched.h): which drafts a step verifies,
 * prompt lookup, and the worker's verification of a sequence's draft rows. */
#include "sched/sched_internal.h"

#include <string.h>

static int32_t min32(int32_t a, int32_t b) { return a < b ? a : b; }

int32_t sched_spec_lookup(const int32_t *tokens, int32_t n, int32_t n_max, int32_t *out) {
    if (n_max <= 0) return 0;
    for (int32_t g = 4; g >= 2; g--) {
        if (n < g + 1) continue;
        const int32_t *key = tokens + n - g;
        /* the latest occurrence [i, i + g) that a continuation follows (i + g < n) */
        for (int32_t i = n - g - 1; i >= 0; i--) {
            if (tokens[i] != key[0] || memcmp(tokens + i, key, (size_t)g * sizeof *key) != 0) continue;
            int32_t m = min32(n - (i + g), n_max);
            memcpy(out, tokens + i + g, (size_t)m * sizeof *out);
            return m;
        }
    }
    return 0;
}

/* A decaying average's start for a sequence that has not been verified yet: an even chance. */
#define SPEC_RATE_START 0.5f

/* With other decodes in the step, drafts are worth their rows only if the tokens they are expected
 * to add per millisecond of the step they add (the cost model's per-token and per-cell terms)
 * beat the step's own tokens per millisecond: the most drafts (<= d) that do, 0 when none. A lone
 * decode always drafts: its step is its read of the weights, which drafts share. */
static int32_t worth(const struct sched *s, const struct seq *q, int32_t d, int32_t rows, double attn) {
    if (s->n_decode <= 1 || s->cost.observed == 0) return d;
    double fixed, per_token, per_cell;
    step_cost_model(&s->cost, &fixed, &per_token, &per_cell);
    double step_ms = fixed + per_token * rows + per_cell * attn;
    if (!(step_ms > 0)) return d;
    double rate = s->n_decode / step_ms, a = q->spec_rate > 0 ? q->spec_rate : SPEC_RATE_START, gain = 0, p = 1;
    int32_t best = 0;
    for (int32_t i = 1; i <= d; i++) {
        gain += p *= a; /* expected accepted tokens of i drafts: a + a^2 + ... + a^i */
        double extra = per_token * i + per_cell * step_cost_attn(q->n_past + 1, i);
        if (extra <= 0 || gain / extra >= rate) best = i;
    }
    return best;
}

void sched_spec_plan(struct sched *s) {
    /* beside prompt chunks a step's read of the weights is already shared by many rows */
    int32_t left = s->n_prompt > 0 ? 0 : SCHED_SPEC_ROWS - s->n_decode;
    int32_t rows = s->n_decode;
    double attn = 0;
    for (int32_t i = 0; i < s->n_decode; i++) attn += s->seqs[s->decode_order[i]].n_past + 1;
    for (int32_t i = 0; i < s->n_decode; i++) {
        struct seq *q = &s->seqs[s->decode_order[i]];
        const struct sched_req *r = q->req;
        q->n_plan = 0;
        /* generating (a first token exists), and room left in the step's speculation rows */
        if (left <= 0 || r->draft_max <= 0 || q->n_tokens <= r->n_prompt) continue;
        if (q->spec_k <= 0) q->spec_k = r->draft_max;
        int32_t k = min32(q->spec_k, left);
        if (r->n_predict > 0) k = min32(k, r->n_predict - (q->n_tokens - r->n_prompt) - 1); /* 1 + k tokens may come */
        k = min32(k, s->token_cap - q->n_tokens - 1);
        if (k <= 0) continue;
        int32_t d = 0;
        if (s->ops->draft) {
            if (q->draft_at == q->n_tokens) {
                d = min32(q->n_draft, k);
                memcpy(q->plan, q->draft, (size_t)d * sizeof *q->plan);
            }
        } else {
            d = sched_spec_lookup(q->tokens, q->n_tokens, k, q->plan);
        }
        d = worth(s, q, d, rows, attn);
        if (d < r->draft_min || d == 0) continue;
        q->n_plan = d;
        left -= d;
        rows += d;
        attn += step_cost_attn(q->n_past + 1, d);
    }
}

void sched_spec_draft(struct sched *s, struct sched_step *st, const struct step_sample *sm) {
    struct seq *q = &s->seqs[sm->seq];
    const struct sched_req *r = q->req;
    q->n_draft = 0;
    if (!s->ops->draft || sm->n_out < 1 || st->draft_left <= 0) return;
    int32_t n = q->n_tokens;
    memcpy(st->spec_hist, q->tokens, (size_t)n * sizeof *st->spec_hist);
    for (int32_t j = 0; j < sm->n_out; j++) {
        const struct sched_token_probs *o = j == 0 ? &sm->out : &st->spec_out[sm->row + j];
        if (o->token < 0) return;
        st->spec_hist[n++] = o->token;
    }
    if (n >= s->token_cap) return;
    int32_t k = min32(q->spec_k > 0 ? q->spec_k : r->draft_max, st->draft_left);
    q->n_draft = s->ops->draft(s->engine, sm->seq, st->spec_hist, n, k, r->draft_p_min, q->draft);
    if (q->n_draft < 0) q->n_draft = 0;
    q->draft_at = n;
    st->draft_left -= q->n_draft;
}

void sched_spec_verify(struct sched *s, struct sched_step *st, struct step_sample *sm, const float *logits) {
    struct seq *q = &s->seqs[sm->seq];
    const struct sched_req *r = q->req;
    int32_t d = sm->n_draft;
    sm->n_out = sm->n_accepted = 0;
    for (int32_t j = 0; j <= d; j++) {
        const float *row = logits + (size_t)(sm->row + j) * (size_t)s->n_vocab;
        struct sched_token_probs *o = j == 0 ? &sm->out : &st->spec_out[sm->row + j];
        o->n_top = 0;
        sm->n_out++;
        if (j == d) { /* every draft accepted: the row after the last gives one more token */
            o->token = s->ops->sample(s->engine, sm->sampler, row, sm->n_probs, o);
            break;
        }
        int32_t draft = st->batch.token[sm->draft_entry + j];
        o->token = s->ops->sample_draft(s->engine, sm->sampler, row, draft, sm->n_probs, o);
        if (o->token != draft) break;
        sm->n_accepted++;
    }
    float got = (float)sm->n_accepted / (float)d, was = q->spec_rate > 0 ? q->spec_rate : SPEC_RATE_START;
    q->spec_rate = 0.75f * was + 0.25f * (got > 0 ? got : 1e-3f); /* > 0: set */
    /* adapt: double while everything is accepted, else try one more than was accepted */
    int32_t least = r->draft_min > 1 ? r->draft_min : 1;
    int32_t k = sm->n_accepted == d ? min32(2 * q->spec_k, r->draft_max) : sm->n_accepted + 1;
    q->spec_k = k > least ? k : least;
    sched_spec_draft(s, st, sm);
}
