// The merge of split-KV ranges as one block's work, wherever it runs: the
// merge kernel of cuda_attention.cu (one row a block) and the last range of
// a decode list (cuda_attention_partials.cuh: the block that stores it
// merges the G rows of its KV head in the same kernel). Each row's ranges
// (partials part_o [splits][n][H][hd], part_ml [splits][n][H][2], natural-
// log units) give max M = max m_s, weights w_s = exp(m_s - M) (0 for a
// range the row saw nothing of, not exp(NaN)), sum L = sum w_s l_s and
// output O / L with O = sum w_s o_s, the sums in range order and a range of
// weight 0 skipped, not added as 0: the same arithmetic in the same order
// as the prefill's warp merge (attention_merge_warp), so every form gives
// the same bits.
//
// A thread takes 4 consecutive dimensions of a row (16-byte loads) and
// keeps BATCH ranges' loads in flight (128 bytes) before it adds any: one load and add
// after another would wait out an L2 round trip per range (a thread walking
// the ranges that way took 19 us for 65 ranges, ncu, run K). The weights
// of CHUNK ranges at a time are computed once a block into shared memory.
// Reads go through L2 only (ld.global.cg): in a decode's last range they
// were written by other blocks of the same grid.
#ifndef CKV_KERNELS_CUDA_ATTENTION_MERGE_CUH
#define CKV_KERNELS_CUDA_ATTENTION_MERGE_CUH

#include <math.h>

#include "cuda_bf16.cuh"

// Where the merged rows go: out32 or out16 [n][H][hd] (exactly one set)
// and ml [n][H][2] the merged max and sum (the H2O score pass reads them).
struct ckv_merge_out {
    float *out32;
    ckv_bf16 *out16;
    float *ml;
};

constexpr int CKV_MERGE_CHUNK = 64, CKV_MERGE_BATCH = 8;

// The block's shared scratch for MR rows: the maxima and one chunk's
// weights and sums. The caller places it (the decode passes reuse bytes
// their partial store no longer reads, so their shared memory, and with it
// their blocks an SM, stays as it was).
template <int MR>
struct ckv_merge_smem {
    float M[MR], wt[MR][CKV_MERGE_CHUNK], ls[MR][CKV_MERGE_CHUNK];
};

// Rows qh0 .. qh0 + R - 1 (R <= MR) of query x over `splits` ranges, by the
// whole block (blockDim.x a multiple of 32, at most P of a row's 4-dimension
// groups a thread: R hd / 4 <= P blockDim.x). Call after a barrier that
// frees sm.
template <int MR, int P>
__device__ __forceinline__ void ckv_merge_rows(const float *part_o, const float *part_ml,
                                               int splits, int n, int H, int hd, int x, int qh0,
                                               int R, const ckv_merge_out &out,
                                               ckv_merge_smem<MR> &sm)
{
    float *const sM = sm.M;
    float(*const wt)[CKV_MERGE_CHUNK] = sm.wt;
    float(*const ls)[CKV_MERGE_CHUNK] = sm.ls;
    const int tid = threadIdx.x, nth = blockDim.x, lane = tid % 32, warps = nth / 32;
    const size_t per = (size_t)n * H, row0 = (size_t)x * H + qh0;  // (row, head) units
    const int quads = hd / 4;
    for (int r = tid / 32; r < R; r += warps) {
        float M = -INFINITY;
        for (int s = lane; s < splits; s += 32)
            M = fmaxf(M, __ldcg(part_ml + (s * per + row0 + r) * 2));
        for (int o = 16; o > 0; o >>= 1)
            M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        if (lane == 0)
            sM[r] = M;
    }
    float4 O[P];
    float L[P];
#pragma unroll
    for (int p = 0; p < P; p++) {
        O[p] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        L[p] = 0.0f;
    }
    for (int s0 = 0; s0 < splits; s0 += CKV_MERGE_CHUNK) {
        const int cn = min(CKV_MERGE_CHUNK, splits - s0);
        __syncthreads();  // the maxima written; the last chunk's weights no longer read
        for (int i = tid; i < R * cn; i += nth) {
            const int r = i / cn, j = i - r * cn;
            const size_t at = ((s0 + j) * per + row0 + r) * 2;
            const float m = __ldcg(part_ml + at);
            wt[r][j] = m == -INFINITY ? 0.0f : expf(m - sM[r]);
            ls[r][j] = __ldcg(part_ml + at + 1);
        }
        __syncthreads();
#pragma unroll
        for (int p = 0; p < P; p++) {
            const int e = tid + p * nth, r = e / quads;
            if (r >= R)
                break;
            const float4 *src = reinterpret_cast<const float4 *>(part_o) +
                                (((size_t)s0 * per + row0 + r) * hd) / 4 + e % quads;
            for (int j0 = 0; j0 < cn; j0 += CKV_MERGE_BATCH) {
                float4 ov[CKV_MERGE_BATCH];
#pragma unroll
                for (int j = 0; j < CKV_MERGE_BATCH; j++) {
                    const int s = j0 + j;
                    ov[j] = s < cn && wt[r][s] != 0.0f ? __ldcg(src + (size_t)s * per * quads)
                                                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
#pragma unroll
                for (int j = 0; j < CKV_MERGE_BATCH; j++) {
                    const int s = j0 + j;
                    if (s >= cn || wt[r][s] == 0.0f)
                        continue;
                    const float w = wt[r][s];
                    L[p] += w * ls[r][s];
                    O[p].x += w * ov[j].x;
                    O[p].y += w * ov[j].y;
                    O[p].z += w * ov[j].z;
                    O[p].w += w * ov[j].w;
                }
            }
        }
    }
#pragma unroll
    for (int p = 0; p < P; p++) {
        const int e = tid + p * nth, r = e / quads, d = e % quads * 4;
        if (r >= R)
            break;
        const size_t row = row0 + r, o = row * hd + d;
        if (d == 0) {
            out.ml[row * 2] = sM[r];
            out.ml[row * 2 + 1] = L[p];
        }
        const float v[4] = {O[p].x / L[p], O[p].y / L[p], O[p].z / L[p], O[p].w / L[p]};
        if (out.out32)
            *reinterpret_cast<float4 *>(out.out32 + o) = make_float4(v[0], v[1], v[2], v[3]);
        else
            *reinterpret_cast<uint2 *>(out.out16 + o) =
                make_uint2(ckv_to_bf16(v[0]) | (uint32_t)ckv_to_bf16(v[1]) << 16,
                           ckv_to_bf16(v[2]) | (uint32_t)ckv_to_bf16(v[3]) << 16);
    }
}

#endif
