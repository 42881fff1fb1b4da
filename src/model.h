/* A decoder-only model loaded from GGUF: configuration plus fp32 host
 * weights (dequantised once at load). Architecture differences are data in
 * ckv_config, not branches spread through the forward pass. */
#ifndef CKV_MODEL_H
#define CKV_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CKV_ARCH_LLAMA = 0, CKV_ARCH_QWEN2, CKV_ARCH_QWEN3 } ckv_arch;
typedef enum { CKV_ROPE_NORM = 0, CKV_ROPE_NEOX = 2 } ckv_rope_type;

typedef struct {
    ckv_arch arch;
    int32_t n_layer;
    int32_t n_embd;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;  /* key_length; qwen3 may differ from n_embd / n_head */
    int32_t n_ff;
    int32_t n_vocab;
    int32_t n_ctx;     /* training context length */
    int32_t n_rot;
    float rope_base;
    float rope_freq_scale; /* 1 / linear scaling factor; 1 when unscaled */
    float rms_eps;
    ckv_rope_type rope_type;
    bool qkv_bias;     /* qwen2 */
    bool qk_norm;      /* qwen3 */
    bool tied;         /* output reuses token_embd */
    bool has_rope_freqs;
} ckv_config;

/* Matrices are row-major [out][in] (GGUF ne = [in, out]); vectors plain. */
typedef struct {
    float *attn_norm;             /* [n_embd] */
    float *wq, *wk, *wv, *wo;     /* [n_head*hd][n_embd], [n_kv*hd][n_embd] x2, [n_embd][n_head*hd] */
    float *bq, *bk, *bv;          /* qwen2 biases or NULL */
    float *q_norm, *k_norm;       /* qwen3 [head_dim] or NULL */
    float *ffn_norm;              /* [n_embd] */
    float *w_gate, *w_up;         /* [n_ff][n_embd] */
    float *w_down;                /* [n_embd][n_ff] */
} ckv_layer;

typedef struct {
    ckv_config cfg;
    float *tok_embd;    /* [n_vocab][n_embd] */
    float *output_norm; /* [n_embd] */
    float *output;      /* [n_vocab][n_embd]; == tok_embd when tied */
    float *rope_freqs;  /* [n_rot/2] divisors, or NULL */
    ckv_layer *layers;
    gguf_file gguf;     /* kept open: tokenizer and `ckv info` read it */
    char *path;
    uint64_t n_params;
    uint64_t file_bytes;
} ckv_model;

ckv_status ckv_model_load(ckv_model *m, const char *path, ckv_error *err);
void ckv_model_free(ckv_model *m);

/* Reads hyperparameters only (no weights); used by load and `ckv info`. */
ckv_status ckv_config_from_gguf(ckv_config *c, const gguf_file *f, ckv_error *err);

const char *ckv_arch_name(ckv_arch a);

/* Resolves the model path: explicit argument, else $CKV_MODEL, else the
 * default models/SmolLM2-135M-Instruct.Q4_1.gguf. Never NULL. */
const char *ckv_default_model_path(const char *explicit_path);

#ifdef __cplusplus
}
#endif
#endif
