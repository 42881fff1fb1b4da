/* ckv prepare: task packs (HDF5) for a model. `ruler` generates RULER
 * prompts fitted to the model's own tokenizer (and/or writes RULER's
 * official jsonl); `longbench` reads the LongBench files of the data dir;
 * `longbench-jsonl` and `ruler-jsonl` import one official jsonl file. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "datadir.h"
#include "gguf.h"
#include "longbench.h"
#include "model.h"
#include "opts.h"
#include "pack.h"
#include "ruler.h"
#include "ruler_jsonl.h"
#include "ruler_import.h"
#include "ruler_pack.h"
#include "sample_pack.h"
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

/* ---- imports: longbench, longbench-jsonl, ruler-jsonl ---- */

typedef enum { KIND_LONGBENCH, KIND_LONGBENCH_JSONL, KIND_RULER_JSONL } import_kind;

static const char *const kind_names[] = {"longbench", "longbench-jsonl", "ruler-jsonl"};

static void import_usage(FILE *fp, import_kind k)
{
    if (k == KIND_LONGBENCH)
        fprintf(fp,
                "usage: ckv prepare longbench [options] --out PACK.h5\n\n"
                "Prepares the LongBench v1 files of the data dir (DATA/longbench/{task}.jsonl,\n"
                "as in LongBench's data.zip) as pred.py does: the dataset's prompt template\n"
                "(DATA/longbench/config), middle truncation to --max-length tokens, then the\n"
                "model's chat format except for trec, triviaqa, samsum, lsht, lcc and\n"
                "repobench-p. A task whose file is missing is reported on stderr and skipped.\n\n"
                "  --tasks LIST      comma-separated dataset names (LongBench-E: qasper_e, ...),\n"
                "                    or 'all': the 21 v1 datasets (default: all)\n");
    else if (k == KIND_LONGBENCH_JSONL)
        fprintf(fp,
                "usage: ckv prepare longbench-jsonl --in FILE [options] --out PACK.h5\n\n"
                "Imports one LongBench jsonl file (fields input, context, answers, length,\n"
                "dataset, language, all_classes, _id) and prepares it as 'ckv prepare\n"
                "longbench' does.\n\n"
                "  --in FILE         the jsonl file\n"
                "  --task NAME       dataset of every record (default: each record's 'dataset')\n");
    else
        fprintf(fp,
                "usage: ckv prepare ruler-jsonl --in FILE [options] --out PACK.h5\n\n"
                "Imports one file in RULER's official jsonl format (index, input, outputs,\n"
                "length, optional answer_prefix). The prompt is input + answer_prefix as\n"
                "RULER sends it (no chat format added, no truncation); tokens to generate\n"
                "and metric come from DATA/ruler/templates.json for the task's type.\n\n"
                "  --in FILE         the jsonl file\n"
                "  --task NAME       the RULER task (default: the directory of\n"
                "                    {task}/validation.jsonl, else the file name {task}.jsonl)\n");
    fprintf(fp,
            "  --model PATH      GGUF model the pack is for (default: $CKV_MODEL, then\n"
            "                    models/SmolLM2-135M-Instruct.Q4_1.gguf)\n"
            "  --data-dir DIR    data dir holding %s (default:\n"
            "                    $CKV_DATA_DIR, then ../shared/data when it exists)\n"
            "  --samples N       at most N samples per task, from the start (default: all)\n",
            k == KIND_RULER_JSONL ? "ruler/templates.json" : "longbench/");
    if (k != KIND_RULER_JSONL)
        fprintf(fp,
                "  --max-length L    prompt budget in tokens: longer prompts keep their first\n"
                "                    and last L/2 tokens (default: the largest multiple of 500\n"
                "                    not above the model's context length - 512: 7500 at 8K)\n"
                "  --no-chat         no chat format for any dataset (what pred.py does for\n"
                "                    models it does not list)\n");
    fprintf(fp,
            "  --out PACK.h5     output: task pack (token ids with the context/question\n"
            "                    split, prompt text, answers, classes, task, metric, max new\n"
            "                    tokens, first-line flag, model path and tokenizer hash),\n"
            "                    written atomically\n"
            "  -h, --help        show this help\n");
}

typedef struct {
    const char *model, *data_dir, *in, *task, *out;
    char *tasks[MAX_LIST];
    int n_tasks;
    long long samples, max_length;
    bool no_chat;
} import_opts;

static int import_parse(import_kind k, int argc, char **argv, import_opts *o, char *tasks_buf)
{
    static const struct option longopts[] = {
        {"model", required_argument, 0, 'm'},    {"data-dir", required_argument, 0, 'd'},
        {"tasks", required_argument, 0, 't'},    {"in", required_argument, 0, 'i'},
        {"task", required_argument, 0, 'T'},     {"samples", required_argument, 0, 'n'},
        {"max-length", required_argument, 0, 'L'}, {"no-chat", no_argument, 0, 'C'},
        {"out", required_argument, 0, 'o'},      {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *cmd = kind_names[k];
    strcpy(tasks_buf, "all");
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        /* options that belong to another kind */
        bool foreign = (c == 't' && k != KIND_LONGBENCH) ||
                       ((c == 'i' || c == 'T') && k == KIND_LONGBENCH) ||
                       ((c == 'L' || c == 'C') && k == KIND_RULER_JSONL);
        if (foreign)
            return cli_usage_error(CMD, "%s: option '%s' does not apply", cmd, argv[optind - 1]);
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'd': o->data_dir = optarg; break;
        case 'i': o->in = optarg; break;
        case 'T': o->task = optarg; break;
        case 'o': o->out = optarg; break;
        case 'C': o->no_chat = true; break;
        case 't':
            if (strlen(optarg) >= 4096)
                return cli_usage_error(CMD, "--tasks: list too long");
            strcpy(tasks_buf, optarg);
            break;
        case 'n':
            if (!cli_int(CMD, "--samples", optarg, 1, 100000000, &o->samples))
                return CLI_USAGE;
            break;
        case 'L':
            if (!cli_int(CMD, "--max-length", optarg, 2, 1 << 24, &o->max_length))
                return CLI_USAGE;
            break;
        case 'h': import_usage(stdout, k); return -1;
        default:
            return cli_usage_error(CMD, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
    if (!o->out)
        return cli_usage_error(CMD, "%s: an output is required: --out PACK.h5", cmd);
    if (k != KIND_LONGBENCH && !o->in)
        return cli_usage_error(CMD, "%s: an input is required: --in FILE", cmd);
    if (o->task && k == KIND_LONGBENCH_JSONL && !ckv_longbench_find(o->task))
        return cli_usage_error(CMD, "--task: unknown LongBench dataset '%s'", o->task);
    if (k != KIND_LONGBENCH)
        return CLI_OK;
    if (!strcmp(tasks_buf, "all")) {
        size_t n;
        const ckv_longbench_dataset *d = ckv_longbench_datasets(&n);
        o->n_tasks = (int)n;
        for (size_t i = 0; i < n; i++)
            o->tasks[i] = (char *)d[i].name;
        return CLI_OK;
    }
    o->n_tasks = split_list(tasks_buf, o->tasks, MAX_LIST);
    if (o->n_tasks <= 0)
        return cli_usage_error(CMD, "--tasks: empty or more than %d entries", MAX_LIST);
    for (int i = 0; i < o->n_tasks; i++)
        if (!ckv_longbench_find(o->tasks[i]))
            return cli_usage_error(CMD, "--tasks: unknown LongBench dataset '%s'", o->tasks[i]);
    return CLI_OK;
}

/* Appends one file's samples to the pack and prints a summary line. */
static ckv_status import_file(import_kind k, const import_opts *o, const void *cfg,
                              const char *path, const char *task, const ckv_tokenizer *tok,
                              const ckv_sample_pack_opts *po, ckv_pack *pack, ckv_error *err)
{
    ckv_sample *v = NULL;
    size_t n = 0;
    ckv_status st = k == KIND_RULER_JSONL
                        ? ckv_ruler_load(cfg, path, task, (size_t)o->samples, &v, &n, err)
                        : ckv_longbench_load(cfg, path, task, (size_t)o->samples, &v, &n, err);
    size_t first = pack->n_samples, n_trunc = 0, n_chat = 0;
    for (size_t i = 0; i < n && !st; i++) {
        bool truncated;
        st = ckv_pack_add_sample(pack, tok, &v[i], (uint32_t)i, po, &truncated, err);
        n_trunc += truncated;
        n_chat += po->chat && v[i].chat_template;
    }
    if (!st) {
        uint32_t lo = UINT32_MAX, hi = 0;
        for (size_t i = first; i < pack->n_samples; i++) {
            uint32_t t = pack->samples[i].n_tokens;
            lo = t < lo ? t : lo;
            hi = t > hi ? t : hi;
        }
        printf("%s: %zu samples, %u..%u tokens", n ? v[0].task : path, n, lo, hi);
        if (po->max_length > 0)
            printf(", %zu truncated to %d, %zu with chat format", n_trunc, po->max_length, n_chat);
        printf(" (%s, %d new tokens%s)\n", n ? ckv_metric_name(v[0].metric) : "-",
               n ? v[0].max_new_tokens : 0, n && v[0].first_line ? ", first line scored" : "");
    }
    ckv_samples_free(v, n);
    return st;
}

static int prepare_import(import_kind k, int argc, char **argv)
{
    import_opts o = {0};
    char tasks_buf[4096];
    int rc = import_parse(k, argc, argv, &o, tasks_buf);
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
    ckv_pack pack = {0};
    ckv_longbench_config lb = {0};
    ckv_ruler_config rl = {0};
    ckv_config mc;
    if (gguf_open(&gf, model, &err))
        return cli_fail(CMD, &err);
    rc = CLI_FAIL;
    if (ckv_tokenizer_load(&tok, &gf, &err) || ckv_config_from_gguf(&mc, &gf, &err) ||
        ckv_pack_init(&pack, model, tok, &err))
        goto out;
    if (k == KIND_RULER_JSONL ? ckv_ruler_config_load(dir, &rl, &err)
                              : ckv_longbench_config_load(dir, &lb, &err))
        goto out;
    ckv_sample_pack_opts po = {.max_length = (int32_t)o.max_length, .chat = !o.no_chat};
    if (k == KIND_RULER_JSONL) {
        po = (ckv_sample_pack_opts){0};
    } else if (!po.max_length && !(po.max_length = ckv_longbench_default_max_length(mc.n_ctx))) {
        ckv_errorf(&err, CKV_ERR_ARG, "%s: context length %d leaves no default prompt budget; "
                   "pass --max-length", model, mc.n_ctx);
        goto out;
    }
    const void *cfg = k == KIND_RULER_JSONL ? (const void *)&rl : (const void *)&lb;
    int done = 0, skipped = 0;
    if (k != KIND_LONGBENCH) {
        if (import_file(k, &o, cfg, o.in, o.task, tok, &po, &pack, &err))
            goto out;
        done++;
    }
    for (int i = 0; k == KIND_LONGBENCH && i < o.n_tasks; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/longbench/%s.jsonl", dir, o.tasks[i]);
        if (access(path, F_OK)) {
            fprintf(stderr, "ckv prepare: skipped %s: %s not found\n", o.tasks[i], path);
            skipped++;
            continue;
        }
        if (import_file(k, &o, cfg, path, o.tasks[i], tok, &po, &pack, &err))
            goto out;
        done++;
    }
    if (!done) {
        ckv_errorf(&err, CKV_ERR_IO, "no task prepared: none of the files is in %s/longbench", dir);
        goto out;
    }
    if (ckv_pack_write(&pack, o.out, &err))
        goto out;
    printf("wrote %s: %zu samples, %d tasks, %d skipped\n", o.out, pack.n_samples, done, skipped);
    rc = CLI_OK;
out:
    ckv_longbench_config_free(&lb);
    ckv_ruler_config_free(&rl);
    ckv_pack_free(&pack);
    ckv_tokenizer_free(tok);
    gguf_close(&gf);
    return rc == CLI_OK ? CLI_OK : cli_fail(CMD, &err);
}

int cmd_prepare(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *fp = argc < 2 ? stderr : stdout;
        fprintf(fp, "usage: ckv prepare KIND [options]\n\n"
                    "Builds benchmark task packs for the model. Kinds (see 'ckv prepare KIND\n"
                    "--help'):\n"
                    "  ruler            RULER's 13 synthetic tasks, generated\n"
                    "  longbench        the LongBench v1 files of the data dir\n"
                    "  longbench-jsonl  one LongBench jsonl file\n"
                    "  ruler-jsonl      one file in RULER's official jsonl format\n");
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    if (!strcmp(argv[1], "ruler"))
        return prepare_ruler(argc - 1, argv + 1);
    for (int k = 0; k < 3; k++)
        if (!strcmp(argv[1], kind_names[k]))
            return prepare_import((import_kind)k, argc - 1, argv + 1);
    return cli_usage_error(CMD, "unknown kind '%s' (expected: ruler, longbench, longbench-jsonl, "
                                "ruler-jsonl)", argv[1]);
}
