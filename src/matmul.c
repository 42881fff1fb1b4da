#include "matmul.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CKV_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CKV_CLONES
#endif

enum { LANES = 16, XTILE = 64 };

/* A vector of LANES floats that may be unaligned; GCC lowers it to whatever
 * registers the clone's ISA has (zmm, 2 ymm, or 4 xmm). */
typedef float vecf __attribute__((vector_size(LANES * sizeof(float)), aligned(sizeof(float))));

static inline __attribute__((always_inline)) float hsum(vecf v)
{
    float s = 0;
    for (int l = 0; l < LANES; l++)
        s += v[l];
    return s;
}

/* Dot products of up to four rows of X with two rows of W: each loaded
 * vector feeds several FMAs, and partial sums stay in registers. Rows past
 * `rows` alias row 0 and are discarded by the caller. */
static inline __attribute__((always_inline)) void dot4x2(const float *const x[4], const float *w0, const float *w1, int32_t K,
                          float out[4][2])
{
    vecf a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
    int32_t k = 0;
    for (; k + LANES <= K; k += LANES) {
        vecf b0 = *(const vecf *)(w0 + k), b1 = *(const vecf *)(w1 + k);
        vecf x0 = *(const vecf *)(x[0] + k), x1 = *(const vecf *)(x[1] + k);
        vecf x2 = *(const vecf *)(x[2] + k), x3 = *(const vecf *)(x[3] + k);
        a00 += x0 * b0, a01 += x0 * b1, a10 += x1 * b0, a11 += x1 * b1;
        a20 += x2 * b0, a21 += x2 * b1, a30 += x3 * b0, a31 += x3 * b1;
    }
    vecf acc[4][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
    for (int r = 0; r < 4; r++) {
        float t0 = 0, t1 = 0;
        for (int32_t kk = k; kk < K; kk++) {
            t0 += x[r][kk] * w0[kk];
            t1 += x[r][kk] * w1[kk];
        }
        out[r][0] = hsum(acc[r][0]) + t0;
        out[r][1] = hsum(acc[r][1]) + t1;
    }
}

CKV_CLONES
void ckv_matmul_nt(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w,
                   int64_t ldw, const float *bias, int32_t n, int32_t m, int32_t K, float alpha,
                   int n_threads)
{
    /* Tiles of XTILE rows of X stay in cache while every row of W streams by. */
    for (int32_t i0 = 0; i0 < n; i0 += XTILE) {
        int32_t i1 = i0 + XTILE < n ? i0 + XTILE : n;
#pragma omp parallel for schedule(static) num_threads(n_threads) if (m >= 64)
        for (int32_t jp = 0; jp < (m + 1) / 2; jp++) {
            int32_t j = 2 * jp, cols = m - j < 2 ? 1 : 2;
            const float *w0 = w + (int64_t)j * ldw, *w1 = w + (int64_t)(j + cols - 1) * ldw;
            for (int32_t i = i0; i < i1; i += 4) {
                const float *xr[4];
                int rows = i1 - i < 4 ? i1 - i : 4;
                for (int r = 0; r < 4; r++)
                    xr[r] = x + (int64_t)(i + (r < rows ? r : 0)) * ldx;
                float out[4][2];
                dot4x2(xr, w0, w1, K, out);
                for (int r = 0; r < rows; r++)
                    for (int c = 0; c < cols; c++)
                        y[(int64_t)(i + r) * ldy + j + c] =
                            alpha * out[r][c] + (bias ? bias[j + c] : 0.0f);
            }
        }
    }
}

CKV_CLONES
void ckv_matmul_nn(float *y, int64_t ldy, const float *p, int64_t ldp, const float *v,
                   int64_t ldv, int32_t n, int32_t T, int32_t d, int n_threads)
{
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n > 1)
    for (int32_t i = 0; i < n; i++) {
        float *yi = y + (int64_t)i * ldy;
        const float *pi = p + (int64_t)i * ldp;
        memset(yi, 0, (size_t)d * sizeof(float));
        for (int32_t t = 0; t < T; t++) {
            float a = pi[t];
            if (a == 0.0f)
                continue;
            const float *vt = v + (int64_t)t * ldv;
            for (int32_t c = 0; c < d; c++)
                yi[c] += a * vt[c];
        }
    }
}
