// The K-Means baseline on the GPU (policies.md, "kmeans"), every list over
// budget at once. CPU twin: compress_list in src/policies/kmeans.c.
// Features, centroid updates and norms are computed as the CPU computes
// them (double, members in slot order, no fused multiply-add). At head_dim
// 64 and 128 the assignment first estimates every cosine on the bf16 tensor
// cores (each operand split in two bf16; wgmma on Hopper for the passes
// over every centroid, mma.sync otherwise) and takes the estimate's choice
// where it stands by more than the estimate can be off, which gives the
// exact choice; the rows it leaves (near-ties, norms it cannot scale), and
// every row at other head_dims, take the exact assignment, whose dot
// products run on the FP64 tensor cores where the CPU uses BLAS, so cosines
// agree to ~1e-16 and a decision can differ only at a near-tie (the margin
// the trace reports). At a call's first assignment the own pass first
// gives each row that starts a centroid that centroid where no other can
// be as near (km_own_kernel, km_own_decide_kernel), and the estimate
// takes the other rows. After an update, a list where few centroids moved
// takes the estimate over those centroids only for every row, and over
// every centroid for the rows that this cannot keep (km_drift). A list's
// iterations stop at Lloyd's fixed point, an assignment that changes none
// of its clusters (the CPU runs them all: the same clusters). Keys are
// read as fp32 from either cache type; the merged centroids are stored in
// it (cuda_compact.cu).
#include <limits.h>
#include <math.h>

#include <type_traits>

#include <cub/block/block_scan.cuh>
#include <cuda/atomic>

#include "cuda.h"
#include "cuda_async_copy.cuh"
#include "cuda_bf16.cuh"
#include "cuda_check.h"
#include "cuda_ddiv.cuh"
#include "cuda_mma.cuh"
#include "cuda_policy.h"
#include "cuda_segments.cuh"
#include "cuda_tma.cuh"
#include "cuda_wgmma.cuh"
#include "kmeans_ranges.h"

struct km_params {
    int32_t sinks, k, cap, d;
};

// Sets a flag that threads of any block may set in one launch, so the store
// is atomic (relaxed: it is read after the stream's work; no
// read-modify-write, so no thread waits on another).
__device__ __forceinline__ void km_flag(int32_t *f)
{
    cuda::atomic_ref<int32_t, cuda::thread_scope_device>(*f).store(1, cuda::memory_order_relaxed);
}

// The inclusive prefix sum of v over each group of W lanes of the warp
// (every lane of the warp calls it).
template <int W = 32>
__device__ __forceinline__ int32_t km_warp_incl_sum(int32_t v)
{
    static_assert(W >= 1 && W <= 32 && 32 % W == 0, "groups within the warp");
    const int lane = threadIdx.x % W;
#pragma unroll
    for (int o = 1; o < W; o *= 2) {
        const int32_t t = __shfl_up_sync(0xffffffffu, v, o);
        v += lane >= o ? t : 0;
    }
    return v;
}

// Row m of list lh moves from cluster cl[base + m] to j: the list's change
// flag, and both clusters touched (touch NULL: not kept, as at a call's
// first assignment, before which every cluster counts as touched), so that
// the update recomputes only the clusters whose members changed (the
// others' centroids would come out the same bits: km_update_kernel).
__device__ __forceinline__ void km_move_row(int32_t *cl, int32_t *chg, int32_t *touch,
                                            int32_t lh, size_t base, int32_t m, int32_t j)
{
    const int32_t a = cl[base + m];
    if (a == j)
        return;
    km_flag(chg + lh);
    if (touch) {
        km_flag(touch + base + a);
        km_flag(touch + base + j);
    }
    cl[base + m] = j;
}

// An operand of the estimate: x as hi + lo, hi x rounded to bf16 and lo
// the rest (exact in float) rounded to bf16: |lo| <= 2^-8 |x| and hi + lo
// within 2^-16 |x| of x where both stay normal (bf16 keeps 8 bits). A
// double's caller passes it rounded to float (one conversion, at an eighth
// of the FP32 rate on Hopper, where the rest in double took three), which
// moves hi + lo by 2^-24 |x| more: the estimate's bounds below take it.
__device__ __forceinline__ void km_split(float x, ckv_bf16 &hi, ckv_bf16 &lo)
{
    hi = ckv_to_bf16(x);
    lo = ckv_to_bf16(x - ckv_from_bf16(hi));
}

// Chunk q of a row's split (q < d / 4; d a multiple of 16), as the
// estimate's mma fragments take it: dimensions k, k + 1, k + 8, k + 9 for k
// = 16 (q / 4) + 2 (q % 4), the his as two bf16 pairs, then the los: lane
// t of a k-step's B loads its four registers as one from shared memory,
// where km_copy_split_tile lays a tile's rows out so (its A rows' his and
// los, two words each, from the halves in global memory: km_split_put).
// (The wgmma form copies each half to its own B operand and reads A a word
// at a time: km_estimate_wg_kernel.)
__device__ __forceinline__ uint4 km_split_chunk(const double *x, int32_t q)
{
    const int32_t k = 16 * (q / 4) + 2 * (q % 4);
    ckv_bf16 h[4], l[4];
    km_split((float)x[k], h[0], l[0]);
    km_split((float)x[k + 1], h[1], l[1]);
    km_split((float)x[k + 8], h[2], l[2]);
    km_split((float)x[k + 9], h[3], l[3]);
    return make_uint4(ckv_pack_bf16(h[0], h[1]), ckv_pack_bf16(h[2], h[3]),
                      ckv_pack_bf16(l[0], l[1]), ckv_pack_bf16(l[2], l[3]));
}

// In global memory a row's split is its d / 2 hi words, then its d / 2 lo
// words: chunk q's hi half at words 2 q, 2 q + 1, its lo half d / 2 on.
// The pass over the moved centroids multiplies only the his, and a 32-byte
// sector of chunks had held his and los: 4.84 GB read in 1.59 ms at the
// 8B's 128K call (run ZZ49); with the his in whole lines (a row's start a
// multiple of 32 words: d 64 or 128, and the centroids' splits placed so)
// its copies and L2 prefetches bring no lo.
// The word of a row's split (d words) that dimension i's pair {i, i ^ 1}
// fills with its his (lo false) or its los: chunk q = 4 (i / 16) + (i % 8)
// / 2 holds the pairs at i % 16 < 8 in its halves' first words, the others
// in their second.
__device__ __forceinline__ int32_t km_split_word(int32_t i, bool lo, int32_t d)
{
    return 2 * (4 * (i / 16) + (i % 8) / 2) + (i % 16 >= 8) + (lo ? d / 2 : 0);
}

// Stores chunk q of the split of row x (d doubles) into its row y.
__device__ __forceinline__ void km_split_put(uint32_t *y, const double *x, int32_t q, int32_t d)
{
    const uint4 c = km_split_chunk(x, q);
    reinterpret_cast<uint2 *>(y)[q] = make_uint2(c.x, c.y);
    reinterpret_cast<uint2 *>(y + d / 2)[q] = make_uint2(c.z, c.w);
}

// The splits of the first n[lh] rows of each active list (d doubles, then
// d words, a row), a thread a chunk: the tests' single assignment (the
// policy's features are split as they are formed, km_feature_kernel).
__global__ void km_split_kernel(const double *x, uint32_t *y, const int32_t *n,
                                const int32_t *act, km_params p)
{
    const int32_t lh = blockIdx.y;
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, chunks = p.d / 4;
    if (!act[lh] || c >= n[lh] * chunks)
        return;
    const size_t row = (size_t)lh * p.cap + c / chunks;
    km_split_put(y + row * p.d, x + row * p.d, (int32_t)(c % chunks), p.d);
}

// The estimate: every cosine of a row as dot x (1/fn) x (1/cn) in fp32,
// the dot product on the bf16 tensor cores from the operands' splits
// (km_split: f = fh + fl, c = ch + cl) as fh ch + (fh cl + fl ch), the
// cross products summed apart. Where both norms lie in [2^-50, 2^50] it
// is within KM_EPS of the cosine:
//  - the dropped fl cl (2^-16) and the splits' two rests (2^-16 each, and
//    2^-22.9 more where a split is a lazy call's float product or a
//    double's rounding to float: km_split, km_quick) move each product by
//    at most about 3 x 2^-16 + 2^-21.9 |f_i c_i|, so the sum by 2^-14.4 of
//    sum |f_i c_i| <= fn cn (Cauchy-Schwarz); the 3 D products
//    flushed below 2^-126 by 2^-117.4 against fn cn >= 2^-100;
//  - the products are exact in fp32. If each mma step's 17 addends (an
//    m16n8k16 of mma.sync or a k16 step of wgmma) were truncated by up to an
//    ulp of the largest (the tensor cores' fp32 sums align to the largest
//    addend and truncate, by published measurements of earlier NVIDIA parts;
//    not measured here), the main sum's D / 16 steps (addends at most fn cn)
//    move it by D / 16 x 17 x 2^-23 fn cn, 2^-15.9 at head_dim 128, and the
//    cross sums' 2 D / 16 (addends at most 2^-7 fn cn) by 2^-21.9 (a
//    truncation of each mma's result too, or narrower internal blocks, would
//    make it about 18 addends a step: 2^-15.8);
//  - the two sums' sum, the scales' two conversions and the two products
//    by them: five roundings of 2^-24 (at head_dim 64 every term is
//    smaller).
// About 2^-13.8 in all, 56% of KM_EPS, of which the split's 2^-14.4 needs
// no model of the hardware: the sums could be off by 4.3 times the model
// before the margin's guarantee fails (and by 11.7 times before a decision
// could, which needs an error of 2 KM_EPS). (One accumulator for all three products
// had 2^-14.3 from the sums, and needed KM_EPS 2^-12, which sent many
// more rows of the prefill-time calls to the exact kernel: run MH.) So
// where the estimate's best stands KM_CLEAR = 4 KM_EPS over its second,
// the exact best is the estimate's (their cosines differ by more than 2
// KM_EPS), and the exact gap is at least the estimate's less 2 KM_EPS,
// which the margin records (>= 2^-12: a gap under 2^-12 always takes the
// exact path, so a list's margin is exact wherever it is under 2^-12, far
// above a near-tie). tests/gpu/policy_parity.c measures the estimate's
// error.
constexpr float KM_EPS = 0x1p-13f, KM_CLEAR = 4 * KM_EPS;
constexpr double KM_NORM_LO = 0x1p-50, KM_NORM_HI = 0x1p50;

// The assignments after an update, where few centroids moved (a
// decode-time call's clusters are mostly single keys, whose centroids
// the update moves by an ulp or not at all; docs/performance-notes.md,
// the twenty-fifth session's probe). Each row keeps top = (s1, s2) from
// the assignment that last decided it: its chosen centroid's cosine is at
// least s1 - KM_EPS and every other one's at most s2 + KM_EPS (the
// estimate's best and second; the exact kernel's rounded outward). A
// centroid c the update takes to c' with |c' - c| <= KM_MOVE did not move:
// centroids are unit vectors or zero (a zero one that stays zero keeps its
// cosines), and a cosine is f^ . c^, so it changes by at most |c'^ - c^|
// <= 2 |c' - c| / |c| < KM_TAU. Then a row whose centroid did not move
// keeps it where, with v the estimate's best over the moved centroids,
// (s1 - KM_TAU) - max(s2 + KM_TAU, v) > KM_CLEAR: its exact gap stays over
// 2 KM_EPS, as the estimate's own rule gives. A row whose centroid moved
// (its old best) takes the best moved one where, with v1 and v2 the moved
// ones' best and second estimates, (v1 - KM_EPS_HI + KM_EPS) - max(s2 +
// KM_TAU, v2 + KM_EPS_HI - KM_EPS) > KM_CLEAR (a joined row,
// km_est_decide). The other rows take the estimate over every centroid
// (and the exact kernel where it leaves them). A list where more than a
// quarter of the centroids moved has every row assigned so (a
// prefill-time call's second assignment: 86% moved in the probe). At a
// call's first assignment every list is restricted (no centroid moved) and
// redo holds the rows the own pass leaves, with no pass over moved
// centroids before the estimate.
constexpr double KM_MOVE = 0x1p-24;
constexpr float KM_TAU = 0x1p-22f;

// Of the moved centroids the rule needs only bounds on their cosines with
// the row, the best's and the second's: the pass over them takes the main
// products fh ch alone, each within KM_EPS_HI of the cosine (norms as
// KM_EPS's). The dropped fh (c - ch) + (f - fh) c is at most (2^-8 +
// 2^-22.9)(2 + 2^-8) |f_i c_i| a dimension (the split's hi within 2^-8 +
// 2^-22.9 of x, the float step or a lazy call's product included), so
// the sum moves by 2^-6.99 of fn cn (Cauchy-Schwarz); the sums' truncation
// and the roundings (KM_EPS's model) add under 2^-15: 51% of KM_EPS_HI.
// The rule raises an estimate by KM_EPS_HI - KM_EPS, so that a moved
// cosine stays under it + KM_EPS, and lowers a joined row's best as much:
// looser bounds than the three products' (a row near a moved centroid may
// go to the estimate over every centroid instead of keeping or joining a
// cluster), never wrong ones, for a third of the products.
constexpr float KM_EPS_HI = 0x1p-6f;
enum { KM_MOVED_PART = 4 };

// The bookkeeping above: moved[base + i] (i < nmoved[lh]) the centroids
// the update moved, cmv[base + j] whether j moved, redo[base + i] (i <
// redo_n[lh]) the rows left to the estimate over every centroid; nmoved
// NULL (the tests' single assignment): every row of every list goes
// there; top NULL (the tests' single
// assignment): no bounds kept; kept_n (NULL: not counted) the rows a list
// kept by the rule, joined_n (NULL: not counted) those of them whose
// cluster moved, for the parity checks (ckv_gpu_policy_trace).
struct km_drift {
    const int32_t *moved, *nmoved;
    const uint8_t *cmv;
    int32_t *redo, *redo_n, *kept_n, *joined_n;
    float2 *top;
};

// Whether a list whose update moved nmoved centroids takes the estimate
// over every centroid for redo's rows alone (after the pass over the moved
// centroids, or after the own pass).
__device__ __forceinline__ bool km_restricted(const km_drift &dr, int32_t nmoved, int32_t k)
{
    return dr.nmoved && nmoved <= k / KM_MOVED_PART;
}

// Row m of list lh to the estimate over every centroid (km_drift's redo,
// in no particular order).
__device__ __forceinline__ void km_to_redo(int32_t *redo, int32_t *redo_n, int32_t lh,
                                           size_t base, int32_t m)
{
    redo[base + atomicAdd(redo_n + lh, 1)] = m;
}

// The estimate's scale for a norm: 0 where the cosine is 0 whatever the
// dot product (norm under 1e-30, the exact path's rule); `bad` set where
// the norm is outside the range the error bound holds for (NaN included).
__device__ __forceinline__ float km_scale(double norm, double rec, bool &bad)
{
    if (norm < 1e-30)
        return 0.0f;
    bad |= !(norm >= KM_NORM_LO && norm <= KM_NORM_HI);
    return (float)rec;
}

// A centroid's scale as the estimate reads it: NaN where it is bad (the
// rows that meet it go to the exact kernel).
__device__ __forceinline__ float km_col_scale(double norm, double rec)
{
    bool bad = false;
    const float s = km_scale(norm, rec, bad);
    return bad ? NAN : s;
}

// Centroid r's norm n, its reciprocal (0 for a norm under 1e-30), which
// the assignment's bound takes (km_bound), and the estimate's scale.
__device__ __forceinline__ void km_set_cnorm(size_t r, double n, double *cnorm, double *crec,
                                             float *cscale)
{
    cnorm[r] = n;
    crec[r] = n < 1e-30 ? 0.0 : 1.0 / n;
    cscale[r] = km_col_scale(n, crec[r]);
}

// The middle row whose feature starts centroid j (policies.md), floor((2j
// + 1) M / 2k): the product by 1 / 2k in double is within one of the floor
// (the operands' roundings are a few ulps of a quotient below M < 2^31),
// then corrected in integers. A 64-bit integer division, about 70
// instructions, at each centroid row of the exact assignment's tile copies
// cost its first pass at SmolLM2's 128K call 0.52 -> 0.68 ms (run ZZ18).
__host__ __device__ inline int32_t km_own_row(int32_t j, int32_t M, int32_t k)
{
    const int64_t a = (2 * (int64_t)j + 1) * M, b = 2 * (int64_t)k;
    int64_t q = (int64_t)((double)a * (1.0 / (2.0 * k)));
    q -= q * b > a;
    q += (q + 1) * b <= a;
    return (int32_t)q;
}

// The centroid whose feature middle row m starts, or -1: km_own_row(j) = m
// for j in [m k / M - 1/2, (m + 1) k / M - 1/2), a range at most one wide
// where M >= k (the policy's M > k), so j is floor(m k / M) or one more.
__device__ __forceinline__ int32_t km_own_of(int32_t m, int32_t M, int32_t k)
{
    const int32_t j = (int32_t)((int64_t)m * k / M);
    if (j < k && km_own_row(j, M, k) == m)
        return j;
    return j + 1 < k && km_own_row(j + 1, M, k) == m ? j + 1 : -1;
}

// Whether middle row m starts centroid j (km_own_row(j, M, k) == m): 2km <=
// (2j + 1) M < 2k(m + 1), in integers.
__device__ __forceinline__ bool km_own_is(int32_t j, int32_t m, int32_t M, int32_t k)
{
    const int64_t a = (2 * (int64_t)j + 1) * M, b = 2 * (int64_t)k * m;
    return b <= a && a < b + 2 * (int64_t)k;
}

// Centroid j's row of d elements (list base): cen's once an update wrote
// it (`written`, its flag cw[base + j]), else the row of f, the features,
// of the middle row that starts it, which it is until then. The same for
// the splits (f the features' and cen the centroids' splits, d words a
// row): km_feature_kernel stores a feature and its split once, as the
// row's (at a decode-time call nearly every row starts a centroid, and the
// copies were 1.56 and 0.75 of the kernel's 4.68 GB of stores at SmolLM2's
// 128K call, runs ZZ16, ZZ18).
template <typename T>
__device__ __forceinline__ const T *km_cen_row(const T *f, const T *cen, bool written, size_t base,
                                               int32_t j, int32_t M, int32_t k, int32_t d)
{
    return written ? cen + (base + j) * d : f + (base + km_own_row(j, M, k)) * d;
}

// km_copy_tile's (and km_copy_split_tile's) source of centroid rows j1 ..
// j1 + N - 1 (km_cen_row; N at most THREADS): it gives warp w the tile's
// rows w + WARPS l, so lane l forms the address of the warp's l-th row (its
// flag read, all the warp's at once) and the copies take it by shuffle.
// Formed in every lane that copies a piece of the row, the address had
// cost the exact assignment's first pass at SmolLM2's 128K call 0.52 ->
// 0.66 ms (run ZZ20), and a flag read at each row's copy 0.53 -> 0.80 ms
// (run ZZ17). cw NULL: none written (a call's first assignment).
template <int THREADS, int N, typename T>
__device__ __forceinline__ auto km_cen_rows(const T *f, const T *cen, const uint8_t *cw,
                                            size_t base, int32_t j1, int32_t M, int32_t k,
                                            int32_t d)
{
    constexpr int32_t WARPS = THREADS / 32;
    static_assert(N <= 32 * WARPS, "a lane a row of its warp's");
    const int32_t j = j1 + (int32_t)threadIdx.x / 32 + WARPS * ((int32_t)threadIdx.x % 32);
    const bool in = j < j1 + N && j < k;
    const T *const row =
        in ? km_cen_row(f, cen, cw && cw[base + j], base, j, M, k, d) : f + base * d;
    const unsigned long long at = reinterpret_cast<unsigned long long>(row);
    return [=](int32_t r) {
        return reinterpret_cast<const T *>(__shfl_sync(0xffffffffu, at, r / WARPS));
    };
}

// The rows of a call's first assignment that start a centroid (the own
// pass). Row m = km_own_row(j) starts centroid j as its own feature, so a
// unit feature's cosine with it is 1 up to rounding, and its best is
// centroid j unless another centroid lies near it: for unit vectors x . c
// = 1 - |x - c|^2 / 2, so a centroid farther than w = 3/64 from x has a
// cosine under 1 - 9 2^-13 with it (a zero centroid's is 0). The pass shows
// that none lies within w by lower bounds of the distance, without the
// full-width cosines: the centroids sorted by cell of a0 and a1 (side w),
// then a2, those of the row's cell and the eight around it whose a2 lies
// within w of the row's taken from that order, and each of them ruled out
// by the distance over KM_OWN_AXES coordinates (a0, a1, a2 first)
// held as int8 in 1/s units: with y = s x over those coordinates, q y
// rounded (saturated) and E = |y - q| (rounded up), s |x - c| >= |q_x -
// q_c| - E_x - E_c, and |q_x - q_c|^2 = |q_x|^2 + |q_c|^2 - 2 q_x . q_c in
// integers (an int8 product on the tensor cores). A row so shown takes
// centroid j, with top = (1, KM_OWN_S2): the assignments after an update
// keep it while no moved centroid comes near (km_drift). Every other row
// (one that starts no centroid, one with a centroid near, a feature not of
// unit norm, any row of a list with a centroid of neither unit nor zero
// norm) goes to the estimate over every centroid (dr.redo). The coordinates are those of
// largest variance over a sample of the centroids: any give valid bounds,
// these rule out the most. At a decode-time call nearly every row starts a
// centroid (M = k + the interval), and the whole first assignment was about
// two thirds of the call (docs/performance-notes.md, thirty-second session).
// w: a row's candidates (the centroids within w in a0, a1 and a2) are a
// fixed share of a list's k, so the pass's work grows as k^2 (3.2 ms of
// SmolLM2's 128K decode-time call at 1/16 with bands of a0, run ZQ); a
// narrower w bounds fewer.
constexpr double KM_OWN_W = 0x3p-6;
// Over every other cosine (1 - w^2 / 2, and 2^-20 of slack); under the
// decision's gap (w^2 / 2, less as much).
constexpr float KM_OWN_S2 = (float)(1 - KM_OWN_W * KM_OWN_W / 2 + 0x1p-20);
constexpr double KM_OWN_GAP = KM_OWN_W * KM_OWN_W / 2 - 0x1p-20;
// A row the pass gives keeps its centroid after an update only where
// (1 - KM_TAU) - (KM_OWN_S2 + KM_TAU) > KM_CLEAR (km_drift): w over 1/32.
static_assert(1 - KM_TAU - (KM_OWN_S2 + KM_TAU) > KM_CLEAR,
              "the own pass's gap holds the drift rule's");
// The sort's key: the cell of a0 and a1 (each one's band floor(a / w),
// clamped to +-22, which a unit feature's coordinate does not pass: 1 / w
// = 21.3; the cell (b0 + 22) KM_OWN_BANDS + b1 + 22) times KM_OWN_CELL,
// plus a2 in KM_OWN_KEY units (clamped to +-2) offset to be positive. A
// centroid within w of a row lies in the row's cell or one of the eight
// around it, with a2 within KM_OWN_WIN key units of the row's (w, and 64
// units for the two keys' roundings): clamping never widens a gap between
// two keys, so it keeps that true (a list whose features are not unit is
// flagged, KM_OWN_BAD, and the pass gives it nothing). Cells of two
// coordinates bound 2.4-2.9x fewer pairs than bands of a0 at 128K, and
// blocks of 64 places keep a cell's few places from idling whole warps
// (`scripts/kmeans-cone-count --own`, forty-second session).
constexpr double KM_OWN_KEY = 0x1p18;
constexpr int32_t KM_OWN_WIN = (int32_t)(KM_OWN_W * KM_OWN_KEY) + 64;
enum {
    KM_OWN_BANDS = 45,  // a coordinate's bands -22 .. 22 (22 w over 1)
    KM_OWN_CELLS = KM_OWN_BANDS * KM_OWN_BANDS,
    KM_OWN_CELL = 1 << 20,  // a cell's keys: a2 + 2 in [0, 4] x 2^18
    KM_OWN_BLOCK = 64       // the own kernel's places an item, of one cell
};
static_assert((int64_t)KM_OWN_CELLS * KM_OWN_CELL - 1 < INT_MAX,
              "every centroid's key sorts before the rows past k (INT_MAX)");
enum {
    KM_OWN_AXES = 16,     // int8 coordinates, a0, a1 and a2 first (one uint4)
    KM_OWN_SAMPLE = 256,  // centroids whose variances choose the coordinates
    // A list's header: the KM_OWN_AXES coordinates, the scale s (float
    // bits), a flag (a centroid of neither unit nor zero norm), each cell's
    // first place in the sort (KM_OWN_CELLS + 1 of them, the last k), and
    // each cell's first item of the own kernel (KM_OWN_CELLS + 1, the last
    // the list's count of items), and each cell's largest E (float bits,
    // KM_OWN_CELLS).
    KM_OWN_SCALE = KM_OWN_AXES,
    KM_OWN_BAD,
    KM_OWN_START,
    KM_OWN_FIRST = KM_OWN_START + KM_OWN_CELLS + 1,
    KM_OWN_EMAX = KM_OWN_FIRST + KM_OWN_CELLS + 1,
    KM_OWN_HDR = 6144  // 24 KB a list
};
static_assert(KM_OWN_EMAX + KM_OWN_CELLS <= KM_OWN_HDR, "the header holds the cells' entries");

// A feature's norm as the pass takes it for a unit vector's (a feature is
// its key over the key's norm in double: within a few ulps of 1; so tight
// that KM_OWN_S2's 2^-20 of slack covers it).
__device__ __forceinline__ bool km_unit(double n)
{
    return fabs(n - 1.0) <= 0x1p-40;
}

// Whether middle row m starts a centroid.
__device__ __forceinline__ bool km_starts(int32_t m, int32_t M, int32_t k)
{
    return km_own_of(m, M, k) >= 0;
}

// Identity dest for the list; unit-normalised keys of the middle and their
// norms (x: M, the middle's length); with fs, each feature's split
// (km_split_word); and the initial centroids: centroid j starts at the
// feature of middle row km_own_row(j) (policies.md), read from that row,
// and its split from the row's, until an update writes them (km_cen_row:
// its flag cleared here), with that feature's norm (the same chain over
// the same doubles as the update's centroid norms). Formed here, they spare two passes over
// the features (SmolLM2's 32K decode-time call: 0.14 and 0.35 ms, reading
// 377 and 566 MB, run YD). A block takes FEAT_ROWS slots: their keys come
// into shared memory a warp a row, in the cache's type, and the
// features go out likewise, so both are coalesced, while each thread forms
// its row's two chains (the key's norm, then the feature's) in dimension
// order, as the CPU does; a row's keys lie an odd count of 4-byte words
// apart, so that the threads' walks hit distinct banks. (A thread reading
// and writing its own row took 2.2 ms at the 8B's 8K decode-time shape, run
// MG; bf16 keys held as floats took twice the shared memory, half the
// blocks an SM, for a kernel that waits on its chains: run WC.)
enum { FEAT_ROWS = 128 };

template <typename Elem>
__host__ __device__ inline int32_t km_feat_stride(int32_t d)
{
    constexpr int32_t per = 4 / sizeof(Elem);  // elements a word
    return (((d + per - 1) / per) | 1) * per;
}

template <typename Elem>
static size_t km_feat_smem(int32_t d)
{
    return FEAT_ROWS * (size_t)km_feat_stride<Elem>(d) * sizeof(Elem);
}

// Dimension i of a feature, from its key x (in the cache's type), the
// key's norm n and y = ckv_ddiv_rcp(n), formed once a row: the one division
// the feature, its norm's chain and the own pass's coordinates all take, so
// that they see the same double, __ddiv_rn's (a feature of zero norm is
// zero, as the CPU's; a quick row's chain and coordinates see a -0 as +0:
// km_quick). km_feat_of: the same from the key's element a, loaded before
// (km_mat_form_kernel).
__device__ __forceinline__ double km_feat_of(float a, double n, double y)
{
    return n < 1e-30 ? 0 : ckv_ddiv((double)a, n, y);
}

template <typename Elem>
__device__ __forceinline__ double km_feat(const Elem *x, double n, double y, int32_t i)
{
    return km_feat_of(ckv_kv_get(x, i), n, y);
}

// A row is quick where its key norm n lies in [2^-60, 2^60]. Then every
// nonzero key element (bf16 or fp32: at least 2^-149, at most n) has a
// quotient in [2^-209, 1], so ckv_ddiv's fast path holds and its quotient
// is __ddiv_rn's, without the tests (km_feat_quick); a zero element gives
// +0 where __ddiv_rn keeps a -0's sign, which the norm's chain squares away
// and the own pass's coordinates never see (its products, roundings and
// bands take -0 as +0). And a lazy call's store takes the row's splits from
// key x (float)ckv_ddiv_rcp(n) in float (normal, and no product overflows):
// within 2^-22.9 |x / n| of the feature (the reciprocal within 2^-51 of 1 /
// n, two roundings of 2^-24; 2^-150 absolute below 2^-126), which the
// estimate's bounds take.
__device__ __forceinline__ bool km_quick(double n)
{
    return n >= 0x1p-60 && n <= 0x1p60;
}

template <typename Elem>
__device__ __forceinline__ double km_feat_quick(const Elem *x, double n, double y, int32_t i)
{
    bool ok;
    return ckv_ddiv_fast((double)ckv_kv_get(x, i), n, y, ok);
}

// Dimensions at(0) .. at(G - 1) of R features (km_feat's doubles; row s's
// key x[s], norm n[s], reciprocal y[s]; q[s * G + g]), their divisions
// issued together with one test of their fast paths: a division's own
// branch keeps each in turn, a dependent FP64 chain (the 8B's 128K call
// 23.41 -> 22.92 ms with the norm's chain in fours, runs ZZ41, ZZ42).
// QUICK: rows that are (km_quick), without the tests.
template <int32_t R, bool QUICK = false, int32_t K, typename Elem, typename At>
__device__ __forceinline__ void km_feats(const Elem *const *x, const double *n, const double *y,
                                         At at, double (&q)[K])
{
    constexpr int32_t G = K / R;
    if constexpr (QUICK) {
#pragma unroll
        for (int32_t k = 0; k < K; k++)
            q[k] = km_feat_quick(x[k / G], n[k / G], y[k / G], at(k % G));
        return;
    }
    bool ok = true;
#pragma unroll
    for (int32_t k = 0; k < K; k++) {
        bool fast;
        q[k] = ckv_ddiv_fast((double)ckv_kv_get(x[k / G], at(k % G)), n[k / G], y[k / G], fast);
        ok = ok && fast && !(n[k / G] < 1e-30);
    }
    if (!ok)
#pragma unroll
        for (int32_t k = 0; k < K; k++)
            q[k] = km_feat(x[k / G], n[k / G], y[k / G], at(k % G));
}

// Where km_feature_kernel writes (fs NULL: no splits). With hdr (a
// call's first assignment with the own pass; the list's axes and scale set
// by km_own_axes_kernel before), the pass's inputs too: each centroid's sort
// key, record and side by centroid (km_own_entry), each middle row's ival,
// the key INT_MAX past k (last in the sort), the rows that start no
// centroid to redo, and the list's flag for a centroid of neither unit nor
// zero norm.
struct km_feat_out {
    double *f, *fnorm;
    double *kn;  // the lazy form's key norms (km_lazy_call), NULL in the eager
    uint32_t *fs;
    uint8_t *cw;  // km_cen_row's flags: the centroids start unwritten
    double *cnorm, *crec;
    float *cscale;
    int32_t *hdr, *ikey, *ival, *redo, *redo_n;
    uint4 *rec_c;
    int2 *side_c;
};

// Centroid j's own-pass entries, formed by the thread of the row that
// starts it (x its key in shared memory, n the key's norm, ax the list's
// coordinates): its sort key (its cell of a0 and a1, then a2: KM_OWN_KEY), and its
// record, the coordinates times s rounded and saturated to int8, with side
// = (|q|^2, E rounded up as float bits). Each coordinate is the same double
// as the feature's (a quick row's -0 as +0, the same entries). A warp a
// row after the feature chains cost the feature kernel 0.175 ms at
// SmolLM2's 32K call under ncu (run ZO: one dependent chain of divisions
// and shuffles a row); a thread's 16 divisions are independent of each
// other, beside the chains of the block's other rows.
template <typename Elem>
__device__ __forceinline__ void km_own_entry(const Elem *x, double n, double y, bool quick,
                                             const int32_t *ax, double s, size_t at,
                                             const km_feat_out &o)
{
    uint32_t w[4] = {0, 0, 0, 0};
    int32_t n2 = 0;
    double e2 = 0, a0 = 0, a1 = 0, a2 = 0;
#pragma unroll
    for (int a = 0; a < KM_OWN_AXES; a++) {
        const double c = quick ? km_feat_quick(x, n, y, ax[a]) : km_feat(x, n, y, ax[a]);
        a0 = a == 0 ? c : a0;
        a1 = a == 1 ? c : a1;
        a2 = a == 2 ? c : a2;
        const double ys = c * s, r = rint(ys);
        const int32_t b = r >= 127 ? 127 : r <= -127 ? -127 : isnan(r) ? 0 : (int32_t)r;
        w[a / 4] |= (uint32_t)(b & 0xff) << 8 * (a % 4);
        n2 += b * b;
        e2 += (ys - b) * (ys - b);
    }
    constexpr double half = KM_OWN_BANDS / 2;
    const auto band = [](double a) {
        return (int32_t)fmin(fmax(floor(a / KM_OWN_W), -half), half) + KM_OWN_BANDS / 2;
    };
    o.ikey[at] = (band(a0) * KM_OWN_BANDS + band(a1)) * KM_OWN_CELL +
                 min(__double2int_rn((fmin(fmax(a2, -2.0), 2.0) + 2.0) * KM_OWN_KEY),
                     KM_OWN_CELL - 1);
    o.rec_c[at] = make_uint4(w[0], w[1], w[2], w[3]);
    // Rounded up, and by 2^-20 more for e2's own roundings (a NaN feature's
    // list is flagged).
    o.side_c[at] =
        make_int2(n2, __float_as_int(__fmul_ru(__double2float_ru(sqrt(e2)), 1 + 0x1p-20f)));
}

// The split of a warp's dimension b + lane of a row (b a multiple of 32,
// d 64 or 128: every lane has one) into fs at the lane's word at: each pair
// of lanes (dimensions i, i ^ 1) swaps its splits, so that the even lane
// stores the pair's his and the odd its los, one 4-byte store a lane
// (km_split_word).
__device__ __forceinline__ void km_split_store(float v, int32_t lane, uint32_t *at)
{
    ckv_bf16 hi, lo;
    km_split(v, hi, lo);
    const uint32_t mine = ckv_pack_bf16(hi, lo), other = __shfl_xor_sync(0xffffffffu, mine, 1);
    *at = lane & 1 ? (other >> 16) | (mine & 0xffff0000u) : (mine & 0xffffu) | (other << 16);
}

// A warp's store of SR rows' features and splits (see km_feature_kernel):
// rows r, r + FEAT_ROWS / 32, ... (one past the block's rows: row r again,
// not stored), the lane's dimensions b0 + lane, + 32, ... + 32 (G - 1) of
// each divided at once, one test of their fast paths, as the chain's (the
// 8B's 128K call 22.9 -> 22.55 ms, run ZZ43). G divides d / 32 where it
// can, so that no division is of a dimension past d (group 4 at SmolLM2's
// head_dim 64 divided each row twice over: its 128K call 5.46-5.51 -> 5.56
// ms, run ZZ44). LAZY: the splits alone (km_lazy_call), from float
// products where every row of the warp's is quick (km_quick; the same rows
// in every lane, so the branch is the warp's), else divided.
template <int32_t G, int32_t SR, bool LAZY, typename Elem>
__device__ __forceinline__ void km_feat_store(const Elem *sm, int32_t st, const double *rn,
                                              const double *ry, int32_t r, int32_t rows,
                                              int32_t d, int32_t lane, int32_t at, size_t f0,
                                              const km_feat_out &o)
{
    const Elem *x[SR];
    double n[SR], y[SR];
    bool quick = LAZY;
#pragma unroll
    for (int32_t s = 0; s < SR; s++) {
        const int32_t rr = r + s * (FEAT_ROWS / 32) < rows ? r + s * (FEAT_ROWS / 32) : r;
        x[s] = sm + rr * st;
        n[s] = rn[rr];
        y[s] = ry[rr];
        quick = quick && km_quick(n[s]);
    }
    if (LAZY && quick) {
        float yf[SR];
#pragma unroll
        for (int32_t s = 0; s < SR; s++)
            yf[s] = (float)y[s];
        for (int32_t b0 = 0; b0 < d; b0 += 32 * G)
#pragma unroll
            for (int32_t s = 0; s < SR; s++) {
                if (r + s * (FEAT_ROWS / 32) >= rows)
                    break;
                uint32_t *const fs = o.fs + f0 + (size_t)(r + s * (FEAT_ROWS / 32)) * d + at;
#pragma unroll
                for (int32_t g = 0; g < G; g++) {
                    const int32_t b = b0 + 32 * g;
                    km_split_store(ckv_kv_get(x[s], b + lane) * yf[s], lane, fs + b / 2);
                }
            }
        return;
    }
    for (int32_t b0 = 0; b0 < d; b0 += 32 * G) {
        double q[SR * G];
        km_feats<SR>(x, n, y, [=](int32_t g) { return min(b0 + 32 * g + lane, d - 1); }, q);
#pragma unroll
        for (int32_t s = 0; s < SR; s++) {
            if (r + s * (FEAT_ROWS / 32) >= rows)
                break;
            const size_t fo = f0 + (size_t)(r + s * (FEAT_ROWS / 32)) * d;
#pragma unroll
            for (int32_t g = 0; g < G; g++) {
                const int32_t b = b0 + 32 * g, i = b + lane;
                if (i >= d)
                    break;
                const double v = q[s * G + g];
                if constexpr (!LAZY)
                    o.f[fo + i] = v;
                if (o.fs)
                    km_split_store((float)v, lane, o.fs + fo + at + b / 2);
            }
        }
    }
}

// Two forms (km_feat_launch): BLOCKS = 10 at 48 registers where shared
// memory lets more than 6 blocks an SM (bf16 keys at head_dim 64, 11:
// SmolLM2's; at 50 registers this kernel, bound by issuing its
// instructions, would keep 9), and BLOCKS = 6 at 80 where it lets 6 or
// fewer (the 8B's), whose registers cost no blocks and take the chain's
// divisions CG = 8 at once (4 in the 48: 8 spill 220 bytes there): the
// 8B's 128K call 22.5 -> 22.2 ms (run ZZ45); and its store's SR = 2 rows
// at once (the kernel 4.29 -> 4.18 ms there, run ZZ47). LAZY (with the
// splits, km_lazy_call): no f64 feature stored but each row's key norm, from
// which the materializers form a row's features where a kernel reads them.
// D: the head_dim where it is one of the estimate's, 64 or 128 (the lazy forms
// only), so that the copies, the chains' bounds and the store's dispatch
// fold (read at run time, d was dispatched on again at every row); 0
// elsewhere, p.d at run time.
template <typename Elem, int32_t D, int32_t CG, int32_t SR, int32_t BLOCKS, bool LAZY>
__global__ void __launch_bounds__(FEAT_ROWS, BLOCKS)
    km_feature_kernel(const Elem *keys, km_feat_out o, int32_t *dest, const int32_t *act,
                      const int32_t *T, const int32_t *M_of, km_params p)
{
    extern __shared__ __align__(16) unsigned char km_feat_raw[];
    Elem *const sm = reinterpret_cast<Elem *>(km_feat_raw);
    __shared__ double rn[FEAT_ROWS], ry[FEAT_ROWS];  // each row's key norm, its ckv_ddiv_rcp
    __shared__ int32_t ax[KM_OWN_AXES];  // the own pass's coordinates (with o.hdr)
    const int32_t lh = blockIdx.y, t0 = blockIdx.x * FEAT_ROWS;
    if (!act[lh] || t0 >= T[lh])
        return;
    const size_t base = (size_t)lh * p.cap;
    if (t0 + (int32_t)threadIdx.x < T[lh])
        dest[base + t0 + threadIdx.x] = t0 + threadIdx.x;
    // The block's middle rows m0 .. m0 + rows - 1.
    const int32_t m0 = max(t0 - p.sinks, 0);
    const int32_t rows = min(t0 + FEAT_ROWS - p.sinks, M_of[lh]) - m0;
    if (rows <= 0)
        return;  // the whole block leaves together
    static_assert(!LAZY || D, "the lazy form is the estimate's: head_dim 64 or 128");
    const int32_t d = D ? D : p.d, st = km_feat_stride<Elem>(d), warp = threadIdx.x / 32,
                  lane = threadIdx.x % 32;
    // The block's keys, 4-byte words (the launch takes d sizeof(Elem) a
    // multiple of 4), a row's a warp, with cp.async: every row's copies in
    // flight at once (element loads each stored before the next row's: a
    // third of the kernel's stall samples, run ZZ10).
    const int32_t W = d * (int32_t)sizeof(Elem) / 4, sw = st * (int32_t)sizeof(Elem) / 4;
    const uint32_t *const key =
        reinterpret_cast<const uint32_t *>(keys + (base + p.sinks + m0) * d);
    uint32_t *const smw = reinterpret_cast<uint32_t *>(sm);
    for (int32_t r = warp; r < rows; r += FEAT_ROWS / 32)
        for (int32_t c = lane; c < W; c += 32)
            ckv_cp_async4(smw + r * sw + c, key + (size_t)r * W + c, true);
    ckv_cp_async_commit();
    int32_t *const h = o.hdr ? o.hdr + (size_t)lh * KM_OWN_HDR : nullptr;
    if (h && threadIdx.x < KM_OWN_AXES)
        ax[threadIdx.x] = h[threadIdx.x];
    ckv_cp_async_wait<0>();
    __syncthreads();
    const int32_t row = threadIdx.x;
    if (row < rows) {
        const Elem *x = sm + row * st;
        double n = 0;
        for (int32_t i = 0; i < d; i++) {
            const double v = ckv_kv_get(x, i);
            n = __dadd_rn(n, __dmul_rn(v, v));
        }
        n = sqrt(n);
        const double y = ckv_ddiv_rcp(n);
        // CG divisions at once (km_feats); past d, dimension d - 1 again,
        // unused. A quick row's without the tests (at D alone: in the
        // generic form, fp32's narrow kernel then spills 100 bytes, ptxas).
        const bool quick = D != 0 && km_quick(n);
        double s = 0;
        for (int32_t b = 0; b < d; b += CG) {
            double q[CG];
            const auto at = [=](int32_t i) { return min(b + i, d - 1); };
            if (quick)
                km_feats<1, true>(&x, &n, &y, at, q);
            else
                km_feats<1>(&x, &n, &y, at, q);
#pragma unroll
            for (int32_t i = 0; i < CG; i++)
                if (b + i < d)
                    s = __dadd_rn(s, __dmul_rn(q[i], q[i]));
        }
        const double fn = sqrt(s);
        o.fnorm[base + m0 + row] = fn;
        if constexpr (LAZY)
            o.kn[base + m0 + row] = n;
        rn[row] = n;
        ry[row] = y;
        const int32_t m = m0 + row, j = km_own_of(m, M_of[lh], p.k);
        if (j >= 0) {
            km_set_cnorm(base + j, fn, o.cnorm, o.crec, o.cscale);
            o.cw[base + j] = 0;
        }
        if (h) {
            if (j >= 0) {
                km_own_entry(x, n, y, quick, ax, __int_as_float(h[KM_OWN_SCALE]), base + j,
                             o);
                if (!(fn < 1e-30 || km_unit(fn)))
                    km_flag(h + KM_OWN_BAD);
            }
            if (m >= p.k)
                o.ikey[base + m] = INT_MAX;
            o.ival[base + m] = m;
            if (j < 0)
                km_to_redo(o.redo, o.redo_n, lh, base, m);
        }
    }
    __syncthreads();
    // Each feature is divided again here, from the same key, norm and
    // reciprocal: the same double as the chain's (but a lazy call's quick
    // rows, km_feat_store). With fs (d 64 or 128: every lane has a
    // dimension at every step), a warp's 32 dimensions fill 64 contiguous
    // bytes of the split's his and 64 of its los (km_split_store).
    // A row's offsets and the lane's word of the split are formed once a
    // row (formed at every step, with the row's norm and centroid read
    // again, they were about a third of the loop's instructions: run ZZ10's
    // source page); the word of dimension b + lane is b / 2 past the lane's,
    // b a multiple of 16 (km_split_word).
    const int32_t at = km_split_word(lane, lane & 1, d);
    const size_t f0 = (base + m0) * d;  // the block's first row's feature and split
    for (int32_t r = warp; r < rows; r += FEAT_ROWS / 32 * SR) {
        if constexpr (D)
            km_feat_store<D / 32, SR, LAZY>(sm, st, rn, ry, r, rows, d, lane, at, f0, o);
        else if (d % 128 == 0)
            km_feat_store<4, SR, LAZY>(sm, st, rn, ry, r, rows, d, lane, at, f0, o);
        else if (d % 64 == 0)
            km_feat_store<2, SR, LAZY>(sm, st, rn, ry, r, rows, d, lane, at, f0, o);
        else
            km_feat_store<1, SR, LAZY>(sm, st, rn, ry, r, rows, d, lane, at, f0, o);
    }
}

// km_feature_kernel in the form its shared memory suits: the 80-register
// one where the 48-register one fits no more than 6 blocks an SM.
template <typename Elem, int32_t D, bool LAZY>
static ckv_status km_feat_launch(const Elem *keys, const km_feat_out &o, int32_t *dest,
                                 const ckv_pol *x, dim3 grid, const km_params &kp,
                                 ckv_error *err)
{
    const size_t smem = km_feat_smem<Elem>(x->d);
    const auto narrow = km_feature_kernel<Elem, D, 4, 1, 10, LAZY>,
               wide = km_feature_kernel<Elem, D, 8, 2, 6, LAZY>;
    ckv_status st = ckv_pol_allow_smem(narrow, smem, "cuda kmeans", err);
    if (st)
        return st;
    int blocks = 0;
    CKV_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, narrow, FEAT_ROWS, smem));
    if (blocks > 6) {
        narrow<<<grid, FEAT_ROWS, smem, x->s>>>(keys, o, dest, x->act, x->T, x->x, kp);
        return CKV_OK;
    }
    if ((st = ckv_pol_allow_smem(wide, smem, "cuda kmeans", err)))
        return st;
    wide<<<grid, FEAT_ROWS, smem, x->s>>>(keys, o, dest, x->act, x->T, x->x, kp);
    return CKV_OK;
}

// The feature kernel's form for the call: its head_dim a constant at the
// estimate's (the lazy form only there: km_lazy_call).
template <typename Elem>
static ckv_status km_features(bool lazy, const Elem *keys, const km_feat_out &o, int32_t *dest,
                              const ckv_pol *x, dim3 grid, const km_params &kp, ckv_error *err)
{
    if (x->d == 64)
        return (lazy ? km_feat_launch<Elem, 64, true> : km_feat_launch<Elem, 64, false>)(
            keys, o, dest, x, grid, kp, err);
    if (x->d == 128)
        return (lazy ? km_feat_launch<Elem, 128, true> : km_feat_launch<Elem, 128, false>)(
            keys, o, dest, x, grid, kp, err);
    return km_feat_launch<Elem, 0, false>(keys, o, dest, x, grid, kp, err);
}

// The reciprocals and scales of k centroids of given norms, as the policy
// forms them (the tests').
__global__ void km_given_cnorm_kernel(double *cnorm, double *crec, float *cscale, int32_t k)
{
    const int32_t j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < k)
        km_set_cnorm(j, cnorm[j], cnorm, crec, cscale);
}

// A list's coordinates (the KM_OWN_AXES of largest variance over the
// sampled centroids, ties the lower, a0 the first) and s = 127 over their
// largest magnitude there (a centroid beyond saturates, which its E
// covers); clears the list's flag and its cells' largest E (which
// km_own_rec_kernel takes). It runs before km_feature_kernel, which
// forms the records with them, so the sampled centroids' features are
// formed here from their keys, in float: any coordinates and scale give
// valid bounds, so these need not be the features' exact doubles. A warp a
// sampled row for its norm; then a thread a dimension (d <= 128: the
// head_dims with the estimate) and a quarter of the sample (one thread's
// walk over all of it waited on each load: 0.35 ms a call, run VD).
template <typename Elem>
__global__ void __launch_bounds__(512)
    km_own_axes_kernel(const Elem *keys, int32_t *hdr, const int32_t *act, const int32_t *M_of,
                       km_params p)
{
    __shared__ float part[3][4][128], var[128], big[KM_OWN_AXES], inv[KM_OWN_SAMPLE];
    const int32_t lh = blockIdx.x, i = threadIdx.x % 128, pt = threadIdx.x / 128;
    if (!act[lh])
        return;
    const size_t base = (size_t)lh * p.cap;
    const int32_t n = min(p.k, (int32_t)KM_OWN_SAMPLE), M = M_of[lh];
    const auto sampled = [&](int32_t u) {  // the key of sampled centroid u's row
        const int32_t j = (int32_t)((int64_t)u * p.k / n);
        return keys + (base + p.sinks + km_own_row(j, M, p.k)) * p.d;
    };
    const int32_t lane = threadIdx.x % 32;
    for (int32_t u = threadIdx.x / 32; u < n; u += 512 / 32) {
        const Elem *const x = sampled(u);
        float q = 0;
        for (int32_t e = lane; e < p.d; e += 32)
            q += ckv_kv_get(x, e) * ckv_kv_get(x, e);
        for (int o = 16; o; o >>= 1)
            q += __shfl_xor_sync(0xffffffffu, q, o);
        if (!lane)
            inv[u] = sqrtf(q) < 1e-30f ? 0.0f : 1.0f / sqrtf(q);
    }
    __syncthreads();
    float s = 0, s2 = 0, mx = 0;
    for (int32_t u = pt; i < p.d && u < n; u += 4) {
        const float x = ckv_kv_get(sampled(u), i) * inv[u];
        s += x;
        s2 += x * x;
        mx = fmaxf(mx, fabsf(x));
    }
    part[0][pt][i] = s;
    part[1][pt][i] = s2;
    part[2][pt][i] = mx;
    __syncthreads();
    if (pt == 0) {
        s = part[0][0][i] + part[0][1][i] + part[0][2][i] + part[0][3][i];
        s2 = part[1][0][i] + part[1][1][i] + part[1][2][i] + part[1][3][i];
        mx = fmaxf(fmaxf(part[2][0][i], part[2][1][i]), fmaxf(part[2][2][i], part[2][3][i]));
        const float v = s2 / n - (s / n) * (s / n);
        var[i] = i >= p.d ? -2.0f : isnan(v) ? -1.0f : fmaxf(v, 0.0f);
    }
    __syncthreads();
    int32_t *const h = hdr + (size_t)lh * KM_OWN_HDR;
    for (int32_t c = threadIdx.x; c < KM_OWN_CELLS; c += 512)
        h[KM_OWN_EMAX + c] = 0;
    if (pt == 0) {
        int32_t rank = 0;
        for (int32_t e = 0; e < 128; e++)
            rank += var[e] > var[i] || (var[e] == var[i] && e < i);
        if (rank < KM_OWN_AXES) {
            h[rank] = i;
            big[rank] = mx;
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float b = 0;
        for (int r = 0; r < KM_OWN_AXES; r++)
            b = fmaxf(b, big[r]);
        h[KM_OWN_SCALE] =
            __float_as_int(fminf(fmaxf(b > 0 ? 127.0f / b : 127.0f, 127.0f), 0x1p20f));
        h[KM_OWN_BAD] = 0;
    }
}

// Each centroid's record and side at its place q in the sort (ival_out: the
// centroids by key, ikey_out their keys), the cells' first places: place q
// starts the cells after its predecessor's up to its own (the last place
// also those past its cell, at k), and each cell's largest E, which bounds
// every pair km_own_kernel stages from the cell. Found here once a list,
// they spare each item of km_own_kernel a search a cell and the largest E
// of each chunk it stages.
__global__ void km_own_rec_kernel(const uint4 *rec_c, const int2 *side_c,
                                  const int32_t *ikey_out, const int32_t *ival_out, uint4 *rec,
                                  int2 *side, int32_t *hdr, const int32_t *act, km_params p)
{
    const int32_t lh = blockIdx.y, q = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh])
        return;  // the whole block
    const size_t base = (size_t)lh * p.cap;
    int32_t *const h = hdr + (size_t)lh * KM_OWN_HDR;
    int32_t cell = -1;  // a place past k: no cell, E 0
    unsigned e = 0;
    if (q < p.k) {
        const int32_t j = ival_out[base + q];
        const int2 sd = side_c[base + j];
        rec[base + q] = rec_c[base + j];
        side[base + q] = sd;
        e = (unsigned)sd.y;  // E >= 0: its bits order as the floats
        // A centroid's key is below KM_OWN_CELLS x KM_OWN_CELL, never
        // negative; clamped all the same, so that no key could write past
        // the starts.
        const auto cell_at = [&](int32_t at) {
            return min(ikey_out[base + at] / KM_OWN_CELL, (int32_t)KM_OWN_CELLS);
        };
        cell = cell_at(q);
        const int32_t prev = q ? cell_at(q - 1) : -1, last = q == p.k - 1 ? KM_OWN_CELLS : cell;
        for (int32_t c = prev + 1; c <= last; c++)
            h[KM_OWN_START + c] = c <= cell ? q : p.k;
    }
    // A warp's places of one cell are consecutive lanes (the sort): each
    // run's largest E gathered into its first lane (from the lanes after
    // it while they hold the same cell), one atomic a run.
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned eo = __shfl_down_sync(0xffffffffu, e, o);
        if (__shfl_down_sync(0xffffffffu, cell, o) == cell)
            e = max(e, eo);
    }
    const int32_t lane = threadIdx.x % 32, before = __shfl_up_sync(0xffffffffu, cell, 1);
    if (cell >= 0 && cell < KM_OWN_CELLS && (lane == 0 || before != cell))
        atomicMax(reinterpret_cast<unsigned *>(h + KM_OWN_EMAX + cell), e);
}

// Each cell's first item of km_own_kernel (a cell's places in items of
// KM_OWN_BLOCK, the last partial), from the cells' starts: an exclusive
// scan a list, the list's count of items last. A block a list.
enum { KM_OWN_SCAN = 1024, KM_OWN_SCAN_EACH = 2 };
static_assert(KM_OWN_SCAN * KM_OWN_SCAN_EACH >= KM_OWN_CELLS + 1, "one pass covers the cells");
__global__ void __launch_bounds__(KM_OWN_SCAN) km_own_first_kernel(int32_t *hdr, const int32_t *act)
{
    using scan = cub::BlockScan<int32_t, KM_OWN_SCAN>;
    __shared__ typename scan::TempStorage tmp;
    const int32_t lh = blockIdx.x;
    if (!act[lh])
        return;
    int32_t *const h = hdr + (size_t)lh * KM_OWN_HDR;
    int32_t n[KM_OWN_SCAN_EACH];
#pragma unroll
    for (int i = 0; i < KM_OWN_SCAN_EACH; i++) {
        const int32_t c = threadIdx.x * KM_OWN_SCAN_EACH + i;
        n[i] = c < KM_OWN_CELLS ? (h[KM_OWN_START + c + 1] - h[KM_OWN_START + c] +
                                   KM_OWN_BLOCK - 1) / KM_OWN_BLOCK
                                : 0;
    }
    scan(tmp).ExclusiveSum(n, n);
#pragma unroll
    for (int i = 0; i < KM_OWN_SCAN_EACH; i++) {
        const int32_t c = threadIdx.x * KM_OWN_SCAN_EACH + i;
        if (c <= KM_OWN_CELLS)
            h[KM_OWN_FIRST + c] = n[i];
    }
}

// The first position of the sorted keys key[lo .. hi) not below v (hi:
// none).
__device__ __forceinline__ int32_t km_own_lower(const int32_t *key, int32_t lo, int32_t hi,
                                                int64_t v)
{
    while (lo < hi) {
        const int32_t mid = (lo + hi) / 2;
        if (key[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

// A row's count in km_own_kernel: the sum of its four lanes' (t = 0..3).
__device__ __forceinline__ int32_t km_own_sum4(int32_t c)
{
    c += __shfl_xor_sync(0xffffffffu, c, 1);
    return c + __shfl_xor_sync(0xffffffffu, c, 2);
}

// An item is up to KM_OWN_BLOCK consecutive places q of one cell of the
// sort (a warp 32 of them, two m16 tiles), and each pair of centroids that
// may lie within w is bounded by one item alone: its own places first, as
// one chunk (its pairs bounded both ways), then its cell's places after
// its last and the four "forward" cells (0, +1), (+1, -1), (+1, 0) and (+1,
// +1), those whose a2 key lies within KM_OWN_WIN of the item's places' (a
// cell's keys are sorted by a2); a pair within w of items in two cells is
// reached from the one whose offset to the other is forward (of an offset
// and its negation exactly one is), and the window is symmetric. The
// candidates are staged through shared memory KM_OWN_BLOCK at a time: the
// int8 products on the tensor cores (ckv_mma_s8, a record's 16 coordinates
// one k16 step), and a pair counted where |q_a - q_b|^2 = |q_a|^2 + |q_b|^2
// - 2 q_a . q_b <= t^2 (1 + 2^-20), t = s w (1 + 2^-20) + E_a + E with E
// the largest of the cells whose places the item stages (km_own_rec_kernel's
// maxima, taken once an item: every staged place lies in one of them, so E
// >= E_b, a looser bound, never an unsound one; the slack covers t's float
// roundings; symmetric in a and b, so a pair within w counts from either
// side). A centroid outside a row's nine cells and a2 window lies farther
// than w by a0, a1 or a2 alone; the bound may count it, and the row then
// goes to the estimate, never wrongly taken. A row counts itself (its own
// place is in the first chunk, distance 0), so it is clear of its item's
// view where its count is 1; one whose count is not marks its centroid
// (cw), and where a chunk after the first counts a pair of a warp's rows,
// the warp bounds it again with the same comparisons to mark its columns
// found near (the other side of the pair, whose item never sees it).
// km_own_decide_kernel then gives each centroid's row km_own_row(j) its
// centroid or the estimate. No early exit: an item whose rows are all near
// may still have columns to mark. A chunk's cost is its pairs': each
// thread keeps its candidate's range from chunk to chunk (the ranges' ends
// summed once an item), the chunks go to two buffers in turn (a chunk's
// stores to the one whose reads the barrier of the chunk before ended: one
// barrier a chunk), and the pair loop takes two k8 groups a step, to the
// chunk's length rounded up to 16 (every slot staged, the pads counting
// nothing). A block takes a list's items blockIdx.x, + gridDim.x, ...,
// finding each one's cell from the cells' first items
// (km_own_first_kernel's). Bands of a0 with a1 sorted, blocks of 128
// places (this kernel up to the forty-second session), bounded 7.08% of
// k^2 pairs at SmolLM2's 128K call on the bench's keys, nine cells 4.31%
// in blocks of 128 and 2.48% in blocks of 32 (`scripts/kmeans-cone-count
// --own`); a0's window alone, blocks of 256, twice the bands' at 32K.
// __dp4a's bound, a thread a row and about 15 instructions a pair, took
// 8.6 ms of the 8B's 32K decode-time call under ncu (run WA; the tensor
// cores' 1.8). Twenty blocks an SM (48 registers, what it takes uncapped;
// 21 fit): the kernel waits on its loads and barriers more than it issues,
// and a form at 64 registers, 16 blocks, issued 12% less a cycle (run
// ZZ35).
__global__ void __launch_bounds__(KM_OWN_BLOCK, 20)
    km_own_kernel(const double *fnorm, const int32_t *hdr, const int32_t *ikey_out,
                  const int32_t *ival_out, const uint4 *rec, const int2 *side, uint8_t *cw,
                  const int32_t *act, const int32_t *M_of, km_params p)
{
    // A pad column's |q|^2 (its record zero): over T's cap, 2^24, by more
    // than any |q_a|^2, so never counted.
    constexpr int32_t FAR = 1 << 26;
    constexpr int32_t RANGES = 6;  // the item's places, its cell's after, four cells
    // The staged candidates, two chunks' buffers.
    __shared__ uint4 srec[2][KM_OWN_BLOCK];
    __shared__ __align__(8) int32_t snorm[2][KM_OWN_BLOCK];  // read two at a time
    __shared__ int32_t splace[2][KM_OWN_BLOCK];  // a staged column's place, for its mark
    __shared__ int32_t scount[KM_OWN_BLOCK];
    __shared__ unsigned semax;  // the item's E (float bits)
    // The candidates' ranges: range r holds candidates rend[r - 1] (0 for r
    // = 0) .. rend[r] - 1, candidate v at place roff[r] + v.
    __shared__ int32_t rend[RANGES], roff[RANGES];
    const int32_t lh = blockIdx.y;
    if (!act[lh])
        return;  // the whole block
    const size_t base = (size_t)lh * p.cap;
    const int32_t *const key = ikey_out + base, *const h = hdr + (size_t)lh * KM_OWN_HDR;
    const int32_t *const start = h + KM_OWN_START, *const first = h + KM_OWN_FIRST;
    const int32_t items = first[KM_OWN_CELLS], lane = threadIdx.x % 32, g = lane / 4,
                  t = lane % 4;
    const float sc = __int_as_float(h[KM_OWN_SCALE]);
    for (int32_t item = blockIdx.x; item < items; item += gridDim.x) {
        __syncthreads();  // the item before is done with the shared state
        // The item's cell: the last whose first item is not past it (first[0]
        // = 0 <= item < first[KM_OWN_CELLS]), found by each warp for itself,
        // 32 places at a time (three rounds of loads over 2,025 cells: thread
        // 0's binary search, eleven dependent loads while the block waited at
        // a barrier, and the nine ranges' searches after it were a quarter of
        // the kernel's stall samples at SmolLM2's 32K call, run ZZ32; with the
        // loads below issued before the searches, 0.197 -> 0.178 ms there and
        // 1.013 -> 0.997 ms at 128K, where an item's candidates weigh more,
        // run ZZ37).
        int32_t cell = 0;
        for (int32_t hi = KM_OWN_CELLS; hi - cell > 1;) {
            const int32_t step = (hi - cell + 31) / 32, at = cell + (lane + 1) * step;
            const int32_t c = __popc(__ballot_sync(0xffffffffu, at < hi && first[at] <= item));
            hi = min(hi, cell + (c + 1) * step);
            cell += c * step;
        }
        // The item's places [p0, p1).
        const int32_t p0 = start[cell] + (item - first[cell]) * KM_OWN_BLOCK,
                      p1 = min(p0 + KM_OWN_BLOCK, start[cell + 1]);
        // The thread's row and, for tile i's rows (of this warp's 32) g and g
        // + 8 (half u), the A fragments, |q|^2 and s w + E: loads issued
        // before the ranges' searches and the barrier, which they outlast.
        const int32_t q = p0 + threadIdx.x;
        const bool mine = q < p1;
        const int32_t j = mine ? ival_out[base + q] : 0,
                      m = mine ? km_own_row(j, M_of[lh], p.k) : 0;
        const double fm = mine ? fnorm[base + m] : 0.0;
        uint32_t a[2][2];
        int32_t na[2][2];
        float ta[2][2];
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int32_t at = p0 + threadIdx.x / 32 * 32 + 16 * i + 8 * u + g;
                // A pad row's |q|^2 FAR too: it counts no column, so marks none.
                const int2 sd = at < p1 ? side[base + at] : make_int2(FAR, 0);
                a[i][u] = at < p1 ? reinterpret_cast<const uint32_t *>(rec + base + at)[t] : 0;
                na[i][u] = sd.x;
                ta[i][u] = __fmaf_rn((float)(KM_OWN_W * (1 + 0x1p-20)), sc, __int_as_float(sd.y));
            }
        if (threadIdx.x < 2 * RANGES) {
            // Range r: lane r finds its first place and lane RANGES + r its
            // end, at once. Range 0 is the item's places, range 1 its cell's
            // after them, ranges 2 to 5 cells (b0, b1 + 1), (b0 + 1, b1 - 1 ..
            // b1 + 1); those end (range 1) or lie (2 to 5) within the window
            // of the item's first and last places' a2 (clamped to the cell,
            // so searched within its places). Lane r also loads its cell's
            // largest E (ranges 0 and 1: the item's cell) before the search.
            const int32_t r = threadIdx.x % RANGES, b0 = cell / KM_OWN_BANDS + (r >= 3),
                          b1 = cell % KM_OWN_BANDS + (r < 2 ? 0 : r == 2 ? 1 : r - 4),
                          nc = b0 * KM_OWN_BANDS + b1;
            const bool lo = threadIdx.x < RANGES,
                       in = b0 < KM_OWN_BANDS && b1 >= 0 && b1 < KM_OWN_BANDS;
            const unsigned ce = lo && in ? (unsigned)h[KM_OWN_EMAX + nc] : 0;
            int32_t end = 0;
            if (r == 0 || (r == 1 && lo)) {
                end = r == 0 && lo ? p0 : p1;
            } else if (in) {
                const int64_t own = (int64_t)cell * KM_OWN_CELL, at = (int64_t)nc * KM_OWN_CELL;
                end = km_own_lower(
                    key, start[nc], start[nc + 1],
                    lo ? at + max(key[p0] - own - KM_OWN_WIN, (int64_t)0)
                       : at + min(key[p1 - 1] - own + KM_OWN_WIN + 1, (int64_t)KM_OWN_CELL));
            }
            const int32_t last = __shfl_down_sync(0xfffu, end, RANGES), len = lo ? last - end : 0;
            // The ranges' ends (lanes 0 .. r's lengths summed) and the item's
            // E, the largest of the cells whose ranges stage a place.
            int32_t sum = len;
#pragma unroll
            for (int o = 1; o < RANGES; o <<= 1) {
                const int32_t s = __shfl_up_sync(0xfffu, sum, o);
                sum += lane >= o ? s : 0;
            }
            const unsigned e = __reduce_max_sync(0xfffu, len > 0 ? ce : 0u);
            if (lo) {
                rend[r] = sum;
                roff[r] = end - (sum - len);
            }
            if (threadIdx.x == 0)
                semax = e;
        }
        // Rows near before any pair start at a count of 2 (lane t = 0 holds
        // a row's).
        scount[threadIdx.x] = !mine || h[KM_OWN_BAD] || !km_unit(fm) ? 2 : 0;
        __syncthreads();
        // A pair counts where km1 + |q_b|^2 - 2 q_a . q_b < 0: km1 = |q_a|^2
        // - floor(T) - 1 for T = t^2 (1 + 2^-20) (capped over any |q_a -
        // q_b|^2, 4 x 16 x 127^2), formed once an item.
        const float emax = __uint_as_float(semax);
        int32_t km1[2][2], count[2][2];
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int u = 0; u < 2; u++) {
                count[i][u] = t == 0 ? scount[threadIdx.x / 32 * 32 + 16 * i + 8 * u + g] : 0;
                const float tt = ta[i][u] + emax;
                km1[i][u] = na[i][u] - (int32_t)fminf(tt * tt * (1 + 0x1p-20f), 0x1p24f) - 1;
            }
        // Chunk 0 the item's places (rend[0] of them), then KM_OWN_BLOCK at
        // a time, into buffer sb; r the range of the thread's candidate.
        const int32_t total = rend[RANGES - 1];
        int32_t r = 0;
        for (int32_t c0 = 0, n = rend[0], sb = 0; c0 < total;
             c0 += n, n = min((int32_t)KM_OWN_BLOCK, total - c0), sb ^= 1) {
            if ((int32_t)threadIdx.x < n) {
                // Candidate v < total = rend[RANGES - 1]: the search ends.
                const int32_t v = c0 + threadIdx.x;
                while (v >= rend[r])
                    r++;
                const int32_t at = roff[r] + v;
                const int2 sd = side[base + at];
                srec[sb][threadIdx.x] = rec[base + at];
                snorm[sb][threadIdx.x] = sd.x;
                splace[sb][threadIdx.x] = at;
            } else {
                srec[sb][threadIdx.x] = make_uint4(0, 0, 0, 0);
                snorm[sb][threadIdx.x] = FAR;
            }
            __syncthreads();
            // The pairs of columns c .. c + 7 with the warp's rows: f(i, u,
            // x, v) for tile i's row half u and column c + 2t + x, counted
            // where v < 0.
            const auto pairs = [&](int32_t c, auto &&f) {
                const uint32_t b = reinterpret_cast<const uint32_t *>(&srec[sb][c + g])[t];
                const int2 nb = *reinterpret_cast<const int2 *>(&snorm[sb][c + 2 * t]);
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    int32_t d[4];
                    ckv_mma_s8(d, a[i][0], a[i][1], b);
                    f(i, 0, 0, km1[i][0] + nb.x - 2 * d[0]);
                    f(i, 0, 1, km1[i][0] + nb.y - 2 * d[1]);
                    f(i, 1, 0, km1[i][1] + nb.x - 2 * d[2]);
                    f(i, 1, 1, km1[i][1] + nb.y - 2 * d[3]);
                }
            };
            const auto add = [&](int i, int u, int, int32_t v) {
                count[i][u] += (int32_t)((uint32_t)v >> 31);
            };
            const int32_t before = count[0][0] + count[0][1] + count[1][0] + count[1][1];
            for (int32_t c = 0; c < n; c += 16) {
                pairs(c, add);
                pairs(c + 8, add);
            }
            // A chunk after the first that counted a pair of the warp's
            // rows: its columns found near marked.
            const int32_t now = count[0][0] + count[0][1] + count[1][0] + count[1][1];
            if (__any_sync(0xffffffffu, c0 && now != before))
                for (int32_t c = 0; c < n; c += 8)
                    pairs(c, [&](int, int, int x, int32_t v) {
                        if (v < 0)
                            cw[base + ival_out[base + splace[sb][c + 2 * t + x]]] = 1;
                    });
        }
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int32_t c = km_own_sum4(count[i][u]);
                if (t == 0)
                    scount[threadIdx.x / 32 * 32 + 16 * i + 8 * u + g] = c;
            }
        __syncwarp();
        if (mine && scount[threadIdx.x] != 1)
            cw[base + j] = 1;
    }
}

// After km_own_kernel, a thread a centroid j: its row km_own_row(j) takes
// centroid j where no item marked it (cw), else goes to dr.redo; own_n
// (NULL: not counted) the rows that took their own. The marks are cleared
// for the update after the pass: cw is zero before it (the feature kernel
// clears it), unread until the first update, and that update writes only
// the centroids it touches.
__global__ void km_own_decide_kernel(uint8_t *cw, int32_t *cl, km_drift dr, int32_t *own_n,
                                     unsigned *margin, int32_t *chg, const int32_t *act,
                                     const int32_t *M_of, km_params p)
{
    const int32_t lh = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh])
        return;  // the whole block
    const size_t base = (size_t)lh * p.cap;
    bool owned = false;
    if (j < p.k) {
        const int32_t m = km_own_row(j, M_of[lh], p.k);
        if (cw[base + j]) {
            km_to_redo(dr.redo, dr.redo_n, lh, base, m);
            cw[base + j] = 0;
        } else {
            km_move_row(cl, chg, nullptr, lh, base, m, j);
            dr.top[base + m] = make_float2(1.0f, KM_OWN_S2);
            owned = true;
        }
    }
    // Every row taken has the one gap: a block notes it (and its count)
    // once, not each row (32,832 atomics on one word a list at SmolLM2's
    // 128K call; the own kernel took the same time either way, run ZZ29).
    const int32_t n = __syncthreads_count(owned);
    if (n && threadIdx.x == 0) {
        ckv_pol_note_margin(margin + lh, KM_OWN_GAP);
        if (own_n)
            atomicAdd(own_n + lh, n);
    }
}

// The trace's flags (ckv_gpu_policy_trace.own_rows) after the own pass: the
// rows that start a centroid and are not in dr.redo, which
// km_own_decide_kernel gave their own centroid; a block a list. A separate
// kernel, so that the own passes are the same code with or without a trace
// (a flag stored in the own kernel took ptxas's allocation from 58
// registers to 48).
__global__ void km_own_rows_kernel(uint8_t *flags, const int32_t *redo, const int32_t *redo_n,
                                   const int32_t *act, const int32_t *M_of, km_params p)
{
    const int32_t lh = blockIdx.x;
    if (!act[lh])
        return;
    const int32_t M = M_of[lh];
    const size_t base = (size_t)lh * p.cap;
    for (int32_t m = threadIdx.x; m < M; m += blockDim.x)
        flags[base + m] = km_starts(m, M, p.k);
    __syncthreads();
    for (int32_t i = threadIdx.x; i < redo_n[lh]; i += blockDim.x)
        flags[base + redo[base + i]] = 0;
}

// Best of two (score, cluster, runner-up) triples: higher score, ties the
// lower cluster.
struct km_best {
    double s, second;
    int32_t j;
};

static __device__ km_best km_merge(km_best a, km_best b)
{
    if (b.s > a.s || (b.s == a.s && b.j < a.j))
        return {b.s, fmax(b.second, a.s), b.j};
    return {a.s, fmax(a.second, b.s), a.j};
}

// Assigns each middle entry to the centroid of highest cosine (ties: the
// lowest index). The dot products run on the FP64 tensor cores (m16n8k4):
// a block holds AM features in shared memory for the whole walk and
// streams the centroids through it AN at a time (two stages, cp.async);
// its warps split each 64 x 64 tile (km_shape). A dot product is the
// chain of fma over the dimensions in order from 0 (the tensor cores add
// each k-step's four products one after another, cuda_mma.cuh; the
// padding to a multiple of 4 adds zeros), which is what the CUDA-core loop
// this replaced computed, so the cosines keep their bits (up to the sign
// of a zero: padding adds 0 x 0 to a sum that underflowed to -0; that loop
// read two shared-memory doubles a multiply-add and was bound there: 641
// ms of the 8B's decode-time call at 8K, 102 ms now; runs KA to KH and LA
// to LG in docs/performance-notes.md). A lane keeps a running best, second
// best and index per row (a higher cosine, or an equal one of lower index,
// is the new best: the order of the columns does not matter), and the
// quad's lanes and the 4 warps that share a row merge with km_merge, which
// does not depend on the order either. What bounds it now is the epilogue
// of each tile, which the block's warps run in step between the tile's
// barriers while the tensor pipe idles (51% busy at the 8B's 8K
// decode-time shape, run LB; 71% without an epilogue, run KF).
enum { AM = 64, AN = 64, WARPS_N = 4 };
// Where the lists are fewer than the wave's blocks, a list with at most
// KM_SPLIT_ROWS tiles of rows has each tile's columns split among KM_SPLITS
// blocks (fewer where it has fewer tiles of centroids): at a decode-time
// call's first assignment a list leaves a few rows, one tile, to this
// kernel, and one block a list walked all its centroids' tiles in turn
// while most of the wave had no tile (SmolLM2's 90 lists: 0.53 ms of its 32K
// call, run XD). Each block merges its columns' bests into km_slices's rows
// and the last of a tile's blocks to arrive merges those (km_merge does not
// depend on the order). 8 tiles of rows: the tests' 300 rows split too.
enum { KM_SPLITS = 8, KM_SPLIT_ROWS = 8 };
static_assert(16 * WARPS_N == AN, "the warps of a row split a tile's columns 16 each");
// The partial bests at the end reuse the tiles (rows of at least 4 doubles).
static_assert(WARPS_N * AM * sizeof(km_best) <= (AM + 2 * AN) * 4 * sizeof(double),
              "the partial bests fit in the tiles");

// A row's best column, second best and a flag as a lane holds them
// (columns in index order: an equal cosine is not a new best, and its gap
// of 0 leaves the row to the exact path).
struct km_top {
    float s, second;
    int32_t j;
    bool bad;
};

// The wgmma estimate's pass over at most one block's rows of a list
// (KM_EST_SLICE_ROWS, km_wg_shape's ROWS; a decode-time call's first: about
// the interval's 64) splits the list's tiles of centroids among up to
// CKV_KM_RANGE_PER_LIST blocks (the balanced blocks' ranges,
// km_est_workers; KM_EST_SLICES slots a list), the last to arrive merging
// their tops (km_top_merge: the same bits as one walk). One block a list
// walked every tile, on 90 of the 132 SMs at SmolLM2's 90 lists (its three
// launches 1.34 ms of the 128K call, run ZZ12), each tile bound by the
// tensor pipe and the epilogue, not by memory (as a pass of 65 to 192
// rows still did when slicing took only passes of 64: sliced, the second
// pass of SmolLM2's 128K call took 0.694 -> 0.552 ms, run ZZ28). A pass
// of at most KM_EST_ROWS rows a block also splits each block's tiles among
// its warpgroups. Up to 15 blocks a list (src/kmeans_ranges.h): a late
// pass often has one or two live lists of a row or two (SmolLM2's 128K
// call's third: one list, one row, in 4 slices of 128 tiles took 0.139 ms,
// runs ZZ65, ZZ67; in 16, 0.054 ms, ZZ68).
enum { KM_EST_SLICES = CKV_KM_RANGE_SLOTS, KM_EST_ROWS = 64, KM_EST_SLICE_ROWS = 192 };

// The exact pass over the candidate tiles. The first exact pass walked
// every centroid for the 1-3 near-tie rows a list the estimate leaves (the
// 8B's 128K call: 2.73 ms, 6.67 GB). A call's first wgmma estimate, where
// a list's pass has at most KM_EST_SLICE_ROWS rows (one block's, m0 = 0),
// at most KM_CAND_TILES tiles of centroids and the lists are at most
// KM_SLICE_LISTS (the scratch's, km_slices), flags (row, tile) in a
// bitmap a (list, pass row) where the quad's best estimate m of the tile
// lies within W = KM_CAND_W of its running best s after it: fmaf(m, rf,
// W) >= s rf (rf > 0, the row's scale). A near-tie row records its pass
// row beside its amb entry (crow; -1 where it has no bitmap: a bad row, rf
// 0, or a pass that did not flag), and the exact kernel walks, for an item
// whose rows all have bitmaps, only the union of their flagged tiles.
// Sound: the quad's running best is at most the row's best estimate B
// (over a subset of its columns), and rounding is monotone, so an
// unflagged tile's columns lie under B rf - W, their cosines under B rf -
// W + KM_EPS; the row's best and second columns (gap at most KM_CLEAR, or
// it would not be amb's) have cosines over B rf - KM_CLEAR - KM_EPS, and
// W > KM_CLEAR + 2 KM_EPS, so every skipped column lies under both: the
// chosen column, its cosine, the second and the margin are the full
// walk's, bit for bit.
constexpr float KM_CAND_W = 8 * KM_EPS;
static_assert(KM_CAND_W > KM_CLEAR + 2 * KM_EPS, "a skipped column is under a near-tie's second");
enum { KM_CAND_TILES = 512, KM_CAND_WORDS = KM_CAND_TILES / 32 };

// The split tiles' scratch (km_assign_kernel): tile r of list lh, slice s
// at best[((lh KM_SPLIT_ROWS + r) KM_SPLITS + s) AM], and the count of its
// blocks that have arrived at n[lh KM_SPLIT_ROWS + r]; the estimate's
// slices (km_estimate_wg_kernel): list lh's slice s at etop[(lh
// KM_EST_SLICES + s) KM_EST_SLICE_ROWS], its count at en[lh] (each count 0
// before a launch; the last block sets it back to 0); the candidate tiles'
// bitmaps: list lh's pass row i at cand[(lh KM_EST_SLICE_ROWS + i)
// KM_CAND_WORDS] (cleared before the pass that flags them).
struct km_slices {
    km_best *best;
    int32_t *n;
    km_top *etop;
    int32_t *en;
    uint32_t *cand;
};

// The lists the scratch holds: a list's exact items are split only where
// the lists are fewer than a wave of blocks (two an SM at most), and its
// estimate's pass is balanced only where km_est_workers allows it; past
// KM_SLICE_LISTS neither is (both guarded), so the scratch holds no more
// (sized for every list it took about 100 KB a list: 1 GB at the 8B's 10K
// lists of 39 sequences).
enum { KM_SLICE_LISTS = 512 };

__host__ __device__ inline size_t km_slice_lists(size_t lists)
{
    return lists < (size_t)KM_SLICE_LISTS ? lists : (size_t)KM_SLICE_LISTS;
}

// The split tiles' counts of `lists` lists, the candidate bitmaps' words,
// and the scratch's bytes: the bests, the estimate's tops, the bitmaps, the
// counts, the estimate's counts.
__host__ __device__ inline size_t km_slices_counts(size_t lists)
{
    return km_slice_lists(lists) * KM_SPLIT_ROWS;
}

__host__ __device__ inline size_t km_cand_words(size_t lists)
{
    return km_slice_lists(lists) * KM_EST_SLICE_ROWS * KM_CAND_WORDS;
}

__host__ __device__ inline size_t km_slices_bytes(size_t lists)
{
    return km_slices_counts(lists) * (KM_SPLITS * AM * sizeof(km_best) + sizeof(int32_t)) +
           km_slice_lists(lists) *
               (KM_EST_SLICES * KM_EST_SLICE_ROWS * sizeof(km_top) + sizeof(int32_t)) +
           km_cand_words(lists) * sizeof(uint32_t);
}

__host__ __device__ inline km_slices km_slices_at(void *scratch, size_t lists)
{
    km_best *const best = static_cast<km_best *>(scratch);
    km_top *const etop =
        reinterpret_cast<km_top *>(best + km_slices_counts(lists) * KM_SPLITS * AM);
    uint32_t *const cand = reinterpret_cast<uint32_t *>(
        etop + km_slice_lists(lists) * KM_EST_SLICES * KM_EST_SLICE_ROWS);
    int32_t *const n = reinterpret_cast<int32_t *>(cand + km_cand_words(lists));
    return {best, n, etop, n + km_slices_counts(lists), cand};
}

// Whether the calling block is the last of n to arrive at *count, told to
// every thread; call from every thread once the block's part of the
// scratch is stored. The block's stores come before its count (a release)
// and the last block's reads of the others' after theirs (an acquire); the
// last sets the count back to 0 for the next launch.
__device__ __forceinline__ bool km_last_to_arrive(int32_t *count, int32_t n)
{
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(count, 1) == n - 1;
        if (last) {
            __threadfence();
            *count = 0;
        }
    }
    __syncthreads();
    return last;
}

// A warp takes MT m-tiles of 16 features x 16 centroids. At head_dim 128
// shared memory holds one block an SM (the generic form takes the same
// shape, for head_dims up to 148), so its rows go to 16 warps of 16 (8
// warps of 32, two a scheduler, hid too little of the epilogue's dependent
// steps: 10.9 -> 9.3 ms, runs KH, LA); at 64 two blocks of 8 warps of 32
// fit, 16 warps an SM either way.
template <int D>
struct km_shape {
    static constexpr int MT = D == 64 ? 2 : 1, WARPS_M = AM / (16 * MT),
                         THREADS = 32 * WARPS_M * WARPS_N, BLOCKS = D == 64 ? 2 : 1;
};

// Row stride in doubles of a tile of d4 = d rounded up to 4 columns: 4 or
// 12 modulo 16, so that the 16 lanes of each half of a fragment load (rows
// g = 0..3, columns t = 0..3) hit distinct banks.
__host__ __device__ inline int64_t km_stride(int64_t d4)
{
    return d4 % 8 == 0 ? d4 + 4 : d4;
}

// Shared memory for the feature tile, two centroid stages and the rows' two
// best a warp (the table km_assign_kernel's lb reads): head_dim 148 at most
// in the 227 KB an H200 block can take (km_assign_room refuses more; the
// CUDA-core kernel before took up to 453).
__host__ __device__ inline size_t km_assign_smem(int32_t d)
{
    const size_t tiles =
        (size_t)(AM + 2 * AN) * (size_t)km_stride(((int64_t)d + 3) / 4 * 4) * sizeof(double);
    return tiles + (size_t)WARPS_N * AM * sizeof(double2);
}

// Rows [0, rows) of a tile, row r of d elements at src(r), into the first
// tile_rows rows of dst (stride elements apart), as one copy group of
// BYTES-byte copies (16 needs 16-byte aligned rows); rows past `rows` and
// columns past d are zeros (d4: d rounded up to a copy). src is called by
// whole warps (km_cen_rows shuffles), once a row, src(0) in place of a row
// past `rows` (any valid address: those copies read nothing).
template <int BYTES, int THREADS, typename T, typename Src>
__device__ __forceinline__ void km_copy_tile(T *dst, Src src, int32_t tile_rows, int32_t rows,
                                             int32_t d, int32_t d4, int32_t stride)
{
    constexpr int W = BYTES / (int)sizeof(T);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int32_t r = warp; r < tile_rows; r += THREADS / 32) {
        const T *const row = src(r < rows ? r : 0);
        for (int32_t i = W * lane; i < d4; i += W * 32) {
            const bool in = r < rows && i < d;
            const T *from = row + (in ? i : 0);
            if (BYTES == 16)
                ckv_cp_async16(dst + r * stride + i, from, in);
            else
                ckv_cp_async8(dst + r * stride + i, from, in);
        }
    }
    ckv_cp_async_commit();
}

// km_copy_tile for rows of splits (D words each): each row as its chunks
// (km_split_chunk, the mma fragments' layout) from its halves
// (km_split_put), a lane a chunk; with HI its his alone, as they lie (the
// first D / 2 words, chunk q's at 2 q), 16 bytes a lane.
template <int THREADS, int D, bool HI, typename Src>
__device__ __forceinline__ void km_copy_split_tile(uint32_t *dst, Src src, int32_t tile_rows,
                                                   int32_t rows, int32_t stride)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int32_t r = warp; r < tile_rows; r += THREADS / 32) {
        const uint32_t *const row = src(r < rows ? r : 0);
        if (HI) {
            for (int32_t q = lane; q < D / 8; q += 32)
                ckv_cp_async16(dst + r * stride + 4 * q, row + 4 * q, r < rows);
        } else {
            for (int32_t q = lane; q < D / 4; q += 32) {
                ckv_cp_async8(dst + r * stride + 4 * q, row + 2 * q, r < rows);
                ckv_cp_async8(dst + r * stride + 4 * q + 2, row + D / 2 + 2 * q, r < rows);
            }
        }
    }
    ckv_cp_async_commit();
}

// A bound q on a column's dot x (1/cn) below which the row's cosine
// dot / (fn cn) is certainly under `second`, a cosine the row's final
// second best cannot be under (the lane's own running second best, or the
// second best of any subset of the row's columns, km_assign_kernel's lb),
// so that the column changes neither the row's best nor its second (ruled
// out without the exact division, which the running best needs bit for
// bit).
// The quotient dot x (1/cn) and the cosine each take two roundings, q itself two: 2^-30
// of margin is far more than they move. -inf (nothing ruled out) where
// that reasoning needs care: a second best of magnitude under 2^-900 (the
// subnormal range), -inf (none yet), a row norm under 1e-30 (its cosines
// are 0 whatever the dot product), or a bound that overflows. A column of
// norm under 1e-30 has the quotient 0 and the cosine 0: ruled out only
// where second > 0. A quotient that is NaN is never ruled out.
__device__ __forceinline__ double km_bound(double second, double fn)
{
    if (!(fabs(second) >= 0x1p-900) || isinf(second) || !(fn >= 1e-30))
        return -INFINITY;
    const double q = second * fn * (second > 0 ? 1 - 0x1p-30 : 1 + 0x1p-30);
    return isfinite(q) ? q : -INFINITY;
}

// (s1, s2), the two highest of s1 >= s2 and o1 >= o2 (cosines are never
// NaN here: a NaN one fails every comparison of the running best).
__device__ __forceinline__ void km_top2(double &s1, double &s2, double o1, double o2)
{
    s2 = fmax(fmin(s1, o1), fmax(s2, o2));
    s1 = fmax(s1, o1);
}

// Whether the rows' two best are shared after tile i: after tiles 0, 1, 3,
// 7, 15, ..., as a row's second best rises about with the log of the
// columns seen, and each sharing costs about as much as the exact cosines
// it saves a tile (run LA).
__device__ __forceinline__ bool km_shares(int32_t i)
{
    return (i & (i + 1)) == 0;
}

// D: head_dim 64 or 128, known here, so that the k-steps unroll with their
// shared-memory offsets as constants (with a run-time d the loop spent 43
// instructions on 8 mma, 12 of them recomputing addresses; SASS, run KD); 0:
// any d, read from p.
//
// rows: the list's rows to assign (rows[base + i], i < n_rows[lh]: those
// the estimate left); NULL: all M; act: the lists to assign. The active
// lists' rows, in tiles of AM (each tile as its slices, km_slices; split:
// the most, 1 where the lists fill the wave), are numbered as one sequence
// of items, and block b takes items b, b + gridDim.x, ...: the rows the
// estimate leaves differ from list to list, and a grid of a few blocks a
// list gave each list the same blocks whatever its rows (at SmolLM2's 90 lists 540 blocks, three
// waves for 2.05 waves' work: run SD). Every block numbers the items
// itself, by a scan of the lists' counts, so that no launch comes between
// the estimate and this kernel: a queue whose prefix a kernel of its own
// formed (4f6c792) cost about 3% of K-Means's compression a sample on real
// keys, where few rows reach this kernel (SG to SI).
//
// chg[lh] is set where a row's cluster changes (cl holds the previous
// clusters, whatever they are) and touch (NULL: not kept) where its old
// and new clusters' members changed (km_move_row). top (NULL: not kept):
// each row's best and second rounded outward (km_drift).
//
// crow (NULL: none): each of rows' pass row in the candidate bitmaps
// (sp.cand; KM_CAND_W), -1 where it has none. An item whose rows all have
// one walks only the union of their flagged tiles, its slices cutting
// that union as they would every tile (every block of the item forms the
// same union).
template <int D>
__global__ void __launch_bounds__(km_shape<D>::THREADS, km_shape<D>::BLOCKS)
    km_assign_kernel(const double *f, const double *fnorm, const double *cen, const uint8_t *cw,
                     const double *cnorm, const double *crec, int32_t *cl, double *best,
                     float2 *top, unsigned *margin, const int32_t *rows, const int32_t *crow,
                     const int32_t *n_rows, const int32_t *act, int32_t lists, int32_t *chg,
                     int32_t *touch, const int32_t *M_of, km_slices sp, int32_t split,
                     km_params p)
{
    constexpr int BYTES = D ? 16 : 8;  // rows of 64 or 128 doubles are 16-byte aligned
    constexpr int MT = km_shape<D>::MT, THREADS = km_shape<D>::THREADS;
    extern __shared__ double sm[];
    __shared__ int2 found;  // the pass's list and item (its tile of rows and slice)
    __shared__ int2 from;   // the scan's round of found's list and the items before it
    __shared__ int32_t next;
    // The item's candidate tiles in order, and their count (-1: the item
    // walks every tile). The generic form has no estimate (crow NULL), and
    // its tiles at head_dim 148 leave no room for the list.
    __shared__ uint16_t cand[D ? KM_CAND_TILES : 1];
    __shared__ int32_t cand_n;
    const int32_t d = D ? D : p.d, d4 = (d + 3) / 4 * 4;
    const int32_t stride = (int32_t)km_stride(d4);
    double *const fs = sm, *const cs = sm + AM * stride;
    double2 *const tops = reinterpret_cast<double2 *>(cs + 2 * AN * stride);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int32_t tiles = (p.k + AN - 1) / AN;

    const auto rows_in = [&](int32_t lh) {
        return lh < lists && act[lh] ? (rows ? n_rows[lh] : M_of[lh]) : 0;
    };
    // The slices of each tile of a list of nr tiles of rows.
    const auto slices = [&](int32_t nr) {
        return nr <= KM_SPLIT_ROWS ? max(1, min(split, tiles)) : 1;
    };

    // Each pass: item u (blockIdx.x, then gridDim.x further each pass), a
    // slice of the columns for rows m0 .. m0 + AM - 1 of list lh (a list's
    // items its tiles of rows times their slices), found by the first warp
    // (a lane a list, 32 lists at a time; lh -1: every item is taken). u
    // only grows, so the scan resumes at the round where the last pass found
    // its list (from) rather than at list 0: at the 8B's 256 lists a pass
    // from list 0 took up to 8 rounds of dependent loads while the other
    // warps waited. The next item and from wait in shared memory: a
    // register kept over the pass made D = 64 spill.
    if (threadIdx.x == 0) {
        next = blockIdx.x;
        from = make_int2(0, 0);
    }
    for (;;) {
        if (warp == 0) {
            __syncwarp();  // lane 0's first writes of next and from are seen
            const int32_t u = next;
            const int2 f0 = from;
            __syncwarp();
            if (lane == 0) {
                found = make_int2(-1, 0);
                next = u + gridDim.x;
            }
            __syncwarp();
            for (int32_t l = f0.x, before = f0.y; l < lists && before <= u; l += 32) {
                const int32_t lh = l + lane, nr = (rows_in(lh) + AM - 1) / AM,
                              n = nr * slices(nr);
                const int32_t incl = km_warp_incl_sum(n);
                const int32_t at = before + incl - n;
                if (at <= u && u < at + n) {
                    found = make_int2(lh, u - at);
                    from = make_int2(l, before);
                }
                before += __shfl_sync(0xffffffffu, incl, 31);
            }
        }
        __syncthreads();  // (the last pass's closing barrier put these writes after its reads)
        if (found.x < 0)
            break;
        const int32_t lh = found.x, n = rows_in(lh), M = M_of[lh];
        const int32_t ns = slices((n + AM - 1) / AM), rt = found.y / ns, sl = found.y % ns;
        const int32_t m0 = rt * AM;
        const size_t base = (size_t)lh * p.cap;
        if (D && crow && warp == 0) {
            // Lane l ORs word w = l % KM_CAND_WORDS of every RS-th row's
            // bitmap from row l / KM_CAND_WORDS, the warp the RS lanes' of
            // each word; then lane w lists its word's tiles from the count
            // of the words before it.
            constexpr int RS = 32 / KM_CAND_WORDS;
            static_assert(32 % KM_CAND_WORDS == 0, "a word's lanes are RS apart");
            const int32_t w = lane % KM_CAND_WORDS;
            uint32_t u = 0;
            bool all = true;
            for (int32_t r = m0 + lane / KM_CAND_WORDS; r < min(m0 + AM, n); r += RS) {
                const int32_t c = crow[base + r];
                all = all && c >= 0;
                if (c >= 0)
                    u |= sp.cand[((size_t)lh * KM_EST_SLICE_ROWS + c) * KM_CAND_WORDS + w];
            }
            all = __all_sync(0xffffffffu, all);
#pragma unroll
            for (int o = KM_CAND_WORDS; o < 32; o *= 2)
                u |= __shfl_xor_sync(0xffffffffu, u, o);
            int32_t at = km_warp_incl_sum<KM_CAND_WORDS>(__popc(u));
            if (lane == KM_CAND_WORDS - 1)
                cand_n = all ? at : -1;
            at -= __popc(u);
            for (; lane < KM_CAND_WORDS && u; u &= u - 1)
                cand[at++] = (uint16_t)(32 * w + __ffs(u) - 1);
        }
        if (D && crow)
            __syncthreads();  // the list seen by every thread
        // The walk's tiles: the candidates, or every tile.
        const int32_t nc = D && crow ? cand_n : -1;
        const int32_t i_lo = sl * (nc < 0 ? tiles : nc) / ns,
                      i_hi = (sl + 1) * (nc < 0 ? tiles : nc) / ns;
        const auto row_of = [&](int32_t i) { return rows ? rows[base + i] : i; };
        // The tiles in the order t0, t0 + 1, ..., wrapping round, t0 the tile
        // of the centroids the block's features most likely join: centroid j
        // starts at the feature of middle index (2j + 1) M / 2k (km_feature_kernel)
        // and keys drift with the slot, so a lane's running second best is high
        // from the first tiles and few columns need the exact cosine (in index
        // order most columns up to a row's best were new records: run KG). The
        // running best below does not depend on the order (nor on it being a
        // good guess: the rows the estimate leaves come in no order). t0 -1:
        // the candidates in order (nc apart from t0 in the walk took D = 128
        // from no spill to 8 bytes).
        const int32_t t0 =
            nc >= 0      ? -1
            : tiles > 0 ? min(tiles - 1,
                              (int32_t)((int64_t)row_of(min(m0 + AM / 2, n - 1)) * p.k / M / AN))
                        : 0;
        const auto tile_at = [&](int32_t i) {
            if (t0 < 0)
                return (int32_t)cand[i];
            return t0 + i < tiles ? t0 + i : t0 + i - tiles;
        };
        // Centroids j1 .. j1 + AN - 1.
        const auto centroids = [&](int32_t j1) {
            return km_cen_rows<THREADS, AN>(f, cen, cw, base, j1, M, p.k, d);
        };
        km_copy_tile<BYTES, THREADS>(
            fs, [&](int32_t r) { return f + (base + row_of(m0 + r)) * d; }, AM, min(AM, n - m0), d,
            d4, stride);
        if (i_lo < i_hi) {
            const int32_t j1 = tile_at(i_lo) * AN;
            km_copy_tile<BYTES, THREADS>(cs, centroids(j1), AN, min(AN, p.k - j1), d, d4, stride);
        }
        // The lane's rows wm 16 MT + 16 mt + g + 8 h and their norms.
        double fn[MT][2], lb[MT][2], q[MT][2];
        km_best b[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int32_t i = m0 + wm * 16 * MT + 16 * mt + g + 8 * h;
                fn[mt][h] = i < n ? fnorm[base + row_of(i)] : 0.0;
                b[mt][h] = {-INFINITY, -INFINITY, 0};
                lb[mt][h] = q[mt][h] = -INFINITY;
            }
        // A warp none of whose rows is the pass's only copies and keeps the
        // barriers: a decode-time call's first assignment leaves a few
        // rows a list to this kernel, all in the first warps' rows of the
        // list's one tile (SmolLM2's 32K call's first: 0.61 -> 0.53 ms, run
        // XD).
        const bool idle = m0 + wm * 16 * MT >= n;
        // Likewise a warp's second m-tile (MT 2) where the pass's rows end
        // in its first: it takes neither products nor cosines (with a few
        // rows a list only the first warps' first m-tile has any: SmolLM2's
        // 128K call's first pass 0.552 -> 0.389 ms, run ZZ27). Predicated
        // in one loop instead of two loops, ptxas spilled 24 bytes, not 4.
        const bool second = MT > 1 && m0 + wm * 16 * MT + 16 < n;
        // i counts the slice's tiles, tile_at(i_lo + i) the centroids'.
        const int32_t walk = i_hi - i_lo;
        for (int32_t i = 0; i < walk; i++) {
            const int32_t j0 = tile_at(i_lo + i) * AN;
            if (i + 1 < walk) {
                const int32_t j1 = tile_at(i_lo + i + 1) * AN;
                km_copy_tile<BYTES, THREADS>(cs + ((i + 1) & 1) * AN * stride, centroids(j1), AN,
                                             min(AN, p.k - j1), d, d4, stride);
            } else {
                ckv_cp_async_commit();  // an empty group keeps the count below
            }
            // lb: each row's second best as its 16 lanes had it after the last
            // sharing, from their warps' two best (written before the barrier
            // that ended that tile): the second best of some of the row's
            // cosines, so its final second best is not under it, and km_bound
            // can take it in every lane. q, the row's bound, is formed again
            // only where lb or the lane's second best changed.
            if (i > 0 && km_shares(i - 1) && !idle) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int row = wm * 16 * MT + 16 * mt + g + 8 * h;
                        double s1 = -INFINITY, s2 = -INFINITY;
#pragma unroll
                        for (int w = 0; w < WARPS_N; w++) {
                            const double2 o = tops[w * AM + row];
                            km_top2(s1, s2, o.x, o.y);
                        }
                        lb[mt][h] = fmax(lb[mt][h], s2);
                        q[mt][h] = km_bound(fmax(b[mt][h].second, lb[mt][h]), fn[mt][h]);
                    }
            }
            // The lane's columns j0 + wn 16 + 8 nt + 2 t + e, their norms and
            // reciprocals.
            double cn[2][2], rc[2][2];
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int32_t j = j0 + wn * 16 + 8 * nt + 2 * t + e;
                    cn[nt][e] = j < p.k && !idle ? cnorm[base + j] : 0.0;
                    rc[nt][e] = j < p.k && !idle ? crec[base + j] : 0.0;
                }
            ckv_cp_async_wait<1>();
            __syncthreads();  // this tile's (and the features') copies landed for every thread
            if (!idle) {
                const double *A = fs + (wm * 16 * MT + g) * stride + t;
                const double *B = cs + (i & 1) * AN * stride + (wn * 16 + g) * stride + t;
                double acc[MT][2][4] = {};
                // The first NM of the warp's m-tiles.
                const auto products = [&](auto nm) {
                    constexpr int NM = decltype(nm)::value;
    #pragma unroll(D == 128 ? 8 : 2)
                    for (int32_t k0 = 0; k0 < d4; k0 += 4) {
                        double a[NM][2], bb[2];
#pragma unroll
                        for (int mt = 0; mt < NM; mt++) {
                            a[mt][0] = A[16 * mt * stride + k0];
                            a[mt][1] = A[(16 * mt + 8) * stride + k0];
                        }
#pragma unroll
                        for (int nt = 0; nt < 2; nt++)
                            bb[nt] = B[8 * nt * stride + k0];
#pragma unroll
                        for (int mt = 0; mt < NM; mt++)
#pragma unroll
                            for (int nt = 0; nt < 2; nt++)
                                ckv_mma_f64_m16(acc[mt][nt], a[mt][0], a[mt][1], bb[nt]);
                    }
                };
                if (MT == 1 || second)
                    products(std::integral_constant<int, MT>{});
                else
                    products(std::integral_constant<int, 1>{});
                // C fragment: acc[mt][nt][2 h + e] is row g + 8 h, column 2 t + e.
                // First the columns the row's bound q cannot rule out, then those
                // with the exact cosine: a higher one, or an equal one of lower index,
                // is the new best (the order of the columns does not matter).
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        if (mt > 0 && !second)
                            continue;
                        km_best &r = b[mt][h];
                        unsigned open = 0;
#pragma unroll
                        for (int c = 0; c < 4; c++) {
                            const int nt = c / 2, e = c % 2;
                            const int32_t j = j0 + wn * 16 + 8 * nt + 2 * t + e;
                            if (j < p.k && !(acc[mt][nt][2 * h + e] * rc[nt][e] < q[mt][h]))
                                open |= 1u << c;
                        }
                        if (!open)
                            continue;
#pragma unroll
                        for (int c = 0; c < 4; c++) {
                            const int nt = c / 2, e = c % 2;
                            if (!(open >> c & 1))
                                continue;
                            const double dot = acc[mt][nt][2 * h + e], f1 = fn[mt][h];
                            const double cc = cn[nt][e];
                            const double s = f1 < 1e-30 || cc < 1e-30 ? 0 : dot / (f1 * cc);
                            const int32_t j = j0 + wn * 16 + 8 * nt + 2 * t + e;
                            if (s > r.s || (s == r.s && j < r.j)) {
                                r.second = r.s;
                                r.s = s;
                                r.j = j;
                            } else if (s > r.second) {
                                r.second = s;
                            }
                        }
                        q[mt][h] = km_bound(fmax(r.second, lb[mt][h]), fn[mt][h]);
                    }
                // The warp's two best a row, for the next tile's bounds (lb above).
                if (km_shares(i) && i + 1 < walk) {
#pragma unroll
                    for (int mt = 0; mt < MT; mt++)
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            double s1 = b[mt][h].s, s2 = b[mt][h].second;
#pragma unroll
                            for (int off = 1; off < 4; off *= 2) {
                                const double o1 = __shfl_xor_sync(0xffffffffu, s1, off);
                                const double o2 = __shfl_xor_sync(0xffffffffu, s2, off);
                                km_top2(s1, s2, o1, o2);
                            }
                            if (t == 0)
                                tops[wn * AM + wm * 16 * MT + 16 * mt + g + 8 * h] =
                                    make_double2(s1, s2);
                        }
                }
            }
            __syncthreads();  // every warp is done with this stage before its next copy, and
                              // the table's writes come before the next tile's reads
        }
        ckv_cp_async_wait<0>();
        __syncthreads();  // sm is reused for the partial bests
        km_best *part = reinterpret_cast<km_best *>(sm);
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                km_best r = b[mt][h];
#pragma unroll
                for (int off = 1; off < 4; off *= 2) {
                    const km_best o = {__shfl_xor_sync(0xffffffffu, r.s, off),
                                       __shfl_xor_sync(0xffffffffu, r.second, off),
                                       __shfl_xor_sync(0xffffffffu, r.j, off)};
                    r = km_merge(r, o);
                }
                if (t == 0)
                    part[wn * AM + wm * 16 * MT + 16 * mt + g + 8 * h] = r;
            }
        __syncthreads();
        // The row's best over the block's columns, then (a split tile) the
        // tile's over all of its slices' in the last block to arrive.
        const int32_t row = threadIdx.x;
        km_best r = {};
        if (row < AM) {
            r = part[row];
            for (int w = 1; w < WARPS_N; w++)
                r = km_merge(r, part[w * AM + row]);
        }
        bool mine = row < AM && m0 + row < n;
        if (ns > 1) {
            const size_t at = (size_t)lh * KM_SPLIT_ROWS + rt;
            km_best *const tb = sp.best + at * KM_SPLITS * AM;
            if (row < AM)
                tb[sl * AM + row] = r;
            mine = km_last_to_arrive(sp.n + at, ns) && mine;
            if (mine) {
                const auto slice = [&](int32_t s2) {
                    const km_best *const o = tb + s2 * AM + row;
                    return km_best{__ldcg(&o->s), __ldcg(&o->second), __ldcg(&o->j)};
                };
                r = slice(0);
                for (int32_t s2 = 1; s2 < ns; s2++)
                    r = km_merge(r, slice(s2));
            }
        }
        if (mine) {
            const int32_t m = row_of(m0 + row);
            km_move_row(cl, chg, touch, lh, base, m, r.j);
            if (best)  // the tests' (ckv_gpu_kmeans_assign)
                best[base + m] = r.s;
            if (top)
                top[base + m] = make_float2(__double2float_rd(r.s), __double2float_ru(r.second));
            ckv_pol_note_margin(margin + lh, r.s - r.second);
        }
        __syncthreads();  // the partial bests are read before the next rows' copies
    }
}

// A block takes ROWS = 128 rows: its warps hold 16 MT rows each, their
// splits as A fragments in registers for the whole walk (64 registers at
// either head_dim, loaded from global memory while the first tile's copies
// are in flight: staged through shared memory, they had to land before
// those copies began, two latencies in turn for the pass over the moved
// centroids, a tile or two a block; with the L2 fetch below and one margin
// atomic a warp, that pass 0.584 -> 0.539 ms at SmolLM2's 128K call, run
// ZZ29), and walk every column of the list, the centroids' splits
// streaming through shared memory KN at a time (STAGES stages, cp.async), NB
// n-tiles of 8 columns a pass, so that a lane keeps MT x NB independent
// mma chains (two accumulators each: the main product and the cross ones,
// above); each tile carries its columns' scales. A tile
// serves 128 rows (half the L2 reads of 64; what had bounded the walk was
// the columns' norms read from global memory at each pass: 5.0 -> 2.2 ms
// at the 8B's 8K decode-time shape once the tiles carried them, runs MB,
// MC). Rows are D + 16 words apart, so that each quarter-warp's 16-byte
// fragment loads hit distinct banks (MOVED: his alone, D / 2 + 4 words
// apart, 16 bytes modulo 128, so that an ldmatrix's 8 rows of 16 bytes
// do). Every pass takes this form on devices without wgmma, and the pass
// over the moved centroids on Hopper too (km_estimate); Hopper's other
// passes take km_estimate_wg_kernel below.
enum { KN = 64 };
// BLOCKS: the blocks an SM the registers must allow (16 warps, 128 registers
// a thread, which spills a few dozen bytes; MOVED at head_dim 64 20 warps at
// 96, no spill, and at 128 24 warps at 80, 4 bytes (ptxas); head_dim 64 at
// 24 warps and 80 registers had spilled 48 bytes, a word and a flag of each
// of the lane's rows stored at the start, whose reloads' first readers held
// 12.7% of the pass's stall samples, run ZZ72, scripts/ncu-stalls; 0.372 ->
// 0.360 ms at SmolLM2's 128K call, ZZ73). MOVED: the pass over the moved
// centroids, about a tile a list at decode time (some 64 moved centroids a
// list), each block waiting on its rows' loads, its tile's copy and its
// decisions in turn (820 MB in 0.42 ms, half the copy rate, run ZZ30): one
// stage, so that more blocks an SM overlap those waits (six at head_dim 64
// where registers and two stages held five: 0.419 -> 0.387 ms, ZZ31).
// RB: the blocks of ROWS rows a block takes in turn, its tile kept where
// the list has one (MOVED: a block's life was a chain of waits, the rows'
// loads only its last part, 2.7 TB/s at the 8B's 128K call, run ZZ32; the
// next block of rows fetched under a block's walk and decisions keeps
// DRAM busy through them, and the tile's copy serves RB blocks of rows; 2
// at head_dim 64, whose 90 lists would leave a longer tail): the 8B's 128K
// pass 1.835 -> 1.70 ms, SmolLM2's flat (run ZZ47), then 1.59 with the
// rows' loads evict-first (ZZ49); with the next block of rows copied into
// shared memory, not L2 (km_estimate_kernel's copy_rows), 1.404 -> 1.287
// ms, SmolLM2's 0.366 -> 0.340 (ZZ77).
template <int D, bool MOVED = false>
struct km_est_shape {
    static constexpr int MT = D == 64 ? 2 : 1, WARPS = 8 / MT, THREADS = 32 * WARPS,
                         NB = 4 / MT, ROWS = 16 * MT * WARPS, SF = MOVED ? D / 2 + 4 : D + 16,
                         SA = D / 2 + 4, STAGES = MOVED ? 1 : 2, RB = MOVED ? (D == 64 ? 2 : 4) : 1,
                         BLOCKS = D == 64 ? (MOVED ? 5 : 4) : (MOVED ? 3 : 2);
};

// The stages, then their columns' scales; in MOVED then a block of rows'
// his (SA words apart) and two blocks of rows' norms, bounds and clusters
// (km_estimate_kernel's copy_rows).
template <int D, bool MOVED>
constexpr size_t km_est_smem()
{
    using S = km_est_shape<D, MOVED>;
    return S::STAGES * KN * (S::SF * sizeof(uint32_t) + sizeof(float)) +
           (MOVED ? S::ROWS * (S::SA * sizeof(uint32_t) +
                               2 * (sizeof(double) + sizeof(float2) + sizeof(int32_t)))
                  : 0);
}

// Fetches the 128-byte line holding p into L2 (no register waits for it).
__device__ __forceinline__ void km_prefetch_l2(const void *p)
{
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Selects, not branches: a branch an element (as an if took) made the
// epilogue about 27 instructions an element, the walk's bound in both forms
// (run QB: 880 M instructions for the 8B's 8K first assignment).
__device__ __forceinline__ void km_take(km_top &r, float v, int32_t j)
{
    r.second = fmaxf(r.second, fminf(v, r.s));
    const bool up = v > r.s;
    r.s = up ? v : r.s;
    r.j = up ? j : r.j;
}

// The scales of a lane's columns 8 nb + 2 t + e of a tile (sc: the tile's
// scales from the lane's first column); bad set where one is NaN (outside
// the estimate's range).
template <int NB>
__device__ __forceinline__ void km_col_scales(float2 (&rc)[NB], const float *sc, bool &bad)
{
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
        rc[nb] = *reinterpret_cast<const float2 *>(sc + 8 * nb);
        bad |= isnan(rc[nb].x) || isnan(rc[nb].y);
    }
}

// Row g + 8 h's estimates from C fragments of NB n-tiles (acc[nb][2 h + e]:
// column j + 8 nb + e, j the lane's first) into its running top; full:
// every column of the tile is under n_col (only a partial last tile takes
// a test an element). The row's scale comes after the walk, to the
// best and second only: a product by it never reverses an order (it may
// make a tie, which leaves the row to the exact path). MAIN: the main
// products alone (cross unread: KM_EPS_HI). Returns the best of these
// columns' estimates (-inf: none), for the candidate flags (km_cand_flag).
template <int NB, bool MAIN = false>
__device__ __forceinline__ float km_take_cols(km_top &r, const float (&acc)[NB][4],
                                              const float (&cross)[NB][4],
                                              const float2 (&rc)[NB], int h, int32_t j,
                                              int32_t n_col, bool full)
{
    float m = -INFINITY;
    const auto take = [&](auto all) {
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 2; e++)
                if (decltype(all)::value || j + 8 * nb + e < n_col) {
                    const float sc = e ? rc[nb].y : rc[nb].x,
                                v = (MAIN ? acc[nb][2 * h + e]
                                          : acc[nb][2 * h + e] + cross[nb][2 * h + e]) *
                                    sc;
                    km_take(r, v, j + 8 * nb + e);
                    m = fmaxf(m, v);
                }
    };
    if (full)
        take(std::true_type{});
    else
        take(std::false_type{});
    return m;
}

// The candidate flag of a tile for a row (KM_CAND_W), every lane of the
// row's quad calling: m the best estimate of the lane's columns of the
// tile, s its running best after it, rf the row's scale, at the row's
// bitmap's first word in sp.cand (-1: none kept). The quad's best is
// within W of the quad's running best where some lane's m is (fmaf is
// monotone in m).
__device__ __forceinline__ void km_cand_flag(uint32_t *cand, int32_t at, float m, float s,
                                             float rf, int32_t tile)
{
    s = fmaxf(s, __shfl_xor_sync(0xffffffffu, s, 1));
    s = fmaxf(s, __shfl_xor_sync(0xffffffffu, s, 2));
    const unsigned near =
        __ballot_sync(0xffffffffu, rf > 0 && __fmaf_rn(m, rf, KM_CAND_W) >= s * rf);
    if (threadIdx.x % 4 == 0 && at >= 0 && (near >> threadIdx.x % 32 & 0xfu))
        atomicOr(cand + at + tile / 32, 1u << tile % 32);
}

// An estimate pass's arguments (km_estimate_kernel's comment). fs, cs: the
// features' and centroids' splits, a centroid's read as km_cen_row's
// (cw: its flags, NULL where none is written).
struct km_est_args {
    const uint32_t *fs, *cs;
    const uint8_t *cw;
    const double *fnorm;
    const float *cscale;
    int32_t *cl;
    double *best;
    unsigned *margin;
    int32_t *amb, *amb_n;
    int32_t *crow;  // NULL but where the pass flags candidate tiles (km_assign_kernel's)
    km_drift dr;
    const int32_t *act;
    int32_t *chg, *touch;
    const int32_t *M_of;
    km_slices sp;
    int32_t workers;      // the balanced blocks (km_est_workers), 0: none
    int32_t worker_rows;  // the grid's first rows, theirs (ceil(workers / the grid's lists))
    const int32_t *ids;   // the grid's x's lists (km_bufs' ids), NULL: x is the list
    km_params p;
};

// What one pass walks over list lh: n rows, the ith row_of(i), and n_col
// columns in tiles of KN, the jth col_of(j).
struct km_est_list {
    int32_t n, n_col, tiles;
    const int32_t *rows, *cols;
    __device__ int32_t row_of(int32_t i) const { return rows ? rows[i] : i; }
    __device__ int32_t col_of(int32_t j) const { return cols ? cols[j] : j; }
};

// The list of a grid's column x: ids[x] where the host named the live
// lists (km_bufs' ids), else x.
__device__ __forceinline__ int32_t km_list_at(const int32_t *ids, int32_t x)
{
    return ids ? ids[x] : x;
}

// The pass over list lh for the block of rows from m0: false where the
// block has nothing to do (the whole block leaves together). Every load the
// exit needs is issued before the first test, so that an empty block (most
// of a pass's grid) waits for one trip to L2, not three in turn; the moved
// pass takes no redo_n (it walks every row).
template <bool MOVED>
__device__ __forceinline__ bool km_est_list_of(km_est_list &L, const km_est_args &a,
                                               int32_t lh, int32_t m0)
{
    const int32_t on = a.act[lh], M = a.M_of[lh];
    const int32_t nmoved = a.dr.nmoved ? a.dr.nmoved[lh] : 0;
    const int32_t redo_n = !MOVED && a.dr.redo_n ? a.dr.redo_n[lh] : 0;
    if (!on)
        return false;
    const bool restricted = km_restricted(a.dr, nmoved, a.p.k), every = MOVED || !restricted;
    if (MOVED && !restricted)
        return false;
    const size_t base = (size_t)lh * a.p.cap;
    L.n = every ? M : redo_n;
    L.n_col = MOVED ? nmoved : a.p.k;
    L.tiles = (L.n_col + KN - 1) / KN;
    L.rows = every ? nullptr : a.dr.redo + base;
    L.cols = MOVED ? a.dr.moved + base : nullptr;
    return m0 < L.n;
}

// The scales of columns j1 .. j1 + KN - 1 of the pass into sc, a thread a
// column (past n_col zeros, read from column j1's), in the thread's open
// copy group.
__device__ __forceinline__ void km_copy_scales(float *sc, const km_est_args &a,
                                               const km_est_list &L, size_t base, int32_t j1)
{
    const int32_t j = j1 + (int32_t)threadIdx.x;
    if (threadIdx.x < KN)
        ckv_cp_async4(sc + threadIdx.x, a.cscale + base + L.col_of(j < L.n_col ? j : j1),
                      j < L.n_col);
}

// The splits of the block's ROWS rows from m0 (D words a row, F the list's)
// into sm as chunks (km_copy_split_tile), SF words apart, zeros past the
// pass's rows; landed for every thread.
template <int THREADS, int ROWS, int D, int SF>
__device__ __forceinline__ void km_load_features(uint32_t *sm, const uint32_t *F,
                                                 const km_est_list &L, int32_t m0)
{
    km_copy_split_tile<THREADS, D, false>(
        sm, [=](int32_t r) { return F + (size_t)L.row_of(m0 + r) * D; }, ROWS,
        min(ROWS, L.n - m0), SF);
    ckv_cp_async_wait<0>();
    __syncthreads();
}

// A row's scale from its norm fn, and its empty top.
__device__ __forceinline__ void km_est_top_start(km_top &r, float &rf, double fn)
{
    r = {-INFINITY, -INFINITY, 0, false};
    rf = km_scale(fn, 1.0 / fn, r.bad);
}

// The lane's row scale (row i of the pass) and its empty top.
__device__ __forceinline__ void km_est_row_start(km_top &r, float &rf, const km_est_list &L,
                                                 const km_est_args &a, size_t base, int32_t i)
{
    km_est_top_start(r, rf, i < L.n ? a.fnorm[base + L.row_of(i)] : 0.0);
}

// The top of the union of two disjoint sets of a row's columns: the best
// (the lower column of a tie, as one walk in column order keeps) and the
// second, so the same whatever the sets and the order of merging.
__device__ __forceinline__ km_top km_top_merge(km_top x, km_top o)
{
    x.bad |= o.bad;
    x.second = fmaxf(fmaxf(x.second, o.second), fminf(x.s, o.s));
    if (o.s > x.s || (o.s == x.s && o.j < x.j)) {
        x.s = o.s;
        x.j = o.j;
    }
    return x;
}

// The lane's top x of a row (cbad: a column of the lane's outside the
// estimate's range) merged with the quad's, which hold the row's columns
// between them: every lane of the quad returns the row's.
__device__ __forceinline__ km_top km_est_quad(km_top x, bool cbad)
{
    x.bad |= cbad;
#pragma unroll
    for (int off = 1; off < 4; off *= 2) {
        km_top o;
        o.s = __shfl_xor_sync(0xffffffffu, x.s, off);
        o.second = __shfl_xor_sync(0xffffffffu, x.second, off);
        o.j = __shfl_xor_sync(0xffffffffu, x.j, off);
        o.bad = __shfl_xor_sync(0xffffffffu, (int)x.bad, off) != 0;
        x = km_top_merge(x, o);
    }
    return x;
}

// Row i of the pass decided from its top x over every column of the pass
// and its row scale rf (one lane a row); returns the decision's gap as
// ckv_pol_margin_bits (UINT_MAX: none), for km_note_margins. flagged: the
// pass kept the row's candidate flags (at pass row i), which an amb entry
// names in a.crow where they hold (not bad, rf > 0). MOVED: c and o the
// row's cluster and bounds (km_estimate_kernel's copies of cl and dr.top).
template <bool MOVED>
__device__ __forceinline__ unsigned km_est_decide(km_top x, float rf, int32_t i,
                                                  const km_est_list &L, const km_est_args &a,
                                                  int32_t lh, bool flagged = false,
                                                  int32_t c = 0, float2 o = {})
{
    if (i >= L.n)
        return UINT_MAX;
    const size_t base = (size_t)lh * a.p.cap;
    const int32_t m = L.row_of(i);
    const km_drift &dr = a.dr;
    if (MOVED) {
        // A row keeps its cluster where no moved centroid comes near
        // (km_drift); one whose cluster moved (joined) takes the best moved
        // one where that clears both the row's second and the second moved:
        // every unmoved centroid lies within KM_TAU of its old bounds (its
        // old best the moved cluster), every other moved one under t +
        // KM_EPS, t the second's estimate (the best's, for a kept row)
        // raised by KM_EPS_HI - KM_EPS, and the chosen one over s1 -
        // KM_EPS. The bounds move outward, so that km_drift's invariant
        // holds (a row that changes cluster takes new bounds); none: -inf.
        constexpr float lift = KM_EPS_HI - KM_EPS;
        const bool joined = dr.cmv[base + c];
        const float t =
            L.tiles > 0 ? __fadd_ru((joined ? x.second : x.s) * rf, lift) : -INFINITY;
        const float s1 = joined ? __fsub_rd(x.s * rf, lift) : __fsub_rd(o.x, KM_TAU),
                    s2 = fmaxf(__fadd_ru(o.y, KM_TAU), t);
        const float gap = __fsub_rd(s1, s2);  // NaN fails the test
        if (!x.bad && !isnan(t) && !isnan(o.y) && gap > KM_CLEAR) {
            if (joined) {
                km_move_row(a.cl, a.chg, a.touch, lh, base, m, L.col_of(x.j));
                if (dr.joined_n)
                    atomicAdd(dr.joined_n + lh, 1);
            }
            dr.top[base + m] = make_float2(s1, s2);
            if (dr.kept_n)
                atomicAdd(dr.kept_n + lh, 1);
            return ckv_pol_margin_bits((double)gap - 2 * (double)KM_EPS);
        }
        km_to_redo(dr.redo, dr.redo_n, lh, base, m);
        return UINT_MAX;
    }
    x.s *= rf;
    x.second *= rf;
    if (a.best)
        a.best[base + m] = x.s;
    const float gap = x.s - x.second;  // NaN (no column yet) fails the test
    if (!x.bad && gap > KM_CLEAR) {
        km_move_row(a.cl, a.chg, a.touch, lh, base, m, x.j);
        if (dr.top)
            dr.top[base + m] = make_float2(x.s, x.second);
        return ckv_pol_margin_bits((double)gap - 2 * (double)KM_EPS);
    }
    const int32_t at = atomicAdd(a.amb_n + lh, 1);
    a.amb[base + at] = m;
    if (a.crow)
        a.crow[base + at] = flagged && !x.bad && rf > 0 ? i : -1;
    return UINT_MAX;
}

// The least of the warp's gaps (km_est_decide's; every lane of the warp
// here) in list lh's margin: an atomic a warp, not a row (the pass over the
// moved centroids decides nearly every row of a list on one word).
__device__ __forceinline__ void km_note_margins(unsigned *margin, unsigned bits)
{
    bits = __reduce_min_sync(0xffffffffu, bits);
    if (threadIdx.x % 32 == 0 && bits != UINT_MAX)
        atomicMin(margin, bits);
}

// Assigns the rows the estimate decides (cl, the margin, dr.top) and
// lists the others in amb (amb_n[lh] of them, in no
// particular order) for km_assign_kernel: every row against every
// centroid, or for a list restricted to its moved centroids
// (km_restricted) the rows in dr.redo. With MOVED, the pass before that
// over a restricted list: every row against the moved centroids only,
// which keeps a row's cluster by km_drift's rule, or gives a row whose
// cluster moved the best moved one (its bounds updated either way), or
// lists the row in dr.redo. best (tests): the estimate's best cosine of
// every row. act, chg and touch as in km_assign_kernel.
template <int D, bool MOVED>
__global__ void
    __launch_bounds__(km_est_shape<D, MOVED>::THREADS, km_est_shape<D, MOVED>::BLOCKS)
        km_estimate_kernel(km_est_args a)
{
    using S = km_est_shape<D, MOVED>;
    constexpr int MT = S::MT, NB = S::NB, SF = S::SF, SA = S::SA, KS = D / 16;
    extern __shared__ uint4 km_est_sm[];
    uint32_t *const sm = reinterpret_cast<uint32_t *>(km_est_sm);
    // km_estimate's order
    const int32_t lh = km_list_at(a.ids, blockIdx.x), b0 = blockIdx.y * S::RB;
    km_est_list L;
    if (!km_est_list_of<MOVED>(L, a, lh, b0 * S::ROWS))
        return;
    const size_t base = (size_t)lh * a.p.cap;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const uint32_t *const F = a.fs + base * D, *const C = a.cs + base * D;
    float *const sc = reinterpret_cast<float *>(sm + S::STAGES * KN * SF);
    // MOVED: a block of rows' his, then two blocks of rows' norms, bounds
    // and clusters (by the block of rows' parity).
    uint32_t *const rs = reinterpret_cast<uint32_t *>(sc + S::STAGES * KN);
    double *const rfn = reinterpret_cast<double *>(rs + S::ROWS * SA);
    float2 *const rtop = reinterpret_cast<float2 *>(rfn + 2 * S::ROWS);
    int32_t *const rcl = reinterpret_cast<int32_t *>(rtop + 2 * S::ROWS);
    // Centroids j1 .. j1 + KN - 1 and their scales into stage st, one group:
    // the moved centroids' his from cs (an update moved them, so wrote
    // them; the main product's alone); in the pass over every centroid,
    // km_cen_row's splits.
    const auto copy_stage = [&](int32_t st, int32_t j1) {
        km_copy_scales(sc + st * KN, a, L, base, j1);
        const int32_t n = min(KN, L.n_col - j1);
        if constexpr (MOVED)
            km_copy_split_tile<S::THREADS, D, true>(
                sm + st * KN * SF, [=](int32_t r) { return C + (size_t)L.col_of(j1 + r) * D; },
                KN, n, SF);
        else
            km_copy_split_tile<S::THREADS, D, false>(
                sm + st * KN * SF,
                km_cen_rows<S::THREADS, KN>(a.fs, a.cs, a.cw, base, j1, a.M_of[lh], a.p.k, D), KN,
                n, SF);
    };
    // MOVED: the block of rows rb's his (a row's first D / 2 words, as they
    // lie), norms, bounds and clusters into shared memory, one group, zeros
    // past the pass's rows: issued a block of rows ahead, so that DRAM
    // fills them under the walk and decisions before them, and a block of
    // rows waits on no global load but its decisions' flags (the L2
    // prefetches this replaced left the rows' loads, the bounds and the
    // clusters each an L2 trip in turn: 1.39 ms for 2.40 GB at the 8B's
    // 128K call, run ZZ76). Rows are the pass's every row (every = MOVED).
    // The his evict-first, read once: without it the 8B's pass read 2.61 GB
    // against 2.40 (ZZ77; the loads' __ldcs had cut 5.92 to 4.84, ZZ49).
    // A thread copies one 16-byte chunk column of the his, PASS rows apart,
    // unrolled, without a clamp or predicate where the block of rows is
    // full (all but possibly a list's last; there a row past the pass's
    // takes its last row's address, reads nothing and writes zeros): the
    // loop over chunk indices before (each one's row and column divided
    // out, its addresses formed anew) took 145 instructions a warp and
    // block of rows, 11.5% of the pass's (run ZZ81).
    const auto copy_rows = [&](int32_t rb) {
        const int32_t m0 = (b0 + rb) * S::ROWS, n = min(S::ROWS, L.n - m0);
        constexpr int CH = D / 8, PASS = S::THREADS / CH;  // CH: 16-byte chunks of a row's his
        static_assert(S::THREADS % CH == 0 && S::ROWS % PASS == 0 && S::ROWS <= S::THREADS,
                      "copy_rows' thread map");
        const int32_t c = threadIdx.x % CH, r0 = threadIdx.x / CH;
        uint32_t *const dst = rs + r0 * SA + 4 * c;
        const uint32_t *const src = F + (size_t)m0 * D + 4 * c;
        const uint64_t once = ckv_l2_evict_first();
        const auto chunks = [&](auto full) {
#pragma unroll
            for (int32_t i = 0; i < S::ROWS / PASS; i++) {
                const int32_t r = r0 + PASS * i;
                const bool in = decltype(full)::value || r < n;
                ckv_cp_async16(dst + PASS * SA * i,
                               src + (decltype(full)::value ? r : min(r, n - 1)) * D, in, once);
            }
        };
        if (n == S::ROWS)
            chunks(std::true_type{});
        else
            chunks(std::false_type{});
        if (threadIdx.x < S::ROWS) {
            const int32_t r = threadIdx.x, half = rb % 2 * S::ROWS;
            const size_t m = base + m0 + min(r, n - 1);
            ckv_cp_async8(rfn + half + r, a.fnorm + m, r < n);
            ckv_cp_async8(rtop + half + r, a.dr.top + m, r < n);
            ckv_cp_async4(rcl + half + r, a.cl + m, r < n);
        }
        ckv_cp_async_commit();
    };
    // MOVED: whether the block takes block of rows rb (the whole block together).
    const auto has_rows = [&](int32_t rb) { return rb < S::RB && (b0 + rb) * S::ROWS < L.n; };

    if constexpr (MOVED)
        copy_rows(0);
    if (L.tiles > 0)  // none: a restricted list whose update moved no centroid
        copy_stage(0, 0);
    for (int32_t rb = 0; rb < S::RB; rb++) {
        const int32_t m0 = (b0 + rb) * S::ROWS;
        if (m0 >= L.n)
            break;  // the whole block together
        const bool again = rb > 0 && L.tiles > 1;
        if (again)
            copy_stage(0, 0);  // the walk left its last tile there
        if constexpr (MOVED) {
            // This block of rows' group, committed before any tile's copy
            // but the one just issued (km_estimate_kernel's copy_rows).
            if (again || (rb == 0 && L.tiles > 0))
                ckv_cp_async_wait<1>();
            else
                ckv_cp_async_wait<0>();
            __syncthreads();  // the rows landed for every thread
        }
        // The pass's index of the lane's row g + 8 h of its m-tile mt, and
        // its place in the block of rows.
        const auto row_in = [&](int mt, int h) { return 16 * (MT * warp + mt) + g + 8 * h; };
        const auto row_at = [&](int mt, int h) { return m0 + row_in(mt, h); };
        // A fragments of k-step s: hi (rows g, g + 8: a0, a1 the first pair,
        // a2, a3 the second), then lo (none in MOVED: the main product's
        // alone); zeros past the pass's rows.
        uint32_t ah[MT][KS][4], al[MT][KS][4];
        if constexpr (MOVED) {
            // From the block of rows' his (zeros past the pass's rows) by
            // ldmatrix, each k-step's words in their stored order, the B
            // tile's likewise (below): the mma's k order is any one both
            // share. Pairs of 8-byte loads (a0 a2, a1 a3) had to be moved
            // into each quad: 126 moves a warp and block of rows, 10.5% of
            // the pass's instructions (run ZZ81).
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int s = 0; s < KS; s++)
                    ckv_ldmatrix_x4(ah[mt][s], rs + (16 * (MT * warp + mt) + lane % 16) * SA +
                                                   8 * s + 4 * (lane / 16));
        } else {
            // Chunk 4 s + t's halves (km_split_put), from global memory.
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int32_t i = row_at(mt, h);
                    const bool in = i < L.n;
                    const uint2 *const hi =
                        reinterpret_cast<const uint2 *>(F + (size_t)L.row_of(in ? i : m0) * D) + t;
                    const uint2 *const lo = hi + D / 4;
#pragma unroll
                    for (int s = 0; s < KS; s++) {
                        const uint2 x = !in ? make_uint2(0, 0) : hi[4 * s];
                        const uint2 y = !in ? make_uint2(0, 0) : lo[4 * s];
                        ah[mt][s][h] = x.x;
                        ah[mt][s][2 + h] = x.y;
                        al[mt][s][h] = y.x;
                        al[mt][s][2 + h] = y.y;
                    }
                }
        }

        // The lane's rows row_at(mt, h).
        km_top r[MT][2];
        float rf[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                if constexpr (MOVED)
                    km_est_top_start(r[mt][h], rf[mt][h], rfn[rb % 2 * S::ROWS + row_in(mt, h)]);
                else
                    km_est_row_start(r[mt][h], rf[mt][h], L, a, base, row_at(mt, h));
        // MOVED: the next block of rows' group, once every thread has its
        // fragments (a barrier: the tile's, or here where the walk has
        // none) and no other group is to follow in this block of rows (the
        // walk's last tile's copy issued), so that waiting for a tile never
        // waits for it.
        const bool ahead = MOVED && has_rows(rb + 1);
        if (ahead && L.tiles == 0) {
            __syncthreads();
            copy_rows(rb + 1);
        }
        bool cbad = false;  // a column of the lane's outside the estimate's range (scale NaN)
        for (int32_t i = 0; i < L.tiles; i++) {
            const int32_t j0 = i * KN, st = i % S::STAGES;
            if constexpr (S::STAGES == 1) {
                if (i > 0)
                    copy_stage(0, j0);
                ckv_cp_async_wait<0>();
            } else {
                if (i + 1 < L.tiles)
                    copy_stage((i + 1) & 1, j0 + KN);
                else
                    ckv_cp_async_commit();  // an empty group keeps the count below
                ckv_cp_async_wait<1>();
            }
            __syncthreads();  // this tile's copies landed for every thread
            if (ahead && i == L.tiles - 1)
                copy_rows(rb + 1);
            // MOVED: the lane's row of an ldmatrix pair of n-tiles (its 8
            // columns' words 0-3, then 4-7, then the next n-tile's); else
            // its column g's chunk t.
            const uint32_t *const B =
                sm + st * KN * SF +
                (MOVED ? (lane % 8 + 8 * (lane / 16)) * SF + 4 * (lane / 8 % 2) : g * SF + 4 * t);
#pragma unroll
            for (int n0 = 0; n0 < KN / 8; n0 += NB) {
                float2 rc[NB];
                km_col_scales(rc, sc + st * KN + 8 * n0 + 2 * t, cbad);
                // Each k-step's three products (the main one alone over the
                // moved centroids: KM_EPS_HI) into NB x MT independent
                // accumulators of the main product and as many of the cross
                // ones, so that a chain's next mma is NB x MT mma away.
                constexpr int PARTS = MOVED ? 1 : 3;
                float acc[MT][NB][4] = {}, cross[MT][NB][4] = {};
#pragma unroll
                for (int s = 0; s < KS; s++) {
                    uint4 b[NB];
                    if constexpr (MOVED) {
                        static_assert(NB % 2 == 0, "ldmatrix takes n-tiles in pairs");
#pragma unroll
                        for (int nb = 0; nb < NB; nb += 2) {
                            uint32_t q[4];
                            ckv_ldmatrix_x4(q, B + 8 * (n0 + nb) * SF + 8 * s);
                            b[nb] = make_uint4(q[0], q[1], 0, 0);
                            b[nb + 1] = make_uint4(q[2], q[3], 0, 0);
                        }
                    } else {
#pragma unroll
                        for (int nb = 0; nb < NB; nb++)
                            b[nb] =
                                *reinterpret_cast<const uint4 *>(B + 8 * (n0 + nb) * SF + 16 * s);
                    }
#pragma unroll
                    for (int part = 0; part < PARTS; part++)
#pragma unroll
                        for (int nb = 0; nb < NB; nb++)
#pragma unroll
                            for (int mt = 0; mt < MT; mt++) {
                                const uint32_t *a = part < 2 ? ah[mt][s] : al[mt][s];
                                ckv_mma_bf16(part ? cross[mt][nb] : acc[mt][nb], a[0], a[1], a[2],
                                             a[3], part == 1 ? b[nb].z : b[nb].x,
                                             part == 1 ? b[nb].w : b[nb].y);
                            }
                }
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        km_take_cols<NB, MOVED>(r[mt][h], acc[mt], cross[mt], rc, h,
                                                j0 + 8 * n0 + 2 * t, L.n_col, j0 + KN <= L.n_col);
            }
            __syncthreads();  // every warp is done with this stage before its next copy
        }
        if constexpr (!MOVED)
            ckv_cp_async_wait<0>();  // MOVED leaves the next block of rows in flight
        unsigned gaps = UINT_MAX;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const km_top x = km_est_quad(r[mt][h], cbad);
                const int32_t ri = rb % 2 * S::ROWS + row_in(mt, h);
                if (t == 0)
                    gaps = min(gaps, km_est_decide<MOVED>(x, rf[mt][h], row_at(mt, h), L, a, lh,
                                                          false, MOVED ? rcl[ri] : 0,
                                                          MOVED ? rtop[ri] : float2{}));
            }
        km_note_margins(a.margin + lh, gaps);
    }
}

// The estimate on Hopper's warpgroup MMA (cuda_wgmma.cuh; calls whose
// km_room.wg is set, from ckv_cuda_wgmma): the same products, choices and
// bookkeeping as km_estimate_kernel's passes over every centroid. Three
// warpgroups take 64 rows each and issue a tile's products together (those
// with rows: below)
// (m64n64k16: 3 KS of them, the his and los of the tile's centroids as B
// from shared memory); the centroids stream through STAGES stages, the
// copies LEAD tiles ahead, each stage handed to the products through an
// mbarrier. The first assignment at the 8B's 8K decode-time shape takes
// 1.50 ms (run RA); with a block barrier a tile instead it took 1.84, the
// mma.sync form 2.09 (QC, QF). A tile now costs about the tensor pipe's
// 2,300 cycles plus the epilogue's 1,700 issue cycles (RI's ncu): the
// warpgroups' products still run together and their epilogues after.
// Tried: warpgroups taking turns to issue a tile's products (a named
// barrier each) gained 3% (RB): the tensor pipe shares itself among the
// queued products, so all three still finish together; turns passed only
// once a warpgroup's products completed took 1.71 ms (RC: alone, one
// warpgroup's two accumulator chains keep the pipe 51% busy); a throttle
// keeping two warpgroups' products in flight took 1.58 ms (RG). A second
// set of accumulators for the next tile's products under this tile's
// epilogue made ptxas serialize every wgmma when those products were issued
// inside ifs; a loop of two tiles a pass with its tail peeled compiles
// unserialised, but needs A from shared memory and two warpgroups a block
// for its registers (not run: docs/performance-notes.md, twenty-eighth
// session). Two 32-column groups a tile, the first's epilogue under the
// second's products, ran no faster (QD).
//
// B is K-major in the 128-byte swizzle: a stage holds the his of KN
// centroids as D / 64 blocks of 64 rows, each row 64 bf16, then the los
// alike. Row n's bytes 8 q .. 8 q + 7 (within its blocks) are the hi half
// of its split's chunk q (km_split_chunk), so a k-step's 16 k stand for
// dimensions 16 s + (0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14,
// 15): a sum over k does not depend on which dimension each k stands for,
// so A takes the same order. Its m16n8k16 fragment's k = 2 t, 2 t + 1
// (registers 0, 1) are then chunk 4 s + t / 2's word t % 2, and k = 2 t +
// 8, 2 t + 9 (registers 2, 3) chunk 4 s + 2 + t / 2's (the los two words
// on).
template <int D>
struct km_wg_shape {
    static constexpr int WGS = 3, THREADS = 128 * WGS, ROWS = 64 * WGS, KS = D / 16,
                         STAGES = 4, LEAD = 2, SF = D + 16;
    static constexpr int PART = D / 64 * KN * 128;  // bytes of a stage's his (or los)
    static constexpr int STAGE = 2 * PART;          // a multiple of the swizzle's 1024
    static_assert(ROWS * SF * sizeof(uint32_t) <= STAGES * STAGE,
                  "the feature tile fits in the stages");
};

// The stages, their columns' scales, a barrier a stage, and the room to
// align the stages to 1024 bytes from the 16 a launch guarantees.
template <int D>
constexpr size_t km_wg_smem()
{
    using S = km_wg_shape<D>;
    return (size_t)S::STAGES * (S::STAGE + KN * sizeof(float) + sizeof(uint64_t)) + 1024 - 16;
}

// d = A B over one tile's KS k-steps, as one committed group: acc the his'
// product, cross the two cross products (dh, dl: descriptors of the
// stage's his and los).
template <int KS>
__device__ __forceinline__ void km_wg_products(float (&acc)[KN / 8][4], float (&cross)[KN / 8][4],
                                               const uint32_t (&ah)[KS][4],
                                               const uint32_t (&al)[KS][4], uint64_t dh,
                                               uint64_t dl)
{
    ckv_wgmma_fence();
#pragma unroll
    for (int s = 0; s < KS; s++) {
        // k-step s: block s / 4, 32 bytes a step into the rows
        const uint32_t off = s / 4 * (KN * 128) + s % 4 * 32;
        const uint64_t bh = ckv_wgmma_desc_at(dh, off), bl = ckv_wgmma_desc_at(dl, off);
        if (s == 0) {
            ckv_wgmma_bf16<KN, 0, true>(acc, ah[0], bh, 0);
            ckv_wgmma_bf16<KN, 0, true>(cross, ah[0], bl, 0);
        } else {
            ckv_wgmma_bf16<KN, 0>(acc, ah[s], bh, 1);
            ckv_wgmma_bf16<KN, 0>(cross, ah[s], bl, 1);
        }
        ckv_wgmma_bf16<KN, 0>(cross, al[s], bh, 1);
    }
    ckv_wgmma_commit();
}

// km_own_row(j) for j, j + KN, j + 2 KN, ... in turn (the wgmma
// estimate's copies): with (2j + 1) M = 2k q + e, 0 <= e < 2k, a step adds
// 2 KN M to the left, so KN M / k to q and 2 (KN M mod k) to e, then
// carries one. q is read only for j < k, where it is below M; past that
// (the lanes' rows beyond the tile, a step after the last tile) it may
// wrap, so it is unsigned. A second tile means k > KN, so KN M / k < M.
struct km_own_walk {
    uint32_t q, dq;
    int64_t e, de, b;
    __device__ km_own_walk(int32_t j, int32_t M, int32_t k)
    {
        const int64_t s = (int64_t)KN * M;
        q = (uint32_t)km_own_row(j, M, k);
        b = 2 * (int64_t)k;
        e = (2 * (int64_t)j + 1) * M - (int64_t)q * b;
        dq = (uint32_t)(s / k);
        de = 2 * (s % k);
    }
    __device__ void step()
    {
        q += dq;
        e += de;
        if (e >= b) {
            e -= b;
            q++;
        }
    }
};

// BAL: the launch's first a.workers blocks (in its first a.worker_rows
// rows) take the lists whose pass has
// at most KM_EST_SLICE_ROWS rows (a decode-time call's: about the
// interval's 64 a list), balanced: the tiles of those lists, end to end,
// cut into equal contiguous ranges, one a block, and the last of a list's
// blocks to arrive merges their tops (km_top_merge: the same bits as one
// walk). At head_dim 64 the ranges are one wave of equal shares
// (km_est_workers), and a block walks each list its range touches in turn
// (a segment; most take two): slices of a list each, a multiple of the
// lists, left the SMs a last wave of 96 blocks of 132 at SmolLM2's 90
// lists (runs ZZ64, ZZ68). At head_dim 128 the loop over segments made
// ptxas spill 558 bytes a thread where one segment spills 72, so there
// the ranges are each live list's equal slices (as many a list as the
// workers a column of the grid), one segment a block, the block of the
// grid's column of its list. The other blocks are row blocks: the list of
// column blockIdx.x (km_list_at), the rows from m0 every tile, a block of them (with BAL only
// lists of more rows). FLAGS: the form that flags the candidate tiles
// (KM_CAND_W) of a list whose pass has at most KM_EST_SLICE_ROWS rows and
// KM_CAND_TILES tiles, a call's first (the flags' work and registers in
// its tile loop: the later passes keep the form without).
template <int D, bool BAL, bool FLAGS>
__global__ void __launch_bounds__(km_wg_shape<D>::THREADS, 1) km_estimate_wg_kernel(km_est_args a)
{
    using S = km_wg_shape<D>;
    constexpr int KS = S::KS, SF = S::SF, CH = D / 4;
    constexpr bool MULTI = D == 64;  // a worker's range may touch several lists
    extern __shared__ __align__(16) unsigned char km_wg_raw[];
    static_assert(KM_EST_SLICE_ROWS == S::ROWS, "a worker's rows are one block's");
    // The workers take the grid's first a.worker_rows rows (the first
    // a.workers blocks of them), the row blocks the rest: the list is the
    // grid's x's (km_list_at), so that no block divides by the lists
    // before its first load
    // (most of a pass's blocks only load and leave: with id % lists and id
    // / lists the 8B's 128K passes took 1.7-2% longer and its third pass
    // 0.104 -> 0.208 ms under ncu, its empty blocks' cycles 342 -> 866 each,
    // run ZZ75).
    const int32_t id = (int32_t)(blockIdx.y * gridDim.x + blockIdx.x);
    const bool worker = BAL && (int32_t)blockIdx.y < a.worker_rows;
    // At head_dim 64 the workers' live lists vl[] in order, and wr: all
    // their tiles and the workers that share them in equal ranges (kept
    // here, not in registers, from segment to segment).
    __shared__ int16_t vl[BAL && MULTI ? KM_SLICE_LISTS : 1];
    __shared__ int32_t wr[2];
    int32_t lh = km_list_at(a.ids, blockIdx.x), m0 = 0;
    km_est_list L;
    const int32_t tl = (a.p.k + KN - 1) / KN;  // a list's tiles
    // At head_dim 128 the slices of each list (a.workers: the slices a list
    // times all the lists, km_est_workers).
    int32_t wn = 0;
    if (worker && MULTI) {
        if (id >= a.workers)
            return;  // (the whole block: the workers' last row's tail)
        using Scan = cub::BlockScan<int32_t, S::THREADS>;
        __shared__ typename Scan::TempStorage scan;
        static_assert(2 * S::THREADS >= KM_SLICE_LISTS, "a thread finds two lists");
        int32_t ok[2], at[2], lst[2], live;
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int32_t l = 2 * (int32_t)threadIdx.x + u;
            lst[u] = l < (int32_t)gridDim.x ? km_list_at(a.ids, l) : 0;
            ok[u] = l < (int32_t)gridDim.x && km_est_list_of<false>(L, a, lst[u], 0) &&
                    L.n <= KM_EST_SLICE_ROWS;
        }
        Scan(scan).ExclusiveSum(ok, at, live);
#pragma unroll
        for (int u = 0; u < 2; u++)
            if (ok[u])
                vl[at[u]] = (int16_t)lst[u];
        const int32_t wt = live * tl;  // (the scratch's lists' tiles: far within int32_t)
        const int32_t wb = ckv_km_range_blocks(true, a.workers, gridDim.x, live, tl);
        if (threadIdx.x == 0) {
            wr[0] = wt;
            wr[1] = wb;
        }
        __syncthreads();
        if (id >= wb)
            return;  // (the whole block)
    } else if (worker) {
        // At head_dim 128, slice blockIdx.y of column blockIdx.x's list: one segment
        // a block needs no scan of the lists, and a worker of a list with no
        // such pass leaves at once (ptxas: 36 / 48 bytes spilled against
        // 72 / 96 with the scan).
        if (!km_est_list_of<false>(L, a, lh, 0) || L.n > KM_EST_SLICE_ROWS ||
            (int32_t)blockIdx.y >=
                (wn = ckv_km_range_blocks(false, a.workers, gridDim.x, 1, tl)))
            return;
    } else {
        m0 = ((int32_t)blockIdx.y - (BAL ? a.worker_rows : 0)) * S::ROWS;
        if (!km_est_list_of<false>(L, a, lh, m0) || (BAL && L.n <= KM_EST_SLICE_ROWS))
            return;
    }
    const uint32_t raw = ckv_smem_addr(km_wg_raw), sb = (raw + 1023) & ~1023u;
    uint32_t *const sm = reinterpret_cast<uint32_t *>(km_wg_raw + (sb - raw));
    float *const sc = reinterpret_cast<float *>(sm) + S::STAGES * S::STAGE / 4;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    // Centroids j1 .. j1 + KN - 1 into stage st (past n_col zeros, read
    // from the list's first feature's address), and their scales, one group. Thread i
    // copies chunk q = i % CH of centroids i / CH + RS u, its hi half to the
    // his and its lo half to the los (layout above): the chunk's place in
    // a row is the thread's own, computed once (a loop over the stage's
    // chunks that formed both addresses each time took about 40
    // instructions a chunk, near a third of a tile's: run QD's SASS).
    constexpr int RS = S::THREADS / CH, RU = (KN + RS - 1) / RS;
    static_assert(S::THREADS % CH == 0, "a thread keeps its chunk");
    // A centroid's split is km_cen_row's. A warp copies PW rows a round u
    // (thread i's i / CH + RS u): lane PW u + h finds where the warp's hth
    // row of round u lies, and the copies take it by shuffle (km_cen_rows);
    // where cw is, that lane's flag of a tile loads as the tile before is
    // copied (fl), so that no copy waits on one, and its row's km_own_row
    // steps from tile to tile (ow), so that none waits on its chain (each
    // warp's copies are on its path from tile to tile: formed at each copy,
    // the chain and shuffles of pointers took SmolLM2's 128K call's three
    // passes 1.03 -> 1.35 ms, run ZZ21). The tiles are copied in order.
    constexpr int PW = 32 / CH;
    static_assert(32 % CH == 0 && RU * PW <= 32 && RS % PW == 0 && KN % PW == 0,
                  "a lane a row; a round's rows leave the tile together");
    const int cq = threadIdx.x % CH, r0 = threadIdx.x / CH;
    const uint32_t q_at = cq / 16 * (KN * 128) + cq % 2 * 8, q_piece = cq % 16 / 2;
    const int mr = warp * PW + lane % PW + RS * (lane / PW);  // the row it finds
    const bool mine = lane < RU * PW && mr < KN;

    // Tile i's stage is full once every warp has arrived on full[i %
    // STAGES]: a warp arrives when its threads' copies of the tile have
    // landed (each thread's wait) and are visible to wgmma (each thread's
    // proxy fence; then the warp's barrier, so that lane 0's release covers
    // the other lanes' copies). A warp arrives for tile i + 1 early in its
    // pass over tile i, before that tile's epilogue, so that a warpgroup
    // may run a tile ahead of the others: it waits for their epilogues of
    // the tile before last, not of the last (a block barrier a tile held
    // them in step: RA). The copies run LEAD tiles ahead: stage (i + LEAD)
    // % STAGES held tile i - 2, which every warp had finished with
    // (products waited for, scales read) before it arrived for tile i, and
    // the copying thread waited for that. (racecheck does not credit
    // mbarriers: it flags the scales' copies against their reads, run RD.)
    // i counts the block's tiles over its segments (a worker's lists), so
    // that each barrier's phases run on.
    static_assert(S::STAGES == S::LEAD + 2, "a stage is refilled two tiles after its use");
    const uint32_t full = sb + S::STAGES * (S::STAGE + KN * sizeof(float));
    if (threadIdx.x < S::STAGES)  // seen by all after km_load_features' barrier
        ckv_mbar_init(full + 8 * threadIdx.x, S::THREADS / 32);
    const auto arrive_full = [&](int st) {
        ckv_cp_async_wait<S::LEAD - 1>();  // the tile's group, not the one after
        ckv_fence_proxy_async();
        __syncwarp();
        if (lane == 0)
            ckv_mbar_arrive(full + 8 * st);
    };
    __shared__ km_top wg_top[S::WGS - 1][64];
    const uint64_t d0 = ckv_wgmma_desc(sb, 16);  // the stages' start, K-major
    int32_t done = 0;  // the block's tiles walked in its segments before
    bool more;         // whether a segment follows
    do {
        // The segment: tiles t0 .. t0 + nt - 1 of list lh, slice sl of the
        // ns blocks that walk it (a worker's: those whose ranges touch the
        // list; 1: the block decides its rows alone).
        int32_t t0 = 0, nt, sl = 0, ns = 1;
        more = false;
        if (worker) {
            // (at head_dim 128 the list's wn slices alone)
            const ckv_km_segment seg =
                MULTI ? ckv_km_segment_of(id, done, tl, wr[0], wr[1])
                      : ckv_km_segment_of((int32_t)blockIdx.y, 0, tl, tl, wn);
            if (MULTI)
                lh = vl[seg.v];
            t0 = seg.t0;
            nt = seg.nt;
            sl = seg.sl;
            ns = seg.ns;
            more = MULTI && seg.more;
        }
        km_est_list_of<false>(L, a, lh, m0);  // (again: not kept across segments)
        if (!worker)
            nt = L.tiles;
        const int32_t i0 = done;
        done += nt;
        if (i0 > 0)
            __syncthreads();  // the stages and wg_top free for the next segment
        const bool sliced = ns > 1;
        const size_t base = (size_t)lh * a.p.cap;
        const uint32_t *const F = a.fs + base * D, *const C = a.cs + base * D;
        uint8_t fl = 0;
        km_own_walk ow(t0 * KN + mr, a.M_of[lh], a.p.k);  // from the first tile copied
        const auto load_flag = [&](int32_t j1) {
            fl = a.cw && mine && j1 + mr < L.n_col ? a.cw[base + j1 + mr] : 0;
        };
        const auto copy_stage = [&](int st, int32_t j1) {
            // The lane's row: its feature's index (>= 0) or -1 - its centroid's.
            const int32_t at_row =
                mine && j1 + mr < L.n_col ? fl ? -1 - (j1 + mr) : (int32_t)ow.q : 0;
            load_flag(j1 + KN);
            ow.step();
            const uint32_t hb = sb + st * S::STAGE + q_at;
#pragma unroll
            for (int u = 0; u < RU; u++) {
                const int r = r0 + RS * u;
                if (RS * (u + 1) > KN && r >= KN)
                    break;  // for the whole warp (its PW rows are aligned to PW)
                const bool in = j1 + r < L.n_col;
                const int32_t w = __shfl_sync(0xffffffffu, at_row, PW * u + lane / CH);
                const uint32_t *const src =  // chunk cq's hi half (km_split_put)
                    (w < 0 ? C + (size_t)(-1 - w) * D : F + (size_t)w * D) + 2 * cq;
                const uint32_t at = hb + ckv_swizzle128(r, q_piece);
                ckv_cp_async8(at, src, in);
                ckv_cp_async8(at + S::PART, src + D / 2, in);
            }
            km_copy_scales(sc + st * KN, a, L, base, j1);
            ckv_cp_async_commit();
        };

        // A block with at most 64 of the pass's rows (a decode-time call's
        // first assignment leaves about the interval's 64 rows a list to the
        // estimate) splits the columns instead: every warpgroup takes those
        // rows and every WGS-th tile from its own, and the tops merge at the
        // end (km_top_merge: the same bits as one walk). Only one warpgroup
        // had worked, tile after tile, the other two copying and arriving
        // (SmolLM2's 32K decode-time call's first estimate 0.18 -> 0.157 ms,
        // the 8B's 0.54 -> 0.47, runs YB, YC: a warp arrives for a tile only
        // after its own last one, so about two tiles overlap, not three).
        const bool split = L.n - m0 <= KM_EST_ROWS;
        const int wg = warp / 4, rw = split ? warp % 4 : warp;  // rw: the warp's 16 rows
        load_flag(t0 * KN);
        km_load_features<S::THREADS, S::ROWS, D, SF>(sm, F, L, m0);
        // Row g (+ 8) of the warp's 16: A's k-step s, his then los (above).
        uint32_t ah[KS][4], al[KS][4];
#pragma unroll
        for (int s = 0; s < KS; s++)
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const uint32_t *w = sm + (16 * rw + g + 8 * (u & 1)) * SF +
                                    4 * (4 * s + 2 * (u >> 1) + t / 2) + t % 2;
                ah[s][u] = w[0];
                al[s][u] = w[2];
            }
        __syncthreads();  // the stages take the features' place
#pragma unroll
        for (int u = 0; u < S::LEAD; u++)
            if (u < nt)
                copy_stage((i0 + u) % S::STAGES, (t0 + u) * KN);
            else
                ckv_cp_async_commit();  // empty groups keep the counts
        if (nt > 0)
            arrive_full(i0 % S::STAGES);

        km_top r[2];
        float rf[2];
#pragma unroll
        for (int h = 0; h < 2; h++)
            km_est_row_start(r[h], rf[h], L, a, base, m0 + 16 * rw + g + 8 * h);
        // The lane's row g's bitmap in a.sp.cand (row g + 8's 8 rows on), -1
        // where the pass keeps none (m0 is 0 where it does).
        const bool flags = FLAGS && L.n <= KM_EST_SLICE_ROWS && L.tiles <= KM_CAND_TILES;
        const int32_t cand_at =
            flags ? (lh * KM_EST_SLICE_ROWS + 16 * rw + g) * KM_CAND_WORDS : -1;
        bool cbad = false;
        // A warpgroup none of whose 64 rows is the pass's (no split) only
        // copies and arrives: the idle two's products had shared the tensor
        // pipe with the third's (SmolLM2's 32K decode-time call's three
        // estimates 0.75 -> 0.56 ms, run XC). Its first tile is past the
        // last, so that it only takes the walk after the products' loop: an
        // if around the products made ptxas serialize every wgmma.
        const bool idle = !split && m0 + 64 * wg >= L.n;
        // Tile i's next copies (LEAD tiles on) and the warp's arrival for i + 1.
        const auto advance = [&](int32_t i) {
            if (i + S::LEAD < nt)
                copy_stage((i0 + i + S::LEAD) % S::STAGES, (t0 + i + S::LEAD) * KN);
            else
                ckv_cp_async_commit();  // empty groups keep the counts
            if (i + 1 < nt)
                arrive_full((i0 + i + 1) % S::STAGES);
        };
        // Every warp waits for every tile and advances after it, in order
        // (the stages' reuse above rests on it), products or not: `next` the
        // first tile the warp has not yet passed.
        int32_t next = 0;
        const auto wait_full = [&](int32_t i) {
            ckv_mbar_wait(full + 8 * ((i0 + i) % S::STAGES), (i0 + i) / S::STAGES & 1);
        };
        const auto pass_to = [&](int32_t i) {
            for (; next < i; next++) {
                wait_full(next);
                advance(next);
            }
        };
        const int32_t step = split ? S::WGS : 1;
        for (int32_t i = idle ? nt : split ? wg : 0; i < nt; i += step) {
            pass_to(i);
            const int st = (i0 + i) % S::STAGES;
            wait_full(i);
            next = i + 1;
            float acc[KN / 8][4], cross[KN / 8][4];
            km_wg_products(acc, cross, ah, al, ckv_wgmma_desc_at(d0, st * S::STAGE),
                           ckv_wgmma_desc_at(d0, st * S::STAGE + S::PART));
            advance(i);
            ckv_wgmma_wait<0>();
            ckv_wgmma_hold(acc);
            ckv_wgmma_hold(cross);
            float2 rc[KN / 8];
            km_col_scales(rc, sc + st * KN + 2 * t, cbad);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const float m = km_take_cols(r[h], acc, cross, rc, h, (t0 + i) * KN + 2 * t,
                                             L.n_col, (t0 + i) * KN + KN <= L.n_col);
                if constexpr (FLAGS)
                    km_cand_flag(a.sp.cand, cand_at < 0 ? -1 : cand_at + 8 * KM_CAND_WORDS * h,
                                 m, r[h].s, rf[h], t0 + i);
            }
        }
        pass_to(nt);
        ckv_cp_async_wait<0>();
        km_top xt[2];
#pragma unroll
        for (int h = 0; h < 2; h++)
            xt[h] = km_est_quad(r[h], cbad);
        if (split) {  // the other warpgroups' tops of the rows to the first's
            if (wg > 0 && t == 0)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    wg_top[wg - 1][16 * rw + g + 8 * h] = xt[h];
            __syncthreads();
            if (wg == 0)
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int o = 0; o < S::WGS - 1; o++)
                        xt[h] = km_top_merge(xt[h], wg_top[o][16 * rw + g + 8 * h]);
        }
        if (sliced) {  // the slice's tops out; the last block to arrive merges them all
            // (the first warpgroup's warps hold the rows where the warpgroups
            // split the tiles, every warp its own rows otherwise)
            km_top *const tb = a.sp.etop + (size_t)lh * KM_EST_SLICES * KM_EST_SLICE_ROWS;
            const bool holds = !split || wg == 0;
            if (holds && t == 0)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    tb[sl * KM_EST_SLICE_ROWS + 16 * rw + g + 8 * h] = xt[h];
            if (!km_last_to_arrive(a.sp.en + lh, ns))
                continue;  // (the whole block)
            if (holds)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const auto slice = [&](int32_t s2) {
                        const km_top *const o = tb + s2 * KM_EST_SLICE_ROWS + 16 * rw + g + 8 * h;
                        return km_top{
                            __ldcg(&o->s), __ldcg(&o->second), __ldcg(&o->j),
                            __ldcg(reinterpret_cast<const unsigned char *>(&o->bad)) != 0};
                    };
                    xt[h] = slice(0);
                    for (int32_t s2 = 1; s2 < ns; s2++)
                        xt[h] = km_top_merge(xt[h], slice(s2));
                }
        }
        if (split && wg > 0)
            continue;
        unsigned gaps = UINT_MAX;
        if (t == 0)
#pragma unroll
            for (int h = 0; h < 2; h++)
                gaps = min(gaps, km_est_decide<false>(xt[h], rf[h], m0 + 16 * rw + g + 8 * h, L,
                                                      a, lh, flags));
        km_note_margins(a.margin + lh, gaps);
    } while (more);
}

// The group step: each cluster's members in slot order (ival_out), a run a
// cluster (run_b, -1 where empty, and run_e: absolute places), as cub's
// stable sort by cluster gives them, a block a list in two kernels around
// that sort. At a decode-time call nearly every row m keeps the centroid j
// it starts (cl[m] = j, km_own_row(j) = m: a home row), so in the sort's
// order the home rows keep their slot order and the few others (displaced:
// the rows that start none, those that left their own) fall among them:
// their places are counted, not sorted. The prep, the sort, the runs and the
// first update's flags took 0.041 + 0.381 + 0.044 + 0.060 ms of the 8B's
// 128K call (run ZZ49: cub's fallback, a block a list, six passes over
// the keys' 32 bits). A list of more than GROUP_MOST displaced rows (a prefill-time
// call's) goes to the sort as before.
enum { GROUP_THREADS = 512, GROUP_EACH = 8, GROUP_MOST = 1024, GROUP_CHUNKS = 1024 };

// [lists] each: the sort's segment ends (empty where the list is counted),
// the displaced rows' counts; [lists][GROUP_MOST] each: those rows, their
// clusters.
struct km_group {
    int32_t *e, *n, *m, *c;
};

static size_t km_group_bytes(size_t lists)
{
    return lists * (2 + 2 * (size_t)GROUP_MOST) * sizeof(int32_t);
}

static km_group km_group_at(int32_t *g, size_t lists)
{
    return {g, g + lists, g + 2 * lists, g + (2 + GROUP_MOST) * lists};
}

// A list's displaced rows (in any order); where they are too many, the
// sort's inputs and no runs yet.
__global__ void __launch_bounds__(GROUP_THREADS)
    km_group_scan_kernel(const int32_t *__restrict__ cl, int32_t *__restrict__ ikey,
                         int32_t *__restrict__ ival, int32_t *__restrict__ run_b, km_group g,
                         const int32_t *act, const int32_t *seg_b, const int32_t *M_of,
                         km_params p)
{
    __shared__ int32_t n;
    const int32_t lh = blockIdx.x, lane = threadIdx.x % 32;
    if (!act[lh]) {
        if (threadIdx.x == 0)
            g.e[lh] = seg_b[lh];  // nothing to sort
        return;
    }
    const int32_t M = M_of[lh];
    const size_t base = (size_t)lh * p.cap, at0 = (size_t)lh * GROUP_MOST;
    if (threadIdx.x == 0)
        n = 0;
    __syncthreads();
    // GROUP_EACH rows a thread at a time, their loads in flight together.
    for (int32_t m0 = 0; m0 < M; m0 += GROUP_THREADS * GROUP_EACH) {
        int32_t c[GROUP_EACH];
#pragma unroll
        for (int e = 0; e < GROUP_EACH; e++) {
            const int32_t m = m0 + e * GROUP_THREADS + threadIdx.x;
            c[e] = m < M ? cl[base + m] : 0;
        }
#pragma unroll
        for (int e = 0; e < GROUP_EACH; e++) {
            const int32_t m = m0 + e * GROUP_THREADS + threadIdx.x;
            const bool out = m < M && !km_own_is(c[e], m, M, p.k);
            const unsigned b = __ballot_sync(0xffffffffu, out);
            if (!b)
                continue;
            int32_t at = 0;
            if (lane == 0)
                at = atomicAdd(&n, __popc(b));
            at = __shfl_sync(0xffffffffu, at, 0) + __popc(b & ((1u << lane) - 1));
            if (out && at < GROUP_MOST) {
                g.m[at0 + at] = m;
                g.c[at0 + at] = c[e];
            }
        }
    }
    __syncthreads();
    const bool sort = n > GROUP_MOST;
    if (threadIdx.x == 0) {
        g.n[lh] = n;
        g.e[lh] = seg_b[lh] + (sort ? M : 0);
    }
    if (!sort)
        return;
    for (int32_t m = threadIdx.x; m < M; m += GROUP_THREADS) {
        ikey[base + m] = cl[base + m];
        ival[base + m] = m;
    }
    for (int32_t j = threadIdx.x; j < p.k; j += GROUP_THREADS)
        run_b[base + j] = -1;
}

// The runs and members of each list km_group_scan_kernel counted, the runs
// of each it left to the sort; with touch (a call's first assignment), the
// first update's flags: every cluster but one whose only member is the row
// that started it (its mean is that row's feature, the centroid it has).
//
// The places of a counted list (cl below k for every row): the orphans are
// the centroids whose row is displaced (sorted by row, so by centroid), the
// entries the displaced rows sorted by (cluster, row). Before cluster j's
// run come j - (orphans below j) home rows and the entries of clusters below
// j; its members are its home row unless j is an orphan, then its entries.
// An entry (c, m) of rank r has the r entries before it and c - (orphans
// below c) home rows, one more where c has its home row and that row is
// below m.
__global__ void __launch_bounds__(GROUP_THREADS, 2)
    km_group_runs_kernel(km_group g, const int32_t *__restrict__ ikey_out,
                         int32_t *__restrict__ ival_out, int32_t *__restrict__ run_b,
                         int32_t *__restrict__ run_e, int32_t *__restrict__ touch,
                         const int32_t *act, const int32_t *M_of, km_params p)
{
    __shared__ int32_t row[GROUP_MOST], clu[GROUP_MOST], own[GROUP_MOST];  // as scanned
    __shared__ int32_t kc[GROUP_MOST], km[GROUP_MOST], oc[GROUP_MOST];     // entries, orphans
    // Chunks of 2^sh clusters: each one's first entry and orphan (one past
    // the last chunk: their counts).
    __shared__ int32_t ks[GROUP_CHUNKS + 1], os[GROUP_CHUNKS + 1];
    __shared__ int32_t n_o;
    const int32_t lh = blockIdx.x;
    if (!act[lh])
        return;
    const int32_t M = M_of[lh], k = p.k, D = g.n[lh];
    const size_t base = (size_t)lh * p.cap, at0 = (size_t)lh * GROUP_MOST;
    if (D > GROUP_MOST) {  // sorted: its runs as ckv_pol_runs marks them
        for (int32_t i = threadIdx.x; i < M; i += GROUP_THREADS)
            ckv_pol_run_mark(ikey_out, base, base + M, base + i, run_b + base, run_e + base);
        if (!touch)
            return;
        __syncthreads();  // the block's bounds before they are read
        for (int32_t j = threadIdx.x; j < k; j += GROUP_THREADS) {
            const int32_t rb = run_b[base + j];  // -1: empty (run_e stale)
            touch[base + j] = rb >= 0 && !(run_e[base + j] - rb == 1 &&
                                           ival_out[rb] == km_own_row(j, M, k));
        }
        return;
    }
    if (threadIdx.x == 0)
        n_o = 0;
    for (int32_t t = threadIdx.x; t < D; t += GROUP_THREADS) {
        row[t] = g.m[at0 + t];
        clu[t] = g.c[at0 + t];
        own[t] = km_own_of(row[t], M, k);
    }
    __syncthreads();
    for (int32_t t = threadIdx.x; t < D; t += GROUP_THREADS) {
        const int32_t m = row[t], c = clu[t];
        int32_t r = 0, ro = 0;
        for (int32_t s = 0; s < D; s++) {
            r += clu[s] < c || (clu[s] == c && row[s] < m);
            ro += own[s] >= 0 && row[s] < m;
        }
        kc[r] = c;
        km[r] = m;
        if (own[t] >= 0) {
            oc[ro] = own[t];
            atomicAdd(&n_o, 1);
        }
    }
    __syncthreads();
    int32_t sh = 5;  // a warp's 32 clusters in one chunk
    while (((k - 1) >> sh) >= GROUP_CHUNKS)
        sh++;
    const int32_t chunks = ((k - 1) >> sh) + 1, O = n_o;
    for (int32_t ch = threadIdx.x; ch <= chunks; ch += GROUP_THREADS) {
        ks[ch] = km_own_lower(kc, 0, D, ch << sh);
        os[ch] = km_own_lower(oc, 0, O, ch << sh);
    }
    __syncthreads();
    // The orphans below cluster c (no) and whether c has its home row.
    const auto orphans = [&](int32_t c, int32_t &no) {
        const int32_t ch = c >> sh;
        no = os[ch];
        while (no < os[ch + 1] && oc[no] < c)
            no++;
        return !(no < os[ch + 1] && oc[no] == c);
    };
    const int32_t first = (int32_t)base;
    for (int32_t j = threadIdx.x; j < k; j += GROUP_THREADS) {
        int32_t no;
        const bool home = orphans(j, no);
        const int32_t ch = j >> sh;
        int32_t kb = ks[ch];
        while (kb < ks[ch + 1] && kc[kb] < j)
            kb++;
        int32_t ke = kb;
        while (ke < ks[ch + 1] && kc[ke] == j)
            ke++;
        const int32_t at = j - no + kb, n = home + ke - kb;  // the run's place in the list, size
        run_b[base + j] = n ? first + at : -1;
        run_e[base + j] = first + at + n;
        if (home) {
            const int32_t r = km_own_row(j, M, k);
            int32_t q = kb;
            while (q < ke && km[q] < r)
                q++;
            ival_out[base + at + q - kb] = r;
        }
        if (touch)
            touch[base + j] = ke > kb;
    }
    for (int32_t t = threadIdx.x; t < D; t += GROUP_THREADS) {
        const int32_t c = kc[t], m = km[t];
        int32_t no;
        const bool home = orphans(c, no);
        ival_out[base + t + c - no + (home && km_own_row(c, M, k) < m)] = m;
    }
}

// Lloyd step for UPDATE_CLUSTERS clusters an item: each one's normalised
// degree-weighted mean of its members' features, members in slot order;
// empty clusters and means of norm below 1e-30 keep their centroid. Only
// the clusters km_touch_list_kernel listed are formed: a cluster the last
// assignment did not touch keeps its centroid (the same members in the same
// order would give the same bits), and a lone member's feature is its mean,
// as it is (the CPU's update), so at the first update a cluster that kept
// only the row that started it is left too (km_group_runs_kernel's flags).
// An item is 32 of a list's listed clusters, in the list's order; a block
// takes every gridDim.x-th item (a block for each 32 clusters of every
// list, nearly all of them leaving after their flags, took 0.739 ms of the
// 8B's 128K decode-time call for about 64 touched clusters a list, ZZ49).
// Each sum runs over the members, then the dimensions, in the CPU's order:
//  - a warp a cluster forms the mean, lane i taking dimensions i, i + 32,
//    ..., so that a member's feature row is read coalesced (a thread per
//    cluster read 32 rows a warp load: 5.2 ms an iteration of the 8B's
//    decode-time call at 8K against 0.80, run KJ), into the block's shared
//    memory;
//  - a lane a cluster then forms its norm's chain over that row, and
//    after the division the new centroid's norm's (km_set_cnorm), the same
//    chain km_feature_kernel forms over the same doubles for the norms the
//    initial centroids take: so a kept centroid's norm stays right. Every
//    lane of a warp had formed the same chain: by count about 89% of the
//    update's non-fused FP64 instructions, in a first launch of 3.7 ms at
//    the 8B's 32K decode-time call, and a separate kernel the second chain
//    over the centroids in global memory, a thread a row, 1.4 ms (run WC);
//    together 3.9 ms (run WE), its top stall then L1TEX (run XA), not the
//    chains' barrier: 2.75 ms once a warp's four clusters load together
//    (below; run XC). An earlier form, a warp walking 32 clusters one after
//    another for all of it, waited on each one's loads (run MD);
//  - with cs, the new centroid's split (km_split_put), a lane a chunk,
//    and whether it moved (km_drift: cmv, and the list moved, nmoved[lh]
//    of them, in no particular order), against the old centroid loaded
//    before the block's stores (when each old value was read beside its
//    store, after the division, each such load waited about 12 us: runs
//    PA, PB).
// D as in km_assign_kernel, so that the chains unroll.
enum { UPDATE_THREADS = 256, UPDATE_WARPS = UPDATE_THREADS / 32, UPDATE_CLUSTERS = 32 };
constexpr int UPDATE_EACH = UPDATE_CLUSTERS / UPDATE_WARPS;  // a warp's clusters

// touch's buffer: the flags (slots), then the update's list (slots), its
// counts (1 + lists) and its items (a list's at most km_touch_items(cap),
// so slots / 32 + lists in all).
static size_t km_touch_bytes(const ckv_gpu_policy_ws *w)
{
    return (2 * w->slots + 1 + 2 * w->lists + w->slots / UPDATE_CLUSTERS) * sizeof(int32_t);
}

// The items a list of cap slots can have at most (its k <= cap clusters
// listed), so that item q of list lh is numbered lh times this plus q.
__host__ __device__ __forceinline__ int32_t km_touch_items(int32_t cap)
{
    return (cap + UPDATE_CLUSTERS - 1) / UPDATE_CLUSTERS;
}

// The block's rows of d doubles, one over d so that lane c's walk down its
// row and the lanes' reads across one hit distinct banks: the means, then,
// where there are splits (olds), the old centroids.
static size_t km_update_smem(int32_t d, bool olds)
{
    return (olds ? 2 : 1) * UPDATE_CLUSTERS * (size_t)(d + 1) * sizeof(double);
}

// The norm of a row of d doubles, as the CPU forms it: one chain of
// products and sums over the dimensions in order (D as below, so that it
// unrolls).
template <int D>
__device__ __forceinline__ double km_norm_chain(const double *s, int32_t d)
{
    double n = 0;
#pragma unroll(D ? 16 : 1)
    for (int32_t i = 0; i < d; i++)
        n = __dadd_rn(n, __dmul_rn(s[i], s[i]));
    return sqrt(n);
}

// Three blocks an SM (80 registers; left to itself ptxas took 64 and
// spilled the runs' bounds), four at head_dim 64 (64 registers: with the
// items' loop it took 80 there). tl, items and tn as km_touch_list_kernel
// leaves them.
template <int D>
__global__ void __launch_bounds__(UPDATE_THREADS, D == 64 ? 4 : 3)
    km_update_kernel(const double *f, const float *deg, double *cen, uint8_t *cw, double *cnorm,
                     double *crec, float *cscale, uint32_t *cs, uint8_t *cmv, int32_t *moved,
                     int32_t *nmoved, const int32_t *tl, const int32_t *items, const int32_t *tn,
                     const int32_t *run_b, const int32_t *run_e, const int32_t *members,
                     const int32_t *M_of, km_params p)
{
    extern __shared__ double km_update_sm[];
    __shared__ double norm[UPDATE_CLUSTERS];
    __shared__ bool live[UPDATE_CLUSTERS];
    __shared__ int32_t js[UPDATE_CLUSTERS];
    const int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, d = D ? D : p.d, st = d + 1;
    const int32_t per_list = km_touch_items(p.cap), n_items = tn[0];
    constexpr int KQ = D ? D / 32 : 1;  // a lane's dimensions of a row at a time
    double *const olds = km_update_sm + UPDATE_CLUSTERS * st;
    for (int32_t item = blockIdx.x; item < n_items; item += gridDim.x) {
        const int32_t at = items[item], lh = at / per_list, c0 = at % per_list * UPDATE_CLUSTERS;
        const size_t base = (size_t)lh * p.cap;
        const float *w = deg + base + p.sinks;
        // The warp's clusters are c = warp + UPDATE_WARPS e (-1 past the
        // list's last): their runs' bounds, then their first members, then
        // those members' weights and features (into the means' rows) and
        // the old centroids (for the move, where cs is; into olds) all load
        // before the means, so that the clusters wait on their loads
        // together. The rows go by cp.async, a lane the dimensions it later
        // reads, so they hold no registers: the first members' features had
        // loaded a cluster at a time, in the means' loop (run YC: 0.73 ms for
        // SmolLM2's first update at 32K, whose bytes take 0.31; 0.58 ms so,
        // run YD; the 8B's 2.77 ms did not move: it issues too few
        // instructions a cycle, run YE).
        const int32_t n = tn[1 + lh] - c0;
        int32_t jc[UPDATE_EACH], rb[UPDATE_EACH], re[UPDATE_EACH], first[UPDATE_EACH];
        double wf[UPDATE_EACH];  // the first members' weights
        bool one[UPDATE_EACH];   // a lone member of nonzero weight: its feature is the mean
#pragma unroll
        for (int e = 0; e < UPDATE_EACH; e++) {
            const int32_t c = warp + UPDATE_WARPS * e;
            jc[e] = c < n ? tl[base + c0 + c] : -1;
        }
#pragma unroll
        for (int e = 0; e < UPDATE_EACH; e++) {
            // A listed cluster's run: run_b -1 where it has no members (its
            // run_e then unused); both loads issue together.
            rb[e] = jc[e] >= 0 ? run_b[base + jc[e]] : -1;
            re[e] = jc[e] >= 0 ? run_e[base + jc[e]] : -1;
        }
#pragma unroll
        for (int e = 0; e < UPDATE_EACH; e++) {
            const int32_t c = warp + UPDATE_WARPS * e, j = jc[e];
            const bool on = rb[e] >= 0;
            if (lane == 0) {
                live[c] = on;
                js[c] = j;
            }
            if (!on)
                re[e] = rb[e];  // no members
            first[e] = re[e] > rb[e] ? members[rb[e]] : 0;
            if (on && D && cs) {
                const double *const old =
                    km_cen_row(f, cen, cw[base + j], base, j, M_of[lh], p.k, d);
                for (int32_t i = lane; i < d; i += 32)
                    ckv_cp_async8(olds + c * st + i, old + i, true);
            }
        }
#pragma unroll
        for (int e = 0; e < UPDATE_EACH; e++) {
            const bool any = re[e] > rb[e];
            wf[e] = any ? (double)w[first[e]] : 0.0;
            one[e] = re[e] - rb[e] == 1 && wf[e] != 0;
            if (any)
                for (int32_t i = lane; i < d; i += 32)
                    ckv_cp_async8(km_update_sm + (warp + UPDATE_WARPS * e) * st + i,
                                  f + (base + first[e]) * d + i, true);
        }
        ckv_cp_async_commit();
        ckv_cp_async_wait<0>();  // each lane reads only the dimensions it copied
        // The later members' weights and KQ dimensions load together, for
        // every chunk of 32 KQ dimensions (one where D is given; each sum
        // over the members in slot order as before, so the same bits): a
        // lane had waited on each of its dimensions' loads in turn.
#pragma unroll
        for (int e = 0; e < UPDATE_EACH; e++) {
            double *const s = km_update_sm + (warp + UPDATE_WARPS * e) * st;
            for (int32_t i0 = 0; re[e] > rb[e] && !one[e] && i0 < d; i0 += 32 * KQ) {
                // The first member's terms from its feature in s (0 + x, as
                // a sum from 0 forms it); wsum: every lane the same sum.
                double wsum = __dadd_rn(0.0, wf[e]), a[KQ];
#pragma unroll
                for (int q = 0; q < KQ; q++)
                    a[q] = i0 + lane + 32 * q < d ? s[i0 + lane + 32 * q] : 0.0;
#pragma unroll
                for (int q = 0; q < KQ; q++)
                    a[q] = __dadd_rn(0.0, __dmul_rn(wf[e], a[q]));
                for (int32_t r = rb[e] + 1; r < re[e]; r++) {
                    const int32_t m = members[r];
                    const double wm = (double)w[m];
                    const double *const fm = f + (base + m) * d;  // indexed under the guard
                    wsum = __dadd_rn(wsum, wm);
#pragma unroll
                    for (int q = 0; q < KQ; q++)
                        if (i0 + lane + 32 * q < d)
                            a[q] = __dadd_rn(a[q], __dmul_rn(wm, fm[i0 + lane + 32 * q]));
                }
#pragma unroll
                for (int q = 0; q < KQ; q++)
                    if (i0 + lane + 32 * q < d)
                        s[i0 + lane + 32 * q] = __ddiv_rn(a[q], wsum);
            }
        }
        __syncthreads();
        if (warp == 0 && live[lane])
            norm[lane] = km_norm_chain<D>(km_update_sm + lane * st, d);
        __syncthreads();
#pragma unroll
        for (int e = 0; e < UPDATE_EACH; e++) {
            const int32_t c = warp + UPDATE_WARPS * e, j = jc[e];
            if (j < 0)
                break;  // the list's clusters fill an item's slots in order
            const bool on = live[c] && !(norm[c] < 1e-30);  // NaN goes on, as the CPU's
            if (cs && lane == 0 && !on)
                cmv[base + j] = 0;  // kept: its bits, so its cosines, unchanged
            if (!on)
                continue;
            const double nc = norm[c];
            double *const s = km_update_sm + c * st, *const cj = cen + (base + j) * d;
            double move = 0;
            const double *const o = olds + c * st;
#pragma unroll(D ? D / 32 : 1)
            for (int32_t q = 0; lane + 32 * q < d; q++) {
                // A lone member's feature is already unit (the CPU's update).
                const double x = one[e] ? s[lane + 32 * q] : __ddiv_rn(s[lane + 32 * q], nc);
                if (D && cs)
                    move += (x - o[lane + 32 * q]) * (x - o[lane + 32 * q]);
                s[lane + 32 * q] = x;
                cj[lane + 32 * q] = x;
            }
            if (lane == 0)
                cw[base + j] = 1;
            if (!cs)
                continue;
            __syncwarp();  // the lanes' x are visible to the whole warp
            for (int32_t q = lane; q < d / 4; q += 32)
                km_split_put(cs + (base + j) * d, s, q, d);
            for (int off = 16; off > 0; off /= 2)
                move += __shfl_xor_sync(0xffffffffu, move, off);
            // The squared distance's roundings are far below KM_MOVE's margin
            // to KM_TAU (a factor of 2); NaN counts as moved.
            if (lane == 0) {
                const bool mv = !(move <= KM_MOVE * KM_MOVE);
                cmv[base + j] = mv;
                if (mv)
                    moved[base + atomicAdd(nmoved + lh, 1)] = j;
            }
        }
        __syncthreads();
        if (warp == 0 && live[lane] && !(norm[lane] < 1e-30)) {
            const double nc = km_norm_chain<D>(km_update_sm + lane * st, d);
            km_set_cnorm(base + js[lane], nc, cnorm, crec, cscale);
        }
        __syncthreads();  // the item's rows and flags read before the next one's
    }
}

// Each centroid of the active lists that no update wrote into cen, copied
// there from its row (km_cen_row), for the trace.
__global__ void km_cen_fill_kernel(double *cen, const uint8_t *cw, const double *f,
                                   const int32_t *act, const int32_t *M_of, km_params p)
{
    const int32_t lh = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    const size_t base = (size_t)lh * p.cap;
    if (!act[lh] || j >= p.k || cw[base + j])
        return;
    const double *const from = km_cen_row(f, cen, false, base, j, M_of[lh], p.k, p.d);
    for (int32_t i = 0; i < p.d; i++)
        cen[(base + j) * p.d + i] = from[i];
}

// The lazy form's materializers (km_lazy_call): right before each reader of
// f, the rows it will read, formed once a call (a bit a slot of fb, cleared
// at the call's start). A claim kernel offers rows, a lane a row
// (km_mat_claim), and lists the rows it claimed first in q, list lh's
// middle rows at q[lh cap + i], i < qn[lh] (qn zeroed before it); then
// km_mat_form_kernel forms them, a warp a row, by the eager store's code:
// km_feat_of the key's element, its norm kn and ckv_ddiv_rcp(kn), so the
// same doubles. Where each warp formed the rows it claimed, one after
// another, the exact materializer took 0.2 ms of SmolLM2's 128K call
// whatever its tests, claims and union cost (runs ZZ60, ZZ61).
struct km_mat_src {
    const double *kn;
    uint32_t *fb;
    double *f;
    int32_t *q, *qn;
};

// Middle row m of list lh claimed where want, and listed in q where this
// call had not claimed it before (a warp's, its lanes converged; two lanes
// offering one row: one claims it).
__device__ __forceinline__ void km_mat_claim(const km_mat_src &s, int32_t lh, int32_t cap,
                                             int32_t m, bool want)
{
    const int32_t lane = threadIdx.x % 32;
    const size_t base = (size_t)lh * cap;
    bool first = false;
    if (want) {
        const size_t slot = base + m;
        const uint32_t bit = 1u << (slot % 32);
        first = !(atomicOr(s.fb + slot / 32, bit) & bit);
    }
    const uint32_t b = __ballot_sync(0xffffffffu, first);
    if (!b)
        return;
    int32_t at = 0;
    if (lane == 0)
        at = atomicAdd(s.qn + lh, __popc(b));
    at = __shfl_sync(0xffffffffu, at, 0);
    if (first)
        s.q[base + at + __popc(b & ((1u << lane) - 1))] = m;
}

// The rows the claim kernel before listed, formed: the lists' rows taken as
// one run (a block scans the lists' counts qn into its shared memory), each
// warp a stretch of it, so that the blocks share the work evenly (a grid of
// a list's blocks for each list ran at half its theoretical occupancy, the
// blocks of the longest lists working on after the rest: run ZZ62). A warp
// finds its first row's list by bisection and walks on from there; it takes
// a row at a time, a lane D / 32 elements of it, so that the row's list, q
// entry, norm and reciprocal are found once for its D elements (the one run
// with an element a thread, each thread finding them again, issued 94 M
// instructions in the first form, 178 K a scheduler in its 288 K cycles,
// and ran slower than a grid a list each: run ZZ63). U rows at once, in
// three rounds (their q loads, then their kn and key loads, then the
// divisions and stores), so that each round's loads are in flight together.
// D: the head_dim, 64 or 128 (the lazy form's, km_estimates). Shared
// memory: lists + 1 prefix sums, within the 48 KB a launch takes unasked
// (FORM_LISTS; km_lazy_call).
enum { FORM_THREADS = 256, FORM_BLOCKS = 4, FORM_LISTS = 48 * 1024 / 4 - 1 };
template <typename Elem, int D>
__global__ void __launch_bounds__(FORM_THREADS, FORM_BLOCKS)
    km_mat_form_kernel(const Elem *keys, km_mat_src s, int32_t lists, km_params p)
{
    constexpr int U = 4, E = D / 32;
    extern __shared__ int32_t pre[];  // pre[l]: the rows of the lists before l
    const int32_t lane = threadIdx.x % 32;
    if (threadIdx.x < 32) {
        int32_t carry = 0;
        for (int32_t l0 = 0; l0 < lists; l0 += 32) {
            const int32_t v = km_warp_incl_sum(l0 + lane < lists ? s.qn[l0 + lane] : 0);
            if (l0 + lane < lists)
                pre[l0 + lane + 1] = carry + v;
            carry += __shfl_sync(0xffffffffu, v, 31);
        }
        if (lane == 0)
            pre[0] = 0;
    }
    __syncthreads();
    constexpr int32_t WARPS = FORM_THREADS / 32;
    const int32_t rows = pre[lists], nw = gridDim.x * WARPS, per = (rows + nw - 1) / nw,
                  g0 = (blockIdx.x * WARPS + threadIdx.x / 32) * per, g1 = min(g0 + per, rows);
    if (g0 >= g1)
        return;
    int32_t l = ckv_segment_of(pre, lists, g0);  // g0's list
    for (int32_t g = g0; g < g1; g += U) {
        size_t row[U];
        double kn[U];
        float a[U][E];
#pragma unroll
        for (int u = 0; u < U; u++) {
            while (g + u < g1 && pre[l + 1] <= g + u)
                l++;
            const size_t base = (size_t)l * p.cap;
            row[u] = base + (g + u < g1 ? s.q[base + g + u - pre[l]] : 0);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            kn[u] = g + u < g1 ? s.kn[row[u]] : 1;
#pragma unroll
            for (int i = 0; i < E; i++)
                a[u][i] =
                    g + u < g1 ? ckv_kv_get(keys + (row[u] + p.sinks) * D, lane + 32 * i) : 0;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (g + u >= g1)
                break;
            const double y = ckv_ddiv_rcp(kn[u]);
#pragma unroll
            for (int i = 0; i < E; i++)
                s.f[row[u] * D + lane + 32 * i] = km_feat_of(a[u][i], kn[u], y);
        }
    }
}

// Before an exact pass (km_assign_kernel): the rows the estimate left it
// (amb's n = amb_n[lh]) and the starting rows of the unwritten centroids
// (cw NULL: none written) of every tile any item walks. An item walks every
// tile where one of its rows has no candidate bitmap (crow -1, or crow
// NULL), else the union of its rows' flagged tiles: here the list's union
// of them all where every row has one, else every tile, a superset. The
// kernel's rule is written again here, not shared (sharing it moved the
// exact kernel's registers): keep the two in step. amb_n NULL: no rows,
// every tile (the trace's centroid fill, km_cen_fill_kernel). The union
// is of the bitmap rows the list's rows name (at most KM_EST_SLICE_ROWS of
// them, marked first, a bit each), so that a thread does not wait on two
// dependent loads for each of its rows' words; the rows are offered and
// the centroids tested a lane each. Neither was seen to save time while
// each warp formed its rows (runs ZZ59-ZZ61: the forming hid them).
enum { MAT_THREADS = 256 };
__global__ void __launch_bounds__(MAT_THREADS)
    km_mat_exact_kernel(km_mat_src s, const uint8_t *cw, const int32_t *amb,
                        const int32_t *amb_n, const int32_t *crow, const uint32_t *cand,
                        const int32_t *act, const int32_t *ids, const int32_t *M_of, km_params p)
{
    static_assert(KN == AN, "the candidate bitmaps' tiles are the exact kernel's");
    static_assert(MAT_THREADS % KM_CAND_WORDS == 0, "a thread ORs one word");
    constexpr int32_t UW = (KM_EST_SLICE_ROWS + 31) / 32;
    __shared__ uint32_t u[KM_CAND_WORDS], used[UW];
    const int32_t lh = km_list_at(ids, blockIdx.y), n = amb_n ? amb_n[lh] : 0,
                  lane = threadIdx.x % 32;
    if (!act[lh] || (amb_n && !n))
        return;  // no item: the whole block leaves
    const size_t base = (size_t)lh * p.cap;
    for (int32_t w = threadIdx.x; w < KM_CAND_WORDS + UW; w += MAT_THREADS)
        (w < KM_CAND_WORDS ? u[w] : used[w - KM_CAND_WORDS]) = 0;
    __syncthreads();
    bool miss = !crow;  // a row without a bitmap: every tile
    uint32_t mine[UW] = {};
    for (int32_t i = threadIdx.x; crow && i < n; i += MAT_THREADS) {
        const int32_t c = crow[base + i];
        miss = miss || c < 0;
#pragma unroll
        for (int32_t q = 0; q < UW; q++)
            mine[q] |= c >= 0 && c / 32 == q ? 1u << c % 32 : 0u;
    }
#pragma unroll
    for (int32_t q = 0; q < UW; q++) {
        const uint32_t v = __reduce_or_sync(0xffffffffu, mine[q]);
        if (lane == 0 && v)
            atomicOr(used + q, v);
    }
    const bool all = __syncthreads_or(miss);
    if (!all) {
        const int32_t w = threadIdx.x % KM_CAND_WORDS;
        uint32_t acc = 0;
        for (int32_t c = threadIdx.x / KM_CAND_WORDS; c < KM_EST_SLICE_ROWS;
             c += MAT_THREADS / KM_CAND_WORDS)
            if (used[c / 32] >> c % 32 & 1)
                acc |= cand[((size_t)lh * KM_EST_SLICE_ROWS + c) * KM_CAND_WORDS + w];
        if (acc)
            atomicOr(u + w, acc);
    }
    __syncthreads();
    const int32_t warps = MAT_THREADS / 32, gw = blockIdx.x * warps + threadIdx.x / 32,
                  nw = gridDim.x * warps;
    for (int32_t i0 = 32 * gw; i0 < n; i0 += 32 * nw) {
        const int32_t i = i0 + lane;
        km_mat_claim(s, lh, p.cap, i < n ? amb[base + i] : 0, i < n);
    }
    for (int32_t j0 = 32 * gw; j0 < p.k; j0 += 32 * nw) {
        const int32_t j = j0 + lane, t = j / AN;
        const bool need =
            j < p.k && (all || u[t / 32] >> t % 32 & 1) && !(cw && cw[base + j]);
        km_mat_claim(s, lh, p.cap, km_own_row(j, M_of[lh], p.k), need);
    }
}

// Before an update (km_update_kernel, tl and tn as km_touch_list_kernel
// leaves them): each listed cluster's members and, unwritten, its old
// centroid's starting row; a warp a cluster, its lanes 32 members each
// turn.
__global__ void __launch_bounds__(256)
    km_mat_update_kernel(km_mat_src s, const uint8_t *cw, const int32_t *tl,
                         const int32_t *tn, const int32_t *run_b, const int32_t *run_e,
                         const int32_t *members, const int32_t *ids, const int32_t *M_of,
                         km_params p)
{
    const int32_t lh = km_list_at(ids, blockIdx.y), warps = blockDim.x / 32,
                  lane = threadIdx.x % 32;
    const size_t base = (size_t)lh * p.cap;
    for (int32_t c = blockIdx.x * warps + threadIdx.x / 32; c < tn[1 + lh];
         c += gridDim.x * warps) {
        const int32_t j = tl[base + c], rb = run_b[base + j], re = rb >= 0 ? run_e[base + j] : rb;
        for (int32_t r0 = rb; r0 < re; r0 += 32) {
            const int32_t r = r0 + lane;
            km_mat_claim(s, lh, p.cap, r < re ? members[r] : 0, r < re);
        }
        km_mat_claim(s, lh, p.cap, km_own_row(j, M_of[lh], p.k), lane == 0 && !cw[base + j]);
    }
}

// The clusters an update forms, listed for it (km_update_kernel): those
// whose touch flag is set (by the assignment before it, or at a call's
// first update by km_group_runs_kernel). A list's clusters go to tl[base +
// i], i < tn[1 + lh], a block's in cluster order from a place it takes with
// one atomic, and each 32 of them, from i = 32 q, to an item, lh
// km_touch_items(cap) + q, items[i] for i < tn[0] (tn zeroed before; the
// items a block starts also take one atomic, so that where every cluster is
// listed the counter's atomics are a block's, not a warp's). An untouched
// cluster is marked unmoved here (cmv NULL: not kept), as the update marks
// a listed one it keeps (a stale cmv sends the next assignment over every
// centroid: 4.8 ms against 2.2 for SmolLM2's 32K call, run ZZ5).
enum { TOUCH_THREADS = 256, TOUCH_WARPS = TOUCH_THREADS / 32 };
__global__ void __launch_bounds__(TOUCH_THREADS)
    km_touch_list_kernel(int32_t *tl, int32_t *items, int32_t *tn, uint8_t *cmv,
                         const int32_t *touch, const int32_t *act, const int32_t *ids,
                         km_params p)
{
    __shared__ int32_t at[TOUCH_WARPS];  // the warps' places in the list
    const int32_t lh = km_list_at(ids, blockIdx.y), j = blockIdx.x * TOUCH_THREADS + threadIdx.x;
    const int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (!act[lh])
        return;  // the whole block
    const size_t base = (size_t)lh * p.cap;
    bool t = false;
    if (j < p.k) {
        t = touch[base + j] != 0;
        if (cmv && !t)
            cmv[base + j] = 0;
    }
    const unsigned mask = __ballot_sync(0xffffffffu, t);
    if (lane == 0)
        at[warp] = __popc(mask);
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t n = 0;
#pragma unroll
        for (int v = 0; v < TOUCH_WARPS; v++) {
            const int32_t c = at[v];
            at[v] = n;
            n += c;
        }
        if (n) {
            const int32_t i = atomicAdd(tn + 1 + lh, n);
            // The items whose first place, a multiple of 32, is the block's.
            const int32_t q0 = (i + UPDATE_CLUSTERS - 1) / UPDATE_CLUSTERS;
            const int32_t q1 = (i + n + UPDATE_CLUSTERS - 1) / UPDATE_CLUSTERS;
            if (q1 > q0) {
                const int32_t it = atomicAdd(tn, q1 - q0);
                for (int32_t q = q0; q < q1; q++)
                    items[it + q - q0] = lh * km_touch_items(p.cap) + q;
            }
#pragma unroll
            for (int v = 0; v < TOUCH_WARPS; v++)
                at[v] += i;
        }
    }
    __syncthreads();
    if (t)
        tl[base + at[warp] + __popc(mask & ((1u << lane) - 1))] = j;
}

// Each cluster collapses into its smallest member slot.
__global__ void km_dest_kernel(int32_t *dest, const int32_t *cl, const int32_t *run_b,
                               const int32_t *members, const int32_t *act, const int32_t *M_of,
                               km_params p)
{
    const int32_t lh = blockIdx.y, m = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || m >= M_of[lh])
        return;
    const size_t base = (size_t)lh * p.cap;
    dest[base + p.sinks + m] = p.sinks + members[run_b[base + cl[base + m]]];
}

// The update's instance for head_dim d.
static auto km_update_of(int32_t d)
{
    return d == 128 ? km_update_kernel<128> : d == 64 ? km_update_kernel<64> : km_update_kernel<0>;
}

// The assignment's instance for head_dim d, and its threads a block.
static auto km_assign_of(int32_t d)
{
    return d == 128 ? km_assign_kernel<128> : d == 64 ? km_assign_kernel<64> : km_assign_kernel<0>;
}

static int km_assign_threads(int32_t d)
{
    return d == 128 ? km_shape<128>::THREADS
                    : d == 64 ? km_shape<64>::THREADS : km_shape<0>::THREADS;
}

// The assignment's blocks an SM holds for head_dim d.
static int km_assign_blocks(int32_t d)
{
    return d == 128 ? km_shape<128>::BLOCKS
                    : d == 64 ? km_shape<64>::BLOCKS : km_shape<0>::BLOCKS;
}

// Whether head_dim d has the estimate (its A fragments are sized for 64
// and 128; other head_dims take the exact assignment for every row).
static bool km_estimates(int32_t d)
{
    return d == 64 || d == 128;
}

// What a call's assignments launch with, set once a call (not an
// assignment): the exact kernel's dynamic shared memory, the device's SMs,
// and whether the estimate's passes over every centroid take the wgmma
// form (the switch read once, so that a launch never takes a form whose
// shared memory was not allowed).
struct km_room {
    size_t smem;
    int sms;
    bool wg;
};

// The wgmma estimate's form (km_estimate_wg_kernel) for head_dim D.
template <int D>
static auto km_estimate_wg_of(bool bal, bool flags)
{
    return bal ? flags ? km_estimate_wg_kernel<D, true, true>
                       : km_estimate_wg_kernel<D, true, false>
               : flags ? km_estimate_wg_kernel<D, false, true>
                       : km_estimate_wg_kernel<D, false, false>;
}

// The estimate's shared memory allowed, for head_dim D (both passes, in
// the forms km_estimate takes).
template <int D>
static ckv_status km_allow_estimate(bool wg, ckv_error *err)
{
    ckv_status st = CKV_OK;
    for (int form = 0; wg && !st && form < 4; form++)
        st = ckv_pol_allow_smem(km_estimate_wg_of<D>(form & 1, form & 2), km_wg_smem<D>(),
                                "cuda kmeans", err);
    if (!st && !wg)
        st = ckv_pol_allow_smem(km_estimate_kernel<D, false>, km_est_smem<D, false>(),
                                "cuda kmeans", err);
    return st ? st
              : ckv_pol_allow_smem(km_estimate_kernel<D, true>, km_est_smem<D, true>(),
                                   "cuda kmeans", err);
}

// The room for head_dim d, its shared memory allowed on the current device
// for the exact kernel and the estimate; an error where the tiles do not
// fit.
static ckv_status km_assign_room(int32_t d, km_room *room, ckv_error *err)
{
    room->smem = km_assign_smem(d);
    room->wg = ckv_cuda_wgmma();
    size_t most;
    ckv_status st = ckv_pol_smem_most(&most, err);
    if (st)
        return st;
    int dev = 0;
    CKV_CUDA(cudaGetDevice(&dev));
    CKV_CUDA(cudaDeviceGetAttribute(&room->sms, cudaDevAttrMultiProcessorCount, dev));
    if (room->smem > most)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "cuda kmeans: head_dim %d needs %zu bytes of shared memory (device: %zu)",
                          d, room->smem, most);
    if (km_estimates(d) &&
        (st = (d == 128 ? km_allow_estimate<128> : km_allow_estimate<64>)(room->wg, err)))
        return st;
    return ckv_pol_allow_smem(km_assign_of(d), room->smem, "cuda kmeans", err);
}

// One assignment's buffers: fs and cs the splits (NULL fs: no estimate),
// amb [lists][cap] rows, then a count per list, crow [lists][cap] beside
// amb's rows (km_assign_kernel's; with the estimate), best NULL but in tests;
// act the lists to assign, chg[lh] set where one changes a cluster, touch
// the clusters whose members it changed (NULL: not kept); dr
// the bookkeeping of the assignments after an update (km_drift; none
// without the estimate).
struct km_bufs {
    const double *f, *fnorm, *cen;
    const uint8_t *cw;  // km_cen_row's flags; NULL: none written (a call's first assignment)
    const double *cnorm, *crec;
    const float *cscale;
    const uint32_t *fs, *cs;
    int32_t *cl, *amb, *crow;
    double *best;
    unsigned *margin;
    const int32_t *act, *M_of;
    int32_t *chg, *touch;
    km_drift dr;
    km_slices sp;
    const int32_t *ids;  // the live lists in order (km_assign's live of them), NULL: not named
};

// The balanced blocks of a pass (km_estimate_wg_kernel's BAL) at head_dim
// d for `live` of the grid's `lists` columns of `tiles` tiles of centroids
// on `sms` SMs (the caller's guard: every list within the scratch); 0:
// none (the row blocks take every list). By a block's time in tiles (S: a segment's start and end,
// the features, fragments, copies' lead and merge, about 6.5 tiles' time,
// run ZZ15): at head_dim 64 one wave of equal ranges, a block an SM, by
// the kernel's own rule (ckv_km_range_blocks: at most 15 a live list): SmolLM2's 90 lists of 512
// tiles (128K) had taken 3 waves of 4 slices a list, 3 (128 + S) = 403.5,
// where equal ranges take 46,080 / 132 + 2 S = 362; at 32K (128 tiles)
// 115.5 against 100, at 8K (32) one slice, 38.5, against 35. At head_dim
// 128 n slices a live list, the fewest whose waves, ceil(live n / sms) of
// tiles / n + S, cost at most 0.9 of the fewer's (the 8B's 256 lists: one,
// so none; one list, a late pass's: 15), as n workers a column of the
// grid: the kernel takes n slices of each of its lists it finds live (the
// host's count does not bound those), and the rest leave at once.
static int32_t km_est_workers(int32_t d, int32_t lists, int32_t live, int sms, int32_t tiles)
{
    if (tiles < 1)
        return 0;
    live = max(live, 1);
    if (d == 64)
        return ckv_km_range_blocks(true, sms, lists, min(live, lists), tiles);
    constexpr double start_tiles = 6.5;  // S
    const auto cost = [&](int32_t n) {
        const int64_t waves = ((int64_t)live * n + sms - 1) / sms;
        return (double)waves * ((double)tiles / n + start_tiles);
    };
    int32_t best = 1;
    for (int32_t n = 2; n <= CKV_KM_RANGE_PER_LIST; n++)
        if (cost(n) < 0.9 * cost(best))
            best = n;
    return best > 1 ? lists * best : 0;
}

// One pass of the estimate over every active list (up to max_m rows; live
// of the lists are active, which sets the balanced blocks), the
// lists' first blocks of rows first (the grid's x the list, or the live
// list b.ids names): a pass over a
// few rows a list (a decode-time call's first assignment leaves about 64)
// has one working block a list among max_m / ROWS that leave at once (on
// Hopper, the balanced blocks take such lists, km_est_workers), and with
// the rows' blocks first
// the last lists' working blocks were dispatched only after the earlier
// lists' empty ones (SmolLM2's 32K call: 90 of 3,870 blocks work; ncu's
// SMs' active cycles from 79% under their mean to 32% over, run YE). The
// pass over the moved centroids keeps the mma.sync form on Hopper too: its
// walks are a tile or two, where the prologue of the wgmma form's one
// block an SM costs more than its products save (the 8B's 8K
// decode-time call: 0.233 ms against 0.177, runs QF, QC). cand: the wgmma
// form flags the candidate tiles (km_assign: room.wg), naming them in
// b.crow.
template <int D, bool MOVED>
static void km_estimate(const km_bufs &b, km_params p, int32_t lists, int32_t live,
                        int32_t max_m, int32_t *amb_n, const km_room &room, bool cand,
                        cudaStream_t s)
{
    // The grid's x: the live lists where b.ids names them (a late
    // iteration's few: the empty blocks of the others' columns, one an SM at
    // a time in the wgmma form, had cost the 8B's one-list third pass about
    // half its 0.125 ms, run ZZ76), else every list. The balanced blocks'
    // scratch is a list's own (lh), so they need all the lists within it.
    const int32_t gx = b.ids ? live : lists;
    const int32_t workers = MOVED || !room.wg || lists > KM_SLICE_LISTS
                                ? 0
                                : km_est_workers(D, gx, live, room.sms, (p.k + KN - 1) / KN);
    const int32_t worker_rows = workers > 0 ? (int32_t)ckv_pol_blocks(workers, gx) : 0;
    const km_est_args a = {b.fs,     b.cs,   b.cw,    b.fnorm,  b.cscale,
                           b.cl,     b.best, b.margin, b.amb,   amb_n,
                           cand ? b.crow : nullptr,   b.dr,    b.act,
                           b.chg,    b.touch, b.M_of, b.sp,     workers,
                           worker_rows, b.ids, p};
    if constexpr (!MOVED)
        if (room.wg) {
            // the row blocks after the balanced ones
            const unsigned rows = ckv_pol_blocks(max_m, km_wg_shape<D>::ROWS);
            km_estimate_wg_of<D>(workers > 0, cand)<<<dim3(gx, rows + worker_rows),
                                                      km_wg_shape<D>::THREADS, km_wg_smem<D>(),
                                                      s>>>(a);
            return;
        }
    using S = km_est_shape<D, MOVED>;
    km_estimate_kernel<D, MOVED><<<dim3(gx, ckv_pol_blocks(max_m, S::ROWS * S::RB)),
                                   S::THREADS, km_est_smem<D, MOVED>(), s>>>(a);
}

// Assigns the middle of every active list (up to max_m rows; live: how
// many of the lists are active, as far as the host knows, at most lists): the
// estimate (over the rows in b.dr.redo where b.dr.nmoved is given and a
// list's count allows, km_restricted; moved: first the pass over the moved
// centroids, km_drift, which fills redo), then the exact kernel over the
// rows it left; without fs the exact kernel over every row. best: the
// estimate's where it ran. room from km_assign_room. first: a call's
// first assignment, whose wgmma estimate flags the candidate tiles
// (KM_CAND_W) where the scratch holds the lists' bitmaps and the tiles are
// at most KM_CAND_TILES. mat(amb_n, crow): the lazy form's materializer
// before the exact kernel (km_mat_exact_kernel), given the kernel's counts
// and candidate rows.
template <typename Mat>
static ckv_status km_assign(const km_bufs &b, km_params p, int32_t lists, int32_t live,
                            int32_t max_m, bool moved, bool first, const km_room &room,
                            cudaStream_t s, Mat mat, ckv_error *err)
{
    int32_t *const amb_n = b.amb + (size_t)lists * p.cap;
    const bool cand = b.fs && first && room.wg && lists <= KM_SLICE_LISTS &&
                      (p.k + KN - 1) / KN <= KM_CAND_TILES;
    if (b.fs) {
        CKV_CUDA(cudaMemsetAsync(amb_n, 0, lists * sizeof(int32_t), s));
        if (moved) {
            (p.d == 128 ? km_estimate<128, true> : km_estimate<64, true>)(
                b, p, lists, live, max_m, amb_n, room, false, s);
            CKV_CUDA_LAUNCHED();
        }
        if (cand)
            CKV_CUDA(cudaMemsetAsync(b.sp.cand, 0, km_cand_words(lists) * sizeof(uint32_t), s));
        (p.d == 128 ? km_estimate<128, false> : km_estimate<64, false>)(
            b, p, lists, live, max_m, amb_n, room, cand, s);
        CKV_CUDA_LAUNCHED();
    }
    // The rows left (after the estimate: in a number the host does not
    // know) in tiles, each split where the lists are fewer than the wave's
    // blocks (km_slices), one wave of the blocks the SMs hold
    // (km_assign_blocks) for them all; most: the items there can be.
    const int64_t wave = (int64_t)room.sms * km_assign_blocks(p.d);
    const int32_t split = lists < wave && lists <= KM_SLICE_LISTS ? KM_SPLITS : 1;
    const int64_t tiles = ckv_pol_blocks(max_m, AM);
    const int64_t most =
        (int64_t)lists * max(tiles, min(tiles, (int64_t)KM_SPLIT_ROWS) * split);
    const int32_t blocks = (int32_t)min(most, wave);
    const ckv_status st = mat(amb_n, cand ? b.crow : nullptr);
    if (st)
        return st;
    km_assign_of(p.d)<<<blocks, km_assign_threads(p.d), room.smem, s>>>(
        b.f, b.fnorm, b.cen, b.cw, b.cnorm, b.crec, b.cl, b.fs ? nullptr : b.best, b.dr.top,
        b.margin, b.fs ? b.amb : nullptr, cand ? b.crow : nullptr, amb_n, b.act, lists, b.chg,
        b.touch, b.M_of, b.sp, split, p);
    CKV_CUDA_LAUNCHED();
    return CKV_OK;
}

// Whether a call takes the lazy form (km_feature_kernel's LAZY and the
// materializers after it): only with the estimate (its rows left in amb);
// ON at any shape of at most FORM_LISTS lists (the form kernel's), AUTO
// where few rows' features are read: a decode-time call (the largest M - k
// at most KM_EST_SLICE_ROWS, 192) whose first pass takes the wgmma
// estimate and its candidate tiles (the exact pass forms
// the centroids of the flagged tiles, not of all). At head_dim 64 too:
// there the feature kernel is bound by its instructions, and a lazy
// call's splits from float products (km_feat_store) save most of the
// store's. A prefill-time call reads every row's features: eager.
static bool km_lazy_call(const ckv_pol *x, const km_params &kp, const int32_t *act,
                         const int32_t *M_of, const km_room &room)
{
    const ckv_km_lazy mode = ckv_cuda_km_lazy();
    if (mode == CKV_KM_LAZY_OFF || !km_estimates(x->d) || x->lists > FORM_LISTS)
        return false;
    if (mode == CKV_KM_LAZY_ON)
        return true;
    int32_t most = 0;
    for (int32_t lh = 0; lh < x->lists; lh++)
        if (act[lh] && M_of[lh] - kp.k > most)
            most = M_of[lh] - kp.k;
    return room.wg && x->lists <= KM_SLICE_LISTS && (kp.k + KN - 1) / KN <= KM_CAND_TILES &&
           most <= KM_EST_SLICE_ROWS;
}

ckv_status ckv_pol_kmeans(ckv_pol *x, const ckv_policy *p, int32_t budget, ckv_error *err)
{
    ckv_gpu_cache *c = x->c;
    ckv_gpu_policy_ws *w = x->ws;
    const int32_t sinks = (int32_t)ckv_policy_param(p, "sinks", 0);
    const int32_t recent = (int32_t)ckv_policy_param(p, "recent", 0);
    const int32_t iters = (int32_t)ckv_policy_param(p, "iters", 0);
    km_params kp = {sinks, budget - sinks - recent, x->cap, x->d};
    int32_t *act = ckv_pol_h(x, PLAN_ACT), *T = ckv_pol_h(x, PLAN_T);
    int32_t *sb = ckv_pol_h(x, PLAN_SEG_B), *se = ckv_pol_h(x, PLAN_SEG_E);
    int32_t *M_of = ckv_pol_h(x, PLAN_X);
    int32_t max_t = 0, max_m = 0;
    for (int32_t lh = 0; lh < x->lists; lh++) {
        T[lh] = c->len_h[lh];
        M_of[lh] = T[lh] - sinks - recent;
        act[lh] = T[lh] > budget && kp.k < M_of[lh];
        sb[lh] = lh * x->cap;
        se[lh] = act[lh] ? sb[lh] + M_of[lh] : sb[lh];
        if (act[lh]) {
            max_t = max_t > T[lh] ? max_t : T[lh];
            max_m = max_m > M_of[lh] ? max_m : M_of[lh];
        }
    }
    if (!max_t)
        return CKV_OK;

    km_room room;
    ckv_status st = km_assign_room(x->d, &room, err);
    if (st)
        return st;
    // The centroids' splits start at a multiple of 32 words, so that their
    // rows' his lie in whole 128-byte lines (km_split_put; the scratch's
    // rows are the largest cache's, of any head_dim).
    const bool est = km_estimates(x->d);
    const size_t half = (w->rows + 31) / 32 * 32;
    if ((st = ckv_pol_take(x, (void **)&w->f, w->rows * sizeof(double), err)) ||
        (st = ckv_pol_take(x, (void **)&w->cen, w->rows * sizeof(double), err)) ||
        (st = ckv_pol_take(x, (void **)&w->cnorm, 2 * w->slots * sizeof(double), err)) ||
        (st = ckv_pol_take(x, (void **)&w->cscale, w->slots * sizeof(float), err)) ||
        (est && (st = ckv_pol_take(x, (void **)&w->split, 2 * half * sizeof(uint32_t), err))) ||
        (st = ckv_pol_take(x, (void **)&w->cl, w->slots * sizeof(int32_t), err)) ||
        (st = ckv_pol_take(x, (void **)&w->amb, (2 * w->slots + w->lists) * sizeof(int32_t),
                           err)) ||
        (st = ckv_pol_take(x, (void **)&w->chg, 3 * w->lists * sizeof(int32_t), err)) ||
        (st = ckv_pol_take(x, (void **)&w->touch, km_touch_bytes(w), err)) ||
        (est && (st = ckv_pol_take(x, (void **)&w->top, w->slots * sizeof(float2), err))) ||
        (est && (st = ckv_pol_take(x, (void **)&w->moved,
                                   (w->slots + 5 * w->lists) * sizeof(int32_t), err))) ||
        (est && (st = ckv_pol_take(x, (void **)&w->own,
                                   2 * w->slots * (sizeof(uint4) + sizeof(int2)) +
                                       w->lists * KM_OWN_HDR * sizeof(int32_t),
                                   err))) ||
        (est && (st = ckv_pol_take(x, (void **)&w->redo, w->slots * sizeof(int32_t), err))) ||
        (est && (st = ckv_pol_take(x, (void **)&w->cmv, w->slots, err))) ||
        (st = ckv_pol_take(x, (void **)&w->cw, w->slots, err)) ||
        (est && x->own_rows && (st = ckv_pol_take(x, (void **)&w->own_rows, w->slots, err))) ||
        (st = ckv_pol_take(x, &w->ksplit, km_slices_bytes(w->lists), err)) ||
        (st = ckv_pol_take(x, (void **)&w->grp, km_group_bytes(w->lists), err)) ||
        (st = ckv_pol_upload_plan(x, err)))
        return st;
    const bool lazy = km_lazy_call(x, kp, act, M_of, room);
    // The lazy form's key norms (slots), formed rows' bits (cleared for the
    // call) and claimed rows (km_mat_src); the tests' poison (trace) fills
    // the features with NaN, so that a row a reader takes unformed shows in
    // the results.
    const size_t fb_words = ((size_t)x->lists * x->cap + 31) / 32;
    if (lazy &&
        ((st = ckv_pol_take(x, (void **)&w->kn, w->slots * sizeof(double), err)) ||
         (st = ckv_pol_take(x, (void **)&w->fb, (w->slots + 31) / 32 * sizeof(uint32_t), err)) ||
         (st = ckv_pol_take(x, (void **)&w->mq, (w->slots + w->lists) * sizeof(int32_t), err))))
        return st;
    if (lazy)
        CKV_CUDA(cudaMemsetAsync(w->fb, 0, fb_words * sizeof(uint32_t), x->s));
    if (lazy && x->poison_lazy)
        CKV_CUDA(cudaMemsetAsync(w->f, 0xff, (size_t)x->lists * x->cap * x->d * sizeof(double),
                                 x->s));
    if (x->lazy)
        *x->lazy = lazy;

    double *const crec = w->cnorm + w->slots;  // the reciprocals after the norms
    // The splits, the centroids' after the features' (none without the estimate).
    uint32_t *const fs = est ? w->split : nullptr, *const cs = est ? w->split + half : nullptr;
    // The counts of moved centroids, of redo's rows, of the rows kept, of
    // those the own pass assigned and of the joined rows, a list each.
    int32_t *const nmoved = est ? w->moved + (size_t)x->lists * x->cap : nullptr;
    int32_t *const kept_n = est && x->kept ? nmoved + 2 * x->lists : nullptr;
    int32_t *const own_n = est && x->own ? nmoved + 3 * x->lists : nullptr;
    int32_t *const joined_n = est && x->joined ? nmoved + 4 * x->lists : nullptr;
    uint8_t *const own_rows = est && x->own_rows ? w->own_rows : nullptr;
    const size_t own_bytes = (size_t)x->lists * x->cap;  // the trace's layout, lh * cap + m
    if (own_rows)
        CKV_CUDA(cudaMemsetAsync(own_rows, 0, own_bytes, x->s));
    // The own pass's records by place, by centroid (before the sort), their
    // sides likewise, then the lists' headers.
    uint4 *const own_rec_c = est ? w->own + w->slots : nullptr;
    int2 *const own_side = est ? reinterpret_cast<int2 *>(w->own + 2 * w->slots) : nullptr;
    int2 *const own_side_c = est ? own_side + w->slots : nullptr;
    int32_t *const own_hdr = est ? reinterpret_cast<int32_t *>(own_side_c + w->slots) : nullptr;
    km_drift dr = {};  // none without the estimate
    if (est)
        dr = {w->moved, nmoved, w->cmv, w->redo, nmoved + x->lists, kept_n, joined_n, w->top};
    if (kept_n || own_n || joined_n)
        CKV_CUDA(cudaMemsetAsync(nmoved + 2 * x->lists, 0, 3 * x->lists * sizeof(int32_t),
                                 x->s));
    // The workspace's lists (its largest cache's): the scratch's layout.
    const km_slices sp = km_slices_at(w->ksplit, w->lists);
    // The lazy form's claimed rows, a list's from lh cap, then their counts.
    const km_mat_src ms = {w->kn, w->fb, w->f, w->mq, lazy ? w->mq + w->slots : nullptr};
    // The rows a claim kernel listed, formed: a wave of blocks over them all.
    const auto mat_form = [&]() -> ckv_status {
        const size_t smem = (x->lists + 1) * sizeof(int32_t);
        ckv_pol_kv(c, [&](auto *k, auto *) {
            using Elem = std::remove_pointer_t<decltype(k)>;
            (x->d == 64 ? km_mat_form_kernel<Elem, 64> : km_mat_form_kernel<Elem, 128>)
                <<<FORM_BLOCKS * room.sms, FORM_THREADS, smem, x->s>>>(k, ms, x->lists, kp);
        });
        CKV_CUDA_LAUNCHED();
        return CKV_OK;
    };
    // The materializer before an exact pass over the lists on (amb_n NULL:
    // every unwritten centroid, for the trace's fill), a column of its grid
    // a list, or one of the n that ids names (NULL: every list).
    const auto mat_exact = [&](const int32_t *on, const int32_t *ids, int32_t n,
                               const uint8_t *cw, const int32_t *amb_n,
                               const int32_t *crow) -> ckv_status {
        if (!lazy)
            return CKV_OK;
        CKV_CUDA(cudaMemsetAsync(ms.qn, 0, x->lists * sizeof(int32_t), x->s));
        const dim3 grid(min(ckv_pol_blocks(max_m, 64), 64u), ids ? n : x->lists);
        km_mat_exact_kernel<<<grid, MAT_THREADS, 0, x->s>>>(ms, cw, w->amb, amb_n, crow, sp.cand,
                                                            on, ids, x->x, kp);
        CKV_CUDA_LAUNCHED();
        return mat_form();
    };
    const km_group grp = km_group_at(w->grp, w->lists);
    // The split tiles' counts start at 0 (each launch's last blocks leave them so).
    CKV_CUDA(cudaMemsetAsync(sp.n, 0, km_slices_counts(x->lists) * sizeof(int32_t), x->s));
    CKV_CUDA(cudaMemsetAsync(sp.en, 0, km_slice_lists(x->lists) * sizeof(int32_t), x->s));
    // The candidate tiles' pass rows after amb's rows and counts.
    int32_t *const crow = est ? w->amb + w->slots + w->lists : nullptr;
    km_bufs kb = {w->f,   w->norm,  w->cen, w->cw,   w->cnorm,  crec,   w->cscale, fs,
                  cs,     w->cl,    w->amb, crow,    nullptr,   w->margin, x->act, x->x,
                  nullptr, nullptr, dr, sp, nullptr};
    // The lists the next assignment takes, as the host knows them: the
    // active ones for the first two (the first marks every active list
    // changed), then those the assignment before changed.
    int32_t live_n = 0;
    for (int32_t lh = 0; lh < x->lists; lh++)
        live_n += act[lh] != 0;
    // Where those are fewer than the lists, their indices, so that the
    // estimate's, the materializers' and the update's list's grids take only
    // their columns (km_bufs' ids, after chg's two rows): flags' nonzero entries
    // compacted into the PLAN_Y row (pageable: the copy returns once staged,
    // so the row may be rewritten at once; flags may be that row).
    int32_t *const ids = w->chg + 2 * x->lists;
    const auto name_live = [&](const int32_t *flags) -> ckv_status {
        kb.ids = nullptr;
        if (live_n == x->lists)
            return CKV_OK;
        int32_t *const h = ckv_pol_h(x, PLAN_Y);
        int32_t n = 0;
        for (int32_t lh = 0; lh < x->lists; lh++)
            if (flags[lh])
                h[n++] = lh;
        CKV_CUDA(cudaMemcpyAsync(ids, h, n * sizeof(int32_t), cudaMemcpyHostToDevice, x->s));
        kb.ids = ids;
        return CKV_OK;
    };
    if ((st = name_live(act)))
        return st;
    const dim3 over_t(ckv_pol_blocks(max_t, FEAT_ROWS), x->lists);
    if (est) {
        // The own pass's axes before the features (km_feature_kernel forms
        // the records); both counts (moved, redo) start at 0 for it.
        CKV_CUDA(cudaMemsetAsync(nmoved, 0, 2 * x->lists * sizeof(int32_t), x->s));
        ckv_pol_kv(c, [&](auto *k, auto *) {
            km_own_axes_kernel<<<x->lists, 512, 0, x->s>>>(k, own_hdr, x->act, x->x, kp);
        });
        CKV_CUDA_LAUNCHED();
    }
    ckv_pol_kv(c, [&](auto *k, auto *) {
        using Elem = std::remove_pointer_t<decltype(k)>;
        if (x->d * sizeof(Elem) % 4) {
            st = ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                            "cuda kmeans: head_dim %d: bf16 keys' rows must be whole 4-byte words",
                            x->d);
            return;
        }
        const km_feat_out o = {w->f,      w->norm,  lazy ? w->kn : nullptr,
                               fs,        w->cw,     w->cnorm,  crec,
                               w->cscale, own_hdr,   w->ikey,   w->ival,
                               w->redo,   dr.redo_n, own_rec_c, own_side_c};
        st = km_features(lazy, k, o, w->dest, x, over_t, kp, err);
    });
    if (st)
        return st;
    CKV_CUDA_LAUNCHED();
    // A list whose assignment changed no cluster has reached Lloyd's fixed
    // point: the update would give it the same centroids (those of empty
    // clusters and of tiny means kept), so every later assignment the same
    // clusters and margins; its remaining iterations are skipped (a
    // decode-time call's lists reach it at their second or third assignment
    // on the synthetic keys, run NB; its calls on the RULER keys ran 3 or 4
    // assignments, run NE). chg[it & 1] marks the lists whose assignment it
    // changed a cluster (assignment 0 every active list: cl holds another
    // call's clusters, or anything, then); only those take the update and
    // assignment after it. Once no list is marked, the loop ends: the
    // clusters and the runs sorted after the assignment before are final (the
    // host waits for the flags, as the call waits for the device at its end;
    // the skipped iterations' launches had cost the 8B's 8K decode-time call
    // about 1.2 ms, run NA). The CPU twin runs every iteration, so the parity
    // checks test the skip.
    int32_t *changed = w->chg;
    const size_t touch_bytes = (size_t)x->lists * x->cap * sizeof(int32_t);
    // The update's list, counts and items after the flags (km_touch_bytes).
    int32_t *const tl = w->touch + w->slots, *const tn = tl + w->slots;
    int32_t *const items = tn + 1 + w->lists;
    // The update's grid: one wave of the blocks the SMs hold, each taking
    // every upd_wave-th item.
    const size_t upd_smem = km_update_smem(x->d, cs != nullptr);
    if ((st = ckv_pol_allow_smem(km_update_of(x->d), upd_smem, "cuda kmeans", err)))
        return st;
    int upd_sm = 0;
    CKV_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&upd_sm, km_update_of(x->d),
                                                           UPDATE_THREADS, upd_smem));
    const int32_t upd_wave = room.sms * upd_sm;
    for (int32_t it = 0; it <= iters; it++) {
        const int32_t *const live = it ? changed : x->act;
        changed = w->chg + (it & 1) * x->lists;
        if (it)
            CKV_CUDA(cudaMemsetAsync(changed, 0, x->lists * sizeof(int32_t), x->s));
        else
            CKV_CUDA(cudaMemcpyAsync(changed, x->act, x->lists * sizeof(int32_t),
                                     cudaMemcpyDeviceToDevice, x->s));
        // touch: the clusters the assignment moves a row from or to; at the
        // first, km_group_runs_kernel's after it.
        if (it)
            CKV_CUDA(cudaMemsetAsync(w->touch, 0, touch_bytes, x->s));
        kb.act = live;
        kb.chg = changed;
        // A call's first assignment: the own pass, then the estimate over
        // every centroid for the rows it leaves (every list restricted: no
        // centroid moved, dr.nmoved 0); no touch flags kept.
        kb.touch = it ? w->touch : nullptr;
        kb.cw = it ? w->cw : nullptr;  // no update has written a centroid before the first
        if (!it && est) {
            if ((st = ckv_pol_sort_int(x, x->seg_e, err)))
                return st;
            km_own_rec_kernel<<<dim3(ckv_pol_blocks(kp.k, 256), x->lists), 256, 0, x->s>>>(
                own_rec_c, own_side_c, w->ikey_out, w->ival_out, w->own, own_side, own_hdr,
                x->act, kp);
            CKV_CUDA_LAUNCHED();
            km_own_first_kernel<<<x->lists, KM_OWN_SCAN, 0, x->s>>>(own_hdr, x->act);
            CKV_CUDA_LAUNCHED();
            // A list's items: k / KM_OWN_BLOCK whole ones and a partial one
            // for each cell that holds a centroid (up to KM_OWN_CELLS, most
            // of them empty); a block takes every gridDim.x-th, so that the
            // grid need not hold the empty cells' share.
            km_own_kernel<<<dim3(ckv_pol_blocks(kp.k, KM_OWN_BLOCK), x->lists), KM_OWN_BLOCK, 0,
                            x->s>>>(w->norm, own_hdr, w->ikey_out, w->ival_out, w->own,
                                    own_side, w->cw, x->act, x->x, kp);
            CKV_CUDA_LAUNCHED();
            km_own_decide_kernel<<<dim3(ckv_pol_blocks(kp.k, 256), x->lists), 256, 0, x->s>>>(
                w->cw, w->cl, dr, own_n, w->margin, changed, x->act, x->x, kp);
            CKV_CUDA_LAUNCHED();
            if (own_rows) {
                km_own_rows_kernel<<<x->lists, 256, 0, x->s>>>(own_rows, w->redo, dr.redo_n,
                                                               x->act, x->x, kp);
                CKV_CUDA_LAUNCHED();
            }
        }
        const auto mat = [&](const int32_t *amb_n, const int32_t *crow) {
            return mat_exact(live, kb.ids, live_n, kb.cw, amb_n, crow);
        };
        if ((st = km_assign(kb, kp, x->lists, live_n, max_m, it > 0, it == 0, room, x->s, mat,
                            err)))
            return st;
        if (it) {
            // A host plan row no K-Means kernel reads (nor apply, which uploads it).
            int32_t *const h = ckv_pol_h(x, PLAN_Y);
            CKV_CUDA(cudaMemcpyAsync(h, changed, x->lists * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, x->s));
            CKV_CUDA(cudaStreamSynchronize(x->s));
            live_n = 0;
            for (int32_t lh = 0; lh < x->lists; lh++)
                live_n += h[lh] != 0;
            if (!live_n)
                break;
            if (it < iters && (st = name_live(h)))  // (the last assignment's: no update after it)
                return st;
        }
        // Members of each cluster in slot order, as a stable sort by cluster
        // (km_group_runs_kernel), and the first update's flags: for the lists
        // this assignment changed (the active ones at the first); another's
        // rows kept their clusters, so its groups from before hold, as the
        // loop's end above keeps every list's where none changed (the 8B's
        // and SmolLM2's 128K calls: two lists and one at the second, ZZ67).
        km_group_scan_kernel<<<x->lists, GROUP_THREADS, 0, x->s>>>(
            w->cl, w->ikey, w->ival, w->run_b, grp, changed, x->seg_b, x->x, kp);
        CKV_CUDA_LAUNCHED();
        if ((st = ckv_pol_sort_int(x, grp.e, err)))
            return st;
        km_group_runs_kernel<<<x->lists, GROUP_THREADS, 0, x->s>>>(
            grp, w->ikey_out, w->ival_out, w->run_b, w->run_e,
            !it && iters > 0 ? w->touch : nullptr, changed, x->x, kp);
        CKV_CUDA_LAUNCHED();
        if (it == iters)
            break;  // the final assignment: no update after it
        // The update's lists: those this assignment changed (the active
        // ones at the first), named (kb.ids) where they are fewer than all.
        const dim3 over_changed(ckv_pol_blocks(kp.k, TOUCH_THREADS), kb.ids ? live_n : x->lists);
        CKV_CUDA(cudaMemsetAsync(tn, 0, (1 + x->lists) * sizeof(int32_t), x->s));
        km_touch_list_kernel<<<over_changed, TOUCH_THREADS, 0, x->s>>>(
            tl, items, tn, cs ? w->cmv : nullptr, w->touch, changed, kb.ids, kp);
        CKV_CUDA_LAUNCHED();
        if (est)  // both counts start at 0 for the update and the next assignment
            CKV_CUDA(cudaMemsetAsync(nmoved, 0, 2 * x->lists * sizeof(int32_t), x->s));
        if (lazy) {
            CKV_CUDA(cudaMemsetAsync(ms.qn, 0, x->lists * sizeof(int32_t), x->s));
            km_mat_update_kernel<<<over_changed, 256, 0, x->s>>>(
                ms, w->cw, tl, tn, w->run_b, w->run_e, w->ival_out, kb.ids, x->x, kp);
            CKV_CUDA_LAUNCHED();
            if ((st = mat_form()))
                return st;
        }
        km_update_of(x->d)<<<upd_wave, UPDATE_THREADS, upd_smem, x->s>>>(
            w->f, c->deg, w->cen, w->cw, w->cnorm, crec, w->cscale, cs, w->cmv, w->moved, nmoved,
            tl, items, tn, w->run_b, w->run_e, w->ival_out, x->x, kp);
        CKV_CUDA_LAUNCHED();
    }
    // The trace's centroids: each active list's k rows of cen, as its last
    // update left them (iters > 0: every active list takes the first), those
    // it did not write from their rows first.
    if (x->centroids && iters > 0) {
        if ((st = mat_exact(x->act, nullptr, 0, w->cw, nullptr, nullptr)))
            return st;
        km_cen_fill_kernel<<<dim3(ckv_pol_blocks(kp.k, 256), x->lists), 256, 0, x->s>>>(
            w->cen, w->cw, w->f, x->act, x->x, kp);
        CKV_CUDA_LAUNCHED();
        const size_t row = (size_t)kp.k * x->d;
        for (int32_t lh = 0; lh < x->lists; lh++)
            if (act[lh])
                CKV_CUDA(cudaMemcpyAsync(x->centroids + lh * row,
                                         w->cen + (size_t)lh * x->cap * x->d,
                                         row * sizeof(double), cudaMemcpyDeviceToHost, x->s));
    }
    km_dest_kernel<<<dim3(ckv_pol_blocks(max_m, 256), x->lists), 256, 0, x->s>>>(
        w->dest, w->cl, w->run_b, w->ival_out, x->act, x->x, kp);
    CKV_CUDA_LAUNCHED();
    // A trace's count: the lists' sum (PLAN_Y: a host row no kernel reads).
    const auto count = [&](const int32_t *n, int64_t *to) -> ckv_status {
        int32_t *const h = ckv_pol_h(x, PLAN_Y);
        CKV_CUDA(cudaMemcpyAsync(h, n, x->lists * sizeof(int32_t), cudaMemcpyDeviceToHost, x->s));
        CKV_CUDA(cudaStreamSynchronize(x->s));
        for (int32_t lh = 0; lh < x->lists; lh++)
            *to += h[lh];
        return CKV_OK;
    };
    if ((kept_n && (st = count(kept_n, x->kept))) || (own_n && (st = count(own_n, x->own))) ||
        (joined_n && (st = count(joined_n, x->joined))))
        return st;
    if (own_rows)  // synchronized at ckv_gpu_policy_compress's end
        CKV_CUDA(cudaMemcpyAsync(x->own_rows, own_rows, own_bytes, cudaMemcpyDeviceToHost, x->s));
    return ckv_pol_apply(x, max_m, err);
}

// The tests' entry to km_own_row and km_own_walk: a thread a triple (j, M,
// k), the walk started s = min(j / KN, 8) tiles before j and stepped s
// times.
static __global__ void km_own_rows_test_kernel(const int32_t *jmk, int64_t n, int32_t *row,
                                               int32_t *walk)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const int32_t j = jmk[3 * i], M = jmk[3 * i + 1], k = jmk[3 * i + 2], s = min(j / KN, 8);
    row[i] = km_own_row(j, M, k);
    km_own_walk w(j - s * KN, M, k);
    for (int32_t t = 0; t < s; t++)
        w.step();
    walk[i] = (int32_t)w.q;
}

extern "C" ckv_status ckv_gpu_kmeans_own_rows(const int32_t *jmk, int64_t n, int32_t *row,
                                              int32_t *walk, ckv_error *err)
{
    for (int64_t i = 0; i < n; i++)
        if (jmk[3 * i] < 0 || jmk[3 * i + 2] < 1 || jmk[3 * i] >= jmk[3 * i + 2] ||
            jmk[3 * i + 1] < jmk[3 * i + 2])
            return ckv_errorf(err, CKV_ERR_ARG, "kmeans_own_rows: triple %lld: j %d, M %d, k %d",
                              (long long)i, jmk[3 * i], jmk[3 * i + 1], jmk[3 * i + 2]);
    int32_t *dev = nullptr;
    cudaError_t e = cudaMalloc(&dev, (size_t)n * 5 * sizeof(int32_t));
    int32_t *const dr = dev + 3 * n, *const dw = dev + 4 * n;
    if (e == cudaSuccess)
        e = cudaMemcpy(dev, jmk, (size_t)n * 3 * sizeof(int32_t), cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemset(dr, 0xff, (size_t)n * 2 * sizeof(int32_t));
    if (e == cudaSuccess) {
        km_own_rows_test_kernel<<<(unsigned)((n + 255) / 256), 256>>>(dev, n, dr, dw);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaMemcpy(row, dr, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        e = cudaMemcpy(walk, dw, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost);
    cudaFree(dev);
    if (e != cudaSuccess)
        return ckv_errorf(err, CKV_ERR_DEVICE, "kmeans_own_rows: %s", cudaGetErrorString(e));
    return CKV_OK;
}

// The device buffers of ckv_gpu_kmeans_assign and ckv_gpu_kmeans_moved, in
// one allocation.
struct km_test_mem {
    double *f, *cen, *fnorm, *cnorm, *crec, *best;
    uint8_t *cw;  // every centroid given (written)
    float *cscale;
    uint32_t *fs, *cs;
    int32_t *cl, *amb, *head;  // amb: cap rows, then the count; head: act, M, k, chg
    int32_t *crow;             // beside amb's rows
    unsigned *margin;
    km_slices sp;  // one list's, its counts 0
    float2 *top;
    int32_t *moved, *redo, *dn;  // dn: nmoved, redo_n
    uint8_t *cmv;
};

// Every row's bounds, (4, -4) (so that the pass over the moved centroids
// keeps its cluster and its second bound becomes the moved ones' bound)
// but (4, 4) where its cluster moved and not join (sent on), and the moved
// centroids flagged (ckv_gpu_kmeans_moved).
static __global__ void km_test_moved_kernel(float2 *top, const int32_t *cl, int32_t M,
                                            uint8_t *cmv, const int32_t *moved, int32_t n,
                                            bool join)
{
    const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M) {
        bool on = false;
        for (int32_t q = 0; q < n && !join; q++)
            on |= moved[q] == cl[i];
        top[i] = make_float2(4.0f, on ? 4.0f : -4.0f);
    }
    if (i < n)
        cmv[moved[i]] = 1;
}

// The moved centroids of ckv_gpu_kmeans_moved (n 0: a plain assignment),
// join as its, and where the rows' bounds and those sent on come back.
struct km_test_moved {
    const int32_t *j;
    int32_t n;
    bool join;
    float *bound;
    int32_t *redo, *redo_n;
};

// Uploads one list and its previous clusters, runs km_assign over it,
// brings cl, best, margin, the count of exact rows and the change flag back;
// with mv.n, first the pass over mv.j from km_test_moved_kernel's bounds,
// and the rows' second bounds and those sent on back.
static ckv_status km_assign_test(const km_test_mem &d, const double *f, const double *fnorm,
                                 const double *cen, const double *cnorm, int32_t M, int32_t k,
                                 int32_t dim, bool estimate, const km_room &room, int32_t *cl,
                                 double *best, float *margin, int32_t *n_exact, bool *changed,
                                 const km_test_moved &mv, ckv_error *err)
{
    const int32_t head[4] = {1, M, k, 0};
    const float big = FLT_MAX;
    CKV_CUDA(cudaMemcpy(d.f, f, (size_t)M * dim * 8, cudaMemcpyHostToDevice));
    CKV_CUDA(cudaMemcpy(d.cen, cen, (size_t)k * dim * 8, cudaMemcpyHostToDevice));
    CKV_CUDA(cudaMemset(d.cw, 1, k));
    CKV_CUDA(cudaMemcpy(d.fnorm, fnorm, M * 8ul, cudaMemcpyHostToDevice));
    CKV_CUDA(cudaMemcpy(d.cnorm, cnorm, k * 8ul, cudaMemcpyHostToDevice));
    CKV_CUDA(cudaMemcpy(d.head, head, sizeof head, cudaMemcpyHostToDevice));
    CKV_CUDA(cudaMemcpy(d.cl, cl, M * 4ul, cudaMemcpyHostToDevice));
    CKV_CUDA(cudaMemcpy(d.margin, &big, 4, cudaMemcpyHostToDevice));
    const km_params kp = {0, k, M > k ? M : k, dim};
    km_given_cnorm_kernel<<<ckv_pol_blocks(k, 256), 256>>>(d.cnorm, d.crec, d.cscale, k);
    CKV_CUDA_LAUNCHED();
    if (estimate) {
        km_split_kernel<<<ckv_pol_blocks((int64_t)M * dim / 4, 256), 256>>>(d.f, d.fs, d.head + 1,
                                                                         d.head, kp);
        CKV_CUDA_LAUNCHED();
        km_split_kernel<<<ckv_pol_blocks((int64_t)k * dim / 4, 256), 256>>>(d.cen, d.cs,
                                                                         d.head + 2, d.head, kp);
        CKV_CUDA_LAUNCHED();
    }
    km_drift dr = {};
    if (mv.n) {
        const int32_t dn[2] = {mv.n, 0};
        CKV_CUDA(cudaMemcpy(d.moved, mv.j, mv.n * 4ul, cudaMemcpyHostToDevice));
        CKV_CUDA(cudaMemcpy(d.dn, dn, sizeof dn, cudaMemcpyHostToDevice));
        CKV_CUDA(cudaMemset(d.cmv, 0, k));
        km_test_moved_kernel<<<ckv_pol_blocks(M > mv.n ? M : mv.n, 256), 256>>>(
            d.top, d.cl, M, d.cmv, d.moved, mv.n, mv.join);
        CKV_CUDA_LAUNCHED();
        dr = {d.moved, d.dn, d.cmv, d.redo, d.dn + 1, nullptr, nullptr, d.top};
    }
    const km_bufs b = {d.f,      d.fnorm,  d.cen,  d.cw,  d.cnorm,    d.crec,
                       d.cscale, estimate ? d.fs : nullptr, d.cs,   d.cl,
                       d.amb,    d.crow,   d.best, d.margin, d.head, d.head + 1,
                       d.head + 3, nullptr, dr, d.sp, nullptr};
    // The plain assignment is a first (its exact pass over the candidate
    // tiles); the features are given, so eager.
    const auto eager = [](const int32_t *, const int32_t *) { return CKV_OK; };
    ckv_status st = km_assign(b, kp, 1, 1, M, mv.n > 0, mv.n == 0, room, nullptr, eager, err);
    if (st)
        return st;
    if (mv.n) {  // each row's second bound, top[m].y
        CKV_CUDA(cudaMemcpy2D(mv.bound, sizeof(float), reinterpret_cast<float *>(d.top) + 1,
                              sizeof(float2), sizeof(float), M, cudaMemcpyDeviceToHost));
        CKV_CUDA(cudaMemcpy(mv.redo_n, d.dn + 1, 4, cudaMemcpyDeviceToHost));
        if (mv.redo)
            CKV_CUDA(cudaMemcpy(mv.redo, d.redo, *mv.redo_n * 4ul, cudaMemcpyDeviceToHost));
    }
    CKV_CUDA(cudaMemcpy(cl, d.cl, M * 4ul, cudaMemcpyDeviceToHost));
    if (best)
        CKV_CUDA(cudaMemcpy(best, d.best, M * 8ul, cudaMemcpyDeviceToHost));
    CKV_CUDA(cudaMemcpy(margin, d.margin, 4, cudaMemcpyDeviceToHost));
    int32_t chg = 0;
    CKV_CUDA(cudaMemcpy(&chg, d.head + 3, 4, cudaMemcpyDeviceToHost));
    *changed = chg != 0;
    *n_exact = M;
    if (estimate)
        CKV_CUDA(cudaMemcpy(n_exact, d.amb + kp.cap, 4, cudaMemcpyDeviceToHost));
    return CKV_OK;
}

// ckv_gpu_kmeans_assign and ckv_gpu_kmeans_moved: one list's buffers, then
// km_assign_test.
static ckv_status km_assign_one(const double *f, const double *fnorm, const double *cen,
                                const double *cnorm, int32_t M, int32_t k, int32_t d,
                                bool estimate, int32_t *cl, double *best, float *margin,
                                int32_t *n_exact, bool *changed, const km_test_moved &mv,
                                ckv_error *err)
{
    const char *const what = mv.n ? "kmeans_moved" : "kmeans_assign";
    if (M < 1 || k < 1 || d < 1)
        return ckv_errorf(err, CKV_ERR_ARG, "%s: M %d, k %d, d %d", what, M, k, d);
    estimate = estimate && km_estimates(d);
    km_room room;
    ckv_status st = km_assign_room(d, &room, err);
    if (st)
        return st;
    // The list's capacity holds both row sets.
    const size_t cap = (size_t)(M > k ? M : k), cd = cap * d;
    // The split tiles' scratch (its size a multiple of 16 bytes), doubles (an
    // even count: the splits after them stay 16-byte aligned), the splits,
    // the scales, the bounds, then ints and bytes.
    const size_t sp_bytes = (km_slices_bytes(1) + 15) / 16 * 16;
    const size_t bytes = sp_bytes + (2 * cd + 4 * cap) * 8 + 2 * cd * 4 + cap * 8 +
                         (6 * cap + 8) * 4 + 2 * cap;
    char *dev = nullptr;
    cudaError_t e = cudaMalloc(&dev, bytes);
    if (e != cudaSuccess)
        return ckv_errorf(err, CKV_ERR_DEVICE, "%s: %s", what, cudaGetErrorString(e));
    km_test_mem m;
    m.sp = km_slices_at(dev, 1);
    e = cudaMemset(dev, 0, sp_bytes);
    if (e != cudaSuccess) {
        cudaFree(dev);
        return ckv_errorf(err, CKV_ERR_DEVICE, "%s: %s", what, cudaGetErrorString(e));
    }
    m.f = reinterpret_cast<double *>(dev + sp_bytes);
    m.cen = m.f + cd;
    m.fnorm = m.cen + cd;
    m.cnorm = m.fnorm + cap;
    m.crec = m.cnorm + cap;
    m.best = m.crec + cap;
    m.fs = reinterpret_cast<uint32_t *>(m.best + cap);
    m.cs = m.fs + cd;
    m.top = reinterpret_cast<float2 *>(m.cs + cd);
    m.cscale = reinterpret_cast<float *>(m.top + cap);
    m.cl = reinterpret_cast<int32_t *>(m.cscale + cap);
    m.amb = m.cl + cap;  // cap rows and the count
    m.head = m.amb + cap + 1;
    m.margin = reinterpret_cast<unsigned *>(m.head + 4);
    m.moved = reinterpret_cast<int32_t *>(m.margin + 1);
    m.redo = m.moved + cap;
    m.dn = m.redo + cap;
    m.crow = m.dn + 2;
    m.cw = reinterpret_cast<uint8_t *>(m.crow + cap);
    m.cmv = m.cw + cap;
    st = km_assign_test(m, f, fnorm, cen, cnorm, M, k, d, estimate, room, cl, best, margin,
                        n_exact, changed, mv, err);
    cudaFree(dev);
    return st;
}

extern "C" ckv_status ckv_gpu_kmeans_assign(const double *f, const double *fnorm,
                                            const double *cen, const double *cnorm, int32_t M,
                                            int32_t k, int32_t d, bool estimate, int32_t *cl,
                                            double *best, float *margin, int32_t *n_exact,
                                            bool *changed, ckv_error *err)
{
    return km_assign_one(f, fnorm, cen, cnorm, M, k, d, estimate, cl, best, margin, n_exact,
                         changed, {nullptr, 0, false, nullptr, nullptr, nullptr}, err);
}

extern "C" ckv_status ckv_gpu_kmeans_moved(const double *f, const double *fnorm,
                                           const double *cen, const double *cnorm, int32_t M,
                                           int32_t k, int32_t d, const int32_t *moved,
                                           int32_t nmoved, bool join, int32_t *cl, float *bound,
                                           int32_t *redo, int32_t *redo_n, ckv_error *err)
{
    if (M < 1 || k < 1 || !km_estimates(d) || nmoved < 1 || nmoved > k / KM_MOVED_PART)
        return ckv_errorf(err, CKV_ERR_ARG, "kmeans_moved: M %d, head_dim %d, %d moved of %d", M,
                          d, nmoved, k);
    for (int32_t i = 0; i < nmoved; i++)
        if (moved[i] < 0 || moved[i] >= k)
            return ckv_errorf(err, CKV_ERR_ARG, "kmeans_moved: moved[%d] = %d of %d", i,
                              moved[i], k);
    for (int32_t m = 0; m < M; m++)
        if (cl[m] < 0 || cl[m] >= k)
            return ckv_errorf(err, CKV_ERR_ARG, "kmeans_moved: cl[%d] = %d of %d", m, cl[m], k);
    float margin;
    int32_t n_exact;
    bool changed;
    return km_assign_one(f, fnorm, cen, cnorm, M, k, d, true, cl, nullptr, &margin, &n_exact,
                         &changed, {moved, nmoved, join, bound, redo, redo_n}, err);
}
