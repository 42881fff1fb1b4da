/* KL(full || compressed) and top-1 agreement against hand-derived values. */
#include <criterion/criterion.h>
#include <math.h>

#include "fidelity.h"

/* P = softmax(0, ln 3) = (1/4, 3/4), Q = softmax(0, 0) = (1/2, 1/2):
 * KL = 1/4 ln(1/2) + 3/4 ln(3/2) = 0.130812035... */
Test(fidelity, kl_two_tokens_by_hand)
{
    float p[2] = {0.0f, logf(3.0f)}, q[2] = {0.0f, 0.0f};
    cr_assert(fabs(ckv_kl_logits(p, q, 2) - 0.13081203594113694) < 1e-6);
    /* KL is not symmetric: KL(Q || P) = 1/2 ln 2 + 1/2 ln(2/3) = 0.143841036... */
    cr_assert(fabs(ckv_kl_logits(q, p, 2) - 0.14384103622589045) < 1e-6);
}

/* Shifting all logits by a constant leaves the distribution, so KL is 0;
 * large logits must not overflow (log-sum-exp). */
Test(fidelity, kl_shift_invariant_and_large)
{
    float p[3] = {1000.0f, 999.0f, 998.0f}, q[3] = {1.0f, 0.0f, -1.0f};
    cr_assert(fabs(ckv_kl_logits(p, q, 3)) < 1e-9);
}

Test(fidelity, running_means)
{
    ckv_fidelity f = {0};
    float a[2] = {0.0f, logf(3.0f)}, b[2] = {0.0f, 0.0f}, c[2] = {1.0f, 0.0f};
    ckv_fidelity_step(&f, a, a, 2); /* KL 0, both pick token 1 */
    ckv_fidelity_step(&f, a, c, 2); /* full picks 1, compressed 0 */
    ckv_fidelity_step(&f, a, b, 2); /* tie in b: argmax takes the lowest id, 0 */
    cr_assert_eq(f.steps, 3);
    cr_assert_eq(f.agree, 1);
    /* KL(P || softmax(1, 0)): q = (e/(1+e), 1/(1+e)). */
    double q0 = exp(1.0) / (1 + exp(1.0)), q1 = 1 / (1 + exp(1.0));
    double kl_c = 0.25 * log(0.25 / q0) + 0.75 * log(0.75 / q1);
    cr_assert(fabs(f.kl_sum - (0.13081203594113694 + kl_c)) < 1e-6);
}
