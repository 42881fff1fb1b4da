/* GGUF reader on small files built byte by byte here (formats.md section 1):
 * every metadata type, v2 and v3, truncation at every offset, and each kind
 * of corrupt field, which must fail with CKV_ERR_FORMAT naming the field. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_dir.h"
#include "gguf.h"
#include "quant.h"
#include "util.h"

/* ---- a tiny little-endian builder ---- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        cr_assert(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void le(buf *b, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) {
        uint8_t c = (uint8_t)(v >> (8 * i));
        put(b, &c, 1);
    }
}

static void u32(buf *b, uint32_t v) { le(b, v, 4); }
static void u64(buf *b, uint64_t v) { le(b, v, 8); }

static void str(buf *b, const char *s)
{
    u64(b, strlen(s));
    put(b, s, strlen(s));
}

static void f32v(buf *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u32(b, u);
}

static void pad_to(buf *b, size_t align)
{
    while (b->n % align)
        le(b, 0, 1);
}

static void patch(buf *b, size_t at, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        b->p[at + i] = (uint8_t)(v >> (8 * i));
}

enum { N_KV = 16, N_T = 3 };

/* Where fields of the built file start, so tests can corrupt them. */
typedef struct {
    size_t n_tensors, n_kv;
    size_t kv_key[N_KV + 1], kv_type[N_KV + 1], kv_val[N_KV + 1];
    size_t t_name[N_T], t_ndims[N_T], t_ne[N_T], t_type[N_T], t_off[N_T];
    size_t data;
} marks;

static void key(buf *b, marks *m, int i, const char *k, uint32_t type)
{
    m->kv_key[i] = b->n;
    str(b, k);
    m->kv_type[i] = b->n;
    u32(b, type);
    m->kv_val[i] = b->n;
}

static void tinfo(buf *b, marks *m, int i, const char *name, uint32_t n_dims, const uint64_t *ne,
                  uint32_t type, uint64_t off)
{
    m->t_name[i] = b->n;
    str(b, name);
    m->t_ndims[i] = b->n;
    u32(b, n_dims);
    m->t_ne[i] = b->n;
    for (uint32_t d = 0; d < n_dims; d++)
        u64(b, ne[d]);
    m->t_type[i] = b->n;
    u32(b, type);
    m->t_off[i] = b->n;
    u64(b, off);
}

/* Builds a valid file: 16 keys (one of each type, string/numeric/nested
 * arrays) plus general.alignment when align != 32, and tensors
 *   a: F32 [4, 2] = 1..8, b: Q8_0 [32] with d = 0.5 and qs[j] = j - 16,
 *   c: F16 [3, 1, 1] = {1, -2, 0.5}; the file ends exactly at c's last byte. */
static buf build(uint32_t version, uint32_t align, marks *m)
{
    buf b = {0};
    marks mm;
    if (!m)
        m = &mm;
    u32(&b, 0x46554747);
    u32(&b, version);
    m->n_tensors = b.n;
    u64(&b, N_T);
    m->n_kv = b.n;
    u64(&b, N_KV + (align != 32));
    key(&b, m, 0, "general.architecture", GGUF_STRING);
    str(&b, "llama");
    key(&b, m, 1, "t.u8", GGUF_UINT8);
    le(&b, 200, 1);
    key(&b, m, 2, "t.i8", GGUF_INT8);
    le(&b, (uint8_t)-5, 1);
    key(&b, m, 3, "t.u16", GGUF_UINT16);
    le(&b, 60000, 2);
    key(&b, m, 4, "t.i16", GGUF_INT16);
    le(&b, (uint16_t)-30000, 2);
    key(&b, m, 5, "t.u32", GGUF_UINT32);
    u32(&b, 4000000000u);
    key(&b, m, 6, "t.i32", GGUF_INT32);
    u32(&b, (uint32_t)-2000000000);
    key(&b, m, 7, "t.f32", GGUF_FLOAT32);
    f32v(&b, 1.5f);
    key(&b, m, 8, "t.bool", GGUF_BOOL);
    le(&b, 1, 1);
    key(&b, m, 9, "t.u64", GGUF_UINT64);
    u64(&b, (1ull << 63) + 5);
    key(&b, m, 10, "t.i64", GGUF_INT64);
    u64(&b, (uint64_t)-(1ll << 40));
    key(&b, m, 11, "t.f64", GGUF_FLOAT64);
    u64(&b, 0x3FB999999999999Aull); /* 0.1 */
    key(&b, m, 12, "t.strs", GGUF_ARRAY);
    u32(&b, GGUF_STRING);
    u64(&b, 3);
    str(&b, "a");
    str(&b, "bc");
    str(&b, "");
    key(&b, m, 13, "t.nested", GGUF_ARRAY); /* [[1, 2], [3]] of int32 */
    u32(&b, GGUF_ARRAY);
    u64(&b, 2);
    u32(&b, GGUF_INT32);
    u64(&b, 2);
    u32(&b, 1);
    u32(&b, 2);
    u32(&b, GGUF_INT32);
    u64(&b, 1);
    u32(&b, 3);
    key(&b, m, 14, "t.i16arr", GGUF_ARRAY);
    u32(&b, GGUF_INT16);
    u64(&b, 2);
    le(&b, (uint16_t)-3, 2);
    le(&b, 7, 2);
    key(&b, m, 15, "t.f32arr", GGUF_ARRAY);
    u32(&b, GGUF_FLOAT32);
    u64(&b, 2);
    f32v(&b, 0.25f);
    f32v(&b, -1.0f);
    if (align != 32) {
        key(&b, m, 16, "general.alignment", GGUF_UINT32);
        u32(&b, align);
    }
    uint64_t off_b = 32 + (align - 32 % align) % align;
    uint64_t end_b = off_b + 34, off_c = end_b + (align - end_b % align) % align;
    tinfo(&b, m, 0, "a", 2, (const uint64_t[]){4, 2}, GGML_F32, 0);
    tinfo(&b, m, 1, "b", 1, (const uint64_t[]){32}, GGML_Q8_0, off_b);
    tinfo(&b, m, 2, "c", 3, (const uint64_t[]){3, 1, 1}, GGML_F16, off_c);
    pad_to(&b, align);
    m->data = b.n;
    for (int i = 1; i <= 8; i++)
        f32v(&b, (float)i);
    pad_to(&b, align);
    le(&b, 0x3800, 2);
    for (int j = 0; j < 32; j++)
        le(&b, (uint8_t)(j - 16), 1);
    pad_to(&b, align);
    le(&b, 0x3C00, 2);
    le(&b, 0xC000, 2);
    le(&b, 0x3800, 2);
    return b;
}

/* Parses and expects CKV_ERR_FORMAT with every given substring in the message. */
static void expect_format_error(const buf *b, const char *sub1, const char *sub2)
{
    gguf_file f;
    ckv_error e = {0};
    ckv_status st = gguf_parse(&f, b->p, b->n, &e);
    cr_assert_eq(st, CKV_ERR_FORMAT, "status %d (%s), msg: %s", st, ckv_status_name(st), e.msg);
    cr_assert(strstr(e.msg, sub1), "'%s' not in: %s", sub1, e.msg);
    if (sub2)
        cr_assert(strstr(e.msg, sub2), "'%s' not in: %s", sub2, e.msg);
}

static void check_valid(uint32_t version, uint32_t align)
{
    marks m;
    buf b = build(version, align, &m);
    gguf_file f;
    ckv_error e = {0};
    cr_assert_eq(gguf_parse(&f, b.p, b.n, &e), CKV_OK, "%s", e.msg);
    cr_assert_eq(f.version, version);
    cr_assert_eq(f.alignment, align);
    cr_assert_eq(f.n_kv, N_KV + (align != 32));
    cr_assert_eq(f.n_tensors, 3);
    cr_assert_eq(f.data_offset, m.data);
    cr_assert_eq(f.data_offset % align, 0);

    int64_t i;
    const struct { const char *k; int64_t v; } ints[] = {
        {"t.u8", 200}, {"t.i8", -5}, {"t.u16", 60000}, {"t.i16", -30000},
        {"t.u32", 4000000000}, {"t.i32", -2000000000}, {"t.i64", -(1ll << 40)}, {"t.bool", 1}};
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        cr_assert_eq(gguf_get_int(&f, ints[k].k, &i, &e), CKV_OK, "%s: %s", ints[k].k, e.msg);
        cr_assert_eq(i, ints[k].v, "%s = %lld", ints[k].k, (long long)i);
    }
    cr_assert_eq(gguf_get_int(&f, "t.u64", &i, &e), CKV_ERR_FORMAT); /* > INT64_MAX */
    cr_assert(strstr(e.msg, "t.u64"), "%s", e.msg);
    double d;
    cr_assert_eq(gguf_get_float(&f, "t.f32", &d, &e), CKV_OK);
    cr_assert(d == 1.5);
    cr_assert_eq(gguf_get_float(&f, "t.f64", &d, &e), CKV_OK);
    cr_assert(d == 0.1);
    bool bl = false;
    cr_assert_eq(gguf_get_bool(&f, "t.bool", &bl, &e), CKV_OK);
    cr_assert(bl);
    gguf_str s;
    cr_assert_eq(gguf_get_str(&f, "general.architecture", &s, &e), CKV_OK);
    cr_assert(gguf_str_eq(s, "llama"));

    gguf_str *ss;
    uint64_t n;
    cr_assert_eq(gguf_get_str_array(&f, "t.strs", &ss, &n, &e), CKV_OK, "%s", e.msg);
    cr_assert_eq(n, 3);
    cr_assert(gguf_str_eq(ss[0], "a") && gguf_str_eq(ss[1], "bc") && gguf_str_eq(ss[2], ""));
    free(ss);
    float *fv;
    cr_assert_eq(gguf_get_f32_array(&f, "t.f32arr", &fv, &n, &e), CKV_OK, "%s", e.msg);
    cr_assert(n == 2 && fv[0] == 0.25f && fv[1] == -1.0f);
    free(fv);
    cr_assert_eq(gguf_get_f32_array(&f, "t.i16arr", &fv, &n, &e), CKV_OK, "%s", e.msg);
    cr_assert(n == 2 && fv[0] == -3.0f && fv[1] == 7.0f);
    free(fv);
    int32_t *iv;
    cr_assert_eq(gguf_get_i32_array(&f, "t.i16arr", &iv, &n, &e), CKV_OK, "%s", e.msg);
    cr_assert(n == 2 && iv[0] == -3 && iv[1] == 7);
    free(iv);

    const gguf_kv *nk = gguf_find(&f, "t.nested");
    cr_assert(nk && nk->type == GGUF_ARRAY && nk->arr_type == GGUF_ARRAY && nk->arr_n == 2);
    cr_assert_eq(nk->nbytes, 2 * 12 + 3 * 4); /* two inner headers, three int32 */

    const gguf_tensor *ta = gguf_find_tensor(&f, "a"), *tb = gguf_find_tensor(&f, "b"),
                      *tc = gguf_find_tensor(&f, "c");
    cr_assert(ta && tb && tc && !gguf_find_tensor(&f, "d"));
    cr_assert(ta->n_dims == 2 && ta->ne[0] == 4 && ta->ne[1] == 2 && ta->ne[2] == 1);
    cr_assert(ta->nelem == 8 && ta->nbytes == 32);
    cr_assert(tb->nbytes == 34 && tb->offset % align == 0);
    cr_assert(tc->n_dims == 3 && tc->nelem == 3 && tc->nbytes == 6);
    float y[32];
    cr_assert_eq(ckv_dequantize(ta->type, ta->data, y, ta->nelem, &e), CKV_OK);
    cr_assert(y[0] == 1.0f && y[7] == 8.0f);
    cr_assert_eq(ckv_dequantize(tb->type, tb->data, y, tb->nelem, &e), CKV_OK);
    cr_assert(y[0] == -8.0f && y[16] == 0.0f && y[31] == 7.5f); /* (j - 16) * 0.5 */
    cr_assert_eq(ckv_dequantize(tc->type, tc->data, y, tc->nelem, &e), CKV_OK);
    cr_assert(y[0] == 1.0f && y[1] == -2.0f && y[2] == 0.5f);
    cr_assert_eq(tc->data + 6, b.p + b.n); /* ends exactly at EOF */

    cr_assert_eq(gguf_get_int(&f, "missing.key", &i, &e), CKV_ERR_FORMAT);
    cr_assert(strstr(e.msg, "missing.key") && strstr(e.msg, "missing"), "%s", e.msg);
    cr_assert_eq(gguf_get_str(&f, "t.u8", &s, &e), CKV_ERR_FORMAT);
    cr_assert(strstr(e.msg, "uint8"), "%s", e.msg);
    cr_assert_eq(gguf_get_float(&f, "t.strs", &d, &e), CKV_ERR_FORMAT);
    cr_assert_eq(gguf_get_i32_array(&f, "t.f32arr", &iv, &n, &e), CKV_ERR_FORMAT);
    cr_assert(strstr(e.msg, "float32"), "%s", e.msg);
    cr_assert_eq(gguf_get_str_array(&f, "t.nested", &ss, &n, &e), CKV_ERR_FORMAT);
    gguf_close(&f);
    free(b.p);
}

Test(gguf, v3_every_type) { check_valid(3, 32); }
Test(gguf, v2_same_layout) { check_valid(2, 32); }
Test(gguf, custom_alignment) { check_valid(3, 64); }

Test(gguf, truncation_at_every_offset_fails)
{
    const uint32_t aligns[] = {32, 64};
    for (int a = 0; a < 2; a++) {
        buf b = build(3, aligns[a], NULL);
        for (size_t len = 0; len < b.n; len++) {
            /* A fresh allocation of exactly len bytes lets ASan catch any
             * read past the end. */
            uint8_t *cut = malloc(len ? len : 1);
            memcpy(cut, b.p, len);
            gguf_file f;
            ckv_error e = {0};
            ckv_status st = gguf_parse(&f, cut, len, &e);
            cr_assert_eq(st, CKV_ERR_FORMAT, "length %zu of %zu parsed (%d)", len, b.n, st);
            cr_assert(e.msg[0], "length %zu: empty message", len);
            free(cut);
        }
        free(b.p);
    }
}

Test(gguf, header_errors)
{
    buf b = build(3, 32, NULL);
    patch(&b, 4, 1, 4);
    expect_format_error(&b, "version", "v1");
    patch(&b, 4, 4, 4);
    expect_format_error(&b, "version: 4", NULL);
    patch(&b, 4, 3, 4);
    patch(&b, 0, 0x46554746, 4);
    expect_format_error(&b, "magic", NULL);
    free(b.p);
}

Test(gguf, huge_counts)
{
    marks m;
    buf b = build(3, 32, &m);
    patch(&b, m.n_kv, 1ull << 62, 8);
    expect_format_error(&b, "metadata_kv_count", "cannot fit");
    patch(&b, m.n_kv, N_KV, 8);
    patch(&b, m.n_tensors, UINT64_MAX, 8);
    expect_format_error(&b, "tensor_count", "cannot fit");
    patch(&b, m.n_tensors, N_T, 8);
    /* Array element count: 3 strings -> 2^61 strings. */
    patch(&b, m.kv_val[12] + 4, 1ull << 61, 8);
    expect_format_error(&b, "metadata 12 't.strs' value", "array count");
    free(b.p);
}

Test(gguf, huge_string_lengths)
{
    marks m;
    buf b = build(3, 32, &m);
    patch(&b, m.kv_key[0], UINT64_MAX - 3, 8);
    expect_format_error(&b, "metadata 0 key", "length");
    patch(&b, m.kv_key[0], 20, 8);
    patch(&b, m.kv_val[0], 1ull << 40, 8); /* the 'llama' value */
    expect_format_error(&b, "metadata 0 'general.architecture' value", "exceeds");
    patch(&b, m.kv_val[0], 5, 8);
    patch(&b, m.t_name[1], 65, 8); /* tensor names are at most 64 bytes */
    expect_format_error(&b, "tensor 1 name", "exceeds 64");
    free(b.p);
}

Test(gguf, bad_metadata_values)
{
    marks m;
    buf b = build(3, 32, &m);
    patch(&b, m.kv_type[3], 13, 4);
    expect_format_error(&b, "metadata 3 't.u16' type", "unknown value type 13");
    patch(&b, m.kv_type[3], GGUF_UINT16, 4);
    patch(&b, m.kv_val[12], 99, 4); /* array element type */
    expect_format_error(&b, "metadata 12 't.strs' value", "unknown array element type 99");
    patch(&b, m.kv_val[12], GGUF_STRING, 4);
    patch(&b, m.kv_val[8], 2, 1);
    expect_format_error(&b, "metadata 8 't.bool' value", "bool value 2");
    patch(&b, m.kv_val[8], 1, 1);
    /* Make key 2 a duplicate of key 1: both "t.u8" (same length). */
    b.p[m.kv_key[2] + 8 + 2] = 'u';
    expect_format_error(&b, "'t.u8' appears more than once", NULL);
    free(b.p);
}

Test(gguf, bad_tensor_infos)
{
    marks m;
    buf b = build(3, 32, &m);
    patch(&b, m.t_ndims[0], 5, 4);
    expect_format_error(&b, "tensor 0 'a' n_dims", "5");
    patch(&b, m.t_ndims[0], 0, 4);
    expect_format_error(&b, "tensor 0 'a' n_dims", "0");
    patch(&b, m.t_ndims[0], 2, 4);
    patch(&b, m.t_ne[0] + 8, 0, 8);
    expect_format_error(&b, "tensor 0 'a' ne[1]", "not in 1..");
    patch(&b, m.t_ne[0], 1ull << 40, 8);
    patch(&b, m.t_ne[0] + 8, 1ull << 40, 8);
    expect_format_error(&b, "tensor 0 'a' ne[1]", "overflows");
    patch(&b, m.t_ne[0], 4, 8);
    patch(&b, m.t_ne[0] + 8, 2, 8);
    patch(&b, m.t_type[0], 5, 4); /* a removed ggml type */
    expect_format_error(&b, "tensor 0 'a' type", "unknown ggml type 5");
    patch(&b, m.t_type[0], GGML_F32, 4);
    patch(&b, m.t_ne[1], 16, 8); /* Q8_0 rows hold whole 32-element blocks */
    expect_format_error(&b, "tensor 1 'b' ne[0]", "multiple of the Q8_0 block size 32");
    patch(&b, m.t_ne[1], 32, 8);
    free(b.p);
}

Test(gguf, bad_tensor_offsets)
{
    marks m;
    buf b = build(3, 32, &m);
    patch(&b, m.t_off[1], 33, 8);
    expect_format_error(&b, "tensor 1 'b': offset 33", "not a multiple of the alignment 32");
    patch(&b, m.t_off[1], 1ull << 20, 8);
    expect_format_error(&b, "tensor 1 'b': offset 1048576 + size 34 exceeds", "file size");
    patch(&b, m.t_off[1], UINT64_MAX - 31, 8); /* aligned, and offset + size wraps */
    expect_format_error(&b, "tensor 1 'b'", "exceeds");
    patch(&b, m.t_off[1], 32, 8);
    patch(&b, m.t_off[2], 32, 8); /* c on top of b */
    expect_format_error(&b, "overlaps", NULL);
    patch(&b, m.t_off[2], 96, 8);
    b.p[m.t_name[2] + 8] = 'a'; /* c renamed a */
    expect_format_error(&b, "tensor name 'a' appears more than once", NULL);
    free(b.p);
}

Test(gguf, bad_alignment_key)
{
    marks m;
    buf b = build(3, 64, &m);
    patch(&b, m.kv_val[16], 48, 4);
    expect_format_error(&b, "general.alignment", "48");
    patch(&b, m.kv_val[16], 0, 4);
    expect_format_error(&b, "general.alignment", "0");
    patch(&b, m.kv_type[16], GGUF_INT32, 4);
    expect_format_error(&b, "general.alignment", "expected uint32");
    free(b.p);
}

Test(gguf, deep_nesting_rejected)
{
    /* One key holding arrays nested 12 deep (each of one element). */
    buf b = {0};
    u32(&b, 0x46554747);
    u32(&b, 3);
    u64(&b, 0);
    u64(&b, 1);
    str(&b, "deep");
    u32(&b, GGUF_ARRAY);
    for (int d = 0; d < 12; d++) {
        u32(&b, GGUF_ARRAY);
        u64(&b, 1);
    }
    u32(&b, GGUF_UINT8);
    u64(&b, 0);
    expect_format_error(&b, "metadata 0 'deep' value", "nested deeper");
    free(b.p);
}

Test(gguf, unsupported_tensor_type_parses_but_does_not_dequantize)
{
    marks m;
    buf b = build(3, 32, &m);
    patch(&b, m.t_type[0], 24, 4); /* I8: 1 byte per element, known geometry */
    gguf_file f;
    ckv_error e = {0};
    cr_assert_eq(gguf_parse(&f, b.p, b.n, &e), CKV_OK, "%s", e.msg);
    const gguf_tensor *t = gguf_find_tensor(&f, "a");
    cr_assert_eq(t->nbytes, 8);
    float y[8];
    cr_assert_eq(ckv_dequantize(t->type, t->data, y, t->nelem, &e), CKV_ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "I8"), "%s", e.msg);
    gguf_close(&f);
    free(b.p);
}

Test(gguf, empty_file_without_tensors)
{
    /* Header only, no keys, no tensors: valid (there is no data section). */
    buf b = {0};
    u32(&b, 0x46554747);
    u32(&b, 3);
    u64(&b, 0);
    u64(&b, 0);
    gguf_file f;
    ckv_error e = {0};
    cr_assert_eq(gguf_parse(&f, b.p, b.n, &e), CKV_OK, "%s", e.msg);
    cr_assert(f.n_kv == 0 && f.n_tensors == 0 && !gguf_find(&f, "x"));
    gguf_close(&f);
    free(b.p);
}

Test(gguf, open_maps_and_prefixes_path)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/ckv_test_gguf_%ld.gguf", (long)getpid());
    buf b = build(3, 32, NULL);
    ckv_error e = {0};
    cr_assert_eq(ckv_write_file_atomic(path, b.p, b.n, &e), CKV_OK, "%s", e.msg);
    gguf_file f;
    cr_assert_eq(gguf_open(&f, path, &e), CKV_OK, "%s", e.msg);
    cr_assert(f.mapped && f.size == b.n);
    cr_assert_eq(gguf_find_tensor(&f, "c")->nbytes, 6);
    gguf_close(&f);
    cr_assert_eq(ckv_write_file_atomic(path, b.p, b.n - 1, &e), CKV_OK, "%s", e.msg);
    cr_assert_eq(gguf_open(&f, path, &e), CKV_ERR_FORMAT);
    cr_assert(!strncmp(e.msg, path, strlen(path)), "%s", e.msg);
    cr_assert(strstr(e.msg, "tensor 2 'c'"), "%s", e.msg);
    remove(path);
    cr_assert_eq(gguf_open(&f, path, &e), CKV_ERR_IO);
    cr_assert(strstr(e.msg, path), "%s", e.msg);
    free(b.p);
}

/* ---- fuzzer inputs ---- */

/* Parses one corpus or regression file and dequantises every supported
 * tensor; counts it in *ok where it parsed. Must never crash. */
static void parse_one(const char *path, const char *name, void *ok)
{
    (void)name;
    gguf_file f;
    ckv_error e = {0};
    ckv_status st = gguf_open(&f, path, &e);
    if (st) {
        cr_assert(st == CKV_ERR_FORMAT && e.msg[0], "%s: status %d: %s", path, st, e.msg);
        return;
    }
    ++*(int *)ok;
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        const gguf_tensor *t = &f.tensors[i];
        float *y = malloc(t->nelem * sizeof *y);
        cr_assert(y);
        st = ckv_dequantize(t->type, t->data, y, t->nelem, &e);
        cr_assert(st == CKV_OK || (st == CKV_ERR_UNSUPPORTED && !ggml_type_supported(t->type)),
                  "%s: tensor %llu: %s", path, (unsigned long long)i, e.msg);
        free(y);
    }
    gguf_close(&f);
}

Test(gguf, fuzz_regressions_do_not_crash)
{
    int ok = 0;
    cr_assert_gt(fuzz_dir_each(CKV_SOURCE_ROOT "/tests/fuzz/regressions", parse_one, &ok), 0);
}

Test(gguf, fuzz_seed_corpus_parses)
{
    int ok = 0, files = fuzz_dir_each(CKV_SOURCE_ROOT "/tests/fuzz/corpus", parse_one, &ok);
    cr_assert_gt(files, 0);
    cr_assert_eq(ok, files, "%d of %d seeds parsed", ok, files);
}
