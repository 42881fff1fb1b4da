/* The sweep loop. See sweep.h for the order of events and policies.md for
 * the budget arithmetic and the query-aware/agnostic sequences. */
#include "sweep.h"

#include <math.h>
#include <stdarg.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "ckv_config.h"
#include "datadir.h"
#include "fidelity.h"
#include "model.h"
#include "pack.h"
#include "pack_score.h"
#include "results.h"
#include "ruler.h"
#include "ruler_pack.h"
#include "sampler.h"
#include "token_count.h"
#include "tokenizer.h"
#include "utf8.h"
#include "util.h"

enum { FLUSH_ROWS = 64 };

/* Every sample of the config, as units in load order; a unit's number
 * does not depend on the sample limit (units beyond it are NULL), so files
 * of one config resume and merge whatever --limit was given. */
typedef struct {
    ckv_pack *packs;
    size_t n_packs;
    const ckv_pack_sample **units;
    size_t n_units;
} sample_set;

static void samples_free(sample_set *s)
{
    for (size_t i = 0; i < s->n_packs; i++)
        ckv_pack_free(&s->packs[i]);
    free(s->packs);
    free(s->units);
    memset(s, 0, sizeof *s);
}

static void note(const ckv_sweep_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Tells the caller something it should show (a task without data). */
static void note(const ckv_sweep_opts *o, const char *fmt, ...)
{
    if (!o->progress)
        return;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ckv_sweep_progress p = {.note = msg};
    o->progress(o->progress_ctx, CKV_SWEEP_NOTE, &p);
}

static ckv_status ruler_pack(const ckv_sweep_config *c, const ckv_sweep_opts *o,
                             const ckv_task_source *src,
                             const char *model_path, const ckv_tokenizer *tok, ckv_pack *p,
                             ckv_error *err)
{
    ckv_ruler *r = NULL;
    ckv_token_counter tc = ckv_tokenizer_counter(tok);
    ckv_status st = ckv_pack_init(p, model_path, tok, err);
    if (!st)
        st = ckv_ruler_open(&r, ckv_data_dir(c->data_dir), err);
    for (size_t t = 0; !st && t < src->n_ruler_tasks; t++)
        for (size_t l = 0; !st && l < src->n_lengths; l++) {
            ckv_ruler_set set;
            st = ckv_ruler_generate(r, src->ruler_tasks[t], src->lengths[l], src->samples,
                                    src->seed, &tc, &set, err);
            if (st)
                break;
            if (set.skipped)
                note(o, "RULER task %s skipped: %s", src->ruler_tasks[t], set.skip_reason);
            else
                st = ckv_pack_add_ruler(p, tok, &set, err);
            ckv_ruler_set_free(&set);
        }
    ckv_ruler_close(r);
    return st;
}

/* Reads or generates every source; keeps the first `limit` samples of each
 * (task, length) per source. */
static ckv_status load_samples(const ckv_sweep_config *c, const ckv_sweep_opts *o,
                               const char *model_path,
                               const ckv_tokenizer *tok, int64_t limit, sample_set *out,
                               ckv_error *err)
{
    memset(out, 0, sizeof *out);
    if (!(out->packs = calloc(c->n_sources, sizeof *out->packs)))
        return ckv_errorf(err, CKV_ERR_NOMEM, "samples: out of memory");
    size_t total = 0;
    for (size_t i = 0; i < c->n_sources; i++, out->n_packs++) {
        const ckv_task_source *src = &c->sources[i];
        ckv_status st = src->pack ? ckv_pack_read(&out->packs[i], src->pack,
                                                  ckv_tokenizer_hash(tok), err)
                                  : ruler_pack(c, o, src, model_path, tok, &out->packs[i], err);
        if (st) {
            out->n_packs++;
            return st;
        }
        total += out->packs[i].n_samples;
    }
    if (total && !(out->units = calloc(total, sizeof *out->units)))
        return ckv_errorf(err, CKV_ERR_NOMEM, "samples: out of memory");
    for (size_t i = 0; i < out->n_packs; i++) {
        const ckv_pack *p = &out->packs[i];
        for (size_t j = 0; j < p->n_samples; j++) {
            const ckv_pack_sample *s = &p->samples[j];
            int64_t seen = 0;
            for (size_t k = 0; k < j; k++)
                seen += !strcmp(p->samples[k].task, s->task) &&
                        p->samples[k].target_length == s->target_length;
            out->units[out->n_units++] = limit <= 0 || seen < limit ? s : NULL;
        }
    }
    return CKV_OK;
}

static int64_t effective_limit(const ckv_sweep_config *c, int64_t limit)
{
    return limit > 0 ? limit : c->limit;
}

ckv_status ckv_sweep_count_samples(const ckv_sweep_config *c, int64_t limit, size_t *n_samples,
                                   ckv_error *err)
{
    limit = effective_limit(c, limit);
    *n_samples = 0;
    for (size_t i = 0; i < c->n_sources; i++) {
        const ckv_task_source *src = &c->sources[i];
        if (!src->pack) {
            uint64_t per = limit > 0 && (uint64_t)limit < src->samples ? (uint64_t)limit
                                                                      : src->samples;
            *n_samples += src->n_ruler_tasks * src->n_lengths * per;
            continue;
        }
        /* Counting needs no tokenizer check: any pack is accepted here. */
        ckv_pack p;
        ckv_status st = ckv_pack_read(&p, src->pack, 0, err);
        if (st)
            return st;
        for (size_t j = 0; j < p.n_samples; j++) {
            int64_t seen = 0;
            for (size_t k = 0; k < j; k++)
                seen += !strcmp(p.samples[k].task, p.samples[j].task) &&
                        p.samples[k].target_length == p.samples[j].target_length;
            *n_samples += limit <= 0 || seen < limit;
        }
        ckv_pack_free(&p);
    }
    return CKV_OK;
}

static ckv_status sha256_file(const char *path, char hex[65], ckv_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ckv_errorf(err, CKV_ERR_IO, "%s: cannot open for hashing", path);
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    static uint8_t buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        sha256_update(&ctx, n, buf);
    bool bad = ferror(f);
    fclose(f);
    if (bad)
        return ckv_errorf(err, CKV_ERR_IO, "%s: read error while hashing", path);
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(&ctx, sizeof d, d);
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    return CKV_OK;
}

/* Decoded text with invalid UTF-8 bytes replaced by U+FFFD, as Hugging
 * Face's decode does (the metrics take only valid UTF-8). */
static char *valid_utf8(const char *s, size_t n)
{
    char *out = malloc(3 * n + 1);
    size_t o = 0;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n;) {
        size_t k = ckv_utf8_next(s + i, n - i, NULL);
        if (k) {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    out[o] = 0;
    return out;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
    if (!n)
        return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One fork in a sample's joint decode: greedy, or teacher-forced along the
 * full cache's tokens (`forced`, for fidelity), with its policy's decode
 * compressions. The buffers belong to the sweep, one set per slot. */
typedef struct {
    ckv_bcache *cache;        /* NULL: the run was skipped */
    const ckv_policy *policy; /* NULL: no compression (the full run) */
    int32_t budget, interval, ring_cap;
    bool no_bias, active;
    const int32_t *forced;    /* teacher forcing: feed these, compare with ref_logits */
    int32_t n_forced;
    ckv_fidelity fid;
    int32_t tok;              /* the token this step feeds */
    int32_t n_gen, n_steps;
    double compress_ms;
    ckv_cache_stats peak;
    float *logits;            /* [n_vocab] logits of the next token */
    float *qring;             /* [ring_cap][q_stride] decode queries, a ring */
    int32_t *gen;             /* [max_new] greedy tokens */
    double *step_ms;          /* [max_new] wall time of every step it took part in */
} fork_seq;

/* Clears a slot's state for a new sample; its buffers stay. */
static void seq_reset(fork_seq *f)
{
    fork_seq keep = {.logits = f->logits, .qring = f->qring, .gen = f->gen,
                     .step_ms = f->step_ms};
    *f = keep;
}

/* Everything one sweep holds while it runs. */
typedef struct {
    const ckv_sweep_config *c;
    const ckv_sweep_opts *o;
    ckv_model model;
    ckv_tokenizer *tok;
    ckv_backend be;
    int32_t n_vocab, q_stride; /* q_stride: floats of one token's queries, all layers */
    int32_t window;            /* prefill query window: the largest any run needs */
    bool track_score;
    float *logits, *prefill_logits, *qwin, *qbuf;
    /* Slots: greedy fork of run r at r, its teacher-forced fork at n_runs + r. */
    fork_seq *seq;
    /* One batched step: slot, cache and token of each row; its logits and queries. */
    size_t *bidx, *brow;
    ckv_bcache **bcache;
    int32_t *btok;
    float *blogits, *bq;
    /* Fidelity reference: the full cache's tokens and logits per step. */
    int32_t *ref_tok;
    float *ref_logits;
    int32_t ref_n;
} sweep;

/* The ring of a fork's decode queries as [n_layer][n_head][w][head_dim],
 * the layout ckv_qwindow wants, oldest first. */
static ckv_qwindow ring_window(sweep *w, const fork_seq *f)
{
    const ckv_config *cfg = &w->model.cfg;
    int32_t cap = f->ring_cap, n = f->n_steps < cap ? f->n_steps : cap, hd = cfg->head_dim;
    for (int32_t i = 0; i < n; i++) {
        int32_t slot = (f->n_steps - n + i) % cap;
        const float *src = f->qring + (size_t)slot * w->q_stride;
        for (int32_t lh = 0; lh < cfg->n_layer * cfg->n_head; lh++)
            memcpy(w->qbuf + ((size_t)lh * n + i) * hd, src + (size_t)lh * hd,
                   (size_t)hd * sizeof(float));
    }
    return (ckv_qwindow){.q = w->qbuf, .n_head = cfg->n_head, .w = n};
}

/* Picks every active fork's next token (argmax, or the forced one) and
 * retires forks at an end-of-generation token or their last token; returns
 * how many take the step, their slots in w->bidx. */
static size_t next_tokens(sweep *w, fork_seq *f, size_t n, int32_t max_new)
{
    size_t nb = 0;
    for (size_t i = 0; i < n; i++) {
        fork_seq *s = &f[i];
        int32_t k = s->n_steps, limit = s->forced ? s->n_forced : max_new;
        if (!s->active || k >= limit) {
            s->active = false;
            continue;
        }
        if (s->forced) {
            ckv_fidelity_add(&s->fid, w->ref_logits + (size_t)k * w->n_vocab, s->logits,
                             w->n_vocab, s->forced[k]);
            s->tok = s->forced[k];
        } else {
            s->tok = ckv_argmax(s->logits, w->n_vocab);
            if (ckv_token_is_eog(w->tok, s->tok)) {
                s->active = false;
                continue;
            }
            s->gen[s->n_gen++] = s->tok;
        }
        if (k + 1 == limit) {
            s->active = false;
            continue;
        }
        w->bidx[nb++] = i;
    }
    return nb;
}

/* One decode step of the forks in w->bidx[0, nb): a batched backend call per
 * degree-bias setting, results scattered back to each fork. */
static ckv_status batch_step(sweep *w, fork_seq *f, size_t nb, ckv_error *err)
{
    for (int bias = 0; bias < 2; bias++) {
        int32_t m = 0;
        bool want_q = false;
        for (size_t j = 0; j < nb; j++) {
            const fork_seq *s = &f[w->bidx[j]];
            if (s->no_bias != (bias == 1))
                continue;
            w->brow[m] = w->bidx[j];
            w->bcache[m] = s->cache;
            w->btok[m++] = s->tok;
            want_q |= s->ring_cap > 0;
        }
        if (!m)
            continue;
        ckv_status st = w->be.ops->decode_batch(w->be.state, w->bcache, w->btok, m, bias == 1,
                                                w->blogits, want_q ? w->bq : NULL, err);
        if (st)
            return st;
        for (int32_t j = 0; j < m; j++) {
            fork_seq *s = &f[w->brow[j]];
            memcpy(s->logits, w->blogits + (size_t)j * w->n_vocab,
                   (size_t)w->n_vocab * sizeof(float));
            if (s->ring_cap)
                memcpy(s->qring + (size_t)(s->n_steps % s->ring_cap) * w->q_stride,
                       w->bq + (size_t)j * w->q_stride, (size_t)w->q_stride * sizeof(float));
        }
    }
    return CKV_OK;
}

/* Decodes forks f[0, n) together from their logits until each stops: every
 * step feeds all active forks through the backend at once (the weights are
 * read once per step), then applies each fork's decode compression on its
 * interval. Every fork records the step's wall time: what it waited for. */
static ckv_status decode_all(sweep *w, fork_seq *f, size_t n, int32_t max_new, ckv_error *err)
{
    const ckv_backend_ops *ops = w->be.ops;
    for (size_t i = 0; i < n; i++)
        if ((f[i].active = f[i].cache != NULL))
            f[i].peak = ops->stats(w->be.state, f[i].cache);
    size_t nb;
    while ((nb = next_tokens(w, f, n, max_new)) > 0) {
        double t0 = ckv_now();
        ckv_status st = batch_step(w, f, nb, err);
        if (st)
            return st;
        double ms = (ckv_now() - t0) * 1e3;
        for (size_t j = 0; j < nb; j++) {
            fork_seq *s = &f[w->bidx[j]];
            s->step_ms[s->n_steps++] = ms;
            ckv_cache_stats cs = ops->stats(w->be.state, s->cache);
            if (cs.entries > s->peak.entries)
                s->peak = cs;
            if (!s->policy || s->interval <= 0 || s->n_steps % s->interval)
                continue;
            ckv_qwindow qw = s->ring_cap ? ring_window(w, s) : (ckv_qwindow){0};
            t0 = ckv_now();
            if ((st = ops->on_decode(w->be.state, s->policy, s->cache, s->budget, s->n_steps,
                                     s->ring_cap ? &qw : NULL, NULL, err)))
                return st;
            s->compress_ms += (ckv_now() - t0) * 1e3;
        }
    }
    return CKV_OK;
}

static ckv_status score_row(sweep *w, const ckv_pack_sample *s, ckv_result_row *row,
                            const int32_t *gen, int32_t n_gen, ckv_error *err)
{
    char *text = NULL;
    size_t len = 0;
    ckv_status st = ckv_detokenize(w->tok, gen, (size_t)n_gen, &text, &len, err);
    if (st)
        return st;
    row->prediction = valid_utf8(text, len);
    free(text);
    if (!row->prediction)
        return ckv_errorf(err, CKV_ERR_NOMEM, "prediction: out of memory");
    return ckv_pack_score(s, row->prediction, &row->score, err);
}

static void row_free(ckv_result_row *r)
{
    free(r->prediction);
    free(r->status);
    r->prediction = r->status = NULL;
}

/* The capacity the rest of a fork's decode can use: its longest list plus
 * max_new, at most the full capacity. */
static int32_t decode_cap(sweep *w, const ckv_bcache *c, int32_t cap, int32_t max_new)
{
    int64_t need = (int64_t)w->be.ops->stats(w->be.state, c).max_len + max_new + 1;
    return need < cap ? (int32_t)need : cap;
}

/* Replaces a fork by a copy of decode_cap's capacity, so a sample's forks,
 * held together while they decode, take memory in proportion to their
 * budgets rather than to the prompt. */
static ckv_status right_size(sweep *w, ckv_bcache **c, int32_t cap, int32_t max_new,
                             ckv_error *err)
{
    const ckv_backend_ops *ops = w->be.ops;
    int32_t need = decode_cap(w, *c, cap, max_new);
    if (need >= cap)
        return CKV_OK;
    ckv_bcache *small = NULL;
    ckv_status st = ops->fork(w->be.state, &small, *c, need, err);
    if (st)
        return st;
    ops->cache_free(w->be.state, *c);
    *c = small;
    return CKV_OK;
}

/* Phase 1 of one run on a prefilled sample: skip checks, fork, compress,
 * (agnostic) question; leaves the greedy fork in g and, for fidelity, its
 * teacher-forced copy in t, both ready to decode. A skipped run leaves g
 * without a cache and its row final. */
static ckv_status prepare_run(sweep *w, const ckv_pack_sample *s, const ckv_run_config *rc,
                              ckv_bcache *base, int32_t n_prefill, double prefill_ms,
                              ckv_result_row *row, fork_seq *g, fork_seq *t, ckv_error *err)
{
    const ckv_backend_ops *ops = w->be.ops;
    const ckv_policy *p = &rc->policy;
    bool is_full = !rc->budget_spec[0];
    int64_t B = n_prefill;
    bool skip = false;
    char reason[400] = "";
    row->ttft_ms = prefill_ms;
    row->kl = row->top1 = NAN;
    row->score = NAN;
    if (!is_full && ckv_budget_check(p, &rc->budget, n_prefill, &B, &skip, reason,
                                     sizeof reason, err))
        return ckv_error_prefix(err, "run %s: ", rc->name);
    row->budget_entries = B;
    /* SnapKV scores with the last W prefill queries: a shorter prefill
     * cannot be compressed as the policy defines, like a budget too small. */
    int32_t want_w = (int32_t)ckv_policy_param(p, "window", 0);
    if (!is_full && !skip && (ckv_policy_needs(p) & CKV_NEEDS_Q_WINDOW) && n_prefill < want_w) {
        skip = true;
        snprintf(reason, sizeof reason, "the prefill has %d tokens, fewer than the %d-query "
                 "window of policy %s", n_prefill, want_w, p->ops->name);
    }
    if (skip) {
        size_t n = strlen(reason) + 10;
        if (!(row->status = malloc(n)) || !(row->prediction = strdup("")))
            return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory");
        snprintf(row->status, n, "skipped: %s", reason);
        return CKV_OK;
    }
    int32_t max_new = (int32_t)s->max_new_tokens;
    int32_t cap = (int32_t)s->n_tokens + max_new + 1;
    ckv_status st = ops->fork(w->be.state, &g->cache, base, cap, err);
    if (st)
        return st;
    int32_t budget = B > INT32_MAX ? INT32_MAX : (int32_t)B, W = w->window;
    ckv_qwindow qw = {.q = w->qwin, .n_head = w->model.cfg.n_head, .w = W};
    g->policy = is_full ? NULL : p;
    g->budget = budget;
    g->no_bias = !ckv_policy_degree_bias(p);
    if (g->policy) {
        g->interval = ckv_policy_interval(p);
        if (g->interval > 0 && (ckv_policy_needs(p) & CKV_NEEDS_Q_WINDOW))
            g->ring_cap = want_w;
    }
    double t0 = ckv_now();
    if (!is_full && (st = ops->compress(w->be.state, p, g->cache, budget, W ? &qw : NULL, err)))
        return st;
    row->compress_ms = (ckv_now() - t0) * 1e3;
    ckv_cache_stats after = ops->stats(w->be.state, g->cache);
    row->kv_entries = after.entries;
    row->kv_bytes = after.bytes;
    memcpy(g->logits, w->prefill_logits, (size_t)w->n_vocab * sizeof(float));
    int32_t n_q = (int32_t)s->n_tokens - n_prefill;
    if (n_q > 0) {
        ckv_forward_opts fo = {.no_degree_bias = g->no_bias};
        t0 = ckv_now();
        if ((st = ops->forward(w->be.state, g->cache, s->tokens + n_prefill, n_q, &fo, g->logits,
                               err)))
            return st;
        row->ttft_ms += (ckv_now() - t0) * 1e3;
    }
    if ((st = right_size(w, &g->cache, cap, max_new, err)))
        return st;
    if (w->ref_n <= 0)
        return CKV_OK;
    t->policy = g->policy;
    t->budget = g->budget;
    t->interval = g->interval;
    t->ring_cap = g->ring_cap;
    t->no_bias = g->no_bias;
    t->forced = w->ref_tok;
    t->n_forced = w->ref_n;
    memcpy(t->logits, g->logits, (size_t)w->n_vocab * sizeof(float));
    return ops->fork(w->be.state, &t->cache, g->cache, decode_cap(w, g->cache, cap, max_new), err);
}

/* Phase 3 of one run: its row from the decoded forks. */
static ckv_status finish_run(sweep *w, const ckv_pack_sample *s, const fork_seq *g,
                             const fork_seq *t, ckv_result_row *row, ckv_error *err)
{
    if (!g->cache)
        return CKV_OK;
    row->compress_ms += g->compress_ms;
    row->tpot_ms = median(g->step_ms, (size_t)g->n_steps);
    row->generated_tokens = g->n_gen;
    row->kv_entries_peak = g->peak.entries > row->kv_entries ? g->peak.entries : row->kv_entries;
    row->kv_bytes_peak = g->peak.bytes > row->kv_bytes ? g->peak.bytes : row->kv_bytes;
    ckv_status st = score_row(w, s, row, g->gen, g->n_gen, err);
    if (st)
        return st;
    if (t->cache) {
        ckv_fidelity_summary fsum = ckv_fidelity_summarize(&t->fid, true);
        row->fidelity_steps = (int32_t)t->fid.n;
        row->kl = fsum.kl_mean;
        row->top1 = fsum.top1;
    }
    if (!(row->status = strdup("ok")))
        return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory");
    return CKV_OK;
}

/* The full cache's greedy continuation, its tokens and per-step logits,
 * for teacher-forced fidelity. */
static ckv_status reference(sweep *w, const ckv_pack_sample *s, ckv_bcache *base,
                            int32_t n_prefill, ckv_error *err)
{
    const ckv_backend_ops *ops = w->be.ops;
    int32_t cap = (int32_t)s->n_tokens + (int32_t)s->max_new_tokens + 1;
    ckv_bcache *fork = NULL;
    ckv_status st = ops->fork(w->be.state, &fork, base, cap, err);
    if (st)
        return st;
    memcpy(w->logits, w->prefill_logits, (size_t)w->n_vocab * sizeof(float));
    int32_t n_q = (int32_t)s->n_tokens - n_prefill;
    if (n_q > 0)
        st = ops->forward(w->be.state, fork, s->tokens + n_prefill, n_q, NULL, w->logits, err);
    w->ref_n = 0;
    for (int32_t k = 0; !st && k < (int32_t)s->max_new_tokens; k++) {
        int32_t tok = ckv_argmax(w->logits, w->n_vocab);
        if (ckv_token_is_eog(w->tok, tok))
            break;
        memcpy(w->ref_logits + (size_t)k * w->n_vocab, w->logits,
               (size_t)w->n_vocab * sizeof(float));
        w->ref_tok[w->ref_n++] = tok;
        if (k + 1 < (int32_t)s->max_new_tokens)
            st = ops->forward(w->be.state, fork, &tok, 1, NULL, w->logits, err);
    }
    ops->cache_free(w->be.state, fork);
    return st;
}

static double budget_value(const ckv_run_config *rc)
{
    return rc->budget.absolute ? (double)rc->budget.absolute : (double)rc->budget.ppm / 1e6;
}

/* All runs of one sample into rows[0, n_runs): one prefill, then each run
 * prepared on its own fork (phase 1), all forks decoded together (phase 2:
 * greedy, then teacher-forced for fidelity), and the rows filled (phase 3). */
static ckv_status run_unit(sweep *w, int64_t unit, const ckv_pack_sample *s, ckv_result_row *rows,
                           ckv_error *err)
{
    const ckv_backend_ops *ops = w->be.ops;
    const ckv_sweep_config *c = w->c;
    size_t n_runs = c->n_runs;
    int32_t n_prefill = (int32_t)(c->query_agnostic ? s->n_context_tokens : s->n_tokens);
    int32_t cap = (int32_t)s->n_tokens + (int32_t)s->max_new_tokens + 1;
    if (n_prefill < 1)
        return ckv_errorf(err, CKV_ERR_ARG, "task %s sample %u: nothing to prefill", s->task,
                          s->index);
    for (size_t r = 0; r < n_runs; r++) {
        const ckv_run_config *rc = &c->runs[r];
        ckv_result_row *row = &rows[r];
        memset(row, 0, sizeof *row);
        row->unit = unit;
        row->task = s->task;
        row->length = (int32_t)s->target_length;
        row->sample = (int32_t)s->index;
        row->run = (int32_t)r;
        row->policy = (char *)rc->policy.ops->name;
        row->budget = budget_value(rc);
        row->budget_spec = rc->budget_spec;
        row->metric = s->metric;
        row->prompt_tokens = (int32_t)s->n_tokens;
        row->device = (char *)ops->name;
    }
    for (size_t i = 0; i < 2 * n_runs; i++)
        seq_reset(&w->seq[i]);
    ckv_bcache *base = NULL;
    ckv_status st = ops->cache_new(w->be.state, &base, cap, w->track_score, c->kv_dtype, err);
    if (st)
        return st;
    int32_t W = w->window < n_prefill ? w->window : n_prefill;
    ckv_forward_opts fo = {.q_window = W, .q_window_out = W ? w->qwin : NULL};
    double t0 = ckv_now();
    st = ops->forward(w->be.state, base, s->tokens, n_prefill, &fo, w->prefill_logits, err);
    double prefill_ms = (ckv_now() - t0) * 1e3;
    int32_t saved = w->window;
    w->window = W;
    w->ref_n = 0;
    if (!st && c->fidelity)
        st = reference(w, s, base, n_prefill, err);
    for (size_t r = 0; !st && r < n_runs; r++) {
        if (w->o->stop && *w->o->stop)
            st = ckv_errorf(err, CKV_ERR_INTERRUPTED, "interrupted");
        else
            st = prepare_run(w, s, &c->runs[r], base, n_prefill, prefill_ms, &rows[r],
                             &w->seq[r], &w->seq[n_runs + r], err);
    }
    w->window = saved;
    ops->cache_free(w->be.state, base);
    if (!st)
        st = decode_all(w, w->seq, n_runs, (int32_t)s->max_new_tokens, err);
    if (!st && w->ref_n > 0)
        st = decode_all(w, w->seq + n_runs, n_runs, w->ref_n, err);
    for (size_t r = 0; !st && r < n_runs; r++)
        st = finish_run(w, s, &w->seq[r], &w->seq[n_runs + r], &rows[r], err);
    for (size_t i = 0; i < 2 * n_runs; i++) {
        ops->cache_free(w->be.state, w->seq[i].cache);
        w->seq[i].cache = NULL;
    }
    if (st && st != CKV_ERR_INTERRUPTED)
        ckv_error_prefix(err, "task %s sample %u: ", s->task, s->index);
    return st;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The distinct units of a resumed file's rows, sorted. */
static ckv_status units_of(const ckv_results_data *d, int64_t **out, size_t *n, ckv_error *err)
{
    *n = 0;
    if (!(*out = malloc((d->n_rows ? d->n_rows : 1) * sizeof **out)))
        return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < d->n_rows; i++)
        (*out)[i] = d->rows[i].unit;
    qsort(*out, d->n_rows, sizeof **out, cmp_i64);
    for (size_t i = 0; i < d->n_rows; i++)
        if (!*n || (*out)[*n - 1] != (*out)[i])
            (*out)[(*n)++] = (*out)[i];
    return CKV_OK;
}

ckv_status ckv_sweep_open_results(const ckv_sweep_config *c, const ckv_sweep_opts *o,
                                  const char *device, ckv_results **res, int64_t **done,
                                  size_t *n_done, ckv_error *err)
{
    *done = NULL;
    *n_done = 0;
    char hash[17];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)c->hash);
    bool exists = access(o->out_path, F_OK) == 0;
    if (exists && o->resume) {
        ckv_results_data d;
        ckv_status st = ckv_results_read(o->out_path, &d, err);
        if (st)
            return st;
        if (strcmp(d.meta.config_hash, hash) && !o->force)
            st = ckv_errorf(err, CKV_ERR_ARG,
                            "%s: was started with another config (hash %s, now %s); use --force "
                            "to resume anyway",
                            o->out_path, d.meta.config_hash, hash);
        if (!st)
            st = units_of(&d, done, n_done, err);
        ckv_results_data_free(&d);
        return st ? st : ckv_results_open(res, o->out_path, err);
    }
    if (exists && !o->force)
        return ckv_errorf(err, CKV_ERR_ARG, "%s exists: use --resume to continue it or --force "
                          "to overwrite it", o->out_path);
    const char *model_path = ckv_default_model_path(c->model);
    char sha[65], host[256] = "", when[32];
    ckv_status st = sha256_file(model_path, sha, err);
    if (st)
        return st;
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    ckv_results_meta meta = {
        .tool_version = CKV_VERSION, .git_rev = CKV_GIT_REV, .model_path = (char *)model_path,
        .model_sha256 = sha, .config_path = c->path, .config_text = c->text,
        .config_hash = hash, .device = (char *)device, .host = host,
        .start_time = when, .mode = c->query_agnostic ? "query_agnostic" : "query_aware"};
    ckv_run_row *runs = calloc(c->n_runs, sizeof *runs);
    char (*params)[512] = calloc(c->n_runs, sizeof *params);
    if (!runs || !params) {
        free(runs);
        free(params);
        return ckv_errorf(err, CKV_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < c->n_runs; i++) {
        ckv_policy_describe(&c->runs[i].policy, params[i], sizeof params[i]);
        runs[i] = (ckv_run_row){(int32_t)i, c->runs[i].name, (char *)c->runs[i].policy.ops->name,
                                c->runs[i].budget_spec, params[i], c->runs[i].params};
    }
    st = ckv_results_create(res, o->out_path, &meta, runs, c->n_runs, err);
    free(runs);
    free(params);
    return st;
}

static ckv_status sweep_alloc(sweep *w, int32_t max_new, ckv_error *err)
{
    const ckv_config *cfg = &w->model.cfg;
    size_t n_runs = w->c->n_runs;
    w->n_vocab = cfg->n_vocab;
    w->q_stride = cfg->n_layer * cfg->n_head * cfg->head_dim;
    int32_t ring = 0;
    bool ok = (w->seq = calloc(2 * n_runs, sizeof *w->seq)) != NULL;
    for (size_t r = 0; ok && r < n_runs; r++) {
        const ckv_policy *p = &w->c->runs[r].policy;
        int needs = ckv_policy_needs(p);
        int32_t win = (int32_t)ckv_policy_param(p, "window", 0);
        if ((needs & CKV_NEEDS_Q_WINDOW) && win > w->window)
            w->window = win;
        /* Only runs that score with decode queries keep a ring of them. */
        int32_t run_ring = (needs & CKV_NEEDS_Q_WINDOW) && ckv_policy_interval(p) > 0 ? win : 0;
        if (run_ring > ring)
            ring = run_ring;
        w->track_score |= (needs & CKV_NEEDS_SCORE) != 0;
        for (size_t k = r; ok && k < 2 * n_runs; k += n_runs) {
            fork_seq *f = &w->seq[k];
            f->logits = malloc((size_t)w->n_vocab * sizeof(float));
            f->gen = malloc(((size_t)max_new + 1) * sizeof(int32_t));
            f->step_ms = malloc(((size_t)max_new + 1) * sizeof(double));
            f->qring = run_ring ? malloc((size_t)run_ring * w->q_stride * sizeof(float)) : NULL;
            ok = f->logits && f->gen && f->step_ms && (!run_ring || f->qring);
        }
    }
    if (!ok)
        return ckv_errorf(err, CKV_ERR_NOMEM, "sweep buffers: out of memory");
    size_t win = (size_t)(w->window > ring ? w->window : ring);
    w->logits = malloc((size_t)w->n_vocab * sizeof(float));
    w->prefill_logits = malloc((size_t)w->n_vocab * sizeof(float));
    w->qwin = malloc(((size_t)w->window + 1) * w->q_stride * sizeof(float));
    w->qbuf = malloc((win + 1) * w->q_stride * sizeof(float));
    w->bidx = malloc(n_runs * sizeof *w->bidx);
    w->brow = malloc(n_runs * sizeof *w->brow);
    w->bcache = malloc(n_runs * sizeof *w->bcache);
    w->btok = malloc(n_runs * sizeof *w->btok);
    w->blogits = malloc(n_runs * (size_t)w->n_vocab * sizeof(float));
    w->bq = ring ? malloc(n_runs * (size_t)w->q_stride * sizeof(float)) : NULL;
    w->ref_tok = malloc(((size_t)max_new + 1) * sizeof(int32_t));
    w->ref_logits = w->c->fidelity ? malloc((size_t)max_new * w->n_vocab * sizeof(float) + 1)
                                   : NULL;
    if (!w->logits || !w->prefill_logits || !w->qwin || !w->qbuf || !w->bidx || !w->brow ||
        !w->bcache || !w->btok || !w->blogits || (ring && !w->bq) || !w->ref_tok ||
        (w->c->fidelity && !w->ref_logits))
        return ckv_errorf(err, CKV_ERR_NOMEM, "sweep buffers: out of memory");
    return CKV_OK;
}

static void sweep_free(sweep *w)
{
    for (size_t i = 0; w->seq && i < 2 * w->c->n_runs; i++) {
        free(w->seq[i].logits);
        free(w->seq[i].qring);
        free(w->seq[i].gen);
        free(w->seq[i].step_ms);
    }
    free(w->seq);
    free(w->logits);
    free(w->prefill_logits);
    free(w->qwin);
    free(w->qbuf);
    free(w->bidx);
    free(w->brow);
    free(w->bcache);
    free(w->btok);
    free(w->blogits);
    free(w->bq);
    free(w->ref_tok);
    free(w->ref_logits);
    ckv_backend_close(&w->be);
    ckv_tokenizer_free(w->tok);
    ckv_model_free(&w->model);
}

static void report(const ckv_sweep_opts *o, ckv_sweep_event ev, const ckv_sweep_progress *p)
{
    if (o->progress)
        o->progress(o->progress_ctx, ev, p);
}

/* Marks the units in list[0, n) in done[0, n_units). */
static void mark_done(bool *done, size_t n_units, const int64_t *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] >= 0 && (uint64_t)list[i] < n_units)
            done[list[i]] = true;
}

ckv_status ckv_sweep_run(const ckv_sweep_config *c, const ckv_sweep_opts *o, ckv_error *err)
{
    sweep w = {.c = c, .o = o};
    sample_set set = {0};
    ckv_results *res = NULL;
    bool *done = NULL;
    int64_t *done_list = NULL;
    size_t n_done_list = 0;
    ckv_result_row *buf = NULL;
    size_t n_buf = 0;
    const char *model_path = ckv_default_model_path(c->model);
    int32_t n_shards = o->n_shards > 0 ? o->n_shards : 1;
    char line[512];
    ckv_status st = ckv_model_load(&w.model, model_path, err);
    if (st)
        return st;
    if ((st = ckv_tokenizer_load(&w.tok, &w.model.gguf, err)) ||
        (st = ckv_backend_open(&w.be, o->device ? o->device : "auto", &w.model, 512, c->threads,
                               line, sizeof line, err)))
        goto out;
    if (line[0])
        note(o, "device auto: %s; running on the CPU", line);
    w.be.ops->describe(w.be.state, line, sizeof line);
    note(o, "device %s", line);
    if ((st = load_samples(c, o, model_path, w.tok, effective_limit(c, o->limit), &set, err)))
        goto out;
    uint32_t max_new = 1;
    for (size_t u = 0; u < set.n_units; u++)
        if (set.units[u] && set.units[u]->max_new_tokens > max_new)
            max_new = set.units[u]->max_new_tokens;
    ckv_sweep_progress pr = {0};
    if ((st = sweep_alloc(&w, (int32_t)max_new, err)) ||
        (!o->unit_done && (st = ckv_sweep_open_results(c, o, w.be.ops->name, &res, &done_list,
                                                       &n_done_list, err))))
        goto out;
    size_t flush_cap = FLUSH_ROWS + c->n_runs;
    if (!(buf = calloc(flush_cap, sizeof *buf)) ||
        !(done = calloc(set.n_units ? set.n_units : 1, sizeof *done))) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory");
        goto out;
    }
    mark_done(done, set.n_units, done_list, n_done_list);
    mark_done(done, set.n_units, o->skip_units, o->n_skip);
    for (size_t u = 0; u < set.n_units; u++)
        if (set.units[u] && (int64_t)(u % (size_t)n_shards) == o->shard) {
            pr.units_total++;
            pr.units_done += done[u];
        }
    pr.rows_total = pr.units_total * c->n_runs;
    pr.rows_done = pr.rows_flushed = pr.units_done * c->n_runs;
    report(o, CKV_SWEEP_PLAN, &pr);
    double last_flush = ckv_now();
    for (size_t u = 0; u < set.n_units && !st; u++) {
        if (!set.units[u] || (int64_t)(u % (size_t)n_shards) != o->shard || done[u])
            continue;
        if (o->stop && *o->stop) {
            st = ckv_errorf(err, CKV_ERR_INTERRUPTED, "interrupted");
            break;
        }
        st = run_unit(&w, (int64_t)u, set.units[u], buf + n_buf, err);
        if (st) {
            for (size_t r = 0; r < c->n_runs; r++)
                row_free(&buf[n_buf + r]);
            break;
        }
        n_buf += c->n_runs;
        pr.units_done++;
        pr.rows_done += c->n_runs;
        if (o->unit_done) {
            st = o->unit_done(o->unit_ctx, buf, n_buf, err);
            for (size_t r = 0; r < n_buf; r++)
                row_free(&buf[r]);
            n_buf = 0;
        }
        report(o, CKV_SWEEP_UNIT, &pr);
        if (n_buf >= FLUSH_ROWS || (n_buf && ckv_now() - last_flush >= o->flush_seconds)) {
            st = ckv_results_append(res, buf, n_buf, err);
            for (size_t r = 0; r < n_buf; r++)
                row_free(&buf[r]);
            pr.rows_flushed += st ? 0 : n_buf;
            n_buf = 0;
            last_flush = ckv_now();
            if (!st)
                report(o, CKV_SWEEP_FLUSHED, &pr);
        }
    }
    /* Finished units are kept on an interruption too. */
    if (n_buf && (!st || st == CKV_ERR_INTERRUPTED)) {
        ckv_error e2 = {0};
        ckv_status fs = ckv_results_append(res, buf, n_buf, st ? &e2 : err);
        if (fs && !st)
            st = fs;
        pr.rows_flushed += fs ? 0 : n_buf;
        if (!fs)
            report(o, CKV_SWEEP_FLUSHED, &pr);
    }
    for (size_t r = 0; r < n_buf; r++)
        row_free(&buf[r]);
    if (res) {
        ckv_error e2 = {0};
        ckv_status fs = ckv_results_finish(res, st ? &e2 : err);
        res = NULL;
        if (fs && !st)
            st = fs;
    }
    if (w.be.ops) {
        w.be.ops->describe(w.be.state, line, sizeof line);
        note(o, "device at the end: %s", line);
    }
out:
    ckv_results_close(res);
    free(buf);
    free(done);
    free(done_list);
    samples_free(&set);
    sweep_free(&w);
    return st;
}
