/* The smallest `ckv synth` model whose tokenizer the tokenizer tests and
 * the tokenizer fuzz target load with no model file: one llama layer of
 * width 32 and a vocabulary of 300 (bytes, merges, then 31 reserved control
 * tokens; its layout is src/synth.c's, checked by test_synth). */
#ifndef CKV_TESTS_SYNTH_TOKENIZER_H
#define CKV_TESTS_SYNTH_TOKENIZER_H

#include "synth.h"

enum { SYNTH_TOKENIZER_VOCAB = 300 };

static inline void synth_tokenizer_opts(ckv_synth_opts *o)
{
    ckv_synth_defaults(o);
    o->arch = "llama";
    o->n_layer = 1;
    o->n_embd = 32;
    o->n_head = 2;
    o->n_head_kv = 1;
    o->n_ff = 32;
    o->n_vocab = SYNTH_TOKENIZER_VOCAB;
}

#endif
