/* A host cache's dtype (cache.h): a bf16 cache stores every key and value
 * rounded to the nearest bf16, ties to even, wherever it is written (the
 * CPU forward's append, the policies' merges), so that it is the CPU twin
 * of a bf16 GPU cache; an fp32 cache stores them as computed. Expected
 * merges are derived by hand (bits below); the forward is checked on a
 * small synthetic model against the fp32 cache's layer 0, which no
 * attention has touched yet, rounded by ckv_f32_to_bf16 (test_quant). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "cpu.h"
#include "kvfile.h"
#include "model.h"
#include "policies/list.h"
#include "policy.h"
#include "quant.h"
#include "splitmix.h"
#include "synth.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static bool bf16_exact(float f)
{
    return (bits(f) & 0xffffu) == 0;
}

Test(cache_dtype, init_is_f32_and_fork_carries_dtype)
{
    ckv_cache c, f;
    cr_assert_eq(ckv_cache_init(&c, 1, 1, 2, 4, false, NULL), CKV_OK);
    cr_expect_eq(c.dtype, CKV_KV_F32);
    c.dtype = CKV_KV_BF16;
    c.len[0] = 1;
    ckv_cache_key(&c, 0, 0, 0)[0] = 1.5f;
    ckv_cache_key(&c, 0, 0, 0)[1] = -2.25f;
    cr_assert_eq(ckv_cache_fork(&f, &c, 8, NULL), CKV_OK);
    cr_expect_eq(f.dtype, CKV_KV_BF16);
    cr_expect_eq(ckv_cache_key(&f, 0, 0, 0)[1], -2.25f);
    ckv_cache_free(&f);
    ckv_cache_free(&c);
}

Test(cache_dtype, store_rounds_bf16_to_nearest_even)
{
    ckv_cache c;
    cr_assert_eq(ckv_cache_init(&c, 1, 1, 1, 1, false, NULL), CKV_OK);
    /* 1 + 3 * 2^-9 (0x3F80C000): three quarters of a bf16 step above 1. */
    const float x = 1.005859375f;
    cr_expect_eq(bits(ckv_cache_store(&c, x)), 0x3F80C000u, "f32 keeps every bit");
    c.dtype = CKV_KV_BF16;
    cr_expect_eq(bits(ckv_cache_store(&c, x)), 0x3F810000u);
    cr_expect_eq(bits(ckv_cache_store(&c, 1.00390625f)), 0x3F800000u, "tie down to even");
    cr_expect_eq(bits(ckv_cache_store(&c, 1.01171875f)), 0x3F820000u, "tie up to even");
    cr_expect_eq(bits(ckv_cache_store(&c, -1.01953125f)), 0xBF820000u, "negative tie to even");
    ckv_cache_free(&c);
}

/* One list, head_dim 2: slot 1 (degree 3) merges into slot 0 (degree 1);
 * slot 2 is kept and moves to slot 1. The centroid is (x0 + 3 x1) / 4,
 * exact in fp32 and between two bf16 values in each element:
 *   key [1, 1 + 2^-6] with [1 + 2^-7, 1]:
 *     [1 + 3 * 2^-9, 1 + 2^-8]      = fp32 0x3F80C000, 0x3F808000
 *                                   -> bf16 0x3F81 (up), 0x3F80 (tie, even)
 *   value [1, -(1 + 2^-7)] with [1 + 2^-6, -(1 + 3 * 2^-7)]:
 *     [1 + 3 * 2^-8, -(1 + 5 * 2^-8)] = fp32 0x3F818000, 0xBF828000
 *                                   -> bf16 0x3F82 (tie, even), 0xBF82 (tie, even) */
static void merge_case(ckv_kv_dtype dtype, const uint32_t key[2], const uint32_t val[2])
{
    ckv_cache c;
    cr_assert_eq(ckv_cache_init(&c, 1, 1, 2, 3, false, NULL), CKV_OK);
    c.dtype = dtype;
    const float k[3][2] = {{1.0f, 1.015625f}, {1.0078125f, 1.0f}, {2.5f, -0.75f}};
    const float v[3][2] = {{1.0f, -1.0078125f}, {1.015625f, -1.0234375f}, {-3.0f, 0.5f}};
    const float deg[3] = {1, 3, 1};
    for (int t = 0; t < 3; t++) {
        memcpy(ckv_cache_key(&c, 0, 0, t), k[t], sizeof k[t]);
        memcpy(ckv_cache_val(&c, 0, 0, t), v[t], sizeof v[t]);
        ckv_cache_degp(&c, 0, 0)[t] = deg[t];
    }
    c.len[0] = 3;
    const int32_t dest[3] = {0, 0, 2};
    cr_assert_eq(ckv_list_apply(&c, 0, 0, dest, NULL, NULL), CKV_OK);
    cr_assert_eq(c.len[0], 2);
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(bits(ckv_cache_key(&c, 0, 0, 0)[i]), key[i], "key %d: %08x", i,
                     bits(ckv_cache_key(&c, 0, 0, 0)[i]));
        cr_expect_eq(bits(ckv_cache_val(&c, 0, 0, 0)[i]), val[i], "value %d: %08x", i,
                     bits(ckv_cache_val(&c, 0, 0, 0)[i]));
    }
    cr_expect_eq(ckv_cache_degp(&c, 0, 0)[0], 4.0f);
    cr_expect_eq(ckv_cache_key(&c, 0, 0, 1)[0], 2.5f);
    cr_expect_eq(ckv_cache_key(&c, 0, 0, 1)[1], -0.75f);
    cr_expect_eq(ckv_cache_val(&c, 0, 0, 1)[0], -3.0f);
    cr_expect_eq(ckv_cache_val(&c, 0, 0, 1)[1], 0.5f);
    cr_expect_eq(ckv_cache_degp(&c, 0, 0)[1], 1.0f);
    ckv_cache_free(&c);
}

Test(cache_dtype, f32_merge_keeps_the_fp32_centroid)
{
    merge_case(CKV_KV_F32, (const uint32_t[]){0x3F80C000u, 0x3F808000u},
               (const uint32_t[]){0x3F818000u, 0xBF828000u});
}

Test(cache_dtype, bf16_merge_stores_the_rounded_centroid)
{
    merge_case(CKV_KV_BF16, (const uint32_t[]){0x3F810000u, 0x3F800000u},
               (const uint32_t[]){0x3F820000u, 0xBF820000u});
}

/* Every policy that merges, on the same bf16-exact keys in both types, in
 * one merge step (CSM: one round, which merging everything it may reaches
 * the budget): the decisions see the same inputs, so the bf16 cache ends
 * as the fp32 one with each stored element rounded to bf16
 * (ckv_f32_to_bf16). */
Test(cache_dtype, merging_policies_store_bf16_in_a_bf16_cache)
{
    static const char *const policies[] = {"centroid", "kmeans"};
    static const char *const params[][4] = {{"sinks=0", "recent=0", "r_init=1", NULL}, {NULL}};
    for (size_t pi = 0; pi < sizeof policies / sizeof policies[0]; pi++) {
        ckv_cache a, b;
        cr_assert_eq(ckv_cache_init(&a, 2, 2, 8, 160, false, NULL), CKV_OK);
        uint64_t s = 11;
        const size_t n = (size_t)2 * 2 * 160 * 8;
        for (size_t i = 0; i < n; i++) {
            /* bf16-exact inputs, as a bf16 cache holds */
            const float x = (float)((double)(ckv_splitmix64(&s) >> 11) * 0x1p-52 - 0.5);
            a.k[i] = ckv_bf16_to_f32(ckv_f32_to_bf16(x + (float)(i / 8 % 160) * 0.01f));
            a.v[i] = ckv_bf16_to_f32(ckv_f32_to_bf16(2 * x));
        }
        for (size_t i = 0; i < n / 8; i++)
            a.deg[i] = 1;
        for (int lh = 0; lh < 4; lh++)
            a.len[lh] = 160 - 7 * lh;
        cr_assert_eq(ckv_cache_fork(&b, &a, a.capacity, NULL), CKV_OK);
        b.dtype = CKV_KV_BF16;
        ckv_policy p;
        ckv_error e = {0};
        cr_assert_eq(ckv_policy_init(&p, policies[pi], &e), CKV_OK, "%s", e.msg);
        for (int i = 0; params[pi][i]; i++)
            cr_assert_eq(ckv_policy_set(&p, params[pi][i], &e), CKV_OK, "%s", e.msg);
        cr_assert_eq(ckv_policy_compress(&p, &a, 100, NULL, NULL, &e), CKV_OK, "%s", e.msg);
        cr_assert_eq(ckv_policy_compress(&p, &b, 100, NULL, NULL, &e), CKV_OK, "%s", e.msg);
        cr_assert_eq(a.round, b.round);
        cr_assert_leq(a.round, 1, "%s: more than one round", policies[pi]);
        int64_t inexact = 0;
        for (int lh = 0; lh < 4; lh++) {
            cr_assert_eq(b.len[lh], a.len[lh], "%s list %d", policies[pi], lh);
            for (size_t i = (size_t)lh * 160 * 8; i < ((size_t)lh * 160 + b.len[lh]) * 8; i++) {
                inexact += !bf16_exact(a.k[i]) + !bf16_exact(a.v[i]);
                cr_assert_eq(bits(b.k[i]), (uint32_t)ckv_f32_to_bf16(a.k[i]) << 16,
                             "%s key element %zu", policies[pi], i);
                cr_assert_eq(bits(b.v[i]), (uint32_t)ckv_f32_to_bf16(a.v[i]) << 16,
                             "%s value element %zu", policies[pi], i);
            }
        }
        cr_expect_gt(inexact, 0, "%s: the fp32 centroids were bf16-exact already", policies[pi]);
        ckv_cache_free(&a);
        ckv_cache_free(&b);
    }
}

/* The CPU forward on a small synthetic model: a bf16 cache holds only
 * bf16-exact keys and values; its layer 0 is the fp32 cache's rounded. */
Test(cache_dtype, forward_appends_bf16_keys_and_values)
{
    ckv_synth_opts o;
    ckv_synth_defaults(&o);
    o.n_layer = 2;
    o.n_embd = 64;
    o.n_head = 4;
    o.n_head_kv = 2;
    o.n_ff = 128;
    o.seed = 5;
    char path[] = "/tmp/ckv_dtype_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    ckv_error e = {0};
    ckv_model model;
    ckv_cpu *cpu;
    cr_assert_eq(ckv_synth_write(&o, path, &e), CKV_OK, "%s", e.msg);
    cr_assert_eq(ckv_model_load(&model, path, &e), CKV_OK, "%s", e.msg);
    unlink(path);
    cr_assert_eq(ckv_cpu_create(&cpu, &model, 32, 1, &e), CKV_OK, "%s", e.msg);
    enum { N = 20 };
    int32_t tokens[N];
    for (int i = 0; i < N; i++)
        tokens[i] = 3 + (i * 37) % (model.cfg.n_vocab - 3);
    const ckv_config *cf = &model.cfg;
    ckv_cache c[2];
    for (int j = 0; j < 2; j++) {
        cr_assert_eq(ckv_cache_init(&c[j], cf->n_layer, cf->n_head_kv, cf->head_dim, N, false, &e),
                     CKV_OK);
        c[j].dtype = j ? CKV_KV_BF16 : CKV_KV_F32;
        /* a prefill chunk, then a decode step */
        cr_assert_eq(ckv_cpu_forward(cpu, &c[j], tokens, N - 1, NULL, NULL, &e), CKV_OK, "%s",
                     e.msg);
        cr_assert_eq(ckv_cpu_forward(cpu, &c[j], tokens + N - 1, 1, NULL, NULL, &e), CKV_OK, "%s",
                     e.msg);
    }
    const size_t hd = (size_t)cf->head_dim;
    int64_t f32_inexact = 0, bf16_inexact = 0, nonzero = 0;
    for (int l = 0; l < cf->n_layer; l++)
        for (int h = 0; h < cf->n_head_kv; h++) {
            cr_assert_eq(c[1].len[ckv_cache_lh(&c[1], l, h)], N);
            for (int t = 0; t < N; t++)
                for (size_t i = 0; i < hd; i++) {
                    const float *kv32[2] = {ckv_cache_key(&c[0], l, h, t) + i,
                                            ckv_cache_val(&c[0], l, h, t) + i};
                    const float *kv16[2] = {ckv_cache_key(&c[1], l, h, t) + i,
                                            ckv_cache_val(&c[1], l, h, t) + i};
                    for (int w = 0; w < 2; w++) {
                        f32_inexact += !bf16_exact(*kv32[w]);
                        bf16_inexact += !bf16_exact(*kv16[w]);
                        nonzero += *kv16[w] != 0;
                        if (l == 0)
                            cr_assert_eq(bits(*kv16[w]), (uint32_t)ckv_f32_to_bf16(*kv32[w]) << 16,
                                         "layer 0 head %d slot %d element %zu (%s)", h, t, i,
                                         w ? "value" : "key");
                    }
                }
        }
    cr_expect_eq(bf16_inexact, 0);
    cr_expect_gt(nonzero, 0);
    cr_expect_gt(f32_inexact, 0, "the fp32 cache stores keys and values as computed");
    ckv_cache_free(&c[0]);
    ckv_cache_free(&c[1]);
    ckv_cpu_free(cpu);
    ckv_model_free(&model);
}

/* ckv_cache_set_dtype rounds the entries a list holds (hand-picked bits:
 * 0x3F808000 is a tie that stays even at 0x3F80, 0x3F818000 one that rounds
 * up to 0x3F82) and leaves the rows past a list's length as they were. */
Test(cache_dtype, set_dtype_rounds_the_held_entries_only)
{
    ckv_cache c;
    cr_assert_eq(ckv_cache_init(&c, 1, 1, 2, 3, false, NULL), CKV_OK);
    const uint32_t in[6] = {0x3F808000u, 0x3F818000u, 0x3F808000u, 0x3F818000u,
                            0x3F808000u, 0x3F818000u};
    memcpy(c.k, in, sizeof in);
    memcpy(c.v, in, sizeof in);
    c.len[0] = 2;
    ckv_cache_set_dtype(&c, CKV_KV_BF16);
    cr_expect_eq(c.dtype, CKV_KV_BF16);
    const uint32_t want[6] = {0x3F800000u, 0x3F820000u, 0x3F800000u, 0x3F820000u,
                              0x3F808000u, 0x3F818000u};
    for (int i = 0; i < 6; i++) {
        cr_expect_eq(bits(c.k[i]), want[i], "key %d: %08x", i, bits(c.k[i]));
        cr_expect_eq(bits(c.v[i]), want[i], "value %d: %08x", i, bits(c.v[i]));
    }
    ckv_cache_set_dtype(&c, CKV_KV_F32);
    cr_expect_eq(c.dtype, CKV_KV_F32);
    cr_expect_eq(bits(c.k[4]), 0x3F808000u);
    ckv_cache_free(&c);
}

Test(cache_dtype, names_parse_and_sizes)
{
    ckv_kv_dtype d = CKV_KV_BF16;
    cr_expect(ckv_kv_dtype_parse("f32", &d) && d == CKV_KV_F32);
    cr_expect(ckv_kv_dtype_parse("bf16", &d) && d == CKV_KV_BF16);
    cr_expect(!ckv_kv_dtype_parse("fp16", &d));
    cr_expect(!ckv_kv_dtype_parse("", &d));
    cr_expect(!ckv_kv_dtype_parse("BF16", &d));
    cr_expect_str_eq(ckv_kv_dtype_name(CKV_KV_F32), "f32");
    cr_expect_str_eq(ckv_kv_dtype_name(CKV_KV_BF16), "bf16");
    cr_expect_eq(ckv_kv_dtype_size(CKV_KV_F32), 4);
    cr_expect_eq(ckv_kv_dtype_size(CKV_KV_BF16), 2);
}

/* The dump format holds fp32 caches without a dtype: a bf16 one is refused,
 * naming the file, and nothing is left behind. */
Test(cache_dtype, kvfile_refuses_a_bf16_cache)
{
    ckv_cache c;
    cr_assert_eq(ckv_cache_init(&c, 1, 1, 2, 2, false, NULL), CKV_OK);
    c.len[0] = 1;
    c.k[0] = c.k[1] = c.v[0] = c.v[1] = 1.0f;
    c.deg[0] = 1.0f;
    ckv_cache_set_dtype(&c, CKV_KV_BF16);
    char path[] = "/tmp/ckv-dtype-XXXXXX";
    cr_assert(mkdtemp(path));
    char file[64];
    snprintf(file, sizeof file, "%s/kv.h5", path);
    ckv_kvfile_extra x = {0};
    ckv_error err = {0};
    cr_expect_eq(ckv_kvfile_write(file, &c, &x, &err), CKV_ERR_UNSUPPORTED);
    cr_expect(strstr(err.msg, file) && strstr(err.msg, "bf16"), "%s", err.msg);
    cr_expect_eq(access(file, F_OK), -1);
    cr_expect_eq(rmdir(path), 0, "a temporary file was left in %s", path);
    ckv_cache_free(&c);
}
