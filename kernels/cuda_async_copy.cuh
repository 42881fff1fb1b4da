// cp.async (sm_80 and later): copies from global into shared memory that
// hold no registers while in flight, so a thread can keep several tiles'
// loads outstanding while it computes on an earlier one. A thread's copies
// are visible to itself after ckv_cp_async_wait; other threads need a
// barrier after that wait. Also the shared-memory room such staged tiles
// need (ckv_allow_smem).
#ifndef CKV_KERNELS_CUDA_ASYNC_COPY_CUH
#define CKV_KERNELS_CUDA_ASYNC_COPY_CUH

#include <cuda_runtime.h>
#include <stdint.h>

// 16 bytes from src to dst. With in false nothing is read (src-size 0) and
// dst is filled with zeros; src must still be an address inside the array.
// dst as a shared-memory address (ckv_smem_addr), so that a loop of copies
// can add offsets to one conversion, or as a generic pointer.
__device__ __forceinline__ void ckv_cp_async16(uint32_t dst, const void *src, bool in)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :
                 : "r"(dst), "l"(src), "r"(in ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ uint32_t ckv_smem_addr(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ckv_cp_async16(void *dst, const void *src, bool in)
{
    ckv_cp_async16(ckv_smem_addr(dst), src, in);
}

// An L2 policy under which the lines a copy brings in leave first: for
// data read once (a stream), so that it does not push out lines still to
// be read again.
__device__ __forceinline__ uint64_t ckv_l2_evict_first()
{
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

// ckv_cp_async16 under an L2 policy (ckv_l2_evict_first).
__device__ __forceinline__ void ckv_cp_async16(void *dst, const void *src, bool in,
                                               uint64_t policy)
{
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;"
                 :
                 : "r"(ckv_smem_addr(dst)), "l"(src), "r"(in ? 16 : 0), "l"(policy)
                 : "memory");
}

// 8 bytes from src to dst; with in false, zeros (as ckv_cp_async16).
__device__ __forceinline__ void ckv_cp_async8(uint32_t dst, const void *src, bool in)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;"
                 :
                 : "r"(dst), "l"(src), "r"(in ? 8 : 0)
                 : "memory");
}
__device__ __forceinline__ void ckv_cp_async8(void *dst, const void *src, bool in)
{
    ckv_cp_async8(ckv_smem_addr(dst), src, in);
}

// 4 bytes from src to dst; with in false, zeros (as ckv_cp_async16).
__device__ __forceinline__ void ckv_cp_async4(void *dst, const void *src, bool in)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                 :
                 : "r"(ckv_smem_addr(dst)), "l"(src), "r"(in ? 4 : 0)
                 : "memory");
}

// Closes the thread's copies issued since the last commit into one group.
__device__ __forceinline__ void ckv_cp_async_commit()
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// Waits until at most N of the thread's groups are still in flight.
template <int N>
__device__ __forceinline__ void ckv_cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Lets kernel take `bytes` of dynamic shared memory (more than the 48 KB a
// launch gets without asking) and prefers the largest shared-memory
// carveout, so that several such blocks fit an SM. The attributes are per
// device, so the kernels' launchers set them before every launch.
template <typename K>
inline cudaError_t ckv_allow_smem(K *kernel, int bytes)
{
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    return e != cudaSuccess ? e
                            : cudaFuncSetAttribute(kernel,
                                                   cudaFuncAttributePreferredSharedMemoryCarveout,
                                                   cudaSharedmemCarveoutMaxShared);
}

#endif
