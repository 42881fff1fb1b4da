/* LongBench v1: the 21 datasets' scoring facts (LongBench/eval.py,
 * pred.py), the official config files (prompt templates and max new
 * tokens, read from DATA_DIR/longbench/config at run time) and the import of
 * official jsonl records into ckv_sample. */
#ifndef CKV_LONGBENCH_H
#define CKV_LONGBENCH_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jsonl.h"
#include "metrics.h"
#include "sample.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CKV_LB_SINGLE_DOC_QA = 0,
    CKV_LB_MULTI_DOC_QA,
    CKV_LB_SUMMARIZATION,
    CKV_LB_FEW_SHOT,
    CKV_LB_SYNTHETIC,
    CKV_LB_CODE
} ckv_lb_category;

enum { CKV_LB_N_CATEGORIES = CKV_LB_CODE + 1 };

typedef enum { CKV_LB_EN = 0, CKV_LB_ZH, CKV_LB_CODE_LANG } ckv_lb_language;

typedef struct {
    const char *name;
    ckv_metric metric;         /* dataset2metric */
    ckv_lb_category category;  /* LongBench README grouping */
    ckv_lb_language language;
    bool english16;            /* in the 16-dataset English + code subset */
    bool first_line;           /* trec, triviaqa, samsum, lsht: score the first line only */
    bool chat_template;        /* false for trec, triviaqa, samsum, lsht, lcc, repobench-p */
} ckv_longbench_dataset;

/* All 21 datasets in pred.py order. */
const ckv_longbench_dataset *ckv_longbench_datasets(size_t *n);
/* By name; a LongBench-E name ("qasper_e") finds its base dataset. NULL
 * when unknown. */
const ckv_longbench_dataset *ckv_longbench_find(const char *name);
const char *ckv_longbench_category_name(ckv_lb_category c);

/* dataset2prompt.json and dataset2maxlen.json. */
typedef struct {
    json_t *prompts;
    json_t *maxlen;
    char dir[4096];
} ckv_longbench_config;

/* Reads DATA_DIR/longbench/config/{dataset2prompt,dataset2maxlen}.json. */
ckv_status ckv_longbench_config_load(const char *data_dir, ckv_longbench_config *cfg,
                                     ckv_error *err);
void ckv_longbench_config_free(ckv_longbench_config *cfg);

/* One record (fields input, context, answers, length, dataset, language,
 * all_classes, _id) to a sample: the template filled with Python
 * str.format semantics, the context part ending after the filled
 * {context}. dataset overrides the record's `dataset` field when non-NULL.
 * Errors name the jsonl file:line and field. */
ckv_status ckv_longbench_import(const ckv_longbench_config *cfg, const ckv_jsonl *r, json_t *rec,
                                const char *dataset, ckv_sample *out, ckv_error *err);

/* Imports up to max_samples records (0: all) of a LongBench jsonl file;
 * free with ckv_samples_free. */
ckv_status ckv_longbench_load(const ckv_longbench_config *cfg, const char *path,
                              const char *dataset, size_t max_samples, ckv_sample **out, size_t *n,
                              ckv_error *err);

/* Default prompt budget for models LongBench's model2maxlen.json does not
 * list: the largest multiple of 500 not above n_ctx - 512 (7500 for 8K).
 * 0 when n_ctx < 1012 leaves no room. */
int32_t ckv_longbench_default_max_length(int64_t n_ctx);

#ifdef __cplusplus
}
#endif
#endif
