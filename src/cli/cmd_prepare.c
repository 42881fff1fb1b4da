/* ckv prepare ruler: generates RULER prompts fitted to the model's own
 * tokenizer and writes them as a task pack (HDF5) and/or in RULER's
 * official jsonl format. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "datadir.h"
#include "gguf.h"
#include "model.h"
#include "opts.h"
#include "pack.h"
#include "ruler.h"
#include "ruler_jsonl.h"
#include "ruler_pack.h"
#include "token_count.h"
#include "tokenizer.h"

#define CMD "prepare"
#define MAX_LIST 64

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: ckv prepare ruler [options] (--out PACK.h5 | --jsonl FILE | both)\n\n"
            "Generates RULER's synthetic tasks (NVIDIA/RULER scripts/data/synthetic) with the\n"
            "official templates, each prompt fitted so that its tokens with the model's\n"
            "tokenizer plus the task's tokens to generate stay within the length. Seeded and\n"
            "deterministic (our own RNG: prompts follow RULER's construction but are not\n"
            "RULER's Python random stream). A task whose data is missing (qa_2 needs\n"
            "HotpotQA) is reported on stderr and skipped.\n\n"
            "  --model PATH      GGUF model whose tokenizer measures lengths (default:\n"
            "                    $CKV_MODEL, then models/SmolLM2-135M-Instruct.Q4_1.gguf)\n"
            "  --tasks LIST      comma-separated task names, or 'all' (default: all):\n"
            "                    niah_single_1,niah_single_2,niah_single_3,niah_multikey_1,\n"
            "                    niah_multikey_2,niah_multikey_3,niah_multivalue,\n"
            "                    niah_multiquery,vt,cwe,fwe,qa_1,qa_2\n"
            "  --lengths LIST    comma-separated target lengths in tokens (default: 4096)\n"
            "  --samples N       samples per task and length (default: 500, RULER's)\n"
            "  --seed S          random seed (default: 42, RULER's)\n"
            "  --data-dir DIR    data (ruler/, squad/, hotpotqa/) (default: $CKV_DATA_DIR,\n"
            "                    then ../shared/data when it exists)\n"
            "  --out PACK.h5     output: task pack (token ids with the context/question\n"
            "                    split, prompt text, answers, task, metric, max new tokens,\n"
            "                    model path and tokenizer hash), written atomically\n"
            "  --jsonl FILE      output: one RULER jsonl line per sample (index, input,\n"
            "                    outputs, length, length_w_model_temp, answer_prefix, plus\n"
            "                    task and max_seq_length), written atomically\n"
            "  -h, --help        show this help\n");
}

/* Splits a comma-separated list in place. */
static int split_list(char *s, char **items, int max)
{
    int n = 0;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        if (n == max)
            return -1;
        items[n++] = tok;
    }
    return n;
}

typedef struct {
    const char *model, *data_dir, *jsonl, *out;
    char *tasks[MAX_LIST];
    int n_tasks;
    long long lengths[MAX_LIST];
    int n_lengths;
    long long samples, seed;
} prep_opts;

static int parse(int argc, char **argv, prep_opts *o, char *tasks_buf, char *lengths_buf)
{
    static const struct option longopts[] = {
        {"model", required_argument, 0, 'm'},   {"tasks", required_argument, 0, 't'},
        {"lengths", required_argument, 0, 'l'}, {"samples", required_argument, 0, 'n'},
        {"seed", required_argument, 0, 's'},    {"data-dir", required_argument, 0, 'd'},
        {"jsonl", required_argument, 0, 'j'},   {"out", required_argument, 0, 'o'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    strcpy(tasks_buf, "all");
    strcpy(lengths_buf, "4096");
    o->samples = 500;
    o->seed = 42;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'd': o->data_dir = optarg; break;
        case 'j': o->jsonl = optarg; break;
        case 'o': o->out = optarg; break;
        case 't':
        case 'l':
            if (strlen(optarg) >= 4096)
                return cli_usage_error(CMD, "--%s: list too long", c == 't' ? "tasks" : "lengths");
            strcpy(c == 't' ? tasks_buf : lengths_buf, optarg);
            break;
        case 'n':
            if (!cli_int(CMD, "--samples", optarg, 1, 1000000, &o->samples))
                return CLI_USAGE;
            break;
        case 's':
            if (!cli_int(CMD, "--seed", optarg, 0, INT64_MAX, &o->seed))
                return CLI_USAGE;
            break;
        case 'h': usage(stdout); return -1;
        default:
            return cli_usage_error(CMD, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
    if (!o->jsonl && !o->out)
        return cli_usage_error(CMD, "an output is required: --out PACK.h5 and/or --jsonl FILE");
    if (!strcmp(tasks_buf, "all")) {
        o->n_tasks = (int)ckv_ruler_n_tasks();
        for (int i = 0; i < o->n_tasks; i++)
            o->tasks[i] = (char *)ckv_ruler_task_name((size_t)i);
    } else {
        o->n_tasks = split_list(tasks_buf, o->tasks, MAX_LIST);
        for (int i = 0; i < o->n_tasks; i++) {
            size_t k = 0;
            while (k < ckv_ruler_n_tasks() && strcmp(ckv_ruler_task_name(k), o->tasks[i]))
                k++;
            if (k == ckv_ruler_n_tasks())
                return cli_usage_error(CMD, "--tasks: unknown task '%s'", o->tasks[i]);
        }
    }
    if (o->n_tasks <= 0)
        return cli_usage_error(CMD, "--tasks: empty or more than %d entries", MAX_LIST);
    char *items[MAX_LIST];
    o->n_lengths = split_list(lengths_buf, items, MAX_LIST);
    if (o->n_lengths <= 0)
        return cli_usage_error(CMD, "--lengths: empty or more than %d entries", MAX_LIST);
    for (int i = 0; i < o->n_lengths; i++)
        if (!cli_int(CMD, "--lengths", items[i], 256, 1 << 22, &o->lengths[i]))
            return CLI_USAGE;
    return CLI_OK;
}

static int prepare_ruler(int argc, char **argv)
{
    prep_opts o = {0};
    char tasks_buf[4096], lengths_buf[4096];
    int rc = parse(argc, argv, &o, tasks_buf, lengths_buf);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    const char *dir = ckv_data_dir(o.data_dir);
    if (!dir)
        return cli_usage_error(CMD, "no data dir: pass --data-dir or set CKV_DATA_DIR "
                                    "(../shared/data does not exist)");
    ckv_error err = {0};
    const char *model = ckv_default_model_path(o.model);
    gguf_file gf;
    ckv_tokenizer *tok = NULL;
    ckv_ruler *r = NULL;
    ckv_pack pack = {0};
    FILE *fp = NULL;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", o.jsonl ? o.jsonl : "");
    if (gguf_open(&gf, model, &err))
        return cli_fail(CMD, &err);
    rc = CLI_FAIL;
    if (ckv_tokenizer_load(&tok, &gf, &err) || ckv_ruler_open(&r, dir, &err) ||
        (o.out && ckv_pack_init(&pack, model, tok, &err)))
        goto out;
    if (o.jsonl && !(fp = fopen(tmp, "w"))) {
        ckv_errorf(&err, CKV_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    ckv_token_counter tc = ckv_tokenizer_counter(tok);
    int skipped = 0, written = 0;
    for (int li = 0; li < o.n_lengths; li++) {
        for (int ti = 0; ti < o.n_tasks; ti++) {
            ckv_ruler_set set;
            if (ckv_ruler_generate(r, o.tasks[ti], (uint32_t)o.lengths[li], (uint32_t)o.samples,
                                   (uint64_t)o.seed, &tc, &set, &err))
                goto out;
            if (set.skipped) {
                fprintf(stderr, "ckv prepare: skipped %s at %lld: %s\n", set.task, o.lengths[li],
                        set.skip_reason);
                skipped++;
                continue;
            }
            uint32_t lo = UINT32_MAX, hi = 0;
            for (size_t i = 0; i < set.n_samples; i++) {
                lo = set.samples[i].length < lo ? set.samples[i].length : lo;
                hi = set.samples[i].length > hi ? set.samples[i].length : hi;
            }
            ckv_status st = fp ? ckv_ruler_write_jsonl(fp, tmp, &set, &err) : CKV_OK;
            if (!st && o.out)
                st = ckv_pack_add_ruler(&pack, tok, &set, &err);
            printf("%s %lld: %zu samples, length %u..%u (%s, %u new tokens)\n", set.task,
                   o.lengths[li], set.n_samples, lo, hi, set.metric, set.max_new_tokens);
            ckv_ruler_set_free(&set);
            if (st)
                goto out;
            written++;
        }
    }
    if (o.out) {
        if (ckv_pack_write(&pack, o.out, &err))
            goto out;
        printf("wrote %s: %zu samples\n", o.out, pack.n_samples);
    }
    if (fp) {
        int bad = fclose(fp);
        fp = NULL;
        if (bad) {
            ckv_errorf(&err, CKV_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
            remove(tmp);
            goto out;
        }
        if (rename(tmp, o.jsonl)) {
            ckv_errorf(&err, CKV_ERR_IO, "%s: cannot rename to %s: %s", tmp, o.jsonl,
                       strerror(errno));
            goto out;
        }
        printf("wrote %s\n", o.jsonl);
    }
    printf("%d task-length sets, %d skipped\n", written, skipped);
    rc = CLI_OK;
out:
    if (fp) {
        fclose(fp);
        remove(tmp);
    }
    ckv_pack_free(&pack);
    ckv_ruler_close(r);
    ckv_tokenizer_free(tok);
    gguf_close(&gf);
    return rc == CLI_OK ? CLI_OK : cli_fail(CMD, &err);
}

int cmd_prepare(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *fp = argc < 2 ? stderr : stdout;
        fprintf(fp, "usage: ckv prepare ruler [options]\n\n"
                    "Builds benchmark prompts for the model. Kinds:\n"
                    "  ruler   RULER's 13 synthetic tasks (see 'ckv prepare ruler --help')\n");
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    if (!strcmp(argv[1], "ruler"))
        return prepare_ruler(argc - 1, argv + 1);
    return cli_usage_error(CMD, "unknown kind '%s' (expected: ruler)", argv[1]);
}
