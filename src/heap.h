/* A binary heap of fixed-size items in the order a caller's `before` gives:
 * the item before every other comes out first. Both BPE merge loops
 * (tokenizer_bpe.c, tokenizer_spm.c) queue their candidate pairs in one. */
#ifndef CKV_HEAP_H
#define CKV_HEAP_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

typedef struct {
    unsigned char *items;
    size_t n, cap, size; /* size: bytes an item */
    bool (*before)(const void *a, const void *b);
} ckv_heap;

/* An empty heap of items of `size` bytes; nothing is allocated yet. */
void ckv_heap_init(ckv_heap *h, size_t size, bool (*before)(const void *a, const void *b));
/* Adds a copy of *item (the storage doubles as needed; CKV_ERR_NOMEM with
 * err set when it cannot). */
ckv_status ckv_heap_push(ckv_heap *h, const void *item, ckv_error *err);
/* Removes the first item into *out; the heap must not be empty. */
void ckv_heap_pop(ckv_heap *h, void *out);
void ckv_heap_free(ckv_heap *h);

#endif
