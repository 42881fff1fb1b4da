/* The KV cache of one sequence, laid out for compression from the start
 * (../shared/docs/policies.md, "Cache model"). Per (layer, KV head) an
 * ordered list of entries, each a post-RoPE key, a value and a degree n >= 1;
 * attention adds log(n) to the logits. Lengths may differ per (layer, head).
 *
 * Layout: entry t of (l, h) has its key at
 *   k[((l * n_head_kv + h) * capacity + t) * head_dim]
 * and likewise v; deg and score at [(l * n_head_kv + h) * capacity + t]. */
#ifndef CKV_CACHE_H
#define CKV_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int32_t n_layer;
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t capacity;  /* entries per (layer, head) */
    int32_t *len;      /* [n_layer * n_head_kv] current lengths */
    float *k;
    float *v;
    float *deg;
    float *score;      /* accumulated attention (H2O); NULL unless tracked */
    int64_t n_pos;     /* RoPE position of the next token = tokens seen so far */
    int32_t round;     /* CSM round counter, continued across compressions */
} ckv_cache;

ckv_status ckv_cache_init(ckv_cache *c, int32_t n_layer, int32_t n_head_kv, int32_t head_dim,
                          int32_t capacity, bool track_score, ckv_error *err);
void ckv_cache_free(ckv_cache *c);
/* Empties the cache (lengths 0, position 0, round 0); keeps the buffers. */
void ckv_cache_reset(ckv_cache *c);
/* Deep copy into dst, which is (re)allocated with the given capacity
 * (>= the longest list in src). */
ckv_status ckv_cache_fork(ckv_cache *dst, const ckv_cache *src, int32_t capacity, ckv_error *err);

static inline int32_t ckv_cache_lh(const ckv_cache *c, int32_t l, int32_t h)
{
    return l * c->n_head_kv + h;
}
static inline float *ckv_cache_key(const ckv_cache *c, int32_t l, int32_t h, int32_t t)
{
    return c->k + ((int64_t)ckv_cache_lh(c, l, h) * c->capacity + t) * c->head_dim;
}
static inline float *ckv_cache_val(const ckv_cache *c, int32_t l, int32_t h, int32_t t)
{
    return c->v + ((int64_t)ckv_cache_lh(c, l, h) * c->capacity + t) * c->head_dim;
}
static inline float *ckv_cache_degp(const ckv_cache *c, int32_t l, int32_t h)
{
    return c->deg + (int64_t)ckv_cache_lh(c, l, h) * c->capacity;
}
static inline float *ckv_cache_scorep(const ckv_cache *c, int32_t l, int32_t h)
{
    return c->score ? c->score + (int64_t)ckv_cache_lh(c, l, h) * c->capacity : 0;
}

/* How a GPU cache stores keys and values: fp32, as this host cache does
 * (exact against the CPU reference), or bf16, half the bytes (the format of
 * serving engines and of the SDPA and transformers peers): each key
 * and value rounded to the nearest bf16 once when written, all arithmetic
 * in fp32. Degrees and scores stay fp32 either way. */
typedef enum { CKV_KV_F32 = 0, CKV_KV_BF16 = 1 } ckv_kv_dtype;
/* "f32" or "bf16"; false for anything else. */
bool ckv_kv_dtype_parse(const char *s, ckv_kv_dtype *out);
const char *ckv_kv_dtype_name(ckv_kv_dtype d);
/* Bytes of one key or value element. */
static inline int32_t ckv_kv_dtype_size(ckv_kv_dtype d)
{
    return d == CKV_KV_BF16 ? 2 : 4;
}

/* Longest and total entry counts, for memory reports. */
int32_t ckv_cache_max_len(const ckv_cache *c);
int64_t ckv_cache_entries(const ckv_cache *c);

#ifdef __cplusplus
}
#endif
#endif
