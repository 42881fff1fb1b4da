/* The registered policies (one file each in src/policies/). */
#ifndef CKV_POLICIES_POLICIES_H
#define CKV_POLICIES_POLICIES_H

#include "policy.h"

extern const ckv_policy_ops ckv_policy_full;
extern const ckv_policy_ops ckv_policy_streaming;
extern const ckv_policy_ops ckv_policy_snapkv;
extern const ckv_policy_ops ckv_policy_h2o;
extern const ckv_policy_ops ckv_policy_kmeans;
extern const ckv_policy_ops ckv_policy_centroid;

/* ckv_policy_compress with p a K-Means policy, which also hands out each
 * compressed list's final centroids (the unit vectors its last assignment
 * took: after iters updates) for the GPU's parity checks: centroids holds
 * [n_layer * n_head_kv][k][head_dim] doubles, k = budget - sinks - recent;
 * list lh's k rows are written where it is compressed (longer than budget,
 * k under its middle's length), the others' left as they were. NULL: as
 * ckv_policy_compress. */
ckv_status ckv_kmeans_compress(const ckv_policy *p, ckv_cache *c, int32_t budget,
                               int32_t *assign, double *centroids, ckv_error *err);

#endif
