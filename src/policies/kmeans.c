/* kmeans: K-Means clustering baseline. The middle [sinks, T - recent) is
 * clustered into k = B - sinks - recent clusters by cosine similarity of
 * unit keys; each non-empty cluster becomes one entry (degree-weighted
 * centroid of raw keys and values). Cost O(iters * M * k * d). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

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

static void norms(const double *x, int32_t n, int32_t d, double *out)
{
    for (int32_t r = 0; r < n; r++) {
        double s = 0;
        for (int32_t i = 0; i < d; i++)
            s += x[(size_t)r * d + i] * x[(size_t)r * d + i];
        out[r] = sqrt(s);
    }
}

enum { BLOCK = 256 };

/* Assigns each of the M features to the centroid of highest cosine
 * similarity (ties: the lowest cluster index; zero norms give 0). The dot
 * products are one BLAS product per block of BLOCK features. */
static void assign_all(const double *f, const double *fnorm, int32_t M, const double *cen,
                       int32_t k, int32_t d, double *cnorm, double *sim, int32_t *cl)
{
    norms(cen, k, d, cnorm);
    for (int32_t m0 = 0; m0 < M; m0 += BLOCK) {
        int32_t rows = M - m0 < BLOCK ? M - m0 : BLOCK;
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, k, d, 1.0, f + (size_t)m0 * d,
                    d, cen, d, 0.0, sim, k);
        for (int32_t r = 0; r < rows; r++) {
            double best = -INFINITY, fn = fnorm[m0 + r];
            for (int32_t j = 0; j < k; j++) {
                double s = fn < 1e-30 || cnorm[j] < 1e-30
                               ? 0
                               : sim[(size_t)r * k + j] / (fn * cnorm[j]);
                if (s > best) {
                    best = s;
                    cl[m0 + r] = j;
                }
            }
        }
    }
}

/* Lloyd step: each non-empty cluster's centroid becomes the normalised
 * degree-weighted mean of its members' features (kept if that mean's norm is
 * below 1e-30); empty clusters keep theirs. The mean of a lone member is its
 * feature, already unit: taken as it is, not divided by its weight and its
 * norm, whose roundings would move it by an ulp (so a cluster that keeps the
 * one row that started it keeps its centroid, which the GPU relies on).
 * one[j]: cluster j's member while it has one, -2 once it has more. */
static void update(const double *f, const float *deg, int32_t M, const int32_t *cl, double *cen,
                   int32_t k, int32_t d, double *sum, double *wsum, int32_t *one)
{
    memset(sum, 0, (size_t)k * d * sizeof *sum);
    memset(wsum, 0, (size_t)k * sizeof *wsum);
    for (int32_t j = 0; j < k; j++)
        one[j] = -1;
    for (int32_t m = 0; m < M; m++) {
        one[cl[m]] = one[cl[m]] == -1 ? m : -2;
        wsum[cl[m]] += deg[m];
        for (int32_t i = 0; i < d; i++)
            sum[(size_t)cl[m] * d + i] += deg[m] * f[(size_t)m * d + i];
    }
    for (int32_t j = 0; j < k; j++) {
        if (wsum[j] == 0)
            continue;
        double *s = sum + (size_t)j * d, n = 0;
        if (one[j] >= 0)
            memcpy(s, f + (size_t)one[j] * d, (size_t)d * sizeof *s);
        for (int32_t i = 0; i < d; i++) {
            if (one[j] < 0)
                s[i] /= wsum[j];
            n += s[i] * s[i];
        }
        n = sqrt(n);
        if (n < 1e-30)
            continue;
        for (int32_t i = 0; i < d; i++)
            cen[(size_t)j * d + i] = one[j] >= 0 ? s[i] : s[i] / n;
    }
}

/* cen_out (NULL: not asked): the k final centroids. */
static ckv_status compress_list(ckv_cache *c, int32_t l, int32_t h, int32_t sinks, int32_t recent,
                                int32_t budget, int32_t iters, int32_t *assign, double *cen_out,
                                ckv_error *err)
{
    int32_t T = c->len[ckv_cache_lh(c, l, h)], d = c->head_dim;
    int32_t M = T - sinks - recent, k = budget - sinks - recent;
    if (k >= M)
        return CKV_OK;
    const float *deg = ckv_cache_degp(c, l, h) + sinks;
    double *f = malloc((size_t)M * d * sizeof *f), *cen = malloc((size_t)k * d * sizeof *cen);
    double *sum = malloc((size_t)k * d * sizeof *sum), *wsum = malloc((size_t)k * sizeof *wsum);
    int32_t *cl = malloc((size_t)M * sizeof *cl), *first = malloc((size_t)k * sizeof *first);
    int32_t *one = malloc((size_t)k * sizeof *one);
    int32_t *dest = malloc((size_t)T * sizeof *dest);
    double *fnorm = malloc((size_t)M * sizeof *fnorm), *cnorm = malloc((size_t)k * sizeof *cnorm);
    double *sim = malloc((size_t)BLOCK * k * sizeof *sim);
    ckv_status st = CKV_OK;
    if (!f || !cen || !sum || !wsum || !cl || !first || !one || !dest || !fnorm || !cnorm || !sim) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "kmeans: out of memory for M=%d k=%d", M, k);
        goto done;
    }
    for (int32_t m = 0; m < M; m++) {
        const float *key = ckv_cache_key(c, l, h, sinks + m);
        double n = ckv_norm(key, d);
        for (int32_t i = 0; i < d; i++)
            f[(size_t)m * d + i] = n < 1e-30 ? 0 : key[i] / n;
    }
    norms(f, M, d, fnorm);
    for (int32_t j = 0; j < k; j++) {
        int64_t m = ((2 * (int64_t)j + 1) * M) / (2 * (int64_t)k);
        memcpy(cen + (size_t)j * d, f + (size_t)m * d, (size_t)d * sizeof *cen);
    }
    for (int32_t it = 0; it < iters; it++) {
        assign_all(f, fnorm, M, cen, k, d, cnorm, sim, cl);
        update(f, deg, M, cl, cen, k, d, sum, wsum, one);
    }
    assign_all(f, fnorm, M, cen, k, d, cnorm, sim, cl);
    if (cen_out)
        memcpy(cen_out, cen, (size_t)k * d * sizeof *cen);
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
    free(one);
    free(dest);
    free(fnorm);
    free(cnorm);
    free(sim);
    return st;
}

static ckv_status compress_all(const ckv_policy *p, ckv_cache *c, int32_t budget, int32_t *assign,
                               double *centroids, ckv_error *err)
{
    const int32_t lists = c->n_layer * c->n_head_kv;
    const size_t per_list = (size_t)(budget - protected_count(p)) * c->head_dim;
    ckv_list_failure fail;
    ckv_list_failure_init(&fail);
    /* One list per thread; BLAS runs single-threaded inside each (its own
     * threads would only compete with the lists'). */
    int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
#pragma omp parallel for schedule(dynamic, 1)
    for (int32_t lh = 0; lh < lists; lh++) {
        if (c->len[lh] <= budget)
            continue;
        ckv_error e = {0};
        if (compress_list(c, lh / c->n_head_kv, lh % c->n_head_kv, (int32_t)p->p[P_SINKS],
                          (int32_t)p->p[P_RECENT], budget, (int32_t)p->p[P_ITERS],
                          assign ? assign + (size_t)lh * c->capacity : NULL,
                          centroids ? centroids + lh * per_list : NULL, &e))
            ckv_list_failure_note(&fail, lh, &e);
    }
    openblas_set_num_threads(blas_threads);
    return ckv_list_failure_take(&fail, err);
}

static ckv_status compress(const ckv_policy *p, ckv_cache *c, int32_t budget, const ckv_qwindow *qw,
                           int32_t *assign, ckv_error *err)
{
    (void)qw;
    return compress_all(p, c, budget, assign, NULL, err);
}

ckv_status ckv_kmeans_compress(const ckv_policy *p, ckv_cache *c, int32_t budget,
                               int32_t *assign, double *centroids, ckv_error *err)
{
    if (p->ops != &ckv_policy_kmeans)
        return ckv_errorf(err, CKV_ERR_ARG, "ckv_kmeans_compress: policy %s is not kmeans",
                          p->ops->name);
    ckv_status st = ckv_policy_check(p, c->score != NULL, budget, NULL, err);
    return st ? st : compress_all(p, c, budget, assign, centroids, err);
}

const ckv_policy_ops ckv_policy_kmeans = {
    .name = "kmeans",
    .summary = "K-Means clustering of the middle keys (baseline)",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .protected_count = protected_count,
    .merges = true,
    .compress = compress,
};
