/* CPU reference forward pass. Reads top to bottom like the model: embed ->
 * per layer (RMSNorm -> Q/K/V -> [bias | q/k-norm] -> RoPE -> append K/V to
 * the cache -> attention with log(degree) -> output proj -> residual ->
 * RMSNorm -> SwiGLU FFN -> residual) -> final norm -> logits. Buffers are
 * allocated once in ckv_cpu_create; the forward pass allocates nothing. */
#include "cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decoder_ops.h"
#include "matmul.h"
#include "util.h"

struct ckv_cpu {
    const ckv_model *m;
    int32_t max_batch;
    int n_threads;
    double *inv_freq;  /* [n_rot/2] RoPE frequencies incl. scaling and rope_freqs */
    float *x, *xb;     /* [B][n_embd] residual stream and normed input */
    float *q, *k, *v;  /* [B][n_head*hd], [B][n_kv*hd] x2 */
    float *att;        /* [B][n_head*hd] attention output */
    float *hg, *hu;    /* [B][n_ff] gate and up */
    float *scores;     /* [max_batch][capacity] attention probabilities of one head */
    float *logdeg;     /* [n_kv][capacity] log(degree) of the current layer */
    int32_t aux_cap;
    int32_t *len0;     /* [n_kv] list lengths before the current segment */
    int32_t *seg;      /* [max_batch + 1] segment bounds of a batched decode */
};

static void *xcalloc(size_t n, size_t sz, bool *ok)
{
    void *p = n ? calloc(n, sz) : NULL;
    if (n && !p)
        *ok = false;
    return p;
}

ckv_status ckv_cpu_create(ckv_cpu **out, const ckv_model *m, int32_t max_batch, int n_threads,
                          ckv_error *err)
{
    const ckv_config *c = &m->cfg;
    if (max_batch <= 0)
        return ckv_errorf(err, CKV_ERR_ARG, "cpu: max_batch %d must be positive", max_batch);
    ckv_cpu *s = calloc(1, sizeof *s);
    if (!s)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cpu: out of memory");
    s->m = m;
    s->max_batch = max_batch;
    s->n_threads = n_threads > 0 ? n_threads : ckv_cpu_count();
    size_t B = (size_t)max_batch, qd = (size_t)c->n_head * c->head_dim,
           kvd = (size_t)c->n_head_kv * c->head_dim;
    bool ok = true;
    s->inv_freq = xcalloc((size_t)c->n_rot / 2, sizeof *s->inv_freq, &ok);
    s->x = xcalloc(B * c->n_embd, sizeof(float), &ok);
    s->xb = xcalloc(B * c->n_embd, sizeof(float), &ok);
    s->q = xcalloc(B * qd, sizeof(float), &ok);
    s->k = xcalloc(B * kvd, sizeof(float), &ok);
    s->v = xcalloc(B * kvd, sizeof(float), &ok);
    s->att = xcalloc(B * qd, sizeof(float), &ok);
    s->hg = xcalloc(B * c->n_ff, sizeof(float), &ok);
    s->hu = xcalloc(B * c->n_ff, sizeof(float), &ok);
    s->len0 = xcalloc((size_t)c->n_head_kv, sizeof *s->len0, &ok);
    s->seg = xcalloc(B + 1, sizeof *s->seg, &ok);
    if (!ok) {
        ckv_cpu_free(s);
        return ckv_errorf(err, CKV_ERR_NOMEM, "cpu: out of memory for batch %d", max_batch);
    }
    ckv_rope_inv_freq(s->inv_freq, c, m->rope_freqs);
    *out = s;
    return CKV_OK;
}

void ckv_cpu_free(ckv_cpu *s)
{
    if (!s)
        return;
    free(s->inv_freq);
    free(s->x);
    free(s->xb);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->att);
    free(s->hg);
    free(s->hu);
    free(s->scores);
    free(s->logdeg);
    free(s->len0);
    free(s->seg);
    free(s);
}

/* Scratch that grows with the cache capacity; sized once per capacity, not per token. */
static ckv_status ensure_aux(ckv_cpu *s, int32_t capacity, ckv_error *err)
{
    if (capacity <= s->aux_cap)
        return CKV_OK;
    size_t T = (size_t)capacity, kv = (size_t)s->m->cfg.n_head_kv;
    float *sc = realloc(s->scores, (size_t)s->max_batch * T * sizeof(float));
    if (sc)
        s->scores = sc;
    float *ld = realloc(s->logdeg, kv * T * sizeof(float));
    if (ld)
        s->logdeg = ld;
    if (!sc || !ld)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cpu: out of memory for cache capacity %d", capacity);
    s->aux_cap = capacity;
    return CKV_OK;
}

/* Y[n][out] = X[n][in] . W[out][in]^T (+ bias), contiguous rows. */
static void matmul(const ckv_cpu *s, float *y, const float *x, const float *w, const float *bias,
                   int n, int in, int out)
{
    ckv_matmul_nt(y, out, x, in, w, in, bias, n, out, in, 1.0f, s->n_threads);
}

/* One pass over n rows. The rows form n_seg segments: segment g is rows
 * [seg[g], seg[g+1]), the consecutive tokens of caches[g] (a prefill chunk is
 * one segment; a batched decode step is one single-row segment per
 * sequence). Row-wise work (projections, FFN) runs over all rows at once, so
 * the weights are read once per pass; attention runs per segment against its
 * own cache. first/total place the rows within the caller's whole input for
 * the query window and last-token logits; q_rows, when not NULL, takes
 * every row's queries as [total][n_layer][n_head][head_dim]. */
static ckv_status forward_rows(ckv_cpu *s, ckv_cache *const *caches, int32_t n_seg,
                               const int32_t *seg, const int32_t *tokens, int32_t first,
                               int32_t total, const ckv_forward_opts *o, float *logits,
                               float *q_rows, ckv_error *err)
{
    const ckv_model *m = s->m;
    const ckv_config *c = &m->cfg;
    const int E = c->n_embd, hd = c->head_dim, H = c->n_head, KV = c->n_head_kv;
    const int qd = H * hd, kvd = KV * hd, group = H / KV;
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t T = (size_t)s->aux_cap;
    const int nt = s->n_threads;
    const int32_t n = seg[n_seg];

    for (int32_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= c->n_vocab)
            return ckv_errorf(err, CKV_ERR_ARG, "token id %d at index %d is outside [0, %d)",
                              tokens[i], first + i, c->n_vocab);
        memcpy(s->x + (size_t)i * E, m->tok_embd + (size_t)tokens[i] * E, (size_t)E * sizeof(float));
    }

    for (int l = 0; l < c->n_layer; l++) {
        const ckv_layer *L = &m->layers[l];
        for (int32_t i = 0; i < n; i++)
            ckv_rmsnorm(s->xb + (size_t)i * E, s->x + (size_t)i * E, L->attn_norm, E, c->rms_eps);
        matmul(s, s->q, s->xb, L->wq, L->bq, n, E, qd);
        matmul(s, s->k, s->xb, L->wk, L->bk, n, E, kvd);
        matmul(s, s->v, s->xb, L->wv, L->bv, n, E, kvd);
        for (int32_t g = 0; g < n_seg; g++)
            for (int32_t i = seg[g]; i < seg[g + 1]; i++) {
                int64_t pos = caches[g]->n_pos + (i - seg[g]);
                for (int qh = 0; qh < H; qh++) {
                    float *q = s->q + (size_t)i * qd + (size_t)qh * hd;
                    if (L->q_norm)
                        ckv_rmsnorm(q, q, L->q_norm, hd, c->rms_eps);
                    ckv_rope(q, hd, s->inv_freq, pos, c->rope_type);
                    int32_t w = first + i - (total - o->q_window);
                    if (o->q_window > 0 && w >= 0)
                        memcpy(o->q_window_out + (((size_t)l * H + qh) * o->q_window + w) * hd, q,
                               (size_t)hd * sizeof(float));
                    if (q_rows)
                        memcpy(q_rows + (((size_t)(first + i) * c->n_layer + l) * H + qh) * hd,
                               q, (size_t)hd * sizeof(float));
                }
                for (int h = 0; h < KV; h++) {
                    float *k = s->k + (size_t)i * kvd + (size_t)h * hd;
                    if (L->k_norm)
                        ckv_rmsnorm(k, k, L->k_norm, hd, c->rms_eps);
                    ckv_rope(k, hd, s->inv_freq, pos, c->rope_type);
                }
            }
        for (int32_t g = 0; g < n_seg; g++) {
            ckv_cache *cache = caches[g];
            const int32_t r0 = seg[g], nr = seg[g + 1] - seg[g];
            /* Append the segment's keys and values as degree-1 entries, in
             * the cache's type (attention then reads them as stored). */
            int32_t *len0 = s->len0;
            for (int h = 0; h < KV; h++) {
                int32_t *len = &cache->len[ckv_cache_lh(cache, l, h)];
                len0[h] = *len;
                for (int32_t i = 0; i < nr; i++) {
                    const size_t src = (size_t)(r0 + i) * kvd + (size_t)h * hd;
                    float *k = ckv_cache_key(cache, l, h, *len + i);
                    float *v = ckv_cache_val(cache, l, h, *len + i);
                    for (int d = 0; d < hd; d++) {
                        k[d] = ckv_cache_store(cache, s->k[src + d]);
                        v[d] = ckv_cache_store(cache, s->v[src + d]);
                    }
                    ckv_cache_degp(cache, l, h)[*len + i] = 1.0f;
                    if (cache->score)
                        ckv_cache_scorep(cache, l, h)[*len + i] = 0.0f;
                }
                *len += nr;
                const float *deg = ckv_cache_degp(cache, l, h);
                for (int32_t t = 0; t < *len; t++)
                    s->logdeg[h * T + t] = logf(deg[t]);
            }
            for (int qh = 0; qh < H; qh++) {
                int h = qh / group;
                ckv_attend(s->att + (size_t)r0 * qd + (size_t)qh * hd, qd, s->scores,
                           s->q + (size_t)r0 * qd + (size_t)qh * hd, qd, nr,
                           ckv_cache_key(cache, l, h, 0), ckv_cache_val(cache, l, h, 0),
                           o->no_degree_bias ? NULL : s->logdeg + h * T, len0[h],
                           cache->len[ckv_cache_lh(cache, l, h)], hd, scale,
                           ckv_cache_scorep(cache, l, h), nt);
            }
        }
        matmul(s, s->xb, s->att, L->wo, NULL, n, qd, E);
        for (size_t i = 0; i < (size_t)n * E; i++)
            s->x[i] += s->xb[i];

        for (int32_t i = 0; i < n; i++)
            ckv_rmsnorm(s->xb + (size_t)i * E, s->x + (size_t)i * E, L->ffn_norm, E, c->rms_eps);
        matmul(s, s->hg, s->xb, L->w_gate, NULL, n, E, c->n_ff);
        matmul(s, s->hu, s->xb, L->w_up, NULL, n, E, c->n_ff);
        ckv_swiglu(s->hg, s->hu, (size_t)n * c->n_ff);
        matmul(s, s->xb, s->hg, L->w_down, NULL, n, c->n_ff, E);
        for (size_t i = 0; i < (size_t)n * E; i++)
            s->x[i] += s->xb[i];
    }
    for (int32_t g = 0; g < n_seg; g++)
        caches[g]->n_pos += seg[g + 1] - seg[g];

    if (logits) {
        /* All logits, or only those of the very last token of the whole input. */
        int32_t from = o->all_logits ? 0 : (first + n == total ? n - 1 : n);
        for (int32_t i = from; i < n; i++)
            ckv_rmsnorm(s->xb + (size_t)(i - from) * E, s->x + (size_t)i * E, m->output_norm, E,
                    c->rms_eps);
        if (n - from > 0)
            matmul(s, o->all_logits ? logits + (size_t)first * c->n_vocab : logits, s->xb, m->output,
                   NULL, n - from, E, c->n_vocab);
    }
    return CKV_OK;
}

static ckv_status check_cache(const ckv_cpu *s, const ckv_cache *cache, int32_t n, ckv_error *err)
{
    const ckv_config *c = &s->m->cfg;
    if (cache->n_layer != c->n_layer || cache->n_head_kv != c->n_head_kv ||
        cache->head_dim != c->head_dim)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "forward: cache shape [%d layers, %d kv heads, dim %d] does not match "
                          "the model [%d, %d, %d]",
                          cache->n_layer, cache->n_head_kv, cache->head_dim, c->n_layer,
                          c->n_head_kv, c->head_dim);
    int32_t mx = ckv_cache_max_len(cache);
    if ((int64_t)mx + n > cache->capacity)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "forward: %d new tokens overflow the cache (longest list %d, capacity %d)",
                          n, mx, cache->capacity);
    return CKV_OK;
}

ckv_status ckv_cpu_forward(ckv_cpu *s, ckv_cache *cache, const int32_t *tokens, int32_t n,
                           const ckv_forward_opts *opts, float *logits, ckv_error *err)
{
    static const ckv_forward_opts none = {0};
    const ckv_forward_opts *o = opts ? opts : &none;
    if (n <= 0)
        return ckv_errorf(err, CKV_ERR_ARG, "forward: no tokens");
    if (o->q_window < 0 || o->q_window > n || (o->q_window > 0 && !o->q_window_out))
        return ckv_errorf(err, CKV_ERR_ARG, "forward: query window %d invalid for %d tokens",
                          o->q_window, n);
    ckv_status st = check_cache(s, cache, n, err);
    if (st || (st = ensure_aux(s, cache->capacity, err)))
        return st;
    for (int32_t first = 0; first < n; first += s->max_batch) {
        int32_t seg[2] = {0, n - first < s->max_batch ? n - first : s->max_batch};
        if ((st = forward_rows(s, &cache, 1, seg, tokens + first, first, n, o, logits, NULL,
                                   err)))
            return st;
    }
    return CKV_OK;
}

ckv_status ckv_cpu_decode_batch(ckv_cpu *s, ckv_cache *const *caches, const int32_t *tokens,
                                int32_t n, bool no_degree_bias, float *logits, float *q_out,
                                ckv_error *err)
{
    if (n <= 0)
        return ckv_errorf(err, CKV_ERR_ARG, "decode batch: no sequences");
    int32_t cap = 0;
    for (int32_t i = 0; i < n; i++) {
        ckv_status st = check_cache(s, caches[i], 1, err);
        if (st)
            return ckv_error_prefix(err, "decode batch: sequence %d", i);
        for (int32_t j = 0; j < i; j++)
            if (caches[j] == caches[i])
                return ckv_errorf(err, CKV_ERR_ARG,
                                  "decode batch: sequences %d and %d share one cache", j, i);
        if (caches[i]->capacity > cap)
            cap = caches[i]->capacity;
    }
    ckv_status st = ensure_aux(s, cap, err);
    if (st)
        return st;
    const ckv_forward_opts o = {.no_degree_bias = no_degree_bias, .all_logits = true};
    int32_t *seg = s->seg;
    for (int32_t first = 0; first < n; first += s->max_batch) {
        int32_t rows = n - first < s->max_batch ? n - first : s->max_batch;
        for (int32_t i = 0; i <= rows; i++)
            seg[i] = i;
        if ((st = forward_rows(s, caches + first, rows, seg, tokens + first, first, n, &o,
                               logits, q_out, err)))
            return st;
    }
    return CKV_OK;
}
