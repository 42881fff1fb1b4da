#include "jsonl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct ckv_jsonl {
    FILE *fp;
    char *path;
    char *buf;
    size_t cap;
    size_t line;
};

ckv_status ckv_jsonl_open(const char *path, ckv_jsonl **out, ckv_error *err)
{
    ckv_jsonl *r = calloc(1, sizeof *r);
    if (!r)
        return ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
    r->path = ckv_strndup(path, strlen(path));
    r->fp = fopen(path, "rb");
    if (!r->fp || !r->path) {
        int e = errno;
        ckv_jsonl_close(r);
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot open: %s", path, strerror(e));
    }
    *out = r;
    return CKV_OK;
}

void ckv_jsonl_close(ckv_jsonl *r)
{
    if (!r)
        return;
    if (r->fp)
        fclose(r->fp);
    free(r->path);
    free(r->buf);
    free(r);
}

const char *ckv_jsonl_path(const ckv_jsonl *r)
{
    return r->path;
}

size_t ckv_jsonl_line(const ckv_jsonl *r)
{
    return r->line;
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    case JSON_NULL: return "null";
    }
    return "value";
}

ckv_status ckv_jsonl_next(ckv_jsonl *r, json_t **obj, ckv_error *err)
{
    *obj = NULL;
    for (;;) {
        errno = 0;
        ssize_t n = getline(&r->buf, &r->cap, r->fp);
        if (n < 0) {
            if (ferror(r->fp))
                return ckv_errorf(err, CKV_ERR_IO, "%s:%zu: read failed: %s", r->path, r->line + 1,
                                  strerror(errno));
            return CKV_OK;
        }
        r->line++;
        size_t i = 0;
        while (i < (size_t)n && strchr(" \t\r\n", r->buf[i]))
            i++;
        if (i == (size_t)n)
            continue;
        json_error_t je;
        /* The length form reports a raw NUL byte as invalid JSON instead of
         * stopping at it; escaped "\u0000" is data (see the header). */
        json_t *v = json_loadb(r->buf, (size_t)n, JSON_ALLOW_NUL, &je);
        if (!v)
            return ckv_errorf(err, CKV_ERR_FORMAT, "%s:%zu: invalid JSON at column %d: %s", r->path,
                              r->line, je.column, je.text);
        if (!json_is_object(v)) {
            ckv_errorf(err, CKV_ERR_FORMAT, "%s:%zu: expected a JSON object, got %s", r->path,
                       r->line, type_name(v));
            json_decref(v);
            return CKV_ERR_FORMAT;
        }
        *obj = v;
        return CKV_OK;
    }
}

static ckv_status field_error(const ckv_jsonl *r, const char *field, const char *what,
                              const json_t *v, ckv_error *err)
{
    if (!v)
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s:%zu: field '%s' is missing", r->path, r->line,
                          field);
    return ckv_errorf(err, CKV_ERR_FORMAT, "%s:%zu: field '%s': expected %s, got %s", r->path,
                      r->line, field, what, type_name(v));
}

static bool has_nul(const json_t *s)
{
    return strlen(json_string_value(s)) != json_string_length(s);
}

ckv_status ckv_jsonl_string(const ckv_jsonl *r, json_t *obj, const char *field, bool required,
                            const char **out, size_t *len, ckv_error *err)
{
    json_t *v = json_object_get(obj, field);
    *out = NULL;
    if (len)
        *len = 0;
    if ((!v || json_is_null(v)) && !required)
        return CKV_OK;
    if (!v || !json_is_string(v))
        return field_error(r, field, "a string", v, err);
    if (!len && has_nul(v))
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED, "%s:%zu: field '%s' contains U+0000",
                          r->path, r->line, field);
    *out = json_string_value(v);
    if (len)
        *len = json_string_length(v);
    return CKV_OK;
}

ckv_status ckv_jsonl_strings(const ckv_jsonl *r, json_t *obj, const char *field, bool required,
                             const char ***out, size_t *n, ckv_error *err)
{
    json_t *v = json_object_get(obj, field);
    *out = NULL;
    *n = 0;
    if ((!v || json_is_null(v)) && !required)
        return CKV_OK;
    if (!v || !json_is_array(v))
        return field_error(r, field, "an array of strings", v, err);
    size_t k = json_array_size(v);
    const char **s = malloc((k ? k : 1) * sizeof *s);
    if (!s)
        return ckv_errorf(err, CKV_ERR_NOMEM, "%s:%zu: out of memory", r->path, r->line);
    for (size_t i = 0; i < k; i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_string(e) || has_nul(e)) {
            free(s);
            if (json_is_string(e))
                return ckv_errorf(err, CKV_ERR_UNSUPPORTED, "%s:%zu: field '%s'[%zu] contains U+0000",
                                  r->path, r->line, field, i);
            return ckv_errorf(err, CKV_ERR_FORMAT, "%s:%zu: field '%s'[%zu]: expected string, got %s",
                              r->path, r->line, field, i, type_name(e));
        }
        s[i] = json_string_value(e);
    }
    *out = s;
    *n = k;
    return CKV_OK;
}

ckv_status ckv_jsonl_int(const ckv_jsonl *r, json_t *obj, const char *field, bool required,
                         int64_t *v, bool *present, ckv_error *err)
{
    json_t *x = json_object_get(obj, field);
    if (present)
        *present = false;
    if ((!x || json_is_null(x)) && !required)
        return CKV_OK;
    if (!x || !json_is_integer(x))
        return field_error(r, field, "an integer", x, err);
    *v = (int64_t)json_integer_value(x);
    if (present)
        *present = true;
    return CKV_OK;
}
