#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "key_similarity.h"
#include "kvfile.h"
#include "opts.h"

static void help(FILE *fp)
{
    fprintf(fp, "usage: ckv analyze keys kv.h5 [--max-distance D] [--png FILE]\n\n"
           "Mean cosine similarity of keys at token distance 1..D, per layer (over every KV\n"
           "head and every pair of slots), from a dump written by 'ckv dump-kv': the\n"
           "observation CentroidKV builds on. Prints one row per distance, one column per\n"
           "layer.\n\n"
           "Options:\n"
           "  --max-distance D  largest distance (default 32)\n"
           "  --png FILE        also plot the curves with gnuplot (must be installed)\n"
           "  -h, --help        this help\n");
}

/* Plots the table with gnuplot: one curve per layer. */
static int plot(const char *png, const double *sim, int32_t layers, int32_t D)
{
    char data[] = "/tmp/ckv_analyze_XXXXXX";
    int fd = mkstemp(data);
    FILE *fp = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!fp) {
        fprintf(stderr, "ckv analyze: cannot create a temporary data file\n");
        return CLI_FAIL;
    }
    for (int32_t j = 0; j < D; j++) {
        fprintf(fp, "%d", j + 1);
        for (int32_t l = 0; l < layers; l++)
            fprintf(fp, " %.6f", sim[(size_t)l * D + j]);
        fprintf(fp, "\n");
    }
    fclose(fp);
    FILE *gp = popen("gnuplot", "w");
    int rc = CLI_FAIL;
    if (gp) {
        fprintf(gp,
                "set terminal png size 900,600\nset output '%s'\n"
                "set xlabel 'token distance'\nset ylabel 'mean cosine similarity of keys'\n"
                "set key outside right\nset grid\n"
                "plot for [i=2:%d] '%s' using 1:i with lines title sprintf('layer %%d', i-2)\n",
                png, layers + 1, data);
        rc = pclose(gp) == 0 ? CLI_OK : CLI_FAIL;
    }
    unlink(data);
    if (rc)
        fprintf(stderr, "ckv analyze: gnuplot failed (is it installed?); no %s written\n", png);
    return rc;
}

static int analyze_keys(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"max-distance", required_argument, 0, 'd'},
        {"png", required_argument, 0, 'p'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    long long D = 32;
    const char *png = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd':
            if (!cli_int("analyze", "--max-distance", optarg, 1, 1 << 20, &D))
                return CLI_USAGE;
            break;
        case 'p': png = optarg; break;
        case 'h': help(stdout); return CLI_OK;
        default: return cli_usage_error("analyze", "invalid option");
        }
    }
    if (optind != argc - 1)
        return cli_usage_error("analyze", "expected exactly one dump file");
    ckv_kvdump d;
    ckv_error err = {0};
    if (ckv_kvfile_read(argv[optind], &d, &err))
        return cli_fail("analyze", &err);
    int32_t L = d.cache.n_layer;
    double *sim = malloc((size_t)L * (size_t)D * sizeof *sim);
    int rc = CLI_FAIL;
    if (!sim) {
        ckv_errorf(&err, CKV_ERR_NOMEM, "out of memory");
        rc = cli_fail("analyze", &err);
    } else if (ckv_key_similarity(&d.cache, (int32_t)D, sim, &err)) {
        rc = cli_fail("analyze", &err);
    } else {
        printf("distance");
        for (int32_t l = 0; l < L; l++)
            printf("  layer%-3d", l);
        printf("\n");
        for (int32_t j = 0; j < D; j++) {
            printf("%8d", j + 1);
            for (int32_t l = 0; l < L; l++)
                printf("  %8.4f", sim[(size_t)l * D + j]);
            printf("\n");
        }
        rc = png ? plot(png, sim, L, (int32_t)D) : CLI_OK;
    }
    free(sim);
    ckv_kvdump_free(&d);
    return rc;
}

int cmd_analyze(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        help(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    if (!strcmp(argv[1], "keys"))
        return analyze_keys(argc - 1, argv + 1);
    return cli_usage_error("analyze", "unknown analysis '%s' (known: keys)", argv[1]);
}
