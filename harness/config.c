/* YAML sweep config: libyaml's document API keeps every node's line and
 * column, so each error, syntactic or semantic, points at its node. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ruler.h"
#include "util.h"

typedef struct {
    const char *path;
    yaml_document_t doc;
    ckv_error *err;
} parse_ctx;

static ckv_status node_error(parse_ctx *x, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ckv_status node_error(parse_ctx *x, const yaml_node_t *n, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ckv_errorf(x->err, CKV_ERR_ARG, "%s:%zu:%zu: %s", x->path, n->start_mark.line + 1,
                      n->start_mark.column + 1, msg);
}

static yaml_node_t *node(parse_ctx *x, int id)
{
    return yaml_document_get_node(&x->doc, id);
}

static const char *scalar(const yaml_node_t *n)
{
    return n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static ckv_status want_scalar(parse_ctx *x, const yaml_node_t *n, const char *what,
                              const char **out)
{
    if (!(*out = scalar(n)))
        return node_error(x, n, "%s: expected a single value", what);
    return CKV_OK;
}

static ckv_status want_int(parse_ctx *x, const yaml_node_t *n, const char *what, long long lo,
                           long long hi, long long *out)
{
    const char *s;
    if (want_scalar(x, n, what, &s))
        return x->err->status;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return node_error(x, n, "%s: '%s' is not an integer in [%lld, %lld]", what, s, lo, hi);
    *out = v;
    return CKV_OK;
}

static ckv_status want_bool(parse_ctx *x, const yaml_node_t *n, const char *what, bool *out)
{
    const char *s;
    if (want_scalar(x, n, what, &s))
        return x->err->status;
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no",
                                                                               "off", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcmp(s, yes[i]))
            return *out = true, CKV_OK;
        if (!strcmp(s, no[i]))
            return *out = false, CKV_OK;
    }
    return node_error(x, n, "%s: '%s' is not true or false", what, s);
}

static ckv_status dup_str(parse_ctx *x, const char *s, char **out)
{
    if (!(*out = strdup(s)))
        return ckv_errorf(x->err, CKV_ERR_NOMEM, "%s: out of memory", x->path);
    return CKV_OK;
}

/* libyaml accepts a key twice in one mapping; the readers keep one value
 * per key, so a repeat is an error rather than a lost (or, for list keys,
 * overrun) earlier value. Called for each key as the reader reaches it:
 * readers stop at the first unknown key, so this stays quadratic only in
 * the handful of known ones. */
static ckv_status repeated_key(parse_ctx *x, const yaml_node_t *m, const yaml_node_pair_t *p,
                               const char *what)
{
    const yaml_node_t *k = node(x, p->key);
    for (const yaml_node_pair_t *q = m->data.mapping.pairs.start; q < p; q++) {
        const yaml_node_t *kq = node(x, q->key);
        if (scalar(kq) && !strcmp(scalar(kq), scalar(k)))
            return node_error(x, k, "%s: key '%s' given twice (first at line %zu)", what,
                              scalar(k), kq->start_mark.line + 1);
    }
    return CKV_OK;
}

/* A scalar or a sequence of scalars, as node pointers. */
static ckv_status values(parse_ctx *x, yaml_node_t *n, const char *what, yaml_node_t ***out,
                         size_t *count)
{
    size_t k = n->type == YAML_SEQUENCE_NODE
                   ? (size_t)(n->data.sequence.items.top - n->data.sequence.items.start)
                   : 1;
    if (n->type == YAML_MAPPING_NODE)
        return node_error(x, n, "%s: expected a value or a list of values", what);
    if (!k)
        return node_error(x, n, "%s: empty list", what);
    yaml_node_t **v = calloc(k, sizeof *v);
    if (!v)
        return ckv_errorf(x->err, CKV_ERR_NOMEM, "%s: out of memory", x->path);
    for (size_t i = 0; i < k; i++) {
        v[i] = n->type == YAML_SEQUENCE_NODE ? node(x, n->data.sequence.items.start[i]) : n;
        if (!scalar(v[i])) {
            ckv_status st = node_error(x, v[i], "%s: expected a value", what);
            free(v);
            return st;
        }
    }
    *out = v;
    *count = k;
    return CKV_OK;
}

static ckv_status parse_ruler(parse_ctx *x, yaml_node_t *m, ckv_task_source *s)
{
    if (m->type != YAML_MAPPING_NODE)
        return node_error(x, m, "ruler: expected a mapping (tasks, lengths, samples, seed)");
    s->samples = 500;
    s->seed = 42;
    bool have_lengths = false;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(x, p->key), *v = node(x, p->value);
        const char *key = scalar(k);
        yaml_node_t **vals = NULL;
        size_t n = 0;
        long long iv;
        if (!key)
            return node_error(x, k, "ruler: expected a key");
        if (repeated_key(x, m, p, "ruler"))
            return x->err->status;
        if (!strcmp(key, "tasks")) {
            if (values(x, v, "ruler tasks", &vals, &n))
                return x->err->status;
            bool all = n == 1 && !strcmp(scalar(vals[0]), "all");
            size_t total = all ? ckv_ruler_n_tasks() : n;
            s->ruler_tasks = calloc(total, sizeof *s->ruler_tasks);
            if (!s->ruler_tasks) {
                free(vals);
                return ckv_errorf(x->err, CKV_ERR_NOMEM, "%s: out of memory", x->path);
            }
            for (size_t i = 0; i < total; i++) {
                const char *t = all ? ckv_ruler_task_name(i) : scalar(vals[i]);
                size_t j = 0;
                while (j < ckv_ruler_n_tasks() && strcmp(ckv_ruler_task_name(j), t))
                    j++;
                if (j == ckv_ruler_n_tasks()) {
                    ckv_status st = node_error(x, vals[i], "unknown RULER task '%s'", t);
                    free(vals);
                    return st;
                }
                if (dup_str(x, t, &s->ruler_tasks[s->n_ruler_tasks])) {
                    free(vals);
                    return x->err->status;
                }
                s->n_ruler_tasks++;
            }
            free(vals);
        } else if (!strcmp(key, "lengths")) {
            if (values(x, v, "ruler lengths", &vals, &n))
                return x->err->status;
            if (!(s->lengths = calloc(n, sizeof *s->lengths))) {
                free(vals);
                return ckv_errorf(x->err, CKV_ERR_NOMEM, "%s: out of memory", x->path);
            }
            for (size_t i = 0; i < n; i++) {
                if (want_int(x, vals[i], "ruler length", 16, 1 << 24, &iv)) {
                    free(vals);
                    return x->err->status;
                }
                s->lengths[s->n_lengths++] = (uint32_t)iv;
            }
            free(vals);
            have_lengths = true;
        } else if (!strcmp(key, "samples")) {
            if (want_int(x, v, "ruler samples", 1, 1000000, &iv))
                return x->err->status;
            s->samples = (uint32_t)iv;
        } else if (!strcmp(key, "seed")) {
            if (want_int(x, v, "ruler seed", 0, INT64_MAX, &iv))
                return x->err->status;
            s->seed = (uint64_t)iv;
        } else {
            return node_error(x, k, "ruler: unknown key '%s' (expected tasks, lengths, samples, "
                              "seed)", key);
        }
    }
    if (!s->n_ruler_tasks)
        return node_error(x, m, "ruler: 'tasks' is required (a list of task names, or all)");
    if (!have_lengths)
        return node_error(x, m, "ruler: 'lengths' is required (target lengths in tokens)");
    return CKV_OK;
}

static ckv_status parse_tasks(parse_ctx *x, yaml_node_t *seq, ckv_sweep_config *c)
{
    if (seq->type != YAML_SEQUENCE_NODE)
        return node_error(x, seq, "tasks: expected a list of '- pack: FILE' or '- ruler: {...}'");
    size_t n = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (!n)
        return node_error(x, seq, "tasks: empty list");
    if (!(c->sources = calloc(n, sizeof *c->sources)))
        return ckv_errorf(x->err, CKV_ERR_NOMEM, "%s: out of memory", x->path);
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *m = node(x, seq->data.sequence.items.start[i]);
        ckv_task_source *s = &c->sources[c->n_sources++];
        if (m->type != YAML_MAPPING_NODE ||
            m->data.mapping.pairs.top - m->data.mapping.pairs.start != 1)
            return node_error(x, m, "tasks: each item is '- pack: FILE' or '- ruler: {...}'");
        yaml_node_t *k = node(x, m->data.mapping.pairs.start->key),
                    *v = node(x, m->data.mapping.pairs.start->value);
        const char *key = scalar(k), *path;
        if (key && !strcmp(key, "pack")) {
            if (want_scalar(x, v, "pack", &path))
                return x->err->status;
            if (access(path, R_OK))
                return node_error(x, v, "pack '%s': %s", path, strerror(errno));
            if (dup_str(x, path, &s->pack))
                return x->err->status;
        } else if (key && !strcmp(key, "ruler")) {
            if (parse_ruler(x, v, s))
                return x->err->status;
        } else {
            return node_error(x, k, "tasks: unknown source '%s' (expected pack or ruler)",
                              key ? key : "?");
        }
    }
    return CKV_OK;
}

/* One policy entry before expansion: its budgets and parameter lists. */
typedef struct {
    yaml_node_t *name;
    yaml_node_t **budgets;
    size_t n_budgets;
    const char *keys[CKV_POLICY_MAX_PARAMS];
    yaml_node_t **vals[CKV_POLICY_MAX_PARAMS];
    size_t n_vals[CKV_POLICY_MAX_PARAMS];
    size_t n_keys;
} policy_entry;

static void entry_free(policy_entry *e)
{
    free(e->budgets);
    for (size_t i = 0; i < e->n_keys; i++)
        free(e->vals[i]);
}

static ckv_status add_run(parse_ctx *x, ckv_sweep_config *c, const ckv_policy *p,
                          const char *budget, const char *params, const yaml_node_t *at)
{
    ckv_run_config *r = &c->runs[c->n_runs];
    r->policy = *p;
    size_t nl = strlen(p->ops->name) + strlen(budget) + strlen(params) + 3;
    if (dup_str(x, budget, &r->budget_spec) || dup_str(x, params, &r->params) ||
        !(r->name = malloc(nl)))
        return ckv_errorf(x->err, CKV_ERR_NOMEM, "%s: out of memory", x->path);
    snprintf(r->name, nl, "%s%s%s%s%s", p->ops->name, *budget ? "@" : "", budget,
             *params ? " " : "", params);
    c->n_runs++;
    for (size_t i = 0; i + 1 < c->n_runs; i++)
        if (!strcmp(c->runs[i].name, r->name))
            return node_error(x, at, "policies: run '%s' appears twice in the grid", r->name);
    if (*budget) {
        ckv_error e2 = {0};
        if (ckv_budget_parse(budget, &r->budget, &e2))
            return node_error(x, at, "%s", e2.msg);
        int64_t entries;
        bool skip;
        if (r->budget.absolute &&
            ckv_budget_check(p, &r->budget, 0, &entries, &skip, NULL, 0, &e2))
            return node_error(x, at, "%s", e2.msg);
    }
    return CKV_OK;
}

/* Appends the cartesian product of the entry's budgets and parameter
 * values (budgets outermost, then the parameters in written order, the
 * last fastest) to c->runs. */
static ckv_status expand(parse_ctx *x, ckv_sweep_config *c, const policy_entry *e,
                         const ckv_policy *base)
{
    size_t idx[CKV_POLICY_MAX_PARAMS] = {0};
    const char *none = "";
    size_t nb = e->n_budgets ? e->n_budgets : 1;
    for (size_t b = 0; b < nb; b++) {
        for (;;) {
            ckv_policy p = *base;
            char params[512] = "";
            size_t used = 0;
            for (size_t k = 0; k < e->n_keys; k++) {
                const char *v = scalar(e->vals[k][idx[k]]);
                ckv_error e2 = {0};
                if (ckv_policy_set_kv(&p, e->keys[k], v, &e2))
                    return node_error(x, e->vals[k][idx[k]], "%s", e2.msg);
                int w = snprintf(params + used, sizeof params - used, "%s%s=%s", k ? " " : "",
                                 e->keys[k], v);
                /* Truncated names could collide and hide runs. */
                if (w < 0 || (size_t)w >= sizeof params - used)
                    return node_error(x, e->vals[k][idx[k]], "policy %s: parameters longer "
                                      "than %zu bytes in all", base->ops->name,
                                      sizeof params - 1);
                used += (size_t)w;
            }
            const yaml_node_t *at = e->n_budgets ? e->budgets[b] : e->name;
            if (add_run(x, c, &p, e->n_budgets ? scalar(e->budgets[b]) : none, params, at))
                return x->err->status;
            size_t k = e->n_keys;
            while (k > 0 && ++idx[k - 1] == e->n_vals[k - 1])
                idx[--k] = 0;
            if (k == 0)
                break;
        }
    }
    return CKV_OK;
}

static bool has_param(const ckv_policy *p, const char *key)
{
    for (int32_t j = 0; j < p->ops->n_params; j++)
        if (!strcmp(p->ops->params[j].key, key))
            return true;
    return false;
}

static ckv_status parse_policy(parse_ctx *x, yaml_node_t *m, yaml_node_t *seeds,
                               ckv_sweep_config *c, size_t *cap)
{
    policy_entry e = {0};
    ckv_policy base;
    ckv_status st = CKV_OK;
    if (m->type == YAML_SCALAR_NODE) {
        e.name = m;
    } else if (m->type == YAML_MAPPING_NODE) {
        for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top;
             p++)
            if (scalar(node(x, p->key)) && !strcmp(scalar(node(x, p->key)), "name"))
                e.name = node(x, p->value);
        if (!e.name)
            return node_error(x, m, "policies: entry without 'name'");
    } else {
        return node_error(x, m, "policies: expected a policy name or a mapping with 'name'");
    }
    if (!scalar(e.name))
        return node_error(x, e.name, "policy name: expected a single value");
    ckv_error e2 = {0};
    if (ckv_policy_init(&base, scalar(e.name), &e2))
        return node_error(x, e.name, "%s", e2.msg);
    bool is_full = !strcmp(base.ops->name, "full"), seed_set = false;
    if (m->type == YAML_MAPPING_NODE) {
        for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top;
             p++) {
            yaml_node_t *k = node(x, p->key), *v = node(x, p->value);
            const char *key = scalar(k);
            if (!key) {
                st = node_error(x, k, "policies: expected a key");
                goto done;
            }
            if ((st = repeated_key(x, m, p, "policies")))
                goto done;
            if (!strcmp(key, "name"))
                continue;
            if (!strcmp(key, "budgets")) {
                if (is_full) {
                    st = node_error(x, k, "policy full keeps every entry and takes no budgets");
                    goto done;
                }
                if ((st = values(x, v, "budgets", &e.budgets, &e.n_budgets)))
                    goto done;
                continue;
            }
            for (size_t j = 0; j < e.n_keys; j++)
                if (!strcmp(e.keys[j], key)) {
                    st = node_error(x, k, "policy %s: parameter '%s' given twice", base.ops->name,
                                    key);
                    goto done;
                }
            if (!has_param(&base, key)) {
                ckv_policy probe = base;
                ckv_policy_set_kv(&probe, key, "", &e2);
                st = node_error(x, k, "%s", e2.msg);
                goto done;
            }
            if ((st = values(x, v, key, &e.vals[e.n_keys], &e.n_vals[e.n_keys])))
                goto done;
            seed_set |= !strcmp(key, "seed");
            e.keys[e.n_keys++] = key;
        }
    }
    if (!is_full && !e.n_budgets) {
        st = node_error(x, e.name, "policy %s: 'budgets' is required (e.g. [25%%, 50%%])",
                        base.ops->name);
        goto done;
    }
    /* Top-level seeds multiply the policies that have a seed parameter. */
    if (seeds && !seed_set && has_param(&base, "seed")) {
        if ((st = values(x, seeds, "seeds", &e.vals[e.n_keys], &e.n_vals[e.n_keys])))
            goto done;
        e.keys[e.n_keys++] = "seed";
    }
    /* Checked before expanding: a few YAML aliases can ask for more runs
     * than size_t holds, which would wrap the allocation below. */
    size_t add = e.n_budgets ? e.n_budgets : 1;
    for (size_t k = 0; k < e.n_keys && add <= CKV_SWEEP_MAX_RUNS; k++)
        add *= e.n_vals[k];
    if (add > CKV_SWEEP_MAX_RUNS - c->n_runs) {
        st = node_error(x, e.name, "policy %s: the grid exceeds %d runs", base.ops->name,
                        CKV_SWEEP_MAX_RUNS);
        goto done;
    }
    if (c->n_runs + add > *cap) {
        size_t ncap = (c->n_runs + add) * 2;
        ckv_run_config *r = realloc(c->runs, ncap * sizeof *r);
        if (!r) {
            st = ckv_errorf(x->err, CKV_ERR_NOMEM, "%s: out of memory", x->path);
            goto done;
        }
        memset(r + c->n_runs, 0, (ncap - c->n_runs) * sizeof *r);
        c->runs = r;
        *cap = ncap;
    }
    st = expand(x, c, &e, &base);
done:
    entry_free(&e);
    return st;
}

static ckv_status parse_root(parse_ctx *x, ckv_sweep_config *c)
{
    yaml_node_t *root = yaml_document_get_root_node(&x->doc);
    if (!root)
        return ckv_errorf(x->err, CKV_ERR_ARG, "%s: empty config", x->path);
    if (root->type != YAML_MAPPING_NODE)
        return node_error(x, root, "the config is a mapping (model, tasks, policies, ...)");
    yaml_node_t *tasks = NULL, *policies = NULL, *seeds = NULL;
    long long iv;
    const char *s;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = node(x, p->key), *v = node(x, p->value);
        const char *key = scalar(k);
        if (!key)
            return node_error(x, k, "expected a key");
        if (repeated_key(x, root, p, "config"))
            return x->err->status;
        if (!strcmp(key, "model") || !strcmp(key, "data_dir") || !strcmp(key, "output")) {
            char **dst = key[0] == 'm' ? &c->model : key[0] == 'd' ? &c->data_dir : &c->output;
            if (want_scalar(x, v, key, &s) || dup_str(x, s, dst))
                return x->err->status;
            if (dst == &c->model && access(s, R_OK))
                return node_error(x, v, "model '%s': %s", s, strerror(errno));
        } else if (!strcmp(key, "tasks")) {
            tasks = v;
        } else if (!strcmp(key, "policies")) {
            policies = v;
        } else if (!strcmp(key, "seeds")) {
            seeds = v;
            yaml_node_t **vals;
            size_t n;
            if (values(x, v, "seeds", &vals, &n))
                return x->err->status;
            for (size_t i = 0; i < n; i++)
                if (want_int(x, vals[i], "seed", 0, INT64_MAX, &iv)) {
                    free(vals);
                    return x->err->status;
                }
            free(vals);
        } else if (!strcmp(key, "mode")) {
            if (want_scalar(x, v, "mode", &s))
                return x->err->status;
            if (!strcmp(s, "query_agnostic"))
                c->query_agnostic = true;
            else if (strcmp(s, "query_aware"))
                return node_error(x, v, "mode '%s': expected query_aware or query_agnostic", s);
        } else if (!strcmp(key, "limit")) {
            if (want_int(x, v, "limit", 0, INT64_MAX, &iv))
                return x->err->status;
            c->limit = iv;
        } else if (!strcmp(key, "threads")) {
            if (want_int(x, v, "threads", 0, 1024, &iv))
                return x->err->status;
            c->threads = (int32_t)iv;
        } else if (!strcmp(key, "kv_dtype")) {
            if (want_scalar(x, v, "kv_dtype", &s))
                return x->err->status;
            if (!ckv_kv_dtype_parse(s, &c->kv_dtype))
                return node_error(x, v, "kv_dtype '%s': expected f32 or bf16", s);
        } else if (!strcmp(key, "fidelity")) {
            if (want_bool(x, v, "fidelity", &c->fidelity))
                return x->err->status;
        } else {
            return node_error(x, k,
                              "unknown key '%s' (expected model, data_dir, tasks, policies, mode, "
                              "seeds, limit, output, fidelity, threads, kv_dtype)",
                              key);
        }
    }
    if (!tasks)
        return node_error(x, root, "'tasks' is required");
    if (!policies)
        return node_error(x, root, "'policies' is required");
    if (parse_tasks(x, tasks, c))
        return x->err->status;
    if (policies->type != YAML_SEQUENCE_NODE ||
        policies->data.sequence.items.top == policies->data.sequence.items.start)
        return node_error(x, policies, "policies: expected a non-empty list");
    size_t cap = 0;
    for (yaml_node_item_t *i = policies->data.sequence.items.start;
         i < policies->data.sequence.items.top; i++)
        if (parse_policy(x, node(x, *i), seeds, c, &cap))
            return x->err->status;
    return CKV_OK;
}

ckv_status ckv_sweep_config_parse(ckv_sweep_config *c, const char *path, const char *text,
                                  size_t len, ckv_error *err)
{
    memset(c, 0, sizeof *c);
    parse_ctx x = {.path = path, .err = err};
    if (!(c->path = strdup(path)) || !(c->text = ckv_strndup(text, len)))
        return ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
    c->hash = XXH64(text, len, 0);
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        return ckv_errorf(err, CKV_ERR_NOMEM, "%s: cannot start the YAML parser", path);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    ckv_status st;
    if (!yaml_parser_load(&parser, &x.doc)) {
        st = ckv_errorf(err, CKV_ERR_ARG, "%s:%zu:%zu: YAML: %s%s%s", path,
                        parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                        parser.problem ? parser.problem : "syntax error",
                        parser.context ? " " : "", parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        return st;
    }
    st = parse_root(&x, c);
    yaml_document_delete(&x.doc);
    yaml_parser_delete(&parser);
    return st;
}

ckv_status ckv_sweep_config_load(ckv_sweep_config *c, const char *path, ckv_error *err)
{
    char *text = NULL;
    size_t len = 0;
    memset(c, 0, sizeof *c);
    ckv_status st = ckv_read_file(path, &text, &len, err);
    if (st)
        return st;
    st = ckv_sweep_config_parse(c, path, text, len, err);
    free(text);
    return st;
}

void ckv_sweep_config_free(ckv_sweep_config *c)
{
    for (size_t i = 0; i < c->n_sources; i++) {
        ckv_task_source *s = &c->sources[i];
        free(s->pack);
        for (size_t j = 0; j < s->n_ruler_tasks; j++)
            free(s->ruler_tasks[j]);
        free(s->ruler_tasks);
        free(s->lengths);
    }
    free(c->sources);
    for (size_t i = 0; i < c->n_runs; i++) {
        free(c->runs[i].budget_spec);
        free(c->runs[i].params);
        free(c->runs[i].name);
    }
    free(c->runs);
    free(c->path);
    free(c->text);
    free(c->model);
    free(c->data_dir);
    free(c->output);
    memset(c, 0, sizeof *c);
}
