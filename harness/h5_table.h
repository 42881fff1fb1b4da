/* HDF5 tables of C structs: a table of fields (name, offset, type) drives
 * the compound type, so a struct and its file schema cannot drift apart.
 * Used by the sweep results (results.c) and the benchmark files. Helpers
 * return a negative value on failure, as HDF5 does. */
#ifndef CKV_H5_TABLE_H
#define CKV_H5_TABLE_H

#include <hdf5.h>
#include <stddef.h>

#include "status.h"

typedef enum { CKV_H5_I32, CKV_H5_I64, CKV_H5_F64, CKV_H5_STR } ckv_h5_type;
typedef struct {
    const char *name;
    size_t off;
    ckv_h5_type t;  /* CKV_H5_STR: a char * member, variable-length UTF-8 in the file */
} ckv_h5_field;

hid_t ckv_h5_str_type(void);
hid_t ckv_h5_compound(const ckv_h5_field *f, size_t n, size_t size);
/* An empty, chunked, extendible 1-D table. */
hid_t ckv_h5_create_table(hid_t file, const char *name, hid_t type);
int ckv_h5_append_rows(hid_t ds, hid_t type, const void *rows, size_t n);
/* A scalar string attribute. */
int ckv_h5_write_attr(hid_t obj, const char *name, const char *value);
/* Writes a whole table anew (replacing an old one of that name). */
int ckv_h5_write_table(hid_t file, const char *name, const ckv_h5_field *f, size_t nf, size_t size,
                       const void *rows, size_t n);

typedef struct {
    const char *name;           /* "/attention" */
    const ckv_h5_field *fields;
    size_t n_fields, row_size;
    const void *rows;
    size_t n_rows;
} ckv_h5_table;

/* A file written as it goes, so that a run killed midway keeps the rows it
 * finished, while `path` holds only whole runs. ckv_h5_stream_open makes
 * PATH.part (an old one unlinked first) with string attributes attrs[0] =
 * attrs[1], attrs[2] = attrs[3], ... (n_attrs pairs) and a "status"
 * attribute "running" on its root, and the given tables empty (their rows
 * are not written: only their names and fields are read); nothing is left
 * when it fails. ckv_h5_stream_append adds rows to table i and flushes the
 * file. ckv_h5_stream_close sets "status" and closes it, whatever failed
 * before: "complete" renames it over `path` (an old file replaced whole);
 * any other status (why the run stopped) leaves it as PATH.part beside an
 * untouched `path`, or removes it when it holds no rows. A run killed
 * outright leaves PATH.part "running". */
enum { CKV_H5_STREAM_TABLES = 4, CKV_H5_PATH_MAX = 4096 };
typedef struct {
    hid_t file;
    size_t n_tables;
    hid_t ds[CKV_H5_STREAM_TABLES], type[CKV_H5_STREAM_TABLES];
    size_t rows; /* appended so far, over all tables */
    char path[CKV_H5_PATH_MAX], part[CKV_H5_PATH_MAX + 8];
} ckv_h5_stream;
ckv_status ckv_h5_stream_open(ckv_h5_stream *s, const char *path, const char *const *attrs,
                              size_t n_attrs, const ckv_h5_table *tables, size_t n_tables,
                              ckv_error *err);
ckv_status ckv_h5_stream_append(ckv_h5_stream *s, size_t i, const void *rows, size_t n,
                                ckv_error *err);
ckv_status ckv_h5_stream_close(ckv_h5_stream *s, const char *status, ckv_error *err);

/* A whole file at once: ckv_h5_stream_open, every table's rows, then
 * ckv_h5_stream_close with "complete"; on a failure PATH.part is removed and
 * `path` is untouched. */
ckv_status ckv_h5_write_file(const char *path, const char *const *attrs, size_t n_attrs,
                             const ckv_h5_table *tables, size_t n_tables, ckv_error *err);

#endif
