/* Fidelity of a compressed KV cache against the full one, from next-token
 * logits (issue 4 item 5): KL(full || compressed) of the two next-token
 * distributions, top-1 agreement, and perplexity. Pure math in double
 * precision, no model; the teacher-forced runs that produce the logits are
 * in src/teacher_force.h. */
#ifndef CKV_FIDELITY_H
#define CKV_FIDELITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* log(sum_i exp(x_i)), computed as max + log(sum exp(x_i - max)) so that
 * large logits do not overflow. -INFINITY for n == 0. */
double ckv_logsumexp(const float *x, int32_t n);

/* log softmax(logits)[token]. */
double ckv_token_logprob(const float *logits, int32_t n, int32_t token);

/* KL(p || q) = sum_i p_i (log p_i - log q_i) in nats, p = softmax(p_logits),
 * q = softmax(q_logits). Terms with p_i == 0 contribute 0; a q_i == 0
 * where p_i > 0 gives +INFINITY. Never negative (rounding is clamped). */
double ckv_kl_logits(const float *p_logits, const float *q_logits, int32_t n);

/* exp(-mean(logprobs)); NAN for n == 0. */
double ckv_perplexity(const double *logprobs, size_t n);

/* Running totals over teacher-forced steps. */
typedef struct {
    int64_t n;        /* steps */
    double nll_full;  /* sum of -log p_full(target) */
    double nll_comp;  /* sum of -log p_comp(target) */
    double kl_sum, kl_max;
    int64_t top1_agree; /* steps whose argmaxes (sampler.h, ties low) are equal */
} ckv_fidelity;

/* Adds one step: the full and compressed logits for the same position and
 * the token that actually follows. comp may be NULL (full cache only). */
void ckv_fidelity_add(ckv_fidelity *f, const float *full, const float *comp, int32_t n_vocab,
                      int32_t target);

typedef struct {
    int64_t n;
    double ppl_full, ppl_comp; /* exp(mean NLL); ppl_comp NAN without comp */
    double kl_mean, kl_max;    /* nats; NAN without comp */
    double top1;               /* fraction of steps in [0, 1]; NAN without comp */
} ckv_fidelity_summary;

ckv_fidelity_summary ckv_fidelity_summarize(const ckv_fidelity *f, bool has_comp);

#ifdef __cplusplus
}
#endif
#endif
