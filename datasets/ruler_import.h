/* Import of RULER's official jsonl (`index`, `input`, `outputs`, `length`,
 * optional `answer_prefix`; the older format without `answer_prefix` has it
 * inside `input`) into ckv_sample. Task facts (task type, tokens to
 * generate, metric) come from DATA_DIR/ruler/templates.json. */
#ifndef CKV_RULER_IMPORT_H
#define CKV_RULER_IMPORT_H

#include <jansson.h>
#include <stddef.h>

#include "jsonl.h"
#include "sample.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    json_t *templates;
    char path[4200];
} ckv_ruler_config;

ckv_status ckv_ruler_config_load(const char *data_dir, ckv_ruler_config *cfg, ckv_error *err);
void ckv_ruler_config_free(ckv_ruler_config *cfg);

/* The task a RULER file belongs to: the parent directory of
 * `{task}/validation.jsonl`, else the file name without `.jsonl`. */
ckv_status ckv_ruler_task_from_path(const char *path, char *out, size_t cap, ckv_error *err);

/* One record to a sample: prompt = input + answer_prefix (the text RULER
 * sends), split into context and question at the last match of kvpress's
 * question regex for the task type. */
ckv_status ckv_ruler_import(const ckv_ruler_config *cfg, const ckv_jsonl *r, json_t *rec,
                            const char *task, ckv_sample *out, ckv_error *err);

/* Imports up to max_samples records (0: all); task NULL: from the path. */
ckv_status ckv_ruler_load(const ckv_ruler_config *cfg, const char *path, const char *task,
                          size_t max_samples, ckv_sample **out, size_t *n, ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
