// The one GEMM form of the decoder, shared with the benchmarks so that both
// time the same calls: the GEMV (cuda_gemv.cu) for few rows, cuBLAS for the
// rest and for what the GEMV does not take.
#include "cuda_check.h"
#include "cuda_gemv.h"
#include "cuda_kernels.h"

// AUTO's choice, from the H200 runs (docs/performance.md, "GEMV"): one row,
// unless the matrix is far wider than long (SmolLM2's output matrix, 576 ->
// 49152: 0.89x of cuBLAS's speed). Not 2-8 rows: alone the GEMV beat cuBLAS
// there on SmolLM2's small matrices (1.0-1.44x) but lost on the 8B ones
// (0.42-0.76x), and inside the decoder's graph even SmolLM2's 8-row step was
// slower with it (1.751 against 1.583 ms at 1K).
static bool gemv_faster(int32_t n, int32_t in, int32_t out)
{
    return n == 1 && out <= 32 * (int64_t)in;
}

extern "C" ckv_status ckv_k_gemm_via(void *blas, ckv_gemm_path path, float *y, const ckv_bf16 *x,
                                     const float *gu, ckv_bf16 *hb, const ckv_bf16 *w, int32_t n,
                                     int32_t in, int32_t out, ckv_error *err)
{
    if ((x == NULL) == (gu == NULL))
        return ckv_errorf(err, CKV_ERR_ARG, "gemm %d x %d -> %d: give exactly one of x and gu",
                          n, in, out);
    cublasHandle_t h = static_cast<cublasHandle_t>(blas);
    cudaStream_t stream;
    CKV_CUBLAS(cublasGetStream(h, &stream));
    if (path == CKV_GEMM_GEMV ||
        (path == CKV_GEMM_AUTO && gemv_faster(n, in, out) &&
         ckv_gemv_fits(n, in, out, x ? (const void *)x : gu, w)))
        return ckv_gemv(y, x, gu, w, n, in, out, stream, err);
    if (gu) {
        if (!hb)
            return ckv_errorf(err, CKV_ERR_ARG,
                              "gemm %d x %d -> %d: the SwiGLU input needs the scratch hb here",
                              n, in, out);
        ckv_status st = ckv_k_swiglu(hb, gu, n, in, stream, err);
        if (st)
            return st;
        x = hb;
    }
    // Y[n][out] = X[n][in] . W[out][in]^T is, column-major, Y^T = W^T X^T.
    const float one = 1.0f, zero = 0.0f;
    CKV_CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, CUDA_R_16BF, in, x,
                            CUDA_R_16BF, in, &zero, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
    return CKV_OK;
}

extern "C" ckv_status ckv_k_gemm(void *blas, float *y, const ckv_bf16 *x, const ckv_bf16 *w,
                                 int32_t n, int32_t in, int32_t out, ckv_error *err)
{
    return ckv_k_gemm_via(blas, CKV_GEMM_AUTO, y, x, NULL, NULL, w, n, in, out, err);
}
