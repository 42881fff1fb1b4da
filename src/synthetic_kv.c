#include "synthetic_kv.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "splitmix.h"

/* Uniform in [-1, 1). */
static float uniform(uint64_t *s)
{
    return (float)((double)(ckv_splitmix64(s) >> 11) / 4503599627370496.0 - 1.0);
}

ckv_status ckv_synthetic_kv(ckv_cache *c, float **q_window, int32_t layers, int32_t kv_heads,
                            int32_t n_head, int32_t head_dim, int32_t tokens, int32_t w,
                            uint64_t seed, ckv_error *err)
{
    *q_window = NULL;
    if (n_head < kv_heads || n_head % kv_heads || w < 1 || w > tokens)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "synthetic cache: %d query heads over %d KV heads, window %d of %d "
                          "tokens",
                          n_head, kv_heads, w, tokens);
    ckv_status st = ckv_cache_init(c, layers, kv_heads, head_dim, tokens, true, err);
    if (st)
        return st;
    size_t qn = (size_t)layers * n_head * w * head_dim;
    float *q = malloc(qn * sizeof *q);
    if (!q) {
        ckv_cache_free(c);
        return ckv_errorf(err, CKV_ERR_NOMEM, "synthetic cache: out of memory");
    }
    /* Step and noise sizes give neighbour cosines near 0.86 that fall to
     * about 0.8 at distance 64 and 0.55 at 512 (SmolLM2's layer 15 on the
     * fixture: 0.87 at distance 1, 0.76 at 8). Each (layer, head) list has
     * its own stream, so the lists are made in parallel: one stream for the
     * whole cache took 12 s for the 8B shape at 8K tokens on two cores, most
     * of a `bench compress` call's wall time. */
    const float step = 0.08f, noise = 0.7f;
    bool nomem = false;
#pragma omp parallel for collapse(2) schedule(dynamic, 1) reduction(| : nomem)
    for (int32_t l = 0; l < layers; l++)
        for (int32_t h = 0; h < kv_heads; h++) {
            uint64_t s = seed + 0x9E3779B97F4A7C15ull * (1 + (uint64_t)l * kv_heads + h);
            float *walk = malloc((size_t)head_dim * sizeof *walk);
            if (!walk) {
                nomem = true;
                continue;
            }
            for (int32_t i = 0; i < head_dim; i++)
                walk[i] = uniform(&s);
            float *deg = ckv_cache_degp(c, l, h), *sc = ckv_cache_scorep(c, l, h);
            for (int32_t t = 0; t < tokens; t++) {
                float *k = ckv_cache_key(c, l, h, t), *v = ckv_cache_val(c, l, h, t);
                for (int32_t i = 0; i < head_dim; i++) {
                    walk[i] += step * uniform(&s);
                    k[i] = walk[i] + noise * uniform(&s);
                    v[i] = uniform(&s);
                }
                deg[t] = 1;
                sc[t] = (float)(tokens - t) * (1.5f + uniform(&s)) / (float)tokens;
            }
            c->len[ckv_cache_lh(c, l, h)] = tokens;
            for (int32_t g = 0; g < n_head / kv_heads; g++)
                for (int32_t r = 0; r < w; r++) {
                    const float *k = ckv_cache_key(c, l, h, tokens - w + r);
                    float *qr = q + (((size_t)l * n_head + h * (n_head / kv_heads) + g) * w + r) *
                                        head_dim;
                    for (int32_t i = 0; i < head_dim; i++)
                        qr[i] = k[i] + noise * uniform(&s);
                }
            free(walk);
        }
    if (nomem) {
        free(q);
        ckv_cache_free(c);
        return ckv_errorf(err, CKV_ERR_NOMEM, "synthetic cache: out of memory");
    }
    c->n_pos = tokens;
    *q_window = q;
    return CKV_OK;
}
