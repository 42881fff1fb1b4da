/* Key similarity against hand values, and the synthetic caches' drift. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "key_similarity.h"
#include "synthetic_kv.h"

Test(key_similarity, hand_values)
{
    /* One layer, two heads. Head 0 keys (1,0), (1,0), (0,1): distance 1
     * pairs have cosines 1 and 0, distance 2 pair 0. Head 1 keys (1,1),
     * (2,2), (0,0), the last of zero norm so its cosines count 0: distance 1
     * cosines 1 and 0, distance 2 cosine 0. Means over both heads: 0.5 and 0;
     * distance 3 has no pair (NAN). */
    ckv_cache c;
    cr_assert_eq(ckv_cache_init(&c, 1, 2, 2, 3, false, NULL), CKV_OK);
    const float k0[3][2] = {{1, 0}, {1, 0}, {0, 1}}, k1[3][2] = {{1, 1}, {2, 2}, {0, 0}};
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 2; i++) {
            ckv_cache_key(&c, 0, 0, t)[i] = k0[t][i];
            ckv_cache_key(&c, 0, 1, t)[i] = k1[t][i];
        }
    c.len[0] = c.len[1] = 3;
    double out[3];
    cr_assert_eq(ckv_key_similarity(&c, 3, out, NULL), CKV_OK);
    cr_expect_float_eq(out[0], 0.5, 1e-12);
    cr_expect_float_eq(out[1], 0.0, 1e-12);
    cr_expect(isnan(out[2]));
    ckv_cache_free(&c);
}

Test(synthetic_kv, keys_drift_and_seed_reproduces)
{
    /* Neighbouring keys are similar and similarity decays with distance,
     * as in real caches (fixture: 0.87 at distance 1 in layer 15). */
    ckv_cache a, b;
    float *qa, *qb;
    cr_assert_eq(ckv_synthetic_kv(&a, &qa, 1, 2, 6, 32, 1024, 8, 5, NULL), CKV_OK);
    cr_assert_eq(ckv_synthetic_kv(&b, &qb, 1, 2, 6, 32, 1024, 8, 5, NULL), CKV_OK);
    cr_expect_arr_eq(a.k, b.k, sizeof(float) * 2 * 1024 * 32);
    cr_expect_arr_eq(qa, qb, sizeof(float) * 6 * 8 * 32);
    double sim[512];
    cr_assert_eq(ckv_key_similarity(&a, 512, sim, NULL), CKV_OK);
    cr_expect(sim[0] > 0.75 && sim[0] < 0.95, "distance 1: %g", sim[0]);
    cr_expect(sim[63] < sim[0] - 0.02, "distance 64 %g vs 1 %g", sim[63], sim[0]);
    cr_expect(sim[511] < sim[63] - 0.1, "distance 512 %g vs 64 %g", sim[511], sim[63]);
    ckv_cache_free(&a);
    ckv_cache_free(&b);
    free(qa);
    free(qb);
}
