/* The wonderwords lists RULER draws NIAH keys and CWE words from. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ruler_gen.h"
#include "util.h"

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

ckv_status ruler_sorted_union(char **const *lists, const size_t *counts, size_t n_lists,
                              char ***out, size_t *n_out, ckv_error *err)
{
    size_t total = 0;
    for (size_t i = 0; i < n_lists; i++)
        total += counts[i];
    char **all = malloc((total ? total : 1) * sizeof *all);
    if (!all)
        return ckv_errorf(err, CKV_ERR_NOMEM, "word lists: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n_lists; i++)
        for (size_t j = 0; j < counts[i]; j++)
            all[k++] = lists[i][j];
    /* strcmp on UTF-8 orders by code point, as Python's sorted() does */
    qsort(all, total, sizeof *all, cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < total; i++)
        if (!u || strcmp(all[u - 1], all[i]))
            all[u++] = all[i];
    *out = all;
    *n_out = u;
    return CKV_OK;
}

/* Splits a word file into lines, right-stripping each like Python's
 * str.rstrip() (ASCII whitespace is all these files contain). */
static ckv_status read_list(const char *path, char **blob, char ***words, size_t *n,
                            ckv_error *err)
{
    size_t len;
    ckv_status st = ckv_read_file(path, blob, &len, err);
    if (st)
        return st;
    if (memchr(*blob, 0, len))
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: NUL byte in word list", path);
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += (*blob)[i] == '\n';
    char **w = malloc(lines * sizeof *w);
    if (!w)
        return ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
    size_t k = 0;
    char *p = *blob, *end = *blob + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *e = nl ? nl : end;
        char *t = e;
        while (t > p && (t[-1] == ' ' || t[-1] == '\t' || t[-1] == '\r' || t[-1] == '\f' ||
                         t[-1] == '\v'))
            t--;
        *t = 0;
        w[k++] = p;
        p = nl ? nl + 1 : end;
    }
    *words = w;
    *n = k;
    return CKV_OK;
}

ckv_status ruler_words_load(ruler_gen *g, ruler_words *w, ckv_error *err)
{
    static const char *const files[3] = {"adjectivelist.txt", "nounlist.txt", "verblist.txt"};
    memset(w, 0, sizeof *w);
    char ***dst[3] = {&w->adjs, &w->nouns, &w->verbs};
    size_t *cnt[3] = {&w->n_adjs, &w->n_nouns, &w->n_verbs};
    for (int i = 0; i < 3; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/ruler/wonderwords/%s", g->data_dir, files[i]);
        if (!ruler_file_exists(path))
            return ruler_skip_missing(g, path, "wonderwords word list");
        char **raw = NULL;
        size_t n = 0;
        ckv_status st = read_list(path, &w->blob[i], &raw, &n, err);
        if (!st) {
            char **const lists[1] = {raw};
            st = ruler_sorted_union(lists, &n, 1, dst[i], cnt[i], err);
            free(raw);
        }
        if (st)
            return st;
        if (*cnt[i] < 2)
            return ckv_errorf(err, CKV_ERR_FORMAT, "%s: fewer than 2 distinct words", path);
    }
    return CKV_OK;
}

void ruler_words_free(ruler_words *w)
{
    free(w->adjs);
    free(w->nouns);
    free(w->verbs);
    for (int i = 0; i < 3; i++)
        free(w->blob[i]);
    memset(w, 0, sizeof *w);
}
