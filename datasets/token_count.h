/* A ckv_token_counter backed by the model's tokenizer: counts the tokens of
 * a text as RULER's text_to_tokens does (no BOS, special-token strings as
 * plain text). */
#ifndef CKV_TOKEN_COUNT_H
#define CKV_TOKEN_COUNT_H

#include "ruler.h"
#include "tokenizer.h"

ckv_token_counter ckv_tokenizer_counter(const ckv_tokenizer *t);

#endif
