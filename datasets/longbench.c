#include "longbench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define D(name, metric, cat, lang, en16, first, chat) \
    {name, CKV_METRIC_##metric, CKV_LB_##cat, CKV_LB_##lang, en16, first, chat}

static const ckv_longbench_dataset datasets[] = {
    D("narrativeqa", QA_F1, SINGLE_DOC_QA, EN, true, false, true),
    D("qasper", QA_F1, SINGLE_DOC_QA, EN, true, false, true),
    D("multifieldqa_en", QA_F1, SINGLE_DOC_QA, EN, true, false, true),
    D("multifieldqa_zh", QA_F1_ZH, SINGLE_DOC_QA, ZH, false, false, true),
    D("hotpotqa", QA_F1, MULTI_DOC_QA, EN, true, false, true),
    D("2wikimqa", QA_F1, MULTI_DOC_QA, EN, true, false, true),
    D("musique", QA_F1, MULTI_DOC_QA, EN, true, false, true),
    D("dureader", ROUGE_ZH, MULTI_DOC_QA, ZH, false, false, true),
    D("gov_report", ROUGE, SUMMARIZATION, EN, true, false, true),
    D("qmsum", ROUGE, SUMMARIZATION, EN, true, false, true),
    D("multi_news", ROUGE, SUMMARIZATION, EN, true, false, true),
    D("vcsum", ROUGE_ZH, SUMMARIZATION, ZH, false, false, true),
    D("trec", CLASSIFICATION, FEW_SHOT, EN, true, true, false),
    D("triviaqa", QA_F1, FEW_SHOT, EN, true, true, false),
    D("samsum", ROUGE, FEW_SHOT, EN, true, true, false),
    D("lsht", CLASSIFICATION, FEW_SHOT, ZH, false, true, false),
    D("passage_count", COUNT, SYNTHETIC, EN, true, false, true),
    D("passage_retrieval_en", RETRIEVAL, SYNTHETIC, EN, true, false, true),
    D("passage_retrieval_zh", RETRIEVAL_ZH, SYNTHETIC, ZH, false, false, true),
    D("lcc", CODE_SIM, CODE, CODE_LANG, true, false, false),
    D("repobench-p", CODE_SIM, CODE, CODE_LANG, true, false, false),
};
#undef D

const ckv_longbench_dataset *ckv_longbench_datasets(size_t *n)
{
    *n = sizeof datasets / sizeof datasets[0];
    return datasets;
}

const ckv_longbench_dataset *ckv_longbench_find(const char *name)
{
    size_t len = strlen(name);
    if (len > 2 && !strcmp(name + len - 2, "_e"))
        len -= 2;
    for (size_t i = 0; i < sizeof datasets / sizeof datasets[0]; i++)
        if (strlen(datasets[i].name) == len && !strncmp(datasets[i].name, name, len))
            return &datasets[i];
    return NULL;
}

const char *ckv_longbench_category_name(ckv_lb_category c)
{
    static const char *const names[CKV_LB_N_CATEGORIES] = {
        "Single-document QA", "Multi-document QA", "Summarization",
        "Few-shot learning",  "Synthetic",         "Code completion"};
    return (unsigned)c < CKV_LB_N_CATEGORIES ? names[c] : "unknown";
}

static ckv_status load_json_object(const char *dir, const char *name, json_t **out,
                                   ckv_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/longbench/config/%s", dir, name);
    json_error_t je;
    *out = json_load_file(path, 0, &je);
    if (!*out)
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s:%d: %s", path, je.line, je.text);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: expected a JSON object", path);
    }
    return CKV_OK;
}

ckv_status ckv_longbench_config_load(const char *data_dir, ckv_longbench_config *cfg,
                                     ckv_error *err)
{
    memset(cfg, 0, sizeof *cfg);
    if ((size_t)snprintf(cfg->dir, sizeof cfg->dir, "%s", data_dir) >= sizeof cfg->dir)
        return ckv_errorf(err, CKV_ERR_ARG, "data directory path is too long");
    ckv_status st = load_json_object(data_dir, "dataset2prompt.json", &cfg->prompts, err);
    if (!st)
        st = load_json_object(data_dir, "dataset2maxlen.json", &cfg->maxlen, err);
    if (st)
        ckv_longbench_config_free(cfg);
    return st;
}

void ckv_longbench_config_free(ckv_longbench_config *cfg)
{
    json_decref(cfg->prompts);
    json_decref(cfg->maxlen);
    cfg->prompts = cfg->maxlen = NULL;
}

typedef struct {
    char *p;
    size_t n, cap;
} buf;

static bool put(buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *np = realloc(b->p, cap);
        if (!np)
            return false;
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

/* Python str.format for templates whose replacement fields are plain names
 * of string fields of the record; "{{" and "}}" are literal braces. Records
 * where the filled {context} ends in *context_end. Values may hold U+0000,
 * so lengths are tracked. */
static ckv_status format_template(const ckv_jsonl *r, const char *tmpl, const char *tmpl_name,
                                  json_t *rec, char **out, size_t *out_len, size_t *context_end,
                                  ckv_error *err)
{
    buf b = {0};
    bool have_context = false;
    ckv_status st = CKV_OK;
    const char *p = tmpl;
    while (*p && !st) {
        const char *brace = strpbrk(p, "{}");
        size_t lit = brace ? (size_t)(brace - p) : strlen(p);
        if (!put(&b, p, lit)) {
            st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory formatting a prompt");
            break;
        }
        p += lit;
        if (!*p)
            break;
        if (p[0] == p[1]) { /* "{{" or "}}" */
            if (!put(&b, p, 1))
                st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory formatting a prompt");
            p += 2;
            continue;
        }
        const char *close = p[0] == '{' ? strchr(p, '}') : NULL;
        if (!close) {
            st = ckv_errorf(err, CKV_ERR_FORMAT, "template %s: single '%c' at offset %zu",
                            tmpl_name, *p, (size_t)(p - tmpl));
            break;
        }
        char name[64];
        size_t nl = (size_t)(close - p - 1);
        if (nl == 0 || nl >= sizeof name) {
            st = ckv_errorf(err, CKV_ERR_FORMAT, "template %s: unsupported field at offset %zu",
                            tmpl_name, (size_t)(p - tmpl));
            break;
        }
        memcpy(name, p + 1, nl);
        name[nl] = 0;
        const char *val;
        size_t vlen;
        if ((st = ckv_jsonl_string(r, rec, name, true, &val, &vlen, err)))
            break;
        if (!put(&b, val, vlen)) {
            st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory formatting a prompt");
            break;
        }
        if (!strcmp(name, "context")) {
            have_context = true;
            *context_end = b.n;
        }
        p = close + 1;
    }
    if (!st && !have_context)
        st = ckv_errorf(err, CKV_ERR_FORMAT, "template %s has no {context} field", tmpl_name);
    if (!st && !b.p && !put(&b, "", 0))
        st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory formatting a prompt");
    if (st) {
        free(b.p);
        return st;
    }
    *out = b.p;
    *out_len = b.n;
    return CKV_OK;
}

ckv_status ckv_longbench_import(const ckv_longbench_config *cfg, const ckv_jsonl *r, json_t *rec,
                                const char *dataset, ckv_sample *out, ckv_error *err)
{
    memset(out, 0, sizeof *out);
    const char *input, *context, *ds, *lang, *id;
    size_t input_len, context_len;
    const char **answers = NULL, **classes = NULL;
    size_t n_answers = 0, n_classes = 0;
    int64_t length = 0;
    ckv_status st;
    if ((st = ckv_jsonl_string(r, rec, "input", true, &input, &input_len, err)) ||
        (st = ckv_jsonl_string(r, rec, "context", true, &context, &context_len, err)) ||
        (st = ckv_jsonl_string(r, rec, "dataset", true, &ds, NULL, err)) ||
        (st = ckv_jsonl_string(r, rec, "language", true, &lang, NULL, err)) ||
        (st = ckv_jsonl_string(r, rec, "_id", true, &id, NULL, err)) ||
        (st = ckv_jsonl_int(r, rec, "length", true, &length, NULL, err)))
        return st;
    if (!json_object_get(rec, "all_classes"))
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s:%zu: field 'all_classes' is missing",
                          ckv_jsonl_path(r), ckv_jsonl_line(r));
    if ((st = ckv_jsonl_strings(r, rec, "answers", true, &answers, &n_answers, err)))
        return st;
    if ((st = ckv_jsonl_strings(r, rec, "all_classes", false, &classes, &n_classes, err))) {
        free(answers);
        return st;
    }
    const char *name = dataset ? dataset : ds;
    const ckv_longbench_dataset *info = ckv_longbench_find(name);
    json_t *tmpl = info ? json_object_get(cfg->prompts, info->name) : NULL;
    json_t *maxlen = info ? json_object_get(cfg->maxlen, info->name) : NULL;
    if (!info)
        st = ckv_errorf(err, CKV_ERR_FORMAT, "%s:%zu: unknown LongBench dataset '%s'",
                        ckv_jsonl_path(r), ckv_jsonl_line(r), name);
    else if (!json_is_string(tmpl))
        st = ckv_errorf(err, CKV_ERR_FORMAT,
                        "%s/longbench/config/dataset2prompt.json: no template string for '%s'",
                        cfg->dir, info->name);
    else if (!json_is_integer(maxlen) || json_integer_value(maxlen) <= 0 ||
             json_integer_value(maxlen) > INT32_MAX)
        st = ckv_errorf(err, CKV_ERR_FORMAT,
                        "%s/longbench/config/dataset2maxlen.json: no positive integer for '%s'",
                        cfg->dir, info->name);
    if (!st)
        st = format_template(r, json_string_value(tmpl), info->name, rec, &out->prompt,
                             &out->prompt_len, &out->context_len, err);
    if (!st) {
        out->task = ckv_strndup(info->name, strlen(info->name));
        out->id = ckv_strndup(id, strlen(id));
        if (!out->task || !out->id)
            st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory importing a record");
    }
    if (!st)
        st = ckv_strings_dup(answers, n_answers, &out->answers, &out->n_answers, err);
    if (!st)
        st = ckv_strings_dup(classes, n_classes, &out->classes, &out->n_classes, err);
    free(answers);
    free(classes);
    if (st) {
        ckv_sample_free(out);
        return st;
    }
    out->metric = info->metric;
    out->max_new_tokens = (int32_t)json_integer_value(maxlen);
    out->chat_template = info->chat_template;
    out->first_line = info->first_line;
    out->length = length;
    return CKV_OK;
}

typedef struct {
    const ckv_longbench_config *cfg;
    const char *dataset;
} lb_ctx;

static ckv_status lb_import(const void *ctx, const ckv_jsonl *r, json_t *rec, ckv_sample *out,
                            ckv_error *err)
{
    const lb_ctx *c = ctx;
    return ckv_longbench_import(c->cfg, r, rec, c->dataset, out, err);
}

ckv_status ckv_longbench_load(const ckv_longbench_config *cfg, const char *path,
                              const char *dataset, size_t max_samples, ckv_sample **out, size_t *n,
                              ckv_error *err)
{
    lb_ctx c = {cfg, dataset};
    return ckv_samples_load(path, lb_import, &c, max_samples, out, n, err);
}

int32_t ckv_longbench_default_max_length(int64_t n_ctx)
{
    if (n_ctx - 512 < 500)
        return 0;
    int64_t m = (n_ctx - 512) / 500 * 500;
    return m > INT32_MAX ? INT32_MAX / 500 * 500 : (int32_t)m;
}
