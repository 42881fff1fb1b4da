#include "sample_pack.h"

#include <stdlib.h>
#include <string.h>

#include "truncate.h"

ckv_status ckv_pack_add_sample(ckv_pack *p, const ckv_tokenizer *tok, ckv_sample *s,
                               uint32_t index, const ckv_sample_pack_opts *o, bool *truncated,
                               ckv_error *err)
{
    *truncated = false;
    ckv_status st = CKV_OK;
    if (o->max_length > 0 && (st = ckv_sample_truncate(tok, s, o->max_length, truncated, err)))
        return st;
    char *pre = NULL, *suf = NULL, *text = NULL;
    size_t a = 0, c = 0;
    if (o->chat && s->chat_template) {
        if ((st = ckv_chat_affixes(tok, NULL, &pre, &suf, err)))
            return st;
        a = strlen(pre);
        c = strlen(suf);
    }
    /* the prompt may hold U+0000, so it is joined by length, not as a string */
    text = malloc(a + s->prompt_len + c + 1);
    if (!text) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "pack: out of memory");
        goto out;
    }
    if (a)
        memcpy(text, pre, a);
    memcpy(text + a, s->prompt, s->prompt_len);
    memcpy(text + a + s->prompt_len, suf ? suf : "", c + 1);
    ckv_pack_sample ps = {
        .task = s->task,
        .metric = (char *)ckv_metric_name(s->metric),
        .index = index,
        .target_length = o->max_length > 0 ? (uint32_t)o->max_length : 0,
        .max_new_tokens = s->max_new_tokens > 0 ? (uint32_t)s->max_new_tokens : 0,
        .length = s->length < 0 ? 0 : s->length > UINT32_MAX ? UINT32_MAX : (uint32_t)s->length,
        .prompt = text,
        .prompt_len = a + s->prompt_len + c,
        .answer_prefix = "",
        .context_chars = a + s->context_len,
        .parse_special = true,
        .first_line = s->first_line,
        .answers = s->answers,
        .n_answers = (uint32_t)s->n_answers,
        .classes = s->classes,
        .n_classes = (uint32_t)s->n_classes,
    };
    st = ckv_pack_add(p, tok, &ps, err);
out:
    free(pre);
    free(suf);
    free(text);
    return st;
}
