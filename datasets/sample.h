/* One benchmark sample as the harness replays it: the prompt text (before
 * any chat template), where its context part ends, the references and how
 * to score and generate. Filled by the importers (longbench.h,
 * ruler_jsonl.h); plain data, all strings malloc'd. */
#ifndef CKV_SAMPLE_H
#define CKV_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jsonl.h"
#include "metrics.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char *task;   /* LongBench dataset or RULER task name */
    char *id;     /* LongBench _id; RULER index in decimal */
    char *prompt; /* full prompt text: context part, then question part */
    size_t prompt_len; /* bytes; official contexts may contain U+0000 */
    /* prompt[0, context_len) is the context part and the rest the question
     * part, for query-agnostic compression (compress the context, then
     * append the question). */
    size_t context_len;
    char **answers;
    size_t n_answers;
    char **classes; /* LongBench all_classes (classification datasets) */
    size_t n_classes;
    ckv_metric metric;
    int32_t max_new_tokens;
    bool chat_template; /* wrap in the model's chat template */
    bool first_line;    /* score only the first line of the prediction */
    int64_t length;     /* the record's `length` field, as the file gives it */
} ckv_sample;

void ckv_sample_free(ckv_sample *s);

/* Copies n strings into a malloc'd array; *dst_n is set together with *dst
 * so that ckv_sample_free releases a partial copy. */
/* Imports one jsonl record; ctx is the importer's configuration. */
typedef ckv_status (*ckv_import_fn)(const void *ctx, const ckv_jsonl *r, json_t *rec,
                                    ckv_sample *out, ckv_error *err);

/* Reads up to max_samples records (0: all) of a jsonl file through fn.
 * An empty file is an error. *out is malloc'd; free with ckv_samples_free. */
ckv_status ckv_samples_load(const char *path, ckv_import_fn fn, const void *ctx,
                            size_t max_samples, ckv_sample **out, size_t *n, ckv_error *err);
void ckv_samples_free(ckv_sample *v, size_t n);

ckv_status ckv_strings_dup(const char *const *src, size_t n, char ***dst, size_t *dst_n,
                           ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
