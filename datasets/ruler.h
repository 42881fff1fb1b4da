/* RULER synthetic benchmark generator (NVIDIA/RULER scripts/data/synthetic),
 * all 13 tasks, following the official construction, templates and length
 * fitting. Prompts are seeded and deterministic through our own RNG
 * (datasets/rng.h), so they do not reproduce Python's `random` stream: the
 * samples differ from the official generator's while following its recipe.
 * Data comes from a data dir (templates, essays, word lists, SQuAD, HotpotQA);
 * a task whose data is missing is reported as skipped with a reason. */
#ifndef CKV_RULER_H
#define CKV_RULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Counts the tokens of text[0, len) with the evaluated model's tokenizer
 * (no BOS, special-token strings as plain text: RULER's text_to_tokens). */
typedef struct {
    ckv_status (*count)(void *ctx, const char *text, size_t len, size_t *n_tokens,
                        ckv_error *err);
    void *ctx;
} ckv_token_counter;

#define CKV_RULER_MAX_NEEDLES 16

typedef struct {
    uint32_t index;
    char *input;          /* prompt without the answer prefix (RULER's `input`) */
    char *answer_prefix;  /* sent right after input (RULER's `answer_prefix`) */
    char **outputs;       /* reference answers (RULER's `outputs`) */
    uint32_t n_outputs;
    uint32_t length;      /* tokens of input + answer_prefix, plus max_new_tokens */
    /* Query-agnostic split: input[0, context_end) is the context (up to and
     * including the haystack / documents), input[context_end, ...) plus
     * answer_prefix is the question. */
    size_t context_start; /* where the haystack text itself starts in input */
    size_t context_end;
    uint32_t haystack_units; /* sentences / words / documents used */
    /* NIAH: the inserted needles (byte offset in input) and their depth as
     * a fraction of the haystack (RULER's depth percent / 100 for essays,
     * insertion index / haystack size for line haystacks). */
    uint32_t n_needles;
    size_t needle_offset[CKV_RULER_MAX_NEEDLES];
    double needle_depth[CKV_RULER_MAX_NEEDLES];
} ckv_ruler_sample;

typedef struct {
    const char *task;         /* e.g. "niah_single_1" */
    const char *family;       /* niah | variable_tracking | common_words_extraction | ... */
    const char *metric;       /* string_match_all | string_match_part */
    uint32_t target_length;   /* RULER's max_seq_length */
    uint32_t max_new_tokens;  /* RULER's tokens_to_generate */
    bool skipped;             /* data missing: no samples, reason below */
    char skip_reason[512];
    ckv_ruler_sample *samples;
    size_t n_samples;
} ckv_ruler_set;

typedef struct ckv_ruler ckv_ruler;

/* Opens a data dir (the parent of ruler/, squad/, hotpotqa/) and reads
 * ruler/templates.json, which is required. Other files load on first use. */
ckv_status ckv_ruler_open(ckv_ruler **out, const char *data_dir, ckv_error *err);
void ckv_ruler_close(ckv_ruler *r);

/* The 13 task names, in RULER's order. */
size_t ckv_ruler_n_tasks(void);
const char *ckv_ruler_task_name(size_t i);

/* Generates n_samples prompts of task at target_length tokens. Missing data
 * gives CKV_OK with out->skipped set. Same (seed, task, length) gives the
 * same prompts; sample i does not depend on n_samples. */
ckv_status ckv_ruler_generate(ckv_ruler *r, const char *task, uint32_t target_length,
                              uint32_t n_samples, uint64_t seed, const ckv_token_counter *tc,
                              ckv_ruler_set *out, ckv_error *err);
void ckv_ruler_set_free(ckv_ruler_set *s);

#ifdef __cplusplus
}
#endif
#endif
