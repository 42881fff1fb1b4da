#include "ruler_pack.h"

ckv_status ckv_pack_add_ruler(ckv_pack *p, const ckv_tokenizer *tok, const ckv_ruler_set *set,
                              ckv_error *err)
{
    for (size_t i = 0; i < set->n_samples; i++) {
        const ckv_ruler_sample *x = &set->samples[i];
        ckv_pack_sample s = {
            .task = (char *)set->task,
            .metric = (char *)set->metric,
            .index = x->index,
            .target_length = set->target_length,
            .max_new_tokens = set->max_new_tokens,
            .length = x->length,
            .prompt = x->input,
            .answer_prefix = x->answer_prefix,
            .context_chars = x->context_end,
            .answers = x->outputs,
            .n_answers = x->n_outputs,
        };
        ckv_status st = ckv_pack_add(p, tok, &s, err);
        if (st)
            return st;
    }
    return CKV_OK;
}
