/* Imported benchmark samples (ckv_sample: LongBench, RULER jsonl) into a
 * task pack (datasets/pack.h), prepared as LongBench's pred.py prepares
 * them: middle truncation to the prompt budget, then the model's chat
 * format for the datasets that take one. */
#ifndef CKV_SAMPLE_PACK_H
#define CKV_SAMPLE_PACK_H

#include <stdbool.h>
#include <stdint.h>

#include "pack.h"
#include "sample.h"
#include "status.h"
#include "tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int32_t max_length; /* truncate prompts longer than this many tokens (0: never) */
    bool chat;          /* wrap samples whose chat_template is set in the model's format */
} ckv_sample_pack_opts;

/* Appends sample s (truncated in place when over max_length; *truncated
 * says so) as pack entry number index of its task. The chat prefix joins
 * the context part and the suffix (assistant header) the question part;
 * special-token strings are parsed (as Hugging Face's tokenizer call in
 * pred.py does); target_length is max_length. */
ckv_status ckv_pack_add_sample(ckv_pack *p, const ckv_tokenizer *tok, ckv_sample *s,
                               uint32_t index, const ckv_sample_pack_opts *o, bool *truncated,
                               ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
