/* Fidelity of a compressed cache to the full one, per decode step under
 * teacher forcing: both see the same tokens (the full run's), and their
 * next-token distributions are compared. */
#ifndef CKV_FIDELITY_H
#define CKV_FIDELITY_H

#include <stdbool.h>
#include <stdint.h>

/* KL(P || Q) in nats, P = softmax(full), Q = softmax(comp), over n logits;
 * computed in double with log-sum-exp so large logits do not overflow. */
double ckv_kl_logits(const float *full, const float *comp, int32_t n);

/* Running means over steps. */
typedef struct {
    double kl_sum;
    int32_t agree;
    int32_t steps;
} ckv_fidelity;

/* Adds one step: its KL and whether the two greedy choices agree. */
void ckv_fidelity_step(ckv_fidelity *f, const float *full, const float *comp, int32_t n);

#endif
