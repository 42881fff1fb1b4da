// SnapKV on the GPU (policies.md, "snapkv"): the window queries' causal
// attention over every list over budget, summed over the window, pooled
// along the slots, averaged over the query heads of each KV group, then
// the top-k ranking of cuda_compact.cu. CPU twins: window_attention and
// pool in src/policies/snapkv.c. Logits, window sums and pooling follow
// the CPU's order in double; the softmax normaliser is a block reduction
// and exp is CUDA's, so scores agree to ~1e-16 and a decision can differ
// only at a near-tie of scores (the margin the trace reports). Keys are
// read as fp32 from either cache type.
#include <math.h>

#include "cuda_bf16.cuh"
#include "cuda_check.h"
#include "cuda_policy.h"

enum { PROB_THREADS = 256 };

struct sk_params {
    int32_t W, K, pooling, group, n_head, heads_kv, qw_w, cap, d;
    double scale;
};

// op 0: sum, 1: max, over the block; every thread gets the result.
static __device__ double block_reduce(double v, int op)
{
    __shared__ double part[PROB_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) {
        const double u = __shfl_xor_sync(0xffffffffu, v, o);
        v = op ? fmax(v, u) : v + u;
    }
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();  // part[] may still be read by a previous call
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    v = part[0];
    for (int i = 1; i < PROB_THREADS / 32; i++)
        v = op ? fmax(v, part[i]) : v + part[i];
    return v;
}

// Block (row i, group member g, list): the probabilities query row i of
// query head h * group + g gives slots [0, T - W + i].
template <typename Elem>
__global__ void __launch_bounds__(PROB_THREADS)
    sk_prob_kernel(const float *q, const Elem *keys, const float *deg, double *prob,
                   const int32_t *act, const int32_t *T, sk_params p)
{
    const int32_t i = blockIdx.x, g = blockIdx.y, lh = blockIdx.z;
    if (!act[lh])
        return;
    const int32_t l = lh / p.heads_kv, h = lh % p.heads_kv, qh = h * p.group + g;
    const float *qi = q + (((size_t)l * p.n_head + qh) * p.qw_w + (p.qw_w - p.W) + i) * p.d;
    const int32_t n = T[lh] - p.W + i + 1;
    const size_t base = (size_t)lh * p.cap;
    const Elem *K = keys + base * p.d;
    const float *D = deg + base;
    double *P = prob + (((size_t)lh * p.group + g) * p.W + i) * p.cap;
    double mx = -INFINITY;
    for (int32_t t = threadIdx.x; t < n; t += PROB_THREADS) {
        const Elem *kt = K + (size_t)t * p.d;
        double s = 0;
        for (int32_t j = 0; j < p.d; j++)
            s = __dadd_rn(s, __dmul_rn((double)qi[j], (double)ckv_kv_get(kt, j)));
        const double lg = __dadd_rn(__dmul_rn(s, p.scale), log((double)D[t]));
        P[t] = lg;
        mx = fmax(mx, lg);
    }
    mx = block_reduce(mx, 1);
    double sum = 0;
    for (int32_t t = threadIdx.x; t < n; t += PROB_THREADS) {
        P[t] = exp(P[t] - mx);
        sum += P[t];
    }
    sum = block_reduce(sum, 0);
    for (int32_t t = threadIdx.x; t < n; t += PROB_THREADS)
        P[t] = __ddiv_rn(P[t], sum);
}

// acc[t] of query head g: the window's probabilities summed in row order,
// for the slots that are pooled, [0, T - W).
__global__ void sk_acc_kernel(const double *prob, double *acc, const int32_t *act,
                              const int32_t *T, sk_params p)
{
    const int32_t g = blockIdx.y, lh = blockIdx.z, t = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || t >= T[lh] - p.W)
        return;
    const double *P = prob + ((size_t)lh * p.group + g) * p.W * p.cap + t;
    double a = 0;
    for (int32_t i = 0; i < p.W; i++)
        a = __dadd_rn(a, P[(size_t)i * p.cap]);
    acc[((size_t)lh * p.group + g) * p.cap + t] = a;
}

// Slot t's score: the pooled sums averaged over the group (the sort key).
__global__ void sk_score_kernel(const double *acc, double *key, int32_t *ival, const int32_t *act,
                                const int32_t *T, sk_params p)
{
    const int32_t lh = blockIdx.y, t = blockIdx.x * blockDim.x + threadIdx.x;
    const int32_t n = T[lh] - p.W;
    if (!act[lh] || t >= n)
        return;
    double score = 0;
    for (int32_t g = 0; g < p.group; g++) {
        const double *x = acc + ((size_t)lh * p.group + g) * p.cap;
        double m = -INFINITY, s = 0;
        for (int32_t u = t - p.K / 2; u < t - p.K / 2 + p.K; u++) {
            if (u < 0 || u >= n)
                continue;
            if (x[u] > m)
                m = x[u];
            s = __dadd_rn(s, x[u]);
        }
        score = __dadd_rn(score, p.pooling == 0 ? m : __ddiv_rn(s, (double)p.K));
    }
    const size_t i = (size_t)lh * p.cap + t;
    key[i] = __ddiv_rn(score, (double)p.group);
    ival[i] = t;
}

ckv_status ckv_pol_snapkv(ckv_pol *x, const ckv_policy *p, int32_t budget, const ckv_qwindow *qw,
                          ckv_error *err)
{
    ckv_gpu_cache *c = x->c;
    ckv_gpu_policy_ws *w = x->ws;
    sk_params sp;
    sp.W = (int32_t)ckv_policy_param(p, "window", 1);
    sp.K = (int32_t)ckv_policy_param(p, "kernel", 1);
    sp.pooling = (int32_t)ckv_policy_param(p, "pooling", 0);
    // The checks of the CPU policy, with its messages.
    if (qw->w < sp.W)
        return ckv_errorf(err, CKV_ERR_ARG, "snapkv: window=%d but only %d window queries given",
                          sp.W, qw->w);
    if (qw->n_head < c->n_head_kv || qw->n_head % c->n_head_kv)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "snapkv: %d query heads are not a multiple of %d KV heads", qw->n_head,
                          c->n_head_kv);
    sp.group = qw->n_head / c->n_head_kv;
    sp.n_head = qw->n_head;
    sp.heads_kv = c->n_head_kv;
    sp.qw_w = qw->w;
    sp.cap = x->cap;
    sp.d = x->d;
    sp.scale = 1 / sqrt((double)x->d);
    if (sp.group > 65535)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "cuda snapkv: %d query heads per KV head exceed a grid side", sp.group);
    ckv_pol_plan_over_budget(x, budget);
    const int32_t max_t = ckv_pol_max_row(x, PLAN_T);
    if (!max_t)
        return CKV_OK;
    const size_t q_bytes = (size_t)c->n_layer * qw->n_head * qw->w * x->d * sizeof(float);
    const size_t per_list = (size_t)sp.group * x->cap * sizeof(double);
    ckv_status st;
    if ((st = ckv_pol_grow(x, (void **)&w->q, &w->q_bytes, q_bytes, err)) ||
        (st = ckv_pol_grow(x, (void **)&w->prob, &w->prob_bytes, x->lists * per_list * sp.W,
                           err)) ||
        (st = ckv_pol_grow(x, (void **)&w->acc, &w->acc_bytes, x->lists * per_list, err)) ||
        (st = ckv_pol_upload_plan(x, err)))
        return st;
    CKV_CUDA(cudaMemcpyAsync(w->q, qw->q, q_bytes, cudaMemcpyHostToDevice, x->s));
    ckv_pol_kv(c, [&](auto *k, auto *) {
        sk_prob_kernel<<<dim3(sp.W, sp.group, x->lists), PROB_THREADS, 0, x->s>>>(
            w->q, k, c->deg, w->prob, x->act, x->T, sp);
    });
    CKV_CUDA_LAUNCHED();
    sk_acc_kernel<<<dim3(ckv_pol_blocks(max_t, 256), sp.group, x->lists), 256, 0, x->s>>>(
        w->prob, w->acc, x->act, x->T, sp);
    CKV_CUDA_LAUNCHED();
    sk_score_kernel<<<dim3(ckv_pol_blocks(max_t, 256), x->lists), 256, 0, x->s>>>(
        w->acc, w->key, w->ival, x->act, x->T, sp);
    CKV_CUDA_LAUNCHED();
    return ckv_pol_keep_top(x, sp.W, budget, err);
}
