/* Teacher forcing on a small synthetic model: the full-cache perplexity
 * equals the one computed from a single all-logits pass over the whole
 * sequence (rows and targets line up); the `full` policy's one-token decode
 * steps reproduce the batched logits (KL ~ 0, top-1 100%); real policies
 * compress on their interval and move the distribution; a fractional budget
 * not above the protected count is a skip; bad prefixes are errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cpu.h"
#include "fidelity.h"
#include "model.h"
#include "policy.h"
#include "synth.h"
#include "teacher_force.h"

enum { N = 96, PREFIX = 48 };

static char path[64];
static ckv_model model;
static ckv_cpu *cpu;
static int32_t tokens[N];

static void setup(void)
{
    ckv_synth_opts o;
    ckv_synth_defaults(&o);
    o.n_layer = 2;
    o.n_embd = 64;
    o.n_head = 4;
    o.n_head_kv = 2;
    o.n_ff = 128;
    o.seed = 7;
    strcpy(path, "/tmp/ckv_tf_XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    ckv_error e = {0};
    cr_assert_eq(ckv_synth_write(&o, path, &e), CKV_OK, "%s", e.msg);
    cr_assert_eq(ckv_model_load(&model, path, &e), CKV_OK, "%s", e.msg);
    cr_assert_eq(ckv_cpu_create(&cpu, &model, 32, 1, &e), CKV_OK, "%s", e.msg);
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        tokens[i] = 3 + (int32_t)((x >> 33) % (uint64_t)(model.cfg.n_vocab - 3));
    }
}

static void teardown(void)
{
    ckv_cpu_free(cpu);
    ckv_model_free(&model);
    unlink(path);
}

TestSuite(teacher_force, .init = setup, .fini = teardown);

static ckv_tf_result run(const char *policy, const char *budget, const char **sets, int n_sets)
{
    ckv_error e = {0};
    static ckv_policy p;
    ckv_tf_opts o = {.prefix = PREFIX, .batch = 20};
    if (policy) {
        cr_assert_eq(ckv_policy_init(&p, policy, &e), CKV_OK, "%s", e.msg);
        for (int i = 0; i < n_sets; i++)
            cr_assert_eq(ckv_policy_set(&p, sets[i], &e), CKV_OK, "%s", e.msg);
        cr_assert_eq(ckv_budget_parse(budget, &o.budget, &e), CKV_OK, "%s", e.msg);
        o.policy = &p;
    }
    ckv_tf_result r;
    cr_assert_eq(ckv_teacher_force(cpu, &model, tokens, N, &o, &r, &e), CKV_OK, "%s", e.msg);
    return r;
}

Test(teacher_force, full_cache_matches_one_pass)
{
    int32_t V = model.cfg.n_vocab;
    ckv_cache c;
    ckv_error e = {0};
    cr_assert_eq(ckv_cache_init(&c, model.cfg.n_layer, model.cfg.n_head_kv, model.cfg.head_dim, N,
                                false, &e), CKV_OK);
    float *logits = malloc((size_t)N * V * sizeof *logits);
    ckv_forward_opts all = {.all_logits = true};
    cr_assert_eq(ckv_cpu_forward(cpu, &c, tokens, N, &all, logits, &e), CKV_OK, "%s", e.msg);
    /* row t predicts tokens[t + 1]; scored: tokens[PREFIX + 1 .. N) */
    double nll = 0;
    for (int t = PREFIX; t < N - 1; t++)
        nll -= ckv_token_logprob(logits + (size_t)t * V, V, tokens[t + 1]);
    double want = exp(nll / (N - 1 - PREFIX));
    free(logits);
    ckv_cache_free(&c);
    ckv_tf_result r = run(NULL, NULL, NULL, 0);
    cr_assert_eq(r.s.n, N - 1 - PREFIX);
    cr_assert_float_eq(r.s.ppl_full, want, 1e-4 * want);
    cr_assert(isnan(r.s.ppl_comp) && isnan(r.s.kl_mean));
    cr_assert_gt(r.s.ppl_full, 1.0);
}

Test(teacher_force, full_policy_is_the_full_cache)
{
    ckv_tf_result r = run("full", "100%", NULL, 0);
    cr_assert(!r.skipped);
    cr_assert_eq(r.compressions, 0);
    cr_assert_float_eq(r.s.ppl_comp, r.s.ppl_full, 1e-4 * r.s.ppl_full);
    cr_assert_lt(r.s.kl_mean, 1e-8);
    cr_assert_float_eq(r.s.top1, 1.0, 1e-15);
    cr_assert_eq(r.peak_len, N - 1, "the last decode step holds every token but the last");
}

Test(teacher_force, compressing_policies_move_the_distribution)
{
    const char *stream[] = {"sinks=2", "interval=8"};
    ckv_tf_result r = run("streaming", "16", stream, 2);
    cr_assert(!r.skipped);
    cr_assert_eq(r.budget_entries, 16);
    /* one at prefill, then every 8 decode steps over the 47 steps */
    cr_assert_eq(r.compressions, 1 + 47 / 8);
    cr_assert_eq(r.peak_len, 16 + 8);
    cr_assert_gt(r.s.kl_mean, 1e-6);
    cr_assert_geq(r.s.kl_max, r.s.kl_mean);
    cr_assert_leq(r.s.top1, 1.0);
    cr_assert_neq(r.s.ppl_comp, r.s.ppl_full);
    /* SnapKV re-scoring in decode once W decode queries exist */
    const char *snap[] = {"window=4", "decode=on", "interval=8"};
    r = run("snapkv", "16", snap, 3);
    cr_assert_eq(r.compressions, 1 + 47 / 8);
    cr_assert_gt(r.s.kl_mean, 1e-6);
    const char *h2o[] = {"recent=4", "interval=8"};
    r = run("h2o", "25%", h2o, 2);
    cr_assert_eq(r.budget_entries, 12);
    cr_assert_eq(r.compressions, 1 + 47 / 8);
    const char *csm[] = {"sinks=2", "recent=4", "chunk=8", "interval=8"};
    r = run("centroid", "24", csm, 4);
    cr_assert_geq(r.compressions, 1);
    /* degree-weighted merging keeps attention close: small but not zero */
    cr_assert_gt(r.s.kl_mean, 0.0);
}

Test(teacher_force, small_fraction_is_a_skip_and_bad_prefix_an_error)
{
    ckv_tf_result r = run("streaming", "1%", NULL, 0);
    cr_assert(r.skipped);
    cr_assert_neq(r.skip_reason[0], 0);
    cr_assert(isnan(r.s.ppl_comp));
    cr_assert_gt(r.s.ppl_full, 1.0, "the full cache is still scored");
    ckv_tf_opts o = {.prefix = N - 1};
    ckv_error e = {0};
    cr_assert_eq(ckv_teacher_force(cpu, &model, tokens, N, &o, &r, &e), CKV_ERR_ARG);
    cr_assert_not_null(strstr(e.msg, "prefix"));
}
