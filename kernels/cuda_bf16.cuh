// Device helpers that must round exactly alike wherever they are used: the
// bf16 conversion and the SwiGLU value, shared by ckv_k_swiglu
// (cuda_elementwise.cu) and the GEMV that computes its input on the fly
// (cuda_gemv.cu), whose outputs must then be bit-identical; and the KV
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

// Elements p[0..7] through the read-only path: two 16-byte loads of fp32, one
// of bf16 (p aligned to 8 elements).
static __device__ __forceinline__ void ckv_kv_ldg8(const float *p, float (&r)[8])
{
    const float4 a = __ldg(reinterpret_cast<const float4 *>(p));
    const float4 b = __ldg(reinterpret_cast<const float4 *>(p) + 1);
    r[0] = a.x, r[1] = a.y, r[2] = a.z, r[3] = a.w;
    r[4] = b.x, r[5] = b.y, r[6] = b.z, r[7] = b.w;
}
static __device__ __forceinline__ void ckv_kv_ldg8(const ckv_bf16 *p, float (&r)[8])
{
    const uint4 a = __ldg(reinterpret_cast<const uint4 *>(p));
    const uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        r[2 * i] = __uint_as_float(w[i] << 16);
        r[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

// bf16(silu(g) * u) with silu(g) = g / (1 + exp(-g)), as the CPU's ckv_swiglu.
static __device__ __forceinline__ ckv_bf16 ckv_swiglu_bf16(float g, float u)
{
    return ckv_to_bf16(g / (1.0f + expf(-g)) * u);
}

#endif
