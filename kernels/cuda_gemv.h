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
 * positive multiple of 8, x and w 16-byte aligned. */
bool ckv_gemv_fits(int32_t n, int32_t in, int32_t out, const void *x, const void *w);
/* Whether ckv_gemv_swiglu takes it: as ckv_gemv_fits for out = 2 f, with f
 * a multiple of 8. */
bool ckv_gemv_swiglu_fits(int32_t n, int32_t in, int32_t f, const void *x, const void *w);

/* Y[n][out] = X[n][in] . W[out][in]^T in one kernel on `stream`.
 * CKV_ERR_UNSUPPORTED naming the shape where ckv_gemv_fits says no. W's
 * first loads precede the kernel's wait for the one before it
 * (kernels/cuda_pdl.cuh): W is a weight, not an output of the forward-pass
 * kernel launched just before. */
ckv_status ckv_gemv(float *y, const ckv_bf16 *x, const ckv_bf16 *w, int32_t n, int32_t in,
                    int32_t out, void *stream, ckv_error *err);

/* H[n][f] = bf16(silu(G) * U) with G = X . W[0:f]^T and U = X . W[f:2f]^T
 * (gate rows then up rows, as one projection stores them): the values
 * ckv_k_swiglu writes from the fp32 product, in one kernel. As ckv_gemv
 * otherwise. */
ckv_status ckv_gemv_swiglu(ckv_bf16 *h, const ckv_bf16 *x, const ckv_bf16 *w, int32_t n,
                           int32_t in, int32_t f, void *stream, ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
