// What every GPU policy ends with: a dest map per list (slot t kept, -1
// evicted, or merged into slot dest[t] with dest[dest[t]] == dest[t])
// applied to the cache, and the ranking behind the top-k policies.
// CPU twins: ckv_list_apply, ckv_list_keep_top and ckv_rank
// (src/policies/list.c). Merged entries are computed as the CPU computes
// them: in double, the destination's own term first, then its sources in
// slot order, with no fused multiply-add, so the fp32 results are equal; a
// bf16 cache's are then rounded to bf16 as the CPU's ckv_cache_store does.
#include <math.h>

#include <type_traits>

#include <cub/cub.cuh>

#include "cuda_async_copy.cuh"
#include "cuda_bf16.cuh"
#include "cuda_check.h"
#include "cuda_policy.h"

static ckv_status cub_room(ckv_pol *x, size_t bytes, ckv_error *err)
{
    return ckv_pol_grow(x, &x->ws->cub, &x->ws->cub_bytes, bytes, err);
}

ckv_status ckv_pol_sort_desc(ckv_pol *x, ckv_error *err)
{
    ckv_gpu_policy_ws *w = x->ws;
    size_t bytes = 0;
    const int64_t n = (int64_t)w->slots, segs = x->lists;
    CKV_CUDA(cub::DeviceSegmentedSort::StableSortPairsDescending(
        NULL, bytes, w->key, w->key_out, w->ival, w->ival_out, n, segs, x->seg_b, x->seg_e, x->s));
    ckv_status st = cub_room(x, bytes, err);
    if (st)
        return st;
    bytes = w->cub_bytes;
    CKV_CUDA(cub::DeviceSegmentedSort::StableSortPairsDescending(
        w->cub, bytes, w->key, w->key_out, w->ival, w->ival_out, n, segs, x->seg_b, x->seg_e,
        x->s));
    return CKV_OK;
}

// The first k = min(count[list] + extra, segment length) positions of
// ckv_pol_sort_desc's ranking, one block per list, for rounds that use only
// those (a decode-time CSM round ranks ~4,100 candidates a list at 32K and
// reads 65 of them; H2O's and SnapKV's decode-time cuts take the bottom of
// theirs, ckv_pol_keep_top): the segmented sort took its fallback kernel, 0.146 ms
// of the 8B's 1.57 ms call (ncu, run EG). The k-th largest key is found by
// a radix select over an order-keeping 64-bit code of the key, 8 bits a
// pass; the keys above it and the first of those equal to it (in segment,
// i.e. slot, order) are gathered and each is placed by counting the
// gathered keys that rank before it. Keys compare as doubles (ckv_rank's
// order: -0 equals +0), ties by position.
enum { TOP_THREADS = 512 };

__device__ static inline unsigned long long top_code(double k)
{
    const unsigned long long b = (unsigned long long)__double_as_longlong(k == 0.0 ? 0.0 : k);
    return b >> 63 ? ~b : b | 0x8000000000000000ull;  // ascending with k
}

__global__ void __launch_bounds__(TOP_THREADS)
    top_desc_kernel(const double *key, const int32_t *ival, double *key_out, int32_t *ival_out,
                    const int32_t *count, int32_t extra, const int32_t *act,
                    const int32_t *seg_b, const int32_t *seg_e)
{
    typedef cub::BlockScan<int32_t, TOP_THREADS> Scan;
    __shared__ typename Scan::TempStorage tmp;
    __shared__ int32_t hist[256];
    __shared__ unsigned long long sel_code[CKV_POL_TOP_MAX];
    __shared__ int32_t sel_pos[CKV_POL_TOP_MAX];
    __shared__ int32_t pick, left;
    const int32_t lh = blockIdx.x, tid = threadIdx.x;
    if (!act[lh])
        return;
    const int32_t b = seg_b[lh], n = seg_e[lh] - b;
    const int32_t k = min(count[lh] + extra, n);
    if (k <= 0)
        return;
    // Radix select: after the pass of digit d, `prefix` holds the top bits
    // of the k-th largest code and `need` how many of the codes sharing
    // them still rank at or above it.
    unsigned long long prefix = 0, mask = 0;
    int32_t need = k;
    for (int32_t d = 7; d >= 0; d--) {
        const int sh = 8 * d;
        for (int32_t i = tid; i < 256; i += TOP_THREADS)
            hist[i] = 0;
        __syncthreads();
        for (int32_t i = tid; i < n; i += TOP_THREADS) {
            const unsigned long long c = top_code(key[b + i]);
            if ((c & mask) == prefix)
                atomicAdd(&hist[(c >> sh) & 255], 1);
        }
        __syncthreads();
        // above: codes in bins above this thread's bin (bins in descending
        // order: thread t holds bin 255 - t).
        const int32_t h = tid < 256 ? hist[255 - tid] : 0;
        int32_t above;
        Scan(tmp).ExclusiveSum(h, above);
        if (tid < 256 && above < need && above + h >= need) {
            pick = 255 - tid;
            left = need - above;
        }
        __syncthreads();
        prefix |= (unsigned long long)pick << sh;
        mask |= 255ull << sh;
        need = left;
        __syncthreads();  // pick and left are written again next pass
    }
    // Gather, in position order: every code above the k-th, and the first
    // `need` of those equal to it.
    int32_t eq_seen = 0, taken = 0;
    for (int32_t i0 = 0; i0 < n; i0 += TOP_THREADS) {
        const int32_t i = i0 + tid;
        const unsigned long long c = i < n ? top_code(key[b + i]) : 0;
        const bool eq = i < n && c == prefix;
        int32_t eq_before, eq_total;
        Scan(tmp).ExclusiveSum(eq ? 1 : 0, eq_before, eq_total);
        __syncthreads();
        const bool sel = i < n && (c > prefix || (eq && eq_seen + eq_before < need));
        int32_t at, sel_total;
        Scan(tmp).ExclusiveSum(sel ? 1 : 0, at, sel_total);
        __syncthreads();
        if (sel) {
            sel_code[taken + at] = c;
            sel_pos[taken + at] = i;
        }
        eq_seen += eq_total;
        taken += sel_total;
    }
    __syncthreads();
    for (int32_t j = tid; j < k; j += TOP_THREADS) {
        const unsigned long long c = sel_code[j];
        const int32_t pos = sel_pos[j];
        int32_t rank = 0;
        for (int32_t o = 0; o < k; o++)
            rank += sel_code[o] > c || (sel_code[o] == c && sel_pos[o] < pos);
        key_out[b + rank] = key[b + pos];
        ival_out[b + rank] = ival[b + pos];
    }
}

ckv_status ckv_pol_top_desc(ckv_pol *x, const int32_t *count, int32_t extra, ckv_error *err)
{
    ckv_gpu_policy_ws *w = x->ws;
    top_desc_kernel<<<x->lists, TOP_THREADS, 0, x->s>>>(w->key, w->ival, w->key_out, w->ival_out,
                                                         count, extra, x->act, x->seg_b,
                                                         x->seg_e);
    CKV_CUDA_LAUNCHED();
    return CKV_OK;
}

// cub's segmented sort policy for sm_86 on (Policy860 of its tuning for
// int keys and values) with ITEMS keys a thread in the radix sort of a
// large segment. At cub's 23 a block holds 256 x 23 = 5,888 keys (one pass
// for a segment that fits) and one block an SM; at 11 it takes 128
// registers and two blocks an SM, so the 8B's 256 lists of multi-pass
// segments run in one wave, not two (a probe's, fifty-fourth session).
template <int ITEMS>
struct sort_hub {
    struct Policy : cub::ChainedPolicy<860, Policy, Policy> {
        static constexpr int BLOCK_THREADS = 256;
        static constexpr int PARTITIONING_THRESHOLD = 500;
        using LargeSegmentPolicy =
            cub::AgentRadixSortDownsweepPolicy<BLOCK_THREADS, ITEMS, int32_t,
                                               cub::BLOCK_LOAD_TRANSPOSE, cub::LOAD_DEFAULT,
                                               cub::RADIX_RANK_MEMOIZE,
                                               cub::BLOCK_SCAN_WARP_SCANS, 6>;
        static constexpr int ITEMS_PER_SMALL_THREAD = 9;
        static constexpr int ITEMS_PER_MEDIUM_THREAD = 7;
        using SmallAndMediumSegmentedSortPolicyT = cub::AgentSmallAndMediumSegmentedSortPolicy<
            BLOCK_THREADS,
            cub::AgentSubWarpMergeSortPolicy<2, ITEMS_PER_SMALL_THREAD, cub::WARP_LOAD_TRANSPOSE,
                                             cub::LOAD_LDG>,
            cub::AgentSubWarpMergeSortPolicy<16, ITEMS_PER_MEDIUM_THREAD,
                                             cub::WARP_LOAD_TRANSPOSE, cub::LOAD_LDG>>;
    };
    using MaxPolicy = Policy;
};
enum { SORT_ONE_PASS = 256 * 23 };

// ckv_pol_sort_int's sort (tmp NULL: cub's room into bytes), stable, with
// ITEMS keys a thread (sort_hub).
template <int ITEMS>
static cudaError_t sort_int_items(ckv_pol *x, const int32_t *seg_e, void *tmp, size_t &bytes)
{
    ckv_gpu_policy_ws *w = x->ws;
    using Offset = cub::detail::choose_signed_offset_t<int32_t>;
    using Sort = cub::DispatchSegmentedSort<cub::SortOrder::Ascending, int32_t, int32_t, Offset,
                                            const int32_t *, const int32_t *, sort_hub<ITEMS>>;
    cub::DoubleBuffer<int32_t> keys(w->ikey, w->ikey_out), vals(w->ival, w->ival_out);
    return Sort::Dispatch(tmp, bytes, keys, vals, (int64_t)w->slots, (int64_t)x->lists,
                          x->seg_b, seg_e, false, x->s);
}

// ckv_pol_sort_int in cub's room: the 11 where more lists than SMs have a
// segment past the 23's one pass by the host plan's segments (K-Means's:
// each at least the sorted one), the 23 otherwise (the apply's: the plan's
// are empty there, the sources counted on the device).
static ckv_status sort_int_call(ckv_pol *x, const int32_t *seg_e, ckv_error *err)
{
    int dev, sms;
    CKV_CUDA(cudaGetDevice(&dev));
    CKV_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int32_t *act = ckv_pol_h(x, PLAN_ACT), *sb = ckv_pol_h(x, PLAN_SEG_B),
                  *se = ckv_pol_h(x, PLAN_SEG_E);
    int32_t long_segs = 0;
    for (int32_t lh = 0; lh < x->lists; lh++)
        long_segs += act[lh] && se[lh] - sb[lh] > SORT_ONE_PASS;
    size_t bytes = x->ws->cub_bytes;
    if (long_segs > sms)
        CKV_CUDA(sort_int_items<11>(x, seg_e, x->ws->cub, bytes));
    else
        CKV_CUDA(sort_int_items<23>(x, seg_e, x->ws->cub, bytes));
    return CKV_OK;
}

// cub's room for ckv_pol_sort_int, either form's: its query depends on
// the sizes only, so a caller can grow it before anything changes the
// cache or the plan.
static ckv_status sort_int_room(ckv_pol *x, ckv_error *err)
{
    size_t b11 = 0, b23 = 0;
    CKV_CUDA(sort_int_items<11>(x, x->seg_e, NULL, b11));
    CKV_CUDA(sort_int_items<23>(x, x->seg_e, NULL, b23));
    return cub_room(x, b11 > b23 ? b11 : b23, err);
}

ckv_status ckv_pol_sort_int(ckv_pol *x, const int32_t *seg_e, ckv_error *err)
{
    ckv_status st = sort_int_room(x, err);
    return st ? st : sort_int_call(x, seg_e, err);
}

// Marks where each key's run begins and ends in the sorted keys of a
// segment. Positions are absolute indices of ikey_out.
__global__ void runs_kernel(const int32_t *key, int32_t *run_b, int32_t *run_e,
                            const int32_t *act, const int32_t *seg_b, const int32_t *seg_e,
                            int32_t cap)
{
    const int32_t lh = blockIdx.y;
    if (!act[lh])
        return;
    const int64_t b = seg_b[lh], e = seg_e[lh];
    const int64_t i = b + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < e)
        ckv_pol_run_mark(key, b, e, i, run_b + (size_t)lh * cap, run_e + (size_t)lh * cap);
}

ckv_status ckv_pol_runs(ckv_pol *x, int32_t max_seg, ckv_error *err)
{
    dim3 grid(ckv_pol_blocks(max_seg, 256), x->lists);
    runs_kernel<<<grid, 256, 0, x->s>>>(x->ws->ikey_out, x->ws->run_b, x->ws->run_e, x->act,
                                        x->seg_b, x->seg_e, x->cap);
    CKV_CUDA_LAUNCHED();
    return CKV_OK;
}

// No runs yet.
__global__ void apply_prep_kernel(int32_t *run_b, const int32_t *act, const int32_t *T,
                                  int32_t cap)
{
    const int32_t lh = blockIdx.y, t = blockIdx.x * blockDim.x + threadIdx.x;
    if (act[lh] && t < T[lh])
        run_b[(size_t)lh * cap + t] = -1;
}

// newslot[t]: kept slots before t; the list's new length. With merges also
// the list's sources in slot order, compacted for the sort by destination:
// ikey their destinations, ival their slots, seg_e the segment's end (a
// sort of every slot, most of them no source, was 0.12 ms of run AA's 32K
// CSM call). One block per list, SCAN_EACH consecutive slots a thread: a
// 32,832-slot list takes 9 rounds of loads, scans and stores, not 33 of
// one slot a thread. Two blocks an SM (64 registers): the 8B's 256 lists
// in one wave.
enum { SCAN_THREADS = 512, SCAN_EACH = 8, SCAN_TILE = SCAN_THREADS * SCAN_EACH };

__global__ void __launch_bounds__(SCAN_THREADS, 2)
    apply_scan_kernel(const int32_t *dest, int32_t *newslot, int32_t *newlen, ckv_pol_caches cs,
                      int32_t *ikey, int32_t *ival, int32_t *seg_e, bool merges,
                      const int32_t *act, const int32_t *T, int32_t cap)
{
    typedef cub::BlockLoad<int32_t, SCAN_THREADS, SCAN_EACH, cub::BLOCK_LOAD_WARP_TRANSPOSE>
        Load;
    typedef cub::BlockStore<int32_t, SCAN_THREADS, SCAN_EACH, cub::BLOCK_STORE_WARP_TRANSPOSE>
        Store;
    typedef cub::BlockScan<int32_t, SCAN_THREADS> Scan;
    __shared__ union {
        typename Load::TempStorage load;
        typename Store::TempStorage store;
        typename Scan::TempStorage scan;
    } tmp;
    const int32_t lh = blockIdx.x;
    if (!act[lh])
        return;
    const int32_t n = T[lh];
    const size_t base = (size_t)lh * cap;
    int32_t kept = 0, sources = 0;
    for (int32_t t0 = 0; t0 < n; t0 += SCAN_TILE) {
        // Blocked: slots t .. t + SCAN_EACH - 1 are this thread's; past n
        // d is -1, neither kept nor a source.
        const int32_t valid = min(n - t0, (int32_t)SCAN_TILE);
        const int32_t t = t0 + (int32_t)threadIdx.x * SCAN_EACH;
        int32_t d[SCAN_EACH], v[SCAN_EACH], ex[SCAN_EACH], total;
        Load(tmp.load).Load(dest + base + t0, d, valid, -1);
        __syncthreads();  // tmp is reused by each step below
#pragma unroll
        for (int i = 0; i < SCAN_EACH; i++)
            v[i] = d[i] == t + i;
        Scan(tmp.scan).ExclusiveSum(v, ex, total);
#pragma unroll
        for (int i = 0; i < SCAN_EACH; i++)
            ex[i] += kept;
        kept += total;
        __syncthreads();
        Store(tmp.store).Store(newslot + base + t0, ex, valid);
        __syncthreads();
        if (merges) {
#pragma unroll
            for (int i = 0; i < SCAN_EACH; i++)
                v[i] = d[i] >= 0 && d[i] != t + i;
            Scan(tmp.scan).ExclusiveSum(v, ex, total);
#pragma unroll
            for (int i = 0; i < SCAN_EACH; i++)
                if (v[i]) {
                    ikey[base + sources + ex[i]] = d[i];
                    ival[base + sources + ex[i]] = t + i;
                }
            sources += total;
            __syncthreads();
        }
    }
    if (threadIdx.x == 0) {
        newlen[lh] = kept;
        *ckv_pol_list_of(cs, lh, cap, 0).len_d = kept;
        if (merges)
            seg_e[lh] = (int32_t)base + sources;
    }
}

// V elements of type Elem (float or ckv_bf16, the cache's) of a row moved at
// once: wide loads and stores when the head dimension allows, so a
// thread's index and run lookups serve V elements; each element's
// arithmetic is the same for any V.
template <typename Elem, int V>
struct __align__(sizeof(Elem) * V) Lanes {
    Elem e[V];
};

// The compaction works in place, as the CPU's does: first every merge
// destination becomes its degree-weighted centroid in its own slot, then
// every list's surviving rows move left to their new slots. In place saves
// the scratch copy of the cache and the pass that copied it back (run U:
// 0.42 + 0.27 ms of the 8B shape's 1.3 ms decode-time CSM call at 8K).

// A destination is never a source (dest[dest[t]] == dest[t]), so no thread
// reads a key or value that another writes. The new degree and score go to
// mdeg and mscore, not the cache: the other threads of the row still read
// the old degree. One thread per (destination, V dimensions) of slot t;
// rows through the list's map (ckv_pol_list::row_of).
template <typename Elem, int V>
__device__ static void merge_row(const ckv_pol_list &li, float *mdeg, float *mscore,
                                 const int32_t *run_e, const int32_t *src, int32_t lh,
                                 int32_t cap, int32_t t, int32_t rb, int32_t i, int32_t dv)
{
    typedef Lanes<Elem, V> L;
    L *kl = static_cast<L *>(li.k), *vl = static_cast<L *>(li.v);
    const float *deg = li.deg, *score = li.score;
    const size_t base = (size_t)lh * cap, slot = base + t;
    const size_t row = li.row_of(t);
    const int32_t re = run_e[slot];
    const L k0 = kl[row * dv + i], v0 = vl[row * dv + i];
    double a0 = deg[row], ak[V], av[V];
#pragma unroll
    for (int e = 0; e < V; e++) {
        ak[e] = __dmul_rn((double)deg[row], (double)ckv_kv_get(k0.e, e));
        av[e] = __dmul_rn((double)deg[row], (double)ckv_kv_get(v0.e, e));
    }
    float sc = score ? score[row] : 0.0f;
    for (int32_t r = rb; r < re; r++) {
        const size_t s = li.row_of(src[r]);
        const double ds = deg[s];
        const L ks = kl[s * dv + i], vs = vl[s * dv + i];
        a0 = __dadd_rn(a0, ds);
#pragma unroll
        for (int e = 0; e < V; e++) {
            ak[e] = __dadd_rn(ak[e], __dmul_rn(ds, (double)ckv_kv_get(ks.e, e)));
            av[e] = __dadd_rn(av[e], __dmul_rn(ds, (double)ckv_kv_get(vs.e, e)));
        }
        if (score)
            sc = __fadd_rn(sc, score[s]);
    }
    L ko, vo;
#pragma unroll
    for (int e = 0; e < V; e++) {
        ckv_kv_put(ko.e, e, __double2float_rn(__ddiv_rn(ak[e], a0)));
        ckv_kv_put(vo.e, e, __double2float_rn(__ddiv_rn(av[e], a0)));
    }
    kl[row * dv + i] = ko;
    vl[row * dv + i] = vo;
    if (i == 0) {
        mdeg[slot] = __double2float_rn(a0);
        if (score)
            mscore[slot] = sc;
    }
}

// A warp per position of the sorted sources (ikey_out: their destinations,
// ascending, up to seg_e); the warp at a run's first source merges its
// destination. The grid covers max_sources positions, not every slot: a
// thread per slot made the kernel 0.10 ms of mostly idle threads for the 64
// merges a list of run Y's 8K call. At most MERGE_LIST_BLOCKS blocks a list,
// whose warps stride over the positions: K-Means knows only that a list has
// fewer sources than middle rows, and a block per 8 of those (1,024 a list at
// SmolLM2's 32K decode-time call, for its 64 sources) took 64 us (228 at
// 128K) to start and leave (run ZZ12).
enum { MERGE_WARPS = 8, MERGE_LIST_BLOCKS = 32 };

template <typename Elem, int V>
__global__ void __launch_bounds__(MERGE_WARPS * 32)
    apply_merge_kernel(ckv_pol_caches cs, float *mdeg, float *mscore, const int32_t *key,
                       const int32_t *run_b, const int32_t *run_e, const int32_t *src,
                       const int32_t *act, const int32_t *seg_e, int32_t cap, int32_t d)
{
    const int32_t lh = blockIdx.y, dv = d / V, lane = threadIdx.x & 31;
    const size_t base = (size_t)lh * cap;
    if (!act[lh])
        return;
    const ckv_pol_list li = ckv_pol_list_of(cs, lh, cap, (size_t)d * sizeof(Elem));
    const int64_t n = seg_e[lh] - (int64_t)base;
    for (int64_t p = blockIdx.x * MERGE_WARPS + (threadIdx.x >> 5); p < n;
         p += (int64_t)gridDim.x * MERGE_WARPS) {
        const int32_t t = key[base + p];
        if (p > 0 && key[base + p - 1] == t)
            continue;
        const int32_t rb = run_b[base + t];
        for (int32_t i = lane; i < dv; i += 32)
            merge_row<Elem, V>(li, mdeg, mscore, run_e, src, lh, cap, t, rb, i, dv);
    }
}

// A block per window of SHIFT_THREADS * SHIFT_UNROLL (row, V dimensions)
// elements of a list: each thread copies its elements into shared memory
// (cp.async: no registers held, so six blocks an SM keep loads in flight
// while others wait on their flags: 83% of copy, the 8B's 128K shift 2.47
// -> 2.24 ms, run ZZ47; in registers, at 64 a thread, two blocks of 512
// did, 74%: run ZZ35), the block meets, then each stores them at the new
// slot. One block walking a list's windows in turn left SmolLM2's 90 lists
// on 90 SMs a window at a time (0.20 ms of its 32K decode-time K-Means call
// under ncu, 45% of copy bandwidth: run ZH).
// A row only moves left (newslot[t] <= t), so a window's stores land on
// rows of its own window (loaded before the barrier) or of earlier ones:
// each block flags its loads done, then waits for the flags of the windows
// its stores reach. Blocks take windows in the order they start (a ticket
// from sync[0]), so a window waited on is held by a block already started,
// which flags without waiting: no cycle, no wait on a block not resident.
// Rows that neither move nor merged are not touched. Elements only move: a
// bf16 row is half an fp32 row's bytes, and 8 bf16 fill the 16 bytes a
// thread moves as 4 floats do.
enum { SHIFT_THREADS = 256, SHIFT_UNROLL = 4, SHIFT_WINDOW = SHIFT_THREADS * SHIFT_UNROLL };

// What the shift moves for V elements: the same bytes as 32-bit words where
// they fill whole words, so 8 bf16 move as 4 floats do (as 16-bit lanes
// they took 8 registers a load: 64 bytes of spills at 64 registers).
template <typename Elem, int V>
using ShiftLanes = typename std::conditional<sizeof(Elem) * V % 4 == 0,
                                             Lanes<uint32_t, sizeof(Elem) * V / 4>,
                                             Lanes<Elem, V>>::type;

// One element's copy into shared memory: cp.async where it takes the size
// (4, 8 or 16 bytes); a bf16 element alone (odd head_dims) by a load.
template <typename L>
__device__ __forceinline__ void shift_stage(L *dst, const L *src)
{
    if constexpr (sizeof(L) == 16)
        ckv_cp_async16(dst, src, true);
    else if constexpr (sizeof(L) == 8)
        ckv_cp_async8(dst, src, true);
    else if constexpr (sizeof(L) == 4)
        ckv_cp_async4(dst, src, true);
    else
        *dst = *src;
}

// sync: the ticket, then a flag per window ([lists][windows]), zero at the
// launch.
template <typename Elem, int V>
__global__ void __launch_bounds__(SHIFT_THREADS, 6)
    apply_shift_kernel(ckv_pol_caches cs, const float *mdeg,
                       const float *mscore, const int32_t *dest, const int32_t *newslot,
                       const int32_t *run_b, const int32_t *act, const int32_t *T, int32_t *sync,
                       int32_t windows, int32_t cap, int32_t d, bool merges)
{
    typedef ShiftLanes<Elem, V> L;
    __shared__ L ks[SHIFT_UNROLL][SHIFT_THREADS], vs[SHIFT_UNROLL][SHIFT_THREADS];
    __shared__ int32_t ticket;
    __shared__ uint32_t reach;  // the lowest element this window stores
    if (threadIdx.x == 0) {
        ticket = atomicAdd(sync, 1);
        reach = UINT32_MAX;
    }
    __syncthreads();
    const int32_t lh = ticket / windows, win = ticket % windows, dv = d / V;
    if (!act[lh])
        return;
    const size_t base = (size_t)lh * cap;
    const ckv_pol_list li = ckv_pol_list_of(cs, lh, cap, (size_t)d * sizeof(Elem));
    L *kl = static_cast<L *>(li.k), *vl = static_cast<L *>(li.v);
    float *deg = li.deg, *score = li.score;
    // 32-bit element indices (the host checks capacity x dv fits): a 64-bit
    // division is a call with branches, which kept the loads below apart.
    const uint32_t elems = (uint32_t)T[lh] * (uint32_t)dv, w0 = (uint32_t)win * SHIFT_WINDOW;
    if (w0 >= elems)
        return;  // so are the list's later windows: none waits on this one
    int32_t to[SHIFT_UNROLL], row_to[SHIFT_UNROLL];  // -1: nothing to store
    bool merged[SHIFT_UNROLL];
    float dg[SHIFT_UNROLL], sc[SHIFT_UNROLL];
    // The maps of every element first, then the rows: the loads of each
    // phase overlap instead of queuing behind the previous element's tests.
    uint32_t low = UINT32_MAX;
#pragma unroll
    for (int u = 0; u < SHIFT_UNROLL; u++) {
        const uint32_t idx = w0 + u * SHIFT_THREADS + threadIdx.x;
        const bool in = idx < elems;
        const int32_t t = in ? (int32_t)(idx / dv) : 0;
        const int32_t dt = in ? dest[base + t] : -1, n = in ? newslot[base + t] : t;
        merged[u] = merges && in && run_b[base + t] >= 0;
        to[u] = dt == t && n != t ? n : -1;
        row_to[u] = dt == t && idx % dv == 0 && (n != t || merged[u]) ? n : -1;
        if (to[u] >= 0)
            low = min(low, (uint32_t)to[u] * dv);
    }
#pragma unroll
    for (int u = 0; u < SHIFT_UNROLL; u++) {
        const uint32_t idx = w0 + u * SHIFT_THREADS + threadIdx.x;
        const int32_t t = (int32_t)(idx / dv), i = (int32_t)(idx % dv);
        if (to[u] >= 0) {
            shift_stage(&ks[u][threadIdx.x], kl + (size_t)t * dv + i);
            shift_stage(&vs[u][threadIdx.x], vl + (size_t)t * dv + i);
        }
        if (row_to[u] >= 0) {
            dg[u] = merged[u] ? mdeg[base + t] : deg[t];
            sc[u] = score ? (merged[u] ? mscore[base + t] : score[t]) : 0.0f;
        }
    }
    ckv_cp_async_commit();
    ckv_cp_async_wait<0>();
    if (low != UINT32_MAX)
        atomicMin(&reach, low);
    __syncthreads();
    // Release this window's loads, then acquire the flags of the windows
    // from the one holding `reach` up to this one (cooperative groups' grid
    // barrier pattern: fence, flag; poll, fence).
    int32_t *flag = sync + 1 + (size_t)lh * windows;
    if (threadIdx.x == 0) {
        __threadfence();
        atomicExch(&flag[win], 1);
    }
    // A merged row that does not move stores its degree in place (its own
    // window); only moved elements reach earlier ones.
    if (reach != UINT32_MAX) {
        for (int32_t j = (int32_t)(reach / SHIFT_WINDOW) + threadIdx.x; j < win;
             j += SHIFT_THREADS)
            while (*(volatile int32_t *)&flag[j] == 0)
                ;
        __threadfence();
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < SHIFT_UNROLL; u++) {
        const int32_t i = (int32_t)((w0 + u * SHIFT_THREADS + threadIdx.x) % (uint32_t)dv);
        if (to[u] >= 0) {
            kl[(size_t)to[u] * dv + i] = ks[u][threadIdx.x];
            vl[(size_t)to[u] * dv + i] = vs[u][threadIdx.x];
        }
        if (row_to[u] >= 0) {
            deg[row_to[u]] = dg[u];
            if (score)
                score[row_to[u]] = sc[u];
        }
    }
}

// The fill: the survivors' rows stay where they are, the rows of removed
// slots below the new length n are holes, and the surviving rows at n and
// past it move into them, the k-th such row (in row order) into the k-th
// hole, so that rows [0, n) hold the list again; the cache's map keeps the
// slot order (ckv_gpu_cache). A decode-time call of centroid removes about
// 64 slots a list and so moves at most that many rows, where the shift moves
// every row after the first removed slot (0.80 of the 8B's 1.26 ms call at
// 25% of 32K). Holes lie below n and moving rows at n or past it, so no row
// is both read and written: one launch moves them all.

// A thread per slot: its row's slot, or -1 where the slot goes; a merged
// destination's new degree and score into its row.
__global__ void fill_mark_kernel(int32_t *row_slot, ckv_pol_caches cs, const float *mdeg,
                                 const float *mscore, const int32_t *dest, const int32_t *run_b,
                                 bool merges, const int32_t *act, const int32_t *T, int32_t cap)
{
    const int32_t lh = blockIdx.y, t = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || t >= T[lh])
        return;
    const size_t base = (size_t)lh * cap;
    const ckv_pol_list li = ckv_pol_list_of(cs, lh, cap, 0);
    const int32_t r = li.row_of(t);
    const bool kept = dest[base + t] == t;
    row_slot[base + r] = kept ? t : -1;
    if (kept && merges && run_b[base + t] >= 0) {
        li.deg[r] = mdeg[base + t];
        if (li.score)
            li.score[r] = mscore[base + t];
    }
}

typedef cub::BlockScan<int32_t, SCAN_THREADS> FillScan;

// Appends rows r .. r + SCAN_EACH - 1 of this thread whose flag is set to
// out[count ..] in row order across the block, and adds the block's total
// to count (every thread's).
__device__ static void fill_append(FillScan::TempStorage &tmp,
                                   int32_t (&flag)[SCAN_EACH], int32_t r, int32_t *out,
                                   int32_t &count)
{
    int32_t at[SCAN_EACH], total;
    FillScan(tmp).ExclusiveSum(flag, at, total);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < SCAN_EACH; i++)
        if (flag[i])
            out[count + at[i]] = r + i;
    count += total;
}

// A block per list: the holes and the moving rows in row order (fill_to,
// fill_from, fill_n), and the map of every slot whose row stays. Blocked,
// SCAN_EACH consecutive rows a thread, as apply_scan_kernel.
__global__ void __launch_bounds__(SCAN_THREADS, 2)
    fill_plan_kernel(ckv_pol_caches cs, int32_t *fill_to, int32_t *fill_from, int32_t *fill_n,
                     const int32_t *row_slot, const int32_t *newslot, const int32_t *newlen,
                     const int32_t *act, const int32_t *T, int32_t cap)
{
    __shared__ FillScan::TempStorage tmp;
    const int32_t lh = blockIdx.x;
    if (!act[lh])
        return;
    const int32_t len = T[lh], n = newlen[lh];
    const size_t base = (size_t)lh * cap;
    const ckv_pol_list li = ckv_pol_list_of(cs, lh, cap, 0);
    int32_t holes = 0, movers = 0;
    for (int32_t r0 = 0; r0 < len; r0 += SCAN_TILE) {
        const int32_t r = r0 + (int32_t)threadIdx.x * SCAN_EACH;
        int32_t sl[SCAN_EACH], h[SCAN_EACH], m[SCAN_EACH];
#pragma unroll
        for (int i = 0; i < SCAN_EACH; i++) {
            sl[i] = r + i < len ? row_slot[base + r + i] : -1;
            h[i] = r + i < n && sl[i] < 0;
            m[i] = r + i >= n && r + i < len && sl[i] >= 0;
            if (r + i < n && sl[i] >= 0)
                li.map[newslot[base + sl[i]]] = r + i;
        }
        fill_append(tmp, h, r, fill_to + base, holes);
        fill_append(tmp, m, r, fill_from + base, movers);
    }
    if (threadIdx.x == 0) {
        fill_n[lh] = holes;  // == movers: both are the rows below n that no survivor holds
        *li.map_len = n;
    }
}

// Each moving row's V elements a thread (FILL_LIST_BLOCKS blocks a list
// striding over them), its degree and score with its first, and its slot's
// map entry.
enum { FILL_THREADS = 256, FILL_LIST_BLOCKS = 16 };

template <typename L>
__global__ void __launch_bounds__(FILL_THREADS)
    fill_move_kernel(ckv_pol_caches cs, const int32_t *fill_to, const int32_t *fill_from,
                     const int32_t *fill_n, const int32_t *row_slot, const int32_t *newslot,
                     const int32_t *act, int32_t cap, int32_t dv)
{
    const int32_t lh = blockIdx.y;
    if (!act[lh])
        return;
    const size_t base = (size_t)lh * cap;
    const ckv_pol_list li = ckv_pol_list_of(cs, lh, cap, sizeof(L) * dv);
    L *k = static_cast<L *>(li.k), *v = static_cast<L *>(li.v);
    const int64_t n = (int64_t)fill_n[lh] * dv;
    for (int64_t idx = (int64_t)blockIdx.x * FILL_THREADS + threadIdx.x; idx < n;
         idx += (int64_t)gridDim.x * FILL_THREADS) {
        const int32_t j = (int32_t)(idx / dv), i = (int32_t)(idx % dv);
        const int32_t from = fill_from[base + j], to = fill_to[base + j];
        k[(size_t)to * dv + i] = k[(size_t)from * dv + i];
        v[(size_t)to * dv + i] = v[(size_t)from * dv + i];
        if (i == 0) {
            li.deg[to] = li.deg[from];
            if (li.score)
                li.score[to] = li.score[from];
            li.map[newslot[base + row_slot[base + from]]] = to;
        }
    }
}

// The shift's windows a list for up to max_t rows at per elements a lane,
// and the bytes of its ticket and flags (one a window a list).
static int32_t shift_windows(const ckv_pol *x, int32_t max_t, int32_t per)
{
    return (int32_t)ckv_pol_blocks((int64_t)max_t * (x->d / per), SHIFT_WINDOW);
}

static size_t shift_sync_bytes(const ckv_pol *x, int32_t windows)
{
    return (1 + (size_t)x->lists * windows) * sizeof(int32_t);
}

// Merges V_MERGE elements a thread (4 when the head dimension allows, for
// either type: a warp per destination keeps d / 4 lanes busy), shifts
// V_SHIFT (16 bytes when the head dimension allows).
template <typename Elem, int V_MERGE, int V_SHIFT>
static ckv_status apply_rows(ckv_pol *x, int32_t max_sources, int32_t max_t, ckv_error *err)
{
    ckv_gpu_policy_ws *w = x->ws;
    const bool merges = max_sources > 0;
    if (merges) {
        const unsigned per = ckv_pol_blocks(max_sources, MERGE_WARPS), most = MERGE_LIST_BLOCKS;
        const dim3 grid(per < most ? per : most, x->lists);
        apply_merge_kernel<Elem, V_MERGE><<<grid, MERGE_WARPS * 32, 0, x->s>>>(
            x->tab, w->deg, w->score, w->ikey_out, w->run_b, w->run_e, w->ival_out, x->act,
            x->seg_e, x->cap, x->d);
        CKV_CUDA_LAUNCHED();  // a refused merge must not be followed by the shift
    }
    if (x->fill) {
        typedef ShiftLanes<Elem, V_SHIFT> L;
        const dim3 slots(ckv_pol_blocks(max_t, 256), x->lists);
        fill_mark_kernel<<<slots, 256, 0, x->s>>>(w->row_slot, x->tab, w->deg, w->score, w->dest,
                                                  w->run_b, merges, x->act, x->T, x->cap);
        CKV_CUDA_LAUNCHED();
        // A list no call has mapped yet maps no slot. The table keeps each
        // cache's flag as it was (the kernels above read rows through it);
        // a cache whose lists took no part is left as it is.
        for (int32_t i = 0; i < x->n; i++) {
            ckv_gpu_cache *c = x->cs[i];
            if (!c->mapped && ckv_pol_cache_active(x, i))
                CKV_CUDA(cudaMemsetAsync(c->row_len, 0, x->per * sizeof(int32_t), x->s));
        }
        fill_plan_kernel<<<x->lists, SCAN_THREADS, 0, x->s>>>(
            x->tab, w->fill_to, w->fill_from, w->fill_n, w->row_slot, w->newslot, w->newlen,
            x->act, x->T, x->cap);
        CKV_CUDA_LAUNCHED();
        const int32_t dv = x->d / V_SHIFT;
        const unsigned per = ckv_pol_blocks((int64_t)max_t * dv, FILL_THREADS),
                       most = FILL_LIST_BLOCKS;
        const dim3 grid(per < most ? per : most, x->lists);
        fill_move_kernel<L><<<grid, FILL_THREADS, 0, x->s>>>(
            x->tab, w->fill_to, w->fill_from, w->fill_n, w->row_slot, w->newslot, x->act, x->cap,
            dv);
        CKV_CUDA_LAUNCHED();
        for (int32_t i = 0; i < x->n; i++)
            if (ckv_pol_cache_active(x, i))
                x->cs[i]->mapped = true;
        return CKV_OK;
    }
    // shift_sync holds these (ckv_pol_apply took it for one element a lane).
    const int32_t windows = shift_windows(x, max_t, V_SHIFT);
    CKV_CUDA(cudaMemsetAsync(w->shift_sync, 0, shift_sync_bytes(x, windows), x->s));
    // Six blocks' 32 KB of windows an SM only with the largest carveout
    // (the driver's own choice may stop at five).
    ckv_status st = ckv_pol_allow_smem(apply_shift_kernel<Elem, V_SHIFT>, 0, "cuda compact", err);
    if (st)
        return st;
    apply_shift_kernel<Elem, V_SHIFT><<<x->lists * windows, SHIFT_THREADS, 0, x->s>>>(
        x->tab, w->deg, w->score, w->dest, w->newslot, w->run_b, x->act, x->T, w->shift_sync,
        windows, x->cap, x->d, merges);
    CKV_CUDA_LAUNCHED();
    return CKV_OK;
}

// The instance for the cache's type and head dimension.
static ckv_status apply_rows_of(ckv_pol *x, int32_t max_sources, int32_t max_t, ckv_error *err)
{
    const int32_t d = x->d;
    if (x->c->dtype == CKV_KV_BF16)
        return d % 8 == 0   ? apply_rows<ckv_bf16, 4, 8>(x, max_sources, max_t, err)
               : d % 4 == 0 ? apply_rows<ckv_bf16, 4, 1>(x, max_sources, max_t, err)
                            : apply_rows<ckv_bf16, 1, 1>(x, max_sources, max_t, err);
    return d % 4 == 0 ? apply_rows<float, 4, 4>(x, max_sources, max_t, err)
                      : apply_rows<float, 1, 1>(x, max_sources, max_t, err);
}

// assign[i] (a current slot) becomes the slot it ends in, -1 if evicted.
__global__ void apply_assign_kernel(int32_t *assign, const int32_t *dest, const int32_t *newslot,
                                    const int32_t *act, int32_t cap)
{
    const int32_t lh = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || i >= cap)
        return;
    const size_t base = (size_t)lh * cap;
    const int32_t a = assign[base + i];
    if (a < 0)
        return;
    const int32_t dd = dest[base + a];
    assign[base + i] = dd < 0 ? -1 : newslot[base + dd];
}

ckv_status ckv_pol_apply(ckv_pol *x, int32_t max_sources, ckv_error *err)
{
    // Before anything changes the cache: the shift's element indices are
    // 32-bit (a list's capacity x head_dim, with a window's slack).
    if ((int64_t)x->cap * x->d + SHIFT_WINDOW > UINT32_MAX)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "cuda policy: a list of %d entries x head_dim %d is over the "
                          "compaction's 32-bit indices",
                          x->cap, x->d);
    const bool merges = max_sources > 0;
    ckv_gpu_policy_ws *w = x->ws;
    const int32_t max_t = ckv_pol_max_row(x, PLAN_T);
    if (max_t == 0)
        return CKV_OK;
    const int32_t *act = ckv_pol_h(x, PLAN_ACT), *T = ckv_pol_h(x, PLAN_T);
    dim3 slots(ckv_pol_blocks(max_t, 256), x->lists);
    // The shift's ticket and flags, before the merge changes the cache: a
    // failed growth there would leave the lists merged but not shifted.
    ckv_status st = ckv_pol_grow(x, reinterpret_cast<void **>(&w->shift_sync),
                                 &w->shift_sync_bytes,
                                 shift_sync_bytes(x, shift_windows(x, max_t, 1)), err);
    // Likewise the merge's sort's room, before the scan writes the lengths.
    if (st || (merges && (st = sort_int_room(x, err))))
        return st;
    if (merges) {
        // The segments' ends are the scan's (device); empty until then.
        int32_t *sb = ckv_pol_h(x, PLAN_SEG_B), *se = ckv_pol_h(x, PLAN_SEG_E);
        for (int32_t lh = 0; lh < x->lists; lh++)
            se[lh] = sb[lh] = lh * x->cap;
        if ((st = ckv_pol_upload_plan(x, err)))
            return st;
        apply_prep_kernel<<<slots, 256, 0, x->s>>>(w->run_b, x->act, x->T, x->cap);
        CKV_CUDA_LAUNCHED();
    }
    apply_scan_kernel<<<x->lists, SCAN_THREADS, 0, x->s>>>(w->dest, w->newslot, w->newlen,
                                                          x->tab, w->ikey, w->ival, x->seg_e,
                                                          merges, x->act, x->T, x->cap);
    CKV_CUDA_LAUNCHED();
    if (merges &&
        ((st = ckv_pol_sort_int(x, x->seg_e, err)) || (st = ckv_pol_runs(x, max_sources, err))))
        return st;
    if ((st = apply_rows_of(x, max_sources, max_t, err)))
        return st;
    if (x->track_assign) {
        dim3 all(ckv_pol_blocks(x->cap, 256), x->lists);
        apply_assign_kernel<<<all, 256, 0, x->s>>>(w->assign, w->dest, w->newslot, x->act,
                                                   x->cap);
        CKV_CUDA_LAUNCHED();
    }
    CKV_CUDA(cudaMemcpyAsync(w->h_newlen, w->newlen, x->lists * sizeof(int32_t),
                             cudaMemcpyDeviceToHost, x->s));
    CKV_CUDA(cudaStreamSynchronize(x->s));
    for (int32_t lh = 0; lh < x->lists; lh++)
        if (act[lh])
            ckv_pol_cache_of(x, lh)->len_h[lh % x->per] = w->h_newlen[lh];
    return CKV_OK;
}

// Eviction-only steps: dest[t] = t for the last `recent` slots, -1 before;
// all: every slot kept (the bottom cut below then evicts).
__global__ void keep_init_kernel(int32_t *dest, const int32_t *act, const int32_t *T,
                                 int32_t recent, bool all, int32_t cap)
{
    const int32_t lh = blockIdx.y, t = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || t >= T[lh])
        return;
    dest[(size_t)lh * cap + t] = all || t >= T[lh] - recent ? t : -1;
}

// Keeps the first `keep` of the ranking; notes the gap at the cut.
__global__ void keep_mark_kernel(int32_t *dest, const double *key_out, const int32_t *ival_out,
                                 unsigned *margin, const int32_t *act, const int32_t *T,
                                 const int32_t *seg_b, int32_t recent, int32_t keep, int32_t cap)
{
    const int32_t lh = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    const int32_t n = T[lh] - recent;
    if (!act[lh] || i >= keep || i >= n)
        return;
    const size_t pos = (size_t)seg_b[lh] + i;
    const int32_t t = ival_out[pos];
    dest[(size_t)lh * cap + t] = t;
    if (i == keep - 1 && keep < n)
        ckv_pol_note_margin(margin + lh, key_out[pos] - key_out[pos + 1]);
}

// Where a call evicts few of a list's ranked slots (a decode-time call: the
// interval's 64 of about 8,200), only the ranking's bottom is needed, not
// the whole sort: each segment's (key, ival) pairs reversed in place with the
// keys negated, so that ckv_pol_top_desc's order (key descending, ties by
// position ascending) is the ranking's from its bottom (key ascending, ties
// by the higher slot first: ckv_rank keeps the lower slot first among
// equals). A thread per pair of positions i and n - 1 - i.
__global__ void bottom_flip_kernel(double *key, int32_t *ival, const int32_t *act,
                                   const int32_t *seg_b, const int32_t *seg_e)
{
    const int32_t lh = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh])
        return;
    const int64_t b = seg_b[lh], n = seg_e[lh] - b, j = n - 1 - i;
    if (i > j)
        return;
    const double ki = key[b + i], kj = key[b + j];
    const int32_t vi = ival[b + i], vj = ival[b + j];
    key[b + i] = -kj;
    ival[b + i] = vj;
    key[b + j] = -ki;
    ival[b + j] = vi;
}

// Evicts the first m = m_of[list] of that bottom ranking; notes the gap at
// the cut (the lowest kept less the highest evicted, as keep_mark_kernel's)
// where a slot is kept.
__global__ void bottom_mark_kernel(int32_t *dest, const double *key_out, const int32_t *ival_out,
                                   unsigned *margin, const int32_t *act, const int32_t *T,
                                   const int32_t *seg_b, const int32_t *m_of, int32_t recent,
                                   int32_t cap)
{
    const int32_t lh = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh])
        return;
    const int32_t n = T[lh] - recent, m = m_of[lh];
    if (i >= m)
        return;
    const size_t pos = (size_t)seg_b[lh] + i;
    dest[(size_t)lh * cap + ival_out[pos]] = -1;
    if (i == m - 1 && m < n)
        ckv_pol_note_margin(margin + lh, key_out[pos] - key_out[pos + 1]);
}

ckv_status ckv_pol_keep_top(ckv_pol *x, int32_t recent, int32_t budget, ckv_error *err)
{
    const int32_t *act = ckv_pol_h(x, PLAN_ACT), *T = ckv_pol_h(x, PLAN_T);
    int32_t *sb = ckv_pol_h(x, PLAN_SEG_B), *se = ckv_pol_h(x, PLAN_SEG_E);
    int32_t *m_of = ckv_pol_h(x, PLAN_X);
    int32_t max_m = 0;
    for (int32_t lh = 0; lh < x->lists; lh++) {
        sb[lh] = lh * x->cap;
        se[lh] = act[lh] ? sb[lh] + T[lh] - recent : sb[lh];
        m_of[lh] = act[lh] ? T[lh] - budget : 0;
        max_m = max_m > m_of[lh] ? max_m : m_of[lh];
    }
    // The bottom m + 1 (the cut's gap) by selection where they fit it.
    const bool bottom = max_m + 1 <= CKV_POL_TOP_MAX;
    const int32_t max_t = ckv_pol_max_row(x, PLAN_T);
    dim3 slots(ckv_pol_blocks(max_t, 256), x->lists);
    ckv_status st = ckv_pol_upload_plan(x, err);
    if (st)
        return st;
    if (bottom) {
        bottom_flip_kernel<<<dim3(ckv_pol_blocks((max_t + 1) / 2, 256), x->lists), 256, 0,
                             x->s>>>(x->ws->key, x->ws->ival, x->act, x->seg_b, x->seg_e);
        CKV_CUDA_LAUNCHED();
        if ((st = ckv_pol_top_desc(x, x->x, 1, err)))
            return st;
    } else if ((st = ckv_pol_sort_desc(x, err))) {
        return st;
    }
    keep_init_kernel<<<slots, 256, 0, x->s>>>(x->ws->dest, x->act, x->T, recent, bottom, x->cap);
    CKV_CUDA_LAUNCHED();
    if (bottom)
        bottom_mark_kernel<<<dim3(ckv_pol_blocks(max_m, 256), x->lists), 256, 0, x->s>>>(
            x->ws->dest, x->ws->key_out, x->ws->ival_out, x->ws->margin, x->act, x->T, x->seg_b,
            x->x, recent, x->cap);
    else
        keep_mark_kernel<<<slots, 256, 0, x->s>>>(x->ws->dest, x->ws->key_out, x->ws->ival_out,
                                                  x->ws->margin, x->act, x->T, x->seg_b, recent,
                                                  budget - recent, x->cap);
    CKV_CUDA_LAUNCHED();
    return ckv_pol_apply(x, 0, err);
}

void ckv_pol_plan_over_budget(ckv_pol *x, int32_t budget)
{
    int32_t *act = ckv_pol_h(x, PLAN_ACT), *T = ckv_pol_h(x, PLAN_T);
    for (int32_t lh = 0; lh < x->lists; lh++) {
        T[lh] = ckv_pol_cache_of(x, lh)->len_h[lh % x->per];
        act[lh] = T[lh] > budget;
    }
}

// H2O ranks slots [0, T - recent) by their accumulated attention (slot t's
// at its row).
__global__ void h2o_key_kernel(ckv_pol_caches cs, double *key, int32_t *ival, const int32_t *act,
                               const int32_t *T, int32_t recent, int32_t cap)
{
    const int32_t lh = blockIdx.y, t = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || t >= T[lh] - recent)
        return;
    const size_t i = (size_t)lh * cap + t;
    const ckv_pol_list li = ckv_pol_list_of(cs, lh, cap, 0);
    key[i] = li.score[li.row_of(t)];
    ival[i] = t;
}

ckv_status ckv_pol_h2o(ckv_pol *x, const ckv_policy *p, int32_t budget, ckv_error *err)
{
    const int32_t recent = (int32_t)ckv_policy_param(p, "recent", 0);
    ckv_pol_plan_over_budget(x, budget);
    const int32_t max_t = ckv_pol_max_row(x, PLAN_T);
    if (!max_t)
        return CKV_OK;
    ckv_status st = ckv_pol_upload_plan(x, err);
    if (st)
        return st;
    dim3 slots(ckv_pol_blocks(max_t, 256), x->lists);
    h2o_key_kernel<<<slots, 256, 0, x->s>>>(x->tab, x->ws->key, x->ws->ival, x->act, x->T,
                                            recent, x->cap);
    CKV_CUDA_LAUNCHED();
    return ckv_pol_keep_top(x, recent, budget, err);
}

// StreamingLLM keeps the first `sinks` and the last budget - sinks slots.
__global__ void streaming_dest_kernel(int32_t *dest, const int32_t *act, const int32_t *T,
                                      int32_t sinks, int32_t budget, int32_t cap)
{
    const int32_t lh = blockIdx.y, t = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || t >= T[lh])
        return;
    dest[(size_t)lh * cap + t] = t < sinks || t >= T[lh] - (budget - sinks) ? t : -1;
}

ckv_status ckv_pol_streaming(ckv_pol *x, const ckv_policy *p, int32_t budget, ckv_error *err)
{
    const int32_t sinks = (int32_t)ckv_policy_param(p, "sinks", 0);
    ckv_pol_plan_over_budget(x, budget);
    const int32_t max_t = ckv_pol_max_row(x, PLAN_T);
    if (!max_t)
        return CKV_OK;
    ckv_status st = ckv_pol_upload_plan(x, err);
    if (st)
        return st;
    dim3 slots(ckv_pol_blocks(max_t, 256), x->lists);
    streaming_dest_kernel<<<slots, 256, 0, x->s>>>(x->ws->dest, x->act, x->T, sinks, budget,
                                                   x->cap);
    CKV_CUDA_LAUNCHED();
    return ckv_pol_apply(x, 0, err);
}
