/* Open-addressing hash tables (linear probing, power-of-two capacity, load
 * <= 1/2) for hot lookups: byte strings -> int32 and uint64 -> uint64. Both
 * keep the first value put for a key. */
#ifndef CKV_HASHMAP_H
#define CKV_HASHMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Keys are not copied: they must outlive the map. */
typedef struct {
    const char *key; /* NULL = empty slot */
    uint32_t len;
    int32_t val;
} ckv_strmap_slot;

typedef struct {
    ckv_strmap_slot *slots;
    size_t mask;
} ckv_strmap;

/* Sized for n keys; false if out of memory. */
bool ckv_strmap_init(ckv_strmap *m, size_t n);
void ckv_strmap_free(ckv_strmap *m);
/* False if the key was already present (the old value is kept). */
bool ckv_strmap_put(ckv_strmap *m, const char *key, uint32_t len, int32_t val);
/* The value, or -1 if absent. */
int32_t ckv_strmap_get(const ckv_strmap *m, const char *key, size_t len);

typedef struct {
    uint64_t *keys; /* UINT64_MAX = empty slot (not a valid key) */
    uint64_t *vals;
    size_t mask;
} ckv_u64map;

bool ckv_u64map_init(ckv_u64map *m, size_t n);
void ckv_u64map_free(ckv_u64map *m);
bool ckv_u64map_put(ckv_u64map *m, uint64_t key, uint64_t val);
bool ckv_u64map_get(const ckv_u64map *m, uint64_t key, uint64_t *val);

#ifdef __cplusplus
}
#endif
#endif
