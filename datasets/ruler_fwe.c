/* Frequent words extraction (RULER freq_words_extraction.py): coded
 * 6-letter words with Zipf counts; the answer is ranks 1-3 (rank 0 is the
 * noise word "..."). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ruler_gen.h"

#define FWE_WORDLEN 6

typedef struct {
    double alpha;
    size_t vocab_size;
    char (*vocab)[FWE_WORDLEN + 1];
    size_t *order;
} fwe_state;

static void fwe_free(void *p)
{
    fwe_state *s = p;
    if (!s)
        return;
    free(s->vocab);
    free(s->order);
    free(s);
}

static int cmp_word(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* Riemann zeta(alpha) for alpha > 1: the first 63 terms plus the
 * Euler-Maclaurin tail through the B6 term, summed smallest first; gives
 * pi^2/6 for alpha = 2 to the last bit (scipy.special.zeta). */
static double zeta(double a)
{
    const double N = 64;
    double s = pow(N, 1 - a) / (a - 1) + 0.5 * pow(N, -a) + a / 12.0 * pow(N, -a - 1) -
               a * (a + 1) * (a + 2) / 720.0 * pow(N, -a - 3) +
               a * (a + 1) * (a + 2) * (a + 3) * (a + 4) / 30240.0 * pow(N, -a - 5);
    for (int k = 63; k >= 1; k--)
        s += pow((double)k, -a);
    return s;
}

static ckv_status fwe_build(ruler_gen *g, size_t question, size_t units, ckv_rng *rng,
                            ruler_draft *d, ckv_error *err)
{
    (void)question;
    fwe_state *s = g->state;
    size_t V = s->vocab_size;
    /* vocab_size random words, more until that many are distinct; then
     * sorted(set(...)) and Random(seed).shuffle */
    size_t n = 0;
    for (;;) {
        while (n < V) {
            for (int i = 0; i < FWE_WORDLEN; i++)
                s->vocab[n][i] = (char)('a' + ckv_rng_below(rng, 26));
            s->vocab[n++][FWE_WORDLEN] = 0;
        }
        qsort(s->vocab, n, sizeof *s->vocab, cmp_word);
        size_t u = 0;
        for (size_t i = 0; i < n; i++)
            if (!u || strcmp(s->vocab[u - 1], s->vocab[i]))
                memmove(s->vocab[u++], s->vocab[i], sizeof *s->vocab);
        if (u == V)
            break;
        n = u;
    }
    ckv_rng fixed;
    ckv_rng_seed(&fixed, g->seed);
    ckv_rng_shuffle(&fixed, s->vocab, V, sizeof *s->vocab);
    strcpy(s->vocab[0], "..."); /* the top rank is noise */

    /* counts int(num_words * k^-alpha / zeta(alpha)), k = 1..V */
    double z = zeta(s->alpha);
    size_t total = 0;
    for (size_t k = 1; k <= V; k++)
        total += (size_t)((double)units * pow((double)k, -s->alpha) / z);
    size_t *list = malloc((total ? total : 1) * sizeof *list);
    if (!list)
        return ckv_errorf(err, CKV_ERR_NOMEM, "fwe: out of memory");
    size_t m = 0;
    for (size_t k = 1; k <= V; k++) {
        size_t c = (size_t)((double)units * pow((double)k, -s->alpha) / z);
        for (size_t i = 0; i < c; i++)
            list[m++] = k - 1;
    }
    ckv_rng_seed(&fixed, g->seed);
    ckv_rng_shuffle(&fixed, list, m, sizeof *list);
    rbuf ctx = {0};
    for (size_t i = 0; i < m; i++) {
        if (i)
            rbuf_put(&ctx, " ", 1);
        rbuf_puts(&ctx, s->vocab[list[i]]);
    }
    free(list);
    ckv_status st = ctx.oom ? ckv_errorf(err, CKV_ERR_NOMEM, "fwe: out of memory") : CKV_OK;
    for (size_t i = 1; i < 4 && i < V && !st; i++)
        st = ruler_draft_output(d, s->vocab[i], err);
    if (!st) {
        const char *names[2] = {"context", "query"};
        const char *vals[2] = {ctx.p ? ctx.p : "", ""};
        st = ruler_format(&d->text, g->tmpl, names, vals, 2, &d->ctx_start, &d->ctx_end, err);
    }
    rbuf_free(&ctx);
    return st;
}

/* RULER's linear search: start at max_len // 6 words and grow by
 * max_len // 32 while the prompt is shorter than max_len, then step back
 * once (max_len = length - tokens to generate). */
static ckv_status fwe_fit(ruler_gen *g, size_t *units, ckv_error *err)
{
    size_t max_len = g->target - g->gen_tokens, n = max_len / FWE_WORDLEN, len;
    ruler_draft d = {0};
    ckv_status st;
    for (;;) {
        ckv_rng rng;
        ruler_rng(g, RULER_STREAM_SEARCH, &rng);
        ruler_draft_clear(&d);
        if ((st = fwe_build(g, 0, n, &rng, &d, err)) || (st = ruler_measure(g, &d, &len, err)))
            break;
        if (len - g->gen_tokens >= max_len) {
            *units = n > g->incremental ? n - g->incremental : n;
            break;
        }
        n += g->incremental;
        if (n > 64 * max_len) {
            st = ckv_errorf(err, CKV_ERR_NUMERIC, "%s: prompt never reaches %zu tokens",
                            g->task, max_len);
            break;
        }
    }
    ruler_draft_free(&d);
    return st;
}

ckv_status ruler_fwe_init(ruler_gen *g, const json_t *args, ckv_error *err)
{
    fwe_state *s = calloc(1, sizeof *s);
    if (!s)
        return ckv_errorf(err, CKV_ERR_NOMEM, "fwe: out of memory");
    g->state = s;
    g->free_state = fwe_free;
    g->build = fwe_build;
    g->fit = fwe_fit;
    const json_t *a = json_object_get(args, "alpha");
    if (!json_is_number(a) || json_number_value(a) <= 1.0 || json_number_value(a) > 10.0)
        return ckv_errorf(err, CKV_ERR_FORMAT, "templates.json: tasks.%s.args.alpha: missing or "
                          "outside (1, 10]", g->task);
    s->alpha = json_number_value(a);
    size_t max_len = g->target - g->gen_tokens;
    s->vocab_size = max_len / 50;
    if (s->vocab_size < 4)
        return ckv_errorf(err, CKV_ERR_ARG, "%s: length %u is too short (vocabulary of %zu words, "
                          "RULER's (length - %u) // 50)", g->task, g->target, s->vocab_size,
                          g->gen_tokens);
    s->vocab = malloc(s->vocab_size * sizeof *s->vocab);
    if (!s->vocab)
        return ckv_errorf(err, CKV_ERR_NOMEM, "fwe: out of memory");
    g->incremental = max_len / 32;
    return CKV_OK;
}
