/* memmem */
#define _GNU_SOURCE
#include "metrics.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <math.h>
#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pystr.h"
#include "regex.h"
#include "util.h"

static const char *const metric_names[CKV_METRIC_N] = {
    "qa_f1_score",         "qa_f1_zh_score",   "rouge_score",      "rouge_zh_score",
    "classification_score", "retrieval_score", "retrieval_zh_score", "count_score",
    "code_sim_score",      "string_match_all", "string_match_part",
};

const char *ckv_metric_name(ckv_metric m)
{
    return (unsigned)m < CKV_METRIC_N ? metric_names[m] : "unknown";
}

ckv_status ckv_metric_from_name(const char *name, ckv_metric *out, ckv_error *err)
{
    for (int i = 0; i < CKV_METRIC_N; i++)
        if (!strcmp(name, metric_names[i])) {
            *out = (ckv_metric)i;
            return CKV_OK;
        }
    char list[512] = "";
    for (int i = 0; i < CKV_METRIC_N; i++) {
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, metric_names[i], sizeof list - strlen(list) - 1);
    }
    return ckv_errorf(err, CKV_ERR_ARG, "unknown metric '%s' (known: %s)", name, list);
}

bool ckv_metric_is_ruler(ckv_metric m)
{
    return m == CKV_METRIC_STRING_MATCH_ALL || m == CKV_METRIC_STRING_MATCH_PART;
}

/* ---- growable buffers and token interning -------------------------------- */

typedef struct {
    const char *p;
    size_t len;
} str;

typedef struct {
    str *v;
    size_t n, cap;
} str_list;

static ckv_status push(str_list *l, const char *p, size_t len, ckv_error *err)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 32;
        str *nv = realloc(l->v, cap * sizeof *nv);
        if (!nv)
            return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory collecting tokens");
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = (str){p, len};
    return CKV_OK;
}

typedef struct {
    str s;
    size_t idx;
} keyed;

static int cmp_keyed(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    size_t n = x->s.len < y->s.len ? x->s.len : y->s.len;
    int c = n ? memcmp(x->s.p, y->s.p, n) : 0;
    if (c)
        return c;
    return (x->s.len > y->s.len) - (x->s.len < y->s.len);
}

/* Gives equal strings of a and b equal ids in [0, *n_ids): Python compares
 * str by code points, which for valid UTF-8 is byte equality. */
static ckv_status intern(const str_list *a, const str_list *b, int32_t **ida, int32_t **idb,
                         size_t *n_ids, ckv_error *err)
{
    size_t n = a->n + b->n;
    keyed *k = malloc((n ? n : 1) * sizeof *k);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!k || !ids) {
        free(k);
        free(ids);
        return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory interning %zu tokens", n);
    }
    for (size_t i = 0; i < a->n; i++)
        k[i] = (keyed){a->v[i], i};
    for (size_t i = 0; i < b->n; i++)
        k[a->n + i] = (keyed){b->v[i], a->n + i};
    qsort(k, n, sizeof *k, cmp_keyed);
    int32_t id = -1;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || cmp_keyed(&k[i - 1], &k[i]))
            id++;
        ids[k[i].idx] = id;
    }
    free(k);
    *ida = ids;
    *idb = ids + a->n;
    *n_ids = (size_t)(id + 1);
    return CKV_OK;
}

/* re.findall into a token list. */
static ckv_status re_findall(const char *pat, uint32_t opts, int group, const char *s, size_t len,
                             str_list *out, ckv_error *err)
{
    ckv_span *sp;
    size_t n;
    ckv_status st = ckv_re_findall(pat, opts, group, s, len, &sp, &n, err);
    for (size_t i = 0; i < n && !st; i++)
        st = push(out, s + sp[i].off, sp[i].len, err);
    free(sp);
    return st;
}

/* ---- normalisation -------------------------------------------------------- */

static bool is_ascii_punct(int32_t c)
{
    return c < 128 && c > 32 && c != 127 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                                              (c >= 'A' && c <= 'Z'));
}

/* The non-ASCII characters of normalize_zh_answer's cn_punctuation string
 * in metrics.py, sorted (its "." is ASCII; note that 《 is absent while 》
 * is present, as in the original). */
static const int32_t zh_punct[] = {
    0x2013, 0x2014, 0x2018, 0x2019, 0x201B, 0x201C, 0x201D, 0x201E, 0x201F, 0x2026, 0x2027,
    0x3001, 0x3002, 0x3003, 0x300B, 0x300C, 0x300D, 0x300E, 0x300F, 0x3010, 0x3011, 0x3014,
    0x3015, 0x3016, 0x3017, 0x3018, 0x3019, 0x301A, 0x301B, 0x301C, 0x301D, 0x301E, 0x301F,
    0x3030, 0x303E, 0x303F, 0xFE4F, 0xFF01, 0xFF02, 0xFF03, 0xFF04, 0xFF05, 0xFF06, 0xFF07,
    0xFF08, 0xFF09, 0xFF0A, 0xFF0B, 0xFF0C, 0xFF0D, 0xFF0F, 0xFF1A, 0xFF1B, 0xFF1C, 0xFF1D,
    0xFF1E, 0xFF1F, 0xFF20, 0xFF3B, 0xFF3C, 0xFF3D, 0xFF3E, 0xFF3F, 0xFF40, 0xFF5B, 0xFF5C,
    0xFF5D, 0xFF5E, 0xFF5F, 0xFF60, 0xFF61, 0xFF62, 0xFF63, 0xFF64,
};

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* normalize_zh_answer deletes its punctuation and all whitespace. */
static bool is_zh_drop(int32_t c)
{
    return is_ascii_punct(c) || ckv_py_isspace(c) ||
           (c > 127 && bsearch(&c, zh_punct, sizeof zh_punct / sizeof zh_punct[0],
                               sizeof zh_punct[0], cmp_i32));
}

/* Lower-cases and deletes the characters for which drop() is true. */
static ckv_status lower_drop(const char *s, size_t len, bool (*drop)(int32_t), char **out,
                             size_t *out_len, ckv_error *err)
{
    char *low;
    size_t n;
    ckv_status st = ckv_py_lower(s, len, &low, &n, err);
    if (st)
        return st;
    int32_t *cps;
    size_t ncp;
    if ((st = ckv_utf8_decode(low, n, &cps, &ncp, err))) {
        free(low);
        return st;
    }
    size_t k = 0, i = 0;
    for (size_t c = 0; c < ncp; c++) {
        size_t w = cps[c] < 0x80 ? 1 : cps[c] < 0x800 ? 2 : cps[c] < 0x10000 ? 3 : 4;
        if (!drop(cps[c])) {
            memmove(low + k, low + i, w);
            k += w;
        }
        i += w;
    }
    low[k] = 0;
    free(cps);
    *out = low;
    *out_len = k;
    return CKV_OK;
}

/* normalize_answer: lower, drop string.punctuation, articles -> " ", then
 * whitespace-split into tokens (pointing into *buf, which the caller frees). */
static ckv_status normalize_answer_tokens(const char *s, size_t len, char **buf, str_list *tok,
                                          ckv_error *err)
{
    size_t n;
    ckv_status st = lower_drop(s, len, is_ascii_punct, buf, &n, err);
    if (st)
        return st;
    str_list arts = {0};
    if ((st = re_findall("\\b(a|an|the)\\b", 0, 0, *buf, n, &arts, err)))
        return st;
    for (size_t i = 0; i < arts.n; i++) /* same-length blanking keeps offsets */
        memset((char *)arts.v[i].p, ' ', arts.v[i].len);
    free(arts.v);
    ckv_span *sp;
    size_t ns;
    if ((st = ckv_py_split(*buf, n, &sp, &ns, err)))
        return st;
    for (size_t i = 0; i < ns && !st; i++)
        st = push(tok, *buf + sp[i].off, sp[i].len, err);
    free(sp);
    return st;
}

/* Stand-in for jieba.cut(s, cut_all=False): one token per Han character
 * (jieba's range U+4E00..U+9FD5), one per ASCII letter/digit run with
 * jieba's optional decimal and percent suffix, "\r\n" as one token, and one
 * per other character. jieba instead joins Han characters into dictionary
 * and HMM words; docs/datasets.md says where the scores differ. */
static ckv_status cut_zh(const char *s, size_t len, str_list *tok, ckv_error *err)
{
    return re_findall("[\\x{4E00}-\\x{9FD5}]|[a-zA-Z0-9]+(?:\\.[0-9]+)?%?|\\r\\n|.", PCRE2_DOTALL,
                      0, s, len, tok, err);
}

/* ---- metrics -------------------------------------------------------------- */

/* f1_score over token ids: multiset overlap as collections.Counter does. */
static double f1_ids(const int32_t *p, size_t np, const int32_t *g, size_t ng, size_t n_ids,
                     int32_t *counts)
{
    memset(counts, 0, n_ids * sizeof *counts);
    for (size_t i = 0; i < np; i++)
        counts[p[i]]++;
    size_t same = 0;
    for (size_t i = 0; i < ng; i++)
        if (counts[g[i]] > 0) {
            counts[g[i]]--;
            same++;
        }
    if (same == 0)
        return 0.0;
    double precision = 1.0 * (double)same / (double)np;
    double recall = 1.0 * (double)same / (double)ng;
    return (2 * precision * recall) / (precision + recall);
}

static ckv_status token_f1(const str_list *p, const str_list *g, double *score, ckv_error *err)
{
    int32_t *ip, *ig;
    size_t n_ids;
    ckv_status st = intern(p, g, &ip, &ig, &n_ids, err);
    if (st)
        return st;
    int32_t *counts = malloc((n_ids ? n_ids : 1) * sizeof *counts);
    if (!counts) {
        free(ip);
        return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory for token counts");
    }
    *score = f1_ids(ip, p->n, ig, g->n, n_ids, counts);
    free(counts);
    free(ip);
    return CKV_OK;
}

static ckv_status qa_f1(const char *pred, const char *truth, double *score, ckv_error *err)
{
    char *bp = NULL, *bg = NULL;
    str_list tp = {0}, tg = {0};
    ckv_status st = normalize_answer_tokens(pred, strlen(pred), &bp, &tp, err);
    if (!st)
        st = normalize_answer_tokens(truth, strlen(truth), &bg, &tg, err);
    if (!st)
        st = token_f1(&tp, &tg, score, err);
    free(bp);
    free(bg);
    free(tp.v);
    free(tg.v);
    return st;
}

/* jieba-cut tokens, each normalised with normalize_zh_answer, empties
 * dropped. The normalised text lives in *arena (caller frees). */
static ckv_status zh_tokens(const char *s, str_list *out, char ***arena, size_t *n_arena,
                            ckv_error *err)
{
    str_list raw = {0};
    ckv_status st = cut_zh(s, strlen(s), &raw, err);
    char **a = calloc(raw.n ? raw.n : 1, sizeof *a);
    if (!st && !a)
        st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory for tokens");
    for (size_t i = 0; !st && i < raw.n; i++) {
        char *p2;
        size_t n2;
        if ((st = lower_drop(raw.v[i].p, raw.v[i].len, is_zh_drop, &p2, &n2, err)))
            break;
        a[i] = p2;
        if (n2)
            st = push(out, p2, n2, err);
    }
    *arena = a;
    *n_arena = raw.n;
    free(raw.v);
    return st;
}

static void free_arena(char **a, size_t n)
{
    if (!a)
        return;
    for (size_t i = 0; i < n; i++)
        free(a[i]);
    free(a);
}

static ckv_status qa_f1_zh(const char *pred, const char *truth, double *score, ckv_error *err)
{
    str_list tp = {0}, tg = {0};
    char **ap = NULL, **ag = NULL;
    size_t nap = 0, nag = 0;
    ckv_status st = zh_tokens(pred, &tp, &ap, &nap, err);
    if (!st)
        st = zh_tokens(truth, &tg, &ag, &nag, err);
    if (!st)
        st = token_f1(&tp, &tg, score, err);
    free_arena(ap, nap);
    free_arena(ag, nag);
    free(tp.v);
    free(tg.v);
    return st;
}

/* ROUGE-L as the `rouge` package (pltrdy, 1.0.1) computes it with its
 * defaults: sentences are the non-empty pieces of text.split("."), each
 * whitespace-normalised (a blank piece becomes the empty sentence, whose only
 * word is ""); words are unique (exclusive=True); the LCS of each (reference
 * sentence, hypothesis sentence) pair is backtracked as its _recon_lcs does
 * and the union of LCS words over all pairs is a set. Its backtrack is
 * recursive: when a pair needs more Python frames than remain under the
 * recursion limit, the package raises and LongBench scores 0. */
typedef struct {
    str_list words;  /* all words, sentence after sentence */
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
                st = push(&out->words, s + a + sp[i].off, sp[i].len, err);
            if (!n && !st) /* "".split(" ") == [""] */
                st = push(&out->words, "", 0, err);
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

/* Python frames available to _recon under CPython's default recursion limit
 * (1000) when LongBench's eval.py calls rouge_score: module, scorer,
 * rouge_score, get_scores, _get_avg_scores, lambda, rouge_l_summary_level,
 * _union_lcs, _recon_lcs use 9. rouge_zh_score adds one frame. Measured with
 * rouge 1.0.1 under CPython 3.11 (identical sentences of 990 words score 1,
 * of 991 words 0). */
enum { ROUGE_MAX_RECON_FRAMES = 991 };

/* Cells of one LCS table we are willing to allocate; a larger pair would
 * need gigabytes in the Python original too. */
#define ROUGE_MAX_CELLS ((size_t)1 << 28)

static ckv_status rouge_l(const char *pred, const char *truth, size_t max_frames, double *score,
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
    if ((st = intern(&h.words, &r.words, &ih, &ir, &n_ids, err)))
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

/* rouge_zh_score: jieba-cut (approximated) and space-joined, then rouge. */
static ckv_status join_zh(const char *s, char **out, ckv_error *err)
{
    str_list t = {0};
    ckv_status st = cut_zh(s, strlen(s), &t, err);
    if (st) {
        free(t.v);
        return st;
    }
    size_t total = 1;
    for (size_t i = 0; i < t.n; i++)
        total += t.v[i].len + 1;
    char *o = malloc(total);
    if (!o) {
        free(t.v);
        return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory joining tokens");
    }
    size_t k = 0;
    for (size_t i = 0; i < t.n; i++) {
        if (i)
            o[k++] = ' ';
        memcpy(o + k, t.v[i].p, t.v[i].len);
        k += t.v[i].len;
    }
    o[k] = 0;
    free(t.v);
    *out = o;
    return CKV_OK;
}

static ckv_status rouge_zh(const char *pred, const char *truth, double *score, ckv_error *err)
{
    char *p = NULL, *g = NULL;
    ckv_status st = join_zh(pred, &p, err);
    if (!st)
        st = join_zh(truth, &g, err);
    if (!st)
        st = rouge_l(p, g, ROUGE_MAX_RECON_FRAMES - 1, score, err);
    free(p);
    free(g);
    return st;
}

static bool contains(const char *hay, size_t nh, const char *needle, size_t nn)
{
    return nn == 0 || (nn <= nh && memmem(hay, nh, needle, nn) != NULL);
}

/* classification_score, including its removal-while-iterating quirk: after
 * each removal the list shifts left and the next item is skipped; remove()
 * deletes the first equal item, which may lie before the current one. */
static ckv_status classification(const char *pred, const char *truth, const char *const *classes,
                                 size_t n_classes, double *score, ckv_error *err)
{
    size_t np = strlen(pred), nt = strlen(truth);
    const char **list = malloc((n_classes ? n_classes : 1) * sizeof *list);
    if (!list)
        return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory for class matches");
    size_t n = 0;
    for (size_t i = 0; i < n_classes; i++)
        if (contains(pred, np, classes[i], strlen(classes[i])))
            list[n++] = classes[i];
    for (size_t i = 0; i < n; i++) {
        const char *term = list[i];
        if (contains(truth, nt, term, strlen(term)) && strcmp(term, truth)) {
            size_t j = 0;
            while (strcmp(list[j], term))
                j++;
            memmove(list + j, list + j + 1, (n - j - 1) * sizeof *list);
            n--;
        }
    }
    *score = 0.0;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(list[i], truth)) {
            *score = 1.0 / (double)n;
            break;
        }
    free(list);
    return CKV_OK;
}

/* Fraction of the \d+ numbers in the prediction equal to `want`. */
static ckv_status number_fraction(const char *pred, const char *want, size_t want_len,
                                  double *score, ckv_error *err)
{
    str_list nums = {0};
    ckv_status st = re_findall("\\d+", 0, 0, pred, strlen(pred), &nums, err);
    if (st) {
        free(nums.v);
        return st;
    }
    size_t right = 0;
    for (size_t i = 0; i < nums.n; i++)
        if (nums.v[i].len == want_len && !memcmp(nums.v[i].p, want, want_len))
            right++;
    *score = nums.n == 0 ? 0.0 : (double)right / (double)nums.n;
    free(nums.v);
    return CKV_OK;
}

static ckv_status retrieval(const char *pred, const char *truth, const char *pattern,
                            double *score, ckv_error *err)
{
    str_list ids = {0};
    ckv_status st = re_findall(pattern, 0, 1, truth, strlen(truth), &ids, err);
    if (!st && ids.n == 0) /* the original raises IndexError here */
        st = ckv_errorf(err, CKV_ERR_ARG, "answer '%.80s' does not match '%s'", truth, pattern);
    if (!st)
        st = number_fraction(pred, ids.v[0].p, ids.v[0].len, score, err);
    free(ids.v);
    return st;
}

/* ---- difflib.SequenceMatcher(None, a, b).ratio() ------------------------ */

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

/* fuzzywuzzy 0.18 fuzz.ratio without python-Levenshtein (LongBench's
 * requirements do not install it): 100 for equal strings, 0 if either is
 * empty, else int(round(100 * SequenceMatcher(None, s1, s2).ratio())). */
static ckv_status fuzz_ratio(const char *s1, size_t n1, const char *s2, size_t n2, int *out,
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

static ckv_status code_sim(const char *pred, const char *truth, double *score, ckv_error *err)
{
    while (*pred == '\n')
        pred++;
    const char *line = "";
    size_t line_len = 0;
    for (const char *p = pred;;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (!memchr(p, '`', n) && !memchr(p, '#', n) && !contains(p, n, "//", 2)) {
            line = p;
            line_len = n;
            break;
        }
        if (!nl)
            break;
        p = nl + 1;
    }
    int r = 0;
    ckv_status st = fuzz_ratio(line, line_len, truth, strlen(truth), &r, err);
    if (!st)
        *score = (double)r / 100;
    return st;
}

/* ---- RULER ---------------------------------------------------------------- */

/* postprocess_pred: strip, control characters [\x00-\x1f] -> "\n", strip,
 * then lower-cased for the substring test. */
static ckv_status ruler_pred(const char *pred, char **out, size_t *out_len, ckv_error *err)
{
    ckv_span s = ckv_py_strip(pred, strlen(pred));
    char *t = malloc(s.len + 1);
    if (!t)
        return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory for the prediction");
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)pred[s.off + i];
        t[i] = c < 0x20 ? '\n' : (char)c;
    }
    ckv_span s2 = ckv_py_strip(t, s.len);
    ckv_status st = ckv_py_lower(t + s2.off, s2.len, out, out_len, err);
    free(t);
    return st;
}

static ckv_status ruler_found(const char *low_pred, size_t np, const char *ref, double *score,
                              ckv_error *err)
{
    char *lr;
    size_t nr;
    ckv_status st = ckv_py_lower(ref, strlen(ref), &lr, &nr, err);
    if (st)
        return st;
    *score = contains(low_pred, np, lr, nr) ? 1.0 : 0.0;
    free(lr);
    return CKV_OK;
}

/* ---- dispatch ------------------------------------------------------------- */

static ckv_status check_text(const char *s, const char *what, ckv_error *err)
{
    if (!s)
        return ckv_errorf(err, CKV_ERR_ARG, "%s is missing", what);
    return ckv_utf8_check(s, strlen(s), what, err);
}

ckv_status ckv_metric_pair(ckv_metric m, const char *pred, const char *truth,
                           const char *const *classes, size_t n_classes, double *score,
                           ckv_error *err)
{
    ckv_status st = check_text(pred, "prediction", err);
    if (!st)
        st = check_text(truth, "answer", err);
    for (size_t i = 0; !st && i < n_classes; i++)
        st = check_text(classes[i], "class", err);
    if (st)
        return st;
    switch (m) {
    case CKV_METRIC_QA_F1: return qa_f1(pred, truth, score, err);
    case CKV_METRIC_QA_F1_ZH: return qa_f1_zh(pred, truth, score, err);
    case CKV_METRIC_ROUGE: return rouge_l(pred, truth, ROUGE_MAX_RECON_FRAMES, score, err);
    case CKV_METRIC_ROUGE_ZH: return rouge_zh(pred, truth, score, err);
    case CKV_METRIC_CLASSIFICATION:
        return classification(pred, truth, classes, n_classes, score, err);
    case CKV_METRIC_RETRIEVAL: return retrieval(pred, truth, "Paragraph (\\d+)", score, err);
    case CKV_METRIC_RETRIEVAL_ZH: return retrieval(pred, truth, "段落(\\d+)", score, err);
    case CKV_METRIC_COUNT: return number_fraction(pred, truth, strlen(truth), score, err);
    case CKV_METRIC_CODE_SIM: return code_sim(pred, truth, score, err);
    case CKV_METRIC_STRING_MATCH_ALL:
    case CKV_METRIC_STRING_MATCH_PART: {
        char *lp;
        size_t np;
        if ((st = ruler_pred(pred, &lp, &np, err)))
            return st;
        st = ruler_found(lp, np, truth, score, err);
        free(lp);
        return st;
    }
    }
    return ckv_errorf(err, CKV_ERR_ARG, "unknown metric %d", (int)m);
}

ckv_status ckv_metric_sample(ckv_metric m, const char *pred, const char *const *answers,
                             size_t n_answers, const char *const *classes, size_t n_classes,
                             bool first_line, double *score, ckv_error *err)
{
    ckv_status st = check_text(pred, "prediction", err);
    if (st)
        return st;
    if (ckv_metric_is_ruler(m)) {
        if (n_answers == 0)
            return ckv_errorf(err, CKV_ERR_ARG, "%s needs at least one reference",
                              ckv_metric_name(m));
        double sum = 0.0, best = 0.0;
        for (size_t i = 0; i < n_answers; i++) {
            double s;
            if ((st = ckv_metric_pair(m, pred, answers[i], NULL, 0, &s, err)))
                return st;
            sum += s;
            best = s > best ? s : best;
        }
        *score = m == CKV_METRIC_STRING_MATCH_ALL ? sum / (double)n_answers : best;
        return CKV_OK;
    }
    char *cut = NULL;
    if (first_line) { /* prediction.lstrip('\n').split('\n')[0] */
        while (*pred == '\n')
            pred++;
        const char *nl = strchr(pred, '\n');
        cut = ckv_strndup(pred, nl ? (size_t)(nl - pred) : strlen(pred));
        if (!cut)
            return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory for the prediction");
        pred = cut;
    }
    double best = 0.0;
    for (size_t i = 0; i < n_answers && !st; i++) {
        double s;
        if (!(st = ckv_metric_pair(m, pred, answers[i], classes, n_classes, &s, err)))
            best = s > best ? s : best;
    }
    free(cut);
    *score = best;
    return st;
}

double ckv_round2(double x)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%.2f", x); /* glibc: exact value, ties to even */
    return strtod(buf, NULL);
}

double ckv_metric_task_score(ckv_metric m, const double *samples, size_t n)
{
    double total = 0.0;
    for (size_t i = 0; i < n; i++)
        total += samples[i];
    if (ckv_metric_is_ruler(m))
        return ckv_round2(total / (double)n * 100);
    return ckv_round2(100 * total / (double)n);
}
