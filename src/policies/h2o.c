/* h2o: Heavy-Hitter Oracle. Keep the last `recent` slots and the entries
 * with the most accumulated attention (cache->score) among the others. */
#include <stdlib.h>

#include "list.h"
#include "policies.h"

enum { P_RECENT, P_INTERVAL };

static const ckv_param_def params[] = {
    {"recent", CKV_PARAM_INT, 64, 0, 1 << 20, NULL, "newest slots always kept"},
    {"interval", CKV_PARAM_INT, 64, 1, 1 << 20, NULL, "decode steps between compressions"},
};

static int32_t protected_count(const ckv_policy *p)
{
    return (int32_t)p->p[P_RECENT];
}

static int needs(const ckv_policy *p)
{
    (void)p;
    return CKV_NEEDS_SCORE;
}

static ckv_status compress(const ckv_policy *p, ckv_cache *c, int32_t budget, const ckv_qwindow *qw,
                           int32_t *assign, ckv_error *err)
{
    (void)qw;
    int32_t recent = (int32_t)p->p[P_RECENT];
    double *s = malloc((size_t)c->capacity * sizeof *s);
    if (!s)
        return ckv_errorf(err, CKV_ERR_NOMEM, "h2o: out of memory");
    ckv_status st = CKV_OK;
    for (int32_t l = 0; l < c->n_layer && !st; l++)
        for (int32_t h = 0; h < c->n_head_kv && !st; h++) {
            int32_t lh = ckv_cache_lh(c, l, h), T = c->len[lh];
            if (T <= budget)
                continue;
            const float *score = ckv_cache_scorep(c, l, h);
            for (int32_t t = 0; t < T; t++)
                s[t] = score[t];
            st = ckv_list_keep_top(c, l, h, s, recent, budget,
                                   assign ? assign + (size_t)lh * c->capacity : NULL, err);
        }
    free(s);
    return st;
}

const ckv_policy_ops ckv_policy_h2o = {
    .name = "h2o",
    .summary = "H2O: newest entries + heavy hitters by accumulated attention",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .protected_count = protected_count,
    .needs = needs,
    .compress = compress,
};
