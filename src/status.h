/* Error reporting for library code: every fallible function returns a
 * ckv_status and, on failure, fills a ckv_error with a message that names the
 * file, field and value involved. Only the CLI prints and exits. */
#ifndef CKV_STATUS_H
#define CKV_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CKV_OK = 0,
    CKV_ERR_IO,          /* open/read/write/mmap failed */
    CKV_ERR_FORMAT,      /* a file's contents are malformed */
    CKV_ERR_ARG,         /* bad argument, option or configuration value */
    CKV_ERR_NOMEM,       /* allocation failed */
    CKV_ERR_UNSUPPORTED, /* valid input we do not handle (type, architecture) */
    CKV_ERR_NUMERIC,     /* NaN/Inf or other numeric failure */
    CKV_ERR_DEVICE,      /* GPU missing, out of memory, or a CUDA call failed */
    CKV_ERR_INTERRUPTED  /* stopped by a signal */
} ckv_status;

typedef struct {
    ckv_status status;
    char msg[1024];
} ckv_error;

/* Sets err (if non-NULL) and returns st, so callers can write
 * `return ckv_errorf(err, CKV_ERR_FORMAT, "%s: field %s ...", ...)`. */
ckv_status ckv_errorf(ckv_error *err, ckv_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes an existing message, e.g. with the file being processed. */
ckv_status ckv_error_prefix(ckv_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

const char *ckv_status_name(ckv_status st);

#ifdef __cplusplus
}
#endif
#endif
