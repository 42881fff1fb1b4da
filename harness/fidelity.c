#include "fidelity.h"

#include <math.h>

#include "sampler.h"

static double log_sum_exp(const float *x, int32_t n)
{
    double m = -INFINITY, s = 0;
    for (int32_t i = 0; i < n; i++)
        if (x[i] > m)
            m = x[i];
    for (int32_t i = 0; i < n; i++)
        s += exp((double)x[i] - m);
    return m + log(s);
}

double ckv_kl_logits(const float *full, const float *comp, int32_t n)
{
    /* KL = sum_i p_i (log p_i - log q_i), log p_i = x_i - lse(x). */
    double lp = log_sum_exp(full, n), lq = log_sum_exp(comp, n), kl = 0;
    for (int32_t i = 0; i < n; i++) {
        double a = (double)full[i] - lp, b = (double)comp[i] - lq;
        kl += exp(a) * (a - b);
    }
    /* Equal distributions can round to -1e-17. */
    return kl > 0 ? kl : 0;
}

void ckv_fidelity_step(ckv_fidelity *f, const float *full, const float *comp, int32_t n)
{
    f->kl_sum += ckv_kl_logits(full, comp, n);
    f->agree += ckv_argmax(full, n) == ckv_argmax(comp, n);
    f->steps++;
}
