// The GPU decoder: ckv_cpu's forward pass (src/cpu.c) with the projections
// and the FFN as bf16 GEMMs (fp32 accumulation and output; cuBLAS, or the
// GEMV of cuda_gemv.cu where ckv_k_gemm takes it: up to CKV_GEMV_MAX_ROWS
// rows of a weight under 2^28 elements) and the rest as the kernels of
// cuda_kernels.h. Per layer: residual add + RMSNorm -> QKV GEMM -> bias, q/k
// norm, RoPE, cache append -> attention -> output GEMM -> residual add +
// RMSNorm -> gate|up GEMM -> SwiGLU -> down GEMM (SwiGLU in the gate|up
// GEMV's epilogue when it runs). The kernels of ours are launched with
// programmatic dependent launch (cuda_pdl.cuh), cuBLAS as usual.
// All device memory is taken in ckv_gpu_create, ckv_gpu_set_prefill_rows and
// ckv_gpu_cache_create; a forward pass allocates nothing, except that the
// decode's logit scratch for caches that track scores grows to the largest
// batch of them seen, before the step's work is enqueued.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "cuda_check.h"
#include "cuda_kernels.h"
#include "cuda_state.h"
#include "decoder_ops.h"
#include "prefill_plan.h"
#include "quant.h"
#include "rng.h"

// Ranges a prefill chunk's attention may split each list into (the plan in
// kernels/cuda_attention.cu picks fewer where lists are short).
constexpr int32_t PREFILL_SPLITS = 8;

static int32_t longest(const int32_t *len, size_t count)
{
    int32_t mx = 0;
    for (size_t i = 0; i < count; i++)
        if (len[i] > mx)
            mx = len[i];
    return mx;
}

static void drop_graph(ckv_gpu *g)
{
    if (g->graph_exec)
        cudaGraphExecDestroy(g->graph_exec);
    g->graph_exec = NULL;
    g->graph_key.n = g->eager_key.n = -1;
}

static ckv_status dalloc(size_t *total, void *pp, size_t bytes, ckv_error *err)
{
    void **p = static_cast<void **>(pp);
    *p = NULL;
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        // Reported here: cleared so that the next launch check does not
        // report it again (a benchmark carries on after a cache that does
        // not fit).
        cudaGetLastError();
        return ckv_errorf(err, CKV_ERR_DEVICE, "cuda: cannot allocate %.1f MiB of device memory: %s",
                          (double)bytes / (1 << 20), cudaGetErrorString(e));
    }
    *total += bytes;
    return CKV_OK;
}

ckv_status ckv_gpu_dalloc(size_t *total, void *pp, size_t bytes, ckv_error *err)
{
    return dalloc(total, pp, bytes, err);
}

static ckv_status upload_f32(ckv_gpu *g, float **dst, const float *src, size_t count, ckv_error *err)
{
    *dst = NULL;
    if (!src)
        return CKV_OK;
    ckv_status st = dalloc(&g->bytes, dst, count * sizeof(float), err);
    if (st)
        return st;
    CKV_CUDA(cudaMemcpy(*dst, src, count * sizeof(float), cudaMemcpyHostToDevice));
    return CKV_OK;
}

// Stacks row-major matrices of `cols` columns (rows[p] rows each) and
// uploads them as one bf16 matrix, rounded to nearest even as the CPU's
// ckv_f32_to_bf16 rounds (gpu_parity's --weights-ref rounds alike).
static ckv_status upload_stacked(ckv_gpu *g, ckv_bf16 **dst, const float *const *parts,
                                 const size_t *rows, int n_parts, size_t cols, ckv_error *err)
{
    size_t off = 0;
    for (int p = 0; p < n_parts; p++)
        for (size_t i = 0; i < rows[p] * cols; i++)
            g->staging[off++] = ckv_f32_to_bf16(parts[p][i]);
    ckv_status st = dalloc(&g->bytes, dst, off * sizeof(ckv_bf16), err);
    if (st)
        return st;
    CKV_CUDA(cudaMemcpy(*dst, g->staging, off * sizeof(ckv_bf16), cudaMemcpyHostToDevice));
    return CKV_OK;
}

static ckv_status upload_bf16(ckv_gpu *g, ckv_bf16 **dst, const float *w, size_t rows,
                              size_t cols, ckv_error *err)
{
    return upload_stacked(g, dst, &w, &rows, 1, cols, err);
}

static ckv_status upload_bias(ckv_gpu *g, float **dst, const ckv_layer *L, ckv_error *err)
{
    const ckv_config *c = &g->cfg;
    *dst = NULL;
    if (!L->bq)
        return CKV_OK;
    const size_t qd = (size_t)c->n_head * c->head_dim, kvd = (size_t)c->n_head_kv * c->head_dim;
    float *host = static_cast<float *>(malloc((qd + 2 * kvd) * sizeof(float)));
    if (!host)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cuda: out of host memory for biases");
    memcpy(host, L->bq, qd * sizeof(float));
    memcpy(host + qd, L->bk, kvd * sizeof(float));
    memcpy(host + qd + kvd, L->bv, kvd * sizeof(float));
    ckv_status st = upload_f32(g, dst, host, qd + 2 * kvd, err);
    free(host);
    return st;
}

// Checks the configuration, then the stream and cuBLAS.
static ckv_status setup(ckv_gpu *g, ckv_error *err)
{
    const ckv_config *c = &g->cfg;
    if (c->n_rot != c->head_dim)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "cuda: partial RoPE (n_rot %d of head_dim %d) is not supported", c->n_rot,
                          c->head_dim);
    if (c->head_dim != 64 && c->head_dim != 128)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED, "cuda: head_dim %d (64 or 128 only)",
                          c->head_dim);
    if (c->n_head % c->n_head_kv)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED, "cuda: %d heads do not group over %d KV heads",
                          c->n_head, c->n_head_kv);
    CKV_CUDA(cudaSetDevice(g->device));
    CKV_CUDA(cudaDeviceGetAttribute(&g->n_sm, cudaDevAttrMultiProcessorCount, g->device));
    ckv_status st = ckv_cuda_peak_bandwidth(g->device, &g->peak_bw, err);
    if (st)
        return st;
    CKV_CUDA(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
    CKV_CUBLAS(cublasCreate(&g->blas));
    CKV_CUBLAS(cublasSetStream(g->blas, g->stream));
    // A fixed cuBLAS workspace, so that no GEMM allocates during a forward pass.
    const size_t blas_ws = 32u << 20;
    st = dalloc(&g->bytes, &g->blas_ws, blas_ws, err);
    if (st)
        return st;
    CKV_CUBLAS(cublasSetWorkspace(g->blas, g->blas_ws, blas_ws));
    return CKV_OK;
}

// The model's weights, converted to bf16 on the host through one staging buffer.
static ckv_status upload_weights(ckv_gpu *g, const void *model, ckv_error *err)
{
    const ckv_model *m = static_cast<const ckv_model *>(model);
    const ckv_config *c = &g->cfg;
    ckv_status st;
    const size_t E = c->n_embd, V = c->n_vocab, F = c->n_ff, hd = c->head_dim,
                 H = c->n_head, KV = c->n_head_kv;
    const size_t qkvd = (H + 2 * KV) * hd;
    size_t biggest = V * E;
    if (2 * F * E > biggest)
        biggest = 2 * F * E;
    if (qkvd * E > biggest)
        biggest = qkvd * E;
    g->staging = static_cast<ckv_bf16 *>(malloc(biggest * sizeof(ckv_bf16)));
    g->layers = static_cast<ckv_gpu_layer *>(calloc((size_t)c->n_layer, sizeof(ckv_gpu_layer)));
    if (!g->staging || !g->layers)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cuda: out of host memory for weight staging");

    if ((st = upload_f32(g, &g->embd, m->tok_embd, V * E, err)) ||
        (st = upload_bf16(g, &g->out_w, m->output, V, E, err)) ||
        (st = upload_f32(g, &g->out_norm, m->output_norm, E, err)))
        return st;
    for (int l = 0; l < c->n_layer; l++) {
        const ckv_layer *L = &m->layers[l];
        ckv_gpu_layer *D = &g->layers[l];
        const float *qkv[3] = {L->wq, L->wk, L->wv}, *gu[2] = {L->w_gate, L->w_up};
        const size_t qkv_rows[3] = {H * hd, KV * hd, KV * hd}, gu_rows[2] = {F, F};
        if ((st = upload_stacked(g, &D->wqkv, qkv, qkv_rows, 3, E, err)) ||
            (st = upload_bf16(g, &D->wo, L->wo, E, H * hd, err)) ||
            (st = upload_stacked(g, &D->wgu, gu, gu_rows, 2, E, err)) ||
            (st = upload_bf16(g, &D->wdown, L->w_down, E, F, err)) ||
            (st = upload_f32(g, &D->attn_norm, L->attn_norm, E, err)) ||
            (st = upload_f32(g, &D->ffn_norm, L->ffn_norm, E, err)) ||
            (st = upload_f32(g, &D->q_norm, L->q_norm, hd, err)) ||
            (st = upload_f32(g, &D->k_norm, L->k_norm, hd, err)) ||
            (st = upload_bias(g, &D->bias, L, err)))
            return st;
    }
    free(g->staging);
    g->staging = NULL;
    return CKV_OK;
}

// The activations of passes of up to `rows` tokens, (re)allocated: the new
// buffers are taken before the old ones are freed, so that a failure leaves
// the decoder as it was. Per row: tok 4 bytes, x and y 4 E each, qkv
// 4 (H + 2 KV) hd, gu 8 F, xb 2 E, att 2 H hd, hb 2 F: 26.1 KB for
// SmolLM2-135M (E 576, H 9, KV 3, hd 64, F 1536), 217 KB for Llama-3.1-8B
// (E 4096, H 32, KV 8, hd 128, F 14336). Plus the attention scratch: room
// for PREFILL_SPLITS ranges of a 512-row (or max_batch) chunk, since with one
// a 512-row chunk of SmolLM2 ran 144 blocks of 4 warps on 132 SMs (ncu,
// docs/gpu.md), and for one range of a whole pass (a segment as long as the
// pass has row blocks enough without ranges): H (hd + 2) floats a row-range
// (2.4 KB for SmolLM2, 16.6 KB for the 8B), 4096 or `rows` of them,
// whichever is more. So 4096 rows take 107 + 10 MB for SmolLM2 and 889 + 68
// MB for the 8B (its weights: 16 GB), 8192 rows 214 + 19 MB and 1778 + 136
// MB; 512 rows (max_batch of `ckv generate`) 13 + 10 MB and 111 + 68 MB.
static ckv_status size_passes(ckv_gpu *g, int32_t rows, ckv_error *err)
{
    const ckv_config *c = &g->cfg;
    const size_t E = c->n_embd, F = c->n_ff, hd = c->head_dim, H = c->n_head,
                 KV = c->n_head_kv, R = (size_t)rows;
    const int32_t chunk = g->max_batch > 512 ? g->max_batch : 512;
    size_t ws = ckv_k_attention_ws(chunk, PREFILL_SPLITS, (int32_t)H, (int32_t)hd);
    const size_t ws_pass = ckv_k_attention_ws(rows, 1, (int32_t)H, (int32_t)hd);
    if (ws_pass > ws)
        ws = ws_pass;
    void **slot[] = {reinterpret_cast<void **>(&g->tok), reinterpret_cast<void **>(&g->x),
                     reinterpret_cast<void **>(&g->y),   reinterpret_cast<void **>(&g->qkv),
                     reinterpret_cast<void **>(&g->gu),  reinterpret_cast<void **>(&g->xb),
                     reinterpret_cast<void **>(&g->att), reinterpret_cast<void **>(&g->hb),
                     reinterpret_cast<void **>(&g->ws)};
    const size_t bytes[] = {R * sizeof(int32_t),      R * E * sizeof(float),
                            R * E * sizeof(float),    R * (H + 2 * KV) * hd * sizeof(float),
                            R * 2 * F * sizeof(float), R * E * sizeof(ckv_bf16),
                            R * H * hd * sizeof(ckv_bf16), R * F * sizeof(ckv_bf16),
                            ws * sizeof(float)};
    constexpr size_t N = sizeof bytes / sizeof bytes[0];
    void *fresh[N] = {};
    size_t total = 0;
    for (size_t i = 0; i < N; i++) {
        const ckv_status st = dalloc(&total, &fresh[i], bytes[i], err);
        if (st) {
            for (size_t j = 0; j < i; j++)
                cudaFree(fresh[j]);
            return st;
        }
    }
    for (size_t i = 0; i < N; i++) {
        cudaFree(*slot[i]);
        *slot[i] = fresh[i];
    }
    g->bytes = g->bytes - g->pass_bytes + total;
    g->pass_bytes = total;
    g->pass_rows = rows;
    g->ws_floats = ws;
    return CKV_OK;
}

// RoPE frequencies, the scratch of a forward pass and the activations of
// passes of max_batch rows.
static ckv_status finish(ckv_gpu *g, const float *rope_freqs, ckv_error *err)
{
    const ckv_config *c = &g->cfg;
    const size_t V = c->n_vocab, hd = c->head_dim, H = c->n_head, B = g->max_batch;
    ckv_status st;
    g->seg = static_cast<ckv_gpu_seg *>(calloc(B, sizeof(ckv_gpu_seg)));
    g->graph_key.ids = static_cast<uint64_t *>(calloc(B, sizeof(uint64_t)));
    g->eager_key.ids = static_cast<uint64_t *>(calloc(B, sizeof(uint64_t)));
    g->tab_key.ids = static_cast<uint64_t *>(calloc(B, sizeof(uint64_t)));
    g->graph_key.n = g->eager_key.n = g->tab_key.n = -1;
    // CKV_CUDA_GRAPHS=0 runs decode steps launch by launch (for comparisons).
    const char *graphs = getenv("CKV_CUDA_GRAPHS");
    g->use_graphs = !graphs || strcmp(graphs, "0");
    double *inv_freq = static_cast<double *>(malloc(hd / 2 * sizeof(double)));
    if (!g->seg || !g->graph_key.ids || !g->eager_key.ids || !g->tab_key.ids || !inv_freq) {
        free(inv_freq);
        return ckv_errorf(err, CKV_ERR_NOMEM, "cuda: out of host memory");
    }
    ckv_rope_inv_freq(inv_freq, c, rope_freqs);
    st = dalloc(&g->bytes, &g->inv_freq, hd / 2 * sizeof(double), err);
    cudaError_t e = st ? cudaSuccess
                       : cudaMemcpy(g->inv_freq, inv_freq, hd / 2 * sizeof(double),
                                    cudaMemcpyHostToDevice);
    free(inv_freq);
    if (st)
        return st;
    CKV_CUDA(e);

    if ((st = size_passes(g, g->max_batch, err)) ||
        (st = dalloc(&g->bytes, &g->next, B * sizeof(int32_t), err)) ||
        (st = dalloc(&g->bytes, &g->logits, B * V * sizeof(float), err)) ||
        (st = dalloc(&g->bytes, &g->q_rows, B * c->n_layer * H * hd * sizeof(float), err)) ||
        (st = dalloc(&g->bytes, &g->seq_tab, B * c->n_layer * sizeof(ckv_k_kv_layer), err)) ||
        (st = dalloc(&g->bytes, &g->pseg_tab,
                     (size_t)CKV_GPU_PASS_SEGS * c->n_layer * sizeof(ckv_k_kv_layer), err)) ||
        (st = dalloc(&g->bytes, &g->pseg_idx, 2 * (CKV_GPU_PASS_SEGS + 1) * sizeof(int32_t),
                     err)))
        return st;
    CKV_CUDA(cudaMallocHost(&g->seq_tab_h, B * c->n_layer * sizeof(ckv_k_kv_layer)));
    g->pseg_tab_h = static_cast<ckv_k_kv_layer *>(
        malloc((size_t)CKV_GPU_PASS_SEGS * c->n_layer * sizeof(ckv_k_kv_layer)));
    g->pseg_idx_h =
        static_cast<int32_t *>(malloc(2 * (CKV_GPU_PASS_SEGS + 1) * sizeof(int32_t)));
    if (!g->pseg_tab_h || !g->pseg_idx_h)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cuda: out of host memory");
    return CKV_OK;
}

ckv_status ckv_gpu_create_with(ckv_gpu **out, const ckv_config *cfg, const float *rope_freqs,
                               int32_t device, int32_t max_batch, ckv_gpu_weights_fn load,
                               const void *ctx, ckv_error *err)
{
    *out = NULL;
    if (max_batch <= 0)
        return ckv_errorf(err, CKV_ERR_ARG, "cuda: max_batch %d must be positive", max_batch);
    ckv_gpu *g = static_cast<ckv_gpu *>(calloc(1, sizeof *g));
    if (!g)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cuda: out of host memory");
    g->cfg = *cfg;
    g->device = device;
    g->max_batch = max_batch;
    ckv_status st;
    if ((st = setup(g, err)) || (st = load(g, ctx, err)) || (st = finish(g, rope_freqs, err))) {
        ckv_gpu_free(g);
        return st;
    }
    *out = g;
    return CKV_OK;
}

extern "C" ckv_status ckv_gpu_create(ckv_gpu **out, const ckv_model *m, int32_t device,
                                     int32_t max_batch, ckv_error *err)
{
    return ckv_gpu_create_with(out, &m->cfg, m->rope_freqs, device, max_batch, upload_weights, m,
                               err);
}

extern "C" void ckv_gpu_free(ckv_gpu *g)
{
    if (!g)
        return;
    if (g->layers)
        for (int l = 0; l < g->cfg.n_layer; l++) {
            ckv_gpu_layer *D = &g->layers[l];
            void *ps[] = {D->wqkv, D->wo, D->wgu, D->wdown, D->attn_norm,
                          D->ffn_norm, D->bias, D->q_norm, D->k_norm};
            for (void *p : ps)
                cudaFree(p);
        }
    void *ps[] = {g->blas_ws, g->embd, g->out_w, g->out_norm, g->inv_freq, g->tok, g->next,
                  g->x,       g->y,    g->qkv,   g->gu,       g->logits,   g->ws,  g->xb,
                  g->att,     g->hb,   g->q_rows, g->seq_tab, g->logit, g->pseg_tab,
                  g->pseg_idx};
    for (void *p : ps)
        cudaFree(p);
    if (g->blas)
        cublasDestroy(g->blas);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    drop_graph(g);
    cudaFreeHost(g->pin_tok);
    cudaFreeHost(g->pin_next);
    cudaFreeHost(g->pin_logits);
    cudaFreeHost(g->pin_q);
    cudaFreeHost(g->seq_tab_h);
    free(g->pseg_tab_h);
    free(g->pseg_idx_h);
    free(g->graph_key.ids);
    free(g->eager_key.ids);
    free(g->tab_key.ids);
    free(g->layers);
    free(g->seg);
    free(g->staging);
    free(g);
}

extern "C" size_t ckv_gpu_bytes(const ckv_gpu *g)
{
    return g->bytes;
}

extern "C" ckv_status ckv_gpu_set_prefill_rows(ckv_gpu *g, int32_t rows, ckv_error *err)
{
    if (rows < g->max_batch)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "cuda: prefill rows %d below the decoder's max_batch %d", rows,
                          g->max_batch);
    if (rows == g->pass_rows)
        return CKV_OK;
    CKV_CUDA(cudaSetDevice(g->device));
    // A captured decode step holds the addresses of the old activations.
    drop_graph(g);
    const ckv_status st = size_passes(g, rows, err);
    if (st)
        ckv_error_prefix(err, "cuda: prefill rows %d", rows);
    return st;
}

// Layer l of cache c as the kernels take it. logit: the cache's part of the
// logit scratch (NULL without scores, or where its masses are deferred).
// defer: the batch defers them (the state of a cache that tracks scores).
static ckv_k_kv_layer kv_layer(const ckv_gpu_cache *c, int l, float *logit, bool defer)
{
    const size_t lh = (size_t)l * c->n_head_kv;
    const size_t at = lh * c->capacity * c->head_dim * ckv_kv_dtype_size(c->dtype);
    const size_t hq = lh * CKV_K_SCORES_DEFER_GROUP;  // the layer's first query head's room
    return {static_cast<char *>(c->k) + at,
            static_cast<char *>(c->v) + at,
            c->deg + lh * c->capacity,
            c->score ? c->score + lh * c->capacity : NULL,
            c->len_d + lh,
            c->capacity,
            c->pos_d,
            c->score && !defer ? logit : NULL,
            c->dtype,
            defer && c->pq ? c->pq + hq * c->head_dim : NULL,
            defer && c->pq ? c->pml + hq * 2 : NULL,
            defer && c->pq ? c->plen + lh : NULL};
}

// The deferred scores' state of a bf16 cache that tracks scores, and the
// table of its layers a flush reads (their pointers never change).
static ckv_status take_deferred(ckv_gpu_cache *c, ckv_error *err)
{
    const size_t lists = (size_t)c->n_layer * c->n_head_kv;
    const size_t heads = lists * CKV_K_SCORES_DEFER_GROUP;
    ckv_status st;
    if ((st = dalloc(&c->bytes, &c->pq, heads * c->head_dim * sizeof(float), err)) ||
        (st = dalloc(&c->bytes, &c->pml, heads * 2 * sizeof(float), err)) ||
        (st = dalloc(&c->bytes, &c->plen, lists * sizeof(int32_t), err)) ||
        (st = dalloc(&c->bytes, &c->ptab, c->n_layer * sizeof(ckv_k_kv_layer), err)))
        return st;
    ckv_k_kv_layer *h = static_cast<ckv_k_kv_layer *>(malloc(c->n_layer * sizeof *h));
    if (!h)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cuda: out of host memory");
    for (int l = 0; l < c->n_layer; l++)
        h[l] = kv_layer(c, l, NULL, true);
    const cudaError_t e =
        cudaMemcpy(c->ptab, h, c->n_layer * sizeof *h, cudaMemcpyHostToDevice);
    free(h);
    if (e != cudaSuccess)
        return ckv_errorf(err, CKV_ERR_DEVICE, "cuda: the deferred scores' table: %s",
                          cudaGetErrorString(e));
    return CKV_OK;
}

ckv_status ckv_gpu_cache_drop_pending(ckv_gpu_cache *c, ckv_error *err)
{
    if (c->plen)
        CKV_CUDA(cudaMemset(c->plen, 0, (size_t)c->n_layer * c->n_head_kv * sizeof(int32_t)));
    c->pend = false;
    return CKV_OK;
}

extern "C" bool ckv_gpu_cache_pending(const ckv_gpu_cache *c)
{
    return c->pend;
}

extern "C" ckv_status ckv_gpu_cache_settle(ckv_gpu_cache *c, void *stream, ckv_error *err)
{
    if (!c->pend)
        return CKV_OK;
    const int32_t mx = longest(c->len_h, (size_t)c->n_layer * c->n_head_kv);
    const ckv_status st = ckv_k_scores_flush(
        c->ptab, c->n_layer, c->pgroup * c->n_head_kv, c->n_head_kv, c->head_dim, mx, c->dtype,
        1.0f / sqrtf((float)c->head_dim), c->pbias, stream, err);
    if (st)
        return ckv_error_prefix(err, "cuda: bringing a cache's scores up to date");
    c->pend = false;
    return CKV_OK;
}

extern "C" ckv_status ckv_gpu_caches_settle_timed(ckv_gpu_cache *const *c, int32_t n, double *ms,
                                                  ckv_error *err)
{
    *ms = NAN;
    cudaEvent_t ev[2];
    int32_t made = 0;
    CKV_CUDA(cudaDeviceSynchronize());
    cudaError_t e = cudaSuccess;
    while (made < 2 && (e = cudaEventCreate(&ev[made])) == cudaSuccess)
        made++;
    ckv_status st = CKV_OK;
    if (e == cudaSuccess)
        e = cudaEventRecord(ev[0], 0);
    for (int32_t i = 0; i < n && e == cudaSuccess && !st; i++)
        st = ckv_gpu_cache_settle(c[i], NULL, err);
    if (e == cudaSuccess && !st && (e = cudaEventRecord(ev[1], 0)) == cudaSuccess &&
        (e = cudaEventSynchronize(ev[1])) == cudaSuccess) {
        float x = 0;
        if ((e = cudaEventElapsedTime(&x, ev[0], ev[1])) == cudaSuccess)
            *ms = x;
    }
    if (!st && e != cudaSuccess)
        st = ckv_errorf(err, CKV_ERR_DEVICE, "cuda: timing a settle of %d caches: %s", n,
                        cudaGetErrorString(e));
    for (int32_t i = 0; i < made; i++)
        cudaEventDestroy(ev[i]);
    return st;
}

extern "C" ckv_status ckv_gpu_cache_create_shape(ckv_gpu_cache **out, int32_t n_layer,
                                                 int32_t n_head_kv, int32_t head_dim,
                                                 int32_t capacity, bool track_score,
                                                 ckv_kv_dtype dtype, ckv_error *err)
{
    *out = NULL;
    if (dtype != CKV_KV_F32 && dtype != CKV_KV_BF16)
        return ckv_errorf(err, CKV_ERR_ARG, "cuda: KV cache dtype %d (f32 or bf16)", (int)dtype);
    if (capacity <= 0 || n_layer <= 0 || n_head_kv <= 0 || head_dim <= 0)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "cuda: cache shape [%d, %d, %d] and capacity %d must be positive",
                          n_layer, n_head_kv, head_dim, capacity);
    if ((int64_t)capacity * head_dim > INT32_MAX)  // the kernels index a list with int offsets
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "cuda: a list of capacity %d x head_dim %d exceeds 2^31 - 1 elements",
                          capacity, head_dim);
    ckv_gpu_cache *c = static_cast<ckv_gpu_cache *>(calloc(1, sizeof *c));
    if (!c)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cuda: out of host memory");
    c->n_layer = n_layer;
    c->n_head_kv = n_head_kv;
    c->head_dim = head_dim;
    c->capacity = capacity;
    c->dtype = dtype;
    static uint64_t made;
    c->id = ++made;
    const size_t lists = (size_t)c->n_layer * c->n_head_kv, T = (size_t)capacity;
    c->len_h = static_cast<int32_t *>(calloc(lists, sizeof(int32_t)));
    ckv_status st = c->len_h ? CKV_OK : ckv_errorf(err, CKV_ERR_NOMEM, "cuda: out of host memory");
    const size_t kv_bytes = lists * T * c->head_dim * ckv_kv_dtype_size(dtype);
    if (!st && !(st = dalloc(&c->bytes, &c->k, kv_bytes, err)) &&
        !(st = dalloc(&c->bytes, &c->v, kv_bytes, err)) &&
        !(st = dalloc(&c->bytes, &c->deg, lists * T * sizeof(float), err)) &&
        !(st = track_score ? dalloc(&c->bytes, &c->score, lists * T * sizeof(float), err) : CKV_OK) &&
        !(st = dalloc(&c->bytes, &c->len_d, lists * sizeof(int32_t), err)) &&
        !(st = dalloc(&c->bytes, &c->pos_d, sizeof(int64_t), err)) &&
        !(st = track_score && dtype == CKV_KV_BF16 ? take_deferred(c, err) : CKV_OK))
        st = ckv_gpu_cache_reset(c, err);
    if (st) {
        ckv_gpu_cache_free(c);
        return st;
    }
    *out = c;
    return CKV_OK;
}

extern "C" ckv_status ckv_gpu_cache_create(ckv_gpu_cache **out, const ckv_gpu *g,
                                           int32_t capacity, bool track_score,
                                           ckv_kv_dtype dtype, ckv_error *err)
{
    *out = NULL;
    CKV_CUDA(cudaSetDevice(g->device));
    return ckv_gpu_cache_create_shape(out, g->cfg.n_layer, g->cfg.n_head_kv, g->cfg.head_dim,
                                      capacity, track_score, dtype, err);
}

extern "C" void ckv_gpu_cache_free(ckv_gpu_cache *c)
{
    if (!c)
        return;
    cudaFree(c->k);
    cudaFree(c->v);
    cudaFree(c->deg);
    cudaFree(c->score);
    cudaFree(c->len_d);
    cudaFree(c->pos_d);
    cudaFree(c->row);
    cudaFree(c->row_len);
    cudaFree(c->pq);
    cudaFree(c->pml);
    cudaFree(c->plen);
    cudaFree(c->ptab);
    free(c->len_h);
    free(c);
}

extern "C" size_t ckv_gpu_cache_bytes(const ckv_gpu_cache *c)
{
    return c->bytes;
}

extern "C" int32_t ckv_gpu_cache_capacity(const ckv_gpu_cache *c)
{
    return c->capacity;
}

extern "C" bool ckv_gpu_cache_tracks_score(const ckv_gpu_cache *c)
{
    return c->score != NULL;
}

extern "C" ckv_kv_dtype ckv_gpu_cache_dtype(const ckv_gpu_cache *c)
{
    return c->dtype;
}

extern "C" int32_t ckv_gpu_cache_max_len(const ckv_gpu_cache *c)
{
    return longest(c->len_h, (size_t)c->n_layer * c->n_head_kv);
}

extern "C" int32_t ckv_gpu_cache_round(const ckv_gpu_cache *c)
{
    return c->round;
}

extern "C" bool ckv_gpu_cache_mapped(const ckv_gpu_cache *c)
{
    return c->mapped;
}

extern "C" void ckv_gpu_cache_set_round(ckv_gpu_cache *c, int32_t round)
{
    c->round = round;
}

extern "C" int64_t ckv_gpu_cache_entries(const ckv_gpu_cache *c)
{
    int64_t total = 0;
    for (size_t j = 0; j < (size_t)c->n_layer * c->n_head_kv; j++)
        total += c->len_h[j];
    return total;
}

extern "C" ckv_status ckv_gpu_cache_reset(ckv_gpu_cache *c, ckv_error *err)
{
    const size_t lists = (size_t)c->n_layer * c->n_head_kv;
    memset(c->len_h, 0, lists * sizeof(int32_t));
    CKV_CUDA(cudaMemset(c->len_d, 0, lists * sizeof(int32_t)));
    CKV_CUDA(cudaMemset(c->pos_d, 0, sizeof(int64_t)));
    ckv_status st = ckv_gpu_cache_drop_pending(c, err);
    if (st)
        return st;
    // The memsets are queued on the legacy stream, which the decoder's
    // non-blocking stream does not wait for: finish them before a reused
    // cache is written again.
    CKV_CUDA(cudaStreamSynchronize(0));
    c->n_pos = 0;
    c->round = 0;
    c->mapped = false;
    return CKV_OK;
}

ckv_status ckv_gpu_cache_take_map(ckv_gpu_cache *c, ckv_error *err)
{
    if (c->row && c->row_len)
        return CKV_OK;
    const size_t lists = (size_t)c->n_layer * c->n_head_kv;
    const size_t row_bytes = lists * c->capacity * sizeof(int32_t);
    ckv_status st = c->row ? CKV_OK : dalloc(&c->bytes, &c->row, row_bytes, err);
    if (!st)
        st = dalloc(&c->bytes, &c->row_len, lists * sizeof(int32_t), err);
    if (st) {  // neither or both: a half-taken map must not pass for one
        if (c->row) {
            cudaFree(c->row);
            c->bytes -= row_bytes;
        }
        c->row = NULL;
        return st;
    }
    c->mapped = false;
    return CKV_OK;
}

extern "C" ckv_status ckv_gpu_cache_scramble(ckv_gpu_cache *c, uint64_t seed, ckv_error *err)
{
    ckv_status st = ckv_gpu_cache_take_map(c, err);
    if (st)
        return st;
    const size_t lists = (size_t)c->n_layer * c->n_head_kv, cap = c->capacity;
    int32_t *row = static_cast<int32_t *>(malloc(lists * cap * sizeof(int32_t)));
    if (!row)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cuda: out of host memory scrambling rows");
    ckv_rng rng;
    ckv_rng_seed(&rng, seed);
    for (size_t j = 0; j < lists; j++) {
        int32_t *r = row + j * cap;
        for (size_t s = 0; s < cap; s++)
            r[s] = (int32_t)s;
        ckv_rng_shuffle(&rng, r, (size_t)c->len_h[j], sizeof *r);
    }
    cudaError_t e = cudaMemcpy(c->row, row, lists * cap * sizeof(int32_t), cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(c->row_len, c->len_h, lists * sizeof(int32_t), cudaMemcpyHostToDevice);
    free(row);
    if (e != cudaSuccess)
        return ckv_errorf(err, CKV_ERR_DEVICE, "cuda: scrambling rows: %s", cudaGetErrorString(e));
    c->mapped = true;
    return CKV_OK;
}

// Copies `entries` rows of every list between caches of different capacities.
static ckv_status copy_lists(void *dst, int32_t dst_cap, const void *src, int32_t src_cap,
                             size_t row_bytes, int32_t entries, size_t lists, cudaMemcpyKind kind,
                             ckv_error *err)
{
    if (entries > 0)
        CKV_CUDA(cudaMemcpy2D(dst, dst_cap * row_bytes, src, src_cap * row_bytes,
                              entries * row_bytes, lists, kind));
    return CKV_OK;
}

// Keys or values (dev: the GPU cache's k or v) of the first `entries` rows
// of every list between the GPU cache and a host cache's fp32 array (host,
// `host_cap` entries a list); `up`: to the GPU. A bf16 cache's rows go
// through host staging, one list at a time, rounded to nearest even
// (ckv_f32_to_bf16, as the kernels' stores) on the way up and widened
// exactly on the way down.
static ckv_status copy_kv(const ckv_gpu_cache *c, void *dev, float *host, int32_t host_cap,
                          int32_t entries, bool up, ckv_error *err)
{
    const size_t lists = (size_t)c->n_layer * c->n_head_kv, hd = c->head_dim;
    if (c->dtype == CKV_KV_F32)
        return up ? copy_lists(dev, c->capacity, host, host_cap, hd * sizeof(float), entries,
                               lists, cudaMemcpyHostToDevice, err)
                  : copy_lists(host, host_cap, dev, c->capacity, hd * sizeof(float), entries,
                               lists, cudaMemcpyDeviceToHost, err);
    if (entries <= 0)
        return CKV_OK;
    const size_t row = (size_t)entries * hd;  // elements of one list's rows
    uint16_t *stage = static_cast<uint16_t *>(malloc(row * sizeof(uint16_t)));
    if (!stage)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cuda: out of host memory staging %d bf16 rows",
                          entries);
    ckv_status st = CKV_OK;
    for (size_t j = 0; j < lists && !st; j++) {
        float *h = host + j * host_cap * hd;
        uint16_t *d = static_cast<uint16_t *>(dev) + j * c->capacity * hd;
        if (up)
            for (size_t i = 0; i < row; i++)
                stage[i] = ckv_f32_to_bf16(h[i]);
        const cudaError_t e =
            up ? cudaMemcpy(d, stage, row * 2, cudaMemcpyHostToDevice)
               : cudaMemcpy(stage, d, row * 2, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess)
            st = ckv_errorf(err, CKV_ERR_DEVICE, "cuda: copying bf16 cache rows: %s",
                            cudaGetErrorString(e));
        else if (!up)
            for (size_t i = 0; i < row; i++)
                h[i] = ckv_bf16_to_f32(stage[i]);
    }
    free(stage);
    return st;
}

extern "C" ckv_status ckv_gpu_cache_upload(ckv_gpu_cache *dst, const ckv_cache *src, ckv_error *err)
{
    if (src->n_layer != dst->n_layer || src->n_head_kv != dst->n_head_kv ||
        src->head_dim != dst->head_dim)
        return ckv_errorf(err, CKV_ERR_ARG, "cuda: cache shape [%d, %d, %d] does not match [%d, %d, %d]",
                          src->n_layer, src->n_head_kv, src->head_dim, dst->n_layer,
                          dst->n_head_kv, dst->head_dim);
    if (src->dtype == CKV_KV_BF16 && dst->dtype == CKV_KV_F32)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "cuda: a bf16 host cache uploaded into an f32 GPU cache (the GPU would "
                          "append unrounded entries its CPU twin rounds)");
    const size_t lists = (size_t)src->n_layer * src->n_head_kv;
    const int32_t mx = longest(src->len, lists);
    if (mx > dst->capacity)
        return ckv_errorf(err, CKV_ERR_ARG, "cuda: a list of %d entries exceeds the GPU cache capacity %d",
                          mx, dst->capacity);
    ckv_status st;
    if ((st = ckv_gpu_cache_drop_pending(dst, err)) ||
        (st = copy_kv(dst, dst->k, src->k, src->capacity, mx, true, err)) ||
        (st = copy_kv(dst, dst->v, src->v, src->capacity, mx, true, err)) ||
        (st = copy_lists(dst->deg, dst->capacity, src->deg, src->capacity, sizeof(float), mx,
                         lists, cudaMemcpyHostToDevice, err)))
        return st;
    if (dst->score && src->score &&
        (st = copy_lists(dst->score, dst->capacity, src->score, src->capacity, sizeof(float), mx,
                         lists, cudaMemcpyHostToDevice, err)))
        return st;
    if (dst->score && !src->score && mx > 0)
        CKV_CUDA(cudaMemset2D(dst->score, dst->capacity * sizeof(float), 0, mx * sizeof(float),
                              lists));
    CKV_CUDA(cudaMemcpy(dst->len_d, src->len, lists * sizeof(int32_t), cudaMemcpyHostToDevice));
    CKV_CUDA(cudaMemcpy(dst->pos_d, &src->n_pos, sizeof(int64_t), cudaMemcpyHostToDevice));
    memcpy(dst->len_h, src->len, lists * sizeof(int32_t));
    dst->n_pos = src->n_pos;
    dst->round = src->round;
    dst->mapped = false;
    return CKV_OK;
}

// Puts a downloaded mapped cache's rows (dst, as the GPU holds them) back
// in slot order: the host cache has no map.
static ckv_status unmap_host(const ckv_gpu_cache *src, ckv_cache *dst, int32_t mx,
                             ckv_error *err)
{
    const size_t lists = (size_t)src->n_layer * src->n_head_kv, hd = src->head_dim;
    int32_t *row = static_cast<int32_t *>(malloc(lists * src->capacity * sizeof(int32_t)));
    int32_t *row_len = static_cast<int32_t *>(malloc(lists * sizeof(int32_t)));
    float *tmp = static_cast<float *>(malloc((size_t)mx * hd * sizeof(float)));
    ckv_status st = row && row_len && (tmp || mx == 0)
                        ? CKV_OK
                        : ckv_errorf(err, CKV_ERR_NOMEM, "cuda: out of host memory unmapping rows");
    cudaError_t e = cudaSuccess;
    if (!st && ((e = cudaMemcpy(row, src->row, lists * src->capacity * sizeof(int32_t),
                                cudaMemcpyDeviceToHost)) != cudaSuccess ||
                (e = cudaMemcpy(row_len, src->row_len, lists * sizeof(int32_t),
                                cudaMemcpyDeviceToHost)) != cudaSuccess))
        st = ckv_errorf(err, CKV_ERR_DEVICE, "cuda: copying the row map: %s",
                        cudaGetErrorString(e));
    for (size_t j = 0; j < lists && !st; j++) {
        const int32_t n = src->len_h[j], lh = (int32_t)j;
        float *const arrays[2] = {dst->k, dst->v};
        for (int a = 0; a < 2; a++) {
            float *base = arrays[a] + j * dst->capacity * hd;
            for (int32_t s = 0; s < n; s++)
                memcpy(tmp + s * hd, base + ckv_row_of(row, row_len, lh, src->capacity, s) * hd,
                       hd * sizeof(float));
            memcpy(base, tmp, (size_t)n * hd * sizeof(float));
        }
        float *const per_row[2] = {dst->deg, src->score ? dst->score : NULL};
        for (int a = 0; a < 2; a++) {
            if (!per_row[a])
                continue;
            float *base = per_row[a] + j * dst->capacity;
            for (int32_t s = 0; s < n; s++)
                tmp[s] = base[ckv_row_of(row, row_len, lh, src->capacity, s)];
            memcpy(base, tmp, (size_t)n * sizeof(float));
        }
    }
    free(row);
    free(row_len);
    free(tmp);
    return st;
}

extern "C" ckv_status ckv_gpu_cache_download(ckv_gpu_cache *src, ckv_cache *dst,
                                             ckv_error *err)
{
    const size_t lists = (size_t)src->n_layer * src->n_head_kv;
    const int32_t mx = longest(src->len_h, lists);
    if (src->n_layer != dst->n_layer || src->n_head_kv != dst->n_head_kv ||
        src->head_dim != dst->head_dim || mx > dst->capacity)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "cuda: host cache [%d, %d, %d] of capacity %d cannot hold the GPU cache "
                          "[%d, %d, %d] with lists up to %d",
                          dst->n_layer, dst->n_head_kv, dst->head_dim, dst->capacity,
                          src->n_layer, src->n_head_kv, src->head_dim, mx);
    ckv_status st;
    if ((st = ckv_gpu_cache_settle(src, NULL, err)) ||
        (st = copy_kv(src, src->k, dst->k, dst->capacity, mx, false, err)) ||
        (st = copy_kv(src, src->v, dst->v, dst->capacity, mx, false, err)) ||
        (st = copy_lists(dst->deg, dst->capacity, src->deg, src->capacity, sizeof(float), mx,
                         lists, cudaMemcpyDeviceToHost, err)))
        return st;
    if (dst->score && src->score &&
        (st = copy_lists(dst->score, dst->capacity, src->score, src->capacity, sizeof(float), mx,
                         lists, cudaMemcpyDeviceToHost, err)))
        return st;
    if (src->mapped && (st = unmap_host(src, dst, mx, err)))
        return st;
    memcpy(dst->len, src->len_h, lists * sizeof(int32_t));
    dst->n_pos = src->n_pos;
    dst->round = src->round;
    dst->dtype = src->dtype;  // the host twin then stores as the GPU cache does
    return CKV_OK;
}

extern "C" ckv_status ckv_gpu_cache_fork(ckv_gpu_cache **out, ckv_gpu_cache *src,
                                         int32_t capacity, ckv_error *err)
{
    const size_t lists = (size_t)src->n_layer * src->n_head_kv;
    const int32_t mx = longest(src->len_h, lists);
    *out = NULL;
    if (mx > capacity)
        return ckv_errorf(err, CKV_ERR_ARG, "cuda: fork capacity %d below the longest list %d",
                          capacity, mx);
    ckv_status st = ckv_gpu_cache_settle(src, NULL, err);
    if (st)
        return st;
    ckv_gpu_cache *c;
    st = ckv_gpu_cache_create_shape(&c, src->n_layer, src->n_head_kv, src->head_dim,
                                               capacity, src->score != NULL, src->dtype, err);
    if (st)
        return st;
    const size_t row = (size_t)src->head_dim * ckv_kv_dtype_size(src->dtype);
    const cudaMemcpyKind d2d = cudaMemcpyDeviceToDevice;
    if (!(st = copy_lists(c->k, capacity, src->k, src->capacity, row, mx, lists, d2d, err)) &&
        !(st = copy_lists(c->v, capacity, src->v, src->capacity, row, mx, lists, d2d, err)) &&
        !(st = copy_lists(c->deg, capacity, src->deg, src->capacity, sizeof(float), mx, lists,
                          d2d, err)) &&
        !(st = src->score ? copy_lists(c->score, capacity, src->score, src->capacity,
                                       sizeof(float), mx, lists, d2d, err)
                          : CKV_OK)) {
        cudaError_t e = cudaMemcpy(c->len_d, src->len_d, lists * sizeof(int32_t), d2d);
        if (e == cudaSuccess)
            e = cudaMemcpy(c->pos_d, src->pos_d, sizeof(int64_t), d2d);
        if (e != cudaSuccess)
            st = ckv_errorf(err, CKV_ERR_DEVICE, "cuda: fork lengths: %s", cudaGetErrorString(e));
    }
    if (!st && src->mapped && !(st = ckv_gpu_cache_take_map(c, err)) &&
        !(st = copy_lists(c->row, capacity, src->row, src->capacity, sizeof(int32_t), mx, lists,
                          d2d, err))) {
        const cudaError_t e =
            cudaMemcpy(c->row_len, src->row_len, lists * sizeof(int32_t), d2d);
        if (e != cudaSuccess)
            st = ckv_errorf(err, CKV_ERR_DEVICE, "cuda: fork row map: %s", cudaGetErrorString(e));
        c->mapped = true;
    }
    if (st) {
        ckv_gpu_cache_free(c);
        return st;
    }
    memcpy(c->len_h, src->len_h, lists * sizeof(int32_t));
    c->n_pos = src->n_pos;
    c->round = src->round;
    *out = c;
    return CKV_OK;
}

// Y[n][out] = X[n][in] . W[out][in]^T: column-major Y^T = W^T X^T.
static ckv_status gemm(ckv_gpu *g, float *y, const ckv_bf16 *x, const ckv_bf16 *w, int n, int in,
                       int out, ckv_error *err)
{
    return ckv_k_gemm(g->blas, y, x, w, n, in, out, err);
}

// Copies the rotated queries of the chunk's tokens that fall in the last
// q_window tokens of the whole input to opts->q_window_out
// [n_layer][n_head][W][head_dim], as ckv_cpu_forward does.
static ckv_status capture_window(ckv_gpu *g, int l, int32_t n, int32_t first, int32_t total,
                                 const ckv_forward_opts *o, ckv_error *err)
{
    const int32_t W = o->q_window;
    if (W <= 0)
        return CKV_OK;
    const int32_t from = total - W > first ? total - W - first : 0;  // first chunk row inside
    if (from >= n)
        return CKV_OK;
    const ckv_config *cf = &g->cfg;
    const size_t hd = cf->head_dim, qkvd = (size_t)(cf->n_head + 2 * cf->n_head_kv) * hd;
    const int32_t w0 = first + from - (total - W);
    for (int qh = 0; qh < cf->n_head; qh++) {
        float *dst = o->q_window_out + (((size_t)l * cf->n_head + qh) * W + w0) * hd;
        CKV_CUDA(cudaMemcpy2DAsync(dst, hd * sizeof(float), g->qkv + from * qkvd + qh * hd,
                                   qkvd * sizeof(float), hd * sizeof(float), n - from,
                                   cudaMemcpyDeviceToHost, g->stream));
    }
    return CKV_OK;
}

typedef ckv_gpu_seg Seg;

namespace {

// What a pass writes besides the cache: the window queries of a prefill
// (opts, with the chunk's place in the whole input), or every row's queries
// [n][n_layer][n_head][head_dim] in host memory for a decode batch.
struct PassOut {
    const ckv_forward_opts *opts;
    int32_t first, total;
    float *q_out;
    bool batch;  // one row per sequence, each layer in one launch through g->seq_tab
    const ckv_k_segments *segs;  // a prefill's segments in one launch each (pass_segments)
};

}  // namespace

// The logit scratch floats a cache needs: one layer's logits per query head.
static size_t logit_floats(const ckv_gpu *g, const ckv_gpu_cache *c)
{
    return c->score ? (size_t)g->cfg.n_head * c->capacity : 0;
}

// Grows the logit scratch to `floats`. Called before a step's work is
// enqueued, never inside a capture; the batch table points into the old
// scratch, so it is marked stale and rewritten before the next batch step
// (a captured graph reads the table, not the scratch's address).
static ckv_status logit_room(ckv_gpu *g, size_t floats, ckv_error *err)
{
    if (floats <= g->logit_floats)
        return CKV_OK;
    cudaFree(g->logit);
    g->logit = NULL;
    g->bytes -= g->logit_floats * sizeof(float);
    g->logit_floats = 0;
    g->tab_key.n = -1;
    ckv_status st = dalloc(&g->bytes, &g->logit, floats * sizeof(float), err);
    if (!st)
        g->logit_floats = floats;
    return st;
}

// Layer l's Q/K/V epilogue parameters, for every form of qkv_post.
static ckv_k_qkv_params qkv_params(const ckv_gpu *g, int l)
{
    const ckv_config *cf = &g->cfg;
    const ckv_gpu_layer *D = &g->layers[l];
    return {cf->n_head, cf->n_head_kv, cf->head_dim, D->bias,     D->q_norm,
            D->k_norm,  g->inv_freq,   cf->rope_type, cf->rms_eps};
}

// The new keys and values of one segment go into its cache, then its
// queries attend over that cache.
static ckv_status attend_segment(ckv_gpu *g, const Seg *sg, int l, bool degree_bias,
                                 ckv_error *err)
{
    const ckv_config *cf = &g->cfg;
    const int hd = cf->head_dim, H = cf->n_head, KV = cf->n_head_kv;
    const int qkvd = (H + 2 * KV) * hd;
    const ckv_gpu_cache *c = sg->c;
    const ckv_k_kv_layer kv = kv_layer(c, l, g->logit, false);
    const ckv_k_qkv_params qp = qkv_params(g, l);
    float *q = g->qkv + (size_t)sg->row * qkvd;
    const int32_t max_len = longest(c->len_h + (size_t)l * KV, (size_t)KV) + sg->n;
    const ckv_k_attention_split split = ckv_k_attention_plan(
        sg->n, H, KV, hd, max_len, g->n_sm, g->peak_bw, g->ws_floats, c->dtype);
    ckv_status s;
    if ((s = ckv_k_qkv_post(q, sg->n, &qp, &kv, g->stream, err)) ||
        (s = ckv_k_attention(NULL, g->att + (size_t)sg->row * H * hd, q, qkvd, sg->n, H, KV, hd,
                             &kv, 1.0f / sqrtf((float)hd), degree_bias, split, g->ws, g->stream,
                             err)))
        return s;
    return CKV_OK;
}

// A prefill pass's segments for layer l in one launch each of qkv_post and
// the attention, through the pass's table (pass_segments): each segment's
// rows as attend_segment would run them, one range plan for all.
static ckv_status attend_segments(ckv_gpu *g, const Seg *seg, int32_t n_seg,
                                  const ckv_k_segments *all, int32_t n, int l, bool degree_bias,
                                  ckv_error *err)
{
    const ckv_config *cf = &g->cfg;
    const int hd = cf->head_dim, H = cf->n_head, KV = cf->n_head_kv;
    const ckv_k_qkv_params qp = qkv_params(g, l);
    ckv_k_segments sg = *all;
    sg.tab += (size_t)l * CKV_GPU_PASS_SEGS;
    int32_t max_len = 0;
    for (int32_t i = 0; i < n_seg; i++) {
        const int32_t m = longest(seg[i].c->len_h + (size_t)l * KV, (size_t)KV) + seg[i].n;
        if (m > max_len)
            max_len = m;
    }
    const ckv_kv_dtype dt = seg[0].c->dtype;
    const ckv_k_attention_split split =
        ckv_k_attention_plan(n, H, KV, hd, max_len, g->n_sm, g->peak_bw, g->ws_floats, dt);
    ckv_status s;
    if ((s = ckv_k_qkv_post_segs(g->qkv, n, &qp, &sg, g->stream, err)) ||
        (s = ckv_k_attention_segs(NULL, g->att, g->qkv, (H + 2 * KV) * hd, n, H, KV, hd, &sg, dt,
                                  1.0f / sqrtf((float)hd), degree_bias, split, g->ws, g->stream,
                                  err)))
        return s;
    return CKV_OK;
}

// A decode batch's attention for layer l: row x is sequence x's new token,
// appended to and attending over its own cache (g->seq_tab, written by
// batch_table), all sequences in one launch each. Split plans come from the
// largest capacity, which a graph of this batch can keep.
static ckv_status attend_batch(ckv_gpu *g, int32_t n, int l, bool degree_bias, ckv_error *err)
{
    const ckv_config *cf = &g->cfg;
    const int hd = cf->head_dim, H = cf->n_head, KV = cf->n_head_kv;
    const ckv_k_qkv_params qp = qkv_params(g, l);
    const ckv_k_kv_layer *tab = g->seq_tab + (size_t)l * g->max_batch;
    const ckv_k_attention_split split = ckv_k_attention_plan_seqs(
        n, H, KV, hd, g->tab_capacity, g->n_sm, g->peak_bw, g->ws_floats, g->tab_dtype);
    ckv_status s;
    if ((s = ckv_k_qkv_post_seqs(g->qkv, n, &qp, tab, g->stream, err)) ||
        (s = ckv_k_attention_seqs(NULL, g->att, g->qkv, (H + 2 * KV) * hd, n, H, KV, hd, tab,
                                  g->tab_dtype,
                                  !g->tab_scores  ? CKV_K_SCORES_NONE
                                  : g->tab_defer ? CKV_K_SCORES_DEFER
                                                 : CKV_K_SCORES_NOW,
                                  1.0f / sqrtf((float)hd), degree_bias, split, g->ws, g->stream,
                                  err)))
        return s;
    return CKV_OK;
}

// Enqueues every layer over n rows whose tokens are already in g->tok, and
// the growth of each segment's cache on the device (advance_host mirrors it
// on the host). Logits are left to the caller.
static ckv_status run_layers(ckv_gpu *g, const Seg *seg, int32_t n_seg, int32_t n,
                             bool degree_bias, const PassOut *out, ckv_error *err)
{
    const ckv_config *cf = &g->cfg;
    const int E = cf->n_embd, hd = cf->head_dim, H = cf->n_head, KV = cf->n_head_kv,
              F = cf->n_ff;
    const int qkvd = (H + 2 * KV) * hd;
    void *st = g->stream;
    ckv_status s;
    if ((s = ckv_k_embed(g->x, g->embd, g->tok, n, E, st, err)))
        return s;
    for (int l = 0; l < cf->n_layer; l++) {
        const ckv_gpu_layer *D = &g->layers[l];
        if ((s = ckv_k_residual_rmsnorm(g->x, l ? g->y : NULL, D->attn_norm, g->xb, n, E,
                                        cf->rms_eps, st, err)) ||
            (s = gemm(g, g->qkv, g->xb, D->wqkv, n, E, qkvd, err)))
            return s;
        if (out->batch)
            s = attend_batch(g, n, l, degree_bias, err);
        else if (out->segs)
            s = attend_segments(g, seg, n_seg, out->segs, n, l, degree_bias, err);
        for (int32_t i = 0; !out->batch && !out->segs && !s && i < n_seg; i++)
            s = attend_segment(g, &seg[i], l, degree_bias, err);
        if (s)
            return s;
        if (out->opts && (s = capture_window(g, l, n, out->first, out->total, out->opts, err)))
            return s;
        if (out->q_out)
            CKV_CUDA(cudaMemcpy2DAsync(g->q_rows + (size_t)l * H * hd,
                                       (size_t)cf->n_layer * H * hd * sizeof(float), g->qkv,
                                       qkvd * sizeof(float), (size_t)H * hd * sizeof(float), n,
                                       cudaMemcpyDeviceToDevice, g->stream));
        if ((s = gemm(g, g->y, g->att, D->wo, n, H * hd, E, err)) ||
            (s = ckv_k_residual_rmsnorm(g->x, g->y, D->ffn_norm, g->xb, n, E, cf->rms_eps, st,
                                        err)) ||
            (s = ckv_k_gemm_swiglu_via(g->blas, CKV_GEMM_AUTO, g->hb, g->gu, g->xb, D->wgu, n,
                                       E, F, err)) ||
            (s = gemm(g, g->y, g->hb, D->wdown, n, F, E, err)))
            return s;
    }
    // One copy of every row's queries, not one (synchronous, to pageable
    // memory) per layer.
    if (out->q_out)
        CKV_CUDA(cudaMemcpyAsync(out->q_out, g->q_rows,
                                 (size_t)n * cf->n_layer * H * hd * sizeof(float),
                                 cudaMemcpyDeviceToHost, g->stream));
    // A decode batch's caches grow by one entry a list in one launch through
    // the table's layer-0 rows (one launch a cache cost a step at batch 8
    // eight of them, ZZ116); a prefill pass's, one launch a cache.
    if (out->batch)
        return ckv_k_add_lengths_seqs(g->seq_tab, n_seg, cf->n_layer * KV, 1, st, err);
    for (int32_t i = 0; i < n_seg; i++) {
        ckv_gpu_cache *c = seg[i].c;
        const size_t lists = (size_t)c->n_layer * c->n_head_kv;
        if ((s = ckv_k_add_lengths(c->len_d, (int32_t)lists, c->pos_d, seg[i].n, st, err)))
            return s;
    }
    return CKV_OK;
}

static void advance_host(const Seg *seg, int32_t n_seg)
{
    for (int32_t i = 0; i < n_seg; i++) {
        ckv_gpu_cache *c = seg[i].c;
        for (size_t j = 0; j < (size_t)c->n_layer * c->n_head_kv; j++)
            c->len_h[j] += seg[i].n;
        c->n_pos += seg[i].n;
    }
}

// Final norm and logits of rows [from, from + count), copied to host dst.
static ckv_status logits_rows(ckv_gpu *g, int32_t from, int32_t count, float *dst,
                              int32_t *next, ckv_error *err)
{
    const ckv_config *cf = &g->cfg;
    const int E = cf->n_embd, V = cf->n_vocab;
    ckv_status s;
    if ((s = ckv_k_residual_rmsnorm(g->x + (size_t)from * E, g->y + (size_t)from * E,
                                    g->out_norm, g->xb, count, E, cf->rms_eps, g->stream, err)) ||
        (s = gemm(g, g->logits, g->xb, g->out_w, count, E, V, err)))
        return s;
    if (dst)
        CKV_CUDA(cudaMemcpyAsync(dst, g->logits, (size_t)count * V * sizeof(float),
                                 cudaMemcpyDeviceToHost, g->stream));
    if (next) {
        if ((s = ckv_k_argmax_rows(g->next, g->logits, count, V, g->stream, err)))
            return s;
        CKV_CUDA(cudaMemcpyAsync(next, g->next, (size_t)count * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, g->stream));
    }
    return CKV_OK;
}

static ckv_status check_tokens(const ckv_gpu *g, const int32_t *tokens, int32_t n, ckv_error *err)
{
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= g->cfg.n_vocab)
            return ckv_errorf(err, CKV_ERR_ARG, "token id %d at index %d is outside [0, %d)",
                              tokens[i], i, g->cfg.n_vocab);
    return CKV_OK;
}

static ckv_status check_room(const ckv_gpu_cache *c, int32_t n, ckv_error *err)
{
    const int32_t mx = longest(c->len_h, (size_t)c->n_layer * c->n_head_kv);
    if ((int64_t)mx + n > c->capacity)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "forward: %d new tokens overflow the cache (longest list %d, capacity %d)",
                          n, mx, c->capacity);
    return CKV_OK;
}

// Host buffers a decode step's copies use: pinned, because a captured graph
// may copy only to and from page-locked memory (a prefill stages its logits
// and next tokens there too, so that its copies do not wait for the pass).
// Grown to m rows; growing drops the captured graph, which holds their
// addresses.
static ckv_status pinned_rows(ckv_gpu *g, int32_t m, ckv_error *err)
{
    if (m <= g->pin_rows)
        return CKV_OK;
    const ckv_config *cf = &g->cfg;
    drop_graph(g);
    cudaFreeHost(g->pin_tok);
    cudaFreeHost(g->pin_next);
    cudaFreeHost(g->pin_logits);
    cudaFreeHost(g->pin_q);
    g->pin_tok = g->pin_next = NULL;
    g->pin_logits = g->pin_q = NULL;
    g->pin_rows = 0;
    CKV_CUDA(cudaMallocHost(&g->pin_tok, (size_t)m * sizeof(int32_t)));
    CKV_CUDA(cudaMallocHost(&g->pin_next, (size_t)m * sizeof(int32_t)));
    CKV_CUDA(cudaMallocHost(&g->pin_logits, (size_t)m * cf->n_vocab * sizeof(float)));
    CKV_CUDA(cudaMallocHost(&g->pin_q,
                            (size_t)m * cf->n_layer * cf->n_head * cf->head_dim * sizeof(float)));
    g->pin_rows = m;
    return CKV_OK;
}

// n tokens into rows row .. row + n - 1 of the pass (from pageable memory: the
// copy is staged at once and does not wait for the stream).
static ckv_status upload_tokens(ckv_gpu *g, const int32_t *tokens, int32_t row, int32_t n,
                                ckv_error *err)
{
    CKV_CUDA(cudaMemcpyAsync(g->tok + row, tokens, (size_t)n * sizeof(int32_t),
                             cudaMemcpyHostToDevice, g->stream));
    return CKV_OK;
}

// A prefill's sequence: a cache of the decoder's shape with room for n >= 1
// tokens, each a valid id.
static ckv_status check_sequence(const ckv_gpu *g, const ckv_gpu_cache *c,
                                 const int32_t *tokens, int32_t n, ckv_error *err)
{
    const ckv_config *cf = &g->cfg;
    if (n <= 0)
        return ckv_errorf(err, CKV_ERR_ARG, "forward: no tokens");
    if (!c || !tokens)
        return ckv_errorf(err, CKV_ERR_ARG, "forward: %s is NULL",
                          c ? "the token array" : "the cache");
    if (c->n_layer != cf->n_layer || c->n_head_kv != cf->n_head_kv || c->head_dim != cf->head_dim)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "forward: cache shape [%d, %d, %d] is not the decoder's [%d, %d, %d]",
                          c->n_layer, c->n_head_kv, c->head_dim, cf->n_layer, cf->n_head_kv,
                          cf->head_dim);
    ckv_status s;
    if ((s = check_tokens(g, tokens, n, err)) || (s = check_room(c, n, err)))
        return s;
    return CKV_OK;
}

// Copies the staged rows (logits and next tokens of sequences [*done, *done
// + *staged)) to the caller's arrays, once the stream has written them.
static ckv_status flush_staged(ckv_gpu *g, float *logits, int32_t *next, int32_t *done,
                               int32_t *staged, ckv_error *err)
{
    const size_t V = g->cfg.n_vocab;
    CKV_CUDA(cudaStreamSynchronize(g->stream));
    if (logits)
        memcpy(logits + (size_t)*done * V, g->pin_logits, (size_t)*staged * V * sizeof(float));
    if (next)
        memcpy(next + *done, g->pin_next, (size_t)*staged * sizeof(int32_t));
    *done += *staged;
    *staged = 0;
    return CKV_OK;
}

// The logits of the last tokens of the sequences that end in the pass (its
// pieces pc[0 .. np), in order): their rows gathered to rows 0 .. m - 1 of
// x and y (row j comes from a row at or after j, so no source is
// overwritten before it is read), then through the final norm and the
// output GEMM in pieces that fit the staging rows left, each flushed when
// the staging is full.
static ckv_status pass_logits(ckv_gpu *g, const ckv_prefill_piece *pc, int32_t np, float *logits,
                              int32_t *next, int32_t *done, int32_t *staged, ckv_error *err)
{
    const size_t E = g->cfg.n_embd, V = g->cfg.n_vocab;
    const int32_t room = g->pin_rows < g->max_batch ? g->pin_rows : g->max_batch;
    int32_t m = 0;
    for (int32_t j = 0; j < np; j++) {
        if (!pc[j].last)
            continue;
        const size_t end = (size_t)pc[j].row + pc[j].n - 1;
        if (end != (size_t)m) {
            CKV_CUDA(cudaMemcpyAsync(g->x + m * E, g->x + end * E, E * sizeof(float),
                                     cudaMemcpyDeviceToDevice, g->stream));
            CKV_CUDA(cudaMemcpyAsync(g->y + m * E, g->y + end * E, E * sizeof(float),
                                     cudaMemcpyDeviceToDevice, g->stream));
        }
        m++;
    }
    ckv_status s;
    for (int32_t from = 0; from < m;) {
        const int32_t count = m - from < room - *staged ? m - from : room - *staged;
        if ((s = logits_rows(g, from, count, logits ? g->pin_logits + (size_t)*staged * V : NULL,
                             next ? g->pin_next + *staged : NULL, err)))
            return s;
        *staged += count;
        from += count;
        if (*staged == room && (s = flush_staged(g, logits, next, done, staged, err)))
            return s;
    }
    return CKV_OK;
}

// The table of a pass's np segments (consecutive from row 0, as
// ckv_prefill_pass cuts them; rows in all) for the one-launch
// kernels, uploaded (from host memory the copy has staged when it returns,
// so the next pass may refill it); sg->n 0 where they do not apply: one
// segment, more than CKV_GPU_PASS_SEGS, caches of different types, or one
// that tracks scores (its score pass takes the fp32 kernel).
static ckv_status pass_segments(ckv_gpu *g, const Seg *seg, int32_t np, int32_t rows,
                                ckv_k_segments *sg, ckv_error *err)
{
    *sg = ckv_k_segments{};
    if (np < 2 || np > CKV_GPU_PASS_SEGS)
        return CKV_OK;
    for (int32_t j = 0; j < np; j++)
        if (seg[j].c->score || seg[j].c->dtype != seg[0].c->dtype)
            return CKV_OK;
    const int32_t L = g->cfg.n_layer, M = CKV_GPU_PASS_SEGS;
    int32_t *row = g->pseg_idx_h, *tile = row + M + 1;
    for (int32_t j = 0; j < np; j++) {
        row[j] = seg[j].row;
        for (int32_t l = 0; l < L; l++)
            g->pseg_tab_h[(size_t)l * M + j] = kv_layer(seg[j].c, l, NULL, false);
    }
    row[np] = rows;
    ckv_k_segment_tiles(row, np, tile);
    CKV_CUDA(cudaMemcpy2DAsync(g->pseg_tab, M * sizeof(ckv_k_kv_layer), g->pseg_tab_h,
                               M * sizeof(ckv_k_kv_layer), np * sizeof(ckv_k_kv_layer), L,
                               cudaMemcpyHostToDevice, g->stream));
    CKV_CUDA(cudaMemcpyAsync(g->pseg_idx, row, 2 * (M + 1) * sizeof(int32_t),
                             cudaMemcpyHostToDevice, g->stream));
    *sg = {g->pseg_tab, g->pseg_idx, g->pseg_idx + M + 1, np, tile[np]};
    return CKV_OK;
}

// Runs k checked sequences (token arrays tokens[i] of n[i] tokens, into
// distinct caches[i]) in passes of at most g->pass_rows rows cut by
// ckv_prefill_pass (src/prefill_plan.h), a segment per piece. logits [k][V] and next [k] (each may be NULL) get each sequence's
// last token's logits and greedy next token; with o->all_logits (k = 1)
// logits gets every token's row instead, and o->q_window (k = 1) captures
// the window queries. Finished before it returns.
static ckv_status prefill(ckv_gpu *g, ckv_gpu_cache *const *caches, const int32_t *const *tokens,
                          const int32_t *n, int32_t k, const ckv_forward_opts *o, float *logits,
                          int32_t *next, ckv_error *err)
{
    const size_t V = g->cfg.n_vocab;
    const int32_t P = g->pass_rows, most = k < P ? k : P;  // segments a pass may hold
    const bool last = (logits && !o->all_logits) || next;
    ckv_status s = CKV_OK;
    size_t scratch = 0;
    for (int32_t i = 0; i < k; i++)
        if (logit_floats(g, caches[i]) > scratch)
            scratch = logit_floats(g, caches[i]);
    CKV_CUDA(cudaSetDevice(g->device));
    if ((s = logit_room(g, scratch, err)) ||
        (last && (s = pinned_rows(g, k < g->max_batch ? k : g->max_batch, err))))
        return s;
    // A prefill's score pass adds its masses now: a decode's deferred ones
    // go in first, so that each score sums its masses in step order.
    for (int32_t i = 0; i < k; i++)
        if ((s = ckv_gpu_cache_settle(caches[i], g->stream, err)))
            return s;
    Seg *seg = static_cast<Seg *>(malloc((size_t)most * sizeof(Seg)));
    ckv_prefill_piece *pc =
        static_cast<ckv_prefill_piece *>(malloc((size_t)most * sizeof(ckv_prefill_piece)));
    if (!seg || !pc) {
        free(seg);
        free(pc);
        return ckv_errorf(err, CKV_ERR_NOMEM, "prefill: out of host memory for %d segments",
                          most);
    }
    int32_t seq = 0, at = 0, np;   // the next token to run: sequence seq's token at
    int32_t done = 0, staged = 0;  // sequences whose outputs were copied out, and are staged
    while (!s && (np = ckv_prefill_pass(n, k, P, &seq, &at, pc)) > 0) {
        int32_t rows = 0;
        for (int32_t j = 0; !s && j < np; j++) {
            seg[j] = {caches[pc[j].seq], pc[j].row, pc[j].n};
            s = upload_tokens(g, tokens[pc[j].seq] + pc[j].first, pc[j].row, pc[j].n, err);
            rows = pc[j].row + pc[j].n;
        }
        // pc[0].first: with k = 1, the pass's place in the whole input.
        ckv_k_segments sg;
        if (s || (s = pass_segments(g, seg, np, rows, &sg, err)))
            break;
        const PassOut out = {o, pc[0].first, n[0], NULL, false, sg.n ? &sg : NULL};
        if ((s = run_layers(g, seg, np, rows, !o->no_degree_bias, &out, err)))
            break;
        advance_host(seg, np);
        if (last)
            s = pass_logits(g, pc, np, logits, next, &done, &staged, err);
        // Every row's logits (k = 1), in pieces of the logit scratch's rows.
        for (int32_t r = 0; !s && o->all_logits && logits && r < rows; r += g->max_batch)
            s = logits_rows(g, r, rows - r < g->max_batch ? rows - r : g->max_batch,
                            logits + (size_t)(pc[0].first + r) * V, NULL, err);
    }
    free(seg);
    free(pc);
    if (s)
        return s;
    if (staged)
        return flush_staged(g, logits, next, &done, &staged, err);
    CKV_CUDA(cudaStreamSynchronize(g->stream));
    return CKV_OK;
}

extern "C" ckv_status ckv_gpu_forward(ckv_gpu *g, ckv_gpu_cache *c, const int32_t *tokens,
                                      int32_t n, const ckv_forward_opts *opts, float *logits,
                                      ckv_error *err)
{
    static const ckv_forward_opts none = {};
    const ckv_forward_opts *o = opts ? opts : &none;
    if (n <= 0)
        return ckv_errorf(err, CKV_ERR_ARG, "forward: no tokens");
    if (o->q_window < 0 || o->q_window > n || (o->q_window > 0 && !o->q_window_out))
        return ckv_errorf(err, CKV_ERR_ARG, "forward: query window %d invalid for %d tokens",
                          o->q_window, n);
    // One token is a decode step (captured as a graph, replayed next time).
    if (n == 1 && o->q_window == 0)
        return ckv_gpu_decode_batch(g, &c, tokens, 1, o->no_degree_bias, logits, NULL, NULL,
                                    err);
    const ckv_status s = check_sequence(g, c, tokens, n, err);
    return s ? s : prefill(g, &c, &tokens, &n, 1, o, logits, NULL, err);
}

extern "C" ckv_status ckv_gpu_prefill_batch(ckv_gpu *g, ckv_gpu_cache *const *caches,
                                            const int32_t *const *tokens, const int32_t *n,
                                            int32_t k, bool no_degree_bias, float *logits,
                                            int32_t *next, ckv_error *err)
{
    if (k <= 0 || !caches || !tokens || !n)
        return ckv_errorf(err, CKV_ERR_ARG, "prefill batch: %d sequences%s", k,
                          k > 0 ? " with a NULL caches, tokens or n array" : " (at least 1)");
    ckv_status s;
    for (int32_t i = 0; i < k; i++) {
        if ((s = check_sequence(g, caches[i], tokens[i], n[i], err))) {
            ckv_error_prefix(err, "prefill batch: sequence %d (caches[%d], tokens[%d], n[%d] = %d)",
                             i, i, i, i, n[i]);
            return s;
        }
        for (int32_t j = 0; j < i; j++)
            if (caches[j] == caches[i])
                return ckv_errorf(err, CKV_ERR_ARG,
                                  "prefill batch: sequences %d and %d share one cache "
                                  "(caches[%d] == caches[%d])", j, i, j, i);
    }
    ckv_forward_opts o = {};
    o.no_degree_bias = no_degree_bias;
    return prefill(g, caches, tokens, n, k, &o, logits, next, err);
}

// One decode step of the m rows in g->seg, from the pinned tokens to the
// pinned logits, next tokens and queries (each if wanted): everything a
// graph captures.
static ckv_status enqueue_step(ckv_gpu *g, int32_t m, bool degree_bias, bool want_logits,
                               bool want_next, bool want_q, ckv_error *err)
{
    CKV_CUDA(cudaMemcpyAsync(g->tok, g->pin_tok, (size_t)m * sizeof(int32_t),
                             cudaMemcpyHostToDevice, g->stream));
    const PassOut out = {NULL, 0, 0, want_q ? g->pin_q : NULL, true, NULL};
    ckv_status s = run_layers(g, g->seg, m, m, degree_bias, &out, err);
    if (!s && (want_logits || want_next))
        s = logits_rows(g, 0, m, want_logits ? g->pin_logits : NULL,
                        want_next ? g->pin_next : NULL, err);
    return s;
}

static bool key_matches(const ckv_gpu_step_key *k, const ckv_gpu *g, int32_t m, int flags)
{
    if (k->n != m || k->flags != flags)
        return false;
    for (int32_t i = 0; i < m; i++)
        if (k->ids[i] != g->seg[i].c->id)
            return false;
    return true;
}

static void key_set(ckv_gpu_step_key *k, const ckv_gpu *g, int32_t m, int flags)
{
    for (int32_t i = 0; i < m; i++)
        k->ids[i] = g->seg[i].c->id;
    k->n = m;
    k->flags = flags;
}

// Captures the step for these caches (by id: a cache made later never
// matches a graph of an earlier one) and keeps it for the next call.
static ckv_status capture_step(ckv_gpu *g, int32_t m, bool degree_bias, bool want_logits,
                               bool want_next, bool want_q, int flags, ckv_error *err)
{
    drop_graph(g);
    CKV_CUDA(cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal));
    ckv_status s = enqueue_step(g, m, degree_bias, want_logits, want_next, want_q, err);
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(g->stream, &graph);
    if (!s && e == cudaSuccess)
        e = cudaGraphInstantiate(&g->graph_exec, graph, 0);
    if (graph)
        cudaGraphDestroy(graph);
    if (s)
        return s;
    if (e != cudaSuccess) {
        g->graph_exec = NULL;
        return ckv_errorf(err, CKV_ERR_DEVICE, "cuda: capturing the decode step: %s",
                          cudaGetErrorString(e));
    }
    key_set(&g->graph_key, g, m, flags);
    return CKV_OK;
}

// The per-layer cache table of the m sequences in g->seg, uploaded when the
// batch differs from the one it holds (a graph of this batch reads it).
static ckv_status batch_table(ckv_gpu *g, int32_t m, ckv_error *err)
{
    if (key_matches(&g->tab_key, g, m, ckv_cuda_defer_scores()))
        return CKV_OK;
    const int32_t L = g->cfg.n_layer, B = g->max_batch;
    // The batch's masses are deferred where the kernels can (bf16 lists,
    // groups up to 4: every scoring cache then has the state), and the
    // switch allows: no logit scratch then.
    g->tab_defer = ckv_cuda_defer_scores() &&
                   ckv_k_scores_defer_fits(g->cfg.n_head, g->cfg.n_head_kv, g->seg[0].c->dtype);
    size_t floats = 0;
    for (int32_t i = 0; i < m && !g->tab_defer; i++)
        floats += logit_floats(g, g->seg[i].c);
    ckv_status s = logit_room(g, floats, err);
    if (s)
        return s;
    g->tab_capacity = 0;
    g->tab_scores = false;
    size_t at = 0;  // each scoring sequence's own part of the logit scratch
    for (int32_t i = 0; i < m; i++) {
        const ckv_gpu_cache *c = g->seg[i].c;
        for (int32_t l = 0; l < L; l++)
            g->seq_tab_h[(size_t)l * B + i] = kv_layer(c, l, g->logit + at, g->tab_defer);
        if (!g->tab_defer)
            at += logit_floats(g, c);
        if (c->capacity > g->tab_capacity)
            g->tab_capacity = c->capacity;
        g->tab_scores |= c->score != NULL;
        g->tab_dtype = c->dtype;
    }
    CKV_CUDA(cudaMemcpy2DAsync(g->seq_tab, B * sizeof(ckv_k_kv_layer), g->seq_tab_h,
                               B * sizeof(ckv_k_kv_layer), m * sizeof(ckv_k_kv_layer), L,
                               cudaMemcpyHostToDevice, g->stream));
    key_set(&g->tab_key, g, m, ckv_cuda_defer_scores());
    return CKV_OK;
}

extern "C" ckv_status ckv_gpu_decode_batch(ckv_gpu *g, ckv_gpu_cache *const *caches,
                                           const int32_t *tokens, int32_t n, bool no_degree_bias,
                                           float *logits, int32_t *next, float *q_out,
                                           ckv_error *err)
{
    if (n <= 0)
        return ckv_errorf(err, CKV_ERR_ARG, "decode batch: no sequences");
    ckv_status s;
    if ((s = check_tokens(g, tokens, n, err)))
        return s;
    for (int32_t i = 0; i < n; i++) {
        if ((s = check_room(caches[i], 1, err)))
            return ckv_error_prefix(err, "decode batch: sequence %d", i);
        for (int32_t j = 0; j < i; j++)
            if (caches[j] == caches[i])
                return ckv_errorf(err, CKV_ERR_ARG,
                                  "decode batch: sequences %d and %d share one cache", j, i);
        if (caches[i]->dtype != caches[0]->dtype)
            return ckv_errorf(err, CKV_ERR_ARG,
                              "decode batch: sequence %d's cache stores %s, sequence 0's %s", i,
                              ckv_kv_dtype_name(caches[i]->dtype),
                              ckv_kv_dtype_name(caches[0]->dtype));
    }
    CKV_CUDA(cudaSetDevice(g->device));
    const ckv_config *cf = &g->cfg;
    const size_t q_row = (size_t)cf->n_layer * cf->n_head * cf->head_dim, V = cf->n_vocab;
    const bool bias = !no_degree_bias, want_l = logits != NULL, want_n = next != NULL,
               want_q = q_out != NULL;
    // A graph keeps the launch attributes it was captured with: one
    // captured under the other PDL setting is not replayed.
    const int flags = bias | want_l << 1 | want_q << 2 | ckv_cuda_pdl() << 3 | want_n << 4 |
                      ckv_cuda_defer_scores() << 5;
    for (int32_t at = 0; at < n; at += g->max_batch) {
        const int32_t m = n - at < g->max_batch ? n - at : g->max_batch;
        if ((s = pinned_rows(g, m, err)))
            return s;
        for (int32_t i = 0; i < m; i++)
            g->seg[i] = {caches[at + i], i, 1};
        if ((s = batch_table(g, m, err)))
            return s;
        // Deferred masses go in first where this step does not defer (its
        // score pass adds its own at once: each score sums its masses in
        // step order), or defers under the other degree bias (a flush
        // repeats one bias for all it adds).
        for (int32_t i = 0; i < m; i++)
            if (caches[at + i]->pend && (!g->tab_defer || caches[at + i]->pbias != bias) &&
                (s = ckv_gpu_cache_settle(caches[at + i], g->stream, err)))
                return s;
        memcpy(g->pin_tok, tokens + at, (size_t)m * sizeof(int32_t));
        // A batch seen twice in a row is captured and replayed from then on;
        // one seen once runs launch by launch (a capture costs more than the
        // few steps of a short answer save).
        bool replay = g->use_graphs && g->graph_exec && key_matches(&g->graph_key, g, m, flags);
        if (!replay && g->use_graphs && key_matches(&g->eager_key, g, m, flags)) {
            if ((s = capture_step(g, m, bias, want_l, want_n, want_q, flags, err)))
                return s;
            replay = true;
        }
        if (replay) {
            CKV_CUDA(cudaGraphLaunch(g->graph_exec, g->stream));
        } else {
            if ((s = enqueue_step(g, m, bias, want_l, want_n, want_q, err)))
                return s;
            key_set(&g->eager_key, g, m, flags);
        }
        CKV_CUDA(cudaStreamSynchronize(g->stream));
        advance_host(g->seg, m);
        for (int32_t i = 0; g->tab_defer && i < m; i++) {
            ckv_gpu_cache *c = caches[at + i];
            if (c->score) {
                c->pend = true;
                c->pbias = bias;
                c->pgroup = cf->n_head / cf->n_head_kv;
            }
        }
        if (want_l)
            memcpy(logits + (size_t)at * V, g->pin_logits, (size_t)m * V * sizeof(float));
        if (want_n)
            memcpy(next + at, g->pin_next, (size_t)m * sizeof(int32_t));
        if (want_q)
            memcpy(q_out + (size_t)at * q_row, g->pin_q, (size_t)m * q_row * sizeof(float));
    }
    return CKV_OK;
}
