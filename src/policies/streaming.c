/* streaming: StreamingLLM. Keep the first `sinks` slots and the newest
 * B - sinks; drop the rest. Keys keep their original rotation. */
#include <stdlib.h>

#include "list.h"
#include "policies.h"

enum { P_SINKS, P_INTERVAL };

static const ckv_param_def params[] = {
    {"sinks", CKV_PARAM_INT, 4, 0, 1 << 20, NULL, "attention-sink slots always kept"},
    {"interval", CKV_PARAM_INT, 64, 1, 1 << 20, NULL, "decode steps between compressions"},
};

static int32_t protected_count(const ckv_policy *p)
{
    return (int32_t)p->p[P_SINKS];
}

static ckv_status compress(const ckv_policy *p, ckv_cache *c, int32_t budget, const ckv_qwindow *qw,
                           int32_t *assign, ckv_error *err)
{
    (void)qw;
    int32_t sinks = (int32_t)p->p[P_SINKS];
    uint8_t *keep = malloc((size_t)c->capacity);
    if (!keep)
        return ckv_errorf(err, CKV_ERR_NOMEM, "streaming: out of memory");
    ckv_status st = CKV_OK;
    for (int32_t l = 0; l < c->n_layer && !st; l++)
        for (int32_t h = 0; h < c->n_head_kv && !st; h++) {
            int32_t lh = ckv_cache_lh(c, l, h), T = c->len[lh];
            if (T <= budget)
                continue;
            for (int32_t t = 0; t < T; t++)
                keep[t] = t < sinks || t >= T - (budget - sinks);
            st = ckv_list_keep(c, l, h, keep, assign ? assign + (size_t)lh * c->capacity : NULL,
                               err);
        }
    free(keep);
    return st;
}

const ckv_policy_ops ckv_policy_streaming = {
    .name = "streaming",
    .summary = "StreamingLLM: attention sinks + newest entries",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .protected_count = protected_count,
    .compress = compress,
};
