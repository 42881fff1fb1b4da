// The K-Means baseline on the GPU (policies.md, "kmeans"), every list over
// budget at once. CPU twin: compress_list in src/policies/kmeans.c.
// Features, centroid updates and norms are computed as the CPU computes
// them (double, members in slot order, no fused multiply-add); the
// assignment's dot products run on the FP64 tensor cores, where the CPU
// uses BLAS, so cosines agree to ~1e-16 and a decision can differ only at
// a near-tie (the margin the trace reports). Keys are read as fp32 from either
// cache type; the merged centroids are stored in it (cuda_compact.cu).
#include <math.h>

#include "cuda_async_copy.cuh"
#include "cuda_bf16.cuh"
#include "cuda_check.h"
#include "cuda_mma.cuh"
#include "cuda_policy.h"

struct km_params {
    int32_t sinks, k, cap, d;
};

// Identity dest for the list; unit-normalised keys of the middle and their
// norms (x: M, the middle's length).
template <typename Elem>
__global__ void km_feature_kernel(const Elem *keys, double *f, double *fnorm, int32_t *dest,
                                  const int32_t *act, const int32_t *T, const int32_t *M_of,
                                  km_params p)
{
    const int32_t lh = blockIdx.y, t = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || t >= T[lh])
        return;
    const size_t base = (size_t)lh * p.cap;
    dest[base + t] = t;
    const int32_t m = t - p.sinks;
    if (m < 0 || m >= M_of[lh])
        return;
    const Elem *key = keys + (base + t) * p.d;
    double n = 0;
    for (int32_t i = 0; i < p.d; i++) {
        const double x = ckv_kv_get(key, i);
        n = __dadd_rn(n, __dmul_rn(x, x));
    }
    n = sqrt(n);
    double *fr = f + (base + m) * p.d, s = 0;
    for (int32_t i = 0; i < p.d; i++) {
        fr[i] = n < 1e-30 ? 0 : __ddiv_rn((double)ckv_kv_get(key, i), n);
        s = __dadd_rn(s, __dmul_rn(fr[i], fr[i]));
    }
    fnorm[base + m] = sqrt(s);
}

// Centroid j starts at the feature of middle index ((2j + 1) M) / (2k).
__global__ void km_init_kernel(const double *f, double *cen, const int32_t *act,
                               const int32_t *M_of, km_params p)
{
    const int32_t lh = blockIdx.y;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || idx >= (int64_t)p.k * p.d)
        return;
    const int32_t j = (int32_t)(idx / p.d), i = (int32_t)(idx % p.d);
    const int64_t m = ((2 * (int64_t)j + 1) * M_of[lh]) / (2 * (int64_t)p.k);
    const size_t base = (size_t)lh * p.cap;
    cen[(base + j) * p.d + i] = f[(base + m) * p.d + i];
}

// Centroid norms and their reciprocals (0 for a norm under 1e-30), which
// the assignment's bound takes (km_bound).
__global__ void km_cnorm_kernel(const double *cen, double *cnorm, double *crec,
                                const int32_t *act, km_params p)
{
    const int32_t lh = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || j >= p.k)
        return;
    const size_t r = (size_t)lh * p.cap + j;
    const double *c = cen + r * p.d;
    double s = 0;
    for (int32_t i = 0; i < p.d; i++)
        s = __dadd_rn(s, __dmul_rn(c[i], c[i]));
    cnorm[r] = sqrt(s);
    crec[r] = cnorm[r] < 1e-30 ? 0.0 : 1.0 / cnorm[r];
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
static_assert(AN == AM && 16 * WARPS_N == AN, "km_copy_tile copies AM rows for either tile");
// The partial bests at the end reuse the tiles (rows of at least 4 doubles).
static_assert(WARPS_N * AM * sizeof(km_best) <= (AM + 2 * AN) * 4 * sizeof(double),
              "the partial bests fit in the tiles");

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

// Rows [0, rows) of src (d doubles each) into a tile of AM rows, as one
// copy group, W doubles a copy (2 needs even d: 16-byte aligned rows); rows
// past `rows` and columns past d are zeros.
template <int W, int THREADS>
__device__ __forceinline__ void km_copy_tile(double *dst, const double *src, int32_t rows,
                                             int32_t d, int32_t d4, int32_t stride)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int32_t r = warp; r < AM; r += THREADS / 32)
        for (int32_t i = W * lane; i < d4; i += W * 32) {
            const bool in = r < rows && i < d;
            const double *from = in ? src + (size_t)r * d + i : src;
            if (W == 2)
                ckv_cp_async16(dst + r * stride + i, from, in);
            else
                ckv_cp_async8(dst + r * stride + i, from, in);
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
// The estimate and the cosine each take two roundings, q itself two: 2^-30
// of margin is far more than they move. -inf (nothing ruled out) where
// that reasoning needs care: a second best of magnitude under 2^-900 (the
// subnormal range), -inf (none yet), a row norm under 1e-30 (its cosines
// are 0 whatever the dot product), or a bound that overflows. A column of
// norm under 1e-30 has the estimate 0 and the cosine 0: ruled out only
// where second > 0. An estimate that is NaN is never ruled out.
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
template <int D>
__global__ void __launch_bounds__(km_shape<D>::THREADS, km_shape<D>::BLOCKS)
    km_assign_kernel(const double *f, const double *fnorm, const double *cen,
                     const double *cnorm, const double *crec, int32_t *cl, double *best,
                     unsigned *margin, const int32_t *act, const int32_t *M_of, km_params p)
{
    constexpr int W = D ? 2 : 1;  // doubles a copy: rows of 64 or 128 are 16-byte aligned
    constexpr int MT = km_shape<D>::MT, THREADS = km_shape<D>::THREADS;
    extern __shared__ double sm[];
    const int32_t lh = blockIdx.y, m0 = blockIdx.x * AM;
    if (!act[lh] || m0 >= M_of[lh])
        return;  // the whole block leaves together
    const int32_t M = M_of[lh], d = D ? D : p.d, d4 = (d + 3) / 4 * 4;
    const int32_t stride = (int32_t)km_stride(d4);
    double *const fs = sm, *const cs = sm + AM * stride;
    double2 *const tops = reinterpret_cast<double2 *>(cs + 2 * AN * stride);
    const size_t base = (size_t)lh * p.cap;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int32_t tiles = (p.k + AN - 1) / AN;

    // The tiles in the order t0, t0 + 1, ..., wrapping round, t0 the tile
    // of the centroids the block's features most likely join: centroid j
    // starts at the feature of middle index (2j + 1) M / 2k (km_init_kernel)
    // and keys drift with the slot, so a lane's running second best is high
    // from the first tiles and few columns need the exact cosine (in index
    // order most columns up to a row's best were new records: run KG). The
    // running best below does not depend on the order.
    const int32_t t0 =
        tiles > 0 ? min(tiles - 1, (int32_t)((int64_t)(m0 + AM / 2) * p.k / M / AN)) : 0;
    const auto tile_at = [&](int32_t i) { return t0 + i < tiles ? t0 + i : t0 + i - tiles; };
    km_copy_tile<W, THREADS>(fs, f + (base + m0) * d, min(AM, M - m0), d, d4, stride);
    if (tiles > 0) {
        const int32_t j1 = tile_at(0) * AN;
        km_copy_tile<W, THREADS>(cs, cen + (base + j1) * d, min(AN, p.k - j1), d, d4, stride);
    }
    // The lane's rows wm 16 MT + 16 mt + g + 8 h and their norms.
    double fn[MT][2], lb[MT][2], q[MT][2];
    km_best b[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int32_t m = m0 + wm * 16 * MT + 16 * mt + g + 8 * h;
            fn[mt][h] = m < M ? fnorm[base + m] : 0.0;
            b[mt][h] = {-INFINITY, -INFINITY, 0};
            lb[mt][h] = q[mt][h] = -INFINITY;
        }
    for (int32_t i = 0; i < tiles; i++) {
        const int32_t j0 = tile_at(i) * AN;
        if (i + 1 < tiles) {
            const int32_t j1 = tile_at(i + 1) * AN;
            km_copy_tile<W, THREADS>(cs + ((i + 1) & 1) * AN * stride, cen + (base + j1) * d,
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
        if (i > 0 && km_shares(i - 1)) {
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
                cn[nt][e] = j < p.k ? cnorm[base + j] : 0.0;
                rc[nt][e] = j < p.k ? crec[base + j] : 0.0;
            }
        ckv_cp_async_wait<1>();
        __syncthreads();  // this tile's (and the features') copies landed for every thread
        const double *A = fs + (wm * 16 * MT + g) * stride + t;
        const double *B = cs + (i & 1) * AN * stride + (wn * 16 + g) * stride + t;
        double acc[MT][2][4] = {};
#pragma unroll(D == 128 ? 8 : 2)
        for (int32_t k0 = 0; k0 < d4; k0 += 4) {
            double a[MT][2], bb[2];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                a[mt][0] = A[16 * mt * stride + k0];
                a[mt][1] = A[(16 * mt + 8) * stride + k0];
            }
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
                bb[nt] = B[8 * nt * stride + k0];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < 2; nt++)
                    ckv_mma_f64_m16(acc[mt][nt], a[mt][0], a[mt][1], bb[nt]);
        }
        // C fragment: acc[mt][nt][2 h + e] is row g + 8 h, column 2 t + e.
        // First the columns the row's bound q cannot rule out, then those
        // with the exact cosine: a higher one, or an equal one of lower index,
        // is the new best (the order of the columns does not matter).
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
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
                    const double dot = acc[mt][nt][2 * h + e], f1 = fn[mt][h], cc = cn[nt][e];
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
        if (km_shares(i) && i + 1 < tiles) {
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
    const int32_t row = threadIdx.x;
    if (row >= AM || m0 + row >= M)
        return;
    km_best r = part[row];
    for (int w = 1; w < WARPS_N; w++)
        r = km_merge(r, part[w * AM + row]);
    cl[base + m0 + row] = r.j;
    if (best)  // the tests' (ckv_gpu_kmeans_assign)
        best[base + m0 + row] = r.s;
    ckv_pol_note_margin(margin + lh, r.s - r.second);
}

// Sort keys for grouping the middle by cluster; clusters start without a run.
__global__ void km_group_prep_kernel(const int32_t *cl, int32_t *ikey, int32_t *ival,
                                     int32_t *run_b, const int32_t *act, const int32_t *M_of,
                                     km_params p)
{
    const int32_t lh = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh])
        return;
    const size_t base = (size_t)lh * p.cap;
    if (i < p.k)
        run_b[base + i] = -1;
    if (i < M_of[lh]) {
        ikey[base + i] = cl[base + i];
        ival[base + i] = i;
    }
}

// Lloyd step for cluster j: the normalised degree-weighted mean of its
// members' features, members in slot order; empty clusters and means of
// norm below 1e-30 keep their centroid. A warp per cluster, lane i taking
// dimensions i, i + 32, ..., so that a member's feature row is read
// coalesced (a thread per cluster read 32 rows a warp load: 5.2 ms an
// iteration of the 8B's decode-time call at 8K against 0.80 now, run KJ);
// each sum still runs over the members, then the dimensions, in the CPU's
// order.
enum { UPDATE_THREADS = 128, UPDATE_WARPS = UPDATE_THREADS / 32 };

__global__ void __launch_bounds__(UPDATE_THREADS)
    km_update_kernel(const double *f, const float *deg, double *cen, double *csum,
                     const int32_t *run_b, const int32_t *run_e, const int32_t *members,
                     const int32_t *act, km_params p)
{
    const int32_t lh = blockIdx.y, lane = threadIdx.x % 32;
    const int32_t j = blockIdx.x * UPDATE_WARPS + threadIdx.x / 32;
    if (!act[lh] || j >= p.k)
        return;
    const size_t base = (size_t)lh * p.cap;
    const int32_t rb = run_b[base + j];
    if (rb < 0)
        return;
    const int32_t re = run_e[base + j], d = p.d;
    const float *D = deg + base + p.sinks;
    double wsum = 0;  // every lane the same sum
    for (int32_t r = rb; r < re; r++)
        wsum = __dadd_rn(wsum, (double)D[members[r]]);
    double *s = csum + (base + j) * d;
    for (int32_t i = lane; i < d; i += 32) {
        double a = 0;
        for (int32_t r = rb; r < re; r++) {
            const int32_t m = members[r];
            a = __dadd_rn(a, __dmul_rn((double)D[m], f[(base + m) * d + i]));
        }
        s[i] = __ddiv_rn(a, wsum);
    }
    __syncwarp();  // the lanes' s[i] are visible to the whole warp
    double n = 0;  // every lane the same sum, over the dimensions in order
    for (int32_t i = 0; i < d; i++)
        n = __dadd_rn(n, __dmul_rn(s[i], s[i]));
    n = sqrt(n);
    if (n < 1e-30)
        return;
    double *c = cen + (base + j) * d;
    for (int32_t i = lane; i < d; i += 32)
        c[i] = __ddiv_rn(s[i], n);
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

// The assignment's dynamic shared memory for head_dim d, allowed on the
// current device; an error where the tiles do not fit.
static ckv_status km_assign_room(int32_t d, size_t *smem, ckv_error *err)
{
    *smem = km_assign_smem(d);
    size_t most;
    ckv_status st = ckv_pol_smem_most(&most, err);
    if (st)
        return st;
    if (*smem > most)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "cuda kmeans: head_dim %d needs %zu bytes of shared memory (device: %zu)",
                          d, *smem, most);
    return ckv_pol_allow_smem(km_assign_of(d), *smem, "cuda kmeans", err);
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

    size_t smem;
    ckv_status st = km_assign_room(x->d, &smem, err);
    if (st)
        return st;
    if ((st = ckv_pol_take(x, (void **)&w->f, w->rows * sizeof(double), err)) ||
        (st = ckv_pol_take(x, (void **)&w->cen, w->rows * sizeof(double), err)) ||
        (st = ckv_pol_take(x, (void **)&w->csum, w->rows * sizeof(double), err)) ||
        (st = ckv_pol_take(x, (void **)&w->cnorm, 2 * w->slots * sizeof(double), err)) ||
        (st = ckv_pol_take(x, (void **)&w->cl, w->slots * sizeof(int32_t), err)) ||
        (st = ckv_pol_upload_plan(x, err)))
        return st;

    double *const crec = w->cnorm + w->slots;  // the reciprocals after the norms
    const dim3 over_t(ckv_pol_blocks(max_t, 128), x->lists);
    const dim3 over_m(ckv_pol_blocks(max_m > kp.k ? max_m : kp.k, 256), x->lists);
    const dim3 over_k(ckv_pol_blocks(kp.k, 128), x->lists);
    const dim3 tiles(ckv_pol_blocks(max_m, AM), x->lists);
    const dim3 per_warp(ckv_pol_blocks(kp.k, UPDATE_WARPS), x->lists);
    ckv_pol_kv(c, [&](auto *k, auto *) {
        km_feature_kernel<<<over_t, 128, 0, x->s>>>(k, w->f, w->norm, w->dest, x->act, x->T,
                                                    x->x, kp);
    });
    CKV_CUDA_LAUNCHED();
    km_init_kernel<<<dim3(ckv_pol_blocks((int64_t)kp.k * x->d, 256), x->lists), 256, 0, x->s>>>(
        w->f, w->cen, x->act, x->x, kp);
    CKV_CUDA_LAUNCHED();
    for (int32_t it = 0; it <= iters; it++) {
        km_cnorm_kernel<<<over_k, 128, 0, x->s>>>(w->cen, w->cnorm, crec, x->act, kp);
        CKV_CUDA_LAUNCHED();
        km_assign_of(x->d)<<<tiles, km_assign_threads(x->d), smem, x->s>>>(
            w->f, w->norm, w->cen, w->cnorm, crec, w->cl, nullptr, w->margin, x->act, x->x, kp);
        CKV_CUDA_LAUNCHED();
        // Members of each cluster in slot order: a stable sort by cluster.
        km_group_prep_kernel<<<over_m, 256, 0, x->s>>>(w->cl, w->ikey, w->ival, w->run_b, x->act,
                                                       x->x, kp);
        CKV_CUDA_LAUNCHED();
        if ((st = ckv_pol_sort_int(x, err)) || (st = ckv_pol_runs(x, max_m, err)))
            return st;
        if (it == iters)
            break;  // the final assignment: no update after it
        km_update_kernel<<<per_warp, UPDATE_THREADS, 0, x->s>>>(
            w->f, c->deg, w->cen, w->csum, w->run_b, w->run_e, w->ival_out, x->act, kp);
        CKV_CUDA_LAUNCHED();
    }
    km_dest_kernel<<<dim3(ckv_pol_blocks(max_m, 256), x->lists), 256, 0, x->s>>>(
        w->dest, w->cl, w->run_b, w->ival_out, x->act, x->x, kp);
    CKV_CUDA_LAUNCHED();
    return ckv_pol_apply(x, max_m, err);
}

extern "C" ckv_status ckv_gpu_kmeans_assign(const double *f, const double *fnorm,
                                            const double *cen, const double *cnorm, int32_t M,
                                            int32_t k, int32_t d, int32_t *cl, double *best,
                                            float *margin, ckv_error *err)
{
    if (M < 1 || k < 1 || d < 1)
        return ckv_errorf(err, CKV_ERR_ARG, "kmeans_assign: M %d, k %d, d %d", M, k, d);
    size_t smem;
    ckv_status st = km_assign_room(d, &smem, err);
    if (st)
        return st;
    // One allocation: features, centroids, their norms, the centroids'
    // reciprocals (as km_cnorm_kernel forms them), best; cl, act, M_of,
    // margin. The list's capacity holds both row sets.
    const size_t cap = (size_t)(M > k ? M : k);
    const size_t doubles = 2 * cap * d + 4 * cap, bytes = doubles * 8 + (cap + 3) * 4;
    double *rec = static_cast<double *>(malloc(k * sizeof(double)));
    if (!rec)
        return ckv_errorf(err, CKV_ERR_NOMEM, "kmeans_assign: %d doubles of host memory", k);
    for (int32_t j = 0; j < k; j++)
        rec[j] = cnorm[j] < 1e-30 ? 0.0 : 1.0 / cnorm[j];
    char *dev = nullptr;
    cudaError_t e = cudaMalloc(&dev, bytes);
    if (e != cudaSuccess) {
        free(rec);
        return ckv_errorf(err, CKV_ERR_DEVICE, "kmeans_assign: %s", cudaGetErrorString(e));
    }
    double *df = reinterpret_cast<double *>(dev), *dc = df + cap * d, *dfn = dc + cap * d;
    double *dcn = dfn + cap, *drec = dcn + cap, *dbest = drec + cap;
    int32_t *dcl = reinterpret_cast<int32_t *>(dbest + cap), *act = dcl + cap;
    unsigned *dmargin = reinterpret_cast<unsigned *>(act + 2);
    const int32_t head[2] = {1, M};
    const float big = FLT_MAX;
    const km_params kp = {0, k, (int32_t)cap, d};
    const struct {
        void *to;
        const void *from;
        size_t n;
    } up[] = {{df, f, (size_t)M * d * 8}, {dc, cen, (size_t)k * d * 8}, {dfn, fnorm, M * 8ul},
              {dcn, cnorm, k * 8ul},      {drec, rec, k * 8ul},         {act, head, sizeof head},
              {dmargin, &big, 4}};
    for (size_t i = 0; i < sizeof up / sizeof up[0] && e == cudaSuccess; i++)
        e = cudaMemcpy(up[i].to, up[i].from, up[i].n, cudaMemcpyHostToDevice);
    free(rec);
    if (e == cudaSuccess) {
        km_assign_of(d)<<<dim3(ckv_pol_blocks(M, AM), 1), km_assign_threads(d), smem>>>(
            df, dfn, dc, dcn, drec, dcl, dbest, dmargin, act, act + 1, kp);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaMemcpy(cl, dcl, M * 4ul, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        e = cudaMemcpy(best, dbest, M * 8ul, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        e = cudaMemcpy(margin, dmargin, 4, cudaMemcpyDeviceToHost);
    cudaFree(dev);
    if (e != cudaSuccess)
        return ckv_errorf(err, CKV_ERR_DEVICE, "kmeans_assign: %s", cudaGetErrorString(e));
    return CKV_OK;
}
