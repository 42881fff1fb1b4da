// The end of both decode partial passes (cuda_attention_decode.cu): the
// block's warps have staged their softmax states of the G query heads in
// shared memory (so: unnormalised outputs, sml: running max and sum, in
// natural-log units; a warp that saw nothing of a head has max -inf), and
// the block merges them into its range's partials, in the layout
// attention_merge of cuda_attention.cu reads (part_o [splits][n][H][HD],
// part_ml [splits][n][H][2]). Call after a barrier.
#ifndef CKV_KERNELS_CUDA_ATTENTION_PARTIALS_CUH
#define CKV_KERNELS_CUDA_ATTENTION_PARTIALS_CUH

#include <math.h>

template <int NW, int HD, int MG>
__device__ __forceinline__ void ckv_store_partials(const float (*so)[MG][HD],
                                                   const float (*sml)[MG][2], int G, int n, int H,
                                                   int x, int h, int split, float *part_o,
                                                   float *part_ml)
{
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
}

#endif
