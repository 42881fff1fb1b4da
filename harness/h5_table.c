/* HDF5 tables of C structs (h5_table.h). */
#include "h5_table.h"

#include <errno.h>
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

ckv_status ckv_h5_write_file(const char *path, const char *const *attrs, size_t n_attrs,
                             const ckv_h5_table *tables, size_t n_tables, ckv_error *err)
{
    if (unlink(path) && errno != ENOENT)
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot replace: %s", path, strerror(errno));
    hid_t file = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0)
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot create the HDF5 file", path);
    int bad = 0;
    for (size_t i = 0; i < n_attrs; i++)
        bad |= ckv_h5_write_attr(file, attrs[2 * i], attrs[2 * i + 1]);
    for (size_t i = 0; i < n_tables; i++)
        bad |= ckv_h5_write_table(file, tables[i].name, tables[i].fields, tables[i].n_fields,
                                  tables[i].row_size, tables[i].rows, tables[i].n_rows);
    if (H5Fclose(file) < 0)
        bad = -1;
    if (bad)
        return ckv_errorf(err, CKV_ERR_IO, "%s: HDF5 write of the attributes and tables failed",
                          path);
    return CKV_OK;
}
