/* Haystack-size search (RULER §1.10). RULER binary-searches the size in
 * [incremental, upper] for the largest prompt with prompt + generated
 * tokens <= max_seq_length, tokenizing the full prompt at every step. Token
 * counts grow almost linearly with size, so a secant step through the last
 * two sizes lands next to the boundary in a few full tokenizations instead
 * of ~log2(upper). Secant steps approach from one side, so each repeat on
 * the same side pushes the next guess past the estimate by a doubling
 * margin until it crosses; the bracket [fits, does not fit] shrinks every
 * step, and once the push is half the bracket the step is a bisection, so
 * the worst case stays logarithmic. */
#include <math.h>

#include "ruler_gen.h"

static ckv_status eval(ruler_gen *g, size_t units, ruler_draft *d, size_t *length,
                       ckv_error *err)
{
    ckv_rng rng;
    ruler_rng(g, RULER_STREAM_SEARCH, &rng);
    ruler_draft_clear(d);
    ckv_status st = g->build(g, 0, units, &rng, d, err);
    return st ? st : ruler_measure(g, d, length, err);
}

ckv_status ruler_fit_search(ruler_gen *g, size_t *units, ckv_error *err)
{
    ruler_draft d = {0};
    size_t probe = g->probe_units ? g->probe_units : g->incremental;
    if (g->max_units && probe > g->max_units)
        probe = g->max_units;
    size_t plen;
    g->probing = true;
    ckv_status st = eval(g, probe, &d, &plen, err);
    g->probing = false;
    if (st)
        goto done;
    size_t ptok = plen - g->gen_tokens;
    /* RULER: upper = max(int(max_len / (tokens / probe) * mult), 2 * incremental) */
    size_t upper = ptok ? (size_t)((uint64_t)g->target * probe * g->upper_mult / ptok) : 0;
    if (upper < 2 * g->incremental)
        upper = 2 * g->incremental;
    if (g->max_units && upper > g->max_units)
        upper = g->max_units;

    /* bracket: a fits (or is below the range), b does not (or is above it) */
    size_t a = g->incremental - 1, b = upper + 1;
    bool have_a = false;
    /* the last two evaluated points, for the secant */
    double n0 = 0, l0 = 0, n1 = (double)probe, l1 = (double)plen;
    bool two = false;
    int side = -1; /* 1: the last point fit, 0: it did not */
    size_t push = 0;
    if (probe >= g->incremental && probe <= upper) {
        side = plen <= g->target;
        if (side)
            a = probe, have_a = true;
        else
            b = probe;
    }
    const double want = g->target;
    while (b - a > 1) {
        double x;
        if (two && l1 != l0)
            x = n1 + (want - l1) * (n1 - n0) / (l1 - l0);
        else /* tokens per unit from the probe (template overhead included) */
            x = n1 + (want - l1) * (double)probe / (double)(ptok ? ptok : 1);
        size_t half = (b - a) / 2;
        size_t n;
        if (push >= half) {
            n = a + half;
        } else {
            double y = side == 1 ? ceil(x) + (double)push : floor(x) - (double)push;
            n = y <= (double)(a + 1) ? a + 1 : y >= (double)(b - 1) ? b - 1 : (size_t)y;
        }
        size_t len;
        if ((st = eval(g, n, &d, &len, err)))
            goto done;
        int now = len <= g->target;
        if (now)
            a = n, have_a = true;
        else
            b = n;
        push = now == side ? (push ? 2 * push : 1) : 0;
        side = now;
        n0 = n1, l0 = l1, n1 = (double)n, l1 = (double)len;
        two = true;
    }
    /* RULER falls back to `incremental` when nothing fits */
    *units = have_a ? a : g->incremental;
done:
    ruler_draft_free(&d);
    return st;
}
