/* Dense fp32 products for the CPU reference decoder. OpenMP over rows,
 * vector-friendly inner loops compiled for several x86 ISA levels (chosen at
 * run time), no allocation. Accumulation is in fp32 in a fixed order, so the
 * result does not depend on the thread count. */
#ifndef CKV_MATMUL_H
#define CKV_MATMUL_H

#include <stdint.h>

/* Y[i][j] = alpha * sum_k X[i][k] * W[j][k] (+ bias[j]) for i < n, j < m,
 * k < K: X times W transposed, rows of X, W and Y at strides ldx, ldw, ldy. */
void ckv_matmul_nt(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w,
                   int64_t ldw, const float *bias, int32_t n, int32_t m, int32_t K, float alpha,
                   int n_threads);

/* Y[i][:] = sum_t P[i][t] * V[t][:] for i < n, t < T, row length d. */
void ckv_matmul_nn(float *y, int64_t ldy, const float *p, int64_t ldp, const float *v,
                   int64_t ldv, int32_t n, int32_t T, int32_t d, int n_threads);

#endif
