// Device discovery: the first CUDA code path, and the pattern every later
// kernel file follows (checked calls, errors returned through ckv_error).
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "cuda.h"

static ckv_status cuda_fail(ckv_error *err, cudaError_t e, const char *what)
{
    return ckv_errorf(err, CKV_ERR_DEVICE, "%s: %s (%s)", what, cudaGetErrorString(e),
                      cudaGetErrorName(e));
}

extern "C" ckv_status ckv_cuda_device_count(int32_t *count, ckv_error *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "cudaGetDeviceCount");
    if (n <= 0)
        return ckv_errorf(err, CKV_ERR_DEVICE, "no CUDA device found");
    *count = n;
    return CKV_OK;
}

extern "C" ckv_status ckv_cuda_peak_bandwidth(int32_t index, double *bytes_per_s, ckv_error *err)
{
    int khz = 0, bits = 0;
    cudaError_t e = cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, index);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "cudaDeviceGetAttribute(memory clock)");
    e = cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, index);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "cudaDeviceGetAttribute(memory bus width)");
    *bytes_per_s = 2.0 * 1e3 * khz * (bits / 8.0);
    return CKV_OK;
}

extern "C" ckv_status ckv_cuda_device_query(int32_t index, ckv_cuda_device *out, ckv_error *err)
{
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, index);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "cudaGetDeviceProperties");
    e = cudaSetDevice(index);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "cudaSetDevice");
    size_t free_b = 0, total_b = 0;
    e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "cudaMemGetInfo");
    memset(out, 0, sizeof *out);
    out->index = index;
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->sm_count = p.multiProcessorCount;
    out->mem_total = total_b;
    out->mem_free = free_b;
    return ckv_cuda_peak_bandwidth(index, &out->peak_bw, err);
}
