#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "opts.h"
#include "sampler.h"
#include "session.h"
#include "util.h"

static void help(void)
{
    printf("usage: ckv generate [--model M] --prompt TEXT [options]\n\n"
           "Generates text with the full KV cache and streams it to stdout; a\n"
           "final line on stderr gives prompt and generation speed in tokens per second.\n\n"
           "  -m, --model PATH       GGUF model (default $CKV_MODEL, then models/SmolLM2-...)\n"
           "  -p, --prompt TEXT      the prompt (special-token strings are parsed)\n"
           "  -f, --prompt-file F    read the prompt from a file instead\n"
           "      --chat             wrap the prompt in the model's chat format\n"
           "      --system TEXT      system message for --chat\n"
           "  -n, --max-tokens N     stop after N new tokens (default 128); also stops at EOS\n"
           "      --temperature T    sample with temperature T > 0 (default 0: greedy)\n"
           "      --top-p P          nucleus sampling mass in (0, 1] (default 0.95)\n"
           "      --seed S           sampling seed (default 0)\n"
           CLI_DEVICE_HELP CLI_KV_DTYPE_HELP
           "  -t, --threads N        CPU threads (default: all online CPUs)\n"
           "  -h, --help             this help\n");
}

int cmd_generate(int argc, char **argv)
{
    static const struct option lo[] = {
        {"model", required_argument, 0, 'm'},   {"prompt", required_argument, 0, 'p'},
        {"prompt-file", required_argument, 0, 'f'}, {"chat", no_argument, 0, 'c'},
        {"system", required_argument, 0, 'S'},  {"max-tokens", required_argument, 0, 'n'},
        {"temperature", required_argument, 0, 'T'}, {"top-p", required_argument, 0, 'P'},
        {"seed", required_argument, 0, 's'},    {"threads", required_argument, 0, 't'},
        {"device", required_argument, 0, 'D'}, {"kv-dtype", required_argument, 0, 'K'}, {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    const char *model = NULL, *prompt = NULL, *prompt_file = NULL, *system = NULL;
    bool chat = false;
    long long max_tokens = 128, seed = 0, threads = 0;
    double temperature = 0, top_p = 0.95;
    cli_device device = CLI_DEVICE_CPU;
    ckv_kv_dtype kv_dtype = CKV_KV_F32;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:f:n:t:h", lo, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'p': prompt = optarg; break;
        case 'f': prompt_file = optarg; break;
        case 'c': chat = true; break;
        case 'S': system = optarg; break;
        case 'n':
            if (!cli_int("generate", "--max-tokens", optarg, 1, 1 << 24, &max_tokens))
                return CLI_USAGE;
            break;
        case 'T':
            if (!cli_double("generate", "--temperature", optarg, 0, 100, &temperature))
                return CLI_USAGE;
            break;
        case 'P':
            if (!cli_double("generate", "--top-p", optarg, 1e-6, 1, &top_p))
                return CLI_USAGE;
            break;
        case 's':
            if (!cli_int("generate", "--seed", optarg, 0, INT64_MAX, &seed))
                return CLI_USAGE;
            break;
        case 't':
            if (!cli_int("generate", "--threads", optarg, 0, 1024, &threads))
                return CLI_USAGE;
            break;
        case 'D':
            if (!cli_device_parse("generate", optarg, &device))
                return CLI_USAGE;
            break;
        case 'K':
            if (!cli_kv_dtype_parse("generate", optarg, &kv_dtype))
                return CLI_USAGE;
            break;
        case 'h': help(); return CLI_OK;
        default: return cli_usage_error("generate", "invalid option");
        }
    }
    if (optind < argc)
        return cli_usage_error("generate", "unexpected argument '%s'", argv[optind]);
    if (!prompt == !prompt_file)
        return cli_usage_error("generate", "give exactly one of --prompt and --prompt-file");
    if (system && !chat)
        return cli_usage_error("generate", "--system needs --chat");

    ckv_error err = {0};
    char *file_text = NULL;
    if (prompt_file) {
        if (ckv_read_file(prompt_file, &file_text, NULL, &err))
            return cli_fail("generate", &err);
        prompt = file_text;
    }
    cli_session s;
    int rc = cli_session_open_on(&s, "generate", model, (int)threads, device);
    if (rc) {
        free(file_text);
        return rc;
    }
    s.kv_dtype = kv_dtype;
    int32_t *ids = NULL;
    size_t n = 0;
    float *logits = NULL;
    cli_seq seq = {0};
    ckv_sampler smp = {0};
    const ckv_config *cfg = &s.model.cfg;
    if ((rc = cli_prompt_ids(&s, "generate", prompt, chat, system, &ids, &n)))
        goto done;
    rc = CLI_FAIL;
    if ((long long)n + max_tokens > cfg->n_ctx)
        fprintf(stderr, "ckv generate: warning: %zu prompt + %lld new tokens exceed the model's "
                "training context %d\n", n, max_tokens, cfg->n_ctx);
    logits = malloc((size_t)cfg->n_vocab * sizeof *logits);
    if (!logits) {
        ckv_errorf(&err, CKV_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (cli_seq_init(&s, &seq, (int32_t)(n + (size_t)max_tokens), false, &err) ||
        ckv_sampler_init(&smp, cfg->n_vocab, (float)temperature, (float)top_p, (uint64_t)seed,
                         &err))
        goto fail;
    double t0 = ckv_now();
    if (cli_seq_forward(&s, &seq, ids, (int32_t)n, NULL, logits, &err))
        goto fail;
    double t1 = ckv_now();
    long long gen = 0;
    for (; gen < max_tokens; gen++) {
        int32_t tok = ckv_sample(&smp, logits);
        if (ckv_token_is_eog(s.tok, tok))
            break;
        size_t bl;
        const char *b = ckv_token_bytes(s.tok, tok, &bl);
        fwrite(b, 1, bl, stdout);
        fflush(stdout);
        if (gen + 1 < max_tokens && cli_seq_forward(&s, &seq, &tok, 1, NULL, logits, &err))
            goto fail;
    }
    double t2 = ckv_now();
    printf("\n");
    fflush(stdout);
    cli_seq_report(&s, &seq, "generate");
    fprintf(stderr, "prompt: %zu tokens, %.1f tok/s; generation: %lld tokens, %.1f tok/s\n", n,
            (double)n / (t1 - t0), gen, gen > 0 ? (double)gen / (t2 - t1) : 0.0);
    rc = CLI_OK;
    goto done;
fail:
    rc = cli_fail("generate", &err);
done:
    ckv_sampler_free(&smp);
    cli_seq_free(&seq);
    free(logits);
    free(ids);
    free(file_text);
    cli_session_close(&s);
    return rc;
}
