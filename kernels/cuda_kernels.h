/* The decoder's GPU kernels one by one, with C linkage, so that the decoder
 * (cuda_decoder.cu) and the parity program (tests/gpu/parity.c) launch the
 * same code. Pointers are device pointers unless named host; every launcher
 * is asynchronous on `stream` (NULL: the default stream) and returns
 * CKV_ERR_DEVICE with CUDA's message when the launch fails. Each kernel's CPU
 * twin is named beside it (src/decoder_ops.h). */
#ifndef CKV_KERNELS_CUDA_KERNELS_H
#define CKV_KERNELS_CUDA_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attention_plan.h"
#include "cache.h"
#include "model.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* bfloat16 bits (the upper half of an fp32): weights and GEMM inputs. */
typedef uint16_t ckv_bf16;

ckv_status ckv_cuda_alloc(void **p, size_t bytes, ckv_error *err);
void ckv_cuda_free(void *p);
ckv_status ckv_cuda_upload(void *dst, const void *host_src, size_t bytes, ckv_error *err);
ckv_status ckv_cuda_download(void *host_dst, const void *src, size_t bytes, ckv_error *err);
/* Fills with 0xff bytes: NaN as fp32 and as bf16, so unwritten outputs show. */
ckv_status ckv_cuda_poison(void *p, size_t bytes, ckv_error *err);
ckv_status ckv_cuda_sync(ckv_error *err);

/* x[i] = table[tokens[i]] (rows of E floats). Twin: memcpy of the fp32 row. */
ckv_status ckv_k_embed(float *x, const float *table, const int32_t *tokens, int32_t n, int32_t E,
                       void *stream, ckv_error *err);

/* Per row i < n: x[i] += add[i] (when add is not NULL), then
 * out[i] = bf16(rmsnorm(x[i]) * w). Twin: ckv_rmsnorm. E a multiple of 4, at
 * most 8192 (else CKV_ERR_UNSUPPORTED); x, add and w 16-byte aligned, out
 * 8-byte aligned; x and add do not overlap. w is read before the kernel waits
 * for the one before it (kernels/cuda_pdl.cuh): a weight, not an output of
 * the forward-pass kernel launched just before. */
ckv_status ckv_k_residual_rmsnorm(float *x, const float *add, const float *w, ckv_bf16 *out,
                                  int32_t n, int32_t E, float eps, void *stream, ckv_error *err);

/* One layer of a KV cache on the GPU: lists of `capacity` entries per KV
 * head, keys and values [n_head_kv][capacity][head_dim] of `dtype` (fp32
 * floats or bf16 bits; every kernel reads them as fp32), degrees and
 * accumulated attention [n_head_kv][capacity] (score NULL: not tracked), the
 * list lengths before the current tokens, and the RoPE position of the first
 * current token. Lengths and position live on the device, so that a captured
 * decode step (CUDA Graph) replays correctly as the cache grows. logit: the
 * decode's scratch for a layer with score set, [n_head][capacity] floats
 * (query head h G + g of KV head h), where the decode kernel's partial pass
 * keeps each entry's logit for its score pass; any layer may share it, as
 * layers run one after another. NULL where score is NULL; calls that are no
 * decode (ckv_k_attention_path_of) ignore it. pq, pml, plen: a batch
 * decode's deferred scores (CKV_K_SCORES_DEFER; else NULL): the last
 * deferring step's queries [n_head][head_dim], its merged max and 1 / sum
 * [n_head][2] (natural-log units), and the entries it saw [n_head_kv],
 * whose masses from that step are not yet in score (0: none pending). */
typedef struct {
    void *k, *v;
    float *deg, *score;
    const int32_t *len0; /* [n_head_kv] */
    int32_t capacity;
    const int64_t *pos0;
    float *logit;
    ckv_kv_dtype dtype;
    float *pq, *pml;
    int32_t *plen;
} ckv_k_kv_layer;

/* How a batch decode brings the scores of its sequences that track them
 * up to date: NONE (none does), NOW (each step's masses are in the scores
 * when the step ends: the partial pass stores each entry's logits in the
 * layer's logit scratch, a score pass reads them), DEFER (each step adds
 * the step before's masses while it reads the keys anyway, and keeps its
 * own in pq, pml, plen for the next; ckv_k_scores_flush then makes the
 * scores whole). DEFER needs ckv_k_scores_defer_fits. */
typedef enum { CKV_K_SCORES_NONE, CKV_K_SCORES_NOW, CKV_K_SCORES_DEFER } ckv_k_scores;
/* The largest GQA group whose last queries fit the decode mma's free rows
 * (and the room a cache keeps for them: pq, pml). */
#define CKV_K_SCORES_DEFER_GROUP 4
bool ckv_k_scores_defer_fits(int32_t n_head, int32_t n_head_kv, ckv_kv_dtype dtype);
/* Adds the pending masses of n layers (tab, device memory; those with
 * score, pq set and plen above 0) to their scores, exactly as the steps
 * that deferred them would have (bit for bit the score pass's values), and
 * sets their plen to 0. max_len: at least the longest plen; scale and
 * degree_bias: the deferring step's. Twin: ckv_attend's acc. */
ckv_status ckv_k_scores_flush(const ckv_k_kv_layer *tab, int32_t n, int32_t n_head,
                              int32_t n_head_kv, int32_t head_dim, int32_t max_len,
                              ckv_kv_dtype dtype, float scale, bool degree_bias, void *stream,
                              ckv_error *err);

typedef struct {
    int32_t n_head, n_head_kv, head_dim;
    const float *bias;       /* [(n_head + 2 n_head_kv) head_dim] (qwen2) or NULL */
    const float *q_norm;     /* [head_dim] (qwen3) or NULL */
    const float *k_norm;
    const double *inv_freq;  /* [head_dim / 2], from ckv_rope_inv_freq */
    ckv_rope_type rope_type;
    float eps;
} ckv_k_qkv_params;

/* qkv holds n rows of [q heads | k heads | v heads] as the projection wrote
 * them. Adds the bias, applies q/k norm and RoPE (token i at position
 * *c->pos0 + i); rotates the queries in place and appends each token's key
 * and value to the cache at len0[h] + i with degree 1 (and score 0). Twins:
 * ckv_rmsnorm, ckv_rope. */
ckv_status ckv_k_qkv_post(float *qkv, int32_t n, const ckv_k_qkv_params *p,
                          const ckv_k_kv_layer *c, void *stream, ckv_error *err);
/* The same for a decode batch: row x is the one new token of sequence x,
 * whose cache layer is seqs[x] (device memory, n_seq entries). */
ckv_status ckv_k_qkv_post_seqs(float *qkv, int32_t n_seq, const ckv_k_qkv_params *p,
                               const ckv_k_kv_layer *seqs, void *stream, ckv_error *err);

/* A prefill pass over several caches: rows row[s] .. row[s + 1] - 1 are
 * the new tokens, in order, of the cache whose layer is tab[s], s < n, with
 * row[0] = 0; tile[s] = the CKV_PREFILL_TC_ROWS-row blocks of the segments
 * before s (ckv_k_segment_tiles). tab, row and tile in device memory; tiles
 * = tile[n], on the host. */
typedef struct {
    const ckv_k_kv_layer *tab;
    const int32_t *row, *tile;
    int32_t n, tiles;
} ckv_k_segments;
/* tile[] from row[] (host arrays of n + 1). */
void ckv_k_segment_tiles(const int32_t *row, int32_t n, int32_t *tile);
/* ckv_k_qkv_post of each segment's rows into its own cache, in one launch. */
ckv_status ckv_k_qkv_post_segs(float *qkv, int32_t n, const ckv_k_qkv_params *p,
                               const ckv_k_segments *sg, void *stream, ckv_error *err);

/* The ranges of a call (src/attention_plan.h). A prefill: about 4 blocks of
 * CKV_PREFILL_TC_ROWS rows per query head and SM, ranges of at least 128
 * entries. A decode (n = 1 or a batch of sequences, GQA groups up to 8):
 * whole waves of the decode blocks CUDA says fit per SM, ranges of at least
 * 64 (dtype: the lists' type, which picks the decode kernel), and within
 * the bound for a card of peak_bw bytes/s (ckv_attention_decode_max_splits;
 * 0: the reference card's). Either way within the scratch of ws_floats and
 * CKV_ATTENTION_MAX_SPLITS ranges. max_len: the longest list after the
 * append. Valid whether or not the cache tracks scores (either prefill
 * kernel). */
ckv_k_attention_split ckv_k_attention_plan(int32_t n, int32_t n_head, int32_t n_head_kv,
                                           int32_t head_dim, int32_t max_len, int32_t n_sm,
                                           double peak_bw, size_t ws_floats, ckv_kv_dtype dtype);
/* The plan for ckv_k_attention_seqs over n_seq sequences (a decode). */
ckv_k_attention_split ckv_k_attention_plan_seqs(int32_t n_seq, int32_t n_head,
                                                int32_t n_head_kv, int32_t head_dim,
                                                int32_t max_len, int32_t n_sm,
                                                double peak_bw, size_t ws_floats,
                                                ckv_kv_dtype dtype);

/* The partial pass a call takes: the decode kernel (one query per sequence,
 * GQA groups up to 8; kernels/cuda_attention_decode.cu), the fp32 prefill
 * kernel (kernels/cuda_attention.cu: a batch of sequences with larger
 * groups), or the tensor-core prefill kernel (kernels/cuda_attention_prefill.cu:
 * one cache, with its score pass when the cache tracks scores), whose form
 * follows the lists' dtype: TF32 over fp32 lists (outputs carry TF32's
 * rounding, about 5e-4 relative), bf16 over bf16 lists (q and the
 * probabilities rounded to bf16, about 2e-3). seqs: ckv_k_attention_seqs. */
typedef enum {
    CKV_ATTN_DECODE,
    CKV_ATTN_PREFILL_F32,
    CKV_ATTN_PREFILL_TF32,
    CKV_ATTN_PREFILL_BF16
} ckv_k_attention_path;
ckv_k_attention_path ckv_k_attention_path_of(int32_t n, bool seqs, int32_t n_head,
                                             int32_t n_head_kv, ckv_kv_dtype dtype);
/* The kernel a path names now, for reports: "decode", "fp32", "tf32
 * mma.sync", and for bf16 lists "bf16 wgmma" or "bf16 mma.sync", whichever
 * form ckv_cuda_wgmma (kernels/cuda.h) gives. */
const char *ckv_k_attention_path_name(ckv_k_attention_path p);
/* The form the tensor-core prefill kernel takes over one cache's lists of
 * dtype with these ranges, for reports and checks: "tf32 mma.sync", "bf16
 * mma.sync", "bf16 wgmma, one warpgroup" or "bf16 wgmma, two warpgroups"
 * (ranges of 2,048 entries or more). */
const char *ckv_k_prefill_form_name(ckv_kv_dtype dtype, ckv_k_attention_split split);

/* Attention of n queries (row i at q + i * q_stride, heads of head_dim) over
 * the layer's lists after their own entries were appended: query i of KV
 * head h sees the first len0[h] + i + 1 entries, logits q.k * scale +
 * log(deg) (without the log term when degree_bias is false), GQA groups of
 * n_head / n_head_kv. The lists are cut into `splits` ranges of split_len
 * entries (ckv_k_attention_plan) whose partial softmax sums are merged.
 * Writes out32 (fp32) or out16 (bf16), [n][n_head * head_dim]; the other is
 * NULL. When c->score is set, each entry's score gains the probability it
 * receives from every query and query head of its group (a second pass; a
 * decode's needs c->logit, else CKV_ERR_ARG). head_dim must be 64 or 128.
 * ckv_k_attention_path_of says which kernel runs. Twin: ckv_attend (its
 * acc). */
ckv_status ckv_k_attention(float *out32, ckv_bf16 *out16, const float *q, int32_t q_stride,
                           int32_t n, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                           const ckv_k_kv_layer *c, float scale, bool degree_bias,
                           ckv_k_attention_split split, float *ws, void *stream, ckv_error *err);
/* A decode batch in one launch: query row x is the one new token of sequence
 * x, which attends over its own cache layer seqs[x] (device memory) exactly
 * as ckv_k_attention with n = 1 would. scores: NONE, or how the sequences
 * whose caches track them (the others are skipped) get their masses: NOW,
 * each with its own logit scratch when the decode kernel takes the batch;
 * DEFER, each with its own pq, pml, plen. dtype: the type of every
 * sequence's keys and values (the host cannot read seqs). */
ckv_status ckv_k_attention_seqs(float *out32, ckv_bf16 *out16, const float *q, int32_t q_stride,
                                int32_t n_seq, int32_t n_head, int32_t n_head_kv,
                                int32_t head_dim, const ckv_k_kv_layer *seqs,
                                ckv_kv_dtype dtype, ckv_k_scores scores,
                                float scale, bool degree_bias, ckv_k_attention_split split,
                                float *ws, void *stream, ckv_error *err);

/* ckv_k_attention of each segment's rows over its own cache (after their
 * appends), in one launch of the tensor-core prefill kernel and at most one
 * merge: the caches track no scores, and their keys and values are of type
 * dtype. n: the pass's rows (sg->row[sg->n]); split from
 * ckv_k_attention_plan(n, ..., the longest list after the appends). */
ckv_status ckv_k_attention_segs(float *out32, ckv_bf16 *out16, const float *q, int32_t q_stride,
                                int32_t n, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                                const ckv_k_segments *sg, ckv_kv_dtype dtype, float scale,
                                bool degree_bias, ckv_k_attention_split split, float *ws,
                                void *stream, ckv_error *err);

/* out[i][j] = bf16(silu(gu[i][j]) * gu[i][n_ff + j]): gate and up side by
 * side as one projection wrote them. Twin: ckv_swiglu. */
ckv_status ckv_k_swiglu(ckv_bf16 *out, const float *gu, int32_t n, int32_t n_ff, void *stream,
                        ckv_error *err);

/* out[r] = the first index of the largest value of row r of x [rows][n],
 * NaNs skipped, 0 when x[r][0] is NaN or the row has no number: greedy
 * decoding's next token. Twin: ckv_argmax (src/sampler.c). */
ckv_status ckv_k_argmax_rows(int32_t *out, const float *x, int32_t rows, int32_t n, void *stream,
                             ckv_error *err);

/* Y[n][out] = X[n][in] . W[out][in]^T: bf16 inputs, fp32 accumulation and
 * output, on the stream of `blas` (a cublasHandle_t): the GEMV of
 * kernels/cuda_gemv.cu at 1 to CKV_GEMV_MAX_ROWS rows for weights under
 * 2^28 elements, where it takes the shape (in a multiple of 8, 16-byte
 * aligned x and w; kernels/cuda_gemm.cu says why), else cuBLAS. Twin:
 * ckv_matmul_nt on the fp32 values of the inputs. */
ckv_status ckv_k_gemm(void *blas, float *y, const ckv_bf16 *x, const ckv_bf16 *w, int32_t n,
                      int32_t in, int32_t out, ckv_error *err);

/* Most rows the GEMV takes (a compile-time bound: one kernel per n, and the
 * n of its tensor-core product). */
#define CKV_GEMV_MAX_ROWS 8

typedef enum {
    CKV_GEMM_AUTO,   /* ckv_k_gemm's choice */
    CKV_GEMM_CUBLAS, /* always cuBLAS */
    CKV_GEMM_GEMV    /* always the GEMV; CKV_ERR_UNSUPPORTED naming the shape where it cannot */
} ckv_gemm_path;

/* ckv_k_gemm through a chosen path. */
ckv_status ckv_k_gemm_via(void *blas, ckv_gemm_path path, float *y, const ckv_bf16 *x,
                          const ckv_bf16 *w, int32_t n, int32_t in, int32_t out, ckv_error *err);

/* The gate|up projection and its SwiGLU: h[n][f] = bf16(silu(g) * u) with
 * g|u = X . W^T, W [2 f][in] (gate rows then up rows). The GEMV writes h
 * from its sums (one kernel); cuBLAS writes g|u to the scratch gu [n][2 f]
 * and ckv_k_swiglu reads it (gu is unused otherwise and may be NULL then).
 * Twin: ckv_matmul_nt then ckv_swiglu_bf16. */
ckv_status ckv_k_gemm_swiglu_via(void *blas, ckv_gemm_path path, ckv_bf16 *h, float *gu,
                                 const ckv_bf16 *x, const ckv_bf16 *w, int32_t n, int32_t in,
                                 int32_t f, ckv_error *err);

/* p[i] = uniform in [lo, hi) from a hash of (seed, i): the same values for
 * the same seed whatever the launch shape. For synthetic weights, caches and
 * benchmark inputs. */
ckv_status ckv_k_fill_uniform(float *p, size_t n, float lo, float hi, uint64_t seed, void *stream,
                              ckv_error *err);
ckv_status ckv_k_fill_uniform_bf16(ckv_bf16 *p, size_t n, float lo, float hi, uint64_t seed,
                                   void *stream, ckv_error *err);
/* The one of the two for n keys or values of a cache of type dtype. */
ckv_status ckv_k_fill_uniform_kv(void *p, ckv_kv_dtype dtype, size_t n, float lo, float hi,
                                 uint64_t seed, void *stream, ckv_error *err);

/* len[j] += n for j < count and *pos += n: the lists grew by the tokens
 * just run. */
ckv_status ckv_k_add_lengths(int32_t *len, int32_t count, int64_t *pos, int32_t n, void *stream,
                             ckv_error *err);
/* The same for n_seq caches in one launch: seqs[x] (device memory) is cache
 * x's layer-0 row of a batch table, whose len0 starts all `count` lengths of
 * that cache (layers one after another) and pos0 is its position. */
ckv_status ckv_k_add_lengths_seqs(const ckv_k_kv_layer *seqs, int32_t n_seq, int32_t count,
                                  int32_t n, void *stream, ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
