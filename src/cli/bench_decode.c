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
#include "splitmix.h"
#include "util.h"
#if CKV_HAVE_CUDA
#include "cuda.h"
#endif

enum { MAXL = 16 };

typedef struct {
    const char *shape, *out;
    bool synthetic;
    int32_t ctx[MAXL];
    int n_ctx, n_budget;
    double budget[MAXL];
    long long warmup, repeats, seed;
} opts;

static void help(FILE *fp)
{
    fprintf(fp,
            "usage: ckv bench decode --shape NAME --synthetic [--device cuda] [options]\n\n"
            "Times one decode step (ckv_gpu_forward of one token, batch 1) of a model shape\n"
            "with random bf16 weights made on the GPU, over a cache filled with random\n"
            "entries on the GPU, at each context length: the full cache (T entries, degree\n"
            "1) and, per budget b, a compressed cache (b * T entries, degrees averaging\n"
            "1 / b, as CentroidKV leaves them). Per point: the median wall time per token\n"
            "(host to logits on the host) of R steps after W warm-up steps; the floor, every\n"
            "bf16 matrix and every fp32 cache byte (keys, values, degrees) read once at\n"
            "%.2f TB/s; the time over the floor; and for budgets the speedup over the full\n"
            "cache against the ideal (the ratio of the bytes). Table on stdout, HDF5 file\n"
            "with a /decode table and the date, device and command as attributes.\n"
            "Batch > 1 needs a batched GPU decode step, which this build does not have.\n\n"
            "Options:\n"
            "  --shape NAME      llama3.1-8b, mistral-7b or smollm2-135m (required)\n"
            "  --synthetic       random weights (required: no model file is read)\n"
            "  --device cuda     the GPU (the only device)\n"
            "  --contexts LIST   context lengths (default 1024,4096,8192,32768,131072);\n"
            "                    those whose cache does not fit in free GPU memory are skipped\n"
            "  --budgets LIST    fractions in (0, 1) for compressed caches, or 'none'\n"
            "                    (default 0.25,0.5)\n"
            "  --warmup W        untimed steps per point (default 3)\n"
            "  --repeats R       timed steps per point (default 20)\n"
            "  --seed S          weights, cache and token seed (default 1)\n"
            "  --out PATH        HDF5 file (default results/bench-decode.h5)\n"
            "  -h, --help        this help\n",
            BENCH_COPY_BPS / 1e12);
}

static int parse(int argc, char **argv, opts *o)
{
    static const struct option longopts[] = {
        {"shape", required_argument, 0, 'S'},   {"synthetic", no_argument, 0, 'y'},
        {"device", required_argument, 0, 'd'},  {"contexts", required_argument, 0, 'c'},
        {"budgets", required_argument, 0, 'b'}, {"warmup", required_argument, 0, 'w'},
        {"repeats", required_argument, 0, 'r'}, {"seed", required_argument, 0, 's'},
        {"out", required_argument, 0, 'o'},     {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *ctx = "1024,4096,8192,32768,131072", *budgets = "0.25,0.5";
    *o = (opts){.out = "results/bench-decode.h5", .warmup = 3, .repeats = 20, .seed = 1};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case 'S': o->shape = optarg; break;
        case 'y': o->synthetic = true; break;
        case 'd':
            if (strcmp(optarg, "cuda"))
                return cli_usage_error("bench", "--device: '%s': decode is benchmarked on the "
                                       "GPU only (--device cuda)", optarg);
            break;
        case 'c': ctx = optarg; break;
        case 'b': budgets = optarg; break;
        case 'w': ok = cli_int("bench", "--warmup", optarg, 0, 10000, &o->warmup); break;
        case 'r': ok = cli_int("bench", "--repeats", optarg, 1, 100000, &o->repeats); break;
        case 's': ok = cli_int("bench", "--seed", optarg, 0, INT64_MAX, &o->seed); break;
        case 'o': o->out = optarg; break;
        case 'h': help(stdout); return -1;
        default: return cli_usage_error("bench", "invalid option");
        }
        if (!ok)
            return CLI_USAGE;
    }
    if (optind < argc)
        return cli_usage_error("bench", "unexpected argument '%s'", argv[optind]);
    if (!o->shape)
        return cli_usage_error("bench", "decode needs --shape NAME");
    if (!o->synthetic)
        return cli_usage_error("bench", "decode needs --synthetic (random weights; no model "
                               "file is read)");
    ckv_config cfg;
    ckv_error err = {0};
    if (ckv_model_preset(o->shape, &cfg, &err))
        return cli_usage_error("bench", "--shape: %s", err.msg);
    if (!bench_int_list("--contexts", ctx, 1, 1 << 24, o->ctx, &o->n_ctx, MAXL))
        return CLI_USAGE;
    if (strcmp(budgets, "none")) {
        char *copy = strdup(budgets);
        bool ok = copy != NULL;
        for (char *save = NULL, *t = copy ? strtok_r(copy, ",", &save) : NULL; t && ok;
             t = strtok_r(NULL, ",", &save)) {
            if (o->n_budget == MAXL) {
                cli_usage_error("bench", "--budgets: more than %d values", MAXL);
                ok = false;
            } else
                ok = cli_double("bench", "--budgets", t, 1e-6, 0.999999, &o->budget[o->n_budget++]);
        }
        free(copy);
        if (!ok)
            return CLI_USAGE;
    }
    return CLI_OK;
}

#if CKV_HAVE_CUDA

/* One row of /decode. */
typedef struct {
    char *shape;
    int32_t context;      /* tokens seen (positions) */
    double budget;        /* 1 for the full cache */
    int32_t entries;      /* per (layer, KV head) list */
    double mean_degree;
    double median_ms, min_ms, max_ms;
    int32_t runs;
    double weight_bytes, kv_bytes, floor_ms, over_floor;
    double speedup, ideal_speedup, pct_ideal; /* against the full cache; NaN for it */
    char *status;         /* "ok" or "skipped: why"; points at note */
    char note[128];
} decode_row;

#define FD(n, t) {#n, offsetof(decode_row, n), t}
static const ckv_h5_field decode_fields[] = {
    FD(shape, CKV_H5_STR), FD(context, CKV_H5_I32), FD(budget, CKV_H5_F64),
    FD(entries, CKV_H5_I32), FD(mean_degree, CKV_H5_F64), FD(median_ms, CKV_H5_F64),
    FD(min_ms, CKV_H5_F64), FD(max_ms, CKV_H5_F64), FD(runs, CKV_H5_I32),
    FD(weight_bytes, CKV_H5_F64), FD(kv_bytes, CKV_H5_F64), FD(floor_ms, CKV_H5_F64),
    FD(over_floor, CKV_H5_F64), FD(speedup, CKV_H5_F64), FD(ideal_speedup, CKV_H5_F64),
    FD(pct_ideal, CKV_H5_F64), FD(status, CKV_H5_STR),
};
#undef FD

/* Device bytes of a cache of `cap` entries per list: fp32 keys, values and
 * degrees (no scores). */
static double cache_bytes(const ckv_config *c, double cap)
{
    return (double)c->n_layer * c->n_head_kv * cap * (2.0 * c->head_dim + 1) * 4.0;
}

/* Times warmup + repeats one-token steps on a cache holding `entries` per
 * list at position `context`; checks the first step's logits are finite. */
static ckv_status time_point(ckv_gpu *g, const ckv_config *cfg, const opts *o, decode_row *r,
                             uint64_t seed, float *logits, ckv_error *err)
{
    const int32_t steps = (int32_t)(o->warmup + o->repeats);
    ckv_gpu_cache *c = NULL;
    double *ms = malloc((size_t)o->repeats * sizeof *ms);
    if (!ms)
        return ckv_errorf(err, CKV_ERR_NOMEM, "bench: out of memory");
    const float max_degree = r->budget < 1 ? (float)(2.0 / r->budget - 1.0) : 1.0f;
    ckv_status st = ckv_gpu_cache_create(&c, g, r->entries + steps, false, err);
    if (!st)
        st = ckv_gpu_cache_fill_random(c, r->entries, r->context, max_degree, seed, err);
    uint64_t rng = seed;
    for (int32_t s = 0; !st && s < steps; s++) {
        const int32_t tok = (int32_t)(ckv_splitmix64(&rng) % (uint64_t)cfg->n_vocab);
        const double t0 = ckv_now();
        st = ckv_gpu_forward(g, c, &tok, 1, NULL, logits, err);
        const double dt = ckv_now() - t0;
        if (!st && s == 0)
            for (int32_t v = 0; v < cfg->n_vocab; v++)
                if (!isfinite(logits[v])) {
                    st = ckv_errorf(err, CKV_ERR_DEVICE,
                                    "bench: logit %d is %g: the synthetic decoder gave a "
                                    "non-finite output, so its timings mean nothing",
                                    v, logits[v]);
                    break;
                }
        if (!st && s >= o->warmup)
            ms[s - o->warmup] = dt * 1e3;
    }
    if (!st) {
        r->runs = (int32_t)o->repeats;
        r->median_ms = bench_median(ms, r->runs);
        r->min_ms = ms[0];
        r->max_ms = ms[r->runs - 1];
    }
    ckv_gpu_cache_free(c);
    free(ms);
    return st;
}

static void print_rows(const decode_row *rows, size_t n)
{
    printf("\n%-13s %7s %6s %7s %6s %10s %10s %10s %9s %9s %7s %8s %7s %6s\n", "shape", "context",
           "cache", "entries", "deg", "median ms", "min ms", "max ms", "KV GB", "floor ms",
           "/floor", "speedup", "ideal", "%ideal");
    for (size_t i = 0; i < n; i++) {
        const decode_row *r = &rows[i];
        char cache[16];
        if (r->budget < 1)
            snprintf(cache, sizeof cache, "%.0f%%", 100 * r->budget);
        else
            snprintf(cache, sizeof cache, "full");
        printf("%-13s %7d %6s %7d %6.2f", r->shape, r->context, cache, r->entries, r->mean_degree);
        if (strcmp(r->status, "ok")) {
            printf(" %s\n", r->status);
            continue;
        }
        printf(" %10.3f %10.3f %10.3f %9.2f %9.3f %7.2f", r->median_ms, r->min_ms, r->max_ms,
               r->kv_bytes / 1e9, r->floor_ms, r->over_floor);
        if (r->budget < 1)
            printf(" %8.2f %7.2f %6.1f", r->speedup, r->ideal_speedup, r->pct_ideal);
        printf("\n");
    }
}

static int run(int argc, char **argv, const opts *o)
{
    ckv_error err = {0};
    ckv_config cfg;
    ckv_model_preset(o->shape, &cfg, &err);
    int32_t n_dev;
    ckv_cuda_device dev;
    if (ckv_cuda_device_count(&n_dev, &err) || ckv_cuda_device_query(0, &dev, &err)) {
        fprintf(stderr, "ckv bench: no usable GPU: %s\n", err.msg);
        return CLI_FAIL;
    }
    const size_t n = (size_t)o->n_ctx * (1 + o->n_budget);
    decode_row *rows = calloc(n, sizeof *rows);
    float *logits = malloc((size_t)cfg.n_vocab * sizeof *logits);
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
    const double weight_bytes = 2.0 * (double)ckv_config_matrix_params(&cfg);
    printf("device: %s (%.1f GiB); %s; shape %s: %.2f GB of bf16 matrices\n", dev.name,
           (double)dev.mem_total / (1 << 30), date, o->shape, weight_bytes / 1e9);
    if (ckv_gpu_create_synthetic(&g, &cfg, 0, 1, (uint64_t)o->seed, &err)) {
        rc = cli_fail("bench", &err);
        goto done;
    }
    for (int t = 0; t < o->n_ctx; t++) {
        decode_row *full = &rows[(size_t)t * (1 + o->n_budget)];
        for (int b = 0; b <= o->n_budget; b++) {
            decode_row *r = &full[b];
            r->shape = (char *)o->shape;
            r->context = o->ctx[t];
            r->budget = b ? o->budget[b - 1] : 1.0;
            r->entries = b ? (int32_t)ceil(r->budget * r->context) : r->context;
            r->mean_degree = (double)r->context / r->entries;
            r->median_ms = r->min_ms = r->max_ms = r->over_floor = NAN;
            r->speedup = r->ideal_speedup = r->pct_ideal = NAN;
            r->weight_bytes = weight_bytes;
            r->kv_bytes = cache_bytes(&cfg, r->entries);
            r->floor_ms = (weight_bytes + r->kv_bytes) / BENCH_COPY_BPS * 1e3;
            r->status = r->note;
            snprintf(r->note, sizeof r->note, "ok");
            ckv_cuda_device d;
            const double need = cache_bytes(&cfg, r->entries + (double)(o->warmup + o->repeats));
            if (!ckv_cuda_device_query(0, &d, &err) && need + (512 << 20) > (double)d.mem_free) {
                snprintf(r->note, sizeof r->note, "skipped: cache %.1f GiB, %.1f GiB free",
                         need / (1 << 30), (double)d.mem_free / (1 << 30));
                continue;
            }
            if (time_point(g, &cfg, o, r, (uint64_t)o->seed + 7 * (uint64_t)(t * 64 + b), logits,
                           &err)) {
                rc = cli_fail("bench", &err);
                goto done;
            }
            r->over_floor = r->median_ms / r->floor_ms;
            if (b && !strcmp(full->status, "ok")) {
                r->speedup = full->median_ms / r->median_ms;
                r->ideal_speedup = (weight_bytes + full->kv_bytes) / (weight_bytes + r->kv_bytes);
                r->pct_ideal = 100 * r->speedup / r->ideal_speedup;
            }
            fprintf(stderr, "ckv bench: %s context %d entries %d: %.3f ms/token\n", o->shape,
                    r->context, r->entries, r->median_ms);
        }
    }
    print_rows(rows, n);
    const char *attrs[] = {"format", "ckv-bench-decode", "version", "1", "date", date, "device",
                           dev.name, "command", cmdline, "git_rev", CKV_GIT_REV, "shape", o->shape,
                           "copy_bandwidth_Bps", "4.19e12", "batch", "1"};
    const ckv_h5_table table = {"/decode", decode_fields,
                                sizeof decode_fields / sizeof decode_fields[0], sizeof(decode_row),
                                rows, n};
    if (!bench_make_parent(o->out))
        fprintf(stderr, "ckv bench: cannot create the folder of %s\n", o->out);
    if (ckv_h5_write_file(o->out, attrs, sizeof attrs / sizeof attrs[0] / 2, &table, 1, &err))
        rc = cli_fail("bench", &err);
    else
        printf("\nwrote %s\n", o->out);
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
    fprintf(stderr, "ckv bench: built without CUDA (configure with -Dcuda=enabled): decode is "
                    "benchmarked on the GPU only\n");
    return CLI_FAIL;
#endif
}
