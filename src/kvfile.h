/* HDF5 KV dumps: the file `ckv dump-kv` writes and `ckv compress` reads and
 * writes. Datasets (float32 unless noted):
 *   k, v       [layers, kv_heads, tokens, head_dim]  rows past a list's length are zero
 *   degree     [layers, kv_heads, tokens]            optional on input (default 1)
 *   length     int32 [layers, kv_heads]              optional on input (default tokens)
 *   q_window   [layers, heads, W, head_dim]          optional: last W queries (SnapKV)
 *   h2o_score  [layers, kv_heads, tokens]            optional: accumulated attention (H2O)
 *   assign     int32 [layers, kv_heads, in_tokens]   compress output only
 * Attributes: prompt_tokens (int64), csm_round (int32), model, prompt, and
 * after compression policy, params, budget, budget_entries (strings/ints). */
#ifndef CKV_KVFILE_H
#define CKV_KVFILE_H

#include <stdint.h>

#include "cache.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    ckv_cache cache;       /* capacity = tokens; score set iff h2o_score exists */
    float *q_window;       /* [layers][n_head][w][head_dim] or NULL */
    int32_t n_head, w;     /* 0 without q_window */
    int64_t prompt_tokens; /* attribute, else tokens */
    char *model, *prompt;  /* attributes or NULL */
} ckv_kvdump;

/* Reads and validates a dump: k and v present with equal 4-D shapes, no
 * empty cache, finite keys/values/scores, degrees >= 1, lengths in
 * [1, tokens], q_window heads a multiple of kv_heads. Messages name the
 * file and dataset. */
ckv_status ckv_kvfile_read(const char *path, ckv_kvdump *d, ckv_error *err);
void ckv_kvdump_free(ckv_kvdump *d);

/* Optional parts of a written file. */
typedef struct {
    const float *q_window;    /* [layers][n_head][w][head_dim] or NULL */
    int32_t n_head, w;
    const int32_t *assign;    /* [layers][kv_heads][assign_tokens] or NULL */
    int32_t assign_tokens;
    int64_t assign_stride;    /* elements between lists in assign (>= assign_tokens) */
    int64_t prompt_tokens;
    const char *model, *prompt;               /* NULL: omitted */
    const char *policy, *params, *budget;     /* NULL: omitted */
    int64_t budget_entries;                   /* written with policy */
} ckv_kvfile_extra;

/* Writes the cache (k, v, degree, length, and h2o_score when the cache
 * tracks scores; csm_round = cache->round) plus the extras, atomically:
 * a temporary file in the same directory renamed over path. tokens is the
 * longest list. `ckv dump-kv` calls this with q_window, prompt_tokens, model
 * and prompt; `ckv compress` with assign and the policy attributes. Only an
 * fp32 cache (dtype F32): a bf16 one is CKV_ERR_UNSUPPORTED. */
ckv_status ckv_kvfile_write(const char *path, const ckv_cache *c, const ckv_kvfile_extra *x,
                            ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
