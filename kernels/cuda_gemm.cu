// The one GEMM form of the decoder, shared with the benchmarks so that both
// time the same calls: the GEMV (cuda_gemv.cu) for few rows, cuBLAS for the
// rest and for what the GEMV does not take; either with a bf16, SwiGLU or
// RMSNorm input and a stored or accumulated output.
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

extern "C" bool ckv_k_gemm_takes_gemv(int32_t n, int32_t in, int32_t out, const ckv_gemm_form *a,
                                      const ckv_bf16 *w)
{
    return gemv_faster(n, in, out) && ckv_gemv_fits(n, in, out, a, w);
}

extern "C" ckv_status ckv_k_gemm_via(void *blas, ckv_gemm_path path, float *y,
                                     const ckv_gemm_form *a, ckv_bf16 *hb, const ckv_bf16 *w,
                                     int32_t n, int32_t in, int32_t out, ckv_error *err)
{
    const int inputs = (a->x != NULL) + (a->gu != NULL) + (a->norm_x != NULL);
    if (inputs != 1 || (a->norm_x && !a->norm_w))
        return ckv_errorf(err, CKV_ERR_ARG,
                          "gemm %d x %d -> %d: give exactly one of x, gu and norm_x (with its "
                          "weight norm_w)",
                          n, in, out);
    if (a->norm_x && a->accumulate)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "gemm %d x %d -> %d: an RMSNorm input cannot accumulate into y (it "
                          "reads the rows such a product writes)",
                          n, in, out);
    cublasHandle_t h = static_cast<cublasHandle_t>(blas);
    cudaStream_t stream;
    CKV_CUBLAS(cublasGetStream(h, &stream));
    if (path == CKV_GEMM_GEMV ||
        (path == CKV_GEMM_AUTO && ckv_k_gemm_takes_gemv(n, in, out, a, w)))
        return ckv_gemv(y, a, w, n, in, out, stream, err);
    const ckv_bf16 *x = a->x;
    if (!x) {
        if (!hb)
            return ckv_errorf(err, CKV_ERR_ARG,
                              "gemm %d x %d -> %d: the %s input needs the scratch hb here", n,
                              in, out, a->gu ? "SwiGLU" : "RMSNorm");
        // The RMSNorm kernel writes its rows only when it adds to them.
        ckv_status st =
            a->gu ? ckv_k_swiglu(hb, a->gu, n, in, stream, err)
                  : ckv_k_residual_rmsnorm(const_cast<float *>(a->norm_x), NULL, a->norm_w, hb,
                                           n, in, a->eps, stream, err);
        if (st)
            return st;
        x = hb;
    }
    // Y[n][out] = X[n][in] . W[out][in]^T is, column-major, Y^T = W^T X^T.
    const float one = 1.0f, beta = a->accumulate ? 1.0f : 0.0f;
    CKV_CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, CUDA_R_16BF, in, x,
                            CUDA_R_16BF, in, &beta, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
    return CKV_OK;
}

extern "C" ckv_status ckv_k_gemm(void *blas, float *y, const ckv_bf16 *x, const ckv_bf16 *w,
                                 int32_t n, int32_t in, int32_t out, ckv_error *err)
{
    ckv_gemm_form a = {};
    a.x = x;
    return ckv_k_gemm_via(blas, CKV_GEMM_AUTO, y, &a, NULL, w, n, in, out, err);
}
