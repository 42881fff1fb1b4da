/* Sweep results in one HDF5 file (schema: docs/results.md): root
 * attributes describing the sweep, the compound, chunked, extendible
 * datasets /samples (one row per task, length, sample and run), /runs (one
 * row per run id) and /summary (one row per task, length and run). Rows are
 * appended in batches, each followed by H5Fflush. */
#ifndef CKV_RESULTS_H
#define CKV_RESULTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef struct {
    int64_t unit;            /* sample ordinal over the whole sweep: resume and shards use it */
    char *task;
    int32_t length;          /* the pack's target length (0: none) */
    int32_t sample;          /* sample index within its task */
    int32_t run;             /* run id: index into /runs */
    char *policy;
    double budget;           /* fraction of N, or the absolute entry count; 0 for full */
    char *budget_spec;       /* as written */
    int64_t budget_entries;  /* resolved B (N for full) */
    char *metric;
    double score;            /* in [0, 1]; NaN when skipped */
    int32_t prompt_tokens;
    int64_t kv_entries;      /* after the prefill compression, all (layer, head) lists */
    int64_t kv_bytes;
    int64_t kv_entries_peak; /* largest during decode */
    int64_t kv_bytes_peak;
    double ttft_ms;          /* prefill (shared) plus, query-agnostic, the question */
    double compress_ms;      /* prefill and decode compressions */
    double tpot_ms;          /* median decode step */
    int32_t generated_tokens;
    char *prediction;
    char *device;
    char *status;            /* "ok" or "skipped: why" */
    double kl;               /* fidelity: mean KL(full || run) per step, NaN if off */
    double top1;             /* fidelity: top-1 agreement rate, NaN if off */
    int32_t fidelity_steps;
} ckv_result_row;

typedef struct {
    int32_t run;
    char *name;
    char *policy;
    char *budget_spec;
    char *params;            /* every parameter, "key=value ..." */
    char *params_set;        /* those the config set, "key=value ..." ("" if none) */
} ckv_run_row;

typedef struct {
    char *task;
    int32_t length;
    int32_t run;
    char *name;
    char *metric;
    int32_t n;               /* rows scored */
    int32_t skipped;
    double score;            /* task score x100 as the benchmark rounds it; NaN if n = 0 */
    double ttft_ms, tpot_ms, compress_ms, kv_bytes, kl, top1; /* means over scored rows */
} ckv_summary_row;

/* Root attributes, all strings. */
typedef struct {
    char *tool_version, *git_rev, *model_path, *model_sha256, *config_path, *config_text,
        *config_hash, *device, *host, *start_time, *mode;
} ckv_results_meta;

typedef struct ckv_results ckv_results;

/* Creates a results file with its attributes and run table, replacing an
 * existing one (unlinked first, never truncated in place). */
ckv_status ckv_results_create(ckv_results **out, const char *path, const ckv_results_meta *meta,
                              const ckv_run_row *runs, size_t n_runs, ckv_error *err);
/* Opens an existing results file to append rows. */
ckv_status ckv_results_open(ckv_results **out, const char *path, ckv_error *err);
/* Appends rows and flushes the file. */
ckv_status ckv_results_append(ckv_results *r, const ckv_result_row *rows, size_t n,
                              ckv_error *err);
/* Rewrites /summary from every row in the file, then closes. */
ckv_status ckv_results_finish(ckv_results *r, ckv_error *err);
/* Closes without touching /summary (error paths). */
void ckv_results_close(ckv_results *r);

/* Everything in a results file, for resume, merge and report. */
typedef struct {
    ckv_results_meta meta;
    ckv_result_row *rows;
    size_t n_rows;
    ckv_run_row *runs;
    size_t n_runs;
} ckv_results_data;

ckv_status ckv_results_read(const char *path, ckv_results_data *d, ckv_error *err);
void ckv_results_data_free(ckv_results_data *d);

/* Groups rows by (task, length, run), in order of first appearance. */
ckv_status ckv_results_summarize(const ckv_result_row *rows, size_t n, const ckv_run_row *runs,
                                 size_t n_runs, ckv_summary_row **out, size_t *n_out,
                                 ckv_error *err);
void ckv_summary_free(ckv_summary_row *s, size_t n);

/* A /samples row as bytes, every field in schema order (integers and
 * doubles in host byte order, bit for bit; strings as a u32 length and
 * their bytes), for a parallel sweep's workers to pass rows to the process
 * that writes the file. Same-host only. */
size_t ckv_results_row_size(const ckv_result_row *r);
void ckv_results_row_encode(const ckv_result_row *r, uint8_t *out);
/* Decodes one row from in[0, len) into out (strings malloc'd: free with
 * ckv_results_row_free), *used the bytes it took. */
ckv_status ckv_results_row_decode(const uint8_t *in, size_t len, size_t *used,
                                  ckv_result_row *out, ckv_error *err);
void ckv_results_row_free(ckv_result_row *r);

#endif
