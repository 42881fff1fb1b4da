/* Next-token choice: greedy (argmax, ties to the lowest id) unless a
 * temperature is given, then top-p (nucleus) sampling from a seeded
 * SplitMix64 stream, so a seed reproduces a generation on any machine. */
#ifndef CKV_SAMPLER_H
#define CKV_SAMPLER_H

#include <stdint.h>

#include "status.h"

typedef struct {
    float temperature; /* 0: greedy */
    float top_p;       /* (0, 1] */
    uint64_t state;
    int32_t n_vocab;
    float *probs;      /* [n_vocab] scratch */
    int32_t *order;    /* [n_vocab] scratch */
} ckv_sampler;

ckv_status ckv_sampler_init(ckv_sampler *s, int32_t n_vocab, float temperature, float top_p,
                            uint64_t seed, ckv_error *err);
void ckv_sampler_free(ckv_sampler *s);
int32_t ckv_sample(ckv_sampler *s, const float *logits);
int32_t ckv_argmax(const float *x, int32_t n);

#endif
