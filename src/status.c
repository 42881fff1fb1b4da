#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

ckv_status ckv_errorf(ckv_error *err, ckv_status st, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = st;
    }
    return st;
}

ckv_status ckv_error_prefix(ckv_error *err, const char *fmt, ...)
{
    if (!err)
        return CKV_ERR_ARG;
    char out[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, sizeof out, fmt, ap);
    va_end(ap);
    size_t used = n < 0 ? 0 : (size_t)n < sizeof out ? (size_t)n : sizeof out - 1;
    /* Append ": <old message>" as far as it fits; truncation is acceptable. */
    if (used + 2 < sizeof out) {
        out[used++] = ':';
        out[used++] = ' ';
        size_t room = sizeof out - 1 - used, ol = strlen(err->msg);
        if (ol > room)
            ol = room;
        memcpy(out + used, err->msg, ol);
        used += ol;
    }
    out[used] = 0;
    memcpy(err->msg, out, sizeof out);
    return err->status;
}

const char *ckv_status_name(ckv_status st)
{
    switch (st) {
    case CKV_OK: return "ok";
    case CKV_ERR_IO: return "I/O error";
    case CKV_ERR_FORMAT: return "format error";
    case CKV_ERR_ARG: return "invalid argument";
    case CKV_ERR_NOMEM: return "out of memory";
    case CKV_ERR_UNSUPPORTED: return "unsupported";
    case CKV_ERR_NUMERIC: return "numeric error";
    case CKV_ERR_DEVICE: return "device error";
    case CKV_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown error";
}
