/* libFuzzer target: the LongBench and RULER scorers on arbitrary model
 * predictions. Input: a metric selector byte, a flags byte, then
 * NUL-separated fields: the prediction, up to three fuzzed references and
 * up to two fuzzed classes. Each metric has a few fixed, well-formed
 * references (and trec-like classes). Checks:
 * - ckv_metric_sample against the fixed references: invalid UTF-8 in the
 *   prediction is CKV_ERR_FORMAT with a message, anything else scores a
 *   finite value in [0, 1];
 * - against fixed plus fuzzed references and classes: an error has a
 *   message, and only invalid UTF-8 or (retrieval) an answer without a
 *   paragraph number may fail;
 * - identities: string_match_part of a prediction against itself stripped
 *   is 1, qa_f1 of a prediction against itself is 0 or 1, fuzz.ratio of a
 *   text with itself is 100 and with another in [0, 100], ROUGE-L of a text
 *   with itself is 0 (empty, or the original's recursion limit) or about 1;
 * - str.lower gives valid UTF-8, str.split and str.strip spans lie inside.
 * Any crash, sanitizer report, leak or failed check aborts; -timeout=10
 * catches hangs. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "pystr.h"
#include "rouge.h"
#include "seqmatch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_REFS = 3, MAX_CLASSES = 2, MAX_FIXED = 2 };

/* Well-formed references for each metric, as the datasets hold them. */
static const char *const fixed_answers[CKV_METRIC_N][MAX_FIXED] = {
    [CKV_METRIC_QA_F1] = {"Paris", "the Eiffel Tower"},
    [CKV_METRIC_QA_F1_ZH] = {"北京", "中国的首都。"},
    [CKV_METRIC_ROUGE] = {"The cat sat on the mat. It was happy.", "A cat. A mat"},
    [CKV_METRIC_ROUGE_ZH] = {"会议讨论了预算。", "预算 2024"},
    [CKV_METRIC_CLASSIFICATION] = {"Location", "Abbreviation"},
    [CKV_METRIC_RETRIEVAL] = {"Paragraph 12", "Paragraph 3"},
    [CKV_METRIC_RETRIEVAL_ZH] = {"段落12", "段落3"},
    [CKV_METRIC_COUNT] = {"7", "12"},
    [CKV_METRIC_CODE_SIM] = {"return x + 1;", "    }"},
    [CKV_METRIC_STRING_MATCH_ALL] = {"8312459", "Magic Number"},
    [CKV_METRIC_STRING_MATCH_PART] = {"Paris", "ÉCOLE"},
};
static const char *const fixed_classes[] = {"Location", "Abbreviation", "Person", "Number"};
enum { N_FIXED_CLASSES = sizeof fixed_classes / sizeof fixed_classes[0] };

static bool valid(const char *s)
{
    ckv_error e = {0};
    return !ckv_utf8_check(s, strlen(s), "text", &e);
}

static void check_score(ckv_status st, const ckv_error *e, double score)
{
    if (st ? !e->msg[0] : !(isfinite(score) && score >= 0.0 && score <= 1.0))
        abort();
}

static void identities(const char *pred)
{
    size_t n = strlen(pred);
    ckv_error e = {0};
    double s;
    ckv_span sp = ckv_py_strip(pred, n);
    if (sp.off + sp.len > n)
        abort();
    bool control = false;
    for (size_t i = 0; i < n; i++)
        control |= (unsigned char)pred[i] < 0x20;
    char *stripped = strndup(pred + sp.off, sp.len);
    if (!stripped)
        abort();
    const char *self[] = {stripped};
    if (ckv_metric_sample(CKV_METRIC_STRING_MATCH_PART, pred, self, 1, NULL, 0, false, &s, &e) ||
        (!control && s != 1.0))
        abort();
    free(stripped);
    const char *whole[] = {pred};
    if (ckv_metric_sample(CKV_METRIC_QA_F1, pred, whole, 1, NULL, 0, false, &s, &e) ||
        (s != 0.0 && s != 1.0))
        abort();
    int r;
    if (ckv_fuzz_ratio(pred, n, pred, n, &r, &e) || r != 100)
        abort();
    if (ckv_rouge_l(pred, pred, CKV_ROUGE_MAX_RECON_FRAMES, &s, &e) ||
        (s != 0.0 && !(s > 0.99 && s <= 1.0)))
        abort();

    char *low;
    size_t nl;
    if (ckv_py_lower(pred, n, &low, &nl, &e) || low[nl] || !valid(low))
        abort();
    free(low);
    ckv_span *w;
    size_t nw;
    if (ckv_py_split(pred, n, &w, &nw, &e))
        abort();
    for (size_t i = 0, end = 0; i < nw; i++) {
        if (w[i].off < end || !w[i].len || w[i].off + w[i].len > n)
            abort();
        end = w[i].off + w[i].len;
    }
    free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    ckv_metric m = (ckv_metric)(data[0] % CKV_METRIC_N);
    bool first_line = data[1] & 1;
    /* Fields: NUL-separated copies (the last one NUL-terminated here). */
    char *buf = malloc(size - 1);
    if (!buf)
        abort();
    memcpy(buf, data + 2, size - 2);
    buf[size - 2] = 0;
    const char *field[1 + MAX_REFS + MAX_CLASSES];
    size_t nf = 0;
    for (size_t i = 0; nf < sizeof field / sizeof field[0];) {
        field[nf++] = buf + i;
        i += strlen(buf + i) + 1;
        if (i > size - 2)
            break;
    }
    const char *pred = field[0];
    bool pred_ok = valid(pred);

    ckv_error e = {0};
    double s = -1;
    ckv_status st = ckv_metric_sample(m, pred, fixed_answers[m], MAX_FIXED, fixed_classes,
                                      N_FIXED_CLASSES, first_line, &s, &e);
    if (pred_ok ? st != CKV_OK : st != CKV_ERR_FORMAT)
        abort();
    check_score(st, &e, s);

    /* Fixed and fuzzed references and classes together. */
    const char *ans[MAX_FIXED + MAX_REFS], *cls[N_FIXED_CLASSES + MAX_CLASSES];
    size_t na = 0, nc = 0;
    bool all_ok = pred_ok;
    if (!(data[1] & 2))
        for (size_t i = 0; i < MAX_FIXED; i++)
            ans[na++] = fixed_answers[m][i];
    for (size_t i = 1; i < nf && i <= MAX_REFS; i++) {
        ans[na++] = field[i];
        all_ok &= valid(field[i]);
    }
    for (size_t i = 0; i < N_FIXED_CLASSES; i++)
        cls[nc++] = fixed_classes[i];
    for (size_t i = 1 + MAX_REFS; i < nf; i++) {
        cls[nc++] = field[i];
        all_ok &= valid(field[i]); /* checked whatever the metric */
    }
    e.msg[0] = 0;
    s = -1;
    st = ckv_metric_sample(m, pred, ans, na, cls, nc, first_line, &s, &e);
    bool may_fail = !all_ok || m == CKV_METRIC_RETRIEVAL || m == CKV_METRIC_RETRIEVAL_ZH ||
                    (ckv_metric_is_ruler(m) && na == 0);
    if (st && !may_fail)
        abort();
    check_score(st, &e, s);
    if (!st) {
        double task = ckv_metric_task_score(m, &s, 1);
        if (!(task >= 0.0 && task <= 100.0))
            abort();
    }

    if (pred_ok) {
        identities(pred);
        for (size_t i = 1; i < nf && i <= MAX_REFS; i++) {
            int r;
            if (valid(field[i]) &&
                (ckv_fuzz_ratio(pred, strlen(pred), field[i], strlen(field[i]), &r, &e) ||
                 r < 0 || r > 100))
                abort();
        }
    }
    free(buf);
    return 0;
}
