// Device helpers that must round exactly alike wherever they are used: the
// bf16 conversion and the SwiGLU value, shared by ckv_k_swiglu
// (cuda_elementwise.cu) and the GEMV's SwiGLU epilogue (cuda_gemv.cu), whose
// outputs then differ only where their fp32 sums do; and the KV
// cache's element access, shared by every kernel that reads or writes it.
#ifndef CKV_KERNELS_CUDA_BF16_CUH
#define CKV_KERNELS_CUDA_BF16_CUH

#include <cuda_bf16.h>

#include "cuda_kernels.h"

static __device__ __forceinline__ ckv_bf16 ckv_to_bf16(float f)
{
    __nv_bfloat16 b = __float2bfloat16_rn(f);
    return *reinterpret_cast<ckv_bf16 *>(&b);
}

static __device__ __forceinline__ float ckv_from_bf16(ckv_bf16 b)
{
    return __uint_as_float((uint32_t)b << 16);
}

// A KV cache's keys and values as fp32, whichever type stores them
// (ckv_kv_dtype): element i of p, and its store (bf16: rounded to nearest
// even, as the CPU's ckv_f32_to_bf16).
static __device__ __forceinline__ float ckv_kv_get(const float *p, size_t i)
{
    return p[i];
}
static __device__ __forceinline__ float ckv_kv_get(const ckv_bf16 *p, size_t i)
{
    return ckv_from_bf16(p[i]);
}
static __device__ __forceinline__ void ckv_kv_put(float *p, size_t i, float x)
{
    p[i] = x;
}
static __device__ __forceinline__ void ckv_kv_put(ckv_bf16 *p, size_t i, float x)
{
    p[i] = ckv_to_bf16(x);
}

// bf16(silu(g) * u) with silu(g) = g / (1 + exp(-g)), as the CPU's ckv_swiglu.
static __device__ __forceinline__ ckv_bf16 ckv_swiglu_bf16(float g, float u)
{
    return ckv_to_bf16(g / (1.0f + expf(-g)) * u);
}

#endif
