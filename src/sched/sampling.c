#include "sched/sampling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cand {
    int32_t id;
    float v;
};

struct sampler {
    struct sampling_params p;
    struct sampling_bias *bias;
    int32_t n_vocab;
    uint64_t rng;
    int32_t *hist;     /* ring of the last hist_cap tokens seen (prompt tail, then generated) */
    int32_t hist_cap, hist_n, hist_head;
    int32_t *counts;   /* [n_vocab] zero between calls: occurrences in the window during penalties */
    float *w;          /* [n_vocab] the row after bias and penalties */
    struct cand *cand; /* [n_vocab] */
};

static void hist_push(struct sampler *s, int32_t tok) {
    if (s->hist_cap == 0) return;
    s->hist[s->hist_head] = tok;
    s->hist_head = (s->hist_head + 1) % s->hist_cap;
    if (s->hist_n < s->hist_cap) s->hist_n++;
}

struct sampler *sampler_new(const struct sampling_params *p, int32_t n_vocab, uint64_t seed,
                            const int32_t *prompt, int32_t n_prompt) {
    struct sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->rng = seed;
    int32_t window = p->repeat_last_n < 0 ? p->n_ctx : p->repeat_last_n;
    bool penalties = p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    s->hist_cap = penalties && window > 0 ? window : 0;
    s->bias = p->n_bias ? malloc(sizeof *s->bias * (size_t)p->n_bias) : NULL;
    s->hist = s->hist_cap ? malloc(sizeof *s->hist * (size_t)s->hist_cap) : NULL;
    s->counts = s->hist_cap ? calloc((size_t)n_vocab, sizeof *s->counts) : NULL;
    s->w = malloc(sizeof *s->w * (size_t)n_vocab);
    s->cand = malloc(sizeof *s->cand * (size_t)n_vocab);
    if ((p->n_bias && !s->bias) || (s->hist_cap && (!s->hist || !s->counts)) || !s->w || !s->cand) {
        sampler_delete(s);
        return NULL;
    }
    if (p->n_bias) memcpy(s->bias, p->bias, sizeof *s->bias * (size_t)p->n_bias);
    s->p.bias = s->bias;
    int32_t from = n_prompt > s->hist_cap ? n_prompt - s->hist_cap : 0;
    for (int32_t i = from; i < n_prompt; i++) hist_push(s, prompt[i]);
    return s;
}

void sampler_delete(struct sampler *s) {
    if (!s) return;
    free(s->bias);
    free(s->hist);
    free(s->counts);
    free(s->w);
    free(s->cand);
    free(s);
}

/* splitmix64: a tiny, well-mixed generator; each choice owns one, so results depend only on the
 * seed and the logits, not on what else is running. */
static double rng_uniform(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* a ranks before b: larger value, then smaller id (deterministic ties). */
static bool cand_before(const struct cand *a, const struct cand *b) {
    return a->v > b->v || (a->v == b->v && a->id < b->id);
}

static int cand_cmp(const void *x, const void *y) {
    const struct cand *a = x, *b = y;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

/* Sift down in a heap whose root is the worst-ranked candidate. */
static void heap_down(struct cand *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, worst = i;
        if (l < n && cand_before(&h[worst], &h[l])) worst = l;
        if (r < n && cand_before(&h[worst], &h[r])) worst = r;
        if (worst == i) return;
        struct cand t = h[i];
        h[i] = h[worst];
        h[worst] = t;
        i = worst;
    }
}

/* The k best of w[0..n) into out[0..k), best first. O(n log k). */
static int32_t select_top(const float *w, int32_t n, int32_t k, struct cand *out) {
    if (k > n) k = n;
    if (k <= 0) return 0;
    for (int32_t i = 0; i < k; i++) out[i] = (struct cand){i, w[i]};
    for (int32_t i = k / 2 - 1; i >= 0; i--) heap_down(out, k, i);
    for (int32_t i = k; i < n; i++) {
        struct cand c = {i, w[i]};
        if (cand_before(&c, &out[0])) {
            out[0] = c;
            heap_down(out, k, 0);
        }
    }
    qsort(out, (size_t)k, sizeof *out, cand_cmp);
    return k;
}

static void apply_penalties(struct sampler *s) {
    const struct sampling_params *p = &s->p;
    for (int32_t i = 0; i < s->hist_n; i++) s->counts[s->hist[i]]++;
    for (int32_t i = 0; i < s->hist_n; i++) {
        int32_t t = s->hist[i];
        int32_t c = s->counts[t];
        if (c == 0) continue; /* already applied for this token */
        float *v = &s->w[t];
        if (p->repeat_penalty != 1.0f) *v = *v > 0 ? *v / p->repeat_penalty : *v * p->repeat_penalty;
        *v -= (float)c * p->frequency_penalty + p->presence_penalty;
        s->counts[t] = 0;
    }
}

static int32_t argmax(const float *w, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (w[i] > w[best]) best = i;
    return best;
}

/* Draw from candidates c[0..n) (best first) after top-p, min-p and temperature. */
static int32_t draw(struct sampler *s, struct cand *c, int32_t n) {
    const struct sampling_params *p = &s->p;
    float max = c[0].v;
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)(c[i].v - max));
    if (p->top_p < 1.0f) {
        double acc = 0;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            acc += exp((double)(c[i].v - max)) / sum;
            if (acc >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (p->min_p > 0.0f) { /* p_i >= min_p * p_max  <=>  v_i >= v_max + log(min_p) */
        float floor_v = max + logf(p->min_p);
        int32_t keep = 1;
        while (keep < n && c[keep].v >= floor_v) keep++;
        n = keep;
    }
    double total = 0;
    for (int32_t i = 0; i < n; i++) total += exp((double)(c[i].v - max) / p->temperature);
    double r = rng_uniform(&s->rng) * total;
    for (int32_t i = 0; i < n; i++) {
        r -= exp((double)(c[i].v - max) / p->temperature);
        if (r < 0) return c[i].id;
    }
    return c[n - 1].id;
}

int32_t sampler_sample(struct sampler *s, const float *logits, int32_t n_probs,
                       struct sched_token_probs *probs) {
    int32_t nv = s->n_vocab;
    memcpy(s->w, logits, sizeof *s->w * (size_t)nv);
    for (int32_t i = 0; i < s->p.n_bias; i++) s->w[s->p.bias[i].token] += s->p.bias[i].bias;
    if (s->hist_cap) apply_penalties(s);

    int32_t tok;
    if (s->p.temperature <= 0.0f) {
        tok = argmax(s->w, nv);
    } else {
        int32_t k = s->p.top_k > 0 && s->p.top_k < nv ? s->p.top_k : nv;
        int32_t n = select_top(s->w, nv, k, s->cand);
        while (n > 1 && isinf(s->cand[n - 1].v) && s->cand[n - 1].v < 0) n--; /* banned tokens */
        tok = draw(s, s->cand, n);
    }
    hist_push(s, tok);

    if (probs) {
        float max = s->w[argmax(s->w, nv)];
        double sum = 0;
        for (int32_t i = 0; i < nv; i++) sum += exp((double)(s->w[i] - max));
        float log_z = max + (float)log(sum);
        probs->token = tok;
        probs->logprob = s->w[tok] - log_z;
        if (n_probs > SCHED_MAX_PROBS) n_probs = SCHED_MAX_PROBS;
        probs->n_top = select_top(s->w, nv, n_probs, s->cand);
        for (int32_t i = 0; i < probs->n_top; i++) {
            probs->top_token[i] = s->cand[i].id;
            probs->top_logprob[i] = s->cand[i].v - log_z;
        }
    }
    return tok;
}
