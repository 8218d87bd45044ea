/* sampling.h: pick the next token from one row of logits, the way llama.cpp's server does by
 * default: logit bias -> repetition penalties -> (temperature 0: greedy) top-k -> top-p -> min-p
 * -> temperature -> a draw from the remaining distribution with the choice's own RNG.
 *
 * One sampler per choice of a request (the scheduler's engine_ops.sampler_create): it owns a copy
 * of the parameters, its RNG (seeded with the choice's seed, so a seed reproduces a completion) and
 * the recent tokens the penalties look at (the prompt's tail, then what it generated). Everything
 * is allocated at creation (loop thread); sampling_sample does not allocate (worker thread).
 *
 *   struct sampling_params sp = SAMPLING_PARAMS_DEFAULT;  sp.temperature = 0;  // greedy
 *   struct sampler *s = sampler_new(&sp, n_vocab, seed, prompt, n_prompt);
 *   struct sched_token_probs probs;
 *   int32_t tok = sampler_sample(s, logits_row, 5, &probs);  // + top-5 alternatives, logprobs
 *   sampler_delete(s);
 *
 * Log-probabilities (probs->logprob, top_*) are those of the row after bias and penalties at
 * temperature 1, as OpenAI reports them; they do not depend on the truncation settings.
 */
#ifndef UVLM_SCHED_SAMPLING_H
#define UVLM_SCHED_SAMPLING_H

#include <stdint.h>

#include "sched/sched.h"

struct sampling_bias {
    int32_t token;
    float bias; /* -INFINITY: never sampled */
};

struct sampling_params {
    float temperature;       /* <= 0: greedy (argmax, smallest id on ties) */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off */
    int32_t repeat_last_n;   /* tokens the penalties look back on; -1: up to n_ctx; 0: off */
    float presence_penalty;
    float frequency_penalty;
    const struct sampling_bias *bias; /* copied by sampler_new */
    int32_t n_bias;
    int32_t n_ctx;           /* for repeat_last_n == -1 */
};
#define SAMPLING_PARAMS_DEFAULT { .temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, \
    .repeat_penalty = 1.0f, .repeat_last_n = 64, .n_ctx = 4096 }

struct sampler;

/* NULL when memory runs out. prompt[0..n_prompt) seeds the penalty window. */
struct sampler *sampler_new(const struct sampling_params *p, int32_t n_vocab, uint64_t seed,
                            const int32_t *prompt, int32_t n_prompt);
void sampler_delete(struct sampler *s);

/* Choose a token from logits[0..n_vocab) and remember it as generated. probs (may be NULL) gets
 * the chosen token's logprob and the n_probs (<= SCHED_MAX_PROBS) most probable alternatives. */
int32_t sampler_sample(struct sampler *s, const float *logits, int32_t n_probs,
                       struct sched_token_probs *probs);

#endif
