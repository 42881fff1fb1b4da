// Decode attention over fp32 lists of groups up to 4 (bf16 lists and larger
// groups take the tensor-core kernel of cuda_attention_decode_mma.cu): one
// query per sequence, so a block takes one
// (sequence, KV head, range of the list) and all `group` query heads of that
// KV head, and the range's keys and values are read from global memory once. Teams
// of HD / 8 lanes stream C entries per step (8 dimensions per lane, float4
// loads, a shuffle reduction for q.k), each team keeps an online softmax per
// query head, and the teams merge by shuffles, then the 4 warps through
// shared memory, into the partials layout that attention_merge of
// cuda_attention.cu reads. For a step that tracks H2O scores the partial
// pass also stores each entry's logit per query head (the cache layer's
// logit scratch), and the score pass after the merge reads those logits,
// not the keys: G floats per entry instead of a key row. It adds each
// entry's attention mass over the group's heads to its score from the one
// thread that owns the entry (no atomics). Launched with programmatic
// dependent launch; both passes wait first (cuda_pdl.cuh).
#include <math.h>

#include "cuda_attention_decode.h"
#include "cuda_attention_partials.cuh"
#include "cuda_pdl.cuh"

namespace {

constexpr int NW = 4;  // warps per block
constexpr int NTH = NW * 32;
constexpr int DPL = 8;  // dimensions per lane
constexpr int MAX_GROUP = 8;
constexpr int MAX_CORE_GROUP = 4;  // the largest group this kernel takes
constexpr int C = 4;  // entries per team and step

struct DArgs {
    const float *q;
    int32_t q_stride, n, H, KV;
    ckv_k_kv_layer c;
    const ckv_k_kv_layer *seqs;
    float scale;
    bool bias;
    int32_t split_len;
    float *part_o, *part_ml;
    const float *ml;  // [n][H][2] merged max and sum: the score pass reads them
};

// A sequence's logits of KV head h, query head g of its group, entry t:
// logit[(h G + g) capacity + t], so the score pass's threads read each
// head's row contiguously.
__device__ __forceinline__ size_t logit_at(const ckv_k_kv_layer &c, int h, int G, int g, int t)
{
    return ((size_t)h * G + g) * c.capacity + t;
}

// Folds the softmax state (m2, l2, o2) into (m, l, o); an empty state has
// m = -inf, l = 0, o = 0 and changes nothing.
__device__ __forceinline__ void fold(float &m, float &l, float (&o)[DPL], float m2, float l2,
                                     const float (&o2)[DPL])
{
    const float M = fmaxf(m, m2);
    if (M == -INFINITY)
        return;
    const float w1 = expf(m - M), w2 = expf(m2 - M);
    l = l * w1 + l2 * w2;
#pragma unroll
    for (int k = 0; k < DPL; k++)
        o[k] = o[k] * w1 + o2[k] * w2;
    m = M;
}

// The partial pass's end: the teams of each warp fold their softmax states
// by shuffles, the 4 warps through shared memory, into the partials.
template <int HD, int MG>
__device__ __forceinline__ void write_partials(const DArgs &a, float (&m)[MG], float (&l)[MG],
                                               float (&o)[MG][DPL], int x, int h, int split,
                                               int G)
{
    constexpr int TL = HD / DPL;
    __shared__ float so[NW][MG][HD];
    __shared__ float sml[NW][MG][2];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, d0 = lane % TL * DPL;
    // Lane j folds in lane j ^ off: the same dimensions of another team.
#pragma unroll
    for (int off = TL; off < 32; off *= 2)
#pragma unroll
        for (int g = 0; g < MG; g++) {
            if (g >= G)
                break;
            const float m2 = __shfl_xor_sync(0xffffffffu, m[g], off);
            const float l2 = __shfl_xor_sync(0xffffffffu, l[g], off);
            float o2[DPL];
#pragma unroll
            for (int k = 0; k < DPL; k++)
                o2[k] = __shfl_xor_sync(0xffffffffu, o[g][k], off);
            fold(m[g], l[g], o[g], m2, l2, o2);
        }
    if (lane < TL)
#pragma unroll
        for (int g = 0; g < MG; g++) {
            if (g >= G)
                break;
#pragma unroll
            for (int k = 0; k < DPL; k++)
                so[warp][g][d0 + k] = o[g][k];
            if (lane == 0) {
                sml[warp][g][0] = m[g];
                sml[warp][g][1] = l[g];
            }
        }
    __syncthreads();
    ckv_store_partials<NW, HD, MG>(so, sml, G, a.n, a.H, x, h, split, a.part_o, a.part_ml);
}

// MG: the group rounded up to 1, 2 or 4 (register arrays); heads g >= G
// of it are skipped. LOGITS: some sequence of the step tracks scores; each
// that does (c.logit set) gets its logits stored. A step without scores
// runs the instance without the store.
template <int HD, int MG, bool LOGITS>
__global__ void __launch_bounds__(NTH) attention_decode(DArgs a)
{
    ckv_pdl_wait();
    ckv_pdl_launch_dependents();
    constexpr int TL = HD / DPL;  // lanes per entry
    constexpr int EPW = 32 / TL;  // entries per warp and step
    static_assert(C <= TL, "a team stores its C logits from C lanes");
    __shared__ __align__(16) float sq[MG][HD];
    const int x = blockIdx.x, h = blockIdx.y, split = blockIdx.z;
    const int G = a.H / a.KV, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int team = lane / TL, d0 = lane % TL * DPL;
    // By value: the address of a kernel parameter would copy it to local memory.
    const ckv_k_kv_layer c = a.seqs ? a.seqs[x] : a.c;
    float *const lg = LOGITS ? c.logit : nullptr;

    for (int e = tid; e < MG * HD; e += NTH) {
        const int g = e / HD, d = e % HD;
        sq[g][d] = g < G ? a.q[(size_t)x * a.q_stride + (size_t)(h * G + g) * HD + d] * a.scale
                         : 0.0f;
    }
    __syncthreads();

    // The query sees its own new entry: len0 + 1 entries.
    const int t_begin = split * a.split_len;
    const int t_end = min(t_begin + a.split_len, c.len0[h] + 1);
    const float *K = static_cast<const float *>(c.k) + (size_t)h * c.capacity * HD;
    const float *V = static_cast<const float *>(c.v) + (size_t)h * c.capacity * HD;
    const float *deg = c.deg + (size_t)h * c.capacity;

    // The running max, sum and output per head.
    float m[MG], l[MG], o[MG][DPL];
#pragma unroll
    for (int g = 0; g < MG; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int k = 0; k < DPL; k++)
            o[g][k] = 0.0f;
    }
    // A team takes C entries per step, EPW apart (entry j of a step is
    // warp-contiguous with its neighbours' entry j), with all their loads
    // issued before any arithmetic: C times the bytes in flight of one entry
    // per step, and one softmax rescale per head for the C of them. The loop
    // bound is uniform over the warp (the shuffles need all lanes); entries
    // past the range only take part in them.
    for (int base = t_begin + warp * EPW * C; base < t_end; base += NW * EPW * C) {
        float kr[C][DPL], vr[C][DPL], ld[C];
#pragma unroll
        for (int j = 0; j < C; j++) {
            const int t = base + j * EPW + team;
            ld[j] = 0.0f;
#pragma unroll
            for (int k = 0; k < DPL; k++)
                kr[j][k] = vr[j][k] = 0.0f;
            if (t >= t_end)
                continue;
            // __ldg: the cache pointers come from a struct, so a plain load
            // would be a generic one; the lists are read-only in this kernel.
            const float4 *kp = reinterpret_cast<const float4 *>(K + (size_t)t * HD + d0);
            const float4 k0 = __ldg(kp), k1 = __ldg(kp + 1);
            kr[j][0] = k0.x, kr[j][1] = k0.y, kr[j][2] = k0.z, kr[j][3] = k0.w;
            kr[j][4] = k1.x, kr[j][5] = k1.y, kr[j][6] = k1.z, kr[j][7] = k1.w;
            const float4 *vp = reinterpret_cast<const float4 *>(V + (size_t)t * HD + d0);
            const float4 v0 = __ldg(vp), v1 = __ldg(vp + 1);
            vr[j][0] = v0.x, vr[j][1] = v0.y, vr[j][2] = v0.z, vr[j][3] = v0.w;
            vr[j][4] = v1.x, vr[j][5] = v1.y, vr[j][6] = v1.z, vr[j][7] = v1.w;
            // The degree (1 without the bias, 0 past the range) now, its
            // logarithm once every load of the step is out: taken here, each
            // entry's logarithm waited for its load before the next entry's
            // loads went out, and the biased kernel at group 8 (which it
            // then took) ran 28% longer than the unbiased one (ncu, ZZ107).
            ld[j] = a.bias ? __ldg(deg + t) : 1.0f;
        }
        // ld: the score's offset, -inf past the range (and for degree 0
        // under the bias: lg2.approx of +0 is -inf).
#pragma unroll
        for (int j = 0; j < C; j++)
            ld[j] = a.bias ? __logf(ld[j]) : ld[j] > 0.0f ? 0.0f : -INFINITY;
        // Where this lane stores its entry's logits (head 0; below).
        float *lp = nullptr;
        if (LOGITS && lg) {
            const int t = base + lane % TL * EPW + team;
            if (lane % TL < C && t < t_end)
                lp = lg + logit_at(c, h, G, 0, t);
        }
        // The exponentials and logarithms of the walk are the fast ones
        // (ex2.approx, lg2.approx: relative error about 1e-6 at these
        // arguments, against a 1e-4 tolerance): at group 8, which this
        // kernel took then, they were most of the arithmetic that kept it
        // under 60 % of copy bandwidth.
#pragma unroll
        for (int g = 0; g < MG; g++) {
            if (g >= G)
                break;
            float sc[C], mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < C; j++) {
                float dot = 0.0f;
#pragma unroll
                for (int k = 0; k < DPL; k++)
                    dot += sq[g][d0 + k] * kr[j][k];
                // A butterfly: lanes i and i ^ off add the same two values
                // in either order, so the team's lanes agree bit for bit.
#pragma unroll
                for (int off = TL / 2; off > 0; off /= 2)
                    dot += __shfl_xor_sync(0xffffffffu, dot, off);
                sc[j] = dot + ld[j];
                mx = fmaxf(mx, sc[j]);
            }
            // The logits the softmax below takes, -inf included, for the
            // score pass. The team's lanes hold the same values, so lane j
            // of each team stores entry j: one store a head, covering the
            // warp's EPW x C consecutive entries.
            if (LOGITS && lp) {
                float v = sc[0];
#pragma unroll
                for (int i = 1; i < C; i++)
                    v = lane % TL == i ? sc[i] : v;
                lp[(size_t)g * c.capacity] = v;
            }
            if (mx == -INFINITY)
                continue;
            const float mn = fmaxf(m[g], mx), corr = __expf(m[g] - mn);
            l[g] *= corr;
#pragma unroll
            for (int k = 0; k < DPL; k++)
                o[g][k] *= corr;
#pragma unroll
            for (int j = 0; j < C; j++) {
                const float p = __expf(sc[j] - mn);  // 0 for -inf
                l[g] += p;
#pragma unroll
                for (int k = 0; k < DPL; k++)
                    o[g][k] = fmaf(p, vr[j][k], o[g][k]);
            }
            m[g] = mn;
        }
    }
    write_partials<HD, MG>(a, m, l, o, x, h, split, G);
}

// The score pass: a block per (sequence, KV head, SCORE_ENTRIES entries), a
// thread per SCORE_ENTRIES / SCORE_THREADS of them, in runs of VEC
// consecutive entries (VEC 4: 16-byte loads and stores where the
// sequence's logit and score rows are 16-byte aligned, else 1), so each
// entry's add has one owner (no atomics). After the sequence's table entry,
// a thread issues all its loads at once (its old scores and logits, read
// up to the capacity, and the list's length and the merged max and sum
// that mask and weigh them): one round trip. The price: the grid covers
// the capacity (a captured step's shape), so a list shorter than its
// capacity has its unused entries read and dropped, 4 (G + 1) bytes each
// against the partial pass's 512 a used entry (head_dim 128, bf16).
// `bench throughput`'s caches hold their budget plus an interval (a few
// percent unused); a sweep's, sized for the whole prompt and compressed to
// a share of it, leave most of it unused (a 4K prompt at 25%: 3K entries,
// 60 KB a KV head and layer at G = 4, next to latency-bound steps). The
// form that read the length, then the max and sum behind a barrier, then
// 4-byte runs, made three a block and ran at 49% of copy bandwidth (run
// FA: 24.7 us a layer for the 51 MB of H2O's 39 sequences at 32K); with
// 16-byte runs but the registers of 8 heads, 2 blocks an SM, 27.0 us (FD);
// this form 18.5 us (FE). A thread per entry
// of the partial pass's ranges, one entry after another, was latency-bound:
// 2.2 ms of run Z's 19-sequence 32K H2O step. The deferred form of
// cuda_attention_decode_mma.cu replaces this pass where it can (its file
// comment), with the same values. The mass is the one the walk
// computed when it re-read the keys: the same fp32 logits (the partial
// pass's sc), m and 1 / l of the same merged values, the same expression
// summed over g in the same order (gpu_parity checks it against the CPU's
// scores; the sweep of run AC gave the same predictions as before the
// logits were kept).
constexpr int SCORE_THREADS = 256, SCORE_ENTRIES = 1024;

template <int VEC>
struct ScoreVec;
template <>
struct ScoreVec<1> {
    using T = float;
    static __device__ __forceinline__ float at(const T &v, int) { return v; }
    static __device__ __forceinline__ void set(T &v, int, float x) { v = x; }
};
template <>
struct ScoreVec<4> {
    using T = float4;
    static __device__ __forceinline__ float at(const T &v, int i)
    {
        return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
    }
    static __device__ __forceinline__ void set(T &v, int i, float x)
    {
        (i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w) = x;
    }
};

// One thread's entries of the block starting at t0: run u at t0 + (u
// SCORE_THREADS + threadIdx.x) VEC; MG >= G heads' registers. Entries at or
// past the list's end keep their scores' bits (a run that crosses it writes
// them back as read).
template <int MG, int VEC>
__device__ __forceinline__ void score_runs(const DArgs &a, const ckv_k_kv_layer &c, int x, int h,
                                           int G, int t0)
{
    using SV = ScoreVec<VEC>;
    using T = typename SV::T;
    constexpr int U = SCORE_ENTRIES / (SCORE_THREADS * VEC);
    T *score = reinterpret_cast<T *>(c.score + (size_t)h * c.capacity);
    const int len = c.len0[h];
    T old[U], lg[U][MG];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int t = t0 + (u * SCORE_THREADS + threadIdx.x) * VEC;
        if (t >= c.capacity)
            break;
        old[u] = score[t / VEC];
#pragma unroll
        for (int g = 0; g < MG; g++)
            if (g < G)
                lg[u][g] = reinterpret_cast<const T *>(c.logit + logit_at(c, h, G, g, 0))[t / VEC];
    }
    float sm[MG], sl[MG];
#pragma unroll
    for (int g = 0; g < MG; g++)
        if (g < G) {
            const size_t row = ((size_t)x * a.H + (size_t)(h * G + g)) * 2;
            sm[g] = a.ml[row];
            sl[g] = a.ml[row + 1];
        }
#pragma unroll
    for (int g = 0; g < MG; g++)
        if (g < G)
            sl[g] = 1.0f / sl[g];
    const int t_end = len + 1;  // the step's own entry included
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int t = t0 + (u * SCORE_THREADS + threadIdx.x) * VEC;
        if (t >= t_end)
            break;
        T out = old[u];
#pragma unroll
        for (int i = 0; i < VEC; i++) {
            if (t + i >= t_end)
                break;
            float mass = 0.0f;
#pragma unroll
            for (int g = 0; g < MG; g++)
                if (g < G) {
                    const float v = SV::at(lg[u][g], i);
                    mass = __fadd_rn(mass, v == -INFINITY ? 0.0f : ckv_decode_mass(v, sm[g], sl[g]));
                }
            SV::set(out, i, SV::at(old[u], i) + mass);
        }
        score[t / VEC] = out;
    }
}

template <int MG>
__global__ void __launch_bounds__(SCORE_THREADS) attention_decode_score(DArgs a)
{
    ckv_pdl_wait();
    ckv_pdl_launch_dependents();
    const int x = blockIdx.x, h = blockIdx.y, G = a.H / a.KV;
    const ckv_k_kv_layer c = a.seqs ? a.seqs[x] : a.c;
    const int t0 = blockIdx.z * SCORE_ENTRIES;
    if (!c.score || t0 >= c.capacity)  // a sequence that does not track scores
        return;
    // 16-byte runs: both rows' starts aligned and their stride (the
    // capacity) a multiple of 4 entries. Block-uniform.
    if (c.capacity % 4 == 0 &&
        ((reinterpret_cast<uintptr_t>(c.score) | reinterpret_cast<uintptr_t>(c.logit)) & 15) == 0)
        score_runs<MG, 4>(a, c, x, h, G, t0);
    else
        score_runs<MG, 1>(a, c, x, h, G, t0);
}

template <int HD, bool LOGITS>
cudaError_t launch_hd(const DArgs &a, dim3 grid, cudaStream_t st)
{
    const int G = a.H / a.KV;
    if (G > MAX_CORE_GROUP)  // the tensor-core kernel's (ckv_attention_decode_takes_mma)
        return cudaErrorInvalidValue;
    return ckv_pdl_launch(G <= 1   ? attention_decode<HD, 1, LOGITS>
                          : G <= 2 ? attention_decode<HD, 2, LOGITS>
                                   : attention_decode<HD, MAX_CORE_GROUP, LOGITS>,
                          grid, NTH, 0, st, a);
}

// Blocks of the partial pass resident per SM on the current device, by
// head_dim and rounded group; 0 when CUDA cannot say.
template <int HD, int MG>
int resident()
{
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, attention_decode<HD, MG, false>, NTH,
                                                      0) != cudaSuccess) {
        (void)cudaGetLastError();  // not left for the next launch's check
        return 0;
    }
    return blocks;
}

template <int HD>
int resident_hd(int G)
{
    return G <= 1 ? resident<HD, 1>() : G <= 2 ? resident<HD, 2>() : resident<HD, MAX_CORE_GROUP>();
}

}  // namespace

bool ckv_attention_decode_takes_mma(int32_t group, ckv_kv_dtype dtype)
{
    return dtype == CKV_KV_BF16 || group > MAX_CORE_GROUP;
}

int ckv_attention_decode_resident(int32_t head_dim, int32_t group, ckv_kv_dtype dtype)
{
    if (group < 1 || group > MAX_GROUP)
        return 0;
    if (ckv_attention_decode_takes_mma(group, dtype))
        return ckv_attention_decode_mma_resident(head_dim, dtype);
    // Asked once per shape and process (the answer depends on the kernel's
    // registers and the device model; a sweep's GPUs are one model). Racing
    // threads store the same value; -1 keeps a failed query from being
    // asked again at every plan.
    static int known[2][MAX_CORE_GROUP + 1];
    int &r = known[head_dim == 128][group];
    if (!r) {
        const int q = head_dim == 128 ? resident_hd<128>(group) : resident_hd<64>(group);
        r = q > 0 ? q : -1;
    }
    return r > 0 ? r : 0;
}

bool ckv_attention_decode_fits(int32_t n, bool seqs, int32_t n_head, int32_t n_head_kv)
{
    return (seqs || n == 1) && n_head_kv > 0 && n_head % n_head_kv == 0 &&
           n_head / n_head_kv <= MAX_GROUP;
}

cudaError_t ckv_attention_decode(const float *q, int32_t q_stride, int32_t n, int32_t n_head,
                                 int32_t n_head_kv, int32_t head_dim, const ckv_k_kv_layer &c,
                                 const ckv_k_kv_layer *seqs, float scale, bool bias,
                                 ckv_k_attention_split split, float *part_o, float *part_ml,
                                 ckv_decode_scores mode, ckv_kv_dtype dtype, cudaStream_t stream)
{
    if (ckv_attention_decode_takes_mma(n_head / n_head_kv, dtype))
        return ckv_attention_decode_mma(q, q_stride, n, n_head, n_head_kv, head_dim, c, seqs,
                                        scale, bias, split, part_o, part_ml, mode, dtype,
                                        stream);
    if (mode != CKV_DECODE_NONE && mode != CKV_DECODE_NOW)
        return cudaErrorInvalidValue;  // ckv_attention_decode_defers
    const bool logits = mode == CKV_DECODE_NOW;
    const DArgs a = {q,    q_stride, n,    n_head,          n_head_kv, c,      seqs,
                     scale, bias,    split.split_len, part_o, part_ml, nullptr};
    const dim3 grid(n, n_head_kv, split.splits);
    if (head_dim == 64)
        return logits ? launch_hd<64, true>(a, grid, stream) : launch_hd<64, false>(a, grid, stream);
    return logits ? launch_hd<128, true>(a, grid, stream) : launch_hd<128, false>(a, grid, stream);
}

cudaError_t ckv_attention_decode_score(int32_t n, int32_t n_head, int32_t n_head_kv,
                                       const ckv_k_kv_layer &c, const ckv_k_kv_layer *seqs,
                                       ckv_k_attention_split split, const float *ml,
                                       cudaStream_t stream)
{
    DArgs a = {};
    a.n = n;
    a.H = n_head;
    a.KV = n_head_kv;
    a.c = c;
    a.seqs = seqs;
    a.split_len = split.split_len;
    a.ml = ml;
    // The ranges cover every sequence's entries.
    const int64_t entries = (int64_t)split.splits * split.split_len;
    const int blocks = (int)((entries + SCORE_ENTRIES - 1) / SCORE_ENTRIES);
    const int G = n_head / n_head_kv;
    return ckv_pdl_launch(G <= 4 ? attention_decode_score<4> : attention_decode_score<MAX_GROUP>,
                          dim3(n, n_head_kv, blocks), SCORE_THREADS, 0,
                          stream, a);
}
