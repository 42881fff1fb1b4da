/* Helpers shared by the subcommands: strict number parsing that names the
 * option and value on error, and uniform error exits. Only the CLI prints. */
#ifndef CKV_CLI_OPTS_H
#define CKV_CLI_OPTS_H

#include <stdbool.h>
#include <stdint.h>

#include "status.h"

/* Exit statuses. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2, CLI_INTERRUPTED = 130 };

/* Prints "ckv CMD: message" to stderr and returns CLI_FAIL. */
int cli_fail(const char *cmd, const ckv_error *err);
/* Prints "ckv CMD: <formatted>" and "Try 'ckv CMD --help'." and returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Whole-string parses with range checks; print a usage error and return
 * false on failure. */
bool cli_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi,
             long long *out);
bool cli_double(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out);

/* The model to load: the --model value if given, else $CKV_MODEL, else
 * models/SmolLM2-135M-Instruct.Q4_1.gguf (relative to the working directory). */
const char *cli_model_path(const char *opt);

#endif
