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

#include "quant.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a cache stores keys and values: fp32 (exact against the CPU
 * reference), or bf16, half the bytes on the GPU (the format of serving
 * engines and of the SDPA and transformers peers): each key and
 * value rounded to the nearest bf16 once when written, all arithmetic in
 * fp32. Degrees and scores stay fp32 either way. A host cache keeps fp32
 * floats and, when bf16, holds only bf16-exact ones (ckv_cache_store), so
 * that it is the CPU twin of a bf16 GPU cache. */
typedef enum { CKV_KV_F32 = 0, CKV_KV_BF16 = 1 } ckv_kv_dtype;

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
    ckv_kv_dtype dtype; /* F32 from ckv_cache_init; set by the owner (ckv_cache_set_dtype
                           converts a filled cache), ckv_cache_fork, ckv_gpu_cache_download */
} ckv_cache;

ckv_status ckv_cache_init(ckv_cache *c, int32_t n_layer, int32_t n_head_kv, int32_t head_dim,
                          int32_t capacity, bool track_score, ckv_error *err);
void ckv_cache_free(ckv_cache *c);
/* Empties the cache (lengths 0, position 0, round 0); keeps the buffers. */
void ckv_cache_reset(ckv_cache *c);
/* Deep copy into dst, which is (re)allocated with the given capacity
 * (>= the longest list in src), dtype included. */
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

/* The value a key or value element x is stored as in cache c: x itself
 * (F32) or x rounded to the nearest bf16, ties to even (BF16, as the GPU's
 * stores). Every writer of new keys and values goes through it. */
static inline float ckv_cache_store(const ckv_cache *c, float x)
{
    return c->dtype == CKV_KV_BF16 ? ckv_bf16_to_f32(ckv_f32_to_bf16(x)) : x;
}

/* Makes c a cache of type d: a bf16 one gets every key and value it holds
 * rounded (ckv_cache_store); an fp32 one keeps them as they are. */
void ckv_cache_set_dtype(ckv_cache *c, ckv_kv_dtype d);

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
