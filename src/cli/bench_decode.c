/* `ckv bench decode`: per-token decode time of a model shape on the GPU with
 * random weights and a random cache (no model file), against the floor of
 * reading every weight and cache byte once, for the full cache and for
 * compressed caches of a budget's size. docs/performance.md describes it. */
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
#if CKV_HAVE_CUDA
#include "cuda.h"
#endif

enum { MAXL = 16 };

typedef struct {
    bench_opts b;
    const char *shape;
    bool synthetic;
    int32_t ctx[MAXL], batch[MAXL];
    int n_ctx, n_batch, n_budget;
    double budget[MAXL];
    int pdl;        /* --pdl: 1 on, 0 off, -1 as CKV_PDL says */
    ckv_config cfg; /* the --shape preset */
    const char *ctx_s, *budgets_s, *batches_s; /* the lists as given */
} opts;

static void help(FILE *fp)
{
    fprintf(fp,
            "usage: ckv bench decode --shape NAME --synthetic [--device cuda] [options]\n\n"
            "Times one decode step (ckv_gpu_decode_batch: one token for each of B sequences)\n"
            "of a model shape with random bf16 weights made on the GPU, over caches filled\n"
            "with random entries on the GPU, at each context length: full caches (T entries,\n"
            "degree 1) and, per budget b, compressed ones (b * T entries, degrees averaging\n"
            "1 / b, as CentroidKV leaves them). Per point: the median wall time of a step\n"
            "(host call to each sequence's greedy next token on the host, picked on the GPU;\n"
            "each sequence gets one token per step) of R steps after W warm-up steps (the\n"
            "first returns the logits, which must be finite); the floor, every bf16 matrix\n"
            "once and every cache byte (keys and values of --kv-dtype, fp32 degrees) of the\n"
            "B caches read once at the copy rate (--copy-rate: by default measured on the\n"
            "GPU); the time over the floor; and for budgets the speedup over the full caches\n"
            "against the ideal (the ratio of the bytes). Table on stdout, HDF5 file with a\n"
            "/decode table and the date, device, command, copy rate and PDL setting as\n"
            "attributes.\n\n"
            "Options:\n"
            "  --shape NAME      llama3.1-8b, mistral-7b or smollm2-135m (required)\n"
            "  --synthetic       random weights (required: no model file is read)\n"
            "  --device cuda     the GPU (the only device)\n"
            "  --contexts LIST   context lengths (default 1024,4096,8192,32768,131072);\n"
            "                    points whose caches do not fit in free GPU memory are skipped\n"
            "  --batches LIST    sequences per step (default 1,8)\n"
            "  --budgets LIST    fractions in (0, 1) for compressed caches, or 'none'\n"
            "                    (default 0.25,0.5,0.75)\n"
            "  --warmup W        untimed steps per point (default 3: the first returns the\n"
            "                    logits, the second runs launch by launch, the third captures\n"
            "                    the CUDA graph the timed steps replay; fewer times those)\n"
            "  --repeats R       timed steps per point (default 20)\n"
            "  --seed S          weights, cache and token seed (default 1)\n"
            BENCH_KV_DTYPE_HELP
            "  --pdl on|off      programmatic dependent launch of the step's kernels\n"
            "                    (default on, off when CKV_PDL=0; docs/gpu.md); the table's\n"
            "                    first line and the file's attributes say which ran\n"
            BENCH_COPY_HELP
            "  --out PATH        HDF5 file (default results/bench-decode.h5)\n"
            "  -h, --help        this help\n",
            BENCH_COPY_MIB, BENCH_COPY_REPEATS, BENCH_COPY_WARMUP);
}

static int own_opt(void *p, int c, const char *arg)
{
    opts *o = p;
    switch (c) {
    case 'S': o->shape = arg; break;
    case 'y': o->synthetic = true; break;
    case 'c': o->ctx_s = arg; break;
    case 'B': o->batches_s = arg; break;
    case 'b': o->budgets_s = arg; break;
    case 'P':
        if (strcmp(arg, "on") && strcmp(arg, "off"))
            return cli_usage_error("bench", "--pdl takes on or off, not '%s'", arg);
        o->pdl = !strcmp(arg, "on");
        break;
    default: return cli_usage_error("bench", "invalid option");
    }
    return CLI_OK;
}

static int parse(int argc, char **argv, opts *o)
{
    static const struct option longopts[] = {
        {"shape", required_argument, 0, 'S'},
        {"synthetic", no_argument, 0, 'y'},
        {"contexts", required_argument, 0, 'c'},
        {"budgets", required_argument, 0, 'b'},
        {"batches", required_argument, 0, 'B'},
        {"pdl", required_argument, 0, 'P'},
        BENCH_LONGOPT_DEVICE, BENCH_LONGOPT_WARMUP, BENCH_LONGOPT_REPEATS, BENCH_LONGOPT_SEED,
        BENCH_LONGOPT_OUT, BENCH_LONGOPT_KV_DTYPE, BENCH_LONGOPT_COPY_RATE, BENCH_LONGOPT_HELP,
        {0, 0, 0, 0},
    };
    *o = (opts){.b = {.what = "decode", .out = "results/bench-decode.h5", .warmup = 3,
                      .repeats = 20, .seed = 1, .max_repeats = 100000},
                .pdl = -1, .ctx_s = "1024,4096,8192,32768,131072", .budgets_s = "0.25,0.5,0.75",
                .batches_s = "1,8"};
    bench_copy_default(&o->b.copy);
    int rc = bench_parse(argc, argv, longopts, &o->b, own_opt, o, help, 0);
    if (rc || (rc = bench_shape("decode", o->shape, &o->cfg)))
        return rc;
    if (!o->synthetic)
        return cli_usage_error("bench", "decode needs --synthetic (random weights; no model "
                               "file is read)");
    if (!bench_int_list("--contexts", o->ctx_s, 1, 1 << 24, o->ctx, &o->n_ctx, MAXL) ||
        !bench_int_list("--batches", o->batches_s, 1, 1024, o->batch, &o->n_batch, MAXL))
        return CLI_USAGE;
    if (strcmp(o->budgets_s, "none") &&
        !bench_double_list("--budgets", o->budgets_s, 1e-6, 0.999999, o->budget, &o->n_budget,
                           MAXL))
        return CLI_USAGE;
    return CLI_OK;
}

#if CKV_HAVE_CUDA

/* One row of /decode: one step of `batch` sequences. */
typedef struct {
    char *shape;
    char *kv_dtype;       /* f32 or bf16 */
    int32_t batch;
    int32_t context;      /* tokens seen (positions) per sequence */
    double budget;        /* 1 for the full cache */
    int32_t entries;      /* per (layer, KV head) list */
    double mean_degree;
    double median_ms, min_ms, max_ms; /* per step */
    int32_t runs;
    double tokens_per_s;  /* batch / median step */
    double weight_bytes, kv_bytes, floor_ms, over_floor;
    double speedup, ideal_speedup, pct_ideal; /* against the full caches; NaN for them */
    char *status;         /* "ok" or "skipped: why"; points at note */
    char note[128];
} decode_row;

#define FD(n, t) {#n, offsetof(decode_row, n), t}
static const ckv_h5_field decode_fields[] = {
    FD(shape, CKV_H5_STR), FD(kv_dtype, CKV_H5_STR), FD(batch, CKV_H5_I32), FD(context, CKV_H5_I32),
    FD(budget, CKV_H5_F64), FD(entries, CKV_H5_I32), FD(mean_degree, CKV_H5_F64),
    FD(median_ms, CKV_H5_F64), FD(min_ms, CKV_H5_F64), FD(max_ms, CKV_H5_F64),
    FD(runs, CKV_H5_I32), FD(tokens_per_s, CKV_H5_F64), FD(weight_bytes, CKV_H5_F64),
    FD(kv_bytes, CKV_H5_F64), FD(floor_ms, CKV_H5_F64), FD(over_floor, CKV_H5_F64),
    FD(speedup, CKV_H5_F64), FD(ideal_speedup, CKV_H5_F64), FD(pct_ideal, CKV_H5_F64),
    FD(status, CKV_H5_STR),
};
#undef FD

static void print_rows(const decode_row *rows, size_t n)
{
    printf("\n%-13s %5s %7s %6s %7s %6s %9s %9s %9s %9s %9s %9s %7s %8s %6s %6s\n", "shape",
           "batch", "context", "cache", "entries", "deg", "step ms", "min ms", "max ms", "tok/s",
           "KV GB", "floor ms", "/floor", "speedup", "ideal", "%ideal");
    for (size_t i = 0; i < n; i++) {
        const decode_row *r = &rows[i];
        char cache[16];
        if (r->budget < 1)
            snprintf(cache, sizeof cache, "%.0f%%", 100 * r->budget);
        else
            snprintf(cache, sizeof cache, "full");
        printf("%-13s %5d %7d %6s %7d %6.2f", r->shape, r->batch, r->context, cache, r->entries,
               r->mean_degree);
        if (strcmp(r->status, "ok")) {
            printf(" %s\n", r->status);
            continue;
        }
        printf(" %9.3f %9.3f %9.3f %9.0f %9.2f %9.3f %7.2f", r->median_ms, r->min_ms, r->max_ms,
               r->tokens_per_s, r->kv_bytes / 1e9, r->floor_ms, r->over_floor);
        if (r->budget < 1)
            printf(" %8.2f %6.2f %6.1f", r->speedup, r->ideal_speedup, r->pct_ideal);
        printf("\n");
    }
}

/* The decode targets over the points timed here: full caches within
 * 1.15x of the floor, compressed ones at >= 90% of the ideal speedup, and
 * SmolLM2-135M at <= 1.0 ms per token (batch 1, 1K context). */
static void print_targets(const decode_row *rows, size_t n, const bench_copy *copy)
{
    int near = 0, near_ref = 0, full = 0, good = 0, comp = 0;
    for (size_t i = 0; i < n; i++) {
        const decode_row *r = &rows[i];
        if (strcmp(r->status, "ok"))
            continue;
        if (r->budget < 1) {
            comp += !isnan(r->pct_ideal);
            good += r->pct_ideal >= 90;
        } else {
            full++;
            near += r->over_floor <= 1.15;
            near_ref += r->over_floor / bench_to_reference(copy) <= 1.15;
        }
    }
    printf("\ntargets:\n");
    printf("  full caches within 1.15x of the floor (at %.3f TB/s, %s): %d of %d points\n",
           copy->bps / 1e12, copy->measure ? "measured" : "given", near, full);
    printf("  the same at %.2f TB/s (the H200's, issue 7's reference): %d of %d points\n",
           BENCH_REFERENCE_BPS / 1e12, near_ref, full);
    printf("  compressed caches at >= 90%% of the ideal speedup: %d of %d points\n", good, comp);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(rows[i].shape, "smollm2-135m") && rows[i].batch == 1 &&
            rows[i].context == 1024 && rows[i].budget >= 1 && !strcmp(rows[i].status, "ok"))
            printf("  smollm2-135m at 1K, batch 1: %.3f ms per token (target <= 1.0): %s\n",
                   rows[i].median_ms, rows[i].median_ms <= 1.0 ? "met" : "missed");
}

/* Fills a row's shape and counts; the status says whether it fits. */
static void init_row(decode_row *r, const opts *o, const ckv_config *cfg, int32_t batch,
                     int32_t context, double budget, double weight_bytes)
{
    r->shape = (char *)o->shape;
    r->kv_dtype = (char *)ckv_kv_dtype_name(o->b.kv_dtype);
    r->batch = batch;
    r->context = context;
    r->budget = budget;
    r->entries = budget < 1 ? (int32_t)ceil(budget * context) : context;
    r->mean_degree = (double)context / r->entries;
    r->median_ms = r->min_ms = r->max_ms = r->tokens_per_s = r->over_floor = NAN;
    r->speedup = r->ideal_speedup = r->pct_ideal = NAN;
    r->weight_bytes = weight_bytes;
    r->kv_bytes = batch * bench_cache_bytes(cfg, o->b.kv_dtype, r->entries);
    r->floor_ms = (weight_bytes + r->kv_bytes) / o->b.copy.bps * 1e3;
    r->status = r->note;
    snprintf(r->note, sizeof r->note, "ok");
    ckv_cuda_device d;
    ckv_error err = {0};
    const double steps = (double)(o->b.warmup + o->b.repeats + BENCH_SETTLE_RUNS);
    const double need = batch * bench_cache_bytes(cfg, o->b.kv_dtype, r->entries + steps);
    if (!ckv_cuda_device_query(0, &d, &err) && need + (512 << 20) > (double)d.mem_free)
        snprintf(r->note, sizeof r->note, "skipped: caches %.1f GiB, %.1f GiB free",
                 need / (1 << 30), (double)d.mem_free / (1 << 30));
}

static int run(int argc, char **argv, opts *o)
{
    ckv_error err = {0};
    const ckv_config cfg = o->cfg;
    ckv_cuda_device dev;
    if (!bench_gpu(&dev) || bench_copy_resolve(&o->b.copy))
        return CLI_FAIL;
    int32_t max_batch = 1;
    for (int i = 0; i < o->n_batch; i++)
        if (o->batch[i] > max_batch)
            max_batch = o->batch[i];
    const size_t per_batch = (size_t)o->n_ctx * (1 + o->n_budget), n = per_batch * o->n_batch;
    decode_row *rows = calloc(n, sizeof *rows);
    float *logits = malloc((size_t)max_batch * cfg.n_vocab * sizeof *logits);
    char *cmdline = bench_command_line(argc, argv);
    ckv_gpu *g = NULL;
    int rc = CLI_OK;
    char date[32];
    bench_utc_now(date);
    if (!rows || !logits || !cmdline) {
        fprintf(stderr, "ckv bench: out of memory\n");
        rc = CLI_FAIL;
        goto done;
    }
    const double weight_bytes = bench_matrix_bytes(&cfg);
    if (o->pdl >= 0)
        ckv_cuda_set_pdl(o->pdl);
    const char *pdl = ckv_cuda_pdl() ? "on" : "off";
    printf("device: %s (%.1f GiB); %s; shape %s: %.2f GB of bf16 matrices; %s KV cache; "
           "PDL %s\ncopy rate: %.3f TB/s (%s): the floors divide by it\n",
           dev.name, (double)dev.mem_total / (1 << 30), date, o->shape, weight_bytes / 1e9,
           ckv_kv_dtype_name(o->b.kv_dtype), pdl, o->b.copy.bps / 1e12, o->b.copy.source);
    if (ckv_gpu_create_synthetic(&g, &cfg, 0, max_batch, (uint64_t)o->b.seed, &err)) {
        rc = cli_fail("bench", &err);
        goto done;
    }
    for (int b = 0; b < o->n_batch; b++)
        for (int t = 0; t < o->n_ctx; t++) {
            decode_row *full = &rows[b * per_batch + (size_t)t * (1 + o->n_budget)];
            for (int k = 0; k <= o->n_budget; k++) {
                decode_row *r = &full[k];
                init_row(r, o, &cfg, o->batch[b], o->ctx[t], k ? o->budget[k - 1] : 1.0,
                         weight_bytes);
                if (strcmp(r->status, "ok"))
                    continue;
                const uint64_t seed = (uint64_t)o->b.seed + 1000 * (uint64_t)(b * MAXL * MAXL +
                                                                           t * MAXL + k);
                bench_steps t;
                if (bench_time_steps(g, &cfg, o->b.kv_dtype, r->batch, r->entries, r->context,
                                     bench_max_degree(NULL, r->budget), false,
                                     (int32_t)o->b.warmup, (int32_t)o->b.repeats, seed, logits, &t,
                                     &err)) {
                    rc = cli_fail("bench", &err);
                    goto done;
                }
                r->runs = t.runs;
                r->median_ms = t.median_ms;
                r->min_ms = t.min_ms;
                r->max_ms = t.max_ms;
                r->tokens_per_s = r->batch / (r->median_ms * 1e-3);
                r->over_floor = r->median_ms / r->floor_ms;
                if (k && !strcmp(full->status, "ok")) {
                    r->speedup = full->median_ms / r->median_ms;
                    r->ideal_speedup =
                        (weight_bytes + full->kv_bytes) / (weight_bytes + r->kv_bytes);
                    r->pct_ideal = 100 * r->speedup / r->ideal_speedup;
                }
                fprintf(stderr, "ckv bench: %s batch %d context %d entries %d: %.3f ms/step\n",
                        o->shape, r->batch, r->context, r->entries, r->median_ms);
            }
        }
    print_rows(rows, n);
    print_targets(rows, n, &o->b.copy);
    char copy_bps[32];
    snprintf(copy_bps, sizeof copy_bps, "%.6g", o->b.copy.bps);
    const char *attrs[] = {"format", "ckv-bench-decode", "version", "1", "date", date, "device",
                           dev.name, "command", cmdline, "git_rev", CKV_GIT_REV, "shape", o->shape,
                           "copy_bandwidth_Bps", copy_bps, "copy_bandwidth_source",
                           o->b.copy.source, "pdl", pdl, "kv_dtype",
                           ckv_kv_dtype_name(o->b.kv_dtype)};
    const ckv_h5_table table = {"/decode", decode_fields,
                                sizeof decode_fields / sizeof decode_fields[0], sizeof(decode_row),
                                rows, n};
    rc = bench_write(o->b.out, attrs, sizeof attrs / sizeof attrs[0] / 2, &table, 1);
done:
    ckv_gpu_free(g);
    free(rows);
    free(logits);
    free(cmdline);
    return rc;
}

#endif

int bench_decode(int argc, char **argv)
{
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
#if CKV_HAVE_CUDA
    return run(argc, argv, &o);
#else
    return bench_no_cuda("decode");
#endif
}
