// The decoder's per-token kernels: embedding gather, residual add + RMSNorm,
// the Q/K/V epilogue (bias, q/k norm, RoPE, cache append) and SwiGLU. Each
// mirrors a CPU function of src/decoder_ops.c; the arithmetic follows it
// (RoPE angles in double, silu as g / (1 + exp(-g))). All are launched
// with programmatic dependent launch and wait first (cuda_pdl.cuh).
#include <math.h>

#include "cuda_bf16.cuh"
#include "cuda_check.h"
#include "cuda_kernels.h"
#include "cuda_pdl.cuh"
#include "cuda_segments.cuh"

// Sums over the block of each of R values; every thread gets the results.
// blockDim.x <= 1024. Each sum takes the same tree whatever R is.
template <int R>
static __device__ void block_sums(float (&v)[R])
{
    __shared__ float part[R][32];
#pragma unroll
    for (int r = 0; r < R; r++)
        for (int o = 16; o > 0; o >>= 1)
            v[r] += __shfl_xor_sync(0xffffffffu, v[r], o);
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();  // part[] may still be read by a previous call
    if (lane == 0)
#pragma unroll
        for (int r = 0; r < R; r++)
            part[r][w] = v[r];
    __syncthreads();
    int nw = (blockDim.x + 31) / 32;
#pragma unroll
    for (int r = 0; r < R; r++) {
        v[r] = lane < nw ? part[r][lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1)
            v[r] += __shfl_xor_sync(0xffffffffu, v[r], o);
    }
}

static __device__ float block_sum(float v)
{
    float a[1] = {v};
    block_sums<1>(a);
    return a[0];
}

static cudaStream_t as_stream(void *s)
{
    return static_cast<cudaStream_t>(s);
}

__global__ void embed_kernel(float *x, const float *table, const int32_t *tokens, int32_t E)
{
    ckv_pdl_wait();
    ckv_pdl_launch_dependents();
    const float *src = table + (size_t)tokens[blockIdx.x] * E;
    float *dst = x + (size_t)blockIdx.x * E;
    for (int j = threadIdx.x; j < E; j += blockDim.x)
        dst[j] = src[j];
}

extern "C" ckv_status ckv_k_embed(float *x, const float *table, const int32_t *tokens, int32_t n,
                                  int32_t E, void *stream, ckv_error *err)
{
    CKV_CUDA(ckv_pdl_launch(embed_kernel, n, 256, 0, as_stream(stream), x, table, tokens, E));
    return CKV_OK;
}

// One block per R rows, each thread holding its float4s of each row in
// registers: every load of x and add is issued before any store (a loop
// that stored x[j] between loads could not overlap them, since x and add
// might alias), so a block costs one memory round trip, not E / 256 of them
// (14 us for E = 4096 by ncu, run K, with the per-element loop). Rows of at
// most 4 x RMS_THREADS (one float4 a thread) in chunks of RMS_WIDE_MIN rows
// or more take 4 a block: with one, a 4,096-row SmolLM2 pass (E = 576) ran
// 4,096 blocks of a round trip and two barriers each (21 us, ncu, run BG).
// Rows of at most 16 x RMS_THREADS (the 8B's 4,096) hold 4 float4s a
// thread, not 8: 8 took 88 registers, 2 blocks an SM, and the 8B's
// prefill rows ran at 65% of copy bandwidth, with 4 at 86% (ncu, runs CK,
// CM). Each row's arithmetic is the same in every form. The weights are
// static: their loads are issued before the wait for the kernel that
// wrote x (cuda_pdl.cuh).
constexpr int RMS_THREADS = 256, RMS_VEC = 8;  // float4s per thread: E <= 8192
constexpr int RMS_MID_VEC = 4;                 // E <= 4096
constexpr int RMS_WIDE_ROWS = 4, RMS_WIDE_MIN = 64;

template <int R, int VEC>
__global__ void __launch_bounds__(RMS_THREADS)
    residual_rmsnorm_kernel(float *__restrict__ x, const float *__restrict__ add,
                            const float *__restrict__ w, ckv_bf16 *__restrict__ out, int32_t n,
                            int32_t E, float eps)
{
    const int n4 = E / 4;
    const float4 *w4 = reinterpret_cast<const float4 *>(w);
    float4 g[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        const int j = threadIdx.x + k * RMS_THREADS;
        if (j >= n4)
            break;
        g[k] = w4[j];
    }
    ckv_pdl_wait();
    ckv_pdl_launch_dependents();
    const int row0 = blockIdx.x * R;
    float4 v[R][VEC];
    float ss[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        ss[r] = 0.0f;
        if (row0 + r >= n)
            continue;
        const float4 *xr = reinterpret_cast<const float4 *>(x + (size_t)(row0 + r) * E);
        const float4 *ar =
            add ? reinterpret_cast<const float4 *>(add + (size_t)(row0 + r) * E) : NULL;
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const int j = threadIdx.x + k * RMS_THREADS;
            if (j >= n4)
                break;
            v[r][k] = xr[j];
            if (ar) {
                const float4 a = ar[j];
                v[r][k].x += a.x, v[r][k].y += a.y, v[r][k].z += a.z, v[r][k].w += a.w;
            }
            ss[r] += v[r][k].x * v[r][k].x + v[r][k].y * v[r][k].y + v[r][k].z * v[r][k].z +
                     v[r][k].w * v[r][k].w;
        }
    }
    block_sums<R>(ss);
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (row0 + r >= n)
            break;
        const float rs = (float)(1.0 / sqrt((double)ss[r] / E + eps));
        float4 *xr = reinterpret_cast<float4 *>(x + (size_t)(row0 + r) * E);
        uint2 *o = reinterpret_cast<uint2 *>(out + (size_t)(row0 + r) * E);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const int j = threadIdx.x + k * RMS_THREADS;
            if (j >= n4)
                break;
            const float4 u = v[r][k];
            if (add)
                xr[j] = u;
            o[j] = make_uint2((uint32_t)ckv_to_bf16(u.x * rs * g[k].x) |
                                  (uint32_t)ckv_to_bf16(u.y * rs * g[k].y) << 16,
                              (uint32_t)ckv_to_bf16(u.z * rs * g[k].z) |
                                  (uint32_t)ckv_to_bf16(u.w * rs * g[k].w) << 16);
        }
    }
}

extern "C" ckv_status ckv_k_residual_rmsnorm(float *x, const float *add, const float *w,
                                             ckv_bf16 *out, int32_t n, int32_t E, float eps,
                                             void *stream, ckv_error *err)
{
    if (E % 4 || E > 4 * RMS_VEC * RMS_THREADS)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "rmsnorm: width %d (a multiple of 4, at most %d)", E,
                          4 * RMS_VEC * RMS_THREADS);
    if (n >= RMS_WIDE_MIN && E <= 4 * RMS_THREADS)
        CKV_CUDA(ckv_pdl_launch(residual_rmsnorm_kernel<RMS_WIDE_ROWS, 1>,
                                (n + RMS_WIDE_ROWS - 1) / RMS_WIDE_ROWS, RMS_THREADS, 0,
                                as_stream(stream), x, add, w, out, n, E, eps));
    else if (E <= 4 * RMS_MID_VEC * RMS_THREADS)
        CKV_CUDA(ckv_pdl_launch(residual_rmsnorm_kernel<1, RMS_MID_VEC>, n, RMS_THREADS, 0,
                                as_stream(stream), x, add, w, out, n, E, eps));
    else
        CKV_CUDA(ckv_pdl_launch(residual_rmsnorm_kernel<1, RMS_VEC>, n, RMS_THREADS, 0,
                                as_stream(stream), x, add, w, out, n, E, eps));
    return CKV_OK;
}

// Element i of a cache's keys or values (base: c.k or c.v) set to x, in the
// cache's type.
__device__ __forceinline__ void put_kv(const ckv_k_kv_layer &c, void *base, size_t i, float x)
{
    if (c.dtype == CKV_KV_BF16)
        ckv_kv_put(static_cast<ckv_bf16 *>(base), i, x);
    else
        ckv_kv_put(static_cast<float *>(base), i, x);
}

// One block per (ROWS tokens, SG head slots); slot < H: query, < H + KV:
// key, else value. One thread per dimension, taking each of the block's
// tokens in turn, their loads issued together, and the block's slots one
// after another. A prefill segment of many tokens takes 4 tokens and 8
// slots a block: with one token, a 1,024-token SmolLM2 segment ran 15,360
// blocks, each thread's few dependent loads and one barrier at a time (21
// us, ncu, run AX); with one slot, every slot's block computed the same
// RoPE angles again, a double sincos per thread and token (the 8B's 40
// rotated slots: 40 times). The angles of the block's tokens are computed
// once, by the first half of the threads, into shared memory. A decode step
// takes 1 token and 1 slot a block, since there the step waits on each
// thread's chain (4 tokens a block made SmolLM2's batch-8 step 8% slower,
// run AY2). With a table (device) the rows go to several caches
// (row_cache). Each token's arithmetic is the same in every form, in the
// same order.
// Tokens and slots a block, and from how many tokens.
constexpr int QKV_WIDE_ROWS = 4, QKV_WIDE_SLOTS = 8, QKV_WIDE_MIN = 64;

// Row `row`'s cache layer and, in i, its place among that cache's new
// tokens: without tab, one's row-th; with tab and no start (a decode batch),
// the one new token of tab[row]; with start (ckv_k_segments), its segment's.
__device__ __forceinline__ const ckv_k_kv_layer &row_cache(const ckv_k_kv_layer &one,
                                                           const ckv_k_kv_layer *tab,
                                                           const int32_t *start, int32_t n_tab,
                                                           int row, int &i)
{
    if (!tab) {
        i = row;
        return one;
    }
    const int s = start ? ckv_segment_of(start, n_tab, row) : row;
    i = start ? row - start[s] : 0;
    return tab[s];
}

template <int ROWS, int SG>
__global__ void qkv_post_kernel(float *qkv, ckv_k_qkv_params p, ckv_k_kv_layer one,
                                const ckv_k_kv_layer *tab, const int32_t *start, int32_t n_tab,
                                int32_t n)
{
    // rot [ROWS][head_dim]: a slot's normed values; cs [ROWS][head_dim]:
    // cos of pair j at j, sin at half + j.
    extern __shared__ float sh[];
    const int hd = p.head_dim, H = p.n_head, KV = p.n_head_kv, half = hd / 2;
    float *const rot = sh, *const cs = sh + ROWS * hd;
    const int row0 = blockIdx.x * ROWS, slot0 = blockIdx.y * SG, d = threadIdx.x;
    const int rows = min(ROWS, n - row0), slots = min(SG, H + 2 * KV - slot0);
    const int width = (H + 2 * KV) * hd;
    // The angles need only the positions, which no kernel since the one
    // before the projection wrote: computed before the wait (cuda_pdl.cuh),
    // while the projection drains.
    if (slot0 < H + KV) {  // a query or key slot: RoPE
        if (d < half)
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                if (r >= rows)
                    break;
                int i;  // the token's place among its cache's new tokens
                const ckv_k_kv_layer &c = row_cache(one, tab, start, n_tab, row0 + r, i);
                double sn, co;
                sincos((double)(*c.pos0 + i) * p.inv_freq[d], &sn, &co);
                cs[r * hd + d] = (float)co;
                cs[r * hd + half + d] = (float)sn;
            }
    }
    ckv_pdl_wait();
    ckv_pdl_launch_dependents();
    int j, a, b;
    if (p.rope_type == CKV_ROPE_NEOX) {
        j = d < half ? d : d - half;
        a = j;
        b = j + half;
    } else {
        j = d / 2;
        a = 2 * j;
        b = 2 * j + 1;
    }
    for (int sl = 0; sl < slots; sl++) {
        const int slot = slot0 + sl;
        const bool is_q = slot < H, is_k = !is_q && slot < H + KV;
        const int h = is_q ? 0 : is_k ? slot - H : slot - H - KV;
        float x[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; r++)
            if (r < rows)
                x[r] = qkv[(size_t)(row0 + r) * width + (size_t)slot * hd + d];
        if (!is_q && !is_k) {
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                if (r >= rows)
                    break;
                if (p.bias)
                    x[r] += p.bias[slot * hd + d];
                int i;
                const ckv_k_kv_layer &c = row_cache(one, tab, start, n_tab, row0 + r, i);
                const size_t t = (size_t)h * c.capacity + c.len0[h] + i;
                put_kv(c, c.v, t * hd + d, x[r]);
                if (d == 0) {
                    c.deg[t] = 1.0f;
                    if (c.score)
                        c.score[t] = 0.0f;
                }
            }
            continue;
        }
        if (sl > 0)
            __syncthreads();  // the last slot's rot is read before it is overwritten
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            if (r >= rows)
                break;
            if (p.bias)
                x[r] += p.bias[slot * hd + d];
            const float *norm = is_q ? p.q_norm : p.k_norm;
            if (norm) {
                float ss = block_sum(x[r] * x[r]);
                x[r] = x[r] * (float)(1.0 / sqrt((double)ss / hd + p.eps)) * norm[d];
            }
            rot[r * hd + d] = x[r];
        }
        __syncthreads();  // rot and the angles written
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            if (r >= rows)
                break;
            int i;
            const ckv_k_kv_layer &c = row_cache(one, tab, start, n_tab, row0 + r, i);
            const float cf = cs[r * hd + j], sf = cs[r * hd + half + j];
            const float x0 = rot[r * hd + a], x1 = rot[r * hd + b];
            const float y = d == a ? x0 * cf - x1 * sf : x0 * sf + x1 * cf;
            if (is_q)
                qkv[(size_t)(row0 + r) * width + (size_t)slot * hd + d] = y;
            else
                put_kv(c, c.k, ((size_t)h * c.capacity + c.len0[h] + i) * hd + d, y);
        }
    }
}

static ckv_status launch_qkv_post(float *qkv, int32_t n, const ckv_k_qkv_params *p,
                                  const ckv_k_kv_layer &one, const ckv_k_kv_layer *tab,
                                  const int32_t *start, int32_t n_tab, void *stream,
                                  ckv_error *err)
{
    if (p->head_dim % 2 || p->head_dim > 1024)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED, "qkv_post: head_dim %d unsupported",
                          p->head_dim);
    const bool wide = (!tab || start) && n >= QKV_WIDE_MIN;
    const int rows = wide ? QKV_WIDE_ROWS : 1, sg = wide ? QKV_WIDE_SLOTS : 1;
    const int slots = p->n_head + 2 * p->n_head_kv;
    const dim3 grid((n + rows - 1) / rows, (slots + sg - 1) / sg);
    CKV_CUDA(ckv_pdl_launch(wide ? qkv_post_kernel<QKV_WIDE_ROWS, QKV_WIDE_SLOTS>
                                 : qkv_post_kernel<1, 1>,
                            grid, p->head_dim, 2 * rows * p->head_dim * sizeof(float),
                            as_stream(stream), qkv, *p, one, tab, start, n_tab, n));
    return CKV_OK;
}

extern "C" ckv_status ckv_k_qkv_post(float *qkv, int32_t n, const ckv_k_qkv_params *p,
                                     const ckv_k_kv_layer *c, void *stream, ckv_error *err)
{
    return launch_qkv_post(qkv, n, p, *c, nullptr, nullptr, 0, stream, err);
}

extern "C" ckv_status ckv_k_qkv_post_seqs(float *qkv, int32_t n_seq, const ckv_k_qkv_params *p,
                                          const ckv_k_kv_layer *seqs, void *stream,
                                          ckv_error *err)
{
    return launch_qkv_post(qkv, n_seq, p, ckv_k_kv_layer{}, seqs, nullptr, n_seq, stream, err);
}

extern "C" ckv_status ckv_k_qkv_post_segs(float *qkv, int32_t n, const ckv_k_qkv_params *p,
                                          const ckv_k_segments *sg, void *stream,
                                          ckv_error *err)
{
    return launch_qkv_post(qkv, n, p, ckv_k_kv_layer{}, sg->tab, sg->row, sg->n, stream, err);
}

// V columns a thread: 4 (16-byte loads of gate and up, 8 bytes of output)
// where n_ff and the arrays allow it, else 1. One column a thread read 45
// MB in 37 us (1.2 TB/s) for a 4096-row SmolLM2 pass (ncu, run AX).
template <int V>
__global__ void swiglu_kernel(ckv_bf16 *out, const float *gu, int32_t n, int32_t n_ff)
{
    ckv_pdl_wait();
    ckv_pdl_launch_dependents();
    const size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (idx >= (size_t)n * n_ff)
        return;
    const size_t i = idx / n_ff, j = idx % n_ff;
    const float *g = gu + i * 2 * n_ff + j, *u = g + n_ff;
    if (V == 4) {
        const float4 g4 = *reinterpret_cast<const float4 *>(g),
                     u4 = *reinterpret_cast<const float4 *>(u);
        *reinterpret_cast<uint2 *>(out + idx) =
            make_uint2((uint32_t)ckv_swiglu_bf16(g4.x, u4.x) |
                           (uint32_t)ckv_swiglu_bf16(g4.y, u4.y) << 16,
                       (uint32_t)ckv_swiglu_bf16(g4.z, u4.z) |
                           (uint32_t)ckv_swiglu_bf16(g4.w, u4.w) << 16);
    } else {
        out[idx] = ckv_swiglu_bf16(*g, *u);
    }
}

extern "C" ckv_status ckv_k_swiglu(ckv_bf16 *out, const float *gu, int32_t n, int32_t n_ff,
                                   void *stream, ckv_error *err)
{
    const size_t total = (size_t)n * n_ff;
    const bool wide = n_ff % 4 == 0 && ((uintptr_t)gu & 15) == 0 && ((uintptr_t)out & 7) == 0;
    const size_t threads = wide ? total / 4 : total;
    CKV_CUDA(ckv_pdl_launch(wide ? swiglu_kernel<4> : swiglu_kernel<1>,
                            (unsigned)((threads + 255) / 256), 256, 0, as_stream(stream), out, gu,
                            n, n_ff));
    return CKV_OK;
}

// Block row y: seqs[y]'s lists and position where seqs is given (the
// cache's layer-0 row of a decode batch's table), else len and pos.
__global__ void add_lengths_kernel(int32_t *len, int64_t *pos, const ckv_k_kv_layer *seqs,
                                   int32_t count, int32_t n)
{
    ckv_pdl_wait();
    ckv_pdl_launch_dependents();
    if (seqs) {  // the table's pointers are read-only for the attention kernels only
        len = const_cast<int32_t *>(seqs[blockIdx.y].len0);
        pos = const_cast<int64_t *>(seqs[blockIdx.y].pos0);
    }
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < count)
        len[j] += n;
    if (j == 0)
        *pos += n;
}

extern "C" ckv_status ckv_k_add_lengths(int32_t *len, int32_t count, int64_t *pos, int32_t n,
                                        void *stream, ckv_error *err)
{
    CKV_CUDA(ckv_pdl_launch(add_lengths_kernel, (count + 255) / 256, 256, 0, as_stream(stream), len,
                            pos, (const ckv_k_kv_layer *)NULL, count, n));
    return CKV_OK;
}

extern "C" ckv_status ckv_k_add_lengths_seqs(const ckv_k_kv_layer *seqs, int32_t n_seq,
                                             int32_t count, int32_t n, void *stream,
                                             ckv_error *err)
{
    CKV_CUDA(ckv_pdl_launch(add_lengths_kernel, dim3((count + 255) / 256, n_seq), 256, 0,
                            as_stream(stream), (int32_t *)NULL, (int64_t *)NULL, seqs, count, n));
    return CKV_OK;
}
