#include "pack_score.h"

#include "metrics.h"

ckv_status ckv_pack_score(const ckv_pack_sample *s, const char *prediction, double *score,
                          ckv_error *err)
{
    ckv_metric m;
    ckv_status st = ckv_metric_from_name(s->metric, &m, err);
    if (!st)
        st = ckv_metric_sample(m, prediction, (const char *const *)s->answers, s->n_answers,
                               (const char *const *)s->classes, s->n_classes,
                               s->first_line, score, err);
    if (st)
        return ckv_error_prefix(err, "task %s sample %u: ", s->task, s->index);
    return CKV_OK;
}
