/* `ckv bench compress`: one compression by every policy of the same cache
 * (a dump, or synthetic caches of several lengths and a model's shape), on
 * the CPU or the GPU, with CSM's rounds and K-Means' iterations stated, and
 * on the GPU each policy's decode-time compression as a share of decode
 * time (issue 7). docs/performance.md describes it. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "ckv_config.h"
#include "h5_table.h"
#include "kvfile.h"
#include "model_presets.h"
#include "opts.h"
#include "session.h"
#include "policies/csm.h"
#include "policy.h"
#include "synthetic_kv.h"
#include "util.h"
#if CKV_HAVE_CUDA
#include "cuda.h"
#endif

enum { MAXL = 16, MAXP = 16 };

/* K-Means iterations, set on the policy explicitly (its `iters`). */
#define KMEANS_ITERS "10"
/* Decode steps per point of the decode share, as `ckv bench decode`'s defaults. */
enum { STEP_WARMUP = 3, STEP_REPEATS = 20 };

typedef struct {
    bench_opts b;
    const char *shape; /* --shape; NULL: the default or --layers/--kv-heads/--head-dim */
    const char *budget_s, *dump;
    bool synthetic, gpu, custom; /* custom: --layers, --kv-heads or --head-dim */
    int32_t tokens[MAXL], interval[MAXL];
    int n_tokens, n_interval, n_policy;
    const char *policy[MAXP];
    char *policy_list; /* storage of policy[] */
    long long layers, heads, n_head, dim;
    const char *tokens_s, *intervals_s, *policies_s; /* the lists as given; NULL: not given */
} opts;

static void help(FILE *fp)
{
    fprintf(fp,
            "usage: ckv bench compress (kv.h5 | --synthetic --tokens LIST [--shape NAME |\n"
            "                           --layers L --kv-heads H --head-dim D] [--seed S])\n"
            "                          [--budget X] [--policies LIST] [--repeats R]\n"
            "                          [--device cpu|cuda] [--intervals LIST] [--out PATH]\n\n"
            "Times one compression by every policy of the same cache at the same budget, the\n"
            "median of R runs each on a fresh copy, and prints CPU and wall time and the\n"
            "ratios to centroid (CSM). Parameters are the policies' defaults except K-Means'\n"
            "iterations, set explicitly to iters=" KMEANS_ITERS ". One CSM call runs rounds until\n"
            "the budget is met (policies.md): column `rounds` counts them, `ms/round` is\n"
            "the call over its rounds, and a second centroid row (`one round`) times a\n"
            "call whose budget T - m0 (m0 the merges of the cache's next round) makes it\n"
            "exactly one round: the first and largest. CSM, K-Means and SnapKV compress\n"
            "their lists in parallel (OpenMP; OMP_NUM_THREADS=1 for one thread), so compare\n"
            "the CPU column across policies.\n"
            "A synthetic cache has keys that drift like real ones (seeded random walk plus\n"
            "noise) and window queries near the newest keys, so caches longer than the\n"
            "model's context can be timed; one per --tokens value, shortest first. With\n"
            "--device cuda the GPU policy kernels are timed instead: wall time of the call,\n"
            "which returns when the GPU is done, after an untimed upload of the cache (and\n"
            "one untimed warm-up run that takes the kernels' scratch); the ratios are then\n"
            "to centroid on the GPU. K-Means calls whose cache and scratch would not fit in\n"
            "free GPU memory are skipped rows.\n\n"
            "Decode share (GPU only): per cache length T, one decode step (batch 1) of the\n"
            "model shape with random bf16 weights over a random cache of B entries (the\n"
            "budget) at position T, median of %d after %d warm-up steps, as `ckv bench\n"
            "decode` (degrees 1 for the evicting policies, as they leave them); and per\n"
            "policy and interval N, the compression the policy runs every N decode steps:\n"
            "a cache of B + N random entries back to B, median of R after a\n"
            "warm-up (as `ckv bench throughput`; the policy's `interval` set to N; CSM from\n"
            "the round its compression of T tokens reached, as a decode compression\n"
            "continues the count), plus the settle of the masses a step deferred (H2O\n"
            "over bf16: each call first adds them, reading every key once; timed after\n"
            "the steps, median of 3; HDF5: settle_ms). Share = compression / (compression\n"
            "+ N x step): the part of decode time spent compressing. A policy that\n"
            "compresses only after prefill (SnapKV with decode=off, its default; full) has\n"
            "share 0. Needs a model shape: --shape, or a cache whose layers, KV heads,\n"
            "query heads and head_dim are a known shape's. With --device cpu the decode\n"
            "share is not measured\n"
            "(\"n/a (cpu)\") and --intervals is a usage error.\n\n"
            "Table on stdout, then the issue's targets (a CSM round >= 20x faster than\n"
            "K-Means at 32768 tokens; compression < 5%% of decode time at interval 64);\n"
            "HDF5 file with a /compress table (and /decode_share on the GPU) and the\n"
            "date, device, command, git revision, K-Means's estimate form (wgmma,\n"
            "mma.sync or cpu: the form head_dim 64 and 128 take) and its lazy features'\n"
            "mode (off, on, auto or cpu; CKV_KM_LAZY) as attributes. Rows are written as\n"
            "each length ends, flushed, to PATH.part, whose status attribute says running;\n"
            "a complete run renames it over PATH; a failed one leaves it (status failed;\n"
            "none if no length ended) and PATH untouched; a killed one leaves it running.\n\n"
            "Options:\n"
            "  --synthetic       use synthetic caches instead of a dump\n"
            "  --tokens LIST     synthetic cache lengths, e.g. 8192,32768,131072 (required\n"
            "                    with --synthetic)\n"
            "  --shape NAME      synthetic layers, KV heads, query heads and head_dim of\n"
            "                    llama3.1-8b, mistral-7b or smollm2-135m (default: the\n"
            "                    values below, smollm2-135m's)\n"
            "  --layers L        synthetic layers (default 30, as SmolLM2-135M)\n"
            "  --kv-heads H      synthetic KV heads (default 3; 3 query heads each)\n"
            "  --head-dim D      synthetic head dimension (default 64)\n"
            "  --seed S          synthetic cache, weights and token seed (default 1)\n"
            "  --budget X        25%% (default), 0.25 or an entry count\n"
            "  --policies LIST   policies to time (default: all)\n"
            "  --repeats R       timed runs per policy (default 5)\n"
            "  --device D        cpu (default) or cuda\n"
            "  --kv-dtype T      the cache's keys and values: f32 (default) or bf16 (every\n"
            "                    key and value rounded once; the CPU's cache rounds as the\n"
            "                    GPU's stores)\n"
            "  --intervals LIST  decode steps between compressions for the decode share\n"
            "                    (--device cuda; default 16,32,64,128,256)\n"
            BENCH_ROW_ORDER_HELP
            "  --out PATH        HDF5 file (default results/bench-compress.h5)\n"
            "  -h, --help        this help\n",
            STEP_REPEATS, STEP_WARMUP);
}

/* Lengths run shortest first: the GPU policy scratch, kept and grown for the
 * largest cache so far, then grows once per length. */
static int cmp_int32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int own_opt(void *p, int c, const char *arg)
{
    opts *o = p;
    bool ok = true;
    switch (c) {
    case 'S': o->synthetic = true; break;
    case 'n': o->tokens_s = arg; break;
    case 'L': ok = cli_int("bench", "--layers", arg, 1, 4096, &o->layers); o->custom = true; break;
    case 'H': ok = cli_int("bench", "--kv-heads", arg, 1, 4096, &o->heads); o->custom = true; break;
    case 'D': ok = cli_int("bench", "--head-dim", arg, 1, 65536, &o->dim); o->custom = true; break;
    case 'b': o->budget_s = arg; break;
    case 'P': o->shape = arg; break;
    case 'i': o->intervals_s = arg; break;
    case 'p': o->policies_s = arg; break;
    case 'd':
        if (strcmp(arg, "cpu") && strcmp(arg, "cuda"))
            return cli_usage_error("bench", "--device '%s': expected cpu or cuda", arg);
        o->gpu = !strcmp(arg, "cuda");
        break;
    default: return cli_usage_error("bench", "invalid option");
    }
    return ok ? CLI_OK : CLI_USAGE;
}

static int parse(int argc, char **argv, opts *o)
{
    static const struct option longopts[] = {
        {"synthetic", no_argument, 0, 'S'},
        {"tokens", required_argument, 0, 'n'},
        {"layers", required_argument, 0, 'L'},
        {"kv-heads", required_argument, 0, 'H'},
        {"head-dim", required_argument, 0, 'D'},
        {"budget", required_argument, 0, 'b'},
        {"device", required_argument, 0, 'd'},
        {"shape", required_argument, 0, 'P'},
        {"intervals", required_argument, 0, 'i'},
        {"policies", required_argument, 0, 'p'},
        BENCH_LONGOPT_REPEATS, BENCH_LONGOPT_SEED, BENCH_LONGOPT_OUT, BENCH_LONGOPT_KV_DTYPE,
        BENCH_LONGOPT_ROW_ORDER, BENCH_LONGOPT_HELP,
        {0, 0, 0, 0},
    };
    *o = (opts){.b = {.what = "compress", .out = "results/bench-compress.h5", .seed = 1,
                      .repeats = 5, .max_repeats = 1000},
                .budget_s = "25%", .layers = 30, .heads = 3, .dim = 64};
    const int rc = bench_parse(argc, argv, longopts, &o->b, own_opt, o, help, 1);
    if (rc)
        return rc;
    if (o->synthetic == (optind < argc))
        return cli_usage_error("bench", "give either a dump file or --synthetic");
    o->dump = o->synthetic ? NULL : argv[optind];
    if (o->synthetic && !o->tokens_s)
        return cli_usage_error("bench", "--synthetic needs --tokens N[,N...]");
    if (!o->synthetic && (o->tokens_s || o->shape || o->custom))
        return cli_usage_error("bench", "--tokens, --shape, --layers, --kv-heads and --head-dim "
                               "describe a synthetic cache (--synthetic)");
    if (o->shape && o->custom)
        return cli_usage_error("bench", "--shape sets layers, KV heads and head_dim: give "
                               "either --shape or --layers/--kv-heads/--head-dim");
    o->n_head = o->heads * 3;
    if (o->shape) {
        ckv_config cfg;
        ckv_error err = {0};
        if (ckv_model_preset(o->shape, &cfg, &err))
            return cli_usage_error("bench", "--shape: %s", err.msg);
        o->layers = cfg.n_layer;
        o->heads = cfg.n_head_kv;
        o->n_head = cfg.n_head;
        o->dim = cfg.head_dim;
    }
    if (o->tokens_s &&
        !bench_int_list("--tokens", o->tokens_s, 2, 1 << 24, o->tokens, &o->n_tokens, MAXL))
        return CLI_USAGE;
    qsort(o->tokens, (size_t)o->n_tokens, sizeof o->tokens[0], cmp_int32);
    if (!o->synthetic)
        o->n_tokens = 1;
    if (o->intervals_s && !o->gpu)
        return cli_usage_error("bench", "--intervals: the decode share is measured on the GPU "
                               "only (--device cuda)");
    if (o->b.rows_random && !o->gpu)
        return cli_usage_error("bench", "--row-order random: only the GPU's cache keeps its "
                               "rows through a map (--device cuda)");
    const char *intervals = o->intervals_s ? o->intervals_s : "16,32,64,128,256";
    if (o->gpu &&
        !bench_int_list("--intervals", intervals, 1, 1 << 20, o->interval, &o->n_interval, MAXL))
        return CLI_USAGE;
    if (o->policies_s) {
        if (!bench_policy_list("--policies", o->policies_s, &o->policy_list, o->policy,
                               &o->n_policy, MAXP))
            return CLI_USAGE;
    } else {
        const char *const *names = ckv_policy_names();
        for (; names[o->n_policy] && o->n_policy < MAXP; o->n_policy++)
            o->policy[o->n_policy] = names[o->n_policy];
    }
    ckv_budget b;
    ckv_error err = {0};
    if (ckv_budget_parse(o->budget_s, &b, &err))
        return cli_usage_error("bench", "%s", err.msg);
    return CLI_OK;
}

/* One row of /compress: one policy's compression of one cache. */
typedef struct {
    char *shape, *policy;
    char *measure;        /* "call" or "one round" (centroid) */
    int32_t tokens;       /* T: entries per list before */
    int32_t budget;       /* entries per list the call compresses to */
    char *setting;        /* "iters=10" for K-Means, else "" */
    int32_t rounds;       /* CSM rounds the call ran; 0 for other policies */
    double cpu_ms, wall_ms; /* medians; cpu_ms NaN on the GPU */
    double ms;            /* the compared clock: CPU on the CPU, wall on the GPU */
    double ms_per_round;  /* centroid: ms / rounds; NaN otherwise */
    double vs_csm, vs_csm_round; /* ms over centroid's call and over its one round */
    int32_t repeats;
    char *status;         /* "ok" or "skipped: why"; points at note */
    char note[200];
} compress_row;

#define FD(n, t) {#n, offsetof(compress_row, n), t}
static const ckv_h5_field compress_fields[] = {
    FD(shape, CKV_H5_STR),    FD(tokens, CKV_H5_I32),      FD(policy, CKV_H5_STR),
    FD(measure, CKV_H5_STR),  FD(budget, CKV_H5_I32),      FD(setting, CKV_H5_STR),
    FD(rounds, CKV_H5_I32),   FD(cpu_ms, CKV_H5_F64),      FD(wall_ms, CKV_H5_F64),
    FD(ms, CKV_H5_F64),       FD(ms_per_round, CKV_H5_F64), FD(vs_csm, CKV_H5_F64),
    FD(vs_csm_round, CKV_H5_F64), FD(repeats, CKV_H5_I32), FD(status, CKV_H5_STR),
};
#undef FD

/* One row of /decode_share: one policy's decode-time compression at one interval. */
typedef struct {
    char *shape, *policy;
    int32_t tokens, interval;
    int32_t budget;       /* B: entries after each compression */
    int32_t rounds;       /* CSM rounds of one compression; 0 otherwise */
    double compress_ms;   /* B + interval entries back to B, settle included; 0 without
                           * decode compression */
    double settle_ms;     /* the settle of the masses the steps deferred (bench_steps),
                           * in compress_ms; NaN where no step was timed */
    double step_ms;       /* one decode step, batch 1, over B entries at position T */
    double share;         /* compress / (compress + interval x step) */
    char *status;
    char note[200];
} share_row;

#define FD(n, t) {#n, offsetof(share_row, n), t}
static const ckv_h5_field share_fields[] = {
    FD(shape, CKV_H5_STR),   FD(tokens, CKV_H5_I32),      FD(policy, CKV_H5_STR),
    FD(interval, CKV_H5_I32), FD(budget, CKV_H5_I32),     FD(rounds, CKV_H5_I32),
    FD(compress_ms, CKV_H5_F64), FD(settle_ms, CKV_H5_F64), FD(step_ms, CKV_H5_F64),
    FD(share, CKV_H5_F64),
    FD(status, CKV_H5_STR),
};
#undef FD

/* CPU seconds of this process: on a shared machine a fairer clock than
 * wall time for single-threaded work. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Median wall and CPU seconds of `repeats` compressions of fresh copies;
 * *rounds: CSM rounds of one call. */
static ckv_status time_policy(const ckv_policy *p, const ckv_cache *src, int32_t budget,
                              const ckv_qwindow *qw, int repeats, double *wall, double *cpu,
                              int32_t *rounds, ckv_error *err)
{
    double tw[repeats], tc[repeats];
    for (int r = 0; r < repeats; r++) {
        ckv_cache c;
        ckv_status st = ckv_cache_fork(&c, src, src->capacity, err);
        if (st)
            return st;
        double w0 = ckv_now(), c0 = cpu_now();
        st = ckv_policy_compress(p, &c, budget, qw, NULL, err);
        tc[r] = cpu_now() - c0;
        tw[r] = ckv_now() - w0;
        *rounds = c.round - src->round;
        ckv_cache_free(&c);
        if (st)
            return st;
    }
    *wall = bench_median(tw, repeats);
    *cpu = bench_median(tc, repeats);
    return CKV_OK;
}

/* Merges of CSM round `round` on lists of T entries over budget B
 * (policies.md, centroid steps 1-5): each chunk of L >= 2 middle slots gives
 * ceil(L / 2) candidates (a chunk of one slot has no destination), and the
 * round merges min(ceil(r_round x candidates), T - B); 0 when there are no
 * candidates. */
static int64_t csm_merges(const ckv_policy *p, int64_t T, int64_t B, int64_t round)
{
    const int64_t C = ckv_policy_param(p, "chunk", 32);
    const int64_t M = T - ckv_policy_param(p, "sinks", 4) - ckv_policy_param(p, "recent", 64);
    int64_t cand = 0;
    for (int64_t c0 = 0; c0 < M; c0 += C) {
        const int64_t L = M - c0 < C ? M - c0 : C;
        if (L >= 2)
            cand += (L + 1) / 2;
    }
    const int64_t rate = ckv_csm_rate(round, ckv_policy_param(p, "r_init", 500),
                                      ckv_policy_param(p, "r_step", 100),
                                      ckv_policy_param(p, "r_min", 100),
                                      (ckv_csm_schedule)ckv_policy_param(p, "schedule", 0));
    return ckv_csm_merges(rate, cand, T - B);
}

/* Rounds one CSM call runs from round `round` on lists of T entries to
 * budget B: rounds while T > B and candidates exist. */
static int32_t csm_rounds(const ckv_policy *p, int64_t T, int64_t B, int64_t round)
{
    int32_t j = 0;
    for (int64_t m; T > B && (m = csm_merges(p, T, B, round + j)) > 0; j++)
        T -= m;
    return j;
}

#if CKV_HAVE_CUDA
/* Median wall seconds of `repeats` GPU compressions of fresh uploads (after
 * an untimed one that takes the scratch); *rounds: CSM rounds of one call. */
static ckv_status time_policy_gpu(const ckv_policy *p, const ckv_cache *src, int32_t budget,
                                  const ckv_qwindow *qw, int repeats, double *wall,
                                  int32_t *rounds, ckv_error *err)
{
    ckv_gpu_cache *g;
    ckv_status st = ckv_gpu_cache_create_shape(&g, src->n_layer, src->n_head_kv, src->head_dim,
                                               src->capacity, src->score != NULL, src->dtype, err);
    if (st)
        return st;
    double tw[repeats];
    for (int r = -1; r < repeats && !st; r++) {
        if ((st = ckv_gpu_cache_upload(g, src, err)))
            break;
        double w0 = ckv_now();
        st = ckv_gpu_policy_compress(g, p, budget, qw, NULL, NULL, err);
        if (r >= 0)
            tw[r] = ckv_now() - w0;
        *rounds = ckv_gpu_cache_round(g) - src->round;
    }
    ckv_gpu_cache_free(g);
    if (!st)
        *wall = bench_median(tw, repeats);
    return st;
}

/* Key elements (lists x capacity x head_dim) of the largest cache the GPU
 * policy kernels have seen in this process: their scratch for one-cache
 * calls (the only ones this bench makes) is one per device, grown for the
 * largest cache and kept (kernels/cuda.h), and K-Means takes
 * 3 x 8 bytes per key element of it. */
static double policy_rows_seen;

/* Why K-Means on a GPU cache of `lists` lists of `capacity` entries would not
 * fit in free device memory (an empty string when it fits, or for another
 * policy): the cache, the scratch's 90 bytes per slot, and K-Means' 24
 * bytes per key element of the largest cache seen (which may already be
 * held: an estimate on the safe side). Notes the cache as seen. */
static void kmeans_fit(const ckv_policy *p, double lists, double capacity, int32_t head_dim,
                       char *why, size_t n)
{
    const double slots = lists * capacity, rows = slots * head_dim;
    if (rows > policy_rows_seen)
        policy_rows_seen = rows;
    why[0] = 0;
    ckv_cuda_device d;
    ckv_error err = {0};
    if (strcmp(p->ops->name, "kmeans") || ckv_cuda_device_query(0, &d, &err))
        return;
    const double need = slots * (2.0 * head_dim + 2) * 4 + 90 * slots + 24 * policy_rows_seen;
    if (need + (512 << 20) > (double)d.mem_free)
        snprintf(why, n, "skipped: K-Means needs about %.1f GiB of GPU memory, %.1f GiB free",
                 need / (1 << 30), (double)d.mem_free / (1 << 30));
}
#endif

/* The policies of the run, each with its interval-independent settings. */
static ckv_status init_policies(const opts *o, ckv_policy *pol, ckv_error *err)
{
    for (int i = 0; i < o->n_policy; i++) {
        ckv_status st = ckv_policy_init(&pol[i], o->policy[i], err);
        if (!st && ckv_policy_param(&pol[i], "iters", -1) >= 0)
            st = ckv_policy_set_kv(&pol[i], "iters", KMEANS_ITERS, err);
        if (st)
            return st;
    }
    return CKV_OK;
}

/* The preset whose cache shape is c's with n_head query heads, or NULL. */
static const char *matching_shape(const ckv_cache *c, int32_t n_head)
{
    for (const char *const *s = ckv_model_preset_names(); *s; s++) {
        ckv_config cfg;
        ckv_error err = {0};
        if (!ckv_model_preset(*s, &cfg, &err) && cfg.n_layer == c->n_layer &&
            cfg.n_head_kv == c->n_head_kv && cfg.head_dim == c->head_dim && cfg.n_head == n_head)
            return *s;
    }
    return NULL;
}

/* Times every policy on one cache: rows appended at rows[*n]. Returns
 * CKV_OK, or the error of a call that failed. */
static ckv_status time_cache(const opts *o, const ckv_policy *pol, const ckv_kvdump *d,
                             const char *shape, compress_row *rows, size_t *n, ckv_error *err)
{
    ckv_budget budget;
    ckv_budget_parse(o->budget_s, &budget, err);
    const ckv_qwindow qw = {d->q_window, d->n_head, d->w};
    const size_t first = *n;
    for (int i = 0; i < o->n_policy; i++) {
        const ckv_policy *p = &pol[i];
        const bool csm = !strcmp(p->ops->name, "centroid");
        for (int one = 0; one <= csm; one++) {
            compress_row *r = &rows[(*n)++];
            *r = (compress_row){.shape = (char *)(shape ? shape : "custom"),
                                .policy = (char *)o->policy[i],
                                .measure = one ? "one round" : "call",
                                .tokens = d->cache.capacity,
                                .setting = strcmp(p->ops->name, "kmeans") ? ""
                                                                         : "iters=" KMEANS_ITERS,
                                .repeats = (int32_t)o->b.repeats};
            r->cpu_ms = r->wall_ms = r->ms = r->ms_per_round = r->vs_csm = r->vs_csm_round = NAN;
            r->status = r->note;
            snprintf(r->note, sizeof r->note, "ok");
            int64_t B;
            bool skip;
            char reason[160];
            if (ckv_budget_check(p, &budget, d->prompt_tokens, &B, &skip, reason, sizeof reason,
                                 err))
                return err->status;
            if (skip) {
                snprintf(r->note, sizeof r->note, "skipped: %.150s", reason);
                continue;
            }
            /* The one-round call: budget T - (merges of the cache's next round). */
            r->budget = one ? (int32_t)(r->tokens - csm_merges(p, r->tokens, B, d->cache.round))
                            : (int32_t)B;
            if ((!qw.q && (ckv_policy_needs(p) & CKV_NEEDS_Q_WINDOW)) ||
                (!d->cache.score && (ckv_policy_needs(p) & CKV_NEEDS_SCORE))) {
                snprintf(r->note, sizeof r->note, "skipped: the dump lacks its statistics");
                continue;
            }
            ckv_status st = CKV_OK;
            double wall = NAN, cpu = NAN;
#if CKV_HAVE_CUDA
            if (o->gpu) {
                if (!ckv_gpu_policy_supported(p)) {
                    snprintf(r->note, sizeof r->note, "skipped: no GPU kernels for %s",
                             p->ops->name);
                    continue;
                }
                kmeans_fit(p, (double)d->cache.n_layer * d->cache.n_head_kv, d->cache.capacity,
                           d->cache.head_dim, r->note, sizeof r->note);
                if (r->note[0]) {
                    fprintf(stderr, "ckv bench: %s at %d tokens %s\n", r->policy, r->tokens,
                            r->note);
                    continue;
                }
                snprintf(r->note, sizeof r->note, "ok");
                st = time_policy_gpu(p, &d->cache, r->budget, &qw, (int)o->b.repeats, &wall,
                                     &r->rounds, err);
                if (st == CKV_ERR_UNSUPPORTED) {
                    snprintf(r->note, sizeof r->note, "skipped: %.180s", err->msg);
                    continue;
                }
            } else
#endif
                st = time_policy(p, &d->cache, r->budget, &qw, (int)o->b.repeats, &wall, &cpu,
                                 &r->rounds, err);
            if (st)
                return st;
            if (!csm)
                r->rounds = 0;
            r->wall_ms = wall * 1e3;
            r->cpu_ms = cpu * 1e3;
            r->ms = o->gpu ? r->wall_ms : r->cpu_ms;
            /* Synthetic lists are all T long: their round count is policies.md's. */
            if (csm && o->synthetic &&
                r->rounds != csm_rounds(p, r->tokens, r->budget, d->cache.round))
                fprintf(stderr, "ckv bench: warning: centroid ran %d rounds to %d entries; "
                        "policies.md gives %d\n", r->rounds, r->budget,
                        csm_rounds(p, r->tokens, r->budget, d->cache.round));
            if (csm && r->rounds > 0)
                r->ms_per_round = r->ms / r->rounds;
            fprintf(stderr, "ckv bench: %s (%s) at %d tokens: %.3f ms\n", r->policy, r->measure,
                    r->tokens, r->ms);
        }
    }
    double call = NAN, round = NAN;
    for (size_t i = first; i < *n; i++)
        if (!strcmp(rows[i].policy, "centroid") && !strcmp(rows[i].status, "ok"))
            *(strcmp(rows[i].measure, "call") ? &round : &call) = rows[i].ms;
    for (size_t i = first; i < *n; i++) {
        rows[i].vs_csm = rows[i].ms / call;
        rows[i].vs_csm_round = rows[i].ms / round;
    }
    return CKV_OK;
}

#if CKV_HAVE_CUDA
/* Decode-share rows of one cache length: one decode step per cache layout
 * (with or without scores; degree 1 or CentroidKV's degrees, as the policy
 * leaves them: bench_max_degree), then each policy's decode-time compression at
 * every interval. CSM starts where its compression of the T tokens (from
 * the cache's round round0) to the budget ends: a decode compression
 * continues the count. */
static ckv_status time_shares(const opts *o, ckv_policy *pol, const ckv_config *cfg,
                              const char *shape, ckv_gpu *g, float *logits, int32_t T,
                              int32_t round0, share_row *rows, size_t *n, ckv_error *err)
{
    ckv_budget budget;
    ckv_budget_parse(o->budget_s, &budget, err);
    /* [scores][merges]: the step of caches without, with scores, whose
     * degrees are 1 (an evicting policy's) or spread (a merging one's). */
    double step[2][2] = {{NAN, NAN}, {NAN, NAN}}, settle[2][2] = {{NAN, NAN}, {NAN, NAN}};
    for (int i = 0; i < o->n_policy; i++) {
        ckv_policy *p = &pol[i];
        int64_t B;
        bool skip;
        char reason[160];
        const bool score = (ckv_policy_needs(p) & CKV_NEEDS_SCORE) != 0,
                   merges = ckv_policy_merges(p);
        for (int k = 0; k < o->n_interval; k++) {
            share_row *r = &rows[(*n)++];
            *r = (share_row){.shape = (char *)shape, .policy = (char *)o->policy[i],
                             .tokens = T, .interval = o->interval[k]};
            r->compress_ms = r->settle_ms = r->step_ms = r->share = NAN;
            r->status = r->note;
            snprintf(r->note, sizeof r->note, "ok");
            if (ckv_budget_check(p, &budget, T, &B, &skip, reason, sizeof reason, err))
                return err->status;
            if (skip) {
                snprintf(r->note, sizeof r->note, "skipped: %.150s", reason);
                continue;
            }
            r->budget = (int32_t)B;
            if (!ckv_gpu_policy_supported(p)) {
                snprintf(r->note, sizeof r->note, "skipped: no GPU kernels for %s", p->ops->name);
                continue;
            }
            char iv[24];
            snprintf(iv, sizeof iv, "%d", r->interval);
            if (ckv_policy_param(p, "interval", -1) >= 0 &&
                ckv_policy_set_kv(p, "interval", iv, err))
                return err->status;
            if (!ckv_policy_interval(p)) {
                r->compress_ms = r->share = 0;
                snprintf(r->note, sizeof r->note, "ok: no decode-time compression");
                continue;
            }
            const double frac = (double)B / T;
            if (isnan(step[score][merges])) {
                bench_steps t;
                ckv_status st = bench_time_steps(g, cfg, o->b.kv_dtype, 1, (int32_t)B, T,
                                                 bench_max_degree(p, frac), score, STEP_WARMUP,
                                                 STEP_REPEATS,
                                                 (uint64_t)o->b.seed + 101 * (uint64_t)T, logits,
                                                 &t, err);
                if (st)
                    return st;
                step[score][merges] = t.median_ms;
                settle[score][merges] = t.settle_ms;
                fprintf(stderr, "ckv bench: decode step at %d tokens, %lld entries%s%s: %.3f ms\n",
                        T, (long long)B, score ? " (scores)" : "",
                        merges ? "" : " (degrees 1)", t.median_ms);
            }
            r->step_ms = step[score][merges];
            r->settle_ms = settle[score][merges];
            kmeans_fit(p, (double)cfg->n_layer * cfg->n_head_kv, (double)B + r->interval,
                       cfg->head_dim, r->note, sizeof r->note);
            if (r->note[0]) {
                fprintf(stderr, "ckv bench: %s at %d tokens, interval %d %s\n", r->policy, T,
                        r->interval, r->note);
                continue;
            }
            snprintf(r->note, sizeof r->note, "ok");
            const bool csm = !strcmp(p->ops->name, "centroid");
            const int32_t round = csm ? round0 + csm_rounds(p, T, B, round0) : 0;
            ckv_status st = bench_time_compress(cfg, o->b.kv_dtype, p, r->budget, r->interval, T, frac,
                                                round, 1, 1, (int32_t)o->b.repeats,
                                                (uint64_t)o->b.seed + 1000 * (uint64_t)(*n),
                                                o->b.rows_random, &r->compress_ms, &r->rounds,
                                                NULL, err);
            if (st == CKV_ERR_UNSUPPORTED) {
                snprintf(r->note, sizeof r->note, "skipped: %.180s", err->msg);
                continue;
            }
            if (st)
                return st;
            if (!csm)
                r->rounds = 0;
            r->compress_ms += r->settle_ms;
            r->share = r->compress_ms / (r->compress_ms + r->interval * r->step_ms);
            fprintf(stderr, "ckv bench: %s at %d tokens, interval %d: %.3f ms (share %.2f%%)\n",
                    r->policy, T, r->interval, r->compress_ms, 100 * r->share);
        }
    }
    return CKV_OK;
}

/* The decode-share rows of one cache, with a decoder of the shape made for
 * them and freed after, so that the compressions timed next have its
 * memory. */
static ckv_status shares(const opts *o, ckv_policy *pol, const char *shape, const ckv_kvdump *d,
                         share_row *rows, size_t *n, ckv_error *err)
{
    ckv_config cfg;
    ckv_gpu *g = NULL;
    float *logits = NULL;
    ckv_status st = ckv_model_preset(shape, &cfg, err);
    if (!st && !(logits = malloc((size_t)cfg.n_vocab * sizeof *logits)))
        st = ckv_errorf(err, CKV_ERR_NOMEM, "bench: out of memory");
    if (!st && !(st = ckv_gpu_create_synthetic(&g, &cfg, 0, 1, (uint64_t)o->b.seed, err)))
        st = time_shares(o, pol, &cfg, shape, g, logits, d->cache.capacity, d->cache.round, rows,
                         n, err);
    ckv_gpu_free(g);
    free(logits);
    return st;
}
#endif

static void print_compress(const compress_row *rows, size_t n, bool gpu)
{
    printf("\n%-7s %-10s %-9s %7s %-9s %6s %11s %11s %10s %8s %9s\n", "tokens", "policy",
           "measure", "budget", "setting", "rounds", gpu ? "GPU ms" : "CPU ms", "wall ms",
           "ms/round", "vs CSM", "vs round");
    for (size_t i = 0; i < n; i++) {
        const compress_row *r = &rows[i];
        printf("%-7d %-10s %-9s", r->tokens, r->policy, r->measure);
        if (strcmp(r->status, "ok")) {
            printf(" %s\n", r->status);
            continue;
        }
        printf(" %7d %-9s %6d %11.3f %11.3f", r->budget, r->setting, r->rounds, r->ms,
               r->wall_ms);
        if (isnan(r->ms_per_round))
            printf(" %10s", "-");
        else
            printf(" %10.3f", r->ms_per_round);
        printf(" %8.2f %9.2f\n", r->vs_csm, r->vs_csm_round);
    }
}

static void print_shares(const share_row *rows, size_t n)
{
    printf("\ndecode share = compression / (compression + interval x step)\n"
           "%-7s %-10s %8s %7s %6s %11s %9s %8s\n",
           "tokens", "policy", "interval", "budget", "rounds", "compr ms", "step ms", "share");
    for (size_t i = 0; i < n; i++) {
        const share_row *r = &rows[i];
        printf("%-7d %-10s %8d", r->tokens, r->policy, r->interval);
        if (strncmp(r->status, "ok", 2)) {
            printf(" %s\n", r->status);
            continue;
        }
        printf(" %7d %6d %11.3f %9.3f %7.2f%%%s\n", r->budget, r->rounds, r->compress_ms,
               r->step_ms, 100 * r->share, r->status + 2);
    }
}

/* The targets, recorded: a CSM round >= 20x faster than 10-iteration
 * K-Means at 32K (the one-round row, the largest round, and the mean round
 * of a call), and compression < 5% of decode time at interval 64. */
static void print_targets(const compress_row *rows, size_t n, const share_row *sh, size_t ns,
                          bool gpu)
{
    printf("\ntargets:\n");
    bool seen = false;
    for (size_t i = 0; i < n; i++) {
        const compress_row *k = &rows[i];
        if (k->tokens != 32768 || strcmp(k->policy, "kmeans"))
            continue;
        seen = true;
        const compress_row *one = NULL, *call = NULL;
        for (size_t j = 0; j < n; j++)
            if (rows[j].tokens == k->tokens && !strcmp(rows[j].shape, k->shape) &&
                !strcmp(rows[j].policy, "centroid") && !strcmp(rows[j].status, "ok"))
                *(strcmp(rows[j].measure, "call") ? &one : &call) = &rows[j];
        if (strcmp(k->status, "ok") || !one || !call) {
            printf("  CSM round vs K-Means (iters=%s), %s at 32768 tokens: not measured (%s)\n",
                   KMEANS_ITERS, k->shape,
                   strcmp(k->status, "ok") ? k->status : "no centroid rows");
            continue;
        }
        printf("  CSM round vs K-Means (iters=%s), %s at 32768 tokens (target >= 20x):\n"
               "    first round %.3f ms: K-Means %.3f ms is %.1fx: %s\n"
               "    mean round of a call (%.3f ms / %d rounds = %.3f ms): %.1fx: %s\n",
               KMEANS_ITERS, k->shape, one->ms, k->ms, k->ms / one->ms,
               k->ms / one->ms >= 20 ? "met" : "missed", call->ms, call->rounds,
               call->ms_per_round, k->ms / call->ms_per_round,
               k->ms / call->ms_per_round >= 20 ? "met" : "missed");
    }
    if (!seen)
        printf("  CSM round vs K-Means at 32768 tokens: not measured (no 32768 in --tokens, or "
               "kmeans not among --policies)\n");
    if (!gpu) {
        printf("  compression < 5%% of decode time at interval 64: n/a (cpu)\n");
        return;
    }
    seen = false;
    for (size_t i = 0; i < ns; i++) {
        const share_row *r = &sh[i];
        if (r->interval != 64)
            continue;
        seen = true;
        if (strncmp(r->status, "ok", 2))
            printf("  %-10s %7d tokens, interval 64: not measured (%s)\n", r->policy, r->tokens,
                   r->status);
        else if (r->status[2])
            printf("  %-10s %7d tokens, interval 64: no decode-time compression\n", r->policy,
                   r->tokens);
        else
            printf("  %-10s %7d tokens, interval 64: compression %.2f%% of decode time (target "
                   "< 5%%): %s\n",
                   r->policy, r->tokens, 100 * r->share, r->share < 0.05 ? "met" : "missed");
    }
    if (!seen)
        printf("  compression < 5%% of decode time at interval 64: not measured (no 64 in "
               "--intervals)\n");
}

/* The cache of --tokens value t, or the dump. */
static ckv_status load_cache(const opts *o, int t, ckv_kvdump *d, ckv_error *err)
{
    *d = (ckv_kvdump){0};
    ckv_status st;
    if (!o->synthetic) {
        st = ckv_kvfile_read(o->dump, d, err);
    } else {
        const int32_t T = o->tokens[t], w = T < 32 ? T : 32;
        st = ckv_synthetic_kv(&d->cache, &d->q_window, (int32_t)o->layers, (int32_t)o->heads,
                              (int32_t)o->n_head, (int32_t)o->dim, T, w, (uint64_t)o->b.seed, err);
        d->n_head = (int32_t)o->n_head;
        d->w = w;
        d->prompt_tokens = T;
    }
    if (!st)
        ckv_cache_set_dtype(&d->cache, o->b.kv_dtype);
    return st;
}

static int run(int argc, char **argv, const opts *o)
{
    ckv_error err = {0};
    ckv_policy pol[MAXP];
    const size_t per_cache = (size_t)o->n_policy + 1;
    compress_row *rows = calloc((size_t)o->n_tokens * per_cache, sizeof *rows);
    share_row *sh = calloc((size_t)o->n_tokens * o->n_policy * (o->n_interval + 1), sizeof *sh);
    char *cmdline = bench_command_line(argc, argv);
    size_t n = 0, ns = 0;
    int rc = CLI_OK;
    ckv_h5_stream hs = {.file = -1};
    char date[32], device[256] = "cpu";
    /* The form of K-Means's estimate (head_dim 64 and 128; other head_dims
     * assign exactly): its times depend on it (docs/gpu.md, "kmeans"). */
    const char *km_form = "cpu";
    /* K-Means's lazy features' mode (ckv_cuda_set_km_lazy): which calls
     * form their features only where read. */
    const char *km_lazy = "cpu";
    const char *shape = NULL;
    bench_utc_now(date);
    if (!rows || !sh || !cmdline) {
        fprintf(stderr, "ckv bench: out of memory\n");
        rc = CLI_FAIL;
        goto done;
    }
    if (init_policies(o, pol, &err)) {
        rc = cli_fail("bench", &err);
        goto done;
    }
    if (o->gpu) {
#if CKV_HAVE_CUDA
        ckv_cuda_device dev;
        if (!bench_gpu(&dev)) {
            rc = CLI_FAIL;
            goto done;
        }
        snprintf(device, sizeof device, "%s", dev.name);
        km_form = ckv_cuda_wgmma() ? "wgmma" : "mma.sync";
        const ckv_km_lazy lazy = ckv_cuda_km_lazy();
        km_lazy = lazy == CKV_KM_LAZY_OFF ? "off" : lazy == CKV_KM_LAZY_ON ? "on" : "auto";
#else
        fprintf(stderr, "ckv bench: built without CUDA (configure with -Dcuda=enabled)\n");
        rc = CLI_FAIL;
        goto done;
#endif
    }
    printf("device: %s; %s; budget %s; K-Means iters=%s, estimate %s, lazy features %s; "
           "median of %lld\n",
           device, date, o->budget_s, KMEANS_ITERS, km_form, km_lazy, o->b.repeats);
    char repeats[24];
    snprintf(repeats, sizeof repeats, "%lld", o->b.repeats);
    const char *attrs[] = {"format", "ckv-bench-compress", "version", "2", "date", date,
                           "device", device, "command", cmdline, "git_rev", CKV_GIT_REV,
                           "budget", o->budget_s, "repeats", repeats, "kmeans_iters",
                           KMEANS_ITERS, "kmeans_estimate", km_form, "kmeans_lazy", km_lazy,
                           "kv_dtype", ckv_kv_dtype_name(o->b.kv_dtype), "row_order",
                           o->b.rows_random ? "random" : "slot"};
    const ckv_h5_table tables[] = {
        {"/compress", compress_fields, sizeof compress_fields / sizeof compress_fields[0],
         sizeof(compress_row), NULL, 0},
        {"/decode_share", share_fields, sizeof share_fields / sizeof share_fields[0],
         sizeof(share_row), NULL, 0},
    };
    /* The file (PATH.part until the run completes) is made before any
     * timing, so that an --out it cannot be written to fails at once, and
     * gets each cache's rows as they are final: a run stopped at a later
     * length keeps the earlier ones there; one that fails on its first cache
     * (a bad dump, a refused call) leaves none. An older file at PATH is
     * replaced only by a complete run. */
    rc = bench_open(&hs, o->b.out, attrs, sizeof attrs / sizeof attrs[0] / 2, tables,
                    o->gpu ? 2 : 1);
    for (int t = 0; t < o->n_tokens && !rc; t++) {
        ckv_kvdump d;
        const size_t n0 = n, ns0 = ns;
        ckv_status st = load_cache(o, t, &d, &err);
        if (!st) {
            shape = o->shape ? o->shape : matching_shape(&d.cache, d.n_head);
            printf("cache: %d layers x %d KV heads (%d query heads) x %d tokens x head_dim %d "
                   "(%s, shape %s)\n",
                   d.cache.n_layer, d.cache.n_head_kv, d.n_head, d.cache.capacity,
                   d.cache.head_dim, o->synthetic ? "synthetic" : o->dump,
                   shape ? shape : "of no known model");
            fflush(stdout);
        }
#if CKV_HAVE_CUDA
        if (!st && o->gpu && shape)
            st = shares(o, pol, shape, &d, sh, &ns, &err);
#endif
        if (!st)
            st = time_cache(o, pol, &d, shape, rows, &n, &err);
        ckv_kvdump_free(&d);
        if (st)
            rc = cli_fail("bench", &err);
        if (!rc)
            rc = bench_append(&hs, 0, rows + n0, n - n0);
        if (!rc && o->gpu)
            rc = bench_append(&hs, 1, sh + ns0, ns - ns0);
    }
    if (rc)
        goto done;
    print_compress(rows, n, o->gpu);
    if (!o->gpu)
        printf("\ndecode share: n/a (cpu): measured with --device cuda only\n");
    else if (!shape)
        printf("\ndecode share: n/a: no known model shape has this cache's layers, KV heads, "
               "query heads and head_dim (see --shape)\n");
    else
        print_shares(sh, ns);
    print_targets(rows, n, sh, ns, o->gpu);
done:
    rc = bench_close(&hs, rc);
    free(rows);
    free(sh);
    free(cmdline);
    return rc;
}

int bench_compress(int argc, char **argv)
{
    opts o;
    int rc = parse(argc, argv, &o);
    if (!rc)
        rc = run(argc, argv, &o);
    free(o.policy_list);
    return rc < 0 ? CLI_OK : rc;
}
