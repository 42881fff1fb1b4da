// Hopper's tensor memory accelerator (TMA, sm_90a) and the shared-memory
// barriers (mbarrier) it completes: a single thread starts the copy of a
// whole box of a tensor into shared memory, written in the 128-byte swizzle
// of cuda_wgmma.cuh, and the bytes landing count down a barrier's
// transaction count. Also setmaxnreg, with which a warpgroup that only
// issues such copies hands its registers to the warpgroups that compute.
// (PTX ISA: "Tensor copy", "mbarrier", "setmaxnreg".) Callers take these
// paths only where ckv_cuda_wgmma() holds, as for wgmma.
#ifndef CKV_KERNELS_CUDA_TMA_CUH
#define CKV_KERNELS_CUDA_TMA_CUH

#include <cuda.h>
#include <stdint.h>

#include "status.h"

// <cuda.h> must be the toolkit's (the driver API's CUtensorMap), not this
// directory's cuda.h: the build lists the toolkit's include directory first.
#ifndef CUDA_VERSION
#error "cuda_tma.cuh: <cuda.h> resolved to a header other than the CUDA toolkit's"
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CKV_TMA(...) asm volatile(__VA_ARGS__)
#else
#define CKV_TMA(...) __trap()
#endif

// The map of a list of rows of bf16, [heads][capacity][head_dim] as the
// caches hold them (a head's rows contiguous, head_dim a multiple of 64):
// boxes of `rows` rows and 64 dimensions of one head, 128 bytes a row,
// swizzled; rows past capacity read as zeros. A host function (the
// driver's encoder, found through the runtime).
ckv_status ckv_tma_map_rows(CUtensorMap *map, const void *base, int32_t heads, int32_t capacity,
                            int32_t head_dim, int32_t rows, ckv_error *err);

__device__ __forceinline__ void ckv_mbar_init(uint32_t bar, uint32_t count)
{
    CKV_TMA("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Makes the barriers' initialisation visible to the async proxy (the
// copies' completions); a __syncthreads after it to the other threads.
__device__ __forceinline__ void ckv_mbar_init_fence()
{
    CKV_TMA("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// One arrival (release: this thread's earlier shared writes are seen by
// whoever waits on the phase).
__device__ __forceinline__ void ckv_mbar_arrive(uint32_t bar)
{
    CKV_TMA("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// One arrival that also says `bytes` more are to land in this phase.
__device__ __forceinline__ void ckv_mbar_arrive_expect(uint32_t bar, uint32_t bytes)
{
    CKV_TMA("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
            : "memory");
}
// Until the phase of the given parity has completed (acquire).
__device__ __forceinline__ void ckv_mbar_wait(uint32_t bar, uint32_t parity)
{
    CKV_TMA("{\n.reg .pred p;\nWAIT:\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
            "@!p bra WAIT;\n}" ::"r"(bar),
            "r"(parity)
            : "memory");
}
// The box at coordinates (x, y, z) of map into shared memory at dst (1024-
// byte aligned for the swizzle), completing on barrier bar.
__device__ __forceinline__ void ckv_tma_load_3d(uint32_t dst, const CUtensorMap *map, int x,
                                                int y, int z, uint32_t bar)
{
    CKV_TMA("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
            " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
            "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(bar)
            : "memory");
}
// The warpgroup's registers a thread down to (dec) or up to (inc) N.
template <int N>
__device__ __forceinline__ void ckv_regs_dec()
{
    CKV_TMA("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void ckv_regs_inc()
{
    CKV_TMA("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

#undef CKV_TMA

#endif
