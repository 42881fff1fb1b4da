/* The `ckv bench` subcommands and what they share. */
#ifndef CKV_CLI_BENCH_H
#define CKV_CLI_BENCH_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "ckv_config.h"
#include "h5_table.h"
#include "model.h"
#include "policy.h"
#if CKV_HAVE_CUDA
#include "cuda.h"
#endif

/* The dense bf16 matrix rate the GPU benchmarks report FLOPs against, as
 * measured on the lent cards (/work/.library/device/KINDS.md: 769-798
 * TFLOP/s on the H200s, 778-798 on the H100s; the copy bandwidth differs by
 * card and is measured, bench_copy). */
#define BENCH_MATMUL_FLOPS 750e12
/* The reference for TF32 tensor-core kernels: dense TF32 runs at half the
 * dense bf16 rate on Hopper (datasheet: 494.7 against 989.4 TFLOP/s), so
 * half the measured bf16 rate; not measured itself. */
#define BENCH_TF32_FLOPS (BENCH_MATMUL_FLOPS / 2)

int bench_compress(int argc, char **argv);
int bench_attention(int argc, char **argv);
int bench_decode(int argc, char **argv);
int bench_generate(int argc, char **argv);
int bench_throughput(int argc, char **argv);

/* Parses "a,b,c" of integers in [lo, hi] (at most max of them) into out;
 * prints a usage error naming opt and returns false on bad input. */
bool bench_int_list(const char *opt, const char *s, long long lo, long long hi, int32_t *out,
                    int *n, int max);
/* "ckv bench" and argv (the subcommand's) joined by spaces (malloc'd; NULL
 * when out of memory). */
char *bench_command_line(int argc, char **argv);
/* The time now as "YYYY-MM-DDTHH:MM:SSZ". */
void bench_utc_now(char buf[32]);
/* Writes a benchmark's HDF5 file (ckv_h5_write_file; its parent folder made
 * first when missing) and says so on stdout: CLI_OK, or CLI_FAIL after
 * printing the error. */
int bench_write(const char *path, const char *const *attrs, size_t n_attrs,
                const ckv_h5_table *tables, size_t n_tables);
/* The same file written as the benchmark goes (ckv_h5_stream: PATH.part,
 * renamed over PATH when complete; its folder made first): bench_open
 * before the first rows, bench_append as each point's rows are final (a
 * killed run keeps them in PATH.part), bench_close at the end with the
 * run's outcome: "complete" when rc is CLI_OK (saying "wrote PATH" then),
 * else "failed", saying where the finished rows are (none: no file). Each
 * returns CLI_OK, or CLI_FAIL after printing the error (bench_close: rc
 * when it closed). */
int bench_open(ckv_h5_stream *s, const char *path, const char *const *attrs, size_t n_attrs,
               const ckv_h5_table *tables, size_t n_tables);
int bench_append(ckv_h5_stream *s, size_t table, const void *rows, size_t n);
int bench_close(ckv_h5_stream *s, int rc);
double bench_median(double *t, int n);
/* --device of a GPU-only benchmark `what`: CLI_OK for "cuda", else a usage
 * error saying so. */
int bench_device(const char *what, const char *arg);
/* --shape of benchmark `what`: the preset's config, else a usage error
 * (none given, or not a preset of src/model_presets.c). */
int bench_shape(const char *what, const char *shape, ckv_config *cfg);
/* What a GPU-only benchmark `what` says in a build without CUDA: CLI_FAIL. */
int bench_no_cuda(const char *what);
/* Parses "a,b,c" of numbers in [lo, hi] as bench_int_list does. */
bool bench_double_list(const char *opt, const char *s, double lo, double hi, double *out, int *n,
                       int max);
/* Splits "a,b,c" of policy names in place (storage: a malloc'd copy of s,
 * which names[] point into; free it) and checks every name; prints a usage
 * error naming opt and returns false on bad input. */
bool bench_policy_list(const char *opt, const char *s, char **storage, const char **names,
                       int *n, int max);
/* Bytes of the model's matrices as the GPU decoder holds them (bf16), which
 * every decode step reads once. */
double bench_matrix_bytes(const ckv_config *c);
/* Device bytes of one sequence's cache of `entries` entries per (layer, KV
 * head) list as ckv_gpu_cache stores them: keys and values of dtype, fp32
 * degrees (no scores). */
double bench_cache_bytes(const ckv_config *c, ckv_kv_dtype dtype, double entries);
/* --copy-rate of `ckv bench decode` and `ckv bench attention`: the copy
 * bandwidth (bytes read plus written a second) their floors and %copy
 * divide by (a kernel that only reads can pass it). "measure" (the
 * default): ckv_bench_copy_rate on GPU 0 before the benchmark allocates
 * anything, so that each card is measured against its own rate (about
 * 4.2-4.3 TB/s on an H200, 3.0 on an H100); or a rate in TB/s, such as
 * 4.19, the H200's, which issue 7's targets name. */
typedef struct {
    double bps;
    bool measure;
    char source[96]; /* how the rate was had: the header's and the file's words */
} bench_copy;
/* The H200's copy rate as measured on the lent machines, the one issue 7's
 * targets were set against: the targets lines also count at it. */
#define BENCH_REFERENCE_BPS 4.19e12
/* The rate used over the reference: a share of copy bandwidth scales by it
 * to the reference's, a time over the floor by its inverse (the floor at
 * the reference rate is shorter where that rate is higher). */
static inline double bench_to_reference(const bench_copy *c)
{
    return c->bps / BENCH_REFERENCE_BPS;
}
/* How "measure" times the copy: BENCH_COPY_MIB MiB (1 GiB: about 18-21x
 * an H200's or H100's L2, 0.5-0.7 ms a copy), the median of
 * BENCH_COPY_REPEATS back to back after BENCH_COPY_WARMUP. */
enum { BENCH_COPY_MIB = 1024, BENCH_COPY_WARMUP = 3, BENCH_COPY_REPEATS = 20 };
/* Its help line in `bench decode`'s columns; takes BENCH_COPY_MIB,
 * BENCH_COPY_REPEATS and BENCH_COPY_WARMUP as its format's arguments. */
#define BENCH_COPY_HELP                                                                       \
    "  --copy-rate R     the copy bandwidth in TB/s that the floors divide by, or\n"           \
    "                    'measure' (default: %d MiB device-to-device copies on the GPU,\n"     \
    "                    bytes read and written, the median of %d after %d)\n"
/* "measure" (the default) until bench_copy_parse sets a rate. */
void bench_copy_default(bench_copy *c);
/* --copy-rate's argument: "measure" or TB/s in (0, 100]; prints a usage error
 * naming the value and returns false on bad input. */
bool bench_copy_parse(const char *arg, bench_copy *c);
/* The options that several `ckv bench` subcommands share, each parsed by
 * bench_parse into the subcommand's bench_opts. A subcommand lists those it
 * takes in its getopt_long table with these codes, which lie past every
 * character its own options use. */
enum {
    BENCH_OPT_DEVICE = 0x100, /* --device: cuda, the only device (bench_device) */
    BENCH_OPT_WARMUP,         /* --warmup W in [0, 10000] */
    BENCH_OPT_REPEATS,        /* --repeats R in [1, max_repeats] */
    BENCH_OPT_SEED,           /* --seed S in [0, 2^63 - 1] */
    BENCH_OPT_OUT,            /* --out PATH */
    BENCH_OPT_KV_DTYPE,       /* --kv-dtype (cli_kv_dtype_parse) */
    BENCH_OPT_COPY_RATE,      /* --copy-rate (bench_copy_parse) */
    BENCH_OPT_ROW_ORDER,      /* --row-order slot|random (bench_opts.rows_random) */
};
/* Their getopt_long entries, and --help's. */
#define BENCH_LONGOPT_DEVICE {"device", required_argument, 0, BENCH_OPT_DEVICE}
#define BENCH_LONGOPT_WARMUP {"warmup", required_argument, 0, BENCH_OPT_WARMUP}
#define BENCH_LONGOPT_REPEATS {"repeats", required_argument, 0, BENCH_OPT_REPEATS}
#define BENCH_LONGOPT_SEED {"seed", required_argument, 0, BENCH_OPT_SEED}
#define BENCH_LONGOPT_OUT {"out", required_argument, 0, BENCH_OPT_OUT}
#define BENCH_LONGOPT_KV_DTYPE {"kv-dtype", required_argument, 0, BENCH_OPT_KV_DTYPE}
#define BENCH_LONGOPT_COPY_RATE {"copy-rate", required_argument, 0, BENCH_OPT_COPY_RATE}
#define BENCH_LONGOPT_ROW_ORDER {"row-order", required_argument, 0, BENCH_OPT_ROW_ORDER}
#define BENCH_LONGOPT_HELP {"help", no_argument, 0, 'h'}
typedef struct {
    const char *what; /* the subcommand ("decode"), for its messages */
    const char *out;
    long long warmup, repeats, seed;
    ckv_kv_dtype kv_dtype;
    bench_copy copy;
    long long max_repeats; /* 1,000 where one repeat is a whole run, else 100,000 */
    bool rows_random;      /* --row-order random */
} bench_opts;
/* A subcommand's own option c with argument arg (NULL for a flag) into its
 * options o: CLI_OK, or CLI_USAGE after printing a usage error. */
typedef int (*bench_own_opt)(void *o, int c, const char *arg);
/* Parses argv (getopt_long over longopts, "-h" as --help): the shared
 * options into b (its defaults set by the caller), every other one through
 * own; --help prints help(stdout) and returns -1. Then at most max_operands
 * operands may follow, the first at optind. Returns CLI_OK, CLI_USAGE (a
 * usage error printed) or -1. */
int bench_parse(int argc, char **argv, const struct option *longopts, bench_opts *b,
                bench_own_opt own, void *o, void (*help)(FILE *), int max_operands);
/* The help line of --kv-dtype. */
#define BENCH_KV_DTYPE_HELP                                                                     \
    "  --kv-dtype T      how the KV caches store keys and values: f32 (default) or bf16\n"
/* The help lines of --row-order. */
#define BENCH_ROW_ORDER_HELP                                                                    \
    "  --row-order O     where the timed decode-time calls of the policies that\n"              \
    "                    fill (centroid, streaming, h2o) find each list's\n"                    \
    "                    rows: slot (default: in slot order, as after the prefill's\n"          \
    "                    call) or random (a random order of the slots, the far bound\n"         \
    "                    of what the fills of earlier calls leave)\n"


/* A peer script (PyTorch, transformers) run in the same call as our
 * benchmark, after it, on the same GPU: its input and output files live in a
 * temporary folder. */
typedef struct {
    char dir[32];
    char info[256]; /* the peer's first line on stdout (device, versions); "" if none */
} bench_peer;

/* The peer's script: `given` when set, else `rel` (a path in the source
 * tree) when readable from here, else `rel` under $CKV_SOURCE_ROOT. */
const char *bench_peer_script(const char *given, const char *rel);
/* Makes the peer's folder; false with a note ("NAME not run: why"). */
bool bench_peer_open(bench_peer *p, const char *name, char *note, size_t note_size);
/* `file` in the peer's folder, into buf. */
void bench_peer_path(const bench_peer *p, const char *file, char *buf, size_t size);
/* Runs `python script args --json DIR/peer.json` (stdout and stderr to files
 * in the folder; args are the caller's, quoted by it) and returns the JSON
 * array it wrote, note "" (the caller json_decref()s it). NULL when it did not
 * run or wrote no array, with a note "NAME not run (exit N): " and the last
 * line the peer wrote on stderr (it says why: python3, torch or a GPU missing). */
json_t *bench_peer_run(bench_peer *p, const char *name, const char *python, const char *script,
                       const char *args, char *note, size_t note_size);
/* Removes the folder and the files in it. */
void bench_peer_close(bench_peer *p);

#if CKV_HAVE_CUDA
/* Device 0, or false after printing why there is no usable GPU. */
bool bench_gpu(ckv_cuda_device *dev);
/* Measures c's rate where it says "measure" (ckv_bench_copy_rate) and fills
 * its source; CLI_OK, or CLI_FAIL after printing why. */
int bench_copy_resolve(bench_copy *c);
/* Which form of the tensor-core prefill attention lists of type dt take now
 * (ckv_k_attention_path_name). */
const char *bench_prefill_form(ckv_kv_dtype dt);
/* Timings of decode steps over a batch of caches. */
typedef struct {
    double median_ms, min_ms, max_ms; /* per step */
    int32_t runs;
    /* The deferred masses a step leaves, settled over all n caches as the
     * policy calls would before their own work (ckv_gpu_caches_settle_timed):
     * the median of BENCH_SETTLE_RUNS, the first after the timed steps, each
     * other after one more step; 0 where the steps defer nothing
     * (ckv_cuda_set_defer_scores). The caches then hold entries + warmup +
     * repeats (+ 2) entries, not the entries + interval a compression
     * settles: with bench throughput's defaults (3 + 10) at interval 64 the
     * settle reads 0.6% (8,192 entries) to 2.4% (2,048) fewer keys. */
    double settle_ms;
} bench_steps;
enum { BENCH_SETTLE_RUNS = 3 };

/* Makes n caches of dtype (capacity entries + warmup + repeats +
 * BENCH_SETTLE_RUNS; scores when
 * track_score) filled with random entries: `entries` per list at position
 * `context`, degrees uniform in [1, max_degree) (1 where max_degree is 1;
 * bench_max_degree). Then runs warmup + repeats
 * steps of ckv_gpu_decode_batch over them, one random token per cache per
 * step, and frees them. The first step returns the logits (logits: room for
 * n x n_vocab), which must be finite, since the timings of a decoder that
 * gives NaN mean nothing; every other step returns only the greedy next
 * tokens, as a server takes them, timed from the host call to the tokens on
 * the host (so that n rows of logits crossing to the host are not timed:
 * 39.5 MB a step for 77 rows of Llama-3.1-8B). Then, where the steps left
 * masses pending, the settle (settle_ms), so that a compression timed on
 * fresh caches (bench_time_compress) can be charged what it would pay
 * after real steps. */
ckv_status bench_time_steps(ckv_gpu *g, const ckv_config *cfg, ckv_kv_dtype dtype, int32_t n,
                            int32_t entries,
                            int32_t context, float max_degree, bool track_score, int32_t warmup,
                            int32_t repeats, uint64_t seed, float *logits, bench_steps *out,
                            ckv_error *err);
/* The degrees a compressed cache of p at budget holds are taken uniform
 * from 1 up to this: 2 / budget - 1 (mean 1 / budget, as CentroidKV leaves
 * them) where p merges (p NULL: CentroidKV's), 1 where it only evicts (its
 * degrees all stay 1, which the decode's log2 skips) or budget is 1. */
float bench_max_degree(const ckv_policy *p, double budget);
/* The compression a policy runs every `interval` decode steps, for `seqs`
 * sequences: each sequence's cache of shape cfg and dtype holding entries +
 * interval random entries (ckv_gpu_cache_fill_random, degrees up to
 * bench_max_degree(p, budget)) at position context + interval, compressed
 * back to `entries` by ckv_gpu_policy_compress_many in calls of at most
 * `group` caches (one where the policy takes one a call:
 * ckv_gpu_policy_many; at most what the kernels' indexing takes:
 * ckv_gpu_policy_max_caches), the sequences split into calls of near-equal
 * size; *per_call (may be NULL): the most caches a call of the pass takes.
 * Only one call's caches are held: each call's are filled afresh (untimed)
 * before it. One untimed warm-up pass (it takes the policy scratch), then
 * `runs` timed passes over every sequence; SnapKV gets random window
 * queries in [-1, 1), H2O caches with (zero) scores. *median_ms: the median
 * of a pass's summed call times (each call returns when the GPU is done).
 * Each call starts at CSM round `round` (the count the sequence reached: a
 * decode compression continues it); *rounds (may be NULL): the CSM rounds
 * of the first cache's last call. rows_random: the calls of the policies
 * that fill (ckv_gpu_policy_entry_bytes > 0: centroid, StreamingLLM, H2O)
 * run on caches whose rows are in a random order of their slots
 * (ckv_gpu_cache_scramble, after each fill; the others take no mapped
 * cache and ignore it). */
ckv_status bench_time_compress(const ckv_config *cfg, ckv_kv_dtype dtype, const ckv_policy *p,
                               int32_t entries, int32_t interval, int64_t context, double budget,
                               int32_t round, int32_t seqs, int32_t group, int32_t runs,
                               uint64_t seed, bool rows_random, double *median_ms,
                               int32_t *rounds, int32_t *per_call, ckv_error *err);
#endif

#endif
