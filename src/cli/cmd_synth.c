/* ckv synth: write a small random GGUF model for tests and fuzzing. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "opts.h"
#include "quant.h"
#include "synth.h"

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: ckv synth --arch llama|qwen2|qwen3 --layers N --hidden H --heads N\n"
            "                 [--kv-heads N] [--head-dim D] [--ff F] [--vocab V] [--ctx C]\n"
            "                 [--seed S] [--type T] [--untied] [--rope-base B] [--rms-eps E]\n"
            "                 --out FILE\n\n"
            "Writes a random, valid GGUF v3 model with every tensor the architecture needs\n"
            "(qwen2: q/k/v biases; qwen3: per-head q/k norms) and a tiny GPT-2 byte-level BPE\n"
            "tokenizer (256 byte tokens, a few merges, <|im_start|>/<|im_end|>, ChatML template).\n"
            "Matrices ~ N(0, --std), norm weights ~ 1 + N(0, 0.1) (F32), all from --seed.\n\n"
            "  --arch A        llama, qwen2 or qwen3 (required)\n"
            "  --layers N      number of blocks (required)\n"
            "  --hidden H      embedding width (required)\n"
            "  --heads N       query heads (required)\n"
            "  --kv-heads N    key/value heads, divides --heads (default: --heads)\n"
            "  --head-dim D    per-head width, even (default: hidden / heads); when it differs,\n"
            "                  attention.key_length/value_length are written\n"
            "  --ff F          feed-forward width (default: 4 * hidden)\n"
            "  --vocab V       vocabulary size, >= %u; extra ids are <|reserved_N|> (default 512)\n"
            "  --ctx C         context_length (default 2048)\n"
            "  --seed S        random seed (default 1)\n"
            "  --type T        matrix type: f32, f16, bf16, q8_0, q4_0 or q4_1 (default f32);\n"
            "                  quantised types need hidden, heads*head_dim and ff to be\n"
            "                  multiples of 32\n"
            "  --untied        write output.weight (default: tied to token_embd.weight)\n"
            "  --rope-base B   rope.freq_base (default 10000)\n"
            "  --rms-eps E     attention.layer_norm_rms_epsilon (default 1e-5)\n"
            "  --std S         standard deviation of matrix and bias entries (default 0.02;\n"
            "                  larger values give sharper attention for reference checks)\n"
            "  --out FILE      output path, written atomically (required)\n"
            "  -h, --help      show this help\n",
            ckv_synth_min_vocab());
}

static bool parse_type(const char *s, uint32_t *t)
{
    static const struct { const char *name; uint32_t type; } types[] = {
        {"f32", GGML_F32}, {"f16", GGML_F16}, {"bf16", GGML_BF16},
        {"q8_0", GGML_Q8_0}, {"q4_0", GGML_Q4_0}, {"q4_1", GGML_Q4_1}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(s, types[i].name)) {
            *t = types[i].type;
            return true;
        }
    return false;
}

int cmd_synth(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"arch", required_argument, NULL, 'a'},    {"layers", required_argument, NULL, 'l'},
        {"hidden", required_argument, NULL, 'H'},  {"heads", required_argument, NULL, 'n'},
        {"kv-heads", required_argument, NULL, 'k'}, {"head-dim", required_argument, NULL, 'd'},
        {"ff", required_argument, NULL, 'f'},      {"vocab", required_argument, NULL, 'v'},
        {"ctx", required_argument, NULL, 'c'},     {"seed", required_argument, NULL, 's'},
        {"type", required_argument, NULL, 't'},    {"untied", no_argument, NULL, 'u'},
        {"rope-base", required_argument, NULL, 'r'}, {"rms-eps", required_argument, NULL, 'e'},
        {"std", required_argument, NULL, 'S'},
        {"out", required_argument, NULL, 'o'},     {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *cmd = "synth", *out = NULL;
    ckv_synth_opts o;
    ckv_synth_defaults(&o);
    o.arch = NULL;
    const long long dim_max = 1 << 20;
    long long v;
    double x;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        const char *opt = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        switch (c) {
        case 'a':
            o.arch = optarg;
            break;
        case 'l':
            if (!cli_int(cmd, "--layers", optarg, 1, 4096, &v))
                return CLI_USAGE;
            o.n_layer = (uint32_t)v;
            break;
        case 'H':
            if (!cli_int(cmd, "--hidden", optarg, 1, dim_max, &v))
                return CLI_USAGE;
            o.n_embd = (uint32_t)v;
            break;
        case 'n':
            if (!cli_int(cmd, "--heads", optarg, 1, 4096, &v))
                return CLI_USAGE;
            o.n_head = (uint32_t)v;
            break;
        case 'k':
            if (!cli_int(cmd, "--kv-heads", optarg, 1, 4096, &v))
                return CLI_USAGE;
            o.n_head_kv = (uint32_t)v;
            break;
        case 'd':
            if (!cli_int(cmd, "--head-dim", optarg, 2, 65536, &v))
                return CLI_USAGE;
            o.head_dim = (uint32_t)v;
            break;
        case 'f':
            if (!cli_int(cmd, "--ff", optarg, 1, dim_max, &v))
                return CLI_USAGE;
            o.n_ff = (uint32_t)v;
            break;
        case 'v':
            if (!cli_int(cmd, "--vocab", optarg, ckv_synth_min_vocab(), dim_max, &v))
                return CLI_USAGE;
            o.n_vocab = (uint32_t)v;
            break;
        case 'c':
            if (!cli_int(cmd, "--ctx", optarg, 1, 1 << 24, &v))
                return CLI_USAGE;
            o.n_ctx = (uint32_t)v;
            break;
        case 's':
            if (!cli_int(cmd, "--seed", optarg, 0, INT64_MAX, &v))
                return CLI_USAGE;
            o.seed = (uint64_t)v;
            break;
        case 't':
            if (!parse_type(optarg, &o.type))
                return cli_usage_error(cmd, "--type: '%s' is not f32, f16, bf16, q8_0, q4_0 or q4_1",
                                       optarg);
            break;
        case 'u':
            o.untied = true;
            break;
        case 'r':
            if (!cli_double(cmd, "--rope-base", optarg, 1.0, 1e12, &x))
                return CLI_USAGE;
            o.rope_freq_base = (float)x;
            break;
        case 'e':
            if (!cli_double(cmd, "--rms-eps", optarg, 1e-12, 1.0, &x))
                return CLI_USAGE;
            o.rms_eps = (float)x;
            break;
        case 'S':
            if (!cli_double(cmd, "--std", optarg, 1e-6, 10.0, &x))
                return CLI_USAGE;
            o.std = (float)x;
            break;
        case 'o':
            out = optarg;
            break;
        case 'h':
            usage(stdout);
            return CLI_OK;
        case ':':
            return cli_usage_error(cmd, "%s needs a value", opt);
        default:
            return cli_usage_error(cmd, "unknown option '%s'", opt);
        }
    }
    if (optind < argc)
        return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    if (!o.arch)
        return cli_usage_error(cmd, "--arch is required");
    if (!o.n_layer || !o.n_embd || !o.n_head)
        return cli_usage_error(cmd, "--layers, --hidden and --heads are required");
    if (!out)
        return cli_usage_error(cmd, "--out is required");
    if (!o.n_head_kv)
        o.n_head_kv = o.n_head;
    if (!o.n_ff)
        o.n_ff = 4 * o.n_embd;
    ckv_error err = {0};
    ckv_status st = ckv_synth_write(&o, out, &err);
    if (st == CKV_ERR_ARG)
        return cli_usage_error(cmd, "%s", err.msg);
    if (st)
        return cli_fail(cmd, &err);
    return CLI_OK;
}
