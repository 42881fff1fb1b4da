#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aggregate.h"
#include "commands.h"
#include "jsonl.h"
#include "longbench.h"
#include "metrics.h"
#include "opts.h"

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: ckv score (--metric NAME | --dataset NAME) --pred TEXT --answer A\n"
            "                 [--answer B ...] [--class C ...]\n"
            "       ckv score (--metric NAME | --dataset NAME) --jsonl FILE\n"
            "       ckv score --summary FILE [--language en|zh]\n\n"
            "Scores predictions with LongBench's and RULER's metrics as the originals\n"
            "compute them (docs/datasets.md: the quirks kept, and where the zh metrics\n"
            "approximate jieba).\n\n"
            "Options:\n"
            "  --metric NAME   qa_f1_score, qa_f1_zh_score, rouge_score, rouge_zh_score,\n"
            "                  classification_score, retrieval_score,\n"
            "                  retrieval_zh_score, count_score, code_sim_score,\n"
            "                  string_match_all, string_match_part\n"
            "  --dataset NAME  a LongBench dataset (e.g. trec): its metric, plus the\n"
            "                  first-line cut for trec, triviaqa, samsum and lsht\n"
            "  --pred TEXT     the prediction; prints the sample's score in [0, 1]\n"
            "                  (the maximum over answers; for string_match_all the\n"
            "                  fraction of answers found)\n"
            "  --answer A      a reference answer; repeat for several\n"
            "  --class C       a class of all_classes (classification_score); repeat\n"
            "  --jsonl FILE    one JSON object per line with \"pred\" (string),\n"
            "                  \"answers\" (array of strings; RULER's \"outputs\" is\n"
            "                  accepted instead) and \"all_classes\" (array or null);\n"
            "                  prints the task score x100, rounded to 2 decimals as\n"
            "                  the originals do\n"
            "  --summary FILE  a JSON object of task scores (x100), e.g. LongBench's\n"
            "                  result.json: prints the 16-dataset English + code mean,\n"
            "                  the category means and the leaderboard average for\n"
            "                  LongBench, or the 13-task mean for RULER, each with how\n"
            "                  many of its tasks were present\n"
            "  --language L    en (default) or zh: the leaderboard --summary uses\n"
            "  -h, --help      this help\n\n"
            "Exit status: 0 scored, 1 bad input (file:line named), 2 usage error.\n");
}

/* Shortest decimal that reads back as the same double. */
static void print_exact(double v)
{
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    printf("%s\n", buf);
}

static int score_jsonl(const char *path, ckv_metric m, bool first_line)
{
    ckv_error err = {0};
    ckv_jsonl *r;
    if (ckv_jsonl_open(path, &r, &err))
        return cli_fail("score", &err);
    double *scores = NULL;
    size_t n = 0, cap = 0;
    ckv_status st = CKV_OK;
    for (;;) {
        json_t *o;
        if ((st = ckv_jsonl_next(r, &o, &err)) || !o)
            break;
        const char *pred;
        const char **ans = NULL, **cls = NULL;
        size_t na = 0, nc = 0;
        const char *afield = json_object_get(o, "answers") || !json_object_get(o, "outputs")
                                 ? "answers"
                                 : "outputs";
        if (!(st = ckv_jsonl_string(r, o, "pred", true, &pred, NULL, &err)) &&
            !(st = ckv_jsonl_strings(r, o, afield, true, &ans, &na, &err)) &&
            !(st = ckv_jsonl_strings(r, o, "all_classes", false, &cls, &nc, &err))) {
            if (m == CKV_METRIC_CLASSIFICATION && !json_is_array(json_object_get(o, "all_classes")))
                st = ckv_errorf(&err, CKV_ERR_FORMAT,
                                "%s:%zu: field 'all_classes': classification_score needs an array",
                                path, ckv_jsonl_line(r));
        }
        if (!st && n == cap) {
            cap = cap ? 2 * cap : 256;
            double *ns = realloc(scores, cap * sizeof *ns);
            if (!ns)
                st = ckv_errorf(&err, CKV_ERR_NOMEM, "out of memory");
            else
                scores = ns;
        }
        if (!st && (st = ckv_metric_sample(m, pred, ans, na, cls, nc, first_line, &scores[n], &err)))
            ckv_error_prefix(&err, "%s:%zu", path, ckv_jsonl_line(r));
        free(ans);
        free(cls);
        json_decref(o);
        if (st)
            break;
        n++;
    }
    ckv_jsonl_close(r);
    if (!st && n == 0)
        st = ckv_errorf(&err, CKV_ERR_FORMAT, "%s: no predictions", path);
    if (st) {
        free(scores);
        return cli_fail("score", &err);
    }
    printf("%.2f\n", ckv_metric_task_score(m, scores, n));
    free(scores);
    return CLI_OK;
}

/* A mean with nothing present prints n/a, never 0. */
static void print_mean(const char *name, const ckv_mean *m, const char *unit)
{
    if (m->present == 0)
        printf("%s: n/a (0 of %zu %s)\n", name, m->expected, unit);
    else
        printf("%s: %.2f (%zu of %zu %s%s)\n", name, m->mean, m->present, m->expected, unit,
               m->present == m->expected ? "" : ", incomplete");
}

/* Reads {"task": score, ...} and prints the benchmark's aggregates. */
static int summarize(const char *path, ckv_lb_language lang)
{
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    ckv_error err = {0};
    if (!o) {
        ckv_errorf(&err, CKV_ERR_FORMAT, "%s:%d: %s", path, je.line, je.text);
        return cli_fail("score", &err);
    }
    size_t n = json_is_object(o) ? json_object_size(o) : 0;
    ckv_task_score *s = calloc(n ? n : 1, sizeof *s);
    size_t k = 0, n_lb = 0;
    const char *key;
    json_t *v;
    ckv_status st = !json_is_object(o) || n == 0
                        ? ckv_errorf(&err, CKV_ERR_FORMAT, "%s: expected a non-empty JSON object",
                                     path)
                    : !s ? ckv_errorf(&err, CKV_ERR_NOMEM, "out of memory")
                         : CKV_OK;
    json_object_foreach(o, key, v)
    {
        if (st)
            break;
        if (!json_is_number(v))
            st = ckv_errorf(&err, CKV_ERR_FORMAT, "%s: field '%s': expected a number", path, key);
        else
            s[k++] = (ckv_task_score){key, json_number_value(v)};
        n_lb += ckv_longbench_find(key) != NULL;
    }
    if (!st && n_lb == k) {
        ckv_longbench_summary sum;
        if (!(st = ckv_longbench_summarize(s, k, lang, &sum, &err))) {
            print_mean("english16", &sum.english16, "datasets");
            for (int c = 0; c < CKV_LB_N_CATEGORIES; c++)
                print_mean(ckv_longbench_category_name((ckv_lb_category)c), &sum.category[c],
                           "datasets");
            print_mean("avg", &sum.avg, "complete categories");
        }
    } else if (!st) {
        ckv_mean m;
        if (!(st = ckv_ruler_summarize(s, k, &m, &err)))
            print_mean("ruler", &m, "tasks");
    }
    if (st)
        ckv_error_prefix(&err, "%s", path);
    free(s);
    json_decref(o);
    return st ? cli_fail("score", &err) : CLI_OK;
}

int cmd_score(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"metric", required_argument, NULL, 'm'}, {"dataset", required_argument, NULL, 'd'},
        {"pred", required_argument, NULL, 'p'},   {"answer", required_argument, NULL, 'a'},
        {"class", required_argument, NULL, 'c'},  {"jsonl", required_argument, NULL, 'j'},
        {"summary", required_argument, NULL, 's'}, {"language", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    const char *metric = NULL, *dataset = NULL, *pred = NULL, *jsonl = NULL, *summary = NULL;
    const char *language = NULL;
    const char **answers = calloc((size_t)argc, sizeof *answers);
    const char **classes = calloc((size_t)argc, sizeof *classes);
    size_t na = 0, nc = 0;
    int rc = CLI_OK;
    if (!answers || !classes) {
        fprintf(stderr, "ckv score: out of memory\n");
        rc = CLI_FAIL;
        goto done;
    }
    optind = 0;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': metric = optarg; break;
        case 'd': dataset = optarg; break;
        case 'p': pred = optarg; break;
        case 'a': answers[na++] = optarg; break;
        case 'c': classes[nc++] = optarg; break;
        case 'j': jsonl = optarg; break;
        case 's': summary = optarg; break;
        case 'l': language = optarg; break;
        case 'h': usage(stdout); goto done;
        case ':': rc = cli_usage_error("score", "%s needs a value", argv[optind - 1]); goto done;
        default: rc = cli_usage_error("score", "unknown option '%s'", argv[optind - 1]); goto done;
        }
    }
    if (optind < argc) {
        rc = cli_usage_error("score", "unexpected argument '%s'", argv[optind]);
        goto done;
    }
    if (summary || language) {
        if (!summary || metric || dataset || pred || jsonl || na || nc) {
            rc = cli_usage_error("score", "--summary FILE takes only --language");
            goto done;
        }
        if (language && strcmp(language, "en") && strcmp(language, "zh")) {
            rc = cli_usage_error("score", "--language: '%s' is not en or zh", language);
            goto done;
        }
        rc = summarize(summary, language && !strcmp(language, "zh") ? CKV_LB_ZH : CKV_LB_EN);
        goto done;
    }
    if (!metric == !dataset) {
        rc = cli_usage_error("score", "give exactly one of --metric and --dataset");
        goto done;
    }
    if (!pred == !jsonl) {
        rc = cli_usage_error("score", "give exactly one of --pred and --jsonl");
        goto done;
    }
    if (jsonl && (na || nc)) {
        rc = cli_usage_error("score", "--answer and --class go with --pred, not --jsonl");
        goto done;
    }
    ckv_metric m;
    bool first_line = false;
    ckv_error err = {0};
    if (dataset) {
        const ckv_longbench_dataset *d = ckv_longbench_find(dataset);
        if (!d) {
            rc = cli_usage_error("score", "--dataset: '%s' is not a LongBench dataset", dataset);
            goto done;
        }
        m = d->metric;
        first_line = d->first_line;
    } else if (ckv_metric_from_name(metric, &m, &err)) {
        rc = cli_usage_error("score", "--metric: %s", err.msg);
        goto done;
    }
    if (jsonl) {
        rc = score_jsonl(jsonl, m, first_line);
        goto done;
    }
    if (na == 0) {
        rc = cli_usage_error("score", "--pred needs at least one --answer");
        goto done;
    }
    double s;
    if (ckv_metric_sample(m, pred, answers, na, classes, nc, first_line, &s, &err)) {
        rc = cli_fail("score", &err);
        goto done;
    }
    print_exact(s);
done:
    free(answers);
    free(classes);
    return rc;
}
