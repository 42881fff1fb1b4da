#include "progress.h"

#include <stdio.h>
#include <unistd.h>

#include "util.h"

void cli_progress_init(cli_progress *p, double every_s)
{
    p->tty = isatty(STDERR_FILENO);
    p->every_s = every_s;
    p->start = p->last = ckv_now();
    p->start_rows = 0;
}

static void fmt_eta(double s, char *buf, size_t n)
{
    if (s < 0 || s > 1e8)
        snprintf(buf, n, "?");
    else if (s >= 3600)
        snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else
        snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
}

/* A parallel sweep's workers, " | cuda:0 12/40, cuda:1 11/40 (rerun)";
 * empty without workers. */
static void fmt_workers(const ckv_sweep_progress *s, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (size_t i = 0; i < s->n_workers && k < n; i++) {
        const ckv_sweep_worker *w = &s->workers[i];
        k += (size_t)snprintf(buf + k, n - k, "%s%s %zu/%zu%s", i ? ", " : " | ", w->label,
                              w->rows_done, w->rows_total,
                              w->running || w->rows_done == w->rows_total ? "" : " (stopped)");
    }
}

void cli_progress_event(void *ctx, ckv_sweep_event ev, const ckv_sweep_progress *s)
{
    cli_progress *p = ctx;
    double now = ckv_now(), el = now - p->start;
    if (ev == CKV_SWEEP_NOTE) {
        fprintf(stderr, "sweep: %s\n", s->note);
        return;
    }
    if (ev == CKV_SWEEP_PLAN) {
        p->start_rows = s->rows_done;
        fprintf(stderr, "sweep: %zu rows (%zu samples), %zu already done", s->rows_total,
                s->units_total, s->rows_done);
        if (s->n_workers)
            fprintf(stderr, ", %zu workers", s->n_workers);
        fputc('\n', stderr);
        return;
    }
    size_t new_rows = s->rows_done - p->start_rows;
    double rate = el > 0 ? (double)new_rows / el : 0;
    char eta[32];
    fmt_eta(rate > 0 ? (double)(s->rows_total - s->rows_done) / rate : -1, eta, sizeof eta);
    if (ev == CKV_SWEEP_FLUSHED && !p->tty) {
        fprintf(stderr, "sweep: flushed %zu rows\n", s->rows_flushed);
        return;
    }
    if (ev != CKV_SWEEP_UNIT)
        return;
    char workers[1024];
    fmt_workers(s, workers, sizeof workers);
    if (p->tty) {
        int width = 30, fill = s->rows_total ? (int)(width * s->rows_done / s->rows_total) : width;
        fprintf(stderr, "\r[%.*s%*s] %zu/%zu rows  %.2f rows/s  ETA %s%s   ", fill,
                "##############################", width - fill, "", s->rows_done, s->rows_total,
                rate, eta, workers);
        if (s->rows_done == s->rows_total)
            fputc('\n', stderr);
    } else if (now - p->last >= p->every_s || s->rows_done == s->rows_total) {
        fprintf(stderr, "sweep: %zu/%zu rows, %.2f rows/s, ETA %s%s\n", s->rows_done,
                s->rows_total, rate, eta, workers);
        p->last = now;
    }
    fflush(stderr);
}
