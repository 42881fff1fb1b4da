// CentroidKV's Chunked Soft Matching on the GPU (policies.md, "centroid"),
// one round of every list over budget per step: key norms, the chunk
// partition, each source's best partner, the global top-m ranking (a
// selection of the top m + 1, or a stable segmented sort where m is
// large), and the merge (cuda_compact.cu). CPU twins:
// round_list and ckv_csm_partition_chunk in src/policies/centroid.c. The
// cosines are computed as the CPU computes them (double, in the order of
// ckv_csm_dot and ckv_csm_norm, by ckv_csm_cosine's multiplies; the FP64
// tensor cores add each product as a multiply and add do, see
// csm_best_kernel), so they are equal to the bit and so are the decisions.
// The host knows each round's candidate and merge counts from the lengths
// alone and uses the CPU's own rate functions. Keys are read as fp32 from
// either cache type (T: float or ckv_bf16).
#include <math.h>
#include <string.h>


#include "cuda_async_copy.cuh"
#include "cuda_bf16.cuh"
#include "cuda_check.h"
#include "cuda_mma.cuh"
#include "cuda_policy.h"
#include "quant.h"
#include "splitmix.h"

extern "C" {
#include "policies/csm.h"
}

// A round's parameters; each list's cache (its keys, map and round) comes
// from the call's table (ckv_pol_caches).
struct csm_params {
    int32_t sinks, recent, C, partition;
    uint64_t seed;
    int32_t layers, heads;  // a cache's
};

// A thread per slot: the identity dest (the round marks its merges on it).
__global__ void csm_init_kernel(int32_t *dest, const int32_t *act, const int32_t *T, int32_t cap)
{
    const int32_t lh = blockIdx.y, t = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || t >= T[lh])
        return;
    dest[(size_t)lh * cap + t] = t;
}

// Whether local offset o of a chunk of length L is a source. The
// alternating and sequential partitions by arithmetic, so that no load
// stands in front of a walk's key copies; the random one from the flags
// csm_partition_kernel writes (a thread per chunk writing its slots one
// after another was 26 us of run AB's 32K call).
__device__ static inline bool csm_is_a(const csm_params &p, const uint8_t *in_a, size_t c0,
                                       int32_t o, int32_t L)
{
    if (p.partition == CKV_CSM_ALTERNATING)
        return o % 2 == 0;
    if (p.partition == CKV_CSM_SEQUENTIAL)
        return o < (L + 1) / 2;
    return in_a[c0 + o] == 1;
}

// The random partition, one thread per chunk: in_a[slot] = 1 for sources,
// 0 for destinations; seeded by the list's cache's round and the list's
// (layer, head) in that cache.
__global__ void csm_partition_kernel(uint8_t *in_a, int32_t *perm, const int32_t *act,
                                     const int32_t *T, csm_params p, ckv_pol_caches cs,
                                     int32_t cap)
{
    const int32_t lh = blockIdx.y, chunk = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh])
        return;
    const int32_t end = T[lh] - p.recent;
    const int64_t c0 = p.sinks + (int64_t)chunk * p.C;
    if (c0 >= end)
        return;
    const int32_t L = end - c0 < p.C ? (int32_t)(end - c0) : p.C, half = (L + 1) / 2;
    const size_t base = (size_t)lh * cap + c0;
    uint8_t *A = in_a + base;
    const ckv_pol_list li = ckv_pol_list_of(cs, lh, cap, 0);
    const int32_t l = li.local / p.heads, h = li.local % p.heads;
    const uint64_t idx = (((uint64_t)li.round * (uint64_t)p.layers + (uint64_t)l) *
                              (uint64_t)p.heads +
                          (uint64_t)h) * (1ull << 20) +
                         (uint64_t)chunk;
    uint64_t state = p.seed + 0x9E3779B97F4A7C15ull * (1 + idx);
    int32_t *P = perm + base;
    for (int32_t o = 0; o < L; o++)
        P[o] = o;
    for (int32_t i = L - 1; i >= 1; i--) {
        const int32_t j = (int32_t)(ckv_splitmix64(&state) % (uint64_t)(i + 1));
        const int32_t t = P[i];
        P[i] = P[j];
        P[j] = t;
    }
    for (int32_t o = 0; o < L; o++)
        A[P[o]] = o < half;
}

// csm_best_kernel: one warp per (list, chunk, tile of up to CSM_TILE
// sources taken in the chunk's slot order). The warp streams the chunk's
// destinations in slot order, CSM_TILE at a time, and forms every
// source-destination dot product on the FP64 tensor cores: the sources as
// one 16-row A tile, the destinations as two 8-column B tiles. A key element
// is fp32 or bf16, so the product of two is exact in double, and the FP64
// mma adds its four products one after another, each sum rounded once
// (ckv_mma_f64_m16), as the CPU's acc += a * b does. The tensor pipe was the
// walk's busiest unit (run EU: 54% of its cycles); m16n8k4 runs at twice
// m8n8k4's rate, so the pairs take it (run EQ).
//
// Loads: lane 4g + t (fragment row g, k-place t) loads dimensions 8t ..
// 8t + 7 of each 32-wide slab of sources g, g + 8 and destinations g, g + 8
// in 16-byte pieces (element by element where rows are not 16-byte
// aligned), and gives its element s to k-step s as it is: k-step s adds
// dimensions s, 8 + s, 16 + s, 24 + s of the slab, which is ckv_csm_dot's
// order. (Until the seventieth session the quad exchanged its pieces by
// shuffles so that k-step s took dimensions 4s .. 4s + 3, index order: a
// quarter of the walk's instructions.) The same lane sums the squares of
// its dimensions, one fused multiply-add each, and the quad adds its four
// sums as ckv_csm_norm does (the norms as diagonals of 8-row self-products
// took two thirds of the walk's tensor-core instructions, until the
// sixty-ninth session). A warp's pieces come by cp.async through a ring of
// slabs (csm_ring): all of a bf16 row of 128 are in flight at once, so the
// warp's first wait is its only long one; until the seventieth session they
// came one slab ahead in registers, four loads a tile one after another
// (run ET's ring, when the tensor pipe held the walk, gained nothing). The
// CUDA-core walk before (16 lanes summing 4 x 4 pairs each from keys staged
// as doubles in shared memory) was bound by shared memory (run EH).
//
// Each lane then scans its destination columns of its two sources in slot
// order, as the CPU walks a chunk, and the quad folds the four lanes'
// results (csm_fold): the first best partner in slot order and the second
// best value are the walk's.
#define CSM_TILE 16
#define CSM_SLAB 32
#define CSM_WARPS 4

// ckv_csm_recip: 1 / norm, correctly rounded, or 0 below 1e-30, so that a
// cosine is two multiplies (ckv_csm_cosine), as on the CPU.
__device__ static inline double csm_recip(double n)
{
    return n >= 1e-30 ? __drcp_rn(n) : 0.0;
}

// Source tiles per chunk: ceil(C/32) hold the ceil(C/2) sources of a full
// chunk.
__host__ __device__ static inline int32_t csm_tiles(int32_t C)
{
    return (C + 2 * CSM_TILE - 1) / (2 * CSM_TILE);
}

struct csm_warp_smem {
    // csm_recip of the sources' and the current destinations' norms
    double ra[CSM_TILE], rb[CSM_TILE];
    int32_t src[CSM_TILE], dst[CSM_TILE];    // slots
    int32_t srow[CSM_TILE], drow[CSM_TILE];  // their rows
};

// A lane's share of one row's slab: 8 elements in 16-byte pieces.
template <typename Elem>
struct csm_piece {
    static constexpr int N = 16 / sizeof(Elem);
    static constexpr int PER_ROW = 8 / N;
};

// A warp's slabs in flight: its lanes' pieces of their 4 rows, lane by lane
// (so each lane reads back only what it copied, and the rows' 16-byte
// pieces fall in distinct banks), for S slabs: 4 of bf16 keys (a head_dim
// of 128 whole), 2 of fp32 (64); 8 KB a warp either way.
template <typename Elem>
struct csm_ring {
    static constexpr int S = 4 / csm_piece<Elem>::PER_ROW;
    uint4 pc[S][4][csm_piece<Elem>::PER_ROW][32];
};

// Dimensions e0 .. e0 + 7 of this lane's 4 rows (zeros past d, and for no
// row) into a ring slot: by cp.async where rows are 16-byte aligned, else
// element by element, stored at once.
template <typename Elem>
__device__ static inline void csm_issue(uint4 (&slot)[4][csm_piece<Elem>::PER_ROW][32],
                                        const Elem *const (&row)[4], const Elem *k, int32_t e0,
                                        int32_t d, bool aligned, int32_t lane)
{
    typedef csm_piece<Elem> P;
#pragma unroll
    for (int32_t r = 0; r < 4; r++)
#pragma unroll
        for (int32_t j = 0; j < P::PER_ROW; j++) {
            const int32_t e = e0 + P::N * j;
            const bool in = row[r] && e < d;
            if (aligned) {
                ckv_cp_async16(&slot[r][j][lane], in ? row[r] + e : k, in);
                continue;
            }
            Elem x[P::N];
#pragma unroll
            for (int32_t i = 0; i < P::N; i++)
                x[i] = in && e + i < d ? row[r][e + i] : Elem(0);
            memcpy(&slot[r][j][lane], x, sizeof x);
        }
}

// This lane's elements of one row's slab, dimension 8t + s of the slab at
// e[s], from its own pieces as loaded: bf16 word k holds dimensions 2k (low
// half) and 2k + 1; fp32 one word a dimension.
__device__ static inline void csm_slab_row(const uint4 (&pc)[1], float (&e)[8])
{
    const uint32_t w[4] = {pc[0].x, pc[0].y, pc[0].z, pc[0].w};
#pragma unroll
    for (int32_t k = 0; k < 4; k++) {
        e[2 * k] = __uint_as_float(w[k] << 16);
        e[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
}
__device__ static inline void csm_slab_row(const uint4 (&pc)[2], float (&e)[8])
{
    const uint4 a = pc[0], b = pc[1];
    const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int32_t k = 0; k < 8; k++)
        e[k] = __uint_as_float(w[k]);
}

// The warp's dot products of its ns sources with the nb staged
// destinations (dot[j][2i + e]: source g + 8i, destination 8j + 2t + e),
// and the reciprocal norms (csm_recip) of the destinations, and of the
// sources on the first pass, into w->rb and w->ra. The ring holds the next
// slabs in flight: at a bf16 head_dim of 128 every slab is asked for before
// the first is waited on (before, one slab ahead in registers, each wait a
// whole load).
template <typename Elem>
__device__ static void csm_tile_dots(csm_warp_smem *w, csm_ring<Elem> *ring, const Elem *k,
                                     int32_t d, int32_t ns, int32_t nb, bool first,
                                     bool aligned, int32_t g, int32_t t, int32_t lane,
                                     double (&dot)[2][4])
{
    typedef csm_piece<Elem> P;
    constexpr int32_t S = csm_ring<Elem>::S;
    const Elem *const row[4] = {
        g < ns ? k + (size_t)w->srow[g] * d : nullptr,
        g + 8 < ns ? k + (size_t)w->srow[g + 8] * d : nullptr,
        g < nb ? k + (size_t)w->drow[g] * d : nullptr,
        g + 8 < nb ? k + (size_t)w->drow[g + 8] * d : nullptr,
    };
    const bool two_b = nb > 8;
    const int32_t slabs = (d + CSM_SLAB - 1) / CSM_SLAB;
    double sq[4] = {0, 0, 0, 0};  // this lane's octet of each row's squares
#pragma unroll
    for (int32_t j = 0; j < 2; j++)
        dot[j][0] = dot[j][1] = dot[j][2] = dot[j][3] = 0;
    // One commit group a slab, empty past the last, so that waiting for all
    // but the newest S - 1 groups always means slab q has landed.
#pragma unroll
    for (int32_t q = 0; q < S; q++) {
        if (q < slabs)
            csm_issue<Elem>(ring->pc[q], row, k, q * CSM_SLAB + 8 * t, d, aligned, lane);
        ckv_cp_async_commit();
    }
    for (int32_t q = 0; q < slabs; q++) {
        ckv_cp_async_wait<S - 1>();
        float e[4][8];
#pragma unroll
        for (int32_t r = 0; r < 4; r++) {
            uint4 pc[P::PER_ROW];
#pragma unroll
            for (int32_t j = 0; j < P::PER_ROW; j++)
                pc[j] = ring->pc[q % S][r][j][lane];
            csm_slab_row(pc, e[r]);
        }
        if (q + S < slabs)
            csm_issue<Elem>(ring->pc[q % S], row, k, (q + S) * CSM_SLAB + 8 * t, d, aligned,
                            lane);
        ckv_cp_async_commit();
#pragma unroll
        for (int32_t s = 0; s < 8; s++) {
            const double a0 = e[0][s], a1 = e[1][s], b0 = e[2][s], b1 = e[3][s];
            ckv_mma_f64_m16(dot[0], a0, a1, b0);
            if (two_b)
                ckv_mma_f64_m16(dot[1], a0, a1, b1);
            sq[2] = __fma_rn(b0, b0, sq[2]);
            sq[3] = __fma_rn(b1, b1, sq[3]);
            if (first) {
                sq[0] = __fma_rn(a0, a0, sq[0]);
                sq[1] = __fma_rn(a1, a1, sq[1]);
            }
        }
    }
    // ckv_csm_norm's (p_0 + p_1) + (p_2 + p_3): lane t holds p_t, and every
    // lane of the quad ends with the same bits (an addition commutes).
#pragma unroll
    for (int32_t r = 0; r < 4; r++) {
        sq[r] += __shfl_xor_sync(0xffffffffu, sq[r], 1);
        sq[r] += __shfl_xor_sync(0xffffffffu, sq[r], 2);
    }
    // Lane t takes row t's root and reciprocal (sources g, g + 8, then
    // destinations g, g + 8): one each where lane 0 took all four in turn.
    if (t >= 2 || first) {
        const double n = sqrt(t == 0 ? sq[0] : t == 1 ? sq[1] : t == 2 ? sq[2] : sq[3]);
        (t < 2 ? w->ra : w->rb)[g + 8 * (t & 1)] = csm_recip(n);
    }
    __syncwarp();
}

// A source's walk state (best slot or -1, its cosine, the second best)
// folded with another lane's over other destinations: the best by cosine,
// then by the lower slot (the walk keeps the first in slot order), and the
// second best of both.
__device__ static inline void csm_fold(int32_t &best, double &bs, double &second, int32_t off)
{
    const int32_t ob = __shfl_xor_sync(0xffffffffu, best, off);
    const double obs = __shfl_xor_sync(0xffffffffu, bs, off);
    const double osec = __shfl_xor_sync(0xffffffffu, second, off);
    if (ob < 0)
        return;
    if (best < 0) {
        best = ob;
        bs = obs;
        second = osec;
    } else if (obs > bs || (obs == bs && ob < best)) {
        second = bs > osec ? bs : osec;
        best = ob;
        bs = obs;
    } else if (obs > second) {
        second = obs;
    }
}

// Each source's best partner in its chunk and its score (the sort key, at
// the candidate's compacted position). Ties keep the lowest slot. Keys
// from the list's cache (the table).
template <typename Elem>
__global__ void __launch_bounds__(CSM_WARPS * 32)
    csm_best_kernel(ckv_pol_caches cs, const uint8_t *in_a, double *key, int32_t *ival,
                    int32_t *partner, double *gap, const int32_t *act, const int32_t *T,
                    csm_params p, int32_t cap, int32_t d)
{
    __shared__ csm_warp_smem smem[CSM_WARPS];
    __shared__ csm_ring<Elem> rings[CSM_WARPS];
    const int32_t lh = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int32_t g = lane >> 2, t = lane & 3;
    csm_warp_smem *w = &smem[warp];
    // Both loads in flight before the test, and 32-bit indices: the warp's
    // start held about an eighth of ZZ95's samples. They fit because a
    // list's capacity does and the chunk and sinks are bounded
    // (CKV_CSM_CHUNK_MAX, CKV_CSM_PROTECT_MAX).
    const int32_t on = act[lh], len = T[lh];
    if (!on)
        return;
    const int32_t tiles = csm_tiles(p.C);
    const int32_t tid = (int32_t)blockIdx.x * CSM_WARPS + warp;
    const int32_t chunk = tid / tiles, t0 = tid % tiles * CSM_TILE, end = len - p.recent;
    const int32_t c0 = p.sinks + chunk * p.C;
    if (c0 >= end)
        return;
    const int32_t L = end - c0 < p.C ? end - c0 : p.C;
    const size_t lbase = (size_t)lh * cap;
    const ckv_pol_list li = ckv_pol_list_of(cs, lh, cap, (size_t)d * sizeof(Elem));
    const Elem *k = static_cast<const Elem *>(li.k);
    const bool aligned = d * sizeof(Elem) % 16 == 0 && (uintptr_t)k % 16 == 0;
    const unsigned below = (1u << lane) - 1;
    // The sources of rank t0 .. t0 + CSM_TILE - 1 among the chunk's A slots.
    int32_t seen = 0;
    for (int32_t w0 = 0; w0 < L && seen < t0 + CSM_TILE; w0 += 32) {
        const unsigned m = __ballot_sync(
            0xffffffffu, w0 + lane < L && csm_is_a(p, in_a, lbase + c0, w0 + lane, L));
        const int32_t r = seen + __popc(m & below) - t0;
        if (m >> lane & 1 && r >= 0 && r < CSM_TILE) {
            w->src[r] = (int32_t)c0 + w0 + lane;
            w->srow[r] = li.row_of(w->src[r]);
        }
        seen += __popc(m);
    }
    const int32_t ns = seen - t0 < CSM_TILE ? seen - t0 : CSM_TILE;
    if (ns <= 0)
        return;
    __syncwarp();
    // Sources g and g + 8: this lane's walk over its destination columns.
    int32_t best[2] = {-1, -1};
    double bs[2] = {0, 0}, second[2] = {-INFINITY, -INFINITY};
    bool first = true;
    for (int32_t w0 = 0; w0 < L; w0 += 32) {
        const unsigned m = __ballot_sync(
            0xffffffffu, w0 + lane < L && !csm_is_a(p, in_a, lbase + c0, w0 + lane, L));
        const int32_t nB = __popc(m), r = __popc(m & below);
        for (int32_t b0 = 0; b0 < nB; b0 += CSM_TILE) {
            if (m >> lane & 1 && r >= b0 && r < b0 + CSM_TILE) {
                w->dst[r - b0] = (int32_t)c0 + w0 + lane;
                w->drow[r - b0] = li.row_of(w->dst[r - b0]);
            }
            __syncwarp();
            const int32_t nb = nB - b0 < CSM_TILE ? nB - b0 : CSM_TILE;
            double dot[2][4];
            csm_tile_dots(w, &rings[warp], k, d, ns, nb, first, aligned, g, t, lane, dot);
            first = false;
#pragma unroll
            for (int32_t i = 0; i < 2; i++) {
                const double ra = w->ra[g + 8 * i];
#pragma unroll
                for (int32_t j = 0; j < 2; j++)
#pragma unroll
                    for (int32_t e = 0; e < 2; e++) {
                        const int32_t col = 8 * j + 2 * t + e;
                        if (col >= nb)
                            continue;
                        const double rb = w->rb[col];
                        const double sim =
                            ra != 0 && rb != 0
                                ? __dmul_rn(__dmul_rn(dot[j][2 * i + e], ra), rb)
                                : 0.0;
                        // The walk's update by selects, not branches.
                        const bool top = best[i] < 0 || sim > bs[i];
                        const double under = best[i] >= 0 ? bs[i] : second[i];
                        second[i] = top ? under : sim > second[i] ? sim : second[i];
                        best[i] = top ? w->dst[col] : best[i];
                        bs[i] = top ? sim : bs[i];
                    }
            }
            __syncwarp();  // dst and rb read before the next pass writes them
        }
    }
#pragma unroll
    for (int32_t i = 0; i < 2; i++) {
        csm_fold(best[i], bs[i], second[i], 1);
        csm_fold(best[i], bs[i], second[i], 2);
        const int32_t r = g + 8 * i;
        if (t || r >= ns)
            continue;
        // The candidates go to the sort compacted, in slot order: a chunk's
        // (C + 1) / 2 sources after the previous chunks'. (The whole middle, a
        // destination's key -inf, doubled the sort: 0.28 ms of run AA's 32K call.)
        const size_t ra = lbase + w->src[r];
        const size_t ci = lbase + p.sinks + chunk * ((p.C + 1) / 2) + t0 + r;
        ival[ci] = w->src[r];
        key[ci] = best[i] >= 0 ? bs[i] : -INFINITY;
        if (best[i] < 0)
            continue;
        partner[ra] = best[i];
        gap[ra] = bs[i] - second[i];
    }
}

// csm_best_kernel over `lists` lists of at most max_chunks chunks, keys
// typed as dt says they are stored. Its rings want the largest shared-memory
// carveout: 4 blocks of 34 KB an SM.
template <typename Elem>
static cudaError_t csm_best_typed(ckv_pol_caches cs, const uint8_t *in_a, double *key,
                                  int32_t *ival, int32_t *partner, double *gap,
                                  const int32_t *act, const int32_t *T, const csm_params &cp,
                                  int32_t cap, int32_t d, int32_t lists, int32_t max_chunks,
                                  cudaStream_t s)
{
    const dim3 grid(ckv_pol_blocks((int64_t)max_chunks * csm_tiles(cp.C), CSM_WARPS), lists);
    const cudaError_t e = ckv_allow_smem(csm_best_kernel<Elem>, 0);
    if (e != cudaSuccess)
        return e;
    csm_best_kernel<Elem><<<grid, CSM_WARPS * 32, 0, s>>>(cs, in_a, key, ival, partner, gap, act,
                                                          T, cp, cap, d);
    return cudaGetLastError();
}

static cudaError_t csm_best_launch(ckv_pol_caches cs, ckv_kv_dtype dt, const uint8_t *in_a,
                                   double *key, int32_t *ival, int32_t *partner, double *gap,
                                   const int32_t *act, const int32_t *T, const csm_params &cp,
                                   int32_t cap, int32_t d, int32_t lists, int32_t max_chunks,
                                   cudaStream_t s)
{
    return dt == CKV_KV_BF16 ? csm_best_typed<ckv_bf16>(cs, in_a, key, ival, partner, gap, act, T,
                                                        cp, cap, d, lists, max_chunks, s)
                             : csm_best_typed<float>(cs, in_a, key, ival, partner, gap, act, T,
                                                     cp, cap, d, lists, max_chunks, s);
}

// The top m candidates of each list (x: m, y: candidates) merge into their
// partners.
__global__ void csm_mark_kernel(int32_t *dest, const double *key_out, const int32_t *ival_out,
                                const int32_t *partner, const double *gap, unsigned *margin,
                                const int32_t *act, const int32_t *seg_b, const int32_t *m_of,
                                const int32_t *nc_of, int32_t cap)
{
    const int32_t lh = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    const int32_t m = m_of[lh];
    if (!act[lh] || i >= m)
        return;
    const size_t pos = (size_t)seg_b[lh] + i, ra = (size_t)lh * cap + ival_out[pos];
    dest[ra] = partner[ra];
    double g = gap[ra];
    if (i == m - 1 && m < nc_of[lh] && key_out[pos] - key_out[pos + 1] < g)
        g = key_out[pos] - key_out[pos + 1];
    ckv_pol_note_margin(margin + lh, g);
}

ckv_status ckv_pol_centroid(ckv_pol *x, const ckv_policy *p, int32_t budget, ckv_error *err)
{
    csm_params cp;
    cp.sinks = (int32_t)ckv_policy_param(p, "sinks", 0);
    cp.recent = (int32_t)ckv_policy_param(p, "recent", 0);
    cp.C = (int32_t)ckv_policy_param(p, "chunk", 2);
    cp.partition = (int32_t)ckv_policy_param(p, "partition", 0);
    cp.seed = (uint64_t)ckv_policy_param(p, "seed", 0);
    cp.layers = x->c->n_layer;
    cp.heads = x->c->n_head_kv;
    const int64_t r_init = ckv_policy_param(p, "r_init", 0), r_step = ckv_policy_param(p, "r_step", 0),
                  r_min = ckv_policy_param(p, "r_min", 0);
    const ckv_csm_schedule schedule = (ckv_csm_schedule)ckv_policy_param(p, "schedule", 0);
    int32_t *act = ckv_pol_h(x, PLAN_ACT), *T = ckv_pol_h(x, PLAN_T);
    int32_t *sb = ckv_pol_h(x, PLAN_SEG_B), *se = ckv_pol_h(x, PLAN_SEG_E);
    int32_t *m_of = ckv_pol_h(x, PLAN_X), *nc_of = ckv_pol_h(x, PLAN_Y);
    ckv_gpu_policy_ws *w = x->ws;
    ckv_status st = CKV_OK;
    // Rounds until no list of any cache is over budget; a cache's round
    // counter (and so its rate) advances only with a round of its own lists,
    // as its own call's would.
    for (;;) {
        bool any = false;
        int32_t max_t = 0, max_chunks = 0, max_m = 0;
        for (int32_t lh = 0; lh < x->lists; lh++) {
            const ckv_gpu_cache *c = ckv_pol_cache_of(x, lh);
            T[lh] = c->len_h[lh % x->per];
            // Candidates: (L + 1) / 2 sources a chunk of L >= 2 slots.
            const int32_t mid = T[lh] - cp.recent - cp.sinks;
            int32_t nc = 0, chunks = 0;
            if (T[lh] > budget && mid > 0) {
                const int32_t rest = mid % cp.C;
                chunks = mid / cp.C + (rest > 0);
                nc = mid / cp.C * ((cp.C + 1) / 2) + (rest >= 2 ? (rest + 1) / 2 : 0);
            }
            act[lh] = T[lh] > budget && nc > 0;
            m_of[lh] = act[lh] ? (int32_t)ckv_csm_merges(
                                     ckv_csm_rate(c->round, r_init, r_step, r_min, schedule), nc,
                                     T[lh] - budget)
                               : 0;
            nc_of[lh] = nc;
            sb[lh] = lh * x->cap + cp.sinks;
            se[lh] = act[lh] ? sb[lh] + nc : sb[lh];
            if (!act[lh])
                continue;
            any = true;
            max_t = max_t > T[lh] ? max_t : T[lh];
            max_chunks = max_chunks > chunks ? max_chunks : chunks;
            max_m = max_m > m_of[lh] ? max_m : m_of[lh];
        }
        if (!any)
            break;
        // The table: each cache's round and its map as its last round's fill
        // left it.
        if ((st = ckv_pol_upload_plan(x, err)))
            return st;
        csm_init_kernel<<<dim3(ckv_pol_blocks(max_t, 256), x->lists), 256, 0, x->s>>>(
            w->dest, x->act, x->T, x->cap);
        CKV_CUDA_LAUNCHED();
        if (cp.partition == CKV_CSM_RANDOM) {
            csm_partition_kernel<<<dim3(ckv_pol_blocks(max_chunks, 64), x->lists), 64, 0, x->s>>>(
                w->in_a, w->perm, x->act, x->T, cp, x->tab, x->cap);
            CKV_CUDA_LAUNCHED();
        }
        CKV_CUDA(csm_best_launch(x->tab, x->c->dtype, w->in_a, w->key, w->ival, w->partner, w->gap,
                                 x->act, x->T, cp, x->cap, x->d, x->lists, max_chunks, x->s));
        // csm_mark reads the top m and the next candidate's key.
        if ((st = max_m + 1 <= CKV_POL_TOP_MAX ? ckv_pol_top_desc(x, x->x, 1, err)
                                               : ckv_pol_sort_desc(x, err)))
            return st;
        csm_mark_kernel<<<dim3(ckv_pol_blocks(max_m, 256), x->lists), 256, 0, x->s>>>(
            w->dest, w->key_out, w->ival_out, w->partner, w->gap, w->margin, x->act, x->seg_b,
            x->x, x->y, x->cap);
        CKV_CUDA_LAUNCHED();
        if ((st = ckv_pol_apply(x, max_m, err)))
            return st;
        for (int32_t i = 0; i < x->n; i++)
            x->cs[i]->round += ckv_pol_cache_active(x, i) ? 1 : 0;
    }
    return CKV_OK;
}

extern "C" ckv_status ckv_gpu_csm_best(const float *keys, ckv_kv_dtype dt, int32_t T, int32_t d,
                                       int32_t sinks, int32_t recent, int32_t C,
                                       int32_t partition, const uint8_t *in_a, double *key,
                                       int32_t *ival, int32_t *partner, double *gap,
                                       ckv_error *err)
{
    if (T < 1 || d < 1 || C < 1 || C > CKV_CSM_CHUNK_MAX || sinks < 0 ||
        sinks > CKV_CSM_PROTECT_MAX || recent < 0 ||
        T > INT32_MAX - CKV_CSM_PROTECT_MAX - 3 * CKV_CSM_CHUNK_MAX)
        return ckv_errorf(err, CKV_ERR_ARG, "csm_best: T %d, d %d, chunk %d, sinks %d, recent %d",
                          T, d, C, sinks, recent);
    const bool flags = partition == CKV_CSM_RANDOM;
    if ((partition != CKV_CSM_ALTERNATING && partition != CKV_CSM_SEQUENTIAL && !flags) ||
        flags != (in_a != nullptr))
        return ckv_errorf(err, CKV_ERR_ARG,
                          "csm_best: partition %d with%s flags (flags for the random one only)",
                          partition, in_a ? "" : "out");
    // The walk compacts a chunk's candidates into (C + 1) / 2 places.
    for (int32_t c0 = sinks; flags && c0 < T - recent; c0 += C) {
        int32_t na = 0;
        const int32_t L = T - recent - c0 < C ? T - recent - c0 : C;
        for (int32_t o = 0; o < L; o++) {
            if (in_a[c0 + o] > 1)
                return ckv_errorf(err, CKV_ERR_ARG, "csm_best: flag %d at slot %d (0 or 1)",
                                  in_a[c0 + o], c0 + o);
            na += in_a[c0 + o];
        }
        if (na > (C + 1) / 2)
            return ckv_errorf(err, CKV_ERR_ARG, "csm_best: %d sources in the chunk at slot %d, "
                              "at most %d", na, c0, (C + 1) / 2);
    }
    const size_t n = (size_t)T, elem = dt == CKV_KV_BF16 ? 2 : 4;
    // One allocation: the one-cache table, keys, key, gap, ival, partner,
    // act and T, then the random partition's flags (the others are
    // arithmetic).
    const size_t tbytes = (sizeof(ckv_pol_cache) + 15) / 16 * 16;
    const size_t kbytes = (n * d * elem + 7) / 8 * 8;
    const size_t bytes =
        tbytes + kbytes + 2 * n * sizeof(double) + (2 * n + 2) * sizeof(int32_t) + n;
    void *host_k = malloc(n * d * elem);
    char *dev = nullptr;
    if (!host_k)
        return ckv_errorf(err, CKV_ERR_NOMEM, "csm_best: %zu bytes of host memory", n * d * elem);
    if (dt == CKV_KV_BF16)
        for (size_t i = 0; i < n * d; i++)
            static_cast<uint16_t *>(host_k)[i] = ckv_f32_to_bf16(keys[i]);
    else
        memcpy(host_k, keys, n * d * elem);
    const int32_t head[2] = {1, T};
    cudaError_t e = cudaMalloc(&dev, bytes);
    ckv_pol_cache *tab = reinterpret_cast<ckv_pol_cache *>(dev);
    void *k = dev + tbytes;
    double *dkey = reinterpret_cast<double *>(dev + tbytes + kbytes);
    double *dgap = dkey + n;
    int32_t *divl = reinterpret_cast<int32_t *>(dgap + n), *dpart = divl + n, *act = dpart + n;
    uint8_t *dflags = reinterpret_cast<uint8_t *>(act + 2);
    const csm_params cp = {sinks, recent, C, partition, 0, 1, 1};
    const ckv_pol_cache one = {k, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0};
    const int32_t mid = T - recent - sinks, chunks = mid > 0 ? (mid + C - 1) / C : 0;
    if (e == cudaSuccess)
        e = cudaMemcpy(tab, &one, sizeof one, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(k, host_k, n * d * elem, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(act, head, sizeof head, cudaMemcpyHostToDevice);
    if (flags && e == cudaSuccess)
        e = cudaMemcpy(dflags, in_a, n, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemset(dkey, 0xff, 2 * n * sizeof(double) + 2 * n * sizeof(int32_t));
    if (e == cudaSuccess)
        e = csm_best_launch(ckv_pol_caches{tab, 1}, dt, flags ? dflags : nullptr, dkey, divl,
                            dpart, dgap, act, act + 1, cp, T, d, 1, chunks, 0);
    if (e == cudaSuccess)
        e = cudaMemcpy(key, dkey, n * sizeof(double), cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        e = cudaMemcpy(ival, divl, n * sizeof(int32_t), cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        e = cudaMemcpy(partner, dpart, n * sizeof(int32_t), cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        e = cudaMemcpy(gap, dgap, n * sizeof(double), cudaMemcpyDeviceToHost);
    free(host_k);
    cudaFree(dev);
    if (e != cudaSuccess)
        return ckv_errorf(err, CKV_ERR_DEVICE, "csm_best: %s", cudaGetErrorString(e));
    return CKV_OK;
}
