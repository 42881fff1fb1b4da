#include "key_similarity.h"

#include <math.h>
#include <stdlib.h>

ckv_status ckv_key_similarity(const ckv_cache *c, int32_t max_dist, double *out, ckv_error *err)
{
    if (max_dist < 1)
        return ckv_errorf(err, CKV_ERR_ARG, "key similarity: max distance %d < 1", max_dist);
    int32_t d = c->head_dim, cap = c->capacity;
    double *norm = malloc((size_t)cap * sizeof *norm);
    int64_t *count = malloc((size_t)max_dist * sizeof *count);
    if (!norm || !count) {
        free(norm);
        free(count);
        return ckv_errorf(err, CKV_ERR_NOMEM, "key similarity: out of memory");
    }
    for (int32_t l = 0; l < c->n_layer; l++) {
        double *row = out + (size_t)l * max_dist;
        for (int32_t j = 0; j < max_dist; j++) {
            row[j] = 0;
            count[j] = 0;
        }
        for (int32_t h = 0; h < c->n_head_kv; h++) {
            int32_t T = c->len[ckv_cache_lh(c, l, h)];
            for (int32_t t = 0; t < T; t++) {
                const float *k = ckv_cache_key(c, l, h, t);
                double s = 0;
                for (int32_t i = 0; i < d; i++)
                    s += (double)k[i] * k[i];
                norm[t] = sqrt(s);
            }
            for (int32_t t = 0; t < T; t++) {
                const float *a = ckv_cache_key(c, l, h, t);
                for (int32_t j = 1; j <= max_dist && t + j < T; j++) {
                    const float *b = ckv_cache_key(c, l, h, t + j);
                    double s = 0;
                    if (norm[t] >= 1e-30 && norm[t + j] >= 1e-30) {
                        for (int32_t i = 0; i < d; i++)
                            s += (double)a[i] * b[i];
                        s /= norm[t] * norm[t + j];
                    }
                    row[j - 1] += s;
                    count[j - 1]++;
                }
            }
        }
        for (int32_t j = 0; j < max_dist; j++)
            row[j] = count[j] ? row[j] / (double)count[j] : NAN;
    }
    free(norm);
    free(count);
    return CKV_OK;
}
