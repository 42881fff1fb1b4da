#include "token_count.h"

#include <stdlib.h>

static ckv_status count(void *ctx, const char *text, size_t len, size_t *n, ckv_error *err)
{
    int32_t *ids = NULL;
    ckv_status st = ckv_tokenize(ctx, text, len, false, false, &ids, n, err);
    free(ids);
    return st;
}

ckv_token_counter ckv_tokenizer_counter(const ckv_tokenizer *t)
{
    return (ckv_token_counter){count, (void *)t};
}
