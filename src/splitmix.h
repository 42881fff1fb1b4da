/* SplitMix64 (Steele, Lea, Flood 2014): the project's one seeded
 * generator, chosen because it is tiny and every reference can re-implement
 * it exactly. */
#ifndef CKV_SPLITMIX_H
#define CKV_SPLITMIX_H

#include <stdint.h>

/* Host and device alike: the GPU random partition (kernels/cuda_csm.cu)
 * draws the same numbers as the CPU. */
#ifdef __CUDACC__
#define CKV_SPLITMIX_FN static inline __host__ __device__
#else
#define CKV_SPLITMIX_FN static inline
#endif

CKV_SPLITMIX_FN uint64_t ckv_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif
