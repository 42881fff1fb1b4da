/* The GEMV behind ckv_k_gemm_via for few rows (kernels/cuda_gemv.cu), for
 * the .cu files: cuda_gemm.cu chooses between it and cuBLAS. */
#ifndef CKV_KERNELS_CUDA_GEMV_H
#define CKV_KERNELS_CUDA_GEMV_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda_kernels.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether ckv_gemv takes the shape: 1 <= n <= CKV_GEMV_MAX_ROWS, in a
 * positive multiple of 8, the input a (x or gu) and w 16-byte aligned. */
bool ckv_gemv_fits(int32_t n, int32_t in, int32_t out, const void *a, const void *w);

/* Y[n][out] = A[n][in] . W[out][in]^T in one kernel on `stream`, where A is
 * x (bf16), or, with x NULL, bf16(silu(g) * u) of gu [n][2 in] (gate then
 * up, as ckv_k_swiglu reads them). CKV_ERR_UNSUPPORTED naming the shape
 * where ckv_gemv_fits says no. W's first loads precede the kernel's wait for
 * the one before it (kernels/cuda_pdl.cuh): W is a weight, not an output of
 * the forward-pass kernel launched just before. */
ckv_status ckv_gemv(float *y, const ckv_bf16 *x, const float *gu, const ckv_bf16 *w, int32_t n,
                    int32_t in, int32_t out, void *stream, ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
