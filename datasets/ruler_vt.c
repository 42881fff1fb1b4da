/* Variable tracking (RULER variable_tracking.py), noise haystack: chains
 * VAR X0 = v, VAR X1 = VAR X0, ... hidden among noise lines, after one
 * in-context example whose names and value are re-drawn per sample. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ruler_gen.h"
#include "util.h"

#define VT_MAX_VARS 64

typedef struct {
    int num_chains, num_hops;
    bool icl_mode;  /* building the in-context example */
    char *icl;      /* example input + " " + answer names + "\n" */
} vt_state;

static void vt_free(void *p)
{
    vt_state *s = p;
    if (s)
        free(s->icl);
    free(s);
}

static void rand_upper(ckv_rng *rng, char *out, size_t k)
{
    for (size_t i = 0; i < k; i++)
        out[i] = (char)('A' + ckv_rng_below(rng, 26));
    out[k] = 0;
}

/* randomize_icl: each answer name (the last num_hops + 1 words of the
 * example) is replaced everywhere by fresh letters of the same length, then
 * the value 12345 by a fresh one (np.random.randint(10000, 99999)). */
static char *randomize_icl(const vt_state *s, ckv_rng *rng)
{
    size_t want = (size_t)s->num_hops + 1, n = 0;
    char *words[VT_MAX_VARS];
    const char *e = s->icl + strlen(s->icl);
    while (n < want) {
        while (e > s->icl && (e[-1] == ' ' || e[-1] == '\n'))
            e--;
        const char *b = e;
        while (b > s->icl && b[-1] != ' ' && b[-1] != '\n')
            b--;
        if (b == e)
            break;
        words[want - 1 - n++] = ckv_strndup(b, (size_t)(e - b));
        e = b;
    }
    char *cur = strdup(s->icl);
    for (size_t i = want - n; i < want && cur; i++) {
        if (!words[i]) {
            free(cur);
            cur = NULL;
            break;
        }
        char fresh[64];
        size_t l = strlen(words[i]);
        rand_upper(rng, fresh, l < sizeof fresh ? l : sizeof fresh - 1);
        char *next = ruler_replace_all(cur, words[i], fresh);
        free(cur);
        cur = next;
    }
    for (size_t i = want - n; i < want; i++)
        free(words[i]);
    if (!cur)
        return NULL;
    char value[16];
    snprintf(value, sizeof value, "%lld", (long long)ckv_rng_range(rng, 10000, 99998));
    char *out = ruler_replace_all(cur, "12345", value);
    free(cur);
    return out;
}

static ckv_status vt_build(ruler_gen *g, size_t question, size_t units, ckv_rng *rng,
                           ruler_draft *d, ckv_error *err)
{
    (void)question;
    vt_state *s = g->state;
    int hops = s->num_hops, chains = s->num_chains;
    size_t k = s->icl_mode ? 3 : 5, nvars = (size_t)(hops + 1) * (size_t)chains;
    /* names: draw (hops+1)*chains, then more until that many are distinct;
     * chains take the first ones in order, as RULER does */
    char names[VT_MAX_VARS * 4][6];
    size_t drawn = 0;
    for (;;) {
        while (drawn < nvars)
            rand_upper(rng, names[drawn++], k);
        size_t distinct = 0;
        for (size_t i = 0; i < drawn; i++) {
            size_t j = 0;
            while (j < i && strcmp(names[i], names[j]))
                j++;
            distinct += j == i;
        }
        if (distinct >= nvars || drawn == sizeof names / sizeof names[0])
            break;
        rand_upper(rng, names[drawn++], k);
    }
    char value[16];
    rbuf stmts = {0}; /* statements, NUL-separated, chain by chain */
    size_t n_stmt = (size_t)(hops + 1) * (size_t)chains;
    size_t *stmt_off = malloc(n_stmt * sizeof *stmt_off);
    const char **lines = malloc((units + n_stmt) * sizeof *lines);
    size_t *scratch = malloc((units + n_stmt) * sizeof *scratch);
    ckv_status st = CKV_OK;
    if (!stmt_off || !lines || !scratch) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "vt: out of memory");
        goto out;
    }
    for (int c = 0, m = 0; c < chains; c++) {
        const char(*v)[6] = names + c * (hops + 1);
        if (s->icl_mode)
            snprintf(value, sizeof value, "12345");
        else
            snprintf(value, sizeof value, "%lld", (long long)ckv_rng_range(rng, 10000, 99998));
        stmt_off[m++] = stmts.len;
        rbuf_printf(&stmts, "VAR %s = %s", v[0], value);
        rbuf_put(&stmts, "", 1);
        for (int j = 0; j < hops; j++) {
            stmt_off[m++] = stmts.len;
            rbuf_printf(&stmts, "VAR %s = VAR %s ", v[j + 1], v[j]);
            rbuf_put(&stmts, "", 1);
        }
        if (c == 0) {
            for (int j = 0; j <= hops && !st; j++)
                st = ruler_draft_output(d, v[j], err);
        }
    }
    if (stmts.oom && !st)
        st = ckv_errorf(err, CKV_ERR_NOMEM, "vt: out of memory");
    if (st)
        goto out;
    /* insert each chain at sorted random positions: statement j at pos_j + j */
    size_t n_lines = units;
    for (size_t i = 0; i < units; i++)
        lines[i] = ruler_noise;
    for (int c = 0; c < chains; c++) {
        size_t pos[VT_MAX_VARS], len = (size_t)hops + 1;
        if (n_lines < len) {
            st = ckv_errorf(err, CKV_ERR_ARG, "vt: %zu noise lines cannot hold a chain", units);
            goto out;
        }
        ckv_rng_sample(rng, n_lines, len, scratch, pos);
        for (size_t i = 1; i < len; i++)
            for (size_t j = i; j > 0 && pos[j - 1] > pos[j]; j--) {
                size_t t = pos[j];
                pos[j] = pos[j - 1];
                pos[j - 1] = t;
            }
        for (size_t j = 0; j < len; j++) {
            size_t at = pos[j] + j;
            memmove(lines + at + 1, lines + at, (n_lines - at) * sizeof *lines);
            lines[at] = stmts.p + stmt_off[(size_t)c * len + j];
            n_lines++;
        }
    }
    rbuf joined = {0};
    for (size_t i = 0; i < n_lines; i++) {
        if (i)
            rbuf_put(&joined, "\n", 1);
        rbuf_puts(&joined, lines[i]);
    }
    char *ctx = joined.oom ? NULL : ruler_replace_all(joined.p ? joined.p : "", ". \n", ".\n");
    rbuf_free(&joined);
    if (!ctx) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "vt: out of memory");
        goto out;
    }
    char num_v[16];
    snprintf(num_v, sizeof num_v, "%d", hops + 1);
    /* the query is chain 0's value */
    const char *q = stmts.p + stmt_off[0];
    q = strrchr(q, '=') + 2;
    char *example = NULL;
    if (!s->icl_mode && !g->probing) {
        /* the in-context example goes before the task template (RULER's
         * tokens-per-unit probe leaves it out) */
        example = randomize_icl(s, rng);
        if (!example) {
            free(ctx);
            st = ckv_errorf(err, CKV_ERR_NOMEM, "vt: out of memory");
            goto out;
        }
        rbuf_puts(&d->text, example);
        rbuf_put(&d->text, "\n", 1);
        free(example);
    }
    const char *names_f[3] = {"context", "query", "num_v"};
    const char *vals[3] = {ctx, q, num_v};
    st = ruler_format(&d->text, g->tmpl, names_f, vals, 3, &d->ctx_start, &d->ctx_end, err);
    free(ctx);
out:
    rbuf_free(&stmts);
    free(stmt_off);
    free(lines);
    free(scratch);
    return st;
}

ckv_status ruler_vt_init(ruler_gen *g, const json_t *args, ckv_error *err)
{
    vt_state *s = calloc(1, sizeof *s);
    if (!s)
        return ckv_errorf(err, CKV_ERR_NOMEM, "vt: out of memory");
    g->state = s;
    g->free_state = vt_free;
    g->build = vt_build;
    const json_t *c = json_object_get(args, "num_chains"), *h = json_object_get(args, "num_hops");
    const char *hay = json_string_value(json_object_get(args, "type_haystack"));
    if (!json_is_integer(c) || !json_is_integer(h) || json_integer_value(c) < 1 ||
        json_integer_value(h) < 1 ||
        json_integer_value(c) * (json_integer_value(h) + 1) > VT_MAX_VARS)
        return ckv_errorf(err, CKV_ERR_FORMAT, "templates.json: tasks.%s.args: num_chains and "
                          "num_hops must be integers >= 1 with chains * (hops + 1) <= %d",
                          g->task, VT_MAX_VARS);
    if (hay && strcmp(hay, "noise"))
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED, "%s: type_haystack '%s': only noise is "
                          "implemented (as in synthetic.yaml)", g->task, hay);
    s->num_chains = (int)json_integer_value(c);
    s->num_hops = (int)json_integer_value(h);

    /* the example: RULER generates it with max_seq_length 500, nothing to
     * generate, step 5, 3-letter names and value 12345 */
    ruler_gen ig = *g;
    ig.target = 500;
    ig.gen_tokens = 0;
    ig.incremental = 5;
    ig.probe_units = 5;
    ig.upper_mult = 3;
    s->icl_mode = true;
    size_t units = 0, length;
    ruler_draft d = {0};
    ckv_rng rng;
    ruler_rng(g, RULER_STREAM_ICL, &rng);
    ckv_status st = ruler_fit_search(&ig, &units, err);
    if (!st)
        st = ruler_draw_fitting(&ig, 0, &units, &rng, &d, &length, err);
    if (!st) {
        rbuf ex = {0};
        rbuf_put(&ex, d.text.p, d.text.len);
        for (size_t i = 0; i < d.n_outputs; i++) {
            rbuf_put(&ex, " ", 1);
            rbuf_puts(&ex, d.outputs[i]);
        }
        rbuf_put(&ex, "\n", 1);
        if (ex.oom)
            st = ckv_errorf(err, CKV_ERR_NOMEM, "vt: out of memory");
        s->icl = ex.p;
    }
    ruler_draft_free(&d);
    s->icl_mode = false;
    g->incremental = g->target < 4096 ? 5 : 10;
    g->probe_units = g->incremental;
    g->upper_mult = 3;
    return st;
}
