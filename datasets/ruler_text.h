/* Text helpers shared by the RULER task generators (internal): a growable
 * buffer, Python str.format / str.replace equivalents, whitespace
 * normalisation and sentence splitting of the essay haystack. */
#ifndef CKV_RULER_TEXT_H
#define CKV_RULER_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

typedef struct {
    char *p;
    size_t len, cap;
    bool oom; /* sticky: set by the first failed allocation */
} rbuf;

void rbuf_put(rbuf *b, const char *s, size_t n);
void rbuf_puts(rbuf *b, const char *s);
void rbuf_printf(rbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rbuf_reset(rbuf *b);
void rbuf_free(rbuf *b);

/* Python `tmpl.format(**fields)` for templates whose only braces are
 * `{name}` fields. Appends to out. When a field named "context" is present,
 * *ctx_start / *ctx_end receive its byte span in out (may be NULL). */
ckv_status ruler_format(rbuf *out, const char *tmpl, const char *const *names,
                        const char *const *values, size_t n, size_t *ctx_start, size_t *ctx_end,
                        ckv_error *err);

/* Python `s.replace(from, to)`: every non-overlapping occurrence, left to
 * right. Returns a malloc'd string or NULL when out of memory. */
char *ruler_replace_all(const char *s, const char *from, const char *to);

/* Python `re.sub(r'\s+', ' ', s)` with Python's Unicode whitespace
 * (str.isspace) on UTF-8 text. Returns a malloc'd string, length in *len. */
char *ruler_collapse_space(const char *s, size_t n, size_t *len);

/* Sentence boundaries of space-separated text (single spaces, as produced
 * by ruler_collapse_space): writes the start offset of every sentence into
 * *starts (malloc'd) and returns their count; a rule-based stand-in for
 * NLTK's Punkt sent_tokenize (abbreviations, initials, ellipses). Returns
 * 0 with *starts NULL when out of memory or text is empty. */
size_t ruler_sentences(const char *text, size_t len, size_t **starts);

#endif
