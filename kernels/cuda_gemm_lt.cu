// cuBLASLt's heuristic candidates for the decoder's cuBLAS product (see
// cuda_gemm_lt.h). Column-major as cuda_gemm.cu's cublas_nt: Y^T [out x n]
// = op_T(W^T stored [in x out]) . X^T [in x n].
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_check.h"
#include "cuda_gemm_lt.h"

struct ckv_gemm_lt {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulHeuristicResult_t cand[CKV_GEMM_LT_MAX];
    int32_t count;
    void *ws;
    size_t ws_bytes;
};

static ckv_status plan(ckv_gemm_lt *p, int32_t n, int32_t in, int32_t out, int32_t max,
                       ckv_error *err)
{
    CKV_CUBLAS(cublasLtCreate(&p->lt));
    CKV_CUBLAS(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T;
    CKV_CUBLAS(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                              sizeof ta));
    CKV_CUBLAS(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, in, out, in));
    CKV_CUBLAS(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, in, n, in));
    CKV_CUBLAS(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, out, n, out));
    cublasLtMatmulPreference_t pref;
    CKV_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &p->ws_bytes, sizeof p->ws_bytes);
    cublasLtMatmulHeuristicResult_t got[CKV_GEMM_LT_MAX];
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(p->lt, p->desc, p->a, p->b, p->c, p->c, pref, max,
                                           got, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_NOT_SUPPORTED)
        CKV_CUBLAS(s);
    // Only results whose state is a success are runnable.
    for (int i = 0; s == CUBLAS_STATUS_SUCCESS && i < found; i++)
        if (got[i].state == CUBLAS_STATUS_SUCCESS)
            p->cand[p->count++] = got[i];
    if (p->count < 1)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "cublasLt: no candidate for %d x %d -> %d (bf16 in, fp32 out)", n, in,
                          out);
    return CKV_OK;
}

extern "C" ckv_status ckv_gemm_lt_create(ckv_gemm_lt **out, int32_t n, int32_t in,
                                         int32_t out_dim, int32_t max, size_t workspace,
                                         ckv_error *err)
{
    *out = NULL;
    if (n < 1 || in < 1 || out_dim < 1 || max < 1 || max > CKV_GEMM_LT_MAX)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "cublasLt: %d x %d -> %d with up to %d candidates (1 to %d)", n, in,
                          out_dim, max, CKV_GEMM_LT_MAX);
    ckv_gemm_lt *p = static_cast<ckv_gemm_lt *>(calloc(1, sizeof *p));
    if (!p)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cublasLt: out of host memory");
    p->ws_bytes = workspace;
    cudaError_t e = workspace ? cudaMalloc(&p->ws, workspace) : cudaSuccess;
    ckv_status st = e == cudaSuccess
                        ? plan(p, n, in, out_dim, max, err)
                        : ckv_errorf(err, CKV_ERR_NOMEM, "cublasLt: %zu bytes of workspace: %s",
                                     workspace, cudaGetErrorString(e));
    if (st) {
        ckv_gemm_lt_free(p);
        return st;
    }
    *out = p;
    return CKV_OK;
}

extern "C" void ckv_gemm_lt_free(ckv_gemm_lt *p)
{
    if (!p)
        return;
    if (p->a)
        cublasLtMatrixLayoutDestroy(p->a);
    if (p->b)
        cublasLtMatrixLayoutDestroy(p->b);
    if (p->c)
        cublasLtMatrixLayoutDestroy(p->c);
    if (p->desc)
        cublasLtMatmulDescDestroy(p->desc);
    if (p->lt)
        cublasLtDestroy(p->lt);
    cudaFree(p->ws);
    free(p);
}

extern "C" int32_t ckv_gemm_lt_count(const ckv_gemm_lt *p)
{
    return p->count;
}

// One attribute of a candidate's configuration, -1 where cuBLASLt does not
// report it.
template <typename T>
static long long config(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t a)
{
    T v = 0;
    size_t got = 0;
    return cublasLtMatmulAlgoConfigGetAttribute(algo, a, &v, sizeof v, &got) ==
                       CUBLAS_STATUS_SUCCESS && got == sizeof v
               ? (long long)v
               : -1;
}

extern "C" void ckv_gemm_lt_name(const ckv_gemm_lt *p, int32_t k, char *buf, size_t size)
{
    if (k < 0 || k >= p->count) {
        snprintf(buf, size, "none");
        return;
    }
    // Hopper's candidates may differ only in the cluster, inner shape,
    // swizzle or custom option, so all are named.
    const cublasLtMatmulAlgo_t *a = &p->cand[k].algo;
    snprintf(buf, size,
             "algo %lld tile %lld stages %lld splitK %lld red %lld cluster %lld inner %lld "
             "swizzle %lld custom %lld waves %.2f",
             config<int32_t>(a, CUBLASLT_ALGO_CONFIG_ID),
             config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
             config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
             config<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
             config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
             config<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
             config<uint16_t>(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID),
             config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
             config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
             (double)p->cand[k].wavesCount);
}

extern "C" ckv_status ckv_gemm_lt_run(ckv_gemm_lt *p, int32_t k, float *y, const ckv_bf16 *x,
                                      const ckv_bf16 *w, void *stream, ckv_error *err)
{
    if (k < 0 || k >= p->count)
        return ckv_errorf(err, CKV_ERR_ARG, "cublasLt: candidate %d of %d", k, p->count);
    const float one = 1.0f, zero = 0.0f;
    CKV_CUBLAS(cublasLtMatmul(p->lt, p->desc, &one, w, p->a, x, p->b, &zero, y, p->c, y, p->c,
                              &p->cand[k].algo, p->ws, p->ws_bytes,
                              static_cast<cudaStream_t>(stream)));
    return CKV_OK;
}
