/* Helpers of the `ckv bench` subcommands (bench.h). */
#include "bench.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "model_presets.h"
#include "opts.h"
#include "session.h"
#include "splitmix.h"
#include "util.h"

#if CKV_HAVE_CUDA
#include "cuda_bench.h"
#include "cuda_kernels.h"
#endif

/* Calls take(opt, token, i, ctx) for each comma-separated token of s, at
 * most max of them and at least one; *n: how many were taken. false after
 * a usage error naming opt (take prints its own). */
static bool split_list(const char *opt, const char *s, int max, int *n,
                       bool (*take)(const char *opt, const char *tok, int i, void *ctx), void *ctx)
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
        if (*n == max) {
            cli_usage_error("bench", "%s: more than %d values", opt, max);
            ok = false;
        } else if ((ok = take(opt, tok, *n, ctx))) {
            (*n)++;
        }
    }
    if (ok && *n == 0) {
        cli_usage_error("bench", "%s: no values in '%s'", opt, s);
        ok = false;
    }
    free(copy);
    return ok;
}

typedef struct {
    long long lo, hi;
    int32_t *out;
} int_list;

static bool take_int(const char *opt, const char *tok, int i, void *ctx)
{
    const int_list *l = ctx;
    long long v;
    if (!cli_int("bench", opt, tok, l->lo, l->hi, &v))
        return false;
    l->out[i] = (int32_t)v;
    return true;
}

bool bench_int_list(const char *opt, const char *s, long long lo, long long hi, int32_t *out,
                    int *n, int max)
{
    int_list l = {lo, hi, out};
    return split_list(opt, s, max, n, take_int, &l);
}

typedef struct {
    double lo, hi;
    double *out;
} double_list;

static bool take_double(const char *opt, const char *tok, int i, void *ctx)
{
    const double_list *l = ctx;
    return cli_double("bench", opt, tok, l->lo, l->hi, &l->out[i]);
}

bool bench_double_list(const char *opt, const char *s, double lo, double hi, double *out, int *n,
                       int max)
{
    double_list l = {lo, hi, out};
    return split_list(opt, s, max, n, take_double, &l);
}

bool bench_policy_list(const char *opt, const char *s, char **storage, const char **names,
                       int *n, int max)
{
    *n = 0;
    if (!(*storage = strdup(s))) {
        cli_usage_error("bench", "out of memory");
        return false;
    }
    for (char *save = NULL, *t = strtok_r(*storage, ",", &save); t;
         t = strtok_r(NULL, ",", &save)) {
        ckv_policy p;
        ckv_error err = {0};
        if (*n == max) {
            cli_usage_error("bench", "%s: more than %d values", opt, max);
            return false;
        }
        if (ckv_policy_init(&p, t, &err)) {
            cli_usage_error("bench", "%s: %s", opt, err.msg);
            return false;
        }
        names[(*n)++] = t;
    }
    if (!*n) {
        cli_usage_error("bench", "%s: no values in '%s'", opt, s);
        return false;
    }
    return true;
}

double bench_matrix_bytes(const ckv_config *c)
{
    return 2.0 * (double)ckv_config_matrix_params(c);
}

double bench_cache_bytes(const ckv_config *c, ckv_kv_dtype dtype, double entries)
{
    return (double)c->n_layer * c->n_head_kv * entries *
           (2.0 * c->head_dim * ckv_kv_dtype_size(dtype) + 4.0);
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

/* The folder of a results file, made when missing (one level, as before:
 * HDF5's create then says what is wrong with a deeper path). */
static void make_folder(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (slash && slash != path) {
        char *dir = strndup(path, (size_t)(slash - path));
        if (!dir || (mkdir(dir, 0777) != 0 && errno != EEXIST))
            fprintf(stderr, "ckv bench: cannot create the folder of %s\n", path);
        free(dir);
    }
}

int bench_write(const char *path, const char *const *attrs, size_t n_attrs,
                const ckv_h5_table *tables, size_t n_tables)
{
    make_folder(path);
    ckv_error err = {0};
    if (ckv_h5_write_file(path, attrs, n_attrs, tables, n_tables, &err))
        return cli_fail("bench", &err);
    printf("\nwrote %s\n", path);
    return CLI_OK;
}

int bench_open(ckv_h5_stream *s, const char *path, const char *const *attrs, size_t n_attrs,
               const ckv_h5_table *tables, size_t n_tables)
{
    make_folder(path);
    ckv_error err = {0};
    if (ckv_h5_stream_open(s, path, attrs, n_attrs, tables, n_tables, &err))
        return cli_fail("bench", &err);
    return CLI_OK;
}

int bench_append(ckv_h5_stream *s, size_t table, const void *rows, size_t n)
{
    ckv_error err = {0};
    if (ckv_h5_stream_append(s, table, rows, n, &err))
        return cli_fail("bench", &err);
    return CLI_OK;
}

int bench_close(ckv_h5_stream *s, int rc)
{
    const bool kept = s->file >= 0 && s->rows > 0;
    ckv_error err = {0};
    if (ckv_h5_stream_close(s, rc == CLI_OK ? "complete" : "failed", &err))
        return cli_fail("bench", &err);
    if (rc == CLI_OK)
        printf("\nwrote %s\n", s->path);
    else if (kept)
        fprintf(stderr, "ckv bench: the rows finished before the failure are in %s (status "
                        "failed); %s is untouched\n", s->part, s->path);
    return rc;
}

int bench_device(const char *what, const char *arg)
{
    if (!strcmp(arg, "cuda"))
        return CLI_OK;
    return cli_usage_error("bench", "--device: '%s': %s is benchmarked on the GPU only (--device "
                           "cuda)", arg, what);
}

int bench_parse(int argc, char **argv, const struct option *longopts, bench_opts *b,
                bench_own_opt own, void *o, void (*help)(FILE *), int max_operands)
{
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case BENCH_OPT_DEVICE:
            if (bench_device(b->what, optarg))
                return CLI_USAGE;
            break;
        case BENCH_OPT_WARMUP:
            ok = cli_int("bench", "--warmup", optarg, 0, 10000, &b->warmup);
            break;
        case BENCH_OPT_REPEATS:
            ok = cli_int("bench", "--repeats", optarg, 1, b->max_repeats, &b->repeats);
            break;
        case BENCH_OPT_SEED: ok = cli_int("bench", "--seed", optarg, 0, INT64_MAX, &b->seed); break;
        case BENCH_OPT_OUT: b->out = optarg; break;
        case BENCH_OPT_KV_DTYPE: ok = cli_kv_dtype_parse("bench", optarg, &b->kv_dtype); break;
        case BENCH_OPT_COPY_RATE: ok = bench_copy_parse(optarg, &b->copy); break;
        case BENCH_OPT_ROW_ORDER:
            if (strcmp(optarg, "slot") && strcmp(optarg, "random"))
                return cli_usage_error("bench", "--row-order '%s': expected slot or random",
                                       optarg);
            b->rows_random = !strcmp(optarg, "random");
            break;
        case 'h': help(stdout); return -1;
        case '?': return cli_usage_error("bench", "invalid option");
        default:
            if (own(o, c, optarg) != CLI_OK)
                return CLI_USAGE;
        }
        if (!ok)
            return CLI_USAGE;
    }
    if (argc - optind > max_operands)
        return cli_usage_error("bench", "unexpected argument '%s'", argv[optind + max_operands]);
    return CLI_OK;
}

int bench_shape(const char *what, const char *shape, ckv_config *cfg)
{
    if (!shape)
        return cli_usage_error("bench", "%s needs --shape NAME", what);
    ckv_error err = {0};
    if (ckv_model_preset(shape, cfg, &err))
        return cli_usage_error("bench", "--shape: %s", err.msg);
    return CLI_OK;
}

int bench_no_cuda(const char *what)
{
    fprintf(stderr, "ckv bench: built without CUDA (configure with -Dcuda=enabled): %s is "
                    "benchmarked on the GPU only\n", what);
    return CLI_FAIL;
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

const char *bench_peer_script(const char *given, const char *rel)
{
    static char buf[4096];
    if (given)
        return given;
    if (access(rel, R_OK) == 0)
        return rel;
    const char *root = getenv("CKV_SOURCE_ROOT");
    if (root) {
        snprintf(buf, sizeof buf, "%s/%s", root, rel);
        return buf;
    }
    return rel;
}

bool bench_peer_open(bench_peer *p, const char *name, char *note, size_t note_size)
{
    snprintf(p->dir, sizeof p->dir, "/tmp/ckv-peer-XXXXXX");
    p->info[0] = '\0';
    if (mkdtemp(p->dir))
        return true;
    p->dir[0] = '\0';
    snprintf(note, note_size, "%s not run: cannot make a temporary folder", name);
    return false;
}

void bench_peer_path(const bench_peer *p, const char *file, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", p->dir, file);
}

/* The first (first) or last non-empty line of a file, without its newline;
 * "" when there is none. */
static void file_line(const char *path, bool first, char *out, size_t size)
{
    char line[512];
    FILE *f = fopen(path, "r");
    out[0] = '\0';
    while (f && fgets(line, sizeof line, f)) {
        if (line[0] == '\n')
            continue;
        size_t k = strcspn(line, "\n");
        k = k < size ? k : size - 1;
        memcpy(out, line, k);
        out[k] = '\0';
        if (first)
            break;
    }
    if (f)
        fclose(f);
}

json_t *bench_peer_run(bench_peer *p, const char *name, const char *python, const char *script,
                       const char *args, char *note, size_t note_size)
{
    char js[128], outf[128], errf[128];
    bench_peer_path(p, "peer.json", js, sizeof js);
    bench_peer_path(p, "stdout", outf, sizeof outf);
    bench_peer_path(p, "stderr", errf, sizeof errf);
    if (strchr(script, '\'') || strchr(python, '\'')) {
        snprintf(note, note_size, "%s not run: quote in the script or python path", name);
        return NULL;
    }
    const size_t len = strlen(python) + strlen(script) + strlen(args) + 3 * sizeof js + 32;
    char *cmd = malloc(len);
    if (!cmd) {
        snprintf(note, note_size, "%s not run: out of memory", name);
        return NULL;
    }
    snprintf(cmd, len, "'%s' '%s' %s --json '%s' >'%s' 2>'%s'", python, script, args, js, outf,
             errf);
    fprintf(stderr, "ckv bench: running the %s peer: %s %s %s\n", name, python, script, args);
    int rc = system(cmd);
    free(cmd);
    rc = rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
    file_line(outf, true, p->info, sizeof p->info);
    json_error_t je;
    json_t *root = rc == 0 ? json_load_file(js, 0, &je) : NULL;
    if (root && json_is_array(root)) {
        note[0] = '\0';
        return root;
    }
    json_decref(root);
    char last[512];
    file_line(errf, false, last, sizeof last);
    snprintf(note, note_size, "%s not run (exit %d): %s", name, rc, last[0] ? last : "no output");
    return NULL;
}

void bench_peer_close(bench_peer *p)
{
    if (!p->dir[0])
        return;
    DIR *d = opendir(p->dir);
    struct dirent *e;
    char path[512];
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", p->dir, e->d_name);
            unlink(path);
        }
    if (d)
        closedir(d);
    rmdir(p->dir);
    p->dir[0] = '\0';
}

void bench_copy_default(bench_copy *c)
{
    *c = (bench_copy){.bps = NAN, .measure = true};
}

bool bench_copy_parse(const char *arg, bench_copy *c)
{
    bench_copy_default(c);
    if (!strcmp(arg, "measure"))
        return true;
    double tbps;
    if (!cli_double("bench", "--copy-rate", arg, 1e-6, 100, &tbps))
        return false;
    c->bps = tbps * 1e12;
    c->measure = false;
    snprintf(c->source, sizeof c->source, "given: --copy-rate %s", arg);
    return true;
}

#if CKV_HAVE_CUDA
int bench_copy_resolve(bench_copy *c)
{
    if (!c->measure)
        return CLI_OK;
    ckv_error err = {0};
    ckv_bench_gpu *b = NULL;
    ckv_status st = ckv_bench_gpu_create(&b, 0, &err);
    if (!st)
        st = ckv_bench_copy_rate(b, (size_t)BENCH_COPY_MIB << 20, BENCH_COPY_WARMUP,
                                 BENCH_COPY_REPEATS, &c->bps, &err);
    ckv_bench_gpu_free(b);
    if (st) {
        fprintf(stderr, "ckv bench: measuring the copy rate (--copy-rate R gives one instead): %s\n",
                err.msg);
        return CLI_FAIL;
    }
    snprintf(c->source, sizeof c->source,
             "measured: %d MiB device-to-device copies, median of %d after %d", BENCH_COPY_MIB,
             BENCH_COPY_REPEATS, BENCH_COPY_WARMUP);
    return CLI_OK;
}

bool bench_gpu(ckv_cuda_device *dev)
{
    ckv_error err = {0};
    int32_t n_dev;
    if (ckv_cuda_device_count(&n_dev, &err) || ckv_cuda_device_query(0, dev, &err)) {
        fprintf(stderr, "ckv bench: no usable GPU: %s\n", err.msg);
        return false;
    }
    return true;
}

const char *bench_prefill_form(ckv_kv_dtype dt)
{
    return ckv_k_attention_path_name(dt == CKV_KV_BF16 ? CKV_ATTN_PREFILL_BF16
                                                       : CKV_ATTN_PREFILL_TF32);
}

float bench_max_degree(const ckv_policy *p, double budget)
{
    return budget < 1 && (!p || ckv_policy_merges(p)) ? (float)(2.0 / budget - 1.0) : 1.0f;
}

ckv_status bench_time_compress(const ckv_config *cfg, ckv_kv_dtype dtype, const ckv_policy *p,
                               int32_t entries, int32_t interval, int64_t context, double budget,
                               int32_t round, int32_t seqs, int32_t group, int32_t runs,
                               uint64_t seed, bool rows_random, double *median_ms,
                               int32_t *rounds, int32_t *per_call, ckv_error *err)
{
    const int32_t grown = entries + interval;
    const int32_t W = (int32_t)ckv_policy_param(p, "window", 0);
    /* At most `group`, the sequences and what the kernels' indexing takes;
     * calls of near-equal size: a leftover call of one cache would take the
     * one-cache scratch beside the group's. */
    int32_t want = 1;
    if (ckv_gpu_policy_many(p)) {
        const int32_t most_ix = ckv_gpu_policy_max_caches(cfg->n_layer, cfg->n_head_kv, grown);
        want = group < seqs ? group : seqs;
        want = want < most_ix ? want : most_ix;
        want = want > 1 ? want : 1;
    }
    const int32_t calls = (seqs + want - 1) / want, most = (seqs + calls - 1) / calls;
    if (per_call)
        *per_call = most;
    float *q = NULL;
    double *ms = malloc((size_t)runs * sizeof *ms);
    ckv_gpu_cache **c = calloc((size_t)most, sizeof *c);
    if (!ms || !c) {
        free(ms);
        free(c);
        return ckv_errorf(err, CKV_ERR_NOMEM, "bench: out of memory");
    }
    ckv_status st = CKV_OK;
    if (ckv_policy_needs(p) & CKV_NEEDS_Q_WINDOW) {
        const size_t nq = (size_t)cfg->n_layer * cfg->n_head * W * cfg->head_dim;
        if (!(q = malloc(nq * sizeof *q)))
            st = ckv_errorf(err, CKV_ERR_NOMEM, "bench: out of memory");
        uint64_t rng = seed;
        for (size_t i = 0; q && i < nq; i++)
            q[i] = (float)((double)(ckv_splitmix64(&rng) >> 11) * 0x1p-52 - 1.0);
    }
    const ckv_qwindow qw = {q, cfg->n_head, W};
    /* One call's caches, filled afresh for each call of the pass. */
    for (int32_t j = 0; !st && j < most; j++)
        st = ckv_gpu_cache_create_shape(&c[j], cfg->n_layer, cfg->n_head_kv, cfg->head_dim,
                                        grown, (ckv_policy_needs(p) & CKV_NEEDS_SCORE) != 0,
                                        dtype, err);
    const bool scramble = rows_random && ckv_gpu_policy_entry_bytes(p) > 0;
    for (int32_t i = -1; !st && i < runs; i++) {
        double pass = 0;
        for (int32_t k = 0, done = 0; !st && k < calls; k++) {
            const int32_t n = (seqs - done) / (calls - k);
            for (int32_t j = 0; !st && j < n; j++) {
                const uint64_t s = seed + 7 * (uint64_t)(i + 1) + 7919 * (uint64_t)(done + j);
                if (!(st = ckv_gpu_cache_fill_random(c[j], grown, context + interval,
                                                     bench_max_degree(p, budget), s, err)) &&
                    scramble)
                    st = ckv_gpu_cache_scramble(c[j], s + 3, err);
                ckv_gpu_cache_set_round(c[j], round);
            }
            const double t0 = ckv_now();
            if (!st)
                st = ckv_gpu_policy_compress_many(c, n, p, entries, q ? &qw : NULL, NULL, NULL,
                                                  err);
            pass += ckv_now() - t0;
            done += n;
        }
        if (i >= 0)
            ms[i] = pass * 1e3;
    }
    if (!st) {
        *median_ms = bench_median(ms, runs);
        if (rounds)
            *rounds = ckv_gpu_cache_round(c[0]) - round;
    }
    for (int32_t j = 0; j < most; j++)
        ckv_gpu_cache_free(c[j]);
    free(c);
    free(q);
    free(ms);
    return st;
}

ckv_status bench_time_steps(ckv_gpu *g, const ckv_config *cfg, ckv_kv_dtype dtype, int32_t n,
                            int32_t entries,
                            int32_t context, float max_degree, bool track_score, int32_t warmup,
                            int32_t repeats, uint64_t seed, float *logits, bench_steps *out,
                            ckv_error *err)
{
    ckv_gpu_cache **c = calloc((size_t)n, sizeof *c);
    int32_t *tok = malloc((size_t)n * sizeof *tok), *next = malloc((size_t)n * sizeof *next);
    double *ms = malloc((size_t)repeats * sizeof *ms);
    ckv_status st = CKV_OK;
    if (!c || !tok || !next || !ms)
        st = ckv_errorf(err, CKV_ERR_NOMEM, "bench: out of memory");
    for (int32_t i = 0; !st && i < n; i++)
        if (!(st = ckv_gpu_cache_create(&c[i], g, entries + warmup + repeats + BENCH_SETTLE_RUNS,
                                        track_score, dtype, err)))
            st = ckv_gpu_cache_fill_random(c[i], entries, context, max_degree,
                                           seed + 3 * (uint64_t)i, err);
    uint64_t rng = seed;
    for (int32_t s = 0; !st && s < warmup + repeats; s++) {
        for (int32_t i = 0; i < n; i++)
            tok[i] = (int32_t)(ckv_splitmix64(&rng) % (uint64_t)cfg->n_vocab);
        const double t0 = ckv_now();
        st = ckv_gpu_decode_batch(g, c, tok, n, false, s == 0 ? logits : NULL,
                                  s == 0 ? NULL : next, NULL, err);
        const double dt = ckv_now() - t0;
        for (size_t v = 0; !st && s == 0 && v < (size_t)n * cfg->n_vocab; v++)
            if (!isfinite(logits[v]))
                st = ckv_errorf(err, CKV_ERR_DEVICE,
                                "bench: logit %zu is %g: the synthetic decoder gave a non-finite "
                                "output, so its timings mean nothing",
                                v, logits[v]);
        if (!st && s >= warmup)
            ms[s - warmup] = dt * 1e3;
    }
    if (!st) {
        out->runs = repeats;
        out->median_ms = bench_median(ms, repeats);
        out->min_ms = ms[0];
        out->max_ms = ms[repeats - 1];
        out->settle_ms = 0;
    }
    double settle[BENCH_SETTLE_RUNS];
    int32_t settled = 0;
    while (!st && n > 0 && settled < BENCH_SETTLE_RUNS && ckv_gpu_cache_pending(c[0])) {
        if (!(st = ckv_gpu_caches_settle_timed(c, n, &settle[settled], err)))
            settled++;
        for (int32_t i = 0; !st && i < n; i++)
            tok[i] = (int32_t)(ckv_splitmix64(&rng) % (uint64_t)cfg->n_vocab);
        if (!st && settled < BENCH_SETTLE_RUNS)
            st = ckv_gpu_decode_batch(g, c, tok, n, false, NULL, next, NULL, err);
    }
    if (!st && settled)
        out->settle_ms = bench_median(settle, settled);
    for (int32_t i = 0; c && i < n; i++)
        ckv_gpu_cache_free(c[i]);
    free(c);
    free(tok);
    free(next);
    free(ms);
    return st;
}
#endif
