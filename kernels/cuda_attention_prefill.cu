// Prefill attention on tensor cores (FlashAttention-2 in form): a block of 4
// warps takes 64 query rows of one query head and one range of its KV
// head's list; each warp owns 16 rows. Key and value tiles of 32 entries go
// through shared memory in two stages: the cp.async copies of the next tile
// are in flight while the current one is computed. They land as the cache
// stores them and go to the mma as they are: it takes a .tf32 operand's
// upper 19 bits, so fp32 keys and values are truncated to TF32 (relative
// error below 2^-10, twice the rounding's; tests/gpu/parity.c counts it; the
// errors measured on the H200, run R, 3.4e-4 .. 6.1e-4, are those of
// truncation), while a bf16 cache's are exact in TF32 (bf16 bits shifted to
// the top of an fp32 word). The queries, pre-scaled and rounded once, stay in registers as
// mma A fragments. Per tile a warp computes S = Q K^T (m16n8k8 TF32
// mma.sync, fp32 accumulate), masks it (range, causal, rows past n), adds
// log(deg), keeps an online softmax per row and accumulates O += P V, again
// on tensor cores. The partials go out in attention_partial's layout, so
// cuda_attention.cu's merge is unchanged. Launched with programmatic
// dependent launch (cuda_pdl.cuh); it waits before reading anything.
//
// Fragments of mma.m16n8k8 with .tf32 (PTX ISA, "Matrix Fragments for
// mma.m16n8k8"; lane = 4 g + t, g = groupID, t = threadID_in_group):
//   A 16x8 (row): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
//   B 8x8 (col):  b0 (k = t, n = g), b1 (k = t + 4, n = g)
//   C/D 16x8:     c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1)
// P = exp(S) comes out in the C layout, which is not the A layout P V needs.
// Instead of a trip through shared memory, the 8 keys of each k-step of
// P V are taken in a permuted order: A column t stands for key 2t and
// column t + 4 for key 2t + 1, and B row k the same key. A sum over k does
// not depend on its order, and with it the lane's own C values are its A
// fragment: (a0, a1, a2, a3) = (c0, c2, c1, c3), and b0, b1 are the values
// of keys 2t and 2t + 1.
//
// Scores are kept in log2 units (q pre-multiplied by scale * log2 e, the
// bias as log2(deg)) so that the softmax takes exp2; the partial max goes
// out times ln 2.
#include <math.h>
#include <stdint.h>

#include "cuda_async_copy.cuh"
#include "cuda_attention_prefill.h"
#include "cuda_bf16.cuh"
#include "cuda_check.h"
#include "cuda_pdl.cuh"

namespace {

constexpr int NW = 4;  // warps per block
constexpr int NTH = NW * 32;
constexpr int WROWS = 16;  // query rows per warp: the m of m16n8k8
constexpr int BQ = NW * WROWS;
static_assert(BQ == CKV_PREFILL_TC_ROWS, "the planner counts blocks of BQ rows");
constexpr int BKV = 32;  // entries per tile
constexpr int STAGES = 2;  // tiles in shared memory: the one computed, the one landing
// Tile rows are HD elements and 16 bytes apart, so a row is a multiple of
// 16 bytes plus 16, every copy's destination is 16-byte aligned (as
// cp.async needs), and row r starts 4 banks after row r - 1 (HD is a
// multiple of 32 elements). fp32: K fragment loads (lane reads key nt*8 + g,
// dimension k*8 + t [+ 4]) hit bank 4g + t, V fragment loads (key
// kk*8 + 2t [+ 1], dimension nd*8 + g) bank 8t + g (+ 4): 32 distinct banks
// each. bf16 (two elements a bank): K loads hit bank 4g + t / 2, V loads
// 8t + g / 2 (+ 4); lanes that share a bank read the same word. The 16-byte
// copies of a tile row cover 16 consecutive bytes per lane, 8 lanes a
// contiguous 128 bytes: no conflict.
template <typename T>
constexpr int PAD = 16 / (int)sizeof(T);
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

struct PArgs {
    const float *q;
    int32_t q_stride, n, H, KV;
    ckv_k_kv_layer c;
    float qscale;  // scale * log2 e
    bool bias;
    int32_t split_len;
    float *part_o, *part_ml;
};

// fp32 rounded to the nearest TF32 (10-bit mantissa, ties away from zero),
// as the bits the mma reads.
__device__ __forceinline__ uint32_t tf32_bits(float x)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ float tf32(float x)
{
    return __uint_as_float(tf32_bits(x));
}

// d += A B for one m16n8k8 TF32 step.
__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The shared memory of one block: STAGES tiles of keys, of values (in the
// cache's type T) and of log2(deg).
template <int HD, typename T>
struct Tiles {
    T k[STAGES][BKV][HD + PAD<T>];
    T v[STAGES][BKV][HD + PAD<T>];
    float l[STAGES][BKV];
};

// A tile element as the mma's TF32 operand bits.
__device__ __forceinline__ uint32_t op_bits(float x)
{
    return __float_as_uint(x);
}
__device__ __forceinline__ uint32_t op_bits(ckv_bf16 x)
{
    return (uint32_t)x << 16;
}

// Starts the copies of one tile of rows (keys or values) into shared
// memory, 16 bytes each. Past the range a copy reads nothing (src-size 0)
// and fills zeros, so that masked entries multiply finite values; its
// address is entry t0's, inside the list. No registers hold the data, so
// the whole tile is in flight at once.
template <int HD, typename T>
__device__ __forceinline__ void copy_rows(T (*dst)[HD + PAD<T>], const T *src, int t0, int t_end)
{
    constexpr int EP = 16 / (int)sizeof(T);  // elements per 16-byte piece
    constexpr int C4 = HD / EP;              // pieces per entry
    constexpr int STEP = NTH / C4;           // entries between a thread's copies
    static_assert(NTH % C4 == 0 && BKV % STEP == 0, "a thread copies one column of pieces");
    const int j0 = threadIdx.x / C4, d = threadIdx.x % C4 * EP;
    const T *from = src + (size_t)(t0 + j0) * HD + d;
#pragma unroll
    for (int j = j0; j < BKV; j += STEP) {
        const bool in = t0 + j < t_end;
        ckv_cp_async16(&dst[j][d], from + (in ? j - j0 : -j0) * HD, in);
    }
}

// Starts tile t0's copies into stage st as one group: keys, values and,
// with the bias, the raw degrees (thread tid < BKV copies entry t0 + tid's;
// it takes their log2 itself once they land).
template <int HD, typename T>
__device__ __forceinline__ void copy_tile(Tiles<HD, T> &sm, int st, const T *K, const T *V,
                                          const float *deg, bool bias, int t0, int t_end)
{
    const int tid = threadIdx.x;
    copy_rows<HD, T>(sm.k[st], K, t0, t_end);
    copy_rows<HD, T>(sm.v[st], V, t0, t_end);
    if (bias && tid < BKV && t0 + tid < t_end)
        ckv_cp_async4(&sm.l[st][tid], deg + t0 + tid);
    ckv_cp_async_commit();
}

// Blocks per SM the registers must allow: the Q and O fragments alone take
// HD registers per lane (HD / 2 each); at HD 128, 3 blocks (168 registers)
// is the most that compiles without spills, at HD 64, 4 (128). Shared
// memory allows as many: 3 x 67,840 B at HD 128, 4 x 35,072 B at HD 64
// (fp32 tiles; bf16 tiles take about half).
template <int HD, typename T>
__global__ void __launch_bounds__(NTH, HD == 128 ? 3 : 4) attention_prefill(PArgs a)
{
    constexpr int KS = HD / 8;   // k-steps of Q K^T, and 8-dimension column tiles of O
    constexpr int NT = BKV / 8;  // 8-key column tiles of S, and k-steps of P V
    extern __shared__ __align__(16) unsigned char smem[];
    Tiles<HD, T> &sm = *reinterpret_cast<Tiles<HD, T> *>(smem);
    ckv_pdl_wait();  // the lengths, keys, values and queries come from earlier kernels
    ckv_pdl_launch_dependents();

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int qh = blockIdx.y, split = blockIdx.z, h = qh / (a.H / a.KV);
    const int n = a.n, L0 = a.c.len0[h];
    // The block's range ends where its last row stops seeing entries.
    const int row0 = blockIdx.x * BQ, i_last = min(n, row0 + BQ) - 1;
    const int t_begin = split * a.split_len;
    const int t_end = min(t_begin + a.split_len, L0 + i_last + 1);
    // The lane's two rows (g and g + 8 of its warp) and the entries each
    // sees (0: a row past n); w_end: the entries the warp's last row sees,
    // 0 for a warp wholly past n.
    const int wrow = row0 + warp * WROWS, r0 = wrow + g, r1 = r0 + 8;
    const int vis0 = r0 < n ? L0 + r0 + 1 : 0, vis1 = r1 < n ? L0 + r1 + 1 : 0;
    const int w_end = wrow < n ? L0 + min(n, wrow + WROWS) : 0;
    const T *K = static_cast<const T *>(a.c.k) + (size_t)h * a.c.capacity * HD;
    const T *V = static_cast<const T *>(a.c.v) + (size_t)h * a.c.capacity * HD;
    const float *deg = a.c.deg + (size_t)h * a.c.capacity;

    // Tile 0's copies start first, and land while Q is read.
    if (t_begin < t_end)
        copy_tile<HD, T>(sm, 0, K, V, deg, a.bias, t_begin, t_end);
    // Q as A fragments of the KS k-steps, scaled and rounded once.
    uint32_t qa[KS][4];
    {
        const float *q0 = a.q + (size_t)qh * HD + (size_t)(r0 < n ? r0 : 0) * a.q_stride;
        const float *q1 = a.q + (size_t)qh * HD + (size_t)(r1 < n ? r1 : 0) * a.q_stride;
#pragma unroll
        for (int k = 0; k < KS; k++) {
            const int d = k * 8 + t;
            qa[k][0] = tf32_bits(r0 < n ? q0[d] * a.qscale : 0.0f);
            qa[k][1] = tf32_bits(r1 < n ? q1[d] * a.qscale : 0.0f);
            qa[k][2] = tf32_bits(r0 < n ? q0[d + 4] * a.qscale : 0.0f);
            qa[k][3] = tf32_bits(r1 < n ? q1[d + 4] * a.qscale : 0.0f);
        }
    }
    // O in C fragments: o[nd] holds dimensions nd*8 + 2t, +1 of rows g, g + 8.
    float o[KS][4];
#pragma unroll
    for (int nd = 0; nd < KS; nd++)
        o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
    // Running max (log2 units; -inf until the row sees an entry) and the
    // lane's share of the running sum, for rows g and g + 8.
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

    // Tile i + 1's copies start once every warp is past tile i - 1, whose
    // stage they overwrite, and land while tile i is computed.
    for (int t0 = t_begin, st = 0; t0 < t_end; t0 += BKV, st ^= 1) {
        ckv_cp_async_wait<0>();  // this thread's copies of tile i
        if (tid < BKV)
            sm.l[st][tid] = a.bias && t0 + tid < t_end ? log2f(sm.l[st][tid]) : 0.0f;
        __syncthreads();  // everyone's copies of tile i; tile i - 1 no longer read
        if (t0 + BKV < t_end)
            copy_tile<HD, T>(sm, st ^ 1, K, V, deg, a.bias, t0 + BKV, t_end);
        const T(*ks)[HD + PAD<T>] = sm.k[st];
        const T(*vs)[HD + PAD<T>] = sm.v[st];
        const float *ls = sm.l[st];
        // warp-uniform: no row of this warp sees the tile
        if (t0 < w_end) {
            float s[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
            for (int k = 0; k < KS; k++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
                    mma(s[nt], qa[k][0], qa[k][1], qa[k][2], qa[k][3],
                        op_bits(ks[nt * 8 + g][k * 8 + t]),
                        op_bits(ks[nt * 8 + g][k * 8 + t + 4]));
            // Masks and bias; the tile's max per row over the quad's 4 lanes.
            float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int j = nt * 8 + 2 * t + e, tt = t0 + j;
                    s[nt][e] = tt < t_end && tt < vis0 ? s[nt][e] + ls[j] : -INFINITY;
                    s[nt][2 + e] = tt < t_end && tt < vis1 ? s[nt][2 + e] + ls[j] : -INFINITY;
                    mx0 = fmaxf(mx0, s[nt][e]);
                    mx1 = fmaxf(mx1, s[nt][2 + e]);
                }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
            // A row that has seen nothing yet (max still -inf) exponentiates
            // against 0, never -inf - -inf: its p and correction are 0, and its
            // l and o stay 0.
            const float base0 = mn0 == -INFINITY ? 0.0f : mn0;
            const float base1 = mn1 == -INFINITY ? 0.0f : mn1;
            const float corr0 = exp2f(m0 - base0), corr1 = exp2f(m1 - base1);
            m0 = mn0;
            m1 = mn1;
            l0 *= corr0;
            l1 *= corr1;
#pragma unroll
            for (int nd = 0; nd < KS; nd++) {
                o[nd][0] *= corr0;
                o[nd][1] *= corr0;
                o[nd][2] *= corr1;
                o[nd][3] *= corr1;
            }
            // P rounded to TF32 once; the sums take the rounded values, so that
            // the output is a weighted mean of V with exactly those weights.
            uint32_t p[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const float p0 = tf32(exp2f(s[nt][0] - base0)), p1 = tf32(exp2f(s[nt][1] - base0));
                const float p2 = tf32(exp2f(s[nt][2] - base1)), p3 = tf32(exp2f(s[nt][3] - base1));
                l0 += p0 + p1;
                l1 += p2 + p3;
                p[nt][0] = __float_as_uint(p0);
                p[nt][1] = __float_as_uint(p1);
                p[nt][2] = __float_as_uint(p2);
                p[nt][3] = __float_as_uint(p3);
            }
            // O += P V with the keys of each k-step permuted (file comment).
#pragma unroll
            for (int kk = 0; kk < NT; kk++)
#pragma unroll
                for (int nd = 0; nd < KS; nd++)
                    mma(o[nd], p[kk][0], p[kk][2], p[kk][1], p[kk][3],
                        op_bits(vs[kk * 8 + 2 * t][nd * 8 + g]),
                        op_bits(vs[kk * 8 + 2 * t + 1][nd * 8 + g]));
        }
    }

    // The row sums over the quad (the max is already quad-uniform).
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = half ? r1 : r0;
        if (r >= n)
            continue;
        const size_t row = ((size_t)split * n + r) * a.H + qh;
        float *po = a.part_o + row * HD + 2 * t;
#pragma unroll
        for (int nd = 0; nd < KS; nd++)
            *reinterpret_cast<float2 *>(po + nd * 8) =
                make_float2(o[nd][2 * half], o[nd][2 * half + 1]);
        if (t == 0) {
            a.part_ml[row * 2] = (half ? m1 : m0) * LN2;
            a.part_ml[row * 2 + 1] = half ? l1 : l0;
        }
    }
}

}  // namespace

// The tiles take more than the 48 KB a launch gets without asking, and the
// 3 blocks per SM at HD 128 need the largest carveout (3 x 67,840 B).
template <int HD, typename T>
static ckv_status launch(const PArgs &a, dim3 grid, cudaStream_t stream, ckv_error *err)
{
    const int bytes = (int)sizeof(Tiles<HD, T>);
    CKV_CUDA(ckv_allow_smem(attention_prefill<HD, T>, bytes));
    CKV_CUDA(ckv_pdl_launch(attention_prefill<HD, T>, grid, NTH, bytes, stream, a));
    return CKV_OK;
}

template <typename T>
static ckv_status launch_t(const PArgs &a, int head_dim, dim3 grid, cudaStream_t stream,
                           ckv_error *err)
{
    return head_dim == 64 ? launch<64, T>(a, grid, stream, err)
                          : launch<128, T>(a, grid, stream, err);
}

ckv_status ckv_attention_prefill(const float *q, int32_t q_stride, int32_t n, int32_t n_head,
                                 int32_t n_head_kv, int32_t head_dim, const ckv_k_kv_layer &c,
                                 float scale, bool bias, ckv_k_attention_split split,
                                 float *part_o, float *part_ml, cudaStream_t stream,
                                 ckv_error *err)
{
    const PArgs a = {q,    q_stride, n, n_head, n_head_kv, c, scale * LOG2E, bias, split.split_len,
                     part_o, part_ml};
    const dim3 grid((n + BQ - 1) / BQ, n_head, split.splits);
    return c.dtype == CKV_KV_BF16 ? launch_t<ckv_bf16>(a, head_dim, grid, stream, err)
                                  : launch_t<float>(a, head_dim, grid, stream, err);
}
