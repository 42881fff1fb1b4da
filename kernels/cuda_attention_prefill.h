// The prefill form of the attention's partial pass for cuda_attention.cu on
// tensor cores: n query rows over one cache, Q.K^T and P.V as mma.sync with
// fp32 accumulation, TF32 over fp32 lists and bf16 over bf16 lists (the
// file says what each rounds); and, for a cache that tracks H2O scores, the
// score pass after the merge, on the same products.
#ifndef CKV_KERNELS_CUDA_ATTENTION_PREFILL_H
#define CKV_KERNELS_CUDA_ATTENTION_PREFILL_H

#include <cuda_runtime.h>

#include "cuda_kernels.h"
#include "status.h"

// Query rows per block of 4 warps (16 rows each, one query head): the
// planner counts blocks with it and a pass's segments are cut into such
// blocks (ckv_k_segment_tiles; the 8-warp form takes no segments).
constexpr int CKV_PREFILL_TC_ROWS = 64;

// Per (row, query head, split) the unnormalised output, the running max and
// the sum (natural-log units), in the layout attention_merge reads (part_o
// [splits][n][H][HD], part_ml [splits][n][H][2]); a range in which a row
// sees no entry gives m = -inf, l = 0, o = 0. Row i sees the first
// c.len0[h] + i + 1 entries of KV head h's list; with sg (a pass over
// several caches) each segment's rows over its own cache instead, c unused.
// dtype: the lists' type. With one range (split.splits 1) it writes instead
// what the merge would make of that one range, bit for bit: the outputs
// o / l into out32 or out16 ([n][H][HD], the other NULL) and m, l into ml
// ([n][H][2]); the caller then runs no merge. head_dim 64 or 128 (the
// caller checks). Sets the kernel's shared-memory attributes and launches;
// a failure of either comes back in err.
ckv_status ckv_attention_prefill(const float *q, int32_t q_stride, int32_t n, int32_t n_head,
                                 int32_t n_head_kv, int32_t head_dim, const ckv_k_kv_layer &c,
                                 const ckv_k_segments *sg, ckv_kv_dtype dtype,
                                 float scale, bool bias, ckv_k_attention_split split,
                                 float *part_o, float *part_ml, float *out32, ckv_bf16 *out16,
                                 float *ml, cudaStream_t stream, ckv_error *err);

// After the partial pass and the merge over a cache that tracks scores
// (c.score): adds to each entry's score the probability every row and query
// head of its group gives it, exp(s - M) / L with the merged max M and sum
// L of ml ([n][H][2], natural-log units), the scores s computed again by the
// partial pass's form (one warpgroup where it took two), so that with the
// same roundings of q and the keys. The same rows, ranges (split) and lists
// as ckv_attention_prefill without segments.
ckv_status ckv_attention_prefill_score(const float *q, int32_t q_stride, int32_t n,
                                       int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                                       const ckv_k_kv_layer &c, float scale, bool bias,
                                       ckv_k_attention_split split, const float *ml,
                                       cudaStream_t stream, ckv_error *err);

#endif
