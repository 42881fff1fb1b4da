/* ckv merge: joins shard results files of one config into one file. */
#include <getopt.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "opts.h"
#include "results.h"

#define CMD "merge"

static void help(void)
{
    printf("usage: ckv merge A.h5 B.h5 ... (-o|--out) ALL.h5\n\n"
           "Joins sweep results files (e.g. the shards of `ckv sweep --shard I/N`) into one,\n"
           "with /summary recomputed. Refuses files of different configs (config hash)\n"
           "and rows present twice (same sample unit and run).\n\n"
           "  -o, --out FILE   output file (must not be an input)\n"
           "  -h, --help       this help\n");
}

static int cmp_row(const void *a, const void *b)
{
    const ckv_result_row *x = a, *y = b;
    if (x->unit != y->unit)
        return x->unit < y->unit ? -1 : 1;
    return (x->run > y->run) - (x->run < y->run);
}

int cmd_merge(int argc, char **argv)
{
    static const struct option lo[] = {
        {"out", required_argument, 0, 'o'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *out = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'h': help(); return CLI_OK;
        default: return cli_usage_error(CMD, "invalid option");
        }
    }
    if (!out)
        return cli_usage_error(CMD, "missing --out FILE");
    if (optind >= argc)
        return cli_usage_error(CMD, "no input files");
    for (int i = optind; i < argc; i++)
        if (!strcmp(argv[i], out))
            return cli_usage_error(CMD, "output %s is also an input", out);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int n_in = argc - optind, rc = CLI_FAIL;
    ckv_results_data *d = calloc((size_t)n_in, sizeof *d);
    ckv_result_row *all = NULL;
    ckv_results *res = NULL;
    ckv_error err = {0};
    size_t total = 0;
    if (!d) {
        ckv_errorf(&err, CKV_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < n_in; i++) {
        if (ckv_results_read(argv[optind + i], &d[i], &err))
            goto fail;
        if (strcmp(d[i].meta.config_hash, d[0].meta.config_hash)) {
            ckv_errorf(&err, CKV_ERR_ARG, "%s: config hash %s differs from %s's %s",
                       argv[optind + i], d[i].meta.config_hash, argv[optind],
                       d[0].meta.config_hash);
            goto fail;
        }
        total += d[i].n_rows;
    }
    if (total && !(all = malloc(total * sizeof *all))) {
        ckv_errorf(&err, CKV_ERR_NOMEM, "out of memory");
        goto fail;
    }
    total = 0;
    for (int i = 0; i < n_in; i++) {
        memcpy(all + total, d[i].rows, d[i].n_rows * sizeof *all);
        total += d[i].n_rows;
    }
    qsort(all, total, sizeof *all, cmp_row);
    for (size_t i = 1; i < total; i++)
        if (!cmp_row(&all[i - 1], &all[i])) {
            ckv_errorf(&err, CKV_ERR_ARG, "row of sample unit %lld, run %d appears twice",
                       (long long)all[i].unit, all[i].run);
            goto fail;
        }
    if (ckv_results_create(&res, out, &d[0].meta, d[0].runs, d[0].n_runs, &err) ||
        ckv_results_append(res, all, total, &err))
        goto fail;
    ckv_status st = ckv_results_finish(res, &err);
    res = NULL;
    if (st)
        goto fail;
    printf("wrote %s: %zu rows from %d files\n", out, total, n_in);
    rc = CLI_OK;
    goto done;
fail:
    rc = cli_fail(CMD, &err);
done:
    ckv_results_close(res);
    free(all);
    for (int i = 0; d && i < n_in; i++)
        ckv_results_data_free(&d[i]);
    free(d);
    return rc;
}
