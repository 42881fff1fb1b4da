/* Backend selection and the CPU backend: thin wrappers over the CPU
 * decoder, host caches and the policy functions. */
#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_impl.h"
#include "ckv_config.h"

/* The decoder plus the model's cache shape, which new caches take, and the
 * host caches of a decode batch (grown to the largest batch seen). */
typedef struct {
    ckv_cpu *cpu;
    int32_t n_layer, n_head_kv, head_dim;
    int n_threads;
    ckv_cache **seq;
    int32_t max_seq;
} cpu_state;

static ckv_status cpu_create(void **state, const ckv_model *m, int32_t max_batch, int n_threads,
                             ckv_error *err)
{
    cpu_state *s = calloc(1, sizeof *s);
    if (!s)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cpu backend: out of memory");
    ckv_status st = ckv_cpu_create(&s->cpu, m, max_batch, n_threads, err);
    if (st) {
        free(s);
        return st;
    }
    s->n_layer = m->cfg.n_layer;
    s->n_head_kv = m->cfg.n_head_kv;
    s->head_dim = m->cfg.head_dim;
    s->n_threads = n_threads;
    *state = s;
    return CKV_OK;
}

static void cpu_destroy(void *state)
{
    cpu_state *s = state;
    ckv_cpu_free(s->cpu);
    free(s->seq);
    free(s);
}

static ckv_status cpu_cache_new(void *state, ckv_bcache **out, int32_t capacity, bool track_score,
                                ckv_kv_dtype dtype, ckv_error *err)
{
    const cpu_state *s = state;
    ckv_bcache *b = calloc(1, sizeof *b);
    if (!b)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cache: out of memory");
    ckv_status st = ckv_cache_init(&b->c, s->n_layer, s->n_head_kv, s->head_dim, capacity,
                                   track_score, err);
    if (st) {
        free(b);
        return st;
    }
    b->c.dtype = dtype;
    *out = b;
    return CKV_OK;
}

static void cpu_cache_free(void *state, ckv_bcache *c)
{
    (void)state;
    if (!c)
        return;
    ckv_cache_free(&c->c);
    free(c);
}

static ckv_status cpu_fork(void *state, ckv_bcache **out, const ckv_bcache *src, int32_t capacity,
                           ckv_error *err)
{
    (void)state;
    ckv_bcache *b = calloc(1, sizeof *b);
    if (!b)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cache fork: out of memory");
    ckv_status st = ckv_cache_fork(&b->c, &src->c, capacity, err);
    if (st) {
        free(b);
        return st;
    }
    *out = b;
    return CKV_OK;
}

static ckv_status cpu_forward(void *state, ckv_bcache *c, const int32_t *tokens, int32_t n,
                              const ckv_forward_opts *opts, float *logits, ckv_error *err)
{
    return ckv_cpu_forward(((cpu_state *)state)->cpu, &c->c, tokens, n, opts, logits, err);
}

static ckv_status cpu_decode_batch(void *state, ckv_bcache *const *caches, const int32_t *tokens,
                                   int32_t n, bool no_degree_bias, float *logits, float *q_out,
                                   ckv_error *err)
{
    cpu_state *s = state;
    if (n > s->max_seq) {
        ckv_cache **grown = realloc(s->seq, (size_t)n * sizeof *grown);
        if (!grown)
            return ckv_errorf(err, CKV_ERR_NOMEM, "cpu backend: out of memory");
        s->seq = grown;
        s->max_seq = n;
    }
    for (int32_t i = 0; i < n; i++)
        s->seq[i] = &caches[i]->c;
    return ckv_cpu_decode_batch(s->cpu, s->seq, tokens, n, no_degree_bias, logits, q_out, err);
}

static ckv_status cpu_compress(void *state, const ckv_policy *p, ckv_bcache *c, int32_t budget,
                               const ckv_qwindow *qw, ckv_error *err)
{
    (void)state;
    return ckv_policy_compress(p, &c->c, budget, qw, NULL, err);
}

static ckv_status cpu_on_decode(void *state, const ckv_policy *p, ckv_bcache *c, int32_t budget,
                                int64_t step, const ckv_qwindow *qw, bool *compressed,
                                ckv_error *err)
{
    (void)state;
    return ckv_policy_on_decode(p, &c->c, budget, step, qw, compressed, err);
}

static ckv_cache_stats cpu_stats(void *state, const ckv_bcache *c)
{
    (void)state;
    return ckv_stats_of(ckv_cache_entries(&c->c), ckv_cache_max_len(&c->c), c->c.head_dim,
                        c->c.dtype);
}

static void cpu_describe(void *state, char *buf, size_t size)
{
    const cpu_state *s = state;
    if (s->n_threads > 0)
        snprintf(buf, size, "cpu: %d threads", s->n_threads);
    else
        snprintf(buf, size, "cpu: all online cores");
}

const ckv_backend_ops ckv_backend_cpu = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .cache_new = cpu_cache_new,
    .cache_free = cpu_cache_free,
    .fork = cpu_fork,
    .forward = cpu_forward,
    .decode_batch = cpu_decode_batch,
    .compress = cpu_compress,
    .on_decode = cpu_on_decode,
    .stats = cpu_stats,
    .describe = cpu_describe,
};

ckv_status ckv_backend_open(ckv_backend *b, const char *device, const ckv_model *m,
                            int32_t max_batch, int n_threads, char *fallback,
                            size_t fallback_size, ckv_error *err)
{
    memset(b, 0, sizeof *b);
    if (fallback && fallback_size)
        fallback[0] = 0;
    bool cuda = !strcmp(device, "cuda"), autod = !strcmp(device, "auto");
    if (!cuda && !autod && strcmp(device, "cpu"))
        return ckv_errorf(err, CKV_ERR_ARG, "device '%s': expected cpu, cuda or auto", device);
    if (cuda || autod) {
#if CKV_HAVE_CUDA
        b->ops = &ckv_backend_cuda;
        ckv_status st = b->ops->create(&b->state, m, max_batch, n_threads, err);
        if (!st || cuda)
            return st ? ckv_error_prefix(err, "device cuda") : CKV_OK;
        if (fallback)
            snprintf(fallback, fallback_size, "%s", err->msg);
        memset(err, 0, sizeof *err);
#else
        if (cuda)
            return ckv_errorf(err, CKV_ERR_DEVICE,
                              "device cuda: ckv was built without CUDA (configure with "
                              "-Dcuda=enabled)");
        if (fallback)
            snprintf(fallback, fallback_size, "ckv was built without CUDA");
#endif
    }
    b->ops = &ckv_backend_cpu;
    return b->ops->create(&b->state, m, max_batch, n_threads, err);
}

void ckv_backend_close(ckv_backend *b)
{
    if (b->ops && b->state)
        b->ops->destroy(b->state);
    memset(b, 0, sizeof *b);
}
