/* Sweep configuration: a YAML file (docs/results.md, "Config") parsed into
 * task sources and the expanded grid of runs. Every error names the config
 * file with the line and column of the offending node. */
#ifndef CKV_SWEEP_CONFIG_H
#define CKV_SWEEP_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy.h"
#include "status.h"

/* Where samples come from: a task pack file, or RULER prompts generated
 * for the model at load time (`ckv prepare ruler` with these settings). */
typedef struct {
    char *pack;          /* pack path, or NULL for a RULER spec */
    char **ruler_tasks;  /* RULER spec: task names */
    size_t n_ruler_tasks;
    uint32_t *lengths;
    size_t n_lengths;
    uint32_t samples;
    uint64_t seed;
} ckv_task_source;

/* One policy configuration of the grid: its position in the expansion is
 * its run id. */
typedef struct {
    ckv_policy policy;
    char *budget_spec;   /* as written; "" for `full`, which takes no budget */
    ckv_budget budget;   /* zero for `full` */
    char *params;        /* "key=value ..." as set in the config ("" if none) */
    char *name;          /* "policy@budget key=value ...", unique in the grid */
} ckv_run_config;

typedef struct {
    char *path;
    char *text;          /* the file verbatim */
    uint64_t hash;       /* XXH64 of text: resume and merge compare it */
    char *model;         /* NULL: the default model */
    char *data_dir;      /* NULL: $CKV_DATA_DIR, then ../shared/data */
    char *output;        /* NULL: given on the command line */
    ckv_task_source *sources;
    size_t n_sources;
    bool query_agnostic;
    int64_t limit;       /* samples per task source and task (0: all) */
    bool fidelity;
    int32_t threads;     /* 0: all online CPUs */
    ckv_kv_dtype kv_dtype; /* how every cache stores keys and values (kv_dtype: f32 | bf16) */
    ckv_run_config *runs;
    size_t n_runs;
} ckv_sweep_config;

/* The most runs a grid may expand to: more is a typo or a hostile file,
 * and the expansion compares every run name with every other. */
enum { CKV_SWEEP_MAX_RUNS = 10000 };

/* Parses a config file and expands its grid. Checks policies, parameter
 * names and values, budgets (an absolute budget that does not exceed the
 * policy's protected count is an error) and that pack files exist. */
ckv_status ckv_sweep_config_load(ckv_sweep_config *c, const char *path, ckv_error *err);
/* The same from text in memory (path names it in messages). */
ckv_status ckv_sweep_config_parse(ckv_sweep_config *c, const char *path, const char *text,
                                  size_t len, ckv_error *err);
void ckv_sweep_config_free(ckv_sweep_config *c);

#endif
