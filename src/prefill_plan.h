/* How a batched prefill (ckv_gpu_prefill_batch, kernels/cuda_decoder.cu)
 * cuts k sequences into passes of at most `rows` tokens: each pass takes
 * the next tokens in sequence order, one piece per sequence it reaches, so
 * a sequence may span passes and its tokens run in order. Plain arithmetic,
 * apart from the CUDA code so that the CPU tests check it. */
#ifndef CKV_PREFILL_PLAN_H
#define CKV_PREFILL_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int32_t seq;   /* the sequence */
    int32_t first; /* its first token in the piece */
    int32_t row;   /* the piece's first row in the pass */
    int32_t n;     /* its tokens */
    bool last;     /* the piece ends its sequence */
} ckv_prefill_piece;

/* The next pass: its pieces into out (room for min(k, rows) of them),
 * starting at sequence *seq's token *at (0, 0 for the first pass), which it
 * advances past them. Returns the number of pieces, 0 once every token has
 * run. n[i] >= 1 and rows >= 1 (checked by the caller). */
int32_t ckv_prefill_pass(const int32_t *n, int32_t k, int32_t rows, int32_t *seq, int32_t *at,
                         ckv_prefill_piece *out);

#ifdef __cplusplus
}
#endif

#endif
