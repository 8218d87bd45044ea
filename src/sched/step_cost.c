#include "sched/step_cost.h"

#include "common/err.h"

/* Each new step weighs as much as the last ~10 together: quick to follow a change of machine
 * speed, slow enough that one step delayed by a page fault does not swing the budget. */
#define STEP_COST_DECAY 0.9

void step_cost_init(struct step_cost *c) { *c = (struct step_cost){0}; }

void step_cost_observe(struct step_cost *c, int32_t n_tokens, double ms) {
    ASSERT(n_tokens > 0);
    if (!(ms >= 0)) ms = 0; /* also catches NaN from a broken clock */
    double n = n_tokens;
    c->w = c->w * STEP_COST_DECAY + 1;
    c->sn = c->sn * STEP_COST_DECAY + n;
    c->sms = c->sms * STEP_COST_DECAY + ms;
    c->snn = c->snn * STEP_COST_DECAY + n * n;
    c->snms = c->snms * STEP_COST_DECAY + n * ms;
    c->observed++;
}

void step_cost_line(const struct step_cost *c, double *fixed_ms, double *per_token_ms) {
    *fixed_ms = 0;
    *per_token_ms = 0;
    if (c->observed == 0) return;
    double mean_n = c->sn / c->w, mean_ms = c->sms / c->w;
    double var = c->snn / c->w - mean_n * mean_n;
    double cov = c->snms / c->w - mean_n * mean_ms;
    /* A line needs spread in n (at least about one token of standard deviation); without it, or
     * when noise makes the slope non-positive, charge everything per token: that over-estimates
     * small steps, which errs on the side of a responsive loop. */
    if (var >= 1.0 && cov > 0) {
        double slope = cov / var;
        double intercept = mean_ms - slope * mean_n;
        if (intercept >= 0) {
            *fixed_ms = intercept;
            *per_token_ms = slope;
            return;
        }
    }
    *per_token_ms = mean_n > 0 ? mean_ms / mean_n : 0;
}

double step_cost_predict_ms(const struct step_cost *c, int32_t n_tokens) {
    double fixed, per_token;
    step_cost_line(c, &fixed, &per_token);
    return fixed + per_token * n_tokens;
}

int32_t step_cost_tokens_within(const struct step_cost *c, double target_ms) {
    if (c->observed == 0) return -1;
    double fixed, per_token;
    step_cost_line(c, &fixed, &per_token);
    if (per_token <= 0) return INT32_MAX;
    double n = (target_ms - fixed) / per_token; /* truncation below is floor: n >= 1 */
    if (n < 1) return 1;
    if (n > INT32_MAX) return INT32_MAX;
    return (int32_t)n;
}
