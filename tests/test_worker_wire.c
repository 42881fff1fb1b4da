/* The records between a parallel sweep's parent and its workers
 * (worker_wire.h) and the row encoding under them (results.h): the byte
 * layout worked out by hand from the /samples schema (docs/results.md),
 * rows back bit for bit (NaN, UTF-8, empty strings), every truncation an
 * error, records cut out of a stream that arrives a byte at a time, and
 * the done-unit list over a real socket. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "results.h"
#include "worker_wire.h"

static ckv_result_row sample_row(void)
{
    return (ckv_result_row){
        .unit = 7,
        .task = "niah_single_1",
        .length = 4096,
        .sample = 3,
        .run = 2,
        .policy = "centroid",
        .budget = 0.25,
        .budget_spec = "25%",
        .budget_entries = 1024,
        .metric = "string_match_all",
        .score = NAN,
        .prompt_tokens = 4001,
        .kv_entries = -1,
        .kv_bytes = INT64_MAX,
        .kv_entries_peak = 5,
        .kv_bytes_peak = 6,
        .ttft_ms = 1.5,
        .compress_ms = -0.0,
        .tpot_ms = 1e-300,
        .generated_tokens = 0,
        .prediction = "caf\xc3\xa9 \xe2\x82\xac",
        .device = "cuda",
        .status = "",
        .kl = INFINITY,
        .top1 = 0.125,
        .fidelity_steps = -3,
    };
}

static bool same_bits(double a, double b)
{
    return !memcmp(&a, &b, sizeof a);
}

/* Six int64, six int32, seven doubles and seven strings (a u32 length
 * each), in schema order: unit first, task's length and bytes next. */
Test(worker_wire, row_layout_by_hand)
{
    ckv_result_row r = sample_row();
    size_t strings = strlen("niah_single_1") + strlen("centroid") + 3 + strlen("string_match_all") +
                     9 + 4 + 0;
    size_t want = 6 * 8 + 6 * 4 + 7 * 8 + 7 * 4 + strings;
    cr_assert_eq(ckv_results_row_size(&r), want);
    uint8_t *b = malloc(want);
    ckv_results_row_encode(&r, b);
    int64_t unit;
    uint32_t task_len;
    int32_t length;
    memcpy(&unit, b, 8);
    memcpy(&task_len, b + 8, 4);
    memcpy(&length, b + 12 + 13, 4);
    cr_assert_eq(unit, 7);
    cr_assert_eq(task_len, 13);
    cr_assert(!memcmp(b + 12, "niah_single_1", 13));
    cr_assert_eq(length, 4096);
    /* the last field, fidelity_steps, closes the record */
    int32_t steps;
    memcpy(&steps, b + want - 4, 4);
    cr_assert_eq(steps, -3);
    free(b);
}

Test(worker_wire, row_round_trip_bit_for_bit)
{
    ckv_result_row r = sample_row(), d;
    size_t n = ckv_results_row_size(&r), used = 0;
    uint8_t *b = malloc(n + 3);
    ckv_results_row_encode(&r, b);
    memcpy(b + n, "xyz", 3); /* the next record's bytes are not read */
    ckv_error err = {0};
    cr_assert_eq(ckv_results_row_decode(b, n + 3, &used, &d, &err), CKV_OK, "%s", err.msg);
    cr_assert_eq(used, n);
    cr_assert_eq(d.unit, 7);
    cr_assert_eq(d.kv_entries, -1);
    cr_assert_eq(d.kv_bytes, INT64_MAX);
    cr_assert_eq(d.fidelity_steps, -3);
    cr_assert_eq(d.prompt_tokens, 4001);
    cr_assert(isnan(d.score));
    cr_assert(same_bits(d.compress_ms, -0.0));
    cr_assert(same_bits(d.tpot_ms, 1e-300));
    cr_assert(isinf(d.kl) && d.kl > 0);
    cr_assert_str_eq(d.prediction, "caf\xc3\xa9 \xe2\x82\xac");
    cr_assert_str_eq(d.status, "");
    cr_assert_str_eq(d.metric, "string_match_all");
    ckv_results_row_free(&d);
    cr_assert_null(d.task);
    free(b);
}

Test(worker_wire, every_truncated_row_is_an_error)
{
    ckv_result_row r = sample_row(), d;
    size_t n = ckv_results_row_size(&r), used;
    uint8_t *b = malloc(n);
    ckv_results_row_encode(&r, b);
    for (size_t k = 0; k < n; k++) {
        ckv_error err = {0};
        cr_assert_eq(ckv_results_row_decode(b, k, &used, &d, &err), CKV_ERR_FORMAT,
                     "prefix of %zu of %zu bytes", k, n);
        cr_assert_null(d.task);
    }
    free(b);
}

/* PLAN, a UNIT of two rows, NOTE and DONE as the worker sends them; the
 * reader sees each record only once its last byte is there. */
Test(worker_wire, records_from_a_stream_byte_by_byte)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ckv_result_row rows[2] = {sample_row(), sample_row()};
    rows[1].run = 3;
    rows[1].prediction = "";
    ckv_error err = {0};
    cr_assert_eq(ckv_wire_send_plan(sv[0], 40, 12, &err), CKV_OK);
    cr_assert_eq(ckv_wire_send_rows(sv[0], rows, 2, &err), CKV_OK);
    cr_assert_eq(ckv_wire_send(sv[0], CKV_WIRE_NOTE, "hello", 5, &err), CKV_OK);
    cr_assert_eq(ckv_wire_send(sv[0], CKV_WIRE_DONE, NULL, 0, &err), CKV_OK);
    close(sv[0]);
    size_t unit_bytes = ckv_results_row_size(&rows[0]) + ckv_results_row_size(&rows[1]);
    size_t total = 5 + 16 + 5 + unit_bytes + 5 + 5 + 5;
    uint8_t *all = malloc(total + 1);
    size_t got = 0;
    ssize_t k;
    while ((k = read(sv[1], all + got, total + 1 - got)) > 0)
        got += (size_t)k;
    close(sv[1]);
    cr_assert_eq(got, total, "stream of %zu bytes, by hand %zu", got, total);

    ckv_wire_reader r = {.buf = all, .cap = total + 1};
    size_t ends[4] = {21, 21 + 5 + unit_bytes, 21 + 5 + unit_bytes + 10, total};
    ckv_wire_type want[4] = {CKV_WIRE_PLAN, CKV_WIRE_UNIT, CKV_WIRE_NOTE, CKV_WIRE_DONE};
    size_t next = 0;
    for (size_t len = 1; len <= total; len++) {
        r.len = len;
        ckv_wire_type t;
        const uint8_t *p;
        size_t n;
        bool have = ckv_wire_next(&r, &t, &p, &n);
        cr_assert_eq(have, len == ends[next], "at %zu bytes", len);
        if (!have)
            continue;
        cr_assert_eq(t, want[next]);
        if (t == CKV_WIRE_PLAN) {
            uint64_t v[2];
            memcpy(v, p, 16);
            cr_assert(v[0] == 40 && v[1] == 12);
        } else if (t == CKV_WIRE_UNIT) {
            ckv_result_row *d;
            size_t nd;
            cr_assert_eq(ckv_wire_decode_rows(p, n, &d, &nd, &err), CKV_OK, "%s", err.msg);
            cr_assert_eq(nd, 2);
            cr_assert(d[0].run == 2 && d[1].run == 3);
            cr_assert_str_eq(d[1].prediction, "");
            ckv_results_row_free(&d[0]);
            ckv_results_row_free(&d[1]);
            free(d);
        } else if (t == CKV_WIRE_NOTE) {
            cr_assert(n == 5 && !memcmp(p, "hello", 5));
        }
        next++;
    }
    cr_assert_eq(next, 4);
    cr_assert_eq(ckv_wire_pending(&r), 0);
    free(all);
}

Test(worker_wire, skip_list_over_a_socket)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int64_t units[3] = {2, 6, 1000000000000};
    ckv_error err = {0};
    cr_assert_eq(ckv_wire_send(sv[0], CKV_WIRE_SKIP, units, sizeof units, &err), CKV_OK);
    int64_t *got;
    size_t n;
    cr_assert_eq(ckv_wire_recv_skip(sv[1], &got, &n, &err), CKV_OK, "%s", err.msg);
    cr_assert_eq(n, 3);
    cr_assert(got[0] == 2 && got[1] == 6 && got[2] == 1000000000000);
    free(got);
    /* Anything else first, or the peer gone, is an error naming it. */
    cr_assert_eq(ckv_wire_send(sv[0], CKV_WIRE_DONE, NULL, 0, &err), CKV_OK);
    cr_assert_eq(ckv_wire_recv_skip(sv[1], &got, &n, &err), CKV_ERR_FORMAT);
    cr_assert(strstr(err.msg, "record 'D'"), "%s", err.msg);
    close(sv[0]);
    cr_assert_eq(ckv_wire_recv_skip(sv[1], &got, &n, &err), CKV_ERR_IO);
    cr_assert(strstr(err.msg, "end of stream"), "%s", err.msg);
    close(sv[1]);
}
