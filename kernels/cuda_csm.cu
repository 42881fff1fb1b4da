// CentroidKV's Chunked Soft Matching on the GPU (policies.md, "centroid"),
// one round of every list over budget per step: key norms, the chunk
// partition, each source's best partner, the global top-m ranking (a
// selection of the top m + 1, or a stable segmented sort where m is
// large), and the merge (cuda_compact.cu). CPU twins:
// round_list and ckv_csm_partition_chunk in src/policies/centroid.c. The
// cosines are computed as the CPU computes them (double, in index order;
// the fused multiply-adds round as its multiply and add do, see
// csm_best_kernel), so they are equal to the bit and so are the decisions.
// The host knows each round's candidate and merge counts from the lengths
// alone and uses the CPU's own rate functions. Keys are read as fp32 from
// either cache type (T: float or ckv_bf16).
#include <math.h>

#include "cuda_bf16.cuh"
#include "cuda_check.h"
#include "cuda_policy.h"
#include "splitmix.h"

extern "C" {
#include "policies/csm.h"
}

struct csm_params {
    int32_t sinks, recent, C, partition;
    uint64_t seed;
    int64_t round;
    int32_t layers, heads;
};

// A thread per slot: the identity dest (the round marks its merges on it)
// and, for the alternating and sequential partitions, in_a of the middle
// slots (1: source, 0: destination). The random partition shuffles per
// chunk in csm_partition_kernel (a thread per chunk writing its slots one
// after another was 26 us of run AB's 32K call).
__global__ void csm_init_kernel(int32_t *dest, uint8_t *in_a, const int32_t *act,
                                const int32_t *T, csm_params p, int32_t cap)
{
    const int32_t lh = blockIdx.y, t = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || t >= T[lh])
        return;
    const size_t row = (size_t)lh * cap + t;
    dest[row] = t;
    const int32_t end = T[lh] - p.recent;
    if (p.partition == CKV_CSM_RANDOM || t < p.sinks || t >= end)
        return;
    const int32_t o = (t - p.sinks) % p.C, c0 = t - o;
    const int32_t L = end - c0 < p.C ? end - c0 : p.C;
    in_a[row] = p.partition == CKV_CSM_ALTERNATING ? o % 2 == 0 : o < (L + 1) / 2;
}

// The random partition, one thread per chunk: in_a[slot] = 1 for sources,
// 0 for destinations.
__global__ void csm_partition_kernel(uint8_t *in_a, int32_t *perm, const int32_t *act,
                                     const int32_t *T, csm_params p, int32_t cap)
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
    const int32_t l = lh / p.heads, h = lh % p.heads;
    const uint64_t idx = (((uint64_t)p.round * (uint64_t)p.layers + (uint64_t)l) *
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

// csm_best_kernel: one team of 16 lanes (half a warp) per (list, chunk,
// tile of up to CSM_TILE sources taken in the chunk's slot order). The team
// streams the chunk's destinations in slot order, CSM_TILE at a time; per
// destination tile it stages both tiles' keys in shared memory CSM_SLAB
// elements at a time and each lane sums 4 sources x 4 destinations (16
// independent accumulators; each pair is still one thread's sum in index
// order); then lanes 0..CSM_TILE-1 scan their source's row of cosines in
// destination order exactly as a walk over the chunk would.
//
// Each term is one fused multiply-add, and still the CPU's: keys are fp32
// or bf16, so a product of two has at most 48 significant bits and is
// exact in double, and rounding acc + a*b once is rounding acc + (a*b)
// after an exact multiply (the separate multiply and add issued twice the
// FP64 instructions, 152M of the 463M of run EF's 32K call).
//
// Keys are staged as double: converted once per staged element (F2F.F64.F32
// issues at 16/clk/SM on sm_90, a quarter of the DMUL/DADD rate), where
// float staging would convert in the inner loop. A lane loads 16-byte pieces
// of the rows (8 bf16 or 4 floats; element by element where rows are not
// 16-byte aligned). Rows of CSM_ROW doubles are 16-byte aligned, so the
// products read two elements of a row at once, and the rows one such load
// reads (4 sources or 4 destinations of a team) fall in distinct banks.
// What bounds the walk is shared memory: a 16-byte load is served a
// quarter warp at a time, so its cost is the bytes the lanes ask for,
// duplicates included. A warp of one tile, 2 x 4 pairs a lane, asked 6
// doubles for 8 pairs (run EH: 53% of its stalls on shared memory, 126M
// wavefronts for 238M instructions); a team of 16 lanes, 4 x 4 pairs a
// lane, asks 8 for 16 (run EJ: the 8B's decode-time call at 32K 1.53 ->
// 1.40 ms). The cosines reuse the slab's shared memory once the products
// are done: 5 KB a team for any head_dim.
#define CSM_TILE 16
#define CSM_SLAB 16
#define CSM_ROW (CSM_SLAB + 2)
#define CSM_WARPS 4
#define CSM_TEAMS (2 * CSM_WARPS)

// Source tiles per chunk: ceil(C/32) hold the ceil(C/2) sources of a full
// chunk.
__host__ __device__ static inline int32_t csm_tiles(int32_t C)
{
    return (C + 2 * CSM_TILE - 1) / (2 * CSM_TILE);
}

struct __align__(16) csm_team_smem {
    union {
        double key[2 * CSM_TILE][CSM_ROW];  // the sources' slab, then the destinations'
        double sim[CSM_TILE][CSM_TILE + 1];
    };
    double na[CSM_TILE], nb[CSM_TILE];  // norms of the sources and the staged destinations
    int32_t src[CSM_TILE], dst[CSM_TILE];
};

// A 16-byte piece of a row: 16 / sizeof(Elem) elements; a slab's 2 CSM_TILE
// rows over the team's 16 lanes.
template <typename Elem>
struct csm_piece {
    static constexpr int N = 16 / sizeof(Elem);
    static constexpr int PER_ROW = CSM_SLAB / N;
    static constexpr int PER_LANE = 2 * CSM_TILE * PER_ROW / 16;
};

// One slab's products added to the lane's sums: sources sg + 4h (h < NH),
// destinations dg + 4q (q < NQ). NH and NQ follow the tile's counts, so a
// small chunk (C = 2: one pair a team) does not issue a full tile's work.
// Elements past the head dimension are staged as zeros and add exact zeros.
template <int NH, int NQ>
__device__ static void csm_slab_dots(const csm_team_smem *w, int32_t sg, int32_t dg,
                                     double (&acc)[4][4])
{
#pragma unroll
    for (int32_t i = 0; i < CSM_SLAB; i += 2) {
        double2 b[NQ];
#pragma unroll
        for (int32_t q = 0; q < NQ; q++)
            b[q] = *reinterpret_cast<const double2 *>(&w->key[CSM_TILE + dg + 4 * q][i]);
#pragma unroll
        for (int32_t h = 0; h < NH; h++) {
            const double2 a = *reinterpret_cast<const double2 *>(&w->key[sg + 4 * h][i]);
#pragma unroll
            for (int32_t q = 0; q < NQ; q++) {
                acc[h][q] = fma(a.x, b[q].x, acc[h][q]);
                acc[h][q] = fma(a.y, b[q].y, acc[h][q]);
            }
        }
    }
}

// A row's slab squares added to its sum, in index order.
__device__ static inline void csm_slab_norm(const double *row, double &sq)
{
#pragma unroll
    for (int32_t i = 0; i < CSM_SLAB; i += 2) {
        const double2 x = *reinterpret_cast<const double2 *>(&row[i]);
        sq = fma(x.x, x.x, sq);
        sq = fma(x.y, x.y, sq);
    }
}

// Cosines of the team's ns sources with the staged nb destinations into
// w->sim[source][destination], as the CPU computes them. The key norms come
// from the same staged slabs (lane r: source r on the team's first tile
// only, and destination r), summed in index order as the CPU sums them: a
// separate pass over the keys for the norms read the middle of the cache
// once more (0.12 ms of the 8B shape's 0.89 ms call at 8K, run Y). tm: the
// team's lanes; tl: this lane's place in the team.
template <typename Elem>
__device__ static void csm_tile_cosines(csm_team_smem *w, const Elem *k, size_t lbase,
                                        int32_t d, int32_t ns, int32_t nb, bool first,
                                        bool aligned, unsigned tm, int32_t tl)
{
    typedef csm_piece<Elem> P;
    const int32_t sg = tl >> 2, dg = tl & 3;
    const bool norm_a = first && tl < ns, norm_b = tl < nb;
    double acc[4][4] = {}, sa = 0, sb = 0;
    // Piece j of this lane: row tl % 8 + 8 (j % 4) (rows of the tiles past
    // ns or nb read as zeros), elements N (tl / 8 + 2 (j / 4)) on. The next
    // slab's pieces are loaded into registers before this slab's products,
    // so their latency overlaps the products: ncu (run V) found 72% of the
    // warps' time waiting on these loads when each slab was loaded, then
    // used.
    uint4 piece[P::PER_LANE];
    const auto load = [&](int32_t i0) {
#pragma unroll
        for (int32_t j = 0; j < P::PER_LANE; j++) {
            const int32_t r = tl % 8 + 8 * (j % 4), e0 = i0 + P::N * (tl / 8 + 2 * (j / 4));
            const bool src = r < CSM_TILE, in = src ? r < ns : r - CSM_TILE < nb;
            piece[j] = make_uint4(0, 0, 0, 0);
            if (!in || e0 >= d)
                continue;
            const Elem *row = k + (lbase + (src ? w->src[r] : w->dst[r - CSM_TILE])) * d;
            if (aligned) {
                piece[j] = __ldg(reinterpret_cast<const uint4 *>(row + e0));
            } else {
                Elem *e = reinterpret_cast<Elem *>(&piece[j]);
                for (int32_t x = 0; x < P::N && e0 + x < d; x++)
                    e[x] = row[e0 + x];
            }
        }
    };
    load(0);
    for (int32_t i0 = 0; i0 < d; i0 += CSM_SLAB) {
#pragma unroll
        for (int32_t j = 0; j < P::PER_LANE; j++) {
            const int32_t r = tl % 8 + 8 * (j % 4), c0 = P::N * (tl / 8 + 2 * (j / 4));
            const Elem *e = reinterpret_cast<const Elem *>(&piece[j]);
#pragma unroll
            for (int32_t x = 0; x < P::N; x += 2)
                *reinterpret_cast<double2 *>(&w->key[r][c0 + x]) =
                    make_double2((double)ckv_kv_get(e, x), (double)ckv_kv_get(e, x + 1));
        }
        __syncwarp(tm);
        if (i0 + CSM_SLAB < d)
            load(i0 + CSM_SLAB);
        switch ((ns + 3) / 4 * 4 + (nb + 3) / 4 - 5) {
        case 0: csm_slab_dots<1, 1>(w, sg, dg, acc); break;
        case 1: csm_slab_dots<1, 2>(w, sg, dg, acc); break;
        case 2: csm_slab_dots<1, 3>(w, sg, dg, acc); break;
        case 3: csm_slab_dots<1, 4>(w, sg, dg, acc); break;
        case 4: csm_slab_dots<2, 1>(w, sg, dg, acc); break;
        case 5: csm_slab_dots<2, 2>(w, sg, dg, acc); break;
        case 6: csm_slab_dots<2, 3>(w, sg, dg, acc); break;
        case 7: csm_slab_dots<2, 4>(w, sg, dg, acc); break;
        case 8: csm_slab_dots<3, 1>(w, sg, dg, acc); break;
        case 9: csm_slab_dots<3, 2>(w, sg, dg, acc); break;
        case 10: csm_slab_dots<3, 3>(w, sg, dg, acc); break;
        case 11: csm_slab_dots<3, 4>(w, sg, dg, acc); break;
        case 12: csm_slab_dots<4, 1>(w, sg, dg, acc); break;
        case 13: csm_slab_dots<4, 2>(w, sg, dg, acc); break;
        case 14: csm_slab_dots<4, 3>(w, sg, dg, acc); break;
        default: csm_slab_dots<4, 4>(w, sg, dg, acc); break;
        }
        if (norm_a)
            csm_slab_norm(w->key[tl], sa);
        if (norm_b)
            csm_slab_norm(w->key[CSM_TILE + tl], sb);
        __syncwarp(tm);
    }
    if (norm_a)
        w->na[tl] = sqrt(sa);
    if (norm_b)
        w->nb[tl] = sqrt(sb);
    __syncwarp(tm);
#pragma unroll
    for (int32_t h = 0; h < 4; h++) {
        const int32_t s = sg + 4 * h;
        if (s >= ns)
            continue;
        const double na = w->na[s];
#pragma unroll
        for (int32_t q = 0; q < 4; q++) {
            const int32_t j = dg + 4 * q;
            if (j >= nb)
                continue;
            const double nbj = w->nb[j];
            w->sim[s][j] =
                na >= 1e-30 && nbj >= 1e-30 ? __ddiv_rn(acc[h][q], __dmul_rn(na, nbj)) : 0.0;
        }
    }
}

// The slots [w0, w0 + 32) of a chunk of L slots that hold `want` (1:
// sources, 0: destinations), as a mask over the 32, two slots a lane
// (tl and tl + 16).
__device__ static inline unsigned csm_team_ballot(const uint8_t *A, int32_t w0, int32_t L,
                                                  uint8_t want, unsigned tm, int32_t tl,
                                                  int32_t shift)
{
    const bool lo = w0 + tl < L && A[w0 + tl] == want;
    const bool hi = w0 + 16 + tl < L && A[w0 + 16 + tl] == want;
    const unsigned ml = (__ballot_sync(tm, lo) >> shift) & 0xffffu;
    const unsigned mh = (__ballot_sync(tm, hi) >> shift) & 0xffffu;
    return ml | mh << 16;
}

// Each source's best partner in its chunk and its score (the sort key, at
// the candidate's compacted position). Ties keep the lowest slot.
template <typename Elem>
__global__ void __launch_bounds__(CSM_WARPS * 32, 4)
    csm_best_kernel(const Elem *k, const uint8_t *in_a, double *key,
                    int32_t *ival, int32_t *partner, double *gap, const int32_t *act,
                    const int32_t *T, csm_params p, int32_t cap, int32_t d)
{
    __shared__ csm_team_smem smem[CSM_TEAMS];
    const int32_t lh = blockIdx.y, team = threadIdx.x >> 4, tl = threadIdx.x & 15;
    const int32_t shift = 16 * (team & 1);
    const unsigned tm = 0xffffu << shift;
    csm_team_smem *w = &smem[team];
    if (!act[lh])
        return;
    const int32_t tiles = csm_tiles(p.C);
    const int64_t tid = (int64_t)blockIdx.x * CSM_TEAMS + team;
    const int64_t chunk = tid / tiles;
    const int32_t t0 = (int32_t)(tid % tiles) * CSM_TILE, end = T[lh] - p.recent;
    const int64_t c0 = p.sinks + chunk * p.C;
    if (c0 >= end)
        return;
    const int32_t L = end - c0 < p.C ? (int32_t)(end - c0) : p.C;
    const size_t lbase = (size_t)lh * cap;
    const bool aligned = d * sizeof(Elem) % 16 == 0 && (uintptr_t)k % 16 == 0;
    const uint8_t *A = in_a + lbase + c0;
    // The sources of rank t0 .. t0 + CSM_TILE - 1 among the chunk's A slots.
    int32_t seen = 0;
    for (int32_t w0 = 0; w0 < L && seen < t0 + CSM_TILE; w0 += 32) {
        const unsigned m = csm_team_ballot(A, w0, L, 1, tm, tl, shift);
#pragma unroll
        for (int32_t e = 0; e < 2; e++) {
            const int32_t o = tl + 16 * e, r = seen + __popc(m & ((1u << o) - 1)) - t0;
            if (m >> o & 1 && r >= 0 && r < CSM_TILE)
                w->src[r] = (int32_t)c0 + w0 + o;
        }
        seen += __popc(m);
    }
    const int32_t ns = seen - t0 < CSM_TILE ? seen - t0 : CSM_TILE;
    if (ns <= 0)
        return;
    __syncwarp(tm);
    int32_t best = -1;
    double bs = 0, second = -INFINITY;
    bool first = true;
    for (int32_t w0 = 0; w0 < L; w0 += 32) {
        const unsigned m = csm_team_ballot(A, w0, L, 0, tm, tl, shift);
        const int32_t nB = __popc(m);
        for (int32_t b0 = 0; b0 < nB; b0 += CSM_TILE) {
#pragma unroll
            for (int32_t e = 0; e < 2; e++) {
                const int32_t o = tl + 16 * e, r = __popc(m & ((1u << o) - 1));
                if (m >> o & 1 && r >= b0 && r < b0 + CSM_TILE)
                    w->dst[r - b0] = (int32_t)c0 + w0 + o;
            }
            __syncwarp(tm);
            const int32_t nb = nB - b0 < CSM_TILE ? nB - b0 : CSM_TILE;
            csm_tile_cosines(w, k, lbase, d, ns, nb, first, aligned, tm, tl);
            first = false;
            __syncwarp(tm);
            if (tl < ns)
                for (int32_t j = 0; j < nb; j++) {
                    const double sim = w->sim[tl][j];
                    if (best < 0 || sim > bs) {
                        if (best >= 0)
                            second = bs;
                        best = w->dst[j];
                        bs = sim;
                    } else if (sim > second) {
                        second = sim;
                    }
                }
            __syncwarp(tm);
        }
    }
    if (tl >= ns)
        return;
    // The candidates go to the sort compacted, in slot order: a chunk's
    // (C + 1) / 2 sources after the previous chunks'. (The whole middle, a
    // destination's key -inf, doubled the sort: 0.28 ms of run AA's 32K call.)
    const size_t ra = lbase + w->src[tl];
    const size_t ci = lbase + p.sinks + chunk * ((p.C + 1) / 2) + t0 + tl;
    ival[ci] = w->src[tl];
    key[ci] = best >= 0 ? bs : -INFINITY;
    if (best < 0)
        return;
    partner[ra] = best;
    gap[ra] = bs - second;
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
    ckv_gpu_cache *c = x->c;
    csm_params cp;
    cp.sinks = (int32_t)ckv_policy_param(p, "sinks", 0);
    cp.recent = (int32_t)ckv_policy_param(p, "recent", 0);
    cp.C = (int32_t)ckv_policy_param(p, "chunk", 2);
    cp.partition = (int32_t)ckv_policy_param(p, "partition", 0);
    cp.seed = (uint64_t)ckv_policy_param(p, "seed", 0);
    cp.layers = c->n_layer;
    cp.heads = c->n_head_kv;
    const int64_t r_init = ckv_policy_param(p, "r_init", 0), r_step = ckv_policy_param(p, "r_step", 0),
                  r_min = ckv_policy_param(p, "r_min", 0);
    const ckv_csm_schedule schedule = (ckv_csm_schedule)ckv_policy_param(p, "schedule", 0);
    int32_t *act = ckv_pol_h(x, PLAN_ACT), *T = ckv_pol_h(x, PLAN_T);
    int32_t *sb = ckv_pol_h(x, PLAN_SEG_B), *se = ckv_pol_h(x, PLAN_SEG_E);
    int32_t *m_of = ckv_pol_h(x, PLAN_X), *nc_of = ckv_pol_h(x, PLAN_Y);
    ckv_gpu_policy_ws *w = x->ws;
    for (;;) {
        const int64_t rate = ckv_csm_rate(c->round, r_init, r_step, r_min, schedule);
        bool any = false;
        int32_t max_t = 0, max_chunks = 0, max_m = 0;
        for (int32_t lh = 0; lh < x->lists; lh++) {
            T[lh] = c->len_h[lh];
            // Candidates: (L + 1) / 2 sources a chunk of L >= 2 slots.
            const int32_t mid = T[lh] - cp.recent - cp.sinks;
            int32_t nc = 0, chunks = 0;
            if (T[lh] > budget && mid > 0) {
                const int32_t rest = mid % cp.C;
                chunks = mid / cp.C + (rest > 0);
                nc = mid / cp.C * ((cp.C + 1) / 2) + (rest >= 2 ? (rest + 1) / 2 : 0);
            }
            act[lh] = T[lh] > budget && nc > 0;
            m_of[lh] = act[lh] ? (int32_t)ckv_csm_merges(rate, nc, T[lh] - budget) : 0;
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
        cp.round = c->round;
        ckv_status st = ckv_pol_upload_plan(x, err);
        if (st)
            return st;
        csm_init_kernel<<<dim3(ckv_pol_blocks(max_t, 256), x->lists), 256, 0, x->s>>>(
            w->dest, w->in_a, x->act, x->T, cp, x->cap);
        CKV_CUDA_LAUNCHED();
        if (cp.partition == CKV_CSM_RANDOM) {
            csm_partition_kernel<<<dim3(ckv_pol_blocks(max_chunks, 64), x->lists), 64, 0, x->s>>>(
                w->in_a, w->perm, x->act, x->T, cp, x->cap);
            CKV_CUDA_LAUNCHED();
        }
        const dim3 grid(ckv_pol_blocks((int64_t)max_chunks * csm_tiles(cp.C), CSM_TEAMS),
                        x->lists);
        ckv_pol_kv(c, [&](auto *k, auto *) {
            csm_best_kernel<<<grid, CSM_WARPS * 32, 0, x->s>>>(
                k, w->in_a, w->key, w->ival, w->partner, w->gap, x->act, x->T, cp, x->cap, x->d);
        });
        CKV_CUDA_LAUNCHED();
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
        c->round++;
    }
    return CKV_OK;
}
