// The one GEMM form of the decoder, shared with the benchmarks so that both
// time the same cuBLAS call.
#include "cuda_check.h"
#include "cuda_kernels.h"

extern "C" ckv_status ckv_k_gemm(void *blas, float *y, const ckv_bf16 *x, const ckv_bf16 *w,
                                 int32_t n, int32_t in, int32_t out, ckv_error *err)
{
    // Y[n][out] = X[n][in] . W[out][in]^T is, column-major, Y^T = W^T X^T.
    const float one = 1.0f, zero = 0.0f;
    CKV_CUBLAS(cublasGemmEx(static_cast<cublasHandle_t>(blas), CUBLAS_OP_T, CUBLAS_OP_N, out, n,
                            in, &one, w, CUDA_R_16BF, in, x, CUDA_R_16BF, in, &zero, y,
                            CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return CKV_OK;
}
