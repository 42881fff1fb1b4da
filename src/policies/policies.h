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

#endif
