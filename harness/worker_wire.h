/* The records between a parallel sweep's parent and its workers over a
 * local stream socket (sweep_pool.h). Each record is a type byte, a u32
 * payload length and the payload, in host byte order (same host only).
 *
 * parent -> worker, once at the start: SKIP, the units of the worker's
 * shard that are already done (int64 each).
 * worker -> parent: PLAN (u64 units of its shard, u64 of them skipped),
 * then per finished unit UNIT (its rows, ckv_results_row_encode one after
 * another), NOTE (text to show), and at the end DONE (the shard is
 * complete) or ERROR (the message of the failure). */
#ifndef CKV_WORKER_WIRE_H
#define CKV_WORKER_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "results.h"
#include "status.h"

typedef enum {
    CKV_WIRE_SKIP = 'S',
    CKV_WIRE_PLAN = 'P',
    CKV_WIRE_UNIT = 'U',
    CKV_WIRE_NOTE = 'N',
    CKV_WIRE_ERROR = 'E',
    CKV_WIRE_DONE = 'D'
} ckv_wire_type;

/* Sends one record (blocking; a closed peer is an error, not SIGPIPE). */
ckv_status ckv_wire_send(int fd, ckv_wire_type t, const void *payload, size_t n, ckv_error *err);
ckv_status ckv_wire_send_rows(int fd, const ckv_result_row *rows, size_t n, ckv_error *err);
ckv_status ckv_wire_send_plan(int fd, uint64_t units_total, uint64_t units_skipped,
                              ckv_error *err);

/* Worker side: blocks for the SKIP record (units malloc'd). */
ckv_status ckv_wire_recv_skip(int fd, int64_t **units, size_t *n, ckv_error *err);

/* Parent side: bytes read so far from one worker, cut into records. */
typedef struct {
    uint8_t *buf;
    size_t pos, len, cap; /* records start at pos; bytes up to len are read */
} ckv_wire_reader;

/* One read(2) of what fd has (call when poll says it is readable); *eof at
 * the end of the stream. */
ckv_status ckv_wire_fill(ckv_wire_reader *r, int fd, bool *eof, ckv_error *err);
/* The next complete record, if any; its payload stays valid until the
 * next fill. */
bool ckv_wire_next(ckv_wire_reader *r, ckv_wire_type *t, const uint8_t **payload, size_t *n);
/* Bytes of an incomplete record left at the end of the stream. */
size_t ckv_wire_pending(const ckv_wire_reader *r);
void ckv_wire_reader_free(ckv_wire_reader *r);

/* The rows of a UNIT payload (each freed with ckv_results_row_free). */
ckv_status ckv_wire_decode_rows(const uint8_t *payload, size_t n, ckv_result_row **rows,
                                size_t *n_rows, ckv_error *err);

#endif
