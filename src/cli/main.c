/* ckv: one binary, git-style subcommands. */
#include <stdio.h>
#include <string.h>

#include "ckv_config.h"
#include "commands.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"devices", cmd_devices, "list CUDA devices (when built with CUDA)"},
    {"generate", cmd_generate, "generate text from a prompt (greedy or sampled)"},
    {"logits", cmd_logits, "print the top next tokens and their logits"},
    {"dump-kv", cmd_dump_kv, "prefill a prompt and write its KV cache (HDF5) for compress"},
    {"info", cmd_info, "show a GGUF model's metadata, tokenizer and tensors"},
    {"synth", cmd_synth, "write a small random GGUF model (tests, fuzzing)"},
    {"score", cmd_score, "score predictions with LongBench and RULER metrics"},
    {"tokenize", cmd_tokenize, "encode text to token ids, or decode ids to text"},
    {"compress", cmd_compress, "apply a KV-cache policy to a dump (HDF5)"},
    {"analyze", cmd_analyze, "analyses of a dump (keys: similarity vs token distance)"},
    {"bench", cmd_bench, "benchmarks: compress (CPU), attention and decode (GPU)"},
    {"prepare", cmd_prepare, "build benchmark task packs (RULER, LongBench, official jsonl)"},
    {"sweep", cmd_sweep, "run a config's policy x budget x task grid to HDF5 results"},
    {"merge", cmd_merge, "join sweep results files (shards) of one config"},
    {"report", cmd_report, "tables (markdown/csv) and plots from sweep results"},
    {"perplexity", cmd_perplexity, "perplexity and fidelity of a compressed cache on the essays"},
};

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: ckv [--version] [--help] COMMAND [ARGS]\n\n"
            "centroidkv: long-context KV-cache compression research harness.\n\n"
            "Commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(fp, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(fp,
            "\nRun 'ckv COMMAND --help' for a command's options.\n"
            "The model defaults to $CKV_MODEL, then models/SmolLM2-135M-Instruct.Q4_1.gguf\n"
            "(fetched by scripts/get-model); --model PATH overrides both.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("ckv %s (%s)%s\n", CKV_VERSION, CKV_GIT_REV, CKV_HAVE_CUDA ? " +cuda" : "");
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "ckv: '%s' is not a command. See 'ckv --help'.\n", argv[1]);
    return 2;
}
