/* difflib.SequenceMatcher(None, a, b).ratio() of CPython 3.11 on code
 * points, autojunk included, as fuzzywuzzy's fuzz.ratio uses it. */
#ifndef CKV_SEQMATCH_H
#define CKV_SEQMATCH_H

#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* fuzzywuzzy 0.18 fuzz.ratio without python-Levenshtein (LongBench's
 * requirements do not install it): 100 for equal strings, 0 if either is
 * empty, else int(round(100 * SequenceMatcher(None, s1, s2).ratio())). */
ckv_status ckv_fuzz_ratio(const char *s1, size_t n1, const char *s2, size_t n2, int *out,
                          ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
