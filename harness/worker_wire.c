#include "worker_wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { HEADER = 5, MAX_RECORD = 1 << 30 };

static ckv_status send_all(int fd, const void *p, size_t n, ckv_error *err)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return ckv_errorf(err, CKV_ERR_IO, "worker socket: send failed: %s",
                              k < 0 ? strerror(errno) : "closed");
        b += k;
        n -= (size_t)k;
    }
    return CKV_OK;
}

ckv_status ckv_wire_send(int fd, ckv_wire_type t, const void *payload, size_t n, ckv_error *err)
{
    if (n > MAX_RECORD)
        return ckv_errorf(err, CKV_ERR_ARG, "worker record '%c': %zu bytes, over the 1 GiB limit",
                          (char)t, n);
    uint8_t h[HEADER] = {(uint8_t)t};
    uint32_t len = (uint32_t)n;
    memcpy(h + 1, &len, 4);
    ckv_status st = send_all(fd, h, HEADER, err);
    return st || !n ? st : send_all(fd, payload, n, err);
}

ckv_status ckv_wire_send_rows(int fd, const ckv_result_row *rows, size_t n, ckv_error *err)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += ckv_results_row_size(&rows[i]);
    uint8_t *buf = malloc(total ? total : 1);
    if (!buf)
        return ckv_errorf(err, CKV_ERR_NOMEM, "worker rows: out of memory");
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        ckv_results_row_encode(&rows[i], buf + at);
        at += ckv_results_row_size(&rows[i]);
    }
    ckv_status st = ckv_wire_send(fd, CKV_WIRE_UNIT, buf, total, err);
    free(buf);
    return st;
}

ckv_status ckv_wire_send_plan(int fd, uint64_t units_total, uint64_t units_skipped,
                              ckv_error *err)
{
    uint64_t v[2] = {units_total, units_skipped};
    return ckv_wire_send(fd, CKV_WIRE_PLAN, v, sizeof v, err);
}

static ckv_status recv_all(int fd, void *p, size_t n, ckv_error *err)
{
    uint8_t *b = p;
    while (n) {
        ssize_t k = read(fd, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return ckv_errorf(err, CKV_ERR_IO, "worker socket: %s before the list of done units",
                              k < 0 ? strerror(errno) : "end of stream");
        b += k;
        n -= (size_t)k;
    }
    return CKV_OK;
}

ckv_status ckv_wire_recv_skip(int fd, int64_t **units, size_t *n, ckv_error *err)
{
    *units = NULL;
    *n = 0;
    uint8_t h[HEADER];
    ckv_status st = recv_all(fd, h, HEADER, err);
    if (st)
        return st;
    uint32_t len;
    memcpy(&len, h + 1, 4);
    if (h[0] != CKV_WIRE_SKIP || len % sizeof(int64_t) || len > MAX_RECORD)
        return ckv_errorf(err, CKV_ERR_FORMAT, "worker socket: expected the list of done units, "
                          "got record '%c' of %u bytes", (char)h[0], len);
    if (!(*units = malloc(len ? len : 1)))
        return ckv_errorf(err, CKV_ERR_NOMEM, "worker: out of memory");
    if ((st = recv_all(fd, *units, len, err))) {
        free(*units);
        *units = NULL;
        return st;
    }
    *n = len / sizeof(int64_t);
    return CKV_OK;
}

ckv_status ckv_wire_fill(ckv_wire_reader *r, int fd, bool *eof, ckv_error *err)
{
    *eof = false;
    if (r->pos) {
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
    }
    if (r->cap - r->len < 65536) {
        size_t cap = r->cap ? 2 * r->cap : 1 << 17;
        uint8_t *b = realloc(r->buf, cap);
        if (!b)
            return ckv_errorf(err, CKV_ERR_NOMEM, "worker records: out of memory");
        r->buf = b;
        r->cap = cap;
    }
    ssize_t k;
    do
        k = read(fd, r->buf + r->len, r->cap - r->len);
    while (k < 0 && errno == EINTR);
    /* A worker that dies with bytes unread resets the connection: its end. */
    if (k < 0 && errno != ECONNRESET)
        return ckv_errorf(err, CKV_ERR_IO, "worker socket: read failed: %s", strerror(errno));
    *eof = k <= 0;
    r->len += k > 0 ? (size_t)k : 0;
    return CKV_OK;
}

bool ckv_wire_next(ckv_wire_reader *r, ckv_wire_type *t, const uint8_t **payload, size_t *n)
{
    if (r->len - r->pos < HEADER)
        return false;
    uint32_t len;
    memcpy(&len, r->buf + r->pos + 1, 4);
    if (r->len - r->pos - HEADER < len)
        return false;
    *t = (ckv_wire_type)r->buf[r->pos];
    *payload = r->buf + r->pos + HEADER;
    *n = len;
    r->pos += HEADER + len;
    return true;
}

size_t ckv_wire_pending(const ckv_wire_reader *r)
{
    return r->len - r->pos;
}

void ckv_wire_reader_free(ckv_wire_reader *r)
{
    free(r->buf);
    memset(r, 0, sizeof *r);
}

ckv_status ckv_wire_decode_rows(const uint8_t *payload, size_t n, ckv_result_row **rows,
                                size_t *n_rows, ckv_error *err)
{
    *rows = NULL;
    *n_rows = 0;
    size_t cap = 0, at = 0;
    ckv_status st = CKV_OK;
    while (!st && at < n) {
        if (*n_rows == cap) {
            cap = cap ? 2 * cap : 16;
            ckv_result_row *g = realloc(*rows, cap * sizeof *g);
            if (!g) {
                st = ckv_errorf(err, CKV_ERR_NOMEM, "worker rows: out of memory");
                break;
            }
            *rows = g;
        }
        size_t used;
        if (!(st = ckv_results_row_decode(payload + at, n - at, &used, &(*rows)[*n_rows], err))) {
            at += used;
            (*n_rows)++;
        }
    }
    if (st) {
        for (size_t i = 0; i < *n_rows; i++)
            ckv_results_row_free(&(*rows)[i]);
        free(*rows);
        *rows = NULL;
        *n_rows = 0;
    }
    return st;
}
