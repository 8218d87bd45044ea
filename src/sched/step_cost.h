/* step_cost.h: a learned model of how long a step takes,
 *   ms = fixed + per_token * n_tokens + per_cell * attn
 * where attn is the attention work of the step: the sum over its rows of the cells each row
 * attends (pos + 1 for a row at position pos of a plain sequence). A prompt chunk attends to all
 * earlier positions, so as a long prompt advances the same chunk size costs more; without the
 * attention term a line in n_tokens lags behind it and the steps of a lone long prompt overrun
 * their target, the more the longer its context (test/sched/sched_test.c:
 * sched_a_lone_long_prompt_stays_within_solo_step_ms_as_its_context_grows).
 *
 * The scheduler observes every completed step (tokens, attention cells, measured milliseconds)
 * and asks two questions: how long should a given step take (for stall detection), and how many
 * prompt tokens fit in a time target (to size prompt chunks). The fit is least squares over
 * exponentially decaying sums, so it follows a machine that slows down or speeds up (thermal
 * throttling, other processes) within a few dozen steps. When the three terms cannot be told
 * apart (too little spread, or noise makes a coefficient negative) it falls back to a line in
 * n_tokens without the attention term, then to a split of per-token and attention cost without
 * the fixed cost, then to the plain average cost per token.
 *
 *   struct step_cost c;
 *   step_cost_init(&c);
 *   step_cost_observe(&c, 300, 300 * 1000 + 300 * 301 / 2.0, 61.0); // 300 tokens after 1000
 *   int32_t n = step_cost_tokens_within(&c, 100.0, 0, 0, 1300);    // prompt tokens from pos 1300
 *   double ms = step_cost_predict_ms(&c, 40, 40 * 41 / 2.0);        // a 40-token step from pos 0
 *
 * Pure arithmetic: no allocation, no clock (the caller measures).
 */
#ifndef UVLM_SCHED_STEP_COST_H
#define UVLM_SCHED_STEP_COST_H

#include <stdint.h>

struct step_cost {
    /* decaying sums over observed steps of 1, n, a (attn), ms and their products */
    double w, sn, sa, sms, snn, sna, saa, snms, sams;
    int64_t observed; /* steps seen */
};

/* The attention cells of n rows of one sequence at positions start_pos .. start_pos + n - 1:
 * n * start_pos + n (n + 1) / 2. */
double step_cost_attn(int32_t start_pos, int32_t n);

void step_cost_init(struct step_cost *c);
/* Record one step of n_tokens (> 0) attending attn cells (>= 0) that took ms (>= 0). */
void step_cost_observe(struct step_cost *c, int32_t n_tokens, double attn, double ms);
/* The fitted coefficients, all >= 0: fixed cost per step, per token, per attention cell;
 * all 0 before any observation. */
void step_cost_model(const struct step_cost *c, double *fixed_ms, double *per_token_ms, double *per_cell_ms);
/* Expected duration of a step of n_tokens attending attn cells; 0 before any observation. */
double step_cost_predict_ms(const struct step_cost *c, int32_t n_tokens, double attn);
/* Largest n (at least 1) such that a step made of base_tokens rows attending base_attn cells
 * (the decodes) plus n prompt tokens of one sequence at positions start_pos .. start_pos + n - 1
 * is predicted to stay within target_ms; the attention term makes this quadratic in n.
 * -1 while nothing has been observed (the caller then uses its full budget); INT32_MAX when
 * tokens cost nothing. */
int32_t step_cost_tokens_within(const struct step_cost *c, double target_ms, int32_t base_tokens, double base_attn,
                                int32_t start_pos);

#endif
