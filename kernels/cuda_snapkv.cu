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

#include <type_traits>

#include "cuda_bf16.cuh"
#include "cuda_check.h"
#include "cuda_policy.h"

enum { PROB_THREADS = 256, BLOCK_REDUCE_BYTES = PROB_THREADS / 32 * sizeof(double) };

struct sk_params {
    int32_t W, K, pooling, group, n_head, heads_kv, qw_w, cap, d;
    int32_t ks_row;  // a key's elements apart in sk_prob_kernel's tile: an odd count of words
    int32_t rq;      // window rows a chunk of sk_prob_kernel's
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

// Block (group member g, list): the window's acc[t] for query head qh = h
// * group + g, in passes over the list, thread x taking slots t = x, x +
// PROB_THREADS, ... in each:
//  1. every row i's logits of the slots it sees, [0, T - W + i], into
//     prob[i], p.rq rows at a time: their queries as doubles in shared
//     memory, each element's ROWS values side by side, then the keys a
//     tile of PROB_THREADS slots at a time (copied element by element,
//     coalesced), each thread taking its slot's dot products with ROWS rows
//     at once (independent fp64 chains, each over j in order);
//  2. each row's max, 3. its sum of exp(logit - max) (block reductions);
//  4. acc[t] = the rows' exp(logit - max) / sum added in row order, for
//     the pooled slots [0, T - W).
// Each value takes the operations, in the order, of the kernels this one
// replaced (a block a (row, g, list) reading each key from global memory,
// a slot a thread), so it has their bits. Those loads touched 32 rows a
// warp, an L1 wavefront a lane: the 8B's call at 32K took 563 ms, now 55
// (bench compress, runs JI, JN). The queries are converted once: read as
// floats and converted for every product (run JI), the kernel took 80 ms
// (JJ: 62 with this).
enum { ROWS = 8, CHUNK_ROWS = 32 };
template <typename Elem>
__global__ void __launch_bounds__(PROB_THREADS)
    sk_prob_kernel(const float *q, const Elem *keys, const float *deg, double *prob,
                   double *acc, const int32_t *act, const int32_t *T, sk_params p)
{
    const int32_t g = blockIdx.x, lh = blockIdx.y;
    if (!act[lh])
        return;
    extern __shared__ __align__(16) double sk_smem[];
    double *rmax = sk_smem, *rsum = rmax + p.W;
    double *qs = rsum + p.W;  // p.rq rounded up to ROWS rows of p.d
    Elem *ks = reinterpret_cast<Elem *>(qs + (size_t)(p.rq + ROWS - 1) / ROWS * ROWS * p.d);
    const int32_t l = lh / p.heads_kv, h = lh % p.heads_kv, qh = h * p.group + g;
    const float *q0 = q + (((size_t)l * p.n_head + qh) * p.qw_w + (p.qw_w - p.W)) * p.d;
    const int32_t Tl = T[lh], x = threadIdx.x;
    const size_t base = (size_t)lh * p.cap;
    const Elem *K = keys + base * p.d;
    const float *D = deg + base;
    double *P = prob + ((size_t)lh * p.group + g) * p.W * p.cap;

    for (int32_t c0 = 0; c0 < p.W; c0 += p.rq) {
        const int32_t c1 = min(p.W, c0 + p.rq), nq = (c1 - c0 + ROWS - 1) / ROWS * ROWS;
        __syncthreads();  // the last chunk's reads are done
        // qs[group of ROWS rows][j][row in the group]: a step's ROWS values
        // side by side. Rows past W: zeros.
        for (int32_t k = x; k < nq * p.d; k += PROB_THREADS) {
            const int32_t row = k / p.d, j = k % p.d;
            qs[((size_t)(row / ROWS) * p.d + j) * ROWS + row % ROWS] =
                c0 * p.d + k < p.W * p.d ? (double)q0[(size_t)c0 * p.d + k] : 0.0;
        }
        for (int32_t t0 = 0; t0 < Tl; t0 += PROB_THREADS) {
            const int32_t m = min(PROB_THREADS, Tl - t0);
            __syncthreads();  // the last tile's reads are done
            for (int32_t k = x; k < m * p.d; k += PROB_THREADS)
                ks[(k / p.d) * p.ks_row + k % p.d] = K[(size_t)t0 * p.d + k];
            __syncthreads();
            const int32_t t = t0 + x;
            if (x >= m)
                continue;
            const Elem *kt = ks + x * p.ks_row;
            const double lgd = log((double)D[t]);
            for (int32_t i0 = c0; i0 < c1; i0 += ROWS) {
                const double2 *qg =
                    reinterpret_cast<const double2 *>(qs + (size_t)(i0 - c0) * p.d);
                double s[ROWS] = {};
                for (int32_t j = 0; j < p.d; j++) {
                    const double kj = (double)ckv_kv_get(kt, j);
#pragma unroll
                    for (int r = 0; r < ROWS / 2; r++) {
                        const double2 qq = qg[j * (ROWS / 2) + r];
                        s[2 * r] = __dadd_rn(s[2 * r], __dmul_rn(qq.x, kj));
                        s[2 * r + 1] = __dadd_rn(s[2 * r + 1], __dmul_rn(qq.y, kj));
                    }
                }
#pragma unroll
                for (int r = 0; r < ROWS; r++)
                    if (i0 + r < c1 && t < Tl - p.W + i0 + r + 1)
                        P[(size_t)(i0 + r) * p.cap + t] = __dadd_rn(__dmul_rn(s[r], p.scale), lgd);
            }
        }
    }
    for (int32_t i = 0; i < p.W; i++) {
        const int32_t n = Tl - p.W + i + 1;
        const double *Pi = P + (size_t)i * p.cap;
        double mx = -INFINITY;
#pragma unroll 4
        for (int32_t t = x; t < n; t += PROB_THREADS)
            mx = fmax(mx, Pi[t]);
        mx = block_reduce(mx, 1);
        double sum = 0;
#pragma unroll 4
        for (int32_t t = x; t < n; t += PROB_THREADS)
            sum += exp(Pi[t] - mx);
        sum = block_reduce(sum, 0);
        if (x == 0) {
            rmax[i] = mx;
            rsum[i] = sum;
        }
    }
    __syncthreads();
    for (int32_t t = x; t < Tl - p.W; t += PROB_THREADS) {
        double a = 0;
#pragma unroll 4
        for (int32_t i = 0; i < p.W; i++)
            a = __dadd_rn(a, __ddiv_rn(exp(P[(size_t)i * p.cap + t] - rmax[i]), rsum[i]));
        acc[((size_t)lh * p.group + g) * p.cap + t] = a;
    }
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
    // A key of the tile an odd count of 4-byte words from the next, so that
    // the threads reading element j of their own keys hit distinct banks.
    // The window's rows in chunks of at most CHUNK_ROWS whose queries fit
    // beside the tile: the default window (32) in one, 32 KB at head_dim
    // 128, two blocks an SM over bf16 keys. The tile bounds head_dim: at
    // the H200's 227 KB a block, up to about 210 over fp32 keys and 400
    // over bf16 (the decoder's caches take 64 or 128).
    const int32_t per_word = c->dtype == CKV_KV_BF16 ? 2 : 1;
    int32_t words = (x->d + per_word - 1) / per_word;
    words += words % 2 == 0;
    sp.ks_row = words * per_word;
    const size_t fixed = 2 * (size_t)sp.W * sizeof(double) +
                         (size_t)PROB_THREADS * sp.ks_row * ckv_kv_dtype_size(c->dtype);
    const size_t per_rows = (size_t)ROWS * x->d * sizeof(double);
    size_t most;
    if ((st = ckv_pol_smem_most(&most, err)))
        return st;
    most -= BLOCK_REDUCE_BYTES;  // the static part[] of block_reduce
    const size_t room = most > fixed ? (most - fixed) / per_rows : 0;
    sp.rq = (int32_t)(room * ROWS < (size_t)CHUNK_ROWS ? room * ROWS : (size_t)CHUNK_ROWS);
    if (sp.rq > sp.W)
        sp.rq = sp.W;
    const size_t smem = fixed + (size_t)(sp.rq + ROWS - 1) / ROWS * per_rows;
    if (sp.rq < 1)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "cuda snapkv: window=%d, head_dim %d and %s keys need over %zu bytes "
                          "of shared memory a block (the device allows %zu)",
                          sp.W, x->d, c->dtype == CKV_KV_BF16 ? "bf16" : "fp32",
                          fixed + per_rows, most);
    ckv_status ks_st = CKV_OK;
    ckv_pol_kv(c, [&](auto *k, auto *) {
        using E = std::remove_pointer_t<decltype(k)>;
        if ((ks_st = ckv_pol_allow_smem(sk_prob_kernel<E>, smem, "cuda snapkv", err)))
            return;
        sk_prob_kernel<E><<<dim3(sp.group, x->lists), PROB_THREADS, smem, x->s>>>(
            w->q, k, c->deg, w->prob, w->acc, x->act, x->T, sp);
    });
    if (ks_st)
        return ks_st;
    CKV_CUDA_LAUNCHED();
    sk_score_kernel<<<dim3(ckv_pol_blocks(max_t, 256), x->lists), 256, 0, x->s>>>(
        w->acc, w->key, w->ival, x->act, x->T, sp);
    CKV_CUDA_LAUNCHED();
    return ckv_pol_keep_top(x, sp.W, budget, err);
}
