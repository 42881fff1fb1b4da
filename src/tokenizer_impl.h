/* The tokenizer's state, shared by the files that implement tokenizer.h:
 * tokenizer.c (loading, special tokens, decoding, hash), tokenizer_bpe.c
 * (byte-level BPE), tokenizer_spm.c (SentencePiece BPE) and chat.c. */
#ifndef CKV_TOKENIZER_IMPL_H
#define CKV_TOKENIZER_IMPL_H

#include "hashmap.h"
#include "tokenizer.h"

/* tokenizer.ggml.token_type values. */
enum {
    TOK_NORMAL = 1,
    TOK_UNKNOWN = 2,
    TOK_CONTROL = 3,
    TOK_USER_DEFINED = 4,
    TOK_UNUSED = 5,
    TOK_BYTE = 6
};

typedef enum { TOK_MODEL_GPT2, TOK_MODEL_LLAMA } tok_model;

#define TOK_MAX_STAGES 2

typedef struct {
    const char *text; /* as stored in the GGUF (byte-mapped / with U+2581) */
    const char *bytes; /* the bytes the token stands for when decoded */
    uint32_t text_len, bytes_len;
} tok_entry;

/* A token matched as a whole in the input text. */
typedef struct {
    int32_t id;
    uint32_t len;
    uint8_t first; /* first byte of the text */
    bool needs_parse_special; /* control/unknown; user-defined always match */
} tok_special;

struct ckv_tokenizer {
    tok_model model;
    char *model_name, *pre_name;
    int32_t n_vocab;
    tok_entry *tok;
    int32_t *type;
    float *score;     /* SentencePiece merge priority; zeros for gpt2 */
    char *arena;      /* backs tok[].text and tok[].bytes */
    ckv_strmap by_text; /* GGUF text -> id */
    ckv_u64map merges;  /* (left id << 32 | right id) -> (rank << 32 | merged id) */
    int32_t byte_tok[256]; /* token of each single byte, -1 if none */

    tok_special *specials; /* grouped by first byte, longest text first */
    size_t n_specials;
    uint32_t special_start[256], special_count[256]; /* group of each first byte */

    void *stage[TOK_MAX_STAGES]; /* pcre2_code*, pre-tokenizer regexes applied in turn */
    bool stage_jit[TOK_MAX_STAGES];
    int n_stages;

    bool add_bos, add_space_prefix;
    int32_t bos, eos, unk;
    uint8_t *eog; /* per id */
    ckv_chat_format chat;
    char *chat_default_system; /* NULL if the template has none */
    uint64_t hash;
};

/* Growing output id list. */
typedef struct {
    int32_t *v;
    size_t n, cap;
} tok_ids;

ckv_status tok_ids_push(tok_ids *o, int32_t id, ckv_error *err);

/* A stretch of input: plain text, or a special token (id >= 0). */
typedef struct {
    const char *s;
    size_t n;
    int32_t special;
} tok_segment;

/* GPT-2 byte <-> code point map: printable bytes map to themselves, the
 * rest to U+0100.. in byte order. tok_gpt2_byte returns -1 for code points
 * outside the map. */
uint32_t tok_gpt2_codepoint(uint8_t b);
int tok_gpt2_byte(uint32_t cp);

/* Compiles the pre-tokenizer regexes named by tokenizer.ggml.pre. */
ckv_status tok_bpe_init(ckv_tokenizer *t, const char *pre, ckv_error *err);
void tok_bpe_free(ckv_tokenizer *t);
ckv_status tok_bpe_encode(const ckv_tokenizer *t, const tok_segment *seg, size_t n_seg,
                          tok_ids *out, ckv_error *err);
ckv_status tok_spm_encode(const ckv_tokenizer *t, const tok_segment *seg, size_t n_seg,
                          tok_ids *out, ckv_error *err);

/* Detects the chat format (and a default system prompt) from the template. */
ckv_status tok_chat_init(ckv_tokenizer *t, const char *tmpl, size_t len, ckv_error *err);

#endif
