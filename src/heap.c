#include "heap.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static void *at(const ckv_heap *h, size_t i)
{
    return h->items + i * h->size;
}

void ckv_heap_init(ckv_heap *h, size_t size, bool (*before)(const void *a, const void *b))
{
    *h = (ckv_heap){.size = size, .before = before};
}

ckv_status ckv_heap_push(ckv_heap *h, const void *item, ckv_error *err)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        unsigned char *p = realloc(h->items, cap * h->size);
        if (!p)
            return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory for a heap of %zu items", cap);
        h->items = p;
        h->cap = cap;
    }
    /* The hole moves up past every parent the item comes before. */
    size_t i = h->n++;
    while (i > 0 && h->before(item, at(h, (i - 1) / 2))) {
        memcpy(at(h, i), at(h, (i - 1) / 2), h->size);
        i = (i - 1) / 2;
    }
    memcpy(at(h, i), item, h->size);
    return CKV_OK;
}

void ckv_heap_pop(ckv_heap *h, void *out)
{
    assert(h->n > 0);
    memcpy(out, at(h, 0), h->size);
    /* The last item stays in its slot, past the heap, while the hole at the
     * root moves down past every child that comes before it; it then fills
     * the hole. */
    const size_t n = --h->n;
    const void *last = at(h, n);
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && h->before(at(h, c + 1), at(h, c)))
            c++;
        if (!h->before(at(h, c), last))
            break;
        memcpy(at(h, i), at(h, c), h->size);
        i = c;
    }
    if (n)
        memcpy(at(h, i), last, h->size);
}

void ckv_heap_free(ckv_heap *h)
{
    free(h->items);
    h->items = NULL;
    h->n = h->cap = 0;
}
