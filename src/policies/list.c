#include "list.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double ckv_norm(const float *a, int32_t d)
{
    double s = 0;
    for (int32_t i = 0; i < d; i++)
        s += (double)a[i] * a[i];
    return sqrt(s);
}

double ckv_csm_dot(const float *a, const float *b, int32_t d)
{
    double s = 0;
    for (int32_t q = 0; q < d; q += 32)
        for (int32_t k = 0; k < 8; k++)
            for (int32_t i = q + k; i < q + 32 && i < d; i += 8)
                s += (double)a[i] * b[i];
    return s;
}

double ckv_csm_norm(const float *a, int32_t d)
{
    double p[4] = {0, 0, 0, 0};
    for (int32_t i = 0; i < d; i++)
        p[i % 32 / 8] += (double)a[i] * a[i];
    return sqrt((p[0] + p[1]) + (p[2] + p[3]));
}

double ckv_csm_recip(double norm)
{
    return norm >= 1e-30 ? 1.0 / norm : 0.0;
}

double ckv_csm_cosine(double dot, double ra, double rb)
{
    return ra != 0 && rb != 0 ? dot * ra * rb : 0.0;
}

static int cmp_ranked(const void *x, const void *y)
{
    const ckv_ranked *a = x, *b = y;
    if (a->s != b->s)
        return a->s > b->s ? -1 : 1;
    return (a->slot > b->slot) - (a->slot < b->slot);
}

void ckv_rank(ckv_ranked *r, int32_t n)
{
    qsort(r, (size_t)n, sizeof *r, cmp_ranked);
}

ckv_status ckv_list_apply(ckv_cache *c, int32_t l, int32_t h, const int32_t *dest, int32_t *assign,
                          ckv_error *err)
{
    int32_t T = c->len[ckv_cache_lh(c, l, h)], d = c->head_dim;
    float *deg = ckv_cache_degp(c, l, h), *score = ckv_cache_scorep(c, l, h);
    /* acc_of[t]: accumulator row of destination t, -1 until a source arrives. */
    int32_t *acc_of = malloc((size_t)T * sizeof *acc_of);
    int32_t *newslot = malloc((size_t)T * sizeof *newslot);
    int32_t n_acc = 0;
    if (!acc_of || !newslot)
        goto nomem;
    for (int32_t t = 0; t < T; t++)
        acc_of[t] = -1;
    for (int32_t t = 0; t < T; t++) {
        if (dest[t] >= 0 && dest[t] != t && acc_of[dest[t]] < 0)
            acc_of[dest[t]] = n_acc++;
    }
    if (n_acc) {
        /* Per destination: n, then key sums, then value sums, in double;
         * the destination's own term first, sources in slot order. */
        size_t row = 1 + 2 * (size_t)d;
        double *acc = calloc((size_t)n_acc * row, sizeof *acc);
        if (!acc)
            goto nomem;
        for (int32_t t = 0; t < T; t++) {
            if (acc_of[t] < 0)
                continue;
            double *a = acc + (size_t)acc_of[t] * row;
            const float *k = ckv_cache_key(c, l, h, t), *v = ckv_cache_val(c, l, h, t);
            a[0] = deg[t];
            for (int32_t i = 0; i < d; i++) {
                a[1 + i] = (double)deg[t] * k[i];
                a[1 + d + i] = (double)deg[t] * v[i];
            }
        }
        for (int32_t t = 0; t < T; t++) {
            if (dest[t] < 0 || dest[t] == t)
                continue;
            int32_t b = dest[t];
            double *a = acc + (size_t)acc_of[b] * row;
            const float *k = ckv_cache_key(c, l, h, t), *v = ckv_cache_val(c, l, h, t);
            a[0] += deg[t];
            for (int32_t i = 0; i < d; i++) {
                a[1 + i] += (double)deg[t] * k[i];
                a[1 + d + i] += (double)deg[t] * v[i];
            }
            if (score)
                score[b] += score[t];
        }
        for (int32_t t = 0; t < T; t++) {
            if (acc_of[t] < 0)
                continue;
            const double *a = acc + (size_t)acc_of[t] * row;
            float *k = ckv_cache_key(c, l, h, t), *v = ckv_cache_val(c, l, h, t);
            for (int32_t i = 0; i < d; i++) {
                k[i] = ckv_cache_store(c, (float)(a[1 + i] / a[0]));
                v[i] = ckv_cache_store(c, (float)(a[1 + d + i] / a[0]));
            }
            deg[t] = (float)a[0];
        }
        free(acc);
    }
    int32_t n = 0;
    for (int32_t t = 0; t < T; t++) {
        newslot[t] = -1;
        if (dest[t] != t)
            continue;
        if (n != t) {
            memcpy(ckv_cache_key(c, l, h, n), ckv_cache_key(c, l, h, t), (size_t)d * sizeof(float));
            memcpy(ckv_cache_val(c, l, h, n), ckv_cache_val(c, l, h, t), (size_t)d * sizeof(float));
            deg[n] = deg[t];
            if (score)
                score[n] = score[t];
        }
        newslot[t] = n++;
    }
    if (assign)
        for (int32_t i = 0; i < c->capacity; i++)
            if (assign[i] >= 0)
                assign[i] = dest[assign[i]] < 0 ? -1 : newslot[dest[assign[i]]];
    c->len[ckv_cache_lh(c, l, h)] = n;
    free(acc_of);
    free(newslot);
    return CKV_OK;
nomem:
    free(acc_of);
    free(newslot);
    return ckv_errorf(err, CKV_ERR_NOMEM, "policy: out of memory editing a list of %d entries", T);
}

ckv_status ckv_list_keep(ckv_cache *c, int32_t l, int32_t h, const uint8_t *keep, int32_t *assign,
                         ckv_error *err)
{
    int32_t T = c->len[ckv_cache_lh(c, l, h)];
    int32_t *dest = malloc((size_t)(T ? T : 1) * sizeof *dest);
    if (!dest)
        return ckv_errorf(err, CKV_ERR_NOMEM, "policy: out of memory for %d slots", T);
    for (int32_t t = 0; t < T; t++)
        dest[t] = keep[t] ? t : -1;
    ckv_status st = ckv_list_apply(c, l, h, dest, assign, err);
    free(dest);
    return st;
}

ckv_status ckv_list_keep_top(ckv_cache *c, int32_t l, int32_t h, const double *score,
                             int32_t recent, int32_t budget, int32_t *assign, ckv_error *err)
{
    int32_t T = c->len[ckv_cache_lh(c, l, h)], n = T - recent;
    ckv_ranked *r = malloc((size_t)(n > 0 ? n : 1) * sizeof *r);
    uint8_t *keep = malloc((size_t)T);
    if (!r || !keep) {
        free(r);
        free(keep);
        return ckv_errorf(err, CKV_ERR_NOMEM, "policy: out of memory for %d slots", T);
    }
    for (int32_t t = 0; t < n; t++)
        r[t] = (ckv_ranked){score[t], t};
    ckv_rank(r, n);
    memset(keep, 0, (size_t)T);
    for (int32_t t = n; t < T; t++)
        keep[t] = 1;
    for (int32_t i = 0; i < budget - recent && i < n; i++)
        keep[r[i].slot] = 1;
    ckv_status st = ckv_list_keep(c, l, h, keep, assign, err);
    free(r);
    free(keep);
    return st;
}

void ckv_list_failure_init(ckv_list_failure *f)
{
    f->lh = INT32_MAX;
    f->err.status = CKV_OK;
    f->err.msg[0] = 0;
}

void ckv_list_failure_note(ckv_list_failure *f, int32_t lh, const ckv_error *e)
{
#pragma omp critical(ckv_list_failure)
    if (lh < f->lh) {
        f->lh = lh;
        f->err = *e;
    }
}

ckv_status ckv_list_failure_take(const ckv_list_failure *f, ckv_error *err)
{
    if (f->lh == INT32_MAX)
        return CKV_OK;
    if (err)
        *err = f->err;
    return f->err.status;
}
