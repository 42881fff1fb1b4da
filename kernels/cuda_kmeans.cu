// The K-Means baseline on the GPU (policies.md, "kmeans"), every list over
// budget at once. CPU twin: compress_list in src/policies/kmeans.c.
// Features, centroid updates and norms are computed as the CPU computes
// them (double, members in slot order, no fused multiply-add); the
// assignment's dot products run in tiles in double, where the CPU uses
// BLAS, so cosines agree to ~1e-16 and a decision can differ only at a
// near-tie (the margin the trace reports). Keys are read as fp32 from either
// cache type; the merged centroids are stored in it (cuda_compact.cu).
#include <math.h>

#include "cuda_bf16.cuh"
#include "cuda_check.h"
#include "cuda_policy.h"

enum { TM = 32, TK = 32, ASSIGN_THREADS = 256, GROUPS = ASSIGN_THREADS / TM };

struct km_params {
    int32_t sinks, k, cap, d;
};

// Identity dest for the list; unit-normalised keys of the middle and their
// norms (x: M, the middle's length).
template <typename Elem>
__global__ void km_feature_kernel(const Elem *keys, double *f, double *fnorm, int32_t *dest,
                                  const int32_t *act, const int32_t *T, const int32_t *M_of,
                                  km_params p)
{
    const int32_t lh = blockIdx.y, t = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || t >= T[lh])
        return;
    const size_t base = (size_t)lh * p.cap;
    dest[base + t] = t;
    const int32_t m = t - p.sinks;
    if (m < 0 || m >= M_of[lh])
        return;
    const Elem *key = keys + (base + t) * p.d;
    double n = 0;
    for (int32_t i = 0; i < p.d; i++) {
        const double x = ckv_kv_get(key, i);
        n = __dadd_rn(n, __dmul_rn(x, x));
    }
    n = sqrt(n);
    double *fr = f + (base + m) * p.d, s = 0;
    for (int32_t i = 0; i < p.d; i++) {
        fr[i] = n < 1e-30 ? 0 : __ddiv_rn((double)ckv_kv_get(key, i), n);
        s = __dadd_rn(s, __dmul_rn(fr[i], fr[i]));
    }
    fnorm[base + m] = sqrt(s);
}

// Centroid j starts at the feature of middle index ((2j + 1) M) / (2k).
__global__ void km_init_kernel(const double *f, double *cen, const int32_t *act,
                               const int32_t *M_of, km_params p)
{
    const int32_t lh = blockIdx.y;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || idx >= (int64_t)p.k * p.d)
        return;
    const int32_t j = (int32_t)(idx / p.d), i = (int32_t)(idx % p.d);
    const int64_t m = ((2 * (int64_t)j + 1) * M_of[lh]) / (2 * (int64_t)p.k);
    const size_t base = (size_t)lh * p.cap;
    cen[(base + j) * p.d + i] = f[(base + m) * p.d + i];
}

__global__ void km_cnorm_kernel(const double *cen, double *cnorm, const int32_t *act, km_params p)
{
    const int32_t lh = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || j >= p.k)
        return;
    const size_t r = (size_t)lh * p.cap + j;
    const double *c = cen + r * p.d;
    double s = 0;
    for (int32_t i = 0; i < p.d; i++)
        s = __dadd_rn(s, __dmul_rn(c[i], c[i]));
    cnorm[r] = sqrt(s);
}

// Best of two (score, cluster, runner-up) triples: higher score, ties the
// lower cluster.
struct km_best {
    double s, second;
    int32_t j;
};

static __device__ km_best km_merge(km_best a, km_best b)
{
    if (b.s > a.s || (b.s == a.s && b.j < a.j))
        return {b.s, fmax(b.second, a.s), b.j};
    return {a.s, fmax(a.second, b.s), a.j};
}

// Assigns each middle entry to the centroid of highest cosine (ties: the
// lowest index). A block takes TM features against all centroids, TK at a
// time through shared memory; thread (g, r) scores feature r against
// centroids g, g + GROUPS, ... of each tile, and the GROUPS partial bests
// of a feature are merged at the end.
__global__ void __launch_bounds__(ASSIGN_THREADS)
    km_assign_kernel(const double *f, const double *fnorm, const double *cen,
                     const double *cnorm, int32_t *cl, unsigned *margin, const int32_t *act,
                     const int32_t *M_of, km_params p)
{
    extern __shared__ double sm[];
    const int32_t lh = blockIdx.y, m0 = blockIdx.x * TM;
    if (!act[lh] || m0 >= M_of[lh])
        return;  // the whole block leaves together
    const int32_t M = M_of[lh], d = p.d, stride = d + 1;  // +1: no bank conflicts on rows
    double *fs = sm, *cs = sm + TM * stride;
    const size_t base = (size_t)lh * p.cap;
    const int tid = threadIdx.x, r = tid % TM, g = tid / TM;
    for (int32_t e = tid; e < TM * d; e += ASSIGN_THREADS) {
        const int32_t rr = e / d, i = e % d;
        fs[rr * stride + i] = m0 + rr < M ? f[(base + m0 + rr) * d + i] : 0.0;
    }
    const double fn = m0 + r < M ? fnorm[base + m0 + r] : 0.0;
    km_best b = {-INFINITY, -INFINITY, 0};
    for (int32_t j0 = 0; j0 < p.k; j0 += TK) {
        __syncthreads();  // fs is loaded; cs of the previous tile is no longer read
        for (int32_t e = tid; e < TK * d; e += ASSIGN_THREADS) {
            const int32_t jj = e / d, i = e % d;
            cs[jj * stride + i] = j0 + jj < p.k ? cen[(base + j0 + jj) * d + i] : 0.0;
        }
        __syncthreads();
        for (int32_t jj = g; jj < TK && j0 + jj < p.k; jj += GROUPS) {
            const double *fr = fs + r * stride, *cr = cs + jj * stride;
            double dot = 0;
            for (int32_t i = 0; i < d; i++)
                dot += fr[i] * cr[i];
            const double cn = cnorm[base + j0 + jj];
            const double s = fn < 1e-30 || cn < 1e-30 ? 0 : dot / (fn * cn);
            if (s > b.s) {
                b.second = b.s;
                b.s = s;
                b.j = j0 + jj;
            } else if (s > b.second) {
                b.second = s;
            }
        }
    }
    __syncthreads();  // sm is reused for the partial bests
    km_best *part = reinterpret_cast<km_best *>(sm);
    part[g * TM + r] = b;
    __syncthreads();
    if (g != 0 || m0 + r >= M)
        return;
    for (int gg = 1; gg < GROUPS; gg++)
        b = km_merge(b, part[gg * TM + r]);
    cl[base + m0 + r] = b.j;
    ckv_pol_note_margin(margin + lh, b.s - b.second);
}

// Sort keys for grouping the middle by cluster; clusters start without a run.
__global__ void km_group_prep_kernel(const int32_t *cl, int32_t *ikey, int32_t *ival,
                                     int32_t *run_b, const int32_t *act, const int32_t *M_of,
                                     km_params p)
{
    const int32_t lh = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh])
        return;
    const size_t base = (size_t)lh * p.cap;
    if (i < p.k)
        run_b[base + i] = -1;
    if (i < M_of[lh]) {
        ikey[base + i] = cl[base + i];
        ival[base + i] = i;
    }
}

// Lloyd step for cluster j: the normalised degree-weighted mean of its
// members' features, members in slot order; empty clusters and means of
// norm below 1e-30 keep their centroid.
__global__ void km_update_kernel(const double *f, const float *deg, double *cen, double *csum,
                                 const int32_t *run_b, const int32_t *run_e,
                                 const int32_t *members, const int32_t *act, km_params p)
{
    const int32_t lh = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || j >= p.k)
        return;
    const size_t base = (size_t)lh * p.cap;
    const int32_t rb = run_b[base + j];
    if (rb < 0)
        return;
    const int32_t re = run_e[base + j], d = p.d;
    const float *D = deg + base + p.sinks;
    double wsum = 0;
    for (int32_t r = rb; r < re; r++)
        wsum = __dadd_rn(wsum, (double)D[members[r]]);
    double *s = csum + (base + j) * d, n = 0;
    for (int32_t i = 0; i < d; i++) {
        double a = 0;
        for (int32_t r = rb; r < re; r++) {
            const int32_t m = members[r];
            a = __dadd_rn(a, __dmul_rn((double)D[m], f[(base + m) * d + i]));
        }
        s[i] = __ddiv_rn(a, wsum);
        n = __dadd_rn(n, __dmul_rn(s[i], s[i]));
    }
    n = sqrt(n);
    if (n < 1e-30)
        return;
    double *c = cen + (base + j) * d;
    for (int32_t i = 0; i < d; i++)
        c[i] = __ddiv_rn(s[i], n);
}

// Each cluster collapses into its smallest member slot.
__global__ void km_dest_kernel(int32_t *dest, const int32_t *cl, const int32_t *run_b,
                               const int32_t *members, const int32_t *act, const int32_t *M_of,
                               km_params p)
{
    const int32_t lh = blockIdx.y, m = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || m >= M_of[lh])
        return;
    const size_t base = (size_t)lh * p.cap;
    dest[base + p.sinks + m] = p.sinks + members[run_b[base + cl[base + m]]];
}

ckv_status ckv_pol_kmeans(ckv_pol *x, const ckv_policy *p, int32_t budget, ckv_error *err)
{
    ckv_gpu_cache *c = x->c;
    ckv_gpu_policy_ws *w = x->ws;
    const int32_t sinks = (int32_t)ckv_policy_param(p, "sinks", 0);
    const int32_t recent = (int32_t)ckv_policy_param(p, "recent", 0);
    const int32_t iters = (int32_t)ckv_policy_param(p, "iters", 0);
    km_params kp = {sinks, budget - sinks - recent, x->cap, x->d};
    int32_t *act = ckv_pol_h(x, PLAN_ACT), *T = ckv_pol_h(x, PLAN_T);
    int32_t *sb = ckv_pol_h(x, PLAN_SEG_B), *se = ckv_pol_h(x, PLAN_SEG_E);
    int32_t *M_of = ckv_pol_h(x, PLAN_X);
    int32_t max_t = 0, max_m = 0;
    for (int32_t lh = 0; lh < x->lists; lh++) {
        T[lh] = c->len_h[lh];
        M_of[lh] = T[lh] - sinks - recent;
        act[lh] = T[lh] > budget && kp.k < M_of[lh];
        sb[lh] = lh * x->cap;
        se[lh] = act[lh] ? sb[lh] + M_of[lh] : sb[lh];
        if (act[lh]) {
            max_t = max_t > T[lh] ? max_t : T[lh];
            max_m = max_m > M_of[lh] ? max_m : M_of[lh];
        }
    }
    if (!max_t)
        return CKV_OK;

    // The feature and centroid tiles, then (reused) the partial bests.
    size_t smem = (size_t)(TM + TK) * (x->d + 1) * sizeof(double);
    if (smem < ASSIGN_THREADS * sizeof(km_best))
        smem = ASSIGN_THREADS * sizeof(km_best);
    int dev = 0, optin = 0;
    CKV_CUDA(cudaGetDevice(&dev));
    CKV_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (smem > (size_t)optin)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "cuda kmeans: head_dim %d needs %zu bytes of shared memory (device: %d)",
                          x->d, smem, optin);
    CKV_CUDA(cudaFuncSetAttribute(km_assign_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem));
    ckv_status st;
    if ((st = ckv_pol_take(x, (void **)&w->f, w->rows * sizeof(double), err)) ||
        (st = ckv_pol_take(x, (void **)&w->cen, w->rows * sizeof(double), err)) ||
        (st = ckv_pol_take(x, (void **)&w->csum, w->rows * sizeof(double), err)) ||
        (st = ckv_pol_take(x, (void **)&w->cnorm, w->slots * sizeof(double), err)) ||
        (st = ckv_pol_take(x, (void **)&w->cl, w->slots * sizeof(int32_t), err)) ||
        (st = ckv_pol_upload_plan(x, err)))
        return st;

    const dim3 over_t(ckv_pol_blocks(max_t, 128), x->lists);
    const dim3 over_m(ckv_pol_blocks(max_m > kp.k ? max_m : kp.k, 256), x->lists);
    const dim3 over_k(ckv_pol_blocks(kp.k, 128), x->lists);
    const dim3 tiles(ckv_pol_blocks(max_m, TM), x->lists);
    ckv_pol_kv(c, [&](auto *k, auto *) {
        km_feature_kernel<<<over_t, 128, 0, x->s>>>(k, w->f, w->norm, w->dest, x->act, x->T,
                                                    x->x, kp);
    });
    CKV_CUDA_LAUNCHED();
    km_init_kernel<<<dim3(ckv_pol_blocks((int64_t)kp.k * x->d, 256), x->lists), 256, 0, x->s>>>(
        w->f, w->cen, x->act, x->x, kp);
    CKV_CUDA_LAUNCHED();
    for (int32_t it = 0; it <= iters; it++) {
        km_cnorm_kernel<<<over_k, 128, 0, x->s>>>(w->cen, w->cnorm, x->act, kp);
        CKV_CUDA_LAUNCHED();
        km_assign_kernel<<<tiles, ASSIGN_THREADS, smem, x->s>>>(w->f, w->norm, w->cen, w->cnorm,
                                                                w->cl, w->margin, x->act, x->x,
                                                                kp);
        CKV_CUDA_LAUNCHED();
        // Members of each cluster in slot order: a stable sort by cluster.
        km_group_prep_kernel<<<over_m, 256, 0, x->s>>>(w->cl, w->ikey, w->ival, w->run_b, x->act,
                                                       x->x, kp);
        CKV_CUDA_LAUNCHED();
        if ((st = ckv_pol_sort_int(x, err)) || (st = ckv_pol_runs(x, max_m, err)))
            return st;
        if (it == iters)
            break;  // the final assignment: no update after it
        km_update_kernel<<<over_k, 128, 0, x->s>>>(w->f, c->deg, w->cen, w->csum, w->run_b,
                                                   w->run_e, w->ival_out, x->act, kp);
        CKV_CUDA_LAUNCHED();
    }
    km_dest_kernel<<<dim3(ckv_pol_blocks(max_m, 256), x->lists), 256, 0, x->s>>>(
        w->dest, w->cl, w->run_b, w->ival_out, x->act, x->x, kp);
    CKV_CUDA_LAUNCHED();
    return ckv_pol_apply(x, max_m, err);
}
