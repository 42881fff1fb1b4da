#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "gguf.h"
#include "opts.h"
#include "tokenizer.h"
#include "util.h"

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: ckv tokenize [OPTIONS] TEXT\n"
            "       ckv tokenize [OPTIONS] --file FILE\n"
            "       ckv tokenize [--model PATH] --decode ID... | --decode -\n\n"
            "Prints the token ids of TEXT, space-separated, or with --decode the exact\n"
            "bytes that the given ids stand for (no newline added).\n\n"
            "Options:\n"
            "  --model PATH   GGUF model whose tokenizer to use (default $CKV_MODEL, then\n"
            "                 models/SmolLM2-135M-Instruct.Q4_1.gguf)\n"
            "  --file FILE    read the text from FILE (\"-\" for stdin) instead of TEXT\n"
            "  --no-special   encode special-token strings such as <|im_end|> as plain text\n"
            "                 (by default they become their token ids)\n"
            "  --bos          prepend the BOS token if the model asks for one\n"
            "                 (tokenizer.ggml.add_bos_token)\n"
            "  --chat         wrap the text as one user turn in the model's chat format, with\n"
            "                 the generation prompt (and the template's default system prompt)\n"
            "  --system TEXT  system message for --chat\n"
            "  --decode       the arguments are token ids to decode; \"-\" reads\n"
            "                 whitespace-separated ids from stdin\n"
            "  -h, --help     show this help\n");
}

static int out_of_memory(void)
{
    ckv_error err;
    ckv_errorf(&err, CKV_ERR_NOMEM, "out of memory");
    return cli_fail("tokenize", &err);
}

/* Ids from the arguments, or from stdin when the only argument is "-". */
static int read_ids(int argc, char **argv, int32_t n_vocab, int32_t **ids, size_t *n)
{
    char *stdin_buf = NULL;
    size_t cap = 64;
    *n = 0;
    *ids = malloc(cap * sizeof **ids);
    if (!*ids)
        return out_of_memory();
    char **words = argv;
    int n_words = argc;
    char *save = NULL;
    if (argc == 1 && !strcmp(argv[0], "-")) {
        ckv_error err = {0};
        size_t len;
        if (ckv_read_file("/dev/stdin", &stdin_buf, &len, &err)) {
            free(*ids);
            return cli_fail("tokenize", &err);
        }
        n_words = 0;
    }
    for (int i = 0;; i++) {
        const char *w;
        if (stdin_buf)
            w = strtok_r(i ? NULL : stdin_buf, " \t\r\n", &save);
        else
            w = i < n_words ? words[i] : NULL;
        if (!w)
            break;
        long long v;
        if (!cli_int("tokenize", "--decode", w, 0, n_vocab - 1, &v)) {
            free(stdin_buf);
            free(*ids);
            return CLI_USAGE;
        }
        if (*n == cap) {
            cap *= 2;
            int32_t *p = realloc(*ids, cap * sizeof *p);
            if (!p) {
                free(stdin_buf);
                free(*ids);
                return out_of_memory();
            }
            *ids = p;
        }
        (*ids)[(*n)++] = (int32_t)v;
    }
    free(stdin_buf);
    return CLI_OK;
}

static int decode(const ckv_tokenizer *t, int argc, char **argv)
{
    int32_t *ids;
    size_t n;
    int rc = read_ids(argc, argv, ckv_tokenizer_vocab(t), &ids, &n);
    if (rc)
        return rc;
    ckv_error err = {0};
    char *text;
    size_t len;
    if (ckv_detokenize(t, ids, n, &text, &len, &err)) {
        free(ids);
        return cli_fail("tokenize", &err);
    }
    free(ids);
    rc = fwrite(text, 1, len, stdout) == len && fflush(stdout) == 0 ? CLI_OK : CLI_FAIL;
    if (rc)
        fprintf(stderr, "ckv tokenize: write failed: %s\n", strerror(errno));
    free(text);
    return rc;
}

static int encode(const ckv_tokenizer *t, const char *text, size_t len, bool bos, bool special,
                  bool chat, const char *system)
{
    ckv_error err = {0};
    char *rendered = NULL;
    if (chat) {
        if (memchr(text, 0, len))
            return cli_usage_error("tokenize", "--chat: the text contains a NUL byte");
        if (ckv_chat_render(t, system, text, &rendered, &err))
            return cli_fail("tokenize", &err);
        text = rendered;
        len = strlen(rendered);
    }
    int32_t *ids;
    size_t n;
    ckv_status st = ckv_tokenize(t, text, len, bos, special, &ids, &n, &err);
    free(rendered);
    if (st)
        return cli_fail("tokenize", &err);
    for (size_t i = 0; i < n; i++)
        printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    free(ids);
    return fflush(stdout) == 0 ? CLI_OK : CLI_FAIL;
}

int cmd_tokenize(int argc, char **argv)
{
    enum { OPT_MODEL = 256, OPT_FILE, OPT_NO_SPECIAL, OPT_BOS, OPT_CHAT, OPT_SYSTEM, OPT_DECODE };
    static const struct option longopts[] = {
        {"model", required_argument, NULL, OPT_MODEL},
        {"file", required_argument, NULL, OPT_FILE},
        {"no-special", no_argument, NULL, OPT_NO_SPECIAL},
        {"bos", no_argument, NULL, OPT_BOS},
        {"chat", no_argument, NULL, OPT_CHAT},
        {"system", required_argument, NULL, OPT_SYSTEM},
        {"decode", no_argument, NULL, OPT_DECODE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *model = NULL, *file = NULL, *system = NULL;
    bool special = true, bos = false, chat = false, dec = false;
    int c;
    optind = 1;
    opterr = 0;
    /* "+": stop at the first non-option, so ids and text may start with '-'. */
    while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_MODEL: model = optarg; break;
        case OPT_FILE: file = optarg; break;
        case OPT_NO_SPECIAL: special = false; break;
        case OPT_BOS: bos = true; break;
        case OPT_CHAT: chat = true; break;
        case OPT_SYSTEM: system = optarg; break;
        case OPT_DECODE: dec = true; break;
        case 'h': usage(stdout); return CLI_OK;
        default:
            return cli_usage_error("tokenize", "unknown option or missing value: '%s'",
                                   argv[optind - 1]);
        }
    }
    int rest = argc - optind;
    if (dec && (file || chat || bos || system || !special))
        return cli_usage_error("tokenize", "--decode takes only --model and ids");
    if (dec && rest == 0)
        return cli_usage_error("tokenize", "--decode needs ids (or \"-\" for stdin)");
    if (!dec && rest != (file ? 0 : 1))
        return cli_usage_error("tokenize", file ? "--file and TEXT are exclusive"
                                                : "expected exactly one TEXT argument");
    if (system && !chat)
        return cli_usage_error("tokenize", "--system needs --chat");

    ckv_error err = {0};
    char *text = NULL;
    size_t len = 0;
    if (file && ckv_read_file(!strcmp(file, "-") ? "/dev/stdin" : file, &text, &len, &err))
        return cli_fail("tokenize", &err);
    gguf_file f;
    ckv_tokenizer *t = NULL;
    const char *path = cli_model_path(model);
    if (gguf_open(&f, path, &err)) {
        free(text);
        return cli_fail("tokenize", &err);
    }
    ckv_status st = ckv_tokenizer_load(&t, &f, &err);
    gguf_close(&f);
    if (st) {
        free(text);
        ckv_error_prefix(&err, "%s", path);
        return cli_fail("tokenize", &err);
    }
    int rc;
    if (dec)
        rc = decode(t, rest, argv + optind);
    else if (file)
        rc = encode(t, text, len, bos, special, chat, system);
    else
        rc = encode(t, argv[optind], strlen(argv[optind]), bos, special, chat, system);
    free(text);
    ckv_tokenizer_free(t);
    return rc;
}
