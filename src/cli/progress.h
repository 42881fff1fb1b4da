/* Sweep progress on stderr: a single redrawn line with rows done, rate and
 * ETA on a terminal; otherwise a plain line every few seconds and one per
 * flush (logs). */
#ifndef CKV_CLI_PROGRESS_H
#define CKV_CLI_PROGRESS_H

#include <stdbool.h>

#include "sweep.h"

typedef struct {
    bool tty;
    double every_s;     /* plain-line interval */
    double start, last;
    size_t start_rows;  /* rows done before this process (resume) */
} cli_progress;

void cli_progress_init(cli_progress *p, double every_s);
/* A ckv_sweep_opts.progress callback; ctx is a cli_progress. */
void cli_progress_event(void *ctx, ckv_sweep_event ev, const ckv_sweep_progress *s);

#endif
