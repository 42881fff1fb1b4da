#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "opts.h"
#include "session.h"

static void help(void)
{
    printf("usage: ckv logits [--model M] (--prompt TEXT | --ids 'ID ID ...') [--top K]\n\n"
           "Runs the prompt through the decoder (CPU, or GPU with --device) and prints the K most likely next tokens:\n"
           "rank, id, logit and the token's text (escaped).\n\n"
           "  -m, --model PATH    GGUF model (default $CKV_MODEL, then models/SmolLM2-...)\n"
           "  -p, --prompt TEXT   prompt text (special-token strings are parsed)\n"
           "      --ids LIST      token ids instead of text (space or comma separated)\n"
           "      --chat          wrap the prompt in the model's chat format\n"
           "  -k, --top K         how many tokens to print (default 10)\n"
           "      --raw FILE      also write all logits as little-endian float32 to FILE\n"
           CLI_DEVICE_HELP CLI_KV_DTYPE_HELP
           "  -t, --threads N     CPU threads (default: all online CPUs)\n"
           "  -h, --help          this help\n");
}

static int parse_ids(const char *s, int32_t **out, size_t *n)
{
    size_t cap = 16, k = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return CLI_FAIL;
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX) {
            free(ids);
            return cli_usage_error("logits", "--ids: '%.20s' is not a token id", p);
        }
        if (k == cap) {
            int32_t *ni = realloc(ids, 2 * cap * sizeof *ids);
            if (!ni) {
                free(ids);
                return CLI_FAIL;
            }
            ids = ni;
            cap *= 2;
        }
        ids[k++] = (int32_t)v;
        p = end;
    }
    if (!k) {
        free(ids);
        return cli_usage_error("logits", "--ids: no ids given");
    }
    *out = ids;
    *n = k;
    return CLI_OK;
}

int cmd_logits(int argc, char **argv)
{
    static const struct option lo[] = {
        {"model", required_argument, 0, 'm'}, {"prompt", required_argument, 0, 'p'},
        {"ids", required_argument, 0, 'i'},   {"chat", no_argument, 0, 'c'},
        {"top", required_argument, 0, 'k'},   {"raw", required_argument, 0, 'r'},
        {"threads", required_argument, 0, 't'}, {"device", required_argument, 0, 'D'}, {"kv-dtype", required_argument, 0, 'K'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *model = NULL, *prompt = NULL, *ids_arg = NULL, *raw = NULL;
    bool chat = false;
    long long top = 10, threads = 0;
    cli_device device = CLI_DEVICE_CPU;
    ckv_kv_dtype kv_dtype = CKV_KV_F32;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:k:t:h", lo, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'p': prompt = optarg; break;
        case 'i': ids_arg = optarg; break;
        case 'c': chat = true; break;
        case 'r': raw = optarg; break;
        case 'k':
            if (!cli_int("logits", "--top", optarg, 1, 1 << 20, &top))
                return CLI_USAGE;
            break;
        case 't':
            if (!cli_int("logits", "--threads", optarg, 0, 1024, &threads))
                return CLI_USAGE;
            break;
        case 'D':
            if (!cli_device_parse("logits", optarg, &device))
                return CLI_USAGE;
            break;
        case 'K':
            if (!cli_kv_dtype_parse("logits", optarg, &kv_dtype))
                return CLI_USAGE;
            break;
        case 'h': help(); return CLI_OK;
        default: return cli_usage_error("logits", "invalid option");
        }
    }
    if (optind < argc)
        return cli_usage_error("logits", "unexpected argument '%s'", argv[optind]);
    if (!prompt == !ids_arg)
        return cli_usage_error("logits", "give exactly one of --prompt and --ids");
    if (chat && !prompt)
        return cli_usage_error("logits", "--chat needs --prompt");

    int32_t *ids = NULL;
    size_t n = 0;
    int rc;
    if (ids_arg && (rc = parse_ids(ids_arg, &ids, &n)))
        return rc;
    cli_session s;
    if ((rc = cli_session_open_on(&s, "logits", model, (int)threads, device))) {
        free(ids);
        return rc;
    }
    s.kv_dtype = kv_dtype;
    const ckv_config *cfg = &s.model.cfg;
    ckv_error err = {0};
    cli_seq seq = {0};
    float *logits = NULL;
    int32_t *order = NULL;
    if (prompt && (rc = cli_prompt_ids(&s, "logits", prompt, chat, NULL, &ids, &n)))
        goto done;
    rc = CLI_FAIL;
    logits = malloc((size_t)cfg->n_vocab * sizeof *logits);
    order = malloc((size_t)cfg->n_vocab * sizeof *order);
    if (!logits || !order) {
        ckv_errorf(&err, CKV_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (cli_seq_init(&s, &seq, (int32_t)n, false, &err) ||
        cli_seq_forward(&s, &seq, ids, (int32_t)n, NULL, logits, &err))
        goto fail;
    if (raw) {
        FILE *fp = fopen(raw, "wb");
        if (!fp || fwrite(logits, sizeof *logits, (size_t)cfg->n_vocab, fp) != (size_t)cfg->n_vocab ||
            fclose(fp)) {
            ckv_errorf(&err, CKV_ERR_IO, "%s: cannot write logits", raw);
            goto fail;
        }
    }
    /* Partial selection of the top K, highest logit first, ties to the lower id. */
    if (top > cfg->n_vocab)
        top = cfg->n_vocab;
    for (int32_t i = 0; i < cfg->n_vocab; i++)
        order[i] = i;
    for (long long r = 0; r < top; r++) {
        int32_t best = (int32_t)r;
        for (int32_t i = (int32_t)r + 1; i < cfg->n_vocab; i++)
            if (logits[order[i]] > logits[order[best]] ||
                (logits[order[i]] == logits[order[best]] && order[i] < order[best]))
                best = i;
        int32_t tmp = order[r];
        order[r] = order[best];
        order[best] = tmp;
        size_t bl;
        const char *b = ckv_token_bytes(s.tok, order[r], &bl);
        printf("%2lld %6d %10.4f  '", r + 1, order[r], logits[order[r]]);
        cli_print_escaped(b, bl);
        printf("'\n");
    }
    rc = CLI_OK;
    goto done;
fail:
    rc = cli_fail("logits", &err);
done:
    cli_seq_free(&seq);
    free(logits);
    free(order);
    free(ids);
    cli_session_close(&s);
    return rc;
}
