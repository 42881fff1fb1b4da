/* GGUF v2/v3 reader (formats.md section 1). Parsing walks a bounds-checked
 * cursor over the buffer: every length is compared with the bytes left
 * before it is used, and every count is bounded by the smallest encoding of
 * one element before anything is allocated or looped over, so work and
 * memory stay proportional to the file size. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h"
#include "util.h"

#define GGUF_MAGIC 0x46554747u
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_KEY 65535u
#define GGUF_MAX_NAME 64u
#define GGUF_MAX_DIMS 4u
/* Nesting deeper than this is certainly hostile; it bounds recursion. */
#define GGUF_MAX_NESTING 8

typedef struct {
    const uint8_t *p;
    size_t size, pos;
    ckv_error *err;
} cursor;

static uint64_t left(const cursor *c)
{
    return (uint64_t)(c->size - c->pos);
}

/* Reads n little-endian bytes (n <= 8) into *v. */
static ckv_status rd_le(cursor *c, unsigned n, uint64_t *v, const char *field)
{
    *v = 0;
    if (left(c) < n)
        return ckv_errorf(c->err, CKV_ERR_FORMAT,
                          "%s at offset %zu: needs %u bytes but the file ends at %zu", field,
                          c->pos, n, c->size);
    uint64_t x = 0;
    for (unsigned i = 0; i < n; i++)
        x |= (uint64_t)c->p[c->pos + i] << (8 * i);
    c->pos += n;
    *v = x;
    return CKV_OK;
}

static ckv_status rd_u32(cursor *c, uint32_t *v, const char *field)
{
    uint64_t x;
    ckv_status st = rd_le(c, 4, &x, field);
    *v = (uint32_t)x;
    return st;
}

static ckv_status rd_str(cursor *c, gguf_str *s, uint64_t max, const char *field)
{
    uint64_t len;
    size_t at = c->pos;
    ckv_status st = rd_le(c, 8, &len, field);
    if (st)
        return st;
    if (len > max)
        return ckv_errorf(c->err, CKV_ERR_FORMAT, "%s at offset %zu: length %llu exceeds %llu",
                          field, at, (unsigned long long)len, (unsigned long long)max);
    if (len > left(c))
        return ckv_errorf(c->err, CKV_ERR_FORMAT,
                          "%s at offset %zu: length %llu exceeds the %llu bytes left in the file",
                          field, at, (unsigned long long)len, (unsigned long long)left(c));
    s->ptr = (const char *)c->p + c->pos;
    s->len = len;
    c->pos += (size_t)len;
    return CKV_OK;
}

/* Fixed byte size of a scalar type; 0 for string, array and unknown. */
static unsigned scalar_size(uint32_t t)
{
    switch (t) {
    case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL: return 1;
    case GGUF_UINT16: case GGUF_INT16: return 2;
    case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32: return 4;
    case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Smallest encoding of one value of type t, used to bound counts. */
static uint64_t min_size(uint32_t t)
{
    if (t == GGUF_STRING)
        return 8;
    if (t == GGUF_ARRAY)
        return 12;
    return scalar_size(t);
}

const char *gguf_value_type_name(uint32_t t)
{
    static const char *names[GGUF_VALUE_TYPE_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64"};
    return t < GGUF_VALUE_TYPE_COUNT ? names[t] : "unknown";
}

/* Validates and skips one value of type t; `field` names it in errors. */
static ckv_status skip_value(cursor *c, uint32_t t, int depth, const char *field);

static ckv_status skip_array(cursor *c, int depth, const char *field, uint32_t *etype, uint64_t *n)
{
    size_t at = c->pos;
    ckv_status st = rd_u32(c, etype, field);
    if (!st)
        st = rd_le(c, 8, n, field);
    if (st)
        return st;
    if (*etype >= GGUF_VALUE_TYPE_COUNT)
        return ckv_errorf(c->err, CKV_ERR_FORMAT,
                          "%s at offset %zu: unknown array element type %u", field, at, *etype);
    if (*etype == GGUF_ARRAY && depth >= GGUF_MAX_NESTING)
        return ckv_errorf(c->err, CKV_ERR_FORMAT, "%s at offset %zu: arrays nested deeper than %d",
                          field, at, GGUF_MAX_NESTING);
    uint64_t need;
    if (!ckv_mul_u64(*n, min_size(*etype), &need) || need > left(c))
        return ckv_errorf(c->err, CKV_ERR_FORMAT,
                          "%s at offset %zu: array count %llu of %s needs more than the %llu bytes "
                          "left in the file",
                          field, at, (unsigned long long)*n, gguf_value_type_name(*etype),
                          (unsigned long long)left(c));
    unsigned sz = scalar_size(*etype);
    if (sz) {
        c->pos += (size_t)need;
        return CKV_OK;
    }
    for (uint64_t i = 0; i < *n; i++)
        if ((st = skip_value(c, *etype, depth + 1, field)))
            return st;
    return CKV_OK;
}

static ckv_status skip_value(cursor *c, uint32_t t, int depth, const char *field)
{
    if (t == GGUF_STRING) {
        gguf_str s;
        return rd_str(c, &s, UINT64_MAX, field);
    }
    if (t == GGUF_ARRAY) {
        uint32_t et;
        uint64_t n;
        return skip_array(c, depth, field, &et, &n);
    }
    unsigned sz = scalar_size(t);
    if (left(c) < sz)
        return ckv_errorf(c->err, CKV_ERR_FORMAT,
                          "%s at offset %zu: %s value needs %u bytes but the file ends at %zu",
                          field, c->pos, gguf_value_type_name(t), sz, c->size);
    if (t == GGUF_BOOL && c->p[c->pos] > 1)
        return ckv_errorf(c->err, CKV_ERR_FORMAT, "%s at offset %zu: bool value %u is not 0 or 1",
                          field, c->pos, c->p[c->pos]);
    c->pos += sz;
    return CKV_OK;
}

static ckv_status parse_kv(cursor *c, uint64_t i, gguf_kv *kv)
{
    char field[96];
    snprintf(field, sizeof field, "metadata %llu key", (unsigned long long)i);
    ckv_status st = rd_str(c, &kv->key, GGUF_MAX_KEY, field);
    if (st)
        return st;
    int kl = kv->key.len > 64 ? 64 : (int)kv->key.len;
    snprintf(field, sizeof field, "metadata %llu '%.*s' type", (unsigned long long)i, kl,
             kv->key.ptr);
    size_t at = c->pos;
    if ((st = rd_u32(c, &kv->type, field)))
        return st;
    if (kv->type >= GGUF_VALUE_TYPE_COUNT)
        return ckv_errorf(c->err, CKV_ERR_FORMAT, "%s at offset %zu: unknown value type %u", field,
                          at, kv->type);
    snprintf(field, sizeof field, "metadata %llu '%.*s' value", (unsigned long long)i, kl,
             kv->key.ptr);
    if (kv->type == GGUF_ARRAY) {
        if ((st = skip_array(c, 1, field, &kv->arr_type, &kv->arr_n)))
            return st;
        kv->data = c->p + at + 4 + 12;
        kv->nbytes = c->pos - (at + 4 + 12);
        return CKV_OK;
    }
    /* Scalars: data points at the value; for strings at its u64 length. */
    kv->data = c->p + c->pos;
    size_t start = c->pos;
    if ((st = skip_value(c, kv->type, 0, field)))
        return st;
    kv->nbytes = c->pos - start;
    return CKV_OK;
}

static ckv_status parse_tensor_info(cursor *c, uint64_t i, gguf_tensor *t)
{
    char field[128];
    snprintf(field, sizeof field, "tensor %llu name", (unsigned long long)i);
    ckv_status st = rd_str(c, &t->name, GGUF_MAX_NAME, field);
    if (st)
        return st;
    int nl = (int)t->name.len;
    snprintf(field, sizeof field, "tensor %llu '%.*s' n_dims", (unsigned long long)i, nl,
             t->name.ptr);
    if ((st = rd_u32(c, &t->n_dims, field)))
        return st;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return ckv_errorf(c->err, CKV_ERR_FORMAT, "%s: %u is not in 1..%u", field, t->n_dims,
                          GGUF_MAX_DIMS);
    t->nelem = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims)
            continue;
        snprintf(field, sizeof field, "tensor %llu '%.*s' ne[%u]", (unsigned long long)i, nl,
                 t->name.ptr, d);
        if ((st = rd_le(c, 8, &t->ne[d], field)))
            return st;
        if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX)
            return ckv_errorf(c->err, CKV_ERR_FORMAT, "%s: %llu is not in 1..INT64_MAX", field,
                              (unsigned long long)t->ne[d]);
        if (!ckv_mul_u64(t->nelem, t->ne[d], &t->nelem) || t->nelem > (uint64_t)INT64_MAX)
            return ckv_errorf(c->err, CKV_ERR_FORMAT, "%s: element count overflows", field);
    }
    snprintf(field, sizeof field, "tensor %llu '%.*s' type", (unsigned long long)i, nl,
             t->name.ptr);
    if ((st = rd_u32(c, &t->type, field)))
        return st;
    uint32_t be = ggml_block_elems(t->type);
    if (!be)
        return ckv_errorf(c->err, CKV_ERR_FORMAT, "%s: unknown ggml type %u", field, t->type);
    if (t->ne[0] % be)
        return ckv_errorf(c->err, CKV_ERR_FORMAT,
                          "tensor %llu '%.*s' ne[0]: row length %llu is not a multiple of the %s "
                          "block size %u",
                          (unsigned long long)i, nl, t->name.ptr, (unsigned long long)t->ne[0],
                          ggml_type_name(t->type), be);
    if (!ggml_row_bytes(t->type, t->nelem, &t->nbytes))
        return ckv_errorf(c->err, CKV_ERR_FORMAT, "tensor %llu '%.*s': byte size overflows",
                          (unsigned long long)i, nl, t->name.ptr);
    snprintf(field, sizeof field, "tensor %llu '%.*s' offset", (unsigned long long)i, nl,
             t->name.ptr);
    return rd_le(c, 8, &t->offset, field);
}

static int cmp_str(gguf_str a, gguf_str b)
{
    size_t n = a.len < b.len ? (size_t)a.len : (size_t)b.len;
    int r = memcmp(a.ptr, b.ptr, n);
    return r ? r : (a.len > b.len) - (a.len < b.len);
}

static int cmp_kv(const void *a, const void *b)
{
    return cmp_str((*(const gguf_kv *const *)a)->key, (*(const gguf_kv *const *)b)->key);
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return cmp_str((*(const gguf_tensor *const *)a)->name, (*(const gguf_tensor *const *)b)->name);
}

static int cmp_tensor_offset(const void *a, const void *b)
{
    uint64_t x = (*(const gguf_tensor *const *)a)->offset;
    uint64_t y = (*(const gguf_tensor *const *)b)->offset;
    return (x > y) - (x < y);
}

/* Rejects duplicate keys, duplicate tensor names and overlapping tensors
 * (each sorted copy makes this O(n log n) on hostile counts). */
static ckv_status check_unique(gguf_file *f, ckv_error *err)
{
    uint64_t n = f->n_kv > f->n_tensors ? f->n_kv : f->n_tensors;
    if (!n)
        return CKV_OK;
    void **ix = malloc((size_t)n * sizeof *ix);
    if (!ix)
        return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory sorting %llu entries",
                          (unsigned long long)n);
    ckv_status st = CKV_OK;
    for (uint64_t i = 0; i < f->n_kv; i++)
        ix[i] = &f->kv[i];
    qsort(ix, (size_t)f->n_kv, sizeof *ix, cmp_kv);
    for (uint64_t i = 1; i < f->n_kv && !st; i++) {
        const gguf_kv *a = ix[i - 1], *b = ix[i];
        if (!cmp_str(a->key, b->key))
            st = ckv_errorf(err, CKV_ERR_FORMAT, "metadata key '%.*s' appears more than once",
                            a->key.len > 64 ? 64 : (int)a->key.len, a->key.ptr);
    }
    for (uint64_t i = 0; i < f->n_tensors && !st; i++)
        ix[i] = &f->tensors[i];
    if (!st)
        qsort(ix, (size_t)f->n_tensors, sizeof *ix, cmp_tensor_name);
    for (uint64_t i = 1; i < f->n_tensors && !st; i++) {
        const gguf_tensor *a = ix[i - 1], *b = ix[i];
        if (!cmp_str(a->name, b->name))
            st = ckv_errorf(err, CKV_ERR_FORMAT, "tensor name '%.*s' appears more than once",
                            (int)a->name.len, a->name.ptr);
    }
    if (!st)
        qsort(ix, (size_t)f->n_tensors, sizeof *ix, cmp_tensor_offset);
    for (uint64_t i = 1; i < f->n_tensors && !st; i++) {
        const gguf_tensor *a = ix[i - 1], *b = ix[i];
        if (a->offset + a->nbytes > b->offset) /* both in range: no overflow */
            st = ckv_errorf(err, CKV_ERR_FORMAT,
                            "tensor '%.*s' (offset %llu, %llu bytes) overlaps tensor '%.*s' "
                            "(offset %llu)",
                            (int)a->name.len, a->name.ptr, (unsigned long long)a->offset,
                            (unsigned long long)a->nbytes, (int)b->name.len, b->name.ptr,
                            (unsigned long long)b->offset);
    }
    free(ix);
    return st;
}

static ckv_status parse_alignment(gguf_file *f, ckv_error *err)
{
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find(f, "general.alignment");
    if (!kv)
        return CKV_OK;
    if (kv->type != GGUF_UINT32)
        return ckv_errorf(err, CKV_ERR_FORMAT, "metadata 'general.alignment': type %s, expected uint32",
                          gguf_value_type_name(kv->type));
    uint32_t a = (uint32_t)kv->data[0] | (uint32_t)kv->data[1] << 8 | (uint32_t)kv->data[2] << 16 |
                 (uint32_t)kv->data[3] << 24;
    if (a == 0 || a % 8 || (a & (a - 1)))
        return ckv_errorf(err, CKV_ERR_FORMAT,
                          "metadata 'general.alignment': %u is not a power of two multiple of 8", a);
    f->alignment = a;
    return CKV_OK;
}

ckv_status gguf_parse(gguf_file *f, const uint8_t *buf, size_t size, ckv_error *err)
{
    memset(f, 0, sizeof *f);
    f->base = buf;
    f->size = size;
    cursor c = {buf, size, 0, err};
    uint32_t magic;
    ckv_status st = rd_u32(&c, &magic, "header magic");
    if (st)
        goto fail;
    if (magic != GGUF_MAGIC) {
        st = ckv_errorf(err, CKV_ERR_FORMAT, "header magic: 0x%08x is not 'GGUF'", magic);
        goto fail;
    }
    if ((st = rd_u32(&c, &f->version, "header version")))
        goto fail;
    if (f->version == 1) {
        st = ckv_errorf(err, CKV_ERR_FORMAT,
                        "header version: GGUF v1 (32-bit counts) is not supported; re-convert the "
                        "model to v3");
        goto fail;
    }
    if (f->version != 2 && f->version != 3) {
        st = ckv_errorf(err, CKV_ERR_FORMAT,
                        "header version: %u is not 2 or 3%s", f->version,
                        f->version >= 0x01000000 ? " (big-endian files are not supported)" : "");
        goto fail;
    }
    if ((st = rd_le(&c, 8, &f->n_tensors, "header tensor_count")) ||
        (st = rd_le(&c, 8, &f->n_kv, "header metadata_kv_count")))
        goto fail;
    /* Bound counts by the smallest encodings: kv = key len + type + 1 byte,
     * tensor info = name len + n_dims + one ne + type + offset. */
    if (f->n_kv > left(&c) / 13) {
        st = ckv_errorf(err, CKV_ERR_FORMAT,
                        "header metadata_kv_count: %llu entries cannot fit in the %llu bytes left",
                        (unsigned long long)f->n_kv, (unsigned long long)left(&c));
        goto fail;
    }
    if (f->n_tensors > (left(&c) - 13 * f->n_kv) / 32) {
        st = ckv_errorf(err, CKV_ERR_FORMAT,
                        "header tensor_count: %llu tensors cannot fit in the %llu bytes left",
                        (unsigned long long)f->n_tensors, (unsigned long long)left(&c));
        goto fail;
    }
    f->kv = calloc(f->n_kv ? (size_t)f->n_kv : 1, sizeof *f->kv);
    f->tensors = calloc(f->n_tensors ? (size_t)f->n_tensors : 1, sizeof *f->tensors);
    if (!f->kv || !f->tensors) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory for %llu keys and %llu tensors",
                        (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors);
        goto fail;
    }
    for (uint64_t i = 0; i < f->n_kv; i++)
        if ((st = parse_kv(&c, i, &f->kv[i])))
            goto fail;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if ((st = parse_tensor_info(&c, i, &f->tensors[i])))
            goto fail;
    if ((st = parse_alignment(f, err)))
        goto fail;
    uint64_t pad = (f->alignment - c.pos % f->alignment) % f->alignment;
    f->data_offset = c.pos + pad;
    if (f->n_tensors && f->data_offset > size) {
        st = ckv_errorf(err, CKV_ERR_FORMAT,
                        "tensor data: starts at %llu (after padding to %u) beyond file size %zu",
                        (unsigned long long)f->data_offset, f->alignment, size);
        goto fail;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t avail = size - f->data_offset, end;
        if (t->offset % f->alignment) {
            st = ckv_errorf(err, CKV_ERR_FORMAT,
                            "tensor %llu '%.*s': offset %llu is not a multiple of the alignment %u",
                            (unsigned long long)i, (int)t->name.len, t->name.ptr,
                            (unsigned long long)t->offset, f->alignment);
            goto fail;
        }
        if (!ckv_add_u64(t->offset, t->nbytes, &end) || end > avail) {
            st = ckv_errorf(err, CKV_ERR_FORMAT,
                            "tensor %llu '%.*s': offset %llu + size %llu exceeds the %llu bytes "
                            "of tensor data (file size %zu)",
                            (unsigned long long)i, (int)t->name.len, t->name.ptr,
                            (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                            (unsigned long long)avail, size);
            goto fail;
        }
        t->data = buf + f->data_offset + t->offset;
    }
    if ((st = check_unique(f, err)))
        goto fail;
    return CKV_OK;
fail:
    free(f->kv);
    free(f->tensors);
    memset(f, 0, sizeof *f);
    return st;
}

ckv_status gguf_open(gguf_file *f, const char *path, ckv_error *err)
{
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return ckv_errorf(err, CKV_ERR_IO, "%s: not a regular file", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: header magic: the file is empty", path);
    }
    size_t size = (size_t)sb.st_size;
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return ckv_errorf(err, CKV_ERR_IO, "%s: mmap of %zu bytes failed: %s", path, size,
                          strerror(e));
    ckv_status st = gguf_parse(f, m, size, err);
    if (st) {
        munmap(m, size);
        ckv_error_prefix(err, "%s", path);
        return st;
    }
    f->mapped = true;
    return CKV_OK;
}

void gguf_close(gguf_file *f)
{
    if (f->mapped)
        munmap((void *)f->base, f->size);
    free(f->kv);
    free(f->tensors);
    memset(f, 0, sizeof *f);
}

bool gguf_str_eq(gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && !memcmp(s.ptr, c, n);
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key)
{
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (gguf_str_eq(f->kv[i].key, key))
            return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name)
{
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (gguf_str_eq(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}

/* ---- typed getters ---- */

static uint64_t le(const uint8_t *p, unsigned n)
{
    uint64_t x = 0;
    for (unsigned i = 0; i < n; i++)
        x |= (uint64_t)p[i] << (8 * i);
    return x;
}

static bool is_int_type(uint32_t t)
{
    return t <= GGUF_INT32 || t == GGUF_BOOL || t == GGUF_UINT64 || t == GGUF_INT64;
}

static bool is_signed(uint32_t t)
{
    return t == GGUF_INT8 || t == GGUF_INT16 || t == GGUF_INT32 || t == GGUF_INT64;
}

/* Integer value of type t at p; false if it does not fit in int64. */
static bool int_value(uint32_t t, const uint8_t *p, int64_t *out)
{
    unsigned n = scalar_size(t);
    uint64_t u = le(p, n);
    if (is_signed(t)) {
        unsigned bits = 8 * n;
        if (bits < 64 && (u >> (bits - 1)) & 1)
            u |= ~(uint64_t)0 << bits; /* sign-extend */
        memcpy(out, &u, 8);
        return true;
    }
    if (u > (uint64_t)INT64_MAX)
        return false;
    *out = (int64_t)u;
    return true;
}

static double float_value(uint32_t t, const uint8_t *p)
{
    if (t == GGUF_FLOAT32) {
        uint32_t u = (uint32_t)le(p, 4);
        float v;
        memcpy(&v, &u, 4);
        return v;
    }
    if (t == GGUF_FLOAT64) {
        uint64_t u = le(p, 8);
        double v;
        memcpy(&v, &u, 8);
        return v;
    }
    int64_t i;
    if (int_value(t, p, &i))
        return (double)i;
    return (double)le(p, 8); /* uint64 above INT64_MAX */
}

static ckv_status find_typed(const gguf_file *f, const char *key, const gguf_kv **kv,
                             bool (*ok)(uint32_t), const char *want, ckv_error *err)
{
    *kv = gguf_find(f, key);
    if (!*kv)
        return ckv_errorf(err, CKV_ERR_FORMAT, "metadata '%s': missing", key);
    if (!ok((*kv)->type))
        return ckv_errorf(err, CKV_ERR_FORMAT, "metadata '%s': type %s, expected %s", key,
                          gguf_value_type_name((*kv)->type), want);
    return CKV_OK;
}

static bool is_float_type(uint32_t t)
{
    return t == GGUF_FLOAT32 || t == GGUF_FLOAT64;
}
static bool is_bool_type(uint32_t t)
{
    return t == GGUF_BOOL;
}
static bool is_string_type(uint32_t t)
{
    return t == GGUF_STRING;
}
static bool is_array_type(uint32_t t)
{
    return t == GGUF_ARRAY;
}

ckv_status gguf_get_int(const gguf_file *f, const char *key, int64_t *out, ckv_error *err)
{
    const gguf_kv *kv;
    ckv_status st = find_typed(f, key, &kv, is_int_type, "an integer", err);
    if (st)
        return st;
    if (!int_value(kv->type, kv->data, out))
        return ckv_errorf(err, CKV_ERR_FORMAT, "metadata '%s': %llu does not fit in int64", key,
                          (unsigned long long)le(kv->data, 8));
    return CKV_OK;
}

ckv_status gguf_get_float(const gguf_file *f, const char *key, double *out, ckv_error *err)
{
    const gguf_kv *kv;
    ckv_status st = find_typed(f, key, &kv, is_float_type, "float32 or float64", err);
    if (!st)
        *out = float_value(kv->type, kv->data);
    return st;
}

ckv_status gguf_get_bool(const gguf_file *f, const char *key, bool *out, ckv_error *err)
{
    const gguf_kv *kv;
    ckv_status st = find_typed(f, key, &kv, is_bool_type, "bool", err);
    if (!st)
        *out = kv->data[0] != 0;
    return st;
}

ckv_status gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, ckv_error *err)
{
    const gguf_kv *kv;
    ckv_status st = find_typed(f, key, &kv, is_string_type, "string", err);
    if (!st) {
        out->len = le(kv->data, 8);
        out->ptr = (const char *)kv->data + 8;
    }
    return st;
}

/* Finds an array key whose elements satisfy `ok`; allocates n elements of esize. */
static ckv_status array_start(const gguf_file *f, const char *key, bool (*ok)(uint32_t),
                              const char *want, size_t esize, const gguf_kv **kv, void **out,
                              ckv_error *err)
{
    ckv_status st = find_typed(f, key, kv, is_array_type, "array", err);
    if (st)
        return st;
    if (!ok((*kv)->arr_type))
        return ckv_errorf(err, CKV_ERR_FORMAT, "metadata '%s': array of %s, expected %s", key,
                          gguf_value_type_name((*kv)->arr_type), want);
    /* arr_n was bounded by the file size at parse time. */
    *out = malloc((*kv)->arr_n ? (size_t)(*kv)->arr_n * esize : 1);
    if (!*out)
        return ckv_errorf(err, CKV_ERR_NOMEM, "metadata '%s': out of memory for %llu elements",
                          key, (unsigned long long)(*kv)->arr_n);
    return CKV_OK;
}

ckv_status gguf_get_str_array(const gguf_file *f, const char *key, gguf_str **out, uint64_t *n,
                              ckv_error *err)
{
    const gguf_kv *kv;
    void *mem;
    ckv_status st = array_start(f, key, is_string_type, "string", sizeof(gguf_str), &kv, &mem, err);
    if (st)
        return st;
    gguf_str *s = mem;
    const uint8_t *p = kv->data;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        s[i].len = le(p, 8);
        s[i].ptr = (const char *)p + 8;
        p += 8 + s[i].len;
    }
    *out = s;
    *n = kv->arr_n;
    return CKV_OK;
}

static bool is_numeric_type(uint32_t t)
{
    return scalar_size(t) && t != GGUF_BOOL;
}

ckv_status gguf_get_f32_array(const gguf_file *f, const char *key, float **out, uint64_t *n,
                              ckv_error *err)
{
    const gguf_kv *kv;
    void *mem;
    ckv_status st = array_start(f, key, is_numeric_type, "a numeric type", sizeof(float), &kv,
                                &mem, err);
    if (st)
        return st;
    float *v = mem;
    unsigned sz = scalar_size(kv->arr_type);
    for (uint64_t i = 0; i < kv->arr_n; i++)
        v[i] = (float)float_value(kv->arr_type, kv->data + i * sz);
    *out = v;
    *n = kv->arr_n;
    return CKV_OK;
}

ckv_status gguf_get_i32_array(const gguf_file *f, const char *key, int32_t **out, uint64_t *n,
                              ckv_error *err)
{
    const gguf_kv *kv;
    void *mem;
    ckv_status st = array_start(f, key, is_int_type, "an integer type", sizeof(int32_t), &kv,
                                &mem, err);
    if (st)
        return st;
    int32_t *v = mem;
    unsigned sz = scalar_size(kv->arr_type);
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        int64_t x;
        if (!int_value(kv->arr_type, kv->data + i * sz, &x) || x < INT32_MIN || x > INT32_MAX) {
            free(v);
            return ckv_errorf(err, CKV_ERR_FORMAT, "metadata '%s': element %llu does not fit in int32",
                              key, (unsigned long long)i);
        }
        v[i] = (int32_t)x;
    }
    *out = v;
    *n = kv->arr_n;
    return CKV_OK;
}
