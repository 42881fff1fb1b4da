/* Word lists (spans of text) and their interning to integer ids, as the
 * scorers compare tokens: Python compares str by code points, which for
 * valid UTF-8 is byte equality. */
#ifndef CKV_WORDLIST_H
#define CKV_WORDLIST_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *p;
    size_t len;
} ckv_word;

/* A growable list; zero-initialise, release v with free(). */
typedef struct {
    ckv_word *v;
    size_t n, cap;
} ckv_words;

ckv_status ckv_words_push(ckv_words *l, const char *p, size_t len, ckv_error *err);

/* Gives equal words of a and b equal ids in [0, *n_ids). *ida is malloc'd
 * and holds both arrays (*idb points into it): free(*ida) only. */
ckv_status ckv_words_intern(const ckv_words *a, const ckv_words *b, int32_t **ida, int32_t **idb,
                            size_t *n_ids, ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
