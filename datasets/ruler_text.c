#include "ruler_text.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool rbuf_reserve(rbuf *b, size_t extra)
{
    if (b->oom)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void rbuf_put(rbuf *b, const char *s, size_t n)
{
    if (!rbuf_reserve(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void rbuf_puts(rbuf *b, const char *s)
{
    rbuf_put(b, s, strlen(s));
}

void rbuf_printf(rbuf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        rbuf_put(b, small, (size_t)n);
        return;
    }
    if (!rbuf_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void rbuf_reset(rbuf *b)
{
    b->len = 0;
    b->oom = false;
    if (b->p)
        b->p[0] = 0;
}

void rbuf_free(rbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

ckv_status ruler_format(rbuf *out, const char *tmpl, const char *const *names,
                        const char *const *values, size_t n, size_t *ctx_start, size_t *ctx_end,
                        ckv_error *err)
{
    const char *p = tmpl;
    while (*p) {
        const char *open = strchr(p, '{');
        if (!open) {
            rbuf_puts(out, p);
            break;
        }
        rbuf_put(out, p, (size_t)(open - p));
        const char *close = strchr(open, '}');
        if (!close)
            return ckv_errorf(err, CKV_ERR_FORMAT, "template: unmatched '{' in \"%.60s\"", open);
        size_t nl = (size_t)(close - open - 1);
        size_t i = 0;
        while (i < n && (strlen(names[i]) != nl || memcmp(names[i], open + 1, nl)))
            i++;
        if (i == n)
            return ckv_errorf(err, CKV_ERR_FORMAT, "template: unknown field {%.*s}", (int)nl,
                              open + 1);
        bool is_ctx = !strcmp(names[i], "context");
        if (is_ctx && ctx_start)
            *ctx_start = out->len;
        rbuf_puts(out, values[i]);
        if (is_ctx && ctx_end)
            *ctx_end = out->len;
        p = close + 1;
    }
    if (out->oom)
        return ckv_errorf(err, CKV_ERR_NOMEM, "template: out of memory formatting prompt");
    return CKV_OK;
}

char *ruler_replace_all(const char *s, const char *from, const char *to)
{
    rbuf b = {0};
    size_t fl = strlen(from);
    const char *p = s;
    for (const char *q; fl && (q = strstr(p, from)); p = q + fl) {
        rbuf_put(&b, p, (size_t)(q - p));
        rbuf_puts(&b, to);
    }
    rbuf_puts(&b, p);
    if (b.oom) {
        rbuf_free(&b);
        return NULL;
    }
    return b.p;
}

/* Length of the Python-whitespace character at s (0 if none). */
static size_t space_len(const unsigned char *s, size_t n)
{
    if (s[0] == ' ' || (s[0] >= 0x09 && s[0] <= 0x0d) || (s[0] >= 0x1c && s[0] <= 0x1f))
        return 1;
    if (n >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0))
        return 2;
    if (n >= 3 && s[0] == 0xe1 && s[1] == 0x9a && s[2] == 0x80)
        return 3; /* U+1680 */
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x80 &&
        ((s[2] >= 0x80 && s[2] <= 0x8a) || s[2] == 0xa8 || s[2] == 0xa9 || s[2] == 0xaf))
        return 3; /* U+2000..200A, 2028, 2029, 202F */
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x81 && s[2] == 0x9f)
        return 3; /* U+205F */
    if (n >= 3 && s[0] == 0xe3 && s[1] == 0x80 && s[2] == 0x80)
        return 3; /* U+3000 */
    return 0;
}

char *ruler_collapse_space(const char *s, size_t n, size_t *len)
{
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = space_len(u + i, n - i);
        if (!k) {
            out[o++] = s[i++];
            continue;
        }
        out[o++] = ' ';
        while (i < n && (k = space_len(u + i, n - i)))
            i += k;
    }
    out[o] = 0;
    *len = o;
    return out;
}

/* Words that end in a period without ending a sentence (lower case, no
 * final period), after Punkt's English abbreviation list. */
static const char *const abbrevs[] = {
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "inc",
    "ltd", "co", "corp", "no", "vol", "fig", "u.s", "u.k", "a.m", "p.m", "jan", "feb",
    "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "approx", "cf",
    "al", "ed", "eds", "gen", "gov", "rev", "mt", "ft", "p.s", "ph.d", "d.c",
};

static bool is_closer(unsigned char c)
{
    return c == '"' || c == '\'' || c == ')' || c == ']' || c == '}';
}

/* Whether the word text[a, b) (no spaces) ends a sentence, given the
 * first byte of the following word. */
static bool ends_sentence(const char *text, size_t a, size_t b, unsigned char next)
{
    size_t e = b;
    for (;;) {
        if (e > a && is_closer((unsigned char)text[e - 1])) {
            e--;
        } else if (e >= a + 3 && (unsigned char)text[e - 3] == 0xe2 &&
                   (unsigned char)text[e - 2] == 0x80 &&
                   ((unsigned char)text[e - 1] == 0x99 || (unsigned char)text[e - 1] == 0x9d)) {
            e -= 3; /* closing curly quote */
        } else {
            break;
        }
    }
    if (e == a)
        return false;
    char last = text[e - 1];
    if (last == '?' || last == '!')
        return !islower(next);
    if (last != '.')
        return false;
    if (e >= a + 2 && text[e - 2] == '.') /* ellipsis */
        return !islower(next);
    /* the word before its final period, without leading openers */
    size_t s = a;
    while (s < e - 1 && (text[s] == '(' || text[s] == '"' || text[s] == '\'' || text[s] == '['))
        s++;
    size_t wl = e - 1 - s;
    if (wl == 0)
        return false;
    char w[16];
    if (wl < sizeof w) {
        for (size_t i = 0; i < wl; i++)
            w[i] = (char)tolower((unsigned char)text[s + i]);
        w[wl] = 0;
        for (size_t i = 0; i < sizeof abbrevs / sizeof abbrevs[0]; i++)
            if (!strcmp(w, abbrevs[i]))
                return false;
    }
    /* initials ("J. Smith") and ordinals ("3. item") continue before a
     * lower-case word, as Punkt's orthographic heuristic decides */
    bool initial = wl == 1 && isalpha((unsigned char)text[s]);
    bool number = true;
    for (size_t i = s; i < e - 1; i++)
        number = number && (isdigit((unsigned char)text[i]) || text[i] == ',');
    if ((initial || number) && islower(next))
        return false;
    return true;
}

size_t ruler_sentences(const char *text, size_t len, size_t **starts)
{
    *starts = NULL;
    if (!len)
        return 0;
    size_t cap = 64, n = 0;
    size_t *st = malloc(cap * sizeof *st);
    if (!st)
        return 0;
    st[n++] = 0;
    size_t a = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] != ' ')
            continue;
        if (i + 1 < len && i > a && ends_sentence(text, a, i, (unsigned char)text[i + 1])) {
            if (n == cap) {
                size_t *ns = realloc(st, 2 * cap * sizeof *st);
                if (!ns) {
                    free(st);
                    return 0;
                }
                st = ns;
                cap *= 2;
            }
            st[n++] = i + 1;
        }
        a = i + 1;
    }
    *starts = st;
    return n;
}
