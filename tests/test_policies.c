/* Policies against ../shared/docs/policies.md: hand-derived 12-entry
 * caches for every policy, the CSM schedule and partitions, the invariants
 * listed at the end of the contract on random caches, and the errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policies/csm.h"
#include "policies/list.h"
#include "policies/policies.h"
#include "policy.h"
#include "splitmix.h"

/* A one-list cache (1 layer, 1 KV head, head_dim 2) from 12 hand keys;
 * values are (t + 1, -(t + 1)) so merged values are easy to derive. */
static void hand_cache(ckv_cache *c, const float keys[][2], const float *deg, bool score)
{
    cr_assert_eq(ckv_cache_init(c, 1, 1, 2, 12, score, NULL), CKV_OK);
    for (int t = 0; t < 12; t++) {
        ckv_cache_key(c, 0, 0, t)[0] = keys[t][0];
        ckv_cache_key(c, 0, 0, t)[1] = keys[t][1];
        ckv_cache_val(c, 0, 0, t)[0] = (float)(t + 1);
        ckv_cache_val(c, 0, 0, t)[1] = (float)-(t + 1);
        c->deg[t] = deg ? deg[t] : 1;
    }
    c->len[0] = 12;
}

static void make(ckv_policy *p, const char *name, const char *const *sets)
{
    ckv_error err = {0};
    cr_assert_eq(ckv_policy_init(p, name, &err), CKV_OK, "%s", err.msg);
    for (; sets && *sets; sets++)
        cr_assert_eq(ckv_policy_set(p, *sets, &err), CKV_OK, "%s", err.msg);
}

static void run(const ckv_policy *p, ckv_cache *c, int32_t budget, const ckv_qwindow *qw,
                int32_t *assign)
{
    ckv_error err = {0};
    ckv_policy_assign_identity(c, assign);
    cr_assert_eq(ckv_policy_compress(p, c, budget, qw, assign, &err), CKV_OK, "%s", err.msg);
}

static void expect_assign(const int32_t *got, const int32_t *want, int n)
{
    for (int i = 0; i < n; i++)
        cr_expect_eq(got[i], want[i], "assign[%d] = %d, expected %d", i, got[i], want[i]);
}

static const float axis_keys[12][2] = {{1, 0}, {1, 0}, {1, 0}, {1, 0}, {1, 0}, {1, 0},
                                       {1, 0}, {1, 0}, {1, 0}, {1, 0}, {1, 0}, {1, 0}};

/* ---- budgets, rates, parameters ---- */

Test(budget, parses_to_ppm_or_absolute)
{
    ckv_budget b;
    cr_assert_eq(ckv_budget_parse("25%", &b, NULL), CKV_OK);
    cr_expect_eq(b.ppm, 250000);
    cr_assert_eq(ckv_budget_parse("0.25", &b, NULL), CKV_OK);
    cr_expect_eq(b.ppm, 250000);
    cr_assert_eq(ckv_budget_parse("33.33333%", &b, NULL), CKV_OK);
    cr_expect_eq(b.ppm, 333333);
    cr_assert_eq(ckv_budget_parse("1.0", &b, NULL), CKV_OK);
    cr_expect_eq(b.ppm, 1000000);
    cr_assert_eq(ckv_budget_parse("1024", &b, NULL), CKV_OK);
    cr_expect_eq(b.absolute, 1024);
    cr_expect_eq(b.ppm, 0);
    /* B = ceil(ppm * N / 1e6): 25% of 513 = 128.25 -> 129; of 512 exactly 128;
     * 33.3333% of 3 = 0.999999 -> 1. */
    cr_assert_eq(ckv_budget_parse("25%", &b, NULL), CKV_OK);
    cr_expect_eq(ckv_budget_entries(&b, 513), 129);
    cr_expect_eq(ckv_budget_entries(&b, 512), 128);
    cr_assert_eq(ckv_budget_parse("33.3333%", &b, NULL), CKV_OK);
    cr_expect_eq(ckv_budget_entries(&b, 3), 1);
    /* Rounded to nearest from the decimal digits, ties away from zero:
     * 0.0002535 = 253.5 ppm -> 254; 0.00145% = 14.5 ppm -> 15; 0.0000005 =
     * 0.5 ppm -> 1; 0.00000049 = 0.49 ppm -> 0 (refused below); 2.5e-1 =
     * 250000 exactly; 1.0000004 = 1000000.4 ppm is more than 1. (Through a
     * double the first three are 253.49999..., 14.49999..., 0.49999...) */
    cr_assert_eq(ckv_budget_parse("0.0002535", &b, NULL), CKV_OK);
    cr_expect_eq(b.ppm, 254);
    cr_assert_eq(ckv_budget_parse("0.00145%", &b, NULL), CKV_OK);
    cr_expect_eq(b.ppm, 15);
    cr_assert_eq(ckv_budget_parse("0.0000005", &b, NULL), CKV_OK);
    cr_expect_eq(b.ppm, 1);
    cr_assert_eq(ckv_budget_parse("2.5e-1", &b, NULL), CKV_OK);
    cr_expect_eq(b.ppm, 250000);
    cr_assert_eq(ckv_budget_parse("100%", &b, NULL), CKV_OK);
    cr_expect_eq(b.ppm, 1000000);
    const char *bad[] = {"0", "1.5", "101%", "abc", "-3", "0.0000001", "", "12x", "0%", "nan",
                         "0.00000049", "1.0000004", "100.00001%", "0x0.4", "1e", ".", "%"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ckv_error err = {0};
        cr_expect_eq(ckv_budget_parse(bad[i], &b, &err), CKV_ERR_ARG, "'%s' accepted", bad[i]);
        cr_expect(strstr(err.msg, bad[i]) != NULL, "message '%s' does not name '%s'", err.msg,
                  bad[i]);
    }
}

Test(budget, must_exceed_protected)
{
    ckv_policy p;
    make(&p, "centroid", NULL); /* protects 4 + 64 */
    ckv_budget b = {.absolute = 68};
    int64_t B;
    bool skip;
    char reason[256];
    ckv_error err = {0};
    cr_expect_eq(ckv_budget_check(&p, &b, 1000, &B, &skip, reason, sizeof reason, &err),
                 CKV_ERR_ARG);
    cr_expect(strstr(err.msg, "68") && strstr(err.msg, "centroid"), "%s", err.msg);
    b.absolute = 69;
    cr_expect_eq(ckv_budget_check(&p, &b, 1000, &B, &skip, reason, sizeof reason, &err), CKV_OK);
    cr_expect(!skip);
    /* 10% of 512 = 52 entries <= 68: a skip with a reason, not an error. */
    cr_assert_eq(ckv_budget_parse("10%", &b, NULL), CKV_OK);
    cr_expect_eq(ckv_budget_check(&p, &b, 512, &B, &skip, reason, sizeof reason, &err), CKV_OK);
    cr_expect(skip);
    cr_expect_eq(B, 52);
    cr_expect(strstr(reason, "52 entries") != NULL, "%s", reason);
    /* And compress itself refuses a budget that does not exceed protection. */
    ckv_cache c;
    hand_cache(&c, axis_keys, NULL, false);
    cr_expect_eq(ckv_policy_compress(&p, &c, 68, NULL, NULL, &err), CKV_ERR_ARG);
    ckv_cache_free(&c);
}

Test(params, errors_name_key_and_value)
{
    ckv_policy p;
    ckv_error err = {0};
    cr_expect_eq(ckv_policy_init(&p, "nosuch", &err), CKV_ERR_ARG);
    cr_expect(strstr(err.msg, "nosuch") != NULL);
    make(&p, "centroid", NULL);
    struct {
        const char *kv, *mention;
    } bad[] = {{"foo=1", "foo"},           {"chunk=1", "chunk=1"},    {"sinks=-1", "sinks=-1"},
               {"r_init=1.5", "1.5"},      {"r_min=0", "r_min='0'"},  {"r_step=0.0004", "0.0004"},
               {"partition=zig", "zig"},   {"chunk=abc", "abc"},      {"schedule=", "schedule"},
               {"noequals", "noequals"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(ckv_policy_set(&p, bad[i].kv, &err), CKV_ERR_ARG, "'%s' accepted", bad[i].kv);
        cr_expect(strstr(err.msg, bad[i].mention) != NULL, "'%s' not in '%s'", bad[i].mention,
                  err.msg);
    }
    /* Rates are per-mille, rounded to nearest. */
    cr_assert_eq(ckv_policy_set(&p, "r_init=0.1234", &err), CKV_OK);
    cr_expect_eq(ckv_policy_param(&p, "r_init", -1), 123);
    cr_assert_eq(ckv_policy_set(&p, "r_step=0.0005", &err), CKV_OK);
    cr_expect_eq(ckv_policy_param(&p, "r_step", -1), 1);
    /* Ties go away from zero whatever the binary value: 0.0125 is 12.5 ->
     * 13 (Python's round() gives 12), 0.5005 is 500.5 -> 501 (a double
     * holds 500.4999...). */
    cr_assert_eq(ckv_policy_set(&p, "r_min=0.0125", &err), CKV_OK);
    cr_expect_eq(ckv_policy_param(&p, "r_min", -1), 13);
    cr_assert_eq(ckv_policy_set(&p, "r_step=0.5005", &err), CKV_OK);
    cr_expect_eq(ckv_policy_param(&p, "r_step", -1), 501);
    cr_assert_eq(ckv_policy_set(&p, "r_step=1", &err), CKV_OK);
    cr_expect_eq(ckv_policy_param(&p, "r_step", -1), 1000);
    cr_assert_eq(ckv_policy_set(&p, "degree_bias=off", &err), CKV_OK);
    cr_expect(!ckv_policy_degree_bias(&p));
    char desc[512];
    ckv_policy_describe(&p, desc, sizeof desc);
    cr_expect(strstr(desc, "r_init=0.123") && strstr(desc, "degree_bias=off") &&
                  strstr(desc, "chunk=32"),
              "%s", desc);
}

Test(csm, schedule_rates_and_merge_counts)
{
    /* Defaults 0.5 / 0.1 / 0.1: 500, 400, 300, 200, 100, 100, ... */
    const int64_t lin[] = {500, 400, 300, 200, 100, 100, 100};
    for (int j = 0; j < 7; j++) {
        cr_expect_eq(ckv_csm_rate(j, 500, 100, 100, CKV_CSM_LINEAR), lin[j], "round %d", j);
        cr_expect_eq(ckv_csm_rate(j, 500, 100, 100, CKV_CSM_CONSTANT), 500);
    }
    /* 0.45 / 0.15 / 0.05: 450, 300, 150, 50 (0 clamps to r_min). */
    const int64_t odd[] = {450, 300, 150, 50, 50};
    for (int j = 0; j < 5; j++)
        cr_expect_eq(ckv_csm_rate(j, 450, 150, 50, CKV_CSM_LINEAR), odd[j], "round %d", j);
    /* ceil(r * c) in integers: 0.3 * 7 = 2.1 -> 3; 0.5 * 4 = 2 -> 2;
     * 0.1 * 1 -> 1; capped by the excess T - B. */
    cr_expect_eq(ckv_csm_merges(300, 7, 100), 3);
    cr_expect_eq(ckv_csm_merges(500, 4, 100), 2);
    cr_expect_eq(ckv_csm_merges(100, 1, 100), 1);
    cr_expect_eq(ckv_csm_merges(500, 40, 3), 3);
    cr_expect_eq(ckv_csm_merges(333, 3, 100), 1); /* 0.999 -> 1 */
}

/* ---- the seeded generator and the partitions ---- */

/* CentroidKV's orders, by hand (list.h): each 32 dimensions' products or
 * squares taken by octets, not in index order. */
Test(csm, dot_adds_by_octet)
{
    /* Products 1 at dimension 1 and 2^-53 at 8 and 16. In index order each
     * 2^-53 comes after the 1, is a tie at half an ulp of 1 and rounds to
     * even: 1. ckv_csm_dot adds dimensions 0, 8, 16, 24 first, so the two
     * make 2^-52 before the 1 comes: 1 + 2^-52, exact. */
    float a[40] = {0}, b[40] = {0};
    a[1] = b[1] = 1;
    a[8] = a[16] = ldexpf(1.0f, -27);
    b[8] = b[16] = ldexpf(1.0f, -26);
    double index = 0;
    for (int i = 0; i < 40; i++)
        index += (double)a[i] * b[i];
    cr_assert_eq(index, 1.0);
    cr_assert_eq(ckv_csm_dot(a, b, 40), 1.0 + ldexp(1.0, -52));
    cr_assert_eq(ckv_csm_dot(b, a, 40), 1.0 + ldexp(1.0, -52));
    /* A head_dim ends a slab early: at 17 the 2^-53 at 16 still comes
     * before the 1, at 16 it is left out and the one at 8 alone is lost. */
    cr_assert_eq(ckv_csm_dot(a, b, 17), 1.0 + ldexp(1.0, -52));
    cr_assert_eq(ckv_csm_dot(a, b, 16), 1.0);
}

Test(csm, norm_sums_by_octet)
{
    /* 1 at dimension 0 and eight squares of 2^-27 at 8 .. 15. In index
     * order each 2^-54 falls under half an ulp of 1 and is lost: the norm is
     * 1. By octets p_1 = 2^-51 first, and 1 + 2^-51 has the root 1 + 2^-52
     * (its error under 2^-104, far under half an ulp). */
    float a[64] = {0};
    a[0] = 1.0f;
    for (int i = 8; i < 16; i++)
        a[i] = ldexpf(1.0f, -27);
    cr_assert_eq(ckv_norm(a, 64), 1.0);
    cr_assert_eq(ckv_csm_norm(a, 64), 1.0 + ldexp(1.0, -52));
    /* The same squares at 4 .. 11 are split between octets 0 and 1: p_0 =
     * 1 + 4 x 2^-54 loses them, p_1 = 2^-52, and 1 + 2^-52 has the root 1. */
    float m[64] = {0};
    m[0] = 1.0f;
    for (int i = 4; i < 12; i++)
        m[i] = ldexpf(1.0f, -27);
    cr_assert_eq(ckv_csm_norm(m, 64), 1.0);
    /* The grouping (p_0 + p_1) + (p_2 + p_3): p_0 = 1, p_1 = 2^-52,
     * p_2 = p_3 = 2^-54. 1 + 2^-52 is exact; adding 2^-53 is a tie that
     * rounds to even, 1 + 2^-51, whose root is 1 + 2^-52. Summed in a chain,
     * or in index order, every 2^-54 rounds away from 1 + 2^-52, whose root
     * is 1. */
    float c[32] = {0};
    c[0] = 1;
    c[8] = ldexpf(1.0f, -26);
    c[16] = c[24] = ldexpf(1.0f, -27);
    cr_assert_eq(ckv_csm_norm(c, 32), 1.0 + ldexp(1.0, -52));
    cr_assert_eq(ckv_norm(c, 32), 1.0);
    /* A head_dim under 8 is one octet: every element once. */
    const float b[5] = {3, 0, 0, 0, 4};
    cr_assert_eq(ckv_csm_norm(b, 5), 5.0);
    cr_assert_eq(ckv_csm_norm(b, 1), 3.0);
}

/* The cosine by reciprocals (list.h): (dot x r_a) x r_b, r = 1 / norm
 * rounded once. Values as IEEE doubles give them (Python's floats agree):
 * keys 19 and 49 (d = 1) have norms 19 and 49 and dot 931, a cosine of 1
 * by division; 931 x RN(1/19) x RN(1/49) in that order is 1 - 2^-53, and
 * with the reciprocals multiplied first it would be 1 - 2^-52. */
Test(csm, cosine_by_reciprocals)
{
    const float a[1] = {19}, b[1] = {49};
    const double ra = ckv_csm_recip(ckv_csm_norm(a, 1)), rb = ckv_csm_recip(ckv_csm_norm(b, 1));
    const double dot = ckv_csm_dot(a, b, 1);
    cr_assert_eq(dot, 931.0);
    cr_assert_eq(dot / (19.0 * 49.0), 1.0);
    cr_assert_eq(ckv_csm_cosine(dot, ra, rb), 1.0 - ldexp(1.0, -53));
    cr_assert_eq(dot * (ra * rb), 1.0 - ldexp(1.0, -52));
    /* 49 x RN(1/49) is the classic product that is not 1. */
    cr_assert_eq(ckv_csm_cosine(49.0, ckv_csm_recip(49.0), ckv_csm_recip(1.0)),
                 1.0 - ldexp(1.0, -53));
    /* Zero vectors (policies.md): a norm under 1e-30 gives cosine 0 with
     * anything, whatever the dot product; 1e-30 itself is a norm. */
    cr_assert_eq(ckv_csm_recip(1e-31), 0.0);
    cr_assert_eq(ckv_csm_recip(1e-30), 1.0 / 1e-30);
    cr_assert_eq(ckv_csm_cosine(-5.0, 0.0, 1.0), 0.0);
    cr_assert(!signbit(ckv_csm_cosine(-5.0, 0.0, 1.0)));
    cr_assert_eq(ckv_csm_cosine(-5.0, 1.0, 0.0), 0.0);
}

Test(csm, splitmix64_known_sequences)
{
    /* Published SplitMix64 outputs for seed 1234567 (Rosetta Code,
     * "Pseudo-random numbers/Splitmix64"). */
    const uint64_t want[] = {6457827717110365317ull, 3203168211198807973ull,
                             9817491932198370423ull, 4593380528125082431ull,
                             16408922859458223821ull};
    uint64_t s = 1234567;
    for (int i = 0; i < 5; i++)
        cr_expect_eq(ckv_splitmix64(&s), want[i], "output %d", i);
    /* Seed 0 stream: E220A8397B1DCDAF, 6E789E6AA1B965F4, 06C45D188009454F,
     * F88BB8A8724C81EC (Vigna's splitmix64.c). */
    s = 0;
    cr_expect_eq(ckv_splitmix64(&s), 0xE220A8397B1DCDAFull);
    cr_expect_eq(ckv_splitmix64(&s), 0x6E789E6AA1B965F4ull);
    cr_expect_eq(ckv_splitmix64(&s), 0x06C45D188009454Full);
    cr_expect_eq(ckv_splitmix64(&s), 0xF88BB8A8724C81ECull);
}

Test(csm, partitions)
{
    uint8_t a[9];
    ckv_csm_partition_chunk(CKV_CSM_ALTERNATING, 0, 0, 1, 0, 1, 0, 0, 5, a);
    const uint8_t alt[] = {1, 0, 1, 0, 1};
    cr_expect_arr_eq(a, alt, 5);
    ckv_csm_partition_chunk(CKV_CSM_SEQUENTIAL, 0, 0, 1, 0, 1, 0, 0, 5, a);
    const uint8_t seq[] = {1, 1, 1, 0, 0};
    cr_expect_arr_eq(a, seq, 5);
    /* Random, seed 0, round 0, (l, h, chunk) = (0, 0, 0), L = 4, by hand:
     * state = 0 + 0x9E3779B97F4A7C15 * 1, so the draws are the 2nd..4th
     * outputs of the seed-0 stream: 6E789E6AA1B965F4 mod 4 = 0,
     * 06C45D188009454F mod 3 = 1, F88BB8A8724C81EC mod 2 = 0.
     * [0 1 2 3] -swap(3,0)-> [3 1 2 0] -swap(2,1)-> [3 2 1 0]
     * -swap(1,0)-> [2 3 1 0]; A = the first ceil(4/2) = {2, 3}. */
    cr_expect_eq(0x06C45D188009454Full % 3, 1);
    ckv_csm_partition_chunk(CKV_CSM_RANDOM, 0, 0, 1, 0, 1, 0, 0, 4, a);
    const uint8_t r0[] = {0, 0, 1, 1};
    cr_expect_arr_eq(a, r0, 4);
    /* seed 42, round 3, layers 2, l 1, heads 3 (KV heads), h 2, chunk 5,
     * L 9, worked out with big integers apart from both implementations:
     * ((3 * 2 + 1) * 3 + 2) * 2^20 + 5 = 24117253, state = 42 +
     * 0x9E3779B97F4A7C15 * 24117254 mod 2^64 = 0xAFF3D56B59EEE8A8; the
     * draws mod 9, 8, ..., 2 are 6, 3, 2, 0, 3, 2, 1, 0, leaving the order
     * [4 5 1 8 7 0 2 3 6], so A = {4, 5, 1, 8, 7}. Seed 43 gives
     * {1, 2, 4, 5, 8} (policies_ref.py). Same seed, same partition. */
    const uint8_t r42[] = {0, 1, 0, 0, 1, 1, 0, 1, 1}, r43[] = {0, 1, 1, 0, 1, 1, 0, 0, 1};
    for (int rep = 0; rep < 2; rep++) {
        ckv_csm_partition_chunk(CKV_CSM_RANDOM, 42, 3, 2, 1, 3, 2, 5, 9, a);
        cr_expect_arr_eq(a, r42, 9);
    }
    ckv_csm_partition_chunk(CKV_CSM_RANDOM, 43, 3, 2, 1, 3, 2, 5, 9, a);
    cr_expect_arr_eq(a, r43, 9);
}

/* ---- hand-worked 12-entry caches ---- */

Test(hand, streaming)
{
    /* sinks = 2, B = 5: keep slots 0, 1 and the newest 3 (9, 10, 11). */
    ckv_cache c;
    hand_cache(&c, axis_keys, NULL, false);
    ckv_policy p;
    make(&p, "streaming", (const char *[]){"sinks=2", NULL});
    int32_t assign[12];
    run(&p, &c, 5, NULL, assign);
    cr_assert_eq(c.len[0], 5);
    const int32_t want[] = {0, 1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 4};
    expect_assign(assign, want, 12);
    cr_expect_eq(ckv_cache_val(&c, 0, 0, 2)[0], 10.0f);
    ckv_cache_free(&c);
}

Test(hand, h2o)
{
    /* recent = 3, B = 5: the newest 3 plus the top 2 scores of slots 0..8:
     * 9 (slot 2), then 5 at slots 0 and 4, a tie broken to slot 0. */
    ckv_cache c;
    hand_cache(&c, axis_keys, NULL, true);
    const float s[12] = {5, 1, 9, 2, 5, 0.5f, 3, 2, 4, 100, 100, 100};
    memcpy(c.score, s, sizeof s);
    ckv_policy p;
    make(&p, "h2o", (const char *[]){"recent=3", NULL});
    int32_t assign[12];
    run(&p, &c, 5, NULL, assign);
    cr_assert_eq(c.len[0], 5);
    const int32_t want[] = {0, -1, 1, -1, -1, -1, -1, -1, -1, 2, 3, 4};
    expect_assign(assign, want, 12);
    cr_expect_eq(c.score[1], 9.0f, "a kept entry keeps its score");
    ckv_cache_free(&c);
}

/* SnapKV keys: both window queries are (1, 0), so each query's attention
 * probability is increasing in k_x / sqrt(2) + ln n, and so is their sum.
 * Slot 6 has degree 20: 1 / 1.414 + ln 20 = 3.70 beats slot 1's
 * 3 / 1.414 = 2.12, then slot 8 (2.5 -> 1.77), slot 4 (2 -> 1.41). */
static const float snap_keys[12][2] = {{0.1f, 0}, {3, 0},   {0.2f, 1}, {0.5f, 0},
                                       {2, -1},   {0.3f, 0}, {1, 0},    {0.4f, 2},
                                       {2.5f, 0}, {0, 0.5f}, {0.1f, 0}, {0.1f, 0}};

static void snap_case(const char *kernel, const int32_t *want)
{
    float deg[12] = {1, 1, 1, 1, 1, 1, 20, 1, 1, 1, 1, 1};
    ckv_cache c;
    hand_cache(&c, snap_keys, deg, false);
    float q[2][2] = {{1, 0}, {1, 0}};
    ckv_qwindow qw = {&q[0][0], 1, 2};
    ckv_policy p;
    make(&p, "snapkv", (const char *[]){"window=2", kernel, NULL});
    int32_t assign[12];
    run(&p, &c, 5, &qw, assign);
    cr_assert_eq(c.len[0], 5);
    expect_assign(assign, want, 12);
    ckv_cache_free(&c);
}

Test(hand, snapkv_kernel1)
{
    /* B = 5, W = 2: the window (10, 11) plus the top 3 of 0..9: 6, 1, 8. */
    const int32_t want[] = {-1, 0, -1, -1, -1, -1, 1, -1, 2, -1, 3, 4};
    snap_case("kernel=1", want);
}

Test(hand, snapkv_maxpool3)
{
    /* Kernel 3 (max): pooled[t] = max(s[t-1..t+1]) gives s1 at 0..2, s4 at
     * 3..4, s6 at 5..7, s8 at 8..9. The top 3 are the three copies of s6,
     * tied and taken in slot order: keep 5, 6, 7 and the window. */
    const int32_t want[] = {-1, -1, -1, -1, -1, 0, 1, 2, -1, -1, 3, 4};
    snap_case("kernel=3", want);
}

Test(hand, snapkv_gqa_groups)
{
    /* Two KV heads with the snap_keys above, four query heads: heads 0, 1
     * belong to KV head 0 and ask (1, 0); heads 2, 3 belong to KV head 1
     * and ask (0, 1). KV head 0 keeps 6, 1, 8 as in snapkv_kernel1; KV head
     * 1 ranks by k_y / sqrt(2) + ln n: slot 6 (0 + 3.00), 7 (1.41), 2 (0.71),
     * so it keeps 2, 6, 7. */
    ckv_cache c;
    cr_assert_eq(ckv_cache_init(&c, 1, 2, 2, 12, false, NULL), CKV_OK);
    for (int h = 0; h < 2; h++) {
        for (int t = 0; t < 12; t++) {
            memcpy(ckv_cache_key(&c, 0, h, t), snap_keys[t], sizeof snap_keys[t]);
            ckv_cache_val(&c, 0, h, t)[0] = ckv_cache_val(&c, 0, h, t)[1] = (float)t;
            ckv_cache_degp(&c, 0, h)[t] = t == 6 ? 20 : 1;
        }
        c.len[h] = 12;
    }
    float q[4][2][2] = {{{1, 0}, {1, 0}}, {{1, 0}, {1, 0}}, {{0, 1}, {0, 1}}, {{0, 1}, {0, 1}}};
    ckv_qwindow qw = {&q[0][0][0], 4, 2};
    ckv_policy p;
    make(&p, "snapkv", (const char *[]){"window=2", "kernel=1", NULL});
    int32_t assign[24];
    run(&p, &c, 5, &qw, assign);
    const int32_t want[] = {-1, 0, -1, -1, -1, -1, 1, -1, 2, -1, 3, 4,
                            -1, -1, 0, -1, -1, -1, 1, 2, -1, -1, 3, 4};
    expect_assign(assign, want, 24);
    ckv_cache_free(&c);
}

/* The causal mask of the window and avg pooling's zero padding. T = 6,
 * W = 2, B = 3 (the window 4, 5 and one more). Queries q0 = (1, 0) (the
 * token of slot 4) and q1 = (0, 1) (slot 5). Keys are chosen so that
 * exp(q . k / sqrt 2) is a whole number: slot 0 (sqrt2 ln 3, 0) gives 3 to
 * q0 and 1 to q1; slot 1 (0, sqrt2 ln 3) gives 1 and 3; slots 2..4 are 0
 * (1 and 1); slot 5 (sqrt2 ln 100, 0) gives 100 to q0 and 1 to q1.
 * q0 sees slots 0..4: Z = 7, p = 3/7, 1/7, 1/7, 1/7; q1 sees 0..5: Z = 8,
 * p = 1/8, 3/8, 1/8, 1/8. Sums s = .554, .518, .268, .268.
 *   kernel 1: slot 0 (had q0 seen slot 5, Z = 107: s0 = .153 < s1 = .384).
 *   avg kernel 3: (0 + s0 + s1) / 3 = .357, (s0 + s1 + s2) / 3 = .446,
 *   .351, (s2 + s3 + 0) / 3 = .179: slot 1 (without counting the padding
 *   slot 0 would have (s0 + s1) / 2 = .536). */
static void snap_causal_case(const char *const *sets, const int32_t *want)
{
    const float c3 = (float)(sqrt(2.0) * log(3.0)), c100 = (float)(sqrt(2.0) * log(100.0));
    const float keys[6][2] = {{c3, 0}, {0, c3}, {0, 0}, {0, 0}, {0, 0}, {c100, 0}};
    ckv_cache c;
    cr_assert_eq(ckv_cache_init(&c, 1, 1, 2, 6, false, NULL), CKV_OK);
    for (int t = 0; t < 6; t++) {
        memcpy(ckv_cache_key(&c, 0, 0, t), keys[t], sizeof keys[t]);
        ckv_cache_val(&c, 0, 0, t)[0] = ckv_cache_val(&c, 0, 0, t)[1] = (float)t;
        c.deg[t] = 1;
    }
    c.len[0] = 6;
    float q[2][2] = {{1, 0}, {0, 1}};
    ckv_qwindow qw = {&q[0][0], 1, 2};
    ckv_policy p;
    make(&p, "snapkv", sets);
    int32_t assign[6];
    run(&p, &c, 3, &qw, assign);
    cr_assert_eq(c.len[0], 3);
    expect_assign(assign, want, 6);
    ckv_cache_free(&c);
}

Test(hand, snapkv_causal_window)
{
    const int32_t want[] = {0, -1, -1, -1, 1, 2};
    snap_causal_case((const char *[]){"window=2", "kernel=1", NULL}, want);
}

Test(hand, snapkv_avg_counts_padding)
{
    const int32_t want[] = {-1, 0, -1, -1, 1, 2};
    snap_causal_case((const char *[]){"window=2", "kernel=3", "pooling=avg", NULL}, want);
}

/* K-Means keys: sinks 1, recent 2, middle slots 1..9 (M = 9), B = 5 so
 * k = 2. Initial centroids at local ((2i+1) * 9) / 4 = 2, 6: slots 3 (x-ish)
 * and 7 (y). The x-direction keys (1, 3, 5, 8) and y-direction keys
 * (2, 4, 6, 7, 9) separate at once and stay separated. */
static const float km_keys[12][2] = {{5, 5}, {2, 0},    {0, 1}, {1, 0.1f}, {0, 3}, {3, 0},
                                     {0.1f, 1}, {0, 2}, {1, 0}, {0, 1},    {4, 1}, {1, 4}};

Test(hand, kmeans)
{
    float deg[12] = {1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1};
    ckv_cache c;
    hand_cache(&c, km_keys, deg, false);
    ckv_policy p;
    make(&p, "kmeans", (const char *[]){"sinks=1", "recent=2", NULL});
    int32_t assign[12];
    run(&p, &c, 5, NULL, assign);
    cr_assert_eq(c.len[0], 5);
    const int32_t want[] = {0, 1, 2, 1, 2, 1, 2, 2, 1, 2, 3, 4};
    expect_assign(assign, want, 12);
    /* Cluster x: (2,0) + (1,0.1) + 2 (3,0) + (1,0) = (10, 0.1) over n = 5;
     * values 2 + 4 + 2*6 + 9 = 27 -> 5.4. Cluster y: (0.1, 8) / 5; values
     * 3 + 5 + 7 + 8 + 10 = 33 -> 6.6. */
    cr_expect_float_eq(ckv_cache_key(&c, 0, 0, 1)[0], 2.0f, 1e-6);
    cr_expect_float_eq(ckv_cache_key(&c, 0, 0, 1)[1], 0.02f, 1e-6);
    cr_expect_float_eq(ckv_cache_val(&c, 0, 0, 1)[0], 5.4f, 1e-6);
    cr_expect_eq(c.deg[1], 5.0f);
    cr_expect_float_eq(ckv_cache_key(&c, 0, 0, 2)[0], 0.02f, 1e-6);
    cr_expect_float_eq(ckv_cache_key(&c, 0, 0, 2)[1], 1.6f, 1e-6);
    cr_expect_float_eq(ckv_cache_val(&c, 0, 0, 2)[1], -6.6f, 1e-6);
    cr_expect_eq(c.deg[2], 5.0f);
    ckv_cache_free(&c);
}

/* ckv_kmeans_compress hands out the centroids its last assignment took:
 * with iters=0 the initial ones, the features of middle rows 2 and 6
 * (slots 3 and 7: (1, x) a and (0, 1), a = 1 / sqrt(1 + x^2), x the
 * float 0.1f); after updates each cluster's degree-weighted mean over its
 * norm: x (1 + a + 2 + 1, x a) from slots 1, 3, 5 (degree 2) and 8, y (x a,
 * 4 + a) from slots 2, 4, 6, 7 and 9, both over n = |(4 + a, x a)|. */
Test(hand, kmeans_centroids)
{
    float deg[12] = {1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1};
    const double x = 0.1f, a = 1 / sqrt(1 + x * x);
    const double n = sqrt((4 + a) * (4 + a) + x * a * x * a);
    const double want[2][4] = {{a, x * a, 0, 1}, {(4 + a) / n, x * a / n, x * a / n, (4 + a) / n}};
    const char *iters[2] = {"iters=0", "iters=10"};
    for (int r = 0; r < 2; r++) {
        ckv_cache c;
        hand_cache(&c, km_keys, deg, false);
        ckv_policy p;
        make(&p, "kmeans", (const char *[]){"sinks=1", "recent=2", iters[r], NULL});
        double cen[4] = {NAN, NAN, NAN, NAN};
        ckv_error err = {0};
        cr_assert_eq(ckv_kmeans_compress(&p, &c, 5, NULL, cen, &err), CKV_OK, "%s", err.msg);
        for (int i = 0; i < 4; i++)
            cr_expect(fabs(cen[i] - want[r][i]) <= 1e-15, "%s: centroid %d dimension %d: %.17g, "
                      "want %.17g", iters[r], i / 2, i % 2, cen[i], want[r][i]);
        cr_expect_eq(c.len[0], 5);
        ckv_cache_free(&c);
    }
}

/* Keys whose slot 7, (-1, 1), points away from the x-direction keys of the
 * other middle slots (1..9 with sinks 1, recent 2). */
static const float lone_keys[12][2] = {{5, 5},   {2, 0},  {1, 0.1f},  {3, 0}, {1, 0}, {4, 0.2f},
                                       {2, 0.1f}, {-1, 1}, {1, 0.05f}, {5, 0}, {4, 1}, {1, 4}};

/* A cluster of one member: its mean is that member's feature, already unit,
 * so its centroid is the feature itself, bit for bit. Middle slots 1..9
 * (M = 9, k = 2, initial centroids at slots 3 and 7): slot 7's key (-1, 1)
 * points away from the x-direction keys, so it stays alone in cluster 1;
 * its feature is (-1, 1) / sqrt(2) (dividing that by its own norm again, as
 * a mean of several members is, moves both dimensions by an ulp). Its
 * degree 3 must not matter. */
Test(hand, kmeans_lone_member_keeps_feature)
{
    float deg[12] = {1, 1, 1, 1, 1, 1, 1, 3, 1, 1, 1, 1};
    const double u = 1 / sqrt(2.0);
    ckv_cache c;
    hand_cache(&c, lone_keys, deg, false);
    ckv_policy p;
    make(&p, "kmeans", (const char *[]){"sinks=1", "recent=2", NULL});
    double cen[4] = {NAN, NAN, NAN, NAN};
    ckv_error err = {0};
    cr_assert_eq(ckv_kmeans_compress(&p, &c, 5, NULL, cen, &err), CKV_OK, "%s", err.msg);
    cr_expect(cen[2] == -u && cen[3] == u, "centroid 1: (%.17g, %.17g), want (%.17g, %.17g)",
              cen[2], cen[3], -u, u);
    cr_expect_eq(c.len[0], 5);
    cr_expect_eq(c.deg[2], 3.0f);
    ckv_cache_free(&c);
}

/* Each list's centroids at its own place: [list][k][head_dim]. Three KV
 * heads, iters=0 (the initial centroids, the features of middle rows 2 and
 * 6, slots 3 and 7): head 0 holds km_keys ((1, x) a and (0, 1)), head 1 the
 * lone-member keys ((3, 0) and (-1, 1): (1, 0) and (-1, 1) / sqrt(2)),
 * head 2 only 5 entries (not over the budget: its rows left as they were). */
Test(hand, kmeans_centroids_per_list)
{
    ckv_cache c;
    cr_assert_eq(ckv_cache_init(&c, 1, 3, 2, 12, false, NULL), CKV_OK);
    for (int h = 0; h < 3; h++) {
        for (int t = 0; t < 12; t++)
            for (int i = 0; i < 2; i++) {
                ckv_cache_key(&c, 0, h, t)[i] = h == 1 ? lone_keys[t][i] : km_keys[t][i];
                ckv_cache_val(&c, 0, h, t)[i] = (float)(t + 1);
            }
        for (int t = 0; t < 12; t++)
            ckv_cache_degp(&c, 0, h)[t] = 1;
        c.len[ckv_cache_lh(&c, 0, h)] = h == 2 ? 5 : 12;
    }
    ckv_policy p;
    make(&p, "kmeans", (const char *[]){"sinks=1", "recent=2", "iters=0", NULL});
    double cen[3 * 4];
    for (int i = 0; i < 12; i++)
        cen[i] = NAN;
    ckv_error err = {0};
    cr_assert_eq(ckv_kmeans_compress(&p, &c, 5, NULL, cen, &err), CKV_OK, "%s", err.msg);
    const double x = 0.1f, a = 1 / sqrt(1 + x * x), u = 1 / sqrt(2.0);
    const double want[8] = {a, x * a, 0, 1, 1, 0, -u, u};
    for (int i = 0; i < 8; i++)
        cr_expect(fabs(cen[i] - want[i]) <= 1e-15, "list %d centroid %d dimension %d: %.17g, "
                  "want %.17g", i / 4, i / 2 % 2, i % 2, cen[i], want[i]);
    for (int i = 8; i < 12; i++)
        cr_expect(isnan(cen[i]), "list 2 (not compressed): element %d written: %g", i - 8, cen[i]);
    ckv_cache_free(&c);
}

/* Its checks are ckv_policy_compress's, and it takes K-Means alone. */
Test(hand, kmeans_centroids_refused)
{
    ckv_cache c;
    hand_cache(&c, km_keys, NULL, false);
    ckv_policy p;
    double cen[4];
    ckv_error err = {0};
    make(&p, "kmeans", (const char *[]){"sinks=1", "recent=2", NULL});
    cr_expect_eq(ckv_kmeans_compress(&p, &c, 3, NULL, cen, &err), CKV_ERR_ARG);
    cr_expect(strstr(err.msg, "does not exceed the 3 entries policy kmeans protects"), "%s",
              err.msg);
    make(&p, "streaming", NULL);
    cr_expect_eq(ckv_kmeans_compress(&p, &c, 5, NULL, cen, &err), CKV_ERR_ARG);
    cr_expect(strstr(err.msg, "not kmeans"), "%s", err.msg);
    cr_expect_eq(c.len[0], 12);
    ckv_cache_free(&c);
}

Test(hand, kmeans_empty_cluster_shortens)
{
    /* Every middle key points the same way: both initial centroids are
     * equal, every entry ties and goes to cluster 0, cluster 1 stays empty:
     * one middle entry instead of two (length 4 < B = 5). */
    ckv_cache c;
    hand_cache(&c, axis_keys, NULL, false);
    ckv_policy p;
    make(&p, "kmeans", (const char *[]){"sinks=1", "recent=2", NULL});
    int32_t assign[12];
    run(&p, &c, 5, NULL, assign);
    cr_expect_eq(c.len[0], 4);
    cr_expect_eq(c.deg[1], 9.0f);
    ckv_cache_free(&c);
}

/* CSM keys: sinks 1, recent 2, chunk 4, middle slots 1..9 in chunks
 * [1..4], [5..8], [9] (the last has no destination). Alternating: A = {1, 3},
 * B = {2, 4}; A = {5, 7}, B = {6, 8}.
 *   1 (1,0): cos with 2 (1,0) = 1, with 4 (1,1) = .707 -> 2, s = 1
 *   3 (0,1): cos with 2 = 0, with 4 = .707               -> 4, s = .707
 *   5 (1,0): cos with 6 (-1,0) = -1, with 8 (1,0) = 1     -> 8, s = 1
 *   7 (0,1): cos 0 with both (tie: lowest slot)           -> 6, s = 0
 * Ranking: 1 and 5 (tie at exactly 1: lower slot first), 3, 7. */
static const float csm_keys[12][2] = {{3, 3}, {1, 0}, {1, 0},  {0, 1}, {1, 1}, {1, 0},
                                      {-1, 0}, {0, 1}, {1, 0}, {2, 1}, {5, 1}, {1, 5}};

Test(hand, centroid_one_merge)
{
    /* B = 11: m = min(ceil(0.5 * 4), 12 - 11) = 1: only 1 -> 2 (slot 1
     * wins the tie with slot 5). Merged: key (1,0), degree 2, value
     * (2 + 3) / 2 = 2.5. */
    ckv_cache c;
    hand_cache(&c, csm_keys, NULL, false);
    ckv_policy p;
    make(&p, "centroid", (const char *[]){"sinks=1", "recent=2", "chunk=4", NULL});
    int32_t assign[12];
    run(&p, &c, 11, NULL, assign);
    cr_assert_eq(c.len[0], 11);
    const int32_t want[] = {0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    expect_assign(assign, want, 12);
    cr_expect_eq(c.deg[1], 2.0f);
    cr_expect_eq(ckv_cache_val(&c, 0, 0, 1)[0], 2.5f);
    cr_expect_eq(ckv_cache_key(&c, 0, 0, 1)[0], 1.0f);
    cr_expect_eq(c.round, 1);
    ckv_cache_free(&c);
}

Test(hand, centroid_two_rounds)
{
    /* B = 9. Round 0: m = min(2, 3) = 2: 1 -> 2 and 5 -> 8. T = 10, slots
     * now hold old 0,2,3,4,6,7,8,9,10,11. Middle: new 1..7 = old 2,3,4,6 |
     * 7,8,9. Round 1 (rate 0.4), alternating:
     *   old2 (1,0): cos with old3 (0,1) = 0, old6 (-1,0) = -1 -> old3, s = 0
     *   old4 (1,1): .707 with old3, -.707 with old6          -> old3, s = .707
     *   old7 (0,1): only destination old8 (1,0)              -> old8, s = 0
     *   old9 (2,1): with old8 (1,0): 2 / sqrt 5 = .894        -> old8, s = .894
     * m = min(ceil(0.4 * 4) = 2, 10 - 9) = 1: old9 -> old8. old8 then holds
     * n = 2 + 1, key (2 (1,0) + (2,1)) / 3 = (4/3, 1/3), value
     * (2 * 7.5 + 10) / 3 = 25/3 (7.5 = (6 + 9) / 2 after round 0). */
    ckv_cache c;
    hand_cache(&c, csm_keys, NULL, false);
    ckv_policy p;
    make(&p, "centroid", (const char *[]){"sinks=1", "recent=2", "chunk=4", NULL});
    int32_t assign[12];
    run(&p, &c, 9, NULL, assign);
    cr_assert_eq(c.len[0], 9);
    const int32_t want[] = {0, 1, 1, 2, 3, 6, 4, 5, 6, 6, 7, 8};
    expect_assign(assign, want, 12);
    cr_expect_eq(c.round, 2);
    cr_expect_eq(c.deg[6], 3.0f);
    cr_expect_float_eq(ckv_cache_key(&c, 0, 0, 6)[0], 4.0f / 3, 1e-6);
    cr_expect_float_eq(ckv_cache_key(&c, 0, 0, 6)[1], 1.0f / 3, 1e-6);
    cr_expect_float_eq(ckv_cache_val(&c, 0, 0, 6)[0], 25.0f / 3, 1e-6);
    cr_expect_eq(c.deg[1], 2.0f);
    ckv_cache_free(&c);
}

Test(hand, full_changes_nothing)
{
    ckv_cache c;
    hand_cache(&c, csm_keys, NULL, false);
    ckv_policy p;
    make(&p, "full", NULL);
    cr_expect(!ckv_policy_merges(&p));
    int32_t assign[12];
    run(&p, &c, 3, NULL, assign);
    cr_expect_eq(c.len[0], 12);
    for (int t = 0; t < 12; t++)
        cr_expect_eq(assign[t], t);
    ckv_cache_free(&c);
}

/* ---- invariants on random caches ---- */

static double urand(uint64_t *s)
{
    return (double)(ckv_splitmix64(s) >> 11) / 9007199254740992.0;
}

/* 2 layers x 2 KV heads, head_dim 8, lengths 150/140/150/131; keys a
 * random walk plus noise (neighbours similar, as in real caches); degrees
 * 1..4; scores positive. */
static void random_cache(ckv_cache *c, uint64_t seed)
{
    const int32_t lens[4] = {150, 140, 150, 131};
    cr_assert_eq(ckv_cache_init(c, 2, 2, 8, 150, true, NULL), CKV_OK);
    uint64_t s = seed;
    for (int32_t lh = 0; lh < 4; lh++) {
        float walk[8];
        for (int i = 0; i < 8; i++)
            walk[i] = (float)(urand(&s) * 2 - 1);
        c->len[lh] = lens[lh];
        for (int32_t t = 0; t < lens[lh]; t++) {
            float *k = ckv_cache_key(c, lh / 2, lh % 2, t);
            float *v = ckv_cache_val(c, lh / 2, lh % 2, t);
            for (int i = 0; i < 8; i++) {
                walk[i] += (float)(urand(&s) - 0.5) * 0.3f;
                k[i] = walk[i] + (float)(urand(&s) - 0.5) * 0.2f;
                v[i] = (float)(urand(&s) * 2 - 1);
            }
            ckv_cache_degp(c, lh / 2, lh % 2)[t] = (float)(1 + ckv_splitmix64(&s) % 4);
            ckv_cache_scorep(c, lh / 2, lh % 2)[t] = (float)urand(&s);
        }
    }
}

typedef struct {
    const char *name;
    const char *sets[5];
    int32_t head, tail; /* protected slots at the start and the end */
    bool merges;
} inv_case;

static const inv_case inv_cases[] = {
    {"streaming", {"sinks=4", NULL}, 4, 0, false},
    {"h2o", {"recent=16", NULL}, 0, 16, false},
    {"snapkv", {"window=8", NULL}, 0, 8, false},
    {"snapkv", {"window=8", "pooling=avg", "kernel=5", NULL}, 0, 8, false},
    {"kmeans", {"sinks=3", "recent=10", "iters=4", NULL}, 3, 10, true},
    {"centroid", {"sinks=3", "recent=10", "chunk=8", NULL}, 3, 10, true},
    {"centroid", {"sinks=3", "recent=10", "partition=random", "seed=9"}, 3, 10, true},
    {"centroid", {"sinks=2", "recent=5", "partition=sequential", "schedule=constant"}, 2, 5, true},
};

Test(invariants, every_policy)
{
    float q[2 * 4 * 8 * 8];
    uint64_t s = 77;
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        q[i] = (float)(urand(&s) * 2 - 1);
    ckv_qwindow qw = {q, 4, 8};
    const int32_t B = 40;
    for (size_t ci = 0; ci < sizeof inv_cases / sizeof inv_cases[0]; ci++) {
        const inv_case *ic = &inv_cases[ci];
        ckv_policy p;
        make(&p, ic->name, ic->sets);
        /* What the policy says of itself (the bench's degrees follow it). */
        cr_expect_eq(ckv_policy_merges(&p), ic->merges, "%s: merges %d", ic->name,
                     ckv_policy_merges(&p));
        ckv_cache in, c, again;
        random_cache(&in, 1234 + ci);
        cr_assert_eq(ckv_cache_fork(&c, &in, in.capacity, NULL), CKV_OK);
        cr_assert_eq(ckv_cache_fork(&again, &in, in.capacity, NULL), CKV_OK);
        int32_t assign[4 * 150], assign2[4 * 150];
        run(&p, &c, B, &qw, assign);
        run(&p, &again, B, &qw, assign2);
        /* Same inputs and seed, same output. */
        cr_expect_arr_eq(assign, assign2, sizeof assign, "%s not deterministic", ic->name);
        for (int32_t lh = 0; lh < 4; lh++)
            cr_expect_arr_eq(ckv_cache_key(&c, lh / 2, lh % 2, 0),
                             ckv_cache_key(&again, lh / 2, lh % 2, 0),
                             sizeof(float) * 8 * (size_t)c.len[lh]);
        for (int32_t lh = 0; lh < 4; lh++) {
            int32_t l = lh / 2, h = lh % 2, T = in.len[lh], n = c.len[lh];
            const int32_t *a = assign + lh * 150;
            /* Length min(T, B) (K-Means may leave clusters empty). */
            if (ic->merges && !strcmp(ic->name, "kmeans"))
                cr_expect(n <= B, "%s: length %d > B", ic->name, n);
            else
                cr_expect_eq(n, B, "%s: list %d length %d, expected %d", ic->name, lh, n, B);
            /* Degrees: all of them (merging) or those of the kept slots. */
            double din = 0, dout = 0;
            for (int32_t t = 0; t < T; t++)
                if (ic->merges || a[t] >= 0)
                    din += ckv_cache_degp(&in, l, h)[t];
            for (int32_t t = 0; t < n; t++)
                dout += ckv_cache_degp(&c, l, h)[t];
            cr_expect(fabs(din - dout) < 1e-9, "%s: degrees %g -> %g", ic->name, din, dout);
            /* Protected slots unchanged, bit for bit, and in place. */
            for (int32_t t = 0; t < T; t++) {
                bool prot = t < ic->head || t >= T - ic->tail;
                if (!prot)
                    continue;
                int32_t o = a[t];
                cr_assert(o >= 0, "%s: protected slot %d gone", ic->name, t);
                cr_expect_eq(o, t < ic->head ? t : n - (T - t));
                cr_expect_arr_eq(ckv_cache_key(&c, l, h, o), ckv_cache_key(&in, l, h, t),
                                 8 * sizeof(float));
                cr_expect_arr_eq(ckv_cache_val(&c, l, h, o), ckv_cache_val(&in, l, h, t),
                                 8 * sizeof(float));
                cr_expect_eq(ckv_cache_degp(&c, l, h)[o], ckv_cache_degp(&in, l, h)[t]);
                for (int32_t u = 0; u < T; u++)
                    cr_expect(u == t || a[u] != o, "%s: slot %d merged into protected %d",
                              ic->name, u, t);
            }
            /* Slot order kept: assign is non-decreasing over surviving slots. */
            int32_t last = -1;
            for (int32_t t = 0; t < T; t++)
                if (a[t] >= 0) {
                    if (!ic->merges)
                        cr_expect(a[t] > last, "%s: order broken at %d", ic->name, t);
                    last = a[t] > last ? a[t] : last;
                }
        }
        ckv_cache_free(&in);
        ckv_cache_free(&c);
        ckv_cache_free(&again);
    }
}

Test(invariants, at_most_half_a_chunk_per_round)
{
    /* Rate 1 with excess exactly the sum of ceil(L/2) over chunks: one
     * round, every source merges, and no chunk loses more than ceil(L/2).
     * Middle 150 - 3 - 10 = 137 in chunks of 7 (19 of 7, one of 4). */
    for (int part = 0; part < 3; part++) {
        const char *pn[] = {"partition=alternating", "partition=sequential", "partition=random"};
        ckv_policy p;
        make(&p, "centroid",
             (const char *[]){"sinks=3", "recent=10", "chunk=7", "r_init=1", pn[part], NULL});
        ckv_cache c;
        random_cache(&c, 5 + part);
        int32_t U = 19 * 4 + 2, T = 150;
        int32_t assign[4 * 150];
        run(&p, &c, T - U, NULL, assign);
        cr_expect_eq(c.round, 1);
        cr_expect_eq(c.len[0], T - U);
        for (int32_t c0 = 3; c0 < T - 10; c0 += 7) {
            /* Merges stay in the chunk: removed = L - distinct output slots. */
            int32_t L = T - 10 - c0 < 7 ? T - 10 - c0 : 7, removed;
            int32_t outs[7], n_out = 0;
            for (int32_t t = c0; t < c0 + L; t++) {
                bool seen = false;
                for (int i = 0; i < n_out; i++)
                    seen |= outs[i] == assign[t];
                if (!seen)
                    outs[n_out++] = assign[t];
            }
            removed = L - n_out;
            cr_expect_eq(removed, (L + 1) / 2, "chunk at %d: %d removed", c0, removed);
        }
        ckv_cache_free(&c);
    }
}

/* Attention output with the degree bias, in double. */
static void attend(const ckv_cache *c, const float *q, double *out)
{
    int32_t T = c->len[0], d = c->head_dim;
    double mx = -INFINITY, z = 0, w[256];
    for (int32_t t = 0; t < T; t++) {
        double s = 0;
        for (int i = 0; i < d; i++)
            s += (double)q[i] * ckv_cache_key(c, 0, 0, t)[i];
        w[t] = s / sqrt(d) + log(c->deg[t]);
        mx = w[t] > mx ? w[t] : mx;
    }
    for (int i = 0; i < d; i++)
        out[i] = 0;
    for (int32_t t = 0; t < T; t++) {
        w[t] = exp(w[t] - mx);
        z += w[t];
    }
    for (int32_t t = 0; t < T; t++)
        for (int i = 0; i < d; i++)
            out[i] += w[t] / z * ckv_cache_val(c, 0, 0, t)[i];
}

Test(invariants, exact_duplicates_keep_attention)
{
    /* 60 distinct (key, value) pairs, each stored twice in adjacent slots
     * aligned to chunks of 2: with alternating partition each source's
     * partner is its twin (cosine 1), rate 1 merges every pair. */
    ckv_cache c;
    cr_assert_eq(ckv_cache_init(&c, 1, 1, 16, 120, false, NULL), CKV_OK);
    uint64_t s = 99;
    for (int32_t t = 0; t < 120; t += 2)
        for (int i = 0; i < 16; i++) {
            float k = (float)(urand(&s) * 4 - 2), v = (float)(urand(&s) * 2 - 1);
            ckv_cache_key(&c, 0, 0, t)[i] = ckv_cache_key(&c, 0, 0, t + 1)[i] = k;
            ckv_cache_val(&c, 0, 0, t)[i] = ckv_cache_val(&c, 0, 0, t + 1)[i] = v;
        }
    for (int32_t t = 0; t < 120; t++)
        c.deg[t] = (float)(1 + t / 2 % 3);
    c.len[0] = 120;
    float q[20][16];
    double before[20][16], after[16];
    for (int j = 0; j < 20; j++) {
        for (int i = 0; i < 16; i++)
            q[j][i] = (float)(urand(&s) * 6 - 3);
        attend(&c, q[j], before[j]);
    }
    ckv_policy p;
    make(&p, "centroid",
         (const char *[]){"sinks=0", "recent=0", "chunk=2", "r_init=1", NULL});
    int32_t assign[120];
    run(&p, &c, 60, NULL, assign);
    cr_assert_eq(c.len[0], 60);
    for (int32_t t = 0; t < 120; t++)
        cr_expect_eq(assign[t], t / 2);
    for (int j = 0; j < 20; j++) {
        attend(&c, q[j], after);
        for (int i = 0; i < 16; i++)
            cr_expect(fabs(after[i] - before[j][i]) < 1e-6, "query %d dim %d: %g vs %g", j, i,
                      after[i], before[j][i]);
    }
    ckv_cache_free(&c);
}

/* ---- decode hook and missing statistics ---- */

Test(decode, compresses_on_interval_only)
{
    ckv_cache c;
    hand_cache(&c, csm_keys, NULL, false);
    ckv_policy p;
    make(&p, "streaming", (const char *[]){"sinks=2", "interval=4", NULL});
    bool did;
    ckv_error err = {0};
    cr_expect_eq(ckv_policy_on_decode(&p, &c, 6, 3, NULL, &did, &err), CKV_OK);
    cr_expect(!did);
    cr_expect_eq(c.len[0], 12);
    cr_expect_eq(ckv_policy_on_decode(&p, &c, 6, 8, NULL, &did, &err), CKV_OK);
    cr_expect(did);
    cr_expect_eq(c.len[0], 6);
    /* Within budget: nothing to do even on an interval step. */
    cr_expect_eq(ckv_policy_on_decode(&p, &c, 6, 12, NULL, &did, &err), CKV_OK);
    cr_expect(!did);
    /* SnapKV compresses during decode only with decode=on. */
    ckv_policy sk;
    make(&sk, "snapkv", (const char *[]){"window=2", "interval=4", NULL});
    cr_expect_eq(ckv_policy_interval(&sk), 0);
    make(&sk, "snapkv", (const char *[]){"window=2", "interval=4", "decode=on", NULL});
    cr_expect_eq(ckv_policy_interval(&sk), 4);
    /* ... and only once W decode queries exist. */
    ckv_cache_free(&c);
    hand_cache(&c, snap_keys, NULL, false);
    float q[2] = {1, 0};
    ckv_qwindow one = {q, 1, 1};
    cr_expect_eq(ckv_policy_on_decode(&sk, &c, 5, 4, &one, &did, &err), CKV_OK, "%s", err.msg);
    cr_expect(!did);
    cr_expect_eq(c.len[0], 12);
    ckv_cache_free(&c);
}

Test(decode, csm_rounds_continue)
{
    /* A decode compression continues the sequence's round counter: after
     * the prefill compression (round 0 only, see centroid_one_merge) one
     * appended token and a decode step run round 1. */
    ckv_cache c;
    hand_cache(&c, csm_keys, NULL, false);
    ckv_policy p;
    make(&p, "centroid", (const char *[]){"sinks=1", "recent=2", "chunk=4", "interval=2", NULL});
    int32_t assign[12];
    run(&p, &c, 11, NULL, assign);
    cr_assert_eq(c.round, 1);
    ckv_cache_key(&c, 0, 0, 11)[0] = 7;
    ckv_cache_key(&c, 0, 0, 11)[1] = 1;
    c.deg[11] = 1;
    c.len[0] = 12;
    bool did;
    ckv_error err = {0};
    cr_expect_eq(ckv_policy_on_decode(&p, &c, 11, 2, NULL, &did, &err), CKV_OK, "%s", err.msg);
    cr_expect(did);
    cr_expect_eq(c.len[0], 11);
    cr_expect_eq(c.round, 2);
    ckv_cache_free(&c);
}

Test(errors, missing_statistics)
{
    ckv_cache c;
    hand_cache(&c, csm_keys, NULL, false);
    ckv_policy p;
    ckv_error err = {0};
    make(&p, "h2o", (const char *[]){"recent=2", NULL});
    cr_expect_eq(ckv_policy_compress(&p, &c, 5, NULL, NULL, &err), CKV_ERR_ARG);
    cr_expect(strstr(err.msg, "h2o_score") != NULL, "%s", err.msg);
    make(&p, "snapkv", (const char *[]){"window=2", NULL});
    cr_expect_eq(ckv_policy_compress(&p, &c, 5, NULL, NULL, &err), CKV_ERR_ARG);
    cr_expect(strstr(err.msg, "q_window") != NULL, "%s", err.msg);
    float q[2] = {1, 0};
    ckv_qwindow one = {q, 1, 1};
    cr_expect_eq(ckv_policy_compress(&p, &c, 5, &one, NULL, &err), CKV_ERR_ARG);
    cr_expect(strstr(err.msg, "window=2") != NULL, "%s", err.msg);
    ckv_cache_free(&c);
}
