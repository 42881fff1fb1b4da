/* Streaming reader for JSON Lines files (jansson): one object per line, read
 * one line at a time so multi-megabyte files never sit in memory twice.
 * Every error names file:line, and the field for field access. Invalid
 * UTF-8, bad JSON, missing fields and wrong types are errors. "\u0000" is
 * accepted (official LongBench contexts contain it) where the caller takes
 * the string's length, and is an error elsewhere. */
#ifndef CKV_JSONL_H
#define CKV_JSONL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ckv_jsonl ckv_jsonl;

ckv_status ckv_jsonl_open(const char *path, ckv_jsonl **out, ckv_error *err);
void ckv_jsonl_close(ckv_jsonl *r);

/* Parses the next line that is not blank into *obj (a JSON object, owned by
 * the caller: json_decref it). *obj is NULL at end of file. */
ckv_status ckv_jsonl_next(ckv_jsonl *r, json_t **obj, ckv_error *err);

const char *ckv_jsonl_path(const ckv_jsonl *r);
/* 1-based number of the line last returned by ckv_jsonl_next. */
size_t ckv_jsonl_line(const ckv_jsonl *r);

/* Typed field access; errors read "FILE:LINE: field 'NAME': ...". When
 * required is false a missing (or null) field leaves the default: *out
 * NULL, *n 0, *v untouched; *present (may be NULL) says which. Strings
 * point into obj. With len NULL a string holding U+0000 is an error;
 * otherwise *len is its byte length, NULs included. */
ckv_status ckv_jsonl_string(const ckv_jsonl *r, json_t *obj, const char *field, bool required,
                            const char **out, size_t *len, ckv_error *err);
/* An array of strings without U+0000; *out is malloc'd (free it), its
 * strings point into obj. */
ckv_status ckv_jsonl_strings(const ckv_jsonl *r, json_t *obj, const char *field, bool required,
                             const char ***out, size_t *n, ckv_error *err);
ckv_status ckv_jsonl_int(const ckv_jsonl *r, json_t *obj, const char *field, bool required,
                         int64_t *v, bool *present, ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
