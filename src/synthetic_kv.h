/* Synthetic KV caches for timing policies beyond the model's context:
 * keys drift like real ones (a seeded random walk in key space plus
 * per-token noise, so neighbours are similar and similarity decays with
 * distance), values uniform, H2O scores positive, and window queries near
 * the newest keys. */
#ifndef CKV_SYNTHETIC_KV_H
#define CKV_SYNTHETIC_KV_H

#include <stdint.h>

#include "cache.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Initialises c (capacity = tokens, with scores) filled to tokens entries
 * of degree 1, and *q_window (malloc'd [layers][n_head][w][head_dim]). */
ckv_status ckv_synthetic_kv(ckv_cache *c, float **q_window, int32_t layers, int32_t kv_heads,
                            int32_t n_head, int32_t head_dim, int32_t tokens, int32_t w,
                            uint64_t seed, ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
