/* A binary heap of fixed-size items in the order a caller's `before` gives:
 * the item before every other comes out first. Both BPE merge loops
 * (tokenizer_bpe.c, tokenizer_spm.c) queue their candidate pairs in one.
 *
 * The functions are static inline and take the item size and `before` at
 * each call, so that every call site compiles to a heap of its own type with
 * the comparison inlined: through a stored function pointer and a runtime
 * size, tokenizing the RULER essays took 1.30x as long (farm-bench,
 * `ckv tokenize` of 2 MB). Callers pass the same size and `before` to every
 * call on one heap. */
#ifndef CKV_HEAP_H
#define CKV_HEAP_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

typedef struct {
    unsigned char *items;
    size_t n, cap;
} ckv_heap;

typedef bool (*ckv_heap_before)(const void *a, const void *b);

static inline void *ckv_heap_at(const ckv_heap *h, size_t size, size_t i)
{
    return h->items + i * size;
}

/* Adds a copy of *item (the storage doubles as needed; CKV_ERR_NOMEM with
 * err set when it cannot). */
static inline ckv_status ckv_heap_push(ckv_heap *h, const void *item, size_t size,
                                       ckv_heap_before before, ckv_error *err)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        unsigned char *p = realloc(h->items, cap * size);
        if (!p)
            return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory for a heap of %zu items", cap);
        h->items = p;
        h->cap = cap;
    }
    /* The hole moves up past every parent the item comes before. */
    size_t i = h->n++;
    while (i > 0 && before(item, ckv_heap_at(h, size, (i - 1) / 2))) {
        memcpy(ckv_heap_at(h, size, i), ckv_heap_at(h, size, (i - 1) / 2), size);
        i = (i - 1) / 2;
    }
    memcpy(ckv_heap_at(h, size, i), item, size);
    return CKV_OK;
}

/* Removes the first item into *out; the heap must not be empty. */
static inline void ckv_heap_pop(ckv_heap *h, void *out, size_t size, ckv_heap_before before)
{
    assert(h->n > 0);
    memcpy(out, ckv_heap_at(h, size, 0), size);
    /* The last item stays in its slot, past the heap, while the hole at the
     * root moves down past every child that comes before it; it then fills
     * the hole. */
    const size_t n = --h->n;
    const void *last = ckv_heap_at(h, size, n);
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && before(ckv_heap_at(h, size, c + 1), ckv_heap_at(h, size, c)))
            c++;
        if (!before(ckv_heap_at(h, size, c), last))
            break;
        memcpy(ckv_heap_at(h, size, i), ckv_heap_at(h, size, c), size);
        i = c;
    }
    if (n)
        memcpy(ckv_heap_at(h, size, i), last, size);
}

static inline void ckv_heap_free(ckv_heap *h)
{
    free(h->items);
    *h = (ckv_heap){0};
}

#endif
