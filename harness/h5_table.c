/* HDF5 tables of C structs (h5_table.h). */
#include "h5_table.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

hid_t ckv_h5_str_type(void)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    return t;
}

hid_t ckv_h5_compound(const ckv_h5_field *f, size_t n, size_t size)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, size), s = ckv_h5_str_type();
    for (size_t i = 0; i < n; i++) {
        hid_t ft = f[i].t == CKV_H5_I32   ? H5T_NATIVE_INT32
                   : f[i].t == CKV_H5_I64 ? H5T_NATIVE_INT64
                   : f[i].t == CKV_H5_F64 ? H5T_NATIVE_DOUBLE
                                          : s;
        H5Tinsert(t, f[i].name, f[i].off, ft);
    }
    H5Tclose(s);
    return t;
}

hid_t ckv_h5_create_table(hid_t file, const char *name, hid_t type)
{
    hsize_t dims = 0, maxd = H5S_UNLIMITED, chunk = 256;
    hid_t sp = H5Screate_simple(1, &dims, &maxd), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    hid_t ds = H5Dcreate2(file, name, type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Sclose(sp);
    return ds;
}

int ckv_h5_append_rows(hid_t ds, hid_t type, const void *rows, size_t n)
{
    if (!n)
        return 0;
    hid_t sp = H5Dget_space(ds);
    hsize_t cur;
    H5Sget_simple_extent_dims(sp, &cur, NULL);
    H5Sclose(sp);
    hsize_t total = cur + n, count = n;
    if (H5Dset_extent(ds, &total) < 0)
        return -1;
    sp = H5Dget_space(ds);
    H5Sselect_hyperslab(sp, H5S_SELECT_SET, &cur, NULL, &count, NULL);
    hid_t mem = H5Screate_simple(1, &count, NULL);
    herr_t r = H5Dwrite(ds, type, mem, sp, H5P_DEFAULT, rows);
    H5Sclose(mem);
    H5Sclose(sp);
    return r < 0 ? -1 : 0;
}

int ckv_h5_write_attr(hid_t obj, const char *name, const char *value)
{
    hid_t t = ckv_h5_str_type(), sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = a < 0 ? -1 : H5Awrite(a, t, &value);
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    return r < 0 ? -1 : 0;
}

int ckv_h5_write_table(hid_t file, const char *name, const ckv_h5_field *f, size_t nf, size_t size,
                       const void *rows, size_t n)
{
    if (H5Lexists(file, name, H5P_DEFAULT) > 0 && H5Ldelete(file, name, H5P_DEFAULT) < 0)
        return -1;
    hid_t t = ckv_h5_compound(f, nf, size), ds = ckv_h5_create_table(file, name, t);
    int r = ds < 0 ? -1 : ckv_h5_append_rows(ds, t, rows, n);
    if (ds >= 0)
        H5Dclose(ds);
    H5Tclose(t);
    return r;
}

/* Closes what s holds (any of it may be unopened: negative ids). */
static int stream_release(ckv_h5_stream *s)
{
    int bad = 0;
    for (size_t i = 0; i < s->n_tables; i++) {
        if (s->ds[i] >= 0)
            bad |= H5Dclose(s->ds[i]) < 0;
        if (s->type[i] >= 0)
            bad |= H5Tclose(s->type[i]) < 0;
        s->ds[i] = s->type[i] = -1;
    }
    if (s->file >= 0)
        bad |= H5Fclose(s->file) < 0;
    s->file = -1;
    return bad ? -1 : 0;
}

ckv_status ckv_h5_stream_open(ckv_h5_stream *s, const char *path, const char *const *attrs,
                              size_t n_attrs, const ckv_h5_table *tables, size_t n_tables,
                              ckv_error *err)
{
    memset(s, 0, sizeof *s);
    s->file = -1;
    if (n_tables > CKV_H5_STREAM_TABLES)
        return ckv_errorf(err, CKV_ERR_ARG, "%s: %zu tables (at most %d)", path, n_tables,
                          CKV_H5_STREAM_TABLES);
    if (strlen(path) >= sizeof s->path)
        return ckv_errorf(err, CKV_ERR_ARG, "%s: path too long", path);
    strcpy(s->path, path);
    snprintf(s->part, sizeof s->part, "%s.part", path);
    if (unlink(s->part) && errno != ENOENT)
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot replace: %s", s->part, strerror(errno));
    /* HDF5's own report of a failed create is a 15-line stack; the error
     * returned says it in one. */
    H5E_auto2_t report;
    void *report_data;
    H5Eget_auto2(H5E_DEFAULT, &report, &report_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    errno = 0;
    s->file = H5Fcreate(s->part, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    const int why = errno;  /* the file driver's open(2), when that failed */
    H5Eset_auto2(H5E_DEFAULT, report, report_data);
    if (s->file < 0)
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot create the HDF5 file: %s", s->part,
                          why ? strerror(why) : "HDF5 refused it");
    int bad = ckv_h5_write_attr(s->file, "status", "running");
    for (size_t i = 0; i < n_attrs; i++)
        bad |= ckv_h5_write_attr(s->file, attrs[2 * i], attrs[2 * i + 1]);
    s->n_tables = n_tables;
    for (size_t i = 0; i < n_tables; i++) {
        s->type[i] = ckv_h5_compound(tables[i].fields, tables[i].n_fields, tables[i].row_size);
        s->ds[i] = s->type[i] < 0 ? -1 : ckv_h5_create_table(s->file, tables[i].name, s->type[i]);
        bad |= s->ds[i] < 0 ? -1 : 0;
    }
    if (bad || H5Fflush(s->file, H5F_SCOPE_GLOBAL) < 0) {
        stream_release(s);
        unlink(s->part);
        return ckv_errorf(err, CKV_ERR_IO, "%s: HDF5 write of the attributes and tables failed",
                          s->part);
    }
    return CKV_OK;
}

ckv_status ckv_h5_stream_append(ckv_h5_stream *s, size_t i, const void *rows, size_t n,
                                ckv_error *err)
{
    if (i >= s->n_tables || s->file < 0)
        return ckv_errorf(err, CKV_ERR_ARG, "%s: no table %zu open", s->part, i);
    if (ckv_h5_append_rows(s->ds[i], s->type[i], rows, n) < 0 ||
        H5Fflush(s->file, H5F_SCOPE_GLOBAL) < 0)
        return ckv_errorf(err, CKV_ERR_IO, "%s: HDF5 write of %zu rows failed", s->part, n);
    s->rows += n;
    return CKV_OK;
}

/* Overwrites the root's string attribute `name` in place (no moment
 * without it). */
static int rewrite_attr(hid_t file, const char *name, const char *value)
{
    hid_t a = H5Aopen(file, name, H5P_DEFAULT), t = ckv_h5_str_type();
    herr_t r = a < 0 ? -1 : H5Awrite(a, t, &value);
    if (a >= 0)
        H5Aclose(a);
    H5Tclose(t);
    return r < 0 ? -1 : 0;
}

ckv_status ckv_h5_stream_close(ckv_h5_stream *s, const char *status, ckv_error *err)
{
    if (s->file < 0)
        return CKV_OK;
    const bool complete = !strcmp(status, "complete");
    int bad = rewrite_attr(s->file, "status", status);
    bad |= stream_release(s);
    if (bad)
        return ckv_errorf(err, CKV_ERR_IO, "%s: HDF5 close failed", s->part);
    if (complete && rename(s->part, s->path))
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot rename to %s: %s", s->part, s->path,
                          strerror(errno));
    if (!complete && !s->rows)
        unlink(s->part);
    return CKV_OK;
}

ckv_status ckv_h5_write_file(const char *path, const char *const *attrs, size_t n_attrs,
                             const ckv_h5_table *tables, size_t n_tables, ckv_error *err)
{
    ckv_h5_stream s;
    ckv_status st = ckv_h5_stream_open(&s, path, attrs, n_attrs, tables, n_tables, err);
    for (size_t i = 0; i < n_tables && !st; i++)
        st = ckv_h5_stream_append(&s, i, tables[i].rows, tables[i].n_rows, err);
    ckv_error close_err;
    const ckv_status cst = ckv_h5_stream_close(&s, st ? "failed" : "complete", &close_err);
    if (!st && cst)
        *err = close_err;
    if (st || cst)
        unlink(s.part);  /* a one-shot file is whole or absent (close keeps rows) */
    return st ? st : cst;
}
