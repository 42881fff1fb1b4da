// CentroidKV's Chunked Soft Matching on the GPU (policies.md, "centroid"),
// one round of every list over budget per step: key norms, the chunk
// partition, each source's best partner, the global top-m ranking (a
// stable segmented sort), and the merge (cuda_compact.cu). CPU twins:
// round_list and ckv_csm_partition_chunk in src/policies/centroid.c. The
// cosines are computed as the CPU computes them (double, in index order,
// no fused multiply-add), so they are equal to the bit and so are the
// decisions. The host knows each round's candidate and merge counts from
// the lengths alone and uses the CPU's own rate functions.
#include <math.h>

#include "cuda_check.h"
#include "cuda_policy.h"
#include "splitmix.h"

extern "C" {
#include "policies/csm.h"
}

struct csm_params {
    int32_t sinks, recent, C, partition;
    uint64_t seed;
    int64_t round;
    int32_t layers, heads;
};

// Identity dest for the whole list; key norms over the middle.
__global__ void csm_norm_kernel(const float *k, double *norm, int32_t *dest, const int32_t *act,
                                const int32_t *T, csm_params p, int32_t cap, int32_t d)
{
    const int32_t lh = blockIdx.y, t = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh] || t >= T[lh])
        return;
    const size_t row = (size_t)lh * cap + t;
    dest[row] = t;
    if (t < p.sinks || t >= T[lh] - p.recent)
        return;
    const float *kr = k + row * d;
    double s = 0;
    for (int32_t i = 0; i < d; i++)
        s = __dadd_rn(s, __dmul_rn((double)kr[i], (double)kr[i]));
    norm[row] = sqrt(s);
}

// One thread per chunk: in_a[slot] = 1 for sources, 0 for destinations.
__global__ void csm_partition_kernel(uint8_t *in_a, int32_t *perm, const int32_t *act,
                                     const int32_t *T, csm_params p, int32_t cap)
{
    const int32_t lh = blockIdx.y, chunk = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh])
        return;
    const int32_t end = T[lh] - p.recent;
    const int64_t c0 = p.sinks + (int64_t)chunk * p.C;
    if (c0 >= end)
        return;
    const int32_t L = end - c0 < p.C ? (int32_t)(end - c0) : p.C, half = (L + 1) / 2;
    const size_t base = (size_t)lh * cap + c0;
    uint8_t *A = in_a + base;
    if (p.partition == CKV_CSM_ALTERNATING) {
        for (int32_t o = 0; o < L; o++)
            A[o] = o % 2 == 0;
        return;
    }
    if (p.partition == CKV_CSM_SEQUENTIAL) {
        for (int32_t o = 0; o < L; o++)
            A[o] = o < half;
        return;
    }
    const int32_t l = lh / p.heads, h = lh % p.heads;
    const uint64_t idx = (((uint64_t)p.round * (uint64_t)p.layers + (uint64_t)l) *
                              (uint64_t)p.heads +
                          (uint64_t)h) * (1ull << 20) +
                         (uint64_t)chunk;
    uint64_t state = p.seed + 0x9E3779B97F4A7C15ull * (1 + idx);
    int32_t *P = perm + base;
    for (int32_t o = 0; o < L; o++)
        P[o] = o;
    for (int32_t i = L - 1; i >= 1; i--) {
        const int32_t j = (int32_t)(ckv_splitmix64(&state) % (uint64_t)(i + 1));
        const int32_t t = P[i];
        P[i] = P[j];
        P[j] = t;
    }
    for (int32_t o = 0; o < L; o++)
        A[P[o]] = o < half;
}

// One thread per middle slot a: a source's best partner in its chunk and
// its score (the sort key); -inf for slots that are not candidates.
__global__ void csm_best_kernel(const float *k, const double *norm, const uint8_t *in_a,
                                double *key, int32_t *ival, int32_t *partner, double *gap,
                                const int32_t *act, const int32_t *T, csm_params p, int32_t cap,
                                int32_t d)
{
    const int32_t lh = blockIdx.y, a = p.sinks + blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[lh])
        return;
    const int32_t end = T[lh] - p.recent;
    if (a >= end)
        return;
    const size_t base = (size_t)lh * cap, ra = base + a;
    ival[ra] = a;
    key[ra] = -INFINITY;
    if (!in_a[ra])
        return;
    const int32_t c0 = p.sinks + (a - p.sinks) / p.C * p.C;
    const int32_t L = end - c0 < p.C ? end - c0 : p.C;
    const float *ka = k + ra * d;
    const double na = norm[ra];
    int32_t best = -1;
    double bs = 0, second = -INFINITY;
    for (int32_t ob = 0; ob < L; ob++) {
        const int32_t b = c0 + ob;
        if (in_a[base + b])
            continue;
        const double nb = norm[base + b];
        double sim = 0;
        if (na >= 1e-30 && nb >= 1e-30) {
            const float *kb = k + (base + b) * d;
            for (int32_t i = 0; i < d; i++)
                sim = __dadd_rn(sim, __dmul_rn((double)ka[i], (double)kb[i]));
            sim = __ddiv_rn(sim, __dmul_rn(na, nb));
        }
        if (best < 0 || sim > bs) {
            if (best >= 0)
                second = bs;
            best = b;
            bs = sim;
        } else if (sim > second) {
            second = sim;
        }
    }
    if (best < 0)
        return;
    key[ra] = bs;
    partner[ra] = best;
    gap[ra] = bs - second;
}

// The top m candidates of each list (x: m, y: candidates) merge into their
// partners.
__global__ void csm_mark_kernel(int32_t *dest, const double *key_out, const int32_t *ival_out,
                                const int32_t *partner, const double *gap, unsigned *margin,
                                const int32_t *act, const int32_t *seg_b, const int32_t *m_of,
                                const int32_t *nc_of, int32_t cap)
{
    const int32_t lh = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    const int32_t m = m_of[lh];
    if (!act[lh] || i >= m)
        return;
    const size_t pos = (size_t)seg_b[lh] + i, ra = (size_t)lh * cap + ival_out[pos];
    dest[ra] = partner[ra];
    double g = gap[ra];
    if (i == m - 1 && m < nc_of[lh] && key_out[pos] - key_out[pos + 1] < g)
        g = key_out[pos] - key_out[pos + 1];
    ckv_pol_note_margin(margin + lh, g);
}

ckv_status ckv_pol_centroid(ckv_pol *x, const ckv_policy *p, int32_t budget, ckv_error *err)
{
    ckv_gpu_cache *c = x->c;
    csm_params cp;
    cp.sinks = (int32_t)ckv_policy_param(p, "sinks", 0);
    cp.recent = (int32_t)ckv_policy_param(p, "recent", 0);
    cp.C = (int32_t)ckv_policy_param(p, "chunk", 2);
    cp.partition = (int32_t)ckv_policy_param(p, "partition", 0);
    cp.seed = (uint64_t)ckv_policy_param(p, "seed", 0);
    cp.layers = c->n_layer;
    cp.heads = c->n_head_kv;
    const int64_t r_init = ckv_policy_param(p, "r_init", 0), r_step = ckv_policy_param(p, "r_step", 0),
                  r_min = ckv_policy_param(p, "r_min", 0);
    const ckv_csm_schedule schedule = (ckv_csm_schedule)ckv_policy_param(p, "schedule", 0);
    int32_t *act = ckv_pol_h(x, PLAN_ACT), *T = ckv_pol_h(x, PLAN_T);
    int32_t *sb = ckv_pol_h(x, PLAN_SEG_B), *se = ckv_pol_h(x, PLAN_SEG_E);
    int32_t *m_of = ckv_pol_h(x, PLAN_X), *nc_of = ckv_pol_h(x, PLAN_Y);
    ckv_gpu_policy_ws *w = x->ws;
    for (;;) {
        const int64_t rate = ckv_csm_rate(c->round, r_init, r_step, r_min, schedule);
        bool any = false;
        int32_t max_t = 0, max_chunks = 0, max_mid = 0, max_m = 0;
        for (int32_t lh = 0; lh < x->lists; lh++) {
            T[lh] = c->len_h[lh];
            const int32_t end = T[lh] - cp.recent;
            int32_t nc = 0, chunks = 0;
            if (T[lh] > budget)
                for (int32_t c0 = cp.sinks; c0 < end; c0 += cp.C, chunks++) {
                    const int32_t L = end - c0 < cp.C ? end - c0 : cp.C;
                    if (L >= 2)
                        nc += (L + 1) / 2;
                }
            act[lh] = T[lh] > budget && nc > 0;
            m_of[lh] = act[lh] ? (int32_t)ckv_csm_merges(rate, nc, T[lh] - budget) : 0;
            nc_of[lh] = nc;
            sb[lh] = lh * x->cap + cp.sinks;
            se[lh] = act[lh] ? lh * x->cap + end : sb[lh];
            if (!act[lh])
                continue;
            any = true;
            max_t = max_t > T[lh] ? max_t : T[lh];
            max_chunks = max_chunks > chunks ? max_chunks : chunks;
            max_mid = max_mid > end - cp.sinks ? max_mid : end - cp.sinks;
            max_m = max_m > m_of[lh] ? max_m : m_of[lh];
        }
        if (!any)
            break;
        cp.round = c->round;
        ckv_status st = ckv_pol_upload_plan(x, err);
        if (st)
            return st;
        csm_norm_kernel<<<dim3(ckv_pol_blocks(max_t, 256), x->lists), 256, 0, x->s>>>(
            c->k, w->norm, w->dest, x->act, x->T, cp, x->cap, x->d);
        CKV_CUDA_LAUNCHED();
        csm_partition_kernel<<<dim3(ckv_pol_blocks(max_chunks, 64), x->lists), 64, 0, x->s>>>(
            w->in_a, w->perm, x->act, x->T, cp, x->cap);
        CKV_CUDA_LAUNCHED();
        csm_best_kernel<<<dim3(ckv_pol_blocks(max_mid, 128), x->lists), 128, 0, x->s>>>(
            c->k, w->norm, w->in_a, w->key, w->ival, w->partner, w->gap, x->act, x->T, cp, x->cap,
            x->d);
        CKV_CUDA_LAUNCHED();
        if ((st = ckv_pol_sort_desc(x, err)))
            return st;
        csm_mark_kernel<<<dim3(ckv_pol_blocks(max_m, 256), x->lists), 256, 0, x->s>>>(
            w->dest, w->key_out, w->ival_out, w->partner, w->gap, w->margin, x->act, x->seg_b,
            x->x, x->y, x->cap);
        CKV_CUDA_LAUNCHED();
        if ((st = ckv_pol_apply(x, true, err)))
            return st;
        c->round++;
    }
    return CKV_OK;
}
