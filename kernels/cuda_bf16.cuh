// Device helpers that must round exactly alike wherever they are used: the
// bf16 conversion and the SwiGLU value, shared by ckv_k_swiglu
// (cuda_elementwise.cu) and the GEMV that computes its input on the fly
// (cuda_gemv.cu), whose outputs must then be bit-identical.
#ifndef CKV_KERNELS_CUDA_BF16_CUH
#define CKV_KERNELS_CUDA_BF16_CUH

#include <cuda_bf16.h>

#include "cuda_kernels.h"

static __device__ __forceinline__ ckv_bf16 ckv_to_bf16(float f)
{
    __nv_bfloat16 b = __float2bfloat16_rn(f);
    return *reinterpret_cast<ckv_bf16 *>(&b);
}

// bf16(silu(g) * u) with silu(g) = g / (1 + exp(-g)), as the CPU's ckv_swiglu.
static __device__ __forceinline__ ckv_bf16 ckv_swiglu_bf16(float g, float u)
{
    return ckv_to_bf16(g / (1.0f + expf(-g)) * u);
}

#endif
