#include "kvfile.h"

#include <hdf5.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* HDF5 would print its own error stack; we report through ckv_error. */
static void quiet(void)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static bool exists(hid_t f, const char *name)
{
    return H5Lexists(f, name, H5P_DEFAULT) > 0;
}

/* Opens dataset name, checks its type class and rank, returns its dims. */
static ckv_status open_ds(hid_t f, const char *path, const char *name, H5T_class_t cls, int rank,
                          hsize_t *dims, hid_t *out, ckv_error *err)
{
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    if (ds < 0)
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: missing dataset '%s'", path, name);
    hid_t t = H5Dget_type(ds), sp = H5Dget_space(ds);
    H5T_class_t c = H5Tget_class(t);
    int r = H5Sget_simple_extent_ndims(sp);
    if (r == rank)
        H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Tclose(t);
    H5Sclose(sp);
    if (c != cls) {
        H5Dclose(ds);
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: dataset '%s' has type class %d, expected %s",
                          path, name, (int)c, cls == H5T_FLOAT ? "float" : "integer");
    }
    if (r != rank) {
        H5Dclose(ds);
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: dataset '%s' has rank %d, expected %d", path,
                          name, r, rank);
    }
    *out = ds;
    return CKV_OK;
}

/* Checks dims[0..n) against want (names for the message). */
static ckv_status check_dims(const char *path, const char *name, const hsize_t *dims,
                             const hsize_t *want, int n, ckv_error *err)
{
    for (int i = 0; i < n; i++)
        if (dims[i] != want[i])
            return ckv_errorf(err, CKV_ERR_FORMAT,
                              "%s: dataset '%s' dimension %d is %llu, expected %llu (as in 'k')",
                              path, name, i, (unsigned long long)dims[i],
                              (unsigned long long)want[i]);
    return CKV_OK;
}

static ckv_status read_ds(hid_t ds, hid_t memtype, void *buf, const char *path, const char *name,
                          ckv_error *err)
{
    herr_t r = H5Dread(ds, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    H5Dclose(ds);
    if (r < 0)
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: cannot read dataset '%s'", path, name);
    return CKV_OK;
}

/* Every value of list rows [0, len) finite (and >= lo when lo > -inf). */
static ckv_status check_values(const ckv_cache *c, const float *base, int32_t width, double lo,
                               const char *path, const char *name, ckv_error *err)
{
    for (int32_t l = 0; l < c->n_layer; l++)
        for (int32_t h = 0; h < c->n_head_kv; h++) {
            int32_t lh = ckv_cache_lh(c, l, h);
            const float *x = base + (size_t)lh * c->capacity * width;
            for (int64_t i = 0; i < (int64_t)c->len[lh] * width; i++)
                if (!isfinite(x[i]) || x[i] < lo)
                    return ckv_errorf(err, CKV_ERR_NUMERIC,
                                      "%s: dataset '%s' [%d, %d, %lld] is %g (must be finite%s)",
                                      path, name, l, h, (long long)(i / width), (double)x[i],
                                      lo > -INFINITY ? " and >= 1" : "");
        }
    return CKV_OK;
}

static ckv_status read_int_attr(hid_t f, const char *name, int64_t *out, bool *found)
{
    *found = false;
    if (H5Aexists(f, name) <= 0)
        return CKV_OK;
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    herr_t r = a < 0 ? -1 : H5Aread(a, H5T_NATIVE_INT64, out);
    if (a >= 0)
        H5Aclose(a);
    *found = r >= 0;
    return r < 0 ? CKV_ERR_FORMAT : CKV_OK;
}

/* Reads a fixed- or variable-length string attribute (NULL if absent). */
static ckv_status read_str_attr(hid_t f, const char *name, char **out)
{
    *out = NULL;
    if (H5Aexists(f, name) <= 0)
        return CKV_OK;
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    if (a < 0)
        return CKV_ERR_FORMAT;
    hid_t t = H5Aget_type(a);
    ckv_status st = CKV_ERR_FORMAT;
    if (H5Tget_class(t) == H5T_STRING) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        if (H5Tis_variable_str(t) > 0) {
            char *s = NULL;
            H5Tset_size(mt, H5T_VARIABLE);
            H5Tset_cset(mt, H5Tget_cset(t));
            if (H5Aread(a, mt, &s) >= 0 && s) {
                *out = strdup(s);
                H5free_memory(s);
                st = *out ? CKV_OK : CKV_ERR_NOMEM;
            }
        } else {
            size_t n = H5Tget_size(t);
            H5Tset_size(mt, n + 1);
            *out = calloc(n + 2, 1);
            if (*out && H5Aread(a, mt, *out) >= 0)
                st = CKV_OK;
        }
        H5Tclose(mt);
    }
    H5Tclose(t);
    H5Aclose(a);
    return st;
}

void ckv_kvdump_free(ckv_kvdump *d)
{
    if (d->cache.len)
        ckv_cache_free(&d->cache);
    free(d->q_window);
    free(d->model);
    free(d->prompt);
    memset(d, 0, sizeof *d);
}

static ckv_status read_body(hid_t f, const char *path, ckv_kvdump *d, ckv_error *err)
{
    hsize_t kd[4], vd[4], x[4];
    hid_t ds;
    ckv_status st = open_ds(f, path, "k", H5T_FLOAT, 4, kd, &ds, err);
    if (st)
        return st;
    H5Dclose(ds);
    if ((st = open_ds(f, path, "v", H5T_FLOAT, 4, vd, &ds, err)))
        return st;
    H5Dclose(ds);
    if ((st = check_dims(path, "v", vd, kd, 4, err)))
        return st;
    if (!kd[0] || !kd[1] || !kd[2] || !kd[3])
        return ckv_errorf(err, CKV_ERR_FORMAT,
                          "%s: empty cache: dataset 'k' has shape [%llu, %llu, %llu, %llu]", path,
                          (unsigned long long)kd[0], (unsigned long long)kd[1],
                          (unsigned long long)kd[2], (unsigned long long)kd[3]);
    if (kd[0] > 4096 || kd[1] > 4096 || kd[2] > INT32_MAX / 2 || kd[3] > 65536 ||
        kd[0] * kd[1] * kd[2] * kd[3] > ((hsize_t)1 << 36))
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: dataset 'k' shape is implausibly large", path);
    bool has_score = exists(f, "h2o_score");
    if ((st = ckv_cache_init(&d->cache, (int32_t)kd[0], (int32_t)kd[1], (int32_t)kd[3],
                             (int32_t)kd[2], has_score, err)))
        return ckv_error_prefix(err, "%s: ", path);
    ckv_cache *c = &d->cache;
    int32_t lists = c->n_layer * c->n_head_kv;
    if ((st = open_ds(f, path, "k", H5T_FLOAT, 4, x, &ds, err)) ||
        (st = read_ds(ds, H5T_NATIVE_FLOAT, c->k, path, "k", err)) ||
        (st = open_ds(f, path, "v", H5T_FLOAT, 4, x, &ds, err)) ||
        (st = read_ds(ds, H5T_NATIVE_FLOAT, c->v, path, "v", err)))
        return st;
    if (exists(f, "length")) {
        if ((st = open_ds(f, path, "length", H5T_INTEGER, 2, x, &ds, err)))
            return st;
        if ((st = check_dims(path, "length", x, kd, 2, err))) {
            H5Dclose(ds);
            return st;
        }
        if ((st = read_ds(ds, H5T_NATIVE_INT32, c->len, path, "length", err)))
            return st;
        for (int32_t i = 0; i < lists; i++)
            if (c->len[i] < 1 || c->len[i] > c->capacity)
                return ckv_errorf(err, CKV_ERR_FORMAT,
                                  "%s: dataset 'length' [%d, %d] is %d, must lie in [1, %d]%s",
                                  path, i / c->n_head_kv, i % c->n_head_kv, c->len[i],
                                  c->capacity, c->len[i] == 0 ? " (empty cache)" : "");
    } else {
        for (int32_t i = 0; i < lists; i++)
            c->len[i] = c->capacity;
    }
    hsize_t want3[3] = {kd[0], kd[1], kd[2]};
    if (exists(f, "degree")) {
        if ((st = open_ds(f, path, "degree", H5T_FLOAT, 3, x, &ds, err)))
            return st;
        if ((st = check_dims(path, "degree", x, want3, 3, err))) {
            H5Dclose(ds);
            return st;
        }
        if ((st = read_ds(ds, H5T_NATIVE_FLOAT, c->deg, path, "degree", err)) ||
            (st = check_values(c, c->deg, 1, 1.0, path, "degree", err)))
            return st;
    } else {
        for (size_t i = 0; i < (size_t)lists * c->capacity; i++)
            c->deg[i] = 1;
    }
    if (has_score) {
        if ((st = open_ds(f, path, "h2o_score", H5T_FLOAT, 3, x, &ds, err)))
            return st;
        if ((st = check_dims(path, "h2o_score", x, want3, 3, err))) {
            H5Dclose(ds);
            return st;
        }
        if ((st = read_ds(ds, H5T_NATIVE_FLOAT, c->score, path, "h2o_score", err)) ||
            (st = check_values(c, c->score, 1, -INFINITY, path, "h2o_score", err)))
            return st;
    }
    if ((st = check_values(c, c->k, c->head_dim, -INFINITY, path, "k", err)) ||
        (st = check_values(c, c->v, c->head_dim, -INFINITY, path, "v", err)))
        return st;
    if (exists(f, "q_window")) {
        if ((st = open_ds(f, path, "q_window", H5T_FLOAT, 4, x, &ds, err)))
            return st;
        if (x[0] != kd[0] || x[3] != kd[3] || !x[1] || x[1] % kd[1] || x[1] > 65536 || !x[2] ||
            x[2] > 65536) {
            H5Dclose(ds);
            return ckv_errorf(err, CKV_ERR_FORMAT,
                              "%s: dataset 'q_window' has shape [%llu, %llu, %llu, %llu]; "
                              "expected [%llu, a multiple of %llu, W >= 1, %llu]",
                              path, (unsigned long long)x[0], (unsigned long long)x[1],
                              (unsigned long long)x[2], (unsigned long long)x[3],
                              (unsigned long long)kd[0], (unsigned long long)kd[1],
                              (unsigned long long)kd[3]);
        }
        size_t n = (size_t)(x[0] * x[1] * x[2] * x[3]);
        d->n_head = (int32_t)x[1];
        d->w = (int32_t)x[2];
        if (!(d->q_window = malloc(n * sizeof(float)))) {
            H5Dclose(ds);
            return ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory for q_window", path);
        }
        if ((st = read_ds(ds, H5T_NATIVE_FLOAT, d->q_window, path, "q_window", err)))
            return st;
        for (size_t i = 0; i < n; i++)
            if (!isfinite(d->q_window[i]))
                return ckv_errorf(err, CKV_ERR_NUMERIC,
                                  "%s: dataset 'q_window' element %zu is %g (must be finite)",
                                  path, i, (double)d->q_window[i]);
    }
    int64_t v;
    bool found;
    d->prompt_tokens = c->capacity;
    if (read_int_attr(f, "prompt_tokens", &v, &found))
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: attribute 'prompt_tokens' is not an integer",
                          path);
    if (found) {
        if (v < 1)
            return ckv_errorf(err, CKV_ERR_FORMAT, "%s: attribute 'prompt_tokens' is %lld", path,
                              (long long)v);
        d->prompt_tokens = v;
    }
    if (read_int_attr(f, "csm_round", &v, &found))
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: attribute 'csm_round' is not an integer",
                          path);
    if (found) {
        if (v < 0 || v > INT32_MAX)
            return ckv_errorf(err, CKV_ERR_FORMAT, "%s: attribute 'csm_round' is %lld", path,
                              (long long)v);
        c->round = (int32_t)v;
    }
    c->n_pos = d->prompt_tokens;
    if (read_str_attr(f, "model", &d->model) || read_str_attr(f, "prompt", &d->prompt))
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: attribute 'model' or 'prompt' is not a string",
                          path);
    return CKV_OK;
}

ckv_status ckv_kvfile_read(const char *path, ckv_kvdump *d, ckv_error *err)
{
    memset(d, 0, sizeof *d);
    quiet();
    if (access(path, R_OK))
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot open for reading", path);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: not an HDF5 file", path);
    ckv_status st = read_body(f, path, d, err);
    H5Fclose(f);
    if (st)
        ckv_kvdump_free(d);
    return st;
}

/* Writes a dataset of the given memory type and shape from buf. */
static bool write_ds(hid_t f, const char *name, hid_t filetype, hid_t memtype, int rank,
                     const hsize_t *dims, const void *buf)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t ds = H5Dcreate2(f, name, filetype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    bool ok = ds >= 0 && H5Dwrite(ds, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0;
    if (ds >= 0)
        H5Dclose(ds);
    H5Sclose(sp);
    return ok;
}

static bool write_int_attr(hid_t f, const char *name, int64_t v, hid_t type)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    bool ok = a >= 0 && H5Awrite(a, H5T_NATIVE_INT64, &v) >= 0;
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    return ok;
}

/* Variable-length UTF-8 string attribute (read back as str by h5py). */
static bool write_str_attr(hid_t f, const char *name, const char *s)
{
    if (!s)
        return true;
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    bool ok = a >= 0 && H5Awrite(a, t, &s) >= 0;
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    return ok;
}

/* Copies rows [0, len) of every list of base (width floats per row) into a
 * dense [lists][tokens][width] buffer, zero past each length. */
static float *dense(const ckv_cache *c, const float *base, int32_t width, int32_t tokens)
{
    size_t lists = (size_t)c->n_layer * c->n_head_kv, row = (size_t)tokens * width;
    float *out = calloc(lists * row + 1, sizeof *out);
    if (!out)
        return NULL;
    for (size_t i = 0; i < lists; i++)
        memcpy(out + i * row, base + i * (size_t)c->capacity * width,
               (size_t)c->len[i] * width * sizeof *out);
    return out;
}

static bool write_body(hid_t f, const ckv_cache *c, const ckv_kvfile_extra *x)
{
    int32_t tokens = ckv_cache_max_len(c);
    hsize_t d4[4] = {(hsize_t)c->n_layer, (hsize_t)c->n_head_kv, (hsize_t)tokens,
                     (hsize_t)c->head_dim};
    float *k = dense(c, c->k, c->head_dim, tokens), *v = dense(c, c->v, c->head_dim, tokens);
    float *deg = dense(c, c->deg, 1, tokens), *sc = c->score ? dense(c, c->score, 1, tokens) : NULL;
    bool ok = k && v && deg && (!c->score || sc) &&
              write_ds(f, "k", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, d4, k) &&
              write_ds(f, "v", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, d4, v) &&
              write_ds(f, "degree", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, d4, deg) &&
              write_ds(f, "length", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, d4, c->len) &&
              (!sc || write_ds(f, "h2o_score", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, d4, sc));
    free(k);
    free(v);
    free(deg);
    free(sc);
    if (ok && x && x->q_window) {
        hsize_t q4[4] = {(hsize_t)c->n_layer, (hsize_t)x->n_head, (hsize_t)x->w,
                         (hsize_t)c->head_dim};
        ok = write_ds(f, "q_window", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, q4, x->q_window);
    }
    if (ok && x && x->assign) {
        hsize_t a3[3] = {(hsize_t)c->n_layer, (hsize_t)c->n_head_kv, (hsize_t)x->assign_tokens};
        size_t lists = (size_t)c->n_layer * c->n_head_kv, n = (size_t)x->assign_tokens;
        int32_t *a = malloc((lists * n + 1) * sizeof *a);
        ok = a != NULL;
        for (size_t i = 0; ok && i < lists; i++)
            memcpy(a + i * n, x->assign + i * (size_t)x->assign_stride, n * sizeof *a);
        ok = ok && write_ds(f, "assign", H5T_STD_I32LE, H5T_NATIVE_INT32, 3, a3, a);
        free(a);
    }
    ok = ok && write_int_attr(f, "csm_round", c->round, H5T_STD_I32LE);
    if (ok && x) {
        ok = write_int_attr(f, "prompt_tokens", x->prompt_tokens, H5T_STD_I64LE) &&
             write_str_attr(f, "model", x->model) && write_str_attr(f, "prompt", x->prompt) &&
             write_str_attr(f, "policy", x->policy) && write_str_attr(f, "params", x->params) &&
             write_str_attr(f, "budget", x->budget) &&
             (!x->policy || write_int_attr(f, "budget_entries", x->budget_entries, H5T_STD_I64LE));
    }
    return ok;
}

ckv_status ckv_kvfile_write(const char *path, const ckv_cache *c, const ckv_kvfile_extra *x,
                            ckv_error *err)
{
    if (c->dtype != CKV_KV_F32)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "%s: a %s cache is not written (the format holds fp32 caches and no "
                          "dtype)",
                          path, ckv_kv_dtype_name(c->dtype));
    quiet();
    size_t n = strlen(path);
    char *tmp = malloc(n + 16);
    if (!tmp)
        return ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
    snprintf(tmp, n + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        free(tmp);
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot create a temporary file beside it", path);
    }
    close(fd);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    bool ok = f >= 0 && write_body(f, c, x);
    if (f >= 0 && H5Fclose(f) < 0)
        ok = false;
    if (!ok || rename(tmp, path)) {
        unlink(tmp);
        free(tmp);
        return ckv_errorf(err, CKV_ERR_IO, "%s: writing the HDF5 file failed", path);
    }
    free(tmp);
    return CKV_OK;
}
