/* Paper-style tables from sweep results: RULER (rows method@budget, columns
 * the tasks and their mean, one table per length), LongBench (datasets and
 * mean), fidelity and speed; and gnuplot inputs for score and decode time
 * vs budget. */
#ifndef CKV_REPORT_H
#define CKV_REPORT_H

#include <stdio.h>

#include "results.h"
#include "status.h"

typedef enum { CKV_REPORT_MD, CKV_REPORT_CSV } ckv_report_format;

/* Markdown tables, or CSV in long form: table,length,run,column,value. */
ckv_status ckv_report_write(FILE *fp, const ckv_results_data *d, ckv_report_format fmt,
                            ckv_error *err);

/* Writes dir/score_vs_budget.dat, dir/tpot_vs_budget.dat and dir/plots.gp
 * (a gnuplot script that draws dir/score_vs_budget.png and
 * dir/tpot_vs_budget.png, one line per method). dir must exist. */
ckv_status ckv_report_plot_files(const ckv_results_data *d, const char *dir, ckv_error *err);

#endif
