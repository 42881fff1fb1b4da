#include "ruler_import.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "regex.h"
#include "util.h"

ckv_status ckv_ruler_config_load(const char *data_dir, ckv_ruler_config *cfg, ckv_error *err)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->path, sizeof cfg->path, "%s/ruler/templates.json", data_dir);
    json_error_t je;
    cfg->templates = json_load_file(cfg->path, 0, &je);
    if (!cfg->templates)
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s:%d: %s", cfg->path, je.line, je.text);
    if (!json_is_object(json_object_get(cfg->templates, "tasks")) ||
        !json_is_object(json_object_get(cfg->templates, "task_types")) ||
        !json_is_object(json_object_get(cfg->templates, "metric_by_task_type"))) {
        ckv_ruler_config_free(cfg);
        return ckv_errorf(err, CKV_ERR_FORMAT,
                          "%s: expected objects 'tasks', 'task_types' and 'metric_by_task_type'",
                          cfg->path);
    }
    return CKV_OK;
}

void ckv_ruler_config_free(ckv_ruler_config *cfg)
{
    json_decref(cfg->templates);
    cfg->templates = NULL;
}

ckv_status ckv_ruler_task_from_path(const char *path, char *out, size_t cap, ckv_error *err)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *start = base, *end = base + strlen(base);
    if (!strcmp(base, "validation.jsonl") && base > path) {
        end = base - 1;
        start = end;
        while (start > path && start[-1] != '/')
            start--;
    } else if (end - base > 6 && !strcmp(end - 6, ".jsonl")) {
        end -= 6;
    }
    if (end <= start || (size_t)(end - start) >= cap)
        return ckv_errorf(err, CKV_ERR_ARG, "%s: cannot tell the RULER task from the path; pass "
                          "--task", path);
    memcpy(out, start, (size_t)(end - start));
    out[end - start] = 0;
    return CKV_OK;
}

/* kvpress's context/question split regexes, per RULER task type. */
static const char *question_regex(const char *type)
{
    static const struct {
        const char *type, *re;
    } table[] = {
        {"niah", "What (?:is|are all) the special magic"},
        {"variable_tracking", "Question: Find all variables that are assigned the value"},
        {"common_words_extraction",
         "Question: What are the 10 most common words in the above list\\?"},
        {"freq_words_extraction", "Question: Do not provide any explanation\\."},
        {"qa", "Answer the question based on the given documents\\."},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(type, table[i].type))
            return table[i].re;
    return NULL;
}

ckv_status ckv_ruler_import(const ckv_ruler_config *cfg, const ckv_jsonl *r, json_t *rec,
                            const char *task, ckv_sample *out, ckv_error *err)
{
    memset(out, 0, sizeof *out);
    const char *input, *prefix;
    size_t ni, np;
    const char **outputs = NULL;
    size_t n_outputs = 0;
    int64_t index = 0, length = 0;
    ckv_status st;
    if ((st = ckv_jsonl_int(r, rec, "index", true, &index, NULL, err)) ||
        (st = ckv_jsonl_string(r, rec, "input", true, &input, &ni, err)) ||
        (st = ckv_jsonl_int(r, rec, "length", true, &length, NULL, err)) ||
        (st = ckv_jsonl_string(r, rec, "answer_prefix", false, &prefix, &np, err)) ||
        (st = ckv_jsonl_strings(r, rec, "outputs", true, &outputs, &n_outputs, err)))
        return st;
    json_t *t = json_object_get(json_object_get(cfg->templates, "tasks"), task);
    const char *type = json_string_value(json_object_get(t, "task"));
    json_t *tt = type ? json_object_get(json_object_get(cfg->templates, "task_types"), type) : NULL;
    json_t *tokens = json_object_get(tt, "tokens_to_generate");
    const char *metric_name =
        type ? json_string_value(json_object_get(json_object_get(cfg->templates,
                                                                 "metric_by_task_type"),
                                                 type))
             : NULL;
    const char *re = type ? question_regex(type) : NULL;
    ckv_metric metric = CKV_METRIC_STRING_MATCH_ALL;
    if (!type || !re)
        st = ckv_errorf(err, CKV_ERR_ARG, "%s: unknown RULER task '%s'", cfg->path, task);
    else if (!json_is_integer(tokens) || json_integer_value(tokens) <= 0 ||
             json_integer_value(tokens) > INT32_MAX)
        st = ckv_errorf(err, CKV_ERR_FORMAT, "%s: task type '%s' has no tokens_to_generate",
                        cfg->path, type);
    else if (!metric_name)
        st = ckv_errorf(err, CKV_ERR_FORMAT, "%s: no metric for task type '%s'", cfg->path, type);
    else if ((st = ckv_metric_from_name(metric_name, &metric, err)))
        ckv_error_prefix(err, "%s", cfg->path);
    if (st) {
        free(outputs);
        return st;
    }
    ckv_span *m = NULL;
    size_t nm = 0;
    if ((st = ckv_utf8_check(input, ni, "input", err)) ||
        (st = ckv_re_findall(re, 0, 0, input, ni, &m, &nm, err))) {
        free(outputs);
        return st;
    }
    if (nm == 0) {
        free(outputs);
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s:%zu: field 'input': no question matching '%s'",
                          ckv_jsonl_path(r), ckv_jsonl_line(r), re);
    }
    out->context_len = m[nm - 1].off;
    free(m);
    char id[32];
    snprintf(id, sizeof id, "%" PRId64, index);
    out->task = ckv_strndup(task, strlen(task));
    out->id = ckv_strndup(id, strlen(id));
    out->prompt = malloc(ni + np + 1);
    if (!out->task || !out->id || !out->prompt)
        st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory importing a record");
    else {
        memcpy(out->prompt, input, ni);
        memcpy(out->prompt + ni, prefix ? prefix : "", np);
        out->prompt[ni + np] = 0;
        out->prompt_len = ni + np;
        st = ckv_strings_dup(outputs, n_outputs, &out->answers, &out->n_answers, err);
    }
    free(outputs);
    if (st) {
        ckv_sample_free(out);
        return st;
    }
    out->metric = metric;
    out->max_new_tokens = (int32_t)json_integer_value(tokens);
    out->chat_template = false; /* RULER's model template is already in `input` */
    out->first_line = false;
    out->length = length;
    return CKV_OK;
}

typedef struct {
    const ckv_ruler_config *cfg;
    const char *task;
} ruler_ctx;

static ckv_status ruler_import(const void *ctx, const ckv_jsonl *r, json_t *rec, ckv_sample *out,
                               ckv_error *err)
{
    const ruler_ctx *c = ctx;
    return ckv_ruler_import(c->cfg, r, rec, c->task, out, err);
}

ckv_status ckv_ruler_load(const ckv_ruler_config *cfg, const char *path, const char *task,
                          size_t max_samples, ckv_sample **out, size_t *n, ckv_error *err)
{
    char name[256];
    ckv_status st = task ? CKV_OK : ckv_ruler_task_from_path(path, name, sizeof name, err);
    if (st)
        return st;
    ruler_ctx c = {cfg, task ? task : name};
    return ckv_samples_load(path, ruler_import, &c, max_samples, out, n, err);
}
