/* memmem */
#define _GNU_SOURCE
#include "metrics.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pystr.h"
#include "regex.h"
#include "rouge.h"
#include "seqmatch.h"
#include "wordlist.h"
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

/* re.findall into a token list. */
static ckv_status re_findall(const char *pat, uint32_t opts, int group, const char *s, size_t len,
                             ckv_words *out, ckv_error *err)
{
    ckv_span *sp;
    size_t n;
    ckv_status st = ckv_re_findall(pat, opts, group, s, len, &sp, &n, err);
    for (size_t i = 0; i < n && !st; i++)
        st = ckv_words_push(out, s + sp[i].off, sp[i].len, err);
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
static ckv_status normalize_answer_tokens(const char *s, size_t len, char **buf, ckv_words *tok,
                                          ckv_error *err)
{
    size_t n;
    ckv_status st = lower_drop(s, len, is_ascii_punct, buf, &n, err);
    if (st)
        return st;
    ckv_words arts = {0};
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
        st = ckv_words_push(tok, *buf + sp[i].off, sp[i].len, err);
    free(sp);
    return st;
}

/* Stand-in for jieba.cut(s, cut_all=False): one token per Han character
 * (jieba's range U+4E00..U+9FD5), one per ASCII letter/digit run with
 * jieba's optional decimal and percent suffix, "\r\n" as one token, and one
 * per other character. jieba instead joins Han characters into dictionary
 * and HMM words; docs/datasets.md says where the scores differ. */
static ckv_status cut_zh(const char *s, size_t len, ckv_words *tok, ckv_error *err)
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

static ckv_status token_f1(const ckv_words *p, const ckv_words *g, double *score, ckv_error *err)
{
    int32_t *ip, *ig;
    size_t n_ids;
    ckv_status st = ckv_words_intern(p, g, &ip, &ig, &n_ids, err);
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
    ckv_words tp = {0}, tg = {0};
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
static ckv_status zh_tokens(const char *s, ckv_words *out, char ***arena, size_t *n_arena,
                            ckv_error *err)
{
    ckv_words raw = {0};
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
            st = ckv_words_push(out, p2, n2, err);
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
    ckv_words tp = {0}, tg = {0};
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

/* rouge_zh_score: jieba-cut (approximated) and space-joined, then rouge. */
static ckv_status join_zh(const char *s, char **out, ckv_error *err)
{
    ckv_words t = {0};
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
        st = ckv_rouge_l(p, g, CKV_ROUGE_MAX_RECON_FRAMES - 1, score, err);
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
    ckv_words nums = {0};
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
    ckv_words ids = {0};
    ckv_status st = re_findall(pattern, 0, 1, truth, strlen(truth), &ids, err);
    if (!st && ids.n == 0) /* the original raises IndexError here */
        st = ckv_errorf(err, CKV_ERR_ARG, "answer '%.80s' does not match '%s'", truth, pattern);
    if (!st)
        st = number_fraction(pred, ids.v[0].p, ids.v[0].len, score, err);
    free(ids.v);
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
    ckv_status st = ckv_fuzz_ratio(line, line_len, truth, strlen(truth), &r, err);
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
    case CKV_METRIC_ROUGE: return ckv_rouge_l(pred, truth, CKV_ROUGE_MAX_RECON_FRAMES, score, err);
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
