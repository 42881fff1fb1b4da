/* KV dump files: a written cache reads back exactly (hand values), and
 * malformed files fail with messages naming the file and dataset. Bad files
 * are built here with the HDF5 API directly, not with the code under test. */
#include <criterion/criterion.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvfile.h"

static char dir[64];

static void setup(void)
{
    strcpy(dir, "/tmp/ckv_kvfile_XXXXXX");
    cr_assert(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}

static const char *path_of(const char *name)
{
    static char buf[128];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

static void put(hid_t f, const char *name, hid_t type, int rank, const hsize_t *dims,
                const void *data)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t ds = H5Dcreate2(f, name, type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(ds >= 0);
    cr_assert(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
    H5Dclose(ds);
    H5Sclose(sp);
}

/* A valid 1 layer x 2 heads x 3 tokens x head_dim 2 dump, value i * 0.5 + 1
 * for element i of k and minus that for v; `mutate` may spoil it. */
enum { M_NONE, M_NO_V, M_V_SHAPE, M_NAN_K, M_INF_V, M_EMPTY, M_ZERO_LEN, M_DEG_SHAPE, M_DEG_LOW,
       M_QW_HEADS, M_K_INT };

static const char *write_dump(const char *name, int mutate)
{
    const char *p = path_of(name);
    hid_t f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(f >= 0);
    float k[12], v[12];
    for (int i = 0; i < 12; i++) {
        k[i] = i * 0.5f + 1;
        v[i] = -k[i];
    }
    if (mutate == M_NAN_K)
        k[7] = NAN;
    if (mutate == M_INF_V)
        v[2] = INFINITY;
    hsize_t d4[4] = {1, 2, 3, 2}, dv[4] = {1, 2, 2, 2}, d0[4] = {1, 2, 0, 2};
    if (mutate == M_EMPTY) {
        put(f, "k", H5T_NATIVE_FLOAT, 4, d0, k);
        put(f, "v", H5T_NATIVE_FLOAT, 4, d0, v);
    } else if (mutate == M_K_INT) {
        int ik[12] = {0};
        put(f, "k", H5T_NATIVE_INT, 4, d4, ik);
    } else {
        put(f, "k", H5T_NATIVE_FLOAT, 4, d4, k);
    }
    if (mutate != M_NO_V && mutate != M_EMPTY)
        put(f, "v", H5T_NATIVE_FLOAT, 4, mutate == M_V_SHAPE ? dv : d4, v);
    if (mutate == M_ZERO_LEN) {
        int32_t len[2] = {3, 0};
        hsize_t d2[2] = {1, 2};
        put(f, "length", H5T_NATIVE_INT32, 2, d2, len);
    }
    if (mutate == M_DEG_SHAPE || mutate == M_DEG_LOW) {
        float deg[6] = {1, 2, 3, 1, 0.5f, 1};
        hsize_t d3[3] = {1, 2, mutate == M_DEG_SHAPE ? 2 : 3};
        put(f, "degree", H5T_NATIVE_FLOAT, 3, d3, deg);
    }
    if (mutate == M_QW_HEADS) {
        float q[3 * 2 * 2] = {1};
        hsize_t dq[4] = {1, 3, 2, 2};
        put(f, "q_window", H5T_NATIVE_FLOAT, 4, dq, q);
    }
    H5Fclose(f);
    return p;
}

static void expect_error(int mutate, ckv_status st, const char *dataset, const char *also)
{
    const char *p = write_dump("bad.h5", mutate);
    ckv_kvdump d;
    ckv_error err = {0};
    cr_expect_eq(ckv_kvfile_read(p, &d, &err), st, "case %d: status %d, message %s", mutate,
                 err.status, err.msg);
    cr_expect(strstr(err.msg, p) != NULL, "case %d: '%s' does not name the file", mutate,
              err.msg);
    cr_expect(strstr(err.msg, dataset) != NULL, "case %d: '%s' does not name '%s'", mutate,
              err.msg, dataset);
    if (also)
        cr_expect(strstr(err.msg, also) != NULL, "case %d: '%s' lacks '%s'", mutate, err.msg,
                  also);
}

TestSuite(kvfile, .init = setup, .fini = teardown);

Test(kvfile, reads_defaults_and_values)
{
    const char *p = write_dump("ok.h5", M_NONE);
    ckv_kvdump d;
    ckv_error err = {0};
    cr_assert_eq(ckv_kvfile_read(p, &d, &err), CKV_OK, "%s", err.msg);
    cr_expect_eq(d.cache.n_layer, 1);
    cr_expect_eq(d.cache.n_head_kv, 2);
    cr_expect_eq(d.cache.capacity, 3);
    cr_expect_eq(d.cache.head_dim, 2);
    cr_expect_eq(d.cache.len[1], 3);
    cr_expect_eq(d.prompt_tokens, 3);
    cr_expect_eq(d.cache.round, 0);
    cr_expect(d.q_window == NULL && d.cache.score == NULL && d.model == NULL);
    /* Head 1, token 2, channel 1 is element 11: 11 * 0.5 + 1 = 6.5. */
    cr_expect_eq(ckv_cache_key(&d.cache, 0, 1, 2)[1], 6.5f);
    cr_expect_eq(ckv_cache_val(&d.cache, 0, 1, 0)[0], -4.0f);
    cr_expect_eq(d.cache.deg[4], 1.0f);
    ckv_kvdump_free(&d);
}

Test(kvfile, write_then_read_round_trip)
{
    ckv_cache c;
    cr_assert_eq(ckv_cache_init(&c, 2, 1, 3, 4, true, NULL), CKV_OK);
    c.len[0] = 4;
    c.len[1] = 2;
    for (int i = 0; i < 2 * 4 * 3; i++) {
        c.k[i] = (float)i + 0.25f;
        c.v[i] = -(float)i;
    }
    for (int i = 0; i < 8; i++) {
        c.deg[i] = (float)(1 + i % 3);
        c.score[i] = 0.125f * (float)i;
    }
    c.round = 7;
    float q[2 * 2 * 1 * 3] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    int32_t assign[2 * 5] = {0, 1, 1, 2, 3, 0, -1, 1, -1, -1};
    ckv_kvfile_extra x = {.q_window = q, .n_head = 2, .w = 1, .assign = assign,
                          .assign_tokens = 5, .assign_stride = 5, .prompt_tokens = 5,
                          .model = "m.gguf", .prompt = "héllo", .policy = "centroid",
                          .params = "chunk=4", .budget = "2", .budget_entries = 2};
    const char *p = path_of("rt.h5");
    ckv_error err = {0};
    cr_assert_eq(ckv_kvfile_write(p, &c, &x, &err), CKV_OK, "%s", err.msg);
    ckv_kvdump d;
    cr_assert_eq(ckv_kvfile_read(p, &d, &err), CKV_OK, "%s", err.msg);
    cr_expect_eq(d.cache.capacity, 4);
    cr_expect_eq(d.cache.len[0], 4);
    cr_expect_eq(d.cache.len[1], 2);
    cr_expect_eq(d.cache.round, 7);
    cr_expect_eq(d.prompt_tokens, 5);
    cr_expect_str_eq(d.model, "m.gguf");
    cr_expect_str_eq(d.prompt, "héllo");
    cr_expect_eq(d.n_head, 2);
    cr_expect_eq(d.w, 1);
    cr_expect_eq(d.q_window[5], 6.0f);
    /* Layer 1, token 1, channel 2: element (1 * 4 + 1) * 3 + 2 = 17. */
    cr_expect_eq(ckv_cache_key(&d.cache, 1, 0, 1)[2], 17.25f);
    cr_expect_eq(ckv_cache_degp(&d.cache, 1, 0)[1], 3.0f); /* deg[5] = 1 + 5 % 3 */
    cr_expect_eq(ckv_cache_scorep(&d.cache, 1, 0)[1], 0.625f);
    ckv_kvdump_free(&d);
    /* Rows past a list's length are zero in the file; assign is stored. */
    hid_t f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
    float kk[2 * 4 * 3];
    int32_t a[10];
    hid_t ds = H5Dopen2(f, "k", H5P_DEFAULT);
    cr_assert(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, kk) >= 0);
    H5Dclose(ds);
    ds = H5Dopen2(f, "assign", H5P_DEFAULT);
    cr_assert(H5Dread(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, a) >= 0);
    H5Dclose(ds);
    H5Fclose(f);
    cr_expect_eq(kk[(1 * 4 + 2) * 3], 0.0f);
    cr_expect_arr_eq(a, assign, sizeof a);
    /* No temporary file is left beside the output. */
    char cmd[160];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", dir);
    cr_expect_neq(system(cmd), 0);
    ckv_cache_free(&c);
}

Test(kvfile, errors_name_file_and_dataset)
{
    expect_error(M_NO_V, CKV_ERR_FORMAT, "'v'", "missing");
    expect_error(M_V_SHAPE, CKV_ERR_FORMAT, "'v'", "dimension 2");
    expect_error(M_NAN_K, CKV_ERR_NUMERIC, "'k'", "nan");
    expect_error(M_INF_V, CKV_ERR_NUMERIC, "'v'", "inf");
    expect_error(M_EMPTY, CKV_ERR_FORMAT, "'k'", "empty cache");
    expect_error(M_ZERO_LEN, CKV_ERR_FORMAT, "'length'", "empty");
    expect_error(M_DEG_SHAPE, CKV_ERR_FORMAT, "'degree'", "dimension 2");
    expect_error(M_DEG_LOW, CKV_ERR_NUMERIC, "'degree'", "0.5");
    expect_error(M_QW_HEADS, CKV_ERR_FORMAT, "'q_window'", "multiple of 2");
    expect_error(M_K_INT, CKV_ERR_FORMAT, "'k'", "float");
}

Test(kvfile, missing_and_non_hdf5_files)
{
    ckv_kvdump d;
    ckv_error err = {0};
    const char *p = path_of("absent.h5");
    cr_expect_eq(ckv_kvfile_read(p, &d, &err), CKV_ERR_IO);
    cr_expect(strstr(err.msg, p) != NULL);
    p = path_of("text.h5");
    FILE *fp = fopen(p, "w");
    fputs("not hdf5\n", fp);
    fclose(fp);
    cr_expect_eq(ckv_kvfile_read(p, &d, &err), CKV_ERR_FORMAT);
    cr_expect(strstr(err.msg, "not an HDF5 file") != NULL, "%s", err.msg);
}
