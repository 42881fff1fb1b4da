/* The parent of a parallel sweep: spawns the workers, reads their records,
 * writes the rows, reruns a failed worker once. See sweep_pool.h. */
#define _GNU_SOURCE
#include "sweep_pool.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "results.h"
#include "util.h"
#include "worker_wire.h"

enum { FLUSH_ROWS = 64, WORKER_FD = 3, ATTEMPTS = 2, POLL_MS = 200 };

typedef struct {
    const ckv_pool_worker *spec;
    int32_t shard;           /* of the pool's n_total */
    pid_t pid;               /* 0: not running */
    int fd;
    int attempts;
    bool finished;           /* DONE received from the running attempt */
    bool planned;            /* its first PLAN arrived */
    bool failed;             /* failed on every attempt */
    size_t units_total, units_skipped, units_received;
    int64_t *done;           /* sorted: units of its shard with rows in the file or buffer */
    size_t n_done, cap_done;
    char error[1024];        /* the running attempt's ERROR record, or a protocol fault */
    char history[1024];      /* how earlier attempts ended */
    ckv_wire_reader rd;
} slot;

typedef struct {
    const ckv_sweep_config *c;
    const ckv_sweep_opts *o;
    const ckv_pool_opts *p;
    int32_t n_total;
    slot *s;
    ckv_sweep_worker *view;
    ckv_results *res;
    ckv_result_row *buf;
    size_t n_buf, cap_buf;
    double last_flush, flush_every;
    ckv_sweep_progress pr;
    bool plan_shown, stopping, interrupted;
    char **notes;
    size_t n_notes;
} pool;

static void report(pool *P, ckv_sweep_event ev)
{
    const ckv_sweep_opts *o = P->o;
    for (size_t j = 0; j < P->p->n_workers; j++) {
        const slot *s = &P->s[j];
        P->view[j] = (ckv_sweep_worker){
            .label = s->spec->label,
            .rows_total = s->units_total * P->c->n_runs,
            .rows_done = (s->units_skipped + s->units_received) * P->c->n_runs,
            .running = s->pid > 0};
    }
    P->pr.workers = P->view;
    P->pr.n_workers = P->p->n_workers;
    if (o->progress && (P->plan_shown || ev == CKV_SWEEP_NOTE))
        o->progress(o->progress_ctx, ev, &P->pr);
}

static void note(pool *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(pool *P, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    P->pr.note = msg;
    report(P, CKV_SWEEP_NOTE);
    P->pr.note = NULL;
}

/* Every worker loads the same samples, so their notes repeat: each text
 * is shown once, named by the first worker that sent it. */
static void worker_note(pool *P, const slot *s, const uint8_t *text, size_t n)
{
    char *t = ckv_strndup((const char *)text, n);
    if (!t)
        return;
    for (size_t i = 0; i < P->n_notes; i++)
        if (!strcmp(P->notes[i], t)) {
            free(t);
            return;
        }
    char **g = realloc(P->notes, (P->n_notes + 1) * sizeof *g);
    if (!g) {
        free(t);
        return;
    }
    P->notes = g;
    P->notes[P->n_notes++] = t;
    note(P, "%s: %s", s->spec->label, t);
}

/* Inserts u into the slot's sorted done list; false if it was there. */
static bool mark_done(slot *s, int64_t u, bool *nomem)
{
    size_t lo = 0, hi = s->n_done;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->done[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < s->n_done && s->done[lo] == u)
        return false;
    if (s->n_done == s->cap_done) {
        size_t cap = s->cap_done ? 2 * s->cap_done : 64;
        int64_t *g = realloc(s->done, cap * sizeof *g);
        if (!g) {
            *nomem = true;
            return false;
        }
        s->done = g;
        s->cap_done = cap;
    }
    memmove(s->done + lo + 1, s->done + lo, (s->n_done - lo) * sizeof *s->done);
    s->done[lo] = u;
    s->n_done++;
    return true;
}

/* The inherited environment with the worker's settings replacing any of
 * the same names (built before fork: the child only execs). */
static char **worker_env(const char *const *set)
{
    size_t n = 0, m = 0;
    while (environ[n])
        n++;
    while (set && set[m])
        m++;
    char **e = calloc(n + m + 1, sizeof *e);
    if (!e)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool replaced = false;
        for (size_t j = 0; j < m && !replaced; j++) {
            size_t len = strcspn(set[j], "=");
            replaced = !strncmp(environ[i], set[j], len) && environ[i][len] == '=';
        }
        if (!replaced)
            e[k++] = environ[i];
    }
    for (size_t j = 0; j < m; j++)
        e[k++] = (char *)set[j];
    return e;
}

/* Starts an attempt of the slot's worker and sends it its done units. */
static ckv_status spawn(pool *P, slot *s, ckv_error *err)
{
    char shard[48];
    snprintf(shard, sizeof shard, "%d/%d", s->shard, P->n_total);
    size_t na = 0;
    while (P->p->argv[na])
        na++;
    const char **argv = calloc(na + 5, sizeof *argv);
    char **envp = worker_env(s->spec->env);
    int sv[2] = {-1, -1};
    if (!argv || !envp) {
        free(argv);
        free(envp);
        return ckv_errorf(err, CKV_ERR_NOMEM, "worker %s: out of memory", s->spec->label);
    }
    memcpy(argv, P->p->argv, na * sizeof *argv);
    argv[na] = "--shard";
    argv[na + 1] = shard;
    argv[na + 2] = "--worker-fd";
    argv[na + 3] = "3";
    pid_t parent = getpid(), pid = -1;
    if (!socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
        pid = fork();
    if (pid == 0) {
        /* dup2 clears close-on-exec on the copy; the parent's other files
         * (the results file) stay out of the worker. */
        if (sv[1] == WORKER_FD)
            fcntl(WORKER_FD, F_SETFD, 0);
        else
            dup2(sv[1], WORKER_FD);
        for (int fd = WORKER_FD + 1; fd < 1024; fd++)
            close(fd);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execve(P->p->exe, (char *const *)argv, envp);
        _exit(127);
    }
    int e = errno;
    free(argv);
    free(envp);
    if (sv[1] >= 0)
        close(sv[1]);
    if (pid < 0) {
        if (sv[0] >= 0)
            close(sv[0]);
        return ckv_errorf(err, CKV_ERR_IO, "worker %s: cannot start: %s", s->spec->label,
                          strerror(e));
    }
    s->pid = pid;
    s->fd = sv[0];
    s->attempts++;
    s->finished = false;
    s->error[0] = 0;
    /* A worker that dies before reading this is reported by its exit. */
    ckv_error ignored;
    ckv_wire_send(s->fd, CKV_WIRE_SKIP, s->done, s->n_done * sizeof *s->done, &ignored);
    return CKV_OK;
}

static ckv_status flush(pool *P, ckv_error *err)
{
    if (!P->n_buf)
        return CKV_OK;
    ckv_status st = ckv_results_append(P->res, P->buf, P->n_buf, err);
    for (size_t i = 0; i < P->n_buf; i++)
        ckv_results_row_free(&P->buf[i]);
    P->pr.rows_flushed += st ? 0 : P->n_buf;
    P->n_buf = 0;
    P->last_flush = ckv_now();
    if (!st)
        report(P, CKV_SWEEP_FLUSHED);
    return st;
}

static void maybe_show_plan(pool *P)
{
    if (P->plan_shown)
        return;
    for (size_t j = 0; j < P->p->n_workers; j++)
        if (!P->s[j].planned && !P->s[j].failed)
            return;
    P->plan_shown = true;
    report(P, CKV_SWEEP_PLAN);
}

/* Takes a unit's rows: they must be one unit of the slot's shard, with
 * one row per run, not seen before. A bad record is the worker's fault
 * (*bad, with the reason in its error); the rest are the parent's. */
static ckv_status take_unit(pool *P, slot *s, const uint8_t *pl, size_t n, bool *bad,
                            ckv_error *err)
{
    ckv_result_row *rows;
    size_t nr;
    ckv_error e2 = {0};
    if (ckv_wire_decode_rows(pl, n, &rows, &nr, &e2)) {
        *bad = true;
        snprintf(s->error, sizeof s->error, "sent a malformed unit: %.900s", e2.msg);
        return CKV_OK;
    }
    int64_t u = nr ? rows[0].unit : -1;
    bool ok = nr == P->c->n_runs && u >= 0 && u % P->n_total == s->shard;
    for (size_t i = 1; ok && i < nr; i++)
        ok = rows[i].unit == u;
    bool nomem = false;
    ok = ok && mark_done(s, u, &nomem);
    if (!ok) {
        for (size_t i = 0; i < nr; i++)
            ckv_results_row_free(&rows[i]);
        free(rows);
        if (nomem)
            return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory");
        *bad = true;
        snprintf(s->error, sizeof s->error,
                 "sent %zu rows of unit %lld, not one new unit of its shard with %zu runs", nr,
                 (long long)u, P->c->n_runs);
        return CKV_OK;
    }
    if (P->n_buf + nr > P->cap_buf) {
        size_t cap = P->n_buf + nr + FLUSH_ROWS;
        ckv_result_row *g = realloc(P->buf, cap * sizeof *g);
        if (!g) {
            for (size_t i = 0; i < nr; i++)
                ckv_results_row_free(&rows[i]);
            free(rows);
            return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory");
        }
        P->buf = g;
        P->cap_buf = cap;
    }
    memcpy(P->buf + P->n_buf, rows, nr * sizeof *rows);
    P->n_buf += nr;
    free(rows);
    s->units_received++;
    P->pr.units_done++;
    P->pr.rows_done += nr;
    report(P, CKV_SWEEP_UNIT);
    if (P->n_buf >= FLUSH_ROWS || ckv_now() - P->last_flush >= P->flush_every)
        return flush(P, err);
    return CKV_OK;
}

/* The records read so far from a slot. */
static ckv_status drain(pool *P, slot *s, ckv_error *err)
{
    ckv_wire_type t;
    const uint8_t *pl;
    size_t n;
    bool bad = false;
    while (!bad && ckv_wire_next(&s->rd, &t, &pl, &n)) {
        switch (t) {
        case CKV_WIRE_PLAN:
            if (n != 2 * sizeof(uint64_t)) {
                bad = true;
                snprintf(s->error, sizeof s->error, "sent a malformed plan");
            } else if (!s->planned) {
                uint64_t v[2];
                memcpy(v, pl, sizeof v);
                s->planned = true;
                s->units_total = v[0];
                s->units_skipped = v[1];
                P->pr.units_total += v[0];
                P->pr.rows_total += v[0] * P->c->n_runs;
                P->pr.units_done += v[1];
                P->pr.rows_done += v[1] * P->c->n_runs;
                P->pr.rows_flushed += v[1] * P->c->n_runs;
                maybe_show_plan(P);
            }
            break;
        case CKV_WIRE_UNIT: {
            ckv_status st = take_unit(P, s, pl, n, &bad, err);
            if (st)
                return st;
            break;
        }
        case CKV_WIRE_NOTE: worker_note(P, s, pl, n); break;
        case CKV_WIRE_ERROR:
            snprintf(s->error, sizeof s->error, "%.*s", (int)(n < 1000 ? n : 1000),
                     (const char *)pl);
            break;
        case CKV_WIRE_DONE: s->finished = true; break;
        default:
            bad = true;
            snprintf(s->error, sizeof s->error, "sent an unknown record type %d", (int)t);
        }
    }
    /* A worker that breaks the protocol is stopped and treated as failed. */
    if (bad)
        kill(s->pid, SIGKILL);
    return CKV_OK;
}

static void describe_exit(int status, const char *error, char *out, size_t n)
{
    if (WIFSIGNALED(status))
        snprintf(out, n, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else if (WEXITSTATUS(status))
        snprintf(out, n, "exited with status %d", WEXITSTATUS(status));
    else
        snprintf(out, n, "exited before finishing its shard");
    if (error[0]) {
        size_t k = strlen(out);
        snprintf(out + k, n - k, ": %s", error);
    }
}

static size_t unfinished(const slot *s)
{
    return s->units_total - s->units_skipped - s->units_received;
}

/* The end of a slot's stream: its exit status decides between done,
 * interrupted, a rerun and a failure. */
static ckv_status reap(pool *P, slot *s, ckv_error *err)
{
    close(s->fd);
    s->fd = -1;
    int status = 0;
    while (waitpid(s->pid, &status, 0) < 0 && errno == EINTR)
        ;
    s->pid = 0;
    if (ckv_wire_pending(&s->rd) && !s->error[0])
        snprintf(s->error, sizeof s->error, "its last record was cut off");
    s->rd.pos = s->rd.len = 0;
    if (WIFEXITED(status) && !WEXITSTATUS(status) && s->finished && !s->error[0])
        return CKV_OK;
    if (P->stopping || (P->o->stop && *P->o->stop)) {
        P->interrupted = true;
        return CKV_OK;
    }
    char what[1200];
    describe_exit(status, s->error, what, sizeof what);
    size_t k = strlen(s->history);
    snprintf(s->history + k, sizeof s->history - k, "%s%s", k ? "; on its rerun " : "", what);
    if (s->attempts >= ATTEMPTS) {
        s->failed = true;
        maybe_show_plan(P);
        return CKV_OK;
    }
    if (s->planned)
        note(P, "worker %s (shard %d/%d) %s; rerunning its %zu unfinished samples",
             s->spec->label, s->shard, P->n_total, what, unfinished(s));
    else
        note(P, "worker %s (shard %d/%d) %s; rerunning its shard", s->spec->label, s->shard,
             P->n_total, what);
    return spawn(P, s, err);
}

/* Reads from every running worker until all have ended. */
static ckv_status run_loop(pool *P, ckv_error *err)
{
    size_t nw = P->p->n_workers;
    struct pollfd *pfd = calloc(nw, sizeof *pfd);
    slot **who = calloc(nw, sizeof *who);
    ckv_status st = pfd && who ? CKV_OK : ckv_errorf(err, CKV_ERR_NOMEM, "out of memory");
    while (!st) {
        if (P->o->stop && *P->o->stop && !P->stopping) {
            P->stopping = true;
            for (size_t j = 0; j < nw; j++)
                if (P->s[j].pid > 0)
                    kill(P->s[j].pid, SIGINT);
        }
        nfds_t n = 0;
        for (size_t j = 0; j < nw; j++)
            if (P->s[j].pid > 0) {
                pfd[n] = (struct pollfd){.fd = P->s[j].fd, .events = POLLIN};
                who[n++] = &P->s[j];
            }
        if (!n)
            break;
        int r = poll(pfd, n, POLL_MS);
        if (r < 0 && errno != EINTR)
            st = ckv_errorf(err, CKV_ERR_IO, "poll on the workers failed: %s", strerror(errno));
        for (nfds_t i = 0; !st && r > 0 && i < n; i++) {
            if (!pfd[i].revents)
                continue;
            bool eof;
            if (!(st = ckv_wire_fill(&who[i]->rd, pfd[i].fd, &eof, err)) &&
                !(st = drain(P, who[i], err)) && eof)
                st = reap(P, who[i], err);
        }
        if (!st && P->n_buf && ckv_now() - P->last_flush >= P->flush_every)
            st = flush(P, err);
    }
    free(pfd);
    free(who);
    return st;
}

/* After a fault of the parent itself: no worker outlives it. */
static void stop_workers(pool *P)
{
    for (size_t j = 0; j < P->p->n_workers; j++) {
        slot *s = &P->s[j];
        if (s->pid <= 0)
            continue;
        kill(s->pid, SIGKILL);
        while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
            ;
        close(s->fd);
        s->pid = 0;
    }
}

/* The error for workers that failed on every attempt. */
static ckv_status failures(pool *P, ckv_error *err)
{
    const slot *first = NULL;
    size_t n_failed = 0, missing = 0;
    bool known = true;
    for (size_t j = 0; j < P->p->n_workers; j++) {
        const slot *s = &P->s[j];
        if (!s->failed)
            continue;
        n_failed++;
        first = first ? first : s;
        known &= s->planned;
        missing += s->planned ? unfinished(s) : 0;
    }
    if (!n_failed)
        return CKV_OK;
    char count[64];
    if (known)
        snprintf(count, sizeof count, "%zu samples", missing);
    else
        snprintf(count, sizeof count, "the samples of %zu shard%s", n_failed,
                 n_failed > 1 ? "s" : "");
    return ckv_errorf(err, CKV_ERR_DEVICE,
                      "worker %s (shard %d/%d) %s%s; %s are not in %s (--resume runs them)",
                      first->spec->label, first->shard, P->n_total, first->history,
                      n_failed > 1 ? " (and other workers failed too)" : "", count,
                      P->o->out_path);
}

ckv_status ckv_sweep_pool_run(const ckv_sweep_config *c, const ckv_sweep_opts *o,
                              const ckv_pool_opts *p, ckv_error *err)
{
    int32_t outer = o->n_shards > 0 ? o->n_shards : 1;
    if (!p->n_workers || (uint64_t)outer * p->n_workers > 1000000)
        return ckv_errorf(err, CKV_ERR_ARG, "parallel sweep: %zu workers x %d shards", p->n_workers,
                          outer);
    pool P = {.c = c, .o = o, .p = p, .n_total = outer * (int32_t)p->n_workers};
    int64_t *done = NULL;
    size_t n_done = 0;
    ckv_status st = CKV_OK;
    if (!(P.s = calloc(p->n_workers, sizeof *P.s)) ||
        !(P.view = calloc(p->n_workers, sizeof *P.view))) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((st = ckv_sweep_open_results(c, o, p->device, &P.res, &done, &n_done, err)))
        goto out;
    bool nomem = false;
    for (size_t j = 0; j < p->n_workers; j++) {
        slot *s = &P.s[j];
        s->spec = &p->workers[j];
        s->shard = o->shard + outer * (int32_t)j;
        s->fd = -1;
        for (size_t i = 0; i < n_done; i++)
            if (done[i] >= 0 && done[i] % P.n_total == s->shard)
                mark_done(s, done[i], &nomem);
    }
    if (nomem) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory");
        goto out;
    }
    /* This process only waits on the workers: it flushes at least every
     * second, so a kill loses little more than the samples in progress. */
    P.last_flush = ckv_now();
    P.flush_every = o->flush_seconds < 1 ? o->flush_seconds : 1;
    for (size_t j = 0; !st && j < p->n_workers; j++)
        st = spawn(&P, &P.s[j], err);
    if (!st)
        st = run_loop(&P, err);
    if (st)
        stop_workers(&P);
    ckv_error e2 = {0};
    ckv_status fs = flush(&P, st ? &e2 : err);
    st = st ? st : fs;
    fs = ckv_results_finish(P.res, st ? &e2 : err);
    P.res = NULL;
    st = st ? st : fs;
    if (!st)
        st = failures(&P, err);
    if (!st && P.interrupted)
        st = ckv_errorf(err, CKV_ERR_INTERRUPTED, "interrupted");
out:
    ckv_results_close(P.res);
    for (size_t i = 0; i < P.n_buf; i++)
        ckv_results_row_free(&P.buf[i]);
    free(P.buf);
    for (size_t j = 0; P.s && j < p->n_workers; j++) {
        free(P.s[j].done);
        ckv_wire_reader_free(&P.s[j].rd);
    }
    for (size_t i = 0; i < P.n_notes; i++)
        free(P.notes[i]);
    free(P.notes);
    free(P.s);
    free(P.view);
    free(done);
    return st;
}
