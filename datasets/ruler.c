/* RULER driver: task table and templates from templates.json, per-sample
 * generation with RULER's shrink-until-it-fits loop, answer-prefix split. */
#include "ruler.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ruler_gen.h"
#include "util.h"

struct ckv_ruler {
    char *dir;
    json_t *templates;
    char templates_path[4096];
};

static const char *const task_names[] = {
    "niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
    "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe", "qa_1", "qa_2",
};

const char ruler_noise[] =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

size_t ckv_ruler_n_tasks(void)
{
    return sizeof task_names / sizeof task_names[0];
}

const char *ckv_ruler_task_name(size_t i)
{
    return i < ckv_ruler_n_tasks() ? task_names[i] : NULL;
}

bool ruler_file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 || errno != ENOENT;
}

ckv_status ruler_skip_missing(ruler_gen *g, const char *path, const char *what)
{
    g->skipped = true;
    snprintf(g->skip_reason, sizeof g->skip_reason, "%s not found: %s", what, path);
    return CKV_OK;
}

ckv_status ckv_ruler_open(ckv_ruler **out, const char *data_dir, ckv_error *err)
{
    *out = NULL;
    ckv_ruler *r = calloc(1, sizeof *r);
    if (!r || !(r->dir = strdup(data_dir))) {
        free(r);
        return ckv_errorf(err, CKV_ERR_NOMEM, "ruler: out of memory");
    }
    snprintf(r->templates_path, sizeof r->templates_path, "%s/ruler/templates.json", data_dir);
    json_error_t je;
    r->templates = json_load_file(r->templates_path, 0, &je);
    if (!r->templates) {
        ckv_status st =
            ruler_file_exists(r->templates_path)
                ? ckv_errorf(err, CKV_ERR_FORMAT, "%s: line %d: %s", r->templates_path, je.line,
                             je.text)
                : ckv_errorf(err, CKV_ERR_IO, "%s: not found (is %s the data dir?)",
                             r->templates_path, data_dir);
        ckv_ruler_close(r);
        return st;
    }
    *out = r;
    return CKV_OK;
}

void ckv_ruler_close(ckv_ruler *r)
{
    if (!r)
        return;
    json_decref(r->templates);
    free(r->dir);
    free(r);
}

void ruler_draft_clear(ruler_draft *d)
{
    for (size_t i = 0; i < d->n_outputs; i++)
        free(d->outputs[i]);
    free(d->outputs);
    d->outputs = NULL;
    d->n_outputs = 0;
    d->n_needles = 0;
    d->ctx_start = d->ctx_end = 0;
    rbuf_reset(&d->text);
}

void ruler_draft_free(ruler_draft *d)
{
    ruler_draft_clear(d);
    rbuf_free(&d->text);
}

ckv_status ruler_draft_output(ruler_draft *d, const char *s, ckv_error *err)
{
    char **o = realloc(d->outputs, (d->n_outputs + 1) * sizeof *o);
    if (!o)
        return ckv_errorf(err, CKV_ERR_NOMEM, "ruler: out of memory");
    d->outputs = o;
    if (!(o[d->n_outputs] = strdup(s)))
        return ckv_errorf(err, CKV_ERR_NOMEM, "ruler: out of memory");
    d->n_outputs++;
    return CKV_OK;
}

ckv_status ruler_measure(ruler_gen *g, const ruler_draft *d, size_t *length, ckv_error *err)
{
    size_t n = 0;
    ckv_status st = g->tc->count(g->tc->ctx, d->text.p ? d->text.p : "", d->text.len, &n, err);
    if (st)
        return st;
    *length = n + g->gen_tokens;
    return CKV_OK;
}

void ruler_rng(const ruler_gen *g, int64_t stream, ckv_rng *rng)
{
    uint64_t v[4] = {g->seed, ckv_fnv1a64(g->task), g->target, (uint64_t)stream};
    ckv_rng_seed_n(rng, v, 4);
}

/* JSON string at obj[key], or NULL with an error naming the file. */
static const char *jstr(const ckv_ruler *r, const json_t *obj, const char *where,
                        const char *key, ckv_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_string(v)) {
        ckv_errorf(err, CKV_ERR_FORMAT, "%s: %s.%s: missing or not a string", r->templates_path,
                   where, key);
        return NULL;
    }
    return json_string_value(v);
}

static const char *metric_name(const char *s)
{
    /* static strings so the set can outlive the templates */
    if (!strcmp(s, "string_match_all"))
        return "string_match_all";
    if (!strcmp(s, "string_match_part"))
        return "string_match_part";
    return NULL;
}

static ckv_status make_sample(ruler_gen *g, const ruler_draft *d, size_t length, size_t units,
                              uint32_t index, ckv_ruler_sample *s, ckv_error *err)
{
    /* RULER locates the answer prefix by its first 10 characters, last match */
    size_t pl = strlen(g->answer_prefix), key = pl < 10 ? pl : 10;
    size_t cut = d->text.len;
    for (size_t i = d->text.len; i-- > 0;)
        if (d->text.len - i >= key && !memcmp(d->text.p + i, g->answer_prefix, key)) {
            cut = i;
            break;
        }
    if (cut == d->text.len || cut < d->ctx_end)
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: answer prefix \"%.10s\" not found after the context",
                          g->task, g->answer_prefix);
    memset(s, 0, sizeof *s);
    s->index = index;
    s->input = ckv_strndup(d->text.p, cut);
    s->answer_prefix = ckv_strndup(d->text.p + cut, d->text.len - cut);
    s->outputs = calloc(d->n_outputs ? d->n_outputs : 1, sizeof *s->outputs);
    if (!s->input || !s->answer_prefix || !s->outputs)
        return ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", g->task);
    for (size_t i = 0; i < d->n_outputs; i++) {
        if (!(s->outputs[i] = strdup(d->outputs[i])))
            return ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", g->task);
        s->n_outputs++;
    }
    s->length = (uint32_t)length;
    s->context_start = d->ctx_start;
    s->context_end = d->ctx_end;
    s->haystack_units = (uint32_t)units;
    s->n_needles = (uint32_t)d->n_needles;
    for (size_t i = 0; i < d->n_needles; i++) {
        s->needle_offset[i] = d->needle_off[i];
        s->needle_depth[i] = d->needle_depth[i];
    }
    return CKV_OK;
}

ckv_status ruler_draw_fitting(ruler_gen *g, size_t question, size_t *units, ckv_rng *rng,
                              ruler_draft *d, size_t *length, ckv_error *err)
{
    for (;;) {
        ruler_draft_clear(d);
        ckv_status st = g->build(g, question, *units, rng, d, err);
        if (!st)
            st = ruler_measure(g, d, length, err);
        if (st)
            return st;
        if (*length <= g->target)
            return CKV_OK;
        if (*units <= g->incremental)
            return ckv_errorf(err, CKV_ERR_ARG,
                              "%s: cannot fit %u tokens: the smallest haystack (%zu units) "
                              "already gives %zu tokens with %u to generate",
                              g->task, g->target, *units, *length, g->gen_tokens);
        *units -= g->incremental;
    }
}

static ckv_status gen_sample(ruler_gen *g, size_t units, uint32_t index, ruler_draft *d,
                             ckv_ruler_sample *s, ckv_error *err)
{
    ckv_rng rng;
    ruler_rng(g, index, &rng);
    size_t length;
    ckv_status st = ruler_draw_fitting(g, index, &units, &rng, d, &length, err);
    return st ? st : make_sample(g, d, length, units, index, s, err);
}

static ckv_status init_family(ruler_gen *g, const char *family, const json_t *args,
                              ckv_error *err)
{
    if (!strcmp(family, "niah"))
        return ruler_niah_init(g, args, err);
    if (!strcmp(family, "variable_tracking"))
        return ruler_vt_init(g, args, err);
    if (!strcmp(family, "common_words_extraction"))
        return ruler_cwe_init(g, args, err);
    if (!strcmp(family, "freq_words_extraction"))
        return ruler_fwe_init(g, args, err);
    if (!strcmp(family, "qa"))
        return ruler_qa_init(g, args, err);
    return ckv_errorf(err, CKV_ERR_UNSUPPORTED, "%s: task %s: unknown generator '%s'",
                      g->data_dir, g->task, family);
}

void ckv_ruler_set_free(ckv_ruler_set *s)
{
    for (size_t i = 0; i < s->n_samples; i++) {
        ckv_ruler_sample *x = &s->samples[i];
        free(x->input);
        free(x->answer_prefix);
        for (uint32_t j = 0; j < x->n_outputs; j++)
            free(x->outputs[j]);
        free(x->outputs);
    }
    free(s->samples);
    memset(s, 0, sizeof *s);
}

ckv_status ckv_ruler_generate(ckv_ruler *r, const char *task, uint32_t target_length,
                              uint32_t n_samples, uint64_t seed, const ckv_token_counter *tc,
                              ckv_ruler_set *out, ckv_error *err)
{
    memset(out, 0, sizeof *out);
    size_t ti = 0;
    while (ti < ckv_ruler_n_tasks() && strcmp(task_names[ti], task))
        ti++;
    if (ti == ckv_ruler_n_tasks())
        return ckv_errorf(err, CKV_ERR_ARG, "ruler: unknown task '%s'", task);
    out->task = task_names[ti];

    const json_t *tdef = json_object_get(json_object_get(r->templates, "tasks"), task);
    if (!json_is_object(tdef))
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: tasks.%s: missing", r->templates_path, task);
    const char *family = jstr(r, tdef, task, "task", err);
    if (!family)
        return err->status;
    const json_t *fdef = json_object_get(json_object_get(r->templates, "task_types"), family);
    const json_t *gen = json_object_get(fdef, "tokens_to_generate");
    const char *tmpl = jstr(r, fdef, family, "template", err);
    const char *prefix = tmpl ? jstr(r, fdef, family, "answer_prefix", err) : NULL;
    const json_t *mj = json_object_get(json_object_get(r->templates, "metric_by_task_type"), family);
    if (!prefix)
        return err->status;
    if (!json_is_integer(gen) || json_integer_value(gen) <= 0 || json_integer_value(gen) > 65536)
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: task_types.%s.tokens_to_generate: bad value",
                          r->templates_path, family);
    out->metric = json_is_string(mj) ? metric_name(json_string_value(mj)) : NULL;
    if (!out->metric)
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: metric_by_task_type.%s: missing or unknown",
                          r->templates_path, family);
    static const char *const families[] = {"niah", "variable_tracking", "common_words_extraction",
                                           "freq_words_extraction", "qa"};
    for (size_t i = 0; i < 5; i++)
        if (!strcmp(families[i], family))
            out->family = families[i];
    out->target_length = target_length;
    out->max_new_tokens = (uint32_t)json_integer_value(gen);
    if (target_length <= out->max_new_tokens)
        return ckv_errorf(err, CKV_ERR_ARG, "%s: length %u leaves no room for %u new tokens", task,
                          target_length, out->max_new_tokens);

    /* model template "base": the task template followed by the answer prefix */
    size_t tl = strlen(tmpl), pl = strlen(prefix);
    char *full = malloc(tl + pl + 1);
    if (!full)
        return ckv_errorf(err, CKV_ERR_NOMEM, "ruler: out of memory");
    memcpy(full, tmpl, tl);
    memcpy(full + tl, prefix, pl + 1);
    /* a template with a stray brace or an unknown field fails here, named */
    {
        static const char *const names[5] = {"type_needle_v", "context", "query", "num_v",
                                             "num_cw"};
        static const char *const empty[5] = {"", "", "", "", ""};
        rbuf dry = {0};
        ckv_status st = ruler_format(&dry, full, names, empty, 5, NULL, NULL, err);
        rbuf_free(&dry);
        if (st) {
            free(full);
            return ckv_error_prefix(err, "%s: task_types.%s", r->templates_path, family);
        }
    }
    ruler_gen g = {
        .data_dir = r->dir, .task = out->task, .target = target_length,
        .gen_tokens = out->max_new_tokens, .seed = seed, .tmpl = full,
        .answer_prefix = prefix, .tc = tc,
    };
    ruler_draft d = {0};
    ckv_status st = init_family(&g, family, json_object_get(tdef, "args"), err);
    if (!st && g.skipped) {
        out->skipped = true;
        snprintf(out->skip_reason, sizeof out->skip_reason, "%s", g.skip_reason);
    }
    size_t units = 0;
    if (!st && !out->skipped)
        st = g.fit ? g.fit(&g, &units, err) : ruler_fit_search(&g, &units, err);
    if (!st && g.skipped && !out->skipped) {
        out->skipped = true;
        snprintf(out->skip_reason, sizeof out->skip_reason, "%s", g.skip_reason);
    }
    if (!st && !out->skipped && n_samples) {
        out->samples = calloc(n_samples, sizeof *out->samples);
        if (!out->samples)
            st = ckv_errorf(err, CKV_ERR_NOMEM, "ruler: out of memory");
    }
    for (uint32_t i = 0; !st && !out->skipped && i < n_samples; i++) {
        st = gen_sample(&g, units, i, &d, &out->samples[i], err);
        out->n_samples = i + 1; /* the failed one is freed with the set */
    }
    ruler_draft_free(&d);
    if (g.free_state)
        g.free_state(g.state);
    free(full);
    if (st) {
        ckv_ruler_set_free(out);
        return st;
    }
    return CKV_OK;
}
