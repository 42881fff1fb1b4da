/* Scorers against the official Python definitions: tests/fixtures/
 * metric_cases.jsonl holds (inputs, expected value) pairs produced once by
 * LongBench's metrics.py/eval.py scorer (rouge 1.0.1, jieba 0.42.1,
 * fuzzywuzzy 0.18.0 without python-Levenshtein, CPython 3.11) and RULER's
 * evaluate.py, outside this project. zh cases are those on which our
 * jieba stand-in gives jieba's value (docs/datasets.md). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fuzz_dir.h"
#include "metrics.h"
#include "util.h"

static const char **strings(json_t *arr, size_t *n)
{
    *n = json_array_size(arr);
    const char **v = calloc(*n ? *n : 1, sizeof *v);
    for (size_t i = 0; i < *n; i++)
        v[i] = json_string_value(json_array_get(arr, i));
    return v;
}

Test(metrics, fixture_cases_match_official_python)
{
    const char *path = CKV_SOURCE_ROOT "/tests/fixtures/metric_cases.jsonl";
    FILE *fp = fopen(path, "r");
    cr_assert_not_null(fp, "cannot open %s", path);
    char *line = NULL;
    size_t cap = 0, lineno = 0, n_sample = 0, n_task = 0;
    int seen[CKV_METRIC_N] = {0};
    while (getline(&line, &cap, fp) > 0) {
        lineno++;
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        cr_assert_not_null(o, "line %zu: %s", lineno, je.text);
        ckv_metric m;
        ckv_error err = {0};
        cr_assert_eq(ckv_metric_from_name(json_string_value(json_object_get(o, "metric")), &m, &err),
                     CKV_OK, "line %zu: %s", lineno, err.msg);
        if (json_object_get(o, "task_expected")) {
            size_t n = json_array_size(json_object_get(o, "samples"));
            double *s = malloc(n * sizeof *s);
            for (size_t i = 0; i < n; i++)
                s[i] = json_real_value(json_array_get(json_object_get(o, "samples"), i));
            double want = json_number_value(json_object_get(o, "task_expected"));
            cr_expect_eq(ckv_metric_task_score(m, s, n), want, "line %zu: task score %.17g != %.17g",
                         lineno, ckv_metric_task_score(m, s, n), want);
            free(s);
            n_task++;
        } else {
            size_t na, nc;
            const char **ans = strings(json_object_get(o, "answers"), &na);
            const char **cls = strings(json_object_get(o, "classes"), &nc);
            double want = json_number_value(json_object_get(o, "expected")), got = -1;
            ckv_status st = ckv_metric_sample(m, json_string_value(json_object_get(o, "pred")), ans,
                                              na, cls, nc,
                                              json_is_true(json_object_get(o, "first_line")), &got,
                                              &err);
            cr_expect_eq(st, CKV_OK, "line %zu: %s", lineno, err.msg);
            cr_expect(fabs(got - want) <= 1e-12, "line %zu (%s, %s): got %.17g, want %.17g", lineno,
                      ckv_metric_name(m), json_string_value(json_object_get(o, "note")), got, want);
            seen[m]++;
            n_sample++;
            free(ans);
            free(cls);
        }
        json_decref(o);
    }
    free(line);
    fclose(fp);
    for (int m = 0; m < CKV_METRIC_N; m++)
        cr_expect_geq(seen[m], 10, "%s has only %d fixture cases", ckv_metric_name((ckv_metric)m),
                      seen[m]);
    cr_expect_geq(n_task, 5);
    cr_expect_geq(n_sample, 150);
}

Test(metrics, names_round_trip)
{
    for (int i = 0; i < CKV_METRIC_N; i++) {
        ckv_metric m;
        cr_assert_eq(ckv_metric_from_name(ckv_metric_name((ckv_metric)i), &m, NULL), CKV_OK);
        cr_expect_eq((int)m, i);
    }
    ckv_metric m;
    ckv_error err = {0};
    cr_expect_eq(ckv_metric_from_name("f1", &m, &err), CKV_ERR_ARG);
    cr_expect(strstr(err.msg, "'f1'") && strstr(err.msg, "qa_f1_score"), "%s", err.msg);
}

/* Python's round(x, 2): documented results (docs.python.org, "Floating
 * Point Arithmetic"): round(2.675, 2) == 2.67; exact ties go to even. */
Test(metrics, round2_as_python)
{
    cr_expect_eq(ckv_round2(2.675), 2.67);
    cr_expect_eq(ckv_round2(0.125), 0.12);
    cr_expect_eq(ckv_round2(0.375), 0.38);
    cr_expect_eq(ckv_round2(33.333333333333336), 33.33);
    cr_expect_eq(ckv_round2(66.66666666666667), 66.67);
}

/* Inputs on which the Python original raises: an error here, never a
 * silent score. */
Test(metrics, original_exceptions_are_errors)
{
    ckv_error err = {0};
    double s;
    cr_expect_eq(ckv_metric_pair(CKV_METRIC_RETRIEVAL, "Paragraph 1", "paragraph 1", NULL, 0, &s,
                                 &err),
                 CKV_ERR_ARG);
    cr_expect(strstr(err.msg, "Paragraph") != NULL, "%s", err.msg);
    cr_expect_eq(ckv_metric_pair(CKV_METRIC_RETRIEVAL_ZH, "段落1", "Paragraph 1", NULL, 0, &s, &err),
                 CKV_ERR_ARG);
    cr_expect_eq(ckv_metric_sample(CKV_METRIC_STRING_MATCH_ALL, "x", NULL, 0, NULL, 0, false, &s,
                                   &err),
                 CKV_ERR_ARG);
}

Test(metrics, invalid_utf8_is_an_error)
{
    ckv_error err = {0};
    double s;
    const char *ans[] = {"abc"};
    for (int m = 0; m < CKV_METRIC_N; m++) {
        cr_expect_eq(ckv_metric_sample((ckv_metric)m, "ab\xff", ans, 1, NULL, 0, false, &s, &err),
                     CKV_ERR_FORMAT, "%s", ckv_metric_name((ckv_metric)m));
        cr_expect(strstr(err.msg, "UTF-8") && strstr(err.msg, "byte 2"), "%s", err.msg);
    }
    const char *bad[] = {"\xc3("};
    cr_expect_eq(ckv_metric_sample(CKV_METRIC_QA_F1, "abc", bad, 1, NULL, 0, false, &s, &err),
                 CKV_ERR_FORMAT);
}

/* Degenerate model outputs, with the value the Python original gives. */
Test(metrics, degenerate_predictions)
{
    const struct {
        ckv_metric m;
        const char *pred, *truth;
        double want;
    } cases[] = {
        /* postprocess_pred: control characters become "\n", then strip. */
        {CKV_METRIC_STRING_MATCH_PART, "\x01 Paris\x1f\x1b", "paris", 1.0},
        /* str.lower("İ") is "i" U+0307 on both sides. */
        {CKV_METRIC_STRING_MATCH_ALL, "\xC4\xB0stanbul", "i\xCC\x87STANBUL", 1.0},
        /* No tokens left after normalize_answer: f1 0. */
        {CKV_METRIC_QA_F1, "...!?", "Paris", 0.0},
        {CKV_METRIC_QA_F1, "the an a", "a", 0.0},
        {CKV_METRIC_QA_F1_ZH, "\xE3\x80\x82\xEF\xBC\x81", "\xE5\x8C\x97", 0.0}, /* 。！ */
        /* Only dots: rouge raises "Hypothesis is empty", LongBench scores 0. */
        {CKV_METRIC_ROUGE, ".....", "a b", 0.0},
        /* Every line is a comment or fence: the empty line is compared. */
        {CKV_METRIC_CODE_SIM, "\n\n# only\n// comments\n```", "x = 1", 0.0},
        {CKV_METRIC_COUNT, "no digits here", "3", 0.0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *ans[] = {cases[i].truth};
        double s = -1;
        ckv_error err = {0};
        cr_expect_eq(ckv_metric_sample(cases[i].m, cases[i].pred, ans, 1, NULL, 0, false, &s, &err),
                     CKV_OK, "case %zu: %s", i, err.msg);
        cr_expect_eq(s, cases[i].want, "case %zu (%s): %g", i, ckv_metric_name(cases[i].m), s);
    }
    /* Autojunk drops both code points of the 300-character truth from
     * difflib's index; the match then only grows by extension (CPython
     * 3.11 difflib: ratio 0.81 and 0). */
    char a[321], b[301], ab[401];
    memset(a, 'a', 300), memset(a + 300, 'b', 20), a[320] = 0;
    memset(b, 'a', 250), memset(b + 250, 'b', 50), b[300] = 0;
    for (int i = 0; i < 400; i++)
        ab[i] = "ab"[i % 2];
    ab[400] = 0;
    const char *junk_truth[] = {b};
    double s;
    ckv_error err = {0};
    cr_expect_eq(ckv_metric_sample(CKV_METRIC_CODE_SIM, a, junk_truth, 1, NULL, 0, false, &s, &err),
                 CKV_OK);
    cr_expect_eq(s, 0.81);
    cr_expect_eq(ckv_metric_sample(CKV_METRIC_CODE_SIM, ab, junk_truth, 1, NULL, 0, false, &s,
                                   &err),
                 CKV_OK);
    cr_expect_eq(s, 0.0);
    /* Both matches name the truth and neither is removed: 1 / len = 0.5. */
    const char *cls[] = {"Person", "Person"}, *truth[] = {"Person"};
    cr_expect_eq(ckv_metric_sample(CKV_METRIC_CLASSIFICATION, "Person", truth, 1, cls, 2, false,
                                   &s, &err),
                 CKV_OK);
    cr_expect_eq(s, 0.5);
}

/* Every input in tests/fuzz/regressions/metrics/ (fuzz_metrics' format: a
 * metric byte, a flags byte, then NUL-separated prediction, up to three
 * references and up to two classes) scores in [0, 1] or fails with a
 * message. */
static void score_one(const char *path, const char *name, void *ctx)
{
    (void)ctx;
    char *data;
    size_t size;
    ckv_error err = {0};
    cr_assert_eq(ckv_read_file(path, &data, &size, &err), CKV_OK, "%s", err.msg);
    cr_assert_geq(size, 2, "%s", name);
    const char *field[6];
    size_t nf = 0;
    for (size_t i = 2; i <= size && nf < 6; i += strlen(data + i) + 1)
        field[nf++] = data + i; /* ckv_read_file NUL-terminates */
    size_t na = nf < 4 ? nf - 1 : 3;
    double s = -1;
    ckv_status st = ckv_metric_sample((ckv_metric)((unsigned char)data[0] % CKV_METRIC_N),
                                      field[0], field + 1, na, field + 1 + na, nf - 1 - na,
                                      data[1] & 1, &s, &err);
    cr_expect(st ? err.msg[0] != 0 : isfinite(s) && s >= 0 && s <= 1, "%s: %d %g '%s'", name,
              st, s, err.msg);
    free(data);
}

Test(metrics, fuzz_regressions_do_not_crash)
{
    cr_assert_gt(fuzz_dir_each(CKV_SOURCE_ROOT "/tests/fuzz/regressions/metrics", score_one, NULL),
                 0);
}
