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

/* The CUDA backend (backend_cuda.c, CUDA builds only). */
extern const ckv_backend_ops ckv_backend_cuda;

#endif
