/* ckv info: a GGUF model's general and architecture keys, tokenizer summary
 * and tensor table, read straight from the metadata. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "gguf.h"
#include "model.h"
#include "opts.h"
#include "quant.h"

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: ckv info [MODEL] [--model MODEL]\n\n"
            "Prints a GGUF model's general.* keys, its architecture's hyperparameter keys\n"
            "(<arch>.*), a tokenizer summary and the tensor table (name, type, shape, bytes).\n\n"
            "  MODEL, --model MODEL  GGUF file (default: $CKV_MODEL, then\n"
            "                        models/SmolLM2-135M-Instruct.Q4_1.gguf)\n"
            "  -h, --help            show this help\n");
}

/* Prints at most `max` bytes of s, escaping anything unprintable. */
static void print_escaped(gguf_str s, uint64_t max)
{
    uint64_t n = s.len < max ? s.len : max;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c == 0x7F)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    if (n < s.len)
        printf("... (%" PRIu64 " bytes)", s.len);
}

static uint64_t rd_le(const uint8_t *p, unsigned n)
{
    uint64_t x = 0;
    for (unsigned i = 0; i < n; i++)
        x |= (uint64_t)p[i] << (8 * i);
    return x;
}

static void print_value(const gguf_kv *kv)
{
    const uint8_t *p = kv->data;
    uint64_t u = 0;
    if (kv->type != GGUF_STRING && kv->type != GGUF_ARRAY)
        u = rd_le(p, (unsigned)kv->nbytes);
    switch (kv->type) {
    case GGUF_UINT8: case GGUF_UINT16: case GGUF_UINT32: case GGUF_UINT64:
        printf("%" PRIu64, u);
        break;
    case GGUF_INT8: printf("%d", (int8_t)u); break;
    case GGUF_INT16: printf("%d", (int16_t)u); break;
    case GGUF_INT32: printf("%" PRId32, (int32_t)u); break;
    case GGUF_INT64: printf("%" PRId64, (int64_t)u); break;
    case GGUF_BOOL: printf("%s", u ? "true" : "false"); break;
    case GGUF_FLOAT32: {
        uint32_t b = (uint32_t)u;
        float v;
        memcpy(&v, &b, 4);
        printf("%g", (double)v);
        break;
    }
    case GGUF_FLOAT64: {
        double v;
        memcpy(&v, &u, 8);
        printf("%g", v);
        break;
    }
    case GGUF_STRING: {
        gguf_str s = {(const char *)p + 8, rd_le(p, 8)};
        putchar('"');
        print_escaped(s, 120);
        putchar('"');
        break;
    }
    default: /* array */
        printf("[%" PRIu64 " x %s]", kv->arr_n, gguf_value_type_name(kv->arr_type));
        break;
    }
}

static bool has_prefix(gguf_str s, const char *prefix)
{
    size_t n = strlen(prefix);
    return s.len >= n && !memcmp(s.ptr, prefix, n);
}

static void print_keys(const gguf_file *f, const char *prefix)
{
    for (uint64_t k = 0; k < f->n_kv; k++) {
        const gguf_kv *kv = &f->kv[k];
        if (!has_prefix(kv->key, prefix))
            continue;
        printf("  ");
        print_escaped(kv->key, 120);
        printf(" = ");
        print_value(kv);
        putchar('\n');
    }
}

static void print_tokenizer(const gguf_file *f)
{
    ckv_error err;
    gguf_str s;
    int64_t id;
    printf("tokenizer:\n  model: ");
    if (!gguf_get_str(f, "tokenizer.ggml.model", &s, &err))
        print_escaped(s, 64);
    else
        printf("(none)");
    printf("\n  pre: ");
    if (!gguf_get_str(f, "tokenizer.ggml.pre", &s, &err))
        print_escaped(s, 64);
    else
        printf("(none)");
    const gguf_kv *tok = gguf_find(f, "tokenizer.ggml.tokens");
    const gguf_kv *mer = gguf_find(f, "tokenizer.ggml.merges");
    printf("\n  vocab: %" PRIu64 " tokens\n", tok && tok->type == GGUF_ARRAY ? tok->arr_n : 0);
    printf("  merges: %" PRIu64 "\n", mer && mer->type == GGUF_ARRAY ? mer->arr_n : 0);
    const char *ids[] = {"bos", "eos"};
    for (int k = 0; k < 2; k++) {
        char key[64];
        snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", ids[k]);
        if (!gguf_get_int(f, key, &id, &err))
            printf("  %s: %" PRId64 "\n", ids[k], id);
        else
            printf("  %s: (none)\n", ids[k]);
    }
    if (!gguf_get_str(f, "tokenizer.chat_template", &s, &err))
        printf("  chat template: yes (%" PRIu64 " bytes)\n", s.len);
    else
        printf("  chat template: no\n");
}

static void print_tensors(const gguf_file *f)
{
    size_t w = 4;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].name.len > w)
            w = (size_t)f->tensors[i].name.len;
    printf("tensors (%" PRIu64 "):\n  %-*s  %-7s  %-24s  %s\n", f->n_tensors, (int)w, "name",
           "type", "shape", "bytes");
    uint64_t total = 0, params = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        char shape[128];
        int n = snprintf(shape, sizeof shape, "[");
        for (uint32_t d = 0; d < t->n_dims; d++)
            n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%" PRIu64, d ? ", " : "", t->ne[d]);
        snprintf(shape + n, sizeof shape - (size_t)n, "]");
        printf("  %-*.*s  %-7s  %-24s  %" PRIu64 "\n", (int)w, (int)t->name.len, t->name.ptr,
               ggml_type_name(t->type), shape, t->nbytes);
        total += t->nbytes;
        params += t->nelem;
    }
    printf("total: %" PRIu64 " parameters, %" PRIu64 " bytes (%.1f MiB)\n", params, total,
           (double)total / (1 << 20));
}

int cmd_info(int argc, char **argv)
{
    static const struct option longopts[] = {{"model", required_argument, NULL, 'm'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *cmd = "info", *model = NULL;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm':
            model = optarg;
            break;
        case 'h':
            usage(stdout);
            return CLI_OK;
        case ':':
            return cli_usage_error(cmd, "%s needs a value", argv[optind - 1]);
        default:
            return cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) {
        if (model || argc - optind > 1)
            return cli_usage_error(cmd, "give one model, as MODEL or --model");
        model = argv[optind];
    }
    const char *path = ckv_default_model_path(model);
    gguf_file f;
    ckv_error err = {0};
    if (gguf_open(&f, path, &err))
        return cli_fail(cmd, &err);
    gguf_str arch = {"", 0};
    const gguf_kv *akv = gguf_find(&f, "general.architecture");
    if (akv && akv->type == GGUF_STRING)
        gguf_get_str(&f, "general.architecture", &arch, &err);
    printf("file: %s (%zu bytes), GGUF v%u, alignment %u, %" PRIu64 " keys, %" PRIu64
           " tensors\n",
           path, f.size, f.version, f.alignment, f.n_kv, f.n_tensors);
    printf("general:\n");
    print_keys(&f, "general.");
    if (arch.len && arch.len < 64) {
        char prefix[80];
        snprintf(prefix, sizeof prefix, "%.*s.", (int)arch.len, arch.ptr);
        printf("hyperparameters (%s*):\n", prefix);
        print_keys(&f, prefix);
    } else {
        printf("hyperparameters: general.architecture missing\n");
    }
    print_tokenizer(&f);
    print_tensors(&f);
    gguf_close(&f);
    return CLI_OK;
}
