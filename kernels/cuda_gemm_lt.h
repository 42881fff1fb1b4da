/* cuBLASLt's candidates for the decoder's cuBLAS product (kernels/
 * cuda_gemm.cu's cublas_nt: Y[n][out] = X[n][in] . W[out][in]^T, bf16 X and
 * W, fp32 Y and accumulation), best first as its heuristic ranks them, each
 * runnable on its own, so that `ckv bench attention --gemm-lt K` can time
 * the tiles cublasGemmEx passes over. The decoder does not take them. */
#ifndef CKV_KERNELS_CUDA_GEMM_LT_H
#define CKV_KERNELS_CUDA_GEMM_LT_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_kernels.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { CKV_GEMM_LT_MAX = 16 };

typedef struct ckv_gemm_lt ckv_gemm_lt;

/* Up to `max` (1 to CKV_GEMM_LT_MAX) candidates for the shape with
 * `workspace` bytes of scratch, which the plan allocates on the current
 * device; CKV_ERR_UNSUPPORTED where the heuristic returns none that it
 * says can run. Callers that must agree on candidate k ask for the same
 * max: the heuristic does not promise that a shorter list is a prefix of a
 * longer one. */
ckv_status ckv_gemm_lt_create(ckv_gemm_lt **out, int32_t n, int32_t in, int32_t out_dim,
                              int32_t max, size_t workspace, ckv_error *err);
void ckv_gemm_lt_free(ckv_gemm_lt *p);
int32_t ckv_gemm_lt_count(const ckv_gemm_lt *p);
/* Candidate k (0-based) in words: its algorithm, tile, stages, split-K
 * count, reduction scheme, cluster and inner shape, swizzle and custom
 * option as cuBLASLt numbers them (-1 where it reports none), and its
 * waves; about 120 characters. */
void ckv_gemm_lt_name(const ckv_gemm_lt *p, int32_t k, char *buf, size_t size);
/* Runs candidate k on `stream` (a cudaStream_t). */
ckv_status ckv_gemm_lt_run(ckv_gemm_lt *p, int32_t k, float *y, const ckv_bf16 *x,
                           const ckv_bf16 *w, void *stream, ckv_error *err);

#ifdef __cplusplus
}
#endif

#endif
