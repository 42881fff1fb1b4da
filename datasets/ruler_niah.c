/* Needle in a haystack (RULER niah.py): noise, essay or needle haystacks;
 * keys and values as words, 7-digit numbers or uuid4. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ruler_gen.h"
#include "util.h"

typedef enum { HAY_NOISE, HAY_ESSAY, HAY_NEEDLE } hay_type;
typedef enum { KV_WORDS, KV_NUMBERS, KV_UUIDS } kv_type;

/* RULER's DEPTHS: np.round(np.linspace(0, 100, 40)).astype(int) */
static const int depths[40] = {0,  3,  5,  8,  10, 13, 15, 18, 21, 23, 26, 28, 31, 33,
                               36, 38, 41, 44, 46, 49, 51, 54, 56, 59, 62, 64, 67, 69,
                               72, 74, 77, 79, 82, 85, 87, 90, 92, 95, 97, 100};

static const char needle_fmt[] = "One of the special magic {type_needle_v} for {key} is: {value}.";

typedef struct {
    hay_type hay;
    kv_type key_type, value_type;
    const char *type_v; /* plural, as in the needle sentence */
    int num_k, num_v, num_q;
    char *tmpl;         /* singularised when num_q * num_v == 1 */
    char type_v_q[16];  /* type in the question (singular or plural) */
    ruler_words words;
    char *essay;        /* whitespace-collapsed */
    size_t *word_start, *word_len, n_words;
} niah_state;

static void niah_free(void *p)
{
    niah_state *s = p;
    if (!s)
        return;
    free(s->tmpl);
    ruler_words_free(&s->words);
    free(s->essay);
    free(s->word_start);
    free(s->word_len);
    free(s);
}

static void draw(niah_state *s, kv_type t, ckv_rng *rng, char *out, size_t cap)
{
    if (t == KV_NUMBERS) {
        snprintf(out, cap, "%lld", (long long)ckv_rng_range(rng, 1000000, 9999999));
    } else if (t == KV_WORDS) {
        /* uniform over adjective x noun: RULER's sorted set of "adj-noun" */
        const char *a = s->words.adjs[ckv_rng_below(rng, s->words.n_adjs)];
        const char *n = s->words.nouns[ckv_rng_below(rng, s->words.n_nouns)];
        snprintf(out, cap, "%s-%s", a, n);
    } else {
        /* uuid.UUID(int=getrandbits(128), version=4) */
        uint64_t hi = ckv_rng_next(rng), lo = ckv_rng_next(rng);
        hi = (hi & ~0xf000ULL) | 0x4000ULL;
        lo = (lo & ~(0xc000ULL << 48)) | (0x8000ULL << 48);
        snprintf(out, cap, "%08llx-%04llx-%04llx-%04llx-%012llx",
                 (unsigned long long)(hi >> 32), (unsigned long long)((hi >> 16) & 0xffff),
                 (unsigned long long)(hi & 0xffff), (unsigned long long)(lo >> 48),
                 (unsigned long long)(lo & 0xffffffffffffULL));
    }
}

static ckv_status fmt_needle(rbuf *b, const char *type_v, const char *key, const char *value,
                             ckv_error *err)
{
    const char *names[3] = {"type_needle_v", "key", "value"};
    const char *vals[3] = {type_v, key, value};
    return ruler_format(b, needle_fmt, names, vals, 3, NULL, NULL, err);
}

static int cmp_desc(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

typedef struct {
    rbuf needles[CKV_RULER_MAX_NEEDLES];
    size_t n;
} needle_set;

/* Line haystacks (noise, needle): RULER inserts needle j at line index
 * idx[j] (distinct indices, inserted in descending order), so each needle
 * ends up just before original line idx[j]; lines are joined with "\n". */
static ckv_status line_haystack(niah_state *s, size_t units, ckv_rng *rng, needle_set *ns,
                                rbuf *ctx, size_t *off, double *depth, ckv_error *err)
{
    if (units < ns->n)
        return ckv_errorf(err, CKV_ERR_ARG, "niah: %zu lines cannot hold %zu needles", units,
                          ns->n);
    size_t *scratch = malloc(units * sizeof *scratch);
    size_t idx[CKV_RULER_MAX_NEEDLES];
    if (!scratch)
        return ckv_errorf(err, CKV_ERR_NOMEM, "niah: out of memory");
    ckv_rng_sample(rng, units, ns->n, scratch, idx);
    free(scratch);
    qsort(idx, ns->n, sizeof *idx, cmp_desc);
    rbuf line = {0};
    ckv_status st = CKV_OK;
    for (size_t l = 0; l < units && !st; l++) {
        for (size_t q = 0; q < ns->n; q++)
            if (idx[q] == l) {
                if (ctx->len)
                    rbuf_put(ctx, "\n", 1);
                off[q] = ctx->len;
                depth[q] = (double)l / (double)units;
                rbuf_put(ctx, ns->needles[q].p, ns->needles[q].len);
            }
        if (ctx->len)
            rbuf_put(ctx, "\n", 1);
        if (s->hay == HAY_NOISE) {
            rbuf_puts(ctx, ruler_noise);
            continue;
        }
        char key[64], val[64];
        draw(s, s->key_type, rng, key, sizeof key);
        draw(s, s->value_type, rng, val, sizeof val);
        rbuf_reset(&line);
        st = fmt_needle(&line, s->type_v, key, val, err);
        rbuf_put(ctx, line.p, line.len);
    }
    rbuf_free(&line);
    return st;
}

/* Essay haystack: first `units` words (repeated as needed), split into
 * sentences; needles at sentence index int(len * depth / 100) for depths
 * drawn without replacement from DEPTHS. */
static ckv_status essay_haystack(niah_state *s, size_t units, ckv_rng *rng, needle_set *ns,
                                 rbuf *ctx, size_t *off, double *depth, ckv_error *err)
{
    rbuf text = {0};
    for (size_t i = 0; i < units; i++) {
        size_t w = i % s->n_words;
        if (i)
            rbuf_put(&text, " ", 1);
        rbuf_put(&text, s->essay + s->word_start[w], s->word_len[w]);
    }
    if (text.oom) {
        rbuf_free(&text);
        return ckv_errorf(err, CKV_ERR_NOMEM, "niah: out of memory");
    }
    /* text.strip(): only spaces can remain at the ends after collapsing */
    size_t a = 0, b = text.len;
    while (a < b && text.p[a] == ' ')
        a++;
    while (b > a && text.p[b - 1] == ' ')
        b--;
    size_t *starts = NULL;
    size_t n_sent = ruler_sentences(text.p ? text.p + a : "", b - a, &starts);
    if (b > a && !starts) {
        rbuf_free(&text);
        return ckv_errorf(err, CKV_ERR_NOMEM, "niah: out of memory");
    }
    size_t scratch[40], pick[CKV_RULER_MAX_NEEDLES], pos[CKV_RULER_MAX_NEEDLES];
    ckv_rng_sample(rng, 40, ns->n, scratch, pick);
    for (size_t i = 0; i < ns->n; i++) {
        /* int(len(sents) * (depth / 100)) in double, as Python computes it */
        double dp = (double)depths[pick[i]] / 100.0;
        pos[i] = (size_t)((double)n_sent * dp);
        pick[i] = (size_t)depths[pick[i]];
    }
    /* sort positions, carrying their depth percent along */
    for (size_t i = 1; i < ns->n; i++)
        for (size_t j = i; j > 0 && pos[j - 1] > pos[j]; j--) {
            size_t t = pos[j];
            pos[j] = pos[j - 1];
            pos[j - 1] = t;
            t = pick[j];
            pick[j] = pick[j - 1];
            pick[j - 1] = t;
        }
    /* " ".join of [sents[0:p1], needle1, sents[p1:p2], needle2, ..., sents[pk:]] */
    size_t last = 0;
    for (size_t i = 0; i <= ns->n; i++) {
        size_t next = i < ns->n ? pos[i] : n_sent;
        if (i)
            rbuf_put(ctx, " ", 1);
        if (next > last) {
            size_t from = starts[last];
            size_t to = next < n_sent ? starts[next] - 1 : b - a; /* drop the joining space */
            rbuf_put(ctx, text.p + a + from, to - from);
        }
        last = next > last ? next : last;
        if (i < ns->n) {
            rbuf_put(ctx, " ", 1);
            off[i] = ctx->len;
            depth[i] = (double)pick[i] / 100.0;
            rbuf_put(ctx, ns->needles[i].p, ns->needles[i].len);
        }
    }
    free(starts);
    rbuf_free(&text);
    return CKV_OK;
}

static ckv_status niah_build(ruler_gen *g, size_t question, size_t units, ckv_rng *rng,
                             ruler_draft *d, ckv_error *err)
{
    (void)question;
    niah_state *s = g->state;
    char keys[CKV_RULER_MAX_NEEDLES][64];
    char values[CKV_RULER_MAX_NEEDLES][64]; /* key i's values at i * num_v + j */
    needle_set ns = {0};
    ckv_status st = CKV_OK;
    for (int i = 0; i < s->num_k && !st; i++) {
        draw(s, s->key_type, rng, keys[i], sizeof keys[i]);
        for (int j = 0; j < s->num_v && !st; j++) {
            char *v = values[i * s->num_v + j];
            draw(s, s->value_type, rng, v, 64);
            st = fmt_needle(&ns.needles[ns.n++], s->type_v, keys[i], v, err);
        }
    }
    /* random.Random(seed).shuffle(needles): a fresh generator from the seed */
    ckv_rng fixed;
    ckv_rng_seed(&fixed, g->seed);
    if (!st)
        ckv_rng_shuffle(&fixed, ns.needles, ns.n, sizeof ns.needles[0]);

    rbuf ctx = {0};
    size_t off[CKV_RULER_MAX_NEEDLES];
    double depth[CKV_RULER_MAX_NEEDLES];
    for (size_t i = 0; i < CKV_RULER_MAX_NEEDLES; i++)
        off[i] = SIZE_MAX;
    if (!st)
        st = s->hay == HAY_ESSAY ? essay_haystack(s, units, rng, &ns, &ctx, off, depth, err)
                                 : line_haystack(s, units, rng, &ns, &ctx, off, depth, err);
    if (!st && ctx.oom)
        st = ckv_errorf(err, CKV_ERR_NOMEM, "niah: out of memory");

    /* queries: num_q of the keys, in draw order; answers all their values */
    size_t scratch[CKV_RULER_MAX_NEEDLES], qi[CKV_RULER_MAX_NEEDLES];
    rbuf query = {0};
    if (!st) {
        ckv_rng_sample(rng, (size_t)s->num_k, (size_t)s->num_q, scratch, qi);
        for (int q = 0; q < s->num_q; q++) {
            if (q)
                rbuf_puts(&query, q == s->num_q - 1 ? ", and " : ", ");
            rbuf_puts(&query, keys[qi[q]]);
            for (int j = 0; j < s->num_v && !st; j++)
                st = ruler_draft_output(d, values[qi[q] * s->num_v + j], err);
        }
        if (query.oom && !st)
            st = ckv_errorf(err, CKV_ERR_NOMEM, "niah: out of memory");
    }
    if (!st) {
        const char *names[3] = {"type_needle_v", "context", "query"};
        const char *vals[3] = {s->type_v_q, ctx.p ? ctx.p : "", query.p};
        st = ruler_format(&d->text, s->tmpl, names, vals, 3, &d->ctx_start, &d->ctx_end, err);
    }
    if (!st) {
        for (size_t i = 0; i < ns.n; i++)
            if (off[i] != SIZE_MAX) {
                d->needle_off[d->n_needles] = d->ctx_start + off[i];
                d->needle_depth[d->n_needles++] = depth[i];
            }
    }
    for (size_t i = 0; i < ns.n; i++)
        rbuf_free(&ns.needles[i]);
    rbuf_free(&ctx);
    rbuf_free(&query);
    return st;
}

static ckv_status parse_type(const ruler_gen *g, const json_t *args, const char *key,
                             kv_type *t, const char **name, ckv_error *err)
{
    const char *v = json_string_value(json_object_get(args, key));
    static const char *const names[3] = {"words", "numbers", "uuids"};
    for (int i = 0; v && i < 3; i++)
        if (!strcmp(v, names[i])) {
            *t = (kv_type)i;
            *name = names[i];
            return CKV_OK;
        }
    return ckv_errorf(err, CKV_ERR_FORMAT, "templates.json: tasks.%s.args.%s: '%s' is not one of "
                      "words, numbers, uuids", g->task, key, v ? v : "(missing)");
}

static ckv_status int_arg(const ruler_gen *g, const json_t *args, const char *key, int lo,
                          int hi, int *out, ckv_error *err)
{
    const json_t *v = json_object_get(args, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return ckv_errorf(err, CKV_ERR_FORMAT, "templates.json: tasks.%s.args.%s: missing or "
                          "outside [%d, %d]", g->task, key, lo, hi);
    *out = (int)json_integer_value(v);
    return CKV_OK;
}

static ckv_status load_essay(ruler_gen *g, niah_state *s, ckv_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/ruler/PaulGrahamEssays.json", g->data_dir);
    if (!ruler_file_exists(path))
        return ruler_skip_missing(g, path, "RULER essay haystack");
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s: line %d: %s", path, je.line, je.text);
    const json_t *t = json_object_get(root, "text");
    ckv_status st = CKV_OK;
    if (!json_is_string(t) || !json_string_length(t)) {
        st = ckv_errorf(err, CKV_ERR_FORMAT, "%s: field \"text\": missing or empty", path);
        goto out;
    }
    size_t len;
    s->essay = ruler_collapse_space(json_string_value(t), json_string_length(t), &len);
    size_t cap = 1;
    for (size_t i = 0; s->essay && i < len; i++)
        cap += s->essay[i] == ' ';
    s->word_start = malloc(cap * sizeof *s->word_start);
    s->word_len = malloc(cap * sizeof *s->word_len);
    if (!s->essay || !s->word_start || !s->word_len) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    /* str.split(" "): empty words at the ends are kept, as Python keeps them */
    size_t a = 0;
    for (size_t i = 0; i <= len; i++)
        if (i == len || s->essay[i] == ' ') {
            s->word_start[s->n_words] = a;
            s->word_len[s->n_words++] = i - a;
            a = i + 1;
        }
out:
    json_decref(root);
    return st;
}

ckv_status ruler_niah_init(ruler_gen *g, const json_t *args, ckv_error *err)
{
    niah_state *s = calloc(1, sizeof *s);
    if (!s)
        return ckv_errorf(err, CKV_ERR_NOMEM, "niah: out of memory");
    g->state = s;
    g->free_state = niah_free;
    g->build = niah_build;
    const char *hay = json_string_value(json_object_get(args, "type_haystack"));
    if (hay && (!strcmp(hay, "noise") || !strcmp(hay, "repeat"))) /* "repeat": older name */
        s->hay = HAY_NOISE;
    else if (hay && !strcmp(hay, "essay"))
        s->hay = HAY_ESSAY;
    else if (hay && !strcmp(hay, "needle"))
        s->hay = HAY_NEEDLE;
    else
        return ckv_errorf(err, CKV_ERR_FORMAT, "templates.json: tasks.%s.args.type_haystack: '%s' "
                          "is not one of noise, essay, needle", g->task, hay ? hay : "(missing)");
    const char *kname;
    ckv_status st = parse_type(g, args, "type_needle_k", &s->key_type, &kname, err);
    if (!st)
        st = parse_type(g, args, "type_needle_v", &s->value_type, &s->type_v, err);
    if (!st)
        st = int_arg(g, args, "num_needle_k", 1, CKV_RULER_MAX_NEEDLES, &s->num_k, err);
    if (!st)
        st = int_arg(g, args, "num_needle_v", 1, CKV_RULER_MAX_NEEDLES, &s->num_v, err);
    if (!st)
        st = int_arg(g, args, "num_needle_q", 1, CKV_RULER_MAX_NEEDLES, &s->num_q, err);
    if (st)
        return st;
    if (s->num_k < s->num_q)
        s->num_k = s->num_q; /* RULER: num_needle_k = max(k, q) */
    if (s->num_k * s->num_v > CKV_RULER_MAX_NEEDLES)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED, "%s: %d needles, at most %d supported",
                          g->task, s->num_k * s->num_v, CKV_RULER_MAX_NEEDLES);
    if (s->hay == HAY_ESSAY && s->num_k * s->num_v > 40)
        return ckv_errorf(err, CKV_ERR_ARG, "%s: more needles than depths", g->task);

    /* singular prompt when one value is asked for (applied to template +
     * answer prefix, before formatting, as RULER does) */
    snprintf(s->type_v_q, sizeof s->type_v_q, "%s", s->type_v);
    char *t = strdup(g->tmpl);
    if (s->num_q * s->num_v == 1) {
        static const char *const rep[4][2] = {
            {"Some", "A"}, {"are all", "is"}, {"are", "is"}, {"answers", "answer"}};
        for (int i = 0; i < 4 && t; i++) {
            char *n = ruler_replace_all(t, rep[i][0], rep[i][1]);
            free(t);
            t = n;
        }
        s->type_v_q[strlen(s->type_v_q) - 1] = 0;
    }
    if (!t)
        return ckv_errorf(err, CKV_ERR_NOMEM, "niah: out of memory");
    s->tmpl = t;

    if (s->key_type == KV_WORDS || s->value_type == KV_WORDS) {
        if ((st = ruler_words_load(g, &s->words, err)) || g->skipped)
            return st;
    }
    if (s->hay == HAY_ESSAY) {
        if ((st = load_essay(g, s, err)) || g->skipped)
            return st;
        g->incremental = 500;
    } else {
        g->incremental = g->target < 4096 ? 5 : 25;
    }
    g->probe_units = g->incremental;
    g->upper_mult = 3;
    return CKV_OK;
}
