#include "regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>

ckv_status ckv_re_findall(const char *pattern, uint32_t extra_opts, int group, const char *s,
                          size_t len, ckv_span **spans, size_t *n, ckv_error *err)
{
    *spans = NULL;
    *n = 0;
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | extra_opts, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return ckv_errorf(err, CKV_ERR_ARG, "regex '%s' at offset %zu: %s", pattern, (size_t)eo,
                          (char *)msg);
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) {
        pcre2_code_free(re);
        return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory for regex match data");
    }
    ckv_status st = CKV_OK;
    size_t at = 0, cap = 0;
    while (at <= len) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, len, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            st = ckv_errorf(err, CKV_ERR_ARG, "regex '%s': match failed (%d)", pattern, rc);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            ckv_span *nv = realloc(*spans, cap * sizeof *nv);
            if (!nv) {
                st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory collecting regex matches");
                break;
            }
            *spans = nv;
        }
        (*spans)[(*n)++] = (ckv_span){ov[2 * group], ov[2 * group + 1] - ov[2 * group]};
        if (ov[1] > ov[0]) {
            at = ov[1];
        } else { /* empty match: step one code point, as Python does */
            at = ov[1] + 1;
            while (at < len && ((unsigned char)s[at] & 0xC0) == 0x80)
                at++;
        }
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    if (st) {
        free(*spans);
        *spans = NULL;
        *n = 0;
    }
    return st;
}
