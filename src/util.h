/* Small shared helpers: time, files, strings, checked arithmetic. */
#ifndef CKV_UTIL_H
#define CKV_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Monotonic clock in seconds. */
double ckv_now(void);

/* Reads a whole file into a malloc'd, NUL-terminated buffer. */
ckv_status ckv_read_file(const char *path, char **out, size_t *len, ckv_error *err);

/* Writes data to path atomically (temporary file in the same directory,
 * then rename), so a failure never leaves a half-written file. */
ckv_status ckv_write_file_atomic(const char *path, const void *data, size_t len, ckv_error *err);

char *ckv_strndup(const char *s, size_t n);

/* Overflow-checked size arithmetic: false on overflow. */
static inline bool ckv_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool ckv_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* Number of online CPUs (>= 1). */
int ckv_cpu_count(void);

#ifdef __cplusplus
}
#endif
#endif
