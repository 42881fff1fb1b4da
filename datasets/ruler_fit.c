/* Haystack-size search (RULER §1.10). RULER binary-searches the size in
 * [incremental, upper] for the largest prompt with prompt + generated
 * tokens <= max_seq_length, tokenizing the full prompt at every step. Token
 * counts grow almost linearly with size, so interpolating between the
 * bracket ends finds the same size in a handful of full tokenizations
 * instead of ~log2(upper); bisection takes over whenever a step fails to
 * halve the bracket, so the worst case stays logarithmic. */
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
    bool have_a = false, have_b = false;
    size_t la = 0, lb = 0;
    if (probe >= g->incremental && probe <= upper) {
        if (plen <= g->target) {
            a = probe, la = plen, have_a = true;
        } else {
            b = probe, lb = plen, have_b = true;
        }
    }
    bool bisect = false;
    while (b - a > 1) {
        size_t width = b - a, n;
        uint64_t want = g->target;
        if (bisect) {
            n = a + width / 2;
        } else if (have_a && have_b && lb > la) {
            n = a + (size_t)((want - la) * (uint64_t)width / (lb - la));
        } else {
            /* one side known: extrapolate with the probe's tokens per unit */
            size_t x = have_a ? a : have_b ? b : probe;
            size_t lx = have_a ? la : have_b ? lb : plen;
            double per = (double)ptok / (double)probe;
            double step = ((double)want - (double)lx) / (per > 0 ? per : 1.0);
            double nn = (double)x + step;
            n = nn < (double)(a + 1) ? a + 1 : nn > (double)(b - 1) ? b - 1 : (size_t)nn;
        }
        if (n <= a)
            n = a + 1;
        if (n >= b)
            n = b - 1;
        size_t len;
        if ((st = eval(g, n, &d, &len, err)))
            goto done;
        if (len <= g->target)
            a = n, la = len, have_a = true;
        else
            b = n, lb = len, have_b = true;
        bisect = !bisect && (b - a) * 2 > width;
    }
    /* RULER falls back to `incremental` when nothing fits */
    *units = have_a ? a : g->incremental;
done:
    ruler_draft_free(&d);
    return st;
}
