// Where a row or block of a prefill pass over several caches belongs
// (ckv_k_segments, cuda_kernels.h), for the kernels that take one.
#ifndef CKV_KERNELS_CUDA_SEGMENTS_CUH
#define CKV_KERNELS_CUDA_SEGMENTS_CUH

#include <stdint.h>

// The last s < n with start[s] <= x (start ascending from start[0] = 0 <=
// x): the segment of row x with start = row, of block x with start = tile.
__device__ __forceinline__ int ckv_segment_of(const int32_t *start, int32_t n, int32_t x)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (start[mid] <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

#endif
