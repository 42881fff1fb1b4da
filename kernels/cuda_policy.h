// State shared by the GPU policy files (cuda_policy.cu, cuda_compact.cu,
// cuda_csm.cu, cuda_kmeans.cu, cuda_snapkv.cu): the scratch a device keeps
// for them and the plan of one compression step. Internal to kernels/.
//
// A step works on every (layer, KV head) list of every cache of the call at
// once: the host decides per list (from the lengths it mirrors) whether the
// list takes part and what its sort segment is, uploads that plan with the
// table of the caches, and launches each kernel once with blockIdx.y (or
// .z) the list.
#ifndef CKV_KERNELS_CUDA_POLICY_H
#define CKV_KERNELS_CUDA_POLICY_H

#include <float.h>
#include <stdint.h>

#include "cuda_async_copy.cuh"
#include "cuda_state.h"
#include "policy.h"

// Rows of the plan, each one int32 per list: ACT 1 if the list takes part,
// T its length, SEG_B/SEG_E its sort segment (absolute positions in the
// [lists][capacity] scratch arrays), X and Y two numbers of the policy's.
enum { PLAN_ACT, PLAN_T, PLAN_SEG_B, PLAN_SEG_E, PLAN_X, PLAN_Y, PLAN_ROWS };

enum { WS_MAX_BUFFERS = 64 };

// One cache of a call as its kernels see it: its arrays (ckv_gpu_cache),
// whether its rows are mapped and its CSM round. A call's lists are its
// caches' lists in order, `per` a cache, so list lh is list lh % per of
// cache lh / per; the table, one entry a cache, lives in the scratch and is
// uploaded with the plan.
struct ckv_pol_cache {
    void *k, *v;
    float *deg, *score;
    int32_t *len_d, *row, *row_len;
    int64_t round;
    int32_t mapped;
};

struct ckv_pol_caches {
    const ckv_pol_cache *tab;
    int32_t per;
};

// List lh's share of its cache: every pointer at the list's own (row 0 of
// k and v, slot 0 of deg, score and the map; its length and map length).
struct ckv_pol_list {
    void *k, *v;
    float *deg, *score;  // score NULL where the cache keeps none
    int32_t *map, *map_len, *len_d;
    int64_t round;
    int32_t local;  // the list's index in its cache
    bool mapped;    // whether map holds the slot order (else each slot at its own row)
    // Slot s's row: ckv_row_of over the list's own map.
    __device__ int32_t row_of(int32_t s) const
    {
        return ckv_row_of(mapped ? map : nullptr, map_len, 0, 0, s);
    }
};

// row_bytes: a key row's bytes (head_dim x the element's size).
__device__ static inline ckv_pol_list ckv_pol_list_of(ckv_pol_caches cs, int32_t lh, int32_t cap,
                                                      size_t row_bytes)
{
    const ckv_pol_cache &c = cs.tab[lh / cs.per];
    const int32_t local = lh % cs.per;
    const size_t base = (size_t)local * cap;
    ckv_pol_list l;
    l.k = static_cast<char *>(c.k) + base * row_bytes;
    l.v = static_cast<char *>(c.v) + base * row_bytes;
    l.deg = c.deg + base;
    l.score = c.score ? c.score + base : nullptr;
    l.map = c.row ? c.row + base : nullptr;
    l.map_len = c.row_len ? c.row_len + local : nullptr;
    l.len_d = c.len_d + local;
    l.round = c.round;
    l.local = local;
    l.mapped = c.mapped != 0;
    return l;
}

// Two per device (cuda_policy.cu: for calls over one cache and over several;
// calls are synchronous, so they take turns), kept until released, sized
// for the largest call seen: at least `lists` lists,
// `slots` list entries (lists * capacity) and `rows` key elements (slots *
// head_dim); indexing follows the calling caches' shape.
struct ckv_gpu_policy_ws {
    size_t lists, slots, rows;
    // The call's cache table (device and host), grown as needed.
    ckv_pol_cache *tab, *h_tab;
    size_t tab_bytes, h_tab_n;
    // Every device buffer, for poisoning and freeing.
    struct {
        void *p;
        size_t bytes;
    } mem[WS_MAX_BUFFERS];
    int n_mem;
    int32_t *h_plan, *h_newlen;  // host
    int32_t *plan, *newlen;
    unsigned *margin;  // float bits per list (non-negative, so integer order)
    // Merged degrees and scores, and per-slot maps, [lists][capacity].
    float *deg, *score;
    int32_t *dest, *newslot, *assign, *run_b, *run_e, *partner, *perm;
    // The fill (cuda_compact.cu): each row's slot (-1: removed), the rows
    // the holes are and the rows that move into them, in row order; then
    // their count a list (fill_n, lists).
    int32_t *row_slot, *fill_to, *fill_from, *fill_n;
    int32_t *ikey, *ikey_out, *ival, *ival_out;
    double *key, *key_out, *norm, *gap;
    uint8_t *in_a;
    void *cub;
    size_t cub_bytes;
    // The shift's ticket and window flags (cuda_compact.cu), grown as needed.
    int32_t *shift_sync;
    size_t shift_sync_bytes;
    // K-Means: features and centroids [lists][capacity][head_dim], taken at
    // its first use (rows elements each; a centroid's row of cen only once an
    // update wrote it, cw, before that its starting row's feature:
    // cuda_kmeans.cu, km_cen_row); split their bf16 splits for the estimate
    // (features, then centroids from a multiple of 32 words: twice rows
    // rounded up to 32; taken where the estimate runs), amb the rows the
    // estimate left to the exact assignment ([lists][capacity], then a count
    // per list, then each row's pass row in the candidate bitmaps, slots:
    // cuda_kmeans.cu, KM_CAND_W), chg two rows of flags a list (an assignment changed a
    // cluster), touch a flag a cluster (an assignment moved a row from or to
    // it: slots), then the clusters an update forms, listed (cuda_kmeans.cu,
    // km_touch_list_kernel). Where the estimate runs, for the assignments
    // after an update (cuda_kmeans.cu, km_drift): top each row's two best
    // bounds (slots), moved the centroids the update moved (slots, then five
    // counts a list: moved centroids, redo's rows, rows kept, rows the own
    // pass assigned, rows joined), redo the rows to assign over every
    // centroid (slots), cmv a flag a centroid (slots), own the own pass's
    // records by place and by centroid (slots each), their sides likewise
    // (an int2 a slot), then a header a list (KM_OWN_HDR: 24 KB, the cells'
    // starts, first items and largest E); ksplit the exact kernel's split
    // tiles' bests and counts, and the candidate bitmaps (cuda_kmeans.cu,
    // km_slices).
    double *f, *cen, *cnorm;
    double *kn;    // the lazy form's key norms (slots; cuda_kmeans.cu, km_lazy_call)
    uint32_t *fb;  // its formed rows, a bit a slot
    int32_t *mq;   // its rows claimed, to be formed (slots, then a count a list; km_mat_src)
    float *cscale;  // the centroids' scales for the estimate (slots)
    float2 *top;
    uint32_t *split;
    int32_t *cl, *amb, *chg, *touch, *moved, *redo;
    int32_t *grp;  // the group step's displaced rows (cuda_kmeans.cu, km_group)
    uint8_t *cmv, *own_rows;  // own_rows: the trace's flags (slots), taken where asked
    uint8_t *cw;              // whether an update wrote a centroid's row of cen (slots)
    uint4 *own;
    void *ksplit;
    // SnapKV: window queries and per-query probabilities, grown as needed.
    float *q;
    double *prob, *acc;
    size_t q_bytes, prob_bytes, acc_bytes;
};

// One call's context: n caches of one shape, per lists each (lists = n x
// per); c is the first, whose shape they share (the policies of one call a
// cache, SnapKV and K-Means, take only it).
struct ckv_pol {
    ckv_gpu_cache *c;
    ckv_gpu_cache *const *cs;
    int32_t n, per;
    ckv_pol_caches tab;  // the device table
    ckv_gpu_policy_ws *ws;
    cudaStream_t s;
    int32_t lists, cap, d;
    // The policy's apply fills the rows it frees and keeps the slot order in
    // the caches' maps (centroid, StreamingLLM, H2O: cuda_policy.cu's table)
    // instead of shifting the survivors left in slot order.
    bool fill;
    bool track_assign;
    int64_t *kept, *own, *joined;  // ckv_gpu_policy_trace's, NULL where not counted
    uint8_t *own_rows;              // ckv_gpu_policy_trace's (host, slots), NULL where not reported
    double *centroids;              // ckv_gpu_policy_trace's (host), NULL where not reported
    bool poison_lazy;               // ckv_gpu_policy_trace's: NaN features in a lazy call
    bool *lazy;                     // ckv_gpu_policy_trace's (host), NULL where not reported
    // Device rows of the plan.
    int32_t *act, *T, *seg_b, *seg_e, *x, *y;
};

// Host row `row` of the plan.
static inline int32_t *ckv_pol_h(ckv_pol *x, int row)
{
    return x->ws->h_plan + (size_t)row * x->lists;
}

// List lh's cache (host).
static inline ckv_gpu_cache *ckv_pol_cache_of(const ckv_pol *x, int32_t lh)
{
    return x->cs[lh / x->per];
}

// Whether any list of cache i takes part (the plan's host row ACT).
static inline bool ckv_pol_cache_active(ckv_pol *x, int32_t i)
{
    const int32_t *act = ckv_pol_h(x, PLAN_ACT) + (size_t)i * x->per;
    for (int32_t j = 0; j < x->per; j++)
        if (act[j])
            return true;
    return false;
}

// cuda_policy.cu
// Uploads the plan and the cache table (the caches' rounds and maps as
// they are now), after taking the map (ckv_gpu_cache_take_map) of every
// cache whose lists take part by the plan's host rows where the call fills.
ckv_status ckv_pol_upload_plan(ckv_pol *x, ckv_error *err);
// (Re)allocates a growable scratch buffer of the cache to at least `bytes`.
ckv_status ckv_pol_grow(ckv_pol *x, void **p, size_t *have, size_t bytes, ckv_error *err);
// Allocates a fixed scratch buffer (once; *p non-NULL: kept).
ckv_status ckv_pol_take(ckv_pol *x, void **p, size_t bytes, ckv_error *err);
int32_t ckv_pol_max_row(ckv_pol *x, int row);  // over lists that take part

// Calls f(k, v) with keys and values typed as dtype says they are stored
// (float or ckv_bf16), so that each launch of a kernel templated on the
// element type is written once; the second form takes a cache's.
template <typename F>
static inline void ckv_pol_kv(ckv_kv_dtype dtype, void *k, void *v, F &&f)
{
    if (dtype == CKV_KV_BF16)
        f(static_cast<ckv_bf16 *>(k), static_cast<ckv_bf16 *>(v));
    else
        f(static_cast<float *>(k), static_cast<float *>(v));
}
template <typename F>
static inline void ckv_pol_kv(const ckv_gpu_cache *c, F &&f)
{
    ckv_pol_kv(c->dtype, c->k, c->v, f);
}

// Grid helpers.
static inline unsigned ckv_pol_blocks(int64_t n, int threads)
{
    return n > 0 ? (unsigned)((n + threads - 1) / threads) : 1u;
}

// Shared memory: the most dynamic bytes a block may take on the current
// device (its opt-in limit), for kernels that size their tiles to it or
// refuse a shape that does not fit; and ckv_allow_smem as a status named
// `what`, a refusal not left as the last CUDA error for a later launch's
// check.
ckv_status ckv_pol_smem_most(size_t *bytes, ckv_error *err);
template <typename K>
ckv_status ckv_pol_allow_smem(K *kernel, size_t bytes, const char *what, ckv_error *err)
{
    const cudaError_t e = ckv_allow_smem(kernel, (int)bytes);
    if (e == cudaSuccess)
        return CKV_OK;
    (void)cudaGetLastError();
    return ckv_errorf(err, CKV_ERR_DEVICE, "%s: %zu bytes of shared memory: %s", what, bytes,
                      cudaGetErrorString(e));
}

// cuda_compact.cu
// Plan rows ACT and T: a list takes part when it is longer than budget.
void ckv_pol_plan_over_budget(ckv_pol *x, int32_t budget);
// (key, ival) -> (key_out, ival_out) sorted by key descending inside each
// plan segment, stable (equal keys keep the lower slot first).
ckv_status ckv_pol_sort_desc(ckv_pol *x, ckv_error *err);
// The first min(count[list] + extra, segment length) positions of that
// ranking alone (count: a device row of the plan), each list's k at most
// CKV_POL_TOP_MAX; the positions after them are left as they were.
enum { CKV_POL_TOP_MAX = 512 };
ckv_status ckv_pol_top_desc(ckv_pol *x, const int32_t *count, int32_t extra, ckv_error *err);
// (ikey, ival) -> (ikey_out, ival_out) ascending, stable, in the segments
// [seg_b, seg_e) (seg_e: the plan's or a device row of the caller's).
ckv_status ckv_pol_sort_int(ckv_pol *x, const int32_t *seg_e, ckv_error *err);
// run_b/run_e[list][key]: the run of each key in ikey_out's segments.
ckv_status ckv_pol_runs(ckv_pol *x, int32_t max_seg, ckv_error *err);
// Position i's part of those runs in a sorted segment [b, e) of key
// (absolute positions), run_b/run_e the list's.
static __device__ inline void ckv_pol_run_mark(const int32_t *key, int64_t b, int64_t e,
                                               int64_t i, int32_t *run_b, int32_t *run_e)
{
    const int32_t k = key[i];
    if (i == b || key[i - 1] != k)
        run_b[k] = (int32_t)i;
    if (i == e - 1 || key[i + 1] != k)
        run_e[k] = (int32_t)(i + 1);
}
// Keeps the last `recent` slots and the top budget - recent of the key
// ranking over slots [0, T - recent) (key, ival set by the caller, in slot
// order; left changed), then applies. Twin: ckv_list_keep_top.
ckv_status ckv_pol_keep_top(ckv_pol *x, int32_t recent, int32_t budget, ckv_error *err);
// Applies dest of every list that takes part: merges (degree-weighted
// centroids, in double, in the CPU's order), compaction, lengths, assign.
// max_sources: at most that many slots of a list merge into another; 0:
// dest only keeps and evicts. Twin: ckv_list_apply.
// Where the call fills (x->fill), the rows the step frees take the list's
// last rows and the slot order goes to the cache's map, taken with the
// plan's upload; else the survivors shift left in slot order.
ckv_status ckv_pol_apply(ckv_pol *x, int32_t max_sources, ckv_error *err);

// The policies.
ckv_status ckv_pol_centroid(ckv_pol *x, const ckv_policy *p, int32_t budget, ckv_error *err);
ckv_status ckv_pol_kmeans(ckv_pol *x, const ckv_policy *p, int32_t budget, ckv_error *err);
ckv_status ckv_pol_snapkv(ckv_pol *x, const ckv_policy *p, int32_t budget, const ckv_qwindow *qw,
                          ckv_error *err);
ckv_status ckv_pol_h2o(ckv_pol *x, const ckv_policy *p, int32_t budget, ckv_error *err);
ckv_status ckv_pol_streaming(ckv_pol *x, const ckv_policy *p, int32_t budget, ckv_error *err);

// A decision's gap (winner minus best loser) as the bits a list's margin
// keeps, which order as the gaps do for gaps of +0 and above. A gap not
// above 0 (-0 from a best of -0 over a second of +0, a tie; NaN) takes
// +0's bits, 0: -0's would be the largest unsigned, which atomicMin drops.
static __device__ inline unsigned ckv_pol_margin_bits(double gap)
{
    const float g = gap < (double)FLT_MAX ? (float)gap : FLT_MAX;
    return g > 0 ? __float_as_uint(g) : 0u;
}

// Records a decision's gap in the list's margin.
static __device__ inline void ckv_pol_note_margin(unsigned *margin, double gap)
{
    atomicMin(margin, ckv_pol_margin_bits(gap));
}

#endif
