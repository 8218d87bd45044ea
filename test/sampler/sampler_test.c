#include "test.h"
#include "common/err.h"
#include "sampler/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static struct sampler *make(struct test_case *t, int32_t n_vocab, const struct sampler_params *p) {
    struct sampler *s = NULL;
    if (sampler_create(&s, n_vocab, 64, NULL) != 0) return NULL;
    if (sampler_reset(s, p) != 0) {
        sampler_destroy(s);
        return NULL;
    }
    return s;
}

TEST(sampler_greedy_takes_the_largest_logit_smallest_id_on_ties) {
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f};
    struct sampler *s = make(t, 6, &(struct sampler_params){.temperature = 0});
    CHECK(s);
    CHECK_EQ_INT(sampler_sample(s, l, NULL, NULL), 1);
    sampler_destroy(s);
}

TEST(sampler_logit_bias_bans_and_boosts) {
    float l[4] = {3, 2, 1, 0};
    struct sampler_bias ban[] = {{0, -INFINITY}};
    struct sampler *s = make(t, 4, &(struct sampler_params){.logit_bias = ban, .n_logit_bias = 1});
    CHECK(s);
    CHECK_EQ_INT(sampler_sample(s, l, NULL, NULL), 1);
    struct sampler_bias boost[] = {{3, 10}};
    CHECK_EQ_INT(sampler_reset(s, &(struct sampler_params){.logit_bias = boost, .n_logit_bias = 1}), 0);
    CHECK_EQ_INT(sampler_sample(s, l, NULL, NULL), 3);
    struct sampler_bias bad[] = {{4, 1}};
    CHECK_EQ_INT(sampler_reset(s, &(struct sampler_params){.logit_bias = bad, .n_logit_bias = 1}), -ERR_INVAL);
    sampler_destroy(s);
}

TEST(sampler_repeat_penalty_covers_only_the_window) {
    float l[4] = {2.0f, 1.9f, -1.0f, 0.0f};
    struct sampler_params p = {.repeat_penalty = 2.0f, .repeat_last_n = 2, .n_probs = 4};
    struct sampler *s = make(t, 4, &p);
    CHECK(s);
    sampler_accept(s, 0);
    CHECK_EQ_INT(sampler_sample(s, l, NULL, NULL), 1);  /* 2.0 / 2 = 1.0 < 1.9 */
    sampler_accept(s, 3);
    sampler_accept(s, 3);                                 /* 0 has left the window of 2 */
    CHECK_EQ_INT(sampler_sample(s, l, NULL, NULL), 0);
    /* Negative logits are multiplied: token 2 in the window goes from -1 to -2. */
    sampler_accept(s, 2);
    struct sampler_prob pr[SAMPLER_MAX_PROBS + 1];
    int32_t n = 0;
    CHECK_EQ_INT(sampler_sample(s, l, pr, &n), 0);
    CHECK_EQ_INT(n, 4);
    CHECK_EQ_INT(pr[3].token, 2);
    CHECK(fabsf((pr[0].logprob - pr[3].logprob) - 4.0f) < 1e-4f); /* 2 - (-2) */
    sampler_destroy(s);
}

TEST(sampler_presence_and_frequency_penalties_count_occurrences) {
    float l[3] = {1.0f, 0.0f, 0.0f};
    struct sampler_params p = {.presence_penalty = 0.5f, .frequency_penalty = 0.25f, .repeat_last_n = -1,
                               .n_probs = 3};
    struct sampler *s = make(t, 3, &p);
    CHECK(s);
    sampler_accept(s, 0);
    sampler_accept(s, 0);
    sampler_accept(s, 1);
    struct sampler_prob pr[4];
    int32_t n;
    /* token 0: 1 - 0.5 - 2*0.25 = 0; token 1: 0 - 0.5 - 0.25 = -0.75; token 2: 0 */
    CHECK_EQ_INT(sampler_sample(s, l, pr, &n), 0);
    CHECK_EQ_INT(pr[0].token, 0);
    CHECK_EQ_INT(pr[1].token, 2);
    CHECK(fabsf(pr[0].logprob - pr[1].logprob) < 1e-6f);
    CHECK(fabsf((pr[1].logprob - pr[2].logprob) - 0.75f) < 1e-5f);
    /* The counts are cleared: the same call again gives the same answer. */
    int32_t n2;
    struct sampler_prob pr2[4];
    sampler_sample(s, l, pr2, &n2);
    CHECK(pr2[2].logprob == pr[2].logprob);
    sampler_destroy(s);
}

/* Tokens drawn in many samples, as a bitmask. */
static unsigned drawn(struct sampler *s, const float *l, int n) {
    unsigned seen = 0;
    for (int i = 0; i < n; i++) seen |= 1u << sampler_sample(s, l, NULL, NULL);
    return seen;
}

TEST(sampler_top_k_top_p_min_p_truncate) {
    float l[5] = {3.0f, 2.5f, 2.0f, 1.0f, 0.0f};
    struct sampler *s = make(t, 5, &(struct sampler_params){.temperature = 1, .top_k = 2, .seed = 1});
    CHECK(s);
    CHECK_EQ_INT(drawn(s, l, 2000), 0x3);
    /* p ~ .463 .281 .170 .062 .023: top_p 0.7 keeps the first two (0.744 >= 0.7). */
    CHECK_EQ_INT(sampler_reset(s, &(struct sampler_params){.temperature = 1, .top_p = 0.7f, .seed = 2}), 0);
    CHECK_EQ_INT(drawn(s, l, 2000), 0x3);
    /* min_p 0.3: keep p >= 0.3 p_max, i.e. logit >= 3 + ln 0.3 = 1.80: tokens 0, 1, 2. */
    CHECK_EQ_INT(sampler_reset(s, &(struct sampler_params){.temperature = 1, .min_p = 0.3f, .seed = 3}), 0);
    CHECK_EQ_INT(drawn(s, l, 4000), 0x7);
    /* No truncation: every token shows up. */
    CHECK_EQ_INT(sampler_reset(s, &(struct sampler_params){.temperature = 1, .seed = 4}), 0);
    CHECK_EQ_INT(drawn(s, l, 20000), 0x1f);
    sampler_destroy(s);
}

TEST(sampler_temperature_draws_follow_the_softmax) {
    float l[3] = {1.0f, 0.0f, -1.0f};
    struct sampler *s = make(t, 3, &(struct sampler_params){.temperature = 2.0f, .seed = 7});
    CHECK(s);
    int cnt[3] = {0};
    int n = 30000;
    for (int i = 0; i < n; i++) cnt[sampler_sample(s, l, NULL, NULL)]++;
    double z = exp(0.5) + 1 + exp(-0.5);
    double want[3] = {exp(0.5) / z, 1 / z, exp(-0.5) / z};
    for (int i = 0; i < 3; i++) CHECK(fabs(cnt[i] / (double)n - want[i]) < 0.015);
    sampler_destroy(s);
}

TEST(sampler_same_seed_same_tokens) {
    enum { V = 50 };
    float l[V];
    for (int i = 0; i < V; i++) l[i] = sinf((float)i);
    struct sampler_params p = {.temperature = 1.5f, .top_k = 30, .top_p = 0.98f, .seed = 1234};
    struct sampler *a = make(t, V, &p), *b = make(t, V, &p);
    CHECK(a && b);
    int differ = 0;
    for (int i = 0; i < 200; i++) CHECK_EQ_INT(sampler_sample(a, l, NULL, NULL), sampler_sample(b, l, NULL, NULL));
    p.seed = 1235;
    CHECK_EQ_INT(sampler_reset(b, &p), 0);
    for (int i = 0; i < 200; i++) differ += sampler_sample(a, l, NULL, NULL) != sampler_sample(b, l, NULL, NULL);
    CHECK(differ > 0);
    sampler_destroy(a);
    sampler_destroy(b);
}

TEST(sampler_reports_sorted_log_probs_and_the_chosen_token) {
    enum { V = 300 };
    float l[V];
    srand(5);
    for (int i = 0; i < V; i++) l[i] = (float)(rand() % 1000) / 100.0f;
    struct sampler_bias bias[] = {{17, -100}};
    struct sampler *s = make(t, V, &(struct sampler_params){.temperature = 0, .n_probs = 5, .logit_bias = bias,
                                                              .n_logit_bias = 1});
    CHECK(s);
    struct sampler_prob pr[6];
    int32_t n;
    int32_t tok = sampler_sample(s, l, pr, &n);
    CHECK_EQ_INT(n, 5);
    CHECK_EQ_INT(pr[0].token, tok);
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(l[i] - (i == 17 ? 100 : 0));
    for (int i = 0; i < n; i++) {
        CHECK(fabs(pr[i].logprob - (l[pr[i].token] - log(z))) < 1e-4);
        if (i) CHECK(pr[i].logprob <= pr[i - 1].logprob);
        for (int j = 0; j < V; j++)  /* nothing outside the list beats its last entry */
            if (j != pr[0].token && j != pr[1].token && j != pr[2].token && j != pr[3].token && j != pr[4].token)
                CHECK(l[j] - (j == 17 ? 100 : 0) <= l[pr[4].token]);
    }
    /* A sampled token outside the top list is appended. */
    float flat[V];
    for (int i = 0; i < V; i++) flat[i] = 0;
    CHECK_EQ_INT(sampler_reset(s, &(struct sampler_params){.temperature = 1, .n_probs = 1, .seed = 9}), 0);
    int appended = 0;
    for (int i = 0; i < 20; i++) {
        tok = sampler_sample(s, flat, pr, &n);
        if (tok != 0) {
            CHECK_EQ_INT(n, 2);
            CHECK_EQ_INT(pr[1].token, tok);
            appended++;
        }
    }
    CHECK(appended > 0);
    sampler_destroy(s);
}

TEST(sampler_everything_banned_still_returns_a_token) {
    float l[3] = {1, 2, 3};
    struct sampler_bias ban[] = {{0, -INFINITY}, {1, -INFINITY}, {2, -INFINITY}};
    struct sampler *s = make(t, 3, &(struct sampler_params){.temperature = 1, .logit_bias = ban, .n_logit_bias = 3});
    CHECK(s);
    int32_t tok = sampler_sample(s, l, NULL, NULL);
    CHECK(tok >= 0 && tok < 3);
    sampler_destroy(s);
}

TEST(sampler_shared_scratch_gives_the_same_tokens_as_own_buffers) {
    /* two samplers interleaving on one scratch (penalties use its counts, top-k/p its candidates)
     * choose exactly what samplers with their own buffers choose */
    enum { V = 300 };
    float l[V];
    for (int i = 0; i < V; i++) l[i] = 3.0f * sinf(0.37f * (float)i);
    struct sampler_params p[2] = {
        {.temperature = 0.9f, .top_k = 40, .top_p = 0.9f, .repeat_penalty = 1.3f, .repeat_last_n = 16,
         .presence_penalty = 0.2f, .frequency_penalty = 0.1f, .seed = 7},
        {.temperature = 0, .repeat_penalty = 1.5f, .repeat_last_n = 8, .n_probs = 3}};
    struct sampler_scratch *sc;
    CHECK_EQ_INT(sampler_scratch_create(&sc, V), 0);
    struct sampler *shared[2], *own[2], *wrong;
    CHECK_EQ_INT(sampler_create(&wrong, V + 1, 64, sc), -ERR_INVAL); /* another vocabulary */
    for (int k = 0; k < 2; k++) {
        CHECK_EQ_INT(sampler_create(&shared[k], V, 64, sc), 0);
        CHECK_EQ_INT(sampler_reset(shared[k], &p[k]), 0);
        own[k] = make(t, V, &p[k]);
        CHECK(own[k] != NULL);
    }
    for (int i = 0; i < 100; i++)
        for (int k = 0; k < 2; k++) {
            struct sampler_prob pa[SAMPLER_MAX_PROBS + 1], pb[SAMPLER_MAX_PROBS + 1];
            int32_t na = 0, nb = 0;
            int32_t a = sampler_sample(shared[k], l, pa, &na), b = sampler_sample(own[k], l, pb, &nb);
            CHECK_EQ_INT(a, b);
            CHECK_EQ_INT(na, nb);
            for (int32_t j = 0; j < na && j < nb; j++) CHECK_EQ_INT(pa[j].token, pb[j].token);
            sampler_accept(shared[k], a);
            sampler_accept(own[k], b);
        }
    for (int k = 0; k < 2; k++) {
        sampler_destroy(shared[k]);
        sampler_destroy(own[k]);
    }
    sampler_scratch_destroy(sc);
}

/* The k best candidates (top_k, n_probs) are those of a full sort by logit then id, also with
 * many tied logits: the reported top 20 of a 3000-token vocabulary of 7 distinct values in a
 * shuffled order, against the oracle; and top_k = 1 draws the oracle's first. */
static int cmp_oracle(const void *a, const void *b) {
    const struct sampler_prob *x = a, *y = b;
    if (x->logprob != y->logprob) return x->logprob > y->logprob ? -1 : 1;
    return x->token - y->token;
}

TEST(sampler_top_k_equals_a_full_sort_with_ties) {
    enum { V = 3000, K = SAMPLER_MAX_PROBS };
    static float l[V];
    static struct sampler_prob all[V];
    uint32_t x = 12345;
    for (int rep = 0; rep < 20; rep++) {
        for (int i = 0; i < V; i++) {
            x = x * 1664525u + 1013904223u;
            l[i] = (float)((x >> 16) % 7) - (rep % 3 == 0 && i % 500 == 3 ? -10.0f : 0.0f);
            all[i] = (struct sampler_prob){i, l[i]};
        }
        qsort(all, V, sizeof *all, cmp_oracle);
        struct sampler *s = make(t, V, &(struct sampler_params){.temperature = 0, .n_probs = K});
        CHECK(s);
        struct sampler_prob probs[K + 1];
        int32_t n = 0;
        CHECK_EQ_INT(sampler_sample(s, l, probs, &n), all[0].token);
        CHECK_EQ_INT(n, K);
        for (int i = 0; i < K && i < n; i++) CHECK_EQ_INT(probs[i].token, all[i].token);
        CHECK_EQ_INT(sampler_reset(s, &(struct sampler_params){.temperature = 1, .top_k = 1, .seed = (uint64_t)rep}), 0);
        CHECK_EQ_INT(sampler_sample(s, l, NULL, NULL), all[0].token);
        sampler_destroy(s);
    }
}

/* Whatever the logits and parameters, a token in range comes back, and the log-probs name tokens
 * in range: the request that summed two FLT_MAX biases into inf, a NaN row, every token banned,
 * min_p above 1, and the NaN/inf parameters a caller could pass. */
TEST(sampler_is_total) {
    enum { NV = 8 };
    float finite[NV] = {1, 5, 2, 5, -3, 0, 4, 1};
    float nan_row[NV], inf_row[NV] = {1, INFINITY, 2, -INFINITY, INFINITY, 0, 0, 0};
    float banned[NV];
    for (int i = 0; i < NV; i++) nan_row[i] = NAN, banned[i] = -INFINITY;
    const float *rows[] = {finite, nan_row, inf_row, banned};
    struct sampler_bias huge[] = {{0, 3.4e38f}, {1, -INFINITY}, {2, 3.4e38f}};
    struct sampler_params ps[] = {
        {.temperature = 0},
        {.temperature = 1, .top_k = 1, .min_p = 0.05f, .n_probs = 3, .logit_bias = huge, .n_logit_bias = 3},
        {.temperature = 0.8f, .top_k = 40, .top_p = 0.9f, .min_p = 5.0f, .n_probs = 20},
        {.temperature = 1e-30f, .top_p = 0.5f, .repeat_penalty = 1e30f, .frequency_penalty = 3e38f,
         .presence_penalty = -3e38f, .repeat_last_n = -1},
        {.temperature = NAN, .top_p = NAN, .min_p = NAN, .repeat_penalty = NAN},
        {.temperature = INFINITY, .top_k = 3, .n_probs = 1},
    };
    for (size_t pi = 0; pi < sizeof ps / sizeof *ps; pi++) {
        struct sampler *s = make(t, NV, &ps[pi]);
        CHECK(s);
        for (int a = 0; a < 5; a++) sampler_accept(s, a);
        for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
            struct sampler_prob probs[SAMPLER_MAX_PROBS + 1];
            int32_t n = -1;
            int32_t tok = sampler_sample(s, rows[ri], probs, &n);
            CHECK(tok >= 0 && tok < NV);
            CHECK(n >= 0 && n <= ps[pi].n_probs + 1);
            for (int32_t i = 0; i < n; i++) CHECK(probs[i].token >= 0 && probs[i].token < NV);
            CHECK_EQ_INT(sampler_last_nonfinite(s), ri == 0 || ri == 3 ? (ri == 3 ? NV : 0) : (ri == 1 ? NV : 3));
        }
        sampler_destroy(s);
    }
}

TEST(sampler_nan_ranks_as_banned_inf_as_largest) {
    float l[4] = {NAN, 1, INFINITY, 2};
    struct sampler *s = make(t, 4, &(struct sampler_params){.temperature = 0});
    CHECK(s);
    CHECK_EQ_INT(sampler_sample(s, l, NULL, NULL), 2);
    CHECK_EQ_INT(sampler_last_nonfinite(s), 2);
    float ok[4] = {0, 1, 3, 2};
    CHECK_EQ_INT(sampler_sample(s, ok, NULL, NULL), 2);
    CHECK_EQ_INT(sampler_last_nonfinite(s), 0);
    sampler_destroy(s);
}

/* A grammar's mask: only allowed tokens come out, whatever the chain, bias and penalties do. */
TEST(sampler_masked_chooses_only_allowed_tokens) {
    enum { V = 200 };
    float l[V];
    uint64_t rng = 9, allow[(V + 63) / 64];
    struct sampler_bias ban[] = {{7, -INFINITY}, {150, -INFINITY}, {3, 50.0f}};
    const struct sampler_params params[] = {
        {.temperature = 0},
        {.temperature = 1.0f},
        {.temperature = 0.7f, .top_k = 5, .top_p = 0.9f, .min_p = 0.1f},
        {.temperature = 1.5f, .logit_bias = ban, .n_logit_bias = 3, .repeat_penalty = 1.3f, .repeat_last_n = 16,
         .presence_penalty = 0.5f, .n_probs = 5},
    };
    for (size_t k = 0; k < sizeof params / sizeof *params; k++) {
        struct sampler *s = make(t, V, &params[k]);
        CHECK(s);
        for (int round = 0; round < 200; round++) {
            for (int i = 0; i < V; i++) l[i] = test_nrand(&rng) * 3;
            memset(allow, 0, sizeof allow);
            int n_allowed = 1 + (int)(test_urand(&rng) * 4);
            for (int j = 0; j < n_allowed; j++) {
                int id = round % 3 == 0 && j == 0 ? 7 : (int)(test_urand(&rng) * V); /* 7: banned by bias */
                allow[id >> 6] |= 1ull << (id & 63);
            }
            struct sampler_prob probs[SAMPLER_MAX_PROBS + 1];
            int32_t n_probs = 0;
            int32_t tok = sampler_sample_masked(s, l, allow, probs, &n_probs);
            CHECK(tok >= 0 && tok < V);
            CHECK((allow[tok >> 6] >> (tok & 63)) & 1);
            for (int32_t i = 0; i < n_probs; i++) /* masked tokens have no probability */
                CHECK(((allow[probs[i].token >> 6] >> (probs[i].token & 63)) & 1) || probs[i].logprob == -INFINITY);
            sampler_accept(s, tok);
        }
        sampler_destroy(s);
    }
    /* the only allowed token banned by bias is still the one chosen */
    struct sampler *s = make(t, V, &params[3]);
    memset(allow, 0, sizeof allow);
    allow[150 >> 6] |= 1ull << (150 & 63);
    for (int i = 0; i < V; i++) l[i] = 1.0f;
    CHECK_EQ_INT(sampler_sample_masked(s, l, allow, NULL, NULL), 150);
    sampler_destroy(s);
}

TEST(sampler_post_sampling_probs_are_the_truncated_distribution) {
    /* logits 3, 2, 1, 0, -1 at temperature 0.5 and top_k 3: the draw is among ids 0..2 with
     * weights e^6, e^4, e^2 */
    float l[5] = {3, 2, 1, 0, -1};
    struct sampler *s = make(t, 5, &(struct sampler_params){.temperature = 0.5f, .top_k = 3, .n_probs = 5,
                                                            .post_sampling = true, .seed = 3});
    CHECK(s);
    struct sampler_prob p[SAMPLER_MAX_PROBS + 1];
    int32_t n = 0;
    int32_t tok = sampler_sample(s, l, p, &n);
    CHECK_EQ_INT(n, 3); /* only what was left to draw from */
    double z = exp(6.0) + exp(4.0) + exp(2.0);
    for (int32_t i = 0; i < 3; i++) {
        CHECK_EQ_INT(p[i].token, i);
        CHECK(fabs(p[i].logprob - log(exp(6.0 - 2.0 * i) / z)) < 1e-5);
    }
    CHECK(tok >= 0 && tok <= 2);
    /* fewer asked than left: the most probable, and the chosen one after them when it is not */
    CHECK_EQ_INT(sampler_reset(s, &(struct sampler_params){.temperature = 100.0f, .n_probs = 1,
                                                          .post_sampling = true, .seed = 5}), 0);
    bool saw_other = false;
    for (int k = 0; k < 50; k++) {
        tok = sampler_sample(s, l, p, &n);
        CHECK_EQ_INT(p[0].token, 0);
        if (tok != 0) {
            saw_other = true;
            CHECK(n == 2 && p[1].token == tok && p[1].logprob < p[0].logprob);
        } else {
            CHECK_EQ_INT(n, 1);
        }
    }
    CHECK(saw_other);
    /* greedy: the chosen token, certain */
    CHECK_EQ_INT(sampler_reset(s, &(struct sampler_params){.temperature = 0, .n_probs = 3, .post_sampling = true}), 0);
    CHECK_EQ_INT(sampler_sample(s, l, p, &n), 0);
    CHECK(n == 1 && p[0].token == 0 && p[0].logprob == 0.0f);
    sampler_destroy(s);
}

/* Speculative acceptance (sampler_sample_draft): whatever the draft, the tokens it returns follow
 * the sampler's own distribution, and the draft is kept as often as that distribution gives it.
 * A chi-square over 6 tokens (top_k drops the last: it must never come out), 40000 draws per
 * draft token; 4 degrees of freedom, bar 40 (p < 1e-7 for a correct rule). */
TEST(sampler_draft_acceptance_keeps_the_target_distribution) {
    enum { V = 6, DRAWS = 40000 };
    float l[V] = {1.0f, 0.2f, 0.7f, -0.5f, 0.0f, -3.0f};
    struct sampler_params p = {.temperature = 0.8f, .top_k = 5, .seed = 7};
    struct sampler *s = make(t, V, &p);
    CHECK(s);
    double want[V] = {0}, sum = 0;
    for (int i = 0; i < V - 1; i++) sum += want[i] = exp(l[i] / 0.8);
    for (int i = 0; i < V; i++) want[i] /= sum;
    for (int32_t draft = 0; draft < V; draft++) {
        int64_t got[V] = {0}, kept = 0;
        for (int k = 0; k < DRAWS; k++) {
            int32_t tok = sampler_sample_draft(s, l, NULL, draft, NULL, NULL);
            CHECK(tok >= 0 && tok < V);
            got[tok]++;
            kept += tok == draft;
        }
        CHECK_EQ_INT(got[V - 1], 0);
        double chi2 = 0;
        for (int i = 0; i < V - 1; i++) chi2 += (got[i] - DRAWS * want[i]) * (got[i] - DRAWS * want[i]) / (DRAWS * want[i]);
        if (chi2 >= 40) printf("draft %d: chi2 %.1f\n", draft, chi2);
        CHECK(chi2 < 40);
        /* accepted with probability p(draft): the same counts as above, checked as a rate */
        CHECK(fabs((double)kept / DRAWS - want[draft]) < 0.015);
    }
    sampler_destroy(s);
}

/* Greedy: the draft is kept exactly when it is the largest logit, else the largest logit comes. */
TEST(sampler_draft_greedy_is_the_argmax) {
    float l[5] = {0.1f, 2.0f, 1.9f, -1.0f, 2.0f};
    struct sampler *s = make(t, 5, &(struct sampler_params){.temperature = 0});
    CHECK(s);
    for (int32_t d = 0; d < 5; d++) CHECK_EQ_INT(sampler_sample_draft(s, l, NULL, d, NULL, NULL), 1);
    sampler_destroy(s);
}

/* With a mask: a draft outside it is always rejected; tokens stay inside it. */
TEST(sampler_draft_respects_the_mask) {
    float l[4] = {3.0f, 1.0f, 1.0f, 0.0f};
    uint64_t allow[1] = {(1u << 1) | (1u << 2)};
    struct sampler *s = make(t, 4, &(struct sampler_params){.temperature = 1.0f, .seed = 3});
    CHECK(s);
    int ones = 0;
    for (int k = 0; k < 2000; k++) {
        int32_t tok = sampler_sample_draft(s, l, allow, 0, NULL, NULL);
        CHECK(tok == 1 || tok == 2);
        ones += tok == 1;
    }
    CHECK(ones > 850 && ones < 1150);
    sampler_destroy(s);
}
