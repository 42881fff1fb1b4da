#include "sampler.h"

#include <math.h>
#include <stdlib.h>

#include "splitmix.h"

ckv_status ckv_sampler_init(ckv_sampler *s, int32_t n_vocab, float temperature, float top_p,
                            uint64_t seed, ckv_error *err)
{
    s->probs = NULL;
    s->order = NULL;
    if (n_vocab <= 0 || !(temperature >= 0) || !isfinite(temperature) || !(top_p > 0) || top_p > 1)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "sampler: temperature %g must be >= 0 and top-p %g in (0, 1]",
                          temperature, top_p);
    s->temperature = temperature;
    s->top_p = top_p;
    s->state = seed;
    s->n_vocab = n_vocab;
    if (temperature > 0) {
        s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
        s->order = malloc((size_t)n_vocab * sizeof *s->order);
        if (!s->probs || !s->order) {
            ckv_sampler_free(s);
            return ckv_errorf(err, CKV_ERR_NOMEM, "sampler: out of memory");
        }
    }
    return CKV_OK;
}

void ckv_sampler_free(ckv_sampler *s)
{
    free(s->probs);
    free(s->order);
    s->probs = NULL;
    s->order = NULL;
}

int32_t ckv_argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static const float *cmp_probs;

static int by_prob_desc(const void *a, const void *b)
{
    float pa = cmp_probs[*(const int32_t *)a], pb = cmp_probs[*(const int32_t *)b];
    if (pa != pb)
        return pa > pb ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

int32_t ckv_sample(ckv_sampler *s, const float *logits)
{
    int32_t n = s->n_vocab;
    if (s->temperature <= 0)
        return ckv_argmax(logits, n);
    float mx = logits[ckv_argmax(logits, n)];
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        s->probs[i] = expf((logits[i] - mx) / s->temperature);
        sum += s->probs[i];
        s->order[i] = i;
    }
    for (int32_t i = 0; i < n; i++)
        s->probs[i] = (float)(s->probs[i] / sum);
    cmp_probs = s->probs;
    qsort(s->order, (size_t)n, sizeof *s->order, by_prob_desc);
    /* Smallest prefix of the sorted distribution whose mass reaches top_p. */
    double mass = 0;
    int32_t keep = 0;
    while (keep < n && mass < s->top_p)
        mass += s->probs[s->order[keep++]];
    double r = (double)(ckv_splitmix64(&s->state) >> 11) * 0x1.0p-53 * mass, acc = 0;
    for (int32_t i = 0; i < keep; i++) {
        acc += s->probs[s->order[i]];
        if (r < acc)
            return s->order[i];
    }
    return s->order[keep - 1];
}
