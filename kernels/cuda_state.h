// The decoder's and the GPU cache's state, shared by the .cu files that work
// on them (the decoder, policies, benchmarks); C code sees only the opaque
// types of cuda.h.
#ifndef CKV_KERNELS_CUDA_STATE_H
#define CKV_KERNELS_CUDA_STATE_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cuda.h"
#include "cuda_kernels.h"

struct ckv_gpu_layer {
    ckv_bf16 *wqkv;  // [(H + 2 KV) hd][E]: wq, wk, wv stacked
    ckv_bf16 *wo;    // [E][H hd]
    ckv_bf16 *wgu;   // [2 n_ff][E]: w_gate, w_up stacked
    ckv_bf16 *wdown; // [E][n_ff]
    float *attn_norm, *ffn_norm, *bias, *q_norm, *k_norm;
};

// The most segments a prefill pass runs in one launch a layer (ckv_gpu's
// pseg_tab).
constexpr int32_t CKV_GPU_PASS_SEGS = 64;

// Rows [row, row + n) of a pass belong to one cache: a prefill pass is one
// segment for each sequence it reaches, a decode batch n segments of one row
// each.
struct ckv_gpu_seg {
    ckv_gpu_cache *c;
    int32_t row, n;
};

// Which caches (by id, [max_batch]) and options a decode step ran with.
struct ckv_gpu_step_key {
    uint64_t *ids;
    int32_t n, flags;
};

struct ckv_gpu {
    ckv_config cfg;
    // max_batch: the rows of a decode batch and of one logits GEMM (logits,
    // q_rows, seq_tab, seg, next, the step keys); pass_rows (>= max_batch):
    // the rows of a pass's activations (tok, x, y, qkv, gu, xb, att, hb, ws),
    // the most prompt tokens a prefill pass takes.
    int32_t device, max_batch, pass_rows, n_sm;
    double peak_bw;  // bytes/s, for the decode attention's plan
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;
    float *embd;        // [n_vocab][E] fp32, for the gather
    ckv_bf16 *out_w;    // [n_vocab][E]
    float *out_norm;
    double *inv_freq;
    ckv_gpu_layer *layers;
    int32_t *tok, *next; // a step's tokens in, its greedy next tokens out
    float *x, *y, *qkv, *gu, *logits, *ws;
    float *q_rows;      // [max_batch][n_layer][n_head][head_dim]: a decode batch's queries
    ckv_bf16 *xb, *att, *hb;
    size_t ws_floats, bytes, pass_bytes;  // pass_bytes: the activations' share of bytes
    ckv_bf16 *staging;  // host, largest matrix
    ckv_gpu_seg *seg;   // host, [max_batch]: the rows of a decode batch
    // The last decode step captured as a CUDA Graph and the caches (by id)
    // and options it was captured for; the last step run without one; the
    // pinned buffers a step copies through.
    bool use_graphs;
    cudaGraphExec_t graph_exec;
    ckv_gpu_step_key graph_key, eager_key;
    // The cache layers of the batch's sequences, [n_layer][max_batch], on the
    // device (seq_tab) and staged in pinned memory, for the batch tab_key;
    // its largest capacity and whether any sequence tracks scores.
    ckv_k_kv_layer *seq_tab, *seq_tab_h;
    ckv_gpu_step_key tab_key;
    int32_t tab_capacity;
    bool tab_scores;
    bool tab_defer;  // the batch's scores deferred (ckv_k_attention_seqs' CKV_K_SCORES_DEFER)
    ckv_kv_dtype tab_dtype;  // every cache of the batch's (checked by ckv_gpu_decode_batch)
    // A prefill pass's segments for the one-launch kernels (ckv_k_segments;
    // passes of 2 to CKV_GPU_PASS_SEGS segments over caches of one type
    // without scores): the cache layers [n_layer][CKV_GPU_PASS_SEGS] and the
    // row and tile starts [2][CKV_GPU_PASS_SEGS + 1], on the device and
    // staged in host memory.
    ckv_k_kv_layer *pseg_tab, *pseg_tab_h;
    int32_t *pseg_idx, *pseg_idx_h;
    // The decode's logit scratch (ckv_k_kv_layer.logit): n_head x capacity
    // floats per cache that tracks scores, the batch's side by side,
    // shared by the layers. Grown outside any capture (batch_table,
    // prefill); a graph reaches it only through seq_tab.
    float *logit;
    size_t logit_floats;
    int32_t *pin_tok, *pin_next;
    float *pin_logits, *pin_q;
    int32_t pin_rows;
};

struct ckv_gpu_cache {
    int32_t n_layer, n_head_kv, head_dim, capacity;
    ckv_kv_dtype dtype;  // of k and v
    void *k, *v;
    float *deg, *score;
    int32_t *len_d, *len_h;
    int64_t *pos_d;  // the device copy of n_pos (qkv_post reads it)
    int64_t n_pos;
    uint64_t id;     // unique per cache made, so a captured graph never outlives its cache
    int32_t round;  // CSM round counter, kept for the host cache (policies.md)
    size_t bytes;
    // Where a slot's entry sits once the calls of centroid, StreamingLLM or
    // H2O fill the rows they free with the list's last rows instead of
    // shifting every survivor (cuda_compact.cu, the fill): slot s <
    // row_len[list] of a list is at row row[list][s], a later slot at its
    // own row. The attention reads rows [0, len), whose order it does not
    // depend on; what needs the slot order (the policies, a download) goes
    // through the map. Taken at such a policy's first call (row NULL until
    // then); mapped false: every slot at its own row (a reset, upload or
    // random fill).
    int32_t *row, *row_len;
    bool mapped;
    // H2O's deferred scores (ckv_k_kv_layer's pq, pml, plen; bf16 caches
    // that track scores, else NULL): per layer, room for groups up to
    // CKV_K_SCORES_DEFER_GROUP. ptab: the n_layer layers' table (device) a
    // flush reads. pend: a batch decode deferred masses that no flush has
    // added since, from a step of group pgroup and degree bias pbias (which
    // the flush repeats).
    float *pq, *pml;
    int32_t *plen;
    ckv_k_kv_layer *ptab;
    bool pend, pbias;
    int32_t pgroup;
};

// Allocates c's map (once; counted in its bytes), not yet mapped.
ckv_status ckv_gpu_cache_take_map(ckv_gpu_cache *c, ckv_error *err);

// Forgets c's deferred masses without adding them: for calls that write
// every score anew (a reset, upload, random fill, poison).
ckv_status ckv_gpu_cache_drop_pending(ckv_gpu_cache *c, ckv_error *err);

// Slot s of list lh's row under the map (row NULL: the slot's own).
__host__ __device__ static inline int32_t ckv_row_of(const int32_t *row, const int32_t *row_len,
                                                     int32_t lh, int32_t cap, int32_t s)
{
    return row && s < row_len[lh] ? row[(size_t)lh * cap + s] : s;
}

// Device memory counted into *total; the message names the size.
ckv_status ckv_gpu_dalloc(size_t *total, void *pp, size_t bytes, ckv_error *err);

// Allocates and fills the decoder's weights (g->layers, embd, out_w,
// out_norm); runs after the stream and cuBLAS exist, before the scratch.
typedef ckv_status (*ckv_gpu_weights_fn)(ckv_gpu *g, const void *ctx, ckv_error *err);

// The decoder for `cfg` with weights from `load`: ckv_gpu_create loads a
// model's, ckv_gpu_create_synthetic makes random ones on the device.
ckv_status ckv_gpu_create_with(ckv_gpu **out, const ckv_config *cfg, const float *rope_freqs,
                               int32_t device, int32_t max_batch, ckv_gpu_weights_fn load,
                               const void *ctx, ckv_error *err);

#endif
