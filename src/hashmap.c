#include "hashmap.h"

#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

static size_t capacity_for(size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    return cap;
}

bool ckv_strmap_init(ckv_strmap *m, size_t n)
{
    size_t cap = capacity_for(n);
    m->slots = calloc(cap, sizeof *m->slots);
    m->mask = cap - 1;
    return m->slots != NULL;
}

void ckv_strmap_free(ckv_strmap *m)
{
    free(m->slots);
    m->slots = NULL;
}

bool ckv_strmap_put(ckv_strmap *m, const char *key, uint32_t len, int32_t val)
{
    for (size_t i = (size_t)XXH3_64bits(key, len) & m->mask;; i = (i + 1) & m->mask) {
        ckv_strmap_slot *s = &m->slots[i];
        if (!s->key) {
            s->key = key;
            s->len = len;
            s->val = val;
            return true;
        }
        if (s->len == len && !memcmp(s->key, key, len))
            return false;
    }
}

int32_t ckv_strmap_get(const ckv_strmap *m, const char *key, size_t len)
{
    for (size_t i = (size_t)XXH3_64bits(key, len) & m->mask;; i = (i + 1) & m->mask) {
        const ckv_strmap_slot *s = &m->slots[i];
        if (!s->key)
            return -1;
        if (s->len == len && !memcmp(s->key, key, len))
            return s->val;
    }
}

/* Fibonacci hashing: the high bits of key * 2^64/phi are well mixed. */
static size_t u64_slot(const ckv_u64map *m, uint64_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & m->mask;
}

bool ckv_u64map_init(ckv_u64map *m, size_t n)
{
    size_t cap = capacity_for(n);
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    m->mask = cap - 1;
    if (!m->keys || !m->vals) {
        ckv_u64map_free(m);
        return false;
    }
    memset(m->keys, 0xFF, cap * sizeof *m->keys);
    return true;
}

void ckv_u64map_free(ckv_u64map *m)
{
    free(m->keys);
    free(m->vals);
    m->keys = m->vals = NULL;
}

bool ckv_u64map_put(ckv_u64map *m, uint64_t key, uint64_t val)
{
    for (size_t i = u64_slot(m, key);; i = (i + 1) & m->mask) {
        if (m->keys[i] == UINT64_MAX) {
            m->keys[i] = key;
            m->vals[i] = val;
            return true;
        }
        if (m->keys[i] == key)
            return false;
    }
}

bool ckv_u64map_get(const ckv_u64map *m, uint64_t key, uint64_t *val)
{
    for (size_t i = u64_slot(m, key);; i = (i + 1) & m->mask) {
        if (m->keys[i] == key) {
            *val = m->vals[i];
            return true;
        }
        if (m->keys[i] == UINT64_MAX)
            return false;
    }
}
