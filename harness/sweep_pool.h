/* A sweep spread over worker processes of one host (`ckv sweep --devices`,
 * `--workers`). Worker j runs shard (shard + n_shards * j) of
 * (n_shards * n_workers), so a pool can itself be one shard of a larger
 * split. Workers stream each finished unit's rows over a socket
 * (worker_wire.h) and this process alone writes them to the results file,
 * flushed at least every second (or every 64 rows).
 *
 * A worker that exits non-zero, dies by a signal or stops before its shard
 * is complete is started once more for its shard's unfinished units (they
 * are sent to it as done); a second failure is reported, after the other
 * workers finish, with both exit statuses and the count of missing
 * samples (`--resume` runs them). A stop (*o->stop) is forwarded to the
 * workers as SIGINT; the units they finish are kept. */
#ifndef CKV_SWEEP_POOL_H
#define CKV_SWEEP_POOL_H

#include <stddef.h>

#include "config.h"
#include "status.h"
#include "sweep.h"

typedef struct {
    const char *label;      /* in progress and errors: "cuda:1", "cpu:0" */
    const char *const *env; /* "NAME=value" set in its environment; NULL-terminated, or NULL */
} ckv_pool_worker;

typedef struct {
    const char *exe;         /* the ckv binary, e.g. /proc/self/exe */
    const char *const *argv; /* a worker's command line, argv[0] first, NULL-terminated; the
                                pool appends `--shard I/N --worker-fd 3` (cmd_sweep.c) */
    const ckv_pool_worker *workers;
    size_t n_workers;
    const char *device;      /* recorded in a new results file */
} ckv_pool_opts;

/* Runs the sweep of c over p's workers into o->out_path (o's resume, force,
 * shard, flush, stop and progress as for ckv_sweep_run). */
ckv_status ckv_sweep_pool_run(const ckv_sweep_config *c, const ckv_sweep_opts *o,
                              const ckv_pool_opts *p, ckv_error *err);

#endif
