/* The few Python `str` operations the official scorers (LongBench metrics.py,
 * RULER evaluate.py) rely on, on UTF-8 text: whitespace as str.isspace,
 * str.lower, str.split() and str.strip(). Unicode properties come from
 * utf8proc. Input must be valid UTF-8 (check with ckv_utf8_check first). */
#ifndef CKV_PYSTR_H
#define CKV_PYSTR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A byte range of a string. */
typedef struct {
    size_t off, len;
} ckv_span;

/* Fails with CKV_ERR_FORMAT naming `what` and the byte offset when s is not
 * valid UTF-8 (Python strings cannot hold such text). */
ckv_status ckv_utf8_check(const char *s, size_t len, const char *what, ckv_error *err);

/* Decodes valid UTF-8 into code points; *cps is malloc'd. */
ckv_status ckv_utf8_decode(const char *s, size_t len, int32_t **cps, size_t *n, ckv_error *err);

/* str.isspace for one code point: category Zs or bidi class WS, B or S. */
bool ckv_py_isspace(int32_t cp);

/* str.lower(): utf8proc's simple lower-case mapping plus the one
 * unconditional multi-character mapping (U+0130 -> "i" U+0307). The
 * context-dependent final sigma rule is not applied (Σ -> σ always).
 * *out is malloc'd and NUL-terminated. */
ckv_status ckv_py_lower(const char *s, size_t len, char **out, size_t *out_len, ckv_error *err);

/* str.split() without arguments: maximal runs of non-whitespace. *spans is
 * malloc'd (NULL when *n == 0). */
ckv_status ckv_py_split(const char *s, size_t len, ckv_span **spans, size_t *n, ckv_error *err);

/* str.strip() without arguments, as a sub-span of s. */
ckv_span ckv_py_strip(const char *s, size_t len);

#ifdef __cplusplus
}
#endif
#endif
