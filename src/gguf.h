/* GGUF reader (v2 and v3). The file is mmap'd read-only; every count, offset
 * and size is checked against the file before use, so a truncated or hostile
 * file yields CKV_ERR_FORMAT naming the field, never an out-of-bounds read.
 * Strings returned point into the mapping and are NOT NUL-terminated. */
#ifndef CKV_GGUF_H
#define CKV_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum gguf_value_type {
    GGUF_UINT8 = 0, GGUF_INT8 = 1, GGUF_UINT16 = 2, GGUF_INT16 = 3,
    GGUF_UINT32 = 4, GGUF_INT32 = 5, GGUF_FLOAT32 = 6, GGUF_BOOL = 7,
    GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_UINT64 = 10, GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12, GGUF_VALUE_TYPE_COUNT = 13
};

typedef struct {
    const char *ptr; /* into the mapping; not NUL-terminated */
    uint64_t len;
} gguf_str;

/* One metadata entry. For arrays, `arr_type` and `arr_n` describe the
 * elements and `data` points at the first element; for scalars `data` points
 * at the value bytes (for a string, at its u64 length). Nested arrays are
 * validated but only exposed raw. */
typedef struct {
    gguf_str key;
    uint32_t type;
    uint32_t arr_type;
    uint64_t arr_n;
    const uint8_t *data;
    uint64_t nbytes; /* bytes of the value (whole array for arrays) */
} gguf_kv;

typedef struct {
    gguf_str name;
    uint32_t n_dims;
    uint64_t ne[4];   /* ne[0] fastest (row length); unused dims are 1 */
    uint32_t type;    /* ggml_type, see quant.h */
    uint64_t offset;  /* relative to the tensor data section */
    uint64_t nelem;
    uint64_t nbytes;
    const uint8_t *data; /* validated to lie inside the file */
} gguf_tensor;

typedef struct {
    const uint8_t *base; /* whole file */
    size_t size;
    bool mapped;         /* base came from mmap (gguf_open) */
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    uint64_t n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    uint64_t data_offset; /* start of tensor data within the file */
} gguf_file;

/* Maps and parses a file; on failure the message starts with the path. */
ckv_status gguf_open(gguf_file *f, const char *path, ckv_error *err);
/* Parses an in-memory buffer (kept, not copied); used by gguf_open and the fuzzer. */
ckv_status gguf_parse(gguf_file *f, const uint8_t *buf, size_t size, ckv_error *err);
void gguf_close(gguf_file *f);

const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
bool gguf_str_eq(gguf_str s, const char *c);

/* Typed getters: CKV_ERR_FORMAT if the key is missing or of the wrong kind.
 * gguf_get_int accepts every integer type (and bool) and range-checks. */
ckv_status gguf_get_int(const gguf_file *f, const char *key, int64_t *out, ckv_error *err);
ckv_status gguf_get_float(const gguf_file *f, const char *key, double *out, ckv_error *err);
ckv_status gguf_get_bool(const gguf_file *f, const char *key, bool *out, ckv_error *err);
ckv_status gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, ckv_error *err);
/* Arrays, copied into malloc'd memory the caller frees. Numeric arrays of
 * any numeric element type are converted. */
ckv_status gguf_get_str_array(const gguf_file *f, const char *key, gguf_str **out,
                              uint64_t *n, ckv_error *err);
ckv_status gguf_get_f32_array(const gguf_file *f, const char *key, float **out,
                              uint64_t *n, ckv_error *err);
ckv_status gguf_get_i32_array(const gguf_file *f, const char *key, int32_t **out,
                              uint64_t *n, ckv_error *err);

const char *gguf_value_type_name(uint32_t t);

#ifdef __cplusplus
}
#endif
#endif
