// Decode attention on tensor cores: the partial pass of
// cuda_attention_decode.cu for a cache that stores bf16 keys and values,
// and for fp32 lists under groups of more than 4 query heads. The CUDA-core
// walk there spends about 125 warp instructions an entry on dot products,
// team shuffles and shared-memory reads of the query; over bf16 lists it
// ran no faster than over fp32 ones (run AJ: issue slots half busy, stalled
// on the shuffle and shared-memory pipe), so at half the bytes it reached
// half the bandwidth; over fp32 lists at group 8 it issues 8 products an
// element and runs at 67-95% of copy (ZZ108, ZZ109: 2 blocks an SM at
// 198-206 registers). Here the products run on mma.sync.
//
// A block takes one (sequence, KV head, range of the list), as there; each
// of its 4 warps walks steps of 8 entries, 32 apart. Per step:
//   S = Q K^T  m16n8k16 bf16 mma, fp32 accumulate, HD / 16 k-steps. A rows
//              g < 8 hold query head g's query (scaled by scale * log2 e)
//              rounded to bf16, rows g + 8 the remainder rounded again
//              (q = hi + lo to about 2^-17 relative; the keys are bf16
//              already), so row g's score is the sum of rows g and g + 8
//              of S; heads >= G are zero rows and never reach the output.
//   P V        m16n8k8 bf16 mma, HD / 8 column tiles: A row g holds head
//              g's probabilities rounded to bf16, row g + 8 their
//              remainders, so the output of head g is rows g + g + 8.
// The products are exact in fp32, so the result carries only fp32
// summation errors and the 2^-17 of the splits (gpu_parity checks it at the
// fp32 kernels' 1e-4). The sums l take the split probabilities' values, so
// the output is a weighted mean with exactly the weights summed. fp32 keys
// and values are split the same way, each element a bf16 hi and lo (split
// by the lane that reads it from shared memory), and every product runs
// twice, over the hi parts and over the lo parts, into the same
// accumulators: (q hi + q lo)(k hi + k lo) whole, and the output the
// probabilities' parts times the values' parts.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 / m16n8k8" with
// .bf16; lane = 4 g + t): m16n8k16 A: (g, 2t..2t+1), (g + 8, 2t..), (g,
// 2t + 8..), (g + 8, 2t + 8..); B: (k 2t..2t+1, n g), (k 2t + 8.., n g);
// m16n8k8 A: (g, 2t..2t+1), (g + 8, 2t..); B: (k 2t..2t+1, n g); C/D of
// both: (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1). A sum over k
// does not depend on which dimension each k stands for, nor the output on
// the order of its columns, so both are permuted to make every load a
// whole 16 bytes of one row:
//   keys:   lane (g, t) loads entry g's dimensions 32 i + 8 t .. + 7 (one
//           16-byte piece in bf16, two in fp32); in k-step 2 i + s its
//           k = 2t, 2t+1 stand for dimensions 32 i + 8 t + 4 s + 0, 1 and
//           k = 2t + 8, 2t + 9 for + 2, 3;
//   values: lane (g, t) loads entries 2t and 2t + 1, dimensions
//           g NT .. g NT + NT - 1 (NT = HD / 8); column tile j's column n
//           stands for dimension n NT + j, so its B register is the two
//           entries' dimension g NT + j (one byte permute).
// A warp's steps reach it through shared memory by cp.async, S - 1 steps
// ahead of the one it computes; each copy instruction moves 512 consecutive
// bytes of the list, and the lanes then read their permuted pieces from
// the tile (swizzled: no bank conflicts). Loading straight into registers
// left a warp's loads in flight only while it waited for them (run AO:
// batch 1 latency-bound, issue slots idle about 60% of cycles); holding
// the next step in registers as well took a block an SM (run AP, 198
// registers) and was slower. Staged, the latency-bound shapes run up to
// 1.5x faster and the bandwidth-bound ones as before (runs AS, AT); copies
// of the lanes' own pieces instead of whole rows capped near 3 TB/s (AR).
// Scores are in log2 units (log2 of the degree as the bias); the partial
// max goes out times ln 2, as the other kernels'.
//
// H2O's scores, deferred (CKV_DECODE_DEFER, groups up to 4): the step adds
// the last deferring step's attention mass to each entry's score while it
// walks the keys anyway, instead of storing G logits an entry for a score
// pass that reads them back (2 x 16 bytes an entry at group 4, against the
// score's 8 read and written). Rows G .. 2G - 1 of A hold that step's
// queries (rows G + 8 .. 2G + 7 their remainders), free under m16 at G <= 4:
// the same products of the same split queries and keys give the same fp32
// logits that step computed, and the mass is the score pass's expression in
// its order over the heads, from that step's merged max and 1 / sum (its
// merge keeps them), so the scores come out bit for bit as
// the score pass would have left them, one step later. Entries from the
// list's start up to that step's length get it (the step's own entry and
// any appended since do not). CKV_DECODE_FLUSH walks only those rows over
// only the keys, to bring the scores up to date before anything reads or
// moves them.
#include <math.h>
#include <stdint.h>

#include "cuda_async_copy.cuh"
#include "cuda_attention_decode.h"
#include "cuda_attention_partials.cuh"
#include "cuda_bf16.cuh"
#include "cuda_mma.cuh"
#include "cuda_pdl.cuh"

namespace {

constexpr int NW = 4;  // warps per block
constexpr int NTH = NW * 32;
constexpr int MAX_GROUP = 8;  // the A rows a head's hi part can take
constexpr int STEP = 8;       // entries per warp and step
constexpr int S = 3;          // steps in flight per warp
constexpr int MAX_DEFER_GROUP = CKV_K_SCORES_DEFER_GROUP;

struct MArgs {
    const float *q;
    int32_t q_stride, n, H, KV;
    ckv_k_kv_layer c;
    const ckv_k_kv_layer *seqs;
    float qscale;  // scale * log2 e
    bool bias;
    int32_t split_len;
    float *part_o, *part_ml;
};

__device__ __forceinline__ void mma8(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5}, {%6}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(b0));
}

// x, y as packed bf16 pairs (x in the low half): hi rounded, lo the
// remainders rounded (x - hi is exact); the queries', the probabilities'
// and fp32 lists' splits.
__device__ __forceinline__ void split_pair(float x, float y, uint32_t &hi, uint32_t &lo)
{
    const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    const float2 hf = __bfloat1622float2(h);
    const __nv_bfloat162 r = __floats2bfloat162_rn(x - hf.x, y - hf.y);
    hi = *reinterpret_cast<const uint32_t *>(&h);
    lo = *reinterpret_cast<const uint32_t *>(&r);
}

// Eight elements from 16 bytes of bf16 (the pieces as they are, no lo part)
// or 32 of fp32 (split into hi and lo pieces).
__device__ __forceinline__ void to_pieces(const uint4 *p, uint4 &hi, uint4 &, ckv_bf16 *)
{
    hi = p[0];
}
__device__ __forceinline__ void to_pieces(const uint4 *p, uint4 &hi, uint4 &lo, float *)
{
    const uint4 a = p[0], b = p[1];
    split_pair(__uint_as_float(a.x), __uint_as_float(a.y), hi.x, lo.x);
    split_pair(__uint_as_float(a.z), __uint_as_float(a.w), hi.y, lo.y);
    split_pair(__uint_as_float(b.x), __uint_as_float(b.y), hi.z, lo.z);
    split_pair(__uint_as_float(b.z), __uint_as_float(b.w), hi.w, lo.w);
}

template <typename T, int HD>
struct Shape {
    static constexpr bool F32 = sizeof(T) == 4;
    static constexpr int EC = 16 / (int)sizeof(T);  // elements per 16-byte chunk
    static constexpr int KQ = HD / 32;  // 8-element key pieces per lane and step
    static constexpr int VQ = HD / 64;  // 8-element pieces per value row and lane
    static constexpr int CR = HD / EC;  // 16-byte chunks per row
    static constexpr int PC = 8 / EC;   // 16-byte chunks per piece
    // Blocks an SM the kernel is built for: 3 (168 registers at most) where
    // shared memory holds 3, else the 2 that fp32 stages of head_dim 128
    // allow (96 KB a block).
    static constexpr int MIN_BLOCKS = F32 && HD == 128 ? 2 : 3;
};

// Where chunk c of key row r / value row r sits in its tile row. A warp's
// 16-byte shared-memory reads go 8 lanes at a time (128 bytes, all 32
// banks); unswizzled, lanes reading the same chunk of rows 256 bytes apart
// would share banks. bf16 keys: lanes g = 2p, 2p + 1 and t = 0..3 read
// chunks 4i + t of rows g, so odd rows flip bit 2; bf16 values: lanes read
// chunk g VQ + i of rows 2t + r, so the row's t moves the bits the chunk's
// g parity leaves alone (bits 0 and 2 at head_dim 128, 1 and 2 at 64).
// fp32 keys: chunks 8i + 2t + s (s = 0, 1), so odd rows flip bit 0; fp32
// values: chunks g NT / 4 + i (i < NT / 4), so t moves bits 0 and 1 at
// head_dim 128, 0 and 2 at 64. Eight consecutive chunks of one row (a
// copy's 8 lanes) stay 8 distinct banks.
template <typename T, int HD>
__device__ __forceinline__ int kswz(int r, int c)
{
    return Shape<T, HD>::F32 ? c ^ (r & 1) : c ^ (r & 1) << 2;
}
template <typename T, int HD>
__device__ __forceinline__ int vswz(int r, int c)
{
    const int t = r >> 1 & 3;
    if (Shape<T, HD>::F32)
        return HD == 128 ? c ^ t : c ^ ((t & 1) | (t & 2) << 1);
    return HD == 128 ? c ^ ((t & 1) | (t & 2) << 1) : c ^ t << 1;
}

// One step of a warp in shared memory: its STEP key and value rows
// (swizzled as above) and their degrees.
template <typename T, int HD>
struct Stage {
    uint4 k[STEP][Shape<T, HD>::CR];
    uint4 v[STEP][Shape<T, HD>::CR];
    float deg[STEP];
    float score[STEP];  // the scores the step's deferred masses add to
};

// The block's dynamic shared memory: S stages per warp during the walk,
// then the warps' states for the merge in the same bytes.
template <int HD>
struct Merge {
    float so[NW][MAX_GROUP][HD];
    float ml[NW][MAX_GROUP][2];
};
template <typename T, int HD>
constexpr size_t smem_bytes()
{
    return sizeof(Stage<T, HD>) * S * NW > sizeof(Merge<HD>) ? sizeof(Stage<T, HD>) * S * NW
                                                             : sizeof(Merge<HD>);
}

// Starts the copies of the step at entry base into stage st, as one group:
// the warp copies the step's key and value rows whole, each instruction 512
// consecutive bytes (lane l takes chunks l, l + 32, ...), lanes below STEP
// the degrees under the bias, and lanes STEP .. 2 STEP - 1 the scores where
// deferred masses are added (score set). A flush copies no values. Past the
// range: zeros, read from entry t_begin's address, which is inside the list.
template <typename T, int HD, int MODE>
__device__ __forceinline__ void copy_step(Stage<T, HD> &st, const T *K, const T *V,
                                          const float *deg, const float *score, bool bias,
                                          int base, int t_begin, int t_end, int lane)
{
    constexpr int CR = Shape<T, HD>::CR, EC = Shape<T, HD>::EC;
#pragma unroll
    for (int q = lane; q < STEP * CR; q += 32) {
        const int r = q / CR, c = q % CR, e = base + r;
        const bool in = e < t_end;
        const size_t at = (size_t)(in ? e : t_begin) * HD + EC * c;
        ckv_cp_async16(&st.k[r][kswz<T, HD>(r, c)], K + at, in);
        if (MODE != CKV_DECODE_FLUSH)
            ckv_cp_async16(&st.v[r][vswz<T, HD>(r, c)], V + at, in);
    }
    if (bias && lane < STEP && base + lane < t_end)
        ckv_cp_async4(&st.deg[lane], deg + base + lane, true);
    if (score && lane >= STEP && lane < 2 * STEP && base + lane - STEP < t_end)
        ckv_cp_async4(&st.score[lane - STEP], score + base + lane - STEP, true);
    ckv_cp_async_commit();
}

// bf16 lists: at least 3 blocks an SM, as the CUDA-core kernel's group-4
// instance: 168 registers at most (head_dim 128 takes 168 and, storing
// logits, 8 bytes of stack under nvcc 13.0; 64 takes 124-126). fp32 lists:
// 243-246 registers at head_dim 128, 156-158 at 64, no stack. MODE: a
// ckv_decode_scores (cuda_attention_decode.h).
template <typename T, int HD, int MODE>
__global__ void __launch_bounds__(NTH, Shape<T, HD>::MIN_BLOCKS) attention_decode_mma(MArgs a)
{
    constexpr bool LOGITS = MODE == CKV_DECODE_NOW, FLUSH = MODE == CKV_DECODE_FLUSH;
    constexpr bool DEFERRED = MODE == CKV_DECODE_DEFER || FLUSH;
    constexpr int KS = HD / 16;  // k-steps of Q K^T
    constexpr int NT = HD / 8;   // column tiles of O, and dimensions per lane of a value row
    constexpr int KQ = Shape<T, HD>::KQ, VQ = Shape<T, HD>::VQ, PC = Shape<T, HD>::PC;
    constexpr bool F32 = Shape<T, HD>::F32;
    extern __shared__ uint4 dyn[];
    Stage<T, HD>(*const stages)[S] = reinterpret_cast<Stage<T, HD>(*)[S]>(dyn);
    Merge<HD> &mg = *reinterpret_cast<Merge<HD> *>(dyn);
    const int x = blockIdx.x, h = blockIdx.y, split = blockIdx.z;
    const int G = a.H / a.KV, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    // By value: the address of a kernel parameter would copy it to local memory.
    // A flush reads lengths and the last step's state that any kernel
    // before it may have written: it waits first.
    if (FLUSH)
        ckv_pdl_wait();
    const ckv_k_kv_layer c = a.seqs ? a.seqs[x] : a.c;
    // pl: the entries the last deferring step saw, whose scores this block
    // brings up to date (0: none pending, or no deferred scores here).
    // Written by that step's merge, which completed before the kernel before
    // this one started, so it is read before the wait, as len0.
    const int pl = DEFERRED && c.score && c.pq ? c.plen[h] : 0;
    const int t_begin = split * a.split_len, len0 = FLUSH ? pl : c.len0[h];
    // The step's own entry (len0) included; a flush walks the pending entries only.
    const int t_end = min(t_begin + a.split_len, FLUSH ? pl : len0 + 1);
    const T *K = static_cast<const T *>(c.k) + (size_t)h * c.capacity * HD;
    const T *V = static_cast<const T *>(c.v) + (size_t)h * c.capacity * HD;
    const float *deg = c.deg + (size_t)h * c.capacity;
    float *const lg = LOGITS && c.logit && g < G
                          ? c.logit + ((size_t)h * G + g) * c.capacity
                          : nullptr;
    // Deferred masses: this block's entries below pl take them (pl is
    // uniform over the block). The scores are staged with the keys.
    float *const score = pl > t_begin ? c.score + (size_t)h * c.capacity : nullptr;

    // Step k of this warp starts at entry first + k NW STEP; the step count
    // is uniform over the warp (mma needs every lane). Steps k + 1 .. k + S
    // - 1 are in flight while step k is computed; groups past the last step
    // are empty, so that the wait below always leaves S - 2 open. The first
    // S - 1 steps' copies go out before the query is read and split, and
    // those of steps wholly before the step's own entry (len0) even before
    // the wait for the kernel before (cuda_pdl.cuh): that kernel, the QKV
    // epilogue, writes only the query and the new entry, and every kernel
    // that wrote the older entries, the lengths or the degrees has completed
    // before it passed its own wait. The copies' latency then overlaps its
    // tail.
    const int first = t_begin + warp * STEP;
    const int steps = first < t_end ? (t_end - first + NW * STEP - 1) / (NW * STEP) : 0;
    int early = 0;  // steps copied before the wait
#pragma unroll
    for (int k = 0; k < S - 1; k++)
        if (early == k && k < steps && first + k * NW * STEP + STEP <= len0) {
            copy_step<T, HD, MODE>(stages[warp][k], K, V, deg, score, a.bias,
                                   first + k * NW * STEP, t_begin, t_end, lane);
            early++;
        }
    if (!FLUSH)
        ckv_pdl_wait();
    ckv_pdl_launch_dependents();
#pragma unroll
    for (int k = 0; k < S - 1; k++) {
        if (k < early)
            continue;
        if (k < steps)
            copy_step<T, HD, MODE>(stages[warp][k], K, V, deg, score, a.bias,
                                   first + k * NW * STEP, t_begin, t_end, lane);
        else
            ckv_cp_async_commit();
    }

    // Q as A fragments (file comment): k-step 2 i + s, registers hi and lo
    // of k = 2t, 2t+1 and of k = 2t + 8, 2t + 9. Deferred masses: rows G ..
    // 2G - 1 hold the last deferring step's queries (none in a flush's rows
    // below G).
    const bool cur_row = !FLUSH && g < G, prev_row = score && g >= G && g < 2 * G;
    // The last step's merged max and 1 / sum of this lane's head (prev_row).
    float pm = 0.0f, pinv = 0.0f;
    uint32_t qa[KS][4];
    {
        const float *q = cur_row    ? a.q + (size_t)x * a.q_stride + (size_t)(h * G + g) * HD
                         : prev_row ? c.pq + (size_t)(h * G + g - G) * HD
                                    : nullptr;
        if (prev_row) {
            pm = c.pml[2 * (h * G + g - G)];
            pinv = c.pml[2 * (h * G + g - G) + 1];
        }
#pragma unroll
        for (int i = 0; i < KQ; i++) {
            float f[8];
#pragma unroll
            for (int e = 0; e < 8; e++)
                f[e] = q ? q[32 * i + 8 * t + e] * a.qscale : 0.0f;
#pragma unroll
            for (int s = 0; s < 2; s++) {
                split_pair(f[4 * s], f[4 * s + 1], qa[2 * i + s][0], qa[2 * i + s][1]);
                split_pair(f[4 * s + 2], f[4 * s + 3], qa[2 * i + s][2], qa[2 * i + s][3]);
            }
        }
    }
    float o[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
        o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    // Row g's running max (log2 units, -inf until it sees an entry) and the
    // lane's share of its running sum (columns 2t, 2t + 1).
    float m = -INFINITY, l = 0.0f;

    for (int k = 0; k < steps; k++) {
        // Step k's copies landed (S - 2 later groups may still be in
        // flight) and, after the warp's barrier, everyone's are visible;
        // every lane is also past its reads of step k - 1, whose stage the
        // copies of step k + S - 1 then overwrite.
        ckv_cp_async_wait<S - 2>();
        __syncwarp();
        // The lane's pieces of step k: entry g's keys, the values of
        // entries 2t and 2t + 1 (fp32: each split into hi and lo pieces),
        // their degrees. Past the range: zeros (finite products) and a
        // score of -inf.
        const Stage<T, HD> &sg = stages[warp][k % S];
        const int base = first + k * NW * STEP, e0 = base + 2 * t, e1 = e0 + 1;
        uint4 kq[KQ], kl[KQ], vq[2][VQ], vl[2][VQ];
#pragma unroll
        for (int i = 0; i < KQ; i++) {
            uint4 raw[PC];
#pragma unroll
            for (int u = 0; u < PC; u++)
                raw[u] = sg.k[g][kswz<T, HD>(g, PC * (4 * i + t) + u)];
            to_pieces(raw, kq[i], kl[i], (T *)nullptr);
        }
        if (!FLUSH)
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int i = 0; i < VQ; i++) {
                    uint4 raw[PC];
#pragma unroll
                    for (int u = 0; u < PC; u++)
                        raw[u] = sg.v[2 * t + r][vswz<T, HD>(2 * t + r, PC * (g * VQ + i) + u)];
                    to_pieces(raw, vq[r][i], vl[r][i], (T *)nullptr);
                }
        const float d0 = e0 < t_end ? (a.bias ? sg.deg[2 * t] : 1.0f) : 0.0f;
        const float d1 = e1 < t_end ? (a.bias ? sg.deg[2 * t + 1] : 1.0f) : 0.0f;
        // Their log2 under the bias, for this step's rows and the last
        // step's: degree 1 (every entry of an evicting policy's list, most
        // of a merging one's; every entry without the bias) skips log2f's
        // polynomial, 35-odd instructions an entry that the walk would
        // otherwise issue twice a step, four times deferring. log2f(1) is 0,
        // so the sums are the same floats.
        const float b0 = d0 > 0.0f && d0 != 1.0f ? log2f(d0) : 0.0f;
        const float b1 = d1 > 0.0f && d1 != 1.0f ? log2f(d1) : 0.0f;
        // The scores of entries e0, e1 (this stage is rewritten only after
        // the next step's __syncwarp).
        const float old0 = score ? sg.score[2 * t] : 0.0f, old1 = score ? sg.score[2 * t + 1] : 0.0f;
        const int next = k + S - 1;
        if (next < steps)
            copy_step<T, HD, MODE>(stages[warp][next % S], K, V, deg, score, a.bias,
                                   first + next * NW * STEP, t_begin, t_end, lane);
        else
            ckv_cp_async_commit();

        float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int p = 0; p < (F32 ? 2 : 1); p++)
#pragma unroll
            for (int i = 0; i < KQ; i++) {
                const uint4 &b = p ? kl[i] : kq[i];
                ckv_mma_bf16(sc, qa[2 * i][0], qa[2 * i][1], qa[2 * i][2], qa[2 * i][3], b.x,
                             b.y);
                ckv_mma_bf16(sc, qa[2 * i + 1][0], qa[2 * i + 1][1], qa[2 * i + 1][2],
                             qa[2 * i + 1][3], b.z, b.w);
            }
        // Head g's scores of entries e0, e1: hi row plus lo row, plus
        // log2(degree); -inf past the range, for degree 0 under the bias,
        // and for the rows past the group.
        const float s0 = g >= G || !(d0 > 0.0f) ? -INFINITY : sc[0] + sc[2] + b0;
        const float s1 = g >= G || !(d1 > 0.0f) ? -INFINITY : sc[1] + sc[3] + b1;
        if (LOGITS && lg) {
            if (e0 < t_end)
                lg[e0] = s0 * CKV_LN2;
            if (e1 < t_end)
                lg[e1] = s1 * CKV_LN2;
        }
        if (DEFERRED && score) {
            // Row g's mass of e0, e1 as the score pass computes it from the
            // logit that step stored (its s0 * ln 2, -inf for degree 0),
            // then summed over the heads in their order by the lane of row
            // G, which owns the two scores.
            float p0 = 0.0f, p1 = 0.0f;
            if (prev_row) {
                if (e0 < pl && d0 > 0.0f)
                    p0 = ckv_decode_mass(__fmul_rn(sc[0] + sc[2] + b0, CKV_LN2), pm, pinv);
                if (e1 < pl && d1 > 0.0f)
                    p1 = ckv_decode_mass(__fmul_rn(sc[1] + sc[3] + b1, CKV_LN2), pm, pinv);
            }
            float m0 = 0.0f, m1 = 0.0f;
#pragma unroll
            for (int j = 0; j < MAX_DEFER_GROUP; j++)
                if (j < G) {
                    m0 = __fadd_rn(m0, __shfl_sync(0xffffffffu, p0, 4 * (G + j) + t));
                    m1 = __fadd_rn(m1, __shfl_sync(0xffffffffu, p1, 4 * (G + j) + t));
                }
            if (g == G) {
                if (e0 < pl && e0 < t_end)
                    score[e0] = old0 + m0;
                if (e1 < pl && e1 < t_end)
                    score[e1] = old1 + m1;
            }
        }
        if (FLUSH)
            continue;
        float mx = fmaxf(s0, s1);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mn = fmaxf(m, mx);
        // A row that has seen nothing yet (max still -inf) exponentiates
        // against 0, never -inf - -inf: its p and correction are 0, and its
        // l and o stay 0.
        const float ref = mn == -INFINITY ? 0.0f : mn;
        const float corr = exp2f(m - ref);
        m = mn;
        uint32_t pa0, pa1;  // entries e0, e1: hi parts, lo parts
        split_pair(exp2f(s0 - ref), exp2f(s1 - ref), pa0, pa1);
        l = l * corr + ((__uint_as_float(pa0 << 16) + __uint_as_float(pa1 << 16)) +
                        (__uint_as_float(pa0 & 0xffff0000u) + __uint_as_float(pa1 & 0xffff0000u)));
        // O += P V, column tile j: the B register holds entries e0 and e1 at
        // dimension g NT + j (low halves of word j / 2 for even j, high
        // halves for odd).
#pragma unroll
        for (int j = 0; j < NT; j++) {
#pragma unroll
            for (int r = 0; r < 4; r++)
                o[j][r] *= corr;
#pragma unroll
            for (int p = 0; p < (F32 ? 2 : 1); p++) {
                const uint4 &w0 = p ? vl[0][j / 8] : vq[0][j / 8];
                const uint4 &w1 = p ? vl[1][j / 8] : vq[1][j / 8];
                const int wi = j % 8 / 2;
                const uint32_t a0 = wi == 0 ? w0.x : wi == 1 ? w0.y : wi == 2 ? w0.z : w0.w;
                const uint32_t a1 = wi == 0 ? w1.x : wi == 1 ? w1.y : wi == 2 ? w1.z : w1.w;
                mma8(o[j], pa0, pa1, __byte_perm(a0, a1, j % 2 ? 0x7632 : 0x5410));
            }
        }
    }

    // The row sums over the quad; the warp's state into shared memory, in
    // natural-log units, hi and lo rows added.
    // The merge state overwrites the stages: every warp done with its own
    // (only empty groups can still be open) before any writes.
    if (FLUSH) {
        ckv_cp_async_wait<0>();
        return;
    }
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    ckv_cp_async_wait<0>();
    __syncthreads();
    if (g < G) {
#pragma unroll
        for (int j = 0; j < NT; j++) {
            mg.so[warp][g][2 * t * NT + j] = o[j][0] + o[j][2];
            mg.so[warp][g][(2 * t + 1) * NT + j] = o[j][1] + o[j][3];
        }
        if (t == 0) {
            mg.ml[warp][g][0] = m * CKV_LN2;
            mg.ml[warp][g][1] = l;
        }
    }
    __syncthreads();
    ckv_store_partials<NW, HD, MAX_GROUP>(mg.so, mg.ml, G, a.n, a.H, x, h, split, a.part_o,
                                          a.part_ml);
}

// The stages take more than the 48 KB a launch gets without asking at head
// dim 128 (bf16: 3 x 4 x 4,128 B), and 3 blocks an SM need the largest
// carveout.
template <typename T, int HD, int MODE>
cudaError_t launch_hd(const MArgs &a, dim3 grid, cudaStream_t st)
{
    const cudaError_t e =
        ckv_allow_smem(attention_decode_mma<T, HD, MODE>, (int)smem_bytes<T, HD>());
    return e != cudaSuccess ? e
                            : ckv_pdl_launch(attention_decode_mma<T, HD, MODE>, grid, NTH,
                                             smem_bytes<T, HD>(), st, a);
}

template <typename T, int HD>
cudaError_t launch_mode(const MArgs &a, ckv_decode_scores mode, dim3 grid, cudaStream_t st)
{
    switch (mode) {
    case CKV_DECODE_NONE: return launch_hd<T, HD, CKV_DECODE_NONE>(a, grid, st);
    case CKV_DECODE_NOW: return launch_hd<T, HD, CKV_DECODE_NOW>(a, grid, st);
    default:
        if constexpr (sizeof(T) == 2)
            return mode == CKV_DECODE_DEFER ? launch_hd<T, HD, CKV_DECODE_DEFER>(a, grid, st)
                                            : launch_hd<T, HD, CKV_DECODE_FLUSH>(a, grid, st);
        else
            return cudaErrorInvalidValue;
    }
}

// Deferred masses are bf16 lists' only (ckv_attention_decode_defers).
template <typename T>
cudaError_t launch_t(const MArgs &a, int head_dim, ckv_decode_scores mode, dim3 grid,
                     cudaStream_t st)
{
    return head_dim == 64 ? launch_mode<T, 64>(a, mode, grid, st)
                          : launch_mode<T, 128>(a, mode, grid, st);
}

template <typename T, int HD>
int resident()
{
    int blocks = 0;
    cudaError_t e =
        ckv_allow_smem(attention_decode_mma<T, HD, CKV_DECODE_NONE>, (int)smem_bytes<T, HD>());
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &blocks, attention_decode_mma<T, HD, CKV_DECODE_NONE>, NTH, smem_bytes<T, HD>());
    if (e != cudaSuccess)
        (void)cudaGetLastError();  // not left for the next launch's check
    return e == cudaSuccess && blocks > 0 ? blocks : -1;
}

}  // namespace

int ckv_attention_decode_mma_resident(int32_t head_dim, ckv_kv_dtype dtype)
{
    // Racing threads store the same value; -1: CUDA could not say.
    static int known[2][2];
    const bool f32 = dtype != CKV_KV_BF16;
    int &r = known[f32][head_dim == 128];
    if (!r)
        r = f32 ? (head_dim == 128 ? resident<float, 128>() : resident<float, 64>())
                : (head_dim == 128 ? resident<ckv_bf16, 128>() : resident<ckv_bf16, 64>());
    return r > 0 ? r : 0;
}

cudaError_t ckv_attention_decode_mma(const float *q, int32_t q_stride, int32_t n, int32_t n_head,
                                     int32_t n_head_kv, int32_t head_dim,
                                     const ckv_k_kv_layer &c, const ckv_k_kv_layer *seqs,
                                     float scale, bool bias, ckv_k_attention_split split,
                                     float *part_o, float *part_ml, ckv_decode_scores mode,
                                     ckv_kv_dtype dtype, cudaStream_t stream)
{
    if ((mode == CKV_DECODE_DEFER || mode == CKV_DECODE_FLUSH) &&
        !ckv_attention_decode_defers(n_head / n_head_kv, dtype))
        return cudaErrorInvalidValue;
    const MArgs a = {q,    q_stride, n,    n_head,          n_head_kv, c,      seqs,
                     scale * CKV_LOG2E, bias, split.split_len, part_o,   part_ml};
    const dim3 grid(n, n_head_kv, split.splits);
    return dtype == CKV_KV_BF16 ? launch_t<ckv_bf16>(a, head_dim, mode, grid, stream)
                                : launch_t<float>(a, head_dim, mode, grid, stream);
}

bool ckv_attention_decode_defers(int32_t group, ckv_kv_dtype dtype)
{
    return dtype == CKV_KV_BF16 && group >= 1 && group <= MAX_DEFER_GROUP;
}
