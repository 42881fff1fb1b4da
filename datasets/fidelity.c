#include "fidelity.h"

#include <math.h>

#include "sampler.h"

double ckv_logsumexp(const float *x, int32_t n)
{
    if (n <= 0)
        return -INFINITY;
    double m = x[0];
    for (int32_t i = 1; i < n; i++)
        m = x[i] > m ? x[i] : m;
    if (isinf(m))
        return m;
    double s = 0;
    for (int32_t i = 0; i < n; i++)
        s += exp((double)x[i] - m);
    return m + log(s);
}

double ckv_token_logprob(const float *logits, int32_t n, int32_t token)
{
    return (double)logits[token] - ckv_logsumexp(logits, n);
}

double ckv_kl_logits(const float *p_logits, const float *q_logits, int32_t n)
{
    double lp0 = ckv_logsumexp(p_logits, n), lq0 = ckv_logsumexp(q_logits, n), kl = 0;
    for (int32_t i = 0; i < n; i++) {
        double lp = (double)p_logits[i] - lp0;
        double pi = exp(lp);
        if (pi == 0)
            continue;
        kl += pi * (lp - ((double)q_logits[i] - lq0));
    }
    return kl > 0 ? kl : 0;
}

double ckv_perplexity(const double *logprobs, size_t n)
{
    if (!n)
        return NAN;
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += logprobs[i];
    return exp(-s / (double)n);
}

void ckv_fidelity_add(ckv_fidelity *f, const float *full, const float *comp, int32_t n_vocab,
                      int32_t target)
{
    f->n++;
    f->nll_full -= ckv_token_logprob(full, n_vocab, target);
    if (!comp)
        return;
    f->nll_comp -= ckv_token_logprob(comp, n_vocab, target);
    double kl = ckv_kl_logits(full, comp, n_vocab);
    f->kl_sum += kl;
    f->kl_max = kl > f->kl_max ? kl : f->kl_max;
    f->top1_agree += ckv_argmax(full, n_vocab) == ckv_argmax(comp, n_vocab);
}

ckv_fidelity_summary ckv_fidelity_summarize(const ckv_fidelity *f, bool has_comp)
{
    ckv_fidelity_summary s = {.n = f->n, .ppl_full = NAN, .ppl_comp = NAN, .kl_mean = NAN,
                              .kl_max = NAN, .top1 = NAN};
    if (!f->n)
        return s;
    double n = (double)f->n;
    s.ppl_full = exp(f->nll_full / n);
    if (has_comp) {
        s.ppl_comp = exp(f->nll_comp / n);
        s.kl_mean = f->kl_sum / n;
        s.kl_max = f->kl_max;
        s.top1 = (double)f->top1_agree / n;
    }
    return s;
}
