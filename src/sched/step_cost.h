/* step_cost.h: a learned model of how long a step takes, ms = fixed + per_token * n_tokens.
 *
 * The scheduler observes every completed step (tokens, measured milliseconds) and asks two
 * questions: how long should a step of n tokens take (for stall detection), and how many tokens fit
 * in a time target (to shrink the prompt budget while other sequences wait). The fit is a least
 * squares line over exponentially decaying sums, so it follows a machine that slows down or speeds
 * up (thermal throttling, other processes) within a few dozen steps. Until two different step sizes
 * were seen it falls back to the plain average cost per token.
 *
 *   struct step_cost c;
 *   step_cost_init(&c);
 *   step_cost_observe(&c, 300, 61.0);                  // a 300-token step took 61 ms
 *   int32_t n = step_cost_tokens_within(&c, 100.0);    // tokens that fit in 100 ms (-1: unknown)
 *   double ms = step_cost_predict_ms(&c, 40);          // expected time of a 40-token step
 *
 * Pure arithmetic: no allocation, no clock (the caller measures).
 */
#ifndef UVLM_SCHED_STEP_COST_H
#define UVLM_SCHED_STEP_COST_H

#include <stdint.h>

struct step_cost {
    /* decaying sums over observed steps: weight, n, ms, n*n, n*ms */
    double w, sn, sms, snn, snms;
    int64_t observed; /* steps seen */
};

void step_cost_init(struct step_cost *c);
/* Record one step of n_tokens (> 0) that took ms (>= 0). */
void step_cost_observe(struct step_cost *c, int32_t n_tokens, double ms);
/* Milliseconds per token beyond the fixed cost and the fixed cost per step (both >= 0);
 * 0 and 0 before any observation. */
void step_cost_line(const struct step_cost *c, double *fixed_ms, double *per_token_ms);
/* Expected duration of a step of n_tokens; 0 before any observation. */
double step_cost_predict_ms(const struct step_cost *c, int32_t n_tokens);
/* Largest token count whose predicted duration stays within target_ms (at least 1);
 * -1 while nothing has been observed (the caller then uses its full budget). */
int32_t step_cost_tokens_within(const struct step_cost *c, double target_ms);

#endif
