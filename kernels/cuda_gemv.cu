// Y[n][out] = A[n][in] . W[out][in]^T for the decoder's small batches
// (n <= CKV_GEMV_MAX_ROWS = 8): bf16 W and A, fp32 accumulation and output.
// At these n the product is bound by reading W: 2 * in * out bytes of W,
// 2 * n * in of A (or 8 * n * in of fp32 gate/up when A is their SwiGLU),
// 4 * n * out of Y written, against 2 * n * in * out FLOPs (at most 8 FLOPs
// per byte of W: far below the H200's ~180 at its bf16 matrix rate, and
// ~16 at its fp32 FMA rate, so the fp32 cores suffice).
//
// Work split. Each W row is read once for all n rows of A: a warp owns R = 4
// rows of W, and each lane takes 16-byte chunks (8 columns) of those rows,
// U = 2 chunks per row in flight and the next group's loads issued before
// the current one's arithmetic (2 x R x U = 16 loads per lane). A block of
// 8 warps holds WARPS / splits row groups of R rows, and the `splits` warps
// of a row group take interleaved chunks of the columns, so that small
// matrices (out = 576) still fill the GPU; per-warp sums are reduced by
// shuffles (R x N values in about R x N shuffles, not 5 R x N), then over
// the splits in shared memory in a fixed order (the result does not depend
// on timing). A is staged in shared memory in tiles of 2048 columns (n x 4
// KB), read once per block from L2: for the fused form this is where the
// SwiGLU of gu is computed, once per block rather than once per warp. One
// template serves both forms; only the tile fill differs, so their outputs
// are bit-identical when the SwiGLU values are.
//
// Launched with programmatic dependent launch (cuda_pdl.cuh): W is static,
// so the first load group of W is issued before the wait for the kernel
// that wrote A, and lands while that one drains.
#include "cuda_bf16.cuh"
#include "cuda_check.h"
#include "cuda_gemv.h"
#include "cuda_pdl.cuh"

namespace {

constexpr int THREADS = 256, WARPS = THREADS / 32;
constexpr int R = 4;       // W rows per warp
constexpr int U = 2;       // chunks per row and lane in one load group
constexpr int TILE = 256;  // chunks (of 8 columns) of A per shared-memory tile

// The 8 bf16 of a 16-byte chunk as floats: element 2j is the low half of word j.
__device__ __forceinline__ void unpack(const uint4 &v, float f[8])
{
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        f[2 * j] = __uint_as_float(u[j] << 16);
        f[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
    }
}

__device__ __forceinline__ uint32_t pair(ckv_bf16 lo, ckv_bf16 hi)
{
    return (uint32_t)lo | (uint32_t)hi << 16;
}

// Chunks [t0, t0 + tc) of every row of A into xs[row][chunk - t0]: copied
// from x, or computed from gu (row i: gate at gu[i][2 in], up at in later).
template <int N, bool SWIGLU>
__device__ __forceinline__ void fill_tile(uint4 (*xs)[TILE], const ckv_bf16 *x, const float *gu,
                                          int in, int t0, int tc)
{
    for (int idx = threadIdx.x; idx < N * tc; idx += THREADS) {
        const int i = idx / tc, p = idx - i * tc;
        const size_t c = (size_t)t0 + p;
        if (SWIGLU) {
            const float4 *g = reinterpret_cast<const float4 *>(gu + (size_t)i * 2 * in) + 2 * c;
            const float4 *u = g + in / 4;
            const float4 g0 = __ldg(g), g1 = __ldg(g + 1), u0 = __ldg(u), u1 = __ldg(u + 1);
            xs[i][p] = make_uint4(pair(ckv_swiglu_bf16(g0.x, u0.x), ckv_swiglu_bf16(g0.y, u0.y)),
                                  pair(ckv_swiglu_bf16(g0.z, u0.z), ckv_swiglu_bf16(g0.w, u0.w)),
                                  pair(ckv_swiglu_bf16(g1.x, u1.x), ckv_swiglu_bf16(g1.y, u1.y)),
                                  pair(ckv_swiglu_bf16(g1.z, u1.z), ckv_swiglu_bf16(g1.w, u1.w)));
        } else {
            xs[i][p] = __ldg(reinterpret_cast<const uint4 *>(x) + (size_t)i * (in / 8) + c);
        }
    }
}

// The W chunks of load group s (steps s .. s + U - 1) of this lane; chunks
// past the tile read as zero and are skipped by accumulate.
__device__ __forceinline__ void load_group(uint4 (&v)[U][R], const uint4 *const (&wr)[R], int t0,
                                           int first, int stride, int s, int tc)
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int p = first + (s + u) * stride;
#pragma unroll
        for (int r = 0; r < R; r++)
            v[u][r] = p < tc ? __ldg(wr[r] + t0 + p) : make_uint4(0, 0, 0, 0);
    }
}

template <int N>
__device__ __forceinline__ void accumulate(float (&acc)[R][N], const uint4 (&v)[U][R],
                                           const uint4 (*xs)[TILE], int first, int stride, int s,
                                           int tc)
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int p = first + (s + u) * stride;
        if (p >= tc)
            continue;
        float wf[R][8];
#pragma unroll
        for (int r = 0; r < R; r++)
            unpack(v[u][r], wf[r]);
#pragma unroll
        for (int i = 0; i < N; i++) {
            float xf[8];
            unpack(xs[i][p], xf);
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int e = 0; e < 8; e++)
                    acc[r][i] = fmaf(wf[r][e], xf[e], acc[r][i]);
        }
    }
}

// Sums M values (a power of two <= 32) over the warp's lanes in M - 1 +
// (5 - log2 M) shuffles rather than 5 M: each step sends the half of its
// values the partner lane keeps, so a lane's count halves. Afterwards v[0]
// of lane l holds the total of value l >> (5 - log2 M).
template <int M, int O>
__device__ __forceinline__ void warp_sums(float (&v)[32], int lane)
{
    if constexpr (O > 0) {
        if constexpr (M > 1) {
            const bool upper = lane & O;
#pragma unroll
            for (int j = 0; j < M / 2; j++) {
                const float send = upper ? v[j] : v[j + M / 2];
                const float keep = upper ? v[j + M / 2] : v[j];
                v[j] = keep + __shfl_xor_sync(0xffffffffu, send, O);
            }
            warp_sums<M / 2, O / 2>(v, lane);
        } else {
            v[0] += __shfl_xor_sync(0xffffffffu, v[0], O);
            warp_sums<1, O / 2>(v, lane);
        }
    }
}

// Block b, warp w: row group b * (WARPS / splits) + w / splits (rows R
// times that), column split w % splits, whose lanes take the tile's chunks
// first = split * 32 + lane, then every stride = splits * 32.
template <int N, bool SWIGLU>
__global__ void __launch_bounds__(THREADS, 2)
    gemv_kernel(float *__restrict__ y, const ckv_bf16 *__restrict__ x,
                const float *__restrict__ gu, const ckv_bf16 *__restrict__ w, int in, int out,
                int splits)
{
    __shared__ uint4 xs[N][TILE];
    __shared__ float part[WARPS][R][N];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int groups = WARPS / splits, row0 = (blockIdx.x * groups + warp / splits) * R;
    const int chunks = in / 8, first = warp % splits * 32 + lane, stride = splits * 32;
    const int steps = TILE / stride;
    const uint4 *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++)  // rows past the end repeat the last row and are not stored
        wr[r] = reinterpret_cast<const uint4 *>(w) + (size_t)min(row0 + r, out - 1) * chunks;
    float acc[R][N];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int i = 0; i < N; i++)
            acc[r][i] = 0.0f;
    for (int t0 = 0; t0 < chunks; t0 += TILE) {
        const int tc = min(TILE, chunks - t0);
        uint4 cur[U][R], next[U][R];
        load_group(cur, wr, t0, first, stride, 0, tc);  // in flight during the fill
        if (t0 == 0) {  // every block gets here: in > 0 (ckv_gemv_fits)
            ckv_pdl_wait();
            ckv_pdl_launch_dependents();
        }
        __syncthreads();  // the previous tile is no longer read
        fill_tile<N, SWIGLU>(xs, x, gu, in, t0, tc);
        __syncthreads();
        for (int s = 0; s < steps; s += U) {
            if (s + U < steps)
                load_group(next, wr, t0, first, stride, s + U, tc);
            accumulate<N>(acc, cur, xs, first, stride, s, tc);
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int r = 0; r < R; r++)
                    cur[u][r] = next[u][r];
        }
    }
    // The R x N sums, N padded to a power of two NP, reduced over the lanes.
    constexpr int NP = N == 1 ? 1 : N == 2 ? 2 : N <= 4 ? 4 : 8, M = R * NP;
    constexpr int SHIFT = M == 4 ? 3 : M == 8 ? 2 : M == 16 ? 1 : 0;
    float v[32];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int i = 0; i < NP; i++)
            v[r * NP + i] = i < N ? acc[r][i] : 0.0f;
    warp_sums<M, 16>(v, lane);
    const int idx = lane >> SHIFT;
    if ((lane & ((1 << SHIFT) - 1)) == 0 && idx % NP < N)
        part[warp][idx / NP][idx % NP] = v[0];
    __syncthreads();
    for (int t = threadIdx.x; t < groups * R * N; t += THREADS) {
        const int g = t / (R * N), r = t / N % R, i = t % N;
        float sum = 0.0f;
        for (int k = 0; k < splits; k++)
            sum += part[g * splits + k][r][i];
        const int row = (blockIdx.x * groups + g) * R + r;
        if (row < out)
            y[(size_t)i * out + row] = sum;
    }
}

template <bool SWIGLU>
cudaError_t launch(int n, int blocks, cudaStream_t st, float *y, const ckv_bf16 *x,
                   const float *gu, const ckv_bf16 *w, int in, int out, int splits)
{
    switch (n) {
#define CKV_GEMV_CASE(N)                                                                   \
    case N:                                                                                \
        return ckv_pdl_launch(gemv_kernel<N, SWIGLU>, blocks, THREADS, 0, st, y, x, gu, w, in, \
                              out, splits);
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

bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

}  // namespace

static_assert(CKV_GEMV_MAX_ROWS == 8, "gemv: launch() instantiates n = 1..8");

extern "C" bool ckv_gemv_fits(int32_t n, int32_t in, int32_t out, const void *a, const void *w)
{
    return n >= 1 && n <= CKV_GEMV_MAX_ROWS && in > 0 && in % 8 == 0 && out > 0 &&
           aligned16(a) && aligned16(w);
}

extern "C" ckv_status ckv_gemv(float *y, const ckv_bf16 *x, const float *gu, const ckv_bf16 *w,
                               int32_t n, int32_t in, int32_t out, void *stream, ckv_error *err)
{
    const void *a = x ? static_cast<const void *>(x) : gu;
    if (!ckv_gemv_fits(n, in, out, a, w))
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "gemv: %d x %d -> %d (%s) not supported: needs 1 <= n <= %d, in a "
                          "multiple of 8, 16-byte aligned input and weights",
                          n, in, out, x ? "bf16 input" : "swiglu input", CKV_GEMV_MAX_ROWS);
    int dev = 0, n_sm = 0;
    CKV_CUDA(cudaGetDevice(&dev));
    CKV_CUDA(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    // Enough blocks to fill the 2 an SM holds (__launch_bounds__) once; the
    // fused form recomputes the SwiGLU in every block, so it takes about one
    // per SM. More splits cost more than the last wave's idle slots: aiming
    // at 3 blocks an SM split SmolLM2's gate_up (576 columns) 8 ways, 72
    // columns a warp, 15% slower than 4 ways and its decode step 7% slower;
    // 6 and 12 an SM made the 8B's qkv and o GEMVs 15-20% slower (runs BW,
    // BX).
    const int64_t target = (int64_t)(x ? 2 : 1) * n_sm;
    int splits = 1;
    int64_t blocks = ((int64_t)out + R * WARPS - 1) / (R * WARPS);
    while (splits < WARPS && blocks < target) {
        splits *= 2;
        const int rows = R * WARPS / splits;
        blocks = ((int64_t)out + rows - 1) / rows;
    }
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    CKV_CUDA(x ? launch<false>(n, (int)blocks, st, y, x, NULL, w, in, out, splits)
               : launch<true>(n, (int)blocks, st, y, NULL, gu, w, in, out, splits));
    return CKV_OK;
}
