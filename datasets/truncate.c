#include "truncate.h"

#include <stdlib.h>
#include <string.h>

#include "utf8.h"

/* Length of the maximal prefix of s[0..n) that could start a well-formed
 * sequence (Unicode's "maximal subpart"), at least 1; *complete tells
 * whether it is a whole character. */
static size_t subpart(const unsigned char *s, size_t n, bool *complete)
{
    unsigned char b = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF; /* range of the first continuation byte */
    *complete = false;
    if (b < 0x80) {
        *complete = true;
        return 1;
    } else if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        if (b == 0xE0)
            lo = 0xA0;
        if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        if (b == 0xF0)
            lo = 0x90;
        if (b == 0xF4)
            hi = 0x8F;
    } else {
        return 1;
    }
    size_t k = 1;
    for (; k <= need && k < n; k++) {
        unsigned char c = s[k];
        if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF))
            break;
    }
    *complete = k == need + 1;
    return k;
}

/* Appends ids decoded, skipping BOS (the only special token that can occur
 * when encoding without parse_special), with ill-formed UTF-8 replaced. */
static ckv_status append_decoded(const ckv_tokenizer *t, const int32_t *ids, size_t n, char *dst,
                                 size_t *dst_len, ckv_error *err)
{
    int32_t bos = ckv_token_bos(t);
    size_t skip = n && ids[0] == bos ? 1 : 0;
    char *txt;
    size_t tl;
    ckv_status st = ckv_detokenize(t, ids + skip, n - skip, &txt, &tl, err);
    if (st)
        return st;
    size_t k = *dst_len;
    for (size_t i = 0; i < tl;) {
        bool complete;
        size_t m = subpart((const unsigned char *)txt + i, tl - i, &complete);
        if (complete) {
            memcpy(dst + k, txt + i, m);
            k += m;
        } else {
            k += ckv_utf8_put(0xFFFD, dst + k);
        }
        i += m;
    }
    free(txt);
    *dst_len = k;
    return CKV_OK;
}

/* Bytes a decoded half can take: U+FFFD (3 bytes) replaces at least one byte. */
static size_t decoded_bound(const ckv_tokenizer *t, const int32_t *ids, size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        if (ckv_token_bytes(t, ids[i], &len))
            total += len;
    }
    return 3 * total;
}

ckv_status ckv_truncate_middle(const ckv_tokenizer *t, const char *text, size_t len,
                               int32_t max_length, char **out, size_t *out_len, bool *truncated,
                               ckv_error *err)
{
    if (max_length < 2)
        return ckv_errorf(err, CKV_ERR_ARG, "max length %d is too small to keep two halves",
                          (int)max_length);
    int32_t *ids;
    size_t n;
    ckv_status st = ckv_tokenize(t, text, len, true, false, &ids, &n, err);
    if (st)
        return st;
    *truncated = n > (size_t)max_length;
    if (!*truncated) {
        free(ids);
        *out = malloc(len + 1);
        if (!*out)
            return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory copying a prompt");
        memcpy(*out, text, len);
        (*out)[len] = 0;
        *out_len = len;
        return CKV_OK;
    }
    size_t half = (size_t)(max_length / 2);
    size_t cap = decoded_bound(t, ids, half) + decoded_bound(t, ids + n - half, half) + 1;
    char *o = malloc(cap);
    size_t k = 0;
    if (!o)
        st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory truncating a prompt");
    if (!st)
        st = append_decoded(t, ids, half, o, &k, err);
    if (!st)
        st = append_decoded(t, ids + n - half, half, o, &k, err);
    free(ids);
    if (st) {
        free(o);
        return st;
    }
    o[k] = 0;
    *out = o;
    *out_len = k;
    return CKV_OK;
}

ckv_status ckv_sample_truncate(const ckv_tokenizer *t, ckv_sample *s, int32_t max_length,
                               bool *truncated, ckv_error *err)
{
    char *p;
    size_t pl;
    ckv_status st = ckv_truncate_middle(t, s->prompt, s->prompt_len, max_length, &p, &pl,
                                        truncated, err);
    if (st)
        return st;
    size_t ql = s->prompt_len - s->context_len;
    bool keeps_question = pl >= ql && !memcmp(p + pl - ql, s->prompt + s->context_len, ql);
    s->context_len = keeps_question ? pl - ql : 0;
    free(s->prompt);
    s->prompt = p;
    s->prompt_len = pl;
    return CKV_OK;
}
