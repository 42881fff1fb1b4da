#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckv_config.h"
#include "commands.h"
#if CKV_HAVE_CUDA
#include "cuda.h"
#endif
#include "kvfile.h"
#include "opts.h"
#include "policy.h"
#include "session.h"

enum { EXIT_SKIPPED = 3, MAX_SETS = 64 };

static void help(void)
{
    printf("usage: ckv compress --policy NAME --budget X [--set key=value]... --in kv.h5 --out "
           "out.h5\n\n"
           "Applies one compression (CSM: rounds until within budget) to a KV dump written by\n"
           "'ckv dump-kv' or by an earlier 'ckv compress', and writes the result.\n\n"
           "Options:\n"
           "  --policy NAME     one of:");
    for (const char *const *n = ckv_policy_names(); *n; n++)
        printf(" %s", *n);
    printf("\n"
           "  --budget X        entries kept per (layer, KV head): 25%% (percent), 0.25\n"
           "                    (fraction of the dump's prompt_tokens, rounded up) or 1024\n"
           "                    (absolute); not needed for 'full'\n"
           "  --set key=value   a policy parameter (repeatable); 'ckv compress --policy NAME\n"
           "                    --help' lists them. For centroid, round=J starts the rate\n"
           "                    schedule at round J (default: the input's csm_round)\n"
           "  --in FILE         input dump (k, v; optional degree, length, q_window, h2o_score)\n"
           "  --device D        cpu (default), cuda (the policy's GPU kernels on the first\n"
           "                    GPU) or auto (cuda when a GPU is usable and the policy's\n"
           "                    kernels implement these parameters, else the CPU)\n"
           "  --out FILE        output: k, v, degree, length, assign (q_window, h2o_score\n"
           "                    when present) and attributes policy, params, budget,\n"
           "                    budget_entries, csm_round, prompt_tokens, model, prompt;\n"
           "                    written atomically\n"
           "  -h, --help        this help\n\n"
           "Exit status: 0 done, 1 failure, 2 usage error, 3 skipped (a fractional budget\n"
           "that does not exceed the policy's protected entries; the reason is printed).\n");
}

static void help_policy(const ckv_policy *p)
{
    printf("policy %s: %s\n", p->ops->name, p->ops->summary);
    for (int32_t j = 0; j < p->ops->n_params; j++) {
        const ckv_param_def *d = &p->ops->params[j];
        printf("  %-12s ", d->key);
        if (d->kind == CKV_PARAM_CHOICE) {
            for (int c = 0; d->choices[c]; c++)
                printf("%s%s", c ? "|" : "", d->choices[c]);
            printf(" (default %s)", d->choices[d->def]);
        } else if (d->kind == CKV_PARAM_RATE) {
            printf("rate in (0, 1] (default %lld.%03lld)", (long long)d->def / 1000,
                   (long long)d->def % 1000);
        } else {
            printf("integer in [%lld, %lld] (default %lld)", (long long)d->lo, (long long)d->hi,
                   (long long)d->def);
        }
        printf(": %s\n", d->help);
    }
}

#if CKV_HAVE_CUDA
/* The policy's GPU kernels on the first GPU: the cache goes up, is
 * compressed there (the assign map tracked) and comes back. */
static ckv_status compress_gpu(const ckv_policy *p, ckv_cache *c, int32_t budget,
                               const ckv_qwindow *qw, int32_t *assign, ckv_error *err)
{
    int32_t n = 0;
    ckv_cuda_device dev;
    ckv_status st = ckv_cuda_device_count(&n, err);
    if (!st)
        st = ckv_cuda_device_query(0, &dev, err);
    if (st)
        return ckv_error_prefix(err, "no usable GPU");
    if (!ckv_gpu_policy_supported(p))
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "policy %s with these parameters has no GPU kernels", p->ops->name);
    ckv_gpu_cache *g;
    if ((st = ckv_gpu_cache_create_shape(&g, c->n_layer, c->n_head_kv, c->head_dim, c->capacity,
                                         c->score != NULL, CKV_KV_F32, err)))
        return st;
    ckv_gpu_policy_trace trace = {.assign = assign};
    if (!(st = ckv_gpu_cache_upload(g, c, err)) &&
        !(st = ckv_gpu_policy_compress(g, p, budget, qw, &trace, NULL, err)))
        st = ckv_gpu_cache_download(g, c, err);
    ckv_gpu_cache_free(g);
    return st;
}
#endif

/* One compression on the chosen device; auto falls back to the CPU (and
 * says why) when the GPU cannot run it. */
static ckv_status compress(const ckv_policy *p, cli_device device, ckv_cache *c, int32_t budget,
                           const ckv_qwindow *qw, int32_t *assign, ckv_error *err)
{
    if (device != CLI_DEVICE_CPU) {
#if CKV_HAVE_CUDA
        ckv_status st = compress_gpu(p, c, budget, qw, assign, err);
        if (!st || device == CLI_DEVICE_CUDA || st == CKV_ERR_ARG)
            return st ? ckv_error_prefix(err, "--device cuda") : CKV_OK;
        fprintf(stderr, "ckv compress: --device auto: %s; running on the CPU\n", err->msg);
        memset(err, 0, sizeof *err);
#else
        if (device == CLI_DEVICE_CUDA)
            return ckv_errorf(err, CKV_ERR_DEVICE,
                              "--device cuda: ckv was built without CUDA (configure with "
                              "-Dcuda=enabled)");
        fprintf(stderr, "ckv compress: --device auto: ckv was built without CUDA; running on the "
                        "CPU\n");
#endif
    }
    return ckv_policy_compress(p, c, budget, qw, assign, err);
}

int cmd_compress(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"policy", required_argument, 0, 'p'}, {"budget", required_argument, 0, 'b'},
        {"set", required_argument, 0, 's'},    {"in", required_argument, 0, 'i'},
        {"out", required_argument, 0, 'o'},    {"help", no_argument, 0, 'h'},
        {"device", required_argument, 0, 'd'},
        {0, 0, 0, 0},
    };
    const char *name = NULL, *budget_s = NULL, *in = NULL, *out = NULL, *sets[MAX_SETS];
    int n_sets = 0, want_help = 0, c;
    cli_device device = CLI_DEVICE_CPU;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'p': name = optarg; break;
        case 'b': budget_s = optarg; break;
        case 'i': in = optarg; break;
        case 'o': out = optarg; break;
        case 'h': want_help = 1; break;
        case 'd':
            if (!cli_device_parse("compress", optarg, &device))
                return CLI_USAGE;
            break;
        case 's':
            if (n_sets == MAX_SETS)
                return cli_usage_error("compress", "more than %d --set options", MAX_SETS);
            sets[n_sets++] = optarg;
            break;
        default: return cli_usage_error("compress", "invalid option");
        }
    }
    ckv_error err = {0};
    ckv_policy pol;
    if (want_help) {
        if (name && !ckv_policy_init(&pol, name, &err))
            help_policy(&pol);
        else
            help();
        return CLI_OK;
    }
    if (optind < argc)
        return cli_usage_error("compress", "unexpected argument '%s'", argv[optind]);
    if (!name || !in || !out)
        return cli_usage_error("compress", "--policy, --in and --out are required");
    if (ckv_policy_init(&pol, name, &err))
        return cli_usage_error("compress", "%s", err.msg);
    bool is_full = !strcmp(name, "full"), is_csm = !strcmp(name, "centroid");
    long long start_round = -1;
    for (int i = 0; i < n_sets; i++) {
        if (is_csm && !strncmp(sets[i], "round=", 6)) {
            if (!cli_int("compress", "--set round", sets[i] + 6, 0, INT32_MAX, &start_round))
                return CLI_USAGE;
            continue;
        }
        if (ckv_policy_set(&pol, sets[i], &err))
            return cli_usage_error("compress", "%s", err.msg);
    }
    ckv_budget budget = {.absolute = INT32_MAX};
    if (!budget_s && !is_full)
        return cli_usage_error("compress", "--budget is required for policy %s", name);
    if (budget_s && ckv_budget_parse(budget_s, &budget, &err))
        return cli_usage_error("compress", "%s", err.msg);
    int64_t entries;
    bool skip;
    char reason[256];
    /* An absolute budget is checked before any work. */
    if (budget.absolute &&
        ckv_budget_check(&pol, &budget, 0, &entries, &skip, reason, sizeof reason, &err))
        return cli_usage_error("compress", "%s", err.msg);

    ckv_kvdump d;
    if (ckv_kvfile_read(in, &d, &err))
        return cli_fail("compress", &err);
    int rc = CLI_FAIL;
    int32_t *assign = NULL;
    if (ckv_budget_check(&pol, &budget, d.prompt_tokens, &entries, &skip, reason, sizeof reason,
                         &err)) {
        rc = cli_fail("compress", &err);
        goto done;
    }
    if (skip) {
        fprintf(stderr, "ckv compress: skipped: %s\n", reason);
        rc = EXIT_SKIPPED;
        goto done;
    }
    if (start_round >= 0)
        d.cache.round = (int32_t)start_round;
    size_t lists = (size_t)d.cache.n_layer * d.cache.n_head_kv;
    assign = malloc(lists * (size_t)d.cache.capacity * sizeof *assign);
    if (!assign) {
        ckv_errorf(&err, CKV_ERR_NOMEM, "out of memory for the assign map");
        rc = cli_fail("compress", &err);
        goto done;
    }
    ckv_policy_assign_identity(&d.cache, assign);
    int64_t before = ckv_cache_entries(&d.cache);
    int32_t round0 = d.cache.round;
    ckv_qwindow qw = {d.q_window, d.n_head, d.w};
    if (compress(&pol, device, &d.cache, (int32_t)entries, &qw, assign, &err)) {
        ckv_error_prefix(&err, "%s: ", in);
        rc = cli_fail("compress", &err);
        goto done;
    }
    char params[1024];
    ckv_policy_describe(&pol, params, sizeof params);
    ckv_kvfile_extra x = {
        .q_window = d.q_window,
        .n_head = d.n_head,
        .w = d.w,
        .assign = assign,
        .assign_tokens = d.cache.capacity,
        .assign_stride = d.cache.capacity,
        .prompt_tokens = d.prompt_tokens,
        .model = d.model,
        .prompt = d.prompt,
        .policy = name,
        .params = params,
        .budget = budget_s ? budget_s : "none",
        .budget_entries = is_full && !budget_s ? 0 : entries,
    };
    if (ckv_kvfile_write(out, &d.cache, &x, &err)) {
        rc = cli_fail("compress", &err);
        goto done;
    }
    printf("%s: %lld -> %lld entries (budget %lld per list", name, (long long)before,
           (long long)ckv_cache_entries(&d.cache), (long long)x.budget_entries);
    if (is_csm && d.cache.round > round0)
        printf(", rounds %d..%d", round0, d.cache.round - 1);
    printf(")\n");
    rc = CLI_OK;
done:
    free(assign);
    ckv_kvdump_free(&d);
    return rc;
}
