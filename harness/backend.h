/* A compute backend for the sweep: the few operations a sweep needs, as a
 * table, so a CUDA backend can slot in beside the CPU one.
 *
 * Contract for an implementation (kernels/ for CUDA):
 * - caches are opaque handles the backend owns (device memory is fine);
 *   cache_new makes an empty one of a capacity in entries per (layer, KV
 *   head), with H2O score accumulation when track_score, storing keys and
 *   values as dtype says (cache.h; a fork keeps its source's);
 * - forward runs n tokens at the cache's next positions exactly as
 *   ckv_cpu_forward does (log(degree) bias unless opts->no_degree_bias,
 *   optional last-W query capture into host memory, logits to host memory);
 * - decode_batch runs one token for each of n distinct caches as
 *   ckv_cpu_decode_batch does: row i's logits (and, when q_out is not NULL,
 *   its post-RoPE queries [n_layer][n_head][head_dim]) land at row i of the
 *   host buffers, and each row's results equal a forward of that token alone
 *   (a batch shares weight reads, never numbers between rows);
 * - fork deep-copies a cache (lengths, keys, values, degrees, scores,
 *   position, CSM round) into a new handle of the given capacity;
 * - compress and on_decode apply a policy exactly as ckv_policy_compress and
 *   ckv_policy_on_decode do (the policy contract is policies.md);
 * - stats reports total entries over all (layer, head) lists and the bytes
 *   they occupy at the cache's storage type (keys and values of its dtype,
 *   fp32 degrees).
 * Every operation returns a ckv_status with a message in err. */
#ifndef CKV_BACKEND_H
#define CKV_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu.h"
#include "model.h"
#include "policy.h"
#include "status.h"

typedef struct ckv_bcache ckv_bcache;

typedef struct {
    int64_t entries;   /* sum of the list lengths */
    int64_t bytes;     /* storage of those entries: K, V and degree */
    int32_t max_len;   /* longest list */
} ckv_cache_stats;

typedef struct {
    const char *name; /* "cpu", "cuda", recorded in every result row */
    ckv_status (*create)(void **state, const ckv_model *m, int32_t max_batch, int n_threads,
                         ckv_error *err);
    void (*destroy)(void *state);
    ckv_status (*cache_new)(void *state, ckv_bcache **out, int32_t capacity, bool track_score,
                            ckv_kv_dtype dtype, ckv_error *err);
    void (*cache_free)(void *state, ckv_bcache *c);
    ckv_status (*fork)(void *state, ckv_bcache **out, const ckv_bcache *src, int32_t capacity,
                       ckv_error *err);
    ckv_status (*forward)(void *state, ckv_bcache *c, const int32_t *tokens, int32_t n,
                          const ckv_forward_opts *opts, float *logits, ckv_error *err);
    ckv_status (*decode_batch)(void *state, ckv_bcache *const *caches, const int32_t *tokens,
                               int32_t n, bool no_degree_bias, float *logits, float *q_out,
                               ckv_error *err);
    ckv_status (*compress)(void *state, const ckv_policy *p, ckv_bcache *c, int32_t budget,
                           const ckv_qwindow *qw, ckv_error *err);
    ckv_status (*on_decode)(void *state, const ckv_policy *p, ckv_bcache *c, int32_t budget,
                            int64_t step, const ckv_qwindow *qw, bool *compressed,
                            ckv_error *err);
    ckv_cache_stats (*stats)(void *state, const ckv_bcache *c);
    /* One line on the device and the memory in use and at peak. */
    void (*describe)(void *state, char *buf, size_t size);
} ckv_backend_ops;

typedef struct {
    const ckv_backend_ops *ops;
    void *state;
} ckv_backend;

/* Opens the backend for device "cpu", "cuda" (the first visible GPU) or
 * "auto" (cuda when a GPU is usable, else the CPU, with the reason in
 * fallback when not NULL). "cuda" without a usable GPU, or in a build
 * without CUDA, fails with CKV_ERR_DEVICE and says why. */
ckv_status ckv_backend_open(ckv_backend *b, const char *device, const ckv_model *m,
                            int32_t max_batch, int n_threads, char *fallback,
                            size_t fallback_size, ckv_error *err);
void ckv_backend_close(ckv_backend *b);

/* The CPU implementation (src/cpu.h, src/cache.h, src/policy.h). */
extern const ckv_backend_ops ckv_backend_cpu;

#endif
