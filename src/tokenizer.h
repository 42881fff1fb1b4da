/* Tokenizer built from GGUF metadata: byte-level BPE (`gpt2` model, with the
 * pre-tokenizers smollm, llama-bpe, qwen2 and default, via PCRE2) and
 * SentencePiece BPE (`llama` model, byte fallback). Decoding is byte-exact:
 * decode(encode(x)) == x for any bytes, invalid UTF-8 and NUL included,
 * provided the vocabulary has a token for every byte of x (see ckv_tokenize). */
#ifndef CKV_TOKENIZER_H
#define CKV_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ckv_tokenizer ckv_tokenizer;

typedef enum {
    CKV_CHAT_NONE = 0,  /* no template: prompt used as is */
    CKV_CHAT_CHATML,    /* <|im_start|>role\n...<|im_end|>\n (SmolLM2, Qwen) */
    CKV_CHAT_LLAMA3,    /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CKV_CHAT_LLAMA2     /* [INST] ... [/INST] (Llama 2, Mistral) */
} ckv_chat_format;

ckv_status ckv_tokenizer_load(ckv_tokenizer **out, const gguf_file *f, ckv_error *err);
void ckv_tokenizer_free(ckv_tokenizer *t);

/* Encodes text (any bytes). With parse_special, control token strings in
 * the text (e.g. "<|im_start|>") become their ids; otherwise they are
 * encoded as plain text. User-defined tokens (token_type 4, Hugging Face's
 * non-special added tokens) always match. add_bos prepends BOS when the
 * model asks for it (tokenizer.ggml.add_bos_token). Bytes that are not
 * valid UTF-8 are encoded one by one as their byte tokens. A byte that no
 * token stands for is dropped by byte-level BPE (as Hugging Face does;
 * SmolLM2 lacks 21 of the 256, mostly bytes that never occur in UTF-8) and
 * becomes the unknown token in SentencePiece. *out is malloc'd; caller frees. */
ckv_status ckv_tokenize(const ckv_tokenizer *t, const char *text, size_t len, bool add_bos,
                        bool parse_special, int32_t **out, size_t *n_out, ckv_error *err);

/* Decodes ids to the exact bytes they stand for; special tokens render as
 * their text. *out is malloc'd and NUL-terminated (out_len excludes it). */
ckv_status ckv_detokenize(const ckv_tokenizer *t, const int32_t *ids, size_t n, char **out,
                          size_t *out_len, ckv_error *err);
/* Bytes of a single token (for streaming); NULL if id is out of range. */
const char *ckv_token_bytes(const ckv_tokenizer *t, int32_t id, size_t *len);

int32_t ckv_tokenizer_vocab(const ckv_tokenizer *t);
int32_t ckv_token_bos(const ckv_tokenizer *t);
int32_t ckv_token_eos(const ckv_tokenizer *t);
/* True for ids that end generation (eos, eot, im_end, ...). */
bool ckv_token_is_eog(const ckv_tokenizer *t, int32_t id);
const char *ckv_tokenizer_model(const ckv_tokenizer *t); /* "gpt2" | "llama" */
const char *ckv_tokenizer_pre(const ckv_tokenizer *t);

ckv_chat_format ckv_tokenizer_chat_format(const ckv_tokenizer *t);
/* Renders a single-turn chat (optional system message, user message,
 * assistant header with generation prompt) in the model's chat format. The
 * result is text with special-token strings, to be encoded with
 * parse_special = true; it has no BOS (ckv_tokenize's add_bos adds it). With
 * system == NULL, a ChatML template's built-in default system prompt (e.g.
 * SmolLM2's) is used, as Hugging Face's apply_chat_template does; other
 * formats then have no system part. *out is malloc'd. */
ckv_status ckv_chat_render(const ckv_tokenizer *t, const char *system, const char *user,
                           char **out, ckv_error *err);
/* The text ckv_chat_render puts before and after the user message (same
 * system rule), for prompts that must stay split or hold U+0000. Both are
 * malloc'd; "" and "" for CKV_CHAT_NONE. */
ckv_status ckv_chat_affixes(const ckv_tokenizer *t, const char *system, char **prefix,
                            char **suffix, ckv_error *err);

/* A stable hash of the vocabulary and merges, recorded in task packs. */
uint64_t ckv_tokenizer_hash(const ckv_tokenizer *t);

#ifdef __cplusplus
}
#endif
#endif
