/* KV-cache compression policies (../shared/docs/policies.md is the
 * contract). A policy is a small table of operations plus its parameter
 * values; policies are looked up by name. Every policy works in place on a
 * ckv_cache, keeps slot order, and can report where each input slot went. */
#ifndef CKV_POLICY_H
#define CKV_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { CKV_POLICY_MAX_PARAMS = 12 };

/* Parameter kinds: INT a plain integer; RATE a number in (0, 1] stored in
 * per-mille (rounded to nearest); CHOICE an index into a NULL-terminated
 * list of names. */
typedef enum { CKV_PARAM_INT, CKV_PARAM_RATE, CKV_PARAM_CHOICE } ckv_param_kind;

typedef struct {
    const char *key;
    ckv_param_kind kind;
    int64_t def, lo, hi;        /* value, per-mille or choice index */
    const char *const *choices; /* CHOICE only */
    const char *help;
} ckv_param_def;

/* Attention statistics a policy may need, as flags. */
enum { CKV_NEEDS_Q_WINDOW = 1, CKV_NEEDS_SCORE = 2 };

/* Window queries for SnapKV: the last w queries, post-RoPE,
 * [n_layer][n_head][w][head_dim]; the query of row i sits at the position of
 * slot T - w + i of every list (the newest w slots hold the window's own
 * tokens). Query head qh belongs to KV head qh / (n_head / n_head_kv). */
typedef struct {
    const float *q;
    int32_t n_head;
    int32_t w;
} ckv_qwindow;

typedef struct ckv_policy ckv_policy;

typedef struct {
    const char *name;
    const char *summary;
    const ckv_param_def *params;
    int32_t n_params;
    /* Entries of one (layer, head) the policy never merges or evicts. */
    int32_t (*protected_count)(const ckv_policy *p);
    /* Statistics the policy needs (CKV_NEEDS_*); NULL: none. */
    int (*needs)(const ckv_policy *p);
    /* Decode-time compression interval, 0 if the policy compresses only
     * after prefill; NULL: the `interval` parameter (0 without one). */
    int32_t (*interval)(const ckv_policy *p);
    /* Whether compress merges entries into centroids of degree above 1;
     * false: it only evicts, and every degree stays 1. */
    bool merges;
    /* One compression of every list longer than budget. assign (may be NULL)
     * is [n_layer * n_head_kv * cache->capacity]: on entry, assign[i] holds
     * the current slot of input slot i of each list (-1 if gone); on return
     * it is updated through this compression. */
    ckv_status (*compress)(const ckv_policy *p, ckv_cache *c, int32_t budget, const ckv_qwindow *qw,
                           int32_t *assign, ckv_error *err);
} ckv_policy_ops;

struct ckv_policy {
    const ckv_policy_ops *ops;
    int64_t p[CKV_POLICY_MAX_PARAMS]; /* values in the order of ops->params */
};

/* Looks a policy up by name and sets its defaults. */
ckv_status ckv_policy_init(ckv_policy *p, const char *name, ckv_error *err);
/* Names of all policies, NULL-terminated. */
const char *const *ckv_policy_names(void);
/* Sets one parameter from "key=value" (or key and value separately). */
ckv_status ckv_policy_set(ckv_policy *p, const char *key_value, ckv_error *err);
ckv_status ckv_policy_set_kv(ckv_policy *p, const char *key, const char *value, ckv_error *err);
/* Value of a named parameter; def if the policy has no such parameter. */
int64_t ckv_policy_param(const ckv_policy *p, const char *key, int64_t def);
/* The policy's statistics needs and decode interval (ops defaults applied). */
int ckv_policy_needs(const ckv_policy *p);
int32_t ckv_policy_interval(const ckv_policy *p);
/* "key=value key=value ..." with every parameter, for result records. */
void ckv_policy_describe(const ckv_policy *p, char *buf, size_t size);
/* Whether attention adds log(degree) (false only for degree_bias=off). */
bool ckv_policy_degree_bias(const ckv_policy *p);
/* Whether the policy merges entries (ops->merges). */
bool ckv_policy_merges(const ckv_policy *p);

/* Budget as written by the user: a fraction/percent in parts per million,
 * or an absolute entry count (exactly one of the two is > 0). */
typedef struct {
    int64_t ppm;
    int64_t absolute;
} ckv_budget;

/* Parses "25%", "0.25" (fraction in (0, 1]) or "1024" (integer count). */
ckv_status ckv_budget_parse(const char *s, ckv_budget *b, ckv_error *err);
/* B for n_tokens compressed tokens: absolute, or ceil(ppm * n / 1e6). */
int64_t ckv_budget_entries(const ckv_budget *b, int64_t n_tokens);
/* Checks B > protected count. An absolute budget that fails is an error
 * (CKV_ERR_ARG, before any work). A fractional one that fails returns
 * CKV_OK with *skip set and the reason in skip_reason: the sample is
 * skipped. */
ckv_status ckv_budget_check(const ckv_policy *p, const ckv_budget *b, int64_t n_tokens,
                            int64_t *entries, bool *skip, char *skip_reason, size_t reason_size,
                            ckv_error *err);

/* What every compression checks before it runs, the GPU's too: the
 * statistics the policy needs are present (has_score: the cache holds
 * accumulated attention scores; qw's queries) and budget exceeds the
 * entries it protects. CKV_ERR_ARG with the reason, else CKV_OK. */
ckv_status ckv_policy_check(const ckv_policy *p, bool has_score, int32_t budget,
                            const ckv_qwindow *qw, ckv_error *err);
/* Compresses every list longer than budget (CSM: rounds until within budget
 * or out of candidates). assign as in ckv_policy_ops.compress. Checks as
 * ckv_policy_check. */
ckv_status ckv_policy_compress(const ckv_policy *p, ckv_cache *c, int32_t budget,
                               const ckv_qwindow *qw, int32_t *assign, ckv_error *err);
/* Whether the decode hook compresses after step s with the longest list at
 * max_len: the policy compresses during decode, s % interval == 0, a list is
 * longer than budget, and (SnapKV) W decode queries exist. */
bool ckv_policy_due(const ckv_policy *p, int32_t max_len, int32_t budget, int64_t step,
                    const ckv_qwindow *qw);
/* Decode hook after step s (1, 2, ...) appended its token: compresses when
 * the policy compresses during decode, s % interval == 0 and a list is
 * longer than budget. Sets *compressed accordingly (may be NULL). */
ckv_status ckv_policy_on_decode(const ckv_policy *p, ckv_cache *c, int32_t budget, int64_t step,
                                const ckv_qwindow *qw, bool *compressed, ckv_error *err);

/* Sets assign to the identity over every list's current length (-1 past
 * it), the starting point of ckv_policy_compress. */
void ckv_policy_assign_identity(const ckv_cache *c, int32_t *assign);

#ifdef __cplusplus
}
#endif
#endif
