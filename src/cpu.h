/* CPU reference decoder: fp32 math on dequantised weights. Runs a batch of
 * tokens (prefill) or one token (decode) against a ckv_cache, appending each
 * token's post-RoPE key and value as a degree-1 entry. Attention over the
 * cache adds log(degree) to the logits. */
#ifndef CKV_CPU_H
#define CKV_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "cache.h"
#include "model.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ckv_cpu ckv_cpu;

typedef struct {
    bool no_degree_bias;   /* ablation: drop log(n) from attention logits */
    bool all_logits;       /* logits for every input token, else only the last */
    int32_t q_window;      /* capture the queries of the last W input tokens (0: none) */
    float *q_window_out;   /* [n_layer][n_head][W][head_dim], post-RoPE (qwen3: post q-norm) */
} ckv_forward_opts;

/* max_batch bounds the tokens processed at once (longer inputs are split);
 * n_threads <= 0 picks the number of online CPUs. */
ckv_status ckv_cpu_create(ckv_cpu **out, const ckv_model *m, int32_t max_batch, int n_threads,
                          ckv_error *err);
void ckv_cpu_free(ckv_cpu *cpu);

/* Runs n tokens at positions cache->n_pos .. n_pos+n-1. logits receives
 * [n][n_vocab] with all_logits, else [n_vocab] for the last token; it may be
 * NULL. When cache->score is set, every entry accumulates the attention
 * probability it receives (summed over queries and the query heads of its
 * KV group), as H2O needs. Fails with CKV_ERR_ARG if a list would overflow
 * the cache capacity. */
ckv_status ckv_cpu_forward(ckv_cpu *cpu, ckv_cache *cache, const int32_t *tokens, int32_t n,
                           const ckv_forward_opts *opts, float *logits, ckv_error *err);

/* One decode step for n independent sequences: token i is appended to
 * caches[i] at that cache's own position, and logits receives [n][n_vocab].
 * The projections and FFN run over all n rows together, so the weights are
 * read once per step whatever n is (the forks of a sweep decode as one batch).
 * q_out, when not NULL, receives each row's queries as
 * [n][n_layer][n_head][head_dim], post-RoPE (qwen3: post q-norm), for
 * policies that score with decode queries. The caches must be distinct. */
ckv_status ckv_cpu_decode_batch(ckv_cpu *cpu, ckv_cache *const *caches, const int32_t *tokens,
                                int32_t n, bool no_degree_bias, float *logits, float *q_out,
                                ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
