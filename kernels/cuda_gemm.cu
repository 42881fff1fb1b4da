// The GEMM forms of the decoder, shared with the benchmarks so that both
// time the same calls: the GEMV (cuda_gemv.cu) for few rows, cuBLAS for the
// rest and for what the GEMV does not take.
#include "cuda_check.h"
#include "cuda_gemv.h"
#include "cuda_kernels.h"

// AUTO's choice: the GEMV at 1 to 8 rows below 2^28 weights, every matrix
// of the 8B's layers and all of SmolLM2's. At 8 rows cuBLAS ran the 8B's
// qkv and o at 71% and 65% of copy (16.9 and 12.4 + 2.7 us a layer, ncu,
// run FF); on the GEMV, its row groups in pairs (cuda_gemv.cu), the 8B's
// batch-8 step took 6.90 -> 6.76 ms at 8K, 13.71 -> 13.54 at 32K (FG). Not
// the 8B's output matrix (2^29): there cuBLAS, at the copy rate, beat the
// GEMV by 7-15% at 8 rows and 9-10% at one (FG, FI; the step at one row,
// FJ). (Until run FG the 8B's matrices took cuBLAS at 8 rows: the GEMV of
// the twelfth session, before its shared-memory preference and the paired
// row groups, read gate_up 12% slower, runs DA to DF.)
static bool use_gemv(ckv_gemm_path path, int32_t n, int32_t in, int32_t out)
{
    return path == CKV_GEMM_GEMV ||
           (path == CKV_GEMM_AUTO &&
            n <= CKV_GEMV_MAX_ROWS && (int64_t)in * out < ((int64_t)1 << 28));
}

// Y[n][out] = X[n][in] . W[out][in]^T is, column-major, Y^T = W^T X^T.
static ckv_status cublas_nt(void *blas, float *y, const ckv_bf16 *x, const ckv_bf16 *w,
                            int32_t n, int32_t in, int32_t out, ckv_error *err)
{
    const float one = 1.0f, zero = 0.0f;
    CKV_CUBLAS(cublasGemmEx(static_cast<cublasHandle_t>(blas), CUBLAS_OP_T, CUBLAS_OP_N, out, n,
                            in, &one, w, CUDA_R_16BF, in, x, CUDA_R_16BF, in, &zero, y,
                            CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return CKV_OK;
}

static ckv_status stream_of(void *blas, cudaStream_t *stream, ckv_error *err)
{
    CKV_CUBLAS(cublasGetStream(static_cast<cublasHandle_t>(blas), stream));
    return CKV_OK;
}

extern "C" ckv_status ckv_k_gemm_via(void *blas, ckv_gemm_path path, float *y, const ckv_bf16 *x,
                                     const ckv_bf16 *w, int32_t n, int32_t in, int32_t out,
                                     ckv_error *err)
{
    cudaStream_t stream;
    ckv_status st = stream_of(blas, &stream, err);
    if (st)
        return st;
    if (use_gemv(path, n, in, out) && (path == CKV_GEMM_GEMV || ckv_gemv_fits(n, in, out, x, w)))
        return ckv_gemv(y, x, w, n, in, out, stream, err);
    return cublas_nt(blas, y, x, w, n, in, out, err);
}

extern "C" ckv_status ckv_k_gemm(void *blas, float *y, const ckv_bf16 *x, const ckv_bf16 *w,
                                 int32_t n, int32_t in, int32_t out, ckv_error *err)
{
    return ckv_k_gemm_via(blas, CKV_GEMM_AUTO, y, x, w, n, in, out, err);
}

extern "C" ckv_status ckv_k_gemm_swiglu_via(void *blas, ckv_gemm_path path, ckv_bf16 *h,
                                            float *gu, const ckv_bf16 *x, const ckv_bf16 *w,
                                            int32_t n, int32_t in, int32_t f, ckv_error *err)
{
    cudaStream_t stream;
    ckv_status st = stream_of(blas, &stream, err);
    if (st)
        return st;
    if (use_gemv(path, n, in, 2 * f) &&
        (path == CKV_GEMM_GEMV || ckv_gemv_swiglu_fits(n, in, f, x, w)))
        return ckv_gemv_swiglu(h, x, w, n, in, f, stream, err);
    if (!gu)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "gemm %d x %d -> 2 x %d with SwiGLU: cuBLAS needs the scratch gu", n, in,
                          f);
    if ((st = cublas_nt(blas, gu, x, w, n, in, 2 * f, err)))
        return st;
    return ckv_k_swiglu(h, gu, n, f, stream, err);
}
