// Random fills on the device, for synthetic weights, caches and benchmark
// inputs: value i is a hash of (seed, i) (the SplitMix64 finaliser, as
// src/splitmix.h), so the contents do not depend on the launch shape and a
// multi-gigabyte buffer never passes through the host.
#include <cuda_bf16.h>

#include "cuda_check.h"
#include "cuda_kernels.h"

static __device__ __forceinline__ float hash_uniform(uint64_t seed, size_t i, float lo, float hi)
{
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (hi - lo) * (float)(z >> 40) * 0x1.0p-24f;
}

__global__ void fill_f32_kernel(float *p, size_t n, float lo, float hi, uint64_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = hash_uniform(seed, i, lo, hi);
}

__global__ void fill_bf16_kernel(ckv_bf16 *p, size_t n, float lo, float hi, uint64_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        __nv_bfloat16 b = __float2bfloat16_rn(hash_uniform(seed, i, lo, hi));
        p[i] = *reinterpret_cast<ckv_bf16 *>(&b);
    }
}

// A grid-stride launch of at most 64K blocks: enough to fill the chip.
static unsigned fill_blocks(size_t n)
{
    size_t b = (n + 255) / 256;
    return (unsigned)(b < 65536 ? (b ? b : 1) : 65536);
}

extern "C" ckv_status ckv_k_fill_uniform(float *p, size_t n, float lo, float hi, uint64_t seed,
                                         void *stream, ckv_error *err)
{
    fill_f32_kernel<<<fill_blocks(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(p, n, lo, hi,
                                                                                  seed);
    CKV_CUDA_LAUNCHED();
    return CKV_OK;
}

extern "C" ckv_status ckv_k_fill_uniform_bf16(ckv_bf16 *p, size_t n, float lo, float hi,
                                              uint64_t seed, void *stream, ckv_error *err)
{
    fill_bf16_kernel<<<fill_blocks(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(p, n, lo, hi,
                                                                                   seed);
    CKV_CUDA_LAUNCHED();
    return CKV_OK;
}

extern "C" ckv_status ckv_k_fill_uniform_kv(void *p, ckv_kv_dtype dtype, size_t n, float lo,
                                            float hi, uint64_t seed, void *stream, ckv_error *err)
{
    return dtype == CKV_KV_BF16
               ? ckv_k_fill_uniform_bf16(static_cast<ckv_bf16 *>(p), n, lo, hi, seed, stream, err)
               : ckv_k_fill_uniform(static_cast<float *>(p), n, lo, hi, seed, stream, err);
}
