#include "teacher_force.h"

#include <stdlib.h>
#include <string.h>

/* Compressed-cache state: the cache, its budget and the rolling window of
 * decode queries that SnapKV's decode mode re-scores with. */
typedef struct {
    ckv_cache c;
    int32_t budget, w, n_qw; /* window size, queries held so far */
    float *qw;               /* [n_layer][n_head][w][head_dim] */
    float *q1;               /* one step's queries [n_layer][n_head][1][head_dim] */
} comp_state;

static void comp_free(comp_state *s)
{
    ckv_cache_free(&s->c);
    free(s->qw);
    free(s->q1);
}

/* Appends one step's queries to the window, dropping the oldest. */
static void push_queries(comp_state *s, const ckv_config *cfg)
{
    size_t hd = (size_t)cfg->head_dim, rows = (size_t)cfg->n_layer * cfg->n_head;
    for (size_t r = 0; r < rows; r++) {
        float *win = s->qw + r * s->w * hd;
        memmove(win, win + hd, (size_t)(s->w - 1) * hd * sizeof *win);
        memcpy(win + (size_t)(s->w - 1) * hd, s->q1 + r * hd, hd * sizeof *win);
    }
    s->n_qw += s->n_qw < s->w;
}

static int32_t longest(const ckv_cache *c)
{
    return ckv_cache_max_len(c);
}

/* Prefills the prefix into the compressed cache and compresses it; the
 * prediction of tokens[prefix] is then in logits. */
static ckv_status comp_prefill(ckv_cpu *cpu, const ckv_model *m, const int32_t *tokens,
                               int32_t n, const ckv_tf_opts *o, comp_state *s, ckv_tf_result *r,
                               float *logits, ckv_error *err)
{
    const ckv_config *cfg = &m->cfg;
    const ckv_policy *p = o->policy;
    int needs = ckv_policy_needs(p);
    ckv_status st = ckv_cache_init(&s->c, cfg->n_layer, cfg->n_head_kv, cfg->head_dim, n,
                                   (needs & CKV_NEEDS_SCORE) != 0, err);
    if (st)
        return st;
    if (needs & CKV_NEEDS_Q_WINDOW) {
        s->w = (int32_t)ckv_policy_param(p, "window", 0);
        if (s->w < 1 || s->w > o->prefix)
            return ckv_errorf(err, CKV_ERR_ARG, "teacher forcing: window %d must be within the "
                              "%d prefix tokens", s->w, o->prefix);
        size_t row = (size_t)cfg->n_layer * cfg->n_head * cfg->head_dim;
        s->qw = malloc(row * s->w * sizeof *s->qw);
        s->q1 = malloc(row * sizeof *s->q1);
        if (!s->qw || !s->q1)
            return ckv_errorf(err, CKV_ERR_NOMEM, "teacher forcing: out of memory");
    }
    ckv_forward_opts fo = {.no_degree_bias = !ckv_policy_degree_bias(p), .q_window = s->w,
                           .q_window_out = s->qw};
    if ((st = ckv_cpu_forward(cpu, &s->c, tokens, o->prefix, &fo, logits, err)))
        return st;
    int64_t entries;
    bool skip;
    if ((st = ckv_budget_check(p, &o->budget, o->prefix, &entries, &skip, r->skip_reason,
                               sizeof r->skip_reason, err)))
        return st;
    r->skipped = skip;
    r->budget_entries = entries;
    s->budget = (int32_t)entries;
    if (skip)
        return CKV_OK;
    ckv_qwindow qw = {s->qw, cfg->n_head, s->w};
    if (longest(&s->c) > s->budget) {
        if ((st = ckv_policy_compress(p, &s->c, s->budget, &qw, NULL, err)))
            return st;
        r->compressions++;
    }
    /* the decode window holds decode queries only (policies.md, snapkv) */
    s->n_qw = 0;
    return CKV_OK;
}

ckv_status ckv_teacher_force(ckv_cpu *cpu, const ckv_model *m, const int32_t *tokens, int32_t n,
                             const ckv_tf_opts *o, ckv_tf_result *r, ckv_error *err)
{
    memset(r, 0, sizeof *r);
    if (o->prefix < 1 || n < 3 || o->prefix > n - 2)
        return ckv_errorf(err, CKV_ERR_ARG, "teacher forcing: prefix %d must leave at least 2 "
                          "of the %d tokens to score", o->prefix, n);
    const ckv_config *cfg = &m->cfg;
    const int32_t V = cfg->n_vocab, batch = o->batch > 0 ? o->batch : 64;
    ckv_cache full = {0};
    comp_state cs = {0};
    float *fl = malloc((size_t)batch * V * sizeof *fl), *cl = malloc((size_t)V * sizeof *cl);
    ckv_status st = CKV_OK;
    if (!fl || !cl) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "teacher forcing: out of memory for logits");
        goto out;
    }
    /* capacity n: CSM may run out of candidates above B, so the compressed
     * cache is not bounded by B + interval */
    if ((st = ckv_cache_init(&full, cfg->n_layer, cfg->n_head_kv, cfg->head_dim, n, false, err)))
        goto out;
    const ckv_forward_opts none = {0};
    if ((st = ckv_cpu_forward(cpu, &full, tokens, o->prefix, &none, NULL, err)))
        goto out;
    bool comp = o->policy != NULL;
    if (comp) {
        st = comp_prefill(cpu, m, tokens, n, o, &cs, r, cl, err);
        if (st)
            goto out;
        comp = !r->skipped;
    }
    ckv_fidelity f = {0};
    const ckv_forward_opts all = {.all_logits = true};
    for (int32_t t0 = o->prefix; t0 < n - 1 && !st; t0 += batch) {
        int32_t cnt = n - 1 - t0 < batch ? n - 1 - t0 : batch;
        if ((st = ckv_cpu_forward(cpu, &full, tokens + t0, cnt, &all, fl, err)))
            break;
        for (int32_t i = 0; i < cnt && !st; i++) {
            int32_t t = t0 + i;
            if (comp) {
                ckv_forward_opts fo = {.no_degree_bias = !ckv_policy_degree_bias(o->policy),
                                       .q_window = cs.w ? 1 : 0, .q_window_out = cs.q1};
                if ((st = ckv_cpu_forward(cpu, &cs.c, tokens + t, 1, &fo, cl, err)))
                    break;
                if (cs.w)
                    push_queries(&cs, cfg);
                int32_t len = longest(&cs.c);
                r->peak_len = len > r->peak_len ? len : r->peak_len;
                ckv_qwindow qw = {cs.qw, cfg->n_head, cs.n_qw};
                bool done = false;
                st = ckv_policy_on_decode(o->policy, &cs.c, cs.budget, t - o->prefix + 1, &qw,
                                          &done, err);
                r->compressions += done;
            }
            ckv_fidelity_add(&f, fl + (size_t)i * V, comp ? cl : NULL, V, tokens[t + 1]);
        }
    }
    r->s = ckv_fidelity_summarize(&f, comp);
out:
    ckv_cache_free(&full);
    comp_free(&cs);
    free(fl);
    free(cl);
    return st;
}
