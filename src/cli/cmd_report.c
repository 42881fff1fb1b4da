/* ckv report: tables and plots from a sweep results file. */
#include <getopt.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "commands.h"
#include "opts.h"
#include "report.h"
#include "results.h"

#define CMD "report"

static void help(void)
{
    printf("usage: ckv report FILE.h5 [--format md|csv] [--plot DIR]\n\n"
           "Prints the tables of a sweep results file: RULER (rows method@budget, columns\n"
           "the tasks and their mean, per length), LongBench, fidelity (when measured) and\n"
           "speed. Scores are x100, rounded as each benchmark rounds them; a mean is shown\n"
           "only when every task of its row is present.\n\n"
           "  --format F   md (markdown, default) or csv (table,length,run,column,value)\n"
           "  --plot DIR   also write score and decode time vs budget plots to DIR: data\n"
           "               files and a gnuplot script, run when gnuplot is installed\n"
           "  -h, --help   this help\n");
}

int cmd_report(int argc, char **argv)
{
    static const struct option lo[] = {{"format", required_argument, 0, 'f'},
                                       {"plot", required_argument, 0, 'p'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    ckv_report_format fmt = CKV_REPORT_MD;
    const char *plot = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'f':
            if (!strcmp(optarg, "md"))
                fmt = CKV_REPORT_MD;
            else if (!strcmp(optarg, "csv"))
                fmt = CKV_REPORT_CSV;
            else
                return cli_usage_error(CMD, "--format '%s': expected md or csv", optarg);
            break;
        case 'p': plot = optarg; break;
        case 'h': help(); return CLI_OK;
        default: return cli_usage_error(CMD, "invalid option");
        }
    }
    if (optind + 1 != argc)
        return cli_usage_error(CMD, "give exactly one results file");
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    ckv_error err = {0};
    ckv_results_data d;
    if (ckv_results_read(argv[optind], &d, &err))
        return cli_fail(CMD, &err);
    int rc = CLI_OK;
    if (ckv_report_write(stdout, &d, fmt, &err))
        rc = cli_fail(CMD, &err);
    if (!rc && plot) {
        mkdir(plot, 0777);
        if (ckv_report_plot_files(&d, plot, &err)) {
            rc = cli_fail(CMD, &err);
        } else if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
            char cmd[4200];
            snprintf(cmd, sizeof cmd, "gnuplot '%s/plots.gp'", plot);
            if (system(cmd) != 0) {
                fprintf(stderr, "ckv report: gnuplot failed on %s/plots.gp\n", plot);
                rc = CLI_FAIL;
            } else {
                fprintf(stderr, "ckv report: plots in %s\n", plot);
            }
        } else {
            fprintf(stderr, "ckv report: gnuplot not installed; data and script in %s "
                    "(run: gnuplot %s/plots.gp)\n", plot, plot);
        }
    }
    ckv_results_data_free(&d);
    return rc;
}
