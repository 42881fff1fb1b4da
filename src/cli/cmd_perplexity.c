/* ckv perplexity: perplexity of the model on the RULER essays
 * (PaulGrahamEssays.json) with the full cache, and, with --policy, with a
 * compressed cache under teacher forcing, with KL(full || compressed) and
 * top-1 agreement per step (src/teacher_force.h). */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "datadir.h"
#include "opts.h"
#include "policy.h"
#include "session.h"
#include "teacher_force.h"

#define CMD "perplexity"
#define MAX_SETS 16

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: ckv perplexity [options]\n\n"
            "Teacher-forces the first --tokens tokens of the RULER essays\n"
            "(DATA/ruler/PaulGrahamEssays.json, BOS first when the model adds one): the\n"
            "first --prefix tokens are prefilled, then every later token is predicted and\n"
            "scored. Prints the perplexity of those predictions with the full cache and,\n"
            "with --policy, with a cache compressed to the budget after the prefill and on\n"
            "the policy's decode interval (../shared/docs/policies.md), plus the mean and\n"
            "largest per-step KL(full || compressed) in nats and the top-1 agreement.\n"
            "Only predictions made after the compression are scored.\n\n"
            "  --model PATH      GGUF model (default: $CKV_MODEL, then\n"
            "                    models/SmolLM2-135M-Instruct.Q4_1.gguf)\n"
            "  --data-dir DIR    data dir holding ruler/PaulGrahamEssays.json (default:\n"
            "                    $CKV_DATA_DIR, then ../shared/data when it exists)\n"
            "  --tokens N        tokens of essay text used (default: 2048)\n"
            "  --prefix P        tokens prefilled before scoring (default: N/2)\n"
            "  --policy NAME     compress with this policy (ckv compress --help lists them)\n"
            "  --budget X        entries kept per (layer, head): 25%%, 0.25 or a count\n"
            "                    (required with --policy)\n"
            "  --set KEY=VALUE   policy parameter (repeatable)\n"
            "  -t, --threads N   CPU threads (default: all online CPUs)\n"
            "  -h, --help        show this help\n");
}

/* The essays' text tokenized; *ids malloc'd. */
static ckv_status essay_tokens(const char *dir, const ckv_tokenizer *tok, int32_t **ids,
                               size_t *n, ckv_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/ruler/PaulGrahamEssays.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return ckv_errorf(err, CKV_ERR_IO, "%s: %s", path, je.text);
    json_t *text = json_object_get(root, "text");
    ckv_status st = json_is_string(text)
                        ? ckv_tokenize(tok, json_string_value(text), json_string_length(text),
                                       true, false, ids, n, err)
                        : ckv_errorf(err, CKV_ERR_FORMAT, "%s: field 'text': expected a string",
                                     path);
    json_decref(root);
    return st;
}

int cmd_perplexity(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"model", required_argument, 0, 'm'},  {"data-dir", required_argument, 0, 'd'},
        {"tokens", required_argument, 0, 'n'}, {"prefix", required_argument, 0, 'p'},
        {"policy", required_argument, 0, 'P'}, {"budget", required_argument, 0, 'b'},
        {"set", required_argument, 0, 's'},    {"threads", required_argument, 0, 't'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0},
    };
    const char *model = NULL, *data_dir = NULL, *policy = NULL, *budget = NULL;
    const char *sets[MAX_SETS];
    int n_sets = 0;
    long long n_tokens = 2048, prefix = 0, threads = 0;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "t:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'd': data_dir = optarg; break;
        case 'P': policy = optarg; break;
        case 'b': budget = optarg; break;
        case 's':
            if (n_sets == MAX_SETS)
                return cli_usage_error(CMD, "--set: more than %d", MAX_SETS);
            sets[n_sets++] = optarg;
            break;
        case 'n':
            if (!cli_int(CMD, "--tokens", optarg, 3, 1 << 20, &n_tokens))
                return CLI_USAGE;
            break;
        case 'p':
            if (!cli_int(CMD, "--prefix", optarg, 1, 1 << 20, &prefix))
                return CLI_USAGE;
            break;
        case 't':
            if (!cli_int(CMD, "--threads", optarg, 0, 1024, &threads))
                return CLI_USAGE;
            break;
        case 'h': usage(stdout); return CLI_OK;
        default: return cli_usage_error(CMD, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
    if (!prefix)
        prefix = n_tokens / 2;
    if (prefix > n_tokens - 2)
        return cli_usage_error(CMD, "--prefix %lld must leave at least 2 of the %lld tokens",
                               prefix, n_tokens);
    if (!policy != !budget)
        return cli_usage_error(CMD, "--policy and --budget go together");
    if (n_sets && !policy)
        return cli_usage_error(CMD, "--set needs --policy");
    ckv_error err = {0};
    ckv_policy pol;
    ckv_tf_opts o = {.prefix = (int32_t)prefix};
    if (policy) {
        if (ckv_policy_init(&pol, policy, &err) || ckv_budget_parse(budget, &o.budget, &err))
            return cli_usage_error(CMD, "%s", err.msg);
        for (int i = 0; i < n_sets; i++)
            if (ckv_policy_set(&pol, sets[i], &err))
                return cli_usage_error(CMD, "%s", err.msg);
        o.policy = &pol;
    }
    const char *dir = ckv_data_dir(data_dir);
    if (!dir)
        return cli_usage_error(CMD, "no data dir: pass --data-dir or set CKV_DATA_DIR "
                                    "(../shared/data does not exist)");
    cli_session s;
    int rc = cli_session_open(&s, CMD, model, (int)threads);
    if (rc)
        return rc;
    int32_t *ids = NULL;
    size_t n = 0;
    ckv_tf_result r;
    rc = CLI_FAIL;
    if (essay_tokens(dir, s.tok, &ids, &n, &err))
        goto out;
    if ((long long)n < n_tokens) {
        ckv_errorf(&err, CKV_ERR_ARG, "the essays have %zu tokens, fewer than --tokens %lld", n,
                   n_tokens);
        goto out;
    }
    if (ckv_teacher_force(s.cpu, &s.model, ids, (int32_t)n_tokens, &o, &r, &err))
        goto out;
    printf("essays: %lld tokens, prefix %lld, %lld predictions scored\n", n_tokens, prefix,
           (long long)r.s.n);
    printf("full cache: perplexity %.4f\n", r.s.ppl_full);
    if (policy) {
        char desc[512];
        ckv_policy_describe(&pol, desc, sizeof desc);
        if (r.skipped) {
            printf("%s budget %s: skipped: %s\n", policy, budget, r.skip_reason);
        } else {
            printf("%s budget %s (%lld entries; %s): perplexity %.4f\n", policy, budget,
                   (long long)r.budget_entries, desc, r.s.ppl_comp);
            printf("  KL(full || compressed): mean %.6f nats, max %.6f; top-1 agreement %.2f%%\n",
                   r.s.kl_mean, r.s.kl_max, 100 * r.s.top1);
            printf("  %lld compressions, peak %d entries per (layer, head)\n",
                   (long long)r.compressions, r.peak_len);
        }
    }
    rc = CLI_OK;
out:
    free(ids);
    cli_session_close(&s);
    return rc == CLI_OK ? CLI_OK : cli_fail(CMD, &err);
}
