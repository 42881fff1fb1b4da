// Y[n][out] = X[n][in] . W[out][in]^T for the decoder's small batches
// (n <= CKV_GEMV_MAX_ROWS = 8): bf16 W and X, fp32 accumulation; fp32 Y, or
// with the SwiGLU epilogue bf16 H = silu(X Wg^T) * (X Wu^T) of a gate|up W.
// At these n the product is bound by reading W: 2 * in * out bytes of W
// against 2 * n * in * out FLOPs, at most 8 FLOPs a byte, which at the
// copy rate is 34 TFLOP/s: half the H200's fp32 FMA rate before the bf16
// unpacking, so the products run on the tensor cores (the earlier CUDA-core
// form was instruction-bound at 8 rows, 0.52-0.76x cuBLAS on the 8B's
// matrices), and what is left is the loads.
//
// Products. W is the A operand of mma.m16n8k16 (16 rows a row group), X^T
// the B operand (n <= 8 columns; the columns past n are zeros). A dot
// product does not depend on the order of its k, so each lane loads 16
// contiguous bytes: lane 4 g + t takes columns 32 q + 8 t .. + 7 of W rows
// g and g + 8 and of X row g for chunk q, and the two products of the chunk
// see k-slots {2t, 2t + 1, 2t + 8, 2t + 9} as columns {0, 1, 2, 3} (then
// {4 .. 7}) of the lane's 8. The same map for A and B keeps the sum exact
// up to its order.
//
// Work split. The whole grid is one wave: a block of 16 warps on each SM
// (at most), taking a contiguous run of the row groups, as even as whole
// row groups allow (the 8B's matrices: at most 3% over the mean, against up
// to a third of a wave idle when fixed-size blocks run in waves). A warp's
// task is a run of R row groups (R = 2 for plain products of weights of
// 2^24 elements or more, else 1), which share the X chunks it loads, and
// one slice of `in`: a block with fewer runs than warps splits `in` into S
// = 16 / runs slices so that every warp streams; the slices' sums meet in
// shared memory and are added in slice order (the result does not depend
// on timing). Each lane keeps 4 (chunk, row group) pairs of W loads in
// flight (U = 4 / R chunks of its R groups) and issues the next ones
// before the current products.
//
// SwiGLU epilogue: a row group is gate rows f0 .. f0 + 7 (fragment rows
// 0-7) and up rows F + f0 .. (fragment rows 8-15), so each lane holds the
// gate and up sums of the same (row, n) and writes ckv_swiglu_bf16 of them,
// the value ckv_k_swiglu writes from fp32 gate|up rows.
//
// Launched with programmatic dependent launch (cuda_pdl.cuh): W is static,
// so the first load group of W is issued before the wait for the kernel
// that wrote X, and lands while that one drains.
#include <atomic>
#include <utility>

#include "cuda_bf16.cuh"
#include "cuda_check.h"
#include "cuda_gemv.h"
#include "cuda_mma.cuh"
#include "cuda_pdl.cuh"

namespace {

constexpr int THREADS = 512, WARPS = THREADS / 32;
constexpr int CHUNK = 32;  // columns of one chunk: two m16n8k16 products
constexpr int LOADS = 4;   // row groups x chunks a lane has in flight per load group

// Row group j's W rows for this lane's fragment rows g and g + 8.
struct Rows {
    const uint4 *a, *b;
};

template <bool SWIGLU>
__device__ __forceinline__ Rows rows_of(const ckv_bf16 *w, int group, int g, int in, int out)
{
    const size_t chunks8 = (size_t)in / 8;
    const uint4 *w4 = reinterpret_cast<const uint4 *>(w);
    if (SWIGLU)  // gate row f0 + g, up row out + f0 + g (out = F)
        return {w4 + (size_t)(8 * group + g) * chunks8,
                w4 + (size_t)(out + 8 * group + g) * chunks8};
    // rows past the end repeat the last row and are not stored
    return {w4 + (size_t)min(16 * group + g, out - 1) * chunks8,
            w4 + (size_t)min(16 * group + g + 8, out - 1) * chunks8};
}

// The W chunks q .. q + U - 1 of this lane (column 8 t of each) in each of
// R row groups; chunks at or past q1, columns past `in` and groups not
// `live` read as zero.
template <int R, int U>
__device__ __forceinline__ void load_w(uint4 (&a)[U][R][2], const Rows (&r)[R], int live, int q,
                                       int q1, int t, int in8)
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int c = (q + u) * (CHUNK / 8) + t;
#pragma unroll
        for (int i = 0; i < R; i++) {
            const bool ok = i < live && q + u < q1 && c < in8;
            a[u][i][0] = ok ? __ldg(r[i].a + c) : make_uint4(0, 0, 0, 0);
            a[u][i][1] = ok ? __ldg(r[i].b + c) : make_uint4(0, 0, 0, 0);
        }
    }
}

// The X chunks matching load_w's, one for all R groups; lanes of rows
// g >= N hold zeros.
template <int N, int U>
__device__ __forceinline__ void load_x(uint4 (&b)[U], const uint4 *xr, int g, int q, int q1,
                                       int t, int in8)
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int c = (q + u) * (CHUNK / 8) + t;
        b[u] = g < N && q + u < q1 && c < in8 ? __ldg(xr + c) : make_uint4(0, 0, 0, 0);
    }
}

template <int R, int U>
__device__ __forceinline__ void multiply(float (&acc)[R][4], const uint4 (&a)[U][R][2],
                                         const uint4 (&b)[U])
{
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int i = 0; i < R; i++) {
            ckv_mma_bf16(acc[i], a[u][i][0].x, a[u][i][1].x, a[u][i][0].y, a[u][i][1].y, b[u].x,
                         b[u].y);
            ckv_mma_bf16(acc[i], a[u][i][0].z, a[u][i][1].z, a[u][i][0].w, a[u][i][1].w, b[u].z,
                         b[u].w);
        }
}

// Row group `group`'s sums of this lane: (row g, n 2t), (g, 2t + 1), (g + 8,
// 2t), (g + 8, 2t + 1) of the fragment.
template <int N, bool SWIGLU>
__device__ __forceinline__ void store(float *y, ckv_bf16 *h, const float (&acc)[4], int group,
                                      int g, int t, int out)
{
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int n = 2 * t + e;
        if (n >= N)
            continue;
        if (SWIGLU) {
            h[(size_t)n * out + 8 * group + g] = ckv_swiglu_bf16(acc[e], acc[2 + e]);
        } else {
            const int r0 = 16 * group + g, r1 = r0 + 8;
            if (r0 < out)
                y[(size_t)n * out + r0] = acc[e];
            if (r1 < out)
                y[(size_t)n * out + r1] = acc[2 + e];
        }
    }
}

// Block b takes row groups [b G / grid, (b + 1) G / grid), with G = base
// grid + rem so that 32-bit arithmetic finds them (a 64-bit division before
// the first load lengthened SmolLM2's small GEMVs; runs DI, DJ). A task is R
// consecutive row groups of the block (the last may have fewer) and one
// slice of `in`: task k is groups first + R (k / S) .., slice k % S (chunks
// [s C / S, (s + 1) C / S)), and warp w takes tasks w, w + WARPS, ... The R
// groups share each X chunk a lane loads: at N rows X is N / 16 of W's
// bytes a group, read from L2 by every group, so R > 1 cuts that traffic
// where N is large.
template <int N, bool SWIGLU, int R>
__global__ void __launch_bounds__(THREADS, 1)
    gemv_kernel(float *__restrict__ y, ckv_bf16 *__restrict__ h, const ckv_bf16 *__restrict__ x,
                const ckv_bf16 *__restrict__ w, int in, int out, int base, int rem)
{
    constexpr int U = LOADS / R;
    __shared__ float4 part[WARPS][R][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int blk = blockIdx.x, grid = gridDim.x;
    const int first = blk * base + blk * rem / grid;
    const int count = base + (blk + 1) * rem / grid - blk * rem / grid;
    const int runs = (count + R - 1) / R;
    const int S = max(1, WARPS / runs), tasks = runs * S;
    const int in8 = in / 8, chunks = (in + CHUNK - 1) / CHUNK;
    const uint4 *xr = reinterpret_cast<const uint4 *>(x) + (size_t)min(g, N - 1) * in8;
    uint4 a[U][R][2], b[U];
    Rows r[R];
    int k = warp;
    if (k < tasks) {
        const int s = k % S, j = R * (k / S);
#pragma unroll
        for (int i = 0; i < R; i++)
            r[i] = rows_of<SWIGLU>(w, first + min(j + i, count - 1), g, in, out);
        load_w<R, U>(a, r, count - j, s * chunks / S, (s + 1) * chunks / S, t, in8);
    }
    ckv_pdl_wait();
    ckv_pdl_launch_dependents();
    for (; k < tasks; k += WARPS) {
        const int j = R * (k / S), s = k % S, q0 = s * chunks / S, q1 = (s + 1) * chunks / S;
        const int live = count - j;  // groups of the task inside the block (>= R: all)
#pragma unroll
        for (int i = 0; i < R; i++)
            r[i] = rows_of<SWIGLU>(w, first + min(j + i, count - 1), g, in, out);
        if (k != warp)
            load_w<R, U>(a, r, live, q0, q1, t, in8);
        load_x<N, U>(b, xr, g, q0, q1, t, in8);
        float acc[R][4];
#pragma unroll
        for (int i = 0; i < R; i++)
            acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
        for (int q = q0; q < q1; q += U) {
            uint4 na[U][R][2], nb[U];
            const bool more = q + U < q1;
            if (more) {
                load_w<R, U>(na, r, live, q + U, q1, t, in8);
                load_x<N, U>(nb, xr, g, q + U, q1, t, in8);
            }
            multiply<R, U>(acc, a, b);
            if (more) {
#pragma unroll
                for (int u = 0; u < U; u++) {
#pragma unroll
                    for (int i = 0; i < R; i++)
                        a[u][i][0] = na[u][i][0], a[u][i][1] = na[u][i][1];
                    b[u] = nb[u];
                }
            }
        }
#pragma unroll
        for (int i = 0; i < R; i++) {
            if (i >= live)
                break;
            if (S == 1)
                store<N, SWIGLU>(y, h, acc[i], first + j + i, g, t, out);
            else
                part[k][i][lane] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        }
    }
    if (S == 1)  // block-uniform
        return;
    __syncthreads();
    for (int e = warp; e < runs * R; e += WARPS) {
        const int jr = e / R, i = e % R;
        if (jr * R + i >= count)
            continue;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int s = 0; s < S; s++) {
            const float4 p = part[jr * S + s][i][lane];
            acc[0] += p.x, acc[1] += p.y, acc[2] += p.z, acc[3] += p.w;
        }
        store<N, SWIGLU>(y, h, acc, first + jr * R + i, g, t, out);
    }
}

// The SM's shared memory as small as the block allows, the rest L1. Without
// the preference a block that landed on an SM still configured for the
// decode attention's stages (up to 228 KB of shared memory, a small L1)
// streamed W slower: a launch's last blocks took up to 1.6x the others'
// time and the kernel after them waited (globaltimer stamps a block, H200
// runs DQ, DR); with it no block took over 1.25x its launch's median (DU)
// and the 8B's batch-1 decode steps 1-2% less time (DR, DT). Set for every
// form at the first launch on a device (device_sms): the attribute belongs
// to the device's context.
template <bool SWIGLU, int R, int... N>
cudaError_t carve(std::integer_sequence<int, N...>)
{
    cudaError_t e = cudaSuccess;
    ((e = e != cudaSuccess ? e
                           : cudaFuncSetAttribute(gemv_kernel<N, SWIGLU, R>,
                                                  cudaFuncAttributePreferredSharedMemoryCarveout,
                                                  cudaSharedmemCarveoutMaxL1)),
     ...);
    return e;
}

template <bool SWIGLU, int R>
cudaError_t launch_r(int n, int blocks, cudaStream_t st, float *y, ckv_bf16 *h, const ckv_bf16 *x,
                     const ckv_bf16 *w, int in, int out, int groups)
{
    switch (n) {
#define CKV_GEMV_CASE(N)                                                                    \
    case N:                                                                                 \
        return ckv_pdl_launch(gemv_kernel<N, SWIGLU, R>, blocks, THREADS, 0, st, y, h, x, w, in, \
                              out, groups / blocks, groups % blocks);
        CKV_GEMV_CASE(1)
        CKV_GEMV_CASE(2)
        CKV_GEMV_CASE(3)
        CKV_GEMV_CASE(4)
        CKV_GEMV_CASE(5)
        CKV_GEMV_CASE(6)
        CKV_GEMV_CASE(7)
        CKV_GEMV_CASE(8)
#undef CKV_GEMV_CASE
    }
    return cudaErrorInvalidValue;  // n outside 1..8: ckv_gemv_fits refuses it first
}

// R = 2 for the plain product where the weight has 2^24 elements or more
// (the 8B's qkv, o and down): at 8 rows, with every 8-row product on the
// GEMV, the 8B's batch-8 step took 6.80 -> 6.76 ms at 8K, 13.64 -> 13.54 at
// 32K (run FG). SmolLM2's smaller weights, where a block holds one or two
// row groups, lost 2-5% with it (the second group's products and loads are
// idle, the first's have half the chunks in flight); R = 4 (one chunk in
// flight) lost 25% at the 8B. The SwiGLU form keeps R = 1: with pairs the
// 8B's gate|up took 65.6-66.5 us against 63.0-63.1 standalone (FG), and
// the decode step at batch 1 8K 4.87 against 4.70 ms, batch 8 8K 6.80
// against 6.68, 32K 13.14 against 12.97 (FL, the same call, three times
// each).
template <bool SWIGLU>
cudaError_t launch(int n, int blocks, cudaStream_t st, float *y, ckv_bf16 *h, const ckv_bf16 *x,
                   const ckv_bf16 *w, int in, int out, int groups, bool large)
{
    if constexpr (SWIGLU)
        return launch_r<true, 1>(n, blocks, st, y, h, x, w, in, out, groups);
    else
        return large ? launch_r<false, 2>(n, blocks, st, y, h, x, w, in, out, groups)
                     : launch_r<false, 1>(n, blocks, st, y, h, x, w, in, out, groups);
}

bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

// The current device's SM count, asked (and every form's carveout set) at
// the first launch on it, not at every one. Racing first launches ask and
// set the same values.
constexpr int KNOWN_DEVICES = 64;
std::atomic<int> known_sms[KNOWN_DEVICES];

cudaError_t device_sms(int *n_sm)
{
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return e;
    if (dev < KNOWN_DEVICES && (*n_sm = known_sms[dev].load(std::memory_order_relaxed)) > 0)
        return cudaSuccess;
    using Rows = std::integer_sequence<int, 1, 2, 3, 4, 5, 6, 7, 8>;  // as launch()
    if ((e = cudaDeviceGetAttribute(n_sm, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess ||
        (e = carve<false, 1>(Rows{})) != cudaSuccess || (e = carve<true, 1>(Rows{})) != cudaSuccess ||
        (e = carve<false, 2>(Rows{})) != cudaSuccess)
        return e;
    if (dev < KNOWN_DEVICES)
        known_sms[dev].store(*n_sm, std::memory_order_relaxed);
    return cudaSuccess;
}

// One launch: `groups` row groups over at most one block an SM.
ckv_status run(float *y, ckv_bf16 *h, const ckv_bf16 *x, const ckv_bf16 *w, int32_t n,
               int32_t in, int32_t out, int64_t groups, void *stream, ckv_error *err)
{
    int n_sm = 0;
    CKV_CUDA(device_sms(&n_sm));
    const int blocks = (int)(groups < n_sm ? groups : n_sm);
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    const bool large = (int64_t)in * out >= ((int64_t)1 << 24);  // the plain form's R
    CKV_CUDA(h ? launch<true>(n, blocks, st, NULL, h, x, w, in, out, (int)groups, large)
               : launch<false>(n, blocks, st, y, NULL, x, w, in, out, (int)groups, large));
    return CKV_OK;
}

}  // namespace

static_assert(CKV_GEMV_MAX_ROWS == 8,
              "gemv: launch() and device_sms() take n = 1..8, the mma's n");

extern "C" bool ckv_gemv_fits(int32_t n, int32_t in, int32_t out, const void *x, const void *w)
{
    return n >= 1 && n <= CKV_GEMV_MAX_ROWS && in > 0 && in % 8 == 0 && out > 0 &&
           aligned16(x) && aligned16(w);
}

extern "C" bool ckv_gemv_swiglu_fits(int32_t n, int32_t in, int32_t f, const void *x,
                                     const void *w)
{
    return f % 8 == 0 && f <= INT32_MAX / 2 && ckv_gemv_fits(n, in, 2 * f, x, w);
}

extern "C" ckv_status ckv_gemv(float *y, const ckv_bf16 *x, const ckv_bf16 *w, int32_t n,
                               int32_t in, int32_t out, void *stream, ckv_error *err)
{
    if (!ckv_gemv_fits(n, in, out, x, w))
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "gemv: %d x %d -> %d not supported: needs 1 <= n <= %d, in a "
                          "multiple of 8, 16-byte aligned input and weights",
                          n, in, out, CKV_GEMV_MAX_ROWS);
    return run(y, NULL, x, w, n, in, out, ((int64_t)out + 15) / 16, stream, err);
}

extern "C" ckv_status ckv_gemv_swiglu(ckv_bf16 *h, const ckv_bf16 *x, const ckv_bf16 *w,
                                      int32_t n, int32_t in, int32_t f, void *stream,
                                      ckv_error *err)
{
    if (!ckv_gemv_swiglu_fits(n, in, f, x, w))
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "gemv: %d x %d -> 2 x %d with SwiGLU not supported: needs 1 <= n <= "
                          "%d, in and the SwiGLU width multiples of 8, 16-byte aligned input "
                          "and weights",
                          n, in, f, CKV_GEMV_MAX_ROWS);
    return run(NULL, h, x, w, n, in, f, f / 8, stream, err);
}
