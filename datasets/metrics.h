/* The scoring functions of LongBench (LongBench/metrics.py and eval.py) and
 * RULER (scripts/eval/evaluate.py), named as the originals name them and
 * reproducing their quirks (documented in docs/datasets.md). Text is UTF-8;
 * invalid UTF-8 is an error, as a Python str cannot hold it. */
#ifndef CKV_METRICS_H
#define CKV_METRICS_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CKV_METRIC_QA_F1 = 0,        /* qa_f1_score */
    CKV_METRIC_QA_F1_ZH,         /* qa_f1_zh_score (jieba approximated) */
    CKV_METRIC_ROUGE,            /* rouge_score */
    CKV_METRIC_ROUGE_ZH,         /* rouge_zh_score (jieba approximated) */
    CKV_METRIC_CLASSIFICATION,   /* classification_score */
    CKV_METRIC_RETRIEVAL,        /* retrieval_score */
    CKV_METRIC_RETRIEVAL_ZH,     /* retrieval_zh_score */
    CKV_METRIC_COUNT,            /* count_score */
    CKV_METRIC_CODE_SIM,         /* code_sim_score */
    CKV_METRIC_STRING_MATCH_ALL, /* RULER string_match_all */
    CKV_METRIC_STRING_MATCH_PART /* RULER string_match_part */
} ckv_metric;

enum { CKV_METRIC_N = CKV_METRIC_STRING_MATCH_PART + 1 };

const char *ckv_metric_name(ckv_metric m);
/* Looks a metric up by its original name; CKV_ERR_ARG listing the names
 * when unknown. */
ckv_status ckv_metric_from_name(const char *name, ckv_metric *out, ckv_error *err);
/* True for RULER's string_match_* (post-processing, fraction/max rules). */
bool ckv_metric_is_ruler(ckv_metric m);

/* One prediction against one ground truth, as the original function of that
 * name. classes is the sample's all_classes (classification only). For the
 * RULER metrics this is the case-insensitive substring test of one
 * reference, after RULER's post-processing of the prediction. */
ckv_status ckv_metric_pair(ckv_metric m, const char *pred, const char *truth,
                           const char *const *classes, size_t n_classes, double *score,
                           ckv_error *err);

/* A sample's score in [0, 1]. LongBench metrics: the maximum over answers
 * (0 with no answers), after the first-line cut when first_line is set (trec,
 * triviaqa, samsum, lsht). RULER: string_match_all is the fraction of
 * references found, string_match_part 1 if any is found; no references is an
 * error (the original divides by zero). */
ckv_status ckv_metric_sample(ckv_metric m, const char *pred, const char *const *answers,
                             size_t n_answers, const char *const *classes, size_t n_classes,
                             bool first_line, double *score, ckv_error *err);

/* The task score (x100, rounded to 2 decimals as Python's round) from the
 * per-sample scores, in the original's order of operations: LongBench
 * round(100 * sum / n, 2), RULER round(sum / n * 100, 2). n > 0. */
double ckv_metric_task_score(ckv_metric m, const double *samples, size_t n);

/* Python's round(x, 2): correctly rounded, ties to even on the exact value. */
double ckv_round2(double x);

#ifdef __cplusplus
}
#endif
#endif
