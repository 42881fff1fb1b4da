// A decoder with random bf16 weights of a real model's shapes, made on the
// device (an 8B model never passes through the host, let alone in fp32),
// and caches filled with random entries: what `ckv bench decode` times.
#include <math.h>
#include <stdlib.h>

#include "cuda.h"
#include "cuda_check.h"
#include "cuda_kernels.h"
#include "cuda_state.h"

namespace {

struct Synth {
    uint64_t seed;
    uint64_t tensor;  // counts the tensors, so each gets its own stream of values
};

// A bf16 [rows][cols] matrix uniform in +-1/sqrt(cols): with inputs of unit
// scale the outputs keep unit scale, so activations stay finite through the
// layers.
ckv_status matrix(ckv_gpu *g, Synth *s, ckv_bf16 **dst, size_t rows, size_t cols, ckv_error *err)
{
    const float a = 1.0f / sqrtf((float)cols);
    ckv_status st = ckv_gpu_dalloc(&g->bytes, dst, rows * cols * sizeof(ckv_bf16), err);
    return st ? st
              : ckv_k_fill_uniform_bf16(*dst, rows * cols, -a, a, s->seed + s->tensor++, g->stream,
                                        err);
}

// An fp32 vector uniform in [lo, hi).
ckv_status vec(ckv_gpu *g, Synth *s, float **dst, size_t n, float lo, float hi, ckv_error *err)
{
    ckv_status st = ckv_gpu_dalloc(&g->bytes, dst, n * sizeof(float), err);
    return st ? st : ckv_k_fill_uniform(*dst, n, lo, hi, s->seed + s->tensor++, g->stream, err);
}

ckv_status random_weights(ckv_gpu *g, const void *ctx, ckv_error *err)
{
    Synth s = {*static_cast<const uint64_t *>(ctx), 0};
    const ckv_config *c = &g->cfg;
    const size_t E = c->n_embd, V = c->n_vocab, F = c->n_ff, hd = c->head_dim, H = c->n_head,
                 KV = c->n_head_kv;
    g->layers = static_cast<ckv_gpu_layer *>(calloc((size_t)c->n_layer, sizeof(ckv_gpu_layer)));
    if (!g->layers)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cuda: out of host memory");
    // Norm weights near 1, as trained ones start; embeddings of unit scale.
    ckv_status st;
    if ((st = vec(g, &s, &g->embd, V * E, -1, 1, err)) ||
        (st = matrix(g, &s, &g->out_w, V, E, err)) ||
        (st = vec(g, &s, &g->out_norm, E, 0.9f, 1.1f, err)))
        return st;
    for (int l = 0; l < c->n_layer; l++) {
        ckv_gpu_layer *D = &g->layers[l];
        if ((st = matrix(g, &s, &D->wqkv, (H + 2 * KV) * hd, E, err)) ||
            (st = matrix(g, &s, &D->wo, E, H * hd, err)) ||
            (st = matrix(g, &s, &D->wgu, 2 * F, E, err)) ||
            (st = matrix(g, &s, &D->wdown, E, F, err)) ||
            (st = vec(g, &s, &D->attn_norm, E, 0.9f, 1.1f, err)) ||
            (st = vec(g, &s, &D->ffn_norm, E, 0.9f, 1.1f, err)) ||
            (c->qkv_bias && (st = vec(g, &s, &D->bias, (H + 2 * KV) * hd, -0.1f, 0.1f, err))) ||
            (c->qk_norm && ((st = vec(g, &s, &D->q_norm, hd, 0.9f, 1.1f, err)) ||
                            (st = vec(g, &s, &D->k_norm, hd, 0.9f, 1.1f, err)))))
            return st;
    }
    CKV_CUDA(cudaStreamSynchronize(g->stream));
    return CKV_OK;
}

}  // namespace

extern "C" ckv_status ckv_gpu_create_synthetic(ckv_gpu **out, const ckv_config *cfg,
                                               int32_t device, int32_t max_batch, uint64_t seed,
                                               ckv_error *err)
{
    return ckv_gpu_create_with(out, cfg, NULL, device, max_batch, random_weights, &seed, err);
}

extern "C" ckv_status ckv_gpu_cache_fill_random(ckv_gpu_cache *c, int32_t entries, int64_t n_pos,
                                                float max_degree, uint64_t seed, ckv_error *err)
{
    if (entries < 0 || entries > c->capacity || n_pos < entries || max_degree < 1)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "cuda: cannot fill %d entries at position %lld with degrees up to %g "
                          "into a cache of capacity %d",
                          entries, (long long)n_pos, max_degree, c->capacity);
    const size_t lists = (size_t)c->n_layer * c->n_head_kv, T = (size_t)c->capacity;
    ckv_status st;
    // Keys and values of unit scale, as the projections of unit-scale
    // activations give; degrees 1 for a full cache, else uniform in
    // [1, max_degree).
    const size_t kv = lists * T * c->head_dim;
    if ((st = ckv_k_fill_uniform_kv(c->k, c->dtype, kv, -1, 1, seed, NULL, err)) ||
        (st = ckv_k_fill_uniform_kv(c->v, c->dtype, kv, -1, 1, seed + 1, NULL, err)) ||
        (st = ckv_k_fill_uniform(c->deg, lists * T, 1, max_degree, seed + 2, NULL, err)))
        return st;
    if (c->score)
        CKV_CUDA(cudaMemset(c->score, 0, lists * T * sizeof(float)));
    if ((st = ckv_gpu_cache_drop_pending(c, err)))
        return st;
    for (size_t j = 0; j < lists; j++)
        c->len_h[j] = entries;
    CKV_CUDA(cudaMemcpy(c->len_d, c->len_h, lists * sizeof(int32_t), cudaMemcpyHostToDevice));
    CKV_CUDA(cudaMemcpy(c->pos_d, &n_pos, sizeof(int64_t), cudaMemcpyHostToDevice));
    CKV_CUDA(cudaDeviceSynchronize());
    c->n_pos = n_pos;
    c->round = 0;
    c->mapped = false;
    return CKV_OK;
}
