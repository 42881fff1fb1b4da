#include "report.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "aggregate.h"
#include "metrics.h"

typedef struct {
    const ckv_results_data *d;
    ckv_summary_row *s;
    size_t ns;
    FILE *fp;
    ckv_report_format fmt;
} rep;

static const ckv_summary_row *find(const rep *r, const char *task, int32_t length, int32_t run)
{
    for (size_t i = 0; i < r->ns; i++)
        if (r->s[i].run == run && r->s[i].length == length && !strcmp(r->s[i].task, task))
            return &r->s[i];
    return NULL;
}

static bool is_ruler(const char *metric)
{
    ckv_metric m;
    ckv_error e;
    return !ckv_metric_from_name(metric, &m, &e) && ckv_metric_is_ruler(m);
}

static void cell(const rep *r, const char *table, int32_t length, const char *run,
                 const char *col, double v, bool first, bool last)
{
    if (r->fmt == CKV_REPORT_CSV) {
        if (isnan(v))
            return;
        fprintf(r->fp, "%s,%d,\"%s\",%s,%.4f\n", table, length, run, col, v);
        return;
    }
    if (first)
        fprintf(r->fp, "| %s |", run);
    if (isnan(v))
        fprintf(r->fp, " - |");
    else
        fprintf(r->fp, " %.2f |", v);
    if (last)
        fputc('\n', r->fp);
}

static void header(const rep *r, const char *title, const char *const *cols, size_t n)
{
    if (r->fmt == CKV_REPORT_CSV)
        return;
    fprintf(r->fp, "\n### %s\n\n| run |", title);
    for (size_t i = 0; i < n; i++)
        fprintf(r->fp, " %s |", cols[i]);
    fprintf(r->fp, "\n|---|");
    for (size_t i = 0; i < n; i++)
        fprintf(r->fp, "---:|");
    fputc('\n', r->fp);
}

/* A score table: the tasks (of one benchmark, one length) found in the
 * summary, in the order of `order` when given, then first appearance. */
static void score_table(const rep *r, const char *table, int32_t length, bool ruler)
{
    const char *cols[64];
    size_t nc = 0;
    size_t n_order = 0;
    const char *const *order = ruler ? ckv_ruler_tasks(&n_order) : NULL;
    for (size_t k = 0; k <= n_order; k++)
        for (size_t i = 0; i < r->ns && nc < 63; i++) {
            const ckv_summary_row *s = &r->s[i];
            if (s->length != length || is_ruler(s->metric) != ruler)
                continue;
            if (k < n_order && strcmp(s->task, order[k]))
                continue;
            bool seen = false;
            for (size_t j = 0; j < nc; j++)
                seen |= !strcmp(cols[j], s->task);
            if (!seen)
                cols[nc++] = s->task;
        }
    if (!nc)
        return;
    cols[nc] = "mean";
    char title[96];
    snprintf(title, sizeof title, "%s%s%d", table, length ? " @ " : "", length);
    header(r, length ? title : table, cols, nc + 1);
    for (size_t ri = 0; ri < r->d->n_runs; ri++) {
        const ckv_run_row *run = &r->d->runs[ri];
        bool any = false;
        for (size_t j = 0; j < nc; j++)
            any |= find(r, cols[j], length, run->run) != NULL;
        if (!any)
            continue;
        double sum = 0;
        size_t n = 0;
        for (size_t j = 0; j < nc; j++) {
            const ckv_summary_row *s = find(r, cols[j], length, run->run);
            double v = s ? s->score : NAN;
            if (!isnan(v))
                sum += v, n++;
            cell(r, table, length, run->name, cols[j], v, j == 0, false);
        }
        /* The mean covers every column or is not given: a missing task is
         * never counted as zero. */
        cell(r, table, length, run->name, "mean", n == nc ? ckv_round2(sum / (double)n) : NAN,
             false, true);
    }
}

/* LongBench's aggregates per run (datasets/aggregate.h): the 16 English +
 * code datasets, the six category means and their average. A mean over
 * fewer datasets than it is defined for says how many it has, e.g.
 * "41.20 (6/16)"; none at all is "-". */
static void longbench_means(const rep *r)
{
    static const char *title = "LongBench means";
    const char *cols[2 + CKV_LB_N_CATEGORIES];
    size_t nc = 0;
    cols[nc++] = "EN+code 16";
    for (int c = 0; c < CKV_LB_N_CATEGORIES; c++)
        cols[nc++] = ckv_longbench_category_name((ckv_lb_category)c);
    cols[nc++] = "avg";
    bool printed = false;
    for (size_t ri = 0; ri < r->d->n_runs; ri++) {
        const ckv_run_row *run = &r->d->runs[ri];
        ckv_task_score sc[64];
        size_t n = 0;
        for (size_t i = 0; i < r->ns && n < 64; i++) {
            const ckv_summary_row *s = &r->s[i];
            if (s->run != run->run || isnan(s->score) || is_ruler(s->metric) ||
                !ckv_longbench_find(s->task))
                continue;
            bool seen = false;
            for (size_t j = 0; j < n; j++)
                seen |= !strcmp(sc[j].task, s->task);
            if (!seen)
                sc[n++] = (ckv_task_score){s->task, s->score};
        }
        ckv_longbench_summary sum;
        ckv_error e;
        if (!n || ckv_longbench_summarize(sc, n, CKV_LB_EN, &sum, &e))
            continue;
        if (!printed)
            header(r, title, cols, nc);
        printed = true;
        ckv_mean m[2 + CKV_LB_N_CATEGORIES];
        m[0] = sum.english16;
        for (int c = 0; c < CKV_LB_N_CATEGORIES; c++)
            m[1 + c] = sum.category[c];
        m[nc - 1] = sum.avg;
        if (r->fmt != CKV_REPORT_CSV)
            fprintf(r->fp, "| %s |", run->name);
        for (size_t j = 0; j < nc; j++) {
            if (r->fmt == CKV_REPORT_CSV) {
                if (m[j].present)
                    fprintf(r->fp, "%s,0,\"%s\",%s (%zu/%zu),%.4f\n", title, run->name, cols[j],
                            m[j].present, m[j].expected, m[j].mean);
            } else if (!m[j].present) {
                fprintf(r->fp, " - |");
            } else if (m[j].present == m[j].expected) {
                fprintf(r->fp, " %.2f |", m[j].mean);
            } else {
                fprintf(r->fp, " %.2f (%zu/%zu) |", m[j].mean, m[j].present, m[j].expected);
            }
        }
        if (r->fmt != CKV_REPORT_CSV)
            fputc('\n', r->fp);
    }
}

/* Per-run means over every scored row of the run, each column over the rows
 * that define it (a row that generated one token has no TPOT). */
static void run_table(const rep *r, const char *table, const char *const *cols, size_t nc,
                      void (*values)(const ckv_result_row *, double *), bool need_fidelity)
{
    bool printed = false;
    for (size_t ri = 0; ri < r->d->n_runs; ri++) {
        const ckv_run_row *run = &r->d->runs[ri];
        double sum[8] = {0}, v[8];
        size_t n[8] = {0}, rows = 0;
        for (size_t i = 0; i < r->d->n_rows; i++) {
            const ckv_result_row *row = &r->d->rows[i];
            if (row->run != run->run || strcmp(row->status, "ok") ||
                (need_fidelity && isnan(row->kl)))
                continue;
            values(row, v);
            for (size_t j = 0; j < nc; j++)
                if (!isnan(v[j])) {
                    sum[j] += v[j];
                    n[j]++;
                }
            rows++;
        }
        if (!rows)
            continue;
        if (!printed)
            header(r, table, cols, nc);
        printed = true;
        for (size_t j = 0; j < nc; j++)
            cell(r, table, 0, run->name, cols[j], n[j] ? sum[j] / (double)n[j] : NAN, j == 0,
                 j + 1 == nc);
    }
}

static void fidelity_values(const ckv_result_row *row, double *v)
{
    v[0] = row->kl;
    v[1] = 100 * row->top1;
    v[2] = row->fidelity_steps;
}

static void speed_values(const ckv_result_row *row, double *v)
{
    v[0] = row->prompt_tokens;
    v[1] = (double)row->kv_bytes / (1 << 20);
    v[2] = (double)row->kv_bytes_peak / (1 << 20);
    v[3] = row->ttft_ms;
    v[4] = row->compress_ms;
    v[5] = row->tpot_ms;
    v[6] = row->generated_tokens;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The distinct lengths of one benchmark's rows, ascending. */
static size_t lengths(const rep *r, bool ruler, int32_t *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < r->ns; i++) {
        if (is_ruler(r->s[i].metric) != ruler)
            continue;
        bool seen = false;
        for (size_t j = 0; j < n; j++)
            seen |= out[j] == r->s[i].length;
        if (!seen && n < cap)
            out[n++] = r->s[i].length;
    }
    qsort(out, n, sizeof *out, cmp_i32);
    return n;
}

ckv_status ckv_report_write(FILE *fp, const ckv_results_data *d, ckv_report_format fmt,
                            ckv_error *err)
{
    rep r = {.d = d, .fp = fp, .fmt = fmt};
    ckv_status st = ckv_results_summarize(d->rows, d->n_rows, d->runs, d->n_runs, &r.s, &r.ns,
                                          err);
    if (st)
        return st;
    if (fmt == CKV_REPORT_CSV)
        fprintf(fp, "table,length,run,column,value\n");
    else
        fprintf(fp, "## Results (%s, %zu rows, device %s, %s)\n", d->meta.config_path,
                d->n_rows, d->meta.device, d->meta.mode);
    int32_t lens[64];
    size_t nl = lengths(&r, true, lens, 64);
    for (size_t i = 0; i < nl; i++)
        score_table(&r, "RULER", lens[i], true);
    nl = lengths(&r, false, lens, 64);
    for (size_t i = 0; i < nl; i++)
        score_table(&r, "LongBench", lens[i], false);
    longbench_means(&r);
    static const char *const fcols[] = {"KL (nats/step)", "top-1 agree %", "steps"};
    run_table(&r, "Fidelity", fcols, 3, fidelity_values, true);
    static const char *const scols[] = {"prompt tok", "KV MiB", "KV MiB peak", "TTFT ms",
                                        "compress ms", "TPOT ms", "gen tok"};
    run_table(&r, "Speed", scols, 7, speed_values, false);
    ckv_summary_free(r.s, r.ns);
    if (ferror(fp))
        return ckv_errorf(err, CKV_ERR_IO, "report: write error");
    return CKV_OK;
}

/* "centroid@25% r_init=0.3" -> "centroid r_init=0.3". */
static void method_label(const ckv_run_row *run, char *out, size_t size)
{
    snprintf(out, size, "%s%s%s", run->policy, run->params_set[0] ? " " : "", run->params_set);
}

ckv_status ckv_report_plot_files(const ckv_results_data *d, const char *dir, ckv_error *err)
{
    char path[4096];
    const char *names[2] = {"score_vs_budget", "tpot_vs_budget"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/%s.dat", dir, names[k]);
        FILE *fp = fopen(path, "w");
        if (!fp)
            return ckv_errorf(err, CKV_ERR_IO, "%s: cannot write", path);
        /* One gnuplot data block per method: runs of one policy and the
         * same parameters, i.e. the run name without its "@budget". */
        bool *used = calloc(d->n_runs ? d->n_runs : 1, sizeof *used);
        if (!used) {
            fclose(fp);
            return ckv_errorf(err, CKV_ERR_NOMEM, "plots: out of memory");
        }
        for (size_t i = 0; i < d->n_runs; i++) {
            char label[512];
            method_label(&d->runs[i], label, sizeof label);
            if (used[i] || !d->runs[i].budget_spec[0])
                continue;
            fprintf(fp, "\"%s\" \"budget\" \"value\"\n", label);
            for (size_t i2 = i; i2 < d->n_runs; i2++) {
                char l2[512];
                method_label(&d->runs[i2], l2, sizeof l2);
                if (strcmp(l2, label) || !d->runs[i2].budget_spec[0])
                    continue;
                used[i2] = true;
                double sum = 0, budget = 0;
                size_t n = 0;
                for (size_t j = 0; j < d->n_rows; j++) {
                    const ckv_result_row *row = &d->rows[j];
                    if (row->run != d->runs[i2].run || strcmp(row->status, "ok"))
                        continue;
                    sum += k ? row->tpot_ms : 100 * row->score;
                    budget = row->budget;
                    n++;
                }
                if (n)
                    fprintf(fp, "- %g %g\n", budget, sum / (double)n);
            }
            fprintf(fp, "\n\n");
        }
        free(used);
        if (fclose(fp))
            return ckv_errorf(err, CKV_ERR_IO, "%s: write error", path);
    }
    snprintf(path, sizeof path, "%s/plots.gp", dir);
    FILE *fp = fopen(path, "w");
    if (!fp)
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot write", path);
    fprintf(fp,
            "set terminal pngcairo size 900,600\nset key outside right\nset grid\n"
            "set xlabel 'budget (fraction of prompt)'\n"
            "set output '%s/score_vs_budget.png'\nset ylabel 'score (x100)'\n"
            "plot for [i=0:*] '%s/score_vs_budget.dat' index i using 2:3 with linespoints "
            "title columnheader(1)\n"
            "set output '%s/tpot_vs_budget.png'\nset ylabel 'decode time per token (ms)'\n"
            "plot for [i=0:*] '%s/tpot_vs_budget.dat' index i using 2:3 with linespoints "
            "title columnheader(1)\n",
            dir, dir, dir, dir);
    if (fclose(fp))
        return ckv_errorf(err, CKV_ERR_IO, "%s: write error", path);
    return CKV_OK;
}
