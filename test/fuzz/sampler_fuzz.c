/* sampler_fuzz.c: libFuzzer target for the sampler (src/sampler). The input is read as a small
 * vocabulary, the request's parameters (any floats: NaN, infinities, huge penalties, min_p > 1),
 * a logit_bias list, a penalty window of accepted tokens, and rows of logits of any bit pattern.
 * Whatever the input: sampler_reset accepts or refuses, and every sampler_sample returns a token
 * id inside the vocabulary with log-probs that name tokens inside it too (the sampler is total).
 *   make fuzz FUZZ_TARGETS=sampler
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/sampler.h"

struct reader {
    const uint8_t *at, *end;
};

static uint32_t take_u32(struct reader *r) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v = v << 8 | (r->at < r->end ? *r->at++ : 0);
    return v;
}

static float take_float(struct reader *r) {
    uint32_t bits = take_u32(r);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct reader r = {data, data + size};
    int32_t n_vocab = 1 + (int32_t)(take_u32(&r) % 300);
    int32_t max_window = (int32_t)(take_u32(&r) % 70);
    struct sampler_bias bias[16];
    struct sampler_params p = {
        .temperature = take_float(&r), .top_k = (int32_t)take_u32(&r), .top_p = take_float(&r),
        .min_p = take_float(&r), .repeat_penalty = take_float(&r), .repeat_last_n = (int32_t)take_u32(&r),
        .presence_penalty = take_float(&r), .frequency_penalty = take_float(&r),
        .n_logit_bias = (int32_t)(take_u32(&r) % 17), .n_probs = (int32_t)(take_u32(&r) % (SAMPLER_MAX_PROBS + 2)),
        .seed = take_u32(&r), .logit_bias = bias,
    };
    for (int32_t i = 0; i < p.n_logit_bias; i++)
        bias[i] = (struct sampler_bias){(int32_t)(take_u32(&r) % (uint32_t)(n_vocab + 1)), take_float(&r)};
    struct sampler *s;
    if (sampler_create(&s, n_vocab, max_window, NULL) != 0) return 0;
    if (sampler_reset(s, &p) != 0) { /* refused: a bias token outside the vocabulary, too many probs */
        sampler_destroy(s);
        return 0;
    }
    int32_t n_accept = (int32_t)(take_u32(&r) % 100);
    for (int32_t i = 0; i < n_accept; i++) sampler_accept(s, (int32_t)(take_u32(&r) % (uint32_t)n_vocab));
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    if (!logits) abort();
    for (int rows = 0; rows < 3 && r.at < r.end; rows++) {
        for (int32_t v = 0; v < n_vocab; v++) logits[v] = take_float(&r);
        struct sampler_prob probs[SAMPLER_MAX_PROBS + 1];
        int32_t n = -1;
        int32_t tok = sampler_sample(s, logits, probs, &n);
        if (tok < 0 || tok >= n_vocab) abort();
        if (n < 0 || n > p.n_probs + 1) abort();
        for (int32_t i = 0; i < n; i++)
            if (probs[i].token < 0 || probs[i].token >= n_vocab) abort();
        if (sampler_last_nonfinite(s) < 0 || sampler_last_nonfinite(s) > n_vocab) abort();
        sampler_accept(s, tok);
    }
    free(logits);
    sampler_destroy(s);
    return 0;
}
