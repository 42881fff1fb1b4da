/* What the GPU test programs share (they run where Criterion is not): an
 * allocation that cannot fail quietly and CHECK, which exits 1 with the
 * failing call's place and message. Define GPU_TEST_NAME, the program's name
 * in messages, before including. */
#ifndef CKV_TESTS_GPU_TEST_H
#define CKV_TESTS_GPU_TEST_H

#include <stdio.h>
#include <stdlib.h>

#include "status.h"

static inline void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "%s: out of host memory\n", GPU_TEST_NAME);
        exit(1);
    }
    return p;
}

#define CHECK(call)                                                                   \
    do {                                                                              \
        ckv_error e_ = {0};                                                           \
        ckv_error *err = &e_;                                                         \
        if ((call) != CKV_OK) {                                                       \
            fprintf(stderr, "%s: %s:%d: %s\n", GPU_TEST_NAME, __FILE__, __LINE__, e_.msg); \
            exit(1);                                                                  \
        }                                                                             \
        (void)err;                                                                    \
    } while (0)

#endif
