/* Operations on one (layer, KV head) entry list that several policies
 * share: key norms, ranking with the contract's tie rule, and the one
 * in-place edit (merge, evict, compact) every policy ends with. Internal to
 * src/policies/. */
#ifndef CKV_POLICIES_LIST_H
#define CKV_POLICIES_LIST_H

#include <stdint.h>

#include "cache.h"
#include "status.h"

/* Euclidean norm in double, its squares summed in index order (K-Means's,
 * which its GPU kernels match bit for bit). Cosines use a norm with the
 * contract's rule: a key whose norm is below 1e-30 has cosine 0 with
 * anything. */
double ckv_norm(const float *a, int32_t d);
/* CentroidKV's dot product and norm, their terms added in the order
 * CentroidKV's GPU walk adds them (cuda_csm.cu), so that its cosines are the
 * CPU's bit for bit. The walk's lanes each load 8 consecutive dimensions of
 * every 32 (lane t: 32q + 8t .. 32q + 8t + 7) and feed them to the FP64
 * tensor cores as they are, with no exchange between lanes:
 * - ckv_csm_dot adds the products a[i] * b[i] (each exact in double) one at
 *   a time, for each 32 dimensions 32q in turn, for s = 0 .. 7, over
 *   i = 32q + s, 32q + 8 + s, 32q + 16 + s, 32q + 24 + s (those under d);
 * - ckv_csm_norm takes four partial sums of squares, p_t over the dimensions
 *   i with (i mod 32) / 8 = t in index order, then sqrt((p_0 + p_1) +
 *   (p_2 + p_3)). */
double ckv_csm_dot(const float *a, const float *b, int32_t d);
double ckv_csm_norm(const float *a, int32_t d);
/* CentroidKV's cosine of a and b is (dot x r_a) x r_b, two multiplies,
 * where r = 1 / norm (correctly rounded) for a norm of at least 1e-30 and 0
 * below it (the contract's zero vectors: cosine 0). The GPU walk takes
 * each key's r once instead of a division per pair (4.6% of its time, run
 * ZZ96; performance-notes.md, "Seventy-first session"). */
double ckv_csm_recip(double norm);
double ckv_csm_cosine(double dot, double ra, double rb);

/* A (score, slot) pair for ranking. */
typedef struct {
    double s;
    int32_t slot;
} ckv_ranked;

/* Sorts by score descending, ties: lower slot first. */
void ckv_rank(ckv_ranked *r, int32_t n);

/* Rewrites list (l, h) of length T = c->len[...] in place. dest[t] is t
 * (kept), -1 (evicted) or another slot d with dest[d] == d (merged into d).
 * A destination with sources becomes the degree-weighted centroid
 * (n_d x_d + sum n_s x_s) / (n_d + sum n_s) of keys and values (rounded
 * to fp32, then stored as the cache stores, ckv_cache_store), its degree
 * the sum, its score (when tracked) the sum. Survivors keep slot order.
 * assign (may be NULL) is this list's row of the assign map: each value, a
 * current slot, is replaced by the slot it ends in (-1 if evicted). */
ckv_status ckv_list_apply(ckv_cache *c, int32_t l, int32_t h, const int32_t *dest, int32_t *assign,
                          ckv_error *err);

/* Evicts every slot whose keep flag is 0 (keep has T entries). */
ckv_status ckv_list_keep(ckv_cache *c, int32_t l, int32_t h, const uint8_t *keep, int32_t *assign,
                         ckv_error *err);

/* Keeps the last `recent` slots and the `budget - recent` highest-scoring
 * of slots [0, T - recent) (ties: lower slot), slot order kept; score has
 * T - recent entries. H2O and SnapKV both end this way. */
ckv_status ckv_list_keep_top(ckv_cache *c, int32_t l, int32_t h, const double *score,
                             int32_t recent, int32_t budget, int32_t *assign, ckv_error *err);

/* Lists compress independently, so policies run them in parallel (OpenMP);
 * of several failing lists, the lowest-numbered one's error is reported, as
 * a serial loop would. */
typedef struct {
    int32_t lh;  /* failing list, INT32_MAX: none */
    ckv_error err;
} ckv_list_failure;

void ckv_list_failure_init(ckv_list_failure *f);
/* Records list lh's failure (thread-safe). */
void ckv_list_failure_note(ckv_list_failure *f, int32_t lh, const ckv_error *e);
/* CKV_OK, or the recorded error copied to err. */
ckv_status ckv_list_failure_take(const ckv_list_failure *f, ckv_error *err);

#endif
