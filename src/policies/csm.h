/* Pieces of Chunked Soft Matching (policies.md, "centroid") that tests
 * check on their own: the per-round rate and the chunk partition. */
#ifndef CKV_POLICIES_CSM_H
#define CKV_POLICIES_CSM_H

#include <stdint.h>

typedef enum { CKV_CSM_ALTERNATING, CKV_CSM_SEQUENTIAL, CKV_CSM_RANDOM } ckv_csm_partition;
typedef enum { CKV_CSM_LINEAR, CKV_CSM_CONSTANT } ckv_csm_schedule;

/* Upper bounds of the chunk and of sinks and recent (the policy's
 * parameters); the GPU walk's 32-bit slot indices rest on them. */
enum { CKV_CSM_CHUNK_MAX = 4096, CKV_CSM_PROTECT_MAX = 1 << 20 };

/* r_j in per-mille: max(r_min, r_init - j * r_step), or r_init (constant). */
int64_t ckv_csm_rate(int64_t round, int64_t r_init, int64_t r_step, int64_t r_min,
                     ckv_csm_schedule schedule);

/* Merges in a round: min(ceil(rate * candidates), excess), integers. */
int64_t ckv_csm_merges(int64_t rate_permille, int64_t candidates, int64_t excess);

/* Marks in_a[o] = 1 for the local offsets o of a chunk of length L that go
 * to the source set A, 0 for the destination set B. The random partition
 * seeds SplitMix64 with seed + 0x9E3779B97F4A7C15 * (1 + ((round * layers +
 * l) * heads + h) * 2^20 + chunk), modulo 2^64. */
void ckv_csm_partition_chunk(ckv_csm_partition kind, uint64_t seed, int64_t round, int32_t layers,
                             int32_t l, int32_t heads, int32_t h, int32_t chunk, int32_t L,
                             uint8_t *in_a);

#endif
