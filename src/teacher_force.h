/* Teacher forcing of a token sequence through the full cache and through a
 * compressed one, scored step by step (datasets/fidelity.h): the perplexity
 * of both, KL(full || compressed) of the next-token distributions and top-1
 * agreement. The sequence of events follows ../shared/docs/policies.md
 * (query-aware): prefill the first `prefix` tokens, compress to the budget
 * B (from the prefix length), then feed the remaining tokens one at a time
 * as decode steps s = 1, 2, ..., compressing on the policy's interval. The
 * full cache runs the same tokens in batches. Harness-independent: the
 * sweep harness and `ckv perplexity` both call it. */
#ifndef CKV_TEACHER_FORCE_H
#define CKV_TEACHER_FORCE_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu.h"
#include "fidelity.h"
#include "model.h"
#include "policy.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const ckv_policy *policy; /* NULL: full cache only */
    ckv_budget budget;        /* entries kept per (layer, head), of the prefix tokens */
    int32_t prefix;           /* tokens prefilled before scoring, 1 <= prefix < n - 1 */
    int32_t batch;            /* full-cache tokens per forward call (0: 64) */
} ckv_tf_opts;

typedef struct {
    /* Scored steps: the predictions of tokens[prefix + 1 .. n), each made
     * after the compression (the prediction of tokens[prefix] comes from
     * the prefill, before it, and is the same for both caches). */
    ckv_fidelity_summary s;
    int64_t budget_entries;   /* B */
    int32_t peak_len;         /* longest compressed list during decode (B + interval) */
    int64_t compressions;     /* prefill + decode compressions that ran */
    bool skipped;             /* fractional budget not above the protected count */
    char skip_reason[256];
} ckv_tf_result;

/* Runs tokens[0, n) through m on cpu. The degree bias follows the policy
 * (degree_bias=off drops it for the compressed run only). */
ckv_status ckv_teacher_force(ckv_cpu *cpu, const ckv_model *m, const int32_t *tokens, int32_t n,
                             const ckv_tf_opts *o, ckv_tf_result *r, ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
