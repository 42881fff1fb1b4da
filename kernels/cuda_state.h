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

struct ckv_gpu {
    ckv_config cfg;
    int32_t device, max_batch, n_sm;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;
    float *embd;        // [n_vocab][E] fp32, for the gather
    ckv_bf16 *out_w;    // [n_vocab][E]
    float *out_norm;
    double *inv_freq;
    ckv_gpu_layer *layers;
    int32_t *tok;
    float *x, *y, *qkv, *gu, *logits, *ws;
    ckv_bf16 *xb, *att, *hb;
    size_t ws_floats, bytes;
    ckv_bf16 *staging;  // host, largest matrix
};

struct ckv_gpu_cache {
    int32_t n_layer, n_head_kv, head_dim, capacity;
    float *k, *v, *deg, *score;
    int32_t *len_d, *len_h;
    int64_t n_pos;
    int32_t round;  // CSM round counter, kept for the host cache (policies.md)
    size_t bytes;
    // Scratch of the policy kernels (cuda_policy.cu), taken at the first
    // compression and kept for the cache's life.
    struct ckv_gpu_policy_ws *policy_ws;
};

void ckv_gpu_policy_ws_free(struct ckv_gpu_policy_ws *ws);

#endif
