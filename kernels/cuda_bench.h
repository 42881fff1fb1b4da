/* GPU micro-benchmarks behind `ckv bench attention` (docs/performance.md):
 * the decoder's attention kernel and its GEMMs (cuBLAS, the GEMV) timed with
 * CUDA events on random device-made inputs, each after a check against its
 * CPU twin.
 * Inputs rotate over enough copies that repeated runs read device memory,
 * not the L2 cache. */
#ifndef CKV_KERNELS_CUDA_BENCH_H
#define CKV_KERNELS_CUDA_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda_kernels.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One attention launch of ckv_k_attention. The batch is folded into the
 * heads: `batch` sequences of n_head_kv lists are batch * n_head_kv lists
 * and batch * n_head_kv * group query heads of one launch (exact: query head
 * j attends to list j / group either way). Every list holds `context`
 * entries after the queries' own; `queries` 1 is a decode step, more is a
 * causal prefill of the last `queries` entries. dtype: how the lists store
 * keys and values (the check's CPU twin reads the same stored values).
 * scores (prefill only): the lists track H2O scores, so that the launch
 * adds each entry's attention mass to them (its score pass). */
typedef struct {
    int32_t batch, n_head_kv, group, head_dim, context, queries;
    bool degree_bias;
    ckv_kv_dtype dtype;
    bool scores;
} ckv_attn_shape;

typedef struct {
    double median_ms, min_ms, max_ms; /* each run alone: launched into an idle stream */
    double stream_ms; /* the median of the same runs enqueued back to back */
    int32_t runs;        /* timed runs, after the warm-up */
    int32_t input_sets;  /* copies of the inputs the runs rotate over */
    /* ckv_bench_attention: the kernel that ran (ckv_k_attention_path_name,
     * or for the tensor-core prefill ckv_k_prefill_form_name); else NULL */
    const char *kernel;
} ckv_bench_timing;

typedef struct ckv_bench_gpu ckv_bench_gpu;

/* A stream, events and a cuBLAS handle on `device`. */
ckv_status ckv_bench_gpu_create(ckv_bench_gpu **out, int32_t device, ckv_error *err);
void ckv_bench_gpu_free(ckv_bench_gpu *b);

/* Runs the shape once on random inputs, lists of different lengths and
 * NaN-poisoned outputs, and returns the relative L2 error against ckv_attend
 * (src/decoder_ops.h) on the CPU; infinite when an output was not written.
 * With scores, the larger of that and the error of the mass the scores
 * gained.
 * Meant for a small shape (the CPU reference is single-threaded). */
ckv_status ckv_bench_attention_check(ckv_bench_gpu *b, const ckv_attn_shape *s, uint64_t seed,
                                     double *rel_err, ckv_error *err);
/* Median of `repeats` timed launches after `warmup` untimed ones, each
 * alone and back to back (ckv_bench_timing). */
ckv_status ckv_bench_attention(ckv_bench_gpu *b, const ckv_attn_shape *s, int32_t warmup,
                               int32_t repeats, uint64_t seed, ckv_bench_timing *t,
                               ckv_error *err);

/* The decoder's GEMM (ckv_k_gemm_via on `path`: cuBLAS or the GEMV) of n
 * random bf16 rows through a [out][in] bf16 weight. With swiglu it is the
 * gate|up projection with its SwiGLU (ckv_k_gemm_swiglu_via; out = 2 f):
 * the GEMV writes the bf16 values in its epilogue, cuBLAS writes fp32
 * gate|up and ckv_k_swiglu reads them (timed with it). The check compares
 * with a double-precision product of the same bf16 values (with swiglu,
 * silu(gate) * up in double against the bf16 outputs); the benchmark times
 * it as above. */
typedef struct {
    ckv_gemm_path path;
    bool swiglu;
    int32_t n, in, out;
    /* k >= 1: cuBLASLt's k-th candidate for the product (kernels/
     * cuda_gemm_lt.h) in place of `path` (with swiglu, before ckv_k_swiglu
     * as the cuBLAS path); 0: `path`. */
    int32_t lt;
} ckv_gemm_case;

ckv_status ckv_bench_gemm_check(ckv_bench_gpu *b, const ckv_gemm_case *c, uint64_t seed,
                                double *rel_err, ckv_error *err);
ckv_status ckv_bench_gemm(ckv_bench_gpu *b, const ckv_gemm_case *c, int32_t warmup,
                          int32_t repeats, uint64_t seed, ckv_bench_timing *t, ckv_error *err);
/* How many of cuBLASLt's candidates (up to max, at most CKV_GEMM_LT_MAX;
 * names holds max) c's product has, 0 where it has none, and each one's
 * configuration in words (names[k], ckv_gemm_lt_name) for its row. The
 * list is the one c.lt indexes: both ask the heuristic for
 * CKV_GEMM_LT_MAX. */
ckv_status ckv_bench_gemm_lt_names(ckv_bench_gpu *b, const ckv_gemm_case *c, int32_t max,
                                   int32_t *count, char (*names)[160], ckv_error *err);
/* The check of a cuBLASLt candidate (c->lt >= 1, a plain product) at its
 * own shape, where a double-precision product on the host would take too
 * long: against cuBLAS's path on the same inputs (itself checked against
 * double by ckv_bench_gemm_check), the fp32 outputs' relative L2. */
ckv_status ckv_bench_gemm_lt_check(ckv_bench_gpu *b, const ckv_gemm_case *c, uint64_t seed,
                                   double *rel_err, ckv_error *err);

/* Whether device buffers a and b hold the same `bytes` (a multiple of 4) at
 * 64 places spread evenly over them, 4 KiB each (the whole of a smaller
 * buffer), the first at their start and the last at their end: the copy
 * rate's check, compared on the host. */
ckv_status ckv_bench_same_sampled(const void *a, const void *b, size_t bytes, bool *same,
                                  ckv_error *err);

/* The device's copy bandwidth, the rate the benchmarks' floors and %copy
 * divide by (a kernel that only reads can pass it): bytes read plus bytes
 * written a second by device-to-device copies (cudaMemcpyAsync) of `bytes`
 * of random words, the median of `repeats` back to back after `warmup`
 * (time_runs' b2b form: the copy's own rate, not the host's launch). The
 * destination, poisoned first, is compared with the source
 * (ckv_bench_same_sampled) before anything is timed. */
ckv_status ckv_bench_copy_rate(ckv_bench_gpu *b, size_t bytes, int32_t warmup, int32_t repeats,
                               double *bps, ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
