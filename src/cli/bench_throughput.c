/* `ckv bench throughput`: serving throughput under a fixed KV memory cap, the
 * full cache against each policy's compressed caches (issue 7: at 25% budget
 * >= 4x the full cache's tokens/s), decode-time compression included.
 * Random weights and caches on the GPU, as `ckv bench decode`.
 * docs/performance.md describes it. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "ckv_config.h"
#include "h5_table.h"
#include "model_presets.h"
#include "opts.h"
#include "session.h"
#include "policy.h"
#include "util.h"

enum { MAXL = 16 };

typedef struct {
    bench_opts b;
    const char *shape;
    int32_t ctx[MAXL];
    int n_ctx, n_budget, n_policy;
    double budget[MAXL], kv_cap_gib;
    const char *policy[MAXL];
    char *policy_list; /* storage of policy[] */
    long long max_batch, interval, group;
    ckv_config cfg; /* the --shape preset */
    const char *ctx_s, *budgets_s, *policies_s; /* the lists as given */
} opts;

static void help(FILE *fp)
{
    fprintf(fp,
            "usage: ckv bench throughput [--shape NAME] [--kv-cap GIB] [options]\n\n"
            "Serving throughput under a fixed KV memory cap, on the GPU, with random bf16\n"
            "weights of a model shape and caches of random entries (no model file), as\n"
            "`ckv bench decode`. Per context length T: the full cache (T entries per list,\n"
            "degree 1) and, per policy and budget b, compressed caches of ceil(b * T)\n"
            "entries (degrees averaging 1 / b for the merging policies, centroid and\n"
            "kmeans; 1 for the evicting ones, as they leave them). Sequences that fit =\n"
            "floor(cap / bytes of one sequence's cache), counting keys and values (of\n"
            "--kv-dtype) and fp32 degrees as the cache stores them (and the 4-byte\n"
            "slot-to-row map an entry of the policies whose calls fill: centroid,\n"
            "streaming, h2o; and H2O's 4-byte accumulated score an entry, its pending\n"
            "queries, about 0.05%%, outside), a compressed cache with room for the\n"
            "`interval` entries it grows by between compressions; then at most\n"
            "--max-batch, and at most what free GPU memory holds. That whole batch is\n"
            "decoded: median step time of R steps after W warm-up ones (host call to the\n"
            "greedy next tokens on the host), tokens/s = seqs / step.\n"
            "Compression included: every sequence's cache grown by `interval` entries is\n"
            "compressed back to the budget in calls of at most --compress-group caches\n"
            "(ckv_gpu_policy_compress_many; SnapKV and K-Means one a call; the group also\n"
            "bounded by the kernels' indexing), sizes near equal, and the pass over all is\n"
            "timed (median of min(R, 5) after one warm-up; each call on fresh random\n"
            "fills, one call's caches held); it recurs every interval steps, so a step\n"
            "costs step + pass / interval (`compr ms`: one sequence's share of the pass).\n"
            "Where the steps defer H2O's attention masses into the next step's walk\n"
            "(bf16 caches; CKV_DEFER_SCORES=0 turns it off), each call first settles\n"
            "them, reading every key once: that settle is timed over the batch after\n"
            "the steps (median of 3) and its share is added to `compr ms` (HDF5:\n"
            "settle_ms).\n"
            "The policy scratch the calls take (about 100 bytes a slot of each cache of a\n"
            "call; K-Means several KB a slot) is outside the cap, as the decoder's\n"
            "activations are; its size is reported, and it is freed after each row. A\n"
            "policy that compresses only after prefill (SnapKV with decode=off) pays nothing\n"
            "per step. Policies with the same cache layout share one step timing.\n"
            "Table on stdout, with the issue's target (25%% budget >= 4x full, compression\n"
            "included) beside what the bytes allow (`ideal`: the ratio were every step at\n"
            "its floor, the matrices' bytes plus every sequence's cache, and H2O's scores\n"
            "read and written); HDF5 file with a /throughput table and the date, device\n"
            "and command as attributes.\n\n"
            "Options:\n"
            "  --shape NAME      llama3.1-8b (default), mistral-7b or smollm2-135m\n"
            "  --device cuda     the GPU (the only device)\n"
            "  --contexts LIST   context lengths T (default 8192,32768)\n"
            "  --kv-cap GIB      KV memory for all sequences' caches, GiB (default 40)\n"
            "  --budgets LIST    fractions in (0, 1) (default 0.25,0.5,0.75)\n"
            "  --policies LIST   policies with GPU kernels (default centroid,streaming,\n"
            "                    snapkv,h2o,kmeans); unsupported shapes are skipped rows\n"
            "  --interval N      decode steps between compressions, set on every policy\n"
            "                    (default 64)\n"
            "  --max-batch N     at most N sequences per step (default 256)\n"
            "  --compress-group N  caches a compression call takes (default 8; 1: a call\n"
            "                    a sequence)\n"
            "  --warmup W        untimed steps per point (default 3: the first returns the\n"
            "                    logits, the second runs launch by launch, the third captures\n"
            "                    the CUDA graph the timed steps replay; fewer times those)\n"
            "  --repeats R       timed steps per point (default 10)\n"
            "  --seed S          weights, cache and token seed (default 1)\n"
            BENCH_KV_DTYPE_HELP
            BENCH_ROW_ORDER_HELP
            "  --out PATH        HDF5 file (default results/bench-throughput.h5)\n"
            "  -h, --help        this help\n");
}

/* The policy list, without full (always measured). */
static bool parse_policies(const char *s, opts *o)
{
    if (!bench_policy_list("--policies", s, &o->policy_list, o->policy, &o->n_policy, MAXL))
        return false;
    for (int i = 0; i < o->n_policy; i++)
        if (!strcmp(o->policy[i], "full")) {
            cli_usage_error("bench", "--policies: full is always measured; name compressing "
                            "policies");
            return false;
        }
    return true;
}

static int own_opt(void *p, int c, const char *arg)
{
    opts *o = p;
    bool ok = true;
    switch (c) {
    case 'S': o->shape = arg; break;
    case 'c': o->ctx_s = arg; break;
    case 'k': ok = cli_double("bench", "--kv-cap", arg, 1e-3, 1 << 20, &o->kv_cap_gib); break;
    case 'b': o->budgets_s = arg; break;
    case 'p': o->policies_s = arg; break;
    case 'i': ok = cli_int("bench", "--interval", arg, 1, 1 << 20, &o->interval); break;
    case 'm': ok = cli_int("bench", "--max-batch", arg, 1, 4096, &o->max_batch); break;
    case 'g': ok = cli_int("bench", "--compress-group", arg, 1, 4096, &o->group); break;
    default: return cli_usage_error("bench", "invalid option");
    }
    return ok ? CLI_OK : CLI_USAGE;
}

static int parse(int argc, char **argv, opts *o)
{
    static const struct option longopts[] = {
        {"shape", required_argument, 0, 'S'},
        {"contexts", required_argument, 0, 'c'},
        {"kv-cap", required_argument, 0, 'k'},
        {"budgets", required_argument, 0, 'b'},
        {"policies", required_argument, 0, 'p'},
        {"interval", required_argument, 0, 'i'},
        {"max-batch", required_argument, 0, 'm'},
        {"compress-group", required_argument, 0, 'g'},
        BENCH_LONGOPT_DEVICE, BENCH_LONGOPT_WARMUP, BENCH_LONGOPT_REPEATS, BENCH_LONGOPT_SEED,
        BENCH_LONGOPT_OUT, BENCH_LONGOPT_KV_DTYPE, BENCH_LONGOPT_ROW_ORDER, BENCH_LONGOPT_HELP,
        {0, 0, 0, 0},
    };
    *o = (opts){.b = {.what = "throughput", .out = "results/bench-throughput.h5", .warmup = 3,
                      .repeats = 10, .seed = 1, .max_repeats = 100000},
                .shape = "llama3.1-8b", .kv_cap_gib = 40, .max_batch = 256, .interval = 64, .group = 8,
                .ctx_s = "8192,32768", .budgets_s = "0.25,0.5,0.75",
                .policies_s = "centroid,streaming,snapkv,h2o,kmeans"};
    int rc = bench_parse(argc, argv, longopts, &o->b, own_opt, o, help, 0);
    if (rc || (rc = bench_shape("throughput", o->shape, &o->cfg)))
        return rc;
    if (!bench_int_list("--contexts", o->ctx_s, 1, 1 << 24, o->ctx, &o->n_ctx, MAXL) ||
        !bench_double_list("--budgets", o->budgets_s, 1e-6, 0.999999, o->budget, &o->n_budget,
                           MAXL) ||
        !parse_policies(o->policies_s, o))
        return CLI_USAGE;
    return CLI_OK;
}

#if CKV_HAVE_CUDA

/* One row of /throughput: the full cache or one policy at one budget. */
typedef struct {
    char *shape, *policy;  /* "full" for the full cache */
    int32_t context;
    double budget;         /* 1 for the full cache */
    int32_t entries;       /* per (layer, KV head) list after compression */
    int32_t interval;      /* decode steps between compressions; 0: none at decode */
    double seq_bytes;      /* one sequence's cache, counted against the cap */
    int32_t cap_seqs;      /* floor(cap / seq_bytes) */
    int32_t seqs;          /* decoded at once: cap_seqs, --max-batch, free memory */
    char *limit;           /* which of the three set seqs */
    double median_ms, min_ms, max_ms; /* per step of the whole batch */
    int32_t runs;
    double tokens_per_s;   /* seqs / median step */
    double compress_ms;    /* one sequence's share of a pass over all, settle included;
                            * NaN without one */
    double settle_ms;      /* one sequence's share of settling the masses the steps
                            * deferred (bench_steps); in compress_ms where it compresses */
    int32_t compress_group; /* most caches a call of the pass takes; 0 without one */
    double scratch_mib;    /* the policy scratch the pass took (outside the cap); NaN without */
    double compress_ms_per_step, compress_share, tokens_per_s_incl;
    double ratio_incl, ratio;  /* to the full cache, with and without compression */
    double ideal;          /* the floors' ratio: tokens/s were every step at its bytes' floor */
    char *status;          /* "ok" or "skipped: why"; points at note */
    char note[160];
} tp_row;

#define FD(n, t) {#n, offsetof(tp_row, n), t}
static const ckv_h5_field tp_fields[] = {
    FD(shape, CKV_H5_STR), FD(policy, CKV_H5_STR), FD(context, CKV_H5_I32),
    FD(budget, CKV_H5_F64), FD(entries, CKV_H5_I32), FD(interval, CKV_H5_I32),
    FD(seq_bytes, CKV_H5_F64), FD(cap_seqs, CKV_H5_I32), FD(seqs, CKV_H5_I32),
    FD(limit, CKV_H5_STR), FD(median_ms, CKV_H5_F64), FD(min_ms, CKV_H5_F64),
    FD(max_ms, CKV_H5_F64), FD(runs, CKV_H5_I32), FD(tokens_per_s, CKV_H5_F64),
    FD(compress_ms, CKV_H5_F64), FD(settle_ms, CKV_H5_F64), FD(compress_group, CKV_H5_I32),
    FD(scratch_mib, CKV_H5_F64),
    FD(compress_ms_per_step, CKV_H5_F64),
    FD(compress_share, CKV_H5_F64), FD(tokens_per_s_incl, CKV_H5_F64),
    FD(ratio_incl, CKV_H5_F64), FD(ratio, CKV_H5_F64), FD(ideal, CKV_H5_F64),
    FD(status, CKV_H5_STR),
};
#undef FD

static bool tracks_score(const ckv_policy *p)
{
    return p && (ckv_policy_needs(p) & CKV_NEEDS_SCORE);
}

/* Bytes of the scores of `entries` entries of every list (fp32, as a cache
 * that tracks them stores them). */
static double score_bytes(const ckv_config *cfg, double entries)
{
    return (double)cfg->n_layer * cfg->n_head_kv * entries * sizeof(float);
}

/* Device bytes of one sequence's batch cache (with room for the timed steps
 * and, when tracked, scores and the decoder's logit scratch for the cache:
 * one layer's logits per query head), for the free-memory limit. The
 * compression's pass holds only one call's caches, before the steps'. */
static double device_bytes(const ckv_config *cfg, const opts *o, const tp_row *r, bool score)
{
    const double e = r->entries + (double)(o->b.warmup + o->b.repeats + BENCH_SETTLE_RUNS);
    return bench_cache_bytes(cfg, o->b.kv_dtype, e) +
           (score ? score_bytes(cfg, e) + (double)cfg->n_head * e * sizeof(float) : 0);
}

/* Fills a row's counts and the sequences the cap admits; the status says
 * whether the policy takes the budget. */
static void init_row(tp_row *r, const opts *o, const ckv_config *cfg, const ckv_policy *p,
                     const char *name, int32_t context, double budget)
{
    *r = (tp_row){.shape = (char *)o->shape, .policy = (char *)name, .context = context,
                  .budget = budget, .limit = "kv-cap"};
    r->median_ms = r->min_ms = r->max_ms = r->tokens_per_s = r->compress_ms = r->settle_ms = NAN;
    r->scratch_mib = NAN;
    r->compress_ms_per_step = r->compress_share = r->tokens_per_s_incl = NAN;
    r->ratio_incl = r->ratio = r->ideal = NAN;
    r->status = r->note;
    snprintf(r->note, sizeof r->note, "ok");
    r->entries = context;
    if (p) {
        int64_t entries = context;
        bool skip = false;
        char why[160];
        ckv_error err = {0};
        const ckv_budget b = {.ppm = llround(budget * 1e6)};
        if (ckv_budget_check(p, &b, context, &entries, &skip, why, sizeof why, &err))
            snprintf(r->note, sizeof r->note, "skipped: %.140s", err.msg);
        else if (skip)
            snprintf(r->note, sizeof r->note, "skipped: %.140s", why);
        r->entries = (int32_t)entries;
        r->interval = ckv_policy_interval(p);
    }
    const double room = r->entries + (double)r->interval;
    /* H2O's accumulated scores are the sequence's state as its keys are. */
    r->seq_bytes = bench_cache_bytes(cfg, o->b.kv_dtype, room) +
                   (p ? (double)cfg->n_layer * cfg->n_head_kv * room * ckv_gpu_policy_entry_bytes(p)
                      : 0) +
                   (tracks_score(p) ? score_bytes(cfg, room) : 0);
    r->cap_seqs = (int32_t)fmin(floor(o->kv_cap_gib * (1 << 30) / r->seq_bytes), INT32_MAX);
    r->seqs = r->cap_seqs;
    if (r->seqs > o->max_batch) {
        r->seqs = (int32_t)o->max_batch;
        r->limit = "max-batch";
    }
    if (r->seqs < 1 && !strcmp(r->status, "ok"))
        snprintf(r->note, sizeof r->note, "skipped: one sequence's cache (%.2f GiB) exceeds "
                 "the cap", r->seq_bytes / (1 << 30));
}

static void print_rows(const tp_row *rows, size_t n, double cap_gib)
{
    printf("\nKV cap %.1f GiB\n%-7s %-14s %7s %5s %-9s %9s %9s %10s %8s %6s %9s %7s %7s\n",
           cap_gib, "context", "cache", "entries", "seqs", "limit", "step ms", "tok/s",
           "compr ms", "ms/step", "share", "tok/s+c", "x full", "x f+c");
    for (size_t i = 0; i < n; i++) {
        const tp_row *r = &rows[i];
        char cache[48];
        if (r->budget < 1)
            snprintf(cache, sizeof cache, "%s %.0f%%", r->policy, 100 * r->budget);
        else
            snprintf(cache, sizeof cache, "full");
        printf("%-7d %-14s %7d", r->context, cache, r->entries);
        if (strcmp(r->status, "ok")) {
            printf(" %s\n", r->status);
            continue;
        }
        printf(" %5d %-9s %9.3f %9.0f %10.3f %8.3f %5.1f%% %9.0f %7.2f %7.2f\n", r->seqs, r->limit,
               r->median_ms, r->tokens_per_s, r->compress_ms, r->compress_ms_per_step,
               100 * r->compress_share, r->tokens_per_s_incl, r->ratio, r->ratio_incl);
    }
}

/* What the bytes allow r over the full row: a step's floor is the matrices'
 * bytes plus every sequence's cache as it is decoded, so at equal efficiency
 * tokens/s go as seqs / (W + seqs x cache). Where a compressed batch holds
 * more sequences than its cache shrinks (39 of 8,192 entries against 9 of
 * 32,768 at 32K under 40 GiB) its step reads more than the full one and the
 * ideal falls under the ratio of sequences (4.08x against 4.33x). A policy
 * that tracks scores also reads and writes each entry's score a step (H2O:
 * 8 bytes an entry of each list). */
static double bytes_ideal(const ckv_config *cfg, ckv_kv_dtype dt, const tp_row *r,
                          const tp_row *full, bool score)
{
    const double w = bench_matrix_bytes(cfg);
    const double step_r = w + r->seqs * (bench_cache_bytes(cfg, dt, r->entries) +
                                         (score ? 2 * score_bytes(cfg, r->entries) : 0));
    const double step_f = w + full->seqs * bench_cache_bytes(cfg, dt, full->entries);
    return (double)r->seqs / full->seqs * step_f / step_r;
}

/* The target: at 25% budget, >= 4x the full cache's tokens/s under
 * the same cap, compression included. */
static void print_targets(const tp_row *rows, size_t n)
{
    printf("\ntarget: tokens/s at 25%% budget >= 4x full, same KV cap, compression included\n");
    int seen = 0;
    for (size_t i = 0; i < n; i++) {
        const tp_row *r = &rows[i];
        if (fabs(r->budget - 0.25) > 1e-9)
            continue;
        seen++;
        if (strcmp(r->status, "ok") || isnan(r->ratio_incl))
            printf("  %-10s context %7d: not measured (%s)\n", r->policy, r->context,
                   strcmp(r->status, "ok") ? r->status : "the full cache was not measured");
        else
            printf("  %-10s context %7d: %.2fx (the bytes allow %.2fx): %s\n", r->policy,
                   r->context, r->ratio_incl, r->ideal, r->ratio_incl >= 4 ? "met" : "missed");
    }
    if (!seen)
        printf("  no 25%% budget among --budgets\n");
}

/* Sets the step timing of row i: a copy of an earlier row's with the same
 * context, entries and cache layout (scores, degrees: row_score, row_degree),
 * else a new measurement. */
static ckv_status step_point(ckv_gpu *g, const ckv_config *cfg, const opts *o, tp_row *rows,
                             size_t i, const bool *row_score, const float *row_degree,
                             uint64_t seed, float *logits, ckv_error *err)
{
    tp_row *r = &rows[i];
    const bool score = row_score[i];
    for (size_t j = 0; j < i; j++) {
        const tp_row *s = &rows[j];
        if (s->context == r->context && s->entries == r->entries && s->budget == r->budget &&
            s->seqs == r->seqs && row_score[j] == score && row_degree[j] == row_degree[i] &&
            !isnan(s->median_ms)) {
            r->median_ms = s->median_ms;
            r->min_ms = s->min_ms;
            r->max_ms = s->max_ms;
            r->runs = s->runs;
            r->settle_ms = s->settle_ms;
            return CKV_OK;
        }
    }
    bench_steps t;
    ckv_status st = bench_time_steps(g, cfg, o->b.kv_dtype, r->seqs, r->entries, r->context,
                                     row_degree[i], score,
                                     (int32_t)o->b.warmup, (int32_t)o->b.repeats, seed, logits, &t,
                                     err);
    if (!st) {
        r->median_ms = t.median_ms;
        r->min_ms = t.min_ms;
        r->max_ms = t.max_ms;
        r->runs = t.runs;
        r->settle_ms = t.settle_ms / r->seqs;
    }
    return st;
}

/* Lowers r->seqs to what free device memory holds now. */
static void fit_free_memory(tp_row *r, const ckv_config *cfg, const opts *o, bool score)
{
    ckv_cuda_device d;
    ckv_error err = {0};
    if (ckv_cuda_device_query(0, &d, &err))
        return;
    const double avail = (double)d.mem_free - (double)(1u << 30),
                 fit = floor(avail / device_bytes(cfg, o, r, score));
    if (fit < r->seqs) {
        r->seqs = fit > 0 ? (int32_t)fit : 0;
        r->limit = "free-mem";
    }
    if (r->seqs < 1)
        snprintf(r->note, sizeof r->note, "skipped: one cache does not fit in %.1f GiB free",
                 (double)d.mem_free / (1 << 30));
}

static int run(int argc, char **argv, const opts *o)
{
    ckv_error err = {0};
    const ckv_config cfg = o->cfg;
    ckv_cuda_device dev;
    if (!bench_gpu(&dev))
        return CLI_FAIL;
    const size_t per_ctx = 1 + (size_t)o->n_policy * o->n_budget, n = per_ctx * o->n_ctx;
    tp_row *rows = calloc(n, sizeof *rows);
    bool *row_score = calloc(n, sizeof *row_score);
    float *row_degree = calloc(n, sizeof *row_degree);
    ckv_policy *pol = calloc((size_t)o->n_policy, sizeof *pol);
    char *cmdline = bench_command_line(argc, argv);
    float *logits = NULL;
    ckv_gpu *g = NULL;
    int rc = CLI_OK;
    char date[32], cap[32];
    bench_utc_now(date);
    snprintf(cap, sizeof cap, "%g", o->kv_cap_gib);
    if (!rows || !row_score || !row_degree || !pol || !cmdline) {
        fprintf(stderr, "ckv bench: out of memory\n");
        rc = CLI_FAIL;
        goto done;
    }
    char iv[24];
    snprintf(iv, sizeof iv, "%lld", o->interval);
    for (int k = 0; k < o->n_policy; k++) {
        ckv_policy_init(&pol[k], o->policy[k], &err);
        if (ckv_policy_param(&pol[k], "interval", -1) >= 0 &&
            ckv_policy_set_kv(&pol[k], "interval", iv, &err)) {
            rc = cli_fail("bench", &err);
            goto done;
        }
    }
    int32_t max_batch = 1;
    for (int t = 0; t < o->n_ctx; t++)
        for (size_t k = 0; k < per_ctx; k++) {
            const int pk = k ? (int)((k - 1) / o->n_budget) : -1;
            tp_row *r = &rows[t * per_ctx + k];
            init_row(r, o, &cfg, k ? &pol[pk] : NULL, k ? o->policy[pk] : "full", o->ctx[t],
                     k ? o->budget[(k - 1) % o->n_budget] : 1.0);
            row_score[t * per_ctx + k] = k && tracks_score(&pol[pk]);
            row_degree[t * per_ctx + k] = bench_max_degree(k ? &pol[pk] : NULL, r->budget);
            if (!strcmp(r->status, "ok") && r->seqs > max_batch)
                max_batch = r->seqs;
        }
    if (!(logits = malloc((size_t)max_batch * cfg.n_vocab * sizeof *logits))) {
        fprintf(stderr, "ckv bench: out of memory\n");
        rc = CLI_FAIL;
        goto done;
    }
    printf("device: %s (%.1f GiB); %s; shape %s: %.2f GB of bf16 matrices; KV cap %s GiB of "
           "%s caches\n",
           dev.name, (double)dev.mem_total / (1 << 30), date, o->shape,
           bench_matrix_bytes(&cfg) / 1e9, cap,
           ckv_kv_dtype_name(o->b.kv_dtype));
    if (ckv_gpu_create_synthetic(&g, &cfg, 0, max_batch, (uint64_t)o->b.seed, &err)) {
        rc = cli_fail("bench", &err);
        goto done;
    }
    for (int t = 0; t < o->n_ctx; t++) {
        tp_row *full = &rows[t * per_ctx];
        for (size_t k = 0; k < per_ctx; k++) {
            tp_row *r = &full[k];
            const ckv_policy *p = k ? &pol[(k - 1) / o->n_budget] : NULL;
            const uint64_t seed = (uint64_t)o->b.seed + 1000 * (uint64_t)(t * per_ctx + k + 1);
            const bool score = row_score[t * per_ctx + k];
            if (strcmp(r->status, "ok"))
                continue;
            fit_free_memory(r, &cfg, o, score);
            if (strcmp(r->status, "ok"))
                continue;
            if (p && !ckv_gpu_policy_supported(p)) {
                snprintf(r->note, sizeof r->note, "skipped: no GPU kernels for %s with these "
                         "parameters", r->policy);
                continue;
            }
            const int32_t runs = o->b.repeats < 5 ? (int32_t)o->b.repeats : 5;
            double pass_ms = NAN;
            ckv_status st = p && r->interval
                                ? bench_time_compress(&cfg, o->b.kv_dtype, p, r->entries,
                                                      r->interval, r->context, r->budget, 0,
                                                      r->seqs, (int32_t)o->group, runs, seed,
                                                      o->b.rows_random, &pass_ms, NULL,
                                                      &r->compress_group, &err)
                                : CKV_OK;
            /* This row's scratch, freed before the steps and the next row. */
            if (p && r->interval)
                r->scratch_mib = (double)ckv_gpu_policy_scratch_bytes(0) / (1 << 20);
            ckv_gpu_policy_scratch_release(0);
            if (st == CKV_ERR_UNSUPPORTED) {
                snprintf(r->note, sizeof r->note, "skipped: %.140s", err.msg);
                continue;
            }
            if (st || (st = step_point(g, &cfg, o, rows, t * per_ctx + k, row_score, row_degree,
                                       seed, logits, &err))) {
                rc = cli_fail("bench", &err);
                goto done;
            }
            r->tokens_per_s = r->seqs / (r->median_ms * 1e-3);
            r->compress_ms = pass_ms / r->seqs + (p && r->interval ? r->settle_ms : 0);
            r->compress_ms_per_step = r->interval ? r->compress_ms * r->seqs / r->interval : 0;
            const double step = r->median_ms + r->compress_ms_per_step;
            r->compress_share = r->compress_ms_per_step / step;
            r->tokens_per_s_incl = r->seqs / (step * 1e-3);
            if (!strcmp(full->status, "ok")) {
                r->ratio = r->tokens_per_s / full->tokens_per_s;
                r->ratio_incl = r->tokens_per_s_incl / full->tokens_per_s_incl;
                r->ideal = bytes_ideal(&cfg, o->b.kv_dtype, r, full, score);
            }
            fprintf(stderr, "ckv bench: %s context %d %s entries %d: %d seqs, %.3f ms/step, "
                    "compression %.3f ms/step (%d caches a call, scratch %.0f MiB; settle "
                    "%.3f ms a sequence)\n", o->shape, r->context, r->policy, r->entries,
                    r->seqs, r->median_ms, r->compress_ms_per_step, r->compress_group,
                    r->scratch_mib, r->settle_ms);
        }
    }
    print_rows(rows, n, o->kv_cap_gib);
    print_targets(rows, n);
    const char *attrs[] = {"format", "ckv-bench-throughput", "version", "3", "date", date,
                           "device", dev.name, "command", cmdline, "git_rev", CKV_GIT_REV,
                           "shape", o->shape, "kv_cap_gib", cap, "kv_dtype",
                           ckv_kv_dtype_name(o->b.kv_dtype), "row_order",
                           o->b.rows_random ? "random" : "slot"};
    const ckv_h5_table table = {"/throughput", tp_fields, sizeof tp_fields / sizeof tp_fields[0],
                                sizeof(tp_row), rows, n};
    rc = bench_write(o->b.out, attrs, sizeof attrs / sizeof attrs[0] / 2, &table, 1);
done:
    ckv_gpu_free(g);
    free(rows);
    free(row_score);
    free(row_degree);
    free(pol);
    free(logits);
    free(cmdline);
    return rc;
}

#endif

int bench_throughput(int argc, char **argv)
{
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc) {
        free(o.policy_list);
        return rc < 0 ? CLI_OK : rc;
    }
#if CKV_HAVE_CUDA
    rc = run(argc, argv, &o);
#else
    rc = bench_no_cuda("throughput");
#endif
    free(o.policy_list);
    return rc;
}
