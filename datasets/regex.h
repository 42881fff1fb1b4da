/* Python re.findall on UTF-8 text through PCRE2, with Unicode semantics
 * like Python's str patterns (PCRE2_UTF | PCRE2_UCP: \d, \w and \b are
 * Unicode-aware). Input must be valid UTF-8. */
#ifndef CKV_REGEX_H
#define CKV_REGEX_H

#include <stddef.h>
#include <stdint.h>

#include "pystr.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Spans of capture group `group` (0: the whole match) of every
 * non-overlapping match, left to right. extra_opts are added PCRE2 compile
 * options (e.g. PCRE2_DOTALL). *spans is malloc'd (NULL when *n == 0). */
ckv_status ckv_re_findall(const char *pattern, uint32_t extra_opts, int group, const char *s,
                          size_t len, ckv_span **spans, size_t *n, ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
