// The tests' entry to ckv_ddiv (cuda_ddiv.cuh): a thread a divisor, its
// reciprocal formed once, then its quotients in turn, as km_feature_kernel
// divides a row.
#include <stdint.h>

#include "cuda.h"
#include "cuda_ddiv.cuh"

static __global__ void ddiv_kernel(const double *a, const double *n, int64_t rows, int32_t per,
                                   double *q)
{
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows)
        return;
    const double d = n[r], y = ckv_ddiv_rcp(d);
    for (int32_t i = 0; i < per; i++)
        q[r * per + i] = ckv_ddiv(a[r * per + i], d, y);
}

extern "C" ckv_status ckv_gpu_ddiv(const double *a, const double *n, int64_t count, int32_t per,
                                   double *q, ckv_error *err)
{
    if (count < 1 || per < 1 || count % per)
        return ckv_errorf(err, CKV_ERR_ARG, "ddiv: %lld quotients in rows of %d",
                          (long long)count, per);
    const int64_t rows = count / per;
    const size_t bytes = (size_t)(2 * count + rows) * sizeof(double);
    double *dev = nullptr;
    cudaError_t e = cudaMalloc(&dev, bytes);
    double *da = dev, *dq = dev + count, *dn = dev + 2 * count;
    if (e == cudaSuccess)
        e = cudaMemcpy(da, a, (size_t)count * sizeof(double), cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(dn, n, (size_t)rows * sizeof(double), cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemset(dq, 0xff, (size_t)count * sizeof(double));
    if (e == cudaSuccess) {
        ddiv_kernel<<<(unsigned)((rows + 255) / 256), 256>>>(da, dn, rows, per, dq);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaMemcpy(q, dq, (size_t)count * sizeof(double), cudaMemcpyDeviceToHost);
    cudaFree(dev);
    if (e != cudaSuccess)
        return ckv_errorf(err, CKV_ERR_DEVICE, "ddiv: %s", cudaGetErrorString(e));
    return CKV_OK;
}
