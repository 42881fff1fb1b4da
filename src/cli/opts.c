#include "opts.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int cli_fail(const char *cmd, const ckv_error *err)
{
    fprintf(stderr, "ckv %s: %s\n", cmd, err->msg[0] ? err->msg : ckv_status_name(err->status));
    return CLI_FAIL;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "ckv %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'ckv %s --help'.\n", cmd);
    return CLI_USAGE;
}

bool cli_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi,
             long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) {
        cli_usage_error(cmd, "%s: '%s' is not an integer", opt, s);
        return false;
    }
    if (v < lo || v > hi) {
        cli_usage_error(cmd, "%s: %lld is out of range [%lld, %lld]", opt, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_double(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        cli_usage_error(cmd, "%s: '%s' is not a finite number", opt, s);
        return false;
    }
    if (v < lo || v > hi) {
        cli_usage_error(cmd, "%s: %g is out of range [%g, %g]", opt, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

const char *cli_model_path(const char *opt)
{
    if (opt)
        return opt;
    const char *env = getenv("CKV_MODEL");
    return env && *env ? env : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}
