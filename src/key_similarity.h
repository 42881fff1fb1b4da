/* The observation behind CentroidKV: keys of nearby tokens are similar.
 * Mean cosine similarity of keys at token distance 1..D, per layer, over
 * every KV head and every pair of slots (t, t + dist) within a list. */
#ifndef CKV_KEY_SIMILARITY_H
#define CKV_KEY_SIMILARITY_H

#include <stdint.h>

#include "cache.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out: [n_layer][max_dist], entry d-1 for distance d (NAN where no pair
 * exists). Cosines of zero-norm keys count as 0. */
ckv_status ckv_key_similarity(const ckv_cache *c, int32_t max_dist, double *out, ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
