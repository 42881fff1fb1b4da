/* RULER samples into a task pack (datasets/pack.h). */
#ifndef CKV_RULER_PACK_H
#define CKV_RULER_PACK_H

#include "pack.h"
#include "ruler.h"

/* Appends every sample of set, tokenized with tok: prompt = input, the
 * answer prefix, answers = outputs, the set's task, metric, target length
 * and max new tokens, the context split at context_end. */
ckv_status ckv_pack_add_ruler(ckv_pack *p, const ckv_tokenizer *tok, const ckv_ruler_set *set,
                              ckv_error *err);

#endif
