#include "aggregate.h"

#include <string.h>

static void add(ckv_mean *m, double v)
{
    m->mean += v;
    m->present++;
}

static void finish(ckv_mean *m)
{
    if (m->present)
        m->mean /= (double)m->present;
}

static ckv_status check_unique(const ckv_task_score *s, size_t n, ckv_error *err)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i; j++)
            if (!strcmp(s[i].task, s[j].task))
                return ckv_errorf(err, CKV_ERR_ARG, "task '%s' is scored twice", s[i].task);
    return CKV_OK;
}

ckv_status ckv_longbench_summarize(const ckv_task_score *scores, size_t n,
                                   ckv_lb_language language, ckv_longbench_summary *out,
                                   ckv_error *err)
{
    memset(out, 0, sizeof *out);
    ckv_status st = check_unique(scores, n, err);
    if (st)
        return st;
    size_t nd;
    const ckv_longbench_dataset *ds = ckv_longbench_datasets(&nd);
    for (size_t i = 0; i < nd; i++) {
        out->english16.expected += ds[i].english16;
        if (ds[i].language == language || ds[i].language == CKV_LB_CODE_LANG)
            out->category[ds[i].category].expected++;
    }
    for (size_t i = 0; i < n; i++) {
        const ckv_longbench_dataset *d = ckv_longbench_find(scores[i].task);
        if (!d || strcmp(d->name, scores[i].task))
            return ckv_errorf(err, CKV_ERR_ARG, "'%s' is not a LongBench dataset", scores[i].task);
        if (d->english16)
            add(&out->english16, scores[i].score);
        if (d->language == language || d->language == CKV_LB_CODE_LANG)
            add(&out->category[d->category], scores[i].score);
    }
    finish(&out->english16);
    out->avg.expected = CKV_LB_N_CATEGORIES;
    for (int c = 0; c < CKV_LB_N_CATEGORIES; c++) {
        finish(&out->category[c]);
        if (out->category[c].present == out->category[c].expected)
            add(&out->avg, out->category[c].mean);
    }
    finish(&out->avg);
    return CKV_OK;
}

static const char *const ruler_tasks[] = {
    "niah_single_1",   "niah_single_2",   "niah_single_3",   "niah_multikey_1", "niah_multikey_2",
    "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt",              "cwe",
    "fwe",             "qa_1",            "qa_2",
};

const char *const *ckv_ruler_tasks(size_t *n)
{
    *n = sizeof ruler_tasks / sizeof ruler_tasks[0];
    return ruler_tasks;
}

ckv_status ckv_ruler_summarize(const ckv_task_score *scores, size_t n, ckv_mean *out,
                               ckv_error *err)
{
    memset(out, 0, sizeof *out);
    ckv_status st = check_unique(scores, n, err);
    if (st)
        return st;
    size_t nt;
    const char *const *t = ckv_ruler_tasks(&nt);
    out->expected = nt;
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < nt && strcmp(t[k], scores[i].task))
            k++;
        if (k == nt)
            return ckv_errorf(err, CKV_ERR_ARG, "'%s' is not one of RULER's 13 tasks",
                              scores[i].task);
        add(out, scores[i].score);
    }
    finish(out);
    return CKV_OK;
}
