// The end of both decode partial passes (cuda_attention_decode.cu): the
// block's warps have staged their softmax states of the G query heads in
// shared memory (so: unnormalised outputs, sml: running max and sum, in
// natural-log units; a warp that saw nothing of a head has max -inf), and
// the block merges them into its range's partials, in the layout
// ckv_merge_rows reads (part_o [splits][n][H][HD], part_ml
// [splits][n][H][2]). With a merge (out.ml set) the block that stores a
// list's last range then merges the ranges of its G heads itself, in place
// of a merge kernel: a separate launch cost a decode step about 7 us a
// layer for a few microseconds of work (8B, batch 1, 8K: 0.24 ms of the
// step; ncu, run AC).
//
// The last range is counted, not assumed: each block's partials are made
// visible device-wide (fence) before its arrival is counted, and the block
// whose arrival makes the count `splits` fences again before it reads the
// others'. The counts, one per (sequence, KV head), live in device memory
// of each kernel's translation unit (static: one array a unit), zero at
// load; the last block resets its count, so every call finds zeros. That
// takes one decode pass a device at a time, which a stream's kernels are:
// every kernel waits for the one before it (cuda_pdl.cuh). The merge's
// shared scratch takes so's bytes, free once the partials are stored, so
// the passes' shared memory (and their blocks an SM) is what it was
// without the merge: 4 KB more static shared memory made the bf16 pass
// 10-12% slower (run BO). Call after a barrier.
#ifndef CKV_KERNELS_CUDA_ATTENTION_PARTIALS_CUH
#define CKV_KERNELS_CUDA_ATTENTION_PARTIALS_CUH

#include <math.h>

#include "cuda_attention_decode.h"
#include "cuda_attention_merge.cuh"

static __device__ unsigned int ckv_decode_arrivals[CKV_DECODE_MERGE_LISTS];

template <int NW, int HD, int MG>
__device__ __forceinline__ void ckv_finish_partials(float (*so)[MG][HD],
                                                    const float (*sml)[MG][2], int G, int n,
                                                    int H, int x, int h, int split,
                                                    float *part_o, float *part_ml,
                                                    const ckv_merge_out &out)
{
    static_assert(sizeof(ckv_merge_smem<MG>) <= sizeof(float) * NW * MG * HD,
                  "the merge's scratch takes the bytes of so");
    for (int e = threadIdx.x; e < G * HD; e += blockDim.x) {
        const int g = e / HD, d = e % HD;
        float M = -INFINITY;
        for (int w = 0; w < NW; w++)
            M = fmaxf(M, sml[w][g][0]);
        float L = 0.0f, O = 0.0f;
        for (int w = 0; w < NW; w++) {
            const float mw = sml[w][g][0];
            if (mw == -INFINITY)
                continue;
            const float wt = expf(mw - M);
            L += wt * sml[w][g][1];
            O += wt * so[w][g][d];
        }
        const size_t row = ((size_t)split * n + x) * H + (size_t)(h * G + g);
        part_o[row * HD + d] = O;
        if (d == 0) {
            part_ml[row * 2] = M;
            part_ml[row * 2 + 1] = L;
        }
    }
    if (!out.ml)
        return;
    __threadfence();
    __syncthreads();
    bool arrived_last = false;
    if (threadIdx.x == 0) {
        unsigned int *count = &ckv_decode_arrivals[x * (H / G) + h];
        arrived_last = atomicAdd(count, 1u) == gridDim.z - 1;
        if (arrived_last) {
            *count = 0;  // every range has arrived: no other block adds to it this call
            __threadfence();
        }
    }
    // Also the barrier after which so is free for the merge's scratch.
    if (__syncthreads_or(arrived_last))
        ckv_merge_rows<MG, (MG * HD / 4 + NW * 32 - 1) / (NW * 32)>(
            part_o, part_ml, gridDim.z, n, H, HD, x, h * G, G, out,
            *reinterpret_cast<ckv_merge_smem<MG> *>(so));
}

#endif
