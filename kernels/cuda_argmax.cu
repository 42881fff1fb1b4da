// Greedy next tokens on the device: each row's ckv_argmax (src/sampler.c),
// so that a decode step returns row-count integers instead of copying every
// row's logits to the host (77 rows of a 128256-entry vocabulary are 39.5 MB
// a step).
#include "cuda_check.h"
#include "cuda_kernels.h"
#include "cuda_pdl.cuh"

namespace {

constexpr int THREADS = 1024;
constexpr unsigned FULL = 0xffffffffu;

// (v, i) replaces (bv, bi) when it is a value (i >= 0) that is larger, or
// equal at a lower index: the first index of the maximum, as the CPU's
// left-to-right scan with a strict > finds it. NaNs never enter.
__device__ __forceinline__ void take(float &bv, int32_t &bi, float v, int32_t i)
{
    if (i >= 0 && (bi < 0 || v > bv || (v == bv && i < bi))) {
        bv = v;
        bi = i;
    }
}

__device__ __forceinline__ void warp_best(float &bv, int32_t &bi)
{
    for (int o = 16; o; o >>= 1) {
        const float v = __shfl_down_sync(FULL, bv, o);
        const int32_t i = __shfl_down_sync(FULL, bi, o);
        take(bv, bi, v, i);
    }
}

__global__ void __launch_bounds__(THREADS) argmax_kernel(int32_t *out, const float *x, int32_t n)
{
    ckv_pdl_wait();
    ckv_pdl_launch_dependents();
    __shared__ float sv[THREADS / 32];
    __shared__ int32_t si[THREADS / 32];
    const float *row = x + (size_t)blockIdx.x * n;
    float bv = 0.0f;
    int32_t bi = -1;
    for (int32_t j = threadIdx.x; j < n; j += THREADS) {
        const float v = row[j];
        if (v == v)
            take(bv, bi, v, j);
    }
    warp_best(bv, bi);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (warp)
        return;
    bv = sv[lane];
    bi = si[lane];
    warp_best(bv, bi);
    // The CPU scan starts at index 0 and no value is larger than a NaN
    // there; with no value at all it stays at 0 too.
    if (lane == 0)
        out[blockIdx.x] = row[0] != row[0] || bi < 0 ? 0 : bi;
}

}  // namespace

extern "C" ckv_status ckv_k_argmax_rows(int32_t *out, const float *x, int32_t rows, int32_t n,
                                        void *stream, ckv_error *err)
{
    if (rows < 1 || n < 1)
        return ckv_errorf(err, CKV_ERR_ARG, "argmax: %d rows of %d values", rows, n);
    CKV_CUDA(ckv_pdl_launch(argmax_kernel, rows, THREADS, 0, static_cast<cudaStream_t>(stream),
                            out, x, n));
    return CKV_OK;
}
