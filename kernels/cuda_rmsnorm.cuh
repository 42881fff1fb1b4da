// The RMSNorm arithmetic shared by ckv_k_residual_rmsnorm
// (cuda_elementwise.cu) and the GEMV that normalizes its input in its loads
// (cuda_gemv.cu): both must give bit-identical bf16 values, so the sum of
// squares is taken in one order by both. A block of CKV_RMS_THREADS threads
// covers a row of E floats as float4s: thread t adds the squares of float4s
// t, t + CKV_RMS_THREADS, ... in that order (ckv_sumsq4, fixed-rounding
// intrinsics, so that no caller's code contracts them differently), then
// ckv_block_sums reduces over the block in a fixed tree.
#ifndef CKV_KERNELS_CUDA_RMSNORM_CUH
#define CKV_KERNELS_CUDA_RMSNORM_CUH

#include "cuda_bf16.cuh"

constexpr int CKV_RMS_THREADS = 256;

// ss plus the squares of v's four values.
static __device__ __forceinline__ float ckv_sumsq4(float ss, const float4 &v)
{
    return __fadd_rn(ss, __fmaf_rn(v.w, v.w,
                                   __fmaf_rn(v.z, v.z, __fmaf_rn(v.y, v.y, __fmul_rn(v.x, v.x)))));
}

// Each of the N values summed over the block (blockDim.x <= 1024); every
// thread gets the totals. Warps by butterfly shuffles, then the warps' sums
// by one more butterfly in every warp.
template <int N>
static __device__ __forceinline__ void ckv_block_sums(float (&v)[N])
{
    __shared__ float part[N][32];
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32, nw = (blockDim.x + 31) / 32;
#pragma unroll
    for (int i = 0; i < N; i++)
        for (int o = 16; o > 0; o >>= 1)
            v[i] += __shfl_xor_sync(0xffffffffu, v[i], o);
    __syncthreads();  // part[] may still be read by a previous call
    if (lane == 0)
#pragma unroll
        for (int i = 0; i < N; i++)
            part[i][w] = v[i];
    __syncthreads();
#pragma unroll
    for (int i = 0; i < N; i++) {
        v[i] = lane < nw ? part[i][lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1)
            v[i] += __shfl_xor_sync(0xffffffffu, v[i], o);
    }
}

// 1 / rms of a row of E values whose squares sum to ss, as the CPU's ckv_rmsnorm.
static __device__ __forceinline__ float ckv_rms_scale(float ss, int E, float eps)
{
    return (float)(1.0 / sqrt((double)ss / E + eps));
}

// One normalized value: bf16(x * r * g), in that order.
static __device__ __forceinline__ ckv_bf16 ckv_rms_bf16(float x, float r, float g)
{
    return ckv_to_bf16(__fmul_rn(__fmul_rn(x, r), g));
}

#endif
