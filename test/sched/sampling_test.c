#include "test.h"

#include "sched/sampling.h"

#include <math.h>
#include <stdlib.h>

#define NV 64

static void fill_logits(float *l, unsigned seed) {
    for (int i = 0; i < NV; i++) {
        seed = seed * 1103515245u + 12345u;
        l[i] = (float)((seed >> 16) % 1000) / 100.0f; /* 0 .. 10 */
    }
}

static int32_t argmax_of(const float *l) {
    int32_t b = 0;
    for (int32_t i = 1; i < NV; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

TEST(sampling_greedy_is_argmax_and_smallest_id_on_ties) {
    float l[NV];
    fill_logits(l, 1);
    struct sampling_params p = SAMPLING_PARAMS_DEFAULT;
    p.temperature = 0;
    struct sampler *s = sampler_new(&p, NV, 1, NULL, 0);
    CHECK(s);
    CHECK_EQ_INT(sampler_sample(s, l, 0, NULL), argmax_of(l));
    for (int i = 0; i < NV; i++) l[i] = 1.0f;
    l[9] = l[5] = 3.0f;
    CHECK_EQ_INT(sampler_sample(s, l, 0, NULL), 5);
    sampler_delete(s);
}

TEST(sampling_top_k_1_equals_greedy_whatever_the_seed) {
    float l[NV];
    fill_logits(l, 2);
    struct sampling_params p = SAMPLING_PARAMS_DEFAULT;
    p.temperature = 1.5f;
    p.top_k = 1;
    for (uint64_t seed = 0; seed < 20; seed++) {
        struct sampler *s = sampler_new(&p, NV, seed, NULL, 0);
        CHECK_EQ_INT(sampler_sample(s, l, 0, NULL), argmax_of(l));
        sampler_delete(s);
    }
}

TEST(sampling_same_seed_same_tokens_other_seed_differs) {
    float l[NV];
    for (int i = 0; i < NV; i++) l[i] = 0.0f; /* uniform: every draw is the RNG's */
    struct sampling_params p = SAMPLING_PARAMS_DEFAULT;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    struct sampler *a = sampler_new(&p, NV, 42, NULL, 0), *b = sampler_new(&p, NV, 42, NULL, 0),
                   *c = sampler_new(&p, NV, 43, NULL, 0);
    int same_ab = 0, same_ac = 0, seen[NV] = {0};
    for (int i = 0; i < 64; i++) {
        int32_t ta = sampler_sample(a, l, 0, NULL), tb = sampler_sample(b, l, 0, NULL),
                tc = sampler_sample(c, l, 0, NULL);
        same_ab += ta == tb;
        same_ac += ta == tc;
        seen[ta] = 1;
    }
    int distinct = 0;
    for (int i = 0; i < NV; i++) distinct += seen[i];
    sampler_delete(a);
    sampler_delete(b);
    sampler_delete(c);
    CHECK_EQ_INT(same_ab, 64);
    CHECK(same_ac < 16);
    CHECK(distinct > 20); /* a uniform row is sampled broadly */
}

TEST(sampling_logit_bias_bans_and_forces) {
    float l[NV];
    fill_logits(l, 3);
    int32_t best = argmax_of(l);
    struct sampling_bias bias[2] = {{best, -INFINITY}, {7, 0.0f}};
    struct sampling_params p = SAMPLING_PARAMS_DEFAULT;
    p.bias = bias;
    p.n_bias = 1;
    p.temperature = 0;
    struct sampler *s = sampler_new(&p, NV, 1, NULL, 0);
    CHECK(sampler_sample(s, l, 0, NULL) != best);
    sampler_delete(s);
    bias[0] = (struct sampling_bias){7, 100.0f};
    p.temperature = 0.8f;
    s = sampler_new(&p, NV, 1, NULL, 0);
    CHECK_EQ_INT(sampler_sample(s, l, 0, NULL), 7);
    sampler_delete(s);
}

TEST(sampling_repeat_penalty_moves_off_a_repeated_token) {
    float l[NV];
    for (int i = 0; i < NV; i++) l[i] = 1.0f;
    l[3] = 2.0f;
    l[4] = 1.9f;
    struct sampling_params p = SAMPLING_PARAMS_DEFAULT;
    p.temperature = 0;
    p.repeat_penalty = 1.5f;
    int32_t prompt[] = {3};
    struct sampler *s = sampler_new(&p, NV, 1, prompt, 1);
    CHECK_EQ_INT(sampler_sample(s, l, 0, NULL), 4); /* 2.0 / 1.5 < 1.9 */
    CHECK_EQ_INT(sampler_sample(s, l, 0, NULL), 3); /* both penalised now: 2.0/1.5 > 1.9/1.5 */
    sampler_delete(s);
}

TEST(sampling_logprobs_are_a_distribution) {
    float l[NV];
    fill_logits(l, 4);
    struct sampling_params p = SAMPLING_PARAMS_DEFAULT;
    p.temperature = 0;
    struct sampler *s = sampler_new(&p, NV, 1, NULL, 0);
    struct sched_token_probs pr;
    int32_t tok = sampler_sample(s, l, 5, &pr);
    sampler_delete(s);
    CHECK_EQ_INT(pr.token, tok);
    CHECK_EQ_INT(pr.n_top, 5);
    CHECK_EQ_INT(pr.top_token[0], tok);
    CHECK(fabsf(pr.top_logprob[0] - pr.logprob) < 1e-6f);
    for (int i = 1; i < 5; i++) CHECK(pr.top_logprob[i] <= pr.top_logprob[i - 1]);
    double sum = 0, max = l[tok];
    for (int i = 0; i < NV; i++) sum += exp(l[i] - max);
    CHECK(fabs(pr.logprob - (-log(sum))) < 1e-4);
}
