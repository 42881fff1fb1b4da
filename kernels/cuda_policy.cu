// The GPU policies' entry points (cuda.h): checks as ckv_policy_compress
// makes them, the scratch (two a device, for calls over one cache and over
// several: each taken at its first call, filled with NaN bytes once, grown
// for a larger call, kept until ckv_gpu_policy_scratch_release), the plan
// and cache table upload, and the dispatch to cuda_csm.cu,
// cuda_kmeans.cu, cuda_snapkv.cu and the top-k / eviction policies of
// cuda_compact.cu.
#include <float.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "cuda_check.h"
#include "cuda_policy.h"

// The GPU policies and what their kernels take: several caches a call
// (their lists through the call's table) and caches whose rows are mapped
// (slots read through the map; their apply fills the rows it frees and
// takes the map at the first call). SnapKV's and K-Means's kernels read
// and move rows in slot order, one cache at a time.
static const struct {
    const char *name;
    bool many, maps;
} gpu_policies[] = {
    {"full", true, false},     {"streaming", true, true}, {"h2o", true, true},
    {"snapkv", false, false}, {"kmeans", false, false},  {"centroid", true, true},
};

static int policy_index(const ckv_policy *p)
{
    for (size_t i = 0; i < sizeof gpu_policies / sizeof gpu_policies[0]; i++)
        if (!strcmp(p->ops->name, gpu_policies[i].name))
            return (int)i;
    return -1;
}

extern "C" bool ckv_gpu_policy_supported(const ckv_policy *p)
{
    return policy_index(p) >= 0;
}

extern "C" bool ckv_gpu_policy_many(const ckv_policy *p)
{
    const int i = policy_index(p);
    return i >= 0 && gpu_policies[i].many;
}

extern "C" int32_t ckv_gpu_policy_entry_bytes(const ckv_policy *p)
{
    const int i = policy_index(p);
    return i >= 0 && gpu_policies[i].maps ? (int32_t)sizeof(int32_t) : 0;
}

static void ws_free(ckv_gpu_policy_ws *ws)
{
    if (!ws)
        return;
    for (int i = 0; i < ws->n_mem; i++)
        cudaFree(ws->mem[i].p);
    free(ws->h_plan);
    free(ws->h_newlen);
    free(ws->h_tab);
    free(ws);
}

static ckv_status ws_alloc(ckv_gpu_policy_ws *ws, void **p, size_t bytes, ckv_error *err)
{
    if (ws->n_mem == WS_MAX_BUFFERS)
        return ckv_errorf(err, CKV_ERR_DEVICE, "cuda policy: more than %d scratch buffers",
                          WS_MAX_BUFFERS);
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *p = NULL;
        return ckv_errorf(err, CKV_ERR_DEVICE,
                          "cuda policy: cannot allocate %.1f MiB of scratch: %s",
                          (double)bytes / (1 << 20), cudaGetErrorString(e));
    }
    ws->mem[ws->n_mem].p = *p;
    ws->mem[ws->n_mem].bytes = bytes;
    ws->n_mem++;
    // NaN bytes: a kernel reading scratch it never wrote shows in the results.
    // The wait orders the fill before work on any stream.
    CKV_CUDA(cudaMemset(*p, 0xff, bytes));
    CKV_CUDA(cudaDeviceSynchronize());
    return CKV_OK;
}

ckv_status ckv_pol_take(ckv_pol *x, void **p, size_t bytes, ckv_error *err)
{
    return *p ? CKV_OK : ws_alloc(x->ws, p, bytes, err);
}

ckv_status ckv_pol_grow(ckv_pol *x, void **p, size_t *have, size_t bytes, ckv_error *err)
{
    ckv_gpu_policy_ws *ws = x->ws;
    if (*p && *have >= bytes)
        return CKV_OK;
    if (*p) {
        // cudaFree waits for the device: only when a buffer must grow.
        for (int i = 0; i < ws->n_mem; i++)
            if (ws->mem[i].p == *p) {
                ws->mem[i] = ws->mem[--ws->n_mem];
                break;
            }
        CKV_CUDA(cudaFree(*p));
        *p = NULL;
        *have = 0;
    }
    ckv_status st = ws_alloc(ws, p, bytes, err);
    if (!st)
        *have = bytes;
    return st;
}

// The map of every cache whose lists take part.
static ckv_status take_maps(ckv_pol *x, ckv_error *err)
{
    for (int32_t i = 0; i < x->n; i++) {
        ckv_status st =
            ckv_pol_cache_active(x, i) ? ckv_gpu_cache_take_map(x->cs[i], err) : CKV_OK;
        if (st)
            return st;
    }
    return CKV_OK;
}

ckv_status ckv_pol_upload_plan(ckv_pol *x, ckv_error *err)
{
    ckv_status st = x->fill ? take_maps(x, err) : CKV_OK;
    if (st)
        return st;
    ckv_gpu_policy_ws *w = x->ws;
    for (int32_t i = 0; i < x->n; i++) {
        const ckv_gpu_cache *c = x->cs[i];
        w->h_tab[i] = ckv_pol_cache{c->k,      c->v,   c->deg,   c->score,         c->len_d,
                                    c->row,    c->row_len, c->round, c->mapped ? 1 : 0};
    }
    // Pageable sources: the call returns once the data is staged, so the
    // host rows may be rewritten at once.
    CKV_CUDA(cudaMemcpyAsync(w->tab, w->h_tab, (size_t)x->n * sizeof *w->h_tab,
                             cudaMemcpyHostToDevice, x->s));
    CKV_CUDA(cudaMemcpyAsync(w->plan, w->h_plan, (size_t)PLAN_ROWS * x->lists * sizeof(int32_t),
                             cudaMemcpyHostToDevice, x->s));
    return CKV_OK;
}

ckv_status ckv_pol_smem_most(size_t *bytes, ckv_error *err)
{
    int dev = 0, optin = 0;
    CKV_CUDA(cudaGetDevice(&dev));
    CKV_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    *bytes = (size_t)optin;
    return CKV_OK;
}

int32_t ckv_pol_max_row(ckv_pol *x, int row)
{
    const int32_t *act = ckv_pol_h(x, PLAN_ACT), *r = ckv_pol_h(x, row);
    int32_t mx = 0;
    for (int32_t lh = 0; lh < x->lists; lh++)
        if (act[lh] && r[lh] > mx)
            mx = r[lh];
    return mx;
}

// The buffers every policy uses.
static ckv_status ws_fill(ckv_gpu_policy_ws *ws, size_t lists, size_t n, size_t rows,
                          ckv_error *err)
{
    ws->lists = lists;
    ws->slots = n;
    ws->rows = rows;
    ws->h_plan = static_cast<int32_t *>(calloc(PLAN_ROWS * lists, sizeof(int32_t)));
    ws->h_newlen = static_cast<int32_t *>(calloc(lists, sizeof(int32_t)));
    if (!ws->h_plan || !ws->h_newlen)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cuda policy: out of host memory");
    struct {
        void *p;
        size_t bytes;
    } want[] = {
        {&ws->plan, PLAN_ROWS * lists * sizeof(int32_t)},
        {&ws->newlen, lists * sizeof(int32_t)},
        {&ws->margin, lists * sizeof(unsigned)},
        {&ws->deg, n * sizeof(float)},
        {&ws->score, n * sizeof(float)},
        {&ws->dest, n * sizeof(int32_t)},
        {&ws->newslot, n * sizeof(int32_t)},
        {&ws->assign, n * sizeof(int32_t)},
        {&ws->run_b, n * sizeof(int32_t)},
        {&ws->run_e, n * sizeof(int32_t)},
        {&ws->partner, n * sizeof(int32_t)},
        {&ws->perm, n * sizeof(int32_t)},
        {&ws->ikey, n * sizeof(int32_t)},
        {&ws->ikey_out, n * sizeof(int32_t)},
        {&ws->ival, n * sizeof(int32_t)},
        {&ws->ival_out, n * sizeof(int32_t)},
        {&ws->key, n * sizeof(double)},
        {&ws->key_out, n * sizeof(double)},
        {&ws->norm, n * sizeof(double)},
        {&ws->gap, n * sizeof(double)},
        {&ws->in_a, n},
        {&ws->row_slot, n * sizeof(int32_t)},
        {&ws->fill_to, n * sizeof(int32_t)},
        {&ws->fill_from, n * sizeof(int32_t)},
        {&ws->fill_n, lists * sizeof(int32_t)},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ckv_status st = ws_alloc(ws, static_cast<void **>(want[i].p), want[i].bytes, err);
        if (st)
            return st;
    }
    return CKV_OK;
}

// Two scratches a device: one for the calls over one cache, one for those
// over several. A call over n caches needs n times the slots, and K-Means's
// and SnapKV's buffers (one cache a call) are sized to their scratch's
// slots: in one scratch they would take n times their memory.
enum { MAX_DEVICES = 64 };
static ckv_gpu_policy_ws *ws_pool[MAX_DEVICES][2];

static ckv_status current_device(int *dev, ckv_error *err)
{
    CKV_CUDA(cudaGetDevice(dev));
    if (*dev < 0 || *dev >= MAX_DEVICES)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED, "cuda policy: device %d beyond the first %d",
                          *dev, MAX_DEVICES);
    return CKV_OK;
}

// The current device's scratch for a call over n caches of c's shape,
// (re)made to hold it and every call it held before, so that alternating
// shapes do not reallocate.
static ckv_status ws_for(const ckv_gpu_cache *c, int32_t n_caches, ckv_gpu_policy_ws **out,
                         ckv_error *err)
{
    int dev;
    ckv_status st = current_device(&dev, err);
    if (st)
        return st;
    size_t lists = (size_t)n_caches * c->n_layer * c->n_head_kv, n = lists * c->capacity,
           rows = n * c->head_dim;
    ckv_gpu_policy_ws **pool = &ws_pool[dev][n_caches > 1];
    ckv_gpu_policy_ws *old = *pool;
    if (old && old->lists >= lists && old->slots >= n && old->rows >= rows) {
        *out = old;
        return CKV_OK;
    }
    if (old) {
        lists = old->lists > lists ? old->lists : lists;
        n = old->slots > n ? old->slots : n;
        rows = old->rows > rows ? old->rows : rows;
        ws_free(old);
        *pool = NULL;
    }
    ckv_gpu_policy_ws *ws = static_cast<ckv_gpu_policy_ws *>(calloc(1, sizeof *ws));
    if (!ws)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cuda policy: out of host memory");
    if ((st = ws_fill(ws, lists, n, rows, err))) {
        ws_free(ws);
        return st;
    }
    *out = *pool = ws;
    return CKV_OK;
}

extern "C" size_t ckv_gpu_policy_scratch_bytes(int32_t device)
{
    size_t bytes = 0;
    for (int k = 0; device >= 0 && device < MAX_DEVICES && k < 2; k++)
        for (int i = 0; ws_pool[device][k] && i < ws_pool[device][k]->n_mem; i++)
            bytes += ws_pool[device][k]->mem[i].bytes;
    return bytes;
}

extern "C" void ckv_gpu_policy_scratch_release(int32_t device)
{
    for (int k = 0; device >= 0 && device < MAX_DEVICES && k < 2; k++) {
        ws_free(ws_pool[device][k]);
        ws_pool[device][k] = NULL;
    }
}

__global__ void fill_u32_kernel(unsigned *p, unsigned v, int32_t n)
{
    int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = v;
}

// A call's lists go to grids' y (at most 65,535) and its slots (lists x
// capacity) to int32 positions.
extern "C" int32_t ckv_gpu_policy_max_caches(int32_t n_layer, int32_t n_head_kv,
                                              int32_t capacity)
{
    const int64_t per = (int64_t)n_layer * n_head_kv, by_lists = 65535 / per,
                  by_slots = (INT32_MAX - 1) / (per * capacity);
    return (int32_t)(by_lists < by_slots ? by_lists : by_slots);
}

// The caches of a call: distinct, of c[0]'s shape.
static ckv_status check_caches(ckv_gpu_cache *const *c, int32_t n, ckv_error *err)
{
    if (n < 1 || !c)
        return ckv_errorf(err, CKV_ERR_ARG, "cuda policy: %d caches (at least 1)", n);
    for (int32_t i = 0; i < n; i++) {
        if (!c[i])
            return ckv_errorf(err, CKV_ERR_ARG, "cuda policy: cache %d is NULL", i);
        const ckv_gpu_cache *a = c[0], *b = c[i];
        const struct {
            const char *what;
            int64_t want, got;
        } same[] = {{"n_layer", a->n_layer, b->n_layer},
                    {"n_head_kv", a->n_head_kv, b->n_head_kv},
                    {"head_dim", a->head_dim, b->head_dim},
                    {"capacity", a->capacity, b->capacity},
                    {"kv dtype", a->dtype, b->dtype},
                    {"scores", a->score != NULL, b->score != NULL}};
        for (size_t f = 0; f < sizeof same / sizeof same[0]; f++)
            if (same[f].want != same[f].got)
                return ckv_errorf(err, CKV_ERR_ARG,
                                  "cuda policy: cache %d's %s is %lld, cache 0's %lld (one call "
                                  "takes caches of one shape)",
                                  i, same[f].what, (long long)same[f].got,
                                  (long long)same[f].want);
        for (int32_t j = 0; j < i; j++)
            if (c[j] == c[i])
                return ckv_errorf(err, CKV_ERR_ARG, "cuda policy: caches %d and %d are one cache",
                                  j, i);
    }
    return CKV_OK;
}

extern "C" ckv_status ckv_gpu_policy_compress_many(ckv_gpu_cache *const *caches, int32_t n,
                                                   const ckv_policy *p, int32_t budget,
                                                   const ckv_qwindow *qw,
                                                   ckv_gpu_policy_trace *trace, void *stream,
                                                   ckv_error *err)
{
    const char *name = p->ops->name;
    if (!ckv_gpu_policy_supported(p))
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED, "cuda: policy %s has no GPU kernels", name);
    ckv_status st = check_caches(caches, n, err);
    if (st)
        return st;
    ckv_gpu_cache *const c = caches[0];
    if (n > 1 && !ckv_gpu_policy_many(p))
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "cuda: policy %s compresses one cache a call, not %d", name, n);
    const int64_t per = (int64_t)c->n_layer * c->n_head_kv, lists = per * n;
    if (n > ckv_gpu_policy_max_caches(c->n_layer, c->n_head_kv, c->capacity))
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "cuda: %lld lists of capacity %d are beyond the policy kernels' int32 "
                          "indexing",
                          (long long)lists, c->capacity);
    if ((st = ckv_policy_check(p, c->score != NULL, budget, qw, err)))
        return st;
    if (trace && trace->margin)
        for (int64_t i = 0; i < lists; i++)
            trace->margin[i] = FLT_MAX;
    if (trace && trace->kept)
        *trace->kept = 0;
    if (trace && trace->own)
        *trace->own = 0;
    if (trace && trace->joined)
        *trace->joined = 0;
    if (trace && trace->lazy)
        *trace->lazy = false;
    if (trace && trace->own_rows)
        memset(trace->own_rows, 0, (size_t)lists * c->capacity);
    if (!strcmp(name, "full"))
        return CKV_OK;
    // SnapKV's and K-Means's kernels read and move rows in slot order.
    for (int32_t i = 0; i < n; i++)
        if (caches[i]->mapped && !ckv_gpu_policy_entry_bytes(p))
            return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                              "cuda: policy %s on a cache whose rows an earlier call mapped "
                              "(centroid's, StreamingLLM's or H2O's; reset or upload it first)",
                              name);

    ckv_pol x;
    memset(&x, 0, sizeof x);
    if ((st = ws_for(c, n, &x.ws, err)))
        return st;
    ckv_gpu_policy_ws *const w = x.ws;
    if ((st = ckv_pol_grow(&x, reinterpret_cast<void **>(&w->tab), &w->tab_bytes,
                           (size_t)n * sizeof *w->tab, err)))
        return st;
    if (w->h_tab_n < (size_t)n) {
        void *h = realloc(w->h_tab, (size_t)n * sizeof *w->h_tab);
        if (!h)
            return ckv_errorf(err, CKV_ERR_NOMEM, "cuda policy: out of host memory");
        w->h_tab = static_cast<ckv_pol_cache *>(h);
        w->h_tab_n = (size_t)n;
    }
    x.c = c;
    x.cs = caches;
    x.n = n;
    x.per = (int32_t)per;
    x.tab = ckv_pol_caches{w->tab, (int32_t)per};
    x.s = static_cast<cudaStream_t>(stream);
    x.lists = (int32_t)lists;
    x.cap = c->capacity;
    x.d = c->head_dim;
    x.track_assign = trace && trace->assign;
    x.kept = trace ? trace->kept : NULL;
    x.own = trace ? trace->own : NULL;
    x.joined = trace ? trace->joined : NULL;
    x.own_rows = trace ? trace->own_rows : NULL;
    x.centroids = trace ? trace->centroids : NULL;
    x.poison_lazy = trace && trace->poison_lazy;
    x.lazy = trace ? trace->lazy : NULL;
    x.fill = gpu_policies[policy_index(p)].maps;
    int32_t *const plan = w->plan;
    x.act = plan + (size_t)PLAN_ACT * lists;
    x.T = plan + (size_t)PLAN_T * lists;
    x.seg_b = plan + (size_t)PLAN_SEG_B * lists;
    x.seg_e = plan + (size_t)PLAN_SEG_E * lists;
    x.x = plan + (size_t)PLAN_X * lists;
    x.y = plan + (size_t)PLAN_Y * lists;

    // The legacy default stream does not wait for non-blocking streams
    // (the decoder's): wait for everything queued on the device first.
    if (!stream)
        CKV_CUDA(cudaDeviceSynchronize());
    // The policies read and move scores by row: a decode's deferred masses
    // go in first (ckv_gpu_cache_settle).
    for (int32_t i = 0; i < n; i++)
        if ((st = ckv_gpu_cache_settle(caches[i], stream, err)))
            return st;
    float big = FLT_MAX;
    unsigned big_bits;
    memcpy(&big_bits, &big, sizeof big_bits);
    fill_u32_kernel<<<ckv_pol_blocks(lists, 256), 256, 0, x.s>>>(w->margin, big_bits,
                                                                  (int32_t)lists);
    CKV_CUDA_LAUNCHED();
    const size_t slots = (size_t)lists * c->capacity;
    if (x.track_assign)
        CKV_CUDA(cudaMemcpyAsync(w->assign, trace->assign, slots * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, x.s));

    if (!strcmp(name, "centroid"))
        st = ckv_pol_centroid(&x, p, budget, err);
    else if (!strcmp(name, "kmeans"))
        st = ckv_pol_kmeans(&x, p, budget, err);
    else if (!strcmp(name, "snapkv"))
        st = ckv_pol_snapkv(&x, p, budget, qw, err);
    else if (!strcmp(name, "h2o"))
        st = ckv_pol_h2o(&x, p, budget, err);
    else
        st = ckv_pol_streaming(&x, p, budget, err);
    if (st)
        return st;

    if (x.track_assign)
        CKV_CUDA(cudaMemcpyAsync(trace->assign, w->assign, slots * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, x.s));
    if (trace && trace->margin)
        CKV_CUDA(cudaMemcpyAsync(trace->margin, w->margin, lists * sizeof(float),
                                 cudaMemcpyDeviceToHost, x.s));
    CKV_CUDA(cudaStreamSynchronize(x.s));
    return CKV_OK;
}

extern "C" ckv_status ckv_gpu_policy_compress(ckv_gpu_cache *c, const ckv_policy *p,
                                              int32_t budget, const ckv_qwindow *qw,
                                              ckv_gpu_policy_trace *trace, void *stream,
                                              ckv_error *err)
{
    return ckv_gpu_policy_compress_many(&c, 1, p, budget, qw, trace, stream, err);
}

extern "C" ckv_status ckv_gpu_policy_on_decode(ckv_gpu_cache *c, const ckv_policy *p,
                                               int32_t budget, int64_t step,
                                               const ckv_qwindow *qw, bool *compressed,
                                               void *stream, ckv_error *err)
{
    int32_t mx = 0;
    for (int64_t i = 0; i < (int64_t)c->n_layer * c->n_head_kv; i++)
        if (c->len_h[i] > mx)
            mx = c->len_h[i];
    bool due = ckv_policy_due(p, mx, budget, step, qw);
    if (compressed)
        *compressed = due;
    return due ? ckv_gpu_policy_compress(c, p, budget, qw, NULL, stream, err) : CKV_OK;
}

extern "C" ckv_status ckv_gpu_cache_poison(ckv_gpu_cache *c, ckv_error *err)
{
    const size_t n = (size_t)c->n_layer * c->n_head_kv * c->capacity;
    CKV_CUDA(cudaMemset(c->k, 0xff, n * c->head_dim * ckv_kv_dtype_size(c->dtype)));
    CKV_CUDA(cudaMemset(c->v, 0xff, n * c->head_dim * ckv_kv_dtype_size(c->dtype)));
    CKV_CUDA(cudaMemset(c->deg, 0xff, n * sizeof(float)));
    if (c->score)
        CKV_CUDA(cudaMemset(c->score, 0xff, n * sizeof(float)));
    // A poisoned map is no map: the next call maps afresh, and a round
    // that read an entry its fill did not write would read -1.
    if (c->row)
        CKV_CUDA(cudaMemset(c->row, 0xff, n * sizeof(int32_t)));
    c->mapped = false;
    ckv_status st = ckv_gpu_cache_drop_pending(c, err);
    int dev;
    if (!st)
        st = current_device(&dev, err);
    if (st)
        return st;
    for (int k = 0; k < 2; k++)
        for (int i = 0; ws_pool[dev][k] && i < ws_pool[dev][k]->n_mem; i++)
            CKV_CUDA(cudaMemset(ws_pool[dev][k]->mem[i].p, 0xff, ws_pool[dev][k]->mem[i].bytes));
    CKV_CUDA(cudaDeviceSynchronize());
    return CKV_OK;
}
