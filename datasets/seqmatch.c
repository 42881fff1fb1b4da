#include "seqmatch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pystr.h"

typedef struct {
    const int32_t *a, *b;
    size_t la, lb;
    /* b2j: positions of each code point in b, popular ones removed
     * (autojunk); stored as (code point, position) pairs sorted by both. */
    struct cp_pos {
        int32_t cp;
        int32_t pos;
    } *b2j;
    size_t n_b2j;
    int32_t *len_prev, *len_cur; /* j2len / newj2len, indexed by j + 1 */
    size_t *touched_prev, *touched_cur;
    size_t n_prev, n_cur;
} seqmatch;

static int cmp_cp_pos(const void *x, const void *y)
{
    const struct cp_pos *p = x, *q = y;
    if (p->cp != q->cp)
        return (p->cp > q->cp) - (p->cp < q->cp);
    return (p->pos > q->pos) - (p->pos < q->pos);
}

/* First b2j entry for code point c, or n_b2j. */
static size_t b2j_find(const seqmatch *m, int32_t c)
{
    size_t lo = 0, hi = m->n_b2j;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->b2j[mid].cp < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* find_longest_match(alo, ahi, blo, bhi) of Python 3.11's difflib with no
 * junk function: bjunk is empty, so only the popular-element pruning of
 * b2j applies, and matches are then extended over equal neighbours. */
static void longest_match(seqmatch *m, size_t alo, size_t ahi, size_t blo, size_t bhi,
                          size_t *bi, size_t *bj, size_t *bsize)
{
    size_t besti = alo, bestj = blo, bestsize = 0;
    m->n_prev = 0;
    for (size_t i = alo; i < ahi; i++) {
        m->n_cur = 0;
        for (size_t e = b2j_find(m, m->a[i]); e < m->n_b2j && m->b2j[e].cp == m->a[i]; e++) {
            size_t j = (size_t)m->b2j[e].pos;
            if (j < blo)
                continue;
            if (j >= bhi)
                break;
            size_t k = (size_t)m->len_prev[j] + 1; /* j2len[j - 1], offset by one */
            m->len_cur[j + 1] = (int32_t)k;
            m->touched_cur[m->n_cur++] = j + 1;
            if (k > bestsize) {
                besti = i + 1 - k;
                bestj = j + 1 - k;
                bestsize = k;
            }
        }
        for (size_t t = 0; t < m->n_prev; t++)
            m->len_prev[m->touched_prev[t]] = 0;
        int32_t *tl = m->len_prev;
        m->len_prev = m->len_cur;
        m->len_cur = tl;
        size_t *tt = m->touched_prev;
        m->touched_prev = m->touched_cur;
        m->touched_cur = tt;
        m->n_prev = m->n_cur;
    }
    for (size_t t = 0; t < m->n_prev; t++)
        m->len_prev[m->touched_prev[t]] = 0;
    while (besti > alo && bestj > blo && m->a[besti - 1] == m->b[bestj - 1]) {
        besti--;
        bestj--;
        bestsize++;
    }
    while (besti + bestsize < ahi && bestj + bestsize < bhi &&
           m->a[besti + bestsize] == m->b[bestj + bestsize])
        bestsize++;
    *bi = besti;
    *bj = bestj;
    *bsize = bestsize;
}

/* Sum of the sizes of get_matching_blocks(); the sum does not depend on the
 * order in which the sub-ranges are visited, so an explicit stack serves. */
static size_t matching_chars(seqmatch *m, size_t *stack)
{
    size_t sp = 0, total = 0;
    stack[sp++] = 0, stack[sp++] = m->la, stack[sp++] = 0, stack[sp++] = m->lb;
    while (sp) {
        size_t bhi = stack[--sp], blo = stack[--sp], ahi = stack[--sp], alo = stack[--sp];
        size_t i, j, k;
        longest_match(m, alo, ahi, blo, bhi, &i, &j, &k);
        if (!k)
            continue;
        total += k;
        if (alo < i && blo < j)
            stack[sp++] = alo, stack[sp++] = i, stack[sp++] = blo, stack[sp++] = j;
        if (i + k < ahi && j + k < bhi)
            stack[sp++] = i + k, stack[sp++] = ahi, stack[sp++] = j + k, stack[sp++] = bhi;
    }
    return total;
}

ckv_status ckv_fuzz_ratio(const char *s1, size_t n1, const char *s2, size_t n2, int *out,
                          ckv_error *err)
{
    if (n1 == n2 && !memcmp(s1, s2, n1)) {
        *out = 100;
        return CKV_OK;
    }
    if (!n1 || !n2) {
        *out = 0;
        return CKV_OK;
    }
    seqmatch m = {0};
    int32_t *a = NULL, *b = NULL;
    size_t la, lb, *stack = NULL;
    ckv_status st = ckv_utf8_decode(s1, n1, &a, &la, err);
    if (!st)
        st = ckv_utf8_decode(s2, n2, &b, &lb, err);
    if (st)
        goto done;
    m.a = a, m.b = b, m.la = la, m.lb = lb;
    m.b2j = malloc(lb * sizeof *m.b2j);
    m.len_prev = calloc(lb + 1, sizeof *m.len_prev);
    m.len_cur = calloc(lb + 1, sizeof *m.len_cur);
    m.touched_prev = malloc(lb * sizeof *m.touched_prev);
    m.touched_cur = malloc(lb * sizeof *m.touched_cur);
    /* Each popped range pushes at most two; the stack depth stays below
     * 4 * (number of matching blocks + 1) <= 4 * (la + 1). */
    stack = malloc(4 * (la + 2) * sizeof *stack);
    if (!m.b2j || !m.len_prev || !m.len_cur || !m.touched_prev || !m.touched_cur || !stack) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory for fuzz.ratio");
        goto done;
    }
    for (size_t j = 0; j < lb; j++)
        m.b2j[j] = (struct cp_pos){b[j], (int32_t)j};
    qsort(m.b2j, lb, sizeof *m.b2j, cmp_cp_pos);
    m.n_b2j = lb;
    if (lb >= 200) { /* autojunk: drop elements occurring more than n/100 + 1 times */
        size_t ntest = lb / 100 + 1, k = 0;
        for (size_t e = 0; e < lb;) {
            size_t f = e;
            while (f < lb && m.b2j[f].cp == m.b2j[e].cp)
                f++;
            if (f - e <= ntest)
                for (size_t t = e; t < f; t++)
                    m.b2j[k++] = m.b2j[t];
            e = f;
        }
        m.n_b2j = k;
    }
    size_t matches = matching_chars(&m, stack);
    double ratio = 2.0 * (double)matches / (double)(la + lb);
    *out = (int)nearbyint(100 * ratio); /* round() ties to even, as Python */
done:
    free(a);
    free(b);
    free(m.b2j);
    free(m.len_prev);
    free(m.len_cur);
    free(m.touched_prev);
    free(m.touched_cur);
    free(stack);
    return st;
}
