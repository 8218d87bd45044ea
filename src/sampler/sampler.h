/* sampler.h: picking the next token from a row of logits, per sequence.
 *
 * A struct sampler belongs to one sequence (one request): it holds the request's parameters, its
 * RNG (seeded from params.seed: the same seed and the same logits give the same tokens) and the
 * window of the last repeat_last_n tokens for the penalties. The n_vocab buffers a sampling call
 * works in (candidates, token counts) are a struct sampler_scratch: the sampler's own, or one
 * shared by samplers that never sample at the same time (the serving engine shares one among all
 * requests, so a request's sampler is a few KiB). Everything is allocated by sampler_create /
 * sampler_scratch_create; sampler_reset, sampler_accept and sampler_sample never allocate.
 *
 * The chain, in order (as llama.cpp's default):
 *   1. logit_bias: logit[token] += bias (-INFINITY bans the token)
 *   2. penalties over the window: repeat (logit > 0 ? /= : *= repeat_penalty), then
 *      presence (- presence_penalty once) and frequency (- frequency_penalty * count)
 *   3. temperature <= 0: greedy, the largest logit (smallest id on a tie); stop here
 *   4. top_k (k <= 0: off), top_p (>= 1: off), min_p (<= 0: off: keep p >= min_p * p_max)
 *   5. temperature, softmax over what is left, draw with the RNG
 * The sampler is total: whatever the logits and parameters (NaN, infinities, every token banned,
 * min_p > 1), sampler_sample returns a token id in [0, n_vocab). A NaN logit ranks as banned and
 * +inf as the largest float; sampler_last_nonfinite tells the caller the model's row was invalid.
 * Reported log-probs (n_probs > 0): the n_probs most likely tokens of the distribution after
 * step 2 at temperature 1 over the whole vocabulary (what the model says, with the request's
 * bias and penalties; independent of truncation and temperature), plus the chosen token's.
 * With post_sampling, instead those of the distribution the token was drawn from: the
 * candidates left after top_k, top_p and min_p at the temperature (greedy: the chosen token
 * alone, probability 1), at most n_probs of them, most probable first.
 *
 *   struct sampler *s;
 *   sampler_create(&s, n_vocab, 256, NULL);           // NULL: its own scratch
 *   sampler_reset(s, &(struct sampler_params){.temperature = 0.8f, .top_k = 40, .top_p = 0.95f,
 *                      .min_p = 0.05f, .repeat_penalty = 1.1f, .repeat_last_n = 64, .seed = 42});
 *   for (each prompt token) sampler_accept(s, tok);
 *   int32_t tok = sampler_sample(s, logits, probs, &n);   // then sampler_accept(s, tok)
 *   sampler_destroy(s);
 */
#ifndef UVLM_SAMPLER_H
#define UVLM_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

struct sampler_bias {
    int32_t token;
    float bias;           /* added to the logit; -INFINITY bans */
};

struct sampler_params {
    float temperature;       /* <= 0: greedy */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* >= 1 or <= 0: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1 or <= 0: off */
    int32_t repeat_last_n;   /* window of the penalties; <0: the sampler's whole window */
    float presence_penalty;  /* 0: off */
    float frequency_penalty; /* 0: off */
    const struct sampler_bias *logit_bias; /* copied by sampler_reset (at most SAMPLER_MAX_BIAS) */
    int32_t n_logit_bias;
    int32_t n_probs;         /* log-probs to report, <= SAMPLER_MAX_PROBS */
    bool post_sampling;      /* report them after truncation and temperature (see above) */
    uint64_t seed;
};

#define SAMPLER_MAX_BIAS 1024
#define SAMPLER_MAX_PROBS 20

struct sampler_prob {
    int32_t token;
    float logprob;
};

struct sampler;
struct sampler_scratch;

/* Buffers for sampling over n_vocab tokens, to share (see above). 0, -ERR_INVAL or -ERR_NOMEM. */
int sampler_scratch_create(struct sampler_scratch **out, int32_t n_vocab);
void sampler_scratch_destroy(struct sampler_scratch *sc);
/* max_window: the longest repeat_last_n this sampler serves. shared: a scratch of the same n_vocab
 * that outlives the sampler, or NULL for the sampler's own. 0, -ERR_INVAL or -ERR_NOMEM. */
int sampler_create(struct sampler **out, int32_t n_vocab, int32_t max_window, struct sampler_scratch *shared);
void sampler_destroy(struct sampler *s);
/* Start a request: copy the parameters (bias list included), seed the RNG, empty the window.
 * -ERR_INVAL for a bias token outside the vocabulary, too many biases or n_probs. */
int sampler_reset(struct sampler *s, const struct sampler_params *p);
/* Add a token (prompt or generated) to the penalty window. */
void sampler_accept(struct sampler *s, int32_t token);
/* Choose a token from logits[n_vocab] (not modified). probs (may be NULL): room for
 * n_probs + 1 entries: the top n_probs, then, if not among them, the chosen token; *n_out their
 * count. */
int32_t sampler_sample(struct sampler *s, const float *logits, struct sampler_prob *probs, int32_t *n_out);
/* sampler_sample over the tokens of allow only (bit i of allow[i / 64]: a grammar's mask,
 * grammar.h), which must hold at least one token: the others get logit -inf before every step of
 * the chain, and an allowed token that bias or penalties banned stays just above them, so the
 * choice is always an allowed token. Reported log-probs are those of the masked distribution. */
int32_t sampler_sample_masked(struct sampler *s, const float *logits, const uint64_t *allow, struct sampler_prob *probs,
                              int32_t *n_out);
/* Speculative decoding's acceptance rule for a draft token proposed with certainty (its draft
 * distribution q a point mass: a prompt-lookup draft, or a draft model's greedy choice). With p
 * the distribution sampler_sample_masked draws from (after the whole chain, allow may be NULL),
 * draft is kept with probability min(1, p(draft) / q(draft)) = p(draft); otherwise the token is
 * drawn from norm(max(0, p - q)): p without draft, renormalized. The result is distributed exactly
 * as sampler_sample_masked's (not the same draws: a rejection takes a second uniform); greedy
 * gives the largest logit whatever the draft. Returns the token (== draft: accepted); probs as
 * sampler_sample. The caller then sampler_accept's it, as after sampler_sample. */
int32_t sampler_sample_draft(struct sampler *s, const float *logits, const uint64_t *allow, int32_t draft,
                             struct sampler_prob *probs, int32_t *n_out);
/* How many logits of the last sampler_sample call's input were NaN or infinite (0 from a sound
 * model: a caller ends the sequence with -ERR_NUMERIC otherwise). */
int32_t sampler_last_nonfinite(const struct sampler *s);

#endif
