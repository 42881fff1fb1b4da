#include "utf8.h"

size_t ckv_utf8_next(const char *s, size_t n, uint32_t *cp)
{
    const uint8_t *p = (const uint8_t *)s;
    if (n == 0)
        return 0;
    uint8_t b = p[0];
    if (b < 0x80) {
        if (cp)
            *cp = b;
        return 1;
    }
    size_t len;
    uint32_t c, lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) {
        len = 2;
        c = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        c = b & 0x0F;
        if (b == 0xE0)
            lo = 0xA0; /* overlong */
        else if (b == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        c = b & 0x07;
        if (b == 0xF0)
            lo = 0x90; /* overlong */
        else if (b == 0xF4)
            hi = 0x8F; /* above U+10FFFF */
    } else {
        return 0;
    }
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    c = (c << 6) | (p[1] & 0x3F);
    for (size_t i = 2; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (p[i] & 0x3F);
    }
    if (cp)
        *cp = c;
    return len;
}

size_t ckv_utf8_valid_prefix(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if ((uint8_t)s[i] < 0x80) {
            i++;
            continue;
        }
        size_t l = ckv_utf8_next(s + i, n - i, NULL);
        if (!l)
            break;
        i += l;
    }
    return i;
}

size_t ckv_utf8_put(uint32_t cp, char *out)
{
    uint8_t *o = (uint8_t *)out;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}
