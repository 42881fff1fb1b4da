/* `ckv bench`: runs the benchmark its first argument names. */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "commands.h"
#include "opts.h"

static void usage(FILE *fp)
{
    fprintf(fp, "usage: ckv bench BENCHMARK [options]\n\n"
                "Benchmarks:\n"
                "  compress   every policy's compression time of one cache (CPU or GPU)\n"
                "  attention  the attention kernel and GEMMs vs copy and matrix ceilings (GPU)\n"
                "  decode     decode steps of a model shape with random weights (GPU)\n"
                "  generate   prefill and greedy decode end to end beside transformers\n"
                "             `generate` on the same prompts (GPU)\n"
                "  throughput sequences and tokens/s under a KV memory cap, full vs each\n"
                "             policy and budget, compression included (GPU)\n\n"
                "Run 'ckv bench BENCHMARK --help' for its options.\n");
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    if (!strcmp(argv[1], "compress"))
        return bench_compress(argc - 1, argv + 1);
    if (!strcmp(argv[1], "attention"))
        return bench_attention(argc - 1, argv + 1);
    if (!strcmp(argv[1], "decode"))
        return bench_decode(argc - 1, argv + 1);
    if (!strcmp(argv[1], "generate"))
        return bench_generate(argc - 1, argv + 1);
    if (!strcmp(argv[1], "throughput"))
        return bench_throughput(argc - 1, argv + 1);
    return cli_usage_error("bench",
                           "unknown benchmark '%s' (known: compress, attention, decode, generate, throughput)",
                           argv[1]);
}
