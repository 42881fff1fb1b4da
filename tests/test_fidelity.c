/* Fidelity math on vectors small enough to work out by hand: two- and
 * three-token distributions whose KL divergence has a closed form, the
 * same values with logits shifted by 1000 (where exp overflows without the
 * max shift), top-1 agreement with argmax ties, perplexities of uniform
 * and mixed steps. */
#include <criterion/criterion.h>
#include <math.h>

#include "fidelity.h"

#define E 2.718281828459045

/* p = softmax(0, 0) = (1/2, 1/2); q = softmax(0, 1) = (1, e) / (1 + e):
 * KL(p||q) = 1/2 ln((1+e)/2) + 1/2 ln((1+e)/(2e)) = ln((1+e)/2) - 1/2
 * KL(q||p) = ln 2 - ln(1+e) + e/(1+e) */
Test(fidelity, kl_two_tokens_closed_form)
{
    float p[2] = {0, 0}, q[2] = {0, 1};
    double pq = log((1 + E) / 2) - 0.5, qp = log(2.0) - log(1 + E) + E / (1 + E);
    cr_assert_float_eq(ckv_kl_logits(p, q, 2), pq, 1e-12);
    cr_assert_float_eq(ckv_kl_logits(q, p, 2), qp, 1e-12);
    cr_assert_float_eq(pq, 0.1201145069582, 1e-12, "hand value of ln((1+e)/2) - 1/2");
    /* shifted: exp(1000) overflows a double; softmax is shift-invariant */
    float ps[2] = {1000, 1000}, qs[2] = {1000, 1001};
    cr_assert_float_eq(ckv_kl_logits(ps, qs, 2), pq, 1e-12);
    cr_assert_float_eq(ckv_kl_logits(qs, ps, 2), qp, 1e-12);
}

/* p uniform over 3; q = (1/4, 1/4, 1/2): KL = 1/3 (2 ln(4/3) + ln(2/3)) =
 * 1/3 ln(32/27). ln 2 in float is off by about 2e-8, hence the tolerance. */
Test(fidelity, kl_three_tokens)
{
    float p[3] = {0, 0, 0}, q[3] = {0, 0, (float)log(2.0)};
    cr_assert_float_eq(ckv_kl_logits(p, q, 3), log(32.0 / 27.0) / 3, 1e-7);
}

Test(fidelity, kl_identical_and_degenerate)
{
    float a[3] = {0.5f, -2, 3}, b[3] = {5.5f, 3, 8};
    cr_assert_eq(ckv_kl_logits(a, a, 3), 0.0);
    cr_assert_float_eq(ckv_kl_logits(a, b, 3), 0.0, 1e-12, "shifted copy");
    /* p = (0, 1): only the second term counts, KL = ln(1 / (1/2)) */
    float p[2] = {-INFINITY, 0}, q[2] = {0, 0};
    cr_assert_float_eq(ckv_kl_logits(p, q, 2), log(2.0), 1e-12);
    /* q puts no mass where p does */
    cr_assert(isinf(ckv_kl_logits(q, p, 2)));
}

Test(fidelity, logprob_and_logsumexp)
{
    float u[4] = {0, 0, 0, 0}, big[2] = {1000, 1000};
    cr_assert_float_eq(ckv_token_logprob(u, 4, 2), -log(4.0), 1e-12);
    cr_assert_float_eq(ckv_logsumexp(big, 2), 1000 + log(2.0), 1e-9);
    float q[2] = {0, 1};
    cr_assert_float_eq(ckv_token_logprob(q, 2, 1), 1 - log(1 + E), 1e-12);
    cr_assert(isinf(ckv_logsumexp(u, 0)));
}

Test(fidelity, perplexity)
{
    /* exp(-(−ln 2 − ln 8)/2) = exp(ln 4) */
    double lp[2] = {-log(2.0), -log(8.0)}, uni[3] = {-log(5.0), -log(5.0), -log(5.0)};
    cr_assert_float_eq(ckv_perplexity(lp, 2), 4.0, 1e-12);
    cr_assert_float_eq(ckv_perplexity(uni, 3), 5.0, 1e-12);
    cr_assert(isnan(ckv_perplexity(lp, 0)));
}

/* Two steps: (full uniform over 2, comp (1, e)/(1+e), target 0), then
 * (both (1, e)/(1+e), target 1). */
Test(fidelity, accumulator)
{
    ckv_fidelity f = {0};
    float u[2] = {0, 0}, q[2] = {0, 1};
    ckv_fidelity_add(&f, u, q, 2, 0);
    ckv_fidelity_add(&f, q, q, 2, 1);
    ckv_fidelity_summary s = ckv_fidelity_summarize(&f, true);
    cr_assert_eq(s.n, 2);
    double nll_full = log(2.0) + (log(1 + E) - 1);
    double nll_comp = log(1 + E) + (log(1 + E) - 1);
    cr_assert_float_eq(s.ppl_full, exp(nll_full / 2), 1e-12);
    cr_assert_float_eq(s.ppl_comp, exp(nll_comp / 2), 1e-12);
    double kl = log((1 + E) / 2) - 0.5;
    cr_assert_float_eq(s.kl_mean, kl / 2, 1e-12);
    cr_assert_float_eq(s.kl_max, kl, 1e-12);
    /* argmax of (0, 0) is 0 and of (0, 1) is 1: the first step disagrees */
    cr_assert_float_eq(s.top1, 0.5, 1e-15);
    ckv_fidelity g = {0};
    ckv_fidelity_add(&g, u, NULL, 2, 1);
    s = ckv_fidelity_summarize(&g, false);
    cr_assert_float_eq(s.ppl_full, 2.0, 1e-12);
    cr_assert(isnan(s.ppl_comp) && isnan(s.kl_mean) && isnan(s.top1));
}

/* P = softmax(0, ln 3) = (1/4, 3/4), Q = softmax(0, 0) = (1/2, 1/2):
 * KL(P||Q) = 1/4 ln(1/2) + 3/4 ln(3/2) = 0.130812035...;
 * KL(Q||P) = 1/2 ln 2 + 1/2 ln(2/3) = 0.143841036... */
Test(fidelity, kl_quarter_three_quarters)
{
    float p[2] = {0.0f, logf(3.0f)}, q[2] = {0.0f, 0.0f};
    cr_assert(fabs(ckv_kl_logits(p, q, 2) - 0.13081203594113694) < 1e-6);
    cr_assert(fabs(ckv_kl_logits(q, p, 2) - 0.14384103622589045) < 1e-6);
    float big[3] = {1000.0f, 999.0f, 998.0f}, small[3] = {1.0f, 0.0f, -1.0f};
    cr_assert(fabs(ckv_kl_logits(big, small, 3)) < 1e-9, "shifted copy");
}

/* Top-1 agreement counts equal argmaxes; a tie goes to the lowest id. */
Test(fidelity, top1_with_ties)
{
    ckv_fidelity f = {0};
    float a[2] = {0.0f, logf(3.0f)}, b[2] = {0.0f, 0.0f}, c[2] = {1.0f, 0.0f};
    ckv_fidelity_add(&f, a, a, 2, 1); /* KL 0, both pick token 1 */
    ckv_fidelity_add(&f, a, c, 2, 1); /* full picks 1, compressed 0 */
    ckv_fidelity_add(&f, a, b, 2, 1); /* tie in b: argmax takes the lowest id, 0 */
    cr_assert_eq(f.n, 3);
    cr_assert_eq(f.top1_agree, 1);
    double q0 = exp(1.0) / (1 + exp(1.0)), q1 = 1 / (1 + exp(1.0));
    double kl_c = 0.25 * log(0.25 / q0) + 0.75 * log(0.75 / q1);
    cr_assert(fabs(f.kl_sum - (0.13081203594113694 + kl_c)) < 1e-6);
}
