/* Benchmark-level scores from per-task scores (each x100): LongBench's
 * category means and leaderboard average, the 16-dataset English + code
 * mean of KV-compression papers, and RULER's 13-task mean. A mean is only
 * reported complete when every task it needs is present; missing tasks are
 * never counted as zero. */
#ifndef CKV_AGGREGATE_H
#define CKV_AGGREGATE_H

#include <stdbool.h>
#include <stddef.h>

#include "longbench.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *task;
    double score;
} ckv_task_score;

typedef struct {
    double mean;     /* mean of the tasks present (0 when none) */
    size_t present;  /* tasks present */
    size_t expected; /* tasks the mean is defined over */
} ckv_mean;

typedef struct {
    ckv_mean english16;                      /* the 16 English + code datasets */
    ckv_mean category[CKV_LB_N_CATEGORIES]; /* per category, for `language` */
    /* Leaderboard "Avg": mean of the six category means; complete only
     * when every category has all its datasets. */
    ckv_mean avg;
} ckv_longbench_summary;

/* Aggregates LongBench task scores. language CKV_LB_EN or CKV_LB_ZH picks
 * the categories' datasets (code completion counts in both). Unknown task
 * names and duplicates are errors. */
ckv_status ckv_longbench_summarize(const ckv_task_score *scores, size_t n,
                                   ckv_lb_language language, ckv_longbench_summary *out,
                                   ckv_error *err);

/* The 13 RULER tasks, in RULER's synthetic.yaml order. */
const char *const *ckv_ruler_tasks(size_t *n);
/* RULER score for one length: the plain mean of the 13 task scores. */
ckv_status ckv_ruler_summarize(const ckv_task_score *scores, size_t n, ckv_mean *out,
                               ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
