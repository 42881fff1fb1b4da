// Device memory helpers behind cuda_kernels.h: every call checked.
#include "cuda_check.h"
#include "cuda_kernels.h"

extern "C" ckv_status ckv_cuda_alloc(void **p, size_t bytes, ckv_error *err)
{
    *p = NULL;
    CKV_CUDA(cudaMalloc(p, bytes ? bytes : 1));
    return CKV_OK;
}

extern "C" void ckv_cuda_free(void *p)
{
    if (p)
        cudaFree(p);
}

extern "C" ckv_status ckv_cuda_upload(void *dst, const void *host_src, size_t bytes, ckv_error *err)
{
    CKV_CUDA(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice));
    return CKV_OK;
}

extern "C" ckv_status ckv_cuda_download(void *host_dst, const void *src, size_t bytes,
                                        ckv_error *err)
{
    CKV_CUDA(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost));
    return CKV_OK;
}

extern "C" ckv_status ckv_cuda_poison(void *p, size_t bytes, ckv_error *err)
{
    CKV_CUDA(cudaMemset(p, 0xff, bytes));
    return CKV_OK;
}

extern "C" ckv_status ckv_cuda_sync(ckv_error *err)
{
    CKV_CUDA(cudaDeviceSynchronize());
    return CKV_OK;
}
