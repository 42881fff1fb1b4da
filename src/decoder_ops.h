/* The per-token operations of the decoder, in fp32 on the CPU: the CPU
 * decoder (cpu.c) is built from them, and each GPU kernel in kernels/ is
 * checked against the one it mirrors (tests/gpu/parity.c). */
#ifndef CKV_DECODER_OPS_H
#define CKV_DECODER_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out = x / sqrt(mean(x^2) + eps) * w over n values (sum of squares in double). */
void ckv_rmsnorm(float *out, const float *x, const float *w, int n, float eps);

/* RoPE frequencies, n_rot/2 of them: base^(-2i/n_rot) * freq_scale / rope_freqs[i]
 * (rope_freqs may be NULL), in double. */
void ckv_rope_inv_freq(double *inv_freq, const ckv_config *c, const float *rope_freqs);

/* Rotates one head vector in place for position pos: NORM pairs (2i, 2i+1),
 * NEOX pairs (i, i + head_dim/2); angle pos * inv_freq[i] in double. */
void ckv_rope(float *v, int head_dim, const double *inv_freq, int64_t pos, ckv_rope_type type);

/* g[i] = silu(g[i]) * u[i] for i < n. */
void ckv_swiglu(float *g, const float *u, size_t n);

/* out[i][j] = bf16(silu(gu[i][j]) * gu[i][n_ff + j]) for i < n, j < n_ff:
 * the GPU's SwiGLU output with its rounding (twin of ckv_k_swiglu and of
 * the GEMV's SwiGLU epilogue, ckv_k_gemm_swiglu_via). */
void ckv_swiglu_bf16(uint16_t *out, const float *gu, int32_t n, int32_t n_ff);

/* Attention of n queries of one query head over one (layer, KV head) list of
 * len entries (keys and values at row stride head_dim). Query i sees the
 * first len0 + i + 1 entries (len0: the list length before these n queries'
 * own entries were appended). Logits are q.k * scale + logdeg[t] (logdeg may
 * be NULL: no degree bias). Writes out[i * out_stride + d]; S is [n][len]
 * scratch that holds the probabilities afterwards; when acc is set, acc[t]
 * gains the probability entry t receives from every query. */
void ckv_attend(float *out, size_t out_stride, float *S, const float *q, size_t q_stride,
                int32_t n, const float *k, const float *v, const float *logdeg, int32_t len0,
                int32_t len, int head_dim, float scale, float *acc, int n_threads);

#ifdef __cplusplus
}
#endif
#endif
