/* sampler.c: see sampler.h for the chain. Candidates are (id, logit) pairs in one buffer of
 * n_vocab; truncations shrink its length. */
#include "sampler/sampler.h"
#include "common/err.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct cand {
    int32_t id;
    float logit;
};

/* The n_vocab buffers of one sampling call. Owned by a sampler (sampler_create with no scratch)
 * or shared by many (the serving engine's, one per model: its samplers sample one row after
 * another on the step's thread, so one set of buffers serves all of them). */
struct sampler_scratch {
    int32_t n_vocab;
    int32_t *counts;          /* [n_vocab] occurrences in the window (zero between calls) */
    float *work;              /* [n_vocab] logits after bias and penalties */
    struct cand *cand;        /* [n_vocab] */
};

struct sampler {
    int32_t n_vocab;
    int32_t max_window;
    struct sampler_params p;
    struct sampler_bias bias[SAMPLER_MAX_BIAS];
    uint64_t rng[4];          /* xoshiro256** state */
    int32_t *window;          /* [max_window] ring of the last tokens */
    int32_t n_window, window_head;
    int32_t n_nonfinite;      /* non-finite logits in the last sampler_sample's input */
    struct sampler_scratch *sc; /* shared, or own (then in the same block as the sampler) */
    struct sampler_scratch own;
};

/* Scratch buffers laid out after `at` (calloc'ed: counts must start at zero). */
static size_t scratch_bytes(int32_t n_vocab) {
    return (size_t)n_vocab * (sizeof(struct cand) + sizeof(int32_t) + sizeof(float));
}

static void scratch_lay_out(struct sampler_scratch *sc, char *at, int32_t n_vocab) {
    sc->n_vocab = n_vocab;
    sc->cand = (struct cand *)(void *)at; /* 8-byte elements first, then the 4-byte ones */
    sc->counts = (int32_t *)(void *)(sc->cand + n_vocab);
    sc->work = (float *)(void *)(sc->counts + n_vocab);
}

int sampler_scratch_create(struct sampler_scratch **out, int32_t n_vocab) {
    if (n_vocab <= 0) return -ERR_INVAL;
    size_t head = (sizeof(struct sampler_scratch) + 15) & ~(size_t)15;
    char *mem = calloc(1, head + scratch_bytes(n_vocab));
    if (!mem) return -ERR_NOMEM;
    struct sampler_scratch *sc = (struct sampler_scratch *)(void *)mem;
    scratch_lay_out(sc, mem + head, n_vocab);
    *out = sc;
    return 0;
}

void sampler_scratch_destroy(struct sampler_scratch *sc) { free(sc); }

/* One allocation for the sampler and its buffers: with a shared scratch a sampler is small
 * (the window and the bias list), which matters because the server creates one per request
 * on its loop thread. */
int sampler_create(struct sampler **out, int32_t n_vocab, int32_t max_window, struct sampler_scratch *shared) {
    if (n_vocab <= 0 || max_window < 0 || (shared && shared->n_vocab != n_vocab)) return -ERR_INVAL;
    size_t head = (sizeof(struct sampler) + 15) & ~(size_t)15;
    size_t win = (((size_t)max_window + 1) * sizeof(int32_t) + 15) & ~(size_t)15;
    char *mem = calloc(1, head + win + (shared ? 0 : scratch_bytes(n_vocab)));
    if (!mem) return -ERR_NOMEM;
    struct sampler *s = (struct sampler *)(void *)mem;
    s->n_vocab = n_vocab;
    s->max_window = max_window;
    s->window = (int32_t *)(void *)(mem + head);
    s->sc = shared ? shared : &s->own;
    if (!shared) scratch_lay_out(&s->own, mem + head + win, n_vocab);
    *out = s;
    return 0;
}

void sampler_destroy(struct sampler *s) {
    free(s); /* its own buffers, if any, are in the same block */
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

int sampler_reset(struct sampler *s, const struct sampler_params *p) {
    if (p->n_logit_bias < 0 || p->n_logit_bias > SAMPLER_MAX_BIAS || p->n_probs < 0 ||
        p->n_probs > SAMPLER_MAX_PROBS)
        return -ERR_INVAL;
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= s->n_vocab) return -ERR_INVAL;
    s->p = *p;
    if (p->n_logit_bias) memcpy(s->bias, p->logit_bias, (size_t)p->n_logit_bias * sizeof *s->bias);
    s->p.logit_bias = s->bias;
    if (s->p.repeat_last_n < 0 || s->p.repeat_last_n > s->max_window) s->p.repeat_last_n = s->max_window;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    s->n_window = s->window_head = 0;
    return 0;
}

void sampler_accept(struct sampler *s, int32_t token) {
    if (s->max_window == 0) return;
    s->window[s->window_head] = token;
    s->window_head = (s->window_head + 1) % s->max_window;
    if (s->n_window < s->max_window) s->n_window++;
}

/* A logit every later step can order and subtract: NaN ranks below everything (as a ban), +inf
 * becomes the largest finite float (so differences of logits stay finite). */
static float orderable(float l) {
    if (l != l) return -INFINITY;
    return l > FLT_MAX ? FLT_MAX : l;
}

/* An allowed token's logit under a mask: never -inf, so that it ranks above every masked token
 * even when bias or penalties banned it (a grammar's token must still be chosen then). */
static float allowed_floor(float l) { return l < -FLT_MAX ? -FLT_MAX : l; }

static bool allowed(const uint64_t *allow, int32_t i) { return (allow[i >> 6] >> (i & 63)) & 1; }

/* Steps 1 and 2 into s->sc->work, every value orderable; counts the input's non-finite logits.
 * allow (may be NULL): tokens outside it become -inf, those in it stay above -inf. */
static void bias_and_penalties(struct sampler *s, const float *logits, const uint64_t *allow) {
    const struct sampler_params *p = &s->p;
    float *work = s->sc->work;
    int32_t bad = 0;
    if (!allow) {
        for (int32_t i = 0; i < s->n_vocab; i++) {
            bad += !isfinite(logits[i]);
            work[i] = orderable(logits[i]);
        }
    } else {
        for (int32_t i = 0; i < s->n_vocab; i++) {
            bad += !isfinite(logits[i]);
            work[i] = allowed(allow, i) ? allowed_floor(orderable(logits[i])) : -INFINITY;
        }
    }
    s->n_nonfinite = bad;
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        int32_t t = p->logit_bias[i].token;
        if (allow && !allowed(allow, t)) continue;
        work[t] = orderable(work[t] + p->logit_bias[i].bias);
        if (allow) work[t] = allowed_floor(work[t]);
    }
    bool rep = p->repeat_penalty > 0 && p->repeat_penalty != 1.0f;
    if (!rep && p->presence_penalty == 0 && p->frequency_penalty == 0) return;
    int32_t n = p->repeat_last_n < s->n_window ? p->repeat_last_n : s->n_window;
    for (int32_t i = 0; i < n; i++) {  /* the newest n tokens */
        int32_t t = s->window[(s->window_head - 1 - i + s->max_window) % s->max_window];
        if (t >= 0 && t < s->n_vocab) s->sc->counts[t]++;
    }
    for (int32_t i = 0; i < n; i++) {
        int32_t t = s->window[(s->window_head - 1 - i + s->max_window) % s->max_window];
        if (t < 0 || t >= s->n_vocab || s->sc->counts[t] == 0) continue;
        float *l = &work[t];
        if (rep) *l = *l > 0 ? *l / p->repeat_penalty : *l * p->repeat_penalty;
        *l = orderable(*l - ((float)s->sc->counts[t] * p->frequency_penalty + p->presence_penalty));
        if (allow) *l = allowed(allow, t) ? allowed_floor(*l) : -INFINITY;
        s->sc->counts[t] = 0;  /* each distinct token once; leaves counts zeroed */
    }
}

static int cand_cmp(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Whether candidate (la, ia) ranks before (lb, ib): cand_cmp's order (higher logit, then lower id). */
static bool ranks_before(float la, int32_t ia, float lb, int32_t ib) { return la > lb || (la == lb && ia < ib); }

/* Sift the heap root (the worst kept candidate) down: a min-heap in ranking order. */
static void sift_down(struct cand *h, int32_t k, int32_t i) {
    for (;;) {
        int32_t w = i, l = 2 * i + 1, r = l + 1;
        if (l < k && ranks_before(h[w].logit, h[w].id, h[l].logit, h[l].id)) w = l;
        if (r < k && ranks_before(h[w].logit, h[w].id, h[r].logit, h[r].id)) w = r;
        if (w == i) return;
        struct cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* out[0..k) = the k best of the n logits as candidates, sorted by cand_cmp (0 < k <= n): one
 * pass with a heap of k, where most logits cost one comparison with the worst kept one (far
 * cheaper than a selection over all n candidates at top_k 40 over a 49152-token vocabulary).
 * The k best under cand_cmp's total order are one set, so any such selection gives this result. */
static void top_k_sorted(const float *logits, int32_t n, int32_t k, struct cand *out) {
    for (int32_t i = 0; i < k; i++) out[i] = (struct cand){i, logits[i]};
    for (int32_t i = k / 2 - 1; i >= 0; i--) sift_down(out, k, i);
    for (int32_t i = k; i < n; i++) {
        /* ids grow: an equal logit ranks after every kept one */
        if (!(logits[i] > out[0].logit)) continue;
        out[0] = (struct cand){i, logits[i]};
        sift_down(out, k, 0);
    }
    qsort(out, (size_t)k, sizeof *out, cand_cmp);
}

static void report_probs(struct sampler *s, int32_t chosen, struct sampler_prob *probs, int32_t *n_out) {
    int32_t n = s->p.n_probs, nv = s->n_vocab;
    float mx = -INFINITY;
    for (int32_t i = 0; i < nv; i++)
        if (s->sc->work[i] > mx) mx = s->sc->work[i];
    if (mx == -INFINITY) mx = 0;
    double sum = 0;
    for (int32_t i = 0; i < nv; i++) sum += exp((double)s->sc->work[i] - mx);
    double lse = sum > 0 ? mx + log(sum) : mx; /* every token banned: each one's logprob is -inf */
    int32_t k = n < nv ? n : nv;
    if (k > 0) top_k_sorted(s->sc->work, nv, k, s->sc->cand);
    bool have_chosen = false;
    for (int32_t i = 0; i < k; i++) {
        probs[i] = (struct sampler_prob){s->sc->cand[i].id, (float)(s->sc->cand[i].logit - lse)};
        have_chosen |= s->sc->cand[i].id == chosen;
    }
    if (!have_chosen) probs[k++] = (struct sampler_prob){chosen, (float)(s->sc->work[chosen] - lse)};
    *n_out = k;
}

/* post_sampling: the top of the n candidates drawn from (cand[0..n), the sum of their weights
 * exp((l - mx) / temperature)); every candidate not among them has a smaller probability. */
static void report_post(struct sampler *s, int32_t n, float mx, double sum, int32_t chosen,
                        struct sampler_prob *probs, int32_t *n_out) {
    int32_t k = s->p.n_probs < n ? s->p.n_probs : n;
    bool have_chosen = false;
    for (int32_t i = 0; i < k; i++) { /* a selection: k <= SAMPLER_MAX_PROBS */
        int32_t best = i;
        for (int32_t j = i + 1; j < n; j++)
            if (cand_cmp(&s->sc->cand[j], &s->sc->cand[best]) < 0) best = j;
        struct cand t = s->sc->cand[i];
        s->sc->cand[i] = s->sc->cand[best];
        s->sc->cand[best] = t;
        double w = exp(((double)s->sc->cand[i].logit - mx) / s->p.temperature);
        probs[i] = (struct sampler_prob){s->sc->cand[i].id, sum > 0 ? (float)log(w / sum) : -INFINITY};
        have_chosen |= s->sc->cand[i].id == chosen;
    }
    for (int32_t j = k; !have_chosen && j < n; j++)
        if (s->sc->cand[j].id == chosen) {
            double w = exp(((double)s->sc->cand[j].logit - mx) / s->p.temperature);
            probs[k++] = (struct sampler_prob){chosen, sum > 0 ? (float)log(w / sum) : -INFINITY};
            have_chosen = true;
        }
    *n_out = k;
}

int32_t sampler_last_nonfinite(const struct sampler *s) { return s->n_nonfinite; }

int32_t sampler_sample(struct sampler *s, const float *logits, struct sampler_prob *probs, int32_t *n_out) {
    return sampler_sample_masked(s, logits, NULL, probs, n_out);
}

/* Step 5's draw over cand[0..n) with weights exp((logit - mx) / temperature) summing to sum. With a
 * draft (>= 0; q a point mass on it): keep it with probability p(draft) = min(1, p / q), else draw
 * from p without it, renormalized: norm(max(0, p - q)). */
static int32_t draw(struct sampler *s, int32_t n, float mx, double sum, int32_t draft) {
    const struct cand *c = s->sc->cand;
    double t = s->p.temperature, skip = 0;
    if (draft >= 0) {
        for (int32_t i = 0; i < n; i++)
            if (c[i].id == draft) skip = exp(((double)c[i].logit - mx) / t);
        if (rng_uniform(s->rng) * sum < skip || !(sum - skip > 0)) return draft;
        sum -= skip;
    }
    double r = rng_uniform(s->rng) * sum, acc = 0;
    int32_t chosen = -1;
    for (int32_t i = 0; i < n; i++) {
        if (c[i].id == draft) continue;
        chosen = c[i].id; /* rounding at the end: the last candidate */
        acc += exp(((double)c[i].logit - mx) / t);
        if (r < acc) break;
    }
    return chosen >= 0 ? chosen : c[n - 1].id;
}

int32_t sampler_sample_masked(struct sampler *s, const float *logits, const uint64_t *allow, struct sampler_prob *probs,
                              int32_t *n_out) {
    return sampler_sample_draft(s, logits, allow, -1, probs, n_out);
}

int32_t sampler_sample_draft(struct sampler *s, const float *logits, const uint64_t *allow, int32_t draft,
                             struct sampler_prob *probs, int32_t *n_out) {
    const struct sampler_params *p = &s->p;
    int32_t nv = s->n_vocab, chosen = 0;
    bias_and_penalties(s, logits, allow);
    if (p->temperature <= 0) {
        for (int32_t i = 1; i < nv; i++)
            if (s->sc->work[i] > s->sc->work[chosen]) chosen = i;
    } else {
        int32_t n = nv;
        bool sorted = false;
        if (p->top_k > 0 && p->top_k < n) {
            top_k_sorted(s->sc->work, n, p->top_k, s->sc->cand);
            n = p->top_k;
            sorted = true;
        } else {
            for (int32_t i = 0; i < nv; i++) s->sc->cand[i] = (struct cand){i, s->sc->work[i]};
        }
        if (p->top_p > 0 && p->top_p < 1) {
            if (!sorted) qsort(s->sc->cand, (size_t)n, sizeof *s->sc->cand, cand_cmp);
            sorted = true;
            double sum = 0, acc = 0;
            for (int32_t i = 0; i < n; i++) sum += exp((double)s->sc->cand[i].logit - s->sc->cand[0].logit);
            for (int32_t i = 0; i < n; i++) {
                acc += exp((double)s->sc->cand[i].logit - s->sc->cand[0].logit) / sum;
                if (acc >= p->top_p) {
                    n = i + 1;
                    break;
                }
            }
        }
        if (p->min_p > 0) {
            float mx = -INFINITY;
            for (int32_t i = 0; i < n; i++)
                if (s->sc->cand[i].logit > mx) mx = s->sc->cand[i].logit;
            float cut = mx + logf(p->min_p);  /* p_i >= min_p * p_max  <=>  l_i >= l_max + log(min_p) */
            if (!(cut <= mx)) cut = mx;       /* min_p > 1 (or NaN) still keeps the best candidate */
            int32_t m = 0;
            for (int32_t i = 0; i < n; i++)
                if (s->sc->cand[i].logit >= cut) s->sc->cand[m++] = s->sc->cand[i];
            n = m;
        }
        float mx = -INFINITY;
        for (int32_t i = 0; i < n; i++)
            if (s->sc->cand[i].logit > mx) mx = s->sc->cand[i].logit;
        if (mx == -INFINITY) mx = 0;  /* everything banned: exp gives 0 for all, the last one wins */
        double sum = 0;
        for (int32_t i = 0; i < n; i++) sum += exp(((double)s->sc->cand[i].logit - mx) / p->temperature);
        chosen = draw(s, n, mx, sum, draft);
        if (probs && n_out && p->n_probs > 0 && p->post_sampling) {
            report_post(s, n, mx, sum, chosen, probs, n_out);
            return chosen;
        }
    }
    if (probs && n_out) {
        if (p->n_probs > 0 && p->post_sampling) { /* greedy: the chosen token is certain */
            probs[0] = (struct sampler_prob){chosen, 0.0f};
            *n_out = 1;
        } else if (p->n_probs > 0) report_probs(s, chosen, probs, n_out);
        else *n_out = 0;
    }
    return chosen;
}
