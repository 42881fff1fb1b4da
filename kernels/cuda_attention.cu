// Attention over the compressed-cache lists in fp32 on CUDA cores: a block
// takes 32 queries of one query head and one range of the list (split-KV),
// streams the keys and values through shared memory in tiles of 32 entries
// and keeps an online softmax (running max m, sum l, unnormalised output)
// per query; a second kernel merges the ranges. Causal masking follows the
// cache: query i sees len0[h] + i + 1 entries. A decode (one query per
// sequence, GQA groups up to 8) takes the partial and score passes of
// cuda_attention_decode.cu instead, which read each range once for all
// query heads of a KV head (its score pass reads the logits its partial
// pass kept, not the keys); any other call over one cache (a prefill, or
// one query with a group over 8) takes the tensor-core partial pass of
// cuda_attention_prefill.cu, and over a cache that tracks H2O scores its
// score pass too (the scores against the merged max and sum must come from
// the products these came from). This kernel stays for batches of
// sequences with GQA groups over 8, with its fp32 score pass. Every kernel
// here is launched with programmatic dependent launch and waits first
// (cuda_pdl.cuh).
#include <math.h>

#include "cuda.h"
#include "cuda_attention_decode.h"
#include "cuda_attention_prefill.h"
#include "cuda_bf16.cuh"
#include "cuda_check.h"
#include "cuda_kernels.h"
#include "cuda_pdl.cuh"

namespace {

constexpr int BQ = 32;   // queries per block
constexpr int TPQ = 4;   // threads per query; thread `part` owns dims part, part + 4, ...
constexpr int BK = 32;   // entries per shared-memory tile
// Shortest range per split: a prefill block streams tiles of 32 entries; a
// decode block takes 32 (head_dim 128) or 64 entries per step.
constexpr int MIN_SPLIT = 128, MIN_SPLIT_DECODE = 64;
// Blocks per SM the prefill plan aims at, rounded up: what the TF32 kernel
// fits at head_dim 64 (3 fit at 128; rounding down instead cost the 8B
// prefill 17 %, run P). The decode plan asks CUDA how many decode blocks
// fit and plans whole waves of them.
constexpr int PER_SM = 4;

struct Args {
    const float *q;
    int32_t q_stride, n, H, KV;
    ckv_k_kv_layer c;
    const ckv_k_kv_layer *seqs;  // device, [n]: row i is sequence i's one query; NULL: all rows use c
    float scale;
    bool bias;
    int32_t split_len;
    float *part_o;   // [splits][n][H][HD] unnormalised outputs
    float *part_ml;  // [splits][n][H][2] running max and sum
    float *ml;       // [n][H][2] merged max and sum (for the score pass)
};

// Scores of one tile for the calling thread's query: q.k (+ log deg), -inf
// where the entry is past the range or not visible to the query. The 4
// threads of a query hold the same values afterwards.
template <int HD>
__device__ __forceinline__ void tile_scores(float (&s)[BK], const float (&q)[HD / TPQ],
                                            const float (*ks)[HD], const float *ld, int part,
                                            int t0, int t_end, int visible)
{
#pragma unroll
    for (int j = 0; j < BK; j++) {
        float dot = 0.0f;
#pragma unroll
        for (int k = 0; k < HD / TPQ; k++)
            dot += q[k] * ks[j][part + TPQ * k];
        dot += __shfl_xor_sync(0xffffffffu, dot, 1);
        dot += __shfl_xor_sync(0xffffffffu, dot, 2);
        s[j] = t0 + j < t_end && t0 + j < visible ? dot + ld[j] : -INFINITY;
    }
}

// Loads one tile of keys (and values when vs is set), as fp32, and
// log-degrees; T: the cache's key and value type.
template <int HD, typename T>
__device__ __forceinline__ void load_tile(float (*ks)[HD], float (*vs)[HD], float *ld,
                                          const T *K, const T *V, const float *deg, bool bias,
                                          int t0, int t_end)
{
    const int tid = threadIdx.x;
    for (int e = tid; e < BK * HD; e += BQ * TPQ) {
        int j = e / HD, d = e % HD, t = t0 + j;
        ks[j][d] = t < t_end ? ckv_kv_get(K, (size_t)t * HD + d) : 0.0f;
        if (vs)
            vs[j][d] = t < t_end ? ckv_kv_get(V, (size_t)t * HD + d) : 0.0f;
    }
    if (tid < BK)
        ld[tid] = bias && t0 + tid < t_end ? logf(deg[t0 + tid]) : 0.0f;
}

// Where the calling thread's query sits. One cache (seqs NULL): block x
// holds rows 32x .. 32x + 31 of it, row i at list position len0 + i. A
// batch of sequences: block x is sequence x's single query (slot 0 of the
// block), with its own cache.
struct Place {
    const ckv_k_kv_layer *c;
    int row;      // global query row (q, outputs)
    int visible;  // entries the query sees, 0 for an idle slot
    int t_end;    // end of the block's range (the block's last query sees that far)
};

__device__ __forceinline__ Place place(const Args &a, int h, int split)
{
    const int slot = threadIdx.x / TPQ;
    Place p;
    if (a.seqs) {
        p.c = &a.seqs[blockIdx.x];
        p.row = blockIdx.x;
        const int L0 = p.c->len0[h];
        p.visible = slot == 0 ? L0 + 1 : 0;
        p.t_end = min(split * a.split_len + a.split_len, L0 + 1);
    } else {
        p.c = &a.c;
        p.row = blockIdx.x * BQ + slot;
        const int L0 = a.c.len0[h];
        const int i_last = min(a.n, (int)(blockIdx.x + 1) * BQ) - 1;
        p.visible = p.row < a.n ? L0 + p.row + 1 : 0;
        p.t_end = min(split * a.split_len + a.split_len, L0 + i_last + 1);
    }
    return p;
}

template <int HD, typename T>
__global__ void __launch_bounds__(BQ *TPQ) attention_partial(Args a)
{
    ckv_pdl_wait();
    ckv_pdl_launch_dependents();
    constexpr int PD = HD / TPQ;
    __shared__ float ks[BK][HD];
    __shared__ float vs[BK][HD];
    __shared__ float ld[BK];
    const int tid = threadIdx.x, part = tid % TPQ;
    const int qh = blockIdx.y, split = blockIdx.z;
    const int h = qh / (a.H / a.KV);
    const Place pl = place(a, h, split);
    const int i = pl.row, t_begin = split * a.split_len, t_end = pl.t_end, visible = pl.visible;
    const bool active = visible > 0;
    const T *K = static_cast<const T *>(pl.c->k) + (size_t)h * pl.c->capacity * HD;
    const T *V = static_cast<const T *>(pl.c->v) + (size_t)h * pl.c->capacity * HD;
    const float *deg = pl.c->deg + (size_t)h * pl.c->capacity;

    float q[PD], acc[PD];
#pragma unroll
    for (int k = 0; k < PD; k++) {
        q[k] = active ? a.q[(size_t)i * a.q_stride + (size_t)qh * HD + part + TPQ * k] * a.scale
                      : 0.0f;
        acc[k] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int t0 = t_begin; t0 < t_end; t0 += BK) {
        __syncthreads();  // the previous tile is no longer read
        load_tile<HD, T>(ks, vs, ld, K, V, deg, a.bias, t0, t_end);
        __syncthreads();
        float s[BK], tmax = -INFINITY;
        tile_scores<HD>(s, q, ks, ld, part, t0, t_end, visible);
#pragma unroll
        for (int j = 0; j < BK; j++)
            tmax = fmaxf(tmax, s[j]);
        if (tmax == -INFINITY)
            continue;
        const float mn = fmaxf(m, tmax), corr = expf(m - mn);
        l *= corr;
#pragma unroll
        for (int k = 0; k < PD; k++)
            acc[k] *= corr;
#pragma unroll
        for (int j = 0; j < BK; j++) {
            const float p = expf(s[j] - mn);
            l += p;
#pragma unroll
            for (int k = 0; k < PD; k++)
                acc[k] += p * vs[j][part + TPQ * k];
        }
        m = mn;
    }
    if (!active)
        return;
    const size_t row = ((size_t)split * a.n + i) * a.H + qh;
#pragma unroll
    for (int k = 0; k < PD; k++)
        a.part_o[row * HD + part + TPQ * k] = acc[k];
    if (part == 0) {
        a.part_ml[row * 2] = m;
        a.part_ml[row * 2 + 1] = l;
    }
}

// One block per (query, head), one thread per dimension: the merge of any
// call under MERGE_WIDE_MIN rows that is not a decode (a prefill chunk of
// 2 to 63 rows, one query with a group over 8, a batch of fewer than 64
// sequences with groups over 8), too few rows for the warp form below to
// fill the GPU.
// The ranges' maxima and sums are staged in shared memory by
// all threads at once and each range's weight computed once, so the loads of
// a long split list overlap (a thread walking the ranges one dependent load
// after another took 19 us for 65 ranges, ncu, run K). The sums keep the
// ranges' order (a range of weight 0 is skipped, not added as 0).
constexpr int MERGE_MAX_SPLITS = CKV_ATTENTION_MAX_SPLITS, MERGE_BATCH = 16;
constexpr int MERGE_WIDE_MIN = 64;

__global__ void attention_merge(const float *__restrict__ part_o,
                                const float *__restrict__ part_ml, int32_t splits, int32_t n,
                                int32_t H, int32_t hd, float *out32, ckv_bf16 *out16, float *ml)
{
    ckv_pdl_wait();
    ckv_pdl_launch_dependents();
    __shared__ float wt[MERGE_MAX_SPLITS], ls[MERGE_MAX_SPLITS], red[32];
    const int i = blockIdx.x, qh = blockIdx.y, d = threadIdx.x;
    float M = -INFINITY;
    for (int s = d; s < splits; s += blockDim.x) {
        const size_t row = ((size_t)s * n + i) * H + qh;
        wt[s] = part_ml[row * 2];
        ls[s] = part_ml[row * 2 + 1];
        M = fmaxf(M, wt[s]);
    }
    for (int o = 16; o > 0; o >>= 1)
        M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    if (d % 32 == 0)
        red[d / 32] = M;
    __syncthreads();
    M = red[0];
    for (int w = 1; w < (int)(blockDim.x + 31) / 32; w++)
        M = fmaxf(M, red[w]);
    // A range the query sees nothing of (max -inf) weighs 0, not exp(NaN).
    for (int s = d; s < splits; s += blockDim.x)
        wt[s] = wt[s] == -INFINITY ? 0.0f : expf(wt[s] - M);
    __syncthreads();
    // MERGE_BATCH ranges' outputs loaded before any is added: a load per
    // range then its add would wait out one L2 round trip per range.
    float L = 0.0f, O = 0.0f;
    for (int s0 = 0; s0 < splits; s0 += MERGE_BATCH) {
        float ov[MERGE_BATCH];
#pragma unroll
        for (int j = 0; j < MERGE_BATCH; j++) {
            const int s = s0 + j;
            ov[j] = s < splits && wt[s] != 0.0f
                        ? part_o[(((size_t)s * n + i) * H + qh) * hd + d]
                        : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < MERGE_BATCH; j++) {
            const int s = s0 + j;
            if (s >= splits || wt[s] == 0.0f)
                continue;
            L += wt[s] * ls[s];
            O += wt[s] * ov[j];
        }
    }
    const float r = O / L;
    if (d == 0) {
        ml[((size_t)i * H + qh) * 2] = M;
        ml[((size_t)i * H + qh) * 2 + 1] = L;
    }
    const size_t o = (size_t)i * H * hd + (size_t)qh * hd + d;
    if (out32)
        out32[o] = r;
    else
        out16[o] = ckv_to_bf16(r);
}

// Folds ranges c0 .. c0 + 31 of one (row, query head) into a warp's running
// max M, sum L and unnormalised output O (lane l: dimensions V l .. V l + V -
// 1): lane l loads range c0 + l's max and sum together with the first B
// ranges' outputs, one trip to memory (every range's output is written,
// zeros where the row saw nothing, and one of weight 0 is not used), and
// the weights go from lane to lane by shuffles. A range the row sees
// nothing of (max -inf) weighs 0, not exp(NaN). B must cover every range
// from c0 to min(c0 + 32, splits) (the caller sees to it): MERGE_BATCH where
// at most 16 ranges remain, else 32 (only merges over more than 16 pay its
// registers), and MERGE_MULTI_WARPS for the multi form's fold of its warps.
template <int V, int B>
__device__ __forceinline__ void merge_chunk(const float *__restrict__ part_o,
                                            const float *__restrict__ part_ml, size_t per,
                                            size_t row, int c0, int splits, int lane, float &M,
                                            float &L, float (&O)[V])
{
    constexpr int HD = 32 * V;
    float m = -INFINITY, l = 0.0f, ov[B][V];
    if (c0 + lane < splits) {
        m = part_ml[((c0 + lane) * per + row) * 2];
        l = part_ml[((c0 + lane) * per + row) * 2 + 1];
    }
#pragma unroll
    for (int j = 0; j < B; j++)
#pragma unroll
        for (int v = 0; v < V; v++)
            ov[j][v] =
                c0 + j < splits ? part_o[((c0 + j) * per + row) * HD + V * lane + v] : 0.0f;
    float mc = m;
    for (int o = 16; o > 0; o >>= 1)
        mc = fmaxf(mc, __shfl_xor_sync(0xffffffffu, mc, o));
    if (mc == -INFINITY)
        return;
    const float Mn = fmaxf(M, mc), a = M == -INFINITY ? 0.0f : expf(M - Mn);
    M = Mn;
    L *= a;
#pragma unroll
    for (int v = 0; v < V; v++)
        O[v] *= a;
    const float wl = m == -INFINITY ? 0.0f : expf(m - M);
#pragma unroll
    for (int j = 0; j < B; j++) {
        if (c0 + j >= splits)
            break;
        const float w = __shfl_sync(0xffffffffu, wl, j), ls = __shfl_sync(0xffffffffu, l, j);
        if (w == 0.0f)
            continue;
        L += w * ls;
#pragma unroll
        for (int v = 0; v < V; v++)
            O[v] += w * ov[j][v];
    }
}

// Writes a (row, query head)'s merged output O / L and its max and sum.
template <int V>
__device__ __forceinline__ void merge_store(size_t row, int lane, float M, float L,
                                            const float (&O)[V], float *out32, ckv_bf16 *out16,
                                            float *ml)
{
    if (lane == 0) {
        ml[row * 2] = M;
        ml[row * 2 + 1] = L;
    }
#pragma unroll
    for (int v = 0; v < V; v++) {
        const size_t o = row * (32 * V) + V * lane + v;
        if (out32)
            out32[o] = O[v] / L;
        else
            out16[o] = ckv_to_bf16(O[v] / L);
    }
}

// What a deferring decode step keeps for the next (cuda_kernels.h: pq, pml,
// plen), written by its merge: the merge runs after every block of the
// partial pass that read the old values has completed (its PDL wait), and
// the next step's partial pass reads them after the kernels between have
// passed their own waits. seqs NULL: the step defers nothing.
struct MergeSave {
    const float *q;
    int32_t q_stride, G;
    const ckv_k_kv_layer *seqs;
};

// Row i, query head qh: the queries the partial pass read, the merged max
// and 1 / sum (inverted as the score pass inverts it) and, once a KV head,
// the entries the step saw.
template <int V>
__device__ __forceinline__ void merge_save(const MergeSave &sv, int i, int qh, int lane, float M,
                                           float L)
{
    if (!sv.seqs)
        return;
    const ckv_k_kv_layer c = sv.seqs[i];
    if (!c.score || !c.pq)
        return;
    constexpr int HD = 32 * V;
#pragma unroll
    for (int v = 0; v < V; v++)
        c.pq[(size_t)qh * HD + V * lane + v] =
            sv.q[(size_t)i * sv.q_stride + (size_t)qh * HD + V * lane + v];
    if (lane == 0) {
        c.pml[2 * qh] = M;
        c.pml[2 * qh + 1] = 1.0f / L;
        if (qh % sv.G == 0)
            c.plen[qh / sv.G] = c.len0[qh / sv.G] + 1;
    }
}

// The merge of a decode step, or of a prefill chunk of at least
// MERGE_WIDE_MIN rows, over at most 32 ranges: a warp per (row, query head),
// one trip to memory (merge_chunk) where the block form takes three (its
// 4-row form took 15 us for a 1,024-row SmolLM2 segment of 4 ranges and 281
// us for the 8B's 4,096 rows of one range, about 0.36 TB/s; ncu, run BF). A
// decode step took the block form until run FF, where this one made the 8B's
// steps 0.5-1.4% and SmolLM2's 3.4-4.8% faster, at batch 1 and 8 alike.
constexpr int MERGE_WARPS = 4, MERGE_CHUNK = 32;

template <int V, int B>
__global__ void __launch_bounds__(MERGE_WARPS * 32)
    attention_merge_warp(const float *__restrict__ part_o, const float *__restrict__ part_ml,
                         int32_t splits, int32_t n, int32_t H, float *out32, ckv_bf16 *out16,
                         float *ml, MergeSave sv)
{
    ckv_pdl_wait();
    ckv_pdl_launch_dependents();
    const int lane = threadIdx.x % 32, i = blockIdx.x * MERGE_WARPS + threadIdx.x / 32;
    if (i >= n)
        return;
    const size_t per = (size_t)n * H, row = (size_t)i * H + blockIdx.y;  // (row, head) units
    float M = -INFINITY, L = 0.0f, O[V] = {};
    merge_chunk<V, B>(part_o, part_ml, per, row, 0, splits, lane, M, L, O);
    merge_store<V>(row, lane, M, L, O, out32, out16, ml);
    merge_save<V>(sv, i, blockIdx.y, lane, M, L);
}

// The same merge over more than 32 ranges (a decode at batch 1 over a long
// list takes 33 to 66 on an H100): a block per (row, query head) whose warp w
// folds ranges 32 w .. 32 w + 31 with merge_chunk, so that up to 256 ranges'
// loads are in one trip (past 256 warp w folds 32 (w + W) .. next, a trip a
// lap); warp 0 then folds the warps' maxima, sums and outputs, staged in
// shared memory in the partials' layout, by merge_chunk again (not the
// bits of the forms above: the sums' order differs). One
// warp taking the ranges 32 at a time waited out a trip for each and one
// more for the maxima past 64 (8.1 us over 66 ranges, ncu, ZZ125).
constexpr int MERGE_MULTI_WARPS = 8;

template <int V>
__global__ void __launch_bounds__(MERGE_MULTI_WARPS * 32)
    attention_merge_multi(const float *__restrict__ part_o, const float *__restrict__ part_ml,
                          int32_t splits, int32_t n, int32_t H, float *out32, ckv_bf16 *out16,
                          float *ml, MergeSave sv)
{
    ckv_pdl_wait();
    ckv_pdl_launch_dependents();
    constexpr int HD = 32 * V;
    // The warps' states as W ranges of one (row, head): so [W][HD], sml [W][2].
    __shared__ float so[MERGE_MULTI_WARPS * HD], sml[MERGE_MULTI_WARPS * 2];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32, W = blockDim.x / 32;
    const size_t per = (size_t)n * H, row = (size_t)blockIdx.x * H + blockIdx.y;
    float M = -INFINITY, L = 0.0f, O[V] = {};
    for (int c0 = MERGE_CHUNK * w; c0 < splits; c0 += MERGE_CHUNK * W)
        merge_chunk<V, MERGE_CHUNK>(part_o, part_ml, per, row, c0, splits, lane, M, L, O);
    if (lane == 0) {
        sml[w * 2] = M;
        sml[w * 2 + 1] = L;
    }
#pragma unroll
    for (int v = 0; v < V; v++)
        so[w * HD + V * lane + v] = O[v];
    __syncthreads();
    if (w != 0)
        return;
    float Mx = -INFINITY, Lx = 0.0f, Ox[V] = {};
    merge_chunk<V, MERGE_MULTI_WARPS>(so, sml, 1, 0, 0, W, lane, Mx, Lx, Ox);
    merge_store<V>(row, lane, Mx, Lx, Ox, out32, out16, ml);
    merge_save<V>(sv, blockIdx.x, blockIdx.y, lane, Mx, Lx);
}

// The attention mass each entry receives (H2O): with the merged max M and
// sum L of every query, recomputes the scores of the same ranges and adds
// exp(s - M) / L, summed over the block's queries, to score[t]; the query
// heads of a KV group add into the same list.
template <int HD, typename T>
__global__ void __launch_bounds__(BQ *TPQ) attention_score(Args a)
{
    ckv_pdl_wait();
    ckv_pdl_launch_dependents();
    constexpr int PD = HD / TPQ;
    __shared__ float ks[BK][HD];
    __shared__ float ld[BK];
    __shared__ float mass[BQ * TPQ / 32][BK];  // per warp
    const int tid = threadIdx.x, part = tid % TPQ;
    const int qh = blockIdx.y, split = blockIdx.z;
    const int h = qh / (a.H / a.KV);
    const Place pl = place(a, h, split);
    if (!pl.c->score)  // a sequence of the batch that does not track scores
        return;
    const int i = pl.row, t_begin = split * a.split_len, t_end = pl.t_end, visible = pl.visible;
    const bool active = visible > 0;
    const T *K = static_cast<const T *>(pl.c->k) + (size_t)h * pl.c->capacity * HD;
    const float *deg = pl.c->deg + (size_t)h * pl.c->capacity;
    float *score = pl.c->score + (size_t)h * pl.c->capacity;
    float q[PD];
#pragma unroll
    for (int k = 0; k < PD; k++)
        q[k] = active ? a.q[(size_t)i * a.q_stride + (size_t)qh * HD + part + TPQ * k] * a.scale
                      : 0.0f;
    const float M = active ? a.ml[((size_t)i * a.H + qh) * 2] : 0.0f;
    const float invL = active ? 1.0f / a.ml[((size_t)i * a.H + qh) * 2 + 1] : 0.0f;
    for (int t0 = t_begin; t0 < t_end; t0 += BK) {
        __syncthreads();
        load_tile<HD, T>(ks, NULL, ld, K, (const T *)NULL, deg, a.bias, t0, t_end);
        __syncthreads();
        float s[BK];
        tile_scores<HD>(s, q, ks, ld, part, t0, t_end, visible);
        // Sum over the warp's 8 queries by shuffles (lanes 4 apart hold the
        // same part of different queries), not shared atomics on one
        // address, which serialise; lane j % 4 keeps entry j's sum.
#pragma unroll
        for (int j = 0; j < BK; j++) {
            float p = s[j] != -INFINITY ? expf(s[j] - M) * invL : 0.0f;
#pragma unroll
            for (int off = TPQ; off < 32; off *= 2)
                p += __shfl_xor_sync(0xffffffffu, p, off);
            if (tid % 32 == j % TPQ)
                mass[tid / 32][j] = p;
        }
        __syncthreads();
        if (tid < BK && t0 + tid < t_end) {
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < BQ * TPQ / 32; w++)
                sum += mass[w][tid];
            atomicAdd(&score[t0 + tid], sum);
        }
    }
}

// The fp32 kernels' instances by head_dim and the cache's type.
template <typename T>
auto partial_of(int head_dim) -> decltype(&attention_partial<64, T>)
{
    return head_dim == 64 ? attention_partial<64, T> : attention_partial<128, T>;
}

template <typename T>
auto score_of(int head_dim) -> decltype(&attention_score<64, T>)
{
    return head_dim == 64 ? attention_score<64, T> : attention_score<128, T>;
}

}  // namespace

// The plan of either form: the decode kernel has a block per (row, KV head).
// A prefill over one cache is counted in the tensor-core kernel's blocks of
// CKV_PREFILL_TC_ROWS rows per query head, whether or not a score pass
// follows (the decoder plans before it knows): the fp32 kernel, taken when
// one does, then runs twice the blocks planned, which only adds parallelism,
// and both kernels take any split_len (a multiple of BK keeps tiles whole in
// both, but the wgmma form's tiles of 64 or 128 entries only at a multiple
// of 2 or 4 BK: else a range's last tile is partly masked). The wgmma form's
// 128-row blocks (ranges of 2,048 entries or more) count as two. A batch of
// sequences the decode kernel does not take has a block per row and query
// head.
static ckv_k_attention_split plan_for(int32_t n, bool seqs, int32_t n_head, int32_t n_head_kv,
                                      int32_t head_dim, int32_t max_len, int32_t n_sm,
                                      double peak_bw, size_t ws_floats, ckv_kv_dtype dtype)
{
    ckv_attention_plan_in p = {};
    p.per_sm = PER_SM;
    p.min_split = MIN_SPLIT;
    p.tile = BK;
    p.n = n;
    p.n_head = n_head;
    p.head_dim = head_dim;
    p.max_len = max_len;
    p.n_sm = n_sm;
    p.ws_floats = ws_floats;
    if (ckv_attention_decode_fits(n, seqs, n_head, n_head_kv)) {
        // Whole waves: at 4 blocks per SM where 3 fit, a batch-1 list ran a
        // second wave a third full (run M: 75 % of copy bandwidth at 128K).
        p.blocks = (int64_t)n * n_head_kv;
        p.resident = ckv_attention_decode_resident(head_dim, n_head / n_head_kv, dtype);
        p.min_split = MIN_SPLIT_DECODE;
        p.tile = CKV_ATTENTION_DECODE_TILE;
        p.max_splits = ckv_attention_decode_max_splits(max_len, peak_bw);
    } else {
        const int64_t row_blocks =
            seqs ? n : (n + CKV_PREFILL_TC_ROWS - 1) / CKV_PREFILL_TC_ROWS;
        p.blocks = row_blocks * n_head;
    }
    return ckv_attention_split_plan(&p);
}

extern "C" ckv_k_attention_path ckv_k_attention_path_of(int32_t n, bool seqs, int32_t n_head,
                                                        int32_t n_head_kv, ckv_kv_dtype dtype)
{
    if (ckv_attention_decode_fits(n, seqs, n_head, n_head_kv))
        return CKV_ATTN_DECODE;
    if (seqs)
        return CKV_ATTN_PREFILL_F32;
    return dtype == CKV_KV_BF16 ? CKV_ATTN_PREFILL_BF16 : CKV_ATTN_PREFILL_TF32;
}

extern "C" const char *ckv_k_attention_path_name(ckv_k_attention_path p)
{
    switch (p) {
    case CKV_ATTN_DECODE:
        return "decode";
    case CKV_ATTN_PREFILL_F32:
        return "fp32";
    case CKV_ATTN_PREFILL_TF32:
        return "tf32 mma.sync";
    case CKV_ATTN_PREFILL_BF16:
        break;
    }
    return ckv_cuda_wgmma() ? "bf16 wgmma" : "bf16 mma.sync";
}

extern "C" ckv_k_attention_split ckv_k_attention_plan(int32_t n, int32_t n_head,
                                                      int32_t n_head_kv, int32_t head_dim,
                                                      int32_t max_len, int32_t n_sm,
                                                      double peak_bw, size_t ws_floats,
                                                      ckv_kv_dtype dtype)
{
    return plan_for(n, false, n_head, n_head_kv, head_dim, max_len, n_sm, peak_bw, ws_floats,
                    dtype);
}

extern "C" ckv_k_attention_split ckv_k_attention_plan_seqs(int32_t n_seq, int32_t n_head,
                                                           int32_t n_head_kv, int32_t head_dim,
                                                           int32_t max_len, int32_t n_sm,
                                                           double peak_bw, size_t ws_floats,
                                                           ckv_kv_dtype dtype)
{
    return plan_for(n_seq, true, n_head, n_head_kv, head_dim, max_len, n_sm, peak_bw, ws_floats,
                    dtype);
}

// One launcher for every form: rows of one cache (c), one row per sequence
// (seqs, device memory), or segments of rows each over its own cache (sg,
// tensor-core prefill only); `mode`: whether some cache tracks scores, and
// how a batch decode adds their masses (DEFER: batch decodes only).
static ckv_status launch(float *out32, ckv_bf16 *out16, const float *q, int32_t q_stride,
                         int32_t n, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                         const ckv_k_kv_layer *c, const ckv_k_kv_layer *seqs,
                         const ckv_k_segments *sg, ckv_kv_dtype dtype, ckv_k_scores mode,
                         float scale, bool degree_bias, ckv_k_attention_split split, float *ws,
                         void *stream, ckv_error *err)
{
    const bool scores = mode != CKV_K_SCORES_NONE, defer = mode == CKV_K_SCORES_DEFER;
    if ((out32 == NULL) == (out16 == NULL))
        return ckv_errorf(err, CKV_ERR_ARG, "attention: exactly one of out32, out16 must be set");
    if (n_head_kv <= 0 || n_head % n_head_kv)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "attention: %d query heads do not group over %d KV heads", n_head,
                          n_head_kv);
    if (head_dim != 64 && head_dim != 128)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED, "attention: head_dim %d (64 or 128 only)",
                          head_dim);
    if (split.splits < 1 || split.splits > MERGE_MAX_SPLITS || split.split_len < 1)
        return ckv_errorf(err, CKV_ERR_ARG, "attention: %d splits of %d entries (1 to %d splits)",
                          split.splits, split.split_len, MERGE_MAX_SPLITS);
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    float *part_ml = ws + (size_t)split.splits * n * n_head * head_dim;
    Args a = {q, q_stride, n, n_head, n_head_kv, c ? *c : ckv_k_kv_layer{}, seqs, scale,
              degree_bias, split.split_len, ws, part_ml,
              part_ml + (size_t)split.splits * n * n_head * 2};
    dim3 grid(seqs ? n : (n + BQ - 1) / BQ, n_head, split.splits);
    const ckv_k_attention_path path =
        ckv_k_attention_path_of(n, seqs != NULL, n_head, n_head_kv, dtype);
    const bool decode = path == CKV_ATTN_DECODE, bf16 = dtype == CKV_KV_BF16;
    const bool tc = path == CKV_ATTN_PREFILL_TF32 || path == CKV_ATTN_PREFILL_BF16;
    if (sg && !tc)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "attention: segments of %d rows over %d caches take the tensor-core "
                          "prefill kernel only (no scores, groups that no decode kernel takes)",
                          n, sg->n);
    if (decode && !seqs && scores && !c->logit)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "attention: a decode over a cache that tracks scores needs its logit "
                          "scratch");
    if (defer && !(decode && seqs && ckv_k_scores_defer_fits(n_head, n_head_kv, dtype)))
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "attention: deferred scores over %d rows of %s lists, group %d (a "
                          "batch decode over bf16 lists, groups up to 4)",
                          n, ckv_kv_dtype_name(dtype), n_head / n_head_kv);
    if (decode)
        CKV_CUDA(ckv_attention_decode(q, q_stride, n, n_head, n_head_kv, head_dim, a.c, seqs,
                                      scale, degree_bias, split, a.part_o, a.part_ml,
                                      static_cast<ckv_decode_scores>(mode), dtype, st));
    else if (tc) {
        const ckv_status s = ckv_attention_prefill(q, q_stride, n, n_head, n_head_kv, head_dim,
                                                   a.c, sg, dtype, scale, degree_bias, split,
                                                   a.part_o, a.part_ml, out32, out16, a.ml, st,
                                                   err);
        if (s != CKV_OK)
            return s;
    } else
        CKV_CUDA(ckv_pdl_launch(bf16 ? partial_of<ckv_bf16>(head_dim) : partial_of<float>(head_dim),
                                grid, BQ * TPQ, 0, st, a));
    const MergeSave sv = {q, q_stride, n_head / n_head_kv, defer ? seqs : NULL};
    // With one range the tensor-core prefill wrote the merge's results itself.
    if (!(tc && split.splits == 1)) {
        if (decode || n >= MERGE_WIDE_MIN) {
            if (split.splits > MERGE_CHUNK) {
                const int chunks = (split.splits + MERGE_CHUNK - 1) / MERGE_CHUNK;
                const int warps = chunks < MERGE_MULTI_WARPS ? chunks : MERGE_MULTI_WARPS;
                CKV_CUDA(ckv_pdl_launch(head_dim == 64 ? attention_merge_multi<2>
                                                       : attention_merge_multi<4>,
                                        dim3(n, n_head), warps * 32, 0, st, a.part_o, a.part_ml,
                                        split.splits, n, n_head, out32, out16, a.ml, sv));
            } else
                CKV_CUDA(ckv_pdl_launch(
                    split.splits > MERGE_BATCH
                        ? (head_dim == 64 ? attention_merge_warp<2, MERGE_CHUNK>
                                          : attention_merge_warp<4, MERGE_CHUNK>)
                        : (head_dim == 64 ? attention_merge_warp<2, MERGE_BATCH>
                                          : attention_merge_warp<4, MERGE_BATCH>),
                    dim3((n + MERGE_WARPS - 1) / MERGE_WARPS, n_head), MERGE_WARPS * 32, 0, st,
                    a.part_o, a.part_ml, split.splits, n, n_head, out32, out16, a.ml, sv));
        } else
            CKV_CUDA(ckv_pdl_launch(attention_merge, dim3(n, n_head), head_dim, 0, st, a.part_o,
                                    a.part_ml, split.splits, n, n_head, head_dim, out32, out16,
                                    a.ml));
    }
    // A deferring step's merge (a decode's always runs) saved what the next needs.
    if (scores && !defer) {
        if (decode)
            CKV_CUDA(ckv_attention_decode_score(n, n_head, n_head_kv, a.c, seqs, split, a.ml, st));
        else if (tc)
            return ckv_attention_prefill_score(q, q_stride, n, n_head, n_head_kv, head_dim, a.c,
                                               scale, degree_bias, split, a.ml, st, err);
        else
            CKV_CUDA(ckv_pdl_launch(bf16 ? score_of<ckv_bf16>(head_dim) : score_of<float>(head_dim),
                                    grid, BQ * TPQ, 0, st, a));
    }
    return CKV_OK;
}

extern "C" ckv_status ckv_k_attention(float *out32, ckv_bf16 *out16, const float *q,
                                      int32_t q_stride, int32_t n, int32_t n_head,
                                      int32_t n_head_kv, int32_t head_dim, const ckv_k_kv_layer *c,
                                      float scale, bool degree_bias, ckv_k_attention_split split,
                                      float *ws, void *stream, ckv_error *err)
{
    return launch(out32, out16, q, q_stride, n, n_head, n_head_kv, head_dim, c, NULL, NULL,
                  c->dtype, c->score ? CKV_K_SCORES_NOW : CKV_K_SCORES_NONE, scale, degree_bias,
                  split, ws, stream, err);
}

extern "C" ckv_status ckv_k_attention_seqs(float *out32, ckv_bf16 *out16, const float *q,
                                           int32_t q_stride, int32_t n_seq, int32_t n_head,
                                           int32_t n_head_kv, int32_t head_dim,
                                           const ckv_k_kv_layer *seqs, ckv_kv_dtype dtype,
                                           ckv_k_scores scores, float scale,
                                           bool degree_bias, ckv_k_attention_split split,
                                           float *ws, void *stream, ckv_error *err)
{
    return launch(out32, out16, q, q_stride, n_seq, n_head, n_head_kv, head_dim, NULL, seqs, NULL,
                  dtype, scores, scale, degree_bias, split, ws, stream, err);
}

extern "C" ckv_status ckv_k_attention_segs(float *out32, ckv_bf16 *out16, const float *q,
                                           int32_t q_stride, int32_t n, int32_t n_head,
                                           int32_t n_head_kv, int32_t head_dim,
                                           const ckv_k_segments *sg, ckv_kv_dtype dtype,
                                           float scale, bool degree_bias,
                                           ckv_k_attention_split split, float *ws, void *stream,
                                           ckv_error *err)
{
    return launch(out32, out16, q, q_stride, n, n_head, n_head_kv, head_dim, NULL, NULL, sg,
                  dtype, CKV_K_SCORES_NONE, scale, degree_bias, split, ws, stream, err);
}

extern "C" bool ckv_k_scores_defer_fits(int32_t n_head, int32_t n_head_kv, ckv_kv_dtype dtype)
{
    return n_head_kv > 0 && n_head % n_head_kv == 0 &&
           ckv_attention_decode_defers(n_head / n_head_kv, dtype);
}

// After a flush: nothing pending in any of the n layers (a thread per KV
// head), once the flush's blocks, which read plen, have completed.
__global__ void scores_flushed(const ckv_k_kv_layer *tab)
{
    ckv_pdl_wait();
    ckv_pdl_launch_dependents();
    const ckv_k_kv_layer c = tab[blockIdx.x];
    if (c.score && c.pq)
        c.plen[threadIdx.x] = 0;
}

// Entries a flush block walks: 16 steps of each of its 4 warps.
constexpr int FLUSH_RANGE = 512;

extern "C" ckv_status ckv_k_scores_flush(const ckv_k_kv_layer *tab, int32_t n, int32_t n_head,
                                         int32_t n_head_kv, int32_t head_dim, int32_t max_len,
                                         ckv_kv_dtype dtype, float scale, bool degree_bias,
                                         void *stream, ckv_error *err)
{
    if (!ckv_k_scores_defer_fits(n_head, n_head_kv, dtype) || (head_dim != 64 && head_dim != 128))
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "attention: no deferred scores to flush over %s lists of %d heads, %d "
                          "KV heads, head_dim %d",
                          ckv_kv_dtype_name(dtype), n_head, n_head_kv, head_dim);
    if (n <= 0 || max_len <= 0)
        return CKV_OK;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    const ckv_k_attention_split split = {(max_len + FLUSH_RANGE - 1) / FLUSH_RANGE, FLUSH_RANGE};
    CKV_CUDA(ckv_attention_decode(NULL, 0, n, n_head, n_head_kv, head_dim, ckv_k_kv_layer{}, tab,
                                  scale, degree_bias, split, NULL, NULL, CKV_DECODE_FLUSH, dtype,
                                  st));
    CKV_CUDA(ckv_pdl_launch(scores_flushed, dim3(n), n_head_kv, 0, st, tab));
    return CKV_OK;
}

extern "C" void ckv_k_segment_tiles(const int32_t *row, int32_t n, int32_t *tile)
{
    tile[0] = 0;
    for (int32_t s = 0; s < n; s++)
        tile[s + 1] =
            tile[s] + (row[s + 1] - row[s] + CKV_PREFILL_TC_ROWS - 1) / CKV_PREFILL_TC_ROWS;
}
