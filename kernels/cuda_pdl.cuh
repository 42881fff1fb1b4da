// Programmatic dependent launch (PDL, sm_90 and later) for the kernels of a
// forward pass: a kernel launched with ckv_pdl_launch may be scheduled while
// the kernel before it in the stream drains, hiding the launch gap between
// the many small kernels of a decode step (also inside a captured graph).
//
// The contract of every kernel launched this way: it calls ckv_pdl_wait()
// before it reads anything an earlier kernel wrote, before it writes
// anything an earlier kernel may still read, and before any early return
// (a block that exits without waiting would let the grid complete before
// its predecessor, and the kernel after it would then no longer wait for
// that one). Reading static data (weights) before the wait is allowed, and
// so is reading what only kernels before the predecessor wrote, when the
// predecessor itself calls ckv_pdl_wait first: those have completed by the
// time it lets this kernel launch (the decode attention's older cache
// entries, cuda_attention_decode_mma.cu).
// ckv_pdl_launch_dependents() right after the wait lets the next kernel's
// blocks be scheduled as SMs free up; they wait in turn, so ordering holds
// along the whole chain. A kernel launched without the attribute (cuBLAS,
// or everything with PDL off) starts after its predecessor completes, and
// both calls are then no-ops: results do not depend on the switch.
#ifndef CKV_KERNELS_CUDA_PDL_CUH
#define CKV_KERNELS_CUDA_PDL_CUH

#include <cuda_runtime.h>

#include <utility>

// Waits until the preceding grid has completed and its memory is visible.
__device__ __forceinline__ void ckv_pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next grid of the stream launch once every block of this one has
// called it (or exited).
__device__ __forceinline__ void ckv_pdl_launch_dependents()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether launches carry the attribute: the process-wide switch
// (ckv_cuda_set_pdl, CKV_PDL) on a device of compute capability 9.0 or more.
bool ckv_pdl_active();

// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream
// serialization when ckv_pdl_active(). Returns the launch's error, read
// and cleared as CKV_CUDA_LAUNCHED does, so that a refused launch is not
// reported again by a later check.
template <typename... Params, typename... Args>
cudaError_t ckv_pdl_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                           cudaStream_t stream, Args &&...args)
{
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = ckv_pdl_active() ? 1 : 0;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
    const cudaError_t last = cudaGetLastError();
    return e != cudaSuccess ? e : last;
}

#endif
