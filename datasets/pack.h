/* Task packs: prepared benchmark samples in one HDF5 file, so that a run
 * (CPU or GPU) needs no text processing. A pack records the model path and
 * tokenizer hash it was made for; reading it for another tokenizer is an
 * error. Layout (docs/datasets.md, "Task packs"):
 *   /          attrs format="ckv-pack", version=2, model_path, tokenizer_hash
 *   /tokens    int32 [total]      every sample's token ids, concatenated
 *   /prompts   uint8 [total]      every sample's prompt bytes, concatenated
 *   /answers   string [total]     every sample's reference answers
 *   /classes   string [total]     every sample's class labels (LongBench)
 *   /samples/<field> [n]          one entry per sample (see ckv_pack_sample) */
#ifndef CKV_PACK_H
#define CKV_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char *task;            /* e.g. "niah_single_1", "qasper" */
    char *metric;          /* scorer name, e.g. "string_match_all", "qa_f1_score" */
    uint32_t index;        /* sample number within its task */
    uint32_t target_length;  /* length the prompt was fitted to (0: none) */
    uint32_t max_new_tokens;
    uint32_t length;       /* the benchmark's own length field (RULER: tokens + new tokens) */
    /* Text given to the model, before answer_prefix: prompt_len bytes (0:
     * strlen), any bytes (official LongBench contexts hold U+0000), stored
     * NUL-terminated. Chat-rendered prompts carry special-token strings. */
    char *prompt;
    uint64_t prompt_len;
    char *answer_prefix;   /* text given right after prompt ("" if none) */
    uint64_t context_chars;  /* prompt[0, context_chars) is the context */
    bool parse_special;    /* special-token strings in the text become their ids */
    bool first_line;       /* score only the prediction's first line (LongBench) */
    /* Token ids of prompt + answer_prefix as the model is fed them: the
     * context and the question are tokenized separately (BOS when the model
     * asks for it, on the context only) and concatenated, so that
     * tokens[0, n_context_tokens) is exactly the context. */
    int32_t *tokens;
    uint32_t n_tokens;
    uint32_t n_context_tokens;
    char **answers;
    uint32_t n_answers;
    char **classes;
    uint32_t n_classes;
} ckv_pack_sample;

typedef struct {
    char *model_path;
    uint64_t tokenizer_hash;
    ckv_pack_sample *samples;
    size_t n_samples, cap;
} ckv_pack;

/* Starts an empty pack for a model and its tokenizer. */
ckv_status ckv_pack_init(ckv_pack *p, const char *model_path, const ckv_tokenizer *tok,
                         ckv_error *err);
/* Appends a sample: copies the strings, tokenizes prompt + answer_prefix
 * with the split at context_chars (special-token strings parsed when
 * parse_special). The copy has prompt_len set. */
ckv_status ckv_pack_add(ckv_pack *p, const ckv_tokenizer *tok, const ckv_pack_sample *s,
                        ckv_error *err);
/* Writes atomically (temporary file, then rename). */
ckv_status ckv_pack_write(const ckv_pack *p, const char *path, ckv_error *err);
/* Reads a pack; an error when it was made for a tokenizer other than
 * tokenizer_hash (pass 0 to accept any). */
ckv_status ckv_pack_read(ckv_pack *p, const char *path, uint64_t tokenizer_hash, ckv_error *err);
void ckv_pack_free(ckv_pack *p);

#ifdef __cplusplus
}
#endif
#endif
