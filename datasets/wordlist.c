#include "wordlist.h"

#include <stdlib.h>
#include <string.h>

ckv_status ckv_words_push(ckv_words *l, const char *p, size_t len, ckv_error *err)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 32;
        ckv_word *nv = realloc(l->v, cap * sizeof *nv);
        if (!nv)
            return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory collecting tokens");
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = (ckv_word){p, len};
    return CKV_OK;
}

typedef struct {
    ckv_word s;
    size_t idx;
} keyed;

static int cmp_keyed(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    size_t n = x->s.len < y->s.len ? x->s.len : y->s.len;
    int c = n ? memcmp(x->s.p, y->s.p, n) : 0;
    if (c)
        return c;
    return (x->s.len > y->s.len) - (x->s.len < y->s.len);
}

ckv_status ckv_words_intern(const ckv_words *a, const ckv_words *b, int32_t **ida, int32_t **idb,
                         size_t *n_ids, ckv_error *err)
{
    size_t n = a->n + b->n;
    keyed *k = malloc((n ? n : 1) * sizeof *k);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!k || !ids) {
        free(k);
        free(ids);
        return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory interning %zu tokens", n);
    }
    for (size_t i = 0; i < a->n; i++)
        k[i] = (keyed){a->v[i], i};
    for (size_t i = 0; i < b->n; i++)
        k[a->n + i] = (keyed){b->v[i], a->n + i};
    qsort(k, n, sizeof *k, cmp_keyed);
    int32_t id = -1;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || cmp_keyed(&k[i - 1], &k[i]))
            id++;
        ids[k[i].idx] = id;
    }
    free(k);
    *ida = ids;
    *idb = ids + a->n;
    *n_ids = (size_t)(id + 1);
    return CKV_OK;
}
