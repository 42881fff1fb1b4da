/* `ckv bench` subcommands beyond compress, and what they share. */
#ifndef CKV_CLI_BENCH_H
#define CKV_CLI_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Copy bandwidth and dense bf16 matrix rate of the H200, as measured on the
 * lent machines (/work/.library/device/KINDS.md: 4.3 TB/s copy, 769-798
 * TFLOP/s): the ceilings every GPU benchmark reports against. */
#define BENCH_COPY_BPS 4.19e12
#define BENCH_MATMUL_FLOPS 750e12

int bench_attention(int argc, char **argv);
int bench_decode(int argc, char **argv);

/* Parses "a,b,c" of integers in [lo, hi] (at most max of them) into out;
 * prints a usage error naming opt and returns false on bad input. */
bool bench_int_list(const char *opt, const char *s, long long lo, long long hi, int32_t *out,
                    int *n, int max);
/* "ckv bench" and argv (the subcommand's) joined by spaces (malloc'd; NULL
 * when out of memory). */
char *bench_command_line(int argc, char **argv);
/* The time now as "YYYY-MM-DDTHH:MM:SSZ". */
void bench_utc_now(char buf[32]);
/* Makes the parent folder of path (one level) when missing; false on failure. */
bool bench_make_parent(const char *path);
double bench_median(double *t, int n);

#endif
