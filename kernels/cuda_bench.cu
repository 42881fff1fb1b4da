// The benchmarks of cuda_bench.h. Every buffer is allocated per shape and
// filled on the device (ckv_k_fill_uniform), so the largest shapes never
// pass through the host; only the checks download their (small) inputs.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "cuda.h"
#include "cuda_bench.h"
#include "cuda_check.h"
#include "cuda_gemm_lt.h"
#include "cuda_kernels.h"
#include "decoder_ops.h"
#include "quant.h"

struct ckv_bench_gpu {
    int32_t device, n_sm, l2_bytes;
    double peak_bw;
    cudaStream_t stream;
    cudaEvent_t start, stop;
    cublasHandle_t blas;
    void *blas_ws;
};

namespace {

constexpr size_t BLAS_WS = 32u << 20;  // as the decoder's
constexpr int MAX_SETS = 64;

// Copies of an input of `bytes` so that the runs rotating over them read
// four L2 caches' worth of fresh data between two reads of the same copy.
int input_sets(const ckv_bench_gpu *b, double bytes)
{
    double s = ceil(4.0 * b->l2_bytes / (bytes > 1 ? bytes : 1));
    return s < 1 ? 1 : s > MAX_SETS ? MAX_SETS : (int)s;
}

double median_of(double *t, int n)
{
    std::sort(t, t + n);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

// Relative L2 error; infinite when got holds a NaN (an unwritten output).
double rel_l2(const float *got, const double *want, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i]))
            return INFINITY;
        double d = (double)got[i] - want[i];
        num += d * d;
        den += want[i] * want[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

ckv_status dalloc(void *pp, size_t bytes, ckv_error *err)
{
    void **p = static_cast<void **>(pp);
    *p = NULL;
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess)
        return ckv_errorf(err, CKV_ERR_DEVICE,
                          "bench: cannot allocate %.2f GiB of device memory: %s",
                          (double)bytes / (1 << 30), cudaGetErrorString(e));
    return CKV_OK;
}

// One attention shape's device buffers: `sets` copies of the lists, one set
// of queries.
struct AttnBufs {
    void *k = NULL, *v = NULL;  // of the shape's dtype
    float *deg = NULL, *q = NULL, *out = NULL, *ws = NULL;
    float *score = NULL;  // with the shape's scores, a set's lists' entries
    int32_t *len0 = NULL;
    int sets = 1;
    int32_t lists = 0, heads = 0;
    size_t list_floats = 0;  // key elements of one set: lists * context * head_dim
    size_t list_bytes = 0;   // and their bytes
    ckv_k_attention_split split = {1, 0};
};

void attn_free(AttnBufs *a)
{
    void *ps[] = {a->k, a->v, a->deg, a->q, a->out, a->ws, a->len0, a->score};
    for (void *p : ps)
        cudaFree(p);
}

// Allocates and fills; len0 gets every list's length before the queries
// (the check shortens them afterwards).
ckv_status attn_alloc(ckv_bench_gpu *b, const ckv_attn_shape *s, int sets, uint64_t seed,
                      AttnBufs *a, ckv_error *err)
{
    const size_t T = (size_t)s->context, hd = (size_t)s->head_dim, n = (size_t)s->queries;
    a->sets = sets;
    a->lists = s->batch * s->n_head_kv;
    a->heads = a->lists * s->group;
    a->list_floats = (size_t)a->lists * T * hd;
    a->list_bytes = a->list_floats * ckv_kv_dtype_size(s->dtype);
    a->split = ckv_k_attention_plan(s->queries, a->heads, a->lists, s->head_dim, s->context, b->n_sm,
                                    b->peak_bw, SIZE_MAX / 2, s->dtype);
    const size_t ws = ckv_k_attention_ws(s->queries, a->split.splits, a->heads, s->head_dim);
    const size_t qf = n * a->heads * hd, degs = (size_t)a->lists * T;
    ckv_status st;
    if ((st = dalloc(&a->k, sets * a->list_bytes, err)) ||
        (st = dalloc(&a->v, sets * a->list_bytes, err)) ||
        (st = dalloc(&a->deg, sets * degs * sizeof(float), err)) ||
        (st = dalloc(&a->q, qf * sizeof(float), err)) ||
        (st = dalloc(&a->out, qf * sizeof(float), err)) ||
        (st = dalloc(&a->ws, ws * sizeof(float), err)) ||
        (st = dalloc(&a->len0, a->lists * sizeof(int32_t), err)) ||
        (s->scores && (st = dalloc(&a->score, sets * degs * sizeof(float), err))))
        return st;
    // Keys and queries in [-1, 1): scores q.k / sqrt(d) of spread about 1/3,
    // a softmax neither flat nor one-hot. Degrees as a compressed cache's.
    const size_t kv = sets * a->list_floats;
    if ((st = ckv_k_fill_uniform_kv(a->k, s->dtype, kv, -1, 1, seed, b->stream, err)) ||
        (st = ckv_k_fill_uniform_kv(a->v, s->dtype, kv, -1, 1, seed + 1, b->stream, err)) ||
        (st = ckv_k_fill_uniform(a->deg, sets * degs, 1, 8, seed + 2, b->stream, err)) ||
        (st = ckv_k_fill_uniform(a->q, qf, -1, 1, seed + 3, b->stream, err)) ||
        (s->scores &&
         (st = ckv_k_fill_uniform(a->score, sets * degs, 0.5f, 2, seed + 4, b->stream, err))))
        return st;
    int32_t *len0 = static_cast<int32_t *>(malloc(a->lists * sizeof(int32_t)));
    if (!len0)
        return ckv_errorf(err, CKV_ERR_NOMEM, "bench: out of host memory");
    for (int32_t j = 0; j < a->lists; j++)
        len0[j] = s->context - s->queries;
    // Every copy and fill goes on the benchmark's stream, which does not
    // wait for the legacy default stream.
    cudaError_t e = cudaMemcpyAsync(a->len0, len0, a->lists * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, b->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(b->stream);
    free(len0);
    CKV_CUDA(e);
    return CKV_OK;
}

ckv_status attn_launch(ckv_bench_gpu *b, const ckv_attn_shape *s, const AttnBufs *a, int set,
                       ckv_error *err)
{
    const size_t degs = (size_t)a->lists * s->context;
    ckv_k_kv_layer kv = {static_cast<char *>(a->k) + set * a->list_bytes,
                         static_cast<char *>(a->v) + set * a->list_bytes,
                         a->deg + set * degs,
                         a->score ? a->score + set * degs : NULL,
                         a->len0,
                         s->context,
                         NULL,
                         NULL,
                         s->dtype,
                         NULL,
                         NULL,
                         NULL};
    return ckv_k_attention(a->out, NULL, a->q, a->heads * s->head_dim, s->queries, a->heads,
                           a->lists, s->head_dim, &kv, 1.0f / sqrtf((float)s->head_dim),
                           s->degree_bias, a->split, a->ws, b->stream, err);
}

// The GPU time of each of n calls of run(r) enqueued back to back, with an
// event between two calls and one wait at the end: no call waits for the
// host to launch it (ms[r], r < n).
template <class F>
ckv_status time_stream(ckv_bench_gpu *b, int32_t n, double *ms, ckv_error *err, F run)
{
    cudaEvent_t *ev = static_cast<cudaEvent_t *>(calloc(n + 1, sizeof *ev));
    if (!ev)
        return ckv_errorf(err, CKV_ERR_NOMEM, "bench: out of host memory");
    ckv_status st = CKV_OK;
    cudaError_t e = cudaSuccess;
    int32_t made = 0;
    while (made <= n && (e = cudaEventCreate(&ev[made])) == cudaSuccess)
        made++;
    if (e == cudaSuccess)
        e = cudaEventRecord(ev[0], b->stream);
    for (int32_t r = 0; r < n && e == cudaSuccess && !st; r++)
        if (!(st = run(r)))
            e = cudaEventRecord(ev[r + 1], b->stream);
    if (e == cudaSuccess && !st)
        e = cudaEventSynchronize(ev[n]);
    for (int32_t r = 0; r < n && e == cudaSuccess && !st; r++) {
        float x = 0;
        e = cudaEventElapsedTime(&x, ev[r], ev[r + 1]);
        ms[r] = x;
    }
    if (!st && e != cudaSuccess)
        st = ckv_errorf(err, CKV_ERR_DEVICE, "bench: back-to-back runs: %s", cudaGetErrorString(e));
    for (int32_t i = 0; i < made; i++)
        cudaEventDestroy(ev[i]);
    free(ev);
    return st;
}

// Times warmup + repeats calls of run(r), r counting from 0, twice; the
// first `warmup` of each are dropped. Alone: one event pair around each call
// and a wait for it, so that a call starts on an idle stream and its time
// includes the host's launch latency (median, min, max). Back to back:
// time_stream, what a call costs inside a stream of work, as the decoder's
// graph runs its kernels (median).
template <class F>
ckv_status time_runs(ckv_bench_gpu *b, int32_t warmup, int32_t repeats, int sets,
                     ckv_bench_timing *t, ckv_error *err, F run)
{
    if (warmup < 0 || repeats < 1)
        return ckv_errorf(err, CKV_ERR_ARG, "bench: %d warm-up and %d timed runs", warmup, repeats);
    double *ms = static_cast<double *>(malloc((warmup + repeats) * sizeof(double)));
    if (!ms)
        return ckv_errorf(err, CKV_ERR_NOMEM, "bench: out of host memory");
    ckv_status st = CKV_OK;
    for (int32_t r = 0; r < warmup + repeats && !st; r++) {
        cudaError_t e = cudaEventRecord(b->start, b->stream);
        if (e == cudaSuccess && !(st = run(r)) &&
            (e = cudaEventRecord(b->stop, b->stream)) == cudaSuccess &&
            (e = cudaEventSynchronize(b->stop)) == cudaSuccess) {
            float x = 0;
            e = cudaEventElapsedTime(&x, b->start, b->stop);
            if (r >= warmup)
                ms[r - warmup] = x;
        }
        if (!st && e != cudaSuccess)
            st = ckv_errorf(err, CKV_ERR_DEVICE, "bench: timing run %d: %s", r,
                            cudaGetErrorString(e));
    }
    if (!st) {
        t->runs = repeats;
        t->input_sets = sets;
        t->kernel = NULL;
        t->median_ms = median_of(ms, repeats);
        t->min_ms = ms[0];
        t->max_ms = ms[repeats - 1];
        st = time_stream(b, warmup + repeats, ms, err, run);
    }
    if (!st)
        t->stream_ms = median_of(ms + warmup, repeats);
    free(ms);
    return st;
}

ckv_status check_shape(const ckv_attn_shape *s, ckv_error *err)
{
    if (s->batch < 1 || s->n_head_kv < 1 || s->group < 1 || s->queries < 1 ||
        s->context < s->queries || (s->head_dim != 64 && s->head_dim != 128) ||
        (s->scores && s->queries == 1))
        return ckv_errorf(err, CKV_ERR_ARG,
                          "bench: attention shape batch %d kv %d group %d head_dim %d context %d "
                          "queries %d%s is not valid",
                          s->batch, s->n_head_kv, s->group, s->head_dim, s->context, s->queries,
                          s->scores ? " with scores (prefill shapes only)" : "");
    return CKV_OK;
}

ckv_status attention_check(ckv_bench_gpu *b, const ckv_attn_shape *s, uint64_t seed,
                           AttnBufs *a, double *rel_err, ckv_error *err)
{
    ckv_status st = attn_alloc(b, s, 1, seed, a, err);
    if (st)
        return st;
    const size_t T = (size_t)s->context, hd = (size_t)s->head_dim, n = (size_t)s->queries,
                 kf = a->list_floats, degs = (size_t)a->lists * T, qf = n * a->heads * hd;
    // Lists of different lengths: list j holds up to 97 * (j % 5) fewer entries.
    int32_t *len0 = static_cast<int32_t *>(malloc(a->lists * sizeof(int32_t)));
    float *k = static_cast<float *>(malloc(kf * sizeof(float)));
    float *v = static_cast<float *>(malloc(kf * sizeof(float)));
    float *ld = static_cast<float *>(malloc(degs * sizeof(float)));
    float *q = static_cast<float *>(malloc(qf * sizeof(float)));
    float *got = static_cast<float *>(malloc(qf * sizeof(float)));
    float *want = static_cast<float *>(malloc(qf * sizeof(float)));
    float *S = static_cast<float *>(malloc(n * T * sizeof(float)));
    double *want64 = static_cast<double *>(malloc(qf * sizeof(double)));
    // With scores: their values before the launch (the CPU twin's start),
    // the CPU's after it, and the GPU's.
    const size_t sn = s->scores ? degs : 0;
    float *acc0 = static_cast<float *>(malloc(sn * sizeof(float) + 1));
    float *acc = static_cast<float *>(malloc(sn * sizeof(float) + 1));
    float *gacc = static_cast<float *>(malloc(sn * sizeof(float) + 1));
    double *mass = static_cast<double *>(malloc(sn * sizeof(double) + 1));
    if (!len0 || !k || !v || !ld || !q || !got || !want || !S || !want64 || !acc0 || !acc ||
        !gacc || !mass)
        st = ckv_errorf(err, CKV_ERR_NOMEM, "bench: out of host memory for the check");
    for (int32_t j = 0; !st && j < a->lists; j++) {
        int32_t short_by = 97 * (j % 5);
        len0[j] = s->context - s->queries - short_by;
        if (len0[j] < 0)
            len0[j] = 0;
    }
    cudaError_t e = cudaSuccess;
    if (!st && ((e = cudaMemcpyAsync(a->len0, len0, a->lists * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, b->stream)) != cudaSuccess ||
                (e = cudaMemsetAsync(a->out, 0xff, qf * sizeof(float), b->stream)) !=
                    cudaSuccess ||
                (e = cudaStreamSynchronize(b->stream)) != cudaSuccess ||
                (sn && (e = cudaMemcpy(acc0, a->score, sn * sizeof(float),
                                       cudaMemcpyDeviceToHost)) != cudaSuccess)))
        st = ckv_errorf(err, CKV_ERR_DEVICE, "bench: check setup: %s", cudaGetErrorString(e));
    if (!st)
        st = attn_launch(b, s, a, 0, err);
    if (!st && ((e = cudaStreamSynchronize(b->stream)) != cudaSuccess ||
                (e = cudaMemcpy(got, a->out, qf * sizeof(float), cudaMemcpyDeviceToHost)) !=
                    cudaSuccess ||
                (e = cudaMemcpy(k, a->k, a->list_bytes, cudaMemcpyDeviceToHost)) !=
                    cudaSuccess ||
                (e = cudaMemcpy(v, a->v, a->list_bytes, cudaMemcpyDeviceToHost)) !=
                    cudaSuccess ||
                (e = cudaMemcpy(ld, a->deg, degs * sizeof(float), cudaMemcpyDeviceToHost)) !=
                    cudaSuccess ||
                (e = cudaMemcpy(q, a->q, qf * sizeof(float), cudaMemcpyDeviceToHost)) !=
                    cudaSuccess ||
                (sn && (e = cudaMemcpy(gacc, a->score, sn * sizeof(float),
                                       cudaMemcpyDeviceToHost)) != cudaSuccess)))
        st = ckv_errorf(err, CKV_ERR_DEVICE, "bench: check run: %s", cudaGetErrorString(e));
    if (!st) {
        // bf16 lists were copied into the front half of k and v: widened
        // in place from the back, the values the kernel read.
        if (s->dtype == CKV_KV_BF16)
            for (size_t i = kf; i-- > 0;) {
                k[i] = ckv_bf16_to_f32(reinterpret_cast<uint16_t *>(k)[i]);
                v[i] = ckv_bf16_to_f32(reinterpret_cast<uint16_t *>(v)[i]);
            }
        for (size_t i = 0; i < degs; i++)
            ld[i] = logf(ld[i]);
        memcpy(acc, acc0, sn * sizeof(float));
        const size_t qs = (size_t)a->heads * hd;
        for (int32_t qh = 0; qh < a->heads; qh++) {
            const size_t j = (size_t)(qh / s->group);
            ckv_attend(want + qh * hd, qs, S, q + qh * hd, qs, s->queries, k + j * T * hd,
                       v + j * T * hd, s->degree_bias ? ld + j * T : NULL, len0[j],
                       len0[j] + s->queries, s->head_dim, 1.0f / sqrtf((float)hd),
                       s->scores ? acc + j * T : NULL, 1);
        }
        for (size_t i = 0; i < qf; i++)
            want64[i] = want[i];
        *rel_err = rel_l2(got, want64, qf);
        // The scores: the mass each entry gained (the start would dilute it).
        for (size_t i = 0; i < sn; i++) {
            gacc[i] -= acc0[i];
            mass[i] = (double)acc[i] - acc0[i];
        }
        if (sn)
            *rel_err = fmax(*rel_err, rel_l2(gacc, mass, sn));
    }
    free(len0), free(k), free(v), free(ld), free(q), free(got), free(want), free(S), free(want64);
    free(acc0), free(acc), free(gacc), free(mass);
    return st;
}

struct GemmBufs {
    ckv_bf16 *w = NULL, *x = NULL, *hb = NULL;
    float *y = NULL, *gu = NULL;
    ckv_gemm_lt *lt = NULL;  // c->lt's candidates
    int sets = 1;
};

void gemm_free(GemmBufs *g)
{
    void *ps[] = {g->w, g->x, g->hb, g->y, g->gu};
    for (void *p : ps)
        cudaFree(p);
    ckv_gemm_lt_free(g->lt);
}

// Weights uniform in +-1/sqrt(in), inputs in +-1: outputs of order 1.
// With swiglu the output is h [n][out / 2] (bf16), and gu the scratch of the
// cuBLAS path.
ckv_status gemm_alloc(ckv_bench_gpu *b, const ckv_gemm_case *c, int sets, uint64_t seed,
                      GemmBufs *g, ckv_error *err)
{
    const size_t wn = (size_t)c->out * c->in, xn = (size_t)c->n * c->in,
                 yn = (size_t)c->n * c->out;
    const float a = 1.0f / sqrtf((float)c->in);
    g->sets = sets;
    ckv_status st;
    if ((st = dalloc(&g->w, sets * wn * sizeof(ckv_bf16), err)) ||
        (st = dalloc(&g->x, xn * sizeof(ckv_bf16), err)) ||
        (st = ckv_k_fill_uniform_bf16(g->w, sets * wn, -a, a, seed, b->stream, err)) ||
        (st = ckv_k_fill_uniform_bf16(g->x, xn, -1, 1, seed + 1, b->stream, err)))
        return st;
    if (c->swiglu) {
        if ((st = dalloc(&g->gu, yn * sizeof(float), err)) ||
            (st = dalloc(&g->hb, yn / 2 * sizeof(ckv_bf16), err)))
            return st;
    } else if ((st = dalloc(&g->y, yn * sizeof(float), err))) {
        return st;
    }
    if (c->lt) {
        if ((st = ckv_gemm_lt_create(&g->lt, c->n, c->in, c->out, CKV_GEMM_LT_MAX, BLAS_WS,
                                     err)))
            return st;
        if (ckv_gemm_lt_count(g->lt) < c->lt)
            return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                              "bench: cublasLt has %d candidates for %d x %d -> %d, not %d",
                              ckv_gemm_lt_count(g->lt), c->n, c->in, c->out, c->lt);
    }
    CKV_CUDA(cudaStreamSynchronize(b->stream));
    return CKV_OK;
}

ckv_status gemm_launch(ckv_bench_gpu *b, const ckv_gemm_case *c, const GemmBufs *g, int set,
                       ckv_error *err)
{
    const ckv_bf16 *w = g->w + (size_t)set * c->out * c->in;
    if (c->lt) {
        ckv_status st = ckv_gemm_lt_run(g->lt, c->lt - 1, c->swiglu ? g->gu : g->y, g->x, w,
                                        b->stream, err);
        return st || !c->swiglu ? st : ckv_k_swiglu(g->hb, g->gu, c->n, c->out / 2, b->stream,
                                                    err);
    }
    if (c->swiglu)
        return ckv_k_gemm_swiglu_via(b->blas, c->path, g->hb, g->gu, g->x, w, c->n, c->in,
                                     c->out / 2, err);
    return ckv_k_gemm_via(b->blas, c->path, g->y, g->x, w, c->n, c->in, c->out, err);
}

float bf16_value(ckv_bf16 h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

ckv_status gemm_check(ckv_bench_gpu *b, const ckv_gemm_case *c, uint64_t seed, GemmBufs *g,
                      double *rel_err, ckv_error *err)
{
    ckv_status st = gemm_alloc(b, c, 1, seed, g, err);
    if (st)
        return st;
    const int32_t n = c->n, in = c->in, out = c->out, f = out / 2;
    const size_t wn = (size_t)out * in, xn = (size_t)n * in, yn = (size_t)n * out;
    const size_t got_n = c->swiglu ? (size_t)n * f : yn;
    ckv_bf16 *w = static_cast<ckv_bf16 *>(malloc(wn * sizeof(ckv_bf16)));
    ckv_bf16 *x = static_cast<ckv_bf16 *>(malloc(xn * sizeof(ckv_bf16)));
    ckv_bf16 *h = static_cast<ckv_bf16 *>(malloc(got_n * sizeof(ckv_bf16)));
    float *y = static_cast<float *>(malloc(got_n * sizeof(float)));
    double *want = static_cast<double *>(malloc(yn * sizeof(double)));
    if (!w || !x || !h || !y || !want)
        st = ckv_errorf(err, CKV_ERR_NOMEM, "bench: out of host memory for the check");
    cudaError_t e = cudaSuccess;
    void *dst = c->swiglu ? static_cast<void *>(g->hb) : static_cast<void *>(g->y);
    const size_t dst_bytes = got_n * (c->swiglu ? sizeof(ckv_bf16) : sizeof(float));
    if (!st && (e = cudaMemsetAsync(dst, 0xff, dst_bytes, b->stream)) != cudaSuccess)
        st = ckv_errorf(err, CKV_ERR_DEVICE, "bench: check setup: %s", cudaGetErrorString(e));
    if (!st)
        st = gemm_launch(b, c, g, 0, err);
    if (!st && ((e = cudaStreamSynchronize(b->stream)) != cudaSuccess ||
                (e = cudaMemcpy(c->swiglu ? static_cast<void *>(h) : static_cast<void *>(y),
                                dst, dst_bytes, cudaMemcpyDeviceToHost)) != cudaSuccess ||
                (e = cudaMemcpy(w, g->w, wn * sizeof(ckv_bf16), cudaMemcpyDeviceToHost)) !=
                    cudaSuccess ||
                (e = cudaMemcpy(x, g->x, xn * sizeof(ckv_bf16), cudaMemcpyDeviceToHost)) !=
                    cudaSuccess))
        st = ckv_errorf(err, CKV_ERR_DEVICE, "bench: check run: %s", cudaGetErrorString(e));
    if (!st) {
        for (int32_t i = 0; i < n; i++)
            for (int32_t o = 0; o < out; o++) {
                double acc = 0;
                for (int32_t k = 0; k < in; k++)
                    acc += (double)bf16_value(x[(size_t)i * in + k]) *
                           bf16_value(w[(size_t)o * in + k]);
                want[(size_t)i * out + o] = acc;
            }
        // With swiglu: silu(gate) * up in double against the bf16 outputs.
        if (c->swiglu)
            for (int32_t i = 0; i < n; i++)
                for (int32_t j = 0; j < f; j++) {
                    const double gate = want[(size_t)i * out + j],
                                 up = want[(size_t)i * out + f + j];
                    want[(size_t)i * f + j] = gate / (1 + exp(-gate)) * up;
                    y[(size_t)i * f + j] = bf16_value(h[(size_t)i * f + j]);
                }
        *rel_err = rel_l2(y, want, got_n);
    }
    free(w), free(x), free(h), free(y), free(want);
    return st;
}

ckv_status gemm_args(const ckv_gemm_case *c, ckv_error *err)
{
    if (c->lt < 0 || c->lt > CKV_GEMM_LT_MAX)
        return ckv_errorf(err, CKV_ERR_ARG, "bench: cublasLt candidate %d (1 to %d)", c->lt,
                          CKV_GEMM_LT_MAX);
    if (c->n < 1 || c->in < 1 || c->out < 1 || (c->swiglu && c->out % 2))
        return ckv_errorf(err, CKV_ERR_ARG, "bench: GEMM %d x %d x %d%s is not valid", c->n,
                          c->in, c->out, c->swiglu ? " with SwiGLU (out must be even)" : "");
    return CKV_OK;
}

}  // namespace

static ckv_status bench_setup(ckv_bench_gpu *b, ckv_error *err)
{
    CKV_CUDA(cudaSetDevice(b->device));
    CKV_CUDA(cudaDeviceGetAttribute(&b->n_sm, cudaDevAttrMultiProcessorCount, b->device));
    CKV_CUDA(cudaDeviceGetAttribute(&b->l2_bytes, cudaDevAttrL2CacheSize, b->device));
    ckv_status st = ckv_cuda_peak_bandwidth(b->device, &b->peak_bw, err);
    if (st)
        return st;
    CKV_CUDA(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
    CKV_CUDA(cudaEventCreate(&b->start));
    CKV_CUDA(cudaEventCreate(&b->stop));
    CKV_CUBLAS(cublasCreate(&b->blas));
    CKV_CUBLAS(cublasSetStream(b->blas, b->stream));
    st = dalloc(&b->blas_ws, BLAS_WS, err);
    if (st)
        return st;
    CKV_CUBLAS(cublasSetWorkspace(b->blas, b->blas_ws, BLAS_WS));
    return CKV_OK;
}

extern "C" ckv_status ckv_bench_gpu_create(ckv_bench_gpu **out, int32_t device, ckv_error *err)
{
    *out = NULL;
    ckv_bench_gpu *b = static_cast<ckv_bench_gpu *>(calloc(1, sizeof *b));
    if (!b)
        return ckv_errorf(err, CKV_ERR_NOMEM, "bench: out of host memory");
    b->device = device;
    ckv_status st = bench_setup(b, err);
    if (st) {
        ckv_bench_gpu_free(b);
        return st;
    }
    *out = b;
    return CKV_OK;
}

extern "C" void ckv_bench_gpu_free(ckv_bench_gpu *b)
{
    if (!b)
        return;
    if (b->blas)
        cublasDestroy(b->blas);
    cudaFree(b->blas_ws);
    if (b->start)
        cudaEventDestroy(b->start);
    if (b->stop)
        cudaEventDestroy(b->stop);
    if (b->stream)
        cudaStreamDestroy(b->stream);
    free(b);
}

extern "C" ckv_status ckv_bench_attention_check(ckv_bench_gpu *b, const ckv_attn_shape *s,
                                                uint64_t seed, double *rel_err, ckv_error *err)
{
    ckv_status st = check_shape(s, err);
    if (st)
        return st;
    AttnBufs a;
    st = attention_check(b, s, seed, &a, rel_err, err);
    attn_free(&a);
    return st;
}

extern "C" ckv_status ckv_bench_attention(ckv_bench_gpu *b, const ckv_attn_shape *s,
                                          int32_t warmup, int32_t repeats, uint64_t seed,
                                          ckv_bench_timing *t, ckv_error *err)
{
    ckv_status st = check_shape(s, err);
    if (st)
        return st;
    const double bytes = (double)s->batch * s->n_head_kv * s->context *
                         (2.0 * s->head_dim * ckv_kv_dtype_size(s->dtype) + sizeof(float));
    AttnBufs a;
    st = attn_alloc(b, s, input_sets(b, bytes), seed, &a, err);
    if (!st)
        st = time_runs(b, warmup, repeats, a.sets, t, err,
                       [&](int32_t r) { return attn_launch(b, s, &a, r % a.sets, err); });
    const ckv_k_attention_path path =
        ckv_k_attention_path_of(s->queries, false, a.heads, a.lists, s->dtype);
    t->kernel = path == CKV_ATTN_PREFILL_TF32 || path == CKV_ATTN_PREFILL_BF16
                    ? ckv_k_prefill_form_name(s->dtype, a.split)
                    : ckv_k_attention_path_name(path);
    attn_free(&a);
    return st;
}

extern "C" ckv_status ckv_bench_gemm_check(ckv_bench_gpu *b, const ckv_gemm_case *c,
                                           uint64_t seed, double *rel_err, ckv_error *err)
{
    ckv_status st = gemm_args(c, err);
    if (st)
        return st;
    GemmBufs g;
    st = gemm_check(b, c, seed, &g, rel_err, err);
    gemm_free(&g);
    return st;
}

extern "C" ckv_status ckv_bench_gemm(ckv_bench_gpu *b, const ckv_gemm_case *c, int32_t warmup,
                                     int32_t repeats, uint64_t seed, ckv_bench_timing *t,
                                     ckv_error *err)
{
    ckv_status st = gemm_args(c, err);
    if (st)
        return st;
    GemmBufs g;
    const size_t wn = (size_t)c->out * c->in;
    st = gemm_alloc(b, c, input_sets(b, (double)wn * sizeof(ckv_bf16)), seed, &g, err);
    if (!st)
        st = time_runs(b, warmup, repeats, g.sets, t, err,
                       [&](int32_t r) { return gemm_launch(b, c, &g, r % g.sets, err); });
    gemm_free(&g);
    return st;
}

extern "C" ckv_status ckv_bench_gemm_lt_check(ckv_bench_gpu *b, const ckv_gemm_case *c,
                                              uint64_t seed, double *rel_err, ckv_error *err)
{
    *rel_err = NAN;
    ckv_status st = gemm_args(c, err);
    if (st)
        return st;
    if (c->lt < 1 || c->swiglu)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "bench: the cublasLt check takes a plain product's candidate");
    const size_t yn = (size_t)c->n * c->out;
    float *got = static_cast<float *>(malloc(yn * sizeof(float)));
    float *ref = static_cast<float *>(malloc(yn * sizeof(float)));
    double *want = static_cast<double *>(malloc(yn * sizeof(double)));
    GemmBufs g;
    ckv_gemm_case base = *c;
    base.path = CKV_GEMM_CUBLAS;
    base.lt = 0;
    if (!got || !ref || !want)
        st = ckv_errorf(err, CKV_ERR_NOMEM, "bench: out of host memory for the check");
    else
        st = gemm_alloc(b, c, 1, seed, &g, err);
    // Each output poisoned first, so that a launch that writes nothing fails.
    const ckv_gemm_case *runs[2] = {c, &base};
    float *outs[2] = {got, ref};
    for (int i = 0; i < 2 && !st; i++) {
        cudaError_t e = cudaMemsetAsync(g.y, 0xff, yn * sizeof(float), b->stream);
        if (e == cudaSuccess && !(st = gemm_launch(b, runs[i], &g, 0, err)) &&
            (e = cudaStreamSynchronize(b->stream)) == cudaSuccess)
            e = cudaMemcpy(outs[i], g.y, yn * sizeof(float), cudaMemcpyDeviceToHost);
        if (!st && e != cudaSuccess)
            st = ckv_errorf(err, CKV_ERR_DEVICE, "bench: the cublasLt check: %s",
                            cudaGetErrorString(e));
    }
    if (!st) {
        for (size_t i = 0; i < yn; i++)
            want[i] = ref[i];
        *rel_err = rel_l2(got, want, yn);
    }
    gemm_free(&g);
    free(got), free(ref), free(want);
    return st;
}

extern "C" ckv_status ckv_bench_gemm_lt_names(ckv_bench_gpu *b, const ckv_gemm_case *c,
                                              int32_t max, int32_t *count, char (*names)[160],
                                              ckv_error *err)
{
    *count = 0;
    ckv_status st = gemm_args(c, err);
    if (st)
        return st;
    if (max < 0 || max > CKV_GEMM_LT_MAX)
        return ckv_errorf(err, CKV_ERR_ARG, "bench: %d cublasLt candidates (0 to %d)", max,
                          CKV_GEMM_LT_MAX);
    CKV_CUDA(cudaSetDevice(b->device));
    ckv_gemm_lt *p;
    st = ckv_gemm_lt_create(&p, c->n, c->in, c->out, CKV_GEMM_LT_MAX, BLAS_WS, err);
    if (st == CKV_ERR_UNSUPPORTED) {
        memset(err, 0, sizeof *err);
        return CKV_OK;
    }
    if (st)
        return st;
    *count = ckv_gemm_lt_count(p) < max ? ckv_gemm_lt_count(p) : max;
    for (int32_t k = 0; k < *count; k++)
        ckv_gemm_lt_name(p, k, names[k], sizeof names[k]);
    ckv_gemm_lt_free(p);
    return CKV_OK;
}

extern "C" ckv_status ckv_bench_same_sampled(const void *a, const void *b, size_t bytes,
                                             bool *same, ckv_error *err)
{
    enum { PLACES = 64, SPAN = 4096 };
    const size_t span = bytes < (size_t)SPAN ? bytes : (size_t)SPAN;
    char x[SPAN], y[SPAN];
    *same = true;
    for (int i = 0; i < PLACES && *same; i++) {
        const size_t at = (bytes - span) * i / (PLACES - 1) / 4 * 4;
        CKV_CUDA(cudaMemcpy(x, static_cast<const char *>(a) + at, span, cudaMemcpyDeviceToHost));
        CKV_CUDA(cudaMemcpy(y, static_cast<const char *>(b) + at, span, cudaMemcpyDeviceToHost));
        *same = !memcmp(x, y, span);
    }
    return CKV_OK;
}

extern "C" ckv_status ckv_bench_copy_rate(ckv_bench_gpu *b, size_t bytes, int32_t warmup,
                                          int32_t repeats, double *bps, ckv_error *err)
{
    *bps = NAN;
    if (bytes < 4 || bytes % 4 || warmup < 0 || repeats < 1)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "bench: copies of %zu bytes (a positive multiple of 4), %d warm-up and "
                          "%d timed", bytes, warmup, repeats);
    float *src = NULL, *dst = NULL;
    ckv_status st = dalloc(&src, bytes, err);
    if (!st)
        st = dalloc(&dst, bytes, err);
    if (!st)
        st = ckv_k_fill_uniform(src, bytes / 4, -1, 1, 0x636f7079, b->stream, err);
    cudaError_t e = cudaSuccess;
    if (!st && (e = cudaMemsetAsync(dst, 0xff, bytes, b->stream)) == cudaSuccess &&
        (e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, b->stream)) ==
            cudaSuccess)
        e = cudaStreamSynchronize(b->stream);
    if (!st && e != cudaSuccess)
        st = ckv_errorf(err, CKV_ERR_DEVICE, "bench: the copy: %s", cudaGetErrorString(e));
    bool same = false;
    if (!st && !(st = ckv_bench_same_sampled(src, dst, bytes, &same, err)) && !same)
        st = ckv_errorf(err, CKV_ERR_DEVICE,
                        "bench: a device-to-device copy of %zu bytes does not match its source",
                        bytes);
    ckv_bench_timing t = {};
    if (!st)
        st = time_runs(b, warmup, repeats, 1, &t, err, [&](int32_t) {
            CKV_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, b->stream));
            return CKV_OK;
        });
    if (!st && !(t.stream_ms > 0 && isfinite(t.stream_ms)))
        st = ckv_errorf(err, CKV_ERR_DEVICE, "bench: the copies took %g ms", t.stream_ms);
    if (!st)
        *bps = 2.0 * (double)bytes / (t.stream_ms * 1e-3);
    cudaFree(src);
    cudaFree(dst);
    return st;
}
