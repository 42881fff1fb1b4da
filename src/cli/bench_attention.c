/* `ckv bench attention`: the decoder's attention kernel (decode and prefill,
 * with and without the degree bias) and its cuBLAS GEMM timed on the GPU
 * after a check against their CPU twins, optionally beside PyTorch's
 * scaled_dot_product_attention (harness/peers/sdpa_attention.py); a table on
 * stdout and an HDF5 file. docs/performance.md describes the counts. */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "ckv_config.h"
#include "h5_table.h"
#include "model_presets.h"
#include "opts.h"
#include "session.h"
#if CKV_HAVE_CUDA
#include "cuda.h"
#include "cuda_bench.h"
#endif

enum { MAXL = 16 };
/* --gemm-lt's most: cuBLASLt's candidates timed per matrix and row count. */
enum { MAX_LT = 8 };

#define TOL_ATTN 1e-4 /* fp32 kernels against the fp32 twin: summation order only */
/* The TF32 prefill kernel: q and p rounded to TF32 (u = 2^-11), k and v
 * truncated (up to 2u), a few u of relative error in a probability-weighted
 * mean; as TOL_TF32 of tests/gpu/parity.c, which derives it. */
#define TOL_ATTN_TF32 2e-3
/* Its bf16 form over bf16 lists: q and p rounded to bf16 (u = 2^-9), k and
 * v exact; as TOL_BF16_MMA of tests/gpu/parity.c, which derives it. */
#define TOL_ATTN_BF16 8e-3
#define TOL_GEMM 1e-4 /* fp32 accumulation of bf16 products against double */
/* bf16 outputs: their rounding alone is up to half a step (2^-9) of each */
#define TOL_SWIGLU 4e-3

typedef struct {
    int32_t ctx[MAXL], batch[MAXL], group[MAXL], hd[MAXL], prefill[MAXL], rows[MAXL];
    int n_ctx, n_batch, n_group, n_hd, n_prefill, n_rows;
    bool bias_off, bias_on, scores_off, scores_on, gemm;
    long long kv_heads, gemm_lt;
    double max_gib;
    const char *peer, *peer_script, *python, *gemm_shape;
    bench_opts b;
    /* The lists and choices as given. */
    const char *ctx_s, *batch_s, *group_s, *hd_s, *prefill_s, *rows_s, *bias_s, *scores_s;
} opts;

static void help(FILE *fp)
{
    fprintf(fp,
            "usage: ckv bench attention [--device cuda] [options]\n\n"
            "Times the decoder's attention kernels (kernels/cuda_attention.cu; decode steps\n"
            "with groups up to 8 take the tensor-core kernels/cuda_attention_decode_mma.cu\n"
            "over bf16 lists and over fp32 ones of groups over 4, else the CUDA-core\n"
            "kernels/cuda_attention_decode.cu; prefills and larger groups the tensor-core\n"
            "kernels/cuda_attention_prefill.cu, TF32 over fp32 lists and bf16 over bf16\n"
            "ones) on random caches (fp32 or bf16 keys and values,\n"
            "--kv-dtype; fp32 degrees): decode steps (one query per sequence; a batch of B\n"
            "sequences is one launch with the batch folded into the heads) and causal\n"
            "prefills, with and without the degree bias, prefills also over lists that\n"
            "track H2O scores (--scores: the partial pass, the merge and the score pass);\n"
            "and the decoder's bf16 GEMMs at a model's projection shapes (cuBLAS,\n"
            "and at the few rows the decoder gives it also the GEMV of kernels/cuda_gemv.cu;\n"
            "the gate|up projection also with its SwiGLU, in the GEMV's epilogue or by a\n"
            "launch after cuBLAS).\n"
            "Each kernel is first checked against its CPU twin; on a\n"
            "mismatch nothing is timed and the exit status is 1. Per shape: the median of\n"
            "R timed runs (CUDA events) after W warm-up runs, each run alone (launched into\n"
            "an idle stream and waited for: the host's launch latency included), and the\n"
            "median of the same runs back to back (b2b: enqueued with an event between two\n"
            "and one wait at the end, as the decoder's graph runs its kernels; the SDPA\n"
            "peer likewise); decode shapes timed before prefills, each by fewest bytes read\n"
            "first (a shape timed after a larger cache was freed in the same process ran\n"
            "10-15%% slower; the /attention column timed gives each row's place, and the\n"
            "peer times its shapes in that order); inputs rotated over copies\n"
            "so that runs read device memory, not L2; bytes read (keys, values, degrees\n"
            "when biased), GB/s and %% of the copy bandwidth (--copy-rate); FLOPs, %% of %.0f\n"
            "TFLOP/s (measured bf16 matrix rate) and %% of %.0f TFLOP/s (%%tf32: dense TF32 is\n"
            "half the bf16 rate on Hopper; the reference for the TF32 prefill kernel, not\n"
            "measured). Checks allow rel. L2 %.0e where the TF32 kernel runs, %.0e where its\n"
            "bf16 form runs, %.0e elsewhere.\n"
            "Table on stdout, HDF5 file with /attention and\n"
            "/gemm tables and the date, device and command line as attributes.\n\n"
            "Options:\n"
            "  --device cuda       the GPU (the only device: there is no CPU variant)\n"
            "  --contexts LIST     decode context lengths (default 1024,4096,16384,32768,131072)\n"
            "  --batches LIST      decode batch sizes (default 1,8,64)\n"
            "  --groups LIST       query heads per KV head (default 4,8)\n"
            "  --head-dims LIST    64 and/or 128 (default 64,128)\n"
            "  --kv-heads N        KV heads per sequence (default 8)\n"
            "  --bias off|on|both  degree bias (default both)\n"
            "  --scores off|on|both  prefills over lists that track H2O scores (default off;\n"
            "                      FLOPs then count the score pass's q.k, bytes its keys)\n"
            "  --prefill LIST      causal prefill lengths, batch 1, or 'none'\n"
            "                      (default 1024,4096,16384)\n"
            "  --gemm-shape NAME   model whose projections the GEMMs take, or 'none'\n"
            "                      (default llama3.1-8b; also mistral-7b, smollm2-135m)\n"
            "  --gemm-rows LIST    GEMM rows (tokens) (default 1,8,64,512,4096; the GEMV\n"
            "                      and fused rows at those up to 8)\n"
            "  --gemm-lt K         also time cuBLASLt's first K heuristic candidates (0 to %d,\n"
            "                      default 0) of each plain product, rows lt1..ltK, each\n"
            "                      checked against cuBLAS's output on the same inputs\n"
            "                      (rel L2 <= %.0e) and described in the config column\n"
            "  --max-gib X         skip shapes whose cache exceeds X GiB (default 32; the\n"
            "                      SDPA peer skips those whose inputs do)\n"
            "  --warmup W          untimed runs per shape (default 5; prefill at most 2)\n"
            "  --repeats R         timed runs per shape (default 50; prefill at most 10)\n"
            "  --seed S            input seed (default 1)\n"
            "  --kv-dtype T        how the lists store keys and values: f32 (default) or bf16\n"
            "  --copy-rate R       the copy bandwidth in TB/s that %%copy divides by, or\n"
            "                      'measure' (default: %d MiB device-to-device copies on the\n"
            "                      GPU, bytes read and written, the median of %d after %d)\n"
            "  --out PATH          HDF5 file (default results/bench-attention.h5)\n"
            "  --peer sdpa         also time PyTorch SDPA at the same shapes (python3 with torch)\n"
            "                      and print our time over SDPA's (fp32: the same bytes; bf16)\n"
            "  --peer-script PATH  the peer (default harness/peers/sdpa_attention.py here, else\n"
            "                      under $CKV_SOURCE_ROOT)\n"
            "  --python PATH       interpreter for the peer (default python3)\n"
            "  -h, --help          this help\n",
            BENCH_MATMUL_FLOPS / 1e12, BENCH_TF32_FLOPS / 1e12,
            TOL_ATTN_TF32, TOL_ATTN_BF16, TOL_ATTN, MAX_LT, TOL_GEMM, BENCH_COPY_MIB,
            BENCH_COPY_REPEATS, BENCH_COPY_WARMUP);
}

/* An off|on|both choice of option opt: which of the two to measure; false
 * after a usage error. */
static bool off_on(const char *opt, const char *s, bool *off, bool *on)
{
    *off = !strcmp(s, "off") || !strcmp(s, "both");
    *on = !strcmp(s, "on") || !strcmp(s, "both");
    if (!*off && !*on)
        cli_usage_error("bench", "%s: '%s' (off, on or both)", opt, s);
    return *off || *on;
}

static int own_opt(void *p, int c, const char *arg)
{
    opts *o = p;
    bool ok = true;
    switch (c) {
    case 'c': o->ctx_s = arg; break;
    case 'b': o->batch_s = arg; break;
    case 'g': o->group_s = arg; break;
    case 'D': o->hd_s = arg; break;
    case 'k': ok = cli_int("bench", "--kv-heads", arg, 1, 1024, &o->kv_heads); break;
    case 'L': ok = cli_int("bench", "--gemm-lt", arg, 0, MAX_LT, &o->gemm_lt); break;
    case 'B': o->bias_s = arg; break;
    case 'A': o->scores_s = arg; break;
    case 'p': o->prefill_s = arg; break;
    case 'G': o->gemm_shape = arg; break;
    case 'n': o->rows_s = arg; break;
    case 'm': ok = cli_double("bench", "--max-gib", arg, 0.001, 1e6, &o->max_gib); break;
    case 'P': o->peer = arg; break;
    case 'S': o->peer_script = arg; break;
    case 'y': o->python = arg; break;
    default: return cli_usage_error("bench", "invalid option");
    }
    return ok ? CLI_OK : CLI_USAGE;
}

static int parse(int argc, char **argv, opts *o)
{
    static const struct option longopts[] = {
        {"contexts", required_argument, 0, 'c'},
        {"batches", required_argument, 0, 'b'},
        {"groups", required_argument, 0, 'g'},
        {"head-dims", required_argument, 0, 'D'},
        {"kv-heads", required_argument, 0, 'k'},
        {"bias", required_argument, 0, 'B'},
        {"prefill", required_argument, 0, 'p'},
        {"gemm-shape", required_argument, 0, 'G'},
        {"gemm-rows", required_argument, 0, 'n'},
        {"gemm-lt", required_argument, 0, 'L'},
        {"max-gib", required_argument, 0, 'm'},
        {"peer", required_argument, 0, 'P'},
        {"peer-script", required_argument, 0, 'S'},
        {"python", required_argument, 0, 'y'},
        {"scores", required_argument, 0, 'A'},
        BENCH_LONGOPT_DEVICE, BENCH_LONGOPT_WARMUP, BENCH_LONGOPT_REPEATS, BENCH_LONGOPT_SEED,
        BENCH_LONGOPT_OUT, BENCH_LONGOPT_KV_DTYPE, BENCH_LONGOPT_COPY_RATE, BENCH_LONGOPT_HELP,
        {0, 0, 0, 0},
    };
    *o = (opts){.b = {.what = "attention", .out = "results/bench-attention.h5", .warmup = 5,
                      .repeats = 50, .seed = 1, .max_repeats = 100000},
                .kv_heads = 8, .max_gib = 32, .python = "python3", .gemm_shape = "llama3.1-8b",
                .ctx_s = "1024,4096,16384,32768,131072", .batch_s = "1,8,64", .group_s = "4,8",
                .hd_s = "64,128", .prefill_s = "1024,4096,16384", .rows_s = "1,8,64,512,4096",
                .bias_s = "both", .scores_s = "off"};
    bench_copy_default(&o->b.copy);
    const int rc = bench_parse(argc, argv, longopts, &o->b, own_opt, o, help, 0);
    if (rc)
        return rc;
    if (!bench_int_list("--contexts", o->ctx_s, 1, 1 << 24, o->ctx, &o->n_ctx, MAXL) ||
        !bench_int_list("--batches", o->batch_s, 1, 4096, o->batch, &o->n_batch, MAXL) ||
        !bench_int_list("--groups", o->group_s, 1, 64, o->group, &o->n_group, MAXL) ||
        !bench_int_list("--head-dims", o->hd_s, 64, 128, o->hd, &o->n_hd, MAXL) ||
        !bench_int_list("--gemm-rows", o->rows_s, 1, 1 << 20, o->rows, &o->n_rows, MAXL))
        return CLI_USAGE;
    for (int i = 0; i < o->n_hd; i++)
        if (o->hd[i] != 64 && o->hd[i] != 128)
            return cli_usage_error("bench", "--head-dims: %d (the kernel has 64 and 128)",
                                   o->hd[i]);
    if (strcmp(o->prefill_s, "none") &&
        !bench_int_list("--prefill", o->prefill_s, 1, 1 << 20, o->prefill, &o->n_prefill, MAXL))
        return CLI_USAGE;
    if (!off_on("--bias", o->bias_s, &o->bias_off, &o->bias_on) ||
        !off_on("--scores", o->scores_s, &o->scores_off, &o->scores_on))
        return CLI_USAGE;
    o->gemm = strcmp(o->gemm_shape, "none") != 0;
    ckv_config cfg;
    ckv_error err = {0};
    if (o->gemm && ckv_model_preset(o->gemm_shape, &cfg, &err))
        return cli_usage_error("bench", "--gemm-shape: %s", err.msg);
    if (o->gemm_lt && !o->gemm)
        return cli_usage_error("bench", "--gemm-lt %lld: --gemm-shape none times no GEMMs",
                               o->gemm_lt);
    if (o->peer && strcmp(o->peer, "sdpa"))
        return cli_usage_error("bench", "--peer: '%s' (the only peer is sdpa)", o->peer);
    return CLI_OK;
}

#if CKV_HAVE_CUDA

/* One row of /attention. Times in microseconds; NaN where not run. */
typedef struct {
    char *kind;  /* "decode" or "prefill" */
    char *kernel;  /* the kernel (prefill: its form) that ran */
    char *kv_dtype;  /* f32 or bf16 */
    int32_t batch, kv_heads, group, head_dim, context, queries, degree_bias;
    int32_t scores; /* the lists track H2O scores (prefill rows) */
    double median_us, min_us, max_us; /* each run alone (ckv_bench_timing) */
    double stream_us;                 /* the median back to back */
    int32_t runs, input_sets;
    int32_t timed; /* its place among the rows timed (time_all), 1, 2, ...; 0: not timed */
    double bytes, gbps, pct_copy, pct_copy_stream, flops, tflops, pct_matmul, pct_tf32;
    double sdpa_fp32_us, sdpa_bf16_us, sdpa_fp32_stream_us, sdpa_bf16_stream_us;
    char *sdpa_fp32_backend, *sdpa_bf16_backend;
    char *status;  /* "ok" or "skipped: why"; points at note */
    char note[128];
    ckv_kv_dtype dtype; /* what kv_dtype names (not a column) */
} attn_row;

#define FA(n, t) {#n, offsetof(attn_row, n), t}
static const ckv_h5_field attn_fields[] = {
    FA(kind, CKV_H5_STR), FA(kernel, CKV_H5_STR), FA(kv_dtype, CKV_H5_STR), FA(batch, CKV_H5_I32),
    FA(kv_heads, CKV_H5_I32), FA(group, CKV_H5_I32), FA(head_dim, CKV_H5_I32),
    FA(context, CKV_H5_I32), FA(queries, CKV_H5_I32), FA(degree_bias, CKV_H5_I32),
    FA(scores, CKV_H5_I32),
    FA(median_us, CKV_H5_F64), FA(min_us, CKV_H5_F64), FA(max_us, CKV_H5_F64),
    FA(stream_us, CKV_H5_F64), FA(runs, CKV_H5_I32), FA(input_sets, CKV_H5_I32),
    FA(timed, CKV_H5_I32),
    FA(bytes, CKV_H5_F64), FA(gbps, CKV_H5_F64), FA(pct_copy, CKV_H5_F64),
    FA(pct_copy_stream, CKV_H5_F64), FA(flops, CKV_H5_F64), FA(tflops, CKV_H5_F64),
    FA(pct_matmul, CKV_H5_F64), FA(pct_tf32, CKV_H5_F64), FA(sdpa_fp32_us, CKV_H5_F64),
    FA(sdpa_bf16_us, CKV_H5_F64), FA(sdpa_fp32_stream_us, CKV_H5_F64),
    FA(sdpa_bf16_stream_us, CKV_H5_F64), FA(sdpa_fp32_backend, CKV_H5_STR),
    FA(sdpa_bf16_backend, CKV_H5_STR), FA(status, CKV_H5_STR),
};
#undef FA

typedef struct {
    char *name;  /* the projection: qkv, o, gate_up, down, lm_head */
    char *path;  /* cublas, gemv; gate_up also: cublas+swiglu, gemv+swiglu (SwiGLU output);
                    lt1.. cuBLASLt's candidates of the plain product (--gemm-lt) */
    char *config; /* an lt row's candidate (ckv_gemm_lt_name), else "" */
    int32_t rows, in, out;
    double median_us, min_us, max_us; /* each run alone (ckv_bench_timing) */
    double stream_us;                 /* the median back to back */
    int32_t runs, input_sets;
    double flops, tflops, pct_matmul, bytes, gbps, pct_copy, pct_copy_stream;
    ckv_gemm_path via; /* what path names (not a column) */
    bool swiglu;
    int32_t lt;          /* ckv_gemm_case.lt */
    char config_buf[160]; /* config's storage */
} gemm_row;

#define FG(n, t) {#n, offsetof(gemm_row, n), t}
static const ckv_h5_field gemm_fields[] = {
    FG(name, CKV_H5_STR), FG(path, CKV_H5_STR), FG(config, CKV_H5_STR), FG(rows, CKV_H5_I32), FG(in, CKV_H5_I32), FG(out, CKV_H5_I32),
    FG(median_us, CKV_H5_F64), FG(min_us, CKV_H5_F64), FG(max_us, CKV_H5_F64),
    FG(stream_us, CKV_H5_F64), FG(runs, CKV_H5_I32), FG(input_sets, CKV_H5_I32),
    FG(flops, CKV_H5_F64), FG(tflops, CKV_H5_F64), FG(pct_matmul, CKV_H5_F64),
    FG(bytes, CKV_H5_F64), FG(gbps, CKV_H5_F64), FG(pct_copy, CKV_H5_F64),
    FG(pct_copy_stream, CKV_H5_F64),
};
#undef FG
#define NF(a) (sizeof a / sizeof a[0])

/* Bytes the kernel must read: keys and values as stored, and fp32 degrees
 * when the bias is on (queries and outputs are under 0.1% at every shape);
 * with scores the score pass's keys once more. */
static double attn_bytes(const attn_row *r)
{
    return (double)r->batch * r->kv_heads * r->context *
           ((2.0 + r->scores) * r->head_dim * ckv_kv_dtype_size(r->dtype) +
            4.0 * r->degree_bias);
}

/* Two products (q.k and p.v) of 2 head_dim FLOPs per query head and visible
 * entry, with scores a third (the score pass's q.k); query i of n sees
 * context - n + i + 1 entries. */
static double attn_flops(const attn_row *r)
{
    const double n = r->queries, visible = n * (r->context - n) + n * (n + 1) / 2;
    return (4.0 + 2.0 * r->scores) * r->head_dim * r->batch * r->kv_heads * r->group * visible;
}

/* Row r of the grid: a decode step (batch b, context t) or a prefill (of
 * length t, batch 1), head_dim a, group g, scores sc, bias. */
static void grid_row(attn_row *r, const opts *o, bool prefill, int a, int g, int b, int t, int sc,
                     int bias)
{
    r->kind = prefill ? "prefill" : "decode";
    r->dtype = o->b.kv_dtype;
    r->kv_dtype = (char *)ckv_kv_dtype_name(o->b.kv_dtype);
    r->batch = prefill ? 1 : o->batch[b];
    r->kv_heads = (int32_t)o->kv_heads;
    r->group = o->group[g];
    r->head_dim = o->hd[a];
    r->context = prefill ? o->prefill[t] : o->ctx[t];
    r->queries = prefill ? r->context : 1;
    r->degree_bias = bias;
    r->scores = sc;
    r->median_us = r->min_us = r->max_us = r->stream_us = NAN;
    r->gbps = r->pct_copy = r->pct_copy_stream = r->tflops = r->pct_matmul = NAN;
    r->pct_tf32 = NAN;
    r->sdpa_fp32_us = r->sdpa_bf16_us = r->sdpa_fp32_stream_us = r->sdpa_bf16_stream_us = NAN;
    r->sdpa_fp32_backend = r->sdpa_bf16_backend = "";
    r->bytes = attn_bytes(r);
    r->flops = attn_flops(r);
    r->status = r->note;
    snprintf(r->note, sizeof r->note, "not run");
}

/* The grid, decode then prefill, each ordered head_dim, group, batch,
 * context, scores (prefill only), bias (so the two bias settings of a shape
 * are adjacent). */
static attn_row *make_grid(const opts *o, size_t *n)
{
    const int nb = o->bias_off + o->bias_on, ns = o->scores_off + o->scores_on;
    const size_t max =
        (size_t)o->n_hd * o->n_group * nb * (o->n_batch * o->n_ctx + ns * o->n_prefill);
    attn_row *rows = calloc(max ? max : 1, sizeof *rows);
    if (!rows)
        return NULL;
    *n = 0;
    for (int pass = 0; pass < 2; pass++) {
        const int sc_first = pass ? !o->scores_off : 0, sc_last = pass && o->scores_on;
        for (int a = 0; a < o->n_hd; a++)
            for (int g = 0; g < o->n_group; g++)
                for (int b = 0; b < (pass ? 1 : o->n_batch); b++)
                    for (int t = 0; t < (pass ? o->n_prefill : o->n_ctx); t++)
                        for (int sc = sc_first; sc <= sc_last; sc++)
                            for (int bias = !o->bias_off; bias <= (int)o->bias_on; bias++)
                                grid_row(&rows[(*n)++], o, pass, a, g, b, t, sc, bias);
    }
    return rows;
}

static ckv_attn_shape shape_of(const attn_row *r)
{
    ckv_attn_shape s = {r->batch,   r->kv_heads, r->group,
                        r->head_dim, r->context, r->queries,
                        r->degree_bias != 0, r->dtype, r->scores != 0};
    return s;
}

enum { MAX_CHECKS = 64 };

static const char *gemm_path_name(ckv_gemm_path p, bool swiglu)
{
    if (p == CKV_GEMM_GEMV)
        return swiglu ? "gemv+swiglu" : "gemv";
    return swiglu ? "cublas+swiglu" : "cublas";
}

/* Checks every (kind, head_dim, group, bias) the grid times on a small shape
 * of it; appends a summary to `log`. False when one fails. */
static bool run_checks(ckv_bench_gpu *b, const opts *o, const attn_row *rows, size_t n,
                       char *log, size_t log_size, ckv_error *err, bool *fatal)
{
    ckv_attn_shape done[MAX_CHECKS];
    int n_done = 0;
    bool ok = true;
    *fatal = false;
    for (size_t i = 0; i < n; i++) {
        const bool prefill = rows[i].queries > 1;
        ckv_attn_shape s = {prefill ? 1 : 2,       rows[i].kv_heads,       rows[i].group,
                            rows[i].head_dim,      prefill ? 1024 : 4096, prefill ? 256 : 1,
                            rows[i].degree_bias != 0, rows[i].dtype, rows[i].scores != 0};
        int j = 0;
        while (j < n_done && !(done[j].queries == s.queries && done[j].group == s.group &&
                               done[j].head_dim == s.head_dim &&
                               done[j].degree_bias == s.degree_bias &&
                               done[j].scores == s.scores))
            j++;
        if (j < n_done || n_done == MAX_CHECKS)
            continue;
        done[n_done++] = s;
        double e;
        if (ckv_bench_attention_check(b, &s, (uint64_t)o->b.seed + 100, &e, err)) {
            *fatal = true;
            return false;
        }
        /* ckv_bench_attention_check's launch: the batch folded into the heads. */
        const int32_t lists = s.batch * s.n_head_kv;
        const ckv_k_attention_path path =
            ckv_k_attention_path_of(s.queries, false, lists * s.group, lists, s.dtype);
        const double tol = path == CKV_ATTN_PREFILL_TF32   ? TOL_ATTN_TF32
                           : path == CKV_ATTN_PREFILL_BF16 ? TOL_ATTN_BF16
                                                           : TOL_ATTN;
        const bool pass = e <= tol;
        ok &= pass;
        printf("check %-7s %s batch %d kv %d group %d hd %3d ctx %d queries %d bias %-3s%s "
               "(%s): rel L2 %.2e (tol %.0e) %s\n",
               prefill ? "prefill" : "decode", ckv_kv_dtype_name(s.dtype), s.batch, s.n_head_kv,
               s.group, s.head_dim, s.context, s.queries, s.degree_bias ? "on" : "off",
               s.scores ? " scores" : "", ckv_k_attention_path_name(path), e, tol,
               pass ? "ok" : "MISMATCH");
        snprintf(log + strlen(log), log_size - strlen(log), "%s%s hd%d g%d bias %s%s: %.2e",
                 *log ? "; " : "", prefill ? "prefill" : "decode", s.head_dim, s.group,
                 s.degree_bias ? "on" : "off", s.scores ? " scores" : "", e);
    }
    /* Every GEMM path the table times, on small shapes (one GEMV width
     * ending inside a 32-column chunk, one output not a whole row group). */
    static const ckv_gemm_case gc[] = {
        {CKV_GEMM_CUBLAS, false, 8, 4096, 512, 0}, {CKV_GEMM_GEMV, false, 8, 4096, 512, 0},
        {CKV_GEMM_GEMV, false, 3, 200, 968, 0},    {CKV_GEMM_CUBLAS, true, 8, 576, 3072, 0},
        {CKV_GEMM_GEMV, true, 8, 576, 3072, 0},
    };
    for (size_t i = 0; o->gemm && i < sizeof gc / sizeof gc[0]; i++) {
        double e;
        if (ckv_bench_gemm_check(b, &gc[i], (uint64_t)o->b.seed + 200 + i, &e, err)) {
            *fatal = true;
            return false;
        }
        const double tol = gc[i].swiglu ? TOL_SWIGLU : TOL_GEMM;
        const bool pass = e <= tol;
        ok &= pass;
        const char *path = gemm_path_name(gc[i].path, gc[i].swiglu);
        printf("check gemm %-13s %d x %d -> %d: rel L2 %.2e (tol %.0e) %s\n", path, gc[i].n,
               gc[i].in, gc[i].out, e, tol, pass ? "ok" : "MISMATCH");
        snprintf(log + strlen(log), log_size - strlen(log), "; gemm %s %dx%d->%d: %.2e", path,
                 gc[i].n, gc[i].in, gc[i].out, e);
    }
    fflush(stdout);
    return ok;
}

static bool same_shape(json_t *j, const attn_row *r)
{
    const char *kind = json_string_value(json_object_get(j, "kind"));
    return kind && !strcmp(kind, r->kind) && !r->scores &&
           json_integer_value(json_object_get(j, "batch")) == r->batch &&
           json_integer_value(json_object_get(j, "kv_heads")) == r->kv_heads &&
           json_integer_value(json_object_get(j, "group")) == r->group &&
           json_integer_value(json_object_get(j, "head_dim")) == r->head_dim &&
           json_integer_value(json_object_get(j, "context")) == r->context &&
           json_integer_value(json_object_get(j, "queries")) == r->queries &&
           json_integer_value(json_object_get(j, "bias")) == r->degree_bias;
}

/* Runs the SDPA peer on the rows timed here and fills their sdpa columns.
 * Leaves a note for the table ("" when it ran); the backend strings are
 * owned by `keep` (freed by the caller). */
static void run_peer(const opts *o, attn_row *rows, size_t n, char *note, size_t note_size,
                     json_t **keep)
{
    bench_peer p;
    *keep = NULL;
    if (!bench_peer_open(&p, "sdpa", note, note_size))
        return;
    char csv[128], args[512];
    bench_peer_path(&p, "shapes.csv", csv, sizeof csv);
    FILE *f = fopen(csv, "w");
    if (!f) {
        snprintf(note, note_size, "sdpa not run: cannot write %s", csv);
        bench_peer_close(&p);
        return;
    }
    fprintf(f, "kind,batch,kv_heads,group,head_dim,context,queries,bias\n");
    /* In the order the rows were timed (time_all), which the peer keeps:
     * place k - 1 of `at` holds the row timed k-th. */
    size_t *at = malloc((n ? n : 1) * sizeof *at), m = 0;
    for (size_t i = 0; at && i < n; i++)
        if (rows[i].timed > 0 && (size_t)rows[i].timed <= n) {
            at[rows[i].timed - 1] = i;
            m++;
        }
    for (size_t k = 0; at && k < m; k++) {
        const attn_row *r = &rows[at[k]];
        if (!strcmp(r->status, "ok") && !r->scores)
            fprintf(f, "%s,%d,%d,%d,%d,%d,%d,%d\n", r->kind, r->batch, r->kv_heads, r->group,
                    r->head_dim, r->context, r->queries, r->degree_bias);
    }
    free(at);
    if (fclose(f) || !at) {
        snprintf(note, note_size, "sdpa not run: cannot write %s", csv);
        bench_peer_close(&p);
        return;
    }
    snprintf(args, sizeof args,
             "--shapes '%s' --warmup %lld --repeats %lld --seed %lld --max-gib %g --copy-bps %.6g",
             csv, o->b.warmup, o->b.repeats, o->b.seed, o->max_gib, o->b.copy.bps);
    json_t *root = bench_peer_run(
        &p, "sdpa", o->python, bench_peer_script(o->peer_script, "harness/peers/sdpa_attention.py"),
        args, note, note_size);
    bench_peer_close(&p);
    if (!root)
        return;
    size_t k;
    json_t *j;
    json_array_foreach(root, k, j)
    {
        const char *dtype = json_string_value(json_object_get(j, "dtype"));
        json_t *us = json_object_get(j, "median_us"), *sus = json_object_get(j, "stream_us");
        const char *backend = json_string_value(json_object_get(j, "backend"));
        if (!dtype)
            continue;
        for (size_t i = 0; i < n; i++) {
            if (!same_shape(j, &rows[i]))
                continue;
            const bool f32 = !strcmp(dtype, "fp32");
            double *dst = f32 ? &rows[i].sdpa_fp32_us : &rows[i].sdpa_bf16_us;
            double *sdst = f32 ? &rows[i].sdpa_fp32_stream_us : &rows[i].sdpa_bf16_stream_us;
            *dst = json_is_number(us) ? json_number_value(us) : NAN;
            *sdst = json_is_number(sus) ? json_number_value(sus) : NAN;
            *(f32 ? &rows[i].sdpa_fp32_backend : &rows[i].sdpa_bf16_backend) =
                (char *)(backend ? backend : "");
        }
    }
    *keep = root;
}

static void print_attention(const attn_row *rows, size_t n, bool peer, const char *peer_note)
{
    printf("\n%%mm: of the measured bf16 matrix rate (%.0f TFLOP/s), the ceiling of the prefill\n"
           "kernel's bf16 form (bf16 lists); %%tf32: of half of it (%.0f TFLOP/s, dense TF32 on\n"
           "Hopper, not measured), the ceiling of its TF32 form (fp32 lists)\n",
           BENCH_MATMUL_FLOPS / 1e12, BENCH_TF32_FLOPS / 1e12);
    printf("%-7s %3s %3s %3s %3s %7s %6s %4s %3s %10s %10s %10s %10s %9s %7s %6s %6s %8s %5s %6s",
           "kind", "B", "KV", "grp", "hd", "ctx", "q", "bias", "sc", "median us", "min us",
           "max us", "b2b us", "MB read", "GB/s", "%copy", "%b2b", "TFLOP/s", "%mm", "%tf32");
    if (peer)
        printf(" %10s %7s %7s %10s %7s %7s  %s", "sdpa32 us", "us/32", "b2b/32", "sdpa16 us",
               "us/16", "b2b/16", "backends 32/16");
    printf("\n");
    for (size_t i = 0; i < n; i++) {
        const attn_row *r = &rows[i];
        printf("%-7s %3d %3d %3d %3d %7d %6d %4s %3s", r->kind, r->batch, r->kv_heads, r->group,
               r->head_dim, r->context, r->queries, r->degree_bias ? "on" : "off",
               r->scores ? "on" : "off");
        if (strcmp(r->status, "ok")) {
            printf(" %s\n", r->status);
            continue;
        }
        printf(" %10.1f %10.1f %10.1f %10.1f %9.1f %7.0f %6.1f %6.1f %8.2f %5.1f %6.1f",
               r->median_us, r->min_us, r->max_us, r->stream_us, r->bytes / 1e6, r->gbps,
               r->pct_copy, r->pct_copy_stream, r->tflops, r->pct_matmul, r->pct_tf32);
        if (peer && peer_note[0])
            printf(" %s", peer_note);
        else if (peer)
            printf(" %10.1f %7.2f %7.2f %10.1f %7.2f %7.2f  %s/%s", r->sdpa_fp32_us,
                   r->median_us / r->sdpa_fp32_us, r->stream_us / r->sdpa_fp32_stream_us,
                   r->sdpa_bf16_us, r->median_us / r->sdpa_bf16_us,
                   r->stream_us / r->sdpa_bf16_stream_us,
                   r->sdpa_fp32_backend[0] ? r->sdpa_fp32_backend : "-",
                   r->sdpa_bf16_backend[0] ? r->sdpa_bf16_backend : "-");
        printf("\n");
    }
}

/* The cuBLAS row a GEMV row is compared with: same matrix and rows, the
 * cuBLAS path of the same input (plain or SwiGLU). */
static const gemm_row *gemm_baseline(const gemm_row *g, size_t n, const gemm_row *r)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(g[i].name, r->name) && g[i].rows == r->rows &&
            g[i].via == CKV_GEMM_CUBLAS && !g[i].lt && g[i].swiglu == r->swiglu)
            return &g[i];
    return NULL;
}

static void print_gemm(const gemm_row *g, size_t n, const char *shape)
{
    printf("\nGEMM (%s projections, bf16 x bf16 -> fp32; cuBLAS and the GEMV of\n"
           "kernels/cuda_gemv.cu; gate_up with its SwiGLU: cublas+swiglu is two launches,\n"
           "gemv+swiglu one; lt1..: cuBLASLt's candidates, described after the row;\n"
           "\"vs cublas\": cuBLAS's time over this one)\n",
           shape);
    printf("%-8s %-13s %6s %6s %7s %10s %10s %10s %10s %8s %5s %7s %6s %6s %9s\n", "matrix",
           "path", "rows", "in", "out", "median us", "min us", "max us", "b2b us", "TFLOP/s",
           "%mm", "GB/s", "%copy", "%b2b", "vs cublas");
    for (size_t i = 0; i < n; i++) {
        const gemm_row *base = gemm_baseline(g, n, &g[i]);
        printf("%-8s %-13s %6d %6d %7d %10.1f %10.1f %10.1f %10.1f %8.1f %5.1f %7.0f %6.1f %6.1f",
               g[i].name, g[i].path, g[i].rows, g[i].in, g[i].out, g[i].median_us, g[i].min_us,
               g[i].max_us, g[i].stream_us, g[i].tflops, g[i].pct_matmul, g[i].gbps,
               g[i].pct_copy, g[i].pct_copy_stream);
        if (base && (g[i].via == CKV_GEMM_GEMV || g[i].lt))
            printf(" %9.2f", base->median_us / g[i].median_us);
        printf(g[i].lt ? "  %s\n" : "\n", g[i].config);
    }
}

/* The attention targets, counted over the decode rows timed here:
 * with the bias, no slower than SDPA with its mask (fp32: the same bytes;
 * bf16: the reference), and >= 90% of copy bandwidth wherever at
 * least 256 MB of cache is read. Each by the runs alone (the headline, as
 * the SDPA numbers were timed) and back to back. */
static void print_targets(const attn_row *rows, size_t n, bool peer, const bench_copy *copy)
{
    /* [0] alone, [1] back to back (a peer script without stream_us times only alone) */
    int fast32[2] = {0}, fast16[2] = {0}, timed32[2] = {0}, timed16[2] = {0}, big = 0,
        big_ok[2] = {0}, big_ref[2] = {0};
    const double to_ref = bench_to_reference(copy);
    for (size_t i = 0; i < n; i++) {
        const attn_row *r = &rows[i];
        if (strcmp(r->status, "ok") || r->queries != 1)
            continue;
        if (r->bytes >= 256e6) {
            big++;
            big_ok[0] += r->pct_copy >= 90;
            big_ok[1] += r->pct_copy_stream >= 90;
            big_ref[0] += r->pct_copy * to_ref >= 90;
            big_ref[1] += r->pct_copy_stream * to_ref >= 90;
        }
        if (!r->degree_bias)
            continue;
        timed32[0] += !isnan(r->sdpa_fp32_us);
        fast32[0] += r->median_us <= r->sdpa_fp32_us;
        timed32[1] += !isnan(r->sdpa_fp32_stream_us);
        fast32[1] += r->stream_us <= r->sdpa_fp32_stream_us;
        timed16[0] += !isnan(r->sdpa_bf16_us);
        fast16[0] += r->median_us <= r->sdpa_bf16_us;
        timed16[1] += !isnan(r->sdpa_bf16_stream_us);
        fast16[1] += r->stream_us <= r->sdpa_bf16_stream_us;
    }
    printf("\ntargets (decode; each run alone, and back to back):\n");
    printf("  >= 90%% of copy bandwidth (%.3f TB/s, %s) where >= 256 MB is read: %d of %d "
           "shapes (b2b %d)\n",
           copy->bps / 1e12, copy->measure ? "measured" : "given", big_ok[0], big, big_ok[1]);
    printf("  the same at %.2f TB/s (the H200's, issue 7's reference): %d of %d shapes (b2b %d)\n",
           BENCH_REFERENCE_BPS / 1e12, big_ref[0], big, big_ref[1]);
    if (peer) {
        printf("  biased, no slower than SDPA fp32 with a mask: %d of %d shapes (b2b %d of %d)\n",
               fast32[0], timed32[0], fast32[1], timed32[1]);
        printf("  biased, no slower than SDPA bf16 with a mask: %d of %d shapes (b2b %d of %d)\n",
               fast16[0], timed16[0], fast16[1], timed16[1]);
    }
}

/* The timing columns of an attention or GEMM row r (both name them alike)
 * from t: times in us; the rates by the runs alone, % of copy also by the
 * back-to-back median. */
#define FILL_TIMING(r, t, copy_bps)                                                        \
    do {                                                                                   \
        const double s_ = (t).median_ms * 1e-3;                                            \
        (r)->median_us = (t).median_ms * 1e3;                                              \
        (r)->min_us = (t).min_ms * 1e3;                                                    \
        (r)->max_us = (t).max_ms * 1e3;                                                    \
        (r)->stream_us = (t).stream_ms * 1e3;                                              \
        (r)->runs = (t).runs;                                                              \
        (r)->input_sets = (t).input_sets;                                                  \
        (r)->gbps = (r)->bytes / s_ / 1e9;                                                 \
        (r)->pct_copy = 100.0 * (r)->bytes / s_ / (copy_bps);                              \
        (r)->pct_copy_stream = 100.0 * (r)->bytes / ((t).stream_ms * 1e-3) / (copy_bps);   \
        (r)->tflops = (r)->flops / s_ / 1e12;                                              \
        (r)->pct_matmul = 100.0 * (r)->flops / s_ / BENCH_MATMUL_FLOPS;                    \
    } while (0)

/* The GEMMs of one layer's projections and the output matrix: cuBLAS at
 * every row count, the GEMV too up to CKV_GEMV_MAX_ROWS rows, and for the
 * gate|up projection at those rows its SwiGLU output both ways; then
 * --gemm-lt's cuBLASLt candidates of each plain product. */
enum { GEMM_PER_SHAPE = 4, GEMM_MAX = 5 * MAXL * (GEMM_PER_SHAPE + MAX_LT) };

static size_t make_gemm(const opts *o, gemm_row *g)
{
    static const char *const lt_path[MAX_LT] = {"lt1", "lt2", "lt3", "lt4",
                                                "lt5", "lt6", "lt7", "lt8"};
    ckv_config c;
    ckv_error err = {0};
    if (!o->gemm || ckv_model_preset(o->gemm_shape, &c, &err))
        return 0;
    const int32_t E = c.n_embd, qd = c.n_head * c.head_dim, kvd = c.n_head_kv * c.head_dim;
    const struct {
        const char *name;
        int32_t in, out;
    } m[5] = {{"qkv", E, qd + 2 * kvd}, {"o", qd, E}, {"gate_up", E, 2 * c.n_ff},
              {"down", c.n_ff, E}, {"lm_head", E, c.n_vocab}};
    static const ckv_gemm_path via[GEMM_PER_SHAPE] = {CKV_GEMM_CUBLAS, CKV_GEMM_GEMV,
                                                       CKV_GEMM_CUBLAS, CKV_GEMM_GEMV};
    size_t n = 0;
    for (int i = 0; i < 5; i++)
        for (int r = 0; r < o->n_rows; r++)
            for (int p = 0; p < GEMM_PER_SHAPE + o->gemm_lt; p++) {
                const bool few = o->rows[r] <= CKV_GEMV_MAX_ROWS, lt = p >= GEMM_PER_SHAPE,
                           swiglu = p >= 2 && !lt;
                if (!lt && ((p > 0 && !few) || (swiglu && strcmp(m[i].name, "gate_up"))))
                    continue;
                gemm_row *x = &g[n++];
                memset(x, 0, sizeof *x);
                x->name = (char *)m[i].name;
                x->via = lt ? CKV_GEMM_CUBLAS : via[p];
                x->swiglu = swiglu;
                x->lt = lt ? p - GEMM_PER_SHAPE + 1 : 0;
                x->path = lt ? (char *)lt_path[x->lt - 1] : (char *)gemm_path_name(via[p], swiglu);
                x->config = x->config_buf;
                x->rows = o->rows[r];
                x->in = m[i].in;
                x->out = m[i].out;
                x->flops = 2.0 * x->rows * x->in * x->out;
                /* bf16 weights and inputs read once, fp32 outputs (bf16
                 * SwiGLU values, half as many) written once */
                x->bytes = 2.0 * x->in * x->out + 2.0 * x->rows * x->in +
                           (swiglu ? 1.0 : 4.0) * x->rows * x->out;
            }
    return n;
}

/* Row a's place before row b's in the timing order: decode rows before
 * prefill rows (a prefill's queries and outputs, which its bytes leave
 * out, can outweigh its cache), each by fewer bytes read, then in the
 * grid's order. */
static int by_bytes(const void *a, const void *b)
{
    const attn_row *x = *(const attn_row *const *)a, *y = *(const attn_row *const *)b;
    const int px = x->queries > 1, py = y->queries > 1;
    if (px != py)
        return px - py;
    return x->bytes != y->bytes ? (x->bytes > y->bytes) - (x->bytes < y->bytes)
                                : (x > y) - (x < y);
}

/* The grid is timed smallest first (by_bytes): in a process that has made
 * and freed a larger cache, a later, smaller shape ran 10-15% slower
 * (batch 1 at 32K and 128K after batch 64 at 128K; not the clock, which
 * held, and a fresh process was fast at once: ZZ135, ZZ137). Each row keeps
 * its grid index's seed. */
static ckv_status time_all(ckv_bench_gpu *b, const opts *o, attn_row *rows, size_t n,
                           gemm_row *g, size_t n_gemm, ckv_error *err)
{
    attn_row **order = malloc((n ? n : 1) * sizeof *order);
    if (!order)
        return ckv_errorf(err, CKV_ERR_NOMEM, "bench: out of memory");
    for (size_t i = 0; i < n; i++)
        order[i] = &rows[i];
    qsort(order, n, sizeof *order, by_bytes);
    int32_t placed = 0;  /* rows timed so far: the places run 1, 2, ... without gaps */
    for (size_t k = 0; k < n; k++) {
        attn_row *r = order[k];
        const size_t i = (size_t)(r - rows);
        r->status = r->note;
        snprintf(r->note, sizeof r->note, "ok");
        if (r->bytes > o->max_gib * (double)(1u << 30)) {
            snprintf(r->note, sizeof r->note, "skipped: cache %.1f GiB > --max-gib %g",
                     r->bytes / (1u << 30), o->max_gib);
            continue;
        }
        ckv_attn_shape s = shape_of(r);
        ckv_bench_timing t;
        /* A prefill runs for milliseconds to a quarter second with little spread. */
        const bool prefill = r->queries > 1;
        const int32_t warmup = (int32_t)(prefill && o->b.warmup > 2 ? 2 : o->b.warmup),
                      repeats = (int32_t)(prefill && o->b.repeats > 10 ? 10 : o->b.repeats);
        ckv_status st =
            ckv_bench_attention(b, &s, warmup, repeats, (uint64_t)o->b.seed + i, &t, err);
        if (st) {
            free(order);
            return st;
        }
        r->timed = ++placed;
        FILL_TIMING(r, t, o->b.copy.bps);
        r->pct_tf32 = 100.0 * r->tflops * 1e12 / BENCH_TF32_FLOPS;
        r->kernel = (char *)t.kernel;
        fprintf(stderr,
                "ckv bench: %s B %d group %d hd %d ctx %d bias %s (%s): %.1f us (b2b %.1f)\n",
                r->kind, r->batch, r->group, r->head_dim, r->context,
                r->degree_bias ? "on" : "off", r->kernel, r->median_us, r->stream_us);
    }
    free(order);
    char names[MAX_LT][160];
    int32_t found = 0;
    for (size_t i = 0; i < n_gemm; i++) {
        gemm_row *x = &g[i];
        ckv_bench_timing t;
        const ckv_gemm_case c = {x->via, x->swiglu, x->rows, x->in, x->out, x->lt};
        ckv_status st;
        if (x->lt == 1 && (st = ckv_bench_gemm_lt_names(b, &c, (int32_t)o->gemm_lt, &found,
                                                        names, err)))
            return st;
        if (x->lt > found) {
            snprintf(x->config_buf, sizeof x->config_buf, "none: cuBLASLt gave %d", found);
            x->median_us = x->min_us = x->max_us = x->stream_us = x->gbps = x->tflops = NAN;
            x->pct_copy = x->pct_copy_stream = x->pct_matmul = NAN;
            continue;
        }
        if (x->lt) {
            snprintf(x->config_buf, sizeof x->config_buf, "%s", names[x->lt - 1]);
            double e;
            if ((st = ckv_bench_gemm_lt_check(b, &c, (uint64_t)o->b.seed + 300 + i, &e, err)))
                return st;
            if (!(e <= TOL_GEMM))
                return ckv_errorf(err, CKV_ERR_DEVICE,
                                  "cuBLASLt's candidate %d (%s) of %s at %d rows: rel L2 %.2e "
                                  "against cuBLAS, over %.0e",
                                  x->lt, x->config, x->name, x->rows, e, TOL_GEMM);
        }
        if ((st = ckv_bench_gemm(b, &c, (int32_t)o->b.warmup, (int32_t)o->b.repeats,
                                 (uint64_t)o->b.seed + 1000 + i, &t, err)))
            return st;
        FILL_TIMING(x, t, o->b.copy.bps);
    }
    return CKV_OK;
}

static int run(int argc, char **argv, opts *o)
{
    ckv_error err = {0};
    ckv_cuda_device dev;
    if (!bench_gpu(&dev) || bench_copy_resolve(&o->b.copy))
        return CLI_FAIL;
    size_t n = 0;
    attn_row *rows = make_grid(o, &n);
    gemm_row *gemm = calloc(GEMM_MAX, sizeof *gemm);
    const size_t n_gemm = gemm ? make_gemm(o, gemm) : 0;
    char *cmdline = bench_command_line(argc, argv);
    if (!rows || !gemm || !cmdline) {
        free(rows);
        free(gemm);
        free(cmdline);
        fprintf(stderr, "ckv bench: out of memory\n");
        return CLI_FAIL;
    }
    ckv_bench_gpu *b = NULL;
    json_t *peer_json = NULL;
    int rc = CLI_OK;
    char checks[4096] = "", peer_note[768] = "";
    bool fatal = false;
    char date[32];
    bench_utc_now(date);
    printf("device: %s (%d SMs, %.1f GiB, %.2f TB/s peak); %s; prefill attention: %s\n"
           "copy rate: %.3f TB/s (%s): %%copy divides by it\n",
           dev.name, dev.sm_count, (double)dev.mem_total / (1 << 30), dev.peak_bw / 1e12, date,
           bench_prefill_form(o->b.kv_dtype), o->b.copy.bps / 1e12, o->b.copy.source);
    if (ckv_bench_gpu_create(&b, 0, &err)) {
        rc = cli_fail("bench", &err);
    } else if (!run_checks(b, o, rows, n, checks, sizeof checks, &err, &fatal)) {
        if (fatal)
            rc = cli_fail("bench", &err);
        else {
            fprintf(stderr, "ckv bench: a kernel does not match its CPU twin: no timings "
                            "reported\n");
            rc = CLI_FAIL;
        }
    } else if (time_all(b, o, rows, n, gemm, n_gemm, &err)) {
        rc = cli_fail("bench", &err);
    }
    ckv_bench_gpu_free(b);
    if (!rc) {
        if (o->peer)
            run_peer(o, rows, n, peer_note, sizeof peer_note, &peer_json);
        print_attention(rows, n, o->peer != NULL, peer_note);
        if (n_gemm)
            print_gemm(gemm, n_gemm, o->gemm_shape);
        print_targets(rows, n, o->peer != NULL, &o->b.copy);
        const char *peer = !o->peer ? "none" : peer_note[0] ? peer_note : "sdpa";
        char copy_bps[32];
        snprintf(copy_bps, sizeof copy_bps, "%.6g", o->b.copy.bps);
        const char *attrs[] = {"format", "ckv-bench-attention", "version", "1", "date", date,
                               "device", dev.name, "command", cmdline, "git_rev", CKV_GIT_REV,
                               "copy_bandwidth_Bps", copy_bps, "copy_bandwidth_source",
                               o->b.copy.source, "matmul_peak_flops", "7.5e14",
                               "tf32_peak_flops", "3.75e14",
                               "checks", checks, "peer", peer, "kv_dtype",
                               ckv_kv_dtype_name(o->b.kv_dtype), "prefill_form",
                               bench_prefill_form(o->b.kv_dtype)};
        const ckv_h5_table tables[] = {
            {"/attention", attn_fields, NF(attn_fields), sizeof(attn_row), rows, n},
            {"/gemm", gemm_fields, NF(gemm_fields), sizeof(gemm_row), gemm, n_gemm},
        };
        rc = bench_write(o->b.out, attrs, sizeof attrs / sizeof attrs[0] / 2, tables, 2);
    }
    json_decref(peer_json);
    free(rows);
    free(gemm);
    free(cmdline);
    return rc;
}

#endif

int bench_attention(int argc, char **argv)
{
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
#if CKV_HAVE_CUDA
    return run(argc, argv, &o);
#else
    return bench_no_cuda("attention");
#endif
}
