/* Strict UTF-8 decoding (RFC 3629): overlong forms, surrogates and code
 * points above U+10FFFF are invalid, exactly as PCRE2's UTF check sees them. */
#ifndef CKV_UTF8_H
#define CKV_UTF8_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Length (1-4) of the well-formed sequence starting at s[0] within n bytes,
 * storing its code point in *cp (if non-NULL); 0 if s[0] does not start one. */
size_t ckv_utf8_next(const char *s, size_t n, uint32_t *cp);

/* Length of the longest prefix of s[0..n) that is well-formed UTF-8. */
size_t ckv_utf8_valid_prefix(const char *s, size_t n);

/* Writes cp (<= U+10FFFF) as UTF-8 to out (room for 4) and returns its length. */
size_t ckv_utf8_put(uint32_t cp, char *out);

#ifdef __cplusplus
}
#endif
#endif
