/* centroid: CentroidKV, Chunked Soft Matching (policies.md). Each round
 * splits every chunk of the middle into sources A and destinations B, gives
 * each source its most similar destination in the chunk, and merges the top
 * ceil(r_j * candidates) pairs into degree-weighted centroids. */
#include <stdlib.h>

#include "csm.h"
#include "list.h"
#include "policies.h"
#include "splitmix.h"

enum {
    P_SINKS,
    P_RECENT,
    P_CHUNK,
    P_R_INIT,
    P_R_STEP,
    P_R_MIN,
    P_INTERVAL,
    P_PARTITION,
    P_SEED,
    P_DEGREE_BIAS,
    P_SCHEDULE
};

static const char *const partition_names[] = {"alternating", "sequential", "random", NULL};
static const char *const bias_names[] = {"on", "off", NULL};
static const char *const schedule_names[] = {"linear", "constant", NULL};

static const ckv_param_def params[] = {
    {"sinks", CKV_PARAM_INT, 4, 0, CKV_CSM_PROTECT_MAX, NULL, "oldest slots never merged"},
    {"recent", CKV_PARAM_INT, 64, 0, CKV_CSM_PROTECT_MAX, NULL, "newest slots never merged"},
    {"chunk", CKV_PARAM_INT, 32, 2, CKV_CSM_CHUNK_MAX, NULL, "chunk length C (matching stays inside a chunk)"},
    {"r_init", CKV_PARAM_RATE, 500, 1, 1000, NULL, "merge rate of round 0"},
    {"r_step", CKV_PARAM_RATE, 100, 1, 1000, NULL, "rate decrease per round (linear schedule)"},
    {"r_min", CKV_PARAM_RATE, 100, 1, 1000, NULL, "lowest rate"},
    {"interval", CKV_PARAM_INT, 64, 1, 1 << 20, NULL, "decode steps between compressions"},
    {"partition", CKV_PARAM_CHOICE, CKV_CSM_ALTERNATING, 0, 2, partition_names,
     "how a chunk splits into sources and destinations"},
    {"seed", CKV_PARAM_INT, 0, 0, INT64_MAX, NULL, "seed of the random partition"},
    {"degree_bias", CKV_PARAM_CHOICE, 0, 0, 1, bias_names, "add log(degree) to attention logits"},
    {"schedule", CKV_PARAM_CHOICE, CKV_CSM_LINEAR, 0, 1, schedule_names,
     "linear: r_j = max(r_min, r_init - j r_step); constant: r_init"},
};

int64_t ckv_csm_rate(int64_t round, int64_t r_init, int64_t r_step, int64_t r_min,
                     ckv_csm_schedule schedule)
{
    if (schedule == CKV_CSM_CONSTANT)
        return r_init;
    int64_t r = r_init - round * r_step;
    return r > r_min ? r : r_min;
}

int64_t ckv_csm_merges(int64_t rate_permille, int64_t candidates, int64_t excess)
{
    int64_t m = (rate_permille * candidates + 999) / 1000;
    return m < excess ? m : excess;
}

void ckv_csm_partition_chunk(ckv_csm_partition kind, uint64_t seed, int64_t round, int32_t layers,
                             int32_t l, int32_t heads, int32_t h, int32_t chunk, int32_t L,
                             uint8_t *in_a)
{
    int32_t half = (L + 1) / 2;
    if (kind == CKV_CSM_ALTERNATING) {
        for (int32_t o = 0; o < L; o++)
            in_a[o] = o % 2 == 0;
        return;
    }
    if (kind == CKV_CSM_SEQUENTIAL) {
        for (int32_t o = 0; o < L; o++)
            in_a[o] = o < half;
        return;
    }
    uint64_t idx = (((uint64_t)round * (uint64_t)layers + (uint64_t)l) * (uint64_t)heads +
                    (uint64_t)h) * (1ull << 20) + (uint64_t)chunk;
    uint64_t state = seed + 0x9E3779B97F4A7C15ull * (1 + idx);
    int32_t perm[L];
    for (int32_t o = 0; o < L; o++)
        perm[o] = o;
    for (int32_t i = L - 1; i >= 1; i--) {
        int32_t j = (int32_t)(ckv_splitmix64(&state) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int32_t o = 0; o < L; o++)
        in_a[perm[o]] = o < half;
}

static int32_t protected_count(const ckv_policy *p)
{
    return (int32_t)(p->p[P_SINKS] + p->p[P_RECENT]);
}

typedef struct {
    ckv_ranked *cand; /* (s_a, a) */
    int32_t *partner; /* b*(a) by slot */
    int32_t *dest;
    double *recip; /* ckv_csm_recip of each middle key */
    uint8_t *in_a;
} scratch;

/* One round on list (l, h); returns through *n_cand the candidates found. */
static ckv_status round_list(const ckv_policy *p, ckv_cache *c, int32_t l, int32_t h,
                             int32_t budget, scratch *s, int32_t *assign, int32_t *n_cand,
                             ckv_error *err)
{
    int32_t T = c->len[ckv_cache_lh(c, l, h)], d = c->head_dim;
    int32_t sinks = (int32_t)p->p[P_SINKS], recent = (int32_t)p->p[P_RECENT];
    int32_t C = (int32_t)p->p[P_CHUNK], end = T - recent, nc = 0;
    for (int32_t t = sinks; t < end; t++)
        s->recip[t] = ckv_csm_recip(ckv_csm_norm(ckv_cache_key(c, l, h, t), d));
    for (int32_t c0 = sinks, chunk = 0; c0 < end; c0 += C, chunk++) {
        int32_t L = end - c0 < C ? end - c0 : C;
        ckv_csm_partition_chunk((ckv_csm_partition)p->p[P_PARTITION], (uint64_t)p->p[P_SEED],
                                c->round, c->n_layer, l, c->n_head_kv, h, chunk, L, s->in_a);
        for (int32_t oa = 0; oa < L; oa++) {
            if (!s->in_a[oa])
                continue;
            int32_t a = c0 + oa, best = -1;
            double bs = 0;
            const float *ka = ckv_cache_key(c, l, h, a);
            for (int32_t ob = 0; ob < L; ob++) {
                if (s->in_a[ob])
                    continue;
                int32_t b = c0 + ob;
                double sim = ckv_csm_cosine(ckv_csm_dot(ka, ckv_cache_key(c, l, h, b), d),
                                            s->recip[a], s->recip[b]);
                if (best < 0 || sim > bs) {
                    best = b;
                    bs = sim;
                }
            }
            if (best < 0)
                continue;
            s->cand[nc++] = (ckv_ranked){bs, a};
            s->partner[a] = best;
        }
    }
    *n_cand = nc;
    if (!nc)
        return CKV_OK;
    ckv_rank(s->cand, nc);
    int64_t r = ckv_csm_rate(c->round, p->p[P_R_INIT], p->p[P_R_STEP], p->p[P_R_MIN],
                             (ckv_csm_schedule)p->p[P_SCHEDULE]);
    int64_t m = ckv_csm_merges(r, nc, T - budget);
    for (int32_t t = 0; t < T; t++)
        s->dest[t] = t;
    for (int64_t i = 0; i < m; i++)
        s->dest[s->cand[i].slot] = s->partner[s->cand[i].slot];
    return ckv_list_apply(c, l, h, s->dest, assign, err);
}

static void scratch_free(scratch *s)
{
    free(s->cand);
    free(s->partner);
    free(s->dest);
    free(s->recip);
    free(s->in_a);
}

static ckv_status compress(const ckv_policy *p, ckv_cache *c, int32_t budget, const ckv_qwindow *qw,
                           int32_t *assign, ckv_error *err)
{
    (void)qw;
    const size_t cap = (size_t)c->capacity;
    const int32_t lists = c->n_layer * c->n_head_kv;
    ckv_list_failure fail;
    ckv_list_failure_init(&fail);
    /* Round j touches every list still over budget, lists in parallel (each
     * thread with its own scratch); the counter is the sequence's, so decode
     * compressions continue the schedule. */
    for (bool active = true; active && fail.lh == INT32_MAX;) {
        int any = 0;
#pragma omp parallel reduction(| : any)
        {
            scratch s = {malloc(cap * sizeof *s.cand), malloc(cap * sizeof *s.partner),
                         malloc(cap * sizeof *s.dest), malloc(cap * sizeof *s.recip),
                         malloc((size_t)p->p[P_CHUNK])};
            bool ok = s.cand && s.partner && s.dest && s.recip && s.in_a;
#pragma omp for schedule(dynamic, 1)
            for (int32_t lh = 0; lh < lists; lh++) {
                int32_t nc = 0;
                ckv_error e = {0};
                if (c->len[lh] <= budget)
                    continue;
                if (!ok)
                    ckv_errorf(&e, CKV_ERR_NOMEM, "centroid: out of memory for capacity %zu", cap);
                else if (!round_list(p, c, lh / c->n_head_kv, lh % c->n_head_kv, budget, &s,
                                     assign ? assign + (size_t)lh * cap : NULL, &nc, &e)) {
                    any |= nc > 0;
                    continue;
                }
                ckv_list_failure_note(&fail, lh, &e);
            }
            scratch_free(&s);
        }
        active = any;
        if (active && fail.lh == INT32_MAX)
            c->round++;
    }
    return ckv_list_failure_take(&fail, err);
}

const ckv_policy_ops ckv_policy_centroid = {
    .name = "centroid",
    .summary = "CentroidKV: chunked soft matching, degree-weighted merging",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .protected_count = protected_count,
    .merges = true,
    .compress = compress,
};
