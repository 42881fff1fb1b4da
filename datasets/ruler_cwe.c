/* Common words extraction (RULER common_words_extraction.py): a numbered
 * list where 10 words repeat freq_cw times and the rest freq_ucw times,
 * after one solved example. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ruler_gen.h"

typedef struct {
    int freq_cw, freq_ucw, num_cw;
    ruler_words words;
    char **pool; /* sorted union of nouns, adjectives, verbs, shuffled with the seed */
    size_t n_pool;
    size_t *scratch;
} cwe_state;

static void cwe_free(void *p)
{
    cwe_state *s = p;
    if (!s)
        return;
    ruler_words_free(&s->words);
    free(s->pool);
    free(s->scratch);
    free(s);
}

/* get_example: num_words distinct words; the first num_cw are common.
 * Writes "1. w 2. w ..." of the repeated list, shuffled with a fresh
 * generator from the seed (random.Random(seed).shuffle). */
static ckv_status example(ruler_gen *g, cwe_state *s, size_t num_words, int rep_c, int rep_u,
                          ckv_rng *rng, rbuf *ctx, const char **common, ckv_error *err)
{
    if (num_words > s->n_pool || num_words < (size_t)s->num_cw)
        return ckv_errorf(err, CKV_ERR_ARG, "cwe: %zu words asked of a pool of %zu (at least %d)",
                          num_words, s->n_pool, s->num_cw);
    size_t *pick = malloc(num_words * sizeof *pick);
    size_t total = (size_t)s->num_cw * (size_t)rep_c + (num_words - (size_t)s->num_cw) * (size_t)rep_u;
    const char **list = malloc((total ? total : 1) * sizeof *list);
    if (!pick || !list) {
        free(pick);
        free(list);
        return ckv_errorf(err, CKV_ERR_NOMEM, "cwe: out of memory");
    }
    ckv_rng_sample(rng, s->n_pool, num_words, s->scratch, pick);
    size_t m = 0;
    /* common * rep_c + uncommon * rep_u (Python list repetition) */
    for (int r = 0; r < rep_c; r++)
        for (int i = 0; i < s->num_cw; i++)
            list[m++] = s->pool[pick[i]];
    for (int r = 0; r < rep_u; r++)
        for (size_t i = (size_t)s->num_cw; i < num_words; i++)
            list[m++] = s->pool[pick[i]];
    for (int i = 0; i < s->num_cw; i++)
        common[i] = s->pool[pick[i]];
    ckv_rng fixed;
    ckv_rng_seed(&fixed, g->seed);
    ckv_rng_shuffle(&fixed, list, m, sizeof *list);
    for (size_t i = 0; i < m; i++)
        rbuf_printf(ctx, i ? " %zu. %s" : "%zu. %s", i + 1, list[i]);
    free(pick);
    free(list);
    return ctx->oom ? ckv_errorf(err, CKV_ERR_NOMEM, "cwe: out of memory") : CKV_OK;
}

static ckv_status cwe_build(ruler_gen *g, size_t question, size_t units, ckv_rng *rng,
                            ruler_draft *d, ckv_error *err)
{
    (void)question;
    cwe_state *s = g->state;
    bool small = g->target < 4096;
    const char *common[64];
    const char *names[3] = {"num_cw", "context", "query"};
    char num_cw[16];
    snprintf(num_cw, sizeof num_cw, "%d", s->num_cw);
    rbuf ctx = {0};
    /* one few-shot example, rendered with the template and its answer */
    ckv_status st = example(g, s, small ? 20 : 40, small ? 3 : 10, small ? 1 : 3, rng, &ctx,
                            common, err);
    if (!st) {
        const char *vals[3] = {num_cw, ctx.p, ""};
        st = ruler_format(&d->text, g->tmpl, names, vals, 3, NULL, NULL, err);
        rbuf_put(&d->text, " ", 1);
        for (int i = 0; i < s->num_cw; i++)
            rbuf_printf(&d->text, i ? " %d. %s" : "%d. %s", i + 1, common[i]);
        rbuf_put(&d->text, "\n", 1);
    }
    rbuf_reset(&ctx);
    if (!st)
        st = example(g, s, units, small ? 6 : s->freq_cw, small ? 1 : s->freq_ucw, rng, &ctx,
                     common, err);
    for (int i = 0; !st && i < s->num_cw; i++)
        st = ruler_draft_output(d, common[i], err);
    if (!st) {
        const char *vals[3] = {num_cw, ctx.p, ""};
        st = ruler_format(&d->text, g->tmpl, names, vals, 3, &d->ctx_start, &d->ctx_end, err);
    }
    rbuf_free(&ctx);
    return st;
}

static ckv_status cwe_fit(ruler_gen *g, size_t *units, ckv_error *err)
{
    cwe_state *s = g->state;
    ckv_status st = ruler_fit_search(g, units, err);
    /* the search stops at the word pool; reaching it means RULER would
     * have needed its english_words.json list, which we do not have */
    if (!st && *units >= s->n_pool) {
        ruler_draft d = {0};
        ckv_rng rng;
        ruler_rng(g, RULER_STREAM_SEARCH, &rng);
        size_t len = 0;
        st = cwe_build(g, 0, s->n_pool, &rng, &d, err);
        if (!st)
            st = ruler_measure(g, &d, &len, err);
        ruler_draft_free(&d);
        if (!st && len < g->target) {
            g->skipped = true;
            snprintf(g->skip_reason, sizeof g->skip_reason,
                     "length %u needs more than the %zu wonderwords words; RULER then draws "
                     "from scripts/data/synthetic/json/english_words.json, which the data dir "
                     "does not have", g->target, s->n_pool);
        }
    }
    return st;
}

ckv_status ruler_cwe_init(ruler_gen *g, const json_t *args, ckv_error *err)
{
    cwe_state *s = calloc(1, sizeof *s);
    if (!s)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cwe: out of memory");
    g->state = s;
    g->free_state = cwe_free;
    g->build = cwe_build;
    g->fit = cwe_fit;
    const char *keys[3] = {"freq_cw", "freq_ucw", "num_cw"};
    int *dst[3] = {&s->freq_cw, &s->freq_ucw, &s->num_cw};
    for (int i = 0; i < 3; i++) {
        const json_t *v = json_object_get(args, keys[i]);
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 64)
            return ckv_errorf(err, CKV_ERR_FORMAT, "templates.json: tasks.%s.args.%s: missing or "
                              "outside [1, 64]", g->task, keys[i]);
        *dst[i] = (int)json_integer_value(v);
    }
    if (s->num_cw > 20) /* the few-shot example has 20 words below 4096 */
        return ckv_errorf(err, CKV_ERR_FORMAT, "templates.json: tasks.%s.args.num_cw: %d exceeds "
                          "the example's 20 words", g->task, s->num_cw);
    ckv_status st = ruler_words_load(g, &s->words, err);
    if (st || g->skipped)
        return st;
    /* words = sorted(set(nouns + adjs + verbs)); Random(seed).shuffle(words) */
    char **const lists[3] = {s->words.nouns, s->words.adjs, s->words.verbs};
    const size_t counts[3] = {s->words.n_nouns, s->words.n_adjs, s->words.n_verbs};
    if ((st = ruler_sorted_union(lists, counts, 3, &s->pool, &s->n_pool, err)))
        return st;
    ckv_rng fixed;
    ckv_rng_seed(&fixed, g->seed);
    ckv_rng_shuffle(&fixed, s->pool, s->n_pool, sizeof *s->pool);
    if (!(s->scratch = malloc(s->n_pool * sizeof *s->scratch)))
        return ckv_errorf(err, CKV_ERR_NOMEM, "cwe: out of memory");
    g->incremental = 10;
    g->probe_units = 4096;
    g->upper_mult = 2;
    g->max_units = s->n_pool;
    return CKV_OK;
}
