/* The batched prefill's passes (src/prefill_plan.h): layouts derived by hand
 * (the three sequences of gpu_parity's batched-prefill case at its three
 * pass sizes, passes that end exactly at a sequence's end, one-row passes),
 * then the definition checked over random lengths: every token once, in
 * order, each pass full but the last. */
#include <criterion/criterion.h>

#include "prefill_plan.h"
#include "splitmix.h"

typedef ckv_prefill_piece piece;

/* Runs the next pass and expects exactly `want` (count pieces). */
static void expect_pass(const int32_t *n, int32_t k, int32_t rows, int32_t *seq, int32_t *at,
                        const piece *want, int32_t count)
{
    piece got[8];
    const int32_t m = ckv_prefill_pass(n, k, rows, seq, at, got);
    cr_assert_eq(m, count, "pass of %d pieces, expected %d", m, count);
    for (int32_t j = 0; j < m; j++) {
        cr_expect_eq(got[j].seq, want[j].seq, "piece %d: sequence %d, expected %d", j,
                     got[j].seq, want[j].seq);
        cr_expect_eq(got[j].first, want[j].first, "piece %d: first %d, expected %d", j,
                     got[j].first, want[j].first);
        cr_expect_eq(got[j].row, want[j].row, "piece %d: row %d, expected %d", j, got[j].row,
                     want[j].row);
        cr_expect_eq(got[j].n, want[j].n, "piece %d: %d tokens, expected %d", j, got[j].n,
                     want[j].n);
        cr_expect_eq(got[j].last, want[j].last, "piece %d: last %d", j, got[j].last);
    }
}

static const int32_t parity_n[3] = {37, 600, 5};

/* 512 rows: 37 + 475 of the 600; then its other 125 and the 5 (rows 125..129). */
Test(prefill_pass, parity_case_in_512_rows)
{
    int32_t seq = 0, at = 0;
    const piece p1[] = {{0, 0, 0, 37, true}, {1, 0, 37, 475, false}};
    const piece p2[] = {{1, 475, 0, 125, true}, {2, 0, 125, 5, true}};
    expect_pass(parity_n, 3, 512, &seq, &at, p1, 2);
    expect_pass(parity_n, 3, 512, &seq, &at, p2, 2);
    expect_pass(parity_n, 3, 512, &seq, &at, NULL, 0);
}

/* 2048 rows: one pass of 642 rows, the pieces at rows 0, 37 and 637. */
Test(prefill_pass, parity_case_in_one_pass)
{
    int32_t seq = 0, at = 0;
    const piece p[] = {{0, 0, 0, 37, true}, {1, 0, 37, 600, true}, {2, 0, 637, 5, true}};
    expect_pass(parity_n, 3, 2048, &seq, &at, p, 3);
    expect_pass(parity_n, 3, 2048, &seq, &at, NULL, 0);
}

/* 64 rows: 37 + 27; eight passes of 64 (tokens 27..538); 61 (539..599) + 3
 * of the 5; the last 2. Eleven passes. */
Test(prefill_pass, parity_case_in_64_rows)
{
    int32_t seq = 0, at = 0;
    const piece p1[] = {{0, 0, 0, 37, true}, {1, 0, 37, 27, false}};
    expect_pass(parity_n, 3, 64, &seq, &at, p1, 2);
    for (int32_t j = 0; j < 8; j++) {
        const piece p[] = {{1, 27 + 64 * j, 0, 64, false}};
        expect_pass(parity_n, 3, 64, &seq, &at, p, 1);
    }
    const piece p10[] = {{1, 539, 0, 61, true}, {2, 0, 61, 3, false}};
    const piece p11[] = {{2, 3, 0, 2, true}};
    expect_pass(parity_n, 3, 64, &seq, &at, p10, 2);
    expect_pass(parity_n, 3, 64, &seq, &at, p11, 1);
    expect_pass(parity_n, 3, 64, &seq, &at, NULL, 0);
}

/* A pass that ends where a sequence ends starts the next one at its first
 * token (no empty piece); one-row passes take one token each. */
Test(prefill_pass, exact_ends_and_single_rows)
{
    const int32_t n[2] = {512, 512}, m[2] = {2, 1};
    int32_t seq = 0, at = 0;
    const piece a[] = {{0, 0, 0, 512, true}}, b[] = {{1, 0, 0, 512, true}};
    expect_pass(n, 2, 512, &seq, &at, a, 1);
    expect_pass(n, 2, 512, &seq, &at, b, 1);
    expect_pass(n, 2, 512, &seq, &at, NULL, 0);
    seq = at = 0;
    const piece c[] = {{0, 0, 0, 1, false}}, d[] = {{0, 1, 0, 1, true}}, e[] = {{1, 0, 0, 1, true}};
    expect_pass(m, 2, 1, &seq, &at, c, 1);
    expect_pass(m, 2, 1, &seq, &at, d, 1);
    expect_pass(m, 2, 1, &seq, &at, e, 1);
    expect_pass(m, 2, 1, &seq, &at, NULL, 0);
}

/* Random lengths and pass sizes: the pieces, read in order, are each
 * sequence's tokens once and in order; a pass's pieces are contiguous from
 * row 0 and fill it, except the last pass; `last` marks each sequence's end. */
Test(prefill_pass, definition_over_random_lengths)
{
    uint64_t rng = 77;
    for (int trial = 0; trial < 200; trial++) {
        enum { K = 9 };
        int32_t n[K], total = 0;
        const int32_t k = 1 + (int32_t)(ckv_splitmix64(&rng) % K);
        const int32_t rows = 1 + (int32_t)(ckv_splitmix64(&rng) % 40);
        for (int32_t i = 0; i < k; i++)
            total += n[i] = 1 + (int32_t)(ckv_splitmix64(&rng) % 50);
        piece out[K];
        int32_t seq = 0, at = 0, next_seq = 0, next_tok = 0, seen = 0, m;
        while ((m = ckv_prefill_pass(n, k, rows, &seq, &at, out)) > 0) {
            cr_assert_leq(m, k < rows ? k : rows);
            int32_t used = 0;
            for (int32_t j = 0; j < m; j++) {
                cr_assert_eq(out[j].row, used, "trial %d: piece %d at row %d, not %d", trial, j,
                             out[j].row, used);
                cr_assert_eq(out[j].seq, next_seq, "trial %d: sequence %d, not %d", trial,
                             out[j].seq, next_seq);
                cr_assert_eq(out[j].first, next_tok, "trial %d: token %d, not %d", trial,
                             out[j].first, next_tok);
                cr_assert_gt(out[j].n, 0);
                used += out[j].n;
                next_tok += out[j].n;
                cr_assert_eq(out[j].last, next_tok == n[next_seq]);
                if (out[j].last) {
                    next_seq++;
                    next_tok = 0;
                }
            }
            seen += used;
            cr_assert(used == rows || seen == total, "trial %d: a pass of %d rows before the end",
                      trial, used);
        }
        cr_assert_eq(next_seq, k, "trial %d: %d of %d sequences", trial, next_seq, k);
        cr_assert_eq(seen, total);
    }
}
