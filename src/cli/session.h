/* Loading a model, its tokenizer and the CPU decoder for a command, with
 * errors printed the same way everywhere. */
#ifndef CKV_CLI_SESSION_H
#define CKV_CLI_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu.h"
#include "model.h"
#include "tokenizer.h"

typedef struct {
    ckv_model model;
    ckv_tokenizer *tok;
    ckv_cpu *cpu;
} cli_session;

/* Returns CLI_OK, or prints "ckv CMD: ..." and returns CLI_FAIL. */
int cli_session_open(cli_session *s, const char *cmd, const char *model_path, int threads);
void cli_session_close(cli_session *s);

/* Turns a prompt into ids: with chat, renders the model's chat format around
 * it first. Special-token strings in the text are parsed as special tokens. */
int cli_prompt_ids(cli_session *s, const char *cmd, const char *prompt, bool chat,
                   const char *system, int32_t **ids, size_t *n);

/* Prints bytes with C-style escapes for non-printable ones. */
void cli_print_escaped(const char *s, size_t n);

#endif
