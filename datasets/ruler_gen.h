/* Internal interface between the RULER driver (ruler.c), the length fitting
 * (ruler_fit.c) and the task families (ruler_niah.c, ruler_vt.c,
 * ruler_cwe.c, ruler_fwe.c, ruler_qa.c). */
#ifndef CKV_RULER_GEN_H
#define CKV_RULER_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "rng.h"
#include "ruler.h"
#include "ruler_text.h"
#include "status.h"

/* One candidate prompt, built for a haystack size. */
typedef struct {
    rbuf text;          /* template + answer prefix, formatted */
    size_t ctx_start;   /* span of the {context} field in text */
    size_t ctx_end;
    char **outputs;     /* malloc'd strings */
    size_t n_outputs;
    size_t n_needles;
    size_t needle_off[CKV_RULER_MAX_NEEDLES]; /* offsets in text */
    double needle_depth[CKV_RULER_MAX_NEEDLES];
} ruler_draft;

void ruler_draft_clear(ruler_draft *d); /* frees outputs, empties text */
void ruler_draft_free(ruler_draft *d);
/* Appends a copy of s to d->outputs. */
ckv_status ruler_draft_output(ruler_draft *d, const char *s, ckv_error *err);

typedef struct ruler_gen ruler_gen;
struct ruler_gen {
    const char *data_dir;
    const char *task;
    uint32_t target;     /* max_seq_length */
    uint32_t gen_tokens; /* tokens_to_generate */
    uint64_t seed;
    const char *tmpl;          /* task template + answer prefix (model template "base") */
    const char *answer_prefix;
    const ckv_token_counter *tc;

    /* Set by the family's init. */
    size_t incremental;  /* search lower bound and per-sample shrink step */
    size_t probe_units;  /* haystack size of the tokens-per-unit probe */
    uint32_t upper_mult; /* search upper bound: upper_mult * target / tokens-per-unit */
    size_t max_units;    /* largest haystack the data allows (0: no limit) */
    ckv_status (*build)(ruler_gen *g, size_t question, size_t units, ckv_rng *rng,
                        ruler_draft *d, ckv_error *err);
    /* Haystack size search; NULL means ruler_fit_search. */
    ckv_status (*fit)(ruler_gen *g, size_t *units, ckv_error *err);
    void (*free_state)(void *state);
    void *state;

    bool probing; /* building the tokens-per-unit probe of the search */
    bool skipped; /* data missing */
    char skip_reason[512];
};

/* Family initialisers: read the task's args (synthetic.yaml), load data
 * (setting g->skipped with a reason when a file is absent). */
ckv_status ruler_niah_init(ruler_gen *g, const json_t *args, ckv_error *err);
ckv_status ruler_vt_init(ruler_gen *g, const json_t *args, ckv_error *err);
ckv_status ruler_cwe_init(ruler_gen *g, const json_t *args, ckv_error *err);
ckv_status ruler_fwe_init(ruler_gen *g, const json_t *args, ckv_error *err);
ckv_status ruler_qa_init(ruler_gen *g, const json_t *args, ckv_error *err);

/* Token count of d's full text, plus tokens_to_generate. */
ckv_status ruler_measure(ruler_gen *g, const ruler_draft *d, size_t *length, ckv_error *err);
/* Independent streams per (seed, task, length, stream): sample i uses
 * stream i; the haystack-size search re-seeds RULER_STREAM_SEARCH for every
 * candidate so that a size always yields the same prompt. */
enum { RULER_STREAM_SEARCH = -1, RULER_STREAM_ICL = -2 };
void ruler_rng(const ruler_gen *g, int64_t stream, ckv_rng *rng);

/* RULER's per-sample loop: draw at *units; while the draw is too long,
 * shrink by `incremental` and draw again (error when it cannot shrink). */
ckv_status ruler_draw_fitting(ruler_gen *g, size_t question, size_t *units, ckv_rng *rng,
                              ruler_draft *d, size_t *length, ckv_error *err);

/* RULER's search: the largest haystack size in [incremental, upper] whose
 * prompt fits (interpolation with bisection fallback; same result as
 * RULER's binary search whenever length grows with size). */
ckv_status ruler_fit_search(ruler_gen *g, size_t *units, ckv_error *err);

/* Marks g as skipped because path is absent. Returns CKV_OK. */
ckv_status ruler_skip_missing(ruler_gen *g, const char *path, const char *what);
/* Whether path exists; a path that exists but cannot be read is an error
 * later, when it is opened. */
bool ruler_file_exists(const char *path);

/* Wonderwords lists as wonderwords reads them (lines, right-stripped, the
 * empty first line kept), each sorted and de-duplicated. */
typedef struct {
    char **adjs, **nouns, **verbs;
    size_t n_adjs, n_nouns, n_verbs;
    char *blob[3];
} ruler_words;
/* Loads ruler/wonderwords/ (skip when absent). */
ckv_status ruler_words_load(ruler_gen *g, ruler_words *w, ckv_error *err);
void ruler_words_free(ruler_words *w);
/* Sorted, de-duplicated union of string arrays (pointers into the inputs).
 * *out is malloc'd. */
ckv_status ruler_sorted_union(char **const *lists, const size_t *counts, size_t n_lists,
                              char ***out, size_t *n_out, ckv_error *err);

/* Noise haystack sentence (niah "noise" and vt). */
extern const char ruler_noise[];

#endif
