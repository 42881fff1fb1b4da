/* snapkv: SnapKV. Score every slot by the attention the last W queries pay
 * it, pool the scores along the slot axis, average them over the query heads
 * of the KV group, keep the window plus the top B - W. */
#include <math.h>
#include <stdlib.h>

#include "list.h"
#include "policies.h"

enum { P_WINDOW, P_KERNEL, P_POOLING, P_DECODE, P_INTERVAL };
enum { POOL_MAX, POOL_AVG };

static const char *const pooling_names[] = {"max", "avg", NULL};
static const char *const onoff_names[] = {"off", "on", NULL};

static const ckv_param_def params[] = {
    {"window", CKV_PARAM_INT, 32, 1, 1 << 16, NULL, "observation window W (newest queries)"},
    {"kernel", CKV_PARAM_INT, 7, 1, 1 << 10, NULL, "pooling kernel along slots"},
    {"pooling", CKV_PARAM_CHOICE, POOL_MAX, 0, 1, pooling_names, "max or avg pooling"},
    {"decode", CKV_PARAM_CHOICE, 0, 0, 1, onoff_names, "re-score every interval decode steps"},
    {"interval", CKV_PARAM_INT, 64, 1, 1 << 20, NULL, "decode steps between compressions"},
};

static int32_t protected_count(const ckv_policy *p)
{
    return (int32_t)p->p[P_WINDOW];
}

static int needs(const ckv_policy *p)
{
    (void)p;
    return CKV_NEEDS_Q_WINDOW;
}

static int32_t interval(const ckv_policy *p)
{
    return p->p[P_DECODE] ? (int32_t)p->p[P_INTERVAL] : 0;
}

/* Adds to acc[t] the causal attention probabilities the W window queries of
 * one query head pay slot t (row i sees slots [0, T - W + i]). */
static void window_attention(const ckv_cache *c, int32_t l, int32_t h, const float *q, int32_t W,
                             double *logit, double *acc)
{
    int32_t T = c->len[ckv_cache_lh(c, l, h)], d = c->head_dim;
    const float *deg = ckv_cache_degp(c, l, h);
    double scale = 1 / sqrt((double)d);
    for (int32_t i = 0; i < W; i++) {
        const float *qi = q + (size_t)i * d;
        int32_t n = T - W + i + 1;
        double mx = -INFINITY, sum = 0;
        for (int32_t t = 0; t < n; t++) {
            const float *k = ckv_cache_key(c, l, h, t);
            double s = 0;
            for (int32_t j = 0; j < d; j++)
                s += (double)qi[j] * k[j];
            logit[t] = s * scale + log((double)deg[t]);
            if (logit[t] > mx)
                mx = logit[t];
        }
        for (int32_t t = 0; t < n; t++) {
            logit[t] = exp(logit[t] - mx);
            sum += logit[t];
        }
        for (int32_t t = 0; t < n; t++)
            acc[t] += logit[t] / sum;
    }
}

/* Pools x[0..n) into y: output t covers inputs t - K/2 .. t - K/2 + K - 1
 * (padding K/2 on both ends; for odd K the centred window). max ignores the
 * padding; avg counts it as zeros and divides by K. */
static void pool(const double *x, int32_t n, int32_t K, int pooling, double *y)
{
    for (int32_t t = 0; t < n; t++) {
        double m = -INFINITY, s = 0;
        for (int32_t u = t - K / 2; u < t - K / 2 + K; u++) {
            if (u < 0 || u >= n)
                continue;
            if (x[u] > m)
                m = x[u];
            s += x[u];
        }
        y[t] = pooling == POOL_MAX ? m : s / K;
    }
}

/* Per-thread scratch of `capacity` doubles each. */
typedef struct {
    double *logit, *acc, *pooled, *score;
} scratch;

/* Scores list lh by its group's pooled window attention and keeps the top. */
static ckv_status compress_list(const ckv_policy *p, ckv_cache *c, int32_t lh, int32_t budget,
                                const ckv_qwindow *qw, scratch *x, int32_t *assign,
                                ckv_error *err)
{
    int32_t W = (int32_t)p->p[P_WINDOW], K = (int32_t)p->p[P_KERNEL], d = c->head_dim;
    int32_t l = lh / c->n_head_kv, h = lh % c->n_head_kv, T = c->len[lh];
    int32_t group = qw->n_head / c->n_head_kv;
    for (int32_t t = 0; t < T - W; t++)
        x->score[t] = 0;
    for (int32_t g = 0; g < group; g++) {
        int32_t qh = h * group + g;
        const float *q = qw->q + (((size_t)l * qw->n_head + qh) * qw->w + (qw->w - W)) * d;
        for (int32_t t = 0; t < T; t++)
            x->acc[t] = 0;
        window_attention(c, l, h, q, W, x->logit, x->acc);
        pool(x->acc, T - W, K, (int)p->p[P_POOLING], x->pooled);
        for (int32_t t = 0; t < T - W; t++)
            x->score[t] += x->pooled[t];
    }
    for (int32_t t = 0; t < T - W; t++)
        x->score[t] /= group;
    return ckv_list_keep_top(c, l, h, x->score, W, budget, assign, err);
}

static ckv_status compress(const ckv_policy *p, ckv_cache *c, int32_t budget, const ckv_qwindow *qw,
                           int32_t *assign, ckv_error *err)
{
    int32_t W = (int32_t)p->p[P_WINDOW];
    if (qw->w < W)
        return ckv_errorf(err, CKV_ERR_ARG, "snapkv: window=%d but only %d window queries given",
                          W, qw->w);
    if (qw->n_head < c->n_head_kv || qw->n_head % c->n_head_kv)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "snapkv: %d query heads are not a multiple of %d KV heads", qw->n_head,
                          c->n_head_kv);
    const size_t cap = (size_t)c->capacity;
    const int32_t lists = c->n_layer * c->n_head_kv;
    ckv_list_failure fail;
    ckv_list_failure_init(&fail);
    /* Lists are scored independently, in parallel, each thread with its
     * own scratch. */
#pragma omp parallel
    {
        scratch x = {malloc(cap * sizeof(double)), malloc(cap * sizeof(double)),
                     malloc(cap * sizeof(double)), malloc(cap * sizeof(double))};
        bool ok = x.logit && x.acc && x.pooled && x.score;
#pragma omp for schedule(dynamic, 1)
        for (int32_t lh = 0; lh < lists; lh++) {
            ckv_error e = {0};
            if (c->len[lh] <= budget)
                continue;
            if (!ok)
                ckv_errorf(&e, CKV_ERR_NOMEM, "snapkv: out of memory");
            else if (!compress_list(p, c, lh, budget, qw, &x,
                                    assign ? assign + (size_t)lh * cap : NULL, &e))
                continue;
            ckv_list_failure_note(&fail, lh, &e);
        }
        free(x.logit);
        free(x.acc);
        free(x.pooled);
        free(x.score);
    }
    return ckv_list_failure_take(&fail, err);
}

const ckv_policy_ops ckv_policy_snapkv = {
    .name = "snapkv",
    .summary = "SnapKV: window + slots the last W queries attend to (pooled)",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .protected_count = protected_count,
    .needs = needs,
    .interval = interval,
    .compress = compress,
};
