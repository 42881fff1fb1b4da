#include "pystr.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "utf8.h"

ckv_status ckv_utf8_check(const char *s, size_t len, const char *what, ckv_error *err)
{
    size_t ok = ckv_utf8_valid_prefix(s, len);
    if (ok < len)
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: invalid UTF-8 at byte %zu", what, ok);
    return CKV_OK;
}

/* Next code point of valid UTF-8; returns its byte length. */
static size_t next_cp(const char *s, size_t len, size_t i, int32_t *cp)
{
    utf8proc_ssize_t k =
        utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), cp);
    if (k <= 0) { /* invalid byte: step over it as a non-space, non-letter */
        *cp = -1;
        return 1;
    }
    return (size_t)k;
}

ckv_status ckv_utf8_decode(const char *s, size_t len, int32_t **cps, size_t *n, ckv_error *err)
{
    int32_t *v = malloc((len + 1) * sizeof *v);
    if (!v)
        return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory decoding %zu bytes", len);
    size_t k = 0;
    for (size_t i = 0; i < len;)
        i += next_cp(s, len, i, &v[k++]);
    *cps = v;
    *n = k;
    return CKV_OK;
}

bool ckv_py_isspace(int32_t cp)
{
    if (cp < 0)
        return false;
    const utf8proc_property_t *p = utf8proc_get_property(cp);
    return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
           p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

ckv_status ckv_py_lower(const char *s, size_t len, char **out, size_t *out_len, ckv_error *err)
{
    /* Lower-casing changes a code point's UTF-8 length by at most a factor
     * of 3/2 (e.g. U+0130, 2 bytes -> 3 bytes; U+023A, 2 -> 3). */
    size_t cap = 2 * len + 4;
    char *o = malloc(cap);
    if (!o)
        return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory lower-casing %zu bytes", len);
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        int32_t cp;
        size_t step = next_cp(s, len, i, &cp);
        if (cp < 0) {
            o[k++] = s[i];
        } else if (cp == 0x130) {
            o[k++] = 'i';
            k += (size_t)utf8proc_encode_char(0x307, (utf8proc_uint8_t *)o + k);
        } else {
            k += (size_t)utf8proc_encode_char(utf8proc_tolower(cp), (utf8proc_uint8_t *)o + k);
        }
        i += step;
    }
    o[k] = 0;
    *out = o;
    *out_len = k;
    return CKV_OK;
}

ckv_status ckv_py_split(const char *s, size_t len, ckv_span **spans, size_t *n, ckv_error *err)
{
    ckv_span *v = NULL;
    size_t k = 0, cap = 0;
    size_t i = 0;
    while (i < len) {
        int32_t cp;
        size_t step = next_cp(s, len, i, &cp);
        if (ckv_py_isspace(cp)) {
            i += step;
            continue;
        }
        size_t start = i;
        while (i < len) {
            step = next_cp(s, len, i, &cp);
            if (ckv_py_isspace(cp))
                break;
            i += step;
        }
        if (k == cap) {
            cap = cap ? 2 * cap : 16;
            ckv_span *nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                free(v);
                return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory splitting %zu bytes", len);
            }
            v = nv;
        }
        v[k++] = (ckv_span){start, i - start};
    }
    *spans = v;
    *n = k;
    return CKV_OK;
}

ckv_span ckv_py_strip(const char *s, size_t len)
{
    size_t a = 0, b = len;
    while (a < b) {
        int32_t cp;
        size_t step = next_cp(s, len, a, &cp);
        if (!ckv_py_isspace(cp))
            break;
        a += step;
    }
    while (b > a) {
        /* Back up to the start of the last code point. */
        size_t p = b - 1;
        while (p > a && ((unsigned char)s[p] & 0xC0) == 0x80)
            p--;
        int32_t cp;
        next_cp(s, len, p, &cp);
        if (!ckv_py_isspace(cp))
            break;
        b = p;
    }
    return (ckv_span){a, b - a};
}
