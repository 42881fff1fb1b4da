/* ckv sweep: runs a config's grid to an HDF5 results file, in this process
 * or over worker processes of this host (--devices, --workers: the pool in
 * harness/sweep_pool.c; a worker is this command with --worker-fd). */
#include <fcntl.h>
#include <getopt.h>
#include <hdf5.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckv_config.h"
#include "commands.h"
#include "config.h"
#include "opts.h"
#include "progress.h"
#include "sweep.h"
#include "sweep_pool.h"
#include "util.h"
#include "worker_wire.h"
#if CKV_HAVE_CUDA
#include "cuda.h"
#endif

#define CMD "sweep"

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void help(void)
{
    printf("usage: ckv sweep CONFIG.yaml [options]\n\n"
           "Runs every sample of the config's tasks against every policy configuration of\n"
           "its grid: one full-cache prefill per sample, forked to each run, compressed,\n"
           "decoded greedily and scored. Rows go to an HDF5 file in flushed batches\n"
           "(schema: docs/results.md). SIGINT flushes finished samples and exits 130\n"
           "(with workers: forwarded to them first).\n\n"
           "  -o, --out FILE.h5   results file (default: the config's `output`)\n"
           "      --resume        continue an existing results file: samples whose rows\n"
           "                      exist are skipped; a changed config is refused\n"
           "      --force         overwrite an existing file, or resume despite a changed\n"
           "                      config\n"
           "      --shard I/N     run only samples with index %% N == I (0 <= I < N)\n"
           "      --device D      cpu, cuda (the first visible GPU) or auto (default: the\n"
           "                      GPU when one is usable, else the CPU)\n"
           "      --devices LIST  one worker process per GPU: LIST is comma-separated GPU\n"
           "                      indices (as `ckv devices` numbers them) or `all`; worker j\n"
           "                      runs --device cuda on its GPU alone (CUDA_VISIBLE_DEVICES)\n"
           "                      over shard I+N*j of N*W (I/N: --shard, default 0/1; W\n"
           "                      workers). This process writes every row to --out as the\n"
           "                      workers finish samples; a failed worker is rerun once on\n"
           "                      its unfinished samples, then reported (exit 1)\n"
           "      --workers N     the same with N worker processes on the CPU (--device cpu),\n"
           "                      the cores split between them\n"
           "      --threads N     CPU threads of this process, or in all of the workers\n"
           "                      together (default: the config's threads)\n"
           "      --worker-fd FD  (internal) run as a worker of --devices/--workers, talking\n"
           "                      to the parent over the socket FD\n"
           "      --dry-run       print the expanded grid and its size, run nothing\n"
           "      --limit N       at most N samples per task and length (overrides the\n"
           "                      config's limit)\n"
           "      --log-every S   without a terminal, a progress line every S seconds\n"
           "                      (default 30)\n"
           "  -h, --help          this help\n");
}

static bool parse_shard(const char *s, long long *i, long long *n)
{
    char *end;
    *i = strtoll(s, &end, 10);
    if (end == s || *end != '/')
        return false;
    const char *q = end + 1;
    *n = strtoll(q, &end, 10);
    return end != q && !*end && *n >= 1 && *n <= 1000000 && *i >= 0 && *i < *n;
}

static int dry_run(const ckv_sweep_config *c, long long limit)
{
    printf("config %s (hash %016llx), mode %s, %zu runs:\n", c->path,
           (unsigned long long)c->hash, c->query_agnostic ? "query_agnostic" : "query_aware",
           c->n_runs);
    for (size_t i = 0; i < c->n_runs; i++)
        printf("  %4zu  %s\n", i, c->runs[i].name);
    ckv_error err = {0};
    size_t n = 0;
    if (ckv_sweep_count_samples(c, limit, &n, &err))
        return cli_fail(CMD, &err);
    printf("%zu samples x %zu runs = %zu rows\n", n, c->n_runs, n * c->n_runs);
    return CLI_OK;
}

/* The GPU indices of --devices: `all` or distinct comma-separated indices
 * below the device count. A build or host without a GPU is an error here,
 * before any file is touched. */
static int resolve_devices(const char *spec, int32_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    bool all = !strcmp(spec, "all");
    size_t cap = 1;
    for (const char *p = spec; *p; p++)
        cap += *p == ',';
    int32_t *idx = calloc(cap, sizeof *idx);
    if (!idx)
        return cli_usage_error(CMD, "out of memory");
    for (const char *p = spec; !all && *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        bool dup = false;
        for (size_t i = 0; i < *n; i++)
            dup |= idx[i] == v;
        if (end == p || v < 0 || v > 4096 || (*end && *end != ',') || dup) {
            free(idx);
            return cli_usage_error(CMD, "--devices '%s': expected `all` or distinct GPU indices "
                                   "separated by commas", spec);
        }
        idx[(*n)++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
#if CKV_HAVE_CUDA
    ckv_error err = {0};
    int32_t count = 0;
    if (ckv_cuda_device_count(&count, &err)) {
        free(idx);
        ckv_error_prefix(&err, "--devices %s", spec);
        return cli_fail(CMD, &err);
    }
    if (all) {
        free(idx);
        if (!(idx = calloc(count > 0 ? (size_t)count : 1, sizeof *idx)))
            return cli_usage_error(CMD, "out of memory");
        for (int32_t i = 0; i < count; i++)
            idx[(*n)++] = i;
    }
    for (size_t i = 0; i < *n; i++)
        if (idx[i] >= count) {
            fprintf(stderr, "ckv sweep: --devices %s: GPU %d does not exist (%d GPUs)\n", spec,
                    idx[i], count);
            free(idx);
            return CLI_FAIL;
        }
    if (!*n) {
        free(idx);
        fprintf(stderr, "ckv sweep: --devices %s: no GPU\n", spec);
        return CLI_FAIL;
    }
    *out = idx;
    return CLI_OK;
#else
    free(idx);
    fprintf(stderr, "ckv sweep: --devices %s: ckv was built without CUDA (configure with "
            "-Dcuda=enabled); --workers N runs CPU workers\n", spec);
    return CLI_FAIL;
#endif
}

/* Visible GPU i as CUDA_VISIBLE_DEVICES names it: this process's own list,
 * when set, renumbers the GPUs. */
static void visible_name(int32_t i, char *out, size_t n)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    snprintf(out, n, "%d", i);
    if (!v || !*v)
        return;
    for (int32_t k = 0; k < i && v; k++)
        if ((v = strchr(v, ',')))
            v++;
    if (v && *v && *v != ',')
        snprintf(out, n, "%.*s", (int)strcspn(v, ","), v);
}

/* A worker's rows and progress go to the parent over the socket. */
static ckv_status worker_unit(void *ctx, const ckv_result_row *rows, size_t n, ckv_error *err)
{
    return ckv_wire_send_rows(*(int *)ctx, rows, n, err);
}

static void worker_progress(void *ctx, ckv_sweep_event ev, const ckv_sweep_progress *p)
{
    int fd = *(int *)ctx;
    ckv_error ignored;
    if (ev == CKV_SWEEP_PLAN)
        ckv_wire_send_plan(fd, p->units_total, p->units_done, &ignored);
    else if (ev == CKV_SWEEP_NOTE)
        ckv_wire_send(fd, CKV_WIRE_NOTE, p->note, strlen(p->note), &ignored);
}

/* The worker side: its shard's done units from the parent, then the sweep
 * with rows sent instead of written; errors go to the parent, which reports
 * them. */
static int run_worker(const ckv_sweep_config *cfg, ckv_sweep_opts *o, int fd)
{
    ckv_error err = {0};
    int64_t *skip = NULL;
    ckv_status st = ckv_wire_recv_skip(fd, &skip, &o->n_skip, &err);
    if (st)
        return cli_fail(CMD, &err);
    o->skip_units = skip;
    o->unit_done = worker_unit;
    o->unit_ctx = &fd;
    o->progress = worker_progress;
    o->progress_ctx = &fd;
    st = ckv_sweep_run(cfg, o, &err);
    free(skip);
    if (!st)
        st = ckv_wire_send(fd, CKV_WIRE_DONE, NULL, 0, &err);
    if (st == CKV_ERR_INTERRUPTED)
        return CLI_INTERRUPTED;
    ckv_error e2;
    if (st && ckv_wire_send(fd, CKV_WIRE_ERROR, err.msg, strlen(err.msg), &e2))
        return cli_fail(CMD, &err);
    return st ? CLI_FAIL : CLI_OK;
}

/* The parent of --devices / --workers: one worker per GPU index (or n_cpu
 * CPU workers), each this binary's `sweep CONFIG --device D --threads T`
 * with the cores split between them. */
static ckv_status run_pool(const ckv_sweep_config *cfg, const ckv_sweep_opts *o,
                           const int32_t *gpus, size_t n_gpus, long long n_cpu, long long limit,
                           ckv_error *err)
{
    size_t nw = n_gpus ? n_gpus : (size_t)n_cpu;
    int total = cfg->threads > 0 ? cfg->threads : ckv_cpu_count();
    char threads[24], lim[24], omp[48], blas[48];
    snprintf(threads, sizeof threads, "%d", total / (int)nw > 0 ? total / (int)nw : 1);
    snprintf(lim, sizeof lim, "%lld", limit);
    /* The decoder takes --threads; OpenMP and OpenBLAS (K-Means) elsewhere
     * take the same share from the environment. */
    snprintf(omp, sizeof omp, "OMP_NUM_THREADS=%s", threads);
    snprintf(blas, sizeof blas, "OPENBLAS_NUM_THREADS=%s", threads);
    const char *argv[] = {"ckv", "sweep", cfg->path, "--device", n_gpus ? "cuda" : "cpu",
                          "--threads", threads, limit ? "--limit" : NULL, lim, NULL};
    ckv_pool_worker *w = calloc(nw, sizeof *w);
    char (*label)[32] = calloc(nw, sizeof *label);
    char (*cvd)[320] = calloc(nw, sizeof *cvd);
    const char *(*env)[5] = calloc(nw, sizeof *env);
    ckv_status st;
    if (!w || !label || !cvd || !env) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t j = 0; j < nw; j++) {
        /* No collectives run between workers: NCCL's NVLink multicast stays off. */
        env[j][0] = "NCCL_NVLS_ENABLE=0";
        env[j][1] = omp;
        env[j][2] = blas;
        if (n_gpus) {
            char name[256];
            visible_name(gpus[j], name, sizeof name);
            snprintf(cvd[j], sizeof cvd[j], "CUDA_VISIBLE_DEVICES=%s", name);
            snprintf(label[j], sizeof label[j], "cuda:%d", gpus[j]);
            env[j][3] = cvd[j];
        } else {
            snprintf(label[j], sizeof label[j], "cpu:%zu", j);
        }
        w[j] = (ckv_pool_worker){.label = label[j], .env = env[j]};
    }
    ckv_pool_opts po = {.exe = "/proc/self/exe", .argv = argv, .workers = w, .n_workers = nw,
                        .device = n_gpus ? "cuda" : "cpu"};
    st = ckv_sweep_pool_run(cfg, o, &po, err);
out:
    free(w);
    free(label);
    free(cvd);
    free(env);
    return st;
}

int cmd_sweep(int argc, char **argv)
{
    static const struct option lo[] = {
        {"out", required_argument, 0, 'o'},    {"resume", no_argument, 0, 'r'},
        {"force", no_argument, 0, 'f'},        {"shard", required_argument, 0, 's'},
        {"device", required_argument, 0, 'd'}, {"dry-run", no_argument, 0, 'n'},
        {"limit", required_argument, 0, 'l'},  {"log-every", required_argument, 0, 'L'},
        {"devices", required_argument, 0, 'D'}, {"workers", required_argument, 0, 'W'},
        {"threads", required_argument, 0, 't'}, {"worker-fd", required_argument, 0, 'F'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    ckv_sweep_opts o = {.device = "auto", .n_shards = 1, .flush_seconds = 30, .stop = &g_stop};
    bool dry = false, device_set = false;
    long long limit = 0, si = 0, sn = 1, n_cpu = 0, threads = 0, wfd = -1;
    const char *devices = NULL;
    double log_every = 30;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
        switch (c) {
        case 'o': o.out_path = optarg; break;
        case 'r': o.resume = true; break;
        case 'f': o.force = true; break;
        case 's':
            if (!parse_shard(optarg, &si, &sn))
                return cli_usage_error(CMD, "--shard '%s': expected I/N with 0 <= I < N", optarg);
            break;
        case 'd':
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda") && strcmp(optarg, "auto"))
                return cli_usage_error(CMD, "--device '%s': expected cpu, cuda or auto", optarg);
            o.device = optarg;
            device_set = true;
            break;
        case 'n': dry = true; break;
        case 'l':
            if (!cli_int(CMD, "--limit", optarg, 1, INT64_MAX, &limit))
                return CLI_USAGE;
            break;
        case 'L':
            if (!cli_double(CMD, "--log-every", optarg, 0.1, 86400, &log_every))
                return CLI_USAGE;
            break;
        case 'D': devices = optarg; break;
        case 'W':
            if (!cli_int(CMD, "--workers", optarg, 1, 1024, &n_cpu))
                return CLI_USAGE;
            break;
        case 't':
            if (!cli_int(CMD, "--threads", optarg, 1, 4096, &threads))
                return CLI_USAGE;
            break;
        case 'F':
            if (!cli_int(CMD, "--worker-fd", optarg, 3, 1 << 20, &wfd))
                return CLI_USAGE;
            break;
        case 'h': help(); return CLI_OK;
        default: return cli_usage_error(CMD, "invalid option");
        }
    }
    if (optind + 1 != argc)
        return cli_usage_error(CMD, optind < argc ? "give exactly one config file"
                                                  : "missing CONFIG.yaml");
    if (devices && n_cpu)
        return cli_usage_error(CMD, "--devices (GPU workers) and --workers (CPU workers) "
                               "exclude each other");
    if ((devices || n_cpu) && wfd >= 0)
        return cli_usage_error(CMD, "--worker-fd is for the workers themselves");
    if (devices && device_set && !strcmp(o.device, "cpu"))
        return cli_usage_error(CMD, "--devices runs GPU workers; --workers N runs CPU workers");
    if (n_cpu && device_set && strcmp(o.device, "cpu"))
        return cli_usage_error(CMD, "--workers runs CPU workers; --devices LIST runs GPU workers");
    if (wfd >= 0 && fcntl((int)wfd, F_GETFD) < 0)
        return cli_usage_error(CMD, "--worker-fd %lld: not an open file descriptor", wfd);
    int32_t *gpus = NULL;
    size_t n_gpus = 0;
    int rc;
    if (devices && !dry && (rc = resolve_devices(devices, &gpus, &n_gpus)))
        return rc;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    ckv_error err = {0};
    ckv_sweep_config cfg;
    if (ckv_sweep_config_load(&cfg, argv[optind], &err)) {
        free(gpus);
        ckv_sweep_config_free(&cfg);
        return cli_fail(CMD, &err);
    }
    if (threads)
        cfg.threads = (int)threads;
    if (dry) {
        rc = dry_run(&cfg, limit);
        ckv_sweep_config_free(&cfg);
        return rc;
    }
    if (!o.out_path)
        o.out_path = cfg.output;
    if (!o.out_path && wfd < 0) {
        free(gpus);
        ckv_sweep_config_free(&cfg);
        return cli_usage_error(CMD, "no output: give --out FILE.h5 or `output:` in the config");
    }
    o.shard = (int32_t)si;
    o.n_shards = (int32_t)sn;
    o.limit = limit;
    o.flush_seconds = log_every < 30 ? log_every : 30;
    cli_progress pr;
    cli_progress_init(&pr, log_every);
    o.progress = cli_progress_event;
    o.progress_ctx = &pr;
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (wfd >= 0) {
        rc = run_worker(&cfg, &o, (int)wfd);
        ckv_sweep_config_free(&cfg);
        return rc;
    }
    ckv_status st = devices || n_cpu
                        ? run_pool(&cfg, &o, gpus, n_gpus, n_cpu, limit, &err)
                        : ckv_sweep_run(&cfg, &o, &err);
    free(gpus);
    if (st == CKV_ERR_INTERRUPTED) {
        fprintf(stderr, "\nckv sweep: interrupted; finished samples are in %s (--resume "
                "continues)\n", o.out_path);
        rc = CLI_INTERRUPTED;
    } else if (st) {
        rc = cli_fail(CMD, &err);
    } else {
        fprintf(stderr, "ckv sweep: wrote %s\n", o.out_path);
        rc = CLI_OK;
    }
    ckv_sweep_config_free(&cfg);
    return rc;
}
