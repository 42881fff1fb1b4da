/* kmeans: K-Means clustering baseline. The middle [sinks, T - recent) is
 * clustered into k = B - sinks - recent clusters by cosine similarity of
 * unit keys; each non-empty cluster becomes one entry (degree-weighted
 * centroid of raw keys and values). Cost O(iters * M * k * d). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "list.h"
#include "policies.h"

enum { P_SINKS, P_RECENT, P_INTERVAL, P_ITERS };

static const ckv_param_def params[] = {
    {"sinks", CKV_PARAM_INT, 4, 0, 1 << 20, NULL, "oldest slots always kept"},
    {"recent", CKV_PARAM_INT, 64, 0, 1 << 20, NULL, "newest slots always kept"},
    {"interval", CKV_PARAM_INT, 64, 1, 1 << 20, NULL, "decode steps between compressions"},
    {"iters", CKV_PARAM_INT, 10, 0, 1000, NULL, "Lloyd iterations"},
};

static int32_t protected_count(const ckv_policy *p)
{
    return (int32_t)(p->p[P_SINKS] + p->p[P_RECENT]);
}

static int needs(const ckv_policy *p)
{
    (void)p;
    return 0;
}

static int32_t interval(const ckv_policy *p)
{
    return (int32_t)p->p[P_INTERVAL];
}

/* Cosine of two double vectors with the zero-norm rule. */
static double cosine_d(const double *a, const double *b, int32_t d)
{
    double na = 0, nb = 0, s = 0;
    for (int32_t i = 0; i < d; i++) {
        na += a[i] * a[i];
        nb += b[i] * b[i];
        s += a[i] * b[i];
    }
    na = sqrt(na);
    nb = sqrt(nb);
    return na < 1e-30 || nb < 1e-30 ? 0 : s / (na * nb);
}

/* Assigns each of the M features to its most similar centroid (ties: the
 * lowest cluster index). */
static void assign_all(const double *f, int32_t M, const double *cen, int32_t k, int32_t d,
                       int32_t *cl)
{
    for (int32_t m = 0; m < M; m++) {
        double best = -INFINITY;
        for (int32_t j = 0; j < k; j++) {
            double s = cosine_d(f + (size_t)m * d, cen + (size_t)j * d, d);
            if (s > best) {
                best = s;
                cl[m] = j;
            }
        }
    }
}

/* Lloyd step: each non-empty cluster's centroid becomes the normalised
 * degree-weighted mean of its members' features (kept if that mean's norm is
 * below 1e-30); empty clusters keep theirs. */
static void update(const double *f, const float *deg, int32_t M, const int32_t *cl, double *cen,
                   int32_t k, int32_t d, double *sum, double *wsum)
{
    memset(sum, 0, (size_t)k * d * sizeof *sum);
    memset(wsum, 0, (size_t)k * sizeof *wsum);
    for (int32_t m = 0; m < M; m++) {
        wsum[cl[m]] += deg[m];
        for (int32_t i = 0; i < d; i++)
            sum[(size_t)cl[m] * d + i] += deg[m] * f[(size_t)m * d + i];
    }
    for (int32_t j = 0; j < k; j++) {
        if (wsum[j] == 0)
            continue;
        double *s = sum + (size_t)j * d, n = 0;
        for (int32_t i = 0; i < d; i++) {
            s[i] /= wsum[j];
            n += s[i] * s[i];
        }
        n = sqrt(n);
        if (n < 1e-30)
            continue;
        for (int32_t i = 0; i < d; i++)
            cen[(size_t)j * d + i] = s[i] / n;
    }
}

static ckv_status compress_list(ckv_cache *c, int32_t l, int32_t h, int32_t sinks, int32_t recent,
                                int32_t budget, int32_t iters, int32_t *assign, ckv_error *err)
{
    int32_t T = c->len[ckv_cache_lh(c, l, h)], d = c->head_dim;
    int32_t M = T - sinks - recent, k = budget - sinks - recent;
    if (k >= M)
        return CKV_OK;
    const float *deg = ckv_cache_degp(c, l, h) + sinks;
    double *f = malloc((size_t)M * d * sizeof *f), *cen = malloc((size_t)k * d * sizeof *cen);
    double *sum = malloc((size_t)k * d * sizeof *sum), *wsum = malloc((size_t)k * sizeof *wsum);
    int32_t *cl = malloc((size_t)M * sizeof *cl), *first = malloc((size_t)k * sizeof *first);
    int32_t *dest = malloc((size_t)T * sizeof *dest);
    ckv_status st = CKV_OK;
    if (!f || !cen || !sum || !wsum || !cl || !first || !dest) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "kmeans: out of memory for M=%d k=%d", M, k);
        goto done;
    }
    for (int32_t m = 0; m < M; m++) {
        const float *key = ckv_cache_key(c, l, h, sinks + m);
        double n = ckv_norm(key, d);
        for (int32_t i = 0; i < d; i++)
            f[(size_t)m * d + i] = n < 1e-30 ? 0 : key[i] / n;
    }
    for (int32_t j = 0; j < k; j++) {
        int64_t m = ((2 * (int64_t)j + 1) * M) / (2 * (int64_t)k);
        memcpy(cen + (size_t)j * d, f + (size_t)m * d, (size_t)d * sizeof *cen);
    }
    for (int32_t it = 0; it < iters; it++) {
        assign_all(f, M, cen, k, d, cl);
        update(f, deg, M, cl, cen, k, d, sum, wsum);
    }
    assign_all(f, M, cen, k, d, cl);
    /* Each cluster collapses into its smallest member slot, which orders
     * the clusters as the contract asks. */
    for (int32_t j = 0; j < k; j++)
        first[j] = -1;
    for (int32_t t = 0; t < T; t++)
        dest[t] = t;
    for (int32_t m = 0; m < M; m++) {
        if (first[cl[m]] < 0)
            first[cl[m]] = sinks + m;
        dest[sinks + m] = first[cl[m]];
    }
    st = ckv_list_apply(c, l, h, dest, assign, err);
done:
    free(f);
    free(cen);
    free(sum);
    free(wsum);
    free(cl);
    free(first);
    free(dest);
    return st;
}

static ckv_status compress(const ckv_policy *p, ckv_cache *c, int32_t budget, const ckv_qwindow *qw,
                           int32_t *assign, ckv_error *err)
{
    (void)qw;
    ckv_status st = CKV_OK;
    for (int32_t l = 0; l < c->n_layer && !st; l++)
        for (int32_t h = 0; h < c->n_head_kv && !st; h++) {
            int32_t lh = ckv_cache_lh(c, l, h);
            if (c->len[lh] <= budget)
                continue;
            st = compress_list(c, l, h, (int32_t)p->p[P_SINKS], (int32_t)p->p[P_RECENT], budget,
                               (int32_t)p->p[P_ITERS],
                               assign ? assign + (size_t)lh * c->capacity : NULL, err);
        }
    return st;
}

const ckv_policy_ops ckv_policy_kmeans = {
    .name = "kmeans",
    .summary = "K-Means clustering of the middle keys (baseline)",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .protected_count = protected_count,
    .needs = needs,
    .interval = interval,
    .compress = compress,
};
