#include "rouge.h"

#include <stdlib.h>
#include <string.h>

#include "pystr.h"
#include "wordlist.h"

typedef struct {
    ckv_words words;  /* all words, sentence after sentence */
    size_t *start;   /* first word of each sentence */
    size_t n_sent;
} sentences;

static ckv_status split_sentences(const char *s, sentences *out, ckv_error *err)
{
    size_t len = strlen(s), cap = 0;
    ckv_status st = CKV_OK;
    *out = (sentences){0};
    for (size_t a = 0; a <= len && !st;) {
        const char *dot = memchr(s + a, '.', len - a);
        size_t b = dot ? (size_t)(dot - s) : len;
        if (b > a) {
            if (out->n_sent == cap) {
                cap = cap ? 2 * cap : 16;
                size_t *ns = realloc(out->start, (cap + 1) * sizeof *ns);
                if (!ns)
                    return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory splitting sentences");
                out->start = ns;
            }
            out->start[out->n_sent++] = out->words.n;
            ckv_span *sp;
            size_t n;
            if ((st = ckv_py_split(s + a, b - a, &sp, &n, err)))
                break;
            for (size_t i = 0; i < n && !st; i++)
                st = ckv_words_push(&out->words, s + a + sp[i].off, sp[i].len, err);
            if (!n && !st) /* "".split(" ") == [""] */
                st = ckv_words_push(&out->words, "", 0, err);
            free(sp);
        }
        a = b + 1;
    }
    if (!st && out->start)
        out->start[out->n_sent] = out->words.n;
    return st;
}

static size_t count_unique(const int32_t *ids, size_t n, size_t n_ids, uint8_t *seen)
{
    memset(seen, 0, n_ids);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!seen[ids[i]]) {
            seen[ids[i]] = 1;
            k++;
        }
    return k;
}

/* LCS of x (reference sentence) and y (hypothesis sentence) backtracked as
 * rouge's _recon: adds the matched words of x to the union set `in_union`
 * (growing *union_n). Fails (returns false) when the recursion would need
 * more than max_frames _recon frames. */
static bool recon_lcs(const int32_t *x, size_t nx, const int32_t *y, size_t ny, int32_t *table,
                      uint8_t *in_union, size_t *union_n, size_t max_frames)
{
    size_t w = ny + 1;
#define T(i, j) table[(size_t)(i) * w + (size_t)(j)]
    for (size_t i = 0; i <= nx; i++)
        for (size_t j = 0; j <= ny; j++) {
            if (i == 0 || j == 0)
                T(i, j) = 0;
            else if (x[i - 1] == y[j - 1])
                T(i, j) = T(i - 1, j - 1) + 1;
            else
                T(i, j) = T(i - 1, j) > T(i, j - 1) ? T(i - 1, j) : T(i, j - 1);
        }
    size_t frames = 1;
    for (size_t i = nx, j = ny; i > 0 && j > 0; frames++) {
        if (x[i - 1] == y[j - 1]) {
            if (!in_union[x[i - 1]]) {
                in_union[x[i - 1]] = 1;
                ++*union_n;
            }
            i--;
            j--;
        } else if (T(i - 1, j) > T(i, j - 1)) {
            i--;
        } else {
            j--;
        }
    }
#undef T
    /* Words are only added to the union after the whole recursion returns,
     * so a failing pair must not count; the caller discards the score. */
    return frames <= max_frames;
}

/* Cells of one LCS table we are willing to allocate; a larger pair would
 * need gigabytes in the Python original too. */
#define ROUGE_MAX_CELLS ((size_t)1 << 28)

ckv_status ckv_rouge_l(const char *pred, const char *truth, size_t max_frames, double *score,
                       ckv_error *err)
{
    sentences h = {0}, r = {0};
    int32_t *ih = NULL, *ir = NULL, *table = NULL;
    uint8_t *seen = NULL, *in_union = NULL;
    size_t n_ids = 0;
    *score = 0.0;
    ckv_status st = split_sentences(pred, &h, err);
    if (!st)
        st = split_sentences(truth, &r, err);
    /* rouge raises "Hypothesis is empty." / "Reference is empty."; LongBench
     * catches every exception and scores 0. */
    if (st || h.n_sent == 0 || r.n_sent == 0)
        goto done;
    if ((st = ckv_words_intern(&h.words, &r.words, &ih, &ir, &n_ids, err)))
        goto done;
    seen = malloc(n_ids);
    in_union = calloc(n_ids, 1);
    if (!seen || !in_union) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory for ROUGE word sets");
        goto done;
    }
    size_t m = count_unique(ir, r.words.n, n_ids, seen);
    size_t n = count_unique(ih, h.words.n, n_ids, seen);
    size_t llcs = 0, max_cells = 0;
    for (size_t a = 0; a < r.n_sent; a++)
        for (size_t b = 0; b < h.n_sent; b++) {
            size_t cells = (r.start[a + 1] - r.start[a] + 1) * (h.start[b + 1] - h.start[b] + 1);
            if (cells > max_cells)
                max_cells = cells;
        }
    if (max_cells > ROUGE_MAX_CELLS) {
        st = ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                        "rouge: a sentence pair needs a %zu-cell LCS table (limit %zu)", max_cells,
                        ROUGE_MAX_CELLS);
        goto done;
    }
    table = malloc(max_cells * sizeof *table);
    if (!table) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory for the LCS table");
        goto done;
    }
    for (size_t a = 0; a < r.n_sent; a++)
        for (size_t b = 0; b < h.n_sent; b++)
            if (!recon_lcs(ir + r.start[a], r.start[a + 1] - r.start[a], ih + h.start[b],
                           h.start[b + 1] - h.start[b], table, in_union, &llcs, max_frames))
                goto done; /* RecursionError: scored 0 */
    double r_lcs = (double)llcs / (double)m;
    double p_lcs = (double)llcs / (double)n;
    *score = 2.0 * ((p_lcs * r_lcs) / (p_lcs + r_lcs + 1e-8));
done:
    free(h.words.v);
    free(h.start);
    free(r.words.v);
    free(r.start);
    free(ih);
    free(seen);
    free(in_union);
    free(table);
    return st;
}
