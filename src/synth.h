/* Synthetic models: a random but complete, seeded GGUF v3 file for the
 * llama, qwen2 or qwen3 architecture with a tiny valid GPT-2 byte-level BPE
 * tokenizer, so every loader path can be exercised without a real model. */
#ifndef CKV_SYNTH_H
#define CKV_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *arch;  /* "llama", "qwen2" or "qwen3" */
    uint32_t n_layer;
    uint32_t n_embd;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t head_dim; /* 0: n_embd / n_head */
    uint32_t n_ff;
    uint32_t n_vocab;  /* >= ckv_synth_min_vocab() */
    uint32_t n_ctx;
    uint64_t seed;
    uint32_t type;     /* ggml type of the matrices (F32/F16/BF16/Q8_0/Q4_0/Q4_1) */
    bool untied;       /* write output.weight instead of reusing token_embd */
    float rope_freq_base;
    float rms_eps;
    float std;         /* standard deviation of matrix and bias entries */
} ckv_synth_opts;

/* Defaults for everything but arch and the sizes. */
void ckv_synth_defaults(ckv_synth_opts *o);

/* Smallest vocabulary: 3 special tokens, 256 byte tokens and the merges. */
uint32_t ckv_synth_min_vocab(void);

/* Builds the file in memory (malloc'd; the caller frees). */
ckv_status ckv_synth_build(const ckv_synth_opts *o, uint8_t **out, size_t *len, ckv_error *err);

/* Builds and writes atomically (temporary file + rename). */
ckv_status ckv_synth_write(const ckv_synth_opts *o, const char *path, ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
