/* GPU policy parity: ckv_gpu_policy_compress (kernels/cuda.h) against the
 * CPU reference ckv_policy_compress (src/policy.h) on the same caches:
 * synthetic caches with drifting keys (equal lengths; a different length
 * per list; already compressed once, so degrees > 1 and the CSM round
 * counter > 0, with fresh entries appended), the real dump
 * tests/fixtures/kv_small.h5, and an optional dump (--dump PATH or
 * CKV_POLICY_DUMP). Every policy, default and non-default parameters,
 * several budgets, and a second compression of each side's own result;
 * and ckv_gpu_policy_compress_many over caches of one shape in one call,
 * each against its own CPU compression (check_many), and its refusals.
 *
 * For each run: the GPU cache is filled with NaN bytes before the upload,
 * then lengths, the CSM round counter and the assign map (where every input
 * slot ended) must be identical; where a list's decisions differ, the list
 * counts as a near-tie when the GPU reports a decision margin below
 * NEAR_TIE (policies.md allows such differences) and fails otherwise; keys,
 * values, degrees and scores of every other list must agree within
 * TOL_VALUE. Every source runs twice (--kv-dtype: once): with fp32 keys
 * and values, then with bf16 ones (the host cache rounded to bf16 and marked so, the GPU
 * cache storing bf16; both sides then store their merged centroids
 * rounded to bf16, the same tolerance applies). Prints one row per run and
 * exits 0 (all pass), 1 (a failure) or 77 (no GPU).
 *
 * --bench: GPU time of each policy (median of repeats, wall time of the
 * synchronised call) on synthetic caches of the SmolLM2 shape at 8K, 16K
 * and 32K tokens, fp32 and bf16 caches; no parity checks. */
#include <float.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "cuda.h"
#include "kvfile.h"
#include "policies/csm.h"
#include "policies/policies.h"
#include "policy.h"
#include "quant.h"
#include "splitmix.h"
#include "synthetic_kv.h"

#define GPU_TEST_NAME "policy_parity"
#include "gpu_test.h"

#define SKIP 77

/* Fixed before any run. Merges are computed in double in the CPU's order on
 * both sides and rounded once to fp32 (then, in a bf16 cache, from fp32 to
 * bf16 by the same rule), so values should agree exactly; the tolerance
 * allows one fp32 rounding step (2^-23 relative) of slack. */
#define TOL_VALUE 2.5e-7
/* policies.md: decisions whose scores are closer than this may differ. */
#define NEAR_TIE 1e-5

static int failures, near_ties, runs;
/* K-Means lists whose centroids were compared, over the program: a run
 * where none was would have checked nothing of them. */
static int64_t centroid_lists;
/* The forced lazy block (run_lazy): its K-Means calls' features start as
 * NaN (the trace's poison_lazy), and its calls that took the lazy form. */
static bool poison_lazy;
static int64_t lazy_calls;
/* How the sources store keys and values, on both sides. */
static ckv_kv_dtype kv_dtype = CKV_KV_F32;

static double wall_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

/* CPU time of the process (all threads): another job may share the cores. */
static double cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

typedef struct {
    const char *name;
    ckv_cache c;
    float *q;        /* window queries or NULL */
    int32_t n_head, w;
    ckv_gpu_cache *g; /* GPU cache of the same shape and capacity */
    /* K-Means with its first assignment alone (iters=0) must give every
     * list as the CPU's, near-ties included: the ties the source makes are
     * exact there, which both sides break alike (equal columns give equal
     * dot products on the GPU's FP64 walk and in OpenBLAS's kernels, which
     * BLAS itself does not promise; an update's means may part them by an
     * ulp, a near-tie either side may break) */
    bool strict;
} source;

typedef struct {
    const char *policy;
    const char *params[5];
    bool chain; /* compress each side's result again at half the budget */
    /* a parameter for a GPU run on the same cache just before, result
     * discarded (its scratch is left for the checked run) */
    const char *prime;
} pcase;

static const pcase cases[] = {
    {"centroid", {NULL}, true, NULL},
    {"centroid", {"chunk=16", "r_init=0.3", "schedule=constant", NULL}, false, NULL},
    {"centroid", {"partition=sequential", "sinks=8", "recent=32", NULL}, false, NULL},
    {"centroid", {"partition=random", "seed=7", "r_step=0.2", "r_min=0.05", NULL}, true, NULL},
    {"centroid", {"chunk=2", "sinks=0", "recent=0", NULL}, false, NULL},
    {"centroid",
     {"chunk=100", "partition=random", "seed=123456789", "r_init=1", NULL},
     false,
     NULL},
    /* odd chunks: the candidates' compacted positions and the last chunk's
     * (L + 1) / 2 sources */
    {"centroid", {"chunk=7", "recent=5", NULL}, true, NULL},
    {"centroid", {"chunk=33", "partition=sequential", "sinks=3", NULL}, false, NULL},
    {"kmeans", {NULL}, true, NULL},
    {"kmeans", {"iters=3", "sinks=2", "recent=16", NULL}, false, NULL},
    {"kmeans", {"iters=0", NULL}, false, NULL},
    /* one update: the loop can end at its last assignment without a sort */
    {"kmeans", {"iters=1", NULL}, false, NULL},
    /* more sinks than the feature kernel's block of 128 slots */
    {"kmeans", {"sinks=130", "recent=8", NULL}, false, NULL},
    /* the scratch then holds this cache's first assignment, which the
     * checked run's first assignment must not take for "no cluster
     * changed" (it would skip every iteration) */
    {"kmeans", {NULL}, false, "iters=0"},
    {"streaming", {NULL}, true, NULL},
    {"streaming", {"sinks=0", NULL}, false, NULL},
    {"h2o", {NULL}, true, NULL},
    {"h2o", {"recent=16", NULL}, false, NULL},
    {"snapkv", {NULL}, false, NULL},
    {"snapkv", {"window=16", "kernel=5", "pooling=avg", NULL}, false, NULL},
    {"snapkv", {"kernel=1", NULL}, false, NULL},
    /* more window rows than the kernel's chunk of 32 */
    {"snapkv", {"window=45", "kernel=3", NULL}, false, NULL},
    {"full", {NULL}, false, NULL},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

static void make_policy(ckv_policy *p, const pcase *pc, char *desc, size_t size)
{
    CHECK(ckv_policy_init(p, pc->policy, err));
    snprintf(desc, size, "%s", pc->policy);
    for (int i = 0; pc->params[i]; i++) {
        CHECK(ckv_policy_set(p, pc->params[i], err));
        snprintf(desc + strlen(desc), size - strlen(desc), " %s", pc->params[i]);
    }
}

static size_t lists_of(const ckv_cache *c)
{
    return (size_t)c->n_layer * c->n_head_kv;
}

typedef struct {
    int64_t slots_differ; /* input slots whose final slot differs */
    int32_t lists_differ, lists_near;
    double max_err;
    bool fail;
    char why[800];
} verdict;

static void fail_with(verdict *v, const char *why)
{
    if (!v->fail)
        snprintf(v->why, sizeof v->why, "%s", why);
    v->fail = true;
}

/* |got - want| / max(1, |want|); infinite for a NaN (an unwritten output). */
static double value_err(float got, float want)
{
    if (isnan(got) || isnan(want))
        return INFINITY;
    double e = fabs((double)got - want), m = fabs((double)want);
    return e / (m > 1 ? m : 1);
}

/* Compares the GPU result (downloaded into got) with the CPU result and the
 * two assign maps (every input slot of the source cache). */
static void compare(const ckv_cache *got, const ckv_cache *want, const int32_t *a_got,
                    const int32_t *a_want, const float *margin, verdict *v)
{
    size_t lists = lists_of(want), cap = (size_t)want->capacity, d = (size_t)want->head_dim;
    if (got->round != want->round)
        fail_with(v, "CSM round counters differ");
    if (got->n_pos != want->n_pos)
        fail_with(v, "positions differ");
    for (size_t lh = 0; lh < lists; lh++) {
        int64_t differ = got->len[lh] != want->len[lh];
        for (size_t i = 0; i < cap; i++)
            differ += a_got[lh * cap + i] != a_want[lh * cap + i];
        if (differ) {
            v->slots_differ += differ;
            v->lists_differ++;
            if (margin[lh] < NEAR_TIE) {
                v->lists_near++;
                printf("  near-tie: list %zu, %lld slots placed differently, lengths %d/%d, "
                       "margin %.2e\n",
                       lh, (long long)differ, got->len[lh], want->len[lh], (double)margin[lh]);
            } else {
                char why[160];
                snprintf(why, sizeof why,
                         "list %zu: %lld slots placed differently, lengths %d/%d, margin %.2e",
                         lh, (long long)differ, got->len[lh], want->len[lh], (double)margin[lh]);
                fail_with(v, why);
            }
            continue;
        }
        size_t n = (size_t)want->len[lh];
        for (size_t t = 0; t < n; t++) {
            size_t r = lh * cap + t;
            double e = value_err(got->deg[r], want->deg[r]);
            if (want->score) {
                double es = value_err(got->score[r], want->score[r]);
                e = es > e ? es : e;
            }
            for (size_t i = 0; i < d; i++) {
                double ek = value_err(got->k[r * d + i], want->k[r * d + i]);
                double ev = value_err(got->v[r * d + i], want->v[r * d + i]);
                e = ek > e ? ek : e;
                e = ev > e ? ev : e;
            }
            if (e > v->max_err)
                v->max_err = e;
        }
    }
    if (v->max_err > TOL_VALUE)
        fail_with(v, "values differ beyond tolerance");
}

/* kept, joined, own: the trace's counts; cen_lists: the lists whose
 * centroids were compared (negative: no comparison asked). Printed where
 * one is asked or a count is not 0. */
static void print_row(const char *src, const char *desc, int32_t budget, size_t lists,
                      const verdict *v, double g_ms, double c_ms, int64_t kept, int64_t joined,
                      int64_t own, int64_t cen_lists)
{
    char k[120] = "";
    if (kept || own || cen_lists >= 0)
        snprintf(k, sizeof k, " (kept %lld, joined %lld, own %lld, centroids %s%lld lists)",
                 (long long)kept, (long long)joined, (long long)own,
                 cen_lists >= 0 ? "of " : "not compared: ",
                 (long long)(cen_lists > 0 ? cen_lists : 0));
    printf("%-4s %-12s %-58s %6d %5zu %7lld %4d/%-4d %9.2e %9.2f %9.2f  %s%s%s%s\n",
           ckv_kv_dtype_name(kv_dtype), src, desc, budget, lists, (long long)v->slots_differ,
           v->lists_differ, v->lists_near, v->max_err, g_ms, c_ms, v->fail ? "FAIL" : "ok", k,
           v->fail ? ": " : "", v->fail ? v->why : "");
    runs++;
    near_ties += v->lists_near;
    if (v->fail)
        failures++;
}

/* The own pass's rows (the trace's flags) against exact distances:
 * kernels/cuda_kmeans.cu gives middle row m its own centroid only where m
 * starts one (m = ((2j + 1) M) / (2k), policies.md) and no other centroid
 * lies within w = 3/64 of it, the features being the keys over their
 * norms. Here in double, from the keys before the compression (keys), with
 * w less 1e-6 of itself for the roundings; false with why where a flag
 * breaks either rule. */
static bool own_rows_sound(const ckv_cache *keys, const ckv_policy *p, int32_t budget,
                           const uint8_t *flags, char *why, size_t n)
{
    const int32_t sinks = (int32_t)ckv_policy_param(p, "sinks", 0);
    const int32_t recent = (int32_t)ckv_policy_param(p, "recent", 0);
    const int32_t k = budget - sinks - recent, d = keys->head_dim, cap = keys->capacity;
    const double w2 = 0x9p-12 * (1 - 1e-6) * (1 - 1e-6);
    double *cf = xmalloc((size_t)(k > 0 ? k : 1) * d * sizeof *cf);
    int32_t *row = xmalloc((size_t)(k > 0 ? k : 1) * sizeof *row);
    uint8_t *starts = xmalloc((size_t)cap);
    bool ok = true;
    for (size_t lh = 0; ok && lh < lists_of(keys); lh++) {
        const int32_t T = keys->len[lh], M = T - sinks - recent;
        const bool act = T > budget && k > 0 && k < M;
        const uint8_t *fl = flags + lh * (size_t)cap;
        memset(starts, 0, (size_t)cap);
        for (int32_t j = 0; act && j < k; j++) {
            row[j] = (int32_t)(((2 * (int64_t)j + 1) * M) / (2 * (int64_t)k));
            starts[row[j]] = 1;
            const float *x = keys->k + ((size_t)lh * cap + sinks + row[j]) * d;
            double nn = 0;
            for (int32_t i = 0; i < d; i++)
                nn += (double)x[i] * x[i];
            nn = sqrt(nn);
            for (int32_t i = 0; i < d; i++)
                cf[(size_t)j * d + i] = nn > 0 ? x[i] / nn : 0;
        }
        for (int32_t m = 0; ok && m < cap; m++)
            if (fl[m] && !starts[m]) {
                snprintf(why, n,
                         "list %zu: own-pass flag at middle row %d, which starts no centroid", lh,
                         m);
                ok = false;
            }
        for (int32_t j = 0; ok && act && j < k; j++) {
            if (!fl[row[j]])
                continue;
            const double *a = cf + (size_t)j * d;
            for (int32_t o = 0; ok && o < k; o++) {
                if (o == j)
                    continue;
                const double *b = cf + (size_t)o * d;
                double s2 = 0;
                for (int32_t i = 0; i < d && s2 <= w2; i++)
                    s2 += (a[i] - b[i]) * (a[i] - b[i]);
                if (s2 <= w2) {
                    snprintf(why, n,
                             "list %zu: the own pass gave middle row %d centroid %d, but centroid "
                             "%d lies %.3g from it (under 3/64)",
                             lh, row[j], j, o, sqrt(s2));
                    ok = false;
                }
            }
        }
    }
    free(cf);
    free(row);
    free(starts);
    return ok;
}

/* K-Means's final centroids, the GPU's (trace) against the CPU's
 * (ckv_kmeans_compress), bit for bit, on every list the CPU compressed
 * (len, its length before) whose GPU margin is at least NEAR_TIE: then
 * every assignment of the call is decisive on both sides, so the clusters
 * agree at every iteration and the means are the same doubles by the
 * kernels' order (the CPU's). The lists compared; false with why at the
 * first centroid that differs. */
static int64_t centroids_agree(const int32_t *len, size_t lists, int32_t budget, int32_t sinks,
                               int32_t recent, int32_t d, const double *gpu, const double *cpu,
                               const float *margin, bool *ok, char *why, size_t n)
{
    const int32_t k = budget - sinks - recent;
    int64_t compared = 0;
    *ok = true;
    for (size_t lh = 0; *ok && lh < lists; lh++) {
        if (!(len[lh] > budget && k < len[lh] - sinks - recent) || !(margin[lh] >= NEAR_TIE))
            continue;
        compared++;
        const size_t at = lh * (size_t)k * d;
        for (int32_t j = 0; *ok && j < k; j++) {
            const double *g = gpu + at + (size_t)j * d, *c = cpu + at + (size_t)j * d;
            if (!memcmp(g, c, (size_t)d * sizeof *g))
                continue;
            int32_t i = 0;
            while (i < d && !memcmp(g + i, c + i, sizeof *g))
                i++;
            snprintf(why, n, "list %zu centroid %d dimension %d: gpu %.17g, cpu %.17g", lh, j, i,
                     g[i], c[i]);
            *ok = false;
        }
    }
    return compared;
}

/* The set flags among n bytes. */
static int64_t flag_count(const uint8_t *flags, size_t n)
{
    int64_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += flags[i] != 0;
    return count;
}

/* One compression on both sides of caches holding the same entries; cpu and
 * back are host caches of the source's capacity (back receives the GPU
 * result); a_cpu/a_gpu are the assign maps, advanced by this compression.
 * want_kept: the run must keep rows by K-Means's moved-centroid bound
 * (the trace's count), so that its pass after an update is shown to run;
 * want_own likewise rows its own pass assigns at the first assignment;
 * strict: no list may differ, near-ties included. */
static void step(source *s, const ckv_policy *p, const char *desc, int32_t budget, ckv_cache *cpu,
                 ckv_cache *back, int32_t *a_cpu, int32_t *a_gpu, bool want_kept, bool want_own,
                 bool strict)
{
    const ckv_cache *c = &s->c;
    size_t lists = lists_of(c);
    ckv_qwindow qw = {s->q, s->n_head, s->w};
    const ckv_qwindow *qwp = s->q ? &qw : NULL;
    float *margin = xmalloc(lists * sizeof *margin);
    /* The own pass's rows, checked against the keys before the compression. */
    uint8_t *own_rows = want_own ? xmalloc(lists * (size_t)c->capacity) : NULL;
    ckv_cache before;
    if (want_own)
        CHECK(ckv_cache_fork(&before, cpu, cpu->capacity, err));
    /* K-Means with updates: both sides' final centroids, NaN where not
     * written, and the lengths they were compressed from. */
    const bool cen = !strcmp(p->ops->name, "kmeans") && ckv_policy_param(p, "iters", 0) > 0;
    const int32_t sinks = (int32_t)ckv_policy_param(p, "sinks", 0);
    const int32_t recent = (int32_t)ckv_policy_param(p, "recent", 0);
    const size_t cen_n = cen ? lists * (size_t)(budget - sinks - recent) * c->head_dim : 0;
    double *cen_cpu = NULL, *cen_gpu = NULL;
    int32_t *len = NULL;
    if (cen && budget > sinks + recent) {
        cen_cpu = xmalloc(cen_n * sizeof *cen_cpu);
        cen_gpu = xmalloc(cen_n * sizeof *cen_gpu);
        for (size_t i = 0; i < cen_n; i++)
            cen_cpu[i] = cen_gpu[i] = NAN;
        len = xmalloc(lists * sizeof *len);
        memcpy(len, cpu->len, lists * sizeof *len);
    }
    ckv_error ec = {0}, eg = {0};
    double c0 = cpu_ms();
    ckv_status sc = cen_cpu ? ckv_kmeans_compress(p, cpu, budget, a_cpu, cen_cpu, &ec)
                            : ckv_policy_compress(p, cpu, budget, qwp, a_cpu, &ec);
    double c_ms = cpu_ms() - c0;
    int64_t kept = 0, own = 0, joined = 0, cen_lists = -1;
    bool lazy = false;
    ckv_gpu_policy_trace tr = {.assign = a_gpu,
                               .margin = margin,
                               .kept = &kept,
                               .own = &own,
                               .own_rows = own_rows,
                               .centroids = cen_gpu,
                               .joined = &joined,
                               .poison_lazy = poison_lazy,
                               .lazy = &lazy};
    double g0 = wall_ms();
    ckv_status sg = ckv_gpu_policy_compress(s->g, p, budget, qwp, &tr, NULL, &eg);
    double g_ms = wall_ms() - g0;
    lazy_calls += lazy;
    verdict v;
    memset(&v, 0, sizeof v);
    if (sc || sg) {
        if (sc != sg || strcmp(ec.msg, eg.msg)) {
            char why[800];
            snprintf(why, sizeof why, "status cpu %d '%.300s', gpu %d '%.300s'", sc, ec.msg, sg,
                     eg.msg);
            fail_with(&v, why);
        }
    } else {
        CHECK(ckv_gpu_cache_download(s->g, back, err));
        compare(back, cpu, a_gpu, a_cpu, margin, &v);
        if (want_kept && !kept)
            fail_with(&v, "no row kept by the moved-centroid bound: the pass over the moved "
                          "centroids did not run");
        if (joined > kept)
            fail_with(&v, "the trace's joined rows outnumber its kept rows");
        if (want_own && !own)
            fail_with(&v, "no row given its own centroid: the own pass did not run");
        char why[300];
        if (want_own && !own_rows_sound(&before, p, budget, own_rows, why, sizeof why))
            fail_with(&v, why);
        if (want_own && flag_count(own_rows, lists * (size_t)c->capacity) != own)
            fail_with(&v, "the trace's own rows do not number its count of them");
        if (strict && v.lists_differ)
            fail_with(&v, "lists differ where every tie is exact");
        if (cen_cpu) {
            bool ok;
            cen_lists = centroids_agree(len, lists, budget, sinks, recent, c->head_dim, cen_gpu,
                                        cen_cpu, margin, &ok, why, sizeof why);
            centroid_lists += cen_lists;
            if (!ok)
                fail_with(&v, why);
        }
    }
    print_row(s->name, desc, budget, lists, &v, g_ms, c_ms, kept, joined, own, cen_lists);
    free(margin);
    free(cen_cpu);
    free(cen_gpu);
    free(len);
    if (want_own) {
        free(own_rows);
        ckv_cache_free(&before);
    }
}

/* The last is a decode-time compression's shape: the cache a few dozen
 * entries over the budget (K-Means's assignments after its first then
 * take the pass over the moved centroids, cuda_kmeans.cu). Every source
 * runs 25% and 95%; all_budgets, every budget. */
static const int64_t budgets_ppm[] = {125000, 250000, 500000, 950000};

static void run_case(source *s, const pcase *pc, int64_t ppm)
{
    ckv_policy p;
    char desc[160];
    make_policy(&p, pc, desc, sizeof desc);
    const ckv_cache *c = &s->c;
    int32_t budget = (int32_t)((ppm * ckv_cache_max_len(c) + 999999) / 1000000);
    if (budget <= p.ops->protected_count(&p)) {
        printf("%-4s %-12s %-58s %6d  skipped: budget does not exceed the %d protected entries\n",
               ckv_kv_dtype_name(kv_dtype), s->name, desc, budget, p.ops->protected_count(&p));
        return;
    }
    size_t n = lists_of(c) * (size_t)c->capacity;
    ckv_cache cpu, back;
    CHECK(ckv_cache_fork(&cpu, c, c->capacity, err));
    CHECK(ckv_cache_fork(&back, c, c->capacity, err));
    int32_t *a_cpu = xmalloc(n * sizeof *a_cpu), *a_gpu = xmalloc(n * sizeof *a_gpu);
    ckv_policy_assign_identity(c, a_cpu);
    ckv_policy_assign_identity(c, a_gpu);
    CHECK(ckv_gpu_cache_poison(s->g, err));
    CHECK(ckv_gpu_cache_upload(s->g, c, err));
    if (pc->prime) {
        ckv_policy primer = p;
        ckv_qwindow qw = {s->q, s->n_head, s->w};
        CHECK(ckv_policy_set(&primer, pc->prime, err));
        CHECK(ckv_gpu_policy_compress(s->g, &primer, budget, s->q ? &qw : NULL, NULL, NULL, err));
        CHECK(ckv_gpu_cache_upload(s->g, c, err));
        snprintf(desc + strlen(desc), sizeof desc - strlen(desc), " (after %s)", pc->prime);
    }
    /* K-Means at a head_dim with the estimate: its own pass must assign
     * rows (every source has centroids far from the others); at a
     * decode-time call's shape with an update before the last assignment
     * most rows keep their centroid; strict where the source asks and the
     * first assignment is the last. */
    const bool estimate =
        !strcmp(pc->policy, "kmeans") && (c->head_dim == 64 || c->head_dim == 128);
    const bool want_kept =
        estimate && ppm == budgets_ppm[3] && ckv_policy_param(&p, "iters", 0) > 0;
    const bool strict = s->strict && estimate && ckv_policy_param(&p, "iters", 0) == 0;
    step(s, &p, desc, budget, &cpu, &back, a_cpu, a_gpu, want_kept, estimate, strict);
    if (pc->chain && budget / 2 > p.ops->protected_count(&p)) {
        char chained[200];
        snprintf(chained, sizeof chained, "%s, again", desc);
        /* Each side continues from its own result: the maps compose. */
        step(s, &p, chained, budget / 2, &cpu, &back, a_cpu, a_gpu, false, false, false);
    }
    ckv_cache_free(&cpu);
    ckv_cache_free(&back);
    free(a_cpu);
    free(a_gpu);
}

/* A bf16 run's host cache: every stored key and value rounded to bf16, as
 * a bf16 cache would have stored them. */
/* The source's host cache in the run's type, and its GPU cache. */
static void source_gpu(source *s)
{
    ckv_cache_set_dtype(&s->c, kv_dtype);
    CHECK(ckv_gpu_cache_create_shape(&s->g, s->c.n_layer, s->c.n_head_kv, s->c.head_dim,
                                     s->c.capacity, s->c.score != NULL, kv_dtype, err));
}

static void source_free(source *s)
{
    ckv_gpu_cache_free(s->g);
    ckv_cache_free(&s->c);
    free(s->q);
}

enum { SYN_LAYERS = 4, SYN_KV = 3, SYN_HEADS = 9, SYN_D = 64, SYN_W = 48 };
static int32_t syn_t = 1400; /* tokens of the synthetic caches (--quick: 480) */

/* A synthetic host cache of SYN_LAYERS layers with `heads` query heads
 * over kv KV heads of head_dim d, without its GPU cache. */
static void synthetic_host(source *s, const char *name, int32_t kv, int32_t heads, int32_t d,
                           uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->name = name;
    CHECK(ckv_synthetic_kv(&s->c, &s->q, SYN_LAYERS, kv, heads, d, syn_t, SYN_W, seed, err));
    s->n_head = heads;
    s->w = SYN_W;
}

/* synthetic_host and its GPU cache; ragged: list lh keeps syn_t - (syn_t /
 * 23) (lh % 12) entries (the test shape's 12 lists: each its own length). */
static void synthetic(source *s, const char *name, bool ragged, int32_t kv, int32_t heads,
                      int32_t d, uint64_t seed)
{
    synthetic_host(s, name, kv, heads, d, seed);
    if (ragged)
        for (size_t lh = 0; lh < lists_of(&s->c); lh++)
            s->c.len[lh] = syn_t - syn_t / 23 * (int32_t)(lh % 12);
    source_gpu(s);
}

/* Keys that put centroids near each other (K-Means's own pass,
 * kernels/cuda_kmeans.cu, must leave their rows to the estimate): in every
 * 16 slots of a list, slots 9 to 15 equal slot 8 (exact ties, which both
 * sides break to the lowest centroid) and slot 3 is slot 2 with its first
 * coordinate moved by 1e-3 of its norm (a centroid inside the pass's
 * distance; their cosines about 5e-7 apart, a near-tie, which a strict
 * run does not excuse); slots 40 to 47 are zero. Strict (source.strict).
 * Equal and near keys catch a pass that misses a near centroid; a bound
 * too loose by a little (KM_OWN_S2, E) would change no decision here:
 * scripts/kmeans-cone-count --own's check holds the bound's model to exact
 * distances. */
static void duplicated(source *s, const char *name, int32_t heads, int32_t d_head, uint64_t seed)
{
    synthetic_host(s, name, SYN_KV, heads, d_head, seed);
    s->strict = true;
    ckv_cache *c = &s->c;
    const size_t d = (size_t)c->head_dim;
    for (int32_t l = 0; l < c->n_layer; l++)
        for (int32_t h = 0; h < c->n_head_kv; h++)
            for (int32_t t = 0; t < syn_t; t++) {
                float *k = ckv_cache_key(c, l, h, t);
                if (t % 16 > 8)
                    memcpy(k, ckv_cache_key(c, l, h, t - t % 16 + 8), d * sizeof *k);
                if (t % 16 == 3) {
                    const float *b = ckv_cache_key(c, l, h, t - 1);
                    double n = 0;
                    for (size_t i = 0; i < d; i++)
                        n += (double)b[i] * b[i];
                    memcpy(k, b, d * sizeof *k);
                    k[0] += (float)(1e-3 * sqrt(n));
                }
                if (t == 40)
                    memset(k, 0, d * sizeof *k);
            }
    source_gpu(s); /* the run's type rounds the keys above too */
}

/* A cache compressed once by the CPU centroid policy (degrees > 1, round
 * > 0), then grown by fresh entries (120 at 1400 tokens) per list, as
 * decode would. */
static void compressed_once(source *s)
{
    memset(s, 0, sizeof *s);
    s->name = "synth-deg";
    ckv_cache full;
    CHECK(ckv_synthetic_kv(&full, &s->q, SYN_LAYERS, SYN_KV, SYN_HEADS, SYN_D, syn_t, SYN_W, 99,
                           err));
    ckv_cache_set_dtype(&full, kv_dtype); /* the CPU compression below then stores as the run's type */
    s->n_head = SYN_HEADS;
    s->w = SYN_W;
    size_t lists = lists_of(&full), d = SYN_D;
    int32_t *cut = xmalloc(lists * sizeof *cut);
    for (size_t lh = 0; lh < lists; lh++)
        cut[lh] = full.len[lh] = syn_t * 11 / 14 - syn_t / 48 * (int32_t)lh;
    CHECK(ckv_cache_fork(&s->c, &full, syn_t, err));
    ckv_policy p;
    CHECK(ckv_policy_init(&p, "centroid", err));
    CHECK(ckv_policy_compress(&p, &s->c, syn_t * 33 / 70, NULL, NULL, err));
    const int32_t grow = syn_t * 3 / 35;
    for (size_t lh = 0; lh < lists; lh++) {
        for (int32_t j = 0; j < grow; j++) {
            size_t from = lh * syn_t + (size_t)cut[lh] + j, to = lh * syn_t + (size_t)s->c.len[lh];
            memcpy(s->c.k + to * d, full.k + from * d, d * sizeof(float));
            memcpy(s->c.v + to * d, full.v + from * d, d * sizeof(float));
            s->c.deg[to] = 1;
            s->c.score[to] = full.score[from];
            s->c.len[lh]++;
        }
    }
    s->c.n_pos = cut[0] + grow;
    free(cut);
    ckv_cache_free(&full);
    source_gpu(s);
}

static bool dump_source(source *s, const char *name, const char *path)
{
    memset(s, 0, sizeof *s);
    ckv_kvdump d;
    ckv_error err = {0};
    if (ckv_kvfile_read(path, &d, &err)) {
        fprintf(stderr, "policy_parity: %s\n", err.msg);
        return false;
    }
    s->name = name;
    s->c = d.cache;
    s->q = d.q_window;
    s->n_head = d.n_head;
    s->w = d.w;
    free(d.model);
    free(d.prompt);
    source_gpu(s);
    return true;
}

/* The cases of policy `only` (NULL: every policy) over the source. */
static void run_source(source *s, bool all_budgets, const char *only)
{
    for (int i = 0; i < N_CASES; i++) {
        const pcase *pc = &cases[i];
        if (only && strcmp(pc->policy, only))
            continue;
        bool needs_q = !strcmp(pc->policy, "snapkv"), needs_score = !strcmp(pc->policy, "h2o");
        if ((needs_q && !s->q) || (needs_score && !s->c.score)) {
            printf("%-12s %-58s  skipped: the source has no %s\n", s->name, pc->policy,
                   needs_q ? "window queries" : "attention scores");
            continue;
        }
        for (size_t b = 0; b < sizeof budgets_ppm / sizeof budgets_ppm[0]; b++)
            if (all_budgets || b == 1 || b == 3)
                run_case(s, pc, budgets_ppm[b]);
    }
}

/* s's K-Means runs with the lazy features forced (ckv_cuda_set_km_lazy
 * ON: the rule leaves some of these small shapes' calls eager) and
 * poisoned, so that a row a reader takes before it was formed shows as a
 * mismatch; the source fails if no call took the lazy form (a test of the
 * eager form under this name). The caller's mode is restored. */
static void run_lazy(source *s)
{
    const ckv_km_lazy was = ckv_cuda_km_lazy();
    ckv_cuda_set_km_lazy(CKV_KM_LAZY_ON);
    poison_lazy = true;
    lazy_calls = 0;
    run_source(s, true, "kmeans");
    poison_lazy = false;
    ckv_cuda_set_km_lazy(was);
    if (!lazy_calls) {
        printf("%-4s %-12s FAIL: no K-Means call took the lazy features\n",
               ckv_kv_dtype_name(kv_dtype), s->name);
        runs++;
        failures++;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* GPU time per policy at long contexts (SmolLM2-135M's cache shape). */
static void bench(int repeats, int first, int last)
{
    static const char *const policies[] = {"centroid", "kmeans", "streaming", "h2o", "snapkv"};
    static const int32_t tokens[] = {8192, 16384, 32768};
    printf("%-4s %-10s %7s %7s %12s %12s\n", "kv", "policy", "tokens", "budget", "GPU ms med",
           "GPU ms min");
    for (size_t ti = 0; ti < 2 * sizeof tokens / sizeof tokens[0]; ti++) {
        kv_dtype = ti % 2 ? CKV_KV_BF16 : CKV_KV_F32;
        if ((int)kv_dtype < first || (int)kv_dtype > last)
            continue;
        source s;
        memset(&s, 0, sizeof s);
        s.name = "bench";
        CHECK(ckv_synthetic_kv(&s.c, &s.q, 30, 3, 9, 64, tokens[ti / 2], 32, 7, err));
        s.n_head = 9;
        s.w = 32;
        source_gpu(&s);
        int32_t budget = tokens[ti / 2] / 4;
        ckv_qwindow qw = {s.q, s.n_head, s.w};
        for (size_t pi = 0; pi < sizeof policies / sizeof policies[0]; pi++) {
            ckv_policy p;
            CHECK(ckv_policy_init(&p, policies[pi], err));
            double *ms = xmalloc((size_t)repeats * sizeof *ms);
            for (int r = -1; r < repeats; r++) { /* r = -1: untimed warm-up */
                CHECK(ckv_gpu_cache_upload(s.g, &s.c, err));
                double t0 = wall_ms();
                CHECK(ckv_gpu_policy_compress(s.g, &p, budget, &qw, NULL, NULL, err));
                if (r >= 0)
                    ms[r] = wall_ms() - t0;
            }
            qsort(ms, (size_t)repeats, sizeof *ms, cmp_double);
            printf("%-4s %-10s %7d %7d %12.2f %12.2f\n", ckv_kv_dtype_name(kv_dtype),
                   policies[pi], tokens[ti / 2], budget, ms[repeats / 2], ms[0]);
            fflush(stdout);
            free(ms);
        }
        source_free(&s);
    }
}

/* CentroidKV's order (src/policies/list.h), written out here from its
 * definition, not called, so that the check does not rest on the code it
 * checks: a dot product adds, for each 32 dimensions from q and each place
 * k = 0 .. 7 of an octet, the products at q + k, q + 8 + k, q + 16 + k,
 * q + 24 + k (those under d); a norm sums the squares of each octet
 * t = (i mod 32) / 8 in index order, then (p_0 + p_1) + (p_2 + p_3). */
static double csm_dot(const float *a, const float *b, int32_t d)
{
    double s = 0;
    for (int32_t q = 0; q < d; q += 32)
        for (int32_t k = 0; k < 8; k++)
            for (int32_t t = 0; t < 4; t++)
                if (q + 8 * t + k < d)
                    s += (double)a[q + 8 * t + k] * b[q + 8 * t + k];
    return s;
}

static double csm_norm(const float *a, int32_t d)
{
    double p[4] = {0, 0, 0, 0};
    for (int32_t q = 0; q < d; q += 32)
        for (int32_t t = 0; t < 4; t++)
            for (int32_t k = 0; k < 8 && q + 8 * t + k < d; k++)
                p[t] += (double)a[q + 8 * t + k] * a[q + 8 * t + k];
    return sqrt((p[0] + p[1]) + (p[2] + p[3]));
}

/* CentroidKV's cosines bit for bit: the GPU walk (ckv_gpu_csm_best) against
 * policies.md's definition computed here, in the order of additions that
 * src/policies/list.h defines (policies.md names only the cosine), one list
 * of T keys (sinks 3, recent 5; each partition, the random one's sides drawn
 * here and handed to the walk as the partition kernel would): a cosine is the
 * double sum of the products in csm_dot's order times the reciprocal (1 /
 * norm, rounded once) of the first key's norm, then of the second's (each
 * norm as csm_norm sums its squares), 0 where a norm is below 1e-30, and the
 * best destination the first in slot order with the highest cosine, its
 * gap the best cosine less the second best (the multiset's: a tie gives
 * 0). The GPU forms its sums on FP64 tensor cores (kernels/cuda_mma.cuh),
 * so this checks the order of their additions: "wide" keys spread their
 * exponents over 2^-40 .. 2^40, where a sum in another order or with one
 * rounding per four products comes out different most of the time. In
 * chunk 0 source 0 and destinations 1, 3 and 5 are one key, a three-way tie
 * at the top that spans two lanes of the kernel's quads (the lower slot
 * wins, the gap is 0); chunk 1 holds a zero destination; at chunk 100
 * chunks 2 and 3 hold ties across tiles that each fold must break by slot,
 * and chunk 4's first source a key under the zero-vector norm. */
static void check_csm_walk(int32_t d, int32_t C, bool wide, int32_t partition, uint64_t seed)
{
    const int32_t T = 700, sinks = 3, recent = 5, end = T - recent;
    float *k = xmalloc((size_t)T * d * sizeof *k);
    /* Each slot's side: alternating, sequential (the first (L + 1) / 2 of a
     * chunk of L are sources), or random: (L + 1) / 2 sources of each chunk
     * drawn here (a shuffle of this test's own), not by the policy's code. */
    uint8_t *in_a = xmalloc((size_t)T);
    memset(in_a, 0, (size_t)T);
    uint64_t pst = seed ^ 0x5eed;
    for (int32_t c0 = sinks; c0 < end; c0 += C) {
        const int32_t L = end - c0 < C ? end - c0 : C, half = (L + 1) / 2;
        for (int32_t o = 0; o < L; o++)
            in_a[c0 + o] = partition == CKV_CSM_ALTERNATING ? o % 2 == 0 : o < half;
        for (int32_t o = L - 1; partition == CKV_CSM_RANDOM && o >= 1; o--) {
            const int32_t j = (int32_t)(ckv_splitmix64(&pst) % (uint64_t)(o + 1));
            const uint8_t t = in_a[c0 + o];
            in_a[c0 + o] = in_a[c0 + j];
            in_a[c0 + j] = t;
        }
    }
    double *key = xmalloc((size_t)T * sizeof *key);
    int32_t *ival = xmalloc((size_t)T * sizeof *ival), *partner = xmalloc((size_t)T * sizeof *partner);
    double *gap = xmalloc((size_t)T * sizeof *gap);
    uint64_t st = seed;
    for (size_t i = 0; i < (size_t)T * d; i++) {
        const uint64_t u = ckv_splitmix64(&st);
        const float m = 1.0f + (float)(u >> 8 & 0x7f) / 128.0f;
        const float x = wide ? ldexpf(m, (int)(u % 81) - 40) : 2.0f * m - 3.0f;
        k[i] = u >> 20 & 1 ? -x : x;
    }
    if (C >= 6 && end - sinks >= 2 * C) {
        for (int32_t o = 1; o <= 5; o += 2)
            memcpy(k + (size_t)(sinks + o) * d, k + (size_t)sinks * d, (size_t)d * sizeof *k);
        memset(k + (size_t)(sinks + C + 1) * d, 0, (size_t)d * sizeof *k);
    }
    /* Ties the quad's folds must break by slot: source 0 of chunk 2 copied
     * to destinations 9 (rank 4, lane 2 of tile 0) and 33 (rank 16, lane 0
     * of tile 1), so that lane 0 holds the later slot when the fold over
     * lanes two apart meets lane 2's; in chunk 3 the same at 5 (lane 1) and
     * 35 (lane 0 of tile 1) for the fold over neighbours. */
    if (C >= 36 && end - sinks >= 4 * C)
        for (int32_t c = 2; c <= 3; c++) {
            const int32_t c0 = sinks + c * C, near = c == 2 ? 9 : 5, far = c == 2 ? 33 : 35;
            memcpy(k + (size_t)(c0 + near) * d, k + (size_t)c0 * d, (size_t)d * sizeof *k);
            memcpy(k + (size_t)(c0 + far) * d, k + (size_t)c0 * d, (size_t)d * sizeof *k);
        }
    /* A source under the zero-vector norm whose dot product with its first
     * destination is negative (chunk 4's first pair): its cosines must be
     * +0, where the product by a reciprocal of 0 alone would give -0. */
    if (end - sinks >= 5 * C) {
        const size_t a = (size_t)(sinks + 4 * C) * d, b = a + (size_t)d;
        for (int32_t i = 0; i < d; i++)
            k[a + i] = k[b + i] < 0 ? ldexpf(1.0f, -110) : -ldexpf(1.0f, -110);
    }
    if (kv_dtype == CKV_KV_BF16)
        for (size_t i = 0; i < (size_t)T * d; i++)
            k[i] = ckv_bf16_to_f32(ckv_f32_to_bf16(k[i]));
    CHECK(ckv_gpu_csm_best(k, kv_dtype, T, d, sinks, recent, C, partition,
                           partition == CKV_CSM_RANDOM ? in_a : NULL, key, ival, partner, gap,
                           err));
    int64_t checked = 0, differ = 0;
    for (int32_t c0 = sinks, chunk = 0; c0 < end; c0 += C, chunk++) {
        const int32_t L = end - c0 < C ? end - c0 : C;
        for (int32_t oa = 0, rank = 0; oa < L; oa++) {
            if (!in_a[c0 + oa])
                continue;
            const int32_t a = c0 + oa;
            const float *ka = k + (size_t)a * d;
            int32_t best = -1;
            double bs = 0, second = -INFINITY;
            const double na = csm_norm(ka, d), ra = na >= 1e-30 ? 1.0 / na : 0.0;
            for (int32_t ob = 0; ob < L; ob++) {
                if (in_a[c0 + ob])
                    continue;
                const float *kb = k + (size_t)(c0 + ob) * d;
                const double nb = csm_norm(kb, d), rb = nb >= 1e-30 ? 1.0 / nb : 0.0;
                const double dot = csm_dot(ka, kb, d);
                double sim = 0;
                if (ra != 0 && rb != 0)
                    sim = dot * ra * rb;
                if (best < 0 || sim > bs) {
                    if (best >= 0)
                        second = bs;
                    best = c0 + ob;
                    bs = sim;
                } else if (sim > second) {
                    second = sim;
                }
            }
            const size_t ci = (size_t)sinks + (size_t)chunk * ((C + 1) / 2) + rank++;
            const double want = best >= 0 ? bs : -INFINITY, want_gap = bs - second;
            checked++;
            differ += ival[ci] != a || memcmp(&key[ci], &want, sizeof want) ||
                      (best >= 0 && (partner[a] != best ||
                                     memcmp(&gap[a], &want_gap, sizeof want_gap)));
        }
    }
    runs++;
    failures += differ > 0;
    static const char *const parts[] = {"alternating", "sequential", "random"};
    printf("%-4s csm walk: head_dim %3d, chunk %3d, %s keys, %-11s: %lld of %lld sources "
           "differ (cosine and gap bits, partner, slot)  %s\n",
           kv_dtype == CKV_KV_BF16 ? "bf16" : "f32", d, C, wide ? "wide" : "unit",
           parts[partition], (long long)differ, (long long)checked, differ ? "FAIL" : "PASS");
    free(in_a);
    free(k);
    free(key);
    free(ival);
    free(partner);
    free(gap);
}

/* km_own_row, the middle row that starts K-Means centroid j, against
 * policies.md's integers, ((2j + 1) M) / (2k): every j for k up to 300 and
 * M from k to k + 294 by 7, every j at SmolLM2's decode-time and prefill
 * shapes (the GPU forms it from a double reciprocal, corrected in
 * integers), and random triples up to 2^31; and km_own_walk, which the
 * wgmma estimate steps from tile to tile, at each triple after up to 8
 * steps. */
static void check_own_rows(void)
{
    enum { RANDOM = 1 << 22 };
    static const int32_t shapes[][2] = {{8124, 8188},     {32700, 32764},  {32700, 131004},
                                        {98236, 131004},  {1000000, 2000003},
                                        {46340, 2147483000}, {2147483000, 2147483600}};
    const int64_t cap = RANDOM + 4000000; /* the loops' 2.6M triples, then random ones */
    int64_t n = 0;
    int32_t *jmk = xmalloc((size_t)cap * 3 * sizeof *jmk);
#define OWN_ADD(J, M_, K)                                                     \
    do {                                                                      \
        jmk[3 * n] = (J), jmk[3 * n + 1] = (M_), jmk[3 * n + 2] = (K);         \
        n++;                                                                  \
    } while (0)
    for (int32_t k = 1; k <= 300; k++)
        for (int32_t M = k; M <= k + 294; M += 7)
            for (int32_t j = 0; j < k; j++)
                OWN_ADD(j, M, k);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int32_t j = 0; j < shapes[s][0] && j < 200000; j++)
            OWN_ADD(j, shapes[s][1], shapes[s][0]);
    uint64_t st = 20261204;
    while (n < cap - 1) {
        const int32_t M = 1 + (int32_t)(ckv_splitmix64(&st) % 2147483600u);
        const int32_t k = 1 + (int32_t)(ckv_splitmix64(&st) % (uint64_t)M);
        OWN_ADD((int32_t)(ckv_splitmix64(&st) % (uint64_t)k), M, k);
    }
#undef OWN_ADD
    int32_t *row = xmalloc((size_t)n * sizeof *row), *walk = xmalloc((size_t)n * sizeof *walk);
    CHECK(ckv_gpu_kmeans_own_rows(jmk, n, row, walk, err));
    int64_t differ = 0, at = -1;
    for (int64_t i = 0; i < n; i++) {
        const int64_t want =
            ((2 * (int64_t)jmk[3 * i] + 1) * jmk[3 * i + 1]) / (2 * (int64_t)jmk[3 * i + 2]);
        if (row[i] != want || walk[i] != want) {
            if (at < 0)
                at = i;
            differ++;
        }
    }
    runs++;
    failures += differ > 0;
    printf("kmeans own rows: %lld of %lld differ from ((2j + 1) M) / (2k) (direct or walked)  "
           "%s\n",
           (long long)differ, (long long)n, differ ? "FAIL" : "PASS");
    if (at >= 0)
        printf("  first: j %d, M %d, k %d: %d direct, %d walked on the GPU\n", jmk[3 * at],
               jmk[3 * at + 1], jmk[3 * at + 2], row[at], walk[at]);
    free(jmk);
    free(row);
    free(walk);
}

/* K-Means's assignment bit for bit (ckv_gpu_kmeans_assign): policies.md's
 * cosine (the dot product over the two norms, 0 where a norm is below
 * 1e-30; a feature goes to the first centroid with the highest cosine) with
 * each dot product formed as the kernel promises, a chain of fused
 * multiply-adds in dimension order (kernels/cuda_kmeans.cu), which fma()
 * computes here. "unit" values carry 20 bits, so every sum is exact in any
 * order: they check the indexing, ties and zero rows; "wide" values spread
 * their exponents over 2^-40 .. 2^40 and "full" ones carry 52 bits, where
 * another order or separate roundings change most sums. In "unit" and
 * "wide" centroids 5, 37 and 100 are one vector (a tie across the kernel's
 * lanes, warps and tiles), features 0-9 and 200-209 equal it (the kernel's
 * block of rows 192-255 starts at the tile of centroid 100 and wraps round
 * to 5 last), centroid 70 and feature 20 are zero (cosines 0: feature 20
 * ties every centroid), so the margin is 0; "full" has no tie, so its
 * margin checks the second best; "range" is "full" with centroid 3 scaled
 * by 2^60; "walk" is "full" with centroid j a step of a random walk from
 * centroid j - 1 (0.1 of a "full" value a coordinate) and feature m
 * centroid m k / M plus noise of 10^-6, clustered as the synthetic caches'
 * keys are, over 2,100 centroids (33 tiles), with a zero feature (20), a
 * zero centroid (70) and centroid 1,500 (tile 23) equal to feature 5's
 * nearest (centroid 35, tile 0): a tie whose lower index must win across
 * 22 tiles (written for a walk that skipped tiles by their cones, e23c94d,
 * reverted; any such skip must keep these). M and k leave partial tiles.
 * "near" and "tie" (8,400 centroids, 132 tiles, 50 to 140 rows) have items
 * of the exact pass over the candidate tiles (kernels/cuda_kmeans.cu,
 * KM_CAND_W) that skip most tiles: the rows and the planted centroids lie
 * in the first d / 2 coordinates, 1 plus a "full" value each; every other
 * centroid j has -j / k there and its "full" values scaled to norm sqrt(d /
 * 2) in the rest, so its cosine with any row falls with j by more than
 * 2^-10 a tile, and a walk over a slice of the tiles flags its first tile
 * and then only those with planted centroids. Row m is hub centroid 1,050 +
 * 2,100 (m % 4) plus noise of 2^-10 (clear of every other centroid), but
 * rows 7, 24, ..., 126 (m % 17 = 7, q = m / 17), the exact kernel's, lie on
 * planted centroids a = 150 + 1,031 q and b = a + 4,217 (mod k), of tiles
 * in different slices: in "near" the row is the sum of the two unit
 * vectors, b's scaled by 1 + (q + 1) 2^-20 (alternately up and down), a
 * gap of about 2^-23 (q + 1) whose second the margin checks; in "tie" b is
 * a copy of a and the row a plus noise, where the lower index must win.
 *
 * With `estimate` (head_dim 64 and 128), as the policy assigns: the bf16
 * estimate decides the rows whose best stands clear of their second
 * (kernels/cuda_kmeans.cu), the exact kernel the rest, and the clusters
 * must still be these; the margin must be exact where under 2^-12 and
 * between 2^-12 and the exact one above; the estimate's best cosines must
 * lie within half the 2^-13 its choices assume (KM_EPS); the exact kernel
 * must take fewer than all rows, at least the 21 tied ones of "unit" and
 * "wide", and every row of "range" (a norm outside the estimate's
 * [2^-50, 2^50]).
 *
 * The change flag (the policy skips a list's iterations after an
 * assignment that changed none of its clusters): set from clusters of -1,
 * clear when the previous clusters are the answer, set again when one row's
 * previous cluster differs: the last row whose best stands more than 2^-10
 * over its second (with the estimate, outside "range", the estimate's by
 * its bound: within 2^-13 of each cosine, it keeps a gap over 2^-11) and,
 * in "unit" and "wide", row 20 (zero norm: always the exact kernel's).
 *
 * k centroids: 150, 2,100 for "walk", and 345 for "full" features at head_dim 64 and 128
 * (six tiles of 64, the last partial, more than the 300 features: the wgmma
 * form's four stages refilled and reused, the exact kernel's walk over k >
 * M). */
enum { KM_UNIT, KM_WIDE, KM_FULL, KM_RANGE, KM_WALK, KM_NEAR, KM_TIE };
/* A finite double of random bits (exponent field below 0x7ff). */
static double random_finite(uint64_t *st)
{
    uint64_t u;
    do
        u = ckv_splitmix64(st);
    while ((u >> 52 & 0x7ff) == 0x7ff);
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static double from_bits(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ckv_ddiv against the CPU's IEEE division, bit for bit, divisors taken
 * PER quotients at a time as the feature kernel takes a row: bf16 and f32
 * numerators over the norms of such rows (the kernel's operands), edge
 * operands (signed zeros, subnormals, the words around the fast path's
 * bounds, divisors from the smallest subnormal to infinity, significands
 * of all ones), and random finite bit patterns, which reach __ddiv_rn's
 * slow path. No operand pair has a NaN quotient (its bits are the
 * machine's). */
static void check_ddiv(void)
{
    enum { PER = 64, ROWS = 1 << 18, CLASSES = 4 };
    const int64_t count = (int64_t)PER * ROWS;
    double *a = xmalloc((size_t)count * sizeof *a), *n = xmalloc(ROWS * sizeof *n);
    double *q = xmalloc((size_t)count * sizeof *q);
    static const uint64_t edge_a[] = {
        0x0000000000000000ull, 0x8000000000000000ull, 0x0000000000000001ull,
        0x800fffffffffffffull, 0x0010000000000000ull, 0x035fffffffffffffull,
        0x0360000000000000ull, 0x8360000000000001ull, 0x3ff0000000000000ull,
        0x3fffffffffffffffull, 0x7fefffffffffffffull, 0xffefffffffffffffull,
        0x7ff0000000000000ull, 0x3690000000000000ull, 0x4340000000000000ull};
    static const uint64_t edge_n[] = {
        0x0000000000000001ull, 0x000fffffffffffffull, 0x0010000000000000ull,
        0x0010000000000001ull, 0x39b4484bfeebc2a0ull, 0x3ff0000000000000ull,
        0x3fffffffffffffffull, 0x3fefffffffffffffull, 0x4000000000000000ull,
        0x7fd0000000000000ull, 0x7fdfffffffffffffull, 0x7fefffffffffffffull,
        0x7ff0000000000000ull, 0xbff0000000000000ull, 0x8010000000000000ull,
        0x3cb0000000000000ull};
    const int n_ea = (int)(sizeof edge_a / sizeof *edge_a),
              n_en = (int)(sizeof edge_n / sizeof *edge_n);
    uint64_t st = 20261203;
    for (int64_t r = 0; r < ROWS; r++) {
        double *ar = a + r * PER;
        const int cls = (int)(r % CLASSES);
        if (cls < 2) {
            /* A key row in bf16 (cls 0) or f32, and its norm. */
            double s = 0;
            for (int i = 0; i < PER; i++) {
                const uint64_t u = ckv_splitmix64(&st);
                float x;
                if (cls == 0) {
                    uint16_t h = (uint16_t)u;
                    if ((h & 0x7f80) == 0x7f80)
                        h &= 0xbfff; /* finite */
                    x = ckv_bf16_to_f32(h);
                } else {
                    uint32_t w = (uint32_t)u;
                    if ((w & 0x7f800000u) == 0x7f800000u)
                        w &= 0xbfffffffu;
                    memcpy(&x, &w, sizeof x);
                }
                if (u >> 40 & 1) /* half the rows of moderate size, as keys are */
                    x = ldexpf(1.0f + (float)(u >> 41 & 0xffff) / 65536.0f, (int)(u >> 57) - 64) *
                        (u >> 32 & 1 ? -1.0f : 1.0f);
                if (cls == 0)
                    x = ckv_bf16_to_f32(ckv_f32_to_bf16(x));
                ar[i] = x;
                s += ar[i] * ar[i];
            }
            n[r] = sqrt(s);
            if (!(n[r] > 0 && n[r] < INFINITY))
                n[r] = 1.0 + (double)(r % 977) / 977.0;
        } else if (cls == 2) {
            const uint64_t u = ckv_splitmix64(&st);
            n[r] = u % 3 ? from_bits(edge_n[u % n_en]) : fabs(random_finite(&st)) + DBL_MIN;
            if (u >> 8 & 1) /* a neighbour of the edge */
                n[r] = nextafter(n[r], u >> 9 & 1 ? INFINITY : 0.0);
            if (n[r] == 0) /* the smallest subnormal's lower neighbour */
                n[r] = from_bits(edge_n[0]);
            for (int i = 0; i < PER; i++) {
                const uint64_t v = ckv_splitmix64(&st);
                ar[i] = v % 2 ? from_bits(edge_a[v % n_ea]) : random_finite(&st);
                if (isinf(ar[i]))
                    ar[i] = DBL_MAX;
            }
        } else {
            do
                n[r] = random_finite(&st);
            while (n[r] == 0);
            for (int i = 0; i < PER; i++)
                ar[i] = random_finite(&st);
        }
    }
    CHECK(ckv_gpu_ddiv(a, n, count, PER, q, err));
    int64_t differ = 0, at = -1;
    for (int64_t i = 0; i < count; i++) {
        const double want = a[i] / n[i / PER];
        if (memcmp(&q[i], &want, sizeof want)) {
            if (at < 0)
                at = i;
            differ++;
        }
    }
    runs++;
    failures += differ > 0;
    printf("ddiv: %lld of %lld quotients differ from the CPU's IEEE division (bits)  %s\n",
           (long long)differ, (long long)count, differ ? "FAIL" : "PASS");
    if (at >= 0)
        printf("  first: %a / %a = %a on the GPU, %a on the CPU\n", a[at], n[at / PER], q[at],
               a[at] / n[at / PER]);
    free(a);
    free(n);
    free(q);
}

static const char *const km_mode_name[] = {"unit", "wide", "full",
                                           "range", "walk", "near", "tie"};

/* Row m's planted centroids a, b in "near" and "tie", where it has them
 * (check_kmeans_assign's comment). */
static bool km_planted(int32_t m, int32_t k, int32_t *a, int32_t *b)
{
    const int32_t q = m / 17;
    *a = 150 + 1031 * q;
    *b = (*a + 4217) % k;
    return m % 17 == 7 && q < 8;
}

/* "near" and "tie" from "full" values (check_kmeans_assign's comment). */
static void km_near_data(int32_t d, int32_t k, int32_t M, int mode, double *f, double *c)
{
    const int32_t h = d / 2;
    int32_t own[4 + 2 * 8], n_own = 0, a, b;
    for (int32_t q = 0; q < 4; q++)
        own[n_own++] = 1050 + 2100 * q;
    for (int32_t m = 0; m < M; m++)
        if (km_planted(m, k, &a, &b)) {
            own[n_own++] = a;
            own[n_own++] = b;
        }
    for (int32_t j = 0; j < k; j++) {
        bool planted = false;
        for (int32_t o = 0; o < n_own; o++)
            planted |= own[o] == j;
        double *x = c + (size_t)j * d, n = 0;
        for (int32_t i = h; i < d; i++)
            n += x[i] * x[i];
        for (int32_t i = 0; i < d; i++)
            x[i] = planted ? (i < h ? 1 + x[i] : 0) : i < h ? -(double)j / k : x[i] * sqrt(h / n);
    }
    for (int32_t m = 0; m < M; m++) {
        double *x = f + (size_t)m * d;
        const bool two = km_planted(m, k, &a, &b);
        const double *ca = c + (size_t)(two ? a : 1050 + 2100 * (m % 4)) * d;
        double *cb = c + (size_t)b * d;
        if (two && mode == KM_NEAR) {
            double na = 0, nb = 0;
            for (int32_t i = 0; i < d; i++) {
                na += ca[i] * ca[i];
                nb += cb[i] * cb[i];
            }
            const double up = 1 + (m / 17 % 2 ? -1 : 1) * ldexp(m / 17 + 1, -20);
            for (int32_t i = 0; i < d; i++)
                x[i] = ca[i] / sqrt(na) + up * cb[i] / sqrt(nb);
            continue;
        }
        if (two)
            memcpy(cb, ca, (size_t)d * sizeof *cb);
        for (int32_t i = 0; i < d; i++)
            x[i] = ca[i] + (i < h ? ldexp(x[i], -10) : 0);
    }
}

/* check_kmeans_assign's features f[M][d] and centroids c[k][d] of a mode,
 * and their norms. */
static void km_test_data(int32_t d, int32_t k, int32_t M, int mode, uint64_t seed, double *f,
                         double *c, double *fn, double *cn)
{
    uint64_t st = seed;
    for (int32_t r = 0; r < M + k; r++) {
        double *x = r < M ? f + (size_t)r * d : c + (size_t)(r - M) * d;
        for (int32_t i = 0; i < d; i++) {
            const uint64_t u = ckv_splitmix64(&st);
            const double m = mode >= KM_FULL ? 1.0 + ldexp((double)(ckv_splitmix64(&st) >> 12), -52)
                                             : 1.0 + (double)(u >> 11 & 0xfffff) / 1048576.0;
            const double v = mode == KM_WIDE ? ldexp(m, (int)(u % 81) - 40) : 2.0 * m - 3.0;
            x[i] = u >> 40 & 1 ? -v : v;
        }
    }
    if (mode == KM_RANGE)
        for (int32_t i = 0; i < d; i++)
            c[(size_t)3 * d + i] = ldexp(c[(size_t)3 * d + i], 60);
    if (mode == KM_WALK) {
        for (int32_t j = 1; j < k; j++)
            for (int32_t i = 0; i < d; i++)
                c[(size_t)j * d + i] = c[(size_t)(j - 1) * d + i] + 0.1 * c[(size_t)j * d + i];
        for (int32_t r = 0; r < M; r++)
            for (int32_t i = 0; i < d; i++)
                f[(size_t)r * d + i] =
                    c[(size_t)(r * k / M) * d + i] + 1e-6 * f[(size_t)r * d + i];
        memcpy(c + (size_t)1500 * d, c + (size_t)(5 * k / M) * d, (size_t)d * sizeof *c);
        memset(c + (size_t)70 * d, 0, (size_t)d * sizeof *c);
        memset(f + (size_t)20 * d, 0, (size_t)d * sizeof *f);
    }
    if (mode >= KM_NEAR)
        km_near_data(d, k, M, mode, f, c);
    if (mode < KM_FULL) {
        memcpy(c + (size_t)37 * d, c + (size_t)5 * d, (size_t)d * sizeof *c);
        memcpy(c + (size_t)100 * d, c + (size_t)5 * d, (size_t)d * sizeof *c);
        for (int32_t r = 0; r < 10; r++) {
            memcpy(f + (size_t)r * d, c + (size_t)5 * d, (size_t)d * sizeof *f);
            memcpy(f + (size_t)(200 + r) * d, c + (size_t)5 * d, (size_t)d * sizeof *f);
        }
        memset(c + (size_t)70 * d, 0, (size_t)d * sizeof *c);
        memset(f + (size_t)20 * d, 0, (size_t)d * sizeof *f);
    }
    for (int32_t r = 0; r < M + k; r++) {
        const double *x = r < M ? f + (size_t)r * d : c + (size_t)(r - M) * d;
        double n = 0;
        for (int32_t i = 0; i < d; i++)
            n += x[i] * x[i];
        *(r < M ? &fn[r] : &cn[r - M]) = sqrt(n);
    }
}

/* policies.md's cosine of feature f and centroid c, the dot product a chain
 * of fused multiply-adds in dimension order (as the exact kernel forms it). */
static double km_test_cos(const double *f, const double *c, double fn, double cn, int32_t d)
{
    double dot = 0;
    for (int32_t i = 0; i < d; i++)
        dot = fma(f[i], c[i], dot);
    return fn >= 1e-30 && cn >= 1e-30 ? dot / (fn * cn) : 0;
}

/* Row m's best cosine over the centroids cols[0 .. n) (NULL: 0 .. n - 1),
 * its centroid *bj (the first of a tie, as the policy takes the lowest
 * index) and the second best *second (-inf where n is 1). */
static double km_test_best(const double *f, const double *c, const double *fn, const double *cn,
                           int32_t d, int32_t m, const int32_t *cols, int32_t n, int32_t *bj,
                           double *second)
{
    double bs = -INFINITY;
    *second = -INFINITY;
    *bj = cols ? cols[0] : 0;  /* where every cosine is NaN */
    for (int32_t i = 0; i < n; i++) {
        const int32_t j = cols ? cols[i] : i;
        const double sim = km_test_cos(f + (size_t)m * d, c + (size_t)j * d, fn[m], cn[j], d);
        if (sim > bs) {
            *second = bs;
            bs = sim;
            *bj = j;
        } else if (sim > *second) {
            *second = sim;
        }
    }
    return bs;
}

/* M rows: 300, or at most 192 for the wgmma estimate's sliced form (a pass of
 * one block's rows cuts the centroids among blocks; at most 64 also splits a
 * block's tiles among its warpgroups); the "unit", "wide" and "range"
 * features tie rows 0-9 and 200-209, so they take 300. */
static void check_kmeans_assign(int32_t d, int32_t k, int32_t M, int mode, bool estimate,
                                uint64_t seed)
{
    double *f = xmalloc((size_t)M * d * sizeof *f), *c = xmalloc((size_t)k * d * sizeof *c);
    double *fn = xmalloc((size_t)M * sizeof *fn), *cn = xmalloc((size_t)k * sizeof *cn);
    double *best = xmalloc((size_t)M * sizeof *best);
    int32_t *cl = xmalloc((size_t)M * sizeof *cl), *want_cl = xmalloc((size_t)M * sizeof *cl);
    int32_t clear_row = -1;
    km_test_data(d, k, M, mode, seed, f, c, fn, cn);
    float margin = 0;
    int32_t n_exact = 0;
    bool changed = false;
    for (int32_t m = 0; m < M; m++)
        cl[m] = -1;
    CHECK(ckv_gpu_kmeans_assign(f, fn, c, cn, M, k, d, estimate, cl, best, &margin, &n_exact,
                                &changed, err));
    int64_t differ = 0;
    float want_margin = FLT_MAX;
    double est_err = 0;
    for (int32_t m = 0; m < M; m++) {
        double second;
        int32_t bj;
        const double bs = km_test_best(f, c, fn, cn, d, m, NULL, k, &bj, &second);
        const float g = (float)(bs - second);
        want_margin = g < want_margin ? g : want_margin;
        if (estimate) {
            const double e = fabs(best[m] - bs);
            est_err = e > est_err || isnan(e) ? e : est_err;
            differ += cl[m] != bj;
        } else {
            differ += cl[m] != bj || memcmp(&best[m], &bs, sizeof bs);
        }
        want_cl[m] = bj;
        if (bs - second > 0x1p-10)
            clear_row = m;
    }
    /* Again from the answer, then from it with one row's cluster moved. */
    bool flag_ok = changed && clear_row >= 0;
    const int32_t moved[2] = {clear_row, mode < KM_FULL ? 20 : -1};
    for (int i = -1; i < 2; i++) {
        if (i >= 0 && moved[i] < 0)
            continue;
        memcpy(cl, want_cl, (size_t)M * sizeof *cl);
        if (i >= 0)
            cl[moved[i]] = (want_cl[moved[i]] + 1) % k;
        float m2;
        int32_t e2;
        CHECK(ckv_gpu_kmeans_assign(f, fn, c, cn, M, k, d, estimate, cl, best, &m2, &e2,
                                    &changed, err));
        flag_ok &= changed == (i >= 0) && !memcmp(cl, want_cl, (size_t)M * sizeof *cl);
    }
    const float clear = 0x1p-12f;
    const bool margin_ok = !estimate || want_margin < clear
                               ? margin == want_margin
                               : margin >= clear && margin <= want_margin;
    /* At least the tied rows: 21 in "unit" and "wide", feature 20 (zero) and 5 in "walk",
     * the planted rows of "near" and "tie". */
    int32_t tied = mode == KM_WALK ? 2 : mode == KM_FULL ? 0 : 21;
    if (mode >= KM_NEAR) {
        int32_t a, b;
        tied = 0;
        for (int32_t m = 0; m < M; m++)
            tied += km_planted(m, k, &a, &b);
    }
    const bool exact_ok = !estimate || (mode == KM_RANGE ? n_exact == M
                                                         : n_exact < M && n_exact >= tied);
    /* In "range" every row is the exact kernel's: the estimate's values there mean nothing.
     * 2^-14 is tighter than the kernel's derived bound (2^-13.8) and an empirical limit:
     * these data have stayed 4.5 times under it. */
    const bool est_ok = !estimate || mode == KM_RANGE || est_err <= 0x1p-14;
    const bool ok = !differ && margin_ok && exact_ok && est_ok && flag_ok;
    runs++;
    failures += !ok;
    if (estimate)
        printf("     kmeans assign: head_dim %3d, %d centroids, %s features, estimate (%s): %lld "
               "of %d features differ (cluster), %d exact; margin %g (want %g); estimate off by "
               "%.2e; change flags %s  %s\n",
               d, k, km_mode_name[mode], ckv_cuda_wgmma() ? "wgmma" : "mma.sync",
               (long long)differ, M, n_exact, margin, want_margin, est_err,
               flag_ok ? "right" : "WRONG", ok ? "PASS" : "FAIL");
    else
        printf("     kmeans assign: head_dim %3d, %d centroids, %s features: %lld of %d features "
               "differ (cluster, cosine bits); margin %g (want %g); change flags %s  %s\n",
               d, k, km_mode_name[mode], (long long)differ, M, margin, want_margin,
               flag_ok ? "right" : "WRONG", ok ? "PASS" : "FAIL");
    free(f);
    free(c);
    free(fn);
    free(cn);
    free(best);
    free(cl);
    free(want_cl);
}

/* The assignment's pass over the moved centroids (ckv_gpu_kmeans_moved) on
 * check_kmeans_assign's data: every fourth centroid (3, 7, ...) taken as
 * moved. Without join, rows 7, 57, ... in cluster 3 (moved: each must be
 * sent on to the assignment over every centroid) and the others in cluster
 * 0 (not moved), so each of those keeps it and returns the pass's bound v,
 * which km_drift's rule takes to be at least each moved centroid's cosine
 * less KM_EPS (2^-13). The largest exact cosine over the moved centroids
 * must not lie more than 2^-13 over v: the rule's soundness. The pass forms
 * v from the main bf16 products alone, raised by KM_EPS_HI - KM_EPS (2^-6 -
 * 2^-13; kernels/cuda_kmeans.cu derives their error under 2^-6.98 of the
 * cosine), so v less that lift must lie within 0x1.1p-7 of the largest
 * exact cosine too. With join every row starts in a moved cluster, its
 * unmoved centroids taken as far below (the joined rows' rule over the
 * moved ones alone): each row sent on must hold the exact best over every
 * centroid, each other the exact best over the moved ones, over their
 * second by at least 2^-12 (the rule's exact gap, 2 KM_EPS under its
 * KM_CLEAR); at least one row decided there (109-291 a run by a model of
 * these data, but none in "walk", whose moved centroids lie closer to each
 * other than the rule's 2^-5 of slack). */
static void check_kmeans_moved(int32_t d, int32_t k, int32_t M, int32_t step, int mode,
                               bool join, uint64_t seed)
{
    double *f = xmalloc((size_t)M * d * sizeof *f), *c = xmalloc((size_t)k * d * sizeof *c);
    double *fn = xmalloc((size_t)M * sizeof *fn), *cn = xmalloc((size_t)k * sizeof *cn);
    float *bound = xmalloc((size_t)M * sizeof *bound);
    int32_t *cl = xmalloc((size_t)M * sizeof *cl), *moved = xmalloc((size_t)k * sizeof *moved);
    int32_t *redo = xmalloc((size_t)M * sizeof *redo);
    bool *on = xmalloc((size_t)M * sizeof *on);
    km_test_data(d, k, M, mode, seed, f, c, fn, cn);
    int32_t nmoved = 0, redo_n = -1;
    for (int32_t j = 3; j < k; j += step)
        moved[nmoved++] = j;
    int32_t want_redo = 0;
    for (int32_t m = 0; m < M; m++) {
        cl[m] = join ? moved[m % nmoved] : m % 50 == 7 ? 3 : 0;
        want_redo += m % 50 == 7;
        on[m] = false;
    }
    CHECK(ckv_gpu_kmeans_moved(f, fn, c, cn, M, k, d, moved, nmoved, join, cl, bound, redo,
                               &redo_n, err));
    double over = -INFINITY, est_err = 0, least = INFINITY;
    int32_t wrong = 0;  /* rows off their exact best, or listed wrongly */
    for (int32_t i = 0; i < redo_n && i < M; i++) {
        const bool in = redo[i] >= 0 && redo[i] < M;
        wrong += !in || on[redo[i]];
        if (in)
            on[redo[i]] = true;
    }
    for (int32_t m = 0; m < M; m++) {
        double second;
        int32_t bj;
        if (join) {
            /* Sent on: the best of all; joined: of the moved, by its gap. */
            const double bs = km_test_best(f, c, fn, cn, d, m, on[m] ? NULL : moved,
                                           on[m] ? k : nmoved, &bj, &second);
            wrong += cl[m] != bj;
            if (!on[m])
                least = bs - second < least || isnan(bs - second) ? bs - second : least;
            continue;
        }
        if (m % 50 == 7)
            continue;
        const double bs = km_test_best(f, c, fn, cn, d, m, moved, nmoved, &bj, &second);
        const double o = bs - bound[m], e = fabs((double)bound[m] - (0x1p-6 - 0x1p-13) - bs);
        over = o > over || isnan(o) ? o : over;
        est_err = e > est_err || isnan(e) ? e : est_err;
    }
    bool ok;
    if (join) {
        ok = redo_n >= 0 && (redo_n < M || mode == KM_WALK) && !wrong && least >= 0x1p-12;
        printf("     kmeans moved pass, joined rows: head_dim %3d, %d of %d centroids moved, %s "
               "features: %d of %d rows decided there, the least exact gap %.2e (at least "
               "2^-12); %d rows off the exact best  %s\n",
               d, nmoved, k, km_mode_name[mode], M - redo_n, M, least, wrong,
               ok ? "PASS" : "FAIL");
    } else {
        ok = redo_n == want_redo && over <= 0x1p-13 && est_err <= 0x1.1p-7;
        printf("     kmeans moved pass: head_dim %3d, %d of %d centroids moved, %s features: %d "
               "of %d rows sent on (want %d); the exact best over v by %.2e (at most 2^-13); "
               "the main products off by %.2e (at most %.2e)  %s\n",
               d, nmoved, k, km_mode_name[mode], redo_n, M, want_redo, over, est_err, 0x1.1p-7,
               ok ? "PASS" : "FAIL");
    }
    runs++;
    failures += !ok;
    free(f);
    free(c);
    free(fn);
    free(cn);
    free(bound);
    free(cl);
    free(moved);
    free(redo);
    free(on);
}

/* check_kmeans_assign without the estimate and, at the head_dims that have
 * it, in each of its forms: the device's, and the mma.sync form where that
 * is wgmma. */
static void check_kmeans_forms(int32_t d, int32_t k, int32_t M, int mode, uint64_t seed)
{
    check_kmeans_assign(d, k, M, mode, false, seed);
    if (d != 64 && d != 128)
        return;
    check_kmeans_assign(d, k, M, mode, true, seed);
    if (ckv_cuda_wgmma()) {
        ckv_cuda_set_wgmma(false);
        check_kmeans_assign(d, k, M, mode, true, seed);
        ckv_cuda_set_wgmma(true);
    }
}

/* ckv_gpu_policy_compress_many: MANY caches of one shape in one call, each
 * against its own CPU compression (as step does one). The caches: equal
 * lengths; ragged (for the policies whose calls map rows, already
 * compressed once on the GPU, so its rows are mapped where the others' are
 * not); compressed once by the CPU (degrees > 1, round > 0); and one under
 * every budget, which must come out untouched (round, map). The CPU side
 * starts from each GPU cache as downloaded, so that a near-tie in the
 * priming call cannot part them. */
enum { MANY = 4 };

static void many_step(source *s, ckv_gpu_cache **g, const ckv_policy *p, const char *desc,
                      int32_t budget, ckv_cache *cpu, ckv_cache *back, int32_t **a_cpu,
                      int32_t *a_gpu)
{
    const size_t lists = lists_of(&s[0].c), cap = (size_t)s[0].c.capacity;
    float *margin = xmalloc(MANY * lists * sizeof *margin);
    double c_ms = 0;
    ckv_error ec[MANY], eg = {0};
    ckv_status sc[MANY];
    for (int i = 0; i < MANY; i++) {
        memset(&ec[i], 0, sizeof ec[i]);
        double c0 = cpu_ms();
        sc[i] = ckv_policy_compress(p, &cpu[i], budget, NULL, a_cpu[i], &ec[i]);
        c_ms += cpu_ms() - c0;
    }
    ckv_gpu_policy_trace tr = {.assign = a_gpu, .margin = margin};
    double g0 = wall_ms();
    ckv_status sg = ckv_gpu_policy_compress_many(g, MANY, p, budget, NULL, &tr, NULL, &eg);
    double g_ms = wall_ms() - g0;
    for (int i = 0; i < MANY; i++) {
        verdict v;
        memset(&v, 0, sizeof v);
        if (sc[i] || sg) {
            char why[800];
            snprintf(why, sizeof why, "status cpu %d '%.300s', gpu (the call) %d '%.300s'", sc[i],
                     ec[i].msg, sg, eg.msg);
            fail_with(&v, why);
        } else {
            CHECK(ckv_gpu_cache_download(g[i], &back[i], err));
            compare(&back[i], &cpu[i], a_gpu + i * lists * cap, a_cpu[i], margin + i * lists, &v);
        }
        char d[200];
        snprintf(d, sizeof d, "many %d/%d: %s", i + 1, MANY, desc);
        print_row(s[i].name, d, budget, lists, &v, g_ms, c_ms, 0, 0, 0, -1);
    }
    free(margin);
}

static void many_case(source *s, const pcase *pc, int64_t ppm)
{
    ckv_policy p;
    char desc[160];
    make_policy(&p, pc, desc, sizeof desc);
    const size_t lists = lists_of(&s[0].c), cap = (size_t)s[0].c.capacity;
    const int32_t budget = (int32_t)((ppm * ckv_cache_max_len(&s[0].c) + 999999) / 1000000);
    if (budget / 2 <= p.ops->protected_count(&p))
        return;
    /* The last cache under budget / 2 in every list. */
    for (size_t lh = 0; lh < lists; lh++)
        s[MANY - 1].c.len[lh] = budget / 2 - (int32_t)(lh % 5);
    ckv_gpu_cache *g[MANY];
    ckv_cache cpu[MANY], back[MANY];
    int32_t *a_cpu[MANY], *a_gpu = xmalloc(MANY * lists * cap * sizeof *a_gpu);
    for (int i = 0; i < MANY; i++) {
        g[i] = s[i].g;
        CHECK(ckv_gpu_cache_poison(g[i], err));
        CHECK(ckv_gpu_cache_upload(g[i], &s[i].c, err));
    }
    const bool maps = ckv_gpu_policy_entry_bytes(&p) > 0;
    if (maps) {
        const int32_t len = ckv_cache_max_len(&s[1].c);
        CHECK(ckv_gpu_policy_compress(g[1], &p, budget + (len - budget) / 2, NULL, NULL, NULL,
                                      err));
        snprintf(desc + strlen(desc), sizeof desc - strlen(desc), " (cache 2 mapped)");
    }
    const size_t idle_bytes = ckv_gpu_cache_bytes(g[MANY - 1]);
    for (int i = 0; i < MANY; i++) {
        CHECK(ckv_cache_fork(&cpu[i], &s[i].c, s[i].c.capacity, err));
        CHECK(ckv_cache_fork(&back[i], &s[i].c, s[i].c.capacity, err));
        CHECK(ckv_gpu_cache_download(g[i], &cpu[i], err));
        a_cpu[i] = xmalloc(lists * cap * sizeof *a_cpu[i]);
        ckv_policy_assign_identity(&cpu[i], a_cpu[i]);
        ckv_policy_assign_identity(&cpu[i], a_gpu + i * lists * cap);
    }
    many_step(s, g, &p, desc, budget, cpu, back, a_cpu, a_gpu);
    if (pc->chain) {
        char chained[200];
        snprintf(chained, sizeof chained, "%s, again", desc);
        many_step(s, g, &p, chained, budget / 2, cpu, back, a_cpu, a_gpu);
    }
    /* Its own calls would have done nothing to it: no map taken or made. */
    if (maps) {
        runs++;
        if (ckv_gpu_cache_mapped(g[MANY - 1]) || ckv_gpu_cache_bytes(g[MANY - 1]) != idle_bytes) {
            printf("%-4s %-12s many: FAIL: the cache under budget was mapped or took a map "
                   "(%zu bytes, %zu before)\n",
                   ckv_kv_dtype_name(kv_dtype), s[MANY - 1].name,
                   ckv_gpu_cache_bytes(g[MANY - 1]), idle_bytes);
            failures++;
        }
    }
    for (int i = 0; i < MANY; i++) {
        ckv_cache_free(&cpu[i]);
        ckv_cache_free(&back[i]);
        free(a_cpu[i]);
    }
    free(a_gpu);
}

/* A refused call (otherwise valid: window queries qw for SnapKV, a budget
 * over every policy's protected entries): the status wanted, and the first
 * cache unchanged. */
static void many_refused(ckv_gpu_cache **g, int32_t n, const char *policy, const ckv_qwindow *qw,
                         ckv_status want, const char *what)
{
    ckv_policy p;
    CHECK(ckv_policy_init(&p, policy, err));
    const int32_t len = ckv_gpu_cache_max_len(g[0]), round = ckv_gpu_cache_round(g[0]);
    ckv_error e = {0};
    const ckv_status st =
        ckv_gpu_policy_compress_many(g, n, &p, len * 3 / 4, qw, NULL, NULL, &e);
    const bool ok =
        st == want && ckv_gpu_cache_max_len(g[0]) == len && ckv_gpu_cache_round(g[0]) == round;
    printf("%-4s many: %-60s %s (status %d: %s)\n", ckv_kv_dtype_name(kv_dtype), what,
           ok ? "ok" : "FAIL", st, e.msg);
    runs++;
    failures += !ok;
}

static void check_many(void)
{
    source s[MANY];
    synthetic(&s[0], "many-equal", false, SYN_KV, SYN_HEADS, SYN_D, 31);
    synthetic(&s[1], "many-ragged", true, SYN_KV, SYN_HEADS, SYN_D, 32);
    compressed_once(&s[2]);
    synthetic(&s[3], "many-short", true, SYN_KV, SYN_HEADS, SYN_D, 33);
    static const int cases_many[] = {0, 3, 6, 14, 16};
    for (size_t i = 0; i < sizeof cases_many / sizeof cases_many[0]; i++)
        for (size_t b = 0; b < sizeof budgets_ppm / sizeof budgets_ppm[0]; b++)
            many_case(s, &cases[cases_many[i]], budgets_ppm[b]);
    ckv_gpu_cache *g[MANY] = {s[0].g, s[1].g, s[2].g, s[3].g};
    for (int i = 0; i < 2; i++)
        CHECK(ckv_gpu_cache_upload(g[i], &s[i].c, err));
    const ckv_qwindow qw = {s[0].q, s[0].n_head, s[0].w};
    many_refused(g, 2, "snapkv", &qw, CKV_ERR_UNSUPPORTED, "SnapKV over 2 caches");
    many_refused(g, 2, "kmeans", NULL, CKV_ERR_UNSUPPORTED, "K-Means over 2 caches");
    ckv_gpu_cache *twice[2] = {g[0], g[0]};
    many_refused(twice, 2, "centroid", NULL, CKV_ERR_ARG, "one cache twice");
    ckv_gpu_cache *other = NULL;
    CHECK(ckv_gpu_cache_create_shape(&other, SYN_LAYERS, SYN_KV, 2 * SYN_D, s[0].c.capacity,
                                     true, kv_dtype, err));
    ckv_gpu_cache *mixed[2] = {g[0], other};
    many_refused(mixed, 2, "centroid", NULL, CKV_ERR_ARG, "caches of two head_dims");
    ckv_gpu_cache_free(other);
    ckv_policy streaming;
    CHECK(ckv_policy_init(&streaming, "streaming", err));
    CHECK(ckv_gpu_policy_compress(g[0], &streaming, ckv_gpu_cache_max_len(g[0]) / 2, NULL, NULL,
                                  NULL, err));
    many_refused(g, 1, "snapkv", &qw, CKV_ERR_UNSUPPORTED,
                 "SnapKV on a cache StreamingLLM mapped");
    many_refused(g, 1, "kmeans", NULL, CKV_ERR_UNSUPPORTED,
                 "K-Means on a cache StreamingLLM mapped");
    for (int i = 0; i < MANY; i++)
        source_free(&s[i]);
}

/* Every source in the current kv_dtype; 1 when a dump cannot be read. */
static int run_sources(const char *dump)
{
    source s;
    synthetic(&s, "synth-equal", false, SYN_KV, SYN_HEADS, SYN_D, 1);
    run_source(&s, true, NULL);
    source_free(&s);
    synthetic(&s, "synth-ragged", true, SYN_KV, SYN_HEADS, SYN_D, 2);
    run_source(&s, true, NULL);
    source_free(&s);
    /* head_dim 128: K-Means tiles need more than 48 KiB of shared memory. */
    synthetic(&s, "synth-d128", true, SYN_KV, 4 * SYN_KV, 2 * SYN_D, 3);
    run_source(&s, false, NULL);
    source_free(&s);
    /* head_dim 66: rows the compaction cannot move four floats at a time. */
    synthetic(&s, "synth-d66", true, SYN_KV, SYN_HEADS, 66, 4);
    run_source(&s, false, NULL);
    source_free(&s);
    /* head_dim 148: the widest K-Means takes (its tiles, the feature
     * kernel's rows). */
    synthetic(&s, "synth-d148", true, SYN_KV, SYN_HEADS, 148, 5);
    run_source(&s, false, NULL);
    source_free(&s);
    /* Where K-Means's estimate takes its wgmma form, the mma.sync form (the
     * one of other devices) too, at both head_dims that have it. */
    if (ckv_cuda_wgmma()) {
        ckv_cuda_set_wgmma(false);
        synthetic(&s, "synth-mma64", true, SYN_KV, SYN_HEADS, SYN_D, 6);
        run_source(&s, false, "kmeans");
        source_free(&s);
        synthetic(&s, "synth-mma128", true, SYN_KV, 4 * SYN_KV, 2 * SYN_D, 7);
        run_source(&s, false, "kmeans");
        source_free(&s);
        ckv_cuda_set_wgmma(true);
    }
    /* Many lists: the exact kernel's first warp finds a tile's list over
     * 33 rounds of 32 lists (at 95% whole pairs are under the budget, with
     * no tiles). */
    synthetic(&s, "synth-lists", true, 257, 257, SYN_D, 8);
    run_source(&s, false, "kmeans");
    source_free(&s);
    /* At both head_dims with the estimate (the own pass's records hold 16
     * coordinates of 64 or of 128). */
    duplicated(&s, "synth-dup", SYN_HEADS, SYN_D, 9);
    run_source(&s, true, "kmeans");
    source_free(&s);
    duplicated(&s, "synth-dup128", 4 * SYN_KV, 2 * SYN_D, 10);
    run_source(&s, true, "kmeans");
    source_free(&s);
    /* K-Means's lazy features, forced and poisoned (run_lazy), at both
     * head_dims the estimate takes, on ragged keys and on the duplicated
     * ones (the own pass leaves their near rows to the exact passes). */
    synthetic(&s, "synth-lazy", true, SYN_KV, SYN_HEADS, SYN_D, 11);
    run_lazy(&s);
    source_free(&s);
    synthetic(&s, "synth-lazy128", true, SYN_KV, 4 * SYN_KV, 2 * SYN_D, 12);
    run_lazy(&s);
    source_free(&s);
    duplicated(&s, "synth-lazydup", SYN_HEADS, SYN_D, 13);
    run_lazy(&s);
    source_free(&s);
    duplicated(&s, "synth-lazydup128", 4 * SYN_KV, 2 * SYN_D, 14);
    run_lazy(&s);
    source_free(&s);
    compressed_once(&s);
    run_source(&s, true, NULL);
    source_free(&s);
    check_many();
    /* The fixture under CKV_SOURCE_ROOT, else the source tree this was built
     * from, else the working directory (a build carried to another machine). */
    char fixture[4096];
    const char *root = getenv("CKV_SOURCE_ROOT");
    snprintf(fixture, sizeof fixture, "%s/tests/fixtures/kv_small.h5",
             root ? root : CKV_SOURCE_ROOT);
    if (!root && access(fixture, R_OK))
        snprintf(fixture, sizeof fixture, "tests/fixtures/kv_small.h5");
    if (!dump_source(&s, "kv_small", fixture))
        return 1;
    run_source(&s, true, NULL);
    source_free(&s);
    if (dump) {
        if (!dump_source(&s, "dump", dump))
            return 1;
        run_source(&s, false, NULL);
        source_free(&s);
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: gpu_policy_parity [--dump PATH] [--quick] [--kv-dtype T] [--bench]\n"
            "                         [--repeats N]\n"
            "GPU compression policies against the CPU reference (policies.md).\n"
            "  --dump PATH   also check a KV dump of `ckv dump-kv` (or CKV_POLICY_DUMP)\n"
            "  --quick       synthetic caches of 480 instead of 1400 tokens\n"
            "  --kv-dtype T  f32 or bf16: caches of that type only (default: both)\n"
            "  --bench       time the GPU policies at 8K-32K synthetic tokens instead\n"
            "  --repeats N   timing repeats for --bench (default 5; the median is shown)\n"
            "  -h, --help    this text\n"
            "Exit 0: every run passes; 1: a failure; 77: no GPU.\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"dump", required_argument, NULL, 'd'},
                                         {"bench", no_argument, NULL, 'b'},
                                         {"quick", no_argument, NULL, 'q'},
                                         {"repeats", required_argument, NULL, 'r'},
                                         {"kv-dtype", required_argument, NULL, 'k'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    setvbuf(stdout, NULL, _IOLBF, 0); /* rows show as they come, also in a log */
    const char *dump = getenv("CKV_POLICY_DUMP");
    bool do_bench = false;
    int repeats = 5, c;
    ckv_kv_dtype only;
    int first = CKV_KV_F32, last = CKV_KV_BF16; /* the kv dtypes to run */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            dump = optarg;
            break;
        case 'b':
            do_bench = true;
            break;
        case 'q':
            syn_t = 480;
            break;
        case 'r':
            repeats = atoi(optarg);
            if (repeats < 1) {
                fprintf(stderr, "policy_parity: --repeats must be a positive integer\n");
                return 2;
            }
            break;
        case 'k':
            if (!ckv_kv_dtype_parse(optarg, &only)) {
                fprintf(stderr, "policy_parity: --kv-dtype takes f32 or bf16, not '%s'\n", optarg);
                return 2;
            }
            first = last = only;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    int32_t n_dev = 0;
    ckv_error err = {0};
    if (ckv_cuda_device_count(&n_dev, &err)) {
        printf("policy_parity: no GPU (%s): skipped\n", err.msg);
        return SKIP;
    }
    if (do_bench) {
        bench(repeats, first, last);
        return 0;
    }
    printf("tolerance %.1e (relative, floor 1) on keys, values, degrees, scores; near-tie "
           "margin %.0e\n",
           TOL_VALUE, NEAR_TIE);
    printf("%-4s %-12s %-58s %6s %5s %7s %9s %9s %9s %9s  %s\n", "kv", "source", "policy",
           "budget", "lists", "slotdif", "diff/near", "max err", "GPU ms", "CPU ms", "result");
    for (int t = first; t <= last; t++) {
        kv_dtype = (ckv_kv_dtype)t;
        /* 80: the aligned loads with a partial last slab; 67 and 7: rows
         * copied element by element, 7 under one octet; 68: fp32 lanes whose
         * second piece lies past the row; 160: more slabs than the ring
         * holds for either key type, so a slot is filled again. */
        static const int32_t dims[] = {128, 64, 66, 80, 67, 7, 68, 160},
                             chunks[] = {32, 7, 100, 2};
        for (int part = CKV_CSM_ALTERNATING; part <= CKV_CSM_RANDOM; part++)
            for (int i = 0; i < 8; i++)
                for (int j = 0; j < 4; j++)
                    for (int wide = 0; wide < 2; wide++)
                        check_csm_walk(dims[i], chunks[j], wide, part,
                                       (uint64_t)(1 + 8 * i + 2 * j + wide + 64 * part));
        /* The features are doubles whatever the cache type; 148 is the
         * largest head_dim whose tiles fit (cuda_kmeans.cu). */
        static const int32_t km_dims[] = {128, 64, 66, 148};
        if (t == first) {
            check_ddiv();
            check_own_rows();
            for (int i = 0; i < 4; i++)
                for (int mode = KM_UNIT; mode <= KM_RANGE; mode++)
                    check_kmeans_forms(km_dims[i], 150, 300, mode, (uint64_t)(100 + 2 * i + mode));
            for (int i = 0; i < 2; i++) {
                check_kmeans_forms(km_dims[i], 345, 300, KM_FULL, (uint64_t)(120 + i));
                check_kmeans_forms(km_dims[i], 2100, 300, KM_WALK, (uint64_t)(130 + i));
                /* 50 rows over 6 and 33 tiles of centroids: the sliced estimate. */
                check_kmeans_forms(km_dims[i], 345, 50, KM_FULL, (uint64_t)(140 + i));
                check_kmeans_forms(km_dims[i], 2100, 50, KM_WALK, (uint64_t)(150 + i));
                /* 140 and 100 rows: sliced, each warpgroup its own rows, the third
                 * part-filled or idle (5 k / M = 75 or 105, not the zeroed 70; at 140
                 * centroid 1500 is also row 100's own, which moves that row's best). */
                check_kmeans_forms(km_dims[i], 2100, 140, KM_WALK, (uint64_t)(170 + i));
                check_kmeans_forms(km_dims[i], 2100, 100, KM_WALK, (uint64_t)(180 + i));
                /* Each without and with the joined rows' rule. */
                for (int join = 0; join < 2; join++) {
                    for (int mode = KM_UNIT; mode <= KM_FULL; mode++)
                        check_kmeans_moved(km_dims[i], 345, 300, 4, mode, join,
                                           (uint64_t)(190 + 4 * i + mode));
                    check_kmeans_moved(km_dims[i], 2100, 300, 4, KM_WALK, join,
                                       (uint64_t)(198 + i));
                    /* 43 moved (one tile, kept across a block's blocks of rows) over
                     * 513 rows: a block's last block of rows full, then one row. */
                    check_kmeans_moved(km_dims[i], 345, 513, 8, KM_FULL, join,
                                       (uint64_t)(200 + i));
                }
                /* The exact pass over the candidate tiles: 50 rows (the
                 * warpgroups split the tiles) and 140 (each its own rows). */
                for (int mode = KM_NEAR; mode <= KM_TIE; mode++) {
                    check_kmeans_forms(km_dims[i], 8400, 50, mode,
                                       (uint64_t)(210 + 4 * i + 2 * (mode - KM_NEAR)));
                    check_kmeans_forms(km_dims[i], 8400, 140, mode,
                                       (uint64_t)(211 + 4 * i + 2 * (mode - KM_NEAR)));
                }
            }
        }
        if (run_sources(dump))
            return 1;
    }
    if (!centroid_lists) {
        printf("FAIL: no K-Means run compared its centroids with the CPU's\n");
        failures++;
    }
    printf("%d runs, %d failed, %d lists with near-tie differences\n", runs, failures, near_ties);
    return failures ? 1 : 0;
}
