/* full: no compression, the reference every score is compared with. */
#include "policies.h"

/* Protects nothing (any budget >= 1 is valid) and never compresses during
 * decode. */
static int32_t none(const ckv_policy *p)
{
    (void)p;
    return 0;
}

static ckv_status compress(const ckv_policy *p, ckv_cache *c, int32_t budget, const ckv_qwindow *qw,
                           int32_t *assign, ckv_error *err)
{
    (void)p, (void)c, (void)budget, (void)qw, (void)assign, (void)err;
    return CKV_OK;
}

const ckv_policy_ops ckv_policy_full = {
    .name = "full",
    .summary = "no compression (reference)",
    .params = NULL,
    .n_params = 0,
    .protected_count = none,
    .interval = none,
    .compress = compress,
};
