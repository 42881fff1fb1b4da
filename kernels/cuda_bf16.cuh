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

// Elements p[0..7] (p aligned to 8 elements) as one lane loads them
// through the read-only path, kept packed until used: two 16-byte loads of
// fp32, one of bf16 (4 registers instead of 8, so a bf16 walk can hold the
// next step's loads while it computes the current one's).
template <typename T>
struct ckv_kv8;
template <>
struct ckv_kv8<float> {
    float4 a, b;
};
template <>
struct ckv_kv8<ckv_bf16> {
    uint4 a;
};

static __device__ __forceinline__ void ckv_kv_ldg8(const float *p, ckv_kv8<float> &r)
{
    r.a = __ldg(reinterpret_cast<const float4 *>(p));
    r.b = __ldg(reinterpret_cast<const float4 *>(p) + 1);
}
static __device__ __forceinline__ void ckv_kv_ldg8(const ckv_bf16 *p, ckv_kv8<ckv_bf16> &r)
{
    r.a = __ldg(reinterpret_cast<const uint4 *>(p));
}
// Zeros: what a lane holds for an entry past its range.
static __device__ __forceinline__ void ckv_kv_zero8(ckv_kv8<float> &r)
{
    r.a = r.b = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}
static __device__ __forceinline__ void ckv_kv_zero8(ckv_kv8<ckv_bf16> &r)
{
    r.a = make_uint4(0, 0, 0, 0);
}
static __device__ __forceinline__ void ckv_kv_unpack8(const ckv_kv8<float> &r, float (&x)[8])
{
    x[0] = r.a.x, x[1] = r.a.y, x[2] = r.a.z, x[3] = r.a.w;
    x[4] = r.b.x, x[5] = r.b.y, x[6] = r.b.z, x[7] = r.b.w;
}
static __device__ __forceinline__ void ckv_kv_unpack8(const ckv_kv8<ckv_bf16> &r, float (&x)[8])
{
    const uint32_t w[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        x[2 * i] = __uint_as_float(w[i] << 16);
        x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

// bf16(silu(g) * u) with silu(g) = g / (1 + exp(-g)), as the CPU's ckv_swiglu.
static __device__ __forceinline__ ckv_bf16 ckv_swiglu_bf16(float g, float u)
{
    return ckv_to_bf16(g / (1.0f + expf(-g)) * u);
}

#endif
