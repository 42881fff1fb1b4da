#include "sample.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

void ckv_sample_free(ckv_sample *s)
{
    if (!s)
        return;
    free(s->task);
    free(s->id);
    free(s->prompt);
    for (size_t i = 0; i < s->n_answers; i++)
        free(s->answers[i]);
    free(s->answers);
    for (size_t i = 0; i < s->n_classes; i++)
        free(s->classes[i]);
    free(s->classes);
    memset(s, 0, sizeof *s);
}

ckv_status ckv_strings_dup(const char *const *src, size_t n, char ***dst, size_t *dst_n,
                           ckv_error *err)
{
    *dst = calloc(n ? n : 1, sizeof **dst);
    if (!*dst)
        return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory copying strings");
    *dst_n = n;
    for (size_t i = 0; i < n; i++)
        if (!((*dst)[i] = ckv_strndup(src[i], strlen(src[i]))))
            return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory copying strings");
    return CKV_OK;
}

void ckv_samples_free(ckv_sample *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        ckv_sample_free(&v[i]);
    free(v);
}

ckv_status ckv_samples_load(const char *path, ckv_import_fn fn, const void *ctx,
                            size_t max_samples, ckv_sample **out, size_t *n, ckv_error *err)
{
    *out = NULL;
    *n = 0;
    ckv_jsonl *r;
    ckv_status st = ckv_jsonl_open(path, &r, err);
    if (st)
        return st;
    ckv_sample *v = NULL;
    size_t k = 0, cap = 0;
    while (!max_samples || k < max_samples) {
        json_t *rec;
        if ((st = ckv_jsonl_next(r, &rec, err)) || !rec)
            break;
        if (k == cap) {
            cap = cap ? 2 * cap : 64;
            ckv_sample *nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                json_decref(rec);
                st = ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            v = nv;
        }
        st = fn(ctx, r, rec, &v[k], err);
        json_decref(rec);
        if (st)
            break;
        k++;
    }
    ckv_jsonl_close(r);
    if (!st && k == 0)
        st = ckv_errorf(err, CKV_ERR_FORMAT, "%s: no records", path);
    if (st) {
        ckv_samples_free(v, k);
        return st;
    }
    *out = v;
    *n = k;
    return CKV_OK;
}
