/* ckv sweep: every sample of the config's tasks against every run of its
 * grid. Per sample (the unit of work, resume and sharding): one prefill with
 * the full cache, then per run a fork and the policy's compression; the
 * forks of all runs then decode greedily together (one batched backend step
 * per token, decode-time compression per run), then score and, on request,
 * fidelity against the full cache under teacher forcing (forks again
 * decoded together). Rows go to an HDF5 results
 * file (results.h) in flushed batches of whole units. */
#ifndef CKV_SWEEP_H
#define CKV_SWEEP_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "results.h"
#include "status.h"

typedef enum {
    CKV_SWEEP_PLAN,     /* grid known: total rows of this shard, rows already done */
    CKV_SWEEP_UNIT,     /* one unit finished (rows_done counts it) */
    CKV_SWEEP_FLUSHED,  /* rows_flushed rows are safely in the file */
    CKV_SWEEP_NOTE      /* note: something to show (a RULER task without data, skipped) */
} ckv_sweep_event;

/* One worker of a parallel sweep, as progress shows it. */
typedef struct {
    const char *label;   /* e.g. "cuda:1" */
    size_t rows_total, rows_done;
    bool running;
} ckv_sweep_worker;

typedef struct {
    size_t rows_total;   /* this shard's rows, including those done before a resume */
    size_t rows_done;
    size_t rows_flushed;
    size_t units_total, units_done;
    const char *note;
    const ckv_sweep_worker *workers; /* a parallel sweep's workers, else NULL */
    size_t n_workers;
} ckv_sweep_progress;

typedef struct {
    const char *out_path;    /* required unless unit_done is set */
    const char *device;      /* cpu | cuda | auto */
    bool resume;             /* keep the rows of an existing file, run the rest */
    bool force;              /* overwrite an existing file, or resume one of another config */
    int32_t shard, n_shards; /* run units with unit % n_shards == shard */
    int64_t limit;           /* samples per task, overrides the config's when > 0 */
    double flush_seconds;    /* flush at least this often (and after 64 rows) */
    volatile sig_atomic_t *stop; /* set by a signal handler: flush and stop */
    void (*progress)(void *ctx, ckv_sweep_event ev, const ckv_sweep_progress *p);
    void *progress_ctx;
    /* A worker of a parallel sweep (sweep_pool.h): each finished unit's rows
     * go to unit_done instead of a results file, and the units in
     * skip_units[0, n_skip) (done elsewhere) are not run. */
    ckv_status (*unit_done)(void *ctx, const ckv_result_row *rows, size_t n, ckv_error *err);
    void *unit_ctx;
    const int64_t *skip_units;
    size_t n_skip;
} ckv_sweep_opts;

/* The samples a config yields after limits, for --dry-run, without
 * generating RULER prompts: tasks x lengths x samples for RULER specs (a
 * task whose data is missing is only found, and skipped, at run time). */
ckv_status ckv_sweep_count_samples(const ckv_sweep_config *c, int64_t limit, size_t *n_samples,
                                   ckv_error *err);

/* Opens o->out_path for the sweep of c (created, resumed or overwritten as
 * o->resume and o->force say; a resumed file of another config is refused
 * unless forced) and lists the units whose rows it already holds, sorted
 * (malloc'd; *n_done of them). `device` is recorded in a new file. */
ckv_status ckv_sweep_open_results(const ckv_sweep_config *c, const ckv_sweep_opts *o,
                                  const char *device, ckv_results **res, int64_t **done,
                                  size_t *n_done, ckv_error *err);

/* Runs the sweep. Stopped by *stop, it flushes the finished units and
 * returns CKV_ERR_INTERRUPTED. */
ckv_status ckv_sweep_run(const ckv_sweep_config *c, const ckv_sweep_opts *o, ckv_error *err);

#endif
