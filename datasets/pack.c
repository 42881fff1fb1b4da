#include "pack.h"

#include <hdf5.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define PACK_FORMAT "ckv-pack"
#define PACK_VERSION 2

static char *dup_or_empty(const char *s)
{
    return strdup(s ? s : "");
}

ckv_status ckv_pack_init(ckv_pack *p, const char *model_path, const ckv_tokenizer *tok,
                         ckv_error *err)
{
    memset(p, 0, sizeof *p);
    p->tokenizer_hash = ckv_tokenizer_hash(tok);
    if (!(p->model_path = dup_or_empty(model_path)))
        return ckv_errorf(err, CKV_ERR_NOMEM, "pack: out of memory");
    return CKV_OK;
}

static void sample_free(ckv_pack_sample *s)
{
    free(s->task);
    free(s->metric);
    free(s->prompt);
    free(s->answer_prefix);
    free(s->tokens);
    for (uint32_t i = 0; s->answers && i < s->n_answers; i++)
        free(s->answers[i]);
    for (uint32_t i = 0; s->classes && i < s->n_classes; i++)
        free(s->classes[i]);
    free(s->answers);
    free(s->classes);
    memset(s, 0, sizeof *s);
}

void ckv_pack_free(ckv_pack *p)
{
    for (size_t i = 0; i < p->n_samples; i++)
        sample_free(&p->samples[i]);
    free(p->samples);
    free(p->model_path);
    memset(p, 0, sizeof *p);
}

static size_t prompt_bytes(const ckv_pack_sample *s)
{
    return s->prompt_len ? (size_t)s->prompt_len : strlen(s->prompt);
}

static char **dup_list(char *const *src, uint32_t n, bool *oom)
{
    char **d = calloc(n ? n : 1, sizeof *d);
    if (!d) {
        *oom = true;
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++)
        if (!(d[i] = dup_or_empty(src[i])))
            *oom = true;
    return d;
}

static ckv_pack_sample *grow(ckv_pack *p)
{
    if (p->n_samples == p->cap) {
        size_t nc = p->cap ? 2 * p->cap : 64;
        ckv_pack_sample *ns = realloc(p->samples, nc * sizeof *ns);
        if (!ns)
            return NULL;
        p->samples = ns;
        p->cap = nc;
    }
    ckv_pack_sample *s = &p->samples[p->n_samples++];
    memset(s, 0, sizeof *s);
    return s;
}

ckv_status ckv_pack_add(ckv_pack *p, const ckv_tokenizer *tok, const ckv_pack_sample *src,
                        ckv_error *err)
{
    size_t plen = prompt_bytes(src);
    if (src->context_chars > plen)
        return ckv_errorf(err, CKV_ERR_ARG, "pack: %s sample %u: context split %llu beyond the "
                          "prompt's %zu bytes", src->task, src->index,
                          (unsigned long long)src->context_chars, plen);
    ckv_pack_sample *s = grow(p);
    if (!s)
        return ckv_errorf(err, CKV_ERR_NOMEM, "pack: out of memory");
    bool oom = false;
    *s = *src;
    s->tokens = NULL;
    s->task = dup_or_empty(src->task);
    s->metric = dup_or_empty(src->metric);
    s->prompt = malloc(plen + 1);
    if (s->prompt) {
        memcpy(s->prompt, src->prompt, plen);
        s->prompt[plen] = 0;
    }
    s->prompt_len = plen;
    s->answer_prefix = dup_or_empty(src->answer_prefix);
    s->answers = dup_list(src->answers, src->n_answers, &oom);
    s->classes = dup_list(src->classes, src->n_classes, &oom);
    oom = oom || !s->task || !s->metric || !s->prompt || !s->answer_prefix;
    /* the question: the rest of the prompt, then the answer prefix */
    size_t ql = plen - src->context_chars, al = strlen(s->answer_prefix ? s->answer_prefix : "");
    char *q = oom ? NULL : malloc(ql + al + 1);
    int32_t *c_ids = NULL, *q_ids = NULL;
    size_t nc = 0, nq = 0;
    ckv_status st = CKV_OK;
    if (!q) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "pack: out of memory");
        goto fail;
    }
    memcpy(q, src->prompt + src->context_chars, ql);
    memcpy(q + ql, s->answer_prefix, al + 1);
    st = ckv_tokenize(tok, src->prompt, (size_t)src->context_chars, true, src->parse_special,
                      &c_ids, &nc, err);
    if (!st)
        st = ckv_tokenize(tok, q, ql + al, false, src->parse_special, &q_ids, &nq, err);
    free(q);
    if (st)
        goto fail;
    if (nc + nq > UINT32_MAX) {
        st = ckv_errorf(err, CKV_ERR_ARG, "pack: %s sample %u: too many tokens", s->task, s->index);
        goto fail;
    }
    s->tokens = malloc((nc + nq ? nc + nq : 1) * sizeof *s->tokens);
    if (!s->tokens) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "pack: out of memory");
        goto fail;
    }
    memcpy(s->tokens, c_ids, nc * sizeof *c_ids);
    memcpy(s->tokens + nc, q_ids, nq * sizeof *q_ids);
    s->n_tokens = (uint32_t)(nc + nq);
    s->n_context_tokens = (uint32_t)nc;
    free(c_ids);
    free(q_ids);
    return CKV_OK;
fail:
    free(c_ids);
    free(q_ids);
    sample_free(s);
    p->n_samples--;
    return st;
}

/* ---- HDF5 helpers ---- */

static hid_t str_type(void)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    return t;
}

static bool write_ds(hid_t loc, const char *name, hid_t ftype, hid_t mtype, size_t n,
                     const void *buf)
{
    hsize_t dims[1] = {n};
    hid_t sp = H5Screate_simple(1, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    /* token ids compress about 2x; strings are variable-length (no filter) */
    if (n && H5Tget_class(ftype) == H5T_INTEGER) {
        hsize_t chunk[1] = {n < (1u << 20) ? n : (1u << 20)};
        H5Pset_chunk(dcpl, 1, chunk);
        H5Pset_deflate(dcpl, 4);
    }
    hid_t ds = sp < 0 ? -1 : H5Dcreate2(loc, name, ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    bool ok = ds >= 0 && (n == 0 || H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
    if (ds >= 0)
        H5Dclose(ds);
    if (sp >= 0)
        H5Sclose(sp);
    return ok;
}

static bool write_attr(hid_t loc, const char *name, hid_t ftype, hid_t mtype, const void *buf)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(loc, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    bool ok = a >= 0 && H5Awrite(a, mtype, buf) >= 0;
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    return ok;
}

/* Per-sample fields, gathered into arrays for writing. */
#define U32_FIELDS(X) X(index) X(target_length) X(max_new_tokens) X(length) X(n_tokens) \
    X(n_context_tokens) X(n_answers) X(n_classes)
#define U8_FIELDS(X) X(parse_special) X(first_line)
#define STR_FIELDS(X) X(task) X(metric) X(answer_prefix)

ckv_status ckv_pack_write(const ckv_pack *p, const char *path, ckv_error *err)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    size_t n = p->n_samples, nt = 0, na = 0, ncl = 0, nb = 0;
    for (size_t i = 0; i < n; i++) {
        nb += prompt_bytes(&p->samples[i]);
        nt += p->samples[i].n_tokens;
        na += p->samples[i].n_answers;
        ncl += p->samples[i].n_classes;
    }
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 8);
    int32_t *tokens = malloc((nt ? nt : 1) * sizeof *tokens);
    const char **answers = malloc((na ? na : 1) * sizeof *answers);
    const char **classes = malloc((ncl ? ncl : 1) * sizeof *classes);
    uint32_t *u32 = malloc((n ? n : 1) * sizeof *u32);
    uint64_t *u64 = malloc((n ? n : 1) * sizeof *u64);
    uint8_t *u8 = malloc((n ? n : 1) * sizeof *u8);
    char *prompts = malloc(nb ? nb : 1);
    const char **strs = malloc((n ? n : 1) * sizeof *strs);
    ckv_status st = CKV_OK;
    hid_t f = -1, g = -1, stype = str_type();
    if (!tmp || !tokens || !answers || !classes || !u32 || !u64 || !u8 || !prompts ||
        !strs) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    snprintf(tmp, plen + 8, "%s.tmp", path);
    for (size_t i = 0, t = 0, a = 0, c = 0, b = 0; i < n; i++) {
        const ckv_pack_sample *s = &p->samples[i];
        memcpy(prompts + b, s->prompt, prompt_bytes(s));
        b += prompt_bytes(s);
        memcpy(tokens + t, s->tokens, s->n_tokens * sizeof *tokens);
        t += s->n_tokens;
        for (uint32_t j = 0; j < s->n_answers; j++)
            answers[a++] = s->answers[j];
        for (uint32_t j = 0; j < s->n_classes; j++)
            classes[c++] = s->classes[j];
    }
    f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        st = ckv_errorf(err, CKV_ERR_IO, "%s: cannot create HDF5 file", tmp);
        goto out;
    }
    const char *fmt = PACK_FORMAT;
    int32_t version = PACK_VERSION;
    bool ok = write_attr(f, "format", stype, stype, &fmt) &&
              write_attr(f, "version", H5T_STD_I32LE, H5T_NATIVE_INT32, &version) &&
              write_attr(f, "model_path", stype, stype, &p->model_path) &&
              write_attr(f, "tokenizer_hash", H5T_STD_U64LE, H5T_NATIVE_UINT64, &p->tokenizer_hash) &&
              write_ds(f, "tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, nt, tokens) &&
              write_ds(f, "prompts", H5T_STD_U8LE, H5T_NATIVE_UINT8, nb, prompts) &&
              write_ds(f, "answers", stype, stype, na, answers) &&
              write_ds(f, "classes", stype, stype, ncl, classes) &&
              (g = H5Gcreate2(f, "samples", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) >= 0;
#define W_U32(name)                                                                       \
    for (size_t i = 0; ok && i < n; i++)                                                  \
        u32[i] = p->samples[i].name;                                                      \
    ok = ok && write_ds(g, #name, H5T_STD_U32LE, H5T_NATIVE_UINT32, n, u32);
#define W_STR(name)                                                                       \
    for (size_t i = 0; ok && i < n; i++)                                                  \
        strs[i] = p->samples[i].name;                                                     \
    ok = ok && write_ds(g, #name, stype, stype, n, strs);
#define W_U8(name)                                                                        \
    for (size_t i = 0; ok && i < n; i++)                                                  \
        u8[i] = p->samples[i].name;                                                       \
    ok = ok && write_ds(g, #name, H5T_STD_U8LE, H5T_NATIVE_UINT8, n, u8);
    U32_FIELDS(W_U32)
    U8_FIELDS(W_U8)
    STR_FIELDS(W_STR)
    for (size_t i = 0; ok && i < n; i++)
        u64[i] = prompt_bytes(&p->samples[i]);
    ok = ok && write_ds(g, "prompt_len", H5T_STD_U64LE, H5T_NATIVE_UINT64, n, u64);
    for (size_t i = 0; ok && i < n; i++)
        u64[i] = p->samples[i].context_chars;
    ok = ok && write_ds(g, "context_chars", H5T_STD_U64LE, H5T_NATIVE_UINT64, n, u64);
    if (!ok)
        st = ckv_errorf(err, CKV_ERR_IO, "%s: HDF5 write failed", tmp);
out:
    if (g >= 0)
        H5Gclose(g);
    if (f >= 0 && H5Fclose(f) < 0 && !st)
        st = ckv_errorf(err, CKV_ERR_IO, "%s: HDF5 close failed", tmp);
    H5Tclose(stype);
    if (!st && rename(tmp, path))
        st = ckv_errorf(err, CKV_ERR_IO, "%s: cannot rename to %s", tmp, path);
    if (st && tmp && f >= 0)
        remove(tmp);
    free(tmp);
    free(tokens);
    free(answers);
    free(classes);
    free(u32);
    free(u64);
    free(u8);
    free(prompts);
    free(strs);
    return st;
}

/* Opens a 1-D dataset of the given class and length (n, or any when
 * n == SIZE_MAX; the length is returned in *len). */
static ckv_status open_1d(hid_t loc, const char *path, const char *name, H5T_class_t cls,
                          size_t n, size_t *len, hid_t *out, ckv_error *err)
{
    hid_t ds = H5Dopen2(loc, name, H5P_DEFAULT);
    if (ds < 0)
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: dataset %s missing", path, name);
    hid_t t = H5Dget_type(ds), sp = H5Dget_space(ds);
    hsize_t dims[1] = {0};
    int rank = H5Sget_simple_extent_ndims(sp);
    if (rank == 1)
        H5Sget_simple_extent_dims(sp, dims, NULL);
    bool ok = H5Tget_class(t) == cls && rank == 1 && (n == SIZE_MAX || dims[0] == n) &&
              (cls != H5T_STRING || H5Tis_variable_str(t) > 0) &&
              (cls != H5T_INTEGER || H5Tget_size(t) <= 8);
    H5Tclose(t);
    H5Sclose(sp);
    if (!ok) {
        H5Dclose(ds);
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: dataset %s: expected a 1-D %s array%s", path,
                          name, cls == H5T_STRING ? "variable-length string" : "integer",
                          n == SIZE_MAX ? "" : " with one entry per sample");
    }
    *len = (size_t)dims[0];
    *out = ds;
    return CKV_OK;
}

static ckv_status read_nums(hid_t loc, const char *path, const char *name, hid_t mtype, size_t n,
                            size_t *len, void **buf, size_t esize, ckv_error *err)
{
    hid_t ds = -1;
    ckv_status st = open_1d(loc, path, name, H5T_INTEGER, n, len, &ds, err);
    if (st)
        return st;
    *buf = malloc((*len ? *len : 1) * esize);
    if (!*buf)
        st = ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
    else if (*len && H5Dread(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, *buf) < 0)
        st = ckv_errorf(err, CKV_ERR_FORMAT, "%s: dataset %s: read failed", path, name);
    H5Dclose(ds);
    return st;
}

/* Reads a string dataset into malloc'd copies (NULL entries become ""). */
static ckv_status read_strs(hid_t loc, const char *path, const char *name, size_t n,
                            size_t *len, char ***out, ckv_error *err)
{
    hid_t ds = -1;
    ckv_status st = open_1d(loc, path, name, H5T_STRING, n, len, &ds, err);
    if (st)
        return st;
    size_t m = *len;
    char **raw = calloc(m ? m : 1, sizeof *raw), **res = calloc(m ? m : 1, sizeof *res);
    hid_t mt = str_type();
    if (!raw || !res) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
    } else if (m && H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) < 0) {
        st = ckv_errorf(err, CKV_ERR_FORMAT, "%s: dataset %s: read failed", path, name);
    } else {
        for (size_t i = 0; i < m && !st; i++)
            if (!(res[i] = dup_or_empty(raw[i])))
                st = ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
        hid_t sp = H5Dget_space(ds);
        if (m)
            H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, raw);
        H5Sclose(sp);
    }
    H5Tclose(mt);
    H5Dclose(ds);
    free(raw);
    if (st && res) {
        for (size_t i = 0; i < m; i++)
            free(res[i]);
        free(res);
        res = NULL;
    }
    *out = res;
    return st;
}

static ckv_status read_attr(hid_t f, const char *path, const char *name, hid_t mtype, void *buf,
                            ckv_error *err)
{
    if (H5Aexists(f, name) <= 0)
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: attribute %s missing (not a ckv pack?)", path,
                          name);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    hid_t t = a >= 0 ? H5Aget_type(a) : -1;
    bool is_str = t >= 0 && H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) > 0;
    bool want_str = H5Tget_class(mtype) == H5T_STRING;
    bool ok = t >= 0 && is_str == want_str && H5Aread(a, mtype, buf) >= 0;
    if (t >= 0)
        H5Tclose(t);
    if (a >= 0)
        H5Aclose(a);
    return ok ? CKV_OK : ckv_errorf(err, CKV_ERR_FORMAT, "%s: attribute %s: bad type", path, name);
}

ckv_status ckv_pack_read(ckv_pack *p, const char *path, uint64_t tokenizer_hash, ckv_error *err)
{
    memset(p, 0, sizeof *p);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot open as HDF5", path);
    hid_t stype = str_type(), g = -1;
    char *fmt = NULL, *model = NULL;
    int32_t version = 0;
    size_t n = 0, nt = 0, na = 0, ncl = 0, len;
    int32_t *tokens = NULL;
    char **answers = NULL, **classes = NULL;
    uint32_t *u32[8] = {0};
    uint64_t *ctx = NULL, *plens = NULL;
    uint8_t *u8[2] = {0};
    char *prompts = NULL;
    size_t nb = 0;
    char **strs[3] = {0};
    ckv_status st = read_attr(f, path, "format", stype, &fmt, err);
    if (!st && (!fmt || strcmp(fmt, PACK_FORMAT)))
        st = ckv_errorf(err, CKV_ERR_FORMAT, "%s: attribute format is \"%s\", not \"%s\"", path,
                        fmt ? fmt : "", PACK_FORMAT);
    if (!st)
        st = read_attr(f, path, "version", H5T_NATIVE_INT32, &version, err);
    if (!st && version != PACK_VERSION)
        st = ckv_errorf(err, CKV_ERR_UNSUPPORTED, "%s: pack version %d, this build reads %d",
                        path, version, PACK_VERSION);
    if (!st)
        st = read_attr(f, path, "tokenizer_hash", H5T_NATIVE_UINT64, &p->tokenizer_hash, err);
    if (!st && tokenizer_hash && p->tokenizer_hash != tokenizer_hash)
        st = ckv_errorf(err, CKV_ERR_ARG, "%s: made for tokenizer %016llx, but the model's "
                        "tokenizer is %016llx: prepare the pack again with this model", path,
                        (unsigned long long)p->tokenizer_hash, (unsigned long long)tokenizer_hash);
    if (!st)
        st = read_attr(f, path, "model_path", stype, &model, err);
    if (!st && !(p->model_path = dup_or_empty(model)))
        st = ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
    if (!st && (g = H5Gopen2(f, "samples", H5P_DEFAULT)) < 0)
        st = ckv_errorf(err, CKV_ERR_FORMAT, "%s: group samples missing", path);
    void *tk = NULL;
    if (!st)
        st = read_nums(f, path, "tokens", H5T_NATIVE_INT32, SIZE_MAX, &nt, &tk, 4, err);
    tokens = tk;
    void *pb = NULL;
    if (!st)
        st = read_nums(f, path, "prompts", H5T_NATIVE_UINT8, SIZE_MAX, &nb, &pb, 1, err);
    prompts = pb;
    if (!st)
        st = read_strs(f, path, "answers", SIZE_MAX, &na, &answers, err);
    if (!st)
        st = read_strs(f, path, "classes", SIZE_MAX, &ncl, &classes, err);
    /* the first per-sample field fixes n; the others must match it */
    static const char *const u32_names[8] = {"index", "target_length", "max_new_tokens", "length",
                                             "n_tokens", "n_context_tokens", "n_answers",
                                             "n_classes"};
    static const char *const str_names[3] = {"task", "metric", "answer_prefix"};
    static const char *const u8_names[2] = {"parse_special", "first_line"};
    for (int i = 0; i < 8 && !st; i++) {
        void *b = NULL;
        st = read_nums(g, path, u32_names[i], H5T_NATIVE_UINT32, i ? n : SIZE_MAX, &len, &b, 4,
                       err);
        u32[i] = b;
        n = len;
    }
    void *cb = NULL;
    if (!st)
        st = read_nums(g, path, "context_chars", H5T_NATIVE_UINT64, n, &len, &cb, 8, err);
    ctx = cb;
    void *lb = NULL;
    if (!st)
        st = read_nums(g, path, "prompt_len", H5T_NATIVE_UINT64, n, &len, &lb, 8, err);
    plens = lb;
    for (int i = 0; i < 2 && !st; i++) {
        void *b = NULL;
        st = read_nums(g, path, u8_names[i], H5T_NATIVE_UINT8, n, &len, &b, 1, err);
        u8[i] = b;
    }
    for (int i = 0; i < 3 && !st; i++)
        st = read_strs(g, path, str_names[i], n, &len, &strs[i], err);
    if (!st && n && !(p->samples = calloc(n, sizeof *p->samples)))
        st = ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
    size_t t = 0, a = 0, c = 0, b = 0;
    for (size_t i = 0; i < n && !st; i++) {
        ckv_pack_sample *s = &p->samples[i];
        p->n_samples = p->cap = i + 1;
        s->index = u32[0][i];
        s->target_length = u32[1][i];
        s->max_new_tokens = u32[2][i];
        s->length = u32[3][i];
        s->n_tokens = u32[4][i];
        s->n_context_tokens = u32[5][i];
        s->n_answers = u32[6][i];
        s->n_classes = u32[7][i];
        s->context_chars = ctx[i];
        s->prompt_len = plens[i];
        s->parse_special = u8[0][i] != 0;
        s->first_line = u8[1][i] != 0;
        s->task = strs[0][i];
        s->metric = strs[1][i];
        s->answer_prefix = strs[2][i];
        strs[0][i] = strs[1][i] = strs[2][i] = NULL;
        if (s->n_tokens > nt - t || s->n_answers > na - a || s->n_classes > ncl - c ||
            s->prompt_len > nb - b || s->n_context_tokens > s->n_tokens ||
            s->context_chars > s->prompt_len) {
            st = ckv_errorf(err, CKV_ERR_FORMAT, "%s: sample %zu: counts or context split exceed "
                            "the stored data", path, i);
            break;
        }
        s->prompt = malloc(s->prompt_len + 1);
        s->tokens = malloc((s->n_tokens ? s->n_tokens : 1) * sizeof *s->tokens);
        s->answers = calloc(s->n_answers ? s->n_answers : 1, sizeof *s->answers);
        s->classes = calloc(s->n_classes ? s->n_classes : 1, sizeof *s->classes);
        if (!s->prompt || !s->tokens || !s->answers || !s->classes) {
            st = ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        memcpy(s->prompt, prompts + b, s->prompt_len);
        s->prompt[s->prompt_len] = 0;
        b += s->prompt_len;
        memcpy(s->tokens, tokens + t, s->n_tokens * sizeof *tokens);
        t += s->n_tokens;
        for (uint32_t j = 0; j < s->n_answers; j++, a++) {
            s->answers[j] = answers[a];
            answers[a] = NULL;
        }
        for (uint32_t j = 0; j < s->n_classes; j++, c++) {
            s->classes[j] = classes[c];
            classes[c] = NULL;
        }
    }
    if (!st && (t != nt || a != na || c != ncl || b != nb))
        st = ckv_errorf(err, CKV_ERR_FORMAT, "%s: stored tokens, prompt bytes, answers or classes "
                        "left over after the last sample", path);
    for (size_t i = 0; i < na && answers; i++)
        free(answers[i]);
    for (size_t i = 0; i < ncl && classes; i++)
        free(classes[i]);
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; strs[k] && i < n; i++)
            free(strs[k][i]);
        free(strs[k]);
    }
    for (int k = 0; k < 8; k++)
        free(u32[k]);
    free(ctx);
    free(plens);
    free(u8[0]);
    free(u8[1]);
    free(prompts);
    free(answers);
    free(classes);
    free(tokens);
    if (fmt || model) {
        hid_t sp = H5Screate(H5S_SCALAR);
        if (fmt)
            H5Dvlen_reclaim(stype, sp, H5P_DEFAULT, &fmt);
        if (model)
            H5Dvlen_reclaim(stype, sp, H5P_DEFAULT, &model);
        H5Sclose(sp);
    }
    H5Tclose(stype);
    if (g >= 0)
        H5Gclose(g);
    H5Fclose(f);
    if (st)
        ckv_pack_free(p);
    return st;
}
