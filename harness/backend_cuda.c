/* The CUDA backend: the GPU decoder and GPU caches of kernels/cuda.h behind
 * the sweep's backend table. Policies run as GPU kernels
 * (ckv_gpu_policy_compress: the CPU reference's decisions, policies.md);
 * a policy those kernels do not implement (a parameter value or cache shape) runs
 * on the CPU reference instead: the cache is downloaded, compressed by
 * src/policies/ and uploaded again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_impl.h"
#include "cuda.h"

typedef struct {
    ckv_gpu *g;
    ckv_config cfg;
    ckv_gpu_cache **seq;   /* a decode batch's caches (grown to the largest batch) */
    int32_t max_seq;
    ckv_cache host;        /* scratch for a policy run on the CPU */
    bool host_ready;
    /* Device memory of the live caches, and the peak of all this backend
     * holds: weights, decoder scratch, caches and policy scratch. */
    size_t cache_bytes, peak_bytes;
    int64_t cpu_policy_runs;       /* compressions that fell back to the CPU */
    ckv_cuda_device dev;
} cuda_state;

/* Samples the peak after every call that can grow what is held: the
 * decoder's scratch grows with a pass's rows and a cache's capacity, the
 * policy scratch with the largest cache compressed. */
static void sample(cuda_state *s)
{
    size_t total = ckv_gpu_bytes(s->g) + s->cache_bytes +
                   ckv_gpu_policy_scratch_bytes(s->dev.index);
    if (total > s->peak_bytes)
        s->peak_bytes = total;
}

static ckv_status cuda_create(void **state, const ckv_model *m, int32_t max_batch, int n_threads,
                              ckv_error *err)
{
    (void)n_threads;
    cuda_state *s = calloc(1, sizeof *s);
    if (!s)
        return ckv_errorf(err, CKV_ERR_NOMEM, "cuda backend: out of memory");
    int32_t n = 0;
    ckv_status st = ckv_cuda_device_count(&n, err);
    if (!st)
        st = ckv_cuda_device_query(0, &s->dev, err);
    if (st)
        ckv_error_prefix(err, "no usable GPU");
    else
        st = ckv_gpu_create(&s->g, m, 0, max_batch, err);
    if (st) {
        free(s);
        return st;
    }
    s->cfg = m->cfg;
    sample(s);
    *state = s;
    return CKV_OK;
}

static void cuda_destroy(void *state)
{
    cuda_state *s = state;
    ckv_gpu_free(s->g);
    if (s->host_ready)
        ckv_cache_free(&s->host);
    free(s->seq);
    free(s);
}

/* add: counts what c's cache has grown by since it was last counted;
 * else takes away all that was counted for it. */
static void account(cuda_state *s, ckv_bcache *c, bool add)
{
    const size_t now = add ? ckv_gpu_cache_bytes(c->gpu) : 0;
    s->cache_bytes = s->cache_bytes - c->gpu_bytes + now;
    c->gpu_bytes = now;
    sample(s);
}

static ckv_status wrap(cuda_state *s, ckv_bcache **out, ckv_gpu_cache *gc, ckv_error *err)
{
    ckv_bcache *b = calloc(1, sizeof *b);
    if (!b) {
        ckv_gpu_cache_free(gc);
        return ckv_errorf(err, CKV_ERR_NOMEM, "cache: out of memory");
    }
    b->gpu = gc;
    account(s, b, true);
    *out = b;
    return CKV_OK;
}

static ckv_status cuda_cache_new(void *state, ckv_bcache **out, int32_t capacity,
                                 bool track_score, ckv_kv_dtype dtype, ckv_error *err)
{
    cuda_state *s = state;
    ckv_gpu_cache *gc;
    ckv_status st = ckv_gpu_cache_create(&gc, s->g, capacity, track_score, dtype, err);
    return st ? st : wrap(s, out, gc, err);
}

static void cuda_cache_free(void *state, ckv_bcache *c)
{
    if (!c)
        return;
    account(state, c, false);
    ckv_gpu_cache_free(c->gpu);
    free(c);
}

static ckv_status cuda_fork(void *state, ckv_bcache **out, const ckv_bcache *src,
                            int32_t capacity, ckv_error *err)
{
    ckv_gpu_cache *gc;
    ckv_status st = ckv_gpu_cache_fork(&gc, src->gpu, capacity, err);
    return st ? st : wrap(state, out, gc, err);
}

static ckv_status cuda_forward(void *state, ckv_bcache *c, const int32_t *tokens, int32_t n,
                               const ckv_forward_opts *opts, float *logits, ckv_error *err)
{
    cuda_state *s = state;
    ckv_status st = ckv_gpu_forward(s->g, c->gpu, tokens, n, opts, logits, err);
    sample(s);
    return st;
}

static ckv_status cuda_decode_batch(void *state, ckv_bcache *const *caches,
                                    const int32_t *tokens, int32_t n, bool no_degree_bias,
                                    float *logits, float *q_out, ckv_error *err)
{
    cuda_state *s = state;
    if (n > s->max_seq) {
        ckv_gpu_cache **grown = realloc(s->seq, (size_t)n * sizeof *grown);
        if (!grown)
            return ckv_errorf(err, CKV_ERR_NOMEM, "cuda backend: out of memory");
        s->seq = grown;
        s->max_seq = n;
    }
    for (int32_t i = 0; i < n; i++)
        s->seq[i] = caches[i]->gpu;
    ckv_status st =
        ckv_gpu_decode_batch(s->g, s->seq, tokens, n, no_degree_bias, logits, NULL, q_out, err);
    sample(s);
    return st;
}

/* The host scratch, shaped for the GPU cache c (capacity, and scores when it
 * tracks them, so that a merge sums them as on the CPU). */
static ckv_status host_for(cuda_state *s, const ckv_gpu_cache *c, ckv_error *err)
{
    int32_t cap = ckv_gpu_cache_capacity(c);
    bool score = ckv_gpu_cache_tracks_score(c);
    if (s->host_ready && s->host.capacity == cap && (s->host.score != NULL) == score)
        return CKV_OK;
    if (s->host_ready)
        ckv_cache_free(&s->host);
    s->host_ready = false;
    ckv_status st = ckv_cache_init(&s->host, s->cfg.n_layer, s->cfg.n_head_kv, s->cfg.head_dim,
                                   cap, score, err);
    s->host_ready = !st;
    return st;
}

static ckv_status cuda_compress(void *state, const ckv_policy *p, ckv_bcache *c, int32_t budget,
                                const ckv_qwindow *qw, ckv_error *err)
{
    cuda_state *s = state;
    ckv_status st = ckv_gpu_policy_compress(c->gpu, p, budget, qw, NULL, NULL, err);
    account(s, c, true); /* a filling policy's first call takes the cache's row map */
    if (st != CKV_ERR_UNSUPPORTED)
        return st;
    memset(err, 0, sizeof *err);
    s->cpu_policy_runs++;
    if ((st = host_for(s, c->gpu, err)) ||
        (st = ckv_gpu_cache_download(c->gpu, &s->host, err)) ||
        (st = ckv_policy_compress(p, &s->host, budget, qw, NULL, err)))
        return st;
    return ckv_gpu_cache_upload(c->gpu, &s->host, err);
}

static ckv_status cuda_on_decode(void *state, const ckv_policy *p, ckv_bcache *c, int32_t budget,
                                 int64_t step, const ckv_qwindow *qw, bool *compressed,
                                 ckv_error *err)
{
    bool due = ckv_policy_due(p, ckv_gpu_cache_max_len(c->gpu), budget, step, qw);
    if (compressed)
        *compressed = due;
    return due ? cuda_compress(state, p, c, budget, qw, err) : CKV_OK;
}

static ckv_cache_stats cuda_stats(void *state, const ckv_bcache *c)
{
    const cuda_state *s = state;
    return ckv_stats_of(ckv_gpu_cache_entries(c->gpu), ckv_gpu_cache_max_len(c->gpu),
                        s->cfg.head_dim, ckv_gpu_cache_dtype(c->gpu));
}

static void cuda_describe(void *state, char *buf, size_t size)
{
    const cuda_state *s = state;
    ckv_cuda_device now;
    ckv_error e = {0};
    if (ckv_cuda_device_query(s->dev.index, &now, &e))
        now.mem_free = now.mem_total = 0;
    snprintf(buf, size,
             "%s: weights and scratch %.1f MiB, caches %.1f MiB now, policy scratch %.1f MiB, "
             "peak held %.1f MiB; device %.1f of %.1f MiB in use; %lld compressions on the CPU "
             "reference",
             s->dev.name, (double)ckv_gpu_bytes(s->g) / (1 << 20),
             (double)s->cache_bytes / (1 << 20),
             (double)ckv_gpu_policy_scratch_bytes(s->dev.index) / (1 << 20),
             (double)s->peak_bytes / (1 << 20),
             (double)(now.mem_total - now.mem_free) / (1 << 20), (double)now.mem_total / (1 << 20),
             (long long)s->cpu_policy_runs);
}

const ckv_backend_ops ckv_backend_cuda = {
    .name = "cuda",
    .create = cuda_create,
    .destroy = cuda_destroy,
    .cache_new = cuda_cache_new,
    .cache_free = cuda_cache_free,
    .fork = cuda_fork,
    .forward = cuda_forward,
    .decode_batch = cuda_decode_batch,
    .compress = cuda_compress,
    .on_decode = cuda_on_decode,
    .stats = cuda_stats,
    .describe = cuda_describe,
};
