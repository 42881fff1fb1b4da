#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opts.h"

int cli_session_open(cli_session *s, const char *cmd, const char *model_path, int threads)
{
    memset(s, 0, sizeof *s);
    ckv_error err = {0};
    const char *path = ckv_default_model_path(model_path);
    if (ckv_model_load(&s->model, path, &err))
        return cli_fail(cmd, &err);
    if (ckv_tokenizer_load(&s->tok, &s->model.gguf, &err) ||
        ckv_cpu_create(&s->cpu, &s->model, 256, threads, &err)) {
        ckv_error_prefix(&err, "%s", path);
        cli_session_close(s);
        return cli_fail(cmd, &err);
    }
    return CLI_OK;
}

void cli_session_close(cli_session *s)
{
    ckv_cpu_free(s->cpu);
    if (s->tok)
        ckv_tokenizer_free(s->tok);
    if (s->model.path)
        ckv_model_free(&s->model);
    memset(s, 0, sizeof *s);
}

int cli_prompt_ids(cli_session *s, const char *cmd, const char *prompt, bool chat,
                   const char *system, int32_t **ids, size_t *n)
{
    ckv_error err = {0};
    char *rendered = NULL;
    if (chat && ckv_chat_render(s->tok, system, prompt, &rendered, &err))
        return cli_fail(cmd, &err);
    const char *text = rendered ? rendered : prompt;
    ckv_status st = ckv_tokenize(s->tok, text, strlen(text), true, true, ids, n, &err);
    free(rendered);
    if (st)
        return cli_fail(cmd, &err);
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        ckv_errorf(&err, CKV_ERR_ARG, "the prompt is empty after tokenization");
        return cli_fail(cmd, &err);
    }
    return CLI_OK;
}

void cli_print_escaped(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\n')
            fputs("\\n", stdout);
        else if (ch == '\t')
            fputs("\\t", stdout);
        else if (ch == '\\')
            fputs("\\\\", stdout);
        else if (ch < 0x20 || ch == 0x7f)
            printf("\\x%02x", ch);
        else
            putchar(ch);
    }
}
