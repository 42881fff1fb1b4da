#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "kvfile.h"
#include "opts.h"
#include "session.h"
#include "util.h"

static void help(void)
{
    printf("usage: ckv dump-kv [--model M] (--prompt TEXT | --prompt-file F) --out kv.h5\n\n"
           "Prefills the prompt on the CPU with the full cache and writes the cache as HDF5:\n"
           "k, v [layers, kv_heads, tokens, head_dim] (post-RoPE keys), degree, length,\n"
           "q_window [layers, heads, W, head_dim] (the last W queries, for SnapKV),\n"
           "h2o_score [layers, kv_heads, tokens] (attention accumulated over every prompt\n"
           "query, for H2O), and attributes prompt_tokens, csm_round (0), model, prompt.\n"
           "`ckv compress` reads it.\n\n"
           "  -m, --model PATH      GGUF model (default $CKV_MODEL, then models/SmolLM2-...)\n"
           "  -p, --prompt TEXT     the prompt (special-token strings are parsed)\n"
           "  -f, --prompt-file F   read the prompt from a file instead\n"
           "      --chat            wrap the prompt in the model's chat format\n"
           "  -w, --window W        query window for SnapKV (default 32; at most the prompt)\n"
           "  -o, --out FILE        output HDF5 file (written atomically)\n"
           "  -t, --threads N       CPU threads (default: all online CPUs)\n"
           "  -h, --help            this help\n");
}

int cmd_dump_kv(int argc, char **argv)
{
    static const struct option lo[] = {
        {"model", required_argument, 0, 'm'},  {"prompt", required_argument, 0, 'p'},
        {"prompt-file", required_argument, 0, 'f'}, {"chat", no_argument, 0, 'c'},
        {"window", required_argument, 0, 'w'}, {"out", required_argument, 0, 'o'},
        {"threads", required_argument, 0, 't'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *model = NULL, *prompt = NULL, *prompt_file = NULL, *out = NULL;
    bool chat = false;
    long long window = 32, threads = 0;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:f:w:o:t:h", lo, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'p': prompt = optarg; break;
        case 'f': prompt_file = optarg; break;
        case 'c': chat = true; break;
        case 'o': out = optarg; break;
        case 'w':
            if (!cli_int("dump-kv", "--window", optarg, 1, 1 << 20, &window))
                return CLI_USAGE;
            break;
        case 't':
            if (!cli_int("dump-kv", "--threads", optarg, 0, 1024, &threads))
                return CLI_USAGE;
            break;
        case 'h': help(); return CLI_OK;
        default: return cli_usage_error("dump-kv", "invalid option");
        }
    }
    if (optind < argc)
        return cli_usage_error("dump-kv", "unexpected argument '%s'", argv[optind]);
    if (!prompt == !prompt_file)
        return cli_usage_error("dump-kv", "give exactly one of --prompt and --prompt-file");
    if (!out)
        return cli_usage_error("dump-kv", "--out is required");

    ckv_error err = {0};
    char *file_text = NULL;
    if (prompt_file) {
        if (ckv_read_file(prompt_file, &file_text, NULL, &err))
            return cli_fail("dump-kv", &err);
        prompt = file_text;
    }
    cli_session s;
    int rc = cli_session_open(&s, "dump-kv", model, (int)threads);
    if (rc) {
        free(file_text);
        return rc;
    }
    const ckv_config *cfg = &s.model.cfg;
    int32_t *ids = NULL;
    size_t n = 0;
    float *qwin = NULL;
    ckv_cache cache = {0};
    if ((rc = cli_prompt_ids(&s, "dump-kv", prompt, chat, NULL, &ids, &n)))
        goto done;
    rc = CLI_FAIL;
    if ((size_t)window > n)
        window = (long long)n;
    qwin = malloc((size_t)cfg->n_layer * cfg->n_head * (size_t)window * cfg->head_dim *
                  sizeof *qwin);
    if (!qwin) {
        ckv_errorf(&err, CKV_ERR_NOMEM, "out of memory for the query window");
        goto fail;
    }
    ckv_forward_opts fo = {.q_window = (int32_t)window, .q_window_out = qwin};
    if (ckv_cache_init(&cache, cfg->n_layer, cfg->n_head_kv, cfg->head_dim, (int32_t)n, true,
                       &err) ||
        ckv_cpu_forward(s.cpu, &cache, ids, (int32_t)n, &fo, NULL, &err))
        goto fail;
    ckv_kvfile_extra x = {.q_window = qwin,
                          .n_head = cfg->n_head,
                          .w = (int32_t)window,
                          .prompt_tokens = (int64_t)n,
                          .model = s.model.path,
                          .prompt = prompt};
    if (ckv_kvfile_write(out, &cache, &x, &err))
        goto fail;
    fprintf(stderr, "%s: %zu tokens, %d layers x %d kv heads x %d dims, window %lld\n", out, n,
            cfg->n_layer, cfg->n_head_kv, cfg->head_dim, window);
    rc = CLI_OK;
    goto done;
fail:
    rc = cli_fail("dump-kv", &err);
done:
    ckv_cache_free(&cache);
    free(qwin);
    free(ids);
    free(file_text);
    cli_session_close(&s);
    return rc;
}
