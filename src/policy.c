#include "policy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policies/policies.h"

static const ckv_policy_ops *const registry[] = {
    &ckv_policy_full, &ckv_policy_streaming, &ckv_policy_snapkv,
    &ckv_policy_h2o,  &ckv_policy_kmeans,    &ckv_policy_centroid,
};
enum { N_POLICIES = sizeof registry / sizeof registry[0] };

const char *const *ckv_policy_names(void)
{
    static const char *names[N_POLICIES + 1];
    for (int i = 0; i < N_POLICIES; i++)
        names[i] = registry[i]->name;
    return names;
}

ckv_status ckv_policy_init(ckv_policy *p, const char *name, ckv_error *err)
{
    memset(p, 0, sizeof *p);
    for (int i = 0; i < N_POLICIES; i++) {
        if (strcmp(registry[i]->name, name))
            continue;
        p->ops = registry[i];
        for (int32_t j = 0; j < p->ops->n_params; j++)
            p->p[j] = p->ops->params[j].def;
        return CKV_OK;
    }
    char list[256] = "";
    for (int i = 0; i < N_POLICIES; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 registry[i]->name);
    return ckv_errorf(err, CKV_ERR_ARG, "unknown policy '%s' (known: %s)", name, list);
}

/* A decimal number (digits, an optional '.' and digits, an optional exponent
 * e[+-]digits) in s[0, n), times 10^scale, read from its digits exactly:
 * *whole is the integer part and *rest says what is left below it (0
 * nothing, 1 less than one half, 2 one half or more). Going through a double
 * instead would round ties by binary accident ("0.0125" is exactly 12.5
 * per-mille but "0.5005" becomes 500.49999...). False on a syntax error or a
 * value of 10^15 or more. */
static bool parse_decimal(const char *s, size_t n, int scale, int64_t *whole, int *rest)
{
    size_t i = 0, int0, int_n, frac0, frac_n = 0;
    for (int0 = i; i < n && s[i] >= '0' && s[i] <= '9'; i++)
        ;
    int_n = i - int0;
    if (i < n && s[i] == '.')
        for (i++, frac0 = i; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            frac_n++;
    else
        frac0 = i;
    if (!int_n && !frac_n)
        return false;
    long exp10 = 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        int sign = 1;
        if (++i < n && (s[i] == '+' || s[i] == '-'))
            sign = s[i++] == '-' ? -1 : 1;
        size_t e0 = i;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            if (exp10 < 100000)
                exp10 = exp10 * 10 + (s[i] - '0');
        if (i == e0)
            return false;
        exp10 *= sign;
    }
    if (i != n)
        return false;
    *whole = 0;
    *rest = 0;
    bool below_half = false; /* a nonzero digit after the first dropped one */
    for (size_t k = 0; k < int_n + frac_n; k++) {
        int digit = k < int_n ? s[int0 + k] - '0' : s[frac0 + k - int_n] - '0';
        /* The digit's power of ten after scaling. */
        long p = (long)int_n - 1 - (long)k + exp10 + scale;
        if (!digit)
            continue;
        if (p >= 15)
            return false;
        if (p >= 0) {
            int64_t v = digit;
            for (long e = 0; e < p; e++)
                v *= 10;
            *whole += v;
            if (*whole >= 1000000000000000)
                return false;
        } else if (p == -1) {
            *rest = digit >= 5 ? 2 : 1;
        } else {
            below_half = true;
        }
    }
    if (below_half && !*rest)
        *rest = 1;
    return true;
}

/* s times 10^scale rounded to nearest, ties away from zero (the contract's
 * "rounded to nearest"; every reference rounds the same way). The value must
 * lie in (0, hi] (hi already scaled). */
static bool parse_scaled(const char *s, size_t n, int scale, int64_t hi, int64_t *out)
{
    int64_t whole;
    int rest;
    if (!parse_decimal(s, n, scale, &whole, &rest) || (!whole && !rest) || whole > hi ||
        (whole == hi && rest))
        return false;
    *out = whole + (rest == 2);
    return true;
}

/* Parses a plain decimal number in (0, 1] to per-mille, rounded to nearest. */
static bool parse_rate(const char *s, int64_t *out)
{
    return parse_scaled(s, strlen(s), 3, 1000, out);
}

ckv_status ckv_policy_set_kv(ckv_policy *p, const char *key, const char *value, ckv_error *err)
{
    const ckv_policy_ops *o = p->ops;
    for (int32_t j = 0; j < o->n_params; j++) {
        const ckv_param_def *d = &o->params[j];
        if (strcmp(d->key, key))
            continue;
        int64_t v = 0;
        if (d->kind == CKV_PARAM_CHOICE) {
            for (int64_t c = 0; d->choices[c]; c++)
                if (!strcmp(d->choices[c], value)) {
                    p->p[j] = c;
                    return CKV_OK;
                }
            char list[128] = "";
            for (int c = 0; d->choices[c]; c++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", c ? "|" : "",
                         d->choices[c]);
            return ckv_errorf(err, CKV_ERR_ARG, "policy %s: %s='%s' is not one of %s", o->name, key,
                              value, list);
        }
        if (d->kind == CKV_PARAM_RATE) {
            if (!parse_rate(value, &v) || v < d->lo)
                return ckv_errorf(err, CKV_ERR_ARG,
                                  "policy %s: %s='%s' is not a rate in (0, 1] (>= 0.001)", o->name,
                                  key, value);
            p->p[j] = v;
            return CKV_OK;
        }
        char *end;
        errno = 0;
        long long x = strtoll(value, &end, 10);
        if (errno || end == value || *end)
            return ckv_errorf(err, CKV_ERR_ARG, "policy %s: %s='%s' is not an integer", o->name,
                              key, value);
        if (x < d->lo || x > d->hi)
            return ckv_errorf(err, CKV_ERR_ARG, "policy %s: %s=%lld is out of range [%lld, %lld]",
                              o->name, key, x, (long long)d->lo, (long long)d->hi);
        p->p[j] = x;
        return CKV_OK;
    }
    char list[256] = "";
    for (int32_t j = 0; j < o->n_params; j++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", j ? ", " : "",
                 o->params[j].key);
    return ckv_errorf(err, CKV_ERR_ARG, "policy %s: unknown parameter '%s' (parameters: %s)",
                      o->name, key, o->n_params ? list : "none");
}

ckv_status ckv_policy_set(ckv_policy *p, const char *key_value, ckv_error *err)
{
    const char *eq = strchr(key_value, '=');
    if (!eq || eq == key_value)
        return ckv_errorf(err, CKV_ERR_ARG, "policy %s: '%s' is not key=value", p->ops->name,
                          key_value);
    char key[64];
    size_t n = (size_t)(eq - key_value);
    if (n >= sizeof key)
        return ckv_errorf(err, CKV_ERR_ARG, "policy %s: parameter name in '%s' is too long",
                          p->ops->name, key_value);
    memcpy(key, key_value, n);
    key[n] = 0;
    return ckv_policy_set_kv(p, key, eq + 1, err);
}

int ckv_policy_needs(const ckv_policy *p)
{
    return p->ops->needs ? p->ops->needs(p) : 0;
}

int32_t ckv_policy_interval(const ckv_policy *p)
{
    return p->ops->interval ? p->ops->interval(p)
                            : (int32_t)ckv_policy_param(p, "interval", 0);
}

int64_t ckv_policy_param(const ckv_policy *p, const char *key, int64_t def)
{
    for (int32_t j = 0; j < p->ops->n_params; j++)
        if (!strcmp(p->ops->params[j].key, key))
            return p->p[j];
    return def;
}

void ckv_policy_describe(const ckv_policy *p, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = 0;
    for (int32_t j = 0; j < p->ops->n_params && n < size; j++) {
        const ckv_param_def *d = &p->ops->params[j];
        const char *sep = j ? " " : "";
        int w;
        if (d->kind == CKV_PARAM_CHOICE)
            w = snprintf(buf + n, size - n, "%s%s=%s", sep, d->key, d->choices[p->p[j]]);
        else if (d->kind == CKV_PARAM_RATE)
            w = snprintf(buf + n, size - n, "%s%s=%lld.%03lld", sep, d->key,
                         (long long)p->p[j] / 1000, (long long)p->p[j] % 1000);
        else
            w = snprintf(buf + n, size - n, "%s%s=%lld", sep, d->key, (long long)p->p[j]);
        n += w > 0 ? (size_t)w : 0;
    }
}

bool ckv_policy_degree_bias(const ckv_policy *p)
{
    /* degree_bias is a CHOICE whose index 0 is "on". */
    return ckv_policy_param(p, "degree_bias", 0) == 0;
}

bool ckv_policy_merges(const ckv_policy *p)
{
    return p->ops->merges;
}

ckv_status ckv_budget_parse(const char *s, ckv_budget *b, ckv_error *err)
{
    memset(b, 0, sizeof *b);
    size_t n = strlen(s);
    char *end;
    errno = 0;
    if (n && s[n - 1] == '%') {
        if (!parse_scaled(s, n - 1, 4, 1000000, &b->ppm))
            return ckv_errorf(err, CKV_ERR_ARG, "budget '%s': a percent must lie in (0, 100]", s);
    } else if (strpbrk(s, ".eE")) {
        if (!parse_scaled(s, n, 6, 1000000, &b->ppm))
            return ckv_errorf(err, CKV_ERR_ARG, "budget '%s': a fraction must lie in (0, 1]", s);
    } else {
        long long x = strtoll(s, &end, 10);
        if (errno || end == s || *end || x < 1 || x > INT32_MAX)
            return ckv_errorf(err, CKV_ERR_ARG,
                              "budget '%s': not a percent (25%%), fraction (0.25) or entry count "
                              "in [1, %d]",
                              s, INT32_MAX);
        b->absolute = x;
    }
    if (!b->absolute && b->ppm < 1)
        return ckv_errorf(err, CKV_ERR_ARG, "budget '%s' rounds to 0 parts per million", s);
    return CKV_OK;
}

int64_t ckv_budget_entries(const ckv_budget *b, int64_t n_tokens)
{
    if (b->absolute)
        return b->absolute;
    return (b->ppm * n_tokens + 999999) / 1000000;
}

ckv_status ckv_budget_check(const ckv_policy *p, const ckv_budget *b, int64_t n_tokens,
                            int64_t *entries, bool *skip, char *skip_reason, size_t reason_size,
                            ckv_error *err)
{
    int64_t B = ckv_budget_entries(b, n_tokens), prot = p->ops->protected_count(p);
    *entries = B;
    *skip = false;
    if (skip_reason && reason_size)
        skip_reason[0] = 0;
    if (B > prot)
        return CKV_OK;
    if (b->absolute)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "budget %lld entries does not exceed the %lld entries policy %s protects",
                          (long long)B, (long long)prot, p->ops->name);
    *skip = true;
    if (skip_reason && reason_size)
        snprintf(skip_reason, reason_size,
                 "budget %lld.%04lld%% of %lld tokens = %lld entries does not exceed the %lld "
                 "entries policy %s protects",
                 (long long)b->ppm / 10000, (long long)b->ppm % 10000, (long long)n_tokens,
                 (long long)B, (long long)prot, p->ops->name);
    return CKV_OK;
}

void ckv_policy_assign_identity(const ckv_cache *c, int32_t *assign)
{
    for (int32_t lh = 0; lh < c->n_layer * c->n_head_kv; lh++)
        for (int32_t t = 0; t < c->capacity; t++)
            assign[(size_t)lh * c->capacity + t] = t < c->len[lh] ? t : -1;
}

ckv_status ckv_policy_check(const ckv_policy *p, bool has_score, int32_t budget,
                            const ckv_qwindow *qw, ckv_error *err)
{
    int needs = ckv_policy_needs(p);
    if ((needs & CKV_NEEDS_SCORE) && !has_score)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "policy %s needs accumulated attention scores (h2o_score)", p->ops->name);
    if ((needs & CKV_NEEDS_Q_WINDOW) && (!qw || !qw->q))
        return ckv_errorf(err, CKV_ERR_ARG, "policy %s needs the window queries (q_window)",
                          p->ops->name);
    if (budget <= p->ops->protected_count(p))
        return ckv_errorf(err, CKV_ERR_ARG,
                          "budget %d entries does not exceed the %d entries policy %s protects",
                          budget, p->ops->protected_count(p), p->ops->name);
    return CKV_OK;
}

ckv_status ckv_policy_compress(const ckv_policy *p, ckv_cache *c, int32_t budget,
                               const ckv_qwindow *qw, int32_t *assign, ckv_error *err)
{
    ckv_status st = ckv_policy_check(p, c->score != NULL, budget, qw, err);
    return st ? st : p->ops->compress(p, c, budget, qw, assign, err);
}

bool ckv_policy_due(const ckv_policy *p, int32_t max_len, int32_t budget, int64_t step,
                    const ckv_qwindow *qw)
{
    int32_t interval = ckv_policy_interval(p);
    if (interval <= 0 || step % interval != 0 || max_len <= budget)
        return false;
    /* SnapKV re-scores during decode only once W decode queries exist. */
    return !(ckv_policy_needs(p) & CKV_NEEDS_Q_WINDOW) ||
           (qw && qw->q && qw->w >= ckv_policy_param(p, "window", 0));
}

ckv_status ckv_policy_on_decode(const ckv_policy *p, ckv_cache *c, int32_t budget, int64_t step,
                                const ckv_qwindow *qw, bool *compressed, ckv_error *err)
{
    bool due = ckv_policy_due(p, ckv_cache_max_len(c), budget, step, qw);
    if (compressed)
        *compressed = due;
    return due ? ckv_policy_compress(p, c, budget, qw, NULL, err) : CKV_OK;
}
