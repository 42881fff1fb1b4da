/* The C boundary of the CUDA backend: everything in kernels/ is reached
 * through functions declared here with C linkage. Built only when the `cuda`
 * option finds nvcc and cuBLAS (CKV_HAVE_CUDA). */
#ifndef CKV_KERNELS_CUDA_H
#define CKV_KERNELS_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "cpu.h"
#include "model.h"
#include "policy.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int32_t index;
    char name[256];
    int32_t cc_major, cc_minor;
    int32_t sm_count;
    size_t mem_total;
    size_t mem_free;
    double peak_bw; /* bytes/s, ckv_cuda_peak_bandwidth */
} ckv_cuda_device;

/* Number of usable GPUs; CKV_ERR_DEVICE (with the CUDA message) when there
 * is no driver or no device. */
ckv_status ckv_cuda_device_count(int32_t *count, ckv_error *err);
ckv_status ckv_cuda_device_query(int32_t index, ckv_cuda_device *out, ckv_error *err);
/* The device's peak memory bandwidth in bytes/s, from the memory clock and
 * bus width CUDA reports (two transfers a clock): what the decode attention
 * plans against (src/attention_plan.h), not a measured rate. */
ckv_status ckv_cuda_peak_bandwidth(int32_t index, double *bytes_per_s, ckv_error *err);

/* Programmatic dependent launch (kernels/cuda_pdl.cuh) of the forward
 * pass's kernels: each may start while the one before it drains, which hides
 * the launch gaps of a decode step. On by default, off when CKV_PDL=0 at the
 * first use; process-wide; takes effect for the launches that follow (a
 * decode step captured as a graph under the other setting is captured
 * again). Only scheduling changes: results are bit-identical either way. */
void ckv_cuda_set_pdl(bool on);
/* Whether launches use it now: the switch, on a device of compute
 * capability 9.0 or more (asked of the current device once). */
bool ckv_cuda_pdl(void);

/* A batch decode over caches that track scores (H2O's) adds each step's
 * attention mass to the scores during the next step's walk over the keys
 * (kernels/cuda_attention_decode_mma.cu), instead of storing every entry's
 * logits for a score pass: bf16 caches, groups up to 4. Anything that reads
 * or moves the scores (a policy call, a download, a fork) first adds what
 * is pending (ckv_gpu_cache_settle), so the scores it sees are bit for bit
 * those of the score pass. On by default, off when CKV_DEFER_SCORES=0 at
 * the first use; process-wide; takes effect for the steps that follow. */
void ckv_cuda_set_defer_scores(bool on);
bool ckv_cuda_defer_scores(void);

/* Hopper's warpgroup MMA (wgmma) instead of the warp-level mma.sync form
 * for the prefill attention over bf16 lists (kernels/cuda_attention_prefill.cu)
 * and K-Means's estimate (kernels/cuda_kmeans.cu): on by default, off when
 * CKV_WGMMA=0 at the first use; process-wide; takes effect for the launches
 * (K-Means: the calls) that follow. The prefill's two forms round q and the
 * probabilities to bf16 and accumulate in fp32, summing in different
 * orders; K-Means's give the same clusters. */
void ckv_cuda_set_wgmma(bool on);
/* Whether those kernels take the wgmma form now: the switch, in a build for
 * sm_90a (meson option gpu_arch, the default), on a device of compute
 * capability 9.0. */
bool ckv_cuda_wgmma(void);

/* K-Means's lazy features (kernels/cuda_kmeans.cu, km_lazy_call): a call
 * that stores no f64 feature but each key's norm, and forms, right before
 * each kernel that reads features, exactly the rows it reads. OFF: never;
 * ON: every call with the estimate (head_dim 64 or 128), at any shape (the
 * tests'); AUTO (the default): decode-time calls whose features are mostly
 * unread. CKV_KM_LAZY=0 / 1 at the first use gives OFF / ON; process-wide;
 * takes effect for the calls that follow. The compressed caches are
 * bit-identical either way: a lazy call's bf16 splits, which only the
 * estimate and the pass over moved centroids read, may differ in their last
 * bits, inside their bounds. */
typedef enum { CKV_KM_LAZY_OFF = 0, CKV_KM_LAZY_ON = 1, CKV_KM_LAZY_AUTO = 2 } ckv_km_lazy;
void ckv_cuda_set_km_lazy(ckv_km_lazy mode);
ckv_km_lazy ckv_cuda_km_lazy(void);

/* The decoder on one GPU: the model's weights dequantised once (from the
 * host fp32 copy in ckv_model) to bf16 for cuBLAS (fp32 accumulation);
 * norms, biases, the embedding table and all activations between GEMMs in
 * fp32. It mirrors ckv_cpu (cpu.h) step by step. */
typedef struct ckv_gpu ckv_gpu;

/* A KV cache on the GPU with the layout of ckv_cache (cache.h): keys and
 * values of its ckv_kv_dtype (fp32 or bf16), fp32 degrees, lengths per
 * (layer, KV head) on the device and mirrored on the host. */
typedef struct ckv_gpu_cache ckv_gpu_cache;

/* Uploads the model to device `device`. max_batch bounds the rows of a
 * decode batch and the tokens a prefill runs at once (longer inputs are
 * split; ckv_gpu_set_prefill_rows raises the latter). The model must
 * outlive the decoder only for its configuration; weights are copied. */
ckv_status ckv_gpu_create(ckv_gpu **out, const ckv_model *m, int32_t device, int32_t max_batch,
                          ckv_error *err);
/* A decoder of configuration cfg with random bf16 weights made on the
 * device (matrices uniform in +-1/sqrt(fan_in), norms near 1): the shapes
 * and bytes of a real model without its file, for benchmarks. The RoPE
 * frequencies are plain (no rope_freqs divisors). */
ckv_status ckv_gpu_create_synthetic(ckv_gpu **out, const ckv_config *cfg, int32_t device,
                                    int32_t max_batch, uint64_t seed, ckv_error *err);
void ckv_gpu_free(ckv_gpu *g);
/* Device memory the decoder holds (weights and scratch), in bytes. */
size_t ckv_gpu_bytes(const ckv_gpu *g);
/* Lets a prefill pass (ckv_gpu_forward, ckv_gpu_prefill_batch) take up to
 * `rows` prompt tokens instead of max_batch: larger GEMMs and fewer launches
 * a token, for the activations of `rows` tokens in device memory (counted by
 * ckv_gpu_bytes; about 26 KB a token for SmolLM2-135M and 217 KB for
 * Llama-3.1-8B, plus the attention scratch: kernels/cuda_decoder.cu,
 * size_passes). rows >= max_batch; decode batches and each logits GEMM keep
 * max_batch rows. A decoder that cannot get the memory keeps its old size. */
ckv_status ckv_gpu_set_prefill_rows(ckv_gpu *g, int32_t rows, ckv_error *err);

/* track_score: keep each entry's accumulated attention (H2O), as
 * ckv_cache's score. dtype: how keys and values are stored (cache.h).
 * capacity x head_dim must stay below 2^31 (the kernels' int offsets into
 * a list), else CKV_ERR_UNSUPPORTED. */
ckv_status ckv_gpu_cache_create(ckv_gpu_cache **out, const ckv_gpu *g, int32_t capacity,
                                bool track_score, ckv_kv_dtype dtype, ckv_error *err);
/* A cache of the given shape without a decoder (policy kernels, tests,
 * benchmarks), on the current device. */
ckv_status ckv_gpu_cache_create_shape(ckv_gpu_cache **out, int32_t n_layer, int32_t n_head_kv,
                                      int32_t head_dim, int32_t capacity, bool track_score,
                                      ckv_kv_dtype dtype, ckv_error *err);
void ckv_gpu_cache_free(ckv_gpu_cache *c);
size_t ckv_gpu_cache_bytes(const ckv_gpu_cache *c);
int32_t ckv_gpu_cache_capacity(const ckv_gpu_cache *c);
bool ckv_gpu_cache_tracks_score(const ckv_gpu_cache *c);
ckv_kv_dtype ckv_gpu_cache_dtype(const ckv_gpu_cache *c);
/* A deep copy of src (entries, degrees, scores, lengths, position, round) in
 * a new GPU cache of the given capacity (>= src's longest list), on the
 * current device. */
ckv_status ckv_gpu_cache_fork(ckv_gpu_cache **out, ckv_gpu_cache *src, int32_t capacity,
                              ckv_error *err);
/* Longest list and total entries, from the host mirror of the lengths. */
int32_t ckv_gpu_cache_max_len(const ckv_gpu_cache *c);
int64_t ckv_gpu_cache_entries(const ckv_gpu_cache *c);
/* The CSM round counter (policies.md: rounds run so far on this sequence),
 * and setting it (a benchmark continuing a sequence's schedule). */
int32_t ckv_gpu_cache_round(const ckv_gpu_cache *c);
/* Whether the calls of centroid, StreamingLLM or H2O have left rows out of
 * slot order (the cache's slot-to-row map, kernels/cuda_compact.cu): a
 * download puts them back. */
bool ckv_gpu_cache_mapped(const ckv_gpu_cache *c);
/* Gives every list's slots a random order of its rows (seeded): the
 * farthest from slot order the calls that fill (centroid's, StreamingLLM's,
 * H2O's) could leave a cache, for timing their calls there (the entries'
 * values, being random, stay as random). Only those policies take a mapped
 * cache (ckv_gpu_policy_entry_bytes > 0). */
ckv_status ckv_gpu_cache_scramble(ckv_gpu_cache *c, uint64_t seed, ckv_error *err);
void ckv_gpu_cache_set_round(ckv_gpu_cache *c, int32_t round);
/* Empties the cache (lengths 0, position 0, CSM round 0). */
ckv_status ckv_gpu_cache_reset(ckv_gpu_cache *c, ckv_error *err);
/* Sets every list to `entries` random entries (keys and values uniform in
 * +-1, degrees uniform in [1, max_degree), exactly 1 when max_degree is 1)
 * at position n_pos, on the device: a full cache of n_pos tokens, or one
 * compressed to `entries` when entries < n_pos. For benchmarks. */
ckv_status ckv_gpu_cache_fill_random(ckv_gpu_cache *c, int32_t entries, int64_t n_pos,
                                     float max_degree, uint64_t seed, ckv_error *err);
/* Copies a host cache (entries, degrees, scores, lengths, position, round) onto
 * the GPU cache; its lists must fit the GPU cache's capacity. Scores are
 * copied when both track them, zeroed when only the GPU cache does. A bf16
 * cache gets each key and value rounded to nearest even; a bf16 host cache
 * into an f32 GPU cache is refused (CKV_ERR_ARG). */
ckv_status ckv_gpu_cache_upload(ckv_gpu_cache *dst, const ckv_cache *src, ckv_error *err);
/* Copies the GPU cache into a host cache of the same shape and at least
 * the longest list's capacity (a bf16 cache's keys and values widened to
 * fp32, exactly), and its dtype, so that CPU policies on the host cache
 * store as the GPU cache does. */
ckv_status ckv_gpu_cache_download(ckv_gpu_cache *src, ckv_cache *dst, ckv_error *err);
/* Adds the attention masses a batch decode deferred (ckv_cuda_set_defer_scores)
 * to c's scores, on `stream` (NULL: the legacy stream), so that they are
 * those of a decode that did not defer; nothing when none are pending.
 * Download, fork and the policy calls settle the caches they read. */
ckv_status ckv_gpu_cache_settle(ckv_gpu_cache *c, void *stream, ckv_error *err);
/* Whether c has masses a decode deferred that no settle has added yet. */
bool ckv_gpu_cache_pending(const ckv_gpu_cache *c);
/* Settles n caches (ckv_gpu_cache_settle) on the legacy stream once all
 * work queued on the device is done, and waits for it; *ms: the GPU time
 * from the first settle's start to the last one's end (CUDA events), what
 * policy calls over these caches pay before their own work. For the
 * benchmarks (ckv bench throughput, compress). */
ckv_status ckv_gpu_caches_settle_timed(ckv_gpu_cache *const *c, int32_t n, double *ms,
                                       ckv_error *err);

/* As ckv_cpu_forward, with every option: runs n tokens at positions
 * n_pos .. n_pos + n - 1 (in passes of the prefill rows; the same code as
 * ckv_gpu_prefill_batch of one sequence), appending degree-1 entries,
 * writes the last token's logits (all tokens' with opts->all_logits) unless
 * logits is NULL, the window queries with opts->q_window, and accumulates
 * attention into the scores when the cache tracks them. */
ckv_status ckv_gpu_forward(ckv_gpu *g, ckv_gpu_cache *c, const int32_t *tokens, int32_t n,
                           const ckv_forward_opts *opts, float *logits, ckv_error *err);

/* Prefills k sequences at once: sequence i's n[i] >= 1 tokens tokens[i]
 * are appended to caches[i] (k distinct caches of the decoder's shape, f32
 * or bf16, with or without scores) at its own positions, as k calls of
 * ckv_gpu_forward would, with the degree bias unless no_degree_bias. The
 * tokens run in passes of up to the prefill rows (max_batch, or
 * ckv_gpu_set_prefill_rows), filled with consecutive sequences' tokens
 * (a sequence may span passes); each pass's projections and FFN run over all
 * its rows, each sequence's rows attend over its own cache. Into host
 * memory, each when not NULL: logits [k][n_vocab], row i sequence i's last
 * token's, and next [k], its greedy next token (ckv_argmax of that row,
 * found on the device). Every argument is checked before any work is queued
 * (CKV_ERR_ARG naming the sequence and value: a token id, a cache without
 * room, one cache twice), so a refused call changes no cache. Only the
 * last tokens' logits: for every token's, or the window queries, call
 * ckv_gpu_forward. */
ckv_status ckv_gpu_prefill_batch(ckv_gpu *g, ckv_gpu_cache *const *caches,
                                 const int32_t *const *tokens, const int32_t *n, int32_t k,
                                 bool no_degree_bias, float *logits, int32_t *next,
                                 ckv_error *err);

/* As ckv_cpu_decode_batch: one decode step for n distinct caches, token i
 * appended to caches[i] at its own position; into host memory, each when
 * not NULL: logits [n][n_vocab], next [n] (each row's greedy next token,
 * ckv_argmax of its logits, found on the device: n integers cross to the
 * host instead of n rows of logits; next may be tokens itself, which is
 * read first) and each row's post-RoPE queries
 * q_out [n][n_layer][n_head][head_dim]. The projections and FFN run over all
 * rows at once; each row attends over its own cache. */
ckv_status ckv_gpu_decode_batch(ckv_gpu *g, ckv_gpu_cache *const *caches, const int32_t *tokens,
                                int32_t n, bool no_degree_bias, float *logits, int32_t *next,
                                float *q_out, ckv_error *err);
/* Compression policies on the GPU (kernels/cuda_policy.cu and the files it
 * names): the same decisions and values as ckv_policy_compress on a host
 * copy of the cache (policies.md; values to fp32 rounding, decisions
 * identical except near-ties), all (layer, KV head) lists at once. */

/* Whether ckv_gpu_policy_compress implements the policy with its current
 * parameters (it may still return CKV_ERR_UNSUPPORTED for a cache shape,
 * e.g. a head_dim whose K-Means tiles do not fit in shared memory). */
bool ckv_gpu_policy_supported(const ckv_policy *p);
/* Device bytes a GPU cache holds per entry of each list for policy p beyond
 * its keys, values, degrees and scores: 4 for the slot-to-row map of the
 * policies whose calls fill the rows they free (centroid, StreamingLLM,
 * H2O; taken at the first call: cuda_compact.cu, the fill), else 0. */
int32_t ckv_gpu_policy_entry_bytes(const ckv_policy *p);

/* Device memory the policy scratch of device `device` holds, in bytes: two
 * scratches a device, one for calls over one cache and one for calls over
 * several (ckv_gpu_policy_compress_many), each shared by its calls and grown
 * to the largest (0 before the first GPU compression there). */
size_t ckv_gpu_policy_scratch_bytes(int32_t device);
/* Frees both policy scratches of device `device` (the next call takes them
 * again), for a process that moves on to other shapes, as a benchmark's
 * rows do. Not while a call runs on that device. */
void ckv_gpu_policy_scratch_release(int32_t device);

/* Optional outputs for parity checks. */
typedef struct {
    /* Host [n_layer * n_head_kv * GPU capacity], in and out, as the assign
     * map of ckv_policy_compress; NULL: not tracked. */
    int32_t *assign;
    /* Host [n_layer * n_head_kv]: per list, the smallest gap between the
     * score that won a decision and the best losing one (CSM partner
     * choice and top-m cut, K-Means assignments, SnapKV/H2O cut), as a
     * float; FLT_MAX where no decision was taken. NULL: not reported. */
    float *margin;
    /* Host, one value: the rows K-Means's assignments after an update
     * kept without the estimate over every centroid (the moved-centroid
     * bound, kernels/cuda_kmeans.cu), over the call; 0 for other
     * policies. NULL: not counted. */
    int64_t *kept;
    /* Host, one value: the rows K-Means's first assignment gave their own
     * centroid without the estimate (the own pass, kernels/cuda_kmeans.cu),
     * over the call; 0 for other policies. NULL: not counted. */
    int64_t *own;
    /* Host [n_layer * n_head_kv * capacity]: 1 at list lh's byte lh *
     * capacity + m where the own pass gave middle row m (slot sinks + m)
     * its own centroid, else 0; all 0 for other policies. NULL: not
     * reported. */
    uint8_t *own_rows;
    /* Host [n_layer * n_head_kv][k][head_dim], k = budget - sinks -
     * recent: K-Means's final centroids (those its last assignment took)
     * of each list it compressed, as ckv_kmeans_compress hands them out,
     * where iters > 0; every other list's rows, and every row of other
     * policies and of iters = 0, left as they were. NULL: not reported. */
    double *centroids;
    /* Host, one value: of `kept`, the rows whose own centroid the update
     * moved, which took the best moved one (kernels/cuda_kmeans.cu,
     * km_est_decide); 0 for other policies. NULL: not counted. */
    int64_t *joined;
    /* In, for the tests: a K-Means call that takes the lazy features first
     * fills every feature with NaN, so that a row read before it was formed
     * shows in the results. */
    bool poison_lazy;
    /* Host, one value: whether K-Means took the lazy features
     * (ckv_cuda_set_km_lazy); false for other policies. NULL: not
     * reported. */
    bool *lazy;
} ckv_gpu_policy_trace;

/* As ckv_policy_compress(p, host copy, budget, qw, assign, err) on the GPU
 * cache: compresses every list longer than budget, continues the cache's
 * CSM round counter, keeps len_h in step. qw is host memory as on the CPU.
 * Work is queued on `stream` (NULL: the default stream, after waiting for
 * all work queued on the device) and finished before returning. Scratch
 * (about 100 bytes per cache slot; K-Means adds 3 x 8 bytes per key
 * element, 73 per slot (81 once a call took its lazy features) and, with
 * the estimate, 24 KB per list (the own pass's header), SnapKV 8 x group x
 * W bytes per slot) is the device's scratch for one-cache calls, taken at
 * the first call, grown for a larger cache and kept until
 * ckv_gpu_policy_scratch_release: one host thread per device at a time.
 * CKV_ERR_UNSUPPORTED (nothing changed) for a policy or shape it does not
 * implement: the caller may fall back to the CPU. */
ckv_status ckv_gpu_policy_compress(ckv_gpu_cache *c, const ckv_policy *p, int32_t budget,
                                   const ckv_qwindow *qw, ckv_gpu_policy_trace *trace,
                                   void *stream, ckv_error *err);

/* ckv_gpu_policy_compress over n distinct caches of one shape (n_layer,
 * n_head_kv, head_dim, capacity, dtype, scores) in one call: each cache
 * ends as its own call would leave it (its lists, round counter and map
 * alone decide its work), but the launches, the plan upload and the waits
 * are one call's, so a server compressing every sequence due at a step pays
 * the call's fixed part once. The trace's arrays cover the caches' lists in
 * order (n x n_layer x n_head_kv lists). A call over n > 1 caches takes
 * the device's scratch for such calls, sized for all n caches at once (n
 * times one cache's), kept apart from the one-cache calls' scratch so that
 * those do not grow with it. SnapKV and K-Means compress one
 * cache a call (ckv_gpu_policy_many; n > 1: CKV_ERR_UNSUPPORTED, nothing
 * changed), as does a call over more caches than the kernels' int32
 * indexing takes (ckv_gpu_policy_max_caches): split it. */
ckv_status ckv_gpu_policy_compress_many(ckv_gpu_cache *const *c, int32_t n, const ckv_policy *p,
                                        int32_t budget, const ckv_qwindow *qw,
                                        ckv_gpu_policy_trace *trace, void *stream,
                                        ckv_error *err);
/* Whether ckv_gpu_policy_compress_many takes more than one cache a call for
 * policy p. */
bool ckv_gpu_policy_many(const ckv_policy *p);
/* The most caches of that shape one call takes (the kernels' indexing; 0:
 * not even one). */
int32_t ckv_gpu_policy_max_caches(int32_t n_layer, int32_t n_head_kv, int32_t capacity);

/* As ckv_policy_on_decode on the GPU cache. */
ckv_status ckv_gpu_policy_on_decode(ckv_gpu_cache *c, const ckv_policy *p, int32_t budget,
                                    int64_t step, const ckv_qwindow *qw, bool *compressed,
                                    void *stream, ckv_error *err);

/* Fills keys, values, degrees, scores, the row map (and drops it: rows in
 * slot order again) of the cache and the policy scratch of the current
 * device with 0xff bytes (NaN, or -1): tests poison before an upload so that
 * entries a kernel fails to write show. */
ckv_status ckv_gpu_cache_poison(ckv_gpu_cache *c, ckv_error *err);

/* CentroidKV's best-partner walk (kernels/cuda_csm.cu) on one list, for
 * tests: T keys of head_dim d (host, [T][d]; with dt bf16 rounded to it as
 * a bf16 cache stores them), sinks, recent and chunk C (at most 4096), round
 * 0, the partition a ckv_csm_partition (src/policies/csm.h): the
 * alternating and sequential ones by the walk's arithmetic with in_a NULL,
 * the random one from in_a (host, T flags, 1 for a source, at most (C + 1)
 * / 2 in a chunk), as the random partition's kernel would have written
 * them. Host outputs of T entries each, 0xff bytes where
 * the walk writes nothing: key and ival at each candidate's compacted
 * position (sinks + chunk (C + 1) / 2 + its rank among the chunk's
 * sources): its best cosine (-inf without a destination) and slot; partner
 * and gap at each source slot that has a destination: the best one and its
 * cosine minus the second best's (+inf with one destination). */
ckv_status ckv_gpu_csm_best(const float *keys, ckv_kv_dtype dt, int32_t T, int32_t d,
                            int32_t sinks, int32_t recent, int32_t C, int32_t partition,
                            const uint8_t *in_a, double *key, int32_t *ival, int32_t *partner,
                            double *gap, ckv_error *err);

/* ckv_ddiv (kernels/cuda_ddiv.cuh), for tests: q[i] = a[i] / n[i / per]
 * on the GPU, each divisor's reciprocal formed once for its `per`
 * quotients, as the K-Means feature kernel divides a row (host arrays of
 * count and count / per doubles, count a multiple of per). */
ckv_status ckv_gpu_ddiv(const double *a, const double *n, int64_t count, int32_t per, double *q,
                        ckv_error *err);

/* km_own_row (kernels/cuda_kmeans.cu), the middle row that starts K-Means
 * centroid j, floor((2j + 1) M / 2k), on the GPU for n host triples (j, M,
 * k), 0 <= j < k <= M, into row[n], and the same by km_own_walk (the wgmma
 * estimate's, stepped to j by up to 8 tiles of 64) into walk[n]: for tests. */
ckv_status ckv_gpu_kmeans_own_rows(const int32_t *jmk, int64_t n, int32_t *row, int32_t *walk,
                                   ckv_error *err);

/* K-Means's assignment (kernels/cuda_kmeans.cu) on one list, for tests: M
 * features and k centroids of d doubles (host, [M][d] and [k][d]) with the
 * norms the cosines divide by; with `estimate` (head_dim 64 and 128; others
 * ignore it) as the policy assigns, the bf16 estimate first and the exact
 * kernel over the rows it leaves, else the exact kernel over every row.
 * cl[M] holds the previous clusters on entry (a value outside 0..k-1 for
 * none) and on return the centroid of highest cosine (dot / (fnorm cnorm),
 * 0 where a norm is below 1e-30; ties: the lowest index); host outputs:
 * changed whether any row's cluster differs from its previous, best[M] that
 * cosine (with the estimate: the estimate's best of every row), margin the
 * smallest gap of a feature's best cosine to its second best (the
 * multiset's), as the float the policy trace reports (with the estimate:
 * exact where under 2^-12, else a bound between 2^-12 and it), and n_exact
 * the rows the exact kernel assigned. */
ckv_status ckv_gpu_kmeans_assign(const double *f, const double *fnorm, const double *cen,
                                 const double *cnorm, int32_t M, int32_t k, int32_t d,
                                 bool estimate, int32_t *cl, double *best, float *margin,
                                 int32_t *n_exact, bool *changed, ckv_error *err);

/* The assignment's pass over the moved centroids (kernels/cuda_kmeans.cu,
 * km_drift) on one list, for tests: f, fnorm, cen, cnorm, M, k as
 * ckv_gpu_kmeans_assign's, head_dim d 64 or 128; moved[nmoved] the
 * centroids taken as moved (1 to k / 4: the pass runs only then); cl[M]
 * each row's cluster (0 .. k - 1). A row whose cluster did not move starts
 * at bounds (4, -4), so it keeps its cluster unless a norm lies outside
 * the estimate's range, and its second bound becomes the pass's bound on
 * its cosines with the moved centroids: bound[M] (for a row sent on to the
 * assignment over every centroid, the second bound that assignment leaves
 * instead; redo_n counts them, redo[redo_n] lists them in no order, redo
 * NULL: not listed). A row whose cluster moved starts at (4, 4), which
 * sends it on, or with join at (4, -4): every unmoved centroid taken as far
 * below, so that the pass gives it the best moved centroid where that
 * clears the second moved one (a joined row). cl[M] on return: each row's
 * cluster after the pass and the assignment over every centroid. */
ckv_status ckv_gpu_kmeans_moved(const double *f, const double *fnorm, const double *cen,
                                const double *cnorm, int32_t M, int32_t k, int32_t d,
                                const int32_t *moved, int32_t nmoved, bool join, int32_t *cl,
                                float *bound, int32_t *redo, int32_t *redo_n, ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
