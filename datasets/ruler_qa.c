/* Question answering (RULER qa.py): SQuAD v2 dev (answerable questions) or
 * HotpotQA dev distractor; the gold paragraphs plus distractors, shuffled,
 * as numbered documents. Sample i asks question i. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ruler_gen.h"
#include "util.h"

typedef struct {
    const char *query;
    const char **outputs;
    size_t n_outputs;
    size_t *gold, n_gold;
    size_t *more, n_more; /* other paragraphs of the same article (SQuAD) */
} qa_item;

typedef struct {
    json_t *root;
    char **docs; /* sorted, unique */
    size_t n_docs;
    char **owned; /* HotpotQA documents built from title + sentences */
    size_t n_owned;
    qa_item *items;
    size_t n_items;
    size_t *scratch, *pick;
    unsigned char *mark;
} qa_state;

static void qa_free(void *p)
{
    qa_state *s = p;
    if (!s)
        return;
    for (size_t i = 0; i < s->n_items; i++) {
        free(s->items[i].outputs);
        free(s->items[i].gold);
        free(s->items[i].more);
    }
    for (size_t i = 0; i < s->n_owned; i++)
        free(s->owned[i]);
    free(s->owned);
    free(s->items);
    free(s->docs);
    free(s->scratch);
    free(s->pick);
    free(s->mark);
    json_decref(s->root);
    free(s);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static size_t doc_index(const qa_state *s, const char *doc)
{
    char *const *hit = bsearch(&doc, s->docs, s->n_docs, sizeof *s->docs, cmp_str);
    return (size_t)(hit - s->docs);
}

static ckv_status finish_docs(qa_state *s, char **all, size_t n, ckv_error *err)
{
    qsort(all, n, sizeof *all, cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (!u || strcmp(all[u - 1], all[i]))
            all[u++] = all[i];
    s->docs = all;
    s->n_docs = u;
    s->scratch = malloc((u + 1) * sizeof *s->scratch);
    s->pick = malloc((u + 1) * sizeof *s->pick);
    s->mark = malloc(u + 1);
    if (!s->scratch || !s->pick || !s->mark)
        return ckv_errorf(err, CKV_ERR_NOMEM, "qa: out of memory");
    return CKV_OK;
}

static ckv_status add_item(qa_state *s, size_t *cap, ckv_error *err)
{
    if (s->n_items == *cap) {
        size_t nc = *cap ? 2 * *cap : 256;
        qa_item *ni = realloc(s->items, nc * sizeof *ni);
        if (!ni)
            return ckv_errorf(err, CKV_ERR_NOMEM, "qa: out of memory");
        s->items = ni;
        *cap = nc;
    }
    memset(&s->items[s->n_items++], 0, sizeof *s->items);
    return CKV_OK;
}

#define BAD(...) ckv_errorf(err, CKV_ERR_FORMAT, __VA_ARGS__)

static ckv_status load_squad(qa_state *s, const char *path, ckv_error *err)
{
    const json_t *data = json_object_get(s->root, "data");
    if (!json_is_array(data))
        return BAD("%s: field \"data\": missing or not an array", path);
    size_t n = 0, i, j, k;
    const json_t *art, *par, *q;
    json_array_foreach(data, i, art) {
        const json_t *ps = json_object_get(art, "paragraphs");
        if (!json_is_array(ps))
            return BAD("%s: data[%zu].paragraphs: missing or not an array", path, i);
        n += json_array_size(ps);
    }
    char **all = malloc((n ? n : 1) * sizeof *all);
    if (!all)
        return ckv_errorf(err, CKV_ERR_NOMEM, "qa: out of memory");
    n = 0;
    json_array_foreach(data, i, art) {
        json_array_foreach(json_object_get(art, "paragraphs"), j, par) {
            const char *c = json_string_value(json_object_get(par, "context"));
            if (!c) {
                free(all);
                return BAD("%s: data[%zu].paragraphs[%zu].context: missing", path, i, j);
            }
            all[n++] = (char *)c;
        }
    }
    ckv_status st = finish_docs(s, all, n, err);
    if (st)
        return st;
    size_t cap = 0;
    json_array_foreach(data, i, art) {
        const json_t *ps = json_object_get(art, "paragraphs");
        size_t np = json_array_size(ps);
        json_array_foreach(ps, j, par) {
            size_t gold = doc_index(s, json_string_value(json_object_get(par, "context")));
            const json_t *qas = json_object_get(par, "qas");
            if (!st && !json_is_array(qas))
                st = BAD("%s: data[%zu].paragraphs[%zu].qas: missing or not an array", path, i, j);
            json_array_foreach(qas, k, q) {
                if (st)
                    break;
                const json_t *imp = json_object_get(q, "is_impossible");
                const char *qt = json_string_value(json_object_get(q, "question"));
                const json_t *ans = json_object_get(q, "answers");
                if (!json_is_boolean(imp) || !qt || !json_is_array(ans)) {
                    st = BAD("%s: data[%zu].paragraphs[%zu].qas[%zu]: needs is_impossible, "
                             "question and answers", path, i, j, k);
                    break;
                }
                if (json_is_true(imp))
                    continue;
                if ((st = add_item(s, &cap, err)))
                    break;
                qa_item *it = &s->items[s->n_items - 1];
                it->query = qt;
                it->outputs = malloc((json_array_size(ans) + 1) * sizeof *it->outputs);
                it->gold = malloc(sizeof *it->gold);
                it->more = malloc((np ? np : 1) * sizeof *it->more);
                if (!it->outputs || !it->gold || !it->more) {
                    st = ckv_errorf(err, CKV_ERR_NOMEM, "qa: out of memory");
                    break;
                }
                size_t a;
                const json_t *an;
                json_array_foreach(ans, a, an) {
                    const char *t = json_string_value(json_object_get(an, "text"));
                    if (!t) {
                        st = BAD("%s: data[%zu].paragraphs[%zu].qas[%zu].answers[%zu].text: "
                                 "missing", path, i, j, k, a);
                        break;
                    }
                    it->outputs[it->n_outputs++] = t;
                }
                it->gold[it->n_gold++] = gold;
                size_t m;
                const json_t *op;
                json_array_foreach(ps, m, op) {
                    size_t o = doc_index(s, json_string_value(json_object_get(op, "context")));
                    if (o != gold)
                        it->more[it->n_more++] = o;
                }
            }
        }
    }
    return st;
}

static ckv_status load_hotpot(qa_state *s, const char *path, ckv_error *err)
{
    if (!json_is_array(s->root))
        return BAD("%s: top level is not an array", path);
    size_t n = 0, i, j, k;
    const json_t *d, *c, *sent;
    json_array_foreach(s->root, i, d) {
        const json_t *ctx = json_object_get(d, "context");
        if (!json_is_array(ctx) || !json_string_value(json_object_get(d, "question")) ||
            !json_string_value(json_object_get(d, "answer")))
            return BAD("%s: [%zu]: needs question, answer and context", path, i);
        n += json_array_size(ctx);
    }
    s->owned = calloc(n ? n : 1, sizeof *s->owned);
    char **all = malloc((n ? n : 1) * sizeof *all);
    if (!s->owned || !all) {
        free(all);
        return ckv_errorf(err, CKV_ERR_NOMEM, "qa: out of memory");
    }
    /* a document is "{title}\n{sentences joined with nothing}" */
    json_array_foreach(s->root, i, d) {
        json_array_foreach(json_object_get(d, "context"), j, c) {
            const char *title = json_string_value(json_array_get(c, 0));
            const json_t *sents = json_array_get(c, 1);
            if (!title || !json_is_array(sents)) {
                free(all);
                return BAD("%s: [%zu].context[%zu]: expected [title, [sentences]]", path, i, j);
            }
            rbuf b = {0};
            rbuf_puts(&b, title);
            rbuf_put(&b, "\n", 1);
            json_array_foreach(sents, k, sent) {
                if (!json_is_string(sent)) {
                    rbuf_free(&b);
                    free(all);
                    return BAD("%s: [%zu].context[%zu][1][%zu]: not a string", path, i, j, k);
                }
                rbuf_puts(&b, json_string_value(sent));
            }
            if (b.oom) {
                rbuf_free(&b);
                free(all);
                return ckv_errorf(err, CKV_ERR_NOMEM, "qa: out of memory");
            }
            all[s->n_owned] = b.p;
            s->owned[s->n_owned++] = b.p;
        }
    }
    ckv_status st = finish_docs(s, all, s->n_owned, err);
    if (st)
        return st;
    size_t cap = 0, pos = 0;
    json_array_foreach(s->root, i, d) {
        if (st || (st = add_item(s, &cap, err)))
            break;
        qa_item *it = &s->items[s->n_items - 1];
        const json_t *ctx = json_object_get(d, "context");
        it->query = json_string_value(json_object_get(d, "question"));
        it->outputs = malloc(sizeof *it->outputs);
        it->gold = malloc((json_array_size(ctx) + 1) * sizeof *it->gold);
        if (!it->outputs || !it->gold) {
            st = ckv_errorf(err, CKV_ERR_NOMEM, "qa: out of memory");
            break;
        }
        it->outputs[it->n_outputs++] = json_string_value(json_object_get(d, "answer"));
        for (j = 0; j < json_array_size(ctx); j++)
            it->gold[it->n_gold++] = doc_index(s, s->owned[pos++]);
    }
    return st;
}

static ckv_status qa_build(ruler_gen *g, size_t question, size_t units, ckv_rng *rng,
                           ruler_draft *d, ckv_error *err)
{
    qa_state *s = g->state;
    if (question >= s->n_items)
        return ckv_errorf(err, CKV_ERR_ARG, "%s: sample %zu needs question %zu, but the data "
                          "has %zu usable questions", g->task, question, question, s->n_items);
    const qa_item *it = &s->items[question];
    size_t *all = malloc((units ? units : 1) * sizeof *all), n = 0;
    if (!all)
        return ckv_errorf(err, CKV_ERR_NOMEM, "qa: out of memory");
    if (units < s->n_docs) {
        if (units < it->n_gold) {
            free(all);
            return ckv_errorf(err, CKV_ERR_ARG, "%s: %zu documents cannot hold %zu gold ones",
                              g->task, units, it->n_gold);
        }
        for (size_t i = 0; i < it->n_gold; i++)
            all[n++] = it->gold[i];
        size_t need = units - it->n_gold;
        if (need > it->n_more) {
            /* all same-article paragraphs, then random others */
            memset(s->mark, 0, s->n_docs);
            for (size_t i = 0; i < it->n_gold; i++)
                s->mark[it->gold[i]] = 1;
            for (size_t i = 0; i < it->n_more; i++) {
                s->mark[it->more[i]] = 1;
                all[n++] = it->more[i];
            }
            size_t na = 0;
            for (size_t i = 0; i < s->n_docs; i++)
                if (!s->mark[i])
                    s->pick[na++] = i;
            size_t extra = units - n < na ? units - n : na;
            size_t *idx = malloc((na ? na : 1) * sizeof *idx);
            if (!idx) {
                free(all);
                return ckv_errorf(err, CKV_ERR_NOMEM, "qa: out of memory");
            }
            ckv_rng_sample(rng, na, extra, s->scratch, idx);
            for (size_t i = 0; i < extra; i++)
                all[n++] = s->pick[idx[i]];
            free(idx);
        } else {
            ckv_rng_sample(rng, it->n_more, need, s->scratch, s->pick);
            for (size_t i = 0; i < need; i++)
                all[n++] = it->more[s->pick[i]];
        }
    } else {
        for (size_t i = 0; i < units; i++)
            all[n++] = i % s->n_docs; /* (DOCS * repeats)[:num_docs] */
    }
    ckv_rng fixed;
    ckv_rng_seed(&fixed, g->seed);
    ckv_rng_shuffle(&fixed, all, n, sizeof *all);
    rbuf ctx = {0};
    for (size_t i = 0; i < n; i++)
        rbuf_printf(&ctx, i ? "\n\nDocument %zu:\n%s" : "Document %zu:\n%s", i + 1, s->docs[all[i]]);
    free(all);
    ckv_status st = ctx.oom ? ckv_errorf(err, CKV_ERR_NOMEM, "qa: out of memory") : CKV_OK;
    for (size_t i = 0; i < it->n_outputs && !st; i++)
        st = ruler_draft_output(d, it->outputs[i], err);
    if (!st) {
        const char *names[2] = {"context", "query"};
        const char *vals[2] = {ctx.p ? ctx.p : "", it->query};
        st = ruler_format(&d->text, g->tmpl, names, vals, 2, &d->ctx_start, &d->ctx_end, err);
    }
    rbuf_free(&ctx);
    return st;
}

ckv_status ruler_qa_init(ruler_gen *g, const json_t *args, ckv_error *err)
{
    qa_state *s = calloc(1, sizeof *s);
    if (!s)
        return ckv_errorf(err, CKV_ERR_NOMEM, "qa: out of memory");
    g->state = s;
    g->free_state = qa_free;
    g->build = qa_build;
    const char *ds = json_string_value(json_object_get(args, "dataset"));
    bool squad = ds && !strcmp(ds, "squad");
    if (!squad && !(ds && !strcmp(ds, "hotpotqa")))
        return ckv_errorf(err, CKV_ERR_FORMAT, "templates.json: tasks.%s.args.dataset: '%s' is "
                          "not squad or hotpotqa", g->task, ds ? ds : "(missing)");
    char path[4096];
    snprintf(path, sizeof path, squad ? "%s/squad/dev-v2.0.json"
                                      : "%s/hotpotqa/hotpot_dev_distractor_v1.json",
             g->data_dir);
    if (!ruler_file_exists(path))
        return ruler_skip_missing(g, path, squad ? "SQuAD v2.0 dev" : "HotpotQA dev distractor");
    json_error_t je;
    if (!(s->root = json_load_file(path, 0, &je)))
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: line %d: %s", path, je.line, je.text);
    ckv_status st = squad ? load_squad(s, path, err) : load_hotpot(s, path, err);
    if (st)
        return st;
    if (!s->n_items)
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: no usable questions", path);
    g->incremental = 10;
    g->probe_units = 10;
    g->upper_mult = 3;
    return CKV_OK;
}
