/* What the backends of backend.c and backend_cuda.c share: the cache handle
 * (one type, so the sweep holds either) and the CPU backend's table. */
#ifndef CKV_BACKEND_IMPL_H
#define CKV_BACKEND_IMPL_H

#include "backend.h"
#include "cache.h"

struct ckv_gpu_cache;

struct ckv_bcache {
    ckv_cache c;               /* the CPU backend's cache */
    struct ckv_gpu_cache *gpu; /* the CUDA backend's cache */
    size_t gpu_bytes;          /* its device bytes as the backend last counted them (they grow
                                  when a filling policy's first call (centroid, StreamingLLM,
                                  H2O) takes the cache's row map) */
};

/* Stats of a cache of `entries` entries whose longest list has max_len:
 * key and value vectors of dtype plus one fp32 degree per entry, as the GPU
 * stores them (the CPU twin of a bf16 cache holds bf16 values in floats;
 * its bytes are counted as the format's). */
static inline ckv_cache_stats ckv_stats_of(int64_t entries, int32_t max_len, int32_t head_dim,
                                           ckv_kv_dtype dtype)
{
    ckv_cache_stats s = {
        entries, entries * (2 * (int64_t)head_dim * ckv_kv_dtype_size(dtype) + (int64_t)sizeof(float)),
        max_len};
    return s;
}

/* The CUDA backend (backend_cuda.c, CUDA builds only). */
extern const ckv_backend_ops ckv_backend_cuda;

#endif
