/* Loaders: every LongBench file under $CKV_DATA_DIR loads and yields the
 * prompts Python's str.format gives (tests/fixtures/longbench_prompts.jsonl,
 * computed once outside the project); RULER records split as kvpress does;
 * malformed jsonl fails with file:line and the field; aggregates against
 * hand-derived and published numbers. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aggregate.h"
#include "datadir.h"
#include "jsonl.h"
#include "longbench.h"
#include "ruler_import.h"

/* $CKV_DATA_DIR, else the project's ../shared/data; the test fails when
 * that is not a directory rather than skipping. */
static const char *data_dir(void)
{
    const char *env = getenv("CKV_DATA_DIR");
    const char *d = ckv_data_dir(env && *env ? NULL : CKV_SOURCE_ROOT "/../shared/data");
    struct stat sb;
    cr_assert(d && stat(d, &sb) == 0 && S_ISDIR(sb.st_mode),
              "set CKV_DATA_DIR to the shared data (%s is not a directory)", d ? d : "(none)");
    return d;
}

Test(longbench, every_file_loads_with_official_prompts)
{
    ckv_longbench_config cfg;
    ckv_error err = {0};
    cr_assert_eq(ckv_longbench_config_load(data_dir(), &cfg, &err), CKV_OK, "%s", err.msg);
    FILE *fp = fopen(CKV_SOURCE_ROOT "/tests/fixtures/longbench_prompts.jsonl", "r");
    cr_assert_not_null(fp);
    char *line = NULL;
    size_t cap = 0, checked = 0;
    while (getline(&line, &cap, fp) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        cr_assert_not_null(o);
        const char *file = json_string_value(json_object_get(o, "file"));
        char path[4096];
        snprintf(path, sizeof path, "%s/longbench/%s", data_dir(), file);
        ckv_sample *s;
        size_t n;
        cr_assert_eq(ckv_longbench_load(&cfg, path, NULL, 0, &s, &n, &err), CKV_OK, "%s", err.msg);
        cr_expect_eq(n, (size_t)json_integer_value(json_object_get(o, "n_records")), "%s", file);
        size_t k = (size_t)json_integer_value(json_object_get(o, "record"));
        ckv_sample *x = &s[k];
        const char *head = json_string_value(json_object_get(o, "head"));
        const char *tail = json_string_value(json_object_get(o, "tail"));
        size_t pl = x->prompt_len;
        cr_expect_str_eq(x->id, json_string_value(json_object_get(o, "id")));
        cr_expect_eq(pl, (size_t)json_integer_value(json_object_get(o, "prompt_bytes")), "%s", file);
        cr_expect_eq(x->context_len, (size_t)json_integer_value(json_object_get(o, "context_bytes")),
                     "%s", file);
        cr_expect(!strncmp(x->prompt, head, strlen(head)), "%s: prompt head", file);
        cr_expect(pl >= strlen(tail) && !memcmp(x->prompt + pl - strlen(tail), tail, strlen(tail)),
                  "%s: tail", file);
        cr_expect_eq(x->max_new_tokens, json_integer_value(json_object_get(o, "max_new_tokens")));
        cr_expect_eq(x->n_answers, (size_t)json_integer_value(json_object_get(o, "n_answers")));
        cr_expect_eq(x->n_classes, (size_t)json_integer_value(json_object_get(o, "n_classes")));
        cr_expect_eq(x->length, json_integer_value(json_object_get(o, "length")));
        ckv_samples_free(s, n);
        json_decref(o);
        checked++;
    }
    free(line);
    fclose(fp);
    cr_expect_geq(checked, 18);
    ckv_longbench_config_free(&cfg);
}

/* Whatever jsonl files the data directory holds, each loads completely. */
Test(longbench, every_file_in_the_data_dir_loads)
{
    ckv_longbench_config cfg;
    ckv_error err = {0};
    cr_assert_eq(ckv_longbench_config_load(data_dir(), &cfg, &err), CKV_OK, "%s", err.msg);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/longbench", data_dir());
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    size_t files = 0, records = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 7 || strcmp(e->d_name + len - 6, ".jsonl"))
            continue;
        char path[4500];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ckv_sample *s;
        size_t n;
        cr_expect_eq(ckv_longbench_load(&cfg, path, NULL, 0, &s, &n, &err), CKV_OK, "%s", err.msg);
        for (size_t i = 0; i < n; i++) {
            cr_expect(s[i].context_len <= s[i].prompt_len);
            cr_expect_gt(s[i].max_new_tokens, 0);
        }
        records += n;
        ckv_samples_free(s, n);
        files++;
    }
    closedir(d);
    /* The shared data (its README.md): lcc 12, qasper 11, multifieldqa_en 8, trec 10,
     * samsum 6, triviaqa 4, and 200 each of multi_news, multifieldqa_zh and
     * passage_retrieval_zh: 9 files, 651 records. */
    cr_expect_eq(files, 9);
    cr_expect_eq(records, 651);
    ckv_longbench_config_free(&cfg);
}

/* LongBench facts from benchmarks.md §2.3 and §2.8. */
Test(longbench, dataset_facts)
{
    size_t n, en16 = 0;
    const ckv_longbench_dataset *d = ckv_longbench_datasets(&n);
    cr_expect_eq(n, 21);
    for (size_t i = 0; i < n; i++)
        en16 += d[i].english16;
    cr_expect_eq(en16, 16);
    const char *no_chat[] = {"trec", "triviaqa", "samsum", "lsht", "lcc", "repobench-p"};
    for (size_t i = 0; i < 6; i++)
        cr_expect(!ckv_longbench_find(no_chat[i])->chat_template, "%s", no_chat[i]);
    cr_expect(ckv_longbench_find("qasper")->chat_template);
    cr_expect(ckv_longbench_find("samsum")->first_line);
    cr_expect(!ckv_longbench_find("lcc")->first_line);
    cr_expect_eq(ckv_longbench_find("dureader")->metric, CKV_METRIC_ROUGE_ZH);
    cr_expect_eq(ckv_longbench_find("passage_count")->metric, CKV_METRIC_COUNT);
    cr_expect_eq(ckv_longbench_find("qasper_e"), ckv_longbench_find("qasper"));
    cr_expect_null(ckv_longbench_find("nq_open"));
    cr_expect_eq(ckv_longbench_default_max_length(8192), 7500);
    cr_expect_eq(ckv_longbench_default_max_length(4096), 3500);
    cr_expect_eq(ckv_longbench_default_max_length(32768), 32000);
    cr_expect_eq(ckv_longbench_default_max_length(1011), 0);
}

static char *write_tmp(const char *name, const char *text, size_t len)
{
    static char path[256];
    snprintf(path, sizeof path, "/tmp/ckv_test_%d_%s", (int)getpid(), name);
    FILE *fp = fopen(path, "wb");
    cr_assert_not_null(fp);
    fwrite(text, 1, len, fp);
    fclose(fp);
    return path;
}

#define GOOD "{\"input\": \"q?\", \"context\": \"c\", \"answers\": [\"a\"], \"length\": 3, " \
             "\"dataset\": \"qasper\", \"language\": \"en\", \"all_classes\": null, \"_id\": \"x\"}\n"

static void expect_error(const char *name, const char *text, size_t len, const char *want1,
                         const char *want2)
{
    ckv_longbench_config cfg;
    ckv_error err = {0};
    cr_assert_eq(ckv_longbench_config_load(data_dir(), &cfg, &err), CKV_OK, "%s", err.msg);
    char *path = write_tmp(name, text, len);
    ckv_sample *s = NULL;
    size_t n = 0;
    cr_expect_neq(ckv_longbench_load(&cfg, path, NULL, 0, &s, &n, &err), CKV_OK, "%s", name);
    char where[300];
    snprintf(where, sizeof where, "%s:%s", path, want1);
    cr_expect(strstr(err.msg, where) != NULL, "%s: '%s' lacks '%s'", name, err.msg, where);
    cr_expect(strstr(err.msg, want2) != NULL, "%s: '%s' lacks '%s'", name, err.msg, want2);
    cr_expect_null(s);
    unlink(path);
    ckv_longbench_config_free(&cfg);
}

Test(jsonl, malformed_lines_name_file_line_and_field)
{
    const char trunc[] = GOOD "{\"input\": \"q?\", \"context\": \"c\", \"ans\n";
    expect_error("trunc", trunc, sizeof trunc - 1, "2:", "invalid JSON");
    const char type[] = GOOD GOOD
        "{\"input\": 5, \"context\": \"c\", \"answers\": [\"a\"], \"length\": 3, "
        "\"dataset\": \"qasper\", \"language\": \"en\", \"all_classes\": null, \"_id\": \"x\"}\n";
    expect_error("type", type, sizeof type - 1, "3:", "field 'input': expected a string, got integer");
    const char missing[] = "{\"input\": \"q\", \"context\": \"c\", \"length\": 3, \"dataset\": "
                           "\"qasper\", \"language\": \"en\", \"all_classes\": null, \"_id\": \"x\"}\n";
    expect_error("missing", missing, sizeof missing - 1, "1:", "field 'answers' is missing");
    const char elem[] = "{\"input\": \"q\", \"context\": \"c\", \"answers\": [\"a\", 1], \"length\": 3, "
                        "\"dataset\": \"qasper\", \"language\": \"en\", \"all_classes\": null, "
                        "\"_id\": \"x\"}\n";
    expect_error("elem", elem, sizeof elem - 1, "1:", "field 'answers'[1]: expected string");
    const char utf8[] = GOOD "{\"input\": \"q\xff\", \"context\": \"c\"}\n";
    expect_error("utf8", utf8, sizeof utf8 - 1, "2:", "invalid JSON");
    const char nul[] = "{\"input\": \"q\", \"context\": \"c\", \"answers\": [\"a\\u0000\"], "
                       "\"length\": 3, \"dataset\": \"qasper\", \"language\": \"en\", "
                       "\"all_classes\": null, \"_id\": \"x\"}\n";
    expect_error("nul", nul, sizeof nul - 1, "1:", "field 'answers'[0] contains U+0000");
    const char arr[] = "\n[1, 2]\n";
    expect_error("array", arr, sizeof arr - 1, "2:", "expected a JSON object, got array");
    const char ds[] = "{\"input\": \"q\", \"context\": \"c\", \"answers\": [], \"length\": 3, "
                      "\"dataset\": \"nq_open\", \"language\": \"en\", \"all_classes\": null, "
                      "\"_id\": \"x\"}\n";
    expect_error("dataset", ds, sizeof ds - 1, "1:", "unknown LongBench dataset 'nq_open'");
    const char len[] = "{\"input\": \"q\", \"context\": \"c\", \"answers\": [], \"length\": 3.5, "
                       "\"dataset\": \"qasper\", \"language\": \"en\", \"all_classes\": null, "
                       "\"_id\": \"x\"}\n";
    expect_error("length", len, sizeof len - 1, "1:", "field 'length': expected an integer, got number");
    const char binary[] = "{\"input\": \"q\"}\0\n";
    expect_error("binary", binary, sizeof binary - 1, "1:", "invalid JSON");
}

Test(jsonl, empty_file_and_missing_file)
{
    ckv_longbench_config cfg;
    ckv_error err = {0};
    cr_assert_eq(ckv_longbench_config_load(data_dir(), &cfg, &err), CKV_OK);
    char *path = write_tmp("empty", "\n\n", 2);
    ckv_sample *s;
    size_t n;
    cr_expect_eq(ckv_longbench_load(&cfg, path, NULL, 0, &s, &n, &err), CKV_ERR_FORMAT);
    cr_expect(strstr(err.msg, "no records") != NULL, "%s", err.msg);
    unlink(path);
    cr_expect_eq(ckv_longbench_load(&cfg, "/nonexistent/x.jsonl", NULL, 0, &s, &n, &err),
                 CKV_ERR_IO);
    cr_expect(strstr(err.msg, "/nonexistent/x.jsonl") != NULL, "%s", err.msg);
    ckv_longbench_config_free(&cfg);
}

/* A niah record as RULER writes it (template text from templates.json) and
 * a qa record whose instruction appears twice: the question starts at the
 * last occurrence. */
Test(ruler, import_splits_at_the_question)
{
    ckv_ruler_config cfg;
    ckv_error err = {0};
    cr_assert_eq(ckv_ruler_config_load(data_dir(), &cfg, &err), CKV_OK, "%s", err.msg);
    const char *niah_ctx = "Some special magic numbers are hidden within the following text. Make "
                           "sure to memorize it. I will quiz you about the numbers afterwards.\n"
                           "One of the special magic numbers for tame-dog is: 1234567.\n";
    const char *niah_q = "What are all the special magic numbers for tame-dog mentioned in the "
                         "provided text?";
    const char *prefix = " The special magic numbers for tame-dog mentioned in the provided text are";
    char rec[2048];
    int len = snprintf(rec, sizeof rec,
                       "{\"index\": 7, \"input\": \"%s%s\", \"outputs\": [\"1234567\"], "
                       "\"length\": 60, \"answer_prefix\": \"%s\"}\n",
                       "Some special magic numbers are hidden within the following text. Make sure "
                       "to memorize it. I will quiz you about the numbers afterwards.\\nOne of the "
                       "special magic numbers for tame-dog is: 1234567.\\n",
                       niah_q, prefix);
    char *path = write_tmp("niah_single_1.jsonl", rec, (size_t)len);
    ckv_sample *s;
    size_t n;
    cr_assert_eq(ckv_ruler_load(&cfg, path, "niah_single_1", 0, &s, &n, &err), CKV_OK, "%s",
                 err.msg);
    cr_expect_eq(n, 1);
    cr_expect_eq(s[0].context_len, strlen(niah_ctx));
    cr_expect_str_eq(s[0].prompt + s[0].context_len, "What are all the special magic numbers for "
                     "tame-dog mentioned in the provided text? The special magic numbers for "
                     "tame-dog mentioned in the provided text are");
    cr_expect_eq(s[0].metric, CKV_METRIC_STRING_MATCH_ALL);
    cr_expect_eq(s[0].max_new_tokens, 128);
    cr_expect_str_eq(s[0].id, "7");
    cr_expect_str_eq(s[0].answers[0], "1234567");
    ckv_samples_free(s, n);
    unlink(path);

    const char qa[] = "{\"index\": 0, \"input\": \"Answer the question based on the given documents. "
                      "Only give me the answer.\\n\\nDocument 1: x\\n\\nAnswer the question based on "
                      "the given documents. Only give me the answer.\\n\\nQuestion: who?\", "
                      "\"outputs\": [\"a\", \"b\"], \"length\": 30}\n";
    char top[256], dir[300];
    snprintf(top, sizeof top, "/tmp/ckv_test_%d", (int)getpid());
    snprintf(dir, sizeof dir, "%s/qa_1", top);
    cr_assert_eq(mkdir(top, 0700), 0);
    cr_assert_eq(mkdir(dir, 0700), 0);
    char qpath[400];
    snprintf(qpath, sizeof qpath, "%s/validation.jsonl", dir);
    FILE *fp = fopen(qpath, "wb");
    fwrite(qa, 1, sizeof qa - 1, fp);
    fclose(fp);
    cr_assert_eq(ckv_ruler_load(&cfg, qpath, NULL, 0, &s, &n, &err), CKV_OK, "%s", err.msg);
    cr_expect_str_eq(s[0].task, "qa_1");
    cr_expect_str_eq(s[0].prompt + s[0].context_len,
                     "Answer the question based on the given documents. Only give me the "
                     "answer.\n\nQuestion: who?");
    cr_expect_eq(s[0].metric, CKV_METRIC_STRING_MATCH_PART);
    cr_expect_eq(s[0].max_new_tokens, 32);
    ckv_samples_free(s, n);

    const char noq[] = "{\"index\": 0, \"input\": \"no question here\", \"outputs\": [\"a\"], "
                       "\"length\": 3}\n";
    fp = fopen(qpath, "wb");
    fwrite(noq, 1, sizeof noq - 1, fp);
    fclose(fp);
    cr_expect_eq(ckv_ruler_load(&cfg, qpath, NULL, 0, &s, &n, &err), CKV_ERR_FORMAT);
    cr_expect(strstr(err.msg, "validation.jsonl:1: field 'input'") != NULL, "%s", err.msg);
    cr_expect_eq(ckv_ruler_load(&cfg, qpath, "niah_single_9", 0, &s, &n, &err), CKV_ERR_ARG);
    unlink(qpath);
    rmdir(dir);
    rmdir(top);
    ckv_ruler_config_free(&cfg);
}

Test(datadir, resolution_order)
{
    cr_expect_str_eq(ckv_data_dir("/some/dir"), "/some/dir");
    setenv("CKV_DATA_DIR", "/env/dir", 1);
    cr_expect_str_eq(ckv_data_dir(NULL), "/env/dir");
    cr_expect_str_eq(ckv_data_dir("/some/dir"), "/some/dir");
    setenv("CKV_DATA_DIR", "", 1); /* empty counts as unset */
    char top[256], sub[300], data[300];
    snprintf(top, sizeof top, "/tmp/ckv_test_%d_dd", (int)getpid());
    snprintf(sub, sizeof sub, "%s/work", top);
    snprintf(data, sizeof data, "%s/shared", top);
    cr_assert_eq(mkdir(top, 0700), 0);
    cr_assert_eq(mkdir(sub, 0700), 0);
    cr_assert_eq(chdir(sub), 0);
    cr_expect_null(ckv_data_dir(NULL)); /* no ../shared/data yet */
    cr_assert_eq(mkdir(data, 0700), 0);
    snprintf(data, sizeof data, "%s/shared/data", top);
    cr_assert_eq(mkdir(data, 0700), 0);
    cr_expect_str_eq(ckv_data_dir(NULL), "../shared/data");
    rmdir(data);
    snprintf(data, sizeof data, "%s/shared", top);
    rmdir(data);
    rmdir(sub);
    rmdir(top);
}

/* GPT-3.5's English LongBench row (benchmarks.md §2.10): category means
 * 39.8, 38.7, 26.5, 67.1, 54.1, 37.8 average to 44.0. Every dataset of a
 * category gets its category's score here. */
Test(aggregate, longbench_categories_and_average)
{
    const double cat[CKV_LB_N_CATEGORIES] = {39.8, 38.7, 26.5, 67.1, 37.8, 54.1};
    size_t nd;
    const ckv_longbench_dataset *d = ckv_longbench_datasets(&nd);
    ckv_task_score s[21];
    size_t n = 0;
    for (size_t i = 0; i < nd; i++)
        if (d[i].language != CKV_LB_ZH)
            s[n++] = (ckv_task_score){d[i].name, cat[d[i].category]};
    ckv_longbench_summary sum;
    ckv_error err = {0};
    cr_assert_eq(ckv_longbench_summarize(s, n, CKV_LB_EN, &sum, &err), CKV_OK, "%s", err.msg);
    cr_expect_eq(sum.english16.present, 16);
    cr_expect_eq(sum.english16.expected, 16);
    cr_expect_eq(sum.avg.present, 6);
    cr_expect_float_eq(sum.avg.mean, 44.0, 1e-9);
    cr_expect_float_eq(sum.category[CKV_LB_FEW_SHOT].mean, 67.1, 1e-9);
    /* English mean by hand: 3*39.8 + 3*38.7 + 3*26.5 + 3*67.1 + 2*37.8 + 2*54.1 = 700.1. */
    cr_expect_float_eq(sum.english16.mean, 700.1 / 16, 1e-9);
    /* Without trec the few-shot category is incomplete and the average too. */
    ckv_task_score t[21];
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].task, "trec"))
            t[m++] = s[i];
    cr_assert_eq(ckv_longbench_summarize(t, m, CKV_LB_EN, &sum, &err), CKV_OK);
    cr_expect_eq(sum.category[CKV_LB_FEW_SHOT].present, 2);
    cr_expect_eq(sum.category[CKV_LB_FEW_SHOT].expected, 3);
    cr_expect_eq(sum.avg.present, 5);
    cr_expect_eq(sum.english16.present, 15);
    ckv_task_score dup[2] = {{"lcc", 1}, {"lcc", 2}};
    cr_expect_eq(ckv_longbench_summarize(dup, 2, CKV_LB_EN, &sum, &err), CKV_ERR_ARG);
    ckv_task_score bad[1] = {{"lcc_e", 1}};
    cr_expect_eq(ckv_longbench_summarize(bad, 1, CKV_LB_EN, &sum, &err), CKV_ERR_ARG);
}

Test(aggregate, ruler_mean_of_13)
{
    size_t nt;
    const char *const *t = ckv_ruler_tasks(&nt);
    cr_assert_eq(nt, 13);
    ckv_task_score s[13];
    for (size_t i = 0; i < nt; i++) /* 1..13 -> mean 7 */
        s[i] = (ckv_task_score){t[i], (double)(i + 1)};
    ckv_mean m;
    ckv_error err = {0};
    cr_assert_eq(ckv_ruler_summarize(s, nt, &m, &err), CKV_OK);
    cr_expect_eq(m.present, 13);
    cr_expect_float_eq(m.mean, 7.0, 1e-12);
    cr_assert_eq(ckv_ruler_summarize(s, 12, &m, &err), CKV_OK); /* qa_2 missing */
    cr_expect_eq(m.present, 12);
    cr_expect_eq(m.expected, 13);
    cr_expect_float_eq(m.mean, 6.5, 1e-12);
    ckv_task_score bad[1] = {{"ruler_vt", 1}};
    cr_expect_eq(ckv_ruler_summarize(bad, 1, &m, &err), CKV_ERR_ARG);
}
