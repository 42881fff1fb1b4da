// Prefill attention on tensor cores (FlashAttention-2 in form): a block of 4
// warps (8 in the Wg8 form) takes 64 (128) query rows of one query head and one
// range of its KV head's list; each warp owns 16 rows. Blocks go heaviest
// first: the last rows see the most entries. Key and value tiles go through
// shared memory in stages: the copies of the next tiles are in flight while
// the current one is computed (cp.async by every thread; in Wg8 the TMA,
// started by a producer warp). Per tile a warp computes S = Q K^T (fp32
// accumulate), masks it (range, causal, rows past n) where the tile crosses a
// row's end, adds log(deg), keeps an online softmax per row and accumulates
// O += P V, again on tensor cores. The partials go out in attention_partial's
// layout, so cuda_attention.cu's merge is unchanged. Launched with programmatic
// dependent launch (cuda_pdl.cuh); it waits before reading anything. The
// queries, pre-scaled and rounded once, stay in registers as mma A fragments.
//
// Three forms of the products (a Form below): Tf32 for fp32 lists; for
// bf16 lists Wg where the device runs this build's sm_90a code
// (ckv_cuda_wgmma), else Bf16:
//  - fp32 lists, Tf32: m16n8k8 TF32 mma, fragments loaded from shared
//    memory as they are: the mma takes a .tf32 operand's upper 19 bits, so
//    keys and values are truncated to TF32 (relative error below 2^-10,
//    twice the rounding's; tests/gpu/parity.c counts it; the errors
//    measured on the H200, run R, 3.4e-4 .. 6.1e-4, are those of
//    truncation); q and p are rounded to TF32.
//  - bf16 lists, Bf16: m16n8k16 bf16 mma, fragments read by ldmatrix. Keys
//    and values are exact; q (scaled) and p are rounded to bf16, as the
//    GEMMs' inputs are (relative 2^-9): the precision of SDPA's bf16
//    kernels, at twice TF32's rate and an eighth of its shared-memory load
//    instructions per product. The TF32 form over bf16 tiles had run at
//    fp32 tiles' speed (run AL), bound by its 4-byte fragment loads.
//  - bf16 lists, Wg: Hopper's warpgroup MMA, the block's 4 warps one
//    warpgroup, tiles of 64 entries (Wg4); for ranges of 2,048 entries or
//    more two warpgroups over tiles of 128, fed by a third (Wg8). The same
//    roundings as Bf16, products summed in another order (runs CG, CI:
//    27-39% less time at 16K).
//
// Scores are kept in log2 units (q pre-multiplied by scale * log2 e, the
// bias as log2(deg)) so that the softmax takes exp2; the partial max goes
// out times ln 2.
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "cuda.h"
#include "cuda_async_copy.cuh"
#include "cuda_attention_prefill.h"
#include "cuda_bf16.cuh"
#include "cuda_check.h"
#include "cuda_mma.cuh"
#include "cuda_pdl.cuh"
#include "cuda_segments.cuh"
#include "cuda_tma.cuh"
#include "cuda_wgmma.cuh"

namespace {

constexpr int WROWS = 16;  // query rows per warp: the m of the mma
static_assert(4 * WROWS == CKV_PREFILL_TC_ROWS, "the planner counts 4-warp blocks");
// Tile rows are HD elements and 16 bytes apart, so a row is a multiple of
// 16 bytes plus 16, every copy's destination is 16-byte aligned (as
// cp.async and ldmatrix need), and row r starts 4 banks after row r - 1 (HD
// is a multiple of 32 elements). TF32's K fragment loads (lane reads key
// nt*8 + g, dimension k*8 + t [+ 4]) hit bank 4g + t, its V loads (key
// kk*8 + 2t [+ 1], dimension nd*8 + g) bank 8t + g (+ 4): 32 distinct banks
// each. An ldmatrix reads 8 rows' 16 bytes at a time: banks 4r .. 4r + 3,
// distinct. The 16-byte copies of a tile row cover 16 consecutive bytes per
// lane, 8 lanes a contiguous 128 bytes: no conflict.
template <typename T>
constexpr int PAD = 16 / (int)sizeof(T);

// The shared memory of one block: S stages of B-entry tiles of keys, of
// values (in the cache's type T) and of log2(deg). ROW: bytes between tile
// rows (copy_rows' stride) for entries a multiple of PERIOD apart;
// first(j, c): entry j's 16-byte piece c; ALIGN: the alignment the tiles
// start on.
template <int HD, typename T, int S, int B>
struct Padded {
    static constexpr int ROW = (HD + PAD<T>) * (int)sizeof(T), ALIGN = 16, PERIOD = 1;
    T k[S][B][HD + PAD<T>];
    T v[S][B][HD + PAD<T>];
    float l[S][B];
    static __device__ __forceinline__ uint32_t first(int j, int c)
    {
        return (uint32_t)(j * ROW + c * 16);
    }
};

// bf16 tiles for wgmma (cuda_wgmma.cuh): HD / 64 swizzled blocks of B rows
// of 64 dimensions each. Entry j's piece c is in block c / 8; entries 8
// apart are 1024 bytes apart in it (the swizzle's period), so entries a
// multiple of 8 apart are 128 bytes an entry apart. The 8
// lanes that copy one entry's 128 bytes of a block write them all: no
// conflict.
template <int HD, int S, int B>
struct Swizzled {
    static constexpr int ROW = 128, ALIGN = 1024, PERIOD = 8;
    ckv_bf16 k[S][HD / 64][B][64];
    ckv_bf16 v[S][HD / 64][B][64];
    float l[S][B];
    static __device__ __forceinline__ uint32_t first(int j, int c)
    {
        return (uint32_t)(c / 8 * B * 128) + ckv_swizzle128(j, c % 8);
    }
};

// The same tiles filled by a producer warp (Fed forms): the TMA writes
// stage s's keys and values, the producer its log2(deg) and whether any
// is not 0 (bias); full[s] completes once they have landed (two arrivals:
// the copies' and the degrees'), empty[s] once each computing warp is done
// with the stage.
template <int HD, int S, int B>
struct Fed : Swizzled<HD, S, B> {
    static_assert(Fed::ROW == 128 && Fed::PERIOD == 8, "what the TMA's 128-byte swizzle writes");
    uint64_t full[S], empty[S];
    int32_t bias[S];
};

// The keys and log-degrees of tiles laid out as L, without its values: the
// score pass's (its products read the keys as the partial pass's do).
template <typename L>
struct Keys {
    static constexpr int ROW = L::ROW, ALIGN = L::ALIGN, PERIOD = L::PERIOD;
    decltype(L::k) k;
    decltype(L::l) l;
    static __device__ __forceinline__ uint32_t first(int j, int c) { return L::first(j, c); }
};

struct PArgs {
    const float *q;
    int32_t q_stride, n, H, KV;  // n: all rows of the call
    ckv_k_kv_layer c;
    ckv_k_segments sg;  // tab NULL: every row's cache is c
    float qscale;  // scale * log2 e
    bool bias;
    int32_t split_len;
    float *part_o, *part_ml;
    // One range (splits 1): the results instead, exactly as the merge
    // would write them (see ckv_attention_prefill); else all NULL.
    float *out32;
    ckv_bf16 *out16;
    float *ml;
};

// Where a block of BQ query rows sits, for the partial pass and the score
// pass alike: its segment's cache (sg) and rows from `base`, n of them, or
// the call's; row i of them sees the first L0 + i + 1 entries (L0 =
// len0[h]). Blocks go heaviest first (the last rows see the most entries).
// The block's range ends where its last row stops seeing entries; r0, r1:
// the lane's two rows (g and g + 8 of warp's 16, from wrow), and e0, e1
// where each stops seeing entries of the range (0: a row past n). SEGS:
// the call may have segments (the score pass's never has: without the
// lookup it keeps under 128 registers, 4 blocks an SM).
struct Place {
    ckv_k_kv_layer c;
    int base, n, L0, t_begin, t_end, wrow, r0, r1, e0, e1;
};
template <int BQ, bool SEGS>
__device__ __forceinline__ Place place(const PArgs &a, int h, int split, int warp, int g)
{
    int x = gridDim.x - 1 - blockIdx.x, base = 0, sgi = 0;
    if (SEGS && a.sg.tab) {
        sgi = ckv_segment_of(a.sg.tile, a.sg.n, x);
        base = a.sg.row[sgi];
        x -= a.sg.tile[sgi];
    }
    const ckv_k_kv_layer c = SEGS && a.sg.tab ? a.sg.tab[sgi] : a.c;
    const int n = SEGS && a.sg.tab ? a.sg.row[sgi + 1] - base : a.n, L0 = c.len0[h];
    const int row0 = x * BQ, i_last = min(n, row0 + BQ) - 1;
    const int t_begin = split * a.split_len;
    const int t_end = min(t_begin + a.split_len, L0 + i_last + 1);
    const int wrow = row0 + warp * WROWS, r0 = wrow + g, r1 = r0 + 8;
    const int e0 = r0 < n ? min(t_end, L0 + r0 + 1) : 0;
    const int e1 = r1 < n ? min(t_end, L0 + r1 + 1) : 0;
    return {c, base, n, L0, t_begin, t_end, wrow, r0, r1, e0, e1};
}

// fp32 rounded to the nearest TF32 (10-bit mantissa, ties away from zero),
// as the bits the mma reads.
__device__ __forceinline__ uint32_t tf32_bits(float x)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// d += A B for one m16n8k8 TF32 step.
__device__ __forceinline__ void mma_tf32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// A Form holds the cache's element type T, the block's warps NW (16 query
// rows each), the tile's entries BKV, the tiles in shared memory (Tiles;
// STAGES: the one computed and those landing), the blocks an SM its
// registers must allow (blocks), whether the softmax skips work that
// leaves the same bits (SKIPS: the mask pass of a tile no row ends in and
// whose degrees are 1; the rescale when no max moved), whether S starts
// from a tile's bias instead of adding it after the products (BIAS_FIRST), whether its
// products take a warpgroup (WARPGROUP), whether a producer warpgroup fills
// the tiles (FED; else every thread copies its share), how many tiles P V
// lags S (LAG)
// and the products over a tile:
//   load_q  the lane's A fragments of its rows g and g + 8 (q0, q1: NULL
//           for a row past n, which is zero);
//   scores  S of the tile's NT 8-key column tiles added to S, in C
//           fragments (the wgmma form: to 0 unless `add`, S's bias);
//   wait_s  until S is done;
//   exp2    2^x (x <= 0 or -inf);
//   put_p   column tile nt's four probabilities into P, rounded as the mma
//           will read them, and x rounded alike (the sums take it);
//   pv      O += P V over the tile, O in C fragments of HD / 8 columns;
//   wait_pv until P V is done;
//   repack  (LAG 1) P from the rounded probabilities left in S.
//
// The products of Tf32 and Bf16 are done when they return: nothing to wait
// for, and P V follows its tile's softmax (LAG 0).
struct Sync {
    static constexpr int NW = 4;
    static constexpr bool FED = false;
    static constexpr bool BIAS_FIRST = false;
    static constexpr int LAG = 0;
    static constexpr bool WARPGROUP = false;
    template <typename P, int R>
    static __device__ __forceinline__ void repack(P &, const float (&)[R][4])
    {
    }
    template <int N, int R>
    static __device__ __forceinline__ void wait_s(float (&)[R][4])
    {
    }
    template <int R, typename P>
    static __device__ __forceinline__ void wait_pv(float (&)[R][4], P &)
    {
    }
};

// Tf32 (fragments of m16n8k8 .tf32: A a0 (g, t), a1 (g + 8, t), a2 (g,
// t + 4), a3 (g + 8, t + 4); B b0 (k t, n g), b1 (k t + 4, n g)). P = exp(S)
// comes out in the C layout, which is not the A layout P V needs. Instead
// of a trip through shared memory, the 8 keys of each k-step of P V are
// taken in a permuted order: A column t stands for key 2t and column t + 4
// for key 2t + 1, and B row k the same key. A sum over k does not depend on
// its order, and with it the lane's own C values are its A fragment: (a0,
// a1, a2, a3) = (c0, c2, c1, c3), and b0, b1 are the values of keys 2t and
// 2t + 1.
struct Tf32 : Sync {
    using T = float;
    static constexpr int BKV = 32, NT = BKV / 8;
    static constexpr int STAGES = 2;  // what 3 blocks of fp32 tiles an SM leave room for
    static constexpr bool SKIPS = false;  // at its 168 registers it spilled with them
    static constexpr int blocks(int hd) { return hd == 128 ? 3 : 4; }
    template <int HD>
    using Tiles = Padded<HD, T, STAGES, BKV>;
    template <int HD>
    using Q = uint32_t[HD / 8][4];
    using P = uint32_t[NT][4];

    template <int HD>
    static __device__ __forceinline__ void load_q(Q<HD> &qa, const float *q0, const float *q1,
                                                  float qs, int t)
    {
#pragma unroll
        for (int k = 0; k < HD / 8; k++) {
            const int d = k * 8 + t;
            qa[k][0] = tf32_bits(q0 ? q0[d] * qs : 0.0f);
            qa[k][1] = tf32_bits(q1 ? q1[d] * qs : 0.0f);
            qa[k][2] = tf32_bits(q0 ? q0[d + 4] * qs : 0.0f);
            qa[k][3] = tf32_bits(q1 ? q1[d + 4] * qs : 0.0f);
        }
    }
    template <int HD, typename TL>
    static __device__ __forceinline__ void scores(float (&s)[NT][4], const Q<HD> &qa,
                                                  const TL &sm, int st, int lane, bool)
    {
        const T(*ks)[HD + PAD<T>] = sm.k[st];
        const int g = lane / 4, t = lane % 4;
#pragma unroll
        for (int k = 0; k < HD / 8; k++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                mma_tf32(s[nt], qa[k][0], qa[k][1], qa[k][2], qa[k][3],
                         __float_as_uint(ks[nt * 8 + g][k * 8 + t]),
                         __float_as_uint(ks[nt * 8 + g][k * 8 + t + 4]));
    }
    static __device__ __forceinline__ float exp2(float x)
    {
        return exp2f(x);
    }
    static __device__ __forceinline__ void put_p(P &p, int nt, float (&x)[4])
    {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            p[nt][i] = tf32_bits(x[i]);
            x[i] = __uint_as_float(p[nt][i]);
        }
    }
    template <int HD>
    static __device__ __forceinline__ void pv(float (&o)[HD / 8][4], const P &p,
                                              const Tiles<HD> &sm, int st, int lane)
    {
        const T(*vs)[HD + PAD<T>] = sm.v[st];
        const int g = lane / 4, t = lane % 4;
#pragma unroll
        for (int kk = 0; kk < NT; kk++)
#pragma unroll
            for (int nd = 0; nd < HD / 8; nd++)
                mma_tf32(o[nd], p[kk][0], p[kk][2], p[kk][1], p[kk][3],
                         __float_as_uint(vs[kk * 8 + 2 * t][nd * 8 + g]),
                         __float_as_uint(vs[kk * 8 + 2 * t + 1][nd * 8 + g]));
    }
};

// Bf16 (fragments in cuda_mma.cuh). S: B of k-step k and column tile nt is
// key nt*8 + g's dimensions k*16 + 2t.. and + 8..: rows of the key tile,
// one ldmatrix.x4 for two column tiles. P V: the C fragments of column
// tiles 2kk and 2kk + 1 are, as bf16 pairs, exactly the A fragment of
// k-step kk (keys 16 kk ..); B is values' columns, read transposed
// (ldmatrix .trans), again two column tiles an instruction.
struct Bf16 : Sync {
    using T = ckv_bf16;
    static constexpr int BKV = 32, NT = BKV / 8;
    static constexpr int STAGES = 3;
    static constexpr bool SKIPS = true;
    static constexpr int blocks(int hd) { return hd == 128 ? 3 : 4; }
    template <int HD>
    using Tiles = Padded<HD, T, STAGES, BKV>;
    template <int HD>
    using Q = uint32_t[HD / 16][4];
    using P = uint32_t[NT][2];

    // q[d], q[d + 1] scaled, rounded, packed; 0 for a row past n.
    static __device__ __forceinline__ uint32_t q_pair(const float *q, int d, float qs)
    {
        if (!q)
            return 0;
        const float2 x = *reinterpret_cast<const float2 *>(q + d);
        return ckv_pack_bf16(ckv_to_bf16(x.x * qs), ckv_to_bf16(x.y * qs));
    }
    template <int HD>
    static __device__ __forceinline__ void load_q(Q<HD> &qa, const float *q0, const float *q1,
                                                  float qs, int t)
    {
#pragma unroll
        for (int k = 0; k < HD / 16; k++) {
            const int d = k * 16 + 2 * t;
            qa[k][0] = q_pair(q0, d, qs);
            qa[k][1] = q_pair(q1, d, qs);
            qa[k][2] = q_pair(q0, d + 8, qs);
            qa[k][3] = q_pair(q1, d + 8, qs);
        }
    }
    // Lane l addresses row l % 8 of matrix l / 8: for S, matrix m is keys
    // (m / 2) * 8 .. and dimensions (m % 2) * 8 .. of the 16 x 16 block (b0,
    // b1 of tile 2np, then of 2np + 1); for P V, keys (m % 2) * 8 .. and
    // dimensions (m / 2) * 8 .. (b0, b1 of column tile 2dp, then 2dp + 1).
    template <int HD, typename TL>
    static __device__ __forceinline__ void scores(float (&s)[NT][4], const Q<HD> &qa,
                                                  const TL &sm, int st, int lane, bool)
    {
        const T(*ks)[HD + PAD<T>] = sm.k[st];
        const int m = lane / 8, r = (m / 2) * 8 + lane % 8, c = (m % 2) * 8;
#pragma unroll
        for (int k = 0; k < HD / 16; k++)
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                uint32_t b[4];
                ckv_ldmatrix_x4(b, &ks[np * 16 + r][k * 16 + c]);
                ckv_mma_bf16(s[2 * np], qa[k][0], qa[k][1], qa[k][2], qa[k][3], b[0], b[1]);
                ckv_mma_bf16(s[2 * np + 1], qa[k][0], qa[k][1], qa[k][2], qa[k][3], b[2], b[3]);
            }
    }
    // The hardware's approximate 2^x (relative error about 2^-22, far below
    // the bf16 rounding that follows; 0 for -inf): one instruction, where
    // exp2f adds range handling the probabilities do not need.
    static __device__ __forceinline__ float exp2(float x)
    {
        float y;
        asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
        return y;
    }
    // x[0], x[1] are row g's keys 2t, 2t + 1; x[2], x[3] row g + 8's. Each
    // pair rounded to nearest even by one conversion.
    template <int N>
    static __device__ __forceinline__ void put_p(uint32_t (&p)[N][2], int nt, float (&x)[4])
    {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const __nv_bfloat162 b = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);
            p[nt][i] = *reinterpret_cast<const uint32_t *>(&b);
            x[2 * i] = __uint_as_float(p[nt][i] << 16);
            x[2 * i + 1] = __uint_as_float(p[nt][i] & 0xffff0000u);
        }
    }
    template <int HD>
    static __device__ __forceinline__ void pv(float (&o)[HD / 8][4], const P &p,
                                              const Tiles<HD> &sm, int st, int lane)
    {
        const T(*vs)[HD + PAD<T>] = sm.v[st];
        const int m = lane / 8, r = (m % 2) * 8 + lane % 8, c = (m / 2) * 8;
#pragma unroll
        for (int kk = 0; kk < NT / 2; kk++)
#pragma unroll
            for (int dp = 0; dp < HD / 16; dp++) {
                uint32_t b[4];
                ckv_ldmatrix_x4_trans(b, &vs[kk * 16 + r][dp * 16 + c]);
                ckv_mma_bf16(o[2 * dp], p[2 * kk][0], p[2 * kk][1], p[2 * kk + 1][0],
                             p[2 * kk + 1][1], b[0], b[1]);
                ckv_mma_bf16(o[2 * dp + 1], p[2 * kk][0], p[2 * kk][1], p[2 * kk + 1][0],
                             p[2 * kk + 1][1], b[2], b[3]);
            }
    }
};

// Wg: bf16 lists on Hopper's warpgroup MMA (cuda_wgmma.cuh; taken when
// ckv_cuda_wgmma() says the device runs this build's sm_90a code). Each 4 warps
// of the block are one warpgroup: S = Q K^T of its 64 rows and a BKV-entry tile
// is one chain of HD / 16 asynchronous m64nBKVk16 products, P V one of BKV / 16
// m64nHDk16 products. Q and P are A from registers, in Bf16's mma fragments; K
// is B as it lies (K-major), V transposed, both from swizzled tiles. The
// accumulators have the layout of Bf16's S and O, so the softmax between the
// products is the same code. Every warp takes part in every product: a warp
// whose rows see none of a tile computes it masked instead of skipping it.
//
// The products are asynchronous: scores and pv issue them, wait_s and
// wait_pv wait. P V lags a tile (LAG 1): tile i's S is issued, then tile
// i - 1's P V, and tile i's softmax runs while P V does (FA3's overlap
// within a warpgroup); O takes its correction once P V is done. Tile
// i - 1's values stay in their stage through tile i (copy_tile).
//
// Wg4 is one warpgroup over 64-entry tiles. Wg8 is two warpgroups over
// 128-entry tiles, 128 rows, and a third warpgroup that feeds them (FA3's
// structure):
//  - Its tiles cross L2 once for twice the rows, and every cost paid once a
//    tile (the waits, the row maxima's shuffles, O's rescale) is paid half
//    as often an entry.
//  - The two take turns to issue their products (FA3's ping-pong,
//    turn_wait below), so that one's softmax runs beside the other's
//    products.
//  - One warp of the third starts each tile's copies on the TMA and writes
//    its log-degrees (produce); the stages pass between it and the
//    computing warps through mbarriers, so nothing else makes the two
//    computing warpgroups wait for each other. It keeps 24 registers and
//    gives the rest to them (240 each).
// Before the producer (ccc1b8c) every thread copied its share and the block
// met at a barrier every tile, which ended each tile's overlap of the two:
// with it, 16-22% less time at 16K and 32K (run HA; 80% of the matrix rate
// at 16K), and the form beats Wg4 from 2K at both head dims (HC: -10% and
// -2% at 2K, -18% and -6% at 4K, +7% and +9% at 1K), where before it lost
// below 8K and at head_dim 64 (GB, GD). So it takes ranges of WIDE_RANGE
// entries or more: not a short prompt nor the few new rows over a
// compressed cache, which the planner cuts into short ranges. Three stages:
// with two it ran as slowly as before the producer (HB). Its S starts from
// the bias (BIAS_FIRST): added after the products it took 28-31% more time
// with degrees in [1, 8) (GH).
template <int BKV_, int STAGES_, int NW_>
struct WgT : Bf16 {
    static constexpr int NW = NW_;
    static constexpr int BKV = BKV_, NT = BKV / 8;
    static constexpr int STAGES = STAGES_;
    static constexpr int LAG = 1;
    static constexpr bool WARPGROUP = true;
    static constexpr bool FED = NW == 8;
    static constexpr int blocks(int hd) { return NW == 8 ? 1 : hd == 128 ? 2 : 3; }
    // Wg8's bias first: added after the products it cost twice the old
    // form's (GD, GE: 255 registers, 180 bytes of spills), first 7-12% over
    // the unbiased rows (GH: 242 registers, no spills). Wg4's unbiased rows
    // lost 3.5-6% at head_dim 64 with it (GG), so it keeps the pass.
    static constexpr bool BIAS_FIRST = NW == 8;
    template <int HD>
    using Tiles = std::conditional_t<FED, Fed<HD, STAGES, BKV>, Swizzled<HD, STAGES, BKV>>;
    using P = uint32_t[NT][2];

    template <int HD, typename TL>
    static __device__ __forceinline__ void scores(float (&s)[NT][4], const Q<HD> &qa,
                                                  const TL &sm, int st, int, bool add)
    {
        const uint32_t kb = ckv_smem_addr(sm.k[st]);
        // dimensions 16k ..: block k / 4, 32 bytes a step
        auto desc = [&](int k) { return ckv_wgmma_desc(kb + k / 4 * BKV * 128 + k % 4 * 32, 16); };
        ckv_wgmma_fence();
        // A Fed form's first product without `add` only writes S (FRESH), so
        // that S needs no zeros first: about 4% less time at head_dim 64, 1-2%
        // at 128 (runs HJ, HK). Wg4 that way ran 2-6% slower at 1K (HK), so
        // its S starts from zeros.
        if (!FED || add)
            ckv_wgmma_bf16<BKV, 0>(s, qa[0], desc(0), add);
        else
            ckv_wgmma_bf16<BKV, 0, true>(s, qa[0], desc(0), 0);
#pragma unroll
        for (int k = 1; k < HD / 16; k++)
            ckv_wgmma_bf16<BKV, 0>(s, qa[k], desc(k), 1);
        ckv_wgmma_commit();
    }
    // Until S is done; N: groups issued after it that may still run.
    template <int N, int R>
    static __device__ __forceinline__ void wait_s(float (&s)[R][4])
    {
        ckv_wgmma_wait<N>();
        ckv_wgmma_hold(s);
    }
    // P from S's probabilities, which put_p rounded: their upper halves.
    static __device__ __forceinline__ void repack(P &p, const float (&s)[NT][4])
    {
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 2; i++)
                p[nt][i] = __byte_perm(__float_as_uint(s[nt][2 * i]),
                                       __float_as_uint(s[nt][2 * i + 1]), 0x7632);
    }
    // Until P V is done: O is then read, and P (an operand until then) may
    // be overwritten.
    template <int R>
    static __device__ __forceinline__ void wait_pv(float (&o)[R][4], P &p)
    {
        ckv_wgmma_wait<0>();
        ckv_wgmma_hold(o);
        ckv_wgmma_hold(p);
    }
    template <int HD>
    static __device__ __forceinline__ void pv(float (&o)[HD / 8][4], const P &p,
                                              const Tiles<HD> &sm, int st, int)
    {
        const uint32_t vb = ckv_smem_addr(sm.v[st]);
        ckv_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BKV / 16; kk++)  // keys 16kk ..: 16 rows further
            // P's own registers (column tiles 2kk, 2kk + 1), no copy: they
            // are held until wait_pv, a copy's would not be.
            ckv_wgmma_bf16<HD, 1>(o, reinterpret_cast<const uint32_t(&)[4]>(p[2 * kk]),
                                  ckv_wgmma_desc(vb + kk * 16 * 128, BKV * 128), 1);
        ckv_wgmma_commit();
    }
};
using Wg4 = WgT<64, 3, 4>;
using Wg8 = WgT<128, 3, 8>;  // 3 stages of 64 KB at head_dim 128 (2 ran 18-27% slower: HB)
constexpr int32_t WIDE_RANGE = 2048;  // the shortest range Wg8 takes (run HC)

// The ping-pong of a block of two warpgroups: warpgroup w issues a tile's
// products once the other has issued its own (barrier 1 + w; __syncthreads
// takes barrier 0). Warpgroup 1 lets warpgroup 0 go first, and warpgroup 0
// takes up that extra turn after its last tile.
__device__ __forceinline__ void turn_wait(int wg)
{
    asm volatile("bar.sync %0, 256;" ::"r"(1 + wg));
}
__device__ __forceinline__ void turn_pass(int wg)
{
    asm volatile("bar.arrive %0, 256;" ::"r"(2 - wg));
}

// Starts the copies of one tile of rows (keys or values) into the tile at
// shared address dst (laid out as L), 16 bytes each: thread i takes piece
// i % C4 of entries i / C4 + u STEP. Past the range a copy reads nothing
// (src-size 0) and fills zeros, so that masked entries multiply finite
// values; its address is entry t0's, inside the list. No registers hold the data, so the whole
// tile is in flight at once. The trip count and the copies' shared offsets
// are constants: a bf16 tile's 8 copies take about 50 instructions, where a
// loop from the thread's first entry over generic destinations took 154
// (branches, 64-bit address arithmetic, a conversion to a shared address)
// and drew a third of the bf16 form's stall samples (ncu, run BT).
template <int HD, int BKV, int NTH, typename L, typename T>
__device__ __forceinline__ void copy_rows(uint32_t dst, const T *src, int t0, int t_end)
{
    constexpr int EP = 16 / (int)sizeof(T);  // elements per 16-byte piece
    constexpr int C4 = HD / EP;              // pieces per entry
    constexpr int STEP = NTH / C4;           // entries between a thread's copies
    static_assert(NTH % C4 == 0 && BKV % STEP == 0 && STEP % L::PERIOD == 0,
                  "a thread copies one column of pieces, at offsets L::ROW an entry apart");
    const int j0 = threadIdx.x / C4, c = threadIdx.x % C4;
    // Element offsets into the list as int: a list holds fewer than 2^31
    // (ckv_gpu_cache_create_shape).
    const int first = t0 * HD + c * EP, mine = first + j0 * HD;
    const int left = t_end - t0 - j0;  // entries of the range from the thread's first
    dst += L::first(j0, c);
#pragma unroll
    for (int u = 0; u < BKV / STEP; u++) {
        const bool in = u * STEP < left;
        ckv_cp_async16(dst + u * STEP * L::ROW, src + (in ? mine + u * STEP * HD : first), in);
    }
}

// Tile st's degrees, landed raw in sm.l, as their log2 (0 past t_end or
// without the bias): thread tid < BKV takes entry t0 + tid, and gets its
// value back.
template <int BKV, typename L>
__device__ __forceinline__ float log_degrees(L &sm, int st, bool bias, int t0, int t_end)
{
    const int tid = threadIdx.x;
    float lg = 0.0f;
    if (tid < BKV)
        sm.l[st][tid] = lg = bias && t0 + tid < t_end ? log2f(sm.l[st][tid]) : 0.0f;
    return lg;
}

// S of a tile started from its log-degrees ls, for the products to add to:
// the C fragment's rows g and g + 8 of column nt * 8 + 2t + e both take
// ls[nt * 8 + 2t + e].
template <int NT>
__device__ __forceinline__ void s_from_bias(float (&s)[NT][4], const float *ls, int t)
{
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++)
            s[nt][e] = s[nt][2 + e] = ls[nt * 8 + 2 * t + e];
}

// The dynamic shared memory of tiles L: the kernel aligns their start up
// to L::ALIGN from the 16 bytes a launch guarantees.
template <typename L>
constexpr int tile_smem_bytes()
{
    return (int)sizeof(L) + L::ALIGN - 16;
}

// Starts the copies of the keys of the tile at t0 into stage st and, with
// the bias, their raw degrees (thread tid < BKV copies entry t0 + tid's; it
// takes their log2 itself once they land); nothing past t_end. base: the
// shared address of sm.
template <int HD, typename F, typename L = typename F::template Tiles<HD>,
          typename T = typename F::T>
__device__ __forceinline__ void copy_keys(L &sm, uint32_t base, int st, const T *K,
                                          const float *deg, bool bias, int t0, int t_end)
{
    constexpr int BKV = F::BKV, NTH = F::NW * 32;
    static_assert(BKV <= NTH, "a thread copies at most one degree");
    const int tid = threadIdx.x;
    if (t0 < t_end) {
        copy_rows<HD, BKV, NTH, L>(
            base + (uint32_t)(reinterpret_cast<const char *>(sm.k[st]) -
                              reinterpret_cast<const char *>(&sm)),
            K, t0, t_end);
        if (bias && tid < BKV && t0 + tid < t_end)
            ckv_cp_async4(&sm.l[st][tid], deg + t0 + tid, true);
    }
}

// Starts one group of copies: the keys and degrees of the tile at t0 into
// stage st (copy_keys), the values of the tile F::LAG tiles before it into
// that tile's stage (tile i's keys and values live in stage i % S). Tiles
// outside [t_begin, t_end) are not copied, and every call commits a group,
// so that group i holds tile i's keys and tile i - LAG's values.
template <int HD, typename F, typename L = typename F::template Tiles<HD>,
          typename T = typename F::T>
__device__ __forceinline__ void copy_tile(L &sm, uint32_t base, int st, const T *K, const T *V,
                                          const float *deg, bool bias, int t0, int t_begin,
                                          int t_end)
{
    constexpr int BKV = F::BKV, S = F::STAGES, NTH = F::NW * 32;
    const int tv = t0 - F::LAG * BKV;
    const int sv = st >= F::LAG ? st - F::LAG : st - F::LAG + S;
    copy_keys<HD, F>(sm, base, st, K, deg, bias, t0, t_end);
    if (tv >= t_begin && tv < t_end)
        copy_rows<HD, BKV, NTH, L>(base + (uint32_t)(reinterpret_cast<const char *>(sm.v[sv]) -
                                                     reinterpret_cast<const char *>(&sm)),
                                   V, tv, t_end);
    ckv_cp_async_commit();
}

// The tensor maps of a Fed form's keys and values (ckv_tma_map_rows);
// unused by the others.
struct Maps {
    CUtensorMap k, v;
};

// A Fed form's producer, one warp: tile i of [t_begin, t_end) into stage i
// % S once the computing warps are done with tile i - S there. Lane 0
// starts the copies of its keys and values (rows past the list's capacity
// land as zeros; rows of the list past t_end as they are, which the last
// tile's computing warps clear: see attention_prefill); the warp writes
// log2 of its degrees (0 past t_end, and without the bias) and whether any
// is not 0.
template <int HD, typename F, typename L>
__device__ __forceinline__ void produce(L &sm, const Maps &m, const float *deg, bool bias, int h,
                                        int t_begin, int t_end, int lane)
{
    constexpr int S = F::STAGES, BKV = F::BKV;
    uint32_t phase = 0;
    int st = 0;
    for (int t0 = t_begin, i = 0; t0 < t_end; t0 += BKV, i++) {
        if (i >= S)
            ckv_mbar_wait(ckv_smem_addr(&sm.empty[st]), phase ^ 1);
        const uint32_t full = ckv_smem_addr(&sm.full[st]);
        if (lane == 0) {
            ckv_mbar_arrive_expect(full, 2 * BKV * HD * (uint32_t)sizeof(ckv_bf16));
#pragma unroll
            for (int b = 0; b < HD / 64; b++) {
                ckv_tma_load_3d(ckv_smem_addr(sm.k[st][b]), &m.k, b * 64, t0, h, full);
                ckv_tma_load_3d(ckv_smem_addr(sm.v[st][b]), &m.v, b * 64, t0, h, full);
            }
        }
        bool any = false;
#pragma unroll
        for (int j = lane; j < BKV; j += 32) {
            const float lg = bias && t0 + j < t_end ? log2f(deg[t0 + j]) : 0.0f;
            sm.l[st][j] = lg;
            any |= lg != 0.0f;
        }
        any = __any_sync(0xffffffffu, any);
        if (lane == 0)
            sm.bias[st] = any;
        __syncwarp();
        if (lane == 0)
            ckv_mbar_arrive(full);
        phase ^= st == S - 1;
        st = st + 1 < S ? st + 1 : 0;
    }
}

// Blocks per SM the registers must allow (F::blocks): for Tf32 and Bf16 at
// HD 128, 3 blocks (168 registers; the TF32 form now with 20 bytes of
// spill stores, 681cdb6's too), at HD 64, 4 (128). Shared memory allows as
// many: at HD 128 3 x 67,840 B (fp32 tiles, 2 stages) or 3 x 52,608 B
// (bf16, 3 stages), at HD 64 4 x 35,072 B or 4 x 28,032 B. With tiles of 64
// entries the bf16 form spilled at these bounds. Wg holds S's and O's
// accumulators, Q and P at once: Wg4 2 blocks an SM at HD 128 (210
// registers; 99,072 B of 3 stages), 3 at HD 64 (161; 49,920 B); Wg8 one
// of 384 threads (168 registers each, which setmaxnreg moves to 24 for the
// producer warpgroup and 240 for the two computing ones; 198,204 B of 3
// stages at HD 128, 99,900 B at HD 64). The tiles start on L::ALIGN bytes
// (launch adds up to ALIGN - 16 bytes of room).
template <typename F>
constexpr int block_threads()
{
    return F::NW * 32 + (F::FED ? 128 : 0);
}
// A Fed form's registers a thread after setmaxnreg: the producer
// warpgroup's and the computing ones'. setmaxnreg.inc waits for registers
// the block's others have released, so the two must fit in what the launch
// allocated: a thread's share of the register file (launch bounds of one
// block an SM), rounded down to the allocation's 8; else the kernel hangs.
constexpr int PRODUCER_REGS = 24, COMPUTE_REGS = 240;

template <int HD, typename F>
__global__ void __launch_bounds__(block_threads<F>(), F::blocks(HD))
    attention_prefill(PArgs a, const __grid_constant__ Maps maps)
{
    using T = typename F::T;
    using L = typename F::template Tiles<HD>;
    constexpr int S = F::STAGES, BKV = F::BKV, NT = F::NT, BQ = F::NW * WROWS;
    // Two warpgroups take turns to issue their products (turn_wait).
    constexpr bool PINGPONG = F::WARPGROUP && F::NW == 8;
    static_assert(!F::WARPGROUP || F::NW == 4 || PINGPONG, "one or two warpgroups");
    constexpr int ND = HD / 8;  // 8-dimension column tiles of O
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sbase = (ckv_smem_addr(smem_raw) + L::ALIGN - 1) & ~(uint32_t)(L::ALIGN - 1);
    L &sm = *reinterpret_cast<L *>(smem_raw + (sbase - ckv_smem_addr(smem_raw)));
    ckv_pdl_wait();  // the lengths, keys, values and queries come from earlier kernels
    ckv_pdl_launch_dependents();

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int wg = warp / 4;
    const int qh = blockIdx.y, split = blockIdx.z, h = qh / (a.H / a.KV);
    const Place pl = place<BQ, true>(a, h, split, warp, g);
    const ckv_k_kv_layer c = pl.c;
    const int base = pl.base, n = pl.n, L0 = pl.L0, t_begin = pl.t_begin, t_end = pl.t_end;
    const int wrow = pl.wrow, r0 = pl.r0, r1 = pl.r1, e0 = pl.e0, e1 = pl.e1;
    // The entries the warp's last row sees, 0 for a warp wholly past n.
    const int w_end = wrow < n ? L0 + min(n, wrow + WROWS) : 0;
    const T *K = static_cast<const T *>(c.k) + (size_t)h * c.capacity * HD;
    const T *V = static_cast<const T *>(c.v) + (size_t)h * c.capacity * HD;
    const float *deg = c.deg + (size_t)h * c.capacity;
    const float *q = a.q + (size_t)qh * HD + (size_t)base * a.q_stride;
    const int out_row = split * a.n + base;  // row 0's place in the partials (n * splits rows)

    if constexpr (F::FED) {
        // The producer warpgroup hands its registers to the two computing
        // ones (FA3's split: 24 and 240 of the 168 a thread the block has).
        if (tid == 0) {
            for (int i = 0; i < S; i++) {
                ckv_mbar_init(ckv_smem_addr(&sm.full[i]), 2);
                ckv_mbar_init(ckv_smem_addr(&sm.empty[i]), F::NW);
            }
            ckv_mbar_init_fence();
        }
        __syncthreads();
        if (wg == F::NW / 4) {
            ckv_regs_dec<PRODUCER_REGS>();
            if (warp == F::NW)
                produce<HD, F>(sm, maps, deg, a.bias, h, t_begin, t_end, lane);
            return;
        }
        ckv_regs_inc<COMPUTE_REGS>();
    } else {
        // Tiles 0 .. S - 2 start first, and land while Q is read.
#pragma unroll
        for (int i = 0; i < S - 1; i++)
            copy_tile<HD, F>(sm, sbase, i, K, V, deg, a.bias, t_begin + i * BKV, t_begin, t_end);
    }
    typename F::template Q<HD> qa;
    F::template load_q<HD>(qa, r0 < n ? q + (size_t)r0 * a.q_stride : NULL,
                           r1 < n ? q + (size_t)r1 * a.q_stride : NULL,
                           a.qscale, t);
    // O in C fragments: o[nd] holds dimensions nd*8 + 2t, +1 of rows g, g + 8.
    float o[ND][4];
#pragma unroll
    for (int nd = 0; nd < ND; nd++)
        o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
    // Running max (log2 units; -inf until the row sees an entry) and the
    // lane's share of the running sum, for rows g and g + 8.
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    // A LAG form's probabilities of the tile before, for its P V.
    typename F::P p;

    // Group i + S - 1 starts once every warp is past tile i - 1 (and, with
    // LAG 1, past tile i - 2's P V), whose stages it overwrites, and lands
    // while tiles i .. i + S - 2 are computed.
    // A Fed form's tiles come with the parity of their stage's phase.
    int st = 0;
    uint32_t phase = 0;
    if (PINGPONG && wg == 1)
        turn_pass(wg);
    for (int t0 = t_begin; t0 < t_end;
         t0 += BKV, phase ^= st == S - 1, st = st + 1 < S ? st + 1 : 0) {
        const int prev = st ? st - 1 : S - 1;
        // The bias is read only for tiles with a degree other than 1 (log
        // 0): a prefill of a cache nothing was merged into has none, and
        // adding 0 would leave the same values.
        bool tile_bias;
        if constexpr (F::FED) {
            ckv_mbar_wait(ckv_smem_addr(&sm.full[st]), phase);
            tile_bias = sm.bias[st];
        } else {
            // this thread's group i: tile i's keys, tile i - LAG's values
            ckv_cp_async_wait<S - 2>();
            const float lg = log_degrees<BKV>(sm, st, a.bias, t0, t_end);
            if constexpr (F::WARPGROUP)  // the copies, generic writes, are read by wgmma
                ckv_fence_proxy_async();
            // Everyone's group i; the stages group i + S - 1 overwrites (tile
            // i - 1's keys, tile i - 1 - LAG's values) no longer read.
            tile_bias = __syncthreads_or(lg != 0.0f);
            copy_tile<HD, F>(sm, sbase, prev, K, V, deg, a.bias, t0 + (S - 1) * BKV, t_begin,
                             t_end);
        }
        const float *ls = sm.l[st];
        // warp-uniform: no row of this warp sees the tile (a warpgroup's
        // products take all 4 warps)
        if (!F::WARPGROUP && t0 >= w_end)
            continue;
        // A BIAS_FIRST form's S starts from the tile's bias, which the
        // products then add to; the others' from 0, and the bias is added
        // with the masks below.
        const bool bias_first = F::BIAS_FIRST && tile_bias;
        float s[NT][4];
        if (bias_first) {
            s_from_bias(s, ls, t);
        } else if constexpr (!F::FED) {  // a Fed form's first product writes S
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
        }
        if constexpr (PINGPONG)
            turn_wait(wg);
        F::template scores<HD>(s, qa, sm, st, lane, bias_first);
        // The other warpgroup's turn comes once this one's products are
        // issued, in the branch that waits for them: a barrier anywhere
        // else between the products and their wait made ptxas serialise
        // every wgmma (its warning C7514).
        if (F::LAG && t0 > t_begin) {  // tile i - 1's P V runs during this softmax
            F::template pv<HD>(o, p, sm, prev, lane);
            if constexpr (PINGPONG)
                turn_pass(wg);
            F::template wait_s<1>(s);
        } else {
            if constexpr (PINGPONG)
                turn_pass(wg);
            F::template wait_s<0>(s);
        }
        // Bias (unless it came first), and masks where the tile crosses one
        // of the lane's rows' ends (in a causal prefill only the warp's
        // diagonal tiles): without either, nothing to do. Then the tile's
        // max per row over the quad's 4 lanes.
        const bool whole = t0 + BKV <= min(e0, e1);
        if (!F::SKIPS || (tile_bias && !F::BIAS_FIRST) || !whole)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int j = nt * 8 + 2 * t + e, tt = t0 + j;
                    if constexpr (F::BIAS_FIRST) {
                        s[nt][e] = whole || tt < e0 ? s[nt][e] : -INFINITY;
                        s[nt][2 + e] = whole || tt < e1 ? s[nt][2 + e] : -INFINITY;
                    } else {
                        s[nt][e] = whole || tt < e0 ? s[nt][e] + ls[j] : -INFINITY;
                        s[nt][2 + e] = whole || tt < e1 ? s[nt][2 + e] + ls[j] : -INFINITY;
                    }
                }
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
            mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        // A row that has seen nothing yet (max still -inf) exponentiates
        // against 0, never -inf - -inf: its p and correction are 0, and its
        // l and o stay 0.
        // Where no row of the warp has a new max, every correction is 1
        // (or 0 times a zero o and l): a SKIPS form skips the rescale, which
        // leaves the same bits.
        const float base0 = mn0 == -INFINITY ? 0.0f : mn0;
        const float base1 = mn1 == -INFINITY ? 0.0f : mn1;
        const bool moved = !F::SKIPS || __any_sync(0xffffffffu, mn0 != m0 || mn1 != m1);
        float corr0 = 1.0f, corr1 = 1.0f;
        if (moved) {
            corr0 = F::exp2(m0 - base0);
            corr1 = F::exp2(m1 - base1);
            l0 *= corr0;
            l1 *= corr1;
        }
        m0 = mn0;
        m1 = mn1;
        // P rounded once as the mma reads it; the sums take the rounded
        // values, so that the output is a weighted mean of V with exactly
        // those weights.
        // A LAG form keeps them in s (already rounded) until its P V of the
        // tile before is done: P is that product's operand until then.
        typename F::P pn;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            float x[4] = {F::exp2(s[nt][0] - base0), F::exp2(s[nt][1] - base0),
                          F::exp2(s[nt][2] - base1), F::exp2(s[nt][3] - base1)};
            F::put_p(pn, nt, x);
            l0 += x[0] + x[1];
            l1 += x[2] + x[3];
            if constexpr (F::LAG)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    s[nt][i] = x[i];
        }
        F::wait_pv(o, p);
        // The warp is done with tile i - 1: every lane's reads of its stage
        // (log-degrees, bias flag) come before lane 0's arrive, whose release
        // the producer's next writes there wait for (a release orders only
        // its thread's accesses and those a barrier ordered before it).
        if constexpr (F::FED)
            if (t0 > t_begin) {
                __syncwarp();
                if (lane == 0)
                    ckv_mbar_arrive(ckv_smem_addr(&sm.empty[prev]));
            }
        if (moved)
#pragma unroll
            for (int nd = 0; nd < ND; nd++) {
                o[nd][0] *= corr0;
                o[nd][1] *= corr0;
                o[nd][2] *= corr1;
                o[nd][3] *= corr1;
            }
        if constexpr (F::LAG)
            F::repack(p, s);
        else
            F::template pv<HD>(o, pn, sm, st, lane);
    }
    if (PINGPONG && wg == 0)
        turn_wait(wg);
    // A LAG form's last P V, once its values' group (possibly the last)
    // has landed.
    if constexpr (F::LAG) {
        static_assert(F::LAG <= 1, "the stage of the last tile's values is the one before st");
        if (t_begin < t_end) {
            const int last = st ? st - 1 : S - 1;
            if constexpr (F::FED) {
                // The TMA copied the last tile's rows past t_end as the list
                // holds them, where a zero p times a NaN would be NaN: the
                // computing threads clear those values.
                const int from = t_end - (t_begin + (t_end - t_begin - 1) / BKV * BKV);
                for (int i = tid; i < (BKV - from) * HD / 8; i += F::NW * 32)
                    *reinterpret_cast<int4 *>(
                        &sm.v[last][i % (HD / 64)][from + i / (HD / 8)][i / (HD / 64) % 8 * 8]) =
                        make_int4(0, 0, 0, 0);
                ckv_fence_proxy_async();
                asm volatile("bar.sync 3, %0;" ::"n"(F::NW * 32));
            } else {
                ckv_cp_async_wait<0>();
                ckv_fence_proxy_async();
                __syncthreads();
            }
            F::template pv<HD>(o, p, sm, last, lane);
            F::wait_pv(o, p);
        }
    }

    // The row sums over the quad (the max is already quad-uniform).
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const bool direct = a.out32 || a.out16;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = half ? r1 : r0;
        if ((half ? e1 : e0) == 0)  // a row past n (a row of the call sees at least 1 entry)
            continue;
        const float l = half ? l1 : l0;
        const size_t row = ((size_t)out_row + r) * a.H + qh;
        const size_t at = row * HD + 2 * t;
#pragma unroll
        for (int nd = 0; nd < ND; nd++) {
            const float x0 = o[nd][2 * half], x1 = o[nd][2 * half + 1];
            if (!direct)
                *reinterpret_cast<float2 *>(a.part_o + at + nd * 8) = make_float2(x0, x1);
            else if (a.out32)
                *reinterpret_cast<float2 *>(a.out32 + at + nd * 8) = make_float2(x0 / l, x1 / l);
            else
                *reinterpret_cast<__nv_bfloat162 *>(a.out16 + at + nd * 8) =
                    __floats2bfloat162_rn(x0 / l, x1 / l);
        }
        if (t == 0) {
            float *ml = direct ? a.ml : a.part_ml;
            ml[row * 2] = (half ? m1 : m0) * CKV_LN2;
            ml[row * 2 + 1] = l;
        }
    }
}

// Sums of a warp's values over its 8 row groups (lanes 4 apart), scattered
// over them: v[2 nt + e] is the lane's value of column nt * 8 + 2t + e of
// its tile (a C fragment's), and lane (g, t) ends with the sums of v[R g ..
// R g + R - 1] in w (R = N / 8). Each step sends half the values to the lane
// X apart and adds the partner's share of the half it keeps: N / 2 + N / 4 +
// N / 8 shuffles and adds, where a reduction of every value over the 8
// lanes takes 3 N (at N = 16: 14 against 48).
template <int N, int X>
__device__ __forceinline__ void fold_half(const float (&v)[N], float (&w)[N / 2], int lane)
{
    const bool up = lane & X;
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
        const float keep = up ? v[N / 2 + i] : v[i], send = up ? v[i] : v[N / 2 + i];
        w[i] = keep + __shfl_xor_sync(0xffffffffu, send, X);
    }
}
template <int N>
__device__ __forceinline__ void column_sums(const float (&v)[N], float (&w)[N / 8], int lane)
{
    static_assert(N % 8 == 0, "each of the 8 row groups ends with N / 8 columns' sums");
    float a[N / 2], b[N / 4];
    fold_half<N, 16>(v, a, lane);
    fold_half<N / 2, 8>(a, b, lane);
    fold_half<N / 4, 4>(b, w, lane);
}

// The attention mass each entry receives (H2O scores) in a prefill over one
// cache that tracks them, after the partial pass and the merge: from every
// row's merged max M and sum L (ml, natural-log units) it computes the
// tiles' scores again with the partial pass's products (Tf32, Bf16 or Wg4:
// its roundings of q and of the keys), and adds 2^(s - M log2 e) / L,
// summed over the block's rows, to score[t]; the query heads of a KV group
// add into the same list. Scores must come from the products M and L came
// from: fp32 scores against TF32 sums are off by TF32's error times the
// scores' spread in every p, which then no longer sum to 1 (S starting
// from the bias, as Wg8's, where the other forms add it after the products,
// moves only fp32 roundings). Every warp computes every tile (rows that do
// not see an entry give it 0), and only the keys are copied. Per warp and
// tile the softmax's work is one add and one exponential a probability
// outside the tiles that cross a row's end, and the column sums'
// reduce-scatter: 32% less time than with the bias, 1 / L and the masks
// applied to every probability, a shuffle reduction of each column and two
// block barriers a tile (run JD, bf16, 16K, group 4, head_dim 128).
template <int HD, typename F>
__global__ void __launch_bounds__(F::NW * 32, F::blocks(HD)) attention_prefill_score(PArgs a)
{
    static_assert(!F::FED, "the score pass takes the forms whose threads copy");
    using T = typename F::T;
    using L = Keys<typename F::template Tiles<HD>>;
    constexpr int S = F::STAGES, BKV = F::BKV, NT = F::NT, BQ = F::NW * WROWS;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ float mass[2][F::NW][BKV];
    const uint32_t sbase = (ckv_smem_addr(smem_raw) + L::ALIGN - 1) & ~(uint32_t)(L::ALIGN - 1);
    L &sm = *reinterpret_cast<L *>(smem_raw + (sbase - ckv_smem_addr(smem_raw)));
    ckv_pdl_wait();  // the merged max and sum come from the kernel before
    ckv_pdl_launch_dependents();

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int qh = blockIdx.y, split = blockIdx.z, h = qh / (a.H / a.KV);
    // The partial pass's rows and range for this block (no segments).
    const Place pl = place<BQ, false>(a, h, split, warp, g);
    const ckv_k_kv_layer c = pl.c;
    const int n = pl.n, t_begin = pl.t_begin, t_end = pl.t_end;
    const int r0 = pl.r0, r1 = pl.r1, e0 = pl.e0, e1 = pl.e1;
    const T *K = static_cast<const T *>(c.k) + (size_t)h * c.capacity * HD;
    const float *deg = c.deg + (size_t)h * c.capacity;
    float *score = c.score + (size_t)h * c.capacity;
    // Row r's p = 2^(s - M log2 e) / L as one exponent, 2^(s - mm_r) with
    // mm_r = M log2 e + log2 L. Rows past n see nothing: their mm is never
    // used.
    auto mm = [&](int r) {
        const size_t at = ((size_t)r * a.H + qh) * 2;
        return r < n ? a.ml[at] * CKV_LOG2E + log2f(a.ml[at + 1]) : 0.0f;
    };
    const float mm0 = mm(r0), mm1 = mm(r1);
    // The warp's tiles before the first end of any of its rows need no mask.
    const int w_whole = __reduce_min_sync(0xffffffffu, min(e0, e1));
#pragma unroll
    for (int i = 0; i < S - 1; i++) {
        copy_keys<HD, F, L>(sm, sbase, i, K, deg, a.bias, t_begin + i * BKV, t_end);
        ckv_cp_async_commit();
    }
    typename F::template Q<HD> qa;
    const float *q = a.q + (size_t)qh * HD;
    F::template load_q<HD>(qa, r0 < n ? q + (size_t)r0 * a.q_stride : NULL,
                           r1 < n ? q + (size_t)r1 * a.q_stride : NULL, a.qscale, t);

    // A tile's column sums go into mass[i % 2] and are added to the scores
    // in the next tile, after its barrier: one barrier a tile.
    auto add_mass = [&](int i, int tb) {
        if (tid < BKV && tb + tid < t_end) {
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < F::NW; w++)
                sum += mass[i % 2][w][tid];
            atomicAdd(&score[tb + tid], sum);
        }
    };
    int i = 0;
    for (int t0 = t_begin, st = 0; t0 < t_end; t0 += BKV, st = st + 1 < S ? st + 1 : 0, i++) {
        // Tile i landed and its degrees are logs; everyone is past tile i -
        // 1, whose stage the copies of tile i + S - 1 take, and past
        // writing tile i - 1's sums and reading tile i - 2's.
        ckv_cp_async_wait<S - 2>();
        log_degrees<BKV>(sm, st, a.bias, t0, t_end);
        if constexpr (F::WARPGROUP)  // the copies, generic writes, are read by wgmma
            ckv_fence_proxy_async();
        __syncthreads();
        if (i)
            add_mass(i - 1, t0 - BKV);
        copy_keys<HD, F, L>(sm, sbase, st ? st - 1 : S - 1, K, deg, a.bias,
                            t0 + (S - 1) * BKV, t_end);
        ckv_cp_async_commit();
        // S starts from the bias (0 without one), which the products add to.
        float s[NT][4];
        s_from_bias(s, sm.l[st], t);
        F::template scores<HD>(s, qa, sm, st, lane, true);
        F::template wait_s<0>(s);
        // Column j of the tile: its two rows' probabilities (masked where
        // the tile crosses a row's end), then summed over the warp.
        float v[2 * NT];
        if (t0 + BKV <= w_whole) {
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    v[2 * nt + e] = F::exp2(s[nt][e] - mm0) + F::exp2(s[nt][2 + e] - mm1);
        } else {
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int tt = t0 + nt * 8 + 2 * t + e;
                    v[2 * nt + e] = (tt < e0 ? F::exp2(s[nt][e] - mm0) : 0.0f) +
                                    (tt < e1 ? F::exp2(s[nt][2 + e] - mm1) : 0.0f);
                }
        }
        constexpr int R = NT / 4;
        float w[R];
        column_sums(v, w, lane);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int k = R * g + r;
            mass[i % 2][warp][k / 2 * 8 + 2 * t + k % 2] = w[r];
        }
    }
    __syncthreads();
    if (i)
        add_mass(i - 1, t_begin + (i - 1) * BKV);
}

}  // namespace

template <int HD, typename F>
static ckv_status launch(const PArgs &a, int32_t splits, int32_t tiles, cudaStream_t stream,
                         ckv_error *err)
{
    using L = typename F::template Tiles<HD>;
    constexpr int BQ = F::NW * WROWS;
    const dim3 grid(a.sg.tab ? tiles : (a.n + BQ - 1) / BQ, a.H, splits);
    const int bytes = tile_smem_bytes<L>();
    Maps m = {};
    if constexpr (F::FED) {  // never segments (form_of)
        constexpr int NTH = block_threads<F>();
        static_assert(F::blocks(HD) == 1 && PRODUCER_REGS * 128 + COMPUTE_REGS * F::NW * 32 <=
                                                65536 / NTH / 8 * 8 * NTH,
                      "setmaxnreg's counts exceed the launch's registers");
        ckv_status s = ckv_tma_map_rows(&m.k, a.c.k, a.KV, a.c.capacity, HD, F::BKV, err);
        if (s == CKV_OK)
            s = ckv_tma_map_rows(&m.v, a.c.v, a.KV, a.c.capacity, HD, F::BKV, err);
        if (s != CKV_OK)
            return s;
    }
    CKV_CUDA(ckv_allow_smem(attention_prefill<HD, F>, bytes));
    CKV_CUDA(ckv_pdl_launch(attention_prefill<HD, F>, grid, block_threads<F>(), bytes, stream, a,
                            m));
    return CKV_OK;
}

template <int HD, typename F>
static ckv_status launch_score(const PArgs &a, int32_t splits, cudaStream_t stream,
                               ckv_error *err)
{
    using L = Keys<typename F::template Tiles<HD>>;
    constexpr int BQ = F::NW * WROWS;
    const dim3 grid((a.n + BQ - 1) / BQ, a.H, splits);
    const int bytes = tile_smem_bytes<L>();
    CKV_CUDA(ckv_allow_smem(attention_prefill_score<HD, F>, bytes));
    CKV_CUDA(ckv_pdl_launch(attention_prefill_score<HD, F>, grid, F::NW * 32, bytes, stream, a));
    return CKV_OK;
}

namespace {

enum class Form { TF32, MMA, WG4, WG8 };

// The one choice of form: the launch's and the reports'.
Form form_of(ckv_kv_dtype dtype, bool segments, ckv_k_attention_split split)
{
    if (dtype != CKV_KV_BF16)
        return Form::TF32;
    if (!ckv_cuda_wgmma())
        return Form::MMA;
    // Segments come cut into 4-warp blocks (CKV_PREFILL_TC_ROWS rows).
    return !segments && split.split_len >= WIDE_RANGE ? Form::WG8 : Form::WG4;
}

}  // namespace

extern "C" const char *ckv_k_prefill_form_name(ckv_kv_dtype dtype, ckv_k_attention_split split)
{
    switch (form_of(dtype, false, split)) {
    case Form::TF32:
        return "tf32 mma.sync";
    case Form::MMA:
        return "bf16 mma.sync";
    case Form::WG4:
        return "bf16 wgmma, one warpgroup";
    case Form::WG8:
        break;
    }
    return "bf16 wgmma, two warpgroups";
}

ckv_status ckv_attention_prefill(const float *q, int32_t q_stride, int32_t n, int32_t n_head,
                                 int32_t n_head_kv, int32_t head_dim, const ckv_k_kv_layer &c,
                                 const ckv_k_segments *sg, ckv_kv_dtype dtype,
                                 float scale, bool bias, ckv_k_attention_split split,
                                 float *part_o, float *part_ml, float *out32, ckv_bf16 *out16,
                                 float *ml, cudaStream_t stream, ckv_error *err)
{
    const bool one = split.splits == 1;
    const PArgs a = {q,       q_stride,         n,
                     n_head,  n_head_kv,        c,
                     sg ? *sg : ckv_k_segments{}, scale * CKV_LOG2E, bias,
                     split.split_len, part_o,   part_ml,
                     one ? out32 : NULL, one ? out16 : NULL, one ? ml : NULL};
    const int32_t S = split.splits, tiles = sg ? sg->tiles : 0;
    const bool h64 = head_dim == 64;
    switch (form_of(dtype, sg != NULL, split)) {
    case Form::TF32:
        return h64 ? launch<64, Tf32>(a, S, tiles, stream, err)
                   : launch<128, Tf32>(a, S, tiles, stream, err);
    case Form::MMA:
        return h64 ? launch<64, Bf16>(a, S, tiles, stream, err)
                   : launch<128, Bf16>(a, S, tiles, stream, err);
    case Form::WG4:
        return h64 ? launch<64, Wg4>(a, S, tiles, stream, err)
                   : launch<128, Wg4>(a, S, tiles, stream, err);
    case Form::WG8:
        break;
    }
    return h64 ? launch<64, Wg8>(a, S, tiles, stream, err)
               : launch<128, Wg8>(a, S, tiles, stream, err);
}

ckv_status ckv_attention_prefill_score(const float *q, int32_t q_stride, int32_t n,
                                       int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                                       const ckv_k_kv_layer &c, float scale, bool bias,
                                       ckv_k_attention_split split, const float *ml,
                                       cudaStream_t stream, ckv_error *err)
{
    // ml is read only here; no partials or outputs are written.
    const PArgs a = {q,    q_stride,        n,    n_head, n_head_kv,       c, ckv_k_segments{},
                     scale * CKV_LOG2E, bias, split.split_len, NULL, NULL, NULL, NULL,
                     const_cast<float *>(ml)};
    const int32_t S = split.splits;
    const bool h64 = head_dim == 64;
    // The partial pass's form, but one warpgroup where it took two: the
    // score pass holds no outputs and has no P V to overlap.
    switch (form_of(c.dtype, false, split)) {
    case Form::TF32:
        return h64 ? launch_score<64, Tf32>(a, S, stream, err)
                   : launch_score<128, Tf32>(a, S, stream, err);
    case Form::MMA:
        return h64 ? launch_score<64, Bf16>(a, S, stream, err)
                   : launch_score<128, Bf16>(a, S, stream, err);
    case Form::WG4:
    case Form::WG8:
        break;
    }
    return h64 ? launch_score<64, Wg4>(a, S, stream, err)
               : launch_score<128, Wg4>(a, S, stream, err);
}
