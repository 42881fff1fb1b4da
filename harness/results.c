/* HDF5 results file. One table of fields per compound type drives its
 * HDF5 type, so the C structs and the file schema cannot drift apart. */
#include "results.h"

#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "h5_table.h"
#include "metrics.h"
#include "util.h"

#define FS(n, t) {#n, offsetof(ckv_result_row, n), t}
static const ckv_h5_field sample_fields[] = {
    FS(unit, CKV_H5_I64), FS(task, CKV_H5_STR), FS(length, CKV_H5_I32), FS(sample, CKV_H5_I32),
    FS(run, CKV_H5_I32), FS(policy, CKV_H5_STR), FS(budget, CKV_H5_F64),
    FS(budget_spec, CKV_H5_STR), FS(budget_entries, CKV_H5_I64), FS(metric, CKV_H5_STR),
    FS(score, CKV_H5_F64), FS(prompt_tokens, CKV_H5_I32), FS(kv_entries, CKV_H5_I64),
    FS(kv_bytes, CKV_H5_I64), FS(kv_entries_peak, CKV_H5_I64), FS(kv_bytes_peak, CKV_H5_I64),
    FS(ttft_ms, CKV_H5_F64), FS(compress_ms, CKV_H5_F64), FS(tpot_ms, CKV_H5_F64),
    FS(generated_tokens, CKV_H5_I32), FS(prediction, CKV_H5_STR), FS(device, CKV_H5_STR),
    FS(status, CKV_H5_STR), FS(kl, CKV_H5_F64), FS(top1, CKV_H5_F64),
    FS(fidelity_steps, CKV_H5_I32),
};
#undef FS
#define FR(n, t) {#n, offsetof(ckv_run_row, n), t}
static const ckv_h5_field run_fields[] = {
    FR(run, CKV_H5_I32), FR(name, CKV_H5_STR), FR(policy, CKV_H5_STR), FR(budget_spec, CKV_H5_STR),
    FR(params, CKV_H5_STR), FR(params_set, CKV_H5_STR),
};
#undef FR
#define FM(n, t) {#n, offsetof(ckv_summary_row, n), t}
static const ckv_h5_field summary_fields[] = {
    FM(task, CKV_H5_STR), FM(length, CKV_H5_I32), FM(run, CKV_H5_I32), FM(name, CKV_H5_STR),
    FM(metric, CKV_H5_STR), FM(n, CKV_H5_I32), FM(skipped, CKV_H5_I32), FM(score, CKV_H5_F64),
    FM(ttft_ms, CKV_H5_F64), FM(tpot_ms, CKV_H5_F64), FM(compress_ms, CKV_H5_F64),
    FM(kv_bytes, CKV_H5_F64), FM(kl, CKV_H5_F64), FM(top1, CKV_H5_F64),
};
#undef FM
#define NF(a) (sizeof a / sizeof a[0])

#define FM_META(n) {#n, offsetof(ckv_results_meta, n), CKV_H5_STR}
static const ckv_h5_field meta_fields[] = {
    FM_META(tool_version), FM_META(git_rev), FM_META(model_path), FM_META(model_sha256),
    FM_META(config_path), FM_META(config_text), FM_META(config_hash), FM_META(device),
    FM_META(host), FM_META(start_time), FM_META(mode),
};
#undef FM_META

struct ckv_results {
    hid_t file, samples, type;
    char *path;
};

static ckv_status h5_fail(ckv_error *err, const char *path, const char *what)
{
    return ckv_errorf(err, CKV_ERR_IO, "%s: HDF5 %s failed", path, what);
}

ckv_status ckv_results_create(ckv_results **out, const char *path, const ckv_results_meta *meta,
                              const ckv_run_row *runs, size_t n_runs, ckv_error *err)
{
    /* Attributes live in the object header, which holds under 64 KiB. */
    for (size_t i = 0; i < NF(meta_fields); i++)
        if (strlen(*(char *const *)((const char *)meta + meta_fields[i].off)) > 60000)
            return ckv_errorf(err, CKV_ERR_ARG,
                              "%s: attribute %s is over 60000 bytes (a config that long cannot "
                              "be recorded)",
                              path, meta_fields[i].name);
    ckv_results *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
    }
    /* Unlink, then create exclusively: truncating in place would wreck a
     * file another process still writes. */
    if (unlink(path) && errno != ENOENT) {
        free(r->path);
        free(r);
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot replace: %s", path, strerror(errno));
    }
    r->file = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    if (r->file < 0) {
        free(r->path);
        free(r);
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot create the results file", path);
    }
    int bad = ckv_h5_write_attr(r->file, "format", "ckv-results") |
              ckv_h5_write_attr(r->file, "version", "1");
    for (size_t i = 0; i < NF(meta_fields); i++)
        bad |= ckv_h5_write_attr(r->file, meta_fields[i].name,
                                 *(char *const *)((const char *)meta + meta_fields[i].off));
    bad |= ckv_h5_write_table(r->file, "/runs", run_fields, NF(run_fields), sizeof(ckv_run_row),
                              runs, n_runs);
    bad |= ckv_h5_write_table(r->file, "/summary", summary_fields, NF(summary_fields),
                              sizeof(ckv_summary_row), NULL, 0);
    r->type = ckv_h5_compound(sample_fields, NF(sample_fields), sizeof(ckv_result_row));
    r->samples = ckv_h5_create_table(r->file, "/samples", r->type);
    if (bad || r->samples < 0 || H5Fflush(r->file, H5F_SCOPE_GLOBAL) < 0) {
        ckv_results_close(r);
        return h5_fail(err, path, "write of the attributes and tables");
    }
    *out = r;
    return CKV_OK;
}

ckv_status ckv_results_open(ckv_results **out, const char *path, ckv_error *err)
{
    ckv_results *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
    }
    r->samples = -1;
    r->file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (r->file >= 0)
        r->samples = H5Dopen2(r->file, "/samples", H5P_DEFAULT);
    r->type = ckv_h5_compound(sample_fields, NF(sample_fields), sizeof(ckv_result_row));
    if (r->samples < 0) {
        ckv_results_close(r);
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot open as a results file for appending",
                          path);
    }
    *out = r;
    return CKV_OK;
}

ckv_status ckv_results_append(ckv_results *r, const ckv_result_row *rows, size_t n,
                              ckv_error *err)
{
    if (ckv_h5_append_rows(r->samples, r->type, rows, n) < 0 ||
        H5Fflush(r->file, H5F_SCOPE_GLOBAL) < 0)
        return h5_fail(err, r->path, "append to /samples");
    return CKV_OK;
}

void ckv_results_close(ckv_results *r)
{
    if (!r)
        return;
    if (r->samples >= 0)
        H5Dclose(r->samples);
    if (r->type > 0)
        H5Tclose(r->type);
    if (r->file >= 0)
        H5Fclose(r->file);
    free(r->path);
    free(r);
}

/* Reads a whole 1-D compound table into a malloc'd array; strings are
 * HDF5-allocated (freed by free_strings). */
static int read_table(hid_t file, const char *name, const ckv_h5_field *f, size_t nf,
                      size_t size, void **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    hid_t ds = H5Dopen2(file, name, H5P_DEFAULT);
    if (ds < 0)
        return -1;
    hid_t sp = H5Dget_space(ds), t = ckv_h5_compound(f, nf, size);
    hsize_t cur = 0;
    int r = H5Sget_simple_extent_ndims(sp) == 1 ? 0 : -1;
    if (!r)
        H5Sget_simple_extent_dims(sp, &cur, NULL);
    if (!r && cur) {
        *out = calloc(cur, size);
        r = !*out || H5Dread(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) < 0 ? -1 : 0;
    }
    *n = r ? 0 : cur;
    H5Tclose(t);
    H5Sclose(sp);
    H5Dclose(ds);
    return r;
}

static void free_strings(void *rows, size_t n, const ckv_h5_field *f, size_t nf, size_t size)
{
    for (size_t i = 0; rows && i < n; i++)
        for (size_t j = 0; j < nf; j++)
            if (f[j].t == CKV_H5_STR)
                H5free_memory(*(char **)((char *)rows + i * size + f[j].off));
    free(rows);
}

static char *read_attr(hid_t obj, const char *name)
{
    if (H5Aexists(obj, name) <= 0)
        return NULL;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT), t = ckv_h5_str_type();
    char *v = NULL;
    if (a < 0 || H5Aread(a, t, &v) < 0)
        v = NULL;
    if (a >= 0)
        H5Aclose(a);
    H5Tclose(t);
    return v;
}

ckv_status ckv_results_summarize(const ckv_result_row *rows, size_t n, const ckv_run_row *runs,
                                 size_t n_runs, ckv_summary_row **out, size_t *n_out,
                                 ckv_error *err)
{
    ckv_summary_row *s = NULL;
    size_t ns = 0;
    double *scores = n ? malloc(n * sizeof *scores) : NULL;
    size_t *group = n ? malloc(n * sizeof *group) : NULL;
    if (n && (!scores || !group))
        goto nomem;
    for (size_t i = 0; i < n; i++) {
        const ckv_result_row *r = &rows[i];
        size_t g = 0;
        while (g < ns && !(s[g].run == r->run && s[g].length == r->length &&
                           !strcmp(s[g].task, r->task)))
            g++;
        if (g == ns) {
            ckv_summary_row *ns2 = realloc(s, (ns + 1) * sizeof *s);
            if (!ns2)
                goto nomem;
            s = ns2;
            memset(&s[ns], 0, sizeof *s);
            s[ns].task = strdup(r->task);
            s[ns].metric = strdup(r->metric);
            s[ns].length = r->length;
            s[ns].run = r->run;
            const char *name = "";
            for (size_t k = 0; k < n_runs; k++)
                if (runs[k].run == r->run)
                    name = runs[k].name;
            s[ns].name = strdup(name);
            ns++;
            if (!s[g].task || !s[g].metric || !s[g].name)
                goto nomem;
        }
        group[i] = g;
    }
    for (size_t g = 0; g < ns; g++) {
        ckv_summary_row *m = &s[g];
        size_t k = 0;
        double sums[6] = {0};
        for (size_t i = 0; i < n; i++) {
            if (group[i] != g)
                continue;
            const ckv_result_row *r = &rows[i];
            if (strcmp(r->status, "ok")) {
                m->skipped++;
                continue;
            }
            scores[k++] = r->score;
            double v[6] = {r->ttft_ms, r->tpot_ms, r->compress_ms, (double)r->kv_bytes, r->kl,
                           r->top1};
            for (int j = 0; j < 6; j++)
                sums[j] += v[j];
        }
        m->n = (int32_t)k;
        ckv_metric met;
        ckv_error e2;
        if (!k || ckv_metric_from_name(m->metric, &met, &e2))
            m->score = NAN;
        else
            m->score = ckv_metric_task_score(met, scores, k);
        double *dst[6] = {&m->ttft_ms, &m->tpot_ms, &m->compress_ms, &m->kv_bytes, &m->kl,
                          &m->top1};
        for (int j = 0; j < 6; j++)
            *dst[j] = k ? sums[j] / (double)k : NAN;
    }
    free(scores);
    free(group);
    *out = s;
    *n_out = ns;
    return CKV_OK;
nomem:
    free(scores);
    free(group);
    ckv_summary_free(s, ns);
    return ckv_errorf(err, CKV_ERR_NOMEM, "summary: out of memory");
}

void ckv_summary_free(ckv_summary_row *s, size_t n)
{
    for (size_t i = 0; s && i < n; i++) {
        free(s[i].task);
        free(s[i].name);
        free(s[i].metric);
    }
    free(s);
}

static ckv_status read_all(hid_t file, const char *path, ckv_results_data *d, ckv_error *err)
{
    memset(d, 0, sizeof *d);
    char *format = read_attr(file, "format");
    bool ok = format && !strcmp(format, "ckv-results");
    H5free_memory(format);
    if (!ok)
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: not a ckv results file (attribute format)",
                          path);
    for (size_t i = 0; i < NF(meta_fields); i++)
        *(char **)((char *)&d->meta + meta_fields[i].off) = read_attr(file, meta_fields[i].name);
    void *rows, *runs;
    if (read_table(file, "/samples", sample_fields, NF(sample_fields), sizeof(ckv_result_row),
                   &rows, &d->n_rows) < 0 ||
        (d->rows = rows, read_table(file, "/runs", run_fields, NF(run_fields),
                                    sizeof(ckv_run_row), &runs, &d->n_runs) < 0)) {
        ckv_results_data_free(d);
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: cannot read /samples or /runs", path);
    }
    d->runs = runs;
    for (size_t i = 0; i < NF(meta_fields); i++)
        if (!*(char **)((char *)&d->meta + meta_fields[i].off)) {
            ckv_results_data_free(d);
            return ckv_errorf(err, CKV_ERR_FORMAT, "%s: root attribute '%s' missing", path,
                              meta_fields[i].name);
        }
    return CKV_OK;
}

ckv_status ckv_results_finish(ckv_results *r, ckv_error *err)
{
    ckv_results_data d;
    ckv_status st = read_all(r->file, r->path, &d, err);
    ckv_summary_row *s = NULL;
    size_t ns = 0;
    if (!st)
        st = ckv_results_summarize(d.rows, d.n_rows, d.runs, d.n_runs, &s, &ns, err);
    if (!st && (ckv_h5_write_table(r->file, "/summary", summary_fields, NF(summary_fields),
                                   sizeof(ckv_summary_row), s, ns) < 0 ||
                H5Fflush(r->file, H5F_SCOPE_GLOBAL) < 0))
        st = h5_fail(err, r->path, "write of /summary");
    ckv_summary_free(s, ns);
    ckv_results_data_free(&d);
    ckv_results_close(r);
    return st;
}

ckv_status ckv_results_read(const char *path, ckv_results_data *d, ckv_error *err)
{
    memset(d, 0, sizeof *d);
    hid_t f;
    H5E_BEGIN_TRY
    {
        f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    }
    H5E_END_TRY;
    if (f < 0)
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot open as HDF5", path);
    ckv_status st = read_all(f, path, d, err);
    H5Fclose(f);
    return st;
}

void ckv_results_data_free(ckv_results_data *d)
{
    for (size_t i = 0; i < NF(meta_fields); i++)
        H5free_memory(*(char **)((char *)&d->meta + meta_fields[i].off));
    free_strings(d->rows, d->n_rows, sample_fields, NF(sample_fields), sizeof(ckv_result_row));
    free_strings(d->runs, d->n_runs, run_fields, NF(run_fields), sizeof(ckv_run_row));
    memset(d, 0, sizeof *d);
}

size_t ckv_results_row_size(const ckv_result_row *r)
{
    size_t n = 0;
    for (size_t i = 0; i < NF(sample_fields); i++) {
        const ckv_h5_field *f = &sample_fields[i];
        const char *p = (const char *)r + f->off;
        n += f->t == CKV_H5_I32 ? 4 : f->t == CKV_H5_STR ? 4 + strlen(*(char *const *)p) : 8;
    }
    return n;
}

void ckv_results_row_encode(const ckv_result_row *r, uint8_t *out)
{
    for (size_t i = 0; i < NF(sample_fields); i++) {
        const ckv_h5_field *f = &sample_fields[i];
        const char *p = (const char *)r + f->off;
        if (f->t == CKV_H5_STR) {
            const char *s = *(char *const *)p;
            uint32_t len = (uint32_t)strlen(s);
            memcpy(out, &len, 4);
            memcpy(out + 4, s, len);
            out += 4 + len;
        } else {
            size_t k = f->t == CKV_H5_I32 ? 4 : 8;
            memcpy(out, p, k);
            out += k;
        }
    }
}

void ckv_results_row_free(ckv_result_row *r)
{
    for (size_t i = 0; i < NF(sample_fields); i++)
        if (sample_fields[i].t == CKV_H5_STR) {
            char **s = (char **)((char *)r + sample_fields[i].off);
            free(*s);
            *s = NULL;
        }
}

ckv_status ckv_results_row_decode(const uint8_t *in, size_t len, size_t *used,
                                  ckv_result_row *out, ckv_error *err)
{
    memset(out, 0, sizeof *out);
    size_t at = 0;
    for (size_t i = 0; i < NF(sample_fields); i++) {
        const ckv_h5_field *f = &sample_fields[i];
        char *p = (char *)out + f->off;
        size_t k = f->t == CKV_H5_I32 || f->t == CKV_H5_STR ? 4 : 8;
        if (len - at < k)
            goto short_row;
        if (f->t != CKV_H5_STR) {
            memcpy(p, in + at, k);
            at += k;
            continue;
        }
        uint32_t n;
        memcpy(&n, in + at, 4);
        at += 4;
        if (len - at < n)
            goto short_row;
        if (!(*(char **)p = ckv_strndup((const char *)in + at, n))) {
            ckv_results_row_free(out);
            return ckv_errorf(err, CKV_ERR_NOMEM, "row field %s: out of memory", f->name);
        }
        at += n;
    }
    *used = at;
    return CKV_OK;
short_row:
    ckv_results_row_free(out);
    return ckv_errorf(err, CKV_ERR_FORMAT, "encoded row: %zu bytes end inside its fields", len);
}
