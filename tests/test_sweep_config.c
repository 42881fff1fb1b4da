/* Sweep config: grid expansion (order, count, names) and errors with the
 * line and column of the offending node. Configs are parsed from memory;
 * the pack-file check is exercised by the CLI test. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "fuzz_dir.h"

static ckv_status parse(ckv_sweep_config *c, const char *text, ckv_error *err)
{
    return ckv_sweep_config_parse(c, "t.yaml", text, strlen(text), err);
}

static const char *const tasks = "tasks:\n  - ruler: {tasks: [niah_single_1], lengths: [512]}\n";

Test(sweep_config, grid_is_the_cartesian_product_in_written_order)
{
    char text[1024];
    snprintf(text, sizeof text,
             "%spolicies:\n"
             "  - full\n"
             "  - name: centroid\n"
             "    budgets: [25%%, 50%%]\n"
             "    r_init: [0.5, 0.3]\n"
             "    chunk: [16, 32, 64]\n"
             "  - name: snapkv\n"
             "    budgets: 0.25\n"
             "seeds: [1, 2]\n"
             "limit: 3\n"
             "mode: query_agnostic\n"
             "kv_dtype: bf16\n",
             tasks);
    ckv_sweep_config c;
    ckv_error err = {0};
    cr_assert_eq(parse(&c, text, &err), CKV_OK, "%s", err.msg);
    /* full: 1; centroid: 2 budgets x 2 r_init x 3 chunks x 2 seeds (centroid
     * has a seed parameter) = 24; snapkv (no seed parameter): 1. */
    cr_assert_eq(c.n_runs, 26);
    cr_assert_str_eq(c.runs[0].name, "full");
    cr_assert_str_eq(c.runs[1].name, "centroid@25% r_init=0.5 chunk=16 seed=1");
    cr_assert_str_eq(c.runs[2].name, "centroid@25% r_init=0.5 chunk=16 seed=2");
    cr_assert_str_eq(c.runs[3].name, "centroid@25% r_init=0.5 chunk=32 seed=1");
    cr_assert_str_eq(c.runs[7].name, "centroid@25% r_init=0.3 chunk=16 seed=1");
    cr_assert_str_eq(c.runs[13].name, "centroid@50% r_init=0.5 chunk=16 seed=1");
    cr_assert_str_eq(c.runs[24].name, "centroid@50% r_init=0.3 chunk=64 seed=2");
    cr_assert_str_eq(c.runs[25].name, "snapkv@0.25");
    cr_assert_eq(ckv_policy_param(&c.runs[7].policy, "r_init", 0), 300);
    cr_assert_eq(ckv_policy_param(&c.runs[24].policy, "chunk", 0), 64);
    cr_assert_eq(c.runs[13].budget.ppm, 500000);
    cr_assert_eq(c.limit, 3);
    cr_assert(c.query_agnostic);
    cr_assert_eq(c.kv_dtype, CKV_KV_BF16);
    cr_assert_eq(c.sources[0].lengths[0], 512);
    ckv_sweep_config_free(&c);
}

static void expect_error(const char *body, const char *where, const char *what)
{
    char text[2048];
    snprintf(text, sizeof text, "%s%s", tasks, body);
    ckv_sweep_config c;
    ckv_error err = {0};
    cr_assert_neq(parse(&c, text, &err), CKV_OK, "accepted: %s", body);
    cr_assert(strstr(err.msg, where), "'%s' lacks '%s'", err.msg, where);
    cr_assert(strstr(err.msg, what), "'%s' lacks '%s'", err.msg, what);
    ckv_sweep_config_free(&c);
}

Test(sweep_config, errors_name_line_and_column)
{
    expect_error("policies:\n  - name: nosuch\n    budgets: [25%]\n", "t.yaml:4:11",
                 "unknown policy 'nosuch'");
    expect_error("policies:\n  - name: h2o\n    budgets: [25%, 150%]\n", "t.yaml:5:20",
                 "percent must lie in (0, 100]");
    expect_error("policies:\n  - name: centroid\n    budgets: [10]\n", "t.yaml:5:15",
                 "does not exceed the 68 entries");
    expect_error("policies:\n  - name: centroid\n    budgets: [25%]\n    wobble: 3\n",
                 "t.yaml:6:5", "unknown parameter 'wobble'");
    expect_error("policies:\n  - name: centroid\n    budgets: [25%]\n    r_init: [0.5, 2]\n",
                 "t.yaml:6:19", "r_init");
    expect_error("policies: [full]\nbudget: 3\n", "t.yaml:4:1", "unknown key 'budget'");
    expect_error("policies:\n  - name: centroid\n", "t.yaml:4:11", "'budgets' is required");
    expect_error("policies: [full]\nmode: sideways\n", "t.yaml:4:7", "mode 'sideways'");
    expect_error("policies: [full]\nkv_dtype: fp16\n", "t.yaml:4:11", "kv_dtype 'fp16'");
    expect_error("policies: [full\n", "t.yaml:", "YAML");
    expect_error("policies: [full]\nmode: query_aware\nmode: query_agnostic\n", "t.yaml:5:1",
                 "config: key 'mode' given twice (first at line 4)");
    expect_error("policies:\n  - {name: h2o, budgets: [25%], budgets: [50%]}\n", "t.yaml:4:33",
                 "policies: key 'budgets' given twice");
    char text[1536];
    snprintf(text, sizeof text, "policies:\n  - name: centroid\n    budgets: [25%%]\n"
             "    sinks: [%0600d, %0600d]\n", 1, 2);
    expect_error(text, "t.yaml:6:13", "parameters longer than 511 bytes");
}

/* Repeated keys inside a ruler source once overran the task and length
 * arrays (each repeat allocated anew but kept counting). */
Test(sweep_config, ruler_keys_given_twice)
{
    ckv_sweep_config c;
    ckv_error err = {0};
    cr_assert_neq(parse(&c, "tasks:\n  - ruler: {tasks: [vt], lengths: [512], tasks: [cwe]}\n"
                            "policies: [full]\n", &err), CKV_OK);
    cr_assert(strstr(err.msg, "t.yaml:2:42: ruler: key 'tasks' given twice"), "%s", err.msg);
    ckv_sweep_config_free(&c);
}

/* 16 budgets x 16^4 values: more runs than the limit, refused before any
 * expansion (2^64 runs once wrapped the allocation size to zero). */
Test(sweep_config, grid_limit)
{
    char text[1024];
    snprintf(text, sizeof text, "%spolicies:\n  - name: centroid\n"
             "    budgets: &v [1%%, 2%%, 3%%, 4%%, 5%%, 6%%, 7%%, 8%%, 9%%, 10%%, 11%%, 12%%, 13%%,"
             " 14%%, 15%%, 16%%]\n    chunk: &i [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,"
             " 16, 17]\n    sinks: *i\n    recent: *i\n    interval: *i\n", tasks);
    ckv_sweep_config c;
    ckv_error err = {0};
    cr_assert_neq(parse(&c, text, &err), CKV_OK);
    cr_assert(strstr(err.msg, "t.yaml:4:11: policy centroid: the grid exceeds 10000 runs"), "%s",
              err.msg);
    cr_assert_eq(c.n_runs, 0);
    ckv_sweep_config_free(&c);
}

/* Every input fuzz_config once crashed or leaked on (tests/fuzz/regressions/
 * config/) loads or fails with a message naming the file; freeing releases
 * whatever the load built (the sanitizer build finds leaks). */
static void load_one(const char *path, const char *name, void *ctx)
{
    (void)ctx;
    ckv_sweep_config c;
    ckv_error err = {0};
    if (ckv_sweep_config_load(&c, path, &err))
        cr_expect(strstr(err.msg, path), "%s: '%s'", name, err.msg);
    ckv_sweep_config_free(&c);
}

Test(sweep_config, fuzz_regressions_do_not_crash)
{
    cr_assert_gt(fuzz_dir_each(CKV_SOURCE_ROOT "/tests/fuzz/regressions/config", load_one, NULL),
                 0);
}

Test(sweep_config, missing_pack_file)
{
    ckv_sweep_config c;
    ckv_error err = {0};
    const char *text = "tasks:\n  - pack: /nonexistent/pack.h5\npolicies: [full]\n";
    cr_assert_neq(parse(&c, text, &err), CKV_OK);
    cr_assert(strstr(err.msg, "t.yaml:2:11: pack '/nonexistent/pack.h5': No such file"),
              "%s", err.msg);
    ckv_sweep_config_free(&c);
}
