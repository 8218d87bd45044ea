#include "sched/step_cost.h"

#include "common/err.h"

#include <math.h>
#include <stdbool.h>

/* Each new step weighs as much as the last ~10 together: quick to follow a change of machine
 * speed, slow enough that one step delayed by a page fault does not swing the budget. */
#define STEP_COST_DECAY 0.9
/* Two features whose correlation leaves less than this share of the product of their variances
 * cannot be told apart: solving for both would amplify noise. */
#define STEP_COST_MIN_DET 1e-6

double step_cost_attn(int32_t start_pos, int32_t n) {
    double dn = n;
    return dn * start_pos + dn * (dn + 1) / 2;
}

void step_cost_init(struct step_cost *c) { *c = (struct step_cost){0}; }

void step_cost_observe(struct step_cost *c, int32_t n_tokens, double attn, double ms) {
    ASSERT(n_tokens > 0);
    if (!(ms >= 0)) ms = 0; /* also catches NaN from a broken clock */
    if (!(attn >= 0)) attn = 0;
    double n = n_tokens, a = attn, d = STEP_COST_DECAY;
    c->w = c->w * d + 1;
    c->sn = c->sn * d + n;
    c->sa = c->sa * d + a;
    c->sms = c->sms * d + ms;
    c->snn = c->snn * d + n * n;
    c->sna = c->sna * d + n * a;
    c->saa = c->saa * d + a * a;
    c->snms = c->snms * d + n * ms;
    c->sams = c->sams * d + a * ms;
    c->observed++;
}

/* A coefficient whose share of the mean step is below rounding noise counts as 0 (an exact fit
 * of data without that term lands on either side of 0); a really negative one rejects the fit. */
static bool nonneg(double *coef, double mean_feature, double mean_ms) {
    if (*coef >= 0) return true;
    if (-*coef * mean_feature <= 1e-9 * (mean_ms > 1 ? mean_ms : 1)) {
        *coef = 0;
        return true;
    }
    return false;
}

void step_cost_model(const struct step_cost *c, double *fixed_ms, double *per_token_ms, double *per_cell_ms) {
    *fixed_ms = *per_token_ms = *per_cell_ms = 0;
    if (c->observed == 0) return;
    double w = c->w;
    double mn = c->sn / w, ma = c->sa / w, mm = c->sms / w;
    double vnn = c->snn / w - mn * mn, vaa = c->saa / w - ma * ma, vna = c->sna / w - mn * ma;
    double vnm = c->snms / w - mn * mm, vam = c->sams / w - ma * mm;
    /* 1. all three terms: the centred 2x2 system for per_token and per_cell, then the intercept.
     * Needs spread in n (about one token of standard deviation at least) and in attn, not
     * collinear with each other. */
    double det = vnn * vaa - vna * vna;
    if (vnn >= 1.0 && vaa > 0 && det > STEP_COST_MIN_DET * vnn * vaa) {
        double b = (vnm * vaa - vam * vna) / det;
        double k = (vam * vnn - vnm * vna) / det;
        double a = mm - b * mn - k * ma;
        if (nonneg(&b, mn, mm) && nonneg(&k, ma, mm) && nonneg(&a, 1, mm)) {
            *fixed_ms = a;
            *per_token_ms = b;
            *per_cell_ms = k;
            return;
        }
    }
    /* 2. without the fixed cost (it folds into per_token): what is left when every step had the
     * same size (a lone prompt in equal chunks), so only attn tells the steps apart. */
    double unn = c->snn / w, uaa = c->saa / w, una = c->sna / w, unm = c->snms / w, uam = c->sams / w;
    double udet = unn * uaa - una * una;
    if (uaa > 0 && udet > STEP_COST_MIN_DET * unn * uaa) {
        double b = (unm * uaa - uam * una) / udet;
        double k = (uam * unn - unm * una) / udet;
        if (nonneg(&b, mn, mm) && nonneg(&k, ma, mm)) {
            *per_token_ms = b;
            *per_cell_ms = k;
            return;
        }
    }
    /* 3. a line in n without attention. It needs spread in n; without it, or when noise makes
     * the slope non-positive, 4. charge everything per token: that over-estimates small steps,
     * which errs on the side of a responsive loop. */
    if (vnn >= 1.0 && vnm > 0) {
        double slope = vnm / vnn;
        double intercept = mm - slope * mn;
        if (intercept >= 0) {
            *fixed_ms = intercept;
            *per_token_ms = slope;
            return;
        }
    }
    *per_token_ms = mn > 0 ? mm / mn : 0;
}

double step_cost_predict_ms(const struct step_cost *c, int32_t n_tokens, double attn) {
    double a, b, k;
    step_cost_model(c, &a, &b, &k);
    return a + b * n_tokens + k * attn;
}

int32_t step_cost_tokens_within(const struct step_cost *c, double target_ms, int32_t base_tokens, double base_attn,
                                int32_t start_pos) {
    if (c->observed == 0) return -1;
    double a, b, k;
    step_cost_model(c, &a, &b, &k);
    if (b <= 0 && k <= 0) return INT32_MAX;
    /* a + b (B + n) + k (A + n p + n (n + 1) / 2) <= T, i.e. q2 n^2 + q1 n + q0 <= 0 */
    double p = start_pos;
    double q2 = k / 2, q1 = b + k * (p + 0.5), q0 = a + b * base_tokens + k * base_attn - target_ms;
    if (q0 >= 0) return 1;
    /* the positive root in the form that neither cancels nor divides by q2 (which may be 0) */
    double n = -2 * q0 / (q1 + sqrt(q1 * q1 - 4 * q2 * q0));
    if (!(n < INT32_MAX)) return INT32_MAX;
    int32_t r = n >= 1 ? (int32_t)n : 1; /* truncation is floor: n >= 1 */
    /* rounding of the root: the answer is the largest n whose prediction fits */
#define STEP_COST_FITS(m) (q2 * (double)(m) * (m) + q1 * (m) + q0 <= 0)
    for (int i = 0; i < 4 && r > 1 && !STEP_COST_FITS(r); i++) r--;
    for (int i = 0; i < 4 && r < INT32_MAX && STEP_COST_FITS((double)r + 1); i++) r++;
#undef STEP_COST_FITS
    return r;
}
