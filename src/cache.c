#include "cache.h"

#include <stdlib.h>
#include <string.h>

ckv_status ckv_cache_init(ckv_cache *c, int32_t n_layer, int32_t n_head_kv, int32_t head_dim,
                          int32_t capacity, bool track_score, ckv_error *err)
{
    memset(c, 0, sizeof *c);
    if (n_layer <= 0 || n_head_kv <= 0 || head_dim <= 0 || capacity <= 0)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "cache: invalid shape layers=%d kv_heads=%d head_dim=%d capacity=%d",
                          n_layer, n_head_kv, head_dim, capacity);
    size_t lists = (size_t)n_layer * (size_t)n_head_kv;
    size_t entries = lists * (size_t)capacity;
    c->n_layer = n_layer;
    c->n_head_kv = n_head_kv;
    c->head_dim = head_dim;
    c->capacity = capacity;
    c->len = calloc(lists, sizeof *c->len);
    c->k = malloc(entries * (size_t)head_dim * sizeof *c->k);
    c->v = malloc(entries * (size_t)head_dim * sizeof *c->v);
    c->deg = malloc(entries * sizeof *c->deg);
    c->score = track_score ? calloc(entries, sizeof *c->score) : NULL;
    if (!c->len || !c->k || !c->v || !c->deg || (track_score && !c->score)) {
        ckv_cache_free(c);
        return ckv_errorf(err, CKV_ERR_NOMEM, "cache: out of memory for %zu entries of dim %d",
                          entries, head_dim);
    }
    return CKV_OK;
}

void ckv_cache_free(ckv_cache *c)
{
    free(c->len);
    free(c->k);
    free(c->v);
    free(c->deg);
    free(c->score);
    memset(c, 0, sizeof *c);
}

void ckv_cache_reset(ckv_cache *c)
{
    memset(c->len, 0, (size_t)c->n_layer * (size_t)c->n_head_kv * sizeof *c->len);
    c->n_pos = 0;
    c->round = 0;
}

int32_t ckv_cache_max_len(const ckv_cache *c)
{
    int32_t m = 0;
    for (int32_t i = 0; i < c->n_layer * c->n_head_kv; i++)
        if (c->len[i] > m)
            m = c->len[i];
    return m;
}

int64_t ckv_cache_entries(const ckv_cache *c)
{
    int64_t s = 0;
    for (int32_t i = 0; i < c->n_layer * c->n_head_kv; i++)
        s += c->len[i];
    return s;
}

ckv_status ckv_cache_fork(ckv_cache *dst, const ckv_cache *src, int32_t capacity, ckv_error *err)
{
    if (capacity < ckv_cache_max_len(src))
        return ckv_errorf(err, CKV_ERR_ARG, "cache fork: capacity %d < longest list %d", capacity,
                          ckv_cache_max_len(src));
    ckv_status st = ckv_cache_init(dst, src->n_layer, src->n_head_kv, src->head_dim, capacity,
                                   src->score != NULL, err);
    if (st)
        return st;
    size_t hd = (size_t)src->head_dim;
    for (int32_t i = 0; i < src->n_layer * src->n_head_kv; i++) {
        size_t n = (size_t)src->len[i];
        size_t so = (size_t)i * (size_t)src->capacity, d = (size_t)i * (size_t)capacity;
        memcpy(dst->k + d * hd, src->k + so * hd, n * hd * sizeof(float));
        memcpy(dst->v + d * hd, src->v + so * hd, n * hd * sizeof(float));
        memcpy(dst->deg + d, src->deg + so, n * sizeof(float));
        if (src->score)
            memcpy(dst->score + d, src->score + so, n * sizeof(float));
        dst->len[i] = src->len[i];
    }
    dst->n_pos = src->n_pos;
    dst->round = src->round;
    dst->dtype = src->dtype;
    return CKV_OK;
}

bool ckv_kv_dtype_parse(const char *s, ckv_kv_dtype *out)
{
    if (!strcmp(s, "f32"))
        *out = CKV_KV_F32;
    else if (!strcmp(s, "bf16"))
        *out = CKV_KV_BF16;
    else
        return false;
    return true;
}

const char *ckv_kv_dtype_name(ckv_kv_dtype d)
{
    return d == CKV_KV_BF16 ? "bf16" : "f32";
}

void ckv_cache_set_dtype(ckv_cache *c, ckv_kv_dtype d)
{
    c->dtype = d;
    for (int32_t l = 0; l < c->n_layer; l++)
        for (int32_t h = 0; h < c->n_head_kv; h++) {
            const int64_t n = (int64_t)c->len[ckv_cache_lh(c, l, h)] * c->head_dim;
            float *k = ckv_cache_key(c, l, h, 0), *v = ckv_cache_val(c, l, h, 0);
            for (int64_t i = 0; i < n; i++) {
                k[i] = ckv_cache_store(c, k[i]);
                v[i] = ckv_cache_store(c, v[i]);
            }
        }
}
