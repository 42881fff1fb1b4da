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
};

/* Stats of a cache of `entries` entries whose longest list has max_len:
 * fp32 key and value vectors plus one fp32 degree per entry, as both
 * backends store them. */
static inline ckv_cache_stats ckv_stats_fp32(int64_t entries, int32_t max_len, int32_t head_dim)
{
    ckv_cache_stats s = {entries, entries * (2 * (int64_t)head_dim + 1) * (int64_t)sizeof(float),
                         max_len};
    return s;
}

/* The CUDA backend (backend_cuda.c, CUDA builds only). */
extern const ckv_backend_ops ckv_backend_cuda;

#endif
