/* Helpers of the `ckv bench` subcommands (bench.h). */
#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "opts.h"

bool bench_int_list(const char *opt, const char *s, long long lo, long long hi, int32_t *out,
                    int *n, int max)
{
    char *copy = strdup(s);
    if (!copy) {
        cli_usage_error("bench", "out of memory");
        return false;
    }
    *n = 0;
    bool ok = true;
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok && ok;
         tok = strtok_r(NULL, ",", &save)) {
        long long v;
        if (*n == max) {
            cli_usage_error("bench", "%s: more than %d values", opt, max);
            ok = false;
        } else if ((ok = cli_int("bench", opt, tok, lo, hi, &v))) {
            out[(*n)++] = (int32_t)v;
        }
    }
    if (ok && *n == 0) {
        cli_usage_error("bench", "%s: no values in '%s'", opt, s);
        ok = false;
    }
    free(copy);
    return ok;
}

char *bench_command_line(int argc, char **argv)
{
    static const char prefix[] = "ckv bench";
    size_t len = sizeof prefix;
    for (int i = 0; i < argc; i++)
        len += strlen(argv[i]) + 1;
    char *s = malloc(len);
    if (!s)
        return NULL;
    strcpy(s, prefix);
    for (int i = 0; i < argc; i++) {
        strcat(s, " ");
        strcat(s, argv[i]);
    }
    return s;
}

void bench_utc_now(char buf[32])
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

bool bench_make_parent(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path)
        return true;
    char *dir = strndup(path, (size_t)(slash - path));
    bool ok = dir && (mkdir(dir, 0777) == 0 || errno == EEXIST);
    free(dir);
    return ok;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}
