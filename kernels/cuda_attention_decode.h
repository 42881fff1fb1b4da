// The decode form of the attention's partial and score passes
// for cuda_attention.cu: one query per sequence, all query heads of a KV
// head in one block, so each range of a list is read once.
#ifndef CKV_KERNELS_CUDA_ATTENTION_DECODE_H
#define CKV_KERNELS_CUDA_ATTENTION_DECODE_H

#include <cuda_runtime.h>

#include "cuda_kernels.h"

// What a decode's partial pass does for the sequences whose layers track
// scores (c.score set): nothing (NONE: no sequence does); store each
// entry's logits for the score pass after the merge (NOW); add the last
// deferring step's masses to the scores while walking, the merge keeping
// this step's queries, merged max and 1 / sum and lengths for the next
// (DEFER, the layers' pq, pml, plen set); or only the pending masses, no
// attention (FLUSH). The values are ckv_k_scores' (cuda_kernels.h).
enum ckv_decode_scores {
    CKV_DECODE_NONE = CKV_K_SCORES_NONE,
    CKV_DECODE_NOW = CKV_K_SCORES_NOW,
    CKV_DECODE_DEFER = CKV_K_SCORES_DEFER,
    CKV_DECODE_FLUSH
};

// One query head's attention mass of an entry as a decode adds it to the
// entry's score: exp(logit - merged max) times the merged sum's inverse,
// the logit in natural-log units. Rounded op by op, never contracted, so
// that the score pass and the deferred masses agree bit for bit.
__device__ __forceinline__ float ckv_decode_mass(float logit, float m, float inv_l)
{
    return __fmul_rn(__expf(__fsub_rn(logit, m)), inv_l);
}

// Whether the decode kernel takes this call: one query per sequence (a batch
// of sequences, or n = 1 over one cache) and GQA groups of at most 8.
bool ckv_attention_decode_fits(int32_t n, bool seqs, int32_t n_head, int32_t n_head_kv);

// Whether the tensor-core kernel takes a decode call: every call over bf16
// lists, and over fp32 lists those of groups over 4 (where the CUDA-core
// kernel's products, not the bytes, bound it).
bool ckv_attention_decode_takes_mma(int32_t group, ckv_kv_dtype dtype);
// Whether a decode may defer its masses (CKV_DECODE_DEFER, FLUSH): the
// tensor-core kernel over bf16 lists, groups up to 4 (the last step's
// queries take A's rows the group leaves free).
bool ckv_attention_decode_defers(int32_t group, ckv_kv_dtype dtype);
// Blocks of the partial pass that fit on one SM of the current device at
// once, for head_dim 64 or 128, a group of 1..8 query heads and the lists'
// type (the kernel ckv_attention_decode_takes_mma names); 0 when unknown.
int ckv_attention_decode_resident(int32_t head_dim, int32_t group, ckv_kv_dtype dtype);
// The same for the tensor-core kernel (any group up to 8: its registers do
// not depend on the group).
int ckv_attention_decode_mma_resident(int32_t head_dim, ckv_kv_dtype dtype);

// Partial pass: per (row, query head, split) the unnormalised output, the
// running max and the sum, in the layout attention_merge reads (part_o
// [splits][n][H][HD], part_ml [splits][n][H][2]); an empty range gives
// m = -inf, l = 0, o = 0. mode NOW: a score pass follows; then every
// sequence whose layer has its logit scratch set gets each entry's fp32
// logit stored there (-inf where the softmax takes none); NONE: a kernel
// without the store; DEFER (where ckv_attention_decode_defers, else
// cudaErrorInvalidValue): each sequence whose layer has score and pq set
// gets its pending masses added (the merge saves this step's); FLUSH: only
// those (ckv_k_scores_flush, cuda_kernels.h). seqs (device) NULL: row 0
// over the cache c. dtype: the keys' and values' type, c's or every
// sequence's; the calls ckv_attention_decode_takes_mma names take the
// tensor-core kernel of cuda_attention_decode_mma.cu. Returns the launch's
// error (ckv_pdl_launch).
cudaError_t ckv_attention_decode(const float *q, int32_t q_stride, int32_t n, int32_t n_head,
                                 int32_t n_head_kv, int32_t head_dim, const ckv_k_kv_layer &c,
                                 const ckv_k_kv_layer *seqs, float scale, bool bias,
                                 ckv_k_attention_split split, float *part_o, float *part_ml,
                                 ckv_decode_scores mode, ckv_kv_dtype dtype, cudaStream_t stream);
// The tensor-core form (kernels/cuda_attention_decode_mma.cu), which
// ckv_attention_decode calls where ckv_attention_decode_takes_mma says: the
// same partials, from tensor cores; the logits, when stored, in
// natural-log units as the CUDA-core form's.
cudaError_t ckv_attention_decode_mma(const float *q, int32_t q_stride, int32_t n, int32_t n_head,
                                     int32_t n_head_kv, int32_t head_dim,
                                     const ckv_k_kv_layer &c, const ckv_k_kv_layer *seqs,
                                     float scale, bool bias, ckv_k_attention_split split,
                                     float *part_o, float *part_ml, ckv_decode_scores mode,
                                     ckv_kv_dtype dtype, cudaStream_t stream);

// Score pass, after the partial pass (mode NOW) and the merge (split:
// the partial pass's, whose ranges bound the entries): with the merged max
// and sum ml [n][H][2], adds each entry's attention mass, summed over the
// group's query heads, to the score of every sequence that tracks scores.
// Reads the logits the partial pass stored, not the keys; a layer with
// score set must have logit set.
cudaError_t ckv_attention_decode_score(int32_t n, int32_t n_head, int32_t n_head_kv,
                                       const ckv_k_kv_layer &c, const ckv_k_kv_layer *seqs,
                                       ckv_k_attention_split split, const float *ml,
                                       cudaStream_t stream);

#endif
