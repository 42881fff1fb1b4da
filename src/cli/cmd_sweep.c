/* ckv sweep: runs a config's grid to an HDF5 results file. */
#include <getopt.h>
#include <hdf5.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "config.h"
#include "opts.h"
#include "progress.h"
#include "sweep.h"

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
           "(schema: docs/results.md). SIGINT flushes finished samples and exits 130.\n\n"
           "  -o, --out FILE.h5   results file (default: the config's `output`)\n"
           "      --resume        continue an existing results file: samples whose rows\n"
           "                      exist are skipped; a changed config is refused\n"
           "      --force         overwrite an existing file, or resume despite a changed\n"
           "                      config\n"
           "      --shard I/N     run only samples with index %% N == I (0 <= I < N)\n"
           "      --device D      cpu, cuda (the first visible GPU) or auto (default: the\n"
           "                      GPU when one is usable, else the CPU)\n"
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

int cmd_sweep(int argc, char **argv)
{
    static const struct option lo[] = {
        {"out", required_argument, 0, 'o'},  {"resume", no_argument, 0, 'r'},
        {"force", no_argument, 0, 'f'},      {"shard", required_argument, 0, 's'},
        {"device", required_argument, 0, 'd'}, {"dry-run", no_argument, 0, 'n'},
        {"limit", required_argument, 0, 'l'}, {"log-every", required_argument, 0, 'L'},
        {"help", no_argument, 0, 'h'},       {0, 0, 0, 0}};
    ckv_sweep_opts o = {.device = "auto", .n_shards = 1, .flush_seconds = 30, .stop = &g_stop};
    bool dry = false;
    long long limit = 0, si = 0, sn = 1;
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
        case 'h': help(); return CLI_OK;
        default: return cli_usage_error(CMD, "invalid option");
        }
    }
    if (optind + 1 != argc)
        return cli_usage_error(CMD, optind < argc ? "give exactly one config file"
                                                  : "missing CONFIG.yaml");
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    ckv_error err = {0};
    ckv_sweep_config cfg;
    if (ckv_sweep_config_load(&cfg, argv[optind], &err)) {
        ckv_sweep_config_free(&cfg);
        return cli_fail(CMD, &err);
    }
    int rc;
    if (dry) {
        rc = dry_run(&cfg, limit);
        ckv_sweep_config_free(&cfg);
        return rc;
    }
    if (!o.out_path)
        o.out_path = cfg.output;
    if (!o.out_path) {
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
    ckv_status st = ckv_sweep_run(&cfg, &o, &err);
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
