#include "decoder_ops.h"

#include <math.h>

#include "matmul.h"
#include "quant.h"

void ckv_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++)
        out[i] = x[i] * r * w[i];
}

void ckv_rope_inv_freq(double *inv_freq, const ckv_config *c, const float *rope_freqs)
{
    for (int i = 0; i < c->n_rot / 2; i++) {
        double f = pow((double)c->rope_base, -2.0 * i / c->n_rot) * c->rope_freq_scale;
        if (rope_freqs)
            f /= rope_freqs[i];
        inv_freq[i] = f;
    }
}

void ckv_rope(float *v, int head_dim, const double *inv_freq, int64_t pos, ckv_rope_type type)
{
    int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        double th = (double)pos * inv_freq[i];
        float c = (float)cos(th), s = (float)sin(th);
        int a = type == CKV_ROPE_NEOX ? i : 2 * i;
        int b = type == CKV_ROPE_NEOX ? i + half : 2 * i + 1;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
    }
}

static float silu_mul(float g, float u)
{
    return g / (1.0f + expf(-g)) * u;
}

void ckv_swiglu(float *g, const float *u, size_t n)
{
    for (size_t i = 0; i < n; i++)
        g[i] = silu_mul(g[i], u[i]);
}

void ckv_swiglu_bf16(uint16_t *out, const float *gu, int32_t n, int32_t n_ff)
{
    for (int32_t i = 0; i < n; i++) {
        const float *g = gu + (size_t)i * 2 * n_ff;
        for (int32_t j = 0; j < n_ff; j++)
            out[(size_t)i * n_ff + j] = ckv_f32_to_bf16(silu_mul(g[j], g[n_ff + j]));
    }
}

/* Softmax of one score row in place; the row's first `visible` entries take
 * part, the rest get probability 0. */
static void softmax_row(float *row, int32_t visible, int32_t len)
{
    float mx = -INFINITY;
    for (int32_t t = 0; t < visible; t++)
        if (row[t] > mx)
            mx = row[t];
    double sum = 0;
    for (int32_t t = 0; t < visible; t++) {
        row[t] = expf(row[t] - mx);
        sum += row[t];
    }
    float inv = (float)(1.0 / sum);
    for (int32_t t = 0; t < visible; t++)
        row[t] *= inv;
    for (int32_t t = visible; t < len; t++)
        row[t] = 0.0f;
}

void ckv_attend(float *out, size_t out_stride, float *S, const float *q, size_t q_stride,
                int32_t n, const float *k, const float *v, const float *logdeg, int32_t len0,
                int32_t len, int head_dim, float scale, float *acc, int n_threads)
{
    /* S = Q K^T * scale (+ log deg), causal within the new entries, softmax,
     * then O = P V; both products go through the BLAS-like kernels. */
    ckv_matmul_nt(S, len, q, (int64_t)q_stride, k, head_dim, NULL, n, len, head_dim, scale,
                  n_threads);
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n > 1)
    for (int32_t i = 0; i < n; i++) {
        float *row = S + (size_t)i * len;
        if (logdeg)
            for (int32_t t = 0; t < len0 + i + 1; t++)
                row[t] += logdeg[t];
        softmax_row(row, len0 + i + 1, len);
    }
    if (acc)
        for (int32_t i = 0; i < n; i++)
            for (int32_t t = 0; t < len; t++)
                acc[t] += S[(size_t)i * len + t];
    ckv_matmul_nn(out, (int64_t)out_stride, S, len, v, head_dim, n, len, head_dim, n_threads);
}
